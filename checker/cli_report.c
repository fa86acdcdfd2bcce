/* lacs CLI: the reports of `lacs check` (--json, --junit, --html) and
 * `lacs compare --json`. --html is the JSON report, with each failure's
 * error over time, rendered by lacs_report_html (lacs/report.h).
 *
 * JSON: {"lacs_version", "impl", "vectors", "manifest" (null: unverified),
 * ["shard"], "summary": {"passed", "failed", "skipped"}, "verdict" (lacs/
 * verdict.h's object: level, citation, exit_status, groups per op and tier,
 * strict failures), "cases": [{"id", "op", "tier", "status", "outcome",
 * "strict", "ratio" (null when skipped or not finite), "ratio_text",
 * "outputs": [...], "message", "seconds"}]}. JSON has no NaN or infinity:
 * every non-finite number is null, its text in the neighbouring "..._text"
 * field where it matters. Every string is printable UTF-8 (lacs_printable).
 *
 * JUnit: one <testsuite name="lacs">, one <testcase> per case (classname =
 * op, name = id), <failure> for a FAIL, <skipped/> for a SKIP; the verdict's
 * citation as a property.
 *
 * Every report goes through cli_write_report, and so through
 * lacs_output_file_write (lacs/output.h): a temporary file of its own beside FILE,
 * renamed onto it, so that a report is whole or absent, concurrent runs do
 * not collide, nothing is written through a link, a FIFO or a device is
 * refused, and no golden vector is ever overwritten. They are outputs, so an
 * existing regular FILE is replaced.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lacs/report.h"
#include "lacs/types.h"

static const char *status_text(cli_status status)
{
    return status == CLI_PASS ? "PASS" : status == CLI_SKIP ? "SKIP" : "FAIL";
}

static void add_number_or_null(cJSON *object, const char *name, double value)
{
    if (isfinite(value))
        cJSON_AddNumberToObject(object, name, value);
    else
        cJSON_AddNullToObject(object, name);
}

static cJSON *output_json(const cli_result *r, int o)
{
    const lacs_output_check *out = &r->outputs[o];
    char ratio[32];
    cJSON *object = cJSON_CreateObject();
    cJSON_AddStringToObject(object, "name", out->name);
    add_number_or_null(object, "ratio", out->ratio);
    cli_format_ratio(out->ratio, ratio, sizeof ratio);
    cJSON_AddStringToObject(object, "ratio_text", ratio);
    add_number_or_null(object, "normwise_ratio", out->normwise_ratio);
    add_number_or_null(object, "elementwise_ratio", out->elementwise_ratio);
    add_number_or_null(object, "normwise_error", out->normwise_error);
    cJSON_AddNumberToObject(object, "worst_block", (double)out->worst_block);
    cJSON_AddNumberToObject(object, "worst_element", (double)out->worst_element);
    cJSON_AddStringToObject(object, "where", r->where[o]);
    add_number_or_null(object, "expected", out->expected_value);
    add_number_or_null(object, "actual", out->actual_value);
    add_number_or_null(object, "allowed", out->allowed_error);
    cJSON_AddNumberToObject(object, "nonfinite_mismatches", (double)out->nonfinite_mismatches);
    return object;
}

static const char *outcome_text(int outcome)
{
    static const char *const words[] = {"passed", "failed", "skipped", "not run (declared)", "vector rejected"};
    return outcome >= 0 && outcome <= LACS_OUTCOME_INVALID ? words[outcome] : "?";
}

static cJSON *case_json(const cli_result *r)
{
    cJSON *object = cJSON_CreateObject();
    cJSON_AddStringToObject(object, "id", r->id);
    cJSON_AddStringToObject(object, "op", r->op);
    cJSON_AddStringToObject(object, "tier", r->tier);
    cJSON_AddStringToObject(object, "status", status_text(r->status));
    cJSON_AddStringToObject(object, "outcome", outcome_text(r->outcome));
    cJSON_AddBoolToObject(object, "strict", r->strict);
    char ratio[32];
    if (r->status == CLI_SKIP || (r->n_outputs == 0 && isnan(r->ratio))) {
        cJSON_AddNullToObject(object, "ratio");
        snprintf(ratio, sizeof ratio, "-");
    } else {
        add_number_or_null(object, "ratio", r->ratio);
        cli_format_ratio(r->ratio, ratio, sizeof ratio);
    }
    cJSON_AddStringToObject(object, "ratio_text", ratio);
    cJSON *outputs = cJSON_AddArrayToObject(object, "outputs");
    for (int i = 0; i < r->n_outputs; i++)
        cJSON_AddItemToArray(outputs, output_json(r, i));
    if (r->message)
        cJSON_AddStringToObject(object, "message", r->message);
    else
        cJSON_AddNullToObject(object, "message");
    cJSON_AddNumberToObject(object, "seconds", r->seconds);
    return object;
}

int cli_report_check(const char *path, const char *vectors)
{
    if (lacs_output_file_check(path, vectors, LACS_OUTPUT_REPLACE | LACS_OUTPUT_NOT_GOLDEN) != LACS_OK)
        return cli_error("cannot write the report: %s", lacs_last_error());
    return 0;
}

int cli_write_report(const char *path, const char *what, const char *text, size_t length, const char *vectors)
{
    if (lacs_output_file_write(path, text, length, vectors, LACS_OUTPUT_REPLACE | LACS_OUTPUT_NOT_GOLDEN) != LACS_OK)
        return cli_error("cannot write the %s report: %s", what, lacs_last_error());
    return 0;
}

/* The JSON report's tree; with over_time, each failure's "error_over_time" too (for the HTML report). */
static cJSON *report_json(const cli_run_summary *summary, const cli_result *results, int n, int over_time)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "lacs_version", LACS_SPEC_VERSION);
    cJSON_AddStringToObject(root, "impl", cli_text(summary->impl));
    cJSON_AddStringToObject(root, "vectors", cli_text(summary->vectors));
    if (summary->manifest)
        cJSON_AddStringToObject(root, "manifest", cli_text(summary->manifest));
    else
        cJSON_AddNullToObject(root, "manifest");
    if (summary->shard_count > 0) {
        char shard[64];
        snprintf(shard, sizeof shard, "%d/%d", summary->shard_index, summary->shard_count);
        cJSON_AddStringToObject(root, "shard", shard);
    }
    cJSON *totals = cJSON_AddObjectToObject(root, "summary");
    cJSON_AddNumberToObject(totals, "passed", summary->passed);
    cJSON_AddNumberToObject(totals, "failed", summary->failed);
    cJSON_AddNumberToObject(totals, "skipped", summary->skipped);
    if (summary->verdict) {
        char *verdict = lacs_verdict_json(summary->verdict);
        cJSON *parsed = verdict ? cJSON_Parse(verdict) : NULL;
        free(verdict);
        if (parsed)
            cJSON_AddItemToObject(root, "verdict", parsed);
        else
            cJSON_AddNullToObject(root, "verdict");
    }
    cJSON *cases = cJSON_AddArrayToObject(root, "cases");
    for (int i = 0; i < n; i++) {
        cJSON *item = case_json(&results[i]);
        if (over_time) {
            cJSON *series = cJSON_AddArrayToObject(item, "error_over_time");
            for (int o = 0; o < results[i].n_outputs && o < LACS_CHECK_MAX_OUTPUTS; o++) {
                if (!results[i].over_time[o])
                    continue;
                cJSON *one = cJSON_CreateObject(), *ratios = cJSON_CreateArray();
                cJSON_AddStringToObject(one, "output", results[i].outputs[o].name);
                for (int64_t t = 0; t < results[i].over_time_steps[o]; t++) {
                    double ratio = results[i].over_time[o][t];
                    cJSON_AddItemToArray(ratios, isfinite(ratio) ? cJSON_CreateNumber(ratio) : cJSON_CreateNull());
                }
                cJSON_AddItemToObject(one, "ratios", ratios);
                cJSON_AddItemToArray(series, one);
            }
        }
        cJSON_AddItemToArray(cases, item);
    }
    return root;
}

