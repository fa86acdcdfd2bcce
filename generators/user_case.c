/* User-shaped cases (lacs/generate.h; SPEC.md 10.8).
 *
 * A user case is a catalog case (lacs_case) the user describes: it starts
 * from the op's plain recipes in the catalog, or from one catalog case, and
 * takes the user's shape, recipes (SPEC.md 10.3, the catalog's own syntax),
 * gates, parameters, initial state, state carry, flags and reason. It is then
 * built by lacs_golden_build like any case, so a user-shaped vector holds
 * exactly what a catalog vector holds, and one with a catalog case's shape
 * and recipes is that case's vector, byte for byte. Everything here is
 * driven by the op table (lacs_ops: the inputs an op reads) and the catalog
 * (lacs_catalog: the recipes), so an op added to both needs nothing here.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/error.h"
#include "lacs/catalog.h"
#include "lacs/generate.h"
#include "lacs/ops.h"
#include "lacs/types.h"

static int user_error(const lacs_user_case *u, const char *fmt, const char *a, const char *b)
{
    return lacs_internal_error(LACS_ERR_PARAM, u->op[0] ? u->op : NULL, fmt, a ? a : "", b ? b : "");
}

/* `list` (space-separated words) without the words for which drop(word) holds. */
static void filter_words(char *list, size_t size, const char *const *drop_prefixes, size_t n_drop)
{
    char out[1024] = "";
    const char *cursor = list, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        int dropped = 0;
        for (size_t i = 0; i < n_drop && !dropped; i++)
            dropped = strncmp(w, drop_prefixes[i], strlen(drop_prefixes[i])) == 0;
        if (dropped)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, sizeof out - used, "%s%.*s", used ? " " : "", (int)len, w);
    }
    snprintf(list, size, "%s", out);
}

/* The words of `text`, each separated by one space. */
static void normalize_words(const char *text, char *out, size_t size)
{
    out[0] = 0;
    const char *cursor = text ? text : "", *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%.*s", used ? " " : "", (int)len, w);
    }
}

static void start(lacs_user_case *u, const char *op)
{
    memset(u, 0, sizeof *u);
    snprintf(u->op, sizeof u->op, "%s", op);
    u->tiers = LACS_TIER_BOTH;
    u->B = u->T = u->H = u->HV = u->K = u->V = u->rows = u->dim = -1;
}

int lacs_user_case_from_op(lacs_user_case *u, const char *op)
{
    const lacs_op_info *info = lacs_op_find(op);
    start(u, op ? op : "");
    if (!info) {
        int n_ops;
        const lacs_op_info *ops = lacs_ops(&n_ops);
        char names[1024] = "";
        for (int i = 0; i < n_ops; i++) {
            size_t used = strlen(names);
            snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", ops[i].name);
        }
        u->op[0] = 0;
        return user_error(u, "unknown op '%s' (the ops: %s)", op ? op : "", names);
    }
    /* the catalog's plain case of the op: a Basic row, else a Gradient row, else its first */
    size_t n_cases;
    const lacs_case *cases = lacs_catalog(&n_cases), *plain = NULL;
    static const char *const preference[] = {"Basic", "Gradient", NULL};
    for (int p = 0; p < 3 && !plain; p++)
        for (size_t i = 0; i < n_cases && !plain; i++)
            if (strcmp(cases[i].op, op) == 0 && (!preference[p] || lacs_word_in_list(cases[i].flags, preference[p])))
                plain = &cases[i];
    if (plain) {
        normalize_words(plain->inputs, u->inputs, sizeof u->inputs);
        normalize_words(plain->params, u->params, sizeof u->params);
        static const char *const states[] = {"h0:", "h0_kk:"};
        filter_words(u->inputs, sizeof u->inputs, states, 2);
    } else {
        /* an op the catalog has no case of yet: its required inputs, standard normal */
        const char *cursor = info->required, *w;
        for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
            if (len == strlen("cu_seqlens") && strncmp(w, "cu_seqlens", len) == 0)
                continue;
            size_t used = strlen(u->inputs);
            snprintf(u->inputs + used, sizeof u->inputs - used, "%s%.*s:normal", used ? " " : "", (int)len, w);
        }
    }
    return LACS_OK;
}

