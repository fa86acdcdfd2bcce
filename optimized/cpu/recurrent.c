/* PLACEHOLDER: the recurrent family (issue 6). */
#include "cpu.h"
int lacs_cpu_recurrent(const lacs_cpu_call *c) { (void)c; return LACS_UNSUPPORTED; }

double lacs_cpu_chunk_flops(int64_t T, int64_t K, int64_t V)
{
    double flops = 0;
    for (int64_t t0 = 0; t0 < T; t0 += LACS_CPU_CHUNK) {
        const double n = (double)(T - t0 < LACS_CPU_CHUNK ? T - t0 : LACS_CPU_CHUNK);
        flops += 6 * n * K * V + 6 * n * n * K + 4 * n * n * V + n * n * n / 3;
    }
    return flops;
}
