/* lacs-bench-gemm: single-threaded GFLOP/s of builtin:cpu's GEMM kernels
 * (optimized/cpu/gemm_*.c) at the shapes of the chunk algorithm (chunk 32,
 * head dims 128) and the attention blocks, next to OpenBLAS's cblas_sgemm
 * on one thread at the same shapes, and OpenBLAS on its default threads at
 * 2048^3 (the machine's "sgemm GFLOP/s" anchor).
 *
 *   lacs-bench-gemm [--batches N] [--batch-seconds S]
 *
 * Each figure is the best of N batches (default 7) of calls, a batch lasting
 * about S seconds (default 0.05): the best, because other work on the machine
 * only ever slows a batch down. GFLOP/s = 2 m n k / time per call.
 *
 * What is timed: sgemm (ours and OpenBLAS's) takes B row-major as it is; any
 * packing either does inside the call is included. bgemm takes B already
 * packed (lacs_cpu_pack_bf16, done once, as the recurrent family packs a
 * chunk's operand once for several products): the line "bgemm+pack" adds the
 * packing of B to every call.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../optimized/cpu/cpu.h"

typedef struct {
    int64_t m, n, k;
} shape;

/* The chunk algorithm's products at C = 32, K = V = 128 ([K; Q] K^T, T (b v - R) and P V', [Kd; Qd] S, the
 * state update Kl^T V'), then those it had at C = 64 (kept: the figures before and after a change compare the
 * same shapes), the attention blocks' (128 x 128 x 64) and a single row. */
static const shape chunk_shapes[] = {{64, 32, 128},  {32, 128, 32},  {64, 128, 128}, {128, 128, 32},
                                     {64, 64, 128},  {64, 128, 64},  {128, 128, 64}, {1, 128, 128}};

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A uniform value in [-1, 1) from a 64-bit LCG (reproducible, no libc state). */
static float random_value(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

typedef struct {
    const shape *s;
    const lacs_cpu_gemm *gemm; /* NULL: OpenBLAS */
    int bf16;
    int pack_each_call;
    const float *A, *B;
    float *C;
    const uint16_t *A16, *B16;
    uint16_t *Bp;
} work;

static void run_once(const work *w)
{
    const shape *s = w->s;
    if (!w->gemm)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)s->m, (int)s->n, (int)s->k, 1.0f, w->A,
                    (int)s->k, w->B, (int)s->n, 0.0f, w->C, (int)s->n);
    else if (!w->bf16)
        w->gemm->sgemm(s->m, s->n, s->k, w->A, s->k, w->B, s->n, w->C, s->n, 0);
    else {
        if (w->pack_each_call)
            lacs_cpu_pack_bf16(s->k, s->n, w->B16, s->n, w->Bp);
        w->gemm->bgemm(s->m, s->n, s->k, w->A16, s->k, w->Bp, w->C, s->n, 0);
    }
}

/* Best seconds per call over `batches` batches of about `batch_seconds` each. */
static double best_seconds_per_call(const work *w, int batches, double batch_seconds)
{
    int64_t calls = 1;
    for (;;) { /* calibrate: enough calls to fill a batch */
        const double t0 = now_seconds();
        for (int64_t c = 0; c < calls; c++)
            run_once(w);
        const double t = now_seconds() - t0;
        if (t >= batch_seconds / 4 || calls >= (int64_t)1 << 30) {
            calls = (int64_t)((double)calls * batch_seconds / (t > 0 ? t : 1e-9)) + 1;
            break;
        }
        calls *= 4;
    }
    double best = 1e300;
    for (int b = 0; b < batches; b++) {
        const double t0 = now_seconds();
        for (int64_t c = 0; c < calls; c++)
            run_once(w);
        const double t = (now_seconds() - t0) / (double)calls;
        if (t < best)
            best = t;
    }
    return best;
}

static double gflops(const shape *s, double seconds) { return 2.0 * (double)s->m * s->n * s->k / seconds * 1e-9; }

