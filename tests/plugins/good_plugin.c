/* An example plugin (ABI v1, include/lacs/plugin.h): linear attention (H2)
 * in binary32; every other op is LACS_UNSUPPORTED (reported as SKIP).
 *
 *   make build/plugins/good_plugin.so
 *   build/lacs check --impl build/plugins/good_plugin.so --op linear_attn
 */
#include <string.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 0);
}
