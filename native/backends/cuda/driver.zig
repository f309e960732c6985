//! The CUDA driver API (libcuda.so.1) and NVRTC, loaded with dlopen when a CUDA device
//! opens, so the library builds and runs on machines without them. Only the entry points
//! the backend calls are bound; a missing library or symbol is a clear error naming it.
const std = @import("std");
const status = @import("../../core/status.zig");
const Error = status.Error;
const fail = status.fail;

pub const Result = c_int;
/// CUDA_ERROR_NO_DEVICE: the driver is there but sees no GPU.
pub const result_no_device: Result = 100;
/// CUDA_ERROR_OUT_OF_MEMORY.
pub const result_out_of_memory: Result = 2;
pub const Device = c_int;
pub const Context = ?*anyopaque;
pub const Stream = ?*anyopaque;
pub const Module = ?*anyopaque;
pub const Function = ?*anyopaque;
pub const Event = ?*anyopaque;
pub const DevicePointer = u64;

pub const attribute_multiprocessor_count: c_int = 16;
pub const attribute_compute_capability_major: c_int = 75;
pub const attribute_compute_capability_minor: c_int = 76;
pub const attribute_max_shared_memory_per_block_optin: c_int = 97;
pub const function_attribute_static_shared_bytes: c_int = 1;
pub const function_attribute_max_dynamic_shared_bytes: c_int = 8;
pub const stream_non_blocking: c_uint = 1;
pub const host_register_portable: c_uint = 1;

/// The driver API entry points the backend uses, by the names libcuda exports.
pub const Cuda = struct {
    cuInit: *const fn (c_uint) callconv(.c) Result,
    cuDriverGetVersion: *const fn (*c_int) callconv(.c) Result,
    cuGetErrorString: *const fn (Result, *?[*:0]const u8) callconv(.c) Result,
    cuDeviceGetCount: *const fn (*c_int) callconv(.c) Result,
    cuDeviceGet: *const fn (*Device, c_int) callconv(.c) Result,
    cuDeviceGetName: *const fn ([*]u8, c_int, Device) callconv(.c) Result,
    cuDeviceGetAttribute: *const fn (*c_int, c_int, Device) callconv(.c) Result,
    cuDevicePrimaryCtxRetain: *const fn (*Context, Device) callconv(.c) Result,
    cuDevicePrimaryCtxRelease_v2: *const fn (Device) callconv(.c) Result,
    cuCtxSetCurrent: *const fn (Context) callconv(.c) Result,
    cuStreamCreate: *const fn (*Stream, c_uint) callconv(.c) Result,
    cuStreamDestroy_v2: *const fn (Stream) callconv(.c) Result,
    cuStreamSynchronize: *const fn (Stream) callconv(.c) Result,
    cuMemAlloc_v2: *const fn (*DevicePointer, usize) callconv(.c) Result,
    cuMemFree_v2: *const fn (DevicePointer) callconv(.c) Result,
    cuMemAllocHost_v2: *const fn (*?*anyopaque, usize) callconv(.c) Result,
    cuMemFreeHost: *const fn (?*anyopaque) callconv(.c) Result,
    cuMemHostRegister_v2: *const fn (?*anyopaque, usize, c_uint) callconv(.c) Result,
    cuMemHostUnregister: *const fn (?*anyopaque) callconv(.c) Result,
    cuMemsetD8Async: *const fn (DevicePointer, u8, usize, Stream) callconv(.c) Result,
    cuMemcpyHtoDAsync_v2: *const fn (DevicePointer, ?*const anyopaque, usize, Stream) callconv(.c) Result,
    cuMemcpyDtoHAsync_v2: *const fn (?*anyopaque, DevicePointer, usize, Stream) callconv(.c) Result,
    cuModuleLoadData: *const fn (*Module, ?*const anyopaque) callconv(.c) Result,
    cuModuleUnload: *const fn (Module) callconv(.c) Result,
    cuModuleGetFunction: *const fn (*Function, Module, [*:0]const u8) callconv(.c) Result,
    cuFuncGetAttribute: *const fn (*c_int, c_int, Function) callconv(.c) Result,
    cuFuncSetAttribute: *const fn (Function, c_int, c_int) callconv(.c) Result,
    cuOccupancyMaxActiveBlocksPerMultiprocessor: *const fn (*c_int, Function, c_int, usize) callconv(.c) Result,
    cuLaunchKernel: *const fn (Function, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Stream, ?[*]const ?*anyopaque, ?[*]const ?*anyopaque) callconv(.c) Result,
    cuEventCreate: *const fn (*Event, c_uint) callconv(.c) Result,
    cuEventDestroy_v2: *const fn (Event) callconv(.c) Result,
    cuEventRecord: *const fn (Event, Stream) callconv(.c) Result,
    cuEventSynchronize: *const fn (Event) callconv(.c) Result,
    cuEventElapsedTime: *const fn (*f32, Event, Event) callconv(.c) Result,

    /// `what` failed with driver status `result`: the error, with the driver's own words.
    pub fn check(cuda: *const Cuda, result: Result, comptime what: []const u8) Error!void {
        if (result == 0) return;
        var text: ?[*:0]const u8 = null;
        _ = cuda.cuGetErrorString(result, &text);
        const words: []const u8 = if (text) |t| std.mem.span(t) else "unknown error";
        const err: Error = if (result == result_out_of_memory) error.OutOfMemory else error.Backend;
        return fail(err, "CUDA " ++ what ++ " failed: {s} (CUresult {d})", .{ words, result });
    }
};

