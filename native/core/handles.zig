//! Handles that cross the C ABI. A handle is (kind, generation, slot), so a freed,
//! double-freed, forged or wrong-kind handle is detected instead of dereferenced.
const std = @import("std");
const status = @import("status.zig");
const Error = status.Error;
const fail = status.fail;

pub const Kind = enum(u8) { device = 1, buffer = 2, session = 3, registry = 4 };

pub const Handle = u64;

pub fn Table(comptime T: type, comptime kind: Kind, comptime capacity: u32) type {
    return struct {
        const Self = @This();
        const Slot = struct { generation: u32 = 0, object: ?*T = null };

        slots: [capacity]Slot = @splat(.{}),
        free_count: u32 = 0,
        free_list: [capacity]u32 = undefined,
        used: u32 = 0,
        lock: std.c.pthread_mutex_t = .{},

        pub fn insert(self: *Self, object: *T) Error!Handle {
            _ = std.c.pthread_mutex_lock(&self.lock);
            defer _ = std.c.pthread_mutex_unlock(&self.lock);
            const index: u32 = if (self.free_count > 0) blk: {
                self.free_count -= 1;
                break :blk self.free_list[self.free_count];
            } else if (self.used < capacity) blk: {
                self.used += 1;
                break :blk self.used - 1;
            } else return fail(error.OutOfMemory, "too many live {s} handles (limit {d})", .{ @tagName(kind), capacity });
            const slot = &self.slots[index];
            std.debug.assert(slot.object == null);
            slot.generation = (slot.generation + 1) & 0xFF_FFFF;
            if (slot.generation == 0) slot.generation = 1;
            slot.object = object;
            return (@as(u64, @intFromEnum(kind)) << 56) | (@as(u64, slot.generation) << 32) | index;
        }

        pub fn get(self: *Self, handle: Handle) Error!*T {
            _ = std.c.pthread_mutex_lock(&self.lock);
            defer _ = std.c.pthread_mutex_unlock(&self.lock);
            const slot = try self.slotOf(handle);
            return slot.object.?;
        }

        /// Removes the handle; the caller releases the object it returns.
        pub fn remove(self: *Self, handle: Handle) Error!*T {
            _ = std.c.pthread_mutex_lock(&self.lock);
            defer _ = std.c.pthread_mutex_unlock(&self.lock);
            const slot = try self.slotOf(handle);
            const object = slot.object.?;
            slot.object = null;
            self.free_list[self.free_count] = @intCast(handle & 0xFFFF_FFFF);
            self.free_count += 1;
            return object;
        }

        fn slotOf(self: *Self, handle: Handle) Error!*Slot {
            const handle_kind: u8 = @intCast(handle >> 56);
            const generation: u32 = @intCast((handle >> 32) & 0xFF_FFFF);
            const index = handle & 0xFFFF_FFFF;
            if (handle_kind != @intFromEnum(kind)) {
                return fail(error.BadHandle, "handle 0x{x} is not a {s} handle", .{ handle, @tagName(kind) });
            }
            if (index >= self.used or self.slots[index].object == null or self.slots[index].generation != generation) {
                return fail(error.BadHandle, "{s} handle 0x{x} is closed or was never opened", .{ @tagName(kind), handle });
            }
            return &self.slots[index];
        }
    };
}

test "stale, double-freed and wrong-kind handles are rejected" {
    const Dummy = struct { x: u32 };
    var table: Table(Dummy, .buffer, 4) = .{};
    var a: Dummy = .{ .x = 1 };
    const h = try table.insert(&a);
    try std.testing.expectEqual(&a, try table.get(h));
    _ = try table.remove(h);
    try std.testing.expectError(error.BadHandle, table.get(h));
    try std.testing.expectError(error.BadHandle, table.remove(h));
    const h2 = try table.insert(&a);
    try std.testing.expect(h2 != h);
    try std.testing.expectError(error.BadHandle, table.get(h)); // reused slot, old generation
    try std.testing.expectError(error.BadHandle, table.get((h2 & ~(@as(u64, 0xFF) << 56)) | (@as(u64, 1) << 56)));
    try std.testing.expectError(error.BadHandle, table.get(0));
}