int main(int argc, char **argv)
{
    int batches = 7;
    double batch_seconds = 0.05;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batches") == 0 && i + 1 < argc)
            batches = atoi(argv[++i]);
        else if (strcmp(argv[i], "--batch-seconds") == 0 && i + 1 < argc)
            batch_seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--batches N] [--batch-seconds S]\n", argv[0]);
            return 2;
        }
    }
    if (batches < 1 || !(batch_seconds > 0)) {
        fprintf(stderr, "%s: --batches must be >= 1 and --batch-seconds > 0\n", argv[0]);
        return 2;
    }

    /* Operands big enough for the largest shape (2048^3), filled once. */
    const int64_t big = 2048, elements = big * big;
    float *A = malloc((size_t)elements * sizeof *A), *B = malloc((size_t)elements * sizeof *B);
    float *C = malloc((size_t)elements * sizeof *C);
    uint16_t *A16 = malloc((size_t)elements * sizeof *A16), *B16 = malloc((size_t)elements * sizeof *B16);
    uint16_t *Bp = malloc(lacs_cpu_packed_bf16_size(big, big) * sizeof *Bp);
    if (!A || !B || !C || !A16 || !B16 || !Bp) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    uint64_t state = 42;
    for (int64_t i = 0; i < elements; i++) {
        A[i] = random_value(&state);
        B[i] = random_value(&state);
        A16[i] = lacs_cpu_f32_to_bf16(A[i]);
        B16[i] = lacs_cpu_f32_to_bf16(B[i]);
    }

    printf("OpenBLAS %s, core %s\n", openblas_get_config(), openblas_get_corename());
    const shape square = {big, big, big};
    work anchor = {.s = &square, .A = A, .B = B, .C = C};
    printf("%-28s %5s %5s %5s %8.1f GFLOP/s (threads %d)\n", "openblas sgemm", "2048", "2048", "2048",
           gflops(&square, best_seconds_per_call(&anchor, batches < 3 ? batches : 3, 0.5)),
           openblas_get_num_threads());

    openblas_set_num_threads(1);
    printf("single thread, GFLOP/s:\n%-28s %5s %5s %5s %8s\n", "kernel", "m", "n", "k", "GFLOP/s");
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    for (size_t si = 0; si < sizeof chunk_shapes / sizeof chunk_shapes[0]; si++) {
        const shape *s = &chunk_shapes[si];
        work w = {.s = s, .A = A, .B = B, .C = C, .A16 = A16, .B16 = B16, .Bp = Bp};
        printf("%-28s %5lld %5lld %5lld %8.1f\n", "openblas sgemm", (long long)s->m, (long long)s->n,
               (long long)s->k, gflops(s, best_seconds_per_call(&w, batches, batch_seconds)));
        lacs_cpu_pack_bf16(s->k, s->n, B16, s->n, Bp);
        for (int i = 0; i < 3; i++) {
            if (!lacs_cpu_isa_supported(isas[i])) {
                printf("%-28s skipped: this CPU lacks %s\n", isas[i], isas[i]);
                continue;
            }
            const lacs_cpu_gemm *gemm =
                lacs_cpu_gemm_for(i == 0 ? LACS_ISA_AVX512 : i == 1 ? LACS_ISA_AVX2 : LACS_ISA_SCALAR);
            if (!gemm->sgemm || !gemm->bgemm) {
                printf("%-28s skipped: no kernels yet\n", isas[i]);
                continue;
            }
            char name[64];
            const char *what[] = {"sgemm", "bgemm", "bgemm+pack"};
            for (int variant = 0; variant < 3; variant++) {
                w.gemm = gemm;
                w.bf16 = variant > 0;
                w.pack_each_call = variant == 2;
                snprintf(name, sizeof name, "%s %s", gemm->isa, what[variant]);
                printf("%-28s %5lld %5lld %5lld %8.1f\n", name, (long long)s->m, (long long)s->n, (long long)s->k,
                       gflops(s, best_seconds_per_call(&w, batches, batch_seconds)));
            }
        }
    }
    free(A);
    free(B);
    free(C);
    free(A16);
    free(B16);
    free(Bp);
    return 0;
}
