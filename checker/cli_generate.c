/* lacs generate: golden vectors of the user's shapes and recipes (SPEC.md 10.8).
 *
 *   lacs generate (--op OP | --like CASE) --out DIR [shape] [recipes] [options]
 *   lacs generate --check DIR [--jobs N]
 *
 * A thin command over the generator (lacs/generate.h): the options become a
 * user case (generators/user_case.c), the case is built and written by the
 * same run as the catalog's sets (generators/vector_set.c), and DIR's
 * MANIFEST.json (set "user") lists it with the arguments that rebuild it, so
 * that `lacs check --vectors DIR` checks it like the committed set and
 * `lacs generate --check DIR` regenerates and compares it. Options are applied
 * in a fixed order whatever their order on the line (the base, the shape,
 * --inputs, --gate, --input, --h0, --param, the rest), so the same arguments
 * give the same bytes.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"
#include "lacs/generate.h"
#include "lacs/ops.h"
#include "lacs/types.h"

static const char generate_usage[] =
    "usage: lacs generate (--op OP | --like CASE) --out DIR [options]\n"
    "       lacs generate --check DIR [--jobs N]\n"
    "\n"
    "Writes a golden vector of your shape (inputs, goldens, gauges, tolerance, certified error, exactly as\n"
    "a catalog vector) to DIR/<op>/<op>-<tier>-<name>.safetensors and lists it in DIR/MANIFEST.json;\n"
    "check an implementation on it with: lacs check --impl IMPL --vectors DIR. SPEC.md 10.8.\n"
    "\n"
    "  --op OP            the op (lacs list shows them); starts from the catalog's plain recipes for OP\n"
    "  --like CASE        start from a catalog case (<op>-<case> or <op>-<tier>-<case>, e.g. gated_delta_rule-mixed):\n"
    "                     its shape, recipes, parameters, flags and reason; every option below overrides\n"
    "shape (ops on sequences; HV defaults to H, V to K, B to 1):\n"
    "  --B N --T N --H N --HV N --K N --V N\n"
    "  --lengths L1,L2,...  a varlen batch: sequences of these lengths packed into B = 1 (cu_seqlens)\n"
    "  --rows N --dim N   the norms: x is [rows, dim]\n"
    "recipes (SPEC.md 10.3: normal(s), uniform(lo,hi), const(c), unit(r), unit_pow2(lo,hi), coupled(eps),\n"
    "lowrank(r), mixed_gate, psd(s), specials(s), retnet, copy(name)):\n"
    "  --input NAME:RECIPE  draw input NAME so (repeatable; NAME:none leaves an optional input out)\n"
    "  --inputs 'LIST'      every input's recipe at once, e.g. 'q:normal k:unit v:normal beta:uniform(0,1)'\n"
    "  --gate KIND          random, zero, const(C), mixed, strong, retnet (RetNet's per-head g_gamma),\n"
    "                       per-channel (gk, as KDA), or any recipe for the op's gate\n"
    "  --h0                 an initial state (h0:normal(0.5); MesaNet also h0_kk:psd(1))\n"
    "  --param NAME=VALUE   a parameter (scale, eps, cap, form, convention; repeatable)\n"
    "the case:\n"
    "  --tier fp32|bf16|both  (default both, one vector each)\n"
    "  --split N          state carry: the state after N tokens is stored and must continue the sequence\n"
    "  --seed N           the inputs' seed (default: from the id, SPEC.md 10.3), below 2^53\n"
    "  --reason 'TEXT'    why this vector exists, in your words (required, except with --like)\n"
    "  --flags 'F1 F2'    its flags (SPEC.md 10.5; default: derived from the shape)\n"
    "  --name NAME        the id's last part (default: from the shape, e.g. b1-t8192-h16-hv32-k128-v128)\n"
    "the run:\n"
    "  --out DIR          where to write (created if missing)\n"
    "  --force            replace a vector of the same id in DIR\n"
    "  --jobs N           threads (default: the number of processors); the output is the same for any N\n"
    "  --estimate         print the size on disk, the memory and the time it would take, and stop\n"
    "  --check DIR        regenerate every vector of DIR's manifest in memory and compare (inputs bit for bit,\n"
    "                     goldens within 4 ulp, gauges to 1e-4, metadata)\n";

/* A run larger than this (bytes on disk) gets its estimate printed before it starts. */
#define LARGE_RUN_BYTES (128.0 * 1024 * 1024)

