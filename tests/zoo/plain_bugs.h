/* The bugs of plain_f32 (tests/zoo/BUGS.md is their catalogue: op, what is
 * wrong, the real-world bug it models, the cases that catch it).
 *
 * A bug is chosen by the environment variable LACS_ZOO_BUG=<name>; unset or
 * "none" runs the plugin without bugs, a legitimate member of the zoo. Each bug
 * is one flag tested at the one spot of plain_f32.c where the mistake would be
 * written, so that the buggy plugin is the correct code with the smallest
 * plausible change. A bug changes only the ops that reach its spot; every other
 * op stays correct.
 */
#ifndef PLAIN_BUGS_H
#define PLAIN_BUGS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum {
    BUG_NONE = 0,
    /* the per-head driver: which q/k head, which initial state, what is written back */
    BUG_GVA_TILED,                /* value head hv reads q/k head hv % H, not hv / (HV / H) (SPEC 2.2) */
    BUG_H0_IGNORED,               /* the initial states are never read: zeros */
    BUG_VARLEN_NO_RESET,          /* packed sequences not separated: state carried on, attention across */
    BUG_HT_TRANSPOSED,            /* the final state written as [V, K] */
    BUG_SCALE_MISSING,            /* scale never applied */
    BUG_SCALE_HARDCODED,          /* scale = K^-1/2 whatever the parameter says */
    /* the recurrences' time loop */
    BUG_READOUT_BEFORE_UPDATE,    /* o_t = scale h_{t-1}^T q_t */
    BUG_CAUSAL_LEAK,              /* o_t sees token t + 1 */
    BUG_CHUNK_STATE_DROPPED,      /* the state reset to zero every 64 tokens */
    BUG_BF16_STATE_EVERY_STEP,    /* the state rounded to bf16 after every token */
    /* decays (SPEC 2.4) */
    BUG_LOG2_GATES,               /* alpha = 2^g, not e^g */
    BUG_G_AS_FACTOR,              /* alpha = g: the log gate used as the factor */
    BUG_H0_DECAY_SKIPPED,         /* the first token's decay not applied to h0 */
    BUG_DECAY_AFTER_WRITE,        /* H4 as h_t = D_t (h_{t-1} + k_t v_t^T) */
    BUG_GK_ON_VALUE_DIM,          /* the per-channel decay applied along V (h diag(a), not diag(a) h) */
    /* the delta family (SPEC 4.4-4.7) */
    BUG_DELTA_BETA_ERASE,         /* h + k (beta v - h^T k)^T: beta missing from the erase term */
    BUG_DELTA_BETA_WRITE,         /* h + k (v - beta h^T k)^T: beta missing from the write term */
    BUG_GDN_DECAY_ON_WRITE,       /* alpha ((I - beta k k^T) h + beta k v^T) */
    BUG_COMBA_READS_DECAYED_STATE,/* Comba's correction reads exp(g) h_{t-1} (the GDN order) */
    BUG_BETA_CLAMPED,             /* beta clamped to [0, 1], as if it were always a sigmoid */
    BUG_DELTA_NORMALIZED_K,       /* delta_rule, gated_delta_rule, comba normalise k themselves */
    BUG_EFLA_NO_EXPM1,            /* c = (1 - exp(-beta ||k||^2)) / ||k||^2 in float */
    BUG_EFLA_EPSILON_GUARD,       /* c = -expm1(-beta ||k||^2) / (||k||^2 + 1e-6) (EFLA's public code) */
    BUG_EFLA_ETA_FOR_C,           /* c = beta: the plain delta rule */
    BUG_EFLA_NORMALIZED_K,        /* EFLA normalises k itself */
    /* linear_attn_postnorm (H3) */
    BUG_POSTNORM_EPS_OUTSIDE_SQRT,/* x / (sqrt(mean x^2) + eps) */
    BUG_POSTNORM_L2_NOT_RMS,      /* x / sqrt(sum x^2 + eps): the L2 norm, not the RMS */
    /* attention forms (SPEC 4.8, 4.10-4.12) */
    BUG_SOFTMAX_NO_MAX,           /* exp(l) / sum exp(l) without subtracting the row maximum */
    BUG_FOX_GATE_OFF_BY_ONE,      /* log Gamma_ij = sum_{tau=j..i} g_tau, one gate too many */
    BUG_DELTAFORMER_DIAG_FIRST_STAGE,   /* B over j <= i: the diagonal in the strictly causal stage */
    BUG_DELTAFORMER_WRONG_BETA_SIDE,    /* beta_j (the key's) instead of beta_i (the row's) */
    BUG_DELTAFORMER_FLA_READS_K,        /* fla's form with k_i, not q_i, in the first stage */
    BUG_PATH_REVERSED,            /* R_ij = H_{j+1} ... H_i, the product in the reversed order */
    BUG_PATH_OFF_BY_ONE,          /* R_ij = H_i ... H_j, one transition too many */
    BUG_PATH_GATE_AFTER_SCALE,    /* PaTH-FoX with FoX's gate placement: scale s + G_i - G_j */
    /* mesa_net (SPEC 4.13) */
    BUG_MESA_NO_H0_KK,            /* the key-key state starts from zero though h0_kk is given */
    BUG_MESA_LAMBDA_IN_PLACE,     /* diag(lambda) added to the carried state H_t, not to a copy */
} plain_bug;

