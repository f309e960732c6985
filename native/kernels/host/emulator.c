// The host emulator: the kernel source of native/kernels/kernels.h compiled as C for this
// machine, so that every commit checks, bit for bit against the CPU backend, the
// arithmetic the GPUs will run (native/kernels/emulator.zig calls it).
//
// A simdgroup's 32 lanes run as fibers (glibc ucontext), each executing the per-lane body
// as a GPU lane would. Fibers are the simplest faithful model: a body is plain SIMT code,
// and the only cross-lane operations, lmh_shuffle_xor and lmh_shuffle, become a rendezvous.
// Lanes run in turn, 0 to 31, each up to its next shuffle, where it publishes its value and
// passes to the next lane; when lane 0 runs again, every lane has published, so each reads
// its partner's or its source's value. Values are double-buffered by shuffle parity, so a
// lane that runs ahead to its next shuffle cannot overwrite what a slower lane has yet to
// read. Every lane must reach the same shuffle with the same mask (or all an indexed one),
// or all must return: anything else is divergence, which a GPU's shuffle does not allow, and
// fails the dispatch.
//
// Built five times by build.zig: with the source's default tuning, and under other symbol
// prefixes (LMH_EMULATOR) with another tuning, with a ring of stages (LMH_STAGES), with
// resident rows and a ring (LMH_RESIDENT) and halving passes for the rest of a call's rows
// (LMH_PAD_REST 0), and with resident rows whose last tile runs as a full pass
// (LMH_PAD_RESIDENT), to show that none changes a bit.
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include "prelude.h"
#include "../params.h"

// kernels.h's prefetch hint, checked: a GPU ignores an address outside the weights, so only
// here can one show; it fails the dispatch.
static void lmh_emulator_prefetch(const lmh_u8 *p);
#define LMH_PREFETCH(p) lmh_emulator_prefetch(p)

// kernels.h's staging (LMH_STAGES), checked: each lane's copies land only when a wait
// completes their group, and a stage reads as poison from the moment a copy into it is
// issued, so a lane that reads a stage too early, or refills one another lane may still
// read, changes the logits; a copy from outside the weights fails the dispatch. (Only a
// build given LMH_STAGES stages: kernels.h defines it for every other one.)
#ifdef LMH_STAGES
#define LMH_EMULATOR_STAGED
static void lmh_emulator_stage_copy16(lmh_u8 *stage, const lmh_u8 *weights);
static void lmh_emulator_stage_commit(void);
static void lmh_emulator_stage_wait(lmh_u32 newest);
static void lmh_emulator_sync(void);
static _Thread_local lmh_u8 *ring_first;
static _Thread_local lmh_u8 *ring_end;
#define LMH_STAGE_RING_DEFINE(bytes)                                      \
    static _Thread_local _Alignas(16) lmh_u8 lmh_emulator_ring[bytes];    \
    LMH_FN lmh_u8 *lmh_stage_ring(void) {                                 \
        ring_first = lmh_emulator_ring;                                   \
        ring_end = lmh_emulator_ring + (bytes);                           \
        return lmh_emulator_ring;                                         \
    }
#define LMH_STAGE_COPY16(stage, weights) lmh_emulator_stage_copy16((stage), (weights))
#define LMH_STAGE_COMMIT() lmh_emulator_stage_commit()
#define LMH_STAGE_WAIT(newest) lmh_emulator_stage_wait(newest)
#define LMH_STAGE_SYNC() lmh_emulator_sync()
#endif

// kernels.h's bulk ring (LMH_BULK_STAGES), checked as the staging is: a stage reads as
// poison from the moment a copy into it starts until a wait on its barrier lands it; a
// copy must be 16-byte aligned, lie in the ring, come from the weights' 16-byte pieces and
// start on a barrier with no copy pending; a wait for a phase that no copy completes (a GPU
// would wait for ever) fails the dispatch. Each simdgroup's ring holds
// LMH_EMULATOR_BULK_RING_BYTES.
#ifdef LMH_BULK_STAGES
#define LMH_EMULATOR_BULK
#define LMH_EMULATOR_BULK_RING_BYTES 32768u
static void lmh_emulator_bulk_start(lmh_u32 lane);
static void lmh_emulator_bulk_copy(lmh_u32 stage, lmh_u8 *ring, const lmh_u8 *weights, lmh_u32 bytes);
static void lmh_emulator_bulk_wait(lmh_u32 stage, lmh_u32 phase);
static void lmh_emulator_sync(void);
static _Thread_local _Alignas(16) lmh_u8 lmh_emulator_bulk_ring[LMH_EMULATOR_BULK_RING_BYTES];
#define LMH_BULK_RING() lmh_emulator_bulk_ring
#define LMH_BULK_RING_BYTES() LMH_EMULATOR_BULK_RING_BYTES
#define LMH_BULK_START(lane) lmh_emulator_bulk_start(lane)
#define LMH_BULK_COPY(stage, ring, weights, bytes) lmh_emulator_bulk_copy((stage), (ring), (weights), (bytes))
#define LMH_BULK_WAIT(stage, phase) lmh_emulator_bulk_wait((stage), (phase))
#define LMH_BULK_SYNC() lmh_emulator_sync()
#endif

