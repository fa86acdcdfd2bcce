/* An example plugin that breaks in the ways the checker must survive:
 * delta_rule dereferences a NULL pointer (SIGSEGV), retention returns the
 * error code 7; linear_attn is computed correctly and everything else is
 * LACS_UNSUPPORTED. Each case runs in its own child process, so the crash
 * fails one case and the run goes on. */
#include <string.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

/* volatile: the compiler cannot see that the pointer is NULL, so the store is
 * a real memory access (not a trap instruction it could substitute). */
static int *volatile nowhere = NULL;

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "delta_rule") == 0) {
        *nowhere = 1;
        return 0;
    }
    if (strcmp(op, "retention") == 0)
        return 7;
    if (strcmp(op, "linear_attn") == 0)
        return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 0);
    return LACS_UNSUPPORTED;
}
