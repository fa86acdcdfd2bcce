/* builtin:cpu, the recurrent family's kernels (README.md section 2): the
 * chunk algorithm and the recurrent step, written once over a primitive
 * layer (simd_avx512.h, simd_avx2.h or simd_scalar.h, which the including
 * file, recurrent_<isa>.c, includes first, with simd_math.h), building that
 * instruction set's table RECURRENT_KERNELS (recurrent.h). Compiled for the
 * set, so that the chunk's element-wise work (loads, gates, scalings,
 * rounding, packing) runs on its vectors; the products are the set's GEMM
 * (gemm_frame.h, through the call's table).
 *
 * The chunk (README.md section 2 writes it out; H7 per chunk, H9 within it):
 * n tokens entering with the state S [K x V], G_i the binary32 sum of the log
 * decays of tokens 0..i of the chunk, b_i the step:
 *   A   = b_i exp(Gr_i - G_j) k_i . k_j   (j < i)       one product K K^T
 *   P   = scale exp(G_i - G_j) q_i . k_j   (j <= i)     one product Q K^T
 *   [Kd; Qd] = [b_i exp(Gr_i) k_i ; scale exp(G_i) q_i]
 *   [R; O] = [Kd; Qd] S                                 two products on S as it is kept: packed, O into o
 *   U   = b (.) v - R,   V' = (I + A)^{-1} U            forward substitution, one product
 *   O  += P V'                                          the outputs
 *   S   = exp(G_last) S + Kl^T V',  Kl_j = exp(G_last - G_j) k_j
 * Gr = G (H6, H8 first form), Gr_i = G_{i-1} for Comba (H8 second form); the
 * linear family has no correction (V' = v, no A). With per-channel decay the
 * two n x n matrices are built term by term (an exp per term). S is kept from
 * chunk to chunk in the GEMM table's packed layout (panels of nr columns,
 * cpu.h), where the two products read it as their right operand and the
 * last writes it panel by panel: no packing per chunk (4-5 % of the chunk's
 * time). The bf16 products read it so too: they round it per chunk, panel by
 * panel (round_pack_state).
 * Every exponent
 * is G_i - G_j (i >= j), G_i or G_last - G_j: <= 0 for decays g <= 0, so
 * nothing overflows however strong the decay.
 *
 * bf16 tier with AVX512-BF16's products (bf16_products, where dispatch.c
 * chose them native): the same products with their operands rounded to bf16
 * where they are handed over (k, q, [Kd; Qd], S once per chunk,
 * (I + A)^{-1}, U, P, V', Kl: the intermediates fla stores in bf16), fp32
 * accumulation, S itself fp32 from chunk to chunk (SPEC.md 11.1). Without
 * them (AVX2, scalar, widened products) the bf16 tier's inputs are widened
 * exactly and the fp32 algorithm runs: more accurate than the tier asks, and
 * as fast as fp32.
 */
#include <math.h>
#include <string.h>

#include "recurrent.h"
#include "recurrent_channel.h" /* channel_matrix */

/* ---- rows ---- */

/* Elements offset .. offset + n - 1 of an F32 or BF16 tensor as fp32 (exact). */
static void load_row(const lacs_tensor *t, int64_t offset, int64_t n, float *out)
{
    const int bf16 = t->dtype == LACS_BF16;
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(out + i, v_load_any(t->data, bf16, offset + i, n - i), n - i);
}

/* A hint to fetch elements offset .. offset + n - 1 of a tensor into the caches. */
static inline __attribute__((always_inline)) void prefetch_row(const lacs_tensor *t, int64_t offset, int64_t n)
{
    const size_t size = t->dtype == LACS_BF16 ? 2 : 4;
    const char *first = (const char *)t->data + (size_t)offset * size;
    for (size_t byte = 0; byte < (size_t)n * size; byte += 64)
        simd_prefetch(first + byte);
}

/* The rows of the chunk a task computes next (lacs_cpu_chunk_ahead), fetched
 * while this one is computed: a head's rows are H K or HV V elements apart, a
 * stride the hardware prefetchers do not follow. Two schedules:
 * - at once (chunk_fetch.spread = 0): each token's q, k and v rows in the
 *   chunk's first loop, a token per row it scales (the Xeon of README.md
 *   section 8.2: the spread below, tried there at four points, was slower);
 * - spread (AMD's cores): a few rows after each of the chunk's products, and
 *   each token's o row too, before the products store into it. On the EPYC
 *   of README.md section 8.2.13 the rows fetched at once filled the core's
 *   queue of misses and the loop waited on it (the prefetch loop held 5 % of
 *   the bf16 tier's time), and o's lines were read at the first store. */
typedef struct {
    const lacs_cpu_recurrent_op *r;
    int64_t t0, n, h, hv; /* the next chunk: n tokens from t0, q/k head h, value head hv */
    int spread;
    int64_t per_token; /* rows a token: q, k, v and (spread) o */
    int64_t next;      /* rows fetched so far, of per_token n: token next / per_token's, in that order */
} chunk_fetch;

/* The next `count` rows of the next chunk, or all that are left. */
static inline void fetch_rows(chunk_fetch *f, int64_t count)
{
    const lacs_cpu_recurrent_op *r = f->r;
    for (; count > 0 && f->next < f->per_token * f->n; count--, f->next++) {
        const int64_t t = f->t0 + f->next / f->per_token;
        switch (f->next % f->per_token) {
        case 0:
            prefetch_row(r->q, (t * r->H + f->h) * r->K, r->K);
            break;
        case 1:
            prefetch_row(r->k, (t * r->H + f->h) * r->K, r->K);
            break;
        case 2:
            prefetch_row(r->v, (t * r->HV + f->hv) * r->V, r->V);
            break;
        default: /* o (F32; prefetchw instead: the same time) */
            prefetch_row(r->o, (t * r->HV + f->hv) * r->V, r->V);
        }
    }
}

/* Rows fetched (spread) after a product of the chunk's n rows by 32 of its
 * columns (the state's, of K rows, counted the same): 6 spreads a chunk's
 * 4 x 32 rows over its products, 22 such under avx512. 3 rows, or 10, cost
 * the bf16 tier's T = 4096 6-7 % and 2-3 %. */
#define FETCH_ROWS_PER_32_COLUMNS 6

/* The rows' first readers (the scaling of k and q, U's reads of v) fetch the row this many tokens ahead of
 * the one they read, where the fetch is spread (AMD's cores): the spread fetch leaves the chunk's rows in the
 * L2 (the chunk's arrays are larger than the L1), and each row's first reads then waited on them. On the EPYC
 * of README.md section 8.2.15: 0.986 times the time in bf16 and 0.988 in fp32 under avx512, 0.983 in fp32
 * under avx2, more in the slow calls (a spell in which the op takes 15-25 % longer beside a steady GEMM:
 * 0.93-0.965); 2, 4 and 8 tokens ahead measured the same. */
#define FIRST_READ_AHEAD 8

/* Row t of a tensor of rows `width` apart in heads of n_heads (q, k: H and K; v: HV and V), fetched for a
 * first reader (FIRST_READ_AHEAD) where the fetch is spread and the row is in the chunk. */
