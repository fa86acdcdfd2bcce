/* builtin:cpu attention: the two row kernels of the blocked online softmax
 * (attention_kernels.h), written once over a primitive layer (simd_avx512.h
 * or simd_avx2.h, with simd_math.h's exp, which the including file,
 * attention_<isa>.c, includes first), named ATTENTION_LOGITS_ROW,
 * ATTENTION_EXP_ROW and ATTENTION_ADJOINT_ROW, and PaTH's element-wise
 * kernels of a block's transitions, ATTENTION_TRANSPOSE and
 * ATTENTION_SOLVE_ROWS. A column past n is neither read nor written; exp is
 * Cephes' expf (simd_math.h): subnormal results and overflow to +inf as the
 * libm's, H1's exp(s_ij - m_i) within a few ulp, as SPEC.md 11.1 permits. */
#include <math.h>

#include "attention_kernels.h"

float ATTENTION_LOGITS_ROW(int64_t n, float *x, int64_t lo, int64_t hi, float scale, float row_bias,
                           const float *col_bias)
{
    const vfloat lane = v_lane_index(), minus_inf = v_set1(-INFINITY);
    const vfloat scale_v = v_set1(scale), row_bias_v = v_set1(row_bias), first = v_set1((float)lo),
                 end = v_set1((float)hi);
    /* four running maxima, of vectors 0, 4, 8, ...; 1, 5, 9, ...; ...: one chain of v_max took 4 cycles a vector,
     * the row's critical path with the exp row's sum (the same maximum in any order) */
    vfloat max_v = minus_inf, max_1 = minus_inf, max_2 = minus_inf, max_3 = minus_inf;
    int64_t j = 0;
    if (lo <= 0 && hi >= n) { /* a row wholly visible (a block below the diagonal): its whole vectors need no mask */
        for (; j + 4 * SIMD_LANES <= n; j += 4 * SIMD_LANES) {
            vfloat logit[4];
            for (int u = 0; u < 4; u++) {
                const int64_t at = j + u * SIMD_LANES;
                const vfloat bias = col_bias ? v_sub(row_bias_v, v_load(col_bias + at)) : row_bias_v;
                logit[u] = v_fma(scale_v, v_load(x + at), bias);
                v_store(x + at, logit[u]);
            }
            max_v = v_max(max_v, logit[0]);
            max_1 = v_max(max_1, logit[1]);
            max_2 = v_max(max_2, logit[2]);
            max_3 = v_max(max_3, logit[3]);
        }
        for (; j + SIMD_LANES <= n; j += SIMD_LANES) {
            const vfloat bias = col_bias ? v_sub(row_bias_v, v_load(col_bias + j)) : row_bias_v;
            const vfloat logit = v_fma(scale_v, v_load(x + j), bias);
            v_store(x + j, logit);
            max_v = v_max(max_v, logit);
        }
    }
    for (; j < n; j += SIMD_LANES) {
        const int64_t count = n - j;
        /* visible: lo <= column < hi (column indices of a block are small integers: exact in fp32) */
        const vfloat column = v_add(lane, v_set1((float)j));
        const vmask visible = vm_and(vm_first(count), vm_and(vm_ge(column, first), vm_lt(column, end)));
        const vfloat bias = col_bias ? v_sub(row_bias_v, v_load_first(col_bias + j, count)) : row_bias_v;
        const vfloat logit = v_select(visible, minus_inf, v_fma(scale_v, v_load_first(x + j, count), bias));
        /* whole vectors by plain stores: a masked store followed by a load of the same address (the exp
         * row's) is not forwarded, and stalls (v_store_first stores whole vectors plainly) */
        v_store_first(x + j, logit, count);
        max_v = v_max(max_v, logit); /* a NaN logit is kept: v_max returns its second operand then */
    }
    return v_reduce_max(v_max(v_max(max_2, max_3), v_max(max_1, max_v)));
}

/* The weights of the vector at x, its first count lanes (all of them where count >= SIMD_LANES), stored in place;
 * returned, 0 in the lanes past count. */
