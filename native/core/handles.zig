//! Handles that cross the C ABI. A handle is (kind, generation, slot), so a freed,
//! double-freed, forged or wrong-kind handle is detected instead of dereferenced.
//!
//! Bounds: 16 slot bits and 44 generation bits. A slot whose generation is used up is
//! retired rather than reused, so a stale handle can never name a live object, however
//! long the process runs (one slot lasts 2^44 alloc/free cycles: months at a million a
//! second). A call holds a reference on the object it acquired until it returns, so a
//! free on another thread meanwhile only drops the handle's reference.
const std = @import("std");
const status = @import("status.zig");
const Error = status.Error;
const fail = status.fail;

pub const Kind = enum(u4) { device = 1, buffer = 2, session = 3, file = 4, pin = 5 };

pub const Handle = u64;

const slot_bits = 16;
const generation_bits = 44;
const kind_bits = @bitSizeOf(Kind);
comptime {
    std.debug.assert(kind_bits + generation_bits + slot_bits == 64);
}
const max_generation: u64 = (1 << generation_bits) - 1;

fn pack(kind: Kind, generation: u64, slot: u32) Handle {
    std.debug.assert(generation >= 1 and generation <= max_generation and slot < 1 << slot_bits);
    return (@as(u64, @backingInt(kind)) << (64 - kind_bits)) | (generation << slot_bits) | slot;
}

/// A table of objects of type T, which has `retain()` and `release()`.
pub fn Table(comptime T: type, comptime kind: Kind, comptime capacity: u32) type {
    comptime std.debug.assert(capacity >= 1 and capacity <= 1 << slot_bits);
    return struct {
        const Self = @This();
        const Slot = struct { generation: u64 = 0, object: ?*T = null };

        slots: [capacity]Slot = @splat(.{}),
        /// Freed slots, reused oldest first (a FIFO ring), so reuse is spread over all slots.
        free_ring: [capacity]u32 = undefined,
        free_head: u32 = 0,
        free_count: u32 = 0,
        /// Slots handed out at least once; [used, capacity) were never used.
        used: u32 = 0,
        lock: std.c.pthread_mutex_t = .{},

        /// Takes over one reference of `object` (the handle's) and returns its handle.
        pub fn insert(self: *Self, object: *T) Error!Handle {
            _ = std.c.pthread_mutex_lock(&self.lock);
            defer _ = std.c.pthread_mutex_unlock(&self.lock);
            const index: u32 = if (self.used < capacity) blk: {
                self.used += 1;
                break :blk self.used - 1;
            } else if (self.free_count > 0) blk: {
                const i = self.free_ring[self.free_head];
                self.free_head = (self.free_head + 1) % capacity;
                self.free_count -= 1;
                break :blk i;
            } else return fail(error.OutOfMemory, "too many live {s} handles (limit {d})", .{ @tagName(kind), capacity });
            const slot = &self.slots[index];
            std.debug.assert(slot.object == null and slot.generation < max_generation);
            slot.generation += 1;
            slot.object = object;
            return pack(kind, slot.generation, index);
        }

        /// The object, with one more reference that the caller releases when done with it.
        pub fn acquire(self: *Self, handle: Handle) Error!*T {
            _ = std.c.pthread_mutex_lock(&self.lock);
            defer _ = std.c.pthread_mutex_unlock(&self.lock);
            const object = (try self.slotOf(handle)).object.?;
            object.retain();
            return object;
        }

        /// Removes the handle and hands its reference to the caller, who releases it.
        pub fn remove(self: *Self, handle: Handle) Error!*T {
            _ = std.c.pthread_mutex_lock(&self.lock);
            defer _ = std.c.pthread_mutex_unlock(&self.lock);
            const slot = try self.slotOf(handle);
            const object = slot.object.?;
            slot.object = null;
            const index: u32 = @intCast(handle & ((1 << slot_bits) - 1));
            if (slot.generation < max_generation) {
                self.free_ring[(self.free_head + self.free_count) % capacity] = index;
                self.free_count += 1;
            } // else: the slot is retired, so its last handle can never come back.
            return object;
        }

        fn slotOf(self: *Self, handle: Handle) Error!*Slot {
            const handle_kind = handle >> (64 - kind_bits);
            const generation = (handle >> slot_bits) & max_generation;
            const index = handle & ((1 << slot_bits) - 1);
            if (handle_kind != @backingInt(kind)) {
                return fail(error.BadHandle, "handle 0x{x} is not a {s} handle", .{ handle, @tagName(kind) });
            }
            if (index >= self.used or self.slots[index].object == null or self.slots[index].generation != generation) {
                return fail(error.BadHandle, "{s} handle 0x{x} is closed or was never opened", .{ @tagName(kind), handle });
            }
            return &self.slots[index];
        }
    };
}

const Dummy = struct {
    refs: u32 = 1,
    fn retain(d: *Dummy) void {
        d.refs += 1;
    }
    fn release(d: *Dummy) void {
        d.refs -= 1;
    }
};

test "stale, double-freed and wrong-kind handles are rejected" {
    var table: Table(Dummy, .buffer, 4) = .{};
    var a: Dummy = .{};
    const h = try table.insert(&a);
    const got = try table.acquire(h);
    try std.testing.expectEqual(&a, got);
    try std.testing.expectEqual(@as(u32, 2), a.refs);
    got.release();
    _ = try table.remove(h);
    try std.testing.expectError(error.BadHandle, table.acquire(h));
    try std.testing.expectError(error.BadHandle, table.remove(h));
    const h2 = try table.insert(&a);
    try std.testing.expect(h2 != h);
    try std.testing.expectError(error.BadHandle, table.acquire(h));
    const other_kind = (h2 & ~(@as(u64, 0xF) << 60)) | (@as(u64, @backingInt(Kind.device)) << 60);
    try std.testing.expectError(error.BadHandle, table.acquire(other_kind));
    try std.testing.expectError(error.BadHandle, table.acquire(0));
}

test "freed slots are reused oldest first, and an exhausted slot is retired" {
    var table: Table(Dummy, .buffer, 2) = .{};
    var a: Dummy = .{};
    const h0 = try table.insert(&a);
    const h1 = try table.insert(&a);
    _ = try table.remove(h0);
    _ = try table.remove(h1);
    // Slot 0 was freed first, so it comes back first; give it its last generation.
    table.slots[0].generation = max_generation - 1;
    const last = try table.insert(&a);
    try std.testing.expectEqual(@as(u64, 0), last & 0xFFFF);
    _ = try table.remove(last); // retired: its handle can never come back
    const h1_again = try table.insert(&a);
    try std.testing.expectEqual(@as(u64, 1), h1_again & 0xFFFF);
    try std.testing.expectError(error.OutOfMemory, table.insert(&a));
    try std.testing.expectError(error.BadHandle, table.acquire(last));
}
