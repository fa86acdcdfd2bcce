/* lacs-zoo: runs one zoo plugin in-process over the golden vectors and
 * prints how far each case is from its tolerance (SPEC.md 11; the zoo).
 *
 *   lacs-zoo PLUGIN.so [--op OP]... [--tier fp32|bf16] [--vectors DIR] [--json FILE]
 *
 * For every vector DIR/<op>/<op>-<tier>-<case>.safetensors (DIR defaults to
 * vectors/core), in name order, one at a time: load it (lacs_vector_load),
 * run the plugin on it and compare (lacs_check_implementation: the same
 * comparison, state-carry protocol included, as the `lacs` checker), and
 * print one line
 *
 *   STATUS ratio normwise_error id [strict]
 *
 * ("strict" marks a case of the strict conformance level, SPEC.md 11.7; the
 * others are required)
 * STATUS is PASS (ratio <= 1), FAIL (ratio > 1), SKIP (the plugin returned
 * LACS_UNSUPPORTED) or ERROR (the vector did not load, or the plugin returned
 * an error or malformed outputs: the message goes to stderr). ratio is the
 * worst over the case's outputs of error / allowed; normwise_error the worst
 * normwise relative error of any output's worst block. At the end, a table
 * per (op, tier) of the cases run. --json FILE writes every case as
 * {"cases": [{"id", "op", "tier", "level", "status", "ratio", "normwise_error",
 * "message", "outputs": [{"name", "ratio", "normwise_ratio",
 * "elementwise_ratio", "golden_zero"}]}]} (a non-finite ratio is null;
 * "level" is the case's conformance level, "required" or "strict", SPEC.md
 * 11.7; "golden_zero" says whether every finite element of that golden is 0).
 *
 * The plugin runs in this process (a crash ends the run); it inherits the
 * environment, so LACS_ZOO_* variables select bugs, chunk sizes and so on.
 * Exit status: 0 if no case failed or errored, 1 otherwise (or if no case
 * was selected), 2 on bad usage or a plugin that does not load.
 * A test tool for the zoo; the checker users run is build/lacs.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/check.h"
#include "lacs/ops.h"
#include "lacs/plugin.h"
#include "lacs/types.h"

#define MAX_OPS 64

typedef int (*plugin_fn)(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                         int n_params, lacs_tensor *outputs, int n_outputs);

typedef struct {
    const char *plugin_path;
    const char *ops[MAX_OPS];
    int n_ops;
    const char *tier;        /* NULL: both */
    const char *vectors_dir;
    const char *json_path;   /* NULL: no JSON */
} options;

/* One (op, tier) row of the final table. */
typedef struct {
    char op[48], tier[8];
    int cases, passed, failed, skipped, errors;
    double worst_ratio, worst_normwise;
    char worst_id[160];
} summary_row;

typedef struct {
    summary_row *rows;
    int n_rows, capacity;
} summary;

/* The checker's implementation type, with the plugin's function as context
 * (a function pointer cannot travel through void * in ISO C: it is wrapped). */
typedef struct {
    plugin_fn run;
} plugin_context;

static int call_plugin(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                       const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    const plugin_context *plugin = context;
    return plugin->run(op, inputs, n_inputs, params, n_params, outputs, n_outputs);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: lacs-zoo PLUGIN.so [--op OP]... [--tier fp32|bf16] [--vectors DIR (default vectors/core)]\n"
                 "                [--json FILE]\n");
}

static int parse_options(int argc, char **argv, options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->vectors_dir = "vectors/core";
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const int has_value = i + 1 < argc;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(arg, "--op") == 0 && has_value) {
            if (opt->n_ops == MAX_OPS) {
                fprintf(stderr, "lacs-zoo: at most %d --op options\n", MAX_OPS);
                return 2;
            }
            opt->ops[opt->n_ops++] = argv[++i];
        } else if (strcmp(arg, "--tier") == 0 && has_value) {
            opt->tier = argv[++i];
            if (strcmp(opt->tier, "fp32") != 0 && strcmp(opt->tier, "bf16") != 0) {
                fprintf(stderr, "lacs-zoo: --tier must be fp32 or bf16, not '%s'\n", opt->tier);
                return 2;
            }
        } else if (strcmp(arg, "--vectors") == 0 && has_value) {
            opt->vectors_dir = argv[++i];
        } else if (strcmp(arg, "--json") == 0 && has_value) {
            opt->json_path = argv[++i];
        } else if (arg[0] == '-') {
            fprintf(stderr, "lacs-zoo: unknown option or missing value: '%s'\n", arg);
            usage(stderr);
            return 2;
        } else if (opt->plugin_path) {
            fprintf(stderr, "lacs-zoo: one plugin at a time ('%s' and '%s')\n", opt->plugin_path, arg);
            return 2;
        } else {
            opt->plugin_path = arg;
        }
    }
    if (!opt->plugin_path) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Loads the plugin and finds lacs_plugin_run. A path without a slash is
 * taken relative to the current directory, not searched for. */
