/* The gated delta rule's VJP (SPEC.md 4.19) in binary32, written from
 * include/lacs/plugin.h, SPEC.md 4.5 and 4.19 alone, as a kernel author
 * would: the example VJP plugins of the CLI's tests share it
 * (good_vjp_plugin.c, wrong_vjp_plugin.c, chunk_vjp_plugin.c).
 *
 * Forward (H8), per value head, state h [K x V]:
 *   h' = D_t h_{t-1} (D_t = exp(g_t) I, or diag(exp(gk_t)) per key channel),
 *   e = v_t - h'^T k_t,  u = beta_t e,  h_t = h' + k_t u^T,  o_t = scale h_t^T q_t.
 * Its adjoint from the last token back, dh the cotangent of h_t (from dht):
 *   dq_t = scale h_t do_t;  dh += scale q_t do_t^T;  du = dh^T k_t;  dp = -beta_t du;
 *   dk_t = dh u + h' dp;  dv_t = beta_t du;  dbeta_t = du . e;  dh' = dh + k_t dp^T;
 *   dg_t = sum_{c,j} dh'[c][j] h'[c][j] (dgk_t[c] per row c);  dh = D_t dh';  dh0 = dh at the start.
 * q, k [B, T, H, K] (value head hv reads q/k head hv / (HV / H): dq and dk
 * sum over the group); v, do [B, T, HV, V]; beta, g [B, T, HV]; gk [B, T,
 * HV, K]; h0, dht [N, HV, K, V] (optional: zeros); cu_seqlens I64 [N + 1]
 * with B = 1. Inputs F32 or BF16, outputs F32 (dh0 where asked for).
 */
#ifndef LACS_TEST_PLUGIN_GATED_DELTA_RULE_VJP_FP32_H
#define LACS_TEST_PLUGIN_GATED_DELTA_RULE_VJP_FP32_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"

#define VJP_PLUGIN_BAD_INPUT 2
#define VJP_PLUGIN_NO_MEMORY 3

static const lacs_tensor *vjp_find(const lacs_tensor *tensors, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(tensors[i].name, name) == 0)
            return &tensors[i];
    return NULL;
}

/* Element i of an F32 or BF16 tensor (0 for an absent one). */
static float vjp_at(const lacs_tensor *t, int64_t i)
{
    if (!t)
        return 0.0f;
    if (t->dtype == LACS_BF16) {
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float value;
        memcpy(&value, &bits, sizeof value);
        return value;
    }
    return ((const float *)t->data)[i];
}

/* The bugs of the example plugins, none in good_vjp_plugin.c. */
typedef struct {
    /* wrong_vjp_plugin.c: dv of value head `head` at the `token`-th token
     * of each call (or sequence) left without beta (dv = du): one token of
     * one head of one gradient wrong. -1: off. */
    int64_t dv_without_beta_token, dv_without_beta_head;
    /* chunk_vjp_plugin.c: a chunked backward that does not hand the state's
     * cotangent back across a boundary of chunks of `chunk` tokens: each
     * chunk's backward starts from dh = 0 but for the last chunk's (which
     * starts from dht). 0: off. */
    int64_t chunk;
} vjp_bugs;

