/* The case catalog of the golden vectors (lacs/catalog.h; SPEC.md 10.5).
 *
 * Read top to bottom: the flags and the bug each catches; the inputs every op
 * on sequences draws in a plain case; the shape scenarios every such op is run
 * through (chunk boundaries, long sequences, head layouts, varlen, state
 * carry); then the cases particular to one op (gates, beta, key norms,
 * logits, PaTH's and DeltaFormer's structure, MesaNet's conditioning, the
 * norms' exhaustive bf16 sweeps and IEEE specials). lacs_catalog() expands
 * the scenarios over the ops once and appends the particular cases.
 *
 * Recipes (SPEC.md 10.3): normal(s), uniform(lo,hi), const(c), unit(r),
 * unit_pow2(lo,hi), coupled(eps), lowrank(r), mixed_gate, psd(s), all_bf16,
 * specials(s), retnet, copy(name).
 */
#include <stdio.h>
#include <string.h>

#include "lacs/catalog.h"
#include "lacs/ops.h"

/* ---- flags, in the manner of Wycheproof: each names the bug it catches ---- */

static const lacs_flag_info flag_table[] = {
    {"Basic", "a wrong formula on a plain random problem"},
    {"ChunkBoundary", "T one below, at or above a multiple of 16, 32, 64: masks, remainders and the "
                      "state handed from chunk to chunk"},
    {"LongSequence", "accumulation error over T >= 1000 (a bf16 state, a sum in low precision)"},
    {"SingleToken", "T = 1: the decode path, and chunked kernels with one partial chunk"},
    {"KNeV", "K != V: the state transposed, V and K swapped in a loop bound"},
    {"OddHeadDim", "head dims 60 and 100: tile tails and vector remainders"},
    {"GroupedValueHeads", "HV = 2H, 4H: q/k head hv / G (grouped), not hv % H (tiled)"},
    {"InitialState", "h0 ignored, transposed, or shared between sequences"},
    {"CustomScale", "scale hard-coded to K^-1/2 or applied twice"},
    {"Varlen", "the state not reset between packed sequences"},
    {"EmptySequence", "an empty or one-token sequence in a varlen batch (off-by-one offsets)"},
    {"StateCarry", "the final state in a layout that does not round-trip as h0"},
    {"ZeroGate", "g = 0 exactly (fla #104): log-space gates dividing by zero or masking it"},
    {"StrongDecay", "g very negative: underflow to 0 and exp of large differences in chunked forms"},
    {"MixedGate", "zero, mild and strong gates mixed: per-token gate indexing"},
    {"ConstantDecay", "the same decay at every token over T >= 4096: exp's error, made the same at every token, "
                      "accumulates over the horizon 1 / (1 - exp(g))"},
    {"PerChannelGate", "a per-key-channel decay (gk, KDA) applied on the wrong side of the state"},
    {"BetaZero", "beta = 0: the write and erase terms must vanish together"},
    {"BetaOne", "beta = 1: the plain delta rule"},
    {"BetaNearTwo", "beta near 2 (negative eigenvalues): clamping beta to [0, 1], sigmoid assumed"},
    {"UnnormalizedKeys", "k not L2-normalised: an implementation that normalises k itself"},
    {"TinyKeyNorm", "EFLA with ||k|| <= 1e-4: 1 - exp(-x) computed without expm1 cancels to 0"},
    {"LargeKeyNorm", "EFLA with large ||k||: the coefficient saturating at 1/||k||^2"},
    {"LargeLogits", "softmax logits beyond exp's range: no max subtraction overflows"},
    {"ALiBi", "a constant per-head gate (g_gamma) in place of FoX's per-token one"},
    {"HouseholderEqualsKey", "PaTH with W = K (H13): the transition product reversed or off by one"},
    {"ReflectionNorm", "PaTH with ||w|| = sqrt 2, beta = 1: exact reflections (H14)"},
    {"CoupledKeys", "DeltaFormer with strongly coupled keys: a large B, the diagonal mishandled"},
    {"IllConditioned", "MesaNet with a nearly singular H_t + diag(lambda): an inexact solve"},
    {"AllBF16", "every one of the 65,536 bf16 inputs: a tanh or rsqrt approximation out of bounds"},
    {"IEEESpecials", "+-0, +-inf, NaN, subnormals, huge values: the IEEE tables of SPEC.md"},
    {"Variant", "a documented variant (DeltaFormer form, l2norm convention, optional input absent)"},
    {"Gradient", "a VJP: a wrong derivative"},
};

const lacs_flag_info *lacs_flags(size_t *count)
{
    *count = sizeof flag_table / sizeof flag_table[0];
    return flag_table;
}

/* ---- the ops on sequences and what a plain case draws ---- */

enum { RECURRENT = 1, ATTENTION = 2, MESA = 4 };

