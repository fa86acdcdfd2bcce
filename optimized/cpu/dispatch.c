/* builtin:cpu: choosing the instruction set and the threads, validating a
 * call, and handing it to its family (README.md).
 *
 * Read top to bottom: the instruction sets (what the CPU has, LACS_ISA), the
 * threads (LACS_THREADS, a parallel for on pthreads), the small helpers the
 * family files share (inputs by name, bf16 packing), and lacs_cpu_run.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../core/error.h"
#include "../validate.h"
#include "cpu.h"
#include "recurrent_backward.h"

/* ---- instruction sets ---- */

static const char *const isa_names[] = {"scalar", "avx2", "avx512"};

static int isa_supported(lacs_cpu_isa isa)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    switch (isa) {
    case LACS_ISA_SCALAR:
        return 1;
    case LACS_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case LACS_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("fma");
    }
    return 0;
#else
    return isa == LACS_ISA_SCALAR;
#endif
}

int lacs_cpu_isa_supported(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, isa_names[i]) == 0)
            return isa_supported((lacs_cpu_isa)i);
    return 0;
}

/* The ISA to use: LACS_ISA if set (must be known and supported), else the best. */
static int choose_isa(lacs_cpu_isa *isa)
{
    const char *forced = getenv("LACS_ISA");
    if (forced && *forced) {
        for (int i = 0; i < 3; i++)
            if (strcmp(forced, isa_names[i]) == 0) {
                if (!isa_supported((lacs_cpu_isa)i))
                    return lacs_cpu_error(LACS_ERR_PARAM, "builtin:cpu",
                                          "LACS_ISA=%s: this CPU lacks the instructions it needs (%s)", forced,
                                          i == LACS_ISA_AVX512 ? "AVX-512 F/BW/VL/DQ, AVX512-BF16 and FMA"
                                                               : "AVX2 and FMA");
                *isa = (lacs_cpu_isa)i;
                return LACS_OK;
            }
        return lacs_cpu_error(LACS_ERR_PARAM, "builtin:cpu", "LACS_ISA=%s is not one of avx512, avx2, scalar",
                              forced);
    }
    *isa = isa_supported(LACS_ISA_AVX512) ? LACS_ISA_AVX512
           : isa_supported(LACS_ISA_AVX2) ? LACS_ISA_AVX2
                                          : LACS_ISA_SCALAR;
    return LACS_OK;
}

const char *lacs_cpu_isa_name(void)
{
    lacs_cpu_isa isa;
    return choose_isa(&isa) == LACS_OK ? isa_names[isa] : NULL;
}

/* ---- the bf16 tier's products under avx512 ---- */

/* Whether the bf16 tier multiplies bf16 operands with vdpbf16ps (native) or
 * widens them exactly to fp32 and multiplies with vfmadd231ps (widened), as
 * the avx2 set does; README.md section 1. LACS_CPU_BF16_PRODUCTS=native|widened
 * forces one (for the tests and the bench); unset, it is native on AMD's
 * cores, where vdpbf16ps does twice the fp32 FMA's multiply-adds per cycle
 * (builtin:cpu's chunk GEMM 363.7 GFLOP/s in bf16 against 204.8 in fp32 on the
 * EPYC of section 8.2), and widened elsewhere: on the Intel Xeon of section
 * 8.2.1 one vdpbf16ps issues every 2.2 cycles against two vfmadd231ps per
 * cycle, half the fp32 rate per multiply-add, and the bf16 tier ran at 0.65 of
 * fp32's speed with it, 1.0 without. A fixed rule, not a timing: the same
 * machine always computes the same bits. */
/* Whether the CPU is AMD's: a fixed rule for the choices that give the same
 * bits either way but whose speed differs between AMD's cores and Intel's
 * (the bf16 products below; where norms.c streams DyT's VJP). */
static int cpu_is_amd(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
#else
    return 0;
#endif
}

static int choose_bf16_products(int *native)
{
    const char *forced = getenv("LACS_CPU_BF16_PRODUCTS");
    if (forced && *forced) {
        if (strcmp(forced, "native") == 0 || strcmp(forced, "widened") == 0) {
            *native = strcmp(forced, "native") == 0;
            return LACS_OK;
        }
        return lacs_cpu_error(LACS_ERR_PARAM, "builtin:cpu", "LACS_CPU_BF16_PRODUCTS=%s is not one of native, widened",
                              forced);
    }
    *native = cpu_is_amd();
    return LACS_OK;
}