// kernels.h's resident rows (LMH_RESIDENT), as threadgroups of one simdgroup: each
// simdgroup's area holds LMH_EMULATOR_AREA_BYTES, and a store outside it, or not 16-byte
// aligned, fails the dispatch.
#if defined(LMH_RESIDENT) && LMH_RESIDENT > 0
#define LMH_EMULATOR_AREA
#define LMH_EMULATOR_AREA_BYTES 65536u
static void lmh_emulator_store_words4(lmh_u8 *p, lmh_words4 v);
static void lmh_emulator_sync(void);
static _Thread_local _Alignas(16) lmh_u8 lmh_emulator_area[LMH_EMULATOR_AREA_BYTES];
#define LMH_THREADGROUP_AREA() lmh_emulator_area
#define LMH_THREADGROUP_AREA_BYTES() LMH_EMULATOR_AREA_BYTES
#define LMH_THREADGROUP_SHIFT 0u
#define LMH_THREADGROUP_SYNC() lmh_emulator_sync()
LMH_FN void lmh_store_words4(lmh_u8 *p, lmh_words4 v) {
    lmh_emulator_store_words4(p, v);
}
#endif

#include "../kernels.h"

#ifndef LMH_EMULATOR
#define LMH_EMULATOR lmh_emulator
#endif
#define LMH_JOIN(prefix, name) prefix##_##name
#define LMH_EXPAND(prefix, name) LMH_JOIN(prefix, name)
#define LMH_EXPORT(name) LMH_EXPAND(LMH_EMULATOR, name)

// Results of a dispatch (emulator.zig maps them to errors).
enum {
    dispatch_ok = 0,
    dispatch_unknown_kernel = 1,
    dispatch_bad_params = 2,
    dispatch_bad_buffers = 3,
    dispatch_bad_grid = 4,
    dispatch_divergent = 5,
    dispatch_out_of_memory = 6,
    dispatch_bad_prefetch = 7,
    dispatch_bad_stage = 8,
};

enum { lane_count = 32, lane_stack_bytes = 64 * 1024, no_type = 0xFFFFFFFFu, pending_copies = 64, stage_poison = 0xA5, indexed_shuffle = lane_count };

typedef void (*lmh_body)(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane);

// ---------------------------------------------------------------------------------------
// Entry points: the registry's kernel names (core/registry.zig), each reading its params
// and its buffers in the order of the ABI call (inputs, weight, output).

static void run_rms_norm(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_rms_norm_params p;
    memcpy(&p, params, sizeof p);
    lmh_rms_norm(p, (const lmh_u32 *)buffers[0], (const lmh_u32 *)buffers[1], (lmh_u32 *)buffers[2], simdgroup, simdgroups, lane);
}

static void run_softcap(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_softcap_params p;
    memcpy(&p, params, sizeof p);
    lmh_softcap(p, (lmh_u32 *)buffers[0], simdgroup, simdgroups, lane);
}

static void run_count_non_finite(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_count_non_finite_params p;
    memcpy(&p, params, sizeof p);
    lmh_count_non_finite(p, (const lmh_u32 *)buffers[0], (lmh_u32 *)buffers[1], simdgroup, simdgroups, lane);
}

static void run_sum_segments(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_count_non_finite_params p;
    memcpy(&p, params, sizeof p);
    lmh_sum_segments(p, (const lmh_u32 *)buffers[0], (lmh_u32 *)buffers[1], simdgroup, simdgroups, lane);
}

// How a matvec entry tells the kernel where its input stands: as CUDA's modules of 1 and 2 rows
// per pass do, by an entry point for each (here: the input's flag, read on the host side of the
// call), so those passes read the norm's output as it is; or, as Metal's entries and CUDA's
// larger modules do, by the kernel deciding from p.input_flushed.
#ifndef LMH_EMULATOR_INPUT_BY_ENTRY
#define LMH_EMULATOR_INPUT_BY_ENTRY 0
#endif

