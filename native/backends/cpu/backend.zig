//! The CPU backend: the reference every GPU backend must match bit for bit, and the
//! Linux fallback. This file is the host side: the shared worker pool and scratch, the
//! backend contract, and each dispatch handed to the kernels (kernels.zig) of the best
//! CPU level the machine supports. Work is split over the workers by output row or
//! element, never inside a sum, so neither the thread count nor the level changes a value.
const std = @import("std");
const builtin = @import("builtin");
const status = @import("../../core/status.zig");
const contract = @import("../backend.zig");
const params = @import("../../kernels/params.zig");
const lanes = @import("../../numerics/lanes.zig");
const formats = @import("../../numerics/formats.zig");
const flush = @import("../../numerics/flush.zig");
const kernels = @import("kernels.zig");
const cpuid = @import("cpuid.zig");
const pool_mod = @import("pool.zig");
const Pool = pool_mod.Pool;
const Command = contract.Command;
const Error = status.Error;
const fail = status.fail;

extern "c" fn clock_gettime(clock: std.c.clockid_t, time: *std.c.timespec) c_int;

fn nanoseconds() u64 {
    var time: std.c.timespec = undefined;
    _ = clock_gettime(.MONOTONIC, &time);
    return @as(u64, @intCast(time.sec)) * std.time.ns_per_s + @as(u64, @intCast(time.nsec));
}

/// The kernels of every CPU level built in (build.zig), best first.
const levels = blk: {
    const names = @import("cpu_levels").names;
    var tables: [names.len]*const kernels.Table = undefined;
    for (names, &tables) |name, *t| t.* = @extern(*const kernels.Table, .{ .name = "lmh_cpu_kernels_" ++ name });
    break :blk tables;
};

/// The best level this CPU runs: the first whose instruction-set features it has, or the
/// one LMHEAD_CPU_LEVEL names, if this CPU runs it (so tests can compare the levels).
fn pickLevel() Error!*const kernels.Table {
    const env: []const u8 = if (std.c.getenv("LMHEAD_CPU_LEVEL")) |w| std.mem.span(w) else "";
    const wanted: ?[]const u8 = if (env.len > 0) env else null;
    for (levels) |level| {
        if (wanted) |w| if (!std.mem.eql(u8, w, std.mem.span(level.name))) continue;
        if (runs(level)) return level;
        if (wanted != null) return fail(error.Unsupported, "LMHEAD_CPU_LEVEL {s}: this CPU lacks its instructions", .{wanted.?});
    }
    if (wanted) |w| return fail(error.Unsupported, "LMHEAD_CPU_LEVEL {s} is not a CPU level of this library", .{w});
    unreachable; // the last level is the architecture's baseline
}

fn runs(level: *const kernels.Table) bool {
    if (builtin.cpu.arch != .x86_64) return true; // one level: the target's own CPU
    var needed: std.Target.Cpu.Feature.Set = .{ .ints = level.features };
    for (&needed.ints, cpuid.known.ints) |*n, k| n.* &= k;
    return cpuid.features().isSuperSetOf(needed);
}

/// What every CPU device of the process shares: one pool of worker threads and its
/// scratch, so a device is a cheap handle and a forgotten one holds no thread. Sessions
/// of all CPU devices run one after the other, each on every worker.
const Engine = struct {
    lock: std.c.pthread_mutex_t = .{},
    /// Open CPU devices; the pool starts with the first and stops with the last.
    users: u32 = 0,
    pool: Pool = undefined,
    /// The kernels of the best CPU level this machine supports, chosen when the pool starts.
    kernels: *const kernels.Table = undefined,
    /// Per-worker scratch (a tile of lane-major decoded weight rows and its accumulators,
    /// or a norm row), each worker_values long, and the shared lane-major inputs. Grow-only.
    worker_scratch: [pool_mod.max_workers][*]align(128) f32 = undefined,
    worker_values: usize = 0,
    input_scratch: []align(128) f32 = &.{},

    fn scratch(e: *const Engine) kernels.Scratch {
        return .{ .workers = &e.worker_scratch, .values = e.worker_values };
    }
};
var engine: Engine = .{};

