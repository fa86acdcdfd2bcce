/* The gradients of the ops on sequences (SPEC.md 4.19):
 *   vjp_central       every gradient of every op equals central differences of
 *                     the long double forward pass of L = sum do (.) o + sum dht (.) ht,
 *                     with gates, varlen (an empty sequence), h0, dht, GVA
 *                     (G = 2), K != V and beta near 2; wrong gradients fail it;
 *   vjp_forms         second routes to the same gradients: the test-time-
 *                     training view (H5, H6, H8: the step's adjoint is
 *                     I - lr times the Hessian of its loss), fla #104 (GDN with
 *                     g = 0 is DeltaNet, gradients included), H8's mapping
 *                     (Comba's gradient is GDN's through the chain rule), the
 *                     state carry run backwards (SPEC.md 11.5);
 *   vjp_long_double   double against long double (SPEC.md 5.2);
 *   vjp_errors        cotangents and gradients that do not fit the op.
 * Each tolerance check is paired with a deliberately wrong gradient that the
 * same check rejects. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

/* Central differences of the long double forward pass (the five-point
 * stencil of central_difference below), normwise per gradient. Measured:
 * <= 7.4e-11 (EFLA with ||k|| = 1e-4, whose dv of size 1e-4 is a small
 * difference of O(1) losses), <= 6.3e-13 elsewhere; the bound leaves a
 * margin of 100. Wrong gradients miss by more than 1e-2 (measured >= 0.25). */
#define VJP_CD_BOUND 1e-8
#define VJP_WRONG_BY 1e-2
/* The double gradients against the same code in long double, normwise per
 * gradient (SPEC.md 5.2), the forward's bound: measured <= 1.7e-15 at
 * T = 200 and 1.2e-15 at T = 1000. */
#define VJP_LONG_DOUBLE_BOUND LONG_DOUBLE_BOUND

enum {
    IN_BETA = 1u << 0, IN_G = 1u << 1, IN_GK = 1u << 2, IN_G_GAMMA = 1u << 3, IN_H0 = 1u << 4, IN_W = 1u << 5,
    UNIT_K = 1u << 8,    /* k L2-normalised */
    BETA_NEAR_2 = 1u << 9, /* beta in [1.9, 2) */
    STRONG_G = 1u << 10, /* g, gk in [-8, -2] */
    TINY_K = 1u << 11,   /* k of norm about 1e-4 (EFLA's series) */
    VARLEN = 1u << 12,   /* cu_seqlens {0, 3, 3, T}: three sequences, one empty */
};

typedef int (*fwd_ld_fn)(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht);
typedef int (*vjp_fn)(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, const lacs_ref_grads *gr);
typedef int (*vjp_ld_fn)(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,
                         const lacs_ref_grads_ld *gr);

static int softmax_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_softmax_attn_ld(d, in, o);
}
static int fox_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_fox_ld(d, in, o);
}
static int path_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_path_attn_ld(d, in, o);
}
#define DELTAFORMER(F, NAME)                                                                                     \
    static int deltaformer_##NAME##_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht) \
    {                                                                                                            \
        (void)ht;                                                                                                \
        return lacs_ref_deltaformer_ld(d, in, F, o);                                                             \
    }                                                                                                            \
    static int deltaformer_##NAME##_vjp(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct,    \
                                        const lacs_ref_grads *gr)                                                \
    {                                                                                                            \
        return lacs_ref_deltaformer_vjp(d, in, F, ct, gr);                                                       \
    }                                                                                                            \
    static int deltaformer_##NAME##_vjp_ld(const lacs_dims *d, const lacs_inputs *in, const lacs_cotangents *ct, \
                                           const lacs_ref_grads_ld *gr)                                          \
    {                                                                                                            \
        return lacs_ref_deltaformer_vjp_ld(d, in, F, ct, gr);                                                    \
    }
DELTAFORMER(LACS_DELTAFORMER_EXP, exp)
DELTAFORMER(LACS_DELTAFORMER_SOFTMAX, softmax)
DELTAFORMER(LACS_DELTAFORMER_FLA, fla)

typedef struct {
    const char *name;
    unsigned inputs;
    int stateful;
    fwd_ld_fn forward_ld;
    vjp_fn vjp;
    vjp_ld_fn vjp_ld;
    double k_scale; /* k normal times this (when not UNIT_K) */
} vjp_op;