// The running matvec's weights, [first, end): where a prefetch or a staging copy may point.
static _Thread_local const lmh_u8 *weights_first;
static _Thread_local const lmh_u8 *weights_end;

#define LMH_MATVEC_ENTRY(name, type)                                                                                      \
    static void run_matvec_##name(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) { \
        lmh_matvec_params p;                                                                                              \
        memcpy(&p, params, sizeof p);                                                                                     \
        weights_first = (const lmh_u8 *)buffers[1];                                                                       \
        weights_end = weights_first + (lmh_u64)p.vocab * p.row_bytes;                                                     \
        lmh_u32 input = LMH_EMULATOR_INPUT_BY_ENTRY ? (p.input_flushed != 0u ? LMH_INPUT_NORMED : LMH_INPUT_RAW) : LMH_INPUT_PARAMS; \
        lmh_matvec(p, type, input, (const lmh_u32 *)buffers[0], (const lmh_u8 *)buffers[1], (lmh_u32 *)buffers[2], simdgroup, simdgroups, lane); \
    }
LMH_HEAD_TYPES(LMH_MATVEC_ENTRY)

// The lane layout's copy of a head (CUDA's lane_relayout; not a registry kernel): the weights
// then the copy.
static void run_lane_relayout(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_matvec_params p;
    memcpy(&p, params, sizeof p);
    lmh_lane_relayout(p, (const lmh_u8 *)buffers[0], (lmh_u8 *)buffers[1], simdgroup, simdgroups, lane);
}

// Self-tests of the emulator, not kernels of the library (emulator_test.zig).
// emulator_shuffles: out[192·s + 32·k + l] = what lane l of simdgroup s receives from the
// k-th of six shuffles, xor masks 16, 8, 4, 2, 1, then from lane (7·l + 3) % 32, each lane
// sending (k << 8) | lane.
static void run_shuffles(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    (void)params;
    (void)simdgroups;
    lmh_u32 *out = (lmh_u32 *)buffers[0] + (lmh_u64)simdgroup * 6u * lane_count;
    for (lmh_u32 k = 0; k < 5u; k++) out[k * lane_count + lane] = lmh_shuffle_xor((k << 8) | lane, 16u >> k);
    out[5u * lane_count + lane] = lmh_shuffle((5u << 8) | lane, (7u * lane + 3u) & 31u);
}

// emulator_diverges: mode 0, lane 0 shuffles once more than the others; mode 1, lane 3
// shuffles with another mask; mode 2, every lane shuffles alike (no divergence); mode 3,
// lane 3 takes an xor shuffle where the others take an indexed one; mode 4, lane 5 names a
// source lane past the simdgroup.
static void run_diverges(const void *params, void *const *buffers, lmh_u32 simdgroup, lmh_u32 simdgroups, lmh_u32 lane) {
    lmh_u32 mode;
    memcpy(&mode, params, sizeof mode);
    (void)buffers;
    (void)simdgroup;
    (void)simdgroups;
    if (mode == 0u && lane == 0u) lmh_shuffle_xor(0u, 1u);
    if (mode == 1u) lmh_shuffle_xor(0u, lane == 3u ? 2u : 1u);
    if (mode == 2u) lmh_shuffle_xor(0u, 1u);
    if (mode == 3u) (void)(lane == 3u ? lmh_shuffle_xor(0u, 1u) : lmh_shuffle(0u, 1u));
    if (mode == 4u) lmh_shuffle(0u, lane == 5u ? 32u : lane);
}

typedef struct {
    const char *name;
    lmh_u32 params_bytes;
    lmh_u32 buffer_count;
    lmh_u32 type; // a matvec's type, which its params must name; no_type otherwise
    lmh_body body;
} lmh_kernel;

#define LMH_MATVEC_KERNEL(name, type) { "matvec_" #name "_f32", sizeof(lmh_matvec_params), 3, type, run_matvec_##name },

static const lmh_kernel kernels[] = {
    { "rms_norm_f32", sizeof(lmh_rms_norm_params), 3, no_type, run_rms_norm },
    { "softcap_f32", sizeof(lmh_softcap_params), 1, no_type, run_softcap },
    { "count_non_finite_f32", sizeof(lmh_count_non_finite_params), 2, no_type, run_count_non_finite },
    { "sum_segments_u32", sizeof(lmh_count_non_finite_params), 2, no_type, run_sum_segments },
    { "lane_relayout", sizeof(lmh_matvec_params), 2, no_type, run_lane_relayout },
    LMH_HEAD_TYPES(LMH_MATVEC_KERNEL)
    { "emulator_shuffles", sizeof(lmh_u32), 1, no_type, run_shuffles },
    { "emulator_diverges", sizeof(lmh_u32), 1, no_type, run_diverges },
};

