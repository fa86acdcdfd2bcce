/* lacs-bench: the benchmark of builtin:cpu (`make bench`; bench/README.md).
 *
 * For each configuration, each instruction set this machine runs (avx512,
 * avx2; LACS_ISA or --isa to choose) and each tier, one machine-readable line:
 *
 *   bench op= impl=builtin:cpu isa= tier= mode= B= T= H= HV= K= V= time_ms= tokens_per_s= gflops=
 *         [algorithm_gflops=] [gb_per_s=] [in_cache_gb_per_s=] gemm_beside_gflops=|copy_beside_gb_per_s=
 *         drift= [core_beside_gflops= core_drift=] measurements= peak_rss_mb= io_mb= repeats= reference_ms=
 *         reference_T= reference_scaled=
 *         [ratio_vs_sgemm=] [ratio_vs_bandwidth=] [vs_fp32_alternated= alternated_drift= alternations=]
 *         ratio_vs_reference= status=
 *
 * Before them, measured in the same run: the machine, and the anchors the
 * ratios divide by: OpenBLAS's sgemm for each instruction set (its AVX2
 * kernel for the avx2 lines, so that an AVX-512 machine measures the AVX2
 * path against an AVX2 machine's yardstick), a stream copy, and builtin:cpu's
 * own GEMM at the chunk and block shapes (the rooflines of the summary).
 * Each line also measures its anchor beside its calls (the copy, or the
 * GEMM at its shape, alternating with them in the same child, round by
 * round): a ratio is the calls' rate against that anchor in the same round
 * (the median over the rounds), times, for sgemm, that anchor's against
 * OpenBLAS's in the run's anchor rounds (the median of their quotients), so
 * that it measures the kernel rather than how the machine's load moved in
 * between.
 * After them, the summary: one `target` line per goal of issue 21 and
 * instruction set, PASS or BELOW (with the measured bound that limits the
 * figure), reports rather than failures.
 *
 * Read top to bottom: options, instruction sets, configurations and their
 * flop counts, inputs (realistic, seeded), children (every measurement runs
 * in a forked child, so that its peak RSS is its own), the anchors,
 * builtin:cpu's timing, the reference's timing, the lines, the summary, main.
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

#include "cpu.h" /* optimized/cpu/cpu.h: the GEMM tables, flop counts, lacs_cpu_parallel_for, bf16 rounding */
#include "lacs/prng.h"

/* Every input is drawn from this seed (one stream per tensor name). */
#define BENCH_SEED 20250601u
/* Every buffer of the bench (the op's tensors, the anchors' operands) starts on a boundary of this many bytes:
 * see bench_alloc. */
#define BENCH_ALIGNMENT 64
/* The reference runs on the configuration's own T when it should take less
 * than this, else on the longest prefix that should, scaled up (see
 * reference_job). */
#define REFERENCE_BUDGET_S 20.0
#define QUICK_REFERENCE_BUDGET_S 2.0
/* A call faster than this is repeated until its repeats add up to it (best
 * taken), so that a sub-millisecond decode step is not one noisy sample. */
#define MIN_TIMED_S 0.2
/* The bf16 tier's recurrent prefill lines: pairs of turns alternating with fp32's on the same shape, each
 * turn ALTERNATE_CALLS calls of one tier (alternate_job) */
#define ALTERNATE_PAIRS 8
#define ALTERNATE_CALLS 2
#define MAX_REPEATS 2000
/* A child that runs longer is killed (SIGALRM) and reported as status=timeout. */
#define CHILD_LIMIT_S 900
#define QUICK_CHILD_LIMIT_S 120
/* The stream copy: 256 MiB copied into another 256 MiB, best of 5. */
#define COPY_BYTES ((size_t)256 << 20)
#define COPY_PASSES 5
#define SGEMM_PASSES 3
/* The anchors are measured in this many rounds, each anchor once a round in turn (main: OpenBLAS's best round,
 * builtin:cpu's by their median quotient to it within a round). */
#define ANCHOR_ROUNDS 5
/* The norms' compute roofline: the same op on one thread, on its first rows,
 * NORM_IN_CACHE_BYTES of fp32 input (in that core's L2 with the other
 * operands), times the run's threads. On the run's threads and 256 KiB a
 * thread, blocks of 4 rows, each call paid the threads' hand-over and the
 * blocks' column sums at a rate the large problem does not: the "bound"
 * came out below the large problem's own rate (0.29 against 0.52,
 * ../optimized/cpu/README.md section 8.2.6). */
#define NORM_IN_CACHE_BYTES ((int64_t)512 << 10)

/* A line whose drift (its anchor beside against the run's) is outside [DRIFT_STEADY_LOW, DRIFT_STEADY_HIGH] is
 * measured again in a full run, up to MEASUREMENTS_MAX measurements in all (run_config). */
#define DRIFT_STEADY_LOW 0.8
#define DRIFT_STEADY_HIGH 1.25
#define MEASUREMENTS_MAX 3
/* The bf16 tier's alternation with fp32 is measured again below this drift of the bf16 GEMM beside it: its
 * quotient moves with that drift (gated_delta_rule and delta_rule under avx512: 1.498 at 0.81, 1.650 at 0.91,
 * 1.678-1.680 at 0.98; optimized/cpu/README.md 8.2.18), a spell slowing the bf16 products more than fp32's. */
#define ALTERNATED_DRIFT_LOW 0.9
/* The summary's goals (issue 21). */
#define GOAL_PREFILL_VS_SGEMM 0.60
#define GOAL_BF16_VS_FP32_AVX512 1.50
#define GOAL_BF16_VS_FP32_AVX2 1.00
#define GOAL_VS_BANDWIDTH 0.70
#define GOAL_ATTENTION_VS_SGEMM 0.60
#define GOAL_BACKWARD_VS_SGEMM 0.30 /* issue 20: the GDN backward, counting 3x the forward's flops */
/* The recurrent family's workspace may not grow with T: at T = 16384 it may
 * exceed T = 1024's by this much (allocator noise), no more. */
#define WORKSPACE_SLACK_MB 8.0

/* ---- options ---- */

static const char *const bench_ops[] = {"delta_rule", "gated_delta_rule", "softmax_attn", "fox",       "path_attn",
                                        "dyt",        "dyt_vjp",          "dyisru",       "dyisru_vjp", "rmsnorm",
                                        "rmsnorm_vjp", "softcap",         "softcap_vjp", "gated_delta_rule_vjp",
                                        "softmax_attn_vjp", "fox_vjp"};
#define N_BENCH_OPS ((int)(sizeof bench_ops / sizeof bench_ops[0]))

#define MAX_ISAS 2
static const char *const known_isas[MAX_ISAS] = {"avx512", "avx2"};

typedef enum { MODE_PREFILL, MODE_DECODE, MODE_ELEMENTWISE } bench_mode;
static const char *const mode_names[] = {"prefill", "decode", "elementwise"};

typedef struct {
    int quick;
    int op_selected[N_BENCH_OPS]; /* all 1 unless --op names some */
    int tier_selected[2];         /* [0] fp32, [1] bf16 */
    int mode_selected[3];         /* prefill, decode, elementwise (bench_mode): all 1 unless --mode names some */
    const char *isas[MAX_ISAS];   /* the instruction sets measured, in this order */
    int n_isas;
} options;

static void print_usage(FILE *f)
{
    fprintf(f,
            "usage: lacs-bench [--quick] [--op OP[,OP...]] [--tier fp32|bf16] [--mode MODE] [--isa avx512|avx2[,...]]\n"
            "                  [--help]\n"
            "  Benchmarks builtin:cpu (lacs_cpu_run) against OpenBLAS sgemm, a stream copy and the\n"
            "  scalar reference, measured in the same run; one `bench ...` line per configuration,\n"
            "  instruction set and tier, then one `target ...` line per goal (bench/README.md).\n"
            "  --quick   small shapes (T=256, H=4, 4 MiB norms, sgemm 512): the CI run, < 60 s\n"
            "  --op      delta_rule, gated_delta_rule (with its decode lines), softmax_attn, fox, path_attn,\n"
            "            dyt, dyt_vjp, dyisru, dyisru_vjp, rmsnorm, rmsnorm_vjp, softcap, softcap_vjp,\n"
            "            gated_delta_rule_vjp (the GDN backward, issue 20), softmax_attn_vjp, fox_vjp\n"
            "            (repeatable or comma-separated; default: all)\n"
            "  --tier    fp32 or bf16 (default: both)\n"
            "  --mode    prefill, decode or elementwise: only the lines of that mode, e.g. --op\n"
            "            gated_delta_rule --mode decode for the decode lines alone (repeatable; default: all)\n"
            "  --isa     the instruction sets to measure (default: LACS_ISA if set, else every one of\n"
            "            avx512 and avx2 this CPU has)\n"
            "  Environment: LACS_ISA (as --isa), LACS_THREADS (builtin:cpu and the copy),\n"
            "  OPENBLAS_NUM_THREADS and OPENBLAS_CORETYPE (the native sgemm anchor, whose kernel the anchor\n"
            "  line names). Exit status: 0, also when builtin:cpu returns unsupported; 1 when it (or a\n"
            "  measurement) fails; 2 for a bad option.\n");
}

/* Marks selected[i] for each of the n names equal to `name`; returns whether one was. */
static int select_name(const char *name, const char *const *names, int n, int *selected)
{
    int found = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) {
            selected[i] = 1;
            found = 1;
        }
    return found;
}

