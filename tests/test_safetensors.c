/* The safetensors reader and writer and SHA-256 (SPEC.md 10.1, 10.2):
 *   sha256        FIPS 180-4 test vectors, one-shot and incremental;
 *   st_write      writer -> reader round trips (every dtype, a scalar, an
 *                 empty tensor, names that need escaping), the exact bytes of a
 *                 small file, overwrite refusal, bad tensors refused;
 *   st_kinds      for each kind of SPEC.md 10.2 a malformed buffer built here,
 *                 and the order of the checks where a file has two faults;
 *   st_valid      what the reader must accept (JSON whitespace, escapes,
 *                 -0, zero-byte tensors anywhere, unaligned data);
 *   st_read       files that cannot be read (missing, a directory);
 *   st_corpus     every file of tests/data/malformed gets the kind its name
 *                 starts with, every kind has a file, every file of
 *                 tests/data/valid reads; a missing or empty directory fails.
 * Tests run from the repository root (make test-c). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lacs/safetensors.h"
#include "lacs/types.h"

static const char *const spec_kinds[] = {
    "truncated", "header-length", "header-utf8", "header-json", "duplicate-name", "dtype",
    "shape", "offsets", "byte-count", "overlap", "gap", "metadata",
};
enum { KIND_COUNT = sizeof spec_kinds / sizeof spec_kinds[0] };

/* ---- SHA-256 ---- */

static void expect_sha256(const char *message, const char *expected)
{
    char hex[65];
    lacs_sha256_hex(message, strlen(message), hex);
    cr_expect_str_eq(hex, expected, "SHA-256 of \"%s\"", message);
}

