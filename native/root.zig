//! The C ABI of liblmhead (prefix `lmh_`), called by the TypeScript layer through bun:ffi.
//!
//! Conventions, for every function below:
//! - Functions return a Status (0 = ok). On failure nothing was changed and
//!   `lmh_last_error` returns this thread's message, which names the numbers involved.
//! - Objects are u64 handles (kind, generation, slot): a closed, freed or forged handle
//!   is an error, never a dereference. Every size, offset and product is checked for
//!   range and overflow before any memory is touched.
//! - Any thread may call any function. Every call holds a reference on the objects it
//!   uses until it returns, so freeing a handle on another thread meanwhile only drops
//!   the handle's reference. Calls on one session take turns; sessions run one after
//!   the other on a backend.
//! - Encoding records work; `lmh_session_finish` runs it and is the only host sync point.
//!   Buffers used by an unfinished session refuse host reads and writes, and stay alive
//!   until the session ends even if their handle is freed.
const std = @import("std");
const status = @import("core/status.zig");
const device_mod = @import("core/device.zig");
const buffer_mod = @import("core/buffer.zig");
const session_mod = @import("core/session.zig");
const admission = @import("core/admission.zig");
const contract = @import("backends/backend.zig");
const params = @import("kernels/params.zig");
const formats = @import("numerics/formats.zig");
const lanes = @import("numerics/lanes.zig");
const ggml_types = @import("numerics/ggml_types.zig");
const file_mod = @import("core/file.zig");
const argmax = @import("decode/argmax.zig");
const top_k = @import("decode/top_k.zig");
const pin_mod = @import("core/pin.zig");
const Error = status.Error;
const fail = status.fail;
const Device = device_mod.Device;
const Buffer = buffer_mod.Buffer;
const Session = session_mod.Session;
const devices = &device_mod.devices;
const buffers = &buffer_mod.buffers;
const sessions = &session_mod.sessions;
const files = &file_mod.files;
const pins = &pin_mod.pins;
const Pin = pin_mod.Pin;

pub const abi_version: u32 = 5;

/// Runs an entry point's body and turns its error into a Status (the message is already set).
fn call(result: Error!void) i32 {
    if (result) |_| {
        status.clear();
        return @backingInt(status.Status.ok);
    } else |err| return @backingInt(status.status(err));
}

fn out(comptime T: type, pointer: ?*T) Error!*T {
    return pointer orelse fail(error.InvalidArgument, "null output pointer", .{});
}

/// ABI version; the TypeScript layer refuses a library whose version it does not know.
pub export fn lmh_version() u32 {
    return abi_version;
}

/// Copies this thread's last error message into dst (up to capacity bytes, no terminator)
/// and returns its full length.
pub export fn lmh_last_error(dst: ?[*]u8, capacity: u64) u64 {
    const text = status.message();
    if (dst) |d| {
        const n = @min(text.len, capacity);
        @memcpy(d[0..@intCast(n)], text[0..@intCast(n)]);
    }
    return text.len;
}

/// Opens a device: kind 0 = cpu, 1 = metal, 2 = cuda.
pub export fn lmh_device_open(kind: u32, handle_out: ?*u64) i32 {
    return call(deviceOpen(kind, handle_out));
}

fn deviceOpen(kind: u32, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const k = std.enums.fromInt(device_mod.Kind, kind) orelse return fail(error.InvalidArgument, "unknown device kind {d}", .{kind});
    const device = try Device.open(k);
    h.* = devices.insert(device) catch |e| {
        device.release();
        return e;
    };
}

/// Closes the handle; buffers and sessions of the device keep it alive until they end.
pub export fn lmh_device_close(device: u64) i32 {
    return call(deviceClose(device));
}

fn deviceClose(device: u64) Error!void {
    (try devices.remove(device)).release();
}

/// Writes info_out = [device kind, threads, buffers host-visible (0/1)] and a one-line
/// description (up to capacity bytes); *len_out = the description's length.
pub export fn lmh_device_info(device: u64, info_out: ?*[3]u32, dst: ?[*]u8, capacity: u64, len_out: ?*u64) i32 {
    return call(deviceInfo(device, info_out, dst, capacity, len_out));
}

fn deviceInfo(device: u64, info_out: ?*[3]u32, dst: ?[*]u8, capacity: u64, len_out: ?*u64) Error!void {
    const info = try out([3]u32, info_out);
    const len = try out(u64, len_out);
    const d = try devices.acquire(device);
    defer d.release();
    var text_buffer: [256]u8 = undefined;
    const text = d.describe(&text_buffer);
    info.* = .{ @backingInt(d.kind), d.threads(), @intFromBool(d.hostVisible()) };
    len.* = text.len;
    copyText(text, dst, capacity);
}

fn copyText(text: []const u8, dst: ?[*]u8, capacity: u64) void {
    const n: usize = @intCast(@min(text.len, capacity));
    if (dst) |p| @memcpy(p[0..n], text[0..n]);
}