static const struct {
    const char *op;
    int family;
    const char *inputs; /* without h0 (a scenario adds it) */
    const char *params;
} sequence_ops[] = {
    {"linear_attn", RECURRENT, "q:normal k:normal(0.25) v:normal", NULL},
    {"linear_attn_postnorm", RECURRENT, "q:normal k:normal(0.25) v:normal", "eps=1e-6"},
    {"retention", RECURRENT, "q:normal k:normal(0.25) v:normal g_gamma:retnet", NULL},
    {"simple_gla", RECURRENT, "q:normal k:normal(0.25) v:normal g:uniform(-0.5,0)", NULL},
    {"gla", RECURRENT, "q:normal k:normal(0.25) v:normal gk:uniform(-0.5,0)", NULL},
    {"delta_rule", RECURRENT, "q:normal k:unit v:normal beta:uniform(0,1)", NULL},
    {"gated_delta_rule", RECURRENT, "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-0.5,0)", NULL},
    {"comba", RECURRENT, "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-0.5,0)", NULL},
    {"efla", RECURRENT, "q:normal k:normal(0.35) v:normal beta:uniform(0,1)", NULL},
    {"softmax_attn", ATTENTION, "q:normal k:normal v:normal", NULL},
    {"fox", ATTENTION, "q:normal k:normal v:normal g:uniform(-0.5,0)", NULL},
    {"deltaformer", ATTENTION, "q:normal k:normal v:normal beta:uniform(0,1)", NULL},
    {"path_attn", ATTENTION, "q:normal k:normal v:normal w:unit beta:uniform(0,2)", NULL},
    {"mesa_net", MESA, "q:normal k:unit v:normal lambda:uniform(0.25,1.25) beta:uniform(0,1) "
                       "g:uniform(-0.5,0)", NULL},
};

/* ---- shape scenarios, run for every op on sequences of the families named ---- */

static const struct {
    const char *name;
    int families;
    lacs_case_set set;
    int64_t B, T, H, HV, K, V;
    const char *cu_seqlens;
    int with_state; /* adds h0 (and MesaNet's h0_kk) for the stateful families */
    const char *params;
    int64_t split;
    const char *flags;
    const char *reason;
} scenarios[] = {
    {"t1", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 2, 1, 2, 2, 16, 16, NULL, 1, NULL, 0,
     "SingleToken InitialState", "one token from a given state: the decode path"},
    {"t63", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 63, 1, 1, 8, 8, NULL, 0, NULL, 0,
     "ChunkBoundary", "one token short of a chunk multiple"},
    {"t64", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 64, 1, 1, 8, 8, NULL, 0, NULL, 0,
     "ChunkBoundary", "exactly one chunk of 64 (two of 32, four of 16)"},
    {"t65", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 65, 1, 1, 8, 8, NULL, 1, NULL, 0,
     "ChunkBoundary InitialState", "one token past a chunk: a one-token last chunk after a full one"},
    {"t127", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 127, 1, 1, 8, 8, NULL, 0, NULL, 0,
     "ChunkBoundary", "one short of two chunks"},
    {"t128", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 128, 1, 1, 8, 8, NULL, 0, NULL, 0,
     "ChunkBoundary", "exactly two chunks: the state handed over once"},
    {"t129", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 129, 1, 1, 8, 8, NULL, 1, NULL, 0,
     "ChunkBoundary InitialState", "two chunks and one token"},
    {"t1000", RECURRENT | MESA, LACS_SET_CORE, 1, 1000, 1, 1, 4, 4, NULL, 1, NULL, 0,
     "LongSequence InitialState", "a thousand steps of accumulation, not a chunk multiple"},
    {"t4096", RECURRENT | MESA, LACS_SET_CORE, 1, 4096, 1, 1, 4, 4, NULL, 1, NULL, 0,
     "LongSequence InitialState", "4096 steps: a low-precision state drifts"},
    {"t512", ATTENTION, LACS_SET_CORE, 1, 512, 1, 1, 16, 16, NULL, 0, NULL, 0,
     "LongSequence", "512 tokens: blocked softmax across many key blocks"},
    {"k16-v32", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 65, 1, 2, 16, 32, NULL, 1, NULL, 0,
     "KNeV InitialState", "K != V: the state's orientation"},
    {"k60-v100", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 24, 1, 1, 60, 100, NULL, 1, NULL, 0,
     "OddHeadDim KNeV InitialState", "head dims that are not powers of two"},
    {"k100-v60", ATTENTION, LACS_SET_CORE, 1, 40, 1, 1, 100, 60, NULL, 0, NULL, 0,
     "OddHeadDim KNeV", "head dims that are not powers of two, the other way round"},
    {"hv2h", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 2, 33, 2, 4, 8, 8, NULL, 1, NULL, 0,
     "GroupedValueHeads InitialState", "two value heads per q/k head"},
    {"hv4h", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 33, 1, 4, 8, 8, NULL, 1, NULL, 0,
     "GroupedValueHeads InitialState", "four value heads per q/k head"},
    {"scale", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 33, 2, 2, 16, 8, NULL, 0, "scale=0.3", 0,
     "CustomScale", "a scale other than K^-1/2"},
    {"b3", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 3, 20, 2, 2, 8, 8, NULL, 1, NULL, 0,
     "Basic InitialState", "a batch of three: batch strides"},
    {"varlen", RECURRENT | MESA | ATTENTION, LACS_SET_CORE, 1, 130, 1, 2, 8, 8, "0,0,1,17,17,66,130", 1,
     NULL, 0, "Varlen EmptySequence InitialState",
     "packed sequences of lengths 0, 1, 16, 0, 49, 64, each from its own h0"},
    {"carry37", RECURRENT | MESA, LACS_SET_CORE, 1, 100, 1, 2, 8, 8, NULL, 1, NULL, 37, "StateCarry",
     "the state after 37 tokens, carried as h0, must continue the sequence"},
    {"carry64", RECURRENT | MESA, LACS_SET_CORE, 2, 100, 1, 1, 8, 8, NULL, 1, NULL, 64,
     "StateCarry ChunkBoundary", "a split on a chunk boundary"},
    /* the full set: longer and wider (make vectors-full) */
    {"t16384", RECURRENT | MESA, LACS_SET_FULL, 1, 16384, 2, 2, 32, 32, NULL, 1, NULL, 0,
     "LongSequence InitialState", "16384 steps at K = V = 32"},
    {"t2048-k128", RECURRENT | MESA, LACS_SET_FULL, 1, 2048, 1, 2, 128, 128, NULL, 1, NULL, 0,
     "LongSequence InitialState", "the production head size, K = V = 128"},
    {"t1024", ATTENTION, LACS_SET_FULL, 1, 1024, 2, 2, 64, 64, NULL, 0, NULL, 0, "LongSequence",
     "1024 tokens at d = 64"},
};

