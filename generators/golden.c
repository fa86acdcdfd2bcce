/* From a catalog row to a golden vector (lacs/catalog.h; SPEC.md 10.3, 10.4).
 *
 * Read top to bottom: the recipes that draw each input (10.3), rounding to
 * the tier's dtype, running the reference through lacs_reference_run in
 * double and in long double, the certification that compares the two, and
 * the `lacs` metadata. Nothing here uses libm to draw an input: sqrt and
 * division are correctly rounded in IEEE 754, the rest is + and *.
 */
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "lacs/catalog.h"
#include "lacs/gauge.h"
#include "lacs/compare.h"
#include "lacs/ops.h"
#include "lacs/prng.h"
#include "lacs/safetensors.h"

/* ---- recipes (SPEC.md 10.3) ---- */

typedef struct {
    char tensor[32];
    char name[32];  /* normal, uniform, const, unit, unit_pow2, coupled, lowrank, mixed_gate,
                       psd, all_bf16, specials, retnet, copy */
    double arg[2];
    int n_args;
    char source[32]; /* copy(source) */
} recipe;

static int recipe_error(const lacs_case *c, const char *what, const char *text)
{
    return lacs_internal_error(LACS_ERR_PARAM, c->op, "case '%s': %s: '%s'", c->name, what, text);
}

/* Parses "name:recipe", "name:recipe(a)" or "name:recipe(a,b)". */
static int parse_recipe(const lacs_case *c, const char *token, size_t len, recipe *r)
{
    char text[96];
    if (len >= sizeof text)
        return recipe_error(c, "recipe too long", token);
    memcpy(text, token, len);
    text[len] = 0;
    memset(r, 0, sizeof *r);
    char *colon = strchr(text, ':');
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof r->tensor)
        return recipe_error(c, "recipe is not name:recipe", text);
    memcpy(r->tensor, text, (size_t)(colon - text));
    char *open = strchr(colon, '(');
    size_t name_len = open ? (size_t)(open - colon - 1) : strlen(colon + 1);
    if (name_len == 0 || name_len >= sizeof r->name)
        return recipe_error(c, "bad recipe name", text);
    memcpy(r->name, colon + 1, name_len);
    if (open) {
        char *close = strchr(open, ')');
        if (!close || close[1])
            return recipe_error(c, "unbalanced parenthesis", text);
        *close = 0;
        if (strcmp(r->name, "copy") == 0) {
            if (strlen(open + 1) >= sizeof r->source)
                return recipe_error(c, "bad copy source", text);
            strcpy(r->source, open + 1);
            return LACS_OK;
        }
        char *p = open + 1;
        while (*p && r->n_args < 2) {
            char *end;
            r->arg[r->n_args++] = strtod(p, &end);
            if (end == p)
                return recipe_error(c, "bad number", text);
            p = *end == ',' ? end + 1 : end;
        }
        if (*p)
            return recipe_error(c, "too many arguments", text);
    }
    return LACS_OK;
}

/* 2^e, exactly, without libm. */
static double pow2(int64_t e)
{
    double x = 1;
    for (; e > 0; e--)
        x *= 2;
    for (; e < 0; e++)
        x *= 0.5;
    return x;
}

/* Divides each row of `width` values by its Euclidean norm (left as is if 0). */
static void normalize_rows(double *x, int64_t rows, int64_t width, double radius)
{
    for (int64_t r = 0; r < rows; r++) {
        double sum = 0;
        for (int64_t i = 0; i < width; i++)
            sum += x[r * width + i] * x[r * width + i];
        double norm = sqrt(sum);
        for (int64_t i = 0; norm > 0 && i < width; i++)
            x[r * width + i] = x[r * width + i] / norm * radius;
    }
}

/* IEEE special values (SPEC.md 10.3, `specials`), each exact in binary32;
 * rounded to bf16 some become 0 or change, which is still a valid input. */
static const double special_values[] = {
    0.0, -0.0, INFINITY, -INFINITY, NAN,
    0x1p-149, -0x1p-149,             /* the smallest binary32 subnormal */
    0x1.fffffcp-127, 0x1p-133,        /* the largest binary32 subnormal; the smallest bf16 one */
    0x1p-126, -0x1p-126,             /* the smallest normal */
    0x1.fffffep127, -0x1.fffffep127, /* FLT_MAX */
    0x1.fep127,                      /* the largest bf16 */
    1e30, -1e30, 1e-30, -1e-30, 1.0, -1.0, 88.75, -88.75, 1e4, -1e4,
};

/* Draws one input of the given shape; `unit`, `coupled` and `lowrank` act on
 * rows along the last dimension, and `coupled` and `lowrank` share their base
 * directions within a (batch, head) group of a [B, T, H, K] tensor. */
