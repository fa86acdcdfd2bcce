/* Shared by the Criterion suites: the shapes the issue fixes for form tests,
 * and the deliberately wrong implementations (tests/mutants.c). */
#ifndef LACS_TESTS_SUPPORT_H
#define LACS_TESTS_SUPPORT_H

#include <stdint.h>

#include "lacs/lacs.h"

/* Forms agree to 1e-12 and double agrees with long double to 1e-13, normwise
 * per (batch, head) (SPEC.md 5.2). A wrong variant must miss by far more. */
#define FORMS_BOUND 1e-12
#define LONG_DOUBLE_BOUND 1e-13
#define WRONG_BY_AT_LEAST 1e-6

/* K != V and HV = 2H, as the issue asks; T varies. */
lacs_dims test_dims(int64_t T);

/* A deterministic value in [-1, 1) for element i of stream `stream` (a
 * splitmix64-style hash of both): the cpu suites' inputs. */
double test_pattern(uint64_t i, uint64_t stream);

/* Deliberately wrong delta-rule family implementations, written from scratch
 * (own indexing, own loops) with one bug each. With no bug they must equal the
 * reference, which shows the harness is right; with a bug they must not. */
enum {
    BUG_NONE = 0,
    BUG_BETA_ON_WRITE_ONLY = 1u << 0,    /* h = (I - k k^T) h + beta k v^T */
    BUG_DECAY_ON_WRITE = 1u << 1,        /* h = alpha ((I - beta k k^T) h + beta k v^T) */
    BUG_GVA_TILED = 1u << 2,             /* value head i reads q/k head i % H (ggml), not i / G */
    BUG_READOUT_BEFORE_UPDATE = 1u << 3, /* o_t = scale h_{t-1}^T q_t */
    BUG_COMBA_DECAYED_STATE = 1u << 4    /* Comba's correction reads exp(g) h_{t-1} */
};
/* Gated delta rule with scalar g (g NULL: the plain delta rule), or Comba's
 * form when BUG_COMBA_DECAYED_STATE or comba is set. */
int mutant_delta_family(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, int comba,
                        double *o, double *ht);

/* Deliberately wrong attention forms (tests/mutants.c), from scratch like the
 * delta family: with bugs = 0 they equal the reference. */
enum {
    BUG_PATH_REVERSED = 1u << 0,        /* R_ij = H_{j+1} ... H_i, the product reversed */
    BUG_PATH_FROM_J = 1u << 1,          /* R_ij = H_i ... H_j: the product starts at t = j */
    BUG_PATH_GATE_AFTER_SCALE = 1u << 2 /* l_ij = scale q^T R k + G_i - G_j (FoX's placement) */
};
/* PaTH (H12), explicit form, with optional gate g. */
int mutant_path_attn(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, double *o);

enum {
    BUG_DELTAFORMER_DIAGONAL = 1u << 0 /* the first stage's softmax over j <= i, not j < i */
};
/* DeltaFormer (H11), fla's form (q in the first stage), beta optional. */
int mutant_deltaformer_fla(const lacs_dims *d, const lacs_inputs *in, unsigned bugs, double *o);

#endif
