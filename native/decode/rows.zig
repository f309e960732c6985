//! Whole rows of logits on a pool of threads, for token selection (argmax, top-k): the
//! logits a GPU copies back are in no cache, so a row costs a pass over memory, and a few
//! threads take most of a socket's bandwidth. The pool is the CPU backend's `Pool`, an
//! instance of its own, started on first use and kept for the life of the process.
const std = @import("std");
const c = std.c;
const Pool = @import("../backends/cpu/pool.zig").Pool;

/// Threads of the pool: memory, not compute, bounds a row.
const max_threads = 8;
/// Rows below this many values each run on the calling thread: a wake-up of the pool costs
/// more than they take.
pub const pooled_row_values = 1 << 14;

var pool: Pool = undefined;
var pool_started = false;
var pool_lock: c.pthread_mutex_t = .{};

/// Runs `job.work` (a struct that claims its rows with an atomic counter, as the pool's jobs
/// do) on the pool where there is more than one row of at least pooled_row_values, else on
/// the caller. One caller at a time uses the pool; a pool that cannot start leaves the work
/// to the caller.
pub fn run(job: anytype, rows: usize, row_values: usize) void {
    if (rows > 1 and row_values >= pooled_row_values) {
        _ = c.pthread_mutex_lock(&pool_lock);
        defer _ = c.pthread_mutex_unlock(&pool_lock);
        if (!pool_started) {
            const cpus = std.Thread.getCpuCount() catch 1;
            pool.start(@intCast(std.math.clamp(cpus, 1, max_threads))) catch {
                pool.stop();
                pool.worker_count = 1;
            };
            pool_started = true;
        }
        if (pool.worker_count > 1) return pool.run(job);
    }
    job.work(0);
}
