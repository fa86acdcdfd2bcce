/* A plugin whose constructor calls exit(0) as it is loaded (tests/hostile/): the checker must not take
 * that for a run in which every case passed. Otherwise a correct linear attention. */
#include <stdlib.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

__attribute__((constructor)) static void leave_at_once(void) { exit(0); }

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 0);
}
