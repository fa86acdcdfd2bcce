/* What the legitimate zoo members on sequences share (tests/zoo/chunked.c,
 * fla_like_bf16.c, online_softmax.c): the plugin ABI's tensors read into
 * float arrays, the per-(sequence, value head) driver, bf16 rounding, the
 * multiply-add of the _fma builds and the members' environment variables.
 *
 * A plugin links libm only (not liblacs), so this is a small, independent
 * reading of SPEC.md section 2: layout, GVA (value head hv reads q/k head
 * hv / (HV / H)), varlen through cu_seqlens with B = 1, h0 in and ht out.
 * Every function is static inline: each member includes the file and uses
 * part of it.
 */
#ifndef LACS_ZOO_LEGIT_PLUGIN_H
#define LACS_ZOO_LEGIT_PLUGIN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"

/* Return codes besides 0 and LACS_UNSUPPORTED (lacs/plugin.h): any other
 * non-zero value is an error; these say which, with a line on stderr. */
enum { LEGIT_ERR_INPUT = 2, LEGIT_ERR_MEMORY = 3 };

/* ---- arithmetic ---- */

/* a * b + c: one rounding in the _fma builds (-DZOO_FMA=1, explicit fmaf, so
 * that the plugin needs no FMA instructions to be compiled), two otherwise
 * (the Makefile compiles with -ffp-contract=off). */
static inline float legit_madd(float a, float b, float c)
{
#if defined(ZOO_FMA) && ZOO_FMA
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* x rounded to bfloat16 (round to nearest, ties to even, on the top 16 bits
 * of the binary32), returned widened back to float. A NaN stays a (quiet) NaN;
 * values beyond bf16's largest finite round to infinity, as in hardware. */
static inline float legit_round_bf16(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if (isnan(x)) {
        bits = (bits | 0x00400000u) & 0xffff0000u;
    } else {
        const uint32_t lower = bits & 0xffffu, half = 0x8000u;
        bits &= 0xffff0000u;
        if (lower > half || (lower == half && (bits & 0x10000u)))
            bits += 0x10000u;
    }
    float y;
    memcpy(&y, &bits, 4);
    return y;
}

/* ---- the environment ---- */

/* The integer value of environment variable `name`, `fallback` if unset or
 * empty; -1 (with a message) if set to something that is not a whole number. */
static inline long legit_env_long(const char *name, long fallback)
{
    const char *text = getenv(name);
    if (!text || !*text)
        return fallback;
    char *end;
    const long value = strtol(text, &end, 10);
    if (*end != '\0' || value < 0) {
        fprintf(stderr, "zoo: %s = '%s' is not a non-negative integer\n", name, text);
        return -1;
    }
    return value;
}

/* ---- tensors and parameters ---- */

static inline const lacs_tensor *legit_find(const lacs_tensor *tensors, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (tensors[i].name && strcmp(tensors[i].name, name) == 0)
            return &tensors[i];
    return NULL;
}

static inline int64_t legit_count(const lacs_tensor *t)
{
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++)
        count *= t->shape[i];
    return count;
}

/* The first word of the space-separated list `required` that names no
 * input (as a static copy), or NULL when every one is given. */
static inline const char *legit_missing_input(const lacs_tensor *inputs, int n, const char *required)
{
    static char word[32];
    for (const char *p = required; *p;) {
        const size_t len = strcspn(p, " ");
        snprintf(word, sizeof word, "%.*s", (int)len, p);
        if (len > 0 && !legit_find(inputs, n, word))
            return word;
        p += len + (p[len] == ' ');
    }
    return NULL;
}

/* Parameter `name`, or `fallback` when the case does not give it. */
static inline double legit_param(const lacs_param *params, int n, const char *name, double fallback)
{
    for (int i = 0; i < n; i++)
        if (params[i].name && strcmp(params[i].name, name) == 0)
            return params[i].value;
    return fallback;
}

/* A float input as floats (F32 and BF16 exactly; F64 rounded once), in a new
 * array; NULL with *rc set on a wrong dtype or no memory. */
