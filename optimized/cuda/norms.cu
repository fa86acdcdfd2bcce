/* builtin:cuda, the norm family (README.md): rmsnorm (N2) and its VJP (N3),
 * DyT (N1), DyISRU (N5) and their VJPs (SPEC.md 4.14-4.18). softcap and
 * l2norm are not implemented here (LACS_UNSUPPORTED).
 *
 * Read top to bottom: loading a chunk of W elements (one 16-byte load), the
 * element-wise functions (tanh, sech^2, x / sqrt(x^2 + C)), the element-wise
 * kernels (forward and VJP), the row kernels (rmsnorm and its VJP), the two
 * reductions of the per-block partial sums, and lacs_cuda_norm (parameters,
 * grid shapes, workspace, launches).
 *
 * Parallel decomposition.
 *  - Element-wise ops (DyT, DyISRU, forward and VJP): x [rows, dim] is read
 *    in chunks of W elements of one row, W = 4 (fp32, a float4) or 8 (bf16,
 *    a uint4) when dim is a multiple of W, else 1. A block of 256 threads
 *    covers `columns_per_block` chunks of a row side by side and
 *    `rows_per_pass` rows (256 / columns_per_block); the grid is
 *    (chunks of a row / columns_per_block) x (row groups), and each thread
 *    strides over the rows with the grid's row step, 4 (forward) or 2 (VJP)
 *    rows per iteration so that several 16-byte loads are in flight. A thread
 *    keeps the same columns for every row it visits: weight and bias are
 *    read once into registers, and the VJP's per-column sums (dweight,
 *    dbias) accumulate in registers too. This is the grid-stride loop of a
 *    memory-bound kernel, arranged so that the per-column operands never
 *    cost a load per element.
 *  - Row ops (rmsnorm, rmsnorm_vjp): a row belongs to one group of threads,
 *    a warp (dim up to 8 chunks per lane) or the whole block of 256 threads
 *    (wider rows); the group strides over the rows. Pass 1 reads the row and
 *    reduces sum x^2 (and, for the VJP, sum x weight dy) with warp shuffles
 *    (and, for a block, one slot per warp in shared memory, summed in warp
 *    order); pass 2 reads the row again (from L1/L2: the row was just read)
 *    and writes y or dx.
 *  - Parameter gradients: each thread's (or group's) partial sums are
 *    written to a device workspace, [partials][dim] doubles for dweight and
 *    dbias, one double per block for dalpha and dC; two small kernels then
 *    add them in a fixed order. No float atomics: every result is the same
 *    bit for bit from run to run (for one grid shape, which depends on
 *    (rows, dim) and the number of SMs only).
 *
 * Numerics (the tiers of SPEC.md 11.1; builtin:cpu's choices, ../cpu/README.md section 6).
 *  - DyT: y = fma(w, tanhf(alpha x), b), alpha x one fp32 rounding; below
 *    |alpha x| = 2^-12, where tanh(u) = u to fp32 rounding, y = fma(w alpha,
 *    x, b), so that a subnormal alpha x keeps x's digits.
 *  - DyISRU: s = fma(x, x, C) (one rounding), y = fma(w, x / sqrtf(s), b)
 *    while s is a normal fp32 number (correctly rounded sqrt and division);
 *    otherwise (|x| above 1.8e19, x^2 + C below fp32's normal range, C = 0
 *    with x = 0, NaN, inf) the reference's two branches in double (SPEC.md
 *    4.16), where every fp32 input's square is exact and in range.
 *  - sech^2(u) = 4e / (1 + e)^2, e = exp(-2|u|) (SPEC.md 4.18, never
 *    1 - tanh^2), as s 2^n: n and r = -2|u| - n ln 2 by Cody-Waite
 *    reduction, exp(r) by builtin:cpu's polynomial, the mantissa
 *    s = 4 exp(r) / (1 + e)^2 in fp32 with its roundings recovered (about
 *    1 ulp), the power of two applied in double. So sech^2 keeps its digits
 *    where it is far below fp32's range (|u| > 44, dyt_vjp-*-saturated), and
 *    is 0 exactly where the reference's double one is (|u| > 372.566589).
 *  - DyISRU's VJP: x^2 + C in double (one rounding at 2^-53), its square root
 *    as sqrtf plus one Newton step in double, one double division; the
 *    plain fp32 forms cost 1.5 ulp more and doubled the worst ratio.
 *  - The VJPs' products dy weight f'(x) and the parameter terms are formed in
 *    double from those fp32 pieces and rounded once (the products of fp32
 *    values are exact there and cannot overflow or underflow); every sum
 *    (dweight, dbias, dalpha, dC, and rmsnorm's row sums) is in double, as
 *    builtin:cpu's: a row of subnormals or of values above 1.8e19
 *    (rmsnorm-*-specials) would underflow or overflow x^2 in fp32, and the
 *    double sums keep dalpha and dC (up to rows x dim terms of both signs)
 *    far inside the tolerance. On an H100 or A100 double runs at half the
 *    fp32 rate, and these kernels spend a few double operations per element
 *    against a budget of dozens (they are bound by memory).
 *  - rmsnorm: rms = sqrt(sum x^2 / dim + eps) and 1/rms in double; y =
 *    (float)(w (x / rms)) in double (1/rms may lie outside fp32's range).
 *    A zero row with eps = 0 gives w * (+0); the VJP then gives dx = 0 and no
 *    dweight term (SPEC.md 4.14).
 *
 * Memory traffic: the forward element-wise ops read x once and write y once
 * (weight and bias once per thread); their VJPs read x and dy and write dx;
 * the row ops read x (and dy) twice, the second time from cache. The
 * workspace traffic is partials x dim doubles, small next to the data.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cuda_common.cuh"

/* ---- chunks of W elements ---- */

/* Threads per block, every kernel; the element-wise ops' rows per loop iteration. */
#define NORM_THREADS 256
#define FORWARD_UNROLL 4
#define VJP_UNROLL 2

/* The two bf16 values of a 32-bit word, element 2k in the low half (little-endian). */
__device__ __forceinline__ void unpack_bf16_pair(unsigned word, float *v)
{
    v[0] = __uint_as_float(word << 16);
    v[1] = __uint_as_float(word & 0xffff0000u);
}

/* W consecutive elements at p (aligned to W elements) as fp32: one 16-byte
 * load for W = 4 (fp32) or W = 8 (bf16), one element for W = 1. */
template <int W> __device__ __forceinline__ void load_chunk(const float *p, float *v)
{
    if constexpr (W == 4) {
        LACS_ALIGNED16(p);
        const float4 q = __ldg((const float4 *)p);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
        static_assert(W == 1, "fp32 chunks are 4 or 1 elements");
        v[0] = __ldg(p);
    }
}

