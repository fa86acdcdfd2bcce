/* Zoo member `float_reference` (legitimate): the reference itself, every op,
 * computed in binary32.
 *
 * The same source as liblacs's reference, compiled with -DLACS_REAL_FLOAT
 * (real = float: every intermediate, state and sum is a float), reached
 * through reference/ops.c's lacs_reference_run, whose second precision is float
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
 *
 * LACS_ZOO_BUG selects a corruption of the outputs, the same for every op
 * (SPEC.md 11.6; the bugs any kernel can have whatever its op):
 *   all_zero      every output left at zero (a kernel that never writes);
 *   half_outputs  every output times 0.5;
 *   head_scaled   one block of every output times 1 + LACS_ZOO_ERROR (default
 *                 0.01): the last value head of o and of a state, the middle
 *                 row of a norm's [rows, dim] output, the whole of a parameter
 *                 gradient (a head computed with a wrong factor);
 *   elements_off  five elements of every output, spread evenly, times
 *                 1 + LACS_ZOO_ERROR (a race: a handful of elements written
 *                 from a stale or another thread's partial value).
 * Unset or "none" is the legitimate member; any other name is an error.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

typedef enum { CORRUPT_NONE, CORRUPT_ALL_ZERO, CORRUPT_HALF, CORRUPT_HEAD, CORRUPT_ELEMENTS } corruption;

static int corruption_from_environment(corruption *which, double *error)
{
    const char *name = getenv("LACS_ZOO_BUG"), *size = getenv("LACS_ZOO_ERROR");
    static const struct {
        const char *name;
        corruption which;
    } names[] = {{"all_zero", CORRUPT_ALL_ZERO}, {"half_outputs", CORRUPT_HALF}, {"head_scaled", CORRUPT_HEAD},
                 {"elements_off", CORRUPT_ELEMENTS}};
    *which = CORRUPT_NONE;
    *error = 0.01;
    if (size && *size) {
        char *end;
        *error = strtod(size, &end);
        if (*end || !(*error > -1 && *error < 1e6)) {
            fprintf(stderr, "float_reference: LACS_ZOO_ERROR=%s is not a relative error above -1\n", size);
            return -1;
        }
    }
    if (!name || !*name || strcmp(name, "none") == 0)
        return 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            *which = names[i].which;
            return 0;
        }
    fprintf(stderr, "float_reference: LACS_ZOO_BUG=%s is not all_zero, half_outputs, head_scaled, elements_off "
                    "(or none)\n", name);
    return -1;
}

/* The corruption of one F32 output (see the top of the file). */
static void corrupt(corruption which, double error, const lacs_op_info *info, lacs_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    float *x = t->data;
    const float factor = (float)(1 + error);
    if (which == CORRUPT_ALL_ZERO || which == CORRUPT_HALF) {
        for (int64_t i = 0; i < n; i++)
            x[i] = which == CORRUPT_HALF ? 0.5f * x[i] : 0;
    } else if (which == CORRUPT_ELEMENTS) {
        for (int64_t i = 0; i < 5 && n > 0; i++)
            x[(2 * i + 1) * n / 10] *= factor;
    } else if (which == CORRUPT_HEAD) {
        /* the block: head HV - 1 of o [B, T, HV, V] or of a state [N, HV, K, V'], row rows / 2 of [rows, dim] */
        int64_t outer = 1, heads = 1, inner = n, head = 0;
        if (info->family != LACS_FAMILY_NORM && t->ndim == 4) {
            const int head_dim = strcmp(t->name, "o") == 0 ? 2 : 1;
            heads = t->shape[head_dim];
            head = heads - 1;
            outer = head_dim == 2 ? t->shape[0] * t->shape[1] : t->shape[0];
            inner = n / (outer * (heads > 0 ? heads : 1));
        } else if (info->family == LACS_FAMILY_NORM && t->ndim == 2) {
            heads = t->shape[0];
            head = heads / 2;
            inner = t->shape[1];
        }
        for (int64_t b = 0; b < outer && heads > 0; b++)
            for (int64_t i = 0; i < inner; i++)
                x[(b * heads + head) * inner + i] *= factor;
    }
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
    corruption which;
    double error;
    if (corruption_from_environment(&which, &error))
        return 2;
    lacs_param kept[16];
    const int n_kept = op_params(info, params, n_params, kept);
    /* long_double = 1 selects this build's second precision: float */
    const int rc = which == CORRUPT_ALL_ZERO ? LACS_OK
                                             : lacs_reference_run(op, inputs, n_inputs, kept, n_kept, outputs, n_outputs, 1);
    if (rc != LACS_OK)
        fprintf(stderr, "float_reference: %s\n", lacs_last_error());
    for (int i = 0; i < n_outputs && rc == LACS_OK && which != CORRUPT_NONE; i++)
        if (outputs[i].dtype == LACS_F32 && outputs[i].data)
            corrupt(which, error, info, &outputs[i]);
    return rc;
}
