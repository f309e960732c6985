//! The C ABI of liblmhead (prefix `lmh_`), called by the TypeScript layer through bun:ffi.
//!
//! Conventions, for every function below:
//! - Functions return a Status (0 = ok). On failure nothing was changed and
//!   `lmh_last_error` returns this thread's message, which names the numbers involved.
//! - Objects are u64 handles (kind, generation, slot): a closed, freed or forged handle
//!   is an error, never a dereference. Every size, offset and product is checked for
//!   range and overflow before any memory is touched.
//! - Encoding records work; `lmh_session_finish` runs it and is the only host sync point.
//!   Buffers used by an unfinished session refuse host reads and writes, and stay alive
//!   until the session ends even if their handle is freed.
const std = @import("std");
const status = @import("core/status.zig");
const device_mod = @import("core/device.zig");
const session_mod = @import("core/session.zig");
const admission = @import("core/admission.zig");
const formats = @import("numerics/formats.zig");
const cpu = @import("backends/cpu.zig");
const Error = status.Error;
const fail = status.fail;
const Device = device_mod.Device;
const Buffer = device_mod.Buffer;
const Session = session_mod.Session;

pub const abi_version: u32 = 1;

/// Runs an entry point's body and turns its error into a Status (the message is already set).
fn call(result: Error!void) i32 {
    if (result) |_| {
        status.clear();
        return @intFromEnum(status.Status.ok);
    } else |err| return @intFromEnum(status.status(err));
}

fn out(comptime T: type, pointer: ?*T) Error!*T {
    return pointer orelse fail(error.InvalidArgument, "null output pointer", .{});
}

/// ABI version; the TypeScript layer refuses a library whose version it does not know.
export fn lmh_version() u32 {
    return abi_version;
}

/// Copies this thread's last error message into dst (up to capacity bytes, no terminator)
/// and returns its full length.
export fn lmh_last_error(dst: ?[*]u8, capacity: u64) u64 {
    const text = status.message();
    if (dst) |d| {
        const n = @min(text.len, capacity);
        @memcpy(d[0..@intCast(n)], text[0..@intCast(n)]);
    }
    return text.len;
}

/// Opens a device: kind 0 = cpu, 1 = metal, 2 = cuda.
export fn lmh_device_open(kind: u32, handle_out: ?*u64) i32 {
    return call(blk: {
        const h = out(u64, handle_out) catch |e| break :blk e;
        const k = std.enums.fromInt(device_mod.Kind, kind) orelse break :blk fail(error.InvalidArgument, "unknown device kind {d}", .{kind});
        const device = Device.open(k) catch |e| break :blk e;
        h.* = device_mod.devices.insert(device) catch |e| {
            device.release();
            break :blk e;
        };
    });
}

/// Closes the handle; buffers and sessions of the device keep it alive until they end.
export fn lmh_device_close(device: u64) i32 {
    return call(if (device_mod.devices.remove(device)) |d| d.release() else |e| e);
}

/// Writes info_out = [device kind, threads] and a one-line description (up to capacity
/// bytes); *len_out = the description's length.
export fn lmh_device_info(device: u64, info_out: ?*[2]u32, dst: ?[*]u8, capacity: u64, len_out: ?*u64) i32 {
    return call(blk: {
        const d = device_mod.devices.get(device) catch |e| break :blk e;
        const k = out([2]u32, info_out) catch |e| break :blk e;
        const len = out(u64, len_out) catch |e| break :blk e;
        var text_buffer: [256]u8 = undefined;
        const text = d.describe(&text_buffer);
        k.* = .{ @intFromEnum(d.kind), d.threads() };
        len.* = text.len;
        if (dst) |p| @memcpy(p[0..@intCast(@min(text.len, capacity))], text[0..@intCast(@min(text.len, capacity))]);
    });
}

/// Writes the device registry's resolved kernel names, one per line; *len_out = bytes needed.
export fn lmh_registry_list(device: u64, dst: ?[*]u8, capacity: u64, len_out: ?*u64) i32 {
    return call(blk: {
        const d = device_mod.devices.get(device) catch |e| break :blk e;
        const len = out(u64, len_out) catch |e| break :blk e;
        const cap: usize = if (dst == null) 0 else @intCast(@min(capacity, 1 << 20));
        len.* = d.registry.list(if (dst) |p| p[0..cap] else &.{});
    });
}