const char *lacs_cpu_bf16_products(void)
{
    lacs_cpu_isa isa = LACS_ISA_SCALAR;
    int native = 0;
    if (choose_isa(&isa) != LACS_OK || choose_bf16_products(&native) != LACS_OK)
        return NULL;
    return isa == LACS_ISA_AVX512 && native ? "native" : "widened";
}

const lacs_cpu_gemm *lacs_cpu_gemm_for(lacs_cpu_isa isa)
{
    switch (isa) {
    case LACS_ISA_AVX512:
        return &lacs_cpu_gemm_avx512;
    case LACS_ISA_AVX2:
        return &lacs_cpu_gemm_avx2;
    case LACS_ISA_SCALAR:
        break;
    }
    return &lacs_cpu_gemm_scalar;
}

/* ---- workspaces kept between calls (cpu.h) ---- */

/* Each buffer is preceded by its header, one cache line: its capacity. */
#define SCRATCH_HEADER 64
#if defined(__SANITIZE_ADDRESS__)
#define SCRATCH_KEEPS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SCRATCH_KEEPS 0
#endif
#endif
#ifndef SCRATCH_KEEPS
#define SCRATCH_KEEPS 1
#endif

static struct {
    pthread_mutex_t lock;
    void *kept[LACS_CPU_SCRATCH_KEPT]; /* headers, or NULL */
    size_t kept_bytes;
} scratch = {PTHREAD_MUTEX_INITIALIZER, {NULL}, 0};

static size_t scratch_capacity(const void *header) { return *(const size_t *)header; }

/* A fork()ed child keeps the buffers; its lock starts free (another thread may have held it at the fork). */
static void scratch_after_fork_in_child(void) { pthread_mutex_init(&scratch.lock, NULL); }
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_register_fork_handler(void) { pthread_atfork(NULL, NULL, scratch_after_fork_in_child); }

void *lacs_cpu_scratch_alloc(size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    void *header = NULL;
    pthread_once(&scratch_once, scratch_register_fork_handler);
    pthread_mutex_lock(&scratch.lock);
    int best = -1;
    for (int i = 0; i < LACS_CPU_SCRATCH_KEPT; i++)
        if (scratch.kept[i] && scratch_capacity(scratch.kept[i]) >= bytes &&
            (best < 0 || scratch_capacity(scratch.kept[i]) < scratch_capacity(scratch.kept[best])))
            best = i;
    if (best >= 0) {
        header = scratch.kept[best];
        scratch.kept[best] = NULL;
        scratch.kept_bytes -= scratch_capacity(header);
    }
    pthread_mutex_unlock(&scratch.lock);
    if (!header) {
        if (bytes > SIZE_MAX - 2 * SCRATCH_HEADER)
            return NULL;
        const size_t capacity = (bytes + SCRATCH_HEADER - 1) / SCRATCH_HEADER * SCRATCH_HEADER;
        header = aligned_alloc(SCRATCH_HEADER, SCRATCH_HEADER + capacity);
        if (!header)
            return NULL;
        *(size_t *)header = capacity;
    }
    return (char *)header + SCRATCH_HEADER;
}

void *lacs_cpu_scratch_calloc(size_t bytes)
{
    void *p = lacs_cpu_scratch_alloc(bytes);
    if (p)
        memset(p, 0, bytes);
    return p;
}

