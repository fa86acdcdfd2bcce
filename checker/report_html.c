/* The conformance report as one self-contained HTML page (lacs/report.h).
 *
 * Rendered from the JSON report (checker/cli_report.c's object) into a
 * memory stream: no script, no external stylesheet, font or image, every
 * plot an inline SVG, every string of the report escaped. The verdicts are
 * the report's own ("verdict": lacs/verdict.h's object), never recomputed
 * here. Element ids the tests and a reader can rely on: #citation, #facts,
 * #verdict-matrix (one <td data-op data-tier data-verdict> per op and tier),
 * #ratios (one <svg class="ratios" data-op> per op), #failures (one <article
 * class="failure" data-case> per failed case, with its .element-report and,
 * for outputs over time, an <svg class="over-time">), #cases. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "lacs/cpu.h"
#include "lacs/report.h"
#include "lacs/types.h"

#include "../core/error.h"

static const char style[] =
    "body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px auto;max-width:1100px;"
    "color:#1d1d1f;padding:0 16px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}"
    "h3{font-size:15px;margin:16px 0 4px;font-family:ui-monospace,monospace}"
    ".citation{font-size:16px;font-weight:600;padding:8px 12px;border-radius:6px;margin:8px 0 12px}"
    ".ok{background:#e3f5e1;color:#135e12}.bad{background:#fde4e1;color:#8a1c0f}.none{background:#eee;color:#444}"
    "table{border-collapse:collapse}td,th{padding:3px 8px;text-align:left;vertical-align:top}"
    ".facts th{color:#666;font-weight:500}"
    ".matrix td,.matrix th{border:1px solid #ccc;min-width:150px}.matrix td small{color:#333;display:block}"
    ".matrix th{font-family:ui-monospace,monospace}"
    ".v-conforms{background:#c9ecc4}.v-partial{background:#fff1b8}.v-fails{background:#f9c4bc}"
    ".v-not-claimed{background:#ececec;color:#555}.v-no-verdict{background:#e3d4f5}.v-absent{background:#fafafa}"
    ".mono,.element-report{font-family:ui-monospace,monospace;font-size:12.5px}"
    ".element-report{background:#fff6f4;border-left:3px solid #c0392b;padding:6px 10px;white-space:pre-wrap;"
    "word-break:break-word}"
    ".outputs td,.outputs th,.cases td,.cases th{border-bottom:1px solid #eee;font-size:12.5px}"
    ".ratio-row{display:flex;align-items:center;gap:10px}.ratio-row .op{width:190px;font-family:ui-monospace,"
    "monospace;font-size:12.5px}.ratio-row .worst{font-size:12px;color:#555}"
    "svg text{font:11px system-ui,sans-serif;fill:#444}.legend span{margin-right:14px}"
    ".PASS{color:#135e12}.FAIL{color:#a61b0b;font-weight:600}.SKIP{color:#666}"
    "details{margin:8px 0}summary{cursor:pointer}";

/* ---- output helpers ---- */

static void html_text(FILE *f, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)(text ? text : ""); *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if (*p < 0x20 && *p != '\n' && *p != '\t')
                fputs("?", f);
            else
                fputc(*p, f);
        }
    }
}

static const char *string_of(const cJSON *object, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsString(item) ? item->valuestring : NULL;
}

/* A number, or NAN for null or absent (JSON has no NaN or infinity). */
static double number_of(const cJSON *object, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNumber(item) ? item->valuedouble : NAN;
}

static int int_of(const cJSON *object, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsNumber(item) ? (int)item->valuedouble : 0;
}

/* "1.23e-05", or the report's text for it ("inf", "nan", "-") when not a number. */
static void put_ratio(FILE *f, const cJSON *object, const char *number, const char *text)
{
    double value = number_of(object, number);
    if (!isnan(value))
        fprintf(f, "%.3g", value);
    else
        html_text(f, string_of(object, text) ? string_of(object, text) : "-");
}

static void put_value(FILE *f, double value)
{
    if (isnan(value))
        fputs("non-finite", f);
    else
        fprintf(f, "%.10g", value);
}

/* The verdict word as a CSS class: "not claimed" -> v-not-claimed. */
static void verdict_class(FILE *f, const char *verdict)
{
    fputs("v-", f);
    for (const char *p = verdict; *p; p++)
        fputc(*p == ' ' ? '-' : *p, f);
}

