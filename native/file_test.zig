//! Model files through the C ABI: a buffer over a read-only mapping is readable, keeps the
//! mapping alive after the file handle closes, and refuses every writer instead of faulting.
const std = @import("std");
const status = @import("core/status.zig");

/// The C ABI: root.zig's exported functions, called as a user of liblmhead would.
const root = @import("root.zig");

const ok = @import("abi_testing.zig").ok;

fn expectStatus(want: status.Status, rc: i32) !void {
    try std.testing.expectEqual(@backingInt(want), rc);
}

test "a buffer over a mapped file: read-only, refused as an output, alive after the file closes" {
    const io = std.testing.io;
    var tmp = std.testing.tmpDir(.{});
    defer tmp.cleanup();
    var data: [64]u8 = undefined;
    for (&data, 0..) |*b, i| b.* = @intCast(i);
    try tmp.dir.writeFile(io, .{ .sub_path = "w.bin", .data = &data });
    var path_buffer: [std.posix.PATH_MAX]u8 = undefined;
    const path = path_buffer[0..try tmp.dir.realPathFile(io, "w.bin", &path_buffer)];

    var device: u64 = 0;
    try ok(root.lmh_device_open(0, &device));
    defer _ = root.lmh_device_close(device);
    var file: u64 = 0;
    var info: [2]u64 = undefined;
    try ok(root.lmh_file_open(path.ptr, path.len, &file, &info));
    try std.testing.expectEqual(@as(u64, 64), info[0]);
    try ok(root.lmh_file_check(file));

    var buffer: u64 = 0;
    try ok(root.lmh_buffer_wrap_file(device, file, 16, 32, &buffer));
    try expectStatus(.out_of_bounds, root.lmh_buffer_wrap_file(device, file, 48, 32, &buffer));
    try expectStatus(.overflow, root.lmh_buffer_wrap_file(device, file, std.math.maxInt(u64), 2, &buffer));
    try ok(root.lmh_file_close(file));
    try expectStatus(.bad_handle, root.lmh_file_check(file));

    // The buffer still reads the file's bytes: it holds its own reference to the mapping.
    var got: [32]u8 = undefined;
    try ok(root.lmh_buffer_read(buffer, 0, &got, got.len));
    try std.testing.expectEqualSlices(u8, data[16..48], &got);

    // Writers are refused, not faulted: host writes, views of it, kernel outputs.
    try expectStatus(.invalid_argument, root.lmh_buffer_write(buffer, 0, &got, 4));
    var view: u64 = 0;
    try ok(root.lmh_buffer_view(buffer, 4, 8, &view));
    try expectStatus(.invalid_argument, root.lmh_buffer_write(view, 0, &got, 4));
    var session: u64 = 0;
    try ok(root.lmh_session_begin(device, &session));
    try expectStatus(.invalid_argument, root.lmh_session_softcap(session, buffer, 8, 30));
    const writes = [_]u64{view};
    try expectStatus(.invalid_argument, root.lmh_session_barrier_between(session, null, 0, &writes, 1));
    try ok(root.lmh_session_abort(session));
    try ok(root.lmh_buffer_free(view));
    try ok(root.lmh_buffer_free(buffer));
}

test "opening what is not a readable regular file is an io error" {
    var file: u64 = 0;
    var info: [2]u64 = undefined;
    const missing = "/nonexistent/lmhead/model.gguf";
    try expectStatus(.io, root.lmh_file_open(missing, missing.len, &file, &info));
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "no such file") != null);
    try expectStatus(.io, root.lmh_file_open("/", 1, &file, &info));
    try expectStatus(.invalid_argument, root.lmh_file_open(null, 4, &file, &info));
    try expectStatus(.invalid_argument, root.lmh_file_open("/", 1 << 20, &file, &info));
}