static int draw(const lacs_case *c, const recipe *r, uint64_t seed, double *x, int ndim,
                const int64_t *shape)
{
    lacs_rng rng = lacs_rng_stream(seed, r->tensor);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= shape[i];
    const int64_t width = ndim > 0 ? shape[ndim - 1] : 1;
    const int64_t rows = width > 0 ? count / width : 0;
    const char *n = r->name;
    double a0 = r->n_args > 0 ? r->arg[0] : 1, a1 = r->n_args > 1 ? r->arg[1] : 0;
    if (strcmp(n, "normal") == 0) {
        for (int64_t i = 0; i < count; i++)
            x[i] = a0 * lacs_rng_normal12(&rng);
    } else if (strcmp(n, "uniform") == 0) {
        if (r->n_args != 2)
            return recipe_error(c, "uniform needs (lo,hi)", r->tensor);
        for (int64_t i = 0; i < count; i++)
            x[i] = lacs_rng_range(&rng, a0, a1);
    } else if (strcmp(n, "const") == 0) {
        for (int64_t i = 0; i < count; i++)
            x[i] = a0;
    } else if (strcmp(n, "unit") == 0) {
        for (int64_t i = 0; i < count; i++)
            x[i] = lacs_rng_normal12(&rng);
        normalize_rows(x, rows, width, a0);
    } else if (strcmp(n, "unit_pow2") == 0) {
        if (r->n_args != 2 || a1 < a0)
            return recipe_error(c, "unit_pow2 needs (lo,hi), lo <= hi", r->tensor);
        for (int64_t row = 0; row < rows; row++) {
            for (int64_t i = 0; i < width; i++)
                x[row * width + i] = lacs_rng_normal12(&rng);
            int64_t span = (int64_t)(a1 - a0) + 1;
            int64_t e = (int64_t)a0 + (int64_t)(lacs_rng_next(&rng) % (uint64_t)span);
            normalize_rows(x + row * width, 1, width, pow2(e));
        }
    } else if (strcmp(n, "coupled") == 0 || strcmp(n, "lowrank") == 0) {
        /* coupled(eps): each row is one base direction of its group plus eps
         * times noise; lowrank(r): each row combines the group's r base
         * directions. Either is then normalised. */
        const int lowrank = strcmp(n, "lowrank") == 0;
        const int64_t n_base = lowrank ? (int64_t)a0 : 1;
        const int64_t T = ndim == 4 ? shape[1] : rows, H = ndim == 4 ? shape[2] : 1;
        const int64_t groups = ndim == 4 ? shape[0] * H : 1;
        if (n_base < 1 || n_base > width)
            return recipe_error(c, "lowrank needs 1 <= r <= width", r->tensor);
        double *base = malloc((size_t)(groups * n_base * width + 1) * sizeof(double));
        if (!base)
            return LACS_ERR_MEMORY;
        for (int64_t i = 0; i < groups * n_base * width; i++)
            base[i] = lacs_rng_normal12(&rng);
        for (int64_t row = 0; row < rows; row++) {
            const int64_t group = (row / (T * H)) * H + row % H;
            const double *group_base = base + group * n_base * width;
            for (int64_t i = 0; i < width; i++)
                x[row * width + i] = lowrank ? 0 : group_base[i] + a0 * lacs_rng_normal12(&rng);
            for (int64_t j = 0; lowrank && j < n_base; j++) {
                double coefficient = lacs_rng_normal12(&rng);
                for (int64_t i = 0; i < width; i++)
                    x[row * width + i] += coefficient * group_base[j * width + i];
            }
        }
        free(base);
        normalize_rows(x, rows, width, 1);
    } else if (strcmp(n, "mixed_gate") == 0) {
        /* a third exactly 0, a third mild in (-0.5, 0], a third strong in (-20, -5] */
        for (int64_t i = 0; i < count; i++) {
            double u = lacs_rng_uniform(&rng);
            x[i] = u < 1.0 / 3 ? 0 : u < 2.0 / 3 ? -0.5 * lacs_rng_uniform(&rng)
                                                 : -5 - 15 * lacs_rng_uniform(&rng);
        }
    } else if (strcmp(n, "psd") == 0) {
        /* per K x K block: (a0 / K) A A^T, A standard normal */
        const int64_t K = width;
        if (ndim < 2 || shape[ndim - 2] != K)
            return recipe_error(c, "psd needs [..., K, K]", r->tensor);
        double *A = malloc((size_t)(K * K) * sizeof(double));
        if (!A)
            return LACS_ERR_MEMORY;
        for (int64_t block = 0; block < count / (K * K); block++) {
            for (int64_t i = 0; i < K * K; i++)
                A[i] = lacs_rng_normal12(&rng);
            for (int64_t i = 0; i < K; i++)
                for (int64_t j = 0; j < K; j++) {
                    double sum = 0;
                    for (int64_t m = 0; m < K; m++)
                        sum += A[i * K + m] * A[j * K + m];
                    x[(block * K + i) * K + j] = a0 / (double)K * sum;
                }
        }
        free(A);
    } else if (strcmp(n, "all_bf16") == 0) {
        if (count != 65536)
            return recipe_error(c, "all_bf16 needs exactly 65536 elements", r->tensor);
        for (int64_t i = 0; i < count; i++) {
            uint32_t bits = (uint32_t)i << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            x[i] = f;
        }
    } else if (strcmp(n, "specials") == 0) {
        const int64_t n_special = (int64_t)(sizeof special_values / sizeof special_values[0]);
        for (int64_t i = 0; i < count; i++)
            x[i] = i < n_special ? special_values[i] : a0 * lacs_rng_normal12(&rng);
    } else if (strcmp(n, "retnet") == 0) {
        for (int64_t i = 0; i < count; i++)
            x[i] = lacs_retnet_log_decay(i % 8);
    } else {
        return recipe_error(c, "unknown recipe", n);
    }
    return LACS_OK;
}

/* ---- rounding to the tier (SPEC.md 10.3) ---- */