static inline float *legit_floats(const char *member, const lacs_tensor *t, int *rc)
{
    const int64_t count = legit_count(t);
    float *out = malloc((size_t)(count + 1) * sizeof *out);
    if (!out) {
        fprintf(stderr, "%s: out of memory for input '%s'\n", member, t->name);
        *rc = LEGIT_ERR_MEMORY;
        return NULL;
    }
    const unsigned char *bytes = t->data;
    for (int64_t i = 0; i < count; i++) {
        if (t->dtype == LACS_F32) {
            memcpy(&out[i], bytes + 4 * i, 4);
        } else if (t->dtype == LACS_BF16) {
            uint16_t top;
            memcpy(&top, bytes + 2 * i, 2);
            const uint32_t bits = (uint32_t)top << 16;
            memcpy(&out[i], &bits, 4);
        } else if (t->dtype == LACS_F64) {
            double x;
            memcpy(&x, bytes + 8 * i, 8);
            out[i] = (float)x;
        } else {
            fprintf(stderr, "%s: input '%s' must be F32, BF16 or F64\n", member, t->name);
            free(out);
            *rc = LEGIT_ERR_INPUT;
            return NULL;
        }
    }
    return out;
}

/* ---- one problem on sequences ---- */

typedef struct {
    const char *member;       /* for messages */
    int64_t B, T, H, HV, K, V;
    int64_t n_seqs;           /* B, or N with cu_seqlens */
    const int64_t *cu_seqlens; /* NULL for fixed-length batches */
    /* the inputs as floats, NULL where not given */
    float *q, *k, *v, *beta, *g, *gk, *g_gamma, *h0;
    float scale, eps;
    int bf16_tier;            /* q is stored as BF16 */
} legit_problem;

static inline void legit_problem_free(legit_problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->beta);
    free(p->g);
    free(p->gk);
    free(p->g_gamma);
    free(p->h0);
    memset(p, 0, sizeof *p);
}

static inline int legit_shape_is(const lacs_tensor *t, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    const int64_t want[4] = {d0, d1, d2, d3};
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != want[i])
            return 0;
    return 1;
}

static inline int legit_shape_error(const char *member, const char *op, const char *name, const char *expected)
{
    fprintf(stderr, "%s: %s: tensor '%s' must have shape %s\n", member, op, name, expected);
    return LEGIT_ERR_INPUT;
}

/* Reads q, k, v [B, T, H or HV, K or V] and the optional beta, g [B, T, HV],
 * gk [B, T, HV, K], g_gamma [HV], h0 [N, HV, K, V], cu_seqlens [N + 1], and
 * the parameters scale (default K^-1/2) and eps (default 0). Shapes are
 * checked; an input not listed here is an error. */
