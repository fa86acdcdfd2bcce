/* lacs explain CASE [--impl IMPL | --outputs FILE] [--vectors DIR] [--plot FILE.png] [--force]:
 * what a case is, and where an implementation goes wrong on it.
 *
 * Without --impl: the case's id, op (its formula labels and reference
 * function), tier, flags, reason, parameters, sizes, input shapes, tolerance
 * and the size of each golden. With --impl: the implementation runs on it in
 * a child process (as in `check`), and for each output of the sequence
 * layout ([B, T, HV, V]: o, and a backward's per-token gradients) the error
 * is followed over time (lacs_check_error_over_time) and per head: the
 * tokens and heads over the limit, the step where the error starts (the
 * first in a forward; the last in a backward, whose error spreads to earlier
 * tokens), the element that is worst there, and whether that token sits at
 * a chunk boundary of 64 or at the state-carry split (SPEC.md 11.8) --
 * chunked kernels hand their state (or its cotangent) from chunk to chunk,
 * and an error that starts exactly there points at that hand-over. A text
 * table shows the error per slice of t; --plot draws it
 * (checker/plot_error.py, matplotlib); a failing case ends with `where`,
 * one line per failing output.
 *
 * --outputs FILE explains outputs computed elsewhere (a safetensors file, as
 * `lacs compare` reads it) instead of running an implementation. A Python
 * implementation (python:FILE_OR_MODULE:FUNCTION) is run by the Python
 * harness: this program hands the whole command to `python3 -m lacs explain`
 * ($LACS_PYTHON, else /usr/bin/python3), which runs the function in a worker
 * process, as `check` does, and comes back here with --outputs.
 */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "lacs/ops.h"

static const char explain_usage[] =
    "usage: lacs explain CASE [--impl IMPL | --outputs FILE] [--vectors DIR] [--plot FILE.png]\n"
    "                    [--timeout SECONDS] [--force] [--no-verify]\n"
    "\n"
    "CASE is a case id (delta_rule-fp32-t64, found as DIR/<op>/<id>.safetensors) or a vector file.\n"
    "Prints what the case tests: op, formula labels, flags, reason, parameters, shapes, tolerance.\n"
    "  --impl IMPL      also run IMPL on it: each output's error/allowed ratio, and for outputs over\n"
    "                   time (o; dq, dk, dv, ... of a backward) the heads and tokens over the limit, the\n"
    "                   token where the error starts (the first; the last in a backward, whose error\n"
    "                   spreads to earlier tokens), whether it sits at a chunk boundary (chunks of 64) or at\n"
    "                   the state-carry split, a table of the error over t, and a closing summary of\n"
    "                   where each failing output goes wrong (SPEC.md 11.8); a Python function\n"
    "                   (python:FILE_OR_MODULE:FUNCTION) is run by the Python harness ($LACS_PYTHON,\n"
    "                   else /usr/bin/python3 -m lacs explain)\n"
    "  --outputs FILE   explain outputs computed elsewhere instead (o, ht, ... or expected.o, ...; F32,\n"
    "                   BF16 or F64), as lacs compare reads them; --outputs-of NAME says whose they are\n"
    "  --vectors DIR    where to find CASE by id (default ./vectors/core, else $LACS_VECTORS)\n"
    "  --plot FILE.png  with --impl or --outputs: draw log10(ratio) against t (needs python3-matplotlib)\n"
    "  --timeout SECONDS  with --impl: a run longer than this fails (default 300)\n"
    "  --force          replace FILE.png if it is a regular file\n"
    "  --no-verify      do not verify CASE against its MANIFEST.json\n";

enum { TIME_BUCKETS = 10 };

/* The file behind CASE: CASE itself if it is a file, else DIR/<op>/<id>.safetensors. */
static int resolve_case(const char *name, const char *vectors, char *path, size_t size)
{
    struct stat st;
    if (stat(name, &st) == 0 && S_ISREG(st.st_mode)) {
        snprintf(path, size, "%s", name);
        return 0;
    }
    if (strchr(name, '/'))
        return cli_error("explain: '%s' does not exist", name);
    const char *tier = strstr(name, "-fp32-");
    if (!tier)
        tier = strstr(name, "-bf16-");
    if (!tier)
        return cli_error("explain: '%s' is neither a file nor a case id <op>-<fp32|bf16>-<name>", name);
    char op[64];
    snprintf(op, sizeof op, "%.*s", (int)(tier - name), name);
    if (!lacs_op_find(op))
        return cli_error("explain: '%s' names no known op ('%s')", name, op);
    const char *dir = cli_vectors_dir(vectors);
    if (!dir)
        return CLI_EXIT_USAGE;
    if ((size_t)snprintf(path, size, "%s/%s/%s.safetensors", dir, op, name) >= size)
        return cli_error("explain: the path of '%s' is too long", name);
    if (access(path, F_OK) != 0)
        return cli_error("explain: no case '%s' under %s (%s does not exist)", name, dir, path);
    return 0;
}

static void print_shape(const int64_t *shape, int ndim)
{
    printf("[");
    for (int d = 0; d < ndim; d++)
        printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    printf("]");
}

