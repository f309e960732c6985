#pragma METAL fp contract(off)
// The GPU kernel bodies, written once for Metal, CUDA and the host emulator, in a small C
// subset that is also valid C++ (CUDA) and Metal Shading Language. A target's prelude
// (metal/prelude.metal, native/backends/cuda/prelude.cuh, native/kernels/host/prelude.h)
// defines the types and the few primitives used here: lmh_u8, lmh_u32, lmh_u64, LMH_FN,
// LMH_GLOBAL (the address space of buffers), LMH_STATIC_ASSERT, LMH_OFFSETOF,
// lmh_as_float, lmh_as_uint, lmh_fma, lmh_abs, lmh_shuffle_xor, lmh_shuffle and the
// loads. Its entry points map the target's thread ids to (simdgroup, simdgroups, lane)
// and call the bodies.
//
// The arithmetic is docs/NUMERICS.md, one statement per rounding; the lint test
// (native/kernels/lint.zig) keeps library math, vendor reductions, division and half
// types out. Every f32 buffer is read as bits: a value reaches arithmetic only after its
// flush point (lmh_flush), so no device's subnormal policy can change a result.
// Lanes communicate only through shuffles, always with all 32 lanes present.

// Tuning: vocab rows per simdgroup, and activation rows per pass sharing each decoded
// weight. Any values give the same bits (each accumulator sees the canonical order).
#ifndef LMH_VOCAB_ROWS_PER_SIMDGROUP
#define LMH_VOCAB_ROWS_PER_SIMDGROUP 4u
#endif
#ifndef LMH_ROWS_PER_PASS
#define LMH_ROWS_PER_PASS 8u
#endif
// Chunks per step of a pass's loop: with 2, a step's second chunk is loaded while the
// first is computed (measured on an H200: a gain at 4 rows per pass, a loss at 1).
#ifndef LMH_CHUNKS_PER_STEP
#define LMH_CHUNKS_PER_STEP 1u
#endif
LMH_STATIC_ASSERT(LMH_CHUNKS_PER_STEP == 1u || LMH_CHUNKS_PER_STEP == 2u, "chunks per step: 1 or 2");
// How a call's rows past its last full pass run (lmh_matvec_rows): 1, in one padded pass, its
// weights read once; 0, in passes of halving sizes, each reading them again. The padded pass
// sits in the same kernel as the full ones and can change how they compile (measured on an
// H200: slower full passes for some types), so a module chooses.
#ifndef LMH_PAD_REST
#define LMH_PAD_REST 1u
#endif
// How a tile of resident rows short of a pass runs (lmh_matvec_resident): 1, as one full pass
// of its rows and copies of its last row, whose logits go nowhere, so every tile's threadgroups
// do the same work and keep side by side over the vocab rows; 0, as lmh_matvec_rows runs it.
// Its own module: compiled in, it made the full passes of every resident type slower
// (measured on an H100, bench/results/cuda-h200.md, call 47).
#ifndef LMH_PAD_RESIDENT
#define LMH_PAD_RESIDENT 0u
#endif
LMH_STATIC_ASSERT(LMH_ROWS_PER_PASS == 1u || LMH_ROWS_PER_PASS == 2u || LMH_ROWS_PER_PASS == 4u || LMH_ROWS_PER_PASS == 8u, "rows per pass: 1, 2, 4 or 8");
// Whether a simdgroup asks for all of its vocab rows' bytes before it reads any, through a
// prelude's LMH_PREFETCH: a hint that changes no value (CUDA: a prefetch into L2), which puts
// weight bytes in flight without registers to hold them.
#ifndef LMH_PREFETCH_ROWS
#define LMH_PREFETCH_ROWS 0u
#endif
// Stages of a simdgroup's ring (0: none), where the quantized types' whole chunks arrive by
// asynchronous copies, LMH_STAGES - 1 chunks ahead of the one decoded: weight bytes in flight
// without registers to hold them, and one 16-byte copy per lane in place of a decoder's many
// small loads. Needs the prelude's staging primitives (CUDA, and the emulator's staged build,
// which checks their use; Metal reads the weights where they are).
#ifndef LMH_STAGES
#define LMH_STAGES 0u
#endif
#if LMH_STAGES > 0
#ifndef LMH_STAGE_COPY16
#error "LMH_STAGES needs the prelude's staging primitives"
#endif
LMH_STATIC_ASSERT(LMH_STAGES >= 2u && LMH_STAGES <= 4u, "stages: 0, or 2 to 4");
#endif
// Stages of a simdgroup's bulk ring (0: none), where a quantized type's vocab rows arrive
// whole, a group of them per stage, LMH_BULK_STAGES - 1 groups ahead of the one computed:
// one lane starts each group's copy (CUDA: cp.async.bulk, done by the SM's tensor memory
// accelerator), the other lanes issue nothing for it, and the decoders read shared memory.
// Used where the ring the host gives holds the stages; otherwise the weights are read where
// they are.
#ifndef LMH_BULK_STAGES
#define LMH_BULK_STAGES 0u
#endif
#if LMH_BULK_STAGES > 0
#ifndef LMH_BULK_COPY
#error "LMH_BULK_STAGES needs the prelude's bulk copies"
#endif
LMH_STATIC_ASSERT(LMH_BULK_STAGES >= 2u && LMH_BULK_STAGES <= 4u, "bulk stages: 0, or 2 to 4");
LMH_STATIC_ASSERT(LMH_STAGES == 0u, "a bulk ring or a ring of chunks, not both");
#endif
// Resident rows (0: none, 1: used where they fit), for kernels of 8 rows per pass: a
// threadgroup copies a pass of activation rows once into its threadgroup memory and its
// simdgroups run their vocab rows against them there, so a pass reads its activations from
// threadgroup memory and only the weights from device memory. Measured on an H200: F16 23-39%
// faster than from its own passes or decoded rows (a threadgroup's vocab rows decoded once
// into its memory, since removed) at N = 8 to 64, Q8_0 2-14%, F32 and BF16 13-50% once their
// weights were loaded a chunk ahead (lmh_matvec_resident_dense); every other type slower. A
// quantized type's chunks may still arrive through a ring of stages (LMH_STAGES): Q8_0 2-8%
// faster with 2. The CUDA backend's tunings say which types take them. They need the
// prelude's threadgroup area: LMH_THREADGROUP_AREA() and its bytes, LMH_THREADGROUP_SHIFT
// (log2 of simdgroups per threadgroup), LMH_THREADGROUP_SYNC() and lmh_store_words4 (CUDA;
// the emulator's resident build, as threadgroups of one simdgroup, with a ring of 2).
#ifndef LMH_RESIDENT
#define LMH_RESIDENT 0u
#endif
LMH_STATIC_ASSERT(LMH_PAD_RESIDENT == 0u || LMH_RESIDENT > 0u, "padded resident tiles need resident rows");
#if LMH_RESIDENT > 0
#ifndef LMH_THREADGROUP_AREA
#error "LMH_RESIDENT needs the prelude's threadgroup area"
#endif
LMH_STATIC_ASSERT(LMH_ROWS_PER_PASS == 8u && LMH_BULK_STAGES == 0u, "resident rows: 8 rows per pass, no bulk ring");
#endif

// The lane layout (1: used for the types lmh_lane_layout names; CUDA's modules take it): the
// matvec reads a copy of the head, made once on the device by lmh_lane_relayout, whose whole
// chunks hold their 8 blocks' code bytes first, block after block, then their 8 scales (the
// same bytes), in rows padded to a multiple of 16 bytes. Their blocks (18, 22 and 34 bytes)
// put a lane's 8 code bytes at 2-byte offsets, so a lane read them as four 2-byte loads; in
// the copy they lie 4-byte aligned, 8-byte aligned but for Q5_0's (lmh_load_lane8), and a
// warp's are 256 or 128 contiguous bytes. Measured on an H100 against the blocks as the file
// has them (bench/results/cuda-h200.md, call 61): Q8_0 6-7% less at every N from 1 to 64, Q4_0
// 3-8%, IQ4_NL 2-7% from N = 2 (level at 1 and 8). Metal's modules read the blocks as the
// file has them (unmeasured there).
#ifndef LMH_LANE_LAYOUT
#define LMH_LANE_LAYOUT 0u
#endif

// ggml type ids (numerics/formats.zig Type).
#define LMH_TYPE_F32 0u
#define LMH_TYPE_F16 1u
#define LMH_TYPE_Q4_0 2u
#define LMH_TYPE_Q5_0 6u
#define LMH_TYPE_Q5_1 7u
#define LMH_TYPE_Q8_0 8u
#define LMH_TYPE_Q2_K 10u
#define LMH_TYPE_Q3_K 11u
#define LMH_TYPE_Q4_K 12u
#define LMH_TYPE_Q5_K 13u
#define LMH_TYPE_Q6_K 14u
#define LMH_TYPE_IQ4_NL 20u
#define LMH_TYPE_IQ4_XS 23u
#define LMH_TYPE_BF16 30u

// Every head type as X(name, type id), for the targets' matvec entry points.
#define LMH_HEAD_TYPES(X)                                                                        \
    X(F32, LMH_TYPE_F32) X(F16, LMH_TYPE_F16) X(Q4_0, LMH_TYPE_Q4_0) X(Q5_0, LMH_TYPE_Q5_0)       \
    X(Q5_1, LMH_TYPE_Q5_1) X(Q8_0, LMH_TYPE_Q8_0) X(Q2_K, LMH_TYPE_Q2_K) X(Q3_K, LMH_TYPE_Q3_K)   \
    X(Q4_K, LMH_TYPE_Q4_K) X(Q5_K, LMH_TYPE_Q5_K) X(Q6_K, LMH_TYPE_Q6_K) X(IQ4_NL, LMH_TYPE_IQ4_NL) \
    X(IQ4_XS, LMH_TYPE_IQ4_XS) X(BF16, LMH_TYPE_BF16)

LMH_FN lmh_u32 lmh_dense(lmh_u32 type) {
    return type == LMH_TYPE_F32 || type == LMH_TYPE_F16 || type == LMH_TYPE_BF16;
}

// Flush thresholds (numerics/flush.zig): 2^-40 for the operands of a dot product, 2^-125
// for every other flushed value.
#define LMH_DOT_OPERAND_MIN 0x2B800000u
#define LMH_VALUE_MIN 0x01000000u
#define LMH_CANONICAL_NAN 0x7FC00000u
#define LMH_POSITIVE_INF 0x7F800000u

// ---------------------------------------------------------------------------------------
// Numerics

// The value with these bits, or +0 where its magnitude is below min_bits: a float compare
// of |v| (a device that flushes a subnormal operand sees 0, below every threshold too, so
// it decides the same) and a select of v's own bits; two instructions on a GPU.
LMH_FN float lmh_flush(lmh_u32 bits, lmh_u32 min_bits) {
    float v = lmh_as_float(bits);
    return lmh_abs(v) < lmh_as_float(min_bits) ? 0.0f : v;
}

// q - offset exactly, for q, offset < 2^23: both sit in the mantissa of 2^23 and the
// subtraction is exact (Sterbenz), so no int-to-float conversion is needed.
LMH_FN float lmh_int(lmh_u32 q, lmh_u32 offset) {
    float a = lmh_as_float(0x4B000000u | q);
    float b = lmh_as_float(0x4B000000u | offset);
    return a - b;
}

// The bits 0x4B000000 | byte i of word (i < 4): the float 2^23 + that byte, as lmh_int
// builds it. A prelude with a byte permute defines LMH_BYTE_FLOAT_BITS to build it in one
// instruction (CUDA's prmt) rather than a shift, a mask and an or.
#ifndef LMH_BYTE_FLOAT_BITS
#define LMH_BYTE_FLOAT_BITS(word, i) (0x4B000000u | (((word) >> ((i) << 3)) & 0xFFu))
#endif

// Exact f16 -> f32 (formats.zig f16ToF32): normals and Inf/NaN by moving the fields,
// subnormals as their integer mantissa times 2^-24, which is normal. NaN payloads kept.
// A prelude with an exact hardware conversion defines LMH_F16_TO_F32 to use it instead
// (CUDA); the GPU check compares its results with the CPU's byte for byte.
#ifdef LMH_F16_TO_F32
LMH_FN float lmh_f16(lmh_u32 h) {
    return LMH_F16_TO_F32(h);
}
#else
LMH_FN float lmh_f16(lmh_u32 h) {
    lmh_u32 sign = (h & 0x8000u) << 16;
    lmh_u32 magnitude = h & 0x7FFFu;
    lmh_u32 normal = (magnitude << 13) + 0x38000000u;
    lmh_u32 special = normal + 0x38000000u;
    float mantissa = lmh_int(magnitude, 0u);
    float subnormal = mantissa * lmh_as_float(0x33800000u);
    lmh_u32 bits = magnitude >= 0x7C00u ? special : (magnitude >= 0x0400u ? normal : lmh_as_uint(subnormal));
    return lmh_as_float(bits | sign);
}
#endif

