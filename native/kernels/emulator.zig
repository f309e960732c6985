//! The host emulator (host/emulator.c): the GPU kernel source compiled for this machine,
//! each simdgroup's 32 lanes run as fibers. `dispatch` runs a whole grid as a GPU command
//! encoder would: a kernel by its registry name, its parameter struct (kernels/params.zig),
//! buffer pointers in the kernel's binding order, and the grid. Linked into the tests only.
const std = @import("std");

pub const Error = error{ UnknownKernel, BadParams, BadBuffers, BadGrid, DivergentShuffle, OutOfMemory, BadPrefetch, BadStage };

/// A 1-D grid, as Metal's dispatchThreadgroups takes it: `threadgroups` groups of
/// `threads` threads (a multiple of 32, the simdgroup width).
pub const Grid = struct {
    threadgroups: u32,
    threads: u32,
};

/// One build of emulator.c, by its symbol prefix: build.zig builds the source's default
/// tuning, another one, a staged one and two with resident rows.
pub fn Emulator(comptime prefix: []const u8) type {
    return struct {
        const dispatch_c = @extern(*const fn (u32, *const anyopaque, u64, [*]const ?*anyopaque, u32, *const [3]u32, *const [3]u32) callconv(.c) c_int, .{ .name = prefix ++ "_dispatch" });
        const kernel_index_c = @extern(*const fn ([*]const u8, u64) callconv(.c) c_int, .{ .name = prefix ++ "_kernel_index" });
        const rsqrt_c = @extern(*const fn ([*]const f32, [*]f32, u64) callconv(.c) void, .{ .name = prefix ++ "_rsqrt" });
        const tanh_c = @extern(*const fn ([*]const f32, [*]f32, u64) callconv(.c) void, .{ .name = prefix ++ "_tanh" });
        const decode_c = @extern(*const fn (u32, [*]const u8, *[256]f32) callconv(.c) void, .{ .name = prefix ++ "_decode" });
        const layout_entry_c = @extern(*const fn (u32, *[*:0]const u8, *u64) callconv(.c) c_int, .{ .name = prefix ++ "_layout_entry" });
        const bulk_stage_bytes_c = @extern(*const fn (u32) callconv(.c) u64, .{ .name = prefix ++ "_bulk_stage_bytes" });
        const lane_layout_c = @extern(*const fn (u32) callconv(.c) u32, .{ .name = prefix ++ "_lane_layout" });
        const lane_row_bytes_c = @extern(*const fn (u32) callconv(.c) u32, .{ .name = prefix ++ "_lane_row_bytes" });
        const rows_per_pass_c = @extern(*const fn () callconv(.c) u32, .{ .name = prefix ++ "_rows_per_pass" });
        const area_bytes_c = @extern(*const fn (u32) callconv(.c) u64, .{ .name = prefix ++ "_area_bytes" });

        /// The kernel named `name` (core/registry.zig's names, e.g. "matvec_Q6_K_f32").
        pub fn kernel(name: []const u8) Error!u32 {
            const index = kernel_index_c(name.ptr, name.len);
            return if (index < 0) error.UnknownKernel else @intCast(index);
        }

        /// Runs `kernel_index` over `grid` and returns when every simdgroup has finished.
        /// `params` points to the kernel's parameter struct; `buffers` are host pointers
        /// the caller keeps large enough, as a GPU backend's buffers would be.
        pub fn dispatch(kernel_index: u32, parameters: anytype, buffers: []const ?*anyopaque, grid: Grid) Error!void {
            const P = @typeInfo(@TypeOf(parameters)).pointer.child;
            comptime std.debug.assert(@typeInfo(P).@"struct".layout == .@"extern");
            const threadgroups = [3]u32{ grid.threadgroups, 1, 1 };
            const threads = [3]u32{ grid.threads, 1, 1 };
            const result = dispatch_c(kernel_index, parameters, @sizeOf(P), buffers.ptr, @intCast(buffers.len), &threadgroups, &threads);
            return switch (result) {
                0 => {},
                1 => error.UnknownKernel,
                2 => error.BadParams,
                3 => error.BadBuffers,
                4 => error.BadGrid,
                5 => error.DivergentShuffle,
                6 => error.OutOfMemory,
                7 => error.BadPrefetch,
                8 => error.BadStage,
                else => unreachable,
            };
        }

        /// The kernel source's lmh_rsqrt on each value, as one GPU lane computes it.
        pub fn rsqrt(x: []const f32, y: []f32) void {
            std.debug.assert(x.len == y.len);
            rsqrt_c(x.ptr, y.ptr, x.len);
        }

        /// The kernel source's lmh_tanh on each value, as one GPU lane computes it.
        pub fn tanh(x: []const f32, y: []f32) void {
            std.debug.assert(x.len == y.len);
            tanh_c(x.ptr, y.ptr, x.len);
        }

        /// One chunk of a quantized row (4-byte aligned) decoded as the kernel source's lanes
        /// decode it, each with its own scale.
        pub fn decode(t: formats.Type, chunk: []const u8, values: *[256]f32) void {
            const f = formats.format(@backingInt(t)).?;
            std.debug.assert(f.block_values > 1 and chunk.len == 256 / f.block_values * f.block_bytes);
            std.debug.assert(@intFromPtr(chunk.ptr) % 4 == 0);
            decode_c(@backingInt(t), chunk.ptr, values);
        }

        /// Whether this build's matvec of `t` reads the lane layout (kernels.h
        /// LMH_LANE_LAYOUT): its weights then go through "lane_relayout" first.
        pub fn laneLayout(t: formats.Type) bool {
            return lane_layout_c(@backingInt(t)) != 0;
        }

        /// The build's LMH_ROWS_PER_PASS.
        pub fn rowsPerPass() u32 {
            return rows_per_pass_c();
        }

        /// kernels.h's bytes of a row of the lane layout's copy, for rows of `row_bytes`.
        pub fn laneRowBytes(row_bytes: u32) u32 {
            return lane_row_bytes_c(row_bytes);
        }

        /// kernels.h's bytes of a bulk stage for vocab rows of `row_bytes` (a build with a bulk
        /// ring only: `retuned`, of 3 vocab rows per simdgroup).
        pub fn bulkStageBytes(row_bytes: u32) u64 {
            return bulk_stage_bytes_c(row_bytes);
        }

        /// kernels.h's bytes of a threadgroup's resident rows at `hidden` (the `resident`
        /// build only).
        pub fn areaBytes(hidden: u32) u64 {
            return area_bytes_c(hidden);
        }

        /// Entry `index` of the C layouts (a size or an offset, named as the Zig structs
        /// spell it: "Matvec", "Matvec.rows", "Q6_K.d"), or null past the last.
        pub fn layoutEntry(index: u32) ?struct { name: []const u8, bytes: u64 } {
            var name: [*:0]const u8 = undefined;
            var bytes: u64 = undefined;
            if (layout_entry_c(index, &name, &bytes) == 0) return null;
            return .{ .name = std.mem.span(name), .bytes = bytes };
        }
    };
}

