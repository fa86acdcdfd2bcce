/* builtin:cpu, the norm family (README.md): rmsnorm (N2), dyt (N1), dyisru
 * (N5), softcap (N6), l2norm (SPEC.md 3) and their VJPs (SPEC.md 4.18).
 *
 * Read top to bottom: the kernel table of the chosen instruction set, the
 * parameters and their checks (the reference's domains and messages), the
 * split of the rows into blocks, the element-wise ops (blocks run on
 * threads, per-block sums reduced in block order), the row ops (rmsnorm,
 * l2norm: each row's sum of squares in double, then one pass that writes the
 * row), and lacs_cpu_norm.
 *
 * Determinism: the blocks depend only on (rows, dim), never on the number of
 * threads; each block's sums are its own, and they are added in block order.
 * So every output is the same bit for bit whatever LACS_THREADS is (for one
 * instruction set).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "norms.h"

static const lacs_cpu_norm_kernels *kernels_for(lacs_cpu_isa isa)
{
    switch (isa) {
    case LACS_ISA_AVX512:
        return &lacs_cpu_norm_kernels_avx512;
    case LACS_ISA_AVX2:
        return &lacs_cpu_norm_kernels_avx2;
    case LACS_ISA_SCALAR:
        break;
    }
    return &lacs_cpu_norm_kernels_scalar;
}

/* ---- parameters ---- */

/* The value of a [1] input (alpha, C), F32 or BF16. */
static double scalar_input(const lacs_tensor *t)
{
    if (t->dtype == LACS_BF16)
        return lacs_cpu_bf16_to_f32(*(const uint16_t *)t->data);
    return *(const float *)t->data;
}

/* dim copies of `value` (lacs_cpu_scratch_alloc'd; *oom set when out of memory). */
static float *constant_columns(int64_t dim, float value, int *oom)
{
    float *values = lacs_cpu_scratch_alloc((size_t)(dim > 0 ? dim : 1) * sizeof *values);
    if (!values) {
        *oom = 1;
        return NULL;
    }
    for (int64_t i = 0; i < dim; i++)
        values[i] = value;
    return values;
}

/* A per-column input (weight, bias) as dim fp32 values; `absent` in every
 * column when the call has none: 1 for a weight and -0 for a bias, the
 * identities of * and + for every value (+0 would turn -0 into +0). Given
 * back with lacs_cpu_scratch_free. */
static float *column_values(const lacs_cpu_call *c, const char *name, int64_t dim, float absent, int *oom)
{
    if (lacs_cpu_input(c, name))
        return lacs_cpu_input_f32(c, name, oom);
    return constant_columns(dim, absent, oom);
}

/* The reference's checks of the parameters (reference/norms.c,
 * reference/preprocess.c; SPEC.md 4.14-4.18 "Errors"), with its messages. */
static int check_parameter(const lacs_cpu_call *c, double value, int convention)
{
    const char *op = c->op;
    if (!strcmp(op, "rmsnorm") || !strcmp(op, "rmsnorm_vjp")) {
        if (!(value >= 0) || isinf(value))
            return lacs_cpu_error(LACS_ERR_PARAM, op, "eps = %g must be finite and >= 0", value);
    } else if (!strcmp(op, "dyt") || !strcmp(op, "dyt_vjp")) {
        if (!isfinite(value))
            return lacs_cpu_error(LACS_ERR_PARAM, op, "alpha = %g must be finite", value);
    } else if (!strcmp(op, "dyisru") || !strcmp(op, "dyisru_vjp")) {
        if (!(value >= 0) || isinf(value))
            return lacs_cpu_error(LACS_ERR_PARAM, op, "C = %g must be finite and >= 0", value);
    } else if (!strcmp(op, "softcap") || !strcmp(op, "softcap_vjp")) {
        if (!(value > 0) || isinf(value))
            return lacs_cpu_error(LACS_ERR_PARAM, op, "cap = %g must satisfy 0 < cap < inf", value);
    } else {
        if (!(value >= 0))
            return lacs_cpu_error(LACS_ERR_PARAM, op, "eps = %g must be >= 0", value);
        if (convention != 0 && convention != 1)
            return lacs_cpu_error(LACS_ERR_PARAM, op, "unknown convention %d", convention);
    }
    return LACS_OK;
}

/* ---- blocks of rows ---- */

