/* Every op of the reference behind one call on named tensors (lacs/ops.h,
 * SPEC.md 10.1 and 10.4).
 *
 * Read top to bottom: how a reference function is called (one kind per
 * signature), the table of ops, one row per op (names in, names out,
 * parameters, the reference function in double and long double), the one
 * switch that calls a row's function, then the one function that checks
 * names and shapes, converts the tensors to double, calls the row and
 * converts its outputs back.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "lacs/ops.h"
#include "lacs/reference.h"
#ifdef LACS_REAL_FLOAT
/* Built into the zoo's binary32 reference (tests/zoo/float_reference.c, the
 * Makefile's $(BUILD)/zoo/float_reference.so): there the second precision of
 * lacs_reference_run is float, and each lacs_ref_*_ld name below stands for
 * its lacs_ref_*_f32 twin (the header is generated from lacs/reference_ld.h). */
#include "lacs/reference_f32.h"
#include "lacs/reference_f32_as_ld.h"
typedef float second_real;
#else
#include "lacs/reference_ld.h"
typedef long double second_real;
#endif
#include "lacs/safetensors.h"

/* ---- one call, in double or long double ---- */

/* The tensors and parameters of one call, bound by name (bind_input). */
typedef struct {
    const lacs_op_info *info;
    lacs_dims dims;
    lacs_inputs in;
    lacs_cotangents ct;
    const double *x, *dy, *weight, *bias;
    double scalar; /* the scalar input: DyT's alpha, DyISRU's C */
    double eps, cap;
    int64_t rows, dim;
    lacs_deltaformer_form form;
    lacs_l2norm_convention convention;
} op_call;

/* How a reference function is called: one kind per signature of lacs/reference.h.
 * A row names its function in both precisions (second_real: long double, or
 * float in the zoo's binary32 build), literally, so that grep finds them. */
typedef enum {
    CALL_STATE,        /* f(d, in, o, ht) */
    CALL_ATTENTION,    /* f(d, in, o) */
    CALL_DELTAFORMER,  /* f(d, in, form, o) */
    CALL_MESA,         /* f(d, in, o, ht, ht_kk) */
    CALL_RMSNORM,      /* f(x, rows, dim, eps, weight, y) */
    CALL_RMSNORM_VJP,  /* f(x, dy, rows, dim, eps, weight, dx, dweight) */
    CALL_SCALAR,       /* f(x, rows, dim, alpha or C, weight, bias, y) */
    CALL_SCALAR_VJP,   /* f(x, dy, rows, dim, alpha or C, weight, dx, dalpha or dC, dweight, dbias) */
    CALL_SOFTCAP,      /* f(x, n, cap, y) */
    CALL_SOFTCAP_VJP,  /* f(x, dy, n, cap, dx, dcap) */
    CALL_L2NORM,       /* f(x, rows, dim, eps, convention, y) */
    CALL_L2NORM_VJP,   /* f(x, dy, rows, dim, eps, convention, dx) */
    CALL_VJP,          /* f(d, in, ct, grads) */
    CALL_DELTAFORMER_VJP /* f(d, in, form, ct, grads) */
} call_kind;

typedef struct {
    call_kind kind;
    union {
        struct {
            int (*d)(const lacs_dims *, const lacs_inputs *, double *, double *);
            int (*ld)(const lacs_dims *, const lacs_inputs *, second_real *, second_real *);
        } state;
        struct {
            int (*d)(const lacs_dims *, const lacs_inputs *, double *);
            int (*ld)(const lacs_dims *, const lacs_inputs *, second_real *);
        } attention;
        struct {
            int (*d)(const lacs_dims *, const lacs_inputs *, lacs_deltaformer_form, double *);
            int (*ld)(const lacs_dims *, const lacs_inputs *, lacs_deltaformer_form, second_real *);
        } deltaformer;
        struct {
            int (*d)(const lacs_dims *, const lacs_inputs *, double *, double *, double *);
            int (*ld)(const lacs_dims *, const lacs_inputs *, second_real *, second_real *, second_real *);
        } mesa;
        struct {
            int (*d)(const double *, int64_t, int64_t, double, const double *, double *);
            int (*ld)(const double *, int64_t, int64_t, double, const double *, second_real *);
        } rmsnorm;
        struct {
            int (*d)(const double *, const double *, int64_t, int64_t, double, const double *, double *, double *);
            int (*ld)(const double *, const double *, int64_t, int64_t, double, const double *, second_real *,
                      second_real *);
        } rmsnorm_vjp;
        struct {
            int (*d)(const double *, int64_t, int64_t, double, const double *, const double *, double *);
            int (*ld)(const double *, int64_t, int64_t, double, const double *, const double *, second_real *);
        } scalar;
        struct {
            int (*d)(const double *, const double *, int64_t, int64_t, double, const double *, double *, double *,
                     double *, double *);
            int (*ld)(const double *, const double *, int64_t, int64_t, double, const double *, second_real *,
                      second_real *, second_real *, second_real *);
        } scalar_vjp;
        struct {
            int (*d)(const double *, int64_t, double, double *);
            int (*ld)(const double *, int64_t, double, second_real *);
        } softcap;
        struct {
            int (*d)(const double *, const double *, int64_t, double, double *, double *);
            int (*ld)(const double *, const double *, int64_t, double, second_real *, second_real *);
        } softcap_vjp;
        struct {
            int (*d)(const double *, int64_t, int64_t, double, lacs_l2norm_convention, double *);
            int (*ld)(const double *, int64_t, int64_t, double, lacs_l2norm_convention, second_real *);
        } l2norm;
        struct {
            int (*d)(const double *, const double *, int64_t, int64_t, double, lacs_l2norm_convention, double *);
            int (*ld)(const double *, const double *, int64_t, int64_t, double, lacs_l2norm_convention,
                      second_real *);
        } l2norm_vjp;
        struct {
            int (*d)(const lacs_dims *, const lacs_inputs *, const lacs_cotangents *, const lacs_ref_grads *);
            int (*ld)(const lacs_dims *, const lacs_inputs *, const lacs_cotangents *, const lacs_ref_grads_ld *);
        } vjp;
        struct {
            int (*d)(const lacs_dims *, const lacs_inputs *, lacs_deltaformer_form, const lacs_cotangents *,
                     const lacs_ref_grads *);
            int (*ld)(const lacs_dims *, const lacs_inputs *, lacs_deltaformer_form, const lacs_cotangents *,
                      const lacs_ref_grads_ld *);
        } deltaformer_vjp;
    } fn;
} reference_call;

