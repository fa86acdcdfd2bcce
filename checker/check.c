/* Checking an implementation against a golden vector (lacs/check.h, SPEC.md 11).
 *
 * Read top to bottom: loading a vector (its metadata, inputs, goldens and
 * gauges), the layout of each output into blocks, the comparison of one
 * output (the tolerance model of SPEC.md 11.3 and the IEEE rules of 11.4),
 * running an implementation on a case (the state-carry protocol included),
 * and the words for an element's position.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../reference/internal.h"
#include "lacs/check.h"
#include "lacs/ops.h"

/* ---- loading ---- */

static int load_error(lacs_vector *v, int code, const char *what)
{
    return lacs_internal_error(code, NULL, "%s: %s", v->path, what);
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

/* The tolerance object of the metadata (SPEC.md 11.3). */
static int load_tolerance(lacs_vector *v, const cJSON *root)
{
    const cJSON *tol = cJSON_GetObjectItemCaseSensitive(root, "tolerance");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tol, "model");
    if (!cJSON_IsObject(tol) || !cJSON_IsString(model))
        return load_error(v, LACS_ERR_FORMAT, "metadata: no tolerance model");
    snprintf(v->tolerance.model, sizeof v->tolerance.model, "%s", model->valuestring);
    lacs_tolerance *t = &v->tolerance;
    if (strcmp(t->model, "provisional-normwise/1") == 0) {
        t->provisional = number_field(tol, "normwise", NAN);
        if (!(t->provisional > 0))
            return load_error(v, LACS_ERR_FORMAT, "metadata: tolerance.normwise missing");
        return LACS_OK;
    }
    if (strcmp(t->model, LACS_TOLERANCE_MODEL) != 0) {
        char what[160];
        snprintf(what, sizeof what, "metadata: unknown tolerance model '%.60s' (this checker knows %s)",
                 t->model, LACS_TOLERANCE_MODEL);
        return load_error(v, LACS_ERR_FORMAT, what);
    }
    t->unit_roundoff = number_field(tol, "unit_roundoff", NAN);
    t->normwise_factor = number_field(tol, "normwise_factor", NAN);
    t->elementwise_factor = number_field(tol, "elementwise_factor", NAN);
    t->floor_fraction = number_field(tol, "floor_fraction", NAN);
    t->underflow = number_field(tol, "underflow", NAN);
    if (!(t->unit_roundoff > 0 && t->normwise_factor > 0 &&
          t->elementwise_factor > 0 && t->floor_fraction >= 0 && t->underflow >= 0))
        return load_error(v, LACS_ERR_FORMAT,
                          "metadata: tolerance needs unit_roundoff > 0, normwise_factor > 0, "
                          "elementwise_factor > 0, floor_fraction >= 0, underflow >= 0");
    return LACS_OK;
}