/* ---- cases particular to one op ---- */

#define SEQ(B, T, H, HV, K, V) B, T, H, HV, K, V, 0, 0
#define NORM(rows, dim) 0, 0, 0, 0, 0, 0, rows, dim

static const lacs_case particular[] = {
    /* linear attention with positive feature maps */
    {"linear_attn", "t4096-positive", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 8, 8), NULL,
     "q:uniform(0,1) k:uniform(0,0.25) v:uniform(0,1)", NULL, 0, "LongSequence",
     "positive feature maps (elu + 1) and positive values (the normaliser sum of phi(k)): the state grows "
     "like t, so a state kept in bf16 stops absorbing the updates"},
    /* constant decays over long sequences: exp's error, the same at every token, accumulates over the horizon */
    {"retention", "t4096-retnet8", LACS_TIER_FP32, LACS_SET_CORE, SEQ(1, 4096, 1, 8, 8, 2), NULL,
     "q:normal k:normal(0.25) v:normal g_gamma:retnet", NULL, 0, "LongSequence ConstantDecay",
     "RetNet's eight heads, horizons 32 to 4096, over 4096 tokens: an exp a few ulp off errs the same way at "
     "every token"},
    {"simple_gla", "t4096-const", LACS_TIER_FP32, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal g:const(-3e-4)", NULL, 0, "LongSequence ConstantDecay",
     "a constant log decay of -3e-4 (horizon 3333) over 4096 tokens: exp's error repeats at every token"},
    /* slow updates over long sequences (bf16 tier): each token's update is below half a bf16 ulp of the
     * state, so a state carried in bf16 from token to token stops absorbing them (SPEC.md 11.1) */
    {"linear_attn_postnorm", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:uniform(0,1) k:uniform(0,0.25) v:uniform(-0.5,1)", "eps=1e-6", 0, "LongSequence",
     "positive feature maps: the state grows like t, so a state kept in bf16 stops absorbing the updates, "
     "which the normalisation does not hide (v takes both signs)"},
    {"retention", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:uniform(0,1) k:uniform(0,0.25) v:uniform(-0.5,1) g_gamma:const(-1e-3)", NULL, 0, "LongSequence",
     "a decay of exp(-1e-3) with positive features: each update is 1e-3 of the state, below half a bf16 ulp"},
    {"simple_gla", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:uniform(0,1) k:uniform(0,0.25) v:uniform(-0.5,1) g:uniform(-2e-3,0)", NULL, 0, "LongSequence",
     "decays within 2e-3 of 1 with positive features: each update is below half a bf16 ulp of the state"},
    {"gla", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:uniform(0,1) k:uniform(0,0.25) v:uniform(-0.5,1) gk:uniform(-2e-3,0)", NULL, 0, "LongSequence",
     "per-channel decays within 2e-3 of 1 with positive features: each update is below half a bf16 ulp"},
    {"delta_rule", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,0.002) h0:normal(1)", NULL, 0, "LongSequence InitialState",
     "step sizes below 0.002 from a state of size 1: each correction is below half a bf16 ulp of the state"},
    {"gated_delta_rule", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,0.002) g:uniform(-2e-4,0) h0:normal(1)", NULL, 0,
     "LongSequence InitialState",
     "step sizes below 0.002 and decays within 2e-4 of 1 from a state of size 1: each update is below half a "
     "bf16 ulp of the state"},
    {"comba", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,0.002) g:uniform(-2e-4,0) h0:normal(1)", NULL, 0,
     "LongSequence InitialState",
     "step sizes below 0.002 and decays within 2e-4 of 1 from a state of size 1: each update is below half a "
     "bf16 ulp of the state"},
    {"efla", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:normal k:normal(0.35) v:normal beta:uniform(0,0.002) h0:normal(1)", NULL, 0, "LongSequence InitialState",
     "step sizes below 0.002 from a state of size 1: each correction is below half a bf16 ulp of the state"},
    {"mesa_net", "t4096-slow", LACS_TIER_BF16, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:normal k:unit v:normal lambda:uniform(0.25,1.25) beta:uniform(0,1) g:uniform(-2e-3,0)", NULL, 0,
     "LongSequence", "decays within 2e-3 of 1: both states grow to hundreds of updates, each then below half a bf16 "
     "ulp"},
    /* the delta rule's step size */
    {"delta_rule", "beta0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:const(0) h0:normal(0.5)", NULL, 0, "BetaZero InitialState",
     "beta = 0 leaves h0 untouched: beta missing from the erase or the write term shows"},
    {"delta_rule", "beta1", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:const(1)", NULL, 0, "BetaOne", "the plain delta rule"},
    {"delta_rule", "beta2", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(1.9,2)", NULL, 0, "BetaNearTwo",
     "beta near 2: negative eigenvalues, caught by beta clamped to [0, 1]"},
    {"delta_rule", "beta2-raw", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 16, 8), NULL,
     "q:normal k:normal(0.25) v:normal beta:uniform(1.9,2)", NULL, 0, "BetaNearTwo UnnormalizedKeys",
     "beta near 2 with keys of norm near but not equal to 1: an implementation that normalises k"},
    {"gated_delta_rule", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:const(0) h0:normal(0.5)", NULL, 0,
     "ZeroGate InitialState", "g = 0 exactly must equal the delta rule (fla #104)"},
    {"gated_delta_rule", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-30,-10) h0:normal(0.5)", NULL, 0,
     "StrongDecay InitialState", "decays down to e^-30 a step: exp of prefix-sum differences overflows"},
    {"gated_delta_rule", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:mixed_gate h0:normal(0.5)", NULL, 0,
     "MixedGate ChunkBoundary InitialState", "zero, mild and strong gates mixed across chunks"},
    {"gated_delta_rule", "gk", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) gk:uniform(-0.5,0) h0:normal(0.5)", NULL, 0,
     "PerChannelGate InitialState", "KDA's per-channel decay, applied to the state's key side"},
    {"gated_delta_rule", "gk-mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) gk:mixed_gate", NULL, 0, "PerChannelGate MixedGate",
     "per-channel decays mixing 0 and strong values"},
    {"gated_delta_rule", "beta0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:const(0) g:uniform(-0.5,0) h0:normal(0.5)", NULL, 0,
     "BetaZero InitialState", "beta = 0: only the decay acts"},
    {"gated_delta_rule", "beta1", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:const(1) g:uniform(-0.5,0)", NULL, 0, "BetaOne",
     "beta = 1: the erase removes the key's whole component"},
    {"gated_delta_rule", "beta2", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(1.9,2) g:uniform(-0.5,0)", NULL, 0, "BetaNearTwo",
     "negative eigenvalues with a decay"},
    {"gated_delta_rule", "beta2-raw", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 16, 8), NULL,
     "q:normal k:normal(0.25) v:normal beta:uniform(1.9,2) g:uniform(-0.5,0)", NULL, 0,
     "BetaNearTwo UnnormalizedKeys", "un-normalised keys near the edge of stability"},
    {"comba", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:const(0) h0:normal(0.5)", NULL, 0,
     "ZeroGate InitialState", "g = 0: Comba is the delta rule"},
    {"comba", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-30,-10) h0:normal(0.5)", NULL, 0,
     "StrongDecay InitialState", "strong decays: the correction reads the un-decayed state"},
    {"comba", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:mixed_gate", NULL, 0, "MixedGate ChunkBoundary",
     "mixed gates across chunks"},
    {"simple_gla", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal g:const(0) h0:normal(0.5)", NULL, 0, "ZeroGate InitialState",
     "g = 0: linear attention"},
    {"simple_gla", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal g:uniform(-30,-10) h0:normal(0.5)", NULL, 0,
     "StrongDecay InitialState", "decays that underflow within a chunk"},
    {"simple_gla", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal g:mixed_gate", NULL, 0, "MixedGate ChunkBoundary",
     "mixed gates across chunks"},
    {"gla", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal gk:const(0) h0:normal(0.5)", NULL, 0, "ZeroGate InitialState",
     "gk = 0: linear attention"},
    {"gla", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal gk:uniform(-30,-10) h0:normal(0.5)", NULL, 0,
     "StrongDecay InitialState", "per-channel decays that underflow"},
    {"gla", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 8, 8), NULL,
     "q:normal k:normal(0.25) v:normal gk:mixed_gate", NULL, 0, "MixedGate PerChannelGate ChunkBoundary",
     "mixed per-channel gates across chunks"},
    /* EFLA's key norms (E5) */
    {"efla", "tiny-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 8), NULL,
     "q:normal k:unit_pow2(-30,-14) v:normal beta:uniform(0,1) h0:normal(0.5)", NULL, 0,
     "TinyKeyNorm InitialState", "||k|| from 2^-30 to 2^-14: 1 - exp(-x) without expm1 gives 0"},
    {"efla", "tiny-k-extreme", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 1, 16, 8), NULL,
     "q:normal k:unit_pow2(-60,-31) v:normal beta:uniform(0,1)", NULL, 0, "TinyKeyNorm",
     "||k||^2 below binary32's smallest normal: the coefficient must tend to beta"},
    {"efla", "small-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 8), NULL,
     "q:normal k:unit_pow2(-5,-3) v:normal beta:uniform(0,1) h0:normal(0.5)", NULL, 0,
     "UnnormalizedKeys InitialState",
     "||k|| from 2^-5 to 2^-3: an epsilon added to ||k||^2 (EFLA's public code adds 1e-6) changes c by up to 0.1%"},
    {"efla", "large-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 8), NULL,
     "q:normal k:unit_pow2(2,5) v:normal beta:uniform(0,1)", NULL, 0, "LargeKeyNorm",
     "||k|| from 4 to 32: c = 1/||k||^2 (saturated), not beta"},
    {"efla", "beta1", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 16, 8), NULL,
     "q:normal k:normal(0.35) v:normal beta:const(1)", NULL, 0, "BetaOne UnnormalizedKeys",
     "beta = 1 with raw keys: k must not be normalised"},
    /* softmax attention and FoX (H1, H10) */
    {"softmax_attn", "large-logits", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal(10) k:normal(10) v:normal", NULL, 0, "LargeLogits",
     "logits in the hundreds: exp without max subtraction overflows"},
    {"fox", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal g:const(0)", NULL, 0, "ZeroGate", "g = 0: softmax attention"},
    {"fox", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal g:uniform(-30,-10)", NULL, 0, "StrongDecay",
     "strong gates: attention only to the last few tokens"},
    {"fox", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal g:mixed_gate", NULL, 0, "MixedGate ChunkBoundary",
     "mixed gates across key blocks"},
    {"fox", "alibi", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 4, 16, 16), NULL,
     "q:normal k:normal v:normal g_gamma:retnet", NULL, 0, "ALiBi Variant",
     "a constant per-head slope: (i - j) g_gamma"},
    {"fox", "large-logits", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal(10) k:normal(10) v:normal g:uniform(-0.5,0)", NULL, 0, "LargeLogits",
     "logits in the hundreds with a gate"},
    /* DeltaFormer (H11) */
    {"deltaformer", "form-exp", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 16, 16), NULL,
     "q:normal(0.5) k:normal(0.5) v:normal beta:uniform(0,1)", "form=0", 0, "Variant",
     "the documents' form: plain exp, no normalisation"},
    {"deltaformer", "form-fla", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal beta:uniform(0,1)", "form=2", 0, "Variant",
     "fla's form: q, not k, in the first stage"},
    {"deltaformer", "no-beta", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal", NULL, 0, "Variant BetaOne", "beta absent means 1"},
    {"deltaformer", "coupled", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:coupled(0.1) v:normal beta:uniform(0,1)", NULL, 0, "CoupledKeys",
     "nearly parallel keys: B's rows concentrate, the diagonal must stay out of the first stage"},
    {"deltaformer", "coupled-fla", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:coupled(0.1) k:coupled(0.1) v:normal beta:uniform(0,1)", "form=2", 0, "CoupledKeys Variant",
     "coupled queries and keys in fla's form"},
    {"deltaformer", "large-logits", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal(10) k:normal(10) v:normal beta:uniform(0,1)", NULL, 0, "LargeLogits",
     "logits in the hundreds in both stages"},
    /* PaTH (H12-H14) */
    {"path_attn", "beta2", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal w:unit beta:uniform(1.9,2)", NULL, 0, "BetaNearTwo",
     "transitions near reflections: beta clamped to [0, 1] shows"},
    {"path_attn", "w-eq-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:unit v:normal w:copy(k) beta:uniform(0,1)", NULL, 0, "HouseholderEqualsKey",
     "W = K (H13): the product H_{j+1}..H_i reversed or started at j differs"},
    {"path_attn", "reflections", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal w:unit(1.4142135623730951) beta:const(1)", NULL, 0, "ReflectionNorm",
     "||w|| = sqrt 2, beta = 1: each H_t a reflection (H14)"},
    {"path_attn", "gate", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal w:unit beta:uniform(0,2) g:uniform(-0.5,0)", NULL, 0, "Variant",
     "PaTH-FoX: the gate added before the scale"},
    {"path_attn", "beta0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal k:normal v:normal w:unit beta:const(0)", NULL, 0, "BetaZero",
     "beta = 0: softmax attention"},
    {"path_attn", "large-logits", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 16), NULL,
     "q:normal(10) k:normal(10) v:normal w:unit beta:uniform(0,2)", NULL, 0, "LargeLogits",
     "logits in the hundreds"},
    /* MesaNet (H15) */
    {"mesa_net", "ill-conditioned", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 16, 8), NULL,
     "q:normal k:lowrank(3) v:normal lambda:uniform(0.01,0.02) beta:uniform(0,1) g:uniform(-0.5,0)", NULL, 0,
     "IllConditioned", "keys in a 3-dimensional subspace, lambda ~ 0.01: H_t + diag(lambda) nearly singular"},
    {"mesa_net", "h0-kk", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(2, 33, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal lambda:uniform(0.25,1.25) beta:uniform(0,1) g:uniform(-0.5,0) "
     "h0:normal(0.5) h0_kk:psd(1)", NULL, 0, "InitialState", "both initial states"},
    {"mesa_net", "no-gates", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal lambda:uniform(0.25,1.25)", NULL, 0, "Variant",
     "g and beta absent: 0 and 1"},
    {"mesa_net", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal lambda:uniform(0.25,1.25) beta:uniform(0,1) g:uniform(-30,-10)", NULL, 0,
     "StrongDecay", "strong decays: H_t collapses towards the last key"},
    /* RMSNorm (N2, N3) */
    {"rmsnorm", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(64, 128), NULL, "x:normal weight:normal",
     "eps=1e-6", 0, "Basic", "rows of 128 with a weight"},
    {"rmsnorm", "d100", LACS_TIER_BOTH, LACS_SET_CORE, NORM(33, 100), NULL, "x:normal(100)", "eps=1e-5", 0,
     "OddHeadDim", "a width that is not a power of two, no weight"},
    {"rmsnorm", "specials", LACS_TIER_BOTH, LACS_SET_CORE, NORM(24, 1), NULL, "x:specials", "eps=0", 0,
     "IEEESpecials", "rows of one special value each"},
    {"rmsnorm_vjp", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(32, 64), NULL,
     "x:normal dy:normal weight:normal", "eps=1e-6", 0, "Gradient", "dx and dweight"},
    {"rmsnorm_vjp", "no-weight", LACS_TIER_BOTH, LACS_SET_CORE, NORM(33, 100), NULL, "x:normal dy:normal",
     "eps=1e-6", 0, "Gradient Variant", "dx without a weight"},
    /* DyT (N1) */
    {"dyt", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(64, 128), NULL,
     "x:normal(2) alpha:const(0.5) weight:normal bias:normal", NULL, 0, "Basic", "rows with weight and bias"},
    {"dyt", "saturated", LACS_TIER_BOTH, LACS_SET_CORE, NORM(16, 64), NULL,
     "x:normal(30) alpha:const(1) weight:normal bias:normal", NULL, 0, "Basic",
     "tanh saturated (alpha x up to 180): y = +-weight + bias; a tanh computed through exp overflows to NaN"},
    {"dyt", "all-bf16-a0.5", LACS_TIER_BF16, LACS_SET_CORE, NORM(256, 256), NULL, "x:all_bf16 alpha:const(0.5)",
     NULL, 0, "AllBF16", "every bf16 input, alpha = 0.5: tanh's approximation everywhere"},
    {"dyt", "all-bf16-a2", LACS_TIER_BF16, LACS_SET_CORE, NORM(256, 256), NULL, "x:all_bf16 alpha:const(2)",
     NULL, 0, "AllBF16", "every bf16 input, alpha = 2"},
    {"dyt", "specials", LACS_TIER_BOTH, LACS_SET_CORE, NORM(1, 24), NULL, "x:specials alpha:const(1)", NULL, 0,
     "IEEESpecials", "+-0, +-inf, NaN, subnormals, huge values"},
    {"dyt_vjp", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(32, 64), NULL,
     "x:normal(2) dy:normal alpha:const(0.7) weight:normal", NULL, 0, "Gradient", "dx, dalpha, dweight, dbias"},
    {"dyt_vjp", "saturated", LACS_TIER_BOTH, LACS_SET_CORE, NORM(16, 64), NULL,
     "x:normal(30) dy:normal alpha:const(1)", NULL, 0, "Gradient", "tanh saturated: sech^2 underflows"},
    /* DyISRU (N5) */
    {"dyisru", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(64, 128), NULL,
     "x:normal(2) C:const(1) weight:normal bias:normal", NULL, 0, "Basic", "rows with weight and bias"},
    {"dyisru", "all-bf16-c1", LACS_TIER_BF16, LACS_SET_CORE, NORM(256, 256), NULL, "x:all_bf16 C:const(1)", NULL,
     0, "AllBF16", "every bf16 input, C = 1: rsqrt's approximation everywhere"},
    {"dyisru", "all-bf16-c0.01", LACS_TIER_BF16, LACS_SET_CORE, NORM(256, 256), NULL,
     "x:all_bf16 C:const(0.01)", NULL, 0, "AllBF16", "every bf16 input, C = 0.01"},
    {"dyisru", "specials", LACS_TIER_BOTH, LACS_SET_CORE, NORM(1, 24), NULL, "x:specials C:const(0.5)", NULL, 0,
     "IEEESpecials", "x / sqrt(x^2 + C) at the IEEE specials: x^2 overflows for huge x"},
    {"dyisru_vjp", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(32, 64), NULL,
     "x:normal(2) dy:normal C:const(0.5) weight:normal", NULL, 0, "Gradient", "dx, dC, dweight, dbias"},
    /* softcap (N6) */
    {"softcap", "all-bf16-cap30", LACS_TIER_BF16, LACS_SET_CORE, NORM(256, 256), NULL, "x:all_bf16", "cap=30", 0,
     "AllBF16", "every bf16 input, cap = 30 (Gemma 2's final-logit cap)"},
    {"softcap", "all-bf16-cap1", LACS_TIER_BF16, LACS_SET_CORE, NORM(256, 256), NULL, "x:all_bf16", "cap=1", 0,
     "AllBF16", "every bf16 input, cap = 1"},
    {"softcap", "specials", LACS_TIER_BOTH, LACS_SET_CORE, NORM(1, 24), NULL, "x:specials", "cap=30", 0,
     "IEEESpecials", "+-inf to +-cap exactly, subnormals kept"},
    {"softcap", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(64, 128), NULL, "x:normal(20)", "cap=15", 0,
     "Basic", "logits around the cap"},
    {"softcap_vjp", "basic", LACS_TIER_BOTH, LACS_SET_CORE, NORM(32, 64), NULL, "x:normal(20) dy:normal",
     "cap=15", 0, "Gradient", "dx and dcap"},
    /* L2 normalisation (SPEC.md 3) */
    {"l2norm", "sqrt-eps", LACS_TIER_BOTH, LACS_SET_CORE, NORM(64, 128), NULL, "x:normal", "eps=1e-6 convention=0",
     0, "Basic", "fla's x / sqrt(sum x^2 + eps)"},
    {"l2norm", "max-eps", LACS_TIER_BOTH, LACS_SET_CORE, NORM(64, 128), NULL, "x:normal(1e-4)",
     "eps=1e-12 convention=1", 0, "Variant", "torch's x / max(||x||, eps)"},
    {"l2norm_vjp", "sqrt-eps", LACS_TIER_BOTH, LACS_SET_CORE, NORM(32, 64), NULL, "x:normal dy:normal",
     "eps=1e-6 convention=0", 0, "Gradient", "the VJP in fla's convention"},
    {"l2norm_vjp", "max-eps", LACS_TIER_BOTH, LACS_SET_CORE, NORM(32, 64), NULL, "x:normal dy:normal",
     "eps=1e-12 convention=1", 0, "Gradient Variant", "the VJP in torch's convention"},
};

