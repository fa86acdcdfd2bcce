/* What every built-in optimized implementation (builtin:cpu, builtin:cuda)
 * shares, one implementation in liblacs (optimized/validate.c): the checks it
 * makes on a plugin-ABI call before computing anything (optimized/cpu/README.md
 * section 1, optimized/cuda/README.md section 1), so that the two accept and
 * refuse the same calls with the same words; and the helpers of a call its
 * family files use, under typed names (lacs_cpu_input/output/param/error in
 * optimized/cpu/cpu.h, lacs_cuda_* in optimized/cuda/cuda.h).
 */
#ifndef LACS_OPTIMIZED_VALIDATE_H
#define LACS_OPTIMIZED_VALIDATE_H

#include <stdarg.h>
#include <stddef.h>

#include "lacs/ops.h"
#include "lacs/plugin.h"

/* The op is known; input names and shapes are the reference's own
 * (lacs_reference_output_shapes); every parameter is one the op reads; inputs
 * are F32 or BF16 (I64 for cu_seqlens); every output is one the op gives, F32,
 * with the shape the inputs give. `impl` names the implementation in errors
 * ("builtin:cpu"). On LACS_OK, *info is the op's entry and *bf16 the tier:
 * q's (x's for the norms) dtype is BF16. Other inputs may be F32 in either
 * tier: a state carried from an earlier call (h0 = the F32 ht returned) is
 * one. */
int lacs_builtin_validate_call(const char *impl, const char *op, const lacs_tensor *inputs, int n_inputs,
                               const lacs_param *params, int n_params, const lacs_tensor *outputs, int n_outputs,
                               const lacs_op_info **info, int *bf16);

/* The recurrent family and mesa_net: the checks lacs_reference_output_shapes
 * leaves to the ops (H >= 1, HV a multiple of H, the cu_seqlens table, a
 * finite scale), by the reference's own lacs_internal_validate. */
int lacs_builtin_validate_sequences(const char *op, const lacs_tensor *inputs, int n_inputs,
                                    const lacs_param *params, int n_params);

/* ---- the helpers of a call ---- */

/* The index of the tensor named `name` among the n tensors at `tensors`,
 * `stride` bytes apart, each starting with its name (const char *: lacs_tensor,
 * lacs_cuda_tensor); -1 when none is. */
int lacs_builtin_find_named(const void *tensors, size_t stride, int n, const char *name);
/* Parameter `name` of `op`: the value given, else the op's default for these
 * inputs (lacs_reference_param_default, the one place the defaults live),
 * else `fallback`. */
double lacs_builtin_param(const char *op, const lacs_param *params, int n_params, const lacs_tensor *inputs,
                          int n_inputs, const char *name, double fallback);
/* Records the error ("op: message", lacs_last_error) and returns `code`. */
int lacs_builtin_verror(int code, const char *op, const char *fmt, va_list args);

#endif
