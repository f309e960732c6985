//! The Metal backend on Linux: the real backend code, driven through the C ABI, over the
//! fake Objective-C runtime of fake.zig, whose command buffers run the kernel source on its
//! host emulator. A head run through it must return the CPU backend's bytes; every failure
//! must end in a Status and a message, never a crash, with every Objective-C object
//! released and every pool popped.
const std = @import("std");
/// The C ABI: root.zig's exported functions, called as a user of liblmhead would.
const abi = @import("../../root.zig");
const formats = @import("../../numerics/formats.zig");
const params = @import("../../kernels/params.zig");
const emulator = @import("../../kernels/emulator.zig");
const Status = @import("../../core/status.zig").Status;
const fake = @import("fake.zig");
const objc = @import("objc.zig");

const metal_kind = 1;
const cpu_kind = 0;

/// The message of the last failed call, kept past the cleanup calls after it.
var failure_text: [512]u8 = undefined;
var failure_len: usize = 0;

fn ok(result: i32) !void {
    if (result == 0) return;
    failure_len = @intCast(@min(abi.lmh_last_error(&failure_text, failure_text.len), failure_text.len));
    return error.LmheadFailed;
}

/// Runs a head that must succeed; on failure prints lmhead's message.
fn runHeadOk(kind: u32, head: Head, inputs: Inputs, out: []u8) !void {
    runHead(kind, head, inputs, out) catch |e| {
        std.debug.print("lmhead failed: {s}\n", .{failure_text[0..failure_len]});
        return e;
    };
}

fn lastError() []const u8 {
    failure_len = @intCast(@min(abi.lmh_last_error(&failure_text, failure_text.len), failure_text.len));
    return failure_text[0..failure_len];
}

/// Runs a recorded dispatch on the host emulator of the kernel source (kernels/emulator.zig):
/// the kernel by its pipeline's function name, the parameter bytes set at index 0, the
/// buffers bound at 1.., and the recorded grid.
fn executeOnEmulator(d: *const fake.Dispatch) anyerror!void {
    if (d.params_index != 0) return error.ParamsNotAtIndexZero;
    if (d.groups.height != 1 or d.groups.depth != 1 or d.threads.height != 1 or d.threads.depth != 1) return error.GridNotOneDimensional;
    const grid: emulator.Grid = .{ .threadgroups = @intCast(d.groups.width), .threads = @intCast(d.threads.width) };
    const kernel = try emulator.default.kernel(d.kernel);
    if (std.mem.eql(u8, d.kernel, "rms_norm_f32")) return emulator.default.dispatch(kernel, &try paramsOf(params.RmsNorm, d), &try bound(d, 3), grid);
    if (std.mem.eql(u8, d.kernel, "softcap_f32")) return emulator.default.dispatch(kernel, &try paramsOf(params.Softcap, d), &try bound(d, 1), grid);
    if (std.mem.eql(u8, d.kernel, "count_non_finite_f32")) return emulator.default.dispatch(kernel, &try paramsOf(params.CountNonFinite, d), &try bound(d, 2), grid);
    return emulator.default.dispatch(kernel, &try paramsOf(params.Matvec, d), &try bound(d, 3), grid);
}

/// The addresses bound at indices 1..count (bindings persist in an encoder, as Metal's do,
/// so a later kernel may see more bound than it takes).
fn bound(d: *const fake.Dispatch, comptime count: usize) ![count]?*anyopaque {
    var pointers: [count]?*anyopaque = undefined;
    for (&pointers, 1..) |*p, index| p.* = @ptrCast((d.buffers[index] orelse return error.BufferNotBound).bytes.ptr);
    return pointers;
}

fn paramsOf(comptime P: type, d: *const fake.Dispatch) !P {
    if (d.params_bytes != @sizeOf(P)) return error.ParamsSize;
    return std.mem.bytesToValue(P, d.params[0..@sizeOf(P)]);
}

/// Installs the fake with `config` and a source that declares every kernel.
fn install(config: fake.Config) void {
    fake.install(config);
    fake.executor = executeOnEmulator;
}

/// Nothing leaked and no rule broken: every object released, every pool popped.
fn expectBalanced() !void {
    try std.testing.expectEqual(@as(u32, 0), fake.state.violations);
    try std.testing.expectEqual(@as(usize, 0), fake.state.pool_tokens);
    try std.testing.expectEqual(@as(usize, 0), fake.liveObjects());
}

const Head = struct {
    type: formats.Type,
    rows: u32,
    hidden: u32,
    vocab: u32,
    cap: f32 = 30.0,
};

