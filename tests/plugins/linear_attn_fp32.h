/* Linear attention (H2) in binary32, written from include/lacs/plugin.h and
 * the README alone, as a kernel author would: the example plugins of the
 * CLI's tests (tests/python/test_cli.py) share it.
 *
 *   h_t = h_{t-1} + k_t v_t^T,   o_t = scale * h_t^T q_t        (H2; h is K x V)
 *
 * q, k [B, T, H, K]; v, o [B, T, HV, V]; h0, ht [N, HV, K, V] (h0 optional:
 * zeros); value head hv reads q/k head hv / (HV / H); with cu_seqlens
 * (I64 [N + 1], B = 1) each packed sequence starts from its own h0[n].
 * Inputs are F32 or BF16 (the top 16 bits of a binary32); outputs F32.
 */
#ifndef LACS_TEST_PLUGIN_LINEAR_ATTN_FP32_H
#define LACS_TEST_PLUGIN_LINEAR_ATTN_FP32_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"

/* An error code of this plugin (any non-zero value other than LACS_UNSUPPORTED). */
#define PLUGIN_BAD_INPUT 2

static const lacs_tensor *find_tensor(const lacs_tensor *tensors, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(tensors[i].name, name) == 0)
            return &tensors[i];
    return NULL;
}

/* Element i of an F32 or BF16 tensor, as a float. */
static float element(const lacs_tensor *t, int64_t i)
{
    if (t->dtype == LACS_BF16) {
        uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float value;
        memcpy(&value, &bits, sizeof value);
        return value;
    }
    return ((const float *)t->data)[i];
}

static int is_floating(const lacs_tensor *t) { return t && (t->dtype == LACS_F32 || t->dtype == LACS_BF16); }

/* Two bugs to show the checker at work, both off in good_plugin.c:
 * apply_scale = 0 is wrong_plugin.c's (scale hard-wired to 1); reset_every =
 * 64 is chunk_plugin.c's (a chunked kernel that does not hand the state from
 * one chunk of 64 tokens to the next, so each chunk starts from zeros). */
static int linear_attn_fp32(const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                            lacs_tensor *outputs, int n_outputs, int apply_scale, int64_t reset_every)
{
    const lacs_tensor *q = find_tensor(inputs, n_inputs, "q"), *k = find_tensor(inputs, n_inputs, "k");
    const lacs_tensor *v = find_tensor(inputs, n_inputs, "v"), *h0 = find_tensor(inputs, n_inputs, "h0");
    const lacs_tensor *cu = find_tensor(inputs, n_inputs, "cu_seqlens");
    lacs_tensor *o = NULL, *ht = NULL;
    for (int i = 0; i < n_outputs; i++) {
        if (strcmp(outputs[i].name, "o") == 0)
            o = &outputs[i];
        else if (strcmp(outputs[i].name, "ht") == 0)
            ht = &outputs[i];
        else
            return PLUGIN_BAD_INPUT; /* an output this plugin does not know */
    }
    if (!is_floating(q) || !is_floating(k) || !is_floating(v) || (h0 && !is_floating(h0)) || !o || q->ndim != 4 ||
        v->ndim != 4 || (cu && cu->dtype != LACS_I64))
        return PLUGIN_BAD_INPUT;
    const int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3];
    const int64_t HV = v->shape[2], V = v->shape[3];
    const int64_t N = cu ? cu->shape[0] - 1 : B;
    const int64_t *offsets = cu ? (const int64_t *)cu->data : NULL;
    if (H < 1 || HV % H != 0)
        return PLUGIN_BAD_INPUT;
    const int64_t group = HV / H;

    float scale = 1.0f / sqrtf((float)K);
    for (int i = 0; i < n_params; i++)
        if (strcmp(params[i].name, "scale") == 0)
            scale = (float)params[i].value;
    if (!apply_scale)
        scale = 1.0f;

    float *state = malloc((size_t)(K * V) * sizeof *state);
    if (!state)
        return PLUGIN_BAD_INPUT;
    float *out = o->data, *final_state = ht ? ht->data : NULL;
    for (int64_t n = 0; n < N; n++) {
        const int64_t b = offsets ? 0 : n, t0 = offsets ? offsets[n] : 0, t1 = offsets ? offsets[n + 1] : T;
        for (int64_t hv = 0; hv < HV; hv++) {
            const int64_t h = hv / group;
            for (int64_t e = 0; e < K * V; e++)
                state[e] = h0 ? element(h0, (n * HV + hv) * K * V + e) : 0.0f;
            for (int64_t t = t0; t < t1; t++) {
                if (reset_every > 0 && t > t0 && (t - t0) % reset_every == 0)
                    memset(state, 0, (size_t)(K * V) * sizeof *state);
                const int64_t qk = ((b * T + t) * H + h) * K, vo = ((b * T + t) * HV + hv) * V;
                for (int64_t c = 0; c < K; c++) {
                    const float kc = element(k, qk + c);
                    for (int64_t j = 0; j < V; j++)
                        state[c * V + j] += kc * element(v, vo + j);
                }
                for (int64_t j = 0; j < V; j++) {
                    float sum = 0.0f;
                    for (int64_t c = 0; c < K; c++)
                        sum += state[c * V + j] * element(q, qk + c);
                    out[vo + j] = scale * sum;
                }
            }
            if (final_state)
                memcpy(final_state + (n * HV + hv) * K * V, state, (size_t)(K * V) * sizeof *state);
        }
    }
    free(state);
    return 0;
}

#endif