/// Allocates a zeroed buffer of `bytes` (> 0) on the device.
export fn lmh_buffer_alloc(device: u64, bytes: u64, handle_out: ?*u64) i32 {
    return call(blk: {
        const h = out(u64, handle_out) catch |e| break :blk e;
        const d = device_mod.devices.get(device) catch |e| break :blk e;
        insertBuffer(h, Buffer.alloc(d, bytes)) catch |e| break :blk e;
    });
}

/// Wraps host memory (e.g. a memory-mapped file) without copying. The caller keeps the
/// memory alive and unchanged for as long as the buffer, and every view over it, lives.
export fn lmh_buffer_wrap(device: u64, host: ?[*]u8, bytes: u64, handle_out: ?*u64) i32 {
    return call(blk: {
        const h = out(u64, handle_out) catch |e| break :blk e;
        const d = device_mod.devices.get(device) catch |e| break :blk e;
        insertBuffer(h, Buffer.wrap(d, host, bytes)) catch |e| break :blk e;
    });
}

/// A zero-copy window [offset, offset + bytes) of a buffer (mlx-native's slice_view).
export fn lmh_buffer_view(buffer: u64, offset_bytes: u64, bytes: u64, handle_out: ?*u64) i32 {
    return call(blk: {
        const h = out(u64, handle_out) catch |e| break :blk e;
        const parent = device_mod.buffers.get(buffer) catch |e| break :blk e;
        insertBuffer(h, Buffer.view(parent, offset_bytes, bytes)) catch |e| break :blk e;
    });
}

fn insertBuffer(handle_out: *u64, created: Error!*Buffer) Error!void {
    const buffer = try created;
    handle_out.* = device_mod.buffers.insert(buffer) catch |e| {
        buffer.release();
        return e;
    };
}

/// Frees the handle. Memory is released once no session or view uses it any more.
export fn lmh_buffer_free(buffer: u64) i32 {
    return call(if (device_mod.buffers.remove(buffer)) |b| b.release() else |e| e);
}

export fn lmh_buffer_size(buffer: u64, bytes_out: ?*u64) i32 {
    return call(blk: {
        const b = device_mod.buffers.get(buffer) catch |e| break :blk e;
        (out(u64, bytes_out) catch |e| break :blk e).* = b.bytes;
    });
}

/// The buffer's host address, for backends whose memory the host can see (the CPU's).
/// Valid while the buffer lives; do not touch it while a session uses the buffer.
export fn lmh_buffer_host_ptr(buffer: u64, address_out: ?*usize) i32 {
    return call(blk: {
        const b = device_mod.buffers.get(buffer) catch |e| break :blk e;
        const a = out(usize, address_out) catch |e| break :blk e;
        if (b.device.kind != .cpu) break :blk fail(error.Unsupported, "{s} buffers are not host-visible", .{@tagName(b.device.kind)});
        a.* = @intFromPtr(b.host().ptr);
    });
}

/// Copies `bytes` from src into the buffer at offset_bytes.
export fn lmh_buffer_write(buffer: u64, offset_bytes: u64, src: ?[*]const u8, bytes: u64) i32 {
    return call(blk: {
        const range = hostRange(buffer, offset_bytes, bytes) catch |e| break :blk e;
        if (bytes == 0) break :blk {};
        const s = src orelse break :blk fail(error.InvalidArgument, "null source pointer", .{});
        @memcpy(range, s[0..range.len]);
    });
}

/// Copies `bytes` from the buffer at offset_bytes into dst.
export fn lmh_buffer_read(buffer: u64, offset_bytes: u64, dst: ?[*]u8, bytes: u64) i32 {
    return call(blk: {
        const range = hostRange(buffer, offset_bytes, bytes) catch |e| break :blk e;
        if (bytes == 0) break :blk {};
        const d = dst orelse break :blk fail(error.InvalidArgument, "null destination pointer", .{});
        @memcpy(d[0..range.len], range);
    });
}

/// The host bytes [offset, offset + bytes) of an idle buffer, after every check.
fn hostRange(buffer: u64, offset_bytes: u64, bytes: u64) Error![]u8 {
    const b = try device_mod.buffers.get(buffer);
    try b.checkRange(offset_bytes, bytes);
    try b.checkIdle();
    if (b.device.kind != .cpu) return fail(error.Unsupported, "{s} buffers are not host-visible", .{@tagName(b.device.kind)});
    return b.host()[@intCast(offset_bytes)..][0..@intCast(bytes)];
}

