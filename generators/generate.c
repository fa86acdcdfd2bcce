/* lacs-generate: writes the golden vectors of the catalog, or checks that a
 * committed set reproduces (SPEC.md 10.7).
 *
 *   lacs-generate [--set core|full] [--out DIR] [--force | --force-files] [--jobs N] [--only TEXT]
 *   lacs-generate --check DIR [--set core|full] [--jobs N] [--only TEXT]
 *   lacs-generate --list [--set core|full]
 *   lacs-generate --flags
 *
 * Generating writes DIR/<set>/<op>/<id>.safetensors for every case of the set
 * and the manifest DIR/MANIFEST.json (core) or DIR/MANIFEST-full.json (full).
 * An existing file is replaced only with --force; a manifest that exists and
 * differs is reported (with --force, replaced). Checking regenerates every
 * case in memory and compares it with DIR's file: inputs bit for bit, golden
 * outputs within 4 units in the last place of double, the metadata equal but
 * for the certified error. Cases run in parallel (--jobs, default: the
 * number of processors); a progress line is shown on a terminal.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lacs/catalog.h"
#include "lacs/ops.h"
#include "lacs/safetensors.h"
#include "lacs/types.h"

#define ULP_BOUND 4
#define GAUGE_BOUND 1e-4

typedef struct {
    const lacs_case *c;
    lacs_tier_mask tier;
    char id[160];
    char path[512];  /* relative to the vectors directory */
    /* results */
    int ok;
    char message[2048];
    char sha256[65], inputs_sha256[65];
    long long bytes;
    double certified;
    cJSON *shapes;   /* name -> shape, for the manifest */
} job;

typedef struct {
    job *jobs;
    size_t n_jobs;
    size_t next, done, failed;
    pthread_mutex_t lock;
    const char *out_dir;
    const char *check_dir;
    int force;
    int tty;
} run_state;

static void usage(FILE *to)
{
    fprintf(to,
            "usage: lacs-generate [--set core|full] [--out DIR] [--force | --force-files] [--jobs N] [--only TEXT]\n"
            "       lacs-generate --check DIR [--set core|full] [--jobs N] [--only TEXT]\n"
            "       lacs-generate --list [--set core|full]\n"
            "       lacs-generate --flags\n"
            "\n"
            "Writes the golden vectors of the catalog (SPEC.md 10) to DIR/<set>/<op>/<id>.safetensors\n"
            "and DIR/MANIFEST.json (core) or DIR/MANIFEST-full.json (full); DIR defaults to vectors.\n"
            "  --force       replace existing vector files and the manifest\n"
            "  --force-files replace existing vector files; a manifest that differs is reported, kept\n"
            "  --check DIR   regenerate in memory and compare with DIR's files: inputs bit for bit,\n"
            "                outputs within %d ulp of double, gauges to a relative 1e-4, metadata equal but for the\n                certified error\n"
            "  --jobs N      parallel cases (default: the number of processors)\n"
            "  --only TEXT   only the cases whose id contains TEXT (no manifest is written)\n"
            "  --list        print the cases' ids, flags and reasons\n"
            "  --flags       print the flags and the bug each catches (SPEC.md 10.5), as a table\n",
            ULP_BOUND);
}

