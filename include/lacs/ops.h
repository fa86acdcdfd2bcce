/* lacs: every op of the reference behind one call on named tensors
 * (SPEC.md 10.1, 10.4).
 *
 * The golden vectors name their inputs and outputs (`q`, `beta`, `x`, ...;
 * `o`, `ht`, `y`, `dx`, ...) and carry numeric parameters (`scale`, `eps`,
 * `form`, ...). This table says, for each op, which names it takes and gives,
 * and runs the reference on them, in double or in long double. The generators
 * compute the goldens through it; the checker's `builtin:reference` and
 * `lacs run` use it the same way. Tensors are those of the plugin
 * ABI (lacs/plugin.h).
 */
#ifndef LACS_OPS_H
#define LACS_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LACS_OPS_MAX_OUTPUTS 8

typedef enum {
    LACS_FAMILY_RECURRENT = 0, /* o [B, T, HV, V] and the state ht [N, HV, K, V] */
    LACS_FAMILY_ATTENTION = 1, /* o [B, T, HV, V] only */
    LACS_FAMILY_MESA = 2,      /* o, ht and ht_kk [N, HV, K, K] */
    LACS_FAMILY_NORM = 3,      /* x [rows, dim] and its outputs */
    LACS_FAMILY_VJP = 4        /* the VJP of an op on sequences (SPEC.md 4.19), named <op>_vjp: its
                                  inputs and the cotangents do, dht in; d<x> (x's shape) for each
                                  floating-point input x given out */
} lacs_op_family;

typedef struct {
    const char *name;      /* "delta_rule" */
    lacs_op_family family;
    const char *labels;    /* "H6, E1" */
    const char *reference; /* the function that computes it, e.g. "lacs_ref_delta_rule" */
    const char *required;  /* space-separated input names, e.g. "q k v beta" */
    const char *optional;  /* e.g. "h0 cu_seqlens" */
    const char *params;    /* numeric parameters it reads, e.g. "scale" */
    const char *outputs;   /* every output it can give, e.g. "o ht" */
} lacs_op_info;

const lacs_op_info *lacs_ops(int *count);
const lacs_op_info *lacs_op_find(const char *name);
/* For an op of LACS_FAMILY_VJP, the op it differentiates (its name without
 * "_vjp"); NULL for any other op. */
const lacs_op_info *lacs_op_forward(const lacs_op_info *info);
/* Whether a VJP output is the gradient of a per-token input ([B, T, ...]:
 * dq, dk, dv, dw, dbeta, dg, dgk), as opposed to one of a state (dh0,
 * dh_split) or a per-head sum (dg_gamma). */
int lacs_vjp_output_is_per_token(const char *name);

/* An output the op gives for these inputs: its name (without `expected.`)
 * and shape. */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} lacs_output_shape;

/* The words of a space-separated list (the fields above, the catalog's
 * recipes and flags): returns the length of the next word, points *word at
 * it and moves *cursor past it; 0 at the end of the list. Loop as
 *   for (const char *cursor = list, *w; (len = lacs_next_word(&cursor, &w)) > 0;) */
size_t lacs_next_word(const char **cursor, const char **word);
/* Is `word` one of the words of `list` (NULL: none)? */
int lacs_word_in_list(const char *list, const char *word);
/* The product of t's shape (1 for ndim 0). */
int64_t lacs_tensor_count(const lacs_tensor *t);

/* The default of parameter `name` of `op` for these inputs: scale K^-1/2 (K
 * from q), eps 0, form 1 (LACS_DELTAFORMER_SOFTMAX), convention 0
 * (LACS_L2NORM_SQRT_EPS). Returns 1 with *value set if the op reads `name`
 * and it has a default, else 0 (cap has none). The one place the defaults
 * live: lacs_reference_run applies them, the generators record them. */
int lacs_reference_param_default(const char *op, const lacs_tensor *inputs, int n_inputs, const char *name,
                                 double *value);

/* The outputs `op` gives for `inputs` (for the norms' VJPs, dweight and dbias
 * only when `weight` is given; for the VJPs of the ops on sequences, d<x> for
 * each input x given, with x's shape). Checks every name and shape: an unknown op or
 * input is LACS_ERR_INPUT, a shape that does not agree with the others
 * LACS_ERR_SHAPE, naming the tensor. Returns the count in *n_outputs. */
int lacs_reference_output_shapes(const char *op, const lacs_tensor *inputs, int n_inputs,
                                 lacs_output_shape *outputs, int *n_outputs);

/* Runs the reference of `op` on `inputs` (F32, BF16 or F64; cu_seqlens I64),
 * with `params` (a parameter the op does not read is LACS_ERR_PARAM; one not
 * given takes lacs_reference_param_default's value). Writes
 * every output the shapes above give, matched by name in `outputs` (F64 or
 * F32, shape as given by lacs_reference_output_shapes). `long_double`: compute
 * in the long double build, rounded to the outputs' dtype at the end. */
int lacs_reference_run(const char *op, const lacs_tensor *inputs, int n_inputs,
                       const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs,
                       int long_double);

#ifdef __cplusplus
}
#endif

#endif
