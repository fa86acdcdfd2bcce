/* The verdict of a run per (op, tier) (lacs/verdict.h, SPEC.md 11.7). */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lacs/ops.h"
#include "lacs/types.h"
#include "lacs/verdict.h"

/* A list of words (flags, ids), kept sorted and unique for flags, in order for ids. */
typedef struct {
    char **items;
    int n, capacity;
} word_list;

static int words_add(word_list *w, const char *word, int sorted_unique)
{
    if (sorted_unique)
        for (int i = 0; i < w->n; i++)
            if (strcmp(w->items[i], word) == 0)
                return 0;
    if (w->n == w->capacity) {
        const int grown = w->capacity ? 2 * w->capacity : 8;
        char **bigger = realloc(w->items, (size_t)grown * sizeof *bigger);
        if (!bigger)
            return -1;
        w->items = bigger;
        w->capacity = grown;
    }
    char *copy = strdup(word);
    if (!copy)
        return -1;
    int at = w->n;
    if (sorted_unique)
        while (at > 0 && strcmp(w->items[at - 1], word) > 0) {
            w->items[at] = w->items[at - 1];
            at--;
        }
    w->items[at] = copy;
    w->n++;
    return 0;
}

static int words_has(const word_list *w, const char *word)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->items[i], word) == 0)
            return 1;
    return 0;
}

static void words_free(word_list *w)
{
    for (int i = 0; i < w->n; i++)
        free(w->items[i]);
    free(w->items);
    memset(w, 0, sizeof *w);
}

/* Adds every word of `list` (separated by spaces or commas). */
static int words_add_all(word_list *w, const char *list)
{
    const char *p = list ? list : "";
    while (*p) {
        const size_t skip = strspn(p, " ,\t");
        p += skip;
        const size_t length = strcspn(p, " ,\t");
        if (length == 0)
            break;
        char word[128];
        snprintf(word, sizeof word, "%.*s", (int)(length < sizeof word ? length : sizeof word - 1), p);
        if (words_add(w, word, 1) != 0)
            return -1;
        p += length;
    }
    return 0;
}

typedef struct {
    char op[48], tier[8];
    int passed, failed, skipped, excluded, invalid;
    word_list passed_flags, skipped_flags, declared_flags, failed_cases, skipped_cases, strict_failed;
} group;

struct lacs_verdict {
    int strict_level;
    int declared;               /* a declaration was given */
    char *name;
    word_list ops, tiers, unsupported;
    char scope[128];
    group *groups;
    int n_groups, capacity;
};

lacs_verdict *lacs_verdict_new(int strict_level)
{
    lacs_verdict *v = calloc(1, sizeof *v);
    if (v)
        v->strict_level = strict_level;
    return v;
}

void lacs_verdict_free(lacs_verdict *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->n_groups; i++) {
        group *g = &v->groups[i];
        words_free(&g->passed_flags);
        words_free(&g->skipped_flags);
        words_free(&g->declared_flags);
        words_free(&g->failed_cases);
        words_free(&g->skipped_cases);
        words_free(&g->strict_failed);
    }
    free(v->groups);
    words_free(&v->ops);
    words_free(&v->tiers);
    words_free(&v->unsupported);
    free(v->name);
    free(v);
}

void lacs_verdict_free_text(char *text) { free(text); }

int lacs_verdict_declare(lacs_verdict *v, const char *name, const char *ops, const char *tiers,
                         const char *unsupported)
{
    v->declared = 1;
    free(v->name);
    v->name = name ? strdup(name) : NULL;
    if (words_add_all(&v->ops, ops) != 0 || words_add_all(&v->tiers, tiers) != 0 ||
        words_add_all(&v->unsupported, unsupported) != 0)
        return -1;
    return 0;
}

static void joined(const word_list *w, char *buf, size_t size)
{
    buf[0] = '\0';
    for (int i = 0; i < w->n; i++) {
        const size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", i ? ", " : "", w->items[i]);
    }
}

