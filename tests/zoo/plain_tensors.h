/* plain_f32's plumbing: the plugin ABI's named tensors and parameters
 * (include/lacs/plugin.h) read into fp32 arrays, checked against the shapes of
 * SPEC.md 2.1, and the two arithmetic helpers every kernel uses.
 *
 * Standalone, as every zoo plugin: no liblacs, only libc and libm. Every
 * problem found in the inputs is reported on stderr as one line naming the
 * plugin, the op, the tensor and the problem, and returned as -1: a plugin must
 * never crash on a bad call.
 */
#ifndef PLAIN_TENSORS_H
#define PLAIN_TENSORS_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"

#ifndef ZOO_FMA
#define ZOO_FMA 0
#endif

#define PLAIN_NAME "plain_f32"
#define PLAIN_MAX_DIMS 8
/* No tensor of the suite comes near this; it keeps every product of dims in int64_t. */
#define PLAIN_MAX_ELEMENTS ((int64_t)1 << 40)

/* a * b + c: two roundings, or one (fmaf) in the plain_f32_fma.so build.
 * The Makefile compiles with -ffp-contract=off, so the compiler fuses nothing
 * else. */
static float mul_add(float a, float b, float c)
{
#if ZOO_FMA
    return fmaf(a, b, c);
#else
    return a * b + c;
#endif
}

/* x rounded to bfloat16 (the top 16 bits of a binary32), to nearest even, and
 * widened back; NaN stays NaN. */
static float round_to_bf16(float x)
{
    if (isnan(x))
        return x;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    bits &= 0xFFFF0000u;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* expf as a libm whose float exp is a few ulp off: LACS_ZOO_EXP unset (or
 * "libm"): expf itself; "high3": always 3 ulp above expf; "hash3": off by
 * -3 .. +3 ulp, a fixed function of the argument's bits (as NumPy's float32
 * exp is up to 2.24 ulp off for some arguments). Deterministic either way:
 * the same argument always gets the same error, which is what makes a
 * constant decay's error accumulate (SPEC.md 11.2). Any other value makes the
 * plugin fail, so that a typo cannot pass for the plain member. */
static int plain_exp_mode(void)
{
    static int mode = -2;
    if (mode == -2) {
        const char *text = getenv("LACS_ZOO_EXP");
        mode = !text || !*text || strcmp(text, "libm") == 0 ? 0
               : strcmp(text, "high3") == 0                  ? 1
               : strcmp(text, "hash3") == 0                  ? 2
                                                             : -1;
        if (mode < 0)
            fprintf(stderr, "%s: LACS_ZOO_EXP=%s is not libm, high3 or hash3\n", PLAIN_NAME, text);
    }
    return mode;
}

static float plain_expf(float x)
{
    float y = expf(x);
    const int mode = plain_exp_mode();
    if (mode <= 0 || !isfinite(y) || y == 0)
        return y;
    int ulps = 3;
    if (mode == 2) {
        uint32_t bits;
        memcpy(&bits, &x, sizeof bits);
        uint64_t z = (uint64_t)bits * 0x9e3779b97f4a7c15ULL;
        z ^= z >> 29;
        ulps = (int)(z % 7) - 3;
    }
    for (; ulps > 0; ulps--)
        y = nextafterf(y, INFINITY);
    for (; ulps < 0; ulps++)
        y = nextafterf(y, 0);
    return y;
}

static int plain_error(const char *op, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "%s: %s: ", PLAIN_NAME, op);
    vfprintf(stderr, format, args);
    fprintf(stderr, "\n");
    va_end(args);
    return -1;
}

static void format_shape(int ndim, const int64_t *shape, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
}

static const char *dtype_name(lacs_dtype dtype)
{
    switch (dtype) {
    case LACS_F32:
        return "F32";
    case LACS_BF16:
        return "BF16";
    case LACS_F64:
        return "F64";
    case LACS_I64:
        return "I64";
    }
    return "an unknown dtype";
}

static const lacs_tensor *find_tensor(const lacs_tensor *list, int n, const char *name)
{
    for (int i = 0; list && i < n; i++)
        if (list[i].name && strcmp(list[i].name, name) == 0)
            return &list[i];
    return NULL;
}