/* ---- the conformance level (SPEC.md 11.7) ----
 * Every case is required (what every correct implementation in the tier must
 * pass) but these, which are strict in the tiers named: a stronger
 * requirement than the tier's accuracy, each with its reason. A name "*"
 * matches every case of the op. */

#define EXACT_PREFIX_SUMS                                                                                   \
    "exact prefix sums: the correction's factor exp(Gq_i - G_{i-1}) is exactly 1 only if the exclusive sum " \
    "is accumulated, not formed as cumsum(g) - g (fla's naive_chunk_comba and chunk_comba), which with "     \
    "decays of -10 to -30 a token is off by u |G_i|, about 1e-4"
#define TINY_KEYS                                                                                            \
    "relative accuracy for tiny key norms: c = -expm1(-x) / x (E5, SPEC.md 4.7) where 1 - exp(-x) cancels; " \
    "these keys' updates are below 2^-14 of the outputs"
#define SATURATION                                                                                           \
    "relative accuracy under saturation: sech^2(alpha x) where tanh rounds to 1 (4e / (1 + e)^2, SPEC.md "   \
    "4.18); 1 - tanh^2, PyTorch autograd's tanh_backward, gives 0"
#define SPECIALS(table)                                                                                      \
    "IEEE specials and overflow-safe forms: +-0, +-inf, NaN, subnormals and values whose square overflows "  \
    "binary32, the IEEE table of " table
