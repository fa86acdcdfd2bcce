/* builtin:cpu, the recurrent family's kernels for AVX-512 (F, BW, VL, DQ,
 * BF16) and FMA, 16 fp32 lanes and bf16 products: the one algorithm of
 * recurrent_kernels.h over the primitives of simd_avx512.h. Called only
 * where dispatch.c chose LACS_ISA_AVX512. */
#include "simd_avx512.h"

#include "simd_math.h"

#define RECURRENT_KERNELS lacs_cpu_recurrent_kernels_avx512
#include "recurrent_kernels.h"