static const vjp_op ops[] = {
    {"linear_attn", IN_H0, 1, lacs_ref_linear_attn_ld, lacs_ref_linear_attn_vjp, lacs_ref_linear_attn_vjp_ld, 0.5},
    {"retention", IN_H0 | IN_G_GAMMA, 1, lacs_ref_retention_ld, lacs_ref_retention_vjp, lacs_ref_retention_vjp_ld,
     0.5},
    {"simple_gla", IN_H0 | IN_G, 1, lacs_ref_simple_gla_ld, lacs_ref_simple_gla_vjp, lacs_ref_simple_gla_vjp_ld, 0.5},
    {"simple_gla (strong)", IN_H0 | IN_G | STRONG_G, 1, lacs_ref_simple_gla_ld, lacs_ref_simple_gla_vjp,
     lacs_ref_simple_gla_vjp_ld, 0.5},
    {"gla", IN_H0 | IN_GK, 1, lacs_ref_gla_ld, lacs_ref_gla_vjp, lacs_ref_gla_vjp_ld, 0.5},
    {"delta_rule", IN_H0 | IN_BETA | UNIT_K, 1, lacs_ref_delta_rule_ld, lacs_ref_delta_rule_vjp,
     lacs_ref_delta_rule_vjp_ld, 1},
    {"delta_rule (beta near 2)", IN_H0 | IN_BETA | UNIT_K | BETA_NEAR_2, 1, lacs_ref_delta_rule_ld,
     lacs_ref_delta_rule_vjp, lacs_ref_delta_rule_vjp_ld, 1},
    {"delta_rule (raw k)", IN_H0 | IN_BETA, 1, lacs_ref_delta_rule_ld, lacs_ref_delta_rule_vjp,
     lacs_ref_delta_rule_vjp_ld, 0.4},
    {"gated_delta_rule (g)", IN_H0 | IN_BETA | IN_G | UNIT_K, 1, lacs_ref_gated_delta_rule_ld,
     lacs_ref_gated_delta_rule_vjp, lacs_ref_gated_delta_rule_vjp_ld, 1},
    {"gated_delta_rule (g, beta near 2)", IN_H0 | IN_BETA | IN_G | UNIT_K | BETA_NEAR_2, 1,
     lacs_ref_gated_delta_rule_ld, lacs_ref_gated_delta_rule_vjp, lacs_ref_gated_delta_rule_vjp_ld, 1},
    {"gated_delta_rule (g, strong)", IN_H0 | IN_BETA | IN_G | UNIT_K | STRONG_G, 1, lacs_ref_gated_delta_rule_ld,
     lacs_ref_gated_delta_rule_vjp, lacs_ref_gated_delta_rule_vjp_ld, 1},
    {"gated_delta_rule (gk)", IN_H0 | IN_BETA | IN_GK | UNIT_K, 1, lacs_ref_gated_delta_rule_ld,
     lacs_ref_gated_delta_rule_vjp, lacs_ref_gated_delta_rule_vjp_ld, 1},
    {"comba", IN_H0 | IN_BETA | IN_G | UNIT_K, 1, lacs_ref_comba_ld, lacs_ref_comba_vjp, lacs_ref_comba_vjp_ld, 1},
    {"efla", IN_H0 | IN_BETA, 1, lacs_ref_efla_ld, lacs_ref_efla_vjp, lacs_ref_efla_vjp_ld, 0.45},
    {"efla (large k)", IN_H0 | IN_BETA, 1, lacs_ref_efla_ld, lacs_ref_efla_vjp, lacs_ref_efla_vjp_ld, 2},
    {"efla (tiny k)", IN_H0 | IN_BETA | TINY_K, 1, lacs_ref_efla_ld, lacs_ref_efla_vjp, lacs_ref_efla_vjp_ld, 1},
    {"softmax_attn", 0, 0, softmax_ld, lacs_ref_softmax_attn_vjp, lacs_ref_softmax_attn_vjp_ld, 1},
    {"fox (g)", IN_G, 0, fox_ld, lacs_ref_fox_vjp, lacs_ref_fox_vjp_ld, 1},
    {"fox (g_gamma, ALiBi)", IN_G_GAMMA, 0, fox_ld, lacs_ref_fox_vjp, lacs_ref_fox_vjp_ld, 1},
    {"path_attn", IN_W | IN_BETA | BETA_NEAR_2, 0, path_ld, lacs_ref_path_attn_vjp, lacs_ref_path_attn_vjp_ld, 1},
    {"path_attn (g)", IN_W | IN_BETA | IN_G, 0, path_ld, lacs_ref_path_attn_vjp, lacs_ref_path_attn_vjp_ld, 1},
    {"deltaformer (exp)", IN_BETA, 0, deltaformer_exp_ld, deltaformer_exp_vjp, deltaformer_exp_vjp_ld, 0.5},
    {"deltaformer (softmax)", IN_BETA, 0, deltaformer_softmax_ld, deltaformer_softmax_vjp,
     deltaformer_softmax_vjp_ld, 1},
    {"deltaformer (fla)", IN_BETA, 0, deltaformer_fla_ld, deltaformer_fla_vjp, deltaformer_fla_vjp_ld, 1},
    {"deltaformer (fla, no beta)", 0, 0, deltaformer_fla_ld, deltaformer_fla_vjp, deltaformer_fla_vjp_ld, 1},
};
#define N_OPS (sizeof ops / sizeof ops[0])

/* ---- problems ---- */

enum { N_TENSORS = 9 };
static const char *const tensor_names[N_TENSORS] = {"q", "k", "v", "beta", "g", "gk", "g_gamma", "h0", "w"};

typedef struct {
    lacs_dims d;
    lacs_inputs in;
    lacs_cotangents ct;
    double *x[N_TENSORS];  /* the inputs by tensor_names, NULL where absent */
    int64_t n[N_TENSORS];  /* their element counts */
    double *dout, *dht;
    int64_t cu[4];
    int64_t n_o, n_ht;
} problem;