/* A block holds at least LACS_NORM_BLOCK_ELEMENTS elements (whole rows), so
 * that a block's work (tens of microseconds) dwarfs handing it to a thread
 * and its column sums (dweight, dbias: dim doubles each, zeroed, then added
 * into the total) stay small next to its rows: with 16384 (4 rows of 4096)
 * they were as many bytes as half the block's input, and `dyt_vjp` bf16 on
 * 64 x 4096 (in cache) took 1.64 ns an element under avx2, 1.03 with 65536
 * (16 rows; one thread, best of 400 calls, README.md section 6). At most
 * LACS_NORM_MAX_BLOCKS blocks: 64 keep up to 16 threads busy. */
#define LACS_NORM_BLOCK_ELEMENTS 65536
#define LACS_NORM_MAX_BLOCKS 64

typedef struct {
    int64_t rows, rows_per_block, n_blocks;
} row_blocks;

static row_blocks split_rows(int64_t rows, int64_t dim)
{
    row_blocks b = {.rows = rows};
    b.rows_per_block = (LACS_NORM_BLOCK_ELEMENTS + dim - 1) / dim;
    if (b.rows_per_block < 1)
        b.rows_per_block = 1;
    if ((rows + b.rows_per_block - 1) / b.rows_per_block > LACS_NORM_MAX_BLOCKS)
        b.rows_per_block = (rows + LACS_NORM_MAX_BLOCKS - 1) / LACS_NORM_MAX_BLOCKS;
    b.n_blocks = (rows + b.rows_per_block - 1) / b.rows_per_block;
    return b;
}

/* The first row and the number of rows of block `item`. */
static int64_t block_rows(const row_blocks *b, int64_t item, int64_t *first)
{
    *first = item * b->rows_per_block;
    const int64_t left = b->rows - *first;
    return left < b->rows_per_block ? left : b->rows_per_block;
}

static const void *row_pointer(const void *p, int bf16, int64_t element)
{
    return p ? (const char *)p + element * (bf16 ? 2 : 4) : NULL;
}

/* ---- the element-wise ops: DyT, DyISRU, softcap and their VJPs ---- */

typedef struct {
    void (*kernel)(lacs_cpu_norm_block *b);
    lacs_cpu_norm_block whole; /* the whole call: rows, pointers at row 0 */
    row_blocks blocks;
    double *column_sums_weight; /* [n_blocks][dim] or NULL */
    double *column_sums_bias;   /* [n_blocks][dim] or NULL */
    double *param_sums;         /* [n_blocks] */
} elementwise_job;

static void run_elementwise_block(void *context, int64_t item, int thread)
{
    (void)thread;
    elementwise_job *job = context;
    const int64_t dim = job->whole.dim;
    int64_t first;
    lacs_cpu_norm_block b = job->whole;
    b.rows = block_rows(&job->blocks, item, &first);
    b.x = row_pointer(b.x, b.bf16, first * dim);
    b.dy = row_pointer(b.dy, b.bf16, first * dim);
    b.out = b.out + first * dim;
    b.sum_weight = job->column_sums_weight ? job->column_sums_weight + item * dim : NULL;
    b.sum_bias = job->column_sums_bias ? job->column_sums_bias + item * dim : NULL;
    b.sum_param = 0;
    job->kernel(&b);
    job->param_sums[item] = b.sum_param;
}

/* out[c] = the sum over blocks, in block order, of sums[block][c] (double),
 * or of float_sums[block][c] (binary32, rmsnorm_vjp's; sums NULL), in double. The
 * blocks' rows are added one after the other into a row of totals (read
 * along the memory, not down its columns: a column's elements are dim
 * doubles apart, the same cache set for dim a power of two, and walking
 * them took 40 % of a 4 MiB VJP); each column's order is the same. */
static int reduce_columns(const double *sums, const float *float_sums, int64_t n_blocks, int64_t dim, float *out)
{
    double *total = malloc((size_t)(dim > 0 ? dim : 1) * sizeof *total);
    if (!total)
        return -1;
    for (int64_t col = 0; col < dim; col++)
        total[col] = 0;
    for (int64_t block = 0; block < n_blocks; block++)
        for (int64_t col = 0; col < dim; col++)
            total[col] += sums ? sums[block * dim + col] : (double)float_sums[block * dim + col];
    for (int64_t col = 0; col < dim; col++)
        out[col] = (float)total[col];
    free(total);
    return 0;
}

