//! lmhead-gpu-check: the CUDA backend against the CPU backend, through the C ABI, on a
//! machine with a GPU and no Bun. `check` runs the head (norm, matvec, softcap, non-finite
//! count) on both backends for every head type and N, rows in random slot order, and
//! compares the logits byte for byte; `bench` times the CUDA head per type and N against
//! the read bandwidth and FMA rate measured in the same run. Without a usable GPU it prints
//! why and exits 0, so CI machines skip it with a reason; where NVRTC loads it then compiles
//! into the cache (LMHEAD_CACHE; with LMHEAD_CUDA_FTZ=1 the --ftz=true ones) every module the
//! same command would load on a GPU (every one-row module, which a device compiles when it
//! opens, and every module of the types listed), so a GPU machine's run can start from
//! modules compiled elsewhere.
//!
//!   lmhead-gpu-check check [TYPES]   every head type x N, or those listed (e.g. `Q3_K,Q8_0`),
//!                            realistic and adversarial inputs, --ftz both ways
//!   lmhead-gpu-check bench [TYPES [ROWS [VOCAB]]]   ms per call, % of the floor, at vocab 262144
//!                            (or VOCAB) x hidden 2816, for every head type and N, or those listed
//!                            (e.g. `Q6_K,F16 1,8`; a vocab whose weights fit the GPU's L2 cache
//!                            tells memory-bound kernels from the others)
const std = @import("std");
const formats = @import("numerics/formats.zig");
const device_mod = @import("core/device.zig");
const cuda_driver = @import("backends/cuda/driver.zig");
const cuda_backend = @import("backends/cuda/backend.zig");
const status = @import("core/status.zig");

/// The issue's N, and 13, which the resident types run in the wide rest pass.
const check_rows = [_]u32{ 1, 2, 3, 5, 8, 9, 13, 16, 17, 33, 64 };
const bench_rows = [_]u32{ 1, 2, 4, 8, 16, 32, 64 };
const max_bench_rows = 16;
const pool_rows = 64;
const full_vocab = 262144;
const full_hidden = 2816;
const cap = 30.0;
/// Distinct random weight rows; the rest of a head repeats them (as bench/weights.ts does),
/// so generating a 3 GB head takes a memcpy, not minutes.
const tile_rows = 4096;

/// The C ABI: root.zig's exported functions, called as a program linking liblmhead would.
const lib = @import("root.zig");

const Failure = error{ Lmhead, Mismatch, OutOfMemory };

fn ok(code: i32) Failure!void {
    return Outcome.of(code).check();
}

/// A call's status with its message, taken at once: a cleanup call that succeeds after a
/// failing one clears this thread's message.
const Outcome = struct {
    code: i32,
    text: [512]u8 = undefined,
    len: usize = 0,

    fn of(code: i32) Outcome {
        var o: Outcome = .{ .code = code };
        if (code != 0) o.len = @intCast(@min(lib.lmh_last_error(&o.text, o.text.len), o.text.len));
        return o;
    }

    fn check(o: Outcome) Failure!void {
        if (o.code == 0) return;
        std.debug.print("lmhead error {d}: {s}\n", .{ o.code, o.text[0..o.len] });
        return error.Lmhead;
    }
};

extern "c" fn clock_gettime(clock: std.c.clockid_t, time: *std.c.timespec) c_int;
extern "c" fn setenv(name: [*:0]const u8, value: [*:0]const u8, overwrite: c_int) c_int;

fn seconds() f64 {
    var t: std.c.timespec = undefined;
    _ = clock_gettime(.MONOTONIC, &t);
    return @as(f64, @floatFromInt(t.sec)) + @as(f64, @floatFromInt(t.nsec)) * 1e-9;
}

pub fn main(init: std.process.Init.Minimal) !void {
    var args = init.args.iterate();
    _ = args.skip();
    const mode = args.next() orelse "check";
    // Every argument is checked before the device opens, so a wrong one is a usage error
    // even where no GPU is.
    const listed_types = args.next() orelse "";
    const rows_arg = args.next();
    const vocab_arg = args.next();
    if (args.next() != null) usage();
    const is_check = std.mem.eql(u8, mode, "check");
    if (!is_check and !std.mem.eql(u8, mode, "bench")) usage();
    if (is_check and rows_arg != null) usage();
    const vocab = if (vocab_arg) |v| std.fmt.parseInt(u32, v, 10) catch 0 else full_vocab;
    if (vocab == 0 or vocab > full_vocab) usage();
    const types = parseTypes(listed_types) orelse usage();
    var rows_buffer: [max_bench_rows]u32 = undefined;
    const rows = if (rows_arg) |r| parseRows(r, &rows_buffer) orelse usage() else &bench_rows;
    var cuda: u64 = 0;
    const open_start = seconds();
    const opened = lib.lmh_device_open(@backingInt(device_mod.Kind.cuda), &cuda);
    if (opened != 0) {
        var text: [512]u8 = undefined;
        const n = lib.lmh_last_error(&text, text.len);
        // Only a machine without the driver, NVRTC or a GPU skips; any other failure to open
        // (a module the driver refuses, a driver call failing) is a failure of the backend.
        if (opened != @backingInt(status.Status.unsupported)) {
            std.debug.print("FAIL: the CUDA device did not open: {s}\n", .{text[0..@min(n, text.len)]});
            std.process.exit(1);
        }
        std.debug.print("SKIP: no CUDA device: {s}\n", .{text[0..@min(n, text.len)]});
        return compileOnly(types);
    }
    var text: [256]u8 = undefined;
    var info: [3]u32 = undefined;
    var len: u64 = 0;
    try ok(lib.lmh_device_info(cuda, &info, &text, text.len, &len));
    std.debug.print("device: {s} (opened in {d:.1} s: the one-row kernels compiled or read from the cache, the others on first use)\n", .{ text[0..@min(len, text.len)], seconds() - open_start });
    if (is_check) try check(cuda, types) else try bench(cuda, types, rows, vocab);
}

