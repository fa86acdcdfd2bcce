/* builtin:cuda: the library's entry points (README.md).
 *
 * build/liblacs_cuda.so (make cuda) exports lacs_cuda_run, the plugin ABI v1
 * call (also under its plugin name, lacs_plugin_run), lacs_cuda_last_error
 * and lacs_cuda_status. The checker loads it for --impl builtin:cuda; it is
 * a separate library so that the checker itself needs no CUDA runtime. The
 * same file, linked with the kernels compiled for emulation.h, makes
 * build/liblacs_cuda_emulated.so.
 *
 * Read top to bottom: the helpers the family files share (cuda.h), which ops
 * and cases are implemented, then the call: validate (the checks builtin:cpu
 * makes, optimized/validate.c), copy the inputs to the device, run the
 * family, copy the outputs back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../core/error.h"
#include "../validate.h"
#include "cuda.h"
#include "lacs/types.h"

/* The last validation on a GPU (tests/device/validate_on_device.sh,
 * optimized/cuda/README.md section 6): the device and the date, and the ops
 * whose kernels are the same code as in that run. An op added or changed
 * since is validated under emulation only (section 5) until the script runs
 * again on a device and this table is brought up to date with it. The run of
 * 2026-11-28 on an H200 at commit a6e13bd (the kernels of fa62a20): every
 * core vector of all 32 ops passed (845); memcheck clean over every case of
 * delta_rule_vjp and gated_delta_rule_vjp (the recurrent family's gradients
 * share recurrent_vjp.cu's kernels), racecheck clean over half the cases of
 * gated_delta_rule_vjp and gla_vjp. The forward kernels are those of
 * a72d24a, whose run of 2026-11-25 on an H100 had memcheck clean over every
 * case and racecheck clean on one op of each kernel family. */
static const char *const validated_device_run =
    "NVIDIA H200 (driver 580.159.04, CUDA 13.0) on 2026-11-28, every vector passing, memcheck clean, racecheck "
    "clean on one op of each kernel family (the forward kernels' sanitizer runs on an H100 on 2026-11-25)";
static const char *const validated_on_device[] = {
    "linear_attn", "linear_attn_postnorm", "retention", "simple_gla", "gla", "delta_rule", "gated_delta_rule",
    "comba", "efla", "rmsnorm", "rmsnorm_vjp", "dyt", "dyt_vjp", "dyisru", "dyisru_vjp", "path_attn",
    "softmax_attn", "fox", "deltaformer", "mesa_net", "softcap", "softcap_vjp", "l2norm", "l2norm_vjp",
    "linear_attn_vjp", "retention_vjp", "simple_gla_vjp", "gla_vjp", "delta_rule_vjp", "gated_delta_rule_vjp",
    "comba_vjp", "efla_vjp"};

/* ---- shared helpers (cuda.h): the typed names of those builtin:cpu shares (optimized/validate.c) ---- */

_Static_assert(offsetof(lacs_cuda_tensor, name) == 0, "a lacs_cuda_tensor starts with its name");

const lacs_cuda_tensor *lacs_cuda_input(const lacs_cuda_call *c, const char *name)
{
    const int i = lacs_builtin_find_named(c->inputs, sizeof *c->inputs, c->n_inputs, name);
    return i >= 0 ? &c->inputs[i] : NULL;
}

lacs_cuda_tensor *lacs_cuda_output(const lacs_cuda_call *c, const char *name)
{
    const int i = lacs_builtin_find_named(c->outputs, sizeof *c->outputs, c->n_outputs, name);
    return i >= 0 ? &c->outputs[i] : NULL;
}

double lacs_cuda_param(const lacs_cuda_call *c, const char *name, double fallback)
{
    /* the defaults are read from the host copies of the inputs */
    lacs_tensor inputs[16];
    const int n = c->n_inputs < 16 ? c->n_inputs : 16;
    for (int i = 0; i < n; i++)
        inputs[i] = (lacs_tensor){.name = c->inputs[i].name, .dtype = c->inputs[i].dtype, .ndim = c->inputs[i].ndim,
                                  .shape = c->inputs[i].shape, .data = (void *)c->inputs[i].host};
    return lacs_builtin_param(c->op, c->params, c->n_params, inputs, n, name, fallback);
}

