/* The `lacs` command-line checker: what its source files share.
 *
 *   cli.c          main: the command table, usage, option parsing helpers, `lacs: <problem>` errors, printable text
 *   cli_cases.c    the vectors directory, filters, the cases (lacs_cases_find, lacs/cases.h)
 *   cli_impl.c     choosing an implementation (builtin:reference, builtin:cpu, builtin:cuda, a plugin .so),
 *                  and what it declares (ABI v1.1)
 *   cli_child.c    running an implementation on one case in a child process (its own process group), with a
 *                  timeout; the fault handler that names a stray write; ending every case process on a signal
 *   cli_result.c   checking outputs against the goldens and printing the result
 *   cli_report.c   the --json, --junit and --html reports, written by lacs_output_file_write (lacs/output.h)
 *   cli_list.c, cli_check.c, cli_compare.c, cli_run.c, cli_explain.c, cli_generate.c   the commands
 *
 * Exit statuses: 0 every case counted passed (or was declared out), 1 ran and
 * something failed or was skipped without being declared, 2 a user error or
 * a rejected vector (printed as one line `lacs: <problem>` on stderr).
 */
#ifndef LACS_CLI_H
#define LACS_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "lacs/cases.h"
#include "lacs/check.h"
#include "lacs/cpu.h"
#include "lacs/output.h"
#include "lacs/plugin.h"
#include "lacs/verdict.h"

#define CLI_EXIT_FAILED 1
#define CLI_EXIT_USAGE 2

/* ---- cli.c: errors, options, text ---- */

/* A command: its name, what it does (usage), and its function (argv[0] is
 * the command's name; argv0 the program's). Add a command with one row of
 * cli.c's table. */
typedef struct {
    const char *name;
    const char *usage; /* the lines of `lacs --help` */
    int (*run)(int argc, char **argv, const char *argv0);
} cli_command;

/* Prints `lacs: <message>` (one line, made printable) on stderr and returns CLI_EXIT_USAGE. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether argv[*i] is the option `name` taking a value (`--name VALUE` or
 * `--name=VALUE`): 1 with *value set (and *i moved past VALUE), 0 if it is
 * another argument, -1 if the value is missing or empty (error printed). */
int cli_option_value(int argc, char **argv, int *i, const char *name, const char **value);
/* Whether `arg` is `--help` or `-h`. */
int cli_is_help(const char *arg);
/* Parses a whole decimal number, or a finite double; 0 on success, else -1. */
int cli_parse_long(const char *text, long *out);
int cli_parse_double(const char *text, double *out);
/* Parses --timeout's value: 0, or CLI_EXIT_USAGE (error printed). */
int cli_parse_timeout(const char *text, double *seconds);
/* Seconds on the monotonic clock. */
double cli_now(void);
/* `text` made printable (lacs_printable): control characters, terminal
 * escapes and invalid UTF-8 escaped. Points into one of a few rotating
 * buffers: use it at once (a printf's arguments). */
const char *cli_text(const char *text);

/* The commands; each returns the exit status. */
int cli_list(int argc, char **argv, const char *argv0);
int cli_check(int argc, char **argv, const char *argv0);
int cli_compare(int argc, char **argv, const char *argv0);
int cli_run(int argc, char **argv, const char *argv0);
int cli_explain(int argc, char **argv, const char *argv0);
int cli_generate(int argc, char **argv, const char *argv0);

/* ---- cli_cases.c: the cases under a vectors directory ---- */

typedef struct {
    const char *ops[64]; /* op names to keep (validated against lacs_ops()); n_ops = 0: every op */
    int n_ops;
    const char *tier;    /* "fp32", "bf16" or NULL */
} cli_filter;

/* Adds the ops of a comma-separated list to the filter: CLI_EXIT_USAGE
 * (error printed, listing the known ops) for an unknown one. */