int lacs_user_case_from_catalog(lacs_user_case *u, const char *case_name)
{
    size_t n_cases;
    const lacs_case *cases = lacs_catalog(&n_cases);
    for (size_t i = 0; i < n_cases; i++) {
        const lacs_case *c = &cases[i];
        char plain[256], fp32[256], bf16[256];
        snprintf(plain, sizeof plain, "%s-%s", c->op, c->name);
        snprintf(fp32, sizeof fp32, "%s-fp32-%s", c->op, c->name);
        snprintf(bf16, sizeof bf16, "%s-bf16-%s", c->op, c->name);
        lacs_tier_mask tiers = c->tiers;
        if (strcmp(case_name, fp32) == 0 && (c->tiers & LACS_TIER_FP32))
            tiers = LACS_TIER_FP32;
        else if (strcmp(case_name, bf16) == 0 && (c->tiers & LACS_TIER_BF16))
            tiers = LACS_TIER_BF16;
        else if (strcmp(case_name, plain) != 0)
            continue;
        start(u, c->op);
        u->tiers = tiers;
        const lacs_op_info *info = lacs_op_find(c->op);
        if (info && info->family == LACS_FAMILY_NORM) {
            u->rows = c->rows;
            u->dim = c->dim;
        } else {
            u->B = c->B;
            u->T = c->T;
            u->H = c->H;
            u->HV = c->HV;
            u->K = c->K;
            u->V = c->V;
        }
        if (c->cu_seqlens) {
            /* offsets "0,0,1,17" -> lengths "0,1,16" */
            const char *p = c->cu_seqlens;
            long long previous = 0;
            for (int first = 1; *p;) {
                char *end;
                long long offset = strtoll(p, &end, 10);
                if (end == p)
                    break;
                if (!first) {
                    size_t used = strlen(u->lengths);
                    snprintf(u->lengths + used, sizeof u->lengths - used, "%s%lld", used ? "," : "",
                             offset - previous);
                }
                previous = offset;
                first = 0;
                p = *end == ',' ? end + 1 : end;
            }
            u->B = -1;
            u->T = -1;
        }
        normalize_words(c->inputs, u->inputs, sizeof u->inputs);
        normalize_words(c->params, u->params, sizeof u->params);
        u->split = c->split;
        normalize_words(c->flags, u->flags, sizeof u->flags);
        snprintf(u->reason, sizeof u->reason, "%s", c->reason);
        snprintf(u->name, sizeof u->name, "%s", c->name);
        return LACS_OK;
    }
    memset(u, 0, sizeof *u);
    return lacs_internal_error(LACS_ERR_PARAM, NULL,
                               "no catalog case '%s' (lacs-generate --list --set core|full lists them; name one as "
                               "<op>-<case> or <op>-<tier>-<case>)", case_name);
}

/* The position and length of the recipe word for input `name` in u->inputs, or -1. */
static int find_recipe(const lacs_user_case *u, const char *name, size_t *length)
{
    const char *cursor = u->inputs, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        const size_t n = strlen(name);
        if (len > n && strncmp(w, name, n) == 0 && w[n] == ':') {
            *length = len;
            return (int)(w - u->inputs);
        }
    }
    return -1;
}

static int op_reads(const lacs_op_info *info, const char *name)
{
    return lacs_word_in_list(info->required, name) || lacs_word_in_list(info->optional, name);
}