static inline __attribute__((always_inline)) void fetch_ahead(const chunk_fetch *f, const lacs_tensor *t, int64_t t0,
                                                              int64_t i, int64_t n, int64_t n_heads, int64_t head,
                                                              int64_t width)
{
    if (f->spread && i + FIRST_READ_AHEAD < n)
        prefetch_row(t, ((t0 + i + FIRST_READ_AHEAD) * n_heads + head) * width, width);
}

/* After a product of `columns` columns: its share of the rows, where they are spread. */
static inline void fetch_after_product(chunk_fetch *f, int64_t columns)
{
    if (f->spread)
        fetch_rows(f, (columns * FETCH_ROWS_PER_32_COLUMNS + 31) / 32);
}

/* y[0 .. n-1] = a x (vectors). */
static inline void scale_row(int64_t n, float a, const float *x, float *y)
{
    const vfloat av = v_set1(a);
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(y + i, v_mul(av, v_load_first(x + i, n - i)), n - i);
}

/* y = a (.) x elementwise over n. */
static inline void multiply_rows(int64_t n, const float *a, const float *x, float *y)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(y + i, v_mul(v_load_first(a + i, n - i), v_load_first(x + i, n - i)), n - i);
}

/* y = exp(e) (.) x, or exp(e_scalar) x: exp of a row of exponents. */
static inline void exp_row(int64_t n, const float *e, float *out)
{
    for (int64_t i = 0; i < n; i += SIMD_LANES)
        v_store_first(out + i, v_exp(v_load_first(e + i, n - i)), n - i);
}

static inline float exp_one(float x)
{
    float out;
    exp_row(1, &x, &out);
    return out;
}

/* ---- the op's inputs ---- */

/* The log decay of token t (flattened), value head hv, key channel c. */
static inline float gate_at(const lacs_cpu_recurrent_op *r, int64_t t, int64_t hv, int64_t c)
{
    switch (r->gate) {
    case GATE_CONSTANT:
        return lacs_cpu_tensor_at(r->g, hv);
    case GATE_SCALAR:
        return lacs_cpu_tensor_at(r->g, t * r->HV + hv);
    case GATE_CHANNEL:
        return lacs_cpu_tensor_at(r->g, (t * r->HV + hv) * r->K + c);
    case GATE_NONE:
        break;
    }
    return 0.0f;
}

/* b_t: beta, or EFLA's c = (1 - exp(-beta |k|^2)) / |k|^2 (E5), beta in the limit |k| -> 0; k's row
 * from element k_offset of the tensor. */
static float step_size(const lacs_cpu_recurrent_op *r, int64_t t, int64_t hv, int64_t k_offset)
{
    if (r->step == STEP_NONE)
        return 1.0f;
    const float beta = lacs_cpu_tensor_at(r->beta, t * r->HV + hv);
    if (r->step == STEP_BETA)
        return beta;
    float knorm2 = 0.0f;
    for (int64_t c = 0; c < r->K; c++) {
        const float x = lacs_cpu_tensor_at(r->k, k_offset + c);
        knorm2 += x * x;
    }
    if (knorm2 == 0.0f)
        return beta;
    return -expm1f(-beta * knorm2) / knorm2; /* expm1: no cancellation when beta |k|^2 is small */
}

/* A chunk's rows of k, q and v: row i of each at k + i ldk, q + i ldq,
 * v + i ldv; v NULL: read from the BF16 tensor where the rows are used. */
typedef struct {
    const float *k, *q, *v;
    int64_t ldk, ldq, ldv;
} chunk_rows;

/* The chunk's gates and step sizes, tokens t0 .. t0 + n - 1 (flattened),
 * value head hv, q/k head hv / (HV / H), and where its rows are. F32 rows
 * are read where they are, a head's rows H K (HV V) elements apart: copied
 * into the workspace first, each row was read and written once more, through
 * the L2 (the chunk's arrays are larger than the L1), 9 % of the chunk's time
 * on the Xeon of README.md section 8.2. BF16 rows of k and q are widened into
 * the workspace (exactly) where [Kd; Qd] are formed from them, in the same
 * pass (recurrent_chunk); BF16 rows of v are widened where U reads them, or
 * here for the linear family (V' = v, packed from fp32 rows). The per-channel
 * decay's rows of k and q are copied here: its products (channel_matrix)
 * read them K apart. */
static void load_chunk(const lacs_cpu_recurrent_op *r, lacs_cpu_recurrent_workspace *w, int64_t t0, int64_t n,
                       int64_t hv, chunk_rows *rows)
{
    const int64_t K = r->K, V = r->V, h = hv / (r->HV / r->H);
    const int channel = r->gate == GATE_CHANNEL;
    const int64_t Kg = channel ? K : 1;
    const int q_here = r->q->dtype == LACS_F32 && !channel, k_here = r->k->dtype == LACS_F32 && !channel;
    const int v_here = r->v->dtype == LACS_F32, copy_v = !v_here && r->step == STEP_NONE;
    rows->q = q_here ? (const float *)r->q->data + (t0 * r->H + h) * K : w->kq + n * K;
    rows->k = k_here ? (const float *)r->k->data + (t0 * r->H + h) * K : w->kq;
    rows->v = v_here ? (const float *)r->v->data + (t0 * r->HV + hv) * V : copy_v ? w->v : NULL;
    rows->ldq = q_here ? r->H * K : K;
    rows->ldk = k_here ? r->H * K : K;
    rows->ldv = v_here ? r->HV * V : V;
    for (int64_t i = 0; i < n; i++) {
        const int64_t t = t0 + i;
        if (channel) {
            load_row(r->q, (t * r->H + h) * K, K, w->kq + (n + i) * K);
            load_row(r->k, (t * r->H + h) * K, K, w->kq + i * K);
        }
        if (copy_v)
            load_row(r->v, (t * r->HV + hv) * V, V, w->v + i * V);
        w->b[i] = step_size(r, t, hv, (t * r->H + h) * K);
        /* G: inclusive fp32 sums from the chunk's start; Gr: the rows' (exclusive for Comba) */
        for (int64_t c = 0; c < Kg; c++) {
            const float before = i > 0 ? w->G[(i - 1) * Kg + c] : 0.0f;
            w->G[i * Kg + c] = before + gate_at(r, t, hv, c);
            w->Gr[i * Kg + c] = r->comba ? before : w->G[i * Kg + c];
        }
    }
}

/* y = a x for a row of a tensor (elements offset .. offset + n - 1), and the
 * row itself widened to fp32 into x_out (BF16), or y = a x for fp32 x. */
static inline void scale_tensor_row(int64_t n, float a, const lacs_tensor *t, int64_t offset, const float *x,
                                    float *x_out, float *y)
{
    const vfloat av = v_set1(a);
    if (x) {
        for (int64_t i = 0; i < n; i += SIMD_LANES)
            v_store_first(y + i, v_mul(av, v_load_first(x + i, n - i)), n - i);
        return;
    }
    const int bf16 = t->dtype == LACS_BF16;
    for (int64_t i = 0; i < n; i += SIMD_LANES) {
        const vfloat xi = v_load_any(t->data, bf16, offset + i, n - i);
        v_store_first(x_out + i, xi, n - i);
        v_store_first(y + i, v_mul(av, xi), n - i);
    }
}