static int select_ops(options *opt, const char *list)
{
    char buffer[512];
    if (strlen(list) >= sizeof buffer) {
        fprintf(stderr, "lacs-bench: --op: the list is too long\n");
        return -1;
    }
    strcpy(buffer, list);
    for (char *save = NULL, *name = strtok_r(buffer, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (!select_name(name, bench_ops, N_BENCH_OPS, opt->op_selected)) {
            fprintf(stderr, "lacs-bench: --op %s: not one of the benchmarked ops (see --help)\n", name);
            return -1;
        }
    }
    return 0;
}

/* The instruction sets of a comma-separated list; each must be known and supported. */
static int select_isas(options *opt, const char *list, const char *where)
{
    char buffer[64];
    if (strlen(list) >= sizeof buffer) {
        fprintf(stderr, "lacs-bench: %s: the list is too long\n", where);
        return -1;
    }
    strcpy(buffer, list);
    opt->n_isas = 0;
    for (char *save = NULL, *name = strtok_r(buffer, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int known = -1;
        for (int i = 0; i < MAX_ISAS; i++)
            if (strcmp(name, known_isas[i]) == 0)
                known = i;
        if (known < 0) {
            fprintf(stderr, "lacs-bench: %s %s: not one of avx512, avx2\n", where, name);
            return -1;
        }
        if (!lacs_cpu_isa_supported(known_isas[known])) {
            fprintf(stderr, "lacs-bench: %s %s: this CPU lacks the instructions it needs\n", where, name);
            return -1;
        }
        int duplicate = 0;
        for (int i = 0; i < opt->n_isas; i++)
            duplicate |= opt->isas[i] == known_isas[known];
        if (!duplicate && opt->n_isas < MAX_ISAS)
            opt->isas[opt->n_isas++] = known_isas[known];
    }
    if (opt->n_isas == 0) {
        fprintf(stderr, "lacs-bench: %s: no instruction set named\n", where);
        return -1;
    }
    return 0;
}

/* Returns 0, 1 for --help (done), or -1 for a bad option (reported). */
static int parse_options(int argc, char **argv, options *opt)
{
    int any_op = 0, any_tier = 0, any_isa = 0, any_mode = 0;
    memset(opt, 0, sizeof *opt);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage(stdout);
            return 1;
        } else if (strcmp(a, "--quick") == 0) {
            opt->quick = 1;
        } else if (strcmp(a, "--op") == 0 || strcmp(a, "--tier") == 0 || strcmp(a, "--isa") == 0 ||
                   strcmp(a, "--mode") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "lacs-bench: %s needs a value\n", a);
                return -1;
            }
            const char *value = argv[++i];
            if (strcmp(a, "--op") == 0) {
                if (select_ops(opt, value) != 0)
                    return -1;
                any_op = 1;
            } else if (strcmp(a, "--isa") == 0) {
                if (select_isas(opt, value, "--isa") != 0)
                    return -1;
                any_isa = 1;
            } else if (strcmp(a, "--mode") == 0) {
                if (!select_name(value, mode_names, 3, opt->mode_selected)) {
                    fprintf(stderr, "lacs-bench: --mode %s: not prefill, decode or elementwise\n", value);
                    return -1;
                }
                any_mode = 1;
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
    if (!any_mode)
        opt->mode_selected[0] = opt->mode_selected[1] = opt->mode_selected[2] = 1;
    if (!any_isa) {
        const char *forced = getenv("LACS_ISA");
        if (forced && *forced) {
            if (strcmp(forced, "scalar") == 0) {
                opt->isas[0] = "scalar"; /* measured, with no target of its own */
                opt->n_isas = 1;
            } else if (select_isas(opt, forced, "LACS_ISA") != 0)
                return -1;
        } else
            for (int i = 0; i < MAX_ISAS; i++)
                if (lacs_cpu_isa_supported(known_isas[i]))
                    opt->isas[opt->n_isas++] = known_isas[i];
        if (opt->n_isas == 0) {
            opt->isas[0] = "scalar";
            opt->n_isas = 1;
        }
    }
    return 0;
}

/* ---- configurations ---- */


/* How the reference's time grows with T: the recurrent reference is one pass
 * over the tokens (O(T K V)), the attention forms' are O(T^2) (softmax, FoX)
 * or O(T^3) (PaTH's matrix form); decode and the element-wise ops always run
 * on the configuration's own shape. */
typedef enum { GROWTH_NONE, GROWTH_LINEAR, GROWTH_QUADRATIC, GROWTH_CUBIC } reference_growth;
static const char *const growth_names[] = {"none", "linear", "quadratic", "cubic"};

typedef enum { FAMILY_RECURRENT, FAMILY_ATTENTION, FAMILY_NORM, FAMILY_BACKWARD } op_family;

typedef struct {
    const char *op;
    bench_mode mode;
    int bf16;
    /* The element-wise ops: T = rows, K = V = dim, B = H = HV = 1 (a row is one token's hidden vector). */
    int64_t B, T, H, HV, K, V;
    int repeats; /* best of this many timed calls, after a warm-up call */
} bench_config;

#define MAX_CONFIGS 96

static op_family family_of(const char *op)
{
    if (strcmp(op, "delta_rule") == 0 || strcmp(op, "gated_delta_rule") == 0)
        return FAMILY_RECURRENT;
    if (strcmp(op, "softmax_attn") == 0 || strcmp(op, "fox") == 0 || strcmp(op, "path_attn") == 0 ||
        strcmp(op, "softmax_attn_vjp") == 0 || strcmp(op, "fox_vjp") == 0)
        return FAMILY_ATTENTION;
    if (strcmp(op, "gated_delta_rule_vjp") == 0)
        return FAMILY_BACKWARD;
    return FAMILY_NORM;
}

static int add_config(const options *opt, bench_config *list, int n, bench_config c)
{
    if (n < MAX_CONFIGS && opt->mode_selected[c.mode])
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
    const int64_t decode_batch = 16;
    const int64_t attention_T = opt->quick ? 256 : 4096;
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
            switch (family_of(op)) {
            case FAMILY_RECURRENT:
                for (int i = 0; i < n_T; i++)
                    n = add_config(opt, list, n,
                                   (bench_config){op, MODE_PREFILL, bf16, 1, Ts[i], heads, heads, 128, 128,
                                                  Ts[i] >= 16384 ? 1 : 3});
                if (strcmp(op, "gated_delta_rule") == 0) {
                    /* one sequence, then a batch of 16 sequences, one token each from its h0 */
                    n = add_config(opt, list, n, (bench_config){op, MODE_DECODE, bf16, 1, 1, heads, heads, 128, 128, 3});
                    n = add_config(opt, list, n,
                                   (bench_config){op, MODE_DECODE, bf16, decode_batch, 1, heads, heads, 128, 128, 3});
                }
                break;
            case FAMILY_ATTENTION:
                /* d = 64: H = HV = 4 heads of K = V = 64 */
                n = add_config(opt, list, n, (bench_config){op, MODE_PREFILL, bf16, 1, attention_T, 4, 4, 64, 64, 3});
                break;
            case FAMILY_BACKWARD:
                /* issue 20: B = 1, T = 4096, H = HV = 16, K = V = 128 */
                n = add_config(opt, list, n, (bench_config){op, MODE_PREFILL, bf16, 1, attention_T, heads, heads, 128, 128, 3});
                break;
            case FAMILY_NORM:
                n = add_config(opt, list, n,
                               (bench_config){op, MODE_ELEMENTWISE, bf16, 1, norm_rows, 1, 1, norm_dim, norm_dim, 3});
                break;
            }
        }
    }
    return n;
}

static reference_growth config_growth(const bench_config *c)
{
    if (c->mode != MODE_PREFILL)
        return GROWTH_NONE;
    if (family_of(c->op) == FAMILY_RECURRENT || family_of(c->op) == FAMILY_BACKWARD)
        return GROWTH_LINEAR;
    return strcmp(c->op, "path_attn") == 0 ? GROWTH_CUBIC : GROWTH_QUADRATIC;
}

/* The floating-point operations of one call, counted so that no algorithm
 * can inflate them (NAN for the element-wise ops, measured against
 * bandwidth instead):
 * - the recurrent family: the recurrent form's work, per token and value head
 *   6 K V for the delta rule's family (the erase S^T k, the write k u^T and
 *   the read S^T q, a multiply-add each per state element: 3 x 2 K V) and
 *   4 K V for linear attention's (no erase), whatever the implementation
 *   computes (a chunked algorithm does more; README.md section 7);
 * - the attention forms: causal softmax attention's, as FlashAttention counts
 *   it (benchmarks/benchmark_flash_attention.py: 4 T^2 d per head, halved
 *   for causal): the logits q_i . k_j (K) and the weighted sum of the values
 *   (V) over half the T^2 pairs, 2 flops per multiply-add: T^2 (K + V) per
 *   head. PaTH's extra work for its transitions is the algorithm's, stated
 *   beside it (algorithm_gflops). The gradients (softmax_attn_vjp, fox_vjp):
 *   2.5 times the forward's, FlashAttention's convention (its
 *   benchmark_flash_attention.py: the backward's five products against the
 *   forward's two), whatever the algorithm recomputes. */
static double config_flops(const bench_config *c)
{
    const double heads = (double)(c->HV * c->B), T = (double)c->T, K = (double)c->K, V = (double)c->V;
    switch (family_of(c->op)) {
    case FAMILY_RECURRENT:
        return T * heads * 6 * K * V; /* delta_rule, gated_delta_rule: both erase */
    case FAMILY_ATTENTION:
        return T * T * (K + V) * heads * (strstr(c->op, "_vjp") ? 2.5 : 1.0); /* a backward: 2.5 x (FlashAttention) */
    case FAMILY_BACKWARD:
        return T * heads * 18 * K * V; /* 3 x the forward's 6 K V (issue 20) */
    case FAMILY_NORM:
        break;
    }
    return NAN;
}

/* The flops builtin:cpu's algorithm performs (its dense products; cpu.h), for
 * the rooflines of the summary and PaTH's extra work. */
static double config_algorithm_flops(const bench_config *c)
{
    if (c->mode != MODE_PREFILL)
        return NAN;
    return lacs_cpu_algorithm_flops(c->op, c->T, c->K, c->V) * (double)(c->HV * c->B);
}

/* ---- inputs ---- */

/* How a tensor's values are drawn (x standard normal, Irwin-Hall as the
 * generators', SPEC.md 6): realistic for each op, so that builtin:cpu runs
 * its ordinary path (no overflow, no early exit). */
typedef enum {
    DRAW_NORMAL,        /* x: v, the attention forms' q and k, the norms' x and dy */
    DRAW_UNIT_ROWS,     /* x / ||x|| over the last dim: the delta rule's q and k (||k|| = 1), PaTH's w */
    DRAW_STEP,          /* sigmoid(x) in (0, 1): the delta rule's beta */
    DRAW_PATH_STEP,     /* 2 sigmoid(x) in (0, 2): PaTH's beta (fla's) */
    DRAW_LOG_DECAY,     /* -softplus(x) / 4, mostly -0.03 .. -0.5: Gated DeltaNet's g */
    DRAW_LOG_FORGET,    /* -softplus(x - 4): FoX's forget gate near 1 (log near -0.02) */
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
    lacs_param params[2];
    int n_params;
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
    case DRAW_LOG_FORGET:
        return -log1p(exp(x - 4));
    case DRAW_GAIN:
        return 1 + x / 10;
    case DRAW_SMALL:
        return x / 10;
    default:
        return x;
    }
}

/* `bytes` (at least 1) on a BENCH_ALIGNMENT boundary, for free(): every tensor starts on a cache line, as
 * PyTorch's CPU allocator places them (pytorch/pytorch, c10/core/alignment.h: gAlignment = 64, "enough for
 * computation up to AVX512"; c10/core/impl/alloc_cpu.cpp: posix_memalign). glibc's malloc puts a large block
 * 16 bytes past a page boundary, where each 64-byte vector of a row straddles two cache lines: builtin:cpu's
 * gated_delta_rule fp32 under avx512 ran about 2 % slower on such tensors (optimized/cpu/README.md 8.2.12). */