/// Writes the device registry's resolved kernel names, one per line; *len_out = bytes needed.
pub export fn lmh_registry_list(device: u64, dst: ?[*]u8, capacity: u64, len_out: ?*u64) i32 {
    return call(registryList(device, dst, capacity, len_out));
}

fn registryList(device: u64, dst: ?[*]u8, capacity: u64, len_out: ?*u64) Error!void {
    const len = try out(u64, len_out);
    const d = try devices.acquire(device);
    defer d.release();
    const cap: usize = if (dst == null) 0 else @intCast(@min(capacity, 1 << 20));
    len.* = d.registry.list(if (dst) |p| p[0..cap] else &.{});
}

/// Allocates a zeroed buffer of `bytes` (> 0) on the device.
pub export fn lmh_buffer_alloc(device: u64, bytes: u64, handle_out: ?*u64) i32 {
    return call(bufferAlloc(device, bytes, handle_out));
}

fn bufferAlloc(device: u64, bytes: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const d = try devices.acquire(device);
    defer d.release();
    try insertBuffer(h, Buffer.alloc(d, bytes));
}

/// Wraps host memory (e.g. a memory-mapped file) without copying. The caller keeps the
/// memory alive and unchanged for as long as the buffer, and every view over it, lives.
pub export fn lmh_buffer_wrap(device: u64, host: ?[*]u8, bytes: u64, handle_out: ?*u64) i32 {
    return call(bufferWrap(device, host, bytes, handle_out));
}

fn bufferWrap(device: u64, host: ?[*]u8, bytes: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const d = try devices.acquire(device);
    defer d.release();
    try insertBuffer(h, Buffer.wrap(d, host, bytes));
}

/// A zero-copy window [offset, offset + bytes) of a buffer (mlx-native's slice_view).
pub export fn lmh_buffer_view(buffer: u64, offset_bytes: u64, bytes: u64, handle_out: ?*u64) i32 {
    return call(bufferView(buffer, offset_bytes, bytes, handle_out));
}

fn bufferView(buffer: u64, offset_bytes: u64, bytes: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const parent = try buffers.acquire(buffer);
    defer parent.release();
    try insertBuffer(h, Buffer.view(parent, offset_bytes, bytes));
}

fn insertBuffer(handle_out: *u64, created: Error!*Buffer) Error!void {
    const buffer = try created;
    handle_out.* = buffers.insert(buffer) catch |e| {
        buffer.release();
        return e;
    };
}

/// Frees the handle. Memory is released once no session, view or call uses it any more.
pub export fn lmh_buffer_free(buffer: u64) i32 {
    return call(bufferFree(buffer));
}

fn bufferFree(buffer: u64) Error!void {
    (try buffers.remove(buffer)).release();
}

pub export fn lmh_buffer_size(buffer: u64, bytes_out: ?*u64) i32 {
    return call(bufferSize(buffer, bytes_out));
}

fn bufferSize(buffer: u64, bytes_out: ?*u64) Error!void {
    const o = try out(u64, bytes_out);
    const b = try buffers.acquire(buffer);
    defer b.release();
    o.* = b.bytes;
}

/// The buffer's host address, for backends whose memory the host can address (see
/// lmh_device_info). Valid while the buffer lives; do not touch it while a session uses it.
pub export fn lmh_buffer_host_ptr(buffer: u64, address_out: ?*usize) i32 {
    return call(bufferHostPtr(buffer, address_out));
}

fn bufferHostPtr(buffer: u64, address_out: ?*usize) Error!void {
    const a = try out(usize, address_out);
    const b = try buffers.acquire(buffer);
    defer b.release();
    const bytes = b.hostBytes() orelse return fail(error.Unsupported, "{s} buffers are not host-visible", .{@tagName(b.device.kind)});
    // Its pages are read-only: a host write through the address would end the process.
    if (b.root().file != null) return fail(error.InvalidArgument, "buffer is a read-only view of a model file: read its bytes with lmh_buffer_read", .{});
    a.* = @intFromPtr(bytes.ptr);
}

/// Copies `bytes` from src into the buffer at offset_bytes.
pub export fn lmh_buffer_write(buffer: u64, offset_bytes: u64, src: ?[*]const u8, bytes: u64) i32 {
    return call(bufferWrite(buffer, offset_bytes, src, bytes));
}

fn bufferWrite(buffer: u64, offset_bytes: u64, src: ?[*]const u8, bytes: u64) Error!void {
    const b = try buffers.acquire(buffer);
    defer b.release();
    try b.checkRange(offset_bytes, bytes);
    if (bytes == 0) return;
    const s = src orelse return fail(error.InvalidArgument, "null source pointer", .{});
    try b.copyIn(offset_bytes, s[0..@intCast(bytes)]);
}