/// The source's default tuning (LMH_VOCAB_ROWS_PER_SIMDGROUP, LMH_ROWS_PER_PASS), quantized
/// heads read as the file holds them. Every other build reads Q4_0, IQ4_NL and Q8_0 heads (and
/// Q5_0's, below 8 rows a pass) in the lane layout (LMH_LANE_LAYOUT), as CUDA's modules do.
pub const default = Emulator("lmh_emulator");
/// Another tuning: 3 vocab rows per simdgroup, 2 rows per pass, steps of 2 chunks, each simdgroup's
/// rows prefetched (every address checked to lie in the weights), and a quantized type's rows
/// brought whole into a bulk ring of 2 stages (LMH_BULK_STAGES; every copy checked too), and
/// an entry point per input, so the norm's output is read as it is (LMH_INPUT_NORMED), as in
/// CUDA's modules of 1 and 2 rows per pass.
pub const retuned = Emulator("lmh_emulator_retuned");
/// 5 vocab rows per simdgroup, 4 rows per pass, and the quantized types' chunks staged in a
/// ring of 2 (LMH_STAGES; every copy checked to come from the weights).
pub const staged = Emulator("lmh_emulator_staged");
/// 3 vocab rows per simdgroup, 8 rows per pass, and the batch's rows copied a pass at a time
/// into the simdgroup's area, every pass reading its activations there (LMH_RESIDENT), the
/// quantized types' chunks staged in a ring of 2 (LMH_STAGES), and the rows past the last
/// full pass in passes of halving sizes (LMH_PAD_REST 0; the other builds pad them).
pub const resident = Emulator("lmh_emulator_resident");
/// 2 vocab rows per simdgroup, 8 rows per pass, resident rows, and a tile short of a pass
/// run as one full pass of its rows and copies of its last (LMH_PAD_RESIDENT).
pub const resident_padded = Emulator("lmh_emulator_resident_padded");

