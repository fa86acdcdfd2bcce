/* lacs: reading and writing safetensors files (SPEC.md 10.1, 10.2).
 *
 * The C reader of the golden vectors. A file is read whole and validated
 * before anything is returned: a malformed file is LACS_ERR_FORMAT with
 * lacs_last_error() = "<path>: <kind>: <detail>", <kind> one of SPEC.md 10.2's
 * (truncated, header-length, header-utf8, header-json, duplicate-name, dtype,
 * shape, offsets, byte-count, overlap, gap, metadata). The Python reader
 * (python/lacs/safetensors.py) gives the same kinds for the same files; the
 * order of the checks, which decides the kind of a file with several faults,
 * is at the top of core/safetensors.c. Little-endian hosts only.
 */
#ifndef LACS_SAFETENSORS_H
#define LACS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "lacs/plugin.h"
#include "lacs/types.h" /* the LACS_ERR_* codes returned here, lacs_last_error() */

#ifdef __cplusplus
extern "C" {
#endif

#define LACS_SAFETENSORS_MAX_DIMS 8
#define LACS_SAFETENSORS_MAX_HEADER (100u * 1000u * 1000u)

typedef struct {
    char *name;
    lacs_dtype dtype;
    int ndim;
    int64_t shape[LACS_SAFETENSORS_MAX_DIMS];
    int64_t count;        /* product of the shape (1 for ndim = 0) */
    const uint8_t *data;  /* points into the file's buffer; not aligned in general */
    size_t nbytes;
} lacs_safetensors_tensor;

typedef struct {
    char *path;                        /* as given, for messages */
    uint8_t *buffer;                   /* the whole file */
    size_t size;
    lacs_safetensors_tensor *tensors;  /* in the order of their data offsets */
    int n_tensors;
    char **metadata_keys;              /* __metadata__, in file order; n_metadata entries */
    char **metadata_values;
    int n_metadata;
    char sha256[65];                   /* lacs_safetensors_read: SHA-256 of the bytes read and parsed ("" else) */
} lacs_safetensors_file;

/* Element size of a dtype in bytes (0 if unknown); its name ("F32", ...;
 * "unknown" if unknown). */
size_t lacs_dtype_size(lacs_dtype dtype);
const char *lacs_dtype_name(lacs_dtype dtype);

/* Reads and validates `path`. LACS_ERR_IO if it cannot be read, or is not a
 * regular file (a directory, a FIFO, a device: opened without blocking, and
 * refused), LACS_ERR_FORMAT if malformed, LACS_ERR_MEMORY; on error *f is
 * left empty (safe to free). f->sha256 is the SHA-256 of the bytes read.
 * lacs_safetensors_free(f) releases a success. */
int lacs_safetensors_read(const char *path, lacs_safetensors_file *f);
/* The same, refusing a file whose SHA-256 is not `sha256` (64 lowercase hex
 * digits; NULL or "": not checked) before parsing anything of it:
 * LACS_ERR_FORMAT, "<path>: hash: ..." (SPEC.md 10.2). */
int lacs_safetensors_read_expecting(const char *path, const char *sha256, lacs_safetensors_file *f);
/* The same on bytes in memory (copied); `label` stands for the path in messages. */
int lacs_safetensors_parse(const uint8_t *bytes, size_t size, const char *label,
                           lacs_safetensors_file *f);
void lacs_safetensors_free(lacs_safetensors_file *f);

/* The tensor named `name`, or NULL. */
const lacs_safetensors_tensor *lacs_safetensors_find(const lacs_safetensors_file *f, const char *name);
/* The metadata value of `key`, or NULL. */
const char *lacs_safetensors_metadata(const lacs_safetensors_file *f, const char *key);
/* Converts `count` little-endian values of `dtype` at `data` (any alignment)
 * to double: F32, BF16, F64 exactly; I64 as by a C cast, rounding beyond
 * 2^53. The one conversion of stored values, used by the reader and by
 * lacs_reference_run. */
void lacs_values_to_double(lacs_dtype dtype, const void *data, int64_t count, double *out);
/* Converts every element of t (t->count of them): lacs_values_to_double. */
void lacs_safetensors_to_double(const lacs_safetensors_tensor *t, double *out);

/* The bytes of a safetensors file holding tensors (any order given; written
 * as SPEC.md 10.1 orders them) and one metadata entry key -> value (both may
 * be NULL for none): *bytes malloc'd, *size bytes. The checks below. */
int lacs_safetensors_serialize(const lacs_tensor *tensors, int n_tensors, const char *metadata_key,
                               const char *metadata_value, const char *label, uint8_t **bytes, size_t *size);
/* Writes them to `path` (lacs_output_file_write, lacs/output.h: a temporary file
 * beside it renamed onto it; a new path or a regular file only). Refuses to
 * replace an existing file unless `overwrite` (LACS_ERR_IO, naming it); a
 * failed write leaves no partial file. Duplicate or empty names, the name "__metadata__", names or metadata
 * that are not UTF-8, unknown dtypes, ndim outside 0..8, dimensions outside
 * [0, 2^53), 2^53 bytes or more, and NULL shape or data where there are
 * dimensions or bytes are LACS_ERR_FORMAT naming the tensor. */
int lacs_safetensors_write(const char *path, const lacs_tensor *tensors, int n_tensors,
                           const char *metadata_key, const char *metadata_value, int overwrite);

/* SHA-256 (FIPS 180-4) of a byte string, as 64 lowercase hex digits and a NUL. */
void lacs_sha256_hex(const void *data, size_t size, char hex[65]);
/* Incremental form. */
typedef struct {
    uint32_t h[8];
    uint64_t length;
    uint8_t block[64];
    size_t used;
} lacs_sha256;
void lacs_sha256_init(lacs_sha256 *s);
void lacs_sha256_update(lacs_sha256 *s, const void *data, size_t size);
void lacs_sha256_final(lacs_sha256 *s, char hex[65]);

#ifdef __cplusplus
}
#endif

#endif