static void print_case(const lacs_vector *v)
{
    const lacs_op_info *info = lacs_op_find(v->op);
    printf("case       %s\n", cli_text(v->id));
    printf("file       %s\n", cli_text(v->path));
    if (info)
        printf("op         %s (%s), reference %s\n", v->op, info->labels, info->reference);
    else
        printf("op         %s (not an op of this build)\n", v->op);
    printf("tier       %s\n", v->tier);
    printf("flags      %s\n", v->flags[0] ? cli_text(v->flags) : "(none)");
    printf("reason     %s\n", cli_text(v->reason ? v->reason : ""));
    if (lacs_vector_is_strict(v))
        printf("level      strict: %s\n", cli_text(v->level_reason ? v->level_reason : ""));
    printf("params    ");
    for (int i = 0; i < v->n_params; i++)
        printf("%s %s = %.17g", i ? "," : "", v->params[i].name, v->params[i].value);
    printf("%s\n", v->n_params ? "" : " (none)");

    const char *dim_names[] = {"B", "T", "H", "HV", "K", "V", "N", "rows", "dim"};
    const int64_t dims[] = {v->B, v->T, v->H, v->HV, v->K, v->V, v->N, v->rows, v->dim};
    printf("dims      ");
    int shown = 0;
    for (int i = 0; i < 9; i++)
        if (dims[i] != 0)
            printf("%s %s = %lld", shown++ ? "," : "", dim_names[i], (long long)dims[i]);
    printf("\n");
    for (int i = 0; i < v->n_inputs; i++) {
        printf("%s %-8s %s ", i ? "          " : "inputs    ", v->inputs[i].name,
               lacs_dtype_name(v->inputs[i].dtype));
        print_shape(v->inputs[i].shape, v->inputs[i].ndim);
        printf("\n");
    }

    const lacs_tolerance *tol = &v->tolerance;
    if (strcmp(tol->model, "provisional-normwise/1") == 0)
        printf("tolerance  %s: normwise relative error per block <= %.3g\n", tol->model, tol->provisional);
    else
        printf("tolerance  %s, unit roundoff u = %.3g, underflow eta = %.3g\n"
               "           (x = the output, y = the golden, g = its gauge)\n"
               "           a block of n elements passes if ||x - y|| <= %.4g (u L ||g|| + eta sqrt(n)),\n"
               "           an element if |x - y| <= %.4g (u L (g + floor) + eta),\n"
               "           floor = %.3g x the RMS of g over its block; L per output below (SPEC.md 11)\n",
               tol->model, tol->unit_roundoff, tol->underflow, tol->normwise_factor, tol->elementwise_factor,
               tol->floor_fraction);

    for (int i = 0; i < v->n_outputs; i++) {
        const lacs_tensor *g = &v->expected[i];
        const double *values = g->data;
        int64_t count = lacs_tensor_count(g), nonfinite = 0;
        double sum_squares = 0, largest = 0;
        for (int64_t j = 0; j < count; j++) {
            if (!isfinite(values[j])) {
                nonfinite++;
                continue;
            }
            sum_squares += values[j] * values[j];
            largest = fabs(values[j]) > largest ? fabs(values[j]) : largest;
        }
        printf("%s %-8s ", i ? "          " : "goldens   ", g->name);
        print_shape(g->shape, g->ndim);
        printf(": norm %.6g, largest |value| %.6g", sqrt(sum_squares), largest);
        if (v->gauge[i])
            printf(", L = %.4g", v->length_factor[i]);
        if (nonfinite)
            printf(", %lld non-finite", (long long)nonfinite);
        printf("\n");
    }
}

/* Whether t (counted from 0) is the first token of a chunk of 16, 32 or 64,
 * in words. */
static void describe_chunk_position(int64_t t, char *buf, size_t size)
{
    long long tt = (long long)t;
    if (t == 0)
        snprintf(buf, size, "t = 0 is the first token: every chunk starts there");
    else if (t % 64 == 0)
        snprintf(buf, size, "t = %lld is the first token of a chunk of 64 (and of 32, 16): %lld tokens came before it",
                 tt, tt);
    else if (t % 32 == 0)
        snprintf(buf, size, "t = %lld is the first token of a chunk of 32 (and of 16), not of 64", tt);
    else if (t % 16 == 0)
        snprintf(buf, size, "t = %lld is the first token of a chunk of 16, not of 32 or 64", tt);
    else
        snprintf(buf, size,
                 "t = %lld is not the first token of a chunk of 16, 32 or 64 (it is token %lld of its chunk of 64, "
                 "counting from 0)",
                 tt, tt % 64);
}

/* The worst element at time step t of output o: the check run on a copy of
 * the outputs in which every other element equals its golden, so that only
 * step t can be wrong (the tolerance logic stays in lacs_check_outputs). */