/* ---- the machine ---- */

static void cpu_model(char *buf, size_t size)
{
    snprintf(buf, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ')
                    colon++;
                colon[strcspn(colon, "\n")] = '\0';
                snprintf(buf, size, "%s", colon);
            }
            break;
        }
    }
    fclose(f);
}

/* This machine (uname, the CPU model, builtin:cpu's instruction set), then whatever the report's "machine"
 * object adds ({"python": "3.11.2", "torch": "1.13.1", ...}: the Python harness's interpreter and packages). */
static void put_machine(FILE *f, const cJSON *machine)
{
    char cpu[256], when[64], system[600] = "", host[256] = "";
    cpu_model(cpu, sizeof cpu);
    struct utsname u;
    if (uname(&u) == 0) {
        snprintf(system, sizeof system, "%s %s %s", u.sysname, u.release, u.machine);
        snprintf(host, sizeof host, "%s", u.nodename);
    }
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
    const char *isa = lacs_cpu_isa_name();
    fputs("<tr><th>machine</th><td class=\"mono\">", f);
    html_text(f, host);
    fputs("; ", f);
    html_text(f, system);
    fputs("; ", f);
    html_text(f, cpu);
    fprintf(f, ", %ld online CPUs", sysconf(_SC_NPROCESSORS_ONLN));
    if (isa) {
        fputs("; builtin:cpu's instruction set ", f);
        html_text(f, isa);
        const char *products = lacs_cpu_bf16_products();
        if (products) {
            fputs(" (bf16 products ", f);
            html_text(f, products);
            fputs(")", f);
        }
    }
    const cJSON *item;
    cJSON_ArrayForEach(item, machine)
    {
        if (!cJSON_IsString(item) || !item->string)
            continue;
        fputs("; ", f);
        html_text(f, item->string);
        fputs(" ", f);
        html_text(f, item->valuestring);
    }
    fputs("</td></tr>\n<tr><th>written</th><td>", f);
    html_text(f, when);
    fputs("</td></tr>\n", f);
}

/* ---- the verdict matrix ---- */

static const char *const tiers[] = {"fp32", "bf16"};

static const cJSON *group_of(const cJSON *groups, const char *op, const char *tier)
{
    const cJSON *g;
    cJSON_ArrayForEach(g, groups)
    {
        const char *o = string_of(g, "op"), *t = string_of(g, "tier");
        if (o && t && strcmp(o, op) == 0 && strcmp(t, tier) == 0)
            return g;
    }
    return NULL;
}

/* The ops of the groups, in their order, without repeats. */
static int ops_of(const cJSON *groups, const char **ops, int max)
{
    int n = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, groups)
    {
        const char *op = string_of(g, "op");
        int seen = 0;
        for (int i = 0; op && i < n; i++)
            seen |= strcmp(ops[i], op) == 0;
        if (op && !seen && n < max)
            ops[n++] = op;
    }
    return n;
}

static void put_count(FILE *f, const cJSON *g, const char *name, const char *words, int *shown)
{
    int count = int_of(g, name);
    if (count > 0) {
        fprintf(f, "%s%d %s", (*shown)++ ? ", " : "", count, words);
    }
}

