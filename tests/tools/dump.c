/* lacs-dump FILE...: what the C reader sees in safetensors files, in a form
 * the Python reader's twin (tests/python) prints byte for byte the same.
 *
 * For each file, LF line ends, on stdout:
 *
 *   file <path>
 *   tensor <name> <dtype> [<d0>,<d1>,...] <sha256 of the tensor's raw bytes>   one per tensor, names in strcmp order
 *   metadata <key> <sha256 of the value's UTF-8 bytes>                         one per entry, keys in strcmp order
 *
 * or, when the reader rejects the file, after the `file` line, the one line
 *
 *   error <kind>
 *
 * <kind> being SPEC.md 10.2's, `io` for a file that cannot be read, `memory`
 * when out of memory; the reader's whole message goes to stderr. The shape has
 * no spaces, `[]` for a scalar. A name or key holding a byte below 0x21 (a
 * space or a control character), a '"' or a '\' is printed as a JSON string,
 * quoted, escaped as Python's json.dumps(name, ensure_ascii=False) does: \" \\
 * \b \f \n \r \t, other bytes below 0x20 as \u00XX (lowercase hex), all else
 * (space, DEL, non-ASCII UTF-8) as is; any other name is printed bare.
 *
 * Exit status 0 if every file was read, 1 otherwise (2: no file given).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/safetensors.h"
#include "lacs/types.h"

static int needs_quoting(const char *name)
{
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x21 || *p == '"' || *p == '\\')
            return 1;
    return 0;
}

static void print_name(const char *name)
{
    if (!needs_quoting(name)) {
        fputs(name, stdout);
        return;
    }
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\b': fputs("\\b", stdout); break;
        case '\f': fputs("\\f", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        default:
            if (*p < 0x20)
                printf("\\u%04x", *p);
            else
                putchar(*p);
        }
    }
    putchar('"');
}

static int compare_tensors_by_name(const void *a, const void *b)
{
    return strcmp((*(const lacs_safetensors_tensor *const *)a)->name,
                  (*(const lacs_safetensors_tensor *const *)b)->name);
}

/* Metadata entries are sorted as indexes into the file's two arrays. */
static const lacs_safetensors_file *sorting_file;

static int compare_metadata_by_key(const void *a, const void *b)
{
    return strcmp(sorting_file->metadata_keys[*(const int *)a], sorting_file->metadata_keys[*(const int *)b]);
}

/* The kind in "<path>: <kind>: <detail>", or "unknown" if the message does not
 * have that form (a path so long that the message was cut). */
static void print_error_kind(const char *path, int rc)
{
    if (rc == LACS_ERR_IO) {
        puts("error io");
        return;
    }
    if (rc == LACS_ERR_MEMORY) {
        puts("error memory");
        return;
    }
    const char *message = lacs_last_error();
    const size_t path_length = strlen(path);
    if (strncmp(message, path, path_length) == 0 && strncmp(message + path_length, ": ", 2) == 0) {
        const char *kind = message + path_length + 2;
        const char *end = strstr(kind, ": ");
        if (end) {
            printf("error %.*s\n", (int)(end - kind), kind);
            return;
        }
    }
    puts("error unknown");
}

/* Prints one file's dump; 1 if it was read. */
static int dump(const char *path)
{
    fputs("file ", stdout);
    fputs(path, stdout);
    putchar('\n');
    lacs_safetensors_file f;
    const int rc = lacs_safetensors_read(path, &f);
    if (rc != LACS_OK) {
        print_error_kind(path, rc);
        fprintf(stderr, "%s\n", lacs_last_error());
        return 0;
    }
    const lacs_safetensors_tensor **tensors = malloc(((size_t)f.n_tensors + 1) * sizeof *tensors);
    int *metadata = malloc(((size_t)f.n_metadata + 1) * sizeof *metadata);
    if (!tensors || !metadata) {
        free(tensors);
        free(metadata);
        lacs_safetensors_free(&f);
        puts("error memory");
        fprintf(stderr, "%s: out of memory\n", path);
        return 0;
    }
    for (int i = 0; i < f.n_tensors; i++)
        tensors[i] = &f.tensors[i];
    qsort(tensors, (size_t)f.n_tensors, sizeof *tensors, compare_tensors_by_name);
    for (int i = 0; i < f.n_tensors; i++) {
        const lacs_safetensors_tensor *t = tensors[i];
        char hex[65];
        lacs_sha256_hex(t->data, t->nbytes, hex);
        fputs("tensor ", stdout);
        print_name(t->name);
        printf(" %s [", lacs_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++)
            printf(d > 0 ? ",%lld" : "%lld", (long long)t->shape[d]);
        printf("] %s\n", hex);
    }
    for (int i = 0; i < f.n_metadata; i++)
        metadata[i] = i;
    sorting_file = &f;
    qsort(metadata, (size_t)f.n_metadata, sizeof *metadata, compare_metadata_by_key);
    for (int i = 0; i < f.n_metadata; i++) {
        const char *value = f.metadata_values[metadata[i]];
        char hex[65];
        lacs_sha256_hex(value, strlen(value), hex);
        fputs("metadata ", stdout);
        print_name(f.metadata_keys[metadata[i]]);
        printf(" %s\n", hex);
    }
    free(tensors);
    free(metadata);
    lacs_safetensors_free(&f);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE...\n", argv[0]);
        return 2;
    }
    int all_read = 1;
    for (int i = 1; i < argc; i++)
        all_read &= dump(argv[i]);
    if (fflush(stdout) != 0) {
        perror("lacs-dump: stdout");
        return 1;
    }
    return all_read ? 0 : 1;
}
