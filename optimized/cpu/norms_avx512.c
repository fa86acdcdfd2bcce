/* builtin:cpu, the norm family with AVX-512 (F, BW, VL, DQ) and FMA: the one
 * algorithm of norms_vector.h over the primitives of simd_avx512.h (16 fp32
 * lanes, tails by masks). Called only when dispatch.c chose LACS_ISA_AVX512. */
#include "simd_avx512.h"

#include "cpu.h"

#define NORM_KERNELS lacs_cpu_norm_kernels_avx512
/* DyT and its VJP in the bf16 tier by table (norms.h): sixteen lanes' lookups cost less than the exp and the
 * division; the VJP's pairs (over both signs, a load per lane) 0.83-0.88 times its arithmetic's time in the
 * caches, the same from memory (optimized/cpu/README.md section 6). */
#define NORMS_DYT_TABLE
#define NORMS_DYT_VJP_TABLE
#include "norms_vector.h"