int cli_write_json(const char *path, const cli_run_summary *summary, const cli_result *results, int n)
{
    cJSON *root = report_json(summary, results, n, 0);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return cli_error("cannot write the JSON report '%s': out of memory", path);
    int rc = cli_write_report(path, "JSON", text, strlen(text), summary->vectors);
    cJSON_free(text);
    return rc;
}

int cli_write_html(const char *path, const cli_run_summary *summary, const cli_result *results, int n)
{
    cJSON *root = report_json(summary, results, n, 1);
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    char *html = json ? lacs_report_html(json) : NULL;
    cJSON_free(json);
    if (!html)
        return cli_error("cannot write the HTML report '%s': %s", path, json ? lacs_last_error() : "out of memory");
    int rc = cli_write_report(path, "HTML", html, strlen(html), summary->vectors);
    lacs_report_free(html);
    return rc;
}

/* Text as XML character data or attribute value: the five entities, and the
 * control characters XML 1.0 forbids replaced by '?'. */
static void put_xml_text(FILE *f, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
                fputc('?', f);
            else
                fputc(*p, f);
        }
    }
}

/* The failure's one-line summary: the ratio and where, or the message. */
static void failure_text(const cli_result *r, char *buf, size_t size)
{
    int worst = cli_worst_output(r);
    if (worst < 0) {
        snprintf(buf, size, "%s", r->message ? r->message : "failed");
        return;
    }
    char ratio[32], where[1024];
    cli_format_ratio(r->ratio, ratio, sizeof ratio);
    cli_describe_output(r, worst, where, sizeof where);
    snprintf(buf, size, "ratio %s: %s%s%s", ratio, where, r->message ? "; " : "", r->message ? r->message : "");
}

