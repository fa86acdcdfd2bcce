/* Checking an implementation against a golden vector (lacs/check.h, SPEC.md 11).
 *
 * Read top to bottom: loading a vector (its metadata, inputs, goldens and
 * gauges), the layout of each output into blocks, the comparison of one
 * output (the tolerance model of SPEC.md 11.3 and the IEEE rules of 11.4),
 * running an implementation on a case (the state-carry protocol included),
 * and the words for an element's position.
 */
/* MAP_ANONYMOUS is POSIX only since 2024; glibc declares it under _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1

#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../core/error.h"
#include "lacs/check.h"
#include "lacs/gauge.h"
#include "lacs/ops.h"

/* ---- loading ---- */

/* LACS_ERR_FORMAT (or `code`) with the message "<path>: <kind>: <detail>", the
 * kinds of SPEC.md 10.2's vector layer: metadata, tensor, tolerance, hash. */
__attribute__((format(printf, 4, 5))) static int vector_error(const lacs_vector *v, int code, const char *kind,
                                                              const char *fmt, ...)
{
    char detail[768];
    va_list args;
    va_start(args, fmt);
    vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    return lacs_internal_error(code, v->path, "%s: %s", kind, detail);
}

static void *own(lacs_vector *v, size_t bytes)
{
    if (v->n_owned >= (int)(sizeof v->owned / sizeof v->owned[0]))
        return NULL;
    void *p = calloc(1, bytes + 8);
    if (p)
        v->owned[v->n_owned++] = p;
    return p;
}

static char *name_slot(lacs_vector *v, int *used, const char *name)
{
    if (*used >= (int)(sizeof v->names / sizeof v->names[0]) || strlen(name) >= sizeof v->names[0])
        return NULL;
    char *slot = v->names[(*used)++];
    strcpy(slot, name);
    return slot;
}

static double number_field(const cJSON *object, const char *name, double fallback)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNumber(item) ? item->valuedouble : fallback;
}

/* The first key repeated within one JSON object of the tree, or NULL (cJSON
 * keeps both and reads the first; a Python reader would read the last). */
static const char *repeated_key(const cJSON *item)
{
    for (const cJSON *a = item ? item->child : NULL; a; a = a->next) {
        if (cJSON_IsObject(item))
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && strcmp(a->string, b->string) == 0)
                    return a->string;
        const char *inner = repeated_key(a);
        if (inner)
            return inner;
    }
    return NULL;
}

/* The tolerance models this checker accepts (SPEC.md 11.3), one row each; the
 * constants are read by their macro names (lacs/gauge.h). A vector's
 * `tolerance` object must state exactly its model's constants: a tolerance
 * is data beside its case, and data can be tampered with. */
typedef struct {
    const char *model;
    const char *refused;             /* why a model no longer accepted is refused, or NULL */
    double unit_roundoff[2];         /* [fp32, bf16] */
    double underflow[2];             /* [fp32, bf16]: half the tier's smallest subnormal */
    double normwise_factor, elementwise_factor, floor_fraction[2]; /* floor: [fp32, bf16] */
    int gauge_covers_golden;         /* the gauge is at least |golden| (one rounding of the output, SPEC.md 11.2) */
} tolerance_model;

static const tolerance_model tolerance_models[] = {
    {LACS_TOLERANCE_MODEL, NULL, {0x1p-24, 0x1p-8}, {0x1p-150, 0x1p-134}, LACS_TOLERANCE_NORMWISE_FACTOR,
     LACS_TOLERANCE_ELEMENTWISE_FACTOR, {LACS_TOLERANCE_FLOOR_FRACTION_FP32, LACS_TOLERANCE_FLOOR_FRACTION_BF16}, 1},
    /* spec 1.3 (generator 2): the same formula, the floor 1/16 in both tiers */
    {"lacs-tolerance/1", NULL, {0x1p-24, 0x1p-8}, {0x1p-150, 0x1p-134}, 6.0, 24.0, {0.0625, 0.0625}, 1},
    {"provisional-normwise/1",
     "generator 1's provisional model (no gauges) is no longer accepted (SPEC.md 11.3): regenerate the vectors "
     "(make vectors, lacs-generate)",
     {0, 0}, {0, 0}, 0, 0, {0, 0}, 0},
};

static const tolerance_model *find_tolerance_model(const char *name)
{
    for (size_t i = 0; i < sizeof tolerance_models / sizeof tolerance_models[0]; i++)
        if (strcmp(tolerance_models[i].model, name) == 0)
            return &tolerance_models[i];
    return NULL;
}

/* Equal as the generator writes them (17 significant digits read back). */
static int same_constant(double stated, double expected)
{
    return stated == expected || fabs(stated - expected) <= 1e-15 * fabs(expected);
}

/* The tolerance object of the metadata (SPEC.md 11.3), checked against its model's row. */
static int load_tolerance(lacs_vector *v, const cJSON *root, const tolerance_model **model_out)
{
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(root, "tolerance");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tol, "model");
    if (!cJSON_IsObject(tol) || !cJSON_IsString(model))
        return vector_error(v, LACS_ERR_FORMAT, "tolerance", "no tolerance object with a model");
    const tolerance_model *row = find_tolerance_model(model->valuestring);
    if (!row) {
        char known[256] = "";
        for (size_t i = 0; i < sizeof tolerance_models / sizeof tolerance_models[0]; i++)
            if (!tolerance_models[i].refused)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "",
                         tolerance_models[i].model);
        return vector_error(v, LACS_ERR_FORMAT, "tolerance", "unknown model '%.60s' (this checker knows %s)",
                            model->valuestring, known);
    }
    if (row->refused)
        return vector_error(v, LACS_ERR_FORMAT, "tolerance", "model %s: %s", row->model, row->refused);
    lacs_tolerance *t = &v->tolerance;
    snprintf(t->model, sizeof t->model, "%s", row->model);
    const int tier = strcmp(v->tier, "fp32") == 0 ? 0 : 1;
    const struct {
        const char *name;
        double expected, *slot;
    } constants[] = {
        {"unit_roundoff", row->unit_roundoff[tier], &t->unit_roundoff},
        {"normwise_factor", row->normwise_factor, &t->normwise_factor},
        {"elementwise_factor", row->elementwise_factor, &t->elementwise_factor},
        {"floor_fraction", row->floor_fraction[tier], &t->floor_fraction},
        {"underflow", row->underflow[tier], &t->underflow},
    };
    for (size_t i = 0; i < sizeof constants / sizeof constants[0]; i++) {
        const double stated = number_field(tol, constants[i].name, NAN);
        if (!same_constant(stated, constants[i].expected))
            return vector_error(v, LACS_ERR_FORMAT, "tolerance",
                                "%s is %.17g; the %s tier of %s states %.17g (lacs/gauge.h)", constants[i].name,
                                stated, v->tier, row->model, constants[i].expected);
        *constants[i].slot = constants[i].expected;
    }
    *model_out = row;
    return LACS_OK;
}

/* Blocks of an output (SPEC.md 11.2), from the op's family and the output's shape. */
static void set_layout(lacs_vector *v, int i, lacs_op_family family, const int64_t *cu_seqlens, int64_t n_seqs)
{
    const lacs_tensor *e = &v->expected[i];
    lacs_layout *l = &v->layout[i];
    memset(l, 0, sizeof *l);
    l->outer = 1;
    l->T = 1;
    l->heads = 1;
    l->width = lacs_tensor_count(e);
    l->kind = LACS_LAYOUT_WHOLE;
    if (family == LACS_FAMILY_NORM) {
        if (e->ndim == 2) {
            l->kind = LACS_LAYOUT_ROWS;
            l->outer = e->shape[0];
            l->width = e->shape[1];
        }
    } else if (family == LACS_FAMILY_VJP) {
        /* the gradients (SPEC.md 4.19): a per-token input's gradient in blocks of
         * (batch or sequence, head) like o; dh0 and dh_split like a state; a
         * per-head sum (dg_gamma) one block per head */
        if (lacs_vjp_output_is_per_token(e->name) && e->ndim >= 3) {
            l->kind = LACS_LAYOUT_SEQUENCE;
            l->outer = e->shape[0];
            l->T = e->shape[1];
            l->heads = e->shape[2];
            l->width = e->ndim == 4 ? e->shape[3] : 1;
            l->cu_seqlens = cu_seqlens;
            l->n_seqs = cu_seqlens ? n_seqs : 0;
        } else if (e->ndim == 4) {
            l->kind = LACS_LAYOUT_STATE;
            l->outer = e->shape[0];
            l->heads = e->shape[1];
            l->width = e->shape[2] * e->shape[3];
        } else if (e->ndim >= 1 && e->shape[0] > 0) {
            l->heads = e->shape[0];
            l->width = lacs_tensor_count(e) / e->shape[0];
        }
    } else if (e->ndim == 4 && strcmp(e->name, "o") == 0) {
        l->kind = LACS_LAYOUT_SEQUENCE;
        l->outer = e->shape[0];
        l->T = e->shape[1];
        l->heads = e->shape[2];
        l->width = e->shape[3];
        l->cu_seqlens = cu_seqlens;
        l->n_seqs = cu_seqlens ? n_seqs : 0;
    } else if (e->ndim == 4) {
        l->kind = LACS_LAYOUT_STATE;
        l->outer = e->shape[0];
        l->heads = e->shape[1];
        l->width = e->shape[2] * e->shape[3];
    }
}