pub const Backend = struct {
    /// A device's handle on the shared engine: nothing of its own yet.
    unused: u8 = 0,

    pub const name = "cpu";
    pub const host_visible = true;
    /// An allocation: the backend's own (allocOwned) or host memory the caller keeps.
    pub const Memory = struct { bytes: []u8, owner: Owner };
    pub const Owner = enum { heap, mapping, caller };

    pub fn create() Error!*Backend {
        const backend = std.heap.c_allocator.create(Backend) catch return fail(error.OutOfMemory, "out of memory", .{});
        backend.* = .{};
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        if (engine.users == 0) {
            engine.kernels = pickLevel() catch |e| {
                std.heap.c_allocator.destroy(backend);
                return e;
            };
            const cpus = std.Thread.getCpuCount() catch 1;
            const workers: u32 = @intCast(std.math.clamp(cpus, 1, pool_mod.max_workers));
            engine.pool.start(workers) catch {
                std.heap.c_allocator.destroy(backend);
                return fail(error.Backend, "could not start {d} worker threads", .{workers});
            };
        }
        engine.users += 1;
        return backend;
    }

    pub fn destroy(backend: *Backend) void {
        std.heap.c_allocator.destroy(backend);
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        std.debug.assert(engine.users > 0);
        engine.users -= 1;
        if (engine.users > 0) return;
        engine.pool.stop();
        if (engine.worker_values > 0) for (engine.worker_scratch[0..engine.pool.worker_count]) |s| {
            std.heap.c_allocator.free(s[0..engine.worker_values]);
        };
        engine.worker_values = 0;
        std.heap.c_allocator.free(engine.input_scratch);
        engine.input_scratch = &.{};
    }

    pub fn describe(backend: *Backend, out: []u8) []const u8 {
        const k = engine.kernels;
        return std.fmt.bufPrint(out, "cpu: {d} threads, {s} kernels, {d}-bit vectors", .{ backend.threads(), k.name, k.vector_bits }) catch out;
    }

    pub fn threads(backend: *Backend) u32 {
        _ = backend;
        return engine.pool.worker_count;
    }

    pub fn alloc(backend: *Backend, bytes: u64) Error!Memory {
        _ = backend;
        return allocOwned(std.math.cast(usize, bytes) orelse return fail(error.OutOfMemory, "cannot allocate {d} bytes on this machine", .{bytes}));
    }

    pub fn wrap(backend: *Backend, host: [*]u8, bytes: u64) Error!Memory {
        _ = backend;
        return .{ .bytes = host[0..@intCast(bytes)], .owner = .caller };
    }

    pub fn free(backend: *Backend, memory: Memory) void {
        _ = backend;
        freeOwned(memory);
    }

    pub fn address(memory: Memory) usize {
        return @intFromPtr(memory.bytes.ptr);
    }

    pub fn hostBytes(memory: Memory) []u8 {
        return memory.bytes;
    }

    pub fn copyIn(backend: *Backend, memory: Memory, offset_bytes: u64, src: []const u8) Error!void {
        _ = backend;
        @memcpy(memory.bytes[@intCast(offset_bytes)..][0..src.len], src);
    }

    pub fn copyOut(backend: *Backend, memory: Memory, offset_bytes: u64, dst: []u8) Error!void {
        _ = backend;
        @memcpy(dst, memory.bytes[@intCast(offset_bytes)..][0..dst.len]);
    }

    /// The machine's own reference for the head's floor: [all of the pool's threads, one thread].
    pub fn readBandwidth(backend: *Backend, bytes: u64, passes: u32) Error![2]f64 {
        _ = backend;
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        return .{
            try probeBandwidth(@intCast(bytes), passes, engine.pool.worker_count),
            try probeBandwidth(@intCast(bytes), passes, 1),
        };
    }

    /// f32 fmas per second with every worker: the median of `passes` timed runs.
    pub fn fmaRate(backend: *Backend, passes: u32) Error!f64 {
        _ = backend;
        std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        const rounds = 1 << 22;
        var sinks: [pool_mod.max_workers]f32 = undefined;
        var pass_ns: [contract.max_probe_passes]u64 = undefined;
        for (0..passes + 1) |pass| {
            var job: kernels.FmaProbeJob = .{ .rounds = rounds, .sinks = &sinks };
            const start = nanoseconds();
            engine.pool.runWork(&job, engine.kernels.fma_probe);
            if (pass > 0) pass_ns[pass - 1] = nanoseconds() - start; // pass 0 wakes the workers
        }
        std.mem.doNotOptimizeAway(sinks);
        std.mem.sort(u64, pass_ns[0..passes], {}, std.sort.asc(u64));
        const fmas = @as(u64, rounds) * engine.kernels.fma_probe_round_fmas * engine.pool.worker_count;
        return @as(f64, @floatFromInt(fmas)) / (@as(f64, @floatFromInt(@max(pass_ns[passes / 2], 1))) * 1e-9);
    }

    /// Runs the commands on the pool. No device clock of its own: the host's wait is the time.
    pub fn execute(backend: *Backend, commands: []const Command, registry: *const contract.Registry) Error!?u64 {
        _ = registry; // the kernels are compiled into the library
        _ = backend;
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        for (commands) |command| try reserve(command);
        for (commands) |command| dispatch(command);
        return null;
    }
};