/// Runs norm → matvec → softcap → count on a device of `kind` through the C ABI and
/// returns the logits followed by the per-row non-finite counts, as bytes.
fn runHead(kind: u32, head: Head, inputs: Inputs, out: []u8) !void {
    const x = inputs.x;
    const norm_weight = inputs.norm_weight;
    var device: u64 = 0;
    try ok(abi.lmh_device_open(kind, &device));
    defer _ = abi.lmh_device_close(device);
    const logits_bytes = @as(u64, head.rows) * head.vocab * 4;
    var input: u64 = 0;
    var norm: u64 = 0;
    var normed: u64 = 0;
    var file: u64 = 0;
    var w: u64 = 0;
    var logits: u64 = 0;
    var counts: u64 = 0;
    try ok(abi.lmh_buffer_alloc(device, x.len * 4, &input));
    defer _ = abi.lmh_buffer_free(input);
    try ok(abi.lmh_buffer_alloc(device, norm_weight.len * 4, &norm));
    defer _ = abi.lmh_buffer_free(norm);
    try ok(abi.lmh_buffer_alloc(device, x.len * 4, &normed));
    defer _ = abi.lmh_buffer_free(normed);
    try ok(abi.lmh_buffer_wrap(device, inputs.file.ptr, inputs.file.len, &file));
    defer _ = abi.lmh_buffer_free(file);
    try ok(abi.lmh_buffer_view(file, inputs.weight_offset, inputs.file.len - inputs.weight_offset, &w));
    defer _ = abi.lmh_buffer_free(w);
    try ok(abi.lmh_buffer_alloc(device, logits_bytes + head.rows * 4, &logits));
    defer _ = abi.lmh_buffer_free(logits);
    var logits_view: u64 = 0;
    try ok(abi.lmh_buffer_view(logits, 0, logits_bytes, &logits_view));
    defer _ = abi.lmh_buffer_free(logits_view);
    try ok(abi.lmh_buffer_view(logits, logits_bytes, head.rows * 4, &counts));
    defer _ = abi.lmh_buffer_free(counts);
    try ok(abi.lmh_buffer_write(input, 0, @ptrCast(x.ptr), x.len * 4));
    try ok(abi.lmh_buffer_write(norm, 0, @ptrCast(norm_weight.ptr), norm_weight.len * 4));
    var session: u64 = 0;
    try ok(abi.lmh_session_begin(device, &session));
    try ok(abi.lmh_session_rms_norm(session, input, norm, normed, head.rows, head.hidden, 1e-6));
    try ok(abi.lmh_session_matvec(session, normed, w, @backingInt(head.type), logits_view, head.rows, head.hidden, head.vocab));
    try ok(abi.lmh_session_softcap(session, logits_view, @as(u64, head.rows) * head.vocab, head.cap));
    try ok(abi.lmh_session_count_non_finite(session, logits_view, counts, head.rows, head.vocab));
    var device_ns: u64 = 0;
    try ok(abi.lmh_session_finish_timed(session, &device_ns));
    // The GPU's own time (the fake's command buffers run from 100 s to 100.25 s); the CPU keeps none.
    try std.testing.expectEqual(if (kind == metal_kind) @as(u64, 250_000_000) else std.math.maxInt(u64), device_ns);
    try ok(abi.lmh_buffer_read(logits, 0, out.ptr, out.len));
}

const Inputs = struct {
    x: []f32,
    norm_weight: []f32,
    /// A "mapped file" whose tail from `weight_offset` is the head, as a tensor in a GGUF.
    file: []align(std.heap.page_size_min) u8,
    weight_offset: usize,

    fn init(head: Head, seed: u64, weight_offset: usize) !Inputs {
        const gpa = std.testing.allocator;
        var prng = std.Random.DefaultPrng.init(seed);
        const random = prng.random();
        const x = try gpa.alloc(f32, @as(usize, head.rows) * head.hidden);
        for (x) |*v| v.* = (random.float(f32) - 0.5) * 8;
        const norm_weight = try gpa.alloc(f32, head.hidden);
        for (norm_weight) |*v| v.* = random.float(f32) + 0.5;
        const row_bytes = formats.rowBytes(head.type, head.hidden).?;
        const file = try gpa.alignedAlloc(u8, .fromByteUnits(std.heap.page_size_min), weight_offset + row_bytes * head.vocab);
        random.bytes(file[0..weight_offset]);
        const weight = file[weight_offset..];
        for (0..head.vocab) |j| formats.randomizeRow(head.type, random, weight[j * row_bytes ..][0..row_bytes], .sane);
        return .{ .x = x, .norm_weight = norm_weight, .file = file, .weight_offset = weight_offset };
    }

    fn deinit(inputs: Inputs) void {
        const gpa = std.testing.allocator;
        gpa.free(inputs.x);
        gpa.free(inputs.norm_weight);
        gpa.free(inputs.file);
    }
};