static void put_matrix(FILE *f, const cJSON *verdict)
{
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(verdict, "groups");
    const char *ops[256];
    int n = ops_of(groups, ops, 256);
    fputs("<section id=\"verdicts\"><h2>Verdict per op and tier</h2>\n<p>", f);
    const char *level = string_of(verdict, "level");
    fprintf(f, "At the <b>%s</b> level (SPEC.md 11.7): ", level && strcmp(level, "strict") == 0 ? "strict" : "required");
    fputs("<i>conforms</i>: every case counted passed; <i>partial</i>: some were skipped; <i>fails</i>: one "
          "failed; <i>not claimed</i>: every case was skipped or declared out; <i>no verdict</i>: a vector was "
          "rejected.</p>\n<table class=\"matrix\" id=\"verdict-matrix\"><thead><tr><th>op</th>",
          f);
    for (size_t t = 0; t < 2; t++)
        fprintf(f, "<th>%s</th>", tiers[t]);
    fputs("</tr></thead><tbody>\n", f);
    for (int i = 0; i < n; i++) {
        fputs("<tr><th>", f);
        html_text(f, ops[i]);
        fputs("</th>", f);
        for (size_t t = 0; t < 2; t++) {
            const cJSON *g = group_of(groups, ops[i], tiers[t]);
            if (!g) {
                fputs("<td class=\"v-absent\">not run</td>", f);
                continue;
            }
            const char *word = string_of(g, "verdict") ? string_of(g, "verdict") : "?";
            fputs("<td class=\"", f);
            verdict_class(f, word);
            fputs("\" data-op=\"", f);
            html_text(f, ops[i]);
            fprintf(f, "\" data-tier=\"%s\" data-verdict=\"", tiers[t]);
            html_text(f, word);
            fputs("\"><b>", f);
            html_text(f, word);
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(g, "declared")))
                fputs(" (declared)", f);
            fputs("</b><small>", f);
            int shown = 0;
            put_count(f, g, "passed", "passed", &shown);
            put_count(f, g, "failed", "failed", &shown);
            put_count(f, g, "skipped", "skipped", &shown);
            put_count(f, g, "excluded", "declared out", &shown);
            put_count(f, g, "invalid", "rejected", &shown);
            const cJSON *strict = cJSON_GetObjectItemCaseSensitive(g, "strict_failed");
            if (cJSON_GetArraySize(strict) > 0)
                fprintf(f, "%s%d strict failed", shown++ ? ", " : "", cJSON_GetArraySize(strict));
            fputs("</small></td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</tbody></table></section>\n", f);
}

/* ---- the distribution of ratios ---- */

enum { STRIP_W = 640, STRIP_H = 34, STRIP_LEFT = 10, STRIP_RIGHT = 10 };
static const double strip_min = -6, strip_max = 6; /* log10 of the ratio */

static double strip_x(double ratio)
{
    double decades = ratio > 0 ? log10(ratio) : strip_min;
    if (isnan(ratio) || isinf(ratio) || decades > strip_max)
        decades = strip_max;
    if (decades < strip_min)
        decades = strip_min;
    return STRIP_LEFT + (decades - strip_min) / (strip_max - strip_min) * (STRIP_W - STRIP_LEFT - STRIP_RIGHT);
}

static void put_ratios(FILE *f, const cJSON *groups, const cJSON *cases)
{
    const char *ops[256];
    int n = ops_of(groups, ops, 256);
    fputs("<section id=\"ratios\"><h2>Ratios against the limit</h2>\n<p>Each case's worst ratio, error / allowed "
          "(SPEC.md 11.3), on a log scale from 1e-6 to 1e6: 1 (the red line) is the limit; a ratio of 0 is drawn "
          "at the left edge, a non-finite one at the right. Skipped cases have none.</p>\n"
          "<p class=\"legend\"><span><svg width=\"10\" height=\"10\"><circle cx=\"5\" cy=\"5\" r=\"4\" "
          "fill=\"#1f77b4\"/></svg> fp32</span><span><svg width=\"10\" height=\"10\"><circle cx=\"5\" cy=\"5\" "
          "r=\"4\" fill=\"#ff7f0e\"/></svg> bf16</span></p>\n",
          f);
    /* the scale, once */
    fprintf(f, "<div class=\"ratio-row\"><span class=\"op\"></span><svg width=\"%d\" height=\"18\" "
               "role=\"img\" aria-label=\"scale\">",
            STRIP_W);
    for (int d = (int)strip_min; d <= (int)strip_max; d += 2)
        fprintf(f, "<text x=\"%.1f\" y=\"13\" text-anchor=\"middle\">1e%d</text>", strip_x(pow(10, d)), d);
    fputs("</svg></div>\n", f);
    for (int i = 0; i < n; i++) {
        const cJSON *c, *worst = NULL;
        double worst_ratio = -1;
        fputs("<div class=\"ratio-row\"><span class=\"op\">", f);
        html_text(f, ops[i]);
        fputs("</span><svg class=\"ratios\" data-op=\"", f);
        html_text(f, ops[i]);
        fprintf(f, "\" width=\"%d\" height=\"%d\" role=\"img\">", STRIP_W, STRIP_H);
        fprintf(f, "<rect x=\"%d\" y=\"4\" width=\"%d\" height=\"%d\" fill=\"#f6f6f6\"/>", STRIP_LEFT,
                STRIP_W - STRIP_LEFT - STRIP_RIGHT, STRIP_H - 8);
        for (int d = (int)strip_min; d <= (int)strip_max; d++)
            fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"4\" y2=\"%d\" stroke=\"#ddd\"/>", strip_x(pow(10, d)),
                    strip_x(pow(10, d)), STRIP_H - 4);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"1\" y2=\"%d\" stroke=\"#d62728\" stroke-width=\"2\"/>",
                strip_x(1), strip_x(1), STRIP_H - 1);
        int k = 0;
        cJSON_ArrayForEach(c, cases)
        {
            const char *op = string_of(c, "op"), *status = string_of(c, "status");
            if (!op || strcmp(op, ops[i]) != 0 || !status || strcmp(status, "SKIP") == 0)
                continue;
            const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(c, "outputs");
            if (cJSON_GetArraySize(outputs) == 0)
                continue; /* failed before any comparison */
            double ratio = number_of(c, "ratio");
            const char *text = string_of(c, "ratio_text");
            if (isnan(ratio))
                ratio = text && strcmp(text, "inf") == 0 ? INFINITY : NAN;
            const char *tier = string_of(c, "tier");
            int bf16 = tier && strcmp(tier, "bf16") == 0;
            double y = (bf16 ? 0.66 : 0.34) * STRIP_H + ((k++ % 5) - 2) * 1.5;
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.2\" fill=\"%s\" fill-opacity=\"0.75\"%s><title>",
                    strip_x(ratio), y, bf16 ? "#ff7f0e" : "#1f77b4",
                    strcmp(status, "FAIL") == 0 ? " stroke=\"#a61b0b\" stroke-width=\"1.2\"" : "");
            html_text(f, string_of(c, "id"));
            fputs(": ", f);
            html_text(f, text ? text : "?");
            fputs("</title></circle>", f);
            if (isnan(ratio) || ratio > worst_ratio) {
                worst_ratio = isnan(ratio) ? INFINITY : ratio;
                worst = c;
            }
        }
        fputs("</svg><span class=\"worst\">", f);
        if (worst) {
            fputs("worst ", f);
            html_text(f, string_of(worst, "ratio_text"));
            fputs(" (", f);
            html_text(f, string_of(worst, "id"));
            fputs(")", f);
        } else {
            fputs("no case compared", f);
        }
        fputs("</span></div>\n", f);
    }
    fputs("</section>\n", f);
}

