/* lacs CLI: the vectors directory, the filters and the cases (SPEC.md 10.1).
 *
 * A vectors directory holds one folder per op, `<dir>/<op>/<id>.safetensors`,
 * and a manifest covers it (lacs/cases.h): the cases are listed by
 * lacs_cases_find, which the Python harness uses too. A file that does not
 * load, fails its hash, or is missing or not listed is still a case: `check`
 * reports it as a FAIL with the reason, and the run exits 2, rather than
 * silently dropping it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lacs/check.h"
#include "lacs/ops.h"

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

int cli_find_cases(const char *dir, const cli_filter *filter, unsigned mode, lacs_case_list *cases)
{
    if (lacs_cases_find(dir, filter->ops, filter->n_ops, filter->tier, mode, cases) != LACS_OK)
        return cli_error("%s", lacs_last_error());
    return 0;
}

const char *cli_case_state_words(const lacs_case_entry *c)
{
    switch (c->state) {
    case LACS_CASE_MISSING: return "missing";
    case LACS_CASE_UNLISTED: return "not listed";
    case LACS_CASE_INVALID: return "cannot be loaded";
    default: return "";
    }
}
