//! Pinned host memory: a range of host memory the caller keeps alive that a device has
//! page-locked, so that copies between it and the device run at the bus's rate (a GPU's
//! readback of logits). The pin holds a reference on its device, so the memory is unpinned
//! before the device can go; where the device addresses host memory itself it is a no-op.
const std = @import("std");
const status = @import("status.zig");
const Device = @import("device.zig").Device;
const max_buffer_bytes = @import("buffer.zig").max_buffer_bytes;
const Error = status.Error;
const fail = status.fail;

pub const Pin = struct {
    device: *Device,
    host: [*]u8,
    bytes: u64,
    /// One reference for the handle, one per call using it.
    refs: std.atomic.Value(u32) = .init(1),

    /// Pins [host, host + bytes). The caller keeps that memory alive until the pin is released.
    pub fn create(device: *Device, host: ?[*]u8, bytes: u64) Error!*Pin {
        const base = host orelse return fail(error.InvalidArgument, "null host pointer", .{});
        if (bytes == 0) return fail(error.InvalidArgument, "pin of 0 bytes", .{});
        if (bytes > max_buffer_bytes) return fail(error.OutOfBounds, "pin of {d} bytes exceeds the limit of {d}", .{ bytes, max_buffer_bytes });
        _ = std.math.add(usize, @intFromPtr(base), @intCast(bytes)) catch
            return fail(error.Overflow, "host range at 0x{x} + {d} bytes overflows the address space", .{ @intFromPtr(base), bytes });
        const pin = std.heap.c_allocator.create(Pin) catch return fail(error.OutOfMemory, "out of memory", .{});
        errdefer std.heap.c_allocator.destroy(pin);
        try device.pinHost(base, bytes);
        device.retain();
        pin.* = .{ .device = device, .host = base, .bytes = bytes };
        return pin;
    }

    pub fn retain(pin: *Pin) void {
        const before = pin.refs.fetchAdd(1, .monotonic);
        std.debug.assert(before > 0);
    }

    pub fn release(pin: *Pin) void {
        const before = pin.refs.fetchSub(1, .acq_rel);
        std.debug.assert(before > 0);
        if (before != 1) return;
        pin.device.unpinHost(pin.host);
        pin.device.release();
        std.heap.c_allocator.destroy(pin);
    }
};

const handles = @import("handles.zig");
pub var pins: handles.Table(Pin, .pin, 1024) = .{};

test "a pin checks its range before the device sees it, and holds the device until released" {
    const device = try Device.open(.cpu);
    defer device.release();
    var memory: [64]u8 = undefined;
    try std.testing.expectError(error.InvalidArgument, Pin.create(device, null, 16));
    try std.testing.expectError(error.InvalidArgument, Pin.create(device, &memory, 0));
    try std.testing.expectError(error.OutOfBounds, Pin.create(device, &memory, max_buffer_bytes + 1));
    const top: [*]u8 = @ptrFromInt(std.math.maxInt(usize) - 15);
    try std.testing.expectError(error.Overflow, Pin.create(device, top, 32));
    const pin = try Pin.create(device, &memory, memory.len);
    try std.testing.expectEqual(2, device.refs.load(.monotonic));
    pin.release();
    try std.testing.expectEqual(1, device.refs.load(.monotonic));
}