/// Copies `bytes` from the buffer at offset_bytes into dst.
pub export fn lmh_buffer_read(buffer: u64, offset_bytes: u64, dst: ?[*]u8, bytes: u64) i32 {
    return call(bufferRead(buffer, offset_bytes, dst, bytes));
}

fn bufferRead(buffer: u64, offset_bytes: u64, dst: ?[*]u8, bytes: u64) Error!void {
    const b = try buffers.acquire(buffer);
    defer b.release();
    try b.checkRange(offset_bytes, bytes);
    if (bytes == 0) return;
    const d = dst orelse return fail(error.InvalidArgument, "null destination pointer", .{});
    try b.copyOut(offset_bytes, d[0..@intCast(bytes)]);
}

/// Pins host memory for the device's copies (CUDA: page-locks it), so that reads of its
/// buffers into that memory run at the bus's rate; a no-op pin where the device addresses
/// host memory itself. The caller keeps [host, host + bytes) alive until lmh_host_unpin.
pub export fn lmh_host_pin(device: u64, host: ?[*]u8, bytes: u64, handle_out: ?*u64) i32 {
    return call(hostPin(device, host, bytes, handle_out));
}

fn hostPin(device: u64, host: ?[*]u8, bytes: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const d = try devices.acquire(device);
    defer d.release();
    const pin = try Pin.create(d, host, bytes);
    h.* = pins.insert(pin) catch |e| {
        pin.release();
        return e;
    };
}

/// Unpins the memory and frees the handle.
pub export fn lmh_host_unpin(pin: u64) i32 {
    return call(hostUnpin(pin));
}

fn hostUnpin(pin: u64) Error!void {
    (try pins.remove(pin)).release();
}

/// Opens a graph session on the device: an empty command list and conflict tracker.
pub export fn lmh_session_begin(device: u64, handle_out: ?*u64) i32 {
    return call(sessionBegin(device, handle_out));
}

fn sessionBegin(device: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const d = try devices.acquire(device);
    defer d.release();
    const s = try Session.begin(d);
    h.* = sessions.insert(s) catch |e| {
        s.release();
        return e;
    };
}

/// The buffers one encode call uses, each held until the call returns.
const Held = struct {
    list: [Session.max_declared_buffers]*Buffer = undefined,
    len: usize = 0,

    fn acquire(held: *Held, handle: u64) Error!*Buffer {
        std.debug.assert(held.len < held.list.len);
        const b = try buffers.acquire(handle);
        held.list[held.len] = b;
        held.len += 1;
        return b;
    }

    fn release(held: *Held) void {
        for (held.list[0..held.len]) |b| b.release();
    }
};

/// Runs one encode: the session locked, its buffers held, until `body` returns.
fn encode(session: u64, body: anytype, args: anytype) Error!void {
    const s = try sessions.acquire(session);
    defer s.release();
    try s.open();
    defer s.close();
    var held: Held = .{};
    defer held.release();
    try @call(.auto, body, .{ s, &held } ++ args);
}

/// Declares what the next dispatch reads and writes, for work the session cannot see
/// (encode calls declare their own buffers). A RAW, WAR or WAW conflict with the
/// ranges recorded since the last barrier emits a barrier. Ranges are whole allocations.
pub export fn lmh_session_barrier_between(session: u64, reads: ?[*]const u64, read_count: u32, writes: ?[*]const u64, write_count: u32) i32 {
    return call(encode(session, barrierBetween, .{ reads, read_count, writes, write_count }));
}

fn barrierBetween(s: *Session, held: *Held, reads: ?[*]const u64, read_count: u32, writes: ?[*]const u64, write_count: u32) Error!void {
    const limit = Session.max_declared_buffers / 2;
    if (read_count > limit or write_count > limit)
        return fail(error.InvalidArgument, "{d} reads and {d} writes in one declaration (limit {d} each)", .{ read_count, write_count, limit });
    if ((read_count > 0 and reads == null) or (write_count > 0 and writes == null))
        return fail(error.InvalidArgument, "null buffer list", .{});
    for (0..read_count) |i| _ = try held.acquire(reads.?[i]);
    for (0..write_count) |i| _ = try held.acquire(writes.?[i]);
    try s.barrierBetween(held.list[0..read_count], held.list[read_count..held.len]);
}

/// Encodes out[r,:] = (x[r,:]·rsqrt(Σx²/hidden + eps))·w for `rows` rows of `hidden` f32
/// values; input and output are rows·hidden f32, weight is hidden f32. A row whose Σx²/hidden
/// + eps overflows to +Inf becomes NaN (docs/NUMERICS.md §4), so it is reported, never zeros.
pub export fn lmh_session_rms_norm(session: u64, input: u64, weight: u64, output: u64, rows: u32, hidden: u32, eps: f32) i32 {
    return call(encode(session, rmsNorm, .{ input, weight, output, rows, hidden, eps }));
}