// ---------------------------------------------------------------------------------------
// Tests of the emulator itself; parity_test.zig runs the kernels against the CPU backend.

const params = @import("params.zig");
const formats = @import("../numerics/formats.zig");
const math = @import("../numerics/math.zig");
const registry = @import("../core/registry.zig");

test "every kernel of the registry has an entry point, in every build" {
    var name: [64]u8 = undefined;
    const fixed = [_]registry.Kernel{ .rms_norm, .softcap, .count_non_finite };
    inline for (.{ default, retuned, staged, resident, resident_padded }) |build| {
        for (fixed) |k| _ = try build.kernel(k.name(&name));
        for (std.enums.values(formats.Type)) |t| {
            const k: registry.Kernel = .{ .matvec = t };
            _ = try build.kernel(k.name(&name));
        }
    }
    try std.testing.expectError(error.UnknownKernel, default.kernel("matvec_Q6_K"));
}

test "a shuffle gives each lane its partner's or its source's value, round after round, in every simdgroup" {
    var out: [4 * 6 * 32]u32 = @splat(0xFFFF_FFFF);
    const mode: u32 = 0;
    try default.dispatch(try default.kernel("emulator_shuffles"), &Mode{ .mode = mode }, &.{@ptrCast(&out)}, .{ .threadgroups = 2, .threads = 64 });
    for (0..4) |s| for (0..6) |k| for (0..32) |l| {
        const from = if (k < 5) l ^ (@as(usize, 16) >> @intCast(k)) else (7 * l + 3) % 32;
        try std.testing.expectEqual(@as(u32, @intCast((k << 8) | from)), out[192 * s + 32 * k + l]);
    };
}

const Mode = extern struct { mode: u32 };

test "a shuffle some lanes skip, take with another mask or kind, or take from no lane fails the dispatch" {
    const kernel = try default.kernel("emulator_diverges");
    var unused: u32 = 0;
    const grid: Grid = .{ .threadgroups = 1, .threads = 32 };
    for ([_]u32{ 0, 1, 3, 4 }) |mode| {
        try std.testing.expectError(error.DivergentShuffle, default.dispatch(kernel, &Mode{ .mode = mode }, &.{@ptrCast(&unused)}, grid));
    }
    try default.dispatch(kernel, &Mode{ .mode = 2 }, &.{@ptrCast(&unused)}, grid);
}

test "dispatch refuses a wrong kernel, parameter struct, buffer list or grid" {
    var data: [64]f32 = @splat(1);
    const buffer: ?*anyopaque = @ptrCast(&data);
    const softcap = try default.kernel("softcap_f32");
    const p: params.Softcap = .{ .values = 64, .cap = 30, .inv_cap = 1.0 / 30.0 };
    const grid: Grid = .{ .threadgroups = 1, .threads = 32 };
    try std.testing.expectError(error.UnknownKernel, default.dispatch(1000, &p, &.{buffer}, grid));
    const count: params.CountNonFinite = .{ .rows = 1, .row_values = 64 };
    try std.testing.expectError(error.BadParams, default.dispatch(softcap, &count, &.{buffer}, grid));
    const matvec: params.Matvec = .{ .rows = 1, .hidden = 32, .vocab = 1, .type_id = @backingInt(formats.Type.q8_0), .row_bytes = 34, .chunks = 1 };
    try std.testing.expectError(error.BadParams, default.dispatch(try default.kernel("matvec_Q4_0_f32"), &matvec, &.{ buffer, buffer, buffer }, grid));
    try std.testing.expectError(error.BadBuffers, default.dispatch(softcap, &p, &.{ buffer, buffer }, grid));
    try std.testing.expectError(error.BadBuffers, default.dispatch(softcap, &p, &.{null}, grid));
    try std.testing.expectError(error.BadGrid, default.dispatch(softcap, &p, &.{buffer}, .{ .threadgroups = 1, .threads = 48 }));
    try std.testing.expectError(error.BadGrid, default.dispatch(softcap, &p, &.{buffer}, .{ .threadgroups = 0, .threads = 32 }));
    try default.dispatch(softcap, &p, &.{buffer}, grid);
    try std.testing.expectEqual(math.tanh(f32, 1.0 / 30.0) * 30, data[63]);
}

