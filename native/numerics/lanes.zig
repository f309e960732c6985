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
/// Only lane 0's adds are made: lanes below n/2 have partners l + n/2, so each step adds the
/// upper half of the vector to the lower (the same operands in the same order), halving it.
pub inline fn reduce(partials: Lanes) f32 {
    return halves(1, halves(2, halves(4, halves(8, halves(16, partials)))))[0];
}

/// reduce of each of k ≤ 16 partials held as two 16-lane halves (lanes 0-15, 16-31), the
/// butterfly's adds made for several at once: each step adds, for two vectors' sums, the
/// upper half of their lanes to the lower (the same operands in the same order as reduce),
/// into one vector of twice as many sums. Sum o ends in lane manyLane(o); the lanes of the
/// padding past k hold no sum.
pub inline fn reduceMany(comptime k: usize, partials: [k][2]@Vector(16, f32)) @Vector(16, f32) {
    comptime std.debug.assert(k >= 1 and k <= 16);
    var v: [16]@Vector(16, f32) = @splat(@splat(0));
    inline for (0..k) |o| v[o] = partials[o][0] + partials[o][1]; // partners l^16
    comptime var n = k;
    inline for (many_masks) |m| {
        inline for (0..(n + 1) / 2) |i| {
            v[i] = @shuffle(f32, v[2 * i], v[2 * i + 1], m[0]) + @shuffle(f32, v[2 * i], v[2 * i + 1], m[1]);
        }
        n = (n + 1) / 2;
    }
    return v[0];
}

/// reduce of each of 8 partials held by lane pairs: element e of pairs[j] is lane 2j + e%2
/// of partial e/2. Lanes l and l ^ 16 are pairs j and j + 8, l ^ 8, l ^ 4 and l ^ 2 pairs
/// j + 4, j + 2 and j + 1, and l ^ 1 the two elements of pair 0 (the same operands in the
/// same order as reduce). Sum n ends in element n.
pub inline fn reducePairs(pairs: [lane_count / 2]@Vector(16, f32)) @Vector(8, f32) {
    var v = pairs;
    inline for (.{ 8, 4, 2, 1 }) |half| {
        inline for (0..half) |j| v[j] = v[j] + v[j + half];
    }
    const even: [8]i32 = .{ 0, 2, 4, 6, 8, 10, 12, 14 };
    const odd: [8]i32 = .{ 1, 3, 5, 7, 9, 11, 13, 15 };
    return @shuffle(f32, v[0], undefined, even) + @shuffle(f32, v[0], undefined, odd);
}

/// The lane of reduceMany's result that holds sum o: a 4 × 4 transpose.
pub fn manyLane(o: usize) usize {
    return 4 * (o % 4) + o / 4;
}

/// The masks of reduceMany's steps, for partners l^8, l^4, l^2 and l^1: the lower and the
/// upper lanes of each sum's group of 2·half, from both vectors (negative indices pick the
/// second).
const many_masks = blk: {
    var masks: [4][2]@Vector(16, i32) = undefined;
    for (&masks, .{ 8, 4, 2, 1 }) |*m, half| for (0..2) |upper| for (0..16) |lane| {
        // Steps of 8 and 4 lanes keep the sums in order (first vector's, then second's);
        // steps of 2 and 1 interleave them within each 128-bit unit, as vshufps does.
        const from_b, const src = if (half >= 4) .{
            lane / half >= 8 / half,
            (lane / half % (8 / half)) * 2 * half + upper * half + lane % half,
        } else .{
            lane % 4 >= 2,
            lane / 4 * 4 + (if (half == 2) upper * 2 + lane % 2 else upper + lane % 2 * 2),
        };
        m[upper][lane] = if (from_b) ~@as(i32, src) else @as(i32, src);
    };
    break :blk masks;
};

/// Lanes [0, n) of v plus lanes [n, 2n): one step of the butterfly, for the lanes below n.
inline fn halves(comptime n: usize, v: @Vector(2 * n, f32)) @Vector(n, f32) {
    comptime var low: [n]i32 = undefined;
    comptime var high: [n]i32 = undefined;
    inline for (0..n) |l| {
        low[l] = l;
        high[l] = l + n;
    }
    return @shuffle(f32, v, undefined, low) + @shuffle(f32, v, undefined, high);
}

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

test "reduce is lane 0 of the whole butterfly" {
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    for (0..1000) |_| {
        var v: [lane_count]f32 = undefined;
        // Wide exponents, so that the order of the adds shows in the rounding.
        for (&v) |*x| x.* = (random.float(f32) - 0.5) * std.math.pow(f32, 2, @floatFromInt(random.intRangeAtMost(i32, -30, 30)));
        const partials: Lanes = v;
        for ([_]u32{ 16, 8, 4, 2, 1 }) |distance| {
            const before = v;
            for (&v, 0..) |*x, l| x.* = before[l] + before[l ^ distance];
        }
        try std.testing.expectEqual(@as(u32, @bitCast(v[0])), @as(u32, @bitCast(reduce(partials))));
    }
}

test "reduceMany gives each sum reduce's bits" {
    @setEvalBranchQuota(10000);
    var prng = std.Random.DefaultPrng.init(0x5eed);
    const random = prng.random();
    inline for (1..17) |k| {
        for (0..50) |_| {
            var partials: [k][2]@Vector(16, f32) = undefined;
            var whole: [k]Lanes = undefined;
            for (0..k) |o| {
                var v: [lane_count]f32 = undefined;
                // Wide exponents, so that the order of the adds shows in the rounding.
                for (&v) |*x| x.* = (random.float(f32) - 0.5) * std.math.pow(f32, 2, @floatFromInt(random.intRangeAtMost(i32, -30, 30)));
                whole[o] = v;
                partials[o] = .{ v[0..16].*, v[16..32].* };
            }
            const sums: [16]f32 = reduceMany(k, partials);
            for (0..k) |o| try std.testing.expectEqual(@as(u32, @bitCast(reduce(whole[o]))), @as(u32, @bitCast(sums[manyLane(o)])));
        }
    }
}

test "reducePairs gives each sum reduce's bits" {
    var prng = std.Random.DefaultPrng.init(0x9a125);
    const random = prng.random();
    for (0..200) |_| {
        var whole: [8]Lanes = undefined;
        var pairs: [lane_count / 2][16]f32 = undefined;
        for (0..8) |n| {
            var v: [lane_count]f32 = undefined;
            // Wide exponents, so that the order of the adds shows in the rounding.
            for (&v) |*x| x.* = (random.float(f32) - 0.5) * std.math.pow(f32, 2, @floatFromInt(random.intRangeAtMost(i32, -30, 30)));
            whole[n] = v;
            for (0..lane_count) |l| pairs[l / 2][2 * n + l % 2] = v[l];
        }
        var vectors: [lane_count / 2]@Vector(16, f32) = undefined;
        for (&vectors, pairs) |*vector, pair| vector.* = pair;
        const sums: [8]f32 = reducePairs(vectors);
        for (0..8) |n| try std.testing.expectEqual(@as(u32, @bitCast(reduce(whole[n]))), @as(u32, @bitCast(sums[n])));
    }
}