int cli_filter_add_ops(cli_filter *filter, const char *list);
/* Checks a --tier value: CLI_EXIT_USAGE (error printed) unless fp32 or bf16. */
int cli_check_tier(const char *tier);
/* The vectors directory: `given` if not NULL, else vectors/core, else $LACS_VECTORS;
 * NULL (error printed) if it is not a directory. */
const char *cli_vectors_dir(const char *given);
/* Every case under dir/<op>/ that passes the filter, sorted by id, with the
 * manifest's missing and unlisted ones (lacs_cases_find; mode
 * LACS_CASES_VERIFY, LACS_CASES_READ). Returns 0, or CLI_EXIT_USAGE (error printed). */
int cli_find_cases(const char *dir, const cli_filter *filter, unsigned mode, lacs_case_list *cases);
/* "missing", "not listed", "cannot be loaded" (or "" for a case that loads). */
const char *cli_case_state_words(const lacs_case_entry *c);

/* ---- cli_impl.c: the implementation under test ---- */

typedef int (*cli_plugin_fn)(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                             int n_params, lacs_tensor *outputs, int n_outputs);
typedef enum {
    CLI_IMPL_REFERENCE = 0, /* builtin:reference: lacs_impl_reference */
    CLI_IMPL_PLUGIN = 1,    /* a shared library's lacs_plugin_run, loaded only in the case processes */
    CLI_IMPL_BUILTIN = 2    /* builtin:cpu (lacs_cpu_run) or builtin:cuda (build/liblacs_cuda.so's lacs_cuda_run),
                               called like a plugin; their errors in last_error() */
} cli_impl_kind;

typedef struct {
    cli_impl_kind kind;
    const char *spec;     /* as the user wrote it */
    char path[4096];      /* a plugin's file, as dlopen gets it */
    void *library;        /* dlopen handle: builtin:cuda in the parent; a plugin in a case process only */
    cli_plugin_fn run;    /* its lacs_plugin_run (lacs_cpu_run for builtin:cpu); a plugin's: in a case process */
    const char *(*last_error)(void); /* the reason of its last non-zero return: a builtin's own, a v1.1
                                        plugin's lacs_plugin_last_error; NULL if none */
    /* what it declares (ABI v1.1 lacs_plugin_describe; builtin:cuda's own limits); declared = 0: nothing */
    int declared;
    char name[256], ops[1024], tiers[64], unsupported[1024];
} cli_impl;

/* Opens the --impl argument: 0, or CLI_EXIT_USAGE with the error printed
 * (builtin:cuda not built or with no device here, builtin:cpu with a LACS_ISA
 * this CPU lacks, python:... runs under the Python harness, a plugin that
 * does not load, lacks lacs_plugin_run, or exits or crashes while loading:
 * a plugin is loaded first in a process of its own, within `timeout`
 * seconds, which also asks for its declaration). */
int cli_impl_open(const char *spec, cli_impl *impl, double timeout);
void cli_impl_close(cli_impl *impl);
/* `lacs check|explain --impl python:...` (argv[0] the command): execs the
 * Python harness, `$LACS_PYTHON -m lacs` (else /usr/bin/python3) with the same
 * arguments, the lacs package and liblacs.so beside this program first.
 * Returns only on error (CLI_EXIT_USAGE, printed). */
int cli_exec_python_harness(int argc, char **argv);
/* In a case process: loads a plugin (dlopen, lacs_plugin_run and the v1.1
 * symbols). 0, or -1 with why[]. */
int cli_impl_load_in_child(cli_impl *impl, char *why, size_t size);
/* The error text of the implementation's last failed call (a builtin's own, a
 * v1.1 plugin's reason), or NULL. */
const char *cli_impl_last_error(const cli_impl *impl);
/* Adds the implementation's declaration to a verdict. */
void cli_impl_declare(const cli_impl *impl, lacs_verdict *verdict);
/* builtin:cuda's status for `lacs list`: its library (LACS_CUDA_LIBRARY, else
 * liblacs_cuda.so beside this program), the device or why there is none, and
 * whether it was validated on one. Returns 1 when it can run here. */