int lacs_verdict_excludes(const lacs_verdict *v, const char *op, const char *tier, const char *flags, char *why,
                          size_t size)
{
    char list[512];
    if (v->ops.n > 0 && !words_has(&v->ops, op)) {
        joined(&v->ops, list, sizeof list);
        snprintf(why, size, "not claimed: the implementation declares the ops %s", list);
        return 1;
    }
    if (v->tiers.n > 0 && !words_has(&v->tiers, tier)) {
        joined(&v->tiers, list, sizeof list);
        snprintf(why, size, "not claimed: the implementation declares the tiers %s", list);
        return 1;
    }
    word_list case_flags = {0}, hit = {0};
    words_add_all(&case_flags, flags);
    for (int i = 0; i < case_flags.n; i++)
        if (words_has(&v->unsupported, case_flags.items[i]))
            words_add(&hit, case_flags.items[i], 1);
    const int excluded = hit.n > 0;
    if (excluded) {
        joined(&hit, list, sizeof list);
        snprintf(why, size, "declared unsupported by the implementation: %s", list);
    }
    words_free(&case_flags);
    words_free(&hit);
    return excluded;
}

/* The position of an op in the op table (unknown ops last), for the order of the groups. */
static int op_rank(const char *op)
{
    int count;
    const lacs_op_info *ops = lacs_ops(&count);
    for (int i = 0; i < count; i++)
        if (strcmp(ops[i].name, op) == 0)
            return i;
    return count;
}

static group *group_of(lacs_verdict *v, const char *op, const char *tier)
{
    for (int i = 0; i < v->n_groups; i++)
        if (strcmp(v->groups[i].op, op) == 0 && strcmp(v->groups[i].tier, tier) == 0)
            return &v->groups[i];
    if (v->n_groups == v->capacity) {
        const int grown = v->capacity ? 2 * v->capacity : 16;
        group *bigger = realloc(v->groups, (size_t)grown * sizeof *bigger);
        if (!bigger)
            return NULL;
        v->groups = bigger;
        v->capacity = grown;
    }
    /* in op-table order, fp32 before bf16 */
    const int rank = op_rank(op), tier_rank = strcmp(tier, "fp32") == 0 ? 0 : strcmp(tier, "bf16") == 0 ? 1 : 2;
    int at = v->n_groups;
    while (at > 0) {
        const group *before = &v->groups[at - 1];
        const int before_rank = op_rank(before->op);
        const int before_tier = strcmp(before->tier, "fp32") == 0 ? 0 : strcmp(before->tier, "bf16") == 0 ? 1 : 2;
        if (before_rank < rank || (before_rank == rank && before_tier <= tier_rank))
            break;
        at--;
    }
    memmove(&v->groups[at + 1], &v->groups[at], (size_t)(v->n_groups - at) * sizeof *v->groups);
    group *g = &v->groups[at];
    memset(g, 0, sizeof *g);
    snprintf(g->op, sizeof g->op, "%s", op);
    snprintf(g->tier, sizeof g->tier, "%s", tier);
    v->n_groups++;
    return g;
}

int lacs_verdict_add(lacs_verdict *v, const char *op, const char *tier, const char *id, const char *flags,
                     int strict, int outcome)
{
    group *g = group_of(v, op ? op : "?", tier ? tier : "?");
    if (!g)
        return -1;
    if (strict && !v->strict_level && outcome != LACS_OUTCOME_INVALID) {
        /* beside the verdict, not in it */
        return outcome == LACS_OUTCOME_FAIL ? words_add(&g->strict_failed, id, 0) : 0;
    }
    switch (outcome) {
    case LACS_OUTCOME_PASS:
        g->passed++;
        return words_add_all(&g->passed_flags, flags);
    case LACS_OUTCOME_FAIL:
        g->failed++;
        return words_add(&g->failed_cases, id, 0);
    case LACS_OUTCOME_SKIP:
        g->skipped++;
        return words_add_all(&g->skipped_flags, flags) || words_add(&g->skipped_cases, id, 0) ? -1 : 0;
    case LACS_OUTCOME_EXCLUDED: {
        g->excluded++;
        word_list case_flags = {0};
        words_add_all(&case_flags, flags);
        int rc = 0;
        for (int i = 0; i < case_flags.n && rc == 0; i++)
            if (words_has(&v->unsupported, case_flags.items[i]))
                rc = words_add(&g->declared_flags, case_flags.items[i], 1);
        words_free(&case_flags);
        return rc;
    }
    default:
        g->invalid++;
        return 0;
    }
}