void lacs_cpu_scratch_free(void *p)
{
    if (!p)
        return;
    void *header = (char *)p - SCRATCH_HEADER, *freed = header;
    if (SCRATCH_KEEPS) {
        const size_t capacity = scratch_capacity(header);
        pthread_mutex_lock(&scratch.lock);
        /* an empty slot, else the smallest kept buffer, replaced if this one is larger; within the byte limit */
        int slot = 0;
        for (int i = 0; i < LACS_CPU_SCRATCH_KEPT; i++) {
            if (!scratch.kept[i]) {
                slot = i;
                break;
            }
            if (scratch_capacity(scratch.kept[i]) < scratch_capacity(scratch.kept[slot]))
                slot = i;
        }
        const size_t replaced = scratch.kept[slot] ? scratch_capacity(scratch.kept[slot]) : 0;
        if (replaced < capacity && scratch.kept_bytes - replaced + capacity <= LACS_CPU_SCRATCH_KEPT_BYTES) {
            freed = scratch.kept[slot];
            scratch.kept[slot] = header;
            scratch.kept_bytes += capacity - replaced;
        }
        pthread_mutex_unlock(&scratch.lock);
    }
    free(freed);
}

void lacs_cpu_release_scratch(void)
{
    pthread_mutex_lock(&scratch.lock);
    for (int i = 0; i < LACS_CPU_SCRATCH_KEPT; i++) {
        free(scratch.kept[i]);
        scratch.kept[i] = NULL;
    }
    scratch.kept_bytes = 0;
    pthread_mutex_unlock(&scratch.lock);
}

/* ---- threads ---- */

/* LACS_THREADS: 0 with *threads set when it is unset, or a whole number in
 * 1..1024; -1 when it is set to anything else. */
static int threads_from_env(int *threads)
{
    const char *s = getenv("LACS_THREADS");
    *threads = 0;
    if (!s || !*s)
        return 0;
    char *end;
    errno = 0;
    long n = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > 1024)
        return -1;
    *threads = (int)n;
    return 0;
}

int lacs_cpu_threads(void)
{
    int threads;
    if (threads_from_env(&threads) == 0 && threads > 0)
        return threads;
    /* unset, or a bad value (which lacs_cpu_run reports): the online CPUs */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online >= 1 ? (int)(online < 1024 ? online : 1024) : 1;
}

static int check_threads_env(void)
{
    int threads;
    if (threads_from_env(&threads) != 0)
        return lacs_cpu_error(LACS_ERR_PARAM, "builtin:cpu", "LACS_THREADS=%s is not a whole number in 1..1024",
                              getenv("LACS_THREADS"));
    return LACS_OK;
}

/* The threads of lacs_cpu_parallel_for: a pool, started on first use and
 * kept, so that a short call (a decode step of a tenth of a millisecond)
 * does not pay for creating threads. Worker w (1 .. n) runs as `thread` w;
 * the caller is thread 0. One job at a time: a call that finds the pool
 * busy (another thread of the program calling builtin:cpu at the same time)
 * creates threads of its own for its job, as the pool does not wait. Items
 * are handed out by an atomic counter, in order, as threads free up. After
 * fork() the child starts with no pool (its threads stay in the parent); at
 * exit or unload the workers are stopped and joined. */
#define POOL_MAX_WORKERS 1023

typedef struct {
    lacs_cpu_task fn;
    void *context;
    int64_t n_items;
    int threads;
    atomic_llong next;
    /* lacs_cpu_parallel_split: one contiguous range of items per thread taking part (job.threads, final
     * before any thread reads it), the next item of each handed out by its own counter (from 0) */
    int split;
    atomic_llong taken[POOL_MAX_WORKERS + 1];
} parallel_job;

static void run_items(parallel_job *job, int thread)
{
    if (job->split) { /* its own range first, then what is left of the ranges after it, item by item */
        const int ranges = job->threads;
        for (int i = 0; i < ranges; i++) {
            const int range = (thread + i) % ranges;
            const int64_t from = job->n_items * range / ranges, to = job->n_items * (range + 1) / ranges;
            for (int64_t item; (item = from + atomic_fetch_add(&job->taken[range], 1)) < to;)
                job->fn(job->context, item, thread);
        }
        return;
    }
    for (;;) {
        const long long item = atomic_fetch_add(&job->next, 1);
        if (item >= job->n_items)
            break;
        job->fn(job->context, (int64_t)item, thread);
    }
}

