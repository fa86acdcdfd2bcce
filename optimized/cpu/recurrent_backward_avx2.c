/* builtin:cpu, the recurrent family's backward kernels for AVX2 and FMA, 8 fp32 lanes:
 * the one algorithm of recurrent_backward_kernels.h over the primitives of
 * simd_avx2.h. Called only where dispatch.c chose LACS_ISA_AVX2. */
#include "simd_avx2.h"

#include "simd_math.h"

#define RECURRENT_BACKWARD_KERNELS lacs_cpu_backward_kernels_avx2
#include "recurrent_backward_kernels.h"