int lacs_verdict_scope(lacs_verdict *v, const char *scope)
{
    snprintf(v->scope, sizeof v->scope, "%s", scope ? scope : "");
    return 0;
}

/* ---- reading the groups ---- */

typedef enum { CONFORMS, PARTIAL_DECLARED, PARTIAL, FAILS, NOT_CLAIMED, NO_VERDICT, NOTHING_REQUIRED } verdict_kind;

static verdict_kind kind_of(const group *g)
{
    if (g->failed > 0)
        return FAILS;
    if (g->invalid > 0)
        return NO_VERDICT;
    if (g->passed + g->skipped + g->excluded == 0)
        return NOTHING_REQUIRED;
    if (g->passed == 0)
        return NOT_CLAIMED;
    if (g->skipped > 0)
        return PARTIAL;
    if (g->excluded > 0)
        return PARTIAL_DECLARED;
    return CONFORMS;
}

static const char *kind_word(verdict_kind k)
{
    switch (k) {
    case CONFORMS: return "conforms";
    case PARTIAL_DECLARED: return "partial (declared)";
    case PARTIAL: return "partial";
    case FAILS: return "fails";
    case NOT_CLAIMED: return "not claimed";
    case NO_VERDICT: return "no verdict";
    default: return "nothing required";
    }
}

static const char *json_word(verdict_kind k)
{
    switch (k) {
    case CONFORMS: return "conforms";
    case PARTIAL_DECLARED:
    case PARTIAL: return "partial";
    case FAILS: return "fails";
    case NOT_CLAIMED: return "not claimed";
    case NO_VERDICT: return "no verdict";
    default: return "nothing required";
    }
}

/* The flags that tell the skipped cases apart: those of the skipped cases no
 * passed case has (all of theirs if every one is shared). */
static void distinguishing_flags(const group *g, word_list *out)
{
    for (int i = 0; i < g->skipped_flags.n; i++)
        if (!words_has(&g->passed_flags, g->skipped_flags.items[i]))
            words_add(out, g->skipped_flags.items[i], 1);
    if (out->n == 0)
        for (int i = 0; i < g->skipped_flags.n; i++)
            words_add(out, g->skipped_flags.items[i], 1);
}

int lacs_verdict_exit_status(const lacs_verdict *v)
{
    int any_invalid = 0, any_bad = 0, any_good = 0;
    for (int i = 0; i < v->n_groups; i++) {
        const verdict_kind k = kind_of(&v->groups[i]);
        any_invalid |= v->groups[i].invalid > 0;
        any_bad |= k == FAILS || k == PARTIAL;
        any_good |= k == CONFORMS || k == PARTIAL_DECLARED;
    }
    if (any_invalid)
        return 2;
    return any_bad || !any_good ? 1 : 0;
}

/* A growing string. */
typedef struct {
    char *text;
    size_t length, capacity;
    int failed;
} text_buffer;

__attribute__((format(printf, 2, 3))) static void put(text_buffer *b, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    const int n = vsnprintf(NULL, 0, fmt, args);
    va_end(args);
    if (n < 0 || b->failed)
        return;
    if (b->length + (size_t)n + 1 > b->capacity) {
        size_t grown = b->capacity ? 2 * b->capacity : 256;
        while (grown < b->length + (size_t)n + 1)
            grown *= 2;
        char *bigger = realloc(b->text, grown);
        if (!bigger) {
            b->failed = 1;
            return;
        }
        b->text = bigger;
        b->capacity = grown;
    }
    va_start(args, fmt);
    vsnprintf(b->text + b->length, b->capacity - b->length, fmt, args);
    va_end(args);
    b->length += (size_t)n;
}