int cli_write_junit(const char *path, const cli_run_summary *summary, const cli_result *results, int n)
{
    /* Built in memory (open_memstream is POSIX 2008), then written whole. */
    char *text = NULL;
    size_t length = 0;
    FILE *f = open_memstream(&text, &length);
    if (!f)
        return cli_error("cannot write the JUnit report '%s': %s", path, strerror(errno));
    double total_seconds = 0;
    for (int i = 0; i < n; i++)
        total_seconds += results[i].seconds;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
    fprintf(f, "<testsuite name=\"lacs\" tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\" time=\"%.6f\">\n",
            n, summary->failed, summary->skipped, total_seconds);
    fputs("  <properties>\n    <property name=\"impl\" value=\"", f);
    put_xml_text(f, cli_text(summary->impl));
    fputs("\"/>\n    <property name=\"vectors\" value=\"", f);
    put_xml_text(f, cli_text(summary->vectors));
    fputs("\"/>\n    <property name=\"manifest\" value=\"", f);
    put_xml_text(f, summary->manifest ? cli_text(summary->manifest) : "(not verified)");
    fprintf(f, "\"/>\n    <property name=\"lacs_version\" value=\"%s\"/>\n", LACS_SPEC_VERSION);
    if (summary->verdict) {
        char *citation = lacs_verdict_citation(summary->verdict);
        fputs("    <property name=\"verdict\" value=\"", f);
        put_xml_text(f, citation ? citation : "");
        fputs("\"/>\n", f);
        free(citation);
    }
    fputs("  </properties>\n", f);
    for (int i = 0; i < n; i++) {
        const cli_result *r = &results[i];
        fputs("  <testcase classname=\"", f);
        put_xml_text(f, r->op);
        fputs("\" name=\"", f);
        put_xml_text(f, r->id);
        fprintf(f, "\" time=\"%.6f\"", r->seconds);
        if (r->status == CLI_PASS) {
            fputs("/>\n", f);
            continue;
        }
        fputs(">\n", f);
        if (r->status == CLI_SKIP) {
            fputs("    <skipped message=\"", f);
            put_xml_text(f, r->message ? r->message : "unsupported");
            fputs("\"/>\n", f);
        } else {
            char message[2048];
            failure_text(r, message, sizeof message);
            fputs("    <failure message=\"", f);
            put_xml_text(f, message);
            fputs("\">", f);
            put_xml_text(f, message);
            fputs("</failure>\n", f);
        }
        fputs("  </testcase>\n", f);
    }
    fputs("</testsuite>\n", f);
    if (fclose(f) != 0 || !text) {
        free(text);
        return cli_error("cannot write the JUnit report '%s': out of memory", path);
    }
    int rc = cli_write_report(path, "JUnit", text, length, summary->vectors);
    free(text);
    return rc;
}
