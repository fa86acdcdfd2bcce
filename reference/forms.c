/* The catalog of equivalent forms (lacs/forms.h): every identity between two
 * forms that the source documents state, as a pair of functions that must give
 * the same o and final state. Some "other" forms are an op run on mapped
 * inputs (H8's GDN <-> Comba mapping, E5's beta -> c); those wrappers are here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/compare.h"
#include "lacs/forms.h"
#include "lacs/prng.h"
#include "lacs/reference.h"
#include "lacs/reference_ld.h"

/* ---- problems ---- */

static int64_t seq_count(const lacs_dims *d) { return d->cu_seqlens ? d->N : d->B; }

int64_t lacs_problem_o_size(const lacs_problem *p)
{
    return p->dims.B * p->dims.T * p->dims.HV * p->dims.V;
}

int64_t lacs_problem_state_size(const lacs_problem *p)
{
    return seq_count(&p->dims) * p->dims.HV * p->dims.K * p->dims.V;
}

static double *take(lacs_problem *p, int slot, int64_t n)
{
    p->owned[slot] = malloc((size_t)(n + 1) * sizeof(double));
    return p->owned[slot];
}

int lacs_problem_make(lacs_problem *p, const lacs_dims *dims, unsigned inputs, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->dims = *dims;
    const lacs_dims *d = &p->dims;
    const int64_t BT = d->B * d->T;
    lacs_rng rng = lacs_rng_seed(seed);
    double *q = take(p, 0, BT * d->H * d->K), *k = take(p, 1, BT * d->H * d->K);
    double *v = take(p, 2, BT * d->HV * d->V);
    if (!q || !k || !v)
        goto oom;
    for (int64_t i = 0; i < BT * d->H * d->K; i++) {
        q[i] = lacs_rng_normal12(&rng);
        k[i] = lacs_rng_normal12(&rng);
    }
    for (int64_t i = 0; i < BT * d->HV * d->V; i++)
        v[i] = lacs_rng_normal12(&rng);
    if (inputs & LACS_PROBLEM_UNIT_K)
        lacs_ref_l2norm(k, BT * d->H, d->K, 0, LACS_L2NORM_MAX_EPS, k);
    p->in.q = q;
    p->in.k = k;
    p->in.v = v;
    p->in.scale = 1 / sqrt((double)d->K);
    if (inputs & LACS_PROBLEM_BETA) {
        double *beta = take(p, 3, BT * d->HV);
        if (!beta)
            goto oom;
        for (int64_t i = 0; i < BT * d->HV; i++)
            beta[i] = (inputs & LACS_PROBLEM_BETA_TO_2 ? 2 : 1) * lacs_rng_uniform(&rng);
        p->in.beta = beta;
    }
    if (inputs & LACS_PROBLEM_G) {
        double *g = take(p, 4, BT * d->HV);
        if (!g)
            goto oom;
        for (int64_t i = 0; i < BT * d->HV; i++)
            g[i] = -0.5 * lacs_rng_uniform(&rng);
        p->in.g = g;
    }
    if (inputs & LACS_PROBLEM_GK) {
        double *gk = take(p, 5, BT * d->HV * d->K);
        if (!gk)
            goto oom;
        for (int64_t i = 0; i < BT * d->HV * d->K; i++)
            gk[i] = -0.5 * lacs_rng_uniform(&rng);
        p->in.gk = gk;
    }
    if (inputs & LACS_PROBLEM_G_GAMMA) {
        double *gg = take(p, 6, d->HV);
        if (!gg)
            goto oom;
        for (int64_t h = 0; h < d->HV; h++)
            gg[h] = lacs_retnet_log_decay(h % 8);
        p->in.g_gamma = gg;
    }
    if (inputs & LACS_PROBLEM_H0) {
        const int64_t n = lacs_problem_state_size(p);
        double *h0 = take(p, 7, n);
        if (!h0)
            goto oom;
        for (int64_t i = 0; i < n; i++)
            h0[i] = 0.5 * lacs_rng_normal12(&rng);
        p->in.h0 = h0;
    }
    if (inputs & LACS_PROBLEM_W) {
        double *w = take(p, 8, BT * d->H * d->K);
        if (!w)
            goto oom;
        for (int64_t i = 0; i < BT * d->H * d->K; i++)
            w[i] = lacs_rng_normal12(&rng);
        lacs_ref_l2norm(w, BT * d->H, d->K, 0, LACS_L2NORM_MAX_EPS, w);
        p->in.w = w;
    }
    if (inputs & LACS_PROBLEM_LAMBDA) {
        double *lambda = take(p, 9, d->HV * d->K);
        if (!lambda)
            goto oom;
        for (int64_t i = 0; i < d->HV * d->K; i++)
            lambda[i] = 0.25 + lacs_rng_uniform(&rng);
        p->in.lambda = lambda;
    }
    if (inputs & LACS_PROBLEM_H0_KK) {
        const int64_t K = d->K, n = seq_count(d) * d->HV;
        double *h0_kk = take(p, 10, n * K * K), *A = malloc((size_t)(K * K) * sizeof(double));
        if (!h0_kk || !A) {
            free(A);
            goto oom;
        }
        for (int64_t m = 0; m < n; m++) {
            for (int64_t i = 0; i < K * K; i++)
                A[i] = lacs_rng_normal12(&rng);
            for (int64_t i = 0; i < K; i++)
                for (int64_t j = 0; j < K; j++) {
                    double sum = 0;
                    for (int64_t c = 0; c < K; c++)
                        sum += A[i * K + c] * A[j * K + c];
                    h0_kk[(m * K + i) * K + j] = sum / (double)(2 * K);
                }
        }
        free(A);
        p->in.h0_kk = h0_kk;
    }
    return LACS_OK;
oom:
    lacs_problem_free(p);
    return LACS_ERR_MEMORY;
}