template <int W> __device__ __forceinline__ void load_chunk(const unsigned short *p, float *v)
{
    if constexpr (W == 8) {
        LACS_ALIGNED16(p);
        const uint4 q = __ldg((const uint4 *)p);
        unpack_bf16_pair(q.x, v), unpack_bf16_pair(q.y, v + 2), unpack_bf16_pair(q.z, v + 4),
            unpack_bf16_pair(q.w, v + 6);
    } else {
        static_assert(W == 1, "bf16 chunks are 8 or 1 elements");
        v[0] = lacs_bf16_to_float(__ldg(p));
    }
}

/* W fp32 outputs at p (aligned to W elements): float4 stores, or one float. */
template <int W> __device__ __forceinline__ void store_chunk(float *p, const float *v)
{
    if constexpr (W % 4 == 0) {
        for (int k = 0; k < W; k += 4) {
            LACS_ALIGNED16(p + k);
            *(float4 *)(p + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
        }
    } else {
        p[0] = v[0];
    }
}

/* W weights (a [dim] input of either dtype, or absent: 1) at chunk j: one
 * load when the weight has x's dtype, else element by element. */
template <typename T, int W> __device__ __forceinline__ void load_weight_chunk(lacs_view weight, int64_t j, float *w)
{
    if (!weight.data) {
        for (int k = 0; k < W; k++)
            w[k] = 1.0f;
    } else if (weight.bf16 == (sizeof(T) == 2)) {
        load_chunk<W>((const T *)weight.data + j * W, w);
    } else {
        for (int k = 0; k < W; k++)
            w[k] = lacs_view_at(weight, j * W + k);
    }
}

/* ---- the element-wise functions ---- */

/* Where the reference's double sech^2 becomes 0 (exp(-2|u|) underflows in
 * double); the same bound as builtin:cpu's. */
#define SECH2_POSITIVE_IN_DOUBLE 0x1.74910cp+8f
/* ln 2 split so that n * LN2_HI is exact for |n| < 2^12 (norms.h's). */
#define LOG2E_F 1.44269504f
#define LN2_HI_F 0.693115234375f
#define LN2_LO_F 3.19461833e-05f

/* exp(r) = 1 + r + r^2 Q(r) for |r| <= ln(2)/2 (builtin:cpu's fit, norms.h:
 * relative error 2^-28.3), in fp32 with FMA. */
__device__ __forceinline__ float exp_minus_one_reduced(float r)
{
    float q = 0.0013814611001063168f;
    q = fmaf(q, r, 0.0083687100353082497f);
    q = fmaf(q, r, 0.041668387408547037f);
    q = fmaf(q, r, 0.16666520687563107f);
    q = fmaf(q, r, 0.49999993451472626f);
    return fmaf(r * r, q, r);
}

/* N1, N4: sech^2(u) = 4e / (1 + e)^2, e = exp(-2|u|) = (1 + p) 2^n (SPEC.md
 * 4.18), returned in double as s 2^n. n = round(-2|u| log2 e) and
 * r = -2|u| - n ln 2 by Cody-Waite reduction (n LN2_HI is exact),
 * p = exp(r) - 1. The mantissa s = 4 (1 + p) / (1 + e)^2, in [0.35, 5.7], is
 * formed in fp32 with every rounding but the last recovered to first order
 * (builtin:cpu's sech2_scaled, norms_avx512.c): 1 + p = m + m_err and
 * 1 + e = d + d_err by Fast2Sum, (1 + e)^2 = dd + dd_lo by FMA, and the
 * quotient's remainder by FMA; s is within about 1 ulp. The scaling by 2^n
 * is in double, where sech^2 stays representable down to |u| = 372.566589
 * (far below fp32's range: dyt_vjp-*-saturated). Above that it is 0, as the
 * reference's; NaN stays NaN. */
__device__ __forceinline__ double sech2_of(float u)
{
    const float a = fabsf(u);
    if (!(a <= SECH2_POSITIVE_IN_DOUBLE))
        return a > SECH2_POSITIVE_IN_DOUBLE ? 0.0 : (double)a; /* +inf and beyond: 0; NaN: NaN */
    const float v = -2.0f * a;
    const float n = rintf(v * LOG2E_F);
    const float p = exp_minus_one_reduced(fmaf(-n, LN2_LO_F, fmaf(-n, LN2_HI_F, v)));
    const float m = 1.0f + p, m_err = (1.0f - m) + p;
    const float e = ldexpf(m, (int)n), e_lo = ldexpf(m_err, (int)n);
    const float d = 1.0f + e, d_err = ((1.0f - d) + e) + e_lo;
    const float dd = d * d, dd_lo = fmaf(d + d, d_err, fmaf(d, d, -dd));
    const float reciprocal = 1.0f / dd, four_m = 4.0f * m, q = four_m * reciprocal;
    const float remainder = fmaf(-q, dd_lo, fmaf(4.0f, m_err, fmaf(-q, dd, four_m)));
    return ldexp((double)fmaf(remainder, reciprocal, q), (int)n);
}

/* N5 in double: f = x / sqrt(x^2 + C) and its partial derivatives, relative
 * to the larger of |x| and sqrt(C) so that nothing overflows (the
 * reference's two branches, SPEC.md 4.16, 4.18). x = +-inf gives f = +-1 and
 * derivatives 0; C = 0 and x = 0 gives NaN; NaN x takes the second branch
 * and gives NaN. Only the elements the fp32 form cannot take come here. */
struct isru_value {
    double f, dfdx, dfdC;
};

__device__ isru_value isru_double(double x, double C)
{
    const double sqrt_C = sqrt(C), a = fabs(x);
    isru_value v;
    if (a >= sqrt_C) {
        const double r = sqrt_C / a, p = 1 + r * r, p32 = p * sqrt(p);
        v.f = copysign(1 / sqrt(p), x);
        v.dfdx = r / a * r / p32;
        v.dfdC = -copysign(0.5 / a / a / p32, x);
    } else {
        const double q = x / sqrt_C, p = 1 + q * q, p32 = p * sqrt(p);
        v.f = x / (sqrt_C * sqrt(p));
        v.dfdx = 1 / (sqrt_C * p32);
        v.dfdC = -(q / 2) / (C * p32);
    }
    return v;
}

/* x^2 + C as one fp32 rounding is usable when it is a normal number: then
 * its relative error is 2^-24 and x / sqrt(s) cannot overflow. */
__device__ __forceinline__ bool isru_fp32_ok(float s) { return s >= FLT_MIN && s <= FLT_MAX; }

/* N1: weight tanh(alpha x) + bias; below |alpha x| = 2^-12 (tanh(u) = u to
 * fp32 rounding) (w alpha) x + b, which keeps a subnormal x's digits. */
__device__ __forceinline__ float dyt_value(float x, float alpha, float w, float b)
{
    const float u = alpha * x;
    if (fabsf(u) < 0x1p-12f)
        return fmaf(w * alpha, x, b);
    return fmaf(w, tanhf(u), b);
}

/* N5: weight x / sqrt(x^2 + C) + bias. */
__device__ __forceinline__ float dyisru_value(float x, float C, float w, float b)
{
    const float s = fmaf(x, x, C);
    const float f = isru_fp32_ok(s) ? x / sqrtf(s) : (float)isru_double(x, C).f;
    return fmaf(w, f, b);
}

/* The bf16 tier's forward DyT and DyISRU take the hardware's approximations
 * (optimized/cuda/README.md section 3): tanh.approx.f32 (MUFU.TANH, sm_75 and
 * later; PTX ISA: relative error at most 2^-10.987) and rsqrtf (2 ulp, CUDA
 * Math API). The tier stores its outputs in bf16 (SPEC.md 11.1), a relative
 * error of up to 2^-9; these add at most a quarter of that, and they make
 * the kernels bound by memory again (the exact tanhf and x / sqrtf cost
 * dozens of instructions an element, more than 6 bytes of traffic cover).
 * The emulation cannot reproduce the instructions' bits: it takes tanhf and
 * 1 / sqrtf moved by the documented bound towards zero, so that the vectors
 * are passed at the worst case. */
__device__ __forceinline__ float tanh_approx(float u)
{
#ifdef LACS_CUDA_EMULATION
    return tanhf(u) * (1.0f - 0x1p-11f);
#else
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(u));
    return y;
#endif
}