fn rmsNorm(s: *Session, held: *Held, input: u64, weight: u64, output: u64, rows: u32, hidden: u32, eps: f32) Error!void {
    const x = try held.acquire(input);
    const w = try held.acquire(weight);
    const y = try held.acquire(output);
    try admission.checkRows(rows);
    if (hidden == 0 or hidden > admission.max_hidden) return fail(error.OutOfBounds, "rms_norm hidden {d} outside [1, {d}]", .{ hidden, admission.max_hidden });
    if (!(eps >= 0 and std.math.isFinite(eps))) return fail(error.InvalidArgument, "rms_norm eps {e} is not a finite value >= 0", .{eps});
    const row_bytes = @as(u64, hidden) * 4;
    try checkF32(x, "rms_norm input", row_bytes * rows);
    try checkRowsAligned(x, "rms_norm input", hidden);
    try checkF32(w, "rms_norm weight", row_bytes);
    try checkF32(y, "rms_norm output", row_bytes * rows);
    try s.device.registry.resolve(.rms_norm);
    try s.barrierBetween(&.{ x, w }, &.{y});
    // 1/hidden is computed once here, so every backend multiplies by the same value.
    const p: params.RmsNorm = .{ .rows = rows, .hidden = hidden, .eps = eps, .inv_hidden = 1.0 / @as(f32, @floatFromInt(hidden)) };
    try s.dispatch(.{ .rms_norm = .{ .input = x, .weight = w, .output = y, .params = p } });
}

/// Encodes out[r,j] = Σ_k x[r,k]·W[j,k] for an output head W of `vocab` rows of `hidden`
/// values stored as ggml type `type_id`; input is rows·hidden f32, output rows·vocab f32.
/// The weight must pass the head admission (type, block multiple, exact byte size).
pub export fn lmh_session_matvec(session: u64, input: u64, weight: u64, type_id: u32, output: u64, rows: u32, hidden: u32, vocab: u32) i32 {
    return call(encode(session, matvec, .{ input, weight, type_id, output, rows, hidden, vocab }));
}

fn matvec(s: *Session, held: *Held, input: u64, weight: u64, type_id: u32, output: u64, rows: u32, hidden: u32, vocab: u32) Error!void {
    const x = try held.acquire(input);
    const w = try held.acquire(weight);
    const y = try held.acquire(output);
    try admission.checkRows(rows);
    const format = try admission.admitHead(type_id, hidden, vocab, w.bytes, false);
    try checkWeightsAligned(w, format, hidden);
    try checkF32(x, "matvec input", @as(u64, rows) * hidden * 4);
    try checkRowsAligned(x, "matvec input", hidden);
    try checkF32(y, "matvec output", @as(u64, rows) * vocab * 4);
    try s.device.registry.resolve(.{ .matvec = format.type });
    try s.barrierBetween(&.{ x, w }, &.{y});
    const p: params.Matvec = .{
        .rows = rows,
        .hidden = hidden,
        .vocab = vocab,
        .type_id = type_id,
        // Admission bounds hidden, so one row's bytes fit u32 (at most 4 bytes per value).
        .row_bytes = @intCast(formats.rowBytes(format.type, hidden).?),
        .chunks = @intCast(lanes.chunkCount(hidden)),
        .input_flushed = @intFromBool(s.lastNormWrote(x, rows, hidden)),
    };
    try s.dispatch(.{ .matvec = .{ .input = x, .weight = w, .output = y, .params = p } });
}

/// Encodes data[i] = tanh(data[i]·(1/cap))·cap in place for the first `count` f32 values.
pub export fn lmh_session_softcap(session: u64, data: u64, count: u64, cap: f32) i32 {
    return call(encode(session, softcap, .{ data, count, cap }));
}

fn softcap(s: *Session, held: *Held, data: u64, count: u64, cap: f32) Error!void {
    const d = try held.acquire(data);
    if (count == 0) return fail(error.InvalidArgument, "softcap of 0 values", .{});
    if (!(cap > 0 and std.math.isFinite(cap))) return fail(error.InvalidArgument, "softcap cap {e} is not a finite value > 0", .{cap});
    const bytes = std.math.mul(u64, count, 4) catch return fail(error.Overflow, "softcap count {d} overflows", .{count});
    if (bytes > d.bytes) return fail(error.OutOfBounds, "softcap of {d} values past the buffer's {d} bytes", .{ count, d.bytes });
    try checkF32(d, "softcap data", d.bytes);
    try s.device.registry.resolve(.softcap);
    try s.barrierBetween(&.{d}, &.{d});
    // 1/cap is computed once here, like 1/hidden.
    try s.dispatch(.{ .softcap = .{ .data = d, .params = .{ .values = count, .cap = cap, .inv_cap = 1.0 / cap } } });
}