/* ---- bf16 operands (AVX512-BF16) ---- */

#ifdef SIMD_BF16_PRODUCTS

/* scale_tensor_row for the bf16 products: the row (x, or the tensor's row widened) rounded to bf16 into x16
 * (a BF16 row's own bits), also widened into x_out where x_out is not NULL (x NULL), and y = a x rounded into
 * y16 (no fp32 y): the products' left operands formed by the row's first reader, where rounding them after
 * (round_rows) read them again, 2 % of the bf16 tier's time on the EPYC of README.md section 8.2.13. */
static inline void scale_tensor_row_bf16(int64_t n, float a, const lacs_tensor *t, int64_t offset, const float *x,
                                         float *x_out, uint16_t *x16, uint16_t *y16)
{
    const vfloat av = v_set1(a);
    const int bf16 = t->dtype == LACS_BF16;
    for (int64_t i = 0; i < n; i += SIMD_LANES) {
        const vfloat xi = x ? v_load_first(x + i, n - i) : v_load_any(t->data, bf16, offset + i, n - i);
        if (!x && x_out)
            v_store_first(x_out + i, xi, n - i);
        v_store_bf16_first(x16 + i, xi, n - i);
        v_store_bf16_first(y16 + i, v_mul(av, xi), n - i);
    }
}

/* x [m x k] (leading dimension ldx) rounded to bf16 into out [m x k]. */
static void round_rows(int64_t m, int64_t k, const float *x, int64_t ldx, uint16_t *out)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t p = 0; p < k; p += SIMD_LANES)
            v_store_bf16_first(out + i * k + p, v_load_first(x + i * ldx + p, k - p), k - p);
}

/* B [k x n] (leading dimension ldb) rounded and packed for bgemm (the
 * layout of lacs_cpu_pack_bf16): pairs of consecutive rows interleaved. */
static void round_pack(int64_t k, int64_t n, const float *B, int64_t ldb, uint16_t *Bp)
{
    for (int64_t p = 0; p < k; p += 2) {
        const float *even = B + p * ldb, *odd = p + 1 < k ? B + (p + 1) * ldb : NULL;
        uint16_t *out = Bp + (p / 2) * 2 * n;
        for (int64_t j = 0; j < n; j += SIMD_LANES) {
            const vfloat e = v_load_first(even + j, n - j), o = odd ? v_load_first(odd + j, n - j) : v_zero();
            v_store_bf16_pairs(out + 2 * j, e, o, n - j);
        }
    }
}

/* B [k x n] rounded and packed panel by panel: columns j0 .. j0 + nr - 1 (nr
 * = the GEMM table's panel width) are a bgemm operand of their own, of n =
 * nr (fewer in the last), at Bp + j0 k_even (k rounded up to even). Each
 * product then runs panel by panel (panel_product), and the frame reads a
 * whole panel in place: with n = nr its packed rows are the frame's panel
 * rows (gemm_frame.h), where a B of several panels is copied panel by panel
 * for every product (7 % of the bf16 tier's time under avx512 on the EPYC of
 * README.md section 8.2.13, the most of it in those copies). */
static void round_pack_panels(int64_t k, int64_t n, const float *B, int64_t ldb, int64_t nr, uint16_t *Bp)
{
    const int64_t k_even = (k + 1) / 2 * 2;
    for (int64_t j0 = 0; j0 < n; j0 += nr)
        round_pack(k, n - j0 < nr ? n - j0 : nr, B + j0, ldb, Bp + j0 * k_even);
}

/* The state S (K x V, packed: panels of nr columns, K rows of nr floats each) rounded and packed for bgemm as
 * round_pack_panels(K, V, S row-major, ...) would: each panel a bgemm operand of its own. The bf16 products had
 * kept S row-major; packed, as fp32 keeps it, there is one layout, and the update's tiles are contiguous rows
 * (the bf16 tier 0.97-0.99 times the time, README.md section 2). */
static void round_pack_state(int64_t K, int64_t V, const float *S, int64_t nr, uint16_t *Sp)
{
    const int64_t K_even = (K + 1) / 2 * 2;
    for (int64_t j0 = 0; j0 < V; j0 += nr)
        round_pack(K, V - j0 < nr ? V - j0 : nr, S + j0 * K, nr, Sp + j0 * K_even);
}

/* C (+)= A B, A [m x k] bf16 (lda), B packed by round_pack_panels: one bgemm per panel. flags: A_LOWER or
 * none (C_LOWER reads the column, which a panel's product would count from the panel's first). */
static void panel_product(const lacs_cpu_gemm *gemm, int64_t m, int64_t n, int64_t k, const uint16_t *A, int64_t lda,
                          const uint16_t *Bp, float *C, int64_t ldc, float beta, unsigned flags, chunk_fetch *f)
{
    const int64_t k_even = (k + 1) / 2 * 2, nr = gemm->nr;
    for (int64_t j0 = 0; j0 < n; j0 += nr) {
        gemm->bgemm_general(m, n - j0 < nr ? n - j0 : nr, k, A, lda, Bp + j0 * k_even, C + j0, ldc, beta, flags);
        fetch_after_product(f, n - j0 < nr ? n - j0 : nr);
    }
}

/* k's rows [n x K] (rounded: k16) packed as B = k^T [K x n] for bgemm: the
 * pair (k[j][2q], k[j][2q + 1]) is adjacent in k16, a 32-bit element, so
 * for an even K this is the transpose of [n x K/2] 32-bit elements, 8 x 8
 * blocks by simd_transpose_8x8 (bits moved, never computed on), the rest
 * element by element. n <= nr (a chunk), one panel. */
static void pack_transposed(int64_t n, int64_t K, const uint16_t *k16, uint16_t *Bp)
{
    const int64_t n8 = K % 2 == 0 ? n / 8 * 8 : 0, pairs8 = K % 2 == 0 ? K / 2 / 8 * 8 : 0;
    for (int64_t j = 0; j < n8; j += 8)
        for (int64_t q = 0; q < pairs8; q += 8)
            simd_transpose_8x8((const float *)(k16 + j * K + 2 * q), K / 2, (float *)(Bp + q * 2 * n + 2 * j), n);
    for (int64_t q = 0; 2 * q < K; q++)
        for (int64_t j = q < pairs8 ? n8 : 0; j < n; j++) {
            Bp[q * 2 * n + 2 * j] = k16[j * K + 2 * q];
            Bp[q * 2 * n + 2 * j + 1] = 2 * q + 1 < K ? k16[j * K + 2 * q + 1] : 0;
        }
}

/* C (+)= A B with A rounded to bf16 here (into w->a16), B packed by round_pack_panels (k^T: one panel),
 * fp32 accumulation. */
static void bf16_product(const lacs_cpu_recurrent_op *r, lacs_cpu_recurrent_workspace *w, int64_t m, int64_t n,
                         int64_t k, const float *A, int64_t lda, const uint16_t *Bp, float *C, int64_t ldc,
                         float beta, unsigned flags, chunk_fetch *f)
{
    round_rows(m, k, A, lda, w->a16);
    panel_product(r->call->gemm, m, n, k, w->a16, k, Bp, C, ldc, beta, flags, f);
}

