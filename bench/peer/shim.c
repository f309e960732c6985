// The bench's ggml peer: ggml's CPU, CUDA or Metal backend computing the head's mul_mat, for
// the side-by-side bench only (never part of liblmhead). bun:ffi cannot pass ggml_init's
// by-value struct, so this small layer owns every ggml call and exposes pointers, integers and
// status codes.
//
// The declarations below are written from the public headers of ggml v0.19.0 (ggml-org/ggml
// tag v0.19.0: include/ggml.h, ggml-alloc.h, ggml-backend.h, ggml-cpu.h, and
// src/ggml-backend-impl.h for the two entry points every dynamically loaded backend exports),
// the ggml that @node-llama-cpp/linux-x64@3.20.0 and mac-arm64-metal@3.20.0 bundle (llama.cpp
// b10361) and that build-cuda.sh builds from source for a GPU. Only what this file calls is
// declared. lhp_open refuses a library whose ggml_version() differs.
//
// ggml aborts the process on a failed assertion, so every entry point checks sizes, alignment
// and types before handing anything to ggml. Errors: a non-zero status and lhp_last_error.
#include <dlfcn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- ggml v0.19.0 declarations (see above) ----
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
typedef struct ggml_backend_buffer_type * ggml_backend_buffer_type_t;
typedef struct ggml_backend_buffer * ggml_backend_buffer_t;
typedef struct ggml_backend * ggml_backend_t;
typedef struct ggml_backend_reg * ggml_backend_reg_t;
typedef struct ggml_backend_device * ggml_backend_dev_t;

struct ggml_init_params {
    size_t mem_size;
    void * mem_buffer;
    bool no_alloc;
};

enum ggml_type { GGML_TYPE_F32 = 0, GGML_TYPE_COUNT = 43 };
enum ggml_status { GGML_STATUS_SUCCESS = 0 };
enum ggml_backend_buffer_usage { GGML_BACKEND_BUFFER_USAGE_WEIGHTS = 1 };
enum ggml_backend_dev_type { GGML_BACKEND_DEVICE_TYPE_CPU = 0 };
enum ggml_log_level { GGML_LOG_LEVEL_WARN = 3, GGML_LOG_LEVEL_CONT = 5 };
#define GGML_MAX_N_THREADS 512
enum ggml_sched_priority { GGML_SCHED_PRIO_NORMAL = 0 };
struct ggml_threadpool;
struct ggml_threadpool_params {
    bool cpumask[GGML_MAX_N_THREADS];
    int n_threads;
    enum ggml_sched_priority prio;
    uint32_t poll;
    bool strict_cpu;
    bool paused;
};
void ggml_threadpool_params_init(struct ggml_threadpool_params * p, int n_threads);
typedef void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * user_data);
void ggml_log_set(ggml_log_callback log_callback, void * user_data);

const char * ggml_version(void);
const char * ggml_commit(void);
const char * ggml_type_name(enum ggml_type type);
int64_t ggml_blck_size(enum ggml_type type);
size_t ggml_row_size(enum ggml_type type, int64_t ne);
size_t ggml_nbytes(const struct ggml_tensor * tensor);
size_t ggml_tensor_overhead(void);
size_t ggml_graph_overhead(void);
struct ggml_context * ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context * ctx);
struct ggml_tensor * ggml_new_tensor_2d(struct ggml_context * ctx, enum ggml_type type, int64_t ne0, int64_t ne1);
struct ggml_tensor * ggml_mul_mat(struct ggml_context * ctx, struct ggml_tensor * a, struct ggml_tensor * b);
struct ggml_cgraph * ggml_new_graph(struct ggml_context * ctx);
void ggml_build_forward_expand(struct ggml_cgraph * cgraph, struct ggml_tensor * tensor);