static const lacs_tensor *find_input(const lacs_vector *v, const char *name)
{
    for (int i = 0; i < v->n_inputs; i++)
        if (strcmp(v->inputs[i].name, name) == 0)
            return &v->inputs[i];
    return NULL;
}

/* The inputs: every tensor that is neither expected.* nor gauge.*, copied
 * aligned, each in the tier's dtype (cu_seqlens I64), and together what the
 * op reads (lacs_reference_output_shapes checks names and shapes). */
static int load_inputs(lacs_vector *v, int *used_names)
{
    const lacs_dtype tier_dtype = strcmp(v->tier, "fp32") == 0 ? LACS_F32 : LACS_BF16;
    for (int i = 0; i < v->file.n_tensors; i++) {
        const lacs_safetensors_tensor *t = &v->file.tensors[i];
        if (strncmp(t->name, "expected.", 9) == 0 || strncmp(t->name, "gauge.", 6) == 0)
            continue;
        if (v->n_inputs >= LACS_CHECK_MAX_INPUTS)
            return vector_error(v, LACS_ERR_FORMAT, "tensor", "more than %d input tensors", LACS_CHECK_MAX_INPUTS);
        const int is_offsets = strcmp(t->name, "cu_seqlens") == 0;
        if (t->dtype != (is_offsets ? LACS_I64 : tier_dtype))
            return vector_error(v, LACS_ERR_FORMAT, "tensor", "input '%.40s' is %s; the %s tier stores it as %s",
                                t->name, lacs_dtype_name(t->dtype), v->tier,
                                lacs_dtype_name(is_offsets ? LACS_I64 : tier_dtype));
        lacs_tensor *in = &v->inputs[v->n_inputs];
        void *data = own(v, t->nbytes);
        in->name = name_slot(v, used_names, t->name);
        if (!data || !in->name)
            return vector_error(v, LACS_ERR_FORMAT, "tensor", "input name '%.40s' too long, or out of memory",
                                t->name);
        memcpy(data, t->data, t->nbytes);
        in->dtype = t->dtype;
        in->ndim = t->ndim;
        in->shape = t->shape;
        in->data = data;
        v->n_inputs++;
    }
    return LACS_OK;
}

/* cu_seqlens (SPEC.md 2.5): N + 1 offsets, the first 0, non-decreasing, the
 * last T. Unchecked, a larger offset reads past the outputs and a shorter or
 * decreasing table leaves tokens out of every block. */
static int check_offsets(const lacs_vector *v, const lacs_tensor *cu, int64_t T)
{
    const int64_t *offsets = cu->data;
    const int64_t n = lacs_tensor_count(cu);
    if (cu->ndim != 1 || n < 1)
        return vector_error(v, LACS_ERR_FORMAT, "tensor", "cu_seqlens must be I64 [N + 1], N >= 0");
    if (offsets[0] != 0)
        return vector_error(v, LACS_ERR_FORMAT, "tensor", "cu_seqlens[0] is %lld, not 0", (long long)offsets[0]);
    for (int64_t i = 1; i < n; i++)
        if (offsets[i] < offsets[i - 1])
            return vector_error(v, LACS_ERR_FORMAT, "tensor", "cu_seqlens decreases at %lld: %lld, then %lld",
                                (long long)i, (long long)offsets[i - 1], (long long)offsets[i]);
    if (offsets[n - 1] != T)
        return vector_error(v, LACS_ERR_FORMAT, "tensor", "cu_seqlens ends at %lld, not at T = %lld",
                            (long long)offsets[n - 1], (long long)T);
    return LACS_OK;
}

/* The sizes, from the shapes (the metadata's `dims` must agree with them). */
static int load_dims(lacs_vector *v, const cJSON *dims, const lacs_op_info *info)
{
    const lacs_tensor *q = find_input(v, "q"), *val = find_input(v, "v"), *x = find_input(v, "x");
    const lacs_tensor *cu = find_input(v, "cu_seqlens");
    if (info->family == LACS_FAMILY_NORM) {
        v->rows = x->shape[0];
        v->dim = x->shape[1];
    } else {
        v->B = q->shape[0];
        v->T = q->shape[1];
        v->H = q->shape[2];
        v->K = q->shape[3];
        v->HV = val->shape[2];
        v->V = val->shape[3];
        v->N = cu ? lacs_tensor_count(cu) - 1 : v->B;
    }
    const char *names[] = {"B", "T", "H", "HV", "K", "V", "N", "rows", "dim"};
    const int64_t values[] = {v->B, v->T, v->H, v->HV, v->K, v->V, v->N, v->rows, v->dim};
    for (int i = 0; i < 9; i++) {
        const cJSON *stated = cJSON_GetObjectItemCaseSensitive(dims, names[i]);
        if (stated && (!cJSON_IsNumber(stated) || stated->valuedouble != (double)values[i]))
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "dims.%s is %g; the tensors' shapes give %lld",
                                names[i], cJSON_IsNumber(stated) ? stated->valuedouble : NAN, (long long)values[i]);
    }
    return LACS_OK;
}

/* The parameters: numbers, finite, each one the op reads or the checker's
 * `split`, which (SPEC.md 10.5) is a whole number 0 < split < T on a
 * fixed-length case of an op with a state. */
static int load_params(lacs_vector *v, const cJSON *params, const lacs_op_info *info, int *used_names)
{
    const cJSON *p;
    cJSON_ArrayForEach(p, params)
    {
        if (!cJSON_IsNumber(p) || !isfinite(p->valuedouble))
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "params.%.40s is not a finite number",
                                p->string ? p->string : "?");
        if (v->n_params >= LACS_CHECK_MAX_PARAMS)
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "more than %d params", LACS_CHECK_MAX_PARAMS);
        const int is_split = strcmp(p->string, "split") == 0;
        if (!is_split && !lacs_word_in_list(info->params, p->string))
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "params.%.40s: %s reads no such parameter (its: %s)",
                                p->string, info->name, info->params[0] ? info->params : "none");
        if (is_split) {
            const double split = p->valuedouble;
            if (info->family == LACS_FAMILY_NORM || info->family == LACS_FAMILY_ATTENTION)
                return vector_error(v, LACS_ERR_FORMAT, "metadata", "params.split: %s has no state to carry",
                                    info->name);
            if (find_input(v, "cu_seqlens"))
                return vector_error(v, LACS_ERR_FORMAT, "metadata",
                                    "params.split: a state-carry case is of fixed length (no cu_seqlens)");
            if (!(split == floor(split) && split > 0 && split < (double)v->T))
                return vector_error(v, LACS_ERR_FORMAT, "metadata",
                                    "params.split is %g; a state carry needs a whole number 0 < split < T = %lld",
                                    split, (long long)v->T);
        }
        v->params[v->n_params].name = name_slot(v, used_names, p->string);
        v->params[v->n_params].value = p->valuedouble;
        if (!v->params[v->n_params++].name)
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "parameter name '%.40s' too long", p->string);
    }
    return LACS_OK;
}

static int has_param(const lacs_vector *v, const char *name)
{
    for (int i = 0; i < v->n_params; i++)
        if (strcmp(v->params[i].name, name) == 0)
            return 1;
    return 0;
}

/* The goldens the case must have: the op's outputs for these inputs, and for
 * a state carry the states after `split` tokens (ht_split, ht_kk_split). */
typedef struct {
    char name[32];
    int ndim;
    int64_t shape[4];
    char base[32];   /* the output whose length factor it takes: ht_split -> ht */
} golden_spec;