fn expectCpuBytes(head: Head, config: fake.Config, weight_offset: usize) !void {
    const inputs = try Inputs.init(head, 0x6d657461 + @as(u64, head.rows), weight_offset);
    defer inputs.deinit();
    const out_bytes = (@as(usize, head.rows) * head.vocab + head.rows) * 4;
    const want = try std.testing.allocator.alloc(u8, out_bytes);
    defer std.testing.allocator.free(want);
    const got = try std.testing.allocator.alloc(u8, out_bytes);
    defer std.testing.allocator.free(got);
    try runHeadOk(cpu_kind, head, inputs, want);
    install(config);
    defer fake.reset();
    try runHeadOk(metal_kind, head, inputs, got);
    try std.testing.expectEqualSlices(u8, want, got);
    try expectBalanced();
}

test "metal on the fake runtime: a head returns the CPU's bytes, for every head type" {
    for (std.enums.values(formats.Type)) |t| {
        // 96 bytes into the file: not page-aligned, 16-byte aligned as a GGUF's 32-byte
        // alignment places tensors (dense rows are read 16 bytes at a time).
        try expectCpuBytes(.{ .type = t, .rows = 3, .hidden = 512, .vocab = 40 }, .{}, 96);
    }
}

test "metal on the fake runtime: the tracker's barriers are the encoder's, at the same points, and each grid is the kernel's" {
    const head: Head = .{ .type = .q4_0, .rows = 2, .hidden = 256, .vocab = 24 };
    const inputs = try Inputs.init(head, 1, 0);
    defer inputs.deinit();
    var out: [(2 * 24 + 2) * 4]u8 = undefined;
    install(.{});
    defer fake.reset();
    try runHeadOk(metal_kind, head, inputs, &out);
    const events = fake.state.committed.items;
    // Kernel, then threadgroups × threads: a simdgroup per row for the norm and the count,
    // 4 simdgroups of 4 vocab rows each per matvec group, 256-thread softcap groups.
    const Want = struct { kernel: []const u8, groups: usize = 0, threads: usize = 0 };
    const want = [_]Want{
        .{ .kernel = "rms_norm_f32", .groups = 2, .threads = 32 },
        .{ .kernel = "|" },
        .{ .kernel = "matvec_Q4_0_f32", .groups = 2, .threads = 128 },
        .{ .kernel = "|" },
        .{ .kernel = "softcap_f32", .groups = 1, .threads = 256 },
        .{ .kernel = "|" },
        .{ .kernel = "count_non_finite_f32", .groups = 2, .threads = 32 },
    };
    try std.testing.expectEqual(want.len, events.len);
    for (want, events) |w, e| switch (e) {
        .barrier => try std.testing.expectEqualStrings("|", w.kernel),
        .dispatch => |d| {
            try std.testing.expectEqualStrings(w.kernel, d.kernel);
            try std.testing.expectEqual([2]usize{ w.groups, w.threads }, [2]usize{ d.groups.width, d.threads.width });
        },
    };
    try expectBalanced();
}

/// Opens a Metal device on the fake with `config`; expects `want` and a message holding `text`.
fn expectOpenFails(config: fake.Config, want: Status, text: []const u8) !void {
    install(config);
    defer fake.reset();
    var device: u64 = 0;
    try std.testing.expectEqual(@backingInt(want), abi.lmh_device_open(metal_kind, &device));
    if (std.mem.indexOf(u8, lastError(), text) == null) {
        std.debug.print("message \"{s}\" lacks \"{s}\"\n", .{ lastError(), text });
        return error.TestUnexpectedResult;
    }
    try expectBalanced();
}

test "metal on the fake runtime: a device that cannot run the kernels is refused with a clear error" {
    try expectOpenFails(.{ .has_device = false }, .unsupported, "no Metal device");
    try expectOpenFails(.{ .apple7 = false }, .unsupported, "Apple7");
    try expectOpenFails(.{ .simd_width = 64 }, .unsupported, "64-wide simdgroups");
    try expectOpenFails(.{ .max_threads = 64 }, .unsupported, "at most 64 threads per threadgroup; it needs 32 and 256");
    try expectOpenFails(.{ .compile_error = "program_source:12:3: error: use of undeclared identifier 'x'" }, .backend, "did not compile: program_source:12:3: error: use of undeclared identifier 'x'");
    // A head kernel's pipeline fails after the probes' and the other head kernels' were made
    // (the device's registry makes those): each of them is released, none leaks.
    try expectOpenFails(.{ .missing_function = "matvec_BF16_f32" }, .backend, "the Metal library has no kernel matvec_BF16_f32");
}

test "metal without the fake on Linux: unsupported, with the reason" {
    var device: u64 = 0;
    try std.testing.expectEqual(@backingInt(Status.unsupported), abi.lmh_device_open(metal_kind, &device));
    try std.testing.expect(std.mem.indexOf(u8, lastError(), "Metal needs macOS") != null);
}

