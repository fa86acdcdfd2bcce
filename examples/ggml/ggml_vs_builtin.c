/* ggml's ggml_gated_delta_net (through lacs_ggml_plugin.so) and builtin:cpu
 * side by side on the same inputs, timed alternately (README.md here).
 *
 *   ggml_vs_builtin [--plugin PATH] [--threads N] [--rounds R] [--steps S] [--shape T|decode|decode16 ...]
 *
 * gated_delta_rule, H = HV = 16, K = V = 128, inputs as lacs-bench draws
 * them (q, k unit rows, beta a sigmoid, g = -softplus(x)/4, v normal; h0
 * small for the decode shapes, B = 1 or 16 sequences of one token). Each
 * round times S calls of one ggml graph back to back (its inputs already in
 * ggml's layout: the adapter's conversions are not timed), then S calls of
 * lacs_cpu_run, alternately (S: --steps, default 1 for the prefill shapes
 * and 50 for decode, which a decoder runs step after step, its threads
 * awake); per call, printed: the median and the best of each over the
 * rounds, their ratio, and the largest
 * difference between the two outputs relative to the output's largest
 * magnitude (a check that both computed the same thing). Threads: --threads
 * (both; default 2), as LACS_THREADS and LACS_GGML_THREADS. ggml's workers
 * poll for work after a graph (its default, poll = 50), holding a core for
 * milliseconds: its threadpool is paused (lacs_ggml_pause_threads) before
 * builtin:cpu's calls are timed, which otherwise ran on what the spinning
 * workers left them (builtin:cpu's own workers spin 5 microseconds, then
 * sleep).
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lacs/cpu.h"
#include "lacs/lacs.h"
#include "lacs/ops.h"
#include "lacs/plugin.h"

typedef void *(*prepare_fn)(const char *, const lacs_tensor *, int, const lacs_param *, int);
typedef int (*compute_fn)(void *);
typedef void (*finish_fn)(void *, lacs_tensor *, int);
typedef void (*pause_fn)(void);
static pause_fn pause_ggml_threads;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t rng_state = 20250601u;
static double normal(void)
{
    double sum = 0; /* Irwin-Hall: 12 uniforms */
    for (int i = 0; i < 12; i++) {
        rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
        sum += (double)(rng_state >> 11) / 9007199254740992.0;
    }
    return sum - 6;
}

typedef enum { DRAW_NORMAL, DRAW_UNIT_ROWS, DRAW_STEP, DRAW_LOG_DECAY, DRAW_SMALL } draw;

