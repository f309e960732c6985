#pragma METAL fp contract(off)
// The Metal target of the kernel source (native/kernels/kernels.h). The backend compiles
// prelude.metal, params.h, kernels.h and entries.metal as one source (native/kernels/
// sources.zig) with newLibraryWithSource and MTLMathModeSafe. Safe math still contracts
// a*b+c within a statement (measured on M2 and M4), so the pragma above comes first and
// the kernel source keeps one rounding per statement. Apple GPUs flush subnormals; the
// flush points of docs/NUMERICS.md keep every value of the computation out of their range.
#include <metal_stdlib>
using namespace metal;
#if __METAL_VERSION__ >= 320
#pragma METAL fp math_mode(safe)
#endif

typedef uchar lmh_u8;
typedef uint lmh_u32;
typedef ulong lmh_u64;

#define LMH_FN static inline
#define LMH_GLOBAL device
#define LMH_STATIC_ASSERT(condition, message) static_assert(condition, message)
#define LMH_OFFSETOF(type, field) __builtin_offsetof(type, field)

// The matvec tuning the Metal backend dispatches for (backends/metal/shapes.zig checks it):
// 4 vocab rows per simdgroup, 4 activation rows per pass, so one kernel keeps the
// registers of 16 accumulators whatever N is. Other values give the same bits; a Mac run
// decides whether more rows per pass pay there (CUDA keeps one module per pass size).
#define LMH_VOCAB_ROWS_PER_SIMDGROUP 4u
#define LMH_ROWS_PER_PASS 4u

LMH_FN float lmh_as_float(lmh_u32 bits) {
    return as_type<float>(bits);
}

LMH_FN lmh_u32 lmh_as_uint(float value) {
    return as_type<uint>(value);
}

LMH_FN float lmh_fma(float a, float b, float c) {
    return fma(a, b, c);
}

LMH_FN float lmh_abs(float value) {
    return fabs(value);
}

// Aligned little-endian loads from a byte buffer: p is even for lmh_load16 and a multiple
// of 4 for lmh_load32 (kernels.h says why each address is).
LMH_FN lmh_u32 lmh_load16(device const lmh_u8 *p) {
    return *(device const ushort *)p;
}

LMH_FN lmh_u32 lmh_load32(device const lmh_u8 *p) {
    return *(device const uint *)p;
}

// Two words from an 8-byte aligned address, in one load.
typedef uint2 lmh_words2;

LMH_FN lmh_words2 lmh_load_words2(device const lmh_u8 *p) {
    return *(device const uint2 *)p;
}

// Four words from a 16-byte aligned address, in one load.
typedef uint4 lmh_words4;

LMH_FN lmh_words4 lmh_load_words4(device const lmh_u32 *p) {
    return *(device const uint4 *)p;
}

// All 32 lanes of the simdgroup take part in every shuffle (the kernels never diverge
// around one); the backend checks threadExecutionWidth == 32.
LMH_FN lmh_u32 lmh_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return simd_shuffle_xor(bits, (ushort)mask);
}

LMH_FN lmh_u32 lmh_shuffle(lmh_u32 bits, lmh_u32 source) {
    return simd_shuffle(bits, (ushort)source);
}