static double *draw(lacs_rng *r, int64_t n, double lo, double hi, int normal)
{
    double *x = malloc((size_t)(n + 1) * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = normal ? lo * lacs_rng_normal12(r) : lacs_rng_range(r, lo, hi);
    return x;
}

static void normalise_rows(double *x, int64_t rows, int64_t width, double radius)
{
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < width; c++)
            s += x[r * width + c] * x[r * width + c];
        for (int64_t c = 0; c < width; c++)
            x[r * width + c] *= radius / sqrt(s);
    }
}

static int64_t problem_T = 9;

/* B = 1 (varlen) or 2, T = problem_T (9), H = 1, HV = 2 (G = 2), K = 4, V = 3. */
static void problem_make(problem *p, const vjp_op *op, unsigned extra, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    const unsigned f = op->inputs | extra;
    lacs_dims d = {.B = f & VARLEN ? 1 : 2, .T = problem_T, .H = 1, .HV = 2, .K = 4, .V = 3};
    if (f & VARLEN) {
        const int64_t cu[4] = {0, problem_T / 3, problem_T / 3, problem_T};
        memcpy(p->cu, cu, sizeof cu);
        d.cu_seqlens = p->cu;
        d.N = 3;
    }
    const int64_t N = f & VARLEN ? 3 : d.B, BT = d.B * d.T;
    lacs_rng r = lacs_rng_seed(seed);
    p->n[0] = p->n[1] = p->n[8] = BT * d.H * d.K;
    p->n[2] = BT * d.HV * d.V;
    p->n[3] = p->n[4] = BT * d.HV;
    p->n[5] = BT * d.HV * d.K;
    p->n[6] = d.HV;
    p->n[7] = N * d.HV * d.K * d.V;
    p->x[0] = draw(&r, p->n[0], 1, 0, 1);
    p->x[1] = draw(&r, p->n[1], op->k_scale, 0, 1);
    if (f & UNIT_K)
        normalise_rows(p->x[1], BT * d.H, d.K, 1);
    if (f & TINY_K)
        normalise_rows(p->x[1], BT * d.H, d.K, 1e-4);
    p->x[2] = draw(&r, p->n[2], 1, 0, 1);
    if (f & IN_BETA)
        p->x[3] = f & BETA_NEAR_2 ? draw(&r, p->n[3], 1.9, 2, 0) : draw(&r, p->n[3], 0.05, 1, 0);
    const double g_lo = f & STRONG_G ? -8 : -0.5, g_hi = f & STRONG_G ? -2 : 0;
    if (f & IN_G)
        p->x[4] = draw(&r, p->n[4], g_lo, g_hi, 0);
    if (f & IN_GK)
        p->x[5] = draw(&r, p->n[5], g_lo, g_hi, 0);
    if (f & IN_G_GAMMA)
        p->x[6] = draw(&r, p->n[6], -0.3, -0.05, 0);
    if (f & IN_H0)
        p->x[7] = draw(&r, p->n[7], 0.5, 0, 1);
    if (f & IN_W) {
        p->x[8] = draw(&r, p->n[8], 1, 0, 1);
        normalise_rows(p->x[8], BT * d.H, d.K, 1);
    }
    p->n_o = BT * d.HV * d.V;
    p->n_ht = op->stateful ? N * d.HV * d.K * d.V : 0;
    p->dout = draw(&r, p->n_o, 1, 0, 1);
    p->dht = op->stateful ? draw(&r, p->n_ht + 1, 0.7, 0, 1) : NULL;
    p->d = d;
    p->in = (lacs_inputs){.q = p->x[0], .k = p->x[1], .v = p->x[2], .beta = p->x[3], .g = p->x[4], .gk = p->x[5],
                          .g_gamma = p->x[6], .h0 = p->x[7], .w = p->x[8], .scale = 0.6};
    p->ct = (lacs_cotangents){.dout = p->dout, .dht = p->dht};
}

static void problem_free(problem *p)
{
    for (int i = 0; i < N_TENSORS; i++)
        free(p->x[i]);
    free(p->dout);
    free(p->dht);
}

/* Gradients in double, one array per input (NULL where absent). */
typedef struct {
    double *dx[N_TENSORS];
} gradients;

static lacs_ref_grads grads_view(const problem *p, gradients *g)
{
    for (int i = 0; i < N_TENSORS; i++)
        g->dx[i] = p->x[i] ? calloc((size_t)p->n[i] + 1, sizeof(double)) : NULL;
    return (lacs_ref_grads){.dq = g->dx[0], .dk = g->dx[1], .dv = g->dx[2], .dbeta = g->dx[3], .dg = g->dx[4],
                            .dgk = g->dx[5], .dg_gamma = g->dx[6], .dh0 = g->dx[7], .dw = g->dx[8]};
}

static void grads_free(gradients *g)
{
    for (int i = 0; i < N_TENSORS; i++)
        free(g->dx[i]);
}