Test(sha256, fips_180_vectors)
{
    expect_sha256("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_sha256("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    /* 448 bits: the padding's length no longer fits in the first block */
    expect_sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    expect_sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                  "mnopqrstnopqrstu",
                  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

Test(sha256, one_million_a_in_uneven_pieces)
{
    enum { TOTAL = 1000000 };
    static char a[TOTAL];
    memset(a, 'a', sizeof a);
    lacs_sha256 s;
    lacs_sha256_init(&s);
    /* pieces of 1, 2, ..., 150 bytes and over again: every offset in a block, pieces across blocks */
    size_t done = 0, piece = 1;
    while (done < TOTAL) {
        const size_t take = piece < TOTAL - done ? piece : TOTAL - done;
        lacs_sha256_update(&s, a + done, take);
        done += take;
        piece = piece % 150 + 1;
    }
    char hex[65];
    lacs_sha256_final(&s, hex);
    cr_expect_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    lacs_sha256_hex(a, TOTAL, hex);
    cr_expect_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

Test(sha256, every_split_of_the_448_bit_message)
{
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    const size_t n = strlen(m);
    for (size_t split = 0; split <= n; split++) {
        lacs_sha256 s;
        char hex[65];
        lacs_sha256_init(&s);
        lacs_sha256_update(&s, m, split);
        lacs_sha256_update(&s, m + split, n - split);
        lacs_sha256_final(&s, hex);
        cr_expect_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "split at %zu",
                         split);
    }
}

/* ---- files in memory ---- */

enum { MAX_FILE = 8192 };
typedef struct {
    uint8_t bytes[MAX_FILE];
    size_t size;
} memory_file;

/* 8 bytes declaring `declared` as the header length, `header_length` bytes of
 * header, then `data_length` data bytes (1, 2, 3, ...). */
static memory_file make_file_declaring(uint64_t declared, const char *header, size_t header_length,
                                       size_t data_length)
{
    memory_file m = {.size = 8 + header_length + data_length};
    cr_assert(m.size <= MAX_FILE, "test file too large");
    for (int i = 0; i < 8; i++)
        m.bytes[i] = (uint8_t)(declared >> (8 * i));
    memcpy(m.bytes + 8, header, header_length);
    for (size_t i = 0; i < data_length; i++)
        m.bytes[8 + header_length + i] = (uint8_t)(i + 1);
    return m;
}

static memory_file make_file(const char *header, size_t data_length)
{
    return make_file_declaring(strlen(header), header, strlen(header), data_length);
}

/* Parsing `m` must fail as LACS_ERR_FORMAT with the message "label: <kind>: ..."
 * and leave the structure empty. `what` names the case in failure messages. */
static void expect_kind_of(const uint8_t *bytes, size_t size, const char *kind, const char *what)
{
    lacs_safetensors_file f;
    const int rc = lacs_safetensors_parse(bytes, size, "label", &f);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "label: %s: ", kind);
    cr_expect_eq(rc, LACS_ERR_FORMAT, "%s: expected %s, got rc %d (%s)", what, kind, rc, lacs_last_error());
    cr_expect(strncmp(lacs_last_error(), prefix, strlen(prefix)) == 0, "%s: expected \"%s...\", got \"%s\"", what,
              prefix, lacs_last_error());
    cr_expect(f.buffer == NULL && f.tensors == NULL && f.n_tensors == 0 && f.path == NULL && f.n_metadata == 0,
              "%s: the structure is not left empty", what);
    lacs_safetensors_free(&f);
}

static void expect_kind(const memory_file *m, const char *kind, const char *what)
{
    expect_kind_of(m->bytes, m->size, kind, what);
}

/* A header and how many data bytes follow it. */
typedef struct {
    const char *header;
    size_t data_length;
} header_case;

static void expect_kind_for_each(const header_case *cases, size_t n, const char *kind)
{
    for (size_t i = 0; i < n; i++) {
        const memory_file m = make_file(cases[i].header, cases[i].data_length);
        expect_kind(&m, kind, cases[i].header);
    }
}

#define CASES(kind, ...)                                                                  \
    do {                                                                                  \
        const header_case cases_[] = {__VA_ARGS__};                                       \
        expect_kind_for_each(cases_, sizeof cases_ / sizeof cases_[0], kind);             \
    } while (0)

/* A valid tensor "a": two F32 values, the 8 bytes of the buffer. */
#define A_F32x2 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define B_F32x2_AT(begin, end) "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #begin "," #end "]}"

/* Parses `m`, which must be valid. */
static void parse_ok(const memory_file *m, lacs_safetensors_file *f, const char *what)
{
    const int rc = lacs_safetensors_parse(m->bytes, m->size, "label", f);
    cr_assert_eq(rc, LACS_OK, "%s: %s", what, lacs_last_error());
}

static void expect_valid(const char *header, size_t data_length, int n_tensors)
{
    const memory_file m = make_file(header, data_length);
    lacs_safetensors_file f;
    parse_ok(&m, &f, header);
    cr_expect_eq(f.n_tensors, n_tensors, "%s: %d tensors, expected %d", header, f.n_tensors, n_tensors);
    lacs_safetensors_free(&f);
}

/* ---- one test per kind of SPEC.md 10.2 ---- */

Test(st_kinds, truncated)
{
    const uint8_t bytes[8] = {0};
    for (size_t size = 0; size < 8; size++)
        expect_kind_of(size > 0 ? bytes : NULL, size, "truncated", "fewer than 8 bytes");
    expect_kind_of(bytes, 8, "header-json", "8 zero bytes: an empty header, no longer truncated");
}

Test(st_kinds, header_length)
{
    memory_file m = make_file_declaring(100, "{}", 2, 0);
    expect_kind(&m, "header-length", "N = 100, 2 bytes follow");
    m = make_file_declaring(3, "{}", 2, 0);
    expect_kind(&m, "header-length", "N one more than the bytes that follow");
    m = make_file_declaring(UINT64_MAX, "{}", 2, 0);
    expect_kind(&m, "header-length", "N = 2^64 - 1");
    m = make_file_declaring(UINT64_MAX - 7, "{}", 2, 0);
    expect_kind(&m, "header-length", "N + 8 wraps around");

    /* over 100 MB, though the file holds it */
    const size_t n = LACS_SAFETENSORS_MAX_HEADER + 1;
    uint8_t *big = malloc(8 + n);
    cr_assert(big != NULL);
    memset(big, ' ', 8 + n);
    big[8] = '{';
    big[9] = '}';
    for (int i = 0; i < 8; i++)
        big[i] = (uint8_t)((uint64_t)n >> (8 * i));
    expect_kind_of(big, 8 + n, "header-length", "N = 100 MB + 1");
    /* exactly 100 MB is allowed: the same spaces, one fewer */
    for (int i = 0; i < 8; i++)
        big[i] = (uint8_t)((uint64_t)(n - 1) >> (8 * i));
    lacs_safetensors_file f;
    cr_expect_eq(lacs_safetensors_parse(big, 8 + n - 1, "label", &f), LACS_OK, "N = 100 MB: %s", lacs_last_error());
    lacs_safetensors_free(&f);
    free(big);
}

Test(st_kinds, header_utf8)
{
    const char *const headers[] = {
        "{\"\xC0\x80\":{}}",             /* overlong NUL */
        "{\"\xC1\xBF\":{}}",             /* overlong two-byte */
        "{\"\xE0\x80\xAF\":{}}",         /* overlong three-byte '/' */
        "{\"\xF0\x82\x82\xAC\":{}}",     /* overlong four-byte euro sign */
        "{\"\xED\xA0\x80\":{}}",         /* surrogate U+D800 */
        "{\"\xED\xBF\xBF\":{}}",         /* surrogate U+DFFF */
        "{\"\xF4\x90\x80\x80\":{}}",     /* U+110000 */
        "{\"\xF5\x80\x80\x80\":{}}",     /* lead byte F5 */
        "{\"\xFF\":{}}",                 /* never in UTF-8 */
        "{\"\x80\":{}}",                 /* a lone continuation byte */
        "{\"\xE2\x82\":{}}",             /* a sequence cut short */
        "{}  \xE2\x82",                  /* cut short by the end of the header, in the padding */
        "{} \xFF",                       /* invalid in the padding: UTF-8 is checked before JSON */
        "[\xFF]",                        /* not an object either: UTF-8 comes first */
    };
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        const memory_file m = make_file(headers[i], 0);
        char what[32];
        snprintf(what, sizeof what, "header %zu", i);
        expect_kind(&m, "header-utf8", what);
    }
}

Test(st_kinds, header_json)
{
    CASES("header-json", {"", 0}, {" ", 0}, {"[]", 0}, {"\"a\"", 0}, {"null", 0}, {"{", 0}, {"{\"a\"", 0},
          {"{\"a\":}", 0}, {"{} x", 0}, {"{}{}", 0}, {"{\"a\":1}", 0}, {"{\"a\":[]}", 0}, {"{\"a\":\"F32\"}", 0},
          {"{\"a\":null}", 0}, {"{" A_F32x2 ",\"b\":7}", 8}, {"{\"a\":{},}", 0}, {"{'a':{}}", 0},
          {"{\"a\":{\"shape\":[01]}}", 0}, {"{\"a\":{\"shape\":[+1]}}", 0}, {"{\"a\":{\"shape\":[.5]}}", 0},
          {"{\"a\":{\"shape\":[1.]}}", 0}, {"{\"a\":{\"shape\":[1e]}}", 0}, {"{\"a\":{\"shape\":[-]}}", 0},
          {"{\"a\":{\"shape\":[NaN]}}", 0}, {"{\"a\":{\"shape\":[Infinity]}}", 0},
          {"{\"a\":{\"shape\":[0x10]}}", 0}, {"{\"a\":{\"x\":tru}}", 0}, {"{\"a\":{\"x\":True}}", 0},
          {"{\"a\\x\":{}}", 0}, {"{\"a\\u12\":{}}", 0}, {"{\"a\\u0000b\":{}}", 0},
          {"{\"\\ud800\":{}}", 0}, {"{\"\\udc00\":{}}", 0}, {"{\"\\ud800\\u0041\":{}}", 0},
          {"{\"\\ud800x\":{}}", 0}, {"{\"a\nb\":{}}", 0}, {"{\"a\tb\":{}}", 0}, {"{\"a\x1f\":{}}", 0},
          {"\xEF\xBB\xBF{}", 0}, {"\v{}", 0}, {"{}\f", 0}, {"{\"a\":{}", 0}, {"{\"unterminated", 0});
    /* a raw NUL, in the padding and in a name */
    memory_file m = make_file_declaring(4, "{}\0 ", 4, 0);
    expect_kind(&m, "header-json", "NUL after the object");
    m = make_file_declaring(7, "{\"a\0\":1", 7, 0);
    expect_kind(&m, "header-json", "NUL in a name");
}