static int run_elementwise(const lacs_cpu_call *c, const lacs_cpu_norm_kernels *k, int64_t rows, int64_t dim)
{
    const char *op = c->op;
    const int vjp = strstr(op, "_vjp") != NULL;
    const int is_softcap = strncmp(op, "softcap", 7) == 0, is_dyt = strncmp(op, "dyt", 3) == 0;

    double param;
    if (is_softcap)
        param = lacs_cpu_param(c, "cap", 0);
    else
        param = scalar_input(lacs_cpu_input(c, is_dyt ? "alpha" : "C"));
    int rc = check_parameter(c, param, 0);
    if (rc != LACS_OK)
        return rc;
    /* The binary32 softcap kernels need cap and x / cap in fp32's range
     * (norms_vector.h); a cap outside [2^-100, 2^100] takes the double ones. */
    if (is_softcap && (param < 0x1p-100 || param > 0x1p100))
        k = &lacs_cpu_norm_kernels_scalar;

    lacs_tensor *main_out = lacs_cpu_output(c, vjp ? "dx" : "y");
    lacs_tensor *dweight = lacs_cpu_output(c, "dweight"), *dbias = lacs_cpu_output(c, "dbias");
    lacs_tensor *dparam = lacs_cpu_output(c, is_softcap ? "dcap" : is_dyt ? "dalpha" : "dC");

    /* softcap acts on rows * dim elements as one flat array: rows of 1. */
    const int64_t block_dim = is_softcap ? 1 : dim, block_count = is_softcap ? rows * dim : rows;
    const row_blocks blocks = split_rows(block_count, block_dim);
    int oom = 0;
    float *weight = column_values(c, "weight", dim, 1.0f, &oom);
    float *bias = column_values(c, "bias", dim, -0.0f, &oom);
    float *scratch = NULL, *dyt_table = NULL;
    if (!main_out)
        scratch = lacs_cpu_scratch_alloc((size_t)(rows * dim > 0 ? rows * dim : 1) * sizeof(float));
    double *param_sums = calloc((size_t)(blocks.n_blocks > 0 ? blocks.n_blocks : 1), sizeof(double));
    /* the blocks' column sums (megabytes: kept between calls, cpu.h) */
    double *column_sums_weight = NULL, *column_sums_bias = NULL;
    const size_t column_sums_size = (size_t)(blocks.n_blocks > 0 ? blocks.n_blocks : 1) * (size_t)dim;
    if (vjp && dweight)
        column_sums_weight = lacs_cpu_scratch_calloc(column_sums_size * sizeof(double));
    if (vjp && dbias)
        column_sums_bias = lacs_cpu_scratch_calloc(column_sums_size * sizeof(double));
    if (oom || (!main_out && !scratch) || !param_sums || (vjp && dweight && !column_sums_weight) ||
        (vjp && dbias && !column_sums_bias)) {
        rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory");
        goto done;
    }

    void (*kernel)(lacs_cpu_norm_block *) = is_softcap ? (vjp ? k->softcap_vjp : k->softcap)
                                            : is_dyt   ? (vjp ? k->dyt_vjp : k->dyt)
                                                       : (vjp ? k->dyisru_vjp : k->dyisru);
    /* DyT and its VJP in the bf16 tier: the table for this alpha, where the kernels have one and the call is
     * large enough to pay for it (norms.h); NULL otherwise, or without the memory (the kernels compute then). */
    void (*fill_dyt_table)(double, float *) = !is_dyt || !c->bf16 ? NULL : vjp ? k->dyt_vjp_table : k->dyt_table;
    if (fill_dyt_table && (double)rows * (double)dim >= LACS_CPU_DYT_TABLE_ELEMENTS) {
        dyt_table = malloc((vjp ? LACS_CPU_DYT_VJP_TABLE_FLOATS : LACS_CPU_DYT_TABLE_MAGNITUDES) * sizeof(float));
        if (dyt_table)
            fill_dyt_table(param, dyt_table);
    }
    /* Outputs larger than the caches are written with non-temporal stores (no
     * read of each line before it is written), but DyT's VJP, and the VJPs in
     * the bf16 tier: their strips' bursts of non-temporal stores held the core
     * longer than the reads for ownership took, which the kernels' loops
     * start a row (or 4 KiB) ahead (4096 x 4096, two threads, on the Xeon of
     * optimized/cpu/README.md 8.2.6: DyT's VJP avx2 fp32 15.3 -> 12.5 ms, bf16
     * 12.3 -> 10.9, avx512 bf16 10.5 -> 8.6, fp32 9.7 -> 10.2; DyISRU's and
     * softcap's VJPs in bf16, README.md section 6). With DyT's table too:
     * non-temporal stores straight from the loop were no faster there. On AMD's cores DyT's and DyISRU's VJPs
     * stream all the same: on the EPYC of README.md section 8.2.13 DyT's fp32 ran 10-15 % faster so (4096 x
     * 4096, two threads: avx2 12.9 -> 11.1 ms, avx512 11.5 -> 10.1, medians of 30 alternate calls); in bf16
     * (8.2.19, pairs of alternate calls) DyT's 0.96 of the time under both instruction sets, DyISRU's 0.86
     * (avx512) and 0.92 (avx2), where softcap's took 1.04 and 1.12: its bf16 VJP does not. */
    const int stream_vjp_on_amd = c->amd && !(is_softcap && c->bf16);
    const int stream = main_out && !(vjp && !stream_vjp_on_amd && (is_dyt || c->bf16)) &&
                       (double)rows * (double)dim * sizeof(float) >= LACS_CPU_STREAM_BYTES;
    elementwise_job job = {
        .kernel = kernel,
        .whole = {.x = lacs_cpu_input(c, "x")->data,
                  .dy = vjp ? lacs_cpu_input(c, "dy")->data : NULL,
                  .bf16 = c->bf16,
                  .rows = block_count,
                  .dim = block_dim,
                  .param = param,
                  .weight = weight,
                  .bias = bias,
                  .out = main_out ? main_out->data : scratch,
                  .stream = stream,
                  .dyt_table = dyt_table},
        .blocks = blocks,
        .column_sums_weight = column_sums_weight,
        .column_sums_bias = column_sums_bias,
        .param_sums = param_sums,
    };
    lacs_cpu_parallel_for(c->threads, blocks.n_blocks, run_elementwise_block, &job);

    if (vjp) {
        if ((dweight && reduce_columns(column_sums_weight, NULL, blocks.n_blocks, dim, dweight->data) != 0) ||
            (dbias && reduce_columns(column_sums_bias, NULL, blocks.n_blocks, dim, dbias->data) != 0)) {
            rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory");
            goto done;
        }
        if (dparam) {
            double total = 0;
            for (int64_t block = 0; block < blocks.n_blocks; block++)
                total += param_sums[block];
            *(float *)dparam->data = (float)total;
        }
    }
done:
    lacs_cpu_scratch_free(weight);
    lacs_cpu_scratch_free(bias);
    lacs_cpu_scratch_free(scratch);
    free(dyt_table);
    free(param_sums);
    lacs_cpu_scratch_free(column_sums_weight);
    lacs_cpu_scratch_free(column_sums_bias);
    return rc;
}

