//! What the Metal backend dispatches for each command: the kernel's pipeline, the binding
//! indices of its buffers and parameters, and the grid. The grid follows the kernel
//! source's layout (one 32-lane simdgroup per vocab-row group, every batch row in the
//! same simdgroup, so a row's arithmetic never depends on N).
const std = @import("std");
const contract = @import("../backend.zig");
const registry = @import("../../core/registry.zig");
const formats = @import("../../numerics/formats.zig");
const objc = @import("objc.zig");
const Command = contract.Command;
const Kernel = registry.Kernel;

/// Apple GPUs run 32-lane simdgroups; the kernels' butterflies are written for 32.
pub const simd_width = 32;
/// Simdgroups per matvec threadgroup, and the vocab rows each one owns.
pub const matvec_simdgroups = 4;
pub const matvec_vocab_rows_per_simdgroup = 4;
comptime {
    // The Metal prelude sets the kernel source's tuning to the same value.
    const define = std.fmt.comptimePrint("#define LMH_VOCAB_ROWS_PER_SIMDGROUP {d}u\n", .{matvec_vocab_rows_per_simdgroup});
    std.debug.assert(std.mem.indexOf(u8, @import("../../kernels/sources.zig").metal, define) != null);
}
/// Threads per threadgroup of the elementwise kernels.
pub const elementwise_threads = 256;
/// Threadgroups of an elementwise dispatch at most: its kernel strides over the rest.
pub const elementwise_groups_max = 16384;

/// The head's kernels: the fixed ones, then one matvec per admitted head type.
pub const kernels: []const Kernel = blk: {
    var list: []const Kernel = &.{ .rms_norm, .softcap, .count_non_finite };
    for (std.enums.values(formats.Type)) |t| {
        if (formats.of(t).head) list = list ++ [_]Kernel{.{ .matvec = t }};
    }
    break :blk list;
};

/// The backend's own kernels after the head's: the bandwidth and fma-rate probes and the
/// Mac-only numerics probe.
pub const probe_names = [_][:0]const u8{ "lmh_probe_read", "lmh_probe_fma", "lmh_probe_numerics" };
pub const probe_read = kernels.len;
pub const probe_fma = kernels.len + 1;
pub const probe_numerics = kernels.len + 2;
pub const pipeline_count = kernels.len + probe_names.len;

/// Every pipeline's entry-point name, by pipeline index.
pub const pipeline_names: [pipeline_count][:0]const u8 = blk: {
    var names: [pipeline_count][:0]const u8 = undefined;
    for (kernels, 0..) |k, i| {
        var buffer: [64]u8 = undefined;
        const name = k.name(&buffer);
        const final: [name.len:0]u8 = (name[0..name.len] ++ "").*;
        names[i] = &final;
    }
    for (probe_names, 0..) |n, i| names[kernels.len + i] = n;
    break :blk names;
};

/// Threads per threadgroup each pipeline is dispatched with: a pipeline whose device limit
/// (maxTotalThreadsPerThreadgroup) is lower cannot run.
pub const pipeline_threads: [pipeline_count]usize = blk: {
    var threads: [pipeline_count]usize = undefined;
    for (kernels, 0..) |k, i| threads[i] = switch (k) {
        .rms_norm, .count_non_finite => simd_width,
        .softcap => elementwise_threads,
        .matvec => matvec_simdgroups * simd_width,
    };
    threads[probe_read] = elementwise_threads;
    threads[probe_fma] = elementwise_threads;
    threads[probe_numerics] = simd_width;
    break :blk threads;
};

pub fn pipelineIndex(kernel: Kernel) usize {
    for (kernels, 0..) |k, i| if (std.meta.eql(k, kernel)) return i;
    unreachable; // every command's kernel is in the list (admission rejects the rest)
}

pub const Grid = struct { groups: objc.Size, threads: objc.Size };

pub fn grid1(groups: u64, threads: usize) Grid {
    return .{ .groups = .{ .width = @intCast(groups), .height = 1, .depth = 1 }, .threads = .{ .width = threads, .height = 1, .depth = 1 } };
}

/// The read probe: a fixed grid whose threads stride over the buffer in 16-byte loads.
pub const probe_read_groups = 1024;
pub const probe_read_grid = grid1(probe_read_groups, pipeline_threads[probe_read]);

/// The fma probe: enough threads to fill any Apple GPU, each 8 chains of `probe_fma_rounds`.
pub const probe_fma_grid = grid1(1024, pipeline_threads[probe_fma]);
pub const probe_fma_rounds = 4096;
pub const probe_fma_count: u64 = 1024 * pipeline_threads[probe_fma] * probe_fma_rounds * 8;

pub const Dispatch = struct { pipeline: usize, grid: Grid };

/// The dispatch of a (non-barrier) command. As the entry points of metal/entries.metal
/// declare them: the parameter struct at index 0, the buffers at 1.. in `Command.buffers`
/// order. Every kernel strides over its work, so the grid is tuning, never a result.
pub fn dispatch(command: Command) Dispatch {
    const pipeline = switch (command) {
        .barrier => unreachable,
        .rms_norm => pipelineIndex(.rms_norm),
        .count_non_finite => pipelineIndex(.count_non_finite),
        .softcap => pipelineIndex(.softcap),
        .matvec => |c| pipelineIndex(.{ .matvec = std.enums.fromInt(formats.Type, c.params.type_id).? }),
    };
    const groups: u64 = switch (command) {
        .barrier => unreachable,
        .rms_norm => |c| c.params.rows,
        .count_non_finite => |c| c.params.rows,
        .softcap => |c| @min(std.math.divCeil(u64, c.params.values, elementwise_threads) catch unreachable, elementwise_groups_max),
        .matvec => |c| std.math.divCeil(u64, c.params.vocab, matvec_simdgroups * matvec_vocab_rows_per_simdgroup) catch unreachable,
    };
    return .{ .pipeline = pipeline, .grid = grid1(groups, pipeline_threads[pipeline]) };
}

test "every head type has a matvec pipeline with its registry name" {
    try std.testing.expectEqualStrings("rms_norm_f32", pipeline_names[pipelineIndex(.rms_norm)]);
    try std.testing.expectEqualStrings("matvec_Q6_K_f32", pipeline_names[pipelineIndex(.{ .matvec = .q6_k })]);
    try std.testing.expectEqualStrings("lmh_probe_read", pipeline_names[probe_read]);
}