/* Containers nested `depth` deep: the root, the entry, then arrays in an ignored key. */
static void nested_header(char *out, size_t capacity, int depth)
{
    size_t n = (size_t)snprintf(out, capacity, "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0],\"x\":");
    for (int i = 0; i < depth - 2; i++)
        out[n++] = '[';
    for (int i = 0; i < depth - 2; i++)
        out[n++] = ']';
    out[n++] = '}';
    out[n++] = '}';
    out[n] = '\0';
    cr_assert(n < capacity);
}

Test(st_kinds, header_json_nesting)
{
    static char header[4096];
    nested_header(header, sizeof header, 1000);
    expect_valid(header, 0, 1); /* cJSON's limit, which the scanner must not undercut */
    nested_header(header, sizeof header, 1001);
    const memory_file m = make_file(header, 0);
    expect_kind(&m, "header-json", "1001 levels");
}

Test(st_kinds, duplicate_name)
{
    CASES("duplicate-name", {"{" A_F32x2 "," A_F32x2 "}", 8},
          {"{" A_F32x2 ",\"\\u0061\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"__metadata__\":{},\"__metadata__\":{}}", 0},
          {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}}", 0},
          {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          /* before the tensors are looked at */
          {"{\"a\":{\"dtype\":\"F16\"},\"a\":{}}", 0});
}

Test(st_kinds, dtype)
{
    CASES("dtype", {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4},
          {"{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32 \",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":[\"F32\"],\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"Dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{}}", 0});
}

Test(st_kinds, shape)
{
    CASES("shape", {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":\"[2]\",\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8},
          /* integral, but not written as JSON integers */
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0.2E1],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-0.0],\"data_offsets\":[0,0]}}", 0},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[100000000000000000000000000000000000000000000],"
           "\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2e-1],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[null],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[9007199254740992],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e400],\"data_offsets\":[0,8]}}", 8},
          /* the byte count reaches 2^64: 2^62 elements of 4 bytes, 2^61 of 8 */
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1073741824,1073741824,4],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"I64\",\"shape\":[2147483648,1073741824],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[4503599627370496,4503599627370496],\"data_offsets\":[0,8]}}", 8},
          /* before data_offsets is looked at */
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":\"x\"}}", 0});
    /* just below 2^64 bytes (3 * 2^62) the shape is fine: the byte count is what is wrong */
    CASES("byte-count", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1073741824,1073741824,3],\"data_offsets\":[0,8]}}", 8});
}

Test(st_kinds, offsets)
{
    CASES("offsets", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":0}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0.5,8.5]}}", 9},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0e0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[\"0\",\"8\"]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"begin\":0,\"end\":8}}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9007199254740992]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[9,9]}}", 8});
}

Test(st_kinds, byte_count)
{
    CASES("byte-count", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[0,4]}}", 4},
          {"{\"a\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,8]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,8]}}", 8});
}

Test(st_kinds, overlap)
{
    CASES("overlap", {"{" A_F32x2 "," B_F32x2_AT(4, 12) "}", 12}, {"{" A_F32x2 "," B_F32x2_AT(0, 8) "}", 8},
          {"{" B_F32x2_AT(4, 12) "," A_F32x2 "}", 12},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}," B_F32x2_AT(4, 12) "}", 16},
          /* a gap too, elsewhere: overlap is checked first */
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}," B_F32x2_AT(8, 16) "}", 16});
}

Test(st_kinds, gap)
{
    CASES("gap", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}," B_F32x2_AT(8, 16) "}", 16},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8},
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8}, {"{}", 4},
          {"{\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 1},
          /* a zero-byte tensor does not fill a hole */
          {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}," B_F32x2_AT(8, 16) "}",
           16},
          /* bad metadata too: gap is checked first */
          {"{\"__metadata__\":[],\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8});
}

Test(st_kinds, metadata)
{
    CASES("metadata", {"{\"__metadata__\":[]}", 0}, {"{\"__metadata__\":\"lacs\"}", 0},
          {"{\"__metadata__\":null}", 0}, {"{\"__metadata__\":{\"k\":1}}", 0},
          {"{\"__metadata__\":{\"k\":{\"a\":\"b\"}}}", 0}, {"{\"__metadata__\":{\"k\":[\"v\"]}}", 0},
          {"{\"__metadata__\":{\"k\":\"v\",\"l\":null}}", 0}, {"{\"__metadata__\":{\"k\":true}}", 0},
          {"{" A_F32x2 ",\"__metadata__\":{\"k\":2}}", 8});
}

Test(st_kinds, order_within_and_across_tensors)
{
    /* per tensor in header order: a's fault is found first, whatever b's is */
    CASES("dtype", {"{\"a\":{\"dtype\":\"F16\",\"shape\":[-1]},\"b\":{\"dtype\":\"F32\",\"shape\":[-1]}}", 0});
    CASES("shape", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1]},\"b\":{\"dtype\":\"F16\"}}", 0});
    CASES("dtype", {"{\"b\":{\"dtype\":\"F16\"},\"a\":{\"dtype\":\"F32\",\"shape\":[-1]}}", 0});
    CASES("offsets", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99]},\"b\":{\"dtype\":\"F16\"}}",
                      8});
    CASES("byte-count", {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,8]}," B_F32x2_AT(4, 12) "}",
                         12});
    /* a non-object entry is header-json even after a bad tensor or a duplicate */
    CASES("header-json", {"{\"a\":{\"dtype\":\"F16\"},\"b\":1}", 0}, {"{\"a\":{},\"a\":{},\"b\":[]}", 0});
}

