/* builtin:cpu, the norm family with AVX2 and FMA: the one algorithm of
 * norms_vector.h over the primitives of simd_avx2.h (8 fp32 lanes). Called
 * only when dispatch.c chose LACS_ISA_AVX2. */
#include "simd_avx2.h"

#include "cpu.h"

#define NORM_KERNELS lacs_cpu_norm_kernels_avx2
#include "norms_vector.h"