fn usage() noreturn {
    std.debug.print("usage: lmhead-gpu-check check [TYPE,...] | bench [TYPE,... [N,... [VOCAB]]] (TYPE a head type, N 1 to {d}, VOCAB 1 to {d})\n", .{ pool_rows, full_vocab });
    std.process.exit(2);
}

/// One head on one device: weights, norm, and scratch for up to pool_rows rows.
const Head = struct {
    device: u64,
    type_id: u32,
    hidden: u32,
    vocab: u32,
    weight: u64,
    norm: u64,
    x: u64,
    y: u64,
    logits: u64,
    counts: u64,

    fn init(device: u64, type_id: u32, hidden: u32, vocab: u32, weights: []u8, norm: []const f32) Failure!Head {
        var h: Head = .{ .device = device, .type_id = type_id, .hidden = hidden, .vocab = vocab, .weight = 0, .norm = 0, .x = 0, .y = 0, .logits = 0, .counts = 0 };
        try ok(lib.lmh_buffer_wrap(device, weights.ptr, weights.len, &h.weight));
        try ok(lib.lmh_buffer_alloc(device, @as(u64, hidden) * 4, &h.norm));
        try ok(lib.lmh_buffer_write(h.norm, 0, std.mem.sliceAsBytes(norm).ptr, @as(u64, hidden) * 4));
        try ok(lib.lmh_buffer_alloc(device, @as(u64, pool_rows) * hidden * 4, &h.x));
        try ok(lib.lmh_buffer_alloc(device, @as(u64, pool_rows) * hidden * 4, &h.y));
        try ok(lib.lmh_buffer_alloc(device, @as(u64, pool_rows) * vocab * 4, &h.logits));
        try ok(lib.lmh_buffer_alloc(device, pool_rows * 4, &h.counts));
        return h;
    }

    fn deinit(h: *Head) void {
        for ([_]u64{ h.weight, h.norm, h.x, h.y, h.logits, h.counts }) |b| _ = lib.lmh_buffer_free(b);
    }

    /// The head on the first `rows` rows of x: the calls the TypeScript head makes (or the
    /// norm and matvec alone, to time the matvec as the head records it apart from softcap,
    /// count and the host; or the matvec of the hidden rows themselves, which the kernels
    /// flush as they read them).
    fn runStages(h: *Head, rows: u32, eps: f32, stages: Stages) Failure!void {
        return h.attempt(rows, eps, stages, null).check();
    }

    /// runStages's calls, and the outcome of the first that fails (status 0 where none
    /// does); with `device_ns`, the device's own time for them (lmh_session_finish_timed).
    /// Each outcome is taken as its return value is, before the deferred frees run.
    fn attempt(h: *Head, rows: u32, eps: f32, stages: Stages, device_ns: ?*u64) Outcome {
        var views: [4]u64 = @splat(0);
        defer for (views) |v| {
            if (v != 0) _ = lib.lmh_buffer_free(v);
        };
        const viewed = [4]struct { u64, u64 }{
            .{ h.x, @as(u64, rows) * h.hidden * 4 },
            .{ h.y, @as(u64, rows) * h.hidden * 4 },
            .{ h.logits, @as(u64, rows) * h.vocab * 4 },
            .{ h.counts, @as(u64, rows) * 4 },
        };
        for (&views, viewed) |*v, buffer| {
            const code = lib.lmh_buffer_view(buffer[0], 0, buffer[1], v);
            if (code != 0) return .of(code);
        }
        var s: u64 = 0;
        const begun = lib.lmh_session_begin(h.device, &s);
        if (begun != 0) return .of(begun);
        const recorded = blk: {
            if (stages != .matvec) {
                const code = lib.lmh_session_rms_norm(s, views[0], h.norm, views[1], rows, h.hidden, eps);
                if (code != 0) break :blk code;
            }
            const code = lib.lmh_session_matvec(s, if (stages == .matvec) views[0] else views[1], h.weight, h.type_id, views[2], rows, h.hidden, h.vocab);
            if (code != 0 or stages != .head) break :blk code;
            const capped = lib.lmh_session_softcap(s, views[2], @as(u64, rows) * h.vocab, cap);
            if (capped != 0) break :blk capped;
            break :blk lib.lmh_session_count_non_finite(s, views[2], views[3], rows, h.vocab);
        };
        if (recorded != 0) {
            const failed: Outcome = .of(recorded);
            _ = lib.lmh_session_abort(s);
            return failed;
        }
        return .of(if (device_ns) |ns| lib.lmh_session_finish_timed(s, ns) else lib.lmh_session_finish(s));
    }
};