enum { kernel_count = sizeof kernels / sizeof kernels[0] };

// ---------------------------------------------------------------------------------------
// A simdgroup of fibers.

typedef struct {
    ucontext_t scheduler;
    ucontext_t lanes[lane_count];
    unsigned char *stacks;
    const lmh_kernel *kernel;
    const void *params;
    void *const *buffers;
    lmh_u32 simdgroup;
    lmh_u32 simdgroups;
    lmh_u32 running; // the lane that runs now
    // What lane 0 did in this round, which every other lane must do too.
    int round_returned;
    lmh_u32 round_mask;
    lmh_u32 parity[lane_count];
    lmh_u32 slots[2][lane_count];
    // Each lane's staging copies not yet landed, and the copy groups it has committed.
    struct {
        lmh_u8 *stage;
        const lmh_u8 *weights;
        lmh_u32 group;
    } pending[lane_count][pending_copies];
    lmh_u32 pending_count[lane_count];
    lmh_u32 groups[lane_count];
    // Each bulk stage's barrier (kernels.h allows 4 stages at most): its copy in flight
    // (bytes 0: none), and its completed phases.
    struct {
        lmh_u8 *ring;
        const lmh_u8 *weights;
        lmh_u32 bytes;
        lmh_u32 phases;
    } bulk[4];
    int error;
} lmh_simdgroup;

static _Thread_local lmh_simdgroup *current;

// Abandons every fiber and returns to the dispatch: fibers own nothing to release.
static void fail(lmh_simdgroup *g, int error) {
    g->error = error;
    setcontext(&g->scheduler);
    abort(); // setcontext returns only on failure
}

static void lmh_emulator_prefetch(const lmh_u8 *p) {
    if (p < weights_first || p >= weights_end) fail(current, dispatch_bad_prefetch);
}

#ifdef LMH_EMULATOR_STAGED
static void lmh_emulator_stage_copy16(lmh_u8 *stage, const lmh_u8 *weights) {
    lmh_simdgroup *g = current;
    lmh_u32 lane = g->running;
    int aligned = (((unsigned long long)stage | (unsigned long long)weights) & 15u) == 0u;
    int in_ring = stage >= ring_first && stage + 16 <= ring_end;
    int in_weights = weights + 16 > weights_first && weights < weights_end;
    if (!aligned || !in_ring || !in_weights || g->pending_count[lane] == pending_copies) fail(g, dispatch_bad_stage);
    memset(stage, stage_poison, 16);
    g->pending[lane][g->pending_count[lane]].stage = stage;
    g->pending[lane][g->pending_count[lane]].weights = weights;
    g->pending[lane][g->pending_count[lane]].group = g->groups[lane];
    g->pending_count[lane]++;
}

static void lmh_emulator_stage_commit(void) {
    lmh_simdgroup *g = current;
    g->groups[g->running]++;
}

// Lands the lane's copies of every committed group but the newest `newest`: the bytes of
// each piece that lie in the weights (a GPU reads the whole 16-byte piece, which never
// leaves the weights' allocation; here the rest stays poison, and no decoder reads it).
static void lmh_emulator_stage_wait(lmh_u32 newest) {
    lmh_simdgroup *g = current;
    lmh_u32 lane = g->running;
    lmh_u32 kept = 0;
    for (lmh_u32 i = 0; i < g->pending_count[lane]; i++) {
        if (g->pending[lane][i].group + newest < g->groups[lane]) {
            for (lmh_u32 b = 0; b < 16u; b++) {
                const lmh_u8 *from = g->pending[lane][i].weights + b;
                if (from >= weights_first && from < weights_end) g->pending[lane][i].stage[b] = *from;
            }
        } else {
            g->pending[lane][kept++] = g->pending[lane][i];
        }
    }
    g->pending_count[lane] = kept;
}
#endif

// Whether this build's matvec of `type` reads the lane layout, and that layout's row bytes
// (the CUDA backend makes its copies by its own rules; a test compares them).
lmh_u32 LMH_EXPORT(lane_layout)(lmh_u32 type) {
    return lmh_lane_layout(type);
}

lmh_u32 LMH_EXPORT(lane_row_bytes)(lmh_u32 row_bytes) {
    return lmh_lane_row_bytes(row_bytes);
}

lmh_u32 LMH_EXPORT(rows_per_pass)(void) {
    return LMH_ROWS_PER_PASS;
}

