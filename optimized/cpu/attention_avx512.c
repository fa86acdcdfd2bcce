/* builtin:cpu attention, AVX-512: 16 fp32 lanes: the row kernels of
 * attention_rows.h over the primitives of simd_avx512.h. Called only where
 * dispatch.c chose LACS_ISA_AVX512. */
#include "simd_avx512.h"

#include "simd_math.h"

#define ATTENTION_LOGITS_ROW lacs_cpu_attention_logits_row_avx512
#define ATTENTION_EXP_ROW lacs_cpu_attention_exp_row_avx512
#define ATTENTION_ADJOINT_ROW lacs_cpu_attention_adjoint_row_avx512
#define ATTENTION_TRANSPOSE lacs_cpu_attention_transpose_avx512
#define ATTENTION_SOLVE_ROWS lacs_cpu_attention_solve_rows_avx512
#include "attention_rows.h"
