//! Root of `zig build test`: every native file with tests is listed here.
test {
    _ = @import("root.zig");
    _ = @import("file_test.zig");
    _ = @import("session_test.zig");
    _ = @import("numerics/formats.zig");
    _ = @import("numerics/math.zig");
    _ = @import("numerics/flush.zig");
    _ = @import("backends/cpu/float_env.zig");
    _ = @import("kernels/lint.zig");
    _ = @import("kernels/emulator.zig");
    _ = @import("kernels/parity_test.zig");
    _ = @import("backends/metal/objc.zig");
    _ = @import("backends/metal/shapes.zig");
    _ = @import("backends/metal/backend.zig");
    _ = @import("backends/metal/tests.zig");
    _ = @import("backends/metal/macho_test.zig");
    _ = @import("backends/metal/mac_test.zig");
}