/// Encodes counts[r] = the number of NaN and ±Inf values in row r of data (`rows` rows of
/// `row_values` f32); counts is rows u32. The head's per-row validity check, read by the host.
pub export fn lmh_session_count_non_finite(session: u64, data: u64, counts: u64, rows: u32, row_values: u32) i32 {
    return call(encode(session, countNonFinite, .{ data, counts, rows, row_values }));
}

fn countNonFinite(s: *Session, held: *Held, data: u64, counts: u64, rows: u32, row_values: u32) Error!void {
    const d = try held.acquire(data);
    const c = try held.acquire(counts);
    try admission.checkRows(rows);
    if (row_values == 0) return fail(error.InvalidArgument, "count_non_finite of rows of 0 values", .{});
    const bytes = @as(u64, rows) * row_values * 4;
    if (bytes > d.bytes) return fail(error.OutOfBounds, "count_non_finite of {d} rows x {d} values past the buffer's {d} bytes", .{ rows, row_values, d.bytes });
    try checkF32(d, "count_non_finite data", d.bytes);
    try checkF32(c, "count_non_finite counts", @as(u64, rows) * 4);
    try s.device.registry.resolve(.count_non_finite);
    try s.barrierBetween(&.{d}, &.{c});
    try s.dispatch(.{ .count_non_finite = .{ .data = d, .counts = c, .params = .{ .rows = rows, .row_values = row_values } } });
}

/// GPU kernels read rows of a multiple of 4 values with 16-byte loads (kernels.h
/// lmh_load_activations), so such rows must start 16-byte aligned; other rows 4-byte
/// aligned (checkF32). The same rule on every backend, so code that runs on one runs on all.
fn checkRowsAligned(buffer: *Buffer, comptime what: []const u8, hidden: u32) Error!void {
    if (hidden % 4 == 0 and buffer.address() % 16 != 0) return fail(error.InvalidArgument, what ++ " is not 16-byte aligned (rows of a multiple of 4 values are read with 16-byte loads)", .{});
}

/// GPU kernels read block fields with aligned 16-bit loads (32-bit ones for F32 rows), so
/// weights start 4-byte aligned; dense rows of a multiple of 16 bytes are read with 16-byte
/// loads, so those start 16-byte aligned. As for activations, the same rule on every backend.
fn checkWeightsAligned(w: *Buffer, format: formats.Format, hidden: u32) Error!void {
    if (w.address() % 4 != 0) return fail(error.InvalidArgument, "matvec weights are not 4-byte aligned (the GPU kernels read them with aligned loads)", .{});
    const wide = format.block_values == 1 and formats.rowBytes(format.type, hidden).? % 16 == 0;
    if (wide and w.address() % 16 != 0) return fail(error.InvalidArgument, "matvec weights are not 16-byte aligned (dense rows of a multiple of 16 bytes are read with 16-byte loads)", .{});
}

fn checkF32(buffer: *Buffer, comptime what: []const u8, bytes: u64) Error!void {
    if (buffer.bytes != bytes) return fail(error.InvalidArgument, what ++ " is {d} bytes, expected {d}", .{ buffer.bytes, bytes });
    if (buffer.address() % 4 != 0) return fail(error.InvalidArgument, what ++ " is not 4-byte aligned", .{});
}

/// Runs the session's commands in order, waits for them, and closes the session.
pub export fn lmh_session_finish(session: u64) i32 {
    return call(sessionFinish(session, null));
}

/// lmh_session_finish, and *device_ns_out = the device's own time for the work in ns (a
/// GPU's start to end), or 2^64 - 1 where the device keeps none (the CPU: the wait is it).
pub export fn lmh_session_finish_timed(session: u64, device_ns_out: ?*u64) i32 {
    return call(sessionFinishTimed(session, device_ns_out));
}

fn sessionFinishTimed(session: u64, device_ns_out: ?*u64) Error!void {
    try sessionFinish(session, try out(u64, device_ns_out));
}

fn sessionFinish(session: u64, device_ns_out: ?*u64) Error!void {
    const s = try sessions.remove(session);
    defer s.release();
    const device_ns = try s.finish();
    if (device_ns_out) |o| o.* = device_ns orelse std.math.maxInt(u64);
}

/// Closes the session without running what it recorded.
pub export fn lmh_session_abort(session: u64) i32 {
    return call(sessionAbort(session));
}

fn sessionAbort(session: u64) Error!void {
    const s = try sessions.remove(session);
    defer s.release();
    try s.abort();
}

/// Process-wide counters: counts_out[0] = barriers emitted, counts_out[1] = dispatches encoded.
pub export fn lmh_counters(counts_out: ?*[2]u64) i32 {
    return call(counters(counts_out));
}

fn counters(counts_out: ?*[2]u64) Error!void {
    const c = try out([2]u64, counts_out);
    c.* = .{ session_mod.barrier_count.load(.monotonic), session_mod.dispatch_count.load(.monotonic) };
}

