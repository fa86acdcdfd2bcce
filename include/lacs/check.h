/* lacs: checking an implementation's outputs against a golden vector
 * (SPEC.md 11: the tolerance model).
 *
 * A vector file (SPEC.md 10.1) is loaded once into a lacs_vector: its inputs
 * as stored, its goldens, and, for each golden, the gauge the generator
 * computed and the tolerance constants of its tier. lacs_check_outputs then
 * compares candidate outputs with the goldens, block by block and element by
 * element, and reports every comparison as a ratio error / allowed (1.0 is
 * the limit). This is the one implementation of the tolerance logic: the
 * `lacs` CLI, the test zoo and the Python harness (through ctypes) all call it.
 */
#ifndef LACS_CHECK_H
#define LACS_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/gauge.h"
#include "lacs/plugin.h"
#include "lacs/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LACS_CHECK_MAX_INPUTS 16
#define LACS_CHECK_MAX_OUTPUTS 8
#define LACS_CHECK_MAX_PARAMS 16


/* The tolerance of one vector (SPEC.md 11.3), as stored in its metadata. */
typedef struct {
    char model[32];            /* LACS_TOLERANCE_MODEL (lacs_vector_load refuses generator 1's "provisional-normwise/1") */
    double unit_roundoff;      /* u: 2^-24 (fp32), 2^-8 (bf16) */
    double normwise_factor;    /* c_n: a block passes if ||x - y||_F <= c_n u L ||g||_F */
    double elementwise_factor; /* c_e: an element passes if |x - y| <= c_e u L (g + floor) */
    double floor_fraction;     /* floor = floor_fraction * RMS of g over the element's block */
    double underflow;          /* eta: half the tier's smallest subnormal, 2^-150 (fp32) or 2^-134 (bf16) */
    double provisional;        /* unused: the bound of generator 1's model, which is no longer accepted */
} lacs_tolerance;

/* How an output's elements are grouped into blocks (SPEC.md 11.2): the
 * layout [outer, T, heads, width] of lacs_normwise_error, or per sequence
 * with cu_seqlens. */
typedef struct {
    int64_t outer, T, heads, width;
    const int64_t *cu_seqlens; /* NULL, or n_seqs + 1 offsets into T (outer = 1) */
    int64_t n_seqs;
    int kind;                  /* LACS_LAYOUT_* */
} lacs_layout;

enum {
    LACS_LAYOUT_SEQUENCE = 0, /* o [B, T, HV, V]: block (batch or sequence, head), position (t, column) */
    LACS_LAYOUT_STATE = 1,    /* ht [N, HV, K, V], ht_kk [N, HV, K, K]: block (sequence, head), position (row, column) */
    LACS_LAYOUT_ROWS = 2,     /* a norm's [rows, dim]: block = row, position = column */
    LACS_LAYOUT_WHOLE = 3     /* a parameter gradient (dweight [dim], dalpha []): one block */
};

/* One golden vector, loaded and validated. */
typedef struct {
    char path[1024];
    lacs_safetensors_file file;
    char id[160], op[48], tier[8];
    char *reason;                                   /* malloc'd */
    char flags[512];                                /* space-separated */
    /* The conformance level (SPEC.md 11): 0 required (also when the metadata
     * has no "level"), 1 strict ("level": "strict"), with its reason
     * ("level_reason", malloc'd; "" when none). */
    int strict;
    char *level_reason;
    char *metadata;                                 /* the raw `lacs` JSON (points into file) */
    /* the inputs as stored (F32, BF16; cu_seqlens I64), data aligned copies */
    lacs_tensor inputs[LACS_CHECK_MAX_INPUTS];
    int n_inputs;
    /* every parameter, defaults included, in metadata order */
    lacs_param params[LACS_CHECK_MAX_PARAMS];
    int n_params;
    /* the goldens: names without "expected.", F64; the gauges, F64, same shapes (NULL: provisional model) */
    lacs_tensor expected[LACS_CHECK_MAX_OUTPUTS];
    double *gauge[LACS_CHECK_MAX_OUTPUTS];
    double length_factor[LACS_CHECK_MAX_OUTPUTS]; /* L per output: sqrt of its longest sum (fp32), 1 (bf16) */
    lacs_layout layout[LACS_CHECK_MAX_OUTPUTS];
    int n_outputs;
    lacs_tolerance tolerance;
    /* dims from the metadata (0 where not given) */
    int64_t B, T, H, HV, K, V, N, rows, dim;
    /* storage behind the pointers above */
    char names[LACS_CHECK_MAX_INPUTS + LACS_CHECK_MAX_OUTPUTS + LACS_CHECK_MAX_PARAMS][48];
    void *owned[LACS_CHECK_MAX_INPUTS + 2 * LACS_CHECK_MAX_OUTPUTS];
    int n_owned;
} lacs_vector;

