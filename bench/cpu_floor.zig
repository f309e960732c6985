//! What an exact f32 decode of Q8_0 costs a core of this CPU at best: a developer tool for
//! the CPU kernels (not part of the library or the tests), self-contained:
//!
//!     zig run -OReleaseFast -mcpu=native -lc bench/cpu_floor.zig
//!
//! NUMERICS.md makes every weight an exact f32 (code · scale) before its fma, so any
//! kernel that keeps the contract converts, scales and adds each weight on its own. The
//! loops below do only that, one thread, in natural order with no permutes (the canonical
//! lane order needs an 8 × 8 transpose on top), at the machine's own vector width:
//! - `arithmetic`: convert + multiply + fma of codes already widened, from L1;
//! - `q8_0 (L2)` and `q8_0 (memory)`: the same from Q8_0 blocks (34 bytes: an f16 scale, 32
//!   codes), widening loads included, over 32 KiB rows that stay in L2 or 64 MiB that do not.
//! The ns per weight they print bound from below what `./lmhead bench` can reach per weight
//! and thread at N = 1; the fma rate is what the matvec's fmas share.
const std = @import("std");

const width = std.simd.suggestVectorLength(f32) orelse 8;
const V = @Vector(width, f32);
const block_bytes = 34;
const block_values = 32;
const hidden = 2816;
const row_bytes = hidden / block_values * block_bytes;

extern "c" fn clock_gettime(clock: std.c.clockid_t, time: *std.c.timespec) c_int;

fn nowNs() u64 {
    var t: std.c.timespec = undefined;
    _ = clock_gettime(.MONOTONIC, &t);
    return @as(u64, @intCast(t.sec)) * std.time.ns_per_s + @as(u64, @intCast(t.nsec));
}

/// Each row's dot product with x, decoding every weight exactly (code · scale, then fma).
fn q8Rows(weights: []const u8, rows: usize, x: []const f32, out: []f32) void {
    const steps = block_values / width;
    for (0..rows) |j| {
        const row = weights[j * row_bytes ..][0..row_bytes];
        var acc: [steps]V = @splat(@splat(0));
        for (0..hidden / block_values) |b| {
            const block = row[b * block_bytes ..][0..block_bytes];
            @prefetch(block.ptr + 8192, .{ .locality = 2 });
            const d: V = @splat(@floatCast(@as(f16, @bitCast(std.mem.readInt(u16, block[0..2], .little)))));
            inline for (0..steps) |k| {
                const codes: @Vector(width, i8) = @bitCast(block[2 + width * k ..][0..width].*);
                const y: V = x[b * block_values + width * k ..][0..width].*;
                acc[k] = @mulAdd(V, @as(V, @floatFromInt(codes)) * d, y, acc[k]);
            }
        }
        var sum: V = @splat(0);
        for (acc) |a| sum += a;
        out[j] = @reduce(.Add, sum);
    }
}

/// The same arithmetic on widened codes from a 1 KiB table in L1: no weight loads.
fn arithmeticRows(rows: usize, codes: []const i32, x: []const f32, out: []f32) void {
    const steps = block_values / width;
    for (0..rows) |j| {
        var acc: [steps]V = @splat(@splat(0));
        for (0..hidden / block_values) |b| {
            const d: V = @splat(@floatFromInt(j + b));
            inline for (0..steps) |k| {
                const q: @Vector(width, i32) = codes[(b % 8) * block_values + width * k ..][0..width].*;
                const y: V = x[b * block_values + width * k ..][0..width].*;
                acc[k] = @mulAdd(V, @as(V, @floatFromInt(q)) * d, y, acc[k]);
            }
        }
        var sum: V = @splat(0);
        for (acc) |a| sum += a;
        out[j] = @reduce(.Add, sum);
    }
}

/// Best of 5 timings of `weights` weights' work, in ns per weight.
fn best(comptime f: anytype, args: anytype, weights: usize) f64 {
    var min: u64 = std.math.maxInt(u64);
    for (0..5) |_| {
        const start = nowNs();
        @call(.never_inline, f, args);
        min = @min(min, nowNs() - start);
    }
    return @as(f64, @floatFromInt(min)) / @as(f64, @floatFromInt(weights));
}

fn repeat(comptime f: anytype, times: usize, args: anytype) void {
    for (0..times) |_| @call(.never_inline, f, args);
}

fn fmaChains(rounds: *const volatile usize, sink: *f32) void {
    var acc: [16]V = undefined;
    for (&acc, 0..) |*a, i| a.* = @splat(@floatFromInt(i));
    for (0..rounds.*) |_| {
        inline for (&acc) |*a| a.* = @mulAdd(V, a.*, @splat(0.999), @splat(0.001));
    }
    var sum: V = @splat(0);
    for (acc) |a| sum += a;
    sink.* = @reduce(.Add, sum);
}

pub fn main() !void {
    const allocator = std.heap.page_allocator;
    const memory_rows = (64 << 20) / row_bytes;
    const l2_rows = (32 << 10) / row_bytes;
    const weights = try allocator.alloc(u8, memory_rows * row_bytes);
    defer allocator.free(weights);
    var prng = std.Random.DefaultPrng.init(1);
    prng.random().bytes(weights);
    // Every scale 2^-14 (f16 0x0400), a normal f16, so no product is subnormal.
    for (0..weights.len / block_bytes) |b| std.mem.writeInt(u16, weights[b * block_bytes ..][0..2], 0x0400, .little);
    const x = try allocator.alloc(f32, hidden);
    defer allocator.free(x);
    for (x, 0..) |*v, i| v.* = @floatFromInt(i % 7);
    const codes = try allocator.alloc(i32, 8 * block_values);
    defer allocator.free(codes);
    for (codes, 0..) |*c, i| c.* = @as(i32, @intCast(i % 255)) - 127;
    const out = try allocator.alloc(f32, memory_rows);
    defer allocator.free(out);

    var sink: f32 = 0;
    // Read through a volatile pointer, so the chains are not folded at compile time.
    const rounds: usize = 10_000_000;
    const fma_ns = best(fmaChains, .{ &rounds, &sink }, rounds * 16 * width);
    const l2_repeats = memory_rows / l2_rows;
    std.debug.print("{d}-lane f32 vectors, one thread; Q8_0 rows of {d} values\n", .{ width, hidden });
    std.debug.print("fma rate:        {d:.2} G f32 fmas/s\n", .{1 / fma_ns});
    std.debug.print("arithmetic:      {d:.3} ns/weight\n", .{best(arithmeticRows, .{ memory_rows, codes, x, out }, memory_rows * hidden)});
    std.debug.print("q8_0 (L2):       {d:.3} ns/weight\n", .{best(repeat, .{ q8Rows, l2_repeats, .{ weights, l2_rows, x, out } }, l2_repeats * l2_rows * hidden)});
    std.debug.print("q8_0 (memory):   {d:.3} ns/weight ({d} MiB)\n", .{ best(q8Rows, .{ weights, memory_rows, x, out }, memory_rows * hidden), weights.len >> 20 });
    std.debug.print("(checksum {d})\n", .{out[0] + sink});
}
