/* The gauge of the tolerance model (lacs/gauge.h, SPEC.md 11.2).
 *
 * A first-order, probabilistic error model in the manner of Higham and Mary's
 * probabilistic rounding error analysis: a legitimate implementation's result
 * is the exact result of slightly perturbed data (the inputs at the tier's
 * u; at binary32's u in both tiers, the log decays' prefix sums and exp, and
 * the state it rounds at each token), the perturbations independent but for
 * exp's, which is the same for equal values. The gauge measures how much the op's result moves
 * under such perturbations, by running the reference on them; the checker
 * scales it by the tier's u. It is computed, not derived by hand per op, so
 * that every op (cancellation, conditioning, saturation) gets its own.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "../reference/noise.h"
#include "lacs/gauge.h"
#include "lacs/ops.h"
#include "lacs/prng.h"
#include "lacs/safetensors.h"

/* Parameters that are numbers an implementation rounds; form and convention are codes. */
static int perturbed_param(const char *name)
{
    return strcmp(name, "scale") == 0 || strcmp(name, "eps") == 0 || strcmp(name, "cap") == 0;
}

static double random_sign(lacs_rng *rng, uint64_t *bits, int *left)
{
    if (*left == 0) {
        *bits = lacs_rng_next(rng);
        *left = 64;
    }
    double sign = (*bits & 1) ? 1.0 : -1.0;
    *bits >>= 1;
    (*left)--;
    return sign;
}

/* The log decays of the ops on sequences (SPEC.md 2.4, 11.2): g [B, T, HV],
 * gk [B, T, HV, K] (H4, H8: GDN, KDA, Comba; H10 FoX; H12 PaTH-FoX; H15) and
 * the constant per-head g_gamma [HV] (retention, ALiBi). A legitimate
 * implementation gets them exact (they are inputs) and errs in two binary32
 * operations on them, in either tier (SPEC.md 11.1):
 *
 * - the prefix sums that chunked and flash forms exponentiate differences of
 *   (fla's chunk_local_cumsum, FoX's cumulative gate): gate t then carries an
 *   absolute error of about u32 C_t, C_t the sum of |g_s| over the tokens
 *   s <= t of its sequence within a window (64 tokens, a chunk, for the
 *   recurrent ops and MesaNet; the whole sequence for the attention forms).
 *   Modelled by moving gate t by +- delta b C_t, the signs independent. An
 *   infinite gate (a hard reset) stays as it is and adds nothing to the sums.
 * - exp (or exp2, log) of the gate: a few ulp of relative error in the
 *   factor, i.e. an absolute error of a few u32 in the log gate, and the
 *   SAME error wherever the same value recurs: exp is a deterministic
 *   function, so a constant decay (g_gamma, a constant g) makes the same
 *   error at every token and it accumulates over the decay's horizon
 *   1 / (1 - exp(g)), not as a random walk. Modelled by moving every gate by
 *   +- delta b LACS_GAUGE_EXP_ERROR with a sign that is a hash of the gate's
 *   value (and the sample): equal values move together, distinct values
 *   independently.
 *
 * Both are binary32 errors: b (`binary32`) = u32 / u, 1 in fp32 and 2^-16 in
 * the bf16 tier, whose gauge is in units of bf16's u. */
static int is_log_gate(const char *name)
{
    return strcmp(name, "g") == 0 || strcmp(name, "gk") == 0 || strcmp(name, "g_gamma") == 0;
}

/* +1 or -1, a pure function of the value x and the sample's key: the sign of
 * a deterministic function's error at x (SplitMix64's finaliser of x's bits). */
static double value_sign(double x, uint64_t key)
{
    uint64_t z;
    memcpy(&z, &x, sizeof z);
    z ^= key;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (z & 1) ? 1.0 : -1.0;
}

/* Moves each finite log gate of `gate` (exact values in `exact`, results in
 * x) by delta scaled by `binary32`: the prefix-sum term (g and gk only, whose
 * second dimension is T) and the exp term. */