/* binary32 -> bfloat16, round to nearest, ties to even; NaN stays a quiet NaN. */
static uint16_t bf16_from_float(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

/* Stores x in the tier's dtype: binary32 by the C cast, bfloat16 from that. */
static void round_to_tier(const double *x, int64_t count, lacs_dtype dtype, void *data)
{
    for (int64_t i = 0; i < count; i++) {
        float f = (float)x[i];
        if (dtype == LACS_F32) {
            memcpy((unsigned char *)data + 4 * i, &f, 4);
        } else {
            uint16_t h = bf16_from_float(f);
            memcpy((unsigned char *)data + 2 * i, &h, 2);
        }
    }
}

/* all_bf16 (SPEC.md 10.3: element i is the bfloat16 with bits i): the bit
 * patterns themselves, stored without the round trip through double and
 * binary32 of round_to_tier, which quiets the 126 signalling NaNs
 * (0x7f81..0x7fbf, 0xff81..0xffbf) into quiet ones already present. In the
 * fp32 tier each pattern is widened to binary32 by 16 zero bits. */
static void store_all_bf16(int64_t count, lacs_dtype dtype, void *data)
{
    for (int64_t i = 0; i < count; i++) {
        if (dtype == LACS_BF16) {
            uint16_t h = (uint16_t)i;
            memcpy((unsigned char *)data + 2 * i, &h, 2);
        } else {
            uint32_t wide = (uint32_t)i << 16;
            memcpy((unsigned char *)data + 4 * i, &wide, 4);
        }
    }
}

/* ---- the golden ---- */

static lacs_tensor *add_tensor(lacs_golden *g, const char *name, lacs_dtype dtype, int ndim,
                               const int64_t *shape)
{
    if (g->n_tensors >= (int)(sizeof g->tensors / sizeof g->tensors[0]) || strlen(name) >= 32)
        return NULL;
    int i = g->n_tensors;
    strcpy(g->names[i], name);
    for (int d = 0; d < ndim; d++)
        g->shapes[i][d] = shape[d];
    lacs_tensor *t = &g->tensors[i];
    t->name = g->names[i];
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape = g->shapes[i];
    int64_t count = lacs_tensor_count(t);
    t->data = calloc((size_t)count + 1, lacs_dtype_size(dtype));
    if (!t->data)
        return NULL;
    g->n_tensors++;
    return t;
}

/* The shape of input `name` of case c (SPEC.md 2.1, 4.14-4.18), or ndim -1. */
static int input_shape(const lacs_case *c, const char *name, int64_t n_seqs, int64_t *shape)
{
    const int64_t B = c->B, T = c->T, H = c->H, HV = c->HV, K = c->K, V = c->V;
    struct {
        const char *name;
        int ndim;
        int64_t d[4];
    } table[] = {
        {"q", 4, {B, T, H, K}}, {"k", 4, {B, T, H, K}}, {"w", 4, {B, T, H, K}},
        {"v", 4, {B, T, HV, V}}, {"beta", 3, {B, T, HV, 0}}, {"g", 3, {B, T, HV, 0}},
        {"gk", 4, {B, T, HV, K}}, {"g_gamma", 1, {HV, 0, 0, 0}}, {"lambda", 2, {HV, K, 0, 0}},
        {"h0", 4, {n_seqs, HV, K, V}}, {"h0_kk", 4, {n_seqs, HV, K, K}},
        {"x", 2, {c->rows, c->dim, 0, 0}}, {"dy", 2, {c->rows, c->dim, 0, 0}},
        {"weight", 1, {c->dim, 0, 0, 0}}, {"bias", 1, {c->dim, 0, 0, 0}},
        {"alpha", 1, {1, 0, 0, 0}}, {"C", 1, {1, 0, 0, 0}},
        {"do", 4, {B, T, HV, V}}, {"dht", 4, {n_seqs, HV, K, V}},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].name, name) == 0) {
            memcpy(shape, table[i].d, sizeof table[i].d);
            return table[i].ndim;
        }
    return -1;
}

/* Parses "0,0,1,40" into offsets; returns their count, or -1. */
static int64_t parse_offsets(const char *text, int64_t *offsets, int64_t max)
{
    int64_t n = 0;
    const char *p = text;
    while (*p && n < max) {
        char *end;
        long long value = strtoll(p, &end, 10);
        if (end == p)
            return -1;
        offsets[n++] = value;
        p = *end == ',' ? end + 1 : end;
    }
    return *p ? -1 : n;
}

/* Compares out (double reference) with ref (long double reference, rounded):
 * the non-finite values must agree exactly (same NaN-ness, same infinity);
 * the finite ones by the normwise error of SPEC.md 5.1, per block. */
static double certify_output(const lacs_tensor *out, const lacs_tensor *ref, const lacs_case *c,
                             const int64_t *cu, int64_t n_seqs)
{
    const int64_t count = lacs_tensor_count(out);
    double *x = malloc((size_t)(count + 1) * sizeof(double));
    double *y = malloc((size_t)(count + 1) * sizeof(double));
    double err = INFINITY;
    if (!x || !y)
        goto done;
    memcpy(x, out->data, (size_t)count * sizeof(double));
    memcpy(y, ref->data, (size_t)count * sizeof(double));
    for (int64_t i = 0; i < count; i++) {
        if (isfinite(x[i]) && isfinite(y[i]))
            continue;
        int same = (isnan(x[i]) && isnan(y[i])) || x[i] == y[i];
        if (!same)
            goto done;
        x[i] = y[i] = 0;
    }
    const char *name = out->name + strlen("expected.");
    if (strcmp(name, "o") == 0)
        err = lacs_normwise_error(x, y, cu ? 1 : c->B, c->T, c->HV, c->V, cu, n_seqs, NULL);
    else if (out->ndim == 4)
        err = lacs_normwise_error(x, y, out->shape[0], 1, out->shape[1], out->shape[2] * out->shape[3],
                                  NULL, 0, NULL);
    else if (out->ndim == 2)
        err = lacs_normwise_error(x, y, out->shape[0], 1, 1, out->shape[1], NULL, 0, NULL);
    else
        err = lacs_normwise_error(x, y, 1, 1, 1, count, NULL, 0, NULL);
done:
    free(x);
    free(y);
    return err;
}

const lacs_tensor *lacs_golden_find(const lacs_golden *g, const char *name)
{
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i].name, name) == 0)
            return &g->tensors[i];
    return NULL;
}

void lacs_golden_free(lacs_golden *g)
{
    for (int i = 0; i < g->n_tensors; i++)
        free(g->tensors[i].data);
    free(g->metadata);
    memset(g, 0, sizeof *g);
}