int cli_cuda_status(char *text, size_t text_size);

/* ---- cli_child.c: one run of an implementation in a child process ---- */

typedef enum { CLI_RAN = 0, CLI_UNSUPPORTED = 1, CLI_BROKE = 2 } cli_outcome;

typedef struct {
    cli_impl *impl;
    const char *op;
    const lacs_tensor *inputs;
    int n_inputs;
    const lacs_param *params;
    int n_params;
    const lacs_tensor *outputs;  /* names and shapes of the outputs to give; their dtype and data are ignored */
    int n_outputs;
    /* A golden vector's case (NULL for `lacs run`): then the child runs it with
     * lacs_check_implementation (guards, read-only inputs, state carry) and
     * inputs, params and outputs must be the vector's own. */
    const lacs_vector *vector;
} cli_task;

typedef struct {
    pid_t pid;                   /* also its process group's id */
    unsigned char *shared;       /* the shared anonymous mapping: a status block, then the outputs */
    size_t shared_size;
    lacs_tensor outputs[LACS_CHECK_MAX_OUTPUTS]; /* F32, zero-filled, data in `shared` */
    int64_t shapes[LACS_CHECK_MAX_OUTPUTS][LACS_SAFETENSORS_MAX_DIMS];
    int n_outputs;
    double started, timeout;
    int is_reference;            /* builtin:reference: its errors are the reference's, not a plugin's */
    int finished;
    cli_outcome outcome;
    char message[768];           /* why it broke: "crashed: SIGSEGV (Segmentation fault)", ... */
    double seconds;
} cli_child;

/* Forks a child, in a process group of its own, that runs task on outputs in
 * shared memory. Returns 0, or -1 with c->finished = 1, c->outcome = CLI_BROKE
 * and the reason in c->message. From the first child on, SIGTERM, SIGINT and
 * SIGHUP end every running case's process group before they end this one. */
int cli_child_start(cli_child *c, const cli_task *task, double timeout_seconds);
/* Without blocking: 1 once the child has finished (outcome, message, seconds
 * set; killed if it ran past its timeout; whatever its process group still
 * holds, a forked grandchild, killed), else 0. */
int cli_child_poll(cli_child *c);
/* Blocks until cli_child_poll says finished. */
void cli_child_wait(cli_child *c);
/* Sleeps up to `seconds`, waking early when a child process ends. */
void cli_child_pause(double seconds);
/* Gives SIGCHLD back its mask from before the first child (blocked while
 * children run, for cli_child_pause): call before running other programs. */
void cli_child_unblock(void);
void cli_child_free(cli_child *c);

/* ---- cli_result.c: one case's result ---- */

typedef enum { CLI_PASS = 0, CLI_FAIL = 1, CLI_SKIP = 2 } cli_status;

typedef struct {
    char id[160], op[48], tier[8];   /* printable */
    cli_status status;
    int outcome;                     /* lacs_outcome, for the verdict */
    int strict;                      /* the case's level (lacs_vector_is_strict) */
    char *flags;                     /* malloc'd, space-separated, or NULL */
    double ratio;                    /* worst over the outputs (NaN for a case that did not get that far) */
    char *message;                   /* malloc'd, printable, or NULL */
    double seconds;
    int n_outputs;                   /* 0 when no comparison was made */
    lacs_output_check outputs[LACS_CHECK_MAX_OUTPUTS];
    char where[LACS_CHECK_MAX_OUTPUTS][160]; /* lacs_describe_element of each worst element */
    /* For the HTML report (--html), a failed case's error over time per output of the sequence layout
     * (lacs_check_error_over_time; malloc'd, NULL for the others), with its number of steps. */
    double *over_time[LACS_CHECK_MAX_OUTPUTS];
    int64_t over_time_steps[LACS_CHECK_MAX_OUTPUTS];
} cli_result;

