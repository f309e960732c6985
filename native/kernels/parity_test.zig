//! The GPU kernel source against the CPU backend, bit for bit. The host emulator runs the
//! kernels (emulator.zig, four builds); the CPU backend runs through the C ABI of root.zig.
//! Every head type, batches of N ∈ {1, 2, 3, 5, 8, 9, 17, 33} rows in random slot order, and
//! inputs that put every flush point to work: subnormal, tiny, huge and mixed-scale hidden
//! values, subnormal norm weights and eps, F32/F16/BF16 heads with tiny and subnormal
//! weights, quantized heads with subnormal scales. Then the same with subnormals flushed
//! (MXCSR FTZ and DAZ): the CPU's workers and the emulator must not change a byte.
const std = @import("std");
const formats = @import("../numerics/formats.zig");
const lanes = @import("../numerics/lanes.zig");
const params = @import("params.zig");
const emulator = @import("emulator.zig");
const float_env = @import("../backends/cpu/float_env.zig");

/// The C ABI: root.zig's exported functions, called as a user of liblmhead would.
const abi = @import("../root.zig");

pub const batch_sizes = [_]u32{ 1, 2, 3, 5, 8, 9, 17, 33 };
pub const pool_rows = 33;
const vocab = 37; // no multiple of any build's vocab rows per simdgroup
/// As the library's buffers are (root.zig checks activations at 16 bytes, weights at 4):
/// the emulator traps a load a GPU could not make.
const gpu_alignment = 16;
const max_emulated_rows = pool_rows;

/// One head and a pool of hidden rows that batches are drawn from.
pub const Case = struct {
    type: formats.Type,
    hidden: u32,
    eps: f32,
    cap: f32,
    weights: []align(gpu_alignment) u8,
    norm: []f32,
    pool: []f32,

    pub fn deinit(case: Case, allocator: std.mem.Allocator) void {
        allocator.free(case.weights);
        allocator.free(case.norm);
        allocator.free(case.pool);
    }

    /// Rows `order` of the pool, in that order.
    pub fn batch(case: *const Case, allocator: std.mem.Allocator, order: []const u32) ![]align(gpu_alignment) f32 {
        const x = try allocator.alignedAlloc(f32, .fromByteUnits(gpu_alignment), order.len * case.hidden);
        for (order, 0..) |row, slot| @memcpy(x[slot * case.hidden ..][0..case.hidden], case.pool[row * case.hidden ..][0..case.hidden]);
        return x;
    }
};

/// A value of magnitude 2^e·(1 + a fraction), either sign; subnormal where e < -126.
fn scaled(random: std.Random, e: i32) f32 {
    const v = std.math.ldexp(1.0 + random.float(f32), e);
    return if (random.boolean()) -v else v;
}

/// A subnormal of either sign.
fn subnormal(random: std.Random) f32 {
    const bits = random.intRangeAtMost(u32, 1, 0x007F_FFFF) | (@as(u32, random.int(u1)) << 31);
    return @bitCast(bits);
}

/// Hidden row `index` of the pool: realistic rows, and rows for each flush point.
fn hiddenRow(random: std.Random, index: usize, row: []f32) void {
    for (row) |*v| v.* = switch (index % 7) {
        0 => random.floatNorm(f32), // realistic
        1 => random.floatNorm(f32) * 40,
        2 => random.floatNorm(f32) * 0x1p-70, // below the 2^-40 flush point, squares subnormal
        3 => scaled(random, random.intRangeAtMost(i32, -150, 60)), // mixed scales, subnormals included
        4 => random.floatNorm(f32) * 1e18, // x² near the top of the range
        5 => switch (random.uintLessThan(u8, 20)) {
            0 => subnormal(random),
            1 => scaled(random, -41),
            2 => if (random.boolean()) 0.0 else -0.0,
            else => random.floatNorm(f32) * 0.1,
        },
        else => scaled(random, random.intRangeAtMost(i32, -45, 5)),
    };
    if (index == 6) @memset(row, 0); // with eps = 0: rsqrt(+0), a NaN row
    if (index == 13) row[0] = 1e20; // Σx² overflows: a NaN row
}

