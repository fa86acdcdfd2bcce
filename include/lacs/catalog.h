/* lacs: the case catalog of the golden vectors and how a case becomes a
 * vector file (SPEC.md 10.3-10.5).
 *
 * One declarative table (generators/catalog.c): each row is an op, a shape,
 * a recipe for each input, the flags it carries and the reason it exists.
 * A row expands to one case per tier it names; the case's id is
 * `<op>-<tier>-<name>` and its seed the top 53 bits of the FNV-1a hash of
 * the id (exact as a JSON number).
 */
#ifndef LACS_CATALOG_H
#define LACS_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LACS_GENERATOR_VERSION "4"
/* The largest normwise difference allowed between a golden and its long
 * double recomputation (SPEC.md 10.4). */
#define LACS_CERTIFY_BOUND 1e-12
/* The most sequences a varlen case (cu_seqlens) may pack. */
#define LACS_CASE_MAX_SEQUENCES 1024

typedef enum { LACS_TIER_FP32 = 1, LACS_TIER_BF16 = 2, LACS_TIER_BOTH = 3 } lacs_tier_mask;
typedef enum { LACS_SET_CORE = 0, LACS_SET_FULL = 1 } lacs_case_set;

typedef struct {
    const char *op;
    const char *name;        /* the id's last part, e.g. "t65-hv2h" */
    lacs_tier_mask tiers;
    lacs_case_set set;
    int64_t B, T, H, HV, K, V; /* ops on sequences */
    int64_t rows, dim;       /* the norms: x [rows, dim] */
    const char *cu_seqlens;  /* varlen offsets "0,0,1,40" (B = 1), or NULL */
    const char *inputs;      /* "q:normal k:unit v:normal beta:uniform(0,1)" (SPEC.md 10.3) */
    const char *params;      /* "scale=0.5 form=1", or NULL */
    int64_t split;           /* state carry: the first part's length, or 0 */
    const char *flags;       /* space-separated flag names (SPEC.md 10.5) */
    const char *reason;
} lacs_case;

const lacs_case *lacs_catalog(size_t *count);

/* The conformance level of case `c` in `tier` (SPEC.md 11.7): 1 if it is
 * strict there (a stronger requirement than the tier's; *reason says which),
 * 0 if required (*reason NULL). The strict cases are one table in catalog.c. */
int lacs_case_is_strict(const lacs_case *c, lacs_tier_mask tier, const char **reason);

/* The flags of SPEC.md 10.5, each with the bug it catches. */
typedef struct {
    const char *name;
    const char *catches;
} lacs_flag_info;
const lacs_flag_info *lacs_flags(size_t *count);

/* One tier of one case, built (its tensors' names and shapes point into the
 * struct itself: do not copy it by value): its inputs drawn and rounded to the tier, its
 * goldens computed in double and certified in long double. */
typedef struct {
    char id[160];
    const char *tier;          /* "fp32" or "bf16" */
    uint64_t seed;
    lacs_tensor tensors[24];   /* inputs, then expected.* outputs; own their names, shapes, data */
    int64_t shapes[24][4];
    char names[24][32];
    int n_inputs, n_tensors;
    double certified[8];       /* per output, in output order, as measured */
    double certified_max;
    char *metadata;            /* the `lacs` JSON string (malloc'd) */
} lacs_golden;

/* The certified error as the metadata stores it (SPEC.md 10.4): the smallest
 * power of two at or above the measured one (0 stays 0). The measurement's
 * last digits follow the CPU's x87 transcendental instructions, which long
 * double's expl, log1pl, ... use and which differ between vendors; the power
 * of two is the same on any x86-64 unless the error lies within a few parts
 * per million of one. */
double lacs_certified_as_stored(double measured);

/* Builds case `c` in tier `tier` (LACS_TIER_FP32 or LACS_TIER_BF16).
 * LACS_ERR_PARAM (with lacs_last_error()) if a recipe is malformed or the
 * certification exceeds LACS_CERTIFY_BOUND. */
int lacs_golden_build(const lacs_case *c, lacs_tier_mask tier, lacs_golden *g);
void lacs_golden_free(lacs_golden *g);
/* As lacs_golden_build, with the seed given instead of the id's (SPEC.md
 * 10.8: a user-shaped vector's --seed); NULL: the id's. */
int lacs_golden_build_seeded(const lacs_case *c, lacs_tier_mask tier, const uint64_t *seed, lacs_golden *g);
/* Only the inputs of case c (n_tensors == n_inputs, no metadata), drawn and
 * rounded exactly as lacs_golden_build draws them: what a manifest's
 * inputs_sha256 covers, at a fraction of the cost. */
int lacs_golden_inputs(const lacs_case *c, lacs_tier_mask tier, const uint64_t *seed, lacs_golden *g);
/* The inputs' names, dtypes and shapes only (their data zeros, not drawn;
 * the recipes parsed, not run): the size of a case, cheaply. */
int lacs_golden_input_shapes(const lacs_case *c, lacs_tier_mask tier, lacs_golden *g);
/* The tensor named `name` (e.g. "q", "expected.o"), or NULL. */
const lacs_tensor *lacs_golden_find(const lacs_golden *g, const char *name);

#ifdef __cplusplus
}
#endif

#endif
