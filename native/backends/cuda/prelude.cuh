#pragma METAL fp contract(off)
// The CUDA target of the kernel source (native/kernels/kernels.h), for NVRTC. The backend
// compiles prelude.cuh, params.h, kernels.h and entries.cu as one source (kernels/sources.zig)
// with --fmad=false, so no multiply and add are contracted and every fma is written; the
// flush points make the result the same with --ftz=true or false.

typedef unsigned char lmh_u8;
typedef unsigned int lmh_u32;
typedef unsigned long long lmh_u64;

#define LMH_FN static __device__ __forceinline__
#define LMH_GLOBAL
#define LMH_STATIC_ASSERT(condition, message) static_assert(condition, message)
// No LMH_OFFSETOF: NVRTC has no offsetof (params.h checks offsets where there is one).

LMH_FN float lmh_as_float(lmh_u32 bits) {
    return __uint_as_float(bits);
}

LMH_FN lmh_u32 lmh_as_uint(float value) {
    return __float_as_uint(value);
}

LMH_FN float lmh_fma(float a, float b, float c) {
    return __fmaf_rn(a, b, c);
}

// All 32 lanes of the warp take part in every shuffle (the kernels never diverge around one).
LMH_FN lmh_u32 lmh_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return __shfl_xor_sync(0xFFFFFFFFu, bits, (int)mask);
}