const char * ggml_backend_buft_name(ggml_backend_buffer_type_t buft);
ggml_backend_buffer_t ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size);
size_t ggml_backend_buft_get_alloc_size(ggml_backend_buffer_type_t buft, const struct ggml_tensor * tensor);
void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);
void * ggml_backend_buffer_get_base(ggml_backend_buffer_t buffer);
void ggml_backend_buffer_set_usage(ggml_backend_buffer_t buffer, enum ggml_backend_buffer_usage usage);
void ggml_backend_free(ggml_backend_t backend);
void ggml_backend_tensor_set(struct ggml_tensor * tensor, const void * data, size_t offset, size_t size);
void ggml_backend_tensor_get(const struct ggml_tensor * tensor, void * data, size_t offset, size_t size);
enum ggml_status ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph * cgraph);
const char * ggml_backend_dev_description(ggml_backend_dev_t device);
enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t device);
ggml_backend_buffer_type_t ggml_backend_dev_buffer_type(ggml_backend_dev_t device);
ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char * params);
bool ggml_backend_dev_supports_op(ggml_backend_dev_t device, const struct ggml_tensor * op);
size_t ggml_backend_reg_dev_count(ggml_backend_reg_t reg);
ggml_backend_dev_t ggml_backend_reg_dev_get(ggml_backend_reg_t reg, size_t index);
void * ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char * name);
enum ggml_status ggml_backend_tensor_alloc(ggml_backend_buffer_t buffer, struct ggml_tensor * tensor, void * addr);
ggml_backend_buffer_t ggml_backend_cpu_buffer_from_ptr(void * ptr, size_t size);
ggml_backend_buffer_t ggml_backend_alloc_ctx_tensors(struct ggml_context * ctx, ggml_backend_t backend);

typedef void (*ggml_backend_set_n_threads_t)(ggml_backend_t backend, int n_threads);
typedef ggml_backend_buffer_type_t * (*ggml_backend_dev_get_extra_bufts_t)(ggml_backend_dev_t device);
// The CPU backend's threadpool calls, which its registry hands out by name.
typedef struct ggml_threadpool * (*ggml_threadpool_new_t)(struct ggml_threadpool_params * params);
typedef void (*ggml_threadpool_free_t)(struct ggml_threadpool * threadpool);
typedef void (*ggml_backend_cpu_set_threadpool_t)(ggml_backend_t backend, struct ggml_threadpool * threadpool);
// Exported by each libggml-cpu-<variant>.so (GGML_BACKEND_DL_IMPL, GGML_BACKEND_DL_SCORE_IMPL).
typedef ggml_backend_reg_t (*ggml_backend_init_t)(void);
typedef int (*ggml_backend_score_t)(void);
// ---- end of ggml declarations ----

#define LHP_GGML_VERSION "0.19.0"
#define LHP_TENSOR_ALIGNMENT_BYTES 32 // ggml_backend_cpu_buffer_from_ptr asserts this alignment
#define LHP_MAX_VALUES_PER_ROW (1 << 20)
#define LHP_MAX_VOCAB (1 << 24)
#define LHP_MAX_ROWS 4096

enum lhp_status { LHP_OK = 0, LHP_INVALID = 1, LHP_UNSUPPORTED = 2, LHP_FAILED = 3 };
// Which buffer holds the weights: the best the machine offers, or one named. A GPU has one:
// its own memory, which best picks.
enum lhp_buffer { LHP_BUFFER_BEST = 0, LHP_BUFFER_CPU = 1, LHP_BUFFER_REPACK = 2, LHP_BUFFER_AMX = 3 };

struct lhp_peer {
    void * library; // dlopen handle of libggml-cpu-<variant>.so, libggml-cuda.so or libggml-metal.so
    ggml_backend_dev_t device;
    bool cpu; // the device computes in host memory, on `threads` threads
    ggml_backend_t backend;
    struct ggml_threadpool * threadpool;
    ggml_threadpool_free_t threadpool_free;
    ggml_backend_dev_get_extra_bufts_t extra_bufts;
};

struct lhp_head {
    struct lhp_peer * peer;
    struct ggml_context * ctx;
    struct ggml_tensor * weight;
    ggml_backend_buffer_t buffer;
    int64_t values_per_row;
    int64_t vocab;
    char buffer_name[32];
};

struct lhp_plan {
    struct lhp_head * head;
    struct ggml_context * ctx;
    struct ggml_tensor * input;
    struct ggml_tensor * output;
    struct ggml_cgraph * graph;
    ggml_backend_buffer_t buffer;
    int64_t rows;
};

static char last_error[512];

static int fail(int status, const char * format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return status;
}

/// Copies the last error message into dst (NUL-terminated, truncated to capacity); returns its length.
size_t lhp_last_error(char * dst, size_t capacity) {
    size_t length = strlen(last_error);
    if (dst != NULL && capacity > 0) {
        size_t copied = length < capacity - 1 ? length : capacity - 1;
        memcpy(dst, last_error, copied);
        dst[copied] = 0;
    }
    return length;
}