#endif

/* ---- the chunk ---- */

/* Rows i0 .. i0 + R - 1 of T = (I + A)^{-1} (unit_lower_inverse), R a constant where inlined: each vector of
 * columns summed in a register per row over j < i0 first, the R rows' sums side by side (R chains of FMAs in
 * flight, where one row's chain waited on each FMA's latency: 8 % of the chunk function's time under avx512 on
 * the EPYC of README.md section 8.2.15), then the triangle j = i0 .. i - 1, row after row. Each row's sum runs
 * over j in increasing order, as one row at a time would: the same bits. */
static inline __attribute__((always_inline)) void unit_lower_inverse_rows(int64_t n, const float *A, float *T,
                                                                          uint16_t *T16, int64_t i0, int R)
{
    for (int64_t c = 0; c < n; c += SIMD_LANES) {
        const int64_t count = n - c;
        vfloat acc[4];
        for (int r = 0; r < R; r++)
            acc[r] = v_zero();
        for (int64_t j = c; j < i0; j++) { /* T_j is zero from column j + 1 on */
            const vfloat tj = v_load_first(T + j * n + c, count);
            for (int r = 0; r < R; r++)
                acc[r] = v_fnma(v_set1(A[(i0 + r) * n + j]), tj, acc[r]);
        }
        const vfloat column = v_add(v_lane_index(), v_set1((float)c));
        for (int r = 0; r < R; r++) {
            const int64_t i = i0 + r;
            for (int64_t j = i0 > c ? i0 : c; j < i; j++)
                acc[r] = v_fnma(v_set1(A[i * n + j]), v_load_first(T + j * n + c, count), acc[r]);
            const vfloat diagonal = v_set1((float)i); /* T_ii = 1 (the sum there is a zero) */
            acc[r] = v_select(vm_and(vm_le(column, diagonal), vm_ge(column, diagonal)), acc[r], v_set1(1.0f));
            v_store_first(T + i * n + c, acc[r], count);
#ifdef SIMD_BF16_PRODUCTS
            if (T16)
                v_store_bf16_first(T16 + i * n + c, acc[r], count);
#else
            (void)T16;
#endif
        }
    }
}

/* T = (I + A)^{-1} for A strictly lower triangular (n x n), by forward
 * substitution row by row: T_i = e_i - sum_{j<i} A_ij T_j. T is unit lower
 * triangular; its row i has non-zeros in columns 0..i only, and zeros are
 * stored above the diagonal (the products read it as lower triangular, and
 * the rows can be combined whole here). Each vector of T_i is summed in a
 * register over j (no store and reload per term), four rows at a time.
 * T16 (not NULL, the bf16 products): T rounded too, as each row is stored. */
static void unit_lower_inverse(int64_t n, const float *A, float *T, uint16_t *T16)
{
    int64_t i0 = 0;
    for (; i0 + 4 <= n; i0 += 4)
        unit_lower_inverse_rows(n, A, T, T16, i0, 4);
    for (; i0 < n; i0++)
        unit_lower_inverse_rows(n, A, T, T16, i0, 1);
}

/* D_ij = exp(G_i - G_j) for j <= i, 0 above (scalar decay): the decay between
 * two tokens of the chunk, one exp per pair. */
static void decay_matrix(int64_t n, const float *G, float *D)
{
    for (int64_t i = 0; i < n; i++) {
        float *row = D + i * n;
        const vfloat gi = v_set1(G[i]);
        for (int64_t j = 0; j <= i; j += SIMD_LANES)
            v_store_first(row + j, v_exp(v_sub(gi, v_load_first(G + j, i + 1 - j))), i + 1 - j);
        memset(row + i + 1, 0, (size_t)(n - i - 1) * sizeof *row);
    }
}

/* An output row of V RMS-normalised in place for linear_attn_postnorm (H3:
 * o / sqrt(mean(o^2) + eps); a zero row with eps = 0 stays 0). */
static void postnorm_row(const lacs_cpu_recurrent_op *r, float *row)
{
    const int64_t V = r->V;
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++)
        sum += (double)row[j] * row[j];
    const double denominator = sqrt(sum / (double)V + r->eps);
    if (denominator != 0.0)
        for (int64_t j = 0; j < V; j++)
            row[j] = (float)(row[j] / denominator);
}

/* The outputs (rows of O, [n x V]) into o, each row normalised for
 * linear_attn_postnorm. */
static void store_outputs(const lacs_cpu_recurrent_op *r, const float *O, int64_t t0, int64_t n, int64_t hv)
{
    float *o = r->o->data;
    const int64_t V = r->V;
    for (int64_t i = 0; i < n; i++) {
        float *row = o + ((t0 + i) * r->HV + hv) * V;
        memcpy(row, O + i * V, (size_t)V * sizeof *row);
        if (r->postnorm)
            postnorm_row(r, row);
    }
}

