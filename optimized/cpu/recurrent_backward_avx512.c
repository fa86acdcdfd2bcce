/* builtin:cpu, the recurrent family's backward kernels for AVX-512 (F, BW, VL, DQ) and FMA, 16 fp32 lanes:
 * the one algorithm of recurrent_backward_kernels.h over the primitives of
 * simd_avx512.h. Called only where dispatch.c chose LACS_ISA_AVX512. */
#include "simd_avx512.h"

#include "simd_math.h"

#define RECURRENT_BACKWARD_KERNELS lacs_cpu_backward_kernels_avx512
#include "recurrent_backward_kernels.h"
