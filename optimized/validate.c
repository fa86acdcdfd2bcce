/* What builtin:cpu and builtin:cuda share (validate.h says what): the helpers
 * of a call, then the checks of a call. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../core/error.h"
#include "../reference/validate.h"
#include "validate.h"

/* ---- the helpers of a call ---- */

_Static_assert(offsetof(lacs_tensor, name) == 0, "a lacs_tensor starts with its name");

int lacs_builtin_find_named(const void *tensors, size_t stride, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        const char *tensor_name;
        memcpy(&tensor_name, (const unsigned char *)tensors + (size_t)i * stride, sizeof tensor_name);
        if (tensor_name && strcmp(tensor_name, name) == 0)
            return i;
    }
    return -1;
}

double lacs_builtin_param(const char *op, const lacs_param *params, int n_params, const lacs_tensor *inputs,
                          int n_inputs, const char *name, double fallback)
{
    for (int i = 0; i < n_params; i++)
        if (params[i].name && strcmp(params[i].name, name) == 0)
            return params[i].value;
    double value;
    if (lacs_reference_param_default(op, inputs, n_inputs, name, &value))
        return value;
    return fallback;
}

int lacs_builtin_verror(int code, const char *op, const char *fmt, va_list args)
{
    char message[1536];
    vsnprintf(message, sizeof message, fmt, args);
    return lacs_internal_error(code, op, "%s", message);
}

static const lacs_tensor *input_named(const lacs_tensor *inputs, int n_inputs, const char *name)
{
    const int i = lacs_builtin_find_named(inputs, sizeof *inputs, n_inputs, name);
    return i >= 0 ? &inputs[i] : NULL;
}

/* ---- the checks of a call ---- */

int lacs_builtin_validate_call(const char *impl, const char *op, const lacs_tensor *inputs, int n_inputs,
                               const lacs_param *params, int n_params, const lacs_tensor *outputs, int n_outputs,
                               const lacs_op_info **info_out, int *bf16_out)
{
    const lacs_op_info *info = lacs_op_find(op);
    if (!info)
        return lacs_internal_error(LACS_ERR_INPUT, impl, "unknown op '%s'", op ? op : "(null)");

    /* Names and shapes: the reference's own validation (one implementation). */
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_shapes = 0;
    int rc = lacs_reference_output_shapes(op, inputs, n_inputs, shapes, &n_shapes);
    if (rc != LACS_OK)
        return rc;

    /* Parameters: only those the op reads, as the reference requires. */
    for (int i = 0; i < n_params; i++)
        if (!params[i].name || !lacs_word_in_list(info->params, params[i].name))
            return lacs_internal_error(LACS_ERR_PARAM, op, "parameter '%s' is not one that %s reads (%s)",
                                       params[i].name ? params[i].name : "(null)", op,
                                       *info->params ? info->params : "none");

    /* The tier is q's dtype (x's for the norms). */
    int bf16 = 0;
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i].dtype == LACS_I64)
            continue;
        if (inputs[i].dtype != LACS_F32 && inputs[i].dtype != LACS_BF16)
            return lacs_internal_error(LACS_ERR_INPUT, op, "%s takes F32 or BF16 inputs; '%s' is %s", impl,
                                       inputs[i].name, inputs[i].dtype == LACS_F64 ? "F64" : "another dtype");
        if (inputs[i].name && (strcmp(inputs[i].name, "q") == 0 || strcmp(inputs[i].name, "x") == 0))
            bf16 = inputs[i].dtype == LACS_BF16;
    }

    /* Outputs: F32, each one the op gives, with its shape. */
    for (int i = 0; i < n_outputs; i++) {
        const lacs_tensor *t = &outputs[i];
        int found = 0;
        for (int s = 0; s < n_shapes && !found; s++) {
            if (!t->name || strcmp(t->name, shapes[s].name) != 0)
                continue;
            found = 1;
            int same = t->ndim == shapes[s].ndim;
            for (int d = 0; same && d < t->ndim; d++)
                same = t->shape[d] == shapes[s].shape[d];
            if (!same)
                return lacs_internal_error(LACS_ERR_SHAPE, op, "output '%s' does not have the shape the inputs give",
                                           t->name);
        }
        if (!found)
            return lacs_internal_error(LACS_ERR_INPUT, op, "'%s' is not an output of %s",
                                       t->name ? t->name : "(null)", op);
        if (t->dtype != LACS_F32)
            return lacs_internal_error(LACS_ERR_INPUT, op, "%s writes F32 outputs; '%s' is not F32", impl, t->name);
    }
    *info_out = info;
    *bf16_out = bf16;
    return LACS_OK;
}

int lacs_builtin_validate_sequences(const char *op, const lacs_tensor *inputs, int n_inputs,
                                    const lacs_param *params, int n_params)
{
    const lacs_tensor *q = input_named(inputs, n_inputs, "q"), *v = input_named(inputs, n_inputs, "v");
    const lacs_tensor *cu = input_named(inputs, n_inputs, "cu_seqlens");
    static const double present = 0;
    const lacs_dims dims = {.B = q->shape[0], .T = q->shape[1], .H = q->shape[2], .HV = v->shape[2],
                            .K = q->shape[3], .V = v->shape[3], .cu_seqlens = cu ? cu->data : NULL,
                            .N = cu ? cu->shape[0] - 1 : 0};
    double scale = q->shape[3] > 0 ? 1.0 / sqrt((double)q->shape[3]) : 1.0;
    int given = 0;
    for (int i = 0; i < n_params; i++)
        if (params[i].name && strcmp(params[i].name, "scale") == 0) {
            scale = params[i].value;
            given = 1;
        }
    if (!given)
        lacs_reference_param_default(op, inputs, n_inputs, "scale", &scale);
    /* The names were checked already, so every input is allowed here; the
     * validator only asks whether each is given. */
    const lacs_inputs presence = {
        .q = &present, .k = &present, .v = &present,
        .beta = input_named(inputs, n_inputs, "beta") ? &present : NULL,
        .g = input_named(inputs, n_inputs, "g") ? &present : NULL,
        .gk = input_named(inputs, n_inputs, "gk") ? &present : NULL,
        .g_gamma = input_named(inputs, n_inputs, "g_gamma") ? &present : NULL,
        .h0 = input_named(inputs, n_inputs, "h0") ? &present : NULL,
        .w = input_named(inputs, n_inputs, "w") ? &present : NULL,
        .lambda = input_named(inputs, n_inputs, "lambda") ? &present : NULL,
        .h0_kk = input_named(inputs, n_inputs, "h0_kk") ? &present : NULL,
        .scale = scale};
    const unsigned every_input = LACS_READS_BETA | LACS_READS_G | LACS_READS_GK | LACS_READS_G_GAMMA |
                                 LACS_READS_H0 | LACS_READS_W | LACS_READS_LAMBDA | LACS_READS_H0_KK;
    return lacs_internal_validate(op, &dims, &presence, 0, every_input);
}
