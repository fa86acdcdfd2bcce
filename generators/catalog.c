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
    {"StateCotangent", "a backward that ignores dht or returns no dh0: the state's cotangent in and out"},
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

typedef struct {
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
} scenario;

static const scenario scenarios[] = {
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
/* ---- the gradients (SPEC.md 4.19): the VJP of each op on sequences ----
 * A VJP case draws its forward's plain inputs (sequence_ops) and the
 * cotangent `do`; a scenario with a state adds h0 and its cotangent dht.
 * Every VJP case is flagged Gradient. */

static const char *const vjp_forwards[] = {
    "linear_attn", "retention", "simple_gla", "gla", "delta_rule", "gated_delta_rule", "comba", "efla",
    "softmax_attn", "fox", "deltaformer", "path_attn",
};

/* Smaller than the forward's: a VJP case stores its inputs, the cotangents
 * and a gradient of each input (with gauges), about three times a forward
 * case's bytes for the same shape. */
static const scenario vjp_scenarios[] = {
    {"t1", RECURRENT | ATTENTION, LACS_SET_CORE, 2, 1, 2, 2, 8, 8, NULL, 1, NULL, 0, "SingleToken InitialState",
     "one token from a given state: the decode step differentiated"},
    {"t64", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 64, 1, 1, 4, 4, NULL, 0, NULL, 0, "ChunkBoundary",
     "exactly one chunk of 64 (two of 32, four of 16)"},
    {"t65", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 65, 1, 1, 4, 4, NULL, 1, NULL, 0, "ChunkBoundary InitialState",
     "one token past a chunk: the cotangent handed back across one boundary"},
    {"t129", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 129, 1, 1, 4, 4, NULL, 1, NULL, 0,
     "ChunkBoundary InitialState", "two chunks and one token: the chunk-boundary terms twice"},
    {"k8-v16", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 33, 1, 2, 8, 16, NULL, 1, NULL, 0, "KNeV InitialState",
     "K != V: the state's cotangent in its orientation"},
    {"hv2h", RECURRENT | ATTENTION, LACS_SET_CORE, 2, 33, 2, 4, 4, 4, NULL, 1, NULL, 0,
     "GroupedValueHeads InitialState", "two value heads per q/k head: dq and dk are sums over them"},
    {"scale", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 33, 2, 2, 8, 4, NULL, 0, "scale=0.3", 0, "CustomScale",
     "a scale other than K^-1/2: dq (and dk) carry it"},
    {"varlen", RECURRENT | ATTENTION, LACS_SET_CORE, 1, 130, 1, 2, 4, 4, "0,0,1,17,17,66,130", 1, NULL, 0,
     "Varlen EmptySequence InitialState",
     "packed sequences of lengths 0, 1, 16, 0, 49, 64: the cotangent reset at each sequence's end"},
    {"carry37", RECURRENT, LACS_SET_CORE, 1, 100, 1, 2, 4, 4, NULL, 1, NULL, 37, "StateCarry",
     "the second part's backward first: its dh0 is the first part's dht (SPEC.md 11.5)"},
    {"carry64", RECURRENT, LACS_SET_CORE, 2, 100, 1, 1, 4, 4, NULL, 1, NULL, 64, "StateCarry ChunkBoundary",
     "a backward split on a chunk boundary"},
    /* the full set: longer, wider, and the rest of the forward's scenarios */
    {"t63", RECURRENT | ATTENTION, LACS_SET_FULL, 1, 63, 1, 1, 8, 8, NULL, 0, NULL, 0, "ChunkBoundary",
     "one token short of a chunk multiple"},
    {"t4096", RECURRENT, LACS_SET_FULL, 1, 4096, 1, 1, 4, 4, NULL, 1, NULL, 0, "LongSequence InitialState",
     "4096 steps backwards: the state's cotangent carried through every token"},
    {"t512", ATTENTION, LACS_SET_FULL, 1, 512, 1, 1, 16, 16, NULL, 0, NULL, 0, "LongSequence",
     "512 tokens: the blocked backward across many key blocks"},
    {"k60-v100", RECURRENT | ATTENTION, LACS_SET_FULL, 1, 24, 1, 1, 60, 100, NULL, 1, NULL, 0,
     "OddHeadDim KNeV InitialState", "head dims that are not powers of two"},
    {"hv4h", RECURRENT | ATTENTION, LACS_SET_FULL, 1, 33, 1, 4, 8, 8, NULL, 1, NULL, 0,
     "GroupedValueHeads InitialState", "four value heads per q/k head"},
    {"b3", RECURRENT | ATTENTION, LACS_SET_FULL, 3, 20, 2, 2, 8, 8, NULL, 1, NULL, 0, "Basic InitialState",
     "a batch of three: batch strides"},
    {"t4096-k32", RECURRENT, LACS_SET_FULL, 1, 4096, 1, 2, 32, 32, NULL, 1, NULL, 0, "LongSequence InitialState",
     "4096 steps at K = V = 32"},
    {"t1024-d64", ATTENTION, LACS_SET_FULL, 1, 1024, 2, 2, 64, 64, NULL, 0, NULL, 0, "LongSequence",
     "1024 tokens at d = 64"},
};

static const lacs_case particular_vjp[] = {
    {"linear_attn_vjp", "t4096-positive", LACS_TIER_BOTH, LACS_SET_FULL, SEQ(1, 4096, 1, 1, 8, 8), NULL,
     "q:uniform(0,1) k:uniform(0,0.25) v:uniform(0,1) do:uniform(0,1)", NULL, 0, "LongSequence Gradient",
     "positive features and cotangents: the state's cotangent grows like T - t"},
    /* the long cases of the core set (every op's t4096 and t512 are in the full set) */
    {"gated_delta_rule_vjp", "t4096", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 4096, 1, 1, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-0.5,0) do:normal h0:normal(0.5) dht:normal(0.5)", NULL,
     0, "LongSequence InitialState StateCotangent Gradient",
     "4096 steps backwards with a decay: dg from every token"},
    {"fox_vjp", "t512", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 512, 1, 1, 8, 8), NULL,
     "q:normal k:normal v:normal g:uniform(-0.5,0) do:normal", NULL, 0, "LongSequence Gradient",
     "512 tokens: the gate's gradient sums over many key blocks"},
    {"delta_rule_vjp", "beta0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:const(0) do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "BetaZero InitialState StateCotangent Gradient",
     "beta = 0: dbeta is all of the gradient the step gets, write and erase terms both"},
    {"delta_rule_vjp", "beta1", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:const(1) do:normal", NULL, 0, "BetaOne Gradient", "the plain delta rule"},
    {"delta_rule_vjp", "beta2", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(1.9,2) do:normal", NULL, 0, "BetaNearTwo Gradient",
     "beta near 2: negative eigenvalues, the cotangent alternates in sign along k"},
    {"delta_rule_vjp", "beta2-raw", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 4), NULL,
     "q:normal k:normal(0.25) v:normal beta:uniform(1.9,2) do:normal", NULL, 0,
     "BetaNearTwo UnnormalizedKeys Gradient", "beta near 2 with raw keys: dk of an implementation that normalises k"},
    {"gated_delta_rule_vjp", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:const(0) do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "ZeroGate InitialState StateCotangent Gradient",
     "g = 0: the delta rule's gradients (fla #104), and dg where the decay is 1"},
    {"gated_delta_rule_vjp", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-30,-10) do:normal h0:normal(0.5) dht:normal(0.5)", NULL,
     0, "StrongDecay InitialState StateCotangent Gradient",
     "decays down to e^-30 a step: the gate's gradient from tiny states"},
    {"gated_delta_rule_vjp", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:mixed_gate do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "MixedGate ChunkBoundary InitialState StateCotangent Gradient",
     "zero, mild and strong gates across chunks: the gate's gradient is a reverse cumulative sum"},
    {"gated_delta_rule_vjp", "gk", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) gk:uniform(-0.5,0) do:normal h0:normal(0.5) dht:normal(0.5)", NULL,
     0, "PerChannelGate InitialState StateCotangent Gradient", "KDA's per-channel decay: dgk per key channel"},
    {"gated_delta_rule_vjp", "gk-mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) gk:mixed_gate do:normal", NULL, 0,
     "PerChannelGate MixedGate Gradient", "per-channel decays mixing 0 and strong values"},
    {"gated_delta_rule_vjp", "beta2", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(1.9,2) g:uniform(-0.5,0) do:normal", NULL, 0, "BetaNearTwo Gradient",
     "negative eigenvalues with a decay"},
    {"comba_vjp", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:const(0) do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "ZeroGate InitialState StateCotangent Gradient", "g = 0: Comba is the delta rule"},
    {"comba_vjp", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-30,-10) do:normal h0:normal(0.5) dht:normal(0.5)", NULL,
     0, "StrongDecay InitialState StateCotangent Gradient",
     "strong decays: the correction's gradient reaches the un-decayed state"},
    {"comba_vjp", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 4, 4), NULL,
     "q:normal k:unit v:normal beta:uniform(0,1) g:mixed_gate do:normal", NULL, 0, "MixedGate ChunkBoundary Gradient",
     "mixed gates across chunks"},
    {"simple_gla_vjp", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:normal(0.25) v:normal g:uniform(-30,-10) do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "StrongDecay InitialState StateCotangent Gradient", "decays that underflow within a chunk"},
    {"simple_gla_vjp", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 4, 4), NULL,
     "q:normal k:normal(0.25) v:normal g:mixed_gate do:normal", NULL, 0, "MixedGate ChunkBoundary Gradient",
     "mixed gates across chunks: the gate's gradient is a reverse cumulative sum"},
    {"gla_vjp", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 4, 4), NULL,
     "q:normal k:normal(0.25) v:normal gk:uniform(-30,-10) do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "StrongDecay InitialState StateCotangent Gradient", "per-channel decays that underflow"},
    {"gla_vjp", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 4, 4), NULL,
     "q:normal k:normal(0.25) v:normal gk:mixed_gate do:normal", NULL, 0,
     "MixedGate PerChannelGate ChunkBoundary Gradient", "mixed per-channel gates across chunks"},
    {"efla_vjp", "tiny-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 4), NULL,
     "q:normal k:unit_pow2(-30,-14) v:normal beta:uniform(0,1) do:normal h0:normal(0.5) dht:normal(0.5)", NULL, 0,
     "TinyKeyNorm InitialState StateCotangent Gradient",
     "||k|| from 2^-30 to 2^-14: dc/dbeta -> 1, dc/d||k||^2 -> -beta^2 / 2 without cancelling"},
    {"efla_vjp", "large-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 4), NULL,
     "q:normal k:unit_pow2(2,5) v:normal beta:uniform(0,1) do:normal", NULL, 0, "LargeKeyNorm Gradient",
     "||k|| from 4 to 32: c saturated at 1/||k||^2, dc/dbeta underflows"},
    {"efla_vjp", "beta1", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 4), NULL,
     "q:normal k:normal(0.35) v:normal beta:const(1) do:normal", NULL, 0, "BetaOne UnnormalizedKeys Gradient",
     "beta = 1 with raw keys: dk through c(beta, ||k||^2)"},
    {"softmax_attn_vjp", "large-logits", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal(10) k:normal(10) v:normal do:normal", NULL, 0, "LargeLogits Gradient",
     "logits in the hundreds: the softmax's adjoint from saturated weights"},
    {"fox_vjp", "g0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal g:const(0) do:normal", NULL, 0, "ZeroGate Gradient",
     "g = 0: softmax attention, and dg where the gate is 0"},
    {"fox_vjp", "strong", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal g:uniform(-30,-10) do:normal", NULL, 0, "StrongDecay Gradient",
     "strong gates: attention to the last few tokens"},
    {"fox_vjp", "mixed", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 129, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal g:mixed_gate do:normal", NULL, 0, "MixedGate ChunkBoundary Gradient",
     "mixed gates across key blocks: dg is a reverse cumulative sum over the pairs"},
    {"fox_vjp", "alibi", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 4, 8, 8), NULL,
     "q:normal k:normal v:normal g_gamma:retnet do:normal", NULL, 0, "ALiBi Variant Gradient",
     "a constant per-head slope: dg_gamma sums (i - j) dl_ij"},
    {"fox_vjp", "large-logits", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal(10) k:normal(10) v:normal g:uniform(-0.5,0) do:normal", NULL, 0, "LargeLogits Gradient",
     "logits in the hundreds with a gate"},
    {"deltaformer_vjp", "form-exp", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 33, 1, 2, 8, 8), NULL,
     "q:normal(0.5) k:normal(0.5) v:normal beta:uniform(0,1) do:normal", "form=0", 0, "Variant Gradient",
     "the documents' form: the gradient of plain exp"},
    {"deltaformer_vjp", "form-fla", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal beta:uniform(0,1) do:normal", "form=2", 0, "Variant Gradient",
     "fla's form: the first stage's gradient reaches q, not k"},
    {"deltaformer_vjp", "no-beta", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal do:normal", NULL, 0, "Variant BetaOne Gradient", "beta absent means 1"},
    {"deltaformer_vjp", "coupled", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:coupled(0.1) v:normal beta:uniform(0,1) do:normal", NULL, 0, "CoupledKeys Gradient",
     "nearly parallel keys: large B, its gradient concentrated"},
    {"path_attn_vjp", "beta2", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal w:unit beta:uniform(1.9,2) do:normal", NULL, 0, "BetaNearTwo Gradient",
     "transitions near reflections"},
    {"path_attn_vjp", "w-eq-k", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:unit v:normal w:copy(k) beta:uniform(0,1) do:normal", NULL, 0, "HouseholderEqualsKey Gradient",
     "W = K (H13): dk and dw of the same vectors"},
    {"path_attn_vjp", "reflections", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal w:unit(1.4142135623730951) beta:const(1) do:normal", NULL, 0,
     "ReflectionNorm Gradient", "||w|| = sqrt 2, beta = 1: each H_t a reflection (H14)"},
    {"path_attn_vjp", "gate", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal w:unit beta:uniform(0,2) g:uniform(-0.5,0) do:normal", NULL, 0, "Variant Gradient",
     "PaTH-FoX: dg carries the scale (the gate is inside it)"},
    {"path_attn_vjp", "beta0", LACS_TIER_BOTH, LACS_SET_CORE, SEQ(1, 65, 1, 2, 8, 8), NULL,
     "q:normal k:normal v:normal w:unit beta:const(0) do:normal", NULL, 0, "BetaZero Gradient",
     "beta = 0: softmax attention, dw = 0 and dbeta still not"},
};

