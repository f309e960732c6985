//! The CUDA backend: device memory, one stream per device, the kernels of module.zig
//! launched in the session's order. libcuda and NVRTC are loaded when the first CUDA device
//! opens (driver.zig). Every kernel follows docs/NUMERICS.md, so results equal the CPU
//! backend's bit for bit.
const std = @import("std");
const status = @import("../../core/status.zig");
const contract = @import("../backend.zig");
const formats = @import("../../numerics/formats.zig");
const params = @import("../../kernels/params.zig");
const driver = @import("driver.zig");
const module = @import("module.zig");
const Command = contract.Command;
const Error = status.Error;
const fail = status.fail;

/// Launch shapes. The kernels stride over their work, so the grid changes no result; the
/// tuning macros of kernels.h are passed to NVRTC, so host and kernels agree.
const warps_per_block = 4;
const threads_per_block = 32 * warps_per_block;
/// Activation rows one pass shares each decoded weight with: modules per size, so a call of
/// N rows runs the kernel whose registers fit N (passIndex) and one row keeps the occupancy
/// that bandwidth needs. A module is compiled when a call first needs it (an 8-row one takes
/// NVRTC 14-33 s on 2 cores), the 1-row ones when the device opens. The fifth, `wide_pass`,
/// runs 8 rows per pass again, only for the types its tuning lists and only where they run
/// from resident rows (from N = 8): a module of its own, as NVRTC compiled F32's own 8-row
/// passes 2.4 times as slow at N = 8 and 16 beside rows in shared memory in one module
/// (decoded rows then, bench/results/cuda-h200.md). After it come the rest passes, one for
/// the 4-row and one for the 8-row pass (`rest_pass_of`): a call whose rows fill no pass of
/// that size (N = 3, or 5 to 7) runs there if its type keeps halving passes in the plain one,
/// padded, as it then has no full pass that padding could slow. Last, the wide pass's rest
/// pass: the wide pass's types and shapes, but a tile of resident rows short of a pass runs as
/// one full pass (`pad_resident`), for the N `padsResidentTile` names.
pub const pass_sizes = [_]u32{ 1, 2, 4, 8, 8, 4, 8, 8 };
const wide_pass = 4;
/// The rest pass of each plain pass, if it has one.
const rest_pass_of = [wide_pass]?usize{ null, null, 5, 6 };
const wide_rest_pass = 7;
/// A matvec kernel's shape, the tuning macros of its module (kernels.h, entries.cu): vocab
/// rows one warp computes (they share each activation load, and more of them keep more weight
/// bytes in flight), blocks an SM must hold at once (NVRTC caps the registers to fit them;
/// 0: no cap), whether a warp first asks for all its rows' bytes (a prefetch into L2), the
/// stages of the ring a quantized type's chunks arrive in by asynchronous copies (0: none),
/// or of the ring its whole vocab rows arrive in by bulk copies (0: none; not both), the
/// chunks a step of the chunk loop takes (1 or 2: two let a warp have the second's loads in
/// flight while it computes the first), whether a block copies a pass of activation rows once
/// into shared memory for its warps' vocab rows (kernels.h LMH_RESIDENT: 8 rows per pass, no
/// bulk ring; a ring of chunks takes its stages from the same shared memory, stageRingBytes),
/// whether a call's rows past its last full pass run as one padded pass or as passes of
/// halving sizes (kernels.h LMH_PAD_REST), and whether a tile of resident rows short of a pass
/// runs as one full pass (kernels.h LMH_PAD_RESIDENT; resident shapes only).
pub const Shape = struct {
    vocab_rows: u32,
    min_blocks: u32 = 0,
    prefetch: bool = false,
    stages: u32 = 0,
    bulk: u32 = 0,
    chunks_per_step: u32 = 1,
    resident: bool = false,
    pad_rest: bool = true,
    pad_resident: bool = false,
};

/// A pass size's tuning. The best shape differs by type, so each shape gets a module of its
/// own, holding the types that take it: every kernel is compiled for its own tile (a tile
/// sized for the most vocab rows any type takes made some types' kernels slower than their
/// own tile's, on an H200).
pub const TypeShape = struct { formats.Type, Shape };

pub const Tuning = struct {
    shape: Shape,
    /// Types whose shape differs from `shape`.
    shape_of: []const TypeShape = &.{},
    /// The head types whose modules the pass has (null: every one).
    types: ?[]const formats.Type = null,
    /// Whether the pass's resident shapes pad a tile short of a pass (the wide rest pass).
    pad_resident: bool = false,
    /// A tuning run's overrides of every type's shape (tuningsFromEnv).
    forced: struct { vocab_rows: ?u32 = null, min_blocks: ?u32 = null, prefetch: ?bool = null, stages: ?u32 = null, bulk: ?u32 = null, chunks_per_step: ?u32 = null, resident: ?bool = null, pad_rest: ?bool = null } = .{},

    pub fn shapeOf(tuning: Tuning, type_id: u32) Shape {
        var shape = tuning.shape;
        for (tuning.shape_of) |o| if (@backingInt(o[0]) == type_id) {
            shape = o[1];
        };
        const resident = tuning.forced.resident orelse shape.resident;
        return .{
            .vocab_rows = tuning.forced.vocab_rows orelse shape.vocab_rows,
            .min_blocks = tuning.forced.min_blocks orelse shape.min_blocks,
            .prefetch = tuning.forced.prefetch orelse shape.prefetch,
            .stages = tuning.forced.stages orelse shape.stages,
            .bulk = tuning.forced.bulk orelse shape.bulk,
            .chunks_per_step = tuning.forced.chunks_per_step orelse shape.chunks_per_step,
            .resident = resident,
            .pad_rest = tuning.forced.pad_rest orelse shape.pad_rest,
            .pad_resident = tuning.pad_resident and resident,
        };
    }

    /// Whether the pass has a module for head type `type_id`.
    pub fn holds(tuning: Tuning, type_id: u32) bool {
        const types = tuning.types orelse return true;
        for (types) |t| if (@backingInt(t) == type_id) return true;
        return false;
    }

    /// The head types of `shape`, a bit per type id (entries.cu's LMH_CUDA_MATVEC_TYPES); 0 if
    /// none takes it.
    pub fn typesWith(tuning: Tuning, shape: Shape) u32 {
        var types: u32 = 0;
        for (formats.all) |f| {
            const id = @backingInt(f.type);
            if (f.head and tuning.holds(id) and std.meta.eql(tuning.shapeOf(id), shape)) types |= @as(u32, 1) << @intCast(id);
        }
        return types;
    }
};

/// A warp's bulk ring begins with its stages' barriers (prelude.cuh LMH_CUDA_BULK_BARRIER_BYTES).
const bulk_barrier_bytes = 64;

/// Vocab rows per warp, at most (a tuning's, or a tuning run's override).
const max_vocab_rows = 16;
/// Blocks per SM a kernel may ask for, at most: an SM holds 2048 threads.
const max_min_blocks = 2048 / threads_per_block;

/// A block's static shared memory (CUDA's limit without an opt-in), which holds its warps'
/// rings of stages of vocab_rows chunks (params.stage_row_bytes each).
const max_ring_bytes_per_block = 48 << 10;

fn validShape(shape: Shape) bool {
    const stages_valid = shape.stages == 0 or (shape.stages >= 2 and shape.stages <= 4 and stageRingBytes(shape) <= max_ring_bytes_per_block);
    const bulk_valid = shape.bulk == 0 or (shape.bulk >= 2 and shape.bulk <= 4 and shape.stages == 0);
    const chunks_valid = shape.chunks_per_step == 1 or shape.chunks_per_step == 2;
    const area_valid = (!shape.resident or shape.bulk == 0) and (!shape.pad_resident or shape.resident);
    return shape.vocab_rows >= 1 and shape.vocab_rows <= max_vocab_rows and shape.min_blocks <= max_min_blocks and stages_valid and bulk_valid and chunks_valid and area_valid;
}

/// A block's ring of chunks (kernels.h LMH_STAGES): its warps' stages, static shared memory.
fn stageRingBytes(shape: Shape) u32 {
    return shape.stages * shape.vocab_rows * params.stage_row_bytes * warps_per_block;
}

comptime {
    for (formats.all) |f| std.debug.assert(@backingInt(f.type) < 32); // typesWith's bits
    std.debug.assert(std.math.isPowerOfTwo(warps_per_block)); // prelude.cuh's bulk ring splits a block's shared memory by a shift
    for (tunings, pass_sizes) |t, size| {
        std.debug.assert(validShape(t.shape) and (!t.shape.resident or size == 8));
        for (t.shape_of) |o| std.debug.assert(validShape(o[1]) and (!o[1].resident or size == 8));
    }
    // Only the wide and rest passes list their types; the wide one runs them from resident
    // rows (its reason).
    for (tunings[0..wide_pass]) |t| std.debug.assert(t.types == null);
    for (tunings[wide_pass].types.?) |t| std.debug.assert(tunings[wide_pass].shapeOf(@backingInt(t)).resident);
    for (tunings, 0..) |t, i| std.debug.assert(t.pad_resident == (i == wide_rest_pass));
    for (rest_pass_of, 0..) |rest, plain| if (rest) |r| std.debug.assert(pass_sizes[r] == pass_sizes[plain] and tunings[r].types != null);
}

