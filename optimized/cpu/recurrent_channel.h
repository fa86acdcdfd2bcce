/* builtin:cpu, the recurrent family with a decay per key channel (KDA's gk,
 * GLA): a chunk's n x n matrices term by term, for the forward's chunk
 * (recurrent_kernels.h) and the backward's (recurrent_backward_kernels.h),
 * written over the primitive layer and simd_math.h's exp that the including
 * file includes first (recurrent_<isa>.c, recurrent_backward_<isa>.c).
 */
#ifndef LACS_CPU_RECURRENT_CHANNEL_H
#define LACS_CPU_RECURRENT_CHANNEL_H

#include <stdint.h>

/* M_ij = (factor_i, or 1) scale sum_c x_ic y_jc e^{A_ic - G_jc} for j < i (`strict`) or j <= i, 0 elsewhere
 * (A the decays the rows read: G, or the correction's G_{i-1}): an exp per term, vectors along c. Every
 * exponent is <= 0 for decays g <= 0, so nothing overflows however strong the decay. `exps` (or NULL) keeps
 * the terms' e^{A_i - G_j}, pair after pair (i by i, j by j), K floats apart, for an adjoint to read. */
static void channel_matrix(int64_t n, int64_t K, const float *x, const float *y, const float *A, const float *G,
                           const float *factor, float scale, int strict, float *M, float *exps)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            if (j > i || (strict && j == i)) {
                M[i * n + j] = 0.0f;
                continue;
            }
            vfloat sum = v_zero();
            for (int64_t c = 0; c < K; c += SIMD_LANES) {
                const vfloat e = v_exp(v_sub(v_load_first(A + i * K + c, K - c), v_load_first(G + j * K + c, K - c)));
                if (exps)
                    v_store_first(exps + c, e, K - c);
                const vfloat xy = v_mul(v_load_first(x + i * K + c, K - c), v_load_first(y + j * K + c, K - c));
                sum = v_fma(xy, v_zero_unless(vm_first(K - c), e), sum);
            }
            exps = exps ? exps + K : NULL;
            M[i * n + j] = (factor ? factor[i] : 1.0f) * scale * v_reduce_add(sum);
        }
}

#endif