__device__ __forceinline__ float rsqrt_approx(float s)
{
#ifdef LACS_CUDA_EMULATION
    return 1.0f / sqrtf(s) * (1.0f - 0x1p-22f);
#else
    return rsqrtf(s);
#endif
}

__device__ __forceinline__ float dyt_value_bf16_tier(float x, float alpha, float w, float b)
{
    const float u = alpha * x;
    if (fabsf(u) < 0x1p-12f)
        return fmaf(w * alpha, x, b);
    return fmaf(w, tanh_approx(u), b);
}

__device__ __forceinline__ float dyisru_value_bf16_tier(float x, float C, float w, float b)
{
    const float s = fmaf(x, x, C);
    const float f = isru_fp32_ok(s) ? x * rsqrt_approx(s) : (float)isru_double(x, C).f;
    return fmaf(w, f, b);
}

/* One element's VJP terms: dx (rounded once), and in double the parameter
 * term (dalpha or dC), the dweight term dy f(x) (dbias's is dy). */
struct vjp_terms {
    float dx;
    double dparam, dweight;
};

/* N1's VJP (SPEC.md 4.18): dx = g w alpha sech^2(u), dalpha term
 * g w x sech^2(u) (0 where sech^2 is 0: its limit at infinite x),
 * dweight term g tanh(u), u = alpha x. */
__device__ __forceinline__ vjp_terms dyt_vjp_terms(float x, float g, float w, float alpha)
{
    const float u = alpha * x;
    double s2 = sech2_of(u);
    if (LACS_MUTANT(LACS_MUTANT_SECH2_FROM_TANH)) {
        const float t = tanhf(u);
        s2 = 1.0f - t * t;
    }
    const double gw = (double)g * (double)w;
    vjp_terms t;
    t.dx = (float)(gw * ((double)alpha * s2));
    t.dparam = gw * (s2 == 0 ? 0.0 : (double)x * s2);
    t.dweight = (double)g * (double)tanhf(u);
    return t;
}

/* N5's VJP: df/dx = C (x^2 + C)^{-3/2}, df/dC = -x/2 (x^2 + C)^{-3/2}.
 * s = x^2 + C in double (x^2 exact there, one rounding at 2^-53); where its
 * fp32 rounding is a normal number, sqrt(s) is sqrtf's t with one Newton
 * correction in double (to about 2^-46), (x^2 + C)^{3/2} = s t, and
 * f = x s / (s t): one double division, no double square root, and only
 * the final rounding of dx left (a plain fp32 s and t cost about 1.5 ulp
 * more). Otherwise the double branches. */
__device__ __forceinline__ vjp_terms dyisru_vjp_terms(float x, float g, float w, float C)
{
    const double s = fma((double)x, (double)x, (double)C);
    double f, dfdx, dfdC;
    if (isru_fp32_ok((float)s)) {
        const float t = sqrtf((float)s);
        const double root = fma(fma(-(double)t, (double)t, s), (double)(0.5f / t), (double)t);
        const double inv_p32 = 1.0 / (s * root);
        f = (double)x * s * inv_p32;
        dfdx = (double)C * inv_p32;
        dfdC = -0.5 * (double)x * inv_p32;
    } else {
        const isru_value v = isru_double(x, C);
        f = v.f, dfdx = v.dfdx, dfdC = v.dfdC;
    }
    const double gw = (double)g * (double)w;
    vjp_terms r;
    r.dx = (float)(gw * dfdx);
    r.dparam = gw * dfdC;
    r.dweight = (double)g * f;
    return r;
}

/* N6: cap tanh(x / cap), in double (x / cap and tanh rounded there, one
 * final rounding); below |u| = 2^-26, x (1 - u^2 / 3), which keeps a
 * subnormal x's own digits (x / cap rounds again): builtin:cpu's scalar
 * kernel (optimized/cpu/norms_scalar.c). */
__device__ __forceinline__ float softcap_value(float x, double cap)
{
    const double u = (double)x / cap;
    return (float)(fabs(u) < 0x1p-26 ? (double)x * (1 - u * u / 3) : cap * tanh(u));
}

/* sech^2(u) = 4e / (1 + e)^2, e = exp(-2|u|), in double (SPEC.md 4.18; 0 where e underflows,
 * NaN for NaN); the mutant takes 1 - tanh^2, which loses every digit where tanh rounds to 1. */
__device__ __forceinline__ double sech2_double(double u)
{
    if (LACS_MUTANT(LACS_MUTANT_SECH2_FROM_TANH)) {
        const double t = tanh(u);
        return 1 - t * t;
    }
    const double e = exp(-2 * fabs(u));
    return 4 * e / ((1 + e) * (1 + e));
}

/* softcap's dcap term h(u) = tanh(u) - u sech^2(u) (SPEC.md 4.18): below |u| = 1, where the
 * difference cancels, (sinh(2u) - 2u) / (2 cosh^2 u) with sinh(v) - v from its series (terms of one
 * sign); above, the direct form, u sech^2(u) taken as 0 where sech^2 is 0 (its limit). */
