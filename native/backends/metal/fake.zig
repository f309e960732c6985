//! Test-only: a fake Objective-C runtime and Metal device, so the real Metal backend code
//! runs on Linux. Every message of objc.Messages has a fake with its exact prototype. The
//! fake keeps Cocoa's ownership rules (new… = +1, the rest autoreleased into the
//! innermost pool) and counts every breach: a message to a released object, a release
//! too many, an object autoreleased with no pool, a pool popped out of order, an object
//! alive at the end. Encoders record what they are told (pipelines, bindings, parameter
//! bytes, grids, barriers), and a commit runs the recorded dispatches in order through
//! `executor`: the host-emulated kernel source.
const std = @import("std");
const objc = @import("objc.zig");
const emulator = @import("../../kernels/emulator.zig");
const Id = objc.Id;
const Sel = objc.Sel;

/// What the fake device does; tests set it before opening a device.
pub const Config = struct {
    has_device: bool = true,
    apple7: bool = true,
    simd_width: usize = 32,
    max_threads: usize = 1024,
    max_buffer_length: usize = 1 << 30,
    /// macOS 15+ compile options respond to setMathMode:.
    has_math_mode: bool = true,
    /// A compile that fails, with this log.
    compile_error: ?[]const u8 = null,
    /// A kernel the library lacks (newFunctionWithName: returns nil for it).
    missing_function: ?[]const u8 = null,
    /// A command buffer that ends in MTLCommandBufferStatusError, with this description.
    command_buffer_error: ?[]const u8 = null,
};

pub const max_bindings = 8;
pub const Binding = struct { bytes: []u8, offset_bytes: usize };

/// One recorded encoder event.
pub const Event = union(enum) {
    barrier,
    dispatch: Dispatch,
};

pub const Dispatch = struct {
    kernel: []const u8,
    /// Index → the bound buffer's bytes from its offset to its end, and the offset.
    buffers: [max_bindings]?Binding = @splat(null),
    params: [64]u8 = undefined,
    params_bytes: usize = 0,
    params_index: usize = 0,
    groups: objc.Size,
    threads: objc.Size,
};

/// Runs one recorded dispatch; set by the test that drives the fake. An error ends the
/// command buffer in MTLCommandBufferStatusError with the error's name.
pub var executor: *const fn (*const Dispatch) anyerror!void = undefined;

const Kind = enum { class, string, device, queue, options, library, function, pipeline, command_buffer, encoder, buffer, failure };

const Object = struct {
    kind: Kind,
    refs: i32 = 1,
    /// Text of a string or error; the name of a function or pipeline; the class name.
    text: []const u8 = "",
    /// A buffer's memory (owned unless wrapped) and whether it is owned.
    memory: []u8 = &.{},
    owned: bool = false,
    /// A library's source, to find its kernels.
    source: []const u8 = "",
    /// A command buffer's recorded events; its status and error after commit.
    events: std.ArrayList(Event) = .empty,
    committed: bool = false,
    completed: bool = false,
    status: usize = 0,
    failure: ?*Object = null,
    /// An encoder's command buffer and its pending bindings.
    parent: ?*Object = null,
    pending: Dispatch = .{ .kernel = "", .groups = undefined, .threads = undefined },
    ended: bool = false,
    math_mode_safe: bool = false,
    fast_math_off: bool = false,
};

/// Everything the fake saw, for the tests' assertions.
pub const State = struct {
    config: Config = .{},
    arena: std.heap.ArenaAllocator = .init(std.heap.page_allocator),
    objects: std.ArrayList(*Object) = .empty,
    pool: std.ArrayList(*Object) = .empty,
    pool_tokens: usize = 0,
    /// Breaches of the rules above; each also printed.
    violations: u32 = 0,
    /// Every message sent, in order.
    log: std.ArrayList(objc.Message) = .empty,
    /// Every committed command buffer's events, in order.
    committed: std.ArrayList(Event) = .empty,
    compiled_safe: bool = false,
};

