/* Zoo member `fla_like_bf16` (legitimate, bf16 tier only): the chunked
 * algorithm of `chunked` as flash-linear-attention runs it on bf16 tensors.
 *
 * The inputs are the bf16 tier's own (a case whose q is not BF16 is
 * LACS_UNSUPPORTED); every product accumulates in fp32; and the values fla
 * holds in bfloat16 are rounded to it (round to nearest even) where fla
 * rounds them: the per-chunk states the output kernel reads, T, W, U and
 * v_new, the operands fla casts before its tensor-core products, the
 * intra-chunk attention matrix before it multiplies v_new, and the output
 * (chunk_config.bf16 in legit_chunked.h lists them). The running state between
 * chunks and the final state ht stay fp32, as in fla. Chunk size from
 * LACS_ZOO_CHUNK (16, 32 or 64; default 64).
 *
 * Legitimate: this is what users of fla's bf16 kernels get; a bf16 tolerance
 * that rejected it would reject the field's reference implementation.
 */
#include "legit_chunked.h"

__attribute__((visibility("default"))) int lacs_plugin_run(const char *op, const lacs_tensor *inputs,
                                                            int n_inputs, const lacs_param *params,
                                                            int n_params, lacs_tensor *outputs,
                                                            int n_outputs)
{
    return chunk_run("fla_like_bf16", 1, op, inputs, n_inputs, params, n_params, outputs, n_outputs);
}
