//! What only a Mac can prove, run by `./lmhead test` on one (each test is skipped where
//! there is no Metal device): the GPU's arithmetic is what docs/NUMERICS.md assumes, and
//! every head type at every batch size and slot order returns the CPU backend's bytes.
const std = @import("std");
const Backend = @import("backend.zig").Backend;
const shapes = @import("shapes.zig");
const parity = @import("../../kernels/parity_test.zig");
const formats = @import("../../numerics/formats.zig");

/// The Metal backend on this machine, or a skip (no macOS, no Apple7 GPU).
fn openMetal() !*Backend {
    return Backend.create() catch error.SkipZigTest;
}

const probe_values = 4096;

/// The numerics probe: out[5i..5i+5] = a*b+c in one statement, fma, a*b, a+c, width.
fn runNumericsProbe(backend: *Backend, a: []const f32, b: []const f32, c: []const f32, out: []f32) !void {
    var memories: [4]Backend.Memory = undefined;
    for (&memories, [_][]const f32{ a, b, c, out }, 0..) |*m, values, i| {
        m.* = try backend.alloc(values.len * 4);
        if (i < 3) try backend.copyIn(m.*, 0, std.mem.sliceAsBytes(values));
    }
    defer for (memories) |m| backend.free(m);
    const values: u32 = @intCast(a.len);
    _ = try backend.runProbe(shapes.probe_numerics, &memories, &values, shapes.grid1(values / shapes.simd_width, shapes.simd_width));
    try backend.copyOut(memories[3], 0, std.mem.sliceAsBytes(out));
}

test "on a Mac: no contraction with the pragma, fma correctly rounded, 32-lane simdgroups, subnormals either kept or flushed to zero" {
    const backend = try openMetal();
    defer backend.destroy();
    var a: [probe_values]f32 = undefined;
    var b: [probe_values]f32 = undefined;
    var c: [probe_values]f32 = undefined;
    var out: [5 * probe_values]f32 = undefined;
    var prng = std.Random.DefaultPrng.init(0x70726f6265);
    const random = prng.random();
    for (&a, &b, &c) |*x, *y, *z| {
        x.* = 1 + random.float(f32);
        y.* = 1 + random.float(f32);
        z.* = -(x.* * y.*) * (1 + (random.float(f32) - 0.5) * 0x1p-20); // cancellation shows a fused product
    }
    // [0]: a subnormal product; [1]: a subnormal input.
    a[0], b[0], c[0] = .{ 0x1p-70, 0x1p-70, 0 };
    a[1], b[1], c[1] = .{ 0x1p-130, 1, 0 };
    try runNumericsProbe(backend, &a, &b, &c, &out);
    var distinguishing: u32 = 0;
    for (a, b, c, 0..) |x, y, z, i| {
        const unfused = x * y + z; // Zig does not contract
        const fused = @mulAdd(f32, x, y, z);
        distinguishing += @intFromBool(unfused != fused);
        try std.testing.expectEqual(@as(f32, @floatFromInt(shapes.simd_width)), out[5 * i + 4]);
        if (i < 2) continue;
        try std.testing.expectEqual(@as(u32, @bitCast(unfused)), @as(u32, @bitCast(out[5 * i])));
        try std.testing.expectEqual(@as(u32, @bitCast(fused)), @as(u32, @bitCast(out[5 * i + 1])));
    }
    try std.testing.expect(distinguishing > probe_values / 2); // the probe can tell fused from unfused
    // Flushed or kept, never anything else: the flush points make either harmless.
    try std.testing.expect(out[2] == 0 or out[2] == 0x1p-140);
    try std.testing.expect(out[5 + 3] == 0 or out[5 + 3] == 0x1p-130);
}

test "on a Mac: Metal equals the CPU backend for every head type, batch size and slot order" {
    const backend = try openMetal(); // only to skip where there is no Metal
    backend.destroy();
    const allocator = std.testing.allocator;
    var prng = std.Random.DefaultPrng.init(0x6d6163);
    const random = prng.random();
    for (formats.all, 0..) |f, index| {
        for (parity.hiddenSizes(f.type)) |hidden| {
            const case = try parity.makeCase(allocator, random, f.type, hidden, parity.eps_values[index % parity.eps_values.len]);
            defer case.deinit(allocator);
            const reference = try parity.runDevice(0, allocator, &case, case.pool);
            defer reference.deinit(allocator);
            for (parity.batch_sizes) |n| {
                var order: [parity.pool_rows]u32 = undefined;
                random.shuffle(u32, parity.identity(&order));
                const x = try case.batch(allocator, order[0..n]);
                defer allocator.free(x);
                const metal = try parity.runDevice(1, allocator, &case, x);
                defer metal.deinit(allocator);
                try parity.expectSameRows("metal", &case, reference, metal, order[0..n]);
            }
        }
    }
}