/* Tokens [t0, t1) of a fixed-length case's inputs (per-token tensors cut
 * along T; the rest as they are), for the state carry (SPEC.md 10.5, 11.5). */
static int slice_part(const lacs_golden *g, int64_t t0, int64_t t1, lacs_tensor *part, int64_t (*shapes)[4])
{
    static const char *const per_token[] = {"q", "k", "v", "w", "beta", "g", "gk", "do"};
    const int64_t len = t1 - t0;
    for (int i = 0; i < g->n_inputs; i++) {
        part[i] = g->tensors[i];
        int cut = 0;
        for (size_t j = 0; j < sizeof per_token / sizeof per_token[0]; j++)
            cut |= strcmp(g->tensors[i].name, per_token[j]) == 0;
        if (!cut)
            continue;
        /* [B, T, ...] -> [B, len, ...]: copy each batch row's tokens t0 .. t1 - 1 */
        const lacs_tensor *t = &g->tensors[i];
        int64_t inner = 1;
        for (int d = 2; d < t->ndim; d++)
            inner *= t->shape[d];
        const size_t esize = lacs_dtype_size(t->dtype);
        unsigned char *data = malloc((size_t)(t->shape[0] * len * inner) * esize + 1);
        if (!data)
            return LACS_ERR_MEMORY;
        for (int64_t b = 0; b < t->shape[0]; b++)
            memcpy(data + (size_t)(b * len * inner) * esize,
                   (const unsigned char *)t->data + (size_t)((b * t->shape[1] + t0) * inner) * esize,
                   (size_t)(len * inner) * esize);
        for (int d = 0; d < t->ndim; d++)
            shapes[i][d] = t->shape[d];
        shapes[i][1] = len;
        part[i].shape = shapes[i];
        part[i].data = data;
    }
    return LACS_OK;
}

static int first_part(const lacs_golden *g, int64_t split, lacs_tensor *part, int64_t (*shapes)[4])
{
    return slice_part(g, 0, split, part, shapes);
}

static void free_first_part(const lacs_golden *g, lacs_tensor *part)
{
    for (int i = 0; i < g->n_inputs; i++)
        if (part[i].data != g->tensors[i].data)
            free(part[i].data);
}

static int fail(lacs_golden *g, int rc)
{
    lacs_golden_free(g);
    return rc;
}

/* Runs the op on `inputs` in double into the outputs named prefix+name, and
 * in long double for the certification; records each output's error. */
/* SPEC.md 10.4: the stored certified error, a power of two at or above the
 * measured one, so that a vector is the same bytes on Intel and AMD x86-64
 * (their x87 instructions, under long double's libm, differ in the last bits,
 * and so do the measured errors; the goldens themselves, in double, do not). */
double lacs_certified_as_stored(double measured)
{
    if (!(measured > 0) || !isfinite(measured)) /* 0, and the NaN or infinity that generation refuses */
        return measured;
    int exponent;
    const double fraction = frexp(measured, &exponent); /* measured = fraction 2^exponent, fraction in [1/2, 1) */
    return fraction == 0.5 ? measured : ldexp(1.0, exponent);
}

static int compute(lacs_golden *g, const lacs_case *c, const lacs_tensor *inputs, int n_inputs,
                   const lacs_param *params, int n_params, const char *suffix, const int64_t *cu,
                   int64_t n_seqs, int *n_certified)
{
    lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
    int n_shapes;
    int rc = lacs_reference_output_shapes(c->op, inputs, n_inputs, shapes, &n_shapes);
    if (rc != LACS_OK)
        return rc;
    lacs_tensor outs[LACS_OPS_MAX_OUTPUTS], outs_ld[LACS_OPS_MAX_OUTPUTS];
    for (int s = 0; s < n_shapes; s++) {
        char name[48];
        snprintf(name, sizeof name, "expected.%s%s", shapes[s].name, suffix);
        lacs_tensor *t = add_tensor(g, name, LACS_F64, shapes[s].ndim, shapes[s].shape);
        if (!t) {
            for (int done = 0; done < s; done++)
                free(outs_ld[done].data);
            return lacs_internal_error(LACS_ERR_MEMORY, c->op, "case '%s': no room for output '%s'",
                                       c->name, name);
        }
        outs[s] = *t;
        outs[s].name = shapes[s].name;
        outs_ld[s] = outs[s];
        outs_ld[s].data = calloc((size_t)lacs_tensor_count(t) + 1, sizeof(double));
    }
    rc = lacs_reference_run(c->op, inputs, n_inputs, params, n_params, outs, n_shapes, 0);
    if (rc == LACS_OK)
        rc = lacs_reference_run(c->op, inputs, n_inputs, params, n_params, outs_ld, n_shapes, 1);
    for (int s = 0; s < n_shapes; s++) {
        if (rc == LACS_OK && !outs_ld[s].data)
            rc = lacs_internal_error(LACS_ERR_MEMORY, c->op, "out of memory");
        if (rc == LACS_OK) {
            lacs_tensor named = outs[s], named_ld = outs_ld[s];
            char full[48];
            snprintf(full, sizeof full, "expected.%s", shapes[s].name);
            named.name = named_ld.name = full;
            double err = certify_output(&named, &named_ld, c, strcmp(shapes[s].name, "o") == 0 ? cu : NULL,
                                        n_seqs);
            g->certified[(*n_certified)++] = err;
            if (!(err <= g->certified_max)) /* NaN included */
                g->certified_max = err;
        }
        free(outs_ld[s].data);
    }
    /* the gauges of the tolerance model (SPEC.md 11.2), stored F32 beside the goldens */
    double *gauges[LACS_OPS_MAX_OUTPUTS] = {0};
    for (int s = 0; rc == LACS_OK && s < n_shapes; s++)
        if (!(gauges[s] = malloc((size_t)lacs_tensor_count(&outs[s]) * sizeof(double) + 8)))
            rc = lacs_internal_error(LACS_ERR_MEMORY, c->op, "out of memory");
    if (rc == LACS_OK)
        rc = lacs_gauge_compute(c->op, inputs, n_inputs, params, n_params, outs, n_shapes,
                                strcmp(g->tier, "fp32") == 0, g->seed, gauges);
    for (int s = 0; rc == LACS_OK && s < n_shapes; s++) {
        char name[48];
        snprintf(name, sizeof name, "gauge.%s%s", shapes[s].name, suffix);
        lacs_tensor *t = add_tensor(g, name, LACS_F32, shapes[s].ndim, shapes[s].shape);
        if (!t)
            rc = lacs_internal_error(LACS_ERR_MEMORY, c->op, "case '%s': no room for '%s'", c->name, name);
        for (int64_t j = 0; t && j < lacs_tensor_count(t); j++) {
            float value = gauges[s][j] < FLT_MAX ? (float)gauges[s][j] : FLT_MAX;
            memcpy((char *)t->data + j * 4, &value, 4);
        }
    }
    for (int s = 0; s < n_shapes; s++)
        free(gauges[s]);
    return rc;
}

