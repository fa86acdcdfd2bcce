/* builtin:cpu, the recurrent family's kernels for AVX2 and FMA, 8 fp32 lanes
 * (the bf16 tier's inputs widened, fp32 products): the one algorithm of
 * recurrent_kernels.h over the primitives of simd_avx2.h. Called only where
 * dispatch.c chose LACS_ISA_AVX2. */
#include "simd_avx2.h"

#include "simd_math.h"

#define RECURRENT_KERNELS lacs_cpu_recurrent_kernels_avx2
#include "recurrent_kernels.h"