/// Measures the device's read bandwidth, the floor of a head call (weight bytes / bandwidth):
/// bytes_per_second_out = [with all of the device's threads, with one thread], each the
/// median of `passes` reads of `bytes` (16 MiB to 16 GiB; use well over the last-level cache).
pub export fn lmh_device_read_bandwidth(device: u64, bytes: u64, passes: u32, bytes_per_second_out: ?*[2]f64) i32 {
    return call(deviceReadBandwidth(device, bytes, passes, bytes_per_second_out));
}

fn deviceReadBandwidth(device: u64, bytes: u64, passes: u32, bytes_per_second_out: ?*[2]f64) Error!void {
    const o = try out([2]f64, bytes_per_second_out);
    if (bytes < 1 << 24 or bytes > 1 << 34) return fail(error.OutOfBounds, "bandwidth probe of {d} bytes outside [2^24, 2^34]", .{bytes});
    if (passes == 0 or passes > contract.max_probe_passes) return fail(error.OutOfBounds, "bandwidth probe passes {d} outside [1, {d}]", .{ passes, contract.max_probe_passes });
    const d = try devices.acquire(device);
    defer d.release();
    o.* = try d.readBandwidth(bytes, passes);
}

/// Measures the device's f32 fma rate, the floor of a head call at large N (rows·vocab·hidden
/// fmas / rate): *fmas_per_second_out = the median of `passes` runs with every thread.
pub export fn lmh_device_fma_rate(device: u64, passes: u32, fmas_per_second_out: ?*f64) i32 {
    return call(deviceFmaRate(device, passes, fmas_per_second_out));
}

fn deviceFmaRate(device: u64, passes: u32, fmas_per_second_out: ?*f64) Error!void {
    const o = try out(f64, fmas_per_second_out);
    if (passes == 0 or passes > contract.max_probe_passes) return fail(error.OutOfBounds, "fma probe passes {d} outside [1, {d}]", .{ passes, contract.max_probe_passes });
    const d = try devices.acquire(device);
    defer d.release();
    o.* = try d.fmaRate(passes);
}

/// The explicit limits: limits_out = [max rows per call, max hidden, max vocab, max buffer bytes].
pub export fn lmh_limits(limits_out: ?*[4]u64) i32 {
    return call(limits(limits_out));
}

fn limits(limits_out: ?*[4]u64) Error!void {
    const l = try out([4]u64, limits_out);
    l.* = .{ admission.max_rows, admission.max_hidden, admission.max_vocab, buffer_mod.max_buffer_bytes };
}

/// When on, every dispatch and barrier is printed to stderr as it is encoded.
pub export fn lmh_set_encode_trace(on: u32) void {
    session_mod.encode_trace.store(on != 0, .monotonic);
}

/// One entry of the ggml type table (every type ggml defines, decoded or only skipped):
/// info_out = [block_values, block_bytes, d_offset, m_offset (0xFFFFFFFF if none), head
/// admitted, tied head admitted]; the name goes to dst (up to capacity bytes), its length to
/// *len_out. Types lmhead only skips have offsets 0, 0xFFFFFFFF and both flags 0. Unknown and
/// removed ids are an error whose message says which.
pub export fn lmh_format_info(type_id: u32, info_out: ?*[6]u32, dst: ?[*]u8, capacity: u64, len_out: ?*u64) i32 {
    return call(formatInfo(type_id, info_out, dst, capacity, len_out));
}

fn formatInfo(type_id: u32, info_out: ?*[6]u32, dst: ?[*]u8, capacity: u64, len_out: ?*u64) Error!void {
    const info = try out([6]u32, info_out);
    const len = try out(u64, len_out);
    const t = ggml_types.info(type_id) orelse return fail(error.Unsupported, "unknown ggml type id {d}", .{type_id});
    if (t.removed) return fail(error.Unsupported, "ggml type {d} ({s}) was removed from ggml; files must use {s}", .{ type_id, t.name, t.replaced_by.? });
    info.* = if (formats.format(type_id)) |f|
        .{ f.block_values, f.block_bytes, f.d_offset, f.m_offset orelse 0xFFFF_FFFF, @intFromBool(f.head), @intFromBool(f.tied_head) }
    else
        .{ t.block_values, t.block_bytes, 0, 0xFFFF_FFFF, 0, 0 };
    len.* = t.name.len;
    copyText(t.name, dst, capacity);
}

/// The head admission predicate on its own, for loaders: type, tied, block multiple, exact size.
pub export fn lmh_head_admit(type_id: u32, hidden: u64, vocab: u64, weight_bytes: u64, tied: u32) i32 {
    return call(headAdmit(type_id, hidden, vocab, weight_bytes, tied));
}

fn headAdmit(type_id: u32, hidden: u64, vocab: u64, weight_bytes: u64, tied: u32) Error!void {
    _ = try admission.admitHead(type_id, hidden, vocab, weight_bytes, tied != 0);
}