#ifdef LMH_EMULATOR_BULK
static void lmh_emulator_bulk_start(lmh_u32 lane) {
    if (lane == 0u) memset(current->bulk, 0, sizeof current->bulk);
    lmh_emulator_sync();
}

static void lmh_emulator_bulk_copy(lmh_u32 stage, lmh_u8 *ring, const lmh_u8 *weights, lmh_u32 bytes) {
    lmh_simdgroup *g = current;
    // The 16-byte pieces that hold the weights' bytes.
    unsigned long long pieces_first = (unsigned long long)weights_first & ~15ull;
    unsigned long long pieces_end = ((unsigned long long)weights_end + 15u) & ~15ull;
    int aligned = (((unsigned long long)ring | (unsigned long long)weights | bytes) & 15u) == 0u;
    int in_ring = ring >= lmh_emulator_bulk_ring && ring + bytes <= lmh_emulator_bulk_ring + LMH_EMULATOR_BULK_RING_BYTES;
    int in_weights = (unsigned long long)weights >= pieces_first && (unsigned long long)weights + bytes <= pieces_end;
    if (stage >= LMH_BULK_STAGES || bytes == 0u || !aligned || !in_ring || !in_weights || g->bulk[stage].bytes != 0u) fail(g, dispatch_bad_stage);
    memset(ring, stage_poison, bytes);
    g->bulk[stage].ring = ring;
    g->bulk[stage].weights = weights;
    g->bulk[stage].bytes = bytes;
}

// Lands the stage's copy, if one is in flight, completing a phase; then the phase waited
// for must be complete. The bytes outside the weights (in their first and last 16-byte
// pieces) stay poison: no decoder reads them.
static void lmh_emulator_bulk_wait(lmh_u32 stage, lmh_u32 phase) {
    lmh_simdgroup *g = current;
    if (stage >= LMH_BULK_STAGES) fail(g, dispatch_bad_stage);
    if (g->bulk[stage].bytes != 0u) {
        for (lmh_u32 b = 0; b < g->bulk[stage].bytes; b++) {
            const lmh_u8 *from = g->bulk[stage].weights + b;
            if (from >= weights_first && from < weights_end) g->bulk[stage].ring[b] = *from;
        }
        g->bulk[stage].bytes = 0u;
        g->bulk[stage].phases++;
    }
    // Phase k completes with the k-th copy; parity `phase` names the latest one of that parity.
    if (g->bulk[stage].phases == 0u || ((g->bulk[stage].phases - 1u) & 1u) != phase) fail(g, dispatch_bad_stage);
}
#endif

// Lane `lane` has done its part of the round (the same as lane 0's, or it fails).
static void check_round(lmh_simdgroup *g, lmh_u32 lane, int returned, lmh_u32 mask) {
    if (lane == 0) {
        g->round_returned = returned;
        g->round_mask = mask;
    } else if (g->round_returned != returned || g->round_mask != mask) {
        fail(g, dispatch_divergent);
    }
}

// A round: the lane publishes its bits and passes to the next lane; it reads lane `from`'s
// bits of the round once every lane has published. `kind` is what every lane must agree
// on: the mask of an xor shuffle, or indexed_shuffle (whose sources may differ).
static lmh_u32 shuffle_round(lmh_u32 bits, lmh_u32 kind, lmh_u32 from) {
    lmh_simdgroup *g = current;
    lmh_u32 lane = g->running;
    if (from >= lane_count) fail(g, dispatch_divergent);
    check_round(g, lane, 0, kind);
    lmh_u32 parity = g->parity[lane];
    g->slots[parity][lane] = bits;
    g->parity[lane] = parity ^ 1u;
    lmh_u32 next = (lane + 1u) & (lane_count - 1u);
    g->running = next;
    if (swapcontext(&g->lanes[lane], &g->lanes[next]) != 0) abort();
    // Lane 0 runs again only after lane 31 has published: every value of the round is in.
    return g->slots[parity][from];
}

static lmh_u32 lmh_emulator_shuffle_xor(lmh_u32 bits, lmh_u32 mask) {
    return shuffle_round(bits, mask, current->running ^ mask);
}

static lmh_u32 lmh_emulator_shuffle(lmh_u32 bits, lmh_u32 source) {
    return shuffle_round(bits, indexed_shuffle, source);
}