const alignment_bytes = 64;

/// Whether allocations of huge_page_bytes or more are mappings of their own, aligned to huge
/// pages and advised to be backed by them (Linux's transparent huge pages, which many systems
/// give only to memory that asks: `enabled` = madvise). A model file needs nothing: Linux maps
/// its large page-cache folios with huge pages by itself (Linux 6.18 on ext4: the default
/// artifact's mapping 549 of its 606 MB `FilePmdMapped` during `./lmhead decode`, read cold),
/// so a head in a buffer of ours (the bench's, a user's) now reads through the same pages as
/// one in a file. Through 4 KiB pages each stream takes a TLB miss every 4 KiB, and under a
/// hypervisor a miss walks two page tables. Measured on a 2-core Intel Xeon with AVX-512 under
/// KVM (huge pages on madvise), Gemma's head, 3 interleaved rounds (2026-12-06): the read probe
/// 33–34 GB/s against 28–30; Q4_0, Q8_0 and Q4_K 2–8% less a call at N = 1 in every round (Q6_K
/// from 2% more to 10% less), the dense types there from 6% less to 6% more; at N = 8 and 32
/// from 11% less to 14% more with no consistent sign but BF16's, 2–5% more in every round.
const huge_pages = builtin.os.tag == .linux;
const huge_page_bytes = 2 << 20;

/// `bytes` of zeroed memory of the backend's own, 64-byte aligned: from the C heap, or from
/// huge_page_bytes on a mapping of its own (huge_pages).
fn allocOwned(bytes: usize) Error!Backend.Memory {
    if (huge_pages and bytes >= huge_page_bytes) return .{ .bytes = try mapHuge(bytes), .owner = .mapping };
    const memory = std.heap.c_allocator.alignedAlloc(u8, .fromByteUnits(alignment_bytes), bytes) catch
        return fail(error.OutOfMemory, "out of memory allocating {d} bytes", .{bytes});
    @memset(memory, 0);
    return .{ .bytes = memory, .owner = .heap };
}

fn freeOwned(memory: Backend.Memory) void {
    switch (memory.owner) {
        .heap => std.heap.c_allocator.free(@as([]align(alignment_bytes) u8, @alignCast(memory.bytes))),
        .mapping => if (comptime huge_pages) unmap(hugeWindow(memory.bytes)) else unreachable,
        .caller => {},
    }
}