void lacs_problem_free(lacs_problem *p)
{
    for (size_t i = 0; i < sizeof p->owned / sizeof p->owned[0]; i++)
        free(p->owned[i]);
    memset(p, 0, sizeof *p);
}

/* ---- forms that are an op on mapped inputs ---- */

static int64_t gate_count(const lacs_dims *d) { return d->B * d->T * d->HV; }

/* H8: Comba(gamma, eta, w) = GDN(alpha = gamma, beta = eta / gamma, v = gamma w),
 * per token: gamma S + eta (w - S k) k^T = gamma S (I - (eta/gamma) k k^T)
 * + (eta/gamma) (gamma w) k^T. */
static int comba_as_gated_delta_rule(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    const int64_t n = gate_count(d);
    double *beta = malloc((size_t)(n + 1) * sizeof(double));
    double *v = malloc((size_t)(n * d->V + 1) * sizeof(double));
    int rc = LACS_ERR_MEMORY;
    if (beta && v) {
        for (int64_t i = 0; i < n; i++) {
            double gamma = exp(in->g[i]);
            beta[i] = in->beta[i] / gamma;
            for (int64_t c = 0; c < d->V; c++)
                v[i * d->V + c] = gamma * in->v[i * d->V + c];
        }
        lacs_inputs mapped = *in;
        mapped.beta = beta;
        mapped.v = v;
        rc = lacs_ref_gated_delta_rule(d, &mapped, o, ht);
    }
    free(beta);
    free(v);
    return rc;
}

/* fla #104: Gated DeltaNet with g = 0 exactly is DeltaNet. */
static int gated_delta_rule_zero_gate(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    double *g = calloc((size_t)(gate_count(d) + 1), sizeof(double));
    if (!g)
        return LACS_ERR_MEMORY;
    lacs_inputs mapped = *in;
    mapped.g = g;
    int rc = lacs_ref_gated_delta_rule(d, &mapped, o, ht);
    free(g);
    return rc;
}

/* A scalar decay is a per-channel decay equal in every channel: gk[..., c] = g. */
static double *broadcast_gate(const lacs_dims *d, const double *g)
{
    double *gk = malloc((size_t)(gate_count(d) * d->K + 1) * sizeof(double));
    for (int64_t i = 0; gk && i < gate_count(d); i++)
        for (int64_t c = 0; c < d->K; c++)
            gk[i * d->K + c] = g[i];
    return gk;
}

/* `op` run with gk = g broadcast over the key channels, g removed. */
static int with_broadcast_gate(lacs_op_fn op, const lacs_dims *d, const lacs_inputs *in, double *o,
                               double *ht)
{
    double *gk = broadcast_gate(d, in->g);
    if (!gk)
        return LACS_ERR_MEMORY;
    lacs_inputs mapped = *in;
    mapped.g = NULL;
    mapped.gk = gk;
    int rc = op(d, &mapped, o, ht);
    free(gk);
    return rc;
}

