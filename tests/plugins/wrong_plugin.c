/* An example plugin with a realistic bug: linear attention (H2) that ignores
 * the `scale` parameter (o_t = h_t^T q_t). Every linear_attn case must FAIL
 * (scale is K^-1/2 or a custom value, never 1, in the catalog). */
#include <string.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 0, 0);
}
