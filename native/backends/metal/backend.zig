//! The Metal backend: the head on an Apple-silicon GPU, through the Objective-C runtime
//! of objc.zig (no SDK, no framework linked). A device compiles the embedded kernel source
//! once at open, in safe math with `#pragma METAL fp contract(off)` first in the source,
//! and keeps one pipeline per kernel. Buffers are MTLBuffers in shared storage, so the
//! host reads logits without a copy; wrapped host memory (a mapped file) is bound with no
//! copy. A session is one command buffer with one concurrent compute encoder; the
//! tracker's barriers become buffer-scope memory barriers at exactly its points.
const std = @import("std");
const status = @import("../../core/status.zig");
const contract = @import("../backend.zig");
const objc = @import("objc.zig");
const shapes = @import("shapes.zig");
const Command = contract.Command;
const Error = status.Error;
const fail = status.fail;
const Id = objc.Id;
const Runtime = objc.Runtime;

/// The kernel source: the shared bodies and the Metal prelude and entry points, then the
/// backend's own probes (read bandwidth and the Mac-only numerics checks).
pub const source: [:0]const u8 = @import("../../kernels/sources.zig").metal ++ probes;
pub const probes = @embedFile("probes.metal");

/// Views a wrapped mapping may be split into (see `Memory`).
const max_views = 16;

