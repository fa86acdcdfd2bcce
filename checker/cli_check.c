/* lacs check --impl IMPL [...]: run an implementation on every case,
 * compare its outputs with the goldens (SPEC.md 11), and give the verdict
 * per op and tier (SPEC.md 11.7).
 *
 * The report paths are checked first (nothing is run if a report could not
 * be written). The cases are found, verified against their manifest and
 * filtered (cli_cases.c, lacs/cases.h), then the shard keeps the ones whose
 * index in that sorted list is I-1 mod N. A case the implementation's
 * declaration leaves out is not run; a rejected vector is a FAIL that is not
 * the implementation's. Each other case runs in a child process
 * (cli_child.c); up to --jobs of them at once. Results are printed in case
 * order as soon as every earlier case has finished, so the output is the
 * same whatever --jobs is. Then the verdict table, the counts and the
 * citable closing line (lacs/verdict.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char check_usage[] =
    "usage: lacs check --impl IMPL [--op OP[,OP...]] [--tier fp32|bf16] [--vectors DIR]\n"
    "                  [--json FILE] [--junit FILE] [--html FILE] [--shard I/N] [--timeout SECONDS] [--jobs N]\n"
    "                  [--strict] [--no-verify] [--quiet] [--verbose]\n"
    "\n"
    "Runs IMPL on every case and compares its outputs with the goldens. One line per case:\n"
    "  PASS  0.0123    delta_rule-fp32-t64      (status, worst error/allowed ratio, id; 1 is the limit)\n"
    "and under a FAIL, where and why. Then the verdict per op and tier (conforms, partial, fails, not\n"
    "claimed), `N passed, M failed, K skipped`, and the line to cite: \"conforms to lacs spec 1.3 for ops\n"
    "... in tiers ...\" or why not.\n"
    "  --impl IMPL       builtin:reference, builtin:cpu, builtin:cuda, PATH.so (a plugin exporting\n"
    "                    lacs_plugin_run; ABI v1.1 may declare what it implements), or\n"
    "                    python:FILE_OR_MODULE:FUNCTION, handed with these options to the Python harness\n"
    "                    ($LACS_PYTHON, else /usr/bin/python3 -m lacs check; it also takes --in-process)\n"
    "  --op OP           only this op (repeatable, or comma-separated)\n"
    "  --tier TIER       only fp32 or bf16 cases\n"
    "  --vectors DIR     default ./vectors/core, else $LACS_VECTORS\n"
    "  --json FILE       write a JSON report (replacing FILE; never a link, FIFO or golden vector)\n"
    "  --junit FILE      write a JUnit XML report (the same)\n"
    "  --html FILE       write the conformance report a person reads: one self-contained page (the verdict\n"
    "                    matrix, the ratios of each op, each failure with its error over time)\n"
    "  --shard I/N       only the cases whose index in the filtered list is I-1 mod N\n"
    "  --timeout SECONDS a case running longer fails (default 300; also the time a plugin has to load)\n"
    "  --jobs N          run up to N cases at once (default 1)\n"
    "  --strict          count the strict cases in the verdict (by default they are listed beside it)\n"
    "  --no-verify       do not verify the vectors against their MANIFEST.json (their SHA-256)\n"
    "  --quiet           print only failures, the verdict and the closing lines\n"
    "  --verbose         print every output's ratio and the time of each case\n"
    "Exit status: 0 if no case failed, no case was skipped without being declared (lacs_plugin_describe)\n"
    "and some case passed; 1 otherwise; 2 for a usage error or a rejected vector (missing, not listed,\n"
    "altered or invalid).\n";

typedef struct {
    const char *impl;
    cli_filter filter;
    const char *vectors, *json, *junit, *html;
    int shard_index, shard_count;
    double timeout;
    int jobs, quiet, verbose, strict, no_verify;
} check_options;

static int parse_shard(const char *text, int *index, int *count)
{
    long i, n;
    const char *slash = strchr(text, '/');
    char first[32];
    if (!slash || (size_t)(slash - text) >= sizeof first)
        return cli_error("bad --shard '%s': expected I/N with 1 <= I <= N", text);
    memcpy(first, text, (size_t)(slash - text));
    first[slash - text] = '\0';
    if (cli_parse_long(first, &i) != 0 || cli_parse_long(slash + 1, &n) != 0 || n < 1 || i < 1 || i > n ||
        n > 1000000)
        return cli_error("bad --shard '%s': expected I/N with 1 <= I <= N", text);
    *index = (int)i;
    *count = (int)n;
    return 0;
}

static int parse_options(int argc, char **argv, check_options *o)
{
    memset(o, 0, sizeof *o);
    o->timeout = 300;
    o->jobs = 1;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int got;
        if (cli_is_help(argv[i])) {
            fputs(check_usage, stdout);
            return -1;
        }
        if (strcmp(argv[i], "--quiet") == 0) {
            o->quiet = 1;
        } else if (strcmp(argv[i], "--verbose") == 0) {
            o->verbose = 1;
        } else if (strcmp(argv[i], "--strict") == 0) {
            o->strict = 1;
        } else if (strcmp(argv[i], "--no-verify") == 0) {
            o->no_verify = 1;
        } else if ((got = cli_option_value(argc, argv, &i, "--impl", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->impl = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--op", &value)) != 0) {
            if (got < 0 || cli_filter_add_ops(&o->filter, value) != 0)
                return CLI_EXIT_USAGE;
        } else if ((got = cli_option_value(argc, argv, &i, "--tier", &value)) != 0) {
            if (got < 0 || cli_check_tier(value) != 0)
                return CLI_EXIT_USAGE;
            o->filter.tier = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--vectors", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->vectors = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--json", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->json = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--junit", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->junit = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--html", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            o->html = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--shard", &value)) != 0) {
            if (got < 0 || parse_shard(value, &o->shard_index, &o->shard_count) != 0)
                return CLI_EXIT_USAGE;
        } else if ((got = cli_option_value(argc, argv, &i, "--timeout", &value)) != 0) {
            if (got < 0 || cli_parse_timeout(value, &o->timeout) != 0)
                return CLI_EXIT_USAGE;
        } else if ((got = cli_option_value(argc, argv, &i, "--jobs", &value)) != 0) {
            long jobs;
            if (got < 0)
                return CLI_EXIT_USAGE;
            if (cli_parse_long(value, &jobs) != 0 || jobs < 1 || jobs > 256)
                return cli_error("bad --jobs '%s': expected a whole number from 1 to 256", value);
            o->jobs = (int)jobs;
        } else {
            return cli_error("check: unknown argument '%s' (see lacs check --help)", argv[i]);
        }
    }
    if (!o->impl)
        return cli_error("check: --impl IMPL is required (builtin:reference, or a plugin PATH.so)");
    if (o->quiet && o->verbose)
        return cli_error("check: --quiet and --verbose exclude each other");
    return 0;
}

/* The progress display on a terminal: `[123/628] delta_rule-bf16-t4096` on
 * stderr, overwritten in place, erased before each result line. */