/* ---- failures ---- */

/* The line the CLI prints under a FAIL (checker/cli_result.c): the worst
 * output, where, its values and both ratios; the others over the limit; the
 * message. */
static void put_element_report(FILE *f, const cJSON *c)
{
    const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(c, "outputs"), *o, *worst = NULL;
    double worst_ratio = -1;
    cJSON_ArrayForEach(o, outputs)
    {
        double r = number_of(o, "ratio");
        if (isnan(r))
            r = INFINITY;
        if (r > worst_ratio) {
            worst_ratio = r;
            worst = o;
        }
    }
    fputs("<p class=\"element-report\">", f);
    if (worst) {
        html_text(f, string_of(worst, "where"));
        fputs(": expected ", f);
        put_value(f, number_of(worst, "expected"));
        fputs(", got ", f);
        put_value(f, number_of(worst, "actual"));
        fprintf(f, ", allowed error %.3g; normwise ratio ", number_of(worst, "allowed"));
        put_ratio(f, worst, "normwise_ratio", "ratio_text");
        fputs(", elementwise ratio ", f);
        put_ratio(f, worst, "elementwise_ratio", "ratio_text");
        int mismatches = int_of(worst, "nonfinite_mismatches");
        if (mismatches > 0)
            fprintf(f, "; %d element(s) non-finite where the golden is not, or the reverse", mismatches);
        int others = 0;
        cJSON_ArrayForEach(o, outputs)
        {
            double r = number_of(o, "ratio");
            if (o == worst || r <= 1)
                continue;
            fputs(others++ ? ", " : "; also over the limit: ", f);
            html_text(f, string_of(o, "name"));
            fputs(" (", f);
            html_text(f, string_of(o, "ratio_text"));
            fputs(")", f);
        }
        if (string_of(c, "message")) {
            fputs("; ", f);
            html_text(f, string_of(c, "message"));
        }
    } else {
        html_text(f, string_of(c, "message") ? string_of(c, "message") : "failed");
    }
    fputs("</p>\n", f);
}

enum { PLOT_W = 680, PLOT_H = 230, PLOT_L = 52, PLOT_R = 12, PLOT_T = 12, PLOT_B = 34 };

