/* builtin:cpu internals: what the family files (recurrent.c, attention.c,
 * norms.c, mesa.c) share. dispatch.c implements it, except the GEMM kernels
 * (gemm_frame.h over the microkernels of gemm_scalar.c, gemm_avx2.c and
 * gemm_avx512.c: one table per instruction set).
 */
#ifndef LACS_CPU_INTERNAL_H
#define LACS_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/cpu.h"
#include "lacs/ops.h"
#include "lacs/plugin.h"
#include "lacs/types.h"

typedef enum { LACS_ISA_SCALAR = 0, LACS_ISA_AVX2 = 1, LACS_ISA_AVX512 = 2 } lacs_cpu_isa;

/* ---- the GEMM kernels of one instruction set ---- */

/* Options of the general products (gemm_frame.h). */
enum {
    LACS_GEMM_A_TRANSPOSED = 1, /* sgemm: op(A) = A^T, A given as [k x m] (lda); bgemm: A^T [k x m] given packed as
                                 * lacs_cpu_pack_bf16 packs a B (k rounded up to even; lda: uint16 from one pair of
                                 * rows to the next), so that the pair (op(A)[i][2q], op(A)[i][2q+1]) is adjacent */
    LACS_GEMM_B_TRANSPOSED = 2, /* sgemm: op(B) = B^T, B given as [n x k] (ldb) */
    LACS_GEMM_A_LOWER = 4,      /* op(A)[i][p] = 0 for p > i (stored as 0): the frame may skip those products */
    LACS_GEMM_C_LOWER = 8,      /* only C[i][j], j <= i, is wanted: some of the others may be left as they were */
    LACS_GEMM_B_LOWER = 16      /* sgemm: op(B)[p][j] = 0 for p < j (stored as 0): the frame may skip those products */
};

typedef struct {
    const char *isa;
    /* C[m x n] = A[m x k] B[k x n], or C += A B when `accumulate`; row-major,
     * leading dimensions in elements; fp32 throughout. k = 0 gives C = 0 (or
     * leaves C). */
    void (*sgemm)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                  float *C, int64_t ldc, int accumulate);
    /* The same with bf16 operands and fp32 accumulation: A [m x k] bf16
     * row-major, B packed by lacs_cpu_pack_bf16 (k rounded up to even). */
    void (*bgemm)(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp, float *C,
                  int64_t ldc, int accumulate);
    /* The general forms: C = op(A) op(B) + beta C (beta = 0 reads nothing of
     * C), with the LACS_GEMM_* flags (bgemm: A_TRANSPOSED, A_LOWER and C_LOWER only). */
    void (*sgemm_general)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B, int64_t ldb,
                          float *C, int64_t ldc, float beta, unsigned flags);
    void (*bgemm_general)(int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda, const uint16_t *Bp,
                          float *C, int64_t ldc, float beta, unsigned flags);
    /* op(B) [k x n] (B_TRANSPOSED: B given as [n x k]) packed once, into
     * packed_b_size(k, n) floats of this table's own layout, for several
     * sgemm_packed, which read it in place of B (the other flags as
     * sgemm_general's). */
    size_t (*packed_b_size)(int64_t k, int64_t n);
    void (*pack_b)(int64_t k, int64_t n, const float *B, int64_t ldb, unsigned flags, float *B_packed);
    /* That layout: panels of nr columns, one after the other, each k rows of
     * nr floats: B_packed[(j / nr) k nr + p nr + j % nr] = op(B)[p][j], 0 past
     * n. A matrix kept in it (the recurrent state, recurrent_kernels.h) is
     * written by sgemm_packed one panel at a time (C = its panel, ldc = nr). */
    int64_t nr;
    void (*sgemm_packed)(int64_t m, int64_t n, int64_t k, const float *A, int64_t lda, const float *B_packed,
                         float *C, int64_t ldc, float beta, unsigned flags);
} lacs_cpu_gemm;

extern const lacs_cpu_gemm lacs_cpu_gemm_scalar;
extern const lacs_cpu_gemm lacs_cpu_gemm_avx2;
extern const lacs_cpu_gemm lacs_cpu_gemm_avx512;
/* The table of `isa`. */
const lacs_cpu_gemm *lacs_cpu_gemm_for(lacs_cpu_isa isa);

/* B packed for bgemm (the layout of vdpbf16ps, two consecutive k per 32-bit
 * lane): Bp[(p / 2) * 2 n + 2 j + p % 2] = B[p][j] for p < k, j < n, and 0 for
 * p = k when k is odd. Bp holds lacs_cpu_packed_bf16_size(k, n) elements. */