static gradients reference_vjp(const vjp_op *op, const problem *p, const lacs_cotangents *ct)
{
    gradients g;
    lacs_ref_grads view = grads_view(p, &g);
    int rc = op->vjp(&p->d, &p->in, ct, &view);
    cr_assert_eq(rc, LACS_OK, "%s: %s", op->name, lacs_last_error());
    return g;
}

/* ---- central differences ---- */

static long double loss_ld(const vjp_op *op, const problem *p)
{
    long double *o = calloc((size_t)p->n_o + 1, sizeof *o), *ht = calloc((size_t)p->n_ht + 1, sizeof *ht);
    int rc = op->forward_ld(&p->d, &p->in, o, op->stateful ? ht : NULL);
    cr_assert_eq(rc, LACS_OK, "%s: %s", op->name, lacs_last_error());
    long double sum = 0;
    for (int64_t i = 0; i < p->n_o; i++)
        sum += p->dout[i] * o[i];
    for (int64_t i = 0; i < p->n_ht; i++)
        sum += p->dht[i] * ht[i];
    free(o);
    free(ht);
    return sum;
}

/* The five-point stencil (-L(2h) + 8 L(h) - 8 L(-h) + L(-2h)) / (12 h), h a
 * power of two near 1e-4 max(1, |x|), so that x +- h and x +- 2h are exact:
 * truncation h^4 |L^(5)| / 30 and rounding eps_ld |L| / h are both near
 * 1e-15 relative. */
static double central_difference(const vjp_op *op, problem *p, double *slot)
{
    const double saved = *slot, h = ldexp(1, ilogb(fmax(1, fabs(saved))) - 13);
    long double at[4];
    const double offsets[4] = {-2, -1, 1, 2};
    for (int i = 0; i < 4; i++) {
        *slot = saved + offsets[i] * h;
        at[i] = loss_ld(op, p);
    }
    *slot = saved;
    return (double)((at[0] - 8 * at[1] + 8 * at[2] - at[3]) / (12 * (long double)h));
}

static gradients numeric_vjp(const vjp_op *op, problem *p)
{
    gradients g;
    grads_view(p, &g);
    for (int i = 0; i < N_TENSORS; i++)
        for (int64_t e = 0; p->x[i] && e < p->n[i]; e++)
            g.dx[i][e] = central_difference(op, p, &p->x[i][e]);
    return g;
}

static double tensor_error(const double *x, const double *ref, int64_t n)
{
    return lacs_normwise_error(x, ref, 1, 1, 1, n, NULL, 0, NULL);
}

/* The worst normwise error over the gradients of the inputs; *which names it. */
static double worst_error(const problem *p, const gradients *got, const gradients *want, const char **which)
{
    double worst = 0;
    *which = "-";
    for (int i = 0; i < N_TENSORS; i++) {
        if (!p->x[i])
            continue;
        const double e = tensor_error(got->dx[i], want->dx[i], p->n[i]);
        if (isnan(e) || e > worst) {
            worst = isnan(e) ? INFINITY : e;
            *which = tensor_names[i];
        }
    }
    return worst;
}

static double measured_worst;

static void check_op_against_central_differences(const vjp_op *op, unsigned extra, uint64_t seed)
{
    problem p;
    problem_make(&p, op, extra, seed);
    gradients want = numeric_vjp(op, &p), got = reference_vjp(op, &p, &p.ct);
    const char *which;
    const double err = worst_error(&p, &got, &want, &which);
    if (err > measured_worst)
        measured_worst = err;
    if (getenv("LACS_VJP_VERBOSE"))
        cr_log_info("%s%s: d%s %.3e", op->name, extra & VARLEN ? " (varlen)" : "", which, err);
    cr_expect(err <= VJP_CD_BOUND, "%s%s: d%s differs from central differences by %.3e", op->name,
              extra & VARLEN ? " (varlen)" : "", which, err);
    grads_free(&want);
    grads_free(&got);
    problem_free(&p);
}

Test(vjp_central, every_gradient_of_every_op)
{
    for (size_t i = 0; i < N_OPS; i++) {
        check_op_against_central_differences(&ops[i], 0, 100 + i);
        check_op_against_central_differences(&ops[i], VARLEN, 200 + i);
    }
    cr_log_info("worst error against central differences: %.3e", measured_worst);
}

/* The check can fail: gradients that are wrong in the ways kernels get them
 * wrong miss by far more than its bound. */
static double wrong_by(const vjp_op *op, unsigned extra, void (*spoil)(const problem *p, gradients *g, problem *q))
{
    problem p;
    problem_make(&p, op, extra, 7);
    gradients want = numeric_vjp(op, &p), got = reference_vjp(op, &p, &p.ct);
    spoil(&p, &got, &p);
    const char *which;
    const double err = worst_error(&p, &got, &want, &which);
    grads_free(&want);
    grads_free(&got);
    problem_free(&p);
    return err;
}

/* dht ignored: the gradient of o alone */
static void spoil_dht(const problem *p, gradients *g, problem *q)
{
    (void)q;
    lacs_cotangents no_dht = {.dout = p->dout};
    const vjp_op *op = &ops[5]; /* delta_rule */
    grads_free(g);
    *g = reference_vjp(op, p, &no_dht);
}

