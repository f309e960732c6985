#pragma METAL fp contract(off)
// Metal entry points: the registry's kernel names (core/registry.zig), parameters at
// buffer 0, then the buffers in the order of the ABI call. Simdgroup s of threadgroup t
// is simdgroup t·(simdgroups per threadgroup) + s of the grid.

#define LMH_METAL_IDS                                             \
    uint lane [[thread_index_in_simdgroup]],                      \
    uint simdgroup_in_group [[simdgroup_index_in_threadgroup]],   \
    uint simdgroups_per_group [[simdgroups_per_threadgroup]],     \
    uint group [[threadgroup_position_in_grid]],                  \
    uint groups [[threadgroups_per_grid]]
#define LMH_METAL_SIMDGROUP group * simdgroups_per_group + simdgroup_in_group, groups * simdgroups_per_group, lane

kernel void rms_norm_f32(constant lmh_rms_norm_params &p [[buffer(0)]], device const uint *x [[buffer(1)]], device const uint *weight [[buffer(2)]], device uint *y [[buffer(3)]], LMH_METAL_IDS) {
    lmh_rms_norm(p, x, weight, y, LMH_METAL_SIMDGROUP);
}

kernel void softcap_f32(constant lmh_softcap_params &p [[buffer(0)]], device uint *data [[buffer(1)]], LMH_METAL_IDS) {
    lmh_softcap(p, data, LMH_METAL_SIMDGROUP);
}

kernel void count_non_finite_f32(constant lmh_count_non_finite_params &p [[buffer(0)]], device const uint *data [[buffer(1)]], device uint *counts [[buffer(2)]], LMH_METAL_IDS) {
    lmh_count_non_finite(p, data, counts, LMH_METAL_SIMDGROUP);
}

#define LMH_METAL_MATVEC(name, type)                                                                    \
    kernel void matvec_##name##_f32(constant lmh_matvec_params &p [[buffer(0)]], device const uint *x [[buffer(1)]], device const uchar *w [[buffer(2)]], device uint *out [[buffer(3)]], LMH_METAL_IDS) { \
        lmh_matvec(p, type, LMH_INPUT_PARAMS, x, w, out, LMH_METAL_SIMDGROUP);                          \
    }
LMH_HEAD_TYPES(LMH_METAL_MATVEC)