// NUMERICS.md §3 step 5: partners l^16, l^8, l^4, l^2, l^1; every lane ends with the sum.
LMH_FN float lmh_butterfly(float p) {
    for (lmh_u32 mask = 16u; mask > 0u; mask >>= 1) {
        float partner = lmh_as_float(lmh_shuffle_xor(lmh_as_uint(p), mask));
        p = p + partner;
    }
    return p;
}

// NUMERICS.md §6 rsqrt, steps 1-23 (numerics/math.zig rsqrt).
LMH_FN float lmh_rsqrt(float x) {
    lmh_u32 b = lmh_as_uint(x);
    lmh_u32 sub = b < 0x00800000u;
    float fs = lmh_as_float((b & 0x007FFFFFu) | 0x4B000000u);
    float ns = lmh_fma(fs, lmh_as_float(0x40000000u), lmh_as_float(0xCB800000u));
    lmh_u32 bn = sub ? lmh_as_uint(ns) : b;
    lmh_u32 e = (bn >> 23) - (sub ? 277u : 127u);
    lmh_u32 k = (e >> 1) | (e & 0x80000000u); // arithmetic shift: floor(e / 2)
    lmh_u32 mb = ((bn & 0x007FFFFFu) | 0x3F800000u) + ((e & 1u) << 23);
    float m = lmh_as_float(mb);
    float sc = lmh_as_float((127u - k) << 23);
    float y0 = lmh_as_float(0x5F1FFFF9u - (mb >> 1));
    float h0 = m * y0;
    float t0 = lmh_fma(-h0, y0, lmh_as_float(0x4018E962u));
    float y0k = y0 * lmh_as_float(0x3F343637u);
    float y1 = y0k * t0;
    float h = m * y1;
    float hl = lmh_fma(m, y1, -h);
    float d0 = lmh_fma(-h, y1, lmh_as_float(0x3F800000u));
    float d = lmh_fma(-hl, y1, d0);
    float c0 = lmh_fma(d, lmh_as_float(0x3EA00000u), lmh_as_float(0x3EC00000u));
    float c1 = lmh_fma(d, c0, lmh_as_float(0x3F000000u));
    float c = d * c1;
    float yr = lmh_fma(y1, c, y1);
    float scaled = yr * sc;
    lmh_u32 r = lmh_as_uint(scaled);
    r = b > LMH_POSITIVE_INF ? LMH_CANONICAL_NAN : r;
    r = b == LMH_POSITIVE_INF ? 0u : r;
    r = b == 0u ? LMH_POSITIVE_INF : r;
    r = b == 0x80000000u ? 0xFF800000u : r;
    return lmh_as_float(r);
}

// tanh(a) for a = |x| < 0.5625: a + a·(z·P(z)), z = a² (steps 4-11).
LMH_FN float lmh_tanh_polynomial(float a) {
    float z = a * a;
    float p = lmh_fma(lmh_as_float(0x3B1A3ECBu), z, lmh_as_float(0xBC09465Cu));
    p = lmh_fma(p, z, lmh_as_float(0x3CB25AF8u));
    p = lmh_fma(p, z, lmh_as_float(0xBD5D0333u));
    p = lmh_fma(p, z, lmh_as_float(0x3E088868u));
    p = lmh_fma(p, z, lmh_as_float(0xBEAAAAAAu));
    float zp = z * p;
    return lmh_fma(a, zp, a);
}

typedef struct { float hi; float lo; } lmh_f2;

// expm1(2a) as hi + lo (steps 12-37).
LMH_FN lmh_f2 lmh_tanh_expm1(float a) {
    float y = a + a;
    float t = lmh_fma(y, lmh_as_float(0x3FB8AA3Bu), lmh_as_float(0x4B400000u));
    float kf = t - lmh_as_float(0x4B400000u);
    lmh_u32 ki = lmh_as_uint(t) - 0x4B400000u;
    float rh = lmh_fma(kf, lmh_as_float(0xBF317218u), y);
    float rl = kf * lmh_as_float(0x3102E308u);
    float s = lmh_as_float((ki + 127u) << 23);
    float hs = s * lmh_as_float(0x3F000000u);
    float r2 = rh * rh;
    float r2l = lmh_fma(rh, rh, -r2);
    float q = lmh_fma(lmh_as_float(0x3950CE2Fu), rh, lmh_as_float(0x3AB6A78Au));
    q = lmh_fma(q, rh, lmh_as_float(0x3C08884Au));
    q = lmh_fma(q, rh, lmh_as_float(0x3D2AAA73u));
    q = lmh_fma(q, rh, lmh_as_float(0x3E2AAAABu));
    float r3 = r2 * rh;
    float hr = r2l * lmh_as_float(0x3F000000u);
    float sm = lmh_fma(r3, q, hr);
    float big_a = s - lmh_as_float(0x3F800000u);
    float big_b = s * rh;
    float big_d = hs * r2;
    float big_c = s * sm;
    float hi1 = big_a + big_b;
    float e1 = hi1 - big_a;
    float lo1 = big_b - e1;
    float hi2 = hi1 + big_d;
    float e2 = hi2 - hi1;
    float lo2 = big_d - e2;
    float hi = hi2 + big_c;
    float e3 = hi - hi2;
    float lo3 = big_c - e3;
    float lo12 = lo1 + lo2;
    float lo = lo12 + lo3;
    float hi_one = hi + lmh_as_float(0x3F800000u);
    lmh_f2 r;
    r.hi = hi;
    r.lo = lmh_fma(rl, hi_one, lo);
    return r;
}

// tanh(a) for 0.5625 <= a < 9.125: 1 - 2/(expm1(2a) + 2) (steps 38-49).
LMH_FN float lmh_tanh_exponential(float a) {
    lmh_f2 e = lmh_tanh_expm1(a);
    float hi = e.hi;
    float lo = e.lo;
    float two = lmh_as_float(0x40000000u);
    float one = lmh_as_float(0x3F800000u);
    float dh = hi + two;
    float dh_hi = dh - hi;
    float dl0 = two - dh_hi;
    float dl = dl0 + lo;
    lmh_u32 db = lmh_as_uint(dh);
    lmh_u32 mb = (db & 0x007FFFFFu) | 0x3F000000u;
    float rm = lmh_fma(lmh_as_float(mb), lmh_as_float(0xBFF0F0F1u), lmh_as_float(0x4034B4B5u));
    float rc = lmh_as_float(lmh_as_uint(rm) - (db - mb));
    float en = lmh_fma(-dh, rc, one);
    rc = lmh_fma(rc, en, rc);
    en = lmh_fma(-dh, rc, one);
    rc = lmh_fma(rc, en, rc);
    float g0 = rc + rc;
    float res = lmh_fma(-g0, dh, two);
    res = lmh_fma(-g0, dl, res);
    float w = one - g0;
    float one_w = one - w;
    float wl = one_w - g0;
    float tail = lmh_fma(-rc, res, wl);
    return w + tail;
}

// NUMERICS.md §6 tanh (numerics/math.zig tanh): both arms always run, selects choose.
LMH_FN float lmh_tanh(float x) {
    lmh_u32 b = lmh_as_uint(x);
    lmh_u32 ab = b & 0x7FFFFFFFu;
    lmh_u32 sign = b & 0x80000000u;
    float a = lmh_as_float(ab);
    float tp = lmh_tanh_polynomial(a);
    float te = lmh_tanh_exponential(a);
    lmh_u32 mag = ab < 0x3F100000u ? lmh_as_uint(tp) : lmh_as_uint(te);
    mag = ab < 0x39800000u ? ab : mag;
    mag = ab >= 0x41120000u ? 0x3F800000u : mag;
    lmh_u32 r = mag | sign;
    r = ab > LMH_POSITIVE_INF ? LMH_CANONICAL_NAN : r;
    return lmh_as_float(r);
}

// ---------------------------------------------------------------------------------------
// Block layouts (numerics/formats.zig blocks): bytes only, so no padding and alignment 1;
// f16 fields hold little-endian bits. A Zig test compares every size and offset.

typedef struct { lmh_u8 d[2]; lmh_u8 qs[16]; } lmh_block_q4_0;
typedef struct { lmh_u8 d[2]; lmh_u8 qh[4]; lmh_u8 qs[16]; } lmh_block_q5_0;
typedef struct { lmh_u8 d[2]; lmh_u8 m[2]; lmh_u8 qh[4]; lmh_u8 qs[16]; } lmh_block_q5_1;
typedef struct { lmh_u8 d[2]; lmh_u8 qs[32]; } lmh_block_q8_0;
typedef struct { lmh_u8 d[2]; lmh_u8 qs[16]; } lmh_block_iq4_nl;
typedef struct { lmh_u8 scales[16]; lmh_u8 qs[64]; lmh_u8 d[2]; lmh_u8 dmin[2]; } lmh_block_q2_k;
typedef struct { lmh_u8 hmask[32]; lmh_u8 qs[64]; lmh_u8 scales[12]; lmh_u8 d[2]; } lmh_block_q3_k;
typedef struct { lmh_u8 d[2]; lmh_u8 dmin[2]; lmh_u8 scales[12]; lmh_u8 qs[128]; } lmh_block_q4_k;
typedef struct { lmh_u8 d[2]; lmh_u8 dmin[2]; lmh_u8 scales[12]; lmh_u8 qh[32]; lmh_u8 qs[128]; } lmh_block_q5_k;
typedef struct { lmh_u8 ql[128]; lmh_u8 qh[64]; lmh_u8 scales[16]; lmh_u8 d[2]; } lmh_block_q6_k;
typedef struct { lmh_u8 d[2]; lmh_u8 scales_h[2]; lmh_u8 scales_l[4]; lmh_u8 qs[128]; } lmh_block_iq4_xs;

LMH_STATIC_ASSERT(sizeof(lmh_block_q4_0) == 18, "Q4_0 block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q5_0) == 22, "Q5_0 block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q5_1) == 24, "Q5_1 block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q8_0) == 34, "Q8_0 block");
LMH_STATIC_ASSERT(sizeof(lmh_block_iq4_nl) == 18, "IQ4_NL block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q2_k) == 84, "Q2_K block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q3_k) == 110, "Q3_K block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q4_k) == 144, "Q4_K block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q5_k) == 176, "Q5_K block");
LMH_STATIC_ASSERT(sizeof(lmh_block_q6_k) == 210, "Q6_K block");
LMH_STATIC_ASSERT(sizeof(lmh_block_iq4_xs) == 136, "IQ4_XS block");

// Loads. Every block size is even and every field a lane reads as more than one byte starts
// at an even offset of its block; rows start at multiples of the (even) row size from a
// weight buffer 4-byte aligned (checked when the matvec is recorded); so lmh_load16 is
// always aligned, and lmh_load32 is used for F32 rows and at offsets that are multiples of
// 4 in blocks whose size is one (Q2_K, Q4_K, Q5_1, Q5_K, IQ4_XS) and in the lane layout.

// A 4-byte field at an even offset.
LMH_FN lmh_u32 lmh_le32(LMH_GLOBAL const lmh_u8 *p) {
    return lmh_load16(p) | (lmh_load16(p + 2) << 16);
}

// Bytes [0, 8) at p (even), in two little-endian words: four loads instead of eight.
typedef struct { lmh_u32 lo; lmh_u32 hi; } lmh_bytes8;

LMH_FN lmh_bytes8 lmh_load_bytes8(LMH_GLOBAL const lmh_u8 *p) {
    lmh_bytes8 b;
    b.lo = lmh_le32(p);
    b.hi = lmh_le32(p + 4);
    return b;
}

// The same from p a multiple of 4 (blocks of Q2_K, Q4_K, Q5_K and IQ4_XS, whose sizes are
// multiples of 4): two loads.
LMH_FN lmh_bytes8 lmh_load_words8(LMH_GLOBAL const lmh_u8 *p) {
    lmh_bytes8 b;
    b.lo = lmh_load32(p);
    b.hi = lmh_load32(p + 4);
    return b;
}

// The same from p a multiple of 8 (a lane's code bytes in the lane layout) for `type`: one
// load where that was measured faster, two elsewhere. On an H100 against two loads everywhere
// (bench/results/cuda-h200.md, call 65): Q8_0 9% less at N = 4 (4 rows a pass), Q4_0 4-5%
// less at N = 2; at other pass sizes these and IQ4_NL moved by 3% or less, or lost (Q4_0 15%
// more at N = 16).
LMH_FN lmh_bytes8 lmh_load_lane8(LMH_GLOBAL const lmh_u8 *p, lmh_u32 type) {
    if ((type == LMH_TYPE_Q8_0 && LMH_ROWS_PER_PASS == 4u) || (type == LMH_TYPE_Q4_0 && LMH_ROWS_PER_PASS == 2u)) {
        lmh_words2 w = lmh_load_words2(p);
        lmh_bytes8 b;
        b.lo = w.x;
        b.hi = w.y;
        return b;
    }
    return lmh_load_words8(p);
}