/// A dense weight: mostly realistic, with tiny, subnormal, zero and large ones.
fn denseWeight(random: std.Random) f32 {
    return switch (random.uintLessThan(u8, 20)) {
        0, 1 => scaled(random, random.intRangeAtMost(i32, -60, -20)),
        2, 3 => subnormal(random),
        4 => if (random.boolean()) 0.0 else -0.0,
        5 => scaled(random, random.intRangeAtMost(i32, 0, 6)),
        else => random.floatNorm(f32) * 0.05,
    };
}

fn makeWeights(allocator: std.mem.Allocator, random: std.Random, t: formats.Type, hidden: u32) ![]align(gpu_alignment) u8 {
    const row_bytes: usize = @intCast(formats.rowBytes(t, hidden).?);
    const weights = try allocator.alignedAlloc(u8, .fromByteUnits(gpu_alignment), row_bytes * vocab);
    for (0..vocab) |j| {
        const row = weights[j * row_bytes ..][0..row_bytes];
        if (formats.format(@backingInt(t)).?.block_values > 1) {
            // Real-looking scales on even rows; any finite f16, subnormal ones included, on odd.
            formats.randomizeRow(t, random, row, if (j % 2 == 0) .sane else .wide);
            continue;
        }
        for (0..hidden) |k| {
            const w = denseWeight(random);
            switch (t) {
                .f32 => std.mem.writeInt(u32, row[4 * k ..][0..4], @bitCast(w), .little),
                .f16 => std.mem.writeInt(u16, row[2 * k ..][0..2], @bitCast(@as(f16, @floatCast(w))), .little),
                .bf16 => std.mem.writeInt(u16, row[2 * k ..][0..2], @truncate(@as(u32, @bitCast(w)) >> 16), .little),
                else => unreachable,
            }
        }
    }
    return weights;
}

/// The hidden sizes a type is checked at: each with a partial last chunk where the type has one.
pub fn hiddenSizes(t: formats.Type) []const u32 {
    return switch (formats.format(@backingInt(t)).?.block_values) {
        // Rows of a multiple of 16 bytes (16-byte loads), then not, with a lane holding 6 of its 8 values.
        1 => &.{ 296, 302 },
        // A partial chunk of one block; then three whole chunks, so the staged build's ring of
        // two stages refills one.
        32 => &.{ 288, 800 },
        else => &.{ 512, 768 },
    };
}

pub fn makeCase(allocator: std.mem.Allocator, random: std.Random, t: formats.Type, hidden: u32, eps: f32) !Case {
    const weights = try makeWeights(allocator, random, t, hidden);
    errdefer allocator.free(weights);
    const norm = try allocator.alloc(f32, hidden);
    errdefer allocator.free(norm);
    for (norm) |*w| w.* = switch (random.uintLessThan(u8, 16)) {
        0 => subnormal(random),
        1 => scaled(random, -126), // flushed: below 2^-125
        2 => scaled(random, -100),
        3 => 0,
        else => 1 + random.floatNorm(f32) * 0.3,
    };
    const pool = try allocator.alloc(f32, pool_rows * hidden);
    for (0..pool_rows) |r| hiddenRow(random, r, pool[r * hidden ..][0..hidden]);
    return .{ .type = t, .hidden = hidden, .eps = eps, .cap = 30, .weights = weights, .norm = norm, .pool = pool };
}

