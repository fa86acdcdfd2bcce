/* An example plugin that never returns on one case: linear_attn with T = 1
 * waits forever (the checker's --timeout must kill it); other linear_attn
 * cases are computed correctly, every other op is LACS_UNSUPPORTED. */
#include <string.h>
#include <unistd.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    const lacs_tensor *q = find_tensor(inputs, n_inputs, "q");
    if (q && q->ndim == 4 && q->shape[1] == 1)
        for (;;)
            pause(); /* until a signal ends the process */
    return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 0);
}
