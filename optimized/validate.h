/* The checks every built-in optimized implementation (builtin:cpu,
 * builtin:cuda) makes on a plugin-ABI call before computing anything
 * (optimized/cpu/README.md section 1, optimized/cuda/README.md section 1):
 * one implementation, in liblacs, so that the two accept and refuse the same
 * calls with the same words.
 */
#ifndef LACS_OPTIMIZED_VALIDATE_H
#define LACS_OPTIMIZED_VALIDATE_H

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

#endif
