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

// The backend's second step of a count split into segments (not a registry kernel).
extern "C" __global__ void sum_segments_u32(lmh_count_non_finite_params p, const lmh_u32 *partials, lmh_u32 *counts) {
    LMH_CUDA_IDS
    lmh_sum_segments(p, partials, counts, simdgroup, simdgroups, lane);
}

// The lane layout's copy of a head (kernels.h LMH_LANE_LAYOUT), made once per head: p names
// the head's rows as its matvec does (not a registry kernel).
extern "C" __global__ void lane_relayout(lmh_matvec_params p, const lmh_u8 *w, lmh_u8 *to) {
    LMH_CUDA_IDS
    lmh_lane_relayout(p, w, to, simdgroup, simdgroups, lane);
}

// Occupancy: with LMH_CUDA_MIN_BLOCKS > 0, NVRTC caps the matvec's registers so that that
// many blocks of LMH_CUDA_BLOCK_THREADS threads fit one SM (the backend's tuning; it passes
// both, and its block size is the one definition of the latter).
#ifndef LMH_CUDA_MIN_BLOCKS
#define LMH_CUDA_MIN_BLOCKS 0u
#endif
#if LMH_CUDA_MIN_BLOCKS > 0
#define LMH_CUDA_MATVEC_BOUNDS __launch_bounds__(LMH_CUDA_BLOCK_THREADS, LMH_CUDA_MIN_BLOCKS)
#else
#define LMH_CUDA_MATVEC_BOUNDS
#endif

// The head types a module holds, a bit per type id: the backend compiles a module per pass size
// and kernel shape (vocab rows per warp, blocks per SM), for the types that take that shape.
// Another type's entry point only traps, so it costs NVRTC nothing and a wrong lookup cannot
// pass unseen.
#ifndef LMH_CUDA_MATVEC_TYPES
#define LMH_CUDA_MATVEC_TYPES 0xFFFFFFFFu
#endif

// The matvec entry points. A module with LMH_CUDA_NORMED_ENTRY (the backend's choice: those of 1
// and 2 rows per pass) has two a type: for any hidden rows, and (_normed) for the norm's output,
// read as it is (kernels.h LMH_INPUT_*); the backend picks by input_flushed. Measured on an H200
// against one entry deciding by input_flushed (bench/results/cuda-h200.md): 2-6% off most
// quantized types' calls at N = 1 (Q6_K 6%) and 3-8% off five at N = 2 (Q8_0 8%); Q8_0 at N = 1
// and Q4_K at N = 2 were 2% and 8% slower, so their _normed entries there flush as the other
// does. Larger modules keep one entry deciding by input_flushed: two there made 8-row passes up
// to 61% slower (more registers for some).
#define LMH_CUDA_MATVEC_ENTRY(name, type, suffix, input)                                                       \
    extern "C" __global__ void LMH_CUDA_MATVEC_BOUNDS                                                         \
    matvec_##name##suffix(lmh_matvec_params p, const lmh_u32 *x, const lmh_u8 *w, lmh_u32 *out) {             \
        if (((LMH_CUDA_MATVEC_TYPES >> (type)) & 1u) == 0u) __trap();                                          \
        LMH_CUDA_IDS                                                                                           \
        lmh_matvec(p, type, input, x, w, out, simdgroup, simdgroups, lane);                                    \
    }
#ifndef LMH_CUDA_NORMED_ENTRY
#define LMH_CUDA_NORMED_ENTRY 0u
#endif
#if LMH_CUDA_NORMED_ENTRY
#define LMH_CUDA_NORMED_INPUT(type) \
    (((type) == LMH_TYPE_Q8_0 && LMH_ROWS_PER_PASS == 1u) || ((type) == LMH_TYPE_Q4_K && LMH_ROWS_PER_PASS == 2u) ? LMH_INPUT_RAW : LMH_INPUT_NORMED)
#define LMH_CUDA_MATVEC(name, type)                                   \
    LMH_CUDA_MATVEC_ENTRY(name, type, _f32, LMH_INPUT_RAW)            \
    LMH_CUDA_MATVEC_ENTRY(name, type, _normed_f32, LMH_CUDA_NORMED_INPUT(type))
#else
#define LMH_CUDA_MATVEC(name, type) LMH_CUDA_MATVEC_ENTRY(name, type, _f32, LMH_INPUT_PARAMS)
#endif
LMH_HEAD_TYPES(LMH_CUDA_MATVEC)
