/* builtin:cpu's decode step (optimized/cpu/recurrent_kernels.h, README.md
 * section 2) on states larger than the caches, which it writes with
 * non-temporal stores by blocks of columns aligned on ht: the core vectors'
 * states are far smaller. Under every instruction set this CPU has:
 *   cpu_decode/streamed_state_is_the_ordinary_one
 *       gated_delta_rule, delta_rule and gated_delta_rule with gk, one token
 *       from h0 for 17 sequences of 16 heads (17 MiB of ht), o and ht bit
 *       for bit the same as each sequence's alone (1 MiB: ordinary stores),
 *       in both tiers, for K = V = 128 (rows of whole vectors: streamed) and
 *       K = 96, V = 100 (rows of every alignment: ordinary stores);
 * and each sequence's o against the recurrence in double, within 1e-5 of
 * the output's largest magnitude (the step computes the right thing). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../optimized/cpu/cpu.h"
#include "support.h"

enum { SEQUENCES = 17, HEADS = 16 };

static float pattern(uint64_t i, uint64_t k)
{
    return (float)test_pattern(i, k);
}

typedef struct {
    int64_t B, K, V;
    float *q, *k, *v, *beta, *g, *h0;
    uint16_t *q16, *k16, *v16, *beta16, *g16, *h016;
} decode_inputs;

static void *filled(int64_t n, uint64_t stream, float scale, float offset, uint16_t **as_bf16)
{
    float *x = malloc((size_t)n * sizeof *x);
    *as_bf16 = malloc((size_t)n * sizeof **as_bf16);
    cr_assert(x && *as_bf16);
    for (int64_t i = 0; i < n; i++) {
        x[i] = offset + scale * pattern((uint64_t)i, stream);
        (*as_bf16)[i] = lacs_cpu_f32_to_bf16(x[i]);
    }
    return x;
}

static void make_inputs(decode_inputs *d, int64_t K, int64_t V, int channel)
{
    const int64_t B = SEQUENCES, H = HEADS;
    d->B = B;
    d->K = K;
    d->V = V;
    d->q = filled(B * H * K, 1, 0.2f, 0.0f, &d->q16);
    d->k = filled(B * H * K, 2, 0.2f, 0.0f, &d->k16);
    d->v = filled(B * H * V, 3, 1.0f, 0.0f, &d->v16);
    d->beta = filled(B * H, 4, 0.4f, 0.5f, &d->beta16);
    d->g = filled(B * H * (channel ? K : 1), 5, 0.2f, -0.3f, &d->g16);
    d->h0 = filled(B * H * K * V, 6, 0.5f, 0.0f, &d->h016);
}

static void free_inputs(decode_inputs *d)
{
    float *f[] = {d->q, d->k, d->v, d->beta, d->g, d->h0};
    uint16_t *b[] = {d->q16, d->k16, d->v16, d->beta16, d->g16, d->h016};
    for (int i = 0; i < 6; i++) {
        free(f[i]);
        free(b[i]);
    }
}

/* `op` (gate: 0 none, 1 g, 2 gk) on sequences first .. first + B - 1, under isa; o and ht into o, ht. */
static void run_decode(const char *isa, const decode_inputs *d, int gate, int bf16, int64_t first, int64_t B, float *o,
                       float *ht)
{
    const int64_t H = HEADS, K = d->K, V = d->V;
    const int64_t qs[4] = {B, 1, H, K}, vs[4] = {B, 1, H, V}, bs[3] = {B, 1, H}, gs[4] = {B, 1, H, K},
                  hs[4] = {B, H, K, V};
    const lacs_dtype t = bf16 ? LACS_BF16 : LACS_F32;
#define AT(name, per) (bf16 ? (void *)(d->name##16 + first * (per)) : (void *)(d->name + first * (per)))
    lacs_tensor in[6];
    int n = 0;
    in[n++] = (lacs_tensor){"q", t, 4, qs, AT(q, H * K)};
    in[n++] = (lacs_tensor){"k", t, 4, qs, AT(k, H * K)};
    in[n++] = (lacs_tensor){"v", t, 4, vs, AT(v, H * V)};
    in[n++] = (lacs_tensor){"beta", t, 3, bs, AT(beta, H)};
    if (gate == 1)
        in[n++] = (lacs_tensor){"g", t, 3, bs, AT(g, H)};
    if (gate == 2)
        in[n++] = (lacs_tensor){"gk", t, 4, gs, AT(g, H * K)};
    in[n++] = (lacs_tensor){"h0", t, 4, hs, AT(h0, H * K * V)};
#undef AT
    const int64_t os[4] = {B, 1, H, V};
    lacs_tensor out[2] = {{"o", LACS_F32, 4, os, o}, {"ht", LACS_F32, 4, hs, ht}};
    setenv("LACS_ISA", isa, 1);
    const int rc = lacs_cpu_run(gate ? "gated_delta_rule" : "delta_rule", in, n, NULL, 0, out, 2);
    unsetenv("LACS_ISA");
    cr_assert_eq(rc, LACS_OK, "%s: %s", isa, lacs_last_error());
}