/* The element count of t, or -1 (message) if its shape is unusable. */
static int64_t tensor_count(const char *op, const lacs_tensor *t)
{
    if (t->ndim < 0 || t->ndim > PLAIN_MAX_DIMS || (t->ndim > 0 && !t->shape))
        return plain_error(op, "tensor '%s' has %d dimensions", t->name, t->ndim);
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || (t->shape[i] > 0 && count > PLAIN_MAX_ELEMENTS / t->shape[i]))
            return plain_error(op, "tensor '%s' has a bad dimension %lld", t->name, (long long)t->shape[i]);
        count *= t->shape[i];
    }
    if (count > 0 && !t->data)
        return plain_error(op, "tensor '%s' has %lld elements and no data", t->name, (long long)count);
    return count;
}

/* t's shape must be `shape` (ndim entries); -1 with a message naming both if not. */
static int check_shape(const char *op, const char *what, const lacs_tensor *t, int ndim, const int64_t *shape)
{
    int same = t->ndim == ndim && tensor_count(op, t) >= 0;
    for (int i = 0; same && i < ndim; i++)
        same = t->shape[i] == shape[i];
    if (same)
        return 0;
    char want[128], got[128];
    format_shape(ndim, shape, want, sizeof want);
    format_shape(t->ndim >= 0 && t->ndim <= PLAIN_MAX_DIMS ? t->ndim : 0, t->shape, got, sizeof got);
    return plain_error(op, "%s '%s' must have shape %s, has %s", what, t->name, want, got);
}

/* Input `name` as a malloc'd fp32 array (F32 copied, BF16 widened exactly by
 * appending 16 zero bits), after checking its shape. *out = NULL and 0 when
 * the input is absent; -1 (message) on a bad dtype or shape or no memory. */
static int read_float_input(const char *op, const lacs_tensor *inputs, int n_inputs, const char *name, int ndim,
                            const int64_t *shape, float **out)
{
    *out = NULL;
    const lacs_tensor *t = find_tensor(inputs, n_inputs, name);
    if (!t)
        return 0;
    if (check_shape(op, "input", t, ndim, shape))
        return -1;
    const int64_t count = tensor_count(op, t);
    float *values = malloc((size_t)(count + 1) * sizeof *values);
    if (!values)
        return plain_error(op, "out of memory reading input '%s'", name);
    if (t->dtype == LACS_F32) {
        memcpy(values, t->data, (size_t)count * sizeof *values);
    } else if (t->dtype == LACS_BF16) {
        const uint16_t *bits = t->data;
        for (int64_t i = 0; i < count; i++) {
            uint32_t widened = (uint32_t)bits[i] << 16;
            memcpy(&values[i], &widened, sizeof widened);
        }
    } else {
        free(values);
        return plain_error(op, "input '%s' is %s; this plugin reads F32 or BF16", name, dtype_name(t->dtype));
    }
    *out = values;
    return 0;
}

/* Parameter `name`; *found = 0 (and *value untouched) when absent. */
static double find_param(const lacs_param *params, int n_params, const char *name, int *found)
{
    for (int i = 0; params && i < n_params; i++)
        if (params[i].name && strcmp(params[i].name, name) == 0) {
            *found = 1;
            return params[i].value;
        }
    *found = 0;
    return 0;
}

/* Output `name` as a float array after checking that it is F32 with `shape`;
 * NULL and 0 when the checker did not ask for it. */
static int find_float_output(const char *op, lacs_tensor *outputs, int n_outputs, const char *name, int ndim,
                             const int64_t *shape, float **out)
{
    *out = NULL;
    lacs_tensor *t = (lacs_tensor *)find_tensor(outputs, n_outputs, name);
    if (!t)
        return 0;
    if (t->dtype != LACS_F32)
        return plain_error(op, "output '%s' is %s; this plugin writes F32", name, dtype_name(t->dtype));
    if (check_shape(op, "output", t, ndim, shape))
        return -1;
    *out = t->data;
    return 0;
}

#endif