/// Opens a graph session on the device: an empty command list and conflict tracker.
export fn lmh_session_begin(device: u64, handle_out: ?*u64) i32 {
    return call(blk: {
        const h = out(u64, handle_out) catch |e| break :blk e;
        const d = device_mod.devices.get(device) catch |e| break :blk e;
        const s = Session.begin(d) catch |e| break :blk e;
        h.* = session_mod.sessions.insert(s) catch |e| {
            s.destroy();
            break :blk e;
        };
    });
}

/// Declares what the next dispatch reads and writes, for work the session cannot see
/// (encode calls declare their own buffers). A RAW, WAR or WAW conflict with the
/// ranges recorded since the last barrier emits a barrier. Ranges are whole allocations.
export fn lmh_session_barrier_between(session: u64, reads: ?[*]const u64, read_count: u32, writes: ?[*]const u64, write_count: u32) i32 {
    return call(blk: {
        const s = session_mod.sessions.get(session) catch |e| break :blk e;
        var read_buffers: [8]*Buffer = undefined;
        var write_buffers: [8]*Buffer = undefined;
        const r = resolveList(reads, read_count, &read_buffers) catch |e| break :blk e;
        const w = resolveList(writes, write_count, &write_buffers) catch |e| break :blk e;
        s.barrierBetween(r, w) catch |e| break :blk e;
    });
}

fn resolveList(list: ?[*]const u64, count: u32, into: *[8]*Buffer) Error![]*Buffer {
    if (count > into.len) return fail(error.InvalidArgument, "{d} buffers in one declaration (limit {d})", .{ count, into.len });
    if (count > 0 and list == null) return fail(error.InvalidArgument, "null buffer list of {d} entries", .{count});
    for (0..count) |i| into[i] = try device_mod.buffers.get(list.?[i]);
    return into[0..count];
}

/// Encodes out[r,:] = (x[r,:]·rsqrt(Σx²/dim + eps))·w for `rows` rows of `dim` f32 values.
/// input and output are rows·dim f32; weight is dim f32.
export fn lmh_session_rms_norm(session: u64, input: u64, weight: u64, output: u64, rows: u32, dim: u32, eps: f32) i32 {
    return call(blk: {
        const s = session_mod.sessions.get(session) catch |e| break :blk e;
        const x = device_mod.buffers.get(input) catch |e| break :blk e;
        const w = device_mod.buffers.get(weight) catch |e| break :blk e;
        const y = device_mod.buffers.get(output) catch |e| break :blk e;
        admission.checkRows(rows) catch |e| break :blk e;
        if (dim == 0 or dim > admission.max_hidden) break :blk fail(error.OutOfBounds, "rms_norm dim {d} outside [1, {d}]", .{ dim, admission.max_hidden });
        if (!(eps >= 0 and std.math.isFinite(eps))) break :blk fail(error.InvalidArgument, "rms_norm eps {e} is not a finite value >= 0", .{eps});
        const row_bytes = @as(u64, dim) * 4;
        checkF32(x, "rms_norm input", row_bytes * rows) catch |e| break :blk e;
        checkF32(w, "rms_norm weight", row_bytes) catch |e| break :blk e;
        checkF32(y, "rms_norm output", row_bytes * rows) catch |e| break :blk e;
        s.device.registry.resolve(.rms_norm) catch |e| break :blk e;
        s.barrierBetween(&.{ x, w }, &.{y}) catch |e| break :blk e;
        // 1/dim is computed once on the host so every backend multiplies by the same value.
        s.dispatch(.{ .rms_norm = .{ .input = x, .weight = w, .output = y, .rows = rows, .dim = dim, .eps = eps, .inv_dim = 1.0 / @as(f32, @floatFromInt(dim)) } }) catch |e| break :blk e;
    });
}