int lacs_user_case_set_input(lacs_user_case *u, const char *name, const char *recipe)
{
    const lacs_op_info *info = lacs_op_find(u->op);
    if (!info)
        return user_error(u, "no op chosen before the input '%s'%s", name, NULL);
    if (strcmp(name, "cu_seqlens") == 0)
        return user_error(u, "cu_seqlens is not drawn: give the sequences' lengths (--lengths)%s%s", NULL, NULL);
    if (!op_reads(info, name)) {
        char inputs[256];
        snprintf(inputs, sizeof inputs, "%s %s", info->required, info->optional);
        return user_error(u, "'%s' is not an input of this op (its inputs: %s)", name, inputs);
    }
    if (!recipe[0] || strchr(recipe, ' ') || strchr(recipe, '\t'))
        return user_error(u, "bad recipe '%s' for input '%s' (recipes: normal(s), uniform(lo,hi), const(c), unit(r), "
                             "..., SPEC.md 10.3; no spaces)", recipe, name);
    size_t length = 0;
    const int at = find_recipe(u, name, &length);
    const int removing = strcmp(recipe, "none") == 0;
    if (removing && lacs_word_in_list(info->required, name))
        return user_error(u, "input '%s' is required: it cannot be removed%s", name, NULL);
    char word[160] = "";
    if (!removing)
        snprintf(word, sizeof word, "%s:%s", name, recipe);
    char out[2 * sizeof u->inputs];
    if (at >= 0)
        snprintf(out, sizeof out, "%.*s%s%s", at, u->inputs, word, u->inputs + at + length);
    else
        snprintf(out, sizeof out, "%s%s%s", u->inputs, u->inputs[0] && word[0] ? " " : "", word);
    if (strlen(out) >= sizeof u->inputs)
        return user_error(u, "the recipes are too long (%s)%s", "over 1023 characters", NULL);
    normalize_words(out, u->inputs, sizeof u->inputs);
    return LACS_OK;
}

int lacs_user_case_set_inputs(lacs_user_case *u, const char *list)
{
    u->inputs[0] = 0;
    const char *cursor = list, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        char word[160], *colon;
        snprintf(word, sizeof word, "%.*s", (int)len, w);
        if (!(colon = strchr(word, ':')) || colon == word || !colon[1])
            return user_error(u, "bad recipe '%s': NAME:RECIPE, e.g. k:unit or g:uniform(-0.5,0)%s", word, NULL);
        *colon = 0;
        if (strcmp(colon + 1, "none") == 0)
            return user_error(u, "'%s:none' in a list of recipes: leave the input out instead%s", word, NULL);
        const int rc = lacs_user_case_set_input(u, word, colon + 1);
        if (rc != LACS_OK)
            return rc;
    }
    return LACS_OK;
}

int lacs_user_case_set_gate(lacs_user_case *u, const char *gate)
{
    const lacs_op_info *info = lacs_op_find(u->op);
    if (!info)
        return user_error(u, "no op chosen before the gate '%s'%s", gate, NULL);
    /* the op's gate input: the one its recipes draw, else the first it reads */
    static const char *const gates[] = {"g", "gk", "g_gamma"};
    const char *input = NULL;
    size_t length;
    for (int i = 0; i < 3 && !input; i++)
        if (find_recipe(u, gates[i], &length) >= 0)
            input = gates[i];
    for (int i = 0; i < 3 && !input; i++)
        if (op_reads(info, gates[i]))
            input = gates[i];
    if (!input)
        return user_error(u, "this op has no gate (no input g, gk or g_gamma)%s%s", NULL, NULL);
    if (strcmp(gate, "retnet") == 0) {
        if (!op_reads(info, "g_gamma"))
            return user_error(u, "RetNet's gate is a per-head constant decay g_gamma, which this op does not read "
                                 "(retention and fox do); give a constant per-token gate: --gate 'const(C)'%s%s",
                              NULL, NULL);
        if (strcmp(input, "g_gamma") != 0 && !lacs_word_in_list(info->required, input))
            lacs_user_case_set_input(u, input, "none");
        return lacs_user_case_set_input(u, "g_gamma", "retnet");
    }
    if (strcmp(gate, "per-channel") == 0) {
        if (!op_reads(info, "gk"))
            return user_error(u, "this op has no per-channel gate gk (gla and gated_delta_rule do)%s%s", NULL, NULL);
        if (strcmp(input, "gk") == 0)
            return LACS_OK;
        char recipe[160] = "uniform(-0.5,0)";
        const int at = find_recipe(u, input, &length);
        if (at >= 0)
            snprintf(recipe, sizeof recipe, "%.*s", (int)(length - strlen(input) - 1), u->inputs + at + strlen(input) + 1);
        if (!lacs_word_in_list(info->required, input))
            lacs_user_case_set_input(u, input, "none");
        return lacs_user_case_set_input(u, "gk", recipe);
    }
    const char *recipe = gate;
    char constant[96];
    if (strcmp(gate, "random") == 0)
        recipe = "uniform(-0.5,0)";
    else if (strcmp(gate, "zero") == 0)
        recipe = "const(0)";
    else if (strcmp(gate, "mixed") == 0)
        recipe = "mixed_gate";
    else if (strcmp(gate, "strong") == 0)
        recipe = "uniform(-30,-10)";
    else if (strncmp(gate, "constant(", 9) == 0) {
        snprintf(constant, sizeof constant, "const(%s", gate + 9);
        recipe = constant;
    }
    return lacs_user_case_set_input(u, input, recipe);
}

