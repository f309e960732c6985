//! The CPU's lane-major chunk decoder: the matvec's hot path. It decodes 256 values of a
//! weight row straight into the lane-major order of numerics/lanes.zig, with the same
//! arithmetic per value as the reference decoders of numerics/formats.zig (tested equal
//! bit for bit below), reading every field at the offsets of formats.zig's block layouts, and
//! gives F32 and BF16 weights past their flush point (numerics/flush.zig). The dense types
//! also decode by lane pairs (chunkPairs), the order of kernels.zig's pair vectors.
const std = @import("std");
const builtin = @import("builtin");
const formats = @import("../../numerics/formats.zig");
const flush = @import("../../numerics/flush.zig");
const lanes = @import("../../numerics/lanes.zig");
const Type = formats.Type;
const of = formats.of;
const iq4_values = formats.iq4_values;
const f16ToF32 = formats.f16ToF32;

// ---------------------------------------------------------------------------------------------
// Lane-major chunk decoder (the CPU kernel's hot path)
// ---------------------------------------------------------------------------------------------
//
// A chunk is 256 consecutive elements of a row. Lane l (0..32) owns elements [8l, 8l+8) of the chunk;
// lane-major order puts element 8l+i at out[32i+l]. Every decoder below works the same way:
//   1. build the chunk's integer codes (or dense bit patterns) in natural element order, as four
//      64-element groups (group g = elements 64g..64g+63 = lanes 8g..8g+7), with vector ops only;
//   2. permute them into lane-major order with comptime @shuffle masks: on x86-64 one step's
//      codes of a group's 8 lanes (two groups' 16 with AVX-512) at a time (codes_by_group);
//      elsewhere the whole chunk, an 8×8 transpose inside each group, then a 4-way
//      interleave of 8-element rows across groups (`lanesFromGroups`);
//   3. convert those codes (16 at a time for the whole chunk) to f32, apply the per-lane scale
//      (and min) and put them into a sink: the chunk's array, or the kernel's fmas. For every
//      format a lane's 8 elements share one scale: sub-blocks hold 16 or 32 elements and
//      blocks 32.
// The arithmetic per element is the one of decodeBlock, on the same operands, so results are equal bit
// for bit (the products are exact anyway, see the note above decodeBlock).

const V32f = @Vector(32, f32);

/// Bytes of one full chunk of type t.
pub fn chunkBytes(comptime t: Type) usize {
    const f = comptime of(t);
    return (256 / f.block_values) * f.block_bytes;
}

/// Mask of the 8×8 transpose inside a 64-element group: natural [l'][i] → [i][l'].
const transpose8x8: [64]i32 = blk: {
    var m: [64]i32 = undefined;
    for (0..8) |i| {
        for (0..8) |lp| m[8 * i + lp] = 8 * lp + i;
    }
    break :blk m;
};

fn concatMask(comptime n: usize) [2 * n]i32 {
    var m: [2 * n]i32 = undefined;
    for (0..n) |j| {
        m[j] = @intCast(j);
        m[n + j] = ~@as(i32, @intCast(j));
    }
    return m;
}

inline fn concat(comptime E: type, comptime n: usize, a: @Vector(n, E), b: @Vector(n, E)) @Vector(2 * n, E) {
    return @shuffle(E, a, b, concatMask(n));
}

/// Unaligned little-endian vector load of n elements of E from the start of p.
inline fn load(comptime E: type, comptime n: usize, p: []const u8) @Vector(n, E) {
    const bytes = p[0 .. n * @sizeOf(E)];
    const arr: *align(1) const [n]E = @ptrCast(bytes.ptr);
    var v: @Vector(n, E) = arr.*;
    if (builtin.cpu.arch.endian() == .big and @sizeOf(E) > 1) v = @byteSwap(v);
    return v;
}

/// Byte codes of a chunk in natural order (4 groups of 64) → lane-major order, as 4 vectors of 64:
/// result[j] holds steps 2j (elements 0..31 of the vector, one per lane) and 2j+1 (32..63).
inline fn lanesFromGroups(g: [4]@Vector(64, u8)) [4]@Vector(64, u8) {
    // Stage 1: z[g] = [i][l'] for lanes 8g..8g+7; as u64, z[g][i] = the 8 lane bytes of step i.
    var z: [4]@Vector(8, u64) = undefined;
    inline for (0..4) |k| z[k] = @bitCast(@shuffle(u8, g[k], undefined, transpose8x8));
    // Stage 2: step i = [z0[i], z1[i], z2[i], z3[i]].
    const lo_m = [8]i32{ 0, ~@as(i32, 0), 1, ~@as(i32, 1), 2, ~@as(i32, 2), 3, ~@as(i32, 3) };
    const hi_m = [8]i32{ 4, ~@as(i32, 4), 5, ~@as(i32, 5), 6, ~@as(i32, 6), 7, ~@as(i32, 7) };
    const a_lo = @shuffle(u64, z[0], z[1], lo_m); // z0[0] z1[0] z0[1] z1[1] ...
    const a_hi = @shuffle(u64, z[0], z[1], hi_m);
    const b_lo = @shuffle(u64, z[2], z[3], lo_m);
    const b_hi = @shuffle(u64, z[2], z[3], hi_m);
    const s01 = [8]i32{ 0, 1, ~@as(i32, 0), ~@as(i32, 1), 2, 3, ~@as(i32, 2), ~@as(i32, 3) };
    const s23 = [8]i32{ 4, 5, ~@as(i32, 4), ~@as(i32, 5), 6, 7, ~@as(i32, 6), ~@as(i32, 7) };
    return .{
        @bitCast(@shuffle(u64, a_lo, b_lo, s01)),
        @bitCast(@shuffle(u64, a_lo, b_lo, s23)),
        @bitCast(@shuffle(u64, a_hi, b_hi, s01)),
        @bitCast(@shuffle(u64, a_hi, b_hi, s23)),
    };
}

/// Whether the target converts f16 vectors in hardware (otherwise @floatCast is a libcall per element).
const hw_f16 = switch (builtin.cpu.arch) {
    .x86, .x86_64 => std.Target.x86.featureSetHas(builtin.cpu.features, .f16c),
    .aarch64, .aarch64_be => true,
    else => false,
};

/// Vector f16 → f32: exact for every value but NaN, which stays a NaN (NUMERICS.md §1 leaves
/// NaN payloads out of the contract). One vcvtph2ps per 16 values with F16C; the hardware may
/// quiet a signalling NaN or replace its payload, and changes nothing else against f16ToF32.
pub inline fn f16Vec(comptime n: usize, h: @Vector(n, u16)) @Vector(n, f32) {
    if (!hw_f16) return f16VecInt(n, h);
    return @floatCast(@as(@Vector(n, f16), @bitCast(h)));
}

/// The integer-only conversion (bit-identical to f16ToF32, NaN payloads included), for targets where
/// @floatCast on f16 vectors is slow (no hardware conversion).
pub inline fn f16VecInt(comptime n: usize, h: @Vector(n, u16)) @Vector(n, f32) {
    const U = @Vector(n, u32);
    const w: U = h;
    const em = w & @as(U, @splat(0x7fff));
    const sign = (w & @as(U, @splat(0x8000))) << @splat(16);
    // Rebias the exponent by 127-15: exact for normals; Inf/NaN need another +128-16.
    var o = (em << @splat(13)) + @as(U, @splat(112 << 23));
    o = @select(u32, em >= @as(U, @splat(0x7c00)), o + @as(U, @splat(112 << 23)), o);
    // Subnormal/zero: one more exponent step makes o 2^-14·(1 + man/1024); subtracting 2^-14 leaves
    // man·2^-24 exactly (+0 for man = 0, the sign is or-ed in below). No f32 denormal is touched.
    const sub: U = @bitCast(@as(@Vector(n, f32), @bitCast(o + @as(U, @splat(1 << 23)))) - @as(@Vector(n, f32), @splat(0x1p-14)));
    o = @select(u32, em < @as(U, @splat(0x0400)), sub, o);
    return @bitCast(o | sign);
}

