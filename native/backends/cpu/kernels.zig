//! The CPU's kernels: what every worker runs for one dispatch. This file is compiled once
//! per CPU level (see build.zig: e.g. AVX-512, AVX2, baseline x86-64), each copy with its
//! own vector width, and the backend picks the best level the running CPU supports when
//! its pool starts. Every level computes the same bits: the arithmetic is fixed by
//! docs/NUMERICS.md, and vector width only decides how many lanes move at once.
//!
//! Host and kernels are separate compilation units, so everything between them has C
//! layout: the jobs below and the `Table` each level exports.
const std = @import("std");
const builtin = @import("builtin");
const params = @import("../../kernels/params.zig");
const lanes = @import("../../numerics/lanes.zig");
const math = @import("../../numerics/math.zig");
const formats = @import("../../numerics/formats.zig");
const flush = @import("../../numerics/flush.zig");
const decode = @import("decode.zig");
const Lanes = lanes.Lanes;

/// A worker's entry point for one dispatch: `job` is the kernel's job struct below.
pub const Work = *const fn (job: *anyopaque, worker: u32) callconv(.c) void;

/// What a CPU level exports: its entry points and what it needs of the CPU.
pub const Table = extern struct {
    /// The level's name, as build.zig gives it (e.g. "x86_64_v4").
    name: [*:0]const u8,
    /// Width of the elementwise vectors of this level.
    vector_bits: u32,
    /// The CPU features this level was compiled for (std.Target.Cpu.Feature.Set's words).
    features: [std.Target.Cpu.Feature.Set.usize_count]usize,
    rms_norm: Work,
    softcap: Work,
    count_non_finite: Work,
    fma_probe: Work,
    /// f32 fmas one worker's probe does a round: its chains times the vector's lanes.
    fma_probe_round_fmas: u32,
    /// By position in formats.all.
    matvec: [formats.all.len]Work,
};

/// Per-worker scratch: worker w owns values [0, values) of workers[w].
pub const Scratch = extern struct {
    workers: [*]const [*]align(128) f32,
    values: usize,

    fn of(scratch: Scratch, worker: u32, values: usize) []align(128) f32 {
        std.debug.assert(values <= scratch.values);
        return scratch.workers[worker][0..values];
    }
};

pub const RmsNormJob = extern struct {
    input: [*]const f32,
    weight: [*]const f32,
    output: [*]f32,
    scratch: Scratch,
    p: params.RmsNorm,
    /// Next row to claim (atomic).
    next: u32 = 0,
};

pub const MatvecJob = extern struct {
    /// rows × row_values lane-major activations, past their flush point (the host prepares them).
    inputs: [*]const f32,
    weight: [*]const u8,
    output: [*]f32,
    scratch: Scratch,
    p: params.Matvec,
    /// Next vocab row to claim (atomic).
    next: u32 = 0,
};

pub const SoftcapJob = extern struct {
    data: [*]f32,
    p: params.Softcap,
    /// Next value to claim (atomic).
    next: u64 = 0,
};

pub const CountJob = extern struct {
    data: [*]const f32,
    counts: [*]u32,
    p: params.CountNonFinite,
    /// Next row to claim (atomic).
    next: u32 = 0,
};

pub const FmaProbeJob = extern struct {
    /// Rounds of fma_probe_chains independent fmas on one vector, per worker.
    rounds: u64,
    /// Per worker, so the chains cannot be optimized away.
    sinks: [*]f32,
};

/// Vector registers of this level: 32 with AVX-512 (EVEX reaches the upper 16 at every
/// width) and on AArch64, 16 on the other x86-64 levels (and assumed elsewhere).
const vector_registers = switch (builtin.cpu.arch) {
    .x86_64 => if (decode.has_avx512) 32 else 16,
    .aarch64, .aarch64_be => 32,
    else => 16,
};
/// Independent fma chains per worker: enough to cover the latency of every fma unit (8 for
/// two units of 4 cycles), and few enough that they and the probe's two constants stay in
/// registers. 16 chains spilled from AVX2's 16 registers: on a 2-core AMD EPYC (Zen 3) they
/// read 29 G fmas/s a thread where 10 to 14 read 51-54 (8: 43), so the bench's FMA floor was
/// 1.8 times too long there.
const fma_probe_chains = if (vector_registers >= 32) 16 else 12;
comptime {
    std.debug.assert(fma_probe_chains + 2 <= vector_registers);
}

/// Scratch values a matvec needs per worker: a tile's decoded block, then its accumulators;
/// or, for a batch pair vectors may take (a type with pairs, decode.hasPairs, and pairRows), a
/// tile of whole decoded rows, the inputs as pair vectors and the tile's partial sums. (The
/// host, which does not know the CPU level's vector width, reserves pairs for such a batch
/// at every level.)
pub fn matvecScratchValues(t: formats.Type, rows: usize, chunks: usize) usize {
    const tiles = tile_rows_max * (tile_block_values + rows * lanes.lane_count);
    if (!decode.hasPairs(t) or !pairRows(rows)) return tiles;
    const pairs = (pair_tile_rows_max + rows) * chunks * lanes.chunk_values + pair_partials;
    return @max(tiles, pairs);
}