/* ---- the row ops: rmsnorm, l2norm and their VJPs ---- */

typedef enum { ROW_RMSNORM, ROW_RMSNORM_VJP, ROW_L2NORM, ROW_L2NORM_VJP } row_op;

typedef struct {
    const lacs_cpu_norm_kernels *k;
    row_op op;
    const void *x, *dy;
    int bf16;
    int64_t dim;
    double eps;
    int max_eps; /* l2norm's convention: 1 for max(||x||, eps), 0 for sqrt(sum x^2 + eps) */
    const float *weight, *ones;
    float *out;
    float *column_sums; /* rmsnorm_vjp's dweight: [n_blocks][dim] binary32 sums over a block's rows, or NULL */
    float max_abs_weight; /* the largest |weight| (1 without) */
    int weight_of_8_bits; /* every weight has at most 8 significant bits (bf16, or none): see exact_products */
    row_blocks blocks;
    int stream; /* out larger than the caches: written with non-temporal stores */
} row_job;

static void fill(float *row, int64_t n, float value)
{
    for (int64_t i = 0; i < n; i++)
        row[i] = value;
}

/* Whether a forward row may be scaled in binary32 (norms.h's scale_binary32): inv and the weights within
 * 2^-100 .. 2^100 (|x_i inv| <= sqrt(dim) whatever the row), so that nothing overflows binary32 or loses its
 * precision where double would keep it; rows of subnormals with eps = 0 (inv beyond binary32) and NaN take
 * the double form. */