pub var state: State = .{};

var class_string: Object = .{ .kind = .class, .text = "NSString" };
var class_options: Object = .{ .kind = .class, .text = "MTLCompileOptions" };

/// Starts a fresh fake with `config` and installs it as the backend's runtime.
pub fn install(config: Config) void {
    reset();
    state.config = config;
    objc.override = &runtime;
}

/// Uninstalls the fake and frees everything it holds.
pub fn reset() void {
    objc.override = null;
    for (state.objects.items) |o| if (o.owned) std.heap.page_allocator.free(o.memory);
    state.arena.deinit();
    state = .{};
}

/// Objects still alive (class objects excluded).
pub fn liveObjects() usize {
    var n: usize = 0;
    for (state.objects.items) |o| n += @intFromBool(o.refs > 0);
    return n;
}

fn violation(comptime fmt: []const u8, args: anytype) void {
    std.debug.print("fake objc: " ++ fmt ++ "\n", args);
    state.violations += 1;
}

fn allocator() std.mem.Allocator {
    return state.arena.allocator();
}

fn create(kind: Kind, fields: Object) ?Id {
    const o = allocator().create(Object) catch return null;
    o.* = fields;
    o.kind = kind;
    state.objects.append(allocator(), o) catch return null;
    return @ptrCast(o);
}

fn autoreleased(kind: Kind, fields: Object) ?Id {
    const id = create(kind, fields) orelse return null;
    if (state.pool_tokens == 0) violation("{s} autoreleased with no pool in place (leaked)", .{@tagName(kind)});
    state.pool.append(allocator(), object(id)) catch return null;
    return id;
}

fn object(id: Id) *Object {
    return @ptrCast(@alignCast(id));
}

/// The receiver of a message, which is logged: alive and of the expected kind, else a violation.
fn receiver(id: Id, kind: Kind, message: objc.Message) *Object {
    state.log.append(allocator(), message) catch {};
    return argument(id, kind, message);
}

/// An object passed to a message: alive and of the expected kind, else a violation.
fn argument(id: Id, kind: Kind, message: objc.Message) *Object {
    const o = object(id);
    if (o.kind != kind) violation("{s} sent to a {s}, expected a {s}", .{ @tagName(message), @tagName(o.kind), @tagName(kind) });
    if (o.kind != .class and o.refs <= 0) violation("{s} sent to a released {s}", .{ @tagName(message), @tagName(o.kind) });
    return o;
}

fn copyText(text: []const u8) []const u8 {
    return allocator().dupe(u8, text) catch "";
}

// The C functions of the runtime.

fn getClass(name: [*:0]const u8) callconv(.c) ?objc.Class {
    const n = std.mem.span(name);
    if (std.mem.eql(u8, n, "NSString")) return @ptrCast(&class_string);
    if (std.mem.eql(u8, n, "MTLCompileOptions")) return @ptrCast(&class_options);
    return null;
}

fn registerName(name: [*:0]const u8) callconv(.c) ?Sel {
    return @ptrCast(copyText(std.mem.span(name)).ptr);
}

fn poolPush() callconv(.c) ?*anyopaque {
    state.pool_tokens += 1;
    return @ptrFromInt(state.pool.items.len * 16 + state.pool_tokens);
}

fn poolPop(token: ?*anyopaque) callconv(.c) void {
    const t = @intFromPtr(token);
    if (state.pool_tokens == 0 or t % 16 != state.pool_tokens % 16) violation("pool popped out of order", .{});
    state.pool_tokens -|= 1;
    const mark = t / 16;
    while (state.pool.items.len > mark) drop(state.pool.pop().?);
}

fn createSystemDefaultDevice() callconv(.c) ?Id {
    if (!state.config.has_device) return null;
    return create(.device, .{ .kind = .device, .text = "Fake Apple M0 (Linux)" });
}