static int gla_with_broadcast_gate(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return with_broadcast_gate(lacs_ref_gla, d, in, o, ht);
}

static int kda_with_broadcast_gate(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return with_broadcast_gate(lacs_ref_gated_delta_rule, d, in, o, ht);
}

/* E5: EFLA is the delta rule with beta_t replaced by c_t = beta_t phi(beta_t ||k_t||^2). */
static int delta_rule_with_efla_coefficient(const lacs_dims *d, const lacs_inputs *in, double *o,
                                            double *ht)
{
    double *c = malloc((size_t)(gate_count(d) + 1) * sizeof(double));
    if (!c)
        return LACS_ERR_MEMORY;
    const int64_t group = d->HV / d->H;
    for (int64_t bt = 0; bt < d->B * d->T; bt++)
        for (int64_t hv = 0; hv < d->HV; hv++) {
            const double *k = in->k + (bt * d->H + hv / group) * d->K;
            double knorm2 = 0;
            for (int64_t i = 0; i < d->K; i++)
                knorm2 += k[i] * k[i];
            c[bt * d->HV + hv] = lacs_ref_efla_coefficient(in->beta[bt * d->HV + hv], knorm2);
        }
    lacs_inputs mapped = *in;
    mapped.beta = c;
    int rc = lacs_ref_delta_rule(d, &mapped, o, ht);
    free(c);
    return rc;
}

/* H3 is RMSNorm applied to H2's output (computed here through H9). */
static int postnorm_of_matrix_form(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    lacs_inputs plain = *in;
    int rc = lacs_ref_linear_attn_matrix(d, &plain, o, ht);
    for (int64_t row = 0; rc == LACS_OK && row < d->B * d->T * d->HV; row++) {
        double *x = o + row * d->V, sum_sq = 0;
        for (int64_t c = 0; c < d->V; c++)
            sum_sq += x[c] * x[c];
        double denom = sqrt(sum_sq / (double)d->V + in->eps);
        for (int64_t c = 0; c < d->V; c++)
            x[c] = denom > 0 ? x[c] / denom : 0;
    }
    return rc;
}

static int delta_rule_ut_whole(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return lacs_ref_delta_rule_ut(d, in, 0, o, ht);
}

static int delta_rule_ut_16(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return lacs_ref_delta_rule_ut(d, in, 16, o, ht);
}

static int delta_rule_ut_64(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return lacs_ref_delta_rule_ut(d, in, 64, o, ht);
}

static int softmax_attn(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_softmax_attn(d, in, o);
}

static int softmax_attn_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_softmax_attn_matrix(d, in, o);
}

static int softmax_attn_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_softmax_attn_ld(d, in, o);
}

/* ---- the attention forms (H10, H11, H12) and MesaNet (H15) ---- */

static int fox(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_fox(d, in, o);
}

static int fox_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_fox_matrix(d, in, o);
}

static int fox_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_fox_ld(d, in, o);
}

/* fox on a gate g [B, T, HV] given as `value(hv)` at every token. */
static int fox_with_constant_gate(const lacs_dims *d, const lacs_inputs *in, const double *per_head,
                                  double *o)
{
    double *g = malloc((size_t)(gate_count(d) + 1) * sizeof(double));
    if (!g)
        return LACS_ERR_MEMORY;
    for (int64_t i = 0; i < gate_count(d); i++)
        g[i] = per_head ? per_head[i % d->HV] : 0;
    lacs_inputs mapped = *in;
    mapped.g = g;
    mapped.g_gamma = NULL;
    int rc = lacs_ref_fox(d, &mapped, o);
    free(g);
    return rc;
}

/* H10: ALiBi is FoX with the gate g_t = g_gamma at every token. */
static int fox_alibi_as_gate(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return fox_with_constant_gate(d, in, in->g_gamma, o);
}

/* H10 with Gamma = M is H1: FoX with g = 0 is softmax attention. */
static int fox_zero_gate(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return fox_with_constant_gate(d, in, NULL, o);
}

static int deltaformer_exp(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer(d, in, LACS_DELTAFORMER_EXP, o);
}

static int deltaformer_exp_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_matrix(d, in, LACS_DELTAFORMER_EXP, o);
}

static int deltaformer_exp_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_ld(d, in, LACS_DELTAFORMER_EXP, o);
}

static int deltaformer_softmax(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer(d, in, LACS_DELTAFORMER_SOFTMAX, o);
}

