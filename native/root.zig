const std = @import("std");
export fn lmh_version() u32 {
    return 1;
}
test "version" {
    try std.testing.expectEqual(@as(u32, 1), lmh_version());
}