/// What a head call computes at each step: the norm's output, the raw logits, the
/// softcapped logits and each row's count of non-finite values.
pub const Outputs = struct {
    y: []align(gpu_alignment) f32,
    logits: []f32,
    capped: []f32,
    counts: []u32,
    /// The matvec of the hidden rows themselves (no norm before it): the kernels flush
    /// their input here, where after the norm they need not.
    raw: []f32,

    fn init(allocator: std.mem.Allocator, hidden: u32, rows: usize) !Outputs {
        const y = try allocator.alignedAlloc(f32, .fromByteUnits(gpu_alignment), rows * hidden);
        errdefer allocator.free(y);
        const logits = try allocator.alloc(f32, rows * vocab);
        errdefer allocator.free(logits);
        const capped = try allocator.alloc(f32, rows * vocab);
        errdefer allocator.free(capped);
        const raw = try allocator.alloc(f32, rows * vocab);
        errdefer allocator.free(raw);
        return .{ .y = y, .logits = logits, .capped = capped, .counts = try allocator.alloc(u32, rows), .raw = raw };
    }

    pub fn deinit(o: Outputs, allocator: std.mem.Allocator) void {
        allocator.free(o.y);
        allocator.free(o.logits);
        allocator.free(o.capped);
        allocator.free(o.counts);
        allocator.free(o.raw);
    }
};

const ok = @import("../abi_testing.zig").ok;

/// A CPU buffer holding `bytes`.
fn upload(device: u64, bytes: []const u8) !u64 {
    var buffer: u64 = 0;
    try ok(abi.lmh_buffer_alloc(device, bytes.len, &buffer));
    try ok(abi.lmh_buffer_write(buffer, 0, bytes.ptr, bytes.len));
    return buffer;
}

fn download(buffer: u64, into: []u8) !void {
    try ok(abi.lmh_buffer_read(buffer, 0, into.ptr, into.len));
}

fn runCpu(allocator: std.mem.Allocator, case: *const Case, x: []const f32) !Outputs {
    return runDevice(0, allocator, case, x);
}

/// The head on a device of `kind` (0 = cpu, 1 = metal), through the C ABI: norm and
/// matvec in one session, softcap and the non-finite count in a second.
pub fn runDevice(kind: u32, allocator: std.mem.Allocator, case: *const Case, x: []const f32) !Outputs {
    const rows: u32 = @intCast(x.len / case.hidden);
    const out = try Outputs.init(allocator, case.hidden, rows);
    errdefer out.deinit(allocator);
    var device: u64 = 0;
    try ok(abi.lmh_device_open(kind, &device));
    defer _ = abi.lmh_device_close(device);
    const buffers: [6]u64 = .{
        try upload(device, std.mem.sliceAsBytes(x)),
        try upload(device, std.mem.sliceAsBytes(case.norm)),
        try upload(device, case.weights),
        try upload(device, std.mem.sliceAsBytes(out.y)),
        try upload(device, std.mem.sliceAsBytes(out.logits)),
        try upload(device, std.mem.sliceAsBytes(out.counts)),
    };
    defer for (buffers) |b| {
        _ = abi.lmh_buffer_free(b);
    };
    const x_buf, const norm_buf, const w_buf, const y_buf, const logits_buf, const counts_buf = buffers;
    var session: u64 = 0;
    try ok(abi.lmh_session_begin(device, &session));
    try ok(abi.lmh_session_rms_norm(session, x_buf, norm_buf, y_buf, rows, case.hidden, case.eps));
    try ok(abi.lmh_session_matvec(session, y_buf, w_buf, @backingInt(case.type), logits_buf, rows, case.hidden, vocab));
    try ok(abi.lmh_session_finish(session));
    try download(y_buf, std.mem.sliceAsBytes(out.y));
    try download(logits_buf, std.mem.sliceAsBytes(out.logits));
    try ok(abi.lmh_session_begin(device, &session));
    try ok(abi.lmh_session_softcap(session, logits_buf, @as(u64, rows) * vocab, case.cap));
    try ok(abi.lmh_session_count_non_finite(session, logits_buf, counts_buf, rows, vocab));
    try ok(abi.lmh_session_finish(session));
    try download(logits_buf, std.mem.sliceAsBytes(out.capped));
    try download(counts_buf, std.mem.sliceAsBytes(out.counts));
    try ok(abi.lmh_session_begin(device, &session));
    try ok(abi.lmh_session_matvec(session, x_buf, w_buf, @backingInt(case.type), logits_buf, rows, case.hidden, vocab));
    try ok(abi.lmh_session_finish(session));
    try download(logits_buf, std.mem.sliceAsBytes(out.raw));
    return out;
}