/// Width of elementwise vectors; elementwise results do not depend on it.
const elementwise_width = std.simd.suggestVectorLength(f32) orelse 8;
const Wide = @Vector(elementwise_width, f32);
/// Batches this small use each chunk straight from the decoder, where a pair of vocab rows
/// holds 2 accumulators of 32 lanes per batch row (with narrower vectors mostly one vocab row:
/// fusedPair); larger ones run in tiles. With 512-bit vectors every type but F32 takes up to 7
/// rows, the decoded chunk stored before its fmas from 4 rows (the dense types from 1:
/// decodesIntoFmas). Against tiles on a 2-core Zen 4 (2026-12-05, interleaved, vocab 32768, 3
/// or 4 rounds a run; Gemma's head, 2 rounds): F16 and BF16 at N = 4 22–40% less a call; every
/// type 5–34% less at N = 5 and 6 (Gemma's head 15–27%: Q6_K, Q8_0, Q4_K, F16, BF16) and 2–27%
/// at N = 7 (Q8_0 1–8%; no cell slower); at N = 8 level to 8% more, so 8 rows stay in tiles;
/// F32, which waits on its reads there, 3–7% more at N = 4, so it stops at 3. On a 16-core
/// Intel Xeon with AVX-512 (a GPU machine's host, 3 interleaved rounds) Gemma's head took 8–19%
/// less a call at N = 5, 7–16% at 6 and 1–11% at 7, F16 16% less at N = 4 and BF16 level; at
/// vocab 32768, where its calls took 1.5–3 ms and unchanged paths moved up to 15%, within that
/// noise. On a 2-core Intel Xeon with AVX-512 and AMX (2026-12-05, 2 interleaved rounds)
/// Gemma's head took 9–19% less a call at N = 5, 0–11% at 6 and 2–9% at 7 this way (Q4_0, Q4_K,
/// Q6_K, Q8_0), F16 and BF16 3–14% less at N = 4 to 7 at vocab 32768; the quantized types at
/// vocab 32768, a head its 480 MiB L3 holds, from 9% less at N = 5 to 13% more at N = 7 (3
/// rounds). Nor did 8 to 12 rows run a half of the lanes at a time (lanes 0-15 over the whole
/// row, then 16-31: one register an accumulator, 16 of them at N = 8, each chunk's half decoded
/// and stored for two vocab rows): 13–34% more a call than the tiles at N = 8, 10 and 12 (Q8_0,
/// Q6_K, Q4_K, F16; a 2-core Intel Xeon with AVX-512, vocab 32768, 2 interleaved rounds,
/// 2026-12-05), where each pair of vocab rows reads 8 rows' inputs from L2 again, 512 bytes a
/// step of 16 fmas, and a tile's stay in L1.
/// x86-64's AVX2 level takes 3 rows of the quantized types and 2 of the dense ones, whose
/// transposes hold more registers (with the decoder feeding the fmas a 4-row F16 batch spilled
/// and ran at 1/2 speed: f970190). Until 2026-12-05 it took 2 and 1: on the Zen 4 running that
/// level (`LMHEAD_CPU_LEVEL=x86_64_v3`, interleaved, vocab 32768) 3 rows took 9–40% less a call
/// at N = 3 (every quantized type, three runs of 3 or 4 rounds; 15–31% on the Xeon: Q6_K,
/// Q8_0, Q4_K, Q4_0), and 4 rows, the chunk stored, from 13% less to 8% more; the dense types'
/// 2 rows 24–28% less at N = 2 (F16, BF16, F32; 3 rounds) and 24–30% for Gemma's head (2
/// rounds). Narrower vectors keep 2 and 1 (more is unmeasured there).
fn fusedRowsMax(comptime t: formats.Type) usize {
    if (elementwise_width >= 16) return if (t == .f32) 3 else 7;
    const dense = formats.of(t).block_values == 1;
    if (elementwise_width == 8 and decode.codes_by_group) return if (dense) 2 else 3;
    return if (dense) 1 else 2;
}
/// Vocab rows a small batch decodes side by side: two give each lane's chain of fmas
/// another to overlap with. Measured on a 2-core Xeon (AVX-512): 4–13% faster at N = 1…4
/// for most types (BF16 N = 1 -11%, Q6_K -7%, Q8_0 -4%, Q4_K N = 3 -12%), but 2–8% slower
/// at N = 1 for F32, Q4_0 and Q4_K, which keep one. With 256-bit vectors one row at N = 1
/// (its 4 accumulators and the decoder fit the 16 registers; two rows spilled): on a 2-core
/// AMD EPYC (Zen 1), vocab 32768, A-B-A-B, twice, Q2_K 23–28% less a call, Q3_K 9–11%, Q6_K
/// 6–7%, Q8_0 3–6%, BF16 3–8%, the others within the runs' noise (4%), but Q5_K 1–11% more,
/// so it keeps two. At N = 2 (two rows: 16 accumulator registers) one row too: vocab 32768
/// and 65536, six A-B sittings, Q5_0 about 11% less a call, Q6_K 10%, Q2_K 7%, Q8_0, Q4_0,
/// IQ4_NL and IQ4_XS 5–6%, Q3_K and Q5_1 3%, Q4_K and Q5_K the same (means: the
/// unchanged F16 read 0.91–1.22 of itself in single sittings). Since the pair's rows are
/// half a task apart (two streams), F32 takes two at N = 1 too: 13–19% less a call, vocab
/// 131072 and 262144 (three sittings of 2 to 5 A-B pairs); Q4_0 and Q4_K were 8–10% slower
/// with two still, until their codes went into the fmas a step at a time (decode.zig's
/// codes_by_group): then two took 9–15% less a call for Q4_0 and 1–8% for Q4_K at N = 1 on
/// a 2-core Zen 4 (vocab 32768, 8 and 12 interleaved rounds). Four rows from the task's
/// quarters for the dense types at N ≤ 2 (four streams, as the read probe takes) were not
/// kept: F32 11% less a call at N = 2 and level at N = 1, F16 level, BF16 22–24% more (the
/// same Zen 4, 3 interleaved rounds); nor without their software prefetch, as the probe
/// reads: BF16 11% more at N = 1 and 39% at N = 2, F16 15% more at N = 2, F32 within the
/// noise (2026-12-05, vocab 32768, 3 interleaved rounds). Four rows at N = 1 for the quantized
/// types, from the task's quarters, were not kept either: with 4 KiB pages (a 2-core Intel
/// Xeon with AVX-512, Gemma's head, 3 interleaved rounds) Q8_0 3-7% less a call, Q4_0 and
/// Q6_K 1-6% more, Q4_K level; with huge pages (backend.zig's huge_pages, 2026-12-06, 7
/// rounds for Q8_0) Q8_0 from 12% less to 2% more, Q4_K and IQ4_NL 1-9% more, Q4_0, Q6_K and
/// Q5_0 within 5% either way.
fn fusedPair(comptime t: formats.Type, comptime group: usize) usize {
    if (elementwise_width < 16) return if (t == .q5_k and group == 1) 2 else 1;
    return 2;
}
/// Larger batches take a tile of vocab rows 2 chunks at a time: the block is decoded into
/// L1 (2 KiB a row) and swept there by every batch row, a group at a time, so only the
/// inputs come from L2 (a group's 4 × 2 KiB, then reused by each sweep of the tile's rows).
/// Decoding whole rows before sweeping streamed both the tile and the inputs from L2, and
/// the sweeps ran at 55–60% of the fma rate. Measured on a 2-core Xeon (AVX-512), vocab
/// 262144 × hidden 2816, a tile of 8 rows: Q8_0 at N = 8 115 → 95 ms, F16 143 → 124 ms; N =
/// 32 3–5% faster; blocks of 1, 3 or 4 chunks were slower at N = 8. With 512-bit vectors the
/// tile is 6 rows, two sweeps of 3 (8 was 3 + 3 + 2, and at N = 32 its accumulators alone
/// filled 32 KiB of the 48 KiB L1): interleaved, vocab 131072, N = 5 to 64, Q8_0 5–9%,
/// F16 3–8%, BF16 1–11%, Q2_K 1–4% faster, Q4_K and Q6_K 0–5% at N ≥ 8 (Q6_K N = 5 4%
/// slower); blocks of 3 or 4 chunks were slower than 2 again (and on a 2-core Intel Xeon
/// with AMX, 2026-12-05: docs/CPU.md; there again with the last block reduced from the
/// registers, 2026-12-06, Gemma's head, 2 rounds: F16 9% and 4% more a call at N = 8 and 16,
/// Q8_0 6% less at N = 32, the other cells within 2%). The AVX2 level, with its one-register
/// accumulators (sweep_parts), takes 6 rows too: 0–4% faster than 8 (3 + 3 + 2) for Q8_0,
/// F16, Q4_K and Q6_K at N = 3 to 32 on a 2-core AMD EPYC (Zen 1), vocab 32768, A-B-A-B.
/// Larger tiles, whose inputs serve more sweeps from L1, were slower again on a 2-core Intel
/// Xeon (AVX-512), Gemma's head, 2 interleaved rounds, N = 8, 16 and 32 (2026-12-05, tasks
/// of 72 rows): 9 rows from 3% less a call (Q6_K, N = 8) to 22% more (F16, Q8_0, Q6_K), 12
/// rows 5–35% more, most at N = 32, where their accumulators fill L1.
const tile_rows_max = 6;
/// Tile rows a sweep takes at once against a group of batch rows: 3 × 4 accumulators (24
/// registers) with 512-bit vectors, where 2 × 4 loaded 12 vectors per 16 fmas and 3 × 4
/// loads 14 per 24; measured on a 2-core Xeon (AVX-512), interleaved, vocab 262144: Q8_0
/// and F16 at N = 8 and 32 2–5% faster (Q6_K too, at vocab 131072); a tile of 9 rows (3
/// sweeps of 3) was no faster. With 256-bit vectors (Zen 1, as above) 3 × 4 beat 4 × 3 by
/// 0–12%.
const tile_rows_per_sweep = 3;
/// Batch rows a sweep takes at once: 3 tile rows × 4 batch rows of accumulators, with the
/// tile rows' weights in registers and each batch row's inputs an operand of their fmas.
/// A group's inputs come from L2 (`bench/cpu_floor.zig`'s sweep: 62% of the fma rate so, 69%
/// from L1, on a 2-core Intel Xeon with AVX-512); asking for the next group's into L1 during
/// a group's sweeps, a line of each of its 4 rows a step, was slower there: Gemma's head,
/// 2 interleaved rounds (2026-12-06), from 2% less to 8% more a call at N = 8 to 64 (Q8_0,
/// F16, Q6_K, Q4_0; 1–8% more at N = 8 to 32).
const sweep_group_rows = 4;
/// Lanes of the vectors a sweep holds its accumulators in. With 512-bit vectors, one
/// register's width: as 32-lane vectors LLVM moved every accumulator to another register
/// each step (about 30 moves and a spill per 24 fmas, in the disassembly); measured on a
/// 2-core Xeon (AVX-512), interleaved, vocab 131072: N = 32 2.5-6% faster for Q8_0, F16, Q6_K
/// and Q4_K, N = 8 within 1%.
const sweep_width = elementwise_width;
const SweepVector = @Vector(sweep_width, f32);
/// Parts of each accumulator (sweep_width lanes each) one pass over the block holds: both
/// with 512-bit vectors (24 of the 32 registers), one with narrower ones, whose 16 registers
/// 32-lane accumulators filled at 2 × 2 and spilled. AVX2 on a 2-core AMD EPYC (Zen 1), vocab
/// 32768, A-B-A-B against 2 × 2 32-lane accumulators (and tiles of 8 rows), every head
/// type: 13–32% less a call at N = 8, 23–36% at N = 32 (Q8_0 47 → 35 ms and 171 → 111 ms),
/// N = 3 within 2% to 19% less.
/// With 512-bit vectors, one part a pass over 6 tile rows × 4 batch rows (10 loads per 24
/// fmas instead of 14) was slower on a 2-core Xeon (AVX-512), vocab 65536, A-B twice: N = 32
/// 2–16% more a call for Q8_0, Q6_K and F16 (Q8_0 147 → 167 ms), N = 8 13% less to 24% more.
/// Nor was one part a pass over 3 tile rows × 8 batch rows (11 loads per 24 fmas) kept: on a
/// 2-core Zen 4, vocab 32768, 3–4 interleaved rounds, N = 8 level to 11% more a call (Q8_0,
/// Q6_K, Q4_K, F16), N = 32 0–3% less.
const sweep_parts = if (elementwise_width >= 16) lanes.lane_count / sweep_width else 1;
/// Whether a small batch adds each decoded value into its fmas as the decoder puts it
/// (FmaSink), instead of storing the chunk and reading it back; quantized codes are then
/// converted a group of lanes at a time (decode.codes_by_group). In a profile of Q8_0 at
/// N = 1 on AVX2, a quarter of the samples fell on the chunk's stores and spilled codes.
/// Measured on a 2-core AMD EPYC (Zen 1, AVX2), vocab 32768 × hidden 2816, interleaved, 2-4
/// runs: N = 1 9-16% less a call for F32, F16 and BF16, 19-21% for Q8_0, 11-13% for Q4_0 and
/// Q5_0, 7-10% for Q3_K and IQ4_NL, 1-5% for IQ4_XS, Q2_K and Q5_1, Q6_K and Q5_K within 3%
/// either way (Q5_K 9% more once), Q4_K 3-6% more; N = 2 12-14% less for Q6_K and Q3_K, 2-10%
/// for IQ4_XS, Q4_K and Q5_K. For the quantized types either change alone stayed within 5%
/// of the stores. At N ≥ 3 (tiles, which store the chunk either way) every type stayed
/// within the noise of these runs (up to 10% between runs of unchanged kernels). With
/// AVX-512 the quantized types do so too, 16 lanes a conversion, for up to 3 batch rows
/// (decode.zig has what that measured on a Zen 4); at 4 rows, whose 16 accumulators share
/// the 32 registers with the decoder's, storing the chunk took 3-16% less a call than the
/// fmas for 9 of the 11 quantized types and 3-4% more for Q2_K and Q3_K (same Zen 4, 8
/// interleaved rounds), and with the fmas Q5_1 had been 5-11% slower than before; one vocab
/// row at a time with the fmas (8 accumulators, not 16) was slower still: 39-59% more a call
/// at N = 4 for Q6_K, Q8_0, Q4_K and Q4_0, and at N = 3 from 3% less (Q4_K) to 15% more
/// (Q8_0) (vocab 32768, 6 interleaved rounds, the same Zen 4). Nor did 5 to 8 batch rows
/// beat the tiles that way, one vocab row at a time (16 accumulators, the rows' inputs read
/// from L2 again for every vocab row): 11–31% more a call at N = 5 and 8 for Q8_0, Q6_K,
/// Q4_K and Q4_0 (a 2-core Zen 4, 2026-12-05, vocab 32768, 2 interleaved rounds, every cell
/// slower); with the chunk stored, two vocab rows at a time, up to 7 did (fusedRowsMax). Nor
/// was the chunk stored at N = 3 kept (same Zen 4, vocab 32768, 3 interleaved rounds): Q8_0
/// 7% and Q3_K 12% less a call, Q6_K, Q4_0 and Q2_K 8–11% more, the others within 5%. The
/// dense types keep their stores (their 64-value transposes hand over 8 lanes at a time, a
/// quarter of an accumulator's register).
fn decodesIntoFmas(comptime t: formats.Type, comptime group: usize) bool {
    if (!decode.codes_by_group) return false;
    return elementwise_width < 16 or (formats.of(t).block_values > 1 and group <= 3);
}
const tile_block_chunks = 2;
const tile_block_values = tile_block_chunks * lanes.chunk_values;
/// Vocab rows a worker claims at a time: long enough to be a sequential stream. Each task
/// starts its streams cold (the software prefetch runs ahead only from there); 256 rows, a
/// quarter of the cold starts, were not clearly faster on a 2-core Zen 4 (Gemma's head, 3
/// interleaved rounds, 2026-12-06): Q6_K, Q8_0, Q4_0 and Q4_K at N = 1 and 2, medians from 5%
/// less a call (Q6_K at N = 2, Q4_K at N = 1) to 1% more, single rounds from 13% less to 9%
/// more; N = 8 and F16 within the runs' spread (up to 30% between rounds).
const vocab_rows_per_task = 64;
/// How far ahead of the decoder each chunk's bytes are requested. The hardware
/// prefetchers alone left a 2-core Zen at half the read bandwidth; a steady software
/// stream a few pages ahead (measured: 4–16 KiB all work) reaches it. On a 2-core Zen 4
/// (vocab 32768, 3 interleaved rounds, F32, F16, BF16, Q8_0 and Q6_K at N = 1, 2 and 8) 16
/// and 32 KiB took from 7% less to 20% more a call than 8, more in 12 and 13 of 15 cells; 4
/// KiB read F32 10-12% less at N = 1 and 2 in one run (3 rounds), then 6-8% more, and F16 and
/// BF16 38-52% more at N = 3, in the next (4 rounds, 9 types at N = 1 to 3).
/// Every line is asked for: on that Zen 4 one line in 2 or 4 took up to 55% more a call at
/// N = 8 (every type measured: F32, F16, BF16, Q8_0, Q6_K, Q4_K), and on a 2-core Intel Xeon
/// (AVX-512, AMX; 2026-12-06, Gemma's head, 2 interleaved rounds) a tile asking for the first
/// line of each chunk only, the hardware's prefetchers left the rest, 13–28% more at N = 8
/// (F16, Q4_0, Q6_K, Q8_0) and from 4% less to 9% more at N = 16 and 32; none in the small
/// batches' loop took F32 and Q8_0 12–15% less at N = 1 (3 interleaved rounds; 8% and 4% in
/// 8 more), but BF16 26% more there and F16, BF16 and Q8_0 26–55% more at N = 2. Nor for F32
/// and Q8_0 at N = 1 alone (7% and 9% less there in 4 rounds, 2026-12-05): on a 16-core Intel
/// Xeon with AVX-512 (a GPU machine's host, 3 interleaved rounds) it took F32 12–24% more a
/// call at N = 1 and Q8_0 7–21% more (vocab 32768 and 262144).
const prefetch_bytes = 8192;
/// Whether a small batch's decoder, feeding the fmas, also asks for the next chunk's bytes
/// in L1 (the stream above brings them to L2). In a time profile of Q6_K at N = 1 (perf's
/// cpu-clock samples, 2-core AMD EPYC Zen 4) 12% of the samples fell on the first loads of
/// a chunk. Measured there, vocab 32768, interleaved, 6 to 12 rounds: Q6_K 3-10% less a
/// call at N = 2 (four runs; Q8_0, unchanged, moved up to 9% in the same runs), 0-8% at N =
/// 1 (four runs), 0-9% at N = 3 (two); Q8_0, Q3_K, Q5_K and Q4_K within 4% either way at N
/// = 1, Q4_0 2-4% more, Q2_K 5-27% more at N = 2. At N = 4, where the chunk is stored, it
/// made Q6_K 12% slower (asked for every type, 17%; 8 interleaved rounds). The dense types,
/// whose small batches store the chunk, asking for it there: F32 22% more a call at N = 1 and
/// 2, F16 and BF16 level (vocab 32768, 4 interleaved rounds, 2026-12-05).
fn nextChunkIntoL1(comptime t: formats.Type) bool {
    return t == .q6_k;
}

