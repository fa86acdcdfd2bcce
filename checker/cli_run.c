/* lacs run --op OP --impl IMPL --in IN.safetensors --out OUT.safetensors
 *          [--param NAME=VALUE ...] [--tier fp32|bf16] [--force]:
 * computes an op on the user's own inputs.
 *
 * The inputs are IN's tensors by name (any dtype; `expected.*` and `gauge.*`
 * tensors are not inputs and are skipped, so a vector file works as IN).
 * Parameters not given take lacs_reference_param_default's value (scale =
 * K^-1/2, ...), and the output shapes come from lacs_reference_output_shapes,
 * which also checks every name and shape. builtin:reference computes in
 * double and writes F64 outputs; a plugin runs in a child process as in
 * `check` and its outputs are F32. With --tier the floating-point inputs are
 * first rounded to the tier's dtype (F32, or BF16 by round-to-nearest-even
 * on the binary32 bits, SPEC.md 10.3). Outputs are named plainly (`o`,
 * `ht`); the metadata key `lacs` records {"op", "impl", "params"}.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "lacs/ops.h"

static const char run_usage[] =
    "usage: lacs run --op OP --impl IMPL --in IN.safetensors --out OUT.safetensors\n"
    "                [--param NAME=VALUE ...] [--tier fp32|bf16] [--timeout SECONDS] [--force]\n"
    "\n"
    "Computes OP on the tensors of IN (named q, k, v, beta, ...; x, dy, ... for the norms) and\n"
    "writes its outputs (o, ht, y, ...) to OUT: F64 from builtin:reference, F32 from a plugin.\n"
    "  --param NAME=VALUE  a parameter of the op (scale, eps, cap, form, convention); the others\n"
    "                      take their defaults (scale = K^-1/2, eps = 0, form = 1, convention = 0)\n"
    "  --tier TIER         round the floating-point inputs to F32 (fp32) or BF16 (bf16) first\n"
    "  --timeout SECONDS   a plugin running longer fails (default 300)\n"
    "  --force             replace OUT if it is a regular file (never a link, a FIFO, or a file under a\n"
    "                      directory holding a MANIFEST.json: golden vectors)\n";

enum { MAX_RUN_INPUTS = 32, MAX_RUN_PARAMS = 16 };

typedef struct {
    const char *op, *impl, *in, *out, *tier;
    int force;
    double timeout;
    char param_names[MAX_RUN_PARAMS][48];
    lacs_param params[MAX_RUN_PARAMS];
    int n_params;
} run_options;

static int parse_param(const char *text, const lacs_op_info *info, run_options *o)
{
    const char *equals = strchr(text, '=');
    if (!equals || equals == text || (size_t)(equals - text) >= sizeof o->param_names[0])
        return cli_error("bad --param '%s': expected NAME=VALUE", text);
    if (o->n_params >= MAX_RUN_PARAMS)
        return cli_error("too many --param options");
    char *name = o->param_names[o->n_params];
    memcpy(name, text, (size_t)(equals - text));
    name[equals - text] = '\0';
    if (!lacs_word_in_list(info->params, name))
        return cli_error("%s does not read a parameter '%s' (its parameters: %s)", info->name, name,
                         info->params[0] ? info->params : "none");
    for (int i = 0; i < o->n_params; i++)
        if (strcmp(o->params[i].name, name) == 0)
            return cli_error("parameter '%s' is given twice", name);
    double value;
    if (cli_parse_double(equals + 1, &value) != 0)
        return cli_error("bad --param '%s': '%s' is not a finite number", text, equals + 1);
    o->params[o->n_params++] = (lacs_param){.name = name, .value = value};
    return 0;
}

static int parse_options(int argc, char **argv, run_options *o)
{
    memset(o, 0, sizeof *o);
    o->timeout = 300;
    const char *params[MAX_RUN_PARAMS];
    int n_params = 0;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int got;
        if (cli_is_help(argv[i])) {
            fputs(run_usage, stdout);
            return -1;
        }
        if (strcmp(argv[i], "--force") == 0) {
            o->force = 1;
        } else if ((got = cli_option_value(argc, argv, &i, "--op", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->op = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--impl", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->impl = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--in", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->in = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--out", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->out = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--tier", &value)) != 0) {
            if (got < 0 || cli_check_tier(value) != 0)
                return CLI_EXIT_USAGE;
            o->tier = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--timeout", &value)) != 0) {
            if (got < 0 || cli_parse_timeout(value, &o->timeout) != 0)
                return CLI_EXIT_USAGE;
        } else if ((got = cli_option_value(argc, argv, &i, "--param", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            if (n_params >= MAX_RUN_PARAMS)
                return cli_error("too many --param options");
            params[n_params++] = value;
        } else {
            return cli_error("run: unknown argument '%s' (see lacs run --help)", argv[i]);
        }
    }
    if (!o->op || !o->impl || !o->in || !o->out)
        return cli_error("run: --op, --impl, --in and --out are required (see lacs run --help)");
    cli_filter one_op = {0};
    if (cli_filter_add_ops(&one_op, o->op) != 0)
        return CLI_EXIT_USAGE;
    if (one_op.n_ops != 1 || strchr(o->op, ','))
        return cli_error("run: --op takes one op");
    const lacs_op_info *info = lacs_op_find(o->op);
    for (int i = 0; i < n_params; i++)
        if (parse_param(params[i], info, o) != 0)
            return CLI_EXIT_USAGE;
    return 0;
}

/* Round to bfloat16, nearest even on the binary32 bits; a NaN stays a quiet NaN (SPEC.md 10.3). */
static uint16_t bf16_from_float(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0)
        return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* An aligned copy of t as an input, in `dtype` when converting (floating-point inputs only). */