/* the gate's gradient taken with respect to the factor exp(g), not the log */
static void spoil_factor(const problem *p, gradients *g, problem *q)
{
    (void)q;
    for (int64_t i = 0; i < p->n[4]; i++)
        g->dx[4][i] /= exp(p->x[4][i]);
}

/* dh0 missing */
static void spoil_dh0(const problem *p, gradients *g, problem *q)
{
    (void)q;
    memset(g->dx[7], 0, (size_t)p->n[7] * sizeof(double));
}

/* dq without scale */
static void spoil_scale(const problem *p, gradients *g, problem *q)
{
    (void)q;
    for (int64_t i = 0; i < p->n[0]; i++)
        g->dx[0][i] /= p->in.scale;
}

Test(vjp_central, wrong_gradients_are_rejected)
{
    const double dht = wrong_by(&ops[5], 0, spoil_dht);
    const double factor = wrong_by(&ops[8], 0, spoil_factor);
    const double dh0 = wrong_by(&ops[5], VARLEN, spoil_dh0);
    const double scale = wrong_by(&ops[16], 0, spoil_scale);
    cr_log_info("wrong gradients miss by: dht ignored %.3g, dg of the factor %.3g, dh0 missing %.3g, "
                "dq without scale %.3g", dht, factor, dh0, scale);
    cr_expect(dht > VJP_WRONG_BY && factor > VJP_WRONG_BY && dh0 > VJP_WRONG_BY && scale > VJP_WRONG_BY);
}

/* ---- second routes ---- */

/* fla #104, with gradients: the gated delta rule with g = 0 is the delta rule,
 * and in the reference its gradients are bit for bit the delta rule's. */
Test(vjp_forms, gated_delta_rule_with_g_zero_is_the_delta_rule)
{
    problem p;
    problem_make(&p, &ops[8], VARLEN, 31); /* gated_delta_rule (g) */
    for (int64_t i = 0; i < p.n[4]; i++)
        p.x[4][i] = 0;
    gradients gated = reference_vjp(&ops[8], &p, &p.ct);
    p.in.g = NULL;
    double *dg = gated.dx[4];
    gated.dx[4] = NULL;
    free(p.x[4]);
    p.x[4] = NULL;
    gradients plain = reference_vjp(&ops[5], &p, &p.ct);
    for (int i = 0; i < N_TENSORS; i++)
        if (plain.dx[i])
            cr_expect_eq(memcmp(plain.dx[i], gated.dx[i], (size_t)p.n[i] * sizeof(double)), 0, "d%s differs",
                         tensor_names[i]);
    free(dg);
    grads_free(&gated);
    grads_free(&plain);
    problem_free(&p);
}

/* H8's mapping both ways, differentiated: Comba(gamma, eta, w) =
 * GDN(alpha = gamma, beta = eta / gamma, v = gamma w) (SPEC.md 4.6), so with
 * g = log gamma the chain rule gives Comba's gradients from GDN's:
 * dw = gamma dv', deta = dbeta' / gamma, dg = dg' + v' . dv' - beta' dbeta',
 * dq, dk, dh0 unchanged. */
Test(vjp_forms, comba_is_gated_delta_rule_through_h8)
{
    problem p;
    problem_make(&p, &ops[12], 0, 41); /* comba */
    const lacs_dims *d = &p.d;
    gradients comba = reference_vjp(&ops[12], &p, &p.ct);
    double *v_gdn = malloc((size_t)p.n[2] * sizeof(double)), *beta_gdn = malloc((size_t)p.n[3] * sizeof(double));
    for (int64_t r = 0; r < d->B * d->T * d->HV; r++) {
        const double gamma = exp(p.x[4][r]);
        beta_gdn[r] = p.x[3][r] / gamma;
        for (int64_t c = 0; c < d->V; c++)
            v_gdn[r * d->V + c] = gamma * p.x[2][r * d->V + c];
    }
    problem gdn = p;
    gdn.in.v = gdn.x[2] = v_gdn;
    gdn.in.beta = gdn.x[3] = beta_gdn;
    gradients via = reference_vjp(&ops[8], &gdn, &gdn.ct);
    double worst = 0;
    for (int64_t r = 0; r < d->B * d->T * d->HV; r++) {
        const double gamma = exp(p.x[4][r]);
        double dg = via.dx[4][r] - beta_gdn[r] * via.dx[3][r];
        for (int64_t c = 0; c < d->V; c++) {
            dg += v_gdn[r * d->V + c] * via.dx[2][r * d->V + c];
            via.dx[2][r * d->V + c] *= gamma;
        }
        via.dx[4][r] = dg;
        via.dx[3][r] /= gamma;
    }
    for (int i = 0; i < N_TENSORS; i++)
        if (comba.dx[i]) {
            const double e = tensor_error(comba.dx[i], via.dx[i], p.n[i]);
            worst = e > worst ? e : worst;
        }
    cr_log_info("comba against GDN through H8: %.3e", worst);
    cr_expect(worst <= FORMS_BOUND, "Comba's gradients differ from GDN's through H8 by %.3e", worst);
    /* the wrong thing: without the chain rule's beta' dbeta' term */
    for (int64_t r = 0; r < d->B * d->T * d->HV; r++)
        via.dx[4][r] += beta_gdn[r] * via.dx[3][r] * exp(p.x[4][r]);
    cr_expect(tensor_error(comba.dx[4], via.dx[4], p.n[4]) > VJP_WRONG_BY);
    grads_free(&comba);
    grads_free(&via);
    free(v_gdn);
    free(beta_gdn);
    problem_free(&p);
}

