//! The one definition of every GGML block format lmhead accepts for the output head
//! (docs/NUMERICS.md §2): the size/offset table, the scalar reference decoders (bit-exact
//! with gguf-py's numpy dequantization) and the lane-major chunk decoder used by the CPU kernel.
const std = @import("std");
const lanes = @import("lanes.zig");
const ggml_types = @import("ggml_types.zig");

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

/// Block layouts, field for field as ggml-common.h defines them: the one place each
/// field's offset and size is written. Every field is bytes (f16 fields hold the bit
/// pattern, little-endian), so the structs have no padding and their size is the block's.
pub const blocks = struct {
    pub const F32 = extern struct { value: [4]u8 };
    pub const F16 = extern struct { value: [2]u8 };
    pub const BF16 = extern struct { value: [2]u8 };
    pub const Q4_0 = extern struct { d: [2]u8, qs: [16]u8 };
    pub const Q5_0 = extern struct { d: [2]u8, qh: [4]u8, qs: [16]u8 };
    pub const Q5_1 = extern struct { d: [2]u8, m: [2]u8, qh: [4]u8, qs: [16]u8 };
    pub const Q8_0 = extern struct { d: [2]u8, qs: [32]u8 };
    pub const IQ4_NL = extern struct { d: [2]u8, qs: [16]u8 };
    pub const Q2_K = extern struct { scales: [16]u8, qs: [64]u8, d: [2]u8, dmin: [2]u8 };
    pub const Q3_K = extern struct { hmask: [32]u8, qs: [64]u8, scales: [12]u8, d: [2]u8 };
    pub const Q4_K = extern struct { d: [2]u8, dmin: [2]u8, scales: [12]u8, qs: [128]u8 };
    pub const Q5_K = extern struct { d: [2]u8, dmin: [2]u8, scales: [12]u8, qh: [32]u8, qs: [128]u8 };
    pub const Q6_K = extern struct { ql: [128]u8, qh: [64]u8, scales: [16]u8, d: [2]u8 };
    pub const IQ4_XS = extern struct { d: [2]u8, scales_h: [2]u8, scales_l: [4]u8, qs: [128]u8 };
};

/// The block layout of a type.
pub fn Block(comptime t: Type) type {
    return switch (t) {
        .f32 => blocks.F32,
        .f16 => blocks.F16,
        .bf16 => blocks.BF16,
        .q4_0 => blocks.Q4_0,
        .q5_0 => blocks.Q5_0,
        .q5_1 => blocks.Q5_1,
        .q8_0 => blocks.Q8_0,
        .iq4_nl => blocks.IQ4_NL,
        .q2_k => blocks.Q2_K,
        .q3_k => blocks.Q3_K,
        .q4_k => blocks.Q4_K,
        .q5_k => blocks.Q5_K,
        .q6_k => blocks.Q6_K,
        .iq4_xs => blocks.IQ4_XS,
    };
}

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
    /// Admitted as an untied output.weight (all 14 types).
    head: bool,
    /// Also admitted as a tied token_embd head (the types the embedding gather decodes).
    tied_head: bool,
};

/// One table entry: name and block size from the table of every ggml type (which the block
/// layout must match), offsets from the block layout.
fn entry(comptime t: Type, comptime tied_head: bool) Format {
    const B = Block(t);
    const ggml = ggml_types.table[@backingInt(t)];
    if (ggml.id != @backingInt(t) or ggml.block_bytes != @sizeOf(B)) @compileError("block layout of " ++ ggml.name ++ " disagrees with ggml_types.zig");
    return .{
        .type = t,
        .name = ggml.name,
        .block_values = ggml.block_values,
        .block_bytes = @sizeOf(B),
        .d_offset = if (@hasField(B, "d")) @offsetOf(B, "d") else 0,
        .m_offset = if (@hasField(B, "dmin")) @offsetOf(B, "dmin") else if (@hasField(B, "m")) @offsetOf(B, "m") else null,
        .head = true,
        .tied_head = tied_head,
    };
}