/// The table of the level named `name` (cpu_level.zig exports it under that name).
pub fn table(comptime name: [:0]const u8) Table {
    return .{
        .name = name,
        .vector_bits = elementwise_width * 32,
        .features = builtin.cpu.features.ints,
        .rms_norm = erase(RmsNormJob, rmsNorm),
        .softcap = erase(SoftcapJob, softcap),
        .count_non_finite = erase(CountJob, countNonFinite),
        .fma_probe = erase(FmaProbeJob, fmaProbe),
        .fma_probe_round_fmas = fma_probe_chains * elementwise_width,
        .matvec = blk: {
            var works: [formats.all.len]Work = undefined;
            for (formats.all, &works) |f, *w| w.* = erase(MatvecJob, MatvecKernel(f.type).work);
            break :blk works;
        },
    };
}

fn erase(comptime J: type, comptime work: fn (*J, u32) void) Work {
    return struct {
        fn run(job: *anyopaque, worker: u32) callconv(.c) void {
            work(@ptrCast(@alignCast(job)), worker);
        }
    }.run;
}

fn claim(comptime T: type, next: *T, count: T) T {
    return @atomicRmw(T, next, .Add, count, .monotonic);
}

/// NUMERICS.md §4: ss by the canonical dot product, then mean, + eps, rsqrt, two roundings
/// per value. A row whose mean + eps overflows to +Inf cannot be normalised: its values
/// become NaN (never zeros), so the head reports the row.
fn rmsNorm(job: *RmsNormJob, worker: u32) void {
    const hidden: usize = job.p.hidden;
    const major = job.scratch.of(worker, lanes.chunkCount(hidden) * lanes.chunk_values);
    const weight = job.weight[0..hidden];
    while (true) {
        const r: usize = claim(u32, &job.next, 1);
        if (r >= job.p.rows) return;
        const x = job.input[r * hidden ..][0..hidden];
        lanes.toLaneMajor(x, major);
        flush.flushSlice(major, flush.dot_operand_min);
        const sum_squares = lanes.reduce(lanes.accumulate(@splat(0), major, major));
        const v = sum_squares * job.p.inv_hidden + flush.flush(f32, job.p.eps, flush.value_min);
        const inv = if (v == std.math.inf(f32)) std.math.nan(f32) else math.rsqrt(f32, v);
        scaleRow(x, weight, job.output[r * hidden ..][0..hidden], inv);
    }
}