static int copy_input(const lacs_safetensors_tensor *t, int convert, lacs_dtype dtype, lacs_tensor *input)
{
    size_t count = (size_t)t->count;
    int floating = t->dtype == LACS_F32 || t->dtype == LACS_BF16 || t->dtype == LACS_F64;
    lacs_dtype stored = convert && floating ? dtype : t->dtype;
    void *data = malloc(count * lacs_dtype_size(stored) + 8);
    if (!data)
        return cli_error("out of memory copying input '%s'", t->name);
    if (stored == t->dtype) {
        memcpy(data, t->data, t->nbytes);
    } else {
        double *wide = malloc((count + 1) * sizeof *wide);
        if (!wide) {
            free(data);
            return cli_error("out of memory converting input '%s'", t->name);
        }
        lacs_values_to_double(t->dtype, t->data, t->count, wide);
        for (size_t i = 0; i < count; i++) {
            if (stored == LACS_F32)
                ((float *)data)[i] = (float)wide[i];
            else if (stored == LACS_BF16)
                ((uint16_t *)data)[i] = bf16_from_float((float)wide[i]);
            else
                ((double *)data)[i] = wide[i];
        }
        free(wide);
    }
    *input = (lacs_tensor){.name = t->name, .dtype = stored, .ndim = t->ndim, .shape = t->shape, .data = data};
    return 0;
}

/* {"op": ..., "impl": ..., "params": {...}}, malloc'd. */
static char *run_metadata(const run_options *o, const lacs_param *params, int n_params)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "op", o->op);
    cJSON_AddStringToObject(root, "impl", o->impl);
    if (o->tier)
        cJSON_AddStringToObject(root, "tier", o->tier);
    cJSON *object = cJSON_AddObjectToObject(root, "params");
    for (int i = 0; i < n_params; i++)
        cJSON_AddNumberToObject(object, params[i].name, params[i].value);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* Runs the op; fills outputs[] (data malloc'd or in the child's mapping). Returns 0, or the exit status. */
static int compute(const run_options *o, cli_impl *impl, const lacs_tensor *inputs, int n_inputs,
                   const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs, cli_child *child)
{
    if (impl->kind == CLI_IMPL_REFERENCE) {
        for (int i = 0; i < n_outputs; i++) {
            outputs[i].dtype = LACS_F64;
            outputs[i].data = calloc((size_t)lacs_tensor_count(&outputs[i]) + 1, sizeof(double));
            if (!outputs[i].data)
                return cli_error("out of memory for output '%s'", outputs[i].name);
        }
        if (lacs_reference_run(o->op, inputs, n_inputs, params, n_params, outputs, n_outputs, 0) != LACS_OK)
            return cli_error("%s: %s", o->in, lacs_last_error());
        return 0;
    }
    cli_task task = {.impl = impl, .op = o->op, .inputs = inputs, .n_inputs = n_inputs, .params = params,
                     .n_params = n_params, .outputs = outputs, .n_outputs = n_outputs};
    if (cli_child_start(child, &task, o->timeout) == 0)
        cli_child_wait(child);
    cli_child_unblock();
    if (child->outcome == CLI_UNSUPPORTED) {
        /* the reason, where the implementation gave one: "unsupported by the implementation (why)" */
        const char *why = strchr(child->message, '(');
        const int length = why ? (int)strlen(why) - 2 : 0;
        fprintf(stderr, "lacs: %s does not support %s (it returned LACS_UNSUPPORTED)%s%.*s\n", cli_text(o->impl), o->op,
                why ? "; " : "", length > 0 ? length : 0, why ? why + 1 : "");
        return CLI_EXIT_FAILED;
    }
    if (child->outcome != CLI_RAN) {
        fprintf(stderr, "lacs: %s on %s: %s\n", cli_text(o->impl), cli_text(o->in), cli_text(child->message));
        return CLI_EXIT_FAILED;
    }
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = child->outputs[i];
    return 0;
}