/// Per-lane vector from n per-sub-block values: lane l gets v[l / (32/n)].
inline fn perLane(comptime n: usize, v: @Vector(n, f32)) V32f {
    comptime var m: [32]i32 = undefined;
    inline for (0..32) |l| m[l] = l / (32 / n);
    return @shuffle(f32, v, undefined, m);
}

/// Whether emit converts its codes a group of lanes at a time (8 codes of a step for each
/// of 8 lanes, or of 16 lanes, two groups, with AVX-512), rather than permuting the whole
/// chunk into lane-major order first (lanesFromGroups) and converting 16 at a time: on
/// every x86-64 level. A group's codes cross the vector's 128-bit halves once (laneQuads),
/// then each step takes one in-half byte shuffle (codeHigh), and no code goes through
/// memory. Without AVX-512 the chunk's permutes cross the halves at every stage and its
/// 256 codes outgrow the 16 registers: measured on a 2-core AMD EPYC (Zen 1, AVX2), vocab
/// 32768 × hidden 2816, A-B-A-B against an 8 × 8 byte transpose per group (which LLVM built
/// from a cross-half `vpermd` per two steps), every quantized type 17–38% less a call at N =
/// 1 (Q8_0 16.4 → 11.4 ms), 8–27% at N = 2, 5–16% at N = 8. With AVX-512, against the
/// chunk's permutes whose codes were stored and read back 16 at a time (loads cost a load
/// port where a shuffle out of a register took the port the widening needs) and the decoded
/// chunk stored for the fmas, on a 2-core AMD EPYC (Zen 4), vocab 32768, 8 interleaved
/// rounds: every quantized type 10–24% less a call at N = 1 and 2 (Q6_K 6.7 → 5.6 ms at N =
/// 1), 0–16% at N = 3, 4–23% at N = 4; at N = 8 and 32 (tiles, which store the chunk either
/// way) within the noise of these runs (the unchanged F16 moved up to 11% either way; Q4_0
/// at N = 8 read 0.96, 1.08 and 1.04 of before in three runs).
pub const codes_by_group = builtin.cpu.arch == .x86_64;

/// Whether this CPU level has AVX-512 (and so 32 vector registers).
pub const has_avx512 = builtin.cpu.arch == .x86_64 and std.Target.x86.featureSetHas(builtin.cpu.features, .avx512f);
/// Lanes whose codes one conversion takes: a group of 8, or two groups with 512-bit vectors.
const code_lanes = if (has_avx512) 16 else 8;

/// Converts a chunk's codes (4 natural-order groups of 64, as the decoders build them) and
/// puts scale·q (+ or − min) into the sink, step by step, with the scale (and min) of each
/// of the chunk's n sub-blocks (a lane's 8 values lie in one). scale·q is exact, so one fma
/// rounds the sum as NUMERICS.md §2 rounds it.
inline fn emit(comptime E: type, g: [4]@Vector(64, u8), comptime n: usize, scale: @Vector(n, f32), comptime min_op: MinOp, min: @Vector(n, f32), sink: anytype) void {
    if (codes_by_group) return emitSteps(GroupCodes{ .g = g }, n, scale, min_op, min, sink);
    const addend = if (min_op == .sub) -min else min;
    const lm = lanesFromGroups(g);
    const V16f = @Vector(16, f32);
    const lane_scale = perLane(n, scale);
    const lane_addend = perLane(n, addend);
    const scales = [2]V16f{ part(f32, 16, lane_scale, 0), part(f32, 16, lane_scale, 1) };
    const addends = [2]V16f{ part(f32, 16, lane_addend, 0), part(f32, 16, lane_addend, 1) };
    // Codes 16k.. of the chunk: lanes 0-15 or 16-31 of step k / 2.
    inline for (0..16) |k| {
        const codes: @Vector(16, E) = @bitCast(part(u8, 16, lm[k / 4], k % 4));
        const q: V16f = @floatFromInt(codes);
        sink.put(16 * k, 16, switch (min_op) {
            .none => scales[k % 2] * q,
            .add, .sub => @mulAdd(V16f, scales[k % 2], q, addends[k % 2]),
        });
    }
}

const MinOp = enum { none, add, sub };

/// emit on x86-64, from `codes` that give code_lanes lanes' codes a step at a time as
/// floats times `unit` (GroupCodes, NibbleCodes).
inline fn emitSteps(codes: anytype, comptime n: usize, scale: @Vector(n, f32), comptime min_op: MinOp, min: @Vector(n, f32), sink: anytype) void {
    const Codes = @TypeOf(codes);
    const addend = if (min_op == .sub) -min else min;
    const Vf = @Vector(code_lanes, f32);
    const groups = code_lanes / 8;
    const together: usize = comptime @min(groupsOfSink(@TypeOf(sink)), 4 / groups);
    inline for (0..4 / (groups * together)) |p| {
        var gathered: [together]Codes.Gathered = undefined;
        var s: [together]Vf = undefined;
        var a: [together]Vf = undefined;
        inline for (0..together) |h| {
            // Lanes [code_lanes·k, +code_lanes) of the chunk.
            const k = together * p + h;
            gathered[h] = codes.gather(k);
            // With a min, each group's scales and mins are made from the sub-blocks' next to
            // their use (inOrder): made all at once, the chunk's 8 vectors of them spilled
            // from the 16 registers. Measured on a 2-core Zen 1, vocab 32768, A-B-A-B twice:
            // Q4_K 12–19% less a call at N = 1, 2 and 8 (N = 1 14.1 → 11.9 ms), Q5_K 6–17%,
            // Q2_K 6–14% at N = 2 and 8, Q5_1 1–8%; without a min (Q8_0, Q6_K, Q3_K) the same
            // ordering made N = 1 4–11% slower.
            const ordered = if (min_op == .none) scale else inOrder(n, scale);
            s[h] = part(f32, code_lanes, perLane(n, ordered), k);
            // The scale takes the codes' unit: both products are exact, and so is theirs.
            if (Codes.unit != 1.0) s[h] *= @as(Vf, @splat(Codes.unit));
            if (min_op != .none) a[h] = part(f32, code_lanes, perLane(n, inOrder(n, addend)), k);
        }
        inline for (0..8) |i| inline for (0..together) |h| {
            const k = together * p + h;
            const q: Vf = Codes.step(gathered[h], k, i);
            sink.put(32 * i + code_lanes * k, code_lanes, switch (min_op) {
                .none => s[h] * q,
                .add, .sub => @mulAdd(Vf, s[h], q, a[h]),
            });
        };
    }
}

/// A chunk's codes as the decoders build them (4 natural-order groups of 64 bytes), each
/// step's as q·2^24 (codeHigh).
const GroupCodes = struct {
    g: [4]@Vector(64, u8),

    const unit = 0x1p-24;
    const Gathered = [2]@Vector(4 * code_lanes, u8);

    inline fn gather(codes: GroupCodes, comptime k: usize) Gathered {
        const groups = code_lanes / 8;
        return laneQuads(groups, if (groups == 1) codes.g[k] else concat(u8, 64, codes.g[2 * k], codes.g[2 * k + 1]));
    }

    inline fn step(quads: Gathered, comptime k: usize, comptime i: usize) @Vector(code_lanes, f32) {
        _ = k;
        return @floatFromInt(codeHigh(code_lanes, quads[i / 4], i % 4));
    }
};

/// Whether the formats of 4-bit codes (Q4_0, IQ4_NL, Q4_K, IQ4_XS) and Q2_K take their codes
/// straight from their bytes (NibbleCodes): with AVX-512 only, whose float permute reads 16
/// entries.
const nibbles_by_permute = has_avx512;

