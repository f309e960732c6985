//! The CPU backend: the reference every GPU backend must match bit for bit, and the
//! Linux fallback. Every kernel follows docs/NUMERICS.md through numerics/: the lane
//! order of lanes.zig, the decoders of formats.zig and the functions of math.zig.
//! Work is split over the device's threads by output row or element, never inside a
//! sum, so the thread count changes no value.
const std = @import("std");
const status = @import("../core/status.zig");
const session_mod = @import("../core/session.zig");
const lanes = @import("../numerics/lanes.zig");
const math = @import("../numerics/math.zig");
const formats = @import("../numerics/formats.zig");
const pool_mod = @import("cpu/pool.zig");
const Pool = pool_mod.Pool;
const Command = session_mod.Command;
const Error = status.Error;
const fail = status.fail;
const Lanes = lanes.Lanes;

extern "c" fn clock_gettime(clock: std.c.clockid_t, time: *std.c.timespec) c_int;

fn nanoseconds() u64 {
    var time: std.c.timespec = undefined;
    _ = clock_gettime(.MONOTONIC, &time);
    return @as(u64, @intCast(time.sec)) * std.time.ns_per_s + @as(u64, @intCast(time.nsec));
}

pub const max_probe_passes = 100;

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

pub const Backend = struct {
    pool: Pool,
    /// Per-worker scratch (a tile of lane-major decoded weight rows and its accumulators,
    /// or a norm row), and the shared lane-major inputs.
    worker_scratch: [pool_mod.max_workers][]align(128) f32 = undefined,
    input_scratch: []align(128) f32 = &.{},
    /// Sessions finishing on one device from two threads run one after the other.
    execute_lock: std.c.pthread_mutex_t = .{},

    pub fn create() Error!*Backend {
        const backend = std.heap.c_allocator.create(Backend) catch return fail(error.OutOfMemory, "out of memory", .{});
        const cpus = std.Thread.getCpuCount() catch 1;
        const workers: u32 = @intCast(std.math.clamp(cpus, 1, pool_mod.max_workers));
        backend.* = .{ .pool = undefined };
        for (&backend.worker_scratch) |*s| s.* = &.{};
        backend.pool.start(workers) catch {
            std.heap.c_allocator.destroy(backend);
            return fail(error.Backend, "could not start {d} worker threads", .{workers});
        };
        return backend;
    }

    pub fn destroy(backend: *Backend) void {
        backend.pool.stop();
        for (backend.worker_scratch) |s| std.heap.c_allocator.free(s);
        std.heap.c_allocator.free(backend.input_scratch);
        std.heap.c_allocator.destroy(backend);
    }

    pub fn describe(backend: *Backend, out: []u8) []const u8 {
        return std.fmt.bufPrint(out, "cpu: {d} threads, {d}-bit vectors", .{ backend.pool.worker_count, elementwise_width * 32 }) catch out;
    }

    /// The machine's own reference for the head's floor: the median of `passes` reads of
    /// `bytes` of memory (a median, since on a shared machine a single pass can be far
    /// off), with `workers` of the device's threads, each reading its share with wide
    /// loads as the matvec does. Returns bytes per second.
    pub fn readBandwidth(backend: *Backend, bytes: usize, passes: u32, workers: u32) Error!f64 {
        std.debug.assert(workers >= 1 and workers <= backend.pool.worker_count and passes >= 1 and passes <= max_probe_passes);
        _ = std.c.pthread_mutex_lock(&backend.execute_lock);
        defer _ = std.c.pthread_mutex_unlock(&backend.execute_lock);
        const Wide64 = @Vector(8, u64);
        const memory = std.heap.c_allocator.alignedAlloc(Wide64, .fromByteUnits(64), bytes / @sizeOf(Wide64)) catch
            return fail(error.OutOfMemory, "out of memory for a {d}-byte bandwidth probe", .{bytes});
        defer std.heap.c_allocator.free(memory);
        for (memory, 0..) |*v, i| v.* = @splat(i); // real pages, not the shared zero page
        const Job = struct {
            memory: []const Wide64,
            workers: u32,
            sums: [pool_mod.max_workers]u64 = @splat(0),

            fn run(context: *anyopaque, worker: u32) void {
                const job: *@This() = @ptrCast(@alignCast(context));
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
        var pass_ns: [max_probe_passes]u64 = undefined;
        for (0..passes + 1) |pass| {
            var job: Job = .{ .memory = memory, .workers = workers };
            const start = nanoseconds();
            backend.pool.run(.{ .context = &job, .run = Job.run });
            const elapsed = nanoseconds() - start;
            std.mem.doNotOptimizeAway(job.sums);
            if (pass > 0) pass_ns[pass - 1] = elapsed; // pass 0 warms the TLB and the threads
        }
        std.mem.sort(u64, pass_ns[0..passes], {}, std.sort.asc(u64));
        const median_ns = @max(pass_ns[passes / 2], 1);
        return @as(f64, @floatFromInt(memory.len * @sizeOf(Wide64))) / (@as(f64, @floatFromInt(median_ns)) * 1e-9);
    }

    /// Scratch only grows, so after the first call of a shape execution allocates nothing.
    fn reserve(backend: *Backend, command: Command) Error!void {
        switch (command) {
            .matvec => |m| {
                const row_values = lanes.chunkCount(m.k) * lanes.chunk_values;
                try grow(&backend.input_scratch, @as(usize, m.rows) * row_values);
                // A tile of decoded rows, then the tile's accumulators.
                const worker_values = tile_rows_max * (row_values + @as(usize, m.rows) * lanes.lane_count);
                for (backend.worker_scratch[0..backend.pool.worker_count]) |*s| try grow(s, worker_values);
            },
            .rms_norm => |r| for (backend.worker_scratch[0..backend.pool.worker_count]) |*s|
                try grow(s, lanes.chunkCount(r.dim) * lanes.chunk_values),
            .softcap, .barrier => {},
        }
    }

    fn grow(scratch: *[]align(128) f32, values: usize) Error!void {
        if (scratch.len >= values) return;
        const bigger = std.heap.c_allocator.alignedAlloc(f32, .fromByteUnits(128), values) catch
            return fail(error.OutOfMemory, "out of memory for {d} scratch values", .{values});
        std.heap.c_allocator.free(scratch.*);
        scratch.* = bigger;
    }

    pub fn execute(backend: *Backend, commands: []const Command) Error!void {
        _ = std.c.pthread_mutex_lock(&backend.execute_lock);
        defer _ = std.c.pthread_mutex_unlock(&backend.execute_lock);
        for (commands) |command| try backend.reserve(command);
        for (commands) |command| switch (command) {
            // One thread runs the commands in order: a barrier has nothing left to order.
            .barrier => {},
            .rms_norm => |c| backend.rmsNorm(c.input.f32s(), c.weight.f32s(), c.output.f32s(), c.rows, c.dim, c.eps, c.inv_dim),
            .matvec => |c| switch (c.format.type) {
                inline else => |t| backend.matvec(t, c.input.f32s(), c.weight.host(), c.output.f32s(), c.rows, c.k, c.vocab),
            },
            .softcap => |c| backend.softcap(c.data.f32s()[0..@intCast(c.count)], c.cap, c.inv_cap),
        };
    }

    fn rmsNorm(backend: *Backend, input: []const f32, weight: []const f32, output: []f32, rows: u32, dim: u32, eps: f32, inv_dim: f32) void {
        const Job = struct {
            backend: *Backend,
            input: []const f32,
            weight: []const f32,
            output: []f32,
            rows: u32,
            dim: u32,
            eps: f32,
            inv_dim: f32,
            next: std.atomic.Value(u32) = .init(0),

            fn run(context: *anyopaque, worker: u32) void {
                const job: *@This() = @ptrCast(@alignCast(context));
                const major = job.backend.worker_scratch[worker][0 .. lanes.chunkCount(job.dim) * lanes.chunk_values];
                while (true) {
                    const r = job.next.fetchAdd(1, .monotonic);
                    if (r >= job.rows) return;
                    const x = job.input[@as(usize, r) * job.dim ..][0..job.dim];
                    lanes.toLaneMajor(x, major);
                    const sum_squares = lanes.reduce(lanes.accumulate(@splat(0), major, major));
                    const inv = math.rsqrt(f32, sum_squares * job.inv_dim + job.eps);
                    scaleRow(x, job.weight[0..job.dim], job.output[@as(usize, r) * job.dim ..][0..job.dim], inv);
                }
            }
        };
        var job: Job = .{ .backend = backend, .input = input, .weight = weight, .output = output, .rows = rows, .dim = dim, .eps = eps, .inv_dim = inv_dim };
        backend.pool.run(.{ .context = &job, .run = Job.run });
    }

    /// y = (x·inv)·w, two roundings per value, in this order.
    fn scaleRow(x: []const f32, w: []const f32, y: []f32, inv: f32) void {
        const inv_wide: Wide = @splat(inv);
        var i: usize = 0;
        while (i + elementwise_width <= x.len) : (i += elementwise_width) {
            const xv: Wide = x[i..][0..elementwise_width].*;
            const wv: Wide = w[i..][0..elementwise_width].*;
            y[i..][0..elementwise_width].* = (xv * inv_wide) * wv;
        }
        while (i < x.len) : (i += 1) y[i] = (x[i] * inv) * w[i];
    }

    fn matvec(backend: *Backend, comptime t_type: formats.Type, input: []const f32, weight: []const u8, output: []f32, rows: u32, k: u32, vocab: u32) void {
        const row_values = lanes.chunkCount(k) * lanes.chunk_values;
        const inputs = backend.input_scratch[0 .. @as(usize, rows) * row_values];
        for (0..rows) |r| lanes.toLaneMajor(input[r * k ..][0..k], inputs[r * row_values ..][0..row_values]);

        const Job = struct {
            backend: *Backend,
            inputs: []const f32,
            weight: []const u8,
            output: []f32,
            rows: u32,
            k: u32,
            vocab: u32,
            row_bytes: usize,
            row_values: usize,
            next: std.atomic.Value(u32) = .init(0),

            /// Each worker reads its vocab rows as one sequential stream (the access
            /// pattern memory prefetchers follow best) and decodes every chunk once, so
            /// the weights are read once per call whatever the batch size. A small
            /// batch takes each chunk from the decoder straight into its accumulators;
            /// a larger one decodes a tile of 4 vocab rows and sweeps it in L1-sized
            /// blocks of k, by pairs of tile rows × groups of batch rows whose
            /// accumulators sit in registers. Each accumulator sees its values in the
            /// canonical order: the tiling only decides when, never in which order, a
            /// lane adds.
            fn run(context: *anyopaque, worker: u32) void {
                const job: *@This() = @ptrCast(@alignCast(context));
                const scratch = job.backend.worker_scratch[worker];
                const decoded = scratch[0 .. tile_rows_max * job.row_values];
                const accs: []Lanes = @as([*]Lanes, @ptrCast(@alignCast(scratch[decoded.len..].ptr)))[0 .. tile_rows_max * job.rows];
                while (true) {
                    const task_first = job.next.fetchAdd(vocab_rows_per_task, .monotonic);
                    if (task_first >= job.vocab) return;
                    const task_end = @min(task_first + vocab_rows_per_task, job.vocab);
                    switch (job.rows) {
                        inline 1...fusedRowsMax(t_type) => |group| for (task_first..task_end) |j| job.fusedRow(group, j),
                        else => {
                            var first: usize = task_first;
                            while (first < task_end) : (first += tile_rows_max) {
                                job.tile(decoded, accs, first, @min(tile_rows_max, task_end - first));
                            }
                        },
                    }
                }
            }

            /// Requests a chunk's bytes `prefetch_bytes` ahead of the decoder. A hint: it
            /// never faults, even past the end of the weights.
            inline fn prefetchAhead(row: []const u8, chunk: usize) void {
                const chunk_bytes = comptime formats.chunkBytes(t_type);
                const ahead = row.ptr + chunk * chunk_bytes + prefetch_bytes;
                var line: usize = 0;
                while (line < chunk_bytes) : (line += 64) @prefetch(ahead + line, .{ .locality = 2 });
            }

            /// Vocab row j against all `group` batch rows, each chunk used as it is decoded.
            fn fusedRow(job: *const @This(), comptime group: usize, j: usize) void {
                const row = job.weight[j * job.row_bytes ..][0..job.row_bytes];
                var acc: [group]Lanes = @splat(@splat(0));
                for (0..job.row_values / lanes.chunk_values) |c| {
                    prefetchAhead(row, c);
                    var w: [lanes.chunk_values]f32 align(64) = undefined;
                    formats.decodeChunkLanes(t_type, row, c, job.k, &w);
                    inline for (0..lanes.values_per_lane) |i| {
                        const wv: Lanes = w[i * lanes.lane_count ..][0..lanes.lane_count].*;
                        inline for (0..group) |g| {
                            const y: Lanes = job.inputs[g * job.row_values + c * lanes.chunk_values + i * lanes.lane_count ..][0..lanes.lane_count].*;
                            acc[g] = @mulAdd(Lanes, wv, y, acc[g]);
                        }
                    }
                }
                inline for (0..group) |g| job.output[g * job.vocab + j] = lanes.reduce(acc[g]);
            }

            fn tile(job: *const @This(), decoded: []f32, accs: []Lanes, first: usize, tile_rows: usize) void {
                for (0..tile_rows) |t| {
                    const row = job.weight[(first + t) * job.row_bytes ..][0..job.row_bytes];
                    for (0..job.row_values / lanes.chunk_values) |c| {
                        prefetchAhead(row, c);
                        formats.decodeChunkLanes(t_type, row, c, job.k, decoded[t * job.row_values + c * lanes.chunk_values ..][0..lanes.chunk_values]);
                    }
                }
                @memset(accs[0 .. tile_rows * job.rows], @splat(0));
                var begin: usize = 0;
                while (begin < job.row_values) : (begin += tile_block_values) {
                    const end = @min(begin + tile_block_values, job.row_values);
                    var r: usize = 0;
                    while (r < job.rows) {
                        // Full groups, then one group of the rows left, so that every weight load serves them all.
                        const group = @min(rows_per_group, job.rows - r);
                        switch (group) {
                            inline 1...rows_per_group => |g| job.pairs(g, decoded, accs, tile_rows, r, begin, end),
                            else => unreachable,
                        }
                        r += group;
                    }
                }
                for (0..tile_rows) |t| {
                    for (0..job.rows) |r| job.output[r * job.vocab + first + t] = lanes.reduce(accs[t * job.rows + r]);
                }
            }

            inline fn pairs(job: *const @This(), comptime group: usize, decoded: []const f32, accs: []Lanes, tile_rows: usize, first_row: usize, begin: usize, end: usize) void {
                var t: usize = 0;
                while (t + 2 <= tile_rows) : (t += 2) job.sweep(2, group, decoded, accs, t, first_row, begin, end);
                if (t < tile_rows) job.sweep(1, group, decoded, accs, t, first_row, begin, end);
            }

            /// Tile rows [first_t, +pair) against batch rows [first_row, +group), values [begin, end).
            inline fn sweep(job: *const @This(), comptime pair: usize, comptime group: usize, decoded: []const f32, accs: []Lanes, first_t: usize, first_row: usize, begin: usize, end: usize) void {
                var acc: [pair][group]Lanes = undefined;
                inline for (0..pair) |t| inline for (0..group) |g| {
                    acc[t][g] = accs[(first_t + t) * job.rows + first_row + g];
                };
                var p = begin;
                while (p < end) : (p += lanes.lane_count) {
                    inline for (0..group) |g| {
                        const y: Lanes = job.inputs[(first_row + g) * job.row_values + p ..][0..lanes.lane_count].*;
                        inline for (0..pair) |t| {
                            const w: Lanes = decoded[(first_t + t) * job.row_values + p ..][0..lanes.lane_count].*;
                            acc[t][g] = @mulAdd(Lanes, w, y, acc[t][g]);
                        }
                    }
                }
                inline for (0..pair) |t| inline for (0..group) |g| {
                    accs[(first_t + t) * job.rows + first_row + g] = acc[t][g];
                };
            }
        };
        var job: Job = .{
            .backend = backend,
            .inputs = inputs,
            .weight = weight,
            .output = output,
            .rows = rows,
            .k = k,
            .vocab = vocab,
            .row_bytes = @intCast(formats.rowBytes(t_type, k).?),
            .row_values = row_values,
        };
        backend.pool.run(.{ .context = &job, .run = Job.run });
    }

    /// out = tanh(x·(1/cap))·cap in place, elementwise.
    fn softcap(backend: *Backend, data: []f32, cap: f32, inv_cap: f32) void {
        const block_values = 1 << 16;
        const Job = struct {
            data: []f32,
            cap: f32,
            inv_cap: f32,
            next: std.atomic.Value(usize) = .init(0),

            fn run(context: *anyopaque, worker: u32) void {
                _ = worker;
                const job: *@This() = @ptrCast(@alignCast(context));
                const cap_wide: Wide = @splat(job.cap);
                const inv_wide: Wide = @splat(job.inv_cap);
                while (true) {
                    const first = job.next.fetchAdd(block_values, .monotonic);
                    if (first >= job.data.len) return;
                    const block = job.data[first..@min(first + block_values, job.data.len)];
                    var i: usize = 0;
                    while (i + elementwise_width <= block.len) : (i += elementwise_width) {
                        const x: Wide = block[i..][0..elementwise_width].*;
                        block[i..][0..elementwise_width].* = math.tanh(Wide, x * inv_wide) * cap_wide;
                    }
                    while (i < block.len) : (i += 1) block[i] = math.tanh(f32, block[i] * job.inv_cap) * job.cap;
                }
            }
        };
        var job: Job = .{ .data = data, .cap = cap, .inv_cap = inv_cap };
        backend.pool.run(.{ .context = &job, .run = Job.run });
    }
};
