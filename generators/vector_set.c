/* Generating sets of golden vectors (lacs/generate.h; SPEC.md 10.1, 10.7, 10.8).
 *
 * Read top to bottom: the cost model of a case (which orders a run and
 * scales its twin's time); a run (workers, the gauge's threads, the progress
 * line, writing or comparing one case); the estimate; manifests (writing,
 * comparing, checking a committed one). lacs-generate and `lacs generate`
 * both come here, so that a user-shaped vector is written, hashed and
 * listed exactly as a catalog one.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../core/error.h"
#include "lacs/catalog.h"
#include "lacs/gauge.h"
#include "lacs/generate.h"
#include "lacs/ops.h"
#include "lacs/safetensors.h"
#include "lacs/types.h"

#define ULP_BOUND 4
#define GAUGE_BOUND 1e-4

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void lacs_format_bytes(double bytes, char *text, size_t size)
{
    if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(text, size, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024)
        snprintf(text, size, "%.1f MiB", bytes / (1024.0 * 1024));
    else
        snprintf(text, size, "%.0f KiB", bytes / 1024.0);
}

void lacs_format_seconds(double seconds, char *text, size_t size)
{
    if (seconds >= 3600)
        snprintf(text, size, "%d h %02d min", (int)(seconds / 3600), (int)fmod(seconds / 60, 60));
    else if (seconds >= 60)
        snprintf(text, size, "%d min %02d s", (int)(seconds / 60), (int)fmod(seconds, 60));
    else
        snprintf(text, size, "%.0f s", seconds < 1 ? 1 : seconds);
}

/* ---- the cost model: the reference's work, up to a factor per op and shape of head ---- */

/* The lengths of the case's sequences (varlen: from cu_seqlens; else B of T). */
static double sum_of_powers(const lacs_case *c, int power)
{
    if (!c->cu_seqlens)
        return (double)c->B * pow((double)c->T, power);
    double sum = 0, previous = 0;
    const char *p = c->cu_seqlens;
    for (int first = 1; *p;) {
        char *end;
        const double offset = strtod(p, &end);
        if (end == p)
            break;
        if (!first)
            sum += pow(offset - previous, power);
        previous = offset;
        first = 0;
        p = *end == ',' ? end + 1 : end;
    }
    return sum;
}

/* Relative work: recurrent ops O(tokens HV K V), MesaNet O(tokens HV K^2 (K + V)),
 * the attention forms O(L^2 HV (K + V)) per sequence (PaTH's matrix form and
 * DeltaFormer's solve O(L^3 HV) as well), the norms O(rows dim). Only ratios
 * between cases of one op and head shape are used as times. */
double lacs_case_work(const lacs_case *c)
{
    const lacs_op_info *info = lacs_op_find(c->op);
    if (!info)
        return 0;
    const double HV = (double)c->HV, K = (double)c->K, V = (double)c->V;
    switch (info->family) {
    case LACS_FAMILY_RECURRENT:
        return sum_of_powers(c, 1) * HV * K * V;
    case LACS_FAMILY_MESA:
        return sum_of_powers(c, 1) * HV * K * K * (K + V);
    case LACS_FAMILY_ATTENTION: {
        double work = sum_of_powers(c, 2) * HV * (K + V);
        if (strncmp(c->op, "path_attn", 9) == 0 || strncmp(c->op, "deltaformer", 11) == 0)
            work += sum_of_powers(c, 3) * HV;
        return work;
    }
    case LACS_FAMILY_VJP: { /* a gradient (SPEC.md 4.19): the forward's work, about three times over */
        const lacs_op_info *forward = lacs_op_forward(info);
        lacs_case f = *c;
        f.op = forward ? forward->name : c->op;
        return forward && forward != info ? 3 * lacs_case_work(&f) : 0;
    }
    case LACS_FAMILY_NORM:
    default:
        return (double)c->rows * (double)c->dim;
    }
}

/* ---- jobs ---- */

void lacs_vector_job_init(lacs_vector_job *job, const lacs_case *c, lacs_tier_mask tier, const char *prefix)
{
    memset(job, 0, sizeof *job);
    job->c = *c;
    job->tier = tier;
    snprintf(job->id, sizeof job->id, "%s-%s-%s", c->op, tier == LACS_TIER_FP32 ? "fp32" : "bf16", c->name);
    snprintf(job->path, sizeof job->path, "%s%s/%s.safetensors", prefix ? prefix : "", c->op, job->id);
}

void lacs_vector_job_free(lacs_vector_job *job)
{
    free(job->shapes);
    job->shapes = NULL;
}