/* Loads `path` and validates it as a vector (SPEC.md 10.2): LACS_ERR_IO
 * (cannot read, not a regular file), LACS_ERR_FORMAT with lacs_last_error() =
 * "<path>: <kind>: <detail>", the reader's kinds or the vector layer's:
 *   hash       its SHA-256 is not `sha256` (the manifest's; NULL: not checked)
 *   metadata   a field is missing or wrong (format, id, op, tier, level, dims,
 *              params, split, outputs: every golden listed, exactly once)
 *   tensor     an input, golden or gauge is missing, of the wrong dtype or
 *              shape, or invalid (cu_seqlens; a gauge not finite, negative,
 *              or smaller than its golden)
 *   tolerance  the tolerance object does not state its model's constants, or
 *              names a model this checker refuses or does not know (SPEC.md 11.3)
 * On error *v is safe to free. */
int lacs_vector_load_verified(const char *path, const char *sha256, lacs_vector *v);
int lacs_vector_load(const char *path, lacs_vector *v); /* sha256 NULL */
void lacs_vector_free(lacs_vector *v);
/* For ctypes: the same, on the heap (NULL on error, lacs_last_error() set). */
lacs_vector *lacs_vector_open_verified(const char *path, const char *sha256);
lacs_vector *lacs_vector_open(const char *path);
void lacs_vector_close(lacs_vector *v);

/* What a vector holds, for callers without the struct (the Python harness):
 * counts and items of its inputs, goldens (F64, names without "expected.")
 * and parameters; its text fields ("id", "op", "tier", "flags", "reason",
 * "level_reason", "path", "sha256", "tolerance_model"; NULL for another). */
enum { LACS_VECTOR_INPUTS = 0, LACS_VECTOR_GOLDENS = 1, LACS_VECTOR_PARAMS = 2 };
int lacs_vector_count(const lacs_vector *v, int which);
int lacs_vector_tensor(const lacs_vector *v, int which, int i, lacs_tensor *t);
int lacs_vector_param(const lacs_vector *v, int i, lacs_param *p);
const char *lacs_vector_text(const lacs_vector *v, const char *field);
/* The conformance level (SPEC.md 11.7): 1 strict, 0 required. The one
 * accessor the checker's verdicts read it through. */
int lacs_vector_is_strict(const lacs_vector *v);

/* The result for one output. */
typedef struct {
    char name[32];
    double ratio;              /* max of the two ratios below; +inf if non-finite where the golden is not, or the reverse */
    double normwise_ratio;     /* worst block: ||x - y||_F / (c_n u ||g||_F) */
    double elementwise_ratio;  /* worst element: |x - y| / (c_e u (g + floor)) */
    double normwise_error;     /* ||x - y||_F / ||y||_F of the worst normwise block (||x - y||_F if ||y|| = 0) */
    int64_t worst_block;       /* block of the worst normwise ratio */
    int64_t worst_element;     /* flat index of the worst element (the first non-finite mismatch, if any) */
    double expected_value, actual_value, allowed_error; /* at worst_element */
    int64_t nonfinite_mismatches; /* elements whose NaN/inf status differs from the golden's (SPEC.md 11.4) */
} lacs_output_check;