/* ---- what the reader accepts ---- */

Test(st_valid, headers)
{
    expect_valid("{}", 0, 0);
    expect_valid("{}      ", 0, 0);
    expect_valid(" \t\r\n{ \t\r\n} \t\r\n", 0, 0);
    expect_valid("{ \"a\" : { \"dtype\" : \"F32\" , \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] } }", 8, 1);
    expect_valid("{\"__metadata__\":{}}", 0, 0);
    /* -0 is a JSON integer, and 0 */
    expect_valid("{\"a\":{\"dtype\":\"F32\",\"shape\":[-0, 3],\"data_offsets\":[-0,0]}}", 0, 1);
    expect_valid("{\"a\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0],\"x\":[1.5,2e3]}}", 0, 1);
    /* keys other than dtype, shape, data_offsets are ignored */
    expect_valid("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"dtype_\":null,\"x\":{\"y\":[1,{}]}}}",
                 8, 1);
    /* names: escapes, non-ASCII, empty, a surrogate pair, "__metadata__" spelled differently */
    expect_valid("{\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1);
    expect_valid("{\"\xE2\x82\xAC\xF0\x9F\x98\x80\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1);
    expect_valid("{\"a\x7f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1); /* DEL needs no escape */
    expect_valid("{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1);
    expect_valid("{\"\\ud83d\\ude00\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1);
    expect_valid("{\"__Metadata__\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, 1);
    /* a zero dimension makes the byte count 0, however large the others */
    expect_valid("{\"a\":{\"dtype\":\"F64\",\"shape\":[0,4503599627370496,4503599627370496,4503599627370496],"
                 "\"data_offsets\":[0,0]}}",
                 0, 1);
    /* eight dimensions, the most */
    expect_valid("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8, 1);
}

Test(st_valid, zero_byte_tensors_anywhere)
{
    /* inside another tensor's range, at the very end, at 0: they cover nothing */
    const memory_file m = make_file("{" A_F32x2 ",\"z\":{\"dtype\":\"F64\",\"shape\":[0,3],\"data_offsets\":[4,4]},"
                                    "\"e\":{\"dtype\":\"BF16\",\"shape\":[2,0],\"data_offsets\":[8,8]},"
                                    "\"s\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[0,0]}}",
                                    8);
    lacs_safetensors_file f;
    parse_ok(&m, &f, "zero-byte tensors");
    cr_assert_eq(f.n_tensors, 4);
    /* data-offset order, ties by end then name */
    const char *const order[] = {"s", "a", "z", "e"};
    for (int i = 0; i < 4; i++)
        cr_expect_str_eq(f.tensors[i].name, order[i], "position %d", i);
    const lacs_safetensors_tensor *z = lacs_safetensors_find(&f, "z");
    cr_assert_not_null(z);
    cr_expect_eq(z->count, 0);
    cr_expect_eq(z->nbytes, 0);
    cr_expect_eq(z->ndim, 2);
    cr_expect_eq(z->shape[1], 3);
    lacs_safetensors_free(&f);
}

Test(st_valid, values_unaligned_and_lookup)
{
    /* BF16 first puts the F32, F64 and I64 data at odd offsets from any alignment */
    const char *header = "{\"__metadata__\":{\"lacs\":\"{\\\"id\\\": \\\"x\\\"}\",\"other\":\"\"},"
                         "\"i\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[10,18]},"
                         "\"h\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]},"
                         "\"f\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[2,6]},"
                         "\"d\":{\"dtype\":\"F64\",\"shape\":[1,1],\"data_offsets\":[18,26]},"
                         "\"h2\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[6,10]}}";
    const size_t header_length = strlen(header) + 1; /* an odd N: the data starts unaligned */
    uint8_t data[26];
    const uint16_t bf16 = 0xC0A0; /* -5.0 */
    const uint16_t bf16_pair[2] = {0x3F80, 0x0001}; /* 1.0 and the smallest subnormal, 2^-133 */
    const float f32 = 0.1f;
    const int64_t i64 = -(INT64_C(1) << 60) - 1; /* rounds as a C cast does */
    const double f64 = 1.0 / 3.0;
    memcpy(data, &bf16, 2);
    memcpy(data + 2, &f32, 4);
    memcpy(data + 6, bf16_pair, 4);
    memcpy(data + 10, &i64, 8);
    memcpy(data + 18, &f64, 8);
    char padded[1024];
    snprintf(padded, sizeof padded, "%s ", header);
    memory_file m = make_file_declaring(header_length, padded, header_length, 0);
    memcpy(m.bytes + 8 + header_length, data, sizeof data);
    m.size += sizeof data;

    lacs_safetensors_file f;
    parse_ok(&m, &f, "unaligned");
    cr_assert_eq(f.n_tensors, 5);
    const char *const order[] = {"h", "f", "h2", "i", "d"};
    for (int i = 0; i < 5; i++)
        cr_expect_str_eq(f.tensors[i].name, order[i], "position %d", i);
    double out[2];
    const lacs_safetensors_tensor *t = lacs_safetensors_find(&f, "h");
    cr_assert_not_null(t);
    lacs_safetensors_to_double(t, out);
    cr_expect_eq(out[0], -5.0);
    t = lacs_safetensors_find(&f, "h2");
    cr_assert_not_null(t);
    lacs_safetensors_to_double(t, out);
    cr_expect_eq(out[0], 1.0);
    cr_expect_eq(out[1], 0x1p-133);
    t = lacs_safetensors_find(&f, "f");
    cr_assert_not_null(t);
    cr_expect_eq(t->ndim, 0);
    cr_expect_eq(t->count, 1);
    lacs_safetensors_to_double(t, out);
    cr_expect_eq(out[0], (double)0.1f);
    t = lacs_safetensors_find(&f, "i");
    cr_assert_not_null(t);
    lacs_safetensors_to_double(t, out);
    cr_expect_eq(out[0], (double)i64);
    t = lacs_safetensors_find(&f, "d");
    cr_assert_not_null(t);
    lacs_safetensors_to_double(t, out);
    cr_expect_eq(out[0], 1.0 / 3.0);
    cr_expect_null(lacs_safetensors_find(&f, "missing"));
    cr_expect_null(lacs_safetensors_find(&f, "__metadata__"));

    cr_assert_eq(f.n_metadata, 2);
    cr_expect_str_eq(f.metadata_keys[0], "lacs"); /* file order */
    cr_expect_str_eq(f.metadata_keys[1], "other");
    cr_expect_str_eq(lacs_safetensors_metadata(&f, "lacs"), "{\"id\": \"x\"}");
    cr_expect_str_eq(lacs_safetensors_metadata(&f, "other"), "");
    cr_expect_null(lacs_safetensors_metadata(&f, "missing"));
    cr_expect_str_eq(f.path, "label");
    lacs_safetensors_free(&f);
    lacs_safetensors_free(&f); /* free leaves it empty: a second free is harmless */
}

Test(st_valid, parse_copies_the_bytes)
{
    memory_file m = make_file("{" A_F32x2 "}", 0);
    const float values[2] = {1.5f, -2.0f};
    memcpy(m.bytes + m.size, values, sizeof values);
    m.size += sizeof values;
    lacs_safetensors_file f;
    parse_ok(&m, &f, "copy");
    memset(m.bytes, 0, sizeof m.bytes); /* the caller's bytes may go away */
    double out[2];
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "a"), out);
    cr_expect(out[0] == 1.5 && out[1] == -2.0, "got %g %g", out[0], out[1]);
    cr_expect(f.buffer != m.bytes);
    lacs_safetensors_free(&f);
}

Test(st_valid, dtype_names_and_sizes)
{
    cr_expect_eq(lacs_dtype_size(LACS_F64), 8);
    cr_expect_eq(lacs_dtype_size(LACS_F32), 4);
    cr_expect_eq(lacs_dtype_size(LACS_BF16), 2);
    cr_expect_eq(lacs_dtype_size(LACS_I64), 8);
    cr_expect_eq(lacs_dtype_size((lacs_dtype)9), 0);
    cr_expect_str_eq(lacs_dtype_name(LACS_F64), "F64");
    cr_expect_str_eq(lacs_dtype_name(LACS_F32), "F32");
    cr_expect_str_eq(lacs_dtype_name(LACS_BF16), "BF16");
    cr_expect_str_eq(lacs_dtype_name(LACS_I64), "I64");
}

/* ---- files on disk ---- */

/* A fresh directory under /tmp for one test, and a path in it. */
static char test_dir[64];

static void make_test_dir(void)
{
    strcpy(test_dir, "/tmp/lacs-safetensors-XXXXXX");
    cr_assert_not_null(mkdtemp(test_dir), "mkdtemp failed");
}

static void remove_test_dir(void)
{
    DIR *dir = opendir(test_dir);
    if (!dir)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", test_dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            rmdir(path);
        else
            remove(path);
    }
    closedir(dir);
    rmdir(test_dir);
}

/* A path in the test directory, in one of a few rotating buffers, so that a
 * test can hold several at once. */
static const char *in_test_dir(const char *name)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s/%s", test_dir, name);
    return path;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* The whole file, malloc'd; *size its length. */
static uint8_t *slurp(const char *path, size_t *size)
{
    FILE *file = fopen(path, "rb");
    cr_assert_not_null(file, "cannot open %s", path);
    static uint8_t buffer[1 << 16];
    *size = fread(buffer, 1, sizeof buffer, file);
    fclose(file);
    uint8_t *copy = malloc(*size + 1);
    cr_assert_not_null(copy);
    memcpy(copy, buffer, *size);
    return copy;
}

static uint64_t header_length_of(const uint8_t *bytes)
{
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | bytes[i];
    return n;
}

Test(st_write, round_trip_every_dtype, .init = make_test_dir, .fini = remove_test_dir)
{
    const double o[6] = {1.5, -2.25, 1e-300, 0x1.fffffffffffffp1023, -0.0, 1.0 / 3.0};
    const float q[4] = {0.1f, -1e-40f, 3.0f, 65504.0f};
    const uint16_t k[3] = {0x3F80, 0x7F80, 0x8001}; /* 1.0, +inf, a negative subnormal */
    const int64_t cu[3] = {0, 3, INT64_MAX};
    const float scalar = 7.0f;
    const int64_t o_shape[2] = {2, 3}, q_shape[2] = {2, 2}, k_shape[1] = {3}, cu_shape[1] = {3}, empty_shape[2] = {0, 4};
    const lacs_tensor tensors[] = {
        {"q", LACS_F32, 2, q_shape, (void *)q},
        {"k", LACS_BF16, 1, k_shape, (void *)k},
        {"expected.o", LACS_F64, 2, o_shape, (void *)o},
        {"scalar", LACS_F32, 0, NULL, (void *)&scalar},
        {"empty", LACS_F64, 2, empty_shape, NULL},
        {"cu_seqlens", LACS_I64, 1, cu_shape, (void *)cu},
    };
    const char *metadata = "{\"format\": \"lacs-vector/1\", \"reason\": \"quotes \\\" and \\u00e9 \xC3\xA9\"}\n\t";
    const char *path = in_test_dir("case.safetensors");
    cr_assert_eq(lacs_safetensors_write(path, tensors, 6, "lacs", metadata, 0), LACS_OK, "%s", lacs_last_error());
    cr_expect(!file_exists(in_test_dir("case.safetensors.tmp")), "the temporary file is left behind");

    lacs_safetensors_file f;
    cr_assert_eq(lacs_safetensors_read(path, &f), LACS_OK, "%s", lacs_last_error());
    cr_expect_str_eq(f.path, path);
    const uint64_t n = header_length_of(f.buffer);
    cr_expect_eq((8 + n) % 8, 0, "8 + N = %llu", (unsigned long long)(8 + n));
    cr_expect_eq(f.buffer[8], '{');
    const uint8_t *data = f.buffer + 8 + n;
    /* SPEC.md 10.1's order: 8-byte types (I64 and F64 together, by name), F32, BF16 */
    const char *const order[] = {"cu_seqlens", "empty", "expected.o", "q", "scalar", "k"};
    const int64_t begins[] = {0, 24, 24, 72, 88, 92};
    cr_assert_eq(f.n_tensors, 6);
    for (int i = 0; i < 6; i++) {
        const lacs_safetensors_tensor *t = &f.tensors[i];
        cr_expect_str_eq(t->name, order[i], "position %d", i);
        cr_expect_eq(t->data - data, begins[i], "%s at %td", t->name, t->data - data);
        cr_expect_eq((t->data - data) % (ptrdiff_t)lacs_dtype_size(t->dtype), 0, "%s is not aligned", t->name);
        cr_expect_eq((uintptr_t)(t->data - f.buffer) % lacs_dtype_size(t->dtype), 0,
                     "%s is not aligned in the file", t->name);
    }
    cr_expect_eq(f.size, 8 + n + 98, "the buffer holds exactly the tensors' bytes");
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++) {
        const lacs_tensor *want = &tensors[i];
        const lacs_safetensors_tensor *got = lacs_safetensors_find(&f, want->name);
        cr_assert_not_null(got, "%s is missing", want->name);
        cr_expect_eq(got->dtype, want->dtype, "%s", want->name);
        cr_expect_eq(got->ndim, want->ndim, "%s", want->name);
        int64_t count = 1;
        for (int d = 0; d < want->ndim; d++) {
            cr_expect_eq(got->shape[d], want->shape[d], "%s dim %d", want->name, d);
            count *= want->shape[d];
        }
        cr_expect_eq(got->count, count, "%s", want->name);
        cr_expect_eq(got->nbytes, (size_t)count * lacs_dtype_size(want->dtype), "%s", want->name);
        if (got->nbytes > 0)
            cr_expect(memcmp(got->data, want->data, got->nbytes) == 0, "%s: bytes differ", want->name);
    }
    double values[6];
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "expected.o"), values);
    cr_expect(memcmp(values, o, sizeof o) == 0, "F64 values differ");
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "q"), values);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(values[i], (double)q[i]);
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "k"), values);
    cr_expect_eq(values[0], 1.0);
    cr_expect_eq(values[1], (double)INFINITY);
    cr_expect_eq(values[2], -0x1p-133);
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "cu_seqlens"), values);
    cr_expect_eq(values[1], 3.0);
    cr_expect_eq(values[2], 0x1p63); /* INT64_MAX, rounded as a C cast rounds it */
    cr_assert_eq(f.n_metadata, 1);
    cr_expect_str_eq(f.metadata_keys[0], "lacs");
    cr_expect_str_eq(lacs_safetensors_metadata(&f, "lacs"), metadata);
    lacs_safetensors_free(&f);
}