// The same from p (even) whose offset from the 4-byte boundary below is `skew` (0 or 2),
// with no branch: the three words from that boundary, shifted together. It reads up to 4
// bytes past the 8, inside the block for Q3_K's fields, and 2 before them, inside the
// weights (which start 4-byte aligned): three loads instead of four. Measured on an H200
// (bench/results/cuda-h200.md), against lmh_load_bytes8, twice in one call: Q3_K's norm and
// matvec 5-7% faster from N = 8 (8 rows per pass), but 7-18% slower at N = 1 to 4; Q6_K's
// slower at every N (2-60%); with a branch on the skew instead, both slower at every N
// (1-52%). So only Q3_K's kernels of 8 rows per pass take it.
LMH_FN lmh_bytes8 lmh_load_skewed8(LMH_GLOBAL const lmh_u8 *p, lmh_u32 skew) {
    if (LMH_ROWS_PER_PASS < 8u) return lmh_load_bytes8(p);
    LMH_GLOBAL const lmh_u8 *q = p - skew;
    lmh_u64 w0 = lmh_load32(q);
    lmh_u64 w1 = lmh_load32(q + 4);
    lmh_u64 w2 = lmh_load32(q + 8);
    lmh_u32 shift = skew << 3;
    lmh_bytes8 b;
    b.lo = (lmh_u32)(((w1 << 32) | w0) >> shift);
    b.hi = (lmh_u32)(((w2 << 32) | w1) >> shift);
    return b;
}

// Byte i of b minus offset, exactly (as lmh_int): a decoder's code as a float. i is a
// literal wherever this is called, so it folds to one byte's extraction.
// A weight d·(q − offset) then costs a prmt, this add and a multiply. Tried, and not kept
// (bench/results/cuda-h200.md, call 54): one fma in place of the add and multiply, the code
// placed under a fixed exponent as a = (2^p + q)·2^-p (one prmt), fma(2^p·d, a, −(2^p +
// offset)·d), exact where those two products are (Q4_0, Q5_0, Q8_0, IQ4_NL, Q3_K, Q6_K), but
// with a branch to the product for an infinite d (the fma's ∞ − ∞ is a NaN where the
// product is ±Inf): 7-162% slower on an H100, each vocab row's loads then issued just before
// its branch instead of a chunk's all at once; without the branch, which no real head takes
// but the contract needs, from 7% less (Q8_0 from N = 8) to 11% more (Q6_K from N = 16).
LMH_FN float lmh_code(lmh_bytes8 b, lmh_u32 i, lmh_u32 offset) {
    return lmh_as_float(LMH_BYTE_FLOAT_BITS(i < 4u ? b.lo : b.hi, i & 3u)) - lmh_as_float(0x4B000000u | offset);
}

// Codes four to a word: every byte of b shifted right by `shift` and masked by `mask`, a
// byte repeated (0x0F0F0F0F keeps a nibble of each), so one shift and one and serve four
// values. The decoders build a lane's 8 codes this way, one per byte.
LMH_FN lmh_bytes8 lmh_bits(lmh_bytes8 b, lmh_u32 shift, lmh_u32 mask) {
    lmh_bytes8 r;
    r.lo = (b.lo >> shift) & mask;
    r.hi = (b.hi >> shift) & mask;
    return r;
}

// a | (b << shift) in every byte (b's bytes hold bits that stay inside them).
LMH_FN lmh_bytes8 lmh_merge(lmh_bytes8 a, lmh_bytes8 b, lmh_u32 shift) {
    lmh_bytes8 r;
    r.lo = a.lo | (b.lo << shift);
    r.hi = a.hi | (b.hi << shift);
    return r;
}

// How a matvec chunk reads a lane's 8 values (always a literal): with a bounds test, all 8
// present, all 8 present in rows that start 16-byte aligned, or that and activations that
// are the norm's output (past their flush point already, so read as they are), or that and
// activations resident in threadgroup memory (flushed when they were copied there).
#define LMH_LOAD_PARTIAL 0u
#define LMH_LOAD_WHOLE 1u
#define LMH_LOAD_WIDE 2u
#define LMH_LOAD_NORMED 3u
#define LMH_LOAD_RESIDENT 4u

// ---------------------------------------------------------------------------------------
// Decoders: lane `lane`'s 8 weights of one chunk of a vocab row, whose bytes start at
// `chunk`: the chunk's values [8·lane, +8) (NUMERICS.md §3), each as formats.zig
// decodeBlock computes it. Those 8 values share one scale and sit in one block, so a lane
// reads its scale once. A 32-value block holds lanes 4b..4b+3; a 256-value block is the chunk.

typedef struct { float v[8]; } lmh_f8;

// K[q] + 128 of the IQ4_NL/IQ4_XS code table (formats.zig iq4_values), four entries per
// word, entries 0-3 first.
#define LMH_IQ4_TABLE0 0x3F2D1801u
#define LMH_IQ4_TABLE1 0x766A5D4Fu
#define LMH_IQ4_TABLE2 0xA6998D81u
#define LMH_IQ4_TABLE3 0xF1D9C5B5u

// Each byte of `codes` (a code below 16) replaced by its table entry K[q] + 128. A prelude
// with a byte permute defines LMH_IQ4_BYTES to look up four at once (CUDA's prmt).
#ifdef LMH_IQ4_BYTES
LMH_FN lmh_u32 lmh_iq4_bytes(lmh_u32 codes) {
    return LMH_IQ4_BYTES(codes);
}
#else
LMH_FN lmh_u32 lmh_iq4_bytes(lmh_u32 codes) {
    lmh_u32 r = 0u;
    for (lmh_u32 i = 0u; i < 4u; i++) {
        lmh_u32 q = (codes >> (i << 3)) & 15u;
        lmh_u32 word = q < 8u ? (q < 4u ? LMH_IQ4_TABLE0 : LMH_IQ4_TABLE1) : (q < 12u ? LMH_IQ4_TABLE2 : LMH_IQ4_TABLE3);
        r |= ((word >> ((q & 3u) << 3)) & 0xFFu) << (i << 3);
    }
    return r;
}
#endif

// A lane's 8 codes as their table entries, K[q] + 128.
LMH_FN lmh_bytes8 lmh_iq4(lmh_bytes8 q) {
    lmh_bytes8 r;
    r.lo = lmh_iq4_bytes(q.lo);
    r.hi = lmh_iq4_bytes(q.hi);
    return r;
}

// Q4_0 d·(q−8), IQ4_NL d·K[q]: lane 4b+j has values 8j.. of block b, the low (j < 2) or
// high nibbles of qs[8(j & 1) ..]. `lanes`: the chunk is in the lane layout.
LMH_FN lmh_f8 lmh_decode_nibbles(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 type, lmh_u32 lanes) {
    LMH_GLOBAL const lmh_block_q4_0 *b = (LMH_GLOBAL const lmh_block_q4_0 *)chunk + (lane >> 2);
    lmh_u32 at = (lane & 1u) << 3;
    lmh_u32 shift = (lane & 2u) << 1;
    float d = lmh_f16(lmh_load16(lanes != 0u ? chunk + 128u + ((lane >> 2) << 1) : b->d));
    lmh_bytes8 raw = lanes != 0u ? lmh_load_lane8(chunk + ((lane >> 2) << 4) + at, type) : lmh_load_bytes8(b->qs + at);
    lmh_bytes8 q = lmh_bits(raw, shift, 0x0F0F0F0Fu);
    if (type == LMH_TYPE_IQ4_NL) q = lmh_iq4(q);
    lmh_u32 offset = type == LMH_TYPE_Q4_0 ? 8u : 128u;
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = d * lmh_code(q, i, offset);
    return w;
}

// Q5_0 d·(q−16), Q5_1 (d·q) + m, with q's fifth bit from bit e of qh. Q5_1 is written
// fma(d, q, m): d·q is exact, so it equals the product rounded, then the sum rounded.
// Q5_1's 24-byte blocks keep qh and qs 4-byte aligned, so below 8 rows a pass they are read
// as words (5-12% less at N = 1 to 4 on an H100; from N = 8 5-35% more: call 63); Q5_0's
// 22-byte ones only in the lane layout (`lanes`: each block's qh and qs, 20 bytes, at 20·b,
// its d at 160 + 2·b).
LMH_FN lmh_f8 lmh_decode_q5(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 type, lmh_u32 lanes) {
    lmh_u32 block = lane >> 2;
    lmh_u32 at = (lane & 1u) << 3;
    lmh_u32 shift = (lane & 2u) << 1;
    lmh_u32 first = (lane & 3u) << 3;
    float d;
    float m = 0.0f;
    lmh_u32 qh;
    lmh_bytes8 raw;
    if (type == LMH_TYPE_Q5_0 && lanes != 0u) {
        LMH_GLOBAL const lmh_u8 *codes = chunk + block * 20u;
        d = lmh_f16(lmh_load16(chunk + 160u + (block << 1)));
        qh = lmh_load32(codes);
        raw = lmh_load_words8(codes + 4u + at);
    } else if (type == LMH_TYPE_Q5_0) {
        LMH_GLOBAL const lmh_block_q5_0 *b = (LMH_GLOBAL const lmh_block_q5_0 *)chunk + block;
        d = lmh_f16(lmh_load16(b->d));
        qh = lmh_le32(b->qh);
        raw = lmh_load_bytes8(b->qs + at);
    } else {
        LMH_GLOBAL const lmh_block_q5_1 *b = (LMH_GLOBAL const lmh_block_q5_1 *)chunk + block;
        d = lmh_f16(lmh_load16(b->d));
        m = lmh_f16(lmh_load16(b->m));
        qh = LMH_ROWS_PER_PASS < 8u ? lmh_load32(b->qh) : lmh_le32(b->qh);
        raw = LMH_ROWS_PER_PASS < 8u ? lmh_load_words8(b->qs + at) : lmh_load_bytes8(b->qs + at);
    }
    // Bits first..first+7 of qh, one to a byte: a multiply by 0x00204081 moves bit k of a
    // nibble to bit 8k (k = 0..3), the mask drops the rest.
    lmh_u32 h = qh >> first;
    lmh_bytes8 high;
    high.lo = ((h & 15u) * 0x00204081u) & 0x01010101u;
    high.hi = (((h >> 4) & 15u) * 0x00204081u) & 0x01010101u;
    lmh_bytes8 code = lmh_merge(lmh_bits(raw, shift, 0x0F0F0F0Fu), high, 4u);
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) {
        w.v[i] = type == LMH_TYPE_Q5_0 ? d * lmh_code(code, i, 16u) : lmh_fma(d, lmh_code(code, i, 0u), m);
    }
    return w;
}

// Q8_0 d·q, q a signed byte (its bits xor 0x80 is q + 128). `lanes`: the chunk is in the
// lane layout.
LMH_FN lmh_f8 lmh_decode_q8_0(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 lanes) {
    LMH_GLOBAL const lmh_block_q8_0 *b = (LMH_GLOBAL const lmh_block_q8_0 *)chunk + (lane >> 2);
    float d = lmh_f16(lmh_load16(lanes != 0u ? chunk + 256u + ((lane >> 2) << 1) : b->d));
    lmh_bytes8 q = lanes != 0u ? lmh_load_lane8(chunk + (lane << 3), LMH_TYPE_Q8_0) : lmh_load_bytes8(b->qs + ((lane & 3u) << 3));
    q.lo = q.lo ^ 0x80808080u;
    q.hi = q.hi ^ 0x80808080u;
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = d * lmh_code(q, i, 128u);
    return w;
}

// Sub-block scales. Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS give each sub-block of a block
// (16 of 16 values or 8 of 32) a scale, and Q2_K, Q4_K and Q5_K a min, packed in the block.
// A lane's 8 values lie in one sub-block, so its weights are fma(d, q, −m) (d·q where there
// is no min) for the sub-block's d and m: lmh_sub_block_scale unpacks them, and the decoders
// take them as computed (by the lane, or by another lane: lmh_matvec_chunk; same bits).
typedef struct { float d; float m; } lmh_scale_min;

// Sub-blocks per 256-value chunk, 0 for types without sub-block scales.
LMH_FN lmh_u32 lmh_sub_blocks(lmh_u32 type) {
    switch (type) {
    case LMH_TYPE_Q2_K:
    case LMH_TYPE_Q3_K:
    case LMH_TYPE_Q6_K: return 16u;
    case LMH_TYPE_Q4_K:
    case LMH_TYPE_Q5_K:
    case LMH_TYPE_IQ4_XS: return 8u;
    default: return 0u;
    }
}

// Whether the type's weights subtract a min (fma(d, q, −m): (d·q) − m with d·q exact).
LMH_FN lmh_u32 lmh_has_min(lmh_u32 type) {
    return type == LMH_TYPE_Q2_K || type == LMH_TYPE_Q4_K || type == LMH_TYPE_Q5_K ? 1u : 0u;
}