/// y = (x·inv)·w, two roundings per value, in this order, between the flush points.
fn scaleRow(x: []const f32, w: []const f32, y: []f32, inv: f32) void {
    const inv_wide: Wide = @splat(inv);
    var i: usize = 0;
    while (i + elementwise_width <= x.len) : (i += elementwise_width) {
        y[i..][0..elementwise_width].* = scale(Wide, x[i..][0..elementwise_width].*, w[i..][0..elementwise_width].*, inv_wide);
    }
    while (i < x.len) : (i += 1) y[i] = scale(f32, x[i], w[i], inv);
}

inline fn scale(comptime V: type, x: V, w: V, inv: V) V {
    const t = flush.flush(V, x, flush.dot_operand_min) * inv;
    return flush.flush(V, t * flush.flush(V, w, flush.value_min), flush.dot_operand_min);
}

/// Each worker reads a task of vocab rows as sequential streams (the access pattern memory
/// prefetchers follow best) and decodes every chunk once, so the weights are read once
/// per call whatever the batch size. A small batch takes each chunk from the decoder
/// straight into its accumulators (two vocab rows side by side, at N ≤ 2 one from each half
/// of the task); a larger one takes a tile of 6 (or 8) vocab rows a block of 2 chunks at a
/// time, decoded into L1 and swept there by threes (or pairs) of tile rows × groups of batch
/// rows whose accumulators sit in registers over a block and in L1 between blocks (with
/// 512-bit vectors the last block reduces them from the registers: reduces_held). Each
/// accumulator sees its values in the canonical order: the tiling only decides when, never
/// in which order, a lane adds.
fn MatvecKernel(comptime t: formats.Type) type {
    return struct {
        const Kernel = @This();
        inputs: []const f32,
        weight: []const u8,
        output: []f32,
        p: params.Matvec,
        row_values: usize,

        /// Groups of lanes whose steps a small batch's fmas take in turn (decode.zig's emit
        /// and decodeDenseChunk), so that more chains of fmas interleave than one group's
        /// 8 steps a batch row. Measured on a 2-core AMD EPYC (Zen 3, AVX2), vocab 32768:
        /// - N = 1, two against one (A-B 3 to 5 times a sitting, two or three sittings): Q8_0,
        ///   Q4_0, Q5_0 and IQ4_NL 7-9% less a call, Q6_K and IQ4_XS 5-7%, F32 2-8%; the types
        ///   with a min (Q4_K, Q5_K, Q2_K, Q5_1) and Q3_K -4% to +3%.
        /// - N = 1, four against those (medians of 5 to 10 alternating runs a sitting, two to
        ///   four sittings): Q3_K and Q5_K 4-6% less, Q6_K, Q4_0 and Q5_0 2-5%; Q8_0 4-7% more,
        ///   F32 level to 3% more, IQ4_NL and IQ4_XS within 2.5%, Q2_K and Q5_1 level to 3%
        ///   more, Q4_K level.
        /// - N = 2, two against one (one to three sittings a type): Q4_K 8-11% less (three);
        ///   Q5_K 26% more (it spilled), the others from 5% less to 2% more.
        /// (F16 and BF16 always come two groups at a time there: decodeHalvesByUnpacks.)
        /// With AVX-512 a conversion takes two groups, so 4 means 2 conversions there; Q4_K
        /// at N = 1 took 10-11% less a call with 2 than with 1 on a 2-core Zen 4 (vocab
        /// 32768, two runs of 8 and 12 interleaved rounds; with AVX2 it was level, above);
        /// IQ4_NL, whose N = 1 once read slower than its N = 2, was level with 1 (4 rounds).
        fn groupsTogether(comptime group: usize) usize {
            return switch (group) {
                1 => switch (t) {
                    .q6_k, .q4_0, .q5_0, .q3_k, .q5_k => 4,
                    .q8_0, .iq4_nl, .iq4_xs, .f32, .q4_k => 2,
                    else => 1,
                },
                2 => if (t == .q4_k) 2 else 1,
                else => 1,
            };
        }

        fn work(job: *MatvecJob, worker: u32) void {
            const p = job.p;
            const row_values = @as(usize, p.chunks) * lanes.chunk_values;
            std.debug.assert(p.chunks == lanes.chunkCount(p.hidden) and p.row_bytes == formats.rowBytes(t, p.hidden).?);
            const kernel: Kernel = .{
                .inputs = job.inputs[0 .. @as(usize, p.rows) * row_values],
                .weight = job.weight[0 .. @as(usize, p.row_bytes) * p.vocab],
                .output = job.output[0 .. @as(usize, p.rows) * p.vocab],
                .p = p,
                .row_values = row_values,
            };
            const scratch = job.scratch.of(worker, matvecScratchValues(t, p.rows, p.chunks));
            if (comptime pairTiles(t)) {
                if (pairRows(p.rows)) return kernel.pairWork(&job.next, scratch);
            }
            const decoded = scratch[0 .. tile_rows_max * tile_block_values];
            const accs: []Lanes = @as([*]Lanes, @ptrCast(@alignCast(scratch[decoded.len..].ptr)))[0 .. tile_rows_max * p.rows];
            while (true) {
                const task_first = claim(u32, &job.next, vocab_rows_per_task);
                if (task_first >= p.vocab) return;
                const task_end = @min(task_first + vocab_rows_per_task, p.vocab);
                switch (p.rows) {
                    inline 1...fusedRowsMax(t) => |group| {
                        const pair = comptime fusedPair(t, group);
                        const pairs = (task_end - task_first) / pair;
                        // Up to 2 batch rows a pair is a row from each half of the task: two
                        // streams a worker, not one of adjacent rows. A-B pairs on a 2-core
                        // Xeon, vocab 65536 to 262144 (geometric means of 10 to 19 pairs):
                        // F32 22% less a call at N = 2, F16 5-6% and Q8_0 6% at N = 1 and 2,
                        // BF16 and Q6_K within 3% either way; the other types (2 to 7 pairs)
                        // within the runs' noise, 8% between runs of unchanged code. At N = 3
                        // Q4_K was 8-10% slower (vocab 131072, twice): from 3 rows a pair is
                        // adjacent rows.
                        const step: usize, const stride: usize = if (group <= 2) .{ 1, pairs } else .{ pair, 1 };
                        for (0..pairs) |k| kernel.fusedRows(pair, group, task_first + k * step, stride);
                        for (task_first + pair * pairs..task_end) |j| kernel.fusedRows(1, group, j, 0);
                    },
                    else => {
                        // Each tile requests the next one's bytes; the first is requested here.
                        prefetchBytes(kernel.weightRow(task_first).ptr, @min(tile_rows_max, task_end - task_first) * p.row_bytes, .l2);
                        var first: usize = task_first;
                        while (first < task_end) : (first += tile_rows_max) {
                            kernel.tile(decoded, accs, first, @min(tile_rows_max, task_end - first));
                        }
                    },
                }
            }
        }

        fn weightRow(job: *const Kernel, j: usize) []const u8 {
            std.debug.assert(j < job.p.vocab);
            return job.weight[j * job.p.row_bytes ..][0..job.p.row_bytes];
        }

        /// Requests a chunk's bytes `distance` bytes ahead of the decoder into `cache`. A
        /// hint: it never faults, even past the end of the weights.
        inline fn prefetchAhead(row: []const u8, chunk: usize, distance: usize, comptime cache: Cache) void {
            const chunk_bytes = comptime decode.chunkBytes(t);
            prefetchBytes(row.ptr + chunk * chunk_bytes + distance, chunk_bytes, cache);
        }

        /// Vocab rows j + v·stride (v < pair) against all `group` batch rows, each chunk used
        /// as it is decoded. Two rows at a time give the fmas of each lane, a chain in the
        /// contract's order, a second chain to overlap with.
        fn fusedRows(job: *const Kernel, comptime pair: usize, comptime group: usize, j: usize, stride: usize) void {
            var acc: [pair][group]Lanes = @splat(@splat(@splat(0)));
            for (0..job.p.chunks) |c| {
                if (comptime decodesIntoFmas(t, group)) {
                    inline for (0..pair) |v| {
                        const row = job.weightRow(j + v * stride);
                        prefetchAhead(row, c, prefetch_bytes, .l2);
                        if (comptime nextChunkIntoL1(t)) prefetchAhead(row, c, decode.chunkBytes(t), .l1);
                        const sink: FmaSink(group) = .{ .acc = &acc[v], .inputs = job.inputs[c * lanes.chunk_values ..], .row_values = job.row_values };
                        decode.chunkInto(t, row, c, job.p.hidden, sink);
                    }
                    continue;
                }
                var w: [pair][lanes.chunk_values]f32 align(64) = undefined;
                inline for (0..pair) |v| {
                    const row = job.weightRow(j + v * stride);
                    prefetchAhead(row, c, prefetch_bytes, .l2);
                    decode.chunkLanes(t, row, c, job.p.hidden, &w[v]);
                }
                inline for (0..lanes.values_per_lane) |i| {
                    inline for (0..group) |g| {
                        const y: Lanes = job.inputs[g * job.row_values + c * lanes.chunk_values + i * lanes.lane_count ..][0..lanes.lane_count].*;
                        inline for (0..pair) |v| {
                            const wv: Lanes = w[v][i * lanes.lane_count ..][0..lanes.lane_count].*;
                            acc[v][g] = @mulAdd(Lanes, wv, y, acc[v][g]);
                        }
                    }
                }
            }
            inline for (0..pair) |v| inline for (0..group) |g| {
                job.output[g * job.p.vocab + j + v * stride] = lanes.reduce(acc[v][g]);
            };
        }

        /// A decoder's sink that adds each value it puts into its lane's chain of fmas for
        /// every batch row of a group (the contract's order: a lane's values come in step
        /// order), so no decoded weight is stored.
        fn FmaSink(comptime group: usize) type {
            return struct {
                pub const groups_together = groupsTogether(group);
                acc: *[group]Lanes,
                /// The group's inputs from the chunk's first value; row g starts at g·row_values.
                inputs: []const f32,
                row_values: usize,

                pub inline fn put(sink: @This(), comptime offset: usize, comptime n: usize, v: @Vector(n, f32)) void {
                    const V = @Vector(n, f32);
                    inline for (0..group) |g| {
                        const y: V = sink.inputs[g * sink.row_values + offset ..][0..n].*;
                        var a: [lanes.lane_count]f32 = sink.acc[g];
                        a[offset % lanes.lane_count ..][0..n].* = @mulAdd(V, v, y, a[offset % lanes.lane_count ..][0..n].*);
                        sink.acc[g] = a;
                    }
                }
            };
        }

        /// Batches that pairTiles gives pair vectors: each worker lays the inputs out
        /// as pair vectors, then claims tasks of vocab rows, a tile of whole rows at a time.
        fn pairWork(kernel: *const Kernel, next: *u32, scratch: []align(128) f32) void {
            const p = kernel.p;
            const groups = std.math.divCeil(usize, p.rows, pair_rows) catch unreachable;
            const decoded = scratch[0 .. pair_tile_rows_max * kernel.row_values];
            const inputs: [*]PairVector = @ptrCast(@alignCast(scratch[decoded.len..].ptr));
            const partials: [*]PairVector = @ptrCast(@alignCast(scratch[decoded.len + groups * pair_rows * kernel.row_values ..].ptr));
            kernel.pairInputs(inputs, groups);
            // Blocks of groups as even as pair_groups_max allows: pairRows gives 6 groups or
            // more, so blocks of 3 or 4 (7 groups: 4 and 3).
            const blocks = std.math.divCeil(usize, groups, pair_groups_max) catch unreachable;
            switch (std.math.divCeil(usize, groups, blocks) catch unreachable) {
                inline 3...pair_groups_max => |block| kernel.pairTasks(pair_accumulators / block, block, next, decoded.ptr, inputs, groups, partials),
                else => unreachable,
            }
        }

        /// Vector (j·steps + s)·groups + g holds, at element e, batch row 8g + e/2 at lane
        /// 2j + e%2 and step s (chunk s/8, step s%8), as the lane-major inputs hold a pair of
        /// lanes side by side; rows past the batch are zero.
        fn pairInputs(kernel: *const Kernel, inputs: [*]PairVector, groups: usize) void {
            const p = kernel.p;
            const steps = @as(usize, p.chunks) * lanes.values_per_lane;
            const src: [*]const u64 = @ptrCast(@alignCast(kernel.inputs.ptr));
            const out: [*]u64 = @ptrCast(inputs);
            for (0..groups) |g| for (0..pair_rows) |n| {
                const row = g * pair_rows + n;
                for (0..steps) |s| for (0..pair_count) |j| {
                    out[((j * steps + s) * groups + g) * pair_rows + n] = if (row < p.rows) src[(row * kernel.row_values + s * lanes.lane_count) / 2 + j] else 0;
                };
            };
        }

        fn pairTasks(kernel: *const Kernel, comptime tile_rows: usize, comptime block: usize, next: *u32, decoded: [*]f32, inputs: [*]const PairVector, groups: usize, partials: [*]PairVector) void {
            const p = kernel.p;
            comptime std.debug.assert(pair_task_rows % tile_rows == 0 and tile_rows * block <= pair_accumulators);
            while (true) {
                const task_first = claim(u32, next, pair_task_rows);
                if (task_first >= p.vocab) return;
                const task_end = @min(task_first + pair_task_rows, p.vocab);
                prefetchBytes(kernel.weightRow(task_first).ptr, @min(tile_rows, task_end - task_first) * p.row_bytes, .l2);
                var first: usize = task_first;
                while (first < task_end) : (first += tile_rows) {
                    const valid = @min(tile_rows, task_end - first);
                    kernel.pairDecode(tile_rows, decoded, first, valid);
                    var prefetch: SweepPrefetch = .{ .next = kernel.weight.ptr + (first + 2 * tile_rows) * p.row_bytes, .lines_left = tile_rows * p.row_bytes / 64 };
                    var g: usize = 0;
                    while (g < groups) {
                        const n: usize = @min(block, groups - g);
                        switch (n) {
                            inline 1...block => |b| {
                                kernel.pairSweep(tile_rows, b, decoded, inputs, groups, g, partials, &prefetch);
                                kernel.pairReduce(b, partials, first, valid, g);
                            },
                            else => unreachable,
                        }
                        g += n;
                    }
                }
            }
        }

        /// Decodes vocab rows [first, +valid) whole, rows past them zero: row r's lane pair j
        /// at step s is floats [r·row_values + (j·steps + s)·2, +2), each pair's steps one
        /// stream for pairSweep.
        fn pairDecode(kernel: *const Kernel, comptime tile_rows: usize, decoded: [*]f32, first: usize, valid: usize) void {
            const p = kernel.p;
            const steps = @as(usize, p.chunks) * lanes.values_per_lane;
            for (0..tile_rows) |r| {
                const out = decoded[r * kernel.row_values ..][0..kernel.row_values];
                if (r >= valid) {
                    @memset(out, 0);
                    continue;
                }
                const row = kernel.weightRow(first + r);
                for (0..p.chunks) |c| {
                    prefetchAhead(row, c, tile_rows * p.row_bytes, .l2);
                    decode.chunkPairs(t, row, c, p.hidden, out.ptr + c * lanes.values_per_lane * 2, steps * 2);
                }
            }
        }

        /// Tile rows × batch row groups [g0, +block): each lane pair's chains of fmas run the
        /// whole row in registers (the contract's order: step after step), then leave their
        /// partial sums for pairReduce.
        fn pairSweep(kernel: *const Kernel, comptime tile_rows: usize, comptime block: usize, decoded: [*]const f32, inputs: [*]const PairVector, groups: usize, g0: usize, partials: [*]PairVector, prefetch: *SweepPrefetch) void {
            const steps = @as(usize, kernel.p.chunks) * lanes.values_per_lane;
            for (0..pair_count) |j| {
                var acc: [tile_rows][block]PairVector = @splat(@splat(@splat(0)));
                const w: [*]const u64 = @ptrCast(@alignCast(decoded + j * steps * 2));
                const y = inputs + j * steps * groups + g0;
                for (0..steps) |s| {
                    prefetch.step();
                    var ys: [block]PairVector = undefined;
                    inline for (0..block) |g| ys[g] = y[s * groups + g];
                    inline for (0..tile_rows) |r| {
                        const wv: PairVector = @bitCast(@as(@Vector(8, u64), @splat(w[r * kernel.row_values / 2 + s])));
                        inline for (0..block) |g| acc[r][g] = @mulAdd(PairVector, wv, ys[g], acc[r][g]);
                    }
                }
                inline for (0..tile_rows) |r| inline for (0..block) |g| {
                    partials[(r * block + g) * pair_count + j] = acc[r][g];
                };
            }
        }

        /// Each output's butterfly over its 32 lanes, 8 outputs a vector (lanes.reducePairs).
        fn pairReduce(kernel: *const Kernel, comptime block: usize, partials: [*]const PairVector, first: usize, valid: usize, g0: usize) void {
            const p = kernel.p;
            for (0..valid) |r| for (0..block) |g| {
                const sums = lanes.reducePairs(partials[(r * block + g) * pair_count ..][0..pair_count].*);
                inline for (0..pair_rows) |n| {
                    const row = (g0 + g) * pair_rows + n;
                    if (row < p.rows) kernel.output[row * p.vocab + first + r] = sums[n];
                }
            };
        }

        fn tile(job: *const Kernel, decoded: []f32, accs: []Lanes, first: usize, tile_rows: usize) void {
            std.debug.assert(tile_rows >= 1 and tile_rows <= tile_rows_max);
            const rows = job.p.rows;
            var prefetch: SweepPrefetch = .{ .next = job.weight.ptr + (first + 2 * tile_rows) * job.p.row_bytes, .lines_left = tile_rows * job.p.row_bytes / 64 };
            var chunk: usize = 0;
            while (chunk < job.p.chunks) : (chunk += tile_block_chunks) {
                const block_chunks: usize = @min(tile_block_chunks, job.p.chunks - chunk);
                for (0..tile_rows) |tr| {
                    const row = job.weightRow(first + tr);
                    for (0..block_chunks) |k| {
                        // The same chunk of the next tile, so the stream stays a tile ahead.
                        prefetchAhead(row, chunk + k, tile_rows * job.p.row_bytes, .l2);
                        decode.chunkLanes(t, row, chunk + k, job.p.hidden, decoded[tr * tile_block_values + k * lanes.chunk_values ..][0..lanes.chunk_values]);
                    }
                }
                const begin = chunk * lanes.chunk_values;
                const end = begin + block_chunks * lanes.chunk_values;
                var r: usize = 0;
                while (r < rows) {
                    // Full groups, then one group of the rows left, so that every weight load serves them all.
                    const group = @min(sweep_group_rows, rows - r);
                    switch (group) {
                        inline 1...sweep_group_rows => |g| job.sweepGroup(g, decoded, accs, first, tile_rows, r, begin, end, &prefetch),
                        else => unreachable,
                    }
                    r += group;
                }
            }
            if (!reduces_held) for (0..tile_rows) |tr| {
                for (0..rows) |r| job.output[r * job.p.vocab + first + tr] = lanes.reduce(accs[tr * rows + r]);
            };
        }

        /// Every tile row against batch rows [first_row, +group), tile_rows_per_sweep at a time.
        inline fn sweepGroup(job: *const Kernel, comptime group: usize, decoded: []const f32, accs: []Lanes, first: usize, tile_rows: usize, first_row: usize, begin: usize, end: usize, prefetch: *SweepPrefetch) void {
            var tr: usize = 0;
            while (tr + tile_rows_per_sweep <= tile_rows) : (tr += tile_rows_per_sweep) job.sweep(tile_rows_per_sweep, group, decoded, accs, first, tr, first_row, begin, end, prefetch);
            switch (tile_rows - tr) {
                0 => {},
                inline 1...tile_rows_per_sweep - 1 => |k| job.sweep(k, group, decoded, accs, first, tr, first_row, begin, end, prefetch),
                else => unreachable,
            }
        }

        /// Tile rows [first_t, +count) against batch rows [first_row, +group), values [begin, end)
        /// (the decoded block holds each tile row's values from begin), sweep_parts of each
        /// accumulator per pass. The tile's first vocab row is `first`: where reduces_held,
        /// the last block writes its outputs.
        inline fn sweep(job: *const Kernel, comptime count: usize, comptime group: usize, decoded: []const f32, accs: []Lanes, first: usize, first_t: usize, first_row: usize, begin: usize, end: usize, prefetch: *SweepPrefetch) void {
            const rows = job.p.rows;
            const parts = lanes.lane_count / sweep_width;
            inline for (0..parts / sweep_parts) |pass| {
                var acc: [count][group][sweep_parts]SweepVector = undefined;
                // The first block starts from zero: every accumulator of the tile is stored by
                // each block's sweeps, so none is cleared in memory. Clearing them (a memset of
                // 24 KiB a tile at N = 32) and reducing each output with the whole butterfly had
                // taken 3 of a Q8_0 call's 39 ms at N = 32 in a time profile; without both (and
                // lanes.reduce making lane 0's adds only), on a 2-core Zen 4, vocab 32768, 6-8
                // interleaved rounds, 9 types: 3-6% less a call at N = 32 and 64 (five types
                // each), 1-3% at N = 8 and 16, level at N = 1; with AVX2 1-3% less at N = 8
                // and 32 (Q8_0, Q6_K, F16).
                inline for (0..count) |tr| inline for (0..group) |g| inline for (0..sweep_parts) |p| {
                    acc[tr][g][p] = if (begin == 0) @splat(0) else loadPart(accs, (first_t + tr) * rows + first_row + g, pass * sweep_parts + p);
                };
                var at = begin;
                while (at < end) : (at += lanes.lane_count) {
                    if (comptime sweepPrefetches(t)) prefetch.step();
                    inline for (0..group) |g| inline for (0..sweep_parts) |p| {
                        const lane = (pass * sweep_parts + p) * sweep_width;
                        const y: SweepVector = job.inputs[(first_row + g) * job.row_values + at + lane ..][0..sweep_width].*;
                        inline for (0..count) |tr| {
                            const w: SweepVector = decoded[(first_t + tr) * tile_block_values + (at - begin) + lane ..][0..sweep_width].*;
                            acc[tr][g][p] = @mulAdd(SweepVector, w, y, acc[tr][g][p]);
                        }
                    };
                }
                if (reduces_held and end == job.row_values) {
                    // The last block: the outputs come straight from the registers.
                    var held: [count * group][2]@Vector(16, f32) = undefined;
                    inline for (0..count) |tr| inline for (0..group) |g| {
                        held[tr * group + g] = acc[tr][g];
                    };
                    const sums: [16]f32 = lanes.reduceMany(count * group, held);
                    inline for (0..count) |tr| inline for (0..group) |g| {
                        job.output[(first_row + g) * job.p.vocab + first + first_t + tr] = sums[comptime lanes.manyLane(tr * group + g)];
                    };
                } else inline for (0..count) |tr| inline for (0..group) |g| inline for (0..sweep_parts) |p| {
                    storePart(accs, (first_t + tr) * rows + first_row + g, pass * sweep_parts + p, acc[tr][g][p]);
                };
            }
        }
    };
}