/// `bytes` at the start of a mapping of whole huge pages, aligned to them and advised to be
/// backed by them; zeroed, as every new anonymous mapping is.
fn mapHuge(bytes: usize) Error![]u8 {
    if (bytes > std.math.maxInt(usize) - 2 * huge_page_bytes) return fail(error.OutOfMemory, "cannot allocate {d} bytes on this machine", .{bytes});
    const window = std.mem.alignForward(usize, bytes, huge_page_bytes);
    // One huge page of slack to align the window in, given back around it.
    const mapped = std.posix.mmap(null, window + huge_page_bytes, .{ .READ = true, .WRITE = true }, .{ .TYPE = .PRIVATE, .ANONYMOUS = true }, -1, 0) catch
        return fail(error.OutOfMemory, "out of memory allocating {d} bytes", .{bytes});
    const head = std.mem.alignForward(usize, @intFromPtr(mapped.ptr), huge_page_bytes) - @intFromPtr(mapped.ptr);
    if (head > 0) unmap(mapped[0..head]);
    unmap(mapped[head + window ..]); // never empty: head < huge_page_bytes
    const memory: []align(huge_page_bytes) u8 = @alignCast(mapped[head..][0..window]);
    // A hint: where huge pages are off (or given to all memory) nothing changes.
    std.posix.madvise(memory.ptr, memory.len, std.os.linux.MADV.HUGEPAGE) catch {};
    return memory[0..bytes];
}

/// Gives `bytes` of a mapping back. Where that fails (only for want of a kernel mapping entry,
/// when the range splits one it shares) the range stays mapped: address space, never a fault.
fn unmap(bytes: []u8) void {
    _ = std.os.linux.munmap(bytes.ptr, bytes.len);
}

/// The whole mapping mapHuge made for `bytes`.
fn hugeWindow(bytes: []u8) []align(huge_page_bytes) u8 {
    const start: [*]align(huge_page_bytes) u8 = @alignCast(bytes.ptr);
    return start[0..std.mem.alignForward(usize, bytes.len, huge_page_bytes)];
}

fn f32s(buffer: *contract.Buffer) []f32 {
    const bytes = buffer.hostBytes().?;
    std.debug.assert(@intFromPtr(bytes.ptr) % 4 == 0);
    return @as([*]f32, @ptrCast(@alignCast(bytes.ptr)))[0 .. bytes.len / 4];
}

fn u32s(buffer: *contract.Buffer) []u32 {
    const bytes = buffer.hostBytes().?;
    std.debug.assert(@intFromPtr(bytes.ptr) % 4 == 0);
    return @as([*]u32, @ptrCast(@alignCast(bytes.ptr)))[0 .. bytes.len / 4];
}

/// Streams each worker of the bandwidth probe reads at once, interleaved a few vectors at a
/// time: the floor is the machine's, not one access pattern's. Measured on a 2-core Xeon
/// (AVX-512; 2026-12-03, shared): in 20 interleaved pairs 4 streams a thread read a median
/// 1.36 times as much as one (11-22 GB/s against 8-17), and 8 no more than 4.
const probe_streams = 4;