void cli_result_init(cli_result *r, const char *id, const char *op, const char *tier);
void cli_result_free(cli_result *r);
/* Sets status FAIL (outcome FAIL) with a message (printf-style). */
void cli_result_fail(cli_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets status FAIL, outcome INVALID: the vector was rejected. */
void cli_result_invalid(cli_result *r, const char *message);
/* Sets status SKIP, outcome EXCLUDED: the declaration leaves the case out. */
void cli_result_excluded(cli_result *r, const char *why);
/* Compares `actual` (F32 or F64 tensors named like the goldens) with v's goldens
 * (lacs_check_outputs): PASS if the worst ratio is <= 1, FAIL otherwise (NaN
 * included) or when the outputs do not match the goldens' names and shapes. */
void cli_result_evaluate(cli_result *r, const lacs_vector *v, const lacs_tensor *actual, int n_actual);
/* Sets r from a child's outcome and, if it ran, evaluates its outputs. */
void cli_result_from_child(cli_result *r, const lacs_vector *v, const cli_child *c);
/* For a failed case whose outputs were compared: keeps the error over time of each output of the sequence
 * layout in r (for the HTML report). */
void cli_result_keep_over_time(cli_result *r, const lacs_vector *v, const lacs_tensor *actual);
/* "0.0123" (3 significant digits), "inf", "nan", or "-" for a skip. */
void cli_format_ratio(double ratio, char *buf, size_t size);
/* The output's index whose ratio is the worst (NaN counts as worst); -1 if none. */
int cli_worst_output(const cli_result *r);
/* `STATUS  RATIO  ID`, and for a FAIL the indented line saying where and why. */
void cli_print_result(FILE *out, const cli_result *r, int verbose);
/* The `where` text of output o: "o[b=0, t=37, head=1, v=5]: expected ..., got ..., allowed ...". */
void cli_describe_output(const cli_result *r, int o, char *buf, size_t size);

/* ---- cli_report.c: --json and --junit ---- */

typedef struct {
    const char *impl;
    const char *vectors;
    const char *manifest;         /* the manifest the vectors were verified against, or NULL (unverified) */
    int shard_index, shard_count; /* 0, 0 if not sharded */
    int passed, failed, skipped;
    const lacs_verdict *verdict;  /* NULL: none (lacs compare) */
} cli_run_summary;

/* Checks, before the run, that a report may be written to `path` (the rules
 * of lacs_output_file_write with LACS_OUTPUT_REPLACE | LACS_OUTPUT_NOT_GOLDEN, the
 * vectors directory protected): 0, or CLI_EXIT_USAGE with the error printed. */
int cli_report_check(const char *path, const char *vectors);
/* Writes a report through lacs_output_file_write: the one writer of every report
 * (--json, --junit, and those to come); 0, or CLI_EXIT_USAGE with the error printed. */
int cli_write_report(const char *path, const char *what, const char *text, size_t length, const char *vectors);
int cli_write_json(const char *path, const cli_run_summary *summary, const cli_result *results, int n);
int cli_write_junit(const char *path, const cli_run_summary *summary, const cli_result *results, int n);
/* The conformance report a person reads (lacs/report.h): the JSON report, with each failure's error over time,
 * rendered as one self-contained HTML page. */
int cli_write_html(const char *path, const cli_run_summary *summary, const cli_result *results, int n);

/* ---- cli_compare.c: outputs computed elsewhere ---- */

/* Widens a candidate file's outputs (each `<name>` or `expected.<name>`, F32, BF16 or F64) to F64 tensors
 * named like v's goldens (data malloc'd: free each); -1 with r failed (naming the output) if one is
 * missing or not floating-point. */
int cli_gather_outputs(const lacs_vector *v, const lacs_safetensors_file *candidate, const char *candidate_path,
                       lacs_tensor *actual, cli_result *r);

/* ---- cli_check.c: the verdict, as check prints it ---- */

/* Prints the verdict table, the `N passed, M failed, K skipped` line (with the
 * shard) and the citable closing line on stdout. */
void cli_print_verdict(const lacs_verdict *verdict, const cli_run_summary *summary);

#endif
