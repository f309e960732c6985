//! The kernel registry of a device (mlx-native's KernelRegistry): the kernels by name, which
//! of them a session has used, and the compiled pipeline of each where the backend compiles
//! one (Metal). The pipelines are made when the device opens, so a GPU that cannot run one
//! is refused there, and released when it closes; the CPU's kernels are compiled into the
//! library and CUDA's functions live in its modules, so their registries hold none.
const std = @import("std");
const status = @import("status.zig");
const formats = @import("../numerics/formats.zig");
const Error = status.Error;

pub const Kernel = union(enum) {
    rms_norm,
    softcap,
    count_non_finite,
    matvec: formats.Type,

    const fixed = [_]Kernel{ .rms_norm, .softcap, .count_non_finite };
    const Mask = u64;
    comptime {
        // Every kernel has its bit in the mask.
        std.debug.assert(fixed.len + std.enums.values(formats.Type).len <= @bitSizeOf(Mask));
    }

    fn slot(kernel: Kernel) std.math.Log2Int(Mask) {
        return switch (kernel) {
            .rms_norm => 0,
            .softcap => 1,
            .count_non_finite => 2,
            .matvec => |t| @intCast(fixed.len + std.mem.indexOfScalar(formats.Type, std.enums.values(formats.Type), t).?),
        };
    }

    pub fn name(kernel: Kernel, out: []u8) []const u8 {
        return switch (kernel) {
            .rms_norm => "rms_norm_f32",
            .softcap => "softcap_f32",
            .count_non_finite => "count_non_finite_f32",
            .matvec => |t| std.fmt.bufPrint(out, "matvec_{s}_f32", .{formats.format(@backingInt(t)).?.name}) catch unreachable,
        };
    }
};

pub const Registry = struct {
    resolved: std.atomic.Value(Kernel.Mask) = .init(0),
    /// Each kernel's pipeline, by slot: a backend's opaque handle, or null.
    pipelines: [@bitSizeOf(Kernel.Mask)]?*anyopaque = @splat(null),

    /// The pipeline made for `kernel` when the device opened.
    pub fn pipeline(registry: *const Registry, kernel: Kernel) *anyopaque {
        return registry.pipelines[kernel.slot()].?;
    }

    /// Makes the pipeline of each of `kernels` with `backend.makePipeline`; on a failure the
    /// ones made are released and the error returned.
    pub fn makePipelines(registry: *Registry, backend: anytype, kernels: []const Kernel) Error!void {
        errdefer registry.releasePipelines(backend);
        for (kernels) |k| {
            std.debug.assert(registry.pipelines[k.slot()] == null);
            registry.pipelines[k.slot()] = try backend.makePipeline(k);
        }
    }

    pub fn releasePipelines(registry: *Registry, backend: anytype) void {
        for (&registry.pipelines) |*p| if (p.*) |handle| {
            backend.releasePipeline(handle);
            p.* = null;
        };
    }

    pub fn resolve(registry: *Registry, kernel: Kernel) Error!void {
        _ = registry.resolved.fetchOr(@as(Kernel.Mask, 1) << kernel.slot(), .monotonic);
    }

    /// Writes the resolved kernels' names, one per line, and returns the bytes needed.
    pub fn list(registry: *Registry, out: []u8) usize {
        const mask = registry.resolved.load(.monotonic);
        var needed: usize = 0;
        var name_buffer: [64]u8 = undefined;
        for (Kernel.fixed) |k| if (mask & (@as(Kernel.Mask, 1) << k.slot()) != 0) append(out, &needed, k.name(&name_buffer));
        for (std.enums.values(formats.Type)) |t| {
            const k: Kernel = .{ .matvec = t };
            if (mask & (@as(Kernel.Mask, 1) << k.slot()) != 0) append(out, &needed, k.name(&name_buffer));
        }
        return needed;
    }

    fn append(out: []u8, used: *usize, text: []const u8) void {
        const line_bytes = text.len + 1;
        if (used.* + line_bytes <= out.len) {
            @memcpy(out[used.*..][0..text.len], text);
            out[used.* + text.len] = '\n';
        }
        used.* += line_bytes;
    }
};