Test(st_write, exact_bytes, .init = make_test_dir, .fini = remove_test_dir)
{
    const float x[1] = {1.0f};
    const uint16_t b[1] = {0x4000};
    const int64_t one = 1;
    const lacs_tensor tensors[] = {{"x", LACS_F32, 1, &one, (void *)x}, {"b", LACS_BF16, 0, NULL, (void *)b}};
    const char *path = in_test_dir("exact.safetensors");
    cr_assert_eq(lacs_safetensors_write(path, tensors, 2, "k", "v", 0), LACS_OK, "%s", lacs_last_error());
    size_t size;
    uint8_t *bytes = slurp(path, &size);
    const char *json = "{\"__metadata__\":{\"k\":\"v\"},\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"BF16\",\"shape\":[],\"data_offsets\":[4,6]}}";
    const size_t json_length = strlen(json), padded = (json_length + 7) / 8 * 8;
    cr_assert_eq(header_length_of(bytes), padded);
    cr_assert_eq(size, 8 + padded + 6);
    cr_expect(memcmp(bytes + 8, json, json_length) == 0, "header: %.*s", (int)padded, (const char *)bytes + 8);
    for (size_t i = json_length; i < padded; i++)
        cr_expect_eq(bytes[8 + i], ' ', "padding byte %zu", i);
    cr_expect(memcmp(bytes + 8 + padded, x, 4) == 0 && memcmp(bytes + 8 + padded + 4, b, 2) == 0);
    free(bytes);

    /* no tensors, no metadata: "{}" and six spaces */
    path = in_test_dir("empty.safetensors");
    cr_assert_eq(lacs_safetensors_write(path, NULL, 0, NULL, NULL, 0), LACS_OK, "%s", lacs_last_error());
    bytes = slurp(path, &size);
    cr_expect_eq(size, 16);
    cr_expect(memcmp(bytes, "\x08\0\0\0\0\0\0\0{}      ", 16) == 0);
    free(bytes);
}