static void recurrent_chunk(const lacs_cpu_recurrent_op *r, lacs_cpu_recurrent_workspace *w, int64_t t0, int64_t n,
                            int64_t hv, const lacs_cpu_chunk_ahead *ahead)
{
    const int64_t K = r->K, V = r->V;
    const int channel = r->gate == GATE_CHANNEL, decays = r->gate != GATE_NONE, correct = r->step != STEP_NONE;
    const int64_t Kg = channel ? K : 1;
    const float scale = (float)r->scale;
    const lacs_cpu_gemm *gemm = r->call->gemm;
    chunk_rows rows;
    load_chunk(r, w, t0, n, hv, &rows);
    const float *G = w->G, *Gr = w->Gr, *Glast = w->G + (n - 1) * Kg;
    const float *const k = rows.k, *const q = rows.q;
    const int64_t ldk = rows.ldk, ldq = rows.ldq;
    float *Kd = w->KQd, *Qd = w->KQd + n * K, *KS = w->R;
    float *KK = w->KQK, *QK = w->KQK + n * n;
#ifdef SIMD_BF16_PRODUCTS
    const int bf16 = r->bf16_products;
#endif

    /* [Kd; Qd]: b_i exp(Gr_i) (.) k_i and scale exp(G_i) (.) q_i (exp per channel, or one per row), the rows'
     * first reader (BF16 rows widened into the workspace in the same pass). A scalar decay's exps of the rows
     * first, a vector at a time, into D (free until decay_matrix below): one exp per call, its argument
     * stored then read back as a vector, waited on a store that cannot be forwarded (a masked load of a
     * 4-byte store), 12 % of this function's time on the Xeon of README.md section 8.2.1 */
    float *const k_decays = w->D, *const q_decays = w->D + n;
    float state_decay = 1.0f; /* exp(G_last), scalar decay */
    if (!channel && decays) {
        exp_row(n, Gr, k_decays);
        exp_row(n, G, q_decays);
        state_decay = q_decays[n - 1];
    }
    /* the q/k heads of this chunk and of the next, divided once (two 64-bit divisions a row were in this loop) */
    const int64_t h = hv / (r->HV / r->H), h_ahead = ahead->hv / (r->HV / r->H);
    chunk_fetch fetch = {r, ahead->t0, ahead->n, h_ahead, ahead->hv, r->call->amd, r->call->amd && !r->stream_outputs ? 4 : 3, 0};
    chunk_fetch *const f = &fetch;
    for (int64_t i = 0; i < n; i++) {
        if (!f->spread)
            fetch_rows(f, f->per_token); /* the next chunk's token i */
        if (!channel) { /* per channel, load_chunk read the rows */
            fetch_ahead(f, r->k, t0, i, n, r->H, h, K);
            fetch_ahead(f, r->q, t0, i, n, r->H, h, K);
        }
        if (channel) {
            exp_row(K, Gr + i * K, Kd + i * K);
            multiply_rows(K, Kd + i * K, k + i * ldk, Kd + i * K);
            scale_row(K, w->b[i], Kd + i * K, Kd + i * K);
            exp_row(K, G + i * K, Qd + i * K);
            multiply_rows(K, Qd + i * K, q + i * ldq, Qd + i * K);
            scale_row(K, scale, Qd + i * K, Qd + i * K);
        } else {
            const float row_decay = decays ? k_decays[i] : 1.0f, q_decay = decays ? q_decays[i] : 1.0f;
            const int64_t row = ((t0 + i) * r->H + h) * K;
#ifdef SIMD_BF16_PRODUCTS
            if (bf16) { /* k, q, Kd, Qd rounded here (w->kq16, w->kqd16); neither widened (Kl reads k again) */
                scale_tensor_row_bf16(K, w->b[i] * row_decay, r->k, row, k == w->kq ? NULL : k + i * ldk, NULL,
                                      w->kq16 + i * K, w->kqd16 + i * K);
                scale_tensor_row_bf16(K, scale * q_decay, r->q, row, q == w->kq + n * K ? NULL : q + i * ldq, NULL,
                                      w->kq16 + (n + i) * K, w->kqd16 + (n + i) * K);
                continue;
            }
#endif
            scale_tensor_row(K, w->b[i] * row_decay, r->k, row, k == w->kq ? NULL : k + i * ldk, w->kq + i * K,
                             Kd + i * K);
            scale_tensor_row(K, scale * q_decay, r->q, row, q == w->kq + n * K ? NULL : q + i * ldq,
                             w->kq + (n + i) * K, Qd + i * K);
        }
    }
#ifdef SIMD_BF16_PRODUCTS
    if (bf16) { /* k^T (for the n x n products) and S are right operands twice each: rounded and packed once */
        if (channel)
            round_rows(2 * n, K, w->KQd, K, w->kqd16); /* [Kd; Qd], formed in fp32 per channel above */
        else
            pack_transposed(n, K, w->kq16, w->k16);
        if (!w->s16_current) /* else rounded by the update that wrote S (below) */
            round_pack_state(K, V, w->S, gemm->nr, w->s16);
    }
#endif

    /* the n x n matrices: K K^T and Q K^T, k^T packed once for both (lower triangles wanted; the linear
     * family needs Q K^T only), then A and P */
    if (!channel) {
        if (decays)
            decay_matrix(n, G, w->D);
#ifdef SIMD_BF16_PRODUCTS
        if (bf16) {
            if (correct) /* k and q rounded by the scaling above */
                gemm->bgemm_general(n, n, K, w->kq16, K, w->k16, KK, n, 0.0f, LACS_GEMM_C_LOWER);
            fetch_after_product(f, n);
            gemm->bgemm_general(n, n, K, w->kq16 + n * K, K, w->k16, QK, n, 0.0f, LACS_GEMM_C_LOWER);
            fetch_after_product(f, n);
        } else
#endif
        {
            simd_transpose(n, K, k, ldk, w->KlT, n); /* k^T, [K x n]: these products' B, then Kl^T's rows */
            /* with n = nr (avx512's whole chunks) k^T row-major is the packed layout itself (cpu.h) */
            const float *kt_packed = w->KlT;
            if (n != gemm->nr) {
                gemm->pack_b(K, n, w->KlT, n, 0, w->KT_packed);
                kt_packed = w->KT_packed;
            }
            if (correct)
                gemm->sgemm_packed(n, n, K, k, ldk, kt_packed, KK, n, 0.0f, LACS_GEMM_C_LOWER);
            fetch_after_product(f, n);
            gemm->sgemm_packed(n, n, K, q, ldq, kt_packed, QK, n, 0.0f, LACS_GEMM_C_LOWER);
            fetch_after_product(f, n);
        }
        /* whole rows, each element formed in registers and stored once, 0 past the triangle (selected: what
         * the product left above its diagonal is never used): a row built in place in three passes of
         * partial vectors waited on its own masked stores (forwarding fails), 10 % of this function's time */
        const vfloat scale_v = v_set1(scale);
        float *const A = w->A, *const P = w->P; /* in locals: a store may alias *w (the U loop below says why) */
        const float *const D = w->D, *const b = w->b;
        for (int64_t i = 0; i < n; i++) {
            const vfloat b_i = v_set1(b[i]), row = v_set1((float)i);
            /* A_ij = b_i exp(Gr_i - G_j) k_i.k_j (j < i): D's row i, or row i - 1 for Comba (none for i = 0) */
            const float *d_a = decays && i > 0 ? D + (r->comba ? i - 1 : i) * n : NULL;
            for (int64_t c = 0; c < n; c += SIMD_LANES) {
                const int64_t count = n - c;
                const vfloat column = v_add(v_lane_index(), v_set1((float)c));
                if (correct) {
                    vfloat a = v_load_first(KK + i * n + c, count);
                    if (d_a)
                        a = v_mul(v_load_first(d_a + c, count), a);
                    v_store_first(A + i * n + c, v_zero_unless(vm_lt(column, row), v_mul(b_i, a)), count);
                }
                /* P_ij = scale exp(G_i - G_j) q_i.k_j (j <= i) */
                vfloat p = v_load_first(QK + i * n + c, count);
                if (decays)
                    p = v_mul(v_load_first(D + i * n + c, count), p);
                p = v_zero_unless(vm_le(column, row), v_mul(scale_v, p));
#ifdef SIMD_BF16_PRODUCTS
                if (bf16) { /* P V''s left operand, rounded here (no fp32 P) */
                    v_store_bf16_first(w->p16 + i * n + c, p, count);
                    continue;
                }
#endif
                v_store_first(P + i * n + c, p, count);
            }
        }
    } else {
        if (correct)
            channel_matrix(n, K, k, k, Gr, G, w->b, 1.0f, 1, w->A, NULL);
        channel_matrix(n, K, q, k, G, G, NULL, scale, 0, w->P, NULL);
    }

    /* R = Kd S (not for the linear family), O = Qd S: S packed once for both (as one product of 2n rows
     * would); O straight into the op's o, this head's rows (HV V apart), where P V' adds to it: no copy of
     * the outputs after, whose stores stalled on their cache misses (9-12 % of the chunk's time; README.md
     * section 2). On AMD's cores, for an o larger than the caches (stream_outputs), O in the workspace and
     * streamed out after P V' instead (o's lines written without being read: 0.99 times the time, 0.97 in
     * the slow calls, README.md section 8.2.15) */
    float *O = r->stream_outputs ? w->R + n * V : (float *)r->o->data + (t0 * r->HV + hv) * V;
    const int64_t ldo = r->stream_outputs ? V : r->HV * V;
#ifdef SIMD_BF16_PRODUCTS
    if (bf16) {
        if (correct)
            panel_product(gemm, n, V, K, w->kqd16, K, w->s16, KS, V, 0.0f, 0, f);
        panel_product(gemm, n, V, K, w->kqd16 + n * K, K, w->s16, O, ldo, 0.0f, 0, f);
    } else
#endif
    {
        if (correct)
            gemm->sgemm_packed(n, V, K, Kd, K, w->S, KS, V, 0.0f, 0);
        fetch_after_product(f, V);
        gemm->sgemm_packed(n, V, K, Qd, K, w->S, O, ldo, 0.0f, 0);
        fetch_after_product(f, V);
    }

    /* V' = (I + A)^{-1} (b (.) v - Kd S); v itself for the linear family */
    const float *vnew = rows.v; /* V' */
    int64_t ld_vnew = rows.ldv;
    if (correct) {
#ifdef SIMD_BF16_PRODUCTS
        uint16_t *const T16 = bf16 ? w->a16 : NULL; /* T U's left operand */
#else
        uint16_t *const T16 = NULL;
#endif
        unit_lower_inverse(n, w->A, w->Tinv, T16);
        /* the workspace's pointers in locals: a store through a float pointer may alias *w, so w->U and w->v
         * were read again after each vector's store, each read waiting on that store (6 % of this function's
         * time) */
        float *const U = w->U;
        const float *const v_rows = rows.v, *const b = w->b; /* v_rows NULL: BF16 v, widened here */
        const int64_t ldv = rows.ldv, nr = gemm->nr, V_panels = (V + nr - 1) / nr * nr;
#ifdef SIMD_BF16_PRODUCTS
        if (bf16) { /* U rounded and packed for T U as it is formed, two rows at a time (as round_pack_panels
                     * packs: pairs of rows interleaved, panel by panel), no fp32 U */
            const int64_t n_even = (n + 1) / 2 * 2;
            for (int64_t i = 0; i < n; i += 2) {
                fetch_ahead(f, r->v, t0, i, n, r->HV, hv, V);
                fetch_ahead(f, r->v, t0, i + 1, n, r->HV, hv, V);
                for (int64_t c = 0; c < V; c += SIMD_LANES) { /* a vector never crosses a panel */
                    vfloat u[2] = {v_zero(), v_zero()};     /* rows i and i + 1 (0 past n: the half pair) */
                    for (int64_t e = 0; e < 2 && i + e < n; e++) {
                        const vfloat vi = v_rows ? v_load_first(v_rows + (i + e) * ldv + c, V - c)
                                                 : v_load_any(r->v->data, 1, ((t0 + i + e) * r->HV + hv) * V + c,
                                                              V - c);
                        u[e] = v_fms(v_set1(b[i + e]), vi, v_load_first(KS + (i + e) * V + c, V - c));
                    }
                    const int64_t j0 = c / nr * nr, cols = V - j0 < nr ? V - j0 : nr;
                    v_store_bf16_pairs(w->b16 + j0 * n_even + (i / 2) * 2 * cols + 2 * (c - j0), u[0], u[1],
                                       V - c);
                }
            }
            panel_product(gemm, n, V, n, T16, n, w->b16, w->Vp, V, 0.0f, LACS_GEMM_A_LOWER, f); /* T rounded */
            vnew = w->Vp;
            ld_vnew = V;
        } else
#endif
        {
            /* U in the GEMM table's packed layout (panels of nr columns, k = n rows, 0 past V), the right
             * operand T U reads without a pack */
            for (int64_t i = 0; i < n; i++) {
                const vfloat bi = v_set1(b[i]);
                const int64_t row = ((t0 + i) * r->HV + hv) * V;
                fetch_ahead(f, r->v, t0, i, n, r->HV, hv, V);
                for (int64_t c = 0; c < V; c += SIMD_LANES) { /* a vector never crosses a panel */
                    const vfloat vi = v_rows ? v_load_first(v_rows + i * ldv + c, V - c)
                                             : v_load_any(r->v->data, 1, row + c, V - c);
                    v_store_first(U + (c / nr) * n * nr + i * nr + c % nr,
                                  v_fms(bi, vi, v_load_first(KS + i * V + c, V - c)), V - c);
                }
                for (int64_t c = V; c < V_panels; c++)
                    U[(c / nr) * n * nr + i * nr + c % nr] = 0.0f;
            }
            /* V' written panel by panel in the packed layout itself (C = the panel, ldc = nr; its padding
             * T 0 = 0), for P V' and the state's update: no pack of U, none of V' */
            for (int64_t j0 = 0; j0 < V; j0 += nr) {
                gemm->sgemm_packed(n, nr, n, w->Tinv, n, U + j0 * n, w->Vp_packed + j0 * n, nr, 0.0f,
                                   LACS_GEMM_A_LOWER);
                fetch_after_product(f, nr);
            }
            vnew = NULL; /* packed already */
        }
    }

    /* O += P V'; V' packed once for this product and the state's */
#ifdef SIMD_BF16_PRODUCTS
    if (bf16) {
        round_pack_panels(n, V, vnew, ld_vnew, gemm->nr, w->b16);
        if (channel)
            bf16_product(r, w, n, V, n, w->P, n, w->b16, O, ldo, 1.0f, LACS_GEMM_A_LOWER, f);
        else /* P rounded where it was formed */
            panel_product(gemm, n, V, n, w->p16, n, w->b16, O, ldo, 1.0f, LACS_GEMM_A_LOWER, f);
    } else
#endif
    {
        if (vnew) /* v itself (the linear family) */
            gemm->pack_b(n, V, vnew, ld_vnew, 0, w->Vp_packed);
        gemm->sgemm_packed(n, V, n, w->P, n, w->Vp_packed, O, ldo, 1.0f, LACS_GEMM_A_LOWER);
        fetch_after_product(f, V);
    }
    if (r->postnorm)
        for (int64_t i = 0; i < n; i++)
            postnorm_row(r, O + i * ldo);
    if (r->stream_outputs) { /* O in the workspace (in L1) streamed into o: no read of o's lines before */
        for (int64_t i = 0; i < n; i++)
            stream_out((float *)r->o->data + ((t0 + i) * r->HV + hv) * V, O + i * ldo, V);
        /* The fence once per task, after its last chunk (nothing ahead: run_sequence_heads), not after every
         * chunk, where it waited for the chunk's 32 rows to drain: O's next rows are formed in the same
         * workspace, which the streamed stores do not read: 0.980-0.993 times the time (bf16, avx512, T=4096,
         * README.md section 8.2.18) */
        if (ahead->n == 0)
            simd_store_fence();
    }

    /* S = exp(G_last) (.) S + Kl^T V', Kl_j = exp(G_last - G_j) (.) k_j: Kl^T [K x n] formed from k^T */
    float *d = w->b; /* free by now: exp(G_last - G_j), scalar decay */
    if (!channel) {
        for (int64_t j = 0; j < n; j++)
            d[j] = decays ? Glast[0] - G[j] : 0.0f;
        exp_row(n, d, d);
    }
#ifdef SIMD_BF16_PRODUCTS
    if (bf16) {
        /* Kl rounded and packed as a B is (pairs of tokens interleaved: the pair (Kl_j[c], Kl_{j+1}[c]) adjacent),
         * the update's A = Kl^T read so in place (bgemm's A_TRANSPOSED), formed from k's rows where they are (k
         * not widened into the workspace for it): Kl^T formed, transposed and rounded in three passes took 2.5 %
         * of the bf16 tier's time under avx512 on the EPYC of README.md section 8.2.15 */
        const int k_bf16 = r->k->dtype == LACS_BF16;
        for (int64_t j = 0; j < n; j += 2)
            for (int64_t c = 0; c < K; c += SIMD_LANES) {
                vfloat pair[2] = {v_zero(), v_zero()}; /* tokens j and j + 1 (0 past n: the half pair) */
                for (int64_t e = 0; e < 2 && j + e < n; e++) {
                    const vfloat kv = v_load_any(r->k->data, k_bf16, ((t0 + j + e) * r->H + h) * K + c, K - c);
                    pair[e] = channel ? v_mul(v_exp(v_sub(v_load_first(Glast + c, K - c),
                                                          v_load_first(G + (j + e) * K + c, K - c))),
                                              kv)
                                      : v_mul(v_set1(d[j + e]), kv);
                }
                v_store_bf16_pairs(w->a16 + (j / 2) * 2 * K + 2 * c, pair[0], pair[1], K - c);
            }
    } else
#endif
    if (!channel) {
        for (int64_t c = 0; c < K; c++)
            multiply_rows(n, d, w->KlT + c * n, w->KlT + c * n);
    } else {
        for (int64_t j = 0; j < n; j++) {
            float *kl = w->Kl + j * K;
            if (channel) {
                for (int64_t c = 0; c < K; c += SIMD_LANES)
                    v_store_first(kl + c,
                                  v_exp(v_sub(v_load_first(Glast + c, K - c), v_load_first(G + j * K + c, K - c))),
                                  K - c);
                multiply_rows(K, kl, k + j * ldk, kl);
            } else
                scale_row(K, d[j], k + j * ldk, kl);
        }
        simd_transpose(n, K, w->Kl, K, w->KlT, n);
    }
    const int64_t nr = gemm->nr;
    if (channel) {
        float *row_decay = w->D; /* free by now: exp(G_last) per channel */
        exp_row(K, Glast, row_decay);
        for (int64_t j0 = 0; j0 < V; j0 += nr) /* row c of each panel (its padding: 0 stays 0) */
            for (int64_t c = 0; c < K; c++) {
                float *row = w->S + j0 * K + c * nr;
                scale_row(nr, row_decay[c], row, row);
            }
    }
#ifdef SIMD_BF16_PRODUCTS
    if (bf16) { /* Kl packed above, read as Kl^T; V' packed above; S's panels (C = the panel, ldc = nr) */
        for (int64_t j0 = 0; j0 < V; j0 += nr) {
            const int64_t cols = V - j0 < nr ? V - j0 : nr;
            gemm->bgemm_general(K, cols, n, w->a16, 2 * K, w->b16 + j0 * ((n + 1) / 2 * 2), w->S + j0 * K, nr,
                                state_decay, LACS_GEMM_A_TRANSPOSED);
            round_pack(K, cols, w->S + j0 * K, nr, w->s16 + j0 * ((K + 1) / 2 * 2));
            fetch_after_product(f, cols);
        }
        fetch_rows(f, f->per_token * n); /* what is left (at once; spread: the paths with fewer products) */
        return;
    }
#endif
    for (int64_t j0 = 0; j0 < V; j0 += nr) { /* S's panels, each from the panel of V' packed above */
        gemm->sgemm_packed(K, V - j0 < nr ? V - j0 : nr, n, w->KlT, n, w->Vp_packed + j0 * n, w->S + j0 * K, nr,
                           state_decay, 0);
        fetch_after_product(f, V - j0 < nr ? V - j0 : nr);
    }
    fetch_rows(f, f->per_token * n); /* what is left (at once; spread: the paths with fewer products) */
}

