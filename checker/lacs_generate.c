/* lacs-generate: writes the golden vectors of the catalog, or checks that a
 * committed set reproduces (SPEC.md 10.7).
 *
 *   lacs-generate [--set core|full] [--out DIR] [--force | --force-files] [--jobs N] [--only TEXT]
 *   lacs-generate --check DIR [--set core|full] [--jobs N] [--only TEXT]
 *   lacs-generate --check-manifest FILE [--set core|full] [--regenerate ID,...] [--jobs N]
 *   lacs-generate --estimate [--set core|full] [--jobs N] [--only TEXT]
 *   lacs-generate --list [--set core|full]
 *   lacs-generate --flags
 *
 * Generating writes DIR/<set>/<op>/<id>.safetensors for every case of the set
 * and the manifest DIR/MANIFEST.json (core) or DIR/MANIFEST-full.json (full).
 * An existing file is replaced only with --force; a manifest that exists and
 * differs is reported case by case (with --force, replaced). Checking
 * regenerates every case in memory and compares it with DIR's file: inputs
 * bit for bit, golden outputs within 4 units in the last place of double,
 * the metadata equal but for the certified error. --check-manifest checks a
 * committed manifest against the code without generating the set: versions,
 * the case list, every case's inputs, and some cases built whole (make
 * vectors-full-check). Cases run in parallel, and the gauge's samples too
 * when fewer cases than threads are left (--jobs, default: the number of
 * processors; the output is the same for any number); a progress line is
 * shown on a terminal, and an estimate of size and time before a large run.
 * The work itself is generators/vector_set.c (lacs/generate.h), which
 * `lacs generate` shares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lacs/catalog.h"
#include "lacs/generate.h"
#include "lacs/ops.h"
#include "lacs/types.h"

/* A run larger than this gets its estimate printed before it starts. */
#define LARGE_RUN_BYTES (128.0 * 1024 * 1024)

static void usage(FILE *to)
{
    fprintf(to,
            "usage: lacs-generate [--set core|full] [--out DIR] [--force | --force-files] [--jobs N] [--only TEXT]\n"
            "       lacs-generate --check DIR [--set core|full] [--jobs N] [--only TEXT]\n"
            "       lacs-generate --check-manifest FILE [--set core|full] [--regenerate ID,...] [--jobs N]\n"
            "       lacs-generate --estimate [--set core|full] [--jobs N] [--only TEXT]\n"
            "       lacs-generate --list [--set core|full] [--only TEXT]\n"
            "       lacs-generate --flags\n"
            "\n"
            "Writes the golden vectors of the catalog (SPEC.md 10) to DIR/<set>/<op>/<id>.safetensors\n"
            "and DIR/MANIFEST.json (core) or DIR/MANIFEST-full.json (full); DIR defaults to vectors.\n"
            "(Vectors of your own shapes: lacs generate, SPEC.md 10.8.)\n"
            "  --force       replace existing vector files and the manifest\n"
            "  --force-files replace existing vector files; a manifest that differs is reported, kept\n"
            "  --check DIR   regenerate in memory and compare with DIR's files: inputs bit for bit,\n"
            "                outputs within 4 ulp of double, gauges to a relative 1e-4, metadata equal but for the\n"
            "                certified error\n"
            "  --check-manifest FILE  check a committed manifest against the code without generating the set:\n"
            "                the versions, the case list, every case's inputs hash, and the cases named by\n"
            "                --regenerate (default: the cheapest of each tier) built whole and compared byte for byte\n"
            "  --estimate    print the size, memory and time a run would take (measured on reduced twins), and stop\n"
            "  --jobs N      threads: cases in parallel, and a case's gauge samples when fewer cases are left\n"
            "                (default: the number of processors; the output is the same for any N)\n"
            "  --only TEXT   only the cases whose id contains TEXT (no manifest is written)\n"
            "  --list        print the cases' ids, flags and reasons\n"
            "  --flags       print the flags and the bug each catches (SPEC.md 10.5), as a table\n");
}