fn ptr(slice: anytype) ?*anyopaque {
    return @ptrCast(@constCast(slice.ptr));
}

/// The same head on an emulator, dispatch by dispatch, over `grid`.
fn runEmulator(comptime E: type, allocator: std.mem.Allocator, case: *const Case, x: []const f32, grid: emulator.Grid) !Outputs {
    const rows: u32 = @intCast(x.len / case.hidden);
    const out = try Outputs.init(allocator, case.hidden, rows);
    errdefer out.deinit(allocator);
    const norm: params.RmsNorm = .{ .rows = rows, .hidden = case.hidden, .eps = case.eps, .inv_hidden = 1.0 / @as(f32, @floatFromInt(case.hidden)) };
    try E.dispatch(try E.kernel("rms_norm_f32"), &norm, &.{ ptr(x), ptr(case.norm), ptr(out.y) }, grid);
    const matvec: params.Matvec = .{
        .rows = rows,
        .hidden = case.hidden,
        .vocab = vocab,
        .type_id = @backingInt(case.type),
        .row_bytes = @intCast(formats.rowBytes(case.type, case.hidden).?),
        .chunks = @intCast(lanes.chunkCount(case.hidden)),
        .input_flushed = 1, // the norm's output, as a session records it
    };
    var name: [32]u8 = undefined;
    const matvec_name = try std.fmt.bufPrint(&name, "matvec_{s}_f32", .{formats.format(@backingInt(case.type)).?.name});
    const laid = try laneLayout(E, allocator, &matvec, case.weights, grid);
    defer if (laid.copy) |copy| allocator.free(copy);
    try matvecGuarded(E, allocator, try E.kernel(matvec_name), &laid.params, out.y, laid.weights, out.logits, grid);
    var raw = laid.params;
    raw.input_flushed = 0;
    try matvecGuarded(E, allocator, try E.kernel(matvec_name), &raw, x, laid.weights, out.raw, grid);
    @memcpy(out.capped, out.logits);
    const softcap: params.Softcap = .{ .values = out.capped.len, .cap = case.cap, .inv_cap = 1.0 / case.cap };
    try E.dispatch(try E.kernel("softcap_f32"), &softcap, &.{ptr(out.capped)}, grid);
    const count: params.CountNonFinite = .{ .rows = rows, .row_values = vocab };
    try E.dispatch(try E.kernel("count_non_finite_f32"), &count, &.{ ptr(out.capped), ptr(out.counts) }, grid);
    // As a GPU backend splits it: rows into segments, then their sum, the same counts.
    const split: params.CountNonFinite = .{ .rows = rows, .row_values = vocab, .segments = 4 };
    var partials: [4 * max_emulated_rows]u32 = undefined;
    var summed: [max_emulated_rows]u32 = undefined;
    std.debug.assert(rows <= max_emulated_rows);
    try E.dispatch(try E.kernel("count_non_finite_f32"), &split, &.{ ptr(out.capped), ptr(&partials) }, grid);
    try E.dispatch(try E.kernel("sum_segments_u32"), &split, &.{ ptr(&partials), ptr(&summed) }, grid);
    try std.testing.expectEqualSlices(u32, out.counts, summed[0..rows]);
    return out;
}

