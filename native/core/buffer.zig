//! Buffers (mlx-native's MlxBuffer): a root allocation whose memory belongs to the
//! device's backend (owned, or wrapping host memory such as a mapped file without
//! copying), or a zero-copy window of a root. A view of a view is a window of the same
//! root, so chains of views never grow deeper than one.
const std = @import("std");
const status = @import("status.zig");
const Device = @import("device.zig").Device;
const File = @import("file.zig").File;
const Error = status.Error;
const fail = status.fail;

/// Explicit limit: every size the ABI accepts is bounded, so sums and products of a few
/// of them stay far from u64 overflow.
pub const max_buffer_bytes: u64 = 1 << 40;

pub const Buffer = struct {
    device: *Device,
    bytes: u64,
    place: Place,
    /// One reference for the handle, one per call using it, per recorded command and per view.
    refs: std.atomic.Value(u32) = .init(1),
    /// Commands of unfinished sessions that use this allocation (kept on the root, so a
    /// view in flight also keeps its root and sibling views from the host).
    in_flight: std.atomic.Value(u32) = .init(0),
    /// On a root over a read-only mapped file: the file, of which the buffer holds a reference.
    file: ?*File = null,

    pub const Place = union(enum) {
        root: Device.Memory,
        view: struct { root: *Buffer, offset_bytes: u64 },
    };

    pub fn alloc(device: *Device, bytes: u64) Error!*Buffer {
        try checkSize(bytes);
        const memory = try device.alloc(bytes);
        return create(device, bytes, .{ .root = memory }) catch |e| {
            device.free(memory);
            return e;
        };
    }

    /// Wraps host memory the caller keeps alive and unchanged while the buffer lives.
    pub fn wrap(device: *Device, host: ?[*]u8, bytes: u64) Error!*Buffer {
        const base = host orelse return fail(error.InvalidArgument, "null host pointer", .{});
        try checkSize(bytes);
        const memory = try device.wrap(base, bytes);
        return create(device, bytes, .{ .root = memory }) catch |e| {
            device.free(memory);
            return e;
        };
    }

    /// Wraps [offset_bytes, offset_bytes + bytes) of a mapped file, without copying and read-only.
    pub fn wrapFile(device: *Device, file: *File, offset_bytes: u64, bytes: u64) Error!*Buffer {
        const range = try file.range(offset_bytes, bytes);
        // Backends only read a wrapped file: checkWritable refuses every writer.
        const buffer = try wrap(device, @constCast(range.ptr), bytes);
        file.retain();
        buffer.file = file;
        return buffer;
    }

    pub fn view(parent: *Buffer, offset_bytes: u64, bytes: u64) Error!*Buffer {
        if (bytes == 0) return fail(error.InvalidArgument, "view of 0 bytes", .{});
        try parent.checkRange(offset_bytes, bytes);
        const root_buffer = parent.root();
        const buffer = try create(parent.device, bytes, .{ .view = .{
            .root = root_buffer,
            .offset_bytes = parent.offsetBytes() + offset_bytes,
        } });
        root_buffer.retain();
        return buffer;
    }

    fn checkSize(bytes: u64) Error!void {
        if (bytes == 0) return fail(error.InvalidArgument, "buffer of 0 bytes", .{});
        if (bytes > max_buffer_bytes) return fail(error.OutOfBounds, "buffer of {d} bytes exceeds the limit of {d}", .{ bytes, max_buffer_bytes });
    }

    fn create(device: *Device, bytes: u64, place: Place) Error!*Buffer {
        const buffer = std.heap.c_allocator.create(Buffer) catch return fail(error.OutOfMemory, "out of memory", .{});
        buffer.* = .{ .device = device, .bytes = bytes, .place = place };
        device.retain();
        return buffer;
    }

    pub fn retain(buffer: *Buffer) void {
        const before = buffer.refs.fetchAdd(1, .monotonic);
        std.debug.assert(before > 0);
    }

    pub fn release(buffer: *Buffer) void {
        const before = buffer.refs.fetchSub(1, .acq_rel);
        std.debug.assert(before > 0);
        if (before != 1) return;
        switch (buffer.place) {
            .root => |memory| buffer.device.free(memory),
            .view => |v| v.root.release(),
        }
        if (buffer.file) |file| file.release();
        buffer.device.release();
        std.heap.c_allocator.destroy(buffer);
    }

    /// The allocation this buffer is a window of. Barrier tracking works on whole
    /// allocations, which is conservative for views (as mlx-native's tracker is).
    pub fn root(buffer: *Buffer) *Buffer {
        return switch (buffer.place) {
            .root => buffer,
            .view => |v| v.root,
        };
    }

    /// Where this buffer starts inside its root.
    pub fn offsetBytes(buffer: *const Buffer) u64 {
        return switch (buffer.place) {
            .root => 0,
            .view => |v| v.offset_bytes,
        };
    }

    fn rootMemory(buffer: *Buffer) Device.Memory {
        return buffer.root().place.root;
    }

    /// The buffer's bytes, for backends whose memory the host can address; null otherwise.
    pub fn hostBytes(buffer: *Buffer) ?[]u8 {
        const all = buffer.device.hostBytes(buffer.rootMemory()) orelse return null;
        return all[@intCast(buffer.offsetBytes())..][0..@intCast(buffer.bytes)];
    }

    /// The address of the buffer's first byte in the backend's address space.
    pub fn address(buffer: *Buffer) usize {
        return buffer.device.address(buffer.rootMemory()) + @as(usize, @intCast(buffer.offsetBytes()));
    }

    pub fn checkRange(buffer: *const Buffer, offset_bytes: u64, bytes: u64) Error!void {
        const end = std.math.add(u64, offset_bytes, bytes) catch return fail(error.Overflow, "offset {d} + {d} bytes overflows", .{ offset_bytes, bytes });
        if (end > buffer.bytes) return fail(error.OutOfBounds, "range [{d}, {d}) past the buffer's {d} bytes", .{ offset_bytes, end, buffer.bytes });
    }

    pub fn checkIdle(buffer: *Buffer) Error!void {
        if (buffer.root().in_flight.load(.acquire) != 0)
            return fail(error.Busy, "buffer is used by a session that has not finished", .{});
    }

    /// Refuses writes to a buffer over a read-only mapped file (or a view of one).
    pub fn checkWritable(buffer: *Buffer) Error!void {
        if (buffer.root().file != null) return fail(error.InvalidArgument, "buffer is a read-only view of a model file", .{});
    }

    /// Host → buffer, after the range, writable and idle checks.
    pub fn copyIn(buffer: *Buffer, offset_bytes: u64, src: []const u8) Error!void {
        try buffer.checkWritable();
        try buffer.checkRange(offset_bytes, src.len);
        try buffer.checkIdle();
        try buffer.device.copyIn(buffer.rootMemory(), buffer.offsetBytes() + offset_bytes, src);
    }

    /// Over a mapped file: fails if the file changed in place since it was opened (reading
    /// a truncated mapping would be a SIGBUS). Called before every read of file pages.
    pub fn checkFile(buffer: *Buffer) Error!void {
        if (buffer.root().file) |file| try file.checkUnchanged();
    }

    /// Buffer → host, after the range, idle and file checks.
    pub fn copyOut(buffer: *Buffer, offset_bytes: u64, dst: []u8) Error!void {
        try buffer.checkRange(offset_bytes, dst.len);
        try buffer.checkIdle();
        try buffer.checkFile();
        try buffer.device.copyOut(buffer.rootMemory(), buffer.offsetBytes() + offset_bytes, dst);
    }

    /// Marks the buffer used by one more recorded command: alive and host-inaccessible until it ends.
    pub fn enterFlight(buffer: *Buffer) void {
        buffer.retain();
        _ = buffer.root().in_flight.fetchAdd(1, .acq_rel);
    }

    pub fn leaveFlight(buffer: *Buffer) void {
        const before = buffer.root().in_flight.fetchSub(1, .acq_rel);
        std.debug.assert(before > 0);
        buffer.release();
    }
};

const handles = @import("handles.zig");
pub var buffers: handles.Table(Buffer, .buffer, 1 << 16) = .{};
