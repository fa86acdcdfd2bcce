/* builtin:cpu, the recurrent family's kernels for the x86-64 baseline, one
 * lane of plain C (the bf16 tier's inputs widened, fp32 products): the one
 * algorithm of recurrent_kernels.h over the primitives of simd_scalar.h.
 * Called for LACS_ISA_SCALAR. */
#include "simd_scalar.h"

#include "simd_math.h"

#define RECURRENT_KERNELS lacs_cpu_recurrent_kernels_scalar
#include "recurrent_kernels.h"