/// Codes of 4 bits or fewer, read from a chunk's bytes: for each 16 lanes, two dword permutes
/// put each lane's 8 code bytes in its word, 4 a permute (gather), and each step shifts the
/// lane's code to the word's low bits and looks it up in the format's values as floats
/// (`vpermps` reads those 4 bits alone; Q2_K's table repeats its 4 values, so the bits above
/// its code do not matter). A step costs two instructions, as GroupCodes' byte shuffle and
/// conversion do, but no groups are built: no split of the nibbles, no move across the 128-bit
/// halves, no Q4_0 `− 8` or IQ4 byte lookup. Measured against GroupCodes on a 2-core Intel Xeon
/// with AVX-512 (2026-12-05), interleaved: Gemma's head (vocab 262144, 3 rounds) IQ4_NL and
/// IQ4_XS 12–13% less a call at N = 1, 9–11% at N = 2 and 3, 5–10% at N = 8; Q4_K 8%, 6%, 3%
/// and 6% at N = 1, 2, 3 and 8, Q4_0 6%, 3%, 1% and 3%; at N = 16 and 32 within the rounds'
/// spread (4 rounds); with the head in L3 (vocab 32768) 8–16% less at N = 1, 4–13% at N = 2,
/// 3–10% at N = 8, 0–8% at N = 16 and 32 (4 rounds). Q2_K, the same machine and rounds: Gemma's
/// head 8%, 10%, 8%, 5% and 1% less at N = 1, 2, 3, 8 and 32; vocab 32768 10%, 9%, 8% and 1% at
/// N = 1, 2, 8 and 32.
fn NibbleCodes(comptime t: Type) type {
    const Block = formats.Block(t);
    const qs = @offsetOf(Block, "qs");
    return struct {
        chunk: *const [chunkBytes(t)]u8,

        const Codes = @This();
        const unit = 1.0;
        const Gathered = [2]@Vector(16, u32);
        const table: @Vector(16, f32) = blk: {
            var v: [16]f32 = undefined;
            for (&v, 0..) |*e, q| e.* = switch (t) {
                .q4_0 => @floatFromInt(@as(i32, @intCast(q)) - 8),
                .q4_k => @floatFromInt(q),
                .q2_k => @floatFromInt(q % 4),
                .iq4_nl, .iq4_xs => @floatFromInt(iq4_values[q]),
                else => unreachable,
            };
            break :blk v;
        };

        /// Lane l's code of step i: bits bit(l).. of byte at(l) + i of the chunk.
        fn at(l: usize) usize {
            return switch (t) {
                // Lanes 4b..4b+3 hold block b's 32 values: low nibbles of its first and last
                // 8 bytes, then high ones.
                .q4_0, .iq4_nl => @sizeOf(Block) * (l / 4) + qs + 8 * (l % 2),
                // Lanes 8j..8j+7 hold 64 values: low nibbles of 32 bytes, then high ones.
                .q4_k => qs + 32 * (l / 8) + 8 * (l % 4),
                // Lanes 4j..4j+3 hold sub-block j's 32 values, as Q4_0's a block's.
                .iq4_xs => qs + 16 * (l / 4) + 8 * (l % 2),
                // Lanes 16j..16j+15 hold 128 values: bits 0-1 of 32 bytes, then 2-3, 4-5, 6-7.
                .q2_k => qs + 32 * (l / 16) + 8 * (l % 4),
                else => unreachable,
            };
        }
        fn bit(l: usize) u5 {
            return switch (t) {
                .q4_0, .iq4_nl, .iq4_xs => 4 * ((l / 2) % 2),
                .q4_k => 4 * ((l / 4) % 2),
                .q2_k => 2 * ((l / 4) % 4),
                else => unreachable,
            };
        }

        /// Lanes 16k..16k+15: word j of gathered[s] holds lane 16k+j's code bytes 4s..4s+3,
        /// from two loads of 64 bytes inside the chunk: from the first lane's bytes on and
        /// from the fifth's (the next block's, for Q4_0's and IQ4_NL's blocks of 18 bytes), so
        /// that each lane's 4 bytes are a word of one of them and a dword permute picks them.
        /// Against a word permute from loads 64 bytes apart (Q4_0 and IQ4_NL; the other
        /// types' bytes are words of one load either way), on a 2-core Intel Xeon, 2026-12-05,
        /// interleaved: Gemma's head (3 rounds) 5–9% less a call at N = 1, 2 and 8; vocab
        /// 32768 (6 rounds) Q4_0 6% at N = 1 and 2, level at N = 8, IQ4_NL 9%, 10% and 3%.
        inline fn gather(codes: Codes, comptime k: usize) Gathered {
            const last = comptime chunkBytes(t) - 64;
            const first: usize = comptime @min(at(16 * k), last);
            const second: usize = comptime @min(at(16 * k + 4), last);
            const a = load(u8, 64, codes.chunk[first..]);
            const b = load(u8, 64, codes.chunk[second..]);
            var out: Gathered = undefined;
            inline for (0..2) |s| {
                comptime var m: [64]i32 = undefined;
                inline for (0..16) |j| {
                    const p = comptime at(16 * k + j) + 4 * s;
                    const in_a = comptime p >= first and p + 4 <= first + 64 and (p - first) % 4 == 0;
                    const in_b = comptime p >= second and p + 4 <= second + 64 and (p - second) % 4 == 0;
                    comptime std.debug.assert(in_a or in_b);
                    inline for (0..4) |e| m[4 * j + e] = if (in_a) p - first + e else ~@as(i32, p - second + e);
                }
                out[s] = @bitCast(@shuffle(u8, a, b, m));
            }
            return out;
        }

        inline fn step(words: Gathered, comptime k: usize, comptime i: usize) @Vector(16, f32) {
            comptime var shift: [16]u5 = undefined;
            inline for (0..16) |j| shift[j] = 8 * (i % 4) + comptime bit(16 * k + j);
            const idx = words[i / 4] >> @as(@Vector(16, u5), shift);
            return asm (
                \\ vpermps %[table], %[idx], %[out]
                : [out] "=v" (-> @Vector(16, f32)),
                : [table] "v" (table),
                  [idx] "v" (idx),
            );
        }
    };
}

/// Groups of lanes whose steps a decoder interleaves (emit's conversions of code_lanes lanes,
/// the dense decoders' groups of 8): a sink may ask for 2 or 4 (`groups_together`; emit takes
/// as many as the chunk holds), so that the fmas it chains per lane come from that many
/// groups in turn.
fn groupsOfSink(comptime Sink: type) usize {
    const together = if (@hasDecl(Sink, "groups_together")) Sink.groups_together else 1;
    comptime std.debug.assert(together == 1 or together == 2 or together == 4);
    return together;
}

/// `groups` natural-order groups' codes (group k's lane l has its 8 codes at bytes
/// 64k + 8l..+7) as two vectors of 8·groups words: word 8k + l of quads[h] holds that lane's
/// codes 4h..4h+3. Only this step crosses the vector's 128-bit halves (with AVX2 a `vshufps`
/// and a `vpermpd` per vector, in the disassembly).
inline fn laneQuads(comptime groups: usize, x: @Vector(64 * groups, u8)) [2]@Vector(32 * groups, u8) {
    comptime var m: [2][32 * groups]i32 = undefined;
    inline for (0..2) |h| inline for (0..8 * groups) |w| inline for (0..4) |b| {
        m[h][4 * w + b] = 8 * w + 4 * h + b;
    };
    return .{ @shuffle(u8, x, undefined, m[0]), @shuffle(u8, x, undefined, m[1]) };
}

/// Code i of each word in the word's top byte, the rest zero: q·2^24 as an i32 for a signed
/// code q, and for an unsigned one too (every format's unsigned codes are below 128). One
/// in-half byte shuffle a step.
inline fn codeHigh(comptime words: usize, quad: @Vector(4 * words, u8), comptime i: usize) @Vector(words, i32) {
    comptime var m: [4 * words]i32 = undefined;
    inline for (0..words) |w| inline for (0..4) |b| {
        m[4 * w + b] = if (b == 3) 4 * w + i else ~@as(i32, 0);
    };
    return @bitCast(@shuffle(u8, quad, @as(@Vector(4 * words, u8), @splat(0)), m));
}

/// v as it is, through an empty asm with side effects, which LLVM keeps in order with the
/// loads around it: what is computed from the result is computed after the loads before it.
/// (Only on x86-64 with AVX, whose registers hold 8 floats; elsewhere v as it is.)
inline fn inOrder(comptime n: usize, v: @Vector(n, f32)) @Vector(n, f32) {
    if (comptime builtin.cpu.arch != .x86_64 or !std.Target.x86.featureSetHas(builtin.cpu.features, .avx)) return v;
    if (n == 8) return asm volatile (""
        : [out] "=x" (-> @Vector(8, f32)),
        : [in] "0" (v),
    );
    return concat(f32, 8, inOrder(8, part(f32, 8, v, 0)), inOrder(8, part(f32, 8, v, 1)));
}

