/* A lacs plugin (ABI v1, include/lacs/plugin.h) that runs ggml's
 * ggml_gated_delta_net (ggml-org/ggml, include/ggml.h; its CPU kernel is
 * ggml_compute_forward_gated_delta_net in src/ggml-cpu/ops.cpp) for the
 * ops `gated_delta_rule` (scalar g, or per-channel gk: ggml's KDA form) and
 * `delta_rule` (g = 0), through ggml's public API only. README.md here says
 * how to build it against a ggml build and what it was checked on.
 *
 * What the adapter maps (SPEC.md 7.2 states ggml's conventions):
 *   - heads: ggml's value head j reads q/k head j % H (tiled), lacs's value
 *     head hv reads hv / G (grouped, G = HV / H): lacs head hv is ggml head
 *     (hv % G) H + hv / G, for v, beta, g, the state and the outputs;
 *   - the state: ggml keeps S_v x S_v per head with s[j S_v + i] = S[i][j]
 *     (i the key, j the value), the transpose of lacs's h [K x V];
 *   - the scale: ggml's is fixed at 1 / sqrt(S_v); lacs's (a parameter,
 *     K^-1/2 by default) is applied by scaling q by scale sqrt(S_v);
 *   - K != V: ggml's state is square, so both are zero-padded to
 *     S = max(K, V): padded keys are 0 (their state rows stay 0 and add
 *     nothing), padded values are 0 (their state columns stay 0), and the
 *     scale is rescaled as above with S_v = S;
 *   - sequences of cu_seqlens (ggml's batch has equal lengths): one ggml
 *     call per sequence; an empty sequence's state is its h0;
 *   - bf16 inputs: widened exactly to fp32 (ggml's op is fp32 only).
 * Every other op is LACS_UNSUPPORTED. Threads: LACS_GGML_THREADS, else the
 * online CPUs, in one ggml threadpool kept for the process (as llama.cpp
 * keeps its own), so that a call does not start threads.
 *
 * The plugin also exports lacs_ggml_prepare, lacs_ggml_compute and
 * lacs_ggml_finish (below), so that a timing harness (ggml_vs_builtin.c)
 * can time ggml's graph alone, its inputs already in ggml's layout, and
 * lacs_ggml_pause_threads, so that it can stop ggml's workers polling for
 * work while it times something else.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml-cpu.h"
#include "ggml.h"
#include "lacs/plugin.h"

/* ---- inputs ---- */

static const lacs_tensor *input(const lacs_tensor *inputs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (inputs[i].name && strcmp(inputs[i].name, name) == 0)
            return &inputs[i];
    return NULL;
}

static lacs_tensor *output(lacs_tensor *outputs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (outputs[i].name && strcmp(outputs[i].name, name) == 0)
            return &outputs[i];
    return NULL;
}