size_t lacs_cpu_packed_bf16_size(int64_t k, int64_t n);
/* From B [k x n] row-major (leading dimension ldb). */
void lacs_cpu_pack_bf16(int64_t k, int64_t n, const uint16_t *B, int64_t ldb, uint16_t *Bp);

/* ---- bfloat16 ---- */

static inline float lacs_cpu_bf16_to_f32(uint16_t b)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)b << 16};
    return v.f;
}
/* Round to nearest even; NaN stays NaN (quiet), inf stays inf. */
static inline uint16_t lacs_cpu_f32_to_bf16(float f)
{
    union { float f; uint32_t u; } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v.u >> 16) | 0x0040u);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
static inline float lacs_cpu_round_bf16(float f) { return lacs_cpu_bf16_to_f32(lacs_cpu_f32_to_bf16(f)); }

/* Element i of a floating-point tensor, F32 or BF16, as fp32 (exact). */
static inline float lacs_cpu_tensor_at(const lacs_tensor *t, int64_t i)
{
    if (t->dtype == LACS_BF16)
        return lacs_cpu_bf16_to_f32(((const uint16_t *)t->data)[i]);
    return ((const float *)t->data)[i];
}
/* Elements offset .. offset + n - 1 of such a tensor, as fp32, into out. */
void lacs_cpu_tensor_row(const lacs_tensor *t, int64_t offset, int64_t n, float *out);

/* ---- one call ---- */

typedef struct {
    const char *op;
    const lacs_op_info *info;
    const lacs_tensor *inputs;
    int n_inputs;
    const lacs_param *params;
    int n_params;
    lacs_tensor *outputs;
    int n_outputs;
    int bf16;                 /* q (x for the norms) is BF16: the bf16 tier; other inputs may be either */
    lacs_cpu_isa isa;
    int bf16_native_products; /* avx512 and LACS_CPU_BF16_PRODUCTS native (dispatch.c): vdpbf16ps for bf16 products */
    int amd;                  /* the CPU is AMD's (dispatch.c): for choices that keep the bits, faster on one vendor */
    const lacs_cpu_gemm *gemm;
    int threads;
} lacs_cpu_call;

/* The input named `name`, or NULL when it is not given. */
const lacs_tensor *lacs_cpu_input(const lacs_cpu_call *c, const char *name);
/* The output named `name`, or NULL when the caller does not want it. */
lacs_tensor *lacs_cpu_output(const lacs_cpu_call *c, const char *name);
/* Parameter `name`: the value given, else the op's default
 * (lacs_reference_param_default), else `fallback`. */
double lacs_cpu_param(const lacs_cpu_call *c, const char *name, double fallback);
/* A floating-point input as fp32: a copy (convert BF16, copy F32) from
 * lacs_cpu_scratch_alloc, to be given back with lacs_cpu_scratch_free; NULL
 * when absent or out of memory (*oom set to 1 then). */
float *lacs_cpu_input_f32(const lacs_cpu_call *c, const char *name, int *oom);
/* The sequences of a [B, T, ...] input: n = 0 .. N - 1 (cu_seqlens) or
 * 0 .. B - 1. Returns the length of sequence n and sets *start, both in tokens
 * of the flattened [B * T] axis. */
int64_t lacs_cpu_sequences(const lacs_cpu_call *c, int64_t T, int64_t n, int64_t *start);