static inline int legit_problem_load(const char *member, const char *op, const lacs_tensor *inputs, int n_inputs,
                                     const lacs_param *params, int n_params, legit_problem *p)
{
    memset(p, 0, sizeof *p);
    p->member = member;
    const lacs_tensor *q = legit_find(inputs, n_inputs, "q"), *v = legit_find(inputs, n_inputs, "v");
    if (!q || !legit_find(inputs, n_inputs, "k") || !v)
        return fprintf(stderr, "%s: %s: inputs q, k and v are required\n", member, op), LEGIT_ERR_INPUT;
    if (q->ndim != 4 || v->ndim != 4 || v->shape[0] != q->shape[0] || v->shape[1] != q->shape[1])
        return legit_shape_error(member, op, "q, v", "[B, T, H, K] and [B, T, HV, V]");
    p->B = q->shape[0];
    p->T = q->shape[1];
    p->H = q->shape[2];
    p->K = q->shape[3];
    p->HV = v->shape[2];
    p->V = v->shape[3];
    if (p->H < 1 || p->HV % p->H != 0 || p->K < 1 || p->V < 1)
        return legit_shape_error(member, op, "v", "[B, T, HV, V] with HV a multiple of H");
    p->n_seqs = p->B;
    p->bf16_tier = q->dtype == LACS_BF16;
    p->scale = (float)legit_param(params, n_params, "scale", 1 / sqrt((double)p->K));
    p->eps = (float)legit_param(params, n_params, "eps", 0);

    int rc = 0;
    for (int i = 0; i < n_inputs && rc == 0; i++) {
        const lacs_tensor *t = &inputs[i];
        const char *name = t->name ? t->name : "(null)";
        float **slot = NULL;
        int shape_ok = 1;
        if (strcmp(name, "q") == 0 || strcmp(name, "k") == 0) {
            slot = name[0] == 'q' ? &p->q : &p->k;
            shape_ok = legit_shape_is(t, 4, p->B, p->T, p->H, p->K);
        } else if (strcmp(name, "v") == 0) {
            slot = &p->v;
        } else if (strcmp(name, "beta") == 0 || strcmp(name, "g") == 0) {
            slot = name[0] == 'b' ? &p->beta : &p->g;
            shape_ok = legit_shape_is(t, 3, p->B, p->T, p->HV, 0);
        } else if (strcmp(name, "gk") == 0) {
            slot = &p->gk;
            shape_ok = legit_shape_is(t, 4, p->B, p->T, p->HV, p->K);
        } else if (strcmp(name, "g_gamma") == 0) {
            slot = &p->g_gamma;
            shape_ok = legit_shape_is(t, 1, p->HV, 0, 0, 0);
        } else if (strcmp(name, "h0") == 0) {
            slot = &p->h0; /* its first dimension is checked against N below */
            shape_ok = t->ndim == 4 && t->shape[1] == p->HV && t->shape[2] == p->K && t->shape[3] == p->V;
        } else if (strcmp(name, "cu_seqlens") == 0) {
            const int64_t *cu = t->data;
            shape_ok = t->dtype == LACS_I64 && t->ndim == 1 && t->shape[0] >= 1 && p->B == 1;
            p->n_seqs = shape_ok ? t->shape[0] - 1 : 0;
            for (int64_t n = 0; shape_ok && n < p->n_seqs; n++)
                shape_ok = cu[n] <= cu[n + 1];
            shape_ok = shape_ok && cu[0] == 0 && cu[p->n_seqs] == p->T;
            if (!shape_ok)
                rc = legit_shape_error(member, op, name, "[N + 1] I64, non-decreasing from 0 to T, with B = 1");
            p->cu_seqlens = cu;
            continue;
        } else {
            fprintf(stderr, "%s: %s: input '%s' is not one this member reads\n", member, op, name);
            rc = LEGIT_ERR_INPUT;
            break;
        }
        if (!shape_ok) {
            rc = legit_shape_error(member, op, name, "as in SPEC.md section 2");
            break;
        }
        *slot = legit_floats(member, t, &rc);
    }
    const lacs_tensor *h0 = legit_find(inputs, n_inputs, "h0");
    if (rc == 0 && h0 && h0->shape[0] != p->n_seqs)
        rc = legit_shape_error(member, op, "h0", "[N, HV, K, V]");
    if (rc)
        legit_problem_free(p);
    return rc;
}

/* The output `name` as a float array of `count` elements with the given
 * shape, or NULL (an error on stderr) if it is missing or misshapen. */
static inline float *legit_output(const char *member, const char *op, lacs_tensor *outputs, int n_outputs,
                                  const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    lacs_tensor *t = NULL;
    for (int i = 0; i < n_outputs; i++)
        if (outputs[i].name && strcmp(outputs[i].name, name) == 0)
            t = &outputs[i];
    if (!t || t->dtype != LACS_F32 || !legit_shape_is(t, ndim, d0, d1, d2, d3) || (!t->data && legit_count(t) > 0)) {
        fprintf(stderr, "%s: %s: output '%s' must be F32 of shape [%lld, %lld, %lld, %lld]\n", member, op, name,
                (long long)d0, (long long)d1, (long long)d2, (long long)d3);
        return NULL;
    }
    return t->data;
}

/* ---- one (sequence, value head) at a time ---- */

/* The inputs of one (sequence, value head), gathered into contiguous arrays:
 * q, k [T][K], v [T][V], beta, g [T], gk [T][K] (NULL where not given). */
typedef struct {
    int64_t T, K, V;
    const float *q, *k, *v, *beta, *g, *gk;
    float g_gamma;            /* 0 when not given */
    float scale, eps;
} legit_head;

