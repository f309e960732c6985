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

LMH_FN float lmh_abs(float value) {
    return fabsf(value);
}

// kernels.h's codes: bytes (byte i of word, 0, 0, 0x4B) in one prmt.
#define LMH_BYTE_FLOAT_BITS(word, i) __byte_perm((word), 0x4B000000u, 0x7440u | (i))

// kernels.h's IQ4 table (four words), four codes at once: prmt picks bytes by the low 3
// bits of each selector nibble, so the codes' low 3 bits, one to a nibble, select from
// entries 0-7 and from entries 8-15, and each code's bit 3 chooses between the two.
LMH_FN lmh_u32 lmh_cuda_iq4_bytes(lmh_u32 codes, lmh_u32 t0, lmh_u32 t1, lmh_u32 t2, lmh_u32 t3) {
    lmh_u32 low3 = codes & 0x07070707u;
    lmh_u32 selector = __byte_perm(low3 | (low3 >> 4), 0u, 0x4420u);
    lmh_u32 low = __byte_perm(t0, t1, selector);
    lmh_u32 high = __byte_perm(t2, t3, selector);
    lmh_u32 upper = ((codes >> 3) & 0x01010101u) * 0xFFu;
    return (low & ~upper) | (high & upper);
}
#define LMH_IQ4_BYTES(codes) lmh_cuda_iq4_bytes((codes), LMH_IQ4_TABLE0, LMH_IQ4_TABLE1, LMH_IQ4_TABLE2, LMH_IQ4_TABLE3)

// f16 bits to f32 by the hardware conversion: exact (an f16 subnormal is a normal f32), and
// cvt without .ftz keeps f16 subnormals whatever --ftz says. kernels.h's lmh_f16 uses it.
// (Device code only: the host syntax check keeps the portable definition.)
#ifdef __CUDA_ARCH__
LMH_FN float lmh_cuda_f16_to_f32(lmh_u32 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
}
#define LMH_F16_TO_F32 lmh_cuda_f16_to_f32
#endif

// kernels.h's prefetch hint: the 128-byte line holding p into L2 (a hint: no value changes).
#define LMH_PREFETCH(p) asm volatile("prefetch.L2 [%0];" : : "l"(p))

// kernels.h's staging (LMH_STAGES): each warp's ring in shared memory (the block's warps side
// by side), filled by cp.async 16 bytes at a time (past L1), each lane's copies completed by
// its commit and wait groups, and seen by the other lanes after __syncwarp.
#define LMH_STAGE_RING_DEFINE(bytes)                                                         \
    LMH_FN lmh_u8 *lmh_stage_ring(void) {                                                    \
        __shared__ __align__(16) lmh_u8 ring[(LMH_CUDA_BLOCK_THREADS >> 5) * (bytes)];       \
        return ring + (threadIdx.x >> 5) * (bytes);                                          \
    }
LMH_FN void lmh_cuda_stage_copy16(lmh_u8 *shared, const lmh_u8 *global) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" : : "r"((lmh_u32)__cvta_generic_to_shared(shared)), "l"(global) : "memory");
}
#define LMH_STAGE_COPY16(shared, global) lmh_cuda_stage_copy16((shared), (global))
#define LMH_STAGE_COMMIT() asm volatile("cp.async.commit_group;" : : : "memory")
#define LMH_STAGE_WAIT(newest) asm volatile("cp.async.wait_group %0;" : : "n"(newest) : "memory")
#define LMH_STAGE_SYNC() __syncwarp()

// Aligned little-endian loads from a byte buffer: p is even for lmh_load16 and a multiple
// of 4 for lmh_load32 (kernels.h says why each address is).
LMH_FN lmh_u32 lmh_load16(const lmh_u8 *p) {
    return *(const unsigned short *)p;
}

LMH_FN lmh_u32 lmh_load32(const lmh_u8 *p) {
    return *(const lmh_u32 *)p;
}

// Four words from a 16-byte aligned address, in one load.
typedef uint4 lmh_words4;

LMH_FN lmh_words4 lmh_load_words4(const lmh_u32 *p) {
    return *(const uint4 *)p;
}

// All 32 lanes of the warp take part in every shuffle (the kernels never diverge around one).
LMH_FN lmh_u32 lmh_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return __shfl_xor_sync(0xFFFFFFFFu, bits, (int)mask);
}

LMH_FN lmh_u32 lmh_shuffle(lmh_u32 bits, lmh_u32 source) {
    return __shfl_sync(0xFFFFFFFFu, bits, (int)source);
}
