//! Kernel parameters: the one layout the session recorder writes and every kernel reads
//! (as ggml's kargs are shared by host and shader). GPU kernel sources declare the same
//! structs field for field; the asserts below pin their sizes and offsets, and the kernel
//! sources assert the same numbers.
const std = @import("std");

/// y[r,:] = (x[r,:] · rsqrt(Σx²·inv_hidden + eps)) · w, for `rows` rows of `hidden` f32.
pub const RmsNorm = extern struct {
    rows: u32,
    hidden: u32,
    eps: f32,
    /// fl(1/hidden), computed once on the host so every backend multiplies by the same value.
    inv_hidden: f32,
};

/// out[r,j] = Σ_k y[r,k]·W[j,k], W stored as ggml type `type_id`, `row_bytes` bytes per vocab row.
pub const Matvec = extern struct {
    rows: u32,
    hidden: u32,
    vocab: u32,
    type_id: u32,
    row_bytes: u32,
    /// ceil(hidden / 256): the canonical chunks of one row.
    chunks: u32,
    /// 1 when the input rows are the output of the RMS norm recorded just before (the
    /// session knows): every value is already past the dot-operand flush point, so a GPU
    /// kernel reads it as is. 0: the kernel flushes each value as it reads it.
    input_flushed: u32 = 0,
};

/// data[i] = tanh(data[i]·inv_cap)·cap for the first `values` f32.
pub const Softcap = extern struct {
    values: u64,
    cap: f32,
    /// fl(1/cap), computed once on the host, like inv_hidden.
    inv_cap: f32,
};

/// counts[r] = the number of NaN or ±Inf values in row r of `rows` rows of `row_values` f32.
/// A GPU backend may split each row into `segments` (counts then holds rows × segments
/// partial counts, which a second kernel sums); the session always records 1.
pub const CountNonFinite = extern struct {
    rows: u32,
    row_values: u32,
    segments: u32 = 1,
};

/// Bytes of one vocab row's slot in a stage of a matvec's ring (params.h
/// LMH_STAGE_ROW_BYTES): what a GPU backend sizes a kernel's shared memory by.
pub const stage_row_bytes = 288;

/// kernels.h's lane layout (LMH_LANE_LAYOUT): where a backend's modules take it (CUDA's), the
/// matvec of these types in passes of `rows_per_pass` reads a copy of the head that the kernel
/// "lane_relayout" makes, with each whole chunk's code bytes ahead of its scales, in rows of
/// `laneRowBytes`.
pub fn laneLayout(type_id: u32, rows_per_pass: u32) bool {
    const Type = @import("../numerics/formats.zig").Type;
    return switch (type_id) {
        @backingInt(Type.q4_0), @backingInt(Type.q8_0), @backingInt(Type.iq4_nl) => true,
        @backingInt(Type.q5_0) => rows_per_pass < 8,
        else => false,
    };
}

pub fn laneRowBytes(row_bytes: u32) u32 {
    std.debug.assert(row_bytes <= std.math.maxInt(u32) - 15);
    return std.mem.alignForward(u32, row_bytes, 16);
}

comptime {
    std.debug.assert(@sizeOf(RmsNorm) == 16);
    std.debug.assert(@sizeOf(Matvec) == 28);
    std.debug.assert(@sizeOf(Softcap) == 16 and @offsetOf(Softcap, "cap") == 8);
    std.debug.assert(@sizeOf(CountNonFinite) == 12);
}
