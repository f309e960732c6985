//! The GPU kernel source, embedded: a target's prelude, the shared params.h and kernels.h,
//! then its entry points, joined into the one source a GPU backend compiles when a device
//! opens (NVRTC for CUDA, newLibraryWithSource for Metal): neither compiler can resolve an
//! #include of a file the library carries, so the order is written here, once.
const params_h = @embedFile("params.h");
const kernels_h = @embedFile("kernels.h");

pub const cuda = @embedFile("../backends/cuda/prelude.cuh") ++ params_h ++ kernels_h ++ @embedFile("../backends/cuda/entries.cu");
pub const metal = @embedFile("metal_prelude") ++ params_h ++ kernels_h ++ @embedFile("metal_entries");

pub const File = struct { path: []const u8, text: []const u8 };

/// Every file of kernel source, for the lint (lint.zig).
pub const files = [_]File{
    .{ .path = "native/kernels/params.h", .text = params_h },
    .{ .path = "native/kernels/kernels.h", .text = kernels_h },
    .{ .path = "native/kernels/host/prelude.h", .text = @embedFile("host/prelude.h") },
    .{ .path = "native/backends/cuda/prelude.cuh", .text = @embedFile("../backends/cuda/prelude.cuh") },
    .{ .path = "native/backends/cuda/entries.cu", .text = @embedFile("../backends/cuda/entries.cu") },
    .{ .path = "metal/prelude.metal", .text = @embedFile("metal_prelude") },
    .{ .path = "metal/entries.metal", .text = @embedFile("metal_entries") },
};
