/* A plain fp32 backward of every op on sequences, for the zoo (SPEC.md
 * 4.19, 11.6): the adjoint token by token, in the other loop order and the
 * other layout (the papers' state S = h^T, [V][K], rows by value column),
 * every value in binary32. The attention forms: FlashAttention's backward
 * (the forward's log-sum-exp kept, D_i = do_i . o_i, then the key blocks'
 * dk and dv column by column and dq row by row); PaTH and DeltaFormer the
 * adjoint of their recursions. Built with -DZOO_FMA=1 as backward_f32_fma.
 *
 * Bugs, by LACS_ZOO_BUG (tests/zoo/BUGS.md), each the smallest plausible
 * change: dh0_missing, dht_ignored, dbeta_no_erase, dq_no_scale,
 * dgate_as_factor, vjp_group_not_reduced and varlen_backward_no_reset (in
 * backward.h's driver). An unknown bug name is an error. */
#include "backward.h"

static const char member[] = "backward_f32";
static const char *const known_bugs[] = {"none", "dh0_missing", "dht_ignored", "dbeta_no_erase", "dq_no_scale",
                                         "dgate_as_factor", "vjp_group_not_reduced", "varlen_backward_no_reset"};

/* ---- the recurrent family, in S = h^T ---- */

enum { LINEAR = 0, DELTA = 1, COMBA = 2, EFLA = 3 };

/* EFLA's c = beta phi(beta n) and its derivatives in binary32: dc/dbeta =
 * e^{-x}, dc/dn = beta^2 phi'(x), phi' by its series below 1/2. */
static float efla_c(float beta, float n, float *dc_dbeta, float *dc_dn)
{
    const float x = beta * n;
    const float phi = fabsf(x) < 1e-4f ? 1 - x / 2 + x * x / 6 : -expm1f(-x) / x;
    float dphi;
    if (fabsf(x) < 0.5f) {
        dphi = 0;
        for (int m = 12; m >= 1; m--) { /* Horner from the top: m (-1)^m / (m+1)! */
            float f = 1;
            for (int i = 2; i <= m + 1; i++)
                f *= (float)i;
            dphi = dphi * x + (m % 2 ? -(float)m : (float)m) / f;
        }
    } else {
        dphi = (expf(-x) + expm1f(-x) / x) / x;
    }
    *dc_dbeta = expf(-x);
    *dc_dn = beta * beta * dphi;
    return beta * phi;
}