fn drop(o: *Object) void {
    if (o.refs <= 0) return violation("release of a released {s}", .{@tagName(o.kind)});
    o.refs -= 1;
    if (o.refs == 0 and o.owned) {
        std.heap.page_allocator.free(o.memory);
        o.owned = false;
    }
}

// NSObject and Foundation.

fn release(self: Id, _: Sel) callconv(.c) void {
    const o = object(self);
    state.log.append(allocator(), .release) catch {};
    drop(o);
}

fn respondsToSelector(self: Id, _: Sel, sel: Sel) callconv(.c) bool {
    const o = receiver(self, .options, .respondsToSelector_);
    _ = o;
    const name: [*:0]const u8 = @ptrCast(sel);
    return state.config.has_math_mode or !std.mem.eql(u8, std.mem.span(name), "setMathMode:");
}

fn stringWithCString(self: objc.Class, _: Sel, text: [*:0]const u8, encoding: usize) callconv(.c) ?Id {
    _ = receiver(self, .class, .stringWithCString_encoding_);
    if (encoding != objc.utf8_string_encoding) violation("string encoding {d}", .{encoding});
    return autoreleased(.string, .{ .kind = .string, .text = copyText(std.mem.span(text)) });
}

fn utf8String(self: Id, _: Sel) callconv(.c) ?[*:0]const u8 {
    const o = object(self);
    state.log.append(allocator(), .UTF8String) catch {};
    if (o.refs <= 0) violation("UTF8String of a released {s}", .{@tagName(o.kind)});
    return (allocator().dupeSentinel(u8, o.text, 0) catch return null).ptr;
}

fn localizedDescription(self: Id, _: Sel) callconv(.c) ?Id {
    const o = receiver(self, .failure, .localizedDescription);
    return autoreleased(.string, .{ .kind = .string, .text = o.text });
}

fn alloc(self: objc.Class, _: Sel) callconv(.c) ?Id {
    const o = receiver(self, .class, .alloc);
    if (o != &class_options) return null;
    return create(.options, .{ .kind = .options });
}

/// Options are ready once allocated: init returns the receiver, as NSObject's does.
fn init(self: Id, _: Sel) callconv(.c) ?Id {
    _ = receiver(self, .options, .init);
    return self;
}

// MTLDevice.

fn deviceName(self: Id, _: Sel) callconv(.c) ?Id {
    const o = receiver(self, .device, .name);
    return autoreleased(.string, .{ .kind = .string, .text = o.text });
}

fn supportsFamily(self: Id, _: Sel, family: isize) callconv(.c) bool {
    _ = receiver(self, .device, .supportsFamily_);
    return family <= 1005 or state.config.apple7;
}

fn maxBufferLength(self: Id, _: Sel) callconv(.c) usize {
    _ = receiver(self, .device, .maxBufferLength);
    return state.config.max_buffer_length;
}

fn newCommandQueue(self: Id, _: Sel) callconv(.c) ?Id {
    _ = receiver(self, .device, .newCommandQueue);
    return create(.queue, .{ .kind = .queue });
}

fn newLibraryWithSource(self: Id, _: Sel, source: Id, options: Id, failure: *?Id) callconv(.c) ?Id {
    _ = receiver(self, .device, .newLibraryWithSource_options_error_);
    const s = argument(source, .string, .newLibraryWithSource_options_error_);
    const o = argument(options, .options, .newLibraryWithSource_options_error_);
    state.compiled_safe = o.math_mode_safe or o.fast_math_off;
    if (state.config.compile_error) |log| {
        failure.* = autoreleased(.failure, .{ .kind = .failure, .text = log });
        return null;
    }
    return create(.library, .{ .kind = .library, .source = s.text });
}