/// Per pass size, measured on an H200 (bench/results/cuda-h200.md). Vocab rows per warp: 4, 8
/// and 16 first; then 2, 4, 6 and 8 for every type in one sweep, where a type takes another
/// count than its module's if that was at least 4% faster on average over the N the module runs
/// and slower at none (at one row per pass 8 suit most quantized types and 4 dense ones; at 8
/// rows per pass 4 took 11-19% off BF16 and 6 took 6-15% off Q5_0 and Q4_K). Blocks per SM: at
/// 1 and 4 rows per pass a cap of 4 (0, 3, 4, 6 and 8 measured) kept every type within a point
/// or faster (N = 1: F32 86 → 99% and BF16 81 → 93% of the floor, Q4_K 24 → 31%; N = 4: F16 74
/// → 81%, Q6_K 24 → 28%); at 2 rows per pass (0, 3, 4 and 6 measured, a type taking a cap if
/// that was 4% faster) none suits most types, 6 took 25% off Q3_K and 8% off Q8_0 and 4 took
/// 10% off Q5_1. A later sweep of 0, 2, 3, 4, 6 and 8 for every type at N = 1, 2, 4 and 8 found
/// three more caps 4% faster or more: 6 for Q8_0 at one row per pass, 2 for Q5_0 at 4, 3 for
/// Q4_0 at 8. At 4 rows per pass steps of 2 chunks nearly doubled F32 and BF16, and at 8 they
/// took 5-11% off F32 from N = 8 to 64 (three runs); measured for every type at 1, 2 and 8 rows
/// per pass (four runs in two calls), they took 5% off Q4_K and Q5_1 at N = 1 and 5-8% off Q2_K,
/// IQ4_NL and IQ4_XS at N = 2 (Q5_0 3%), and made most others slower (Q4_0, Q3_K, IQ4_XS, BF16
/// up to 30% at N = 8; Q4_K 28% at N = 2). Prefetching a warp's rows into L2 (kernels.h),
/// measured for every type at N = 1, 2, 4 and 8: a type prefetches where that was 4% faster or
/// more in two runs and slower at no N (Q6_K N = 1 8-9%, Q4_0 N = 2 and 4 6-8%, Q2_K N = 8
/// 8-10%); it made dense types up to 50% slower (not profiled), and prefetching 1, 2 or 4
/// chunks ahead instead of the whole rows was 4% faster for no type. A ring of 2, 3 or 4 stages
/// (kernels.h), measured for every quantized type at N = 1, 2, 4 and 8, then 3 stages at N = 8
/// to 64 twice: taken at 8 rows per pass where it was 4% faster or more at some N and slower at
/// none (Q6_K 8-19% faster, Q5_K and IQ4_NL 8% at N = 8; IQ4_NL's later replaced by a bulk
/// ring); at 1 row per pass 3 stages made every type but Q5_1 2-21% slower. At 1 row per pass a
/// bulk ring (kernels.h LMH_BULK_STAGES; persistent blocks), measured for every quantized type
/// with 2 stages and the module's vocab rows per warp, 2 stages and 4 or 2 rows, 3 stages and 4
/// rows: taken with 2 stages where that was 4% faster or more (Q2_K 11%, Q3_K 8%, Q5_0 7% with
/// 4 rows, Q4_K 6%, Q5_K, Q6_K and Q5_1 4%), and again faster in a second call (Q2_K 10%, Q3_K
/// 7%, Q4_K, Q5_0 and Q5_1 5-6%, Q5_K and Q6_K 2-3%); Q8_0 5-30% and Q4_0 0-17% slower with
/// any, IQ4_NL and IQ4_XS within 2% or slower. A type's prefetch then applies only where the
/// ring does not fit. A bulk ring at 2, 4 and 8 rows per pass, measured for every quantized
/// type (2 stages, each type's own vocab rows per warp and 4; one call, two runs, then the
/// candidates three more): taken at 2 by Q6_K and Q5_K with 4 vocab rows (12% and 9% less at
/// N = 2) and by Q2_K (15%), at 8 by Q2_K (14% less at N = 8, 3% from 16 to 64); IQ4_NL in
/// place of its ring of chunks took 3% off at N = 8 and 9-11% from 16 to 64, and again 3% and
/// 9-10% in a second call, so it takes it; at 4 none was 4% faster, and Q8_0 was 11-52% slower
/// at every pass size. At 8 rows per pass,
/// decoded rows (a block's vocab rows decoded once into shared memory, since removed; from
/// N = 32), measured for F32, F16, Q8_0, Q4_K and Q6_K at N = 32 and 64, then in builds that
/// take them at N = 8 to 64 in two calls: taken by F16 and Q8_0 (21-22% less at N = 64, 1-10%
/// at N = 8 to 32, faster at every N); F32 was 43%
/// faster at N = 64 but its module, holding both paths, 2.4 times as slow at N = 8 and 16, so
/// it runs them in a module of its own, the wide pass, from N = 32. Measured for every type
/// (one call, two runs): the other eleven were slower with them at N = 32 (17-99%) and most
/// at every N (BF16, with its 4 vocab rows per warp, 2.1 times as slow at N = 16); BF16 in the
/// wide pass with 8 vocab rows per warp was 6-7% and 20% faster at N = 32 and 64 in two calls
/// (with 6, 36-52% slower). Resident rows (kernels.h LMH_RESIDENT), measured for every type in
/// the wide pass (each type's 8-row step, 4 or 8 vocab rows per warp, two runs each): at N = 32
/// and 64 F16 with 8 vocab rows took 33% and 23% off its decoded rows' time, Q8_0 14% and 2%;
/// every other type was slower (3-169%; 4 vocab rows slower for all but F16 at N = 32). From
/// N = 8 they took 26% and 39% off F16 at N = 8 and 16, 10% and 7% off Q8_0, in two calls; so
/// F16 and Q8_0 run from resident rows from N = 8, and their 8-row modules no longer decode.
/// With 12 or 16 vocab rows per warp both were 16-86% slower at every N. With a dense type's
/// weights loaded a chunk ahead from resident rows (kernels.h lmh_matvec_resident_dense;
/// NVRTC had issued F32's and BF16's loads one vocab row at a time), one call, two runs: F32
/// from resident rows took 30%, 50%, 32% and 16% off its decoded or own rows' time at N = 8,
/// 16, 32 and 64, BF16 13%, 35%, 29% and 17%, F16 2-6% off its resident rows' time; so F32 and
/// BF16 run from resident rows from N = 8 too, and no type from decoded rows (removed). A ring
/// of 2 stages beside resident rows, measured for every quantized type at N = 8 to 64 (one call,
/// two runs): taken by Q8_0 (8%, 6%, 5% and 2% less); Q5_1 3%, Q5_0 1%, Q5_K -1 to 5%, the
/// others slower at some N (Q4_0 up to 15%). The rest of a call's rows in one padded pass
/// (pad_rest), measured for every type at N = 1 to 9, 15, 16, 33 and 64 against passes of
/// halving sizes (one call, two runs): N = 3 took 9-47% less for every type, N = 7 26-50%, but
/// some types' full passes got slower, the padded pass compiled into their kernels: at 4 rows
/// per pass Q5_0 (23% at N = 4), Q4_K (7%) and IQ4_NL (3%); at 8 Q5_0 (25-43% from N = 8),
/// IQ4_XS (17-29%), Q4_K (15-23%), Q3_K (5-15%), Q2_K (3-6%) and Q5_1 (5% at N = 8); in the
/// wide pass BF16 (4-5% from N = 16), F16 and F32 (5% and 3% at N = 64). Those keep halving
/// passes; the others were within 2% at every full N and pad. F32, F16, BF16 and Q8_0 pad at 8
/// rows per pass, where they run only N = 5 to 7 (6-47% less), resident from N = 8. The types
/// that keep halving passes run N = 3 and 5 to 7 in the rest passes, whose kernels are the
/// padded ones that call measured (the same SASS): N = 3 9-32% less, N = 5 to 7 3-43%.
pub const tunings = blk: {
    var all: [pass_sizes.len]Tuning = undefined;
    all[0..plain_tunings.len].* = plain_tunings;
    for (rest_pass_of, 0..) |rest, plain| if (rest) |r| {
        all[r] = restPass(plain_tunings[plain]);
    };
    all[wide_rest_pass] = plain_tunings[wide_pass];
    all[wide_rest_pass].pad_resident = true;
    break :blk all;
};

const plain_tunings = [wide_pass + 1]Tuning{
    .{ .shape = .{ .vocab_rows = 8, .min_blocks = 4 }, .shape_of = &.{
        .{ .f32, .{ .vocab_rows = 4, .min_blocks = 4 } },
        .{ .f16, .{ .vocab_rows = 4, .min_blocks = 4 } },
        .{ .bf16, .{ .vocab_rows = 4, .min_blocks = 4 } },
        .{ .q4_0, .{ .vocab_rows = 4, .min_blocks = 4 } },
        .{ .q8_0, .{ .vocab_rows = 8, .min_blocks = 6 } },
        .{ .q2_k, .{ .vocab_rows = 8, .min_blocks = 4, .bulk = 2 } },
        .{ .q4_k, .{ .vocab_rows = 8, .min_blocks = 4, .bulk = 2, .chunks_per_step = 2 } },
        .{ .q5_k, .{ .vocab_rows = 6, .min_blocks = 4, .bulk = 2 } },
        .{ .q5_0, .{ .vocab_rows = 4, .min_blocks = 4, .bulk = 2 } },
        .{ .q5_1, .{ .vocab_rows = 4, .min_blocks = 4, .bulk = 2, .chunks_per_step = 2 } },
        .{ .q6_k, .{ .vocab_rows = 4, .min_blocks = 4, .prefetch = true, .bulk = 2 } },
        .{ .q3_k, .{ .vocab_rows = 6, .min_blocks = 4, .prefetch = true, .bulk = 2 } },
    } },
    .{ .shape = .{ .vocab_rows = 8 }, .shape_of = &.{
        .{ .f16, .{ .vocab_rows = 4 } },
        .{ .q8_0, .{ .vocab_rows = 4, .min_blocks = 6 } },
        .{ .q3_k, .{ .vocab_rows = 4, .min_blocks = 6 } },
        .{ .q5_1, .{ .vocab_rows = 8, .min_blocks = 4 } },
        .{ .q4_0, .{ .vocab_rows = 6, .prefetch = true } },
        .{ .q5_0, .{ .vocab_rows = 8, .prefetch = true } },
        .{ .q5_k, .{ .vocab_rows = 4, .prefetch = true, .bulk = 2 } },
        .{ .q6_k, .{ .vocab_rows = 4, .bulk = 2 } },
        .{ .q2_k, .{ .vocab_rows = 8, .bulk = 2, .chunks_per_step = 2 } },
        .{ .iq4_nl, .{ .vocab_rows = 8, .chunks_per_step = 2 } },
        .{ .iq4_xs, .{ .vocab_rows = 8, .chunks_per_step = 2 } },
    } },
    .{ .shape = .{ .vocab_rows = 4, .min_blocks = 4, .chunks_per_step = 2 }, .shape_of = &.{
        .{ .q5_1, .{ .vocab_rows = 6, .min_blocks = 4, .chunks_per_step = 2 } },
        .{ .q5_k, .{ .vocab_rows = 6, .min_blocks = 4, .chunks_per_step = 2 } },
        .{ .q5_0, .{ .vocab_rows = 4, .min_blocks = 2, .chunks_per_step = 2, .pad_rest = false } },
        .{ .q4_0, .{ .vocab_rows = 4, .min_blocks = 4, .prefetch = true, .chunks_per_step = 2 } },
        .{ .q4_k, .{ .vocab_rows = 4, .min_blocks = 4, .chunks_per_step = 2, .pad_rest = false } },
        .{ .iq4_nl, .{ .vocab_rows = 4, .min_blocks = 4, .chunks_per_step = 2, .pad_rest = false } },
    } },
    .{ .shape = .{ .vocab_rows = 8 }, .shape_of = &.{
        .{ .f32, .{ .vocab_rows = 8, .chunks_per_step = 2 } },
        .{ .bf16, .{ .vocab_rows = 4 } },
        .{ .iq4_xs, .{ .vocab_rows = 4, .pad_rest = false } },
        .{ .q5_0, .{ .vocab_rows = 6, .pad_rest = false } },
        .{ .q5_1, .{ .vocab_rows = 6, .pad_rest = false } },
        .{ .q3_k, .{ .vocab_rows = 6, .pad_rest = false } },
        .{ .q4_k, .{ .vocab_rows = 6, .pad_rest = false } },
        .{ .q4_0, .{ .vocab_rows = 8, .min_blocks = 3 } },
        .{ .q2_k, .{ .vocab_rows = 8, .prefetch = true, .bulk = 2, .pad_rest = false } },
        .{ .q6_k, .{ .vocab_rows = 8, .stages = 3 } },
        .{ .q5_k, .{ .vocab_rows = 8, .stages = 3 } },
        .{ .iq4_nl, .{ .vocab_rows = 8, .bulk = 2 } },
    } },
    .{ .shape = .{ .vocab_rows = 8, .resident = true, .pad_rest = false }, .types = &.{ .f32, .bf16, .f16, .q8_0 }, .shape_of = &.{
        .{ .f32, .{ .vocab_rows = 8, .chunks_per_step = 2, .resident = true, .pad_rest = false } },
        .{ .q8_0, .{ .vocab_rows = 8, .stages = 2, .resident = true } },
    } },
};

/// The rest pass of a plain pass (pass_sizes): the types that keep halving passes there, each
/// in its own shape but padding the rest.
fn restPass(comptime plain: Tuning) Tuning {
    comptime {
        var types: [formats.all.len]formats.Type = undefined;
        var shapes: [formats.all.len]TypeShape = undefined;
        var count: usize = 0;
        for (formats.all) |f| {
            var shape = plain.shapeOf(@backingInt(f.type));
            if (!f.head or shape.pad_rest) continue;
            shape.pad_rest = true;
            types[count] = f.type;
            shapes[count] = .{ f.type, shape };
            count += 1;
        }
        const held = types[0..count].*;
        const own = shapes[0..count].*;
        var shape = plain.shape;
        shape.pad_rest = true;
        return .{ .shape = shape, .shape_of = &own, .types = &held };
    }
}