// Q4_K/Q5_K 6-bit scale and min of sub-block j (ggml get_scale_min_k4), in bits 0-5 and
// 8-13. The 12 scale bytes are three words: with k = j mod 4, a = s[k], b = s[k + 4],
// c = s[k + 8]. For j < 4 sc = a & 63 and m = b & 63; else sc = (c & 15) | (a >> 6) << 4
// and m = (c >> 4) | (b >> 6) << 4 (s[j + 4] = c, s[j − 4] = a, s[j] = b).
LMH_FN lmh_u32 lmh_k4_scale_min(LMH_GLOBAL const lmh_u8 *s, lmh_u32 j) {
    lmh_u32 k = (j & 3u) << 3;
    lmh_u32 a = (lmh_load32(s) >> k) & 0xFFu;
    lmh_u32 b = (lmh_load32(s + 4) >> k) & 0xFFu;
    lmh_u32 c = (lmh_load32(s + 8) >> k) & 0xFFu;
    lmh_u32 sc = j < 4u ? a & 63u : (c & 15u) | ((a >> 6) << 4);
    lmh_u32 m = j < 4u ? b & 63u : (c >> 4) | ((b >> 6) << 4);
    return sc | (m << 8);
}

// The d and m of sub-block j of the block at `chunk` (m = +0 for types without a min):
// Q2_K d·(sc & 15), dmin·(sc >> 4); Q3_K d·(s − 32), s the 6-bit scale; Q4_K/Q5_K d·sc,
// dmin·m (6-bit scale and min); Q6_K d·sc, sc a signed byte; IQ4_XS d·(ls − 32), ls the
// 6-bit scale. Each a product of an f16 and a small integer: exact.
LMH_FN lmh_scale_min lmh_sub_block_scale(lmh_u32 type, LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 j) {
    lmh_scale_min r;
    r.m = 0.0f;
    if (type == LMH_TYPE_Q2_K) {
        LMH_GLOBAL const lmh_block_q2_k *b = (LMH_GLOBAL const lmh_block_q2_k *)chunk;
        lmh_u32 sc = b->scales[j];
        lmh_u32 d_dmin = lmh_load32(b->d); // d, then dmin
        r.d = lmh_f16(d_dmin & 0xFFFFu) * lmh_int(sc & 15u, 0u);
        r.m = lmh_f16(d_dmin >> 16) * lmh_int(sc >> 4, 0u);
    } else if (type == LMH_TYPE_Q3_K) {
        LMH_GLOBAL const lmh_block_q3_k *b = (LMH_GLOBAL const lmh_block_q3_k *)chunk;
        lmh_u32 low = ((lmh_u32)b->scales[j & 7u] >> ((j >> 3) << 2)) & 15u;
        lmh_u32 high = ((lmh_u32)b->scales[8u + (j & 3u)] >> ((j >> 2) << 1)) & 3u;
        r.d = lmh_f16(lmh_load16(b->d)) * lmh_int(low | (high << 4), 32u);
    } else if (type == LMH_TYPE_Q4_K || type == LMH_TYPE_Q5_K) {
        // Q5_K's d, dmin and scales sit where Q4_K's do.
        LMH_GLOBAL const lmh_block_q4_k *b = (LMH_GLOBAL const lmh_block_q4_k *)chunk;
        lmh_u32 sm = lmh_k4_scale_min(b->scales, j);
        lmh_u32 d_dmin = lmh_load32(b->d); // d, then dmin
        r.d = lmh_f16(d_dmin & 0xFFFFu) * lmh_int(sm & 63u, 0u);
        r.m = lmh_f16(d_dmin >> 16) * lmh_int(sm >> 8, 0u);
    } else if (type == LMH_TYPE_Q6_K) {
        LMH_GLOBAL const lmh_block_q6_k *b = (LMH_GLOBAL const lmh_block_q6_k *)chunk;
        r.d = lmh_f16(lmh_load16(b->d)) * lmh_int((lmh_u32)b->scales[j] ^ 0x80u, 128u);
    } else {
        LMH_GLOBAL const lmh_block_iq4_xs *b = (LMH_GLOBAL const lmh_block_iq4_xs *)chunk;
        lmh_u32 d_high = lmh_load32(b->d); // d, then scales_h
        lmh_u32 low = (lmh_load32(b->scales_l) >> (j << 2)) & 15u;
        lmh_u32 high = (d_high >> (16u + (j << 1))) & 3u;
        r.d = lmh_f16(d_high & 0xFFFFu) * lmh_int(low | (high << 4), 32u);
    }
    return r;
}

// Q2_K fma(d, q, −m) with q the 2-bit code. Value e = 8·lane + i: q = bits 2·((e % 128) >> 5)
// of qs[32·(e >> 7) + e % 32], sub-block e >> 4.
LMH_FN lmh_f8 lmh_decode_q2_k(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_scale_min s) {
    LMH_GLOBAL const lmh_block_q2_k *b = (LMH_GLOBAL const lmh_block_q2_k *)chunk;
    lmh_u32 at = ((lane >> 4) << 5) + ((lane & 3u) << 3);
    lmh_u32 shift = ((lane >> 2) & 3u) << 1;
    lmh_bytes8 q = lmh_bits(lmh_load_words8(b->qs + at), shift, 0x03030303u);
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = lmh_fma(s.d, lmh_code(q, i, 0u), -s.m);
    return w;
}

// Q3_K d·q, q = q2 − 4·(1 − hbit).
LMH_FN lmh_f8 lmh_decode_q3_k(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 skew, lmh_scale_min s) {
    LMH_GLOBAL const lmh_block_q3_k *b = (LMH_GLOBAL const lmh_block_q3_k *)chunk;
    lmh_u32 first = (lane & 3u) << 3;
    lmh_u32 at = ((lane >> 4) << 5) + first;
    lmh_u32 shift = ((lane >> 2) & 3u) << 1;
    lmh_u32 hshift = lane >> 2;
    lmh_bytes8 q2 = lmh_bits(lmh_load_skewed8(b->qs + at, skew), shift, 0x03030303u);
    lmh_bytes8 q = lmh_merge(q2, lmh_bits(lmh_load_skewed8(b->hmask + first, skew), hshift, 0x01010101u), 2u);
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = s.d * lmh_code(q, i, 4u);
    return w;
}

// Q4_K/Q5_K fma(d, q, −m). Value e = 8·lane + i: nibble (e % 64) >> 5 of
// qs[32·(e >> 6) + e % 32], sub-block e >> 5; Q5_K's fifth bit is bit e >> 5 of qh[e % 32].
LMH_FN lmh_f8 lmh_decode_q45_k(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 type, lmh_scale_min s) {
    LMH_GLOBAL const lmh_u8 *qs = type == LMH_TYPE_Q4_K ? ((LMH_GLOBAL const lmh_block_q4_k *)chunk)->qs : ((LMH_GLOBAL const lmh_block_q5_k *)chunk)->qs;
    lmh_u32 first = (lane & 3u) << 3;
    lmh_u32 at = ((lane >> 3) << 5) + first;
    lmh_u32 shift = ((lane >> 2) & 1u) << 2;
    lmh_bytes8 q = lmh_bits(lmh_load_words8(qs + at), shift, 0x0F0F0F0Fu);
    if (type == LMH_TYPE_Q5_K) q = lmh_merge(q, lmh_bits(lmh_load_words8(((LMH_GLOBAL const lmh_block_q5_k *)chunk)->qh + first), lane >> 2, 0x01010101u), 4u);
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = lmh_fma(s.d, lmh_code(q, i, 0u), -s.m);
    return w;
}

// Q6_K d·(q − 32). Value e = 8·lane + i, n = e >> 7, c = (e % 128) >> 5: low 4 bits from
// ql[64n + 32(c & 1) + e % 32] >> 4(c >> 1), high 2 bits from qh[32n + e % 32] >> 2c.
LMH_FN lmh_f8 lmh_decode_q6_k(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_scale_min s) {
    LMH_GLOBAL const lmh_block_q6_k *b = (LMH_GLOBAL const lmh_block_q6_k *)chunk;
    lmh_u32 n = lane >> 4;
    lmh_u32 c = (lane >> 2) & 3u;
    lmh_u32 first = (lane & 3u) << 3;
    lmh_u32 low_at = (n << 6) + ((c & 1u) << 5) + first;
    lmh_u32 low_shift = (c >> 1) << 2;
    lmh_u32 high_at = (n << 5) + first;
    lmh_u32 high_shift = c << 1;
    lmh_bytes8 low = lmh_bits(lmh_load_bytes8(b->ql + low_at), low_shift, 0x0F0F0F0Fu);
    lmh_bytes8 q = lmh_merge(low, lmh_bits(lmh_load_bytes8(b->qh + high_at), high_shift, 0x03030303u), 4u);
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = s.d * lmh_code(q, i, 32u);
    return w;
}

// IQ4_XS d·K[q]; lane 4j+k has values 8k.. of sub-block j: the low (k < 2) or high nibbles
// of qs[16j + 8(k & 1) ..].
LMH_FN lmh_f8 lmh_decode_iq4_xs(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_scale_min s) {
    LMH_GLOBAL const lmh_block_iq4_xs *b = (LMH_GLOBAL const lmh_block_iq4_xs *)chunk;
    lmh_u32 at = ((lane >> 2) << 4) + ((lane & 1u) << 3);
    lmh_u32 shift = (lane & 2u) << 1;
    lmh_bytes8 q = lmh_iq4(lmh_bits(lmh_load_words8(b->qs + at), shift, 0x0F0F0F0Fu));
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = s.d * lmh_code(q, i, 128u);
    return w;
}

// F32, F16, BF16: one value per block; values past the row's end (`values`, counted from the
// chunk's first) are +0. The weight whose stored bits are `bits` (F16 and BF16: 16 of them):
// F32 and BF16 weights pass their flush point; F16 ones are multiples of 2^-24.
LMH_FN float lmh_dense_weight(lmh_u32 bits, lmh_u32 type) {
    if (type == LMH_TYPE_F32) return lmh_flush(bits, LMH_DOT_OPERAND_MIN);
    if (type == LMH_TYPE_F16) return lmh_f16(bits);
    return lmh_flush(bits << 16, LMH_DOT_OPERAND_MIN);
}

// Value i from p, one load.
LMH_FN float lmh_dense_value(LMH_GLOBAL const lmh_u8 *p, lmh_u32 i, lmh_u32 type) {
    return lmh_dense_weight(type == LMH_TYPE_F32 ? lmh_load32(p + (i << 2)) : lmh_load16(p + (i << 1)), type);
}

// A lane's 8 dense values of a chunk as loaded, not yet decoded: F32's in a and b, F16's and
// BF16's in a (b a copy).
typedef struct { lmh_words4 a, b; } lmh_dense_words;

// The words of the 8 values from a 16-byte aligned p: F32 in two loads, F16 and BF16 in one.
LMH_FN lmh_dense_words lmh_load_dense_words(LMH_GLOBAL const lmh_u8 *p, lmh_u32 type) {
    lmh_dense_words d;
    d.a = lmh_load_words4((LMH_GLOBAL const lmh_u32 *)p);
    d.b = type == LMH_TYPE_F32 ? lmh_load_words4((LMH_GLOBAL const lmh_u32 *)p + 4) : d.a;
    return d;
}

LMH_FN lmh_f8 lmh_dense_words_values(lmh_dense_words d, lmh_u32 type) {
    lmh_u32 u[4] = { d.a.x, d.a.y, d.a.z, d.a.w };
    lmh_f8 w;
    if (type == LMH_TYPE_F32) {
        lmh_u32 v[4] = { d.b.x, d.b.y, d.b.z, d.b.w };
        for (lmh_u32 i = 0u; i < 4u; i++) {
            w.v[i] = lmh_dense_weight(u[i], type);
            w.v[4u + i] = lmh_dense_weight(v[i], type);
        }
    } else {
        for (lmh_u32 i = 0u; i < 4u; i++) {
            w.v[2u * i] = lmh_dense_weight(u[i] & 0xFFFFu, type);
            w.v[2u * i + 1u] = lmh_dense_weight(u[i] >> 16, type);
        }
    }
    return w;
}

// The 8 values from a 16-byte aligned p.
LMH_FN lmh_f8 lmh_decode_dense_wide(LMH_GLOBAL const lmh_u8 *p, lmh_u32 type) {
    return lmh_dense_words_values(lmh_load_dense_words(p, type), type);
}

LMH_FN lmh_f8 lmh_decode_dense(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 values, lmh_u32 load, lmh_u32 type) {
    lmh_u32 first = lane << 3;
    LMH_GLOBAL const lmh_u8 *p = chunk + (first << (type == LMH_TYPE_F32 ? 2u : 1u));
    if (load >= LMH_LOAD_WIDE) return lmh_decode_dense_wide(p, type);
    lmh_f8 w;
    if (load == LMH_LOAD_WHOLE || first + 8u <= values) { // as for activations: the rule, from one address
        for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = lmh_dense_value(p, i, type);
    } else {
        for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = first + i < values ? lmh_dense_value(p, i, type) : 0.0f;
    }
    return w;
}