static char *finished(text_buffer *b)
{
    if (b->failed) {
        free(b->text);
        return NULL;
    }
    if (!b->text)
        return strdup("");
    return b->text;
}

char *lacs_verdict_table(const lacs_verdict *v)
{
    text_buffer b = {0};
    int op_width = 2;
    for (int i = 0; i < v->n_groups; i++)
        op_width = (int)strlen(v->groups[i].op) > op_width ? (int)strlen(v->groups[i].op) : op_width;
    put(&b, "verdict by op and tier (%s):\n",
        v->strict_level ? "strict level: every case counts"
                        : "required level; strict cases are listed apart, --strict counts them");
    word_list strict_failed = {0};
    for (int i = 0; i < v->n_groups; i++) {
        const group *g = &v->groups[i];
        const verdict_kind k = kind_of(g);
        char flags[1024];
        put(&b, "  %-*s  %-4s  %-18s  ", op_width, g->op, g->tier, kind_word(k));
        int parts = 0;
        if (g->failed)
            put(&b, "%s%d failed", parts++ ? ", " : "", g->failed);
        if (g->passed)
            put(&b, "%s%d passed", parts++ ? ", " : "", g->passed);
        if (g->skipped) {
            word_list distinct = {0};
            distinguishing_flags(g, &distinct);
            joined(&distinct, flags, sizeof flags);
            put(&b, "%s%d skipped (undeclared%s%s)", parts++ ? ", " : "", g->skipped, flags[0] ? ": " : "", flags);
            words_free(&distinct);
        }
        if (g->excluded) {
            joined(&g->declared_flags, flags, sizeof flags);
            put(&b, "%s%d not run (declared%s%s)", parts++ ? ", " : "", g->excluded, flags[0] ? ": " : "",
                flags[0] ? flags : " out");
        }
        if (g->invalid)
            put(&b, "%s%d vector%s rejected", parts++ ? ", " : "", g->invalid, g->invalid == 1 ? "" : "s");
        if (!parts)
            put(&b, "no case at this level");
        put(&b, "\n");
        for (int j = 0; j < g->strict_failed.n; j++)
            words_add(&strict_failed, g->strict_failed.items[j], 0);
    }
    if (strict_failed.n > 0) {
        char ids[4096];
        joined(&strict_failed, ids, sizeof ids);
        put(&b, "  strict failures (not counted at the required level; --strict counts them): %s\n", ids);
    }
    words_free(&strict_failed);
    return finished(&b);
}

/* "ops A, B in tiers fp32, bf16 and ops C in tiers fp32": the groups of kind
 * good (conforms, partial declared), ops sharing their set of tiers together. */
static void conforming_ops(const lacs_verdict *v, text_buffer *b)
{
    char printed_sets[64][32];
    int n_sets = 0;
    for (int i = 0; i < v->n_groups; i++) {
        /* the tier set of this group's op */
        char tiers[32] = "";
        for (int j = 0; j < v->n_groups; j++) {
            const verdict_kind k = kind_of(&v->groups[j]);
            if (strcmp(v->groups[j].op, v->groups[i].op) == 0 && (k == CONFORMS || k == PARTIAL_DECLARED))
                snprintf(tiers + strlen(tiers), sizeof tiers - strlen(tiers), "%s%s", tiers[0] ? ", " : "",
                         v->groups[j].tier);
        }
        if (!tiers[0])
            continue;
        int seen = 0;
        for (int s = 0; s < n_sets; s++)
            seen |= strcmp(printed_sets[s], tiers) == 0;
        if (seen || n_sets >= 64)
            continue;
        snprintf(printed_sets[n_sets++], sizeof printed_sets[0], "%s", tiers);
        put(b, "%sops ", n_sets > 1 ? " and " : "");
        int ops_in_set = 0;
        for (int j = 0; j < v->n_groups; j++) {
            /* each op once, in order, if its tier set is this one */
            int first = 1;
            for (int k = 0; k < j; k++)
                first &= strcmp(v->groups[k].op, v->groups[j].op) != 0;
            if (!first)
                continue;
            char its[32] = "";
            for (int k = 0; k < v->n_groups; k++) {
                const verdict_kind kk = kind_of(&v->groups[k]);
                if (strcmp(v->groups[k].op, v->groups[j].op) == 0 && (kk == CONFORMS || kk == PARTIAL_DECLARED))
                    snprintf(its + strlen(its), sizeof its - strlen(its), "%s%s", its[0] ? ", " : "",
                             v->groups[k].tier);
            }
            if (strcmp(its, tiers) == 0)
                put(b, "%s%s", ops_in_set++ ? ", " : "", v->groups[j].op);
        }
        put(b, " in tiers %s", tiers);
    }
}