/// Encodes out[r,j] = Σ_k x[r,k]·W[j,k] for an output head W of `vocab` rows of `k`
/// values stored as ggml type `type_id`; input is rows·k f32, output rows·vocab f32.
/// The weight must pass the head admission (type, block multiple, exact byte size).
export fn lmh_session_matvec(session: u64, input: u64, weight: u64, type_id: u32, output: u64, rows: u32, k: u32, vocab: u32) i32 {
    return call(blk: {
        const s = session_mod.sessions.get(session) catch |e| break :blk e;
        const x = device_mod.buffers.get(input) catch |e| break :blk e;
        const w = device_mod.buffers.get(weight) catch |e| break :blk e;
        const y = device_mod.buffers.get(output) catch |e| break :blk e;
        admission.checkRows(rows) catch |e| break :blk e;
        const format = admission.admitHead(type_id, k, vocab, w.bytes, false) catch |e| break :blk e;
        checkF32(x, "matvec input", @as(u64, rows) * k * 4) catch |e| break :blk e;
        checkF32(y, "matvec output", @as(u64, rows) * vocab * 4) catch |e| break :blk e;
        s.device.registry.resolve(.{ .matvec = format.type }) catch |e| break :blk e;
        s.barrierBetween(&.{ x, w }, &.{y}) catch |e| break :blk e;
        s.dispatch(.{ .matvec = .{ .input = x, .weight = w, .output = y, .format = format, .rows = rows, .k = k, .vocab = vocab } }) catch |e| break :blk e;
    });
}

/// Encodes data[i] = tanh(data[i]·(1/cap))·cap in place for the first `count` f32 values.
export fn lmh_session_softcap(session: u64, data: u64, count: u64, cap: f32) i32 {
    return call(blk: {
        const s = session_mod.sessions.get(session) catch |e| break :blk e;
        const d = device_mod.buffers.get(data) catch |e| break :blk e;
        if (count == 0) break :blk fail(error.InvalidArgument, "softcap of 0 values", .{});
        if (!(cap > 0 and std.math.isFinite(cap))) break :blk fail(error.InvalidArgument, "softcap cap {e} is not a finite value > 0", .{cap});
        const bytes = std.math.mul(u64, count, 4) catch break :blk fail(error.Overflow, "softcap count {d} overflows", .{count});
        if (bytes > d.bytes) break :blk fail(error.OutOfBounds, "softcap of {d} values past the buffer's {d} bytes", .{ count, d.bytes });
        checkF32(d, "softcap data", d.bytes) catch |e| break :blk e;
        s.device.registry.resolve(.softcap) catch |e| break :blk e;
        s.barrierBetween(&.{d}, &.{d}) catch |e| break :blk e;
        // 1/cap is computed once on the host, like 1/dim.
        s.dispatch(.{ .softcap = .{ .data = d, .count = count, .cap = cap, .inv_cap = 1.0 / cap } }) catch |e| break :blk e;
    });
}

fn checkF32(buffer: *Buffer, comptime what: []const u8, bytes: u64) Error!void {
    if (buffer.bytes != bytes) return fail(error.InvalidArgument, what ++ " is {d} bytes, expected {d}", .{ buffer.bytes, bytes });
    if (buffer.device.kind == .cpu and @intFromPtr(buffer.host().ptr) % 4 != 0)
        return fail(error.InvalidArgument, what ++ " is not 4-byte aligned", .{});
}

/// Runs the session's commands in order, waits for them, and closes the session.
export fn lmh_session_finish(session: u64) i32 {
    return call(if (session_mod.sessions.remove(session)) |s| s.finish() else |e| e);
}

/// Closes the session without running what it recorded.
export fn lmh_session_abort(session: u64) i32 {
    return call(if (session_mod.sessions.remove(session)) |s| s.destroy() else |e| e);
}

/// Process-wide counters: counts_out[0] = barriers emitted, counts_out[1] = dispatches encoded.
export fn lmh_counters(counts_out: ?*[2]u64) i32 {
    return call(blk: {
        const c = out([2]u64, counts_out) catch |e| break :blk e;
        c.* = .{ session_mod.barrier_count.load(.monotonic), session_mod.dispatch_count.load(.monotonic) };
    });
}

