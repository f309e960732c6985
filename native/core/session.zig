//! A graph session (mlx-native's GraphSession): encoding records commands, `finish`
//! runs them and is the only point where the host waits. Each encode declares the
//! allocations it reads and writes to the conflict tracker, which inserts a barrier
//! on a RAW, WAR or WAW conflict with what was recorded since the last barrier.
const std = @import("std");
const status = @import("status.zig");
const handles = @import("handles.zig");
const Device = @import("device.zig").Device;
const Buffer = @import("buffer.zig").Buffer;
const Command = @import("../backends/backend.zig").Command;
const formats = @import("../numerics/formats.zig");
const Error = status.Error;
const fail = status.fail;

/// Process-wide counters, as mlx-native's barrier_count()/dispatch_count().
pub var barrier_count: std.atomic.Value(u64) = .init(0);
pub var dispatch_count: std.atomic.Value(u64) = .init(0);
pub var encode_trace: std.atomic.Value(bool) = .init(false);

pub const Session = struct {
    device: *Device,
    commands: std.ArrayList(Command) = .empty,
    /// Roots read and written since the last barrier.
    reads: [tracker_capacity]*Buffer = undefined,
    reads_len: usize = 0,
    writes: [tracker_capacity]*Buffer = undefined,
    writes_len: usize = 0,
    dispatches: u32 = 0,
    /// Set by finish or abort; a call that acquired the session before then fails cleanly.
    ended: bool = false,
    /// Encoding and finishing one session from two threads take turns.
    lock: std.c.pthread_mutex_t = .{},
    refs: std.atomic.Value(u32) = .init(1),

    const tracker_capacity = 32;
    pub const max_commands = 4096;
    pub const max_declared_buffers = 8;

    pub fn begin(device: *Device) Error!*Session {
        const session = std.heap.c_allocator.create(Session) catch return fail(error.OutOfMemory, "out of memory", .{});
        session.* = .{ .device = device };
        device.retain();
        return session;
    }

    pub fn retain(session: *Session) void {
        const before = session.refs.fetchAdd(1, .monotonic);
        std.debug.assert(before > 0);
    }

    pub fn release(session: *Session) void {
        const before = session.refs.fetchSub(1, .acq_rel);
        std.debug.assert(before > 0);
        if (before != 1) return;
        session.dropCommands();
        session.commands.deinit(std.heap.c_allocator);
        session.device.release();
        std.heap.c_allocator.destroy(session);
    }

    /// Locks the session for one encode; fails if it already ended.
    pub fn open(session: *Session) Error!void {
        _ = std.c.pthread_mutex_lock(&session.lock);
        if (session.ended) {
            _ = std.c.pthread_mutex_unlock(&session.lock);
            return fail(error.BadHandle, "session has already finished", .{});
        }
    }

    pub fn close(session: *Session) void {
        _ = std.c.pthread_mutex_unlock(&session.lock);
    }

    /// Declares what the next dispatch reads and writes (mlx-native's barrier_between).
    /// Emits a barrier on a conflict with the ranges recorded since the last one.
    pub fn barrierBetween(session: *Session, reads: []const *Buffer, writes: []const *Buffer) Error!void {
        std.debug.assert(reads.len <= max_declared_buffers and writes.len <= max_declared_buffers);
        for (writes) |w| try w.checkWritable();
        var conflict = false;
        for (reads) |r| conflict = conflict or contains(session.writes[0..session.writes_len], r.root()); // RAW
        for (writes) |w| {
            conflict = conflict or contains(session.reads[0..session.reads_len], w.root()); // WAR
            conflict = conflict or contains(session.writes[0..session.writes_len], w.root()); // WAW
        }
        const full = session.reads_len + reads.len > tracker_capacity or session.writes_len + writes.len > tracker_capacity;
        if ((conflict or full) and session.dispatches > 0) {
            try session.record(.barrier);
            session.reads_len = 0;
            session.writes_len = 0;
            _ = barrier_count.fetchAdd(1, .monotonic);
            if (encode_trace.load(.monotonic)) std.debug.print("[lmhead encode] barrier\n", .{});
        }
        // Each list holds at most max_declared_buffers new roots, far below the capacity.
        comptime std.debug.assert(2 * max_declared_buffers <= tracker_capacity);
        for (reads) |r| if (!contains(session.reads[0..session.reads_len], r.root())) {
            session.reads[session.reads_len] = r.root();
            session.reads_len += 1;
        };
        for (writes) |w| if (!contains(session.writes[0..session.writes_len], w.root())) {
            session.writes[session.writes_len] = w.root();
            session.writes_len += 1;
        };
    }

    /// Whether the last dispatch recorded (barriers aside) is an RMS norm that wrote `rows`
    /// rows of `hidden` values at exactly `input`'s place: then every value a dispatch
    /// recorded next reads there is past the dot-operand flush point (NUMERICS.md §7), since
    /// nothing else runs between the two.
    pub fn lastNormWrote(session: *const Session, input: *Buffer, rows: u32, hidden: u32) bool {
        var i = session.commands.items.len;
        while (i > 0) : (i -= 1) switch (session.commands.items[i - 1]) {
            .barrier => {},
            .rms_norm => |c| return c.output.root() == input.root() and c.output.offsetBytes() == input.offsetBytes() and
                c.params.rows == rows and c.params.hidden == hidden,
            else => return false,
        };
        return false;
    }

    fn contains(list: []const *Buffer, b: *Buffer) bool {
        for (list) |x| if (x == b) return true;
        return false;
    }

    /// Records a dispatch; its buffers stay alive and host-inaccessible until the session ends.
    pub fn dispatch(session: *Session, command: Command) Error!void {
        std.debug.assert(command != .barrier);
        var scratch: [Command.max_buffers]*Buffer = undefined;
        const used = command.buffers(&scratch);
        for (used) |b| if (b.device != session.device)
            return fail(error.InvalidArgument, "buffer belongs to another device", .{});
        try session.record(command);
        for (used) |b| b.enterFlight();
        session.dispatches += 1;
        _ = dispatch_count.fetchAdd(1, .monotonic);
        if (encode_trace.load(.monotonic)) trace(command);
    }

    fn trace(command: Command) void {
        const prefix = "[lmhead encode] ";
        switch (command) {
            .barrier => unreachable,
            .rms_norm => |c| std.debug.print(prefix ++ "rms_norm rows={d} hidden={d} eps={e}\n", .{ c.params.rows, c.params.hidden, c.params.eps }),
            .matvec => |c| std.debug.print(prefix ++ "matvec_{s} rows={d} hidden={d} vocab={d}\n", .{ formats.format(c.params.type_id).?.name, c.params.rows, c.params.hidden, c.params.vocab }),
            .softcap => |c| std.debug.print(prefix ++ "softcap values={d} cap={e}\n", .{ c.params.values, c.params.cap }),
            .count_non_finite => |c| std.debug.print(prefix ++ "count_non_finite rows={d} row_values={d}\n", .{ c.params.rows, c.params.row_values }),
        }
    }

    fn record(session: *Session, command: Command) Error!void {
        if (session.commands.items.len >= max_commands)
            return fail(error.OutOfBounds, "session holds more than {d} commands", .{max_commands});
        session.commands.append(std.heap.c_allocator, command) catch return fail(error.OutOfMemory, "out of memory", .{});
    }

    /// Runs every recorded command in order and waits. The session ends either way. Returns
    /// the device's own time for the work in ns, where it keeps one.
    pub fn finish(session: *Session) Error!?u64 {
        try session.open();
        defer session.close();
        session.ended = true;
        defer session.dropCommands();
        for (session.commands.items) |*command| {
            var scratch: [Command.max_buffers]*Buffer = undefined;
            for (command.buffers(&scratch)) |b| try b.checkFile();
        }
        return try session.device.execute(session.commands.items);
    }

    /// Ends the session without running what it recorded.
    pub fn abort(session: *Session) Error!void {
        try session.open();
        defer session.close();
        session.ended = true;
        session.dropCommands();
    }

    fn dropCommands(session: *Session) void {
        for (session.commands.items) |*command| {
            var scratch: [Command.max_buffers]*Buffer = undefined;
            for (command.buffers(&scratch)) |b| b.leaveFlight();
        }
        session.commands.clearRetainingCapacity();
    }
};

pub var sessions: handles.Table(Session, .session, 1024) = .{};
