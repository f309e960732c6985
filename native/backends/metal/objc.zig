//! The Objective-C layer of the Metal backend: every runtime function and every message
//! the backend sends, in one table (`Runtime`), so tests substitute a fake runtime.
//!
//! No SDK at build time: on macOS `load` takes libobjc, Metal and CoreGraphics with
//! dlopen (Zig's libSystem.tbd has no objc_msgSend). On arm64 one `objc_msgSend` serves
//! every signature, and it must be called through the exact, non-variadic prototype
//! (Apple arm64 passes variadic arguments on the stack). So each message is a field whose
//! type is its exact C prototype, and `load` points every field at objc_msgSend. The
//! field's name is the selector with `_` for `:` (each argument adds one colon).
//! BOOL arguments are declared u32 and passed 0/1: Apple arm64 makes the caller widen
//! arguments narrower than 32 bits.
const std = @import("std");
const builtin = @import("builtin");
const status = @import("../../core/status.zig");
const Error = status.Error;
const fail = status.fail;

pub const Object = opaque {};
pub const Id = *Object;
pub const Class = *Object;
pub const Selector = opaque {};
pub const Sel = *const Selector;
pub const Size = extern struct { width: usize, height: usize, depth: usize };

/// The messages the backend sends: selector (from the name), exact prototype after (id, SEL).
/// Ownership follows Cocoa: `new…` returns +1, everything else is autoreleased or borrowed.
pub const Messages = struct {
    // NSObject / Foundation
    release: *const fn (Id, Sel) callconv(.c) void,
    respondsToSelector_: *const fn (Id, Sel, Sel) callconv(.c) bool,
    stringWithCString_encoding_: *const fn (Class, Sel, [*:0]const u8, usize) callconv(.c) ?Id,
    UTF8String: *const fn (Id, Sel) callconv(.c) ?[*:0]const u8,
    localizedDescription: *const fn (Id, Sel) callconv(.c) ?Id,
    alloc: *const fn (Class, Sel) callconv(.c) ?Id,
    init: *const fn (Id, Sel) callconv(.c) ?Id,
    // MTLDevice
    name: *const fn (Id, Sel) callconv(.c) ?Id,
    supportsFamily_: *const fn (Id, Sel, isize) callconv(.c) bool,
    maxBufferLength: *const fn (Id, Sel) callconv(.c) usize,
    newCommandQueue: *const fn (Id, Sel) callconv(.c) ?Id,
    newLibraryWithSource_options_error_: *const fn (Id, Sel, Id, Id, *?Id) callconv(.c) ?Id,
    newComputePipelineStateWithFunction_error_: *const fn (Id, Sel, Id, *?Id) callconv(.c) ?Id,
    newBufferWithLength_options_: *const fn (Id, Sel, usize, usize) callconv(.c) ?Id,
    newBufferWithBytesNoCopy_length_options_deallocator_: *const fn (Id, Sel, *anyopaque, usize, usize, ?*anyopaque) callconv(.c) ?Id,
    // MTLCompileOptions
    setMathMode_: *const fn (Id, Sel, isize) callconv(.c) void,
    setFastMathEnabled_: *const fn (Id, Sel, u32) callconv(.c) void,
    // MTLLibrary, MTLComputePipelineState
    newFunctionWithName_: *const fn (Id, Sel, Id) callconv(.c) ?Id,
    threadExecutionWidth: *const fn (Id, Sel) callconv(.c) usize,
    maxTotalThreadsPerThreadgroup: *const fn (Id, Sel) callconv(.c) usize,
    // MTLCommandQueue, MTLCommandBuffer
    commandBuffer: *const fn (Id, Sel) callconv(.c) ?Id,
    computeCommandEncoderWithDispatchType_: *const fn (Id, Sel, usize) callconv(.c) ?Id,
    commit: *const fn (Id, Sel) callconv(.c) void,
    waitUntilCompleted: *const fn (Id, Sel) callconv(.c) void,
    status: *const fn (Id, Sel) callconv(.c) usize,
    @"error": *const fn (Id, Sel) callconv(.c) ?Id,
    GPUStartTime: *const fn (Id, Sel) callconv(.c) f64,
    GPUEndTime: *const fn (Id, Sel) callconv(.c) f64,
    // MTLComputeCommandEncoder
    setComputePipelineState_: *const fn (Id, Sel, Id) callconv(.c) void,
    setBuffer_offset_atIndex_: *const fn (Id, Sel, Id, usize, usize) callconv(.c) void,
    setBytes_length_atIndex_: *const fn (Id, Sel, *const anyopaque, usize, usize) callconv(.c) void,
    dispatchThreadgroups_threadsPerThreadgroup_: *const fn (Id, Sel, Size, Size) callconv(.c) void,
    memoryBarrierWithScope_: *const fn (Id, Sel, usize) callconv(.c) void,
    endEncoding: *const fn (Id, Sel) callconv(.c) void,
    // MTLBuffer
    contents: *const fn (Id, Sel) callconv(.c) ?*anyopaque,
};