Test(st_write, names_that_need_escaping, .init = make_test_dir, .fini = remove_test_dir)
{
    const char *const names[] = {"a b", "quote\"d", "back\\slash", "new\nline", "tab\t", "\x01\x1f\x7f",
                                 "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", "/", "__metadata", "{\"json\":1}"};
    enum { N = sizeof names / sizeof names[0] };
    const float value = 2.0f;
    lacs_tensor tensors[N];
    for (int i = 0; i < N; i++)
        tensors[i] = (lacs_tensor){names[i], LACS_F32, 0, NULL, (void *)&value};
    const char *path = in_test_dir("names.safetensors");
    cr_assert_eq(lacs_safetensors_write(path, tensors, N, "key \"\\\n", "value\x01\xC3\xA9", 0), LACS_OK, "%s",
                 lacs_last_error());
    lacs_safetensors_file f;
    cr_assert_eq(lacs_safetensors_read(path, &f), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(f.n_tensors, N);
    for (int i = 0; i < N; i++)
        cr_expect_not_null(lacs_safetensors_find(&f, names[i]), "'%s' did not survive", names[i]);
    for (int i = 1; i < N; i++) /* all F32: in name order */
        cr_expect(strcmp(f.tensors[i - 1].name, f.tensors[i].name) < 0);
    cr_expect_str_eq(lacs_safetensors_metadata(&f, "key \"\\\n"), "value\x01\xC3\xA9");
    lacs_safetensors_free(&f);
}

Test(st_write, refuses_to_overwrite, .init = make_test_dir, .fini = remove_test_dir)
{
    const float one = 1.0f, two = 2.0f;
    const lacs_tensor first = {"x", LACS_F32, 0, NULL, (void *)&one}, second = {"x", LACS_F32, 0, NULL, (void *)&two};
    const char *path = in_test_dir("v.safetensors");
    cr_assert_eq(lacs_safetensors_write(path, &first, 1, NULL, NULL, 0), LACS_OK, "%s", lacs_last_error());
    const int rc = lacs_safetensors_write(path, &second, 1, NULL, NULL, 0);
    cr_expect_eq(rc, LACS_ERR_IO, "rc %d: %s", rc, lacs_last_error());
    cr_expect(strstr(lacs_last_error(), path) != NULL && strstr(lacs_last_error(), "overwrite") != NULL,
              "the message should name the file and say to pass overwrite: %s", lacs_last_error());
    cr_expect(!file_exists(in_test_dir("v.safetensors.tmp")));
    double value;
    lacs_safetensors_file f;
    cr_assert_eq(lacs_safetensors_read(path, &f), LACS_OK, "%s", lacs_last_error());
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "x"), &value);
    cr_expect_eq(value, 1.0, "the refused write changed the file");
    lacs_safetensors_free(&f);

    cr_assert_eq(lacs_safetensors_write(path, &second, 1, NULL, NULL, 1), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(lacs_safetensors_read(path, &f), LACS_OK, "%s", lacs_last_error());
    lacs_safetensors_to_double(lacs_safetensors_find(&f, "x"), &value);
    cr_expect_eq(value, 2.0, "overwrite = 1 did not replace the file");
    lacs_safetensors_free(&f);
    cr_expect(!file_exists(in_test_dir("v.safetensors.tmp")));
}

