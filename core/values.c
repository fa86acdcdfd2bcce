/* The one conversion of stored values to double (lacs/safetensors.h, SPEC.md
 * 10.1): F32, BF16 and F64 exactly, I64 by a C cast. In a file of its own,
 * without the JSON parser beside it, so that the reader, the op runner and
 * the zoo's binary32 reference (a plugin linking libm only) share it. */
#include <stdint.h>
#include <string.h>

#include "lacs/safetensors.h"

void lacs_values_to_double(lacs_dtype dtype, const void *data, int64_t count, double *out)
{
    const unsigned char *bytes = data;
    if (!out || (count > 0 && !data))
        return;
    /* memcpy, element by element: the data has no alignment in general. */
    for (int64_t i = 0; i < count; i++) {
        switch (dtype) {
        case LACS_F64:
            memcpy(&out[i], bytes + 8 * i, 8);
            break;
        case LACS_F32: {
            float x;
            memcpy(&x, bytes + 4 * i, 4);
            out[i] = x;
            break;
        }
        case LACS_BF16: {
            /* bfloat16 is the top half of a binary32: appending 16 zero bits is exact */
            uint16_t top;
            memcpy(&top, bytes + 2 * i, 2);
            const uint32_t bits = (uint32_t)top << 16;
            float x;
            memcpy(&x, &bits, 4);
            out[i] = x;
            break;
        }
        case LACS_I64: {
            int64_t x;
            memcpy(&x, bytes + 8 * i, 8);
            out[i] = (double)x;
            break;
        }
        default:
            out[i] = 0; /* unreachable: only the four dtypes exist */
        }
    }
}