/// The median of `passes` reads of `bytes` of memory (a median, since on a shared machine
/// a single pass can be far off), with `workers` of the pool's threads, each reading its
/// share as probe_streams streams with wide loads. Bytes per second. Holds the engine lock.
fn probeBandwidth(bytes: usize, passes: u32, workers: u32) Error!f64 {
    std.debug.assert(workers >= 1 and workers <= engine.pool.worker_count);
    std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
    const Wide64 = @Vector(8, u64);
    // The same kind of memory as a head's buffer (allocOwned), so that its pages read alike.
    const owned = try allocOwned(bytes);
    defer freeOwned(owned);
    const memory = @as([*]Wide64, @ptrCast(@alignCast(owned.bytes.ptr)))[0 .. bytes / @sizeOf(Wide64)];
    for (memory, 0..) |*v, i| v.* = @splat(i); // real pages, not the shared zero page
    // Vectors each stream reads, in whole steps of 4.
    const stream_len = memory.len / workers / probe_streams / 4 * 4;
    std.debug.assert(stream_len >= 4); // bytes ≥ 2^24 (lmh_device_read_bandwidth), workers ≤ max_workers
    const Job = struct {
        memory: []const Wide64,
        workers: u32,
        stream_len: usize,
        sums: [pool_mod.max_workers]u64 = @splat(0),

        pub fn work(job: *@This(), worker: u32) void {
            if (worker >= job.workers) return;
            const streams = job.memory[worker * job.stream_len * probe_streams ..][0 .. job.stream_len * probe_streams];
            var acc: [4]Wide64 = @splat(@splat(0));
            var i: usize = 0;
            while (i < job.stream_len) : (i += 4) {
                inline for (0..probe_streams) |s| inline for (0..4) |u| {
                    acc[u] +%= streams[s * job.stream_len + i + u];
                };
            }
            job.sums[worker] = @reduce(.Add, acc[0] +% acc[1] +% acc[2] +% acc[3]);
        }
    };
    var pass_ns: [contract.max_probe_passes]u64 = undefined;
    for (0..passes + 1) |pass| {
        var job: Job = .{ .memory = memory, .workers = workers, .stream_len = stream_len };
        const start = nanoseconds();
        engine.pool.run(&job);
        const elapsed = nanoseconds() - start;
        std.mem.doNotOptimizeAway(job.sums);
        if (pass > 0) pass_ns[pass - 1] = elapsed; // pass 0 warms the TLB and the threads
    }
    std.mem.sort(u64, pass_ns[0..passes], {}, std.sort.asc(u64));
    const median_ns = @max(pass_ns[passes / 2], 1);
    const read_bytes = stream_len * probe_streams * workers * @sizeOf(Wide64);
    return @as(f64, @floatFromInt(read_bytes)) / (@as(f64, @floatFromInt(median_ns)) * 1e-9);
}

/// Scratch only grows, so after the first call of a shape execution allocates nothing.
fn reserve(command: Command) Error!void {
    switch (command) {
        .matvec => |m| {
            const row_values = lanes.chunkCount(m.params.hidden) * lanes.chunk_values;
            try growInputs(@as(usize, m.params.rows) * row_values);
            try growWorkers(kernels.matvecScratchValues(formats.format(m.params.type_id).?.type, m.params.rows, lanes.chunkCount(m.params.hidden)));
        },
        .rms_norm => |r| try growWorkers(lanes.chunkCount(r.params.hidden) * lanes.chunk_values),
        .softcap, .count_non_finite, .barrier => {},
    }
}

fn growInputs(values: usize) Error!void {
    if (engine.input_scratch.len >= values) return;
    const bigger = try allocScratch(values);
    std.heap.c_allocator.free(engine.input_scratch);
    engine.input_scratch = bigger;
}

fn growWorkers(values: usize) Error!void {
    if (engine.worker_values >= values) return;
    const workers = engine.pool.worker_count;
    var bigger: [pool_mod.max_workers][*]align(128) f32 = undefined;
    for (0..workers) |w| bigger[w] = (allocScratch(values) catch |e| {
        for (bigger[0..w]) |s| std.heap.c_allocator.free(s[0..values]);
        return e;
    }).ptr;
    if (engine.worker_values > 0) for (engine.worker_scratch[0..workers]) |s| std.heap.c_allocator.free(s[0..engine.worker_values]);
    engine.worker_scratch = bigger;
    engine.worker_values = values;
}

