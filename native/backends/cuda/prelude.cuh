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

// kernels.h's bulk ring (LMH_BULK_STAGES): the block's dynamic shared memory, split evenly
// between its warps (the host sizes it, 0 for none); a warp's part starts with an mbarrier
// per stage, then its stages. Lane 0 starts each copy (cp.async.bulk, sm_90: the SM's tensor
// memory accelerator moves the bytes and signals the stage's barrier with their count);
// every lane waits on the barrier's phase, which orders the copy's bytes before its reads.
#ifdef __CUDA_ARCH__
extern __shared__ __align__(16) lmh_u8 lmh_cuda_dynamic_shared[];
#else
extern lmh_u8 lmh_cuda_dynamic_shared[]; // the host syntax check's stand-in
#endif
LMH_FN lmh_u32 lmh_cuda_dynamic_shared_bytes(void) {
    lmh_u32 bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
    return bytes;
}
#define LMH_CUDA_BULK_BARRIER_BYTES 64u
LMH_FN lmh_u32 lmh_cuda_warp_shared_bytes(void) {
    lmh_u32 bytes = lmh_cuda_dynamic_shared_bytes();
    lmh_u32 shift = 0u; // a block holds a power of two of warps (the host's block size)
    while ((32u << shift) < blockDim.x) shift++;
    return (bytes >> shift) & ~15u;
}
LMH_FN lmh_u8 *lmh_cuda_warp_shared(void) {
    return lmh_cuda_dynamic_shared + (threadIdx.x >> 5) * lmh_cuda_warp_shared_bytes();
}
LMH_FN lmh_u32 lmh_cuda_shared_address(const void *p) {
    return (lmh_u32)__cvta_generic_to_shared(p);
}
LMH_FN lmh_u32 lmh_cuda_bulk_barrier(lmh_u32 stage) {
    return lmh_cuda_shared_address(lmh_cuda_warp_shared()) + 8u * stage;
}
LMH_FN lmh_u32 lmh_cuda_bulk_ring_bytes(void) {
    lmh_u32 bytes = lmh_cuda_warp_shared_bytes();
    return bytes > LMH_CUDA_BULK_BARRIER_BYTES ? bytes - LMH_CUDA_BULK_BARRIER_BYTES : 0u;
}
LMH_FN void lmh_cuda_bulk_start(lmh_u32 stages, lmh_u32 lane) {
    if (lane == 0u) {
        for (lmh_u32 s = 0u; s < stages; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" : : "r"(lmh_cuda_bulk_barrier(s)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" : : : "memory");
    }
    __syncwarp();
}
LMH_FN void lmh_cuda_bulk_copy(lmh_u32 stage, lmh_u8 *shared, const lmh_u8 *global, lmh_u32 bytes) {
    lmh_u32 barrier = lmh_cuda_bulk_barrier(stage);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" : : "r"(barrier), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 : : "r"(lmh_cuda_shared_address(shared)), "l"(__cvta_generic_to_global(global)), "r"(bytes), "r"(barrier) : "memory");
}
LMH_FN void lmh_cuda_bulk_wait(lmh_u32 stage, lmh_u32 phase) {
    lmh_u32 barrier = lmh_cuda_bulk_barrier(stage);
    lmh_u32 done = 0u;
    while (done == 0u) {
        asm volatile("{\n\t.reg .pred complete;\n\tmbarrier.try_wait.parity.shared::cta.b64 complete, [%1], %2;\n\tselp.u32 %0, 1, 0, complete;\n\t}"
                     : "=r"(done) : "r"(barrier), "r"(phase) : "memory");
    }
}
#define LMH_BULK_RING() (lmh_cuda_warp_shared() + LMH_CUDA_BULK_BARRIER_BYTES)
#define LMH_BULK_RING_BYTES() lmh_cuda_bulk_ring_bytes()
#define LMH_BULK_START(lane) lmh_cuda_bulk_start(LMH_BULK_STAGES, (lane))
#define LMH_BULK_COPY(stage, shared, global, bytes) lmh_cuda_bulk_copy((stage), (shared), (global), (bytes))
#define LMH_BULK_WAIT(stage, phase) lmh_cuda_bulk_wait((stage), (phase))
#define LMH_BULK_SYNC() __syncwarp()

// kernels.h's resident rows (LMH_RESIDENT): the block's dynamic
// shared memory, whole (the host sizes it, 0 for none), written by 16-byte stores; its warps
// meet at __syncthreads. The host passes LMH_THREADGROUP_SHIFT, log2 of its warps per block.
#define LMH_THREADGROUP_AREA() lmh_cuda_dynamic_shared
#define LMH_THREADGROUP_AREA_BYTES() lmh_cuda_dynamic_shared_bytes()
#define LMH_THREADGROUP_SYNC() __syncthreads()

// Aligned little-endian loads from a byte buffer: p is even for lmh_load16 and a multiple
// of 4 for lmh_load32 (kernels.h says why each address is).
LMH_FN lmh_u32 lmh_load16(const lmh_u8 *p) {
    return *(const unsigned short *)p;
}

LMH_FN lmh_u32 lmh_load32(const lmh_u8 *p) {
    return *(const lmh_u32 *)p;
}

// Two words from an 8-byte aligned address, in one load.
typedef uint2 lmh_words2;

LMH_FN lmh_words2 lmh_load_words2(const lmh_u8 *p) {
    return *(const uint2 *)p;
}

// Four words from a 16-byte aligned address, in one load.
typedef uint4 lmh_words4;

LMH_FN lmh_words4 lmh_load_words4(const lmh_u32 *p) {
    return *(const uint4 *)p;
}

// Four words to a 16-byte aligned address, in one store.
LMH_FN void lmh_store_words4(lmh_u8 *p, lmh_words4 v) {
    *(uint4 *)p = v;
}

// All 32 lanes of the warp take part in every shuffle (the kernels never diverge around one).
LMH_FN lmh_u32 lmh_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return __shfl_xor_sync(0xFFFFFFFFu, bits, (int)mask);
}

LMH_FN lmh_u32 lmh_shuffle(lmh_u32 bits, lmh_u32 source) {
    return __shfl_sync(0xFFFFFFFFu, bits, (int)source);
}
