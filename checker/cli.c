/* lacs: the command-line checker (build/lacs).
 *
 *   lacs list     the cases under a vectors directory and the implementations
 *   lacs check    run an implementation on the cases, compare with the goldens (SPEC.md 11)
 *   lacs compare  compare a file of outputs with one golden vector
 *   lacs run      run an op on the user's inputs
 *   lacs explain  what a case is, and where an implementation goes wrong on it
 *   lacs generate a golden vector of the user's shape (cli_generate.c, SPEC.md 10.8)
 *
 * This file holds main, the usage text, the helpers every command uses to
 * read its options, and the one way user errors are reported: one line
 * `lacs: <problem>` on stderr and exit status 2 (cli.h).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "lacs/types.h"

static const char usage_text[] =
    "usage: lacs <command> [options]   (lacs <command> --help for its options)\n"
    "\n"
    "  list     [--op OP] [--tier fp32|bf16] [--vectors DIR]\n"
    "           the cases and the implementations available\n"
    "  check    --impl IMPL [--op OP ...] [--tier fp32|bf16] [--vectors DIR] [--json FILE] [--junit FILE]\n"
    "           [--shard I/N] [--timeout SECONDS] [--jobs N] [--quiet] [--verbose]\n"
    "           run IMPL on every case and compare its outputs with the goldens\n"
    "  compare  GOLDEN.safetensors CANDIDATE.safetensors [--json FILE]\n"
    "           compare a file of outputs with one golden vector\n"
    "  run      --op OP --impl IMPL --in IN.safetensors --out OUT.safetensors [--param NAME=VALUE ...]\n"
    "           [--tier fp32|bf16] [--force]\n"
    "           compute an op on your own inputs\n"
    "  explain  CASE [--impl IMPL] [--vectors DIR] [--plot FILE.png] [--force]\n"
    "           what a case tests; with --impl, where the implementation goes wrong\n"
    "  generate (--op OP | --like CASE) --out DIR [--T N --H N ... --input NAME:RECIPE ... --reason TEXT]\n"
    "           a golden vector of your own shape (lacs generate --help)\n"
    "\n"
    "IMPL: builtin:reference (the double reference), PATH.so (a plugin exporting lacs_plugin_run,\n"
    "include/lacs/plugin.h), python:FILE_OR_MODULE:FUNCTION (run by /usr/bin/python3 -m lacs check).\n"
    "Vectors: --vectors DIR, else ./vectors/core, else $LACS_VECTORS.\n"
    "Exit status: 0 every case passed, 1 something failed, 2 a usage or input error.\n";

int cli_error(const char *fmt, ...)
{
    char message[2048];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    /* One line, whatever the message quoted (a dlerror text, a file name). */
    for (char *p = message; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    fflush(stdout);
    fprintf(stderr, "lacs: %s\n", message);
    return CLI_EXIT_USAGE;
}

int cli_option_value(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t length = strlen(name);
    if (strncmp(arg, name, length) != 0)
        return 0;
    if (arg[length] == '=') {
        *value = arg + length + 1;
        return 1;
    }
    if (arg[length] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        cli_error("option %s needs a value", name);
        return -1;
    }
    *i += 1;
    *value = argv[*i];
    return 1;
}

int cli_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

int cli_parse_long(const char *text, long *out)
{
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0)
        return -1;
    *out = value;
    return 0;
}

int cli_parse_double(const char *text, double *out)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(value))
        return -1;
    *out = value;
    return 0;
}

double cli_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    const char *command = argv[1];
    if (cli_is_help(command) || strcmp(command, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(command, "--version") == 0) {
        printf("lacs (spec %s)\n", LACS_SPEC_VERSION);
        return 0;
    }
    /* Each command sees its own arguments, argv[0] being the command's name. */
    int command_argc = argc - 1;
    char **command_argv = argv + 1;
    if (strcmp(command, "list") == 0)
        return cli_list(command_argc, command_argv);
    if (strcmp(command, "check") == 0)
        return cli_check(command_argc, command_argv);
    if (strcmp(command, "compare") == 0)
        return cli_compare(command_argc, command_argv);
    if (strcmp(command, "run") == 0)
        return cli_run(command_argc, command_argv);
    if (strcmp(command, "explain") == 0)
        return cli_explain(command_argc, command_argv, argv[0]);
    if (strcmp(command, "generate") == 0)
        return cli_generate(command_argc, command_argv);
    return cli_error("unknown command '%s' (commands: list, check, compare, run, explain, generate; "
                     "see lacs --help)", command);
}