/* Appends each space-separated word of `text` to the JSON array `array`;
 * with `known`, every word must be a flag of SPEC.md 10.5. */
static int add_words(cJSON *array, const char *text, const lacs_case *c, int known)
{
    size_t n_flags;
    const lacs_flag_info *flags = lacs_flags(&n_flags);
    const char *cursor = text ? text : "", *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        char word[64];
        if (len >= sizeof word)
            return recipe_error(c, "word too long", w);
        snprintf(word, sizeof word, "%.*s", (int)len, w);
        int found = !known;
        for (size_t i = 0; i < n_flags && !found; i++)
            found = strcmp(flags[i].name, word) == 0;
        if (!found)
            return recipe_error(c, "unknown flag", word);
        cJSON_AddItemToArray(array, cJSON_CreateString(word));
    }
    return LACS_OK;
}

/* A number written with 17 significant digits, so that it reads back exactly
 * (cJSON's own printing settles for 15 when they compare nearly equal). */
static void add_exact_number(cJSON *object, const char *name, double value)
{
    char text[32];
    snprintf(text, sizeof text, "%.17g", value);
    cJSON_AddRawToObject(object, name, text);
}

static char *metadata_json(const lacs_golden *g, const lacs_case *c, const lacs_param *params,
                           int n_params, int64_t n_seqs, int *rc)
{
    const lacs_op_info *info = lacs_op_find(c->op);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "lacs-vector/1");
    cJSON_AddStringToObject(root, "spec_version", LACS_SPEC_VERSION);
    cJSON_AddStringToObject(root, "generator_version", LACS_GENERATOR_VERSION);
    cJSON_AddStringToObject(root, "id", g->id);
    cJSON_AddStringToObject(root, "op", c->op);
    cJSON_AddStringToObject(root, "tier", g->tier);
    *rc = add_words(cJSON_AddArrayToObject(root, "flags"), c->flags, c, 1);
    cJSON_AddStringToObject(root, "reason", c->reason);
    /* the conformance level (SPEC.md 11.7): strict in the tiers the catalog names, with its reason */
    const char *level_reason;
    const int strict =
        lacs_case_is_strict(c, strcmp(g->tier, "fp32") == 0 ? LACS_TIER_FP32 : LACS_TIER_BF16, &level_reason);
    cJSON_AddStringToObject(root, "level", strict ? "strict" : "required");
    if (strict)
        cJSON_AddStringToObject(root, "level_reason", level_reason);
    cJSON *p = cJSON_AddObjectToObject(root, "params");
    for (int i = 0; i < n_params; i++)
        cJSON_AddNumberToObject(p, params[i].name, params[i].value);
    if (c->split > 0)
        cJSON_AddNumberToObject(p, "split", (double)c->split);
    cJSON *d = cJSON_AddObjectToObject(root, "dims");
    if (info->family == LACS_FAMILY_NORM) {
        cJSON_AddNumberToObject(d, "rows", (double)c->rows);
        cJSON_AddNumberToObject(d, "dim", (double)c->dim);
    } else {
        const char *names[] = {"B", "T", "H", "HV", "K", "V", "N"};
        const int64_t values[] = {c->B, c->T, c->H, c->HV, c->K, c->V, n_seqs};
        for (int i = 0; i < 7; i++)
            cJSON_AddNumberToObject(d, names[i], (double)values[i]);
    }
    /* an integer literal: cJSON would print a 53-bit number in exponent form */
    char seed_text[32];
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)g->seed);
    cJSON_AddRawToObject(root, "seed", seed_text);
    cJSON *inputs = cJSON_AddArrayToObject(root, "inputs"), *outputs = cJSON_AddArrayToObject(root, "outputs");
    for (int i = 0; i < g->n_tensors; i++)
        if (i < g->n_inputs)
            cJSON_AddItemToArray(inputs, cJSON_CreateString(g->tensors[i].name));
        else if (strncmp(g->tensors[i].name, "expected.", 9) == 0)
            cJSON_AddItemToArray(outputs, cJSON_CreateString(g->tensors[i].name + strlen("expected.")));
    cJSON_AddStringToObject(root, "reference", info->reference);
    /* the tolerance model (SPEC.md 11.3): its constants, per output its length factor */
    const int fp32 = strcmp(g->tier, "fp32") == 0;
    int64_t longest = c->T;
    for (int i = 0; i < g->n_inputs; i++)
        if (strcmp(g->tensors[i].name, "cu_seqlens") == 0) {
            const int64_t *cu = g->tensors[i].data;
            longest = 0;
            for (int64_t n = 0; n + 1 < lacs_tensor_count(&g->tensors[i]); n++)
                longest = cu[n + 1] - cu[n] > longest ? cu[n + 1] - cu[n] : longest;
        }
    cJSON *tol = cJSON_AddObjectToObject(root, "tolerance");
    cJSON_AddStringToObject(tol, "model", LACS_TOLERANCE_MODEL);
    add_exact_number(tol, "unit_roundoff", fp32 ? 0x1p-24 : 0x1p-8);
    cJSON_AddNumberToObject(tol, "normwise_factor", LACS_TOLERANCE_NORMWISE_FACTOR);
    cJSON_AddNumberToObject(tol, "elementwise_factor", LACS_TOLERANCE_ELEMENTWISE_FACTOR);
    cJSON_AddNumberToObject(tol, "floor_fraction",
                            fp32 ? LACS_TOLERANCE_FLOOR_FRACTION_FP32 : LACS_TOLERANCE_FLOOR_FRACTION_BF16);
    add_exact_number(tol, "underflow", fp32 ? 0x1p-150 : 0x1p-134); /* half the smallest subnormal */
    cJSON *length = cJSON_AddObjectToObject(tol, "length_factor");
    for (int i = g->n_inputs; i < g->n_tensors; i++)
        if (strncmp(g->tensors[i].name, "expected.", 9) == 0) {
            const char *name = g->tensors[i].name + strlen("expected.");
            char base[32]; /* without the state carry's suffix: ht_split -> ht, ht_kk_split -> ht_kk */
            snprintf(base, sizeof base, "%s", name);
            if (strlen(base) > 6 && strcmp(base + strlen(base) - 6, "_split") == 0)
                base[strlen(base) - 6] = 0;
            add_exact_number(length, name, lacs_gauge_length_factor(c->op, base, fp32, c->K, longest, c->rows, c->dim));
        }
    cJSON *gauge = cJSON_AddObjectToObject(tol, "gauge");
    cJSON_AddNumberToObject(gauge, "samples", LACS_GAUGE_SAMPLES);
    add_exact_number(gauge, "delta", LACS_GAUGE_DELTA);
    add_exact_number(gauge, "binary32", fp32 ? 1.0 : LACS_GAUGE_BINARY32_IN_BF16);
    cJSON_AddNumberToObject(gauge, "exp_error", LACS_GAUGE_EXP_ERROR);
    cJSON_AddBoolToObject(gauge, "state_noise", 1);
    cJSON *cert = cJSON_AddObjectToObject(root, "certified");
    char method[96];
    snprintf(method, sizeof method,
             "long double recomputation (%d-bit significand), rounded up to a power of two, SPEC.md 10.4",
             LDBL_MANT_DIG);
    cJSON_AddStringToObject(cert, "method", method);
    cJSON_AddNumberToObject(cert, "max_error", lacs_certified_as_stored(g->certified_max));
    cJSON *per = cJSON_AddObjectToObject(cert, "per_output");
    for (int i = g->n_inputs, j = 0; i < g->n_tensors; i++)
        if (strncmp(g->tensors[i].name, "expected.", 9) == 0)
            cJSON_AddNumberToObject(per, g->tensors[i].name + strlen("expected."),
                                    lacs_certified_as_stored(g->certified[j++]));
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!text && *rc == LACS_OK)
        *rc = LACS_ERR_MEMORY;
    return text;
}