const Stages = enum { head, norm_matvec, matvec };
const Weights = enum { realistic, adversarial };

/// Random valid weights: quantized types with real-sized scales (realistic) or any f16
/// scale, subnormal and infinite included (adversarial); dense types with values of a real
/// head, or any finite bit pattern (tiny, subnormal and huge values; adversarial).
fn fillWeights(t: formats.Type, random: std.Random, weights: []u8, row_bytes: usize, kind: Weights) void {
    const f = formats.format(@backingInt(t)).?;
    const rows = weights.len / row_bytes;
    for (0..@min(rows, tile_rows)) |r| {
        const row = weights[r * row_bytes ..][0..row_bytes];
        if (f.block_values > 1) {
            // Adversarial: some rows of infinite scales, whose logits are ±Inf (NUMERICS.md §2).
            if (kind == .adversarial and r % 8 == 3)
                formats.infiniteScaleRow(t, row)
            else
                formats.randomizeRow(t, random, row, if (kind == .realistic) .sane else .wide);
            continue;
        }
        for (0..row_bytes / f.block_bytes) |i| {
            const v: f32 = if (kind == .realistic)
                (random.float(f32) - 0.5) * 0.1
            else
                @bitCast((random.int(u32) & 0x807FFFFF) | (@as(u32, random.uintLessThan(u8, 255)) << 23));
            switch (t) {
                .f32 => std.mem.writeInt(u32, row[4 * i ..][0..4], @bitCast(v), .little),
                .f16 => std.mem.writeInt(u16, row[2 * i ..][0..2], @bitCast(@as(f16, @floatCast(v))), .little),
                .bf16 => std.mem.writeInt(u16, row[2 * i ..][0..2], @truncate(@as(u32, @bitCast(v)) >> 16), .little),
                else => unreachable,
            }
        }
    }
    var filled = @min(rows, tile_rows) * row_bytes;
    while (filled < weights.len) {
        const n = @min(filled, weights.len - filled);
        @memcpy(weights[filled..][0..n], weights[0..n]);
        filled += n;
    }
}

/// pool_rows hidden rows: realistic and positive rows (with rows of infinite weights of one
/// sign, their logits are ±Inf, not NaN), then tiny, subnormal, huge, mixed-scale and zero rows.
fn fillInputs(random: std.Random, x: []f32, hidden: usize) void {
    for (0..pool_rows) |r| {
        const row = x[r * hidden ..][0..hidden];
        for (row, 0..) |*v, i| {
            const u = random.float(f32) * 2 - 1;
            v.* = switch (r % 8) {
                0, 1 => u * 3,
                2 => 0.5 + @abs(u) * 3,
                3 => u * 1e-30, // tiny: the sum of squares underflows
                4 => @bitCast(random.int(u32) & 0x807FFFFF), // subnormal
                5 => u * 1e30, // huge: the sum of squares overflows, the row becomes NaN
                6 => u * std.math.pow(f32, 2, @floatFromInt(@as(i32, @intCast(i % 200)) - 100)), // mixed scales
                else => if (i % 7 == 0) u else 0, // mostly zeros
            };
        }
    }
}

fn check(cuda: u64, types: TypeSet) !void {
    var cpu: u64 = 0;
    try ok(lib.lmh_device_open(@backingInt(device_mod.Kind.cpu), &cpu));
    // The same kernels compiled with --ftz=true must give the same bytes.
    _ = setenv("LMHEAD_CUDA_FTZ", "1", 1);
    var cuda_ftz: u64 = 0;
    try ok(lib.lmh_device_open(@backingInt(device_mod.Kind.cuda), &cuda_ftz));
    var failures: u32 = 0;
    var cases: u32 = 0;
    var prng = std.Random.DefaultPrng.init(0x9e3779b97f4a7c15);
    const random = prng.random();
    for (formats.all, types) |f, chosen| {
        if (!chosen) continue;
        const full = f.type == .q6_k or f.type == .q8_0 or f.type == .f16;
        const Shape = struct { hidden: u32, vocab: u32, weights: Weights };
        // Full Gemma shape or a smaller vocab; a second hidden size with a partial last chunk
        // (whole blocks of 32, or any size for dense types) and an odd vocab.
        const partial_hidden: u32 = if (f.block_values == 1) 1001 else 1056;
        const shapes = [_]Shape{
            .{ .hidden = full_hidden, .vocab = if (full) full_vocab else 8192, .weights = .realistic },
            .{ .hidden = full_hidden, .vocab = 4099, .weights = .adversarial },
            .{ .hidden = partial_hidden, .vocab = 1001, .weights = .realistic },
        };
        for (shapes) |shape| {
            if (shape.hidden % f.block_values != 0) continue;
            const result = try checkShape(cpu, cuda, cuda_ftz, f, shape.hidden, shape.vocab, shape.weights, random);
            failures += result[0];
            cases += result[1];
        }
        // Whole blocks of every type (1024 for the 256-value ones, whose shapes skip 1056).
        failures += try checkRewritten(cpu, cuda, f, partial_hidden - partial_hidden % f.block_values, random);
        cases += 1;
    }
    if (for (formats.all, types) |f, chosen| {
        if (f.type == .q8_0) break chosen;
    } else false) {
        failures += try checkCopyYields(cuda, random);
        cases += 1;
    }
    std.debug.print("check: {d} of {d} cases equal to the CPU bit for bit (a NaN as any NaN)\n", .{ cases - failures, cases });
    if (failures > 0) std.process.exit(1);
}

