/* lacs-bench-backward: where the time of builtin:cpu's recurrent backward
 * goes (optimized/cpu/README.md section 8): single-threaded microseconds per
 * token of each of its kernels (recurrent_backward_kernels.h) on one head,
 * K = V = 128, a chunk of 8 tokens whose states stay in L2, for each
 * instruction set the CPU has; the Gated DeltaNet update (a decay, a step).
 *
 *   lacs-bench-backward [--batches N]
 *
 * Each figure is the best of N batches (default 7) of 0.05 s: the best,
 * because other work on the machine only ever slows a batch down. A token of
 * the backward runs the forward twice in place (the checkpoint passes), once
 * into the chunk's states, and the adjoint once; `equivalent_gflops` counts
 * the bench's 18 K V flops per token (3x the forward's recurrent count) over
 * that sum.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../optimized/cpu/recurrent_backward.h"

enum { K = 128, V = 128, C = 8 };

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
    float *states, *dh, *e, *rows, *grads;
    lacs_cpu_backward_token x[C];
} problem;

/* 0: forward in place, 1: forward into the chunk's states, 2: the adjoint */
static void run(const lacs_cpu_backward_kernels *kernels, problem *p, int which)
{
    float *g = p->grads;
    if (which == 0)
        kernels->forward(BACKWARD_DELTA, K, V, p->states, 0, C, p->x, p->e);
    else if (which == 1)
        kernels->forward(BACKWARD_DELTA, K, V, p->states, K * V, C, p->x, p->e);
    else
        kernels->backward(BACKWARD_DELTA, K, V, 0.088f, p->states, K * V, C, p->e, p->x, p->dh, g, g + C * K,
                          g + 2 * C * K, g + 3 * C * K, g + 4 * C * K, g + 4 * C * K + C * V, g + 5 * C * K + C * V,
                          g + 5 * C * K + 2 * C * V);
}

/* Microseconds per token: the best of `batches` batches. */
static double time_kernel(const lacs_cpu_backward_kernels *kernels, problem *p, int which, int batches)
{
    double best = 1e30;
    for (int b = 0; b < batches; b++) {
        long calls = 0;
        const double t0 = now_seconds();
        double t = t0;
        do {
            run(kernels, p, which);
            calls++;
            t = now_seconds();
        } while (t - t0 < 0.05);
        const double per_token = (t - t0) / (double)(calls * C) * 1e6;
        best = per_token < best ? per_token : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    int batches = 7;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            batches = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: lacs-bench-backward [--batches N]\n");
            return 2;
        }
    }
    problem p;
    p.states = calloc((size_t)(C + 1) * K * V, sizeof(float));
    p.dh = calloc((size_t)K * V, sizeof(float));
    p.e = calloc((size_t)C * V, sizeof(float));
    p.rows = calloc((size_t)C * (4 * K + 2 * V), sizeof(float));
    p.grads = calloc((size_t)C * (4 * K + 4 * V) + C, sizeof(float));
    if (!p.states || !p.dh || !p.e || !p.rows || !p.grads) {
        fprintf(stderr, "lacs-bench-backward: out of memory\n");
        return 1;
    }
    for (int i = 0; i < C; i++) { /* a realistic token: unit k and q, decay 0.95, beta 0.5 */
        float *q = p.rows + i * (4 * K + 2 * V), *k = q + K, *decay = k + K, *v = decay + K, *dout = v + V;
        for (int c = 0; c < K; c++) {
            q[c] = k[c] = 0.0884f * (c % 2 ? 1.0f : -1.0f);
            decay[c] = 0.95f;
        }
        for (int j = 0; j < V; j++)
            v[j] = dout[j] = 0.1f * (float)((i + j) % 7 - 3);
        p.x[i] = (lacs_cpu_backward_token){.q = q, .k = k, .v = v, .dout = dout, .decay = decay, .coef = 0.5f};
    }
    static const struct {
        const char *name;
        const lacs_cpu_backward_kernels *kernels;
    } sets[] = {{"avx512", &lacs_cpu_backward_kernels_avx512},
                {"avx2", &lacs_cpu_backward_kernels_avx2},
                {"scalar", &lacs_cpu_backward_kernels_scalar}};
    for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
        if (strcmp(sets[s].name, "scalar") != 0 && !lacs_cpu_isa_supported(sets[s].name))
            continue;
        const double in_place = time_kernel(sets[s].kernels, &p, 0, batches);
        const double into_states = time_kernel(sets[s].kernels, &p, 1, batches);
        const double adjoint = time_kernel(sets[s].kernels, &p, 2, batches);
        const double total = 2 * in_place + into_states + adjoint;
        printf("backward isa=%s K=%d V=%d chunk=%d threads=1 forward_in_place_us=%.2f forward_into_states_us=%.2f "
               "adjoint_us=%.2f per_token_us=%.2f equivalent_gflops=%.2f\n",
               sets[s].name, K, V, C, in_place, into_states, adjoint, total, 18.0 * K * V / total / 1e3);
    }
    free(p.states);
    free(p.dh);
    free(p.e);
    free(p.rows);
    free(p.grads);
    return 0;
}