enum { MAX_LIST = 64 };

typedef struct {
    const char *op, *like, *out, *check, *tier, *lengths, *inputs, *gate, *flags, *reason, *name, *seed;
    const char *dims[8];  /* B T H HV K V rows dim */
    const char *input[MAX_LIST], *param[MAX_LIST];
    int n_input, n_param, h0, force, estimate;
    const char *split;
    long jobs;
} generate_options;

static const char *const dim_names[8] = {"--B", "--T", "--H", "--HV", "--K", "--V", "--rows", "--dim"};

static int parse_options(int argc, char **argv, generate_options *o)
{
    memset(o, 0, sizeof *o);
    o->jobs = sysconf(_SC_NPROCESSORS_ONLN);
    struct {
        const char *name;
        const char **slot;
    } single[] = {
        {"--op", &o->op},         {"--like", &o->like},       {"--out", &o->out},       {"--check", &o->check},
        {"--tier", &o->tier},     {"--lengths", &o->lengths}, {"--inputs", &o->inputs}, {"--gate", &o->gate},
        {"--flags", &o->flags},   {"--reason", &o->reason},   {"--name", &o->name},     {"--seed", &o->seed},
        {"--split", &o->split},
    };
    for (int i = 1; i < argc; i++) {
        const char *value = NULL;
        int got = 0;
        if (cli_is_help(argv[i])) {
            fputs(generate_usage, stdout);
            return -1;
        }
        if (strcmp(argv[i], "--h0") == 0) {
            o->h0 = 1;
            continue;
        }
        if (strcmp(argv[i], "--force") == 0) {
            o->force = 1;
            continue;
        }
        if (strcmp(argv[i], "--estimate") == 0) {
            o->estimate = 1;
            continue;
        }
        for (size_t k = 0; k < sizeof single / sizeof single[0] && !got; k++)
            if ((got = cli_option_value(argc, argv, &i, single[k].name, &value)) != 0) {
                if (got < 0)
                    return CLI_EXIT_USAGE;
                if (*single[k].slot)
                    return cli_error("option %s is given twice", single[k].name);
                *single[k].slot = value;
            }
        for (int d = 0; d < 8 && !got; d++)
            if ((got = cli_option_value(argc, argv, &i, dim_names[d], &value)) != 0) {
                if (got < 0)
                    return CLI_EXIT_USAGE;
                if (o->dims[d])
                    return cli_error("option %s is given twice", dim_names[d]);
                o->dims[d] = value;
            }
        if (!got && (got = cli_option_value(argc, argv, &i, "--input", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            if (o->n_input >= MAX_LIST)
                return cli_error("too many --input options");
            o->input[o->n_input++] = value;
        }
        if (!got && (got = cli_option_value(argc, argv, &i, "--param", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            if (o->n_param >= MAX_LIST)
                return cli_error("too many --param options");
            o->param[o->n_param++] = value;
        }
        if (!got && (got = cli_option_value(argc, argv, &i, "--jobs", &value)) != 0) {
            if (got < 0)
                return CLI_EXIT_USAGE;
            if (cli_parse_long(value, &o->jobs) != 0 || o->jobs < 1 || o->jobs > 256)
                return cli_error("--jobs needs an integer from 1 to 256, got '%s'", value);
        }
        if (!got)
            return cli_error("generate: unknown option '%s' (lacs generate --help)", argv[i]);
    }
    return 0;
}

/* The generator's message for a user case, as a CLI error. */
static int case_error(void)
{
    const char *message = lacs_last_error();
    return cli_error("generate: %s", message);
}

/* The user case the options describe (applied in a fixed order). */
static int build_case(const generate_options *o, lacs_user_case *u)
{
    if (!o->op == !o->like)
        return cli_error("generate: give --op OP or --like CASE (one of them)");
    if (o->like) {
        if (lacs_user_case_from_catalog(u, o->like) != LACS_OK)
            return case_error();
    } else if (lacs_user_case_from_op(u, o->op) != LACS_OK) {
        return case_error();
    }
    int64_t *slots[8] = {&u->B, &u->T, &u->H, &u->HV, &u->K, &u->V, &u->rows, &u->dim};
    for (int d = 0; d < 8; d++) {
        if (!o->dims[d])
            continue;
        long value;
        if (cli_parse_long(o->dims[d], &value) != 0 || value < (d == 1 ? 0 : 1) || value > (1L << 40))
            return cli_error("generate: %s needs a %s integer, got '%s'", dim_names[d],
                             d == 1 ? "non-negative" : "positive", o->dims[d]);
        *slots[d] = value;
    }
    if (o->lengths) {
        snprintf(u->lengths, sizeof u->lengths, "%s", o->lengths);
        if (strlen(o->lengths) >= sizeof u->lengths)
            return cli_error("generate: --lengths is too long");
        if (!o->dims[1] && !o->dims[0])
            u->B = u->T = -1; /* from --like: the lengths replace the fixed shape */
    } else if (o->dims[0] || o->dims[1]) {
        u->lengths[0] = 0; /* from --like: a fixed shape replaces its lengths */
    }
    if (o->tier) {
        if (strcmp(o->tier, "fp32") == 0)
            u->tiers = LACS_TIER_FP32;
        else if (strcmp(o->tier, "bf16") == 0)
            u->tiers = LACS_TIER_BF16;
        else if (strcmp(o->tier, "both") == 0)
            u->tiers = LACS_TIER_BOTH;
        else
            return cli_error("generate: --tier must be fp32, bf16 or both, got '%s'", o->tier);
    }
    if (o->inputs && lacs_user_case_set_inputs(u, o->inputs) != LACS_OK)
        return case_error();
    if (o->gate && lacs_user_case_set_gate(u, o->gate) != LACS_OK)
        return case_error();
    for (int k = 0; k < o->n_input; k++) {
        const char *colon = strchr(o->input[k], ':');
        if (!colon || colon == o->input[k] || !colon[1] || (size_t)(colon - o->input[k]) >= 32)
            return cli_error("generate: bad --input '%s': NAME:RECIPE, e.g. k:unit or g:const(-0.01)", o->input[k]);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(colon - o->input[k]), o->input[k]);
        if (lacs_user_case_set_input(u, name, colon + 1) != LACS_OK)
            return case_error();
    }
    if (o->h0 && lacs_user_case_add_initial_state(u) != LACS_OK)
        return case_error();
    for (int k = 0; k < o->n_param; k++) {
        const char *equals = strchr(o->param[k], '=');
        double value;
        if (!equals || equals == o->param[k] || (size_t)(equals - o->param[k]) >= 32 ||
            cli_parse_double(equals + 1, &value) != 0)
            return cli_error("generate: bad --param '%s': NAME=VALUE with a finite number", o->param[k]);
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)(equals - o->param[k]), o->param[k]);
        if (lacs_user_case_set_param(u, name, value) != LACS_OK)
            return case_error();
    }
    if (o->split) {
        long split;
        if (cli_parse_long(o->split, &split) != 0 || split < 0)
            return cli_error("generate: --split needs a non-negative integer, got '%s'", o->split);
        u->split = split;
    }
    if (o->flags)
        snprintf(u->flags, sizeof u->flags, "%s", o->flags);
    if (o->reason) {
        if (strlen(o->reason) >= sizeof u->reason)
            return cli_error("generate: --reason is longer than %zu characters", sizeof u->reason - 1);
        snprintf(u->reason, sizeof u->reason, "%s", o->reason);
    }
    if (o->name) {
        if (strlen(o->name) >= sizeof u->name)
            return cli_error("generate: --name is longer than %zu characters", sizeof u->name - 1);
        snprintf(u->name, sizeof u->name, "%s", o->name);
    }
    if (o->seed) {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(o->seed, &end, 10);
        if (end == o->seed || *end || errno || o->seed[0] == '-')
            return cli_error("generate: --seed needs a non-negative integer, got '%s'", o->seed);
        u->has_seed = 1;
        u->seed = seed;
    }
    if (lacs_user_case_resolve(u) != LACS_OK)
        return case_error();
    return 0;
}

static char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t size = 0;
    char buffer[65536];
    size_t got;
    while ((got = fread(buffer, 1, sizeof buffer, f)) > 0) {
        char *bigger = realloc(text, size + got + 1);
        if (!bigger) {
            free(text);
            fclose(f);
            return NULL;
        }
        text = bigger;
        memcpy(text + size, buffer, got);
        size += got;
    }
    fclose(f);
    if (!text)
        text = calloc(1, 1);
    else
        text[size] = 0;
    return text;
}