/// `tunings`, with the overrides of tuning runs: `LMHEAD_CUDA_VOCAB_ROWS` sets every type's
/// vocab rows per warp, `LMHEAD_CUDA_MIN_BLOCKS` every type's blocks per SM and
/// `LMHEAD_CUDA_PREFETCH` (0 or 1) whether every type prefetches, `LMHEAD_CUDA_STAGES` (0, or 2
/// to 4) every type's ring, `LMHEAD_CUDA_CHUNKS_PER_STEP` (1 or 2) every type's step,
/// `LMHEAD_CUDA_PAD_REST` (0 or 1) whether every type pads the rest of a call's rows, and
/// `LMHEAD_CUDA_RESIDENT` (1 to 16) that the wide pass holds every type from resident rows,
/// with that many vocab rows per warp, each in its 8-row shape otherwise, with no ring but the
/// stages LMHEAD_CUDA_STAGES names.
pub fn tuningsFromEnv() Error![pass_sizes.len]Tuning {
    var result = tunings;
    const vocab_rows = try envCount("LMHEAD_CUDA_VOCAB_ROWS", 1, max_vocab_rows);
    const min_blocks = try envCount("LMHEAD_CUDA_MIN_BLOCKS", 0, max_min_blocks);
    const prefetch = try envCount("LMHEAD_CUDA_PREFETCH", 0, 1);
    const stages = try envCount("LMHEAD_CUDA_STAGES", 0, 4);
    if (stages == 1) return fail(error.InvalidArgument, "LMHEAD_CUDA_STAGES=1: expected 0, or 2 to 4", .{});
    const bulk = try envCount("LMHEAD_CUDA_BULK", 0, 4);
    if (bulk == 1) return fail(error.InvalidArgument, "LMHEAD_CUDA_BULK=1: expected 0, or 2 to 4", .{});
    const chunks_per_step = try envCount("LMHEAD_CUDA_CHUNKS_PER_STEP", 1, 2);
    const pad_rest = try envCount("LMHEAD_CUDA_PAD_REST", 0, 1);
    const resident = try envCount("LMHEAD_CUDA_RESIDENT", 1, max_vocab_rows);
    const bulk_ring = (bulk orelse 0) > 0;
    const stage_ring = (stages orelse 0) > 0;
    if (bulk_ring and stage_ring) return fail(error.InvalidArgument, "LMHEAD_CUDA_BULK and LMHEAD_CUDA_STAGES: a bulk ring or a ring of chunks, not both", .{});
    if (resident != null and bulk_ring) return fail(error.InvalidArgument, "LMHEAD_CUDA_RESIDENT and LMHEAD_CUDA_BULK: resident rows or a bulk ring, not both", .{});
    if (resident != null) for ([_]usize{ wide_pass, wide_rest_pass }) |i| {
        result[i] = .{ .shape = tunings[wide_pass - 1].shape, .shape_of = tunings[wide_pass - 1].shape_of, .pad_resident = tunings[i].pad_resident };
    };
    for (&result, 0..) |*t, i| {
        t.forced = .{ .vocab_rows = vocab_rows, .min_blocks = min_blocks, .prefetch = if (prefetch) |n| n == 1 else null, .stages = stages, .bulk = bulk, .chunks_per_step = chunks_per_step, .pad_rest = if (pad_rest) |n| n == 1 else null };
        // A forced ring of either kind replaces the other; a forced bulk ring replaces resident
        // rows too.
        if (bulk_ring and stages == null) t.forced.stages = 0;
        if (stage_ring and bulk == null) t.forced.bulk = 0;
        if (bulk_ring) t.forced.resident = false;
        if (resident != null and (i == wide_pass or i == wide_rest_pass)) {
            t.forced.vocab_rows = resident;
            t.forced.prefetch = false;
            t.forced.stages = stages orelse 0;
            t.forced.bulk = 0;
            t.forced.resident = true;
        }
        for (formats.all) |f| {
            const shape = t.shapeOf(@backingInt(f.type));
            if (!validShape(shape)) return fail(error.InvalidArgument, "{s}: {d} vocab rows per warp in a ring of {d} stages exceed a block's 48 KiB of shared memory (LMHEAD_CUDA_VOCAB_ROWS, LMHEAD_CUDA_STAGES)", .{ f.name, shape.vocab_rows, shape.stages });
        }
    }
    return result;
}

/// `LMHEAD_CUDA_FTZ=1`: compile the modules with --ftz=true (the GPU check's second pass).
pub fn ftzFromEnv() bool {
    const v = std.c.getenv("LMHEAD_CUDA_FTZ") orelse return false;
    return std.mem.eql(u8, std.mem.span(v), "1");
}

/// The environment variable `name` as an integer in [min, max]; null when it is unset.
fn envCount(comptime name: [:0]const u8, min: u32, max: u32) Error!?u32 {
    const v = std.c.getenv(name) orelse return null;
    const n = std.fmt.parseInt(u32, std.mem.span(v), 10) catch max + 1;
    if (n < min or n > max) return fail(error.InvalidArgument, name ++ "={s}: expected {d} to {d}", .{ v, min, max });
    return n;
}

/// Whether the modules of pass size `pass` have a _normed entry point a type (entries.cu's
/// LMH_CUDA_NORMED_ENTRY): those of 1 and 2 rows per pass.
fn hasNormedEntry(pass: usize) bool {
    return pass_sizes[pass] <= 2;
}

/// The pass whose module runs matvec `p`: the wide pass where it holds the type and would run
/// it from resident rows (of at most `max_shared_bytes`), or its rest pass for the N
/// padsResidentTile names; else the smallest pass size that holds its rows (the largest past
/// it), or that size's rest pass where the rows fill no pass of it and the rest pass holds the
/// type.
fn passIndex(passes: *const [pass_sizes.len]Tuning, p: params.Matvec, max_shared_bytes: u32) usize {
    const wide = passes[wide_pass];
    if (wide.holds(p.type_id) and areaBytes(wide.shapeOf(p.type_id), p, max_shared_bytes) != 0) {
        return if (padsResidentTile(p.rows) and passes[wide_rest_pass].holds(p.type_id)) wide_rest_pass else wide_pass;
    }
    for (pass_sizes[0..wide_pass], 0..) |size, i| if (p.rows <= size) {
        if (rest_pass_of[i]) |rest| if (p.rows < size and passes[rest].holds(p.type_id)) return rest;
        return i;
    };
    return wide_pass - 1;
}

/// Whether a call of `rows` resident rows runs its last tile, short of a pass, as one full
/// pass (the wide rest pass, every tile of the call in its module): where that tile is 7 rows
/// (else 3 passes of 4, 2 and 1, each reading the weights) in a call of up to 64 rows, or 4 to
/// 7 rows in a call under 24. The wide rest pass runs each full tile slower (7-15% on an H100:
/// a full pass of 8 rows that writes fewer), so padding pays where the short tile's passes cost
/// more than that. On an H200 (call 49, bench/results/cuda-h200.md) against the wide pass, for
/// all four resident types: N = 15, 23, 31, 39, 47, 55 and 63 5-62% less a call; N = 12 to 14
/// and 21 to 22 2-48% less, N = 20 level to 10% less; but N = 28 to 30 and 36, 44, 52 and 60
/// from 31% less to 13% more (F16 and BF16 slower). On an H100 (call 51) the same: every N
/// taken 2-68% less (F16 N = 21 level), the others up to 16% more; N = 9 and 10 went either way
/// there (call 47).
/// Past 64 rows unmeasured: each full tile's cost grows the padded call.
fn padsResidentTile(rows: u32) bool {
    if (rows < 8 or rows > 64) return false;
    const short_rows = rows % 8;
    return short_rows == 7 or (short_rows >= 4 and rows < 24);
}

/// The compiled module of pass size `pass` for the types of `shape` (from the cache, or
/// NVRTC's now): the kernel source with its tuning macros. Caller frees it with c_allocator.
pub fn compileModule(nvrtc: *const driver.Nvrtc, arch: u32, ftz: bool, pass: usize, tuning: Tuning, shape: Shape) Error![]u8 {
    std.debug.assert(tuning.typesWith(shape) != 0);
    const defines = [_]struct { []const u8, u32 }{
        .{ "LMH_VOCAB_ROWS_PER_SIMDGROUP", shape.vocab_rows },
        .{ "LMH_CUDA_MATVEC_TYPES", tuning.typesWith(shape) },
        .{ "LMH_ROWS_PER_PASS", pass_sizes[pass] },
        .{ "LMH_CHUNKS_PER_STEP", shape.chunks_per_step },
        .{ "LMH_CUDA_BLOCK_THREADS", threads_per_block },
        .{ "LMH_CUDA_MIN_BLOCKS", shape.min_blocks },
        .{ "LMH_PREFETCH_ROWS", @intFromBool(shape.prefetch) },
        .{ "LMH_STAGES", shape.stages },
        .{ "LMH_BULK_STAGES", shape.bulk },
        .{ "LMH_CUDA_NORMED_ENTRY", @intFromBool(hasNormedEntry(pass)) },
        .{ "LMH_RESIDENT", @intFromBool(shape.resident) },
        .{ "LMH_THREADGROUP_SHIFT", std.math.log2_int(u32, warps_per_block) },
        .{ "LMH_PAD_REST", @intFromBool(shape.pad_rest) },
        .{ "LMH_PAD_RESIDENT", @intFromBool(shape.pad_resident) },
        .{ "LMH_LANE_LAYOUT", 1 },
    };
    comptime std.debug.assert(defines.len <= module.max_defines);
    return module.cubin(nvrtc, .{ .arch = arch, .ftz = ftz, .defines = &defines });
}

/// The distinct shapes of a pass's head types, in formats.all's order.
pub fn shapesOf(tuning: Tuning, out: *[formats.all.len]Shape) []const Shape {
    var count: usize = 0;
    for (formats.all) |f| if (f.head and tuning.holds(@backingInt(f.type))) {
        const shape = tuning.shapeOf(@backingInt(f.type));
        for (out[0..count]) |s| {
            if (std.meta.eql(s, shape)) break;
        } else {
            out[count] = shape;
            count += 1;
        }
    };
    return out[0..count];
}

/// compileModule for each of `shapes` at once, a thread each: NVRTC (13.0) compiles separate
/// programs in parallel, and a device's first open compiles every one-row module (with three,
/// an H200 machine's first open took 7.1 s instead of 11.2). images[i] is shapes[i]'s; the
/// caller frees them with c_allocator.
pub fn compileModules(nvrtc: *const driver.Nvrtc, arch: u32, ftz: bool, pass: usize, tuning: Tuning, shapes: []const Shape, images: [][]u8) Error!void {
    std.debug.assert(shapes.len == images.len and shapes.len <= formats.all.len);
    const Job = struct {
        nvrtc: *const driver.Nvrtc,
        arch: u32,
        ftz: bool,
        pass: usize,
        tuning: Tuning,
        shape: Shape,
        image: Error![]u8 = error.Backend,
        // A failure's message, which status keeps per thread.
        message: [256]u8 = undefined,
        message_bytes: usize = 0,

        fn run(job: *@This()) void {
            job.image = compileModule(job.nvrtc, job.arch, job.ftz, job.pass, job.tuning, job.shape);
            if (job.image) |_| {} else |_| {
                job.message_bytes = @min(status.message().len, job.message.len);
                @memcpy(job.message[0..job.message_bytes], status.message()[0..job.message_bytes]);
            }
        }
    };
    var jobs: [formats.all.len]Job = undefined;
    var threads: [formats.all.len]?std.Thread = @splat(null);
    for (shapes, 0..) |shape, i| {
        jobs[i] = .{ .nvrtc = nvrtc, .arch = arch, .ftz = ftz, .pass = pass, .tuning = tuning, .shape = shape };
        // The last one, or any whose thread cannot start, on this thread.
        if (i + 1 < shapes.len) threads[i] = std.Thread.spawn(.{}, Job.run, .{&jobs[i]}) catch null;
        if (threads[i] == null) jobs[i].run();
    }
    for (threads[0..shapes.len]) |t| if (t) |thread| thread.join();
    var failed: ?usize = null;
    for (jobs[0..shapes.len], images, 0..) |job, *image, i| {
        if (job.image) |bytes| image.* = bytes else |_| failed = failed orelse i;
    }
    if (failed) |i| {
        for (jobs[0..shapes.len]) |job| if (job.image) |bytes| std.heap.c_allocator.free(bytes) else |_| {};
        const job = &jobs[i];
        const err = if (job.image) |_| unreachable else |e| e;
        return fail(err, "{s}", .{job.message[0..job.message_bytes]});
    }
}

