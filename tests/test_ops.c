/* The op runner on named tensors (lacs/ops.h, reference/ops.c; SPEC.md 10.1, 10.4):
 *   ops_table     every op of lacs_ops() names a reference function that this
 *                 file calls directly, and reads the inputs its row says;
 *   ops_run       lacs_reference_run gives, bit for bit, what a direct call of
 *                 that function gives on the same double values, from F64, F32
 *                 and BF16 inputs, into F64 and F32 outputs, with and without
 *                 the optional inputs, fixed-length and varlen; the defaults
 *                 of scale, form and convention;
 *   ops_ld        long_double = 1 agrees with double to 1e-13 normwise and is
 *                 not the double path (it differs somewhere; an F32 output is
 *                 rounded once, from long double);
 *   ops_errors    every error with its code and a message naming the op and
 *                 the tensor or parameter;
 *   ops_shapes    the outputs an input set gives, and their shapes.
 * Each check of a right thing is paired with a deliberately wrong thing (a
 * perturbed input, another function, a bad tensor) that the same check rejects. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/compare.h"
#include "lacs/ops.h"
#include "lacs/reference.h"
#include "lacs/reference_ld.h"
#include "support.h"

/* ---- the direct calls, one per op, through the function the table names ---- */

typedef struct {
    lacs_dims d;
    lacs_inputs in;
    lacs_cotangents ct;
    const double *x, *dy, *weight, *bias;
    double alpha, C, eps, cap;
    int64_t rows, dim;
    lacs_deltaformer_form form;
    lacs_l2norm_convention convention;
} call;

/* out[i]: the buffer of the i-th output of the op's `outputs` list, or NULL. */
typedef int (*direct_fn)(const call *c, double *const *out);

static int d_linear_attn(const call *c, double *const *o)
{
    return lacs_ref_linear_attn(&c->d, &c->in, o[0], o[1]);
}
static int d_linear_attn_postnorm(const call *c, double *const *o)
{
    return lacs_ref_linear_attn_postnorm(&c->d, &c->in, o[0], o[1]);
}
static int d_retention(const call *c, double *const *o)
{
    return lacs_ref_retention(&c->d, &c->in, o[0], o[1]);
}
static int d_simple_gla(const call *c, double *const *o)
{
    return lacs_ref_simple_gla(&c->d, &c->in, o[0], o[1]);
}
static int d_gla(const call *c, double *const *o) { return lacs_ref_gla(&c->d, &c->in, o[0], o[1]); }
static int d_delta_rule(const call *c, double *const *o)
{
    return lacs_ref_delta_rule(&c->d, &c->in, o[0], o[1]);
}
static int d_gated_delta_rule(const call *c, double *const *o)
{
    return lacs_ref_gated_delta_rule(&c->d, &c->in, o[0], o[1]);
}
static int d_comba(const call *c, double *const *o) { return lacs_ref_comba(&c->d, &c->in, o[0], o[1]); }
static int d_efla(const call *c, double *const *o) { return lacs_ref_efla(&c->d, &c->in, o[0], o[1]); }
static int d_softmax_attn(const call *c, double *const *o)
{
    return lacs_ref_softmax_attn(&c->d, &c->in, o[0]);
}
static int d_fox(const call *c, double *const *o) { return lacs_ref_fox(&c->d, &c->in, o[0]); }
static int d_deltaformer(const call *c, double *const *o)
{
    return lacs_ref_deltaformer(&c->d, &c->in, c->form, o[0]);
}
static int d_path_attn_matrix(const call *c, double *const *o)
{
    return lacs_ref_path_attn_matrix(&c->d, &c->in, o[0]);
}
static int d_mesa_net(const call *c, double *const *o)
{
    return lacs_ref_mesa_net(&c->d, &c->in, o[0], o[1], o[2]);
}
static int d_rmsnorm(const call *c, double *const *o)
{
    return lacs_ref_rmsnorm(c->x, c->rows, c->dim, c->eps, c->weight, o[0]);
}
static int d_rmsnorm_vjp(const call *c, double *const *o)
{
    return lacs_ref_rmsnorm_vjp(c->x, c->dy, c->rows, c->dim, c->eps, c->weight, o[0], o[1]);
}
static int d_dyt(const call *c, double *const *o)
{
    return lacs_ref_dyt(c->x, c->rows, c->dim, c->alpha, c->weight, c->bias, o[0]);
}
static int d_dyt_vjp(const call *c, double *const *o)
{
    return lacs_ref_dyt_vjp(c->x, c->dy, c->rows, c->dim, c->alpha, c->weight, o[0], o[1], o[2], o[3]);
}
static int d_dyisru(const call *c, double *const *o)
{
    return lacs_ref_dyisru(c->x, c->rows, c->dim, c->C, c->weight, c->bias, o[0]);
}
static int d_dyisru_vjp(const call *c, double *const *o)
{
    return lacs_ref_dyisru_vjp(c->x, c->dy, c->rows, c->dim, c->C, c->weight, o[0], o[1], o[2], o[3]);
}
static int d_softcap(const call *c, double *const *o)
{
    return lacs_ref_softcap(c->x, c->rows * c->dim, c->cap, o[0]);
}
static int d_softcap_vjp(const call *c, double *const *o)
{
    return lacs_ref_softcap_vjp(c->x, c->dy, c->rows * c->dim, c->cap, o[0], o[1]);
}
static int d_l2norm(const call *c, double *const *o)
{
    return lacs_ref_l2norm(c->x, c->rows, c->dim, c->eps, c->convention, o[0]);
}
static int d_l2norm_vjp(const call *c, double *const *o)
{
    return lacs_ref_l2norm_vjp(c->x, c->dy, c->rows, c->dim, c->eps, c->convention, o[0]);
}
/* The VJPs of the ops on sequences (SPEC.md 4.19): their gradients by name,
 * from the slots of the op's outputs list. */
