//! Support for the tests that call the C ABI (root.zig's exports) as a user of liblmhead
//! would.
const std = @import("std");
const status = @import("core/status.zig");

/// Fails the test on a nonzero status, printing lmhead's message for it.
pub fn ok(rc: i32) !void {
    if (rc == 0) return;
    std.debug.print("status {d}: {s}\n", .{ rc, status.message() });
    return error.TestUnexpectedStatus;
}