static int build_job(const lacs_vector_job *job, lacs_golden *g)
{
    return lacs_golden_build_seeded(&job->c, job->tier, job->has_seed ? &job->seed : NULL, g);
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

/* SHA-256 and size of a file, read in pieces (a production vector is GiB). */
static int hash_file(const char *path, char hex[65], long long *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    lacs_sha256 s;
    lacs_sha256_init(&s);
    static const size_t piece = 1 << 20;
    unsigned char *buffer = malloc(piece);
    long long total = 0;
    size_t got = 0;
    while (buffer && (got = fread(buffer, 1, piece, f)) > 0) {
        lacs_sha256_update(&s, buffer, got);
        total += (long long)got;
    }
    const int ok = buffer && !ferror(f);
    free(buffer);
    fclose(f);
    lacs_sha256_final(&s, hex);
    *bytes = total;
    return ok ? 0 : -1;
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

/* The tensors' shapes as a JSON object (the first n of them). */
static char *shapes_json(const lacs_golden *g, int n)
{
    cJSON *shapes = cJSON_CreateObject();
    for (int i = 0; i < n; i++) {
        cJSON *shape = cJSON_AddArrayToObject(shapes, g->tensors[i].name);
        for (int d = 0; d < g->tensors[i].ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)g->tensors[i].shape[d]));
    }
    char *text = cJSON_PrintUnformatted(shapes);
    cJSON_Delete(shapes);
    return text;
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

int lacs_vector_compare_file(const lacs_golden *g, const char *path, char *message, size_t size)
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

/* ---- a run ---- */

typedef struct run_state run_state;

typedef struct {
    run_state *run;
    size_t job;      /* the job it works on, or (size_t)-1 */
    int samples;     /* gauge samples done on it */
    double started;  /* when it started the job */
} worker_slot;

struct run_state {
    lacs_vector_job *jobs;
    const lacs_vector_run_options *options;
    size_t *order;   /* jobs, largest first */
    double *work;
    size_t n, next, done, failed, running;
    double total_work, done_work, started, last_draw;
    worker_slot *workers;
    int n_workers;
    pthread_mutex_t lock;
};

/* The progress line (under the lock): cases done, the time, the time left,
 * the cases running and how far their gauges are. */
static void draw_progress(run_state *s, int force)
{
    const double t = now_seconds();
    if (!s->options->progress || (!force && t - s->last_draw < 0.2))
        return;
    s->last_draw = t;
    double done_work = s->done_work;
    for (int w = 0; w < s->n_workers; w++)
        if (s->workers[w].job != (size_t)-1)
            done_work += s->work[s->workers[w].job] * 0.8 * s->workers[w].samples / LACS_GAUGE_SAMPLES;
    const double elapsed = t - s->started;
    char elapsed_text[32], left_text[48] = "";
    lacs_format_seconds(elapsed, elapsed_text, sizeof elapsed_text);
    if (done_work > 0 && s->total_work > 0 && elapsed > 2) {
        char left[32];
        lacs_format_seconds(elapsed * (s->total_work - done_work) / done_work, left, sizeof left);
        snprintf(left_text, sizeof left_text, ", about %s left", left);
    } else if (s->options->estimated_seconds > 0) {
        char left[32];
        lacs_format_seconds(s->options->estimated_seconds - elapsed > 1 ? s->options->estimated_seconds - elapsed : 1,
                            left, sizeof left);
        snprintf(left_text, sizeof left_text, ", about %s left", left);
    }
    char running[256] = "";
    for (int w = 0, shown = 0; w < s->n_workers && shown < 2; w++) {
        const worker_slot *slot = &s->workers[w];
        if (slot->job == (size_t)-1)
            continue;
        size_t used = strlen(running);
        snprintf(running + used, sizeof running - used, "%s%s (gauge %d/%d)", shown ? ", " : "",
                 s->jobs[slot->job].id, slot->samples, LACS_GAUGE_SAMPLES);
        shown++;
    }
    fprintf(stderr, "\r\033[K[%zu/%zu] %s%s  %s", s->done, s->n, elapsed_text, left_text, running);
    fflush(stderr);
}

static void on_sample(void *context)
{
    worker_slot *slot = context;
    run_state *s = slot->run;
    pthread_mutex_lock(&s->lock);
    slot->samples++;
    draw_progress(s, 0);
    /* without a terminal, a large case says how far it is every quarter of its gauge */
    if (!s->options->progress && s->n <= 4 && slot->samples % (LACS_GAUGE_SAMPLES / 4) == 0 &&
        now_seconds() - slot->started > 10) {
        char elapsed[32];
        lacs_format_seconds(now_seconds() - s->started, elapsed, sizeof elapsed);
        fprintf(stderr, "%s: %s: gauge %d/%d (%s)\n", s->options->program, s->jobs[slot->job].id, slot->samples,
                LACS_GAUGE_SAMPLES, elapsed);
    }
    pthread_mutex_unlock(&s->lock);
}

static void run_one(const lacs_vector_run_options *o, lacs_vector_job *j)
{
    lacs_golden g;
    const double started = now_seconds();
    if (build_job(j, &g) != LACS_OK) {
        snprintf(j->message, sizeof j->message, "%s: %s", j->id, lacs_last_error());
        return;
    }
    j->certified = g.certified_max;
    char full[1024];
    if (o->check_dir) {
        snprintf(full, sizeof full, "%s/%s", o->check_dir, j->path);
        j->ok = lacs_vector_compare_file(&g, full, j->message, sizeof j->message);
    } else {
        snprintf(full, sizeof full, "%s/%s", o->out_dir, j->path);
        if (make_parents(full) != 0)
            snprintf(j->message, sizeof j->message, "%s: cannot create its directory: %s", full, strerror(errno));
        else if (lacs_safetensors_write(full, g.tensors, g.n_tensors, "lacs", g.metadata, o->force) != LACS_OK)
            snprintf(j->message, sizeof j->message, "%s", lacs_last_error());
        else if (hash_file(full, j->sha256, &j->bytes) != 0)
            snprintf(j->message, sizeof j->message, "%s: cannot read back: %s", full, strerror(errno));
        else {
            inputs_hash(&g, j->inputs_sha256);
            j->shapes = shapes_json(&g, g.n_tensors);
            j->ok = j->shapes != NULL;
        }
    }
    lacs_golden_free(&g);
    j->seconds = now_seconds() - started;
}

static void *worker(void *arg)
{
    worker_slot *slot = arg;
    run_state *s = slot->run;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        if (s->next >= s->n) {
            pthread_mutex_unlock(&s->lock);
            return NULL;
        }
        const size_t i = s->order[s->next++];
        slot->job = i;
        slot->samples = 0;
        slot->started = now_seconds();
        s->running++;
        /* the gauge's samples in parallel when fewer cases than threads are left to run */
        int gauge_threads = 1;
        if (s->next >= s->n)
            gauge_threads = s->options->threads / (int)(s->running > 0 ? s->running : 1);
        draw_progress(s, 1);
        pthread_mutex_unlock(&s->lock);

        lacs_gauge_parallelism parallelism = {gauge_threads > 1 ? gauge_threads : 1, on_sample, slot};
        lacs_gauge_set_parallelism(&parallelism);
        run_one(s->options, &s->jobs[i]);

        pthread_mutex_lock(&s->lock);
        const lacs_vector_job *j = &s->jobs[i];
        s->done++;
        s->running--;
        s->done_work += s->work[i];
        slot->job = (size_t)-1;
        if (!j->ok) {
            s->failed++;
            fprintf(stderr, "%sFAIL %s\n", s->options->progress ? "\r\033[K" : "", j->message);
        }
        if (s->options->progress) {
            draw_progress(s, 1);
        } else if (s->n <= 10 || s->done * 10 / s->n != (s->done - 1) * 10 / s->n) {
            char elapsed[32];
            lacs_format_seconds(now_seconds() - s->started, elapsed, sizeof elapsed);
            fprintf(stderr, "%s: %zu/%zu cases (%s)\n", s->options->program, s->done, s->n, elapsed);
        }
        pthread_mutex_unlock(&s->lock);
    }
}

