/* lacs: the conformance report a person reads (`lacs check --html FILE`,
 * `python3 -m lacs check --html FILE`): one self-contained HTML page, with
 * no external reference (inline CSS and SVG, no script, no link, no font):
 *
 *   the line to cite, the implementation, the spec version and level, the
 *   vectors (and whether they were verified), the machine, the date;
 *   the verdict per (op, tier) as a matrix (lacs/verdict.h's verdicts);
 *   each op's distribution of ratios (error / allowed; 1 is the limit), one
 *   dot per case on a log scale;
 *   each failed case: lacs's element report (the worst output, where, the
 *   expected and actual values, the allowed error, both ratios; or the
 *   message) and its error over time as an SVG plot;
 *   the skipped and the strict cases, and every case in a table.
 *
 * Rendered from the JSON report of `lacs check --json` (checker/cli_report.c;
 * the Python harness writes the same object), with two optional members:
 * each case's "error_over_time", [{"output": "o", "ratios": [r_0, ...]}] (the
 * worst elementwise ratio at each time step, lacs_check_error_over_time; null
 * for a non-finite one), and "machine", an object of strings shown after the
 * description of the machine this runs on (uname, the CPU, builtin:cpu's
 * instruction set): the Python harness adds its interpreter and torch
 * versions there. Every string of the report is escaped for HTML. The page is written like every report: through
 * lacs_output_file_write (lacs/output.h). */
#ifndef LACS_REPORT_H
#define LACS_REPORT_H

#ifdef __cplusplus
extern "C" {
#endif

/* The page (malloc'd, NUL-terminated; free with lacs_report_free), or NULL
 * with lacs_last_error() when the JSON is not a report. */
char *lacs_report_html(const char *report_json);
void lacs_report_free(char *text);

#ifdef __cplusplus
}
#endif

#endif
