//! The one definition of every GGML block format lmhead accepts for the output head
//! (hf2q-head-spec.md §4): the size/offset table, the scalar reference decoders (bit-exact
//! with gguf-py's numpy dequantization) and the lane-major chunk decoder used by the CPU kernel.
const std = @import("std");
const builtin = @import("builtin");

/// ggml type ids (ggml.h `enum ggml_type`).
pub const Type = enum(u32) {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    iq4_nl = 20,
    iq4_xs = 23,
    bf16 = 30,
};

pub const Format = struct {
    type: Type,
    /// ggml name, e.g. "Q6_K", "F32".
    name: []const u8,
    block_values: u32,
    block_bytes: u32,
    /// Byte offset of the f16 super-scale `d` inside a block (0 for dense types, unused there).
    d_offset: u32,
    /// Byte offset of the f16 `dmin`/`m` field if the format has one.
    m_offset: ?u32,
    /// hf2q admits it as an untied output.weight (all 14 types).
    head: bool,
    /// hf2q also admits it as a tied token_embd head.
    tied_head: bool,
};

/// Every format, in ggml type-id order.
pub const all = [_]Format{
    .{ .type = .f32, .name = "F32", .block_values = 1, .block_bytes = 4, .d_offset = 0, .m_offset = null, .head = true, .tied_head = true },
    .{ .type = .f16, .name = "F16", .block_values = 1, .block_bytes = 2, .d_offset = 0, .m_offset = null, .head = true, .tied_head = true },
    .{ .type = .q4_0, .name = "Q4_0", .block_values = 32, .block_bytes = 18, .d_offset = 0, .m_offset = null, .head = true, .tied_head = true },
    .{ .type = .q5_0, .name = "Q5_0", .block_values = 32, .block_bytes = 22, .d_offset = 0, .m_offset = null, .head = true, .tied_head = false },
    .{ .type = .q5_1, .name = "Q5_1", .block_values = 32, .block_bytes = 24, .d_offset = 0, .m_offset = 2, .head = true, .tied_head = false },
    .{ .type = .q8_0, .name = "Q8_0", .block_values = 32, .block_bytes = 34, .d_offset = 0, .m_offset = null, .head = true, .tied_head = true },
    .{ .type = .q2_k, .name = "Q2_K", .block_values = 256, .block_bytes = 84, .d_offset = 80, .m_offset = 82, .head = true, .tied_head = true },
    .{ .type = .q3_k, .name = "Q3_K", .block_values = 256, .block_bytes = 110, .d_offset = 108, .m_offset = null, .head = true, .tied_head = false },
    .{ .type = .q4_k, .name = "Q4_K", .block_values = 256, .block_bytes = 144, .d_offset = 0, .m_offset = 2, .head = true, .tied_head = true },
    .{ .type = .q5_k, .name = "Q5_K", .block_values = 256, .block_bytes = 176, .d_offset = 0, .m_offset = 2, .head = true, .tied_head = true },
    .{ .type = .q6_k, .name = "Q6_K", .block_values = 256, .block_bytes = 210, .d_offset = 208, .m_offset = null, .head = true, .tied_head = true },
    .{ .type = .iq4_nl, .name = "IQ4_NL", .block_values = 32, .block_bytes = 18, .d_offset = 0, .m_offset = null, .head = true, .tied_head = false },
    .{ .type = .iq4_xs, .name = "IQ4_XS", .block_values = 256, .block_bytes = 136, .d_offset = 0, .m_offset = null, .head = true, .tied_head = false },
    .{ .type = .bf16, .name = "BF16", .block_values = 1, .block_bytes = 2, .d_offset = 0, .m_offset = null, .head = true, .tied_head = true },
};

/// The table entry for a ggml type id, or null for ids not in the table.
pub fn format(type_id: u32) ?Format {
    for (all) |f| {
        if (@backingInt(f.type) == type_id) return f;
    }
    return null;
}

/// Comptime-known entry for a Type.
pub fn of(comptime t: Type) Format {
    return comptime format(@backingInt(t)).?;
}

/// Bytes of a row of `values` elements, or null if values is not a multiple of block_values
/// or the size overflows u64.
pub fn rowBytes(t: Type, values: u64) ?u64 {
    const f = format(@backingInt(t)).?;
    if (values % f.block_values != 0) return null;
    return std.math.mul(u64, values / f.block_values, f.block_bytes) catch null;
}

// ---------------------------------------------------------------------------------------------
// Scalar reference decoders
// ---------------------------------------------------------------------------------------------
//
// Exactness argument shared by every quantized type: an f16 has an 11-bit significand; every factor
// multiplied into it is an integer with few significant bits (scales |sc| ≤ 128: ≤ 7 bits; codes
// |q| ≤ 32: ≤ 5 bits; IQ4 table entries |K| ≤ 127: ≤ 7 bits), so the longest product chain
// (Q6_K, IQ4_XS: 11+7+5) has ≤ 23 significant bits and every product is EXACT in binary32. Nothing can
// underflow (the smallest f16, 2^-24, times a nonzero integer is far above 2^-126) or overflow
// (65504·128·32 < 2^31). Only the final `± min` of Q5_1/Q2_K/Q4_K/Q5_K rounds, once.
// Hence neither the association of the products nor FMA contraction can change a result; the order
// is still written out per type as gguf-py (`gguf/quants.py`) and ggml's C reference do it.
// ±0 signs follow IEEE (e.g. a negative d times a zero code gives -0.0), the same in all orders.

/// IQ4_NL / IQ4_XS non-linear code table.
pub const iq4_values = [16]i8{ -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113 };

/// Exact f16 → f32 conversion on bits. NaN payloads are kept and signalling NaNs are NOT quieted
/// (0x7C01 → 0x7F802000), which is what numpy (and so gguf-py) does; hardware converters (x86 F16C,
/// ARM FCVT) would quiet them. Subnormals become normal f32 values.
pub fn f16ToF32(h: u16) f32 {
    const sign: u32 = @as(u32, h & 0x8000) << 16;
    const exp: u32 = (h >> 10) & 0x1f;
    const man: u32 = h & 0x3ff;
    if (exp == 0x1f) return @bitCast(sign | 0x7f800000 | (man << 13));
    if (exp != 0) return @bitCast(sign | ((exp + 112) << 23) | (man << 13));
    // ±0 or subnormal: man · 2^-24, exact (man < 2^10).
    const mag: f32 = @as(f32, @floatFromInt(man)) * 0x1p-24;
    return @bitCast(sign | @as(u32, @bitCast(mag)));
}

/// Exact bf16 → f32: the 16 bits become the high half of the f32 (NaNs kept bit for bit).
pub fn bf16ToF32(h: u16) f32 {
    return @bitCast(@as(u32, h) << 16);
}

inline fn rdF16(src: []const u8, off: usize) f32 {
    return f16ToF32(std.mem.readInt(u16, src[off..][0..2], .little));
}

inline fn fi(x: i32) f32 {
    return @floatFromInt(x);
}

/// 6-bit scale `j` (0..15) of a Q3_K block from its 12 packed bytes: the low 4 bits are the low nibble
/// of byte j (j < 8) or the high nibble of byte j−8 (j ≥ 8); the high 2 bits are bits 2·(j/4)+1..2·(j/4)
/// of byte 8 + j%4.
fn q3kScale(sc: *const [12]u8, j: usize) i32 {
    const lo: u8 = if (j < 8) sc[j] & 0xf else sc[j - 8] >> 4;
    const hi: u8 = (sc[8 + j % 4] >> @intCast(2 * (j / 4))) & 3;
    return @as(i32, lo | (hi << 4));
}