size_t lacs_vector_run(lacs_vector_job *jobs, size_t n, const lacs_vector_run_options *options)
{
    run_state s;
    memset(&s, 0, sizeof s);
    s.jobs = jobs;
    s.options = options;
    s.n = n;
    s.order = malloc((n + 1) * sizeof *s.order);
    s.work = malloc((n + 1) * sizeof *s.work);
    const int threads = options->threads > 0 ? options->threads : 1;
    s.n_workers = threads < (int)n ? threads : (int)n;
    s.workers = calloc((size_t)s.n_workers + 1, sizeof *s.workers);
    if (!s.order || !s.work || !s.workers) {
        free(s.order);
        free(s.work);
        free(s.workers);
        for (size_t i = 0; i < n; i++)
            snprintf(jobs[i].message, sizeof jobs[i].message, "%s: out of memory", jobs[i].id);
        return n;
    }
    pthread_mutex_init(&s.lock, NULL);
    for (size_t i = 0; i < n; i++) {
        s.order[i] = i;
        s.work[i] = lacs_case_work(&jobs[i].c);
        s.total_work += s.work[i];
    }
    /* largest first (stable), so that the longest cases do not start last */
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k > 0 && s.work[s.order[k - 1]] < s.work[s.order[k]]; k--) {
            size_t t = s.order[k];
            s.order[k] = s.order[k - 1];
            s.order[k - 1] = t;
        }
    s.started = now_seconds();
    pthread_t handles[256];
    int started_threads = 0;
    for (int w = 0; w < s.n_workers && w < 256; w++) {
        s.workers[w].run = &s;
        s.workers[w].job = (size_t)-1;
        if (pthread_create(&handles[w], NULL, worker, &s.workers[w]) == 0)
            started_threads++;
        else
            break;
    }
    if (started_threads == 0) {
        s.workers[0].run = &s;
        s.workers[0].job = (size_t)-1;
        worker(&s.workers[0]);
    }
    for (int w = 0; w < started_threads; w++)
        pthread_join(handles[w], NULL);
    if (options->progress)
        fprintf(stderr, "\r\033[K");
    pthread_mutex_destroy(&s.lock);
    free(s.order);
    free(s.work);
    free(s.workers);
    return s.failed;
}

