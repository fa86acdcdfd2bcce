/* Safetensors golden-vector files (SPEC.md 10.1, 10.2): the strict reader,
 * the writer, and SHA-256.
 *
 * Reading. A file is read whole and checked in a fixed order, so that every
 * malformed file maps to exactly one kind of SPEC.md 10.2 (the Python reader,
 * python/lacs/safetensors.py, must apply the same order to give the same kind):
 *
 *   1. fewer than 8 bytes                                        truncated
 *   2. N > size - 8, or N > 100 MB                               header-length
 *   3. the N header bytes are not strict UTF-8                   header-utf8
 *   4. the header is not exactly one JSON object (RFC 8259, JSON
 *      whitespace around it allowed), or a tensor entry (a key
 *      other than __metadata__) is not an object                 header-json
 *   5. any JSON object in the header has two equal keys          duplicate-name
 *   6. per tensor, in header order: dtype, then shape, then
 *      data_offsets, then end - begin against the shape          dtype, shape, offsets, byte-count
 *   7. tensors with bytes, sorted by begin: two overlap          overlap
 *   8. a byte of the data buffer no tensor covers                gap
 *   9. __metadata__ present but not an object of strings         metadata
 *
 * A zero-byte tensor may sit anywhere in [0, data length]: it covers nothing,
 * so it takes no part in steps 7 and 8. Keys of a tensor entry other than
 * dtype, shape and data_offsets are ignored, as by the official library.
 *
 * JSON goes through cJSON, which is lenient where the format must not be:
 * it accepts trailing garbage, leading zeros, raw control characters in
 * strings and any byte <= 0x20 as whitespace, it truncates a name at a \u0000
 * escape (names are C strings here), and it does not see duplicate keys. So a
 * strict scanner (step 4) accepts only what RFC 8259 allows, minus \u0000 and
 * lone surrogate escapes (no UTF-8 string can hold them), and only then does
 * cJSON build the tree. Nesting deeper than cJSON's 1000 levels is header-json.
 *
 * Shapes and offsets are JSON integers in [0, 2^53): numbers written without
 * a fraction or an exponent ("4" and "-0", not "4.0" or "4e0", as for the
 * official library, whose shapes are usize), below 2^53 so that cJSON's
 * double holds them exactly. cJSON keeps only the double, so the scanner
 * notes which number literals are integers and the tree's numbers are marked
 * from that list (mark_integer_literals).
 *
 * Writing. Tensors go in the order SPEC.md 10.1 fixes (element size
 * decreasing, then name), contiguous from offset 0, the header padded with
 * spaces to make 8 + N a multiple of 8, so every tensor is aligned to its
 * element size. The file is written by lacs_output_file_write (lacs/output.h): a
 * temporary file beside it, renamed onto it.
 *
 * This file assumes a little-endian host: tensor bytes are the host's own
 * representation, written and read with memcpy.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "lacs/output.h"
#include "lacs/safetensors.h"

#include "../core/error.h"

#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "lacs reads and writes safetensors data in place, which needs a little-endian host"
#endif

/* For compilers that do not say their byte order at compile time. */
static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* Integers a double holds exactly: shapes and offsets must be below this. */
#define EXACT_INTEGER_LIMIT 9007199254740992.0 /* 2^53 */
/* cJSON's own nesting limit (CJSON_NESTING_LIMIT): the scanner must not accept deeper. */
#define JSON_MAX_DEPTH 1000
/* A bit of cJSON's `type` that cJSON leaves alone (it uses the low byte, 256
 * and 512): set on a number node whose literal had no fraction or exponent. */
#define INTEGER_LITERAL_FLAG (1 << 12)

/* ---- dtypes ---- */

typedef struct {
    lacs_dtype dtype;
    const char *name;
    size_t size;
} dtype_info;

static const dtype_info dtype_table[] = {
    {LACS_F64, "F64", 8},
    {LACS_F32, "F32", 4},
    {LACS_BF16, "BF16", 2},
    {LACS_I64, "I64", 8},
};
enum { DTYPE_COUNT = sizeof dtype_table / sizeof dtype_table[0] };

static const dtype_info *dtype_lookup(lacs_dtype dtype)
{
    for (int i = 0; i < DTYPE_COUNT; i++)
        if (dtype_table[i].dtype == dtype)
            return &dtype_table[i];
    return NULL;
}

size_t lacs_dtype_size(lacs_dtype dtype)
{
    const dtype_info *info = dtype_lookup(dtype);
    return info ? info->size : 0;
}

const char *lacs_dtype_name(lacs_dtype dtype)
{
    const dtype_info *info = dtype_lookup(dtype);
    return info ? info->name : "unknown";
}

/* ---- UTF-8 ---- */

/* The length of the valid UTF-8 sequence at s (n bytes available), or 0 if
 * the bytes there are not one: overlong forms, surrogates (U+D800..U+DFFF)
 * and code points above U+10FFFF are invalid (RFC 3629, as Python's decoder). */
static size_t utf8_sequence_length(const uint8_t *s, size_t n)
{
    const uint8_t lead = s[0];
    size_t length;
    uint8_t second_min = 0x80, second_max = 0xBF;
    if (lead < 0x80)
        return 1;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        if (lead == 0xE0)
            second_min = 0xA0; /* below: overlong */
        if (lead == 0xED)
            second_max = 0x9F; /* above: surrogates */
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        if (lead == 0xF0)
            second_min = 0x90; /* below: overlong */
        if (lead == 0xF4)
            second_max = 0x8F; /* above: beyond U+10FFFF */
    } else {
        return 0; /* a continuation byte, an overlong lead C0/C1, or F5..FF */
    }
    if (n < length || s[1] < second_min || s[1] > second_max)
        return 0;
    for (size_t i = 2; i < length; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return length;
}

/* The offset of the first byte that does not start a valid sequence, or n. */
static size_t utf8_invalid_offset(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        const size_t length = utf8_sequence_length(s + i, n - i);
        if (length == 0)
            return i;
        i += length;
    }
    return n;
}

/* ---- messages ---- */