/// Returns [failed cases, cases].
fn checkShape(cpu: u64, cuda: u64, cuda_ftz: u64, f: formats.Format, hidden: u32, vocab: u32, kind: Weights, random: std.Random) ![2]u32 {
    const a = std.heap.c_allocator;
    const row_bytes = formats.rowBytes(f.type, hidden).?;
    const weights = try a.alloc(u8, row_bytes * vocab);
    defer a.free(weights);
    fillWeights(f.type, random, weights, row_bytes, kind);
    const norm = try a.alloc(f32, hidden);
    defer a.free(norm);
    for (norm, 0..) |*w, i| w.* = 1 + 0.25 * @sin(@as(f32, @floatFromInt(i)) * 0.7);
    const x = try a.alloc(f32, pool_rows * hidden);
    defer a.free(x);
    fillInputs(random, x, hidden);
    const want = try a.alloc(f32, pool_rows * vocab);
    defer a.free(want);
    const got = try a.alloc(f32, pool_rows * vocab);
    defer a.free(got);
    const permuted = try a.alloc(f32, pool_rows * hidden);
    defer a.free(permuted);
    var want_counts: [pool_rows]u32 = undefined;
    var got_counts: [pool_rows]u32 = undefined;

    var failed: u32 = 0;
    var cases: u32 = 0;
    for ([_]f32{ 1e-6, 0 }) |eps| {
        var ref = try Head.init(cpu, @backingInt(f.type), hidden, vocab, weights, norm);
        defer ref.deinit();
        try ok(lib.lmh_buffer_write(ref.x, 0, std.mem.sliceAsBytes(x).ptr, x.len * 4));
        // The matvec of the hidden rows themselves (once, as it has no eps): no norm before
        // it, so the kernels flush their input.
        const stages_list: []const Stages = if (eps == 0) &.{.head} else &.{ .head, .matvec };
        for (stages_list) |stages| {
            try ref.runStages(pool_rows, eps, stages);
            try ok(lib.lmh_buffer_read(ref.logits, 0, std.mem.sliceAsBytes(want).ptr, want.len * 4));
            if (stages == .head) try ok(lib.lmh_buffer_read(ref.counts, 0, std.mem.sliceAsBytes(&want_counts).ptr, pool_rows * 4));
            for ([_]u64{ cuda, cuda_ftz }, [_][]const u8{ "ftz=false", "ftz=true" }) |device, label| {
                var head = try Head.init(device, @backingInt(f.type), hidden, vocab, weights, norm);
                defer head.deinit();
                for (check_rows) |n| {
                    // N distinct pool rows in random slot order.
                    var order: [pool_rows]u32 = undefined;
                    for (&order, 0..) |*o, i| o.* = @intCast(i);
                    random.shuffle(u32, &order);
                    for (0..n) |slot| @memcpy(permuted[slot * hidden ..][0..hidden], x[order[slot] * hidden ..][0..hidden]);
                    try ok(lib.lmh_buffer_write(head.x, 0, std.mem.sliceAsBytes(permuted).ptr, @as(u64, n) * hidden * 4));
                    try head.runStages(n, eps, stages);
                    try ok(lib.lmh_buffer_read(head.logits, 0, std.mem.sliceAsBytes(got).ptr, @as(u64, n) * vocab * 4));
                    cases += 1;
                    // Each row's count of non-finite logits, the head's last step, which
                    // equal logits alone do not show.
                    if (stages == .head) {
                        try ok(lib.lmh_buffer_read(head.counts, 0, std.mem.sliceAsBytes(&got_counts).ptr, @as(u64, n) * 4));
                        const counted = for (order[0..n], got_counts[0..n], 0..) |row, count, slot| {
                            if (count != want_counts[row]) break slot;
                        } else null;
                        if (counted) |slot| {
                            failed += 1;
                            std.debug.print("MISMATCH counts {s} hidden={d} vocab={d} {s} eps={e} {s} N={d}: slot {d} (pool row {d}) cpu {d} cuda {d}\n", .{
                                f.name, hidden, vocab, @tagName(kind), eps, label, n, slot, order[slot], want_counts[order[slot]], got_counts[slot],
                            });
                            continue;
                        }
                    }
                    const differing = compareRows(want, got, order[0..n], vocab);
                    if (differing.words == 0) continue;
                    failed += 1;
                    std.debug.print("MISMATCH {s} {s} hidden={d} vocab={d} {s} eps={e} {s} N={d}: {d} words differ; first at slot {d} (pool row {d}) logit {d}: cpu 0x{x:0>8} cuda 0x{x:0>8}\n", .{
                        @tagName(stages), f.name, hidden, vocab, @tagName(kind), eps, label, n, differing.words, differing.slot, order[differing.slot], differing.logit, differing.want, differing.got,
                    });
                }
            }
        }
    }
    std.debug.print("{s:<7} hidden={d:>4} vocab={d:>6} {s:<11}: {d}/{d} cases equal\n", .{ f.name, hidden, vocab, @tagName(kind), cases - failed, cases });
    return .{ failed, cases };
}

