/* A shared library that is not a lacs plugin: it exports no lacs_plugin_run
 * (a typo in the name, as a plugin author might make). The checker must
 * refuse it with one line naming the library and the symbol, exit status 2. */
#include "lacs/plugin.h"

int lacs_plugin_runs(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                     int n_params, lacs_tensor *outputs, int n_outputs);

int lacs_plugin_runs(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                     int n_params, lacs_tensor *outputs, int n_outputs)
{
    (void)op, (void)inputs, (void)n_inputs, (void)params, (void)n_params, (void)outputs, (void)n_outputs;
    return 0;
}
