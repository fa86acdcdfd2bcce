/* lacs-bench: the benchmark of builtin:cpu (`make bench`; bench/README.md).
 *
 * For each op and tier, one machine-readable line per configuration:
 *
 *   bench op= impl=builtin:cpu tier= mode= B= T= H= HV= K= V= time_ms= tokens_per_s= gflops=
 *         peak_rss_mb= io_mb= repeats= reference_ms= reference_T= reference_scaled=
 *         ratio_vs_sgemm= ratio_vs_reference= status=
 *
 * (the element-wise ops have gb_per_s= and ratio_vs_bandwidth= in place of
 * ratio_vs_sgemm=; the decode line has both). Before them, measured in the
 * same run: the machine, OpenBLAS's sgemm GFLOP/s and a stream-copy bandwidth
 * (the anchors the ratios divide by). After them, a summary of the issue's
 * targets, each PASS or BELOW (reports, not test failures).
 *
 * Read top to bottom: options, configurations, inputs (realistic, seeded),
 * children (every measurement runs in a forked child, so that its peak RSS is
 * its own), the anchors, builtin:cpu's timing, the reference's timing, the
 * lines, the summary, main.
 */
#define _DEFAULT_SOURCE /* wait4(), whose rusage is the child's own peak RSS: BSD, in glibc's default set */

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h" /* optimized/cpu/cpu.h: lacs_cpu_chunk_flops, lacs_cpu_parallel_for, bf16 rounding */
#include "lacs/prng.h"

/* Every input is drawn from this seed (one stream per tensor name). */
#define BENCH_SEED 20250601u
/* The reference runs on the configuration's own T when it should take less
 * than this, else on the longest prefix that should, scaled up (see
 * reference_job). */
#define REFERENCE_BUDGET_S 20.0
#define QUICK_REFERENCE_BUDGET_S 2.0
/* A call faster than this is repeated until its repeats add up to it (best
 * taken), so that a sub-millisecond decode step is not one noisy sample. */
#define MIN_TIMED_S 0.2
#define MAX_REPEATS 1000
/* A child that runs longer is killed (SIGALRM) and reported as status=timeout. */
#define CHILD_LIMIT_S 900
#define QUICK_CHILD_LIMIT_S 120
/* The stream copy: 256 MiB copied into another 256 MiB, best of 5. */
#define COPY_BYTES ((size_t)256 << 20)
#define COPY_PASSES 5
#define SGEMM_PASSES 3

/* ---- options ---- */

static const char *const bench_ops[] = {"delta_rule", "gated_delta_rule", "path_attn", "dyt", "dyisru"};
#define N_BENCH_OPS 5

typedef struct {
    int quick;
    int op_selected[N_BENCH_OPS]; /* all 1 unless --op names some */
    int tier_selected[2];         /* [0] fp32, [1] bf16 */
} options;

static void print_usage(FILE *f)
{
    fprintf(f,
            "usage: lacs-bench [--quick] [--op OP[,OP...]] [--tier fp32|bf16] [--help]\n"
            "  Benchmarks builtin:cpu (lacs_cpu_run) against OpenBLAS sgemm, a stream copy and the\n"
            "  scalar reference, measured in the same run; one `bench ...` line per configuration.\n"
            "  --quick   small shapes (T=256, H=4, 4 MiB norms, sgemm 512): the CI run, < 30 s\n"
            "  --op      delta_rule, gated_delta_rule (with its decode line), path_attn, dyt, dyisru\n"
            "            (repeatable or comma-separated; default: all)\n"
            "  --tier    fp32 or bf16 (default: both)\n"
            "  Environment: LACS_ISA (avx512|avx2|scalar), LACS_THREADS (builtin:cpu and the copy),\n"
            "  OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE (the sgemm anchor, whose kernel the anchor line\n"
            "  names). Exit status: 0, also when builtin:cpu returns unsupported; 1 when it (or a\n"
            "  measurement) fails; 2 for a bad option.\n");
}

static int select_ops(options *opt, const char *list)
{
    char buffer[256];
    if (strlen(list) >= sizeof buffer) {
        fprintf(stderr, "lacs-bench: --op: the list is too long\n");
        return -1;
    }
    strcpy(buffer, list);
    for (char *save = NULL, *name = strtok_r(buffer, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < N_BENCH_OPS; i++)
            if (strcmp(name, bench_ops[i]) == 0) {
                opt->op_selected[i] = 1;
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "lacs-bench: --op %s: not one of delta_rule, gated_delta_rule, path_attn, dyt, dyisru\n",
                    name);
            return -1;
        }
    }
    return 0;
}