/* ---- the recurrent step (decoding) ---- */

/* What one decode step's columns read: the step's vectors and the state. */
typedef struct {
    const lacs_cpu_recurrent_op *r;
    const float *qe, *ke, *k, *e, *v;
    float b, kq, scale;
    const void *h0; /* NULL: zeros */
    int h0_bf16;
    int64_t base, K, V;
    float *ht, *out; /* ht: NULL when not asked for */
} token_columns;

/* The vectors of columns a block of the step takes: 4 (64 columns with avx512, 32 with avx2), so that the first
 * sweep keeps 8 independent FMA chains in flight (an FMA's latency is 4 cycles, 2 issue per cycle: with 2
 * vectors, 4 chains, a row took twice the cycles its FMAs need; the avx2 step ran at 0.14 ms for a 1 MiB state,
 * in cache), and a row of the block is whole cache lines (128 or 256 bytes of fp32). */
#define TOKEN_BLOCK_VECTORS 4

/* Columns j0 .. j0 + width - 1 of the step, `vectors` vectors of them
 * ((vectors - 1) SIMD_LANES < width <= vectors SIMD_LANES; a constant where
 * this is inlined): the first sweep down the rows forms (e (.) q)^T S and
 * S^T k in registers; u and o for these columns; the second sweep writes
 * ht's columns, the block (K rows of at most TOKEN_BLOCK_VECTORS vectors:
 * 32 KiB at K = 128 with avx512) read again from L1. stream: ht's vectors
 * here are whole cache lines, written with non-temporal stores. */