pub const Message = std.meta.FieldEnum(Messages);

/// The metal-cpp class declaring each message, to check its prototype against Apple's
/// headers (test/fixtures/metal_selectors.txt).
pub fn declaringClass(message: Message) []const u8 {
    return switch (message) {
        .release => "NS::Referencing",
        .respondsToSelector_, .alloc, .init => "NS::Object",
        .stringWithCString_encoding_, .UTF8String => "NS::String",
        .localizedDescription => "NS::Error",
        .name, .supportsFamily_, .maxBufferLength, .newCommandQueue, .newLibraryWithSource_options_error_ => "MTL::Device",
        .newComputePipelineStateWithFunction_error_, .newBufferWithLength_options_, .newBufferWithBytesNoCopy_length_options_deallocator_ => "MTL::Device",
        .setMathMode_, .setFastMathEnabled_ => "MTL::CompileOptions",
        .newFunctionWithName_ => "MTL::Library",
        .threadExecutionWidth, .maxTotalThreadsPerThreadgroup => "MTL::ComputePipelineState",
        .commandBuffer => "MTL::CommandQueue",
        .computeCommandEncoderWithDispatchType_, .commit, .waitUntilCompleted, .status, .@"error", .GPUStartTime, .GPUEndTime => "MTL::CommandBuffer",
        .setComputePipelineState_, .setBuffer_offset_atIndex_, .setBytes_length_atIndex_, .dispatchThreadgroups_threadsPerThreadgroup_ => "MTL::ComputeCommandEncoder",
        .memoryBarrierWithScope_ => "MTL::ComputeCommandEncoder",
        .endEncoding => "MTL::CommandEncoder",
        .contents => "MTL::Buffer",
    };
}

/// The classes the backend looks up by name.
pub const classes = [_][:0]const u8{ "NSString", "MTLCompileOptions" };
const message_count = @typeInfo(Messages).@"struct".field_names.len;

/// The selector a message field names: `_` becomes `:`.
pub fn selectorName(comptime message: Message) [:0]const u8 {
    return comptime blk: {
        const field = @tagName(message);
        var name: [field.len:0]u8 = undefined;
        for (field, 0..) |c, i| name[i] = if (c == '_') ':' else c;
        const final = name;
        break :blk &final;
    };
}

/// Metal constants used (values from Apple's metal-cpp headers, see test/fixtures/metal_selectors.txt).
pub const utf8_string_encoding: usize = 4;
pub const storage_mode_shared: usize = 0;
pub const hazard_tracking_untracked: usize = 1 << 8;
pub const dispatch_type_concurrent: usize = 1;
pub const barrier_scope_buffers: usize = 1;
pub const math_mode_safe: isize = 0;
pub const gpu_family_apple7: isize = 1007;
pub const command_buffer_status_completed: usize = 4;
pub const command_buffer_status_error: usize = 5;