static int worst_at_step(const lacs_vector *v, int o, const lacs_tensor *actual, int64_t t, lacs_output_check *worst)
{
    lacs_tensor masked[LACS_CHECK_MAX_OUTPUTS];
    int rc = LACS_ERR_MEMORY;
    int n = v->n_outputs;
    for (int i = 0; i < n; i++)
        masked[i].data = NULL;
    for (int i = 0; i < n; i++) {
        int64_t count = lacs_tensor_count(&v->expected[i]);
        double *values = malloc((size_t)(count + 1) * sizeof *values);
        if (!values)
            goto done;
        memcpy(values, v->expected[i].data, (size_t)count * sizeof *values);
        masked[i] = (lacs_tensor){.name = v->expected[i].name, .dtype = LACS_F64, .ndim = v->expected[i].ndim,
                                  .shape = v->expected[i].shape, .data = values};
    }
    const lacs_layout *layout = &v->layout[o];
    double *values = masked[o].data;
    int64_t row = layout->heads * layout->width; /* elements per (batch, t) */
    for (int64_t b = 0; b < layout->outer; b++) {
        int64_t start = (b * layout->T + t) * row;
        /* F32 from a case process, F64 from --outputs (widened by cli_gather_outputs) */
        if (actual[o].dtype == LACS_F64)
            memcpy(values + start, (const double *)actual[o].data + start, (size_t)row * sizeof *values);
        else
            lacs_values_to_double(LACS_F32, (const float *)actual[o].data + start, row, values + start);
    }
    lacs_check_result result;
    rc = lacs_check_outputs(v, masked, n, &result);
    if (rc == LACS_OK)
        *worst = result.outputs[o];
done:
    for (int i = 0; i < n; i++)
        free(masked[i].data);
    return rc;
}

/* log10 of the worst ratio over each tenth of t, as a table with a bar. */
static void print_time_table(const double *ratio_t, int64_t T)
{
    int64_t per_bucket = (T + TIME_BUCKETS - 1) / TIME_BUCKETS;
    if (per_bucket < 1)
        per_bucket = 1;
    printf("      error over time (worst ratio per slice of t; log10; the limit is 0, marked |):\n");
    for (int64_t start = 0; start < T; start += per_bucket) {
        int64_t end = start + per_bucket < T ? start + per_bucket : T;
        double worst = 0;
        for (int64_t t = start; t < end; t++)
            if (isnan(ratio_t[t]) || ratio_t[t] > worst)
                worst = isnan(ratio_t[t]) ? INFINITY : ratio_t[t];
        char range[48], ratio[32], logarithm[32];
        snprintf(range, sizeof range, "t %lld..%lld", (long long)start, (long long)(end - 1));
        cli_format_ratio(worst, ratio, sizeof ratio);
        /* The bar: 2 characters per decade from 1e-8; the limit (1e0) at column 16. */
        double decades = worst > 0 ? log10(worst) : -INFINITY;
        int length = isinf(decades) ? (decades > 0 ? 32 : 0) : (int)lround(2 * (decades + 8));
        length = length < 0 ? 0 : length > 32 ? 32 : length;
        char bar[40];
        int k = 0;
        for (; k < 32 && (k < length || k <= 16); k++)
            bar[k] = k == 16 ? '|' : k < length ? (k < 16 ? '#' : '!') : ' ';
        bar[k] = '\0';
        if (worst > 0 && isfinite(decades))
            snprintf(logarithm, sizeof logarithm, "%+.2f", decades);
        else
            snprintf(logarithm, sizeof logarithm, "%s", worst > 0 ? "+inf" : "-inf");
        printf("        %-18s %-9s %6s  %s\n", range, ratio, logarithm, bar);
    }
}

/* "st", "nd", "rd" or "th", for the n-th token. */
static const char *ordinal_suffix(int64_t n)
{
    if (n % 100 >= 11 && n % 100 <= 13)
        return "th";
    return n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
}

/* The sequence number and position in it of token t of a varlen batch. */
static int64_t position_in_sequence(const lacs_layout *layout, int64_t t, int64_t *sequence)
{
    *sequence = 0;
    if (!layout->cu_seqlens)
        return t;
    for (int64_t n = 0; n < layout->n_seqs; n++)
        if (t >= layout->cu_seqlens[n] && t < layout->cu_seqlens[n + 1]) {
            *sequence = n;
            return t - layout->cu_seqlens[n];
        }
    return t;
}

/* fla's chunk size: the chunk boundaries explain names; the tokens over the
 * limit as at most EXPLAIN_RUNS runs, bridging gaps of up to EXPLAIN_GAP
 * tokens (SPEC.md 11.8). */
enum { EXPLAIN_CHUNK = 64, EXPLAIN_RUNS = 4, EXPLAIN_GAP = 4 };

/* What explain knows of a case beyond an output's layout: whether its
 * gradients are computed from the last token back (the VJP of an op on
 * sequences), and its state-carry split (-1: none). */
typedef struct {
    int backward;
    int64_t split;
} explain_case;

static explain_case explain_case_of(const lacs_vector *v)
{
    explain_case c = {.backward = 0, .split = -1};
    const size_t n = strlen(v->op);
    c.backward = n > 4 && strcmp(v->op + n - 4, "_vjp") == 0;
    for (int i = 0; i < v->n_params; i++)
        if (strcmp(v->params[i].name, "split") == 0)
            c.split = (int64_t)v->params[i].value;
    return c;
}