static int required_goldens(const lacs_vector *v, golden_spec *specs, int *n)
{
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int count;
    if (lacs_reference_output_shapes(v->op, v->inputs, v->n_inputs, shapes, &count) != LACS_OK)
        return vector_error(v, LACS_ERR_FORMAT, "tensor", "the inputs are not what %s reads: %s", v->op,
                            lacs_last_error());
    *n = 0;
    const int split = has_param(v, "split");
    for (int i = 0; i < count; i++) {
        for (int copy = 0; copy < 1 + (split && strncmp(shapes[i].name, "ht", 2) == 0); copy++) {
            golden_spec *s = &specs[(*n)++];
            snprintf(s->name, sizeof s->name, "%s%s", shapes[i].name, copy ? "_split" : "");
            snprintf(s->base, sizeof s->base, "%s", shapes[i].name);
            s->ndim = shapes[i].ndim;
            memcpy(s->shape, shapes[i].shape, sizeof s->shape);
        }
    }
    const lacs_op_info *info = lacs_op_find(v->op);
    if (split && info && info->family == LACS_FAMILY_VJP) {
        /* a backward's state carry: the state's cotangent at the split (SPEC.md 11.5), [B, HV, K, V] */
        golden_spec *s = &specs[(*n)++];
        snprintf(s->name, sizeof s->name, "dh_split");
        snprintf(s->base, sizeof s->base, "dh");
        s->ndim = 4;
        const int64_t shape[4] = {v->B, v->HV, v->K, v->V};
        memcpy(s->shape, shape, sizeof shape);
    }
    return LACS_OK;
}

static int same_shape(const lacs_safetensors_tensor *t, const golden_spec *s)
{
    if (t->ndim != s->ndim)
        return 0;
    for (int d = 0; d < s->ndim; d++)
        if (t->shape[d] != s->shape[d])
            return 0;
    return 1;
}

/* The gauge of output i (SPEC.md 11.2): finite, non-negative, 0 where the
 * golden is not finite, and (for models that say so) no smaller than the
 * golden's magnitude less its F32 rounding. An infinite or huge-by-design
 * gauge would allow any output. */
static int check_gauge(const lacs_vector *v, int i, const tolerance_model *model)
{
    const double *g = v->gauge[i], *y = v->expected[i].data;
    const int64_t n = lacs_tensor_count(&v->expected[i]);
    for (int64_t e = 0; e < n; e++) {
        /* |y| as the F32 gauge can hold it (a tiny golden's gauge underflows to 0) */
        const double magnitude = fabs(y[e]) > FLT_MAX ? FLT_MAX : (double)(float)fabs(y[e]);
        const int bad = !isfinite(g[e]) || g[e] < 0 || (!isfinite(y[e]) && g[e] != 0) ||
                        (model->gauge_covers_golden && isfinite(y[e]) && g[e] < magnitude * (1 - 0x1p-20));
        if (bad) {
            char where[160];
            lacs_describe_element(v, i, e, where, sizeof where);
            return vector_error(v, LACS_ERR_FORMAT, "tensor",
                                "gauge.%s is %.9g at %s, where the golden is %.17g: a gauge is finite, at least "
                                "the golden's magnitude, and 0 where the golden is not finite (SPEC.md 11.2)",
                                v->expected[i].name, g[e], where, y[e]);
        }
    }
    return LACS_OK;
}

/* The longest sum of an attention output: max(K, the longest sequence) (SPEC.md 11.3). */
static int64_t longest_sequence(const lacs_vector *v)
{
    const lacs_tensor *cu = find_input(v, "cu_seqlens");
    if (!cu)
        return v->T;
    const int64_t *offsets = cu->data;
    int64_t longest = 0;
    for (int64_t n = 0; n + 1 < lacs_tensor_count(cu); n++)
        longest = offsets[n + 1] - offsets[n] > longest ? offsets[n + 1] - offsets[n] : longest;
    return longest;
}

/* The goldens and gauges, in the metadata's order of outputs, which must name
 * exactly the goldens the case has (an output left out would go unchecked). */
static int load_goldens(lacs_vector *v, const cJSON *root, const cJSON *outputs, const lacs_op_info *info,
                        const tolerance_model *model, int *used_names)
{
    golden_spec specs[2 * LACS_OPS_MAX_OUTPUTS];
    int n_specs;
    int rc = required_goldens(v, specs, &n_specs);
    if (rc != LACS_OK)
        return rc;
    const cJSON *lengths =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "tolerance"), "length_factor");
    const lacs_tensor *cu = find_input(v, "cu_seqlens");
    const int fp32 = strcmp(v->tier, "fp32") == 0;
    const cJSON *out;
    cJSON_ArrayForEach(out, outputs)
    {
        if (!cJSON_IsString(out) || strlen(out->valuestring) > 30 || v->n_outputs >= LACS_CHECK_MAX_OUTPUTS)
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "outputs must be at most %d short names",
                                LACS_CHECK_MAX_OUTPUTS);
        const golden_spec *spec = NULL;
        for (int s = 0; s < n_specs; s++)
            if (strcmp(specs[s].name, out->valuestring) == 0)
                spec = &specs[s];
        if (!spec)
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "outputs names '%s', which %s does not give here",
                                out->valuestring, info->name);
        for (int j = 0; j < v->n_outputs; j++)
            if (strcmp(v->expected[j].name, out->valuestring) == 0)
                return vector_error(v, LACS_ERR_FORMAT, "metadata", "outputs names '%s' twice", out->valuestring);
        char name[64];
        snprintf(name, sizeof name, "expected.%s", out->valuestring);
        const lacs_safetensors_tensor *e = lacs_safetensors_find(&v->file, name);
        if (!e || e->dtype != LACS_F64 || !same_shape(e, spec))
            return vector_error(v, LACS_ERR_FORMAT, "tensor", "tensor '%s' (F64 [%lld, ...], %d dimensions) is "
                                "missing or misshapen", name, (long long)spec->shape[0], spec->ndim);
        lacs_tensor *x = &v->expected[v->n_outputs];
        x->name = name_slot(v, used_names, out->valuestring);
        x->dtype = LACS_F64;
        x->ndim = e->ndim;
        x->shape = e->shape;
        x->data = own(v, (size_t)e->count * sizeof(double));
        if (!x->data || !x->name)
            return vector_error(v, LACS_ERR_MEMORY, "tensor", "out of memory");
        lacs_safetensors_to_double(e, x->data);
        snprintf(name, sizeof name, "gauge.%s", out->valuestring);
        const lacs_safetensors_tensor *g = lacs_safetensors_find(&v->file, name);
        if (!g || (g->dtype != LACS_F32 && g->dtype != LACS_F64) || !same_shape(g, spec))
            return vector_error(v, LACS_ERR_FORMAT, "tensor",
                                "tensor '%s' (F32 or F64, the shape of expected.%s) is missing or misshapen", name,
                                out->valuestring);
        v->gauge[v->n_outputs] = own(v, (size_t)g->count * sizeof(double));
        if (!v->gauge[v->n_outputs])
            return vector_error(v, LACS_ERR_MEMORY, "tensor", "out of memory");
        lacs_safetensors_to_double(g, v->gauge[v->n_outputs]);
        const double stated = number_field(lengths, out->valuestring, NAN);
        const double length = lacs_gauge_length_factor(v->op, spec->base, fp32, v->K, longest_sequence(v), v->rows,
                                                       v->dim);
        if (!same_constant(stated, length))
            return vector_error(v, LACS_ERR_FORMAT, "tolerance",
                                "length_factor.%s is %.17g; %s gives %.17g for this case (SPEC.md 11.3)",
                                out->valuestring, stated, model->model, length);
        v->length_factor[v->n_outputs] = length;
        set_layout(v, v->n_outputs, info->family, cu ? cu->data : NULL, cu ? lacs_tensor_count(cu) - 1 : 0);
        v->n_outputs++;
        rc = check_gauge(v, v->n_outputs - 1, model);
        if (rc != LACS_OK)
            return rc;
    }
    for (int s = 0; s < n_specs; s++) {
        int listed = 0;
        for (int j = 0; j < v->n_outputs; j++)
            listed |= strcmp(v->expected[j].name, specs[s].name) == 0;
        if (!listed)
            return vector_error(v, LACS_ERR_FORMAT, "metadata",
                                "outputs leaves out '%s', which %s gives here: it would go unchecked", specs[s].name,
                                info->name);
    }
    /* every golden and gauge in the file belongs to a listed output */
    for (int i = 0; i < v->file.n_tensors; i++) {
        const char *t = v->file.tensors[i].name;
        const char *output = strncmp(t, "expected.", 9) == 0 ? t + 9 : strncmp(t, "gauge.", 6) == 0 ? t + 6 : NULL;
        int listed = 0;
        for (int j = 0; output && j < v->n_outputs; j++)
            listed |= strcmp(v->expected[j].name, output) == 0;
        if (output && !listed)
            return vector_error(v, LACS_ERR_FORMAT, "metadata", "tensor '%.40s' belongs to no output in outputs",
                                t);
    }
    return LACS_OK;
}