test "params.h and the kernel source's block structs agree with params.zig and formats.zig" {
    var checked: u32 = 0;
    inline for (.{ .{ "RmsNorm", params.RmsNorm }, .{ "Matvec", params.Matvec }, .{ "Softcap", params.Softcap }, .{ "CountNonFinite", params.CountNonFinite } }) |s| {
        checked += try expectLayout(s[0], s[1]);
    }
    inline for (formats.all) |f| {
        if (f.block_values > 1) checked += try expectLayout(f.name, formats.Block(f.type));
    }
    try expectEntry("stage_row_bytes", params.stage_row_bytes);
    checked += 1;
    var entries: u32 = 0;
    while (default.layoutEntry(entries)) |_| entries += 1;
    try std.testing.expectEqual(checked, entries);
}

/// Checks the C entries of struct `name` against T; returns how many it checked.
fn expectLayout(comptime name: []const u8, comptime T: type) !u32 {
    try expectEntry(name, @sizeOf(T));
    const fields = @typeInfo(T).@"struct".field_names;
    inline for (fields) |field| try expectEntry(name ++ "." ++ field, @offsetOf(T, field));
    return 1 + fields.len;
}

fn expectEntry(name: []const u8, bytes: u64) !void {
    var index: u32 = 0;
    while (default.layoutEntry(index)) |entry| : (index += 1) {
        if (!std.mem.eql(u8, entry.name, name)) continue;
        if (entry.bytes == bytes) return;
        std.debug.print("{s}: {d} bytes in C, {d} in Zig\n", .{ name, entry.bytes, bytes });
        return error.LayoutMismatch;
    }
    std.debug.print("{s}: missing from the C layouts\n", .{name});
    return error.LayoutMismatch;
}

/// Compares the kernel source's rsqrt or tanh with numerics/math.zig on `inputs`, bit for bit.
fn expectSameFunction(comptime name: []const u8, inputs: []const f32, outputs: []f32) !void {
    @field(default, name)(inputs, outputs);
    var i: usize = 0;
    while (i < inputs.len) : (i += 16) {
        const x: @Vector(16, f32) = inputs[i..][0..16].*;
        const want: [16]f32 = @field(math, name)(@Vector(16, f32), x);
        for (0..16) |k| {
            const w: u32 = @bitCast(want[k]);
            const g: u32 = @bitCast(outputs[i + k]);
            if (w == g) continue;
            std.debug.print("{s}(0x{x:0>8}): math.zig 0x{x:0>8}, kernel source 0x{x:0>8}\n", .{ name, @as(u32, @bitCast(inputs[i + k])), w, g });
            return error.TestExpectedEqual;
        }
    }
}

test "the lane layout is taken for the types and row sizes params.zig names, by the builds that CUDA's modules are" {
    inline for (.{ retuned, staged, resident, resident_padded }) |build| {
        for (std.enums.values(formats.Type)) |t| try std.testing.expectEqual(params.laneLayout(@backingInt(t), build.rowsPerPass()), build.laneLayout(t));
    }
    for (std.enums.values(formats.Type)) |t| try std.testing.expect(!default.laneLayout(t));
    for ([_]u32{ 18, 34, 306, 308, 850, 1584, 2992, 65534, 65535 }) |row_bytes| {
        try std.testing.expectEqual(params.laneRowBytes(row_bytes), retuned.laneRowBytes(row_bytes));
    }
}

test "the kernel source's rsqrt and tanh equal numerics/math.zig bit for bit" {
    const batch = 1 << 16;
    const inputs = try std.testing.allocator.alloc(f32, batch);
    defer std.testing.allocator.free(inputs);
    const outputs = try std.testing.allocator.alloc(f32, batch);
    defer std.testing.allocator.free(outputs);
    // Every 127th bit pattern of all 2^32: both signs, subnormals, Inf and NaN.
    var pattern: u64 = 0;
    while (pattern < 1 << 32) {
        for (inputs) |*x| {
            x.* = @bitCast(@as(u32, @truncate(pattern)));
            pattern += 127;
        }
        try expectSameFunction("rsqrt", inputs, outputs);
        try expectSameFunction("tanh", inputs, outputs);
    }
    // Every pattern around the switch points: rsqrt's subnormal boundary, tanh's 2^-12,
    // 0.5625 and 9.125, and 1 (positive and negative).
    for ([_]u32{ 0x0080_0000, 0x3980_0000, 0x3F10_0000, 0x4112_0000, 0x3F80_0000 }) |center| {
        for (0..2) |sign| {
            for (inputs, 0..) |*x, k| x.* = @bitCast((center - batch / 2 + @as(u32, @intCast(k))) | (@as(u32, @intCast(sign)) << 31));
            try expectSameFunction("rsqrt", inputs, outputs);
            try expectSameFunction("tanh", inputs, outputs);
        }
    }
}