/* The declared flags that left cases out of the conforming groups. */
static void declared_exceptions(const lacs_verdict *v, word_list *out)
{
    for (int i = 0; i < v->n_groups; i++) {
        const verdict_kind k = kind_of(&v->groups[i]);
        if (k == CONFORMS || k == PARTIAL_DECLARED)
            for (int j = 0; j < v->groups[i].declared_flags.n; j++)
                words_add(out, v->groups[i].declared_flags.items[j], 1);
    }
}

/* "delta_rule fails in fp32, bf16" for each op with groups of kind `kind`. */
static void list_kind(const lacs_verdict *v, verdict_kind kind, const char *what, text_buffer *b, int *clauses)
{
    for (int i = 0; i < v->n_groups; i++) {
        if (kind_of(&v->groups[i]) != kind)
            continue;
        int first = 1;
        for (int k = 0; k < i; k++)
            first &= !(strcmp(v->groups[k].op, v->groups[i].op) == 0 && kind_of(&v->groups[k]) == kind);
        if (!first)
            continue;
        put(b, "%s%s %s in ", (*clauses)++ ? "; " : "", v->groups[i].op, what);
        int tiers = 0;
        word_list flags = {0};
        for (int k = i; k < v->n_groups; k++)
            if (strcmp(v->groups[k].op, v->groups[i].op) == 0 && kind_of(&v->groups[k]) == kind) {
                put(b, "%s%s", tiers++ ? ", " : "", v->groups[k].tier);
                if (kind == PARTIAL)
                    distinguishing_flags(&v->groups[k], &flags);
            }
        if (kind == PARTIAL && flags.n > 0) {
            char text[1024];
            joined(&flags, text, sizeof text);
            put(b, " (undeclared skips: %s)", text);
        }
        words_free(&flags);
    }
}

char *lacs_verdict_citation(const lacs_verdict *v)
{
    text_buffer b = {0};
    int any_bad = 0, any_good = 0, any_invalid = 0;
    for (int i = 0; i < v->n_groups; i++) {
        const verdict_kind k = kind_of(&v->groups[i]);
        any_bad |= k == FAILS || k == PARTIAL;
        any_invalid |= k == NO_VERDICT;
        any_good |= k == CONFORMS || k == PARTIAL_DECLARED;
    }
    const char *level = v->strict_level ? " at the strict level" : "";
    if (any_bad || any_invalid) {
        int clauses = 0;
        if (any_bad)
            put(&b, "does not conform to lacs spec %s%s: ", LACS_SPEC_VERSION, level);
        else
            put(&b, "no verdict for lacs spec %s%s: ", LACS_SPEC_VERSION, level);
        list_kind(v, FAILS, "fails", &b, &clauses);
        list_kind(v, PARTIAL, "is partial", &b, &clauses);
        list_kind(v, NO_VERDICT, "has rejected vectors", &b, &clauses);
        if (any_good) {
            put(&b, "; it conforms for ");
            conforming_ops(v, &b);
        }
    } else if (any_good) {
        put(&b, "conforms to lacs spec %s for ", LACS_SPEC_VERSION);
        conforming_ops(v, &b);
        word_list exceptions = {0};
        declared_exceptions(v, &exceptions);
        if (exceptions.n > 0) {
            char text[1024];
            joined(&exceptions, text, sizeof text);
            put(&b, ", except the declared %s", text);
        }
        words_free(&exceptions);
        put(&b, "%s", level);
    } else {
        put(&b, "no verdict for lacs spec %s: no case passed (every one was skipped or not claimed)",
            LACS_SPEC_VERSION);
    }
    if (v->scope[0])
        put(&b, " (%s)", v->scope);
    return finished(&b);
}