static struct {
    pthread_mutex_t busy;        /* held by the caller whose job the pool runs */
    pthread_mutex_t lock;        /* guards what follows */
    pthread_cond_t wake, finished;
    int workers;                 /* started */
    atomic_int stopping;
    atomic_ulong generation;     /* one per job (written under lock; read by spinning workers without it) */
    parallel_job *job;
    atomic_int running;          /* workers still in the current job (the caller spins on it, then waits) */
    pthread_t ids[POOL_MAX_WORKERS];
    unsigned long born[POOL_MAX_WORKERS]; /* the generation when each was started: its first job is the next */
} pool = {.busy = PTHREAD_MUTEX_INITIALIZER,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .finished = PTHREAD_COND_INITIALIZER};

/* Between jobs a worker, and the caller waiting for its workers, spin this
 * many pauses (some 5 microseconds) before they sleep: waking a sleeping
 * thread costs tens of microseconds, as much as a whole decode step, and
 * calls come back to back (a decode step per layer), as OpenMP's and ggml's
 * pools spin too. */
#define POOL_SPIN_PAUSES 300

static inline void pool_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *pool_worker_main(void *arg)
{
    const int thread = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool.lock);
    unsigned long seen = pool.born[thread - 1];
    for (;;) {
        if (atomic_load(&pool.generation) == seen && !atomic_load(&pool.stopping)) {
            pthread_mutex_unlock(&pool.lock);
            for (int spin = 0; spin < POOL_SPIN_PAUSES && atomic_load(&pool.generation) == seen &&
                               !atomic_load(&pool.stopping);
                 spin++)
                pool_pause();
            pthread_mutex_lock(&pool.lock);
        }
        while (atomic_load(&pool.generation) == seen && !atomic_load(&pool.stopping))
            pthread_cond_wait(&pool.wake, &pool.lock);
        if (atomic_load(&pool.stopping))
            break;
        seen = atomic_load(&pool.generation);
        parallel_job *job = pool.job;
        /* not wanted for this job, or it ended before this worker woke (its caller counts only the workers
         * it wants, and clears pool.job when they are done) */
        if (!job || thread >= job->threads)
            continue;
        pthread_mutex_unlock(&pool.lock);
        run_items(job, thread);
        pthread_mutex_lock(&pool.lock);
        if (atomic_fetch_sub(&pool.running, 1) == 1)
            pthread_cond_signal(&pool.finished);
    }
    pthread_mutex_unlock(&pool.lock);
    return NULL;
}

/* The child of a fork() has the pool's memory but none of its threads. */
static void pool_after_fork_in_child(void)
{
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.finished, NULL);
    pool.workers = 0;
    atomic_store(&pool.stopping, 0);
    pool.job = NULL;
    atomic_store(&pool.running, 0);
}

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static void pool_register_fork_handler(void) { pthread_atfork(NULL, NULL, pool_after_fork_in_child); }

/* At exit, or when liblacs.so is unloaded: the workers must not outlive the code they run. */
__attribute__((destructor)) static void pool_stop(void)
{
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.stopping, 1);
    pthread_cond_broadcast(&pool.wake);
    const int workers = pool.workers;
    pthread_mutex_unlock(&pool.lock);
    for (int w = 0; w < workers; w++)
        pthread_join(pool.ids[w], NULL);
    pool.workers = 0;
}

/* Threads created for one job, when the pool is busy with another. */
typedef struct {
    parallel_job *job;
    int thread;
} own_worker;

static void *own_worker_main(void *arg)
{
    own_worker *w = arg;
    run_items(w->job, w->thread);
    return NULL;
}

static void run_on_own_threads(parallel_job *job)
{
    own_worker workers[1024];
    pthread_t ids[1024];
    int started = 0;
    for (int t = 1; t < job->threads; t++) {
        workers[t] = (own_worker){job, t};
        if (pthread_create(&ids[t], NULL, own_worker_main, &workers[t]) != 0)
            break; /* a thread that cannot be created leaves its share to the others */
        started = t;
    }
    run_items(job, 0);
    for (int t = 1; t <= started; t++)
        pthread_join(ids[t], NULL);
}