/// Pinned staging for uploads: they alternate between two buffers so the host fills one
/// while the other is copied.
const staging_bytes = 16 << 20;
/// Segments a row of a non-finite count is split into at most (a power of two).
const max_segments = 1024;

/// Segments a row of a non-finite count is split into, a warp each: a power of two, until
/// the rows' segments make `warps_wanted`, or max_segments, or a lane has 8 values of its
/// segment (256 values a segment). Measured on an H200, vocab 262144: with 64 values a lane
/// and 256 segments at most, the softcap and count after the matvec took 24-27 µs of a call
/// at N = 1 to 4; with 8 and 1024, 13-17 µs (3-4% of a one-row Q8_0 or F16 call). Unrolling
/// the count's loop instead changed nothing.
fn countSegments(rows: u32, row_values: u32, warps_wanted: u64) u32 {
    var segments: u32 = 1;
    while (segments < max_segments and @as(u64, rows) * segments < warps_wanted and @as(u64, segments) * 32 * 8 < row_values) segments *= 2;
    return segments;
}
/// Lane-layout copies a device keeps at most (kernels.h LMH_LANE_LAYOUT, which every module
/// takes): a decode loop reads one head; a larger set of heads takes turns.
const max_lane_copies = 4;

/// The lane layout's copy of a head that matvecs read: made on the device from the head's
/// bytes at `source` (`key`'s vocab rows of its row_bytes), kept while those bytes stay as
/// they were.
const LaneCopy = struct {
    source: driver.DevicePointer = 0,
    /// The matvec's hidden, vocab, type_id and row_bytes (its other fields zero).
    key: params.Matvec = std.mem.zeroes(params.Matvec),
    copy: driver.DevicePointer = 0,
    /// Backend.lane_clock at its last use; 0: the slot is empty.
    used: u64 = 0,

    fn keyOf(p: params.Matvec) params.Matvec {
        return .{ .rows = 0, .hidden = p.hidden, .vocab = p.vocab, .type_id = p.type_id, .row_bytes = p.row_bytes, .chunks = 0 };
    }

    fn sourceBytes(c: LaneCopy) u64 {
        return @as(u64, c.key.vocab) * c.key.row_bytes;
    }
};

/// The largest kernel parameter: the params structs of kernels/params.zig.
const max_argument_bytes = 32;

/// The driver and NVRTC, loaded once per process and kept.
var libraries_lock: std.c.pthread_mutex_t = .{};
var libraries: ?struct { cuda: driver.Cuda, nvrtc: driver.LoadedNvrtc } = null;

fn loadLibraries() Error!*const @TypeOf(libraries.?) {
    _ = std.c.pthread_mutex_lock(&libraries_lock);
    defer _ = std.c.pthread_mutex_unlock(&libraries_lock);
    if (libraries == null) {
        const cuda = try driver.loadCuda();
        // A driver without a GPU is a machine without CUDA, like one without the driver,
        // not a failing backend.
        const init = cuda.cuInit(0);
        if (init == driver.result_no_device) return fail(error.Unsupported, "the CUDA driver sees no GPU (cuInit: CUDA_ERROR_NO_DEVICE)", .{});
        try cuda.check(init, "cuInit");
        libraries = .{ .cuda = cuda, .nvrtc = try driver.loadNvrtc() };
    }
    return &libraries.?;
}

const Kernels = struct {
    rms_norm: driver.Function,
    softcap: driver.Function,
    count_non_finite: driver.Function,
    sum_segments: driver.Function,
    lane_relayout: driver.Function,
    probe_read: driver.Function,
    probe_fma: driver.Function,
    /// By pass size (pass_sizes), then the type's index in formats.all, then input_flushed
    /// (entries.cu: the entry point for any rows, then the one for the norm's output, the
    /// same one where the module has no _normed entry: hasNormedEntry).
    matvec: [pass_sizes.len][formats.all.len][2]driver.Function,
};

