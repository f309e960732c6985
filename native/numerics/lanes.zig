//! The canonical reduction order of docs/NUMERICS.md, shared by every kernel.
//!
//! A dot product over n values is computed by 32 lanes (a Metal simdgroup, a CUDA warp,
//! or one @Vector(32, f32) on the CPU). The values form chunks of 256; lane l owns the
//! 8 contiguous values [256c + 8l, 256c + 8l + 8) of chunk c and accumulates them with
//! fma in increasing index order, chunk after chunk, starting from +0. Values past n
//! count as 0·0, which leaves a partial unchanged. The 32 partials then combine by a
//! fixed butterfly of adds with partners l^16, l^8, l^4, l^2, l^1; lane 0 holds the result.
//!
//! The CPU keeps operands in lane-major order, so that step i of chunk c is one vector:
//! lane_major[256c + 32i + l] = natural[256c + 8l + i].
const std = @import("std");

pub const lane_count = 32;
pub const values_per_lane = 8;
pub const chunk_values = lane_count * values_per_lane;

pub const Lanes = @Vector(lane_count, f32);

pub fn chunkCount(values: usize) usize {
    return std.math.divCeil(usize, values, chunk_values) catch unreachable;
}

/// Lane-major copy of one row of values into dst (chunkCount(k)·256 values, zero-padded).
pub fn toLaneMajor(src: []const f32, dst: []f32) void {
    std.debug.assert(dst.len == chunkCount(src.len) * chunk_values);
    for (0..chunkCount(src.len)) |c| {
        const base = c * chunk_values;
        for (0..values_per_lane) |i| {
            for (0..lane_count) |l| {
                const index = base + values_per_lane * l + i;
                dst[base + lane_count * i + l] = if (index < src.len) src[index] else 0;
            }
        }
    }
}

/// The fixed butterfly: after the xor-16 step lane l holds p[l] + p[l^16], and so on.
/// Float addition is commutative, so every lane ends with the same value; we return lane 0's.
pub inline fn reduce(partials: Lanes) f32 {
    var v = partials;
    inline for (butterfly_masks) |mask| v = v + @shuffle(f32, v, undefined, mask);
    return v[0];
}

/// Partner lanes l^16, l^8, l^4, l^2, l^1, in that order.
const butterfly_masks = blk: {
    var masks: [5]@Vector(lane_count, i32) = undefined;
    for (&masks, [_]u32{ 16, 8, 4, 2, 1 }) |*mask, distance| {
        for (0..lane_count) |l| mask[l] = @intCast(l ^ distance);
    }
    break :blk masks;
};

/// Accumulates a lane-major row against lane-major weights: one step per 32 values, in order.
pub inline fn accumulate(acc: Lanes, weights: []const f32, values: []const f32) Lanes {
    var a = acc;
    var p: usize = 0;
    while (p < weights.len) : (p += lane_count) {
        a = @mulAdd(Lanes, weights[p..][0..lane_count].*, values[p..][0..lane_count].*, a);
    }
    return a;
}

test "lane-major layout and butterfly follow the written order" {
    var natural: [300]f32 = undefined;
    for (&natural, 0..) |*x, i| x.* = @floatFromInt(i);
    var major: [512]f32 = undefined;
    toLaneMajor(&natural, &major);
    try std.testing.expectEqual(@as(f32, 8 * 3 + 5), major[32 * 5 + 3]); // lane 3, step 5 of chunk 0
    try std.testing.expectEqual(@as(f32, 256 + 8 * 1 + 2), major[256 + 32 * 2 + 1]);
    try std.testing.expectEqual(@as(f32, 0), major[256 + 32 * 0 + 6]); // value 304 is past the row: zero
    // The butterfly is not a left-to-right sum: 2^24 + 1 + 1 ... loses the ones in one order only.
    var p: Lanes = @splat(0);
    p[0] = 16777216;
    p[16] = 1;
    p[8] = 1;
    // lane 0: ((p0 + p16) + (p8 + p24)) + ... = (2^24 + 1) rounds to 2^24, then + 1 rounds to 2^24 again.
    try std.testing.expectEqual(@as(f32, 16777216), reduce(p));
    p[24] = 1; // (p8 + p24) = 2, and 2^24 + 2 is exact
    try std.testing.expectEqual(@as(f32, 16777218), reduce(p));
}