/// Measures the device's read bandwidth, the floor of a head call (weight bytes / bandwidth):
/// bytes_per_second_out = [with all of the device's threads, with one thread], each the
/// median of `passes` reads of `bytes` (16 MiB to 16 GiB; use well over the last-level cache).
export fn lmh_device_read_bandwidth(device: u64, bytes: u64, passes: u32, bytes_per_second_out: ?*[2]f64) i32 {
    return call(blk: {
        const d = device_mod.devices.get(device) catch |e| break :blk e;
        const o = out([2]f64, bytes_per_second_out) catch |e| break :blk e;
        if (bytes < 1 << 24 or bytes > 1 << 34) break :blk fail(error.OutOfBounds, "bandwidth probe of {d} bytes outside [2^24, 2^34]", .{bytes});
        if (passes == 0 or passes > cpu.max_probe_passes) break :blk fail(error.OutOfBounds, "bandwidth probe passes {d} outside [1, {d}]", .{ passes, cpu.max_probe_passes });
        switch (d.backend) {
            .cpu => |b| {
                const all = b.readBandwidth(@intCast(bytes), passes, b.pool.worker_count) catch |e| break :blk e;
                const one = b.readBandwidth(@intCast(bytes), passes, 1) catch |e| break :blk e;
                o.* = .{ all, one };
            },
            .metal, .cuda => unreachable,
        }
    });
}

/// The explicit limits: limits_out = [max rows per call, max hidden, max vocab, max buffer bytes].
export fn lmh_limits(limits_out: ?*[4]u64) i32 {
    return call(blk: {
        const l = out([4]u64, limits_out) catch |e| break :blk e;
        l.* = .{ admission.max_rows, admission.max_hidden, admission.max_vocab, device_mod.max_buffer_bytes };
    });
}

/// When on, every dispatch and barrier is printed to stderr as it is encoded.
export fn lmh_set_encode_trace(on: u32) void {
    session_mod.encode_trace.store(on != 0, .monotonic);
}

/// The block format table, one entry: info_out = [block_values, block_bytes, d_offset,
/// m_offset (0xFFFFFFFF if none), head admitted, tied head admitted]; the name goes to
/// dst (up to capacity bytes), its length to *len_out. Unknown ids are an error.
export fn lmh_format_info(type_id: u32, info_out: ?*[6]u32, dst: ?[*]u8, capacity: u64, len_out: ?*u64) i32 {
    return call(blk: {
        const info = out([6]u32, info_out) catch |e| break :blk e;
        const len = out(u64, len_out) catch |e| break :blk e;
        const f = formats.format(type_id) orelse break :blk fail(error.Unsupported, "unknown ggml type id {d}", .{type_id});
        info.* = .{ f.block_values, f.block_bytes, f.d_offset, f.m_offset orelse 0xFFFF_FFFF, @intFromBool(f.head), @intFromBool(f.tied_head) };
        len.* = f.name.len;
        if (dst) |d| @memcpy(d[0..@intCast(@min(capacity, f.name.len))], f.name[0..@intCast(@min(capacity, f.name.len))]);
    });
}

/// The head admission predicate on its own, for loaders: type, tied, block multiple, exact size.
export fn lmh_head_admit(type_id: u32, hidden: u64, vocab: u64, weight_bytes: u64, tied: u32) i32 {
    return call(if (admission.admitHead(type_id, hidden, vocab, weight_bytes, tied != 0)) |_| {} else |e| e);
}

/// Decodes src_bytes of ggml type `type_id` into dst_values f32 (the reference decoder).
export fn lmh_dequantize(type_id: u32, src: ?[*]const u8, src_bytes: u64, dst: ?[*]f32, dst_values: u64) i32 {
    return call(blk: {
        const f = formats.format(type_id) orelse break :blk fail(error.Unsupported, "unknown ggml type id {d}", .{type_id});
        if (src_bytes % f.block_bytes != 0) break :blk fail(error.InvalidArgument, "{d} bytes is not a whole number of {s} blocks of {d} bytes", .{ src_bytes, f.name, f.block_bytes });
        const values = src_bytes / f.block_bytes * f.block_values;
        if (values != dst_values) break :blk fail(error.InvalidArgument, "{d} bytes of {s} decode to {d} values, destination holds {d}", .{ src_bytes, f.name, values, dst_values });
        if (values == 0) break :blk {};
        const s = src orelse break :blk fail(error.InvalidArgument, "null source pointer", .{});
        const d = dst orelse break :blk fail(error.InvalidArgument, "null destination pointer", .{});
        formats.decodeRow(f.type, s[0..@intCast(src_bytes)], d[0..@intCast(values)]) catch break :blk fail(error.InvalidArgument, "decode failed", .{});
    });
}

test {
    _ = @import("core/status.zig");
    _ = @import("core/handles.zig");
    _ = @import("numerics/lanes.zig");
    _ = @import("backends/cpu/pool.zig");
}