/* Where token t of output o sits (SPEC.md 11.8): its place in the run of
 * tokens one call of the implementation sees (its sequence; on a state carry
 * the part before or after the split), its chunk of 64 counted from there,
 * and whether it is at a chunk boundary (the first or the last token of a
 * chunk that has a neighbour) or at the state-carry split. */
static void describe_token_place(const lacs_vector *v, int o, const explain_case *c, int64_t t, char *buf, size_t size)
{
    const lacs_layout *layout = &v->layout[o];
    int64_t sequence, position = position_in_sequence(layout, t, &sequence);
    int64_t length = layout->cu_seqlens ? layout->cu_seqlens[sequence + 1] - layout->cu_seqlens[sequence] : layout->T;
    char run[160] = "";
    const char *what = "sequence";
    if (layout->cu_seqlens) {
        snprintf(run, sizeof run, "token %lld of sequence %lld (t = %lld..%lld), ", (long long)position,
                 (long long)sequence, (long long)layout->cu_seqlens[sequence],
                 (long long)layout->cu_seqlens[sequence + 1] - 1);
    } else if (c->split > 0 && c->split < layout->T) {
        what = "part";
        if (t < c->split) {
            length = c->split;
            snprintf(run, sizeof run, "in the state carry's first part (t = 0..%lld), ", (long long)c->split - 1);
        } else {
            position = t - c->split;
            length = layout->T - c->split;
            snprintf(run, sizeof run, "token %lld of the state carry's second part (t = %lld..%lld), ",
                     (long long)position, (long long)c->split, (long long)layout->T - 1);
        }
    }
    const int64_t chunk = position / EXPLAIN_CHUNK, in_chunk = position % EXPLAIN_CHUNK;
    const int64_t chunk_first = t - in_chunk;
    const int64_t chunk_last = chunk_first + (length - chunk * EXPLAIN_CHUNK < EXPLAIN_CHUNK
                                              ? length - chunk * EXPLAIN_CHUNK - 1 : EXPLAIN_CHUNK - 1);
    char boundary[256];
    if (c->split > 0 && !layout->cu_seqlens && (t == c->split - 1 || t == c->split))
        snprintf(boundary, sizeof boundary, "at the state-carry split (split = %lld), the %s token %s it",
                 (long long)c->split, t < c->split ? "last" : "first", t < c->split ? "before" : "after");
    else if (in_chunk == EXPLAIN_CHUNK - 1 && position + 1 < length)
        snprintf(boundary, sizeof boundary, "at a chunk boundary, the last token of its chunk (%s)",
                 c->backward ? "where a chunked backward takes the state's cotangent from the next chunk"
                             : "after which a chunked forward hands its state to the next chunk");
    else if (in_chunk == 0 && position > 0)
        snprintf(boundary, sizeof boundary, "at a chunk boundary, the first token of its chunk (%s)",
                 c->backward ? "whose cotangent a chunked backward hands to the chunk before"
                             : "where a chunked forward starts from the state of the chunk before");
    else if (position == length - 1)
        snprintf(boundary, sizeof boundary, "not at a chunk boundary: the last token of its %s%s", what,
                 c->backward ? " (where the backward starts, from dht)" : "");
    else if (position == 0)
        snprintf(boundary, sizeof boundary, "not at a chunk boundary: the first token of its %s%s", what,
                 c->backward ? "" : " (where the forward starts, from h0)");
    else
        snprintf(boundary, sizeof boundary, "not at a chunk boundary");
    snprintf(buf, size, "%stoken %lld of %schunk %lld of %d (t = %lld..%lld): %s", run, (long long)in_chunk,
             run[0] ? "its " : "", (long long)chunk, EXPLAIN_CHUNK, (long long)chunk_first, (long long)chunk_last,
             boundary);
}

/* The worst elementwise ratio of output o per time step and head,
 * ratio_th[t * heads + h]: lacs_check_error_over_time on a copy of the
 * outputs in which only head h differs from the goldens (an element's bound
 * depends on the goldens and gauges alone). */
static int error_by_step_and_head(const lacs_vector *v, int o, const lacs_tensor *actual, double *ratio_th)
{
    const lacs_layout *layout = &v->layout[o];
    const int64_t count = lacs_tensor_count(&v->expected[o]), heads = layout->heads;
    double *masked = malloc((size_t)(count + 1) * sizeof *masked), *wide = malloc((size_t)(count + 1) * sizeof *wide);
    double *ratio_t = malloc((size_t)(layout->T + 1) * sizeof *ratio_t);
    int rc = LACS_ERR_MEMORY;
    if (!masked || !wide || !ratio_t)
        goto done;
    if (actual[o].dtype == LACS_F64)
        memcpy(wide, actual[o].data, (size_t)count * sizeof *wide);
    else
        lacs_values_to_double(LACS_F32, actual[o].data, count, wide);
    lacs_tensor outputs[LACS_CHECK_MAX_OUTPUTS];
    for (int i = 0; i < v->n_outputs; i++)
        outputs[i] = actual[i];
    outputs[o] = (lacs_tensor){.name = v->expected[o].name, .dtype = LACS_F64, .ndim = v->expected[o].ndim,
                               .shape = v->expected[o].shape, .data = masked};
    for (int64_t h = 0; h < heads; h++) {
        memcpy(masked, v->expected[o].data, (size_t)count * sizeof *masked);
        for (int64_t e = h * layout->width; e < count; e += heads * layout->width)
            memcpy(masked + e, wide + e, (size_t)layout->width * sizeof *masked);
        if ((rc = lacs_check_error_over_time(v, o, outputs, ratio_t)) != LACS_OK)
            goto done;
        for (int64_t t = 0; t < layout->T; t++)
            ratio_th[t * heads + h] = ratio_t[t];
    }
    rc = LACS_OK;
done:
    free(masked);
    free(wide);
    free(ratio_t);
    return rc;
}

