//! Devices and buffers: the objects behind the ABI's handles, mirroring mlx-native's
//! MlxDevice and MlxBuffer. A buffer's memory may be owned, borrowed from the host
//! (a memory-mapped file, never copied) or a zero-copy window into another buffer.
const std = @import("std");
const status = @import("status.zig");
const handles = @import("handles.zig");
const cpu = @import("../backends/cpu.zig");
const Registry = @import("registry.zig").Registry;
const Error = status.Error;
const fail = status.fail;

pub const Kind = enum(u32) { cpu = 0, metal = 1, cuda = 2 };

/// Explicit limits: every size the ABI accepts is bounded, so products of them stay far from u64 overflow.
pub const max_buffer_bytes: u64 = 1 << 40;
pub const buffer_alignment_bytes = 64;

pub const Device = struct {
    kind: Kind,
    backend: Backend,
    registry: Registry = .{},
    refs: std.atomic.Value(u32) = .init(1),

    pub const Backend = union(Kind) { cpu: *cpu.Backend, metal: void, cuda: void };

    pub fn open(kind: Kind) Error!*Device {
        const backend: Backend = switch (kind) {
            .cpu => .{ .cpu = try cpu.Backend.create() },
            .metal => return fail(error.Unsupported, "the metal backend is not built into this library yet", .{}),
            .cuda => return fail(error.Unsupported, "the cuda backend is not built into this library yet", .{}),
        };
        const device = std.heap.c_allocator.create(Device) catch {
            backend.cpu.destroy();
            return fail(error.OutOfMemory, "out of memory opening a device", .{});
        };
        device.* = .{ .kind = kind, .backend = backend };
        return device;
    }

    pub fn retain(device: *Device) void {
        _ = device.refs.fetchAdd(1, .monotonic);
    }

    pub fn release(device: *Device) void {
        if (device.refs.fetchSub(1, .acq_rel) != 1) return;
        switch (device.backend) {
            .cpu => |b| b.destroy(),
            .metal, .cuda => unreachable,
        }
        std.heap.c_allocator.destroy(device);
    }

    /// Host threads the backend runs its work on.
    pub fn threads(device: *Device) u32 {
        return switch (device.backend) {
            .cpu => |b| b.pool.worker_count,
            .metal, .cuda => unreachable,
        };
    }

    /// A one-line description: backend, threads, SIMD width.
    pub fn describe(device: *Device, out: []u8) []const u8 {
        return switch (device.backend) {
            .cpu => |b| b.describe(out),
            .metal, .cuda => unreachable,
        };
    }
};

