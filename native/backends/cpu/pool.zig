//! A fixed pool of worker threads, shared by the process's CPU devices. `run` hands every
//! worker (and the calling thread, as worker 0) the same job; the job splits its work
//! with an atomic counter, so the split never changes any value's arithmetic.
const std = @import("std");
const c = std.c;
const float_env = @import("float_env.zig");

pub const max_workers = 64;

const Job = struct {
    context: *anyopaque,
    run: *const fn (context: *anyopaque, worker: u32) callconv(.c) void,
};

pub const Pool = struct {
    threads: [max_workers]std.Thread = undefined,
    worker_count: u32, // including the caller
    lock: c.pthread_mutex_t = .{},
    wake: c.pthread_cond_t = .{},
    done: c.pthread_cond_t = .{},
    generation: u64 = 0,
    job: ?Job = null,
    pending: u32 = 0,
    shutdown: bool = false,

    /// Starts worker_count - 1 threads; the pool must not move afterwards.
    pub fn start(pool: *Pool, worker_count: u32) !void {
        std.debug.assert(worker_count >= 1 and worker_count <= max_workers);
        pool.* = .{ .worker_count = 1 };
        for (1..worker_count) |w| {
            pool.threads[w] = try std.Thread.spawn(.{ .stack_size = 1 << 20 }, workerMain, .{ pool, @as(u32, @intCast(w)) });
            pool.worker_count += 1;
        }
    }

    pub fn stop(pool: *Pool) void {
        _ = c.pthread_mutex_lock(&pool.lock);
        pool.shutdown = true;
        _ = c.pthread_cond_broadcast(&pool.wake);
        _ = c.pthread_mutex_unlock(&pool.lock);
        for (1..pool.worker_count) |w| pool.threads[w].join();
    }

    /// Runs `job.work(worker)` on every worker, the caller included, and waits for all.
    /// `job` is a pointer to a struct with `fn work(*@This(), worker: u32) void`.
    /// One caller at a time (the CPU backend serializes execution).
    pub fn run(pool: *Pool, job: anytype) void {
        const J = @typeInfo(@TypeOf(job)).pointer.child;
        const erased = struct {
            fn work(context: *anyopaque, worker: u32) callconv(.c) void {
                J.work(@ptrCast(@alignCast(context)), worker);
            }
        };
        pool.runErased(.{ .context = job, .run = erased.work });
    }

    /// Runs `work(job, worker)` on every worker: an entry point of another compilation
    /// unit (a CPU level's kernels), with the job in C layout.
    pub fn runWork(pool: *Pool, job: *anyopaque, work: *const fn (*anyopaque, u32) callconv(.c) void) void {
        pool.runErased(.{ .context = job, .run = work });
    }

    fn runErased(pool: *Pool, job: Job) void {
        _ = c.pthread_mutex_lock(&pool.lock);
        pool.job = job;
        pool.pending = pool.worker_count - 1;
        pool.generation += 1;
        _ = c.pthread_cond_broadcast(&pool.wake);
        _ = c.pthread_mutex_unlock(&pool.lock);

        runJob(job, 0);

        _ = c.pthread_mutex_lock(&pool.lock);
        while (pool.pending > 0) _ = c.pthread_cond_wait(&pool.done, &pool.lock);
        pool.job = null;
        _ = c.pthread_mutex_unlock(&pool.lock);
    }

    /// Every job runs in the environment float_env's test hook asks for.
    fn runJob(job: Job, worker: u32) void {
        const previous = float_env.enter();
        defer float_env.leave(previous);
        job.run(job.context, worker);
    }

    fn workerMain(pool: *Pool, worker: u32) void {
        var seen: u64 = 0;
        while (true) {
            _ = c.pthread_mutex_lock(&pool.lock);
            while (pool.generation == seen and !pool.shutdown) _ = c.pthread_cond_wait(&pool.wake, &pool.lock);
            if (pool.shutdown) {
                _ = c.pthread_mutex_unlock(&pool.lock);
                return;
            }
            seen = pool.generation;
            const job = pool.job.?;
            _ = c.pthread_mutex_unlock(&pool.lock);

            runJob(job, worker);

            _ = c.pthread_mutex_lock(&pool.lock);
            pool.pending -= 1;
            if (pool.pending == 0) _ = c.pthread_cond_signal(&pool.done);
            _ = c.pthread_mutex_unlock(&pool.lock);
        }
    }
};

test "every worker runs each job once" {
    var pool: Pool = undefined;
    try pool.start(4);
    defer pool.stop();
    const Counter = struct {
        hits: std.atomic.Value(u32) = .init(0),
        fn work(self: *@This(), worker: u32) void {
            std.debug.assert(worker < 4);
            _ = self.hits.fetchAdd(1, .monotonic);
        }
    };
    var counter: Counter = .{};
    for (0..100) |_| pool.run(&counter);
    try std.testing.expectEqual(@as(u32, 400), counter.hits.load(.monotonic));
}