/* log10(ratio) against t: the limit (0) dashed red, chunks of 64 dotted. */
static void put_over_time(FILE *f, const char *case_id, const cJSON *series)
{
    const char *output = string_of(series, "output");
    const cJSON *ratios = cJSON_GetObjectItemCaseSensitive(series, "ratios");
    int T = cJSON_GetArraySize(ratios);
    if (T < 1)
        return;
    double lo = -3, hi = 1;
    const cJSON *r;
    cJSON_ArrayForEach(r, ratios)
    {
        if (cJSON_IsNumber(r) && r->valuedouble > 0 && isfinite(r->valuedouble)) {
            double d = log10(r->valuedouble);
            lo = d < lo ? d : lo;
            hi = d > hi ? d : hi;
        }
    }
    lo = floor(lo < -12 ? -12 : lo);
    hi = ceil(hi + 0.5);
    const double w = PLOT_W - PLOT_L - PLOT_R, h = PLOT_H - PLOT_T - PLOT_B;
#define PX(t) (PLOT_L + (T > 1 ? (double)(t) / (T - 1) : 0.5) * w)
#define PY(d) (PLOT_T + (hi - (d)) / (hi - lo) * h)
    fputs("<svg class=\"over-time\" data-output=\"", f);
    html_text(f, output);
    fprintf(f, "\" width=\"%d\" height=\"%d\" role=\"img\" aria-label=\"error over time\">", PLOT_W, PLOT_H);
    fputs("<title>", f);
    html_text(f, case_id);
    fputs(": error over time of ", f);
    html_text(f, output);
    fputs("</title>", f);
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" fill=\"#fbfbfb\" stroke=\"#ccc\"/>", PLOT_L,
            PLOT_T, w, h);
    for (int d = (int)lo; d <= (int)hi; d++) {
        fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>", PLOT_L, PLOT_L + w, PY(d),
                PY(d));
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>", PLOT_L - 4, PY(d) + 4, d);
    }
    const int chunks = T / 64 <= 32; /* the chunk boundaries, where they do not fill the plot */
    for (int t = 64; chunks && t < T; t += 64)
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%.0f\" stroke=\"#bbb\" stroke-dasharray=\"2,3\"/>",
                PX(t), PX(t), PLOT_T, PLOT_T + h);
    fprintf(f, "<line x1=\"%d\" x2=\"%.0f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#d62728\" stroke-dasharray=\"6,4\"/>",
            PLOT_L, PLOT_L + w, PY(0), PY(0));
    fputs("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.3\" points=\"", f);
    int t = 0;
    cJSON_ArrayForEach(r, ratios)
    {
        double d = cJSON_IsNumber(r) ? (r->valuedouble > 0 ? log10(r->valuedouble) : lo) : hi; /* null: non-finite */
        d = d < lo ? lo : d > hi ? hi : d;
        fprintf(f, "%.1f,%.1f ", PX(t), PY(d));
        t++;
    }
    fputs("\"/>", f);
    fprintf(f, "<text x=\"%d\" y=\"%d\">t = 0</text><text x=\"%.0f\" y=\"%d\" text-anchor=\"end\">t = %d</text>",
            PLOT_L, PLOT_H - 18, PLOT_L + w, PLOT_H - 18, T - 1);
    fprintf(f, "<text x=\"%.0f\" y=\"%d\" text-anchor=\"middle\">worst elementwise ratio of ", PLOT_L + w / 2,
            PLOT_H - 4);
    html_text(f, output);
    fputs(chunks ? " at each t (log scale; red: the limit; dotted: chunks of 64)</text></svg>\n"
                 : " at each t (log scale; red: the limit)</text></svg>\n",
          f);
#undef PX
#undef PY
}