/* ---- the estimate ---- */

/* Re-raises the last error as "<id>: <what>" (copied first: lacs_last_error() is the buffer written). */
static int job_error(const lacs_vector_job *j)
{
    char message[2048];
    snprintf(message, sizeof message, "%s", lacs_last_error());
    const size_t op = strlen(j->c.op);
    const char *what = strncmp(message, j->c.op, op) == 0 && strncmp(message + op, ": ", 2) == 0 ? message + op + 2
                                                                                                   : message;
    return lacs_internal_error(LACS_ERR_PARAM, j->c.op, "%s: %s", j->id, what);
}

/* The reduced twin of c: one batch row, T cut (a few dozen tokens for the
 * recurrent ops, 128 for the attention forms), rows cut for the norms; no
 * varlen, no state carry. Its work is that of the same op on the same heads. */
static lacs_case twin_of(const lacs_case *c)
{
    lacs_case t = *c;
    const lacs_op_info *info = lacs_op_find(c->op);
    t.cu_seqlens = NULL;
    t.split = 0;
    if (info && info->family == LACS_FAMILY_NORM) {
        t.rows = c->rows < 8 ? c->rows : 8;
    } else {
        const int64_t cap = info && info->family == LACS_FAMILY_ATTENTION ? 128 : 16;
        t.B = 1;
        t.T = c->T < cap ? c->T : cap;
    }
    return t;
}

typedef struct {
    double first, last;
    int samples;
} sample_clock;

static void clock_sample(void *context)
{
    sample_clock *clock = context;
    const double t = now_seconds();
    if (clock->samples++ == 0)
        clock->first = t;
    clock->last = t;
}