/// ggml_backend_score() of one CPU variant library (0: this CPU lacks its features), or -1.
int lhp_variant_score(const char * path) {
    if (path == NULL) return fail(-1, "variant path is null");
    void * library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return fail(-1, "dlopen %s: %s", path, dlerror());
    ggml_backend_score_t score = (ggml_backend_score_t) dlsym(library, "ggml_backend_score");
    int result = score != NULL ? score() : fail(-1, "%s exports no ggml_backend_score", path);
    dlclose(library);
    return result;
}

/// ggml's own log, warnings and errors only: its info lines (one per repacked tensor) would
/// break into the bench's output.
static void log_warnings(enum ggml_log_level level, const char * text, void * user_data) {
    static bool printing = false;
    (void) user_data;
    if (level != GGML_LOG_LEVEL_CONT) printing = level >= GGML_LOG_LEVEL_WARN;
    if (printing) fputs(text, stderr);
}

void lhp_close(struct lhp_peer * peer) {
    if (peer == NULL) return;
    if (peer->backend != NULL) ggml_backend_free(peer->backend);
    if (peer->threadpool != NULL) peer->threadpool_free(peer->threadpool);
    // The library stays loaded: ggml keeps static state (buffer types, type traits) in it.
    free(peer);
}

/// A threadpool that lives as long as the backend, as llama.cpp's CLI attaches one, so that
/// a compute does not start and join threads. Its workers sleep between graphs (poll 0)
/// instead of spinning on the cores that lmhead runs on next.
static bool attach_threadpool(struct lhp_peer * peer, ggml_backend_reg_t reg, int threads) {
    ggml_threadpool_new_t threadpool_new = (ggml_threadpool_new_t) ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
    ggml_backend_cpu_set_threadpool_t set_threadpool = (ggml_backend_cpu_set_threadpool_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_cpu_set_threadpool");
    peer->threadpool_free = (ggml_threadpool_free_t) ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
    if (threadpool_new == NULL || set_threadpool == NULL || peer->threadpool_free == NULL) return false;
    struct ggml_threadpool_params params;
    ggml_threadpool_params_init(&params, threads);
    params.poll = 0;
    peer->threadpool = threadpool_new(&params);
    if (peer->threadpool == NULL) return false;
    set_threadpool(peer->backend, peer->threadpool);
    return true;
}

/// Loads the backend library at path (a CPU variant, or a GPU's backend such as
/// libggml-cuda.so) and starts its first device: a CPU with `threads` threads (1..512), a GPU
/// with threads 0.
int lhp_open(const char * path, int threads, struct lhp_peer ** out) {
    if (path == NULL || out == NULL) return fail(LHP_INVALID, "null argument");
    if (threads < 0 || threads > GGML_MAX_N_THREADS) return fail(LHP_INVALID, "threads %d outside [0, %d]", threads, GGML_MAX_N_THREADS);
    if (strcmp(ggml_version(), LHP_GGML_VERSION) != 0) {
        return fail(LHP_UNSUPPORTED, "libggml-base is ggml %s; this shim is declared for ggml %s", ggml_version(), LHP_GGML_VERSION);
    }
    ggml_log_set(log_warnings, NULL);
    struct lhp_peer * peer = calloc(1, sizeof *peer);
    if (peer == NULL) return fail(LHP_FAILED, "out of memory");
    peer->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (peer->library == NULL) {
        free(peer);
        return fail(LHP_FAILED, "dlopen %s: %s", path, dlerror());
    }
    ggml_backend_init_t init = (ggml_backend_init_t) dlsym(peer->library, "ggml_backend_init");
    ggml_backend_reg_t reg = init != NULL ? init() : NULL;
    if (reg != NULL && ggml_backend_reg_dev_count(reg) >= 1) {
        peer->device = ggml_backend_reg_dev_get(reg, 0);
        peer->backend = ggml_backend_dev_init(peer->device, NULL);
    }
    if (peer->backend == NULL) {
        lhp_close(peer);
        return fail(LHP_FAILED, "%s started no device (no GPU, or its driver or runtime missing?)", path);
    }
    peer->cpu = ggml_backend_dev_type(peer->device) == GGML_BACKEND_DEVICE_TYPE_CPU;
    if (!peer->cpu) {
        if (threads != 0) {
            lhp_close(peer);
            return fail(LHP_INVALID, "%s is a GPU's backend (%s): threads must be 0, got %d", path, ggml_backend_dev_description(peer->device), threads);
        }
        *out = peer;
        return LHP_OK;
    }
    if (threads == 0) {
        lhp_close(peer);
        return fail(LHP_INVALID, "%s is a CPU backend: threads must be 1 or more", path);
    }
    ggml_backend_set_n_threads_t set_threads = reg != NULL ? (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads") : NULL;
    if (set_threads == NULL || !attach_threadpool(peer, reg, threads)) {
        lhp_close(peer);
        return fail(LHP_FAILED, "could not start the CPU backend of %s with %d threads", path, threads);
    }
    set_threads(peer->backend, threads);
    peer->extra_bufts = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    *out = peer;
    return LHP_OK;
}

/// "<ggml version>\t<ggml commit>\t<device description>\t<extra buffer types, comma-separated>"
/// into dst (truncated to capacity); returns the length it needed.
size_t lhp_info(const struct lhp_peer * peer, char * dst, size_t capacity) {
    if (peer == NULL || dst == NULL || capacity == 0) return 0;
    int length = snprintf(dst, capacity, "%s\t%s\t%s\t", ggml_version(), ggml_commit(), ggml_backend_dev_description(peer->device));
    if (length < 0) return 0;
    size_t used = (size_t) length;
    ggml_backend_buffer_type_t * buft = peer->extra_bufts != NULL ? peer->extra_bufts(peer->device) : NULL;
    for (size_t i = 0; buft != NULL && buft[i] != NULL; i++) {
        int added = snprintf(dst + (used < capacity ? used : capacity - 1), used < capacity ? capacity - used : 1, "%s%s", i > 0 ? "," : "", ggml_backend_buft_name(buft[i]));
        if (added > 0) used += (size_t) added;
    }
    return used;
}

/// The extra buffer type named `name` ("CPU_REPACK", "AMX"), or NULL when this CPU has none.
static ggml_backend_buffer_type_t extra_buffer_type(const struct lhp_peer * peer, const char * name) {
    if (peer->extra_bufts == NULL) return NULL;
    for (ggml_backend_buffer_type_t * buft = peer->extra_bufts(peer->device); *buft != NULL; buft++) {
        if (strcmp(ggml_backend_buft_name(*buft), name) == 0) return *buft;
    }
    return NULL;
}

static struct ggml_context * new_context(size_t tensors, bool graph) {
    struct ggml_init_params params = {
        .mem_size = tensors * ggml_tensor_overhead() + (graph ? ggml_graph_overhead() : 0),
        .mem_buffer = NULL,
        .no_alloc = true,
    };
    return ggml_init(params);
}

/// Whether the device runs mul_mat(weight, [k, 1] f32) with the weight where it is now.
static bool supports_matmul(struct lhp_head * head) {
    struct ggml_context * ctx = new_context(2, false);
    if (ctx == NULL) return false;
    struct ggml_tensor * input = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, head->values_per_row, 1);
    bool supported = ggml_backend_dev_supports_op(head->peer->device, ggml_mul_mat(ctx, head->weight, input));
    ggml_free(ctx);
    return supported;
}

static void head_release(struct lhp_head * head) {
    if (head->buffer != NULL) ggml_backend_buffer_free(head->buffer);
    if (head->ctx != NULL) ggml_free(head->ctx);
    head->buffer = NULL;
    head->ctx = NULL;
    head->weight = NULL;
}

/// Binds a fresh weight tensor to `bytes` without copying (buft NULL), or copies them into a
/// buffer of type buft (an extra CPU type repacks them; a GPU's uploads them). Returns false,
/// with nothing held, when the device cannot run the matmul from there.
static bool head_place(struct lhp_head * head, int type, void * bytes, size_t byte_count, ggml_backend_buffer_type_t buft) {
    head->ctx = new_context(1, false);
    if (head->ctx == NULL) return false;
    head->weight = ggml_new_tensor_2d(head->ctx, (enum ggml_type) type, head->values_per_row, head->vocab);
    head->buffer = buft == NULL ? ggml_backend_cpu_buffer_from_ptr(bytes, byte_count)
                                : ggml_backend_buft_alloc_buffer(buft, ggml_backend_buft_get_alloc_size(buft, head->weight));
    void * base = head->buffer != NULL ? ggml_backend_buffer_get_base(head->buffer) : NULL;
    if (base == NULL || ggml_backend_tensor_alloc(head->buffer, head->weight, base) != GGML_STATUS_SUCCESS || !supports_matmul(head)) {
        head_release(head);
        return false;
    }
    ggml_backend_buffer_set_usage(head->buffer, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    if (buft != NULL) ggml_backend_tensor_set(head->weight, bytes, 0, byte_count);
    snprintf(head->buffer_name, sizeof head->buffer_name, "%s", buft == NULL ? "CPU" : ggml_backend_buft_name(buft));
    return true;
}

/// The head: vocab rows of values_per_row values of ggml type `type`, read from `bytes`
/// (byte_count bytes, 32-byte aligned, kept alive by the caller while the head lives). `choice`
/// picks the buffer (enum lhp_buffer); on a CPU, best tries AMX, then CPU_REPACK, then the
/// bytes in place; a GPU takes a copy in its own memory (best only).
int lhp_head_new(struct lhp_peer * peer, int type, int64_t values_per_row, int64_t vocab, void * bytes, uint64_t byte_count,
                 int choice, struct lhp_head ** out) {
    if (peer == NULL || bytes == NULL || out == NULL) return fail(LHP_INVALID, "null argument");
    if (type < 0 || type >= GGML_TYPE_COUNT || ggml_blck_size((enum ggml_type) type) <= 0) return fail(LHP_UNSUPPORTED, "ggml type %d is not a ggml 0.19.0 type", type);
    if (values_per_row < 1 || values_per_row > LHP_MAX_VALUES_PER_ROW || vocab < 1 || vocab > LHP_MAX_VOCAB) {
        return fail(LHP_INVALID, "head %lld x %lld outside [1, %d] x [1, %d]", (long long) vocab, (long long) values_per_row, LHP_MAX_VOCAB, LHP_MAX_VALUES_PER_ROW);
    }
    if (values_per_row % ggml_blck_size((enum ggml_type) type) != 0) {
        return fail(LHP_INVALID, "%lld values per row is not whole %s blocks", (long long) values_per_row, ggml_type_name((enum ggml_type) type));
    }
    // Both factors are bounded above, so the product cannot overflow.
    uint64_t expected_bytes = (uint64_t) ggml_row_size((enum ggml_type) type, values_per_row) * (uint64_t) vocab;
    if (byte_count != expected_bytes) return fail(LHP_INVALID, "head has %llu bytes, a %s head of %lld x %lld needs %llu", (unsigned long long) byte_count, ggml_type_name((enum ggml_type) type), (long long) vocab, (long long) values_per_row, (unsigned long long) expected_bytes);
    if (peer->cpu && (uintptr_t) bytes % LHP_TENSOR_ALIGNMENT_BYTES != 0) return fail(LHP_INVALID, "head bytes are not %d-byte aligned", LHP_TENSOR_ALIGNMENT_BYTES);
    if (choice < LHP_BUFFER_BEST || choice > LHP_BUFFER_AMX) return fail(LHP_INVALID, "buffer choice %d unknown", choice);

    struct lhp_head * head = calloc(1, sizeof *head);
    if (head == NULL) return fail(LHP_FAILED, "out of memory");
    head->peer = peer;
    head->values_per_row = values_per_row;
    head->vocab = vocab;
    if (!peer->cpu) {
        if (choice != LHP_BUFFER_BEST || !head_place(head, type, bytes, byte_count, ggml_backend_dev_buffer_type(peer->device))) {
            free(head);
            return fail(LHP_UNSUPPORTED, "%s runs no %s mul_mat from %s", ggml_backend_dev_description(peer->device), ggml_type_name((enum ggml_type) type), choice == LHP_BUFFER_BEST ? "its own memory" : "a CPU buffer");
        }
        *out = head;
        return LHP_OK;
    }
    static const char * const extra_names[] = { "AMX", "CPU_REPACK" };
    bool placed = false;
    for (int i = 0; i < 2 && !placed; i++) {
        bool wanted = choice == LHP_BUFFER_BEST || (choice == LHP_BUFFER_AMX && i == 0) || (choice == LHP_BUFFER_REPACK && i == 1);
        ggml_backend_buffer_type_t buft = wanted ? extra_buffer_type(peer, extra_names[i]) : NULL;
        if (buft != NULL) placed = head_place(head, type, bytes, byte_count, buft);
    }
    if (!placed && (choice == LHP_BUFFER_BEST || choice == LHP_BUFFER_CPU)) placed = head_place(head, type, bytes, byte_count, NULL);
    if (!placed) {
        free(head);
        const char * wanted = choice == LHP_BUFFER_AMX ? "AMX" : choice == LHP_BUFFER_REPACK ? "CPU_REPACK" : "CPU";
        return fail(LHP_UNSUPPORTED, "ggml's CPU backend has no %s buffer that runs a %s mul_mat on this machine", wanted, ggml_type_name((enum ggml_type) type));
    }
    *out = head;
    return LHP_OK;
}

/// The name of the buffer type holding the head's weights into dst; returns its length.
size_t lhp_head_buffer(const struct lhp_head * head, char * dst, size_t capacity) {
    if (head == NULL || dst == NULL || capacity == 0) return 0;
    int length = snprintf(dst, capacity, "%s", head->buffer_name);
    return length < 0 ? 0 : (size_t) length;
}

void lhp_head_free(struct lhp_head * head) {
    if (head == NULL) return;
    head_release(head);
    free(head);
}

void lhp_plan_free(struct lhp_plan * plan) {
    if (plan == NULL) return;
    if (plan->buffer != NULL) ggml_backend_buffer_free(plan->buffer);
    if (plan->ctx != NULL) ggml_free(plan->ctx);
    free(plan);
}

/// A graph computing output[rows, vocab] = input[rows, k] x head^T, with its own input and
/// output tensors; build it before timing so that lhp_plan_compute is ggml's compute alone.
int lhp_plan_new(struct lhp_head * head, int64_t rows, struct lhp_plan ** out) {
    if (head == NULL || out == NULL) return fail(LHP_INVALID, "null argument");
    if (rows < 1 || rows > LHP_MAX_ROWS) return fail(LHP_INVALID, "rows %lld outside [1, %d]", (long long) rows, LHP_MAX_ROWS);
    struct lhp_plan * plan = calloc(1, sizeof *plan);
    if (plan == NULL) return fail(LHP_FAILED, "out of memory");
    plan->head = head;
    plan->rows = rows;
    plan->ctx = new_context(2, true);
    if (plan->ctx != NULL) {
        plan->input = ggml_new_tensor_2d(plan->ctx, GGML_TYPE_F32, head->values_per_row, rows);
        plan->output = ggml_mul_mat(plan->ctx, head->weight, plan->input);
        plan->graph = ggml_new_graph(plan->ctx);
        ggml_build_forward_expand(plan->graph, plan->output);
        plan->buffer = ggml_backend_alloc_ctx_tensors(plan->ctx, head->peer->backend);
    }
    if (plan->buffer == NULL || !ggml_backend_dev_supports_op(head->peer->device, plan->output)) {
        lhp_plan_free(plan);
        return fail(LHP_FAILED, "could not build a %lld-row mul_mat graph", (long long) rows);
    }
    *out = plan;
    return LHP_OK;
}

/// Copies rows x k f32 values into the plan's input.
int lhp_plan_set_input(struct lhp_plan * plan, const float * values, uint64_t count) {
    if (plan == NULL || values == NULL) return fail(LHP_INVALID, "null argument");
    uint64_t expected = (uint64_t) plan->rows * (uint64_t) plan->head->values_per_row;
    if (count != expected) return fail(LHP_INVALID, "input has %llu values, the plan takes %llu", (unsigned long long) count, (unsigned long long) expected);
    ggml_backend_tensor_set(plan->input, values, 0, count * sizeof(float));
    return LHP_OK;
}

int lhp_plan_compute(struct lhp_plan * plan) {
    if (plan == NULL) return fail(LHP_INVALID, "null argument");
    enum ggml_status status = ggml_backend_graph_compute(plan->head->peer->backend, plan->graph);
    return status == GGML_STATUS_SUCCESS ? LHP_OK : fail(LHP_FAILED, "ggml_backend_graph_compute returned status %d", (int) status);
}

/// Copies the plan's rows x vocab f32 output into values.
int lhp_plan_get_output(const struct lhp_plan * plan, float * values, uint64_t count) {
    if (plan == NULL || values == NULL) return fail(LHP_INVALID, "null argument");
    uint64_t expected = (uint64_t) plan->rows * (uint64_t) plan->head->vocab;
    if (count != expected) return fail(LHP_INVALID, "output buffer has %llu values, the plan writes %llu", (unsigned long long) count, (unsigned long long) expected);
    ggml_backend_tensor_get(plan->output, values, 0, count * sizeof(float));
    return LHP_OK;
}