#ifdef LMH_EMULATOR_AREA
static void lmh_emulator_store_words4(lmh_u8 *p, lmh_words4 v) {
    int aligned = ((unsigned long long)p & 15u) == 0u;
    int in_area = p >= lmh_emulator_area && p + 16 <= lmh_emulator_area + LMH_EMULATOR_AREA_BYTES;
    if (!aligned || !in_area) fail(current, dispatch_bad_stage);
    memcpy(p, &v, sizeof v);
}
#endif

#if defined(LMH_EMULATOR_STAGED) || defined(LMH_EMULATOR_BULK) || defined(LMH_EMULATOR_AREA)
// A simdgroup barrier: a round with no value exchanged.
static void lmh_emulator_sync(void) {
    (void)lmh_emulator_shuffle_xor(0u, 0u);
}
#endif

static void lane_main(void) {
    lmh_simdgroup *g = current;
    lmh_u32 lane = g->running;
    g->kernel->body(g->params, g->buffers, g->simdgroup, g->simdgroups, lane);
    check_round(g, lane, 1, 0u);
    if (lane == lane_count - 1u) setcontext(&g->scheduler);
    g->running = lane + 1u;
    setcontext(&g->lanes[lane + 1u]);
    abort();
}

static int run_simdgroup(lmh_simdgroup *g, lmh_u32 simdgroup) {
    g->simdgroup = simdgroup;
    g->error = dispatch_ok;
    memset(g->parity, 0, sizeof g->parity);
    memset(g->pending_count, 0, sizeof g->pending_count);
    memset(g->groups, 0, sizeof g->groups);
    for (lmh_u32 l = 0; l < lane_count; l++) {
        if (getcontext(&g->lanes[l]) != 0) return dispatch_out_of_memory;
        g->lanes[l].uc_stack.ss_sp = g->stacks + (size_t)l * lane_stack_bytes;
        g->lanes[l].uc_stack.ss_size = lane_stack_bytes;
        g->lanes[l].uc_link = NULL;
        makecontext(&g->lanes[l], lane_main, 0);
    }
    current = g;
    g->running = 0;
    if (swapcontext(&g->scheduler, &g->lanes[0]) != 0) abort();
    current = NULL;
    return g->error;
}

static int check_dispatch(const lmh_kernel *k, const void *params, lmh_u64 params_bytes, void *const *buffers, lmh_u32 buffer_count) {
    if (params == NULL || params_bytes != k->params_bytes) return dispatch_bad_params;
    if (k->type != no_type) {
        lmh_matvec_params p;
        memcpy(&p, params, sizeof p);
        if (p.type_id != k->type) return dispatch_bad_params;
    }
    if (buffers == NULL || buffer_count != k->buffer_count) return dispatch_bad_buffers;
    for (lmh_u32 b = 0; b < buffer_count; b++) {
        if (buffers[b] == NULL) return dispatch_bad_buffers;
    }
    return dispatch_ok;
}

// Runs kernel `kernel` over a grid of threadgroups[0] threadgroups of threads[0] threads
// (a multiple of 32; the y and z sizes must be 1), as Metal's dispatchThreadgroups would:
// simdgroup s of threadgroup t is simdgroup t·(threads / 32) + s of the grid. Buffers are
// pointers in the kernel's binding order; the caller keeps them large enough, as for a GPU.
int LMH_EXPORT(dispatch)(lmh_u32 kernel, const void *params, lmh_u64 params_bytes, void *const *buffers, lmh_u32 buffer_count, const lmh_u32 threadgroups[3], const lmh_u32 threads[3]) {
    if (kernel >= kernel_count) return dispatch_unknown_kernel;
    int checked = check_dispatch(&kernels[kernel], params, params_bytes, buffers, buffer_count);
    if (checked != dispatch_ok) return checked;
    if (threadgroups == NULL || threads == NULL) return dispatch_bad_grid;
    if (threadgroups[0] == 0 || threadgroups[1] != 1 || threadgroups[2] != 1) return dispatch_bad_grid;
    if (threads[0] == 0 || (threads[0] & (lane_count - 1u)) != 0 || threads[1] != 1 || threads[2] != 1) return dispatch_bad_grid;
    lmh_u32 per_group = threads[0] >> 5;
    lmh_u64 simdgroups = (lmh_u64)threadgroups[0] * per_group;
    if (simdgroups > 0xFFFFFFFFu) return dispatch_bad_grid;
    lmh_simdgroup *g = calloc(1, sizeof *g);
    if (g == NULL) return dispatch_out_of_memory;
    g->stacks = malloc((size_t)lane_count * lane_stack_bytes);
    int result = g->stacks == NULL ? dispatch_out_of_memory : dispatch_ok;
    g->kernel = &kernels[kernel];
    g->params = params;
    g->buffers = buffers;
    g->simdgroups = (lmh_u32)simdgroups;
    for (lmh_u32 s = 0; s < g->simdgroups && result == dispatch_ok; s++) result = run_simdgroup(g, s);
    free(g->stacks);
    free(g);
    return result;
}