fn newComputePipelineState(self: Id, _: Sel, function: Id, failure: *?Id) callconv(.c) ?Id {
    _ = receiver(self, .device, .newComputePipelineStateWithFunction_error_);
    const f = argument(function, .function, .newComputePipelineStateWithFunction_error_);
    _ = failure;
    return create(.pipeline, .{ .kind = .pipeline, .text = f.text });
}

fn newBufferWithLength(self: Id, _: Sel, length: usize, options: usize) callconv(.c) ?Id {
    _ = receiver(self, .device, .newBufferWithLength_options_);
    if (options != objc.storage_mode_shared | objc.hazard_tracking_untracked) violation("buffer options {x}", .{options});
    if (length > state.config.max_buffer_length) return null;
    // Garbage, not zeros: the backend must zero what it allocates.
    const memory = std.heap.page_allocator.alloc(u8, length) catch return null;
    @memset(memory, 0xA5);
    return create(.buffer, .{ .kind = .buffer, .memory = memory, .owned = true });
}

fn newBufferWithBytesNoCopy(self: Id, _: Sel, pointer: *anyopaque, length: usize, options: usize, deallocator: ?*anyopaque) callconv(.c) ?Id {
    _ = receiver(self, .device, .newBufferWithBytesNoCopy_length_options_deallocator_);
    const page_bytes = std.heap.pageSize();
    if (@intFromPtr(pointer) % page_bytes != 0 or length % page_bytes != 0) {
        violation("bytesNoCopy of {d} bytes at 0x{x}: not whole pages", .{ length, @intFromPtr(pointer) });
        return null;
    }
    if (length > state.config.max_buffer_length or deallocator != null) return null;
    if (options != objc.storage_mode_shared | objc.hazard_tracking_untracked) violation("buffer options {x}", .{options});
    return create(.buffer, .{ .kind = .buffer, .memory = @as([*]u8, @ptrCast(pointer))[0..length] });
}

// MTLCompileOptions, MTLLibrary, MTLComputePipelineState.

fn setMathMode(self: Id, _: Sel, mode: isize) callconv(.c) void {
    const o = receiver(self, .options, .setMathMode_);
    if (!state.config.has_math_mode) violation("setMathMode: on options that do not respond to it", .{});
    o.math_mode_safe = mode == objc.math_mode_safe;
}

fn setFastMathEnabled(self: Id, _: Sel, enabled: u32) callconv(.c) void {
    const o = receiver(self, .options, .setFastMathEnabled_);
    o.fast_math_off = enabled == 0;
}

/// A function exists when the library's source declares it literally (`kernel void name(`),
/// or, for the head's kernels that macros declare (LMH_HEAD_TYPES), when the host emulator,
/// built from the same kernel source and entry list, has it.
fn newFunctionWithName(self: Id, _: Sel, name: Id) callconv(.c) ?Id {
    const library = receiver(self, .library, .newFunctionWithName_);
    const n = argument(name, .string, .newFunctionWithName_);
    if (state.config.missing_function) |missing| if (std.mem.eql(u8, n.text, missing)) return null;
    const declaration = std.fmt.allocPrint(allocator(), "kernel void {s}(", .{n.text}) catch return null;
    const declared = std.mem.indexOf(u8, library.source, declaration) != null;
    if (!declared and std.meta.isError(emulator.default.kernel(n.text))) return null;
    return create(.function, .{ .kind = .function, .text = n.text });
}

fn threadExecutionWidth(self: Id, _: Sel) callconv(.c) usize {
    _ = receiver(self, .pipeline, .threadExecutionWidth);
    return state.config.simd_width;
}

fn maxTotalThreadsPerThreadgroup(self: Id, _: Sel) callconv(.c) usize {
    _ = receiver(self, .pipeline, .maxTotalThreadsPerThreadgroup);
    return state.config.max_threads;
}

// MTLCommandQueue and MTLCommandBuffer.

fn commandBuffer(self: Id, _: Sel) callconv(.c) ?Id {
    _ = receiver(self, .queue, .commandBuffer);
    return autoreleased(.command_buffer, .{ .kind = .command_buffer });
}