/// Elements [n·i, n·i + n) of v.
inline fn part(comptime E: type, comptime n: usize, v: anytype, comptime i: usize) @Vector(n, E) {
    comptime var m: [n]i32 = undefined;
    inline for (0..n) |j| m[j] = n * i + j;
    return @shuffle(E, v, undefined, m);
}

/// Whether lookupIq4 takes x86's in-half byte shuffle (`vpshufb`, 16 entries in each
/// 128-bit half) rather than a select tree of 15 blends per vector. Zig's @shuffle takes
/// comptime indices only, hence the asm. Measured on a 2-core AMD EPYC (Zen 1), vocab 32768
/// × hidden 2816, A-B-A-B, three times: IQ4_NL and IQ4_XS 55–57% less a call at N = 1
/// (IQ4_NL 27.8 → 12.0 ms), 43–52% at N = 2, 25–33% at N = 8, 12–13% at N = 32; Q4_0, the
/// same decoder but the lookup, unchanged. With AVX-512 these types take NibbleCodes'
/// float lookup instead.
const iq4_by_shuffle = builtin.cpu.arch == .x86_64 and std.Target.x86.featureSetHas(builtin.cpu.features, .avx2);

/// 16-entry lookup (IQ4 codebook) of nibbles: each index byte (below 16) replaced by its
/// entry's bits.
inline fn lookupIq4(idx: @Vector(64, u8)) @Vector(64, u8) {
    const B = @Vector(64, u8);
    if (iq4_by_shuffle) {
        const table: @Vector(32, u8) = comptime blk: {
            var entries: [32]u8 = undefined;
            for (&entries, 0..) |*e, i| e.* = @bitCast(iq4_values[i % 16]);
            break :blk entries;
        };
        var parts: [2]@Vector(32, u8) = undefined;
        inline for (0..2) |h| {
            parts[h] = asm (
                \\ vpshufb %[idx], %[table], %[out]
                : [out] "=v" (-> @Vector(32, u8)),
                : [table] "v" (table),
                  [idx] "v" (part(u8, 32, idx, h)),
            );
        }
        return concat(u8, 32, parts[0], parts[1]);
    }
    const bit = struct {
        inline fn f(x: B, comptime b: u3) @Vector(64, bool) {
            return (x & @as(B, @splat(@as(u8, 1) << b))) != @as(B, @splat(0));
        }
    }.f;
    var level: [16]B = undefined;
    inline for (0..16) |j| level[j] = @splat(@bitCast(iq4_values[j]));
    inline for (0..4) |b| {
        const m = bit(idx, b);
        inline for (0..(16 >> (b + 1))) |j| level[j] = @select(u8, m, level[2 * j + 1], level[2 * j]);
    }
    return level[0];
}

inline fn splat64(x: u8) @Vector(64, u8) {
    return @splat(x);
}

/// Natural-order 64 nibbles of two 16-byte nibble blocks a, b: [lo(a), hi(a), lo(b), hi(b)].
inline fn nibblePairs(a: @Vector(16, u8), b: @Vector(16, u8)) @Vector(64, u8) {
    const x = concat(u8, 16, a, b);
    const lo = x & @as(@Vector(32, u8), @splat(0xf));
    const hi = x >> @splat(4);
    comptime var m: [64]i32 = undefined;
    inline for (0..2) |blk| inline for (0..16) |j| {
        m[32 * blk + j] = 16 * blk + j;
        m[32 * blk + 16 + j] = ~@as(i32, 16 * blk + j);
    };
    return @shuffle(u8, lo, hi, m);
}

/// Q5_0/Q5_1 high bits of two blocks: 16 where bit e of the block's qh is set, else 0, for the 64
/// elements of the pair (qh8 = the two blocks' qh words as 8 bytes).
inline fn highBitsPair(qh8: @Vector(8, u8)) @Vector(64, u8) {
    comptime var sel: [64]i32 = undefined;
    comptime var bitm: [64]u8 = undefined;
    inline for (0..64) |e| {
        sel[e] = e / 8;
        bitm[e] = @as(u8, 1) << @intCast(e % 8);
    }
    const spread = @shuffle(u8, qh8, undefined, sel);
    const set = (spread & @as(@Vector(64, u8), bitm)) != splat64(0);
    return @select(u8, set, splat64(16), splat64(0));
}

/// Decodes one full chunk (chunkBytes(t) bytes, natural layout) into lane-major order.
inline fn decodeFullChunk(comptime t: Type, src: *const [chunkBytes(t)]u8, sink: anytype) void {
    const Blocks = [lanes.chunk_values / of(t).block_values]formats.Block(t);
    const bs: *const Blocks = @ptrCast(src);
    switch (t) {
        .f32, .f16, .bf16 => decodeDenseChunk(t, src, sink),
        .q8_0 => chunkQ8_0(bs, sink),
        .q4_0, .iq4_nl => chunkNibbles(t, bs, sink),
        .q5_0, .q5_1 => chunkQ5(t, bs, sink),
        .q2_k => chunkQ2K(&bs[0], sink),
        .q3_k => chunkQ3K(&bs[0], sink),
        .q4_k, .q5_k => chunkQ45K(t, &bs[0], sink),
        .q6_k => chunkQ6K(&bs[0], sink),
        .iq4_xs => chunkIQ4XS(&bs[0], sink),
    }
}

const B64 = @Vector(64, u8);

/// f16 fields `name` of 8 consecutive blocks, converted exactly. Loaded straight into the
/// vector's words (a `vpinsrw` each): read into an array first, they took 30 more
/// instructions a chunk, LLVM building the vector from byte unpacks. On a 2-core Zen 4, vocab
/// 32768, 8 interleaved rounds, with AVX-512: Q5_1 11% less a call at N = 8, Q5_0 7%, Q8_0
/// 5%, IQ4_NL 3%, Q4_0 1%, 1-5% at N = 4 and 2-4% at 32, within 3% either way at N = 1 (as
/// much as the unchanged F16 and Q6_K moved); with AVX2 (x86_64_v3) 3-6% less at N = 8.
/// Picked by one word permute (`vpermt2w`) from the blocks' bytes loaded whole instead: on a
/// 2-core Intel Xeon with AVX-512, vocab 32768, 3 interleaved rounds (2026-12-05), Q4_0 3-5%
/// less a call at N = 1 and 2, but Q8_0 4-6% more, Q5_1 up to 3% more, IQ4_NL and Q5_0 within
/// 2% at N = 1 and 2: not kept.
inline fn halves8(comptime B: type, bs: *const [8]B, comptime name: []const u8) @Vector(8, f32) {
    var h: @Vector(8, u16) = undefined;
    inline for (0..8) |j| h[j] = std.mem.littleToNative(u16, @as(*align(1) const u16, @ptrCast(&@field(bs[j], name))).*);
    return f16Vec(8, h);
}

/// Branch-free exact f16 → f32 of one f16 field (same bits as f16ToF32).
inline fn halfField(field: [2]u8) f32 {
    const v: @Vector(2, u16) = .{ std.mem.readInt(u16, &field, .little), 0 };
    return f16Vec(2, v)[0];
}

inline fn chunkQ8_0(bs: *const [8]formats.blocks.Q8_0, sink: anytype) void {
    var g: [4]B64 = undefined;
    inline for (0..4) |k| g[k] = concat(u8, 32, bs[2 * k].qs, bs[2 * k + 1].qs);
    emit(i8, g, 8, halves8(formats.blocks.Q8_0, bs, "d"), .none, @splat(0), sink);
}