static lacs_ref_grads grads_of(const char *op, double *const *o)
{
    const char *list = lacs_op_find(op)->outputs, *names[] = {"dq", "dk", "dv", "dbeta", "dg", "dgk", "dg_gamma",
                                                              "dh0", "dw"};
    double *slot[9] = {0};
    for (int n = 0; n < 9; n++) {
        int index = 0;
        for (const char *p = list; *p;) {
            const size_t len = strcspn(p, " ");
            if (len == strlen(names[n]) && strncmp(p, names[n], len) == 0)
                slot[n] = o[index];
            index++;
            p += len + (p[len] == ' ');
        }
    }
    return (lacs_ref_grads){.dq = slot[0], .dk = slot[1], .dv = slot[2], .dbeta = slot[3], .dg = slot[4],
                            .dgk = slot[5], .dg_gamma = slot[6], .dh0 = slot[7], .dw = slot[8]};
}
#define DIRECT_VJP(NAME)                                                                                         \
    static int d_##NAME##_vjp(const call *c, double *const *o)                                                   \
    {                                                                                                            \
        lacs_ref_grads g = grads_of(#NAME "_vjp", o);                                                            \
        return lacs_ref_##NAME##_vjp(&c->d, &c->in, &c->ct, &g);                                                 \
    }
DIRECT_VJP(linear_attn)
DIRECT_VJP(retention)
DIRECT_VJP(simple_gla)
DIRECT_VJP(gla)
DIRECT_VJP(delta_rule)
DIRECT_VJP(gated_delta_rule)
DIRECT_VJP(comba)
DIRECT_VJP(efla)
DIRECT_VJP(softmax_attn)
DIRECT_VJP(fox)
DIRECT_VJP(path_attn)
static int d_deltaformer_vjp(const call *c, double *const *o)
{
    lacs_ref_grads g = grads_of("deltaformer_vjp", o);
    return lacs_ref_deltaformer_vjp(&c->d, &c->in, c->form, &c->ct, &g);
}

/* Not in the table: PaTH's primary (explicit) form, a different function. */
static int d_path_attn_explicit(const call *c, double *const *o)
{
    return lacs_ref_path_attn(&c->d, &c->in, o[0]);
}

/* For each op: the function its `reference` field must name, that function
 * called directly, the input that must be there besides the required ones
 * (one of an exactly-one pair), and the parameters of the tests below. */
static const struct {
    const char *op, *reference;
    direct_fn fn;
    const char *must_add;      /* "g" for gated_delta_rule and fox, or "" */
    const char *skip_optional; /* an optional input left out of the full set (the other of the pair) */
} directs[] = {
    {"linear_attn", "lacs_ref_linear_attn", d_linear_attn, "", ""},
    {"linear_attn_postnorm", "lacs_ref_linear_attn_postnorm", d_linear_attn_postnorm, "", ""},
    {"retention", "lacs_ref_retention", d_retention, "", ""},
    {"simple_gla", "lacs_ref_simple_gla", d_simple_gla, "", ""},
    {"gla", "lacs_ref_gla", d_gla, "", ""},
    {"delta_rule", "lacs_ref_delta_rule", d_delta_rule, "", ""},
    {"gated_delta_rule", "lacs_ref_gated_delta_rule", d_gated_delta_rule, "g", "gk"},
    {"comba", "lacs_ref_comba", d_comba, "", ""},
    {"efla", "lacs_ref_efla", d_efla, "", ""},
    {"softmax_attn", "lacs_ref_softmax_attn", d_softmax_attn, "", ""},
    {"fox", "lacs_ref_fox", d_fox, "g", "g_gamma"},
    {"deltaformer", "lacs_ref_deltaformer", d_deltaformer, "", ""},
    {"path_attn", "lacs_ref_path_attn_matrix", d_path_attn_matrix, "", ""},
    {"mesa_net", "lacs_ref_mesa_net", d_mesa_net, "", ""},
    {"rmsnorm", "lacs_ref_rmsnorm", d_rmsnorm, "", ""},
    {"rmsnorm_vjp", "lacs_ref_rmsnorm_vjp", d_rmsnorm_vjp, "", ""},
    {"dyt", "lacs_ref_dyt", d_dyt, "", ""},
    {"dyt_vjp", "lacs_ref_dyt_vjp", d_dyt_vjp, "", ""},
    {"dyisru", "lacs_ref_dyisru", d_dyisru, "", ""},
    {"dyisru_vjp", "lacs_ref_dyisru_vjp", d_dyisru_vjp, "", ""},
    {"softcap", "lacs_ref_softcap", d_softcap, "", ""},
    {"softcap_vjp", "lacs_ref_softcap_vjp", d_softcap_vjp, "", ""},
    {"l2norm", "lacs_ref_l2norm", d_l2norm, "", ""},
    {"l2norm_vjp", "lacs_ref_l2norm_vjp", d_l2norm_vjp, "", ""},
    {"linear_attn_vjp", "lacs_ref_linear_attn_vjp", d_linear_attn_vjp, "", ""},
    {"retention_vjp", "lacs_ref_retention_vjp", d_retention_vjp, "", ""},
    {"simple_gla_vjp", "lacs_ref_simple_gla_vjp", d_simple_gla_vjp, "", ""},
    {"gla_vjp", "lacs_ref_gla_vjp", d_gla_vjp, "", ""},
    {"delta_rule_vjp", "lacs_ref_delta_rule_vjp", d_delta_rule_vjp, "", ""},
    {"gated_delta_rule_vjp", "lacs_ref_gated_delta_rule_vjp", d_gated_delta_rule_vjp, "g", "gk"},
    {"comba_vjp", "lacs_ref_comba_vjp", d_comba_vjp, "", ""},
    {"efla_vjp", "lacs_ref_efla_vjp", d_efla_vjp, "", ""},
    {"softmax_attn_vjp", "lacs_ref_softmax_attn_vjp", d_softmax_attn_vjp, "", ""},
    {"fox_vjp", "lacs_ref_fox_vjp", d_fox_vjp, "g", "g_gamma"},
    {"deltaformer_vjp", "lacs_ref_deltaformer_vjp", d_deltaformer_vjp, "", ""},
    {"path_attn_vjp", "lacs_ref_path_attn_vjp", d_path_attn_vjp, "", ""},
};
enum { N_DIRECTS = sizeof directs / sizeof directs[0] };

static int direct_index(const char *op)
{
    for (int i = 0; i < N_DIRECTS; i++)
        if (strcmp(directs[i].op, op) == 0)
            return i;
    return -1;
}

/* ---- input sets: named tensors whose values are exact in bf16 ---- */

enum { MAXE = 512, MAXT = 14 };

typedef struct {
    char name[16];
    int ndim;
    int64_t shape[4];
    int64_t count;
    double values[MAXE];
    int64_t ints[MAXE];              /* cu_seqlens */
    unsigned char bytes[MAXE * 8];   /* the values encoded in the view's dtype */
} tin;

typedef struct {
    tin t[MAXT];
    int n;
    lacs_tensor view[MAXT];
    /* sizes */
    int64_t B, T, H, HV, K, V, N, rows, dim;
    int varlen;
} input_set;


/* The shape of input `name` (SPEC.md 2.1), as golden.c's table. */
static int shape_of(const input_set *s, const char *name, int64_t *shape)
{
    const int64_t n_seqs = s->varlen ? s->N : s->B;
    const struct {
        const char *name;
        int ndim;
        int64_t d[4];
    } table[] = {
        {"q", 4, {s->B, s->T, s->H, s->K}}, {"k", 4, {s->B, s->T, s->H, s->K}},
        {"w", 4, {s->B, s->T, s->H, s->K}}, {"v", 4, {s->B, s->T, s->HV, s->V}},
        {"beta", 3, {s->B, s->T, s->HV, 0}}, {"g", 3, {s->B, s->T, s->HV, 0}},
        {"gk", 4, {s->B, s->T, s->HV, s->K}}, {"g_gamma", 1, {s->HV, 0, 0, 0}},
        {"lambda", 2, {s->HV, s->K, 0, 0}}, {"h0", 4, {n_seqs, s->HV, s->K, s->V}},
        {"h0_kk", 4, {n_seqs, s->HV, s->K, s->K}}, {"x", 2, {s->rows, s->dim, 0, 0}},
        {"dy", 2, {s->rows, s->dim, 0, 0}}, {"weight", 1, {s->dim, 0, 0, 0}},
        {"bias", 1, {s->dim, 0, 0, 0}}, {"alpha", 1, {1, 0, 0, 0}}, {"C", 1, {1, 0, 0, 0}},
        {"cu_seqlens", 1, {s->N + 1, 0, 0, 0}}, {"do", 4, {s->B, s->T, s->HV, s->V}},
        {"dht", 4, {n_seqs, s->HV, s->K, s->V}},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) {
            memcpy(shape, table[i].d, sizeof table[i].d);
            return table[i].ndim;
        }
    return -1;
}

/* A small deterministic value for element i of `name`, in the input's domain
 * and exact in bf16 (multiples of 1/32 of magnitude <= 1.25). */
static double value_of(const char *name, int64_t i, const int64_t *shape, int salt)
{
    uint64_t h = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + 0xbf58476d1ce4e5b9ull * (uint64_t)(salt + 7);
    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h ^= h >> 29;
    const int m = (int)(h % 65); /* 0..64 */
    if (strcmp(name, "beta") == 0)
        return (m % 33) / 32.0;
    if (strcmp(name, "g") == 0 || strcmp(name, "gk") == 0)
        return -(m % 17) / 32.0;
    if (strcmp(name, "g_gamma") == 0)
        return -(1 + m % 16) / 32.0;
    if (strcmp(name, "lambda") == 0)
        return 0.25 + (m % 33) / 32.0;
    if (strcmp(name, "h0_kk") == 0) /* 0.5 I per (sequence, head): positive definite */
        return (i % shape[3]) == ((i / shape[3]) % shape[2]) ? 0.5 : 0;
    if (strcmp(name, "alpha") == 0)
        return 0.5;
    if (strcmp(name, "C") == 0)
        return 0.75;
    return (m - 32) / 32.0;
}

static void add_input(input_set *s, const char *name, int salt)
{
    cr_assert(s->n < MAXT);
    tin *t = &s->t[s->n++];
    memset(t, 0, sizeof *t);
    strcpy(t->name, name);
    t->ndim = shape_of(s, name, t->shape);
    cr_assert(t->ndim > 0, "no shape for input '%s'", name);
    t->count = 1;
    for (int d = 0; d < t->ndim; d++)
        t->count *= t->shape[d];
    cr_assert(t->count <= MAXE, "input '%s' too big for the test's buffers", name);
    for (int64_t i = 0; i < t->count; i++)
        t->values[i] = value_of(name, i, t->shape, salt);
}

static tin *find_tin(input_set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].name, name) == 0)
            return &s->t[i];
    return NULL;
}