pub const Backend = struct {
    runtime: *const Runtime,
    device: Id,
    queue: Id,
    library: Id,
    /// The probes' pipelines (shapes.probe_names); the head's are the device registry's.
    probes: [shapes.probe_names.len]Id,
    max_buffer_bytes: usize,
    name_text: [96]u8 = undefined,
    name_len: usize = 0,

    pub const name = "metal";
    pub const host_visible = true;

    /// One allocation: an owned MTLBuffer, or MTLBuffers over host memory the caller keeps.
    /// `newBufferWithBytesNoCopy` needs whole pages, so a wrap covers the pages around the
    /// host range; above the device's maxBufferLength it is split (see `split`).
    pub const Memory = struct {
        host: [*]u8,
        bytes: u64,
        /// Where `host` lies from the first view's start.
        head_bytes: usize,
        /// View i starts at i * stride_bytes and is at most view_bytes long.
        stride_bytes: usize,
        view_bytes: usize,
        views: [max_views]Id,
        views_len: u8,
    };

    pub fn create() Error!*Backend {
        const runtime = try objc.current();
        const pool = objc.Pool.push(runtime);
        defer pool.pop();
        const device = runtime.createSystemDefaultDevice() orelse
            return fail(error.Unsupported, "no Metal device (MTLCreateSystemDefaultDevice returned nil)", .{});
        errdefer runtime.release(device);
        const backend = std.heap.c_allocator.create(Backend) catch return fail(error.OutOfMemory, "out of memory", .{});
        errdefer std.heap.c_allocator.destroy(backend);
        backend.* = .{
            .runtime = runtime,
            .device = device,
            .queue = undefined,
            .library = undefined,
            .probes = undefined,
            .max_buffer_bytes = runtime.send(.maxBufferLength, device, .{}),
        };
        const device_name = runtime.text(runtime.send(.name, device, .{}));
        backend.name_len = @min(device_name.len, backend.name_text.len);
        @memcpy(backend.name_text[0..backend.name_len], device_name[0..backend.name_len]);
        if (!runtime.send(.supportsFamily_, device, .{objc.gpu_family_apple7}))
            return fail(error.Unsupported, "Metal device \"{s}\" is not of the Apple7 family (an M-series GPU); lmhead's kernels need it", .{backend.deviceName()});
        backend.queue = runtime.send(.newCommandQueue, device, .{}) orelse
            return fail(error.Backend, "Metal device \"{s}\" gave no command queue", .{backend.deviceName()});
        errdefer runtime.release(backend.queue);
        backend.library = try compile(runtime, device);
        errdefer runtime.release(backend.library);
        var made: usize = 0;
        errdefer for (backend.probes[0..made]) |p| runtime.release(p);
        for (&backend.probes, shapes.kernels.len..) |*p, i| {
            p.* = try backend.newPipeline(i);
            made += 1;
        }
        return backend;
    }

    pub fn destroy(backend: *Backend) void {
        const runtime = backend.runtime;
        const pool = objc.Pool.push(runtime);
        defer pool.pop();
        for (backend.probes) |p| runtime.release(p);
        runtime.release(backend.library);
        runtime.release(backend.queue);
        runtime.release(backend.device);
        std.heap.c_allocator.destroy(backend);
    }

    fn deviceName(backend: *const Backend) []const u8 {
        return backend.name_text[0..backend.name_len];
    }

    /// Compiles the kernel source in safe math (setMathMode: where the options respond to
    /// it, macOS 15+, else setFastMathEnabled: NO). Judged by the returned library, not by
    /// the NSError, which also carries warnings.
    fn compile(runtime: *const Runtime, device: Id) Error!Id {
        const allocated = runtime.send(.alloc, try runtime.class("MTLCompileOptions"), .{}) orelse
            return fail(error.OutOfMemory, "out of memory creating MTLCompileOptions", .{});
        const options = runtime.send(.init, allocated, .{}) orelse
            return fail(error.OutOfMemory, "out of memory creating MTLCompileOptions", .{});
        defer runtime.release(options);
        if (runtime.send(.respondsToSelector_, options, .{runtime.selector(.setMathMode_)}))
            runtime.send(.setMathMode_, options, .{objc.math_mode_safe})
        else
            runtime.send(.setFastMathEnabled_, options, .{0});
        var compile_error: ?Id = null;
        return runtime.send(.newLibraryWithSource_options_error_, device, .{ try runtime.string(source), options, &compile_error }) orelse
            fail(error.Backend, "the Metal kernel source did not compile: {s}", .{runtime.errorText(compile_error)});
    }

    /// The head's kernels, whose pipelines the device registry makes when the device opens
    /// (so a GPU that cannot run one is refused there) and owns.
    pub const pipeline_kernels: []const contract.Kernel = shapes.kernels;

    pub fn makePipeline(backend: *Backend, kernel: contract.Kernel) Error!*anyopaque {
        const pool = objc.Pool.push(backend.runtime);
        defer pool.pop();
        return try backend.newPipeline(shapes.pipelineIndex(kernel));
    }

    pub fn releasePipeline(backend: *Backend, pipeline: *anyopaque) void {
        const pool = objc.Pool.push(backend.runtime);
        defer pool.pop();
        backend.runtime.release(@ptrCast(pipeline));
    }

    /// Pipeline `i` of shapes.pipeline_names (+1): the kernels' butterflies assume 32-lane
    /// simdgroups, so a pipeline that runs narrower ones is refused.
    fn newPipeline(backend: *Backend, i: usize) Error!Id {
        const runtime = backend.runtime;
        const kernel_name = shapes.pipeline_names[i];
        const function = runtime.send(.newFunctionWithName_, backend.library, .{try runtime.string(kernel_name)}) orelse
            return fail(error.Backend, "the Metal library has no kernel {s}", .{kernel_name});
        defer runtime.release(function);
        var pipeline_error: ?Id = null;
        const pipeline = runtime.send(.newComputePipelineStateWithFunction_error_, backend.device, .{ function, &pipeline_error }) orelse
            return fail(error.Backend, "no Metal pipeline for {s}: {s}", .{ kernel_name, runtime.errorText(pipeline_error) });
        const width = runtime.send(.threadExecutionWidth, pipeline, .{});
        const max_threads = runtime.send(.maxTotalThreadsPerThreadgroup, pipeline, .{});
        if (width != shapes.simd_width or max_threads < shapes.pipeline_threads[i]) {
            runtime.release(pipeline);
            return fail(error.Unsupported, "Metal pipeline {s} runs {d}-wide simdgroups and at most {d} threads per threadgroup; it needs {d} and {d}", .{ kernel_name, width, max_threads, shapes.simd_width, shapes.pipeline_threads[i] });
        }
        return pipeline;
    }

    pub fn describe(backend: *Backend, out: []u8) []const u8 {
        return std.fmt.bufPrint(out, "metal: {s}, {d}-lane simdgroups", .{ backend.deviceName(), shapes.simd_width }) catch out;
    }

    pub fn threads(backend: *Backend) u32 {
        _ = backend;
        return 1;
    }

    /// A zeroed MTLBuffer in shared storage. Untracked: the session's barriers order it.
    pub fn alloc(backend: *Backend, bytes: u64) Error!Memory {
        if (bytes > backend.max_buffer_bytes)
            return fail(error.OutOfBounds, "Metal buffer of {d} bytes exceeds the device's maxBufferLength {d}", .{ bytes, backend.max_buffer_bytes });
        const runtime = backend.runtime;
        const pool = objc.Pool.push(runtime);
        defer pool.pop();
        const buffer = runtime.send(.newBufferWithLength_options_, backend.device, .{ @as(usize, @intCast(bytes)), objc.storage_mode_shared | objc.hazard_tracking_untracked }) orelse
            return fail(error.OutOfMemory, "Metal could not allocate {d} bytes", .{bytes});
        const contents = runtime.send(.contents, buffer, .{}) orelse {
            runtime.release(buffer);
            return fail(error.Backend, "a shared Metal buffer has no contents", .{});
        };
        const host: [*]u8 = @ptrCast(contents);
        @memset(host[0..@intCast(bytes)], 0);
        var memory: Memory = .{ .host = host, .bytes = bytes, .head_bytes = 0, .stride_bytes = @intCast(bytes), .view_bytes = @intCast(bytes), .views = undefined, .views_len = 1 };
        memory.views[0] = buffer;
        return memory;
    }

    /// MTLBuffers with no copy over the pages around [host, host + bytes).
    pub fn wrap(backend: *Backend, host: [*]u8, bytes: u64) Error!Memory {
        const page_bytes = std.heap.pageSize();
        const base = std.mem.alignBackward(usize, @intFromPtr(host), page_bytes);
        const head_bytes = @intFromPtr(host) - base;
        const region_bytes = std.mem.alignForward(usize, head_bytes + @as(usize, @intCast(bytes)), page_bytes);
        const s = split(region_bytes, std.mem.alignBackward(usize, backend.max_buffer_bytes, page_bytes), page_bytes);
        if (s.count > max_views)
            return fail(error.OutOfBounds, "wrapping {d} bytes needs {d} Metal buffers, more than {d}", .{ bytes, s.count, max_views });
        var memory: Memory = .{ .host = host, .bytes = bytes, .head_bytes = head_bytes, .stride_bytes = s.stride_bytes, .view_bytes = s.view_bytes, .views = undefined, .views_len = 0 };
        const runtime = backend.runtime;
        const pool = objc.Pool.push(runtime);
        defer pool.pop();
        errdefer for (memory.views[0..memory.views_len]) |v| runtime.release(v);
        for (0..s.count) |i| {
            const start = i * s.stride_bytes;
            const length = @min(s.view_bytes, region_bytes - start);
            const view = runtime.send(.newBufferWithBytesNoCopy_length_options_deallocator_, backend.device, .{ @as(*anyopaque, @ptrFromInt(base + start)), length, objc.storage_mode_shared | objc.hazard_tracking_untracked, null }) orelse
                return fail(error.Backend, "Metal could not wrap {d} bytes at 0x{x} with no copy", .{ length, base + start });
            memory.views[i] = view;
            memory.views_len += 1;
        }
        return memory;
    }

    pub fn free(backend: *Backend, memory: Memory) void {
        const pool = objc.Pool.push(backend.runtime);
        defer pool.pop();
        for (memory.views[0..memory.views_len]) |v| backend.runtime.release(v);
    }

    pub fn address(memory: Memory) usize {
        return @intFromPtr(memory.host);
    }

    pub fn hostBytes(memory: Memory) []u8 {
        return memory.host[0..@intCast(memory.bytes)];
    }

    pub fn copyIn(backend: *Backend, memory: Memory, offset_bytes: u64, src: []const u8) Error!void {
        _ = backend;
        @memcpy(memory.host[@intCast(offset_bytes)..][0..src.len], src);
    }

    pub fn copyOut(backend: *Backend, memory: Memory, offset_bytes: u64, dst: []u8) Error!void {
        _ = backend;
        @memcpy(dst, memory.host[@intCast(offset_bytes)..][0..dst.len]);
    }

    /// A new command buffer and its one concurrent compute encoder, both autoreleased: call
    /// inside a pool.
    fn commandEncoder(backend: *Backend) Error!struct { Id, Id } {
        const runtime = backend.runtime;
        const command_buffer = runtime.send(.commandBuffer, backend.queue, .{}) orelse
            return fail(error.Backend, "Metal gave no command buffer", .{});
        const encoder = runtime.send(.computeCommandEncoderWithDispatchType_, command_buffer, .{objc.dispatch_type_concurrent}) orelse
            return fail(error.Backend, "Metal gave no compute encoder", .{});
        return .{ command_buffer, encoder };
    }

    /// Runs the commands as one command buffer with one concurrent encoder and waits.
    /// A barrier command becomes a buffer-scope memory barrier: every write before it is
    /// visible to every dispatch after it. Returns the GPU's own time for the command buffer.
    pub fn execute(backend: *Backend, commands: []const Command, registry: *const contract.Registry) Error!?u64 {
        const runtime = backend.runtime;
        const pool = objc.Pool.push(runtime);
        defer pool.pop();
        const command_buffer, const encoder = try backend.commandEncoder();
        for (commands) |command| backend.encode(encoder, command, registry) catch |e| {
            runtime.send(.endEncoding, encoder, .{});
            return e;
        };
        runtime.send(.endEncoding, encoder, .{});
        const seconds = try backend.run(command_buffer);
        return @intFromFloat(std.math.clamp(seconds, 0, 1e6) * 1e9);
    }

    fn encode(backend: *Backend, encoder: Id, command: Command, registry: *const contract.Registry) Error!void {
        const runtime = backend.runtime;
        if (command == .barrier) return runtime.send(.memoryBarrierWithScope_, encoder, .{objc.barrier_scope_buffers});
        const d = shapes.dispatch(command);
        var scratch: [Command.max_buffers]*contract.Buffer = undefined;
        const used = command.buffers(&scratch);
        switch (command) {
            .barrier => unreachable,
            inline else => |c| runtime.send(.setBytes_length_atIndex_, encoder, .{ @as(*const anyopaque, &c.params), @sizeOf(@TypeOf(c.params)), 0 }),
        }
        for (used, 1..) |b, index| {
            const binding = try bind(b.root().place.root.metal, b.offsetBytes(), b.bytes);
            runtime.send(.setBuffer_offset_atIndex_, encoder, .{ binding.view, binding.offset_bytes, index });
        }
        runtime.send(.setComputePipelineState_, encoder, .{@as(Id, @ptrCast(registry.pipeline(shapes.kernels[d.pipeline])))});
        runtime.send(.dispatchThreadgroups_threadsPerThreadgroup_, encoder, .{ d.grid.groups, d.grid.threads });
    }

    /// Commits, waits, and maps a failed command buffer and its error text to an error.
    /// Returns the GPU's own time for the command buffer, in seconds.
    fn run(backend: *Backend, command_buffer: Id) Error!f64 {
        const runtime = backend.runtime;
        runtime.send(.commit, command_buffer, .{});
        runtime.send(.waitUntilCompleted, command_buffer, .{});
        const state = runtime.send(.status, command_buffer, .{});
        if (state != objc.command_buffer_status_completed)
            return fail(error.Backend, "Metal command buffer ended with status {d}: {s}", .{ state, runtime.errorText(runtime.send(.@"error", command_buffer, .{})) });
        return runtime.send(.GPUEndTime, command_buffer, .{}) - runtime.send(.GPUStartTime, command_buffer, .{});
    }

    /// The GPU's read bandwidth: the median of `passes` command buffers, each one probe
    /// kernel reading `bytes` once, timed by the GPU's own start and end times. A GPU's
    /// host side is one thread, so both figures are the same.
    pub fn readBandwidth(backend: *Backend, bytes: u64, passes: u32) Error![2]f64 {
        std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
        const memory = try backend.alloc(bytes);
        defer backend.free(memory);
        const sink = try backend.alloc(shapes.probe_read_groups * 4);
        defer backend.free(sink);
        var seconds: [contract.max_probe_passes]f64 = undefined;
        for (0..passes + 1) |pass| {
            const gpu_seconds = try backend.runProbe(shapes.probe_read, &.{ memory, sink }, &@as(u64, bytes / 16), shapes.probe_read_grid);
            if (pass > 0) seconds[pass - 1] = gpu_seconds; // pass 0 warms up
        }
        std.mem.sort(f64, seconds[0..passes], {}, std.sort.asc(f64));
        const per_second = @as(f64, @floatFromInt(bytes)) / @max(seconds[passes / 2], 1e-9);
        return .{ per_second, per_second };
    }

    /// f32 fmas per second of the whole GPU: the median of `passes` probe runs, each timed
    /// by the GPU's own start and end times.
    pub fn fmaRate(backend: *Backend, passes: u32) Error!f64 {
        std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
        const sink = try backend.alloc(1024 * 4);
        defer backend.free(sink);
        var seconds: [contract.max_probe_passes]f64 = undefined;
        for (0..passes + 1) |pass| {
            const gpu_seconds = try backend.runProbe(shapes.probe_fma, &.{sink}, &@as(u32, shapes.probe_fma_rounds), shapes.probe_fma_grid);
            if (pass > 0) seconds[pass - 1] = gpu_seconds; // pass 0 warms up
        }
        std.mem.sort(f64, seconds[0..passes], {}, std.sort.asc(f64));
        return @as(f64, @floatFromInt(shapes.probe_fma_count)) / @max(seconds[passes / 2], 1e-9);
    }

    /// Runs one of the backend's probe kernels: `buffers` bound at 0.., `parameter` after
    /// them, one command buffer, waited for. Returns its GPU time in seconds.
    pub fn runProbe(backend: *Backend, pipeline: usize, buffers: []const Memory, parameter: anytype, grid: shapes.Grid) Error!f64 {
        std.debug.assert(pipeline >= shapes.kernels.len and pipeline < shapes.pipeline_count);
        const runtime = backend.runtime;
        const pool = objc.Pool.push(runtime);
        defer pool.pop();
        const command_buffer, const encoder = try backend.commandEncoder();
        for (buffers, 0..) |memory, index| runtime.send(.setBuffer_offset_atIndex_, encoder, .{ memory.views[0], memory.head_bytes, index });
        runtime.send(.setBytes_length_atIndex_, encoder, .{ @as(*const anyopaque, parameter), @sizeOf(@TypeOf(parameter.*)), buffers.len });
        runtime.send(.setComputePipelineState_, encoder, .{backend.probes[pipeline - shapes.kernels.len]});
        runtime.send(.dispatchThreadgroups_threadsPerThreadgroup_, encoder, .{ grid.groups, grid.threads });
        runtime.send(.endEncoding, encoder, .{});
        return backend.run(command_buffer);
    }
};