Test(st_write, io_failures_leave_nothing, .init = make_test_dir, .fini = remove_test_dir)
{
    const float one = 1.0f;
    const lacs_tensor t = {"x", LACS_F32, 0, NULL, (void *)&one};
    int rc = lacs_safetensors_write(in_test_dir("no/such/dir.safetensors"), &t, 1, NULL, NULL, 1);
    cr_expect_eq(rc, LACS_ERR_IO, "rc %d: %s", rc, lacs_last_error());
    /* a directory in the way: the rename fails, the temporary file goes */
    const char *dir = in_test_dir("d");
    cr_assert_eq(mkdir(dir, 0700), 0);
    rc = lacs_safetensors_write(dir, &t, 1, NULL, NULL, 1);
    cr_expect_eq(rc, LACS_ERR_IO, "rc %d: %s", rc, lacs_last_error());
    cr_expect(!file_exists(in_test_dir("d.tmp")), "the temporary file is left behind");
}

Test(st_write, rejects_bad_tensors, .init = make_test_dir, .fini = remove_test_dir)
{
    static const float data[4] = {0};
    const int64_t two[1] = {2}, negative[2] = {2, -1}, huge[2] = {INT64_C(1) << 53, 1}, big[2] = {INT64_C(1) << 26, INT64_C(1) << 26};
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    const lacs_tensor good = {"good", LACS_F32, 1, two, (void *)data};
    const struct {
        lacs_tensor bad;
        const char *needle;
    } cases[] = {
        {{NULL, LACS_F32, 1, two, (void *)data}, "no name"},
        {{"", LACS_F32, 1, two, (void *)data}, "no name"},
        {{"__metadata__", LACS_F32, 1, two, (void *)data}, "__metadata__"},
        {{"good", LACS_F32, 1, two, (void *)data}, "'good' is given twice"},
        {{"good", LACS_F64, 1, two, (void *)data}, "'good' is given twice"},
        {{"bad\xFF", LACS_F32, 1, two, (void *)data}, "UTF-8"},
        {{"bad", (lacs_dtype)7, 1, two, (void *)data}, "'bad': unknown dtype"},
        {{"bad", LACS_F32, -1, two, (void *)data}, "'bad': ndim -1"},
        {{"bad", LACS_F32, 9, nine, (void *)data}, "'bad': ndim 9"},
        {{"bad", LACS_F32, 1, NULL, (void *)data}, "'bad': shape is NULL"},
        {{"bad", LACS_F32, 2, negative, (void *)data}, "'bad': dimension 1 is -1"},
        {{"bad", LACS_F32, 2, huge, (void *)data}, "'bad': dimension 0"},
        {{"bad", LACS_F64, 2, big, (void *)data}, "'bad' holds 2^53 bytes"},
        {{"bad", LACS_F32, 1, two, NULL}, "'bad': data is NULL"},
    };
    const char *path = in_test_dir("bad.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const lacs_tensor pair[2] = {good, cases[i].bad};
        const int rc = lacs_safetensors_write(path, pair, 2, NULL, NULL, 1);
        cr_expect_eq(rc, LACS_ERR_FORMAT, "case %zu: rc %d (%s)", i, rc, lacs_last_error());
        cr_expect(strstr(lacs_last_error(), cases[i].needle) != NULL, "case %zu: \"%s\" does not mention \"%s\"", i,
                  lacs_last_error(), cases[i].needle);
        cr_expect(!file_exists(path) && !file_exists(in_test_dir("bad.safetensors.tmp")), "case %zu wrote a file", i);
    }
    int rc = lacs_safetensors_write(path, &good, 1, "key", NULL, 1);
    cr_expect_eq(rc, LACS_ERR_FORMAT, "metadata key without a value: rc %d", rc);
    rc = lacs_safetensors_write(path, &good, 1, "key", "\xC0\x80", 1);
    cr_expect_eq(rc, LACS_ERR_FORMAT, "metadata value not UTF-8: rc %d", rc);
    rc = lacs_safetensors_write(path, &good, -1, NULL, NULL, 1);
    cr_expect_eq(rc, LACS_ERR_FORMAT, "negative tensor count: rc %d", rc);
    cr_expect(!file_exists(path));
    /* zero-size tensors may have NULL data */
    const int64_t zero[1] = {0};
    const lacs_tensor empty = {"e", LACS_BF16, 1, zero, NULL};
    cr_expect_eq(lacs_safetensors_write(path, &empty, 1, NULL, NULL, 1), LACS_OK, "%s", lacs_last_error());
}

