/* builtin:cpu's chunked prefill (optimized/cpu/recurrent_kernels.h, README.md
 * section 2) on outputs larger than the caches: on AMD's cores an o of
 * LACS_CPU_STREAM_BYTES or more is formed chunk by chunk in the workspace and
 * written with non-temporal stores (stream_outputs), where a smaller one is
 * written in place; the core vectors' outputs are far smaller. Under every
 * instruction set this CPU has:
 *   cpu_prefill/streamed_outputs_are_the_ordinary_ones
 *       gated_delta_rule (g, and gk), delta_rule and linear_attn_postnorm on
 *       4 sequences of T = 4100 (a last chunk of 4 tokens), 4 heads, V =
 *       64 (rows of whole lines) and V = 100 (rows of every alignment, each
 *       row's first and last lines by ordinary stores), 16.0-25.0 MiB of o:
 *       o and ht bit for bit those of each sequence alone (4.0-6.3 MiB: in
 *       place), in both tiers.
 * On another vendor's CPU both runs write in place (the test says so in its
 * log); the comparison still holds. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../optimized/cpu/cpu.h"
#include "support.h"

enum { SEQUENCES = 4, TOKENS = 4100, HEADS = 4, KEYS = 48 };

typedef struct {
    int64_t V;
    float *x[6];     /* q, k, v, beta, g, gk */
    uint16_t *b[6];  /* the same rounded to bf16 */
    int64_t per[6];  /* elements per sequence */
} prefill_inputs;

static void make_inputs(prefill_inputs *d, int64_t V)
{
    const int64_t T = TOKENS, H = HEADS, K = KEYS;
    const int64_t per[6] = {T * H * K, T * H * K, T * H * V, T * H, T * H, T * H * K};
    const float scale[6] = {0.15f, 0.15f, 1.0f, 0.4f, 0.05f, 0.05f}, offset[6] = {0, 0, 0, 0.5f, -0.06f, -0.06f};
    d->V = V;
    for (int i = 0; i < 6; i++) {
        const int64_t n = SEQUENCES * per[i];
        d->per[i] = per[i];
        d->x[i] = malloc((size_t)n * sizeof *d->x[i]);
        d->b[i] = malloc((size_t)n * sizeof *d->b[i]);
        cr_assert(d->x[i] && d->b[i]);
        for (int64_t j = 0; j < n; j++) {
            d->x[i][j] = offset[i] + scale[i] * (float)test_pattern((uint64_t)j, (uint64_t)(i + 11));
            d->b[i][j] = lacs_cpu_f32_to_bf16(d->x[i][j]);
        }
    }
}

static void free_inputs(prefill_inputs *d)
{
    for (int i = 0; i < 6; i++) {
        free(d->x[i]);
        free(d->b[i]);
    }
}

/* `op` (gate: 0 none, 1 g, 2 gk) on sequences first .. first + B - 1, under isa: o and ht (NULL for
 * linear_attn_postnorm, which has none here). */
static void run_prefill(const char *isa, const char *op, const prefill_inputs *d, int gate, int bf16, int64_t first,
                        int64_t B, float *o, float *ht)
{
    const int64_t T = TOKENS, H = HEADS, K = KEYS, V = d->V;
    const int64_t qs[4] = {B, T, H, K}, vs[4] = {B, T, H, V}, bs[3] = {B, T, H}, hs[4] = {B, H, K, V};
    const int64_t *shapes[6] = {qs, qs, vs, bs, bs, qs};
    static const char *const names[6] = {"q", "k", "v", "beta", "g", "gk"};
    const int correct = strcmp(op, "linear_attn_postnorm") != 0;
    lacs_tensor in[6];
    int n = 0;
    for (int i = 0; i < 6; i++) {
        if ((i == 3 && !correct) || (i == 4 && gate != 1) || (i == 5 && gate != 2))
            continue;
        void *data = bf16 ? (void *)(d->b[i] + first * d->per[i]) : (void *)(d->x[i] + first * d->per[i]);
        in[n++] = (lacs_tensor){names[i], bf16 ? LACS_BF16 : LACS_F32, i == 3 || i == 4 ? 3 : 4, shapes[i], data};
    }
    lacs_tensor out[2] = {{"o", LACS_F32, 4, vs, o}, {"ht", LACS_F32, 4, hs, ht}};
    setenv("LACS_ISA", isa, 1);
    const int rc = lacs_cpu_run(op, in, n, NULL, 0, out, ht ? 2 : 1);
    unsetenv("LACS_ISA");
    cr_assert_eq(rc, LACS_OK, "%s %s: %s", isa, op, lacs_last_error());
}

Test(cpu_prefill, streamed_outputs_are_the_ordinary_ones, .timeout = 600)
{
    static const char *const isas[] = {"avx512", "avx2", "scalar"};
    static const struct {
        const char *op;
        int gate;
    } ops[] = {{"gated_delta_rule", 1}, {"gated_delta_rule", 2}, {"delta_rule", 0}, {"linear_attn_postnorm", 0}};
    static const int64_t values[2] = {64, 100};
    if (!__builtin_cpu_is("amd"))
        cr_log_info("cpu_prefill: not an AMD CPU: o is written in place in both runs");
    int compared = 0;
    for (int shape = 0; shape < 2; shape++) {
        const int64_t V = values[shape], B = SEQUENCES, o_one = (int64_t)TOKENS * HEADS * V;
        const int64_t state = (int64_t)HEADS * KEYS * V;
        cr_assert_geq((double)B * o_one * sizeof(float), (double)LACS_CPU_STREAM_BYTES);
        cr_assert_lt((double)o_one * sizeof(float), (double)LACS_CPU_STREAM_BYTES);
        prefill_inputs d;
        make_inputs(&d, V);
        float *o = malloc((size_t)(B * o_one) * sizeof *o), *ht = malloc((size_t)(B * state) * sizeof *ht);
        float *o1 = malloc((size_t)o_one * sizeof *o1), *ht1 = malloc((size_t)state * sizeof *ht1);
        cr_assert(o && ht && o1 && ht1);
        for (size_t p = 0; p < sizeof ops / sizeof ops[0]; p++) {
            const int has_ht = strcmp(ops[p].op, "linear_attn_postnorm") != 0;
            for (int i = 0; i < 3; i++) {
                if (!lacs_cpu_isa_supported(isas[i]))
                    continue;
                for (int bf16 = 0; bf16 <= 1; bf16++) {
                    run_prefill(isas[i], ops[p].op, &d, ops[p].gate, bf16, 0, B, o, has_ht ? ht : NULL);
                    for (int64_t s = 0; s < B; s++) {
                        run_prefill(isas[i], ops[p].op, &d, ops[p].gate, bf16, s, 1, o1, has_ht ? ht1 : NULL);
                        cr_expect(memcmp(o1, o + s * o_one, (size_t)o_one * sizeof *o1) == 0 &&
                                      (!has_ht || memcmp(ht1, ht + s * state, (size_t)state * sizeof *ht1) == 0),
                                  "%s %s (gate %d), V=%lld, %s: sequence %lld differs alone", isas[i], ops[p].op,
                                  ops[p].gate, (long long)V, bf16 ? "bf16" : "fp32", (long long)s);
                        compared++;
                    }
                }
            }
        }
        free_inputs(&d);
        free(o);
        free(ht);
        free(o1);
        free(ht1);
    }
    cr_log_info("cpu_prefill: %d comparisons", compared);
}