typedef struct {
    int enabled;
    int shown;
    char text[256];
} progress_line;

static void progress_erase(progress_line *p)
{
    if (p->enabled && p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
        p->shown = 0;
    }
}

static void progress_draw(progress_line *p)
{
    if (p->enabled && p->text[0]) {
        fprintf(stderr, "\r\033[K%s", p->text);
        fflush(stderr);
        p->shown = 1;
    }
}

/* A running case. */
typedef struct {
    int case_index; /* -1 when free */
    lacs_vector *vector;
    cli_child child;
} running_case;

/* Starts case c: not run if its vector was rejected or the declaration
 * leaves it out; else loads it (verified) and starts its child. Returns 1 if
 * it is running, 0 if it has already finished. */
static int start_case(running_case *slot, const lacs_case_entry *c, cli_result *r, cli_impl *impl, double timeout,
                      const lacs_verdict *verdict)
{
    cli_result_init(r, c->id, c->op, c->tier);
    r->strict = c->strict;
    r->flags = strdup(c->flags ? c->flags : "");
    if (c->state != LACS_CASE_OK) {
        cli_result_invalid(r, c->reason);
        return 0;
    }
    char why[1024];
    if (lacs_verdict_excludes(verdict, c->op, c->tier, c->flags, why, sizeof why)) {
        cli_result_excluded(r, why);
        return 0;
    }
    const double started = cli_now();
    slot->vector = calloc(1, sizeof *slot->vector);
    if (!slot->vector) {
        cli_result_fail(r, "out of memory loading %s", c->path);
        return 0;
    }
    /* Verified as it is loaded: what runs is what was hashed. */
    if (lacs_case_entry_load(c, slot->vector) != LACS_OK) {
        cli_result_invalid(r, lacs_last_error());
        lacs_vector_free(slot->vector);
        free(slot->vector);
        slot->vector = NULL;
        return 0;
    }
    const lacs_vector *v = slot->vector;
    r->strict = lacs_vector_is_strict(v);
    cli_task task = {.impl = impl, .op = v->op, .inputs = v->inputs, .n_inputs = v->n_inputs,
                     .params = v->params, .n_params = v->n_params, .outputs = v->expected,
                     .n_outputs = v->n_outputs, .vector = v};
    /* the timeout covers the loading too */
    const double left = timeout - (cli_now() - started);
    if (cli_child_start(&slot->child, &task, left > 0.001 ? left : 0.001) != 0) {
        cli_result_from_child(r, v, &slot->child);
        cli_child_free(&slot->child);
        lacs_vector_free(slot->vector);
        free(slot->vector);
        slot->vector = NULL;
        return 0;
    }
    slot->child.started = started;
    slot->child.timeout = timeout;
    return 1;
}