static void run_job(int threads, int64_t n_items, lacs_cpu_task fn, void *context, int split)
{
    if (threads > n_items)
        threads = (int)(n_items > 0 ? n_items : 1);
    if (threads < 1)
        threads = 1;
    if (threads > POOL_MAX_WORKERS + 1)
        threads = POOL_MAX_WORKERS + 1;
    parallel_job job = {.fn = fn, .context = context, .n_items = n_items, .threads = threads, .split = split};
    atomic_init(&job.next, 0);
    for (int t = 0; t < threads; t++)
        atomic_init(&job.taken[t], 0);
    if (threads == 1) {
        run_items(&job, 0);
        return;
    }
    if (pthread_mutex_trylock(&pool.busy) != 0) {
        run_on_own_threads(&job);
        return;
    }
    pthread_once(&pool_once, pool_register_fork_handler);
    pthread_mutex_lock(&pool.lock);
    while (pool.workers < threads - 1 && !atomic_load(&pool.stopping)) {
        pool.born[pool.workers] = atomic_load(&pool.generation);
        if (pthread_create(&pool.ids[pool.workers], NULL, pool_worker_main, (void *)(intptr_t)(pool.workers + 1)) != 0)
            break;
        pool.workers++;
    }
    /* workers 1 .. min(workers, threads - 1) take part; a thread that could not be created leaves its share */
    const int helpers = pool.workers < threads - 1 ? pool.workers : threads - 1;
    job.threads = helpers + 1;
    pool.job = &job;
    atomic_store(&pool.running, helpers);
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_items(&job, 0);
    for (int spin = 0; spin < POOL_SPIN_PAUSES && atomic_load(&pool.running) > 0; spin++)
        pool_pause();
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.running) > 0)
        pthread_cond_wait(&pool.finished, &pool.lock);
    pool.job = NULL;
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
}

void lacs_cpu_parallel_for(int threads, int64_t n_items, lacs_cpu_task fn, void *context)
{
    run_job(threads, n_items, fn, context, 0);
}

void lacs_cpu_parallel_split(int threads, int64_t n_items, lacs_cpu_task fn, void *context)
{
    run_job(threads, n_items, fn, context, 1);
}

/* ---- shared helpers ---- */

/* The typed names of the helpers builtin:cpu and builtin:cuda share (optimized/validate.c). */

int lacs_cpu_error(int code, const char *op, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    const int rc = lacs_builtin_verror(code, op, fmt, args);
    va_end(args);
    return rc;
}

const lacs_tensor *lacs_cpu_input(const lacs_cpu_call *c, const char *name)
{
    const int i = lacs_builtin_find_named(c->inputs, sizeof *c->inputs, c->n_inputs, name);
    return i >= 0 ? &c->inputs[i] : NULL;
}

lacs_tensor *lacs_cpu_output(const lacs_cpu_call *c, const char *name)
{
    const int i = lacs_builtin_find_named(c->outputs, sizeof *c->outputs, c->n_outputs, name);
    return i >= 0 ? &c->outputs[i] : NULL;
}

double lacs_cpu_param(const lacs_cpu_call *c, const char *name, double fallback)
{
    return lacs_builtin_param(c->op, c->params, c->n_params, c->inputs, c->n_inputs, name, fallback);
}

/* A part of lacs_cpu_input_f32's copy: elements item * WIDEN_PART on. */
enum { WIDEN_PART = 1 << 16 }; /* 256 KiB of fp32 out */
typedef struct {
    const lacs_tensor *t;
    int64_t n;
    float *out;
} widen_job;

static void widen_part(void *context, int64_t item, int thread)
{
    (void)thread;
    const widen_job *job = context;
    const int64_t first = item * WIDEN_PART, count = job->n - first < WIDEN_PART ? job->n - first : WIDEN_PART;
    lacs_cpu_tensor_row(job->t, first, count, job->out + first);
}

float *lacs_cpu_input_f32(const lacs_cpu_call *c, const char *name, int *oom)
{
    const lacs_tensor *t = lacs_cpu_input(c, name);
    if (!t)
        return NULL;
    const int64_t n = lacs_tensor_count(t);
    float *out = lacs_cpu_scratch_alloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    if (!out) {
        *oom = 1;
        return NULL;
    }
    /* in parts on the call's threads: a fresh allocation of megabytes is mostly page faults (the kernel
     * zeroing each page on first touch), which the cores take in parallel; the bf16 tier of the attention
     * forms widens q, k and v this way (softmax_attn, T = 4096, H = 4, d = 64: 12 MiB, README.md section 5) */
    widen_job job = {t, n, out};
    lacs_cpu_parallel_for(c->threads, (n + WIDEN_PART - 1) / WIDEN_PART, widen_part, &job);
    return out;
}