/* The test-time-training view (H5, H6, H8; SPEC.md 4.9): one step of the op is
 * h1 = h0 - lr grad_h L(h0), L the step's loss (lacs_ref_ttt_loss). With
 * do = 0 and dht = X the op's gradients are those of
 * F = <X, h0 - lr grad_h L(h0; k, v, gamma)>, a function of h0, k, v, the rate
 * and the decay written with the loss alone. F is evaluated in long double
 * with grad_h L by five-point differences (exact for L quadratic in h, up to
 * rounding), and differentiated by five-point differences again: a route that
 * shares nothing with the adjoint but the loss's definition. */
typedef struct {
    lacs_ttt_loss_kind kind;
    long double h0[12], k[4], v[3], gamma, lr;
    long double X[12];
} ttt_point;

enum { TK = 4, TV = 3 };

static long double ttt_loss(const ttt_point *t, const long double *h)
{
    return lacs_ref_ttt_loss_ld(t->kind, TK, TV, h, t->k, t->v, t->gamma, t->lr);
}

static long double stencil(long double (*f)(const ttt_point *, long double *, int), const ttt_point *t,
                           long double *slot, long double step, int depth)
{
    const long double saved = *slot, offsets[4] = {-2, -1, 1, 2};
    long double at[4];
    for (int i = 0; i < 4; i++) {
        *slot = saved + offsets[i] * step;
        at[i] = f(t, slot, depth);
    }
    *slot = saved;
    return (at[0] - 8 * at[1] + 8 * at[2] - at[3]) / (12 * step);
}

static long double loss_at(const ttt_point *t, long double *unused, int depth)
{
    (void)unused;
    (void)depth;
    return ttt_loss(t, t->h0);
}

/* F = <X, h0> - lr <X, grad_h L(h0)> */
static long double step_loss(const ttt_point *t, long double *unused, int depth)
{
    (void)unused;
    (void)depth;
    ttt_point u = *t;
    long double inner = 0, outer = 0;
    for (int i = 0; i < TK * TV; i++) {
        outer += t->X[i] * t->h0[i];
        inner += t->X[i] * stencil(loss_at, &u, &u.h0[i], 0x1p-8L, 1);
    }
    return outer - t->lr * inner;
}

static long double dF(ttt_point *t, long double *slot)
{
    return stencil(step_loss, t, slot, 0x1p-8L, 0);
}

static void check_ttt_view(const char *op_name, lacs_ttt_loss_kind kind, uint64_t seed)
{
    const vjp_op *op = NULL;
    for (size_t i = 0; i < N_OPS; i++)
        if (strcmp(ops[i].name, op_name) == 0)
            op = &ops[i];
    cr_assert_not_null(op);
    lacs_rng r = lacs_rng_seed(seed);
    double q[TK], k[TK], v[TV], h0[TK * TV], X[TK * TV], dout[TV] = {0}, beta = 0.7, g = -0.3;
    for (int i = 0; i < TK; i++)
        q[i] = lacs_rng_normal12(&r), k[i] = 0.5 * lacs_rng_normal12(&r);
    for (int i = 0; i < TV; i++)
        v[i] = lacs_rng_normal12(&r);
    for (int i = 0; i < TK * TV; i++)
        h0[i] = 0.5 * lacs_rng_normal12(&r), X[i] = lacs_rng_normal12(&r);
    const int has_beta = kind == LACS_TTT_DELTA || kind == LACS_TTT_COMBA;
    const int has_gamma = kind == LACS_TTT_RETENTION || kind == LACS_TTT_COMBA;
    lacs_dims d = {.B = 1, .T = 1, .H = 1, .HV = 1, .K = TK, .V = TV};
    lacs_inputs in = {.q = q, .k = k, .v = v, .h0 = h0, .scale = 0.5, .beta = has_beta ? &beta : NULL,
                      .g = kind == LACS_TTT_COMBA ? &g : NULL, .g_gamma = kind == LACS_TTT_RETENTION ? &g : NULL};
    lacs_cotangents ct = {.dout = dout, .dht = X};
    double dq[TK], dk[TK], dv[TV], dh0[TK * TV], dbeta = 0, dgate = 0;
    lacs_ref_grads gr = {.dq = dq, .dk = dk, .dv = dv, .dh0 = dh0, .dbeta = has_beta ? &dbeta : NULL,
                         .dg = kind == LACS_TTT_COMBA ? &dgate : NULL,
                         .dg_gamma = kind == LACS_TTT_RETENTION ? &dgate : NULL};
    cr_assert_eq(op->vjp(&d, &in, &ct, &gr), LACS_OK, "%s", lacs_last_error());

    ttt_point t = {.kind = kind, .gamma = has_gamma ? expl((long double)g) : 1, .lr = has_beta ? beta : 1};
    for (int i = 0; i < TK; i++)
        t.k[i] = k[i];
    for (int i = 0; i < TV; i++)
        t.v[i] = v[i];
    for (int i = 0; i < TK * TV; i++)
        t.h0[i] = h0[i], t.X[i] = X[i];
    double want_h0[TK * TV], want_k[TK], want_v[TV];
    for (int i = 0; i < TK * TV; i++)
        want_h0[i] = (double)dF(&t, &t.h0[i]);
    for (int i = 0; i < TK; i++)
        want_k[i] = (double)dF(&t, &t.k[i]);
    for (int i = 0; i < TV; i++)
        want_v[i] = (double)dF(&t, &t.v[i]);
    double worst = fmax(tensor_error(dh0, want_h0, TK * TV), fmax(tensor_error(dk, want_k, TK), tensor_error(dv, want_v, TV)));
    if (has_beta) { /* the rate: Comba's eta is also inside its regulariser */
        const double want = (double)dF(&t, &t.lr);
        worst = fmax(worst, tensor_error(&dbeta, &want, 1));
    }
    if (has_gamma) { /* d/dg = gamma d/dgamma */
        const double want = (double)(t.gamma * dF(&t, &t.gamma));
        worst = fmax(worst, tensor_error(&dgate, &want, 1));
    }
    cr_log_info("%s against the TTT view: %.3e", op_name, worst);
    cr_expect(worst <= 1e-9, "%s: the adjoint of one step differs from the TTT view's by %.3e", op_name, worst);
    /* the wrong thing: the Hessian term left out of dh0 (dh0 = X; right only
     * for linear attention, whose loss is linear in h) */
    if (kind != LACS_TTT_LINEAR)
        cr_expect(tensor_error(X, want_h0, TK * TV) > VJP_WRONG_BY, "%s", op_name);
}