fn computeCommandEncoder(self: Id, _: Sel, dispatch_type: usize) callconv(.c) ?Id {
    const cb = receiver(self, .command_buffer, .computeCommandEncoderWithDispatchType_);
    if (dispatch_type != objc.dispatch_type_concurrent) violation("encoder dispatch type {d}", .{dispatch_type});
    return autoreleased(.encoder, .{ .kind = .encoder, .parent = cb });
}

/// Runs the recorded dispatches in order (the tests check the barriers between them).
fn commit(self: Id, _: Sel) callconv(.c) void {
    const cb = receiver(self, .command_buffer, .commit);
    if (cb.committed) violation("command buffer committed twice", .{});
    cb.committed = true;
    state.committed.appendSlice(allocator(), cb.events.items) catch {};
    if (state.config.command_buffer_error) |text| {
        cb.status = objc.command_buffer_status_error;
        cb.failure = object(autoreleased(.failure, .{ .kind = .failure, .text = text }).?);
        return;
    }
    cb.status = objc.command_buffer_status_completed;
    for (cb.events.items) |*e| if (e.* == .dispatch) executor(&e.dispatch) catch |err| {
        cb.status = objc.command_buffer_status_error;
        const text = std.fmt.allocPrint(allocator(), "the emulated {s} failed: {s}", .{ e.dispatch.kernel, @errorName(err) }) catch "";
        cb.failure = object(autoreleased(.failure, .{ .kind = .failure, .text = text }).?);
        return;
    };
}

fn waitUntilCompleted(self: Id, _: Sel) callconv(.c) void {
    const cb = receiver(self, .command_buffer, .waitUntilCompleted);
    if (!cb.committed) violation("wait on an uncommitted command buffer", .{});
    cb.completed = true;
}

fn commandBufferStatus(self: Id, _: Sel) callconv(.c) usize {
    const cb = receiver(self, .command_buffer, .status);
    if (!cb.completed) violation("status read before the wait", .{});
    return cb.status;
}

/// The error is owned by its command buffer (returned borrowed, as Metal does).
fn commandBufferError(self: Id, _: Sel) callconv(.c) ?Id {
    const cb = receiver(self, .command_buffer, .@"error");
    return @ptrCast(cb.failure orelse return null);
}

fn gpuStartTime(self: Id, _: Sel) callconv(.c) f64 {
    _ = receiver(self, .command_buffer, .GPUStartTime);
    return 100.0;
}

fn gpuEndTime(self: Id, _: Sel) callconv(.c) f64 {
    _ = receiver(self, .command_buffer, .GPUEndTime);
    return 100.25;
}

// MTLComputeCommandEncoder.

fn encoderOf(self: Id, message: objc.Message) *Object {
    const e = receiver(self, .encoder, message);
    if (e.ended) violation("{s} after endEncoding", .{@tagName(message)});
    return e;
}

fn setComputePipelineState(self: Id, _: Sel, pipeline: Id) callconv(.c) void {
    const e = encoderOf(self, .setComputePipelineState_);
    e.pending.kernel = argument(pipeline, .pipeline, .setComputePipelineState_).text;
}

fn setBuffer(self: Id, _: Sel, buffer: Id, offset_bytes: usize, index: usize) callconv(.c) void {
    const e = encoderOf(self, .setBuffer_offset_atIndex_);
    const b = argument(buffer, .buffer, .setBuffer_offset_atIndex_);
    if (index >= max_bindings or offset_bytes > b.memory.len) return violation("buffer bound at index {d}, offset {d} of {d} bytes", .{ index, offset_bytes, b.memory.len });
    e.pending.buffers[index] = .{ .bytes = b.memory[offset_bytes..], .offset_bytes = offset_bytes };
}