/// The runtime: C functions, then one entry per message and its registered selector.
pub const Runtime = struct {
    getClass: *const fn ([*:0]const u8) callconv(.c) ?Class,
    registerName: *const fn ([*:0]const u8) callconv(.c) ?Sel,
    poolPush: *const fn () callconv(.c) ?*anyopaque,
    poolPop: *const fn (?*anyopaque) callconv(.c) void,
    createSystemDefaultDevice: *const fn () callconv(.c) ?Id,
    messages: Messages,
    selectors: [message_count]Sel = undefined,

    /// Registers every selector once; fails if the runtime refuses one.
    pub fn registerSelectors(runtime: *Runtime) Error!void {
        inline for (comptime std.enums.values(Message), 0..) |m, i| {
            runtime.selectors[i] = runtime.registerName(selectorName(m)) orelse
                return fail(error.Backend, "the Objective-C runtime has no selector {s}", .{selectorName(m)});
        }
    }

    pub fn selector(runtime: *const Runtime, comptime message: Message) Sel {
        return runtime.selectors[@backingInt(message)];
    }

    /// Sends `message` to `target` with `args`, through the message's exact prototype.
    pub fn send(runtime: *const Runtime, comptime message: Message, target: anytype, args: anytype) ReturnOf(message) {
        const function = @field(runtime.messages, @tagName(message));
        return @call(.auto, function, .{ target, runtime.selector(message) } ++ args);
    }

    pub fn class(runtime: *const Runtime, name: [:0]const u8) Error!Class {
        return runtime.getClass(name) orelse fail(error.Backend, "the Objective-C runtime has no class {s}", .{name});
    }

    /// An autoreleased NSString of `text`.
    pub fn string(runtime: *const Runtime, utf8: [*:0]const u8) Error!Id {
        return runtime.send(.stringWithCString_encoding_, try runtime.class("NSString"), .{ utf8, utf8_string_encoding }) orelse
            fail(error.OutOfMemory, "out of memory creating an NSString", .{});
    }

    /// The UTF-8 text of an NSString (borrowed, valid in the current pool), or "".
    pub fn text(runtime: *const Runtime, ns_string: ?Id) []const u8 {
        const s = ns_string orelse return "";
        return std.mem.span(runtime.send(.UTF8String, s, .{}) orelse return "");
    }

    /// The localized description of an NSError, or "no error object".
    pub fn errorText(runtime: *const Runtime, ns_error: ?Id) []const u8 {
        const e = ns_error orelse return "no error object";
        return runtime.text(runtime.send(.localizedDescription, e, .{}));
    }

    pub fn release(runtime: *const Runtime, object: Id) void {
        runtime.send(.release, object, .{});
    }
};

fn ReturnOf(comptime message: Message) type {
    const Pointer = @typeInfo(Messages).@"struct".field_types[@backingInt(message)];
    return @typeInfo(@typeInfo(Pointer).pointer.child).@"fn".return_type.?;
}

/// An autorelease pool around every backend call that touches Objective-C: any thread
/// may call lmhead, so there is no long-lived pool.
pub const Pool = struct {
    token: ?*anyopaque,
    runtime: *const Runtime,

    pub fn push(runtime: *const Runtime) Pool {
        return .{ .token = runtime.poolPush(), .runtime = runtime };
    }

    pub fn pop(pool: Pool) void {
        pool.runtime.poolPop(pool.token);
    }
};

/// Substituted by tests (the fake runtime); null means the system's, loaded once.
pub var override: ?*const Runtime = null;
var system: Runtime = undefined;
var system_lock: std.c.pthread_mutex_t = .{};
var system_state: enum { unloaded, loaded, failed } = .unloaded;
var system_error: []const u8 = "";

/// The runtime the backend uses.
pub fn current() Error!*const Runtime {
    if (override) |r| return r;
    if (builtin.os.tag != .macos) return fail(error.Unsupported, "Metal needs macOS on Apple silicon; this library was built for {s}", .{@tagName(builtin.os.tag)});
    _ = std.c.pthread_mutex_lock(&system_lock);
    defer _ = std.c.pthread_mutex_unlock(&system_lock);
    if (system_state == .unloaded) {
        if (loadSystem(&system)) |e| {
            system_error = e;
            system_state = .failed;
        } else system_state = .loaded;
    }
    if (system_state == .failed) return fail(error.Unsupported, "Metal is unavailable: {s}", .{system_error});
    return &system;
}

const libobjc_path = "/usr/lib/libobjc.A.dylib";
const metal_path = "/System/Library/Frameworks/Metal.framework/Metal";
const foundation_path = "/System/Library/Frameworks/Foundation.framework/Foundation";
/// Apple: command-line tools need CoreGraphics loaded for MTLCreateSystemDefaultDevice.
const core_graphics_path = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics";