Test(vjp_forms, one_step_is_sgd_on_the_ttt_loss)
{
    check_ttt_view("linear_attn", LACS_TTT_LINEAR, 51);
    check_ttt_view("retention", LACS_TTT_RETENTION, 52);
    check_ttt_view("delta_rule", LACS_TTT_DELTA, 53);
    check_ttt_view("comba", LACS_TTT_COMBA, 54);
}

/* The state carry run backwards (SPEC.md 11.5): the second part first, from
 * dht, gives the cotangent of the state at the split; fed to the first part as
 * its dht it gives the whole sequence's gradients. */
Test(vjp_forms, state_carry_backwards)
{
    const vjp_op *op = &ops[8]; /* gated_delta_rule (g) */
    problem whole;
    problem_make(&whole, op, 0, 61);
    const lacs_dims *d = &whole.d;
    const int64_t split = 4, T = d->T, rest = T - split;
    gradients all = reference_vjp(op, &whole, &whole.ct);
    /* the state after `split` tokens, by the forward */
    problem first = whole, second = whole;
    first.d.T = split;
    second.d.T = rest;
    double *part[2][N_TENSORS + 1] = {{0}};
    const int per_token[N_TENSORS] = {1, 1, 1, 1, 1, 1, 0, 0, 1};
    for (int i = 0; i < N_TENSORS; i++) {
        if (!whole.x[i] || !per_token[i])
            continue;
        const int64_t inner = whole.n[i] / (d->B * T);
        for (int s = 0; s < 2; s++) {
            const int64_t t0 = s ? split : 0, len = s ? rest : split;
            part[s][i] = malloc((size_t)(d->B * len * inner) * sizeof(double));
            for (int64_t b = 0; b < d->B; b++)
                memcpy(part[s][i] + b * len * inner, whole.x[i] + (b * T + t0) * inner, (size_t)(len * inner) * sizeof(double));
            (s ? &second : &first)->x[i] = part[s][i];
            (s ? &second : &first)->n[i] = d->B * len * inner;
        }
    }
    const int64_t vo = d->HV * d->V;
    double *dout1 = malloc((size_t)(d->B * split * vo) * sizeof(double)), *dout2 = malloc((size_t)(d->B * rest * vo) * sizeof(double));
    for (int64_t b = 0; b < d->B; b++) {
        memcpy(dout1 + b * split * vo, whole.dout + b * T * vo, (size_t)(split * vo) * sizeof(double));
        memcpy(dout2 + b * rest * vo, whole.dout + (b * T + split) * vo, (size_t)(rest * vo) * sizeof(double));
    }
    double *h_split = malloc((size_t)whole.n[7] * sizeof(double)), *o1 = malloc((size_t)(d->B * split * vo) * sizeof(double));
    for (int s = 0; s < 2; s++) {
        problem *pp = s ? &second : &first;
        pp->in = whole.in;
        pp->in.q = pp->x[0], pp->in.k = pp->x[1], pp->in.v = pp->x[2], pp->in.beta = pp->x[3], pp->in.g = pp->x[4];
    }
    cr_assert_eq(lacs_ref_gated_delta_rule(&first.d, &first.in, o1, h_split), LACS_OK);
    second.in.h0 = second.x[7] = h_split;
    lacs_cotangents ct2 = {.dout = dout2, .dht = whole.dht};
    gradients g2 = reference_vjp(op, &second, &ct2);
    lacs_cotangents ct1 = {.dout = dout1, .dht = g2.dx[7]};
    gradients g1 = reference_vjp(op, &first, &ct1);
    double worst = tensor_error(g1.dx[7], all.dx[7], whole.n[7]);
    for (int i = 0; i < N_TENSORS; i++) {
        if (!per_token[i] || !whole.x[i])
            continue;
        const int64_t inner = whole.n[i] / (d->B * T);
        double *joined = malloc((size_t)whole.n[i] * sizeof(double));
        for (int64_t b = 0; b < d->B; b++) {
            memcpy(joined + b * T * inner, g1.dx[i] + b * split * inner, (size_t)(split * inner) * sizeof(double));
            memcpy(joined + (b * T + split) * inner, g2.dx[i] + b * rest * inner, (size_t)(rest * inner) * sizeof(double));
        }
        worst = fmax(worst, tensor_error(joined, all.dx[i], whole.n[i]));
        free(joined);
    }
    cr_log_info("the backward state carry against the whole sequence: %.3e", worst);
    cr_expect(worst <= FORMS_BOUND, "the two parts differ from the whole by %.3e", worst);
    /* the wrong thing: the first part run without the carried cotangent */
    lacs_cotangents dropped = {.dout = dout1};
    gradients g0 = reference_vjp(op, &first, &dropped);
    cr_expect(tensor_error(g0.dx[7], all.dx[7], whole.n[7]) > VJP_WRONG_BY);
    grads_free(&g0);
    grads_free(&g1);
    grads_free(&g2);
    grads_free(&all);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < N_TENSORS; i++)
            free(part[s][i]);
    free(dout1);
    free(dout2);
    free(h_split);
    free(o1);
    problem_free(&whole);
}