static inline __attribute__((always_inline)) void token_block(const token_columns *p, int64_t j0, int64_t width,
                                                              int vectors, int stream)
{
    const int64_t K = p->K, V = p->V;
    int64_t count[TOKEN_BLOCK_VECTORS];
    vfloat sq[TOKEN_BLOCK_VECTORS], sk[TOKEN_BLOCK_VECTORS], u[TOKEN_BLOCK_VECTORS];
    for (int i = 0; i < vectors; i++) {
        const int64_t left = width - i * SIMD_LANES;
        count[i] = left < SIMD_LANES ? left : SIMD_LANES;
        sq[i] = v_zero();
        sk[i] = v_zero();
    }
    /* the next block's row c (the next head's, after a row's last block: a thread's heads are contiguous in
     * h0, lacs_cpu_parallel_split) is fetched while this row is summed: a block's rows are V elements apart, a
     * stride the hardware prefetchers follow too late, and a batch's states come from memory (a prefetch past
     * the end of h0 does not fault) */
    const int64_t size = p->h0_bf16 ? 2 : 4, row_bytes = V * size;
    const char *const next =
        p->h0 ? (const char *)p->h0 + (j0 + width < V ? (p->base + j0 + width) * size : (p->base + K * V) * size)
              : NULL;
    for (int64_t c = 0; p->h0 && c < K; c++) {
        const vfloat qc = v_set1(p->qe[c]), kc = v_set1(p->ke[c]);
        /* every line of the block's row: its start and, h0 not being aligned, its last byte's line */
        for (int64_t byte = 0; byte < vectors * SIMD_LANES * size; byte += LACS_CPU_CACHE_LINE)
            simd_prefetch(next + c * row_bytes + byte);
        simd_prefetch(next + c * row_bytes + vectors * SIMD_LANES * size - 1);
        for (int i = 0; i < vectors; i++) {
            const vfloat s = v_load_any(p->h0, p->h0_bf16, p->base + c * V + j0 + i * SIMD_LANES, count[i]);
            sq[i] = v_fma(qc, s, sq[i]);
            sk[i] = v_fma(kc, s, sk[i]);
        }
    }
    /* u = b (v - S^T k), or v; o = scale (sq + u kq) */
    const int correct = p->r->step != STEP_NONE;
    const vfloat b = v_set1(p->b), kq = v_set1(p->kq), scale = v_set1(p->scale);
    for (int i = 0; i < vectors; i++) {
        const int64_t j = j0 + i * SIMD_LANES;
        const vfloat v = v_load_first(p->v + j, count[i]);
        u[i] = correct ? v_mul(b, v_sub(v, sk[i])) : v;
        v_store_first(p->out + j, v_mul(scale, v_fma(u[i], kq, sq[i])), count[i]);
    }
    if (!p->ht)
        return;
    /* ht = e (.) S + k u^T */
    for (int64_t c = 0; c < K; c++) {
        const vfloat ec = v_set1(p->e[c]), kc = v_set1(p->k[c]);
        float *row = p->ht + c * V + j0;
        for (int i = 0; i < vectors; i++) {
            const vfloat s =
                p->h0 ? v_load_any(p->h0, p->h0_bf16, p->base + c * V + j0 + i * SIMD_LANES, count[i]) : v_zero();
            const vfloat h = v_fma(ec, s, v_mul(kc, u[i]));
            if (stream)
                v_stream(row + i * SIMD_LANES, h);
            else
                v_store_first(row + i * SIMD_LANES, h, count[i]);
        }
    }
}