/// Large batches of the dense types as pair vectors: a vector's 16 elements are two lanes
/// (2j, 2j + 1) of 8 batch rows, so one broadcast of two decoded weights serves 8 rows, and
/// each chain of fmas runs a whole row in one register: no accumulator leaves the registers
/// before its row ends, and the decoder (decode.chunkPairs) only reorders each lane pair's 16
/// contiguous values, where the tiles' lane-major decoder transposes a chunk. The sweeps ask
/// for the tile after next as the tiles' do (SweepPrefetch). Measured on a 2-core Intel Xeon
/// with AVX-512 and AMX (2026-12-06, Gemma's head, interleaved with the tiles, 2 to 8 rounds a
/// cell): at N = 48 and 64 F16 5–25% less a call, F32 2–16%, BF16 4–25% in 9 of 10 rounds
/// (13% more in one); at N = 32 and 40 F16 7–17% less, BF16 4–18% less to 3% more, F32 11%
/// less to 8% more; at N = 56 (two rounds, the final build) F16 15–16% less, BF16 6–7%, F32
/// 8–11%, while cells that ran the tiles on both sides (N = 40) moved from 5% less to 13% more
/// in the same rounds. Q8_0, decoded the same way (a block's scale times 16 of its codes), from
/// 24% less to 2% more at N = 32 to 64, no consistent sign. Every type took 1% less to 12%
/// more at N = 33, whose last vector holds 1 row of 8, 4–46% more at N = 16 and 14% less to
/// 23% more at N = 24. So the dense types take them from 48 rows, in whole vectors.
fn pairTiles(comptime t: formats.Type) bool {
    return elementwise_width >= 16 and decode.hasPairs(t);
}
fn pairRows(rows: usize) bool {
    return rows >= 48 and rows % pair_rows == 0;
}
const pair_rows = 8;
const pair_count = lanes.lane_count / 2;
const pair_accumulators = 24;
const pair_groups_max = 4;
const pair_tile_rows_max = pair_accumulators / 3;
const pair_task_rows = 48;
/// Partial-sum values a tile leaves at most: a vector per lane pair per accumulator.
const pair_partials = pair_accumulators * pair_count * 16;
const PairVector = @Vector(16, f32);