typedef struct {
    plain_bug bug;
    const char *name; /* the value of LACS_ZOO_BUG */
} plain_bug_name;

static const plain_bug_name plain_bug_names[] = {
    {BUG_GVA_TILED, "gva_tiled"},
    {BUG_H0_IGNORED, "h0_ignored"},
    {BUG_VARLEN_NO_RESET, "varlen_no_reset"},
    {BUG_HT_TRANSPOSED, "ht_transposed"},
    {BUG_SCALE_MISSING, "scale_missing"},
    {BUG_SCALE_HARDCODED, "scale_hardcoded"},
    {BUG_READOUT_BEFORE_UPDATE, "readout_before_update"},
    {BUG_CAUSAL_LEAK, "causal_leak"},
    {BUG_CHUNK_STATE_DROPPED, "chunk_state_dropped"},
    {BUG_BF16_STATE_EVERY_STEP, "bf16_state_every_step"},
    {BUG_LOG2_GATES, "log2_gates"},
    {BUG_G_AS_FACTOR, "g_as_factor"},
    {BUG_H0_DECAY_SKIPPED, "h0_decay_skipped"},
    {BUG_DECAY_AFTER_WRITE, "decay_after_write"},
    {BUG_GK_ON_VALUE_DIM, "gk_on_value_dim"},
    {BUG_DELTA_BETA_ERASE, "delta_beta_erase"},
    {BUG_DELTA_BETA_WRITE, "delta_beta_write"},
    {BUG_GDN_DECAY_ON_WRITE, "gdn_decay_on_write"},
    {BUG_COMBA_READS_DECAYED_STATE, "comba_reads_decayed_state"},
    {BUG_BETA_CLAMPED, "beta_clamped"},
    {BUG_DELTA_NORMALIZED_K, "delta_normalized_k"},
    {BUG_EFLA_NO_EXPM1, "efla_no_expm1"},
    {BUG_EFLA_EPSILON_GUARD, "efla_epsilon_guard"},
    {BUG_EFLA_ETA_FOR_C, "efla_eta_for_c"},
    {BUG_EFLA_NORMALIZED_K, "efla_normalized_k"},
    {BUG_POSTNORM_EPS_OUTSIDE_SQRT, "postnorm_eps_outside_sqrt"},
    {BUG_POSTNORM_L2_NOT_RMS, "postnorm_l2_not_rms"},
    {BUG_SOFTMAX_NO_MAX, "softmax_no_max"},
    {BUG_FOX_GATE_OFF_BY_ONE, "fox_gate_off_by_one"},
    {BUG_DELTAFORMER_DIAG_FIRST_STAGE, "deltaformer_diag_first_stage"},
    {BUG_DELTAFORMER_WRONG_BETA_SIDE, "deltaformer_wrong_beta_side"},
    {BUG_DELTAFORMER_FLA_READS_K, "deltaformer_fla_reads_k"},
    {BUG_PATH_REVERSED, "path_reversed"},
    {BUG_PATH_OFF_BY_ONE, "path_off_by_one"},
    {BUG_PATH_GATE_AFTER_SCALE, "path_gate_after_scale"},
    {BUG_MESA_NO_H0_KK, "mesa_no_h0_kk"},
    {BUG_MESA_LAMBDA_IN_PLACE, "mesa_lambda_in_place"},
};

/* The bug LACS_ZOO_BUG names. An unknown name is an error (a typo must not
 * quietly run the correct code and look like an uncaught bug): -1, with a
 * message listing the names. */
static int plain_bug_from_environment(const char *plugin, plain_bug *bug)
{
    const char *name = getenv("LACS_ZOO_BUG");
    *bug = BUG_NONE;
    if (!name || !*name || strcmp(name, "none") == 0)
        return 0;
    const size_t count = sizeof plain_bug_names / sizeof plain_bug_names[0];
    for (size_t i = 0; i < count; i++)
        if (strcmp(name, plain_bug_names[i].name) == 0) {
            *bug = plain_bug_names[i].bug;
            return 0;
        }
    fprintf(stderr, "%s: LACS_ZOO_BUG=%s is not one of this plugin's bugs:", plugin, name);
    for (size_t i = 0; i < count; i++)
        fprintf(stderr, " %s", plain_bug_names[i].name);
    fprintf(stderr, " (or none)\n");
    return -1;
}

#endif
