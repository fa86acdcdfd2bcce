/* The reference's checks of a call (reference/validate.c): the dims, the
 * varlen offsets and which inputs an op reads. Shared with the built-in
 * implementations (optimized/validate.c, optimized/cpu/attention.c), which
 * must refuse exactly what the reference refuses, with the same words.
 * Internal to liblacs: not installed.
 */
#ifndef LACS_REFERENCE_VALIDATE_H
#define LACS_REFERENCE_VALIDATE_H

#include <stdint.h>

#include "lacs/types.h"

/* Which inputs an op reads. */
enum {
    LACS_READS_BETA = 1u << 0,
    LACS_READS_G = 1u << 1,
    LACS_READS_GK = 1u << 2,
    LACS_READS_G_GAMMA = 1u << 3,
    LACS_READS_H0 = 1u << 4,
    LACS_READS_W = 1u << 5,
    LACS_READS_LAMBDA = 1u << 6,
    LACS_READS_H0_KK = 1u << 7
};
/* Checks dims, cu_seqlens and that the inputs given are exactly those the op
 * reads (`required` must be given, `optional` may be, nothing else). */
int lacs_internal_validate(const char *op, const lacs_dims *d, const lacs_inputs *in,
                           unsigned required, unsigned optional);
/* Two inputs of which an op reads exactly one (gated_delta_rule's g or gk,
 * fox's g or g_gamma): LACS_ERR_INPUT naming both when neither or both are given. */
int lacs_internal_check_exactly_one(const char *op, const void *a, const char *a_name, const void *b,
                                     const char *b_name);
/* Every beta must be >= 0 (the absorbed forms H7, H9, H12 take sqrt(beta));
 * `why` ends the error message. */
int lacs_internal_check_beta_nonnegative(const char *op, const lacs_dims *d, const lacs_inputs *in,
                                         const char *why);
/* Number of sequences: B, or N with cu_seqlens. */
int64_t lacs_internal_sequence_count(const lacs_dims *d);

#endif
