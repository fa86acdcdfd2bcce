/* lacs list [--op OP] [--tier fp32|bf16] [--vectors DIR]: the cases found
 * under the vectors directory (id, flags, reason), then the implementations
 * `check` accepts. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char list_usage[] =
    "usage: lacs list [--op OP[,OP...]] [--tier fp32|bf16] [--vectors DIR] [--no-verify]\n"
    "\n"
    "Lists the cases under DIR/<op>/*.safetensors (id, flags, reason), sorted by id, each verified\n"
    "against the MANIFEST.json that covers DIR (missing, not listed or altered files say so),\n"
    "then the implementations that lacs check accepts.\n"
    "  --op OP        only this op (repeatable, or comma-separated)\n"
    "  --tier TIER    only fp32 or bf16 cases\n"
    "  --vectors DIR  default ./vectors/core, else $LACS_VECTORS\n"
    "  --no-verify    do not read the manifest\n";

static void print_implementations(void)
{
    printf("\nimplementations (--impl):\n");
    printf("  %-34s  %s\n", "builtin:reference", "the double reference, rounded to F32 outputs (lacs_impl_reference)");
    const char *isa = lacs_cpu_isa_name();
    char cpu[256];
    const char *products = isa ? lacs_cpu_bf16_products() : NULL;
    if (isa && products)
        snprintf(cpu, sizeof cpu, "the optimized CPU implementation (lacs_cpu_run): %s (bf16 products %s), %d threads",
                 isa, products, lacs_cpu_threads());
    else
        snprintf(cpu, sizeof cpu, "unavailable: %s", lacs_last_error());
    printf("  %-34s  %s\n", "builtin:cpu", cpu);
    char cuda[1200];
    cli_cuda_status(cuda, sizeof cuda);
    printf("  %-34s  the CUDA implementation (lacs_cuda_run): %s\n", "builtin:cuda", cuda);
    printf("  %-34s  %s\n", "PATH.so", "a shared library exporting lacs_plugin_run (ABI v1.1, include/lacs/plugin.h)");
    printf("  %-34s  %s\n", "python:FILE_OR_MODULE:FUNCTION",
           "a Python function, run by PYTHONPATH=python /usr/bin/python3 -m lacs check");
}

int cli_list(int argc, char **argv, const char *argv0)
{
    (void)argv0;
    cli_filter filter = {0};
    const char *vectors = NULL;
    int no_verify = 0;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int got;
        if (cli_is_help(argv[i])) {
            fputs(list_usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--no-verify") == 0) {
            no_verify = 1;
        } else if ((got = cli_option_value(argc, argv, &i, "--op", &value)) != 0) {
            if (got < 0 || cli_filter_add_ops(&filter, value) != 0)
                return CLI_EXIT_USAGE;
        } else if ((got = cli_option_value(argc, argv, &i, "--tier", &value)) != 0) {
            if (got < 0 || cli_check_tier(value) != 0)
                return CLI_EXIT_USAGE;
            filter.tier = value;
        } else if ((got = cli_option_value(argc, argv, &i, "--vectors", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            vectors = value;
        } else {
            return cli_error("list: unknown argument '%s' (see lacs list --help)", argv[i]);
        }
    }
    const char *dir = cli_vectors_dir(vectors);
    if (!dir)
        return CLI_EXIT_USAGE;
    lacs_case_list list;
    if (cli_find_cases(dir, &filter, (no_verify ? 0u : LACS_CASES_VERIFY) | LACS_CASES_READ, &list) != 0)
        return CLI_EXIT_USAGE;

    int id_width = 2, flags_width = 5;
    for (int i = 0; i < list.n; i++) {
        int id_length = (int)strlen(cli_text(list.cases[i].id)), flags_length = (int)strlen(list.cases[i].flags);
        id_width = id_length > id_width ? id_length : id_width;
        flags_width = flags_length > flags_width ? flags_length : flags_width;
    }
    printf("%d case%s under %s (%s%s)\n", list.n, list.n == 1 ? "" : "s", cli_text(dir),
           list.manifest ? "verified against " : "not verified", list.manifest ? cli_text(list.manifest) : "");
    if (list.n > 0)
        printf("  %-*s  %-*s  %s\n", id_width, "id", flags_width, "flags", "reason");
    for (int i = 0; i < list.n; i++) {
        lacs_case_entry *c = &list.cases[i];
        /* One word per column: the flags joined by commas. */
        for (char *p = c->flags; *p; p++)
            if (*p == ' ')
                *p = ',';
        if (c->state == LACS_CASE_OK)
            printf("  %-*s  %-*s  %s%s\n", id_width, cli_text(c->id), flags_width, c->flags, c->strict ? "(strict) " : "",
                   cli_text(c->reason));
        else
            printf("  %-*s  %-*s  %s: %s\n", id_width, cli_text(c->id), flags_width, "?", cli_case_state_words(c),
                   cli_text(c->reason));
    }
    lacs_cases_free(&list);
    print_implementations();
    return 0;
}
