//! Greedy token selection for a decode loop: the index of a row's largest logit, ties to the
//! lowest index (hf2q's argmax contract), the answer of the plain loop
//! `best = 0; for i in 1..n: if v[i] > v[best]: best = i`, NaN included (a NaN is never
//! greater, and a NaN at index 0 is never beaten). Rows go to a pool of threads, a whole row
//! each: the logits a GPU copies back are in no cache, and on an H200 host one thread read 64
//! rows of 262144 in 12-14 ms, the pool in about 2 ms, JavaScript's loop in 16-24 ms, more
//! than half of a 64-slot decode step (bench/results/cuda-h200.md).
const std = @import("std");
const rows = @import("rows.zig");

/// Lanes of one vector, and vectors per step: each lane keeps the first of its own largest
/// values, so the steps' compares are independent and the loop runs at the memory's pace.
const width = 8;
const vectors = 4;
const step_values = width * vectors;
const V = @Vector(width, f32);
const I = @Vector(width, u32);
const none = std.math.maxInt(u32);

/// The index of the largest of `values` (non-empty, fewer than 2^32), ties to the lowest.
pub fn argmax(values: []const f32) u32 {
    std.debug.assert(values.len > 0 and values.len <= none);
    // A NaN first value is never beaten. Any other NaN is never taken: a lane's best changes
    // only to a value that compares greater, which a NaN never does.
    if (std.math.isNan(values[0])) return 0;
    var best: [vectors]V = @splat(@splat(-std.math.inf(f32)));
    var index: [vectors]I = @splat(@splat(none));
    var at: I = std.simd.iota(u32, width);
    var i: usize = 0;
    while (i + step_values <= values.len) : (i += step_values) {
        inline for (0..vectors) |k| {
            const v: V = values[i + k * width ..][0..width].*;
            const greater = v > best[k];
            best[k] = @select(f32, greater, v, best[k]);
            index[k] = @select(u32, greater, at + @as(I, @splat(k * width)), index[k]);
        }
        at += @splat(step_values);
    }
    // The lanes' bests, each the first of its lane's largest: the largest, ties to the lowest
    // index. A lane that saw only -Inf (or NaN) holds none.
    var best_value = -std.math.inf(f32);
    var best_index: u32 = none;
    inline for (0..vectors) |k| {
        const lane_values: [width]f32 = best[k];
        const lane_indices: [width]u32 = index[k];
        for (lane_values, lane_indices) |v, j| {
            if (j != none and (best_index == none or v > best_value or (v == best_value and j < best_index))) {
                best_value = v;
                best_index = j;
            }
        }
    }
    // The tail lies past every index above: taken only when greater.
    while (i < values.len) : (i += 1) {
        if (values[i] > best_value) {
            best_value = values[i];
            best_index = @intCast(i);
        }
    }
    // Nothing above -Inf: every value is -Inf or NaN, and values[0] is -Inf.
    return if (best_index == none) 0 else best_index;
}

const Job = struct {
    values: []const f32,
    row_values: usize,
    out: []u32,
    next: std.atomic.Value(usize) = .init(0),

    pub fn work(job: *Job, worker: u32) void {
        _ = worker;
        while (true) {
            const r = job.next.fetchAdd(1, .monotonic);
            if (r >= job.out.len) return;
            job.out[r] = argmax(job.values[r * job.row_values ..][0..job.row_values]);
        }
    }
};

/// out[r] = argmax(row r) for the rows of `values` (`out.len` rows of `row_values`), whole
/// rows on the decode pool.
pub fn argmaxRows(values: []const f32, row_values: usize, out: []u32) void {
    std.debug.assert(row_values > 0 and row_values <= none and values.len == row_values * out.len);
    var job: Job = .{ .values = values, .row_values = row_values, .out = out };
    rows.run(&job, out.len, row_values);
}

// ---------------------------------------------------------------------------------------------
// Tests

const testing = std.testing;

fn plain(values: []const f32) u32 {
    var best: u32 = 0;
    for (values[1..], 1..) |v, i| {
        if (v > values[best]) best = @intCast(i);
    }
    return best;
}

test "argmax: the plain loop's index, ties to the lowest, on rows of every length and of special values" {
    var prng = std.Random.DefaultPrng.init(0x5EED);
    const r = prng.random();
    var buf: [700]f32 = undefined;
    const specials = [_]f32{ 0.0, -0.0, 1.0, -1.0, std.math.inf(f32), -std.math.inf(f32), std.math.nan(f32), 3.5, 3.5 };
    for (1..buf.len + 1) |n| {
        const row = buf[0..n];
        for (0..4) |kind| {
            for (row) |*v| v.* = switch (kind) {
                0 => r.float(f32) * 60 - 30, // logits
                1 => @floatFromInt(r.uintLessThan(u8, 4)), // many ties
                2 => specials[r.uintLessThan(usize, specials.len)],
                else => -std.math.inf(f32),
            };
            try testing.expectEqual(plain(row), argmax(row));
        }
    }
}

test "argmax: the largest value at every position of a row, and a NaN in front of it" {
    var row: [300]f32 = undefined;
    for (0..row.len) |p| {
        for (&row, 0..) |*v, i| v.* = @floatFromInt(i % 7);
        row[p] = 100;
        try testing.expectEqual(@as(u32, @intCast(p)), argmax(&row));
        row[0] = std.math.nan(f32);
        try testing.expectEqual(@as(u32, 0), argmax(&row));
    }
}

test "argmaxRows: every row's argmax, on the pool and on the caller" {
    const allocator = testing.allocator;
    var prng = std.Random.DefaultPrng.init(0xA55);
    const r = prng.random();
    for ([_]usize{ 5, rows.pooled_row_values + 3 }) |row_values| {
        for ([_]usize{ 1, 2, 17 }) |row_count| {
            const values = try allocator.alloc(f32, row_count * row_values);
            defer allocator.free(values);
            const out = try allocator.alloc(u32, row_count);
            defer allocator.free(out);
            for (values) |*v| v.* = @floatFromInt(r.uintLessThan(u16, 1000));
            argmaxRows(values, row_values, out);
            for (out, 0..) |got, row| try testing.expectEqual(plain(values[row * row_values ..][0..row_values]), got);
        }
    }
}