static inline __attribute__((always_inline)) vfloat exp_vector(float *x, int64_t count, vfloat max_v, vfloat smallest,
                                                               int normalised)
{
    const vfloat d = v_sub(v_load_first(x, count), max_v);
    if (normalised) {
        /* a softmax's weights by v_exp_base2 (simd_math.h says why it may: d <= 0, its weights that matter have
         * |d| of a few units). Its common case without its clamps (d <= 0 here, or NaN): every lane's n in
         * [-125, 127] (false for NaN), where the clamps change nothing and each weight is at least 0.7 2^-125,
         * none to drop; v_exp_base2 and the drop otherwise (a masked logit's -inf, a weight below 2^-125): the
         * same bits. n <= 0 needs no test: max is at least every logit of the row (the running maximum, or the
         * log-sum-exp m + log Z, Z >= 1); one test fewer was 3 % of the two row kernels */
        vfloat n_pow;
        const vfloat er = v_exp_base2_reduced(d, &n_pow);
        if (vm_all(vm_ge(n_pow, v_set1(-125.0f)))) {
            const vfloat p = v_scale_pow2_normal(er, n_pow);
            v_store_first(x, p, count);
            return count >= SIMD_LANES ? p : v_zero_unless(vm_first(count), p);
        }
    }
    vfloat p = normalised ? v_exp_base2(d) : v_exp(d); /* the EXP form: v_exp, exact to about an ulp */
    p = v_select(vm_lt(p, smallest), p, v_zero()); /* vm_lt is false for NaN: a NaN is kept */
    v_store_first(x, p, count);
    return count >= SIMD_LANES ? p : v_zero_unless(vm_first(count), p);
}

float ATTENTION_EXP_ROW(int64_t n, float *x, float max, int normalised)
{
    const vfloat max_v = v_set1(max);
    /* a normalised row's weights below 2^-126 written as 0 (attention_kernels.h says why); -1 keeps them all */
    const vfloat smallest = v_set1(normalised ? 0x1p-126f : -1.0f);
    /* four partial sums, of vectors 0, 4, 8, ...; 1, 5, 9, ...; ...: one chain of sums took 4 cycles a vector, the
     * row's critical path with the logits row's maximum */
    vfloat sum_v = v_zero(), sum_1 = v_zero(), sum_2 = v_zero(), sum_3 = v_zero();
    int64_t j = 0;
    for (; j + 4 * SIMD_LANES <= n; j += 4 * SIMD_LANES) {
        sum_v = v_add(sum_v, exp_vector(x + j, SIMD_LANES, max_v, smallest, normalised));
        sum_1 = v_add(sum_1, exp_vector(x + j + SIMD_LANES, SIMD_LANES, max_v, smallest, normalised));
        sum_2 = v_add(sum_2, exp_vector(x + j + 2 * SIMD_LANES, SIMD_LANES, max_v, smallest, normalised));
        sum_3 = v_add(sum_3, exp_vector(x + j + 3 * SIMD_LANES, SIMD_LANES, max_v, smallest, normalised));
    }
    for (; j < n; j += SIMD_LANES)
        sum_v = v_add(sum_v, exp_vector(x + j, n - j, max_v, smallest, normalised));
    return v_reduce_add(v_add(v_add(sum_v, sum_1), v_add(sum_2, sum_3)));
}

float ATTENTION_ADJOINT_ROW(int64_t n, const float *p, float *dp, float D, float *col_sum, float *p_max)
{
    const vfloat D_v = v_set1(D);
    vfloat sum_v = v_zero(), max_v = v_zero();
    for (int64_t j = 0; j < n; j += SIMD_LANES) {
        const int64_t count = n - j;
        const vfloat p_j = v_load_first(p + j, count); /* 0 past n: those lanes add 0 */
        const vfloat ds = v_mul(p_j, v_sub(v_load_first(dp + j, count), D_v));
        v_store_first(dp + j, ds, count);
        v_store_first(col_sum + j, v_add(v_load_first(col_sum + j, count), ds), count);
        sum_v = v_add(sum_v, ds);
        max_v = v_max(max_v, p_j);
    }
    *p_max = v_reduce_max(max_v);
    return v_reduce_add(sum_v);
}

void ATTENTION_TRANSPOSE(int64_t rows, int64_t cols, const float *in, int64_t ldi, float *out, int64_t ldo)
{
    simd_transpose(rows, cols, in, ldi, out, ldo);
}

void ATTENTION_SOLVE_ROWS(int64_t r0, int64_t r1, int64_t n, float *x, int64_t ld_x, const float *minus_l,
                          int64_t ld_l, const float *beta, int64_t beta_stride)
{
    for (int64_t t = r0; t < r1; t++) {
        float *x_t = x + t * ld_x;
        const vfloat beta_t = v_set1(beta[t * beta_stride]);
        for (int64_t c = 0; c < n; c += SIMD_LANES) {
            const int64_t count = n - c;
            vfloat sum = v_load_first(x_t + c, count);
            for (int64_t s = r0; s < t; s++) /* a product, then a sum: the scalar loop's two roundings */
                sum = v_add(sum, v_mul(v_set1(minus_l[t * ld_l + s]), v_load_first(x + s * ld_x + c, count)));
            v_store_first(x_t + c, v_mul(sum, beta_t), count);
        }
    }
}