/// Q4_0 (q − 8) and IQ4_NL (K[q]): two blocks' nibbles form each 64-value group.
inline fn chunkNibbles(comptime t: Type, bs: *const [8]formats.Block(t), sink: anytype) void {
    const d = halves8(formats.Block(t), bs, "d");
    if (nibbles_by_permute) return emitSteps(NibbleCodes(t){ .chunk = @ptrCast(bs) }, 8, d, .none, @splat(0), sink);
    var g: [4]B64 = undefined;
    inline for (0..4) |k| {
        const nib = nibblePairs(bs[2 * k].qs, bs[2 * k + 1].qs);
        g[k] = if (t == .q4_0) nib -% splat64(8) else lookupIq4(nib);
    }
    emit(i8, g, 8, d, .none, @splat(0), sink);
}

inline fn chunkQ5(comptime t: Type, bs: *const [8]formats.Block(t), sink: anytype) void {
    var g: [4]B64 = undefined;
    inline for (0..4) |k| {
        const nib = nibblePairs(bs[2 * k].qs, bs[2 * k + 1].qs);
        const q = nib | highBitsPair(concat(u8, 4, bs[2 * k].qh, bs[2 * k + 1].qh));
        g[k] = if (t == .q5_0) q -% splat64(16) else q;
    }
    const d = halves8(formats.Block(t), bs, "d");
    if (t == .q5_0) {
        emit(i8, g, 8, d, .none, @splat(0), sink);
    } else {
        emit(u8, g, 8, d, .add, halves8(formats.Block(t), bs, "m"), sink);
    }
}

inline fn chunkQ2K(b: *const formats.blocks.Q2_K, sink: anytype) void {
    const sc: @Vector(16, u8) = b.scales;
    const dl = @as(@Vector(16, f32), @splat(halfField(b.d))) * @as(@Vector(16, f32), @floatFromInt(sc & @as(@Vector(16, u8), @splat(0xf))));
    const ml = @as(@Vector(16, f32), @splat(halfField(b.dmin))) * @as(@Vector(16, f32), @floatFromInt(sc >> @splat(4)));
    if (nibbles_by_permute) return emitSteps(NibbleCodes(.q2_k){ .chunk = @ptrCast(b) }, 16, dl, .sub, ml, sink);
    var g: [4]B64 = undefined;
    inline for (0..4) |k| {
        const qs: @Vector(32, u8) = b.qs[32 * (k / 2) ..][0..32].*;
        const s0: u3 = 4 * (k % 2);
        g[k] = concat(u8, 32, qs >> @splat(s0), qs >> @splat(s0 + 2)) & splat64(3);
    }
    emit(u8, g, 16, dl, .sub, ml, sink);
}

inline fn chunkQ3K(b: *const formats.blocks.Q3_K, sink: anytype) void {
    // 16 six-bit scales: low nibble from byte j%8 (low half for j<8), 2 high bits from byte 8+j%4.
    const packed_scales: @Vector(12, u8) = b.scales;
    comptime var lm: [16]i32 = undefined;
    comptime var hm: [16]i32 = undefined;
    comptime var hs: [16]u8 = undefined;
    comptime var lsh: [16]u8 = undefined;
    inline for (0..16) |j| {
        lm[j] = j % 8;
        lsh[j] = if (j < 8) 0 else 4;
        hm[j] = 8 + j % 4;
        hs[j] = 2 * (j / 4);
    }
    const V16 = @Vector(16, u8);
    const lo = (@shuffle(u8, packed_scales, undefined, lm) >> @as(V16, lsh)) & @as(V16, @splat(0xf));
    const hi = (@shuffle(u8, packed_scales, undefined, hm) >> @as(V16, hs)) & @as(V16, @splat(3));
    const s6: @Vector(16, i32) = lo | (hi << @splat(4));
    const dl = @as(@Vector(16, f32), @splat(halfField(b.d))) * @as(@Vector(16, f32), @floatFromInt(s6 - @as(@Vector(16, i32), @splat(32))));
    const hmask: @Vector(32, u8) = b.hmask;
    var g: [4]B64 = undefined;
    inline for (0..4) |k| {
        const qs: @Vector(32, u8) = b.qs[32 * (k / 2) ..][0..32].*;
        const s0: u3 = 4 * (k % 2);
        const q2 = concat(u8, 32, qs >> @splat(s0), qs >> @splat(s0 + 2)) & splat64(3);
        const hb = concat(u8, 32, hmask >> @splat(2 * k), hmask >> @splat(2 * k + 1)) & splat64(1);
        g[k] = (q2 | (hb << @splat(2))) -% splat64(4);
    }
    emit(i8, g, 16, dl, .none, @splat(0), sink);
}

inline fn chunkQ45K(comptime t: Type, b: *const formats.Block(t), sink: anytype) void {
    const packed_scales: @Vector(12, u8) = b.scales;
    const V8 = @Vector(8, u8);
    const first: @Vector(8, bool) = .{ true, true, true, true, false, false, false, false };
    const p = @shuffle(u8, packed_scales, undefined, [8]i32{ 0, 1, 2, 3, 0, 1, 2, 3 }); // byte j%4
    const r = @shuffle(u8, packed_scales, undefined, [8]i32{ 4, 5, 6, 7, 4, 5, 6, 7 }); // byte 4+j%4
    const q = @shuffle(u8, packed_scales, undefined, [8]i32{ 8, 9, 10, 11, 8, 9, 10, 11 }); // byte 8+j%4
    const m63: V8 = @splat(63);
    const m15: V8 = @splat(15);
    const sc = @select(u8, first, p & m63, (q & m15) | ((p >> @splat(6)) << @splat(4)));
    const mn = @select(u8, first, r & m63, (q >> @splat(4)) | ((r >> @splat(6)) << @splat(4)));
    const d1 = @as(@Vector(8, f32), @splat(halfField(b.d))) * @as(@Vector(8, f32), @floatFromInt(sc));
    const m1 = @as(@Vector(8, f32), @splat(halfField(b.dmin))) * @as(@Vector(8, f32), @floatFromInt(mn));
    if (t == .q4_k and nibbles_by_permute) return emitSteps(NibbleCodes(t){ .chunk = @ptrCast(b) }, 8, d1, .sub, m1, sink);
    var g: [4]B64 = undefined;
    inline for (0..4) |k| {
        const qs: @Vector(32, u8) = b.qs[32 * k ..][0..32].*;
        g[k] = concat(u8, 32, qs & @as(@Vector(32, u8), @splat(0xf)), qs >> @splat(4));
        if (t == .q5_k) {
            const qh: @Vector(32, u8) = b.qh;
            const hb = concat(u8, 32, qh >> @splat(2 * k), qh >> @splat(2 * k + 1)) & splat64(1);
            g[k] |= hb << @splat(4);
        }
    }
    emit(u8, g, 8, d1, .sub, m1, sink);
}

inline fn chunkQ6K(b: *const formats.blocks.Q6_K, sink: anytype) void {
    const sc: @Vector(16, i8) = @bitCast(b.scales);
    const dl = @as(@Vector(16, f32), @splat(halfField(b.d))) * @as(@Vector(16, f32), @floatFromInt(sc));
    var g: [4]B64 = undefined;
    inline for (0..4) |k| {
        const n = k / 2;
        const s0: u3 = 4 * (k % 2);
        const ql: B64 = b.ql[64 * n ..][0..64].*;
        const qh: @Vector(32, u8) = b.qh[32 * n ..][0..32].*;
        // The high bits shifted straight to bits 4-5, so that both masks and the or are one
        // bitwise select (a vpternlog with AVX-512): 6 fewer vector operations a chunk. On a
        // 2-core Zen 4, interleaved: 3-7% less a call at N = 1 and 4-8% at N = 2 with the head
        // in L3 (vocab 4096, 6 rounds), 3-13% and 3-12% at vocab 32768 (5 rounds), 3-6% at
        // N = 1 for Gemma's head (4 rounds); N = 8 and 32 level. The same for Q3_K's and
        // Q5_K's high bits was not kept: Q3_K 8% less at N = 1 in L3 but level there and 3%
        // more at N = 2 at vocab 32768, Q5_K within 3% (5-6 rounds).
        const hi = if (s0 == 0) concat(u8, 32, qh << @splat(4), qh << @splat(2)) else concat(u8, 32, qh, qh >> @splat(2));
        g[k] = (((ql >> @splat(s0)) & splat64(0xf)) | (hi & splat64(0x30))) -% splat64(32);
    }
    emit(i8, g, 16, dl, .none, @splat(0), sink);
}

