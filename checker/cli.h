/* The `lacs` command-line checker: what its source files share.
 *
 *   cli.c          main: the commands, usage, option parsing helpers, `lacs: <problem>` errors
 *   cli_cases.c    finding the cases under a vectors directory, filters, shards
 *   cli_impl.c     choosing an implementation (builtin:reference, a plugin .so)
 *   cli_child.c    running an implementation on one case in a child process, with a timeout
 *   cli_result.c   checking outputs against the goldens and printing the result
 *   cli_report.c   the --json and --junit reports
 *   cli_list.c, cli_check.c, cli_compare.c, cli_run.c, cli_explain.c, cli_generate.c   the commands
 *
 * Exit statuses: 0 all passed, 1 ran and something failed, 2 a user error
 * (printed as one line `lacs: <problem>` on stderr).
 */
#ifndef LACS_CLI_H
#define LACS_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "lacs/check.h"
#include "lacs/cpu.h"
#include "lacs/plugin.h"

#define CLI_EXIT_FAILED 1
#define CLI_EXIT_USAGE 2

/* ---- cli.c: errors and options ---- */

/* Prints `lacs: <message>` (one line) on stderr and returns CLI_EXIT_USAGE. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether argv[*i] is the option `name` taking a value (`--name VALUE` or
 * `--name=VALUE`): 1 with *value set (and *i moved past VALUE), 0 if it is
 * another argument, -1 if the value is missing (error printed). */
int cli_option_value(int argc, char **argv, int *i, const char *name, const char **value);
/* Whether `arg` is `--help` or `-h`. */
int cli_is_help(const char *arg);
/* Parses a whole decimal number, or a finite double; 0 on success, else -1. */
int cli_parse_long(const char *text, long *out);
int cli_parse_double(const char *text, double *out);
/* Seconds on the monotonic clock. */
double cli_now(void);

/* The commands; each returns the exit status. */
int cli_list(int argc, char **argv);
int cli_check(int argc, char **argv);
int cli_compare(int argc, char **argv);
int cli_run(int argc, char **argv);
int cli_explain(int argc, char **argv, const char *argv0);
int cli_generate(int argc, char **argv);

/* ---- cli_cases.c: the cases under a vectors directory ---- */

typedef struct {
    char *path;
    char id[160], op[48], tier[8];
    char *flags;      /* space-separated, from the metadata; "" if the file does not load */
    char *reason;     /* from the metadata, or the load error */
    int loads;        /* whether lacs_vector_load accepted the file during discovery */
} cli_case;

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
/* Every case under dir/<op>/ that passes the filter, sorted by id. Files are
 * loaded one at a time to read their op, tier, flags and reason. Returns 0,
 * or CLI_EXIT_USAGE (error printed) if the directory cannot be read. */
int cli_find_cases(const char *dir, const cli_filter *filter, cli_case **cases, int *n_cases);
void cli_free_cases(cli_case *cases, int n_cases);

/* ---- cli_impl.c: the implementation under test ---- */

typedef int (*cli_plugin_fn)(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                             int n_params, lacs_tensor *outputs, int n_outputs);
typedef enum {
    CLI_IMPL_REFERENCE = 0, /* builtin:reference: lacs_impl_reference */
    CLI_IMPL_PLUGIN = 1,    /* a shared library's lacs_plugin_run */
    CLI_IMPL_BUILTIN = 2    /* builtin:cpu (lacs_cpu_run) or builtin:cuda (build/liblacs_cuda.so's lacs_cuda_run),
                               called like a plugin; their errors in last_error() */
} cli_impl_kind;

typedef struct {
    cli_impl_kind kind;
    const char *spec;     /* as the user wrote it */
    void *library;        /* dlopen handle of a plugin */
    cli_plugin_fn run;    /* its lacs_plugin_run (lacs_cpu_run for builtin:cpu) */
    const char *(*last_error)(void); /* a builtin's error text: lacs_last_error, or builtin:cuda's own */
} cli_impl;

/* Opens the --impl argument: 0, or CLI_EXIT_USAGE with the error printed
 * (builtin:cuda not built or with no device here, builtin:cpu with a LACS_ISA
 * this CPU lacks, python:... runs under the Python harness, a library without
 * lacs_plugin_run). */