int64_t lacs_cpu_sequences(const lacs_cpu_call *c, int64_t T, int64_t n, int64_t *start)
{
    const lacs_tensor *cu = lacs_cpu_input(c, "cu_seqlens");
    if (cu) {
        const int64_t *offsets = cu->data;
        *start = offsets[n];
        return offsets[n + 1] - offsets[n];
    }
    *start = n * T;
    return T;
}

void lacs_cpu_tensor_row(const lacs_tensor *t, int64_t offset, int64_t n, float *out)
{
    if (t->dtype == LACS_BF16) {
        const uint16_t *b = (const uint16_t *)t->data + offset;
        for (int64_t i = 0; i < n; i++)
            out[i] = lacs_cpu_bf16_to_f32(b[i]);
    } else if (n > 0)
        memcpy(out, (const float *)t->data + offset, (size_t)n * sizeof *out);
}

size_t lacs_cpu_packed_bf16_size(int64_t k, int64_t n) { return (size_t)((k + 1) / 2) * 2 * (size_t)n; }

void lacs_cpu_pack_bf16(int64_t k, int64_t n, const uint16_t *B, int64_t ldb, uint16_t *Bp)
{
    for (int64_t p = 0; p < k; p += 2)
        for (int64_t j = 0; j < n; j++) {
            Bp[(p / 2) * 2 * n + 2 * j] = B[p * ldb + j];
            Bp[(p / 2) * 2 * n + 2 * j + 1] = p + 1 < k ? B[(p + 1) * ldb + j] : 0;
        }
}

/* The environment's `name` as a whole number in lo .. hi into *value (left
 * as it is when unset or empty); an error naming the variable and `what`
 * otherwise. */
static int environment_number(const char *name, long long lo, long long hi, const char *what, long long *value)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return LACS_OK;
    char *end;
    errno = 0;
    const long long number = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || number < lo || number > hi)
        return lacs_cpu_error(LACS_ERR_PARAM, "builtin:cpu", "%s=%s is not a whole number of %s in %lld..%lld", name,
                              text, what, lo, hi);
    *value = number;
    return LACS_OK;
}

int lacs_cpu_backward_state_bytes(size_t *bytes)
{
    long long mib = -1;
    const int rc = environment_number("LACS_CPU_BACKWARD_STATE_MIB", 0, 65536, "MiB", &mib);
    *bytes = mib >= 0 ? (size_t)mib << 20 : LACS_CPU_BACKWARD_STATE_BYTES;
    return rc;
}

int lacs_cpu_path_fold(int64_t *blocks)
{
    long long fold = LACS_CPU_PATH_FOLD_DEFAULT;
    const int rc = environment_number("LACS_CPU_PATH_FOLD", 1, 64, "blocks", &fold);
    *blocks = fold;
    return rc;
}

int lacs_cpu_environment_check(void)
{
    lacs_cpu_isa isa;
    int native = 0, rc;
    size_t state_bytes;
    int64_t fold;
    if ((rc = choose_isa(&isa)) != LACS_OK || (rc = choose_bf16_products(&native)) != LACS_OK ||
        (rc = lacs_cpu_backward_state_bytes(&state_bytes)) != LACS_OK || (rc = lacs_cpu_path_fold(&fold)) != LACS_OK)
        return rc;
    return check_threads_env();
}

/* ---- figures for the bench ---- */

double lacs_cpu_algorithm_flops(const char *op, int64_t T, int64_t K, int64_t V)
{
    const lacs_op_info *info = lacs_op_find(op);
    if (!info)
        return NAN;
    if (info->family == LACS_FAMILY_RECURRENT)
        return lacs_cpu_chunk_flops(T, K, V);
    if (info->family == LACS_FAMILY_ATTENTION)
        return lacs_cpu_attention_flops(op, T, K, V);
    if (info->family == LACS_FAMILY_VJP && lacs_op_forward(info) &&
        lacs_op_forward(info)->family == LACS_FAMILY_RECURRENT && lacs_cpu_recurrent_backward_implements(op) &&
        strcmp(op, "gla_vjp") != 0) /* the chunked backward's products, with a scalar decay or none (gla's decay is
                                      * per channel: its n x n matrices are element-wise work, not products) */
        return lacs_cpu_backward_chunk_flops(T, K, V);
    return NAN;
}