// Lane `lane`'s 8 values of a chunk of f32 rows in a threadgroup area (lmh_store_lane's
// layout): two 16-byte loads.
LMH_FN lmh_f8 lmh_area_values(LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane) {
    lmh_words4 a = lmh_load_words4((LMH_GLOBAL const lmh_u32 *)(chunk + (lane << 4)));
    lmh_words4 b = lmh_load_words4((LMH_GLOBAL const lmh_u32 *)(chunk + 512u + (lane << 4)));
    lmh_u32 u[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
    lmh_f8 w;
    for (lmh_u32 i = 0u; i < 8u; i++) w.v[i] = lmh_as_float(u[i]);
    return w;
}

// Bytes of one chunk (256 values) of a row of `type`.
LMH_FN lmh_u32 lmh_chunk_bytes(lmh_u32 type) {
    switch (type) {
    case LMH_TYPE_F32: return 1024u;
    case LMH_TYPE_F16:
    case LMH_TYPE_BF16: return 512u;
    case LMH_TYPE_Q4_0:
    case LMH_TYPE_IQ4_NL: return 8u * sizeof(lmh_block_q4_0);
    case LMH_TYPE_Q5_0: return 8u * sizeof(lmh_block_q5_0);
    case LMH_TYPE_Q5_1: return 8u * sizeof(lmh_block_q5_1);
    case LMH_TYPE_Q8_0: return 8u * sizeof(lmh_block_q8_0);
    case LMH_TYPE_Q2_K: return sizeof(lmh_block_q2_k);
    case LMH_TYPE_Q3_K: return sizeof(lmh_block_q3_k);
    case LMH_TYPE_Q4_K: return sizeof(lmh_block_q4_k);
    case LMH_TYPE_Q5_K: return sizeof(lmh_block_q5_k);
    case LMH_TYPE_Q6_K: return sizeof(lmh_block_q6_k);
    default: return sizeof(lmh_block_iq4_xs);
    }
}

// Whether the matvec of `type` reads the lane layout (LMH_LANE_LAYOUT): the types whose blocks
// put a lane's code bytes at 2-byte offsets and whose kernels read them from device memory at
// most pass sizes (Q6_K's read shared memory, and gained nothing: call 60). Q5_0's only below
// 8 rows a pass: 4-7% less at N = 1 to 4 on an H100, but 23-36% more from N = 8 (call 63).
LMH_FN lmh_u32 lmh_lane_layout(lmh_u32 type) {
    lmh_u32 laid = type == LMH_TYPE_Q4_0 || type == LMH_TYPE_IQ4_NL || type == LMH_TYPE_Q8_0 || (type == LMH_TYPE_Q5_0 && LMH_ROWS_PER_PASS < 8u);
    return LMH_LANE_LAYOUT != 0u && laid != 0u ? 1u : 0u;
}

// Bytes of a row of the lane layout's copy: a row of `row_bytes`, padded to 16-byte multiples
// so that every whole chunk (272, 176 or 144 bytes, multiples of 16) starts 16-byte aligned.
LMH_FN lmh_u32 lmh_lane_row_bytes(lmh_u32 row_bytes) {
    return (row_bytes + 15u) & ~15u;
}

// The lane layout's copy of p.vocab rows of p.row_bytes at `w` (a type lmh_lane_layout names),
// into `to`, rows of lmh_lane_row_bytes: a lane moves a block of a whole chunk at a time (its
// code bytes to the chunk's front, its 2-byte scale behind all 8 blocks' codes), then the rest
// of the row (a partial chunk's blocks as they are, then zeros) a byte at a time.
LMH_FN void lmh_lane_relayout(lmh_matvec_params p, LMH_GLOBAL const lmh_u8 *w, LMH_GLOBAL lmh_u8 *to, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_u32 chunk_bytes = lmh_chunk_bytes(p.type_id);
    lmh_u32 block_bytes = chunk_bytes >> 3;
    lmh_u32 code_bytes = block_bytes - 2u; // each block: a 2-byte scale, then its codes
    lmh_u32 whole_bytes = (p.hidden >> 8) * chunk_bytes;
    lmh_u32 to_row_bytes = lmh_lane_row_bytes(p.row_bytes);
    for (lmh_u64 j = simdgroup; j < p.vocab; j += simdgroups) {
        LMH_GLOBAL const lmh_u8 *row = w + j * p.row_bytes;
        LMH_GLOBAL lmh_u8 *out = to + j * to_row_bytes;
        for (lmh_u32 b = lane; b < (p.hidden >> 8) * 8u; b += 32u) {
            LMH_GLOBAL const lmh_u8 *block = row + b * block_bytes;
            LMH_GLOBAL lmh_u8 *chunk = out + (b >> 3) * chunk_bytes;
            for (lmh_u32 i = 0u; i < code_bytes; i++) chunk[(b & 7u) * code_bytes + i] = block[2u + i];
            chunk[8u * code_bytes + ((b & 7u) << 1)] = block[0];
            chunk[8u * code_bytes + ((b & 7u) << 1) + 1u] = block[1];
        }
        for (lmh_u32 i = whole_bytes + lane; i < to_row_bytes; i += 32u) out[i] = i < p.row_bytes ? row[i] : 0u;
    }
}

// `type` is a literal at every entry point, so inlining leaves one decoder per kernel.
// `load` (a literal) says how a dense row's values may be read, and whether the chunk is a
// row's partial last one (LMH_LOAD_PARTIAL), which the lane layout leaves as it is; `values`
// counts from the chunk's first value; `s` is the lane's sub-block scale (types with
// sub-block scales).
LMH_FN lmh_f8 lmh_decode(lmh_u32 type, LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane, lmh_u32 skew, lmh_u32 values, lmh_u32 load, lmh_scale_min s) {
    lmh_u32 lanes = lmh_lane_layout(type) != 0u && load != LMH_LOAD_PARTIAL;
    switch (type) {
    case LMH_TYPE_Q4_0:
    case LMH_TYPE_IQ4_NL:
        return lmh_decode_nibbles(chunk, lane, type, lanes);
    case LMH_TYPE_Q5_0:
    case LMH_TYPE_Q5_1:
        return lmh_decode_q5(chunk, lane, type, lanes);
    case LMH_TYPE_Q8_0:
        return lmh_decode_q8_0(chunk, lane, lanes);
    case LMH_TYPE_Q2_K:
        return lmh_decode_q2_k(chunk, lane, s);
    case LMH_TYPE_Q3_K:
        return lmh_decode_q3_k(chunk, lane, skew, s);
    case LMH_TYPE_Q4_K:
    case LMH_TYPE_Q5_K:
        return lmh_decode_q45_k(chunk, lane, type, s);
    case LMH_TYPE_Q6_K:
        return lmh_decode_q6_k(chunk, lane, s);
    case LMH_TYPE_IQ4_XS:
        return lmh_decode_iq4_xs(chunk, lane, s);
    default:
        return lmh_decode_dense(chunk, lane, values, load, type);
    }
}

// ---------------------------------------------------------------------------------------
// Kernel bodies. Each runs on one lane of simdgroup `simdgroup` of `simdgroups`, and
// strides over its work, so any grid gives the same result.

// A lane's 8 activations from [first, first + 8) of a row of `values`, flushed; +0 past it.
// All 8 in range is the rule (only a row's last lane can be short), so that case reads
// from one address with no per-value test. Rows of a multiple of 4 values start 16-byte
// aligned (a matvec input is, checked when recorded), and a lane's 8 start at a multiple
// of 8: two 16-byte loads, a quarter of the requests. `load` (a literal) says which case
// holds, or LMH_LOAD_PARTIAL to find out. With LMH_LOAD_NORMED the row is the norm's output,
// whose values are past the dot-operand flush point already: flushing them again would change
// no bit, so they are read as they are (two instructions per value fewer). With
// LMH_LOAD_RESIDENT the row is resident (lmh_stage_rows): chunk by chunk, in
// lmh_area_values's layout.
LMH_FN lmh_f8 lmh_load_activations(LMH_GLOBAL const lmh_u32 *row, lmh_u32 first, lmh_u32 values, lmh_u32 load) {
    LMH_GLOBAL const lmh_u32 *p = row + first;
    lmh_u32 all = load != LMH_LOAD_PARTIAL || first + 8u <= values;
    lmh_f8 a;
    if (load == LMH_LOAD_RESIDENT) return lmh_area_values((LMH_GLOBAL const lmh_u8 *)(row + (first & ~255u)), (first & 255u) >> 3);
    if (load == LMH_LOAD_NORMED) {
        lmh_words4 lo = lmh_load_words4(p);
        lmh_words4 hi = lmh_load_words4(p + 4);
        lmh_u32 u[8] = { lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w };
        for (lmh_u32 i = 0u; i < 8u; i++) a.v[i] = lmh_as_float(u[i]);
    } else if (load == LMH_LOAD_WIDE || (load == LMH_LOAD_PARTIAL && all != 0u && (values & 3u) == 0u)) {
        lmh_words4 lo = lmh_load_words4(p);
        lmh_words4 hi = lmh_load_words4(p + 4);
        a.v[0] = lmh_flush(lo.x, LMH_DOT_OPERAND_MIN);
        a.v[1] = lmh_flush(lo.y, LMH_DOT_OPERAND_MIN);
        a.v[2] = lmh_flush(lo.z, LMH_DOT_OPERAND_MIN);
        a.v[3] = lmh_flush(lo.w, LMH_DOT_OPERAND_MIN);
        a.v[4] = lmh_flush(hi.x, LMH_DOT_OPERAND_MIN);
        a.v[5] = lmh_flush(hi.y, LMH_DOT_OPERAND_MIN);
        a.v[6] = lmh_flush(hi.z, LMH_DOT_OPERAND_MIN);
        a.v[7] = lmh_flush(hi.w, LMH_DOT_OPERAND_MIN);
    } else if (all != 0u) {
        for (lmh_u32 i = 0u; i < 8u; i++) a.v[i] = lmh_flush(p[i], LMH_DOT_OPERAND_MIN);
    } else {
        for (lmh_u32 i = 0u; i < 8u; i++) a.v[i] = first + i < values ? lmh_flush(p[i], LMH_DOT_OPERAND_MIN) : 0.0f;
    }
    return a;
}

// NUMERICS.md §4, one simdgroup per row: y = flush(flush(x)·inv · flush(w)), with inv =
// rsqrt(ss·inv_hidden + flush(eps)) and ss the canonical dot product of flush(x) with
// itself. A row whose mean + eps overflows to +Inf becomes NaN, as on the CPU.
LMH_FN void lmh_rms_norm(lmh_rms_norm_params p, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u32 *weight, LMH_GLOBAL lmh_u32 *y, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    float eps = lmh_flush(lmh_as_uint(p.eps), LMH_VALUE_MIN);
    for (lmh_u32 r = simdgroup; r < p.rows; r += simdgroups) {
        LMH_GLOBAL const lmh_u32 *xr = x + (lmh_u64)r * p.hidden;
        LMH_GLOBAL lmh_u32 *yr = y + (lmh_u64)r * p.hidden;
        float acc = 0.0f;
        for (lmh_u32 first = lane << 3; first < p.hidden; first += 256u) {
            lmh_f8 v = lmh_load_activations(xr, first, p.hidden, LMH_LOAD_PARTIAL);
            for (lmh_u32 i = 0u; i < 8u; i++) acc = lmh_fma(v.v[i], v.v[i], acc);
        }
        float sum_squares = lmh_butterfly(acc);
        float mean = sum_squares * p.inv_hidden;
        float v = mean + eps;
        float inv = lmh_as_uint(v) == LMH_POSITIVE_INF ? lmh_as_float(LMH_CANONICAL_NAN) : lmh_rsqrt(v);
        for (lmh_u32 first = lane << 3; first < p.hidden; first += 256u) {
            lmh_f8 v8 = lmh_load_activations(xr, first, p.hidden, LMH_LOAD_PARTIAL);
            for (lmh_u32 i = 0u; i < 8u; i++) {
                if (first + i >= p.hidden) break;
                float t = v8.v[i] * inv;
                float scaled = t * lmh_flush(weight[first + i], LMH_VALUE_MIN);
                yr[first + i] = lmh_as_uint(lmh_flush(lmh_as_uint(scaled), LMH_DOT_OPERAND_MIN));
            }
        }
    }
}

// The hint LMH_PREFETCH for every 128-byte line of [p, p + bytes), bytes > 0, a line per lane.
LMH_FN void lmh_prefetch_bytes(LMH_GLOBAL const lmh_u8 *p, lmh_u64 bytes, lmh_u32 lane) {
#ifdef LMH_PREFETCH
    for (lmh_u64 at = (lmh_u64)lane << 7; at < bytes + 127u; at += 32u << 7) LMH_PREFETCH(p + (at < bytes ? at : bytes - 1u));
#else
    (void)p;
    (void)bytes;
    (void)lane;
#endif
}

// A pass's accumulators, and the vocab rows it reads (a vocab row past the end is read as
// the last one and never stored, so no branch stands between a chunk's loads).
typedef struct { float v[LMH_VOCAB_ROWS_PER_SIMDGROUP][LMH_ROWS_PER_PASS]; } lmh_tile;
// skew[m]: the offset of row m's first byte from the 4-byte boundary below (weights start
// 4-byte aligned, row sizes are even: 0 or 2), so chunk c's is (skew[m] + c·chunk bytes) & 3.
typedef struct {
    LMH_GLOBAL const lmh_u8 *row[LMH_VOCAB_ROWS_PER_SIMDGROUP];
    lmh_u32 skew[LMH_VOCAB_ROWS_PER_SIMDGROUP];
} lmh_vocab_rows;

// Lane `lane`'s own sub-block scale in the chunk at `chunk`: its 8 values lie in sub-block
// lane·S / 32 of S. Zeros for a type without sub-block scales.
LMH_FN lmh_scale_min lmh_lane_scale(lmh_u32 type, LMH_GLOBAL const lmh_u8 *chunk, lmh_u32 lane) {
    if (lmh_sub_blocks(type) != 0u) return lmh_sub_block_scale(type, chunk, (lane * lmh_sub_blocks(type)) >> 5);
    lmh_scale_min r;
    r.d = 0.0f;
    r.m = 0.0f;
    return r;
}

// Unpacking a sub-block's scale and min costs a lane about 24 instructions for Q4_K's and
// Q5_K's packed 6-bit fields (a third of a one-row chunk), and the 8 sub-blocks of a chunk
// are shared by 4 lanes each. So in kernels of 1 or 2 rows per pass (CUDA's for N = 1 and
// 2) a simdgroup unpacks the scales of 4 chunks at once, a sub-block a lane
// (lmh_refill_table), and each lane then takes its own from the lane that holds it
// (lmh_matvec_chunk), a shuffle per value. Measured on an H200 (bench/results/cuda-h200.md):
// Q4_K and Q5_K 10-12% faster at N = 1 and 5-7% at N = 2, but slower with 4 or 8 rows per
// pass (up to 19% at N = 8); for Q2_K, Q3_K, Q6_K and IQ4_XS, whose lanes unpack less,
// slower at most N (Q2_K up to 27%, Q6_K 21%, IQ4_XS 41%) and nowhere 4% faster. So only
// those kernels of those two types keep a table, and every other lane unpacks its own scale
// (lmh_lane_scale). Chunks per table (32 / S), or 0 for none.
LMH_FN lmh_u32 lmh_table_chunks(lmh_u32 type) {
    lmh_u32 packed = type == LMH_TYPE_Q4_K || type == LMH_TYPE_Q5_K;
    return packed != 0u && LMH_ROWS_PER_PASS <= 2u ? 4u : 0u;
}

// A scale table: lane l's (d, m) for each vocab row (unused where group is 0).
typedef struct { lmh_scale_min v[LMH_VOCAB_ROWS_PER_SIMDGROUP]; } lmh_scales;

// The table for chunk c of a pass, in tables of `group` chunks (a literal, 0 for none), with
// vocab.row[m] at chunk c in the weights and `chunks` chunks from c on: `table` still, or
// refilled where c starts a table: then lane l holds sub-block l % S of chunk c + l / S (of
// the last chunk, past the row), S = 32 / group.
LMH_FN lmh_scales lmh_refill_table(lmh_u32 type, lmh_u32 group, lmh_scales table, lmh_vocab_rows vocab, lmh_u32 c, lmh_u32 chunks, lmh_u32 lane) {
    if (group == 0u || (c & (group - 1u)) != 0u) return table;
    lmh_u32 k = (lane * group) >> 5;
    k = k < chunks ? k : chunks - 1u;
    lmh_scales r;
    for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
        r.v[m] = lmh_sub_block_scale(type, vocab.row[m] + k * lmh_chunk_bytes(type), lane & (lmh_sub_blocks(type) - 1u));
    }
    return r;
}