typedef struct {
    double ratio;              /* the worst over the outputs */
    int n_outputs;
    lacs_output_check outputs[LACS_CHECK_MAX_OUTPUTS];
} lacs_check_result;

/* An implementation as the checker calls it: the plugin ABI's lacs_plugin_run
 * with a context pointer first (NULL for a plugin). */
typedef int (*lacs_impl_fn)(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                            const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs);

/* THE way to check an implementation on one case (the CLI, the zoo runner and
 * the Python harness all use it; SPEC.md 11.5): hands `impl` v's inputs and
 * parameters and F32 outputs with the goldens' names and shapes (zero-filled),
 * then compares (lacs_check_outputs). Every buffer impl sees is a copy of its
 * own, in a mapping between two inaccessible guard pages, the slack beside
 * the data filled with a canary: the inputs are read-only (but the initial
 * states h0 and h0_kk, which the implementation may update in place), and a
 * write past the end or before the start of an output or an initial state
 * fails the case, naming it. A state-carry case (parameter `split`, golden
 * ht_split; SPEC.md 10.5) is run as the user of a kernel would resume it:
 * impl on the first `split` tokens (its ht compared with ht_split), then on
 * the rest with h0 = a fresh copy of the ht it returned (never the buffer
 * that is checked); o is the two parts joined. The parameter `split` itself
 * is not passed to impl.
 * Returns LACS_OK (r filled), LACS_UNSUPPORTED if impl returned it (SKIP), or
 * an error (FAIL) with lacs_last_error(): "implementation returned N", the
 * stray write, or the problem with its outputs. If `actual` is not NULL it
 * receives the outputs (v->n_outputs tensors, names and shapes pointing into
 * v, data malloc'd: free with lacs_outputs_free) whenever impl ran. */
int lacs_check_implementation(const lacs_vector *v, lacs_impl_fn impl, void *context, lacs_check_result *r,
                              lacs_tensor *actual);
void lacs_outputs_free(const lacs_vector *v, lacs_tensor *actual);

/* For a fault handler: if `address` lies in a buffer lacs_check_implementation
 * handed out (or its guard pages), writes what happened there ("wrote into
 * input 'q', which is read-only ...", "touched memory past the end of output
 * 'o' ...") to buf and returns 1; else 0. Reads a table only (no allocation). */
int lacs_check_describe_fault(const void *address, char *buf, size_t size);

/* builtin:reference as an lacs_impl_fn (context unused): lacs_reference_run
 * in double, rounded to the F32 outputs. */
int lacs_impl_reference(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                        const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs);

/* Compares `actual` (F32 or F64 tensors named like the goldens, without
 * "expected.") with the goldens of v. Every golden must be given exactly once
 * with the golden's shape; a missing, extra or misshapen output is
 * LACS_ERR_SHAPE with lacs_last_error() naming it (the case fails). */
int lacs_check_outputs(const lacs_vector *v, const lacs_tensor *actual, int n_actual, lacs_check_result *r);

/* The element with flat index `index` of output `output` (0..n_outputs-1),
 * in words: "o[b=0, t=37, head=1, v=5]" (with "seq" for varlen), "ht[seq=0,
 * head=1, k=3, v=5]", "y[row=7, col=2]", "dweight[3]". Returns buf. */
char *lacs_describe_element(const lacs_vector *v, int output, int64_t index, char *buf, size_t size);

/* For outputs of the sequence layout: per time step t (0..T-1), the worst
 * elementwise ratio over batches or sequences, heads and columns (+inf at a
 * non-finite mismatch). `actual` as for lacs_check_outputs, output by index.
 * LACS_ERR_SHAPE if the output is not of the sequence layout. */
int lacs_check_error_over_time(const lacs_vector *v, int output, const lacs_tensor *actual, double *ratio_t);


#ifdef __cplusplus
}
#endif

#endif