static void perturb_gates(const lacs_tensor *gate, const double *exact, double *x, const int64_t *cu_seqlens,
                          int64_t n_offsets, int64_t window, double binary32, uint64_t key, lacs_rng *rng,
                          uint64_t *bits, int *left)
{
    const double step = LACS_GAUGE_DELTA * binary32;
    if (gate->ndim < 3) { /* g_gamma [HV]: one value per head, the same at every token */
        for (int64_t i = 0; i < lacs_tensor_count(gate); i++)
            if (isfinite(exact[i]))
                x[i] = exact[i] + step * LACS_GAUGE_EXP_ERROR * value_sign(exact[i], key);
        return;
    }
    const int64_t B = gate->shape[0], T = gate->shape[1];
    const int64_t lanes = lacs_tensor_count(gate) / (B * T > 0 ? B * T : 1); /* HV, or HV * K */
    for (int64_t b = 0; b < B; b++)
        for (int64_t lane = 0; lane < lanes; lane++) {
            int64_t seq = 0, start = 0;
            for (int64_t t = 0; t < T; t++) {
                while (cu_seqlens && seq + 1 < n_offsets && cu_seqlens[seq + 1] <= t)
                    start = cu_seqlens[++seq];
                double sum = 0;
                const int64_t first = t - window + 1 > start ? t - window + 1 : start;
                for (int64_t s = first; s <= t; s++) {
                    const double g = exact[(b * T + s) * lanes + lane];
                    sum += isfinite(g) ? fabs(g) : 0;
                }
                const int64_t i = (b * T + t) * lanes + lane;
                if (isfinite(exact[i]))
                    x[i] = exact[i] + step * (sum * random_sign(rng, bits, left) +
                                              LACS_GAUGE_EXP_ERROR * value_sign(exact[i], key));
            }
        }
}

/* Parallelism (lacs_gauge_set_parallelism): the caller's own setting, per thread. */
static _Thread_local lacs_gauge_parallelism parallelism = {1, NULL, NULL};

void lacs_gauge_set_parallelism(const lacs_gauge_parallelism *p)
{
    parallelism = *p;
    if (parallelism.threads < 1)
        parallelism.threads = 1;
    if (parallelism.threads > LACS_GAUGE_SAMPLES)
        parallelism.threads = LACS_GAUGE_SAMPLES;
}

/* What the samples share: the sums they add to, in sample order (`turn`), so
 * that the result is bit-identical for any number of threads. */
typedef struct {
    const char *op;
    int n_inputs, n_params, n_outputs;
    double state_delta; /* the state noise: delta in binary32's share of the tier's u (SPEC.md 11.2) */
    const lacs_tensor *expected;
    double **sum;
    int64_t **valid;
    pthread_mutex_t lock;
    pthread_cond_t turn_taken;
    int turn;
    int rc; /* the first error, in sample order */
    char error[2048];
    void (*on_sample)(void *context);
    void *context;
} gauge_shared;

/* One sample's buffers: a thread runs the reference on them while the caller
 * draws the next sample's perturbation into another slot. */
typedef struct {
    gauge_shared *shared;
    lacs_tensor perturbed[24], outs[LACS_OPS_MAX_OUTPUTS];
    lacs_param moved[16];
    uint64_t noise_seed;
    int sample;
    int running;
    pthread_t thread;
} gauge_slot;

/* The reference on one perturbed sample, then (in sample order) its
 * contribution to the sums. */
static void *run_sample(void *arg)
{
    gauge_slot *slot = arg;
    gauge_shared *sh = slot->shared;
    lacs_internal_state_noise(1, slot->noise_seed, sh->state_delta, LACS_GAUGE_DELTA);
    int rc = lacs_reference_run(sh->op, slot->perturbed, sh->n_inputs, slot->moved, sh->n_params, slot->outs,
                                sh->n_outputs, 0);
    lacs_internal_state_noise(0, 0, 0, 0);
    pthread_mutex_lock(&sh->lock);
    while (sh->turn != slot->sample)
        pthread_cond_wait(&sh->turn_taken, &sh->lock);
    if (rc != LACS_OK && sh->rc == LACS_OK) {
        sh->rc = rc;
        snprintf(sh->error, sizeof sh->error, "%s", lacs_last_error());
    }
    for (int o = 0; o < sh->n_outputs && sh->rc == LACS_OK; o++) {
        const double *y = sh->expected[o].data, *ys = slot->outs[o].data;
        for (int64_t j = 0; j < lacs_tensor_count(&sh->expected[o]); j++) {
            const double d = (ys[j] - y[j]) / LACS_GAUGE_DELTA;
            if (isfinite(d)) { /* a perturbation that overflows says nothing first-order */
                sh->sum[o][j] += d * d;
                sh->valid[o][j]++;
            }
        }
    }
    sh->turn++;
    pthread_cond_broadcast(&sh->turn_taken);
    pthread_mutex_unlock(&sh->lock);
    if (sh->on_sample)
        sh->on_sample(sh->context);
    return NULL;
}

static int shared_rc(gauge_shared *sh)
{
    pthread_mutex_lock(&sh->lock);
    const int rc = sh->rc;
    pthread_mutex_unlock(&sh->lock);
    return rc;
}

/* Waits for the slot's sample, if one is running. */
static void finish_slot(gauge_slot *slot)
{
    if (slot->running)
        pthread_join(slot->thread, NULL);
    slot->running = 0;
}