static int64_t dim_field(const cJSON *dims, const char *name)
{
    return (int64_t)number_field(dims, name, 0);
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

int lacs_vector_load(const char *path, lacs_vector *v)
{
    memset(v, 0, sizeof *v);
    snprintf(v->path, sizeof v->path, "%s", path);
    int rc = lacs_safetensors_read(path, &v->file);
    if (rc != LACS_OK)
        return rc; /* the reader's message names the file and the fault */
    const char *text = lacs_safetensors_metadata(&v->file, "lacs");
    if (!text)
        return load_error(v, LACS_ERR_FORMAT, "metadata: no 'lacs' entry (not a lacs vector)");
    v->metadata = (char *)text;
    cJSON *root = cJSON_Parse(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return load_error(v, LACS_ERR_FORMAT, "metadata: 'lacs' is not a JSON object");
    }
    int used_names = 0;
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
    if (!cJSON_IsString(id) || !cJSON_IsString(tier) || !cJSON_IsArray(outputs) || !cJSON_IsObject(params))
        rc = load_error(v, LACS_ERR_FORMAT, "metadata: id, tier, params and outputs are required");
    else if (!info)
        rc = load_error(v, LACS_ERR_FORMAT, "metadata: missing or unknown op");
    else if (strcmp(tier->valuestring, "fp32") != 0 && strcmp(tier->valuestring, "bf16") != 0)
        rc = load_error(v, LACS_ERR_FORMAT, "metadata: tier must be fp32 or bf16");
    else if (level && (!cJSON_IsString(level) ||
                       (strcmp(level->valuestring, "required") != 0 && strcmp(level->valuestring, "strict") != 0)))
        rc = load_error(v, LACS_ERR_FORMAT, "metadata: level must be \"required\" or \"strict\"");
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
        const cJSON *p;
        cJSON_ArrayForEach(p, params)
        {
            if (!cJSON_IsNumber(p) || v->n_params >= LACS_CHECK_MAX_PARAMS) {
                rc = load_error(v, LACS_ERR_FORMAT, "metadata: params must be at most 16 numbers");
                break;
            }
            v->params[v->n_params].name = name_slot(v, &used_names, p->string);
            v->params[v->n_params].value = p->valuedouble;
            if (!v->params[v->n_params++].name)
                rc = load_error(v, LACS_ERR_FORMAT, "metadata: parameter name too long");
        }
        const char *dim_names[] = {"B", "T", "H", "HV", "K", "V", "N", "rows", "dim"};
        int64_t *dim_slots[] = {&v->B, &v->T, &v->H, &v->HV, &v->K, &v->V, &v->N, &v->rows, &v->dim};
        for (int i = 0; i < 9; i++)
            *dim_slots[i] = dim_field(dims, dim_names[i]);
    }
    if (rc == LACS_OK)
        rc = load_tolerance(v, root);

    /* inputs: every tensor that is neither expected.* nor gauge.*, copied aligned */
    const int64_t *cu_seqlens = NULL;
    int64_t n_seqs = 0;
    for (int i = 0; rc == LACS_OK && i < v->file.n_tensors; i++) {
        const lacs_safetensors_tensor *t = &v->file.tensors[i];
        if (strncmp(t->name, "expected.", 9) == 0 || strncmp(t->name, "gauge.", 6) == 0)
            continue;
        if (v->n_inputs >= LACS_CHECK_MAX_INPUTS) {
            rc = load_error(v, LACS_ERR_FORMAT, "more than 16 input tensors");
            break;
        }
        lacs_tensor *in = &v->inputs[v->n_inputs];
        void *data = own(v, t->nbytes);
        in->name = name_slot(v, &used_names, t->name);
        if (!data || !in->name) {
            rc = load_error(v, LACS_ERR_FORMAT, "input name too long or out of memory");
            break;
        }
        memcpy(data, t->data, t->nbytes);
        in->dtype = t->dtype;
        in->ndim = t->ndim;
        in->shape = t->shape;
        in->data = data;
        v->n_inputs++;
        if (strcmp(t->name, "cu_seqlens") == 0) {
            if (t->dtype != LACS_I64 || t->ndim != 1 || t->count < 1) {
                rc = load_error(v, LACS_ERR_FORMAT, "tensor 'cu_seqlens' must be I64 [N + 1]");
                break;
            }
            cu_seqlens = data;
            n_seqs = t->count - 1;
        }
    }

    /* goldens and gauges, in the metadata's order of outputs */
    const cJSON *out;
    cJSON_ArrayForEach(out, outputs)
    {
        if (rc != LACS_OK)
            break;
        char name[64];
        if (!cJSON_IsString(out) || strlen(out->valuestring) > 40 || v->n_outputs >= LACS_CHECK_MAX_OUTPUTS) {
            rc = load_error(v, LACS_ERR_FORMAT, "metadata: outputs must be at most 8 short names");
            break;
        }
        snprintf(name, sizeof name, "expected.%s", out->valuestring);
        const lacs_safetensors_tensor *e = lacs_safetensors_find(&v->file, name);
        if (!e || e->dtype != LACS_F64) {
            char what[128];
            snprintf(what, sizeof what, "tensor '%s' (F64) is missing", name);
            rc = load_error(v, LACS_ERR_FORMAT, what);
            break;
        }
        lacs_tensor *x = &v->expected[v->n_outputs];
        x->name = name_slot(v, &used_names, out->valuestring);
        x->dtype = LACS_F64;
        x->ndim = e->ndim;
        x->shape = e->shape;
        x->data = own(v, (size_t)e->count * sizeof(double));
        if (!x->data || !x->name) {
            rc = load_error(v, LACS_ERR_MEMORY, "out of memory");
            break;
        }
        lacs_safetensors_to_double(e, x->data);
        snprintf(name, sizeof name, "gauge.%s", out->valuestring);
        const lacs_safetensors_tensor *g = lacs_safetensors_find(&v->file, name);
        if (strcmp(v->tolerance.model, LACS_TOLERANCE_MODEL) == 0) {
            int same = g && g->ndim == e->ndim && (g->dtype == LACS_F32 || g->dtype == LACS_F64);
            for (int d = 0; same && d < e->ndim; d++)
                same = g->shape[d] == e->shape[d];
            if (!same) {
                char what[160];
                snprintf(what, sizeof what, "tensor '%s' (F32 or F64, the shape of expected.%s) is missing or "
                                            "misshapen", name, out->valuestring);
                rc = load_error(v, LACS_ERR_FORMAT, what);
                break;
            }
            v->gauge[v->n_outputs] = own(v, (size_t)g->count * sizeof(double));
            if (!v->gauge[v->n_outputs]) {
                rc = load_error(v, LACS_ERR_MEMORY, "out of memory");
                break;
            }
            lacs_safetensors_to_double(g, v->gauge[v->n_outputs]);
            const cJSON *lengths = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(root, "tolerance"), "length_factor");
            v->length_factor[v->n_outputs] = number_field(lengths, out->valuestring, NAN);
            if (!(v->length_factor[v->n_outputs] >= 1)) {
                char what[128];
                snprintf(what, sizeof what, "metadata: tolerance.length_factor.%s (>= 1) is missing", out->valuestring);
                rc = load_error(v, LACS_ERR_FORMAT, what);
                break;
            }
        }
        set_layout(v, v->n_outputs, info->family, cu_seqlens, n_seqs);
        v->n_outputs++;
    }
    if (rc == LACS_OK && v->n_outputs == 0)
        rc = load_error(v, LACS_ERR_FORMAT, "metadata: no outputs");
    cJSON_Delete(root);
    return rc;
}

