/* builtin:cpu, the norm family with AVX2 and FMA: the one algorithm of
 * norms_vector.h over the primitives of simd_avx2.h (8 fp32 lanes). Called
 * only when dispatch.c chose LACS_ISA_AVX2. */
#include "simd_avx2.h"

#include "cpu.h"

#define NORM_KERNELS lacs_cpu_norm_kernels_avx2
/* DyT and its VJP in the bf16 tier by table (norms.h): under avx2 eight lanes' lookups cost less than the
 * exp and the division (optimized/cpu/README.md section 6). */
#define NORMS_DYT_TABLE
#define NORMS_DYT_VJP_TABLE
#include "norms_vector.h"
