/* lacs: the command-line checker (build/lacs).
 *
 *   lacs list     the cases under a vectors directory and the implementations
 *   lacs check    run an implementation on the cases, compare with the goldens (SPEC.md 11)
 *   lacs compare  compare a file of outputs with one golden vector
 *   lacs run      run an op on the user's inputs
 *   lacs explain  what a case is, and where an implementation goes wrong on it
 *   lacs generate a golden vector of the user's shape (cli_generate.c, SPEC.md 10.8)
 *
 * This file holds main and its table of commands, the usage text, the helpers
 * every command uses to read its options, and the one way user errors are
 * reported: one line `lacs: <problem>` on stderr and exit status 2 (cli.h).
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

/* The commands, in the order of `lacs --help`. A new command is one row. */
static const cli_command commands[] = {
    {"list",
     "  list     [--op OP] [--tier fp32|bf16] [--vectors DIR] [--no-verify]\n"
     "           the cases and the implementations available\n",
     cli_list},
    {"check",
     "  check    --impl IMPL [--op OP ...] [--tier fp32|bf16] [--vectors DIR] [--json FILE] [--junit FILE]\n"
     "           [--html FILE] [--shard I/N] [--timeout SECONDS] [--jobs N] [--strict] [--no-verify] [--quiet]\n"
     "           [--verbose]\n"
     "           run IMPL on every case, compare its outputs with the goldens, give the verdict per op and tier\n",
     cli_check},
    {"compare",
     "  compare  GOLDEN.safetensors CANDIDATE.safetensors [--json FILE] [--no-verify]\n"
     "           compare a file of outputs with one golden vector\n",
     cli_compare},
    {"run",
     "  run      --op OP --impl IMPL --in IN.safetensors --out OUT.safetensors [--param NAME=VALUE ...]\n"
     "           [--tier fp32|bf16] [--timeout SECONDS] [--force]\n"
     "           compute an op on your own inputs\n",
     cli_run},
    {"explain",
     "  explain  CASE [--impl IMPL | --outputs FILE] [--vectors DIR] [--plot FILE.png] [--timeout SECONDS] [--force]\n"
     "           [--no-verify]\n"
     "           what a case tests; with --impl, where the implementation goes wrong\n",
     cli_explain},
    {"generate",
     "  generate (--op OP | --like CASE) --out DIR [--T N --H N ... --input NAME:RECIPE ... --reason TEXT]\n"
     "           a golden vector of your own shape (lacs generate --help)\n",
     cli_generate},
};
enum { N_COMMANDS = sizeof commands / sizeof commands[0] };

static void print_usage(FILE *out)
{
    fputs("usage: lacs <command> [options]   (lacs <command> --help for its options)\n\n", out);
    for (int i = 0; i < N_COMMANDS; i++)
        fputs(commands[i].usage, out);
    fputs("\n"
          "IMPL: builtin:reference (the double reference), builtin:cpu, builtin:cuda, PATH.so (a plugin exporting\n"
          "lacs_plugin_run, include/lacs/plugin.h), python:FILE_OR_MODULE:FUNCTION (run by /usr/bin/python3 -m lacs\n"
          "check). Vectors: --vectors DIR, else ./vectors/core, else $LACS_VECTORS; each file is verified against\n"
          "its MANIFEST.json unless --no-verify.\n"
          "Exit status: 0 nothing failed and nothing was skipped without being declared, 1 something failed or\n"
          "was skipped undeclared, 2 a usage or input error (a rejected vector included).\n",
          out);
}

int cli_error(const char *fmt, ...)
{
    char message[2048], shown[4096];
    va_list args;
    va_start(args, fmt);
    vsnprintf(message, sizeof message, fmt, args);
    va_end(args);
    /* One printable line, whatever the message quoted (a dlerror text, a file name). */
    lacs_printable(message, shown, sizeof shown);
    fflush(stdout);
    fprintf(stderr, "lacs: %s\n", shown);
    return CLI_EXIT_USAGE;
}

const char *cli_text(const char *text)
{
    static char buffers[8][2048];
    static int next;
    char *buffer = buffers[next];
    next = (next + 1) % 8;
    return lacs_printable(text ? text : "", buffer, sizeof buffers[0]);
}

int cli_option_value(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t length = strlen(name);
    if (strncmp(arg, name, length) != 0)
        return 0;
    if (arg[length] == '=') {
        *value = arg + length + 1;
    } else if (arg[length] != '\0') {
        return 0;
    } else if (*i + 1 >= argc) {
        cli_error("option %s needs a value (%s=VALUE or %s VALUE)", name, name, name);
        return -1;
    } else {
        *i += 1;
        *value = argv[*i];
    }
    if (!**value) {
        cli_error("option %s needs a value (%s=VALUE or %s VALUE)", name, name, name);
        return -1;
    }
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

int cli_parse_timeout(const char *text, double *seconds)
{
    if (cli_parse_double(text, seconds) != 0 || *seconds <= 0 || *seconds > 1e6)
        return cli_error("bad --timeout '%s': expected a positive number of seconds (at most 1e6)", text);
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
        print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const char *command = argv[1];
    if (cli_is_help(command) || strcmp(command, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(command, "--version") == 0) {
        printf("lacs (spec %s)\n", LACS_SPEC_VERSION);
        return 0;
    }
    /* Each command sees its own arguments, argv[0] being the command's name. */
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(command, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1, argv[0]);
    char names[256] = "";
    for (int i = 0; i < N_COMMANDS; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", commands[i].name);
    return cli_error("unknown command '%s' (commands: %s; see lacs --help)", command, names);
}