int lacs_vector_estimate_run(const lacs_vector_job *jobs, size_t n, int threads, int measure,
                             lacs_vector_estimate *e)
{
    memset(e, 0, sizeof *e);
    if (threads < 1)
        threads = 1;
    double serial = 0, largest_base = 0, largest_per_thread = 0;
    long long top_memory[64] = {0};
    for (size_t i = 0; i < n; i++) {
        const lacs_vector_job *j = &jobs[i];
        /* bytes and memory from the inputs' shapes (the twin below draws the recipes) */
        lacs_golden g;
        if (lacs_golden_input_shapes(&j->c, j->tier, &g) != LACS_OK)
            return job_error(j);
        lacs_output_shape shapes[LACS_OPS_MAX_OUTPUTS];
        int n_shapes = 0;
        if (lacs_reference_output_shapes(j->c.op, g.tensors, g.n_inputs, shapes, &n_shapes) != LACS_OK) {
            lacs_golden_free(&g);
            return job_error(j);
        }
        long long input_bytes = 0, input_elements = 0, output_elements = 0;
        for (int t = 0; t < g.n_inputs; t++) {
            input_elements += lacs_tensor_count(&g.tensors[t]);
            input_bytes += lacs_tensor_count(&g.tensors[t]) * (long long)lacs_dtype_size(g.tensors[t].dtype);
        }
        lacs_golden_free(&g);
        for (int s = 0; s < n_shapes; s++) {
            long long count = 1;
            for (int d = 0; d < shapes[s].ndim; d++)
                count *= shapes[s].shape[d];
            output_elements += count * (j->c.split > 0 && strcmp(shapes[s].name, "o") != 0 ? 2 : 1);
        }
        e->bytes += input_bytes + 12 * output_elements + 4096; /* F64 golden + F32 gauge each; the header */
        /* resident: the inputs, the goldens in double and long double, the gauge's sums; per
         * gauge thread, the perturbed inputs and outputs in double and the reference's own copy */
        const long long base = input_bytes + 16 * input_elements + 56 * output_elements;
        const long long per_thread = 16 * input_elements + 8 * output_elements;
        if (base + per_thread > largest_base + largest_per_thread) {
            largest_base = (double)base;
            largest_per_thread = (double)per_thread;
        }
        for (int k = 0; k < threads && k < 64; k++)
            if (base + per_thread > top_memory[k]) {
                for (int m = (threads < 64 ? threads : 64) - 1; m > k; m--)
                    top_memory[m] = top_memory[m - 1];
                top_memory[k] = base + per_thread;
                break;
            }
        if (!measure)
            continue;
        /* time: the twin, one thread, scaled by the work */
        const lacs_case twin = twin_of(&j->c);
        const double work = lacs_case_work(&j->c), twin_work = lacs_case_work(&twin);
        sample_clock clock = {0, 0, 0};
        lacs_gauge_parallelism parallelism = {1, clock_sample, &clock};
        lacs_gauge_set_parallelism(&parallelism);
        const double started = now_seconds();
        lacs_golden tg;
        const int rc = lacs_golden_build_seeded(&twin, j->tier, j->has_seed ? &j->seed : NULL, &tg);
        const double twin_seconds = now_seconds() - started;
        lacs_gauge_parallelism serial_again = {1, NULL, NULL};
        lacs_gauge_set_parallelism(&serial_again);
        if (rc == LACS_OK && twin_work <= 0) {
            lacs_golden_free(&tg);
            return lacs_internal_error(LACS_ERR_PARAM, j->c.op, "%s: the cost model (lacs_case_work) has no work "
                                       "for this op", j->id);
        }
        if (rc != LACS_OK) {
            /* a twin that cannot be built: a recipe that needs the full shape (all_bf16, a
             * small case of the norms: its time is left out), or a case that cannot be built */
            const lacs_op_info *info = lacs_op_find(j->c.op);
            if (info && info->family == LACS_FAMILY_NORM && j->c.rows * j->c.dim <= 65536)
                continue;
            return job_error(j);
        }
        lacs_golden_free(&tg);
        const double scale = work / twin_work;
        const double gauge_share =
            clock.samples > 1 ? (clock.last - clock.first) * LACS_GAUGE_SAMPLES / (clock.samples - 1) : 0;
        const double fraction = twin_seconds > 0 && gauge_share < twin_seconds ? gauge_share / twin_seconds : 0.75;
        const double case_serial = twin_seconds * scale;
        serial += case_serial;
        const double alone = case_serial * (1 - fraction) + case_serial * fraction / threads;
        if (alone > e->largest_seconds) {
            e->largest_seconds = alone;
            snprintf(e->largest, sizeof e->largest, "%s", j->id);
        }
        e->measured++;
    }
    long long concurrent = 0;
    for (int k = 0; k < threads && k < 64; k++)
        concurrent += top_memory[k];
    const double alone = largest_base + largest_per_thread * threads;
    e->memory_bytes = (long long)(alone > (double)concurrent ? alone : (double)concurrent);
    if (e->measured) {
        const double spread = serial / threads;
        e->seconds = spread > e->largest_seconds ? spread : e->largest_seconds;
    }
    return LACS_OK;
}

/* ---- manifests ---- */

char *lacs_manifest_json(const lacs_vector_job *jobs, size_t n, const char *set, char *const *generate)
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
        cJSON_AddStringToObject(e, "op", jobs[i].c.op);
        cJSON_AddStringToObject(e, "tier", jobs[i].tier == LACS_TIER_FP32 ? "fp32" : "bf16");
        cJSON *flags = cJSON_AddArrayToObject(e, "flags");
        const char *cursor = jobs[i].c.flags, *w;
        for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)len, w);
            cJSON_AddItemToArray(flags, cJSON_CreateString(word));
        }
        cJSON_AddStringToObject(e, "path", jobs[i].path);
        cJSON *shapes = jobs[i].shapes ? cJSON_Parse(jobs[i].shapes) : NULL;
        cJSON_AddItemToObject(e, "shapes", shapes ? shapes : cJSON_CreateObject());
        cJSON_AddNumberToObject(e, "bytes", (double)jobs[i].bytes);
        cJSON_AddStringToObject(e, "sha256", jobs[i].sha256);
        cJSON_AddStringToObject(e, "inputs_sha256", jobs[i].inputs_sha256);
        if (generate && generate[i]) {
            cJSON *arguments = cJSON_Parse(generate[i]);
            if (arguments)
                cJSON_AddItemToObject(e, "generate", arguments);
        }
        cJSON_AddItemToArray(cases, e);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