/* ---- the expanded catalog ---- */

#define MAX_CASES 1024
static lacs_case expanded[MAX_CASES];
static char expanded_inputs[MAX_CASES][256];
static char expanded_params[MAX_CASES][64];
static char expanded_flags[MAX_CASES][128];
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

/* Each VJP scenario for the VJP of each op of its families: the forward's
 * plain inputs, `do`, and with a state h0 and `dht`; the flags plus
 * Gradient (and StateCotangent with a state). */
static void expand_vjp_scenarios(void)
{
    static char vjp_names[sizeof vjp_forwards / sizeof vjp_forwards[0]][48];
    for (size_t s = 0; s < sizeof vjp_scenarios / sizeof vjp_scenarios[0]; s++)
        for (size_t f = 0; f < sizeof vjp_forwards / sizeof vjp_forwards[0]; f++) {
            size_t o = 0;
            while (strcmp(sequence_ops[o].op, vjp_forwards[f]) != 0)
                o++;
            const scenario *sc = &vjp_scenarios[s];
            snprintf(vjp_names[f], sizeof vjp_names[f], "%s_vjp", vjp_forwards[f]);
            int replaced = 0; /* by a particular case of the same name (the core's long cases) */
            for (size_t i = 0; i < sizeof particular_vjp / sizeof particular_vjp[0]; i++)
                replaced |= strcmp(particular_vjp[i].op, vjp_names[f]) == 0 && strcmp(particular_vjp[i].name, sc->name) == 0;
            if (!(sc->families & sequence_ops[o].family) || replaced || n_expanded >= MAX_CASES)
                continue;
            lacs_case *c = &expanded[n_expanded];
            const int state = sequence_ops[o].family != ATTENTION && sc->with_state;
            snprintf(expanded_inputs[n_expanded], sizeof expanded_inputs[0], "%s do:normal%s", sequence_ops[o].inputs,
                     state ? " h0:normal(0.5) dht:normal(0.5)" : "");
            snprintf(expanded_params[n_expanded], sizeof expanded_params[0], "%s %s",
                     sequence_ops[o].params ? sequence_ops[o].params : "", sc->params ? sc->params : "");
            char flags[96];
            drop_word(sc->flags, state ? "" : "InitialState", flags, sizeof flags);
            snprintf(expanded_flags[n_expanded], sizeof expanded_flags[0], "%s%s Gradient", flags,
                     state ? " StateCotangent" : "");
            *c = (lacs_case){.op = vjp_names[f], .name = sc->name, .tiers = LACS_TIER_BOTH, .set = sc->set,
                             .B = sc->B, .T = sc->T, .H = sc->H, .HV = sc->HV, .K = sc->K, .V = sc->V,
                             .cu_seqlens = sc->cu_seqlens, .inputs = expanded_inputs[n_expanded],
                             .params = expanded_params[n_expanded], .split = sc->split,
                             .flags = expanded_flags[n_expanded], .reason = sc->reason};
            n_expanded++;
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
        expand_vjp_scenarios();
        for (size_t i = 0; i < sizeof particular_vjp / sizeof particular_vjp[0] && n_expanded < MAX_CASES; i++)
            expanded[n_expanded++] = particular_vjp[i];
    }
    *count = n_expanded;
    return expanded;
}