static int gated_delta_rule_vjp_fp32(const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                                     int n_params, lacs_tensor *outputs, int n_outputs, vjp_bugs bugs)
{
    const lacs_tensor *q = vjp_find(inputs, n_inputs, "q"), *k = vjp_find(inputs, n_inputs, "k");
    const lacs_tensor *v = vjp_find(inputs, n_inputs, "v"), *beta = vjp_find(inputs, n_inputs, "beta");
    const lacs_tensor *g = vjp_find(inputs, n_inputs, "g"), *gk = vjp_find(inputs, n_inputs, "gk");
    const lacs_tensor *h0 = vjp_find(inputs, n_inputs, "h0"), *dout = vjp_find(inputs, n_inputs, "do");
    const lacs_tensor *dht = vjp_find(inputs, n_inputs, "dht"), *cu = vjp_find(inputs, n_inputs, "cu_seqlens");
    lacs_tensor *dq = NULL, *dk = NULL, *dv = NULL, *dbeta = NULL, *dg = NULL, *dh0 = NULL;
    for (int i = 0; i < n_outputs; i++) {
        const char *name = outputs[i].name;
        lacs_tensor **slot = strcmp(name, "dq") == 0 ? &dq : strcmp(name, "dk") == 0 ? &dk
                           : strcmp(name, "dv") == 0 ? &dv : strcmp(name, "dbeta") == 0 ? &dbeta
                           : strcmp(name, "dg") == 0 || strcmp(name, "dgk") == 0 ? &dg
                           : strcmp(name, "dh0") == 0 ? &dh0 : NULL;
        if (!slot)
            return VJP_PLUGIN_BAD_INPUT; /* an output this plugin does not know */
        *slot = &outputs[i];
        int64_t count = 1;
        for (int d = 0; d < outputs[i].ndim; d++)
            count *= outputs[i].shape[d];
        memset(outputs[i].data, 0, sizeof(float) * (size_t)count);
    }
    if (!q || !k || !v || !beta || !dout || !(g || gk) || !dq || !dk || !dv || !dbeta || !dg || q->ndim != 4 ||
        v->ndim != 4 || (cu && cu->dtype != LACS_I64))
        return VJP_PLUGIN_BAD_INPUT;
    const int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3];
    const int64_t HV = v->shape[2], V = v->shape[3], N = cu ? cu->shape[0] - 1 : B;
    if (H < 1 || HV % H != 0)
        return VJP_PLUGIN_BAD_INPUT;
    float scale = 1.0f / sqrtf((float)K);
    for (int i = 0; i < n_params; i++)
        if (strcmp(params[i].name, "scale") == 0)
            scale = (float)params[i].value;
    float *dq_data = dq->data, *dk_data = dk->data, *dv_data = dv->data, *dbeta_data = dbeta->data;
    float *dg_data = dg->data;

    /* the state before each token and after the last, per sequence and value head */
    float *states = malloc(sizeof(float) * (size_t)((T + 1) * K * V));
    float *dh = malloc(sizeof(float) * (size_t)(K * V)), *u = malloc(sizeof(float) * (size_t)V);
    float *e = malloc(sizeof(float) * (size_t)V), *du = malloc(sizeof(float) * (size_t)V);
    float *decay = malloc(sizeof(float) * (size_t)K);
    if (!states || !dh || !u || !e || !du || !decay) {
        free(states), free(dh), free(u), free(e), free(du), free(decay);
        return VJP_PLUGIN_NO_MEMORY;
    }
    for (int64_t n = 0; n < N; n++) {
        const int64_t b = cu ? 0 : n, start = cu ? ((const int64_t *)cu->data)[n] : 0;
        const int64_t end = cu ? ((const int64_t *)cu->data)[n + 1] : T, length = end - start;
        for (int64_t hv = 0; hv < HV; hv++) {
            const int64_t hk = hv / (HV / H);
#define QK(x, t, c) vjp_at(x, (((b) * T + (t)) * H + hk) * K + (c))
#define VV(x, t, j) vjp_at(x, (((b) * T + (t)) * HV + hv) * V + (j))
#define PER_HEAD(t) (((b) * T + (t)) * HV + hv)
            /* forward: states[s] = h after s tokens of the sequence */
            for (int64_t i = 0; i < K * V; i++)
                states[i] = vjp_at(h0, (n * HV + hv) * K * V + i);
            for (int64_t s = 0; s < length; s++) {
                const int64_t t = start + s;
                const float *before = states + s * K * V;
                float *after = states + (s + 1) * K * V;
                for (int64_t c = 0; c < K; c++)
                    decay[c] = expf(gk ? vjp_at(gk, PER_HEAD(t) * K + c) : vjp_at(g, PER_HEAD(t)));
                for (int64_t j = 0; j < V; j++) {
                    float p = 0;
                    for (int64_t c = 0; c < K; c++)
                        p += decay[c] * before[c * V + j] * QK(k, t, c);
                    u[j] = vjp_at(beta, PER_HEAD(t)) * (VV(v, t, j) - p);
                }
                for (int64_t c = 0; c < K; c++)
                    for (int64_t j = 0; j < V; j++)
                        after[c * V + j] = decay[c] * before[c * V + j] + QK(k, t, c) * u[j];
            }
            /* backward, from the last token */
            for (int64_t i = 0; i < K * V; i++)
                dh[i] = vjp_at(dht, (n * HV + hv) * K * V + i);
            for (int64_t s = length - 1; s >= 0; s--) {
                const int64_t t = start + s;
                if (bugs.chunk > 0 && (s + 1) % bugs.chunk == 0 && s + 1 < length)
                    memset(dh, 0, sizeof(float) * (size_t)(K * V)); /* the bug: the next chunk's dh not handed back */
                const float *before = states + s * K * V, *after = states + (s + 1) * K * V;
                const float bt = vjp_at(beta, PER_HEAD(t));
                for (int64_t c = 0; c < K; c++)
                    decay[c] = expf(gk ? vjp_at(gk, PER_HEAD(t) * K + c) : vjp_at(g, PER_HEAD(t)));
                for (int64_t c = 0; c < K; c++) {
                    float sum = 0;
                    for (int64_t j = 0; j < V; j++)
                        sum += after[c * V + j] * VV(dout, t, j);
                    dq_data[(((b * T + t) * H + hk) * K) + c] += scale * sum;
                }
                for (int64_t c = 0; c < K; c++)
                    for (int64_t j = 0; j < V; j++)
                        dh[c * V + j] += scale * QK(q, t, c) * VV(dout, t, j);
                float dbeta_t = 0;
                for (int64_t j = 0; j < V; j++) {
                    float p = 0, dsum = 0;
                    for (int64_t c = 0; c < K; c++) {
                        p += decay[c] * before[c * V + j] * QK(k, t, c);
                        dsum += dh[c * V + j] * QK(k, t, c);
                    }
                    e[j] = VV(v, t, j) - p;
                    u[j] = bt * e[j];
                    du[j] = dsum;
                    dbeta_t += du[j] * e[j];
                    const int wrong = s == bugs.dv_without_beta_token && hv == bugs.dv_without_beta_head;
                    dv_data[PER_HEAD(t) * V + j] = wrong ? du[j] : bt * du[j];
                }
                dbeta_data[PER_HEAD(t)] = dbeta_t;
                float dg_t = 0;
                for (int64_t c = 0; c < K; c++) {
                    float dk_c = 0, dlog = 0;
                    for (int64_t j = 0; j < V; j++) {
                        const float dp = -bt * du[j], decayed = decay[c] * before[c * V + j];
                        dk_c += dh[c * V + j] * u[j] + decayed * dp;
                        dh[c * V + j] += QK(k, t, c) * dp; /* dh' */
                        dlog += dh[c * V + j] * decayed;
                        dh[c * V + j] *= decay[c];
                    }
                    dk_data[(((b * T + t) * H + hk) * K) + c] += dk_c;
                    if (gk)
                        dg_data[PER_HEAD(t) * K + c] = dlog;
                    dg_t += dlog;
                }
                if (!gk)
                    dg_data[PER_HEAD(t)] = dg_t;
            }
            if (dh0)
                memcpy((float *)dh0->data + (n * HV + hv) * K * V, dh, sizeof(float) * (size_t)(K * V));
#undef QK
#undef VV
#undef PER_HEAD
        }
    }
    free(states), free(dh), free(u), free(e), free(du), free(decay);
    return 0;
}

#endif
