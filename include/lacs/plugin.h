/* lacs plugin ABI v1.1 (SPEC.md 10.1, 11.5; `lacs check` loads plugins).
 *
 * A tensor as stored in a vector file, and the functions a plugin exports.
 * The vector readers (lacs/safetensors.h) and the generators use the same
 * dtype codes.
 *
 * v1 (the one function lacs_plugin_run) is unchanged; v1.1 adds two optional
 * functions, lacs_plugin_describe and lacs_plugin_last_error. A v1 plugin
 * loads and runs as before: the checker looks the optional symbols up and
 * does without them.
 */
#ifndef LACS_PLUGIN_H
#define LACS_PLUGIN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LACS_F32 = 0, LACS_BF16 = 1, LACS_F64 = 2, LACS_I64 = 3 } lacs_dtype;
typedef struct { const char *name; lacs_dtype dtype; int ndim; const int64_t *shape; void *data; } lacs_tensor;
typedef struct { const char *name; double value; } lacs_param;
#define LACS_UNSUPPORTED 1
/* inputs as stored in the vector file; outputs preallocated by the checker with the golden's
   names and shapes, dtype F32; return 0, LACS_UNSUPPORTED (case reported as SKIP), or another
   non-zero value for an error. The inputs are read-only (a write fails the case), except the
   initial states h0 and h0_kk, which are the plugin's own copies (it may update them in place);
   writing outside an output fails the case (SPEC.md 11.5). */
int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs,
                    const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs);

/* ---- ABI v1.1: optional ---- */

#define LACS_PLUGIN_ABI_MAJOR 1
#define LACS_PLUGIN_ABI_MINOR 1

/* What a plugin claims, declared before any case runs (SPEC.md 11.7). Lists are
 * words separated by spaces or commas. A case the declaration leaves out is
 * not run: its op or tier is "not claimed", a case with a declared flag is
 * a declared skip, and the verdict names them. Without a declaration, a
 * LACS_UNSUPPORTED makes its op and tier "partial", and the run fails. */
typedef struct {
    int abi_major, abi_minor;   /* LACS_PLUGIN_ABI_MAJOR, LACS_PLUGIN_ABI_MINOR */
    const char *name;           /* free text for the report ("my_kernels 0.3, CUDA"), or NULL */
    const char *ops;            /* the ops it implements ("delta_rule gated_delta_rule"); NULL: every op */
    const char *tiers;          /* "fp32", "bf16" or both; NULL: both */
    const char *unsupported;    /* flags of SPEC.md 10.5 whose cases it does not claim ("Varlen StateCarry");
                                   NULL: none */
} lacs_plugin_description;

/* Returns the plugin's declaration (static storage), or NULL for none. Called
 * once, before any case, in a process of its own. */
const lacs_plugin_description *lacs_plugin_describe(void);

/* The reason for the last non-zero return of lacs_plugin_run on the calling
 * thread, a skip's or an error's ("per-channel gates are not implemented"), or
 * NULL. One line; the checker shows it beside the case. */
const char *lacs_plugin_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