pub const Backend = struct {
    cuda: *const driver.Cuda,
    nvrtc: *const driver.Nvrtc,
    nvrtc_path: []const u8,
    /// `LMHEAD_CUDA_FTZ=1`: modules compiled with --ftz=true (the GPU check's second pass).
    ftz: bool = false,
    device: driver.Device,
    context: driver.Context,
    stream: driver.Stream = null,
    /// By pass size, then the type's index in formats.all: the module holding the type's
    /// matvec (one module serves every type of its shape).
    modules: [pass_sizes.len][formats.all.len]driver.Module = @splat(@splat(null)),
    kernels: Kernels = undefined,
    /// Around each execute's launches, for the device time it reports.
    timing: [2]driver.Event = .{ null, null },
    /// The partial counts of a non-finite count split into segments, grown on demand.
    partials: Memory = .{ .pointer = 0, .bytes = 0 },
    staging: [2][*]u8 = undefined,
    staging_free: [2]driver.Event = .{ null, null },
    /// The stream and the staging buffers serve one call at a time.
    lock: std.c.pthread_mutex_t = .{},
    tunings: [pass_sizes.len]Tuning = tunings,
    gpu_name: [96]u8 = @splat(0),
    arch: u32 = 0,
    multiprocessors: u32 = 0,
    /// Shared memory a block may have, dynamic included, once its kernel opts in.
    max_block_shared_bytes: u32 = 0,
    /// As kernels.matvec: the blocks of a matvec with `shared_bytes` of dynamic shared memory
    /// (a bulk ring, resident rows) that one SM holds (0 bytes: not asked yet).
    held_blocks: [pass_sizes.len][formats.all.len][2]struct { shared_bytes: u32, blocks: u32 } = @splat(@splat(@splat(.{ .shared_bytes = 0, .blocks = 0 }))),
    /// The heads' lane-layout copies; lane_clock counts their uses, for the least recent.
    lane_copies: [max_lane_copies]LaneCopy = @splat(.{}),
    lane_clock: u64 = 0,

    pub const name = "cuda";
    pub const host_visible = false;
    /// A device allocation. Wrapped host memory is copied in once: the caller keeps it
    /// unchanged while the buffer lives, so the copy stays equal to it.
    pub const Memory = struct { pointer: driver.DevicePointer, bytes: u64 };

    pub fn create() Error!*Backend {
        const libs = try loadLibraries();
        const cuda = &libs.cuda;
        var count: c_int = 0;
        try cuda.check(cuda.cuDeviceGetCount(&count), "cuDeviceGetCount");
        if (count == 0) return fail(error.Unsupported, "the CUDA driver sees no GPU", .{});
        var device: driver.Device = 0;
        try cuda.check(cuda.cuDeviceGet(&device, 0), "cuDeviceGet");
        var context: driver.Context = null;
        try cuda.check(cuda.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
        const backend = std.heap.c_allocator.create(Backend) catch {
            _ = cuda.cuDevicePrimaryCtxRelease_v2(device);
            return fail(error.OutOfMemory, "out of memory", .{});
        };
        backend.* = .{ .cuda = cuda, .nvrtc = &libs.nvrtc.table, .nvrtc_path = std.mem.sliceTo(&libs.nvrtc.path, 0), .device = device, .context = context };
        backend.setUp() catch |e| {
            backend.destroy();
            return e;
        };
        return backend;
    }

    fn setUp(backend: *Backend) Error!void {
        const cuda = backend.cuda;
        try cuda.check(cuda.cuCtxSetCurrent(backend.context), "cuCtxSetCurrent");
        try cuda.check(cuda.cuDeviceGetName(&backend.gpu_name, backend.gpu_name.len - 1, backend.device), "cuDeviceGetName");
        var major: c_int = 0;
        var minor: c_int = 0;
        var sms: c_int = 0;
        try cuda.check(cuda.cuDeviceGetAttribute(&major, driver.attribute_compute_capability_major, backend.device), "cuDeviceGetAttribute");
        try cuda.check(cuda.cuDeviceGetAttribute(&minor, driver.attribute_compute_capability_minor, backend.device), "cuDeviceGetAttribute");
        try cuda.check(cuda.cuDeviceGetAttribute(&sms, driver.attribute_multiprocessor_count, backend.device), "cuDeviceGetAttribute");
        backend.arch = @intCast(major * 10 + minor);
        backend.multiprocessors = @intCast(@max(sms, 1));
        var shared: c_int = 0;
        try cuda.check(cuda.cuDeviceGetAttribute(&shared, driver.attribute_max_shared_memory_per_block_optin, backend.device), "cuDeviceGetAttribute");
        backend.max_block_shared_bytes = @intCast(@max(shared, 0));
        try cuda.check(cuda.cuStreamCreate(&backend.stream, driver.stream_non_blocking), "cuStreamCreate");
        for (&backend.staging, &backend.staging_free) |*s, *e| {
            var host: ?*anyopaque = null;
            try cuda.check(cuda.cuMemAllocHost_v2(&host, staging_bytes), "cuMemAllocHost");
            s.* = @ptrCast(host.?);
            try cuda.check(cuda.cuEventCreate(e, 0), "cuEventCreate");
        }
        for (&backend.timing) |*e| try cuda.check(cuda.cuEventCreate(e, 0), "cuEventCreate");
        backend.ftz = ftzFromEnv();
        backend.tunings = try tuningsFromEnv();
        try backend.loadOneRowModules();
        // The kernels other than matvec are the same in every module: the first type's.
        const k = &backend.kernels;
        const first = backend.modules[0][0];
        k.rms_norm = try backend.function(first, "rms_norm_f32");
        k.softcap = try backend.function(first, "softcap_f32");
        k.count_non_finite = try backend.function(first, "count_non_finite_f32");
        k.sum_segments = try backend.function(first, "sum_segments_u32");
        k.lane_relayout = try backend.function(first, "lane_relayout");
        k.probe_read = try backend.function(first, "lmh_probe_read");
        k.probe_fma = try backend.function(first, "lmh_probe_fma");
    }

    /// Every one-row module, compiled at once (or read from the cache): the device's first
    /// call, of any type and N, needs one of them. The context is current.
    fn loadOneRowModules(backend: *Backend) Error!void {
        var buffer: [formats.all.len]Shape = undefined;
        const shapes = shapesOf(backend.tunings[0], &buffer);
        var images: [formats.all.len][]u8 = undefined;
        try compileModules(backend.nvrtc, backend.arch, backend.ftz, 0, backend.tunings[0], shapes, images[0..shapes.len]);
        defer for (images[0..shapes.len]) |image| std.heap.c_allocator.free(image);
        for (shapes, images[0..shapes.len]) |shape, image| try backend.loadModule(0, shape, image);
    }

    /// Compiles (or reads from the cache) and loads the module that holds the matvec of type
    /// `type_id` at pass size `pass`. The context is current.
    fn loadMatvec(backend: *Backend, pass: usize, type_id: u32) Error!void {
        if (backend.modules[pass][formatIndex(type_id)] != null) return;
        const tuning = backend.tunings[pass];
        const shape = tuning.shapeOf(type_id);
        const image = try compileModule(backend.nvrtc, backend.arch, backend.ftz, pass, tuning, shape);
        defer std.heap.c_allocator.free(image);
        try backend.loadModule(pass, shape, image);
    }

    /// Loads a compiled module of pass size `pass` and finds the entry points of its types
    /// (those of `shape`) by the registry's names and their _normed twins (entries.cu).
    fn loadModule(backend: *Backend, pass: usize, shape: Shape, image: []const u8) Error!void {
        const tuning = backend.tunings[pass];
        var m: driver.Module = null;
        try backend.cuda.check(backend.cuda.cuModuleLoadData(&m, image.ptr), "cuModuleLoadData");
        errdefer _ = backend.cuda.cuModuleUnload(m);
        const types = tuning.typesWith(shape);
        var found: [formats.all.len][2]driver.Function = @splat(@splat(null));
        inline for (formats.all, 0..) |f, t| {
            if ((types >> @backingInt(f.type)) & 1 != 0) {
                const raw = try backend.function(m, "matvec_" ++ f.name ++ "_f32");
                found[t] = .{ raw, if (hasNormedEntry(pass)) try backend.function(m, "matvec_" ++ f.name ++ "_normed_f32") else raw };
                for (found[t]) |entry| try backend.checkStaticShared(entry, shape);
                // A bulk ring and resident rows are dynamic shared memory, past the 48 KiB a
                // kernel gets unasked: what a block may have, less a ring of chunks' stages.
                if (shape.bulk != 0 or shape.resident) for (found[t]) |entry| try backend.cuda.check(backend.cuda.cuFuncSetAttribute(entry, driver.function_attribute_max_dynamic_shared_bytes, @intCast(backend.max_block_shared_bytes -| stageRingBytes(shape))), "cuFuncSetAttribute");
            }
        }
        // Kept only once every entry point is found: a module unloaded on failure stays out.
        for (formats.all, 0..) |f, t| if ((types >> @intCast(@backingInt(f.type))) & 1 != 0) {
            backend.kernels.matvec[pass][t] = found[t];
            backend.modules[pass][t] = m;
        };
    }

    /// The host sizes a block's dynamic shared memory (bulk ring, resident rows) as what is
    /// left beside its ring of chunks, the only static shared memory (prelude.cuh's
    /// LMH_STAGE_RING_DEFINE), by stageRingBytes: a module whose ring differs would be
    /// launched with shared memory it does not have, so it is refused here.
    fn checkStaticShared(backend: *Backend, entry: driver.Function, shape: Shape) Error!void {
        var bytes: c_int = 0;
        try backend.cuda.check(backend.cuda.cuFuncGetAttribute(&bytes, driver.function_attribute_static_shared_bytes, entry), "cuFuncGetAttribute");
        if (bytes != stageRingBytes(shape)) return fail(error.Backend, "a CUDA module has {d} bytes of static shared memory where its shape's ring of chunks takes {d} (kernels.h and backend.zig's stageRingBytes disagree)", .{ bytes, stageRingBytes(shape) });
    }

    fn function(backend: *Backend, m: driver.Module, comptime entry: [:0]const u8) Error!driver.Function {
        var f: driver.Function = null;
        try backend.cuda.check(backend.cuda.cuModuleGetFunction(&f, m, entry), "cuModuleGetFunction(" ++ entry ++ ")");
        return f;
    }

    pub fn destroy(backend: *Backend) void {
        const cuda = backend.cuda;
        _ = cuda.cuCtxSetCurrent(backend.context);
        for (backend.modules) |of_type| for (of_type, 0..) |m, t| {
            // Each module once: at the first type that holds it.
            if (m != null and std.mem.indexOfScalar(driver.Module, of_type[0..t], m) == null) _ = cuda.cuModuleUnload(m);
        };
        for (backend.timing) |e| if (e != null) {
            _ = cuda.cuEventDestroy_v2(e);
        };
        if (backend.partials.bytes != 0) _ = cuda.cuMemFree_v2(backend.partials.pointer);
        for (backend.lane_copies) |c| if (c.used != 0) {
            _ = cuda.cuMemFree_v2(c.copy);
        };
        for (backend.staging_free, 0..) |e, i| if (e != null) {
            _ = cuda.cuEventDestroy_v2(e);
            _ = cuda.cuMemFreeHost(backend.staging[i]);
        };
        if (backend.stream != null) _ = cuda.cuStreamDestroy_v2(backend.stream);
        _ = cuda.cuDevicePrimaryCtxRelease_v2(backend.device);
        std.heap.c_allocator.destroy(backend);
    }

    pub fn describe(backend: *Backend, out: []u8) []const u8 {
        return std.fmt.bufPrint(out, "cuda: {s}, sm_{d}, {d} multiprocessors, NVRTC {s}", .{
            std.mem.sliceTo(&backend.gpu_name, 0), backend.arch, backend.multiprocessors, backend.nvrtc_path,
        }) catch out;
    }

    pub fn threads(backend: *Backend) u32 {
        _ = backend;
        return 1;
    }

    /// Makes the device's context current on the calling thread and takes the stream.
    fn enter(backend: *Backend) Error!void {
        _ = std.c.pthread_mutex_lock(&backend.lock);
        backend.cuda.check(backend.cuda.cuCtxSetCurrent(backend.context), "cuCtxSetCurrent") catch |e| {
            _ = std.c.pthread_mutex_unlock(&backend.lock);
            return e;
        };
    }

    fn leave(backend: *Backend) void {
        _ = std.c.pthread_mutex_unlock(&backend.lock);
    }

    pub fn alloc(backend: *Backend, bytes: u64) Error!Memory {
        try backend.enter();
        defer backend.leave();
        const cuda = backend.cuda;
        // A multiple of 16 bytes: a bulk copy reads the 16-byte pieces around its rows.
        const padded = std.mem.alignForward(u64, bytes, 16);
        const device_pointer = try backend.deviceAlloc(padded, "");
        errdefer _ = cuda.cuMemFree_v2(device_pointer);
        try cuda.check(cuda.cuMemsetD8Async(device_pointer, 0, @intCast(padded), backend.stream), "cuMemsetD8Async");
        try cuda.check(cuda.cuStreamSynchronize(backend.stream), "cuStreamSynchronize");
        return .{ .pointer = device_pointer, .bytes = bytes };
    }

    /// Uploads host memory (a mapped file, say) once, through the pinned staging buffers.
    pub fn wrap(backend: *Backend, host: [*]u8, bytes: u64) Error!Memory {
        const memory = try backend.alloc(bytes);
        errdefer backend.free(memory);
        try backend.copyIn(memory, 0, host[0..@intCast(bytes)]);
        return memory;
    }

    pub fn free(backend: *Backend, memory: Memory) void {
        backend.enter() catch return;
        defer backend.leave();
        _ = backend.dropLaneCopies(memory.pointer, memory.bytes);
        _ = backend.cuda.cuMemFree_v2(memory.pointer);
    }

    pub fn address(memory: Memory) usize {
        return @intCast(memory.pointer);
    }

    /// Host → device in staging-sized pieces: the host fills one pinned buffer while the
    /// copy engine reads the other.
    pub fn copyIn(backend: *Backend, memory: Memory, offset_bytes: u64, src: []const u8) Error!void {
        std.debug.assert(offset_bytes + src.len <= memory.bytes);
        try backend.enter();
        defer backend.leave();
        _ = backend.dropLaneCopies(memory.pointer + offset_bytes, src.len);
        const cuda = backend.cuda;
        var done: usize = 0;
        var piece: usize = 0;
        while (done < src.len) : (piece += 1) {
            const n = @min(src.len - done, staging_bytes);
            const slot = piece % 2;
            try cuda.check(cuda.cuEventSynchronize(backend.staging_free[slot]), "cuEventSynchronize");
            @memcpy(backend.staging[slot][0..n], src[done..][0..n]);
            try cuda.check(cuda.cuMemcpyHtoDAsync_v2(memory.pointer + offset_bytes + done, backend.staging[slot], n, backend.stream), "cuMemcpyHtoDAsync");
            try cuda.check(cuda.cuEventRecord(backend.staging_free[slot], backend.stream), "cuEventRecord");
            done += n;
        }
        try cuda.check(cuda.cuStreamSynchronize(backend.stream), "cuStreamSynchronize");
    }

    /// Page-locks host memory (the head's logits readback), so that the copy engine writes
    /// it directly instead of through the driver's own pageable-copy staging.
    pub fn pinHost(backend: *Backend, host: [*]u8, bytes: u64) Error!void {
        try backend.enter();
        defer backend.leave();
        try backend.cuda.check(backend.cuda.cuMemHostRegister_v2(host, @intCast(bytes), 0), "cuMemHostRegister");
    }

    pub fn unpinHost(backend: *Backend, host: [*]u8) void {
        backend.enter() catch return;
        defer backend.leave();
        _ = backend.cuda.cuMemHostUnregister(host);
    }

    /// Device → host, straight into the caller's memory (pinned or not). Measured on an H200
    /// host, pageable memory: 1 MB of logits in 0.08–0.09 ms and 67 MB in 4.3–5.0 ms, against
    /// 0.13 and 12.9 ms through a pinned staging buffer and a memcpy
    /// (bench/results/cuda-h200.md).
    pub fn copyOut(backend: *Backend, memory: Memory, offset_bytes: u64, dst: []u8) Error!void {
        std.debug.assert(offset_bytes + dst.len <= memory.bytes);
        try backend.enter();
        defer backend.leave();
        const cuda = backend.cuda;
        try cuda.check(cuda.cuMemcpyDtoHAsync_v2(dst.ptr, memory.pointer + offset_bytes, dst.len, backend.stream), "cuMemcpyDtoHAsync");
        try cuda.check(cuda.cuStreamSynchronize(backend.stream), "cuStreamSynchronize");
    }

    /// Launches the commands in order on the device's one stream and waits once; returns
    /// the device time between events recorded around them. A barrier needs no work: on one
    /// stream a launch starts after the previous one's writes land.
    pub fn execute(backend: *Backend, commands: []const Command, registry: *const contract.Registry) Error!?u64 {
        _ = registry; // the kernels are functions of the backend's modules
        try backend.enter();
        defer backend.leave();
        const cuda = backend.cuda;
        // Modules a call needs first, and its heads' lane-layout copies, so that neither a
        // compile nor a first copy falls inside the timed launches.
        for (commands) |command| switch (command) {
            .matvec => |c| {
                const pass = passIndex(&backend.tunings, c.params, backend.max_block_shared_bytes);
                try backend.loadMatvec(pass, c.params.type_id);
                if (params.laneLayout(c.params.type_id, pass_sizes[pass])) _ = try backend.laneCopy(c.params, pointer(c.weight));
            },
            else => {},
        };
        try cuda.check(cuda.cuEventRecord(backend.timing[0], backend.stream), "cuEventRecord");
        for (commands) |command| try backend.encode(command);
        try cuda.check(cuda.cuEventRecord(backend.timing[1], backend.stream), "cuEventRecord");
        try cuda.check(cuda.cuEventSynchronize(backend.timing[1]), "cuEventSynchronize");
        var ms: f32 = 0;
        try cuda.check(cuda.cuEventElapsedTime(&ms, backend.timing[0], backend.timing[1]), "cuEventElapsedTime");
        return @intFromFloat(@max(ms, 0) * 1e6);
    }

    fn encode(backend: *Backend, command: Command) Error!void {
        const k = &backend.kernels;
        // What a command writes is no longer what a lane-layout copy of it holds: dropped once
        // the command is launched (its own weights copied before), made again where read next.
        defer switch (command) {
            .barrier => {},
            inline .rms_norm, .matvec => |c| _ = backend.dropLaneCopies(pointer(c.output), c.output.bytes),
            .softcap => |c| _ = backend.dropLaneCopies(pointer(c.data), c.data.bytes),
            .count_non_finite => |c| _ = backend.dropLaneCopies(pointer(c.counts), c.counts.bytes),
        };
        switch (command) {
            .barrier => {},
            .rms_norm => |c| try backend.launch(k.rms_norm, warpGrid(c.params.rows, 1), threads_per_block, .{ c.params, pointer(c.input), pointer(c.weight), pointer(c.output) }),
            .matvec => |c| {
                // The copy's row bytes change no pass: passIndex reads the rows and hidden size.
                const pass = passIndex(&backend.tunings, c.params, backend.max_block_shared_bytes);
                const lanes = params.laneLayout(c.params.type_id, pass_sizes[pass]);
                const weights = if (lanes) try backend.laneCopy(c.params, pointer(c.weight)) else pointer(c.weight);
                var p = c.params;
                if (lanes) p.row_bytes = params.laneRowBytes(c.params.row_bytes);
                std.debug.assert(backend.modules[pass][formatIndex(p.type_id)] != null); // loaded by execute
                const shape = backend.tunings[pass].shapeOf(p.type_id);
                const normed = @intFromBool(p.input_flushed != 0);
                const f = k.matvec[pass][formatIndex(p.type_id)][normed];
                var grid = warpGrid(p.vocab, shape.vocab_rows);
                // A shape has a bulk ring or resident rows, one at most (validShape).
                const ring = bulkRingBytes(shape, p, backend.max_block_shared_bytes);
                const area = areaBytes(shape, p, backend.max_block_shared_bytes);
                std.debug.assert(ring == 0 or area == 0);
                // Persistent blocks, as many as the SMs hold: each warp's ring runs ahead across
                // the groups of vocab rows it computes.
                if (ring != 0) grid = @min(grid, try backend.heldBlocks(pass, p.type_id, normed, ring) * backend.multiprocessors);
                // Resident rows: persistent blocks too, as many for each tile of 8 rows (kernels.h
                // lmh_matvec_resident), so every tile's vocab rows are shared alike.
                if (area != 0 and shape.resident) {
                    const tiles = std.math.divCeil(u32, p.rows, 8) catch unreachable;
                    grid = @max(tiles, try backend.heldBlocks(pass, p.type_id, normed, area) * backend.multiprocessors / tiles * tiles);
                }
                try backend.launchShared(f, grid, threads_per_block, ring + area, .{ p, pointer(c.input), weights, pointer(c.output) });
            },
            .softcap => |c| {
                const blocks = @min(std.math.divCeil(u64, c.params.values, threads_per_block) catch unreachable, 32 * @as(u64, backend.multiprocessors));
                try backend.launch(k.softcap, @intCast(blocks), threads_per_block, .{ c.params, pointer(c.data) });
            },
            .count_non_finite => |c| try backend.countNonFinite(c.params, pointer(c.data), pointer(c.counts)),
        }
    }

    /// The device address of the lane-layout copy of the head a matvec `p` reads at `source`:
    /// the one kept, or a new one made on the stream (in the slot of the least recently used
    /// where all are taken). The context is current and the stream taken.
    fn laneCopy(backend: *Backend, p: params.Matvec, source: driver.DevicePointer) Error!driver.DevicePointer {
        std.debug.assert(params.laneLayout(p.type_id, 1));
        const key = LaneCopy.keyOf(p);
        backend.lane_clock += 1;
        var slot = &backend.lane_copies[0];
        for (&backend.lane_copies) |*c| {
            if (c.used != 0 and c.source == source and std.meta.eql(c.key, key)) {
                c.used = backend.lane_clock;
                return c.copy;
            }
            if (c.used < slot.used) slot = c;
        }
        if (slot.used != 0) try backend.freeLaneCopy(slot);
        const bytes = @as(u64, key.vocab) * params.laneRowBytes(key.row_bytes);
        // Rows of a multiple of 16 bytes, as alloc's: a bulk copy's 16-byte pieces stay inside.
        std.debug.assert(bytes % 16 == 0);
        const copy = try backend.deviceAlloc(bytes, " for the head's lane-layout copy");
        errdefer _ = backend.cuda.cuMemFree_v2(copy);
        try backend.launch(backend.kernels.lane_relayout, @min(warpGrid(key.vocab, 1), 64 * backend.multiprocessors), threads_per_block, .{ key, source, copy });
        slot.* = .{ .source = source, .key = key, .copy = copy, .used = backend.lane_clock };
        return copy;
    }

    /// `bytes` of device memory. Where the device is out of memory the lane-layout copies are
    /// dropped and the allocation tried once more: they are a cache of heads' bytes that a
    /// later call makes again, and the caller's memory comes first. The context is current
    /// and the stream taken.
    fn deviceAlloc(backend: *Backend, bytes: u64, comptime what: []const u8) Error!driver.DevicePointer {
        var allocated: driver.DevicePointer = 0;
        var result = backend.cuda.cuMemAlloc_v2(&allocated, @intCast(bytes));
        if (result == driver.result_out_of_memory and backend.dropLaneCopies(0, std.math.maxInt(u64))) {
            result = backend.cuda.cuMemAlloc_v2(&allocated, @intCast(bytes));
        }
        if (result == driver.result_out_of_memory) return fail(error.OutOfMemory, "CUDA could not allocate {d} bytes of device memory" ++ what, .{bytes});
        try backend.cuda.check(result, "cuMemAlloc");
        return allocated;
    }

    /// Drops the lane-layout copies of heads that overlap `bytes` at `start` (written, or about
    /// to be written or freed), and says whether there was one. The context is current and the
    /// stream taken.
    fn dropLaneCopies(backend: *Backend, start: driver.DevicePointer, bytes: u64) bool {
        var dropped = false;
        for (&backend.lane_copies) |*c| {
            if (c.used != 0 and start < c.source + c.sourceBytes() and c.source < start + bytes) {
                backend.freeLaneCopy(c) catch {};
                dropped = true;
            }
        }
        return dropped;
    }

    /// Frees a copy once the stream's launches, which may read it, are done; the slot is
    /// emptied even where the wait fails (the copy is then left to the context's end).
    fn freeLaneCopy(backend: *Backend, c: *LaneCopy) Error!void {
        std.debug.assert(c.used != 0);
        const copy = c.copy;
        c.* = .{};
        try backend.cuda.check(backend.cuda.cuStreamSynchronize(backend.stream), "cuStreamSynchronize");
        _ = backend.cuda.cuMemFree_v2(copy);
    }

    /// The blocks of a pass's matvec of `type_id` with `shared_bytes` of dynamic shared memory
    /// that one SM holds. The driver's answer is kept per kernel and size, so a decode loop
    /// asks it once.
    fn heldBlocks(backend: *Backend, pass: usize, type_id: u32, normed: usize, shared_bytes: u32) Error!u32 {
        const held = &backend.held_blocks[pass][formatIndex(type_id)][normed];
        if (held.shared_bytes != shared_bytes) {
            var blocks: c_int = 0;
            try backend.cuda.check(backend.cuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, backend.kernels.matvec[pass][formatIndex(type_id)][normed], threads_per_block, shared_bytes), "cuOccupancyMaxActiveBlocksPerMultiprocessor");
            held.* = .{ .shared_bytes = shared_bytes, .blocks = @intCast(@max(blocks, 1)) };
        }
        return held.blocks;
    }

    /// A row of logits is long (vocab values): one warp per row would scan it alone, so each
    /// row is split into segments, a warp each, enough for the whole GPU, whose partial
    /// counts a second kernel sums. Integer counts: the split changes no result.
    fn countNonFinite(backend: *Backend, p: params.CountNonFinite, data: driver.DevicePointer, counts: driver.DevicePointer) Error!void {
        std.debug.assert(p.segments == 1);
        const warps_wanted = 16 * backend.multiprocessors * warps_per_block;
        const segments = countSegments(p.rows, p.row_values, warps_wanted);
        if (segments == 1) return backend.launch(backend.kernels.count_non_finite, warpGrid(p.rows, 1), threads_per_block, .{ p, data, counts });
        const bytes = @as(u64, p.rows) * segments * 4;
        if (backend.partials.bytes < bytes) {
            if (backend.partials.bytes != 0) _ = backend.cuda.cuMemFree_v2(backend.partials.pointer);
            backend.partials = .{ .pointer = 0, .bytes = 0 };
            backend.partials.pointer = try backend.deviceAlloc(bytes, " for the non-finite counts' partial sums");
            backend.partials.bytes = bytes;
        }
        var split = p;
        split.segments = segments;
        try backend.launch(backend.kernels.count_non_finite, warpGrid(p.rows * segments, 1), threads_per_block, .{ split, data, backend.partials.pointer });
        try backend.launch(backend.kernels.sum_segments, warpGrid(p.rows, 1), threads_per_block, .{ split, backend.partials.pointer, counts });
    }

    /// One launch: `args` are the kernel's parameters by value, in order.
    fn launch(backend: *Backend, f: driver.Function, grid: u32, block: u32, args: anytype) Error!void {
        return backend.launchShared(f, grid, block, 0, args);
    }

    /// One launch with `shared` bytes of dynamic shared memory per block.
    fn launchShared(backend: *Backend, f: driver.Function, grid: u32, block: u32, shared: u32, args: anytype) Error!void {
        // Each value is copied to runtime storage (a tuple may hold comptime-known fields).
        var storage: [args.len][max_argument_bytes]u8 align(16) = undefined;
        var pointers: [args.len]?*anyopaque = undefined;
        inline for (0..args.len) |i| {
            const value: @TypeOf(args[i]) = args[i];
            comptime std.debug.assert(@sizeOf(@TypeOf(value)) <= max_argument_bytes);
            @memcpy(storage[i][0..@sizeOf(@TypeOf(value))], std.mem.asBytes(&value));
            pointers[i] = &storage[i];
        }
        try backend.cuda.check(backend.cuda.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shared, backend.stream, &pointers, null), "cuLaunchKernel");
    }

    /// Device read bandwidth, bytes per second: the median of `passes` 16-byte-load sweeps
    /// over `bytes` of device memory. A GPU has no host-thread variant, so both are this.
    pub fn readBandwidth(backend: *Backend, bytes: u64, passes: u32) Error![2]f64 {
        std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
        const memory = try backend.alloc(bytes);
        defer backend.free(memory);
        const sink = try backend.alloc(4);
        defer backend.free(sink);
        const words: u64 = bytes / 16;
        const grid = 8 * backend.multiprocessors;
        const seconds = try backend.timeMedian(passes, backend.kernels.probe_read, grid, 512, .{ memory.pointer, words, sink.pointer });
        const rate = @as(f64, @floatFromInt(words * 16)) / seconds;
        return .{ rate, rate };
    }

    /// FP32 fused multiply-adds per second the device sustains (the median of `passes`).
    pub fn fmaRate(backend: *Backend, passes: u32) Error!f64 {
        std.debug.assert(passes >= 1 and passes <= contract.max_probe_passes);
        const sink = try backend.alloc(4);
        defer backend.free(sink);
        const iterations: u32 = 1 << 14;
        const grid = 4 * backend.multiprocessors;
        const block = 512;
        const seconds = try backend.timeMedian(passes, backend.kernels.probe_fma, grid, block, .{ iterations, @as(f32, 0.5), sink.pointer });
        return @as(f64, @floatFromInt(@as(u64, grid) * block * iterations * 8)) / seconds;
    }

    /// Seconds of one launch by CUDA events, the median of `passes` after one warm-up.
    fn timeMedian(backend: *Backend, passes: u32, f: driver.Function, grid: u32, block: u32, args: anytype) Error!f64 {
        try backend.enter();
        defer backend.leave();
        const cuda = backend.cuda;
        var start: driver.Event = null;
        var stop: driver.Event = null;
        try cuda.check(cuda.cuEventCreate(&start, 0), "cuEventCreate");
        defer _ = cuda.cuEventDestroy_v2(start);
        try cuda.check(cuda.cuEventCreate(&stop, 0), "cuEventCreate");
        defer _ = cuda.cuEventDestroy_v2(stop);
        var pass_ms: [contract.max_probe_passes]f32 = undefined;
        for (0..passes + 1) |pass| {
            try cuda.check(cuda.cuEventRecord(start, backend.stream), "cuEventRecord");
            try backend.launch(f, grid, block, args);
            try cuda.check(cuda.cuEventRecord(stop, backend.stream), "cuEventRecord");
            try cuda.check(cuda.cuEventSynchronize(stop), "cuEventSynchronize");
            var ms: f32 = 0;
            try cuda.check(cuda.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
            if (pass > 0) pass_ms[pass - 1] = ms;
        }
        std.mem.sort(f32, pass_ms[0..passes], {}, std.sort.asc(f32));
        return @max(@as(f64, pass_ms[passes / 2]), 1e-6) * 1e-3;
    }
};