static int deltaformer_softmax_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_matrix(d, in, LACS_DELTAFORMER_SOFTMAX, o);
}

static int deltaformer_softmax_neumann(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_neumann(d, in, LACS_DELTAFORMER_SOFTMAX, d->T > 0 ? d->T : 1, o);
}

static int deltaformer_softmax_ld(const lacs_dims *d, const lacs_inputs *in, long double *o,
                                  long double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_ld(d, in, LACS_DELTAFORMER_SOFTMAX, o);
}

static int deltaformer_fla(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer(d, in, LACS_DELTAFORMER_FLA, o);
}

static int deltaformer_fla_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_matrix(d, in, LACS_DELTAFORMER_FLA, o);
}

static int deltaformer_fla_neumann(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_neumann(d, in, LACS_DELTAFORMER_FLA, d->T > 0 ? d->T : 1, o);
}

static int deltaformer_fla_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_deltaformer_ld(d, in, LACS_DELTAFORMER_FLA, o);
}

static int path_attn(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_path_attn(d, in, o);
}

static int path_attn_recursive(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_path_attn_recursive(d, in, o);
}

static int path_attn_matrix(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    (void)ht;
    return lacs_ref_path_attn_matrix(d, in, o);
}

static int path_attn_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    (void)ht;
    return lacs_ref_path_attn_ld(d, in, o);
}

/* MesaNet's key-key state ht_kk is compared by tests/test_attention.c. */
static int mesa_net(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return lacs_ref_mesa_net(d, in, o, ht, NULL);
}

static int mesa_net_parallel(const lacs_dims *d, const lacs_inputs *in, double *o, double *ht)
{
    return lacs_ref_mesa_net_parallel(d, in, o, ht, NULL);
}

static int mesa_net_ld(const lacs_dims *d, const lacs_inputs *in, long double *o, long double *ht)
{
    return lacs_ref_mesa_net_ld(d, in, o, ht, NULL);
}

/* ---- the catalog ---- */

enum {
    PLAIN = LACS_PROBLEM_H0,
    DELTA = LACS_PROBLEM_BETA | LACS_PROBLEM_UNIT_K | LACS_PROBLEM_H0,
    ATTN = LACS_PROBLEM_STATELESS,
    PATH = LACS_PROBLEM_STATELESS | LACS_PROBLEM_W | LACS_PROBLEM_BETA | LACS_PROBLEM_BETA_TO_2,
    MESA = LACS_PROBLEM_LAMBDA | LACS_PROBLEM_BETA | LACS_PROBLEM_H0 | LACS_PROBLEM_H0_KK
};