/* DIR/MANIFEST.json as parsed JSON, NULL if there is none; *bad set (error
 * printed) if it exists and is not a user set's manifest. */
static cJSON *read_user_manifest(const char *path, int *bad)
{
    *bad = 0;
    if (access(path, F_OK) != 0)
        return NULL;
    char *text = read_text_file(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *set = root ? cJSON_GetObjectItemCaseSensitive(root, "set") : NULL;
    if (!root || !cJSON_IsString(set)) {
        *bad = cli_error("generate: %s is not a lacs manifest", path);
    } else if (strcmp(set->valuestring, "user") != 0) {
        *bad = cli_error("generate: %s is the manifest of the '%s' set: lacs generate adds vectors only to a "
                         "directory of its own (set \"user\"); choose another --out", path, set->valuestring);
    }
    if (*bad) {
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* An exclusive lock on DIR/.MANIFEST.json.lock while the manifest is read, merged and written. */
static int lock_directory(const char *dir)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/.MANIFEST.json.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW, 0666);
    if (fd < 0)
        return -1;
    struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    while (fcntl(fd, F_SETLKW, &lock) != 0)
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    return fd;
}

static int make_directory(const char *dir)
{
    char buffer[1024];
    snprintf(buffer, sizeof buffer, "%s/", dir);
    for (char *p = buffer + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buffer, 0777) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return 0;
}

/* lacs generate --check DIR: every vector of DIR's manifest rebuilt from its arguments and compared. */
static int check_directory(const char *dir, long jobs)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/MANIFEST.json", dir);
    int bad;
    cJSON *root = read_user_manifest(path, &bad);
    if (bad)
        return bad;
    if (!root)
        return cli_error("generate: %s has no MANIFEST.json (lacs generate --out %s writes one)", dir, dir);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *entry;
    const int n = cJSON_GetArraySize(cases);
    lacs_user_case *users = calloc((size_t)n + 1, sizeof *users);
    lacs_vector_job *run = calloc((size_t)n + 1, sizeof *run);
    int status = 0, k = 0;
    cJSON_ArrayForEach(entry, cases)
    {
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(entry, "generate"), *arg;
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(entry, "id");
        const char *argv[128];
        int argc = 0;
        argv[argc++] = "generate";
        cJSON_ArrayForEach(arg, args)
        if (cJSON_IsString(arg) && argc < 127)
            argv[argc++] = arg->valuestring;
        generate_options o;
        if (!cJSON_IsArray(args) || argc < 3 || parse_options(argc, (char **)argv, &o) != 0 ||
            build_case(&o, &users[k]) != 0) {
            status = cli_error("generate: %s: the entry of %s has no valid \"generate\" arguments", path,
                               cJSON_IsString(id) ? id->valuestring : "(no id)");
            break;
        }
        const lacs_tier_mask tier = users[k].tiers == LACS_TIER_BF16 ? LACS_TIER_BF16 : LACS_TIER_FP32;
        lacs_vector_job_init(&run[k], &users[k].c, tier, "");
        run[k].has_seed = users[k].has_seed;
        run[k].seed = users[k].seed;
        if (!cJSON_IsString(id) || strcmp(id->valuestring, run[k].id) != 0) {
            status = cli_error("generate: %s: the arguments of %s build %s", path,
                               cJSON_IsString(id) ? id->valuestring : "(no id)", run[k].id);
            break;
        }
        k++;
    }
    if (status == 0) {
        lacs_vector_run_options options = {"lacs generate", NULL, dir, 0, (int)jobs, isatty(STDERR_FILENO), 0};
        const size_t failed = lacs_vector_run(run, (size_t)k, &options);
        printf("lacs generate --check %s: %d cases, %zu differ\n", dir, k, failed);
        status = failed ? CLI_EXIT_FAILED : 0;
    }
    for (int i = 0; i < n; i++)
        lacs_vector_job_free(&run[i]);
    free(run);
    free(users);
    cJSON_Delete(root);
    return status;
}

