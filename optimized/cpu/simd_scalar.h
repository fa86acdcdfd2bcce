/* builtin:cpu: the primitives of simd_avx512.h (which lists them) for one lane
 * of plain C, for the files named *_scalar.c: the x86-64 baseline
 * (LACS_ISA=scalar, CPUs without AVX2), so that an algorithm written over the
 * primitives runs there unchanged. A mask is 0 or 1; fp32 operations are the
 * C operators. One difference: v_fma, v_fnma and v_fms are a product and a
 * sum, two roundings, because the baseline has no FMA (fmaf would be emulated
 * in software); the algorithms that need the single rounding (the norms'
 * error-free transformations) are not built on this layer. Only the fp32
 * primitives: the norms' double halves have no scalar layer, the scalar norms
 * being norms_scalar.c's own double algorithm.
 */
#ifndef LACS_CPU_SIMD_SCALAR_H
#define LACS_CPU_SIMD_SCALAR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define SIMD_ISA "scalar"
#define SIMD_LANES 1

typedef float vfloat;
typedef int vmask;

static inline vmask vm_first(int64_t count) { return count >= 1; }
static inline int vm_all(vmask m) { return m; }
static inline int vm_none(vmask m) { return !m; }
static inline vmask vm_and(vmask a, vmask b) { return a && b; }
static inline vmask vm_or(vmask a, vmask b) { return a || b; }

static inline vfloat v_load(const float *p) { return *p; }
static inline void v_store(float *p, vfloat v) { *p = v; }
static inline vfloat v_load_first(const float *p, int64_t count) { return count >= 1 ? *p : 0.0f; }
static inline void v_store_first(float *p, vfloat v, int64_t count)
{
    if (count >= 1)
        *p = v;
}
static inline void v_stream(float *p, vfloat v) { *p = v; }
static inline vfloat v_load_bf16(const uint16_t *p)
{
    const uint32_t bits = (uint32_t)*p << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline vfloat v_load_bf16_first(const uint16_t *p, int64_t count) { return count >= 1 ? v_load_bf16(p) : 0.0f; }
static inline vfloat v_table_bf16_magnitude(const float *table, const uint16_t *p) { return table[*p & 0x7fff]; }
static inline void v_table_bf16_pair(const float *table, const uint16_t *p, vfloat *first, vfloat *second)
{
    *first = table[2 * *p];
    *second = table[2 * *p + 1];
}
static inline void v_store_pair(float *p, vfloat a, vfloat b)
{
    p[0] = a;
    p[1] = b;
}
static inline vfloat v_load_any(const void *p, int bf16, int64_t i, int64_t count)
{
    if (count < 1)
        return 0.0f;
    return bf16 ? v_load_bf16((const uint16_t *)p + i) : ((const float *)p)[i];
}

static inline vfloat v_lane_index(void) { return 0.0f; }
static inline vfloat v_set1(float x) { return x; }
static inline vfloat v_zero(void) { return 0.0f; }
static inline vfloat v_add(vfloat a, vfloat b) { return a + b; }
static inline vfloat v_sub(vfloat a, vfloat b) { return a - b; }
static inline vfloat v_mul(vfloat a, vfloat b) { return a * b; }
static inline vfloat v_div(vfloat a, vfloat b) { return a / b; }
static inline vfloat v_sqrt(vfloat a) { return sqrtf(a); }
static inline vfloat v_abs(vfloat a) { return fabsf(a); }
static inline vfloat v_fma(vfloat a, vfloat b, vfloat c) { return a * b + c; }
static inline vfloat v_fnma(vfloat a, vfloat b, vfloat c) { return c - a * b; }
static inline vfloat v_fms(vfloat a, vfloat b, vfloat c) { return a * b - c; }
/* b when either is NaN, as x86's minps and maxps */
static inline vfloat v_min(vfloat a, vfloat b) { return a < b ? a : b; }
static inline vfloat v_max(vfloat a, vfloat b) { return a > b ? a : b; }
static inline vfloat v_round(vfloat v) { return nearbyintf(v); }
static inline vfloat v_round_small(vfloat v) { return nearbyintf(v); }
static inline vfloat v_from_bits(vfloat m)
{
    const uint32_t bits = (uint32_t)m;
    vfloat out;
    memcpy(&out, &bits, sizeof out);
    return out;
}
static inline vfloat v_copysign(vfloat magnitude, vfloat sign) { return copysignf(magnitude, sign); }
static inline vfloat v_or_sign(vfloat magnitude, vfloat sign) { return signbit(sign) ? -fabsf(magnitude) : magnitude; }
static inline vfloat v_xor_sign(vfloat v, vfloat sign) { return signbit(sign) ? -v : v; }
static inline vmask vm_lt(vfloat a, vfloat b) { return a < b; }
static inline vmask vm_le(vfloat a, vfloat b) { return a <= b; }
static inline vmask vm_gt(vfloat a, vfloat b) { return a > b; }
static inline vmask vm_ge(vfloat a, vfloat b) { return a >= b; }
static inline vmask vm_ne(vfloat a, vfloat b) { return !(a == b); }
static inline vfloat v_select(vmask m, vfloat a, vfloat b) { return m ? b : a; }
static inline vfloat v_zero_unless(vmask m, vfloat v) { return m ? v : 0.0f; }
static inline vfloat v_scale_pow2(vfloat p, vfloat n) { return ldexpf(p, (int)fmaxf(fminf(n, 300.0f), -300.0f)); }
static inline vfloat v_pow2(vfloat n) { return ldexpf(1.0f, (int)n); }
static inline vfloat v_round_small_pow2(vfloat v, vfloat *power)
{
    const vfloat n = v_round_small(v);
    *power = v_pow2(n);
    return n;
}
static inline vfloat v_scale_pow2_normal(vfloat p, vfloat n) { return p * v_pow2(n); }
static inline vfloat v_reciprocal(vfloat d) { return 1.0f / d; }
static inline vfloat v_reciprocal_fine(vfloat d) { return 1.0f / d; }
static inline float v_reduce_add(vfloat v) { return v; }
static inline float v_reduce_max(vfloat v) { return v; }


static inline void simd_transpose_8x8(const float *in, int64_t ldi, float *out, int64_t ldo)
{
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++)
            out[j * ldo + i] = in[i * ldi + j];
}
static inline void simd_prefetch(const void *p) { (void)p; }
static inline void simd_store_fence(void) {}

#endif