static int over_limit(double ratio) { return !(ratio <= 1); } /* NaN too */

/* Where output o goes wrong, for the closing summary: filled by
 * explain_over_time when some element of it passes its limit. */
typedef struct {
    int found;
    char text[2048];
} explain_where;

/* The error of output o over time: the heads and tokens over the limit, the
 * token where the error starts (the first for a forward, the last for a
 * backward: SPEC.md 11.8), the worst element there, where that token sits,
 * the table. Fills ratio_t (T values) and *where. */
static int explain_over_time(const lacs_vector *v, int o, const lacs_tensor *actual, double *ratio_t,
                             explain_where *where_out)
{
    const lacs_layout *layout = &v->layout[o];
    const explain_case c = explain_case_of(v);
    const int64_t T = layout->T, heads = layout->heads;
    double *ratio_th = malloc((size_t)(T * heads + 1) * sizeof *ratio_th);
    if (!ratio_th || lacs_check_error_over_time(v, o, actual, ratio_t) != LACS_OK ||
        error_by_step_and_head(v, o, actual, ratio_th) != LACS_OK) {
        printf("      (no error over time: %s)\n", ratio_th ? lacs_last_error() : "out of memory");
        free(ratio_th);
        return -1;
    }
    int64_t first = -1, last = -1, worst_t = 0, tokens_over = 0;
    for (int64_t t = 0; t < T; t++) {
        if (over_limit(ratio_t[t])) {
            first = first < 0 ? t : first;
            last = t;
            tokens_over++;
        }
        /* the worst step: the first NaN, else the largest ratio */
        if (!isnan(ratio_t[worst_t]) && (isnan(ratio_t[t]) || ratio_t[t] > ratio_t[worst_t]))
            worst_t = t;
    }
    char ratio[32];
    if (first < 0) {
        cli_format_ratio(T > 0 ? ratio_t[worst_t] : 0, ratio, sizeof ratio);
        printf("      over time: the limit is never passed (worst ratio %s, at t = %lld)\n", ratio,
               (long long)worst_t);
        print_time_table(ratio_t, T);
        free(ratio_th);
        return 0;
    }
    /* the heads in which some element passes its limit, and the tokens */
    char head_list[256] = "";
    int64_t heads_over = 0;
    for (int64_t h = 0; h < heads; h++) {
        int over = 0;
        for (int64_t t = 0; t < T && !over; t++)
            over = over_limit(ratio_th[t * heads + h]);
        if (over) {
            size_t used = strlen(head_list);
            if (heads_over < 16)
                snprintf(head_list + used, sizeof head_list - used, "%s%lld", heads_over ? ", " : "", (long long)h);
            else if (heads_over == 16)
                snprintf(head_list + used, sizeof head_list - used, ", ...");
            heads_over++;
        }
    }
    /* the tokens: listed when few, else as runs (gaps of up to EXPLAIN_GAP tokens bridged), at most
     * EXPLAIN_RUNS of them, else the whole range */
    char tokens[256];
    int used = snprintf(tokens, sizeof tokens, "t = ");
    if (tokens_over <= 6) {
        int64_t listed = 0;
        for (int64_t t = first; t <= last && used > 0 && (size_t)used < sizeof tokens; t++)
            if (over_limit(ratio_t[t]))
                used += snprintf(tokens + used, sizeof tokens - (size_t)used, "%s%lld", listed++ ? ", " : "",
                                 (long long)t);
    } else {
        int64_t runs = 0, run_start = first, previous = first;
        for (int64_t t = first + 1; t <= last + 1; t++) {
            if (t <= last && !over_limit(ratio_t[t]))
                continue;
            if (t <= last && t - previous <= EXPLAIN_GAP + 1) {
                previous = t;
                continue;
            }
            if (++runs <= EXPLAIN_RUNS && used > 0 && (size_t)used < sizeof tokens)
                used += snprintf(tokens + used, sizeof tokens - (size_t)used, "%s%lld..%lld", runs > 1 ? ", " : "",
                                 (long long)run_start, (long long)previous);
            run_start = previous = t;
        }
        if (runs > EXPLAIN_RUNS)
            snprintf(tokens, sizeof tokens, "t = %lld..%lld", (long long)first, (long long)last);
    }
    printf("      over the limit: %lld of %lld tokens (%s), in %s %s (of %lld)\n", (long long)tokens_over,
           (long long)T, tokens, heads_over == 1 ? "head" : "heads", head_list, (long long)heads);
    const int64_t start = c.backward ? last : first;
    cli_format_ratio(ratio_t[start], ratio, sizeof ratio);
    if (c.backward)
        printf("      over time: last passes the limit at t = %lld, the %lld%s token (ratio %s); in a backward the\n"
               "      cotangents flow from later tokens to earlier ones, so an error spreads backwards: it starts there\n",
               (long long)start, (long long)start + 1, ordinal_suffix(start + 1), ratio);
    else
        printf("      over time: first passes the limit at t = %lld, the %lld%s token (ratio %s)\n", (long long)start,
               (long long)start + 1, ordinal_suffix(start + 1), ratio);
    lacs_output_check worst = {.worst_element = -1};
    char element[160] = "";
    if (worst_at_step(v, o, actual, start, &worst) == LACS_OK && worst.worst_element >= 0) {
        lacs_describe_element(v, o, worst.worst_element, element, sizeof element);
        printf("      worst there: %s: expected %.10g, got %.10g, allowed error %.3g\n", element,
               worst.expected_value, worst.actual_value, worst.allowed_error);
    }
    char place[512];
    describe_token_place(v, o, &c, start, place, sizeof place);
    if (!c.backward) {
        /* the forward's first token over the limit, as chunks of 16, 32 and 64 see it */
        int64_t sequence, position = position_in_sequence(layout, first, &sequence);
        char chunk[256];
        describe_chunk_position(position, chunk, sizeof chunk);
        if (layout->cu_seqlens)
            printf("      token %lld of the packed batch is t = %lld of sequence %lld: %s\n", (long long)first,
                   (long long)position, (long long)sequence, chunk);
        else
            printf("      %s\n", chunk);
    }
    printf("      t = %lld is %s\n", (long long)start, place);
    where_out->found = 1;
    snprintf(where_out->text, sizeof where_out->text,
             "%.31s: %s %.255s (of %lld), %lld of %lld tokens over the limit (%.255s), from t = %lld (%s): %.511s%s%.159s",
             v->expected[o].name, heads_over == 1 ? "head" : "heads", head_list, (long long)heads,
             (long long)tokens_over, (long long)T, tokens, (long long)start, c.backward ? "the last, where the backward's error starts" : "the first", place,
             element[0] ? "; worst there " : "", element);
    print_time_table(ratio_t, T);
    free(ratio_th);
    return 0;
}

