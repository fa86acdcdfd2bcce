/* An example plugin with a chunking bug: linear attention (H2) computed as if
 * in chunks of 64 tokens whose state is not handed to the next chunk (each
 * chunk starts from zeros). Every case longer than 64 tokens fails, first at
 * t = 64: `lacs explain linear_attn-fp32-t129 --impl build/plugins/chunk_plugin.so`
 * says so. */
#include <string.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 64);
}
