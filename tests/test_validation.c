/* Bad input gets a clear error naming the op and the problem, never a crash
 * (SPEC.md 2): shapes, cu_seqlens, inputs an op needs or would ignore, domains. */
#include <criterion/criterion.h>
#include <string.h>

#include "support.h"

static double q[64], k[64], v[64], gates[64], h0[512], o[64], ht[512];

static void expect_error(int rc, int code, const char *needle)
{
    cr_expect_eq(rc, code, "expected error %d, got %d (%s)", code, rc, lacs_last_error());
    cr_expect(strstr(lacs_last_error(), needle) != NULL, "message \"%s\" does not mention \"%s\"",
              lacs_last_error(), needle);
}

Test(validation, missing_and_unread_inputs)
{
    const lacs_dims d = {.B = 1, .T = 2, .H = 1, .HV = 1, .K = 4, .V = 4};
    lacs_inputs in = {.q = q, .k = k, .v = v, .scale = 1};
    expect_error(lacs_ref_delta_rule(&d, &in, o, ht), LACS_ERR_INPUT, "delta_rule: input 'beta' is required");
    in.beta = gates;
    in.g = gates;
    expect_error(lacs_ref_delta_rule(&d, &in, o, ht), LACS_ERR_INPUT, "'g' is given but delta_rule does not read it");
    in.gk = gates;
    expect_error(lacs_ref_gated_delta_rule(&d, &in, o, ht), LACS_ERR_INPUT, "exactly one of 'g'");
    in.g = in.gk = NULL;
    expect_error(lacs_ref_gated_delta_rule(&d, &in, o, ht), LACS_ERR_INPUT, "got neither");
    expect_error(lacs_ref_comba(&d, &in, o, ht), LACS_ERR_INPUT, "comba: input 'g' is required");
    in.beta = NULL;
    expect_error(lacs_ref_retention(&d, &in, o, ht), LACS_ERR_INPUT, "'g_gamma' is required");
    in.h0 = h0;
    expect_error(lacs_ref_softmax_attn(&d, &in, o), LACS_ERR_INPUT, "'h0' is given but softmax_attn");
    in.h0 = NULL;
    in.q = NULL;
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_INPUT, "'q', 'k' and 'v' are required");
    expect_error(lacs_ref_linear_attn(&d, NULL, o, ht), LACS_ERR_INPUT, "must not be NULL");
}

Test(validation, shapes)
{
    const lacs_inputs in = {.q = q, .k = k, .v = v, .scale = 1};
    lacs_dims d = {.B = 1, .T = 2, .H = 2, .HV = 3, .K = 4, .V = 4};
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_SHAPE, "HV = 3 is not a multiple of H = 2");
    d.HV = 2;
    d.K = 0;
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_SHAPE, "K = 0");
    d.K = 4;
    d.T = -1;
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_SHAPE, "T = -1");
}

Test(validation, cu_seqlens)
{
    const lacs_inputs in = {.q = q, .k = k, .v = v, .scale = 1};
    int64_t cu[] = {0, 3, 2, 4};
    lacs_dims d = {.B = 2, .T = 4, .H = 1, .HV = 1, .K = 4, .V = 4, .cu_seqlens = cu, .N = 3};
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_VARLEN, "needs B = 1");
    d.B = 1;
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_VARLEN, "decreases at 1");
    cu[2] = 3;
    cu[3] = 5;
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_VARLEN, "must equal T = 4");
    cu[0] = 1;
    expect_error(lacs_ref_linear_attn(&d, &in, o, ht), LACS_ERR_VARLEN, "cu_seqlens[0] = 1");
    cu[0] = 0;
    cu[3] = 4;
    cr_expect_eq(lacs_ref_linear_attn(&d, &in, o, ht), LACS_OK, "%s", lacs_last_error());
}

Test(validation, parameter_domains)
{
    const lacs_dims d = {.B = 1, .T = 2, .H = 1, .HV = 1, .K = 4, .V = 4};
    double beta[2] = {0.5, -0.1};
    lacs_inputs in = {.q = q, .k = k, .v = v, .beta = beta, .scale = 1};
    cr_expect_eq(lacs_ref_delta_rule(&d, &in, o, ht), LACS_OK, "the recurrent form takes any beta");
    expect_error(lacs_ref_delta_rule_ut(&d, &in, 0, o, ht), LACS_ERR_PARAM, "must be >= 0");
    expect_error(lacs_ref_delta_rule_matrix(&d, &in, o, ht), LACS_ERR_PARAM, "beta[1] = -0.1");
    beta[1] = 0.2;
    expect_error(lacs_ref_delta_rule_ut(&d, &in, -3, o, ht), LACS_ERR_PARAM, "chunk = -3");
    in.scale = 1.0 / 0.0;
    expect_error(lacs_ref_delta_rule(&d, &in, o, ht), LACS_ERR_PARAM, "scale = inf");
    in.scale = 1;
    in.beta = NULL;
    in.eps = -1;
    expect_error(lacs_ref_linear_attn_postnorm(&d, &in, o, ht), LACS_ERR_PARAM, "eps = -1");
    expect_error(lacs_ref_l2norm(q, 1, 4, -1, LACS_L2NORM_SQRT_EPS, o), LACS_ERR_PARAM, "l2norm: eps = -1");
    expect_error(lacs_ref_l2norm(q, 1, 4, 0, (lacs_l2norm_convention)7, o), LACS_ERR_PARAM, "unknown convention 7");
}