int lacs_user_case_add_initial_state(lacs_user_case *u)
{
    const lacs_op_info *info = lacs_op_find(u->op);
    if (!info)
        return user_error(u, "no op chosen before --h0%s%s", NULL, NULL);
    if (!op_reads(info, "h0"))
        return user_error(u, "this op has no initial state (h0)%s%s", NULL, NULL);
    size_t length;
    int rc = LACS_OK;
    if (find_recipe(u, "h0", &length) < 0)
        rc = lacs_user_case_set_input(u, "h0", "normal(0.5)");
    if (rc == LACS_OK && op_reads(info, "h0_kk") && find_recipe(u, "h0_kk", &length) < 0)
        rc = lacs_user_case_set_input(u, "h0_kk", "psd(1)");
    return rc;
}

int lacs_user_case_set_param(lacs_user_case *u, const char *name, double value)
{
    const lacs_op_info *info = lacs_op_find(u->op);
    if (!info)
        return user_error(u, "no op chosen before the parameter '%s'%s", name, NULL);
    if (!lacs_word_in_list(info->params, name))
        return user_error(u, "this op reads no parameter '%s' (its parameters: %s)", name,
                          info->params[0] ? info->params : "none");
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s=", name);
    const char *const drop[] = {prefix};
    filter_words(u->params, sizeof u->params, drop, 1);
    size_t used = strlen(u->params);
    snprintf(u->params + used, sizeof u->params - used, "%s%s=%.17g", used ? " " : "", name, value);
    return LACS_OK;
}

