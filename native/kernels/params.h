#pragma METAL fp contract(off)
// Kernel parameters, field for field as native/kernels/params.zig defines them: the host
// records these bytes and every kernel reads them. The asserts pin each size and offset
// here; a Zig test compares them with params.zig through the host build of this file.

typedef struct {
    lmh_u32 rows;
    lmh_u32 hidden;
    float eps;
    float inv_hidden; // fl(1/hidden), computed on the host
} lmh_rms_norm_params;

typedef struct {
    lmh_u32 rows;
    lmh_u32 hidden;
    lmh_u32 vocab;
    lmh_u32 type_id;
    lmh_u32 row_bytes;
    lmh_u32 chunks; // ceil(hidden / 256)
    lmh_u32 input_flushed; // 1: the input is the norm's output, already past its flush point
} lmh_matvec_params;

typedef struct {
    lmh_u64 values;
    float cap;
    float inv_cap; // fl(1/cap), computed on the host
} lmh_softcap_params;

typedef struct {
    lmh_u32 rows;
    lmh_u32 row_values;
    lmh_u32 segments; // partial counts per row (1: counts[r] is the row's count)
} lmh_count_non_finite_params;

LMH_STATIC_ASSERT(sizeof(lmh_rms_norm_params) == 16, "RmsNorm is 16 bytes");
LMH_STATIC_ASSERT(sizeof(lmh_matvec_params) == 28, "Matvec is 28 bytes");
LMH_STATIC_ASSERT(sizeof(lmh_softcap_params) == 16, "Softcap is 16 bytes");
LMH_STATIC_ASSERT(sizeof(lmh_count_non_finite_params) == 12, "CountNonFinite is 12 bytes");

// Bytes of one vocab row's slot in a stage of a matvec's ring (kernels.h LMH_STAGES): a
// quantized chunk (at most Q8_0's 272 bytes) from the 16-byte boundary at or below its first
// byte spans at most 18 pieces of 16. The host sizes rings by it (params.zig stage_row_bytes).
#define LMH_STAGE_ROW_BYTES 288u
// NVRTC has no offsetof (neither __builtin_offsetof nor <cstddef>), so the CUDA prelude
// defines no LMH_OFFSETOF; the host build (the emulator's layout test) checks the offsets.
#ifdef LMH_OFFSETOF
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_rms_norm_params, eps) == 8, "RmsNorm.eps at 8");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_rms_norm_params, inv_hidden) == 12, "RmsNorm.inv_hidden at 12");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_matvec_params, type_id) == 12, "Matvec.type_id at 12");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_matvec_params, chunks) == 20, "Matvec.chunks at 20");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_matvec_params, input_flushed) == 24, "Matvec.input_flushed at 24");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_softcap_params, cap) == 8, "Softcap.cap at 8");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_softcap_params, inv_cap) == 12, "Softcap.inv_cap at 12");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_count_non_finite_params, row_values) == 4, "CountNonFinite.row_values at 4");
LMH_STATIC_ASSERT(LMH_OFFSETOF(lmh_count_non_finite_params, segments) == 8, "CountNonFinite.segments at 8");
#endif