static void *bench_alloc(size_t bytes)
{
    const size_t rounded = (bytes + BENCH_ALIGNMENT - 1) / BENCH_ALIGNMENT * BENCH_ALIGNMENT;
    return aligned_alloc(BENCH_ALIGNMENT, rounded > 0 ? rounded : BENCH_ALIGNMENT);
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
    t->data = bench_alloc((size_t)(count > 0 ? count : 1) * (bf16 ? sizeof(uint16_t) : sizeof(float)));
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

/* The norms' inputs: x (and dy for a VJP), DyT's alpha 0.5 (the paper's
 * initialisation), DyISRU's C 1, a weight where the op reads one, a bias for
 * the forward DyT and DyISRU; softcap's cap 30 (Gemma 2's final logit cap). */
static int build_norm_inputs(const bench_config *c, int64_t rows, tensor_set *s)
{
    const int bf16 = c->bf16, vjp = strstr(c->op, "_vjp") != NULL;
    const int64_t x_shape[2] = {rows, c->K}, dim_shape[1] = {c->K}, scalar_shape[1] = {1};
    int rc = add_input(s, "x", bf16, 2, x_shape, DRAW_NORMAL, 0);
    if (vjp)
        rc |= add_input(s, "dy", bf16, 2, x_shape, DRAW_NORMAL, 0);
    if (strncmp(c->op, "dyt", 3) == 0)
        rc |= add_input(s, "alpha", bf16, 1, scalar_shape, DRAW_CONSTANT, 0.5);
    if (strncmp(c->op, "dyisru", 6) == 0)
        rc |= add_input(s, "C", bf16, 1, scalar_shape, DRAW_CONSTANT, 1.0);
    if (strncmp(c->op, "softcap", 7) != 0)
        rc |= add_input(s, "weight", bf16, 1, dim_shape, DRAW_GAIN, 0);
    if (!vjp && (strncmp(c->op, "dyt", 3) == 0 || strncmp(c->op, "dyisru", 6) == 0))
        rc |= add_input(s, "bias", bf16, 1, dim_shape, DRAW_SMALL, 0);
    if (strncmp(c->op, "softcap", 7) == 0)
        s->params[s->n_params++] = (lacs_param){"cap", 30.0};
    return rc;
}

/* The inputs of configuration c with T tokens (T < c->T: the reference's
 * prefix; rows for the norms), and its outputs (F32, zeroed, the shapes the
 * op gives). */
static int build_problem(const bench_config *c, int64_t T, tensor_set *s)
{
    memset(s, 0, sizeof *s);
    const int bf16 = c->bf16;
    int rc = 0;
    if (c->mode == MODE_ELEMENTWISE) {
        rc = build_norm_inputs(c, T, s);
    } else {
        const int attention = family_of(c->op) == FAMILY_ATTENTION, is_path = strcmp(c->op, "path_attn") == 0;
        const int backward = family_of(c->op) == FAMILY_BACKWARD;
        const int64_t qk_shape[4] = {c->B, T, c->H, c->K}, v_shape[4] = {c->B, T, c->HV, c->V};
        const int64_t gate_shape[3] = {c->B, T, c->HV}, state_shape[4] = {c->B, c->HV, c->K, c->V};
        rc |= add_input(s, "q", bf16, 4, qk_shape, attention ? DRAW_NORMAL : DRAW_UNIT_ROWS, 0);
        rc |= add_input(s, "k", bf16, 4, qk_shape, attention ? DRAW_NORMAL : DRAW_UNIT_ROWS, 0);
        rc |= add_input(s, "v", bf16, 4, v_shape, DRAW_NORMAL, 0);
        if (!attention || is_path)
            rc |= add_input(s, "beta", bf16, 3, gate_shape, is_path ? DRAW_PATH_STEP : DRAW_STEP, 0);
        if (is_path)
            rc |= add_input(s, "w", bf16, 4, qk_shape, DRAW_UNIT_ROWS, 0);
        if (strcmp(c->op, "gated_delta_rule") == 0 || backward)
            rc |= add_input(s, "g", bf16, 3, gate_shape, DRAW_LOG_DECAY, 0);
        if (backward) /* the cotangent of o */
            rc |= add_input(s, "do", bf16, 4, v_shape, DRAW_NORMAL, 0);
        if (strcmp(c->op, "fox") == 0 || strcmp(c->op, "fox_vjp") == 0)
            rc |= add_input(s, "g", bf16, 3, gate_shape, DRAW_LOG_FORGET, 0);
        if (attention && strstr(c->op, "_vjp")) /* the cotangent of o */
            rc |= add_input(s, "do", bf16, 4, v_shape, DRAW_NORMAL, 0);
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
        const size_t bytes = (size_t)(count > 0 ? count : 1) * sizeof(float);
        s->outputs[i].data = bench_alloc(bytes);
        if (!s->outputs[i].data) {
            s->n_outputs = i;
            return LACS_ERR_MEMORY;
        }
        memset(s->outputs[i].data, 0, bytes);
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
    double value;             /* an anchor's figure (GFLOP/s, GB/s); the norms' in-cache GB/s */
    double beside;            /* builtin:cpu: its anchor measured beside it (GEMM GFLOP/s or copy GB/s), best */
    double core_beside;       /* builtin:cpu, decode and the norms: the GEMM beside too (GFLOP/s, median pass) */
    double per_beside;        /* builtin:cpu: the median over the rounds of 1 / (the round's best call's seconds x
                               * the anchor beside in that round), time_calls */
    double in_cache_per_copy; /* the norms: the in-cache rate (value) against the copy beside, matched the same way */
    int threads;              /* an anchor's threads */
    int64_t reference_T;
    double reference_scaled_seconds;
    char core[32];            /* OpenBLAS's kernel, for the sgemm anchor */
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

/* Sends r through fd (a child's pipe); returns 0 when all of it went. */
static int send_result(int fd, const child_result *r)
{
    const char *p = (const char *)r;
    for (size_t left = sizeof *r; left > 0;) {
        const ssize_t n = write(fd, p, left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        left -= (size_t)n;
    }
    return 0;
}

/* Waits for child `pid`, reading its result from fd; a child that dies or runs
 * past limit_s is a result with status error or timeout. */
static void collect_child(pid_t pid, int fd, unsigned limit_s, child_result *result, double *peak_rss_mb)
{
    size_t got = 0;
    while (got < sizeof *result) {
        const ssize_t n = read(fd, (char *)result + got, sizeof *result - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
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

/* Runs job(argument) in a forked child, under LACS_ISA=isa when isa is not
 * NULL, that sends its result through a pipe; *peak_rss_mb is the child's
 * own peak resident set (wait4's ru_maxrss), so every configuration's memory
 * is measured alone. */
static void run_in_child(child_job job, const void *argument, const char *isa, unsigned limit_s,
                         child_result *result, double *peak_rss_mb)
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
        if (isa)
            setenv("LACS_ISA", isa, 1);
        child_result r;
        memset(&r, 0, sizeof r);
        job(argument, &r);
        _exit(send_result(fds[1], &r) == 0 ? 0 : 3);
    }
    close(fds[1]);
    collect_child(pid, fds[0], limit_s, result, peak_rss_mb);
}

/* How builtin:cpu's bf16 tier multiplies under LACS_ISA=isa, the children's
 * setting: "native" or "widened" (lacs_cpu_bf16_products). */
static const char *bf16_products_under(const char *isa)
{
    const char *saved = getenv("LACS_ISA");
    char copy[64] = "";
    if (saved)
        snprintf(copy, sizeof copy, "%s", saved);
    setenv("LACS_ISA", isa, 1);
    const char *products = lacs_cpu_bf16_products();
    if (saved)
        setenv("LACS_ISA", copy, 1);
    else
        unsetenv("LACS_ISA");
    return products ? products : "unknown";
}

/* ---- anchors ---- */

/* OpenBLAS cblas_sgemm on n x n x n, its default threads (all cores, or
 * OPENBLAS_NUM_THREADS): a warm-up, then the best of SGEMM_PASSES. 2 n^3 flops. */
static void sgemm_anchor_job(const void *argument, child_result *r)
{
    const int n = *(const int *)argument;
    const size_t count = (size_t)n * (size_t)n;
    float *A = bench_alloc(count * sizeof *A), *B = bench_alloc(count * sizeof *B), *C = bench_alloc(count * sizeof *C);
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
        snprintf(r->core, sizeof r->core, "%s", openblas_get_corename());
    }
    free(A);
    free(B);
    free(C);
}

/* The OpenBLAS kernel that is the yardstick of an instruction set: for avx2
 * on a machine that has AVX-512, OpenBLAS's Haswell kernels (AVX2 and FMA),
 * which is what it runs on an AVX2 machine; for avx512 (which builtin:cpu
 * runs only with AVX512-BF16), its Cooperlake kernels (AVX-512 with BF16),
 * unless OPENBLAS_CORETYPE names one: OpenBLAS 0.3.21 does not recognise
 * every AVX-512 CPU by its CPUID (a Sapphire Rapids class Xeon in a VM was
 * taken for a Prescott, SSE3: 17.7 GFLOP/s against 69.4 with Cooperlake's),
 * and a yardstick that slow would pass any kernel. NULL: as chosen. */
static const char *anchor_coretype(const char *isa)
{
    if (strcmp(isa, "avx2") == 0 && lacs_cpu_isa_supported("avx512"))
        return "Haswell";
    if (strcmp(isa, "avx512") == 0 && !getenv("OPENBLAS_CORETYPE"))
        return "Cooperlake";
    return NULL;
}

/* The sgemm anchor under a given OPENBLAS_CORETYPE: OpenBLAS reads it once,
 * when it loads, so the child executes this program afresh
 * (`lacs-bench --sgemm-anchor-child FD N`), which runs sgemm_anchor_job and
 * writes its result to the pipe FD. */
static void run_sgemm_anchor(int n, const char *coretype, unsigned limit_s, child_result *result)
{
    double rss;
    if (!coretype) {
        run_in_child(sgemm_anchor_job, &n, NULL, limit_s, result, &rss);
        return;
    }
    memset(result, 0, sizeof *result);
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
        char fd_text[16], n_text[16];
        snprintf(fd_text, sizeof fd_text, "%d", fds[1]);
        snprintf(n_text, sizeof n_text, "%d", n);
        setenv("OPENBLAS_CORETYPE", coretype, 1);
        execl("/proc/self/exe", "lacs-bench", "--sgemm-anchor-child", fd_text, n_text, (char *)NULL);
        _exit(4);
    }
    close(fds[1]);
    collect_child(pid, fds[0], limit_s, result, &rss);
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

/* A stream copy of `bytes` on lacs_cpu_threads() threads (builtin:cpu's),
 * one part per thread: open (allocated, touched, one warm-up pass), then
 * passes, each returning its seconds. */
static int copy_open(copy_context *c, size_t bytes)
{
    char *source = bench_alloc(bytes), *destination = bench_alloc(bytes);
    if (!source || !destination) {
        free(source);
        free(destination);
        return -1;
    }
    memset(source, 1, bytes);
    memset(destination, 0, bytes);
    *c = (copy_context){source, destination, bytes, lacs_cpu_threads()};
    lacs_cpu_parallel_for(c->parts, (int)c->parts, copy_part, c);
    return 0;
}

static double copy_pass(copy_context *c)
{
    const double t0 = now_seconds();
    lacs_cpu_parallel_for(c->parts, (int)c->parts, copy_part, c);
    return now_seconds() - t0;
}

static void copy_close(copy_context *c)
{
    free((void *)c->source);
    free(c->destination);
}

/* The copy anchor: COPY_BYTES, best of COPY_PASSES, counting the bytes read
 * and written. */
static void copy_job(const void *argument, child_result *r)
{
    (void)argument;
    copy_context c;
    if (copy_open(&c, COPY_BYTES) != 0) {
        r->status = STATUS_ERROR;
        set_message(r, "out of memory");
        return;
    }
    double best = INFINITY;
    for (int pass = 0; pass < COPY_PASSES; pass++)
        best = fmin(best, copy_pass(&c));
    r->seconds = best;
    r->value = 2.0 * (double)COPY_BYTES / best / 1e9;
    r->threads = (int)c.parts;
    copy_close(&c);
}

/* builtin:cpu's own GEMM (the table of LACS_ISA, set in the child) at one
 * shape, every thread computing its own products: the rate its algorithms'
 * products can reach, the roofline of the prefill and attention targets. */
typedef struct {
    int64_t m, n, k;
    int bf16;
} gemm_rate_request;

typedef struct {
    const gemm_rate_request *shape;
    const lacs_cpu_gemm *gemm;
    float *A, *B, *C;
    uint16_t *A16, *Bp;
    int64_t calls_per_item;
    int threads;
} gemm_rate_context;

static double gemm_rate_flops_per_call(const gemm_rate_request *s)
{
    return 2.0 * (double)s->m * (double)s->n * (double)s->k;
}

static void gemm_rate_item(void *context, int64_t item, int thread)
{
    (void)item;
    const gemm_rate_context *g = context;
    const gemm_rate_request *s = g->shape;
    const int64_t a_size = s->m * s->k, c_size = s->m * s->n, b_size = (int64_t)lacs_cpu_packed_bf16_size(s->k, s->n);
    for (int64_t call = 0; call < g->calls_per_item; call++) {
        if (s->bf16)
            g->gemm->bgemm(s->m, s->n, s->k, g->A16 + thread * a_size, s->k, g->Bp + thread * b_size,
                           g->C + thread * c_size, s->n, 0);
        else
            g->gemm->sgemm(s->m, s->n, s->k, g->A + thread * a_size, s->k, g->B + thread * s->k * s->n, s->n,
                           g->C + thread * c_size, s->n, 0);
    }
}

/* builtin:cpu's GEMM at one shape on every thread: open (operands drawn, one
 * warm-up round), then rounds of about 20 ms, each returning its seconds
 * (flops_per_round flops). */
static int gemm_rate_open(gemm_rate_context *g, const gemm_rate_request *s, int threads)
{
    const char *isa = lacs_cpu_isa_name();
    const lacs_cpu_isa which = isa && strcmp(isa, "avx512") == 0 ? LACS_ISA_AVX512
                               : isa && strcmp(isa, "avx2") == 0  ? LACS_ISA_AVX2
                                                                  : LACS_ISA_SCALAR;
    const size_t a_size = (size_t)(s->m * s->k), b_size = (size_t)(s->k * s->n), c_size = (size_t)(s->m * s->n);
    *g = (gemm_rate_context){s, lacs_cpu_gemm_for(which), bench_alloc(a_size * threads * sizeof(float)),
                             bench_alloc(b_size * threads * sizeof(float)),
                             bench_alloc(c_size * threads * sizeof(float)),
                             bench_alloc(a_size * threads * sizeof(uint16_t)),
                             bench_alloc(lacs_cpu_packed_bf16_size(s->k, s->n) * threads * sizeof(uint16_t)), 1,
                             threads};
    uint16_t *B16 = malloc(b_size * sizeof *B16);
    if (!g->A || !g->B || !g->C || !g->A16 || !g->Bp || !B16) {
        free(B16);
        return -1;
    }
    lacs_rng rng = lacs_rng_stream(BENCH_SEED, "gemm_rate");
    for (size_t i = 0; i < a_size * threads; i++) {
        g->A[i] = (float)lacs_rng_normal12(&rng);
        g->A16[i] = lacs_cpu_f32_to_bf16(g->A[i]);
    }
    for (size_t i = 0; i < b_size * threads; i++)
        g->B[i] = (float)lacs_rng_normal12(&rng);
    for (int t = 0; t < threads; t++) {
        for (size_t i = 0; i < b_size; i++)
            B16[i] = lacs_cpu_f32_to_bf16(g->B[t * b_size + i]);
        lacs_cpu_pack_bf16(s->k, s->n, B16, s->n, g->Bp + t * lacs_cpu_packed_bf16_size(s->k, s->n));
    }
    free(B16);
    /* calls per item so that one round (an item per thread) lasts about 20 ms at 50 GFLOP/s per thread */
    g->calls_per_item = (int64_t)(20e-3 * 50e9 / gemm_rate_flops_per_call(s)) + 1;
    lacs_cpu_parallel_for(threads, threads, gemm_rate_item, g); /* warm-up */
    return 0;
}

static double gemm_rate_round(gemm_rate_context *g)
{
    const double t0 = now_seconds();
    lacs_cpu_parallel_for(g->threads, g->threads, gemm_rate_item, g);
    return now_seconds() - t0;
}

static double gemm_rate_gflops(const gemm_rate_context *g, double seconds)
{
    return gemm_rate_flops_per_call(g->shape) * (double)g->calls_per_item * g->threads / seconds / 1e9;
}

static void gemm_rate_close(gemm_rate_context *g)
{
    free(g->A);
    free(g->B);
    free(g->C);
    free(g->A16);
    free(g->Bp);
}

/* The GEMM anchors: best of 7 rounds. */
static void gemm_rate_job(const void *argument, child_result *r)
{
    gemm_rate_context g;
    const int threads = lacs_cpu_threads();
    if (gemm_rate_open(&g, argument, threads) != 0) {
        r->status = STATUS_ERROR;
        set_message(r, "out of memory");
    } else {
        double best = INFINITY;
        for (int pass = 0; pass < 7; pass++)
            best = fmin(best, gemm_rate_round(&g));
        r->seconds = best;
        r->value = gemm_rate_gflops(&g, best);
        r->threads = threads;
    }
    gemm_rate_close(&g);
}

/* The anchors of one instruction set: OpenBLAS's best round, and builtin:cpu's as that times the median over the
 * rounds of their quotient to OpenBLAS's in the same round (main: the quotients are what the ratios and bounds
 * use, and a round measures both in the same spell of the machine's load). */
typedef struct {
    const char *isa;
    double sgemm_gflops;       /* OpenBLAS, the set's yardstick */
    double chunk_gflops;       /* builtin:cpu sgemm at the chunk algorithm's state product, all threads */
    double chunk_bf16_gflops;  /* the same with bgemm (bf16 operands) */
    double block_gflops;       /* builtin:cpu sgemm at the attention blocks' logits product */
} isa_anchors;

typedef struct {
    double copy_gb_per_s;
    isa_anchors per_isa[MAX_ISAS];
} anchors;

/* The products the rooflines are measured at: for the recurrent family, a
 * product of the chunk algorithm's size (its state product [Kd; Qd] S is
 * 2C x V x K = 64 x 128 x 128 at C = 32, its state update 128 x 128 x 32),
 * 128 x 128 x 128, in fp32 and bf16; for the attention forms the blocks'
 * logits (128 x 128 x d). */
static const gemm_rate_request chunk_shape = {128, 128, 128, 0}, chunk_bf16_shape = {128, 128, 128, 1},
                               block_shape = {128, 128, 64, 0};

/* ---- builtin:cpu ---- */

/* The anchor measured beside a configuration's calls, in the same child,
 * alternating with them: on a shared machine the load changes between the
 * run's anchors and a line, and a ratio to an anchor taken minutes earlier
 * measures the load as much as the kernel. Prefill lines: builtin:cpu's GEMM
 * at the anchor's shape (chunk or block); decode and the norms: the stream
 * copy (64 MiB into 64 MiB, beyond the caches), their ratios' anchor, and
 * before it the GEMM at the chunk shape, which only says how fast the cores
 * ran (its median pass: run_config's core drift): on the EPYC of optimized/cpu/README.md
 * 8.2.17 the cores slowed in spells that the copy did not see, and DyT's
 * VJP on two threads followed the GEMM beside it (correlation -0.83 over
 * 3,224 alternations) far more than the copy (-0.48). */
#define BESIDE_ROUNDS 5
#define BESIDE_COPY_BYTES ((size_t)64 << 20)

typedef struct {
    int is_copy; /* then the GEMM too, for the core drift alone */
    copy_context copy;
    gemm_rate_context gemm;
    double best_seconds;
    double round_seconds[BESIDE_ROUNDS], gemm_round_seconds[BESIDE_ROUNDS];
    int rounds; /* the rounds measured since beside_open (round_seconds' and gemm_round_seconds' count) */
} beside_anchor;

static int beside_open(beside_anchor *b, const bench_config *c)
{
    memset(b, 0, sizeof *b);
    b->best_seconds = INFINITY;
    b->is_copy = c->mode != MODE_PREFILL;
    if (b->is_copy && copy_open(&b->copy, BESIDE_COPY_BYTES) != 0)
        return -1;
    return gemm_rate_open(&b->gemm,
                          !b->is_copy && family_of(c->op) == FAMILY_ATTENTION ? &block_shape : &chunk_shape,
                          lacs_cpu_threads());
}

static void beside_round(beside_anchor *b, int round)
{
    const double gemm_seconds = gemm_rate_round(&b->gemm);
    b->gemm_round_seconds[round] = gemm_seconds;
    b->rounds = round + 1 > b->rounds ? round + 1 : b->rounds;
    /* the copy last: the round's calls find the caches as the copy leaves them */
    b->round_seconds[round] = b->is_copy ? copy_pass(&b->copy) : gemm_seconds;
    b->best_seconds = fmin(b->best_seconds, b->round_seconds[round]);
}

/* GB/s of the copy, GFLOP/s of the GEMM, for a pass of `seconds`. */
static double beside_rate(const beside_anchor *b, double seconds)
{
    return b->is_copy ? 2.0 * (double)b->copy.bytes / seconds / 1e9 : gemm_rate_gflops(&b->gemm, seconds);
}

/* The best pass's. */
static double beside_value(const beside_anchor *b) { return beside_rate(b, b->best_seconds); }

static void beside_close(beside_anchor *b)
{
    if (b->is_copy)
        copy_close(&b->copy);
    gemm_rate_close(&b->gemm);
}

/* The median of n values (n <= 16), NaN for none. */
static double median_of(const double *values, int n)
{
    double sorted[16];
    if (n <= 0 || n > 16)
        return NAN;
    for (int i = 0; i < n; i++) { /* insertion sort */
        int j = i;
        for (; j > 0 && sorted[j - 1] > values[i]; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = values[i];
    }
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

/* The best of at least `repeats` calls, or of as many as add up to
 * MIN_TIMED_S when they are shorter (at most MAX_REPEATS), after a warm-up
 * call (untimed: first-touch page faults), in BESIDE_ROUNDS rounds, each
 * after a pass of the anchor beside (NULL: none). Returns the status;
 * *seconds, *repeats_done, and *per_beside: the median over the rounds of
 * 1 / (the round's best call x the round's anchor rate). A shared machine
 * moves between slower and faster spells that last from seconds to minutes
 * (this one by 0.7x, section "anchor" of bench/README.md): a call and the
 * anchor beside it in the same round see the same spell, and the median
 * drops a round that a change of spell cut in two. */
static int time_calls(const bench_config *c, tensor_set *s, int repeats, beside_anchor *beside, double *seconds,
                      int *repeats_done, double *per_beside)
{
    int rc = lacs_cpu_run(c->op, s->inputs, s->n_inputs, s->params, s->n_params, s->outputs, s->n_outputs);
    double best = INFINITY, matched[BESIDE_ROUNDS];
    int done = 0, rounds = 0;
    for (int round = 0; round < BESIDE_ROUNDS && rc == LACS_OK; round++) {
        if (beside)
            beside_round(beside, round);
        double total = 0, round_best = INFINITY;
        const int round_repeats = (repeats * (round + 1) + BESIDE_ROUNDS - 1) / BESIDE_ROUNDS - done;
        /* each round at least one call, and at most its share of MAX_REPEATS */
        for (int call = 0; rc == LACS_OK && call < MAX_REPEATS / BESIDE_ROUNDS &&
                           (call < round_repeats || call == 0 || total < MIN_TIMED_S / BESIDE_ROUNDS);
             call++) {
            const double t0 = now_seconds();
            rc = lacs_cpu_run(c->op, s->inputs, s->n_inputs, s->params, s->n_params, s->outputs, s->n_outputs);
            const double dt = now_seconds() - t0;
            best = dt < best ? dt : best;
            round_best = dt < round_best ? dt : round_best;
            total += dt;
            done++;
        }
        if (beside && rc == LACS_OK)
            matched[rounds++] = 1.0 / (round_best * beside_rate(beside, beside->round_seconds[round]));
    }
    *seconds = best;
    *repeats_done = done;
    if (per_beside)
        *per_beside = median_of(matched, rounds);
    return rc;
}

/* Whether configuration c's line also measures its tier against fp32 by alternate calls (alternate_job): the
 * bf16 tier of the recurrent family in prefill, whose summary target is its rate against fp32's. */
static int alternates_with_fp32(const bench_config *c)
{
    return c->bf16 && c->mode == MODE_PREFILL && family_of(c->op) == FAMILY_RECURRENT;
}

/* The bf16 tier's rate against fp32's in the same spell (r->value): ALTERNATE_PAIRS pairs of turns, one of
 * each tier on the same shape and the same seeds, adjacent in time, in the order bf16, fp32 then fp32, bf16
 * (neither always after the other), each turn ALTERNATE_CALLS calls of its tier, after a warm-up call of
 * each; fp32's best call over bf16's, the best call as every line takes it (the median of the quotients
 * counts the calls in a slow spell too, where the bf16 tier, with less of its time in products, slows the
 * more). A turn's first call finds the caches as the other tier's calls left them, its second as its own
 * left them, as a line's calls do, so that the best calls are taken as the lines take theirs. In a slow
 * spell the quotient itself is lower (gated_delta_rule avx512: 35.0 ms against 52.5, 1.50, where the
 * steady calls read 27.9-28.6 against 46-50): the rates are compared in the same spell, whichever it is.
 * The two lines' rates, each against its own anchor beside, can be a spell apart: on a machine
 * whose cores slow by a quarter in spells that the GEMM beside hardly sees (optimized/cpu/README.md 8.2.15),
 * a spell over one line alone moves their quotient by as much (8.2.16), and beside GEMMs at different drifts
 * the matched quotient strays from the lines' own times (8.2.17: avx2, 0.913 against 1.033). The
 * alternation itself costs neither tier anything (8.2.17). A child of its own, so that the line's peak RSS
 * stays its own tier's. */
static void alternate_job(const void *argument, child_result *r)
{
    const bench_config *c = argument;
    bench_config twin = *c;
    twin.bf16 = 0;
    tensor_set tiers[2]; /* [0] bf16, [1] fp32 */
    int rc = build_problem(c, c->T, &tiers[0]);
    if (rc == LACS_OK)
        rc = build_problem(&twin, c->T, &tiers[1]);
    else
        memset(&tiers[1], 0, sizeof tiers[1]);
    double best[2] = {INFINITY, INFINITY};
    /* the bf16 products' GEMM (the chunk_bgemm anchor's shape) before each pair: its median pass against the
     * run's anchor is the alternation's drift (run_config) */
    gemm_rate_context gemm;
    double gemm_seconds[ALTERNATE_PAIRS];
    int gemm_passes = 0;
    if (rc == LACS_OK && gemm_rate_open(&gemm, &chunk_bf16_shape, lacs_cpu_threads()) != 0) {
        gemm_rate_close(&gemm);
        rc = LACS_ERR_MEMORY;
    }
    const int gemm_opened = rc == LACS_OK;
    for (int tier = 0; tier < 2 && rc == LACS_OK; tier++) /* warm-up: first-touch page faults */
        rc = lacs_cpu_run(c->op, tiers[tier].inputs, tiers[tier].n_inputs, tiers[tier].params,
                          tiers[tier].n_params, tiers[tier].outputs, tiers[tier].n_outputs);
    for (int pair = 0; pair < ALTERNATE_PAIRS && rc == LACS_OK; pair++) {
        gemm_seconds[gemm_passes++] = gemm_rate_round(&gemm);
        for (int turn = 0; turn < 2 && rc == LACS_OK; turn++) {
            const int tier = pair % 2 ? 1 - turn : turn;
            tensor_set *t = &tiers[tier];
            for (int call = 0; call < ALTERNATE_CALLS && rc == LACS_OK; call++) {
                const double t0 = now_seconds();
                rc = lacs_cpu_run(c->op, t->inputs, t->n_inputs, t->params, t->n_params, t->outputs,
                                  t->n_outputs);
                const double seconds = now_seconds() - t0;
                best[tier] = seconds < best[tier] ? seconds : best[tier];
            }
        }
    }
    if (gemm_opened) {
        r->beside = gemm_rate_gflops(&gemm, median_of(gemm_seconds, gemm_passes));
        gemm_rate_close(&gemm);
    }
    free_problem(&tiers[0]);
    free_problem(&tiers[1]);
    if (rc != LACS_OK) {
        r->status = rc == LACS_UNSUPPORTED ? STATUS_UNSUPPORTED : STATUS_ERROR;
        set_message(r, rc == LACS_ERR_MEMORY ? "out of memory for the inputs" : lacs_last_error());
        return;
    }
    r->value = best[1] / best[0];
}

/* builtin:cpu on the configuration's inputs (under the LACS_ISA of the
 * child), alternating with its anchor beside; for the norms also on their
 * first rows, small enough for the caches: the op's compute rate, its
 * roofline when memory is not the limit. */
static void cpu_job(const void *argument, child_result *r)
{
    const bench_config *c = argument;
    tensor_set s;
    beside_anchor beside;
    int rc = build_problem(c, c->T, &s);
    if (rc == LACS_OK && beside_open(&beside, c) != 0) {
        beside_close(&beside);
        rc = LACS_ERR_MEMORY;
    }
    if (rc != LACS_OK) {
        r->status = STATUS_ERROR;
        set_message(r, rc == LACS_ERR_MEMORY ? "out of memory for the inputs" : lacs_last_error());
        free_problem(&s);
        return;
    }
    r->bytes = problem_bytes(&s);
    rc = time_calls(c, &s, c->repeats, &beside, &r->seconds, &r->repeats, &r->per_beside);
    /* the copy's lines: the GEMM's median pass over those rounds (GFLOP/s), their core drift; its best pass hid
     * a spell over most of them (optimized/cpu/README.md 8.2.17: DyT's VJP at 15.1 ms, against 10.4-11.0, beside a
     * best pass at 0.93 of the anchor) */
    r->core_beside = beside.is_copy && beside.rounds > 0
                         ? gemm_rate_gflops(&beside.gemm, median_of(beside.gemm_round_seconds, beside.rounds))
                         : NAN;
    free_problem(&s);
    if (rc == LACS_OK && c->mode == MODE_ELEMENTWISE) {
        const int threads = lacs_cpu_threads();
        const int64_t rows = NORM_IN_CACHE_BYTES / (c->K * (int64_t)sizeof(float));
        double seconds, per_beside = NAN;
        int repeats;
        char threads_text[16];
        snprintf(threads_text, sizeof threads_text, "%d", threads);
        setenv("LACS_THREADS", "1", 1); /* this child's: restored below (the copy beside keeps its threads) */
        rc = build_problem(c, rows > 0 ? rows : 1, &s);
        /* alternating with the copy beside too, so that the bound is matched as the line's ratio is (each round's
         * best call comes after the copy's pass has left the caches: the round's later calls find them warm) */
        if (rc == LACS_OK)
            rc = time_calls(c, &s, 20, &beside, &seconds, &repeats, &per_beside);
        setenv("LACS_THREADS", threads_text, 1);
        r->value = problem_bytes(&s) / seconds / 1e9 * threads;
        r->in_cache_per_copy = problem_bytes(&s) / 1e9 * per_beside * threads;
        free_problem(&s);
    }
    r->beside = beside_value(&beside);
    beside_close(&beside);
    if (rc == LACS_UNSUPPORTED) {
        r->status = STATUS_UNSUPPORTED;
    } else if (rc != LACS_OK) {
        r->status = STATUS_ERROR;
        set_message(r, lacs_last_error());
    }
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
        rc = lacs_reference_run(c->op, s.inputs, s.n_inputs, s.params, s.n_params, s.outputs, s.n_outputs, 0);
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
    switch (growth) {
    case GROWTH_CUBIC:
        return ratio * ratio * ratio;
    case GROWTH_QUADRATIC:
        return ratio * ratio;
    case GROWTH_LINEAR:
        return ratio;
    case GROWTH_NONE:
        break;
    }
    return 1;
}

/* The reference on the configuration's own shape when that should take less
 * than the budget; else on the longest prefix T_ref that should, and its time
 * scaled by the op's growth, (T / T_ref)^1, ^2 or ^3. From a calibration run
 * on 256 tokens, each step goes to the longest prefix (doubling, at most T)
 * whose time, estimated from the last run, fits the budget, and runs it. The
 * recurrences are linear to the percent, so one step reaches T_ref. The
 * matrix forms' T x T matrices leave the caches as T grows (PaTH's time grew
 * 14-fold from 256 to 512 tokens and 13-fold to 1024 on the development
 * machine, not 8-fold), so there each step is one doubling, estimated with
 * the last doubling's growth when that was steeper, and the scaling to T
 * understates the reference's time, that is, the speed-up. */
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
        if (growth != GROWTH_LINEAR) {
            /* one doubling, estimated by the growth of the last doubling where it was steeper */
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

/* ---- one configuration, one line per instruction set ---- */

typedef struct {
    child_status status;
    double time_s;
    double tokens_per_s;
    double ratio_vs_sgemm;
    double ratio_vs_bandwidth;
    double in_cache_ratio_vs_bandwidth; /* the norms: their compute roofline against the copy */
    double workspace_mb;                /* peak RSS less the inputs and outputs */
    double drift;                       /* the anchor beside the calls (best) / the run's anchor: for the reader */
    double per_beside;                  /* child_result's: the time of a call against its anchor beside */
    double vs_fp32_alternated;          /* the bf16 tier's recurrent prefill: alternate_job's (else NAN) */
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

static void run_config(const bench_config *c, const anchors *a, const options *opt, config_outcome *outcomes)
{
    const unsigned limit_s = opt->quick ? QUICK_CHILD_LIMIT_S : CHILD_LIMIT_S;
    child_result ref;
    double ref_rss_mb;
    const reference_request request = {c, opt->quick ? QUICK_REFERENCE_BUDGET_S : REFERENCE_BUDGET_S};
    run_in_child(reference_job, &request, NULL, limit_s, &ref, &ref_rss_mb);
    const double reference_s = ref.status == STATUS_OK ? ref.reference_scaled_seconds : NAN;
    const double flops = config_flops(c), algorithm_flops = config_algorithm_flops(c);

    for (int i = 0; i < opt->n_isas; i++) {
        /* the anchor measured beside the calls, against the run's: how the load moved since the anchors */
        const double run_anchor = c->mode != MODE_PREFILL                   ? a->copy_gb_per_s
                                  : family_of(c->op) == FAMILY_ATTENTION ? a->per_isa[i].block_gflops
                                                                         : a->per_isa[i].chunk_gflops;
        /* A line measured while the machine changed its speed (a drift far from 1) is measured again, up to
         * MEASUREMENTS_MAX times in all in a full run, and the measurement whose drift is nearest 1 is kept:
         * the rounds' matching does not follow a spell that starts or ends within a round, and on the EPYC of
         * optimized/cpu/README.md 8.2.13 lines at drift 0.50-0.53 read the bf16 tier's ratio at 1.85-1.95
         * where the steady runs read 1.31-1.47. */
        /* The lines against the copy have a second drift, the cores': the GEMM beside them against the run's
         * chunk_sgemm (beside_anchor). A measurement is steady when both are in range, and the one kept is
         * the one whose larger departure from 1 is the least. */
        const int has_core = c->mode != MODE_PREFILL && a->per_isa[i].chunk_gflops > 0;
        child_result cpu;
        double peak_rss_mb = NAN, drift = NAN, core_drift = NAN, departure = INFINITY;
        int measurements = 0;
        for (;;) {
            child_result attempt;
            double attempt_rss_mb;
            run_in_child(cpu_job, c, opt->isas[i], limit_s, &attempt, &attempt_rss_mb);
            const int attempt_ok = attempt.status == STATUS_OK;
            const double attempt_drift = attempt_ok ? attempt.beside / run_anchor : NAN;
            const double attempt_core_drift =
                attempt_ok && has_core ? attempt.core_beside / a->per_isa[i].chunk_gflops : NAN;
            const double attempt_departure =
                fmax(fabs(log(attempt_drift)), has_core ? fabs(log(attempt_core_drift)) : 0.0);
            if (++measurements == 1 || (attempt_ok && attempt_departure < departure)) {
                cpu = attempt;
                peak_rss_mb = attempt_rss_mb;
                drift = attempt_drift;
                core_drift = attempt_core_drift;
                departure = attempt_ok ? attempt_departure : INFINITY;
            }
            if (opt->quick || measurements == MEASUREMENTS_MAX || cpu.status != STATUS_OK ||
                (drift >= DRIFT_STEADY_LOW && drift <= DRIFT_STEADY_HIGH &&
                 (!has_core || (core_drift >= DRIFT_STEADY_LOW && core_drift <= DRIFT_STEADY_HIGH))))
                break;
        }
        const int ok = cpu.status == STATUS_OK;
        /* The alternation is measured again, as a line is, when its drift (the bf16 GEMM beside it against the
         * run's chunk_bgemm) leaves [ALTERNATED_DRIFT_LOW, DRIFT_STEADY_HIGH], and the measurement whose drift is
         * nearest 1 kept: the machine's slow spells slow the native bf16 products more than fp32's
         * (optimized/cpu/README.md 8.2.17), and alternations inside them read the tiers at 1.388-1.490 where the
         * lines' own calls a minute apart read 1.69-1.81 (8.2.18). */
        double vs_fp32_alternated = NAN, alternated_drift = NAN, alternated_departure = INFINITY;
        int alternations = 0;
        while (ok && alternates_with_fp32(c) && alternations < MEASUREMENTS_MAX) {
            child_result alternated;
            double alternated_rss_mb;
            run_in_child(alternate_job, c, opt->isas[i], limit_s, &alternated, &alternated_rss_mb);
            alternations++;
            if (alternated.status != STATUS_OK)
                break;
            const double attempt_drift = alternated.beside / a->per_isa[i].chunk_bf16_gflops;
            const double attempt_departure = isfinite(attempt_drift) ? fabs(log(attempt_drift)) : INFINITY;
            if (!isfinite(vs_fp32_alternated) || attempt_departure < alternated_departure) {
                vs_fp32_alternated = alternated.value;
                alternated_drift = attempt_drift;
                alternated_departure = attempt_departure;
            }
            if (opt->quick || (alternated_drift >= ALTERNATED_DRIFT_LOW && alternated_drift <= DRIFT_STEADY_HIGH))
                break;
        }
        const double time_s = ok ? cpu.seconds : NAN;
        const double gflops = flops / time_s / 1e9;
        const double gb_per_s = cpu.bytes > 0 ? cpu.bytes / time_s / 1e9 : NAN;
        const double beside = ok ? cpu.beside : NAN;
        const double per_beside = ok ? cpu.per_beside : NAN;
        config_outcome *outcome = &outcomes[i];
        /* the ratios: the call's rate against the anchor beside it, round by round (per_beside), times, for
         * sgemm, that anchor's against OpenBLAS's in the run's anchor rounds */
        *outcome = (config_outcome){cpu.status,
                                    time_s,
                                    (double)(c->B * c->T) / time_s,
                                    flops / 1e9 * per_beside * run_anchor / a->per_isa[i].sgemm_gflops,
                                    cpu.bytes / 1e9 * per_beside,
                                    ok && c->mode == MODE_ELEMENTWISE ? cpu.in_cache_per_copy : NAN,
                                    peak_rss_mb - cpu.bytes / (1 << 20),
                                    drift,
                                    per_beside,
                                    vs_fp32_alternated};

        printf("bench op=%s impl=builtin:cpu isa=%s tier=%s mode=%s B=%lld T=%lld H=%lld HV=%lld K=%lld V=%lld",
               c->op, opt->isas[i], c->bf16 ? "bf16" : "fp32", mode_names[c->mode], (long long)c->B,
               (long long)c->T, (long long)c->H, (long long)c->HV, (long long)c->K, (long long)c->V);
        if (c->bf16 && lacs_op_find(c->op) && lacs_op_find(c->op)->family == LACS_FAMILY_RECURRENT)
            printf(" bf16_products=%s", bf16_products_under(opt->isas[i]));
        print_field("time_ms", "%.3f", time_s * 1e3);
        print_field("tokens_per_s", "%.0f", outcome->tokens_per_s);
        print_field("gflops", "%.2f", gflops);
        if (strcmp(c->op, "path_attn") == 0) /* PaTH's own work beside the attention count */
            print_field("algorithm_gflops", "%.2f", algorithm_flops / time_s / 1e9);
        if (c->mode != MODE_PREFILL)
            print_field("gb_per_s", "%.2f", gb_per_s);
        if (c->mode == MODE_ELEMENTWISE)
            print_field("in_cache_gb_per_s", "%.2f", ok ? cpu.value : NAN);
        print_field(c->mode == MODE_PREFILL ? "gemm_beside_gflops" : "copy_beside_gb_per_s", "%.2f", beside);
        print_field("drift", "%.2f", drift);
        if (has_core) {
            print_field("core_beside_gflops", "%.2f", ok ? cpu.core_beside : NAN);
            print_field("core_drift", "%.2f", core_drift);
        }
        printf(" measurements=%d", measurements);
        print_field("peak_rss_mb", "%.1f", peak_rss_mb);
        print_field("io_mb", "%.1f", cpu.bytes > 0 ? cpu.bytes / (1 << 20) : NAN);
        print_field("repeats", "%.0f", ok ? (double)cpu.repeats : NAN);
        print_field("reference_ms", "%.1f", reference_s * 1e3);
        print_field("reference_T", "%.0f", ref.status == STATUS_OK ? (double)ref.reference_T : NAN);
        printf(" reference_scaled=%s",
               ref.status == STATUS_OK && ref.reference_T != c->T ? growth_names[config_growth(c)] : "none");
        if (c->mode != MODE_ELEMENTWISE)
            print_field("ratio_vs_sgemm", "%.3f", outcome->ratio_vs_sgemm);
        if (c->mode != MODE_PREFILL)
            print_field("ratio_vs_bandwidth", "%.3f", outcome->ratio_vs_bandwidth);
        if (alternates_with_fp32(c)) {
            print_field("vs_fp32_alternated", "%.3f", vs_fp32_alternated);
            print_field("alternated_drift", "%.2f", alternated_drift);
            printf(" alternations=%d", alternations);
        }
        print_field("ratio_vs_reference", "%.2f", reference_s / time_s);
        printf(" status=%s", status_names[cpu.status]);
        if (cpu.message[0])
            printf(" error=\"%s\"", cpu.message);
        if (ref.status != STATUS_OK)
            printf(" reference_status=%s reference_error=\"%s\"", status_names[ref.status], ref.message);
        printf("\n");
        fflush(stdout);
        if (ref.status != STATUS_OK) /* the reference failing is the bench's failure: count it as an error */
            outcome->status = outcome->status == STATUS_OK || outcome->status == STATUS_UNSUPPORTED
                                  ? STATUS_ERROR
                                  : outcome->status;
    }
}

/* ---- the summary of the targets ---- */


static const config_outcome *find_outcome(const bench_config *configs, config_outcome (*outcomes)[MAX_ISAS], int n,
                                          int isa, const char *op, int bf16, bench_mode mode, int64_t B, int64_t T)
{
    for (int i = 0; i < n; i++)
        if (strcmp(configs[i].op, op) == 0 && configs[i].bf16 == bf16 && configs[i].mode == mode &&
            (B < 0 || configs[i].B == B) && (T < 0 || configs[i].T == T))
            return &outcomes[i][isa];
    return NULL;
}

/* Why a target cannot be judged from this outcome, or NULL when it can. */
static const char *outcome_problem(const config_outcome *outcome)
{
    if (!outcome)
        return "not_run";
    return outcome->status == STATUS_OK ? NULL : status_names[outcome->status];
}

/* The summary's `target` lines by result, for its `tally` line. */
static struct {
    int pass, below, not_available;
} target_tally;

/* One `target` line: the measured value against the goal, PASS or BELOW
 * (with the measured bound that limits it, and what that bound is), or n/a
 * with why (not run, unsupported, ...). */
static void print_target(const char *isa, const char *what, const char *metric, double goal, double measured,
                         const char *why_not, double bound, const char *bound_is)
{
    printf("target isa=%s %s metric=%s goal=%.2f", isa, what, metric, goal);
    if (why_not || isnan(measured)) {
        printf(" measured=na result=n/a why=%s\n", why_not ? why_not : "not_measured");
        target_tally.not_available++;
        return;
    }
    printf(" measured=%.3f result=%s", measured, measured >= goal ? "PASS" : "BELOW");
    if (measured >= goal)
        target_tally.pass++;
    else
        target_tally.below++;
    if (measured < goal) {
        print_field("bound", "%.3f", bound);
        printf(" bound_is=%s", bound_is);
    }
    printf("\n");
}

static void print_summary(const bench_config *configs, config_outcome (*outcomes)[MAX_ISAS], int n,
                          const options *opt, const anchors *a)
{
    const int64_t prefill_T = opt->quick ? 256 : 4096, attention_T = opt->quick ? 256 : 4096;
    const int64_t long_T = opt->quick ? 256 : 16384, short_T = opt->quick ? 256 : 1024;
    char what[160];
    printf("summary (issue 21's targets, per instruction set; reports, not failures%s)\n",
           opt->quick ? "; --quick shapes" : "");
    for (int i = 0; i < opt->n_isas; i++) {
        const char *isa = opt->isas[i];
        if (strcmp(isa, "scalar") == 0) {
            printf("target isa=scalar result=n/a why=no_targets_for_the_scalar_set\n");
            target_tally.not_available++;
            continue;
        }
        const isa_anchors *ia = &a->per_isa[i];
        static const char *const recurrent_ops[] = {"delta_rule", "gated_delta_rule"};
        for (int o = 0; o < 2; o++) {
            const char *op = recurrent_ops[o];
            const config_outcome *fp32 = find_outcome(configs, outcomes, n, i, op, 0, MODE_PREFILL, 1, prefill_T);
            const config_outcome *bf16 = find_outcome(configs, outcomes, n, i, op, 1, MODE_PREFILL, 1, prefill_T);
            /* roofline: every product at builtin:cpu's own chunk-shape GEMM rate, nothing else costing time */
            const bench_config shape = {op, MODE_PREFILL, 0, 1, prefill_T, 16, 16, 128, 128, 1};
            const double flop_share = config_flops(&shape) / config_algorithm_flops(&shape);
            snprintf(what, sizeof what, "op=%s tier=fp32 mode=prefill T=%lld", op, (long long)prefill_T);
            print_target(isa, what, "ratio_vs_sgemm", GOAL_PREFILL_VS_SGEMM, fp32 ? fp32->ratio_vs_sgemm : NAN,
                         outcome_problem(fp32), flop_share * ia->chunk_gflops / ia->sgemm_gflops,
                         "recurrent_flops/algorithm_flops*chunk_gemm/sgemm");
            const char *why_not = outcome_problem(bf16);
            if (!why_not)
                why_not = outcome_problem(fp32);
            const int native_bf16 = strcmp(isa, "avx512") == 0;
            /* Amdahl's bound from the anchors: the fp32 run's share f of time in its products (their flops at
             * the chunk GEMM rate), those products sped up by s = bgemm / sgemm, the rest not at all; or 1,
             * the fp32 kernels on widened operands, where vdpbf16ps is the slower (lacs_cpu_bf16_products) */
            double bound = 1.0;
            if (native_bf16 && fp32 && fp32->status == STATUS_OK) {
                /* the products' time at the GEMM's rate beside, against the call's: flops x per_beside */
                const double share = fmin(1.0, config_algorithm_flops(&shape) / 1e9 * fp32->per_beside);
                bound = fmax(1.0, 1.0 / ((1.0 - share) + share * ia->chunk_gflops / ia->chunk_bf16_gflops));
            }
            snprintf(what, sizeof what, "op=%s tier=bf16 mode=prefill T=%lld", op, (long long)prefill_T);
            print_target(isa, what, "tokens_per_s_vs_fp32",
                         native_bf16 ? GOAL_BF16_VS_FP32_AVX512 : GOAL_BF16_VS_FP32_AVX2,
                         /* the same tokens: bf16's calls alternating with fp32's (alternate_job), or where that
                          * measurement failed, each line's calls against its anchor beside */
                         why_not                              ? NAN
                         : isfinite(bf16->vs_fp32_alternated) ? bf16->vs_fp32_alternated
                                                              : bf16->per_beside / fp32->per_beside,
                         why_not, bound,
                         native_bf16
                             ? "max(1,1/((1-f)+f*chunk_sgemm/chunk_bgemm)),f=fp32_products_time/fp32_time"
                             : "same_kernels");
        }
        for (int bf16 = 0; bf16 < 2; bf16++) {
            static const int64_t batches[] = {1, 16};
            /* B=1's state (1 MiB) stays in the caches: its rate is the step's compute roofline, the bound of
             * B=16's (16 MiB, from memory) */
            const config_outcome *in_cache =
                find_outcome(configs, outcomes, n, i, "gated_delta_rule", bf16, MODE_DECODE, 1, 1);
            for (int b = 0; b < 2; b++) {
                const config_outcome *decode =
                    find_outcome(configs, outcomes, n, i, "gated_delta_rule", bf16, MODE_DECODE, batches[b], 1);
                snprintf(what, sizeof what, "op=gated_delta_rule tier=%s mode=decode B=%lld", bf16 ? "bf16" : "fp32",
                         (long long)batches[b]);
                const int bounded = b > 0 && in_cache && in_cache->status == STATUS_OK;
                print_target(isa, what, "ratio_vs_bandwidth", GOAL_VS_BANDWIDTH,
                             decode ? decode->ratio_vs_bandwidth : NAN, outcome_problem(decode),
                             bounded ? fmin(1.0, in_cache->ratio_vs_bandwidth) : 1.0,
                             bounded ? "min(1,decode_B1_in_cache/copy)" : "copy");
            }
        }
        static const char *const norm_ops[] = {"dyt",     "dyt_vjp",     "dyisru",  "dyisru_vjp",
                                               "rmsnorm", "rmsnorm_vjp", "softcap", "softcap_vjp"};
        for (int o = 0; o < 8; o++)
            for (int tier = 0; tier < 2; tier++) {
                const config_outcome *norm =
                    find_outcome(configs, outcomes, n, i, norm_ops[o], tier, MODE_ELEMENTWISE, -1, -1);
                snprintf(what, sizeof what, "op=%s tier=%s mode=elementwise", norm_ops[o], tier ? "bf16" : "fp32");
                print_target(isa, what, "ratio_vs_bandwidth", GOAL_VS_BANDWIDTH, norm ? norm->ratio_vs_bandwidth : NAN,
                             outcome_problem(norm),
                             norm ? fmin(1.0, norm->in_cache_ratio_vs_bandwidth) : NAN, "min(1,in_cache/copy)");
            }
        static const char *const attention_ops[] = {"softmax_attn", "fox", "path_attn"};
        for (int o = 0; o < 3; o++)
            for (int tier = 0; tier < 2; tier++) {
                const config_outcome *att =
                    find_outcome(configs, outcomes, n, i, attention_ops[o], tier, MODE_PREFILL, -1, attention_T);
                const bench_config shape = {attention_ops[o], MODE_PREFILL, 0, 1, attention_T, 4, 4, 64, 64, 1};
                snprintf(what, sizeof what, "op=%s tier=%s mode=prefill T=%lld", attention_ops[o],
                         tier ? "bf16" : "fp32", (long long)attention_T);
                /* roofline: every product at builtin:cpu's block-shape GEMM rate, nothing else costing time */
                const double block_vs_sgemm = ia->block_gflops / ia->sgemm_gflops;
                const double attention_share = config_flops(&shape) / config_algorithm_flops(&shape);
                double bound = attention_share * block_vs_sgemm;
                const char *bound_is = "attention_flops/algorithm_flops*block_gemm/sgemm";
                const config_outcome *softmax =
                    o == 2 ? find_outcome(configs, outcomes, n, i, "softmax_attn", tier, MODE_PREFILL, -1, attention_T)
                           : NULL;
                if (softmax && softmax->status == STATUS_OK && softmax->ratio_vs_sgemm > 0) {
                    /* PaTH: its attention (the logits, the online softmax's exp, P V: softmax_attn's blocks and row
                     * kernels) at no more than softmax_attn's own rate in this run, and its transitions' work
                     * (algorithm_flops less attention_flops: products only) at the block GEMM's: time >= the
                     * two summed. The softmax's exp is what the products' roofline above leaves out */
                    const double with_softmax =
                        1.0 / (1.0 / softmax->ratio_vs_sgemm + (1.0 / attention_share - 1.0) / block_vs_sgemm);
                    if (with_softmax < bound) {
                        bound = with_softmax;
                        bound_is = "1/(1/softmax_attn+(algorithm_flops/attention_flops-1)*sgemm/block_gemm)";
                    }
                }
                print_target(isa, what, "ratio_vs_sgemm", GOAL_ATTENTION_VS_SGEMM, att ? att->ratio_vs_sgemm : NAN,
                             outcome_problem(att), bound, bound_is);
            }
        /* issue 20: the GDN backward against sgemm, its flops counted as 3x the forward's (18 K V per token and
         * head); roofline: every product of the chunked backward (its adjoint and its checkpoint passes,
         * lacs_cpu_algorithm_flops) at builtin:cpu's chunk-shape GEMM rate, nothing else costing time */
        for (int tier = 0; tier < 2; tier++) {
            const config_outcome *bwd =
                find_outcome(configs, outcomes, n, i, "gated_delta_rule_vjp", tier, MODE_PREFILL, 1, attention_T);
            const bench_config shape = {"gated_delta_rule_vjp", MODE_PREFILL, tier, 1, attention_T, 16, 16, 128, 128, 1};
            snprintf(what, sizeof what, "op=gated_delta_rule_vjp tier=%s mode=prefill T=%lld", tier ? "bf16" : "fp32",
                     (long long)attention_T);
            print_target(isa, what, "ratio_vs_sgemm", GOAL_BACKWARD_VS_SGEMM, bwd ? bwd->ratio_vs_sgemm : NAN,
                         outcome_problem(bwd),
                         config_flops(&shape) / config_algorithm_flops(&shape) * ia->chunk_gflops / ia->sgemm_gflops,
                         "backward_flops/algorithm_flops*chunk_gemm/sgemm");
        }
        /* O(state) memory: the recurrent family's workspace does not grow with T */
        for (int o = 0; o < 2 && long_T > short_T; o++) {
            const config_outcome *s = find_outcome(configs, outcomes, n, i, recurrent_ops[o], 0, MODE_PREFILL, 1, short_T);
            const config_outcome *l = find_outcome(configs, outcomes, n, i, recurrent_ops[o], 0, MODE_PREFILL, 1, long_T);
            const char *why_not = outcome_problem(s) ? outcome_problem(s) : outcome_problem(l);
            snprintf(what, sizeof what, "op=%s tier=fp32 mode=prefill T=%lld_vs_%lld", recurrent_ops[o],
                     (long long)long_T, (long long)short_T);
            /* PASS when the growth is within the slack: measured = slack - growth, goal 0 */
            print_target(isa, what, "workspace_slack_mb", 0.0,
                         why_not ? NAN : WORKSPACE_SLACK_MB - (l->workspace_mb - s->workspace_mb), why_not, NAN,
                         "workspace_grows_with_T");
        }
    }
    /* the count a run's report quotes ("68 of 68"), read from the lines above */
    printf("tally targets=%d pass=%d below=%d na=%d\n",
           target_tally.pass + target_tally.below + target_tally.not_available, target_tally.pass,
           target_tally.below, target_tally.not_available);
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

/* `lacs-bench --sgemm-anchor-child FD N`: the sgemm anchor, executed afresh
 * under the OPENBLAS_CORETYPE its parent set (run_sgemm_anchor). */
static int sgemm_anchor_child(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    const int fd = atoi(argv[2]), n = atoi(argv[3]);
    child_result r;
    memset(&r, 0, sizeof r);
    sgemm_anchor_job(&n, &r);
    return send_result(fd, &r) == 0 ? 0 : 3;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--sgemm-anchor-child") == 0)
        return sgemm_anchor_child(argc, argv);
    options opt;
    const int parsed = parse_options(argc, argv, &opt);
    if (parsed != 0)
        return parsed > 0 ? 0 : 2;
    const double started = now_seconds();
    if (!lacs_cpu_isa_name()) {
        fprintf(stderr, "lacs-bench: %s\n", lacs_last_error());
        return 2;
    }
    char model[256];
    cpu_model(model, sizeof model);
    printf("machine cpu=\"%s\" cores=%ld isas=", model, sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < opt.n_isas; i++)
        printf("%s%s", i ? "," : "", opt.isas[i]);
    double load[3] = {NAN, NAN, NAN};
    if (getloadavg(load, 3) != 3)
        load[0] = load[1] = load[2] = NAN;
    printf(" threads=%d run=%s loadavg=%.2f,%.2f,%.2f\n", lacs_cpu_threads(), opt.quick ? "quick" : "full", load[0],
           load[1], load[2]);

    /* The anchors first, each in its own child (OpenBLAS's thread pool dies with it). */
    const unsigned limit_s = opt.quick ? QUICK_CHILD_LIMIT_S : CHILD_LIMIT_S;
    anchors a;
    memset(&a, 0, sizeof a);
    int errors = 0;
    double rss;
    const int sgemm_n = opt.quick ? 512 : 2048;
    /* ANCHOR_ROUNDS rounds, each measuring every anchor once in turn. The ratios and bounds divide one anchor by
     * another (builtin:cpu's GEMM by OpenBLAS's); a shared machine moves between slower and faster spells lasting
     * seconds to minutes, so each quotient is taken within a round, and its median over the rounds kept (a round
     * that a change of spell cut in two is dropped); OpenBLAS's own figure is its best round. */
    typedef struct {
        const char *name;
        const gemm_rate_request *shape; /* NULL: OpenBLAS's sgemm */
    } anchor_kind;
    static const anchor_kind kinds[] = {{"sgemm", NULL},
                                        {"chunk_sgemm", &chunk_shape},
                                        {"chunk_bgemm", &chunk_bf16_shape},
                                        {"block_sgemm", &block_shape}};
    enum { N_KINDS = sizeof kinds / sizeof kinds[0] };
    static child_result measured[ANCHOR_ROUNDS][MAX_ISAS][N_KINDS], copies[ANCHOR_ROUNDS];
    for (int round = 0; round < ANCHOR_ROUNDS; round++) {
        for (int i = 0; i < opt.n_isas; i++)
            for (int k = 0; k < N_KINDS; k++) {
                if (kinds[k].shape)
                    run_in_child(gemm_rate_job, kinds[k].shape, opt.isas[i], limit_s, &measured[round][i][k], &rss);
                else
                    run_sgemm_anchor(sgemm_n, anchor_coretype(opt.isas[i]), limit_s, &measured[round][i][k]);
            }
        run_in_child(copy_job, NULL, NULL, limit_s, &copies[round], &rss);
    }
    for (int i = 0; i < opt.n_isas; i++) {
        isa_anchors *ia = &a.per_isa[i];
        ia->isa = opt.isas[i];
        double *const values[N_KINDS] = {&ia->sgemm_gflops, &ia->chunk_gflops, &ia->chunk_bf16_gflops,
                                         &ia->block_gflops};
        for (int k = 0; k < N_KINDS; k++) {
            /* the best round, its threads and kernel; a failure in any round is the anchor's */
            const child_result *kept = &measured[0][i][k];
            double quotients[ANCHOR_ROUNDS];
            for (int round = 0; round < ANCHOR_ROUNDS; round++) {
                const child_result *m = &measured[round][i][k], *openblas = &measured[round][i][0];
                if (kept->status == STATUS_OK && (m->status != STATUS_OK || m->value > kept->value))
                    kept = m;
                quotients[round] = m->status == STATUS_OK && openblas->status == STATUS_OK ? m->value / openblas->value
                                                                                           : NAN;
            }
            const double vs_sgemm = median_of(quotients, ANCHOR_ROUNDS);
            *values[k] = kept->status != STATUS_OK ? NAN : k == 0 ? kept->value : ia->sgemm_gflops * vs_sgemm;
            errors += kept->status != STATUS_OK;
            printf("anchor name=%s isa=%s", kinds[k].name, opt.isas[i]);
            if (kinds[k].shape)
                printf(" impl=builtin:cpu");
            print_field("gflops", "%.1f", kept->status == STATUS_OK ? kept->value : NAN);
            if (kinds[k].shape) {
                print_field("vs_sgemm", "%.3f", kept->status == STATUS_OK ? vs_sgemm : NAN);
                printf(" m=%lld n=%lld k=%lld threads=%d", (long long)kinds[k].shape->m,
                       (long long)kinds[k].shape->n, (long long)kinds[k].shape->k, kept->threads);
            } else
                printf(" n=%d threads=%d passes=%d openblas_core=%s", sgemm_n, kept->threads, SGEMM_PASSES,
                       kept->core[0] ? kept->core : "na");
            printf(" rounds=%d status=%s\n", ANCHOR_ROUNDS, status_names[kept->status]);
        }
    }
    child_result best_copy = copies[0];
    for (int round = 1; round < ANCHOR_ROUNDS; round++)
        if (best_copy.status == STATUS_OK &&
            (copies[round].status != STATUS_OK || copies[round].value > best_copy.value))
            best_copy = copies[round];
    a.copy_gb_per_s = best_copy.status == STATUS_OK ? best_copy.value : NAN;
    errors += best_copy.status != STATUS_OK;
    printf("anchor name=copy");
    print_field("gb_per_s", "%.2f", a.copy_gb_per_s);
    printf(" mib=%zu threads=%d passes=%d rounds=%d status=%s\n", COPY_BYTES >> 20, best_copy.threads, COPY_PASSES,
           ANCHOR_ROUNDS, status_names[best_copy.status]);
    fflush(stdout);

    static bench_config configs[MAX_CONFIGS];
    static config_outcome outcomes[MAX_CONFIGS][MAX_ISAS];
    const int n = build_configs(&opt, configs);
    for (int i = 0; i < n; i++) {
        run_config(&configs[i], &a, &opt, outcomes[i]);
        for (int k = 0; k < opt.n_isas; k++)
            if (outcomes[i][k].status == STATUS_ERROR || outcomes[i][k].status == STATUS_TIMEOUT)
                errors++;
    }
    print_summary(configs, outcomes, n, &opt, &a);
    if (getloadavg(load, 3) != 3)
        load[0] = load[1] = load[2] = NAN;
    printf("done wall_s=%.1f errors=%d loadavg=%.2f,%.2f,%.2f\n", now_seconds() - started, errors, load[0], load[1],
           load[2]);
    return errors ? 1 : 0;
}