/* mkdir -p of the directory part of `path`. */
static int make_parents(const char *path)
{
    char buffer[1024];
    snprintf(buffer, sizeof buffer, "%s", path);
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

static int read_whole(const char *path, unsigned char **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc((size_t)(n > 0 ? n : 1));
    *size = *data && n >= 0 ? fread(*data, 1, (size_t)n, f) : 0;
    fclose(f);
    return *data && (long)*size == n ? 0 : -1;
}

/* SPEC.md 10.1: for each input in name order, its name, a zero byte, its bytes. */
static void inputs_hash(const lacs_golden *g, char hex[65])
{
    int order[24];
    for (int i = 0; i < g->n_inputs; i++)
        order[i] = i;
    for (int i = 1; i < g->n_inputs; i++)
        for (int j = i; j > 0 && strcmp(g->tensors[order[j - 1]].name, g->tensors[order[j]].name) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    lacs_sha256 s;
    lacs_sha256_init(&s);
    for (int i = 0; i < g->n_inputs; i++) {
        const lacs_tensor *t = &g->tensors[order[i]];
        const int64_t count = lacs_tensor_count(t);
        lacs_sha256_update(&s, t->name, strlen(t->name) + 1);
        lacs_sha256_update(&s, t->data, (size_t)count * lacs_dtype_size(t->dtype));
    }
    lacs_sha256_final(&s, hex);
}

/* Distance in units in the last place between two doubles (0 for equal,
 * both NaN; huge for different signs or a NaN against a number). */
static double ulp_distance(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) ? 0 : INFINITY;
    if (a == b)
        return 0;
    int64_t ia, ib;
    memcpy(&ia, &a, 8);
    memcpy(&ib, &b, 8);
    if (ia < 0)
        ia = INT64_MIN - ia;
    if (ib < 0)
        ib = INT64_MIN - ib;
    /* in integers: as doubles, patterns above 2^53 would lose their low bits */
    return (double)(ia > ib ? (uint64_t)ia - (uint64_t)ib : (uint64_t)ib - (uint64_t)ia);
}

/* The metadata without the certified error (it may differ in its last digits
 * between libms), as a canonical string. */
static char *metadata_without_certified(const char *json)
{
    cJSON *root = cJSON_Parse(json);
    if (!root)
        return NULL;
    cJSON_DeleteItemFromObject(root, "certified");
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return text;
}

/* Compares the regenerated golden with the committed file. */
static int compare_with_file(const lacs_golden *g, const char *path, char *message, size_t size)
{
    lacs_safetensors_file f;
    if (lacs_safetensors_read(path, &f) != LACS_OK) {
        snprintf(message, size, "%s", lacs_last_error());
        return 0;
    }
    int ok = 1;
    if (f.n_tensors != g->n_tensors) {
        snprintf(message, size, "%s: %d tensors, the catalog gives %d", path, f.n_tensors, g->n_tensors);
        ok = 0;
    }
    for (int i = 0; ok && i < g->n_tensors; i++) {
        const lacs_tensor *t = &g->tensors[i];
        const lacs_safetensors_tensor *ft = lacs_safetensors_find(&f, t->name);
        const int64_t count = lacs_tensor_count(t);
        if (!ft || ft->dtype != t->dtype || ft->ndim != t->ndim || ft->count != count) {
            snprintf(message, size, "%s: tensor '%s' is missing or differs in dtype or shape", path, t->name);
            ok = 0;
        } else if (i < g->n_inputs) {
            if (memcmp(ft->data, t->data, ft->nbytes) != 0) {
                snprintf(message, size, "%s: input '%s' is not bit-identical", path, t->name);
                ok = 0;
            }
        } else if (t->dtype == LACS_F32) {
            /* a gauge (SPEC.md 11.2): a measured error scale, reproduced to a relative GAUGE_BOUND
             * (another libm moves the perturbed runs by an ulp of double, the gauge by ~2^-22) */
            for (int64_t e = 0; e < count; e++) {
                float a, b;
                memcpy(&a, ft->data + 4 * e, 4);
                memcpy(&b, (const unsigned char *)t->data + 4 * e, 4);
                if (!(fabs((double)a - (double)b) <= GAUGE_BOUND * fabs((double)b))) {
                    snprintf(message, size, "%s: '%s'[%lld] = %.9g, regenerated %.9g (relative difference > %g)",
                             path, t->name, (long long)e, a, b, GAUGE_BOUND);
                    ok = 0;
                    break;
                }
            }
        } else {
            for (int64_t e = 0; e < count; e++) {
                double a, b;
                memcpy(&a, ft->data + 8 * e, 8);
                memcpy(&b, (const unsigned char *)t->data + 8 * e, 8);
                double d = ulp_distance(a, b);
                if (d > ULP_BOUND) {
                    snprintf(message, size, "%s: '%s'[%lld] = %.17g, regenerated %.17g (%.3g ulp > %d)", path,
                             t->name, (long long)e, a, b, d, ULP_BOUND);
                    ok = 0;
                    break;
                }
            }
        }
    }
    const char *meta = lacs_safetensors_metadata(&f, "lacs");
    char *committed = meta ? metadata_without_certified(meta) : NULL;
    char *regenerated = metadata_without_certified(g->metadata);
    if (ok && (!committed || !regenerated || strcmp(committed, regenerated) != 0)) {
        snprintf(message, size, "%s: the metadata differs from the catalog's", path);
        ok = 0;
    }
    free(committed);
    free(regenerated);
    lacs_safetensors_free(&f);
    return ok;
}

static void run_one(run_state *s, job *j)
{
    lacs_golden g;
    if (lacs_golden_build(j->c, j->tier, &g) != LACS_OK) {
        snprintf(j->message, sizeof j->message, "%s: %s", j->id, lacs_last_error());
        return;
    }
    j->certified = g.certified_max;
    char full[1024];
    if (s->check_dir) {
        snprintf(full, sizeof full, "%s/%s", s->check_dir, j->path);
        j->ok = compare_with_file(&g, full, j->message, sizeof j->message);
        lacs_golden_free(&g);
        return;
    }
    snprintf(full, sizeof full, "%s/%s", s->out_dir, j->path);
    if (make_parents(full) != 0) {
        snprintf(j->message, sizeof j->message, "%s: cannot create its directory: %s", full, strerror(errno));
        lacs_golden_free(&g);
        return;
    }
    if (lacs_safetensors_write(full, g.tensors, g.n_tensors, "lacs", g.metadata, s->force) != LACS_OK) {
        snprintf(j->message, sizeof j->message, "%s", lacs_last_error());
        lacs_golden_free(&g);
        return;
    }
    unsigned char *bytes;
    size_t size;
    if (read_whole(full, &bytes, &size) != 0) {
        snprintf(j->message, sizeof j->message, "%s: cannot read back", full);
        lacs_golden_free(&g);
        return;
    }
    lacs_sha256_hex(bytes, size, j->sha256);
    free(bytes);
    j->bytes = (long long)size;
    inputs_hash(&g, j->inputs_sha256);
    j->shapes = cJSON_CreateObject();
    for (int i = 0; i < g.n_tensors; i++) {
        cJSON *shape = cJSON_AddArrayToObject(j->shapes, g.tensors[i].name);
        for (int d = 0; d < g.tensors[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)g.tensors[i].shape[d]));
    }
    j->ok = 1;
    lacs_golden_free(&g);
}

