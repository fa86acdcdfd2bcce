/* builtin:cpu, the recurrent family's backward kernels (README.md section 8):
 * one token's forward step and its adjoint (SPEC.md 4.19's table), written
 * once over a primitive layer (simd_avx512.h, simd_avx2.h or simd_scalar.h,
 * which the including file, recurrent_backward_<isa>.c, includes first),
 * building that instruction set's table RECURRENT_BACKWARD_KERNELS
 * (recurrent_backward.h). Vectors run along the V columns of a state row;
 * each step sweeps the K rows twice, binary32 throughout.
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

static void forward_step(lacs_cpu_backward_update update, int64_t K, int64_t V, const float *prev, float *next,
                         const lacs_cpu_backward_token *x, float *e)
{
    if (update == BACKWARD_LINEAR) {
        for (int64_t c = 0; c < K; c++) {
            const vfloat f = v_set1(x->decay ? x->decay[c] : 1.0f), kc = v_set1(x->k[c]);
            const float *in = prev + c * V;
            float *out = next + c * V;
            for (int64_t j = 0; j < V; j += SIMD_LANES) {
                const vfloat decayed = x->decay ? v_mul(f, v_load_first(in + j, V - j)) : v_load_first(in + j, V - j);
                v_store_first(out + j, v_fma(kc, v_load_first(x->v + j, V - j), decayed), V - j);
            }
        }
        return;
    }
    /* p = hr^T k, accumulated in e; h' written to next */
    for (int64_t j = 0; j < V; j += SIMD_LANES)
        v_store_first(e + j, v_zero(), V - j);
    for (int64_t c = 0; c < K; c++) {
        const vfloat f = v_set1(x->decay ? x->decay[c] : 1.0f), kc = v_set1(x->k[c]);
        const float *in = prev + c * V;
        float *out = next + c * V;
        for (int64_t j = 0; j < V; j += SIMD_LANES) {
            const vfloat h = v_load_first(in + j, V - j);
            const vfloat decayed = x->decay ? v_mul(f, h) : h;
            const vfloat read = update == BACKWARD_COMBA ? h : decayed;
            v_store_first(e + j, v_fma(kc, read, v_load_first(e + j, V - j)), V - j);
            v_store_first(out + j, decayed, V - j);
        }
    }
    const vfloat coef = v_set1(x->coef);
    for (int64_t j = 0; j < V; j += SIMD_LANES)
        v_store_first(e + j, v_sub(v_load_first(x->v + j, V - j), v_load_first(e + j, V - j)), V - j);
    for (int64_t c = 0; c < K; c++) {
        const vfloat kc = v_set1(x->k[c]);
        float *out = next + c * V;
        for (int64_t j = 0; j < V; j += SIMD_LANES) {
            const vfloat u = v_mul(coef, v_load_first(e + j, V - j));
            v_store_first(out + j, v_fma(kc, u, v_load_first(out + j, V - j)), V - j);
        }
    }
}

static void backward_step(lacs_cpu_backward_update update, int64_t K, int64_t V, float scale, const float *prev,
                          const float *cur, const float *e, const lacs_cpu_backward_token *x, float *dh, float *dq,
                          float *dk, float *dv, float *dlog, float *dcoef, float *du, float *dp)
{
    /* sweep 1: the readout's adjoint, and du = dh^T k */
    for (int64_t j = 0; j < V; j += SIMD_LANES)
        v_store_first(du + j, v_zero(), V - j);
    for (int64_t c = 0; c < K; c++) {
        const vfloat sq = v_set1(scale * x->q[c]), kc = v_set1(x->k[c]);
        const float *h = cur + c * V;
        float *d = dh + c * V;
        vfloat acc = v_zero();
        for (int64_t j = 0; j < V; j += SIMD_LANES) {
            const vfloat o = v_load_first(x->dout + j, V - j);
            acc = v_fma(v_load_first(h + j, V - j), o, acc);
            const vfloat dhv = v_fma(sq, o, v_load_first(d + j, V - j));
            v_store_first(d + j, dhv, V - j);
            v_store_first(du + j, v_fma(kc, dhv, v_load_first(du + j, V - j)), V - j);
        }
        dq[c] = scale * v_reduce_add(acc);
    }
    /* the write's adjoint: dv, dc, and du <- u (the forward's write), dp = -c du */
    const float *u = x->v;
    if (update == BACKWARD_LINEAR) {
        memcpy(dv, du, (size_t)V * sizeof *dv);
    } else {
        const vfloat coef = v_set1(x->coef);
        vfloat acc = v_zero();
        for (int64_t j = 0; j < V; j += SIMD_LANES) {
            const vfloat duv = v_load_first(du + j, V - j), ev = v_load_first(e + j, V - j);
            acc = v_fma(duv, ev, acc);
            const vfloat dvv = v_mul(coef, duv);
            v_store_first(dv + j, dvv, V - j);
            v_store_first(dp + j, v_sub(v_zero(), dvv), V - j);
            v_store_first(du + j, v_mul(coef, ev), V - j);
        }
        *dcoef = v_reduce_add(acc);
        u = du;
    }
    /* sweep 2: dk, the decay's gradient, and dh carried to h_{t-1} */
    for (int64_t c = 0; c < K; c++) {
        const float fc = x->decay ? x->decay[c] : 1.0f;
        const vfloat f = v_set1(fc), kc = v_set1(x->k[c]);
        const float *hp = prev + c * V;
        float *d = dh + c * V;
        vfloat acc_dk = v_zero(), acc_dlog = v_zero();
        for (int64_t j = 0; j < V; j += SIMD_LANES) {
            const vfloat dhv = v_load_first(d + j, V - j), h = v_load_first(hp + j, V - j);
            acc_dk = v_fma(dhv, v_load_first(u + j, V - j), acc_dk);
            if (update == BACKWARD_LINEAR) {
                if (x->decay) {
                    const vfloat decayed = v_mul(f, h);
                    acc_dlog = v_fma(dhv, decayed, acc_dlog);
                    v_store_first(d + j, v_mul(f, dhv), V - j);
                }
            } else if (update == BACKWARD_DELTA) {
                const vfloat dpv = v_load_first(dp + j, V - j);
                const vfloat decayed = x->decay ? v_mul(f, h) : h;
                acc_dk = v_fma(decayed, dpv, acc_dk);
                const vfloat dh_decayed = v_fma(kc, dpv, dhv);
                if (x->decay) {
                    acc_dlog = v_fma(dh_decayed, decayed, acc_dlog);
                    v_store_first(d + j, v_mul(f, dh_decayed), V - j);
                } else
                    v_store_first(d + j, dh_decayed, V - j);
            } else { /* COMBA */
                const vfloat dpv = v_load_first(dp + j, V - j);
                acc_dk = v_fma(h, dpv, acc_dk);
                acc_dlog = v_fma(dhv, h, acc_dlog);
                v_store_first(d + j, v_fma(kc, dpv, x->decay ? v_mul(f, dhv) : dhv), V - j);
            }
        }
        dk[c] = v_reduce_add(acc_dk);
        if (x->decay)
            dlog[c] = update == BACKWARD_COMBA ? fc * v_reduce_add(acc_dlog) : v_reduce_add(acc_dlog);
    }
}

const lacs_cpu_backward_kernels RECURRENT_BACKWARD_KERNELS = {
    .isa = SIMD_ISA,
    .forward_step = forward_step,
    .backward_step = backward_step,
};