/* Encodes every float input in `dtype` (cu_seqlens in I64) and returns the views. */
static lacs_tensor *views(input_set *s, lacs_dtype dtype)
{
    for (int i = 0; i < s->n; i++) {
        tin *t = &s->t[i];
        lacs_tensor *v = &s->view[i];
        v->name = t->name;
        v->ndim = t->ndim;
        v->shape = t->shape;
        v->data = t->bytes;
        if (strcmp(t->name, "cu_seqlens") == 0) {
            v->dtype = LACS_I64;
            memcpy(t->bytes, t->ints, (size_t)t->count * 8);
            continue;
        }
        v->dtype = dtype;
        for (int64_t e = 0; e < t->count; e++) {
            const double x = t->values[e];
            if (dtype == LACS_F64) {
                memcpy(t->bytes + 8 * e, &x, 8);
            } else {
                float f = (float)x;
                cr_assert(f == x || isnan(x), "the test's values must be exact in binary32");
                if (dtype == LACS_F32) {
                    memcpy(t->bytes + 4 * e, &f, 4);
                } else {
                    uint32_t bits;
                    memcpy(&bits, &f, 4);
                    cr_assert_eq(bits & 0xffffu, 0u, "the test's values must be exact in bf16");
                    uint16_t h = (uint16_t)(bits >> 16);
                    memcpy(t->bytes + 2 * e, &h, 2);
                }
            }
        }
    }
    return s->view;
}

static void seq_sizes(input_set *s, int varlen)
{
    memset(s, 0, sizeof *s);
    s->B = varlen ? 1 : 2;
    s->T = 5;
    s->H = 1;
    s->HV = 2;
    s->K = 4;
    s->V = 3;
    s->varlen = varlen;
    s->N = varlen ? 3 : 0;
}

static void norm_sizes(input_set *s)
{
    memset(s, 0, sizeof *s);
    s->rows = 3;
    s->dim = 4;
}

/* The inputs of `op`: its required ones, the one of a pair it must have, and
 * (with `optional`) every optional one but cu_seqlens and the other of a pair;
 * with `varlen`, cu_seqlens {0, 2, 2, 5} (three sequences, one empty). */
static void make_inputs(input_set *s, const lacs_op_info *info, int optional, int varlen, int salt)
{
    const int di = direct_index(info->name);
    cr_assert(di >= 0, "op '%s' has no direct call in this test", info->name);
    if (info->family == LACS_FAMILY_NORM)
        norm_sizes(s);
    else
        seq_sizes(s, varlen);
    char names[256];
    snprintf(names, sizeof names, "%s %s %s", info->required, directs[di].must_add,
             optional ? info->optional : "");
    for (const char *p = names; *p;) {
        while (*p == ' ')
            p++;
        size_t len = strcspn(p, " ");
        char word[32];
        if (len > 0 && len < sizeof word) {
            memcpy(word, p, len);
            word[len] = 0;
            if (strcmp(word, "cu_seqlens") != 0 && !lacs_word_in_list(directs[di].skip_optional, word) &&
                !find_tin(s, word))
                add_input(s, word, salt);
        }
        p += len;
    }
    if (varlen && info->family != LACS_FAMILY_NORM) {
        add_input(s, "cu_seqlens", salt);
        const int64_t cu[4] = {0, 2, 2, 5};
        memcpy(s->t[s->n - 1].ints, cu, sizeof cu);
    }
}

/* The call a direct function gets: the input values bound by name. */
static call bind(const input_set *s, const lacs_param *params, int n_params)
{
    call c;
    memset(&c, 0, sizeof c);
    c.d.B = s->B;
    c.d.T = s->T;
    c.d.H = s->H;
    c.d.HV = s->HV;
    c.d.K = s->K;
    c.d.V = s->V;
    c.rows = s->rows;
    c.dim = s->dim;
    c.in.scale = s->K > 0 ? 1 / sqrt((double)s->K) : 0;
    c.form = LACS_DELTAFORMER_SOFTMAX;
    c.convention = LACS_L2NORM_SQRT_EPS;
    for (int i = 0; i < s->n; i++) {
        const tin *t = &s->t[i];
        const char *n = t->name;
        const double *v = t->values;
        if (strcmp(n, "q") == 0) c.in.q = v;
        else if (strcmp(n, "k") == 0) c.in.k = v;
        else if (strcmp(n, "v") == 0) c.in.v = v;
        else if (strcmp(n, "beta") == 0) c.in.beta = v;
        else if (strcmp(n, "g") == 0) c.in.g = v;
        else if (strcmp(n, "gk") == 0) c.in.gk = v;
        else if (strcmp(n, "g_gamma") == 0) c.in.g_gamma = v;
        else if (strcmp(n, "h0") == 0) c.in.h0 = v;
        else if (strcmp(n, "w") == 0) c.in.w = v;
        else if (strcmp(n, "lambda") == 0) c.in.lambda = v;
        else if (strcmp(n, "h0_kk") == 0) c.in.h0_kk = v;
        else if (strcmp(n, "do") == 0) c.ct.dout = v;
        else if (strcmp(n, "dht") == 0) c.ct.dht = v;
        else if (strcmp(n, "x") == 0) c.x = v;
        else if (strcmp(n, "dy") == 0) c.dy = v;
        else if (strcmp(n, "weight") == 0) c.weight = v;
        else if (strcmp(n, "bias") == 0) c.bias = v;
        else if (strcmp(n, "alpha") == 0) c.alpha = v[0];
        else if (strcmp(n, "C") == 0) c.C = v[0];
        else if (strcmp(n, "cu_seqlens") == 0) {
            c.d.cu_seqlens = t->ints;
            c.d.N = t->count - 1;
        }
    }
    for (int i = 0; i < n_params; i++) {
        const char *n = params[i].name;
        const double v = params[i].value;
        if (strcmp(n, "scale") == 0) c.in.scale = v;
        else if (strcmp(n, "eps") == 0) c.in.eps = c.eps = v;
        else if (strcmp(n, "cap") == 0) c.cap = v;
        else if (strcmp(n, "form") == 0) c.form = (lacs_deltaformer_form)v;
        else if (strcmp(n, "convention") == 0) c.convention = (lacs_l2norm_convention)v;
    }
    return c;
}

/* The parameters each op reads, set away from their defaults (`nondefault`),
 * or only those without a usable default (softcap's cap). */
static int make_params(const lacs_op_info *info, int nondefault, lacs_param *params)
{
    int n = 0;
    if (lacs_word_in_list(info->params, "cap"))
        params[n++] = (lacs_param){"cap", 2.0};
    if (!nondefault)
        return n;
    if (lacs_word_in_list(info->params, "scale"))
        params[n++] = (lacs_param){"scale", 0.375};
    if (lacs_word_in_list(info->params, "eps"))
        params[n++] = (lacs_param){"eps", 1e-3};
    if (lacs_word_in_list(info->params, "form"))
        params[n++] = (lacs_param){"form", 2};
    if (lacs_word_in_list(info->params, "convention"))
        params[n++] = (lacs_param){"convention", 1};
    return n;
}

/* ---- outputs ---- */

typedef struct {
    lacs_output_shape shape[LACS_OPS_MAX_OUTPUTS];
    int n;
    int64_t count[LACS_OPS_MAX_OUTPUTS];
    double f64[LACS_OPS_MAX_OUTPUTS][MAXE];
    float f32[LACS_OPS_MAX_OUTPUTS][MAXE];
    lacs_tensor view[LACS_OPS_MAX_OUTPUTS];
} output_set;

static void make_outputs(output_set *o, const char *op, const lacs_tensor *inputs, int n_inputs,
                         lacs_dtype dtype)
{
    memset(o, 0, sizeof *o);
    int rc = lacs_reference_output_shapes(op, inputs, n_inputs, o->shape, &o->n);
    cr_assert_eq(rc, LACS_OK, "%s", lacs_last_error());
    for (int i = 0; i < o->n; i++) {
        o->count[i] = 1;
        for (int d = 0; d < o->shape[i].ndim; d++)
            o->count[i] *= o->shape[i].shape[d];
        cr_assert(o->count[i] <= MAXE);
        for (int64_t e = 0; e < MAXE; e++) { /* poison: a value not written shows */
            o->f64[i][e] = -777.25;
            o->f32[i][e] = -777.25f;
        }
        o->view[i] = (lacs_tensor){o->shape[i].name, dtype, o->shape[i].ndim, o->shape[i].shape,
                                   dtype == LACS_F64 ? (void *)o->f64[i] : (void *)o->f32[i]};
    }
}

/* The direct call's outputs, in the slots of the op's `outputs` list. */
typedef struct {
    double buf[LACS_OPS_MAX_OUTPUTS][MAXE];
} direct_out;