/// Whether a tile's last block reduces its outputs from the sweeps' registers, several a
/// vector (lanes.reduceMany), instead of storing its accumulators and reading them back one
/// output at a time: with 512-bit vectors, where a pass holds all 32 lanes of each. Measured
/// on a 2-core Intel Xeon with AVX-512 and AMX (2026-12-06), Gemma's head, only the N-row
/// call timed, interleaved with the tiles before it (2 to 4 rounds, two runs): 3–10% less a
/// call at N = 64 (F16, BF16, F32, Q8_0, Q6_K, Q4_K, Q4_0), 1–8% at N = 32 and 2–9% at
/// N = 16, from 4% less to 3% more at N = 8 (level in a third run, 4 rounds: 0–4% less). A
/// time profile there (Q8_0, vocab 65536) had put 4–6% of a tile's samples at N = 8 and 32
/// on the old reduction and 10–15% on the accumulators' round trips (docs/CPU.md).
const reduces_held = sweep_width == 16 and sweep_parts == 2;

/// Lanes [q·sweep_width, +sweep_width) of accumulator i.
inline fn loadPart(accs: []const Lanes, i: usize, comptime q: usize) SweepVector {
    const all: *const [lanes.lane_count]f32 = @ptrCast(&accs[i]);
    return all[q * sweep_width ..][0..sweep_width].*;
}