// A lane's decoded weights of one chunk, for each vocab row of a pass.
typedef struct { lmh_f8 row[LMH_VOCAB_ROWS_PER_SIMDGROUP]; } lmh_weights;

// Each activation row of a pass, its lane's 8 values from `at` on, against every vocab row's
// weights w: one fma per weight and row, in the canonical order. Of a pass's rows the first
// `present` are there; the others read the last of them again (lmh_matvec_rows).
LMH_FN lmh_tile lmh_fma_rows(lmh_matvec_params p, LMH_GLOBAL const lmh_u32 *x, lmh_weights w, lmh_u32 row0, lmh_u32 rows_per_pass, lmh_u32 present, lmh_u32 at, lmh_u32 load, lmh_tile acc) {
    for (lmh_u32 r = 0u; r < rows_per_pass; r++) {
        lmh_u32 row = row0 + (r < present ? r : present - 1u);
        lmh_f8 y = lmh_load_activations(x + (lmh_u64)row * p.hidden, at, p.hidden, load);
        for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
            for (lmh_u32 i = 0u; i < 8u; i++) acc.v[m][r] = lmh_fma(w.row[m].v[i], y.v[i], acc.v[m][r]);
        }
    }
    return acc;
}

// Chunk c of a pass, whose bytes in each vocab row start at vocab.row[m]: each decoded
// weight serves every row of the pass. Each lane's scales come from `table`, refilled for c,
// whose tables are `group` chunks, or with group 0 from its own unpacking. Every lane runs
// every whole chunk, so every lane takes each shuffle; a partial chunk has group 0.
// rows_per_pass, group and load are literals at every call, so the loops unroll and the
// arrays live in registers.
LMH_FN lmh_tile lmh_matvec_chunk(lmh_matvec_params p, lmh_u32 type, LMH_GLOBAL const lmh_u32 *x, lmh_vocab_rows vocab, lmh_scales table, lmh_u32 group, lmh_u32 row0, lmh_u32 rows_per_pass, lmh_u32 present, lmh_u32 c, lmh_u32 load, lmh_u32 lane, lmh_tile acc) {
    lmh_weights wv;
    if (group != 0u) {
        // Every row's shuffles before any decode, so their latencies overlap (measured: taken
        // one row at a time, no faster than no table, and up to 19% slower).
        lmh_u32 from = (c & (group - 1u)) * lmh_sub_blocks(type) + ((lane * lmh_sub_blocks(type)) >> 5); // holds ours
        for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
            table.v[m].d = lmh_as_float(lmh_shuffle(lmh_as_uint(table.v[m].d), from));
            table.v[m].m = lmh_has_min(type) != 0u ? lmh_as_float(lmh_shuffle(lmh_as_uint(table.v[m].m), from)) : 0.0f;
        }
    }
    for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
        lmh_scale_min s = group != 0u ? table.v[m] : lmh_lane_scale(type, vocab.row[m], lane);
        lmh_u32 skew = (vocab.skew[m] + c * lmh_chunk_bytes(type)) & 3u;
        wv.row[m] = lmh_decode(type, vocab.row[m], lane, skew, p.hidden - (c << 8), load, s);
    }
    return lmh_fma_rows(p, x, wv, row0, rows_per_pass, present, (c << 8) + (lane << 3), load, acc);
}

#if LMH_STAGES > 0 || LMH_BULK_STAGES > 0
// Where p lies from the 16-byte boundary below it: both rings copy 16-byte pieces from that
// boundary, so a stage holds p's bytes at this offset.
LMH_FN lmh_u32 lmh_skew16(LMH_GLOBAL const lmh_u8 *p) {
    return (lmh_u32)((lmh_u64)p & 15u);
}
#endif

#if LMH_STAGES > 0
// A stage holds one chunk of each of a simdgroup's vocab rows, each copied in 16-byte pieces
// from the 16-byte boundary at or below its first byte, in LMH_STAGE_ROW_BYTES (params.h).
// The prelude's LMH_STAGE_RING_DEFINE defines lmh_stage_ring(), this simdgroup's ring of
// LMH_STAGES stages.
#define LMH_STAGE_BYTES (LMH_VOCAB_ROWS_PER_SIMDGROUP * LMH_STAGE_ROW_BYTES)
LMH_STAGE_RING_DEFINE(LMH_STAGES * LMH_STAGE_BYTES)

// Chunk c of every vocab row into `stage`: lane l copies piece l of each row's window.
LMH_FN void lmh_stage_chunk(lmh_vocab_rows vocab, lmh_u32 chunk_bytes, lmh_u32 c, lmh_u8 *stage, lmh_u32 lane) {
    for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
        LMH_GLOBAL const lmh_u8 *chunk = vocab.row[m] + c * chunk_bytes;
        lmh_u32 skew = lmh_skew16(chunk);
        lmh_u32 at = lane << 4;
        if (at < skew + chunk_bytes) LMH_STAGE_COPY16(stage + m * LMH_STAGE_ROW_BYTES + at, chunk - skew + at);
    }
}

// lmh_matvec_whole_chunks for a quantized type, its weights read from the ring: chunk c in
// stage c % LMH_STAGES while chunks c + 1 .. c + LMH_STAGES - 1 are in flight. Copy group g
// holds chunk g (empty past the last), so waiting for all but the newest LMH_STAGES - 2
// groups completes chunk c for this lane, and the sync after it for every lane; a stage is
// refilled only after that sync, which every lane reaches after its last read of the stage.
// The last pass's reads all fed its butterfly, whose shuffles every lane has passed before
// this pass's first copies.
LMH_FN lmh_tile lmh_matvec_staged_chunks(lmh_matvec_params p, lmh_u32 type, LMH_GLOBAL const lmh_u32 *x, lmh_vocab_rows vocab, lmh_u32 row0, lmh_u32 rows_per_pass, lmh_u32 present, lmh_u32 load, lmh_u32 lane, lmh_tile acc) {
    lmh_u32 chunks = p.hidden >> 8;
    lmh_u32 chunk_bytes = lmh_chunk_bytes(type);
    lmh_u8 *ring = lmh_stage_ring();
    for (lmh_u32 c = 0u; c + 1u < LMH_STAGES; c++) {
        if (c < chunks) lmh_stage_chunk(vocab, chunk_bytes, c, ring + c * LMH_STAGE_BYTES, lane);
        LMH_STAGE_COMMIT();
    }
    lmh_u32 stage = 0u; // chunk c's
    lmh_u32 group = lmh_table_chunks(type);
    lmh_scales table = { { { 0.0f, 0.0f } } };
    for (lmh_u32 c = 0u; c < chunks; c++) {
        LMH_STAGE_WAIT(LMH_STAGES - 2u);
        LMH_STAGE_SYNC();
        lmh_u32 refill = stage == 0u ? LMH_STAGES - 1u : stage - 1u; // read for chunk c - 1
        if (c + LMH_STAGES - 1u < chunks) lmh_stage_chunk(vocab, chunk_bytes, c + LMH_STAGES - 1u, ring + refill * LMH_STAGE_BYTES, lane);
        LMH_STAGE_COMMIT();
        lmh_vocab_rows at; // chunk c in the weights
        lmh_vocab_rows staged; // whose bytes sit at the same offsets from 4-byte boundaries
        for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
            at.row[m] = vocab.row[m] + c * chunk_bytes;
            at.skew[m] = vocab.skew[m];
            staged.skew[m] = vocab.skew[m];
            staged.row[m] = ring + stage * LMH_STAGE_BYTES + m * LMH_STAGE_ROW_BYTES + lmh_skew16(at.row[m]);
        }
        table = lmh_refill_table(type, group, table, at, c, chunks - c, lane);
        acc = lmh_matvec_chunk(p, type, x, staged, table, group, row0, rows_per_pass, present, c, load, lane, acc);
        stage = stage + 1u == LMH_STAGES ? 0u : stage + 1u;
    }
    return acc;
}
#endif

#if LMH_RESIDENT > 0
// lmh_matvec_whole_chunks for a dense type from resident rows: chunk c + 1's weight words are
// loaded before chunk c's fmas, so a pass waits on memory once per chunk, not once per vocab
// row. Left to itself NVRTC loads F32's and BF16's rows one at a time into the same registers,
// each just before its decode (bench/results/cuda-h200.md).
LMH_FN lmh_tile lmh_matvec_resident_dense(lmh_matvec_params p, lmh_u32 type, LMH_GLOBAL const lmh_u32 *x, lmh_vocab_rows vocab, lmh_u32 row0, lmh_u32 rows_per_pass, lmh_u32 present, lmh_u32 lane, lmh_tile acc) {
    lmh_u32 chunks = p.hidden >> 8;
    lmh_u32 lane_bytes = lane << (type == LMH_TYPE_F32 ? 5u : 4u);
    lmh_dense_words next[LMH_VOCAB_ROWS_PER_SIMDGROUP];
    for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) next[m] = lmh_load_dense_words(vocab.row[m] + lane_bytes, type);
    for (lmh_u32 c = 0u; c < chunks; c++) {
        lmh_weights wv;
        for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
            wv.row[m] = lmh_dense_words_values(next[m], type);
            if (c + 1u < chunks) next[m] = lmh_load_dense_words(vocab.row[m] + (c + 1u) * lmh_chunk_bytes(type) + lane_bytes, type);
        }
        acc = lmh_fma_rows(p, x, wv, row0, rows_per_pass, present, (c << 8) + (lane << 3), LMH_LOAD_RESIDENT, acc);
    }
    return acc;
}
#endif