static void print_estimate(const lacs_vector_estimate *e, size_t n_jobs, int threads)
{
    char bytes[32], memory[32], seconds[32], largest[32];
    lacs_format_bytes((double)e->bytes, bytes, sizeof bytes);
    lacs_format_bytes((double)e->memory_bytes, memory, sizeof memory);
    lacs_format_seconds(e->seconds, seconds, sizeof seconds);
    lacs_format_seconds(e->largest_seconds, largest, sizeof largest);
    fprintf(stderr, "lacs-generate: %zu cases, about %s on disk, %s of memory at most", n_jobs, bytes, memory);
    if (e->measured)
        fprintf(stderr, ", about %s on %d thread%s (estimated from reduced twins; the longest case, %s, %s)\n",
                seconds, threads, threads == 1 ? "" : "s", e->largest, largest);
    else
        fprintf(stderr, "\n");
}

/* The cheapest case of each tier by the cost model (lacs_case_work), the first in catalog order among equals. */
static void cheapest_per_tier(const lacs_vector_job *jobs, size_t n, size_t *chosen, size_t *n_chosen)
{
    *n_chosen = 0;
    for (int t = 0; t < 2; t++) {
        const lacs_tier_mask tier = t == 0 ? LACS_TIER_FP32 : LACS_TIER_BF16;
        double best = -1;
        size_t best_index = 0;
        for (size_t i = 0; i < n; i++) {
            const double work = lacs_case_work(&jobs[i].c);
            if (jobs[i].tier == tier && (best < 0 || work < best)) {
                best = work;
                best_index = i;
            }
        }
        if (best >= 0)
            chosen[(*n_chosen)++] = best_index;
    }
}

