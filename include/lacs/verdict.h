/* lacs: the verdict of a run, per (op, tier), at the required or the strict
 * level (SPEC.md 11.7). The one implementation: `lacs check` and the Python
 * harness (through ctypes) both add their cases here and print what it says.
 *
 *   conforms     every case counted passed
 *   partial      some passed, the others were skipped: "declared" when every
 *                skip was declared up front (lacs_plugin_describe, a Python
 *                function's lacs_describe), naming the declared flags; else
 *                undeclared, naming the flags of the skipped cases
 *   fails        a case counted failed
 *   not claimed  no case counted passed: every one was skipped or declared
 *                out (a bf16-only kernel's fp32 tier)
 *   no verdict   vectors were rejected (missing, not listed, altered, invalid)
 *
 * At the required level (the default) a strict case (lacs_vector_is_strict)
 * does not count; its failures are listed beside the verdict. At the strict
 * level (--strict) every case counts. The exit status is 0 only if nothing
 * fails, nothing is partial without being declared, no vector was rejected
 * and something conforms; 2 if a vector was rejected; else 1.
 */
#ifndef LACS_VERDICT_H
#define LACS_VERDICT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LACS_OUTCOME_PASS = 0,
    LACS_OUTCOME_FAIL = 1,
    LACS_OUTCOME_SKIP = 2,     /* the implementation returned LACS_UNSUPPORTED (or raised NotImplementedError) */
    LACS_OUTCOME_EXCLUDED = 3, /* not run: its declaration leaves the case out */
    LACS_OUTCOME_INVALID = 4   /* not run: the vector was rejected (lacs_case_state other than OK) */
} lacs_outcome;

typedef struct lacs_verdict lacs_verdict;

/* strict_level: 1 counts the strict cases (--strict). */
lacs_verdict *lacs_verdict_new(int strict_level);
void lacs_verdict_free(lacs_verdict *v);

/* The implementation's declaration (lacs_plugin_description's fields; NULL:
 * every op, both tiers, no unsupported flag). Call before any
 * lacs_verdict_excludes. Returns 0, or -1 when out of memory. */
int lacs_verdict_declare(lacs_verdict *v, const char *name, const char *ops, const char *tiers,
                         const char *unsupported);
/* Whether the declaration leaves the case out; then why[] says so ("not
 * claimed: its declared ops are ...", "declared unsupported: Varlen"). */
int lacs_verdict_excludes(const lacs_verdict *v, const char *op, const char *tier, const char *flags, char *why,
                          size_t size);
/* One case's outcome; flags space-separated. */
int lacs_verdict_add(lacs_verdict *v, const char *op, const char *tier, const char *id, const char *flags,
                     int strict, int outcome);
/* What the verdict covers, when not the whole verified set, appended to the
 * citation in parentheses: "shard 1/3 only", "on unverified vectors". */
int lacs_verdict_scope(lacs_verdict *v, const char *scope);

/* The table, one line per (op, tier), and the strict failures (malloc'd; each
 * line ends with a newline). */
char *lacs_verdict_table(const lacs_verdict *v);
/* The line a user can cite (malloc'd, no newline): "conforms to lacs spec 1.3
 * for ops A, B in tiers fp32, bf16", or "does not conform to lacs spec 1.3:
 * ...", or "no verdict ...". */
char *lacs_verdict_citation(const lacs_verdict *v);
/* The same as a JSON object (malloc'd text): level, spec_version, citation,
 * exit_status, declared, groups [{op, tier, verdict, declared, passed, failed,
 * skipped, excluded, invalid, skipped_flags, declared_flags, failed_cases,
 * skipped_cases, strict_failed}], strict_failed. */
char *lacs_verdict_json(const lacs_verdict *v);
int lacs_verdict_exit_status(const lacs_verdict *v);
/* For ctypes: frees what the three functions above return. */
void lacs_verdict_free_text(char *text);

#ifdef __cplusplus
}
#endif

#endif
