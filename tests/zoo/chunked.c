/* Zoo member `chunked` (legitimate): the recurrent ops computed the way
 * optimized kernels compute them, chunk by chunk, in fp32.
 *
 * delta_rule, gated_delta_rule (scalar g and per-channel gk), comba and efla
 * through the chunkwise WY/UT form (H7: T = (I + A)^{-1} by forward
 * substitution, W = T K, U = T V, v_new = U - W S), and linear_attn,
 * linear_attn_postnorm, retention, simple_gla, gla through the chunked form
 * (intra-chunk matrix, inter-chunk state): legit_chunked.h has the algorithm,
 * fla's chunk kernels in plain C. Chunk size from LACS_ZOO_CHUNK (16, 32 or
 * 64; default 64). Every other op is LACS_UNSUPPORTED. The _fma build does
 * each multiply-add with one rounding (fmaf).
 *
 * Legitimate: the WY form is algebraically the recurrence (SPEC.md 4.4, H6 =
 * H7), and fp32 is the tier's own precision; it reorders every sum and, in
 * the delta family, passes rounding through the triangular solve, which the
 * tolerance must allow.
 */
#include "legit_chunked.h"

__attribute__((visibility("default"))) int lacs_plugin_run(const char *op, const lacs_tensor *inputs,
                                                            int n_inputs, const lacs_param *params,
                                                            int n_params, lacs_tensor *outputs,
                                                            int n_outputs)
{
    return chunk_run("chunked", 0, op, inputs, n_inputs, params, n_params, outputs, n_outputs);
}
