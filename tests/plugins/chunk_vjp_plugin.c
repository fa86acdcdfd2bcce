/* An example backward with a chunking bug: the gated delta rule's VJP
 * (good_vjp_plugin.c) computed as if in chunks of 64 tokens whose backward
 * does not receive the state's cotangent from the next chunk (each chunk
 * but the last starts from dh = 0). The error starts at the last token of a
 * chunk and spreads to the earlier ones: `lacs explain
 * gated_delta_rule_vjp-fp32-t129 --impl build/plugins/chunk_vjp_plugin.so`
 * says it starts at t = 127, the last token of the second chunk of 64. */
#include <string.h>

#include "gated_delta_rule_vjp_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "gated_delta_rule_vjp") != 0)
        return LACS_UNSUPPORTED;
    const vjp_bugs bug = {.dv_without_beta_token = -1, .dv_without_beta_head = -1, .chunk = 64};
    return gated_delta_rule_vjp_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, bug);
}