static void finish_case(running_case *slot, cli_result *r, int keep_over_time)
{
    cli_result_from_child(r, slot->vector, &slot->child);
    if (keep_over_time)
        cli_result_keep_over_time(r, slot->vector, slot->child.outputs);
    cli_child_free(&slot->child);
    lacs_vector_free(slot->vector);
    free(slot->vector);
    slot->vector = NULL;
    slot->case_index = -1;
}

/* Runs every case, printing results in order; fills results[]. */
static void run_cases(const check_options *o, cli_impl *impl, const lacs_case_entry *cases, int n, cli_result *results,
                      const lacs_verdict *verdict)
{
    running_case *slots = calloc((size_t)o->jobs, sizeof *slots);
    char *finished = calloc((size_t)n, 1);
    if (!slots || !finished) {
        cli_error("out of memory");
        exit(CLI_EXIT_USAGE);
    }
    for (int s = 0; s < o->jobs; s++)
        slots[s].case_index = -1;
    progress_line progress = {.enabled = isatty(STDERR_FILENO)};
    int next = 0, printed = 0, running = 0;
    while (printed < n) {
        int progressed = 0;
        for (int s = 0; s < o->jobs && next < n; s++) {
            if (slots[s].case_index >= 0)
                continue;
            snprintf(progress.text, sizeof progress.text, "[%d/%d] %s", next + 1, n, cli_text(cases[next].id));
            progress_draw(&progress);
            if (start_case(&slots[s], &cases[next], &results[next], impl, o->timeout, verdict)) {
                slots[s].case_index = next;
                running++;
            } else {
                finished[next] = 1;
            }
            next++;
            progressed = 1;
        }
        for (int s = 0; s < o->jobs; s++) {
            if (slots[s].case_index < 0 || !cli_child_poll(&slots[s].child))
                continue;
            int index = slots[s].case_index;
            finish_case(&slots[s], &results[index], o->html != NULL);
            finished[index] = 1;
            running--;
            progressed = 1;
        }
        while (printed < n && finished[printed]) {
            const cli_result *r = &results[printed++];
            if (o->quiet && r->status != CLI_FAIL)
                continue;
            progress_erase(&progress);
            cli_print_result(stdout, r, o->verbose);
            fflush(stdout);
            progress_draw(&progress);
        }
        if (!progressed && running > 0)
            cli_child_pause(0.05); /* woken early by SIGCHLD; 50 ms bounds how late a timeout is seen */
    }
    cli_child_unblock();
    progress_erase(&progress);
    free(slots);
    free(finished);
}

void cli_print_verdict(const lacs_verdict *verdict, const cli_run_summary *summary)
{
    char *table = lacs_verdict_table(verdict), *citation = lacs_verdict_citation(verdict);
    if (table)
        fputs(table, stdout);
    printf("%d passed, %d failed, %d skipped", summary->passed, summary->failed, summary->skipped);
    if (summary->shard_count > 0)
        printf(" (shard %d/%d)", summary->shard_index, summary->shard_count);
    printf("\n%s\n", citation ? citation : "no verdict (out of memory)");
    fflush(stdout);
    free(table);
    free(citation);
}