static void put_failures(FILE *f, const cJSON *cases)
{
    int failed = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *status = string_of(c, "status");
        failed += status && strcmp(status, "FAIL") == 0;
    }
    fprintf(f, "<section id=\"failures\"><h2>Failures (%d)</h2>\n", failed);
    if (failed == 0)
        fputs("<p>No case failed.</p>\n", f);
    cJSON_ArrayForEach(c, cases)
    {
        const char *status = string_of(c, "status");
        if (!status || strcmp(status, "FAIL") != 0)
            continue;
        fputs("<article class=\"failure\" data-case=\"", f);
        html_text(f, string_of(c, "id"));
        fputs("\"><h3>", f);
        html_text(f, string_of(c, "id"));
        fputs(" &mdash; ratio ", f);
        html_text(f, string_of(c, "ratio_text"));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "strict")))
            fputs(" (a strict case, SPEC.md 11.7)", f);
        const char *outcome = string_of(c, "outcome");
        if (outcome && strcmp(outcome, "failed") != 0) {
            fputs(" (", f);
            html_text(f, outcome);
            fputs(")", f);
        }
        fputs("</h3>\n", f);
        put_element_report(f, c);
        const cJSON *outputs = cJSON_GetObjectItemCaseSensitive(c, "outputs"), *o;
        if (cJSON_GetArraySize(outputs) > 0) {
            fputs("<table class=\"outputs\"><tr><th>output</th><th>ratio</th><th>normwise</th><th>elementwise</th>"
                  "<th>worst element</th><th>expected</th><th>got</th><th>allowed</th></tr>\n",
                  f);
            cJSON_ArrayForEach(o, outputs)
            {
                fputs("<tr><td class=\"mono\">", f);
                html_text(f, string_of(o, "name"));
                fputs("</td><td>", f);
                html_text(f, string_of(o, "ratio_text"));
                fputs("</td><td>", f);
                put_ratio(f, o, "normwise_ratio", "ratio_text");
                fputs("</td><td>", f);
                put_ratio(f, o, "elementwise_ratio", "ratio_text");
                fputs("</td><td class=\"mono\">", f);
                html_text(f, string_of(o, "where"));
                fputs("</td><td>", f);
                put_value(f, number_of(o, "expected"));
                fputs("</td><td>", f);
                put_value(f, number_of(o, "actual"));
                fprintf(f, "</td><td>%.3g</td></tr>\n", number_of(o, "allowed"));
            }
            fputs("</table>\n", f);
        }
        const cJSON *series;
        cJSON_ArrayForEach(series, cJSON_GetObjectItemCaseSensitive(c, "error_over_time"))
        put_over_time(f, string_of(c, "id"), series);
        fputs("</article>\n", f);
    }
    fputs("</section>\n", f);
}

/* ---- skipped, strict, every case ---- */

static void put_cases(FILE *f, const cJSON *cases, const cJSON *verdict)
{
    const cJSON *strict = cJSON_GetObjectItemCaseSensitive(verdict, "strict_failed"), *s, *c;
    if (cJSON_GetArraySize(strict) > 0) {
        fputs("<section id=\"strict\"><h2>Strict cases that failed</h2><p>Listed beside the verdict at the required "
              "level, counted with <code>--strict</code> (SPEC.md 11.7):</p><ul>",
              f);
        cJSON_ArrayForEach(s, strict)
        {
            fputs("<li class=\"mono\">", f);
            html_text(f, cJSON_IsString(s) ? s->valuestring : string_of(s, "id"));
            fputs("</li>", f);
        }
        fputs("</ul></section>\n", f);
    }
    int skipped = 0, n = cJSON_GetArraySize(cases);
    cJSON_ArrayForEach(c, cases)
    {
        const char *status = string_of(c, "status");
        skipped += status && strcmp(status, "SKIP") == 0;
    }
    fprintf(f, "<section id=\"cases\"><h2>Every case (%d)</h2>\n<details><summary>%d skipped</summary><ul>\n", n,
            skipped);
    cJSON_ArrayForEach(c, cases)
    {
        const char *status = string_of(c, "status");
        if (!status || strcmp(status, "SKIP") != 0)
            continue;
        fputs("<li><span class=\"mono\">", f);
        html_text(f, string_of(c, "id"));
        fputs("</span>: ", f);
        html_text(f, string_of(c, "message") ? string_of(c, "message") : string_of(c, "outcome"));
        fputs("</li>\n", f);
    }
    fputs("</ul></details>\n<details><summary>all cases</summary><table class=\"cases\"><tr><th>status</th>"
          "<th>ratio</th><th>case</th><th>seconds</th></tr>\n",
          f);
    cJSON_ArrayForEach(c, cases)
    {
        const char *status = string_of(c, "status");
        fputs("<tr><td class=\"", f);
        html_text(f, status);
        fputs("\">", f);
        html_text(f, status);
        fputs("</td><td>", f);
        html_text(f, string_of(c, "ratio_text"));
        fputs("</td><td class=\"mono\">", f);
        html_text(f, string_of(c, "id"));
        fprintf(f, "</td><td>%.3f</td></tr>\n", number_of(c, "seconds"));
    }
    fputs("</table></details></section>\n", f);
}