/// Loads the system's runtime into `r`; returns what is missing, or null.
fn loadSystem(r: *Runtime) ?[]const u8 {
    const objc = std.c.dlopen(libobjc_path, .{ .NOW = true }) orelse return "cannot load " ++ libobjc_path;
    const metal = std.c.dlopen(metal_path, .{ .NOW = true }) orelse return "cannot load " ++ metal_path;
    _ = std.c.dlopen(foundation_path, .{ .NOW = true }) orelse return "cannot load " ++ foundation_path;
    _ = std.c.dlopen(core_graphics_path, .{ .NOW = true }) orelse return "cannot load " ++ core_graphics_path;
    const msg_send = std.c.dlsym(objc, "objc_msgSend") orelse return "libobjc has no objc_msgSend";
    r.* = .{
        .getClass = symbol(@FieldType(Runtime, "getClass"), objc, "objc_getClass") orelse return "libobjc has no objc_getClass",
        .registerName = symbol(@FieldType(Runtime, "registerName"), objc, "sel_registerName") orelse return "libobjc has no sel_registerName",
        .poolPush = symbol(@FieldType(Runtime, "poolPush"), objc, "objc_autoreleasePoolPush") orelse return "libobjc has no objc_autoreleasePoolPush",
        .poolPop = symbol(@FieldType(Runtime, "poolPop"), objc, "objc_autoreleasePoolPop") orelse return "libobjc has no objc_autoreleasePoolPop",
        .createSystemDefaultDevice = symbol(@FieldType(Runtime, "createSystemDefaultDevice"), metal, "MTLCreateSystemDefaultDevice") orelse return "Metal has no MTLCreateSystemDefaultDevice",
        .messages = undefined,
    };
    inline for (@typeInfo(Messages).@"struct".field_names) |field| @field(r.messages, field) = @ptrCast(@alignCast(msg_send));
    r.registerSelectors() catch return "a selector could not be registered";
    return null;
}

fn symbol(comptime F: type, library: *anyopaque, name: [*:0]const u8) ?F {
    return @ptrCast(@alignCast(std.c.dlsym(library, name) orelse return null));
}

test "selector names: one colon per argument" {
    try std.testing.expectEqualStrings("newBufferWithBytesNoCopy:length:options:deallocator:", selectorName(.newBufferWithBytesNoCopy_length_options_deallocator_));
    try std.testing.expectEqualStrings("commit", selectorName(.commit));
    inline for (comptime std.enums.values(Message)) |m| {
        const Pointer = @typeInfo(Messages).@"struct".field_types[@backingInt(m)];
        const params = @typeInfo(@typeInfo(Pointer).pointer.child).@"fn".param_types;
        try std.testing.expectEqual(params.len - 2, std.mem.count(u8, selectorName(m), ":"));
    }
}

/// The C type the ABI sees for a Zig parameter or return type of a prototype, spelled as
/// scripts/make_metal_selectors.py normalizes metal-cpp's. A BOOL parameter is u32 (the
/// caller widens it); an optional opaque parameter is a block, always passed nil.
fn cType(comptime T: type, comptime parameter: bool) []const u8 {
    return switch (T) {
        void => "void",
        bool => "bool",
        u32 => if (parameter) "bool" else "u32",
        usize => "NSUInteger",
        isize => "NSInteger",
        f64 => "double",
        Size => "MTLSize",
        Sel => "SEL",
        Id, ?Id => "id",
        *?Id => "id*",
        [*:0]const u8, ?[*:0]const u8 => "char*",
        *anyopaque, *const anyopaque => "void*",
        ?*anyopaque => if (parameter) "block" else "void*",
        else => @compileError("no C type for " ++ @typeName(T)),
    };
}

/// The fixture line of a message: "message<TAB>class<TAB>selector<TAB>return<TAB>arguments".
fn fixtureLine(comptime message: Message) []const u8 {
    return comptime blk: {
        const Pointer = @typeInfo(Messages).@"struct".field_types[@backingInt(message)];
        const function = @typeInfo(@typeInfo(Pointer).pointer.child).@"fn";
        var arguments: []const u8 = "";
        for (function.param_types[2..], 0..) |P, i| arguments = arguments ++ (if (i > 0) "," else "") ++ cType(P.?, true);
        break :blk "message\t" ++ declaringClass(message) ++ "\t" ++ selectorName(message) ++ "\t" ++ cType(function.return_type.?, false) ++ "\t" ++ arguments ++ "\n";
    };
}

test "every class and message prototype the backend uses is Apple's (metal-cpp headers)" {
    const fixture = @embedFile("metal_selectors_fixture");
    for (classes) |c| {
        var line: [64]u8 = undefined;
        const want = try std.fmt.bufPrint(&line, "\nclass\t{s}\n", .{c});
        if (std.mem.indexOf(u8, fixture, want) == null) {
            std.debug.print("class {s} is not in metal-cpp\n", .{c});
            return error.TestUnexpectedResult;
        }
    }
    var missing: u32 = 0;
    inline for (comptime std.enums.values(Message)) |m| {
        if (std.mem.indexOf(u8, fixture, comptime "\n" ++ fixtureLine(m)) == null) {
            std.debug.print("not in metal-cpp: {s}", .{fixtureLine(m)});
            missing += 1;
        }
    }
    try std.testing.expectEqual(@as(u32, 0), missing);
}