int cli_check(int argc, char **argv, const char *argv0)
{
    (void)argv0;
    /* A Python function is run and judged by the Python harness (the same C
     * library through ctypes), which takes every option of this command. */
    for (int i = 1; i < argc; i++) {
        const char *value;
        int got = cli_option_value(argc, argv, &i, "--impl", &value);
        if (got > 0 && strncmp(value, "python:", 7) == 0)
            return cli_exec_python_harness(argc, argv);
        if (got < 0)
            return CLI_EXIT_USAGE;
    }
    check_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    const char *dir = cli_vectors_dir(o.vectors);
    if (!dir)
        return CLI_EXIT_USAGE;
    /* Before any work: a report that could not be written is refused now, not after the run. */
    if ((o.json && cli_report_check(o.json, dir) != 0) || (o.junit && cli_report_check(o.junit, dir) != 0) ||
        (o.html && cli_report_check(o.html, dir) != 0))
        return CLI_EXIT_USAGE;
    cli_impl impl;
    if (cli_impl_open(o.impl, &impl, o.timeout) != 0)
        return CLI_EXIT_USAGE;

    lacs_case_list list;
    /* verified: the manifest says what each case is, and each file is read once, when its case runs */
    if (cli_find_cases(dir, &o.filter, o.no_verify ? LACS_CASES_READ : LACS_CASES_VERIFY, &list) != 0) {
        cli_impl_close(&impl);
        return CLI_EXIT_USAGE;
    }
    /* The shard: indexes congruent to I-1 mod N in the sorted, filtered list. */
    const int n_all = list.n;
    lacs_case_entry *cases = malloc((size_t)(n_all > 0 ? n_all : 1) * sizeof *cases);
    int n = 0;
    for (int i = 0; cases && i < n_all; i++)
        if (o.shard_count == 0 || i % o.shard_count == o.shard_index - 1)
            cases[n++] = list.cases[i];
    if (!cases) {
        lacs_cases_free(&list);
        cli_impl_close(&impl);
        return cli_error("out of memory");
    }
    if (n_all == 0) {
        free(cases);
        lacs_cases_free(&list);
        cli_impl_close(&impl);
        return cli_error("no case under '%s' matches the filters%s", dir,
                         o.filter.n_ops || o.filter.tier ? " (--op, --tier)" : "");
    }

    lacs_verdict *verdict = lacs_verdict_new(o.strict);
    cli_result *results = calloc((size_t)(n > 0 ? n : 1), sizeof *results);
    if (!results || !verdict) {
        free(results);
        lacs_verdict_free(verdict);
        free(cases);
        lacs_cases_free(&list);
        cli_impl_close(&impl);
        return cli_error("out of memory");
    }
    cli_impl_declare(&impl, verdict);
    char scope[128] = "";
    if (o.shard_count > 0)
        snprintf(scope, sizeof scope, "shard %d/%d only", o.shard_index, o.shard_count);
    if (!list.manifest)
        snprintf(scope + strlen(scope), sizeof scope - strlen(scope), "%son unverified vectors", scope[0] ? ", " : "");
    lacs_verdict_scope(verdict, scope);
    if (n > 0)
        run_cases(&o, &impl, cases, n, results, verdict);

    cli_run_summary summary = {.impl = o.impl, .vectors = dir, .manifest = list.manifest,
                               .shard_index = o.shard_index, .shard_count = o.shard_count, .verdict = verdict};
    for (int i = 0; i < n; i++) {
        summary.passed += results[i].status == CLI_PASS;
        summary.failed += results[i].status == CLI_FAIL;
        summary.skipped += results[i].status == CLI_SKIP;
        lacs_verdict_add(verdict, results[i].op, results[i].tier, results[i].id, results[i].flags,
                         results[i].strict, results[i].outcome);
    }
    int status;
    if (n == 0) {
        /* an empty shard: nothing to check here, which is no failure */
        printf("0 passed, 0 failed, 0 skipped (shard %d/%d)\n", o.shard_index, o.shard_count);
        fflush(stdout);
        fprintf(stderr, "lacs: shard %d/%d of the %d matching cases is empty: nothing to check in it\n",
                o.shard_index, o.shard_count, n_all);
        status = 0;
    } else {
        cli_print_verdict(verdict, &summary);
        status = lacs_verdict_exit_status(verdict);
        if (summary.passed == 0 && summary.failed == 0)
            fprintf(stderr, "lacs: no case ran: %s skipped every one of the %d cases\n", cli_text(o.impl), n);
        if (!list.manifest)
            fprintf(stderr, "lacs: the vectors were not verified (--no-verify): the verdict holds only if they are "
                            "the published ones\n");
    }
    if (o.json && cli_write_json(o.json, &summary, results, n) != 0)
        status = CLI_EXIT_USAGE;
    if (o.junit && cli_write_junit(o.junit, &summary, results, n) != 0)
        status = CLI_EXIT_USAGE;
    if (o.html && n > 0 && cli_write_html(o.html, &summary, results, n) != 0)
        status = CLI_EXIT_USAGE;

    for (int i = 0; i < n; i++)
        cli_result_free(&results[i]);
    free(results);
    lacs_verdict_free(verdict);
    free(cases);
    lacs_cases_free(&list);
    cli_impl_close(&impl);
    return status;
}