static int is_power_of_two(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

static void add_flag(char *flags, size_t size, const char *flag)
{
    if (lacs_word_in_list(flags, flag))
        return;
    size_t used = strlen(flags);
    snprintf(flags + used, size - used, "%s%s", used ? " " : "", flag);
}

int lacs_user_case_resolve(lacs_user_case *u)
{
    const lacs_op_info *info = lacs_op_find(u->op);
    if (!info)
        return user_error(u, "no op chosen (--op OP or --like CASE)%s%s", NULL, NULL);
    lacs_case *c = &u->c;
    memset(c, 0, sizeof *c);
    u->cu_seqlens[0] = 0;
    int64_t n_lengths = 0, shortest = -1;
    if (info->family == LACS_FAMILY_NORM) {
        if (u->rows < 1 || u->dim < 1)
            return user_error(u, "the norms need --rows and --dim (x is [rows, dim])%s%s", NULL, NULL);
        if (u->lengths[0] || u->split > 0 || u->T >= 0 || u->H >= 0)
            return user_error(u, "a norm has rows and dim only (no T, heads, lengths or --split)%s%s", NULL, NULL);
        c->rows = u->rows;
        c->dim = u->dim;
    } else {
        if (u->rows >= 0 || u->dim >= 0)
            return user_error(u, "--rows and --dim are for the norms; an op on sequences takes B, T, H, HV, K, V%s%s",
                              NULL, NULL);
        if (u->lengths[0]) {
            if (u->B > 1 || u->T >= 0)
                return user_error(u, "with --lengths the sequences are packed into B = 1 and T = their sum: "
                                     "give no --B or --T%s%s", NULL, NULL);
            int64_t total = 0;
            snprintf(u->cu_seqlens, sizeof u->cu_seqlens, "0");
            for (const char *p = u->lengths; *p;) {
                char *end;
                const long long length = strtoll(p, &end, 10);
                if (end == p || length < 0 || (*end && *end != ','))
                    return user_error(u, "bad --lengths '%s': non-negative integers separated by commas%s",
                                      u->lengths, NULL);
                total += length;
                if (++n_lengths > LACS_CASE_MAX_SEQUENCES)
                    return user_error(u, "more than 1024 sequences in --lengths%s%s", NULL, NULL);
                shortest = shortest < 0 || length < shortest ? length : shortest;
                size_t used = strlen(u->cu_seqlens);
                if (snprintf(u->cu_seqlens + used, sizeof u->cu_seqlens - used, ",%lld", (long long)total) >=
                    (int)(sizeof u->cu_seqlens - used))
                    return user_error(u, "--lengths is too long%s%s", NULL, NULL);
                p = *end == ',' ? end + 1 : end;
            }
            c->B = 1;
            c->T = total;
            c->cu_seqlens = u->cu_seqlens;
        } else {
            if (u->T < 0)
                return user_error(u, "give the sequence length --T (or --lengths for a varlen batch)%s%s", NULL,
                                  NULL);
            c->B = u->B < 0 ? 1 : u->B;
            c->T = u->T;
        }
        if (u->H < 1 || u->K < 1)
            return user_error(u, "give the q/k heads --H and the key head size --K (HV defaults to H, V to K)%s%s",
                              NULL, NULL);
        c->H = u->H;
        c->HV = u->HV < 0 ? u->H : u->HV;
        c->K = u->K;
        c->V = u->V < 0 ? u->K : u->V;
        if (c->B < 1 || c->HV < 1 || c->V < 1 || c->HV % c->H != 0)
            return user_error(u, "B, HV and V must be positive and HV a multiple of H (SPEC.md 2.2)%s%s", NULL, NULL);
        if (u->split > 0 && (u->lengths[0] || u->split >= c->T || info->family == LACS_FAMILY_ATTENTION))
            return user_error(u, "--split needs a fixed-length op with a state and 0 < split < T%s%s", NULL, NULL);
    }
    if (u->split < 0)
        return user_error(u, "--split must be positive%s%s", NULL, NULL);
    /* the flags: the user's, else those the shape and recipes call for */
    char flags[256];
    normalize_words(u->flags, flags, sizeof flags);
    if (!flags[0] && info->family != LACS_FAMILY_NORM) {
        size_t length;
        if (c->T == 1)
            add_flag(flags, sizeof flags, "SingleToken");
        if (c->T >= 1000)
            add_flag(flags, sizeof flags, "LongSequence");
        if (c->K != c->V)
            add_flag(flags, sizeof flags, "KNeV");
        if (!is_power_of_two(c->K) || !is_power_of_two(c->V))
            add_flag(flags, sizeof flags, "OddHeadDim");
        if (c->HV > c->H)
            add_flag(flags, sizeof flags, "GroupedValueHeads");
        if (find_recipe(u, "h0", &length) >= 0)
            add_flag(flags, sizeof flags, "InitialState");
        if (lacs_word_in_list(u->params, "scale") || strstr(u->params, "scale="))
            add_flag(flags, sizeof flags, "CustomScale");
        if (c->cu_seqlens)
            add_flag(flags, sizeof flags, "Varlen");
        if (c->cu_seqlens && shortest <= 1)
            add_flag(flags, sizeof flags, "EmptySequence");
        if (u->split > 0)
            add_flag(flags, sizeof flags, "StateCarry");
        if (find_recipe(u, "gk", &length) >= 0)
            add_flag(flags, sizeof flags, "PerChannelGate");
    }
    if (!flags[0])
        add_flag(flags, sizeof flags, strstr(u->op, "_vjp") ? "Gradient" : "Basic");
    size_t n_known;
    const lacs_flag_info *known = lacs_flags(&n_known);
    const char *cursor = flags, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        int found = 0;
        for (size_t i = 0; i < n_known && !found; i++)
            found = strlen(known[i].name) == len && strncmp(known[i].name, w, len) == 0;
        if (!found) {
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)len, w);
            return user_error(u, "unknown flag '%s' (lacs-generate --flags lists them)%s", word, NULL);
        }
    }
    snprintf(u->flags, sizeof u->flags, "%s", flags);
    /* the name: the user's, else the shape's */
    if (!u->name[0]) {
        if (info->family == LACS_FAMILY_NORM)
            snprintf(u->name, sizeof u->name, "r%lld-d%lld", (long long)c->rows, (long long)c->dim);
        else if (c->cu_seqlens)
            snprintf(u->name, sizeof u->name, "varlen%lld-t%lld-h%lld-hv%lld-k%lld-v%lld", (long long)n_lengths,
                     (long long)c->T, (long long)c->H, (long long)c->HV, (long long)c->K, (long long)c->V);
        else
            snprintf(u->name, sizeof u->name, "b%lld-t%lld-h%lld-hv%lld-k%lld-v%lld", (long long)c->B,
                     (long long)c->T, (long long)c->H, (long long)c->HV, (long long)c->K, (long long)c->V);
        if (u->split > 0) {
            size_t used = strlen(u->name);
            snprintf(u->name + used, sizeof u->name - used, "-carry%lld", (long long)u->split);
        }
    }
    for (const char *p = u->name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '.' || *p == '-'))
            return user_error(u, "bad --name '%s': lowercase letters, digits, '_', '.' and '-' only%s", u->name, NULL);
    if (!u->name[0] || u->name[0] == '.' || u->name[0] == '-')
        return user_error(u, "bad --name '%s': it must start with a letter, a digit or '_'%s", u->name, NULL);
    /* the reason, in the user's words: one line, printable */
    if (!u->reason[0])
        return user_error(u, "give the reason this vector exists, in one sentence: --reason '...' (it is stored "
                             "in the vector, SPEC.md 10.1)%s%s", NULL, NULL);
    for (const unsigned char *p = (const unsigned char *)u->reason; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return user_error(u, "the reason must be one line of printable text%s%s", NULL, NULL);
    if (u->has_seed && u->seed >= (1ull << 53))
        return user_error(u, "--seed must be below 2^53 (it is stored as a JSON number)%s%s", NULL, NULL);
    if (!u->inputs[0])
        return user_error(u, "no inputs to draw%s%s", NULL, NULL);
    c->op = u->op;
    c->name = u->name;
    c->tiers = u->tiers;
    c->set = LACS_SET_CORE;
    c->inputs = u->inputs;
    c->params = u->params;
    c->split = u->split;
    c->flags = u->flags;
    c->reason = u->reason;
    return LACS_OK;
}