int64_t lacs_cuda_count(const lacs_cuda_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

int lacs_cuda_error(int code, const char *op, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    const int rc = lacs_builtin_verror(code, op, fmt, args);
    va_end(args);
    return rc;
}

int lacs_cuda_unsupported(const char *op, const char *fmt, ...)
{
    char message[1536];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    lacs_internal_error(LACS_UNSUPPORTED, op, "builtin:cuda does not implement this case: %s", message);
    return LACS_UNSUPPORTED;
}

/* ---- the call ---- */

static size_t dtype_size(lacs_dtype dtype)
{
    switch (dtype) {
    case LACS_BF16:
        return 2;
    case LACS_F32:
        return 4;
    case LACS_F64:
    case LACS_I64:
        return 8;
    }
    return 0;
}

/* The ops builtin:cuda implements: every forward op of the vectors, the norms' VJPs, the recurrent
 * family's VJPs (README.md section 9) and the attention forms' VJPs (section 10; validated under emulation
 * only until a device runs them: validated_on_device does not name them). */
static const char *const implemented_ops[] = {"linear_attn", "linear_attn_postnorm", "retention", "simple_gla", "gla",
                                      "delta_rule", "gated_delta_rule", "comba", "efla", "rmsnorm", "rmsnorm_vjp",
                                      "dyt", "dyt_vjp", "dyisru", "dyisru_vjp", "path_attn",
                                      "softmax_attn", "fox", "deltaformer", "mesa_net", "softcap",
                                      "softcap_vjp", "l2norm", "l2norm_vjp", "linear_attn_vjp",
                                      "retention_vjp", "simple_gla_vjp", "gla_vjp", "delta_rule_vjp",
                                      "gated_delta_rule_vjp", "comba_vjp", "efla_vjp",
                                      "softmax_attn_vjp", "fox_vjp", "deltaformer_vjp", "path_attn_vjp"};

static int in_list(const char *op, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(op, list[i]) == 0)
            return 1;
    return 0;
}

static int implemented(const char *op)
{
    return in_list(op, implemented_ops, sizeof implemented_ops / sizeof implemented_ops[0]);
}

/* The gradients of the attention forms (attention_vjp.cu, README.md section 10); the other VJPs of the
 * vectors' sequences are the recurrent family's (recurrent_vjp.cu). */
static int attention_vjp(const char *op)
{
    static const char *const ops[] = {"softmax_attn_vjp", "fox_vjp", "deltaformer_vjp", "path_attn_vjp"};
    return in_list(op, ops, sizeof ops / sizeof ops[0]);
}

static void free_tensors(lacs_cuda_tensor *t, int n)
{
    for (int i = 0; i < n; i++)
        lacs_cuda_free(t[i].device);
}

/* A tensor's shape into its device twin (at most 4 dimensions: every op's are). */
static int describe(const lacs_tensor *t, lacs_cuda_tensor *d, const char *op)
{
    if (t->ndim < 0 || t->ndim > 4)
        return lacs_cuda_error(LACS_ERR_SHAPE, op, "'%s' has %d dimensions; builtin:cuda takes at most 4", t->name,
                               t->ndim);
    memset(d, 0, sizeof *d);
    d->name = t->name;
    d->dtype = t->dtype;
    d->ndim = t->ndim;
    for (int k = 0; k < t->ndim; k++)
        d->shape[k] = t->shape[k];
    d->host = t->data;
    return LACS_OK;
}

