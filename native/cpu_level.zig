//! Root of one CPU level's object: build.zig compiles the CPU kernels once per level, each
//! copy exporting its table as `lmh_cpu_kernels_<level>` for the CPU backend to pick from.
const level = @import("cpu_level");
const kernels = @import("backends/cpu/kernels.zig");

const table = kernels.table(level.name ++ "");

comptime {
    @export(&table, .{ .name = "lmh_cpu_kernels_" ++ level.name });
}