/* Element i of an F32 or BF16 tensor (BF16 widened exactly). */
static float at(const lacs_tensor *t, int64_t i)
{
    if (t->dtype == LACS_BF16) {
        const uint32_t bits = (uint32_t)((const uint16_t *)t->data)[i] << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    return ((const float *)t->data)[i];
}

static double param(const lacs_param *params, int n, const char *name, double fallback)
{
    for (int i = 0; i < n; i++)
        if (params[i].name && strcmp(params[i].name, name) == 0)
            return params[i].value;
    return fallback;
}

static int threads(void)
{
    const char *s = getenv("LACS_GGML_THREADS");
    if (s && atoi(s) > 0)
        return atoi(s);
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? (int)online : 1;
}

/* ---- one ggml graph per sequence (or per batch of equal sequences) ---- */

/* The process's ggml threadpool, started on first use. */
static struct ggml_threadpool *pool = NULL;

static struct ggml_threadpool *shared_threadpool(void)
{
    if (!pool) {
        struct ggml_threadpool_params params = ggml_threadpool_params_default(threads());
        pool = ggml_threadpool_new(&params);
    }
    return pool;
}

typedef struct {
    struct ggml_context *ctx;
    struct ggml_cgraph *graph;
    struct ggml_cplan plan;
    void *work;
    struct ggml_tensor *q, *k, *v, *g, *beta, *state, *out;
    int64_t S, H, HV, G, T, n_seqs, first_seq, first_token, K, V;
    int channel;
} lacs_ggml_call;

/* ggml's head for lacs's value head hv. */
static int64_t ggml_head(const lacs_ggml_call *c, int64_t hv) { return (hv % c->G) * c->H + hv / c->G; }

/* Builds the graph for n_seqs sequences of T tokens from lacs sequence
 * first_seq (token first_token of the flattened axis) and fills its inputs.
 * Returns 0, or -1 out of memory. */
static int prepare(lacs_ggml_call *c, const lacs_tensor *inputs, int n_inputs, double scale, int64_t first_seq,
                   int64_t first_token, int64_t n_seqs, int64_t T)
{
    const lacs_tensor *q = input(inputs, n_inputs, "q"), *k = input(inputs, n_inputs, "k");
    const lacs_tensor *v = input(inputs, n_inputs, "v"), *beta = input(inputs, n_inputs, "beta");
    const lacs_tensor *g = input(inputs, n_inputs, "g"), *gk = input(inputs, n_inputs, "gk");
    const lacs_tensor *h0 = input(inputs, n_inputs, "h0");
    const int64_t H = q->shape[2], K = q->shape[3], HV = v->shape[2], V = v->shape[3];
    const int64_t S = K > V ? K : V;
    *c = (lacs_ggml_call){.S = S, .H = H, .HV = HV, .G = HV / H, .T = T, .n_seqs = n_seqs, .first_seq = first_seq,
                          .first_token = first_token, .K = K, .V = V, .channel = gk != NULL};
    const size_t floats = (size_t)(2 * S * H + S * HV + 2 * HV * (c->channel ? S : 1)) * (size_t)(T * n_seqs) +
                          (size_t)(S * S * HV * n_seqs) + (size_t)(S * HV) * (size_t)(T * n_seqs + S * n_seqs);
    struct ggml_init_params init = {
        .mem_size = floats * sizeof(float) + 16 * ggml_tensor_overhead() + ggml_graph_overhead() + ((size_t)1 << 20),
        .mem_buffer = NULL,
        .no_alloc = false,
    };
    c->ctx = ggml_init(init);
    if (!c->ctx)
        return -1;
    c->q = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, S, H, T, n_seqs);
    c->k = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, S, H, T, n_seqs);
    c->v = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, S, HV, T, n_seqs);
    c->g = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, c->channel ? S : 1, HV, T, n_seqs);
    c->beta = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, 1, HV, T, n_seqs);
    c->state = ggml_new_tensor_4d(c->ctx, GGML_TYPE_F32, S, S, HV, n_seqs);
    if (!c->q || !c->k || !c->v || !c->g || !c->beta || !c->state)
        return -1;
    float *qd = c->q->data, *kd = c->k->data, *vd = c->v->data, *gd = c->g->data, *bd = c->beta->data;
    float *sd = c->state->data;
    /* ggml's 1 / sqrt(S) times this gives lacs's scale */
    const float q_factor = (float)(scale * sqrt((double)S));
    for (int64_t s = 0; s < n_seqs; s++)
        for (int64_t t = 0; t < T; t++) {
            const int64_t token = first_token + s * T + t, row = s * T + t;
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < S; i++) {
                    const int64_t at_lacs = (token * H + h) * K + i, at_ggml = (row * H + h) * S + i;
                    qd[at_ggml] = i < K ? q_factor * at(q, at_lacs) : 0.0f;
                    kd[at_ggml] = i < K ? at(k, at_lacs) : 0.0f;
                }
            for (int64_t hv = 0; hv < HV; hv++) {
                const int64_t j = ggml_head(c, hv);
                for (int64_t i = 0; i < S; i++)
                    vd[(row * HV + j) * S + i] = i < V ? at(v, (token * HV + hv) * V + i) : 0.0f;
                bd[row * HV + j] = beta ? at(beta, token * HV + hv) : 0.0f;
                if (c->channel)
                    for (int64_t i = 0; i < S; i++)
                        gd[(row * HV + j) * S + i] = i < K ? at(gk, (token * HV + hv) * K + i) : 0.0f;
                else
                    gd[row * HV + j] = g ? at(g, token * HV + hv) : 0.0f;
            }
        }
    /* the state, transposed: ggml s[value * S + key] = lacs h[key][value] */
    for (int64_t s = 0; s < n_seqs; s++)
        for (int64_t hv = 0; hv < HV; hv++) {
            float *dst = sd + ((s * HV + ggml_head(c, hv)) * S) * S;
            for (int64_t j = 0; j < S; j++)
                for (int64_t i = 0; i < S; i++)
                    dst[j * S + i] = h0 && i < K && j < V ? at(h0, (((first_seq + s) * HV + hv) * K + i) * V + j) : 0.0f;
        }
    c->out = ggml_gated_delta_net(c->ctx, c->q, c->k, c->v, c->g, c->beta, c->state, 1);
    if (!c->out)
        return -1;
    c->graph = ggml_new_graph(c->ctx);
    if (!c->graph)
        return -1;
    ggml_build_forward_expand(c->graph, c->out);
    struct ggml_threadpool *pool = shared_threadpool();
    c->plan = ggml_graph_plan(c->graph, threads(), pool);
    if (c->plan.work_size > 0) {
        c->work = malloc(c->plan.work_size);
        if (!c->work)
            return -1;
        c->plan.work_data = c->work;
    }
    return 0;
}

static int compute(lacs_ggml_call *c)
{
    return ggml_graph_compute(c->graph, &c->plan) == GGML_STATUS_SUCCESS ? 0 : -1;
}