/* The state carry of a VJP (SPEC.md 11.5): the cotangent of the state after
 * the first `split` tokens, dh_split, is the dh0 of the second part's VJP run
 * from that state (the forward's, on the first part, in double) with the
 * case's dht; it is computed, certified and gauged as a golden of its own. */
static int vjp_split(lacs_golden *g, const lacs_case *c, const lacs_param *params, int n_params, int64_t n_seqs,
                     int *n_certified)
{
    const lacs_op_info *forward = lacs_op_forward(lacs_op_find(c->op));
    lacs_tensor part[24];
    int64_t part_shapes[24][4], state_shape[4] = {n_seqs, c->HV, c->K, c->V};
    double *state = calloc((size_t)(n_seqs * c->HV * c->K * c->V) + 1, sizeof(double));
    if (!forward || !state) {
        free(state);
        return lacs_internal_error(LACS_ERR_MEMORY, c->op, "case '%s': out of memory", c->name);
    }
    /* the forward on the first part: its inputs and parameters, not the cotangents */
    int rc = first_part(g, c->split, part, part_shapes);
    lacs_tensor forward_in[24], ht = {"ht", LACS_F64, 4, state_shape, state};
    lacs_param forward_params[8];
    int n_forward = 0, n_forward_params = 0;
    for (int i = 0; i < g->n_inputs; i++)
        if (strcmp(part[i].name, "do") != 0 && strcmp(part[i].name, "dht") != 0)
            forward_in[n_forward++] = part[i];
    for (int i = 0; i < n_params; i++)
        if (lacs_word_in_list(forward->params, params[i].name))
            forward_params[n_forward_params++] = params[i];
    if (rc == LACS_OK)
        rc = lacs_reference_run(forward->name, forward_in, n_forward, forward_params, n_forward_params, &ht, 1, 0);
    free_first_part(g, part);
    /* the second part's VJP from that state */
    int n_second = g->n_inputs, n_kept = 0;
    lacs_golden second = {0};
    if (rc == LACS_OK)
        rc = slice_part(g, c->split, c->T, part, part_shapes);
    if (rc == LACS_OK) {
        int has_h0 = 0;
        for (int i = 0; i < g->n_inputs; i++)
            if (strcmp(part[i].name, "h0") == 0) {
                part[i] = ht;
                part[i].name = "h0";
                has_h0 = 1;
            }
        if (!has_h0) {
            part[n_second] = ht;
            part[n_second++].name = "h0";
        }
        strcpy(second.id, g->id);
        second.tier = g->tier;
        second.seed = g->seed;
        lacs_case tail = *c;
        tail.T = c->T - c->split;
        int n_certified_second = 0;
        rc = compute(&second, &tail, part, n_second, params, n_params, "_split", NULL, n_seqs, &n_certified_second);
        /* keep dh0 of the second part, as dh_split */
        for (int i = 0, n_expected = 0; rc == LACS_OK && i < second.n_tensors; i++) {
            const lacs_tensor *t = &second.tensors[i];
            const int expected = strncmp(t->name, "expected.", 9) == 0;
            n_expected += expected;
            if (strcmp(t->name, "expected.dh0_split") != 0 && strcmp(t->name, "gauge.dh0_split") != 0)
                continue;
            lacs_tensor *kept = add_tensor(g, expected ? "expected.dh_split" : "gauge.dh_split", t->dtype, t->ndim,
                                           t->shape);
            if (!kept) {
                rc = LACS_ERR_MEMORY;
                break;
            }
            memcpy(kept->data, t->data, (size_t)lacs_tensor_count(t) * lacs_dtype_size(t->dtype));
            n_kept++;
            if (expected) {
                g->certified[(*n_certified)++] = second.certified[n_expected - 1];
                if (!(second.certified[n_expected - 1] <= g->certified_max))
                    g->certified_max = second.certified[n_expected - 1];
            }
        }
        if (rc == LACS_OK && n_kept != 2)
            rc = lacs_internal_error(LACS_ERR_PARAM, c->op, "case '%s': the second part gave no dh0", c->name);
        for (int i = 0; i < g->n_inputs; i++)
            if (part[i].data != g->tensors[i].data && part[i].data != state)
                free(part[i].data);
    }
    lacs_golden_free(&second);
    free(state);
    return rc;
}