__device__ __forceinline__ double softcap_dcap_term(double u)
{
    if (fabs(u) < 1) {
        const double v = 2 * u, v2 = v * v;
        double term = v * v2 / 6, sum = term;
        for (int k = 2; k < 16; k++) {
            term *= v2 / ((2.0 * k) * (2.0 * k + 1));
            sum += term;
        }
        const double ch = cosh(u);
        return sum / (2 * ch * ch);
    }
    const double s2 = sech2_double(u);
    return tanh(u) - (s2 == 0 ? 0 : u * s2);
}

/* N6's VJP: dx = dy sech^2(x / cap), dcap term dy h(x / cap), in double. */
__device__ __forceinline__ vjp_terms softcap_vjp_terms(float x, float g, double cap)
{
    const double u = (double)x / cap;
    vjp_terms t;
    t.dx = (float)((double)g * sech2_double(u));
    t.dparam = (double)g * softcap_dcap_term(u);
    t.dweight = 0;
    return t;
}

/* ---- the element-wise kernels ---- */

enum { OP_DYT = 0, OP_DYISRU = 1, OP_SOFTCAP = 2 };

struct elementwise_args {
    const void *x, *dy;            /* [rows, dim], fp32 or bf16 (T) */
    lacs_view weight, bias;        /* [dim] or absent (1 and -0: SPEC.md 4.14, "Common") */
    int64_t rows, dim;
    float param;                   /* alpha (DyT) or C (DyISRU) */
    double cap;                    /* softcap's cap */
    float *out;                    /* y or dx, [rows, dim]; NULL: not asked */
    double *sums_weight;           /* VJP: [partials][dim] or NULL (dweight not asked) */
    double *sums_bias;             /* VJP: [partials][dim] or NULL */
    double *sums_param;            /* VJP: [gridDim.x * gridDim.y] or NULL */
    int columns_per_block;         /* chunks of a row a block covers */
    int rows_per_pass;             /* rows a block covers at once */
};

/* This thread's chunk of a row (column j: elements j W .. j W + W - 1) and
 * first row; false for a thread the block shape leaves idle. */
struct elementwise_place {
    int64_t chunk, first_row, row_step, partial;
    bool active;
};

__device__ __forceinline__ elementwise_place place_thread(const elementwise_args &a, int W)
{
    const int column = (int)threadIdx.x % a.columns_per_block, row = (int)threadIdx.x / a.columns_per_block;
    elementwise_place p;
    p.chunk = (int64_t)blockIdx.x * a.columns_per_block + column;
    p.partial = (int64_t)blockIdx.y * a.rows_per_pass + row;
    p.first_row = p.partial;
    p.row_step = (int64_t)gridDim.y * a.rows_per_pass;
    p.active = row < a.rows_per_pass && p.chunk < a.dim / W;
    return p;
}

/* weight and bias of this thread's W columns, read once. */
template <int W>
__device__ __forceinline__ void load_columns(const elementwise_args &a, int64_t chunk, float *w, float *b)
{
    for (int k = 0; k < W; k++) {
        w[k] = a.weight.data ? lacs_view_at(a.weight, chunk * W + k) : 1.0f;
        b[k] = a.bias.data ? lacs_view_at(a.bias, chunk * W + k) : -0.0f;
    }
}

/* N1, N5: out = w f(x) + b, FORWARD_UNROLL rows per iteration (their loads
 * first, then the arithmetic and the stores). */
template <int OP, typename T, int W>
__global__ void __launch_bounds__(NORM_THREADS) elementwise_forward(elementwise_args a)
{
    const elementwise_place p = place_thread(a, W);
    if (!p.active || !a.out)
        return; /* no barrier follows */
    float w[W], b[W];
    load_columns<W>(a, p.chunk, w, b);
    const T *x = (const T *)a.x;
    for (int64_t r = p.first_row; r < a.rows; r += FORWARD_UNROLL * p.row_step) {
        float v[FORWARD_UNROLL][W];
        for (int u = 0; u < FORWARD_UNROLL; u++)
            if (r + u * p.row_step < a.rows)
                load_chunk<W>(x + (r + u * p.row_step) * a.dim + p.chunk * W, v[u]);
        for (int u = 0; u < FORWARD_UNROLL; u++) {
            if (r + u * p.row_step >= a.rows)
                break;
            for (int k = 0; k < W; k++)
                if (OP == OP_DYT)
                    v[u][k] = sizeof(T) == 2 ? dyt_value_bf16_tier(v[u][k], a.param, w[k], b[k])
                                             : dyt_value(v[u][k], a.param, w[k], b[k]);
                else if (OP == OP_DYISRU)
                    v[u][k] = sizeof(T) == 2 ? dyisru_value_bf16_tier(v[u][k], a.param, w[k], b[k])
                                             : dyisru_value(v[u][k], a.param, w[k], b[k]);
                else
                    v[u][k] = softcap_value(v[u][k], a.cap);
            store_chunk<W>(a.out + (r + u * p.row_step) * a.dim + p.chunk * W, v[u]);
        }
    }
}

/* The block's sum of one double per thread, in a fixed order (a tree over
 * shared memory): every thread calls it; thread 0 gets the total. */
__device__ double block_sum(double value)
{
    double *slots = (double *)lacs_shared_memory();
    slots[threadIdx.x] = value;
    __syncthreads();
    for (int half = NORM_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            slots[threadIdx.x] += slots[threadIdx.x + half];
        __syncthreads();
    }
    return slots[0];
}

/* The VJPs of N1 and N5: dx per element; per column, in registers, the
 * dweight terms dy f(x) and dbias terms dy over the thread's rows, written
 * to its partial row of the workspace; dalpha or dC terms summed per thread,
 * then per block. */
