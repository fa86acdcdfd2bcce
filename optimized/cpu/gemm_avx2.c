/* PLACEHOLDER until the avx2 kernels land. */
#include "cpu.h"
const lacs_cpu_gemm lacs_cpu_gemm_avx2 = {"avx2", 0, 0};