fn setBytes(self: Id, _: Sel, bytes: *const anyopaque, length: usize, index: usize) callconv(.c) void {
    const e = encoderOf(self, .setBytes_length_atIndex_);
    if (length > e.pending.params.len or length >= 4096) return violation("setBytes of {d} bytes", .{length});
    @memcpy(e.pending.params[0..length], @as([*]const u8, @ptrCast(bytes))[0..length]);
    e.pending.params_bytes = length;
    e.pending.params_index = index;
}

fn dispatchThreadgroups(self: Id, _: Sel, groups: objc.Size, threads: objc.Size) callconv(.c) void {
    const e = encoderOf(self, .dispatchThreadgroups_threadsPerThreadgroup_);
    var d = e.pending;
    d.groups = groups;
    d.threads = threads;
    if (threads.width * threads.height * threads.depth > state.config.max_threads) violation("{d} threads per threadgroup", .{threads.width});
    e.parent.?.events.append(allocator(), .{ .dispatch = d }) catch {};
}

fn memoryBarrierWithScope(self: Id, _: Sel, scope: usize) callconv(.c) void {
    const e = encoderOf(self, .memoryBarrierWithScope_);
    if (scope != objc.barrier_scope_buffers) violation("barrier scope {d}", .{scope});
    e.parent.?.events.append(allocator(), .barrier) catch {};
}

fn endEncoding(self: Id, _: Sel) callconv(.c) void {
    const e = encoderOf(self, .endEncoding);
    e.ended = true;
}

fn contents(self: Id, _: Sel) callconv(.c) ?*anyopaque {
    const b = receiver(self, .buffer, .contents);
    return @ptrCast(b.memory.ptr);
}

pub const runtime: objc.Runtime = blk: {
    var r: objc.Runtime = .{
        .getClass = getClass,
        .registerName = registerName,
        .poolPush = poolPush,
        .poolPop = poolPop,
        .createSystemDefaultDevice = createSystemDefaultDevice,
        .messages = .{
            .release = release,
            .respondsToSelector_ = respondsToSelector,
            .stringWithCString_encoding_ = stringWithCString,
            .UTF8String = utf8String,
            .localizedDescription = localizedDescription,
            .alloc = alloc,
            .init = init,
            .name = deviceName,
            .supportsFamily_ = supportsFamily,
            .maxBufferLength = maxBufferLength,
            .newCommandQueue = newCommandQueue,
            .newLibraryWithSource_options_error_ = newLibraryWithSource,
            .newComputePipelineStateWithFunction_error_ = newComputePipelineState,
            .newBufferWithLength_options_ = newBufferWithLength,
            .newBufferWithBytesNoCopy_length_options_deallocator_ = newBufferWithBytesNoCopy,
            .setMathMode_ = setMathMode,
            .setFastMathEnabled_ = setFastMathEnabled,
            .newFunctionWithName_ = newFunctionWithName,
            .threadExecutionWidth = threadExecutionWidth,
            .maxTotalThreadsPerThreadgroup = maxTotalThreadsPerThreadgroup,
            .commandBuffer = commandBuffer,
            .computeCommandEncoderWithDispatchType_ = computeCommandEncoder,
            .commit = commit,
            .waitUntilCompleted = waitUntilCompleted,
            .status = commandBufferStatus,
            .@"error" = commandBufferError,
            .GPUStartTime = gpuStartTime,
            .GPUEndTime = gpuEndTime,
            .setComputePipelineState_ = setComputePipelineState,
            .setBuffer_offset_atIndex_ = setBuffer,
            .setBytes_length_atIndex_ = setBytes,
            .dispatchThreadgroups_threadsPerThreadgroup_ = dispatchThreadgroups,
            .memoryBarrierWithScope_ = memoryBarrierWithScope,
            .endEncoding = endEncoding,
            .contents = contents,
        },
    };
    for (std.enums.values(objc.Message), 0..) |m, i| r.selectors[i] = @ptrCast(objc.selectorName(m).ptr);
    break :blk r;
};