/// 6-bit scale and min of sub-block `j` (0..7) of a Q4_K/Q5_K block (ggml get_scale_min_k4).
fn k4ScaleMin(sc: *const [12]u8, j: usize) struct { sc: u8, m: u8 } {
    if (j < 4) return .{ .sc = sc[j] & 63, .m = sc[j + 4] & 63 };
    return .{
        .sc = (sc[j + 4] & 0xf) | ((sc[j - 4] >> 6) << 4),
        .m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4),
    };
}

/// Decodes one block (the scalar reference, written for clarity). Per type, in IEEE binary32, with
/// d/dmin/m the block's f16 fields converted exactly to f32 and q the integer code:
///  - F32: the 4 bytes are the value (bit copy). F16: `f16ToF32`, exact. BF16: `bf16ToF32`, exact.
///  - Q4_0:  `d·(q−8)`, q = nibble (element j: low nibble of qs[j], j+16: high nibble); exact.
///  - Q5_0:  `d·(q−16)`, q = nibble | (bit j of qh) << 4; exact.
///  - Q5_1:  `(d·q) + m`, q ∈ [0,31]; d·q exact, the add rounds once.
///  - Q8_0:  `d·q`, q int8; exact.
///  - IQ4_NL: `d·K[q]`, K = iq4_values; exact.
///  - Q2_K:  `(d·sc)·q − (dmin·mn)`, sc/mn the 4-bit scale/min of the 16-value sub-block, q ∈ [0,3];
///           d·sc exact, (d·sc)·q exact, dmin·mn exact, the subtraction rounds once.
///  - Q3_K:  `(d·(s−32))·q`, s the 6-bit scale of the 16-value sub-block, q = q2 − (hbit ? 0 : 4) ∈ [−4,3];
///           both products exact.
///  - Q4_K:  `(d·sc)·q − (dmin·mn)`, 6-bit sc/mn per 32-value sub-block, q ∈ [0,15]; products exact,
///           the subtraction rounds once.
///  - Q5_K:  as Q4_K with q = nibble + 16·hbit ∈ [0,31]; products exact, the subtraction rounds once.
///  - Q6_K:  `(d·sc)·q`, sc int8 per 16-value sub-block, q = (4 low | 2 high bits) − 32 ∈ [−32,31];
///           d·sc exact (≤ 18 bits), (d·sc)·q exact (≤ 23 bits).
///  - IQ4_XS: `(d·(ls−32))·K[q]`, ls the 6-bit scale of the 32-value sub-block; d·(ls−32) exact,
///           the second product exact (≤ 23 bits).
/// The integer parts (q−8, s−32, …) are computed in i32 and converted to f32 exactly. Orders match
/// gguf-py's numpy code exactly (it is the fixture); ggml's C reference uses the same orders.
pub fn decodeBlock(comptime t: Type, src: *const [of(t).block_bytes]u8, dst: *[of(t).block_values]f32) void {
    switch (t) {
        .f32 => dst[0] = @bitCast(std.mem.readInt(u32, src, .little)),
        .f16 => dst[0] = f16ToF32(std.mem.readInt(u16, src, .little)),
        .bf16 => dst[0] = bf16ToF32(std.mem.readInt(u16, src, .little)),
        .q4_0 => {
            const d = rdF16(src, 0);
            for (0..16) |j| {
                const b = src[2 + j];
                dst[j] = d * fi(@as(i32, b & 0xf) - 8);
                dst[j + 16] = d * fi(@as(i32, b >> 4) - 8);
            }
        },
        .q5_0 => {
            const d = rdF16(src, 0);
            const qh = std.mem.readInt(u32, src[2..6], .little);
            for (0..16) |j| {
                const b = src[6 + j];
                const h0: i32 = @intCast((qh >> @intCast(j)) & 1);
                const h1: i32 = @intCast((qh >> @intCast(j + 16)) & 1);
                dst[j] = d * fi((@as(i32, b & 0xf) | (h0 << 4)) - 16);
                dst[j + 16] = d * fi((@as(i32, b >> 4) | (h1 << 4)) - 16);
            }
        },
        .q5_1 => {
            const d = rdF16(src, 0);
            const m = rdF16(src, 2);
            const qh = std.mem.readInt(u32, src[4..8], .little);
            for (0..16) |j| {
                const b = src[8 + j];
                const h0: i32 = @intCast((qh >> @intCast(j)) & 1);
                const h1: i32 = @intCast((qh >> @intCast(j + 16)) & 1);
                dst[j] = d * fi(@as(i32, b & 0xf) | (h0 << 4)) + m;
                dst[j + 16] = d * fi(@as(i32, b >> 4) | (h1 << 4)) + m;
            }
        },
        .q8_0 => {
            const d = rdF16(src, 0);
            for (0..32) |j| dst[j] = d * fi(@as(i8, @bitCast(src[2 + j])));
        },
        .iq4_nl => {
            const d = rdF16(src, 0);
            for (0..16) |j| {
                const b = src[2 + j];
                dst[j] = d * fi(iq4_values[b & 0xf]);
                dst[j + 16] = d * fi(iq4_values[b >> 4]);
            }
        },
        .q2_k => {
            const scales = src[0..16];
            const qs = src[16..80];
            const d = rdF16(src, 80);
            const dmin = rdF16(src, 82);
            for (0..256) |e| {
                const n = e / 128;
                const c = (e % 128) / 32;
                const l = e % 32;
                const q: i32 = (qs[32 * n + l] >> @intCast(2 * c)) & 3;
                const s = scales[e / 16];
                const dl = d * fi(s & 0xf);
                const ml = dmin * fi(s >> 4);
                dst[e] = dl * fi(q) - ml;
            }
        },
        .q3_k => {
            const hmask = src[0..32];
            const qs = src[32..96];
            const scales = src[96..108];
            const d = rdF16(src, 108);
            for (0..256) |e| {
                const n = e / 128;
                const c = (e % 128) / 32;
                const l = e % 32;
                const q2: i32 = (qs[32 * n + l] >> @intCast(2 * c)) & 3;
                const hbit = (hmask[l] >> @intCast(e / 32)) & 1;
                const q = q2 - @as(i32, if (hbit != 0) 0 else 4);
                const dl = d * fi(q3kScale(scales, e / 16) - 32);
                dst[e] = dl * fi(q);
            }
        },
        .q4_k, .q5_k => {
            const d = rdF16(src, 0);
            const dmin = rdF16(src, 2);
            const scales = src[4..16];
            const qh_off = 16;
            const qs_off: usize = if (t == .q4_k) 16 else 48;
            for (0..256) |e| {
                const n = e / 64;
                const nib = (e % 64) / 32;
                const l = e % 32;
                var q: i32 = (src[qs_off + 32 * n + l] >> @intCast(4 * nib)) & 0xf;
                if (t == .q5_k) q |= @as(i32, (src[qh_off + l] >> @intCast(e / 32)) & 1) << 4;
                const sm = k4ScaleMin(scales, e / 32);
                const d1 = d * fi(sm.sc);
                const m1 = dmin * fi(sm.m);
                dst[e] = d1 * fi(q) - m1;
            }
        },
        .q6_k => {
            const ql = src[0..128];
            const qh = src[128..192];
            const scales = src[192..208];
            const d = rdF16(src, 208);
            for (0..256) |e| {
                const n = e / 128;
                const c = (e % 128) / 32;
                const l = e % 32;
                const lo: i32 = (ql[64 * n + 32 * (c & 1) + l] >> @intCast(4 * (c >> 1))) & 0xf;
                const hi: i32 = (qh[32 * n + l] >> @intCast(2 * c)) & 3;
                const q = (lo | (hi << 4)) - 32;
                const sc: i8 = @bitCast(scales[e / 16]);
                dst[e] = (d * fi(sc)) * fi(q);
            }
        },
        .iq4_xs => {
            const d = rdF16(src, 0);
            const scales_h = std.mem.readInt(u16, src[2..4], .little);
            const scales_l = src[4..8];
            const qs = src[8..136];
            for (0..8) |j| {
                const lo: i32 = (scales_l[j / 2] >> @intCast(4 * (j % 2))) & 0xf;
                const hi: i32 = (scales_h >> @intCast(2 * j)) & 3;
                const dl = d * fi((lo | (hi << 4)) - 32);
                for (0..16) |m| {
                    const b = qs[16 * j + m];
                    dst[32 * j + m] = dl * fi(iq4_values[b & 0xf]);
                    dst[32 * j + m + 16] = dl * fi(iq4_values[b >> 4]);
                }
            }
        },
    }
}