int lacs_gauge_compute(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params,
                       int n_params, const lacs_tensor *expected, int n_outputs, int fp32, uint64_t seed,
                       double **gauges)
{
    /* binary32's errors (gate sums, exp, the state) in units of the tier's u */
    const double binary32 = fp32 ? 1.0 : LACS_GAUGE_BINARY32_IN_BF16;
    const int n_slots = parallelism.threads;
    gauge_slot slots[LACS_GAUGE_SAMPLES];
    gauge_shared shared = {op, n_inputs, n_params, n_outputs, LACS_GAUGE_DELTA * binary32, expected, NULL, NULL,
                           PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, LACS_OK, "",
                           parallelism.on_sample, parallelism.context};
    double *sum[LACS_OPS_MAX_OUTPUTS] = {0};
    int64_t *valid[LACS_OPS_MAX_OUTPUTS] = {0};
    int rc = LACS_OK;
    if (n_inputs > 24 || n_params > 16 || n_outputs > LACS_OPS_MAX_OUTPUTS)
        return lacs_internal_error(LACS_ERR_PARAM, op, "gauge: too many tensors");
    memset(slots, 0, sizeof slots);
    shared.sum = sum;
    shared.valid = valid;
    for (int t = 0; t < n_slots; t++) {
        slots[t].shared = &shared;
        for (int i = 0; i < n_inputs && rc == LACS_OK; i++) {
            slots[t].perturbed[i] = inputs[i];
            if (inputs[i].dtype == LACS_I64)
                continue;
            slots[t].perturbed[i].dtype = LACS_F64;
            slots[t].perturbed[i].data = malloc((size_t)lacs_tensor_count(&inputs[i]) * sizeof(double) + 8);
            if (!slots[t].perturbed[i].data)
                rc = LACS_ERR_MEMORY;
        }
        for (int o = 0; o < n_outputs && rc == LACS_OK; o++) {
            slots[t].outs[o] = expected[o];
            slots[t].outs[o].data = malloc((size_t)lacs_tensor_count(&expected[o]) * sizeof(double) + 8);
            if (!slots[t].outs[o].data)
                rc = LACS_ERR_MEMORY;
        }
    }
    for (int o = 0; o < n_outputs && rc == LACS_OK; o++) {
        const int64_t n = lacs_tensor_count(&expected[o]);
        sum[o] = calloc((size_t)n + 1, sizeof(double));
        valid[o] = calloc((size_t)n + 1, sizeof(int64_t));
        if (!sum[o] || !valid[o])
            rc = LACS_ERR_MEMORY;
    }
    const lacs_op_info *info = lacs_op_find(op);
    const int64_t *cu_seqlens = NULL;
    int64_t n_offsets = 0;
    for (int i = 0; i < n_inputs; i++)
        if (strcmp(inputs[i].name, "cu_seqlens") == 0) {
            cu_seqlens = inputs[i].data;
            n_offsets = lacs_tensor_count(&inputs[i]);
        }
    /* The perturbations are drawn here, sample after sample from one stream
     * (so the same for any number of threads); each sample's reference run
     * goes to a slot's thread (or runs here, with one thread). */
    lacs_rng rng = lacs_rng_stream(seed, "gauge");
    for (int s = 0; s < LACS_GAUGE_SAMPLES && rc == LACS_OK && shared_rc(&shared) == LACS_OK; s++) {
        gauge_slot *slot = &slots[s % n_slots];
        finish_slot(slot);
        lacs_tensor *perturbed = slot->perturbed;
        lacs_param *moved = slot->moved;
        uint64_t bits = 0;
        int left = 0;
        const uint64_t key = lacs_rng_next(&rng); /* this sample's signs of exp's errors */
        for (int i = 0; i < n_inputs; i++) {
            if (inputs[i].dtype == LACS_I64)
                continue;
            const int64_t n = lacs_tensor_count(&inputs[i]);
            double *x = perturbed[i].data;
            lacs_values_to_double(inputs[i].dtype, inputs[i].data, n, x);
            if (info && info->family != LACS_FAMILY_NORM && is_log_gate(inputs[i].name)) {
                double *exact = malloc((size_t)n * sizeof(double) + 8);
                if (!exact) {
                    rc = LACS_ERR_MEMORY;
                    break;
                }
                memcpy(exact, x, (size_t)n * sizeof(double));
                const lacs_op_info *family_of = info->family == LACS_FAMILY_VJP ? lacs_op_forward(info) : info;
                const int64_t window =
                    family_of && family_of->family == LACS_FAMILY_ATTENTION && inputs[i].ndim >= 2 ? inputs[i].shape[1]
                                                                                                   : 64;
                perturb_gates(&inputs[i], exact, x, cu_seqlens, n_offsets, window, binary32, key, &rng, &bits,
                              &left);
                free(exact);
                continue;
            }
            for (int64_t j = 0; j < n; j++)
                x[j] *= 1 + LACS_GAUGE_DELTA * random_sign(&rng, &bits, &left);
        }
        if (rc != LACS_OK)
            break;
        for (int p = 0; p < n_params; p++) {
            moved[p] = params[p];
            if (perturbed_param(params[p].name))
                moved[p].value *= 1 + LACS_GAUGE_DELTA * random_sign(&rng, &bits, &left);
        }
        slot->noise_seed = lacs_rng_next(&rng);
        slot->sample = s;
        if (n_slots == 1 || pthread_create(&slot->thread, NULL, run_sample, slot) != 0)
            run_sample(slot); /* here, in order, if no thread could be started */
        else
            slot->running = 1;
    }
    for (int t = 0; t < n_slots; t++)
        finish_slot(&slots[t]);
    if (rc == LACS_OK && shared.rc != LACS_OK) {
        rc = shared.rc;
        const size_t prefix = strlen(op);
        const int named = strncmp(shared.error, op, prefix) == 0 && strncmp(shared.error + prefix, ": ", 2) == 0;
        lacs_internal_error(rc, op, "%s", named ? shared.error + prefix + 2 : shared.error);
    }
    for (int o = 0; o < n_outputs && rc == LACS_OK; o++) {
        const double *y = expected[o].data;
        for (int64_t j = 0; j < lacs_tensor_count(&expected[o]); j++) {
            const double spread = valid[o][j] ? sum[o][j] / (double)valid[o][j] : 0;
            gauges[o][j] = isfinite(y[j]) ? sqrt(spread + y[j] * y[j]) : 0;
        }
    }
    for (int t = 0; t < n_slots; t++) {
        for (int i = 0; i < n_inputs; i++)
            if (inputs[i].dtype != LACS_I64)
                free(slots[t].perturbed[i].data);
        for (int o = 0; o < n_outputs; o++)
            free(slots[t].outs[o].data);
    }
    for (int o = 0; o < n_outputs; o++) {
        free(sum[o]);
        free(valid[o]);
    }
    pthread_mutex_destroy(&shared.lock);
    pthread_cond_destroy(&shared.turn_taken);
    return rc == LACS_ERR_MEMORY ? lacs_internal_error(rc, op, "gauge: out of memory") : rc;
}