/* Computes o [T][V] and takes the state h [K][V] (NULL for the attention
 * ops) from the initial to the final one. Returns 0 or an error code. */
typedef int (*legit_kernel)(const legit_head *s, float *h, float *o, void *context);

/* For each sequence and value head: gathers the inputs, loads h0 (or zeros),
 * runs the kernel, scatters o [B, T, HV, V] and the final state into ht
 * [N, HV, K, V] (ht may be NULL; `stateful` 0 for the attention ops). */
static inline int legit_run_per_head(const legit_problem *p, int stateful, legit_kernel kernel, void *context,
                                     float *o, float *ht)
{
    const int64_t K = p->K, V = p->V, T = p->T, group = p->HV / p->H;
    const size_t tk = (size_t)(T * K + 1), tv = (size_t)(T * V + 1);
    float *q = malloc(tk * sizeof *q), *k = malloc(tk * sizeof *k), *v = malloc(tv * sizeof *v);
    float *out = malloc(tv * sizeof *out), *beta = malloc((size_t)(T + 1) * sizeof *beta);
    float *g = malloc((size_t)(T + 1) * sizeof *g), *gk = malloc(tk * sizeof *gk);
    float *h = malloc((size_t)(K * V) * sizeof *h);
    int rc = q && k && v && out && beta && g && gk && h ? 0 : LEGIT_ERR_MEMORY;
    if (rc)
        fprintf(stderr, "%s: out of memory for T = %lld\n", p->member, (long long)T);
    for (int64_t n = 0; n < p->n_seqs && rc == 0; n++) {
        const int64_t b = p->cu_seqlens ? 0 : n;
        const int64_t bos = p->cu_seqlens ? p->cu_seqlens[n] : 0;
        const int64_t len = p->cu_seqlens ? p->cu_seqlens[n + 1] - bos : T;
        for (int64_t hv = 0; hv < p->HV && rc == 0; hv++) {
            const int64_t head = hv / group; /* GVA, grouped as fla */
            for (int64_t t = 0; t < len; t++) {
                const int64_t row = b * T + bos + t;
                memcpy(q + t * K, p->q + (row * p->H + head) * K, (size_t)K * sizeof *q);
                memcpy(k + t * K, p->k + (row * p->H + head) * K, (size_t)K * sizeof *k);
                memcpy(v + t * V, p->v + (row * p->HV + hv) * V, (size_t)V * sizeof *v);
                if (p->beta)
                    beta[t] = p->beta[row * p->HV + hv];
                if (p->g)
                    g[t] = p->g[row * p->HV + hv];
                if (p->gk)
                    memcpy(gk + t * K, p->gk + (row * p->HV + hv) * K, (size_t)K * sizeof *gk);
            }
            for (int64_t i = 0; i < K * V; i++)
                h[i] = p->h0 ? p->h0[(n * p->HV + hv) * K * V + i] : 0;
            const legit_head s = {
                .T = len, .K = K, .V = V, .q = q, .k = k, .v = v,
                .beta = p->beta ? beta : NULL, .g = p->g ? g : NULL, .gk = p->gk ? gk : NULL,
                .g_gamma = p->g_gamma ? p->g_gamma[hv] : 0, .scale = p->scale, .eps = p->eps,
            };
            rc = kernel(&s, stateful ? h : NULL, out, context);
            for (int64_t t = 0; t < len && rc == 0; t++)
                memcpy(o + ((b * T + bos + t) * p->HV + hv) * V, out + t * V, (size_t)V * sizeof *o);
            if (rc == 0 && stateful && ht)
                memcpy(ht + (n * p->HV + hv) * K * V, h, (size_t)(K * V) * sizeof *h);
        }
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(beta);
    free(g);
    free(gk);
    free(h);
    return rc;
}

/* RMS normalisation of one output row, as the reference's H3:
 * x / sqrt(mean(x^2) + eps), a zero row with eps = 0 staying zero. */
static inline void legit_rms_normalize(int64_t n, float eps, float *x)
{
    float sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum = legit_madd(x[i], x[i], sum);
    const float denominator = sqrtf(sum / (float)n + eps);
    for (int64_t i = 0; denominator > 0 && i < n; i++)
        x[i] /= denominator;
}

#endif