template <int OP, typename T, int W>
__global__ void __launch_bounds__(NORM_THREADS) elementwise_vjp(elementwise_args a)
{
    const elementwise_place p = place_thread(a, W);
    float w[W], b[W];
    double sum_weight[W], sum_bias[W], sum_param = 0;
    for (int k = 0; k < W; k++)
        sum_weight[k] = 0, sum_bias[k] = 0;
    if (p.active) {
        load_columns<W>(a, p.chunk, w, b);
        const T *x = (const T *)a.x, *dy = (const T *)a.dy;
        for (int64_t r = p.first_row; r < a.rows; r += VJP_UNROLL * p.row_step) {
            float xv[VJP_UNROLL][W], gv[VJP_UNROLL][W];
            for (int u = 0; u < VJP_UNROLL; u++)
                if (r + u * p.row_step < a.rows) {
                    const int64_t at = (r + u * p.row_step) * a.dim + p.chunk * W;
                    load_chunk<W>(x + at, xv[u]);
                    load_chunk<W>(dy + at, gv[u]);
                }
            for (int u = 0; u < VJP_UNROLL; u++) {
                if (r + u * p.row_step >= a.rows)
                    break;
                float dx[W];
                for (int k = 0; k < W; k++) {
                    const vjp_terms t = OP == OP_DYT      ? dyt_vjp_terms(xv[u][k], gv[u][k], w[k], a.param)
                                        : OP == OP_DYISRU ? dyisru_vjp_terms(xv[u][k], gv[u][k], w[k], a.param)
                                                          : softcap_vjp_terms(xv[u][k], gv[u][k], a.cap);
                    dx[k] = t.dx;
                    sum_param += t.dparam;
                    sum_weight[k] += t.dweight;
                    sum_bias[k] += (double)gv[u][k];
                }
                if (a.out)
                    store_chunk<W>(a.out + (r + u * p.row_step) * a.dim + p.chunk * W, dx);
            }
        }
        /* every (partial row, column) of the workspace has exactly one owner */
        for (int k = 0; k < W; k++) {
            if (a.sums_weight)
                a.sums_weight[p.partial * a.dim + p.chunk * W + k] = sum_weight[k];
            if (a.sums_bias)
                a.sums_bias[p.partial * a.dim + p.chunk * W + k] = sum_bias[k];
        }
    }
    if (a.sums_param) {
        const double total = block_sum(sum_param);
        if (threadIdx.x == 0)
            a.sums_param[(int64_t)blockIdx.y * gridDim.x + blockIdx.x] = total;
    }
}

/* ---- the row kernels: rmsnorm (N2) and its VJP (N3) ---- */

struct row_args {
    const void *x, *dy;     /* [rows, dim], fp32 or bf16 (T) */
    lacs_view weight;       /* [dim] or absent (1) */
    int64_t rows, dim;
    double eps;
    float *out;             /* y or dx; NULL: not asked */
    double *sums_weight;    /* VJP: [groups in the grid][dim] or NULL (dweight not asked) */
    int l2;                 /* l2norm (SPEC.md 3) instead of rmsnorm */
    int max_eps;            /* l2norm's convention: 1 for max(||x||, eps), 0 for sqrt(sum x^2 + eps) */
    int group_threads;      /* 32 (a warp per row) or NORM_THREADS (the block per row) */
    int shared_sums;        /* the group's dweight sums live in shared memory (else in sums_weight) */
};

/* The row kernel's shared memory: the reduction slots (2 doubles per warp,
 * rounded up to 128 bytes, lacs_shared_round), then the dweight sums. */
#define ROW_SLOT_BYTES 128
static_assert(2 * sizeof(double) * (NORM_THREADS / 32) <= ROW_SLOT_BYTES, "a slot pair per warp");

/* A warp's sum, every lane getting the same bits (the butterfly adds the
 * same two values in both lanes of a pair, and addition commutes). */
__device__ __forceinline__ double warp_sum(double v)
{
    for (int mask = 16; mask > 0; mask /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, mask);
    return v;
}

/* The group's sums of a and b: a warp's by shuffles; a block's adds the
 * warps' sums from shared memory in warp order (slots: 2 per warp), with a
 * barrier before the slots are read and one before they are written again. */
__device__ __forceinline__ void group_sums(const row_args &a, double *slots, double *sa, double *sb)
{
    *sa = warp_sum(*sa);
    *sb = warp_sum(*sb);
    if (a.group_threads == 32)
        return;
    const int warp = (int)threadIdx.x / 32;
    if (threadIdx.x % 32 == 0)
        slots[2 * warp] = *sa, slots[2 * warp + 1] = *sb;
    __syncthreads();
    double ta = 0, tb = 0;
    for (int k = 0; k < a.group_threads / 32; k++)
        ta += slots[2 * k], tb += slots[2 * k + 1];
    __syncthreads();
    *sa = ta, *sb = tb;
}

/* SPEC.md 3, a row of l2norm (VJP false) or its VJP, from the row's sums:
 * y = x / denom, denom = sqrt(sum x^2 + eps) or max(||x||, eps); dx =
 * (dy - x along) / denom, along = (x . dy) / n2 (0 below eps in the max
 * convention, where y = x / eps is linear); a NaN in the sums makes the row
 * NaN; denom = 0 (a zero row with eps = 0) gives 0. builtin:cpu's forms
 * (optimized/cpu/norms.c), in double, one rounding per element. */
template <typename T, int W, bool VJP>
__device__ void l2_row(const row_args &a, const T *x, const T *dy, double sum_sq, double x_dot_dy, float *out,
                       int lane)
{
    double denom = 0, along = 0;
    if (!VJP) {
        denom = a.max_eps ? fmax(sqrt(sum_sq), a.eps) : sqrt(sum_sq + a.eps);
        if (isnan(sum_sq))
            denom = sum_sq;
    } else if (!a.max_eps) {
        const double n2 = sum_sq + a.eps;
        if (n2 > 0)
            along = x_dot_dy / n2, denom = sqrt(n2);
    } else {
        const double norm = sqrt(sum_sq);
        if (norm > 0 && norm >= a.eps)
            along = x_dot_dy / sum_sq, denom = norm;
        else if (a.eps > 0)
            denom = a.eps;
    }
    if (VJP && (isnan(sum_sq) || isnan(x_dot_dy)))
        denom = along = NAN;
    if (!out)
        return;
    const double inv = 1 / denom;
    for (int64_t j = lane; j < a.dim / W; j += a.group_threads) {
        float xv[W], gv[W], ov[W];
        load_chunk<W>(x + j * W, xv);
        if (VJP)
            load_chunk<W>(dy + j * W, gv);
        for (int k = 0; k < W; k++) {
            if (isnan(denom))
                ov[k] = (float)denom;
            else if (!(denom > 0))
                ov[k] = 0.0f;
            else if (VJP)
                ov[k] = (float)(((double)gv[k] - (double)xv[k] * along) * inv);
            else
                ov[k] = (float)((double)xv[k] * inv);
        }
        store_chunk<W>(out + j * W, ov);
    }
}

/* N2 (VJP false): y = w x / rms; N3 (VJP true): dx = (w dy - x along) / rms,
 * along = (y . g) / (d rms), y . g = (sum x w dy) / rms, and dweight terms
 * dy x / rms (builtin:cpu's form, norms.c). rms = sqrt(sum x^2 / d + eps),
 * all in double; a zero row with eps = 0 gives w * (+0), dx = 0. */
