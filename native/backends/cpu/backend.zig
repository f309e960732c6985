//! The CPU backend: the reference every GPU backend must match bit for bit, and the
//! Linux fallback. Every kernel follows docs/NUMERICS.md through numerics/: the lane
//! order of lanes.zig, the decoders of formats.zig and the functions of math.zig.
//! Work is split over the device's threads by output row or element, never inside a
//! sum, so the thread count changes no value.
const std = @import("std");
const status = @import("../../core/status.zig");
const contract = @import("../backend.zig");
const params = @import("../../kernels/params.zig");
const lanes = @import("../../numerics/lanes.zig");
const math = @import("../../numerics/math.zig");
const formats = @import("../../numerics/formats.zig");
const flush = @import("../../numerics/flush.zig");
const pool_mod = @import("pool.zig");
const Pool = pool_mod.Pool;
const Command = contract.Command;
const Error = status.Error;
const fail = status.fail;
const Lanes = lanes.Lanes;
const decode = @import("decode.zig");

extern "c" fn clock_gettime(clock: std.c.clockid_t, time: *std.c.timespec) c_int;

fn nanoseconds() u64 {
    var time: std.c.timespec = undefined;
    _ = clock_gettime(.MONOTONIC, &time);
    return @as(u64, @intCast(time.sec)) * std.time.ns_per_s + @as(u64, @intCast(time.nsec));
}

/// Width of elementwise vectors; elementwise results do not depend on it.
const elementwise_width = std.simd.suggestVectorLength(f32) orelse 8;
const Wide = @Vector(elementwise_width, f32);
/// Batch rows swept together: 2 tile rows × a group of accumulators (2 registers each
/// with 512-bit vectors) and their operands fit the register file.
const rows_per_group = if (elementwise_width >= 16) 4 else 2;
/// Batches this small use each chunk straight from the decoder's registers. Dense
/// types hold more registers while decoding (their transposes), so they stop one row
/// earlier: measured, a 4-row F16 batch spilled and ran at 1/2 speed.
fn fusedRowsMax(comptime t: formats.Type) usize {
    return if (formats.of(t).block_values == 1) rows_per_group - 1 else rows_per_group;
}
/// Larger batches decode a tile of vocab rows and sweep k in blocks whose inputs
/// (a group × 4 KiB) and weights (4 rows × 4 KiB) stay in L1 (measured against
/// 2- and 8-row tiles and 2 KiB blocks: best at N = 8 and N = 32, by 5–10%).
const tile_rows_max = 4;
const tile_block_values = 4 * lanes.chunk_values;
/// Vocab rows a worker claims at a time: long enough to be a sequential stream.
const vocab_rows_per_task = 64;
/// How far ahead of the decoder each chunk's bytes are requested. The hardware
/// prefetchers alone left a 2-core Zen at half the read bandwidth; a steady software
/// stream a few pages ahead (measured: 4–16 KiB all work) reaches it.
const prefetch_bytes = 8192;

/// What every CPU device of the process shares: one pool of worker threads and its
/// scratch, so a device is a cheap handle and a forgotten one holds no thread. Sessions
/// of all CPU devices run one after the other, each on every worker.
const Engine = struct {
    lock: std.c.pthread_mutex_t = .{},
    /// Open CPU devices; the pool starts with the first and stops with the last.
    users: u32 = 0,
    pool: Pool = undefined,
    /// Per-worker scratch (a tile of lane-major decoded weight rows and its accumulators,
    /// or a norm row), and the shared lane-major inputs. Grow-only.
    worker_scratch: [pool_mod.max_workers][]align(128) f32 = @splat(&.{}),
    input_scratch: []align(128) f32 = &.{},
};
var engine: Engine = .{};

