/* lacs compare GOLDEN.safetensors CANDIDATE.safetensors [--json FILE]:
 * compares outputs computed elsewhere (a PyTorch kernel saved with
 * safetensors, say) with one golden vector.
 *
 * The candidate holds each output as `<name>` or `expected.<name>` (`o`,
 * `ht`, ...), in F32, BF16 or F64; every value is widened to double exactly
 * (lacs_values_to_double) and compared by lacs_check_outputs. Other tensors
 * in the candidate are ignored. A missing output fails, naming it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lacs/ops.h"

static const char compare_usage[] =
    "usage: lacs compare GOLDEN.safetensors CANDIDATE.safetensors [--json FILE] [--no-verify]\n"
    "\n"
    "Compares the outputs in CANDIDATE (named o, ht, ... or expected.o, ...; F32, BF16 or F64)\n"
    "with the goldens of the vector file GOLDEN. Prints each output's error/allowed ratio\n"
    "(1 is the limit) and PASS or FAIL; exit status 0 (PASS), 1 (FAIL) or 2 (unreadable or rejected file).\n"
    "GOLDEN must be listed, with its SHA-256, in the MANIFEST.json of its vectors directory\n"
    "(GOLDEN is DIR/<op>/<id>.safetensors; DIR/MANIFEST.json or DIR/../MANIFEST.json).\n"
    "  --no-verify   take GOLDEN as it is\n"
    "  --json FILE   write the result as lacs check --json does, with impl = CANDIDATE and\n"
    "                vectors = GOLDEN (replacing FILE)\n";

/* The candidate's tensor for golden output `name`: `name`, else `expected.name`. */
static const lacs_safetensors_tensor *find_candidate(const lacs_safetensors_file *f, const char *name)
{
    const lacs_safetensors_tensor *t = lacs_safetensors_find(f, name);
    if (t)
        return t;
    char prefixed[128];
    snprintf(prefixed, sizeof prefixed, "expected.%s", name);
    return lacs_safetensors_find(f, prefixed);
}

int cli_gather_outputs(const lacs_vector *v, const lacs_safetensors_file *candidate, const char *candidate_path,
                          lacs_tensor *actual, cli_result *r)
{
    for (int i = 0; i < v->n_outputs; i++) {
        const char *name = v->expected[i].name;
        const lacs_safetensors_tensor *t = find_candidate(candidate, name);
        if (!t) {
            cli_result_fail(r, "%s: output '%s' is missing (no tensor '%s' or 'expected.%s')", candidate_path, name,
                            name, name);
            return -1;
        }
        if (t->dtype != LACS_F32 && t->dtype != LACS_BF16 && t->dtype != LACS_F64) {
            cli_result_fail(r, "%s: output '%s' has dtype %s; expected F32, BF16 or F64", candidate_path, t->name,
                            lacs_dtype_name(t->dtype));
            return -1;
        }
        double *values = malloc((size_t)(t->count > 0 ? t->count : 1) * sizeof *values);
        if (!values) {
            cli_result_fail(r, "out of memory reading output '%s' of %s", name, candidate_path);
            return -1;
        }
        lacs_values_to_double(t->dtype, t->data, t->count, values);
        actual[i] = (lacs_tensor){.name = name, .dtype = LACS_F64, .ndim = t->ndim, .shape = t->shape,
                                  .data = values};
    }
    return 0;
}

int cli_compare(int argc, char **argv, const char *argv0)
{
    (void)argv0;
    const char *paths[2] = {NULL, NULL}, *json = NULL;
    int n_paths = 0, no_verify = 0;
    for (int i = 1; i < argc; i++) {
        const char *value;
        int got;
        if (cli_is_help(argv[i])) {
            fputs(compare_usage, stdout);
            return 0;
        }
        if (strcmp(argv[i], "--no-verify") == 0) {
            no_verify = 1;
        } else if ((got = cli_option_value(argc, argv, &i, "--json", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            json = value;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return cli_error("compare: unknown option '%s' (see lacs compare --help)", argv[i]);
        } else if (n_paths < 2) {
            paths[n_paths++] = argv[i];
        } else {
            return cli_error("compare: too many arguments: '%s' (see lacs compare --help)", argv[i]);
        }
    }
    if (n_paths != 2)
        return cli_error("compare: expected GOLDEN.safetensors CANDIDATE.safetensors (see lacs compare --help)");

    if (json && cli_report_check(json, NULL) != 0)
        return CLI_EXIT_USAGE;
    char sha256[65] = "", manifest[4096] = "";
    if (!no_verify && lacs_cases_manifest_hash(paths[0], sha256, manifest, sizeof manifest) != LACS_OK)
        return cli_error("%s", lacs_last_error());
    static lacs_vector v;
    if (lacs_vector_load_verified(paths[0], no_verify ? NULL : sha256, &v) != LACS_OK) {
        cli_error("%s", lacs_last_error());
        lacs_vector_free(&v);
        return CLI_EXIT_USAGE;
    }
    lacs_safetensors_file candidate;
    if (lacs_safetensors_read(paths[1], &candidate) != LACS_OK) {
        cli_error("%s", lacs_last_error());
        lacs_vector_free(&v);
        return CLI_EXIT_USAGE;
    }

    cli_result r;
    cli_result_init(&r, v.id, v.op, v.tier);
    lacs_tensor actual[LACS_CHECK_MAX_OUTPUTS] = {{0}};
    double started = cli_now();
    if (cli_gather_outputs(&v, &candidate, paths[1], actual, &r) == 0)
        cli_result_evaluate(&r, &v, actual, v.n_outputs);
    r.seconds = cli_now() - started;

    for (int i = 0; i < r.n_outputs; i++) {
        char ratio[32], where[1024];
        cli_format_ratio(r.outputs[i].ratio, ratio, sizeof ratio);
        cli_describe_output(&r, i, where, sizeof where);
        printf("%-10s ratio %-8s  worst %s\n", r.outputs[i].name, ratio, where);
    }
    cli_print_result(stdout, &r, 0);

    int status = r.status == CLI_PASS ? 0 : CLI_EXIT_FAILED;
    if (json) {
        cli_run_summary summary = {.impl = paths[1], .vectors = paths[0], .manifest = no_verify ? NULL : manifest,
                                   .passed = r.status == CLI_PASS, .failed = r.status == CLI_FAIL, .skipped = 0};
        if (cli_write_json(json, &summary, &r, 1) != 0)
            status = CLI_EXIT_USAGE;
    }
    for (int i = 0; i < v.n_outputs; i++)
        free(actual[i].data);
    cli_result_free(&r);
    lacs_safetensors_free(&candidate);
    lacs_vector_free(&v);
    return status;
}
