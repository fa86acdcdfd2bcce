/* lacs: builtin:cpu, the optimized CPU implementation (optimized/cpu/README.md).
 *
 * Every op of the golden vectors, fast: the recurrent family by the chunkwise
 * WY/UT algorithm (chunks of 32, GEMMs between chunks) with a recurrent path
 * for decoding, the attention forms blocked with an online softmax, the norms
 * vectorized. fp32 inputs are computed in fp32; bf16 inputs with fp32
 * accumulation and an fp32 state (AVX512-BF16's products where the CPU has
 * them and runs them faster than fp32's: lacs_cpu_bf16_products).
 *
 * The instruction set is chosen at run time: the best the CPU has, or the one
 * named by the environment variable LACS_ISA (avx512, avx2, scalar; one the CPU
 * lacks is an error). The work is spread over LACS_THREADS threads (default:
 * the online CPUs) by (sequence, head) for the sequence ops, by rows for the
 * norms.
 */
#ifndef LACS_CPU_H
#define LACS_CPU_H

#include "lacs/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin ABI's call (lacs/plugin.h) on builtin:cpu: inputs F32 or BF16
 * (cu_seqlens I64), outputs F32 with the names and shapes
 * lacs_reference_output_shapes gives. Returns LACS_OK or an error code
 * (lacs/types.h) with lacs_last_error() naming the problem. */
int lacs_cpu_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                 lacs_tensor *outputs, int n_outputs);

/* The same as an lacs_impl_fn (lacs/check.h; context unused). */
int lacs_impl_cpu(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                  const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs);

/* The instruction set builtin:cpu runs with ("avx512", "avx2" or "scalar"),
 * or NULL with lacs_last_error() set when LACS_ISA names one that is unknown
 * or that this CPU lacks. */
const char *lacs_cpu_isa_name(void);
/* How the bf16 tier multiplies under the chosen instruction set: "native"
 * (avx512's vdpbf16ps on bf16 operands) or "widened" (operands widened
 * exactly to fp32, fp32 FMAs: avx2, scalar, and avx512 where vdpbf16ps is
 * not faster than fp32). LACS_CPU_BF16_PRODUCTS=native|widened forces one
 * under avx512; unset, native on AMD's cores and widened elsewhere
 * (optimized/cpu/README.md section 1). NULL with lacs_last_error() set when
 * LACS_ISA or LACS_CPU_BF16_PRODUCTS is invalid. */
const char *lacs_cpu_bf16_products(void);
/* Whether this CPU can run instruction set `name` ("avx512": AVX-512 F, BW,
 * VL, DQ and BF16 with FMA; "avx2": AVX2 and FMA; "scalar": always). */
int lacs_cpu_isa_supported(const char *name);
/* LACS_OK when LACS_ISA, LACS_CPU_BF16_PRODUCTS and LACS_THREADS (any may be
 * unset) are valid on this CPU, else LACS_ERR_PARAM with lacs_last_error() saying which and why;
 * lacs_cpu_run checks the same on every call. */
int lacs_cpu_environment_check(void);
/* Frees the workspaces builtin:cpu keeps from one call to the next (at most
 * 16 buffers, 512 MiB in all; optimized/cpu/cpu.h says why), returning their
 * memory to the system. Safe at any time but during a call of lacs_cpu_run
 * on another thread. */
void lacs_cpu_release_scratch(void);
/* The number of threads builtin:cpu uses (LACS_THREADS, or the online CPUs). */
int lacs_cpu_threads(void);
/* The ops builtin:cpu implements, space-separated (its declaration, as a
 * plugin's lacs_plugin_describe: every op of lacs_ops() but the families it
 * returns LACS_UNSUPPORTED for). */
const char *lacs_cpu_declared_ops(void);

#ifdef __cplusplus
}
#endif

#endif