char *lacs_report_html(const char *report_json)
{
    cJSON *report = report_json ? cJSON_Parse(report_json) : NULL;
    const cJSON *verdict = report ? cJSON_GetObjectItemCaseSensitive(report, "verdict") : NULL;
    const cJSON *cases = report ? cJSON_GetObjectItemCaseSensitive(report, "cases") : NULL;
    if (!cJSON_IsObject(report) || !cJSON_IsObject(verdict) || !cJSON_IsArray(cases)) {
        cJSON_Delete(report);
        lacs_internal_error(LACS_ERR_FORMAT, NULL,
                            "the HTML report needs a lacs check report (an object with \"verdict\" and \"cases\")");
        return NULL;
    }
    char *text = NULL;
    size_t length = 0;
    FILE *f = open_memstream(&text, &length);
    if (!f) {
        cJSON_Delete(report);
        lacs_internal_error(LACS_ERR_MEMORY, NULL, "out of memory");
        return NULL;
    }
    const char *impl = string_of(report, "impl"), *citation = string_of(verdict, "citation");
    int exit_status = int_of(verdict, "exit_status");
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>lacs conformance report: ",
          f);
    html_text(f, impl);
    fprintf(f, "</title>\n<style>%s</style></head>\n<body>\n<header><h1>lacs conformance report</h1>\n", style);
    fprintf(f, "<p class=\"citation %s\" id=\"citation\">", exit_status == 0 ? "ok" : exit_status == 2 ? "none" : "bad");
    html_text(f, citation ? citation : "no verdict");
    fputs("</p>\n<table class=\"facts\" id=\"facts\">\n<tr><th>implementation</th><td class=\"mono\">", f);
    html_text(f, impl);
    const cJSON *declared = cJSON_GetObjectItemCaseSensitive(verdict, "declared");
    if (cJSON_IsObject(declared) && string_of(declared, "name")) {
        fputs(" (declares itself ", f);
        html_text(f, string_of(declared, "name"));
        fputs(")", f);
    }
    fputs("</td></tr>\n<tr><th>specification</th><td>lacs spec ", f);
    html_text(f, string_of(report, "lacs_version"));
    fputs(", ", f);
    html_text(f, string_of(verdict, "level") ? string_of(verdict, "level") : "required");
    fputs(" level (SPEC.md 11.7)</td></tr>\n<tr><th>vectors</th><td class=\"mono\">", f);
    html_text(f, string_of(report, "vectors"));
    if (string_of(report, "manifest")) {
        fputs(", each file verified against ", f);
        html_text(f, string_of(report, "manifest"));
    } else {
        fputs(" (not verified: --no-verify)", f);
    }
    if (string_of(report, "shard")) {
        fputs("; shard ", f);
        html_text(f, string_of(report, "shard"));
    }
    fputs("</td></tr>\n", f);
    const cJSON *machine = cJSON_GetObjectItemCaseSensitive(report, "machine");
    put_machine(f, cJSON_IsObject(machine) ? machine : NULL);
    const cJSON *summary = cJSON_GetObjectItemCaseSensitive(report, "summary");
    fprintf(f, "<tr><th>cases</th><td>%d passed, %d failed, %d skipped</td></tr>\n</table></header>\n",
            int_of(summary, "passed"), int_of(summary, "failed"), int_of(summary, "skipped"));
    put_matrix(f, verdict);
    put_ratios(f, cJSON_GetObjectItemCaseSensitive(verdict, "groups"), cases);
    put_failures(f, cases);
    put_cases(f, cases, verdict);
    fputs("<footer><p>Written by lacs (the Linear-Attention Conformance Suite); the tolerance model, the levels and "
          "the verdicts are SPEC.md sections 11.3 and 11.7. This page is self-contained: it loads nothing.</p>"
          "</footer>\n</body></html>\n",
          f);
    cJSON_Delete(report);
    if (fclose(f) != 0 || !text) {
        free(text);
        lacs_internal_error(LACS_ERR_MEMORY, NULL, "out of memory");
        return NULL;
    }
    return text;
}

void lacs_report_free(char *text) { free(text); }