/// Returns 1 if the head on weights written over those of an earlier call (the device may keep
/// its own copy of a head, such as the lane layout's: it must not outlive the bytes) differs
/// from the CPU's on the new weights, else 0.
fn checkRewritten(cpu: u64, cuda: u64, f: formats.Format, hidden: u32, random: std.Random) !u32 {
    const a = std.heap.c_allocator;
    const vocab = 1001;
    const rows = 3;
    const row_bytes = formats.rowBytes(f.type, hidden).?;
    const before = try a.alloc(u8, row_bytes * vocab);
    defer a.free(before);
    const after = try a.alloc(u8, row_bytes * vocab);
    defer a.free(after);
    fillWeights(f.type, random, before, row_bytes, .realistic);
    fillWeights(f.type, random, after, row_bytes, .realistic);
    const norm = try a.alloc(f32, hidden);
    defer a.free(norm);
    @memset(norm, 1);
    const x = try a.alloc(f32, pool_rows * hidden);
    defer a.free(x);
    fillInputs(random, x, hidden);
    // Each device's head wraps its own copy of `before`: the CPU's buffer is that memory,
    // so the write of `after` lands in it.
    const wrapped = try a.alloc(u8, before.len);
    defer a.free(wrapped);
    var logits: [2][]f32 = .{ &.{}, &.{} };
    defer for (logits) |l| a.free(l);
    for (&logits, [_]u64{ cpu, cuda }) |*out, device| {
        out.* = try a.alloc(f32, rows * vocab);
        @memcpy(wrapped, before);
        var head = try Head.init(device, @backingInt(f.type), hidden, vocab, wrapped, norm);
        defer head.deinit();
        try ok(lib.lmh_buffer_write(head.x, 0, std.mem.sliceAsBytes(x).ptr, @as(u64, rows) * hidden * 4));
        try head.runStages(rows, 1e-6, .head);
        try ok(lib.lmh_buffer_write(head.weight, 0, after.ptr, after.len));
        try head.runStages(rows, 1e-6, .head);
        try ok(lib.lmh_buffer_read(head.logits, 0, std.mem.sliceAsBytes(out.*).ptr, out.len * 4));
    }
    const order = [rows]u32{ 0, 1, 2 };
    const differing = compareRows(logits[0], logits[1], &order, vocab);
    std.debug.print("{s:<7} hidden={d:>4} vocab={d:>6} weights written after a call: {s}\n", .{ f.name, hidden, vocab, if (differing.words == 0) "equal" else "MISMATCH" });
    return @intFromBool(differing.words != 0);
}

/// A lane-layout copy (Q8_0's, kernels.h LMH_LANE_LAYOUT) is a cache: with the GPU filled by
/// allocations it is dropped, so they reach what they reached before it was made; a call then
/// fails cleanly for want of memory for it; with the memory free again the call makes it anew,
/// with the logits it gave before. Returns 1 for a failure.
fn checkCopyYields(cuda: u64, random: std.Random) !u32 {
    const a = std.heap.c_allocator;
    const t = formats.Type.q8_0;
    const row_bytes = formats.rowBytes(t, full_hidden).?;
    const weights = try a.alloc(u8, row_bytes * full_vocab);
    defer a.free(weights);
    fillWeights(t, random, weights, row_bytes, .realistic);
    const norm = try a.alloc(f32, full_hidden);
    defer a.free(norm);
    @memset(norm, 1);
    const x = try a.alloc(f32, pool_rows * full_hidden);
    defer a.free(x);
    fillInputs(random, x, full_hidden);
    var head = try Head.init(cuda, @backingInt(t), full_hidden, full_vocab, weights, norm);
    defer head.deinit();
    try ok(lib.lmh_buffer_write(head.x, 0, std.mem.sliceAsBytes(x).ptr, full_hidden * 4));
    var held: std.ArrayList(u64) = .empty;
    defer held.deinit(a);
    defer for (held.items) |b| {
        _ = lib.lmh_buffer_free(b);
    };
    const before_copy = try fillDevice(cuda, &held);
    for (held.items) |b| _ = lib.lmh_buffer_free(b);
    held.clearRetainingCapacity();
    const logits = try a.alloc(f32, 2 * full_vocab);
    defer a.free(logits);
    try head.runStages(1, 1e-6, .head);
    try ok(lib.lmh_buffer_read(head.logits, 0, std.mem.sliceAsBytes(logits[0..full_vocab]).ptr, full_vocab * 4));
    const with_copy = try fillDevice(cuda, &held);
    // The copy is 784 MB; allocations come in pieces of 64 MiB at the smallest.
    const yielded = with_copy + (256 << 20) >= before_copy;
    const short = head.attempt(1, 1e-6, .head, null).code;
    for (held.items) |b| _ = lib.lmh_buffer_free(b);
    held.clearRetainingCapacity();
    try head.runStages(1, 1e-6, .head);
    try ok(lib.lmh_buffer_read(head.logits, 0, std.mem.sliceAsBytes(logits[full_vocab..]).ptr, full_vocab * 4));
    const same = std.mem.eql(u8, std.mem.sliceAsBytes(logits[0..full_vocab]), std.mem.sliceAsBytes(logits[full_vocab..]));
    const passed = yielded and short == @backingInt(status.Status.out_of_memory) and same;
    std.debug.print("Q8_0    lane-layout copy under a full GPU: allocations {d} MiB with it, {d} MiB before it; a call then: status {d} (want {d}); after: logits {s}: {s}\n", .{ with_copy >> 20, before_copy >> 20, short, @backingInt(status.Status.out_of_memory), if (same) "equal" else "DIFFERENT", if (passed) "equal" else "MISMATCH" });
    return @intFromBool(!passed);
}

