//! What an exact f32 decode of Q8_0 costs a core of this CPU at best: a developer tool for
//! the CPU kernels (not part of the library or the tests), self-contained:
//!
//!     zig run -OReleaseFast -mcpu=native -lc bench/cpu_floor.zig
//!
//! (with AVX-512, `-mcpu=native-prefer_256_bit`: the width build.zig gives the AVX-512
//! kernels; LLVM's tuning for many Intel CPUs would halve it).
//!
//! NUMERICS.md makes every weight an exact f32 (code · scale) before its fma, so any
//! kernel that keeps the contract converts, scales and adds each weight on its own. The
//! loops below do only that, one thread, in natural order with no permutes (the canonical
//! lane order needs an 8 × 8 transpose on top), at the machine's own vector width:
//! - `arithmetic`: convert + multiply + fma of codes already widened, from L1;
//! - `q8_0 (L2)` and `q8_0 (memory)`: the same from Q8_0 blocks (34 bytes: an f16 scale, 32
//!   codes), widening loads included, over 32 KiB rows that stay in L2 or 64 MiB that do not.
//! - `sweep`: the fmas of a larger batch alone, laid out as the kernels' tiles
//!   (native/backends/cpu/kernels.zig): a block of 2 chunks of 6 vocab rows' decoded values
//!   in L1, swept by 3 vocab rows × 4 batch rows of 32-lane accumulators held in registers
//!   over the block, for N = 8 and 32 batch rows of inputs read from L2 as the kernel reads
//!   them, or, for comparison, the same 4 rows (from L1) for every group.
//! - `pipes` (x86-64 with AVX-512): the decoder's kinds of vector operation timed alone and
//!   beside fmas, which says which of them share the fmas' pipes.
//! The ns per weight they print bound from below what `./lmhead bench` can reach per weight
//! and thread at N = 1; the fma rate is what the matvec's fmas share, and the sweep's share of
//! it bounds what a tile reaches at larger N before any decoding.
const std = @import("std");
const builtin = @import("builtin");

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

const lanes = 32;
const tile_rows = 6;
const tile_block_values = 512;
const group_rows = 4;
const sweep_rows = 3;
/// Parts of each 32-lane accumulator held at once, as kernels.zig's sweep_parts.
const held_parts = if (width >= 16) lanes / width else 1;

/// Tiles of 6 vocab rows against `rows` batch rows of `inputs` (rows × hidden, in lane-major
/// order as the kernel's), a block of decoded values at a time; the decoded block is the
/// same for every block and tile, so nothing but the sweeps' loads and fmas is timed.
fn sweepTiles(tiles: usize, rows: usize, inputs_l1: bool, decoded: []const f32, inputs: []const f32, accs: []f32) void {
    for (0..tiles) |_| {
        var begin: usize = 0;
        while (begin < hidden) : (begin += tile_block_values) {
            const end = @min(begin + tile_block_values, hidden);
            var first_row: usize = 0;
            while (first_row < rows) : (first_row += group_rows) {
                inline for (0..tile_rows / sweep_rows) |s| {
                    const input_row = if (inputs_l1) 0 else first_row;
                    sweep(decoded[s * sweep_rows * tile_block_values ..], inputs[input_row * hidden ..], accs[(s * sweep_rows * rows + first_row) * lanes ..], rows, begin, end);
                }
            }
        }
    }
}

/// 3 vocab rows × 4 batch rows over values [begin, end), held_parts of each accumulator a pass.
inline fn sweep(decoded: []const f32, inputs: []const f32, accs: []f32, rows: usize, begin: usize, end: usize) void {
    @setEvalBranchQuota(10_000); // 8 passes of 4-lane vectors unroll past the default
    inline for (0..lanes / width / held_parts) |pass| {
        var acc: [sweep_rows][group_rows][held_parts]V = undefined;
        inline for (0..sweep_rows) |t| inline for (0..group_rows) |g| inline for (0..held_parts) |p| {
            acc[t][g][p] = accs[(t * rows + g) * lanes + (pass * held_parts + p) * width ..][0..width].*;
        };
        var at = begin;
        while (at < end) : (at += lanes) {
            inline for (0..group_rows) |g| inline for (0..held_parts) |p| {
                const lane = (pass * held_parts + p) * width;
                const y: V = inputs[g * hidden + at + lane ..][0..width].*;
                inline for (0..sweep_rows) |t| {
                    const w: V = decoded[t * tile_block_values + (at - begin) + lane ..][0..width].*;
                    acc[t][g][p] = @mulAdd(V, w, y, acc[t][g][p]);
                }
            };
        }
        inline for (0..sweep_rows) |t| inline for (0..group_rows) |g| inline for (0..held_parts) |p| {
            accs[(t * rows + g) * lanes + (pass * held_parts + p) * width ..][0..width].* = acc[t][g][p];
        };
    }
}

