//! What a session tells the kernels about the rows they read: a matvec recorded right after
//! the RMS norm that wrote its input reads values already past their flush point, and says
//! so (`input_flushed`); every other input is flushed by the kernel as it reads it.
const std = @import("std");
const session_mod = @import("core/session.zig");

/// The C ABI: root.zig's exported functions, called as a user of liblmhead would.
const root = @import("root.zig");

const ok = @import("abi_testing.zig").ok;

fn alloc(device: u64, bytes: u64) !u64 {
    var buffer: u64 = 0;
    try ok(root.lmh_buffer_alloc(device, bytes, &buffer));
    return buffer;
}

/// input_flushed of the last command `session` recorded, a matvec.
fn lastFlushed(session: u64) !u32 {
    const s = try session_mod.sessions.acquire(session);
    defer s.release();
    const last = s.commands.items[s.commands.items.len - 1];
    try std.testing.expect(last == .matvec);
    return last.matvec.params.input_flushed;
}

test "a matvec reads its input as flushed only right after the norm that wrote exactly it" {
    const rows = 2;
    const hidden = 64;
    const vocab = 8;
    const q8_0 = 8;
    var device: u64 = 0;
    try ok(root.lmh_device_open(0, &device));
    defer _ = root.lmh_device_close(device);
    const x = try alloc(device, rows * hidden * 4);
    const norm = try alloc(device, hidden * 4);
    const w = try alloc(device, vocab * (hidden / 32) * 34);
    const logits = try alloc(device, rows * vocab * 4);
    const rows_bytes = rows * hidden * 4;
    const scratch = try alloc(device, 2 * rows_bytes);
    var y: u64 = 0;
    var y_later: u64 = 0;
    var y_first_row: u64 = 0;
    try ok(root.lmh_buffer_view(scratch, 0, rows_bytes, &y));
    try ok(root.lmh_buffer_view(scratch, rows_bytes, rows_bytes, &y_later));
    try ok(root.lmh_buffer_view(scratch, 0, hidden * 4, &y_first_row));
    var x_first_row: u64 = 0;
    try ok(root.lmh_buffer_view(x, 0, hidden * 4, &x_first_row));
    defer for ([_]u64{ x, norm, w, logits, scratch, y, y_later, y_first_row, x_first_row }) |b| {
        _ = root.lmh_buffer_free(b);
    };

    var session: u64 = 0;
    try ok(root.lmh_session_begin(device, &session));
    defer _ = root.lmh_session_abort(session);
    try ok(root.lmh_session_rms_norm(session, x, norm, y, rows, hidden, 1e-6));
    try ok(root.lmh_session_matvec(session, y, w, q8_0, logits, rows, hidden, vocab));
    try std.testing.expectEqual(1, try lastFlushed(session)); // a barrier stands between: still the norm's
    try ok(root.lmh_session_matvec(session, y, w, q8_0, logits, rows, hidden, vocab));
    try std.testing.expectEqual(0, try lastFlushed(session)); // the last dispatch is a matvec
    try ok(root.lmh_session_rms_norm(session, x, norm, y, rows, hidden, 1e-6));
    try ok(root.lmh_session_matvec(session, x, w, q8_0, logits, rows, hidden, vocab));
    try std.testing.expectEqual(0, try lastFlushed(session)); // another input
    try ok(root.lmh_session_rms_norm(session, x, norm, y, rows, hidden, 1e-6));
    try ok(root.lmh_session_matvec(session, y_later, w, q8_0, logits, rows, hidden, vocab));
    try std.testing.expectEqual(0, try lastFlushed(session)); // the same allocation, another place
    try ok(root.lmh_session_rms_norm(session, x_first_row, norm, y_first_row, 1, hidden, 1e-6));
    try ok(root.lmh_session_matvec(session, y, w, q8_0, logits, rows, hidden, vocab));
    try std.testing.expectEqual(0, try lastFlushed(session)); // the norm wrote one row of two
}