static const lacs_form_pair pairs[] = {
    {"linear_attn", "matrix form ((QK^T) (.) M)V", "H2 = H9", PLAIN,
     lacs_ref_linear_attn, lacs_ref_linear_attn_matrix, lacs_ref_linear_attn_ld, 0},
    {"linear_attn_postnorm", "RMSNorm of the matrix form", "H3", PLAIN,
     lacs_ref_linear_attn_postnorm, postnorm_of_matrix_form, lacs_ref_linear_attn_postnorm_ld, 0},
    {"retention", "matrix form ((QK^T) (.) Gamma)V", "H4 = H9", PLAIN | LACS_PROBLEM_G_GAMMA,
     lacs_ref_retention, lacs_ref_retention_matrix, lacs_ref_retention_ld, 0},
    {"simple_gla", "matrix form ((QK^T) (.) Gamma)V", "H4 = H9", PLAIN | LACS_PROBLEM_G,
     lacs_ref_simple_gla, lacs_ref_simple_gla_matrix, lacs_ref_simple_gla_ld, 0},
    {"simple_gla", "gla with gk = g in every channel", "H4", PLAIN | LACS_PROBLEM_G,
     lacs_ref_simple_gla, gla_with_broadcast_gate, lacs_ref_simple_gla_ld, 0},
    {"gla", "matrix form, Gamma per key channel", "H4 = H9", PLAIN | LACS_PROBLEM_GK,
     lacs_ref_gla, lacs_ref_gla_matrix, lacs_ref_gla_ld, 0},
    {"delta_rule", "UT form, one chunk", "H6 = H7", DELTA,
     lacs_ref_delta_rule, delta_rule_ut_whole, lacs_ref_delta_rule_ld, 0},
    {"delta_rule", "UT form, chunks of 16", "H6 = H7", DELTA,
     lacs_ref_delta_rule, delta_rule_ut_16, lacs_ref_delta_rule_ld, 0},
    {"delta_rule", "UT form, chunks of 64", "H6 = H7", DELTA,
     lacs_ref_delta_rule, delta_rule_ut_64, lacs_ref_delta_rule_ld, 0},
    {"delta_rule", "matrix form", "H6 = H9", DELTA,
     lacs_ref_delta_rule, lacs_ref_delta_rule_matrix, lacs_ref_delta_rule_ld, 0},
    {"delta_rule", "gated_delta_rule with g = 0 (fla #104)", "H6 = H8", DELTA,
     lacs_ref_delta_rule, gated_delta_rule_zero_gate, lacs_ref_delta_rule_ld, 0},
    {"gated_delta_rule", "matrix form ((QK^T)(.)Gamma)(I+(KK^T)(.)(Gamma-I))^-1 V",
     "H8 = H9", DELTA | LACS_PROBLEM_G,
     lacs_ref_gated_delta_rule, lacs_ref_gated_delta_rule_matrix, lacs_ref_gated_delta_rule_ld, 0},
    {"gated_delta_rule", "KDA with gk = g in every channel", "H8", DELTA | LACS_PROBLEM_G,
     lacs_ref_gated_delta_rule, kda_with_broadcast_gate, lacs_ref_gated_delta_rule_ld, 0},
    {"gated_delta_rule (gk, KDA)", "matrix form, Gamma per key channel", "H8 = H9",
     DELTA | LACS_PROBLEM_GK,
     lacs_ref_gated_delta_rule, lacs_ref_gated_delta_rule_matrix, lacs_ref_gated_delta_rule_ld, 0},
    {"comba", "gated_delta_rule with beta / gamma and gamma v", "H8 (GDN <-> Comba)",
     DELTA | LACS_PROBLEM_G,
     lacs_ref_comba, comba_as_gated_delta_rule, lacs_ref_comba_ld, 0},
    {"efla", "ODE step with dense e^X and psi(X)", "E5 = E4", LACS_PROBLEM_BETA | PLAIN,
     lacs_ref_efla, lacs_ref_efla_ode, lacs_ref_efla_ld, 0},
    {"efla", "delta_rule with beta replaced by c", "E5 = E1", LACS_PROBLEM_BETA | PLAIN,
     lacs_ref_efla, delta_rule_with_efla_coefficient, lacs_ref_efla_ld, 0},
    {"softmax_attn", "matrix form (exp(QK^T) (.) M)V / (exp(QK^T) (.) M)1", "H1",
     LACS_PROBLEM_STATELESS, softmax_attn, softmax_attn_matrix, softmax_attn_ld, 0},
    {"softmax_attn", "fox with g = 0", "H1 = H10", ATTN, softmax_attn, fox_zero_gate, softmax_attn_ld, 0},
    {"fox", "matrix form, prefix sums of g", "H10", ATTN | LACS_PROBLEM_G, fox, fox_matrix, fox_ld, 0},
    {"fox (g_gamma, ALiBi)", "matrix form, G_i = i g_gamma", "H10", ATTN | LACS_PROBLEM_G_GAMMA,
     fox, fox_matrix, fox_ld, 0},
    {"fox (g_gamma, ALiBi)", "fox with g = g_gamma at every token", "H10", ATTN | LACS_PROBLEM_G_GAMMA,
     fox, fox_alibi_as_gate, fox_ld, 0},
    /* the unnormalised form's error grows with T (SPEC.md 4.11): up to T = 200 */
    {"deltaformer (exp)", "matrix form A (I + B)^-1 V", "H11", ATTN | LACS_PROBLEM_BETA,
     deltaformer_exp, deltaformer_exp_matrix, deltaformer_exp_ld, 200},
    {"deltaformer (softmax)", "matrix form A (I + B)^-1 V", "H11", ATTN | LACS_PROBLEM_BETA,
     deltaformer_softmax, deltaformer_softmax_matrix, deltaformer_softmax_ld, 0},
    {"deltaformer (softmax)", "Neumann series, T terms", "H11", ATTN | LACS_PROBLEM_BETA,
     deltaformer_softmax, deltaformer_softmax_neumann, deltaformer_softmax_ld, 200},
    {"deltaformer (fla)", "matrix form A (I + B)^-1 V", "H11", ATTN | LACS_PROBLEM_BETA,
     deltaformer_fla, deltaformer_fla_matrix, deltaformer_fla_ld, 0},
    {"deltaformer (fla)", "Neumann series, T terms", "H11", ATTN | LACS_PROBLEM_BETA,
     deltaformer_fla, deltaformer_fla_neumann, deltaformer_fla_ld, 200},
    {"path_attn", "recursion R_ij = H_i R_{i-1,j}", "H12", PATH,
     path_attn, path_attn_recursive, path_attn_ld, 200},
    {"path_attn", "matrix form with T = (I + (WW^T)(.)(M-I))^-1", "H12", PATH,
     path_attn, path_attn_matrix, path_attn_ld, 200},
    {"path_attn (g, PaTH-FoX)", "matrix form with T = (I + (WW^T)(.)(M-I))^-1", "H12",
     PATH | LACS_PROBLEM_G, path_attn, path_attn_matrix, path_attn_ld, 200},
    {"mesa_net", "parallel form, H_t rebuilt at every t", "H15", MESA | LACS_PROBLEM_G,
     mesa_net, mesa_net_parallel, mesa_net_ld, 200},
    {"mesa_net (ungated)", "parallel form, H_t rebuilt at every t", "H15", MESA,
     mesa_net, mesa_net_parallel, mesa_net_ld, 200},
};