/// Best of 9 timings of `weights` weights' work, in ns per weight.
fn best(comptime f: anytype, args: anytype, weights: usize) f64 {
    var min: u64 = std.math.maxInt(u64);
    for (0..9) |_| {
        const start = nowNs();
        @call(.never_inline, f, args);
        min = @min(min, nowNs() - start);
    }
    return @as(f64, @floatFromInt(min)) / @as(f64, @floatFromInt(weights));
}

fn repeat(comptime f: anytype, times: usize, args: anytype) void {
    for (0..times) |_| @call(.never_inline, f, args);
}

/// As the library's probe (native/backends/cpu/kernels.zig): chains enough for every fma
/// unit's latency, few enough to stay in the registers (16 spilled from AVX2's 16).
const fma_chains = if (builtin.cpu.arch != .x86_64 or std.Target.x86.featureSetHas(builtin.cpu.features, .avx512f)) 16 else 12;

fn fmaChains(rounds: *const volatile usize, sink: *f32) void {
    var acc: [fma_chains]V = undefined;
    for (&acc, 0..) |*a, i| a.* = @splat(@floatFromInt(i));
    for (0..rounds.*) |_| {
        inline for (&acc) |*a| a.* = @mulAdd(V, a.*, @splat(0.999), @splat(0.001));
    }
    var sum: V = @splat(0);
    for (acc) |a| sum += a;
    sink.* = @reduce(.Add, sum);
}

/// The vector operations a decoder issues, timed alone and beside fmas (x86-64 with AVX-512
/// only): 8 independent 512-bit operations of each kind a loop, in asm so that nothing is
/// reordered or folded, on registers cleared first (no subnormal operand). A pair that runs
/// twice as many operations a second as fmas alone uses other pipes; as many, the same ones.
const pipes_measured = builtin.cpu.arch == .x86_64 and std.Target.x86.featureSetHas(builtin.cpu.features, .avx512f);
/// Each kind's operation i of 8: fmas into 8 chains (zmm0-7, the register i), the others
/// from zmm16-23 into zmm24-31 (the registers 16 + i, 24 + i).
const pipe_ops = [_]struct { name: []const u8, op: []const u8 }{
    .{ .name = "fma", .op = "vfmadd231ps %%zmm8, %%zmm9, %%zmm{d}" },
    .{ .name = "multiply", .op = "vmulps %%zmm{d}, %%zmm10, %%zmm{d}" },
    .{ .name = "add", .op = "vaddps %%zmm{d}, %%zmm10, %%zmm{d}" },
    .{ .name = "convert", .op = "vcvtdq2ps %%zmm{d}, %%zmm{d}" },
    .{ .name = "byte shuffle", .op = "vpshufb %%zmm{d}, %%zmm11, %%zmm{d}" },
};

fn pipeLoop(comptime kinds: []const usize) fn (*const volatile usize) void {
    comptime var clear: []const u8 = "";
    inline for (0..32) |r| clear = clear ++ std.fmt.comptimePrint("vpxord %%zmm{0d}, %%zmm{0d}, %%zmm{0d}\n", .{r});
    comptime var body: []const u8 = "";
    inline for (0..8) |i| inline for (kinds) |k| {
        const op = if (k == 0) std.fmt.comptimePrint(pipe_ops[k].op, .{i}) else std.fmt.comptimePrint(pipe_ops[k].op, .{ 16 + i, 24 + i });
        body = body ++ op ++ "\n";
    };
    const clobbers = comptime blk: {
        var c: std.lang.assembly.Clobbers = .{ .cc = true };
        for (0..32) |r| @field(c, std.fmt.comptimePrint("zmm{d}", .{r})) = true;
        break :blk c;
    };
    return struct {
        fn run(rounds: *const volatile usize) void {
            var n: usize = rounds.*;
            asm volatile (clear ++ "1:\n" ++ body ++ "dec %[n]\njnz 1b\n"
                : [n] "+r" (n),
                :
                : clobbers);
        }
    }.run;
}