int lacs_cuda_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                  lacs_tensor *outputs, int n_outputs)
{
    const lacs_op_info *info;
    int bf16, rc;
    if ((rc = lacs_builtin_validate_call("builtin:cuda", op, inputs, n_inputs, params, n_params, outputs, n_outputs,
                                         &info, &bf16)) != LACS_OK)
        return rc;
    if (!implemented(op))
        return lacs_cuda_unsupported(op, "builtin:cuda implements the forward ops of the vectors, the norms' VJPs and "
                                         "the VJPs of the ops on sequences");
    if (info->family != LACS_FAMILY_NORM)
        if ((rc = lacs_builtin_validate_sequences(op, inputs, n_inputs, params, n_params)) != LACS_OK)
            return rc;
    if (n_inputs > 16 || n_outputs > LACS_OPS_MAX_OUTPUTS)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "too many tensors (%d inputs, %d outputs)", n_inputs, n_outputs);

    char why[512];
    int max_shared = 0;
    if (lacs_cuda_device_open(&max_shared, why, sizeof why) != 0)
        return lacs_cuda_error(LACS_ERR_INPUT, op, "builtin:cuda has no device: %s", why);

    lacs_cuda_tensor din[16], dout[LACS_OPS_MAX_OUTPUTS];
    int n_din = 0, n_dout = 0;
    rc = LACS_OK;
    for (int i = 0; i < n_inputs && rc == LACS_OK; i++) {
        if ((rc = describe(&inputs[i], &din[i], op)) != LACS_OK)
            break;
        const size_t bytes = (size_t)lacs_tensor_count(&inputs[i]) * dtype_size(inputs[i].dtype);
        if (lacs_cuda_alloc(&din[i].device, bytes, why, sizeof why) != 0)
            rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "input '%s' (%zu bytes): %s", inputs[i].name, bytes, why);
        else if (n_din = i + 1, lacs_cuda_to_device(din[i].device, inputs[i].data, bytes, why, sizeof why) != 0)
            rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "input '%s' (%zu bytes): %s", inputs[i].name, bytes, why);
    }
    for (int i = 0; i < n_outputs && rc == LACS_OK; i++) {
        if ((rc = describe(&outputs[i], &dout[i], op)) != LACS_OK)
            break;
        const size_t bytes = (size_t)lacs_tensor_count(&outputs[i]) * sizeof(float);
        if (lacs_cuda_alloc(&dout[i].device, bytes, why, sizeof why) != 0)
            rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "output '%s' (%zu bytes): %s", outputs[i].name, bytes, why);
        else if (n_dout = i + 1, lacs_cuda_zero(dout[i].device, bytes, why, sizeof why) != 0)
            rc = lacs_cuda_error(LACS_ERR_MEMORY, op, "output '%s' (%zu bytes): %s", outputs[i].name, bytes, why);
    }

    if (rc == LACS_OK) {
        const lacs_cuda_call c = {.op = op, .bf16 = bf16, .inputs = din, .n_inputs = n_inputs, .params = params,
                                  .n_params = n_params, .outputs = dout, .n_outputs = n_outputs,
                                  .max_shared_bytes = max_shared};
        switch (info->family) {
        case LACS_FAMILY_RECURRENT:
            rc = lacs_cuda_recurrent(&c);
            break;
        case LACS_FAMILY_NORM:
            rc = lacs_cuda_norm(&c);
            break;
        case LACS_FAMILY_ATTENTION:
            rc = lacs_cuda_attention(&c);
            break;
        case LACS_FAMILY_MESA:
            rc = lacs_cuda_mesa(&c);
            break;
        case LACS_FAMILY_VJP:
            rc = attention_vjp(op) ? lacs_cuda_attention_vjp(&c) : lacs_cuda_recurrent_vjp(&c);
            break;
        }
        if (rc == LACS_OK && lacs_cuda_synchronize(why, sizeof why) != 0)
            rc = lacs_cuda_error(LACS_ERR_INPUT, op, "%s", why);
    }
    for (int i = 0; i < n_outputs && rc == LACS_OK; i++)
        if (lacs_cuda_to_host(outputs[i].data, dout[i].device, (size_t)lacs_tensor_count(&outputs[i]) * sizeof(float),
                              why, sizeof why) != 0)
            rc = lacs_cuda_error(LACS_ERR_INPUT, op, "output '%s': %s", outputs[i].name, why);
    free_tensors(din, n_din);
    free_tensors(dout, n_dout);
    return rc;
}

/* The plugin ABI's name for the same call: the library is also an ordinary
 * plugin (lacs check --impl build/liblacs_cuda.so). */
int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    return lacs_cuda_run(op, inputs, n_inputs, params, n_params, outputs, n_outputs);
}

const char *lacs_cuda_last_error(void) { return lacs_last_error(); }

/* Plugin ABI v1.1's declaration (SPEC.md 11.7): the ops of implemented_ops, both tiers, no flag left out.
 * The checker reads it for builtin:cuda too. */
const lacs_plugin_description *lacs_plugin_describe(void)
{
    static char ops[1024];
    static lacs_plugin_description description = {LACS_PLUGIN_ABI_MAJOR, LACS_PLUGIN_ABI_MINOR, "builtin:cuda",
                                                  ops, NULL, NULL};
    if (!ops[0])
        for (size_t i = 0, used = 0; i < sizeof implemented_ops / sizeof implemented_ops[0]; i++)
            used += (size_t)snprintf(ops + used, sizeof ops - used, "%s%s", i ? " " : "", implemented_ops[i]);
    return &description;
}

/* Plugin ABI v1.1: the reason for the last LACS_UNSUPPORTED or error of this thread. */
const char *lacs_plugin_last_error(void) { return lacs_last_error(); }

/* One line for `lacs list`: the device (or why there is none), the ops
 * validated on a device and those validated under emulation only. Returns 1
 * when a device can run it. */
int lacs_cuda_status(char *text, size_t text_size)
{
    char device[384], on_device[512] = "", emulated[1024] = "";
    const int ready = lacs_cuda_describe_device(device, sizeof device);
    const size_t n_device = sizeof validated_on_device / sizeof validated_on_device[0];
    for (size_t i = 0; i < sizeof implemented_ops / sizeof implemented_ops[0]; i++) {
        const int validated = in_list(implemented_ops[i], validated_on_device, n_device);
        char *list = validated ? on_device : emulated;
        const size_t size = validated ? sizeof on_device : sizeof emulated, used = strlen(list);
        snprintf(list + used, size - used, "%s%s", used ? ", " : "", implemented_ops[i]);
    }
    snprintf(text, text_size, "%s; validated on %s, for %s; validated under emulation only: %s", device,
             validated_device_run, on_device[0] ? on_device : "no op", emulated[0] ? emulated : "no op");
    return ready;
}