char *lacs_user_case_arguments(const lacs_user_case *u, lacs_tier_mask tier)
{
    const lacs_case *c = &u->c;
    cJSON *args = cJSON_CreateArray();
    char number[32];
#define ADD(text) cJSON_AddItemToArray(args, cJSON_CreateString(text))
#define ADD_NUMBER(flag, value)                                   \
    do {                                                          \
        ADD(flag);                                                \
        snprintf(number, sizeof number, "%lld", (long long)(value)); \
        ADD(number);                                              \
    } while (0)
    ADD("--op");
    ADD(u->op);
    ADD("--tier");
    ADD(tier == LACS_TIER_FP32 ? "fp32" : "bf16");
    const lacs_op_info *info = lacs_op_find(u->op);
    if (info && info->family == LACS_FAMILY_NORM) {
        ADD_NUMBER("--rows", c->rows);
        ADD_NUMBER("--dim", c->dim);
    } else {
        if (c->cu_seqlens) {
            ADD("--lengths");
            ADD(u->lengths);
        } else {
            ADD_NUMBER("--B", c->B);
            ADD_NUMBER("--T", c->T);
        }
        ADD_NUMBER("--H", c->H);
        ADD_NUMBER("--HV", c->HV);
        ADD_NUMBER("--K", c->K);
        ADD_NUMBER("--V", c->V);
    }
    ADD("--inputs");
    ADD(u->inputs);
    const char *cursor = u->params, *w;
    for (size_t len; (len = lacs_next_word(&cursor, &w)) > 0;) {
        char word[96];
        snprintf(word, sizeof word, "%.*s", (int)len, w);
        ADD("--param");
        ADD(word);
    }
    if (u->split > 0)
        ADD_NUMBER("--split", u->split);
    ADD("--flags");
    ADD(u->flags);
    ADD("--reason");
    ADD(u->reason);
    ADD("--name");
    ADD(u->name);
    if (u->has_seed) {
        ADD("--seed");
        snprintf(number, sizeof number, "%llu", (unsigned long long)u->seed);
        ADD(number);
    }
#undef ADD
#undef ADD_NUMBER
    char *text = cJSON_PrintUnformatted(args);
    cJSON_Delete(args);
    return text;
}
