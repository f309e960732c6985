//! Top-k token selection for sampled decoding: the k largest logits of a row, largest first,
//! ties to the lower index, the answer of the insertion loop the TypeScript sampler ran
//! (a value joins only if it compares greater than the current k-th, so an equal value at a
//! higher index never displaces one; NaN and -0/+0 compare as IEEE says, as they did there).
//! Once k values are held, a whole vector of candidates is rejected by one compare against
//! the k-th: on 262144 logits about every vector is, so a row costs a pass over memory
//! instead of a scalar compare per value. A decode step's rows go to the decode pool.
const std = @import("std");
const rows = @import("rows.zig");

const width = 16;
const V = @Vector(width, f32);

/// Writes the k largest of `values` into indices[0..k] and their values into kept[0..k],
/// largest first (0 < k <= values.len < 2^32).
pub fn topK(values: []const f32, indices: []u32, kept: []f32) void {
    const k = indices.len;
    std.debug.assert(k > 0 and k == kept.len and k <= values.len and values.len <= std.math.maxInt(u32));
    var count: usize = 0;
    var i: usize = 0;
    while (i < values.len and count < k) : (i += 1) {
        insert(indices, kept, &count, values[i], @intCast(i));
    }
    while (i + width <= values.len) : (i += width) {
        const v: V = values[i..][0..width].*;
        if (!@reduce(.Or, v > @as(V, @splat(kept[k - 1])))) continue;
        for (0..width) |j| insert(indices, kept, &count, values[i + j], @intCast(i + j));
    }
    while (i < values.len) : (i += 1) insert(indices, kept, &count, values[i], @intCast(i));
}

const Job = struct {
    values: []const f32,
    row_values: usize,
    ks: []const u32,
    k_max: usize,
    indices: []u32,
    kept: []f32,
    next: std.atomic.Value(usize) = .init(0),

    pub fn work(job: *Job, worker: u32) void {
        _ = worker;
        while (true) {
            const r = job.next.fetchAdd(1, .monotonic);
            if (r >= job.ks.len) return;
            const k = job.ks[r];
            if (k == 0) continue;
            const at = r * job.k_max;
            topK(job.values[r * job.row_values ..][0..job.row_values], job.indices[at..][0..k], job.kept[at..][0..k]);
        }
    }
};

/// For each row r of `values` (`ks.len` rows of `row_values`) with ks[r] > 0 (at most k_max
/// and row_values), its top ks[r] into indices and kept from r·k_max; rows with ks[r] = 0 are
/// left alone. Whole rows on the decode pool.
pub fn topKRows(values: []const f32, row_values: usize, ks: []const u32, k_max: usize, indices: []u32, kept: []f32) void {
    std.debug.assert(values.len == row_values * ks.len and indices.len == ks.len * k_max and kept.len == indices.len);
    for (ks) |k| std.debug.assert(k <= k_max and k <= row_values);
    var job: Job = .{ .values = values, .row_values = row_values, .ks = ks, .k_max = k_max, .indices = indices, .kept = kept };
    rows.run(&job, ks.len, row_values);
}

/// The sampler's step: with k values held, only a value greater than the k-th joins (it
/// replaces it); either way it moves up past every held value it is greater than.
inline fn insert(indices: []u32, kept: []f32, count: *usize, v: f32, index: u32) void {
    const k = indices.len;
    if (count.* == k and !(v > kept[k - 1])) return;
    var at = if (count.* < k) count.* else k - 1;
    if (count.* < k) count.* += 1;
    while (at > 0 and v > kept[at - 1]) : (at -= 1) {
        kept[at] = kept[at - 1];
        indices[at] = indices[at - 1];
    }
    kept[at] = v;
    indices[at] = index;
}

/// The plain loop the vector scan must equal: insert every value in order.
fn topKPlain(values: []const f32, indices: []u32, kept: []f32) void {
    var count: usize = 0;
    for (values, 0..) |v, i| insert(indices, kept, &count, v, @intCast(i));
}

test "top-k equals the plain insertion loop: ties, signed zeros, infinities, NaN anywhere, every k" {
    var prng = std.Random.DefaultPrng.init(7);
    const random = prng.random();
    var values: [300]f32 = undefined;
    var got_i: [300]u32 = undefined;
    var got_v: [300]f32 = undefined;
    var want_i: [300]u32 = undefined;
    var want_v: [300]f32 = undefined;
    const specials = [_]f32{ 0.0, -0.0, std.math.inf(f32), -std.math.inf(f32), std.math.nan(f32), 1.0, 1.0 };
    for (0..400) |round| {
        const n = 1 + random.uintLessThan(usize, values.len);
        for (values[0..n]) |*v| {
            // Few distinct values, so ties are common; a special now and then.
            v.* = if (random.uintLessThan(u32, 16) == 0) specials[random.uintLessThan(usize, specials.len)] else @floatFromInt(@as(i32, @intCast(random.uintLessThan(u32, 20))) - 10);
        }
        if (round % 3 == 0) values[random.uintLessThan(usize, n)] = std.math.nan(f32);
        const k = 1 + random.uintLessThan(usize, n);
        topK(values[0..n], got_i[0..k], got_v[0..k]);
        topKPlain(values[0..n], want_i[0..k], want_v[0..k]);
        try std.testing.expectEqualSlices(u32, want_i[0..k], got_i[0..k]);
        try std.testing.expectEqualSlices(u32, @ptrCast(want_v[0..k]), @ptrCast(got_v[0..k]));
    }
}

test "top-k of distinct values is the k largest, largest first" {
    var values: [1000]f32 = undefined;
    for (&values, 0..) |*v, i| v.* = @floatFromInt((i * 7919) % 1000);
    var indices: [5]u32 = undefined;
    var kept: [5]f32 = undefined;
    topK(&values, &indices, &kept);
    try std.testing.expectEqualSlices(f32, &.{ 999, 998, 997, 996, 995 }, &kept);
    for (indices, kept) |i, v| try std.testing.expectEqual(v, values[i]);
}

test "topKRows: each row's own k, on the pool and on the caller; rows of k = 0 untouched" {
    const allocator = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(11);
    const random = prng.random();
    for ([_]usize{ 40, rows.pooled_row_values + 5 }) |row_values| {
        const ks = [_]u32{ 3, 0, 1, 17, 40 };
        const k_max = 40;
        const values = try allocator.alloc(f32, ks.len * row_values);
        defer allocator.free(values);
        for (values) |*v| v.* = @floatFromInt(random.uintLessThan(u32, 500));
        var indices: [ks.len * k_max]u32 = @splat(7);
        var kept: [ks.len * k_max]f32 = @splat(7);
        topKRows(values, row_values, &ks, k_max, &indices, &kept);
        for (ks, 0..) |k, r| {
            var want_i: [k_max]u32 = undefined;
            var want_v: [k_max]f32 = undefined;
            if (k > 0) topKPlain(values[r * row_values ..][0..row_values], want_i[0..k], want_v[0..k]);
            try std.testing.expectEqualSlices(u32, want_i[0..k], indices[r * k_max ..][0..k]);
            try std.testing.expectEqualSlices(f32, want_v[0..k], kept[r * k_max ..][0..k]);
            for (indices[r * k_max + k ..][0 .. k_max - k]) |i| try std.testing.expectEqual(7, i);
        }
    }
}
