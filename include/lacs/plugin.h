/* lacs plugin ABI v1 (SPEC.md 10.1, 11.5; `lacs check` loads plugins).
 *
 * A tensor as stored in a vector file, and the one function a plugin exports.
 * The vector readers (lacs/safetensors.h) and the generators use the same
 * dtype codes.
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
   non-zero value for an error */
int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs,
                    const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs);

#ifdef __cplusplus
}
#endif

#endif
