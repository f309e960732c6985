//! A model file, mapped read-only: open(O_RDONLY) and mmap(PROT_READ, MAP_SHARED), so a file
//! the process cannot write (read-only mode or mount, another user's cache) still loads, and
//! nothing written through the mapping can ever reach the file.
//!
//! Refcounted: the handle holds one reference and every buffer over the mapping one more; the
//! last release unmaps the file and closes its descriptor. The descriptor stays open so that
//! `checkUnchanged` can compare the file with what fstat said at open: truncating a mapped
//! file makes a read of its lost pages kill the process (SIGBUS), and rewriting it in place
//! changes the weights under a running model. Replacing the file by rename is safe: the
//! descriptor and the mapping keep the old file.
const std = @import("std");
const status = @import("status.zig");
const handles = @import("handles.zig");
const Error = status.Error;
const fail = status.fail;
const posix = std.posix;

/// Longest path accepted, in bytes (the OS limit less the terminator).
pub const max_path_bytes: usize = posix.PATH_MAX - 1;

pub const File = struct {
    fd: posix.fd_t,
    /// The whole file; empty (nothing mapped) for an empty file.
    memory: []align(std.heap.page_size_min) const u8,
    /// Size and modification time at open, in bytes and nanoseconds since the epoch.
    bytes: u64,
    mtime_ns: i96,
    /// An owned copy of the path, for messages.
    path: []const u8,
    refs: std.atomic.Value(u32) = .init(1),

    pub fn open(path: []const u8) Error!*File {
        if (path.len == 0 or path.len > max_path_bytes)
            return fail(error.InvalidArgument, "path of {d} bytes outside [1, {d}]", .{ path.len, max_path_bytes });
        if (std.mem.findScalar(u8, path, 0) != null) return fail(error.InvalidArgument, "path contains a NUL byte", .{});
        // NONBLOCK: opening a FIFO must not wait for a writer; it is refused below anyway.
        const fd = posix.openat(posix.AT.FDCWD, path, .{ .ACCMODE = .RDONLY, .CLOEXEC = true, .NONBLOCK = true }, 0) catch |e|
            return fail(error.Io, "{s}", .{describeOpenError(e)});
        errdefer _ = std.c.close(fd);
        const st = try statFd(fd);
        if (st.kind != .file) return fail(error.Io, "not a regular file ({t})", .{st.kind});
        const length = std.math.cast(usize, st.size) orelse return fail(error.Io, "cannot map a file of {d} bytes on this machine", .{st.size});
        const memory: []align(std.heap.page_size_min) const u8 = if (length == 0) &.{} else posix.mmap(null, length, .{ .READ = true }, .{ .TYPE = .SHARED }, fd, 0) catch |e|
            return fail(error.Io, "cannot map {d} bytes: {t}", .{ length, e });
        errdefer if (memory.len > 0) posix.munmap(memory);
        const allocator = std.heap.c_allocator;
        const path_copy = allocator.dupe(u8, path) catch return fail(error.OutOfMemory, "out of memory opening a file", .{});
        errdefer allocator.free(path_copy);
        const file = allocator.create(File) catch return fail(error.OutOfMemory, "out of memory opening a file", .{});
        file.* = .{ .fd = fd, .memory = memory, .bytes = st.size, .mtime_ns = st.mtime.nanoseconds, .path = path_copy };
        return file;
    }

    pub fn retain(file: *File) void {
        _ = file.refs.fetchAdd(1, .monotonic);
    }

    pub fn release(file: *File) void {
        if (file.refs.fetchSub(1, .acq_rel) != 1) return;
        if (file.memory.len > 0) posix.munmap(file.memory);
        _ = std.c.close(file.fd);
        std.heap.c_allocator.free(file.path);
        std.heap.c_allocator.destroy(file);
    }

    /// Fails, with a message that says what changed, if the file's size or modification time
    /// differ from those at open: it was truncated or rewritten in place, so its mapped bytes
    /// are no longer the weights that were loaded and reading them may kill the process.
    pub fn checkUnchanged(file: *File) Error!void {
        const st = try statFd(file.fd);
        const advice = "model files must be replaced by rename, never rewritten in place (or load with copy: true)";
        if (st.size != file.bytes)
            return fail(error.Io, "{s}: the file is now {d} bytes, it was {d} when loaded: it was truncated or rewritten in place; " ++ advice, .{ file.path, st.size, file.bytes });
        if (st.mtime.nanoseconds != file.mtime_ns)
            return fail(error.Io, "{s}: the file was modified in place after it was loaded (its mtime changed); " ++ advice, .{file.path});
    }

    /// Bytes [offset_bytes, offset_bytes + bytes) of the mapping, after checking the range.
    pub fn range(file: *File, offset_bytes: u64, bytes: u64) Error![]const u8 {
        const end = std.math.add(u64, offset_bytes, bytes) catch return fail(error.Overflow, "file range {d} + {d} bytes overflows", .{ offset_bytes, bytes });
        if (end > file.memory.len) return fail(error.OutOfBounds, "file range [{d}, {d}) past the file's {d} bytes", .{ offset_bytes, end, file.memory.len });
        return file.memory[@intCast(offset_bytes)..@intCast(end)];
    }
};

