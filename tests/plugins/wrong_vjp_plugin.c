/* An example backward with a bug at one token of one head of one gradient:
 * the gated delta rule's VJP (good_vjp_plugin.c) but for dv of value head 1
 * at the 64th token of each call (t = 63, the last token of the first chunk
 * of 64), taken without beta. `lacs explain gated_delta_rule_vjp-fp32-mixed
 * --impl build/plugins/wrong_vjp_plugin.so` names dv, head 1 and t = 63. */
#include <string.h>

#include "gated_delta_rule_vjp_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "gated_delta_rule_vjp") != 0)
        return LACS_UNSUPPORTED;
    const vjp_bugs bug = {.dv_without_beta_token = 63, .dv_without_beta_head = 1, .chunk = 0};
    return gated_delta_rule_vjp_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, bug);
}