static int recurrent(const bw_head *s, bw_grads *g, void *context)
{
    const int kind = *(const int *)context;
    const int64_t T = s->T, K = s->K, V = s->V;
    float *S = malloc((size_t)((T + 1) * V * K) * sizeof *S), *dS = malloc((size_t)(V * K) * sizeof *dS);
    float *u = malloc((size_t)V * sizeof *u), *p = malloc((size_t)V * sizeof *p), *du = malloc((size_t)V * sizeof *du);
    float *coef = malloc((size_t)(T + 1) * sizeof *coef), *dcb = malloc((size_t)(T + 1) * sizeof *dcb);
    float *dcn = malloc((size_t)(T + 1) * sizeof *dcn);
    if (!S || !dS || !u || !p || !du || !coef || !dcb || !dcn) {
        free(S), free(dS), free(u), free(p), free(du), free(coef), free(dcb), free(dcn);
        return BW_ERR_MEMORY;
    }
    for (int64_t j = 0; j < V; j++) /* S_0 = h0^T */
        for (int64_t c = 0; c < K; c++)
            S[j * K + c] = s->h0[c * V + j];
    for (int64_t t = 0; t < T; t++) { /* the forward, keeping S after each token at S + (t + 1) V K */
        const float *prev = S + t * V * K, *k = s->k + t * K, *v = s->v + t * V;
        float *next = S + (t + 1) * V * K;
        coef[t] = kind == LINEAR ? 1 : s->beta[t];
        dcb[t] = 1, dcn[t] = 0;
        if (kind == EFLA) {
            float n = 0;
            for (int64_t c = 0; c < K; c++)
                n = bw_madd(k[c], k[c], n);
            coef[t] = efla_c(s->beta[t], n, &dcb[t], &dcn[t]);
        }
        for (int64_t j = 0; j < V; j++) {
            float pj = 0;
            for (int64_t c = 0; c < K; c++) {
                const float decay = s->gate ? expf(s->gate[t * K + c]) : 1;
                const float d = kind == COMBA ? prev[j * K + c] : prev[j * K + c] * decay; /* Comba reads h_{t-1} */
                next[j * K + c] = prev[j * K + c] * decay;
                pj = bw_madd(d, k[c], pj);
            }
            const float uj = kind == LINEAR ? v[j] : coef[t] * (v[j] - pj);
            for (int64_t c = 0; c < K; c++)
                next[j * K + c] = bw_madd(uj, k[c], next[j * K + c]);
        }
    }
    for (int64_t j = 0; j < V; j++)
        for (int64_t c = 0; c < K; c++)
            dS[j * K + c] = bw_bug("dht_ignored") ? 0 : s->dht[c * V + j];
    const float dq_scale = bw_bug("dq_no_scale") ? 1 : s->scale;
    for (int64_t t = T - 1; t >= 0; t--) {
        const float *prev = S + t * V * K, *now = S + (t + 1) * V * K;
        const float *q = s->q + t * K, *k = s->k + t * K, *v = s->v + t * V, *d = s->dout + t * V;
        float *dq = g->dq + t * K, *dk = g->dk + t * K;
        /* o_t = scale S_t q_t */
        for (int64_t j = 0; j < V; j++)
            for (int64_t c = 0; c < K; c++) {
                dq[c] = bw_madd(dq_scale * now[j * K + c], d[j], dq[c]);
                dS[j * K + c] = bw_madd(s->scale * d[j], q[c], dS[j * K + c]);
            }
        /* S_t = D S_{t-1} + u k^T (the correction p from D S_{t-1}, or from S_{t-1} for Comba) */
        float dcoef = 0;
        for (int64_t j = 0; j < V; j++) {
            float pj = 0, duj = 0;
            for (int64_t c = 0; c < K; c++) {
                const float decay = s->gate ? expf(s->gate[t * K + c]) : 1;
                pj = bw_madd(kind == COMBA ? prev[j * K + c] : prev[j * K + c] * decay, k[c], pj);
                duj = bw_madd(dS[j * K + c], k[c], duj);
            }
            p[j] = pj;
            du[j] = duj;
            u[j] = kind == LINEAR ? v[j] : coef[t] * (v[j] - pj);
            g->dv[t * V + j] = kind == LINEAR ? duj : coef[t] * duj;
            dcoef = bw_madd(duj, bw_bug("dbeta_no_erase") ? v[j] : v[j] - pj, dcoef);
        }
        for (int64_t j = 0; j < V; j++) {
            const float dp = kind == LINEAR ? 0 : -coef[t] * du[j];
            for (int64_t c = 0; c < K; c++) {
                const float decay = s->gate ? expf(s->gate[t * K + c]) : 1;
                const float read = kind == COMBA ? prev[j * K + c] : prev[j * K + c] * decay;
                dk[c] = bw_madd(dS[j * K + c], u[j], dk[c]);
                dk[c] = bw_madd(read, dp, dk[c]);
                if (kind == COMBA) {
                    g->dlog[t * K + c] = bw_madd(dS[j * K + c], prev[j * K + c] * decay, g->dlog[t * K + c]);
                    dS[j * K + c] = bw_madd(k[c], dp, decay * dS[j * K + c]);
                } else {
                    const float dread = bw_madd(k[c], dp, dS[j * K + c]);
                    g->dlog[t * K + c] = bw_madd(dread, read, g->dlog[t * K + c]);
                    dS[j * K + c] = decay * dread;
                }
            }
        }
        if (bw_bug("dgate_as_factor") && s->gate) /* dL/d exp(g), not dL/dg */
            for (int64_t c = 0; c < K; c++)
                g->dlog[t * K + c] /= expf(s->gate[t * K + c]);
        if (kind != LINEAR) {
            g->dbeta[t] = dcoef * dcb[t];
            for (int64_t c = 0; kind == EFLA && c < K; c++)
                dk[c] = bw_madd(2 * k[c], dcoef * dcn[t], dk[c]);
        }
    }
    for (int64_t c = 0; c < K && !bw_bug("dh0_missing"); c++)
        for (int64_t j = 0; j < V; j++)
            g->dh0[c * V + j] = dS[j * K + c];
    free(S), free(dS), free(u), free(p), free(du), free(coef), free(dcb), free(dcn);
    return 0;
}

/* ---- softmax attention and FoX: FlashAttention's backward ---- */

static float dot(int64_t n, const float *a, const float *b)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s = bw_madd(a[i], b[i], s);
    return s;
}

