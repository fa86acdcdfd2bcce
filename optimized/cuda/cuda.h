/* builtin:cuda, internal: what dispatch.c (C) and the family files (*.cu,
 * CUDA C++) share (README.md).
 *
 * dispatch.c validates a call with the same checks as builtin:cpu
 * (lacs_builtin_validate_call), copies every input to the device as it is
 * (F32, BF16 or I64 bytes), allocates the F32 outputs there (zeroed), hands
 * the call to its family and copies the outputs back. A family reads its
 * tensors by name, launches its kernels and returns LACS_OK, an error code
 * with lacs_cuda_error, or LACS_UNSUPPORTED with lacs_cuda_unsupported (a
 * case it does not implement: the checker reports it as SKIP).
 */
#ifndef LACS_CUDA_INTERNAL_H
#define LACS_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor of the call: its data on the device, and where the caller keeps it
 * on the host (inputs only: small tables such as cu_seqlens are read there). */
typedef struct {
    const char *name;
    lacs_dtype dtype;
    int ndim;
    int64_t shape[4];
    void *device;
    const void *host;
} lacs_cuda_tensor;

typedef struct {
    const char *op;
    int bf16;                        /* the tier: q's (x's) dtype is BF16 */
    const lacs_cuda_tensor *inputs;
    int n_inputs;
    const lacs_param *params;
    int n_params;
    lacs_cuda_tensor *outputs;       /* F32, zeroed */
    int n_outputs;
    int max_shared_bytes;            /* dynamic shared memory a block may have on this device */
} lacs_cuda_call;

const lacs_cuda_tensor *lacs_cuda_input(const lacs_cuda_call *c, const char *name);   /* NULL: not given */
lacs_cuda_tensor *lacs_cuda_output(const lacs_cuda_call *c, const char *name);        /* NULL: not asked */
/* The parameter's value, its default (lacs_reference_param_default), else fallback. */
double lacs_cuda_param(const lacs_cuda_call *c, const char *name, double fallback);
int64_t lacs_cuda_count(const lacs_cuda_tensor *t);

/* Sets the error text (lacs_last_error) and returns code. */
int lacs_cuda_error(int code, const char *op, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Sets the reason a case is not implemented and returns LACS_UNSUPPORTED. */
int lacs_cuda_unsupported(const char *op, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* The families. */
int lacs_cuda_recurrent(const lacs_cuda_call *c); /* recurrent.cu: the recurrent family */
int lacs_cuda_recurrent_vjp(const lacs_cuda_call *c); /* recurrent_vjp.cu: the recurrent family's gradients */
int lacs_cuda_attention_vjp(const lacs_cuda_call *c); /* attention_vjp.cu: the attention forms' gradients */
int lacs_cuda_norm(const lacs_cuda_call *c);      /* norms.cu: the norms and their VJPs */
int lacs_cuda_mesa(const lacs_cuda_call *c);      /* mesa.cu: mesa_net */
int lacs_cuda_attention(const lacs_cuda_call *c); /* attention.cu: path_attn; the others to flash.cu */
int lacs_cuda_flash(const lacs_cuda_call *c);     /* flash.cu: softmax_attn, fox, deltaformer */
/* attention.cu: PaTH's beta >= 0 on the host copy, the reference's message (path_attn, path_attn_vjp) */
int lacs_cuda_check_path_beta(const lacs_cuda_call *c, const lacs_cuda_tensor *beta);

/* device.cu: the runtime calls dispatch.c makes, each returning 0 or
 * writing the CUDA error's text into why[why_size] and returning -1. */
int lacs_cuda_device_open(int *max_shared_bytes, char *why, size_t why_size);
int lacs_cuda_alloc(void **device, size_t bytes, char *why, size_t why_size);
void lacs_cuda_free(void *device);
int lacs_cuda_to_device(void *device, const void *host, size_t bytes, char *why, size_t why_size);
int lacs_cuda_to_host(void *host, const void *device, size_t bytes, char *why, size_t why_size);
int lacs_cuda_zero(void *device, size_t bytes, char *why, size_t why_size);
int lacs_cuda_synchronize(char *why, size_t why_size);
/* The families' device workspace (device.cu): at least `bytes` of device
 * memory, kept between calls, held by the caller until it releases it (which
 * waits for the device); NULL (nothing held) when the device is out of
 * memory. */
void *lacs_cuda_workspace_acquire(size_t bytes);
void lacs_cuda_workspace_release(void);
/* One line on the device (name, compute capability, SMs), or why there is none; 1 when there is one. */
int lacs_cuda_describe_device(char *text, size_t text_size);

#ifdef __cplusplus
}
#endif

#endif