/* How far build goes: everything; the inputs only; their shapes only (zeros, not drawn). */
enum { BUILD_ALL, BUILD_INPUTS, BUILD_SHAPES };

/* lacs_golden_build and its variants: `seed` NULL for the id's. */
static int build(const lacs_case *c, lacs_tier_mask tier, const uint64_t *seed, int how, lacs_golden *g)
{
    memset(g, 0, sizeof *g);
    const lacs_op_info *info = lacs_op_find(c->op);
    if (!info)
        return lacs_internal_error(LACS_ERR_PARAM, NULL, "catalog: unknown op '%s'", c->op);
    if (LDBL_MANT_DIG <= DBL_MANT_DIG)
        return lacs_internal_error(LACS_ERR_PARAM, c->op,
                                   "long double is no wider than double here: goldens cannot be certified");
    g->tier = tier == LACS_TIER_FP32 ? "fp32" : "bf16";
    const lacs_dtype dtype = tier == LACS_TIER_FP32 ? LACS_F32 : LACS_BF16;
    snprintf(g->id, sizeof g->id, "%s-%s-%s", c->op, g->tier, c->name);
    g->seed = seed ? *seed : lacs_fnv1a64(g->id) >> 11; /* 53 bits: exact as a JSON number */

    /* inputs, in the order of the recipes */
    int64_t offsets[LACS_CASE_MAX_SEQUENCES + 1], n_offsets = 0, n_seqs = c->B;
    if (c->cu_seqlens) {
        n_offsets = parse_offsets(c->cu_seqlens, offsets, LACS_CASE_MAX_SEQUENCES + 1);
        if (n_offsets < 1)
            return recipe_error(c, "bad cu_seqlens", c->cu_seqlens);
        n_seqs = n_offsets - 1;
    }
    int rc = LACS_OK;
    const char *cursor = c->inputs, *word;
    for (size_t len; rc == LACS_OK && (len = lacs_next_word(&cursor, &word)) > 0;) {
        recipe r;
        if ((rc = parse_recipe(c, word, len, &r)) == LACS_OK) {
            int64_t shape[4];
            int ndim = input_shape(c, r.tensor, n_seqs, shape);
            lacs_tensor *t = ndim < 0 ? NULL : add_tensor(g, r.tensor, dtype, ndim, shape);
            if (ndim < 0)
                rc = recipe_error(c, "unknown input", r.tensor);
            else if (!t)
                rc = lacs_internal_error(LACS_ERR_MEMORY, c->op, "case '%s': out of memory", c->name);
            else if (how == BUILD_SHAPES)
                continue; /* calloc'd: zeros, and no page touched */
            else if (strcmp(r.name, "copy") == 0) {
                const lacs_tensor *source = lacs_golden_find(g, r.source);
                if (!source || lacs_tensor_count(source) != lacs_tensor_count(t))
                    rc = recipe_error(c, "copy needs an earlier input of the same size", r.source);
                else
                    memcpy(t->data, source->data, (size_t)lacs_tensor_count(t) * lacs_dtype_size(dtype));
            } else {
                double *values = malloc((size_t)lacs_tensor_count(t) * sizeof(double) + 1);
                rc = values ? draw(c, &r, g->seed, values, ndim, shape) : LACS_ERR_MEMORY;
                if (rc == LACS_OK && strcmp(r.name, "all_bf16") == 0)
                    store_all_bf16(lacs_tensor_count(t), dtype, t->data);
                else if (rc == LACS_OK)
                    round_to_tier(values, lacs_tensor_count(t), dtype, t->data);
                free(values);
            }
        }
    }
    if (rc == LACS_OK && c->cu_seqlens) {
        lacs_tensor *t = add_tensor(g, "cu_seqlens", LACS_I64, 1, &n_offsets);
        if (!t)
            rc = LACS_ERR_MEMORY;
        else
            memcpy(t->data, offsets, (size_t)n_offsets * sizeof(int64_t));
    }
    if (rc != LACS_OK)
        return fail(g, rc);
    g->n_inputs = g->n_tensors;
    if (how != BUILD_ALL)
        return LACS_OK;

    /* parameters: the catalog's, then every one the op reads at its default */
    lacs_param params[8];
    int n_params = 0;
    char param_names[8][32];
    cursor = c->params ? c->params : "";
    for (size_t len; n_params < 8 && (len = lacs_next_word(&cursor, &word)) > 0;) {
        const char *eq = memchr(word, '=', len);
        char *end;
        if (!eq || (size_t)(eq - word) >= 32)
            return fail(g, recipe_error(c, "parameter is not name=value", word));
        snprintf(param_names[n_params], 32, "%.*s", (int)(eq - word), word);
        double value = strtod(eq + 1, &end);
        if (end != word + len)
            return fail(g, recipe_error(c, "bad parameter value", word));
        params[n_params].name = param_names[n_params];
        params[n_params].value = value;
        n_params++;
    }
    cursor = info->params;
    for (size_t len; n_params < 8 && (len = lacs_next_word(&cursor, &word)) > 0;) {
        int given = 0;
        for (int j = 0; j < n_params; j++)
            given |= strlen(params[j].name) == len && strncmp(params[j].name, word, len) == 0;
        snprintf(param_names[n_params], 32, "%.*s", (int)len, word);
        if (!given && lacs_reference_param_default(c->op, g->tensors, g->n_inputs, param_names[n_params],
                                                   &params[n_params].value)) {
            params[n_params].name = param_names[n_params];
            n_params++;
        }
    }

    /* goldens, certified */
    int n_certified = 0;
    const int64_t *cu = c->cu_seqlens ? offsets : NULL;
    rc = compute(g, c, g->tensors, g->n_inputs, params, n_params, "", cu, n_seqs, &n_certified);
    const lacs_op_info *family_of = info->family == LACS_FAMILY_VJP ? lacs_op_forward(info) : info;
    if (rc == LACS_OK && c->split > 0 && (c->cu_seqlens || c->split >= c->T || !family_of ||
                                          family_of->family == LACS_FAMILY_ATTENTION ||
                                          family_of->family == LACS_FAMILY_NORM))
        return fail(g, recipe_error(c, "split needs a fixed-length stateful case with 0 < split < T", c->name));
    if (rc == LACS_OK && c->split > 0 && info->family == LACS_FAMILY_VJP) {
        rc = vjp_split(g, c, params, n_params, n_seqs, &n_certified);
    } else if (rc == LACS_OK && c->split > 0) {
        lacs_tensor part[24];
        int64_t part_shapes[24][4];
        lacs_golden first = {0};
        rc = first_part(g, c->split, part, part_shapes);
        if (rc == LACS_OK) {
            /* the first part's state only: compute into a scratch golden, keep ht (and ht_kk) */
            strcpy(first.id, g->id);
            first.tier = g->tier;
            first.seed = g->seed;
            int n_first = 0;
            lacs_case head = *c;
            head.T = c->split;
            rc = compute(&first, &head, part, g->n_inputs, params, n_params, "_split", NULL, n_seqs, &n_first);
            /* first's tensors: expected.* (certified, in order), then gauge.*; keep the state's */
            for (int i = 0, n_expected = 0; rc == LACS_OK && i < first.n_tensors; i++) {
                const char *name = first.tensors[i].name;
                const int expected = strncmp(name, "expected.", 9) == 0;
                n_expected += expected;
                if (strcmp(name, "expected.o_split") == 0 || strcmp(name, "gauge.o_split") == 0)
                    continue;
                lacs_tensor *t = add_tensor(g, name, first.tensors[i].dtype, first.tensors[i].ndim,
                                            first.tensors[i].shape);
                if (!t) {
                    rc = LACS_ERR_MEMORY;
                    break;
                }
                memcpy(t->data, first.tensors[i].data,
                       (size_t)lacs_tensor_count(t) * lacs_dtype_size(first.tensors[i].dtype));
                if (expected) {
                    g->certified[n_certified++] = first.certified[n_expected - 1];
                    if (!(first.certified[n_expected - 1] <= g->certified_max))
                        g->certified_max = first.certified[n_expected - 1];
                }
            }
        }
        free_first_part(g, part);
        lacs_golden_free(&first);
    }
    if (rc != LACS_OK)
        return fail(g, rc);
    if (!(g->certified_max <= LACS_CERTIFY_BOUND))
        return fail(g, lacs_internal_error(LACS_ERR_PARAM, c->op,
                                           "case '%s': the golden differs from its long double "
                                           "recomputation by %.3g > %.0e (SPEC.md 10.4)",
                                           g->id, g->certified_max, LACS_CERTIFY_BOUND));
    g->metadata = metadata_json(g, c, params, n_params, n_seqs, &rc);
    if (rc != LACS_OK)
        return fail(g, rc);
    return LACS_OK;
}

int lacs_golden_build(const lacs_case *c, lacs_tier_mask tier, lacs_golden *g)
{
    return build(c, tier, NULL, BUILD_ALL, g);
}

int lacs_golden_build_seeded(const lacs_case *c, lacs_tier_mask tier, const uint64_t *seed, lacs_golden *g)
{
    return build(c, tier, seed, BUILD_ALL, g);
}

int lacs_golden_inputs(const lacs_case *c, lacs_tier_mask tier, const uint64_t *seed, lacs_golden *g)
{
    return build(c, tier, seed, BUILD_INPUTS, g);
}

int lacs_golden_input_shapes(const lacs_case *c, lacs_tier_mask tier, lacs_golden *g)
{
    return build(c, tier, NULL, BUILD_SHAPES, g);
}