template <typename T, int W, bool VJP>
__global__ void __launch_bounds__(NORM_THREADS) row_kernel(row_args a)
{
    unsigned char *shared = lacs_shared_memory();
    double *slots = (double *)shared;                                      /* 2 per warp */
    const int groups = NORM_THREADS / a.group_threads, group = (int)threadIdx.x / a.group_threads;
    const int lane = (int)threadIdx.x % a.group_threads;
    const int64_t chunks = a.dim / W, group_id = (int64_t)blockIdx.x * groups + group;
    double *sums = nullptr; /* this group's dweight terms: only this thread touches its columns */
    if (VJP && a.sums_weight)
        sums = a.shared_sums ? (double *)(shared + ROW_SLOT_BYTES) +
                                   group * a.dim
                             : a.sums_weight + group_id * a.dim;
    if (sums)
        for (int64_t j = lane; j < chunks; j += a.group_threads)
            for (int k = 0; k < W; k++)
                sums[j * W + k] = 0;

    const T *xs = (const T *)a.x, *dys = (const T *)a.dy;
    for (int64_t row = group_id; row - group < a.rows; row += (int64_t)gridDim.x * groups) {
        /* a block-wide group keeps every thread in the loop for the barriers */
        const bool live = row < a.rows;
        const T *x = xs + (live ? row : 0) * a.dim, *dy = dys + (live ? row : 0) * a.dim;
        double sum_sq = 0, dot = 0;
        if (live)
            for (int64_t j = lane; j < chunks; j += a.group_threads) {
                float xv[W], gv[W], w[W];
                load_chunk<W>(x + j * W, xv);
                if (VJP) {
                    load_chunk<W>(dy + j * W, gv);
                    load_weight_chunk<T, W>(a.weight, j, w);
                }
                for (int k = 0; k < W; k++) {
                    sum_sq += (double)xv[k] * xv[k]; /* exact square, no overflow or underflow */
                    if (VJP)
                        dot += (double)xv[k] * w[k] * gv[k]; /* x w exact in double */
                }
            }
        group_sums(a, slots, &sum_sq, &dot);
        if (!live || (!a.out && !sums))
            continue;
        if (a.l2) { /* l2norm and its VJP, in one pass */
            l2_row<T, W, VJP>(a, x, dy, sum_sq, dot, a.out ? a.out + row * a.dim : nullptr, lane);
            continue;
        }
        const double rms = sqrt(sum_sq / (double)a.dim + a.eps);
        const double inv = 1 / rms, along = dot * inv * inv / (double)a.dim;
        float *out = a.out ? a.out + row * a.dim : nullptr;
        for (int64_t j = lane; j < chunks; j += a.group_threads) {
            float xv[W], gv[W], w[W], ov[W];
            load_chunk<W>(x + j * W, xv);
            if (VJP)
                load_chunk<W>(dy + j * W, gv);
            load_weight_chunk<T, W>(a.weight, j, w);
            for (int k = 0; k < W; k++) {
                if (!VJP)
                    ov[k] = rms == 0 ? w[k] * 0.0f : (float)((double)w[k] * ((double)xv[k] * inv));
                else if (rms == 0)
                    ov[k] = 0.0f; /* N3's convention at a zero row: no dweight term either */
                else {
                    ov[k] = (float)(((double)w[k] * gv[k] - (double)xv[k] * along) * inv);
                    if (sums)
                        sums[j * W + k] += (double)gv[k] * ((double)xv[k] * inv);
                }
            }
            if (out)
                store_chunk<W>(out + j * W, ov);
        }
    }
    if (sums && a.shared_sums)
        for (int64_t j = lane; j < chunks; j += a.group_threads)
            for (int k = 0; k < W; k++)
                a.sums_weight[group_id * a.dim + j * W + k] = sums[j * W + k];
}

/* ---- the reductions of the partial sums, in a fixed order ---- */

/* out[c] = sum over p of partials[p][c]: 32 columns per block, 8 threads per
 * column taking every 8th partial, their 8 sums added in order. */
__global__ void __launch_bounds__(NORM_THREADS) reduce_columns(const double *partials, int64_t n_partials,
                                                               int64_t dim, float *out)
{
    double *slots = (double *)lacs_shared_memory();
    const int column = (int)threadIdx.x % 32, slice = (int)threadIdx.x / 32;
    const int64_t c = (int64_t)blockIdx.x * 32 + column;
    double sum = 0;
    if (c < dim)
        for (int64_t p = slice; p < n_partials; p += NORM_THREADS / 32)
            sum += partials[p * dim + c];
    slots[threadIdx.x] = sum;
    __syncthreads();
    if (slice == 0 && c < dim) {
        double total = 0;
        for (int k = 0; k < NORM_THREADS / 32; k++)
            total += slots[k * 32 + column];
        out[c] = (float)total;
    }
}

/* out[0] = sum of partials[0 .. n): one block, strided, then block_sum. */
__global__ void __launch_bounds__(NORM_THREADS) reduce_scalar(const double *partials, int64_t n, float *out)
{
    double sum = 0;
    for (int64_t p = threadIdx.x; p < n; p += NORM_THREADS)
        sum += partials[p];
    const double total = block_sum(sum);
    if (threadIdx.x == 0)
        out[0] = (float)total;
}

/* ---- the call ---- */

/* Partial sums are kept below this many bytes of workspace (fewer row groups
 * for very wide rows). */
#define WORKSPACE_LIMIT_BYTES ((int64_t)64 << 20)
/* A block's dweight sums go to shared memory up to this size (more would cut
 * the blocks resident per SM below 3); beyond, to the workspace directly. */
#define SHARED_SUMS_LIMIT_BYTES (64 * 1024)

typedef enum {
    NORM_RMSNORM,
    NORM_RMSNORM_VJP,
    NORM_DYT,
    NORM_DYT_VJP,
    NORM_DYISRU,
    NORM_DYISRU_VJP,
    NORM_SOFTCAP,
    NORM_SOFTCAP_VJP,
    NORM_L2NORM,
    NORM_L2NORM_VJP
} norm_op;

/* The value of a [1] input (alpha, C), F32 or BF16, from its host copy. */
static float scalar_input(const lacs_cuda_tensor *t)
{
    if (t->dtype == LACS_BF16) {
        const unsigned bits = (unsigned)*(const unsigned short *)t->host << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        return v;
    }
    return *(const float *)t->host;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Blocks that fill the device: 8 resident blocks of 256 threads per SM. */
static int64_t target_blocks(void)
{
    int device = 0, sms = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1)
        sms = 108;
    return (int64_t)sms * 8;
}

/* One call's device scratch, freed on every path. */
struct workspace {
    double *base;
};