/* ---- the table: one row per op ---- */

/* What lacs_ops() lists (name, family, labels, the reference function's name, required and optional inputs,
 * parameters, outputs), then the reference function itself in double and in the second precision. */
typedef struct {
    lacs_op_info info;
    reference_call call;
} op_row;

static const op_row op_rows[] = {
    {{"linear_attn", LACS_FAMILY_RECURRENT, "H2", "lacs_ref_linear_attn", "q k v", "h0 cu_seqlens", "scale", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_linear_attn, lacs_ref_linear_attn_ld}}},
    {{"linear_attn_postnorm", LACS_FAMILY_RECURRENT, "H3", "lacs_ref_linear_attn_postnorm", "q k v", "h0 cu_seqlens",
      "scale eps", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_linear_attn_postnorm, lacs_ref_linear_attn_postnorm_ld}}},
    {{"retention", LACS_FAMILY_RECURRENT, "H4", "lacs_ref_retention", "q k v g_gamma", "h0 cu_seqlens", "scale",
      "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_retention, lacs_ref_retention_ld}}},
    {{"simple_gla", LACS_FAMILY_RECURRENT, "H4", "lacs_ref_simple_gla", "q k v g", "h0 cu_seqlens", "scale", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_simple_gla, lacs_ref_simple_gla_ld}}},
    {{"gla", LACS_FAMILY_RECURRENT, "H4", "lacs_ref_gla", "q k v gk", "h0 cu_seqlens", "scale", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_gla, lacs_ref_gla_ld}}},
    {{"delta_rule", LACS_FAMILY_RECURRENT, "H6, E1", "lacs_ref_delta_rule", "q k v beta", "h0 cu_seqlens", "scale",
      "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_delta_rule, lacs_ref_delta_rule_ld}}},
    {{"gated_delta_rule", LACS_FAMILY_RECURRENT, "H8", "lacs_ref_gated_delta_rule", "q k v beta",
      "g gk h0 cu_seqlens", "scale", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_gated_delta_rule, lacs_ref_gated_delta_rule_ld}}},
    {{"comba", LACS_FAMILY_RECURRENT, "H8", "lacs_ref_comba", "q k v beta g", "h0 cu_seqlens", "scale", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_comba, lacs_ref_comba_ld}}},
    {{"efla", LACS_FAMILY_RECURRENT, "E5", "lacs_ref_efla", "q k v beta", "h0 cu_seqlens", "scale", "o ht"},
     {CALL_STATE, .fn.state = {lacs_ref_efla, lacs_ref_efla_ld}}},
    {{"softmax_attn", LACS_FAMILY_ATTENTION, "H1", "lacs_ref_softmax_attn", "q k v", "cu_seqlens", "scale", "o"},
     {CALL_ATTENTION, .fn.attention = {lacs_ref_softmax_attn, lacs_ref_softmax_attn_ld}}},
    {{"fox", LACS_FAMILY_ATTENTION, "H10", "lacs_ref_fox", "q k v", "g g_gamma cu_seqlens", "scale", "o"},
     {CALL_ATTENTION, .fn.attention = {lacs_ref_fox, lacs_ref_fox_ld}}},
    {{"deltaformer", LACS_FAMILY_ATTENTION, "H11", "lacs_ref_deltaformer", "q k v", "beta cu_seqlens", "scale form",
      "o"},
     {CALL_DELTAFORMER, .fn.deltaformer = {lacs_ref_deltaformer, lacs_ref_deltaformer_ld}}},
    /* The primary form (explicit transitions) is O(T^3 K); the matrix form,
     * proven equal to it by tests/test_forms.c, is O(T^3) and generates the
     * long cases (SPEC.md 10.4). */
    {{"path_attn", LACS_FAMILY_ATTENTION, "H12", "lacs_ref_path_attn_matrix", "q k v w beta", "g cu_seqlens",
      "scale", "o"},
     {CALL_ATTENTION, .fn.attention = {lacs_ref_path_attn_matrix, lacs_ref_path_attn_matrix_ld}}},
    {{"mesa_net", LACS_FAMILY_MESA, "H15", "lacs_ref_mesa_net", "q k v lambda", "g beta h0 h0_kk cu_seqlens", "",
      "o ht ht_kk"},
     {CALL_MESA, .fn.mesa = {lacs_ref_mesa_net, lacs_ref_mesa_net_ld}}},
    {{"rmsnorm", LACS_FAMILY_NORM, "N2", "lacs_ref_rmsnorm", "x", "weight", "eps", "y"},
     {CALL_RMSNORM, .fn.rmsnorm = {lacs_ref_rmsnorm, lacs_ref_rmsnorm_ld}}},
    {{"rmsnorm_vjp", LACS_FAMILY_NORM, "N3", "lacs_ref_rmsnorm_vjp", "x dy", "weight", "eps", "dx dweight"},
     {CALL_RMSNORM_VJP, .fn.rmsnorm_vjp = {lacs_ref_rmsnorm_vjp, lacs_ref_rmsnorm_vjp_ld}}},
    {{"dyt", LACS_FAMILY_NORM, "N1", "lacs_ref_dyt", "x alpha", "weight bias", "", "y"},
     {CALL_SCALAR, .fn.scalar = {lacs_ref_dyt, lacs_ref_dyt_ld}}},
    {{"dyt_vjp", LACS_FAMILY_NORM, "N1", "lacs_ref_dyt_vjp", "x dy alpha", "weight", "", "dx dalpha dweight dbias"},
     {CALL_SCALAR_VJP, .fn.scalar_vjp = {lacs_ref_dyt_vjp, lacs_ref_dyt_vjp_ld}}},
    {{"dyisru", LACS_FAMILY_NORM, "N5", "lacs_ref_dyisru", "x C", "weight bias", "", "y"},
     {CALL_SCALAR, .fn.scalar = {lacs_ref_dyisru, lacs_ref_dyisru_ld}}},
    {{"dyisru_vjp", LACS_FAMILY_NORM, "N5", "lacs_ref_dyisru_vjp", "x dy C", "weight", "", "dx dC dweight dbias"},
     {CALL_SCALAR_VJP, .fn.scalar_vjp = {lacs_ref_dyisru_vjp, lacs_ref_dyisru_vjp_ld}}},
    {{"softcap", LACS_FAMILY_NORM, "N6", "lacs_ref_softcap", "x", "", "cap", "y"},
     {CALL_SOFTCAP, .fn.softcap = {lacs_ref_softcap, lacs_ref_softcap_ld}}},
    {{"softcap_vjp", LACS_FAMILY_NORM, "N6", "lacs_ref_softcap_vjp", "x dy", "", "cap", "dx dcap"},
     {CALL_SOFTCAP_VJP, .fn.softcap_vjp = {lacs_ref_softcap_vjp, lacs_ref_softcap_vjp_ld}}},
    {{"l2norm", LACS_FAMILY_NORM, "SPEC 3", "lacs_ref_l2norm", "x", "", "eps convention", "y"},
     {CALL_L2NORM, .fn.l2norm = {lacs_ref_l2norm, lacs_ref_l2norm_ld}}},
    {{"l2norm_vjp", LACS_FAMILY_NORM, "SPEC 3", "lacs_ref_l2norm_vjp", "x dy", "", "eps convention", "dx"},
     {CALL_L2NORM_VJP, .fn.l2norm_vjp = {lacs_ref_l2norm_vjp, lacs_ref_l2norm_vjp_ld}}},
    /* The gradients of the ops on sequences (SPEC.md 4.19): each op's inputs
     * and the cotangents do (of o) and dht (of ht); d<x> for every
     * floating-point input x given. */
    {{"linear_attn_vjp", LACS_FAMILY_VJP, "H2", "lacs_ref_linear_attn_vjp", "q k v do", "h0 dht cu_seqlens", "scale",
      "dq dk dv dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_linear_attn_vjp, lacs_ref_linear_attn_vjp_ld}}},
    {{"retention_vjp", LACS_FAMILY_VJP, "H4", "lacs_ref_retention_vjp", "q k v g_gamma do", "h0 dht cu_seqlens",
      "scale", "dq dk dv dg_gamma dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_retention_vjp, lacs_ref_retention_vjp_ld}}},
    {{"simple_gla_vjp", LACS_FAMILY_VJP, "H4", "lacs_ref_simple_gla_vjp", "q k v g do", "h0 dht cu_seqlens",
      "scale", "dq dk dv dg dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_simple_gla_vjp, lacs_ref_simple_gla_vjp_ld}}},
    {{"gla_vjp", LACS_FAMILY_VJP, "H4", "lacs_ref_gla_vjp", "q k v gk do", "h0 dht cu_seqlens", "scale",
      "dq dk dv dgk dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_gla_vjp, lacs_ref_gla_vjp_ld}}},
    {{"delta_rule_vjp", LACS_FAMILY_VJP, "H6, E1", "lacs_ref_delta_rule_vjp", "q k v beta do", "h0 dht cu_seqlens",
      "scale", "dq dk dv dbeta dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_delta_rule_vjp, lacs_ref_delta_rule_vjp_ld}}},
    {{"gated_delta_rule_vjp", LACS_FAMILY_VJP, "H8", "lacs_ref_gated_delta_rule_vjp", "q k v beta do",
      "g gk h0 dht cu_seqlens", "scale", "dq dk dv dbeta dg dgk dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_gated_delta_rule_vjp, lacs_ref_gated_delta_rule_vjp_ld}}},
    {{"comba_vjp", LACS_FAMILY_VJP, "H8", "lacs_ref_comba_vjp", "q k v beta g do", "h0 dht cu_seqlens", "scale",
      "dq dk dv dbeta dg dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_comba_vjp, lacs_ref_comba_vjp_ld}}},
    {{"efla_vjp", LACS_FAMILY_VJP, "E5", "lacs_ref_efla_vjp", "q k v beta do", "h0 dht cu_seqlens", "scale",
      "dq dk dv dbeta dh0"},
     {CALL_VJP, .fn.vjp = {lacs_ref_efla_vjp, lacs_ref_efla_vjp_ld}}},
    {{"softmax_attn_vjp", LACS_FAMILY_VJP, "H1", "lacs_ref_softmax_attn_vjp", "q k v do", "cu_seqlens", "scale",
      "dq dk dv"},
     {CALL_VJP, .fn.vjp = {lacs_ref_softmax_attn_vjp, lacs_ref_softmax_attn_vjp_ld}}},
    {{"fox_vjp", LACS_FAMILY_VJP, "H10", "lacs_ref_fox_vjp", "q k v do", "g g_gamma cu_seqlens", "scale",
      "dq dk dv dg dg_gamma"},
     {CALL_VJP, .fn.vjp = {lacs_ref_fox_vjp, lacs_ref_fox_vjp_ld}}},
    {{"deltaformer_vjp", LACS_FAMILY_VJP, "H11", "lacs_ref_deltaformer_vjp", "q k v do", "beta cu_seqlens",
      "scale form", "dq dk dv dbeta"},
     {CALL_DELTAFORMER_VJP, .fn.deltaformer_vjp = {lacs_ref_deltaformer_vjp, lacs_ref_deltaformer_vjp_ld}}},
    {{"path_attn_vjp", LACS_FAMILY_VJP, "H12", "lacs_ref_path_attn_vjp", "q k v w beta do", "g cu_seqlens", "scale",
      "dq dk dv dw dbeta dg"},
     {CALL_VJP, .fn.vjp = {lacs_ref_path_attn_vjp, lacs_ref_path_attn_vjp_ld}}},
};

enum { N_OPS = (int)(sizeof op_rows / sizeof op_rows[0]) };

/* lacs_ops() gives the rows' lacs_op_info as one array (the public interface: lacs/ops.h), copied from the
 * rows once; an op's row is the one at its index. */
static lacs_op_info op_infos[N_OPS];
static pthread_once_t op_infos_once = PTHREAD_ONCE_INIT;

static void copy_op_infos(void)
{
    for (int i = 0; i < N_OPS; i++)
        op_infos[i] = op_rows[i].info;
}

const lacs_op_info *lacs_ops(int *count)
{
    pthread_once(&op_infos_once, copy_op_infos);
    *count = N_OPS;
    return op_infos;
}

const lacs_op_info *lacs_op_find(const char *name)
{
    pthread_once(&op_infos_once, copy_op_infos);
    for (int i = 0; name && i < N_OPS; i++)
        if (strcmp(op_infos[i].name, name) == 0)
            return &op_infos[i];
    return NULL;
}

/* The row of an op that lacs_op_find gave. */
static const op_row *row_of(const lacs_op_info *info) { return &op_rows[info - op_infos]; }

const lacs_op_info *lacs_op_forward(const lacs_op_info *info)
{
    if (!info || info->family != LACS_FAMILY_VJP)
        return NULL;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(info->name) - strlen("_vjp")), info->name);
    return lacs_op_find(name);
}

int lacs_vjp_output_is_per_token(const char *name)
{
    return name && lacs_word_in_list("dq dk dv dw dbeta dg dgk", name);
}

size_t lacs_next_word(const char **cursor, const char **word)
{
    const char *p = *cursor;
    while (*p == ' ')
        p++;
    const size_t len = strcspn(p, " ");
    *word = p;
    *cursor = p + len;
    return len;
}

int lacs_word_in_list(const char *list, const char *word)
{
    const size_t n = strlen(word);
    const char *cursor = list ? list : "", *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;)
        if (len == n && strncmp(w, word, n) == 0)
            return 1;
    return 0;
}

/* Index of `word` among the words of `list`, or -1. */
static int list_index(const char *list, const char *word)
{
    const size_t n = strlen(word);
    const char *cursor = list, *w;
    int index = 0;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0; index++)
        if (len == n && strncmp(w, word, n) == 0)
            return index;
    return -1;
}

int64_t lacs_tensor_count(const lacs_tensor *t)
{
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++)
        count *= t->shape[i];
    return count;
}

/* ---- calling the reference function of a row ---- */

/* The VJPs (SPEC.md 4.19): the gradient buffers named by the op's outputs. */
static void *grad_slot(const op_call *c, void *const *out, const char *name)
{
    const int i = list_index(c->info->outputs, name);
    return i >= 0 ? out[i] : NULL;
}

#define GRADIENT_SLOTS                                                                                          \
    {                                                                                                            \
        .dq = grad_slot(c, out, "dq"), .dk = grad_slot(c, out, "dk"), .dv = grad_slot(c, out, "dv"),            \
        .dbeta = grad_slot(c, out, "dbeta"), .dg = grad_slot(c, out, "dg"), .dgk = grad_slot(c, out, "dgk"),    \
        .dg_gamma = grad_slot(c, out, "dg_gamma"), .dh0 = grad_slot(c, out, "dh0"), .dw = grad_slot(c, out, "dw") \
    }

/* Runs row r's reference function on the call c, in double or (ld) the second precision; out[i] is the buffer of
 * the op's i-th output (double or second_real), NULL where it is not wanted. */
static int call_reference(const op_row *r, const op_call *c, void *const *out, int ld)
{
    const lacs_dims *d = &c->dims;
    const lacs_inputs *in = &c->in;
    const int64_t n = c->rows * c->dim;
    switch (r->call.kind) {
    case CALL_STATE:
        return ld ? r->call.fn.state.ld(d, in, out[0], out[1]) : r->call.fn.state.d(d, in, out[0], out[1]);
    case CALL_ATTENTION:
        return ld ? r->call.fn.attention.ld(d, in, out[0]) : r->call.fn.attention.d(d, in, out[0]);
    case CALL_DELTAFORMER:
        return ld ? r->call.fn.deltaformer.ld(d, in, c->form, out[0]) : r->call.fn.deltaformer.d(d, in, c->form, out[0]);
    case CALL_MESA:
        return ld ? r->call.fn.mesa.ld(d, in, out[0], out[1], out[2]) : r->call.fn.mesa.d(d, in, out[0], out[1], out[2]);
    case CALL_RMSNORM:
        return ld ? r->call.fn.rmsnorm.ld(c->x, c->rows, c->dim, c->eps, c->weight, out[0])
                  : r->call.fn.rmsnorm.d(c->x, c->rows, c->dim, c->eps, c->weight, out[0]);
    case CALL_RMSNORM_VJP:
        return ld ? r->call.fn.rmsnorm_vjp.ld(c->x, c->dy, c->rows, c->dim, c->eps, c->weight, out[0], out[1])
                  : r->call.fn.rmsnorm_vjp.d(c->x, c->dy, c->rows, c->dim, c->eps, c->weight, out[0], out[1]);
    case CALL_SCALAR:
        return ld ? r->call.fn.scalar.ld(c->x, c->rows, c->dim, c->scalar, c->weight, c->bias, out[0])
                  : r->call.fn.scalar.d(c->x, c->rows, c->dim, c->scalar, c->weight, c->bias, out[0]);
    case CALL_SCALAR_VJP:
        return ld ? r->call.fn.scalar_vjp.ld(c->x, c->dy, c->rows, c->dim, c->scalar, c->weight, out[0], out[1],
                                             out[2], out[3])
                  : r->call.fn.scalar_vjp.d(c->x, c->dy, c->rows, c->dim, c->scalar, c->weight, out[0], out[1],
                                            out[2], out[3]);
    case CALL_SOFTCAP:
        return ld ? r->call.fn.softcap.ld(c->x, n, c->cap, out[0]) : r->call.fn.softcap.d(c->x, n, c->cap, out[0]);
    case CALL_SOFTCAP_VJP:
        return ld ? r->call.fn.softcap_vjp.ld(c->x, c->dy, n, c->cap, out[0], out[1])
                  : r->call.fn.softcap_vjp.d(c->x, c->dy, n, c->cap, out[0], out[1]);
    case CALL_L2NORM:
        return ld ? r->call.fn.l2norm.ld(c->x, c->rows, c->dim, c->eps, c->convention, out[0])
                  : r->call.fn.l2norm.d(c->x, c->rows, c->dim, c->eps, c->convention, out[0]);
    case CALL_L2NORM_VJP:
        return ld ? r->call.fn.l2norm_vjp.ld(c->x, c->dy, c->rows, c->dim, c->eps, c->convention, out[0])
                  : r->call.fn.l2norm_vjp.d(c->x, c->dy, c->rows, c->dim, c->eps, c->convention, out[0]);
    case CALL_VJP:
    case CALL_DELTAFORMER_VJP: {
        const lacs_ref_grads gd = GRADIENT_SLOTS;
        const lacs_ref_grads_ld gl = GRADIENT_SLOTS;
        if (r->call.kind == CALL_VJP)
            return ld ? r->call.fn.vjp.ld(d, in, &c->ct, &gl) : r->call.fn.vjp.d(d, in, &c->ct, &gd);
        return ld ? r->call.fn.deltaformer_vjp.ld(d, in, c->form, &c->ct, &gl)
                  : r->call.fn.deltaformer_vjp.d(d, in, c->form, &c->ct, &gd);
    }
    }
    return lacs_internal_error(LACS_ERR_INPUT, c->info->name, "no way to call its reference function");
}

/* ---- names and shapes ---- */

static const lacs_tensor *find_input(const lacs_tensor *inputs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (inputs[i].name && strcmp(inputs[i].name, name) == 0)
            return &inputs[i];
    return NULL;
}

/* Is t's shape exactly (d0, ..., d_{ndim-1})? */
static int shape_is(const lacs_tensor *t, int ndim, const int64_t *dims)
{
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != dims[i])
            return 0;
    return 1;
}

static int shape_error(const char *op, const lacs_tensor *t, const char *expected)
{
    char got[160] = "[";
    for (int i = 0; i < t->ndim && i < 8; i++) {
        size_t used = strlen(got);
        snprintf(got + used, sizeof got - used, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    }
    strncat(got, "]", sizeof got - strlen(got) - 1);
    return lacs_internal_error(LACS_ERR_SHAPE, op, "input '%s' has shape %s, expected %s", t->name,
                               got, expected);
}

/* The sizes of an op on sequences, from q [B, T, H, K], v [B, T, HV, V] and
 * cu_seqlens [N + 1]; every other input's shape checked against them. */
static int sequence_dims(const lacs_op_info *info, const lacs_tensor *inputs, int n, lacs_dims *d)
{
    const lacs_tensor *q = find_input(inputs, n, "q"), *v = find_input(inputs, n, "v");
    if (q->ndim != 4)
        return shape_error(info->name, q, "[B, T, H, K]");
    if (v->ndim != 4 || v->shape[0] != q->shape[0] || v->shape[1] != q->shape[1])
        return shape_error(info->name, v, "[B, T, HV, V] with q's B and T");
    memset(d, 0, sizeof *d);
    d->B = q->shape[0];
    d->T = q->shape[1];
    d->H = q->shape[2];
    d->K = q->shape[3];
    d->HV = v->shape[2];
    d->V = v->shape[3];
    int64_t n_seqs = d->B;
    const lacs_tensor *cu = find_input(inputs, n, "cu_seqlens");
    if (cu) {
        if (cu->dtype != LACS_I64 || cu->ndim != 1 || cu->shape[0] < 1)
            return lacs_internal_error(LACS_ERR_SHAPE, info->name,
                                       "input 'cu_seqlens' must be I64 of shape [N + 1], N >= 0");
        n_seqs = cu->shape[0] - 1;
    }
    const int64_t BTH[3] = {d->B, d->T, d->HV}, BTHK[4] = {d->B, d->T, d->HV, d->K};
    const int64_t qshape[4] = {d->B, d->T, d->H, d->K}, HK[2] = {d->HV, d->K};
    const int64_t state[4] = {n_seqs, d->HV, d->K, d->V}, state_kk[4] = {n_seqs, d->HV, d->K, d->K};
    for (int i = 0; i < n; i++) {
        const lacs_tensor *t = &inputs[i];
        const char *name = t->name;
        if (strcmp(name, "k") == 0 || strcmp(name, "w") == 0) {
            if (!shape_is(t, 4, qshape))
                return shape_error(info->name, t, "q's shape [B, T, H, K]");
        } else if (strcmp(name, "beta") == 0 || strcmp(name, "g") == 0) {
            if (!shape_is(t, 3, BTH))
                return shape_error(info->name, t, "[B, T, HV]");
        } else if (strcmp(name, "gk") == 0) {
            if (!shape_is(t, 4, BTHK))
                return shape_error(info->name, t, "[B, T, HV, K]");
        } else if (strcmp(name, "g_gamma") == 0) {
            if (!shape_is(t, 1, &d->HV))
                return shape_error(info->name, t, "[HV]");
        } else if (strcmp(name, "lambda") == 0) {
            if (!shape_is(t, 2, HK))
                return shape_error(info->name, t, "[HV, K]");
        } else if (strcmp(name, "h0") == 0 || strcmp(name, "dht") == 0) {
            if (!shape_is(t, 4, state))
                return shape_error(info->name, t, "[N, HV, K, V]");
        } else if (strcmp(name, "do") == 0) {
            if (!shape_is(t, 4, v->shape))
                return shape_error(info->name, t, "v's shape [B, T, HV, V]");
        } else if (strcmp(name, "h0_kk") == 0) {
            if (!shape_is(t, 4, state_kk))
                return shape_error(info->name, t, "[N, HV, K, K]");
        }
    }
    d->N = cu ? n_seqs : 0;
    return LACS_OK;
}

/* The norms: x [rows, dim]; dy like x; weight, bias [dim]; alpha, C [1]. */
static int norm_dims(const lacs_op_info *info, const lacs_tensor *inputs, int n, int64_t *rows,
                     int64_t *dim)
{
    const lacs_tensor *x = find_input(inputs, n, "x");
    if (x->ndim != 2)
        return shape_error(info->name, x, "[rows, dim]");
    *rows = x->shape[0];
    *dim = x->shape[1];
    const int64_t one = 1;
    for (int i = 0; i < n; i++) {
        const lacs_tensor *t = &inputs[i];
        if (strcmp(t->name, "dy") == 0 && !shape_is(t, 2, x->shape))
            return shape_error(info->name, t, "x's shape [rows, dim]");
        if ((strcmp(t->name, "weight") == 0 || strcmp(t->name, "bias") == 0) && !shape_is(t, 1, dim))
            return shape_error(info->name, t, "[dim]");
        if ((strcmp(t->name, "alpha") == 0 || strcmp(t->name, "C") == 0) && !shape_is(t, 1, &one))
            return shape_error(info->name, t, "[1]");
    }
    return LACS_OK;
}

/* Every input named by the op, each once, the required ones present, floats
 * in a float dtype. */
static int check_names(const lacs_op_info *info, const lacs_tensor *inputs, int n)
{
    for (int i = 0; i < n; i++) {
        const lacs_tensor *t = &inputs[i];
        if (!t->name || !(lacs_word_in_list(info->required, t->name) || lacs_word_in_list(info->optional, t->name)))
            return lacs_internal_error(LACS_ERR_INPUT, info->name, "input '%s' is not one this op reads",
                                       t->name ? t->name : "(null)");
        if (find_input(inputs, i, t->name))
            return lacs_internal_error(LACS_ERR_INPUT, info->name, "input '%s' is given twice", t->name);
        if (t->ndim < 0 || t->ndim > 8 || (t->ndim > 0 && !t->shape))
            return lacs_internal_error(LACS_ERR_SHAPE, info->name, "input '%s' has no valid shape",
                                       t->name);
        for (int j = 0; j < t->ndim; j++)
            if (t->shape[j] < 0)
                return lacs_internal_error(LACS_ERR_SHAPE, info->name, "input '%s' has a negative dimension",
                                           t->name);
        int want_int = strcmp(t->name, "cu_seqlens") == 0;
        int is_float = t->dtype == LACS_F32 || t->dtype == LACS_BF16 || t->dtype == LACS_F64;
        if (want_int ? t->dtype != LACS_I64 : !is_float)
            return lacs_internal_error(LACS_ERR_INPUT, info->name, "input '%s' must be %s", t->name,
                                       want_int ? "I64" : "F32, BF16 or F64");
        if (!t->data && lacs_tensor_count(t) > 0)
            return lacs_internal_error(LACS_ERR_INPUT, info->name, "input '%s' has no data", t->name);
    }
    const char *cursor = info->required, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        char word[32];
        snprintf(word, sizeof word, "%.*s", (int)len, w);
        if (!find_input(inputs, n, word))
            return lacs_internal_error(LACS_ERR_INPUT, info->name, "input '%s' is required", word);
    }
    return LACS_OK;
}

static void set_shape(lacs_output_shape *o, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2,
                      int64_t d3)
{
    o->name = name;
    o->ndim = ndim;
    o->shape[0] = d0;
    o->shape[1] = d1;
    o->shape[2] = d2;
    o->shape[3] = d3;
}

int lacs_reference_output_shapes(const char *op, const lacs_tensor *inputs, int n_inputs,
                                 lacs_output_shape *outputs, int *n_outputs)
{
    const lacs_op_info *info = lacs_op_find(op);
    *n_outputs = 0;
    if (!info)
        return lacs_internal_error(LACS_ERR_INPUT, NULL, "unknown op '%s'", op ? op : "(null)");
    if (n_inputs < 0 || (n_inputs > 0 && !inputs))
        return lacs_internal_error(LACS_ERR_INPUT, op, "no inputs");
    int rc = check_names(info, inputs, n_inputs);
    if (rc != LACS_OK)
        return rc;
    if (info->family == LACS_FAMILY_NORM) {
        int64_t rows, dim;
        if ((rc = norm_dims(info, inputs, n_inputs, &rows, &dim)) != LACS_OK)
            return rc;
        int has_weight = find_input(inputs, n_inputs, "weight") != NULL;
        /* in the order of info->outputs: y and dx are like x; dweight and
         * dbias [dim], only with a weight; the scalar gradients [1] */
        static const char *const names[] = {"y", "dx", "dweight", "dbias", "dalpha", "dC", "dcap"};
        const char *cursor = info->outputs, *w;
        for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;)
            for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
                if (strlen(names[i]) != len || strncmp(w, names[i], len) != 0)
                    continue;
                lacs_output_shape *o = &outputs[*n_outputs];
                if (i <= 1) {
                    set_shape(o, names[i], 2, rows, dim, 0, 0);
                    (*n_outputs)++;
                } else if (i <= 3 && has_weight) {
                    set_shape(o, names[i], 1, dim, 0, 0, 0);
                    (*n_outputs)++;
                } else if (i >= 4) {
                    set_shape(o, names[i], 1, 1, 0, 0, 0);
                    (*n_outputs)++;
                }
            }
        return LACS_OK;
    }
    lacs_dims d;
    if ((rc = sequence_dims(info, inputs, n_inputs, &d)) != LACS_OK)
        return rc;
    if (info->family == LACS_FAMILY_VJP) {
        /* d<x> for each input x given, in the order of info->outputs, with x's shape */
        static const char *const names[] = {"dq", "dk", "dv", "dbeta", "dg", "dgk", "dg_gamma", "dh0", "dw"};
        const char *cursor = info->outputs, *w;
        for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
            const lacs_tensor *x = NULL;
            const char *name = NULL;
            for (size_t i = 0; i < sizeof names / sizeof names[0] && !name; i++)
                if (strlen(names[i]) == len && strncmp(w, names[i], len) == 0)
                    name = names[i];
            if (name)
                x = find_input(inputs, n_inputs, name + 1);
            if (!x)
                continue;
            lacs_output_shape *o = &outputs[(*n_outputs)++];
            memset(o, 0, sizeof *o);
            o->name = name;
            o->ndim = x->ndim;
            for (int i = 0; i < x->ndim && i < 4; i++)
                o->shape[i] = x->shape[i];
        }
        return LACS_OK;
    }
    const int64_t n_seqs = find_input(inputs, n_inputs, "cu_seqlens") ? d.N : d.B;
    set_shape(&outputs[(*n_outputs)++], "o", 4, d.B, d.T, d.HV, d.V);
    if (info->family != LACS_FAMILY_ATTENTION)
        set_shape(&outputs[(*n_outputs)++], "ht", 4, n_seqs, d.HV, d.K, d.V);
    if (info->family == LACS_FAMILY_MESA)
        set_shape(&outputs[(*n_outputs)++], "ht_kk", 4, n_seqs, d.HV, d.K, d.K);
    return LACS_OK;
}

/* ---- running ---- */

/* A float tensor's values as double (exact for F32, BF16, F64), through the
 * vector reader's one conversion. */
static double *to_double(const lacs_tensor *t)
{
    const int64_t count = lacs_tensor_count(t);
    double *out = malloc((size_t)(count + 1) * sizeof(double));
    if (out)
        lacs_values_to_double(t->dtype, t->data, count, out);
    return out;
}

static int param_value(const lacs_param *params, int n, const char *name, double *value)
{
    for (int i = 0; i < n; i++)
        if (params[i].name && strcmp(params[i].name, name) == 0) {
            *value = params[i].value;
            return 1;
        }
    return 0;
}

int lacs_reference_param_default(const char *op, const lacs_tensor *inputs, int n_inputs, const char *name,
                                 double *value)
{
    const lacs_op_info *info = lacs_op_find(op);
    if (!info || !name || !lacs_word_in_list(info->params, name))
        return 0;
    if (strcmp(name, "scale") == 0) {
        /* fla's default, K^-1/2, K from q [B, T, H, K] */
        const lacs_tensor *q = find_input(inputs, n_inputs, "q");
        if (!q || q->ndim != 4 || q->shape[3] < 1)
            return 0;
        *value = 1 / sqrt((double)q->shape[3]);
    } else if (strcmp(name, "eps") == 0) {
        *value = 0;
    } else if (strcmp(name, "form") == 0) {
        *value = LACS_DELTAFORMER_SOFTMAX;
    } else if (strcmp(name, "convention") == 0) {
        *value = LACS_L2NORM_SQRT_EPS;
    } else {
        return 0;
    }
    return 1;
}

static int check_params(const lacs_op_info *info, const lacs_param *params, int n)
{
    for (int i = 0; i < n; i++) {
        if (!params[i].name || !lacs_word_in_list(info->params, params[i].name))
            return lacs_internal_error(LACS_ERR_PARAM, info->name, "parameter '%s' is not one this op reads",
                                       params[i].name ? params[i].name : "(null)");
        double unused;
        if (param_value(params, i, params[i].name, &unused))
            return lacs_internal_error(LACS_ERR_PARAM, info->name, "parameter '%s' is given twice",
                                       params[i].name);
    }
    double code;
    if (param_value(params, n, "form", &code) && !(code == 0 || code == 1 || code == 2))
        return lacs_internal_error(LACS_ERR_PARAM, info->name, "parameter 'form' must be 0, 1 or 2");
    if (param_value(params, n, "convention", &code) && !(code == 0 || code == 1))
        return lacs_internal_error(LACS_ERR_PARAM, info->name, "parameter 'convention' must be 0 or 1");
    return LACS_OK;
}

/* Points the call's fields at the converted inputs. */
static void bind_input(op_call *c, const char *name, const double *values, const lacs_tensor *t)
{
    if (strcmp(name, "q") == 0) c->in.q = values;
    else if (strcmp(name, "k") == 0) c->in.k = values;
    else if (strcmp(name, "v") == 0) c->in.v = values;
    else if (strcmp(name, "beta") == 0) c->in.beta = values;
    else if (strcmp(name, "g") == 0) c->in.g = values;
    else if (strcmp(name, "gk") == 0) c->in.gk = values;
    else if (strcmp(name, "g_gamma") == 0) c->in.g_gamma = values;
    else if (strcmp(name, "h0") == 0) c->in.h0 = values;
    else if (strcmp(name, "w") == 0) c->in.w = values;
    else if (strcmp(name, "lambda") == 0) c->in.lambda = values;
    else if (strcmp(name, "h0_kk") == 0) c->in.h0_kk = values;
    else if (strcmp(name, "do") == 0) c->ct.dout = values;
    else if (strcmp(name, "dht") == 0) c->ct.dht = values;
    else if (strcmp(name, "cu_seqlens") == 0) c->dims.cu_seqlens = t->data;
    else if (strcmp(name, "x") == 0) c->x = values;
    else if (strcmp(name, "dy") == 0) c->dy = values;
    else if (strcmp(name, "weight") == 0) c->weight = values;
    else if (strcmp(name, "bias") == 0) c->bias = values;
    else if (strcmp(name, "alpha") == 0) c->scalar = values[0];
    else if (strcmp(name, "C") == 0) c->scalar = values[0];
}

static int64_t shape_count(const lacs_output_shape *s)
{
    int64_t count = 1;
    for (int i = 0; i < s->ndim; i++)
        count *= s->shape[i];
    return count;
}

int lacs_reference_run(const char *op, const lacs_tensor *inputs, int n_inputs,
                       const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs,
                       int long_double)
{
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_shapes = 0;
    int rc = lacs_reference_output_shapes(op, inputs, n_inputs, shapes, &n_shapes);
    if (rc != LACS_OK)
        return rc;
    const lacs_op_info *info = lacs_op_find(op);
    if (n_params < 0 || (n_params > 0 && !params))
        return lacs_internal_error(LACS_ERR_PARAM, op, "no parameters");
    if ((rc = check_params(info, params, n_params)) != LACS_OK)
        return rc;

    op_call c;
    memset(&c, 0, sizeof c);
    c.info = info;
    double *converted[16] = {0}; /* check_names allows at most 12 distinct inputs */
    int n_converted = 0;
    void *buffers[LACS_OPS_MAX_OUTPUTS] = {0};
    void *slots[LACS_OPS_MAX_OUTPUTS] = {0};
    const size_t real_size = long_double ? sizeof(second_real) : sizeof(double);

    if (info->family == LACS_FAMILY_NORM)
        rc = norm_dims(info, inputs, n_inputs, &c.rows, &c.dim);
    else
        rc = sequence_dims(info, inputs, n_inputs, &c.dims);
    if (rc != LACS_OK)
        return rc;
    /* each parameter as given, else its default, else 0 */
    double value[5] = {0};
    static const char *const names[5] = {"scale", "eps", "cap", "form", "convention"};
    for (int i = 0; i < 5; i++)
        if (!param_value(params, n_params, names[i], &value[i]))
            lacs_reference_param_default(op, inputs, n_inputs, names[i], &value[i]);
    c.in.scale = value[0];
    c.in.eps = c.eps = value[1];
    c.cap = value[2];
    c.form = (lacs_deltaformer_form)value[3];
    c.convention = (lacs_l2norm_convention)value[4];

    for (int i = 0; i < n_inputs && n_converted < 16; i++) {
        if (inputs[i].dtype == LACS_I64) {
            bind_input(&c, inputs[i].name, NULL, &inputs[i]);
            continue;
        }
        double *values = to_double(&inputs[i]);
        if (!values) {
            rc = lacs_internal_error(LACS_ERR_MEMORY, op, "out of memory converting input '%s'",
                                     inputs[i].name);
            goto done;
        }
        converted[n_converted++] = values;
        bind_input(&c, inputs[i].name, values, &inputs[i]);
    }

    /* Every output the op can give has a slot in the order of info->outputs;
     * the ones these inputs give get a buffer. */
    for (int s = 0; s < n_shapes; s++) {
        int slot = list_index(info->outputs, shapes[s].name);
        buffers[s] = calloc((size_t)(shape_count(&shapes[s]) + 1), real_size);
        if (!buffers[s]) {
            rc = lacs_internal_error(LACS_ERR_MEMORY, op, "out of memory for output '%s'", shapes[s].name);
            goto done;
        }
        slots[slot] = buffers[s];
    }
    rc = call_reference(row_of(info), &c, slots, long_double);
    if (rc != LACS_OK)
        goto done;

    /* Every output asked for is checked before any is written: the shape the
     * inputs give, dimension by dimension (not only the element count: a
     * transposed state has the same count), and F64 or F32. */
    lacs_tensor *matched[LACS_OPS_MAX_OUTPUTS] = {0};
    for (int s = 0; s < n_shapes; s++) {
        lacs_tensor *out = NULL;
        for (int j = 0; j < n_outputs; j++)
            if (outputs[j].name && strcmp(outputs[j].name, shapes[s].name) == 0)
                out = &outputs[j];
        if (!out)
            continue;
        const int64_t count = shape_count(&shapes[s]);
        int same_shape = out->ndim == shapes[s].ndim && (out->ndim == 0 || out->shape);
        for (int d = 0; same_shape && d < out->ndim; d++)
            same_shape = out->shape[d] == shapes[s].shape[d];
        if (!same_shape || (out->dtype != LACS_F64 && out->dtype != LACS_F32) || (!out->data && count > 0)) {
            rc = lacs_internal_error(LACS_ERR_SHAPE, op,
                                     "output '%s' must be F64 or F32 with the shape the inputs give",
                                     shapes[s].name);
            goto done;
        }
        matched[s] = out;
    }
    for (int s = 0; s < n_shapes; s++) {
        lacs_tensor *out = matched[s];
        if (!out)
            continue;
        const int64_t count = shape_count(&shapes[s]);
        for (int64_t i = 0; i < count; i++) {
            /* Rounded once, from the precision computed in: long double to
             * float directly, not through double (which could round twice). */
            if (out->dtype == LACS_F64) {
                double x = long_double ? (double)((second_real *)buffers[s])[i] : ((double *)buffers[s])[i];
                memcpy((unsigned char *)out->data + 8 * i, &x, 8);
            } else {
                float f =
                    long_double ? (float)((second_real *)buffers[s])[i] : (float)((double *)buffers[s])[i];
                memcpy((unsigned char *)out->data + 4 * i, &f, 4);
            }
        }
    }
done:
    for (int i = 0; i < n_converted; i++)
        free(converted[i]);
    for (int s = 0; s < LACS_OPS_MAX_OUTPUTS; s++)
        free(buffers[s]);
    return rc;
}