fn formatIndex(type_id: u32) usize {
    for (formats.all, 0..) |f, i| if (@backingInt(f.type) == type_id) return i;
    unreachable; // the session admitted the type
}

/// A block's bulk rings for a matvec of `shape` (kernels.h LMH_BULK_STAGES): per warp, a
/// barrier per stage, then the stages, each a group of vocab rows with the 16-byte pieces
/// around them (lmh_bulk_stage_bytes). 0 where there is none, for a dense type, or where
/// they exceed `max_bytes` (the kernel then reads the weights where they are).
fn bulkRingBytes(shape: Shape, p: params.Matvec, max_bytes: u32) u32 {
    const dense = for ([_]formats.Type{ .f32, .f16, .bf16 }) |t| {
        if (p.type_id == @backingInt(t)) break true;
    } else false;
    if (shape.bulk == 0 or dense) return 0;
    const bytes = warps_per_block * (bulk_barrier_bytes + shape.bulk * bulkStageBytes(shape.vocab_rows, p.row_bytes));
    return if (bytes <= max_bytes) @intCast(bytes) else 0;
}

/// A block's resident rows for a matvec of `shape` (kernels.h LMH_RESIDENT): a pass of 8
/// activation rows of hidden f32 values (lmh_resident_bytes). 0 where the kernel does not run
/// from them (partial chunks; fewer rows than a pass) or they and the block's ring of chunks
/// exceed `max_bytes`.
fn areaBytes(shape: Shape, p: params.Matvec, max_bytes: u32) u32 {
    if (!shape.resident or p.hidden % 256 != 0 or p.rows < 8) return 0;
    const bytes = @as(u64, 8) * p.hidden * 4;
    return if (bytes + stageRingBytes(shape) <= max_bytes) @intCast(bytes) else 0;
}