fn statFd(fd: posix.fd_t) Error!std.Io.File.Stat {
    // The library has no Io of its own to be given; stat on a descriptor needs no concurrency.
    const io = std.Io.Threaded.global_single_threaded.io();
    const file: std.Io.File = .{ .handle = fd, .flags = .{ .nonblocking = true } };
    return file.stat(io) catch |e| fail(error.Io, "cannot stat the file: {t}", .{e});
}

fn describeOpenError(e: posix.OpenError) []const u8 {
    return switch (e) {
        error.FileNotFound => "no such file (ENOENT)",
        error.AccessDenied, error.PermissionDenied => "permission denied",
        error.IsDir => "not a regular file (directory)",
        error.NotDir => "a component of the path is not a directory",
        error.NameTooLong => "path too long",
        error.SymLinkLoop => "too many symbolic links",
        error.ProcessFdQuotaExceeded, error.SystemFdQuotaExceeded => "too many open files",
        else => @errorName(e),
    };
}

pub var files: handles.Table(File, .file, 4096) = .{};

test "a file maps read-only, reports changes in place, and refuses what is not a regular file" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    try tmp.dir.writeFile(io, .{ .sub_path = "m.gguf", .data = "0123456789" });
    var dir_buffer: [posix.PATH_MAX]u8 = undefined;
    const dir_path = dir_buffer[0..try tmp.dir.realPath(io, &dir_buffer)];
    var path_buffer: [posix.PATH_MAX]u8 = undefined;
    const path = path_buffer[0..try tmp.dir.realPathFile(io, "m.gguf", &path_buffer)];

    const file = try File.open(path);
    defer file.release();
    try std.testing.expectEqualStrings("0123456789", file.memory);
    try std.testing.expectEqualStrings("234", try file.range(2, 3));
    try std.testing.expectError(error.OutOfBounds, file.range(8, 3));
    try std.testing.expectError(error.Overflow, file.range(std.math.maxInt(u64), 1));
    try file.checkUnchanged();

    // Truncated in place: refused, naming both sizes.
    const handle = try tmp.dir.openFile(io, "m.gguf", .{ .mode = .read_write });
    try handle.setLength(io, 4);
    handle.close(io);
    try std.testing.expectError(error.Io, file.checkUnchanged());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "now 4 bytes, it was 10") != null);

    try std.testing.expectError(error.Io, File.open(dir_path));
    try std.testing.expectError(error.InvalidArgument, File.open("a\x00b"));
    try std.testing.expectError(error.InvalidArgument, File.open(""));
}