// The index of the kernel called `name` (not terminated), or -1.
int LMH_EXPORT(kernel_index)(const char *name, lmh_u64 name_bytes) {
    for (int k = 0; k < kernel_count; k++) {
        if (strlen(kernels[k].name) == name_bytes && memcmp(kernels[k].name, name, name_bytes) == 0) return k;
    }
    return -1;
}

lmh_u32 LMH_EXPORT(kernel_count)(void) {
    return kernel_count;
}

// The per-lane functions on their own, for sweeps against numerics/math.zig.
void LMH_EXPORT(rsqrt)(const float *x, float *y, lmh_u64 count) {
    for (lmh_u64 i = 0; i < count; i++) y[i] = lmh_rsqrt(x[i]);
}

void LMH_EXPORT(tanh)(const float *x, float *y, lmh_u64 count) {
    for (lmh_u64 i = 0; i < count; i++) y[i] = lmh_tanh(x[i]);
}

// One chunk of a quantized row, at `chunk` (4-byte aligned), decoded as each lane of a
// simdgroup decodes it with its own scale (no shuffle): lane l's 8 values at out[8l ..].
void LMH_EXPORT(decode)(lmh_u32 type, const lmh_u8 *chunk, float *out) {
    for (lmh_u32 lane = 0; lane < 32u; lane++) {
        lmh_f8 w = lmh_decode(type, chunk, lane, 0u, 256u, LMH_LOAD_WHOLE, lmh_lane_scale(type, chunk, lane));
        for (lmh_u32 i = 0; i < 8u; i++) out[8u * lane + i] = w.v[i];
    }
}

#ifdef LMH_EMULATOR_BULK
// The bytes of a bulk stage for vocab rows of row_bytes, as the kernels take them: the CUDA
// backend sizes its rings by its own formula, and a test compares the two.
lmh_u64 LMH_EXPORT(bulk_stage_bytes)(lmh_u32 row_bytes) {
    return lmh_bulk_stage_bytes(row_bytes);
}
#endif

#ifdef LMH_EMULATOR_AREA
// The bytes of a threadgroup's resident rows at `hidden`, as the kernels take them (the CUDA
// backend's own formula is tested against it, as the bulk stage's is).
lmh_u64 LMH_EXPORT(area_bytes)(lmh_u32 hidden) {
    return lmh_resident_bytes(hidden);
}
#endif

// ---------------------------------------------------------------------------------------
// Layouts, for the test that params.h and the block structs agree with the Zig structs:
// entry i is a name as Zig spells it ("Matvec", "Matvec.rows", "Q6_K.d") and its size or
// offset in bytes.

typedef struct {
    const char *name;
    lmh_u64 bytes;
} lmh_layout_entry;

#define LMH_SIZE(zig, c) { zig, sizeof(c) }
#define LMH_FIELD(zig, c, field) { zig "." #field, LMH_OFFSETOF(c, field) }