inline fn storePart(accs: []Lanes, i: usize, comptime q: usize, v: SweepVector) void {
    const all: *[lanes.lane_count]f32 = @ptrCast(&accs[i]);
    all[q * sweep_width ..][0..sweep_width].* = v;
}

/// Whether a tile's sweeps ask for the bytes of the tile after next into L2, a line every
/// `sweep_prefetch_steps` steps (SweepPrefetch), so that memory goes on reading while the
/// fmas run: the decoder's own requests (a tile ahead, `tile`) come in bursts between the
/// sweeps. On a 2-core Intel Xeon (AVX-512), with the sweeps taken out, F16's and Q8_0's
/// tiles at N = 8 took as long as their one-row calls, and the sweeps added their whole time
/// to that (docs/CPU.md). Measured there, Gemma's head,
/// two runs of 3 interleaved rounds (2026-12-05), against the tiles without it: F32 4-10%
/// less a call at N = 8, 16 and 32, F16 1-10%, BF16 1-12%; Q8_0 from 9% less to 1% more,
/// Q6_K level at N = 8 and Q4_0 2% more there (one run); at vocab 65536 (2 rounds, N = 8
/// and 16) Q5_0, Q5_1 and IQ4_NL 0-6% less, Q4_K, Q5_K, IQ4_XS, Q2_K and Q3_K up to 8% more,
/// so only the dense types, with the most bytes a weight, take it. Tried, and slower than
/// this: 3 tiles ahead (from 11% less to 3% more, Gemma's head, one run); a line every step,
/// or every third (level to 10% less at vocab 65536, less than every second); the next tile
/// (level to 6% less); the decoder's requests moved into the sweeps instead, the next
/// tile's lines spread over their steps (13% more, F16 N = 8); the decoder asking for the
/// same chunk 2 blocks ahead in its own row instead of in the next tile (7-34% more); no
/// prefetch in tiles at all (12-54% more); the tile's lines spread evenly over its steps
/// (every step at N = 8, every second to fifth at N = 32), with Q8_0 too: F16 1-8% more,
/// F32 4% less to 5% more, Q8_0 3% less to 2% more (2 rounds, 2026-12-05). With 256-bit
/// vectors (the AVX2 level on the same Xeon, vocab 65536, 2 rounds) F32 5-10% less a call
/// at N = 4 and 8, the others level there and 5-6% more at N = 32: not taken. With the head in
/// huge pages (backend.zig's huge_pages; the same Xeon, Gemma's head, 3 interleaved rounds,
/// 2026-12-06), every type taking it: Q8_0 from 12% less to 4% more a call at N = 8 and from 7%
/// less to 3% more at N = 32 (7 rounds), Q5_0 up to 8% more, the others within 10% either way,
/// while F16, unchanged, moved from 9% less to 5% more: not taken.
fn sweepPrefetches(comptime t: formats.Type) bool {
    return elementwise_width >= 16 and formats.of(t).block_values == 1;
}