int cli_impl_open(const char *spec, cli_impl *impl);
void cli_impl_close(cli_impl *impl);
/* The error text of the implementation's last failed call (a builtin's own). */
const char *cli_impl_last_error(const cli_impl *impl);
/* builtin:cuda's status for `lacs list`: its library (LACS_CUDA_LIBRARY, else
 * liblacs_cuda.so beside this program), the device or why there is none, and
 * whether it was validated on one. Returns 1 when it can run here. */
int cli_cuda_status(char *text, size_t text_size);

/* ---- cli_child.c: one run of an implementation in a child process ---- */

typedef enum { CLI_RAN = 0, CLI_UNSUPPORTED = 1, CLI_BROKE = 2 } cli_outcome;

typedef struct {
    const cli_impl *impl;
    const char *op;
    const lacs_tensor *inputs;
    int n_inputs;
    const lacs_param *params;
    int n_params;
    const lacs_tensor *outputs;  /* names and shapes of the outputs to give; their dtype and data are ignored */
    int n_outputs;
    /* A golden vector's case (NULL for `lacs run`): then the child runs it with
     * lacs_check_implementation (state carry included) and inputs, params and
     * outputs must be the vector's own. */
    const lacs_vector *vector;
} cli_task;

typedef struct {
    pid_t pid;
    unsigned char *shared;       /* the shared anonymous mapping: a status block, then the outputs */
    size_t shared_size;
    lacs_tensor outputs[LACS_CHECK_MAX_OUTPUTS]; /* F32, zero-filled, data in `shared` */
    int64_t shapes[LACS_CHECK_MAX_OUTPUTS][LACS_SAFETENSORS_MAX_DIMS];
    int n_outputs;
    double started, timeout;
    int is_reference;            /* builtin:reference: its errors are the reference's, not a plugin's */
    int finished;
    cli_outcome outcome;
    char message[512];           /* why it broke: "crashed: SIGSEGV (Segmentation fault)", ... */
    double seconds;
} cli_child;

/* Forks a child that runs task on outputs in shared memory. Returns 0, or -1
 * with c->finished = 1, c->outcome = CLI_BROKE and the reason in c->message. */
int cli_child_start(cli_child *c, const cli_task *task, double timeout_seconds);
/* Without blocking: 1 once the child has finished (outcome, message,
 * seconds set; killed if it ran past its timeout), else 0. */
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
    char id[160], op[48], tier[8];
    cli_status status;
    double ratio;                 /* worst over the outputs (NaN for a case that did not get that far) */
    char *message;                /* malloc'd, or NULL */
    double seconds;
    int n_outputs;                /* 0 when no comparison was made */
    lacs_output_check outputs[LACS_CHECK_MAX_OUTPUTS];
    char where[LACS_CHECK_MAX_OUTPUTS][160]; /* lacs_describe_element of each worst element */
} cli_result;

void cli_result_init(cli_result *r, const char *id, const char *op, const char *tier);
void cli_result_free(cli_result *r);
/* Sets status FAIL with a message (printf-style). */
void cli_result_fail(cli_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Compares `actual` (F32 or F64 tensors named like the goldens) with v's goldens
 * (lacs_check_outputs): PASS if the worst ratio is <= 1, FAIL otherwise (NaN
 * included) or when the outputs do not match the goldens' names and shapes. */
void cli_result_evaluate(cli_result *r, const lacs_vector *v, const lacs_tensor *actual, int n_actual);
/* Sets r from a child's outcome and, if it ran, evaluates its outputs. */
void cli_result_from_child(cli_result *r, const lacs_vector *v, const cli_child *c);
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
    int shard_index, shard_count; /* 0, 0 if not sharded */
    int passed, failed, skipped;
} cli_run_summary;

/* Each writes FILE.tmp and renames it onto FILE; 0, or CLI_EXIT_USAGE with
 * the error printed. */
int cli_write_json(const char *path, const cli_run_summary *summary, const cli_result *results, int n);
int cli_write_junit(const char *path, const cli_run_summary *summary, const cli_result *results, int n);

#endif
