//! The flush points of docs/NUMERICS.md §7: a value whose magnitude is below a threshold
//! becomes +0 before it is used. The test is an integer comparison on the bit pattern and
//! the result an integer select, so no device's subnormal policy (FTZ, DAZ, Apple's flush)
//! can change it. With the flush points in place no binary32 value of the computation is
//! ever subnormal; NUMERICS.md §7 has the proof.
const std = @import("std");

/// 2^-40, for the operands of a dot product: the hidden input x, the normalized activation y,
/// and F32/BF16 weights. An operand at or above it is a multiple of 2^-63, so its product with
/// another such operand, or with a quantized or F16 weight (a multiple of 2^-24), is a
/// multiple of 2^-126.
pub const dot_operand_min: u32 = 0x2B80_0000;
/// 2^-125, for every other flushed value: the norm weight, eps, cap, 1/cap, the softcap's
/// input, argument and result. Twice the smallest normal, so that a product whose exact value
/// lies just below 2^-126, which devices may round up to 2^-126 or flush to zero, is +0 either way.
pub const value_min: u32 = 0x0100_0000;

/// x, or +0 where |x| is below the binary32 whose bits are `min_bits`; NaN and ±Inf are kept.
/// For V = f32 or @Vector(n, f32).
pub inline fn flush(comptime V: type, x: V, comptime min_bits: u32) V {
    comptime std.debug.assert(min_bits > 0 and min_bits < 0x7F80_0000);
    switch (@typeInfo(V)) {
        .vector => |v| {
            const U = @Vector(v.len, u32);
            const bits: U = @bitCast(x);
            const tiny = bits & @as(U, @splat(0x7FFF_FFFF)) < @as(U, @splat(min_bits));
            return @bitCast(@select(u32, tiny, @as(U, @splat(0)), bits));
        },
        else => {
            const bits: u32 = @bitCast(x);
            return @bitCast(if (bits & 0x7FFF_FFFF < min_bits) @as(u32, 0) else bits);
        },
    }
}

/// flush(f32, ·, min_bits) of BF16 values, on their 16-bit patterns: a BF16 value's f32 is its
/// pattern in the high half, so the same test on the high halves gives the same +0s, and it
/// takes one register per 32 values instead of per 16 (the CPU decoder flushes BF16 weights so).
pub inline fn flushBf16(comptime n: usize, h: @Vector(n, u16), comptime min_bits: u32) @Vector(n, u16) {
    comptime std.debug.assert(min_bits & 0xFFFF == 0); // exact on the high halves
    const H = @Vector(n, u16);
    const tiny = h & @as(H, @splat(0x7FFF)) < @as(H, @splat(@as(u16, @intCast(min_bits >> 16))));
    return @select(u16, tiny, @as(H, @splat(0)), h);
}

/// Flushes every value of a row in place.
pub fn flushSlice(values: []f32, comptime min_bits: u32) void {
    const width = std.simd.suggestVectorLength(f32) orelse 8;
    const Wide = @Vector(width, f32);
    var i: usize = 0;
    while (i + width <= values.len) : (i += width) {
        const v: Wide = values[i..][0..width].*;
        values[i..][0..width].* = flush(Wide, v, min_bits);
    }
    while (i < values.len) : (i += 1) values[i] = flush(f32, values[i], min_bits);
}

test "flushBf16 gives the bits of flush on every BF16 value" {
    var h: [64]u16 = undefined;
    var base: u32 = 0;
    while (base < 65536) : (base += 64) {
        for (&h, 0..) |*x, i| x.* = @intCast(base + i);
        const got: [64]u16 = flushBf16(64, h, dot_operand_min);
        for (h, got) |x, g| {
            const want: u32 = @bitCast(flush(f32, @bitCast(@as(u32, x) << 16), dot_operand_min));
            try std.testing.expectEqual(want, @as(u32, g) << 16);
        }
    }
}

test "flush: +0 below the threshold, for both signs; kept at and above it, NaN and Inf included" {
    const cases = [_][2]u32{
        .{ 0x2B80_0000, 0x2B80_0000 }, // 2^-40 itself is kept
        .{ 0xAB80_0000, 0xAB80_0000 },
        .{ 0x2B7F_FFFF, 0x0000_0000 }, // just below: +0
        .{ 0xAB7F_FFFF, 0x0000_0000 }, // negative: +0, not -0
        .{ 0x0000_0001, 0x0000_0000 }, // subnormals
        .{ 0x8000_0001, 0x0000_0000 },
        .{ 0x8000_0000, 0x0000_0000 }, // -0 becomes +0
        .{ 0x3F80_0000, 0x3F80_0000 },
        .{ 0xFF80_0000, 0xFF80_0000 }, // -Inf
        .{ 0x7FC0_0001, 0x7FC0_0001 }, // NaN, payload kept
    };
    var xs: [16]f32 = @splat(1);
    for (cases, 0..) |c, i| {
        try std.testing.expectEqual(c[1], @as(u32, @bitCast(flush(f32, @bitCast(c[0]), dot_operand_min))));
        xs[i] = @bitCast(c[0]);
    }
    const v: [16]f32 = flush(@Vector(16, f32), xs, dot_operand_min);
    for (cases, 0..) |c, i| try std.testing.expectEqual(c[1], @as(u32, @bitCast(v[i])));
    var row = xs;
    flushSlice(row[0..13], dot_operand_min); // a vector part and a scalar tail
    for (cases, 0..) |c, i| try std.testing.expectEqual(c[1], @as(u32, @bitCast(row[i])));
    try std.testing.expectEqual(@as(u32, 0), @as(u32, @bitCast(flush(f32, @bitCast(@as(u32, 0x00FF_FFFF)), value_min))));
    try std.testing.expectEqual(@as(u32, 0x0100_0000), @as(u32, @bitCast(flush(f32, @bitCast(@as(u32, 0x0100_0000)), value_min))));
}