pub const Backend = struct {
    /// A device's handle on the shared engine: nothing of its own yet.
    unused: u8 = 0,

    pub const name = "cpu";
    pub const host_visible = true;
    /// An allocation: owned (64-byte aligned, from the C heap) or host memory the caller keeps.
    pub const Memory = struct { bytes: []u8, owned: bool };
    const alignment_bytes = 64;

    pub fn create() Error!*Backend {
        const backend = std.heap.c_allocator.create(Backend) catch return fail(error.OutOfMemory, "out of memory", .{});
        backend.* = .{};
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        if (engine.users == 0) {
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
        for (&engine.worker_scratch) |*s| {
            std.heap.c_allocator.free(s.*);
            s.* = &.{};
        }
        std.heap.c_allocator.free(engine.input_scratch);
        engine.input_scratch = &.{};
    }

    pub fn describe(backend: *Backend, out: []u8) []const u8 {
        return std.fmt.bufPrint(out, "cpu: {d} threads, {d}-bit vectors", .{ backend.threads(), elementwise_width * 32 }) catch out;
    }

    pub fn threads(backend: *Backend) u32 {
        _ = backend;
        return engine.pool.worker_count;
    }

    pub fn alloc(backend: *Backend, bytes: u64) Error!Memory {
        _ = backend;
        const memory = std.heap.c_allocator.alignedAlloc(u8, .fromByteUnits(alignment_bytes), @intCast(bytes)) catch
            return fail(error.OutOfMemory, "out of memory allocating {d} bytes", .{bytes});
        @memset(memory, 0);
        return .{ .bytes = memory, .owned = true };
    }

    pub fn wrap(backend: *Backend, host: [*]u8, bytes: u64) Error!Memory {
        _ = backend;
        return .{ .bytes = host[0..@intCast(bytes)], .owned = false };
    }

    pub fn free(backend: *Backend, memory: Memory) void {
        _ = backend;
        if (memory.owned) std.heap.c_allocator.free(@as([]align(alignment_bytes) u8, @alignCast(memory.bytes)));
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

    pub fn execute(backend: *Backend, commands: []const Command) Error!void {
        _ = backend;
        _ = std.c.pthread_mutex_lock(&engine.lock);
        defer _ = std.c.pthread_mutex_unlock(&engine.lock);
        for (commands) |command| try reserve(command);
        for (commands) |command| switch (command) {
            // One thread runs the commands in order: a barrier has nothing left to order.
            .barrier => {},
            .rms_norm => |c| rmsNorm(f32s(c.input), f32s(c.weight), f32s(c.output), c.params),
            .matvec => |c| switch (std.enums.fromInt(formats.Type, c.params.type_id).?) {
                inline else => |t| matvec(t, f32s(c.input), c.weight.hostBytes().?, f32s(c.output), c.params),
            },
            .softcap => |c| softcap(f32s(c.data)[0..@intCast(c.params.values)], c.params),
            .count_non_finite => |c| countNonFinite(f32s(c.data), u32s(c.counts), c.params),
        };
    }
};

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

/// The median of `passes` reads of `bytes` of memory (a median, since on a shared machine
/// a single pass can be far off), with `workers` of the pool's threads, each reading its
/// share with wide loads as the matvec does. Bytes per second. Holds the engine lock.
fn probeBandwidth(bytes: usize, passes: u32, workers: u32) Error!f64 {
    std.debug.assert(workers >= 1 and workers <= engine.pool.worker_count);
    std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
    const Wide64 = @Vector(8, u64);
    const memory = std.heap.c_allocator.alignedAlloc(Wide64, .fromByteUnits(64), bytes / @sizeOf(Wide64)) catch
        return fail(error.OutOfMemory, "out of memory for a {d}-byte bandwidth probe", .{bytes});
    defer std.heap.c_allocator.free(memory);
    for (memory, 0..) |*v, i| v.* = @splat(i); // real pages, not the shared zero page
    const Job = struct {
        memory: []const Wide64,
        workers: u32,
        sums: [pool_mod.max_workers]u64 = @splat(0),

        pub fn work(job: *@This(), worker: u32) void {
            if (worker >= job.workers) return;
            const share = job.memory.len / job.workers;
            var acc: [4]Wide64 = @splat(@splat(0));
            var i = worker * share;
            while (i + 4 <= (worker + 1) * share) : (i += 4) {
                inline for (0..4) |u| acc[u] +%= job.memory[i + u];
            }
            job.sums[worker] = @reduce(.Add, acc[0] +% acc[1] +% acc[2] +% acc[3]);
        }
    };
    var pass_ns: [contract.max_probe_passes]u64 = undefined;
    for (0..passes + 1) |pass| {
        var job: Job = .{ .memory = memory, .workers = workers };
        const start = nanoseconds();
        engine.pool.run(&job);
        const elapsed = nanoseconds() - start;
        std.mem.doNotOptimizeAway(job.sums);
        if (pass > 0) pass_ns[pass - 1] = elapsed; // pass 0 warms the TLB and the threads
    }
    std.mem.sort(u64, pass_ns[0..passes], {}, std.sort.asc(u64));
    const median_ns = @max(pass_ns[passes / 2], 1);
    return @as(f64, @floatFromInt(memory.len * @sizeOf(Wide64))) / (@as(f64, @floatFromInt(median_ns)) * 1e-9);
}

/// Scratch only grows, so after the first call of a shape execution allocates nothing.
fn reserve(command: Command) Error!void {
    switch (command) {
        .matvec => |m| {
            const row_values = lanes.chunkCount(m.params.hidden) * lanes.chunk_values;
            try grow(&engine.input_scratch, @as(usize, m.params.rows) * row_values);
            // A tile of decoded rows, then the tile's accumulators.
            for (engine.worker_scratch[0..engine.pool.worker_count]) |*s| try grow(s, matvecScratchValues(m.params.rows, row_values));
        },
        .rms_norm => |r| for (engine.worker_scratch[0..engine.pool.worker_count]) |*s|
            try grow(s, lanes.chunkCount(r.params.hidden) * lanes.chunk_values),
        .softcap, .count_non_finite, .barrier => {},
    }
}

fn matvecScratchValues(rows: usize, row_values: usize) usize {
    return tile_rows_max * (row_values + rows * lanes.lane_count);
}

fn grow(scratch: *[]align(128) f32, values: usize) Error!void {
    if (scratch.len >= values) return;
    const bigger = std.heap.c_allocator.alignedAlloc(f32, .fromByteUnits(128), values) catch
        return fail(error.OutOfMemory, "out of memory for {d} scratch values", .{values});
    std.heap.c_allocator.free(scratch.*);
    scratch.* = bigger;
}

/// NUMERICS.md §4: ss by the canonical dot product, then mean, + eps, rsqrt, two roundings
/// per value. A row whose mean + eps overflows to +Inf cannot be normalised: its values
/// become NaN (never zeros), so the head reports the row.
fn rmsNorm(input: []const f32, weight: []const f32, output: []f32, p: params.RmsNorm) void {
    std.debug.assert(input.len >= @as(usize, p.rows) * p.hidden and output.len >= @as(usize, p.rows) * p.hidden);
    std.debug.assert(weight.len >= p.hidden);
    const Job = struct {
        input: []const f32,
        weight: []const f32,
        output: []f32,
        p: params.RmsNorm,
        next: std.atomic.Value(u32) = .init(0),

        pub fn work(job: *@This(), worker: u32) void {
            const hidden: usize = job.p.hidden;
            const major = engine.worker_scratch[worker][0 .. lanes.chunkCount(hidden) * lanes.chunk_values];
            while (true) {
                const r = job.next.fetchAdd(1, .monotonic);
                if (r >= job.p.rows) return;
                const x = job.input[r * hidden ..][0..hidden];
                lanes.toLaneMajor(x, major);
                flush.flushSlice(major, flush.dot_operand_min);
                const sum_squares = lanes.reduce(lanes.accumulate(@splat(0), major, major));
                const v = sum_squares * job.p.inv_hidden + flush.flush(f32, job.p.eps, flush.value_min);
                const inv = if (v == std.math.inf(f32)) std.math.nan(f32) else math.rsqrt(f32, v);
                scaleRow(x, job.weight[0..hidden], job.output[r * hidden ..][0..hidden], inv);
            }
        }
    };
    var job: Job = .{ .input = input, .weight = weight, .output = output, .p = p };
    engine.pool.run(&job);
}

/// y = (x·inv)·w, two roundings per value, in this order, between the flush points.
fn scaleRow(x: []const f32, w: []const f32, y: []f32, inv: f32) void {
    const inv_wide: Wide = @splat(inv);
    var i: usize = 0;
    while (i + elementwise_width <= x.len) : (i += elementwise_width) {
        y[i..][0..elementwise_width].* = scale(Wide, x[i..][0..elementwise_width].*, w[i..][0..elementwise_width].*, inv_wide);
    }
    while (i < x.len) : (i += 1) y[i] = scale(f32, x[i], w[i], inv);
}

inline fn scale(comptime V: type, x: V, w: V, inv: V) V {
    const t = flush.flush(V, x, flush.dot_operand_min) * inv;
    return flush.flush(V, t * flush.flush(V, w, flush.value_min), flush.dot_operand_min);
}

fn matvec(comptime t: formats.Type, input: []const f32, weight: []const u8, output: []f32, p: params.Matvec) void {
    const row_values = @as(usize, p.chunks) * lanes.chunk_values;
    std.debug.assert(p.chunks == lanes.chunkCount(p.hidden) and p.row_bytes == formats.rowBytes(t, p.hidden).?);
    std.debug.assert(weight.len == @as(usize, p.row_bytes) * p.vocab);
    std.debug.assert(output.len >= @as(usize, p.rows) * p.vocab and input.len >= @as(usize, p.rows) * p.hidden);
    const inputs = engine.input_scratch[0 .. @as(usize, p.rows) * row_values];
    for (0..p.rows) |r| lanes.toLaneMajor(input[r * p.hidden ..][0..p.hidden], inputs[r * row_values ..][0..row_values]);
    flush.flushSlice(inputs, flush.dot_operand_min);
    var job: MatvecJob(t) = .{ .inputs = inputs, .weight = weight, .output = output, .p = p, .row_values = row_values };
    engine.pool.run(&job);
}

/// Each worker reads its vocab rows as one sequential stream (the access pattern memory
/// prefetchers follow best) and decodes every chunk once, so the weights are read once
/// per call whatever the batch size. A small batch takes each chunk from the decoder
/// straight into its accumulators; a larger one decodes a tile of 4 vocab rows and sweeps
/// it in L1-sized blocks of the hidden values, by pairs of tile rows × groups of batch
/// rows whose accumulators sit in registers. Each accumulator sees its values in the
/// canonical order: the tiling only decides when, never in which order, a lane adds.
fn MatvecJob(comptime t: formats.Type) type {
    return struct {
        const Job = @This();
        inputs: []const f32,
        weight: []const u8,
        output: []f32,
        p: params.Matvec,
        row_values: usize,
        next: std.atomic.Value(u32) = .init(0),

        pub fn work(job: *Job, worker: u32) void {
            const scratch = engine.worker_scratch[worker];
            std.debug.assert(scratch.len >= matvecScratchValues(job.p.rows, job.row_values));
            const decoded = scratch[0 .. tile_rows_max * job.row_values];
            const accs: []Lanes = @as([*]Lanes, @ptrCast(@alignCast(scratch[decoded.len..].ptr)))[0 .. tile_rows_max * job.p.rows];
            while (true) {
                const task_first = job.next.fetchAdd(vocab_rows_per_task, .monotonic);
                if (task_first >= job.p.vocab) return;
                const task_end = @min(task_first + vocab_rows_per_task, job.p.vocab);
                switch (job.p.rows) {
                    inline 1...fusedRowsMax(t) => |group| for (task_first..task_end) |j| job.fusedRow(group, j),
                    else => {
                        var first: usize = task_first;
                        while (first < task_end) : (first += tile_rows_max) {
                            job.tile(decoded, accs, first, @min(tile_rows_max, task_end - first));
                        }
                    },
                }
            }
        }

        fn weightRow(job: *const Job, j: usize) []const u8 {
            std.debug.assert(j < job.p.vocab);
            return job.weight[j * job.p.row_bytes ..][0..job.p.row_bytes];
        }

        /// Requests a chunk's bytes `prefetch_bytes` ahead of the decoder. A hint: it never
        /// faults, even past the end of the weights.
        inline fn prefetchAhead(row: []const u8, chunk: usize) void {
            const chunk_bytes = comptime decode.chunkBytes(t);
            const ahead = row.ptr + chunk * chunk_bytes + prefetch_bytes;
            var line: usize = 0;
            while (line < chunk_bytes) : (line += 64) @prefetch(ahead + line, .{ .locality = 2 });
        }

        /// A chunk of weights in lane-major order, F32 and BF16 ones past their flush point.
        inline fn decodeChunk(row: []const u8, chunk: usize, values: usize, out: *[lanes.chunk_values]f32) void {
            decode.chunkLanes(t, row, chunk, values, out);
            if (t == .f32 or t == .bf16) {
                inline for (0..lanes.values_per_lane) |i| {
                    const w: Lanes = out[i * lanes.lane_count ..][0..lanes.lane_count].*;
                    out[i * lanes.lane_count ..][0..lanes.lane_count].* = flush.flush(Lanes, w, flush.dot_operand_min);
                }
            }
        }

        /// Vocab row j against all `group` batch rows, each chunk used as it is decoded.
        fn fusedRow(job: *const Job, comptime group: usize, j: usize) void {
            const row = job.weightRow(j);
            var acc: [group]Lanes = @splat(@splat(0));
            for (0..job.p.chunks) |c| {
                prefetchAhead(row, c);
                var w: [lanes.chunk_values]f32 align(64) = undefined;
                decodeChunk(row, c, job.p.hidden, &w);
                inline for (0..lanes.values_per_lane) |i| {
                    const wv: Lanes = w[i * lanes.lane_count ..][0..lanes.lane_count].*;
                    inline for (0..group) |g| {
                        const y: Lanes = job.inputs[g * job.row_values + c * lanes.chunk_values + i * lanes.lane_count ..][0..lanes.lane_count].*;
                        acc[g] = @mulAdd(Lanes, wv, y, acc[g]);
                    }
                }
            }
            inline for (0..group) |g| job.output[g * job.p.vocab + j] = lanes.reduce(acc[g]);
        }

        fn tile(job: *const Job, decoded: []f32, accs: []Lanes, first: usize, tile_rows: usize) void {
            std.debug.assert(tile_rows >= 1 and tile_rows <= tile_rows_max);
            for (0..tile_rows) |r| {
                const row = job.weightRow(first + r);
                for (0..job.p.chunks) |c| {
                    prefetchAhead(row, c);
                    decodeChunk(row, c, job.p.hidden, decoded[r * job.row_values + c * lanes.chunk_values ..][0..lanes.chunk_values]);
                }
            }
            const rows = job.p.rows;
            @memset(accs[0 .. tile_rows * rows], @splat(0));
            var begin: usize = 0;
            while (begin < job.row_values) : (begin += tile_block_values) {
                const end = @min(begin + tile_block_values, job.row_values);
                var r: usize = 0;
                while (r < rows) {
                    // Full groups, then one group of the rows left, so that every weight load serves them all.
                    const group = @min(rows_per_group, rows - r);
                    switch (group) {
                        inline 1...rows_per_group => |g| job.pairs(g, decoded, accs, tile_rows, r, begin, end),
                        else => unreachable,
                    }
                    r += group;
                }
            }
            for (0..tile_rows) |tr| {
                for (0..rows) |r| job.output[r * job.p.vocab + first + tr] = lanes.reduce(accs[tr * rows + r]);
            }
        }

        inline fn pairs(job: *const Job, comptime group: usize, decoded: []const f32, accs: []Lanes, tile_rows: usize, first_row: usize, begin: usize, end: usize) void {
            var tr: usize = 0;
            while (tr + 2 <= tile_rows) : (tr += 2) job.sweep(2, group, decoded, accs, tr, first_row, begin, end);
            if (tr < tile_rows) job.sweep(1, group, decoded, accs, tr, first_row, begin, end);
        }

        /// Tile rows [first_t, +pair) against batch rows [first_row, +group), values [begin, end).
        inline fn sweep(job: *const Job, comptime pair: usize, comptime group: usize, decoded: []const f32, accs: []Lanes, first_t: usize, first_row: usize, begin: usize, end: usize) void {
            const rows = job.p.rows;
            var acc: [pair][group]Lanes = undefined;
            inline for (0..pair) |tr| inline for (0..group) |g| {
                acc[tr][g] = accs[(first_t + tr) * rows + first_row + g];
            };
            var at = begin;
            while (at < end) : (at += lanes.lane_count) {
                inline for (0..group) |g| {
                    const y: Lanes = job.inputs[(first_row + g) * job.row_values + at ..][0..lanes.lane_count].*;
                    inline for (0..pair) |tr| {
                        const w: Lanes = decoded[(first_t + tr) * job.row_values + at ..][0..lanes.lane_count].*;
                        acc[tr][g] = @mulAdd(Lanes, w, y, acc[tr][g]);
                    }
                }
            }
            inline for (0..pair) |tr| inline for (0..group) |g| {
                accs[(first_t + tr) * rows + first_row + g] = acc[tr][g];
            };
        }
    };
}

/// out = tanh(x·(1/cap))·cap in place, elementwise.
fn softcap(data: []f32, p: params.Softcap) void {
    const Job = struct {
        data: []f32,
        p: params.Softcap,
        next: std.atomic.Value(usize) = .init(0),
        const block_values = 1 << 16;

        pub fn work(job: *@This(), worker: u32) void {
            _ = worker;
            // cap and 1/cap are flushed too: a cap past 2^126 has a subnormal reciprocal.
            const cap = flush.flush(f32, job.p.cap, flush.value_min);
            const inv_cap = flush.flush(f32, job.p.inv_cap, flush.value_min);
            while (true) {
                const first = job.next.fetchAdd(block_values, .monotonic);
                if (first >= job.data.len) return;
                const block = job.data[first..@min(first + block_values, job.data.len)];
                var i: usize = 0;
                while (i + elementwise_width <= block.len) : (i += elementwise_width) {
                    block[i..][0..elementwise_width].* = capOne(Wide, block[i..][0..elementwise_width].*, @splat(cap), @splat(inv_cap));
                }
                while (i < block.len) : (i += 1) block[i] = capOne(f32, block[i], cap, inv_cap);
            }
        }

        /// tanh(x·inv_cap)·cap, with the input, the argument and the result flushed.
        inline fn capOne(comptime V: type, x: V, cap: V, inv_cap: V) V {
            const u = flush.flush(V, flush.flush(V, x, flush.value_min) * inv_cap, flush.value_min);
            return flush.flush(V, math.tanh(V, u) * cap, flush.value_min);
        }
    };
    var job: Job = .{ .data = data, .p = p };
    engine.pool.run(&job);
}

/// counts[r] = NaN and ±Inf values in row r: the head's per-row validity, read by the host.
fn countNonFinite(data: []const f32, counts: []u32, p: params.CountNonFinite) void {
    std.debug.assert(data.len >= @as(usize, p.rows) * p.row_values and counts.len >= p.rows);
    const Job = struct {
        data: []const f32,
        counts: []u32,
        p: params.CountNonFinite,
        next: std.atomic.Value(u32) = .init(0),

        pub fn work(job: *@This(), worker: u32) void {
            _ = worker;
            const U = @Vector(elementwise_width, u32);
            const exponent: U = @splat(0x7F80_0000);
            while (true) {
                const r = job.next.fetchAdd(1, .monotonic);
                if (r >= job.p.rows) return;
                const row = job.data[@as(usize, r) * job.p.row_values ..][0..job.p.row_values];
                var count: u32 = 0;
                var i: usize = 0;
                while (i + elementwise_width <= row.len) : (i += elementwise_width) {
                    const bits: U = @bitCast(@as(Wide, row[i..][0..elementwise_width].*));
                    // Widened before the sum: @intFromBool gives u1 lanes, whose sum wraps.
                    count += @reduce(.Add, @as(U, @intFromBool((bits & exponent) == exponent)));
                }
                while (i < row.len) : (i += 1) count += @intFromBool(!std.math.isFinite(row[i]));
                job.counts[r] = count;
            }
        }
    };
    var job: Job = .{ .data = data, .counts = counts, .p = p };
    engine.pool.run(&job);
}
