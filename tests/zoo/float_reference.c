/* Zoo member `float_reference` (legitimate): the reference itself, every op,
 * computed in binary32.
 *
 * The same source as liblacs's reference, compiled with -DLACS_REAL_FLOAT
 * (real = float: every intermediate, state and sum is a float), reached
 * through checker/ops.c's lacs_reference_run, whose second precision is float
 * in this build (see the Makefile's $(BUILD)/zoo/float_reference.so). It is
 * the plainest fp32 implementation there is: the recurrences token by token,
 * the attention forms and MesaNet's Cholesky solve, the norms and their VJPs,
 * each rounded to float at every step. If the tolerance model rejected it, the
 * model would be wrong, not the member.
 *
 * The _fma variant is the same source with the compiler free to contract
 * a * b + c into fused multiply-adds (-ffp-contract=fast -mfma where the CPU
 * has FMA; the Makefile says why that is acceptable for a test artifact).
 *
 * Built with -fvisibility=hidden: lacs_plugin_run is the one symbol exported,
 * so the reference inside cannot clash with a liblacs in the same process.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lacs/ops.h"
#include "lacs/plugin.h"
#include "lacs/safetensors.h"
#include "lacs/types.h"

/* Only the parameters the op reads: lacs_reference_run refuses any other. */
static int op_params(const lacs_op_info *info, const lacs_param *params, int n_params, lacs_param *kept)
{
    int n_kept = 0;
    for (int i = 0; i < n_params && n_kept < 16; i++)
        if (params[i].name && lacs_word_in_list(info->params, params[i].name))
            kept[n_kept++] = params[i];
    return n_kept;
}

__attribute__((visibility("default"))) int lacs_plugin_run(const char *op, const lacs_tensor *inputs,
                                                            int n_inputs, const lacs_param *params,
                                                            int n_params, lacs_tensor *outputs,
                                                            int n_outputs)
{
#if defined(__FMA__) && defined(__x86_64__)
    /* Compiled with -mfma: refuse to run on a CPU without FMA instructions. */
    if (!__builtin_cpu_supports("fma")) {
        fprintf(stderr, "float_reference_fma: this CPU has no FMA instructions\n");
        return LACS_UNSUPPORTED;
    }
#endif
    const lacs_op_info *info = lacs_op_find(op);
    if (!info)
        return LACS_UNSUPPORTED;
    lacs_param kept[16];
    const int n_kept = op_params(info, params, n_params, kept);
    /* long_double = 1 selects this build's second precision: float */
    const int rc = lacs_reference_run(op, inputs, n_inputs, kept, n_kept, outputs, n_outputs, 1);
    if (rc != LACS_OK)
        fprintf(stderr, "float_reference: %s\n", lacs_last_error());
    return rc;
}
