#pragma METAL fp contract(off)
#pragma STDC FP_CONTRACT OFF
// The host target of the kernel source: C11, compiled by `zig cc` with -ffp-contract=off
// for the emulator (emulator.c), which runs a simdgroup's 32 lanes as fibers.

typedef unsigned char lmh_u8;
typedef unsigned int lmh_u32;
typedef unsigned long long lmh_u64;

#define LMH_FN static inline __attribute__((always_inline))
#define LMH_GLOBAL
#define LMH_STATIC_ASSERT(condition, message) _Static_assert(condition, message)
#define LMH_OFFSETOF(type, field) __builtin_offsetof(type, field)

LMH_FN float lmh_as_float(lmh_u32 bits) {
    union { lmh_u32 u; float f; } v;
    v.u = bits;
    return v.f;
}

LMH_FN lmh_u32 lmh_as_uint(float value) {
    union { lmh_u32 u; float f; } v;
    v.f = value;
    return v.u;
}

LMH_FN float lmh_fma(float a, float b, float c) {
    return __builtin_fmaf(a, b, c);
}

// The emulator's rendezvous (emulator.c): every lane publishes its bits, then each reads
// its partner's.
static lmh_u32 lmh_emulator_shuffle_xor(lmh_u32 bits, lmh_u32 mask);

LMH_FN lmh_u32 lmh_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return lmh_emulator_shuffle_xor(bits, mask);
}