#define ALL_BF16(table)                                                                                      \
    "every bf16 bit pattern: the IEEE specials (inf, NaN, subnormals) and the overflow range of the "        \
    "format, the IEEE table of " table

static const struct {
    const char *op, *name;
    lacs_tier_mask tiers;
    const char *reason;
} strict_cases[] = {
    {"comba", "strong", LACS_TIER_FP32, EXACT_PREFIX_SUMS},
    {"efla", "tiny-k", LACS_TIER_BOTH, TINY_KEYS},
    {"efla", "tiny-k-extreme", LACS_TIER_BOTH, TINY_KEYS},
    {"dyt_vjp", "saturated", LACS_TIER_BOTH, SATURATION},
    {"rmsnorm", "specials", LACS_TIER_BOTH, SPECIALS("SPEC.md 4.14 (a zero row with eps = 0 gives a zero row)")},
    {"dyt", "specials", LACS_TIER_BOTH, SPECIALS("SPEC.md 4.15")},
    {"dyisru", "specials", LACS_TIER_BOTH, SPECIALS("SPEC.md 4.16")},
    {"softcap", "specials", LACS_TIER_BOTH, SPECIALS("SPEC.md 4.17")},
    {"dyt", "all-bf16-a0.5", LACS_TIER_BF16, ALL_BF16("SPEC.md 4.15")},
    {"dyt", "all-bf16-a2", LACS_TIER_BF16, ALL_BF16("SPEC.md 4.15")},
    {"dyisru", "all-bf16-c1", LACS_TIER_BF16, ALL_BF16("SPEC.md 4.16")},
    {"dyisru", "all-bf16-c0.01", LACS_TIER_BF16, ALL_BF16("SPEC.md 4.16")},
    {"softcap", "all-bf16-cap30", LACS_TIER_BF16, ALL_BF16("SPEC.md 4.17")},
    {"softcap", "all-bf16-cap1", LACS_TIER_BF16, ALL_BF16("SPEC.md 4.17")},
};