/* A name as messages show it: valid UTF-8 kept, control bytes and invalid
 * bytes as \xHH, at most ~60 bytes, so a message stays one printable line
 * whatever the name holds. */
typedef struct {
    char text[80];
} printable_name;

static printable_name printable(const char *name)
{
    printable_name p;
    const uint8_t *s = (const uint8_t *)name;
    const size_t n = strlen(name);
    size_t in = 0, out = 0;
    while (in < n && out < 60) {
        const size_t length = utf8_sequence_length(s + in, n - in);
        if (length == 1 && s[in] >= 0x20 && s[in] != 0x7F) {
            p.text[out++] = (char)s[in];
        } else if (length > 1) {
            memcpy(p.text + out, s + in, length);
            out += length;
        } else {
            snprintf(p.text + out, sizeof p.text - out, "\\x%02X", s[in]);
            out += 4;
            in += 1;
            continue;
        }
        in += length;
    }
    if (in < n) {
        memcpy(p.text + out, "...", 3);
        out += 3;
    }
    p.text[out] = '\0';
    return p;
}

/* LACS_ERR_FORMAT with the message "<label>: <kind>: <detail>". */
__attribute__((format(printf, 3, 4))) static int format_error(const char *label, const char *kind,
                                                              const char *fmt, ...)
{
    char detail[400];
    va_list args;
    va_start(args, fmt);
    vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    return lacs_internal_error(LACS_ERR_FORMAT, label, "%s: %s", kind, detail);
}

static int memory_error(const char *label)
{
    return lacs_internal_error(LACS_ERR_MEMORY, label, "out of memory");
}

/* ---- strict JSON scanning (step 4) ---- */

typedef struct {
    const uint8_t *text;
    size_t size, pos;
    int depth;
    /* bit k: the k-th number literal of the text is an integer (one bit per
     * header byte is room enough: every number takes at least one byte) */
    uint8_t *integer_literals;
    size_t n_numbers;
    char error[160];
} json_scanner;

__attribute__((format(printf, 2, 3))) static int scan_fail(json_scanner *s, const char *fmt, ...)
{
    char what[120];
    va_list args;
    va_start(args, fmt);
    vsnprintf(what, sizeof what, fmt, args);
    va_end(args);
    snprintf(s->error, sizeof s->error, "at header byte %zu: %s", s->pos, what);
    return 0;
}

static int scan_at_end(const json_scanner *s) { return s->pos >= s->size; }