/* l_ij = scale q_i . k_j + (G_i - G_j), G the prefix sums of the gate in binary32. */
static int flash(const bw_head *s, bw_grads *g, void *context)
{
    (void)context;
    const int64_t T = s->T, K = s->K, V = s->V;
    float *G = malloc((size_t)(T + 1) * 4), *lse = malloc((size_t)(T + 1) * 4), *o = malloc((size_t)(T * V + 1) * 4);
    float *D = malloc((size_t)(T + 1) * 4), *dG = calloc((size_t)(T + 1), 4);
    if (!G || !lse || !o || !D || !dG) {
        free(G), free(lse), free(o), free(D), free(dG);
        return BW_ERR_MEMORY;
    }
    float run = 0;
    for (int64_t t = 0; t < T; t++)
        G[t] = run = s->gate ? run + s->gate[t * K] : 0;
    for (int64_t i = 0; i < T; i++) { /* the forward: online softmax, its log-sum-exp kept */
        float m = -INFINITY, den = 0;
        for (int64_t c = 0; c < V; c++)
            o[i * V + c] = 0;
        for (int64_t j = 0; j <= i; j++) {
            const float l = s->scale * dot(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]);
            const float m_new = fmaxf(m, l), shrink = expf(m - m_new), p = expf(l - m_new);
            den = bw_madd(den, shrink, p);
            for (int64_t c = 0; c < V; c++)
                o[i * V + c] = bw_madd(o[i * V + c], shrink, p * s->v[j * V + c]);
            m = m_new;
        }
        for (int64_t c = 0; c < V; c++)
            o[i * V + c] /= den;
        lse[i] = m + logf(den);
        D[i] = dot(V, s->dout + i * V, o + i * V);
    }
    const float dq_scale = bw_bug("dq_no_scale") ? 1 : s->scale;
    for (int64_t j = 0; j < T; j++) /* key by key: dk_j, dv_j; dq_i accumulated */
        for (int64_t i = j; i < T; i++) {
            const float l = s->scale * dot(K, s->q + i * K, s->k + j * K) + (G[i] - G[j]);
            const float p = expf(l - lse[i]);
            const float ds = p * (dot(V, s->dout + i * V, s->v + j * V) - D[i]);
            for (int64_t c = 0; c < V; c++)
                g->dv[j * V + c] = bw_madd(p, s->dout[i * V + c], g->dv[j * V + c]);
            for (int64_t c = 0; c < K; c++) {
                g->dk[j * K + c] = bw_madd(s->scale * ds, s->q[i * K + c], g->dk[j * K + c]);
                g->dq[i * K + c] = bw_madd(dq_scale * ds, s->k[j * K + c], g->dq[i * K + c]);
            }
            dG[i] += ds; /* l_ij holds G_i - G_j */
            dG[j] -= ds;
        }
    float rev = 0; /* g_s enters G_t for t >= s */
    for (int64_t t = T - 1; t >= 0; t--) {
        rev += dG[t];
        if (s->gate)
            g->dlog[t * K] = rev;
    }
    free(G), free(lse), free(o), free(D), free(dG);
    return 0;
}

/* ---- PaTH (H12): per key j, x_i = H_i x_{i-1} from x_j = k_j, a_ij = q_i . x_i ---- */

static void transition(const bw_head *s, int64_t t, float *x)
{
    const float c = s->beta[t] * dot(s->K, s->w + t * s->K, x);
    for (int64_t i = 0; i < s->K; i++)
        x[i] = bw_madd(-c, s->w[t * s->K + i], x[i]);
}

