/* lacs CLI: one case's result, and how it is printed.
 *
 * The tolerance logic itself lives in one place, lacs_check_outputs
 * (tolerance/check.c, SPEC.md 11): every comparison is a ratio error / allowed,
 * 1.0 the limit. Here a case PASSes if its worst ratio is <= 1; a NaN ratio,
 * a missing or misshapen output, a crash, a timeout or an error code FAIL it;
 * LACS_UNSUPPORTED SKIPs it.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lacs/ops.h"

void cli_result_init(cli_result *r, const char *id, const char *op, const char *tier)
{
    memset(r, 0, sizeof *r);
    /* what came from file names and metadata, printable once and for all */
    lacs_printable(id, r->id, sizeof r->id);
    lacs_printable(op, r->op, sizeof r->op);
    lacs_printable(tier, r->tier, sizeof r->tier);
    r->status = CLI_FAIL;
    r->outcome = LACS_OUTCOME_FAIL;
    r->ratio = NAN;
}

void cli_result_free(cli_result *r)
{
    free(r->message);
    free(r->flags);
    r->message = NULL;
    r->flags = NULL;
    for (int i = 0; i < LACS_CHECK_MAX_OUTPUTS; i++) {
        free(r->over_time[i]);
        r->over_time[i] = NULL;
        r->over_time_steps[i] = 0;
    }
}

void cli_result_keep_over_time(cli_result *r, const lacs_vector *v, const lacs_tensor *actual)
{
    if (r->status != CLI_FAIL || r->n_outputs == 0 || !actual)
        return;
    for (int i = 0; i < v->n_outputs && i < LACS_CHECK_MAX_OUTPUTS; i++) {
        if (v->layout[i].kind != LACS_LAYOUT_SEQUENCE || v->layout[i].T < 1 || !actual[i].data)
            continue;
        double *ratios = malloc((size_t)v->layout[i].T * sizeof *ratios);
        if (ratios && lacs_check_error_over_time(v, i, actual, ratios) == LACS_OK) {
            r->over_time[i] = ratios;
            r->over_time_steps[i] = v->layout[i].T;
        } else {
            free(ratios);
        }
    }
}

/* The message, printable (it quotes file names, plugins' reasons). */
static void set_message(cli_result *r, const char *text)
{
    free(r->message);
    const size_t size = 4 * strlen(text) + 4;
    r->message = malloc(size);
    if (r->message)
        lacs_printable(text, r->message, size);
}

void cli_result_invalid(cli_result *r, const char *message)
{
    r->status = CLI_FAIL;
    r->outcome = LACS_OUTCOME_INVALID;
    set_message(r, message);
}

void cli_result_excluded(cli_result *r, const char *why)
{
    r->status = CLI_SKIP;
    r->outcome = LACS_OUTCOME_EXCLUDED;
    set_message(r, why);
}

void cli_result_fail(cli_result *r, const char *fmt, ...)
{
    char text[2048];
    va_list args;
    va_start(args, fmt);
    vsnprintf(text, sizeof text, fmt, args);
    va_end(args);
    r->status = CLI_FAIL;
    r->outcome = LACS_OUTCOME_FAIL;
    set_message(r, text);
}

void cli_result_evaluate(cli_result *r, const lacs_vector *v, const lacs_tensor *actual, int n_actual)
{
    lacs_check_result check;
    if (lacs_check_outputs(v, actual, n_actual, &check) != LACS_OK) {
        cli_result_fail(r, "%s", lacs_last_error());
        return;
    }
    r->n_outputs = check.n_outputs;
    r->ratio = check.ratio;
    for (int i = 0; i < check.n_outputs && i < LACS_CHECK_MAX_OUTPUTS; i++) {
        r->outputs[i] = check.outputs[i];
        int64_t count = i < v->n_outputs ? lacs_tensor_count(&v->expected[i]) : 0;
        if (check.outputs[i].worst_element >= 0 && check.outputs[i].worst_element < count)
            lacs_describe_element(v, i, check.outputs[i].worst_element, r->where[i], sizeof r->where[i]);
        else
            snprintf(r->where[i], sizeof r->where[i], "%s", check.outputs[i].name);
    }
    /* NaN compares false: a NaN ratio fails. */
    r->status = r->ratio <= 1 ? CLI_PASS : CLI_FAIL;
    r->outcome = r->status == CLI_PASS ? LACS_OUTCOME_PASS : LACS_OUTCOME_FAIL;
}