static int slot_of(const char *outputs, const char *name)
{
    int index = 0;
    for (const char *p = outputs; *p;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        size_t len = strcspn(p, " ");
        if (len == strlen(name) && strncmp(p, name, len) == 0)
            return index;
        index++;
        p += len;
    }
    return -1;
}

/* Calls `fn` with a buffer for each output the shapes give (NULL for the others). */
static void call_direct(direct_fn fn, const call *c, const lacs_op_info *info, const output_set *o,
                        direct_out *d)
{
    double *slots[LACS_OPS_MAX_OUTPUTS] = {0};
    for (int i = 0; i < o->n; i++) {
        int slot = slot_of(info->outputs, o->shape[i].name);
        cr_assert(slot >= 0, "output '%s' not in the op's list", o->shape[i].name);
        for (int64_t e = 0; e < MAXE; e++)
            d->buf[slot][e] = 0;
        slots[slot] = d->buf[slot];
    }
    int rc = fn(c, slots);
    cr_assert_eq(rc, LACS_OK, "%s: %s", info->name, lacs_last_error());
}

static const double *direct_of(const direct_out *d, const lacs_op_info *info, const char *name)
{
    return d->buf[slot_of(info->outputs, name)];
}

/* Number of elements of output i that differ in bits from the direct call's
 * (F64), or from its (float) rounding (F32). */
static int64_t bit_differences(const output_set *o, int i, const double *want)
{
    int64_t n = 0;
    for (int64_t e = 0; e < o->count[i]; e++) {
        if (o->view[i].dtype == LACS_F64)
            n += memcmp(&o->f64[i][e], &want[e], 8) != 0;
        else {
            float f = (float)want[e];
            n += memcmp(&o->f32[i][e], &f, 4) != 0;
        }
    }
    return n;
}

/* The input every output depends on at element 0: v (q's first token may
 * attend to itself only), or x for the norms. */
static tin *nudge_target(input_set *s)
{
    tin *v = find_tin(s, "v");
    return v ? v : find_tin(s, "x");
}

/* One op on one input set: lacs_reference_run into `out_dtype` from
 * `in_dtype` equals the direct call bit for bit; and the direct call on the
 * set with one input nudged does not (so the comparison can tell). */
static void check_run_equals_direct(const lacs_op_info *info, int optional, int varlen, int nondefault,
                                    lacs_dtype in_dtype, lacs_dtype out_dtype)
{
    static input_set s; /* large: not on the stack */
    static output_set o;
    static direct_out want, nudged;
    make_inputs(&s, info, optional, varlen, 1);
    lacs_param params[8];
    const int n_params = make_params(info, nondefault, params);
    lacs_tensor *in = views(&s, in_dtype);
    make_outputs(&o, info->name, in, s.n, out_dtype);
    int rc = lacs_reference_run(info->name, in, s.n, params, n_params, o.view, o.n, 0);
    cr_assert_eq(rc, LACS_OK, "%s: %s", info->name, lacs_last_error());

    const int di = direct_index(info->name);
    call c = bind(&s, params, n_params);
    call_direct(directs[di].fn, &c, info, &o, &want);
    for (int i = 0; i < o.n; i++) {
        cr_assert_eq(bit_differences(&o, i, direct_of(&want, info, o.shape[i].name)), 0,
                     "%s (optional %d, varlen %d, params %d, dtype %d -> %d): output '%s' differs from %s",
                     info->name, optional, varlen, nondefault, in_dtype, out_dtype, o.shape[i].name,
                     directs[di].reference);
    }

    /* the wrong thing: v (or x) nudged by 1/4 changes the first output */
    tin *first = nudge_target(&s);
    const double saved = first->values[0];
    first->values[0] = saved + 0.25;
    call c2 = bind(&s, params, n_params);
    call_direct(directs[di].fn, &c2, info, &o, &nudged);
    first->values[0] = saved;
    cr_assert_gt(bit_differences(&o, 0, direct_of(&nudged, info, o.shape[0].name)), 0,
                 "%s: a nudged '%s' must change output '%s'", info->name, first->name, o.shape[0].name);
}

/* ---- the table ---- */

Test(ops_table, every_op_names_the_function_this_test_calls)
{
    int n;
    const lacs_op_info *ops = lacs_ops(&n);
    cr_assert_eq(n, N_DIRECTS, "lacs_ops() has %d ops, this test knows %d", n, (int)N_DIRECTS);
    for (int i = 0; i < n; i++) {
        const int di = direct_index(ops[i].name);
        cr_assert(di >= 0, "op '%s' unknown to this test", ops[i].name);
        cr_assert_str_eq(ops[i].reference, directs[di].reference, "%s", ops[i].name);
        cr_assert_eq(lacs_op_find(ops[i].name), &ops[i]);
        cr_assert_eq(ops[i].family == LACS_FAMILY_NORM, ops[i].required[0] == 'x',
                     "%s: the norms read x, the others q", ops[i].name);
    }
    /* the wrong thing: an unknown name is not found */
    cr_assert_null(lacs_op_find("delta_rules"));
    cr_assert_null(lacs_op_find(""));
    cr_assert_null(lacs_op_find(NULL));
}