/// Every format, in ggml type-id order.
pub const all = [_]Format{
    entry(.f32, true),
    entry(.f16, true),
    entry(.q4_0, true),
    entry(.q5_0, false),
    entry(.q5_1, false),
    entry(.q8_0, true),
    entry(.q2_k, true),
    entry(.q3_k, false),
    entry(.q4_k, true),
    entry(.q5_k, true),
    entry(.q6_k, true),
    entry(.iq4_nl, false),
    entry(.iq4_xs, false),
    entry(.bf16, true),
};

comptime {
    // The canonical chunk of numerics/lanes.zig: a whole number of blocks, and each lane's
    // 8 values share one scale.
    for (all) |f| {
        std.debug.assert(lanes.chunk_values % f.block_values == 0);
        std.debug.assert(f.block_values == 1 or f.block_values % lanes.values_per_lane == 0);
    }
}

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

/// An f16 field, converted exactly.
pub inline fn half(field: [2]u8) f32 {
    return f16ToF32(std.mem.readInt(u16, &field, .little));
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
    const b: *const Block(t) = @ptrCast(src);
    switch (t) {
        .f32 => dst[0] = @bitCast(std.mem.readInt(u32, &b.value, .little)),
        .f16 => dst[0] = half(b.value),
        .bf16 => dst[0] = bf16ToF32(std.mem.readInt(u16, &b.value, .little)),
        .q4_0, .iq4_nl => decodeNibbles(t, b, dst),
        .q5_0, .q5_1 => decodeQ5(t, b, dst),
        .q8_0 => for (0..32) |j| {
            dst[j] = half(b.d) * fi(@as(i8, @bitCast(b.qs[j])));
        },
        .q2_k => decodeQ2K(b, dst),
        .q3_k => decodeQ3K(b, dst),
        .q4_k, .q5_k => decodeQ45K(t, b, dst),
        .q6_k => decodeQ6K(b, dst),
        .iq4_xs => decodeIQ4XS(b, dst),
    }
}

/// Q4_0 `d·(q−8)` and IQ4_NL `d·K[q]`: element j is the low nibble of qs[j], j+16 the high one.
fn decodeNibbles(comptime t: Type, b: *const Block(t), dst: *[32]f32) void {
    const d = half(b.d);
    for (0..16) |j| {
        const codes = [2]u8{ b.qs[j] & 0xf, b.qs[j] >> 4 };
        for (codes, 0..) |q, h| {
            dst[j + 16 * h] = d * if (t == .q4_0) fi(@as(i32, q) - 8) else fi(iq4_values[q]);
        }
    }
}

/// Q5_0 `d·(q−16)` and Q5_1 `(d·q) + m`, q = nibble | (bit j of qh) << 4.
fn decodeQ5(comptime t: Type, b: *const Block(t), dst: *[32]f32) void {
    const d = half(b.d);
    const qh = std.mem.readInt(u32, &b.qh, .little);
    for (0..16) |j| {
        const codes = [2]u8{ b.qs[j] & 0xf, b.qs[j] >> 4 };
        for (codes, 0..) |nibble, h| {
            const high: i32 = @intCast((qh >> @intCast(j + 16 * h)) & 1);
            const q = @as(i32, nibble) | (high << 4);
            dst[j + 16 * h] = if (t == .q5_0) d * fi(q - 16) else d * fi(q) + half(b.m);
        }
    }
}

fn decodeQ2K(b: *const blocks.Q2_K, dst: *[256]f32) void {
    const d = half(b.d);
    const dmin = half(b.dmin);
    for (0..256) |e| {
        const n = e / 128;
        const c = (e % 128) / 32;
        const l = e % 32;
        const q: i32 = (b.qs[32 * n + l] >> @intCast(2 * c)) & 3;
        const s = b.scales[e / 16];
        const dl = d * fi(s & 0xf);
        const ml = dmin * fi(s >> 4);
        dst[e] = dl * fi(q) - ml;
    }
}

fn decodeQ3K(b: *const blocks.Q3_K, dst: *[256]f32) void {
    const d = half(b.d);
    for (0..256) |e| {
        const n = e / 128;
        const c = (e % 128) / 32;
        const l = e % 32;
        const q2: i32 = (b.qs[32 * n + l] >> @intCast(2 * c)) & 3;
        const hbit = (b.hmask[l] >> @intCast(e / 32)) & 1;
        const q = q2 - @as(i32, if (hbit != 0) 0 else 4);
        const dl = d * fi(q3kScale(&b.scales, e / 16) - 32);
        dst[e] = dl * fi(q);
    }
}