/// The weights and parameters a build's matvec reads: the lane layout's copy where it takes
/// one (made by its "lane_relayout" over a copy poisoned first, so a byte it left unwritten
/// would show), else the weights as they are. The caller frees `copy`.
fn laneLayout(comptime E: type, allocator: std.mem.Allocator, matvec: *const params.Matvec, weights: []align(gpu_alignment) const u8, grid: emulator.Grid) !struct { params: params.Matvec, weights: []align(gpu_alignment) const u8, copy: ?[]align(gpu_alignment) u8 } {
    if (!E.laneLayout(@fromBackingInt(@intCast(matvec.type_id)))) return .{ .params = matvec.*, .weights = weights, .copy = null };
    var laid = matvec.*;
    laid.row_bytes = E.laneRowBytes(matvec.row_bytes);
    // Rows of a multiple of 16 bytes, as a GPU allocation's pieces: a bulk copy's stay inside.
    const copy = try allocator.alignedAlloc(u8, .fromByteUnits(gpu_alignment), @as(usize, laid.row_bytes) * laid.vocab);
    @memset(copy, 0xA5);
    try E.dispatch(try E.kernel("lane_relayout"), matvec, &.{ ptr(weights), ptr(copy) }, grid);
    for (0..laid.vocab) |j| {
        const padding = copy[j * laid.row_bytes ..][matvec.row_bytes..laid.row_bytes];
        for (padding) |byte| try std.testing.expectEqual(@as(u8, 0), byte);
    }
    return .{ .params = laid, .weights = copy, .copy = copy };
}

/// A matvec into `out` through a buffer one row longer, whose last row no pass may write: the
/// kernels write the batch's rows and nothing past them.
fn matvecGuarded(comptime E: type, allocator: std.mem.Allocator, kernel: u32, matvec: *const params.Matvec, x: []const f32, weights: []const u8, out: []f32, grid: emulator.Grid) !void {
    const guard: u32 = 0x7fc0_5a5a;
    const guarded = try allocator.alloc(f32, out.len + vocab);
    defer allocator.free(guarded);
    @memset(std.mem.bytesAsSlice(u32, std.mem.sliceAsBytes(guarded[out.len..])), guard);
    try E.dispatch(kernel, matvec, &.{ ptr(x), ptr(weights), ptr(guarded) }, grid);
    for (guarded[out.len..]) |v| try std.testing.expectEqual(guard, @as(u32, @bitCast(v)));
    @memcpy(out, guarded[0..out.len]);
}

/// Equal bits, or both NaN (a NaN's payload is not part of the contract).
fn same(a: f32, b: f32) bool {
    return @as(u32, @bitCast(a)) == @as(u32, @bitCast(b)) or (std.math.isNan(a) and std.math.isNan(b));
}

fn expectSameValues(what: []const u8, expected: []const f32, actual: []const f32) !void {
    for (expected, actual, 0..) |e, a, i| {
        if (same(e, a)) continue;
        std.debug.print("{s}[{d}]: expected 0x{x:0>8} ({e}), got 0x{x:0>8} ({e})\n", .{ what, i, @as(u32, @bitCast(e)), e, @as(u32, @bitCast(a)), a });
        return error.TestExpectedEqual;
    }
}

/// Slot s of `actual` against row order[s] of `expected`, at every step.
pub fn expectSameRows(what: []const u8, case: *const Case, expected: Outputs, actual: Outputs, order: []const u32) !void {
    const h = case.hidden;
    for (order, 0..) |row, slot| {
        errdefer std.debug.print("{s}, {s}, slot {d} of {d} (pool row {d})\n", .{ what, @tagName(case.type), slot, order.len, row });
        try expectSameValues("y", expected.y[row * h ..][0..h], actual.y[slot * h ..][0..h]);
        try expectSameValues("logits", expected.logits[row * vocab ..][0..vocab], actual.logits[slot * vocab ..][0..vocab]);
        try expectSameValues("capped", expected.capped[row * vocab ..][0..vocab], actual.capped[slot * vocab ..][0..vocab]);
        try expectSameValues("raw", expected.raw[row * vocab ..][0..vocab], actual.raw[slot * vocab ..][0..vocab]);
        try std.testing.expectEqual(expected.counts[row], actual.counts[slot]);
    }
}

pub fn identity(order: []u32) []u32 {
    for (order, 0..) |*o, i| o.* = @intCast(i);
    return order;
}

pub const eps_values = [_]f32{ 1e-6, 0, 1e-42, 1e-30 }; // 1e-42 is subnormal