const Split = struct { stride_bytes: usize, view_bytes: usize, count: usize };

/// Views over a region: one if it fits a buffer, else views twice the stride long, a
/// stride apart, so every window of up to `stride_bytes` lies wholly inside one of them
/// (as ggml binds mapped GGUF files above maxBufferLength).
fn split(region_bytes: usize, max_view_bytes: usize, page_bytes: usize) Split {
    if (region_bytes <= max_view_bytes) return .{ .stride_bytes = region_bytes, .view_bytes = region_bytes, .count = 1 };
    const stride_bytes = @max(std.mem.alignBackward(usize, max_view_bytes / 2, page_bytes), page_bytes);
    const count = 1 + (std.math.divCeil(usize, region_bytes - 2 * stride_bytes, stride_bytes) catch unreachable);
    return .{ .stride_bytes = stride_bytes, .view_bytes = 2 * stride_bytes, .count = count };
}

const Binding = struct { view: Id, offset_bytes: usize };

/// The view holding the window [offset_bytes, offset_bytes + bytes) of an allocation.
fn bind(memory: Backend.Memory, offset_bytes: u64, bytes: u64) Error!Binding {
    std.debug.assert(offset_bytes + bytes <= memory.bytes);
    const start = memory.head_bytes + @as(usize, @intCast(offset_bytes));
    const index = @min(start / memory.stride_bytes, memory.views_len - 1);
    const view_start = index * memory.stride_bytes;
    if (start + bytes > view_start + memory.view_bytes)
        return fail(error.OutOfBounds, "a window of {d} bytes crosses the {d}-byte views Metal binds of this mapping", .{ bytes, memory.view_bytes });
    return .{ .view = memory.views[index], .offset_bytes = start - view_start };
}

test "split: every window up to a stride lies inside one view" {
    const page = 16384;
    const s = split(100 * page, 16 * page, page);
    try std.testing.expectEqual(@as(usize, 8 * page), s.stride_bytes);
    try std.testing.expectEqual(@as(usize, 12), s.count); // views start at 0, 8, ..., 88 pages
    try std.testing.expect((s.count - 1) * s.stride_bytes + s.view_bytes >= 100 * page);
    try std.testing.expect((s.count - 2) * s.stride_bytes + s.view_bytes < 100 * page);
    try std.testing.expectEqual(@as(usize, 1), split(16 * page, 16 * page, page).count);
}