/* ---- double against long double (SPEC.md 5.2) ---- */

static double ld_error(const vjp_op *op, const problem *p)
{
    gradients g = reference_vjp(op, p, &p->ct);
    long double *ld[N_TENSORS] = {0};
    for (int i = 0; i < N_TENSORS; i++)
        ld[i] = p->x[i] ? calloc((size_t)p->n[i] + 1, sizeof(long double)) : NULL;
    lacs_ref_grads_ld view = {.dq = ld[0], .dk = ld[1], .dv = ld[2], .dbeta = ld[3], .dg = ld[4], .dgk = ld[5],
                              .dg_gamma = ld[6], .dh0 = ld[7], .dw = ld[8]};
    cr_assert_eq(op->vjp_ld(&p->d, &p->in, &p->ct, &view), LACS_OK, "%s", lacs_last_error());
    double worst = 0;
    for (int i = 0; i < N_TENSORS; i++) {
        if (!ld[i])
            continue;
        double *rounded = malloc((size_t)(p->n[i] + 1) * sizeof(double));
        for (int64_t e = 0; e < p->n[i]; e++)
            rounded[e] = (double)ld[i][e];
        const double err = tensor_error(g.dx[i], rounded, p->n[i]);
        worst = isnan(err) || err > worst ? err : worst;
        free(rounded);
        free(ld[i]);
    }
    grads_free(&g);
    return worst;
}

static void check_long_double(int64_t T, int recurrent_only, uint64_t seed)
{
    problem_T = T;
    double worst = 0;
    for (size_t i = 0; i < N_OPS; i++) {
        if (recurrent_only && !ops[i].stateful)
            continue;
        problem p;
        problem_make(&p, &ops[i], VARLEN, seed + i);
        const double err = ld_error(&ops[i], &p);
        worst = fmax(worst, err);
        cr_expect(err <= VJP_LONG_DOUBLE_BOUND, "%s at T = %lld: double vs long double %.3e", ops[i].name,
                  (long long)T, err);
        problem_free(&p);
    }
    problem_T = 9;
    cr_log_info("double against long double at T = %lld: %.3e", (long long)T, worst);
}

Test(vjp_long_double, agrees_at_T_200) { check_long_double(200, 0, 300); }
Test(vjp_long_double, agrees_at_T_1000) { check_long_double(1000, 1, 400); }

/* The check can fail: a gradient off by 1e-11 relative is caught. */
Test(vjp_long_double, rejects_a_gradient_off_by_1e_11)
{
    problem p;
    problem_make(&p, &ops[5], 0, 9);
    gradients g = reference_vjp(&ops[5], &p, &p.ct);
    long double *dk = calloc((size_t)p.n[1], sizeof(long double));
    lacs_ref_grads_ld view = {.dk = dk};
    cr_assert_eq(ops[5].vjp_ld(&p.d, &p.in, &p.ct, &view), LACS_OK);
    double *rounded = malloc((size_t)p.n[1] * sizeof(double));
    for (int64_t e = 0; e < p.n[1]; e++)
        rounded[e] = (double)(dk[e] * (1 + 1e-11L));
    cr_expect(tensor_error(g.dx[1], rounded, p.n[1]) > VJP_LONG_DOUBLE_BOUND);
    free(rounded);
    free(dk);
    grads_free(&g);
    problem_free(&p);
}
