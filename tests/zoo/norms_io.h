/* The plugin ABI's tensors and parameters (include/lacs/plugin.h) as the norm
 * zoo (tests/zoo/norms_f32.c) reads them: inputs found by name and widened to
 * float arrays (F32 copied, BF16 widened exactly), outputs found by name and
 * checked to be F32 of the expected element count, parameters by name.
 * Standalone: a plugin must not link liblacs, so only its headers' types and
 * codes are used. Every failure prints one line naming the op, the tensor or
 * parameter and the problem. */
#ifndef ZOO_NORMS_IO_H
#define ZOO_NORMS_IO_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/plugin.h"
#include "lacs/types.h"
#include "norms_float.h"

/* Prints "norms_f32: <op>: <message>" to stderr and returns code. */
__attribute__((format(printf, 3, 4))) static inline int report(int code, const char *op, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "norms_f32: %s: ", op);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    return code;
}

/* Whether `word` is one of the space-separated words of `list`. */
static inline int list_has_word(const char *list, const char *word)
{
    size_t length = strlen(word);
    for (const char *p = list; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n > 0 && n == length && strncmp(p, word, n) == 0)
            return 1;
        p += n;
    }
    return 0;
}

/* The number of elements of t, or -1 for a malformed shape (negative rank or
 * dimension, a missing shape array, a count that overflows). */
static inline int64_t element_count(const lacs_tensor *t)
{
    if (t->ndim < 0 || (t->ndim > 0 && !t->shape))
        return -1;
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] < 0 || (t->shape[i] > 0 && count > INT64_MAX / t->shape[i]))
            return -1;
        count *= t->shape[i];
    }
    return count;
}

static inline const lacs_tensor *find_tensor(const lacs_tensor *tensors, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (tensors[i].name && strcmp(tensors[i].name, name) == 0)
            return &tensors[i];
    return NULL;
}

/* *values = a malloc'd float copy of an F32 or BF16 input (at least one
 * element allocated, so an empty tensor is not mistaken for a failure) and
 * *count its element count. Returns LACS_OK, or an error code with a message
 * for a malformed shape, missing data, another dtype or no memory. */
static inline int load_as_float(const char *op, const lacs_tensor *t, float **values, int64_t *count)
{
    *values = NULL;
    *count = element_count(t);
    if (*count < 0)
        return report(LACS_ERR_SHAPE, op, "input '%s' has a malformed shape", t->name);
    if (*count > 0 && !t->data)
        return report(LACS_ERR_INPUT, op, "input '%s' has no data", t->name);
    if (t->dtype != LACS_F32 && t->dtype != LACS_BF16)
        return report(LACS_ERR_INPUT, op, "input '%s' has dtype code %d; expected F32 (0) or BF16 (1)", t->name,
                      (int)t->dtype);
    if ((uint64_t)*count > SIZE_MAX / sizeof(float) - 1)
        return report(LACS_ERR_MEMORY, op, "input '%s' is too large", t->name);
    if (!(*values = malloc(((size_t)*count + 1) * sizeof **values)))
        return report(LACS_ERR_MEMORY, op, "out of memory for input '%s'", t->name);
    if (t->dtype == LACS_F32) {
        memcpy(*values, t->data, (size_t)*count * sizeof **values);
    } else {
        const unsigned char *bytes = t->data; /* little-endian pairs, not necessarily aligned */
        for (int64_t i = 0; i < *count; i++)
            (*values)[i] = bf16_bits_to_float((uint16_t)(bytes[2 * i] | bytes[2 * i + 1] << 8));
    }
    return LACS_OK;
}

/* 1 and *value set if the parameter `name` is given, else 0. */
static inline int find_param(const lacs_param *params, int n, const char *name, double *value)
{
    for (int i = 0; i < n; i++)
        if (params[i].name && strcmp(params[i].name, name) == 0) {
            *value = params[i].value;
            return 1;
        }
    return 0;
}

#endif