/* Records the error (lacs_last_error) and returns `code`. */
int lacs_cpu_error(int code, const char *op, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- workspaces kept between calls ---- */

/* A call's large buffers (the norms' column sums, the attention forms' tiles,
 * the recurrent family's states, the bf16 tier's widened inputs) come from
 * here: lacs_cpu_scratch_alloc(bytes) is malloc's (64-byte aligned, content
 * indeterminate), lacs_cpu_scratch_calloc(bytes) zeroed, and
 * lacs_cpu_scratch_free(p) (NULL allowed) keeps the buffer for a later call
 * (up to LACS_CPU_SCRATCH_KEPT buffers, LACS_CPU_SCRATCH_KEPT_BYTES in all)
 * instead of giving it back to the system. Why: an allocation of megabytes is
 * fresh pages from the kernel, each faulted in and zeroed at first touch,
 * and given back at free (a TLB shootdown): on the Xeon of README.md section
 * 8.2.1 (a virtual machine, where a fault costs more) dyt_vjp on 64 x 4096
 * took 0.95 ms a call with its column sums allocated so, 0.31 ms with them
 * reused. A call takes the smallest kept buffer large enough, so buffers
 * are reused as a call's shapes repeat. Thread-safe; a fork()ed child keeps
 * the buffers; under AddressSanitizer nothing is kept (a buffer used after
 * its free must still be caught). lacs_cpu_release_scratch (lacs/cpu.h)
 * frees them all. */
#define LACS_CPU_SCRATCH_KEPT 16
#define LACS_CPU_SCRATCH_KEPT_BYTES ((size_t)512 << 20)
void *lacs_cpu_scratch_alloc(size_t bytes);
void *lacs_cpu_scratch_calloc(size_t bytes);
void lacs_cpu_scratch_free(void *p);

/* ---- threads ---- */

/* Runs fn(context, item, thread) for item = 0 .. n_items - 1 on up to
 * `threads` threads (thread in 0 .. threads - 1, so that each may own a
 * workspace), items handed out in order as threads free up. Returns when all
 * are done. */
typedef void (*lacs_cpu_task)(void *context, int64_t item, int thread);
void lacs_cpu_parallel_for(int threads, int64_t n_items, lacs_cpu_task fn, void *context);

/* As lacs_cpu_parallel_for, but the items are cut into one contiguous range
 * per thread taking part, each thread runs its own range first, in order
 * (thread t the t-th: the same items on the same thread from call to call,
 * so that its part of a state stays in that core's cache), then takes the
 * items still left in the other ranges (a thread that wakes late, or is
 * preempted on a loaded machine, leaves its items to the others, who do not
 * wait for it). For many short items of equal work: a decode step. */
void lacs_cpu_parallel_split(int threads, int64_t n_items, lacs_cpu_task fn, void *context);

/* ---- figures for the bench ---- */

/* Outputs from this size up are written with non-temporal stores where a
 * kernel writes them in one pass (the norms' forward ops, decoding's ht):
 * half the 32 MiB L3 of the machine the kernels were tuned on, an output this
 * large would not stay there for the next op anyway. */
#define LACS_CPU_STREAM_BYTES (16.0 * 1024 * 1024)

/* The bytes of a cache line (x86-64): a non-temporal store writes whole lines to memory only when the line
 * is filled whole, so the streamed outputs are cut on these boundaries. */
#define LACS_CPU_CACHE_LINE 64

/* PaTH's blocks per fold (attention.c, README.md section 5): a query block
 * carries its queries over each block of its own fold and over each earlier
 * fold at once. LACS_CPU_PATH_FOLD (a whole number in 1 .. 64; 1: over each
 * block, no fold) replaces LACS_CPU_PATH_FOLD_DEFAULT; an error names a bad
 * value. */
#define LACS_CPU_PATH_FOLD_DEFAULT 4
int lacs_cpu_path_fold(int64_t *blocks);

/* The chunk length of the recurrent family's chunk algorithm. */
#define LACS_CPU_CHUNK 32
/* The floating-point operations builtin:cpu's algorithm performs for `op` on
 * one head of one sequence of T tokens (K, V the head dims), counted as its
 * dense products (the recurrent family with scalar or no gates, and its
 * gradients, the chunked backward): the rooflines of the bench
 * (bench/lacs_bench.c). NAN for an op it does not count. Each family counts
 * its own algorithm, next to it. */
double lacs_cpu_algorithm_flops(const char *op, int64_t T, int64_t K, int64_t V);
double lacs_cpu_chunk_flops(int64_t T, int64_t K, int64_t V);                       /* recurrent.c */
double lacs_cpu_backward_chunk_flops(int64_t T, int64_t K, int64_t V);              /* recurrent_backward.c */
double lacs_cpu_attention_flops(const char *op, int64_t T, int64_t K, int64_t V);   /* attention.c */

/* ---- the families (each file one; called by lacs_cpu_run after validation) ---- */

int lacs_cpu_recurrent(const lacs_cpu_call *c);  /* recurrent.c: linear_attn ... efla */
int lacs_cpu_mesa_net(const lacs_cpu_call *c);   /* mesa.c */
int lacs_cpu_attention(const lacs_cpu_call *c);  /* attention.c: softmax_attn, fox, deltaformer, path_attn */
/* attention_backward.c: softmax_attn_vjp, fox_vjp, deltaformer_vjp, path_attn_vjp (the ops of which
 * lacs_cpu_attention_vjp_implemented says 1) */
int lacs_cpu_attention_vjp(const lacs_cpu_call *c);
int lacs_cpu_attention_vjp_implemented(const char *op);
int lacs_cpu_norm(const lacs_cpu_call *c);       /* norms.c: rmsnorm ... l2norm_vjp */

#endif