/// Decodes src_bytes of ggml type `type_id` into dst_values f32 (the reference decoder).
pub export fn lmh_dequantize(type_id: u32, src: ?[*]const u8, src_bytes: u64, dst: ?[*]f32, dst_values: u64) i32 {
    return call(dequantize(type_id, src, src_bytes, dst, dst_values));
}

fn dequantize(type_id: u32, src: ?[*]const u8, src_bytes: u64, dst: ?[*]f32, dst_values: u64) Error!void {
    const f = formats.format(type_id) orelse return fail(error.Unsupported, "unknown ggml type id {d}", .{type_id});
    if (src_bytes % f.block_bytes != 0) return fail(error.InvalidArgument, "{d} bytes is not a whole number of {s} blocks of {d} bytes", .{ src_bytes, f.name, f.block_bytes });
    const values = src_bytes / f.block_bytes * f.block_values;
    if (values != dst_values) return fail(error.InvalidArgument, "{d} bytes of {s} decode to {d} values, destination holds {d}", .{ src_bytes, f.name, values, dst_values });
    if (values == 0) return;
    const s = src orelse return fail(error.InvalidArgument, "null source pointer", .{});
    const d = dst orelse return fail(error.InvalidArgument, "null destination pointer", .{});
    formats.decodeRow(f.type, s[0..@intCast(src_bytes)], d[0..@intCast(values)]) catch return fail(error.InvalidArgument, "decode failed", .{});
}

/// Greedy token selection (native/decode/argmax.zig): out[r] = the index of the largest value
/// of row r of values ([rows, row_values] f32, rows >= 1, 1 <= row_values < 2^32), ties to
/// the lowest index, a NaN never taken unless it comes first. Rows run on a pool of threads.
pub export fn lmh_argmax_rows(values: ?[*]const f32, rows: u64, row_values: u64, out_indices: ?[*]u32) i32 {
    return call(argmaxRows(values, rows, row_values, out_indices));
}

fn argmaxRows(values: ?[*]const f32, rows: u64, row_values: u64, out_indices: ?[*]u32) Error!void {
    if (rows == 0 or row_values == 0 or row_values > std.math.maxInt(u32))
        return fail(error.InvalidArgument, "argmax of {d} rows of {d} values: expected at least one row of 1 to 2^32 - 1", .{ rows, row_values });
    const count = std.math.mul(u64, rows, row_values) catch return fail(error.InvalidArgument, "{d} rows of {d} values overflow", .{ rows, row_values });
    if (count > std.math.maxInt(usize) / @sizeOf(f32)) return fail(error.InvalidArgument, "{d} values do not fit the address space", .{count});
    const v = values orelse return fail(error.InvalidArgument, "null values pointer", .{});
    const o = out_indices orelse return fail(error.InvalidArgument, "null output pointer", .{});
    if (@intFromPtr(v) % @alignOf(f32) != 0 or @intFromPtr(o) % @alignOf(u32) != 0)
        return fail(error.InvalidArgument, "values at 0x{x} or indices at 0x{x} not 4-byte aligned", .{ @intFromPtr(v), @intFromPtr(o) });
    argmax.argmaxRows(v[0..@intCast(count)], @intCast(row_values), o[0..@intCast(rows)]);
}

/// Top-k of each row: for row r of `rows` rows of `row_values` values (< 2^32) with ks[r] > 0
/// (at most k_max and row_values), the ks[r] largest values, largest first, ties to the lower
/// index: their indices into out_indices[r·k_max ..], their values into out_values[r·k_max ..].
/// Rows with ks[r] = 0 are left alone.
pub export fn lmh_top_k_rows(values: ?[*]const f32, rows: u64, row_values: u64, ks: ?[*]const u32, k_max: u64, out_indices: ?[*]u32, out_values: ?[*]f32) i32 {
    return call(topKRows(values, rows, row_values, ks, k_max, out_indices, out_values));
}