test "the kernel source's decoders equal formats.zig for every f16 scale" {
    // Every block of a chunk takes one f16 pattern as its d, each of the 2^16 in turn (both
    // signs, subnormals, Inf and NaN), the rest of its bytes random (codes, mins, sub-block
    // scales), so a decoder's arithmetic meets every scale the format can hold. A NaN's
    // payload is not compared (`same`).
    var prng = std.Random.DefaultPrng.init(0x6465636f6465);
    const random = prng.random();
    var buffer: [8 * @sizeOf(formats.blocks.Q8_0)]u8 align(16) = undefined; // the largest chunk
    var got: [256]f32 = undefined;
    var want: [256]f32 = undefined;
    for (formats.all) |f| {
        if (!f.head or f.block_values == 1) continue;
        const chunk = buffer[0 .. 256 / f.block_values * f.block_bytes];
        for (0..1 << 16) |pattern| {
            random.bytes(chunk);
            var b: usize = 0;
            while (b < chunk.len) : (b += f.block_bytes) std.mem.writeInt(u16, chunk[b + f.d_offset ..][0..2], @intCast(pattern), .little);
            emulator.default.decode(f.type, chunk, &got);
            try formats.decodeRow(f.type, chunk, &want);
            errdefer std.debug.print("{s}, d 0x{x:0>4}: formats.zig against the kernel source\n", .{ f.name, pattern });
            try expectSameValues("value", &want, &got);
        }
    }
}

test "the emulated kernels equal the CPU backend for every head type, batch size and slot order" {
    const allocator = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(0x6b65726e656c);
    const random = prng.random();
    for (formats.all, 0..) |f, index| {
        for (hiddenSizes(f.type)) |hidden| {
            const case = try makeCase(allocator, random, f.type, hidden, eps_values[index % eps_values.len]);
            defer case.deinit(allocator);
            const reference = try runCpu(allocator, &case, case.pool);
            defer reference.deinit(allocator);
            for (batch_sizes) |n| {
                var order: [pool_rows]u32 = undefined;
                random.shuffle(u32, identity(&order));
                const x = try case.batch(allocator, order[0..n]);
                defer allocator.free(x);
                const cpu = try runCpu(allocator, &case, x);
                defer cpu.deinit(allocator);
                try expectSameRows("cpu", &case, reference, cpu, order[0..n]);
                const emulated = try runEmulator(emulator.default, allocator, &case, x, .{ .threadgroups = 2, .threads = 64 });
                defer emulated.deinit(allocator);
                try expectSameRows("emulator", &case, reference, emulated, order[0..n]);
                const retuned = try runEmulator(emulator.retuned, allocator, &case, x, .{ .threadgroups = 3, .threads = 32 });
                defer retuned.deinit(allocator);
                try expectSameRows("retuned emulator", &case, reference, retuned, order[0..n]);
                const staged = try runEmulator(emulator.staged, allocator, &case, x, .{ .threadgroups = 2, .threads = 64 });
                defer staged.deinit(allocator);
                try expectSameRows("staged emulator", &case, reference, staged, order[0..n]);
            }
        }
    }
}

test "resident rows: the emulated kernels equal the CPU backend for every head type, batch size and slot order" {
    // Rows of whole chunks (hidden 512 and 768), so that the resident builds copy each tile of
    // a pass's rows into their area at every N (fewer tiles than simdgroups, and more: a
    // simdgroup then takes several), the last tile full or 1, 4, 5 or 7 rows short of a pass.
    const allocator = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(0x6465636f646564);
    const random = prng.random();
    for (formats.all, 0..) |f, index| {
        for ([_]u32{ 512, 768 }) |hidden| {
            const case = try makeCase(allocator, random, f.type, hidden, eps_values[index % eps_values.len]);
            defer case.deinit(allocator);
            const reference = try runCpu(allocator, &case, case.pool);
            defer reference.deinit(allocator);
            for ([_]u32{ 1, 3, 8, 9, 12, 15, 17, 33 }) |n| {
                var order: [pool_rows]u32 = undefined;
                random.shuffle(u32, identity(&order));
                const x = try case.batch(allocator, order[0..n]);
                defer allocator.free(x);
                const resident = try runEmulator(emulator.resident, allocator, &case, x, .{ .threadgroups = 3, .threads = 32 });
                defer resident.deinit(allocator);
                try expectSameRows("resident emulator", &case, reference, resident, order[0..n]);
                const padded = try runEmulator(emulator.resident_padded, allocator, &case, x, .{ .threadgroups = 3, .threads = 32 });
                defer padded.deinit(allocator);
                try expectSameRows("resident emulator, short tiles padded", &case, reference, padded, order[0..n]);
            }
        }
    }
}