int lacs_case_is_strict(const lacs_case *c, lacs_tier_mask tier, const char **reason)
{
    *reason = NULL;
    for (size_t i = 0; i < sizeof strict_cases / sizeof strict_cases[0]; i++)
        if (strcmp(strict_cases[i].op, c->op) == 0 &&
            (strcmp(strict_cases[i].name, "*") == 0 || strcmp(strict_cases[i].name, c->name) == 0) &&
            (strict_cases[i].tiers & tier)) {
            *reason = strict_cases[i].reason;
            return 1;
        }
    return 0;
}

/* ---- the expanded catalog ---- */

#define MAX_CASES 1024
static lacs_case expanded[MAX_CASES];
static char expanded_inputs[MAX_CASES][256];
static char expanded_params[MAX_CASES][64];
static char expanded_flags[MAX_CASES][96];
static size_t n_expanded;

/* `words` without the word `word` (space-separated). */
static void drop_word(const char *words, const char *word, char *out, size_t size)
{
    out[0] = 0;
    const char *cursor = words, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        if (strlen(word) == len && strncmp(w, word, len) == 0)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%.*s", used ? " " : "", (int)len, w);
    }
}

const lacs_case *lacs_catalog(size_t *count)
{
    if (n_expanded == 0) {
        for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++)
            for (size_t o = 0; o < sizeof sequence_ops / sizeof sequence_ops[0]; o++) {
                if (!(scenarios[s].families & sequence_ops[o].family) || n_expanded >= MAX_CASES)
                    continue;
                lacs_case *c = &expanded[n_expanded];
                const int stateful = sequence_ops[o].family != ATTENTION;
                const char *state = !stateful || !scenarios[s].with_state ? ""
                                    : sequence_ops[o].family == MESA      ? " h0:normal(0.5) h0_kk:psd(1)"
                                                                          : " h0:normal(0.5)";
                snprintf(expanded_inputs[n_expanded], sizeof expanded_inputs[0], "%s%s",
                         sequence_ops[o].inputs, state);
                snprintf(expanded_params[n_expanded], sizeof expanded_params[0], "%s %s",
                         sequence_ops[o].params ? sequence_ops[o].params : "",
                         scenarios[s].params ? scenarios[s].params : "");
                c->op = sequence_ops[o].op;
                c->name = scenarios[s].name;
                c->tiers = LACS_TIER_BOTH;
                c->set = scenarios[s].set;
                c->B = scenarios[s].B;
                c->T = scenarios[s].T;
                c->H = scenarios[s].H;
                c->HV = scenarios[s].HV;
                c->K = scenarios[s].K;
                c->V = scenarios[s].V;
                c->cu_seqlens = scenarios[s].cu_seqlens;
                c->inputs = expanded_inputs[n_expanded];
                c->params = expanded_params[n_expanded];
                c->split = scenarios[s].split;
                /* a stateless op has no initial state to flag */
                drop_word(scenarios[s].flags, stateful ? "" : "InitialState", expanded_flags[n_expanded],
                          sizeof expanded_flags[0]);
                c->flags = expanded_flags[n_expanded];
                c->reason = scenarios[s].reason;
                n_expanded++;
            }
        for (size_t i = 0; i < sizeof particular / sizeof particular[0] && n_expanded < MAX_CASES; i++)
            expanded[n_expanded++] = particular[i];
    }
    *count = n_expanded;
    return expanded;
}