Test(st_read, io_errors, .init = make_test_dir, .fini = remove_test_dir)
{
    lacs_safetensors_file f;
    const char *missing = in_test_dir("missing.safetensors");
    cr_expect_eq(lacs_safetensors_read(missing, &f), LACS_ERR_IO);
    cr_expect(strncmp(lacs_last_error(), missing, strlen(missing)) == 0, "%s", lacs_last_error());
    cr_expect_eq(lacs_safetensors_read(test_dir, &f), LACS_ERR_IO, "a directory: %s", lacs_last_error());
    cr_expect(strstr(lacs_last_error(), "directory") != NULL, "%s", lacs_last_error());
    cr_expect(f.buffer == NULL && f.n_tensors == 0);
    lacs_safetensors_free(&f);
    /* a malformed file on disk: the path leads the message */
    const char *short_file = in_test_dir("short.safetensors");
    FILE *file = fopen(short_file, "wb");
    cr_assert_not_null(file);
    fputs("abc", file);
    fclose(file);
    cr_expect_eq(lacs_safetensors_read(short_file, &f), LACS_ERR_FORMAT);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s: truncated: ", short_file);
    cr_expect(strncmp(lacs_last_error(), prefix, strlen(prefix)) == 0, "%s", lacs_last_error());
}

/* ---- the shared corpus (tests/data) ---- */

/* Calls check(path, file name) for every *.safetensors file of dir; the count. */
static int for_each_corpus_file(const char *dir_path, void (*check)(const char *path, const char *name))
{
    DIR *dir = opendir(dir_path);
    cr_assert_not_null(dir, "%s is missing: run the tests from the repository root, with the corpus in place",
                       dir_path);
    int count = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        const size_t n = strlen(e->d_name);
        const char *suffix = ".safetensors";
        if (n <= strlen(suffix) || strcmp(e->d_name + n - strlen(suffix), suffix) != 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        check(path, e->d_name);
        count++;
    }
    closedir(dir);
    return count;
}

static int kinds_seen[KIND_COUNT];

static void check_malformed(const char *path, const char *name)
{
    const char *dot = strchr(name, '.');
    const size_t kind_length = (size_t)(dot - name);
    int kind = -1;
    for (int i = 0; i < KIND_COUNT; i++)
        if (strlen(spec_kinds[i]) == kind_length && strncmp(name, spec_kinds[i], kind_length) == 0)
            kind = i;
    cr_expect(kind >= 0, "%s: the name does not start with a kind of SPEC.md 10.2", name);
    if (kind < 0)
        return;
    kinds_seen[kind]++;
    lacs_safetensors_file f;
    const int rc = lacs_safetensors_read(path, &f);
    char prefix[1200];
    snprintf(prefix, sizeof prefix, "%s: %s: ", path, spec_kinds[kind]);
    cr_expect_eq(rc, LACS_ERR_FORMAT, "%s: rc %d (%s)", name, rc, lacs_last_error());
    cr_expect(strncmp(lacs_last_error(), prefix, strlen(prefix)) == 0, "%s: expected kind %s, got \"%s\"", name,
              spec_kinds[kind], lacs_last_error());
    lacs_safetensors_free(&f);
}

Test(st_corpus, malformed_files_get_their_kind)
{
    const int count = for_each_corpus_file("tests/data/malformed", check_malformed);
    cr_expect_gt(count, 0, "tests/data/malformed holds no .safetensors file");
    for (int i = 0; i < KIND_COUNT; i++)
        cr_expect_gt(kinds_seen[i], 0, "tests/data/malformed has no file of kind %s", spec_kinds[i]);
}

static void check_valid(const char *path, const char *name)
{
    lacs_safetensors_file f;
    const int rc = lacs_safetensors_read(path, &f);
    cr_expect_eq(rc, LACS_OK, "%s: %s", name, lacs_last_error());
    for (int i = 0; rc == LACS_OK && i < f.n_tensors; i++) {
        const lacs_safetensors_tensor *t = &f.tensors[i];
        cr_expect_eq(lacs_safetensors_find(&f, t->name), t, "%s: find('%s')", name, t->name);
        cr_expect_eq(t->nbytes, (size_t)t->count * lacs_dtype_size(t->dtype), "%s: '%s'", name, t->name);
        if (i > 0)
            cr_expect(f.tensors[i - 1].data <= t->data, "%s: tensors not in data-offset order", name);
    }
    lacs_safetensors_free(&f);
}

Test(st_corpus, valid_files_read)
{
    const int count = for_each_corpus_file("tests/data/valid", check_valid);
    cr_expect_gt(count, 0, "tests/data/valid holds no .safetensors file");
}
