/* lacs CLI: finding the cases under a vectors directory (SPEC.md 10.1).
 *
 * A vectors directory holds one folder per op, `<dir>/<op>/<id>.safetensors`.
 * Every such file is a case; its id is the file name without the extension,
 * its op, tier, flags and reason are read from the file's own metadata
 * (lacs_vector_load), one file at a time so that a large set never sits in
 * memory at once. A file that does not load is still a case (op from its
 * folder, tier from its id): `check` reports it as a FAIL with the loader's
 * message rather than silently dropping it.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lacs/check.h"
#include "lacs/ops.h"

static const char vectors_suffix[] = ".safetensors";

static int is_directory(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "linear_attn, linear_attn_postnorm, ..." */
static void known_ops(char *buf, size_t size)
{
    int count;
    const lacs_op_info *ops = lacs_ops(&count);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && used < size; i++) {
        int n = snprintf(buf + used, size - used, "%s%s", i ? ", " : "", ops[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

int cli_filter_add_ops(cli_filter *filter, const char *list)
{
    const char *p = list;
    int added = 0;
    while (*p) {
        size_t length = strcspn(p, ",");
        if (length > 0) {
            char name[64];
            if (length >= sizeof name)
                length = sizeof name - 1;
            memcpy(name, p, length);
            name[length] = '\0';
            const lacs_op_info *info = lacs_op_find(name);
            if (!info) {
                char known[1024];
                known_ops(known, sizeof known);
                return cli_error("unknown op '%s' (known ops: %s)", name, known);
            }
            int already = 0;
            for (int i = 0; i < filter->n_ops; i++)
                already |= strcmp(filter->ops[i], info->name) == 0;
            if (!already) {
                if (filter->n_ops >= (int)(sizeof filter->ops / sizeof filter->ops[0]))
                    return cli_error("too many --op values");
                filter->ops[filter->n_ops++] = info->name; /* static storage of the op table */
            }
            added++;
        }
        p += length;
        if (*p == ',')
            p++;
    }
    if (added == 0)
        return cli_error("--op needs an op name");
    return 0;
}

int cli_check_tier(const char *tier)
{
    if (strcmp(tier, "fp32") == 0 || strcmp(tier, "bf16") == 0)
        return 0;
    return cli_error("unknown tier '%s' (tiers: fp32, bf16)", tier);
}

const char *cli_vectors_dir(const char *given)
{
    if (given) {
        if (!is_directory(given)) {
            cli_error("vectors directory '%s' %s", given,
                      access(given, F_OK) == 0 ? "is not a directory" : "does not exist");
            return NULL;
        }
        return given;
    }
    if (is_directory("vectors/core"))
        return "vectors/core";
    const char *from_env = getenv("LACS_VECTORS");
    if (from_env && *from_env) {
        if (!is_directory(from_env)) {
            cli_error("vectors directory '%s' (from LACS_VECTORS) does not exist", from_env);
            return NULL;
        }
        return from_env;
    }
    cli_error("no vectors directory: ./vectors/core does not exist and LACS_VECTORS is not set (use --vectors DIR)");
    return NULL;
}

static int op_wanted(const cli_filter *filter, const char *op)
{
    if (filter->n_ops == 0)
        return 1;
    for (int i = 0; i < filter->n_ops; i++)
        if (strcmp(filter->ops[i], op) == 0)
            return 1;
    return 0;
}

static int has_suffix(const char *name, const char *suffix)
{
    size_t n = strlen(name), s = strlen(suffix);
    return n > s && strcmp(name + n - s, suffix) == 0;
}

/* The tier in an id `<op>-<tier>-<name>`, for a file whose metadata cannot be read. */
static void tier_from_id(const char *id, char *tier, size_t size)
{
    if (strstr(id, "-fp32-"))
        snprintf(tier, size, "fp32");
    else if (strstr(id, "-bf16-"))
        snprintf(tier, size, "bf16");
    else
        snprintf(tier, size, "?");
}

static int compare_cases_by_id(const void *a, const void *b)
{
    return strcmp(((const cli_case *)a)->id, ((const cli_case *)b)->id);
}

/* Appends the files of dir/op to the list (op, id and path only). */
static int collect_op_folder(const char *dir, const char *op, cli_case **cases, int *n, int *capacity)
{
    char folder[4096];
    snprintf(folder, sizeof folder, "%s/%s", dir, op);
    DIR *d = opendir(folder);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0; /* this set has no case of this op */
        return cli_error("cannot read the vectors folder '%s': %s", folder, strerror(errno));
    }
    struct dirent *entry;
    while ((entry = readdir(d)) != NULL) {
        if (entry->d_name[0] == '.' || !has_suffix(entry->d_name, vectors_suffix))
            continue;
        if (*n == *capacity) {
            int grown = *capacity ? 2 * *capacity : 256;
            cli_case *bigger = realloc(*cases, (size_t)grown * sizeof *bigger);
            if (!bigger) {
                closedir(d);
                return cli_error("out of memory listing '%s'", folder);
            }
            *cases = bigger;
            *capacity = grown;
        }
        cli_case *c = &(*cases)[*n];
        memset(c, 0, sizeof *c);
        size_t path_length = strlen(folder) + 1 + strlen(entry->d_name) + 1;
        c->path = malloc(path_length);
        if (!c->path) {
            closedir(d);
            return cli_error("out of memory listing '%s'", folder);
        }
        snprintf(c->path, path_length, "%s/%s", folder, entry->d_name);
        size_t id_length = strlen(entry->d_name) - strlen(vectors_suffix);
        if (id_length >= sizeof c->id)
            id_length = sizeof c->id - 1;
        memcpy(c->id, entry->d_name, id_length);
        c->id[id_length] = '\0';
        snprintf(c->op, sizeof c->op, "%s", op);
        *n += 1;
    }
    closedir(d);
    return 0;
}

static char *copy_text(const char *text)
{
    char *copy = strdup(text ? text : "");
    if (!copy) {
        cli_error("out of memory");
        exit(CLI_EXIT_USAGE);
    }
    return copy;
}

/* Reads the case's metadata; a file that does not load keeps its folder's op
 * and the tier of its id, with the loader's message as its reason. */
static void describe_case(cli_case *c)
{
    static lacs_vector v; /* large; one at a time */
    if (lacs_vector_load(c->path, &v) == LACS_OK) {
        c->loads = 1;
        snprintf(c->op, sizeof c->op, "%s", v.op);
        snprintf(c->tier, sizeof c->tier, "%s", v.tier);
        c->flags = copy_text(v.flags);
        c->reason = copy_text(v.reason);
    } else {
        c->loads = 0;
        tier_from_id(c->id, c->tier, sizeof c->tier);
        c->flags = copy_text("");
        c->reason = copy_text(lacs_last_error());
    }
    lacs_vector_free(&v);
}

int cli_find_cases(const char *dir, const cli_filter *filter, cli_case **cases_out, int *n_out)
{
    cli_case *cases = NULL;
    int n = 0, capacity = 0, count;
    const lacs_op_info *ops = lacs_ops(&count);
    *cases_out = NULL;
    *n_out = 0;
    for (int i = 0; i < count; i++) {
        if (!op_wanted(filter, ops[i].name))
            continue;
        int rc = collect_op_folder(dir, ops[i].name, &cases, &n, &capacity);
        if (rc != 0) {
            cli_free_cases(cases, n);
            return rc;
        }
    }
    if (n > 1)
        qsort(cases, (size_t)n, sizeof *cases, compare_cases_by_id);

    int kept = 0;
    for (int i = 0; i < n; i++) {
        describe_case(&cases[i]);
        int wanted = op_wanted(filter, cases[i].op) && (!filter->tier || strcmp(filter->tier, cases[i].tier) == 0);
        if (wanted) {
            cases[kept++] = cases[i];
        } else {
            free(cases[i].path);
            free(cases[i].flags);
            free(cases[i].reason);
        }
    }
    *cases_out = cases;
    *n_out = kept;
    return 0;
}

void cli_free_cases(cli_case *cases, int n_cases)
{
    for (int i = 0; i < n_cases; i++) {
        free(cases[i].path);
        free(cases[i].flags);
        free(cases[i].reason);
    }
    free(cases);
}