/* The VJPs of the ops on sequences (SPEC.md 4.19, 11.3). The recurrent
 * family's gradients: a chunked backward (H7's WY/UT form, chunks of 64) sums
 * over the chunk's tokens (dU_j = sum_{t >= j} P_tj do_t and the triangular
 * solve) as well as over K: n = max(K, min(T, 64)); a scalar log gate's
 * gradient sums a whole state per token (K^2 terms, V taken as K), dg_gamma
 * those over the sequence. The attention forms: the forward's rule,
 * max(K, T); a gate's gradient sums the pairs j < tau <= i (T^2). */
static int64_t vjp_sum_length(const lacs_op_info *forward, const char *output, int64_t K, int64_t T)
{
    const int attention = forward->family == LACS_FAMILY_ATTENTION;
    const int64_t chunk = T < 64 ? T : 64;
    const int64_t base = attention ? (K > T ? K : T) : (K > chunk ? K : chunk);
    if (strcmp(output, "dg") == 0)
        return attention ? T * T : (K * K > chunk ? K * K : chunk);
    if (strcmp(output, "dg_gamma") == 0)
        return attention ? T * T : K * K * T;
    return base;
}

double lacs_gauge_length_factor(const char *op, const char *output, int fp32, int64_t K, int64_t longest_sequence,
                                int64_t rows, int64_t dim)
{
    if (!fp32)
        return 1;
    const lacs_op_info *info = lacs_op_find(op);
    if (info && info->family == LACS_FAMILY_VJP && lacs_op_forward(info))
        return sqrt((double)vjp_sum_length(lacs_op_forward(info), output, K, longest_sequence));
    int64_t n = 1;
    if (!info)
        return 1;
    if (info->family == LACS_FAMILY_ATTENTION)
        n = K > longest_sequence ? K : longest_sequence;
    else if (info->family != LACS_FAMILY_NORM)
        n = K;
    else if (strcmp(output, "dweight") == 0 || strcmp(output, "dbias") == 0)
        n = rows;
    else if (strcmp(output, "dalpha") == 0 || strcmp(output, "dC") == 0 || strcmp(output, "dcap") == 0)
        n = rows * dim;
    else if (strncmp(op, "rmsnorm", 7) == 0 || strncmp(op, "l2norm", 6) == 0)
        n = dim;
    return sqrt((double)(n > 1 ? n : 1));
}
