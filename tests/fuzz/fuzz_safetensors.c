/* libFuzzer target for the C safetensors reader (make fuzz): any bytes must
 * give LACS_OK or one of the reader's error codes, never a crash, an
 * out-of-bounds access, undefined behaviour or a leak; and what a file that is
 * accepted holds must be usable: every tensor found by its name, its bytes
 * inside the buffer and converted, every metadata entry found by its key. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/safetensors.h"
#include "lacs/types.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lacs_safetensors_file f;
    const int rc = lacs_safetensors_parse(data, size, "fuzz", &f);
    if (rc != LACS_OK) {
        if (rc != LACS_ERR_FORMAT && rc != LACS_ERR_MEMORY)
            abort();
        if (strncmp(lacs_last_error(), "fuzz: ", 6) != 0 || f.buffer != NULL || f.tensors != NULL)
            abort();
        if (strncmp(lacs_last_error(), "fuzz: header-json: internal error", 33) == 0)
            abort(); /* the strict scanner and cJSON disagreed on a header */
        return 0;
    }
    const uint8_t *end = f.buffer + f.size;
    for (int i = 0; i < f.n_tensors; i++) {
        const lacs_safetensors_tensor *t = &f.tensors[i];
        if (lacs_safetensors_find(&f, t->name) != t)
            abort(); /* names are unique */
        if (t->data < f.buffer || t->nbytes > (size_t)(end - t->data))
            abort();
        if (t->nbytes != (size_t)t->count * lacs_dtype_size(t->dtype))
            abort();
        if (i > 0 && t->data < f.tensors[i - 1].data)
            abort(); /* data-offset order */
        double *values = malloc(((size_t)t->count + 1) * sizeof *values);
        if (values) {
            lacs_safetensors_to_double(t, values);
            free(values);
        }
    }
    for (int i = 0; i < f.n_metadata; i++)
        if (lacs_safetensors_metadata(&f, f.metadata_keys[i]) != f.metadata_values[i])
            abort(); /* keys are unique */
    char hex[65];
    lacs_sha256_hex(f.buffer, f.size, hex);
    lacs_safetensors_free(&f);
    return 0;
}