fn topKRows(values: ?[*]const f32, rows: u64, row_values: u64, ks: ?[*]const u32, k_max: u64, out_indices: ?[*]u32, out_values: ?[*]f32) Error!void {
    if (rows == 0 or row_values == 0 or row_values > std.math.maxInt(u32) or k_max == 0 or k_max > row_values)
        return fail(error.InvalidArgument, "top-k of {d} rows of {d} values, up to {d} each: expected at least one row of 1 to 2^32 - 1 values and 0 < k_max <= values", .{ rows, row_values, k_max });
    const count = std.math.mul(u64, rows, row_values) catch return fail(error.InvalidArgument, "{d} rows of {d} values overflow", .{ rows, row_values });
    const kept_count = std.math.mul(u64, rows, k_max) catch return fail(error.InvalidArgument, "{d} rows of {d} kept values overflow", .{ rows, k_max });
    if (count > std.math.maxInt(usize) / @sizeOf(f32) or kept_count > std.math.maxInt(usize) / @sizeOf(f32)) return fail(error.InvalidArgument, "{d} values do not fit the address space", .{count});
    const v = values orelse return fail(error.InvalidArgument, "null values pointer", .{});
    const k = ks orelse return fail(error.InvalidArgument, "null k pointer", .{});
    const i = out_indices orelse return fail(error.InvalidArgument, "null index output pointer", .{});
    const o = out_values orelse return fail(error.InvalidArgument, "null value output pointer", .{});
    for ([_]usize{ @intFromPtr(v), @intFromPtr(k), @intFromPtr(i), @intFromPtr(o) }) |address| {
        if (address % 4 != 0) return fail(error.InvalidArgument, "array at 0x{x} not 4-byte aligned", .{address});
    }
    const row_ks = k[0..@intCast(rows)];
    for (row_ks, 0..) |row_k, r| {
        if (row_k > k_max) return fail(error.InvalidArgument, "row {d}: k {d} past k_max {d}", .{ r, row_k, k_max });
    }
    top_k.topKRows(v[0..@intCast(count)], @intCast(row_values), row_ks, @intCast(k_max), i[0..@intCast(kept_count)], o[0..@intCast(kept_count)]);
}

// --- Model files, mapped read-only -------------------------------------------------------

/// Opens and maps the file at path[0..path_bytes] read-only. info_out = [file bytes, address
/// of the mapping (0 for an empty file)]. The mapping lives until the handle is closed and
/// every buffer over it is freed. Never write through the address: the pages are read-only.
pub export fn lmh_file_open(path: ?[*]const u8, path_bytes: u64, handle_out: ?*u64, info_out: ?*[2]u64) i32 {
    return call(fileOpen(path, path_bytes, handle_out, info_out));
}

fn fileOpen(path: ?[*]const u8, path_bytes: u64, handle_out: ?*u64, info_out: ?*[2]u64) Error!void {
    const h = try out(u64, handle_out);
    const info = try out([2]u64, info_out);
    const p = path orelse return fail(error.InvalidArgument, "null path pointer", .{});
    // File.open bounds the length before it reads the path.
    const file = try file_mod.File.open(p[0..@intCast(path_bytes)]);
    try insertFile(h, file);
    info.* = .{ file.bytes, if (file.memory.len == 0) 0 else @intFromPtr(file.memory.ptr) };
}

/// Gives the handle table one reference of `file`, or releases it.
fn insertFile(handle_out: *u64, file: *file_mod.File) Error!void {
    handle_out.* = files.insert(file) catch |e| {
        file.release();
        return e;
    };
}

/// Another handle on the same mapping, with its own reference (for a view that must keep
/// the mapping alive after the first handle is closed).
pub export fn lmh_file_retain(file: u64, handle_out: ?*u64) i32 {
    return call(fileRetain(file, handle_out));
}

fn fileRetain(file: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    // The reference acquire takes becomes the new handle's.
    try insertFile(h, try files.acquire(file));
}

/// Drops the handle's reference; buffers over the file keep the mapping until they are freed.
pub export fn lmh_file_close(file: u64) i32 {
    return call(fileClose(file));
}

fn fileClose(file: u64) Error!void {
    (try files.remove(file)).release();
}

/// Fails (status io) if the file was truncated or modified in place since it was opened.
pub export fn lmh_file_check(file: u64) i32 {
    return call(fileCheck(file));
}

fn fileCheck(file: u64) Error!void {
    const f = try files.acquire(file);
    defer f.release();
    try f.checkUnchanged();
}

/// A read-only buffer over bytes [offset_bytes, offset_bytes + bytes) of a mapped file,
/// without copying; it keeps the mapping alive. Host writes and kernel outputs to it are refused.
pub export fn lmh_buffer_wrap_file(device: u64, file: u64, offset_bytes: u64, bytes: u64, handle_out: ?*u64) i32 {
    return call(bufferWrapFile(device, file, offset_bytes, bytes, handle_out));
}

fn bufferWrapFile(device: u64, file: u64, offset_bytes: u64, bytes: u64, handle_out: ?*u64) Error!void {
    const h = try out(u64, handle_out);
    const d = try devices.acquire(device);
    defer d.release();
    const f = try files.acquire(file);
    defer f.release();
    try insertBuffer(h, Buffer.wrapFile(d, f, offset_bytes, bytes));
}

test {
    _ = @import("core/status.zig");
    _ = @import("core/handles.zig");
    _ = @import("core/file.zig");
    _ = @import("core/pin.zig");
    _ = @import("numerics/ggml_types.zig");
    _ = @import("numerics/lanes.zig");
    _ = @import("decode/argmax.zig");
    _ = @import("decode/top_k.zig");
    _ = @import("backends/cpu/pool.zig");
    _ = @import("backends/cpu/backend.zig");
    _ = @import("backends/cpu/decode.zig");
    _ = @import("backends/cuda/driver.zig");
    _ = @import("backends/cuda/module.zig");
}