/* checker/plot_error.py: $LACS_HOME/checker, else next to the executable's ../checker. */
static int find_plot_script(const char *argv0, char *path, size_t size)
{
    const char *home = getenv("LACS_HOME");
    if (home && *home) {
        snprintf(path, size, "%s/checker/plot_error.py", home);
    } else {
        char executable[4096];
        if (strchr(argv0, '/')) {
            snprintf(executable, sizeof executable, "%s", argv0);
        } else {
            ssize_t n = readlink("/proc/self/exe", executable, sizeof executable - 1);
            if (n < 0)
                return cli_error("cannot find checker/plot_error.py: set LACS_HOME to the lacs source tree");
            executable[n] = '\0';
        }
        snprintf(path, size, "%s/../checker/plot_error.py", dirname(executable));
    }
    if (access(path, R_OK) != 0)
        return cli_error("cannot find %s: set LACS_HOME to the lacs source tree", path);
    return 0;
}

/* Writes `t,ratio` lines to a private temporary directory, runs the plot
 * script on them there, and writes the PNG it draws to `png` through
 * lacs_output_file_write (the rules of every file lacs writes). */
static int plot(const char *argv0, const lacs_vector *v, const char *impl, const char *output_name,
                const double *ratio_t, int64_t T, const char *png, unsigned png_flags)
{
    char script[4096];
    if (find_plot_script(argv0, script, sizeof script) != 0)
        return CLI_EXIT_USAGE;
    const char *tmpdir = getenv("TMPDIR");
    char private_dir[4096], data[4200], drawn[4200];
    snprintf(private_dir, sizeof private_dir, "%s/lacs-explain-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(private_dir))
        return cli_error("cannot create a temporary directory for the plot: %s", strerror(errno));
    snprintf(data, sizeof data, "%s/error.csv", private_dir);
    snprintf(drawn, sizeof drawn, "%s/plot.png", private_dir);
    FILE *f = fopen(data, "w");
    if (!f) {
        rmdir(private_dir);
        return cli_error("cannot write the plot data: %s", strerror(errno));
    }
    fprintf(f, "# case %s\n# output %s\n# impl %s\n# tier %s\nt,ratio\n", cli_text(v->id), output_name,
            cli_text(impl), v->tier);
    for (int64_t t = 0; t < T; t++)
        fprintf(f, "%lld,%.17g\n", (long long)t, ratio_t[t]);
    int rc = 0;
    if (fclose(f) != 0)
        rc = cli_error("cannot write the plot data %s: %s", data, strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = rc == 0 ? fork() : -1;
    if (rc == 0 && pid < 0)
        rc = cli_error("cannot fork to run %s: %s", script, strerror(errno));
    if (rc == 0 && pid == 0) {
        char *args[] = {"/usr/bin/python3", script, data, drawn, NULL};
        execv(args[0], args);
        fprintf(stderr, "lacs: cannot run /usr/bin/python3: %s\n", strerror(errno));
        _exit(CLI_EXIT_USAGE);
    }
    if (rc == 0) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (WIFEXITED(status) && WEXITSTATUS(status) == CLI_EXIT_USAGE)
            rc = CLI_EXIT_USAGE; /* the script said why, in one line */
        else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = cli_error("%s failed (%s %d) drawing %s", script, WIFEXITED(status) ? "exit status" : "signal",
                           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), png);
    }
    if (rc == 0) {
        FILE *in = fopen(drawn, "rb");
        unsigned char *bytes = NULL;
        size_t size = 0;
        if (in) {
            fseek(in, 0, SEEK_END);
            const long length = ftell(in);
            fseek(in, 0, SEEK_SET);
            bytes = length > 0 ? malloc((size_t)length) : NULL;
            size = bytes && fread(bytes, 1, (size_t)length, in) == (size_t)length ? (size_t)length : 0;
            fclose(in);
        }
        if (size == 0)
            rc = cli_error("the plot script drew nothing at %s", drawn);
        else if (lacs_output_file_write(png, bytes, size, NULL, png_flags) != LACS_OK)
            rc = cli_error("%s", lacs_last_error());
        else
            printf("plot       %s\n", cli_text(png));
        free(bytes);
    }
    remove(data);
    remove(drawn);
    rmdir(private_dir);
    return rc;
}