/// The requests of a tile's sweeps: the next line of the tile after next, every
/// sweep_prefetch_steps steps, until all of it is asked for or the tile ends (at N = 8 its
/// sweeps reach part of it; the decoder asks for the whole tile when it is the next). A hint:
/// it never faults, even past the end of the weights.
const SweepPrefetch = struct {
    next: [*]const u8,
    lines_left: usize,
    steps: usize = 0,

    inline fn step(s: *SweepPrefetch) void {
        s.steps +%= 1;
        if (s.steps % sweep_prefetch_steps != 0 or s.lines_left == 0) return;
        prefetchBytes(s.next, 64, .l2);
        s.next += 64;
        s.lines_left -= 1;
    }
};
const sweep_prefetch_steps = 2;

/// The cache a prefetch asks bytes into (x86-64: `prefetcht0`, `prefetcht1`).
const Cache = enum { l1, l2 };

/// Requests `bytes` bytes from `start` into `cache`, a cache line at a time. A hint: it never
/// faults.
inline fn prefetchBytes(start: [*]const u8, bytes: usize, comptime cache: Cache) void {
    var line: usize = 0;
    while (line < bytes) : (line += 64) @prefetch(start + line, .{ .locality = if (cache == .l1) 3 else 2 });
}

/// out = tanh(x·(1/cap))·cap in place, elementwise.
fn softcap(job: *SoftcapJob, worker: u32) void {
    _ = worker;
    const block_values = 1 << 16;
    // cap and 1/cap are flushed too: a cap past 2^126 has a subnormal reciprocal.
    const cap = flush.flush(f32, job.p.cap, flush.value_min);
    const inv_cap = flush.flush(f32, job.p.inv_cap, flush.value_min);
    while (true) {
        const first = claim(u64, &job.next, block_values);
        if (first >= job.p.values) return;
        const block = job.data[first..@min(first + block_values, job.p.values)];
        var i: usize = 0;
        while (i + elementwise_width <= block.len) : (i += elementwise_width) {
            block[i..][0..elementwise_width].* = capOne(Wide, block[i..][0..elementwise_width].*, @splat(cap), @splat(inv_cap));
        }
        while (i < block.len) : (i += 1) block[i] = capOne(f32, block[i], cap, inv_cap);
    }
}

/// tanh(x·inv_cap)·cap, with the input, the argument and the result flushed.
inline fn capOne(comptime V: type, x: V, cap: V, inv_cap: V) V {
    const u = flush.flush(V, flush.flush(V, x, flush.value_min) * inv_cap, flush.value_min);
    return flush.flush(V, math.tanh(V, u) * cap, flush.value_min);
}

/// counts[r] = NaN and ±Inf values in row r: the head's per-row validity, read by the host.
fn countNonFinite(job: *CountJob, worker: u32) void {
    _ = worker;
    const U = @Vector(elementwise_width, u32);
    const exponent: U = @splat(0x7F80_0000);
    while (true) {
        const r: usize = claim(u32, &job.next, 1);
        if (r >= job.p.rows) return;
        const row = job.data[r * job.p.row_values ..][0..job.p.row_values];
        var count: u32 = 0;
        var i: usize = 0;
        while (i + elementwise_width <= row.len) : (i += elementwise_width) {
            const bits: U = @bitCast(@as(Wide, row[i..][0..elementwise_width].*));
            // Widened before the sum: @intFromBool gives u1 lanes, whose sum wraps.
            count += @reduce(.Add, @as(U, @intFromBool((bits & exponent) == exponent)));
        }
        while (i < row.len) : (i += 1) count += @intFromBool(!std.math.isFinite(row[i]));
        job.counts[r] = count;
    }
}

/// The FMA rate probe: chains of dependent fmas, as the matvec's accumulators are.
fn fmaProbe(job: *FmaProbeJob, worker: u32) void {
    var acc: [fma_probe_chains]Wide = undefined;
    for (&acc, 0..) |*a, i| a.* = @splat(@floatFromInt(i));
    const m: Wide = @splat(0.999);
    const c: Wide = @splat(0.001);
    var round: u64 = 0;
    while (round < job.rounds) : (round += 1) {
        inline for (&acc) |*a| a.* = @mulAdd(Wide, a.*, m, c);
    }
    var sum: Wide = @splat(0);
    for (acc) |a| sum += a;
    job.sinks[worker] = @reduce(.Add, sum);
}