/// NVRTC entry points.
pub const Nvrtc = struct {
    nvrtcVersion: *const fn (*c_int, *c_int) callconv(.c) c_int,
    nvrtcGetErrorString: *const fn (c_int) callconv(.c) [*:0]const u8,
    nvrtcCreateProgram: *const fn (*?*anyopaque, [*:0]const u8, ?[*:0]const u8, c_int, ?[*]const [*:0]const u8, ?[*]const [*:0]const u8) callconv(.c) c_int,
    nvrtcDestroyProgram: *const fn (*?*anyopaque) callconv(.c) c_int,
    nvrtcCompileProgram: *const fn (?*anyopaque, c_int, [*]const [*:0]const u8) callconv(.c) c_int,
    nvrtcGetProgramLogSize: *const fn (?*anyopaque, *usize) callconv(.c) c_int,
    nvrtcGetProgramLog: *const fn (?*anyopaque, [*]u8) callconv(.c) c_int,
    nvrtcGetCUBINSize: *const fn (?*anyopaque, *usize) callconv(.c) c_int,
    nvrtcGetCUBIN: *const fn (?*anyopaque, [*]u8) callconv(.c) c_int,
};

/// Fills every field of `T` from the library by the field's name.
fn bind(comptime T: type, library: *anyopaque, comptime library_name: []const u8, path: []const u8) Error!T {
    var table: T = undefined;
    inline for (@typeInfo(T).@"struct".field_names) |field_name| {
        // A newer driver may export only the versioned name of an entry point.
        const symbol = std.c.dlsym(library, field_name) orelse std.c.dlsym(library, field_name ++ "_v2") orelse
            return fail(error.Unsupported, library_name ++ " at {s} lacks {s}", .{ path, field_name });
        @field(table, field_name) = @ptrCast(@alignCast(symbol));
    }
    return table;
}

const rtld: std.c.RTLD = .{ .NOW = true, .GLOBAL = false };

/// libcuda.so.1 through the loader's search path, or `LMHEAD_LIBCUDA` if set.
/// The library stays loaded for the process: the driver does not support unloading.
pub fn loadCuda() Error!Cuda {
    const path: [*:0]const u8 = std.c.getenv("LMHEAD_LIBCUDA") orelse "libcuda.so.1";
    const library = std.c.dlopen(path, rtld) orelse
        return fail(error.Unsupported, "the CUDA backend needs the NVIDIA driver library {s}, which could not be loaded: {s}", .{ path, dlerrorText() });
    return bind(Cuda, library, "the CUDA driver library", std.mem.span(path));
}

fn dlerrorText() []const u8 {
    return if (std.c.dlerror()) |e| std.mem.span(e) else "no reason given";
}

/// Where NVRTC is looked for, after `LMHEAD_NVRTC` (a file path) and the loader's own
/// search path: CUDA toolkits, then the `nvidia-cuda-nvrtc` Python wheels (CUDA 12 puts the
/// library in nvidia/cuda_nvrtc/lib, CUDA 13 in nvidia/cu13/lib) in the usual environments.
const nvrtc_sonames = [_][*:0]const u8{ "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so" };
const nvrtc_patterns = [_][:0]const u8{
    "/usr/local/cuda/lib64/libnvrtc.so.*[0-9]",
    "/usr/local/cuda-*/lib64/libnvrtc.so.*[0-9]",
    "/usr/local/cuda/targets/*/lib/libnvrtc.so.*[0-9]",
    "/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so.*[0-9]",
    "/opt/*/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so.*[0-9]",
    "/usr/local/lib/python3*/*-packages/nvidia/*/lib/libnvrtc.so.*[0-9]",
    "/usr/lib/python3*/*-packages/nvidia/*/lib/libnvrtc.so.*[0-9]",
    "/root/.local/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so.*[0-9]",
};
/// Environment folders (a toolkit or a Python environment) searched before the fixed places.
const nvrtc_env_patterns = [_]struct { variable: [:0]const u8, suffix: []const u8 }{
    .{ .variable = "CUDA_HOME", .suffix = "/lib64/libnvrtc.so.*[0-9]" },
    .{ .variable = "CUDA_PATH", .suffix = "/lib64/libnvrtc.so.*[0-9]" },
    .{ .variable = "VIRTUAL_ENV", .suffix = "/lib/python3*/site-packages/nvidia/*/lib/libnvrtc.so.*[0-9]" },
    .{ .variable = "CONDA_PREFIX", .suffix = "/lib/libnvrtc.so.*[0-9]" },
};