/* Explains r (the comparison of `actual` with v's goldens): each output's
 * ratio, the error over time of the outputs over t, the result line, and the
 * plot. `who` names where the outputs came from. Returns the exit status. */
static int explain_result(const lacs_vector *v, cli_result *r, const lacs_tensor *actual, const char *who_label,
                          const char *who, const char *png, unsigned png_flags, const char *argv0)
{
    printf("\n%-10s %s\n", who_label, cli_text(who));
    int status = r->status == CLI_FAIL ? CLI_EXIT_FAILED : 0;
    double *ratio_t = NULL;
    int plotted_output = -1;
    explain_where where_of[LACS_CHECK_MAX_OUTPUTS] = {{0}};
    for (int i = 0; i < r->n_outputs; i++) {
        char ratio[32], where[1024];
        cli_format_ratio(r->outputs[i].ratio, ratio, sizeof ratio);
        cli_describe_output(r, i, where, sizeof where);
        printf("output     %s: ratio %s; worst %s\n", r->outputs[i].name, ratio, where);
        if (v->layout[i].kind != LACS_LAYOUT_SEQUENCE || v->layout[i].T < 1)
            continue;
        double *over_time = malloc((size_t)v->layout[i].T * sizeof *over_time);
        if (!over_time) {
            status = cli_error("out of memory");
            break;
        }
        /* the plot: the output over time with the worst ratio (the first one if none fails) */
        if (explain_over_time(v, i, actual, over_time, &where_of[i]) == 0 &&
            (plotted_output < 0 || r->outputs[i].ratio > r->outputs[plotted_output].ratio)) {
            free(ratio_t);
            ratio_t = over_time;
            plotted_output = i;
        } else {
            free(over_time);
        }
    }
    /* The summary (SPEC.md 11.8): each output over the limit, where it goes wrong. */
    int summarised = 0;
    for (int i = 0; i < r->n_outputs; i++) {
        if (!over_limit(r->outputs[i].ratio))
            continue;
        printf("%s ", summarised++ ? "          " : "\nwhere     ");
        if (where_of[i].found)
            printf("%s\n", where_of[i].text);
        else if (v->layout[i].kind == LACS_LAYOUT_SEQUENCE && r->outputs[i].worst_block >= 0)
            printf("%s: no single element passes its limit, a block's normwise error does (its worst element %s)\n",
                   r->outputs[i].name, r->where[i]);
        else
            printf("%s: worst element %s\n", r->outputs[i].name, r->where[i]);
    }
    printf("\n");
    cli_print_result(stdout, r, 0);
    if (png && status != CLI_EXIT_USAGE) {
        int rc;
        if (r->n_outputs == 0)
            rc = cli_error("explain: nothing to plot: %s", r->message ? r->message : "the implementation gave no output");
        else if (plotted_output < 0)
            rc = cli_error("explain: nothing to plot: %s has no output over time (t)", v->id);
        else
            rc = plot(argv0, v, who, r->outputs[plotted_output].name, ratio_t, v->layout[plotted_output].T, png,
                      png_flags);
        if (rc != 0)
            status = rc;
    }
    free(ratio_t);
    return status;
}

