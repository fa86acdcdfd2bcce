/* lacs: shapes, inputs and errors shared by every operation (lacs spec 1.4).
 *
 * Layout (SPEC.md section 2), all row-major:
 *   q, k   [B, T, H, K]        v, o   [B, T, HV, V]     HV = G * H
 *   beta, g [B, T, HV]         gk     [B, T, HV, K]
 *   h0, ht [N, HV, K, V]       N = B, or the number of varlen sequences
 *   w      [B, T, H, K]        lambda [HV, K]    h0_kk, ht_kk [N, HV, K, K]
 * Value head i reads q/k/w head i / G (integer division, as in fla).
 * The state h is K x V (the papers' S transposed); o_t = scale * h_t^T q_t.
 */
#ifndef LACS_TYPES_H
#define LACS_TYPES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LACS_SPEC_VERSION "1.4"

/* Return codes of every lacs function. */
enum {
    LACS_OK = 0,
    LACS_ERR_SHAPE = 2,   /* a dimension is out of range or inconsistent */
    LACS_ERR_INPUT = 3,   /* a required input is missing, or an input the op does not read is given */
    LACS_ERR_VARLEN = 4,  /* cu_seqlens is not a valid offset table */
    LACS_ERR_MEMORY = 5,  /* out of memory */
    LACS_ERR_PARAM = 6,   /* a parameter is out of its domain */
    LACS_ERR_FORMAT = 7,  /* a file is not a valid safetensors or vector file (SPEC.md 10.2) */
    LACS_ERR_IO = 8       /* a file cannot be read or written, or exists and may not be replaced */
};

/* The problem's sizes. With cu_seqlens (N + 1 non-decreasing offsets, first 0,
 * last T) the batch holds N packed sequences and B must be 1; each sequence
 * starts from its own h0[n] and yields its own ht[n]. Empty sequences are legal. */
typedef struct {
    int64_t B, T, H, HV, K, V;
    const int64_t *cu_seqlens; /* NULL for fixed-length batches */
    int64_t N;                 /* number of sequences when cu_seqlens != NULL */
} lacs_dims;

/* The inputs of every op on sequences (all but the norms). Inputs are
 * double because golden inputs are fp32 or bf16 values, exact in double; the
 * long double reference reads the same numbers. An op reads only the inputs
 * SPEC.md lists for it: a missing required one, or a given one it would not
 * read, is LACS_ERR_INPUT (so a misplaced gate can never be silently ignored). */
typedef struct {
    const double *q, *k, *v;  /* required by every op */
    const double *beta;       /* [B, T, HV]: delta-rule step size (eta, beta) */
    const double *g;          /* [B, T, HV]: natural-log scalar decay, alpha = exp(g) */
    const double *gk;         /* [B, T, HV, K]: natural-log decay per key channel */
    const double *g_gamma;    /* [HV]: constant natural-log decay per head (retention) */
    const double *h0;         /* [N, HV, K, V] initial state, or NULL for zeros */
    const double *w;          /* [B, T, H, K]: PaTH's Householder directions */
    const double *lambda;     /* [HV, K]: MesaNet's regulariser, per key channel */
    const double *h0_kk;      /* [N, HV, K, K]: MesaNet's initial key-key state, or NULL */
    double scale;             /* readout scale; fla's default is K^-1/2 */
    double eps;               /* linear_attn_postnorm: RMSNorm epsilon */
} lacs_inputs;

/* The cotangents a VJP of an op on sequences reads (SPEC.md 4.19): the
 * gradient of a scalar loss L with respect to each output. Named `do`, `dht`,
 * `dht_kk` in the vectors ("d" + the output's name, as `dy` for `y`); `do` is
 * a C keyword, hence `dout` here. Double in both builds, like the inputs. */
typedef struct {
    const double *dout;   /* `do` [B, T, HV, V], the cotangent of o: required */
    const double *dht;    /* [N, HV, K, V], the cotangent of ht, or NULL (zero); stateful ops only */
    const double *dht_kk; /* [N, HV, K, K], the cotangent of MesaNet's ht_kk, or NULL (zero) */
} lacs_cotangents;

/* The two L2-normalisation conventions of the field (lacs_ref_l2norm). */
typedef enum {
    LACS_L2NORM_SQRT_EPS = 0, /* x / sqrt(sum x^2 + eps): fla's in-kernel form */
    LACS_L2NORM_MAX_EPS = 1   /* x / max(||x||, eps): torch F.normalize, ggml */
} lacs_l2norm_convention;

/* The three forms of DeltaFormer (H11, lacs_ref_deltaformer). */
typedef enum {
    LACS_DELTAFORMER_EXP = 0,     /* the documents': A = exp(s QK^T + log M), B = exp(s KK^T + log(M - I)) */
    LACS_DELTAFORMER_SOFTMAX = 1, /* the same with each exp a causal softmax (B's over j < i) */
    LACS_DELTAFORMER_FLA = 2      /* fla's: B from s q_i.k_j, softmax over j < i */
} lacs_deltaformer_form;

/* The test-time-training losses of H5 and H8 (lacs_ref_ttt_loss). */
typedef enum {
    LACS_TTT_LINEAR = 0,
    LACS_TTT_RETENTION = 1,
    LACS_TTT_DELTA = 2,
    LACS_TTT_COMBA = 3
} lacs_ttt_loss_kind;

/* The last error of this thread as one line naming the op and the problem,
 * e.g. "delta_rule: input 'beta' is required". */
const char *lacs_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