inline fn chunkIQ4XS(b: *const formats.blocks.IQ4_XS, sink: anytype) void {
    const sh = std.mem.readInt(u16, &b.scales_h, .little);
    const sl: @Vector(4, u8) = b.scales_l;
    const V8 = @Vector(8, u8);
    const lo = (@shuffle(u8, sl, undefined, [8]i32{ 0, 0, 1, 1, 2, 2, 3, 3 }) >> V8{ 0, 4, 0, 4, 0, 4, 0, 4 }) & @as(V8, @splat(0xf));
    const hi = (@as(@Vector(8, u16), @splat(sh)) >> @Vector(8, u16){ 0, 2, 4, 6, 8, 10, 12, 14 }) & @as(@Vector(8, u16), @splat(3));
    const ls: @Vector(8, i32) = @as(@Vector(8, i32), lo) | (@as(@Vector(8, i32), @intCast(hi)) << @splat(4));
    const dl = @as(@Vector(8, f32), @splat(halfField(b.d))) * @as(@Vector(8, f32), @floatFromInt(ls - @as(@Vector(8, i32), @splat(32))));
    if (nibbles_by_permute) return emitSteps(NibbleCodes(.iq4_xs){ .chunk = @ptrCast(b) }, 8, dl, .none, @splat(0), sink);
    var g: [4]B64 = undefined;
    inline for (0..4) |k| g[k] = lookupIq4(nibblePairs(b.qs[32 * k ..][0..16].*, b.qs[32 * k + 16 ..][0..16].*));
    emit(i8, g, 8, dl, .none, @splat(0), sink);
}

/// Dense chunk (F32/F16/BF16): transpose the 16/32-bit patterns per 64-element group, then convert
/// 16 at a time (two steps of the group's 8 lanes). F32 and BF16 weights leave past their flush
/// point (NUMERICS.md §7), BF16's flushed as 16-bit patterns before they are moved: in the tiles
/// (N ≥ 8) a separate pass over each decoded chunk had flushed them, with a load and a store a
/// vector.
inline fn decodeDenseChunk(comptime t: Type, src: *const [chunkBytes(t)]u8, sink: anytype) void {
    const E = if (t == .f32) u32 else u16;
    if (builtin.cpu.arch == .x86_64 and !has_avx512 and E == u16) return decodeHalvesByUnpacks(t, src, sink);
    if (t == .bf16 and has_avx512) return decodeBf16ByPermutes(src, sink);
    const together = comptime groupsOfSink(@TypeOf(sink));
    inline for (0..4 / together) |g| {
        var tr: [together]@Vector(64, E) = undefined;
        inline for (0..together) |h| {
            const k = together * g + h;
            tr[h] = @shuffle(E, bf16PastFlushPoint(t, 64, load(E, 64, src[64 * @sizeOf(E) * k ..])), undefined, transpose8x8);
        }
        inline for (0..4) |p| {
            comptime var m: [16]i32 = undefined;
            inline for (0..16) |j| m[j] = 16 * p + j;
            var v: [together]@Vector(16, f32) = undefined;
            inline for (0..together) |h| {
                const x: @Vector(16, E) = @shuffle(E, tr[h], undefined, m);
                v[h] = switch (t) {
                    .f32 => flush.flush(@Vector(16, f32), @bitCast(x), flush.dot_operand_min),
                    .f16 => f16Vec(16, x),
                    .bf16 => @bitCast(@as(@Vector(16, u32), x) << @splat(16)),
                    else => unreachable,
                };
            }
            inline for (0..2) |half| inline for (0..together) |h| {
                sink.put(32 * (2 * p + half) + 8 * (together * g + h), 8, part(f32, 8, v[h], half));
            };
        }
    }
}

/// BF16 with AVX-512: each 16 values of a step come out of one word permute of their group's
/// 64 (two registers) into the high word of each f32, the low one cleared by an and: two
/// instructions where the general path takes a share of a transpose, an extraction, a zero
/// extension and a shift (LLVM keeps the and rather than zero-masking the permute). Measured
/// on a 2-core Zen 4, interleaved: with the head in L3 (vocab 4096, 6 rounds) 14% less a call
/// at N = 1, 11% at N = 2, 3% at N = 8; from memory (vocab 32768 and 262144, 4 to 6 rounds),
/// where the call waits on the reads, within the machine's noise (0.91–1.04 of before at
/// N = 1 to 32).
inline fn decodeBf16ByPermutes(src: *const [chunkBytes(.bf16)]u8, sink: anytype) void {
    const W = @Vector(64, u16);
    inline for (0..4) |k| {
        const x = flush.flushBf16(64, load(u16, 64, src[128 * k ..]), flush.dot_operand_min);
        inline for (0..4) |p| {
            comptime var m: [32]i32 = undefined;
            inline for (0..16) |j| {
                m[2 * j] = ~@as(i32, 0);
                m[2 * j + 1] = transpose8x8[16 * p + j];
            }
            const v: @Vector(16, f32) = @bitCast(@shuffle(u16, x, @as(W, @splat(0)), m));
            inline for (0..2) |half| sink.put(32 * (2 * p + half) + 8 * k, 8, part(f32, 8, v, half));
        }
    }
}

/// decodeDenseChunk for 16-bit values without AVX-512: two groups of lanes at a time, one in
/// each 128-bit half of the vectors, transposed by in-half unpacks (3 stages of 8) rather
/// than by the general shuffles LLVM builds for an 8 × 8 transpose on AVX2 (on a Zen 3 F16's
/// loop at N = 1 held 144 of them a chunk). Step i of the two groups comes out as one vector:
/// for F16 group k's lanes in its low half and group k + 1's in its high half, converted a
/// half at a time; for BF16 lanes 0-3 of both groups in the low half and lanes 4-7 in the high
/// one, so that one unpack with zero words, which keeps the halves apart, puts a group's 8
/// values in the top halves of 8 words: the f32s. Against widening a half at a time (a zero
/// extension and a shift), BF16 took 13-16% less a call at N = 1 to 8 and 6% at N = 32 on a
/// 2-core Zen 3, vocab 32768 (medians of 6 interleaved rounds).
inline fn decodeHalvesByUnpacks(comptime t: Type, src: *const [chunkBytes(t)]u8, sink: anytype) void {
    const H = @Vector(16, u16);
    inline for (0..2) |pair| {
        const k = 2 * pair;
        // rows[r]: the 8 values that row r of each half's transpose holds (above): the first
        // value of (group, lane) is value 64·group + 8·lane of the chunk.
        var rows: [8]H = undefined;
        inline for (0..8) |r| {
            const lo: usize, const hi: usize = if (t == .bf16)
                .{ 64 * (k + r / 4) + 8 * (r % 4), 64 * (k + r / 4) + 8 * (r % 4 + 4) }
            else
                .{ 64 * k + 8 * r, 64 * (k + 1) + 8 * r };
            rows[r] = bf16PastFlushPoint(t, 16, concat(u16, 8, load(u16, 8, src[2 * lo ..]), load(u16, 8, src[2 * hi ..])));
        }
        var t1: [8]H = undefined;
        inline for (0..4) |j| {
            t1[2 * j] = unpackHalves(rows[2 * j], rows[2 * j + 1], 1, false);
            t1[2 * j + 1] = unpackHalves(rows[2 * j], rows[2 * j + 1], 1, true);
        }
        // t1[2j]: rows 2j, 2j+1 interleaved, values 0-3; t1[2j+1]: values 4-7.
        var t2: [8]H = undefined;
        inline for (0..2) |q| inline for (0..2) |v| {
            // Rows 4q..4q+3: values 4v..4v+1 (lo) and 4v+2..4v+3 (hi), four rows each.
            t2[4 * q + 2 * v] = unpackHalves(t1[4 * q + v], t1[4 * q + 2 + v], 2, false);
            t2[4 * q + 2 * v + 1] = unpackHalves(t1[4 * q + v], t1[4 * q + 2 + v], 2, true);
        };
        inline for (0..8) |i| {
            // Value i of rows 0-3 is in t2[i / 2] and of rows 4-7 in t2[4 + i / 2].
            const step = unpackHalves(t2[i / 2], t2[4 + i / 2], 4, i % 2 == 1);
            inline for (0..2) |h| {
                const v: @Vector(8, f32) = switch (t) {
                    .f16 => f16Vec(8, part(u16, 8, step, h)),
                    .bf16 => @bitCast(unpackHalves(@splat(0), step, 1, h == 1)),
                    else => unreachable,
                };
                sink.put(32 * i + 8 * (k + h), 8, v);
            }
        }
    }
}

