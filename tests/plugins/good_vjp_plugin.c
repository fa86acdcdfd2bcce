/* An example plugin (ABI v1, include/lacs/plugin.h) for a backward: the
 * gated delta rule's VJP (SPEC.md 4.19; scalar g or KDA's per-channel gk),
 * token by token in binary32; every other op is LACS_UNSUPPORTED (a SKIP).
 * The inputs are the forward's plus the cotangents `do` and `dht`, the
 * outputs the gradients named like the goldens (dq, dk, dv, dbeta, dg or
 * dgk, dh0); a state-carry case runs it twice (SPEC.md 11.5).
 *
 *   make build/plugins/good_vjp_plugin.so
 *   build/lacs check --impl build/plugins/good_vjp_plugin.so --op gated_delta_rule_vjp
 */
#include <string.h>

#include "gated_delta_rule_vjp_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "gated_delta_rule_vjp") != 0)
        return LACS_UNSUPPORTED;
    const vjp_bugs none = {.dv_without_beta_token = -1, .dv_without_beta_head = -1, .chunk = 0};
    return gated_delta_rule_vjp_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, none);
}