/* o of sequence s, head h, column j by the recurrence in double (fp32 inputs). */
static double reference_o(const decode_inputs *d, int gate, int64_t s, int64_t h, int64_t j)
{
    const int64_t H = HEADS, K = d->K, V = d->V;
    const float *q = d->q + (s * H + h) * K, *k = d->k + (s * H + h) * K, *S = d->h0 + (s * H + h) * K * V;
    const double b = d->beta[s * H + h], scale = 1.0 / sqrt((double)K);
    double sk = 0, u, o = 0;
    for (int64_t c = 0; c < K; c++) {
        const double e = gate == 0 ? 1.0 : exp(gate == 1 ? d->g[s * H + h] : d->g[(s * H + h) * K + c]);
        sk += e * S[c * V + j] * k[c];
    }
    u = b * (d->v[(s * H + h) * V + j] - sk);
    for (int64_t c = 0; c < K; c++) {
        const double e = gate == 0 ? 1.0 : exp(gate == 1 ? d->g[s * H + h] : d->g[(s * H + h) * K + c]);
        o += (e * S[c * V + j] + k[c] * u) * q[c];
    }
    return scale * o;
}

Test(cpu_decode, streamed_state_is_the_ordinary_one, .timeout = 300)
{
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    static const int64_t dims[2][2] = {{128, 128}, {96, 100}};
    int compared = 0;
    for (int shape = 0; shape < 2; shape++) {
        const int64_t K = dims[shape][0], V = dims[shape][1], H = HEADS, B = SEQUENCES;
        const int64_t state = H * K * V;
        if (shape == 0)
            cr_assert_geq((double)B * state * sizeof(float), (double)LACS_CPU_STREAM_BYTES);
        cr_assert_lt((double)state * sizeof(float), (double)LACS_CPU_STREAM_BYTES);
        float *o = malloc((size_t)(B * H * V) * sizeof *o), *ht = malloc((size_t)(B * state) * sizeof *ht);
        float *o1 = malloc((size_t)(H * V) * sizeof *o1), *ht1 = malloc((size_t)state * sizeof *ht1);
        cr_assert(o && ht && o1 && ht1);
        for (int gate = 0; gate <= 2; gate++) {
            decode_inputs d;
            make_inputs(&d, K, V, gate == 2);
            for (int i = 0; i < 3; i++) {
                if (!lacs_cpu_isa_supported(isas[i])) {
                    cr_log_info("cpu_decode: skipping %s: this CPU lacks its instructions", isas[i]);
                    continue;
                }
                for (int bf16 = 0; bf16 <= 1; bf16++) {
                    run_decode(isas[i], &d, gate, bf16, 0, B, o, ht);
                    for (int64_t s = 0; s < B; s++) {
                        run_decode(isas[i], &d, gate, bf16, s, 1, o1, ht1);
                        cr_expect(memcmp(o1, o + s * H * V, (size_t)(H * V) * sizeof *o1) == 0 &&
                                      memcmp(ht1, ht + s * state, (size_t)state * sizeof *ht1) == 0,
                                  "%s, gate %d, K=%lld V=%lld, %s: sequence %lld differs alone",
                                  isas[i], gate, (long long)K, (long long)V, bf16 ? "bf16" : "fp32", (long long)s);
                    }
                    if (!bf16) {
                        double worst = 0, largest = 0;
                        for (int64_t s = 0; s < B; s += 8)
                            for (int64_t h = 0; h < H; h += 5)
                                for (int64_t j = 0; j < V; j++) {
                                    const double want = reference_o(&d, gate, s, h, j);
                                    worst = fmax(worst, fabs(o[(s * H + h) * V + j] - want));
                                    largest = fmax(largest, fabs(want));
                                }
                        cr_expect(worst <= 1e-5 * largest, "%s, gate %d: o off the recurrence by %g (largest %g)",
                                  isas[i], gate, worst, largest);
                    }
                    compared++;
                }
            }
            free_inputs(&d);
        }
        free(o);
        free(ht);
        free(o1);
        free(ht1);
    }
    cr_log_info("cpu_decode: %d comparisons", compared);
}