/// Decodes a whole row: src must hold exactly rowBytes(t, dst.len) bytes.
pub fn decodeRow(t: Type, src: []const u8, dst: []f32) error{BadLength}!void {
    switch (t) {
        inline else => |ct| {
            const f = comptime of(ct);
            const need = rowBytes(ct, dst.len) orelse return error.BadLength;
            if (src.len != need) return error.BadLength;
            const n = dst.len / f.block_values;
            for (0..n) |b| {
                decodeBlock(ct, src[b * f.block_bytes ..][0..f.block_bytes], dst[b * f.block_values ..][0..f.block_values]);
            }
        },
    }
}

const ScaleRange = enum {
    /// Any finite f16 (subnormals included), either sign, about 1 in 32 exactly ±0.
    wide,
    /// Positive normal f16 in [2^-10, 2^-4) (d) and [2^-12, 2^-6) (dmin/m), as real quantized weights.
    sane,
};

/// Fills `row` (whole blocks of type t) with random but valid blocks for tests and artifact generators:
/// random bytes, then every f16 scale field (`d` and `dmin`/`m`, at the table's offsets) overwritten
/// with a finite value drawn from `range`. Dense types get random bit patterns (NaN/Inf included).
fn randomizeRow(t: Type, random: std.Random, row: []u8, range: ScaleRange) void {
    const f = format(@backingInt(t)).?;
    std.debug.assert(row.len % f.block_bytes == 0);
    random.bytes(row);
    if (f.block_values == 1) return;
    var b: usize = 0;
    while (b < row.len) : (b += f.block_bytes) {
        for ([2]?u32{ f.d_offset, f.m_offset }, 0..) |o, which| {
            const off = o orelse continue;
            var h = random.int(u16);
            switch (range) {
                .wide => {
                    if ((h >> 10) & 0x1f == 0x1f) h ^= 0x4000; // Inf/NaN → finite
                    if (random.uintLessThan(u8, 32) == 0) h &= 0x8000; // some ±0 scales
                },
                // exponent field 5..10 (2^-10..2^-5·1.999), or 3..8 for the min scale
                .sane => h = ((@as(u16, if (which == 0) 5 else 3) + random.uintLessThan(u16, 6)) << 10) | (h & 0x3ff),
            }
            std.mem.writeInt(u16, row[b + off ..][0..2], h, .little);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lane-major chunk decoder (the CPU kernel's hot path)
// ---------------------------------------------------------------------------------------------
//
// A chunk is 256 consecutive elements of a row. Lane l (0..32) owns elements [8l, 8l+8) of the chunk;
// lane-major order puts element 8l+i at out[32i+l]. Every decoder below works the same way:
//   1. build the chunk's integer codes (or dense bit patterns) in natural element order, as four
//      64-element groups (group g = elements 64g..64g+63 = lanes 8g..8g+7), with vector ops only;
//   2. permute them into lane-major order with comptime @shuffle masks (`lanesFromGroups`): an 8×8
//      transpose inside each group, then a 4-way interleave of 8-element rows across groups;
//   3. convert 32 codes at a time to f32 and apply the per-lane scale (and min). For every format a
//      lane's 8 elements share one scale: sub-blocks hold 16 or 32 elements and blocks 32.
// The arithmetic per element is the one of decodeBlock, on the same operands, so results are equal bit
// for bit (the products are exact anyway, see the note above decodeBlock).

const V32f = @Vector(32, f32);

/// Bytes of one full chunk of type t.
pub fn chunkBytes(comptime t: Type) usize {
    const f = comptime of(t);
    return (256 / f.block_values) * f.block_bytes;
}

/// Mask of the 8×8 transpose inside a 64-element group: natural [l'][i] → [i][l'].
const transpose8x8: [64]i32 = blk: {
    var m: [64]i32 = undefined;
    for (0..8) |i| {
        for (0..8) |lp| m[8 * i + lp] = 8 * lp + i;
    }
    break :blk m;
};

fn concatMask(comptime n: usize) [2 * n]i32 {
    var m: [2 * n]i32 = undefined;
    for (0..n) |j| {
        m[j] = @intCast(j);
        m[n + j] = ~@as(i32, @intCast(j));
    }
    return m;
}

inline fn concat(comptime E: type, comptime n: usize, a: @Vector(n, E), b: @Vector(n, E)) @Vector(2 * n, E) {
    return @shuffle(E, a, b, concatMask(n));
}

inline fn half(comptime E: type, comptime n: usize, v: @Vector(2 * n, E), comptime hi: bool) @Vector(n, E) {
    comptime var m: [n]i32 = undefined;
    inline for (0..n) |j| m[j] = if (hi) n + j else j;
    return @shuffle(E, v, undefined, m);
}

/// Unaligned little-endian vector load of n elements of E from the start of p.
inline fn load(comptime E: type, comptime n: usize, p: []const u8) @Vector(n, E) {
    const bytes = p[0 .. n * @sizeOf(E)];
    const arr: *align(1) const [n]E = @ptrCast(bytes.ptr);
    var v: @Vector(n, E) = arr.*;
    if (builtin.cpu.arch.endian() == .big and @sizeOf(E) > 1) v = @byteSwap(v);
    return v;
}

/// Byte codes of a chunk in natural order (4 groups of 64) → lane-major order, as 4 vectors of 64:
/// result[j] holds steps 2j (elements 0..31 of the vector, one per lane) and 2j+1 (32..63).
inline fn lanesFromGroups(g: [4]@Vector(64, u8)) [4]@Vector(64, u8) {
    // Stage 1: z[g] = [i][l'] for lanes 8g..8g+7; as u64, z[g][i] = the 8 lane bytes of step i.
    var z: [4]@Vector(8, u64) = undefined;
    inline for (0..4) |k| z[k] = @bitCast(@shuffle(u8, g[k], undefined, transpose8x8));
    // Stage 2: step i = [z0[i], z1[i], z2[i], z3[i]].
    const lo_m = [8]i32{ 0, ~@as(i32, 0), 1, ~@as(i32, 1), 2, ~@as(i32, 2), 3, ~@as(i32, 3) };
    const hi_m = [8]i32{ 4, ~@as(i32, 4), 5, ~@as(i32, 5), 6, ~@as(i32, 6), 7, ~@as(i32, 7) };
    const a_lo = @shuffle(u64, z[0], z[1], lo_m); // z0[0] z1[0] z0[1] z1[1] ...
    const a_hi = @shuffle(u64, z[0], z[1], hi_m);
    const b_lo = @shuffle(u64, z[2], z[3], lo_m);
    const b_hi = @shuffle(u64, z[2], z[3], hi_m);
    const s01 = [8]i32{ 0, 1, ~@as(i32, 0), ~@as(i32, 1), 2, 3, ~@as(i32, 2), ~@as(i32, 3) };
    const s23 = [8]i32{ 4, 5, ~@as(i32, 4), ~@as(i32, 5), 6, 7, ~@as(i32, 6), ~@as(i32, 7) };
    return .{
        @bitCast(@shuffle(u64, a_lo, b_lo, s01)),
        @bitCast(@shuffle(u64, a_lo, b_lo, s23)),
        @bitCast(@shuffle(u64, a_hi, b_hi, s01)),
        @bitCast(@shuffle(u64, a_hi, b_hi, s23)),
    };
}

/// Whether the target converts f16 vectors in hardware (otherwise @floatCast is a libcall per element).
const hw_f16 = switch (builtin.cpu.arch) {
    .x86, .x86_64 => std.Target.x86.featureSetHas(builtin.cpu.features, .f16c),
    .aarch64, .aarch64_be => true,
    else => false,
};

/// Vector f16 → f32, bit-identical to f16ToF32 (exact; NaN payloads kept, sNaN not quieted).
/// Finite values and infinities go through the target's conversion (@floatCast, exact: one vcvtph2ps
/// per 16 values with F16C), NaNs are rebuilt from their bits because hardware quiets signalling NaNs
/// (x86, ARM) or returns the canonical NaN (RISC-V).
pub inline fn f16Vec(comptime n: usize, h: @Vector(n, u16)) @Vector(n, f32) {
    if (!hw_f16) return f16VecInt(n, h);
    const U = @Vector(n, u32);
    const hw: U = @bitCast(@as(@Vector(n, f32), @floatCast(@as(@Vector(n, f16), @bitCast(h)))));
    const is_nan = (h & @as(@Vector(n, u16), @splat(0x7fff))) > @as(@Vector(n, u16), @splat(0x7c00));
    // Sign-extending puts the sign in bits 31..15; << 13 moves exponent/mantissa into place and keeps
    // the sign in bit 31; the or sets the f32 exponent to all ones.
    const s: @Vector(n, i32) = @as(@Vector(n, i16), @bitCast(h));
    const nan_bits = (@as(U, @bitCast(s)) << @splat(13)) | @as(U, @splat(0x7f800000));
    return @bitCast(@select(u32, is_nan, nan_bits, hw));
}

/// The integer-only variant of f16Vec (same results), kept for targets where @floatCast on f16 vectors
/// is slow (no hardware conversion) and as a cross-check in the tests.
pub inline fn f16VecInt(comptime n: usize, h: @Vector(n, u16)) @Vector(n, f32) {
    const U = @Vector(n, u32);
    const w: U = h;
    const em = w & @as(U, @splat(0x7fff));
    const sign = (w & @as(U, @splat(0x8000))) << @splat(16);
    // Rebias the exponent by 127-15: exact for normals; Inf/NaN need another +128-16.
    var o = (em << @splat(13)) + @as(U, @splat(112 << 23));
    o = @select(u32, em >= @as(U, @splat(0x7c00)), o + @as(U, @splat(112 << 23)), o);
    // Subnormal/zero: one more exponent step makes o 2^-14·(1 + man/1024); subtracting 2^-14 leaves
    // man·2^-24 exactly (+0 for man = 0, the sign is or-ed in below). No f32 denormal is touched.
    const sub: U = @bitCast(@as(@Vector(n, f32), @bitCast(o + @as(U, @splat(1 << 23)))) - @as(@Vector(n, f32), @splat(0x1p-14)));
    o = @select(u32, em < @as(U, @splat(0x0400)), sub, o);
    return @bitCast(o | sign);
}

/// Per-lane vector from n per-sub-block values: lane l gets v[l / (32/n)].
inline fn perLane(comptime n: usize, v: @Vector(n, f32)) V32f {
    comptime var m: [32]i32 = undefined;
    inline for (0..32) |l| m[l] = l / (32 / n);
    return @shuffle(f32, v, undefined, m);
}

/// Converts lane-major codes and writes out = scale·q (+ or − min), step by step.
inline fn emit(comptime E: type, lm: [4]@Vector(64, u8), scale: V32f, comptime min_op: enum { none, add, sub }, min: V32f, out: *[256]f32) void {
    inline for (0..4) |j| {
        inline for (0..2) |h| {
            const codes: @Vector(32, E) = @bitCast(half(u8, 32, lm[j], h == 1));
            const q: V32f = @floatFromInt(codes);
            const v = switch (min_op) {
                .none => scale * q,
                .add => scale * q + min,
                .sub => scale * q - min,
            };
            out[64 * j + 32 * h ..][0..32].* = v;
        }
    }
}

/// 16-entry lookup (IQ4 codebook) of nibbles, as a select tree on the index bits.
inline fn lookupIq4(idx: @Vector(64, u8)) @Vector(64, u8) {
    const B = @Vector(64, u8);
    const bit = struct {
        inline fn f(x: B, comptime b: u3) @Vector(64, bool) {
            return (x & @as(B, @splat(@as(u8, 1) << b))) != @as(B, @splat(0));
        }
    }.f;
    var level: [16]B = undefined;
    inline for (0..16) |j| level[j] = @splat(@bitCast(iq4_values[j]));
    inline for (0..4) |b| {
        const m = bit(idx, b);
        inline for (0..(16 >> (b + 1))) |j| level[j] = @select(u8, m, level[2 * j + 1], level[2 * j]);
    }
    return level[0];
}

inline fn splat64(x: u8) @Vector(64, u8) {
    return @splat(x);
}

/// Natural-order 64 nibbles of two 16-byte nibble blocks a, b: [lo(a), hi(a), lo(b), hi(b)].
inline fn nibblePairs(a: @Vector(16, u8), b: @Vector(16, u8)) @Vector(64, u8) {
    const x = concat(u8, 16, a, b);
    const lo = x & @as(@Vector(32, u8), @splat(0xf));
    const hi = x >> @splat(4);
    comptime var m: [64]i32 = undefined;
    inline for (0..2) |blk| inline for (0..16) |j| {
        m[32 * blk + j] = 16 * blk + j;
        m[32 * blk + 16 + j] = ~@as(i32, 16 * blk + j);
    };
    return @shuffle(u8, lo, hi, m);
}

/// Q5_0/Q5_1 high bits of two blocks: 16 where bit e of the block's qh is set, else 0, for the 64
/// elements of the pair (qh8 = the two blocks' qh words as 8 bytes).
inline fn highBitsPair(qh8: @Vector(8, u8)) @Vector(64, u8) {
    comptime var sel: [64]i32 = undefined;
    comptime var bitm: [64]u8 = undefined;
    inline for (0..64) |e| {
        sel[e] = e / 8;
        bitm[e] = @as(u8, 1) << @intCast(e % 8);
    }
    const spread = @shuffle(u8, qh8, undefined, sel);
    const set = (spread & @as(@Vector(64, u8), bitm)) != splat64(0);
    return @select(u8, set, splat64(16), splat64(0));
}

/// Branch-free exact f16 → f32 of the f16 field at src[off..off+2] (same bits as f16ToF32).
inline fn f16At(src: []const u8, comptime off: usize) f32 {
    const v: @Vector(2, u16) = .{ std.mem.readInt(u16, src[off..][0..2], .little), 0 };
    return f16Vec(2, v)[0];
}

/// f16 fields at `off` of 8 consecutive blocks of `stride` bytes, converted exactly.
inline fn blockF16x8(src: []const u8, comptime stride: usize, comptime off: usize) @Vector(8, f32) {
    var h: [8]u16 = undefined;
    inline for (0..8) |b| h[b] = std.mem.readInt(u16, src[stride * b + off ..][0..2], .little);
    return f16Vec(8, h);
}

/// Decodes one full chunk (chunkBytes(t) bytes, natural layout) into lane-major order.
inline fn decodeFullChunk(comptime t: Type, src: *const [chunkBytes(t)]u8, out: *[256]f32) void {
    const B = @Vector(64, u8);
    const zero: V32f = @splat(0);
    switch (t) {
        .f32, .f16, .bf16 => decodeDenseChunk(t, src, out),
        .q8_0 => {
            var g: [4]B = undefined;
            inline for (0..4) |k| g[k] = concat(u8, 32, load(u8, 32, src[68 * k + 2 ..]), load(u8, 32, src[68 * k + 36 ..]));
            const d = perLane(8, blockF16x8(src, 34, 0));
            emit(i8, lanesFromGroups(g), d, .none, zero, out);
        },
        .q4_0, .iq4_nl => {
            var g: [4]B = undefined;
            inline for (0..4) |k| {
                const nib = nibblePairs(load(u8, 16, src[36 * k + 2 ..]), load(u8, 16, src[36 * k + 20 ..]));
                g[k] = if (t == .q4_0) nib -% splat64(8) else lookupIq4(nib);
            }
            const d = perLane(8, blockF16x8(src, 18, 0));
            emit(i8, lanesFromGroups(g), d, .none, zero, out);
        },
        .q5_0, .q5_1 => {
            const bb = comptime of(t).block_bytes;
            const qh_off = if (t == .q5_0) 2 else 4;
            var g: [4]B = undefined;
            inline for (0..4) |k| {
                const p0 = src[2 * bb * k ..];
                const p1 = src[2 * bb * k + bb ..];
                const nib = nibblePairs(load(u8, 16, p0[qh_off + 4 ..]), load(u8, 16, p1[qh_off + 4 ..]));
                const qh = concat(u8, 4, load(u8, 4, p0[qh_off..]), load(u8, 4, p1[qh_off..]));
                const q = nib | highBitsPair(qh);
                g[k] = if (t == .q5_0) q -% splat64(16) else q;
            }
            const d = perLane(8, blockF16x8(src, bb, 0));
            if (t == .q5_0) {
                emit(i8, lanesFromGroups(g), d, .none, zero, out);
            } else {
                emit(u8, lanesFromGroups(g), d, .add, perLane(8, blockF16x8(src, bb, 2)), out);
            }
        },
        .q2_k => {
            const sc: @Vector(16, u8) = load(u8, 16, src[0..]);
            const d = f16At(src, 80);
            const dmin = f16At(src, 82);
            const dl = @as(@Vector(16, f32), @splat(d)) * @as(@Vector(16, f32), @floatFromInt(sc & @as(@Vector(16, u8), @splat(0xf))));
            const ml = @as(@Vector(16, f32), @splat(dmin)) * @as(@Vector(16, f32), @floatFromInt(sc >> @splat(4)));
            var g: [4]B = undefined;
            inline for (0..4) |k| {
                const qs: @Vector(32, u8) = load(u8, 32, src[16 + 32 * (k / 2) ..]);
                const s0: u3 = 4 * (k % 2);
                g[k] = concat(u8, 32, qs >> @splat(s0), qs >> @splat(s0 + 2)) & splat64(3);
            }
            emit(u8, lanesFromGroups(g), perLane(16, dl), .sub, perLane(16, ml), out);
        },
        .q3_k => {
            // 16 six-bit scales: low nibble from byte j%8 (low half for j<8), 2 high bits from byte 8+j%4.
            const b: @Vector(12, u8) = load(u8, 12, src[96..]);
            comptime var lm: [16]i32 = undefined;
            comptime var hm: [16]i32 = undefined;
            comptime var hs: [16]u8 = undefined;
            comptime var lsh: [16]u8 = undefined;
            inline for (0..16) |j| {
                lm[j] = j % 8;
                lsh[j] = if (j < 8) 0 else 4;
                hm[j] = 8 + j % 4;
                hs[j] = 2 * (j / 4);
            }
            const V16 = @Vector(16, u8);
            const lo = (@shuffle(u8, b, undefined, lm) >> @as(V16, lsh)) & @as(V16, @splat(0xf));
            const hi = (@shuffle(u8, b, undefined, hm) >> @as(V16, hs)) & @as(V16, @splat(3));
            const s6: @Vector(16, i32) = lo | (hi << @splat(4));
            const d = f16At(src, 108);
            const dl = @as(@Vector(16, f32), @splat(d)) * @as(@Vector(16, f32), @floatFromInt(s6 - @as(@Vector(16, i32), @splat(32))));
            const hmask: @Vector(32, u8) = load(u8, 32, src[0..]);
            var g: [4]B = undefined;
            inline for (0..4) |k| {
                const qs: @Vector(32, u8) = load(u8, 32, src[32 + 32 * (k / 2) ..]);
                const s0: u3 = 4 * (k % 2);
                const q2 = concat(u8, 32, qs >> @splat(s0), qs >> @splat(s0 + 2)) & splat64(3);
                const hb = concat(u8, 32, hmask >> @splat(2 * k), hmask >> @splat(2 * k + 1)) & splat64(1);
                g[k] = (q2 | (hb << @splat(2))) -% splat64(4);
            }
            emit(i8, lanesFromGroups(g), perLane(16, dl), .none, zero, out);
        },
        .q4_k, .q5_k => {
            const b: @Vector(12, u8) = load(u8, 12, src[4..]);
            const V8 = @Vector(8, u8);
            const first: @Vector(8, bool) = .{ true, true, true, true, false, false, false, false };
            const p = @shuffle(u8, b, undefined, [8]i32{ 0, 1, 2, 3, 0, 1, 2, 3 }); // byte j%4
            const r = @shuffle(u8, b, undefined, [8]i32{ 4, 5, 6, 7, 4, 5, 6, 7 }); // byte 4+j%4
            const q = @shuffle(u8, b, undefined, [8]i32{ 8, 9, 10, 11, 8, 9, 10, 11 }); // byte 8+j%4
            const m63: V8 = @splat(63);
            const m15: V8 = @splat(15);
            const sc = @select(u8, first, p & m63, (q & m15) | ((p >> @splat(6)) << @splat(4)));
            const mn = @select(u8, first, r & m63, (q >> @splat(4)) | ((r >> @splat(6)) << @splat(4)));
            const d = f16At(src, 0);
            const dmin = f16At(src, 2);
            const d1 = @as(@Vector(8, f32), @splat(d)) * @as(@Vector(8, f32), @floatFromInt(sc));
            const m1 = @as(@Vector(8, f32), @splat(dmin)) * @as(@Vector(8, f32), @floatFromInt(mn));
            const qs_off = if (t == .q4_k) 16 else 48;
            var g: [4]B = undefined;
            inline for (0..4) |k| {
                const qs: @Vector(32, u8) = load(u8, 32, src[qs_off + 32 * k ..]);
                g[k] = concat(u8, 32, qs & @as(@Vector(32, u8), @splat(0xf)), qs >> @splat(4));
                if (t == .q5_k) {
                    const qh: @Vector(32, u8) = load(u8, 32, src[16..]);
                    const hb = concat(u8, 32, qh >> @splat(2 * k), qh >> @splat(2 * k + 1)) & splat64(1);
                    g[k] |= hb << @splat(4);
                }
            }
            emit(u8, lanesFromGroups(g), perLane(8, d1), .sub, perLane(8, m1), out);
        },
        .q6_k => {
            const sc: @Vector(16, i8) = load(i8, 16, src[192..]);
            const d = f16At(src, 208);
            const dl = @as(@Vector(16, f32), @splat(d)) * @as(@Vector(16, f32), @floatFromInt(sc));
            var g: [4]B = undefined;
            inline for (0..4) |k| {
                const n = k / 2;
                const s0: u3 = 4 * (k % 2);
                const ql: B = load(u8, 64, src[64 * n ..]);
                const qh: @Vector(32, u8) = load(u8, 32, src[128 + 32 * n ..]);
                const lo = (ql >> @splat(s0)) & splat64(0xf);
                const hi = concat(u8, 32, qh >> @splat(s0), qh >> @splat(s0 + 2)) & splat64(3);
                g[k] = (lo | (hi << @splat(4))) -% splat64(32);
            }
            emit(i8, lanesFromGroups(g), perLane(16, dl), .none, zero, out);
        },
        .iq4_xs => {
            const d = f16At(src, 0);
            const sh = std.mem.readInt(u16, src[2..4], .little);
            const sl: @Vector(4, u8) = load(u8, 4, src[4..]);
            const V8 = @Vector(8, u8);
            const lo = (@shuffle(u8, sl, undefined, [8]i32{ 0, 0, 1, 1, 2, 2, 3, 3 }) >> V8{ 0, 4, 0, 4, 0, 4, 0, 4 }) & @as(V8, @splat(0xf));
            const hi = (@as(@Vector(8, u16), @splat(sh)) >> @Vector(8, u16){ 0, 2, 4, 6, 8, 10, 12, 14 }) & @as(@Vector(8, u16), @splat(3));
            const ls: @Vector(8, i32) = @as(@Vector(8, i32), lo) | (@as(@Vector(8, i32), @intCast(hi)) << @splat(4));
            const dl = @as(@Vector(8, f32), @splat(d)) * @as(@Vector(8, f32), @floatFromInt(ls - @as(@Vector(8, i32), @splat(32))));
            var g: [4]B = undefined;
            inline for (0..4) |k| g[k] = lookupIq4(nibblePairs(load(u8, 16, src[8 + 32 * k ..]), load(u8, 16, src[24 + 32 * k ..])));
            emit(i8, lanesFromGroups(g), perLane(8, dl), .none, zero, out);
        },
    }
}

/// Dense chunk (F32/F16/BF16): transpose the 16/32-bit patterns per 64-element group, then convert
/// 16 at a time (two steps of the group's 8 lanes).
inline fn decodeDenseChunk(comptime t: Type, src: *const [chunkBytes(t)]u8, out: *[256]f32) void {
    const E = if (t == .f32) u32 else u16;
    inline for (0..4) |k| {
        const tr = @shuffle(E, load(E, 64, src[64 * @sizeOf(E) * k ..]), undefined, transpose8x8);
        inline for (0..4) |p| {
            comptime var m: [16]i32 = undefined;
            inline for (0..16) |j| m[j] = 16 * p + j;
            const x: @Vector(16, E) = @shuffle(E, tr, undefined, m);
            const v: @Vector(16, f32) = switch (t) {
                .f32 => @bitCast(x),
                .f16 => f16Vec(16, x),
                .bf16 => @bitCast(@as(@Vector(16, u32), x) << @splat(16)),
                else => unreachable,
            };
            out[32 * (2 * p) + 8 * k ..][0..8].* = half(f32, 8, v, false);
            out[32 * (2 * p + 1) + 8 * k ..][0..8].* = half(f32, 8, v, true);
        }
    }
}

/// Decodes elements [256*chunk, 256*chunk+256) of one weight row (row = the row's bytes; k = values in
/// the row) into out in lane-major order: out[32*i + l] = element (256*chunk + 8*l + i), for lane l in
/// 0..32, step i in 0..8. Elements at or past k are +0.0. Equals decodeBlock bit for bit.
/// Requires row.len == rowBytes(t, k) and 256*chunk < k.
pub inline fn decodeChunkLanes(comptime t: Type, row: []const u8, chunk: usize, k: usize, out: *[256]f32) void {
    // Inlined into the kernel's loop; its shuffle masks are built at comptime there.
    @setEvalBranchQuota(100_000);
    const f = comptime of(t);
    const cb = comptime chunkBytes(t);
    const start = 256 * chunk;
    std.debug.assert(start < k and k % f.block_values == 0);
    std.debug.assert(row.len == k / f.block_values * f.block_bytes);
    const off = chunk * cb;
    if (start + 256 <= k) return decodeFullChunk(t, row[off..][0..cb], out);
    // Partial last chunk: decode a zero-padded copy, then force the missing elements to +0.0
    // (a zero block can decode to -0.0, e.g. Q4_0 gives 0·(0−8)).
    const valid = k - start;
    var buf: [cb]u8 = @splat(0);
    const nbytes = valid / f.block_values * f.block_bytes;
    @memcpy(buf[0..nbytes], row[off..][0..nbytes]);
    decodeFullChunk(t, &buf, out);
    const lane8: @Vector(32, u32) = comptime blk: {
        var v: [32]u32 = undefined;
        for (0..32) |l| v[l] = 8 * l;
        break :blk v;
    };
    inline for (0..8) |i| {
        const keep = lane8 + @as(@Vector(32, u32), @splat(i)) < @as(@Vector(32, u32), @splat(@intCast(valid)));
        out[32 * i ..][0..32].* = @select(f32, keep, @as(V32f, out[32 * i ..][0..32].*), @as(V32f, @splat(0)));
    }
}

/// Simple reference for decodeChunkLanes (natural decode, then transpose); used by the tests.
fn decodeChunkLanesRef(comptime t: Type, row: []const u8, chunk: usize, k: usize, out: *[256]f32) void {
    const f = comptime of(t);
    var nat: [256]f32 = @splat(0);
    const start = 256 * chunk;
    const valid = @min(256, k - start);
    const nblocks = valid / f.block_values;
    const first = start / f.block_values;
    for (0..nblocks) |b| {
        decodeBlock(t, row[(first + b) * f.block_bytes ..][0..f.block_bytes], nat[b * f.block_values ..][0..f.block_values]);
    }
    for (0..32) |l| for (0..8) |i| {
        out[32 * i + l] = nat[8 * l + i];
    };
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

const testing = std.testing;

/// test/fixtures/formats.bin, written by scripts/make_format_fixtures.py with gguf-py's dequantize.
/// Layout (little-endian, no padding): magic u32 0x464D484C, version u32 1, section count u32; per
/// section: ggml type id u32, block count n u32, n·block_bytes raw bytes, n·block_values f32 values.
/// Values (NaNs included) are compared as u32 bit patterns.
const fixture = @embedFile("formats_fixture");

const Section = struct { t: Type, n: usize, raw: []const u8, values: []const u8 };

fn fixtureSections(list: *[16]Section) !usize {
    var pos: usize = 0;
    const rd = struct {
        fn u(buf: []const u8, p: *usize) !u32 {
            if (p.* + 4 > buf.len) return error.TruncatedFixture;
            defer p.* += 4;
            return std.mem.readInt(u32, buf[p.*..][0..4], .little);
        }
    }.u;
    try testing.expectEqual(@as(u32, 0x464D484C), try rd(fixture, &pos));
    try testing.expectEqual(@as(u32, 1), try rd(fixture, &pos));
    const count = try rd(fixture, &pos);
    if (count > list.len) return error.BadFixture;
    for (0..count) |s| {
        const id = try rd(fixture, &pos);
        const f = format(id) orelse return error.BadFixture;
        const n = try rd(fixture, &pos);
        const raw_len = n * f.block_bytes;
        const val_len = n * f.block_values * 4;
        if (pos + raw_len + val_len > fixture.len) return error.TruncatedFixture;
        list[s] = .{ .t = f.type, .n = n, .raw = fixture[pos..][0..raw_len], .values = fixture[pos + raw_len ..][0..val_len] };
        pos += raw_len + val_len;
    }
    try testing.expectEqual(fixture.len, pos);
    return count;
}

fn expectBits(t: Type, what: []const u8, index: usize, expected: u32, actual: f32) !void {
    const got: u32 = @bitCast(actual);
    if (got != expected) {
        std.debug.print("{s} {s}: element {d}: expected 0x{x:0>8}, got 0x{x:0>8}\n", .{ @tagName(t), what, index, expected, got });
        return error.TestExpectedEqual;
    }
}

test "decodeBlock and decodeRow equal gguf's dequantize bit for bit" {
    var sections: [16]Section = undefined;
    const count = try fixtureSections(&sections);
    var seen: std.EnumSet(Type) = .empty;
    var row_buf: [8192]f32 = undefined;
    for (sections[0..count]) |sec| {
        seen.insert(sec.t);
        switch (sec.t) {
            inline else => |t| {
                const f = comptime of(t);
                for (0..sec.n) |b| {
                    var dst: [f.block_values]f32 = undefined;
                    decodeBlock(t, sec.raw[b * f.block_bytes ..][0..f.block_bytes], &dst);
                    for (dst, 0..) |v, j| {
                        const e = b * f.block_values + j;
                        try expectBits(t, "decodeBlock", e, std.mem.readInt(u32, sec.values[4 * e ..][0..4], .little), v);
                    }
                }
                const nv = sec.n * f.block_values;
                const dst = row_buf[0..nv];
                try decodeRow(t, sec.raw, dst);
                for (dst, 0..) |v, e| try expectBits(t, "decodeRow", e, std.mem.readInt(u32, sec.values[4 * e ..][0..4], .little), v);
                // A row with one byte too many or too few, or a partial block, is rejected.
                try testing.expectError(error.BadLength, decodeRow(t, sec.raw[0 .. sec.raw.len - 1], dst));
                if (f.block_values > 1) try testing.expectError(error.BadLength, decodeRow(t, sec.raw, dst[0 .. nv - 1]));
            },
        }
    }
    // Every type except F32 comes from gguf (F32 is a byte view there; tested below).
    for (all) |f| try testing.expectEqual(f.type != .f32, seen.contains(f.type));
}

test "F32 decode is a bit copy, NaN payloads included" {
    var prng = std.Random.DefaultPrng.init(7);
    const r = prng.random();
    var raw: [4 * 1000]u8 = undefined;
    r.bytes(&raw);
    std.mem.writeInt(u32, raw[0..4], 0x7f800001, .little); // signalling NaN
    std.mem.writeInt(u32, raw[4..8], 0x00000001, .little); // smallest denormal
    var dst: [1000]f32 = undefined;
    try decodeRow(.f32, &raw, &dst);
    for (dst, 0..) |v, e| try expectBits(.f32, "decodeRow", e, std.mem.readInt(u32, raw[4 * e ..][0..4], .little), v);
}

test "f16Vec and f16VecInt equal f16ToF32 on all 65536 patterns" {
    var h: u32 = 0;
    while (h < 65536) : (h += 64) {
        var v: [64]u16 = undefined;
        for (0..64) |j| v[j] = @intCast(h + j);
        const got: [64]f32 = f16Vec(64, v);
        const got_int: [64]f32 = f16VecInt(64, v);
        for (0..64) |j| {
            try expectBits(.f16, "f16Vec", h + j, @bitCast(f16ToF32(v[j])), got[j]);
            try expectBits(.f16, "f16VecInt", h + j, @bitCast(f16ToF32(v[j])), got_int[j]);
        }
    }
    // Spot values of the scalar conversion itself (independent of the fixture).
    try testing.expectEqual(@as(u32, 0x7f802000), @as(u32, @bitCast(f16ToF32(0x7c01))));
    try testing.expectEqual(@as(u32, 0x33800000), @as(u32, @bitCast(f16ToF32(0x0001))));
    try testing.expectEqual(@as(u32, 0x80000000), @as(u32, @bitCast(f16ToF32(0x8000))));
    try testing.expectEqual(@as(u32, 0x477fe000), @as(u32, @bitCast(f16ToF32(0x7bff))));
}

/// Random row of `k` values of type t (see randomizeRow, .wide scales) in buf.
fn randomRow(comptime t: Type, r: std.Random, k: usize, buf: []u8) []u8 {
    const f = comptime of(t);
    const row = buf[0 .. k / f.block_values * f.block_bytes];
    randomizeRow(t, r, row, .wide);
    return row;
}

fn checkLanes(comptime t: Type, row: []const u8, k: usize) !void {
    const nchunks = (k + 255) / 256;
    for (0..nchunks) |c| {
        var want: [256]f32 = undefined;
        var got: [256]f32 = undefined;
        decodeChunkLanesRef(t, row, c, k, &want);
        // Elements past k must be +0.0.
        for (0..32) |l| for (0..8) |i| {
            if (256 * c + 8 * l + i >= k) try testing.expectEqual(@as(u32, 0), @as(u32, @bitCast(want[32 * i + l])));
        };
        @memset(&got, std.math.nan(f32));
        decodeChunkLanes(t, row, c, k, &got);
        for (0..256) |p| {
            if (@as(u32, @bitCast(want[p])) != @as(u32, @bitCast(got[p]))) {
                std.debug.print("{s} k={d} chunk {d}: out[{d}] (lane {d}, step {d}) expected 0x{x:0>8}, got 0x{x:0>8}\n", .{ @tagName(t), k, c, p, p % 32, p / 32, @as(u32, @bitCast(want[p])), @as(u32, @bitCast(got[p])) });
                return error.TestExpectedEqual;
            }
        }
    }
}

test "decodeChunkLanesRef is the transpose of decodeRow" {
    var prng = std.Random.DefaultPrng.init(3);
    var buf: [1152 * 2]u8 = undefined;
    const row = randomRow(.q8_0, prng.random(), 1152, &buf);
    var nat: [1152]f32 = undefined;
    try decodeRow(.q8_0, row, &nat);
    var out: [256]f32 = undefined;
    decodeChunkLanesRef(.q8_0, row, 4, 1152, &out);
    for (0..32) |l| for (0..8) |i| {
        const e = 1024 + 8 * l + i;
        const want: u32 = if (e < 1152) @bitCast(nat[e]) else 0;
        try testing.expectEqual(want, @as(u32, @bitCast(out[32 * i + l])));
    };
}

test "decodeChunkLanes equals the transposed decodeBlock output bit for bit" {
    var prng = std.Random.DefaultPrng.init(0x1a2b3c);
    const r = prng.random();
    const buf = try testing.allocator.alloc(u8, 4 * 65536);
    defer testing.allocator.free(buf);
    inline for (all) |f| {
        const t = f.type;
        const ks: []const usize = switch (f.block_values) {
            1 => &.{ 1, 7, 8, 9, 255, 256, 257, 300, 1000, 1152, 2816 },
            32 => &.{ 32, 64, 224, 256, 288, 1152, 2816, 4096 + 96 },
            else => &.{ 256, 512, 2816 },
        };
        for (0..4) |_| for (ks) |k| try checkLanes(t, randomRow(t, r, k, buf), k);
        // Extreme code bytes (all 0x00 / all 0xFF) with random finite scales.
        for ([_]u8{ 0x00, 0xff }) |fill| {
            const k: usize = 512;
            const row = randomRow(t, r, k, buf);
            if (f.block_values > 1) {
                var b: usize = 0;
                while (b < row.len) : (b += f.block_bytes) {
                    for (0..f.block_bytes) |j| {
                        if (j == f.d_offset or j == f.d_offset + 1) continue;
                        if (f.m_offset) |m| if (j == m or j == m + 1) continue;
                        row[b + j] = fill;
                    }
                }
            }
            try checkLanes(t, row, k);
        }
    }
    // Every 16-bit pattern through the dense lane decoders.
    inline for (.{ Type.f16, Type.bf16 }) |t| {
        const row = buf[0 .. 2 * 65536];
        for (0..65536) |h| std.mem.writeInt(u16, row[2 * h ..][0..2], @intCast(h), .little);
        try checkLanes(t, row, 65536);
    }
}

test "randomizeRow writes valid blocks: every quantized value is finite" {
    var prng = std.Random.DefaultPrng.init(11);
    var row: [4 * 2816]u8 = undefined;
    var vals: [2816]f32 = undefined;
    for (all) |f| {
        if (f.block_values == 1) continue;
        const nb = rowBytes(f.type, 2816).?;
        for ([_]ScaleRange{ .wide, .sane }) |range| {
            for (0..20) |_| {
                randomizeRow(f.type, prng.random(), row[0..nb], range);
                try decodeRow(f.type, row[0..nb], &vals);
                for (vals) |v| {
                    try testing.expect(std.math.isFinite(v));
                    if (range == .sane) try testing.expect(@abs(v) <= 256);
                }
                if (range == .sane) {
                    var b: usize = 0;
                    while (b < nb) : (b += f.block_bytes) {
                        const d = f16ToF32(std.mem.readInt(u16, row[b + f.d_offset ..][0..2], .little));
                        try testing.expect(d >= 0x1p-10 and d < 0x1p-4);
                    }
                }
            }
        }
    }
}

test "format table and rowBytes" {
    const expect = testing.expect;
    // Sizes of hf2q-head-spec §4.
    const sizes = [_]struct { Type, u32, u32 }{
        .{ .f32, 1, 4 },      .{ .f16, 1, 2 },      .{ .bf16, 1, 2 },     .{ .q4_0, 32, 18 },     .{ .q5_0, 32, 22 },
        .{ .q5_1, 32, 24 },   .{ .q8_0, 32, 34 },   .{ .iq4_nl, 32, 18 }, .{ .iq4_xs, 256, 136 }, .{ .q2_k, 256, 84 },
        .{ .q3_k, 256, 110 }, .{ .q4_k, 256, 144 }, .{ .q5_k, 256, 176 }, .{ .q6_k, 256, 210 },
    };
    try testing.expectEqual(all.len, sizes.len);
    for (sizes) |s| {
        const f = format(@backingInt(s[0])).?;
        try testing.expectEqual(s[0], f.type);
        try testing.expectEqual(s[1], f.block_values);
        try testing.expectEqual(s[2], f.block_bytes);
        try expect(f.head);
    }
    // ggml ids and names.
    try testing.expectEqualStrings("Q6_K", format(14).?.name);
    try testing.expectEqualStrings("BF16", format(30).?.name);
    try testing.expectEqualStrings("IQ4_XS", format(23).?.name);
    try testing.expectEqualStrings("F32", format(0).?.name);
    for ([_]u32{ 3, 4, 5, 9, 15, 16, 19, 21, 22, 24, 29, 31, 39, 0xffffffff }) |id| try expect(format(id) == null);
    // Tied-head admission list.
    for (all) |f| {
        const tied = switch (f.type) {
            .f32, .f16, .bf16, .q4_0, .q2_k, .q4_k, .q5_k, .q6_k, .q8_0 => true,
            else => false,
        };
        try testing.expectEqual(tied, f.tied_head);
    }
    // Scale-field offsets: d (and dmin/m) fields are where ggml's structs put them.
    try testing.expectEqual(@as(u32, 208), format(14).?.d_offset);
    try testing.expectEqual(@as(u32, 108), format(11).?.d_offset);
    try testing.expectEqual(@as(u32, 80), format(10).?.d_offset);
    try testing.expectEqual(@as(?u32, 82), format(10).?.m_offset);
    try testing.expectEqual(@as(?u32, 2), format(12).?.m_offset);
    try testing.expectEqual(@as(?u32, 2), format(7).?.m_offset);
    try testing.expectEqual(@as(?u32, null), format(8).?.m_offset);
    // Head sizes at vocab 262144, hidden 2816.
    try testing.expectEqual(@as(?u64, 605_552_640), if (rowBytes(.q6_k, 2816)) |b| b * 262144 else null);
    try testing.expectEqual(@as(?u64, 784_334_848), if (rowBytes(.q8_0, 2816)) |b| b * 262144 else null);
    try testing.expectEqual(@as(?u64, 2816 * 2), rowBytes(.bf16, 2816));
    try testing.expectEqual(@as(?u64, 1152 / 32 * 18), rowBytes(.q4_0, 1152));
    try testing.expectEqual(@as(?u64, 0), rowBytes(.q6_k, 0));
    try testing.expectEqual(@as(?u64, 3), @as(?u64, if (rowBytes(.f16, 3)) |b| b / 2 else null));
    // Not a multiple of the block → null.
    try expect(rowBytes(.q6_k, 1152) == null);
    try expect(rowBytes(.q8_0, 2817) == null);
    try expect(rowBytes(.iq4_xs, 128) == null);
    // Overflow → null; the largest representable sizes still work.
    try expect(rowBytes(.f32, std.math.maxInt(u64)) == null);
    try expect(rowBytes(.f32, std.math.maxInt(u64) / 4 + 1) == null);
    try testing.expectEqual(@as(?u64, (std.math.maxInt(u64) / 4) * 4), rowBytes(.f32, std.math.maxInt(u64) / 4));
    try expect(rowBytes(.q8_0, (std.math.maxInt(u64) / 32) * 32) == null);
    try testing.expectEqual(@as(?u64, 34 * (std.math.maxInt(u64) / 34)), rowBytes(.q8_0, 32 * (std.math.maxInt(u64) / 34)));
}