/// Operations a nanosecond of `kinds` together, best of 5.
fn pipeRate(comptime kinds: []const usize) f64 {
    const rounds: usize = 10_000_000;
    return 1 / best(pipeLoop(kinds), .{&rounds}, rounds * 8 * kinds.len);
}

fn printPipes() void {
    if (pipes_measured) printPipeRates() else std.debug.print("pipes: measured with AVX-512 only\n", .{});
}

fn printPipeRates() void {
    const fma = pipeRate(&.{0});
    std.debug.print("512-bit operations a ns, alone / beside as many fmas (x the fma rate alone):\n", .{});
    std.debug.print("  {s: <13} {d:.2}\n", .{ pipe_ops[0].name, fma });
    inline for (1..pipe_ops.len) |k| {
        const pair = pipeRate(&.{ 0, k });
        std.debug.print("  {s: <13} {d:.2} / {d:.2} (x{d:.2})\n", .{ pipe_ops[k].name, pipeRate(&.{k}), pair, pair / fma });
    }
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
    const rounds: usize = 2_000_000;
    const fma_ns = best(fmaChains, .{ &rounds, &sink }, rounds * fma_chains * width);
    const l2_repeats = memory_rows / l2_rows;
    std.debug.print("{d}-lane f32 vectors, one thread; Q8_0 rows of {d} values\n", .{ width, hidden });
    std.debug.print("fma rate:        {d:.2} G f32 fmas/s\n", .{1 / fma_ns});
    std.debug.print("arithmetic:      {d:.3} ns/weight\n", .{best(arithmeticRows, .{ memory_rows, codes, x, out }, memory_rows * hidden)});
    std.debug.print("q8_0 (L2):       {d:.3} ns/weight\n", .{best(repeat, .{ q8Rows, l2_repeats, .{ weights, l2_rows, x, out } }, l2_repeats * l2_rows * hidden)});
    std.debug.print("q8_0 (memory):   {d:.3} ns/weight ({d} MiB)\n", .{ best(q8Rows, .{ weights, memory_rows, x, out }, memory_rows * hidden), weights.len >> 20 });
    const decoded = try allocator.alignedAlloc(f32, .@"64", tile_rows * tile_block_values);
    defer allocator.free(decoded);
    for (decoded, 0..) |*v, i| v.* = @floatFromInt(i % 5);
    const batch_max = 32;
    const inputs = try allocator.alignedAlloc(f32, .@"64", batch_max * hidden);
    defer allocator.free(inputs);
    for (inputs, 0..) |*v, i| v.* = @floatFromInt(i % 3);
    const accs = try allocator.alignedAlloc(f32, .@"64", tile_rows * batch_max * lanes);
    defer allocator.free(accs);
    @memset(accs, 0);
    for ([_]usize{ 8, batch_max }) |rows| {
        for ([_]bool{ false, true }) |inputs_l1| {
            const tiles = 32768 / rows;
            const fmas = tiles * tile_rows * hidden * rows;
            // The fma rate again beside each sweep: on a shared machine it moves between runs.
            var sweep_ns: f64 = std.math.inf(f64);
            var rate_ns: f64 = std.math.inf(f64);
            for (0..3) |_| {
                rate_ns = @min(rate_ns, best(fmaChains, .{ &rounds, &sink }, rounds * fma_chains * width));
                sweep_ns = @min(sweep_ns, best(sweepTiles, .{ tiles, rows, inputs_l1, decoded, inputs, accs }, fmas));
            }
            std.debug.print("sweep N = {d: >2} ({s}): {d:.2} G fmas/s, {d:.0}% of the fma rate beside it\n", .{ rows, if (inputs_l1) "inputs in L1" else "inputs from L2", 1 / sweep_ns, 100 * rate_ns / sweep_ns });
        }
    }
    printPipes();
    std.debug.print("(checksum {d})\n", .{out[0] + sink + accs[0]});
}