int lacs_vector_load_verified(const char *path, const char *sha256, lacs_vector *v)
{
    memset(v, 0, sizeof *v);
    snprintf(v->path, sizeof v->path, "%s", path);
    int rc = lacs_safetensors_read_expecting(path, sha256, &v->file);
    if (rc != LACS_OK)
        return rc; /* the reader's message names the file and the fault (a hash that differs included) */
    const char *text = lacs_safetensors_metadata(&v->file, "lacs");
    if (!text)
        return vector_error(v, LACS_ERR_FORMAT, "metadata", "no 'lacs' entry (not a lacs vector)");
    v->metadata = (char *)text;
    cJSON *root = cJSON_Parse(text);
    const char *repeated = NULL;
    if (!cJSON_IsObject(root))
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "'lacs' is not a JSON object");
    else if ((repeated = repeated_key(root)) != NULL)
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "the key '%.40s' is repeated", repeated);
    int used_names = 0;
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    const cJSON *op = cJSON_GetObjectItemCaseSensitive(root, "op");
    const cJSON *tier = cJSON_GetObjectItemCaseSensitive(root, "tier");
    const cJSON *reason = cJSON_GetObjectItemCaseSensitive(root, "reason");
    const cJSON *flags = cJSON_GetObjectItemCaseSensitive(root, "flags");
    const cJSON *level = cJSON_GetObjectItemCaseSensitive(root, "level");
    const cJSON *level_reason = cJSON_GetObjectItemCaseSensitive(root, "level_reason");
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dims");
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(root, "outputs");
    const lacs_op_info *info = cJSON_IsString(op) ? lacs_op_find(op->valuestring) : NULL;
    if (rc != LACS_OK)
        ;
    else if (!cJSON_IsString(format) || strcmp(format->valuestring, "lacs-vector/1") != 0)
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "format must be \"lacs-vector/1\"");
    else if (!cJSON_IsString(id) || !cJSON_IsString(tier) || !cJSON_IsArray(outputs) || !cJSON_IsObject(params))
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "id, tier, params and outputs are required");
    else if (strlen(id->valuestring) >= sizeof v->id)
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "id is longer than %zu bytes", sizeof v->id - 1);
    else if (!info)
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "missing or unknown op");
    else if (strcmp(tier->valuestring, "fp32") != 0 && strcmp(tier->valuestring, "bf16") != 0)
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "tier must be fp32 or bf16");
    else if (level && (!cJSON_IsString(level) ||
                       (strcmp(level->valuestring, "required") != 0 && strcmp(level->valuestring, "strict") != 0)))
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "level must be \"required\" or \"strict\"");
    else if (dims && !cJSON_IsObject(dims))
        rc = vector_error(v, LACS_ERR_FORMAT, "metadata", "dims must be an object");
    if (rc == LACS_OK) {
        snprintf(v->id, sizeof v->id, "%s", id->valuestring);
        snprintf(v->op, sizeof v->op, "%s", info->name);
        snprintf(v->tier, sizeof v->tier, "%s", tier->valuestring);
        v->reason = strdup(cJSON_IsString(reason) ? reason->valuestring : "");
        v->strict = level && strcmp(level->valuestring, "strict") == 0;
        v->level_reason = strdup(cJSON_IsString(level_reason) ? level_reason->valuestring : "");
        const cJSON *flag;
        cJSON_ArrayForEach(flag, flags) if (cJSON_IsString(flag) &&
                                             strlen(v->flags) + strlen(flag->valuestring) + 2 < sizeof v->flags)
        {
            if (v->flags[0])
                strcat(v->flags, " ");
            strcat(v->flags, flag->valuestring);
        }
        if (!v->reason || !v->level_reason)
            rc = vector_error(v, LACS_ERR_MEMORY, "metadata", "out of memory");
    }
    const tolerance_model *model = NULL;
    if (rc == LACS_OK)
        rc = load_inputs(v, &used_names);
    if (rc == LACS_OK) {
        lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
        int count;
        if (lacs_reference_output_shapes(v->op, v->inputs, v->n_inputs, shapes, &count) != LACS_OK)
            rc = vector_error(v, LACS_ERR_FORMAT, "tensor", "the inputs are not what %s reads: %s", v->op,
                              lacs_last_error());
    }
    if (rc == LACS_OK)
        rc = load_dims(v, dims, info);
    if (rc == LACS_OK && find_input(v, "cu_seqlens"))
        rc = check_offsets(v, find_input(v, "cu_seqlens"), v->T);
    if (rc == LACS_OK)
        rc = load_params(v, params, info, &used_names);
    if (rc == LACS_OK)
        rc = load_tolerance(v, root, &model);
    if (rc == LACS_OK)
        rc = load_goldens(v, root, outputs, info, model, &used_names);
    cJSON_Delete(root);
    return rc;
}

int lacs_vector_load(const char *path, lacs_vector *v) { return lacs_vector_load_verified(path, NULL, v); }

void lacs_vector_free(lacs_vector *v)
{
    for (int i = 0; i < v->n_owned; i++)
        free(v->owned[i]);
    free(v->reason);
    free(v->level_reason);
    lacs_safetensors_free(&v->file);
    memset(v, 0, sizeof *v);
}

lacs_vector *lacs_vector_open_verified(const char *path, const char *sha256)
{
    lacs_vector *v = malloc(sizeof *v);
    if (!v) {
        lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", path);
        return NULL;
    }
    if (lacs_vector_load_verified(path, sha256, v) != LACS_OK) {
        lacs_vector_free(v);
        free(v);
        return NULL;
    }
    return v;
}

lacs_vector *lacs_vector_open(const char *path) { return lacs_vector_open_verified(path, NULL); }

void lacs_vector_close(lacs_vector *v)
{
    if (v) {
        lacs_vector_free(v);
        free(v);
    }
}

/* ---- what a vector holds, for callers without the struct (ctypes) ---- */

int lacs_vector_is_strict(const lacs_vector *v) { return v->strict; }

int lacs_vector_count(const lacs_vector *v, int which)
{
    return which == LACS_VECTOR_INPUTS ? v->n_inputs : which == LACS_VECTOR_GOLDENS ? v->n_outputs
                                                   : which == LACS_VECTOR_PARAMS   ? v->n_params
                                                                                   : -1;
}

int lacs_vector_tensor(const lacs_vector *v, int which, int i, lacs_tensor *t)
{
    if (i < 0 || i >= lacs_vector_count(v, which) || which == LACS_VECTOR_PARAMS)
        return lacs_internal_error(LACS_ERR_INPUT, v->id, "no tensor %d of kind %d", i, which);
    *t = which == LACS_VECTOR_INPUTS ? v->inputs[i] : v->expected[i];
    return LACS_OK;
}

int lacs_vector_param(const lacs_vector *v, int i, lacs_param *p)
{
    if (i < 0 || i >= v->n_params)
        return lacs_internal_error(LACS_ERR_INPUT, v->id, "no parameter %d", i);
    *p = v->params[i];
    return LACS_OK;
}

const char *lacs_vector_text(const lacs_vector *v, const char *field)
{
    if (strcmp(field, "id") == 0)
        return v->id;
    if (strcmp(field, "op") == 0)
        return v->op;
    if (strcmp(field, "tier") == 0)
        return v->tier;
    if (strcmp(field, "flags") == 0)
        return v->flags;
    if (strcmp(field, "reason") == 0)
        return v->reason ? v->reason : "";
    if (strcmp(field, "level_reason") == 0)
        return v->level_reason ? v->level_reason : "";
    if (strcmp(field, "path") == 0)
        return v->path;
    if (strcmp(field, "sha256") == 0)
        return v->file.sha256;
    if (strcmp(field, "tolerance_model") == 0)
        return v->tolerance.model;
    return NULL;
}

/* ---- the comparison of one output (SPEC.md 11.3, 11.4) ---- */

static int64_t block_count(const lacs_layout *l)
{
    return (l->cu_seqlens ? l->n_seqs : l->outer) * l->heads;
}

/* Block b's token range [*t0, *t1) and the flat offset of its (outer, head). */
static void block_range(const lacs_layout *l, int64_t b, int64_t *t0, int64_t *t1, int64_t *base, int64_t *head)
{
    const int64_t n = b / l->heads;
    *head = b % l->heads;
    *t0 = l->cu_seqlens ? l->cu_seqlens[n] : 0;
    *t1 = l->cu_seqlens ? l->cu_seqlens[n + 1] : l->T;
    *base = l->cu_seqlens ? 0 : n * l->T * l->heads * l->width;
}

static int64_t element_index(const lacs_layout *l, int64_t base, int64_t t, int64_t head, int64_t c)
{
    return base + (t * l->heads + head) * l->width + c;
}

/* Whether x and y agree in kind (SPEC.md 11.4): NaN with NaN, an infinity with
 * the same infinity, finite with finite. */
static int same_kind(double x, double y)
{
    if (isnan(y))
        return isnan(x);
    if (isinf(y))
        return x == y;
    return isfinite(x);
}

/* Element ratio |x - y| / (c_e u L (g + floor)); a zero allowance needs x == y. */
static double element_ratio(double diff, double allowed)
{
    if (diff == 0)
        return 0;
    return allowed > 0 ? diff / allowed : INFINITY;
}