pub const Buffer = struct {
    device: *Device,
    bytes: u64,
    storage: Storage,
    /// One reference for the handle plus one per recorded command and per view over it.
    refs: std.atomic.Value(u32) = .init(1),
    /// Commands of unfinished sessions that use this buffer; host access is refused meanwhile.
    in_flight: std.atomic.Value(u32) = .init(0),

    pub const Storage = union(enum) {
        owned: []align(buffer_alignment_bytes) u8,
        /// Host memory the caller keeps alive (e.g. a memory-mapped file).
        borrowed: [*]u8,
        view: struct { parent: *Buffer, offset_bytes: u64 },
    };

    pub fn alloc(device: *Device, bytes: u64) Error!*Buffer {
        if (bytes == 0) return fail(error.InvalidArgument, "buffer of 0 bytes", .{});
        if (bytes > max_buffer_bytes) return fail(error.OutOfBounds, "buffer of {d} bytes exceeds the limit of {d}", .{ bytes, max_buffer_bytes });
        const memory = std.heap.c_allocator.alignedAlloc(u8, .fromByteUnits(buffer_alignment_bytes), @intCast(bytes)) catch
            return fail(error.OutOfMemory, "out of memory allocating {d} bytes", .{bytes});
        @memset(memory, 0);
        return create(device, bytes, .{ .owned = memory }) catch |e| {
            std.heap.c_allocator.free(memory);
            return e;
        };
    }

    pub fn wrap(device: *Device, memory: ?[*]u8, bytes: u64) Error!*Buffer {
        const base = memory orelse return fail(error.InvalidArgument, "null host pointer", .{});
        if (bytes == 0) return fail(error.InvalidArgument, "buffer of 0 bytes", .{});
        if (bytes > max_buffer_bytes) return fail(error.OutOfBounds, "buffer of {d} bytes exceeds the limit of {d}", .{ bytes, max_buffer_bytes });
        if (device.kind != .cpu) return fail(error.Unsupported, "wrapping host memory is not supported on {s}", .{@tagName(device.kind)});
        return create(device, bytes, .{ .borrowed = base });
    }

    pub fn view(parent: *Buffer, offset_bytes: u64, bytes: u64) Error!*Buffer {
        if (bytes == 0) return fail(error.InvalidArgument, "view of 0 bytes", .{});
        const end = std.math.add(u64, offset_bytes, bytes) catch return fail(error.Overflow, "view offset {d} + {d} bytes overflows", .{ offset_bytes, bytes });
        if (end > parent.bytes) return fail(error.OutOfBounds, "view [{d}, {d}) past the buffer's {d} bytes", .{ offset_bytes, end, parent.bytes });
        const buffer = try create(parent.device, bytes, .{ .view = .{ .parent = parent, .offset_bytes = offset_bytes } });
        parent.retain();
        return buffer;
    }

    fn create(device: *Device, bytes: u64, storage: Storage) Error!*Buffer {
        const buffer = std.heap.c_allocator.create(Buffer) catch return fail(error.OutOfMemory, "out of memory", .{});
        buffer.* = .{ .device = device, .bytes = bytes, .storage = storage };
        device.retain();
        return buffer;
    }

    pub fn retain(buffer: *Buffer) void {
        _ = buffer.refs.fetchAdd(1, .monotonic);
    }

    pub fn release(buffer: *Buffer) void {
        if (buffer.refs.fetchSub(1, .acq_rel) != 1) return;
        switch (buffer.storage) {
            .owned => |memory| std.heap.c_allocator.free(memory),
            .borrowed => {},
            .view => |v| v.parent.release(),
        }
        buffer.device.release();
        std.heap.c_allocator.destroy(buffer);
    }

    /// The allocation a buffer belongs to: barrier tracking works on whole allocations,
    /// which is conservative for views (as mlx-native's tracker is).
    pub fn root(buffer: *Buffer) *Buffer {
        var b = buffer;
        while (true) switch (b.storage) {
            .view => |v| b = v.parent,
            else => return b,
        };
    }

    /// Host-visible bytes (all CPU buffers are).
    pub fn host(buffer: *Buffer) []u8 {
        return switch (buffer.storage) {
            .owned => |memory| memory[0..@intCast(buffer.bytes)],
            .borrowed => |base| base[0..@intCast(buffer.bytes)],
            .view => |v| v.parent.host()[@intCast(v.offset_bytes)..][0..@intCast(buffer.bytes)],
        };
    }

    pub fn checkRange(buffer: *Buffer, offset_bytes: u64, bytes: u64) Error!void {
        const end = std.math.add(u64, offset_bytes, bytes) catch return fail(error.Overflow, "offset {d} + {d} bytes overflows", .{ offset_bytes, bytes });
        if (end > buffer.bytes) return fail(error.OutOfBounds, "range [{d}, {d}) past the buffer's {d} bytes", .{ offset_bytes, end, buffer.bytes });
    }

    pub fn checkIdle(buffer: *Buffer) Error!void {
        if (buffer.in_flight.load(.acquire) != 0)
            return fail(error.Busy, "buffer is used by a session that has not finished", .{});
    }

    pub fn f32s(buffer: *Buffer) []f32 {
        const bytes = buffer.host();
        return @as([*]f32, @ptrCast(@alignCast(bytes.ptr)))[0 .. bytes.len / 4];
    }
};

pub var devices: handles.Table(Device, .device, 64) = .{};
pub var buffers: handles.Table(Buffer, .buffer, 1 << 16) = .{};