static int run_elementwise(const lacs_cuda_call *c, norm_op op, int64_t rows, int64_t dim, double param,
                           workspace *ws)
{
    const bool vjp = op == NORM_DYT_VJP || op == NORM_DYISRU_VJP || op == NORM_SOFTCAP_VJP;
    const bool dyt = op == NORM_DYT || op == NORM_DYT_VJP, softcap = op == NORM_SOFTCAP || op == NORM_SOFTCAP_VJP;
    const int W = c->bf16 ? (dim % 8 == 0 ? 8 : 1) : (dim % 4 == 0 ? 4 : 1);
    const int64_t chunks = dim / W;
    elementwise_args a = {};
    a.x = lacs_cuda_input(c, "x")->device;
    a.dy = vjp ? lacs_cuda_input(c, "dy")->device : nullptr;
    a.weight = lacs_view_of(lacs_cuda_input(c, "weight"));
    a.bias = vjp ? lacs_view_of(nullptr) : lacs_view_of(lacs_cuda_input(c, "bias"));
    a.rows = rows, a.dim = dim, a.param = (float)param, a.cap = param;
    lacs_cuda_tensor *main_out = lacs_cuda_output(c, vjp ? "dx" : "y");
    lacs_cuda_tensor *dweight = vjp ? lacs_cuda_output(c, "dweight") : nullptr;
    lacs_cuda_tensor *dbias = vjp ? lacs_cuda_output(c, "dbias") : nullptr;
    lacs_cuda_tensor *dparam = vjp ? lacs_cuda_output(c, dyt ? "dalpha" : softcap ? "dcap" : "dC") : nullptr;
    a.out = main_out ? (float *)main_out->device : nullptr;
    a.columns_per_block = (int)min64(chunks, NORM_THREADS);
    a.rows_per_pass = NORM_THREADS / a.columns_per_block;

    const int64_t grid_x = ceil_div(chunks, a.columns_per_block);
    int64_t grid_y = min64(ceil_div(rows, a.rows_per_pass), max64(1, target_blocks() / grid_x));
    const int column_outputs = (dweight != nullptr) + (dbias != nullptr);
    if (column_outputs)
        grid_y = min64(grid_y, max64(1, WORKSPACE_LIMIT_BYTES / (column_outputs * dim * 8 * a.rows_per_pass)));
    grid_y = min64(grid_y, 65535);
    if (grid_x > 0x7fffffff)
        return lacs_cuda_unsupported(c->op, "dim = %lld is too wide for one grid", (long long)dim);

    const int64_t partials = grid_y * a.rows_per_pass, blocks = grid_x * grid_y;
    if (vjp && (column_outputs || dparam)) {
        const size_t bytes = ((size_t)column_outputs * (size_t)partials * (size_t)dim + (size_t)blocks) * sizeof(double);
        if (cudaMalloc((void **)&ws->base, bytes) != cudaSuccess) {
            ws->base = nullptr;
            return lacs_cuda_error(LACS_ERR_MEMORY, c->op, "out of device memory for %zu bytes of partial sums", bytes);
        }
        double *next = ws->base;
        if (dweight)
            a.sums_weight = next, next += partials * dim;
        if (dbias)
            a.sums_bias = next, next += partials * dim;
        if (dparam)
            a.sums_param = next;
    }

    const dim3 grid((unsigned)grid_x, (unsigned)grid_y), block(NORM_THREADS);
    const size_t shared = vjp && dparam ? NORM_THREADS * sizeof(double) : 0;
    cudaError_t e;
#define LAUNCH_ELEMENTWISE(KERNEL, OP)                                                                                \
    (c->bf16 ? (W == 8 ? lacs_launch(KERNEL<OP, unsigned short, 8>, grid, block, shared, a)                           \
                       : lacs_launch(KERNEL<OP, unsigned short, 1>, grid, block, shared, a))                          \
             : (W == 4 ? lacs_launch(KERNEL<OP, float, 4>, grid, block, shared, a)                                    \
                       : lacs_launch(KERNEL<OP, float, 1>, grid, block, shared, a)))
    if (vjp)
        e = dyt       ? LAUNCH_ELEMENTWISE(elementwise_vjp, OP_DYT)
            : softcap ? LAUNCH_ELEMENTWISE(elementwise_vjp, OP_SOFTCAP)
                      : LAUNCH_ELEMENTWISE(elementwise_vjp, OP_DYISRU);
    else
        e = dyt       ? LAUNCH_ELEMENTWISE(elementwise_forward, OP_DYT)
            : softcap ? LAUNCH_ELEMENTWISE(elementwise_forward, OP_SOFTCAP)
                      : LAUNCH_ELEMENTWISE(elementwise_forward, OP_DYISRU);
#undef LAUNCH_ELEMENTWISE
    if (e != cudaSuccess)
        return lacs_cuda_launch_failed(c->op, vjp ? "elementwise_vjp" : "elementwise_forward", e);

    const dim3 column_grid((unsigned)ceil_div(dim, 32));
    if (dweight && (e = lacs_launch(reduce_columns, column_grid, block, NORM_THREADS * sizeof(double),
                                    (const double *)a.sums_weight, partials, dim, (float *)dweight->device)) !=
                       cudaSuccess)
        return lacs_cuda_launch_failed(c->op, "reduce_columns", e);
    if (dbias && (e = lacs_launch(reduce_columns, column_grid, block, NORM_THREADS * sizeof(double),
                                  (const double *)a.sums_bias, partials, dim, (float *)dbias->device)) != cudaSuccess)
        return lacs_cuda_launch_failed(c->op, "reduce_columns", e);
    if (dparam && (e = lacs_launch(reduce_scalar, dim3(1), block, NORM_THREADS * sizeof(double),
                                   (const double *)a.sums_param, blocks, (float *)dparam->device)) != cudaSuccess)
        return lacs_cuda_launch_failed(c->op, "reduce_scalar", e);
    return LACS_OK;
}