static int scale_in_binary32(const row_job *job, double inv)
{
    return inv >= 0x1p-100 && inv <= 0x1p100 && job->max_abs_weight <= 0x1p100;
}

/* N2: y = weight (x / rms), rms = sqrt(mean(x^2) + eps). The sum of squares
 * is exact per term in double (no scaling needed, unlike the reference's
 * doubles: SPEC.md 4.14); NaN in the row makes rms NaN and the row NaN; an
 * infinity makes rms = inf and 1/rms = 0, giving +-0 and NaN (inf * 0) as
 * the reference's x / inf. A zero row with eps = 0 gives weight * (+0), the
 * convention of SPEC.md 4.14. */
static void rmsnorm_row(const row_job *job, const void *x, float *y)
{
    const int64_t dim = job->dim;
    const double rms = sqrt(job->k->sum_of_squares(x, job->bf16, dim) / (double)dim + job->eps);
    if (rms == 0) {
        for (int64_t i = 0; i < dim; i++)
            y[i] = job->weight[i] * 0.0f;
        return;
    }
    if (scale_in_binary32(job, 1 / rms))
        job->k->scale_binary32(x, job->bf16, dim, 1 / rms, job->weight, y, job->stream);
    else
        job->k->scale(x, job->bf16, dim, 1 / rms, job->weight, y, job->stream);
}

/* N3's J^T g, g = weight dy: dx = (g - y (y . g) / d) / rms with y = x / rms,
 * written (g - x along) / rms, along = (y . g) / (d rms), y . g =
 * (sum x weight dy) / rms. A zero row with eps = 0: dx = 0 and no dweight
 * term (SPEC.md 4.14). */
/* Whether a VJP row's projection (norms.h) may run in binary32: every
 * intermediate of dx_i = (weight_i dy_i - x_i along) inv and of the dweight
 * term dy_i (x_i inv) within 2^-100 .. 2^100 (bounded by |x_i| <= sqrt(sum of
 * squares), |dy_i| <= max_abs_dy, |weight_i| <= max_abs_weight), so that no
 * intermediate overflows binary32 or loses its precision where the double
 * form would keep it; NaN anywhere fails every test. Rows of subnormals with
 * eps = 0 (inv beyond binary32), of huge values, of NaN or inf take the
 * double form (cpu_norms_ieee). */
static int project_in_binary32(const row_job *job, double sum_sq, double along, double inv, float max_abs_dy)
{
    const double big = 0x1p100, small = 0x1p-100;
    const double x_max = sqrt(sum_sq), a = fabs(along), g = max_abs_dy, wg = (double)job->max_abs_weight * g;
    return inv >= small && inv <= big && a <= big && wg <= big && wg * inv <= big && x_max * a <= big &&
           x_max * a * inv <= big && x_max * inv <= big && g * x_max * inv <= big;
}

/* A VJP row's first pass (norms.h's squares_and_weighted_dot): the products in binary32 where they are exact
 * (bf16 rows, weights of 8 bits). A product that underflows binary32 is rounded there by at most 2^-149 (times
 * |dy| for a triple product); the row is summed again in double unless that stays below 2^-89 of the sums'
 * scale: a sum of squares within 2^-60 .. 2^100, |dot| <= 2^100 (an overflow gives inf), |dy| <= 2^60. */
static void row_sums(const row_job *job, const void *x, const void *dy, const float *weight, double *sum_sq,
                     double *dot, float *max_abs_dy)
{
    const int exact = job->bf16 && job->weight_of_8_bits;
    job->k->squares_and_weighted_dot(x, dy, job->bf16, weight, job->dim, exact, sum_sq, dot, max_abs_dy);
    if (exact && !(*sum_sq >= 0x1p-60 && *sum_sq <= 0x1p100 && fabs(*dot) <= 0x1p100 && *max_abs_dy <= 0x1p60))
        job->k->squares_and_weighted_dot(x, dy, job->bf16, weight, job->dim, 0, sum_sq, dot, max_abs_dy);
}