/* The element bound of SPEC.md 11.3 for output i: c_e (u L (g + floor) + eta),
 * floor = f RMS(g) over the element's block (gauge2: the block's sum of g^2
 * over its `finite` elements). The one place it is written; the check and the
 * error over time both use it. */
static double block_floor(const lacs_tolerance *tol, double gauge2, int64_t finite)
{
    return finite > 0 ? tol->floor_fraction * sqrt(gauge2 / (double)finite) : 0;
}

static double element_allowance(const lacs_vector *v, int i, double gauge, double floor)
{
    const lacs_tolerance *tol = &v->tolerance;
    return tol->elementwise_factor * (tol->unit_roundoff * v->length_factor[i] * (gauge + floor) + tol->underflow);
}

static void check_output(const lacs_vector *v, int i, const double *x, lacs_output_check *r)
{
    const lacs_layout *l = &v->layout[i];
    const lacs_tolerance *tol = &v->tolerance;
    const double *y = v->expected[i].data, *g = v->gauge[i];
    const int provisional = g == NULL;
    const double unit = tol->unit_roundoff * v->length_factor[i];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", v->expected[i].name);
    r->worst_element = -1;
    for (int64_t b = 0; b < block_count(l); b++) {
        int64_t t0, t1, base, head;
        block_range(l, b, &t0, &t1, &base, &head);
        double diff2 = 0, ref2 = 0, gauge2 = 0;
        int64_t finite = 0;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t c = 0; c < l->width; c++) {
                const int64_t e = element_index(l, base, t, head, c);
                if (!same_kind(x[e], y[e])) {
                    if (r->nonfinite_mismatches++ == 0) {
                        r->worst_element = e;
                        r->expected_value = y[e];
                        r->actual_value = x[e];
                        r->allowed_error = 0;
                        r->elementwise_ratio = INFINITY;
                    }
                    continue;
                }
                if (!isfinite(y[e]))
                    continue;
                const double d = x[e] - y[e];
                diff2 += d * d;
                ref2 += y[e] * y[e];
                gauge2 += provisional ? 0 : g[e] * g[e];
                finite++;
            }
        /* normwise: ||x - y||_F <= c_n u L ||g||_F (provisional: relative bound) */
        const double allowed_norm = provisional ? tol->provisional * sqrt(ref2)
                                                : tol->normwise_factor * (unit * sqrt(gauge2) +
                                                                          tol->underflow * sqrt((double)finite));
        const double norm_ratio = element_ratio(sqrt(diff2), allowed_norm);
        if (b == 0 || norm_ratio > r->normwise_ratio) {
            r->normwise_ratio = norm_ratio;
            r->normwise_error = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
            r->worst_block = b;
        }
        if (provisional || finite == 0)
            continue;
        /* elementwise: |x - y| <= c_e (u L (g + floor) + eta) */
        const double floor = block_floor(tol, gauge2, finite);
        for (int64_t t = t0; t < t1; t++)
            for (int64_t c = 0; c < l->width; c++) {
                const int64_t e = element_index(l, base, t, head, c);
                if (!isfinite(y[e]) || !isfinite(x[e]))
                    continue;
                const double allowed = element_allowance(v, i, g[e], floor);
                const double ratio = element_ratio(fabs(x[e] - y[e]), allowed);
                if (ratio > r->elementwise_ratio && r->nonfinite_mismatches == 0) {
                    r->elementwise_ratio = ratio;
                    r->worst_element = e;
                    r->expected_value = y[e];
                    r->actual_value = x[e];
                    r->allowed_error = allowed;
                }
            }
    }
    if (r->nonfinite_mismatches > 0)
        r->ratio = INFINITY;
    else
        r->ratio = r->normwise_ratio > r->elementwise_ratio ? r->normwise_ratio : r->elementwise_ratio;
    if (provisional && r->worst_element < 0 && l->width > 0) {
        r->worst_element = 0;
        r->expected_value = y[0];
        r->actual_value = x[0];
    }
}

/* The candidate's output `name` as double, checked against golden i's shape. */
static int find_actual(const lacs_vector *v, int i, const lacs_tensor *actual, int n_actual, double **out)
{
    const lacs_tensor *e = &v->expected[i];
    const lacs_tensor *found = NULL;
    for (int a = 0; a < n_actual; a++)
        if (actual[a].name && strcmp(actual[a].name, e->name) == 0) {
            if (found)
                return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: output '%s' given twice", v->id, e->name);
            found = &actual[a];
        }
    if (!found)
        return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: output '%s' is missing", v->id, e->name);
    int same = found->ndim == e->ndim && found->shape;
    for (int d = 0; same && d < e->ndim; d++)
        same = found->shape[d] == e->shape[d];
    if (!same) {
        char want[96] = "", got[96] = "";
        for (int d = 0; d < e->ndim; d++)
            snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", d ? ", " : "",
                     (long long)e->shape[d]);
        for (int d = 0; found->shape && d < found->ndim && d < 8; d++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", d ? ", " : "",
                     (long long)found->shape[d]);
        return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: output '%s' has shape [%s], the golden [%s]", v->id,
                                   e->name, got, want);
    }
    if (found->dtype != LACS_F32 && found->dtype != LACS_F64 && found->dtype != LACS_BF16)
        return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: output '%s' must be F32, BF16 or F64", v->id,
                                   e->name);
    const int64_t count = lacs_tensor_count(e);
    *out = malloc((size_t)count * sizeof(double) + 8);
    if (!*out)
        return lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", v->id);
    if (count > 0 && !found->data) {
        free(*out);
        return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: output '%s' has no data", v->id, e->name);
    }
    lacs_values_to_double(found->dtype, found->data, count, *out);
    return LACS_OK;
}

int lacs_check_outputs(const lacs_vector *v, const lacs_tensor *actual, int n_actual, lacs_check_result *r)
{
    memset(r, 0, sizeof *r);
    for (int a = 0; a < n_actual; a++) {
        int known = 0;
        for (int i = 0; i < v->n_outputs && !known; i++)
            known = actual[a].name && strcmp(actual[a].name, v->expected[i].name) == 0;
        if (!known)
            return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: unexpected output '%s'", v->id,
                                       actual[a].name ? actual[a].name : "(null)");
    }
    for (int i = 0; i < v->n_outputs; i++) {
        double *x;
        int rc = find_actual(v, i, actual, n_actual, &x);
        if (rc != LACS_OK)
            return rc;
        check_output(v, i, x, &r->outputs[i]);
        free(x);
        const double ratio = r->outputs[i].ratio;
        if (isnan(ratio) || ratio > r->ratio || i == 0)
            r->ratio = isnan(r->ratio) ? r->ratio : ratio;
    }
    r->n_outputs = v->n_outputs;
    return LACS_OK;
}

int lacs_check_error_over_time(const lacs_vector *v, int output, const lacs_tensor *actual, double *ratio_t)
{
    if (output < 0 || output >= v->n_outputs || v->layout[output].kind != LACS_LAYOUT_SEQUENCE)
        return lacs_internal_error(LACS_ERR_SHAPE, NULL, "%s: output %d is not a sequence output", v->id, output);
    double *x;
    int rc = find_actual(v, output, actual, v->n_outputs, &x);
    if (rc != LACS_OK)
        return rc;
    const lacs_layout *l = &v->layout[output];
    const double *y = v->expected[output].data, *g = v->gauge[output];
    for (int64_t t = 0; t < l->T; t++)
        ratio_t[t] = 0;
    for (int64_t b = 0; b < block_count(l); b++) {
        int64_t t0, t1, base, head;
        block_range(l, b, &t0, &t1, &base, &head);
        double gauge2 = 0, ref2 = 0;
        int64_t finite = 0;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t c = 0; c < l->width; c++) {
                const int64_t e = element_index(l, base, t, head, c);
                if (isfinite(y[e])) {
                    gauge2 += g ? g[e] * g[e] : 0;
                    ref2 += y[e] * y[e];
                    finite++;
                }
            }
        const double floor = block_floor(&v->tolerance, gauge2, finite);
        /* provisional vectors: the relative bound applied to each element against the block's RMS */
        const double scale = finite ? sqrt(ref2 / (double)finite) : 0;
        for (int64_t t = t0; t < t1; t++)
            for (int64_t c = 0; c < l->width; c++) {
                const int64_t e = element_index(l, base, t, head, c);
                double ratio;
                if (!same_kind(x[e], y[e]))
                    ratio = INFINITY;
                else if (!isfinite(y[e]))
                    ratio = 0;
                else if (g)
                    ratio = element_ratio(fabs(x[e] - y[e]), element_allowance(v, output, g[e], floor));
                else
                    ratio = element_ratio(fabs(x[e] - y[e]), v->tolerance.provisional * scale);
                if (ratio > ratio_t[t])
                    ratio_t[t] = ratio;
            }
    }
    free(x);
    return LACS_OK;
}