// The chunks of a pass that every lane fills, read as `load` says (a literal), in steps of
// LMH_CHUNKS_PER_STEP (1 or 2), then the odd one left.
LMH_FN lmh_tile lmh_matvec_whole_chunks(lmh_matvec_params p, lmh_u32 type, LMH_GLOBAL const lmh_u32 *x, lmh_vocab_rows vocab, lmh_u32 row0, lmh_u32 rows_per_pass, lmh_u32 present, lmh_u32 load, lmh_u32 lane, lmh_tile acc) {
#if LMH_RESIDENT > 0
    if (load == LMH_LOAD_RESIDENT && lmh_dense(type) != 0u) return lmh_matvec_resident_dense(p, type, x, vocab, row0, rows_per_pass, present, lane, acc);
#endif
#if LMH_STAGES > 0
    if (lmh_dense(type) == 0u) return lmh_matvec_staged_chunks(p, type, x, vocab, row0, rows_per_pass, present, load, lane, acc);
#endif
    lmh_u32 chunks = p.hidden >> 8;
    lmh_u32 group = lmh_table_chunks(type);
    lmh_scales table = { { { 0.0f, 0.0f } } };
    lmh_u32 c = 0u;
    for (; c + LMH_CHUNKS_PER_STEP <= chunks; c += LMH_CHUNKS_PER_STEP) {
#pragma unroll
        for (lmh_u32 k = 0u; k < LMH_CHUNKS_PER_STEP; k++) {
            table = lmh_refill_table(type, group, table, vocab, c + k, chunks - (c + k), lane);
            acc = lmh_matvec_chunk(p, type, x, vocab, table, group, row0, rows_per_pass, present, c + k, load, lane, acc);
            for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) vocab.row[m] += lmh_chunk_bytes(type);
        }
    }
    if (LMH_CHUNKS_PER_STEP > 1u && c < chunks) {
        table = lmh_refill_table(type, group, table, vocab, c, chunks - c, lane);
        acc = lmh_matvec_chunk(p, type, x, vocab, table, group, row0, rows_per_pass, present, c, load, lane, acc);
    }
    return acc;
}

// Whether a pass of `rows_per_pass` rows (a literal) of a kernel that decides by
// p.input_flushed reads the norm's output as it is (in rows read with 16-byte loads).
// Measured on an H200: from 4 rows per pass for quantized types and from 8 for F16 and BF16
// it took up to 13% off calls of N >= 4 (7-9% for most types at N = 4; Q8_0 at N = 8 and 16
// 2-3% slower, two others 1% slower at one N). For F32, and in passes of 1 and 2 rows, a
// second variant of the chunk loop made NVRTC schedule the first one worse (F32 and BF16 at
// N = 2 1.7 and 2.4 times slower), so those keep one.
LMH_FN lmh_u32 lmh_reads_normed(lmh_u32 type, lmh_u32 rows_per_pass) {
    if (type == LMH_TYPE_F32) return 0u;
    return rows_per_pass >= (lmh_dense(type) != 0u ? 8u : 4u) ? 1u : 0u;
}

// Where a matvec's input stands, a literal at every entry point: rows flushed as they are
// read (any hidden rows), rows past their flush point (the norm's output, read as they are),
// or as p.input_flushed says, in the passes lmh_reads_normed names. The first two make a
// kernel of one variant of the chunk loop: CUDA's modules of 1 and 2 rows per pass have an
// entry point for each (entries.cu), so their passes too can read the norm's output as it is.
#define LMH_INPUT_RAW 0u
#define LMH_INPUT_NORMED 1u
#define LMH_INPUT_PARAMS 2u
// x is resident rows (LMH_RESIDENT), of whole chunks: no partial chunk.
#define LMH_INPUT_RESIDENT 3u

// One pass: vocab rows [first, +LMH_VOCAB_ROWS_PER_SIMDGROUP), whose bytes start at `rows`
// (in the weights, or in a stage at the same offset from a 16-byte boundary), against
// activation rows [row0, +rows_per_pass), of which the first `present` are there (the others
// repeat the last of them) and the first `written` have their logits written (the others'
// go nowhere). The chunks every lane fills
// run without a bounds test, with 16-byte loads where rows allow them (activation rows of a
// multiple of 4 values, and dense weight rows of a multiple of 16 bytes, start 16-byte
// aligned: checked when recorded; quantized rows always hold a multiple of 32 values); a
// last, partial chunk (hidden not a multiple of 256) runs with a bounds test, and a lane
// whose values have ended stops there.
LMH_FN void lmh_matvec_pass(lmh_matvec_params p, lmh_u32 type, lmh_u32 input, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u8 *rows, LMH_GLOBAL lmh_u32 *out, lmh_u64 first, lmh_u32 row0, lmh_u32 rows_per_pass, lmh_u32 present, lmh_u32 written, lmh_u32 lane) {
    lmh_vocab_rows vocab;
    lmh_tile acc;
    for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
        lmh_u64 j = first + m < p.vocab ? first + m : p.vocab - 1u;
        vocab.row[m] = rows + (j - first) * p.row_bytes;
        vocab.skew[m] = (lmh_u32)(j * p.row_bytes) & 3u;
        for (lmh_u32 r = 0u; r < rows_per_pass; r++) acc.v[m][r] = 0.0f;
    }
    lmh_u32 wide = lmh_dense(type) == 0u || ((p.hidden & 3u) == 0u && (p.row_bytes & 15u) == 0u);
    lmh_u32 normed = input == LMH_INPUT_PARAMS ? (p.input_flushed != 0u && lmh_reads_normed(type, rows_per_pass) != 0u) : input;
    if (input == LMH_INPUT_RESIDENT) {
        acc = lmh_matvec_whole_chunks(p, type, x, vocab, row0, rows_per_pass, present, LMH_LOAD_RESIDENT, lane, acc);
    } else if (wide != 0u && normed != 0u) {
        acc = lmh_matvec_whole_chunks(p, type, x, vocab, row0, rows_per_pass, present, LMH_LOAD_NORMED, lane, acc);
    } else if (wide != 0u) {
        acc = lmh_matvec_whole_chunks(p, type, x, vocab, row0, rows_per_pass, present, LMH_LOAD_WIDE, lane, acc);
    } else {
        acc = lmh_matvec_whole_chunks(p, type, x, vocab, row0, rows_per_pass, present, LMH_LOAD_WHOLE, lane, acc);
    }
    lmh_u32 whole_chunks = p.hidden >> 8;
    if (whole_chunks < p.chunks && (whole_chunks << 8) + (lane << 3) < p.hidden) {
        for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) vocab.row[m] += whole_chunks * lmh_chunk_bytes(type);
        lmh_scales none = { { { 0.0f, 0.0f } } };
        acc = lmh_matvec_chunk(p, type, x, vocab, none, 0u, row0, rows_per_pass, present, whole_chunks, LMH_LOAD_PARTIAL, lane, acc);
    }
    for (lmh_u32 m = 0u; m < LMH_VOCAB_ROWS_PER_SIMDGROUP; m++) {
        for (lmh_u32 r = 0u; r < rows_per_pass; r++) {
            float logit = lmh_butterfly(acc.v[m][r]);
            if (lane == 0u && first + m < p.vocab && r < written) out[(lmh_u64)(row0 + r) * p.vocab + first + m] = lmh_as_uint(logit);
        }
    }
}

// The passes of one group of vocab rows, [first, +LMH_VOCAB_ROWS_PER_SIMDGROUP), whose bytes
// start at `rows`, over activation rows [row0, end): LMH_ROWS_PER_PASS at a time, then the
// rest. With LMH_PAD_REST the rest is one pass of the smallest size (1, 2, 4 or 8) that holds
// it, its missing rows repeating its last row and written nowhere: a pass reads its weights
// once whatever its rows, so this costs about what a full pass does, where passes of halving
// sizes (without it) read the weights once each. Each row's logits are its own fmas in the
// canonical order either way, so no bit changes.
LMH_FN void lmh_matvec_rows(lmh_matvec_params p, lmh_u32 type, lmh_u32 input, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u8 *rows, LMH_GLOBAL lmh_u32 *out, lmh_u64 first, lmh_u32 row0, lmh_u32 end, lmh_u32 lane) {
    for (; end - row0 >= LMH_ROWS_PER_PASS; row0 += LMH_ROWS_PER_PASS) lmh_matvec_pass(p, type, input, x, rows, out, first, row0, LMH_ROWS_PER_PASS, LMH_ROWS_PER_PASS, LMH_ROWS_PER_PASS, lane);
    if (LMH_PAD_REST == 0u) {
        if (LMH_ROWS_PER_PASS > 4u && end - row0 >= 4u) {
            lmh_matvec_pass(p, type, input, x, rows, out, first, row0, 4u, 4u, 4u, lane);
            row0 += 4u;
        }
        if (LMH_ROWS_PER_PASS > 2u && end - row0 >= 2u) {
            lmh_matvec_pass(p, type, input, x, rows, out, first, row0, 2u, 2u, 2u, lane);
            row0 += 2u;
        }
        if (LMH_ROWS_PER_PASS > 1u && end - row0 >= 1u) lmh_matvec_pass(p, type, input, x, rows, out, first, row0, 1u, 1u, 1u, lane);
        return;
    }
    lmh_u32 rest = end - row0;
    if (LMH_ROWS_PER_PASS > 4u && rest > 4u) {
        lmh_matvec_pass(p, type, input, x, rows, out, first, row0, LMH_ROWS_PER_PASS, rest, rest, lane);
    } else if (LMH_ROWS_PER_PASS > 2u && rest > 2u) {
        lmh_matvec_pass(p, type, input, x, rows, out, first, row0, 4u, rest, rest, lane);
    } else if (LMH_ROWS_PER_PASS > 2u && rest == 2u) {
        lmh_matvec_pass(p, type, input, x, rows, out, first, row0, 2u, 2u, 2u, lane);
    } else if (LMH_ROWS_PER_PASS > 1u && rest == 1u) {
        lmh_matvec_pass(p, type, input, x, rows, out, first, row0, 1u, 1u, 1u, lane);
    }
}

// Every row of the batch, for one group of vocab rows.
LMH_FN void lmh_matvec_group(lmh_matvec_params p, lmh_u32 type, lmh_u32 input, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u8 *rows, LMH_GLOBAL lmh_u32 *out, lmh_u64 first, lmh_u32 lane) {
    lmh_matvec_rows(p, type, input, x, rows, out, first, 0u, p.rows, lane);
}

#if LMH_BULK_STAGES > 0
// Bytes of a bulk stage: a group's rows from the 16-byte boundary at or below their first
// byte to the one at or above their last (bulk copies move 16-byte pieces between 16-byte
// aligned addresses; the weights' allocation holds every piece around their bytes).
LMH_FN lmh_u64 lmh_bulk_stage_bytes(lmh_u32 row_bytes) {
    return ((lmh_u64)LMH_VOCAB_ROWS_PER_SIMDGROUP * row_bytes + 30u) & ~(lmh_u64)15u;
}

// Starts the copy of the group at vocab row `first` into stage `stage` (at `to`); one lane
// issues it.
LMH_FN void lmh_bulk_fetch(lmh_matvec_params p, LMH_GLOBAL const lmh_u8 *w, lmh_u64 first, lmh_u32 stage, lmh_u8 *to) {
    lmh_u64 rows = p.vocab - first < LMH_VOCAB_ROWS_PER_SIMDGROUP ? p.vocab - first : LMH_VOCAB_ROWS_PER_SIMDGROUP;
    LMH_GLOBAL const lmh_u8 *from = w + first * p.row_bytes;
    lmh_u32 skew = lmh_skew16(from);
    LMH_BULK_COPY(stage, to, from - skew, (lmh_u32)((skew + rows * p.row_bytes + 15u) & ~(lmh_u64)15u));
}