static void rmsnorm_vjp_row(const row_job *job, const void *x, const void *dy, float *dx, float *column_sums)
{
    const int64_t dim = job->dim;
    double sum_sq, dot;
    float max_abs_dy;
    row_sums(job, x, dy, job->weight, &sum_sq, &dot, &max_abs_dy);
    const double rms = sqrt(sum_sq / (double)dim + job->eps);
    if (rms == 0) {
        fill(dx, dim, 0.0f);
        return;
    }
    const double inv = 1 / rms;
    const double y_dot_g = dot * inv, along = y_dot_g * inv / (double)dim;
    if (project_in_binary32(job, sum_sq, along, inv, max_abs_dy))
        job->k->project(x, dy, job->bf16, dim, job->weight, along, inv, dx, column_sums, job->stream);
    else
        job->k->project_double(x, dy, job->bf16, dim, job->weight, along, inv, dx, column_sums, job->stream);
}

/* SPEC.md 3: y = x / sqrt(sum x^2 + eps) or x / max(||x||, eps); a NaN in the
 * row makes the row NaN (max would drop it); 0 / 0 gives 0. */
static void l2norm_row(const row_job *job, const void *x, float *y)
{
    const int64_t dim = job->dim;
    const double sum_sq = job->k->sum_of_squares(x, job->bf16, dim);
    double denom = job->max_eps ? fmax(sqrt(sum_sq), job->eps) : sqrt(sum_sq + job->eps);
    if (isnan(sum_sq))
        denom = sum_sq;
    if (isnan(denom))
        fill(y, dim, (float)denom);
    else if (denom > 0)
        (scale_in_binary32(job, 1 / denom) ? job->k->scale_binary32 : job->k->scale)(x, job->bf16, dim, 1 / denom,
                                                                                     job->ones, y, job->stream);
    else
        fill(y, dim, 0.0f);
}

/* SPEC.md 3, the VJP in the forward pass's convention (reference/preprocess.c):
 * dx = (dy - x along) / denom; along = 0 below eps in the max convention
 * (y = x / eps is linear there); a NaN in x or dy makes the row NaN;
 * denom = 0 (zero row, eps = 0) gives dx = 0. */
static void l2norm_vjp_row(const row_job *job, const void *x, const void *dy, float *dx)
{
    const int64_t dim = job->dim;
    double sum_sq, x_dot_dy;
    float max_abs_dy;
    row_sums(job, x, dy, job->ones, &sum_sq, &x_dot_dy, &max_abs_dy);
    double along = 0, denom = 0;
    if (!job->max_eps) {
        const double n2 = sum_sq + job->eps;
        if (n2 > 0) {
            along = x_dot_dy / n2;
            denom = sqrt(n2);
        }
    } else {
        const double norm = sqrt(sum_sq);
        if (norm > 0 && norm >= job->eps) {
            along = x_dot_dy / sum_sq;
            denom = norm;
        } else if (job->eps > 0) {
            denom = job->eps;
        }
    }
    if (isnan(sum_sq) || isnan(x_dot_dy))
        denom = along = NAN;
    if (isnan(denom))
        fill(dx, dim, (float)denom);
    else if (denom > 0 && project_in_binary32(job, sum_sq, along, 1 / denom, max_abs_dy))
        job->k->project(x, dy, job->bf16, dim, job->ones, along, 1 / denom, dx, NULL, job->stream);
    else if (denom > 0)
        job->k->project_double(x, dy, job->bf16, dim, job->ones, along, 1 / denom, dx, NULL, job->stream);
    else
        fill(dx, dim, 0.0f);
}

static void run_row_block(void *context, int64_t item, int thread)
{
    (void)thread;
    const row_job *job = context;
    const int64_t dim = job->dim;
    int64_t first;
    const int64_t count = block_rows(&job->blocks, item, &first);
    float *column_sums = job->column_sums ? job->column_sums + item * dim : NULL;
    for (int64_t r = first; r < first + count; r++) {
        const void *x = row_pointer(job->x, job->bf16, r * dim), *dy = row_pointer(job->dy, job->bf16, r * dim);
        float *out = job->out + r * dim;
        switch (job->op) {
        case ROW_RMSNORM:
            rmsnorm_row(job, x, out);
            break;
        case ROW_RMSNORM_VJP:
            rmsnorm_vjp_row(job, x, dy, out, column_sums);
            break;
        case ROW_L2NORM:
            l2norm_row(job, x, out);
            break;
        case ROW_L2NORM_VJP:
            l2norm_vjp_row(job, x, dy, out);
            break;
        }
    }
}

/* Whether every v_i has at most 8 significant bits (a bf16 value): its low 16 bits zero. */
static int of_8_bits(const float *v, int64_t n)
{
    for (int64_t i = 0; v && i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], sizeof bits);
        if (bits & 0xffffu)
            return 0;
    }
    return v != NULL;
}

