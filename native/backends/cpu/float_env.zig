//! The floating-point environment the CPU backend's jobs run in. lmhead needs no special
//! one: the flush points of docs/NUMERICS.md make every result independent of how a device
//! treats subnormals. This module exists to test that claim: with `flush_subnormals` on,
//! every worker of a pool (the calling thread included, while it works as worker 0) runs
//! its jobs with subnormal inputs and results flushed to zero, as a GPU that flushes does
//! (x86-64: MXCSR FTZ and DAZ; aarch64: FPCR.FZ).
const std = @import("std");
const builtin = @import("builtin");
const Pool = @import("pool.zig").Pool;

/// Test hook: when on, jobs run with subnormals flushed. Off by default, and in production.
pub var flush_subnormals: std.atomic.Value(bool) = .init(false);

/// x86-64 and aarch64, through LLVM (the self-hosted backends' assemblers take no
/// register-indirect memory operand).
pub const supported = builtin.zig_backend == .stage2_llvm and switch (builtin.cpu.arch) {
    .x86_64, .aarch64 => true,
    else => false,
};

/// The control register: MXCSR on x86-64, FPCR on aarch64.
pub const Control = if (!supported) void else switch (builtin.cpu.arch) {
    .x86_64 => u32,
    .aarch64 => u64,
    else => unreachable,
};

/// MXCSR bit 15 (FTZ: flush results) and bit 6 (DAZ: inputs are zero); FPCR bit 24 (FZ: both).
const flush_bits: Control = if (!supported) {} else switch (builtin.cpu.arch) {
    .x86_64 => (1 << 15) | (1 << 6),
    .aarch64 => 1 << 24,
    else => unreachable,
};

fn read() Control {
    if (!supported) return;
    switch (builtin.cpu.arch) {
        .x86_64 => {
            var value: u32 = undefined;
            asm volatile ("stmxcsr (%[address])"
                :
                : [address] "r" (&value),
                : .{ .memory = true });
            return value;
        },
        .aarch64 => return asm volatile ("mrs %[value], fpcr"
            : [value] "=r" (-> u64),
        ),
        else => unreachable,
    }
}

fn write(value: Control) void {
    if (!supported) return;
    switch (builtin.cpu.arch) {
        .x86_64 => asm volatile ("ldmxcsr (%[address])"
            :
            : [address] "r" (&value),
            : .{ .memory = true, .mxcsr = true }),
        .aarch64 => asm volatile ("msr fpcr, %[value]"
            :
            : [value] "r" (value),
            : .{ .memory = true, .fpcr = true }),
        else => unreachable,
    }
}

/// Sets flushing on the calling thread; returns the state `restore` puts back.
pub fn flushOn() Control {
    comptime std.debug.assert(supported);
    const previous = read();
    write(previous | flush_bits);
    return previous;
}

pub fn restore(previous: Control) void {
    write(previous);
}

/// Around each job of a pool: flushing on if the hook asks for it. Returns what `leave` restores.
pub fn enter() ?Control {
    if (!supported or !flush_subnormals.load(.monotonic)) return null;
    return flushOn();
}

pub fn leave(previous: ?Control) void {
    if (previous) |p| restore(p);
}

/// 2^-100 · 2^-30: a product whose exact value is subnormal.
fn subnormalProduct(a: *const volatile f32, b: *const volatile f32) u32 {
    return @bitCast(a.* * b.*);
}

test "flushOn makes a subnormal product zero on this thread, restore brings it back" {
    if (!supported) return error.SkipZigTest;
    const a: f32 = 0x1p-100;
    const b: f32 = 0x1p-30;
    try std.testing.expectEqual(@as(u32, 0x0008_0000), subnormalProduct(&a, &b)); // 2^-130
    const previous = flushOn();
    const flushed = subnormalProduct(&a, &b);
    std.mem.doNotOptimizeAway(flushed); // computed before the mode is restored
    restore(previous);
    try std.testing.expectEqual(@as(u32, 0), flushed);
    try std.testing.expectEqual(@as(u32, 0x0008_0000), subnormalProduct(&a, &b));
}

test "the hook flushes on every worker of a pool, and only while it is on" {
    if (!supported) return error.SkipZigTest;
    var pool: Pool = undefined;
    try pool.start(3);
    defer pool.stop();
    const Probe = struct {
        results: [3]u32 = @splat(0xFFFF_FFFF),
        pub fn work(probe: *@This(), worker: u32) void {
            const a: f32 = 0x1p-100;
            const b: f32 = 0x1p-30;
            probe.results[worker] = subnormalProduct(&a, &b);
        }
    };
    for ([_]bool{ true, false }) |on| {
        flush_subnormals.store(on, .monotonic);
        defer flush_subnormals.store(false, .monotonic);
        var probe: Probe = .{};
        pool.run(&probe);
        for (probe.results) |r| try std.testing.expectEqual(@as(u32, if (on) 0 else 0x0008_0000), r);
    }
    // The calling thread ran as worker 0 and got its own state back.
    const a: f32 = 0x1p-100;
    const b: f32 = 0x1p-30;
    try std.testing.expectEqual(@as(u32, 0x0008_0000), subnormalProduct(&a, &b));
}