fn decodeQ45K(comptime t: Type, b: *const Block(t), dst: *[256]f32) void {
    const d = half(b.d);
    const dmin = half(b.dmin);
    for (0..256) |e| {
        const n = e / 64;
        const nib = (e % 64) / 32;
        const l = e % 32;
        var q: i32 = (b.qs[32 * n + l] >> @intCast(4 * nib)) & 0xf;
        if (t == .q5_k) q |= @as(i32, (b.qh[l] >> @intCast(e / 32)) & 1) << 4;
        const sm = k4ScaleMin(&b.scales, e / 32);
        const d1 = d * fi(sm.sc);
        const m1 = dmin * fi(sm.m);
        dst[e] = d1 * fi(q) - m1;
    }
}

fn decodeQ6K(b: *const blocks.Q6_K, dst: *[256]f32) void {
    const d = half(b.d);
    for (0..256) |e| {
        const n = e / 128;
        const c = (e % 128) / 32;
        const l = e % 32;
        const lo: i32 = (b.ql[64 * n + 32 * (c & 1) + l] >> @intCast(4 * (c >> 1))) & 0xf;
        const hi: i32 = (b.qh[32 * n + l] >> @intCast(2 * c)) & 3;
        const q = (lo | (hi << 4)) - 32;
        const sc: i8 = @bitCast(b.scales[e / 16]);
        dst[e] = (d * fi(sc)) * fi(q);
    }
}

fn decodeIQ4XS(b: *const blocks.IQ4_XS, dst: *[256]f32) void {
    const d = half(b.d);
    const scales_h = std.mem.readInt(u16, &b.scales_h, .little);
    for (0..8) |j| {
        const lo: i32 = (b.scales_l[j / 2] >> @intCast(4 * (j % 2))) & 0xf;
        const hi: i32 = (scales_h >> @intCast(2 * j)) & 3;
        const dl = d * fi((lo | (hi << 4)) - 32);
        for (0..16) |m| {
            const q = b.qs[16 * j + m];
            dst[32 * j + m] = dl * fi(iq4_values[q & 0xf]);
            dst[32 * j + m + 16] = dl * fi(iq4_values[q >> 4]);
        }
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

pub const ScaleRange = enum {
    /// Any finite f16 (subnormals included), either sign, about 1 in 32 exactly ±0.
    wide,
    /// Positive normal f16 in [2^-10, 2^-4) (d) and [2^-12, 2^-6) (dmin/m), as real quantized weights.
    sane,
};

/// Fills `row` (whole blocks of type t) with random but valid blocks for tests and artifact generators:
/// random bytes, then every f16 scale field (`d` and `dmin`/`m`, at the table's offsets) overwritten
/// with a finite value drawn from `range`. Dense types get random bit patterns (NaN/Inf included).
pub fn randomizeRow(t: Type, random: std.Random, row: []u8, range: ScaleRange) void {
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

/// A quantized row whose every block has scale +Inf, min (where it has one) +0, and every
/// other byte 0xFF, so each code is its type's largest (Q8_0's is −1, and Q6_K's sub-block
/// scales are −1): every weight is infinite, all of one sign, and the row's dot product with
/// a positive input is ±Inf where a decoder that made any of them NaN would give NaN.
pub fn infiniteScaleRow(t: Type, row: []u8) void {
    const f = format(@backingInt(t)).?;
    std.debug.assert(f.block_values > 1 and row.len % f.block_bytes == 0);
    @memset(row, 0xFF);
    var b: usize = 0;
    while (b < row.len) : (b += f.block_bytes) {
        std.mem.writeInt(u16, row[b + f.d_offset ..][0..2], 0x7C00, .little);
        if (f.m_offset) |m| std.mem.writeInt(u16, row[b + m ..][0..2], 0, .little);
    }
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

pub fn expectBits(t: Type, what: []const u8, index: usize, expected: u32, actual: f32) !void {
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
    // ggml's block sizes (ggml-common.h), as literal numbers.
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