void lacs_vector_free(lacs_vector *v)
{
    for (int i = 0; i < v->n_owned; i++)
        free(v->owned[i]);
    free(v->reason);
    free(v->level_reason);
    lacs_safetensors_free(&v->file);
    memset(v, 0, sizeof *v);
}

lacs_vector *lacs_vector_open(const char *path)
{
    lacs_vector *v = malloc(sizeof *v);
    if (!v) {
        lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", path);
        return NULL;
    }
    if (lacs_vector_load(path, v) != LACS_OK) {
        lacs_vector_free(v);
        free(v);
        return NULL;
    }
    return v;
}

void lacs_vector_close(lacs_vector *v)
{
    if (v) {
        lacs_vector_free(v);
        free(v);
    }
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

static int alloc_outputs(const lacs_vector *v, lacs_tensor *outputs)
{
    for (int i = 0; i < v->n_outputs; i++) {
        outputs[i] = v->expected[i];
        outputs[i].dtype = LACS_F32;
        outputs[i].data = calloc((size_t)lacs_tensor_count(&v->expected[i]) + 1, sizeof(float));
        if (!outputs[i].data) {
            lacs_outputs_free(v, outputs);
            return lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory for the outputs", v->id);
        }
    }
    return LACS_OK;
}

void lacs_outputs_free(const lacs_vector *v, lacs_tensor *actual)
{
    for (int i = 0; i < v->n_outputs; i++) {
        free(actual[i].data);
        actual[i].data = NULL;
    }
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

static int call(const lacs_vector *v, lacs_impl_fn impl, void *context, const lacs_tensor *inputs, int n_inputs,
                const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    int rc = impl(context, v->op, inputs, n_inputs, params, n_params, outputs, n_outputs);
    if (rc == LACS_UNSUPPORTED)
        return rc;
    if (rc != 0)
        return lacs_internal_error(LACS_ERR_INPUT, NULL, "%s: implementation returned %d", v->id, rc);
    return LACS_OK;
}

/* One part [t0, t1) of a fixed-length case's inputs: the sequence inputs
 * [B, T, ...] sliced (copies), the others shared, and the initial states
 * replaced by `states` when given. */
typedef struct {
    lacs_tensor tensors[LACS_CHECK_MAX_INPUTS + 2];
    int64_t shapes[LACS_CHECK_MAX_INPUTS + 2][8];
    int sliced[LACS_CHECK_MAX_INPUTS + 2];
    int n;
} input_part;

/* A tensor per sequence, never cut along T: the initial states and the
 * cotangents of the final ones. */
static int is_per_sequence(const char *name)
{
    return strcmp(name, "h0") == 0 || strcmp(name, "h0_kk") == 0 || strcmp(name, "dht") == 0 ||
           strcmp(name, "dht_kk") == 0;
}

/* `states` replace the inputs of the same names (or are added). */
static int slice_inputs(const lacs_vector *v, int64_t t0, int64_t t1, const lacs_tensor *states, int n_states,
                        input_part *part)
{
    memset(part, 0, sizeof *part);
    for (int i = 0; i < v->n_inputs; i++) {
        const lacs_tensor *in = &v->inputs[i];
        int replaced = 0;
        for (int k = 0; k < n_states; k++)
            replaced |= strcmp(states[k].name, in->name) == 0;
        if (replaced)
            continue; /* replaced by the carried states below */
        lacs_tensor *t = &part->tensors[part->n];
        *t = *in;
        memcpy(part->shapes[part->n], in->shape, (size_t)in->ndim * sizeof(int64_t));
        t->shape = part->shapes[part->n];
        part->n++;
        if (in->ndim < 2 || in->shape[1] != v->T || is_per_sequence(in->name))
            continue;
        const size_t elem = lacs_dtype_size(in->dtype);
        int64_t rest = 1;
        for (int d = 2; d < in->ndim; d++)
            rest *= in->shape[d];
        part->shapes[part->n - 1][1] = t1 - t0;
        char *data = malloc((size_t)(in->shape[0] * (t1 - t0) * rest) * elem + 8);
        if (!data)
            return lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", v->id);
        for (int64_t b = 0; b < in->shape[0]; b++)
            memcpy(data + (size_t)(b * (t1 - t0) * rest) * elem,
                   (const char *)in->data + (size_t)((b * v->T + t0) * rest) * elem, (size_t)((t1 - t0) * rest) * elem);
        t->data = data;
        part->sliced[part->n - 1] = 1;
    }
    for (int s = 0; s < n_states; s++)
        part->tensors[part->n++] = states[s];
    return LACS_OK;
}

static void free_part(input_part *part)
{
    for (int i = 0; i < part->n; i++)
        if (part->sliced[i])
            free(part->tensors[i].data);
    part->n = 0;
}

/* State carry (SPEC.md 10.5, 11.5): the implementation runs on the first
 * `split` tokens, its final states (ht, and ht_kk for MesaNet) are compared
 * with the goldens ht_split (ht_kk_split) and passed back as h0 (h0_kk) for
 * the remaining tokens; o is the two parts joined. */
static int run_split(const lacs_vector *v, lacs_impl_fn impl, void *context, const lacs_param *params, int n_params,
                     int64_t split, lacs_tensor *outputs)
{
    int o = -1, n_states = 0, final_at[2], split_at[2];
    const char *state_names[2] = {"ht", "ht_kk"}, *initial_names[2] = {"h0", "h0_kk"};
    for (int i = 0; i < v->n_outputs; i++)
        if (strcmp(v->expected[i].name, "o") == 0)
            o = i;
    for (int k = 0; k < 2; k++) {
        char split_name[32];
        snprintf(split_name, sizeof split_name, "%s_split", state_names[k]);
        final_at[n_states] = split_at[n_states] = -1;
        for (int i = 0; i < v->n_outputs; i++) {
            if (strcmp(v->expected[i].name, state_names[k]) == 0)
                final_at[n_states] = i;
            if (strcmp(v->expected[i].name, split_name) == 0)
                split_at[n_states] = i;
        }
        if (final_at[n_states] >= 0 && split_at[n_states] >= 0)
            n_states++;
    }
    if (o < 0 || n_states == 0 || split <= 0 || split >= v->T || v->expected[o].ndim != 4)
        return lacs_internal_error(LACS_ERR_FORMAT, NULL,
                                   "%s: a state-carry case needs o, ht, ht_split and 0 < split < T", v->path);
    const lacs_tensor *e = &v->expected[o];
    const int64_t B = e->shape[0], T = e->shape[1], rest = e->shape[2] * e->shape[3];
    int rc = LACS_OK;
    for (int part_index = 0; part_index < 2 && rc == LACS_OK; part_index++) {
        const int64_t t0 = part_index == 0 ? 0 : split, t1 = part_index == 0 ? split : T;
        lacs_tensor carried[2], outs[3];
        for (int k = 0; k < n_states; k++) {
            carried[k] = outputs[split_at[k]];
            carried[k].name = initial_names[k];
            outs[1 + k] = outputs[part_index == 0 ? split_at[k] : final_at[k]];
            outs[1 + k].name = state_names[k];
        }
        input_part part;
        rc = slice_inputs(v, t0, t1, carried, part_index == 0 ? 0 : n_states, &part);
        int64_t o_shape[4] = {B, t1 - t0, e->shape[2], e->shape[3]};
        outs[0] = (lacs_tensor){"o", LACS_F32, 4, o_shape, calloc((size_t)(B * (t1 - t0) * rest) + 1, sizeof(float))};
        if (rc == LACS_OK && !outs[0].data)
            rc = lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", v->id);
        if (rc == LACS_OK)
            rc = call(v, impl, context, part.tensors, part.n, params, n_params, outs, 1 + n_states);
        if (rc == LACS_OK)
            for (int64_t b = 0; b < B; b++)
                memcpy((float *)outputs[o].data + (b * T + t0) * rest, (float *)outs[0].data + b * (t1 - t0) * rest,
                       (size_t)((t1 - t0) * rest) * sizeof(float));
        free(outs[0].data);
        free_part(&part);
    }
    return rc;
}

/* The state carry of a VJP (SPEC.md 11.5): the state after the first `split`
 * tokens is the reference forward's (builtin:reference on those tokens,
 * rounded to binary32, as an implementation's forward would hand it over);
 * the implementation runs the second part first, from that state and the
 * case's dht, and its dh0 is compared with dh_split; then the first part,
 * with dht = that dh0 as it returned it. The per-token gradients are the two
 * parts joined, a per-head sum (dg_gamma) the sum of the two. */
static int run_split_vjp(const lacs_vector *v, lacs_impl_fn impl, void *context, const lacs_param *params,
                         int n_params, int64_t split, lacs_tensor *outputs)
{
    const lacs_op_info *forward = lacs_op_forward(lacs_op_find(v->op));
    int dh_split = -1, dh0 = -1;
    for (int i = 0; i < v->n_outputs; i++) {
        if (strcmp(v->expected[i].name, "dh_split") == 0)
            dh_split = i;
        if (strcmp(v->expected[i].name, "dh0") == 0)
            dh0 = i;
    }
    const lacs_tensor *q = NULL;
    for (int i = 0; i < v->n_inputs; i++)
        if (strcmp(v->inputs[i].name, "q") == 0)
            q = &v->inputs[i];
    if (!forward || dh_split < 0 || !q || q->ndim != 4 || split <= 0 || split >= v->T ||
        v->expected[dh_split].ndim != 4)
        return lacs_internal_error(LACS_ERR_FORMAT, NULL,
                                   "%s: a VJP state-carry case needs q, dh_split and 0 < split < T", v->path);
    const int64_t B = q->shape[0], T = v->T;
    /* the forward's parameters are the VJP's it reads */
    lacs_param forward_params[LACS_CHECK_MAX_PARAMS];
    int n_forward_params = 0;
    for (int i = 0; i < n_params; i++)
        if (lacs_word_in_list(forward->params, params[i].name))
            forward_params[n_forward_params++] = params[i];
    /* 1. the state at the split */
    lacs_tensor state = v->expected[dh_split];
    state.name = "h0";
    state.dtype = LACS_F32;
    state.data = calloc((size_t)lacs_tensor_count(&state) + 1, sizeof(float));
    lacs_tensor ht = state;
    ht.name = "ht";
    input_part part;
    int rc = state.data ? slice_inputs(v, 0, split, NULL, 0, &part)
                        : lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", v->id);
    if (rc == LACS_OK) {
        lacs_tensor forward_in[LACS_CHECK_MAX_INPUTS + 2];
        int n = 0;
        for (int i = 0; i < part.n; i++)
            if (strcmp(part.tensors[i].name, "do") != 0 && strcmp(part.tensors[i].name, "dht") != 0)
                forward_in[n++] = part.tensors[i];
        rc = lacs_reference_run(forward->name, forward_in, n, forward_params, n_forward_params, &ht, 1, 0);
        if (rc != LACS_OK)
            rc = lacs_internal_error(LACS_ERR_INPUT, NULL, "%s: the reference forward on the first %lld tokens: %s",
                                     v->id, (long long)split, lacs_last_error());
        free_part(&part);
    }
    /* 2. the second part, then 3. the first, each into its own buffers */
    for (int part_index = 1; part_index >= 0 && rc == LACS_OK; part_index--) {
        const int64_t t0 = part_index == 0 ? 0 : split, t1 = part_index == 0 ? split : T, len = t1 - t0;
        lacs_tensor carried = outputs[dh_split];
        carried.name = part_index == 1 ? "h0" : "dht";
        if (part_index == 1)
            carried = state;
        rc = slice_inputs(v, t0, t1, &carried, 1, &part);
        lacs_tensor outs[LACS_CHECK_MAX_OUTPUTS];
        int64_t shapes[LACS_CHECK_MAX_OUTPUTS][8];
        int n_outs = 0, index_of[LACS_CHECK_MAX_OUTPUTS];
        for (int i = 0; i < v->n_outputs && rc == LACS_OK; i++) {
            const lacs_tensor *e = &v->expected[i];
            if (i == dh_split || (i == dh0 && part_index == 1))
                continue; /* the second part's dh0 is dh_split; the first's is dh0 */
            lacs_tensor *o = &outs[n_outs];
            *o = outputs[i];
            memcpy(shapes[n_outs], e->shape, (size_t)e->ndim * sizeof(int64_t));
            if (lacs_vjp_output_is_per_token(e->name))
                shapes[n_outs][1] = len;
            o->shape = shapes[n_outs];
            o->data = i == dh0 ? outputs[i].data : calloc((size_t)lacs_tensor_count(o) + 1, sizeof(float));
            if (!o->data)
                rc = lacs_internal_error(LACS_ERR_MEMORY, NULL, "%s: out of memory", v->id);
            index_of[n_outs++] = i;
        }
        if (part_index == 1 && rc == LACS_OK) {
            outs[n_outs] = outputs[dh_split];
            outs[n_outs].name = "dh0";
            index_of[n_outs++] = dh_split;
        }
        if (rc == LACS_OK)
            rc = call(v, impl, context, part.tensors, part.n, params, n_params, outs, n_outs);
        for (int k = 0; k < n_outs; k++) {
            const int i = index_of[k];
            if (i == dh0 || i == dh_split)
                continue;
            const lacs_tensor *e = &v->expected[i];
            float *whole = outputs[i].data, *piece = outs[k].data;
            if (rc == LACS_OK && lacs_vjp_output_is_per_token(e->name)) {
                const int64_t rest = lacs_tensor_count(e) / (B * T);
                for (int64_t b = 0; b < B; b++)
                    memcpy(whole + (b * T + t0) * rest, piece + b * len * rest, (size_t)(len * rest) * sizeof(float));
            } else if (rc == LACS_OK) {
                for (int64_t j = 0; j < lacs_tensor_count(e); j++)
                    whole[j] += piece[j];
            }
            free(piece);
        }
        free_part(&part);
    }
    free(state.data);
    return rc;
}

int lacs_check_implementation(const lacs_vector *v, lacs_impl_fn impl, void *context, lacs_check_result *r,
                              lacs_tensor *actual)
{
    lacs_tensor outputs[LACS_CHECK_MAX_OUTPUTS];
    lacs_param params[LACS_CHECK_MAX_PARAMS];
    int64_t split;
    const int n_params = op_params(v, params, &split);
    memset(r, 0, sizeof *r);
    int rc = alloc_outputs(v, outputs);
    if (rc != LACS_OK)
        return rc;
    const lacs_op_info *info = lacs_op_find(v->op);
    if (split > 0 && info && info->family == LACS_FAMILY_VJP)
        rc = run_split_vjp(v, impl, context, params, n_params, split, outputs);
    else if (split > 0)
        rc = run_split(v, impl, context, params, n_params, split, outputs);
    else
        rc = call(v, impl, context, v->inputs, v->n_inputs, params, n_params, outputs, v->n_outputs);
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
