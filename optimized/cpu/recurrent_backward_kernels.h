/* builtin:cpu, the recurrent family's backward kernels (README.md section 9):
 * the forward over a run of tokens and its adjoint (SPEC.md 4.19's table),
 * written once over a primitive layer (simd_avx512.h, simd_avx2.h or
 * simd_scalar.h, which the including file, recurrent_backward_<isa>.c,
 * includes first), building that instruction set's table
 * RECURRENT_BACKWARD_KERNELS (recurrent_backward.h). Vectors run along the V
 * columns of a state row, binary32 throughout; each kernel sweeps the K rows
 * once per token, fusing the two halves of consecutive tokens' work (below).
 *
 * Forward (h' = D h_{t-1}; c the step, u the write):
 *   LINEAR   h_t = h' + k v^T
 *   DELTA    e = v - h'^T k,        u = c e,  h_t = h' + k u^T     (H6, H8 first form, E5)
 *   COMBA    e = v - h_{t-1}^T k,   u = c e,  h_t = h' + k u^T     (H8 second form)
 * Adjoint (dh the cotangent of h_t):
 *   sweep 1, row by row:  dq = scale h_t do;  dh += scale q do^T;  du = dh^T k
 *   then:                 dc = du . e;  dv = c du (du for LINEAR);  dp = -c du
 *   sweep 2, row by row:  dk = dh u + hr dp   (hr the state the correction read: h', or h_{t-1} for COMBA)
 *     LINEAR, DELTA:      dh' = dh + k dp^T;  dlog = dh' . h';  dh <- D dh'
 *     COMBA:              dlog = D (dh . h_{t-1});  dh <- D dh + k dp^T
 */
#include <math.h>
#include <string.h>

#include "recurrent_backward.h"

/* The forward over n tokens (recurrent_backward.h): token i's sweep writes h_i row by row and accumulates
 * p_{i+1} = hr_i^T k_{i+1} from the row it just wrote (hr = D_{i+1} h_i, or h_i for COMBA), so that e_{i+1}
 * is ready for the next sweep; one sweep before the first token forms p_0. */
