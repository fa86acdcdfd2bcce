/* Shape and input checks shared by every op (SPEC.md section 2).
 * Compiled once: dims and inputs are the same in both precisions. */
#include <math.h>
#include <stddef.h>

#include "internal.h"

int64_t lacs_internal_sequence_count(const lacs_dims *d)
{
    return d->cu_seqlens ? d->N : d->B;
}

static int check_dims(const char *op, const lacs_dims *d)
{
    if (d->B < 0 || d->T < 0)
        return lacs_internal_error(LACS_ERR_SHAPE, op, "B = %lld and T = %lld must be >= 0",
                                   (long long)d->B, (long long)d->T);
    if (d->H < 1 || d->HV < 1 || d->K < 1 || d->V < 1)
        return lacs_internal_error(LACS_ERR_SHAPE, op,
                                   "H = %lld, HV = %lld, K = %lld, V = %lld must all be >= 1",
                                   (long long)d->H, (long long)d->HV, (long long)d->K,
                                   (long long)d->V);
    if (d->HV % d->H != 0)
        return lacs_internal_error(LACS_ERR_SHAPE, op,
                                   "HV = %lld is not a multiple of H = %lld (value head i reads "
                                   "q/k head i / (HV / H))",
                                   (long long)d->HV, (long long)d->H);
    if (!d->cu_seqlens)
        return LACS_OK;
    if (d->B != 1)
        return lacs_internal_error(LACS_ERR_VARLEN, op, "cu_seqlens needs B = 1, got B = %lld",
                                   (long long)d->B);
    if (d->N < 0)
        return lacs_internal_error(LACS_ERR_VARLEN, op, "N = %lld sequences must be >= 0",
                                   (long long)d->N);
    if (d->cu_seqlens[0] != 0)
        return lacs_internal_error(LACS_ERR_VARLEN, op, "cu_seqlens[0] = %lld, must be 0",
                                   (long long)d->cu_seqlens[0]);
    for (int64_t n = 0; n < d->N; n++)
        if (d->cu_seqlens[n + 1] < d->cu_seqlens[n])
            return lacs_internal_error(LACS_ERR_VARLEN, op,
                                       "cu_seqlens decreases at %lld: %lld then %lld",
                                       (long long)n, (long long)d->cu_seqlens[n],
                                       (long long)d->cu_seqlens[n + 1]);
    if (d->cu_seqlens[d->N] != d->T)
        return lacs_internal_error(LACS_ERR_VARLEN, op, "cu_seqlens[N] = %lld, must equal T = %lld",
                                   (long long)d->cu_seqlens[d->N], (long long)d->T);
    return LACS_OK;
}

static int check_one_input(const char *op, const char *name, const void *given, unsigned bit,
                           unsigned required, unsigned optional)
{
    if ((required & bit) && !given)
        return lacs_internal_error(LACS_ERR_INPUT, op, "input '%s' is required", name);
    if (!((required | optional) & bit) && given)
        return lacs_internal_error(LACS_ERR_INPUT, op, "input '%s' is given but %s does not read it",
                                   name, op);
    return LACS_OK;
}

int lacs_internal_validate(const char *op, const lacs_dims *d, const lacs_inputs *in,
                           unsigned required, unsigned optional)
{
    if (!d || !in)
        return lacs_internal_error(LACS_ERR_INPUT, op, "dims and inputs must not be NULL");
    int rc = check_dims(op, d);
    if (rc)
        return rc;
    if (!in->q || !in->k || !in->v)
        return lacs_internal_error(LACS_ERR_INPUT, op, "inputs 'q', 'k' and 'v' are required");
    const struct {
        const char *name;
        const void *given;
        unsigned bit;
    } table[] = {
        {"beta", in->beta, LACS_READS_BETA},          {"g", in->g, LACS_READS_G},
        {"gk", in->gk, LACS_READS_GK},                {"g_gamma", in->g_gamma, LACS_READS_G_GAMMA},
        {"h0", in->h0, LACS_READS_H0},                {"w", in->w, LACS_READS_W},
        {"lambda", in->lambda, LACS_READS_LAMBDA},    {"h0_kk", in->h0_kk, LACS_READS_H0_KK},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        rc = check_one_input(op, table[i].name, table[i].given, table[i].bit, required, optional);
        if (rc)
            return rc;
    }
    if (!isfinite(in->scale))
        return lacs_internal_error(LACS_ERR_PARAM, op, "scale = %g must be finite", in->scale);
    return LACS_OK;
}

int lacs_internal_check_exactly_one(const char *op, const void *a, const char *a_name, const void *b,
                                     const char *b_name)
{
    if (!a == !b)
        return lacs_internal_error(LACS_ERR_INPUT, op, "exactly one of %s and %s is required, got %s",
                                   a_name, b_name, a ? "both" : "neither");
    return LACS_OK;
}

int lacs_internal_check_beta_nonnegative(const char *op, const lacs_dims *d, const lacs_inputs *in,
                                         const char *why)
{
    const int64_t count = d->B * d->T * d->HV;
    for (int64_t i = 0; i < count; i++)
        if (!(in->beta[i] >= 0))
            return lacs_internal_error(LACS_ERR_PARAM, op,
                                       "beta[%lld] = %g must be >= 0: %s",
                                       (long long)i, in->beta[i], why);
    return LACS_OK;
}