static void release(lacs_ggml_call *c)
{
    if (c->ctx)
        ggml_free(c->ctx);
    free(c->work);
    c->ctx = NULL;
    c->work = NULL;
}

/* The outputs back into lacs's layout: o [B, T, HV, V], ht [B, HV, K, V]. */
static void finish(const lacs_ggml_call *c, lacs_tensor *o, lacs_tensor *ht)
{
    const int64_t S = c->S, HV = c->HV, V = c->V, K = c->K;
    const float *result = c->out->data;
    for (int64_t s = 0; s < c->n_seqs; s++)
        for (int64_t t = 0; t < c->T; t++) {
            const int64_t token = c->first_token + s * c->T + t, row = s * c->T + t;
            for (int64_t hv = 0; hv < HV; hv++)
                for (int64_t j = 0; j < V; j++)
                    ((float *)o->data)[(token * HV + hv) * V + j] = result[(row * HV + ggml_head(c, hv)) * S + j];
        }
    if (!ht)
        return;
    const float *states = result + S * HV * c->T * c->n_seqs;
    for (int64_t s = 0; s < c->n_seqs; s++)
        for (int64_t hv = 0; hv < HV; hv++) {
            const float *src = states + ((s * HV + ggml_head(c, hv)) * S) * S;
            float *dst = (float *)ht->data + ((c->first_seq + s) * HV + hv) * K * V;
            for (int64_t i = 0; i < K; i++)
                for (int64_t j = 0; j < V; j++)
                    dst[i * V + j] = src[j * S + i];
        }
}

/* ---- the timing harness's entry points ---- */

/* A call for the whole of a batch without cu_seqlens (B sequences of T
 * tokens); NULL when the op or the inputs are not ones this adapter runs in
 * one graph. */
void *lacs_ggml_prepare(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                        int n_params)
{
    if ((strcmp(op, "gated_delta_rule") != 0 && strcmp(op, "delta_rule") != 0) ||
        input(inputs, n_inputs, "cu_seqlens"))
        return NULL;
    const lacs_tensor *q = input(inputs, n_inputs, "q");
    if (!q || q->shape[0] * q->shape[1] == 0)
        return NULL;
    lacs_ggml_call *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    const double scale = param(params, n_params, "scale", 1.0 / sqrt((double)q->shape[3]));
    if (prepare(c, inputs, n_inputs, scale, 0, 0, q->shape[0], q->shape[1]) != 0) {
        release(c);
        free(c);
        return NULL;
    }
    return c;
}

int lacs_ggml_compute(void *call) { return compute(call); }

/* ggml's workers poll for the next graph after each one (ggml_threadpool_params_default's poll = 50: a
 * spin of some 6 million rounds), holding a core: paused (ggml_threadpool_pause) they sleep until the next
 * graph, which resumes them (ggml_graph_compute). */
void lacs_ggml_pause_threads(void)
{
    if (pool)
        ggml_threadpool_pause(pool);
}

void lacs_ggml_finish(void *call, lacs_tensor *outputs, int n_outputs)
{
    lacs_ggml_call *c = call;
    if (outputs)
        finish(c, output(outputs, n_outputs, "o"), output(outputs, n_outputs, "ht"));
    release(c);
    free(c);
}

/* ---- the plugin ---- */

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "gated_delta_rule") != 0 && strcmp(op, "delta_rule") != 0)
        return LACS_UNSUPPORTED;
    const lacs_tensor *q = input(inputs, n_inputs, "q"), *v = input(inputs, n_inputs, "v");
    const lacs_tensor *h0 = input(inputs, n_inputs, "h0"), *cu = input(inputs, n_inputs, "cu_seqlens");
    lacs_tensor *o = output(outputs, n_outputs, "o"), *ht = output(outputs, n_outputs, "ht");
    if (!q || !v || !o)
        return 2;
    const int64_t B = q->shape[0], T = q->shape[1], K = q->shape[3], HV = v->shape[2], V = v->shape[3];
    const double scale = param(params, n_params, "scale", 1.0 / sqrt((double)K));
    const int64_t n_seqs = cu ? cu->shape[0] - 1 : B;
    for (int64_t s = 0; s < n_seqs; s++) {
        const int64_t first = cu ? ((const int64_t *)cu->data)[s] : s * T;
        const int64_t length = cu ? ((const int64_t *)cu->data)[s + 1] - first : T;
        if (length == 0) { /* no token: the state is h0 (or zeros) */
            for (int64_t i = 0; ht && i < HV * K * V; i++)
                ((float *)ht->data)[s * HV * K * V + i] = h0 ? at(h0, s * HV * K * V + i) : 0.0f;
            continue;
        }
        lacs_ggml_call c;
        memset(&c, 0, sizeof c);
        int rc = prepare(&c, inputs, n_inputs, scale, s, first, 1, length);
        if (rc == 0)
            rc = compute(&c);
        if (rc == 0)
            finish(&c, o, ht);
        release(&c);
        if (rc != 0)
            return 3;
    }
    return 0;
}