static int run_rows(const lacs_cuda_call *c, norm_op op, int64_t rows, int64_t dim, double eps, workspace *ws)
{
    const bool vjp = op == NORM_RMSNORM_VJP || op == NORM_L2NORM_VJP;
    const int W = c->bf16 ? (dim % 8 == 0 ? 8 : 1) : (dim % 4 == 0 ? 4 : 1);
    row_args a = {};
    a.l2 = op == NORM_L2NORM || op == NORM_L2NORM_VJP;
    a.max_eps = a.l2 && lacs_cuda_param(c, "convention", 0) == 1;
    a.x = lacs_cuda_input(c, "x")->device;
    a.dy = vjp ? lacs_cuda_input(c, "dy")->device : nullptr;
    a.weight = lacs_view_of(lacs_cuda_input(c, "weight"));
    a.rows = rows, a.dim = dim, a.eps = eps;
    lacs_cuda_tensor *main_out = lacs_cuda_output(c, vjp ? "dx" : "y");
    lacs_cuda_tensor *dweight = vjp && !a.l2 ? lacs_cuda_output(c, "dweight") : nullptr;
    a.out = main_out ? (float *)main_out->device : nullptr;
    /* a warp per row up to 8 chunks per lane; wider rows take the whole block */
    a.group_threads = dim / W <= 8 * 32 ? 32 : NORM_THREADS;
    const int groups = NORM_THREADS / a.group_threads;
    int64_t grid = min64(ceil_div(rows, groups), target_blocks());
    if (dweight)
        grid = min64(grid, max64(1, WORKSPACE_LIMIT_BYTES / (dim * 8 * groups)));
    grid = min64(grid, 0x7fffffff);

    const size_t slots = ROW_SLOT_BYTES;
    const size_t sums_bytes = (size_t)groups * (size_t)dim * sizeof(double);
    a.shared_sums = dweight && sums_bytes <= SHARED_SUMS_LIMIT_BYTES && slots + sums_bytes <= (size_t)c->max_shared_bytes;
    const size_t shared = slots + (a.shared_sums ? sums_bytes : 0);
    if (dweight) {
        const size_t bytes = (size_t)grid * groups * (size_t)dim * sizeof(double);
        if (cudaMalloc((void **)&ws->base, bytes) != cudaSuccess) {
            ws->base = nullptr;
            return lacs_cuda_error(LACS_ERR_MEMORY, c->op, "out of device memory for %zu bytes of partial sums", bytes);
        }
        a.sums_weight = ws->base;
    }

    const dim3 block(NORM_THREADS);
    cudaError_t e;
#define LAUNCH_ROWS(V)                                                                                                \
    (c->bf16 ? (W == 8 ? lacs_launch(row_kernel<unsigned short, 8, V>, dim3((unsigned)grid), block, shared, a)        \
                       : lacs_launch(row_kernel<unsigned short, 1, V>, dim3((unsigned)grid), block, shared, a))       \
             : (W == 4 ? lacs_launch(row_kernel<float, 4, V>, dim3((unsigned)grid), block, shared, a)                 \
                       : lacs_launch(row_kernel<float, 1, V>, dim3((unsigned)grid), block, shared, a)))
    e = vjp ? LAUNCH_ROWS(true) : LAUNCH_ROWS(false);
#undef LAUNCH_ROWS
    if (e != cudaSuccess)
        return lacs_cuda_launch_failed(c->op, "row_kernel", e);
    if (dweight && (e = lacs_launch(reduce_columns, dim3((unsigned)ceil_div(dim, 32)), block,
                                    NORM_THREADS * sizeof(double), (const double *)a.sums_weight, grid * groups, dim,
                                    (float *)dweight->device)) != cudaSuccess)
        return lacs_cuda_launch_failed(c->op, "reduce_columns", e);
    return LACS_OK;
}

int lacs_cuda_norm(const lacs_cuda_call *c)
{
    static const struct {
        const char *name;
        norm_op op;
    } ops[] = {{"rmsnorm", NORM_RMSNORM}, {"rmsnorm_vjp", NORM_RMSNORM_VJP}, {"dyt", NORM_DYT},
               {"dyt_vjp", NORM_DYT_VJP},   {"dyisru", NORM_DYISRU},           {"dyisru_vjp", NORM_DYISRU_VJP},
               {"softcap", NORM_SOFTCAP},   {"softcap_vjp", NORM_SOFTCAP_VJP}, {"l2norm", NORM_L2NORM},
               {"l2norm_vjp", NORM_L2NORM_VJP}};
    int found = -1;
    for (int i = 0; i < (int)(sizeof ops / sizeof ops[0]); i++)
        if (strcmp(c->op, ops[i].name) == 0)
            found = i;
    if (found < 0)
        return lacs_cuda_unsupported(c->op, "not an op of the norm family");
    const norm_op op = ops[found].op;

    const lacs_cuda_tensor *x = lacs_cuda_input(c, "x");
    const int64_t rows = x->shape[0], dim = x->shape[1];
    if (rows < 0 || dim < 1)
        return lacs_cuda_error(LACS_ERR_SHAPE, c->op, "rows = %lld must be >= 0 and dim = %lld >= 1",
                               (long long)rows, (long long)dim);

    /* the reference's parameter domains and messages (SPEC.md 4.14-4.18, "Errors") */
    double eps = 0, param = 0;
    if (op == NORM_RMSNORM || op == NORM_RMSNORM_VJP) {
        eps = lacs_cuda_param(c, "eps", 0);
        if (!(eps >= 0) || isinf(eps))
            return lacs_cuda_error(LACS_ERR_PARAM, c->op, "eps = %g must be finite and >= 0", eps);
    } else if (op == NORM_L2NORM || op == NORM_L2NORM_VJP) {
        eps = lacs_cuda_param(c, "eps", 0);
        const double convention = lacs_cuda_param(c, "convention", 0);
        if (!(eps >= 0))
            return lacs_cuda_error(LACS_ERR_PARAM, c->op, "eps = %g must be >= 0", eps);
        if (convention != 0 && convention != 1)
            return lacs_cuda_error(LACS_ERR_PARAM, c->op, "unknown convention %d", (int)convention);
    } else if (op == NORM_SOFTCAP || op == NORM_SOFTCAP_VJP) {
        param = lacs_cuda_param(c, "cap", 0);
        if (!(param > 0) || isinf(param))
            return lacs_cuda_error(LACS_ERR_PARAM, c->op, "cap = %g must satisfy 0 < cap < inf", param);
    } else if (op == NORM_DYT || op == NORM_DYT_VJP) {
        param = scalar_input(lacs_cuda_input(c, "alpha"));
        if (!isfinite(param))
            return lacs_cuda_error(LACS_ERR_PARAM, c->op, "alpha = %g must be finite", (double)param);
    } else {
        param = scalar_input(lacs_cuda_input(c, "C"));
        if (!(param >= 0) || isinf(param))
            return lacs_cuda_error(LACS_ERR_PARAM, c->op, "C = %g must be finite and >= 0", (double)param);
    }
    if (rows == 0)
        return LACS_OK; /* the outputs, sums included, are already zero */

    workspace ws = {nullptr};
    const bool row_op = op == NORM_RMSNORM || op == NORM_RMSNORM_VJP || op == NORM_L2NORM || op == NORM_L2NORM_VJP;
    const int rc = row_op ? run_rows(c, op, rows, dim, eps, &ws) : run_elementwise(c, op, rows, dim, param, &ws);
    if (ws.base)
        cudaFree(ws.base); /* waits for the kernels that use it */
    return rc;
}