static void print_estimate(const lacs_vector_estimate *e, size_t n, int threads)
{
    char bytes[32], memory[32], seconds[32];
    lacs_format_bytes((double)e->bytes, bytes, sizeof bytes);
    lacs_format_bytes((double)e->memory_bytes, memory, sizeof memory);
    lacs_format_seconds(e->seconds, seconds, sizeof seconds);
    fprintf(stderr, "lacs generate: %zu vector%s, about %s on disk, %s of memory", n, n == 1 ? "" : "s", bytes,
            memory);
    if (e->measured)
        fprintf(stderr, ", about %s on %d thread%s (estimated from a reduced twin)\n", seconds, threads,
                threads == 1 ? "" : "s");
    else
        fprintf(stderr, "\n");
}

int cli_generate(int argc, char **argv, const char *argv0)
{
    (void)argv0;
    generate_options o;
    int rc = parse_options(argc, argv, &o);
    if (rc != 0)
        return rc < 0 ? 0 : rc;
    if (o.check) {
        if (o.op || o.like || o.out)
            return cli_error("generate: --check DIR takes no case options (it rebuilds DIR's manifest)");
        return check_directory(o.check, o.jobs);
    }
    if (!o.out)
        return cli_error("generate: give the output directory --out DIR");
    lacs_user_case u;
    if ((rc = build_case(&o, &u)) != 0)
        return rc;

    lacs_vector_job jobs[2];
    char *arguments[2] = {NULL, NULL};
    size_t n = 0;
    for (int t = 0; t < 2; t++) {
        const lacs_tier_mask tier = t == 0 ? LACS_TIER_FP32 : LACS_TIER_BF16;
        if (!(u.tiers & tier))
            continue;
        lacs_vector_job_init(&jobs[n], &u.c, tier, "");
        jobs[n].has_seed = u.has_seed;
        jobs[n].seed = u.seed;
        arguments[n] = lacs_user_case_arguments(&u, tier);
        n++;
    }

    /* DIR: a manifest of the user set, or none; nothing replaced without --force */
    char manifest_path[1100];
    snprintf(manifest_path, sizeof manifest_path, "%s/MANIFEST.json", o.out);
    int bad;
    cJSON *existing = read_user_manifest(manifest_path, &bad);
    if (bad)
        rc = bad;
    for (size_t i = 0; rc == 0 && i < n && !o.force; i++) {
        char path[1100];
        snprintf(path, sizeof path, "%s/%s", o.out, jobs[i].path);
        if (access(path, F_OK) == 0)
            rc = cli_error("generate: %s exists: pass --force to replace it (or choose another --name)", path);
    }
    cJSON_Delete(existing);

    /* the estimate, always: its reduced twin draws every recipe, so a bad one fails here (exit 2), before
     * anything is written; printed for a large run */
    lacs_vector_estimate e;
    if (rc == 0 && lacs_vector_estimate_run(jobs, n, (int)o.jobs, 1, &e) != LACS_OK)
        rc = case_error();
    if (rc == 0 && (o.estimate || (double)e.bytes > LARGE_RUN_BYTES))
        print_estimate(&e, n, (int)o.jobs);
    if (rc == 0 && o.estimate) {
        for (size_t i = 0; i < n; i++)
            printf("%s/%s\n", o.out, jobs[i].path);
        goto done;
    }
    if (rc == 0 && make_directory(o.out) != 0)
        rc = cli_error("generate: cannot create %s: %s", o.out, strerror(errno));
    struct statvfs fs;
    if (rc == 0 && statvfs(o.out, &fs) == 0) {
        const double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize;
        if ((double)e.bytes > free_bytes) {
            char need[32], have[32];
            lacs_format_bytes((double)e.bytes, need, sizeof need);
            lacs_format_bytes(free_bytes, have, sizeof have);
            rc = cli_error("generate: the vectors need about %s, and %s's file system has %s free", need, o.out, have);
        }
    }
    if (rc != 0)
        goto done;

    lacs_vector_run_options options = {"lacs generate", o.out, NULL, o.force, (int)o.jobs, isatty(STDERR_FILENO),
                                       e.seconds};
    const size_t failed = lacs_vector_run(jobs, n, &options);
    /* the manifest: DIR's, with the vectors written added (a tier that failed is not), under a lock */
    lacs_vector_job ok_jobs[2];
    char *ok_arguments[2];
    size_t n_ok = 0;
    for (size_t i = 0; i < n; i++)
        if (jobs[i].ok) {
            ok_jobs[n_ok] = jobs[i];
            ok_arguments[n_ok++] = arguments[i];
        }
    if (n_ok == 0) {
        rc = CLI_EXIT_FAILED;
        goto done;
    }
    const int lock = lock_directory(o.out);
    char *old_text = read_text_file(manifest_path);
    char *added = lacs_manifest_json(ok_jobs, n_ok, "user", ok_arguments);
    char message[512] = "";
    char *merged = added ? lacs_manifest_merge(old_text, added, message, sizeof message) : NULL;
    if (!merged)
        rc = cli_error("generate: %s: %s; the vectors are written, the manifest is not", manifest_path,
                       message[0] ? message : "out of memory");
    else if (lacs_manifest_write(manifest_path, merged, 1, "lacs generate") != 0)
        rc = CLI_EXIT_FAILED;
    free(old_text);
    free(added);
    free(merged);
    if (lock >= 0)
        close(lock);
    if (rc == 0 && failed)
        rc = CLI_EXIT_FAILED;
    for (size_t i = 0; i < n; i++) {
        if (!jobs[i].ok)
            continue;
        char bytes[32];
        lacs_format_bytes((double)jobs[i].bytes, bytes, sizeof bytes);
        printf("%s/%s  %s, %.1f s, certified error %.2g\n", o.out, jobs[i].path, bytes, jobs[i].seconds,
               jobs[i].certified);
    }
    if (rc == 0)
        printf("check an implementation on it: lacs check --impl IMPL --vectors %s\n", o.out);
done:
    for (size_t i = 0; i < n; i++) {
        lacs_vector_job_free(&jobs[i]);
        free(arguments[i]);
    }
    return rc;
}