static int path(const bw_head *s, bw_grads *g, void *context)
{
    (void)context;
    const int64_t T = s->T, K = s->K, V = s->V;
    float *X = malloc((size_t)(T * K + 1) * 4), *P = malloc((size_t)(T * T + 1) * 4), *dx = malloc((size_t)K * 4);
    float *G = malloc((size_t)(T + 1) * 4), *dG = calloc((size_t)(T + 1), 4);
    if (!X || !P || !dx || !G || !dG) {
        free(X), free(P), free(dx), free(G), free(dG);
        return BW_ERR_MEMORY;
    }
    float run = 0;
    for (int64_t t = 0; t < T; t++)
        G[t] = run = s->gate ? run + s->gate[t * K] : 0;
    for (int64_t j = 0; j < T; j++) { /* the logits column by column */
        memcpy(X + j * K, s->k + j * K, (size_t)K * 4);
        for (int64_t i = j; i < T; i++) {
            if (i > j) {
                memcpy(X + i * K, X + (i - 1) * K, (size_t)K * 4);
                transition(s, i, X + i * K);
            }
            P[i * T + j] = s->scale * (dot(K, s->q + i * K, X + i * K) + (G[i] - G[j]));
        }
    }
    for (int64_t i = 0; i < T; i++) { /* softmax rows, then their adjoint: P holds da = scale dl */
        float m = -INFINITY, den = 0, mean = 0;
        for (int64_t j = 0; j <= i; j++)
            m = fmaxf(m, P[i * T + j]);
        for (int64_t j = 0; j <= i; j++)
            den += (P[i * T + j] = expf(P[i * T + j] - m));
        for (int64_t j = 0; j <= i; j++) {
            P[i * T + j] /= den;
            for (int64_t c = 0; c < V; c++)
                g->dv[j * V + c] = bw_madd(P[i * T + j], s->dout[i * V + c], g->dv[j * V + c]);
            mean = bw_madd(P[i * T + j], dot(V, s->dout + i * V, s->v + j * V), mean);
        }
        for (int64_t j = 0; j <= i; j++) {
            const float dl = P[i * T + j] * (dot(V, s->dout + i * V, s->v + j * V) - mean);
            P[i * T + j] = s->scale * dl;
            dG[i] += P[i * T + j];
            dG[j] -= P[i * T + j];
        }
    }
    const float dq_scale = bw_bug("dq_no_scale") ? 1 / s->scale : 1;
    for (int64_t j = 0; j < T; j++) {
        memcpy(X + j * K, s->k + j * K, (size_t)K * 4);
        for (int64_t i = j + 1; i < T; i++) {
            memcpy(X + i * K, X + (i - 1) * K, (size_t)K * 4);
            transition(s, i, X + i * K);
        }
        for (int64_t c = 0; c < K; c++)
            dx[c] = 0;
        for (int64_t i = T - 1; i >= j; i--) {
            const float a = P[i * T + j];
            for (int64_t c = 0; c < K; c++) {
                dx[c] = bw_madd(a, s->q[i * K + c], dx[c]);
                g->dq[i * K + c] = bw_madd(dq_scale * a, X[i * K + c], g->dq[i * K + c]);
            }
            if (i == j)
                break;
            const float *w = s->w + i * K, *xp = X + (i - 1) * K;
            const float cd = dot(K, w, xp), ed = dot(K, w, dx);
            g->dbeta[i] -= ed * cd;
            for (int64_t c = 0; c < K; c++) {
                g->dw[i * K + c] -= s->beta[i] * bw_madd(cd, dx[c], ed * xp[c]);
                dx[c] = bw_madd(-s->beta[i] * ed, w[c], dx[c]);
            }
        }
        for (int64_t c = 0; c < K; c++)
            g->dk[j * K + c] += dx[c];
    }
    float rev = 0;
    for (int64_t t = T - 1; t >= 0; t--) {
        rev += dG[t];
        if (s->gate)
            g->dlog[t * K] = rev;
    }
    free(X), free(P), free(dx), free(G), free(dG);
    return 0;
}

/* ---- DeltaFormer (H11) ---- */

/* Row i of A (stage 0, j <= i, x = q_i) or B (stage 1, j < i, x = k_i, q_i in fla's form). */
static void weights(const bw_head *s, int stage, int64_t i, float *row)
{
    const int64_t last = stage ? i - 1 : i;
    const float *x = (stage && s->form != 2) ? s->k + i * s->K : s->q + i * s->K;
    float m = -INFINITY, den = 0;
    for (int64_t j = 0; j <= last; j++)
        m = fmaxf(m, row[j] = s->scale * dot(s->K, x, s->k + j * s->K));
    if (s->form == 0)
        m = 0;
    for (int64_t j = 0; j <= last; j++)
        den += (row[j] = expf(row[j] - m));
    for (int64_t j = 0; j <= last && s->form != 0; j++)
        row[j] /= den;
}

static void weights_adjoint(const bw_head *s, int stage, int64_t i, const float *row, const float *drow, float *dq,
                            float *dk)
{
    const int64_t last = stage ? i - 1 : i, K = s->K;
    const int reads_q = !stage || s->form == 2;
    const float *x = reads_q ? s->q + i * K : s->k + i * K;
    float *dx = reads_q ? dq + i * K : dk + i * K;
    float mean = 0;
    for (int64_t j = 0; j <= last && s->form != 0; j++)
        mean = bw_madd(row[j], drow[j], mean);
    const float dq_scale = bw_bug("dq_no_scale") && reads_q ? 1 : s->scale;
    for (int64_t j = 0; j <= last; j++) {
        const float ds = s->form == 0 ? drow[j] * row[j] : row[j] * (drow[j] - mean);
        for (int64_t c = 0; c < K; c++) {
            dx[c] = bw_madd(dq_scale * ds, s->k[j * K + c], dx[c]);
            dk[j * K + c] = bw_madd(s->scale * ds, x[c], dk[j * K + c]);
        }
    }
}