/* ---- running an implementation on a case ---- */

/* Guarded buffers (SPEC.md 11.5). Every buffer an implementation is handed
 * lies in a mapping of its own: [guard page][body][guard page], the guard
 * pages inaccessible. The data sits at the end of the body, its start
 * 64-byte aligned; the slack before and after it (the tail less than 64
 * bytes) holds a canary pattern. So a write past either end of an output
 * either faults on a guard page or changes the canary, which is checked after
 * every call; an input other than an initial state is made read-only, so a
 * write into it faults. The table below lets a fault handler (the CLI's case
 * process) say which buffer an address belongs to. */
enum { GUARD_OUTPUT = 1, GUARD_INPUT = 2, GUARD_OWN_INPUT = 3 };

typedef struct {
    unsigned char *map, *body, *data;
    size_t map_size, body_size, size;
    char name[32];
    int kind;
    int slot; /* in guard_table, or -1 */
} guarded;

#define GUARD_TABLE_SIZE 128
static struct {
    uintptr_t map_start, map_end, data_start, data_end;
    int kind;
    char name[32];
} guard_table[GUARD_TABLE_SIZE];
static pthread_mutex_t guard_table_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned char canary_byte(size_t offset) { return (unsigned char)(0xA5u ^ (offset * 29u)); }

static void guarded_release(guarded *g)
{
    if (g->slot >= 0) {
        pthread_mutex_lock(&guard_table_lock);
        guard_table[g->slot].kind = 0;
        pthread_mutex_unlock(&guard_table_lock);
    }
    if (g->map)
        munmap(g->map, g->map_size);
    memset(g, 0, sizeof *g);
    g->slot = -1;
}

static int guarded_alloc(guarded *g, size_t size, const char *name, int kind)
{
    memset(g, 0, sizeof *g);
    g->slot = -1;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    g->size = size;
    g->body_size = (size + 64 + page - 1) / page * page; /* 64 bytes of canary before the data at least */
    g->map_size = g->body_size + 2 * page;
    void *map = mmap(NULL, g->map_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return 0;
    g->map = map;
    g->body = g->map + page;
    if (mprotect(g->body, g->body_size, PROT_READ | PROT_WRITE) != 0) {
        guarded_release(g);
        return 0;
    }
    g->data = g->body + ((g->body_size - size) & ~(size_t)63);
    for (unsigned char *p = g->body; p < g->data; p++)
        *p = canary_byte((size_t)(p - g->body));
    for (unsigned char *p = g->data + size; p < g->body + g->body_size; p++)
        *p = canary_byte((size_t)(p - g->body));
    snprintf(g->name, sizeof g->name, "%s", name);
    g->kind = kind;
    pthread_mutex_lock(&guard_table_lock);
    for (int i = 0; i < GUARD_TABLE_SIZE; i++)
        if (guard_table[i].kind == 0) {
            guard_table[i].map_start = (uintptr_t)g->map;
            guard_table[i].map_end = (uintptr_t)(g->map + g->map_size);
            guard_table[i].data_start = (uintptr_t)g->data;
            guard_table[i].data_end = (uintptr_t)(g->data + size);
            snprintf(guard_table[i].name, sizeof guard_table[i].name, "%s", name);
            guard_table[i].kind = kind;
            g->slot = i;
            break;
        }
    pthread_mutex_unlock(&guard_table_lock);
    return 1;
}

/* Whether a byte of slack lost its canary: *after says whether past the end
 * (else before the start), *extent how far the farthest such byte lies from
 * the data (1 = the byte just past the end, or just before the start). */
static int guarded_damage(const guarded *g, int *after, size_t *extent)
{
    for (const unsigned char *p = g->body + g->body_size; p > g->data + g->size; p--)
        if (p[-1] != canary_byte((size_t)(p - 1 - g->body))) {
            *after = 1;
            *extent = (size_t)(p - (g->data + g->size));
            return 1;
        }
    for (const unsigned char *p = g->body; p < g->data; p++)
        if (*p != canary_byte((size_t)(p - g->body))) {
            *after = 0;
            *extent = (size_t)(g->data - p);
            return 1;
        }
    return 0;
}

int lacs_check_describe_fault(const void *address, char *buf, size_t size)
{
    const uintptr_t a = (uintptr_t)address;
    for (int i = 0; i < GUARD_TABLE_SIZE; i++) {
        if (guard_table[i].kind == 0 || a < guard_table[i].map_start || a >= guard_table[i].map_end)
            continue;
        const char *what = guard_table[i].kind == GUARD_OUTPUT ? "output" : "input";
        if (guard_table[i].kind == GUARD_INPUT && a >= guard_table[i].data_start && a < guard_table[i].data_end)
            snprintf(buf, size, "wrote into input '%s', which is read-only (SPEC.md 11.5)", guard_table[i].name);
        else if (a < guard_table[i].data_start)
            snprintf(buf, size, "touched memory before the start of %s '%s' (%zu bytes before it)", what,
                     guard_table[i].name, (size_t)(guard_table[i].data_start - a));
        else
            snprintf(buf, size, "touched memory past the end of %s '%s' (%zu bytes after its last element)", what,
                     guard_table[i].name, (size_t)(a - guard_table[i].data_end));
        return 1;
    }
    return 0;
}

/* After a call: the canaries of the buffers it could write. */
static int check_guards(const lacs_vector *v, const guarded *const *buffers, int n)
{
    for (int i = 0; i < n; i++) {
        int after;
        size_t extent;
        if (buffers[i] && guarded_damage(buffers[i], &after, &extent)) {
            const char *what = buffers[i]->kind == GUARD_OUTPUT ? "output" : "input";
            return lacs_internal_error(LACS_ERR_INPUT, v->id,
                                       "the implementation wrote %s %s '%s' (up to %zu bytes %s it)",
                                       after ? "past the end of" : "before the start of", what, buffers[i]->name,
                                       extent, after ? "after" : "before");
        }
    }
    return LACS_OK;
}

static int is_initial_state(const char *name)
{
    return strcmp(name, "h0") == 0 || strcmp(name, "h0_kk") == 0;
}

/* A tensor per sequence, never cut along T by a state carry: the initial
 * states and the cotangents of the final ones. */
static int is_per_sequence(const char *name)
{
    return is_initial_state(name) || strcmp(name, "dht") == 0 || strcmp(name, "dht_kk") == 0;
}

/* One call's buffers: its inputs (guarded copies: read-only, but for the
 * initial states, the implementation's own) and its outputs. */
typedef struct {
    guarded in[LACS_CHECK_MAX_INPUTS], out[LACS_CHECK_MAX_OUTPUTS];
    lacs_tensor inputs[LACS_CHECK_MAX_INPUTS], outputs[LACS_CHECK_MAX_OUTPUTS];
    int64_t input_shapes[LACS_CHECK_MAX_INPUTS][LACS_SAFETENSORS_MAX_DIMS];
    int64_t output_shapes[LACS_CHECK_MAX_OUTPUTS][4];
    int n_inputs, n_outputs;
} call_buffers;

static void call_buffers_init(call_buffers *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < LACS_CHECK_MAX_INPUTS; i++)
        b->in[i].slot = -1;
    for (int i = 0; i < LACS_CHECK_MAX_OUTPUTS; i++)
        b->out[i].slot = -1;
}

static void call_buffers_free(call_buffers *b)
{
    for (int i = 0; i < b->n_inputs; i++)
        guarded_release(&b->in[i]);
    for (int i = 0; i < b->n_outputs; i++)
        guarded_release(&b->out[i]);
    b->n_inputs = b->n_outputs = 0;
}

/* Adds an input: `bytes` from data (a sequence input [B, T, ...] sliced to
 * tokens [t0, t1) when slice_T > 0), sealed read-only unless an initial state. */
static int add_input(const lacs_vector *v, call_buffers *b, const lacs_tensor *in, int64_t t0, int64_t t1,
                     int64_t slice_T)
{
    const int i = b->n_inputs;
    lacs_tensor *t = &b->inputs[i];
    *t = *in;
    memcpy(b->input_shapes[i], in->shape, (size_t)in->ndim * sizeof(int64_t));
    t->shape = b->input_shapes[i];
    const size_t elem = lacs_dtype_size(in->dtype);
    int64_t rest = 1;
    for (int d = 2; d < in->ndim; d++)
        rest *= in->shape[d];
    const int sliced = slice_T > 0 && in->ndim >= 2 && in->shape[1] == slice_T && !is_per_sequence(in->name);
    if (sliced)
        b->input_shapes[i][1] = t1 - t0;
    const size_t bytes = (size_t)lacs_tensor_count(t) * elem;
    const int own_copy = is_initial_state(in->name);
    if (!guarded_alloc(&b->in[i], bytes, in->name, own_copy ? GUARD_OWN_INPUT : GUARD_INPUT))
        return lacs_internal_error(LACS_ERR_MEMORY, v->id, "cannot map the input '%s': out of memory", in->name);
    b->n_inputs++;
    if (sliced) {
        for (int64_t batch = 0; batch < in->shape[0]; batch++)
            memcpy(b->in[i].data + (size_t)(batch * (t1 - t0) * rest) * elem,
                   (const char *)in->data + (size_t)((batch * slice_T + t0) * rest) * elem,
                   (size_t)((t1 - t0) * rest) * elem);
    } else if (bytes > 0) {
        memcpy(b->in[i].data, in->data, bytes);
    }
    t->data = b->in[i].data;
    if (!own_copy && mprotect(b->in[i].body, b->in[i].body_size, PROT_READ) != 0)
        return lacs_internal_error(LACS_ERR_MEMORY, v->id, "cannot protect the input '%s'", in->name);
    return LACS_OK;
}