/// BF16 patterns past the flush point of their values; other types' as they are.
inline fn bf16PastFlushPoint(comptime t: Type, comptime n: usize, h: anytype) @TypeOf(h) {
    return if (t == .bf16) flush.flushBf16(n, h, flush.dot_operand_min) else h;
}

/// In each 128-bit half of a and b: their low (or high) units of `unit` u16s interleaved, a's
/// first (x86's punpckl/punpckh of words, dwords and qwords).
inline fn unpackHalves(a: @Vector(16, u16), b: @Vector(16, u16), comptime unit: usize, comptime high: bool) @Vector(16, u16) {
    comptime var m: [16]i32 = undefined;
    inline for (0..2) |h| inline for (0..4 / unit) |j| inline for (0..unit) |e| {
        const from = 8 * h + (if (high) 4 else 0) + unit * j + e;
        m[8 * h + 2 * unit * j + e] = from;
        m[8 * h + 2 * unit * j + unit + e] = ~@as(i32, from);
    };
    return @shuffle(u16, a, b, m);
}

/// Where a decoder puts what it decodes: `put(offset, n, v)` takes lane-major values
/// [offset, offset + n) of the chunk. Each lane's values arrive in step order, so a sink
/// may add them into the lane's chain of fmas as they come (kernels.zig).
pub const ChunkArray = struct {
    out: *[256]f32,

    pub inline fn put(sink: ChunkArray, comptime offset: usize, comptime n: usize, v: @Vector(n, f32)) void {
        sink.out[offset..][0..n].* = v;
    }
};

/// Decodes elements [256*chunk, 256*chunk+256) of one weight row (row = the row's bytes; row_values =
/// values in the row) into out in lane-major order: out[32*i + l] = element (256*chunk + 8*l + i), for lane l in
/// 0..32, step i in 0..8. Elements at or past row_values are +0.0. Equals decodeBlock bit for bit,
/// a NaN's payload aside, F32 and BF16 values past their flush point (flush.dot_operand_min).
/// Requires row.len == rowBytes(t, row_values) and 256*chunk < row_values.
pub inline fn chunkLanes(comptime t: Type, row: []const u8, chunk: usize, row_values: usize, out: *[256]f32) void {
    chunkInto(t, row, chunk, row_values, ChunkArray{ .out = out });
}

/// chunkLanes into a sink (see ChunkArray).
pub inline fn chunkInto(comptime t: Type, row: []const u8, chunk: usize, row_values: usize, sink: anytype) void {
    // Inlined into the kernel's loop; its shuffle masks are built at comptime there.
    @setEvalBranchQuota(100_000);
    const f = comptime of(t);
    const cb = comptime chunkBytes(t);
    const start = 256 * chunk;
    std.debug.assert(start < row_values and row_values % f.block_values == 0);
    std.debug.assert(row.len == row_values / f.block_values * f.block_bytes);
    const off = chunk * cb;
    if (start + 256 <= row_values) return decodeFullChunk(t, row[off..][0..cb], sink);
    // Partial last chunk: decode a zero-padded copy, then force the missing elements to +0.0
    // (a zero block can decode to -0.0, e.g. Q4_0 gives 0·(0−8)).
    const valid = row_values - start;
    var buf: [cb]u8 = @splat(0);
    const nbytes = valid / f.block_values * f.block_bytes;
    @memcpy(buf[0..nbytes], row[off..][0..nbytes]);
    var out: [256]f32 = undefined;
    decodeFullChunk(t, &buf, ChunkArray{ .out = &out });
    const lane8: @Vector(32, u32) = comptime blk: {
        var v: [32]u32 = undefined;
        for (0..32) |l| v[l] = 8 * l;
        break :blk v;
    };
    inline for (0..8) |i| {
        const keep = lane8 + @as(@Vector(32, u32), @splat(i)) < @as(@Vector(32, u32), @splat(@intCast(valid)));
        sink.put(32 * i, 32, @select(f32, keep, @as(V32f, out[32 * i ..][0..32].*), @as(V32f, @splat(0))));
    }
}

/// Whether chunkPairs decodes type t: the dense types, whose 16 values of a lane pair are 16
/// contiguous ones of the row.
pub fn hasPairs(t: Type) bool {
    return formats.format(@backingInt(t)).?.block_values == 1;
}

/// Element 2i + m of a lane pair's vector is lane 2j + m's step i: natural value 8m + i of
/// the pair's 16.
const pair_order: [16]i32 = blk: {
    var m: [16]i32 = undefined;
    for (0..16) |e| m[e] = (e % 2) * 8 + e / 2;
    break :blk m;
};

/// Decodes chunk `chunk` of a row by lane pairs: out[j·stride ..][0..16] holds, at element
/// 2i + m, lane 2j + m's value at step i (natural element 256·chunk + 16j + 8m + i), with
/// the arithmetic of chunkLanes; elements at or past row_values are +0.0. For hasPairs(t).
pub inline fn chunkPairs(comptime t: Type, row: []const u8, chunk: usize, row_values: usize, out: [*]f32, stride: usize) void {
    comptime std.debug.assert(hasPairs(t));
    const value_bytes = comptime of(t).block_bytes;
    const start = 256 * chunk;
    std.debug.assert(start < row_values and row.len == row_values * value_bytes);
    for (0..16) |j| {
        const first = start + 16 * j;
        const dst = out[j * stride ..][0..16];
        if (first >= row_values) {
            dst.* = @splat(0);
            continue;
        }
        // A pair past the row's end comes from a zeroed copy of its values.
        var tail: [16 * value_bytes]u8 = @splat(0);
        const bytes = if (first + 16 <= row_values) row[first * value_bytes ..][0 .. 16 * value_bytes] else blk: {
            @memcpy(tail[0 .. (row_values - first) * value_bytes], row[first * value_bytes ..]);
            break :blk &tail;
        };
        const v: @Vector(16, f32) = switch (t) {
            .f32 => flush.flush(@Vector(16, f32), @bitCast(load(u32, 16, bytes)), flush.dot_operand_min),
            .f16 => f16Vec(16, load(u16, 16, bytes)),
            .bf16 => @bitCast(@as(@Vector(16, u32), flush.flushBf16(16, load(u16, 16, bytes), flush.dot_operand_min)) << @splat(16)),
            else => unreachable,
        };
        dst.* = @shuffle(f32, v, undefined, pair_order);
    }
}

