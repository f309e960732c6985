//! The kernel module: the embedded source compiled by NVRTC for the device's compute
//! capability, cached under the lmhead cache folder. The cache key is the hash of the
//! source and the compile options, the architecture and NVRTC's version, so a changed
//! kernel, option, GPU or NVRTC never loads a stale binary.
const std = @import("std");
const status = @import("../../core/status.zig");
const driver = @import("driver.zig");
const Error = status.Error;
const fail = status.fail;

const sources = @import("../../kernels/sources.zig");

/// The shared kernel source for CUDA (kernels/sources.zig), then the backend's probes.
pub const source: [:0]const u8 = sources.cuda ++ @embedFile("probes.cu");

/// The largest compiled module accepted from the cache; a larger file is a corrupt entry.
const max_cubin_bytes = 64 << 20;
const path_capacity = 1024;

pub const Options = struct {
    /// Compute capability, e.g. 90 for sm_90.
    arch: u32,
    /// `--ftz=true`: the test that flush-to-zero changes no result compiles both ways.
    ftz: bool,
    /// Launch-shape macros the host and the kernels share, as (name, value).
    defines: []const struct { []const u8, u32 },
};

pub const max_defines = 15;

/// The compiled module (a cubin), from the cache or compiled now. Caller frees it with c_allocator.
pub fn cubin(nvrtc: *const driver.Nvrtc, options: Options) Error![]u8 {
    var major: c_int = 0;
    var minor: c_int = 0;
    _ = nvrtc.nvrtcVersion(&major, &minor);
    var arch_option: [32:0]u8 = undefined;
    const arch_text = std.mem.printSentinel(&arch_option, "--gpu-architecture=sm_{d}", .{options.arch}, 0) catch unreachable;
    const ftz_text: [:0]const u8 = if (options.ftz) "--ftz=true" else "--ftz=false";
    // Warning 161: the Metal pragma every kernel source file starts with.
    var compile_options: [5 + max_defines][*:0]const u8 = .{ arch_text, "--fmad=false", ftz_text, "--std=c++17", "-diag-suppress=161" } ++ @as([max_defines][*:0]const u8, undefined);
    var define_text: [max_defines][64:0]u8 = undefined;
    std.debug.assert(options.defines.len <= max_defines);
    for (options.defines, 0..) |d, i| {
        compile_options[5 + i] = std.mem.printSentinel(&define_text[i], "-D{s}={d}u", .{ d[0], d[1] }, 0) catch unreachable;
    }
    const used = compile_options[0 .. 5 + options.defines.len];

    var hasher = std.hash.Wyhash.init(0);
    hasher.update(source);
    for (used) |o| hasher.update(std.mem.span(o));
    var path_buffer: [path_capacity:0]u8 = undefined;
    const path = cachePath(&path_buffer, hasher.final(), options.arch, major, minor);
    if (path) |p| if (readCache(p)) |cached| return cached;

    const compiled = try compile(nvrtc, used);
    if (path) |p| writeCache(p, compiled);
    return compiled;
}

fn compile(nvrtc: *const driver.Nvrtc, compile_options: []const [*:0]const u8) Error![]u8 {
    var program: ?*anyopaque = null;
    if (nvrtc.nvrtcCreateProgram(&program, source, "lmhead.cu", 0, null, null) != 0)
        return fail(error.Backend, "NVRTC could not create the kernel program", .{});
    defer _ = nvrtc.nvrtcDestroyProgram(&program);
    const compiled = nvrtc.nvrtcCompileProgram(program, @intCast(compile_options.len), compile_options.ptr);
    if (compiled != 0) {
        var log_bytes: usize = 0;
        _ = nvrtc.nvrtcGetProgramLogSize(program, &log_bytes);
        const log_shown_bytes = 400;
        const full: ?[]u8 = std.heap.c_allocator.alloc(u8, log_bytes) catch null;
        defer if (full) |f| std.heap.c_allocator.free(f);
        const shown: []const u8 = if (full) |f| blk: {
            _ = nvrtc.nvrtcGetProgramLog(program, f.ptr);
            break :blk f[0..@min(f.len -| 1, log_shown_bytes)];
        } else "(no log)";
        return fail(error.Backend, "NVRTC failed to compile the kernels ({s}): {s}", .{ std.mem.span(nvrtc.nvrtcGetErrorString(compiled)), shown });
    }
    var bytes: usize = 0;
    if (nvrtc.nvrtcGetCUBINSize(program, &bytes) != 0 or bytes == 0)
        return fail(error.Backend, "NVRTC produced no binary for the kernels", .{});
    const out = std.heap.c_allocator.alloc(u8, bytes) catch return fail(error.OutOfMemory, "out of memory for a {d}-byte module", .{bytes});
    if (nvrtc.nvrtcGetCUBIN(program, out.ptr) != 0) {
        std.heap.c_allocator.free(out);
        return fail(error.Backend, "NVRTC could not return the compiled kernels", .{});
    }
    return out;
}