fn allocScratch(values: usize) Error![]align(128) f32 {
    return std.heap.c_allocator.alignedAlloc(f32, .fromByteUnits(128), values) catch
        fail(error.OutOfMemory, "out of memory for {d} scratch values", .{values});
}

/// Hands one command to every worker, running the kernels of the engine's CPU level.
fn dispatch(command: Command) void {
    const k = engine.kernels;
    switch (command) {
        // One thread runs the commands in order: a barrier has nothing left to order.
        .barrier => {},
        .rms_norm => |c| {
            std.debug.assert(c.input.bytes >= @as(u64, c.params.rows) * c.params.hidden * 4 and c.weight.bytes >= @as(u64, c.params.hidden) * 4);
            var job: kernels.RmsNormJob = .{ .input = f32s(c.input).ptr, .weight = f32s(c.weight).ptr, .output = f32s(c.output).ptr, .scratch = engine.scratch(), .p = c.params };
            engine.pool.runWork(&job, k.rms_norm);
        },
        .matvec => |c| {
            const p = c.params;
            std.debug.assert(c.weight.bytes == @as(u64, p.row_bytes) * p.vocab and c.output.bytes >= @as(u64, p.rows) * p.vocab * 4);
            // The activations in lane-major order, past their flush point, once for every worker.
            const row_values = @as(usize, p.chunks) * lanes.chunk_values;
            const inputs = engine.input_scratch[0 .. @as(usize, p.rows) * row_values];
            const input = f32s(c.input);
            for (0..p.rows) |r| lanes.toLaneMajor(input[r * p.hidden ..][0..p.hidden], inputs[r * row_values ..][0..row_values]);
            flush.flushSlice(inputs, flush.dot_operand_min);
            const index = for (formats.all, 0..) |f, i| {
                if (@backingInt(f.type) == p.type_id) break i;
            } else unreachable; // admitted at encode
            var job: kernels.MatvecJob = .{ .inputs = inputs.ptr, .weight = c.weight.hostBytes().?.ptr, .output = f32s(c.output).ptr, .scratch = engine.scratch(), .p = p };
            engine.pool.runWork(&job, k.matvec[index]);
        },
        .softcap => |c| {
            std.debug.assert(c.data.bytes >= c.params.values * 4);
            var job: kernels.SoftcapJob = .{ .data = f32s(c.data).ptr, .p = c.params };
            engine.pool.runWork(&job, k.softcap);
        },
        .count_non_finite => |c| {
            std.debug.assert(c.params.segments == 1); // segments are a GPU backend's choice
            std.debug.assert(c.data.bytes >= @as(u64, c.params.rows) * c.params.row_values * 4 and c.counts.bytes >= @as(u64, c.params.rows) * 4);
            var job: kernels.CountJob = .{ .data = f32s(c.data).ptr, .counts = u32s(c.counts).ptr, .p = c.params };
            engine.pool.runWork(&job, k.count_non_finite);
        },
    }
}

/// A file of /proc/self, read whole (they report no size, so a reader that trusts the size
/// reads nothing).
fn readProc(gpa: std.mem.Allocator, path: [*:0]const u8) ![]u8 {
    const linux = std.os.linux;
    const rc = linux.open(path, .{ .CLOEXEC = true }, 0);
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
    const fd: i32 = @intCast(rc);
    defer _ = linux.close(fd);
    var out: std.ArrayList(u8) = .empty;
    errdefer out.deinit(gpa);
    while (true) {
        try out.ensureUnusedCapacity(gpa, 1 << 16);
        const n = linux.read(fd, out.unusedCapacitySlice().ptr, out.unusedCapacitySlice().len);
        if (linux.errno(n) != .SUCCESS) return error.Unexpected;
        if (n == 0) return out.toOwnedSlice(gpa);
        out.items.len += n;
    }
}