static void *worker(void *arg)
{
    run_state *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        size_t i = s->next++;
        pthread_mutex_unlock(&s->lock);
        if (i >= s->n_jobs)
            return NULL;
        run_one(s, &s->jobs[i]);
        pthread_mutex_lock(&s->lock);
        s->done++;
        if (!s->jobs[i].ok) {
            s->failed++;
            fprintf(stderr, "%sFAIL %s\n", s->tty ? "\r\033[K" : "", s->jobs[i].message);
        }
        if (s->tty)
            fprintf(stderr, "\r\033[K[%zu/%zu] %s", s->done, s->n_jobs, s->jobs[i].id);
        else if (s->done * 10 / s->n_jobs != (s->done - 1) * 10 / s->n_jobs)
            fprintf(stderr, "lacs-generate: %zu/%zu cases\n", s->done, s->n_jobs);
        pthread_mutex_unlock(&s->lock);
    }
}

/* The manifest of the generated jobs (SPEC.md 10.1), as a string. */
static char *manifest_json(const job *jobs, size_t n, const char *set)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "lacs-manifest/1");
    cJSON_AddStringToObject(root, "spec_version", LACS_SPEC_VERSION);
    cJSON_AddStringToObject(root, "generator_version", LACS_GENERATOR_VERSION);
    cJSON_AddStringToObject(root, "set", set);
    cJSON *cases = cJSON_AddArrayToObject(root, "cases");
    for (size_t i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "id", jobs[i].id);
        cJSON_AddStringToObject(e, "op", jobs[i].c->op);
        cJSON_AddStringToObject(e, "tier", jobs[i].tier == LACS_TIER_FP32 ? "fp32" : "bf16");
        cJSON *flags = cJSON_AddArrayToObject(e, "flags");
        const char *cursor = jobs[i].c->flags, *w;
        for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)len, w);
            cJSON_AddItemToArray(flags, cJSON_CreateString(word));
        }
        cJSON_AddStringToObject(e, "path", jobs[i].path);
        cJSON_AddItemToObject(e, "shapes", cJSON_Duplicate(jobs[i].shapes, 1));
        cJSON_AddNumberToObject(e, "bytes", (double)jobs[i].bytes);
        cJSON_AddStringToObject(e, "sha256", jobs[i].sha256);
        cJSON_AddStringToObject(e, "inputs_sha256", jobs[i].inputs_sha256);
        cJSON_AddItemToArray(cases, e);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