int cli_run(int argc, char **argv, const char *argv0)
{
    (void)argv0;
    run_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    /* before any work: OUT a new path, or a regular file with --force; never under golden vectors */
    const unsigned out_flags = (o.force ? LACS_OUTPUT_REPLACE : 0u) | LACS_OUTPUT_NOT_GOLDEN;
    if (lacs_output_file_check(o.out, NULL, out_flags) != LACS_OK) {
        if (!o.force && strstr(lacs_last_error(), "exists"))
            return cli_error("'%s' exists: use --force to replace it", o.out);
        return cli_error("%s", lacs_last_error());
    }
    cli_impl impl;
    if (cli_impl_open(o.impl, &impl, o.timeout) != 0)
        return CLI_EXIT_USAGE;
    lacs_safetensors_file in;
    if (lacs_safetensors_read(o.in, &in) != LACS_OK) {
        cli_impl_close(&impl);
        return cli_error("%s", lacs_last_error());
    }

    /* Inputs: aligned copies; a plugin is promised F32/BF16, so F64 becomes F32 for it. */
    lacs_tensor inputs[MAX_RUN_INPUTS];
    int n_inputs = 0;
    lacs_tensor outputs[LACS_OPS_MAX_OUTPUTS] = {{0}};
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_outputs = 0, status = 0;
    cli_child child = {.pid = -1};
    lacs_param params[MAX_RUN_PARAMS];
    char default_names[MAX_RUN_PARAMS][48]; /* the names of the parameters that take their default */
    int n_params = 0;
    char *metadata = NULL;
    for (int i = 0; i < in.n_tensors && status == 0; i++) {
        const lacs_safetensors_tensor *t = &in.tensors[i];
        if (strncmp(t->name, "expected.", 9) == 0 || strncmp(t->name, "gauge.", 6) == 0)
            continue;
        if (n_inputs >= MAX_RUN_INPUTS) {
            status = cli_error("%s: more than %d input tensors", o.in, MAX_RUN_INPUTS);
            break;
        }
        int convert = o.tier != NULL || (impl.kind != CLI_IMPL_REFERENCE && t->dtype == LACS_F64);
        lacs_dtype dtype = o.tier && strcmp(o.tier, "bf16") == 0 ? LACS_BF16 : LACS_F32;
        status = copy_input(t, convert, dtype, &inputs[n_inputs]);
        if (status == 0)
            n_inputs++;
    }
    if (status != 0)
        goto done;

    /* Parameters: the user's, then every default of the op's others. */
    for (int i = 0; i < o.n_params; i++)
        params[n_params++] = o.params[i];
    const lacs_op_info *info = lacs_op_find(o.op);
    const char *cursor = info->params, *word;
    size_t length;
    while ((length = lacs_next_word(&cursor, &word)) > 0 && n_params < MAX_RUN_PARAMS) {
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)length, word);
        int given = 0;
        for (int i = 0; i < o.n_params; i++)
            given |= strcmp(o.params[i].name, name) == 0;
        double value;
        if (given)
            continue;
        if (!lacs_reference_param_default(o.op, inputs, n_inputs, name, &value)) {
            status = cli_error("%s has no default for parameter '%s': give --param %s=VALUE", o.op, name, name);
            goto done;
        }
        snprintf(default_names[n_params], sizeof default_names[n_params], "%s", name);
        params[n_params] = (lacs_param){.name = default_names[n_params], .value = value};
        n_params++;
    }

    if (lacs_reference_output_shapes(o.op, inputs, n_inputs, shapes, &n_outputs) != LACS_OK) {
        n_outputs = 0;
        status = cli_error("%s: %s", o.in, lacs_last_error());
        goto done;
    }
    for (int i = 0; i < n_outputs; i++)
        outputs[i] = (lacs_tensor){.name = shapes[i].name, .dtype = LACS_F32, .ndim = shapes[i].ndim,
                                   .shape = shapes[i].shape, .data = NULL};
    status = compute(&o, &impl, inputs, n_inputs, params, n_params, outputs, n_outputs, &child);
    if (status != 0)
        goto done;

    metadata = run_metadata(&o, params, n_params);
    uint8_t *bytes = NULL;
    size_t size = 0;
    if (lacs_safetensors_serialize(outputs, n_outputs, "lacs", metadata, o.out, &bytes, &size) != LACS_OK ||
        lacs_output_file_write(o.out, bytes, size, NULL, out_flags) != LACS_OK) {
        free(bytes);
        status = cli_error("%s", lacs_last_error());
        goto done;
    }
    free(bytes);
    printf("wrote %s:", o.out);
    for (int i = 0; i < n_outputs; i++) {
        printf("%s %s %s [", i ? "," : "", outputs[i].name, lacs_dtype_name(outputs[i].dtype));
        for (int d = 0; d < outputs[i].ndim; d++)
            printf("%s%lld", d ? ", " : "", (long long)outputs[i].shape[d]);
        printf("]");
    }
    printf(" (%s", o.op);
    for (int i = 0; i < n_params; i++)
        printf("%s%s=%.17g", i ? ", " : "; ", params[i].name, params[i].value);
    printf(")\n");

done:
    if (impl.kind == CLI_IMPL_REFERENCE)
        for (int i = 0; i < n_outputs; i++)
            free(outputs[i].data);
    cli_child_free(&child);
    for (int i = 0; i < n_inputs; i++)
        free(inputs[i].data);
    cJSON_free(metadata);
    lacs_safetensors_free(&in);
    cli_impl_close(&impl);
    return status;
}