static const lmh_layout_entry layout[] = {
    LMH_SIZE("RmsNorm", lmh_rms_norm_params),
    LMH_FIELD("RmsNorm", lmh_rms_norm_params, rows),
    LMH_FIELD("RmsNorm", lmh_rms_norm_params, hidden),
    LMH_FIELD("RmsNorm", lmh_rms_norm_params, eps),
    LMH_FIELD("RmsNorm", lmh_rms_norm_params, inv_hidden),
    LMH_SIZE("Matvec", lmh_matvec_params),
    LMH_FIELD("Matvec", lmh_matvec_params, rows),
    LMH_FIELD("Matvec", lmh_matvec_params, hidden),
    LMH_FIELD("Matvec", lmh_matvec_params, vocab),
    LMH_FIELD("Matvec", lmh_matvec_params, type_id),
    LMH_FIELD("Matvec", lmh_matvec_params, row_bytes),
    LMH_FIELD("Matvec", lmh_matvec_params, chunks),
    LMH_FIELD("Matvec", lmh_matvec_params, input_flushed),
    LMH_SIZE("Softcap", lmh_softcap_params),
    LMH_FIELD("Softcap", lmh_softcap_params, values),
    LMH_FIELD("Softcap", lmh_softcap_params, cap),
    LMH_FIELD("Softcap", lmh_softcap_params, inv_cap),
    LMH_SIZE("CountNonFinite", lmh_count_non_finite_params),
    LMH_FIELD("CountNonFinite", lmh_count_non_finite_params, rows),
    LMH_FIELD("CountNonFinite", lmh_count_non_finite_params, row_values),
    LMH_FIELD("CountNonFinite", lmh_count_non_finite_params, segments),
    { "stage_row_bytes", LMH_STAGE_ROW_BYTES },
    LMH_SIZE("Q4_0", lmh_block_q4_0),
    LMH_FIELD("Q4_0", lmh_block_q4_0, d),
    LMH_FIELD("Q4_0", lmh_block_q4_0, qs),
    LMH_SIZE("Q5_0", lmh_block_q5_0),
    LMH_FIELD("Q5_0", lmh_block_q5_0, d),
    LMH_FIELD("Q5_0", lmh_block_q5_0, qh),
    LMH_FIELD("Q5_0", lmh_block_q5_0, qs),
    LMH_SIZE("Q5_1", lmh_block_q5_1),
    LMH_FIELD("Q5_1", lmh_block_q5_1, d),
    LMH_FIELD("Q5_1", lmh_block_q5_1, m),
    LMH_FIELD("Q5_1", lmh_block_q5_1, qh),
    LMH_FIELD("Q5_1", lmh_block_q5_1, qs),
    LMH_SIZE("Q8_0", lmh_block_q8_0),
    LMH_FIELD("Q8_0", lmh_block_q8_0, d),
    LMH_FIELD("Q8_0", lmh_block_q8_0, qs),
    LMH_SIZE("IQ4_NL", lmh_block_iq4_nl),
    LMH_FIELD("IQ4_NL", lmh_block_iq4_nl, d),
    LMH_FIELD("IQ4_NL", lmh_block_iq4_nl, qs),
    LMH_SIZE("Q2_K", lmh_block_q2_k),
    LMH_FIELD("Q2_K", lmh_block_q2_k, scales),
    LMH_FIELD("Q2_K", lmh_block_q2_k, qs),
    LMH_FIELD("Q2_K", lmh_block_q2_k, d),
    LMH_FIELD("Q2_K", lmh_block_q2_k, dmin),
    LMH_SIZE("Q3_K", lmh_block_q3_k),
    LMH_FIELD("Q3_K", lmh_block_q3_k, hmask),
    LMH_FIELD("Q3_K", lmh_block_q3_k, qs),
    LMH_FIELD("Q3_K", lmh_block_q3_k, scales),
    LMH_FIELD("Q3_K", lmh_block_q3_k, d),
    LMH_SIZE("Q4_K", lmh_block_q4_k),
    LMH_FIELD("Q4_K", lmh_block_q4_k, d),
    LMH_FIELD("Q4_K", lmh_block_q4_k, dmin),
    LMH_FIELD("Q4_K", lmh_block_q4_k, scales),
    LMH_FIELD("Q4_K", lmh_block_q4_k, qs),
    LMH_SIZE("Q5_K", lmh_block_q5_k),
    LMH_FIELD("Q5_K", lmh_block_q5_k, d),
    LMH_FIELD("Q5_K", lmh_block_q5_k, dmin),
    LMH_FIELD("Q5_K", lmh_block_q5_k, scales),
    LMH_FIELD("Q5_K", lmh_block_q5_k, qh),
    LMH_FIELD("Q5_K", lmh_block_q5_k, qs),
    LMH_SIZE("Q6_K", lmh_block_q6_k),
    LMH_FIELD("Q6_K", lmh_block_q6_k, ql),
    LMH_FIELD("Q6_K", lmh_block_q6_k, qh),
    LMH_FIELD("Q6_K", lmh_block_q6_k, scales),
    LMH_FIELD("Q6_K", lmh_block_q6_k, d),
    LMH_SIZE("IQ4_XS", lmh_block_iq4_xs),
    LMH_FIELD("IQ4_XS", lmh_block_iq4_xs, d),
    LMH_FIELD("IQ4_XS", lmh_block_iq4_xs, scales_h),
    LMH_FIELD("IQ4_XS", lmh_block_iq4_xs, scales_l),
    LMH_FIELD("IQ4_XS", lmh_block_iq4_xs, qs),
};

// Entry `index`: 1 and its name and bytes, or 0 past the end.
int LMH_EXPORT(layout_entry)(lmh_u32 index, const char **name, lmh_u64 *bytes) {
    if (index >= sizeof layout / sizeof layout[0]) return 0;
    *name = layout[index].name;
    *bytes = layout[index].bytes;
    return 1;
}
