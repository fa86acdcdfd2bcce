/* builtin:cpu, the recurrent family's backward kernels for the x86-64 baseline, one lane of plain C:
 * the one algorithm of recurrent_backward_kernels.h over the primitives of
 * simd_scalar.h. Called only where dispatch.c chose LACS_ISA_SCALAR. */
#include "simd_scalar.h"

#include "simd_math.h"

#define RECURRENT_BACKWARD_KERNELS lacs_cpu_backward_kernels_scalar
#include "recurrent_backward_kernels.h"
