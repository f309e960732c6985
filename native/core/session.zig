//! A graph session (mlx-native's GraphSession): encoding records commands, `finish`
//! runs them and is the only point where the host waits. Each encode declares the
//! allocations it reads and writes to the conflict tracker, which inserts a barrier
//! on a RAW, WAR or WAW conflict with what was recorded since the last barrier.
const std = @import("std");
const status = @import("status.zig");
const handles = @import("handles.zig");
const device_mod = @import("device.zig");
const formats = @import("../numerics/formats.zig");
const Error = status.Error;
const fail = status.fail;
const Device = device_mod.Device;
const Buffer = device_mod.Buffer;

/// Process-wide counters, as mlx-native's barrier_count()/dispatch_count().
pub var barrier_count: std.atomic.Value(u64) = .init(0);
pub var dispatch_count: std.atomic.Value(u64) = .init(0);
pub var encode_trace: std.atomic.Value(bool) = .init(false);

pub const Command = union(enum) {
    barrier,
    rms_norm: struct { input: *Buffer, weight: *Buffer, output: *Buffer, rows: u32, dim: u32, eps: f32, inv_dim: f32 },
    matvec: struct { input: *Buffer, weight: *Buffer, output: *Buffer, format: formats.Format, rows: u32, k: u32, vocab: u32 },
    softcap: struct { data: *Buffer, count: u64, cap: f32, inv_cap: f32 },

    fn buffers(command: *const Command, out: *[3]*Buffer) []*Buffer {
        switch (command.*) {
            .barrier => return out[0..0],
            .rms_norm => |c| out.* = .{ c.input, c.weight, c.output },
            .matvec => |c| out.* = .{ c.input, c.weight, c.output },
            .softcap => |c| {
                out[0] = c.data;
                return out[0..1];
            },
        }
        return out[0..3];
    }
};

pub const Session = struct {
    device: *Device,
    commands: std.ArrayList(Command) = .empty,
    reads: [tracker_capacity]*Buffer = undefined,
    reads_len: usize = 0,
    writes: [tracker_capacity]*Buffer = undefined,
    writes_len: usize = 0,
    dispatches: u32 = 0,

    const tracker_capacity = 32;
    pub const max_commands = 4096;

    pub fn begin(device: *Device) Error!*Session {
        const session = std.heap.c_allocator.create(Session) catch return fail(error.OutOfMemory, "out of memory", .{});
        session.* = .{ .device = device };
        device.retain();
        return session;
    }

    /// Declares what the next dispatch reads and writes (mlx-native's barrier_between).
    /// Emits a barrier on a conflict with the ranges recorded since the last one.
    pub fn barrierBetween(session: *Session, reads: []const *Buffer, writes: []const *Buffer) Error!void {
        var conflict = false;
        for (reads) |r| {
            if (contains(session.writes[0..session.writes_len], r.root())) conflict = true; // RAW
        }
        for (writes) |w| {
            if (contains(session.reads[0..session.reads_len], w.root())) conflict = true; // WAR
            if (contains(session.writes[0..session.writes_len], w.root())) conflict = true; // WAW
        }
        const full = session.reads_len + reads.len > tracker_capacity or session.writes_len + writes.len > tracker_capacity;
        if ((conflict or full) and session.dispatches > 0) {
            try session.record(.barrier);
            session.reads_len = 0;
            session.writes_len = 0;
            _ = barrier_count.fetchAdd(1, .monotonic);
            if (encode_trace.load(.monotonic)) std.debug.print("[lmhead encode] barrier\n", .{});
        }
        if (session.reads_len + reads.len > tracker_capacity or session.writes_len + writes.len > tracker_capacity)
            return fail(error.InvalidArgument, "barrier_between: more than {d} ranges at once", .{tracker_capacity});
        for (reads) |r| if (!contains(session.reads[0..session.reads_len], r.root())) {
            session.reads[session.reads_len] = r.root();
            session.reads_len += 1;
        };
        for (writes) |w| if (!contains(session.writes[0..session.writes_len], w.root())) {
            session.writes[session.writes_len] = w.root();
            session.writes_len += 1;
        };
    }

    fn contains(list: []const *Buffer, b: *Buffer) bool {
        for (list) |x| if (x == b) return true;
        return false;
    }

    /// Records a dispatch; its buffers stay alive and host-inaccessible until finish.
    pub fn dispatch(session: *Session, command: Command) Error!void {
        var scratch: [3]*Buffer = undefined;
        const used = command.buffers(&scratch);
        for (used) |b| if (b.device != session.device)
            return fail(error.InvalidArgument, "buffer belongs to another device", .{});
        try session.record(command);
        for (used) |b| {
            b.retain();
            _ = b.in_flight.fetchAdd(1, .acq_rel);
        }
        session.dispatches += 1;
        _ = dispatch_count.fetchAdd(1, .monotonic);
        if (encode_trace.load(.monotonic)) switch (command) {
            .barrier => unreachable,
            .rms_norm => |c| std.debug.print("[lmhead encode] rms_norm rows={d} dim={d} eps={e}\n", .{ c.rows, c.dim, c.eps }),
            .matvec => |c| std.debug.print("[lmhead encode] matvec_{s} rows={d} k={d} vocab={d}\n", .{ c.format.name, c.rows, c.k, c.vocab }),
            .softcap => |c| std.debug.print("[lmhead encode] softcap count={d} cap={e}\n", .{ c.count, c.cap }),
        };
    }

    fn record(session: *Session, command: Command) Error!void {
        if (session.commands.items.len >= max_commands)
            return fail(error.OutOfBounds, "session holds more than {d} commands", .{max_commands});
        session.commands.append(std.heap.c_allocator, command) catch return fail(error.OutOfMemory, "out of memory", .{});
    }

    /// Runs every recorded command in order and waits; then releases the session.
    pub fn finish(session: *Session) Error!void {
        defer session.destroy();
        switch (session.device.backend) {
            .cpu => |backend| try backend.execute(session.commands.items),
            .metal, .cuda => unreachable,
        }
    }

    /// Drops the recorded work without running it.
    pub fn destroy(session: *Session) void {
        for (session.commands.items) |*command| {
            var scratch: [3]*Buffer = undefined;
            for (command.buffers(&scratch)) |b| {
                _ = b.in_flight.fetchSub(1, .acq_rel);
                b.release();
            }
        }
        session.commands.deinit(std.heap.c_allocator);
        session.device.release();
        std.heap.c_allocator.destroy(session);
    }
};

pub var sessions: handles.Table(Session, .session, 1024) = .{};