static void scan_whitespace(json_scanner *s)
{
    while (!scan_at_end(s)) {
        const uint8_t c = s->text[s->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        s->pos++;
    }
}

static int scan_expect(json_scanner *s, char c)
{
    if (scan_at_end(s))
        return scan_fail(s, "expected '%c', found the end of the header", c);
    if (s->text[s->pos] != (uint8_t)c)
        return scan_fail(s, "expected '%c'", c);
    s->pos++;
    return 1;
}

static int hex_digit_value(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads the four hex digits after "\u"; -1 if they are not four hex digits. */
static long scan_hex4(json_scanner *s)
{
    if (s->size - s->pos < 4)
        return -1;
    long code = 0;
    for (int i = 0; i < 4; i++) {
        const int digit = hex_digit_value(s->text[s->pos + (size_t)i]);
        if (digit < 0)
            return -1;
        code = code * 16 + digit;
    }
    s->pos += 4;
    return code;
}

static int scan_string(json_scanner *s)
{
    if (!scan_expect(s, '"'))
        return 0;
    for (;;) {
        if (scan_at_end(s))
            return scan_fail(s, "unterminated string");
        const uint8_t c = s->text[s->pos];
        if (c == '"') {
            s->pos++;
            return 1;
        }
        if (c < 0x20)
            return scan_fail(s, "control character 0x%02X in a string (it must be escaped)", c);
        if (c != '\\') {
            s->pos++; /* UTF-8 was checked before (step 3) */
            continue;
        }
        s->pos++;
        if (scan_at_end(s))
            return scan_fail(s, "unterminated escape");
        const uint8_t e = s->text[s->pos++];
        if (strchr("\"\\/bfnrt", e) != NULL && e != '\0')
            continue;
        if (e != 'u')
            return scan_fail(s, "invalid escape '\\%c'", e >= 0x20 && e < 0x7F ? e : '?');
        const long code = scan_hex4(s);
        if (code < 0)
            return scan_fail(s, "\\u needs four hex digits");
        if (code == 0)
            return scan_fail(s, "\\u0000 is not supported (names and values are C strings)");
        if (code >= 0xDC00 && code <= 0xDFFF)
            return scan_fail(s, "lone low surrogate \\u%04lX", code);
        if (code >= 0xD800 && code <= 0xDBFF) {
            if (s->size - s->pos < 2 || s->text[s->pos] != '\\' || s->text[s->pos + 1] != 'u')
                return scan_fail(s, "lone high surrogate \\u%04lX", code);
            s->pos += 2;
            const long low = scan_hex4(s);
            if (low < 0xDC00 || low > 0xDFFF)
                return scan_fail(s, "high surrogate \\u%04lX not followed by a low one", code);
        }
    }
}

static int scan_digits(json_scanner *s)
{
    const size_t start = s->pos;
    while (!scan_at_end(s) && s->text[s->pos] >= '0' && s->text[s->pos] <= '9')
        s->pos++;
    return s->pos > start;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, noting whether it is an integer. */
static int scan_number(json_scanner *s)
{
    int is_integer = 1;
    if (!scan_at_end(s) && s->text[s->pos] == '-')
        s->pos++;
    if (scan_at_end(s))
        return scan_fail(s, "number without digits");
    if (s->text[s->pos] == '0') {
        s->pos++;
        if (!scan_at_end(s) && s->text[s->pos] >= '0' && s->text[s->pos] <= '9')
            return scan_fail(s, "number with a leading zero");
    } else if (!scan_digits(s)) {
        return scan_fail(s, "number without digits");
    }
    if (!scan_at_end(s) && s->text[s->pos] == '.') {
        is_integer = 0;
        s->pos++;
        if (!scan_digits(s))
            return scan_fail(s, "no digits after the decimal point");
    }
    if (!scan_at_end(s) && (s->text[s->pos] == 'e' || s->text[s->pos] == 'E')) {
        is_integer = 0;
        s->pos++;
        if (!scan_at_end(s) && (s->text[s->pos] == '+' || s->text[s->pos] == '-'))
            s->pos++;
        if (!scan_digits(s))
            return scan_fail(s, "no digits in the exponent");
    }
    if (is_integer)
        s->integer_literals[s->n_numbers / 8] |= (uint8_t)(1u << (s->n_numbers % 8));
    s->n_numbers++;
    return 1;
}

static int scan_literal(json_scanner *s, const char *word)
{
    const size_t length = strlen(word);
    if (s->size - s->pos < length || memcmp(s->text + s->pos, word, length) != 0)
        return scan_fail(s, "unexpected character");
    s->pos += length;
    return 1;
}

static int scan_value(json_scanner *s);

/* Objects and arrays: open, then comma-separated members, then close. */
static int scan_container(json_scanner *s, int is_object)
{
    const char close = is_object ? '}' : ']';
    if (++s->depth > JSON_MAX_DEPTH)
        return scan_fail(s, "nesting deeper than %d", JSON_MAX_DEPTH);
    s->pos++; /* the opening bracket, seen by scan_value */
    scan_whitespace(s);
    if (!scan_at_end(s) && s->text[s->pos] == (uint8_t)close) {
        s->pos++;
        s->depth--;
        return 1;
    }
    for (;;) {
        if (is_object) {
            if (!scan_string(s))
                return 0;
            scan_whitespace(s);
            if (!scan_expect(s, ':'))
                return 0;
            scan_whitespace(s);
        }
        if (!scan_value(s))
            return 0;
        scan_whitespace(s);
        if (scan_at_end(s))
            return scan_fail(s, "expected ',' or '%c', found the end of the header", close);
        const uint8_t c = s->text[s->pos++];
        if (c == (uint8_t)close)
            break;
        if (c != ',') {
            s->pos--;
            return scan_fail(s, "expected ',' or '%c'", close);
        }
        scan_whitespace(s);
    }
    s->depth--;
    return 1;
}

static int scan_value(json_scanner *s)
{
    if (scan_at_end(s))
        return scan_fail(s, "expected a value, found the end of the header");
    const uint8_t c = s->text[s->pos];
    if (c == '{' || c == '[')
        return scan_container(s, c == '{');
    if (c == '"')
        return scan_string(s);
    if (c == '-' || (c >= '0' && c <= '9'))
        return scan_number(s);
    if (c == 't')
        return scan_literal(s, "true");
    if (c == 'f')
        return scan_literal(s, "false");
    if (c == 'n')
        return scan_literal(s, "null");
    return scan_fail(s, "unexpected character");
}

/* 1 if text is one JSON object with only JSON whitespace around it. */
static int scan_header(json_scanner *s)
{
    scan_whitespace(s);
    if (scan_at_end(s) || s->text[s->pos] != '{')
        return scan_fail(s, "the header is not a JSON object");
    if (!scan_value(s))
        return 0;
    scan_whitespace(s);
    if (!scan_at_end(s))
        return scan_fail(s, "data after the JSON object");
    return 1;
}

/* ---- reading ---- */

/* Sets INTEGER_LITERAL_FLAG on the numbers of the tree whose literal the
 * scanner found to be an integer. cJSON appends children in the order it
 * reads them, so a walk in child order meets the numbers in text order. */
static void mark_integer_literals(cJSON *item, const uint8_t *integer_literals, size_t *next_number)
{
    if (cJSON_IsNumber(item)) {
        const size_t k = (*next_number)++;
        if (integer_literals[k / 8] & (1u << (k % 8)))
            item->type |= INTEGER_LITERAL_FLAG;
    }
    for (cJSON *child = item->child; child; child = child->next)
        mark_integer_literals(child, integer_literals, next_number);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Step 5: the first duplicated key (in strcmp order) of any object in the
 * tree, or NULL. Sets *out_of_memory when it cannot check. */
static const char *find_duplicate_key(const cJSON *item, int *out_of_memory)
{
    int count = 0;
    for (const cJSON *child = item->child; child; child = child->next) {
        const char *duplicate = find_duplicate_key(child, out_of_memory);
        if (duplicate || *out_of_memory)
            return duplicate;
        count++;
    }
    if (!cJSON_IsObject(item) || count < 2)
        return NULL;
    const char **keys = malloc((size_t)count * sizeof *keys);
    if (!keys) {
        *out_of_memory = 1;
        return NULL;
    }
    int i = 0;
    for (const cJSON *child = item->child; child; child = child->next)
        keys[i++] = child->string;
    qsort(keys, (size_t)count, sizeof *keys, compare_strings);
    const char *duplicate = NULL;
    for (i = 1; i < count && !duplicate; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            duplicate = keys[i];
    free(keys);
    return duplicate;
}

/* A JSON integer in [0, 2^53); 0 if item is not one. */
static int json_integer(const cJSON *item, uint64_t *value)
{
    if (!cJSON_IsNumber(item) || !(item->type & INTEGER_LITERAL_FLAG))
        return 0;
    const double d = item->valuedouble; /* exact below 2^53; "-0" is -0.0, which passes as 0 */
    if (!(d >= 0 && d < EXACT_INTEGER_LIMIT))
        return 0;
    *value = (uint64_t)d;
    return 1;
}

/* Byte ranges relative to the data buffer, kept beside the tensors for steps 7-8. */
typedef struct {
    lacs_safetensors_tensor *tensor;
    uint64_t begin, end;
} tensor_range;

static int compare_ranges(const void *a, const void *b)
{
    const tensor_range *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->tensor->name, y->tensor->name);
}

/* Step 6 for one tensor entry: fills t (whose name is set) and its range. */
static int parse_tensor_entry(const char *label, const cJSON *entry, uint64_t data_length,
                              lacs_safetensors_tensor *t, tensor_range *range)
{
    const printable_name shown = printable(t->name); /* kept for the messages below */
    const char *name = shown.text;

    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!dtype)
        return format_error(label, "dtype", "tensor '%s' has no dtype", name);
    if (!cJSON_IsString(dtype))
        return format_error(label, "dtype", "tensor '%s': dtype is not a string", name);
    const dtype_info *info = NULL;
    for (int i = 0; i < DTYPE_COUNT && !info; i++)
        if (strcmp(dtype->valuestring, dtype_table[i].name) == 0)
            info = &dtype_table[i];
    if (!info)
        return format_error(label, "dtype", "tensor '%s': dtype \"%s\" is not F64, F32, BF16 or I64", name,
                            printable(dtype->valuestring).text);
    t->dtype = info->dtype;

    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(entry, "shape");
    if (!shape)
        return format_error(label, "shape", "tensor '%s' has no shape", name);
    if (!cJSON_IsArray(shape))
        return format_error(label, "shape", "tensor '%s': shape is not a list", name);
    const int ndim = cJSON_GetArraySize(shape);
    if (ndim > LACS_SAFETENSORS_MAX_DIMS)
        return format_error(label, "shape", "tensor '%s' has %d dimensions, more than %d", name, ndim,
                            LACS_SAFETENSORS_MAX_DIMS);
    t->ndim = ndim;
    int has_zero = 0;
    int axis = 0;
    for (const cJSON *dim = shape->child; dim; dim = dim->next, axis++) {
        uint64_t extent;
        if (!json_integer(dim, &extent))
            return format_error(label, "shape", "tensor '%s': dimension %d is not a JSON integer in [0, 2^53)", name,
                                axis);
        t->shape[axis] = (int64_t)extent;
        has_zero |= extent == 0;
    }
    /* The exact byte count must fit in 64 bits; a zero dimension makes it 0
     * whatever the others are. */
    uint64_t bytes = info->size;
    if (has_zero) {
        bytes = 0;
    } else {
        for (axis = 0; axis < ndim; axis++) {
            const uint64_t extent = (uint64_t)t->shape[axis];
            if (bytes > UINT64_MAX / extent)
                return format_error(label, "shape", "tensor '%s': its byte count overflows 64 bits", name);
            bytes *= extent;
        }
    }
    t->count = (int64_t)(bytes / info->size); /* < 2^63: bytes < 2^64 and size >= 2 */

    const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(entry, "data_offsets");
    uint64_t begin, end;
    if (!offsets)
        return format_error(label, "offsets", "tensor '%s' has no data_offsets", name);
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || !json_integer(offsets->child, &begin) ||
        !json_integer(offsets->child->next, &end))
        return format_error(label, "offsets", "tensor '%s': data_offsets is not two JSON integers in [0, 2^53)", name);
    if (begin > end || end > data_length)
        return format_error(label, "offsets",
                            "tensor '%s': data_offsets [%llu, %llu] not within 0 <= begin <= end <= %llu", name,
                            (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_length);

    if (end - begin != bytes)
        return format_error(label, "byte-count", "tensor '%s': %llu bytes for %s of %lld elements (%llu bytes)",
                            name, (unsigned long long)(end - begin), info->name, (long long)t->count,
                            (unsigned long long)bytes);
    t->nbytes = (size_t)bytes;
    range->tensor = t;
    range->begin = begin;
    range->end = end;
    return LACS_OK;
}

/* Steps 7 and 8 on the ranges sorted by begin. */
static int check_coverage(const char *label, const tensor_range *ranges, int n, uint64_t data_length)
{
    const tensor_range *furthest = NULL; /* of the tensors with bytes so far, the one ending last */
    for (int i = 0; i < n; i++) {
        if (ranges[i].begin == ranges[i].end)
            continue;
        if (furthest && ranges[i].begin < furthest->end)
            return format_error(label, "overlap", "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                                printable(furthest->tensor->name).text, (unsigned long long)furthest->begin,
                                (unsigned long long)furthest->end, printable(ranges[i].tensor->name).text,
                                (unsigned long long)ranges[i].begin, (unsigned long long)ranges[i].end);
        if (!furthest || ranges[i].end > furthest->end)
            furthest = &ranges[i];
    }
    uint64_t covered = 0; /* with no overlap, the tensors with bytes tile [0, covered) so far */
    for (int i = 0; i < n; i++) {
        if (ranges[i].begin == ranges[i].end)
            continue;
        if (ranges[i].begin != covered)
            return format_error(label, "gap", "data bytes [%llu, %llu) before tensor '%s' belong to no tensor",
                                (unsigned long long)covered, (unsigned long long)ranges[i].begin,
                                printable(ranges[i].tensor->name).text);
        covered = ranges[i].end;
    }
    if (covered != data_length)
        return format_error(label, "gap", "data bytes [%llu, %llu) at the end belong to no tensor",
                            (unsigned long long)covered, (unsigned long long)data_length);
    return LACS_OK;
}

/* Step 9: copies __metadata__ (already known to be present) into f. */
static int parse_metadata(const char *label, const cJSON *metadata, lacs_safetensors_file *f)
{
    if (!cJSON_IsObject(metadata))
        return format_error(label, "metadata", "__metadata__ is not an object");
    const int n = cJSON_GetArraySize(metadata);
    for (const cJSON *entry = metadata->child; entry; entry = entry->next)
        if (!cJSON_IsString(entry))
            return format_error(label, "metadata", "__metadata__ value of '%s' is not a string",
                                printable(entry->string).text);
    if (n == 0)
        return LACS_OK;
    f->metadata_keys = calloc((size_t)n, sizeof *f->metadata_keys);
    f->metadata_values = calloc((size_t)n, sizeof *f->metadata_values);
    if (!f->metadata_keys || !f->metadata_values)
        return memory_error(label);
    for (const cJSON *entry = metadata->child; entry; entry = entry->next) {
        f->metadata_keys[f->n_metadata] = strdup(entry->string);
        f->metadata_values[f->n_metadata] = strdup(entry->valuestring);
        f->n_metadata++; /* counted before the check, so that free() sees both */
        if (!f->metadata_keys[f->n_metadata - 1] || !f->metadata_values[f->n_metadata - 1])
            return memory_error(label);
    }
    return LACS_OK;
}

/* Step 4's JSON: the strict scan, then cJSON's tree with its integer
 * literals marked, in *root (to be freed with cJSON_Delete). */
static int parse_json(const char *label, const uint8_t *header, size_t header_length, cJSON **root)
{
    *root = NULL;
    json_scanner scanner = {.text = header, .size = header_length};
    scanner.integer_literals = calloc(header_length / 8 + 1, 1);
    if (!scanner.integer_literals)
        return memory_error(label);
    if (!scan_header(&scanner)) {
        free(scanner.integer_literals);
        return format_error(label, "header-json", "%s", scanner.error);
    }
    /* cJSON gets a terminated copy: it is not built with our sanitizers, and
     * this way no scan of it can leave the allocation. */
    char *terminated = malloc(header_length + 1);
    if (!terminated) {
        free(scanner.integer_literals);
        return memory_error(label);
    }
    memcpy(terminated, header, header_length);
    terminated[header_length] = '\0';
    cJSON *tree = cJSON_ParseWithLength(terminated, header_length);
    free(terminated);
    if (!tree) { /* the scanner accepted it, and cJSON accepts all it does: only memory can fail */
        free(scanner.integer_literals);
        return memory_error(label);
    }
    size_t next_number = 0;
    mark_integer_literals(tree, scanner.integer_literals, &next_number);
    free(scanner.integer_literals);
    if (next_number != scanner.n_numbers) { /* cannot happen while both read the same grammar */
        cJSON_Delete(tree);
        return format_error(label, "header-json", "internal error: cJSON read %zu numbers, the scanner %zu",
                            next_number, scanner.n_numbers);
    }
    *root = tree;
    return LACS_OK;
}

/* Steps 3 to 9 on f->buffer (whose size is >= 8 and header length valid). */
static int parse_header(const char *label, lacs_safetensors_file *f, size_t header_length)
{
    const uint8_t *header = f->buffer + 8;
    const uint64_t data_length = f->size - 8 - header_length;

    const size_t bad = utf8_invalid_offset(header, header_length);
    if (bad < header_length)
        return format_error(label, "header-utf8", "invalid UTF-8 at header byte %zu (0x%02X)", bad, header[bad]);

    cJSON *root;
    const int parsed = parse_json(label, header, header_length, &root);
    if (parsed != LACS_OK)
        return parsed;

    int rc = LACS_OK;
    tensor_range *ranges = NULL;
    const cJSON *metadata = NULL;
    int n_tensors = 0;
    for (const cJSON *entry = root->child; entry; entry = entry->next) {
        if (strcmp(entry->string, "__metadata__") == 0) {
            metadata = entry;
            continue;
        }
        if (!cJSON_IsObject(entry)) {
            rc = format_error(label, "header-json", "entry '%s' is not an object", printable(entry->string).text);
            goto done;
        }
        n_tensors++;
    }

    int out_of_memory = 0;
    const char *duplicate = find_duplicate_key(root, &out_of_memory);
    if (out_of_memory) {
        rc = memory_error(label);
        goto done;
    }
    if (duplicate) {
        rc = format_error(label, "duplicate-name", "'%s' appears twice in one object", printable(duplicate).text);
        goto done;
    }

    if (n_tensors > 0) {
        f->tensors = calloc((size_t)n_tensors, sizeof *f->tensors);
        ranges = calloc((size_t)n_tensors, sizeof *ranges);
        if (!f->tensors || !ranges) {
            rc = memory_error(label);
            goto done;
        }
    }
    for (const cJSON *entry = root->child; entry; entry = entry->next) {
        if (entry == metadata)
            continue;
        lacs_safetensors_tensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(entry->string);
        if (!t->name) {
            rc = memory_error(label);
            goto done;
        }
        f->n_tensors++;
        rc = parse_tensor_entry(label, entry, data_length, t, &ranges[f->n_tensors - 1]);
        if (rc != LACS_OK)
            goto done;
    }

    if (n_tensors > 0)
        qsort(ranges, (size_t)n_tensors, sizeof *ranges, compare_ranges);
    rc = check_coverage(label, ranges, n_tensors, data_length);
    if (rc != LACS_OK)
        goto done;

    if (metadata) {
        rc = parse_metadata(label, metadata, f);
        if (rc != LACS_OK)
            goto done;
    }

    /* Reorder the tensors by data offset (the order of the sorted ranges). */
    if (n_tensors > 0) {
        lacs_safetensors_tensor *sorted = malloc((size_t)n_tensors * sizeof *sorted);
        if (!sorted) {
            rc = memory_error(label);
            goto done;
        }
        const uint8_t *data = f->buffer + 8 + header_length;
        for (int i = 0; i < n_tensors; i++) {
            sorted[i] = *ranges[i].tensor;
            sorted[i].data = data + ranges[i].begin;
        }
        free(f->tensors);
        f->tensors = sorted;
    }
done:
    free(ranges);
    cJSON_Delete(root);
    return rc;
}

/* Parses the `size` bytes at `buffer`, which f takes over (freed on error too). */
static int parse_owned(uint8_t *buffer, size_t size, const char *label, lacs_safetensors_file *f)
{
    memset(f, 0, sizeof *f);
    f->buffer = buffer;
    f->size = size;
    f->path = strdup(label);
    int rc;
    if (!f->path) {
        rc = memory_error(label);
    } else if (!host_is_little_endian()) {
        rc = lacs_internal_error(LACS_ERR_FORMAT, label, "this host is big-endian; lacs needs a little-endian one");
    } else if (size < 8) {
        rc = format_error(label, "truncated", "%zu bytes, fewer than the 8 of the header length", size);
    } else {
        uint64_t header_length = 0;
        for (int i = 7; i >= 0; i--)
            header_length = header_length << 8 | buffer[i];
        if (header_length > size - 8)
            rc = format_error(label, "header-length", "header of %llu bytes, but only %zu bytes follow the length",
                              (unsigned long long)header_length, size - 8);
        else if (header_length > LACS_SAFETENSORS_MAX_HEADER)
            rc = format_error(label, "header-length", "header of %llu bytes, more than the limit of %u",
                              (unsigned long long)header_length, LACS_SAFETENSORS_MAX_HEADER);
        else
            rc = parse_header(label, f, (size_t)header_length);
    }
    if (rc != LACS_OK)
        lacs_safetensors_free(f);
    return rc;
}

int lacs_safetensors_parse(const uint8_t *bytes, size_t size, const char *label, lacs_safetensors_file *f)
{
    if (!f)
        return lacs_internal_error(LACS_ERR_FORMAT, label, "no file structure given");
    memset(f, 0, sizeof *f);
    if (!label)
        label = "(memory)";
    if (!bytes && size > 0)
        return lacs_internal_error(LACS_ERR_FORMAT, label, "NULL bytes of nonzero size");
    uint8_t *copy = malloc(size > 0 ? size : 1);
    if (!copy)
        return memory_error(label);
    if (size > 0)
        memcpy(copy, bytes, size);
    return parse_owned(copy, size, label, f);
}

int lacs_safetensors_read(const char *path, lacs_safetensors_file *f)
{
    return lacs_safetensors_read_expecting(path, NULL, f);
}

int lacs_safetensors_read_expecting(const char *path, const char *sha256, lacs_safetensors_file *f)
{
    if (!f)
        return lacs_internal_error(LACS_ERR_IO, path, "no file structure given");
    memset(f, 0, sizeof *f);
    if (!path)
        return lacs_internal_error(LACS_ERR_IO, "lacs_safetensors_read", "no path given");
    /* Non-blocking: opening a FIFO (or a device) for reading must not wait for
     * a writer; anything but a regular file is then refused. */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return lacs_internal_error(LACS_ERR_IO, path, "cannot open: %s", strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0) {
        const int saved = errno;
        close(fd);
        return lacs_internal_error(LACS_ERR_IO, path, "cannot read: %s", strerror(saved));
    }
    if (!S_ISREG(info.st_mode)) {
        close(fd);
        if (S_ISDIR(info.st_mode))
            return lacs_internal_error(LACS_ERR_IO, path, "cannot read: %s", strerror(EISDIR));
        return lacs_internal_error(LACS_ERR_IO, path, "cannot read: %s, not a regular file",
                                   lacs_internal_file_kind(info.st_mode));
    }
    /* Read to the end rather than trust st_size: the file may still be growing. */
    size_t capacity = info.st_size > 0 ? (size_t)info.st_size + 1 : 65536;
    size_t size = 0;
    uint8_t *buffer = malloc(capacity);
    if (!buffer) {
        close(fd);
        return memory_error(path);
    }
    for (;;) {
        const ssize_t got = read(fd, buffer + size, capacity - size);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got < 0) {
            const int saved = errno;
            free(buffer);
            close(fd);
            return lacs_internal_error(LACS_ERR_IO, path, "cannot read: %s", strerror(saved));
        }
        if (got == 0)
            break;
        size += (size_t)got;
        if (size < capacity)
            continue;
        if (capacity > SIZE_MAX / 2) {
            free(buffer);
            close(fd);
            return memory_error(path);
        }
        uint8_t *grown = realloc(buffer, capacity * 2);
        if (!grown) {
            free(buffer);
            close(fd);
            return memory_error(path);
        }
        buffer = grown;
        capacity *= 2;
    }
    close(fd);
    /* The hash of exactly the bytes parsed: what a manifest is compared with,
     * before anything of the file is believed. */
    char hash[65];
    lacs_sha256_hex(buffer, size, hash);
    if (sha256 && sha256[0] && strcmp(sha256, hash) != 0) {
        free(buffer);
        return format_error(path, "hash",
                            "its SHA-256 is %s, its manifest's (MANIFEST.json) %.64s: the file is not the one listed "
                            "(altered, corrupted or replaced)",
                            hash, sha256);
    }
    const int rc = parse_owned(buffer, size, path, f);
    if (rc == LACS_OK)
        memcpy(f->sha256, hash, sizeof hash);
    return rc;
}

void lacs_safetensors_free(lacs_safetensors_file *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    for (int i = 0; i < f->n_metadata; i++) {
        free(f->metadata_keys[i]);
        free(f->metadata_values[i]);
    }
    free(f->tensors);
    free(f->metadata_keys);
    free(f->metadata_values);
    free(f->buffer);
    free(f->path);
    memset(f, 0, sizeof *f);
}

const lacs_safetensors_tensor *lacs_safetensors_find(const lacs_safetensors_file *f, const char *name)
{
    if (!f || !name)
        return NULL;
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

const char *lacs_safetensors_metadata(const lacs_safetensors_file *f, const char *key)
{
    if (!f || !key)
        return NULL;
    for (int i = 0; i < f->n_metadata; i++)
        if (strcmp(f->metadata_keys[i], key) == 0)
            return f->metadata_values[i];
    return NULL;
}

void lacs_safetensors_to_double(const lacs_safetensors_tensor *t, double *out)
{
    if (t)
        lacs_values_to_double(t->dtype, t->data, t->count, out);
}

/* ---- writing ---- */

/* A growing string for the header; `failed` once an allocation fails. */
typedef struct {
    char *text;
    size_t length, capacity;
    int failed;
} string_builder;

static void append_bytes(string_builder *b, const char *bytes, size_t n)
{
    if (b->failed)
        return;
    if (b->length + n + 1 > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 256;
        while (b->length + n + 1 > capacity)
            capacity *= 2;
        char *grown = realloc(b->text, capacity);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->text = grown;
        b->capacity = capacity;
    }
    memcpy(b->text + b->length, bytes, n);
    b->length += n;
    b->text[b->length] = '\0';
}

static void append(string_builder *b, const char *text) { append_bytes(b, text, strlen(text)); }

static void append_uint(string_builder *b, uint64_t value)
{
    char digits[24];
    snprintf(digits, sizeof digits, "%llu", (unsigned long long)value);
    append(b, digits);
}

/* A JSON string (RFC 8259): quote, backslash and control bytes escaped,
 * everything else (valid UTF-8, checked by the caller) as is. */
static void append_json_string(string_builder *b, const char *text)
{
    append(b, "\"");
    for (const char *p = text; *p; p++) {
        const unsigned char c = (unsigned char)*p;
        char escaped[8];
        switch (c) {
        case '"': append(b, "\\\""); break;
        case '\\': append(b, "\\\\"); break;
        case '\b': append(b, "\\b"); break;
        case '\f': append(b, "\\f"); break;
        case '\n': append(b, "\\n"); break;
        case '\r': append(b, "\\r"); break;
        case '\t': append(b, "\\t"); break;
        default:
            if (c < 0x20) {
                snprintf(escaped, sizeof escaped, "\\u%04x", c);
                append(b, escaped);
            } else {
                append_bytes(b, p, 1);
            }
        }
    }
    append(b, "\"");
}

/* A tensor to write, with its checked byte count and place in the buffer. */
typedef struct {
    const lacs_tensor *tensor;
    size_t element_size;
    uint64_t nbytes, begin;
} planned_tensor;

/* SPEC.md 10.1's order: element size decreasing, then name. */
static int compare_planned(const void *a, const void *b)
{
    const planned_tensor *x = a, *y = b;
    if (x->element_size != y->element_size)
        return x->element_size > y->element_size ? -1 : 1;
    return strcmp(x->tensor->name, y->tensor->name);
}

static int is_valid_utf8(const char *text)
{
    const size_t n = strlen(text);
    return utf8_invalid_offset((const uint8_t *)text, n) == n;
}

/* Checks tensor i and fills its plan (all but begin). */
static int plan_tensor(const char *path, const lacs_tensor *t, int i, planned_tensor *plan)
{
    if (!t->name || !t->name[0])
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor %d has no name", i);
    const printable_name shown = printable(t->name);
    const char *name = shown.text;
    if (strcmp(t->name, "__metadata__") == 0)
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor %d: '__metadata__' is reserved", i);
    if (!is_valid_utf8(t->name))
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s': name is not valid UTF-8", name);
    const size_t element_size = lacs_dtype_size(t->dtype);
    if (element_size == 0)
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s': unknown dtype %d", name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > LACS_SAFETENSORS_MAX_DIMS)
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s': ndim %d is outside 0..%d", name, t->ndim,
                                   LACS_SAFETENSORS_MAX_DIMS);
    if (t->ndim > 0 && !t->shape)
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s': shape is NULL", name);
    uint64_t nbytes = element_size;
    int has_zero = 0;
    for (int axis = 0; axis < t->ndim; axis++) {
        /* readers accept dimensions below 2^53 only (what a JSON number holds exactly) */
        if (t->shape[axis] < 0 || (double)t->shape[axis] >= EXACT_INTEGER_LIMIT)
            return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s': dimension %d is %lld, not in [0, 2^53)",
                                       name, axis, (long long)t->shape[axis]);
        has_zero |= t->shape[axis] == 0;
    }
    /* Offsets, too, must stay below 2^53; the caller checks the sum. */
    for (int axis = 0; axis < t->ndim && !has_zero; axis++) {
        if ((double)nbytes * (double)t->shape[axis] >= EXACT_INTEGER_LIMIT)
            return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s' holds 2^53 bytes or more", name);
        nbytes *= (uint64_t)t->shape[axis];
    }
    if (has_zero)
        nbytes = 0;
    if (nbytes > 0 && !t->data)
        return lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s': data is NULL", name);
    plan->tensor = t;
    plan->element_size = element_size;
    plan->nbytes = nbytes;
    return LACS_OK;
}

int lacs_safetensors_serialize(const lacs_tensor *tensors, int n_tensors, const char *metadata_key,
                               const char *metadata_value, const char *label, uint8_t **bytes, size_t *size)
{
    const char *path = label ? label : "(memory)";
    *bytes = NULL;
    *size = 0;
    if (!host_is_little_endian())
        return lacs_internal_error(LACS_ERR_FORMAT, path, "this host is big-endian; lacs needs a little-endian one");
    if (n_tensors < 0 || (n_tensors > 0 && !tensors))
        return lacs_internal_error(LACS_ERR_FORMAT, path, "%d tensors%s", n_tensors,
                                   n_tensors < 0 ? "" : " but tensors is NULL");
    if (!metadata_key != !metadata_value)
        return lacs_internal_error(LACS_ERR_FORMAT, path, "metadata key and value must be given together");
    if (metadata_key && (!is_valid_utf8(metadata_key) || !is_valid_utf8(metadata_value)))
        return lacs_internal_error(LACS_ERR_FORMAT, path, "metadata is not valid UTF-8");

    planned_tensor *plan = n_tensors > 0 ? calloc((size_t)n_tensors, sizeof *plan) : NULL;
    if (n_tensors > 0 && !plan)
        return memory_error(path);
    int rc = LACS_OK;
    string_builder header = {0};

    for (int i = 0; i < n_tensors && rc == LACS_OK; i++)
        rc = plan_tensor(path, &tensors[i], i, &plan[i]);
    if (rc != LACS_OK)
        goto done;
    /* Equal names can sit in different dtype groups: look for them in name order. */
    const char **names = n_tensors > 0 ? malloc((size_t)n_tensors * sizeof *names) : NULL;
    if (n_tensors > 0 && !names) {
        rc = memory_error(path);
        goto done;
    }
    for (int i = 0; i < n_tensors; i++)
        names[i] = tensors[i].name;
    if (n_tensors > 0)
        qsort(names, (size_t)n_tensors, sizeof *names, compare_strings);
    for (int i = 1; i < n_tensors && rc == LACS_OK; i++)
        if (strcmp(names[i - 1], names[i]) == 0)
            rc = lacs_internal_error(LACS_ERR_FORMAT, path, "tensor '%s' is given twice", printable(names[i]).text);
    free(names);
    if (rc != LACS_OK)
        goto done;

    if (n_tensors > 0)
        qsort(plan, (size_t)n_tensors, sizeof *plan, compare_planned);
    uint64_t total = 0;
    for (int i = 0; i < n_tensors; i++) {
        plan[i].begin = total;
        total += plan[i].nbytes;
        if ((double)total >= EXACT_INTEGER_LIMIT) {
            rc = lacs_internal_error(LACS_ERR_FORMAT, path, "the tensors hold 2^53 bytes or more");
            goto done;
        }
    }

    append(&header, "{");
    if (metadata_key) {
        append(&header, "\"__metadata__\":{");
        append_json_string(&header, metadata_key);
        append(&header, ":");
        append_json_string(&header, metadata_value);
        append(&header, "}");
    }
    for (int i = 0; i < n_tensors; i++) {
        const lacs_tensor *t = plan[i].tensor;
        if (i > 0 || metadata_key)
            append(&header, ",");
        append_json_string(&header, t->name);
        append(&header, ":{\"dtype\":\"");
        append(&header, lacs_dtype_name(t->dtype));
        append(&header, "\",\"shape\":[");
        for (int axis = 0; axis < t->ndim; axis++) {
            if (axis > 0)
                append(&header, ",");
            append_uint(&header, (uint64_t)t->shape[axis]);
        }
        append(&header, "],\"data_offsets\":[");
        append_uint(&header, plan[i].begin);
        append(&header, ",");
        append_uint(&header, plan[i].begin + plan[i].nbytes);
        append(&header, "]}");
    }
    append(&header, "}");
    while ((8 + header.length) % 8 != 0)
        append(&header, " ");
    if (header.failed) {
        rc = memory_error(path);
        goto done;
    }
    if ((double)header.length + (double)total + 8 >= (double)SIZE_MAX) {
        rc = memory_error(path);
        goto done;
    }
    const size_t file_size = 8 + header.length + (size_t)total;
    uint8_t *out = malloc(file_size > 0 ? file_size : 1);
    if (!out) {
        rc = memory_error(path);
        goto done;
    }
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)header.length >> (8 * i)); /* little-endian whatever the host */
    memcpy(out + 8, header.text, header.length);
    for (int i = 0; i < n_tensors; i++)
        if (plan[i].nbytes > 0)
            memcpy(out + 8 + header.length + plan[i].begin, plan[i].tensor->data, plan[i].nbytes);
    *bytes = out;
    *size = file_size;