/* token_block over columns j0 .. j1 - 1, by blocks of TOKEN_BLOCK_VECTORS vectors (the last narrower), each
 * inlined with its count of vectors a constant. stream: every block but a narrower last one is whole lines
 * (j0 on a line, the width a multiple of it); a last block that is not takes ordinary stores. */
static inline void token_blocks(const token_columns *p, int64_t j0, int64_t j1, int stream)
{
    const int64_t line = LACS_CPU_CACHE_LINE / (int64_t)sizeof(float);
    for (; j0 < j1; j0 += TOKEN_BLOCK_VECTORS * SIMD_LANES) {
        const int64_t width = j1 - j0 < TOKEN_BLOCK_VECTORS * SIMD_LANES ? j1 - j0 : TOKEN_BLOCK_VECTORS * SIMD_LANES;
        const int whole_lines = stream && width % line == 0 && width % SIMD_LANES == 0;
        switch ((width + SIMD_LANES - 1) / SIMD_LANES) {
        case 1:
            token_block(p, j0, width, 1, whole_lines);
            break;
        case 2:
            token_block(p, j0, width, 2, whole_lines);
            break;
        case 3:
            token_block(p, j0, width, 3, whole_lines);
            break;
        default:
            token_block(p, j0, width, 4, whole_lines);
            break;
        }
    }
}

/* One token t from h0 (zeros without it), as the recurrence (H2-H8, E5), in
 * one pass over the state, by blocks of columns (a column's update needs
 * only that column: u_j = b (v_j - (S^T k)_j)): for each block, a sweep down
 * the rows forms e (.) S^T q and the correction's S^T k (with the decay, or
 * without it for Comba) in registers; then u = b (v - S^T k) (v for the
 * linear family) and o = scale (S'^T q) = scale ((e (.) q)^T S + u (k . q));
 * a second sweep, over the block now in L1, writes ht = e (.) S + k u^T when
 * asked for. The state is read once and written once, the least a step can.
 * e_c = exp(g) (per channel for gk, 1 without decay). Each column's sums
 * run down the rows in order, whatever the blocks. */
static void recurrent_token(const lacs_cpu_recurrent_op *r, float *scratch, int64_t t, int64_t hv, int64_t seq)
{
    const int64_t K = r->K, V = r->V, h = hv / (r->HV / r->H), KV = K * V;
    float *k = scratch, *q = k + K, *qe = q + K, *ke = qe + K, *e = ke + K, *v = e + K, *out = v + V;
    load_row(r->q, (t * r->H + h) * K, K, q);
    load_row(r->k, (t * r->H + h) * K, K, k);
    load_row(r->v, (t * r->HV + hv) * V, V, v);
    const float b = step_size(r, t, hv, (t * r->H + h) * K);
    if (r->gate == GATE_CHANNEL) {
        for (int64_t c = 0; c < K; c++)
            e[c] = gate_at(r, t, hv, c);
        exp_row(K, e, e);
    } else {
        const float decay = exp_one(gate_at(r, t, hv, 0));
        for (int64_t c = 0; c < K; c++)
            e[c] = decay;
    }
    multiply_rows(K, e, q, qe);
    if (r->comba)
        memcpy(ke, k, (size_t)K * sizeof *ke);
    else
        multiply_rows(K, e, k, ke);
    float kq = 0.0f;
    for (int64_t c = 0; c < K; c++)
        kq += k[c] * q[c];

    const lacs_tensor *h0 = r->h0;
    const int64_t base = (seq * r->HV + hv) * KV;
    token_columns p = {r,     qe,         ke,   k, e, v, b, kq, (float)r->scale, h0 ? h0->data : NULL,
                       h0 && h0->dtype == LACS_BF16, base, K, V, r->ht ? (float *)r->ht->data + base : NULL, out};
    /* a state larger than the caches: ht written with non-temporal stores (no read of each line before it is
     * written), the blocks then starting at ht's first cache-line boundary (a row's head before it), the same
     * in every row when a row is whole lines long (else ordinary stores). A block's row is then whole lines
     * (token_blocks): a non-temporal store of part of a line, which the vector alignment alone allowed with
     * avx2's 32-byte vectors, costs a partial write of the line to memory (10x slower: 22 ms for a 16 MiB
     * state against 2.7 ms) */
    const int64_t line = LACS_CPU_CACHE_LINE / (int64_t)sizeof(float);
    const int stream = p.ht && V % line == 0 && V % SIMD_LANES == 0 &&
                       (double)lacs_tensor_count(r->ht) * sizeof(float) >= LACS_CPU_STREAM_BYTES;
    int64_t head = 0;
    if (stream) {
        const int64_t past = (int64_t)(((uintptr_t)p.ht % LACS_CPU_CACHE_LINE) / sizeof(float));
        head = past ? line - past : 0;
        token_blocks(&p, 0, head, 0);
    }
    token_blocks(&p, head, V, stream);
    if (stream)
        simd_store_fence();
    store_outputs(r, out, t, 1, hv);
}

const lacs_cpu_recurrent_kernels RECURRENT_KERNELS = {
    .isa = SIMD_ISA,
    .chunk = recurrent_chunk,
    .token = recurrent_token,
};