// lmh_matvec with each group of vocab rows read from the ring: group i (this simdgroup's
// i-th) in stage i % LMH_BULK_STAGES, copied while groups i - LMH_BULK_STAGES + 1 .. i - 1
// are computed. A stage is refilled only after the sync that ends the group read from it,
// which every lane reaches after its last read of it.
LMH_FN void lmh_matvec_bulk(lmh_matvec_params p, lmh_u32 type, lmh_u32 input, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u8 *w, LMH_GLOBAL lmh_u32 *out, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane, lmh_u8 *ring, lmh_u64 stage_bytes) {
    lmh_u64 stride = (lmh_u64)simdgroups * LMH_VOCAB_ROWS_PER_SIMDGROUP;
    lmh_u64 first = (lmh_u64)simdgroup * LMH_VOCAB_ROWS_PER_SIMDGROUP;
    LMH_BULK_START(lane);
    for (lmh_u32 s = 0u; s + 1u < LMH_BULK_STAGES; s++) {
        if (lane == 0u && first + s * stride < p.vocab) lmh_bulk_fetch(p, w, first + s * stride, s, ring + s * stage_bytes);
    }
    lmh_u32 stage = 0u;
    lmh_u32 phase = 0u;
    for (; first < p.vocab; first += stride) {
        lmh_u64 ahead = first + (LMH_BULK_STAGES - 1u) * stride;
        lmh_u32 refill = stage == 0u ? LMH_BULK_STAGES - 1u : stage - 1u; // read for the group before
        if (lane == 0u && ahead < p.vocab) lmh_bulk_fetch(p, w, ahead, refill, ring + refill * stage_bytes);
        LMH_BULK_WAIT(stage, phase);
        lmh_matvec_group(p, type, input, x, ring + stage * stage_bytes + lmh_skew16(w + first * p.row_bytes), out, first, lane);
        LMH_BULK_SYNC();
        stage = stage + 1u == LMH_BULK_STAGES ? 0u : stage + 1u;
        phase = stage == 0u ? phase ^ 1u : phase;
    }
}
#endif

#if LMH_RESIDENT > 0
// A lane's 8 values of a chunk, stored where lmh_area_values reads them: `to` is the
// chunk's place plus lane·16 bytes.
LMH_FN void lmh_store_lane(lmh_u8 *to, lmh_f8 v) {
    lmh_words4 lo = { lmh_as_uint(v.v[0]), lmh_as_uint(v.v[1]), lmh_as_uint(v.v[2]), lmh_as_uint(v.v[3]) };
    lmh_words4 hi = { lmh_as_uint(v.v[4]), lmh_as_uint(v.v[5]), lmh_as_uint(v.v[6]), lmh_as_uint(v.v[7]) };
    lmh_store_words4(to, lo);
    lmh_store_words4(to + 512u, hi);
}

// Bytes of a threadgroup's resident rows: a pass of activation rows of `hidden` f32 values.
LMH_FN lmh_u64 lmh_resident_bytes(lmh_u32 hidden) {
    return (lmh_u64)LMH_ROWS_PER_PASS * hidden * 4u;
}

// Whether a matvec runs from resident rows: whole chunks only, and an area that holds a pass
// (the host gives one only where the kernel is to run from it; 0 bytes otherwise).
LMH_FN lmh_u32 lmh_runs_resident(lmh_matvec_params p) {
    return (p.hidden & 255u) == 0u && lmh_resident_bytes(p.hidden) <= LMH_THREADGROUP_AREA_BYTES();
}

// Activation rows [row0, +rows) of x copied into `area` (row r at r·hidden·4, chunk by chunk in
// lmh_area_values's layout), flushed as a pass reads them, by simdgroup `local` of the
// threadgroup's `simdgroups`: rows local, local + simdgroups, ...; with LMH_PAD_RESIDENT a whole
// pass of them, the last row again where the tile has no more.
LMH_FN void lmh_stage_rows(lmh_matvec_params p, LMH_GLOBAL const lmh_u32 *x, lmh_u32 row0, lmh_u32 rows, lmh_u8 *area, lmh_u32 local, lmh_u32 simdgroups, lmh_u32 lane) {
#if LMH_PAD_RESIDENT
    for (lmh_u32 r = local; r < LMH_ROWS_PER_PASS; r += simdgroups) {
        lmh_u32 from = r < rows ? r : rows - 1u;
#else
    for (lmh_u32 r = local; r < rows; r += simdgroups) {
        lmh_u32 from = r;
#endif
        LMH_GLOBAL const lmh_u32 *row = x + (lmh_u64)(row0 + from) * p.hidden;
        lmh_u8 *to = area + (lmh_u64)r * (p.hidden << 2) + (lane << 4);
        for (lmh_u32 c = 0u; c < (p.hidden >> 8); c++) lmh_store_lane(to + (c << 10), lmh_load_activations(row, (c << 8) + (lane << 3), p.hidden, LMH_LOAD_WIDE));
    }
}

// lmh_matvec from resident rows: the batch in tiles of a pass, T of them; threadgroup g of G
// takes tile g mod T (and g + G, ... where G < T), copies its rows in, and its simdgroups then
// run every vocab group that falls to them among the threadgroups of that tile, each a pass
// against the resident rows, every value of them as lmh_matvec computes it. Threadgroups of
// one tile and of the next run side by side over the same vocab rows, so a weight read again
// for another tile is mostly found in the device's cache. Two syncs a tile: the rows are whole
// before any pass reads them, and every pass is done before the next tile's are copied.
LMH_FN void lmh_matvec_resident(lmh_matvec_params p, lmh_u32 type, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u8 *w, LMH_GLOBAL lmh_u32 *out, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_u32 local = simdgroup & ((1u << LMH_THREADGROUP_SHIFT) - 1u);
    lmh_u32 group = simdgroup >> LMH_THREADGROUP_SHIFT;
    lmh_u32 groups = simdgroups >> LMH_THREADGROUP_SHIFT;
    lmh_u32 tiles = (p.rows + LMH_ROWS_PER_PASS - 1u) >> 3;
    lmh_u8 *area = LMH_THREADGROUP_AREA();
    // The first tile, and this threadgroup's place among the threadgroups of that tile (by
    // steps, once: the kernel source divides by shifts only; a later tile has none beside it).
    lmh_u32 first_tile = group;
    lmh_u32 place = 0u;
    for (; first_tile >= tiles; first_tile -= tiles) place++;
    for (lmh_u32 t = first_tile; t < tiles; t += groups) {
        lmh_u32 row0 = t << 3;
        lmh_u32 rows = p.rows - row0 < LMH_ROWS_PER_PASS ? p.rows - row0 : LMH_ROWS_PER_PASS;
        lmh_u32 sharers = 0u;
        for (lmh_u32 g = t; g < groups; g += tiles) sharers++;
        sharers = sharers > 0u ? sharers : 1u;
        lmh_stage_rows(p, x, row0, rows, area, local, 1u << LMH_THREADGROUP_SHIFT, lane);
        LMH_THREADGROUP_SYNC();
        lmh_u64 stride = (lmh_u64)(sharers << LMH_THREADGROUP_SHIFT) * LMH_VOCAB_ROWS_PER_SIMDGROUP;
        for (lmh_u64 first = (lmh_u64)((place << LMH_THREADGROUP_SHIFT) + local) * LMH_VOCAB_ROWS_PER_SIMDGROUP; first < p.vocab; first += stride) {
#if LMH_PAD_RESIDENT
            lmh_matvec_pass(p, type, LMH_INPUT_RESIDENT, (LMH_GLOBAL const lmh_u32 *)area, w + first * p.row_bytes, out + (lmh_u64)row0 * p.vocab, first, 0u, LMH_ROWS_PER_PASS, LMH_ROWS_PER_PASS, rows, lane);
#else
            lmh_matvec_rows(p, type, LMH_INPUT_RESIDENT, (LMH_GLOBAL const lmh_u32 *)area, w + first * p.row_bytes, out + (lmh_u64)row0 * p.vocab, first, 0u, rows, lane);
#endif
        }
        LMH_THREADGROUP_SYNC();
    }
}
#endif

// NUMERICS.md §3: out[r, j] = the canonical dot product of row r of x (flushed) with
// vocab row j of w, decoded as `type`, a group of LMH_VOCAB_ROWS_PER_SIMDGROUP vocab rows at
// a time; `input` (LMH_INPUT_*) says whether x is past its flush point.
LMH_FN void lmh_matvec(lmh_matvec_params p, lmh_u32 type, lmh_u32 input, LMH_GLOBAL const lmh_u32 *x, LMH_GLOBAL const lmh_u8 *w, LMH_GLOBAL lmh_u32 *out, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
#if LMH_BULK_STAGES > 0
    lmh_u64 stage_bytes = lmh_bulk_stage_bytes(p.row_bytes);
    if (lmh_dense(type) == 0u && LMH_BULK_STAGES * stage_bytes <= LMH_BULK_RING_BYTES()) {
        lmh_matvec_bulk(p, type, input, x, w, out, simdgroup, simdgroups, lane, LMH_BULK_RING(), stage_bytes);
        return;
    }
#endif
#if LMH_RESIDENT > 0
    if (lmh_runs_resident(p) != 0u) {
        lmh_matvec_resident(p, type, x, w, out, simdgroup, simdgroups, lane);
        return;
    }
#endif
    lmh_u64 stride = (lmh_u64)simdgroups * LMH_VOCAB_ROWS_PER_SIMDGROUP;
    for (lmh_u64 first = (lmh_u64)simdgroup * LMH_VOCAB_ROWS_PER_SIMDGROUP; first < p.vocab; first += stride) {
        if (LMH_PREFETCH_ROWS != 0u) {
            lmh_u64 rows = p.vocab - first < LMH_VOCAB_ROWS_PER_SIMDGROUP ? p.vocab - first : LMH_VOCAB_ROWS_PER_SIMDGROUP;
            lmh_prefetch_bytes(w + first * p.row_bytes, rows * p.row_bytes, lane);
        }
        lmh_matvec_group(p, type, input, x, w + first * p.row_bytes, out, first, lane);
    }
}

// NUMERICS.md §5 in place: flush(tanh(flush(flush(z)·inv_cap))·cap), cap and inv_cap flushed.
LMH_FN void lmh_softcap(lmh_softcap_params p, LMH_GLOBAL lmh_u32 *data, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    float cap = lmh_flush(lmh_as_uint(p.cap), LMH_VALUE_MIN);
    float inv_cap = lmh_flush(lmh_as_uint(p.inv_cap), LMH_VALUE_MIN);
    lmh_u64 threads = (lmh_u64)simdgroups << 5;
    for (lmh_u64 i = ((lmh_u64)simdgroup << 5) + lane; i < p.values; i += threads) {
        float z = lmh_flush(data[i], LMH_VALUE_MIN);
        float u = lmh_flush(lmh_as_uint(z * inv_cap), LMH_VALUE_MIN);
        float t = lmh_tanh(u);
        lmh_u32 r = lmh_as_uint(t * cap);
        // A NaN leaves as the canonical NaN, as on the CPU (a CUDA multiply makes 0x7FFFFFFF).
        r = (r & 0x7FFFFFFFu) > LMH_POSITIVE_INF ? LMH_CANONICAL_NAN : r;
        data[i] = lmh_as_uint(lmh_flush(r, LMH_VALUE_MIN));
    }
}

// The sum of a lane's count over the simdgroup (integers: any order is exact).
LMH_FN lmh_u32 lmh_simdgroup_sum(lmh_u32 count) {
    for (lmh_u32 mask = 16u; mask > 0u; mask >>= 1) count += lmh_shuffle_xor(count, mask);
    return count;
}

// counts[r·segments + k] = the NaN and ±Inf values of segment k of row r (values 32k + lane
// + 32·segments·i), one simdgroup per segment; segments is a power of two, and with one,
// counts[r] is the row's count. More segments give a long row to more simdgroups, so a GPU
// scans it in parallel; lmh_sum_segments adds them up.
LMH_FN void lmh_count_non_finite(lmh_count_non_finite_params p, LMH_GLOBAL const lmh_u32 *data, LMH_GLOBAL lmh_u32 *counts, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_u32 shift = 0u;
    while ((1u << shift) < p.segments) shift++;
    lmh_u64 stride = (lmh_u64)p.segments << 5;
    for (lmh_u64 g = simdgroup; g < ((lmh_u64)p.rows << shift); g += simdgroups) {
        LMH_GLOBAL const lmh_u32 *row = data + (g >> shift) * p.row_values;
        lmh_u32 count = 0u;
        for (lmh_u64 i = ((g & (p.segments - 1u)) << 5) + lane; i < p.row_values; i += stride) count += (row[i] & LMH_POSITIVE_INF) == LMH_POSITIVE_INF ? 1u : 0u;
        count = lmh_simdgroup_sum(count);
        if (lane == 0u) counts[g] = count;
    }
}

// counts[r] = the sum of partials[r·segments, +segments) (lmh_count_non_finite's partial
// counts), one simdgroup per row.
LMH_FN void lmh_sum_segments(lmh_count_non_finite_params p, LMH_GLOBAL const lmh_u32 *partials, LMH_GLOBAL lmh_u32 *counts, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    for (lmh_u32 r = simdgroup; r < p.rows; r += simdgroups) {
        LMH_GLOBAL const lmh_u32 *row = partials + (lmh_u64)r * p.segments;
        lmh_u32 count = 0u;
        for (lmh_u32 k = lane; k < p.segments; k += 32u) count += row[k];
        count = lmh_simdgroup_sum(count);
        if (lane == 0u) counts[r] = count;
    }
}