done:
    free(header.text);
    free(plan);
    return rc;
}

int lacs_safetensors_write(const char *path, const lacs_tensor *tensors, int n_tensors,
                           const char *metadata_key, const char *metadata_value, int overwrite)
{
    if (!path || !path[0])
        return lacs_internal_error(LACS_ERR_IO, "lacs_safetensors_write", "no path given");
    uint8_t *bytes;
    size_t size;
    int rc = lacs_safetensors_serialize(tensors, n_tensors, metadata_key, metadata_value, path, &bytes, &size);
    if (rc != LACS_OK)
        return rc;
    rc = lacs_output_file_write(path, bytes, size, NULL, overwrite ? LACS_OUTPUT_REPLACE : 0);
    free(bytes);
    return rc;
}

/* ---- SHA-256 (FIPS 180-4) ---- */

static const uint32_t sha256_round_constants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotate_right(uint32_t x, int n) { return x >> n | x << (32 - n); }

/* One 64-byte block into the state (FIPS 180-4, 6.2.2). */
static void sha256_block(uint32_t h[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16 | (uint32_t)block[4 * t + 2] << 8 |
               (uint32_t)block[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        const uint32_t s0 = rotate_right(w[t - 15], 7) ^ rotate_right(w[t - 15], 18) ^ w[t - 15] >> 3;
        const uint32_t s1 = rotate_right(w[t - 2], 17) ^ rotate_right(w[t - 2], 19) ^ w[t - 2] >> 10;
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        const uint32_t sum1 = rotate_right(e, 6) ^ rotate_right(e, 11) ^ rotate_right(e, 25);
        const uint32_t choose = (e & f) ^ (~e & g);
        const uint32_t t1 = k + sum1 + choose + sha256_round_constants[t] + w[t];
        const uint32_t sum0 = rotate_right(a, 2) ^ rotate_right(a, 13) ^ rotate_right(a, 22);
        const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
        const uint32_t t2 = sum0 + majority;
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

void lacs_sha256_init(lacs_sha256 *s)
{
    static const uint32_t initial[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, initial, sizeof initial);
    s->length = 0;
    s->used = 0;
}

void lacs_sha256_update(lacs_sha256 *s, const void *data, size_t size)
{
    const uint8_t *bytes = data;
    s->length += size;
    while (size > 0) {
        size_t take = 64 - s->used;
        if (take > size)
            take = size;
        memcpy(s->block + s->used, bytes, take);
        s->used += take;
        bytes += take;
        size -= take;
        if (s->used == 64) {
            sha256_block(s->h, s->block);
            s->used = 0;
        }
    }
}

void lacs_sha256_final(lacs_sha256 *s, char hex[65])
{
    const uint64_t bit_length = s->length * 8;
    /* Padding (5.1.1): a 1 bit, zeros to 56 mod 64, the 64-bit big-endian length. */
    s->block[s->used++] = 0x80;
    if (s->used > 56) {
        memset(s->block + s->used, 0, 64 - s->used);
        sha256_block(s->h, s->block);
        s->used = 0;
    }
    memset(s->block + s->used, 0, 56 - s->used);
    for (int i = 0; i < 8; i++)
        s->block[56 + i] = (uint8_t)(bit_length >> (56 - 8 * i));
    sha256_block(s->h, s->block);
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        const uint8_t byte = (uint8_t)(s->h[i / 4] >> (24 - 8 * (i % 4)));
        hex[2 * i] = digits[byte >> 4];
        hex[2 * i + 1] = digits[byte & 15];
    }
    hex[64] = '\0';
}

void lacs_sha256_hex(const void *data, size_t size, char hex[65])
{
    lacs_sha256 s;
    lacs_sha256_init(&s);
    lacs_sha256_update(&s, data, size);
    lacs_sha256_final(&s, hex);
}