/* ---- the call ---- */

int lacs_cpu_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                 lacs_tensor *outputs, int n_outputs)
{
    /* Names, shapes, parameters, dtypes and the tier: the checks every
     * built-in implementation shares (optimized/validate.c). */
    const lacs_op_info *info;
    int bf16, rc;
    if ((rc = lacs_builtin_validate_call("builtin:cpu", op, inputs, n_inputs, params, n_params, outputs, n_outputs,
                                         &info, &bf16)) != LACS_OK)
        return rc;

    lacs_cpu_call c = {.op = op, .info = info, .inputs = inputs, .n_inputs = n_inputs, .params = params,
                       .n_params = n_params, .outputs = outputs, .n_outputs = n_outputs, .bf16 = bf16};
    int native_bf16 = 0;
    if ((rc = choose_isa(&c.isa)) != LACS_OK || (rc = choose_bf16_products(&native_bf16)) != LACS_OK ||
        (rc = check_threads_env()) != LACS_OK)
        return rc;
    c.bf16_native_products = c.isa == LACS_ISA_AVX512 && native_bf16;
    c.amd = cpu_is_amd();
    c.gemm = lacs_cpu_gemm_for(c.isa);
    c.threads = lacs_cpu_threads();

    switch (info->family) {
    case LACS_FAMILY_RECURRENT:
        rc = lacs_builtin_validate_sequences(op, inputs, n_inputs, params, n_params);
        return rc != LACS_OK ? rc : lacs_cpu_recurrent(&c);
    case LACS_FAMILY_MESA:
        rc = lacs_builtin_validate_sequences(op, inputs, n_inputs, params, n_params);
        return rc != LACS_OK ? rc : lacs_cpu_mesa_net(&c);
    case LACS_FAMILY_ATTENTION:
        return lacs_cpu_attention(&c);
    case LACS_FAMILY_NORM:
        return lacs_cpu_norm(&c);
    case LACS_FAMILY_VJP:
        if (lacs_cpu_recurrent_backward_implements(op)) { /* the recurrent family's (recurrent_backward.c) */
            rc = lacs_builtin_validate_sequences(op, inputs, n_inputs, params, n_params);
            return rc != LACS_OK ? rc : lacs_cpu_recurrent_backward(&c);
        }
        if (lacs_cpu_attention_vjp_implemented(op)) /* the attention forms' (attention_backward.c) */
            return lacs_cpu_attention_vjp(&c);
        /* a VJP of neither (none in this spec's op table): a SKIP, said so and not declared (op_implemented) */
        lacs_cpu_error(LACS_UNSUPPORTED, op, "builtin:cpu does not implement this gradient (SPEC.md 4.19)");
        return LACS_UNSUPPORTED;
    }
    return lacs_cpu_error(LACS_ERR_INPUT, op, "builtin:cpu has no implementation of this family");
}

/* One predicate for lacs_cpu_run's switch above and for the declaration below. */
static int op_implemented(const lacs_op_info *info)
{
    return info->family != LACS_FAMILY_VJP || lacs_cpu_recurrent_backward_implements(info->name) ||
           lacs_cpu_attention_vjp_implemented(info->name);
}

static char declared_ops[2048];

static void build_declared_ops(void)
{
    int count;
    const lacs_op_info *ops = lacs_ops(&count);
    size_t used = 0;
    for (int i = 0; i < count; i++)
        if (op_implemented(&ops[i]) && used + strlen(ops[i].name) + 2 < sizeof declared_ops)
            used += (size_t)snprintf(declared_ops + used, sizeof declared_ops - used, "%s%s", used ? " " : "",
                                     ops[i].name);
}

const char *lacs_cpu_declared_ops(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, build_declared_ops);
    return declared_ops;
}

int lacs_impl_cpu(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                  const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    (void)context;
    return lacs_cpu_run(op, inputs, n_inputs, params, n_params, outputs, n_outputs);
}