static const cJSON *find_case(const cJSON *cases, const char *id)
{
    const cJSON *e;
    cJSON_ArrayForEach(e, cases)
    {
        const cJSON *eid = cJSON_GetObjectItemCaseSensitive(e, "id");
        if (cJSON_IsString(eid) && strcmp(eid->valuestring, id) == 0)
            return e;
    }
    return NULL;
}

typedef struct {
    FILE *out;
    int count, max_lines;
} diff_report;

static void report_line(diff_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report_line(diff_report *r, const char *fmt, ...)
{
    if (r->out && r->count < r->max_lines) {
        va_list args;
        va_start(args, fmt);
        fputs("  ", r->out);
        vfprintf(r->out, fmt, args);
        fputc('\n', r->out);
        va_end(args);
    }
    r->count++;
}

static const char *string_field(const cJSON *object, const char *name)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    return cJSON_IsString(item) ? item->valuestring : "(none)";
}

int lacs_manifest_diff(const char *committed_text, const char *generated_text, FILE *report, int max_lines)
{
    diff_report r = {report, 0, max_lines};
    cJSON *a = cJSON_Parse(committed_text), *b = cJSON_Parse(generated_text);
    if (!a || !b) {
        report_line(&r, "a manifest is not valid JSON");
        cJSON_Delete(a);
        cJSON_Delete(b);
        return r.count;
    }
    static const char *const top[] = {"format", "spec_version", "generator_version", "set"};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (strcmp(string_field(a, top[i]), string_field(b, top[i])) != 0)
            report_line(&r, "%s: committed %s, generated %s", top[i], string_field(a, top[i]),
                        string_field(b, top[i]));
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(a, "cases"), *cb = cJSON_GetObjectItemCaseSensitive(b, "cases");
    const cJSON *e;
    cJSON_ArrayForEach(e, ca)
    {
        const char *id = string_field(e, "id");
        const cJSON *other = find_case(cb, id);
        if (!other) {
            report_line(&r, "%s: in the committed manifest, not generated", id);
            continue;
        }
        char fields[256] = "";
        const cJSON *field;
        cJSON_ArrayForEach(field, e)
        {
            const cJSON *twin = cJSON_GetObjectItemCaseSensitive(other, field->string);
            if (!twin || !cJSON_Compare(field, twin, 1)) {
                size_t used = strlen(fields);
                snprintf(fields + used, sizeof fields - used, "%s%s", used ? ", " : "", field->string);
            }
        }
        cJSON_ArrayForEach(field, other)
        if (!cJSON_GetObjectItemCaseSensitive(e, field->string)) {
            size_t used = strlen(fields);
            snprintf(fields + used, sizeof fields - used, "%s%s", used ? ", " : "", field->string);
        }
        if (fields[0])
            report_line(&r, "%s: %s differ%s", id, fields, strchr(fields, ',') ? "" : "s");
    }
    cJSON_ArrayForEach(e, cb)
    if (!find_case(ca, string_field(e, "id")))
        report_line(&r, "%s: generated, not in the committed manifest", string_field(e, "id"));
    if (r.count == 0 && !cJSON_Compare(a, b, 1))
        report_line(&r, "the cases are listed in another order");
    if (report && r.count > max_lines)
        fprintf(report, "  ... and %d more\n", r.count - max_lines);
    cJSON_Delete(a);
    cJSON_Delete(b);
    return r.count;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t size = 0, capacity = 1 << 16;
    char *text = malloc(capacity);
    size_t got;
    while (text && (got = fread(text + size, 1, capacity - size - 1, f)) > 0) {
        size += got;
        if (size + 1 == capacity) {
            char *bigger = realloc(text, capacity * 2);
            if (!bigger) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
            capacity *= 2;
        }
    }
    fclose(f);
    if (text)
        text[size] = 0;
    return text;
}

int lacs_manifest_write(const char *path, const char *text, int force, const char *program)
{
    char *old = read_text(path);
    if (old) {
        const size_t length = strlen(text);
        const int same = strlen(old) == length + 1 && memcmp(old, text, length) == 0 && old[length] == '\n';
        if (same) {
            free(old);
            fprintf(stderr, "%s: %s is unchanged\n", program, path);
            return 0;
        }
        if (!force) {
            fprintf(stderr, "%s: %s differs from the cases generated; not replaced (pass --force to replace it):\n",
                    program, path);
            lacs_manifest_diff(old, text, stderr, 20);
            free(old);
            return 1;
        }
        free(old);
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        fprintf(stderr, "%s: cannot write %s: %s\n", program, path, strerror(errno));
        remove(tmp);
        return 1;
    }
    fprintf(stderr, "%s: wrote %s\n", program, path);
    return 0;
}