Test(ops_table, path_attn_runs_the_matrix_form_not_the_explicit_one)
{
    /* The table names lacs_ref_path_attn_matrix; the explicit form is a
     * different function whose output differs in its last bits somewhere,
     * which the bit-for-bit comparison sees. */
    static input_set s;
    static output_set o;
    static direct_out matrix, explicit_form;
    const lacs_op_info *info = lacs_op_find("path_attn");
    make_inputs(&s, info, 1, 0, 3);
    lacs_tensor *in = views(&s, LACS_F64);
    make_outputs(&o, "path_attn", in, s.n, LACS_F64);
    cr_assert_eq(lacs_reference_run("path_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK, "%s",
                 lacs_last_error());
    call c = bind(&s, NULL, 0);
    call_direct(d_path_attn_matrix, &c, info, &o, &matrix);
    call_direct(d_path_attn_explicit, &c, info, &o, &explicit_form);
    cr_assert_eq(bit_differences(&o, 0, matrix.buf[0]), 0);
    cr_assert_gt(bit_differences(&o, 0, explicit_form.buf[0]), 0,
                 "the explicit form happens to agree bit for bit here: pick other values");
    cr_assert_lt(lacs_normwise_error(o.f64[0], explicit_form.buf[0], 1, 1, 1, o.count[0], NULL, 0, NULL),
                 FORMS_BOUND, "the two forms are the same op");
}

/* ---- running ---- */

static void for_every_op(int optional, int varlen, int nondefault, lacs_dtype in_dtype, lacs_dtype out_dtype)
{
    int n;
    const lacs_op_info *ops = lacs_ops(&n);
    for (int i = 0; i < n; i++) {
        if (varlen && ops[i].family == LACS_FAMILY_NORM)
            continue;
        check_run_equals_direct(&ops[i], optional, varlen, nondefault, in_dtype, out_dtype);
    }
}

Test(ops_run, every_op_equals_its_reference_from_f64_inputs)
{
    for_every_op(1, 0, 1, LACS_F64, LACS_F64);
    for_every_op(0, 0, 0, LACS_F64, LACS_F64);
}

Test(ops_run, every_op_equals_its_reference_from_f32_inputs)
{
    for_every_op(1, 0, 1, LACS_F32, LACS_F64);
    for_every_op(0, 0, 1, LACS_F32, LACS_F64);
}

Test(ops_run, every_op_equals_its_reference_from_bf16_inputs)
{
    for_every_op(1, 0, 1, LACS_BF16, LACS_F64);
    for_every_op(0, 0, 0, LACS_BF16, LACS_F64);
}

Test(ops_run, every_op_rounds_to_f32_outputs)
{
    for_every_op(1, 0, 1, LACS_BF16, LACS_F32);
    for_every_op(0, 0, 0, LACS_F32, LACS_F32);
}

Test(ops_run, every_op_on_sequences_runs_varlen)
{
    for_every_op(1, 1, 1, LACS_F32, LACS_F64);
    for_every_op(0, 1, 0, LACS_BF16, LACS_F64);
}

/* The values a tensor's bytes hold in the dtype: bf16 widened, as the reader says. */
Test(ops_run, bf16_inputs_are_widened_not_reinterpreted)
{
    /* dyt with y = tanh(alpha x) at x = 0.5 (bf16 0x3f00): reading the two
     * bytes as anything but the top half of a binary32 gives another y. */
    const int64_t xshape[2] = {1, 1}, one = 1;
    uint16_t x_bits = 0x3f00, a_bits = 0x3f80; /* 0.5, 1.0 */
    lacs_tensor in[2] = {{"x", LACS_BF16, 2, xshape, &x_bits}, {"alpha", LACS_BF16, 1, &one, &a_bits}};
    double y = 0;
    lacs_tensor out = {"y", LACS_F64, 2, xshape, &y};
    cr_assert_eq(lacs_reference_run("dyt", in, 2, NULL, 0, &out, 1, 0), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(y, tanh(0.5));
    /* the wrong thing: the next bf16 value (0.50390625) gives another y */
    x_bits = 0x3f01;
    cr_assert_eq(lacs_reference_run("dyt", in, 2, NULL, 0, &out, 1, 0), LACS_OK);
    cr_assert_neq(y, tanh(0.5));
}

Test(ops_run, defaults_of_scale_form_and_convention)
{
    /* Without the parameter: scale = K^-1/2, form = 1 (softmax), convention
     * = 0 (sqrt_eps); each is what a direct call with that value gives, and
     * not what another value gives. (l2norm gets eps = 1e-3, without which
     * the two conventions coincide.) */
    static input_set s;
    static output_set o;
    static direct_out want, other;
    const char *ops[] = {"delta_rule", "deltaformer", "l2norm"};
    for (int k = 0; k < 3; k++) {
        const lacs_op_info *info = lacs_op_find(ops[k]);
        make_inputs(&s, info, 0, 0, 5);
        lacs_param eps = {"eps", 1e-3};
        const int n_params = k == 2 ? 1 : 0;
        lacs_tensor *in = views(&s, LACS_F64);
        make_outputs(&o, ops[k], in, s.n, LACS_F64);
        cr_assert_eq(lacs_reference_run(ops[k], in, s.n, &eps, n_params, o.view, o.n, 0), LACS_OK, "%s",
                     lacs_last_error());
        call c = bind(&s, &eps, n_params);
        call_direct(directs[direct_index(ops[k])].fn, &c, info, &o, &want);
        cr_assert_eq(bit_differences(&o, 0, want.buf[0]), 0, "%s with its defaults", ops[k]);
        /* the wrong default */
        call w = c;
        if (k == 0)
            w.in.scale = 1;
        else if (k == 1)
            w.form = LACS_DELTAFORMER_FLA;
        else
            w.convention = LACS_L2NORM_MAX_EPS;
        call_direct(directs[direct_index(ops[k])].fn, &w, info, &o, &other);
        cr_assert_gt(bit_differences(&o, 0, other.buf[0]), 0, "%s: the wrong default must show", ops[k]);
    }
}

/* ---- long double ---- */

static double normwise(const double *x, const double *ref, int64_t n)
{
    return lacs_normwise_error(x, ref, 1, 1, 1, n, NULL, 0, NULL);
}

Test(ops_ld, long_double_agrees_with_double_and_is_not_it)
{
    static input_set s;
    static output_set o;
    static direct_out want, nudged;
    int n, ops_differing = 0;
    const lacs_op_info *ops = lacs_ops(&n);
    for (int i = 0; i < n; i++) {
        const lacs_op_info *info = &ops[i];
        make_inputs(&s, info, 1, 0, 11);
        lacs_param params[8];
        const int n_params = make_params(info, 1, params);
        lacs_tensor *in = views(&s, LACS_F32);
        make_outputs(&o, info->name, in, s.n, LACS_F64);
        int rc = lacs_reference_run(info->name, in, s.n, params, n_params, o.view, o.n, 1);
        cr_assert_eq(rc, LACS_OK, "%s: %s", info->name, lacs_last_error());
        call c = bind(&s, params, n_params);
        call_direct(directs[direct_index(info->name)].fn, &c, info, &o, &want);
        int64_t differing = 0;
        for (int k = 0; k < o.n; k++) {
            const double *d = direct_of(&want, info, o.shape[k].name);
            const double err = normwise(o.f64[k], d, o.count[k]);
            cr_assert_leq(err, LONG_DOUBLE_BOUND, "%s: output '%s' differs from double by %g", info->name,
                          o.shape[k].name, err);
            differing += bit_differences(&o, k, d);
        }
        ops_differing += differing > 0;
        /* the wrong thing: the double result of a slightly different input
         * (v's or x's first element moved by 2^-20) is outside the bound */
        tin *first = nudge_target(&s);
        const double saved = first->values[0];
        first->values[0] = saved + 0x1p-20;
        call c2 = bind(&s, params, n_params);
        call_direct(directs[direct_index(info->name)].fn, &c2, info, &o, &nudged);
        first->values[0] = saved;
        const double wrong = normwise(o.f64[0], direct_of(&nudged, info, o.shape[0].name), o.count[0]);
        cr_assert_gt(wrong, LONG_DOUBLE_BOUND, "%s: a nudged input must show (%g)", info->name, wrong);
    }
    /* long_double = 1 is honoured: the long double results are not the double
     * ones bit for bit (measured: 23 of 24 ops differ somewhere here). */
    cr_assert_geq(ops_differing, n / 2, "only %d of %d ops differ from double: is long_double ignored?",
                  ops_differing, n);
}

Test(ops_ld, an_f32_output_is_rounded_once_from_long_double)
{
    /* dyt with x = 2^-60, alpha = 1, bias = 1 + 2^-24 (a binary32 midpoint):
     * in long double y = 1 + 2^-24 + 2^-60 exactly, which rounds to the
     * binary32 1 + 2^-23. Rounding it to double first gives 1 + 2^-24, a tie,
     * which rounds to even: 1 (double rounding). */
    const int64_t xshape[2] = {1, 1}, one = 1;
    double x = 0x1p-60, alpha = 1, bias = 1 + 0x1p-24;
    lacs_tensor in[3] = {{"x", LACS_F64, 2, xshape, &x}, {"alpha", LACS_F64, 1, &one, &alpha},
                         {"bias", LACS_F64, 1, &one, &bias}};
    float y = 0;
    double y64 = 0;
    lacs_tensor out = {"y", LACS_F32, 2, xshape, &y};
    cr_assert_eq(lacs_reference_run("dyt", in, 3, NULL, 0, &out, 1, 1), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(y, 1 + 0x1p-23f, "y = %a, want 0x1.000002p+0 (rounded once from long double)", (double)y);
    /* the double path rounds once from double: 1 + 2^-24 -> 1 */
    cr_assert_eq(lacs_reference_run("dyt", in, 3, NULL, 0, &out, 1, 0), LACS_OK);
    cr_assert_eq(y, 1.0f);
    /* and the F64 output of the long double path is the double rounding, 1 + 2^-24 */
    out = (lacs_tensor){"y", LACS_F64, 2, xshape, &y64};
    cr_assert_eq(lacs_reference_run("dyt", in, 3, NULL, 0, &out, 1, 1), LACS_OK);
    cr_assert_eq(y64, 1 + 0x1p-24);
}

/* ---- errors ---- */

/* delta_rule's inputs, F32: q k v beta h0, B = 2, T = 5, HV = 2, K = 4, V = 3. */
static input_set base;
static lacs_tensor base_in[MAXT];
static int n_base;
static output_set base_out;

static void base_delta_rule(void)
{
    make_inputs(&base, lacs_op_find("delta_rule"), 1, 0, 2);
    memcpy(base_in, views(&base, LACS_F32), sizeof base_in);
    n_base = base.n;
    make_outputs(&base_out, "delta_rule", base_in, n_base, LACS_F64);
}

static int index_of(const lacs_tensor *in, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(in[i].name, name) == 0)
            return i;
    cr_assert_fail("no input '%s'", name);
    return -1;
}

/* rc and a message naming every one of the words given. */
static void expect_error(int rc, int want, const char *a, const char *b)
{
    cr_assert_eq(rc, want, "rc %d, want %d: %s", rc, want, lacs_last_error());
    cr_assert(strstr(lacs_last_error(), a), "'%s' does not name '%s'", lacs_last_error(), a);
    if (b)
        cr_assert(strstr(lacs_last_error(), b), "'%s' does not name '%s'", lacs_last_error(), b);
}

static int run_base(const lacs_tensor *in, int n, const lacs_param *params, int n_params)
{
    return lacs_reference_run("delta_rule", in, n, params, n_params, base_out.view, base_out.n, 0);
}

Test(ops_errors, the_base_case_runs, .init = base_delta_rule)
{
    /* every error below is this call with one thing made wrong */
    cr_assert_eq(run_base(base_in, n_base, NULL, 0), LACS_OK, "%s", lacs_last_error());
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n;
    cr_assert_eq(lacs_reference_output_shapes("delta_rule", base_in, n_base, sh, &n), LACS_OK);
    cr_assert_eq(n, 2);
}

Test(ops_errors, unknown_op, .init = base_delta_rule)
{
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n = 99;
    expect_error(lacs_reference_output_shapes("delta_rul", base_in, n_base, sh, &n), LACS_ERR_INPUT,
                 "delta_rul", "unknown op");
    cr_assert_eq(n, 0);
    expect_error(lacs_reference_run("Delta_rule", base_in, n_base, NULL, 0, base_out.view, base_out.n, 0),
                 LACS_ERR_INPUT, "Delta_rule", "unknown op");
    cr_assert_eq(lacs_reference_run("delta_rule", base_in, n_base, NULL, 0, base_out.view, base_out.n, 0),
                 LACS_OK);
}

Test(ops_errors, unknown_input_name, .init = base_delta_rule)
{
    lacs_tensor in[MAXT];
    memcpy(in, base_in, sizeof in);
    in[index_of(in, n_base, "h0")].name = "h_0";
    expect_error(run_base(in, n_base, NULL, 0), LACS_ERR_INPUT, "delta_rule", "'h_0'");
    /* an input another op reads is not one this op reads */
    in[index_of(in, n_base, "h_0")].name = "lambda";
    expect_error(run_base(in, n_base, NULL, 0), LACS_ERR_INPUT, "delta_rule", "'lambda'");
    in[index_of(in, n_base, "lambda")].name = "h0";
    cr_assert_eq(run_base(in, n_base, NULL, 0), LACS_OK);
}

Test(ops_errors, input_given_twice, .init = base_delta_rule)
{
    lacs_tensor in[MAXT + 1];
    memcpy(in, base_in, sizeof base_in);
    in[n_base] = in[index_of(in, n_base, "beta")];
    expect_error(run_base(in, n_base + 1, NULL, 0), LACS_ERR_INPUT, "delta_rule", "'beta' is given twice");
    cr_assert_eq(run_base(in, n_base, NULL, 0), LACS_OK);
}

Test(ops_errors, required_input_missing, .init = base_delta_rule)
{
    const char *required[] = {"q", "k", "v", "beta"};
    for (int r = 0; r < 4; r++) {
        lacs_tensor in[MAXT];
        int n = 0;
        for (int i = 0; i < n_base; i++)
            if (strcmp(base_in[i].name, required[r]) != 0)
                in[n++] = base_in[i];
        cr_assert_eq(n, n_base - 1);
        char want[32];
        snprintf(want, sizeof want, "'%s' is required", required[r]);
        expect_error(run_base(in, n, NULL, 0), LACS_ERR_INPUT, "delta_rule", want);
    }
    /* an optional one may be missing */
    lacs_tensor in[MAXT];
    int n = 0;
    for (int i = 0; i < n_base; i++)
        if (strcmp(base_in[i].name, "h0") != 0)
            in[n++] = base_in[i];
    cr_assert_eq(run_base(in, n, NULL, 0), LACS_OK, "%s", lacs_last_error());
}

/* base_in with input `name` given shape `shape` (data kept; big enough). */
static int run_with_shape(const char *op, lacs_tensor *in, int n, const char *name, int ndim,
                          const int64_t *shape)
{
    const int i = index_of(in, n, name);
    const lacs_tensor saved = in[i];
    in[i].ndim = ndim;
    in[i].shape = shape;
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n_sh;
    const int rc_shapes = lacs_reference_output_shapes(op, in, n, sh, &n_sh);
    output_set *o = &base_out;
    const int rc = lacs_reference_run(op, in, n, NULL, 0, o->view, o->n, 0);
    in[i] = saved;
    cr_assert_eq(rc_shapes, rc, "lacs_reference_output_shapes and lacs_reference_run disagree on '%s'", name);
    return rc;
}

Test(ops_errors, wrong_shapes_on_sequences, .init = base_delta_rule)
{
    /* B = 2, T = 5, H = 1, HV = 2, K = 4, V = 3 */
    const int64_t k_bad[4] = {2, 5, 1, 3}, k_bad2[4] = {2, 4, 1, 4}, beta_bad[3] = {2, 5, 1},
                  beta_4d[4] = {2, 5, 2, 1}, h0_bad[4] = {3, 2, 4, 3}, h0_kv[4] = {2, 2, 3, 4},
                  k_good[4] = {2, 5, 1, 4}, beta_good[3] = {2, 5, 2}, h0_good[4] = {2, 2, 4, 3};
    expect_error(run_with_shape("delta_rule", base_in, n_base, "k", 4, k_bad), LACS_ERR_SHAPE, "delta_rule",
                 "'k'");
    expect_error(run_with_shape("delta_rule", base_in, n_base, "k", 4, k_bad2), LACS_ERR_SHAPE, "delta_rule",
                 "'k'");
    expect_error(run_with_shape("delta_rule", base_in, n_base, "beta", 3, beta_bad), LACS_ERR_SHAPE,
                 "delta_rule", "'beta'");
    expect_error(run_with_shape("delta_rule", base_in, n_base, "beta", 4, beta_4d), LACS_ERR_SHAPE,
                 "delta_rule", "'beta'");
    expect_error(run_with_shape("delta_rule", base_in, n_base, "h0", 4, h0_bad), LACS_ERR_SHAPE, "delta_rule",
                 "'h0'");
    expect_error(run_with_shape("delta_rule", base_in, n_base, "h0", 4, h0_kv), LACS_ERR_SHAPE, "delta_rule",
                 "'h0'");
    /* the right shapes, given the same way, pass */
    cr_assert_eq(run_with_shape("delta_rule", base_in, n_base, "k", 4, k_good), LACS_OK);
    cr_assert_eq(run_with_shape("delta_rule", base_in, n_base, "beta", 3, beta_good), LACS_OK);
    cr_assert_eq(run_with_shape("delta_rule", base_in, n_base, "h0", 4, h0_good), LACS_OK);
}

Test(ops_errors, h0_with_the_wrong_n_under_varlen)
{
    static input_set s;
    static output_set o;
    const lacs_op_info *info = lacs_op_find("delta_rule");
    make_inputs(&s, info, 1, 1, 4); /* cu_seqlens {0, 2, 2, 5}: N = 3 */
    lacs_tensor *in = views(&s, LACS_F32);
    make_outputs(&o, "delta_rule", in, s.n, LACS_F64);
    cr_assert_eq(lacs_reference_run("delta_rule", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK, "%s",
                 lacs_last_error());
    const int64_t h0_b[4] = {1, 2, 4, 3}; /* N = B = 1: the fixed-length count */
    const int i = index_of(in, s.n, "h0");
    in[i].shape = h0_b;
    expect_error(lacs_reference_run("delta_rule", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_SHAPE,
                 "delta_rule", "'h0'");
}

Test(ops_errors, cu_seqlens_must_be_i64_of_one_dimension)
{
    static input_set s;
    static output_set o;
    make_inputs(&s, lacs_op_find("linear_attn"), 0, 1, 4);
    lacs_tensor *in = views(&s, LACS_F64);
    make_outputs(&o, "linear_attn", in, s.n, LACS_F64);
    cr_assert_eq(lacs_reference_run("linear_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK, "%s",
                 lacs_last_error());
    const int i = index_of(in, s.n, "cu_seqlens");
    /* the same offsets as F64 */
    double as_double[4] = {0, 2, 2, 5};
    lacs_tensor saved = in[i];
    in[i].dtype = LACS_F64;
    in[i].data = as_double;
    expect_error(lacs_reference_run("linear_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_INPUT,
                 "linear_attn", "'cu_seqlens' must be I64");
    in[i] = saved;
    /* two dimensions */
    const int64_t two_d[2] = {2, 2};
    in[i].ndim = 2;
    in[i].shape = two_d;
    expect_error(lacs_reference_run("linear_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_SHAPE,
                 "linear_attn", "cu_seqlens");
    in[i] = saved;
    /* and a float input given as I64 */
    const int q = index_of(in, s.n, "q");
    in[q].dtype = LACS_I64;
    expect_error(lacs_reference_run("linear_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_INPUT,
                 "linear_attn", "'q'");
    in[q].dtype = LACS_F64;
    cr_assert_eq(lacs_reference_run("linear_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK);
}

Test(ops_errors, wrong_shapes_on_norms)
{
    static input_set s;
    static output_set o;
    const lacs_op_info *info = lacs_op_find("dyt_vjp");
    make_inputs(&s, info, 1, 0, 6); /* x dy alpha weight; rows 3, dim 4 */
    lacs_tensor *in = views(&s, LACS_F32);
    make_outputs(&o, "dyt_vjp", in, s.n, LACS_F64);
    cr_assert_eq(lacs_reference_run("dyt_vjp", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK, "%s",
                 lacs_last_error());
    const int64_t w3[1] = {3}, w_2d[2] = {1, 4}, a2[1] = {2}, a_2d[2] = {1, 1}, dy_t[2] = {4, 3};
    struct {
        const char *name;
        int ndim;
        const int64_t *shape;
    } bad[] = {{"weight", 1, w3}, {"weight", 2, w_2d}, {"alpha", 1, a2}, {"alpha", 2, a_2d}, {"dy", 2, dy_t}};
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        const int i = index_of(in, s.n, bad[b].name);
        lacs_tensor saved = in[i];
        in[i].ndim = bad[b].ndim;
        in[i].shape = bad[b].shape;
        char want[32];
        snprintf(want, sizeof want, "'%s'", bad[b].name);
        expect_error(lacs_reference_run("dyt_vjp", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_SHAPE,
                     "dyt_vjp", want);
        in[i] = saved;
    }
    cr_assert_eq(lacs_reference_run("dyt_vjp", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK);
}

Test(ops_errors, parameter_the_op_does_not_read, .init = base_delta_rule)
{
    lacs_param cap = {"cap", 30};
    expect_error(run_base(base_in, n_base, &cap, 1), LACS_ERR_PARAM, "delta_rule", "'cap'");
    lacs_param scale = {"scale", 0.5};
    cr_assert_eq(run_base(base_in, n_base, &scale, 1), LACS_OK, "delta_rule reads scale");
    lacs_param twice[2] = {{"scale", 0.5}, {"scale", 0.25}};
    expect_error(run_base(base_in, n_base, twice, 2), LACS_ERR_PARAM, "delta_rule", "'scale'");

    static input_set s;
    static output_set o;
    make_inputs(&s, lacs_op_find("mesa_net"), 0, 0, 7);
    lacs_tensor *in = views(&s, LACS_F32);
    make_outputs(&o, "mesa_net", in, s.n, LACS_F64);
    expect_error(lacs_reference_run("mesa_net", in, s.n, &scale, 1, o.view, o.n, 0), LACS_ERR_PARAM,
                 "mesa_net", "'scale'");
    cr_assert_eq(lacs_reference_run("mesa_net", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK, "%s",
                 lacs_last_error());
}

Test(ops_errors, invalid_form_and_convention_codes)
{
    static input_set s;
    static output_set o;
    make_inputs(&s, lacs_op_find("deltaformer"), 0, 0, 8);
    lacs_tensor *in = views(&s, LACS_F32);
    make_outputs(&o, "deltaformer", in, s.n, LACS_F64);
    const double bad_forms[] = {3, -1, 0.5, NAN};
    for (int i = 0; i < 4; i++) {
        lacs_param form = {"form", bad_forms[i]};
        expect_error(lacs_reference_run("deltaformer", in, s.n, &form, 1, o.view, o.n, 0), LACS_ERR_PARAM,
                     "deltaformer", "'form'");
    }
    for (int f = 0; f <= 2; f++) {
        lacs_param form = {"form", f};
        cr_assert_eq(lacs_reference_run("deltaformer", in, s.n, &form, 1, o.view, o.n, 0), LACS_OK,
                     "form %d: %s", f, lacs_last_error());
    }

    make_inputs(&s, lacs_op_find("l2norm_vjp"), 0, 0, 8);
    in = views(&s, LACS_F32);
    make_outputs(&o, "l2norm_vjp", in, s.n, LACS_F64);
    const double bad_conventions[] = {2, -1, 0.25};
    for (int i = 0; i < 3; i++) {
        lacs_param conv = {"convention", bad_conventions[i]};
        expect_error(lacs_reference_run("l2norm_vjp", in, s.n, &conv, 1, o.view, o.n, 0), LACS_ERR_PARAM,
                     "l2norm_vjp", "'convention'");
    }
    for (int k = 0; k <= 1; k++) {
        lacs_param conv = {"convention", k};
        cr_assert_eq(lacs_reference_run("l2norm_vjp", in, s.n, &conv, 1, o.view, o.n, 0), LACS_OK);
    }
}

Test(ops_errors, output_with_the_wrong_shape_or_dtype, .init = base_delta_rule)
{
    /* o is [2, 5, 2, 3]; ht [2, 2, 4, 3] */
    lacs_tensor out[2];
    memcpy(out, base_out.view, sizeof out);
    cr_assert_str_eq(out[0].name, "o");
    const int64_t o_rank3[3] = {10, 2, 3}, o_small[4] = {2, 5, 2, 2}, o_transposed[4] = {2, 5, 3, 2},
                  ht_kv[4] = {2, 2, 3, 4};
    const struct {
        int which, ndim;
        const int64_t *shape;
        lacs_dtype dtype;
        const char *name;
    } bad[] = {
        {0, 3, o_rank3, LACS_F64, "'o'"},      {0, 4, o_small, LACS_F64, "'o'"},
        {0, 4, o_transposed, LACS_F64, "'o'"}, /* the same count, another shape */
        {1, 4, ht_kv, LACS_F64, "'ht'"},       /* the state transposed: K and V swapped */
        {0, 4, NULL, LACS_BF16, "'o'"},        {1, 4, NULL, LACS_I64, "'ht'"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        lacs_tensor o[2];
        memcpy(o, out, sizeof o);
        o[bad[b].which].ndim = bad[b].ndim;
        if (bad[b].shape)
            o[bad[b].which].shape = bad[b].shape;
        o[bad[b].which].dtype = bad[b].dtype;
        const int rc = lacs_reference_run("delta_rule", base_in, n_base, NULL, 0, o, 2, 0);
        cr_assert_eq(rc, LACS_ERR_SHAPE, "case %zu: rc %d (%s)", b, rc, lacs_last_error());
        cr_assert(strstr(lacs_last_error(), "delta_rule") && strstr(lacs_last_error(), bad[b].name),
                  "case %zu: '%s'", b, lacs_last_error());
    }
    /* the right ones, in F64 and F32, pass */
    cr_assert_eq(lacs_reference_run("delta_rule", base_in, n_base, NULL, 0, out, 2, 0), LACS_OK);
    static output_set f32;
    make_outputs(&f32, "delta_rule", base_in, n_base, LACS_F32);
    cr_assert_eq(lacs_reference_run("delta_rule", base_in, n_base, NULL, 0, f32.view, f32.n, 0), LACS_OK);
}

Test(ops_errors, the_references_own_validation_applies)
{
    static input_set s;
    static output_set o;
    const lacs_op_info *info = lacs_op_find("gated_delta_rule");
    make_inputs(&s, info, 0, 0, 9); /* q k v beta g */
    add_input(&s, "gk", 9);
    lacs_tensor *in = views(&s, LACS_F32);
    make_outputs(&o, "gated_delta_rule", in, s.n, LACS_F64);
    expect_error(lacs_reference_run("gated_delta_rule", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_INPUT,
                 "gated_delta_rule", "gk");
    cr_assert(strstr(lacs_last_error(), "g"));
    /* neither is an error too; exactly one runs */
    cr_assert_eq(lacs_reference_run("gated_delta_rule", in, s.n - 2, NULL, 0, o.view, o.n, 0),
                 LACS_ERR_INPUT);
    cr_assert_eq(lacs_reference_run("gated_delta_rule", in, s.n - 1, NULL, 0, o.view, o.n, 0), LACS_OK, "%s",
                 lacs_last_error());
    /* a value out of the reference's domain: softcap with cap = 0 (its default) */
    make_inputs(&s, lacs_op_find("softcap"), 0, 0, 9);
    in = views(&s, LACS_F32);
    make_outputs(&o, "softcap", in, s.n, LACS_F64);
    expect_error(lacs_reference_run("softcap", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_PARAM, "softcap",
                 "cap");
    lacs_param cap = {"cap", 1};
    cr_assert_eq(lacs_reference_run("softcap", in, s.n, &cap, 1, o.view, o.n, 0), LACS_OK);
    /* beta < 0 for PaTH */
    make_inputs(&s, lacs_op_find("path_attn"), 0, 0, 9);
    find_tin(&s, "beta")->values[3] = -0.5;
    in = views(&s, LACS_F32);
    make_outputs(&o, "path_attn", in, s.n, LACS_F64);
    expect_error(lacs_reference_run("path_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_ERR_PARAM,
                 "path_attn", "beta");
    find_tin(&s, "beta")->values[3] = 0.5;
    in = views(&s, LACS_F32);
    cr_assert_eq(lacs_reference_run("path_attn", in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK);
}

/* ---- output shapes ---- */

static void shapes_of(const char *op, input_set *s, lacs_output_shape *sh, int *n)
{
    lacs_tensor *in = views(s, LACS_F32);
    int rc = lacs_reference_output_shapes(op, in, s->n, sh, n);
    cr_assert_eq(rc, LACS_OK, "%s: %s", op, lacs_last_error());
}

static const lacs_output_shape *named(const lacs_output_shape *sh, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(sh[i].name, name) == 0)
            return &sh[i];
    return NULL;
}

static void expect_shape(const lacs_output_shape *o, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    cr_assert_not_null(o);
    const int64_t want[4] = {d0, d1, d2, d3};
    cr_assert_eq(o->ndim, ndim, "'%s'", o->name);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(o->shape[i], want[i], "'%s' dim %d", o->name, i);
}

Test(ops_shapes, weight_gradients_only_with_a_weight)
{
    static input_set s;
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n;
    const char *vjps[] = {"dyt_vjp", "dyisru_vjp", "rmsnorm_vjp"};
    for (int k = 0; k < 3; k++) {
        make_inputs(&s, lacs_op_find(vjps[k]), 1, 0, 1); /* with weight */
        shapes_of(vjps[k], &s, sh, &n);
        expect_shape(named(sh, n, "dx"), 2, 3, 4, 0, 0);
        expect_shape(named(sh, n, "dweight"), 1, 4, 0, 0, 0);
        if (k < 2) {
            expect_shape(named(sh, n, "dbias"), 1, 4, 0, 0, 0);
            expect_shape(named(sh, n, k == 0 ? "dalpha" : "dC"), 1, 1, 0, 0, 0);
        } else {
            cr_assert_null(named(sh, n, "dbias"), "rmsnorm has no bias");
        }
        make_inputs(&s, lacs_op_find(vjps[k]), 0, 0, 1); /* without */
        shapes_of(vjps[k], &s, sh, &n);
        expect_shape(named(sh, n, "dx"), 2, 3, 4, 0, 0);
        cr_assert_null(named(sh, n, "dweight"), "%s: dweight without a weight", vjps[k]);
        cr_assert_null(named(sh, n, "dbias"), "%s: dbias without a weight", vjps[k]);
        cr_assert_eq(n, k < 2 ? 2 : 1, "%s", vjps[k]);
    }
    /* the forward ops give y only, with or without weight and bias */
    make_inputs(&s, lacs_op_find("dyt"), 1, 0, 1);
    shapes_of("dyt", &s, sh, &n);
    cr_assert_eq(n, 1);
    expect_shape(named(sh, n, "y"), 2, 3, 4, 0, 0);
    make_inputs(&s, lacs_op_find("softcap_vjp"), 0, 0, 1);
    shapes_of("softcap_vjp", &s, sh, &n);
    cr_assert_eq(n, 2);
    expect_shape(named(sh, n, "dcap"), 1, 1, 0, 0, 0);
}

Test(ops_shapes, states_by_family)
{
    static input_set s;
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n, count;
    const lacs_op_info *ops = lacs_ops(&count);
    for (int i = 0; i < count; i++) {
        if (ops[i].family == LACS_FAMILY_NORM || ops[i].family == LACS_FAMILY_VJP)
            continue;
        for (int varlen = 0; varlen <= 1; varlen++) {
            make_inputs(&s, &ops[i], 1, varlen, 1); /* B = 2 (fixed) or N = 3 (varlen), HV 2, K 4, V 3 */
            shapes_of(ops[i].name, &s, sh, &n);
            const int64_t rows = varlen ? 3 : 2;
            expect_shape(named(sh, n, "o"), 4, s.B, 5, 2, 3);
            if (ops[i].family == LACS_FAMILY_ATTENTION) {
                cr_assert_eq(n, 1, "%s: an attention op has no state", ops[i].name);
                cr_assert_null(named(sh, n, "ht"));
            } else if (ops[i].family == LACS_FAMILY_RECURRENT) {
                cr_assert_eq(n, 2, "%s", ops[i].name);
                expect_shape(named(sh, n, "ht"), 4, rows, 2, 4, 3);
                cr_assert_null(named(sh, n, "ht_kk"));
            } else {
                cr_assert_eq(n, 3, "%s", ops[i].name);
                expect_shape(named(sh, n, "ht"), 4, rows, 2, 4, 3);
                expect_shape(named(sh, n, "ht_kk"), 4, rows, 2, 4, 4);
            }
        }
    }
}

Test(ops_shapes, varlen_state_has_one_row_per_sequence)
{
    static input_set s;
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n;
    const lacs_op_info *info = lacs_op_find("linear_attn");
    for (int64_t len = 1; len <= 6; len++) {
        seq_sizes(&s, 1);
        s.N = len - 1;
        add_input(&s, "q", 1);
        add_input(&s, "k", 1);
        add_input(&s, "v", 1);
        add_input(&s, "cu_seqlens", 1);
        shapes_of(info->name, &s, sh, &n);
        expect_shape(named(sh, n, "ht"), 4, len - 1, 2, 4, 3);
    }
}

/* The VJPs of the ops on sequences (SPEC.md 4.19): d<x> for each input x
 * given, with x's shape, in the order of the op's outputs; none for an input
 * not given (dgk without gk, dh0 without h0), none for the cotangents. */
Test(ops_shapes, a_gradient_for_each_input_given)
{
    static input_set s;
    lacs_output_shape sh[LACS_OPS_MAX_OUTPUTS];
    int n;
    const lacs_op_info *info = lacs_op_find("gated_delta_rule_vjp");
    cr_assert_eq(lacs_op_forward(info), lacs_op_find("gated_delta_rule"));
    cr_assert_null(lacs_op_forward(lacs_op_find("gated_delta_rule")));
    cr_assert_null(lacs_op_forward(lacs_op_find("dyt_vjp")), "a norm's VJP is not an op on sequences' VJP");
    make_inputs(&s, info, 1, 0, 1); /* q k v beta do g h0 dht */
    shapes_of(info->name, &s, sh, &n);
    const char *want[] = {"dq", "dk", "dv", "dbeta", "dg", "dh0"};
    cr_assert_eq(n, 6);
    for (int i = 0; i < n; i++) {
        cr_assert_str_eq(sh[i].name, want[i]);
        const tin *x = find_tin(&s, want[i] + 1);
        cr_assert_not_null(x);
        cr_assert_eq(sh[i].ndim, x->ndim, "%s", want[i]);
        for (int d = 0; d < x->ndim; d++)
            cr_assert_eq(sh[i].shape[d], x->shape[d], "%s", want[i]);
    }
    cr_assert_null(named(sh, n, "dgk"));
    cr_assert_null(named(sh, n, "ddo"));
    cr_assert_null(named(sh, n, "ddht"));
    make_inputs(&s, info, 0, 0, 1); /* q k v beta do g: no h0, no dh0 */
    shapes_of(info->name, &s, sh, &n);
    cr_assert_eq(n, 5);
    cr_assert_null(named(sh, n, "dh0"));
}

Test(ops_errors, a_vjp_without_its_cotangent)
{
    static input_set s;
    static output_set o;
    const lacs_op_info *info = lacs_op_find("delta_rule_vjp");
    make_inputs(&s, info, 1, 0, 2);
    lacs_tensor *in = views(&s, LACS_F32);
    make_outputs(&o, info->name, in, s.n, LACS_F64);
    cr_assert_eq(lacs_reference_run(info->name, in, s.n, NULL, 0, o.view, o.n, 0), LACS_OK, "%s", lacs_last_error());
    /* the wrong thing: `do` left out */
    int kept = 0;
    for (int i = 0; i < s.n; i++)
        if (strcmp(in[i].name, "do") != 0)
            in[kept++] = in[i];
    expect_error(lacs_reference_run(info->name, in, kept, NULL, 0, o.view, o.n, 0), LACS_ERR_INPUT, "delta_rule_vjp",
                 "'do' is required");
}