static int deltaformer(const bw_head *s, bw_grads *g, void *context)
{
    (void)context;
    const int64_t T = s->T, V = s->V;
    float *A = malloc((size_t)(T * T + 1) * 4), *Bm = malloc((size_t)(T * T + 1) * 4);
    float *u = malloc((size_t)(T * V + 1) * 4), *du = calloc((size_t)(T * V + 1), 4), *drow = malloc((size_t)(T + 1) * 4);
    if (!A || !Bm || !u || !du || !drow) {
        free(A), free(Bm), free(u), free(du), free(drow);
        return BW_ERR_MEMORY;
    }
    for (int64_t i = 0; i < T; i++) {
        weights(s, 1, i, Bm + i * T);
        for (int64_t c = 0; c < V; c++) {
            float sum = 0;
            for (int64_t j = 0; j < i; j++)
                sum = bw_madd(Bm[i * T + j], u[j * V + c], sum);
            u[i * V + c] = s->v[i * V + c] - (s->beta ? s->beta[i] : 1) * sum;
        }
        weights(s, 0, i, A + i * T);
    }
    for (int64_t i = 0; i < T; i++) {
        for (int64_t j = 0; j <= i; j++) {
            drow[j] = dot(V, s->dout + i * V, u + j * V);
            for (int64_t c = 0; c < V; c++)
                du[j * V + c] = bw_madd(A[i * T + j], s->dout[i * V + c], du[j * V + c]);
        }
        weights_adjoint(s, 0, i, A + i * T, drow, g->dq, g->dk);
    }
    for (int64_t i = T - 1; i >= 0; i--) {
        const float beta = s->beta ? s->beta[i] : 1;
        float dbeta = 0;
        for (int64_t c = 0; c < V; c++) {
            float sum = 0;
            for (int64_t j = 0; j < i; j++)
                sum = bw_madd(Bm[i * T + j], u[j * V + c], sum);
            g->dv[i * V + c] = du[i * V + c];
            dbeta = bw_madd(-du[i * V + c], sum, dbeta);
        }
        g->dbeta[i] = dbeta;
        for (int64_t j = 0; j < i; j++) {
            drow[j] = -beta * dot(V, du + i * V, u + j * V);
            for (int64_t c = 0; c < V; c++)
                du[j * V + c] = bw_madd(-beta * Bm[i * T + j], du[i * V + c], du[j * V + c]);
        }
        weights_adjoint(s, 1, i, Bm + i * T, drow, g->dq, g->dk);
    }
    free(A), free(Bm), free(u), free(du), free(drow);
    return 0;
}

/* ---- the plugin ---- */

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    const char *bug = getenv("LACS_ZOO_BUG");
    int known = !bug || !*bug;
    for (size_t i = 0; i < sizeof known_bugs / sizeof known_bugs[0] && !known; i++)
        known = strcmp(bug, known_bugs[i]) == 0;
    if (!known) {
        fprintf(stderr, "%s: unknown LACS_ZOO_BUG '%s'\n", member, bug);
        return BW_ERR_INPUT;
    }
    bw_problem p;
    int rc = bw_load(member, op, inputs, n_inputs, params, n_params, &p);
    if (rc)
        return rc;
    static const struct {
        const char *op;
        int kind;
        bw_kernel kernel;
    } table[] = {
        {"linear_attn", LINEAR, recurrent}, {"retention", LINEAR, recurrent}, {"simple_gla", LINEAR, recurrent},
        {"gla", LINEAR, recurrent},         {"delta_rule", DELTA, recurrent}, {"gated_delta_rule", DELTA, recurrent},
        {"comba", COMBA, recurrent},        {"efla", EFLA, recurrent},        {"softmax_attn", 0, flash},
        {"fox", 0, flash},                  {"path_attn", 0, path},           {"deltaformer", 0, deltaformer},
    };
    rc = LACS_UNSUPPORTED;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].op, p.op) == 0) {
            int kind = table[i].kind;
            rc = bw_run(member, &p, outputs, n_outputs, table[i].kernel, &kind);
        }
    bw_free(&p);
    return rc;
}