/// Allocates buffers of 1 GiB, then of 64 MiB, until the device has no more; returns their bytes.
fn fillDevice(device: u64, held: *std.ArrayList(u64)) !u64 {
    var total: u64 = 0;
    for ([_]u64{ 1 << 30, 64 << 20 }) |bytes| {
        while (true) {
            var b: u64 = 0;
            const code = lib.lmh_buffer_alloc(device, bytes, &b);
            if (code == @backingInt(status.Status.out_of_memory)) break;
            try ok(code);
            try held.append(std.heap.c_allocator, b);
            total += bytes;
        }
    }
    return total;
}

fn compareRows(want: []const f32, got: []const f32, order: []const u32, vocab: usize) struct { words: u64, slot: usize, logit: usize, want: u32, got: u32 } {
    var result: @TypeOf(compareRows(want, got, order, vocab)) = .{ .words = 0, .slot = 0, .logit = 0, .want = 0, .got = 0 };
    for (order, 0..) |pool_row, slot| {
        const w = std.mem.sliceAsBytes(want[pool_row * vocab ..][0..vocab]);
        const g = std.mem.sliceAsBytes(got[slot * vocab ..][0..vocab]);
        if (std.mem.eql(u8, w, g)) continue;
        for (0..vocab) |j| {
            const a: u32 = @bitCast(want[pool_row * vocab + j]);
            const b: u32 = @bitCast(got[slot * vocab + j]);
            // A NaN's sign and payload are not part of the contract (NUMERICS.md §1): a
            // matvec's NaN is the CPU's 0xFFC00000 and a GPU's 0x7FFFFFFF.
            if (a == b or (std.math.isNan(want[pool_row * vocab + j]) and std.math.isNan(got[slot * vocab + j]))) continue;
            if (result.words == 0) result = .{ .words = 0, .slot = slot, .logit = j, .want = a, .got = b };
            result.words += 1;
        }
    }
    return result;
}

/// The head types a run covers, by position in formats.all.
const TypeSet = [formats.all.len]bool;

/// The head types a TYPE list names (an empty list names every one), or null when an entry
/// names none.
fn parseTypes(list: []const u8) ?TypeSet {
    var set: TypeSet = undefined;
    for (formats.all, &set) |f, *chosen| chosen.* = f.head and list.len == 0;
    if (list.len == 0) return set;
    var it = std.mem.splitScalar(u8, list, ',');
    while (it.next()) |entry| {
        for (formats.all, &set) |f, *chosen| {
            if (f.head and std.ascii.eqlIgnoreCase(entry, f.name)) {
                chosen.* = true;
                break;
            }
        } else return null;
    }
    return set;
}

/// The N list of `bench`: each from 1 to pool_rows, at most max_bench_rows of them.
fn parseRows(list: []const u8, out: *[max_bench_rows]u32) ?[]const u32 {
    var count: usize = 0;
    var it = std.mem.splitScalar(u8, list, ',');
    while (it.next()) |entry| {
        const n = std.fmt.parseInt(u32, entry, 10) catch return null;
        if (n == 0 or n > pool_rows or count == max_bench_rows) return null;
        out[count] = n;
        count += 1;
    }
    return out[0..count];
}