pub const LoadedNvrtc = struct { table: Nvrtc, path: [path_capacity:0]u8 };
const path_capacity = 512;

/// NVRTC from `LMHEAD_NVRTC`, else the first that loads of the places above.
pub fn loadNvrtc() Error!LoadedNvrtc {
    if (std.c.getenv("LMHEAD_NVRTC")) |path| {
        const library = std.c.dlopen(path, rtld) orelse
            return fail(error.Unsupported, "LMHEAD_NVRTC={s} could not be loaded: {s}", .{ path, dlerrorText() });
        return loaded(library, std.mem.span(path));
    }
    for (nvrtc_sonames) |name| {
        if (std.c.dlopen(name, rtld)) |library| return loaded(library, std.mem.span(name));
    }
    var pattern_buffer: [path_capacity:0]u8 = undefined;
    for (nvrtc_env_patterns) |e| {
        const base = std.c.getenv(e.variable) orelse continue;
        const pattern = std.mem.printSentinel(&pattern_buffer, "{s}{s}", .{ base, e.suffix }, 0) catch continue;
        if (try loadFirstMatch(pattern)) |l| return l;
    }
    for (nvrtc_patterns) |pattern| if (try loadFirstMatch(pattern)) |l| return l;
    return fail(error.Unsupported, "the CUDA backend needs NVRTC (libnvrtc.so, from a CUDA toolkit or the nvidia-cuda-nvrtc Python wheel), found in none of the usual places; set LMHEAD_NVRTC to its path", .{});
}

fn loaded(library: *anyopaque, path: []const u8) Error!LoadedNvrtc {
    loadBuiltinsBeside(path);
    var result: LoadedNvrtc = .{ .table = try bind(Nvrtc, library, "NVRTC", path), .path = undefined };
    const n = @min(path.len, path_capacity);
    @memcpy(result.path[0..n], path[0..n]);
    result.path[n] = 0;
    return result;
}

/// NVRTC opens its builtins (libnvrtc-builtins.so.<version>) by name when it compiles. Beside
/// a libnvrtc outside the loader's path (a Python wheel) that name is found only if those
/// builtins are loaded already: seen failing without this with the CUDA 13.0 wheel.
fn loadBuiltinsBeside(path: []const u8) void {
    const slash = std.mem.lastIndexOfScalar(u8, path, '/') orelse return;
    var pattern_buffer: [path_capacity:0]u8 = undefined;
    const pattern = std.mem.printSentinel(&pattern_buffer, "{s}/libnvrtc-builtins.so.*[0-9]", .{path[0..slash]}, 0) catch return;
    var matches: Glob = .{};
    if (glob(pattern, 0, null, &matches) != 0) return;
    defer globfree(&matches);
    for (matches.pathv.?[0..matches.pathc]) |match| if (match) |name| {
        _ = std.c.dlopen(name, rtld);
    };
}

/// glibc's glob(3): only the two fields read here are named; the rest is padding.
const Glob = extern struct {
    pathc: usize = 0,
    pathv: ?[*]?[*:0]u8 = null,
    offs: usize = 0,
    rest: [16]usize = @splat(0),
};
extern "c" fn glob(pattern: [*:0]const u8, flags: c_int, errfunc: ?*const anyopaque, result: *Glob) c_int;
extern "c" fn globfree(result: *Glob) void;

/// The last match in sorted order (the newest version) that loads, else null.
fn loadFirstMatch(pattern: [*:0]const u8) Error!?LoadedNvrtc {
    var matches: Glob = .{};
    if (glob(pattern, 0, null, &matches) != 0) return null;
    defer globfree(&matches);
    var i = matches.pathc;
    while (i > 0) {
        i -= 1;
        const path = matches.pathv.?[i] orelse continue;
        if (std.c.dlopen(path, rtld)) |library| return try loaded(library, std.mem.span(path));
    }
    return null;
}

extern "c" fn setenv(name: [*:0]const u8, value: [*:0]const u8, overwrite: c_int) c_int;
extern "c" fn unsetenv(name: [*:0]const u8) c_int;

test "a missing driver library or NVRTC is an Unsupported error that names it" {
    _ = setenv("LMHEAD_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    defer _ = unsetenv("LMHEAD_LIBCUDA");
    try std.testing.expectError(error.Unsupported, loadCuda());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "/nonexistent/libcuda.so.1") != null);

    _ = setenv("LMHEAD_NVRTC", "/nonexistent/libnvrtc.so.13", 1);
    defer _ = unsetenv("LMHEAD_NVRTC");
    try std.testing.expectError(error.Unsupported, loadNvrtc());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "LMHEAD_NVRTC=/nonexistent/libnvrtc.so.13") != null);
}

test "a library without the entry points is refused, naming the first one missing" {
    // libc is loaded in every process and exports none of the driver's functions.
    const libc = std.c.dlopen("libc.so.6", rtld) orelse return error.SkipZigTest;
    try std.testing.expectError(error.Unsupported, bind(Cuda, libc, "the CUDA driver library", "libc.so.6"));
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "lacks cuInit") != null);
}