/// Simple reference for decodeChunkLanes (natural decode, then transpose); used by the tests.
fn decodeChunkLanesRef(comptime t: Type, row: []const u8, chunk: usize, row_values: usize, out: *[256]f32) void {
    const f = comptime of(t);
    var nat: [256]f32 = @splat(0);
    const start = 256 * chunk;
    const valid = @min(256, row_values - start);
    const nblocks = valid / f.block_values;
    const first = start / f.block_values;
    for (0..nblocks) |b| {
        formats.decodeBlock(t, row[(first + b) * f.block_bytes ..][0..f.block_bytes], nat[b * f.block_values ..][0..f.block_values]);
    }
    if (t == .f32 or t == .bf16) flush.flushSlice(&nat, flush.dot_operand_min);
    for (0..32) |l| for (0..8) |i| {
        out[32 * i + l] = nat[8 * l + i];
    };
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

const testing = std.testing;

test "f16Vec and f16VecInt equal f16ToF32 on all 65536 patterns (f16Vec: any NaN for a NaN)" {
    var h: u32 = 0;
    while (h < 65536) : (h += 64) {
        var v: [64]u16 = undefined;
        for (0..64) |j| v[j] = @intCast(h + j);
        const got: [64]f32 = f16Vec(64, v);
        const got_int: [64]f32 = f16VecInt(64, v);
        for (0..64) |j| {
            const want = f16ToF32(v[j]);
            try formats.expectBits(.f16, "f16VecInt", h + j, @bitCast(want), got_int[j]);
            if (std.math.isNan(want)) {
                try testing.expect(std.math.isNan(got[j]));
            } else {
                try formats.expectBits(.f16, "f16Vec", h + j, @bitCast(want), got[j]);
            }
        }
    }
    // Spot values of the scalar conversion itself (independent of the fixture).
    try testing.expectEqual(@as(u32, 0x7f802000), @as(u32, @bitCast(f16ToF32(0x7c01))));
    try testing.expectEqual(@as(u32, 0x33800000), @as(u32, @bitCast(f16ToF32(0x0001))));
    try testing.expectEqual(@as(u32, 0x80000000), @as(u32, @bitCast(f16ToF32(0x8000))));
    try testing.expectEqual(@as(u32, 0x477fe000), @as(u32, @bitCast(f16ToF32(0x7bff))));
}

/// Random row of `row_values` values of type t (see randomizeRow, .wide scales) in buf.
fn randomRow(comptime t: Type, r: std.Random, row_values: usize, buf: []u8) []u8 {
    const f = comptime of(t);
    const row = buf[0 .. row_values / f.block_values * f.block_bytes];
    formats.randomizeRow(t, r, row, .wide);
    return row;
}

fn checkLanes(comptime t: Type, row: []const u8, row_values: usize) !void {
    const nchunks = (row_values + 255) / 256;
    for (0..nchunks) |c| {
        var want: [256]f32 = undefined;
        var got: [256]f32 = undefined;
        decodeChunkLanesRef(t, row, c, row_values, &want);
        // Elements past row_values must be +0.0.
        for (0..32) |l| for (0..8) |i| {
            if (256 * c + 8 * l + i >= row_values) try testing.expectEqual(@as(u32, 0), @as(u32, @bitCast(want[32 * i + l])));
        };
        @memset(&got, std.math.nan(f32));
        chunkLanes(t, row, c, row_values, &got);
        try expectLanes(t, "chunkLanes", row_values, c, &want, &got);
        if (comptime hasPairs(t)) {
            // The same values by lane pairs: element 2i + m of pair j is lane 2j + m's step i.
            var pairs: [256]f32 = undefined;
            @memset(&pairs, std.math.nan(f32));
            chunkPairs(t, row, c, row_values, &pairs, 16);
            for (0..32) |l| for (0..8) |i| {
                got[32 * i + l] = pairs[16 * (l / 2) + 2 * i + l % 2];
            };
            try expectLanes(t, "chunkPairs", row_values, c, &want, &got);
        }
    }
}

fn expectLanes(comptime t: Type, what: []const u8, row_values: usize, c: usize, want: *const [256]f32, got: *const [256]f32) !void {
    for (0..256) |p| {
        // A NaN's payload is not part of the contract (NUMERICS.md §1).
        if (std.math.isNan(want[p]) and std.math.isNan(got[p])) continue;
        if (@as(u32, @bitCast(want[p])) != @as(u32, @bitCast(got[p]))) {
            std.debug.print("{s} {s} row_values={d} chunk {d}: out[{d}] (lane {d}, step {d}) expected 0x{x:0>8}, got 0x{x:0>8}\n", .{ @tagName(t), what, row_values, c, p, p % 32, p / 32, @as(u32, @bitCast(want[p])), @as(u32, @bitCast(got[p])) });
            return error.TestExpectedEqual;
        }
    }
}

test "the reference lane decoder is the transpose of decodeRow" {
    var prng = std.Random.DefaultPrng.init(3);
    var buf: [1152 * 2]u8 = undefined;
    const row = randomRow(.q8_0, prng.random(), 1152, &buf);
    var nat: [1152]f32 = undefined;
    try formats.decodeRow(.q8_0, row, &nat);
    var out: [256]f32 = undefined;
    decodeChunkLanesRef(.q8_0, row, 4, 1152, &out);
    for (0..32) |l| for (0..8) |i| {
        const e = 1024 + 8 * l + i;
        const want: u32 = if (e < 1152) @bitCast(nat[e]) else 0;
        try testing.expectEqual(want, @as(u32, @bitCast(out[32 * i + l])));
    };
}

test "chunkLanes (and chunkPairs) equal the transposed decodeBlock output bit for bit" {
    var prng = std.Random.DefaultPrng.init(0x1a2b3c);
    const r = prng.random();
    const buf = try testing.allocator.alloc(u8, 4 * 65536);
    defer testing.allocator.free(buf);
    inline for (formats.all) |f| {
        const t = f.type;
        const ks: []const usize = switch (f.block_values) {
            1 => &.{ 1, 7, 8, 9, 255, 256, 257, 300, 1000, 1152, 2816 },
            32 => &.{ 32, 64, 224, 256, 288, 1152, 2816, 4096 + 96 },
            else => &.{ 256, 512, 2816 },
        };
        for (0..4) |_| for (ks) |row_values| try checkLanes(t, randomRow(t, r, row_values, buf), row_values);
        // Extreme code bytes (all 0x00 / all 0xFF) with random finite scales.
        for ([_]u8{ 0x00, 0xff }) |fill| {
            const row_values: usize = 512;
            const row = randomRow(t, r, row_values, buf);
            if (f.block_values > 1) {
                var b: usize = 0;
                while (b < row.len) : (b += f.block_bytes) {
                    for (0..f.block_bytes) |j| {
                        if (j == f.d_offset or j == f.d_offset + 1) continue;
                        if (f.m_offset) |m| if (j == m or j == m + 1) continue;
                        row[b + j] = fill;
                    }
                }
            }
            try checkLanes(t, row, row_values);
        }
    }
    // Infinite scales (±Inf weights, or NaN where a code is the offset): random rows with
    // some blocks' scale ±Inf, and rows of nothing else (formats.infiniteScaleRow).
    inline for (formats.all) |f| {
        if (f.block_values == 1) continue;
        const row_values: usize = 1024;
        const row = randomRow(f.type, r, row_values, buf);
        var b: usize = 0;
        while (b < row.len) : (b += 3 * f.block_bytes) std.mem.writeInt(u16, row[b + f.d_offset ..][0..2], if (r.boolean()) 0x7C00 else 0xFC00, .little);
        try checkLanes(f.type, row, row_values);
        formats.infiniteScaleRow(f.type, row);
        try checkLanes(f.type, row, row_values);
    }
    // Every f16 pattern as a block's d (subnormal, infinite and NaN scales among them), each
    // once, the blocks' other bytes random (codes, mins, sub-block scales), a row at a time.
    inline for (formats.all) |f| {
        if (f.block_values == 1) continue;
        const row_values: usize = 8192;
        const row_blocks = row_values / f.block_values;
        const row = buf[0 .. row_blocks * f.block_bytes];
        var pattern: u32 = 0;
        while (pattern < 65536) {
            r.bytes(row);
            for (0..row_blocks) |b| {
                std.mem.writeInt(u16, row[b * f.block_bytes + f.d_offset ..][0..2], @intCast(pattern), .little);
                pattern += 1;
            }
            try checkLanes(f.type, row, row_values);
        }
    }
    // Every 16-bit pattern through the dense lane decoders, and through AVX-512's BF16 path on
    // any target, chunk by chunk.
    const row = buf[0 .. 2 * 65536];
    for (0..65536) |h| std.mem.writeInt(u16, row[2 * h ..][0..2], @intCast(h), .little);
    inline for (.{ Type.f16, Type.bf16 }) |t| try checkLanes(t, row, 65536);
    for (0..256) |c| {
        var want: [256]f32 = undefined;
        var got: [256]f32 = undefined;
        decodeChunkLanesRef(.bf16, row, c, 65536, &want);
        decodeBf16ByPermutes(row[512 * c ..][0..512], ChunkArray{ .out = &got });
        try testing.expectEqualSlices(u32, @as(*const [256]u32, @ptrCast(&want)), @as(*const [256]u32, @ptrCast(&got)));
    }
}
