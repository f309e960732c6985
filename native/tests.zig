//! Root of `zig build test`: every native file with tests is listed here.
test {
    _ = @import("root.zig");
}