char *lacs_manifest_merge(const char *existing, const char *added, char *message, size_t size)
{
    cJSON *old = existing ? cJSON_Parse(existing) : NULL, *add = cJSON_Parse(added);
    char *text = NULL;
    if (existing && !old) {
        snprintf(message, size, "it is not valid JSON");
        goto done;
    }
    if (!add) {
        snprintf(message, size, "out of memory");
        goto done;
    }
    if (old) {
        static const char *const fields[] = {"format", "spec_version", "generator_version", "set"};
        for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
            if (strcmp(string_field(old, fields[i]), string_field(add, fields[i])) != 0) {
                snprintf(message, size, "its %s is %s, this one's %s (a manifest holds vectors of one generator "
                                        "and set: use another directory, or regenerate those vectors)",
                         fields[i], string_field(old, fields[i]), string_field(add, fields[i]));
                goto done;
            }
        /* the old cases not replaced, then the new ones, sorted by id */
        cJSON *cases = cJSON_GetObjectItemCaseSensitive(add, "cases");
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(old, "cases"))
        if (!find_case(cases, string_field(e, "id")))
            cJSON_AddItemToArray(cases, cJSON_Duplicate(e, 1));
    }
    cJSON *cases = cJSON_GetObjectItemCaseSensitive(add, "cases");
    const int n = cJSON_GetArraySize(cases);
    cJSON *sorted = cJSON_CreateArray();
    for (int taken = 0; taken < n; taken++) {
        cJSON *first = NULL, *e;
        cJSON_ArrayForEach(e, cases)
        if (!first || strcmp(string_field(e, "id"), string_field(first, "id")) < 0)
            first = e;
        cJSON_AddItemToArray(sorted, cJSON_DetachItemViaPointer(cases, first));
    }
    cJSON_ReplaceItemInObjectCaseSensitive(add, "cases", sorted);
    text = cJSON_Print(add);
done:
    cJSON_Delete(old);
    cJSON_Delete(add);
    return text;
}

/* Whether this build's libm is the one the committed file hashes were made with (SPEC.md 10.7). */
static int libm_matches_committed(void)
{
#if defined(__GLIBC__) && defined(__x86_64__)
    return 1;
#else
    return 0;
#endif
}

/* Whether two space-separated lists hold the same words in the same order. */
static int same_words(const char *a, const char *b)
{
    const char *ca = a ? a : "", *cb = b ? b : "", *wa, *wb;
    for (;;) {
        const size_t la = lacs_next_word(&ca, &wa), lb = lacs_next_word(&cb, &wb);
        if (la != lb || (la && strncmp(wa, wb, la) != 0))
            return 0;
        if (!la)
            return 1;
    }
}