/* Adds a zero-filled F32 output `name` of the given shape. */
static int add_output(const lacs_vector *v, call_buffers *b, const char *name, int ndim, const int64_t *shape)
{
    const int i = b->n_outputs;
    memcpy(b->output_shapes[i], shape, (size_t)ndim * sizeof(int64_t));
    b->outputs[i] = (lacs_tensor){.name = name, .dtype = LACS_F32, .ndim = ndim, .shape = b->output_shapes[i]};
    int64_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= shape[d];
    if (!guarded_alloc(&b->out[i], (size_t)count * sizeof(float), name, GUARD_OUTPUT))
        return lacs_internal_error(LACS_ERR_MEMORY, v->id, "cannot map the output '%s': out of memory", name);
    b->n_outputs++;
    b->outputs[i].data = b->out[i].data;
    return LACS_OK;
}

/* The op's parameters: every parameter of the case but the checker's own `split`. */
static int op_params(const lacs_vector *v, lacs_param *params, int64_t *split)
{
    int n = 0;
    *split = 0;
    for (int i = 0; i < v->n_params; i++) {
        if (strcmp(v->params[i].name, "split") == 0)
            *split = (int64_t)v->params[i].value;
        else
            params[n++] = v->params[i];
    }
    return n;
}

/* Calls impl on b, then checks the guards of everything it could write. */
static int call(const lacs_vector *v, lacs_impl_fn impl, void *context, call_buffers *b, const lacs_param *params,
                int n_params)
{
    int rc = impl(context, v->op, b->inputs, b->n_inputs, params, n_params, b->outputs, b->n_outputs);
    const guarded *writable[LACS_CHECK_MAX_INPUTS + LACS_CHECK_MAX_OUTPUTS];
    int n = 0;
    for (int i = 0; i < b->n_outputs; i++)
        writable[n++] = &b->out[i];
    for (int i = 0; i < b->n_inputs; i++)
        if (b->in[i].kind == GUARD_OWN_INPUT)
            writable[n++] = &b->in[i];
    const int damage = check_guards(v, writable, n);
    if (damage != LACS_OK)
        return damage; /* whatever it returned, it wrote where it must not */
    if (rc == LACS_UNSUPPORTED)
        return rc;
    if (rc != 0)
        return lacs_internal_error(LACS_ERR_INPUT, NULL, "%s: implementation returned %d", v->id, rc);
    return LACS_OK;
}

/* Copies b's output `name` (F32) into dst at float offset `at` (rows of `run`
 * floats every `stride`, `rows` of them; stride = run for a whole copy). */
static void copy_rows(float *dst, const lacs_tensor *src, int64_t rows, int64_t run, int64_t stride, int64_t at)
{
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + at + r * stride, (const float *)src->data + r * run, (size_t)run * sizeof(float));
}

static int output_index(const lacs_vector *v, const char *name)
{
    for (int i = 0; i < v->n_outputs; i++)
        if (strcmp(v->expected[i].name, name) == 0)
            return i;
    return -1;
}

/* A fixed-length call: every input, every output. The results go to results[]. */
static int run_whole(const lacs_vector *v, lacs_impl_fn impl, void *context, const lacs_param *params,
                     int n_params, float **results)
{
    call_buffers b;
    call_buffers_init(&b);
    int rc = LACS_OK;
    for (int i = 0; i < v->n_inputs && rc == LACS_OK; i++)
        rc = add_input(v, &b, &v->inputs[i], 0, 0, 0);
    for (int i = 0; i < v->n_outputs && rc == LACS_OK; i++)
        rc = add_output(v, &b, v->expected[i].name, v->expected[i].ndim, v->expected[i].shape);
    if (rc == LACS_OK)
        rc = call(v, impl, context, &b, params, n_params);
    if (rc == LACS_OK || rc == LACS_ERR_INPUT)
        for (int i = 0; i < v->n_outputs; i++)
            memcpy(results[i], b.outputs[i].data, b.out[i].size);
    call_buffers_free(&b);
    return rc;
}

/* State carry (SPEC.md 10.5, 11.5): the implementation runs on the first
 * `split` tokens; its final states (ht, and ht_kk for MesaNet) are checked as
 * ht_split (ht_kk_split) and passed, as fresh copies of the implementation's
 * own (never the buffers checked), as h0 (h0_kk) for the remaining tokens;
 * o is the two parts joined. */
static int run_split(const lacs_vector *v, lacs_impl_fn impl, void *context, const lacs_param *params, int n_params,
                     int64_t split, float **results)
{
    static const char *const state_names[2] = {"ht", "ht_kk"}, *const split_names[2] = {"ht_split", "ht_kk_split"};
    static const char *const initial_names[2] = {"h0", "h0_kk"};
    const int o = output_index(v, "o");
    int final_at[2], split_at[2], n_states = 0;
    for (int k = 0; k < 2; k++) {
        final_at[n_states] = output_index(v, state_names[k]);
        split_at[n_states] = output_index(v, split_names[k]);
        if (final_at[n_states] >= 0 && split_at[n_states] >= 0)
            n_states++;
    }
    /* lacs_vector_load guarantees o, ht and ht_split, and 0 < split < T, on a fixed-length case */
    const lacs_tensor *e = &v->expected[o];
    const int64_t B = e->shape[0], T = e->shape[1], rest = e->shape[2] * e->shape[3];
    int rc = LACS_OK;
    for (int part = 0; part < 2 && rc == LACS_OK; part++) {
        const int64_t t0 = part == 0 ? 0 : split, t1 = part == 0 ? split : T;
        call_buffers b;
        call_buffers_init(&b);
        for (int i = 0; i < v->n_inputs && rc == LACS_OK; i++)
            if (!(part == 1 && is_initial_state(v->inputs[i].name)))
                rc = add_input(v, &b, &v->inputs[i], t0, t1, T);
        for (int k = 0; k < n_states && part == 1 && rc == LACS_OK; k++) {
            /* the state after part 0, as the implementation left it, in a buffer of its own */
            const lacs_tensor *state = &v->expected[split_at[k]];
            const lacs_tensor carried = {initial_names[k], LACS_F32, state->ndim, state->shape, results[split_at[k]]};
            rc = add_input(v, &b, &carried, 0, 0, 0);
        }
        const int64_t o_shape[4] = {B, t1 - t0, e->shape[2], e->shape[3]};
        if (rc == LACS_OK)
            rc = add_output(v, &b, "o", 4, o_shape);
        for (int k = 0; k < n_states && rc == LACS_OK; k++)
            rc = add_output(v, &b, state_names[k], v->expected[final_at[k]].ndim, v->expected[final_at[k]].shape);
        if (rc == LACS_OK)
            rc = call(v, impl, context, &b, params, n_params);
        if (rc == LACS_OK || rc == LACS_ERR_INPUT) {
            copy_rows(results[o], &b.outputs[0], B, (t1 - t0) * rest, T * rest, t0 * rest);
            for (int k = 0; k < n_states; k++)
                memcpy(results[part == 0 ? split_at[k] : final_at[k]], b.outputs[1 + k].data, b.out[1 + k].size);
        }
        call_buffers_free(&b);
    }
    return rc;
}

/* The state carry of a VJP (SPEC.md 11.5): the state after the first `split`
 * tokens is the reference forward's (builtin:reference on those tokens,
 * rounded to binary32, as an implementation's forward would hand it over);
 * the implementation runs the second part first, from that state and the
 * case's dht, and its dh0 is checked as dh_split; then the first part, with
 * dht = a fresh copy of that dh0 as it returned it. The per-token gradients
 * are the two parts joined, a per-head sum (dg_gamma) the sum of the two. */
