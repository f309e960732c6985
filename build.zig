//! Builds liblmhead (a shared library for bun:ffi) and its unit tests.
//! `zig build` installs zig-out/lib/liblmhead.{so,dylib}; `zig build test` runs the Zig tests.
//! `zig build -Dtarget=aarch64-macos` cross-compiles: nothing Apple-specific is linked,
//! the Metal backend loads its frameworks with dlopen at run time.
const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    // ReleaseFast unless asked otherwise: the library is a hot path. (Zig's ReleaseFast keeps
    // IEEE semantics: no float contraction or reassociation without @setFloatMode.)
    const optimize = b.option(std.builtin.OptimizeMode, "optimize", "Optimization mode (default ReleaseFast)") orelse .fast;

    const root = b.createModule(.{
        .root_source_file = b.path("native/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    const lib = b.addLibrary(.{ .name = "lmhead", .linkage = .dynamic, .root_module = root });
    b.installArtifact(lib);

    const test_module = b.createModule(.{
        .root_source_file = b.path("native/tests.zig"),
        .target = target,
        // Tests sweep millions of values: optimized, with safety checks kept on.
        .optimize = .safe,
        .link_libc = true,
    });
    // Fixture of native/numerics/formats.zig (gguf-py dequantization, see scripts/make_format_fixtures.py).
    test_module.addAnonymousImport("formats_fixture", .{ .root_source_file = b.path("test/fixtures/formats.bin") });
    const tests = b.addTest(.{ .root_module = test_module });
    const run_tests = b.addRunArtifact(tests);
    b.step("test", "Run the Zig unit tests").dependOn(&run_tests.step);
}