static void *load_plugin(const char *path, plugin_fn *run)
{
    char local[4096];
    if (!strchr(path, '/')) {
        snprintf(local, sizeof local, "./%s", path);
        path = local;
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        fprintf(stderr, "lacs-zoo: cannot load plugin: %s\n", dlerror());
        return NULL;
    }
    void *symbol = dlsym(handle, "lacs_plugin_run");
    if (!symbol) {
        fprintf(stderr, "lacs-zoo: %s: no symbol lacs_plugin_run (plugin ABI v1, lacs/plugin.h)\n", path);
        dlclose(handle);
        return NULL;
    }
    *run = (plugin_fn)symbol;
    return handle;
}

static int compare_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of `dir` (without "." and ".."), sorted; NULL if it cannot be
 * read. `want_files`: regular files ending in .safetensors, else directories. */
static char **sorted_entries(const char *dir, int want_files, int *count)
{
    *count = 0;
    DIR *d = opendir(dir);
    if (!d)
        return NULL;
    char **names = NULL;
    int capacity = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        const size_t len = strlen(e->d_name);
        const char *suffix = ".safetensors";
        const int is_vector = len > strlen(suffix) && strcmp(e->d_name + len - strlen(suffix), suffix) == 0;
        if (want_files != is_vector)
            continue;
        if (*count == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            char **grown = realloc(names, (size_t)capacity * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        if (!(names[*count] = strdup(e->d_name)))
            break;
        (*count)++;
    }
    closedir(d);
    if (names)
        qsort(names, (size_t)*count, sizeof *names, compare_names);
    return names ? names : calloc(1, sizeof *names);
}

static void free_entries(char **names, int count)
{
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

static int op_selected(const options *opt, const char *op)
{
    if (opt->n_ops == 0)
        return 1;
    for (int i = 0; i < opt->n_ops; i++)
        if (strcmp(opt->ops[i], op) == 0)
            return 1;
    return 0;
}

/* From the file name <op>-<tier>-<case>.safetensors, before loading it. */
static int tier_selected(const options *opt, const char *op, const char *file)
{
    if (!opt->tier)
        return 1;
    const size_t n = strlen(op);
    return strncmp(file, op, n) == 0 && file[n] == '-' && strncmp(file + n + 1, opt->tier, strlen(opt->tier)) == 0 &&
           file[n + 1 + strlen(opt->tier)] == '-';
}

static summary_row *summary_find(summary *s, const char *op, const char *tier)
{
    for (int i = 0; i < s->n_rows; i++)
        if (strcmp(s->rows[i].op, op) == 0 && strcmp(s->rows[i].tier, tier) == 0)
            return &s->rows[i];
    if (s->n_rows == s->capacity) {
        const int capacity = s->capacity ? 2 * s->capacity : 64;
        summary_row *grown = realloc(s->rows, (size_t)capacity * sizeof *grown);
        if (!grown)
            return NULL;
        s->rows = grown;
        s->capacity = capacity;
    }
    summary_row *row = &s->rows[s->n_rows++];
    memset(row, 0, sizeof *row);
    snprintf(row->op, sizeof row->op, "%s", op);
    snprintf(row->tier, sizeof row->tier, "%s", tier);
    return row;
}

/* The worst ratio counts a non-finite one (a NaN where the golden is finite)
 * as the worst of all. */
static int worse(double candidate, double current)
{
    return isnan(candidate) ? !isnan(current) : candidate > current && !isnan(current);
}

static void add_number_or_null(cJSON *object, const char *name, double value)
{
    if (isfinite(value))
        cJSON_AddNumberToObject(object, name, value);
    else
        cJSON_AddNullToObject(object, name);
}

/* Whether every finite element of golden i is zero (SPEC.md 11.4 leaves the others to the IEEE rules). */
static int golden_is_zero(const lacs_vector *v, int i)
{
    const double *y = v->expected[i].data;
    for (int64_t j = 0; j < lacs_tensor_count(&v->expected[i]); j++)
        if (isfinite(y[j]) && y[j] != 0)
            return 0;
    return 1;
}

/* One case; v and r (each output's ratios) only when the comparison ran. */
static void add_json_case(cJSON *cases, const char *id, const char *op, const char *tier, const char *status,
                          double ratio, double normwise, const char *message, const lacs_vector *v,
                          const lacs_check_result *r)
{
    if (!cases)
        return;
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "op", op);
    cJSON_AddStringToObject(c, "tier", tier);
    if (v)
        cJSON_AddStringToObject(c, "level", v->strict ? "strict" : "required");
    cJSON_AddStringToObject(c, "status", status);
    if (isfinite(ratio))
        cJSON_AddNumberToObject(c, "ratio", ratio);
    else
        cJSON_AddNullToObject(c, "ratio");
    if (isfinite(normwise))
        cJSON_AddNumberToObject(c, "normwise_error", normwise);
    else
        cJSON_AddNullToObject(c, "normwise_error");
    cJSON_AddStringToObject(c, "message", message ? message : "");
    if (v && r) {
        cJSON *outputs = cJSON_AddArrayToObject(c, "outputs");
        for (int i = 0; i < r->n_outputs; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", r->outputs[i].name);
            add_number_or_null(o, "ratio", r->outputs[i].ratio);
            add_number_or_null(o, "normwise_ratio", r->outputs[i].normwise_ratio);
            add_number_or_null(o, "elementwise_ratio", r->outputs[i].elementwise_ratio);
            cJSON_AddBoolToObject(o, "golden_zero", golden_is_zero(v, i));
            cJSON_AddItemToArray(outputs, o);
        }
    }
    cJSON_AddItemToArray(cases, c);
}

/* Runs one vector file; returns 1 if it failed or errored (and counts it in
 * *strict_failures if the case is strict). */
static int run_case(const char *path, const char *dir_op, plugin_context *plugin, summary *s, cJSON *cases,
                    int *strict_failures)
{
    lacs_vector v;
    if (lacs_vector_load(path, &v) != LACS_OK) {
        const char *message = lacs_last_error();
        printf("ERROR - - %s\n", path);
        fprintf(stderr, "lacs-zoo: %s\n", message);
        add_json_case(cases, path, dir_op, "", "ERROR", NAN, NAN, message, NULL, NULL);
        lacs_vector_free(&v);
        return 1;
    }
    lacs_check_result r;
    const int rc = lacs_check_implementation(&v, call_plugin, plugin, &r, NULL);
    const char *status;
    double ratio = NAN, normwise = NAN;
    char message[2048] = "";
    if (rc == LACS_UNSUPPORTED) {
        status = "SKIP";
    } else if (rc != LACS_OK) {
        status = "ERROR";
        snprintf(message, sizeof message, "%s", lacs_last_error());
    } else {
        ratio = r.ratio;
        normwise = 0;
        for (int i = 0; i < r.n_outputs; i++)
            if (worse(r.outputs[i].normwise_error, normwise))
                normwise = r.outputs[i].normwise_error;
        status = ratio <= 1 ? "PASS" : "FAIL";
        if (ratio > 1 || isnan(ratio)) {
            /* the output and element that failed worst, in words */
            int worst = 0;
            for (int i = 1; i < r.n_outputs; i++)
                if (worse(r.outputs[i].ratio, r.outputs[worst].ratio))
                    worst = i;
            const lacs_output_check *o = &r.outputs[worst];
            char where[256];
            lacs_describe_element(&v, worst, o->worst_element, where, sizeof where);
            snprintf(message, sizeof message,
                     "%s: ratio %.3g (normwise %.3g, elementwise %.3g); worst element %s = %.9g, expected %.9g, "
                     "allowed error %.3g",
                     o->name, o->ratio, o->normwise_ratio, o->elementwise_ratio, where, o->actual_value,
                     o->expected_value, o->allowed_error);
        }
    }
    if (rc == LACS_UNSUPPORTED)
        printf("SKIP - - %s\n", v.id);
    else if (rc != LACS_OK)
        printf("ERROR - - %s\n", v.id);
    else
        printf("%s %.3g %.3g %s%s\n", status, ratio, normwise, v.id, v.strict ? " strict" : "");
    if (rc != LACS_OK && rc != LACS_UNSUPPORTED)
        fprintf(stderr, "lacs-zoo: %s\n", message); /* names the case already */
    else if (message[0])
        fprintf(stderr, "lacs-zoo: %s: %s\n", v.id, message);
    fflush(stdout);

    summary_row *row = summary_find(s, v.op, v.tier);
    if (row) {
        row->cases++;
        if (rc == LACS_UNSUPPORTED) {
            row->skipped++;
        } else if (rc != LACS_OK) {
            row->errors++;
        } else {
            if (ratio <= 1)
                row->passed++;
            else
                row->failed++;
            if (row->passed + row->failed == 1 || worse(ratio, row->worst_ratio)) {
                row->worst_ratio = ratio;
                snprintf(row->worst_id, sizeof row->worst_id, "%s", v.id);
            }
            if (worse(normwise, row->worst_normwise))
                row->worst_normwise = normwise;
        }
    }
    add_json_case(cases, v.id, v.op, v.tier, status, ratio, normwise, message, &v, rc == LACS_OK ? &r : NULL);
    const int strict = v.strict;
    lacs_vector_free(&v);
    if (rc == LACS_UNSUPPORTED)
        return 0;
    const int failed = rc != LACS_OK || !(ratio <= 1);
    *strict_failures += failed && strict;
    return failed;
}

static void print_summary(const summary *s)
{
    printf("\n%-22s %-5s %5s %5s %5s %5s %5s %11s %11s  %s\n", "op", "tier", "cases", "pass", "fail", "skip", "error",
           "worst ratio", "worst error", "worst case");
    for (int i = 0; i < s->n_rows; i++) {
        const summary_row *row = &s->rows[i];
        if (row->passed + row->failed == 0)
            printf("%-22s %-5s %5d %5d %5d %5d %5d %11s %11s  %s\n", row->op, row->tier, row->cases, row->passed,
                   row->failed, row->skipped, row->errors, "-", "-", "-");
        else
            printf("%-22s %-5s %5d %5d %5d %5d %5d %11.3g %11.3g  %s\n", row->op, row->tier, row->cases, row->passed,
                   row->failed, row->skipped, row->errors, row->worst_ratio, row->worst_normwise, row->worst_id);
    }
}

static int write_json(const char *path, cJSON *root)
{
    char *text = cJSON_Print(root);
    FILE *f = text ? fopen(path, "w") : NULL;
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f)
        ok = fclose(f) == 0 && ok;
    free(text);
    if (!ok)
        fprintf(stderr, "lacs-zoo: cannot write %s\n", path);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    options opt;
    int rc = parse_options(argc, argv, &opt);
    if (rc)
        return rc;
    plugin_context plugin;
    void *handle = load_plugin(opt.plugin_path, &plugin.run);
    if (!handle)
        return 2;

    int n_dirs;
    char **dirs = sorted_entries(opt.vectors_dir, 0, &n_dirs);
    if (!dirs) {
        fprintf(stderr, "lacs-zoo: cannot read the vector directory %s\n", opt.vectors_dir);
        dlclose(handle);
        return 2;
    }
    for (int i = 0; i < opt.n_ops; i++) {
        int found = 0;
        for (int j = 0; j < n_dirs && !found; j++)
            found = strcmp(dirs[j], opt.ops[i]) == 0;
        if (!found)
            fprintf(stderr, "lacs-zoo: no directory %s/%s: no vectors for op '%s'\n", opt.vectors_dir, opt.ops[i],
                    opt.ops[i]);
    }

    cJSON *root = opt.json_path ? cJSON_CreateObject() : NULL;
    cJSON *cases = root ? cJSON_AddArrayToObject(root, "cases") : NULL;
    summary s = {0};
    int failures = 0, n_cases = 0, strict_failures = 0;
    for (int i = 0; i < n_dirs; i++) {
        if (!op_selected(&opt, dirs[i]))
            continue;
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/%s", opt.vectors_dir, dirs[i]);
        int n_files;
        char **files = sorted_entries(dir, 1, &n_files);
        for (int j = 0; files && j < n_files; j++) {
            if (!tier_selected(&opt, dirs[i], files[j]))
                continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir, files[j]);
            failures += run_case(path, dirs[i], &plugin, &s, cases, &strict_failures);
            n_cases++;
        }
        if (files)
            free_entries(files, n_files);
    }
    free_entries(dirs, n_dirs);
    if (n_cases == 0) {
        fprintf(stderr, "lacs-zoo: no vectors selected under %s\n", opt.vectors_dir);
        failures++;
    }
    print_summary(&s);
    printf("%d cases, %d failed or errored (%d of them strict)\n", n_cases, failures, strict_failures);
    if (root && write_json(opt.json_path, root))
        failures++;
    cJSON_Delete(root);
    free(s.rows);
    dlclose(handle);
    return failures ? 1 : 0;
}