static int run_split_vjp(const lacs_vector *v, lacs_impl_fn impl, void *context, const lacs_param *params,
                         int n_params, int64_t split, float **results)
{
    const lacs_op_info *forward = lacs_op_forward(lacs_op_find(v->op));
    const int dh_split = output_index(v, "dh_split"), dh0 = output_index(v, "dh0");
    const lacs_tensor *q = find_input(v, "q");
    if (!forward || dh_split < 0 || !q || q->ndim != 4)
        return lacs_internal_error(LACS_ERR_FORMAT, NULL, "%s: a VJP state-carry case needs q and dh_split", v->path);
    const int64_t B = q->shape[0], T = v->T;
    const lacs_tensor *state_shape = &v->expected[dh_split];
    /* the forward's parameters are those of the VJP's it reads */
    lacs_param forward_params[LACS_CHECK_MAX_PARAMS];
    int n_forward_params = 0;
    for (int i = 0; i < n_params; i++)
        if (lacs_word_in_list(forward->params, params[i].name))
            forward_params[n_forward_params++] = params[i];
    /* 1. the state at the split, from the reference's forward on the first part */
    float *state = calloc((size_t)lacs_tensor_count(state_shape) + 1, sizeof(float));
    if (!state)
        return lacs_internal_error(LACS_ERR_MEMORY, v->id, "out of memory");
    call_buffers b;
    call_buffers_init(&b);
    int rc = LACS_OK;
    for (int i = 0; i < v->n_inputs && rc == LACS_OK; i++)
        if (strcmp(v->inputs[i].name, "do") != 0 && strcmp(v->inputs[i].name, "dht") != 0)
            rc = add_input(v, &b, &v->inputs[i], 0, split, T);
    lacs_tensor ht = {"ht", LACS_F32, 4, state_shape->shape, state};
    if (rc == LACS_OK &&
        lacs_reference_run(forward->name, b.inputs, b.n_inputs, forward_params, n_forward_params, &ht, 1, 0) != LACS_OK)
        rc = lacs_internal_error(LACS_ERR_INPUT, NULL, "%s: the reference forward on the first %lld tokens: %s", v->id,
                                 (long long)split, lacs_last_error());
    call_buffers_free(&b);
    /* 2. the second part, then 3. the first, each on buffers of its own */
    for (int part = 1; part >= 0 && rc == LACS_OK; part--) {
        const int64_t t0 = part == 0 ? 0 : split, t1 = part == 0 ? split : T, len = t1 - t0;
        const char *carried_name = part == 1 ? "h0" : "dht";
        call_buffers_init(&b);
        for (int i = 0; i < v->n_inputs && rc == LACS_OK; i++)
            if (strcmp(v->inputs[i].name, carried_name) != 0)
                rc = add_input(v, &b, &v->inputs[i], t0, t1, T);
        const lacs_tensor carried = {carried_name, LACS_F32, 4, state_shape->shape,
                                     part == 1 ? state : results[dh_split]};
        if (rc == LACS_OK)
            rc = add_input(v, &b, &carried, 0, 0, 0);
        int index_of[LACS_CHECK_MAX_OUTPUTS];
        for (int i = 0; i < v->n_outputs && rc == LACS_OK; i++) {
            const lacs_tensor *e = &v->expected[i];
            if (i == dh_split || (i == dh0 && part == 1))
                continue; /* the second part's dh0 is dh_split; the first's is dh0 */
            int64_t shape[4];
            memcpy(shape, e->shape, (size_t)e->ndim * sizeof(int64_t));
            if (lacs_vjp_output_is_per_token(e->name))
                shape[1] = len;
            index_of[b.n_outputs] = i;
            rc = add_output(v, &b, e->name, e->ndim, shape);
        }
        if (part == 1 && rc == LACS_OK) {
            index_of[b.n_outputs] = dh_split;
            rc = add_output(v, &b, "dh0", 4, state_shape->shape);
        }
        if (rc == LACS_OK)
            rc = call(v, impl, context, &b, params, n_params);
        for (int k = 0; k < b.n_outputs && (rc == LACS_OK || rc == LACS_ERR_INPUT); k++) {
            const int i = index_of[k];
            const lacs_tensor *e = &v->expected[i];
            if (i == dh0 || i == dh_split)
                memcpy(results[i], b.outputs[k].data, b.out[k].size);
            else if (lacs_vjp_output_is_per_token(e->name)) {
                const int64_t rest = lacs_tensor_count(e) / (B * T);
                copy_rows(results[i], &b.outputs[k], B, len * rest, T * rest, t0 * rest);
            } else
                for (int64_t j = 0; j < lacs_tensor_count(e); j++)
                    results[i][j] += ((const float *)b.outputs[k].data)[j];
        }
        call_buffers_free(&b);
    }
    free(state);
    return rc;
}

void lacs_outputs_free(const lacs_vector *v, lacs_tensor *actual)
{
    for (int i = 0; i < v->n_outputs; i++) {
        free(actual[i].data);
        actual[i].data = NULL;
    }
}

int lacs_check_implementation(const lacs_vector *v, lacs_impl_fn impl, void *context, lacs_check_result *r,
                              lacs_tensor *actual)
{
    lacs_tensor outputs[LACS_CHECK_MAX_OUTPUTS];
    float *results[LACS_CHECK_MAX_OUTPUTS];
    lacs_param params[LACS_CHECK_MAX_PARAMS];
    int64_t split;
    const int n_params = op_params(v, params, &split);
    memset(r, 0, sizeof *r);
    for (int i = 0; i < v->n_outputs; i++) {
        outputs[i] = v->expected[i];
        outputs[i].dtype = LACS_F32;
        outputs[i].data = results[i] = calloc((size_t)lacs_tensor_count(&v->expected[i]) + 1, sizeof(float));
        if (!results[i]) {
            for (int j = 0; j < i; j++)
                free(results[j]);
            return lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory for the outputs", v->id);
        }
    }
    const lacs_op_info *info = lacs_op_find(v->op);
    int rc = split > 0 && info && info->family == LACS_FAMILY_VJP
                 ? run_split_vjp(v, impl, context, params, n_params, split, results)
             : split > 0 ? run_split(v, impl, context, params, n_params, split, results)
                         : run_whole(v, impl, context, params, n_params, results);
    if (rc == LACS_OK)
        rc = lacs_check_outputs(v, outputs, v->n_outputs, r);
    if (actual && rc != LACS_UNSUPPORTED)
        memcpy(actual, outputs, (size_t)v->n_outputs * sizeof *outputs);
    else
        lacs_outputs_free(v, outputs);
    return rc;
}

int lacs_impl_reference(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                        const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    (void)context;
    return lacs_reference_run(op, inputs, n_inputs, params, n_params, outputs, n_outputs, 0);
}

/* ---- an element's position in words ---- */

char *lacs_describe_element(const lacs_vector *v, int output, int64_t index, char *buf, size_t size)
{
    if (output < 0 || output >= v->n_outputs || index < 0) {
        snprintf(buf, size, "-");
        return buf;
    }
    const lacs_layout *l = &v->layout[output];
    const char *name = v->expected[output].name;
    const int64_t c = index % l->width, head = (index / l->width) % l->heads;
    const int64_t t_flat = (index / l->width / l->heads) % l->T, outer = index / l->width / l->heads / l->T;
    switch (l->kind) {
    case LACS_LAYOUT_SEQUENCE:
        if (l->cu_seqlens) {
            int64_t n = 0;
            while (n + 1 < l->n_seqs && l->cu_seqlens[n + 1] <= t_flat)
                n++;
            snprintf(buf, size, "%s[seq=%lld, t=%lld (token %lld of the sequence), head=%lld, %s=%lld]", name,
                     (long long)n, (long long)t_flat, (long long)(t_flat - l->cu_seqlens[n]), (long long)head,
                     strcmp(name, "o") == 0 || strcmp(name, "dv") == 0 ? "v" : "k", (long long)c);
        } else if (l->width == 1) /* dbeta, dg: one value per token and head */
            snprintf(buf, size, "%s[b=%lld, t=%lld, head=%lld]", name, (long long)outer, (long long)t_flat,
                     (long long)head);
        else
            snprintf(buf, size, "%s[b=%lld, t=%lld, head=%lld, %s=%lld]", name, (long long)outer, (long long)t_flat,
                     (long long)head, strcmp(name, "o") == 0 || strcmp(name, "dv") == 0 ? "v" : "k", (long long)c);
        break;
    case LACS_LAYOUT_STATE: {
        const int64_t cols = v->expected[output].shape[3];
        snprintf(buf, size, "%s[seq=%lld, head=%lld, k=%lld, %s=%lld]", name, (long long)outer, (long long)head,
                 (long long)(c / cols), strncmp(name, "ht_kk", 5) == 0 ? "k'" : "v", (long long)(c % cols));
        break;
    }
    case LACS_LAYOUT_ROWS:
        snprintf(buf, size, "%s[row=%lld, col=%lld]", name, (long long)outer, (long long)c);
        break;
    default:
        snprintf(buf, size, "%s[%lld]", name, (long long)index);
    }
    return buf;
}