/// `$LMHEAD_CACHE`, else `$XDG_CACHE_HOME/lmhead`, else `~/.cache/lmhead` (as the artifact
/// cache), then `cuda-<key>.cubin`; the folders are created. Null if no folder can be had.
fn cachePath(out: *[path_capacity:0]u8, key: u64, arch: u32, major: c_int, minor: c_int) ?[:0]const u8 {
    var folder_buffer: [path_capacity:0]u8 = undefined;
    const folder: [:0]const u8 = if (std.c.getenv("LMHEAD_CACHE")) |c|
        std.mem.span(c)
    else if (std.c.getenv("XDG_CACHE_HOME")) |x|
        std.mem.printSentinel(&folder_buffer, "{s}/lmhead", .{x}, 0) catch return null
    else if (std.c.getenv("HOME")) |h| blk: {
        const cache = std.mem.printSentinel(&folder_buffer, "{s}/.cache", .{h}, 0) catch return null;
        _ = std.c.mkdir(cache, 0o755);
        break :blk std.mem.printSentinel(&folder_buffer, "{s}/.cache/lmhead", .{h}, 0) catch return null;
    } else return null;
    _ = std.c.mkdir(folder, 0o755);
    return std.mem.printSentinel(out, "{s}/cuda-{x:0>16}-sm{d}-nvrtc{d}.{d}.cubin", .{ folder, key, arch, major, minor }, 0) catch null;
}

fn readCache(path: [:0]const u8) ?[]u8 {
    const file = std.c.fopen(path, "rb") orelse return null;
    defer _ = std.c.fclose(file);
    const buffer = std.heap.c_allocator.alloc(u8, max_cubin_bytes) catch return null;
    const n = std.c.fread(buffer.ptr, 1, buffer.len, file);
    if (n == 0 or n == buffer.len) {
        std.heap.c_allocator.free(buffer);
        return null;
    }
    return std.heap.c_allocator.realloc(buffer, n) catch buffer[0..n];
}

/// Written to a temporary name and renamed, so a reader never sees half a module. A cache
/// that cannot be written only costs the next process a compile.
fn writeCache(path: [:0]const u8, bytes: []const u8) void {
    var temporary_buffer: [path_capacity + 32:0]u8 = undefined;
    const temporary = std.mem.printSentinel(&temporary_buffer, "{s}.{d}.tmp", .{ path, std.c.getpid() }, 0) catch return;
    const file = std.c.fopen(temporary, "wb") orelse return;
    const written = std.c.fwrite(bytes.ptr, 1, bytes.len, file);
    const closed = std.c.fclose(file);
    if (written == bytes.len and closed == 0) _ = std.c.rename(temporary, path);
}

extern "c" fn setenv(name: [*:0]const u8, value: [*:0]const u8, overwrite: c_int) c_int;
extern "c" fn unsetenv(name: [*:0]const u8) c_int;

test "the module cache: LMHEAD_CACHE, else XDG_CACHE_HOME/lmhead; keyed by source, architecture and NVRTC; written whole" {
    var folder_buffer: [64]u8 = undefined;
    const folder = try std.fmt.bufPrint(&folder_buffer, "/tmp/lmhead-cuda-cache-test-{d}", .{std.c.getpid()});
    var folder_z: [64:0]u8 = undefined;
    @memcpy(folder_z[0..folder.len], folder);
    folder_z[folder.len] = 0;
    _ = setenv("LMHEAD_CACHE", &folder_z, 1);
    var path_buffer: [path_capacity:0]u8 = undefined;
    const path = cachePath(&path_buffer, 0xABCD, 90, 13, 0).?;
    try std.testing.expect(std.mem.startsWith(u8, path, folder));
    try std.testing.expect(std.mem.endsWith(u8, path, "/cuda-000000000000abcd-sm90-nvrtc13.0.cubin"));
    // Another architecture or NVRTC is another entry.
    var other_buffer: [path_capacity:0]u8 = undefined;
    try std.testing.expect(!std.mem.eql(u8, path, cachePath(&other_buffer, 0xABCD, 100, 13, 0).?));
    try std.testing.expect(!std.mem.eql(u8, path, cachePath(&other_buffer, 0xABCD, 90, 13, 1).?));
    try std.testing.expectEqual(@as(?[]u8, null), readCache(path));
    writeCache(path, "module bytes");
    defer {
        _ = std.c.unlink(path);
        _ = std.c.rmdir(&folder_z);
    }
    const back = readCache(path).?;
    defer std.heap.c_allocator.free(back);
    try std.testing.expectEqualStrings("module bytes", back);

    _ = unsetenv("LMHEAD_CACHE");
    _ = setenv("XDG_CACHE_HOME", &folder_z, 1);
    defer _ = unsetenv("XDG_CACHE_HOME");
    var xdg_buffer: [path_capacity:0]u8 = undefined;
    const xdg = cachePath(&xdg_buffer, 1, 90, 13, 0).?;
    defer _ = std.c.rmdir(std.mem.printSentinel(&other_buffer, "{s}/lmhead", .{folder}, 0) catch unreachable);
    try std.testing.expect(std.mem.startsWith(u8, xdg, folder) and std.mem.indexOf(u8, xdg, "/lmhead/cuda-") != null);
}
