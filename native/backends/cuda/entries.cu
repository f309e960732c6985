#pragma METAL fp contract(off)
// CUDA entry points: the registry's kernel names (core/registry.zig), parameters by value,
// then the buffers in the order of the ABI call. Blocks are 1-D with a multiple of 32
// threads; warp w of the grid is simdgroup w.

#define LMH_CUDA_IDS                                                \
    lmh_u32 lane = threadIdx.x & 31u;                               \
    lmh_u32 simdgroup = (blockIdx.x * blockDim.x + threadIdx.x) >> 5; \
    lmh_u32 simdgroups = (gridDim.x * blockDim.x) >> 5;

extern "C" __global__ void rms_norm_f32(lmh_rms_norm_params p, const lmh_u32 *x, const lmh_u32 *weight, lmh_u32 *y) {
    LMH_CUDA_IDS
    lmh_rms_norm(p, x, weight, y, simdgroup, simdgroups, lane);
}

extern "C" __global__ void softcap_f32(lmh_softcap_params p, lmh_u32 *data) {
    LMH_CUDA_IDS
    lmh_softcap(p, data, simdgroup, simdgroups, lane);
}

extern "C" __global__ void count_non_finite_f32(lmh_count_non_finite_params p, const lmh_u32 *data, lmh_u32 *counts) {
    LMH_CUDA_IDS
    lmh_count_non_finite(p, data, counts, simdgroup, simdgroups, lane);
}

#define LMH_CUDA_MATVEC(name, type)                                                                            \
    extern "C" __global__ void matvec_##name##_f32(lmh_matvec_params p, const lmh_u32 *x, const lmh_u8 *w, lmh_u32 *out) { \
        LMH_CUDA_IDS                                                                                           \
        lmh_matvec(p, type, x, w, out, simdgroup, simdgroups, lane);                                           \
    }
LMH_CUDA_MATVEC(F32, LMH_TYPE_F32)
LMH_CUDA_MATVEC(F16, LMH_TYPE_F16)
LMH_CUDA_MATVEC(Q4_0, LMH_TYPE_Q4_0)
LMH_CUDA_MATVEC(Q5_0, LMH_TYPE_Q5_0)
LMH_CUDA_MATVEC(Q5_1, LMH_TYPE_Q5_1)
LMH_CUDA_MATVEC(Q8_0, LMH_TYPE_Q8_0)
LMH_CUDA_MATVEC(Q2_K, LMH_TYPE_Q2_K)
LMH_CUDA_MATVEC(Q3_K, LMH_TYPE_Q3_K)
LMH_CUDA_MATVEC(Q4_K, LMH_TYPE_Q4_K)
LMH_CUDA_MATVEC(Q5_K, LMH_TYPE_Q5_K)
LMH_CUDA_MATVEC(Q6_K, LMH_TYPE_Q6_K)
LMH_CUDA_MATVEC(IQ4_NL, LMH_TYPE_IQ4_NL)
LMH_CUDA_MATVEC(IQ4_XS, LMH_TYPE_IQ4_XS)
LMH_CUDA_MATVEC(BF16, LMH_TYPE_BF16)