static float *filled(int64_t count, int64_t row, draw kind)
{
    float *x = malloc((size_t)count * sizeof *x);
    if (!x) {
        fprintf(stderr, "ggml_vs_builtin: out of memory\n");
        exit(1);
    }
    for (int64_t start = 0; start < count; start += row) {
        double norm2 = 0;
        for (int64_t i = 0; i < row; i++) {
            double v = normal();
            v = kind == DRAW_STEP ? 1 / (1 + exp(-v)) : kind == DRAW_LOG_DECAY ? -log1p(exp(v)) / 4
                : kind == DRAW_SMALL ? v / 10 : v;
            x[start + i] = (float)v;
            norm2 += v * v;
        }
        if (kind == DRAW_UNIT_ROWS)
            for (int64_t i = 0; i < row; i++)
                x[start + i] = (float)(x[start + i] / sqrt(norm2));
    }
    return x;
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run_shape(const char *shape, int rounds, int steps, prepare_fn prepare, compute_fn compute,
                     finish_fn finish)
{
    const int decode = strncmp(shape, "decode", 6) == 0;
    if (steps < 1)
        steps = decode ? 50 : 1;
    const int64_t B = strcmp(shape, "decode16") == 0 ? 16 : 1, T = decode ? 1 : atoll(shape), H = 16, K = 128,
                  V = 128;
    if (T < 1) {
        fprintf(stderr, "ggml_vs_builtin: --shape %s: a token count, decode or decode16\n", shape);
        return 2;
    }
    const int64_t qk[4] = {B, T, H, K}, vs[4] = {B, T, H, V}, gs[3] = {B, T, H}, hs[4] = {B, H, K, V};
    lacs_tensor in[6] = {
        {"q", LACS_F32, 4, qk, filled(B * T * H * K, K, DRAW_UNIT_ROWS)},
        {"k", LACS_F32, 4, qk, filled(B * T * H * K, K, DRAW_UNIT_ROWS)},
        {"v", LACS_F32, 4, vs, filled(B * T * H * V, V, DRAW_NORMAL)},
        {"beta", LACS_F32, 3, gs, filled(B * T * H, 1, DRAW_STEP)},
        {"g", LACS_F32, 3, gs, filled(B * T * H, 1, DRAW_LOG_DECAY)},
        {"h0", LACS_F32, 4, hs, filled(B * H * K * V, V, DRAW_SMALL)},
    };
    const int n_in = decode ? 6 : 5;
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_out = 0;
    if (lacs_reference_output_shapes("gated_delta_rule", in, n_in, shapes, &n_out) != LACS_OK) {
        fprintf(stderr, "ggml_vs_builtin: %s\n", lacs_last_error());
        return 1;
    }
    lacs_tensor mine[LACS_OPS_MAX_OUTPUTS], theirs[LACS_OPS_MAX_OUTPUTS];
    for (int i = 0; i < n_out; i++) {
        const int64_t count = lacs_tensor_count(&(lacs_tensor){shapes[i].name, LACS_F32, shapes[i].ndim,
                                                                shapes[i].shape, NULL});
        mine[i] = (lacs_tensor){shapes[i].name, LACS_F32, shapes[i].ndim, shapes[i].shape, calloc((size_t)count, 4)};
        theirs[i] = (lacs_tensor){shapes[i].name, LACS_F32, shapes[i].ndim, shapes[i].shape, calloc((size_t)count, 4)};
    }
    void *call = prepare("gated_delta_rule", in, n_in, NULL, 0);
    if (!call) {
        fprintf(stderr, "ggml_vs_builtin: the ggml adapter could not prepare the graph\n");
        return 1;
    }
    /* warm-ups, then alternate rounds */
    if (compute(call) != 0 || lacs_cpu_run("gated_delta_rule", in, n_in, NULL, 0, mine, n_out) != LACS_OK) {
        fprintf(stderr, "ggml_vs_builtin: a warm-up call failed: %s\n", lacs_last_error());
        return 1;
    }
    double *t_ggml = malloc((size_t)rounds * sizeof *t_ggml), *t_cpu = malloc((size_t)rounds * sizeof *t_cpu);
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int step = 0; step < steps; step++)
            compute(call);
        t_ggml[r] = (now() - t0) / steps;
        pause_ggml_threads(); /* its workers stop polling: the cores are builtin:cpu's */
        t0 = now();
        for (int step = 0; step < steps; step++)
            lacs_cpu_run("gated_delta_rule", in, n_in, NULL, 0, mine, n_out);
        t_cpu[r] = (now() - t0) / steps;
    }
    finish(call, theirs, n_out);
    double worst = 0, largest = 0;
    for (int i = 0; i < n_out; i++) {
        const int64_t count = lacs_tensor_count(&mine[i]);
        for (int64_t j = 0; j < count; j++) {
            largest = fmax(largest, fabs(((float *)mine[i].data)[j]));
            worst = fmax(worst, fabs((double)((float *)mine[i].data)[j] - ((float *)theirs[i].data)[j]));
        }
    }
    qsort(t_ggml, (size_t)rounds, sizeof *t_ggml, compare_doubles);
    qsort(t_cpu, (size_t)rounds, sizeof *t_cpu, compare_doubles);
    const double g_med = t_ggml[rounds / 2], c_med = t_cpu[rounds / 2];
    printf("shape=%s B=%lld T=%lld H=16 K=V=128 rounds=%d steps=%d ggml_median_ms=%.3f ggml_best_ms=%.3f "
           "builtin_cpu_median_ms=%.3f builtin_cpu_best_ms=%.3f ggml_over_builtin_cpu=%.2f "
           "max_difference_relative=%.2e\n",
           shape, (long long)B, (long long)T, rounds, steps, g_med * 1e3, t_ggml[0] * 1e3, c_med * 1e3, t_cpu[0] * 1e3,
           g_med / c_med, largest > 0 ? worst / largest : worst);
    fflush(stdout);
    free(t_ggml);
    free(t_cpu);
    for (int i = 0; i < n_out; i++) {
        free(mine[i].data);
        free(theirs[i].data);
    }
    for (int i = 0; i < 6; i++)
        free(in[i].data);
    return 0;
}

int main(int argc, char **argv)
{
    const char *plugin = "build/ggml/lacs_ggml_plugin.so";
    const char *threads = "2";
    int rounds = 7, steps = 0;
    const char *shapes[16];
    int n_shapes = 0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--plugin") == 0)
            plugin = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0)
            threads = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--rounds") == 0)
            rounds = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--steps") == 0)
            steps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--shape") == 0 && n_shapes < 16)
            shapes[n_shapes++] = argv[++i];
        else {
            fprintf(stderr, "usage: ggml_vs_builtin [--plugin PATH] [--threads N] [--rounds R] [--steps S] "
                            "[--shape T|decode|decode16 ...]\n");
            return 2;
        }
    }
    if (rounds < 1)
        rounds = 1;
    if (n_shapes == 0) {
        static const char *const defaults[] = {"4096", "16384", "decode", "decode16"};
        for (int i = 0; i < 4; i++)
            shapes[n_shapes++] = defaults[i];
    }
    setenv("LACS_THREADS", threads, 1);
    setenv("LACS_GGML_THREADS", threads, 1);
    void *library = dlopen(plugin, RTLD_NOW);
    if (!library) {
        fprintf(stderr, "ggml_vs_builtin: %s\n", dlerror());
        return 2;
    }
    prepare_fn prepare = (prepare_fn)dlsym(library, "lacs_ggml_prepare");
    compute_fn compute = (compute_fn)dlsym(library, "lacs_ggml_compute");
    finish_fn finish = (finish_fn)dlsym(library, "lacs_ggml_finish");
    pause_ggml_threads = (pause_fn)dlsym(library, "lacs_ggml_pause_threads");
    if (!prepare || !compute || !finish || !pause_ggml_threads) {
        fprintf(stderr, "ggml_vs_builtin: %s does not export the adapter's entry points\n", plugin);
        return 2;
    }
    const char *isa = lacs_cpu_isa_name();
    printf("ggml_vs_builtin threads=%s builtin_cpu_isa=%s plugin=%s\n", threads, isa ? isa : "na", plugin);
    for (int i = 0; i < n_shapes; i++) {
        const int rc = run_shape(shapes[i], rounds, steps, prepare, compute, finish);
        if (rc != 0)
            return rc;
    }
    return 0;
}