test "infinite block scales: the emulated kernels give the CPU's ±Inf logits" {
    // NUMERICS.md §2 decodes s·(q − off) with an infinite s to ±Inf, as gguf-py does; a GPU
    // shortcut such as one fma fma(s, B + q, −s·(B + off)) would give NaN (∞ − ∞). Rows of
    // infinite weights of one sign, among ordinary rows, against positive inputs: the CPU's
    // logits are ±Inf there, and the emulator's must be too.
    const allocator = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(0x696e66);
    const random = prng.random();
    const rows = 5;
    for (formats.all) |f| {
        if (!f.head or f.block_values == 1) continue;
        const hidden = hiddenSizes(f.type)[0];
        const row_bytes: usize = @intCast(formats.rowBytes(f.type, hidden).?);
        const weights = try allocator.alignedAlloc(u8, .fromByteUnits(gpu_alignment), row_bytes * vocab);
        for (0..vocab) |j| {
            const row = weights[j * row_bytes ..][0..row_bytes];
            if (j % 3 == 0) formats.infiniteScaleRow(f.type, row) else formats.randomizeRow(f.type, random, row, .sane);
        }
        const norm = try allocator.alloc(f32, hidden);
        @memset(norm, 1);
        const pool = try allocator.alloc(f32, rows * hidden);
        for (pool) |*v| v.* = 0.5 + random.float(f32);
        const case: Case = .{ .type = f.type, .hidden = hidden, .eps = 1e-6, .cap = 30, .weights = weights, .norm = norm, .pool = pool };
        defer case.deinit(allocator);
        var order: [rows]u32 = undefined;
        const x = try case.batch(allocator, identity(&order));
        defer allocator.free(x);
        const cpu = try runCpu(allocator, &case, x);
        defer cpu.deinit(allocator);
        for (0..rows) |r| {
            for (0..vocab) |j| {
                const logit = cpu.logits[r * vocab + j];
                errdefer std.debug.print("{s}: row {d} logit {d} is {e}\n", .{ f.name, r, j, logit });
                try std.testing.expect(std.math.isInf(logit) == (j % 3 == 0));
            }
        }
        const emulated = try runEmulator(emulator.default, allocator, &case, x, .{ .threadgroups = 2, .threads = 64 });
        defer emulated.deinit(allocator);
        try expectSameRows("emulator", &case, cpu, emulated, &order);
        const retuned = try runEmulator(emulator.retuned, allocator, &case, x, .{ .threadgroups = 3, .threads = 32 });
        defer retuned.deinit(allocator);
        try expectSameRows("retuned emulator", &case, cpu, retuned, &order);
        const staged = try runEmulator(emulator.staged, allocator, &case, x, .{ .threadgroups = 2, .threads = 64 });
        defer staged.deinit(allocator);
        try expectSameRows("staged emulator", &case, cpu, staged, &order);
    }
}

/// Σx² of a raw row with no flush point: what a kernel without them would compute.
fn unflushedSumSquares(row: []const f32) u32 {
    var sum: f32 = 0;
    for (row) |v| sum = @mulAdd(f32, v, v, sum);
    return @bitCast(sum);
}