test "metal on the fake runtime: the device opens in order and compiles in safe math, with or without setMathMode:" {
    for ([_]bool{ true, false }) |has_math_mode| {
        install(.{ .has_math_mode = has_math_mode });
        defer fake.reset();
        var device: u64 = 0;
        try ok(abi.lmh_device_open(metal_kind, &device));
        try std.testing.expect(fake.state.compiled_safe);
        // The device, then the options (safe math, by what they respond to), then the compile.
        const safe_math: objc.Message = if (has_math_mode) .setMathMode_ else .setFastMathEnabled_;
        const opening = [_]objc.Message{ .maxBufferLength, .name, .UTF8String, .supportsFamily_, .newCommandQueue, .alloc, .init, .respondsToSelector_, safe_math, .stringWithCString_encoding_, .newLibraryWithSource_options_error_, .release };
        try std.testing.expectEqualSlices(objc.Message, &opening, fake.state.log.items[0..opening.len]);
        var info: [3]u32 = undefined;
        var text: [128]u8 = undefined;
        var len: u64 = 0;
        try ok(abi.lmh_device_info(device, &info, &text, text.len, &len));
        try std.testing.expectEqual([3]u32{ metal_kind, 1, 1 }, info);
        try std.testing.expectEqualStrings("metal: Fake Apple M0 (Linux), 32-lane simdgroups", text[0..@intCast(len)]);
        try ok(abi.lmh_device_close(device));
        try expectBalanced();
    }
}

test "metal on the fake runtime: a failed command buffer is an error with Metal's text, and the session ends" {
    const head: Head = .{ .type = .q8_0, .rows = 1, .hidden = 256, .vocab = 8 };
    const inputs = try Inputs.init(head, 2, 0);
    defer inputs.deinit();
    var out: [(8 + 1) * 4]u8 = undefined;
    install(.{ .command_buffer_error = "Caused GPU Timeout Error (00000002:kIOGPUCommandBufferCallbackErrorTimeout)" });
    defer fake.reset();
    try std.testing.expectError(error.LmheadFailed, runHead(metal_kind, head, inputs, &out));
    try std.testing.expect(std.mem.indexOf(u8, failure_text[0..failure_len], "status 5: Caused GPU Timeout Error") != null);
    try expectBalanced();
}

test "metal on the fake runtime: a mapping above maxBufferLength is split into views and still returns the CPU's bytes" {
    // Q8_0, 512 x 200: a 108800-byte head 203000 bytes into a file, against 256 KiB
    // buffers: views 128 KiB apart, the head inside the second.
    const head: Head = .{ .type = .q8_0, .rows = 2, .hidden = 512, .vocab = 200 };
    try expectCpuBytes(head, .{ .max_buffer_length = 256 * 1024 }, 203000);
}

test "metal on the fake runtime: a tensor larger than the views of its mapping is refused, not bound short" {
    const head: Head = .{ .type = .q8_0, .rows = 1, .hidden = 512, .vocab = 200 };
    const inputs = try Inputs.init(head, 3, 3000);
    defer inputs.deinit();
    var out: [(200 + 1) * 4]u8 = undefined;
    install(.{ .max_buffer_length = 64 * 1024 });
    defer fake.reset();
    try std.testing.expectError(error.LmheadFailed, runHead(metal_kind, head, inputs, &out));
    try std.testing.expect(std.mem.indexOf(u8, failure_text[0..failure_len], "a window of 108800 bytes crosses") != null);
    try expectBalanced();
}

test "metal on the fake runtime: the GPU's read bandwidth and fma rate are their work over GPU time" {
    install(.{});
    defer fake.reset();
    fake.executor = struct {
        fn run(d: *const fake.Dispatch) anyerror!void {
            if (!std.mem.startsWith(u8, d.kernel, "lmh_probe_")) return error.NotAProbe;
        }
    }.run;
    var device: u64 = 0;
    try ok(abi.lmh_device_open(metal_kind, &device));
    var per_second: [2]f64 = undefined;
    try ok(abi.lmh_device_read_bandwidth(device, 1 << 24, 3, &per_second));
    // The fake's command buffers take 0.25 s of GPU time.
    try std.testing.expectEqual([2]f64{ 4 * (1 << 24), 4 * (1 << 24) }, per_second);
    var fmas_per_second: f64 = 0;
    try ok(abi.lmh_device_fma_rate(device, 3, &fmas_per_second));
    try std.testing.expectEqual(4 * @as(f64, 1024 * 256 * 4096 * 8), fmas_per_second);
    try ok(abi.lmh_device_close(device));
    try expectBalanced();
}

test "the backend's probe kernels pass the kernel source lint" {
    const lint = @import("../../kernels/lint.zig");
    const backend = @import("backend.zig");
    try std.testing.expectEqual(@as(?lint.Finding, null), lint.lint(backend.probes));
}