/* Runs impl on v and explains its outputs. Returns the exit status. */
static int explain_run(const lacs_vector *v, cli_impl *impl, const char *png, unsigned png_flags, double timeout,
                       const char *argv0)
{
    cli_task task = {.impl = impl, .op = v->op, .inputs = v->inputs, .n_inputs = v->n_inputs, .params = v->params,
                     .n_params = v->n_params, .outputs = v->expected, .n_outputs = v->n_outputs, .vector = v};
    cli_child child;
    if (cli_child_start(&child, &task, timeout) == 0)
        cli_child_wait(&child);
    cli_child_unblock();
    cli_result r;
    cli_result_init(&r, v->id, v->op, v->tier);
    cli_result_from_child(&r, v, &child);
    int status = explain_result(v, &r, child.outputs, "impl", impl->spec, png, png_flags, argv0);
    cli_result_free(&r);
    cli_child_free(&child);
    return status;
}

/* Explains the outputs of a file (--outputs). Returns the exit status. */
static int explain_file(const lacs_vector *v, const char *path, const char *of, const char *png, unsigned png_flags,
                        const char *argv0)
{
    lacs_safetensors_file candidate;
    if (lacs_safetensors_read(path, &candidate) != LACS_OK)
        return cli_error("%s", lacs_last_error());
    cli_result r;
    cli_result_init(&r, v->id, v->op, v->tier);
    lacs_tensor actual[LACS_CHECK_MAX_OUTPUTS] = {{0}};
    if (cli_gather_outputs(v, &candidate, path, actual, &r) == 0)
        cli_result_evaluate(&r, v, actual, v->n_outputs);
    int status = explain_result(v, &r, actual, of ? "impl" : "outputs", of ? of : path, png, png_flags, argv0);
    for (int i = 0; i < v->n_outputs; i++)
        free(actual[i].data);
    cli_result_free(&r);
    lacs_safetensors_free(&candidate);
    return status;
}

int cli_explain(int argc, char **argv, const char *argv0)
{
    const char *name = NULL, *impl_spec = NULL, *vectors = NULL, *png = NULL, *outputs = NULL, *outputs_of = NULL;
    int force = 0, no_verify = 0;
    double timeout = 300;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int got;
        if (cli_is_help(argv[i])) {
            fputs(explain_usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--force") == 0) {
            force = 1;
        } else if (strcmp(argv[i], "--no-verify") == 0) {
            no_verify = 1;
        } else if ((got = cli_option_value(argc, argv, &i, "--timeout", &value)) != 0) {
            if (got < 0 || cli_parse_timeout(value, &timeout) != 0)
                return CLI_EXIT_USAGE;
        } else if ((got = cli_option_value(argc, argv, &i, "--impl", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            impl_spec = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--vectors", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            vectors = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--outputs", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            outputs = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--outputs-of", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            outputs_of = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--plot", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            png = value;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return cli_error("explain: unknown option '%s' (see lacs explain --help)", argv[i]);
        } else if (!name) {
            name = argv[i];
        } else {
            return cli_error("explain: one case at a time ('%s' and '%s')", name, argv[i]);
        }
    }
    if (!name)
        return cli_error("explain: which case? (lacs explain CASE; lacs list shows them)");
    if (impl_spec && outputs)
        return cli_error("explain: --impl runs an implementation, --outputs reads its outputs: give one of them");
    if (outputs_of && !outputs)
        return cli_error("explain: --outputs-of names the source of --outputs FILE: give --outputs");
    if (png && !impl_spec && !outputs)
        return cli_error("explain: --plot draws an implementation's error: give --impl IMPL or --outputs FILE");
    if (impl_spec && strncmp(impl_spec, "python:", 7) == 0)
        return cli_exec_python_harness(argc, argv);
    const unsigned png_flags = (force ? LACS_OUTPUT_REPLACE : 0u) | LACS_OUTPUT_NOT_GOLDEN;
    if (png && lacs_output_file_check(png, NULL, png_flags) != LACS_OK) {
        if (!force && strstr(lacs_last_error(), "exists"))
            return cli_error("'%s' exists: use --force to replace it", png);
        return cli_error("%s", lacs_last_error());
    }

    char path[4096];
    if (resolve_case(name, vectors, path, sizeof path) != 0)
        return CLI_EXIT_USAGE;
    char sha256[65] = "", manifest[4096];
    if (!no_verify && lacs_cases_manifest_hash(path, sha256, manifest, sizeof manifest) != LACS_OK)
        return cli_error("%s", lacs_last_error());
    cli_impl impl;
    if (impl_spec && cli_impl_open(impl_spec, &impl, timeout) != 0)
        return CLI_EXIT_USAGE;
    static lacs_vector v;
    if (lacs_vector_load_verified(path, no_verify ? NULL : sha256, &v) != LACS_OK) {
        lacs_vector_free(&v);
        if (impl_spec)
            cli_impl_close(&impl);
        return cli_error("%s", lacs_last_error());
    }
    print_case(&v);
    int status = 0;
    if (impl_spec) {
        status = explain_run(&v, &impl, png, png_flags, timeout, argv0);
        cli_impl_close(&impl);
    } else if (outputs) {
        status = explain_file(&v, outputs, outputs_of, png, png_flags, argv0);
    }
    lacs_vector_free(&v);
    return status;
}