int lacs_manifest_check(const char *manifest_path, lacs_vector_job *jobs, size_t n, const size_t *regenerate,
                        size_t n_regenerate, int threads, FILE *report)
{
    diff_report r = {report, 0, 1000};
    char *text = read_text(manifest_path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) {
        report_line(&r, "%s: cannot be read or is not JSON", manifest_path);
        return r.count;
    }
    if (strcmp(string_field(root, "format"), "lacs-manifest/1") != 0)
        report_line(&r, "format is %s, not lacs-manifest/1", string_field(root, "format"));
    if (strcmp(string_field(root, "spec_version"), LACS_SPEC_VERSION) != 0)
        report_line(&r, "spec_version is %s, the code's is %s: regenerate it", string_field(root, "spec_version"),
                    LACS_SPEC_VERSION);
    if (strcmp(string_field(root, "generator_version"), LACS_GENERATOR_VERSION) != 0)
        report_line(&r, "generator_version is %s, the code's is %s: regenerate it",
                    string_field(root, "generator_version"), LACS_GENERATOR_VERSION);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    /* the list: every job listed, in order, with its op, tier, flags and path */
    size_t index = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cases)
    {
        const char *id = string_field(e, "id");
        if (index >= n || strcmp(id, jobs[index].id) != 0) {
            size_t k = 0;
            while (k < n && strcmp(jobs[k].id, id) != 0)
                k++;
            report_line(&r, "%s: %s", id, k < n ? "listed out of the catalog's order" : "not a case of the catalog");
        }
        index++;
    }
    for (size_t k = 0; k < n; k++)
        if (!find_case(cases, jobs[k].id))
            report_line(&r, "%s: a case of the catalog, not in the manifest", jobs[k].id);
    /* every case's inputs, drawn (cheap) and hashed */
    for (size_t k = 0; k < n; k++) {
        const cJSON *entry = find_case(cases, jobs[k].id);
        if (!entry)
            continue;
        char flags[256] = "";
        const cJSON *flag;
        cJSON_ArrayForEach(flag, cJSON_GetObjectItemCaseSensitive(entry, "flags"))
        {
            size_t used = strlen(flags);
            snprintf(flags + used, sizeof flags - used, "%s%s", used ? " " : "",
                     cJSON_IsString(flag) ? flag->valuestring : "?");
        }
        if (strcmp(string_field(entry, "op"), jobs[k].c.op) != 0 ||
            strcmp(string_field(entry, "tier"), jobs[k].tier == LACS_TIER_FP32 ? "fp32" : "bf16") != 0 ||
            strcmp(string_field(entry, "path"), jobs[k].path) != 0 || !same_words(flags, jobs[k].c.flags))
            report_line(&r, "%s: op, tier, path or flags differ from the catalog's", jobs[k].id);
        lacs_golden g;
        if (lacs_golden_inputs(&jobs[k].c, jobs[k].tier, jobs[k].has_seed ? &jobs[k].seed : NULL, &g) != LACS_OK) {
            report_line(&r, "%s: %s", jobs[k].id, lacs_last_error());
            continue;
        }
        char hash[65];
        inputs_hash(&g, hash);
        if (strcmp(hash, string_field(entry, "inputs_sha256")) != 0)
            report_line(&r, "%s: inputs_sha256 differs (the inputs drawn now are not those listed)", jobs[k].id);
        /* the inputs' shapes, a subset of the entry's */
        const cJSON *shapes = cJSON_GetObjectItemCaseSensitive(entry, "shapes");
        char *drawn = shapes_json(&g, g.n_inputs);
        cJSON *drawn_json = drawn ? cJSON_Parse(drawn) : NULL;
        const cJSON *shape;
        cJSON_ArrayForEach(shape, drawn_json)
        if (!cJSON_Compare(shape, cJSON_GetObjectItemCaseSensitive(shapes, shape->string), 1)) {
            report_line(&r, "%s: the shape of input '%s' differs", jobs[k].id, shape->string);
            break;
        }
        cJSON_Delete(drawn_json);
        free(drawn);
        lacs_golden_free(&g);
    }
    /* some cases built whole, in memory */
    for (size_t k = 0; k < n_regenerate; k++) {
        lacs_vector_job *j = &jobs[regenerate[k]];
        const cJSON *entry = find_case(cases, j->id);
        if (!entry)
            continue;
        lacs_gauge_parallelism parallelism = {threads, NULL, NULL};
        lacs_gauge_set_parallelism(&parallelism);
        lacs_golden g;
        const double started = now_seconds();
        const int rc = build_job(j, &g);
        lacs_gauge_parallelism serial = {1, NULL, NULL};
        lacs_gauge_set_parallelism(&serial);
        if (rc != LACS_OK) {
            report_line(&r, "%s: %s", j->id, lacs_last_error());
            continue;
        }
        j->seconds = now_seconds() - started;
        /* the file, written to a temporary directory and hashed as `make vectors-full` would */
        char dir[] = "/tmp/lacs-manifest-check-XXXXXX";
        char path[1024];
        if (!mkdtemp(dir)) {
            report_line(&r, "cannot create a temporary directory: %s", strerror(errno));
            lacs_golden_free(&g);
            continue;
        }
        snprintf(path, sizeof path, "%s/case.safetensors", dir);
        if (lacs_safetensors_write(path, g.tensors, g.n_tensors, "lacs", g.metadata, 0) != LACS_OK ||
            hash_file(path, j->sha256, &j->bytes) != 0) {
            report_line(&r, "%s: cannot write or read back %s", j->id, path);
        } else {
            char *all = shapes_json(&g, g.n_tensors);
            cJSON *all_json = all ? cJSON_Parse(all) : NULL;
            if (!cJSON_Compare(all_json, cJSON_GetObjectItemCaseSensitive(entry, "shapes"), 1))
                report_line(&r, "%s: the tensors or their shapes differ", j->id);
            cJSON_Delete(all_json);
            free(all);
            const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(entry, "bytes");
            const int same_bytes = cJSON_IsNumber(bytes) && (long long)bytes->valuedouble == j->bytes;
            const int same_hash = strcmp(j->sha256, string_field(entry, "sha256")) == 0;
            if (!same_bytes || !same_hash) {
                if (libm_matches_committed())
                    report_line(&r, "%s: regenerated, the file differs (%s%s)", j->id, same_bytes ? "" : "bytes ",
                                same_hash ? "" : "sha256");
                else if (report)
                    fprintf(report, "  note: %s: the file hash differs; expected with a libm other than glibc's "
                                    "on x86-64 (SPEC.md 10.7)\n", j->id);
            }
        }
        remove(path);
        rmdir(dir);
        lacs_golden_free(&g);
    }
    cJSON_Delete(root);
    return r.count;
}
