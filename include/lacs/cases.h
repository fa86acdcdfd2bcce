/* lacs: the cases of a vectors directory, verified against its manifest
 * (SPEC.md 10.1, 11.5).
 *
 * A vectors directory DIR holds one folder per op, DIR/<op>/<id>.safetensors,
 * and is covered by a manifest in the format of vectors/MANIFEST.json:
 * DIR/MANIFEST.json (entries' paths relative to DIR: "<op>/<id>.safetensors"),
 * else DIR/../MANIFEST.json (paths relative to DIR/..: "<basename of
 * DIR>/<op>/<id>.safetensors", the committed layout of vectors/core). Every
 * file is checked against the manifest's SHA-256 when it is loaded; a case the
 * manifest lists but the directory lacks is a case that fails ("missing"), and
 * a file it does not list fails too ("not listed"): a set of vectors is
 * checked whole or the run says why not. Without verification (--no-verify),
 * no manifest is read and the files are taken as they are.
 *
 * The CLI and the Python harness (through ctypes) both list cases here.
 */
#ifndef LACS_CASES_H
#define LACS_CASES_H

#include <stddef.h>

#include "lacs/check.h"
#include "lacs/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LACS_CASE_OK = 0,       /* the file loads (and matches its manifest hash when verified) */
    LACS_CASE_INVALID = 1,  /* the file does not load: `reason` is the loader's message (<path>: <kind>: ...) */
    LACS_CASE_MISSING = 2,  /* listed in the manifest, absent from the directory */
    LACS_CASE_UNLISTED = 3  /* in the directory, not listed in the manifest */
} lacs_case_state;

typedef struct {
    char *path;       /* DIR/<op>/<id>.safetensors (the manifest's path for a missing case) */
    char *id;         /* the file name without .safetensors (the manifest's id for a missing case) */
    char op[48], tier[8];
    char *flags;      /* space-separated, from the metadata ("" when it does not load) */
    char *reason;     /* the metadata's reason, or why the case is not OK */
    char sha256[65];  /* the manifest's hash of the file ("" unverified) */
    int strict;       /* lacs_vector_is_strict of the file (SPEC.md 11.7); 0 when it does not load */
    int state;        /* lacs_case_state */
} lacs_case_entry;

typedef struct {
    char *dir;
    char *manifest;   /* the manifest read, or NULL (not verified) */
    lacs_case_entry *cases; /* sorted by id (bytewise) */
    int n;
} lacs_case_list;

/* How lacs_cases_find works: */
#define LACS_CASES_VERIFY 1u /* a manifest must cover dir; listed cases take their id, op, tier, flags and hash
                                from it, the others are missing or unlisted cases */
#define LACS_CASES_READ 2u   /* load every file (lacs_case_entry_load: verified) to read its op, tier, flags, reason
                                and level, and mark the ones that do not load (`lacs list`); implied without
                                LACS_CASES_VERIFY. Without it a verified file is loaded only when its case runs */

/* The cases under `dir` whose op is one of ops[0..n_ops-1] (every op of the op
 * table when n_ops is 0) and whose tier is `tier` (NULL: both). LACS_OK, or
 * LACS_ERR_IO / LACS_ERR_FORMAT with lacs_last_error() naming the directory or
 * the manifest and the problem (no manifest, a malformed one). */
int lacs_cases_find(const char *dir, const char *const *ops, int n_ops, const char *tier, unsigned mode,
                    lacs_case_list *list);
void lacs_cases_free(lacs_case_list *list);

/* Loads a case's file (lacs_vector_load_verified, with its manifest hash when
 * verified) and checks that it is the case listed: its id (the manifest's,
 * else the file name's), and when verified its op and tier (LACS_ERR_FORMAT,
 * kind `metadata`, else). What runs a case loads it this way. */
int lacs_case_entry_load(const lacs_case_entry *c, lacs_vector *v);
lacs_vector *lacs_case_entry_open(const lacs_case_entry *c); /* the same on the heap (ctypes); NULL on error */

/* The same for ctypes, on the heap: `ops` comma-separated (NULL or "": every op). */
lacs_case_list *lacs_cases_open(const char *dir, const char *ops, const char *tier, unsigned mode);
void lacs_cases_close(lacs_case_list *list);
int lacs_cases_count(const lacs_case_list *list);
const lacs_case_entry *lacs_cases_get(const lacs_case_list *list, int i);
const char *lacs_cases_manifest(const lacs_case_list *list); /* NULL when not verified */

/* The manifest hash of one vector file FILE = DIR/<op>/<id>.safetensors
 * (lacs compare, lacs explain): the manifest that covers DIR must list it.
 * LACS_OK with sha256 and manifest (its path) filled, else LACS_ERR_IO or
 * LACS_ERR_FORMAT with the reason. */
int lacs_cases_manifest_hash(const char *file, char sha256[65], char *manifest, size_t manifest_size);

#ifdef __cplusplus
}
#endif

#endif
