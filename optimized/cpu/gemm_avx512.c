/* PLACEHOLDER until the avx512 kernels land. */
#include "cpu.h"
const lacs_cpu_gemm lacs_cpu_gemm_avx512 = {"avx512", 0, 0};