const lacs_form_pair *lacs_form_pairs(size_t *count)
{
    *count = sizeof pairs / sizeof pairs[0];
    return pairs;
}

/* ---- comparing ---- */

static double worst_error(const lacs_problem *p, const double *o1, const double *o2,
                          const double *h1, const double *h2, int stateful)
{
    const lacs_dims *d = &p->dims;
    double err = lacs_normwise_error(o2, o1, d->B, d->T, d->HV, d->V, d->cu_seqlens, d->N, NULL);
    if (stateful) {
        double err_h = lacs_normwise_error(h2, h1, seq_count(d), 1, d->HV, d->K * d->V, NULL, 0, NULL);
        if (isnan(err_h) || err_h > err)
            err = err_h;
    }
    return err;
}

double lacs_forms_error(lacs_op_fn first, lacs_op_fn second, const lacs_problem *p, int stateful)
{
    const int64_t no = lacs_problem_o_size(p), nh = lacs_problem_state_size(p);
    double *o1 = calloc((size_t)(no + 1), sizeof(double)), *o2 = calloc((size_t)(no + 1), sizeof(double));
    double *h1 = calloc((size_t)(nh + 1), sizeof(double)), *h2 = calloc((size_t)(nh + 1), sizeof(double));
    double err = NAN;
    if (o1 && o2 && h1 && h2 && first(&p->dims, &p->in, o1, stateful ? h1 : NULL) == LACS_OK &&
        second(&p->dims, &p->in, o2, stateful ? h2 : NULL) == LACS_OK)
        err = worst_error(p, o1, o2, h1, h2, stateful);
    free(o1);
    free(o2);
    free(h1);
    free(h2);
    return err;
}

double lacs_forms_error_ld(lacs_op_fn op, lacs_op_fn_ld op_ld, const lacs_problem *p, int stateful)
{
    const int64_t no = lacs_problem_o_size(p), nh = lacs_problem_state_size(p);
    double *o1 = calloc((size_t)(no + 1), sizeof(double)), *o2 = calloc((size_t)(no + 1), sizeof(double));
    double *h1 = calloc((size_t)(nh + 1), sizeof(double)), *h2 = calloc((size_t)(nh + 1), sizeof(double));
    long double *o_ld = calloc((size_t)(no + 1), sizeof(long double));
    long double *h_ld = calloc((size_t)(nh + 1), sizeof(long double));
    double err = NAN;
    if (o1 && o2 && h1 && h2 && o_ld && h_ld &&
        op(&p->dims, &p->in, o1, stateful ? h1 : NULL) == LACS_OK &&
        op_ld(&p->dims, &p->in, o_ld, stateful ? h_ld : NULL) == LACS_OK) {
        /* rounding the long double result to double adds at most 2^-53 relative,
         * far below what this measures (<= 1e-13) */
        for (int64_t i = 0; i < no; i++)
            o2[i] = (double)o_ld[i];
        for (int64_t i = 0; i < nh; i++)
            h2[i] = (double)h_ld[i];
        err = worst_error(p, o2, o1, h2, h1, stateful);
    }
    free(o1);
    free(o2);
    free(h1);
    free(h2);
    free(o_ld);
    free(h_ld);
    return err;
}