/* max |v_i| (NaN if one is NaN); 0 for a NULL v. */
static float largest_magnitude(const float *v, int64_t n)
{
    float largest = 0.0f;
    for (int64_t i = 0; v && i < n; i++) {
        if (isnan(v[i]))
            return v[i];
        largest = fabsf(v[i]) > largest ? fabsf(v[i]) : largest;
    }
    return largest;
}

static int run_rows(const lacs_cpu_call *c, const lacs_cpu_norm_kernels *k, int64_t rows, int64_t dim)
{
    const char *op = c->op;
    const int is_rmsnorm = strncmp(op, "rmsnorm", 7) == 0, vjp = strstr(op, "_vjp") != NULL;
    const double eps = lacs_cpu_param(c, "eps", 0);
    const double convention_value = is_rmsnorm ? 0 : lacs_cpu_param(c, "convention", 0);
    const int convention = convention_value == 0 ? 0 : convention_value == 1 ? 1 : -1;
    int rc = check_parameter(c, eps, convention);
    if (rc != LACS_OK)
        return rc;

    lacs_tensor *out = lacs_cpu_output(c, vjp ? "dx" : "y");
    lacs_tensor *dweight = is_rmsnorm && vjp ? lacs_cpu_output(c, "dweight") : NULL;
    const row_blocks blocks = split_rows(rows, dim);
    int oom = 0;
    float *weight = column_values(c, "weight", dim, 1.0f, &oom);
    float *ones = constant_columns(dim, 1.0f, &oom);
    float *scratch = out ? NULL : lacs_cpu_scratch_alloc((size_t)(rows * dim > 0 ? rows * dim : 1) * sizeof(float));
    float *column_sums =
        dweight ? lacs_cpu_scratch_calloc((size_t)(blocks.n_blocks > 0 ? blocks.n_blocks : 1) * (size_t)dim *
                                          sizeof(float))
                : NULL;
    if (oom || (!out && !scratch) || (dweight && !column_sums)) {
        rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory");
        goto done;
    }
    row_job job = {
        .k = k,
        .op = is_rmsnorm ? (vjp ? ROW_RMSNORM_VJP : ROW_RMSNORM) : (vjp ? ROW_L2NORM_VJP : ROW_L2NORM),
        .x = lacs_cpu_input(c, "x")->data,
        .dy = vjp ? lacs_cpu_input(c, "dy")->data : NULL,
        .bf16 = c->bf16,
        .dim = dim,
        .eps = eps,
        .max_eps = convention == 1,
        .weight = weight,
        .ones = ones,
        .out = out ? out->data : scratch,
        .column_sums = column_sums,
        .max_abs_weight = largest_magnitude(weight, dim),
        .weight_of_8_bits = of_8_bits(weight, dim),
        .blocks = blocks,
        .stream = out && (double)rows * (double)dim * sizeof(float) >= LACS_CPU_STREAM_BYTES,
    };
    lacs_cpu_parallel_for(c->threads, blocks.n_blocks, run_row_block, &job);
    if (dweight && reduce_columns(NULL, column_sums, blocks.n_blocks, dim, dweight->data) != 0)
        rc = lacs_cpu_error(LACS_ERR_MEMORY, op, "out of memory");
done:
    lacs_cpu_scratch_free(weight);
    lacs_cpu_scratch_free(ones);
    lacs_cpu_scratch_free(scratch);
    lacs_cpu_scratch_free(column_sums);
    return rc;
}

/* ---- the call ---- */

int lacs_cpu_norm(const lacs_cpu_call *c)
{
    const lacs_tensor *x = lacs_cpu_input(c, "x");
    const int64_t rows = x->shape[0], dim = x->shape[1];
    const int is_softcap = strncmp(c->op, "softcap", 7) == 0;
    /* the reference's shape check; softcap takes the rows * dim elements flat */
    if (!is_softcap && dim < 1)
        return lacs_cpu_error(LACS_ERR_SHAPE, c->op, "rows = %lld must be >= 0 and dim = %lld >= 1", (long long)rows,
                              (long long)dim);
    const lacs_cpu_norm_kernels *k = kernels_for(c->isa);
    if (!strncmp(c->op, "rmsnorm", 7) || !strncmp(c->op, "l2norm", 6))
        return run_rows(c, k, rows, dim);
    return run_elementwise(c, k, rows, dim);
}
