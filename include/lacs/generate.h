/* lacs: generating sets of golden vectors (SPEC.md 10.1, 10.7, 10.8).
 *
 * What `lacs-generate` (the catalog's core and full sets) and `lacs generate`
 * (vectors of the user's shapes) share, written once:
 *
 *   - a run: cases built in parallel (whole cases, and the gauge's samples
 *     within a case when fewer cases than threads remain), each written to
 *     DIR/<path> or compared with the file there, with a progress line on a
 *     terminal; the output is bit-identical for any number of threads;
 *   - the estimate of a run before it starts: bytes on disk, peak memory and
 *     time, the time measured on a reduced twin of each case;
 *   - manifests (lacs-manifest/1): writing one, comparing two case by case,
 *     and checking a committed manifest against the code cheaply (versions,
 *     the case list, every inputs hash, and some cases regenerated whole);
 *   - user-shaped cases: the op, the shape, per-input recipes of the
 *     catalog's kind (SPEC.md 10.3), gates, tier, seed, h0, state carry, flags
 *     and a reason, turned into a catalog case (lacs_case) that
 *     lacs_golden_build builds like any other.
 */
#ifndef LACS_GENERATE_H
#define LACS_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lacs/catalog.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The reference's work on case c, relative (SPEC.md 10.7's cost model):
 * comparable between cases of one op and head shape, and a rough order
 * between ops. Orders a run (largest first) and scales a twin's time. */
double lacs_case_work(const lacs_case *c);

/* ---- one case of a run ---- */

typedef struct {
    /* what to build */
    lacs_case c;             /* its strings must outlive the run */
    lacs_tier_mask tier;     /* LACS_TIER_FP32 or LACS_TIER_BF16 */
    int has_seed;            /* 1: `seed` instead of the id's (SPEC.md 10.3) */
    uint64_t seed;
    char id[160];            /* <op>-<tier>-<name> */
    char path[512];          /* relative to the run's directory */
    /* results */
    int ok;
    char message[2048];
    char sha256[65], inputs_sha256[65];
    long long bytes;
    double certified, seconds;
    char *shapes;            /* JSON object: tensor name -> shape (malloc'd) */
} lacs_vector_job;

/* Fills job's id and path ("<prefix><op>/<id>.safetensors"). */
void lacs_vector_job_init(lacs_vector_job *job, const lacs_case *c, lacs_tier_mask tier, const char *prefix);
void lacs_vector_job_free(lacs_vector_job *job);

typedef struct {
    const char *program;     /* for messages: "lacs-generate", "lacs generate" */
    const char *out_dir;     /* write DIR/<path> (refusing an existing file unless `force`) */
    const char *check_dir;   /* or: compare with DIR/<path> (inputs bit for bit, goldens 4 ulp, ...) */
    int force;
    int threads;             /* at least 1 */
    int progress;            /* 1: a progress line on stderr (a terminal); 0: a line per tenth */
    double estimated_seconds; /* for the progress line's time left; 0: unknown */
} lacs_vector_run_options;

/* Runs the jobs (largest first; each job's results filled in). Returns the
 * number of jobs that failed. */
size_t lacs_vector_run(lacs_vector_job *jobs, size_t n, const lacs_vector_run_options *options);

/* The comparison of lacs-generate --check (SPEC.md 10.7): 1 if the built
 * golden `g` reproduces the file at `path`, else 0 with `message` saying what differs. */
int lacs_vector_compare_file(const lacs_golden *g, const char *path, char *message, size_t size);

/* ---- the estimate ---- */

typedef struct {
    long long bytes;          /* the files, within a few hundred bytes each */
    long long memory_bytes;   /* the peak resident memory of the run, roughly */
    double seconds;           /* the wall time on `threads` threads; 0 if not measured */
    double largest_seconds;   /* the largest case's share, alone */
    char largest[160];        /* its id */
    int measured;             /* cases whose time was measured on a twin */
} lacs_vector_estimate;

/* Estimates a run of the jobs on `threads` threads: bytes and memory from
 * the inputs' shapes (the recipes parsed, not drawn). With `measure`, also
 * the time: a reduced twin of each case (one batch row, T cut to 16 tokens
 * for the recurrent ops and MesaNet, 128 for the attention forms, 8 rows for
 * the norms) is built on one thread and timed, and scaled by the cost model
 * of its op family; building the twin draws every recipe, so a bad one fails
 * here (LACS_ERR_PARAM, lacs_last_error()), before any long run. */
int lacs_vector_estimate_run(const lacs_vector_job *jobs, size_t n, int threads, int measure,
                             lacs_vector_estimate *estimate);
/* "1.4 GiB", "37 MiB"; "4 min 10 s", "12 s". */
void lacs_format_bytes(double bytes, char *text, size_t size);
void lacs_format_seconds(double seconds, char *text, size_t size);

/* ---- manifests (lacs-manifest/1, SPEC.md 10.1) ---- */

/* The manifest of the jobs (in their order) as JSON text (malloc'd). With
 * `generate` (n strings, each a JSON array of arguments, or NULL), each entry
 * carries it as "generate" (user-shaped sets, SPEC.md 10.8). */