/* Returns 0, 1 for --help (done), or -1 for a bad option (reported). */
static int parse_options(int argc, char **argv, options *opt)
{
    int any_op = 0, any_tier = 0;
    memset(opt, 0, sizeof *opt);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage(stdout);
            return 1;
        } else if (strcmp(a, "--quick") == 0) {
            opt->quick = 1;
        } else if (strcmp(a, "--op") == 0 || strcmp(a, "--tier") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "lacs-bench: %s needs a value\n", a);
                return -1;
            }
            const char *value = argv[++i];
            if (strcmp(a, "--op") == 0) {
                if (select_ops(opt, value) != 0)
                    return -1;
                any_op = 1;
            } else if (strcmp(value, "fp32") == 0 || strcmp(value, "bf16") == 0) {
                opt->tier_selected[strcmp(value, "bf16") == 0] = 1;
                any_tier = 1;
            } else {
                fprintf(stderr, "lacs-bench: --tier %s: not fp32 or bf16\n", value);
                return -1;
            }
        } else {
            fprintf(stderr, "lacs-bench: unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    for (int i = 0; i < N_BENCH_OPS && !any_op; i++)
        opt->op_selected[i] = 1;
    if (!any_tier)
        opt->tier_selected[0] = opt->tier_selected[1] = 1;
    return 0;
}

/* ---- configurations ---- */

typedef enum { MODE_PREFILL, MODE_DECODE, MODE_ELEMENTWISE } bench_mode;
static const char *const mode_names[] = {"prefill", "decode", "elementwise"};

/* How the reference's time grows with T: the recurrent reference is one pass
 * over the tokens (O(T K V)), path_attn's matrix form is a T x T triangular
 * solve and product (O(T^3)); decode and the element-wise ops always run on
 * the configuration's own shape. */
typedef enum { GROWTH_NONE, GROWTH_LINEAR, GROWTH_CUBIC } reference_growth;
static const char *const growth_names[] = {"none", "linear", "cubic"};

typedef struct {
    const char *op;
    bench_mode mode;
    int bf16;
    /* The element-wise ops: T = rows, K = V = dim, B = H = HV = 1 (a row is one token's hidden vector). */
    int64_t B, T, H, HV, K, V;
    int repeats; /* best of this many timed calls, after a warm-up call */
} bench_config;

#define MAX_CONFIGS 64

static int add_config(bench_config *list, int n, bench_config c)
{
    if (n < MAX_CONFIGS)
        list[n++] = c;
    return n;
}

/* The configurations (full) or their small versions (--quick), for
 * each op, then each tier, then each T. */
static int build_configs(const options *opt, bench_config *list)
{
    static const int64_t full_T[] = {1024, 4096, 16384};
    static const int64_t quick_T[] = {256};
    const int64_t *Ts = opt->quick ? quick_T : full_T;
    const int n_T = opt->quick ? 1 : 3;
    const int64_t heads = opt->quick ? 4 : 16;
    const int64_t path_T = opt->quick ? 256 : 4096;
    /* 64 MiB of fp32 = 16M elements (4 MiB = 1M for --quick); the bf16 tier
     * keeps the element count (32 MiB of bf16 in, the same 64 MiB of fp32 out). */
    const int64_t norm_rows = opt->quick ? 256 : 4096, norm_dim = 4096;
    int n = 0;
    for (int o = 0; o < N_BENCH_OPS; o++) {
        if (!opt->op_selected[o])
            continue;
        const char *op = bench_ops[o];
        for (int bf16 = 0; bf16 < 2; bf16++) {
            if (!opt->tier_selected[bf16])
                continue;
            if (strcmp(op, "delta_rule") == 0 || strcmp(op, "gated_delta_rule") == 0) {
                for (int i = 0; i < n_T; i++)
                    n = add_config(list, n,
                                   (bench_config){op, MODE_PREFILL, bf16, 1, Ts[i], heads, heads, 128, 128,
                                                  Ts[i] >= 16384 ? 1 : 3});
                if (strcmp(op, "gated_delta_rule") == 0)
                    n = add_config(list, n, (bench_config){op, MODE_DECODE, bf16, 1, 1, heads, heads, 128, 128, 3});
            } else if (strcmp(op, "path_attn") == 0) {
                /* d = 64: H = HV = 4 heads of K = V = 64 */
                n = add_config(list, n, (bench_config){op, MODE_PREFILL, bf16, 1, path_T, 4, 4, 64, 64, 3});
            } else {
                n = add_config(list, n,
                               (bench_config){op, MODE_ELEMENTWISE, bf16, 1, norm_rows, 1, 1, norm_dim, norm_dim, 3});
            }
        }
    }
    return n;
}

static reference_growth config_growth(const bench_config *c)
{
    if (c->mode != MODE_PREFILL)
        return GROWTH_NONE;
    return strcmp(c->op, "path_attn") == 0 ? GROWTH_CUBIC : GROWTH_LINEAR;
}

/* The floating-point operations of one call, or NAN for the element-wise ops
 * (measured against bandwidth instead).
 * - The recurrent family: lacs_cpu_chunk_flops per head (recurrent.c's chunk
 *   algorithm, the one place that count lives), times HV heads and B.
 * - path_attn: the work of causal softmax attention of the same shape, as
 *   FlashAttention counts it: the logits q_i . k_j (K) and the weighted sum
 *   of the values (V) over the T (T + 1) / 2 pairs j <= i, 2 flops per
 *   multiply-add: T (T + 1) (K + V) per head. PaTH's own extra work (the
 *   transitions' UT transforms, the queries carried across key blocks, O(T^2
 *   K^2 / block) in attention.c) depends on the algorithm and is not
 *   counted, so gflops is attention-equivalent throughput. */
static double config_flops(const bench_config *c)
{
    if (c->mode == MODE_ELEMENTWISE)
        return NAN;
    if (strcmp(c->op, "path_attn") == 0)
        return (double)c->T * (double)(c->T + 1) * (double)(c->K + c->V) * (double)(c->HV * c->B);
    return lacs_cpu_chunk_flops(c->T, c->K, c->V) * (double)(c->HV * c->B);
}

/* ---- inputs ---- */

/* How a tensor's values are drawn (x standard normal, Irwin-Hall as the
 * generators', SPEC.md 6): realistic for each op, so that builtin:cpu runs
 * its ordinary path (no overflow, no early exit). */
typedef enum {
    DRAW_NORMAL,        /* x: v, PaTH's q and k, the norms' x */
    DRAW_UNIT_ROWS,     /* x / ||x|| over the last dim: the delta rule's q and k (||k|| = 1), PaTH's w */
    DRAW_STEP,          /* sigmoid(x) in (0, 1): the delta rule's beta */
    DRAW_PATH_STEP,     /* 2 sigmoid(x) in (0, 2): PaTH's beta (fla's) */
    DRAW_LOG_DECAY,     /* -softplus(x) / 4, mostly -0.03 .. -0.5: Gated DeltaNet's g */
    DRAW_GAIN,          /* 1 + x / 10: the norms' weight */
    DRAW_SMALL,         /* x / 10: the norms' bias, decode's h0 */
    DRAW_CONSTANT       /* a scalar parameter, shape [1] (DyT's alpha, DyISRU's C) */
} draw_kind;

#define MAX_TENSORS 8

typedef struct {
    lacs_tensor inputs[MAX_TENSORS];
    int64_t input_shapes[MAX_TENSORS][4];
    int n_inputs;
    lacs_tensor outputs[LACS_OPS_MAX_OUTPUTS];
    lacs_output_shape output_shapes[LACS_OPS_MAX_OUTPUTS];
    int n_outputs;
} tensor_set;

static double draw_value(draw_kind kind, lacs_rng *rng, double constant)
{
    if (kind == DRAW_CONSTANT)
        return constant;
    const double x = lacs_rng_normal12(rng);
    switch (kind) {
    case DRAW_STEP:
        return 1 / (1 + exp(-x));
    case DRAW_PATH_STEP:
        return 2 / (1 + exp(-x));
    case DRAW_LOG_DECAY:
        return -log1p(exp(x)) / 4;
    case DRAW_GAIN:
        return 1 + x / 10;
    case DRAW_SMALL:
        return x / 10;
    default:
        return x;
    }
}

/* Fills t from the stream of its name, row by row over its last dim, so that
 * the first T' tokens of a [1, T, ...] tensor are the same for every T >= T'
 * (the reference's prefix sees the data builtin:cpu saw). bf16: the fp32 value
 * rounded to nearest even (the same data in the other tier). */
static int fill_tensor(lacs_tensor *t, draw_kind kind, double constant)
{
    const int64_t count = lacs_tensor_count(t);
    const int64_t row = t->ndim > 0 && t->shape[t->ndim - 1] > 0 ? t->shape[t->ndim - 1] : 1;
    double *values = malloc((size_t)row * sizeof *values);
    if (!values)
        return -1;
    lacs_rng rng = lacs_rng_stream(BENCH_SEED, t->name);
    for (int64_t start = 0; start < count; start += row) {
        double norm2 = 0;
        for (int64_t i = 0; i < row; i++) {
            values[i] = draw_value(kind, &rng, constant);
            norm2 += values[i] * values[i];
        }
        const double factor = kind == DRAW_UNIT_ROWS && norm2 > 0 ? 1 / sqrt(norm2) : 1;
        for (int64_t i = 0; i < row; i++) {
            const float value = (float)(values[i] * factor);
            if (t->dtype == LACS_BF16)
                ((uint16_t *)t->data)[start + i] = lacs_cpu_f32_to_bf16(value);
            else
                ((float *)t->data)[start + i] = value;
        }
    }
    free(values);
    return 0;
}

static int add_input(tensor_set *s, const char *name, int bf16, int ndim, const int64_t *shape, draw_kind kind,
                     double constant)
{
    if (s->n_inputs >= MAX_TENSORS)
        return -1;
    lacs_tensor *t = &s->inputs[s->n_inputs];
    for (int d = 0; d < ndim; d++)
        s->input_shapes[s->n_inputs][d] = shape[d];
    *t = (lacs_tensor){.name = name, .dtype = bf16 ? LACS_BF16 : LACS_F32, .ndim = ndim,
                       .shape = s->input_shapes[s->n_inputs]};
    const int64_t count = lacs_tensor_count(t);
    t->data = malloc((size_t)(count > 0 ? count : 1) * (bf16 ? sizeof(uint16_t) : sizeof(float)));
    if (!t->data)
        return -1;
    s->n_inputs++;
    return fill_tensor(t, kind, constant);
}

static void free_problem(tensor_set *s)
{
    for (int i = 0; i < s->n_inputs; i++)
        free(s->inputs[i].data);
    for (int i = 0; i < s->n_outputs; i++)
        free(s->outputs[i].data);
    s->n_inputs = s->n_outputs = 0;
}

/* The inputs of configuration c with T tokens (T < c->T: the reference's
 * prefix), and its outputs (F32, zeroed, the shapes the op gives). */
static int build_problem(const bench_config *c, int64_t T, tensor_set *s)
{
    memset(s, 0, sizeof *s);
    const int bf16 = c->bf16;
    int rc = 0;
    if (c->mode == MODE_ELEMENTWISE) {
        const int64_t x_shape[2] = {T, c->K}, dim_shape[1] = {c->K}, scalar_shape[1] = {1};
        const int is_dyt = strcmp(c->op, "dyt") == 0;
        rc |= add_input(s, "x", bf16, 2, x_shape, DRAW_NORMAL, 0);
        /* DyT's alpha 0.5 (the paper's initialisation), DyISRU's C 1 */
        rc |= add_input(s, is_dyt ? "alpha" : "C", bf16, 1, scalar_shape, DRAW_CONSTANT, is_dyt ? 0.5 : 1.0);
        rc |= add_input(s, "weight", bf16, 1, dim_shape, DRAW_GAIN, 0);
        rc |= add_input(s, "bias", bf16, 1, dim_shape, DRAW_SMALL, 0);
    } else {
        const int is_path = strcmp(c->op, "path_attn") == 0;
        const int64_t qk_shape[4] = {c->B, T, c->H, c->K}, v_shape[4] = {c->B, T, c->HV, c->V};
        const int64_t gate_shape[3] = {c->B, T, c->HV}, state_shape[4] = {c->B, c->HV, c->K, c->V};
        rc |= add_input(s, "q", bf16, 4, qk_shape, is_path ? DRAW_NORMAL : DRAW_UNIT_ROWS, 0);
        rc |= add_input(s, "k", bf16, 4, qk_shape, is_path ? DRAW_NORMAL : DRAW_UNIT_ROWS, 0);
        rc |= add_input(s, "v", bf16, 4, v_shape, DRAW_NORMAL, 0);
        rc |= add_input(s, "beta", bf16, 3, gate_shape, is_path ? DRAW_PATH_STEP : DRAW_STEP, 0);
        if (is_path)
            rc |= add_input(s, "w", bf16, 4, qk_shape, DRAW_UNIT_ROWS, 0);
        if (strcmp(c->op, "gated_delta_rule") == 0)
            rc |= add_input(s, "g", bf16, 3, gate_shape, DRAW_LOG_DECAY, 0);
        if (c->mode == MODE_DECODE)
            rc |= add_input(s, "h0", bf16, 4, state_shape, DRAW_SMALL, 0);
    }
    if (rc != 0)
        return LACS_ERR_MEMORY;
    rc = lacs_reference_output_shapes(c->op, s->inputs, s->n_inputs, s->output_shapes, &s->n_outputs);
    if (rc != LACS_OK)
        return rc;
    for (int i = 0; i < s->n_outputs; i++) {
        const lacs_output_shape *shape = &s->output_shapes[i];
        s->outputs[i] = (lacs_tensor){.name = shape->name, .dtype = LACS_F32, .ndim = shape->ndim,
                                      .shape = shape->shape};
        const int64_t count = lacs_tensor_count(&s->outputs[i]);
        s->outputs[i].data = calloc((size_t)(count > 0 ? count : 1), sizeof(float));
        if (!s->outputs[i].data) {
            s->n_outputs = i;
            return LACS_ERR_MEMORY;
        }
    }
    return LACS_OK;
}

/* Bytes of every input and output once: what an element-wise op or a decode
 * step must at least read and write. */
static double problem_bytes(const tensor_set *s)
{
    double bytes = 0;
    for (int i = 0; i < s->n_inputs; i++)
        bytes += (double)lacs_tensor_count(&s->inputs[i]) * (s->inputs[i].dtype == LACS_BF16 ? 2 : 4);
    for (int i = 0; i < s->n_outputs; i++)
        bytes += (double)lacs_tensor_count(&s->outputs[i]) * 4;
    return bytes;
}

/* ---- children ---- */

typedef enum { STATUS_OK, STATUS_UNSUPPORTED, STATUS_ERROR, STATUS_TIMEOUT } child_status;
static const char *const status_names[] = {"ok", "unsupported", "error", "timeout"};

/* What a child sends back through its pipe. */
typedef struct {
    child_status status;
    double seconds;           /* builtin:cpu: best call; reference: its time on reference_T tokens */
    int repeats;
    double bytes;             /* every input and output once */
    double value;             /* an anchor's figure (GFLOP/s, GB/s) */
    int threads;              /* an anchor's threads */
    int64_t reference_T;
    double reference_scaled_seconds;
    char message[240];
} child_result;

typedef void (*child_job)(const void *argument, child_result *result);

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void set_message(child_result *r, const char *text)
{
    snprintf(r->message, sizeof r->message, "%s", text ? text : "");
    for (char *p = r->message; *p; p++)
        if (*p == '"' || *p == '\n')
            *p = '\''; /* the message is printed inside "..." on one line */
}

/* Runs job(argument) in a forked child that sends its result through a pipe;
 * *peak_rss_mb is the child's own peak resident set (wait4's ru_maxrss), so
 * every configuration's memory is measured alone. A child that dies or runs
 * past limit_s is a result with status error or timeout. */
static void run_in_child(child_job job, const void *argument, unsigned limit_s, child_result *result,
                         double *peak_rss_mb)
{
    memset(result, 0, sizeof *result);
    *peak_rss_mb = NAN;
    int fds[2];
    if (pipe(fds) != 0) {
        result->status = STATUS_ERROR;
        set_message(result, "pipe() failed");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        result->status = STATUS_ERROR;
        set_message(result, "fork() failed");
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        alarm(limit_s);
        child_result r;
        memset(&r, 0, sizeof r);
        job(argument, &r);
        const char *p = (const char *)&r;
        for (size_t left = sizeof r; left > 0;) {
            const ssize_t n = write(fds[1], p, left);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                _exit(3);
            p += n;
            left -= (size_t)n;
        }
        _exit(0);
    }
    close(fds[1]);
    size_t got = 0;
    while (got < sizeof *result) {
        const ssize_t n = read(fds[0], (char *)result + got, sizeof *result - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fds[0]);
    int wstatus = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    while (wait4(pid, &wstatus, 0, &usage) < 0 && errno == EINTR) {
    }
    *peak_rss_mb = (double)usage.ru_maxrss / 1024; /* KiB on Linux */
    if (got == sizeof *result && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        return;
    char text[128];
    memset(result, 0, sizeof *result);
    if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGALRM) {
        result->status = STATUS_TIMEOUT;
        snprintf(text, sizeof text, "ran past %u s", limit_s);
    } else {
        result->status = STATUS_ERROR;
        if (WIFSIGNALED(wstatus))
            snprintf(text, sizeof text, "the child was killed by signal %d", WTERMSIG(wstatus));
        else
            snprintf(text, sizeof text, "the child exited with status %d", WEXITSTATUS(wstatus));
    }
    set_message(result, text);
}

/* ---- anchors ---- */

/* OpenBLAS cblas_sgemm on n x n x n, its default threads (all cores, or
 * OPENBLAS_NUM_THREADS): a warm-up, then the best of SGEMM_PASSES. 2 n^3 flops. */
static void sgemm_job(const void *argument, child_result *r)
{
    const int n = *(const int *)argument;
    const size_t count = (size_t)n * (size_t)n;
    float *A = malloc(count * sizeof *A), *B = malloc(count * sizeof *B), *C = malloc(count * sizeof *C);
    if (!A || !B || !C) {
        r->status = STATUS_ERROR;
        set_message(r, "out of memory");
    } else {
        for (size_t i = 0; i < count; i++) {
            A[i] = (float)((i * 7) % 13) / 13 - 0.5f;
            B[i] = (float)((i * 5) % 11) / 11 - 0.5f;
        }
        double best = INFINITY;
        for (int pass = 0; pass <= SGEMM_PASSES; pass++) {
            const double t0 = now_seconds();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
            const double dt = now_seconds() - t0;
            if (pass > 0 && dt < best) /* pass 0 is the warm-up */
                best = dt;
        }
        r->seconds = best;
        r->value = 2.0 * n * (double)n * (double)n / best / 1e9;
        r->threads = openblas_get_num_threads();
    }
    free(A);
    free(B);
    free(C);
}

typedef struct {
    const char *source;
    char *destination;
    size_t bytes;
    int64_t parts;
} copy_context;

static void copy_part(void *context, int64_t part, int thread)
{
    (void)thread;
    const copy_context *c = context;
    const size_t begin = c->bytes * (size_t)part / (size_t)c->parts;
    const size_t end = c->bytes * (size_t)(part + 1) / (size_t)c->parts;
    memcpy(c->destination + begin, c->source + begin, end - begin);
}

/* A stream copy of COPY_BYTES on lacs_cpu_threads() threads (builtin:cpu's),
 * each copying its slice, pages touched first; best of COPY_PASSES. Bandwidth
 * = bytes read + bytes written (2 x COPY_BYTES) per second, as STREAM counts. */
static void copy_job(const void *argument, child_result *r)
{
    (void)argument;
    char *source = malloc(COPY_BYTES), *destination = malloc(COPY_BYTES);
    if (!source || !destination) {
        r->status = STATUS_ERROR;
        set_message(r, "out of memory");
    } else {
        memset(source, 1, COPY_BYTES);
        memset(destination, 0, COPY_BYTES);
        const int threads = lacs_cpu_threads();
        copy_context context = {source, destination, COPY_BYTES, threads};
        double best = INFINITY;
        for (int pass = 0; pass <= COPY_PASSES; pass++) {
            const double t0 = now_seconds();
            lacs_cpu_parallel_for(threads, threads, copy_part, &context);
            const double dt = now_seconds() - t0;
            if (pass > 0 && dt < best) /* pass 0 is the warm-up */
                best = dt;
        }
        r->seconds = best;
        r->value = 2.0 * (double)COPY_BYTES / best / 1e9;
        r->threads = threads;
    }
    free(source);
    free(destination);
}

/* ---- builtin:cpu ---- */

/* A warm-up call (untimed: first-touch page faults), then the best of
 * c->repeats calls, or of as many as add up to MIN_TIMED_S when they are
 * shorter (at most MAX_REPEATS), on the configuration's inputs. */
static void cpu_job(const void *argument, child_result *r)
{
    const bench_config *c = argument;
    tensor_set s;
    int rc = build_problem(c, c->T, &s);
    if (rc != LACS_OK) {
        r->status = STATUS_ERROR;
        set_message(r, rc == LACS_ERR_MEMORY ? "out of memory for the inputs" : lacs_last_error());
        free_problem(&s);
        return;
    }
    r->bytes = problem_bytes(&s);
    rc = lacs_cpu_run(c->op, s.inputs, s.n_inputs, NULL, 0, s.outputs, s.n_outputs); /* the warm-up */
    if (rc == LACS_UNSUPPORTED) {
        r->status = STATUS_UNSUPPORTED;
    } else if (rc != LACS_OK) {
        r->status = STATUS_ERROR;
        set_message(r, lacs_last_error());
    } else {
        double best = INFINITY, total = 0;
        int repeats = 0;
        while (rc == LACS_OK && repeats < MAX_REPEATS && (repeats < c->repeats || total < MIN_TIMED_S)) {
            const double t0 = now_seconds();
            rc = lacs_cpu_run(c->op, s.inputs, s.n_inputs, NULL, 0, s.outputs, s.n_outputs);
            const double dt = now_seconds() - t0;
            if (dt < best)
                best = dt;
            total += dt;
            repeats++;
        }
        if (rc != LACS_OK) {
            r->status = STATUS_ERROR;
            set_message(r, lacs_last_error());
        }
        r->seconds = best;
        r->repeats = repeats;
    }
    free_problem(&s);
}

/* ---- the reference ---- */

typedef struct {
    const bench_config *config;
    double budget_s;
} reference_request;

/* The reference (double, scalar: lacs_reference_run, long_double = 0) on the
 * first T tokens; the best of 3 when one run is under a second. Returns the
 * seconds, or a negative value with the error in r. */
static double time_reference(const bench_config *c, int64_t T, child_result *r)
{
    tensor_set s;
    int rc = build_problem(c, T, &s);
    double best = INFINITY;
    for (int run = 0; rc == LACS_OK && run < (best < 1.0 ? 3 : 1); run++) {
        const double t0 = now_seconds();
        rc = lacs_reference_run(c->op, s.inputs, s.n_inputs, NULL, 0, s.outputs, s.n_outputs, 0);
        const double dt = now_seconds() - t0;
        if (dt < best)
            best = dt;
    }
    free_problem(&s);
    if (rc != LACS_OK) {
        r->status = STATUS_ERROR;
        set_message(r, rc == LACS_ERR_MEMORY ? "reference: out of memory" : lacs_last_error());
        return -1;
    }
    return best;
}

static double growth_factor(reference_growth growth, double ratio)
{
    return growth == GROWTH_CUBIC ? ratio * ratio * ratio : growth == GROWTH_LINEAR ? ratio : 1;
}

/* The reference on the configuration's own shape when that should take less
 * than the budget; else on the longest prefix T_ref that should, and its time
 * scaled by the op's growth, (T / T_ref) or (T / T_ref)^3. From a calibration
 * run on 256 tokens, each step goes to the longest prefix (doubling, at most
 * T) whose time, estimated from the last run, fits the budget, and runs it.
 * The recurrences are linear to the percent, so one step reaches T_ref. The
 * cubic reference's T x T matrices leave the caches as T grows (its time
 * grew 14-fold from 256 to 512 tokens and 13-fold to 1024 on the
 * development machine, not 8-fold), so there each step is one doubling,
 * estimated with the last doubling's growth when that was steeper, and the
 * cubic scaling to T understates the reference's time, that is, the
 * speed-up. */
static void reference_job(const void *argument, child_result *r)
{
    const reference_request *request = argument;
    const bench_config *c = request->config;
    const reference_growth growth = config_growth(c);
    const int64_t calibration_T = 256;
    if (growth == GROWTH_NONE || c->T <= calibration_T) {
        const double seconds = time_reference(c, c->T, r);
        r->seconds = r->reference_scaled_seconds = seconds;
        r->reference_T = c->T;
        return;
    }
    int64_t reference_T = calibration_T;
    double seconds = time_reference(c, calibration_T, r), previous_seconds = NAN;
    while (seconds >= 0 && reference_T < c->T) {
        int64_t next = reference_T;
        if (growth == GROWTH_CUBIC) {
            /* one doubling, estimated by the growth of the last doubling where it was steeper than 8 */
            const int64_t candidate = 2 * reference_T < c->T ? 2 * reference_T : c->T;
            double factor = growth_factor(growth, (double)candidate / (double)reference_T);
            if (!isnan(previous_seconds) && seconds / previous_seconds > factor)
                factor = seconds / previous_seconds;
            if (seconds * factor <= request->budget_s)
                next = candidate;
        } else {
            for (int64_t candidate = reference_T; candidate < c->T;) {
                candidate = 2 * candidate < c->T ? 2 * candidate : c->T;
                if (seconds * growth_factor(growth, (double)candidate / (double)reference_T) > request->budget_s)
                    break;
                next = candidate;
            }
        }
        if (next == reference_T)
            break;
        previous_seconds = seconds;
        seconds = time_reference(c, next, r);
        reference_T = next;
    }
    if (seconds < 0)
        return;
    r->seconds = seconds;
    r->reference_T = reference_T;
    r->reference_scaled_seconds = seconds * growth_factor(growth, (double)c->T / (double)reference_T);
}

/* ---- one configuration, one line ---- */

typedef struct {
    double sgemm_gflops;
    double copy_gb_per_s;
} anchors;

typedef struct {
    child_status status;
    double time_s;
    double tokens_per_s;
    double ratio_vs_sgemm;
    double ratio_vs_bandwidth;
} config_outcome;

/* ` key=value`, or ` key=na` when the value is not a number. */
static void print_field(const char *key, const char *format, double value)
{
    printf(" %s=", key);
    if (isnan(value))
        printf("na");
    else
        printf(format, value);
}

static config_outcome run_config(const bench_config *c, const anchors *a, const options *opt)
{
    const unsigned limit_s = opt->quick ? QUICK_CHILD_LIMIT_S : CHILD_LIMIT_S;
    child_result cpu, ref;
    double peak_rss_mb, ref_rss_mb;
    run_in_child(cpu_job, c, limit_s, &cpu, &peak_rss_mb);
    const reference_request request = {c, opt->quick ? QUICK_REFERENCE_BUDGET_S : REFERENCE_BUDGET_S};
    run_in_child(reference_job, &request, limit_s, &ref, &ref_rss_mb);

    const int ok = cpu.status == STATUS_OK;
    const double time_s = ok ? cpu.seconds : NAN;
    const double flops = config_flops(c);
    const double gflops = flops / time_s / 1e9;
    const double gb_per_s = cpu.bytes > 0 ? cpu.bytes / time_s / 1e9 : NAN;
    const double reference_s = ref.status == STATUS_OK ? ref.reference_scaled_seconds : NAN;
    config_outcome outcome = {cpu.status, time_s, (double)(c->B * c->T) / time_s, gflops / a->sgemm_gflops,
                              gb_per_s / a->copy_gb_per_s};

    printf("bench op=%s impl=builtin:cpu tier=%s mode=%s B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld", c->op,
           c->bf16 ? "bf16" : "fp32", mode_names[c->mode], (long long)c->B, (long long)c->T, (long long)c->H,
           (long long)c->HV, (long long)c->K, (long long)c->V);
    print_field("time_ms", "%.3f", time_s * 1e3);
    print_field("tokens_per_s", "%.0f", outcome.tokens_per_s);
    print_field("gflops", "%.2f", gflops);
    if (c->mode != MODE_PREFILL)
        print_field("gb_per_s", "%.2f", gb_per_s);
    print_field("peak_rss_mb", "%.1f", peak_rss_mb);
    print_field("io_mb", "%.1f", cpu.bytes > 0 ? cpu.bytes / (1 << 20) : NAN);
    print_field("repeats", "%.0f", ok ? (double)cpu.repeats : NAN);
    print_field("reference_ms", "%.1f", reference_s * 1e3);
    print_field("reference_T", "%.0f", ref.status == STATUS_OK ? (double)ref.reference_T : NAN);
    printf(" reference_scaled=%s",
           ref.status == STATUS_OK && ref.reference_T != c->T ? growth_names[config_growth(c)] : "none");
    if (c->mode != MODE_ELEMENTWISE)
        print_field("ratio_vs_sgemm", "%.3f", outcome.ratio_vs_sgemm);
    if (c->mode != MODE_PREFILL)
        print_field("ratio_vs_bandwidth", "%.3f", outcome.ratio_vs_bandwidth);
    print_field("ratio_vs_reference", "%.2f", reference_s / time_s);
    printf(" status=%s", status_names[cpu.status]);
    if (cpu.message[0])
        printf(" error=\"%s\"", cpu.message);
    if (ref.status != STATUS_OK)
        printf(" reference_status=%s reference_error=\"%s\"", status_names[ref.status], ref.message);
    printf("\n");
    fflush(stdout);
    if (ref.status != STATUS_OK) /* the reference failing is the bench's failure: count it as an error */
        outcome.status = outcome.status == STATUS_OK || outcome.status == STATUS_UNSUPPORTED ? STATUS_ERROR
                                                                                              : outcome.status;
    return outcome;
}

/* ---- the summary of the targets ---- */

static const config_outcome *find_outcome(const bench_config *configs, const config_outcome *outcomes, int n,
                                          const char *op, int bf16, bench_mode mode, int64_t T)
{
    for (int i = 0; i < n; i++)
        if (strcmp(configs[i].op, op) == 0 && configs[i].bf16 == bf16 && configs[i].mode == mode &&
            (T < 0 || configs[i].T == T))
            return &outcomes[i];
    return NULL;
}

/* Why a target cannot be judged from this outcome, or NULL when it can. */
static const char *outcome_problem(const config_outcome *outcome)
{
    if (!outcome)
        return "not_run";
    return outcome->status == STATUS_OK ? NULL : status_names[outcome->status];
}

/* One `target` line: the measured value against the goal, PASS or BELOW, or
 * n/a with why (not run, unsupported, ...). */
static void print_target(const char *what, const char *metric, double goal, double measured, const char *why_not)
{
    printf("target %s metric=%s goal=%.2f", what, metric, goal);
    if (why_not || isnan(measured))
        printf(" measured=na result=n/a why=%s\n", why_not ? why_not : "not_measured");
    else
        printf(" measured=%.3f result=%s\n", measured, measured >= goal ? "PASS" : "BELOW");
}

static void print_summary(const bench_config *configs, const config_outcome *outcomes, int n, const options *opt,
                          const char *isa)
{
    const int64_t gdr_T = opt->quick ? 256 : 4096;
    char what[128];
    printf("summary (the issue's targets; reports, not failures%s)\n", opt->quick ? "; --quick shapes" : "");

    const config_outcome *fp32 = find_outcome(configs, outcomes, n, "gated_delta_rule", 0, MODE_PREFILL, gdr_T);
    const config_outcome *bf16 = find_outcome(configs, outcomes, n, "gated_delta_rule", 1, MODE_PREFILL, gdr_T);
    snprintf(what, sizeof what, "op=gated_delta_rule tier=fp32 T=%lld", (long long)gdr_T);
    print_target(what, "ratio_vs_sgemm", 0.40, fp32 ? fp32->ratio_vs_sgemm : NAN, outcome_problem(fp32));

    /* bf16 is to be faster only where the CPU has AVX512-BF16 (vdpbf16ps) */
    const char *why_not = strcmp(isa, "avx512") != 0 ? "isa_not_avx512" : outcome_problem(bf16);
    if (!why_not)
        why_not = outcome_problem(fp32);
    snprintf(what, sizeof what, "op=gated_delta_rule tier=bf16 T=%lld", (long long)gdr_T);
    print_target(what, "tokens_per_s_vs_fp32", 1.5, why_not ? NAN : bf16->tokens_per_s / fp32->tokens_per_s,
                 why_not);

    static const char *const norm_ops[] = {"dyt", "dyisru"};
    for (int o = 0; o < 2; o++)
        for (int tier = 0; tier < 2; tier++) {
            const config_outcome *norm = find_outcome(configs, outcomes, n, norm_ops[o], tier, MODE_ELEMENTWISE, -1);
            snprintf(what, sizeof what, "op=%s tier=%s", norm_ops[o], tier ? "bf16" : "fp32");
            print_target(what, "ratio_vs_bandwidth", 0.70, norm ? norm->ratio_vs_bandwidth : NAN,
                         outcome_problem(norm));
        }
}

/* ---- main ---- */

static void cpu_model(char *model, size_t size)
{
    snprintf(model, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        const char *value = strchr(line, ':');
        if (!value)
            break;
        value++;
        while (*value == ' ' || *value == '\t')
            value++;
        snprintf(model, size, "%s", value);
        model[strcspn(model, "\"\n")] = '\0';
        break;
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    options opt;
    const int parsed = parse_options(argc, argv, &opt);
    if (parsed != 0)
        return parsed > 0 ? 0 : 2;
    const double started = now_seconds();

    const char *isa = lacs_cpu_isa_name();
    if (!isa) {
        fprintf(stderr, "lacs-bench: %s\n", lacs_last_error());
        return 2;
    }
    char model[256];
    cpu_model(model, sizeof model);
    printf("machine cpu=\"%s\" cores=%ld isa=%s threads=%d run=%s\n", model, sysconf(_SC_NPROCESSORS_ONLN), isa,
           lacs_cpu_threads(), opt.quick ? "quick" : "full");

    /* The anchors first, each in its own child (OpenBLAS's thread pool dies with it). */
    anchors a = {NAN, NAN};
    int errors = 0;
    child_result r;
    double rss;
    const int sgemm_n = opt.quick ? 512 : 2048;
    run_in_child(sgemm_job, &sgemm_n, opt.quick ? QUICK_CHILD_LIMIT_S : CHILD_LIMIT_S, &r, &rss);
    if (r.status == STATUS_OK)
        a.sgemm_gflops = r.value;
    else
        errors++;
    printf("anchor name=sgemm");
    print_field("gflops", "%.1f", a.sgemm_gflops);
    printf(" n=%d threads=%d passes=%d openblas_core=%s status=%s\n", sgemm_n, r.threads, SGEMM_PASSES,
           openblas_get_corename(), status_names[r.status]);
    run_in_child(copy_job, NULL, opt.quick ? QUICK_CHILD_LIMIT_S : CHILD_LIMIT_S, &r, &rss);
    if (r.status == STATUS_OK)
        a.copy_gb_per_s = r.value;
    else
        errors++;
    printf("anchor name=copy");
    print_field("gb_per_s", "%.2f", a.copy_gb_per_s);
    printf(" mib=%zu threads=%d passes=%d status=%s\n", COPY_BYTES >> 20, r.threads, COPY_PASSES,
           status_names[r.status]);
    fflush(stdout);

    static bench_config configs[MAX_CONFIGS];
    static config_outcome outcomes[MAX_CONFIGS];
    const int n = build_configs(&opt, configs);
    for (int i = 0; i < n; i++) {
        outcomes[i] = run_config(&configs[i], &a, &opt);
        if (outcomes[i].status == STATUS_ERROR || outcomes[i].status == STATUS_TIMEOUT)
            errors++;
    }
    print_summary(configs, outcomes, n, &opt, isa);
    printf("done wall_s=%.1f errors=%d\n", now_seconds() - started, errors);
    return errors ? 1 : 0;
}