/// The length and VmFlags line of the mapping that starts at `start` (in `smaps`), or null.
fn mappingAt(smaps: []const u8, start: usize) !?struct { bytes: usize, flags: []const u8 } {
    var prefix_buffer: [32]u8 = undefined;
    const prefix = try std.fmt.bufPrint(&prefix_buffer, "{x}-", .{start});
    var lines = std.mem.splitScalar(u8, smaps, '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, prefix)) continue;
        const end = try std.fmt.parseInt(usize, line[prefix.len..std.mem.findScalar(u8, line, ' ').?], 16);
        while (lines.next()) |field| if (std.mem.startsWith(u8, field, "VmFlags:")) return .{ .bytes = end - start, .flags = field };
    }
    return null;
}

/// The process's mapped bytes (VmSize).
fn mappedBytes(gpa: std.mem.Allocator) !usize {
    const status_text = try readProc(gpa, "/proc/self/status");
    defer gpa.free(status_text);
    const at = std.mem.find(u8, status_text, "VmSize:").?;
    var fields = std.mem.tokenizeAny(u8, status_text[at + "VmSize:".len ..], " \t\n");
    return 1024 * try std.fmt.parseInt(usize, fields.next().?, 10);
}

test "a large allocation is zeroed whole huge pages of its own, advised to be huge, and given back whole" {
    if (!huge_pages) return error.SkipZigTest;
    const gpa = std.testing.allocator;
    const bytes = 3 * huge_page_bytes + 100;
    const memory = try allocOwned(bytes);
    const start = @intFromPtr(memory.bytes.ptr);
    try std.testing.expectEqual(Backend.Owner.mapping, memory.owner);
    try std.testing.expectEqual(bytes, memory.bytes.len);
    try std.testing.expectEqual(0, start % huge_page_bytes);
    try std.testing.expect(std.mem.allEqual(u8, memory.bytes, 0));
    @memset(memory.bytes, 0xA5);
    const held = try readProc(gpa, "/proc/self/smaps");
    defer gpa.free(held);
    const m = (try mappingAt(held, start)).?;
    try std.testing.expectEqual(4 * huge_page_bytes, m.bytes); // no slack kept around it
    try std.testing.expect(std.mem.find(u8, m.flags, " hg") != null); // MADV_HUGEPAGE
    freeOwned(memory);
    const freed = try readProc(gpa, "/proc/self/smaps");
    defer gpa.free(freed);
    try std.testing.expectEqual(null, try mappingAt(freed, start));

    // The slack around each window is given back too (a huge page an allocation): the address
    // space stays as it was, but for a few KiB of the test allocator's own.
    const before = try mappedBytes(gpa);
    for (0..64) |_| freeOwned(try allocOwned(huge_page_bytes + 1));
    try std.testing.expect(try mappedBytes(gpa) < before + huge_page_bytes / 2);

    const small = try allocOwned(huge_page_bytes - 1);
    defer freeOwned(small);
    try std.testing.expectEqual(Backend.Owner.heap, small.owner);
    try std.testing.expectEqual(0, @intFromPtr(small.bytes.ptr) % alignment_bytes);
    try std.testing.expect(std.mem.allEqual(u8, small.bytes, 0));
}

test "a worker's matvec scratch holds pair vectors only for the types and batches that may run them" {
    const chunks = lanes.chunkCount(2816);
    // A quantized head at 64 rows needs its tiles' scratch alone, as at 40 rows a dense one.
    const tiles_64 = kernels.matvecScratchValues(.q8_0, 64, chunks);
    try std.testing.expectEqual(tiles_64, kernels.matvecScratchValues(.q6_k, 64, chunks));
    try std.testing.expectEqual(kernels.matvecScratchValues(.q8_0, 40, chunks), kernels.matvecScratchValues(.f16, 40, chunks));
    // A dense one at 64 rows holds whole decoded rows: several times as much.
    try std.testing.expect(kernels.matvecScratchValues(.f16, 64, chunks) > 4 * tiles_64);
}