/// A bulk stage: `vocab_rows` rows of `row_bytes` from the 16-byte boundary at or below their
/// first byte to the one at or above their last, wherever they start (kernels.h
/// lmh_bulk_stage_bytes, which takes a ring only where its stages hold that).
fn bulkStageBytes(vocab_rows: u32, row_bytes: u32) u64 {
    return (@as(u64, vocab_rows) * row_bytes + 30) & ~@as(u64, 15);
}

/// Blocks of `warps_per_block` warps for `items` items, `per_warp` to a warp.
fn warpGrid(items: u32, per_warp: u32) u32 {
    const warps = std.math.divCeil(u32, items, per_warp) catch unreachable;
    return std.math.divCeil(u32, warps, warps_per_block) catch unreachable;
}

/// The device address of a buffer's first byte: its root allocation plus its offset.
fn pointer(buffer: *contract.Buffer) driver.DevicePointer {
    return buffer.root().place.root.cuda.pointer + buffer.offsetBytes();
}

test "each pass size's modules hold every head type the pass holds once, in the module of the type's shape" {
    for (tunings) |tuning| {
        var held: u32 = 0;
        for (formats.all) |f| {
            const id = @backingInt(f.type);
            if (!tuning.holds(id)) continue;
            const types = tuning.typesWith(tuning.shapeOf(id));
            try std.testing.expect(types & (@as(u32, 1) << @intCast(id)) != 0);
            // Another type's module is this one's or holds none of its types.
            try std.testing.expect(held & types == 0 or held & types == types);
            held |= types;
        }
    }
}

test "a type takes its own shape where the tuning names it, else the pass size's; overrides win" {
    var forced = tunings[1];
    forced.forced = .{ .min_blocks = 3, .prefetch = true, .stages = 2 };
    for (tunings) |tuning| for (formats.all) |f| {
        var want = tuning.shape;
        for (tuning.shape_of) |o| if (o[0] == f.type) {
            want = o[1];
        };
        // The wide rest pass pads the resident tiles of every shape it holds.
        want.pad_resident = tuning.pad_resident and want.resident;
        try std.testing.expectEqual(want, tuning.shapeOf(@backingInt(f.type)));
    };
    for (formats.all) |f| {
        const shape = forced.shapeOf(@backingInt(f.type));
        try std.testing.expectEqual(@as(u32, 3), shape.min_blocks);
        try std.testing.expect(shape.prefetch);
        try std.testing.expectEqual(@as(u32, 2), shape.stages);
        try std.testing.expectEqual(tunings[1].shapeOf(@backingInt(f.type)).vocab_rows, shape.vocab_rows);
    }
}

test "a ring holds 2 to 4 stages, and a block's rings fit its 48 KiB of static shared memory" {
    try std.testing.expect(validShape(.{ .vocab_rows = 8, .stages = 4 }));
    try std.testing.expect(validShape(.{ .vocab_rows = 10, .stages = 4 }));
    try std.testing.expect(!validShape(.{ .vocab_rows = 11, .stages = 4 }));
    try std.testing.expect(validShape(.{ .vocab_rows = 14, .stages = 3 }));
    try std.testing.expect(!validShape(.{ .vocab_rows = 15, .stages = 3 }));
    try std.testing.expect(!validShape(.{ .vocab_rows = 4, .stages = 1 }));
    try std.testing.expect(!validShape(.{ .vocab_rows = 4, .stages = 5 }));
    try std.testing.expect(validShape(.{ .vocab_rows = 16 }));
}

extern "c" fn setenv(name: [*:0]const u8, value: [*:0]const u8, overwrite: c_int) c_int;
extern "c" fn unsetenv(name: [*:0]const u8) c_int;

test "LMHEAD_CUDA_STAGES sets every type's ring; 1 stage, or rings over 48 KiB a block, are errors that say so" {
    defer _ = unsetenv("LMHEAD_CUDA_STAGES");
    defer _ = unsetenv("LMHEAD_CUDA_VOCAB_ROWS");
    _ = setenv("LMHEAD_CUDA_STAGES", "3", 1);
    for (try tuningsFromEnv()) |tuning| for (formats.all) |f| {
        try std.testing.expectEqual(@as(u32, 3), tuning.shapeOf(@backingInt(f.type)).stages);
    };
    _ = setenv("LMHEAD_CUDA_STAGES", "1", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "LMHEAD_CUDA_STAGES=1") != null);
    _ = setenv("LMHEAD_CUDA_STAGES", "4", 1);
    _ = setenv("LMHEAD_CUDA_VOCAB_ROWS", "11", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "11 vocab rows per warp in a ring of 4 stages") != null);
    _ = setenv("LMHEAD_CUDA_VOCAB_ROWS", "10", 1);
    _ = try tuningsFromEnv();
}

test "LMHEAD_CUDA_RESIDENT puts every type in the wide pass and its rest pass, in its 8-row shape from resident rows with the vocab rows it names, with LMHEAD_CUDA_STAGES's ring; with a bulk ring it is an error" {
    defer _ = unsetenv("LMHEAD_CUDA_RESIDENT");
    defer _ = unsetenv("LMHEAD_CUDA_STAGES");
    defer _ = unsetenv("LMHEAD_CUDA_BULK");
    _ = setenv("LMHEAD_CUDA_RESIDENT", "5", 1);
    const forced = try tuningsFromEnv();
    for (forced, tunings, 0..) |tuning, unforced, i| for (formats.all) |f| {
        const id = @backingInt(f.type);
        const shape = tuning.shapeOf(id);
        if (i != wide_pass and i != wide_rest_pass) {
            try std.testing.expect(std.meta.eql(unforced.shapeOf(id), shape));
            continue;
        }
        const own = tunings[wide_pass - 1].shapeOf(id);
        try std.testing.expect(tuning.holds(id) and shape.resident and !shape.prefetch);
        try std.testing.expectEqual(i == wide_rest_pass, shape.pad_resident);
        try std.testing.expectEqual(@as(u32, 0), shape.stages + shape.bulk);
        try std.testing.expectEqual(@as(u32, 5), shape.vocab_rows);
        try std.testing.expectEqual(own.chunks_per_step, shape.chunks_per_step);
    };
    // From 8 rows of whole chunks (one pass) the wide pass runs every type.
    const p: params.Matvec = .{ .rows = 8, .hidden = 2816, .vocab = 262144, .type_id = @backingInt(formats.Type.q6_k), .row_bytes = 210 * 11, .chunks = 11 };
    try std.testing.expectEqual(wide_pass, passIndex(&forced, p, 227 << 10));
    _ = setenv("LMHEAD_CUDA_RESIDENT", "0", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    _ = setenv("LMHEAD_CUDA_RESIDENT", "17", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    _ = setenv("LMHEAD_CUDA_RESIDENT", "4", 1);
    _ = setenv("LMHEAD_CUDA_STAGES", "2", 1);
    for (formats.all) |f| {
        const shape = (try tuningsFromEnv())[wide_pass].shapeOf(@backingInt(f.type));
        try std.testing.expect(shape.resident and shape.stages == 2 and shape.bulk == 0);
    }
    _ = unsetenv("LMHEAD_CUDA_STAGES");
    _ = setenv("LMHEAD_CUDA_BULK", "2", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "resident rows or a bulk ring, not both") != null);
}

test "LMHEAD_CUDA_BULK sets every type's bulk ring in place of a ring of chunks; 1 stage is an error that says so" {
    defer _ = unsetenv("LMHEAD_CUDA_BULK");
    _ = setenv("LMHEAD_CUDA_BULK", "3", 1);
    for (try tuningsFromEnv()) |tuning| for (formats.all) |f| {
        const shape = tuning.shapeOf(@backingInt(f.type));
        try std.testing.expectEqual(@as(u32, 3), shape.bulk);
        try std.testing.expectEqual(@as(u32, 0), shape.stages);
    };
    _ = setenv("LMHEAD_CUDA_BULK", "0", 1);
    for (try tuningsFromEnv()) |tuning| for (formats.all) |f| {
        try std.testing.expectEqual(@as(u32, 0), tuning.shapeOf(@backingInt(f.type)).bulk);
    };
    _ = setenv("LMHEAD_CUDA_BULK", "1", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "LMHEAD_CUDA_BULK=1") != null);
    _ = setenv("LMHEAD_CUDA_BULK", "2", 1);
    _ = setenv("LMHEAD_CUDA_STAGES", "2", 1);
    defer _ = unsetenv("LMHEAD_CUDA_STAGES");
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "not both") != null);
    try std.testing.expect(!validShape(.{ .vocab_rows = 4, .stages = 3, .bulk = 2 }));
}

test "LMHEAD_CUDA_CHUNKS_PER_STEP sets every type's step and keeps the rest of its shape; only 1 or 2 chunks" {
    defer _ = unsetenv("LMHEAD_CUDA_CHUNKS_PER_STEP");
    _ = setenv("LMHEAD_CUDA_CHUNKS_PER_STEP", "2", 1);
    for (try tuningsFromEnv(), tunings) |forced, tuning| for (formats.all) |f| {
        var want = tuning.shapeOf(@backingInt(f.type));
        want.chunks_per_step = 2;
        try std.testing.expectEqual(want, forced.shapeOf(@backingInt(f.type)));
    };
    _ = setenv("LMHEAD_CUDA_CHUNKS_PER_STEP", "3", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "LMHEAD_CUDA_CHUNKS_PER_STEP=3: expected 1 to 2") != null);
    try std.testing.expect(!validShape(.{ .vocab_rows = 4, .chunks_per_step = 0 }));
    try std.testing.expect(!validShape(.{ .vocab_rows = 4, .chunks_per_step = 3 }));
}