static void forward(lacs_cpu_backward_update update, int64_t K, int64_t V, float *states, int64_t stride, int64_t n,
                    const lacs_cpu_backward_token *x, float *e)
{
    if (n <= 0)
        return;
    const float *cur = states;
    if (update != BACKWARD_LINEAR) { /* p_0 = hr^T k_0, accumulated in e_0 */
        for (int64_t j = 0; j < V; j += SIMD_LANES)
            v_store_first(e + j, v_zero(), V - j);
        for (int64_t c = 0; c < K; c++) {
            const vfloat f = v_set1(x[0].decay && update == BACKWARD_DELTA ? x[0].decay[c] : 1.0f);
            const vfloat kc = v_set1(x[0].k[c]);
            for (int64_t j = 0; j < V; j += SIMD_LANES)
                v_store_first(e + j, v_fma(kc, v_mul(f, v_load_first(cur + c * V + j, V - j)), v_load_first(e + j, V - j)),
                              V - j);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        const lacs_cpu_backward_token *t = &x[i], *next_token = i + 1 < n ? &x[i + 1] : NULL;
        float *next = stride > 0 ? states + (i + 1) * stride : states;
        float *ei = e + i * V, *en = next_token ? e + (i + 1) * V : NULL;
        const int correction = update != BACKWARD_LINEAR;
        if (correction) {
            for (int64_t j = 0; j < V; j += SIMD_LANES)
                v_store_first(ei + j, v_sub(v_load_first(t->v + j, V - j), v_load_first(ei + j, V - j)), V - j);
            if (en)
                for (int64_t j = 0; j < V; j += SIMD_LANES)
                    v_store_first(en + j, v_zero(), V - j);
        }
        const vfloat coef = v_set1(t->coef);
        const float *write = correction ? ei : t->v; /* u = c e, or v */
        for (int64_t c = 0; c < K; c++) {
            const vfloat f = v_set1(t->decay ? t->decay[c] : 1.0f), kc = v_set1(t->k[c]);
            const float *in = cur + c * V;
            float *out = next + c * V;
            if (correction && en) {
                const vfloat fn = v_set1(next_token->decay && update == BACKWARD_DELTA ? next_token->decay[c] : 1.0f);
                const vfloat kn = v_set1(next_token->k[c]);
                for (int64_t j = 0; j < V; j += SIMD_LANES) {
                    const vfloat u = v_mul(coef, v_load_first(write + j, V - j));
                    const vfloat h = v_fma(kc, u, v_mul(f, v_load_first(in + j, V - j)));
                    v_store_first(out + j, h, V - j);
                    v_store_first(en + j, v_fma(kn, v_mul(fn, h), v_load_first(en + j, V - j)), V - j);
                }
            } else if (correction) {
                for (int64_t j = 0; j < V; j += SIMD_LANES) {
                    const vfloat u = v_mul(coef, v_load_first(write + j, V - j));
                    v_store_first(out + j, v_fma(kc, u, v_mul(f, v_load_first(in + j, V - j))), V - j);
                }
            } else {
                for (int64_t j = 0; j < V; j += SIMD_LANES)
                    v_store_first(out + j, v_fma(kc, v_load_first(write + j, V - j), v_mul(f, v_load_first(in + j, V - j))),
                                  V - j);
            }
        }
        cur = next;
    }
}

/* The adjoint of n tokens (recurrent_backward.h): a sweep for the last token's readout (sweep 1 above), then
 * for each token i from the last, its sweep 2 fused with token i - 1's sweep 1: both read h_{i-1} (the state
 * token i's update started from is the state token i - 1 read out), and dh's row, once carried to h_{i-1},
 * takes token i - 1's readout term and adds to its du at once. */
static void backward(lacs_cpu_backward_update update, int64_t K, int64_t V, float scale, const float *states,
                     int64_t stride, int64_t n, const float *e, const lacs_cpu_backward_token *x, float *dh, float *dq,
                     float *dk, float *dv, float *dlog, float *dcoef, float *du, float *u, float *dp)
{
    if (n <= 0)
        return;
    /* the readout's adjoint of the last token: dq = scale h do, dh += scale q do^T, and du = dh^T k */
    {
        const lacs_cpu_backward_token *t = &x[n - 1];
        const float *cur = states + n * stride;
        for (int64_t j = 0; j < V; j += SIMD_LANES)
            v_store_first(du + j, v_zero(), V - j);
        for (int64_t c = 0; c < K; c++) {
            const vfloat sq = v_set1(scale * t->q[c]), kc = v_set1(t->k[c]);
            float *d = dh + c * V;
            vfloat acc = v_zero();
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat o = v_load_first(t->dout + j, V - j);
                acc = v_fma(v_load_first(cur + c * V + j, V - j), o, acc);
                const vfloat dhv = v_fma(sq, o, v_load_first(d + j, V - j));
                v_store_first(d + j, dhv, V - j);
                v_store_first(du + j, v_fma(kc, dhv, v_load_first(du + j, V - j)), V - j);
            }
            dq[(n - 1) * K + c] = scale * v_reduce_add(acc);
        }
    }
    for (int64_t i = n - 1; i >= 0; i--) {
        const lacs_cpu_backward_token *t = &x[i], *before = i > 0 ? &x[i - 1] : NULL;
        const float *prev = states + i * stride, *ei = e + i * V;
        /* the write's adjoint: dv, dc, u (the forward's write), dp = -c du; then du is token i - 1's */
        const float *w = t->v;
        if (update == BACKWARD_LINEAR) {
            memcpy(dv + i * V, du, (size_t)V * sizeof *dv);
        } else {
            const vfloat coef = v_set1(t->coef);
            vfloat acc = v_zero();
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat duv = v_load_first(du + j, V - j), ev = v_load_first(ei + j, V - j);
                acc = v_fma(duv, ev, acc);
                const vfloat dvv = v_mul(coef, duv);
                v_store_first(dv + i * V + j, dvv, V - j);
                v_store_first(dp + j, v_sub(v_zero(), dvv), V - j);
                v_store_first(u + j, v_mul(coef, ev), V - j);
            }
            dcoef[i] = v_reduce_add(acc);
            w = u;
        }
        for (int64_t j = 0; j < V; j += SIMD_LANES)
            v_store_first(du + j, v_zero(), V - j);
        /* one sweep: token i's dk, decay gradient and dh carried to h_{i-1}; then token i - 1's readout */
        const float sq_scale = before ? scale : 0.0f;
        const float *dout_before = before ? before->dout : NULL;
        for (int64_t c = 0; c < K; c++) {
            const float fc = t->decay ? t->decay[c] : 1.0f;
            const vfloat f = v_set1(fc), kc = v_set1(t->k[c]);
            const vfloat sq = v_set1(before ? sq_scale * before->q[c] : 0.0f), kb = v_set1(before ? before->k[c] : 0.0f);
            const float *hp = prev + c * V;
            float *d = dh + c * V;
            vfloat acc_dk = v_zero(), acc_dlog = v_zero(), acc_dq = v_zero();
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat dhv = v_load_first(d + j, V - j), h = v_load_first(hp + j, V - j);
                acc_dk = v_fma(dhv, v_load_first(w + j, V - j), acc_dk);
                vfloat carried;
                if (update == BACKWARD_LINEAR) {
                    if (t->decay) {
                        acc_dlog = v_fma(dhv, v_mul(f, h), acc_dlog);
                        carried = v_mul(f, dhv);
                    } else
                        carried = dhv;
                } else if (update == BACKWARD_DELTA) {
                    const vfloat dpv = v_load_first(dp + j, V - j);
                    const vfloat decayed = t->decay ? v_mul(f, h) : h;
                    acc_dk = v_fma(decayed, dpv, acc_dk);
                    const vfloat dh_decayed = v_fma(kc, dpv, dhv);
                    if (t->decay) {
                        acc_dlog = v_fma(dh_decayed, decayed, acc_dlog);
                        carried = v_mul(f, dh_decayed);
                    } else
                        carried = dh_decayed;
                } else { /* COMBA */
                    const vfloat dpv = v_load_first(dp + j, V - j);
                    acc_dk = v_fma(h, dpv, acc_dk);
                    acc_dlog = v_fma(dhv, h, acc_dlog);
                    carried = v_fma(kc, dpv, t->decay ? v_mul(f, dhv) : dhv);
                }
                if (before) { /* token i - 1's readout, o = scale h_{i-1}^T q: h is h_{i-1} */
                    const vfloat o = v_load_first(dout_before + j, V - j);
                    acc_dq = v_fma(h, o, acc_dq);
                    carried = v_fma(sq, o, carried);
                    v_store_first(du + j, v_fma(kb, carried, v_load_first(du + j, V - j)), V - j);
                }
                v_store_first(d + j, carried, V - j);
            }
            dk[i * K + c] = v_reduce_add(acc_dk);
            if (t->decay)
                dlog[i * K + c] = update == BACKWARD_COMBA ? fc * v_reduce_add(acc_dlog) : v_reduce_add(acc_dlog);
            if (before)
                dq[(i - 1) * K + c] = scale * v_reduce_add(acc_dq);
        }
    }
}

const lacs_cpu_backward_kernels RECURRENT_BACKWARD_KERNELS = {
    .isa = SIMD_ISA,
    .forward = forward,
    .backward = backward,
};