int main(int argc, char **argv)
{
    const char *set = "core", *out_dir = "vectors", *check_dir = NULL, *only = NULL, *manifest = NULL;
    const char *regenerate = NULL;
    int force = 0, force_files = 0, list = 0, estimate_only = 0;
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
        } else if (strcmp(a, "--estimate") == 0) {
            estimate_only = 1;
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
        } else if (value && strcmp(a, "--check-manifest") == 0) {
            manifest = value;
            i++;
        } else if (value && strcmp(a, "--regenerate") == 0) {
            regenerate = value;
            i++;
        } else if (value && strcmp(a, "--only") == 0) {
            only = value;
            i++;
        } else if (value && strcmp(a, "--jobs") == 0) {
            char *end;
            jobs_wanted = strtol(value, &end, 10);
            if (*end || jobs_wanted < 1 || jobs_wanted > 256) {
                fprintf(stderr, "lacs-generate: --jobs needs an integer from 1 to 256, got '%s'\n", value);
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
    if (jobs_wanted < 1)
        jobs_wanted = 1;
    const int threads = (int)jobs_wanted;
    const lacs_case_set wanted = strcmp(set, "core") == 0 ? LACS_SET_CORE : LACS_SET_FULL;
    char prefix[16];
    snprintf(prefix, sizeof prefix, "%s/", set);

    size_t n_cases;
    const lacs_case *cases = lacs_catalog(&n_cases);
    lacs_vector_job *jobs = calloc(2 * n_cases + 1, sizeof *jobs);
    size_t n_jobs = 0;
    for (size_t i = 0; jobs && i < n_cases; i++) {
        if (cases[i].set != wanted)
            continue;
        for (int t = 0; t < 2; t++) {
            lacs_tier_mask tier = t == 0 ? LACS_TIER_FP32 : LACS_TIER_BF16;
            if (!(cases[i].tiers & tier))
                continue;
            lacs_vector_job_init(&jobs[n_jobs], &cases[i], tier, prefix);
            if (only && !strstr(jobs[n_jobs].id, only))
                continue;
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
            printf("%s  [%s]  %s\n", jobs[i].id, jobs[i].c.flags, jobs[i].c.reason);
        printf("%zu cases\n", n_jobs);
        free(jobs);
        return 0;
    }
    if (n_jobs == 0) {
        fprintf(stderr, "lacs-generate: no case matches\n");
        return 1;
    }

    if (manifest) {
        /* the staleness check of a committed manifest */
        size_t chosen[64], n_chosen = 0;
        if (regenerate) {
            for (const char *p = regenerate; *p && n_chosen < 64;) {
                size_t len = strcspn(p, ",");
                size_t k = 0;
                while (k < n_jobs && !(strlen(jobs[k].id) == len && strncmp(jobs[k].id, p, len) == 0))
                    k++;
                if (k == n_jobs) {
                    fprintf(stderr, "lacs-generate: --regenerate: no case '%.*s' in the %s set\n", (int)len, p, set);
                    return 2;
                }
                chosen[n_chosen++] = k;
                p += len + (p[len] == ',');
            }
        } else {
            cheapest_per_tier(jobs, n_jobs, chosen, &n_chosen);
        }
        fprintf(stderr, "lacs-generate: checking %s against the %s set of the code (generator %s, spec %s)\n",
                manifest, set, LACS_GENERATOR_VERSION, LACS_SPEC_VERSION);
        const int problems = lacs_manifest_check(manifest, jobs, n_jobs, chosen, n_chosen, threads, stderr);
        for (size_t k = 0; k < n_chosen; k++)
            fprintf(stderr, "lacs-generate: regenerated %s whole (%.1f s)\n", jobs[chosen[k]].id,
                    jobs[chosen[k]].seconds);
        if (problems)
            printf("lacs-generate --check-manifest %s: %d problem%s: the manifest is stale; regenerate it with "
                   "lacs-generate --set %s --force (SPEC.md 10.7)\n", manifest, problems, problems == 1 ? "" : "s",
                   set);
        else
            printf("lacs-generate --check-manifest %s: %zu cases listed as the code generates them (versions, "
                   "list, inputs; %zu regenerated whole)\n", manifest, n_jobs, n_chosen);
        free(jobs);
        return problems ? 1 : 0;
    }

    /* Refuse before any work if a file would be replaced without leave. */
    if (!check_dir && !force_files && !estimate_only) {
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

    /* The estimate: sizes always (cheap); the time, measured on twins, for a large run or when asked. */
    lacs_vector_estimate e;
    if (lacs_vector_estimate_run(jobs, n_jobs, threads, 0, &e) != LACS_OK) {
        fprintf(stderr, "lacs-generate: %s\n", lacs_last_error());
        free(jobs);
        return 1;
    }
    if (estimate_only || (double)e.bytes > LARGE_RUN_BYTES) {
        if (lacs_vector_estimate_run(jobs, n_jobs, threads, 1, &e) != LACS_OK) {
            fprintf(stderr, "lacs-generate: %s\n", lacs_last_error());
            free(jobs);
            return 1;
        }
        print_estimate(&e, n_jobs, threads);
        if (estimate_only) {
            free(jobs);
            return 0;
        }
    }

    lacs_vector_run_options options = {"lacs-generate", check_dir ? NULL : out_dir, check_dir, force_files, threads,
                                       isatty(STDERR_FILENO), e.seconds};
    const size_t failed = lacs_vector_run(jobs, n_jobs, &options);

    double worst_certified = 0, slowest = 0;
    long long total_bytes = 0;
    const char *slowest_id = "";
    for (size_t i = 0; i < n_jobs; i++) {
        if (jobs[i].certified > worst_certified)
            worst_certified = jobs[i].certified;
        if (jobs[i].seconds > slowest) {
            slowest = jobs[i].seconds;
            slowest_id = jobs[i].id;
        }
        total_bytes += jobs[i].bytes;
    }
    int status = failed ? 1 : 0;
    if (check_dir) {
        printf("lacs-generate --check %s: %zu cases, %zu differ; worst certified error %.2g\n", check_dir, n_jobs,
               failed, worst_certified);
    } else {
        printf("lacs-generate: %zu cases, %zu failed, %.1f MiB; worst certified error %.2g; slowest case %s "
               "(%.1f s)\n", n_jobs, failed, (double)total_bytes / (1024.0 * 1024.0), worst_certified, slowest_id,
               slowest);
        if (!failed && !only) {
            char *text = lacs_manifest_json(jobs, n_jobs, set, NULL);
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", out_dir, wanted == LACS_SET_CORE ? "MANIFEST.json"
                                                                                  : "MANIFEST-full.json");
            status = text ? lacs_manifest_write(path, text, force, "lacs-generate") : 1;
            free(text);
        } else if (only) {
            fprintf(stderr, "lacs-generate: --only: the manifest is not written\n");
        }
    }
    for (size_t i = 0; i < n_jobs; i++)
        lacs_vector_job_free(&jobs[i]);
    free(jobs);
    return status;
}