test "with subnormals flushed (FTZ and DAZ), the CPU backend and the emulator return the same bytes" {
    if (!float_env.supported) return error.SkipZigTest;
    const allocator = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(0x66747a);
    const random = prng.random();
    var all: [pool_rows]u32 = undefined;
    for (formats.all, 0..) |f, index| {
        for (hiddenSizes(f.type)) |hidden| {
            const case = try makeCase(allocator, random, f.type, hidden, eps_values[index % eps_values.len]);
            defer case.deinit(allocator);
            const ieee = try runCpu(allocator, &case, case.pool);
            defer ieee.deinit(allocator);
            float_env.flush_subnormals.store(true, .monotonic);
            const cpu = runCpu(allocator, &case, case.pool);
            float_env.flush_subnormals.store(false, .monotonic);
            defer if (cpu) |o| o.deinit(allocator) else |_| {};
            try expectSameRows("cpu with FTZ and DAZ", &case, ieee, try cpu, identity(&all));
            const previous = float_env.flushOn();
            const emulated = runEmulator(emulator.default, allocator, &case, case.pool, .{ .threadgroups = 1, .threads = 128 });
            float_env.restore(previous);
            defer if (emulated) |o| o.deinit(allocator) else |_| {};
            try expectSameRows("emulator with FTZ and DAZ", &case, ieee, try emulated, identity(&all));
            // The inputs are adversarial: without flush points, flushing changes Σx² of some row.
            var changed = false;
            for (0..pool_rows) |r| {
                const row = case.pool[r * case.hidden ..][0..case.hidden];
                // Each sum is pinned before the mode changes: LLVM may move float arithmetic
                // across the asm that writes MXCSR, which it does not model.
                const plain = unflushedSumSquares(row);
                std.mem.doNotOptimizeAway(plain);
                const on = float_env.flushOn();
                const flushed = unflushedSumSquares(row);
                std.mem.doNotOptimizeAway(flushed);
                float_env.restore(on);
                changed = changed or plain != flushed;
            }
            try std.testing.expect(changed);
        }
    }
}

test "softcap with extreme caps and data: the emulator equals the CPU backend, with and without FTZ and DAZ" {
    if (!float_env.supported) return error.SkipZigTest;
    var prng = std.Random.DefaultPrng.init(0x636170);
    const random = prng.random();
    // 2^127: 1/cap is subnormal. 1e-40: cap is subnormal, 1/cap overflows.
    const caps = [_]f32{ 30, 0x1p-100, 1e30, 0x1p127, 1e-40, 0x1p-125 };
    var data: [32 * vocab]f32 = undefined;
    for (&data) |*v| v.* = scaled(random, random.intRangeAtMost(i32, -150, 127));
    for (caps) |cap| {
        const ieee = try softcapCpu(&data, cap);
        float_env.flush_subnormals.store(true, .monotonic);
        const flushed = softcapCpu(&data, cap);
        float_env.flush_subnormals.store(false, .monotonic);
        try expectSameValues("cpu with FTZ and DAZ", &ieee, &(try flushed));
        for ([_]bool{ false, true }) |flush| {
            var emulated = data;
            const params_: params.Softcap = .{ .values = emulated.len, .cap = cap, .inv_cap = 1.0 / cap };
            const previous = if (flush) float_env.flushOn() else null;
            const result = emulator.default.dispatch(try emulator.default.kernel("softcap_f32"), &params_, &.{ptr(&emulated)}, .{ .threadgroups = 3, .threads = 64 });
            if (previous) |p| float_env.restore(p);
            try result;
            try expectSameValues("emulated softcap", &ieee, &emulated);
        }
    }
}

fn softcapCpu(data: []const f32, cap: f32) ![32 * vocab]f32 {
    var out: [32 * vocab]f32 = undefined;
    var device: u64 = 0;
    try ok(abi.lmh_device_open(0, &device));
    defer _ = abi.lmh_device_close(device);
    const buffer = try upload(device, std.mem.sliceAsBytes(data));
    defer _ = abi.lmh_buffer_free(buffer);
    var session: u64 = 0;
    try ok(abi.lmh_session_begin(device, &session));
    try ok(abi.lmh_session_softcap(session, buffer, data.len, cap));
    try ok(abi.lmh_session_finish(session));
    try download(buffer, std.mem.sliceAsBytes(&out));
    return out;
}