test "LMHEAD_CUDA_PAD_REST sets whether every type pads the rest of a call's rows and keeps the rest of its shape; only 0 or 1" {
    defer _ = unsetenv("LMHEAD_CUDA_PAD_REST");
    for ([_]bool{ false, true }) |pad| {
        _ = setenv("LMHEAD_CUDA_PAD_REST", if (pad) "1" else "0", 1);
        for (try tuningsFromEnv(), tunings) |forced, tuning| for (formats.all) |f| {
            var want = tuning.shapeOf(@backingInt(f.type));
            want.pad_rest = pad;
            try std.testing.expectEqual(want, forced.shapeOf(@backingInt(f.type)));
        };
    }
    _ = setenv("LMHEAD_CUDA_PAD_REST", "2", 1);
    try std.testing.expectError(error.InvalidArgument, tuningsFromEnv());
    try std.testing.expect(std.mem.indexOf(u8, status.message(), "LMHEAD_CUDA_PAD_REST=2: expected 0 to 1") != null);
}

test "a bulk ring takes a block's shared memory for quantized types only, and only where its stages fit" {
    const shape: Shape = .{ .vocab_rows = 4, .bulk = 2 };
    // Q6_K at hidden 2816: 11 blocks of 210 bytes a row; a stage holds 4 rows and the pieces around them.
    const q6_k: params.Matvec = .{ .rows = 1, .hidden = 2816, .vocab = 1000, .type_id = @backingInt(formats.Type.q6_k), .row_bytes = 2310, .chunks = 11 };
    const stage_bytes = (4 * 2310 + 30) / 16 * 16;
    try std.testing.expectEqual(@as(u32, warps_per_block * (bulk_barrier_bytes + 2 * stage_bytes)), bulkRingBytes(shape, q6_k, 227 << 10));
    try std.testing.expectEqual(@as(u32, 0), bulkRingBytes(shape, q6_k, warps_per_block * (bulk_barrier_bytes + 2 * stage_bytes) - 1));
    try std.testing.expectEqual(@as(u32, 0), bulkRingBytes(.{ .vocab_rows = 4 }, q6_k, 227 << 10));
    var dense = q6_k;
    dense.type_id = @backingInt(formats.Type.f16);
    dense.row_bytes = 2 * 2816;
    try std.testing.expectEqual(@as(u32, 0), bulkRingBytes(shape, dense, 227 << 10));
    // A row past what a block holds (Q8_0 at hidden 2^20) reads the weights where they are.
    const huge: params.Matvec = .{ .rows = 1, .hidden = 1 << 20, .vocab = 8, .type_id = @backingInt(formats.Type.q8_0), .row_bytes = 34 << 15, .chunks = 1 << 12 };
    try std.testing.expectEqual(@as(u32, 0), bulkRingBytes(shape, huge, 227 << 10));
}

test "a bulk stage is as large as the kernels take it, or they would read the weights where they are" {
    const kernels = @import("../../kernels/emulator.zig").retuned; // 3 vocab rows per simdgroup
    for ([_]u32{ 18, 34, 84, 110, 210, 2310, 2992, 4095, 65534 }) |row_bytes| {
        try std.testing.expectEqual(kernels.bulkStageBytes(row_bytes), bulkStageBytes(3, row_bytes));
    }
}

test "resident rows are as large as the kernels take them, and given only where the kernels run from them" {
    const emulator = @import("../../kernels/emulator.zig");
    const resident: Shape = .{ .vocab_rows = 3, .resident = true };
    var p: params.Matvec = .{ .rows = 32, .hidden = 2816, .vocab = 262144, .type_id = @backingInt(formats.Type.f16), .row_bytes = 2 * 2816, .chunks = 11 };
    for ([_]u32{ 256, 2816, 4096 }) |hidden| {
        p.hidden = hidden;
        try std.testing.expectEqual(emulator.resident.areaBytes(hidden), areaBytes(resident, p, 227 << 10));
    }
    // From a full pass of whole chunks; not for a shape without them, fewer rows than a pass, a
    // partial chunk, or rows past what a block holds.
    p.hidden = 2816;
    p.rows = 8;
    try std.testing.expect(areaBytes(resident, p, 227 << 10) != 0);
    try std.testing.expectEqual(@as(u32, 0), areaBytes(.{ .vocab_rows = resident.vocab_rows }, p, 227 << 10));
    p.rows = 7;
    try std.testing.expectEqual(@as(u32, 0), areaBytes(resident, p, 227 << 10));
    p.rows = 64;
    p.hidden = 2817;
    try std.testing.expectEqual(@as(u32, 0), areaBytes(resident, p, 227 << 10));
    p.hidden = 16384;
    try std.testing.expectEqual(@as(u32, 0), areaBytes(resident, p, 227 << 10));
    // A ring of chunks beside them takes its stages from the same budget.
    const staged: Shape = .{ .vocab_rows = 8, .stages = 2, .resident = true };
    p.hidden = 2816;
    const bytes = areaBytes(resident, p, 227 << 10);
    try std.testing.expectEqual(bytes, areaBytes(staged, p, bytes + stageRingBytes(staged)));
    try std.testing.expectEqual(@as(u32, 0), areaBytes(staged, p, bytes + stageRingBytes(staged) - 1));
}

test "a pass size's shapes are its modules: each once, together holding every head type the pass holds" {
    for (tunings) |tuning| {
        var buffer: [formats.all.len]Shape = undefined;
        const shapes = shapesOf(tuning, &buffer);
        var held: u32 = 0;
        for (shapes, 0..) |shape, i| {
            for (shapes[0..i]) |earlier| try std.testing.expect(!std.meta.eql(earlier, shape));
            const types = tuning.typesWith(shape);
            try std.testing.expect(types != 0 and held & types == 0);
            held |= types;
        }
        for (formats.all) |f| if (f.head) try std.testing.expectEqual(tuning.holds(@backingInt(f.type)), (held >> @intCast(@backingInt(f.type))) & 1 != 0);
    }
}

test "N rows run in the smallest pass that holds them, or in the wide pass (or its rest pass) where it holds the type and would run it from resident rows" {
    const max_shared_bytes = 227 << 10; // an H200
    var half: params.Matvec = .{ .rows = 1, .hidden = 2816, .vocab = 262144, .type_id = @backingInt(formats.Type.q6_k), .row_bytes = 210 * 11, .chunks = 11 };
    var single: params.Matvec = .{ .rows = 1, .hidden = 2816, .vocab = 262144, .type_id = @backingInt(formats.Type.f32), .row_bytes = 4 * 2816, .chunks = 11 };
    var resident: params.Matvec = .{ .rows = 1, .hidden = 2816, .vocab = 262144, .type_id = @backingInt(formats.Type.f16), .row_bytes = 2 * 2816, .chunks = 11 };
    try std.testing.expect(!tunings[wide_pass].holds(half.type_id) and tunings[wide_pass].holds(single.type_id));
    try std.testing.expect(tunings[wide_pass].shapeOf(single.type_id).resident and tunings[wide_pass].shapeOf(resident.type_id).resident);
    try std.testing.expect(std.meta.eql(tunings[wide_pass].types, tunings[wide_rest_pass].types));
    for ([_]u32{ 1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 20, 28, 31, 32, 33, 64, 4096 }) |rows| {
        half.rows = rows;
        single.rows = rows;
        resident.rows = rows;
        const smallest: usize = if (rows <= 1) 0 else if (rows <= 2) 1 else if (rows <= 4) 2 else 3;
        try std.testing.expectEqual(smallest, passIndex(&tunings, half, max_shared_bytes));
        const wide: usize = if (padsResidentTile(rows)) wide_rest_pass else wide_pass;
        for ([_]params.Matvec{ single, resident }) |p| {
            try std.testing.expectEqual(if (rows >= 8) wide else smallest, passIndex(&tunings, p, max_shared_bytes));
            try std.testing.expectEqual(rows >= 8 and wide == wide_rest_pass, tunings[passIndex(&tunings, p, max_shared_bytes)].shapeOf(p.type_id).pad_resident);
        }
    }
    // A last tile of 7 rows is padded up to 64 rows, one of 4 to 7 rows under 24; a full one,
    // one of 1 to 3 rows, one of 4 to 6 rows from 24, or any past 64 rows is not.
    for ([_]u32{ 12, 13, 15, 20, 22, 23, 31, 39, 63 }) |rows| try std.testing.expect(padsResidentTile(rows));
    for ([_]u32{ 7, 8, 11, 16, 17, 24, 28, 30, 32, 36, 60, 64, 71, 4095 }) |rows| try std.testing.expect(!padsResidentTile(rows));
    // Not where its rows would not be resident: a partial chunk, or rows past a block's memory.
    for ([_]*params.Matvec{ &single, &resident }) |p| {
        p.hidden = 2817;
        try std.testing.expectEqual(@as(usize, 3), passIndex(&tunings, p.*, max_shared_bytes));
        p.hidden = 16384;
        try std.testing.expectEqual(@as(usize, 3), passIndex(&tunings, p.*, max_shared_bytes));
    }
    // A pass index is a module's: the wide one is compiled only for the types it holds.
    var buffer: [formats.all.len]Shape = undefined;
    var held: u32 = 0;
    for (shapesOf(tunings[wide_pass], &buffer)) |shape| held |= tunings[wide_pass].typesWith(shape);
    var listed: u32 = 0;
    for (tunings[wide_pass].types.?) |t| listed |= @as(u32, 1) << @intCast(@backingInt(t));
    try std.testing.expectEqual(listed, held);
}

test "a type that keeps halving passes runs rows that fill no pass of its size in that size's rest pass, padded, in its own shape" {
    const max_shared_bytes = 227 << 10; // an H200
    for (rest_pass_of, 0..) |maybe_rest, plain| if (maybe_rest) |rest| {
        var held: usize = 0;
        for (formats.all) |f| if (f.head) {
            const id = @backingInt(f.type);
            const own = tunings[plain].shapeOf(id);
            try std.testing.expectEqual(!own.pad_rest, tunings[rest].holds(id));
            if (own.pad_rest) continue;
            held += 1;
            var padded = own;
            padded.pad_rest = true;
            try std.testing.expectEqual(padded, tunings[rest].shapeOf(id));
        };
        try std.testing.expect(held > 0);
    };
    // Q4_K keeps halving passes at 4 and 8 rows per pass; Q6_K pads at both.
    var p: params.Matvec = .{ .rows = 1, .hidden = 2816, .vocab = 262144, .type_id = @backingInt(formats.Type.q4_k), .row_bytes = 144 * 11, .chunks = 11 };
    const rows = [_]u32{ 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 64 };
    for (rows, [_]usize{ 0, 1, 5, 2, 6, 6, 6, 3, 3, 3, 3 }, [_]usize{ 0, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3 }) |n, q4_k, q6_k| {
        p.rows = n;
        p.type_id = @backingInt(formats.Type.q4_k);
        try std.testing.expectEqual(q4_k, passIndex(&tunings, p, max_shared_bytes));
        p.type_id = @backingInt(formats.Type.q6_k);
        try std.testing.expectEqual(q6_k, passIndex(&tunings, p, max_shared_bytes));
    }
}

test "a non-finite count splits a long row for the whole GPU: a power of two of segments, 8 values a lane at least" {
    const warps_wanted = 16 * 132 * warps_per_block; // an H200
    try std.testing.expectEqual(@as(u32, 1024), countSegments(1, 262144, warps_wanted));
    try std.testing.expectEqual(@as(u32, 256), countSegments(64, 262144, warps_wanted));
    try std.testing.expectEqual(@as(u32, 1), countSegments(1, 256, warps_wanted));
    try std.testing.expectEqual(@as(u32, 1), countSegments(warps_wanted, 262144, warps_wanted));
    for ([_]u32{ 1, 2, 3, 8, 33, 64, 4096 }) |rows| for ([_]u32{ 1, 255, 256, 257, 4096, 131071, 262144, 1 << 24 }) |values| {
        const segments = countSegments(rows, values, warps_wanted);
        try std.testing.expect(std.math.isPowerOfTwo(segments) and segments <= max_segments);
        // Each split was wanted: more warps were needed, and the halves still held 8 values a lane.
        if (segments > 1) try std.testing.expect(@as(u64, rows) * (segments / 2) < warps_wanted and @as(u64, segments / 2) * 256 < values);
    };
}
