#pragma METAL fp contract(off)
#pragma STDC FP_CONTRACT OFF
// The host target of the kernel source: C11, compiled by `zig cc` with -ffp-contract=off
// for the emulator (emulator.c), which runs a simdgroup's 32 lanes as fibers.

typedef unsigned char lmh_u8;
typedef unsigned int lmh_u32;
typedef unsigned long long lmh_u64;

// Plain `static inline`, the compiler's choice: forcing every body inline made each of the
// emulator's builds take over a minute of clang (most of `zig build test`), and a call
// rounds nothing, so the arithmetic is the same either way.
#define LMH_FN static inline
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

LMH_FN float lmh_abs(float value) {
    return __builtin_fabsf(value);
}

// Little-endian loads from a byte buffer. The GPUs need p even for lmh_load16 and a
// multiple of 4 for lmh_load32; the host would not, so the emulator traps a misaligned
// address here and CI catches what a GPU would fault on.
LMH_FN lmh_u32 lmh_load16(const lmh_u8 *p) {
    if (((unsigned long long)p & 1u) != 0u) __builtin_trap();
    return (lmh_u32)p[0] | ((lmh_u32)p[1] << 8);
}

LMH_FN lmh_u32 lmh_load32(const lmh_u8 *p) {
    if (((unsigned long long)p & 3u) != 0u) __builtin_trap();
    return lmh_load16(p) | (lmh_load16(p + 2) << 16);
}

// Two words from an 8-byte aligned address (one load on a GPU).
typedef struct { lmh_u32 x, y; } lmh_words2;

LMH_FN lmh_words2 lmh_load_words2(const lmh_u8 *p) {
    if (((unsigned long long)p & 7u) != 0u) __builtin_trap();
    lmh_words2 r = { lmh_load32(p), lmh_load32(p + 4) };
    return r;
}

// Four words from a 16-byte aligned address (one load on a GPU).
typedef struct { lmh_u32 x, y, z, w; } lmh_words4;

LMH_FN lmh_words4 lmh_load_words4(const lmh_u32 *p) {
    if (((unsigned long long)p & 15u) != 0u) __builtin_trap();
    lmh_words4 r = { p[0], p[1], p[2], p[3] };
    return r;
}

// The emulator's rendezvous (emulator.c): every lane publishes its bits, then each reads
// its partner's (lane ^ mask) or its source's.
static lmh_u32 lmh_emulator_shuffle_xor(lmh_u32 bits, lmh_u32 mask);
static lmh_u32 lmh_emulator_shuffle(lmh_u32 bits, lmh_u32 source);

LMH_FN lmh_u32 lmh_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return lmh_emulator_shuffle_xor(bits, mask);
}

LMH_FN lmh_u32 lmh_shuffle(lmh_u32 bits, lmh_u32 source) {
    return lmh_emulator_shuffle(bits, source);
}