fn bench(cuda: u64, types: TypeSet, rows: []const u32, vocab: u32) !void {
    const a = std.heap.c_allocator;
    var bandwidth: [2]f64 = undefined;
    try ok(lib.lmh_device_read_bandwidth(cuda, 4 << 30, 20, &bandwidth));
    var fma_rate: f64 = 0;
    try ok(lib.lmh_device_fma_rate(cuda, 20, &fma_rate));
    std.debug.print("read bandwidth {d:.0} GB/s (4 GiB, median of 20); FP32 FMA rate {d:.2} T/s (median of 20)\n", .{ bandwidth[0] * 1e-9, fma_rate * 1e-12 });
    var prng = std.Random.DefaultPrng.init(1);
    const random = prng.random();
    const norm = try a.alloc(f32, full_hidden);
    defer a.free(norm);
    for (norm, 0..) |*w, i| w.* = 1 + 0.25 * @sin(@as(f32, @floatFromInt(i)) * 0.7);
    const x = try a.alloc(f32, pool_rows * full_hidden);
    defer a.free(x);
    for (x) |*v| v.* = (random.float(f32) - 0.5) * 6;
    try launchOverhead(cuda, norm, x);
    std.debug.print("\nvocab {d} x hidden {d}\n| type | GB | N | ms/call, host / device | norm + matvec ms, host / device | matvec device ms | floor ms | % of floor (call) | % of floor (norm + matvec), host / device | logits read ms, pageable / pinned |\n|---|---|---|---|---|---|---|---|---|---|\n", .{ vocab, full_hidden });
    for (formats.all, types) |f, chosen| {
        if (!chosen) continue;
        const row_bytes = formats.rowBytes(f.type, full_hidden).?;
        const weights = try a.alloc(u8, row_bytes * vocab);
        defer a.free(weights);
        fillWeights(f.type, random, weights, row_bytes, .realistic);
        var head = try Head.init(cuda, @backingInt(f.type), full_hidden, vocab, weights, norm);
        defer head.deinit();
        try ok(lib.lmh_buffer_write(head.x, 0, std.mem.sliceAsBytes(x).ptr, x.len * 4));
        for (rows) |n| {
            const ms = try timeHead(&head, n, 20, .head);
            const matvec_ms = try timeHead(&head, n, 20, .norm_matvec);
            // The matvec of the hidden rows themselves (its entry point flushes them as it reads).
            const alone_ms = (try timeHead(&head, n, 20, .matvec))[1];
            const read_ms = try timeRead(&head, n);
            const bytes: f64 = @floatFromInt(weights.len);
            const fmas: f64 = @floatFromInt(@as(u64, n) * vocab * full_hidden);
            const floor_ms = @max(bytes / bandwidth[0], fmas / fma_rate) * 1e3;
            std.debug.print("| {s} | {d:.3} | {d} | {d:.3} / {d:.3} | {d:.3} / {d:.3} | {d:.3} | {d:.3} | {d:.0}% | {d:.0}% / {d:.0}% | {d:.3} / {d:.3} |\n", .{ f.name, bytes * 1e-9, n, ms[0], ms[1], matvec_ms[0], matvec_ms[1], alone_ms, floor_ms, floor_ms / ms[0] * 100, floor_ms / matvec_ms[0] * 100, floor_ms / matvec_ms[1] * 100, read_ms[0], read_ms[1] });
        }
    }
}

/// Median ms of one head call (session begin to finish; the logits stay on the device): as the
/// host waits for it, and on the device's clock, between events recorded before its first
/// launch and after its last (the host's session, and its wait for the result, left out).
fn timeHead(head: *Head, rows: u32, iterations: usize, stages: Stages) ![2]f64 {
    var ms: [2][64]f64 = undefined;
    std.debug.assert(iterations <= ms[0].len);
    try head.runStages(rows, 1e-6, stages); // warm-up
    for (ms[0][0..iterations], ms[1][0..iterations]) |*host, *device| {
        var device_ns: u64 = 0;
        const start = seconds();
        try head.attempt(rows, 1e-6, stages, &device_ns).check();
        host.* = (seconds() - start) * 1e3;
        device.* = @as(f64, @floatFromInt(device_ns)) * 1e-6;
    }
    return .{ median(ms[0][0..iterations]), median(ms[1][0..iterations]) };
}

/// The median of `times`, which it sorts.
fn median(times: []f64) f64 {
    std.mem.sort(f64, times, {}, std.sort.asc(f64));
    return times[times.len / 2];
}

/// Median ms of 5 reads of N rows of logits into host memory the caller owns, as it is
/// (pageable) and pinned (lmh_host_pin, as the head's readback target is).
fn timeRead(head: *Head, rows: u32) ![2]f64 {
    const bytes = @as(u64, rows) * head.vocab * 4;
    const host = try std.heap.c_allocator.alloc(u8, bytes);
    defer std.heap.c_allocator.free(host);
    var result: [2]f64 = undefined;
    for (&result, [_]bool{ false, true }) |*read_ms, pinned| {
        var pin: u64 = 0;
        if (pinned) try ok(lib.lmh_host_pin(head.device, host.ptr, bytes, &pin));
        defer if (pinned) ok(lib.lmh_host_unpin(pin)) catch {};
        try ok(lib.lmh_buffer_read(head.logits, 0, host.ptr, bytes));
        var ms: [5]f64 = undefined;
        for (&ms) |*m| {
            const start = seconds();
            try ok(lib.lmh_buffer_read(head.logits, 0, host.ptr, bytes));
            m.* = (seconds() - start) * 1e3;
        }
        read_ms.* = median(&ms);
    }
    return result;
}

/// The host's share of a call: a head so small (vocab 256) that its kernels take microseconds.
fn launchOverhead(cuda: u64, norm: []const f32, x: []const f32) !void {
    const row_bytes = formats.rowBytes(.q8_0, full_hidden).?;
    const weights = try std.heap.c_allocator.alloc(u8, row_bytes * 256);
    defer std.heap.c_allocator.free(weights);
    var prng = std.Random.DefaultPrng.init(2);
    fillWeights(.q8_0, prng.random(), weights, row_bytes, .realistic);
    var head = try Head.init(cuda, @backingInt(formats.Type.q8_0), full_hidden, 256, weights, norm);
    defer head.deinit();
    try ok(lib.lmh_buffer_write(head.x, 0, std.mem.sliceAsBytes(x).ptr, x.len * 4));
    std.debug.print("launch overhead: one head call (4 commands, one sync) at vocab 256, N=1: {d:.3} ms\n", .{(try timeHead(&head, 1, 50, .head))[0]});
}

