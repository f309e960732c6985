//! Status codes of the C ABI and the per-thread last-error message.
//! Every entry point returns a Status; on failure the message says what was wrong, with numbers.
const std = @import("std");

pub const Status = enum(i32) {
    ok = 0,
    invalid_argument = 1,
    bad_handle = 2,
    out_of_bounds = 3,
    overflow = 4,
    out_of_memory = 5,
    unsupported = 6,
    busy = 7,
    backend = 8,
    /// A file could not be opened or mapped, or changed under its mapping.
    io = 9,
};

/// The error set every native function uses internally; `fail` maps each to a Status.
pub const Error = error{ InvalidArgument, BadHandle, OutOfBounds, Overflow, OutOfMemory, Unsupported, Busy, Backend, Io };

pub fn status(err: Error) Status {
    return switch (err) {
        error.InvalidArgument => .invalid_argument,
        error.BadHandle => .bad_handle,
        error.OutOfBounds => .out_of_bounds,
        error.Overflow => .overflow,
        error.OutOfMemory => .out_of_memory,
        error.Unsupported => .unsupported,
        error.Busy => .busy,
        error.Backend => .backend,
        error.Io => .io,
    };
}

const message_capacity_bytes = 512;
threadlocal var message_buffer: [message_capacity_bytes]u8 = undefined;
threadlocal var message_len: usize = 0;

/// Records the message for this thread and returns `err`, so call sites read
/// `return fail(error.OutOfBounds, "write of {d} bytes at {d} past {d}", .{...})`.
pub fn fail(err: Error, comptime fmt: []const u8, args: anytype) Error {
    const text = std.fmt.bufPrint(&message_buffer, fmt, args) catch blk: {
        // Truncated messages still say what happened; mark the cut.
        const tail = "...";
        @memcpy(message_buffer[message_capacity_bytes - tail.len ..], tail);
        break :blk message_buffer[0..];
    };
    message_len = text.len;
    return err;
}

pub fn clear() void {
    message_len = 0;
}

pub fn message() []const u8 {
    return message_buffer[0..message_len];
}

test "fail keeps the formatted message per thread" {
    const e = fail(error.OutOfBounds, "offset {d} past {d}", .{ 9, 8 });
    try std.testing.expectEqual(error.OutOfBounds, e);
    try std.testing.expectEqualStrings("offset 9 past 8", message());
    try std.testing.expectEqual(Status.out_of_bounds, status(e));
}