char *lacs_manifest_json(const lacs_vector_job *jobs, size_t n, const char *set, char *const *generate);

/* Compares manifest texts `committed` and `generated` case by case and writes
 * what differs to `report` (one line each, at most `max_lines`, then a count):
 * the versions, cases missing or added, and per case the fields that differ.
 * Returns the number of differences (0: equal as JSON). */
int lacs_manifest_diff(const char *committed, const char *generated, FILE *report, int max_lines);

/* The manifest `existing` (NULL: none yet) with the cases of `added` added
 * (an existing entry of the same id replaced), sorted by id (malloc'd); NULL
 * with `message` saying why if `existing` is not JSON or its format,
 * versions or set differ from `added`'s. */
char *lacs_manifest_merge(const char *existing, const char *added, char *message, size_t size);

/* Writes `text` to `path` (atomically, through a temporary file in the same
 * directory). An existing file equal to `text` is left alone; one that
 * differs is replaced only with `force`, else reported (with the diff) and 1
 * returned. */
int lacs_manifest_write(const char *path, const char *text, int force, const char *program);

/* The staleness check of a committed manifest (make vectors-full-check,
 * SPEC.md 10.7): its format, spec and generator versions against the code's;
 * its case list (id, op, tier, flags, path) against the jobs; every case's
 * inputs (drawn, not computed: lacs_golden_inputs) against inputs_sha256 and
 * the inputs' shapes; and the jobs whose index is in `regenerate` built
 * whole and compared with the entry's bytes, shapes and sha256 (the file
 * hash only where the libm is glibc's on x86-64, as 10.7 says; elsewhere a
 * difference there is reported, not counted). Writes one line per problem to
 * `report`; returns the number of problems. */
int lacs_manifest_check(const char *manifest_path, lacs_vector_job *jobs, size_t n, const size_t *regenerate,
                        size_t n_regenerate, int threads, FILE *report);

/* ---- user-shaped cases (SPEC.md 10.8) ---- */

typedef struct {
    char op[48];
    lacs_tier_mask tiers;
    int64_t B, T, H, HV, K, V, rows, dim; /* -1: not given */
    char lengths[8192];      /* varlen: "100,0,28" (B = 1, T = their sum), or "" */
    char inputs[1024];       /* recipes "q:normal k:unit ...", after every override */
    char params[256];        /* "scale=0.3 eps=1e-6" */
    int64_t split;
    char flags[256];
    char reason[512];
    char name[96];
    int has_seed;
    uint64_t seed;
    /* resolved by lacs_user_case_resolve */
    char cu_seqlens[8192];
    lacs_case c;
} lacs_user_case;

/* Starts a user case from op `op`: its plain recipes and parameters (those
 * of the catalog's first plain case of the op: a Basic row, else a Gradient
 * row, else its first; without initial states), both tiers, no shape yet.
 * LACS_ERR_PARAM for an unknown op. */
int lacs_user_case_from_op(lacs_user_case *u, const char *op);
/* Starts from a catalog case, `<op>-<name>` or `<op>-<tier>-<name>` (the
 * tier then chosen too): its op, shape, varlen lengths, recipes, parameters,
 * state carry, flags and reason. LACS_ERR_PARAM if there is none. */
int lacs_user_case_from_catalog(lacs_user_case *u, const char *case_name);
/* Replaces every recipe by those of `list` ("q:normal k:unit ..."), each
 * checked as lacs_user_case_set_input checks it. */
int lacs_user_case_set_inputs(lacs_user_case *u, const char *list);
/* Sets input `name`'s recipe ("none" removes the input); the name must be
 * one the op reads (its required or optional inputs). */
int lacs_user_case_set_input(lacs_user_case *u, const char *name, const char *recipe);
/* The gates: "random" (the op's plain recipe), "zero", "const(C)", "mixed",
 * "strong", "retnet" (RetNet's per-head g_gamma), "per-channel" (gk in place
 * of g, KDA), or any recipe. */
int lacs_user_case_set_gate(lacs_user_case *u, const char *gate);
/* Adds the initial states the op reads (h0:normal(0.5), MesaNet's h0_kk:psd(1), as the catalog does). */
int lacs_user_case_add_initial_state(lacs_user_case *u);
int lacs_user_case_set_param(lacs_user_case *u, const char *name, double value);
/* Completes u into u->c: the shape defaults (B = 1, HV = H, V = K), the
 * varlen offsets, the flags derived from the shape where none were given,
 * the name derived from the shape where none was given; checks the shape,
 * the flags, the name and the reason: LACS_ERR_PARAM with lacs_last_error()
 * naming the problem. (The recipes are checked when the inputs are drawn:
 * lacs_vector_estimate_run does that before any long computation.) */
int lacs_user_case_resolve(lacs_user_case *u);
/* The canonical arguments of `lacs generate` that rebuild tier `tier` of u
 * (resolved), as a JSON array (malloc'd): stored in the manifest, so that the
 * set can be regenerated and checked (lacs generate --check DIR). */
char *lacs_user_case_arguments(const lacs_user_case *u, lacs_tier_mask tier);

#ifdef __cplusplus
}
#endif

#endif