static cJSON *words_json(const word_list *w)
{
    cJSON *array = cJSON_CreateArray();
    for (int i = 0; array && i < w->n; i++)
        cJSON_AddItemToArray(array, cJSON_CreateString(w->items[i]));
    return array;
}

char *lacs_verdict_json(const lacs_verdict *v)
{
    cJSON *root = cJSON_CreateObject();
    char *citation = lacs_verdict_citation(v);
    cJSON_AddStringToObject(root, "level", v->strict_level ? "strict" : "required");
    cJSON_AddStringToObject(root, "spec_version", LACS_SPEC_VERSION);
    cJSON_AddStringToObject(root, "citation", citation ? citation : "");
    free(citation);
    cJSON_AddNumberToObject(root, "exit_status", lacs_verdict_exit_status(v));
    if (v->scope[0])
        cJSON_AddStringToObject(root, "scope", v->scope);
    if (v->declared) {
        cJSON *declared = cJSON_AddObjectToObject(root, "declared");
        if (v->name)
            cJSON_AddStringToObject(declared, "name", v->name);
        else
            cJSON_AddNullToObject(declared, "name");
        if (v->ops.n)
            cJSON_AddItemToObject(declared, "ops", words_json(&v->ops));
        else
            cJSON_AddNullToObject(declared, "ops");
        if (v->tiers.n)
            cJSON_AddItemToObject(declared, "tiers", words_json(&v->tiers));
        else
            cJSON_AddNullToObject(declared, "tiers");
        cJSON_AddItemToObject(declared, "unsupported", words_json(&v->unsupported));
    } else {
        cJSON_AddNullToObject(root, "declared");
    }
    cJSON *groups = cJSON_AddArrayToObject(root, "groups");
    cJSON *strict_failed = cJSON_CreateArray();
    for (int i = 0; i < v->n_groups; i++) {
        const group *g = &v->groups[i];
        const verdict_kind k = kind_of(g);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", g->op);
        cJSON_AddStringToObject(o, "tier", g->tier);
        cJSON_AddStringToObject(o, "verdict", json_word(k));
        cJSON_AddBoolToObject(o, "declared", k == PARTIAL_DECLARED || (k == NOT_CLAIMED && g->skipped == 0));
        cJSON_AddNumberToObject(o, "passed", g->passed);
        cJSON_AddNumberToObject(o, "failed", g->failed);
        cJSON_AddNumberToObject(o, "skipped", g->skipped);
        cJSON_AddNumberToObject(o, "excluded", g->excluded);
        cJSON_AddNumberToObject(o, "invalid", g->invalid);
        word_list distinct = {0};
        distinguishing_flags(g, &distinct);
        cJSON_AddItemToObject(o, "skipped_flags", words_json(&distinct));
        words_free(&distinct);
        cJSON_AddItemToObject(o, "declared_flags", words_json(&g->declared_flags));
        cJSON_AddItemToObject(o, "failed_cases", words_json(&g->failed_cases));
        cJSON_AddItemToObject(o, "skipped_cases", words_json(&g->skipped_cases));
        cJSON_AddItemToObject(o, "strict_failed", words_json(&g->strict_failed));
        for (int j = 0; j < g->strict_failed.n; j++)
            cJSON_AddItemToArray(strict_failed, cJSON_CreateString(g->strict_failed.items[j]));
        cJSON_AddItemToArray(groups, o);
    }
    cJSON_AddItemToObject(root, "strict_failed", strict_failed);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}
