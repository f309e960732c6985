//! Builds liblmhead (a shared library for bun:ffi) and its unit tests.
//! `zig build` installs zig-out/lib/liblmhead.{so,dylib}; `zig build test` runs the Zig tests.
//! `zig build -Dtarget=aarch64-macos` cross-compiles: nothing Apple-specific is linked,
//! the Metal backend loads its frameworks with dlopen at run time.
//!
//! The CPU kernels (native/backends/cpu/kernels.zig) are compiled once per CPU level and
//! linked into the one library; the CPU backend runs the best level the machine supports.
//! So a library built for a baseline x86-64 target (`-Dtarget=x86_64-linux-gnu`, as a
//! prebuilt package is) still runs AVX-512 kernels where the CPU has them.
const std = @import("std");

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    // ReleaseFast unless asked otherwise: the library is a hot path. (Zig's ReleaseFast keeps
    // IEEE semantics: no float contraction or reassociation without @setFloatMode.)
    const optimize = b.option(std.builtin.OptimizeMode, "optimize", "Optimization mode (default ReleaseFast)") orelse .fast;

    const lib = library(b, target, optimize);
    b.installArtifact(lib);

    const test_module = b.createModule(.{
        .root_source_file = b.path("native/tests.zig"),
        .target = target,
        // Tests sweep millions of values: optimized, with safety checks kept on.
        .optimize = .safe,
        .link_libc = true,
    });
    // One level, the target's own, keeps the test build small; the bun tests compare the
    // levels of the library itself (LMHEAD_CPU_LEVEL).
    addCpuLevel(b, test_module, "target", target, .safe);
    addLevelNames(b, test_module, &.{"target"});
    // Fixture of native/numerics/formats.zig (gguf-py dequantization, see scripts/make_format_fixtures.py).
    test_module.addAnonymousImport("formats_fixture", .{ .root_source_file = b.path("test/fixtures/formats.bin") });
    addMetalSources(b, test_module);
    addEmulator(b, test_module);
    // Apple's Objective-C messages and classes, from metal-cpp (see scripts/make_metal_selectors.py).
    test_module.addAnonymousImport("metal_selectors_fixture", .{ .root_source_file = b.path("test/fixtures/metal_selectors.txt") });
    // The library for Apple silicon, cross-built with no SDK: the tests read its Mach-O load
    // commands and exports (native/backends/metal/macho_test.zig). ./lmhead test installs
    // the same build, from the cache.
    const macos = library(b, b.resolveTargetQuery(.{ .cpu_arch = .aarch64, .os_tag = .macos }), optimize);
    test_module.addAnonymousImport("macos_dylib", .{ .root_source_file = macos.getEmittedBin() });
    // `zig build test -Dtest-filter=TEXT`: only the tests whose names contain TEXT.
    const filter = b.option([]const u8, "test-filter", "Run only the Zig tests whose names contain this text");
    const tests = b.addTest(.{ .root_module = test_module, .filters = if (filter) |f| &.{f} else &.{} });
    const run_tests = b.addRunArtifact(tests);
    const test_step = b.step("test", "Run the Zig unit tests");
    test_step.dependOn(&run_tests.step);
    // With a ring of stages, as the backend compiles some modules (LMH_STAGES, kernels.h).
    test_step.dependOn(&checkSyntax(b, "cuda", &.{ "-std=c++17", "-DLMH_STAGES=2u", "-DLMH_CUDA_BLOCK_THREADS=128u" }).step);
    // With resident rows and a ring of chunks (LMH_RESIDENT, LMH_STAGES), as the backend
    // compiles its wide pass.
    test_step.dependOn(&checkSyntax(b, "cuda", &.{ "-std=c++17", "-DLMH_RESIDENT=1u", "-DLMH_STAGES=2u", "-DLMH_THREADGROUP_SHIFT=2u", "-DLMH_CUDA_BLOCK_THREADS=128u" }).step);
    test_step.dependOn(&checkSyntax(b, "metal", &.{"-std=c++14"}).step);
    // bench/cpu_floor.zig, a developer tool run by hand (`zig run`), analysed with the tests
    // (nothing needs its binary, so none is emitted) so that it keeps building as Zig changes.
    const cpu_floor = b.addExecutable(.{ .name = "cpu-floor", .root_module = b.createModule(.{
        .root_source_file = b.path("bench/cpu_floor.zig"),
        .target = target,
        .optimize = .ReleaseFast,
        .link_libc = true,
    }) });
    test_step.dependOn(&cpu_floor.step);

    // The GPU test and bench driver: a native program (the GPU machine has no Bun) built from
    // the library's source; `zig build gpu-check` installs zig-out/bin/lmhead-gpu-check.
    const gpu_module = b.createModule(.{
        .root_source_file = b.path("native/gpu_check.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    addCpuLevels(b, gpu_module, target, optimize);
    gpu_module.addAnonymousImport("metal_prelude", .{ .root_source_file = b.path("metal/prelude.metal") });
    gpu_module.addAnonymousImport("metal_entries", .{ .root_source_file = b.path("metal/entries.metal") });
    const gpu_check = b.addExecutable(.{ .name = "lmhead-gpu-check", .root_module = gpu_module });
    b.step("gpu-check", "Build the GPU test and bench driver").dependOn(&b.addInstallArtifact(gpu_check, .{}).step);
}

/// liblmhead for `target`: the C ABI, the CPU kernels at each CPU level, the Metal source.
fn library(b: *std.Build, target: std.Build.ResolvedTarget, optimize: std.builtin.OptimizeMode) *std.Build.Step.Compile {
    const module = b.createModule(.{
        .root_source_file = b.path("native/root.zig"),
        .target = target,
        .optimize = optimize,
        .link_libc = true,
    });
    addCpuLevels(b, module, target, optimize);
    addMetalSources(b, module);
    return b.addLibrary(.{ .name = "lmhead", .linkage = .dynamic, .root_module = module });
}

/// The Metal kernel sources live in metal/, outside the modules' folder: named imports
/// let native/kernels/sources.zig embed them.
fn addMetalSources(b: *std.Build, module: *std.Build.Module) void {
    module.addAnonymousImport("metal_prelude", .{ .root_source_file = b.path("metal/prelude.metal") });
    module.addAnonymousImport("metal_entries", .{ .root_source_file = b.path("metal/entries.metal") });
}

/// The host emulator of the GPU kernel source (native/kernels/host/emulator.c), five times:
/// with the source's default tuning, and under other symbol prefixes with another tuning (2
/// rows per pass, so Q4_K and Q5_K keep scale tables, and an entry point per input, as CUDA's
/// modules of 1 and 2 rows per pass have), with the quantized weights staged (CUDA's ring) at
/// 4 rows per pass, with resident rows and staged quantized weights (as CUDA's wide pass runs)
/// and the rest of a call's rows in passes of halving sizes (the default pads them), and with
/// resident rows whose last tile runs as a full pass (CUDA's wide rest pass), so the tests can
/// show that none changes a bit. All but the first read quantized heads in the lane layout, as
/// CUDA's modules do; the first reads them as the file holds them, as Metal's do.
fn addEmulator(b: *std.Build, module: *std.Build.Module) void {
    const flags = [_][]const u8{ "-std=c11", "-ffp-contract=off", "-fno-fast-math", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas" };
    const source = b.path("native/kernels/host/emulator.c");
    module.addCSourceFile(.{ .file = source, .flags = &flags });
    const retuned = [_][]const u8{ "-DLMH_EMULATOR=lmh_emulator_retuned", "-DLMH_LANE_LAYOUT=1u", "-DLMH_VOCAB_ROWS_PER_SIMDGROUP=3u", "-DLMH_ROWS_PER_PASS=2u", "-DLMH_CHUNKS_PER_STEP=2u", "-DLMH_PREFETCH_ROWS=1u", "-DLMH_BULK_STAGES=2u", "-DLMH_EMULATOR_INPUT_BY_ENTRY=1" };
    module.addCSourceFile(.{ .file = source, .flags = &(flags ++ retuned) });
    const staged = [_][]const u8{ "-DLMH_EMULATOR=lmh_emulator_staged", "-DLMH_LANE_LAYOUT=1u", "-DLMH_VOCAB_ROWS_PER_SIMDGROUP=5u", "-DLMH_ROWS_PER_PASS=4u", "-DLMH_STAGES=2u" };
    module.addCSourceFile(.{ .file = source, .flags = &(flags ++ staged) });
    const resident = [_][]const u8{ "-DLMH_EMULATOR=lmh_emulator_resident", "-DLMH_LANE_LAYOUT=1u", "-DLMH_VOCAB_ROWS_PER_SIMDGROUP=3u", "-DLMH_RESIDENT=1u", "-DLMH_STAGES=2u", "-DLMH_PAD_REST=0u" };
    module.addCSourceFile(.{ .file = source, .flags = &(flags ++ resident) });
    const resident_padded = [_][]const u8{ "-DLMH_EMULATOR=lmh_emulator_resident_padded", "-DLMH_LANE_LAYOUT=1u", "-DLMH_VOCAB_ROWS_PER_SIMDGROUP=2u", "-DLMH_RESIDENT=1u", "-DLMH_PAD_RESIDENT=1u" };
    module.addCSourceFile(.{ .file = source, .flags = &(flags ++ resident_padded) });
}

/// Checks that a GPU target's kernel source (prelude, params.h, kernels.h, entries, in the
/// order native/kernels/sources.zig joins them) is valid C++, with stub declarations of the
/// vendor builtins (native/kernels/host/stubs): no CUDA toolkit or Metal compiler runs here.
fn checkSyntax(b: *std.Build, comptime target: []const u8, standard: []const []const u8) *std.Build.Step.Run {
    const is_cuda = std.mem.eql(u8, target, "cuda");
    const run = b.addSystemCommand(&.{ b.graph.zig_exe, "clang", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-Wno-unused-function" });
    run.setName("check " ++ target ++ " kernel source syntax");
    run.addArgs(standard);
    if (is_cuda) {
        run.addPrefixedFileArg("-include", b.path("native/kernels/host/stubs/cuda.h"));
        run.addPrefixedFileArg("-include", b.path("native/backends/cuda/prelude.cuh"));
    } else {
        run.addArg("-Wno-unknown-attributes"); // [[buffer(0)]] and the other Metal attributes
        run.addPrefixedDirectoryArg("-I", b.path("native/kernels/host/stubs/metal"));
        run.addPrefixedFileArg("-include", b.path("metal/prelude.metal"));
    }
    run.addPrefixedFileArg("-include", b.path("native/kernels/params.h"));
    run.addPrefixedFileArg("-include", b.path("native/kernels/kernels.h"));
    run.addArgs(&.{ "-x", "c++" });
    run.addFileArg(b.path(if (is_cuda) "native/backends/cuda/entries.cu" else "metal/entries.metal"));
    return run;
}

/// A CPU level of the kernels: a model, plus and minus some features.
const Level = struct {
    name: []const u8,
    model: *const std.Target.Cpu.Model,
    add: []const std.Target.x86.Feature = &.{},
    sub: []const std.Target.x86.Feature = &.{},
};

/// x86-64 levels, best first: AVX-512 (with VBMI's byte permutes, which the decoders use,
/// and full-width vectors: LLVM's prefer-256-bit tuning would halve them), AVX2 with FMA,
/// and the baseline every x86-64 CPU runs.
const x86_levels = [_]Level{
    .{ .name = "x86_64_v4", .model = &std.Target.x86.cpu.x86_64_v4, .add = &.{.avx512vbmi}, .sub = &.{.prefer_256_bit} },
    .{ .name = "x86_64_v3", .model = &std.Target.x86.cpu.x86_64_v3 },
    .{ .name = "x86_64", .model = &std.Target.x86.cpu.x86_64 },
};

/// Compiles the CPU kernels once per level into `module` and tells it the levels' names
/// (best first) through the `cpu_levels` options module. Other architectures have one
/// level, the target's own CPU.
fn addCpuLevels(b: *std.Build, module: *std.Build.Module, target: std.Build.ResolvedTarget, optimize: std.builtin.OptimizeMode) void {
    var names: std.ArrayList([]const u8) = .empty;
    if (target.result.cpu.arch == .x86_64) {
        for (x86_levels) |level| {
            var query = target.query;
            query.cpu_model = .{ .explicit = level.model };
            query.cpu_features_add = std.Target.x86.featureSet(level.add);
            query.cpu_features_sub = std.Target.x86.featureSet(level.sub);
            addCpuLevel(b, module, level.name, b.resolveTargetQuery(query), optimize);
            names.append(b.allocator, level.name) catch @panic("OOM");
        }
    } else {
        addCpuLevel(b, module, "target", target, optimize);
        names.append(b.allocator, "target") catch @panic("OOM");
    }
    addLevelNames(b, module, names.items);
}

fn addLevelNames(b: *std.Build, module: *std.Build.Module, names: []const []const u8) void {
    const options = b.addOptions();
    options.addOption([]const []const u8, "names", names);
    module.addOptions("cpu_levels", options);
}

fn addCpuLevel(b: *std.Build, module: *std.Build.Module, name: []const u8, target: std.Build.ResolvedTarget, optimize: std.builtin.OptimizeMode) void {
    const options = b.addOptions();
    options.addOption([]const u8, "name", name);
    const level = b.createModule(.{
        .root_source_file = b.path("native/cpu_level.zig"),
        .target = target,
        .optimize = optimize,
        .pic = true,
    });
    level.addOptions("cpu_level", options);
    module.addObject(b.addObject(.{ .name = b.fmt("lmhead_cpu_{s}", .{name}), .root_module = level }));
}