/// Writes a module to `<dir>/r<rows>-v<vocab rows>-b<blocks>[-p]-s<stages>-k<bulk stages>-c<chunks
/// per step>[-r][-h]-t<types>.cubin` (-p: it prefetches; -r: resident rows; -h: halving passes
/// for the rest; types: a bit per type id, so a rest pass's module is apart from its plain
/// pass's) and returns that path, which the compile-only run prints for scripts/cuda_sass.py
/// (the modules of a pass size compile together, so the cache's order of files says nothing).
fn writeCubin(path: *[1024:0]u8, dir: []const u8, rows: u32, shape: cuda_backend.Shape, types: u32, image: []const u8) []const u8 {
    const name: [:0]const u8 = std.mem.printSentinel(path, "{s}/r{d}-v{d}-b{d}{s}-s{d}-k{d}-c{d}{s}{s}{s}-t{x}.cubin", .{ dir, rows, shape.vocab_rows, shape.min_blocks, if (shape.prefetch) "-p" else "", shape.stages, shape.bulk, shape.chunks_per_step, if (shape.resident) "-r" else "", if (shape.pad_resident) "-rpad" else "", if (shape.pad_rest) "" else "-h", types }, 0) catch "";
    const file = if (name.len > 0) std.c.fopen(name, "wb") else null;
    const written = if (file) |f| std.c.fwrite(image.ptr, 1, image.len, f) else 0;
    const closed = if (file) |f| std.c.fclose(f) == 0 else false;
    if (!closed or written != image.len) {
        std.debug.print("FAIL: cannot write the module of {d} rows per pass, {d} vocab rows, {d} blocks into {s}\n", .{ rows, shape.vocab_rows, shape.min_blocks, dir });
        std.process.exit(1);
    }
    return name;
}

/// Without a GPU, NVRTC alone (if it is found) still shows the kernel source compiles for
/// an H100/H200 (sm_90), with the options the backend uses: the modules a run of `types`
/// loads (every one-row module, since a device compiles them all when it opens).
fn compileOnly(listed: TypeSet) void {
    var wanted: u32 = 0;
    for (formats.all, listed) |f, chosen| {
        if (chosen) wanted |= @as(u32, 1) << @intCast(@backingInt(f.type));
    }
    const nvrtc = cuda_driver.loadNvrtc() catch {
        std.debug.print("SKIP: NVRTC compile: {s}\n", .{status.message()});
        return;
    };
    const tunings = cuda_backend.tuningsFromEnv() catch {
        std.debug.print("FAIL: {s}\n", .{status.message()});
        std.process.exit(1);
    };
    for (cuda_backend.pass_sizes, tunings, 0..) |rows, tuning, pass| {
        // A pass size's modules at once, as the backend compiles the one-row ones at open.
        var buffer: [formats.all.len]cuda_backend.Shape = undefined;
        var count: usize = 0;
        for (cuda_backend.shapesOf(tuning, &buffer)) |shape| {
            if (pass != 0 and tuning.typesWith(shape) & wanted == 0) continue;
            buffer[count] = shape;
            count += 1;
        }
        const shapes = buffer[0..count];
        if (shapes.len == 0) continue;
        var images: [formats.all.len][]u8 = undefined;
        const start = seconds();
        cuda_backend.compileModules(&nvrtc.table, 90, cuda_backend.ftzFromEnv(), pass, tuning, shapes, images[0..shapes.len]) catch {
            std.debug.print("FAIL: NVRTC ({s}) compile for sm_90: {s}\n", .{ std.mem.sliceTo(&nvrtc.path, 0), status.message() });
            std.process.exit(1);
        };
        const elapsed = seconds() - start;
        for (shapes, images[0..shapes.len]) |shape, image| {
            defer std.heap.c_allocator.free(image);
            const types = tuning.typesWith(shape);
            var names: [128]u8 = undefined;
            var used: usize = 0;
            for (formats.all) |g| if ((types >> @intCast(@backingInt(g.type))) & 1 != 0) {
                used += (std.fmt.bufPrint(names[used..], "{s}{s}", .{ if (used == 0) "" else " ", g.name }) catch unreachable).len;
            };
            var path: [1024:0]u8 = undefined;
            const written = if (std.c.getenv("LMHEAD_CUBIN_DIR")) |dir| writeCubin(&path, std.mem.span(dir), rows, shape, types, image) else "";
            std.debug.print("NVRTC ({s}) compiled the kernels for sm_90, {d} rows per pass, {d} vocab rows per warp, {d} blocks per SM{s}, {d} stages, {d} bulk stages, {d} chunks per step{s}{s}{s} ({s}): {d} bytes{s}{s}\n", .{ std.mem.sliceTo(&nvrtc.path, 0), rows, shape.vocab_rows, shape.min_blocks, if (shape.prefetch) ", prefetch" else "", shape.stages, shape.bulk, shape.chunks_per_step, if (shape.resident) ", resident rows" else "", if (shape.pad_resident) ", a short tile as a full pass" else "", if (shape.pad_rest) "" else ", halving passes for the rest", names[0..used], image.len, if (written.len > 0) ", written to " else "", written });
        }
        std.debug.print("{d} rows per pass: {d} modules in {d:.1} s, compiled together (or from the cache)\n", .{ rows, shapes.len, elapsed });
    }
}