static int write_manifest(const char *path, const char *text, int force)
{
    unsigned char *old;
    size_t old_size;
    if (read_whole(path, &old, &old_size) == 0) {
        int same = old_size == strlen(text) + 1 && memcmp(old, text, strlen(text)) == 0;
        free(old);
        if (same) {
            fprintf(stderr, "lacs-generate: %s is unchanged\n", path);
            return 0;
        }
        if (!force) {
            fprintf(stderr, "lacs-generate: %s differs from the cases generated (hashes or list); "
                            "not replaced (pass --force to replace it)\n", path);
            return 1;
        }
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "lacs-generate: cannot write %s: %s\n", path, strerror(errno));
        remove(tmp);
        return 1;
    }
    fprintf(stderr, "lacs-generate: wrote %s\n", path);
    return 0;
}

int main(int argc, char **argv)
{
    const char *set = "core", *out_dir = "vectors", *check_dir = NULL, *only = NULL;
    int force = 0, force_files = 0, list = 0;
    long jobs_wanted = sysconf(_SC_NPROCESSORS_ONLN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--force") == 0) {
            force = 1;
            force_files = 1;
        } else if (strcmp(a, "--force-files") == 0) {
            force_files = 1;
        } else if (strcmp(a, "--list") == 0) {
            list = 1;
        } else if (strcmp(a, "--flags") == 0) {
            size_t n_flags;
            const lacs_flag_info *flags = lacs_flags(&n_flags);
            for (size_t f = 0; f < n_flags; f++)
                printf("| `%s` | %s |\n", flags[f].name, flags[f].catches);
            return 0;
        } else if (value && strcmp(a, "--set") == 0) {
            set = value;
            i++;
        } else if (value && strcmp(a, "--out") == 0) {
            out_dir = value;
            i++;
        } else if (value && strcmp(a, "--check") == 0) {
            check_dir = value;
            i++;
        } else if (value && strcmp(a, "--only") == 0) {
            only = value;
            i++;
        } else if (value && strcmp(a, "--jobs") == 0) {
            char *end;
            jobs_wanted = strtol(value, &end, 10);
            if (*end || jobs_wanted < 1) {
                fprintf(stderr, "lacs-generate: --jobs needs a positive integer, got '%s'\n", value);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr, "lacs-generate: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (strcmp(set, "core") != 0 && strcmp(set, "full") != 0) {
        fprintf(stderr, "lacs-generate: --set must be core or full, got '%s'\n", set);
        return 2;
    }
    const lacs_case_set wanted = strcmp(set, "core") == 0 ? LACS_SET_CORE : LACS_SET_FULL;

    size_t n_cases;
    const lacs_case *cases = lacs_catalog(&n_cases);
    job *jobs = calloc(2 * n_cases + 1, sizeof *jobs);
    size_t n_jobs = 0;
    for (size_t i = 0; jobs && i < n_cases; i++) {
        if (cases[i].set != wanted)
            continue;
        for (int t = 0; t < 2; t++) {
            lacs_tier_mask tier = t == 0 ? LACS_TIER_FP32 : LACS_TIER_BF16;
            if (!(cases[i].tiers & tier))
                continue;
            job *j = &jobs[n_jobs];
            j->c = &cases[i];
            j->tier = tier;
            snprintf(j->id, sizeof j->id, "%s-%s-%s", cases[i].op, t == 0 ? "fp32" : "bf16", cases[i].name);
            if (only && !strstr(j->id, only))
                continue;
            snprintf(j->path, sizeof j->path, "%s/%s/%s.safetensors", set, cases[i].op, j->id);
            n_jobs++;
        }
    }
    if (!jobs) {
        fprintf(stderr, "lacs-generate: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n_jobs; i++)
        for (size_t k = 0; k < i; k++)
            if (strcmp(jobs[i].id, jobs[k].id) == 0) {
                fprintf(stderr, "lacs-generate: the catalog has the id '%s' twice\n", jobs[i].id);
                return 1;
            }
    if (list) {
        for (size_t i = 0; i < n_jobs; i++)
            printf("%s  [%s]  %s\n", jobs[i].id, jobs[i].c->flags, jobs[i].c->reason);
        printf("%zu cases\n", n_jobs);
        free(jobs);
        return 0;
    }
    if (n_jobs == 0) {
        fprintf(stderr, "lacs-generate: no case matches\n");
        return 1;
    }

    /* Refuse before any work if a file would be replaced without leave. */
    if (!check_dir && !force_files) {
        size_t existing = 0;
        const char *first = NULL;
        char full[1024];
        for (size_t i = 0; i < n_jobs; i++) {
            snprintf(full, sizeof full, "%s/%s", out_dir, jobs[i].path);
            if (access(full, F_OK) == 0 && existing++ == 0)
                first = jobs[i].path;
        }
        if (existing) {
            fprintf(stderr, "lacs-generate: %zu of the %zu files exist already (first: %s/%s); "
                            "nothing written. Pass --force (or --force-files) to replace them.\n",
                    existing, n_jobs, out_dir, first);
            free(jobs);
            return 1;
        }
    }
    run_state s = {jobs, n_jobs, 0, 0, 0, PTHREAD_MUTEX_INITIALIZER, out_dir, check_dir, force_files,
                   isatty(STDERR_FILENO)};
    int n_threads = (int)(jobs_wanted < (long)n_jobs ? jobs_wanted : (long)n_jobs);
    pthread_t threads[64];
    if (n_threads > 64)
        n_threads = 64;
    for (int t = 0; t < n_threads; t++)
        pthread_create(&threads[t], NULL, worker, &s);
    for (int t = 0; t < n_threads; t++)
        pthread_join(threads[t], NULL);
    if (s.tty)
        fprintf(stderr, "\r\033[K");

    double worst_certified = 0;
    long long total_bytes = 0;
    for (size_t i = 0; i < n_jobs; i++) {
        if (jobs[i].certified > worst_certified)
            worst_certified = jobs[i].certified;
        total_bytes += jobs[i].bytes;
    }
    int status = s.failed ? 1 : 0;
    if (check_dir) {
        printf("lacs-generate --check %s: %zu cases, %zu differ; worst certified error %.2g\n", check_dir,
               n_jobs, s.failed, worst_certified);
    } else {
        printf("lacs-generate: %zu cases, %zu failed, %.1f MiB; worst certified error %.2g\n", n_jobs, s.failed,
               (double)total_bytes / (1024.0 * 1024.0), worst_certified);
        if (!s.failed && !only) {
            char *text = manifest_json(jobs, n_jobs, set);
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", out_dir, wanted == LACS_SET_CORE ? "MANIFEST.json"
                                                                                  : "MANIFEST-full.json");
            status = text ? write_manifest(path, text, force) : 1;
            free(text);
        } else if (only) {
            fprintf(stderr, "lacs-generate: --only: the manifest is not written\n");
        }
    }
    for (size_t i = 0; i < n_jobs; i++)
        cJSON_Delete(jobs[i].shapes);
    free(jobs);
    return status;
}