void cli_result_from_child(cli_result *r, const lacs_vector *v, const cli_child *c)
{
    r->seconds = c->seconds;
    switch (c->outcome) {
    case CLI_RAN:
        cli_result_evaluate(r, v, c->outputs, c->n_outputs);
        break;
    case CLI_UNSUPPORTED:
        r->status = CLI_SKIP;
        r->outcome = LACS_OUTCOME_SKIP;
        r->ratio = NAN;
        set_message(r, c->message);
        break;
    case CLI_BROKE:
        cli_result_fail(r, "%s", c->message);
        break;
    }
}

void cli_format_ratio(double ratio, char *buf, size_t size)
{
    if (isnan(ratio))
        snprintf(buf, size, "nan");
    else if (isinf(ratio))
        snprintf(buf, size, "inf");
    else
        snprintf(buf, size, "%.3g", ratio);
}

int cli_worst_output(const cli_result *r)
{
    int worst = -1;
    for (int i = 0; i < r->n_outputs; i++) {
        double ratio = r->outputs[i].ratio;
        if (worst < 0 || isnan(ratio) || (!isnan(r->outputs[worst].ratio) && ratio > r->outputs[worst].ratio))
            worst = i;
        if (isnan(ratio))
            break;
    }
    return worst;
}

void cli_describe_output(const cli_result *r, int o, char *buf, size_t size)
{
    const lacs_output_check *out = &r->outputs[o];
    if (out->worst_element < 0) {
        /* lacs_check_outputs names no element when every one equals its golden (or there is none) */
        snprintf(buf, size, "%s: no element differs from the golden", r->where[o]);
        return;
    }
    char normwise[32], elementwise[32];
    cli_format_ratio(out->normwise_ratio, normwise, sizeof normwise);
    cli_format_ratio(out->elementwise_ratio, elementwise, sizeof elementwise);
    int used = snprintf(buf, size, "%s: expected %.10g, got %.10g, allowed error %.3g; normwise ratio %s, "
                        "elementwise ratio %s",
                        r->where[o], out->expected_value, out->actual_value, out->allowed_error, normwise,
                        elementwise);
    if (out->nonfinite_mismatches > 0 && used > 0 && (size_t)used < size)
        snprintf(buf + used, size - (size_t)used,
                 "; %lld element(s) non-finite where the golden is not, or the reverse",
                 (long long)out->nonfinite_mismatches);
}

static const char *status_word(cli_status status)
{
    switch (status) {
    case CLI_PASS: return "PASS";
    case CLI_FAIL: return "FAIL";
    case CLI_SKIP: return "SKIP";
    }
    return "????";
}

/* The indented line under a FAIL: the worst output, the others over the limit, the message. */
static void print_failure_detail(FILE *out, const cli_result *r)
{
    int worst = cli_worst_output(r);
    if (worst < 0) {
        fprintf(out, "      %s\n", r->message ? r->message : "failed");
        return;
    }
    char text[1024];
    cli_describe_output(r, worst, text, sizeof text);
    fprintf(out, "      %s", text);
    int others = 0;
    for (int i = 0; i < r->n_outputs; i++) {
        if (i == worst || r->outputs[i].ratio <= 1)
            continue;
        char ratio[32];
        cli_format_ratio(r->outputs[i].ratio, ratio, sizeof ratio);
        fprintf(out, "%s%s (%s)", others++ ? ", " : "; also over the limit: ", r->outputs[i].name, ratio);
    }
    if (r->message)
        fprintf(out, "; %s", r->message);
    fputc('\n', out);
}

void cli_print_result(FILE *out, const cli_result *r, int verbose)
{
    char ratio[32];
    if (r->status == CLI_SKIP || (r->n_outputs == 0 && isnan(r->ratio)))
        snprintf(ratio, sizeof ratio, "-");
    else
        cli_format_ratio(r->ratio, ratio, sizeof ratio);
    fprintf(out, "%s  %-8s  %s\n", status_word(r->status), ratio, r->id);
    if (r->status == CLI_FAIL)
        print_failure_detail(out, r);
    if (!verbose)
        return;
    if (r->status == CLI_SKIP && r->message)
        fprintf(out, "      %s\n", r->message);
    for (int i = 0; i < r->n_outputs; i++) {
        char text[1024], output_ratio[32];
        cli_format_ratio(r->outputs[i].ratio, output_ratio, sizeof output_ratio);
        cli_describe_output(r, i, text, sizeof text);
        fprintf(out, "      %s ratio %s; worst %s\n", r->outputs[i].name, output_ratio, text);
    }
    fprintf(out, "      %.3f s\n", r->seconds);
}
