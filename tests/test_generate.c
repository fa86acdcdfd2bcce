/* Generating vectors (lacs/generate.h, generators/vector_set.c, user_case.c,
 * the gauge's threads; SPEC.md 10.7, 10.8):
 *   gauge_threads   the gauge, and so the whole vector, is bit-identical for
 *                   1, 3 and 16 threads (fp32 state noise, gates, varlen,
 *                   state carry, norms), while another seed is not;
 *   golden_parts    lacs_golden_inputs draws exactly the inputs a build
 *                   draws; lacs_golden_input_shapes gives their shapes;
 *                   lacs_golden_build_seeded with the id's seed is the build;
 *   user_case       a user case started from a catalog case builds that
 *                   case byte for byte; the op's plain recipes; the gates;
 *                   every user error refused with a message;
 *   manifest        the diff names what changed and finds nothing in equal
 *                   manifests; a merge adds, replaces and sorts, and refuses
 *                   another generator's manifest;
 *   estimate        the estimated bytes are the written ones, within 1%. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lacs/catalog.h"
#include "lacs/gauge.h"
#include "lacs/generate.h"
#include "lacs/ops.h"
#include "lacs/prng.h"
#include "lacs/safetensors.h"
#include "lacs/types.h"

static const lacs_case *catalog_case(const char *op, const char *name)
{
    size_t n;
    const lacs_case *cases = lacs_catalog(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(cases[i].op, op) == 0 && strcmp(cases[i].name, name) == 0)
            return &cases[i];
    cr_assert_fail("no catalog case %s-%s", op, name);
    return NULL;
}

/* Whether two built goldens are the same bytes: every tensor and the metadata. */
static int same_golden(const lacs_golden *a, const lacs_golden *b)
{
    if (a->n_tensors != b->n_tensors || a->n_inputs != b->n_inputs || a->seed != b->seed)
        return 0;
    for (int i = 0; i < a->n_tensors; i++) {
        const lacs_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) != 0 || x->dtype != y->dtype || lacs_tensor_count(x) != lacs_tensor_count(y) ||
            memcmp(x->data, y->data, (size_t)lacs_tensor_count(x) * lacs_dtype_size(x->dtype)) != 0)
            return 0;
    }
    return (!a->metadata && !b->metadata) || (a->metadata && b->metadata && strcmp(a->metadata, b->metadata) == 0);
}

static void build_with_threads(const lacs_case *c, lacs_tier_mask tier, int threads, lacs_golden *g)
{
    lacs_gauge_parallelism p = {threads, NULL, NULL};
    lacs_gauge_set_parallelism(&p);
    const int rc = lacs_golden_build(c, tier, g);
    lacs_gauge_parallelism serial = {1, NULL, NULL};
    lacs_gauge_set_parallelism(&serial);
    cr_assert_eq(rc, LACS_OK, "%s-%s: %s", c->op, c->name, lacs_last_error());
}

/* ---- the gauge's threads ---- */

static int samples_seen;
static void count_sample(void *context)
{
    (void)context;
    __atomic_add_fetch(&samples_seen, 1, __ATOMIC_SEQ_CST);
}

Test(gauge_threads, the_vector_is_bit_identical_for_any_number_of_threads)
{
    static const struct {
        const char *op, *name;
        lacs_tier_mask tier;
    } cases[] = {
        {"gated_delta_rule", "mixed", LACS_TIER_FP32}, /* state noise and gates */
        {"gated_delta_rule", "gk", LACS_TIER_BF16},    /* per-channel gates */
        {"mesa_net", "varlen", LACS_TIER_FP32},        /* two states, varlen */
        {"comba", "carry37", LACS_TIER_FP32},          /* state carry: two gauges */
        {"fox", "t129", LACS_TIER_BF16},               /* attention, whole-sequence gate window */
        {"dyt_vjp", "basic", LACS_TIER_FP32},          /* the norms */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const lacs_case *c = catalog_case(cases[k].op, cases[k].name);
        lacs_golden serial, three, sixteen;
        build_with_threads(c, cases[k].tier, 1, &serial);
        build_with_threads(c, cases[k].tier, 3, &three);
        build_with_threads(c, cases[k].tier, 16, &sixteen);
        cr_expect(same_golden(&serial, &three), "%s-%s: 3 threads differ from 1", c->op, c->name);
        cr_expect(same_golden(&serial, &sixteen), "%s-%s: 16 threads differ from 1", c->op, c->name);
        /* the wrong thing: another seed gives another vector, which the comparison sees */
        const uint64_t other_seed = serial.seed + 1;
        lacs_golden other;
        cr_assert_eq(lacs_golden_build_seeded(c, cases[k].tier, &other_seed, &other), LACS_OK);
        cr_expect(!same_golden(&serial, &other), "%s-%s: another seed must differ", c->op, c->name);
        lacs_golden_free(&serial);
        lacs_golden_free(&three);
        lacs_golden_free(&sixteen);
        lacs_golden_free(&other);
    }
}

Test(gauge_threads, the_progress_callback_sees_every_sample)
{
    const lacs_case *c = catalog_case("delta_rule", "t65");
    samples_seen = 0;
    lacs_gauge_parallelism p = {4, count_sample, NULL};
    lacs_gauge_set_parallelism(&p);
    lacs_golden g;
    cr_assert_eq(lacs_golden_build(c, LACS_TIER_FP32, &g), LACS_OK);
    lacs_gauge_parallelism serial = {1, NULL, NULL};
    lacs_gauge_set_parallelism(&serial);
    cr_expect_eq(samples_seen, LACS_GAUGE_SAMPLES);
    lacs_golden_free(&g);
}

/* ---- inputs only, shapes only, seeded ---- */

Test(golden_parts, inputs_and_shapes_are_those_of_the_build)
{
    static const char *const names[][2] = {{"delta_rule", "varlen"}, {"path_attn", "w-eq-k"}, {"rmsnorm", "basic"},
                                           {"mesa_net", "h0-kk"}};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const lacs_case *c = catalog_case(names[k][0], names[k][1]);
        lacs_golden whole, inputs, shapes;
        cr_assert_eq(lacs_golden_build(c, LACS_TIER_BF16, &whole), LACS_OK);
        cr_assert_eq(lacs_golden_inputs(c, LACS_TIER_BF16, NULL, &inputs), LACS_OK);
        cr_assert_eq(lacs_golden_input_shapes(c, LACS_TIER_BF16, &shapes), LACS_OK);
        cr_expect_eq(inputs.n_tensors, whole.n_inputs);
        cr_expect_eq(shapes.n_tensors, whole.n_inputs);
        cr_expect_null(inputs.metadata);
        for (int i = 0; i < whole.n_inputs; i++) {
            const lacs_tensor *w = &whole.tensors[i], *in = &inputs.tensors[i], *s = &shapes.tensors[i];
            const size_t bytes = (size_t)lacs_tensor_count(w) * lacs_dtype_size(w->dtype);
            cr_expect_str_eq(in->name, w->name);
            cr_expect(memcmp(in->data, w->data, bytes) == 0, "%s: input %s differs", c->name, w->name);
            cr_expect_str_eq(s->name, w->name);
            cr_expect_eq(lacs_tensor_count(s), lacs_tensor_count(w));
        }
        /* seeded with the id's own seed: the build itself */
        const uint64_t seed = lacs_fnv1a64(whole.id) >> 11;
        lacs_golden seeded;
        cr_assert_eq(lacs_golden_build_seeded(c, LACS_TIER_BF16, &seed, &seeded), LACS_OK);
        cr_expect(same_golden(&whole, &seeded), "%s: the id's seed given must be the build", c->name);
        lacs_golden_free(&whole);
        lacs_golden_free(&inputs);
        lacs_golden_free(&shapes);
        lacs_golden_free(&seeded);
    }
}

/* ---- user cases ---- */

Test(user_case, a_catalog_case_taken_as_a_user_case_builds_byte_for_byte)
{
    size_t n;
    const lacs_case *cases = lacs_catalog(&n);
    int checked = 0;
    /* every seventh core case (both kinds of rows, every family, varlen and carry among them) */
    for (size_t i = 0; i < n; i += 7) {
        const lacs_case *c = &cases[i];
        if (c->set != LACS_SET_CORE)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s-%s", c->op, c->name);
        lacs_user_case u;
        cr_assert_eq(lacs_user_case_from_catalog(&u, name), LACS_OK, "%s: %s", name, lacs_last_error());
        cr_assert_eq(lacs_user_case_resolve(&u), LACS_OK, "%s: %s", name, lacs_last_error());
        const lacs_tier_mask tier = c->tiers & LACS_TIER_FP32 ? LACS_TIER_FP32 : LACS_TIER_BF16;
        lacs_golden a, b;
        cr_assert_eq(lacs_golden_build(c, tier, &a), LACS_OK, "%s: %s", name, lacs_last_error());
        cr_assert_eq(lacs_golden_build(&u.c, tier, &b), LACS_OK, "%s: %s", name, lacs_last_error());
        cr_expect(same_golden(&a, &b), "%s: the user case's vector differs from the catalog's", name);
        lacs_golden_free(&a);
        lacs_golden_free(&b);
        checked++;
    }
    cr_expect_gt(checked, 40);
}

Test(user_case, options_change_the_case_as_named)
{
    lacs_user_case u;
    cr_assert_eq(lacs_user_case_from_op(&u, "gated_delta_rule"), LACS_OK);
    cr_expect_str_eq(u.inputs, "q:normal k:unit v:normal beta:uniform(0,1) g:uniform(-0.5,0)");
    cr_assert_eq(lacs_user_case_set_gate(&u, "mixed"), LACS_OK);
    cr_expect_str_eq(u.inputs, "q:normal k:unit v:normal beta:uniform(0,1) g:mixed_gate");
    cr_assert_eq(lacs_user_case_set_gate(&u, "per-channel"), LACS_OK);
    cr_expect_str_eq(u.inputs, "q:normal k:unit v:normal beta:uniform(0,1) gk:mixed_gate");
    cr_assert_eq(lacs_user_case_set_input(&u, "k", "normal(0.25)"), LACS_OK);
    cr_assert_eq(lacs_user_case_add_initial_state(&u), LACS_OK);
    cr_expect_str_eq(u.inputs, "q:normal k:normal(0.25) v:normal beta:uniform(0,1) gk:mixed_gate h0:normal(0.5)");
    cr_assert_eq(lacs_user_case_set_param(&u, "scale", 0.25), LACS_OK);
    cr_assert_eq(lacs_user_case_set_param(&u, "scale", 0.5), LACS_OK);
    cr_expect_str_eq(u.params, "scale=0.5");
    u.T = 70;
    u.H = 2;
    u.HV = 4;
    u.K = 16;
    snprintf(u.reason, sizeof u.reason, "a test");
    cr_assert_eq(lacs_user_case_resolve(&u), LACS_OK, "%s", lacs_last_error());
    cr_expect_str_eq(u.name, "b1-t70-h2-hv4-k16-v16");
    cr_expect_str_eq(u.flags, "GroupedValueHeads InitialState CustomScale PerChannelGate");
    cr_expect_eq(u.c.B, 1);
    cr_expect_eq(u.c.V, 16);

    /* retention's gate is RetNet's; MesaNet's initial states are two */
    cr_assert_eq(lacs_user_case_from_op(&u, "fox"), LACS_OK);
    cr_assert_eq(lacs_user_case_set_gate(&u, "retnet"), LACS_OK);
    cr_expect_str_eq(u.inputs, "q:normal k:normal v:normal g_gamma:retnet");
    cr_assert_eq(lacs_user_case_from_op(&u, "mesa_net"), LACS_OK);
    cr_assert_eq(lacs_user_case_add_initial_state(&u), LACS_OK);
    cr_expect(strstr(u.inputs, "h0:normal(0.5) h0_kk:psd(1)") != NULL, "%s", u.inputs);
    /* varlen lengths become offsets */
    cr_assert_eq(lacs_user_case_from_op(&u, "delta_rule"), LACS_OK);
    snprintf(u.lengths, sizeof u.lengths, "3,0,5");
    u.H = 1;
    u.K = 8;
    snprintf(u.reason, sizeof u.reason, "a test");
    cr_assert_eq(lacs_user_case_resolve(&u), LACS_OK, "%s", lacs_last_error());
    cr_expect_str_eq(u.c.cu_seqlens, "0,3,3,8");
    cr_expect_eq(u.c.T, 8);
    cr_expect(strstr(u.flags, "Varlen EmptySequence") != NULL, "%s", u.flags);
}

Test(user_case, errors_are_refused_with_a_message)
{
    lacs_user_case u;
    cr_expect_eq(lacs_user_case_from_op(&u, "gated_delta"), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "unknown op 'gated_delta'") != NULL, "%s", lacs_last_error());
    cr_expect_eq(lacs_user_case_from_catalog(&u, "delta_rule-t66"), LACS_ERR_PARAM);

    cr_assert_eq(lacs_user_case_from_op(&u, "gated_delta_rule"), LACS_OK);
    cr_expect_eq(lacs_user_case_set_input(&u, "x", "normal"), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "'x' is not an input") != NULL, "%s", lacs_last_error());
    cr_expect_eq(lacs_user_case_set_input(&u, "q", "none"), LACS_ERR_PARAM);
    cr_expect_eq(lacs_user_case_set_input(&u, "cu_seqlens", "normal"), LACS_ERR_PARAM);
    cr_expect_eq(lacs_user_case_set_gate(&u, "retnet"), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "g_gamma") != NULL, "%s", lacs_last_error());
    cr_expect_eq(lacs_user_case_set_param(&u, "cap", 1), LACS_ERR_PARAM);
    cr_assert_eq(lacs_user_case_from_op(&u, "softmax_attn"), LACS_OK);
    cr_expect_eq(lacs_user_case_set_gate(&u, "zero"), LACS_ERR_PARAM);
    cr_expect_eq(lacs_user_case_add_initial_state(&u), LACS_ERR_PARAM);

    struct {
        int64_t T, H, HV, K;
        const char *lengths, *reason, *name, *flags;
        int64_t split, rows;
        const char *expect;
    } bad[] = {
        {64, 2, 3, 8, "", "r", "", "", 0, -1, "multiple of H"},
        {-1, 2, 2, 8, "", "r", "", "", 0, -1, "--T"},
        {64, -1, -1, 8, "", "r", "", "", 0, -1, "--H"},
        {64, 1, 1, 8, "", "", "", "", 0, -1, "reason"},
        {64, 1, 1, 8, "", "r\nnext line", "", "", 0, -1, "one line"},
        {64, 1, 1, 8, "", "r", "Big", "", 0, -1, "bad --name"},
        {64, 1, 1, 8, "", "r", "", "NoSuchFlag", 0, -1, "unknown flag"},
        {64, 1, 1, 8, "", "r", "", "", 64, -1, "--split"},
        {-1, 1, 1, 8, "10,20", "r", "", "", 5, -1, "--split"},
        {-1, 1, 1, 8, "10,-2", "r", "", "", 0, -1, "--lengths"},
        {64, 1, 1, 8, "", "r", "", "", 0, 4, "--rows"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        cr_assert_eq(lacs_user_case_from_op(&u, "delta_rule"), LACS_OK);
        u.T = bad[k].T;
        u.H = bad[k].H;
        u.HV = bad[k].HV;
        u.K = bad[k].K;
        u.split = bad[k].split;
        u.rows = bad[k].rows;
        snprintf(u.lengths, sizeof u.lengths, "%s", bad[k].lengths);
        snprintf(u.reason, sizeof u.reason, "%s", bad[k].reason);
        snprintf(u.name, sizeof u.name, "%s", bad[k].name);
        snprintf(u.flags, sizeof u.flags, "%s", bad[k].flags);
        cr_expect_eq(lacs_user_case_resolve(&u), LACS_ERR_PARAM, "bad case %zu was accepted", k);
        cr_expect(strstr(lacs_last_error(), bad[k].expect) != NULL, "case %zu: '%s' should name '%s'", k,
                  lacs_last_error(), bad[k].expect);
    }
    /* the same case made right is accepted (the table above is not refused for another reason) */
    cr_assert_eq(lacs_user_case_from_op(&u, "delta_rule"), LACS_OK);
    u.T = 64;
    u.H = 1;
    u.K = 8;
    snprintf(u.reason, sizeof u.reason, "r");
    cr_expect_eq(lacs_user_case_resolve(&u), LACS_OK, "%s", lacs_last_error());
    /* too many sequences */
    char *many = malloc(4 * 1100);
    many[0] = 0;
    for (int i = 0; i < 1025; i++)
        strcat(many, i ? ",1" : "1");
    snprintf(u.lengths, sizeof u.lengths, "%s", many);
    u.T = -1;
    cr_expect_eq(lacs_user_case_resolve(&u), LACS_ERR_PARAM);
    cr_expect(strstr(lacs_last_error(), "1024") != NULL, "%s", lacs_last_error());
    free(many);
}

/* ---- manifests ---- */

static char *one_case_manifest(const char *generator, const char *id, const char *sha)
{
    static char text[1024];
    snprintf(text, sizeof text,
             "{\"format\":\"lacs-manifest/1\",\"spec_version\":\"1.3\",\"generator_version\":\"%s\",\"set\":\"user\","
             "\"cases\":[{\"id\":\"%s\",\"op\":\"delta_rule\",\"tier\":\"fp32\",\"flags\":[],\"path\":\"p\","
             "\"shapes\":{},\"bytes\":8,\"sha256\":\"%s\",\"inputs_sha256\":\"i\"}]}",
             generator, id, sha);
    return strdup(text);
}

Test(manifest, the_diff_names_what_differs)
{
    char *a = one_case_manifest("2", "delta_rule-fp32-x", "aa");
    char *same = one_case_manifest("2", "delta_rule-fp32-x", "aa");
    char *hash = one_case_manifest("2", "delta_rule-fp32-x", "bb");
    char *version = one_case_manifest("3", "delta_rule-fp32-x", "aa");
    char *other = one_case_manifest("2", "delta_rule-fp32-y", "aa");
    char buffer[4096];
    FILE *report = fmemopen(buffer, sizeof buffer, "w");
    cr_expect_eq(lacs_manifest_diff(a, same, report, 10), 0);
    cr_expect_eq(lacs_manifest_diff(a, hash, report, 10), 1);
    cr_expect_eq(lacs_manifest_diff(a, version, report, 10), 1);
    cr_expect_eq(lacs_manifest_diff(a, other, report, 10), 2);
    fclose(report);
    cr_expect(strstr(buffer, "delta_rule-fp32-x: sha256 differs") != NULL, "%s", buffer);
    cr_expect(strstr(buffer, "generator_version: committed 2, generated 3") != NULL, "%s", buffer);
    cr_expect(strstr(buffer, "delta_rule-fp32-x: in the committed manifest, not generated") != NULL, "%s", buffer);
    cr_expect(strstr(buffer, "delta_rule-fp32-y: generated, not in the committed manifest") != NULL, "%s", buffer);
    free(a);
    free(same);
    free(hash);
    free(version);
    free(other);
}

Test(manifest, a_merge_adds_replaces_sorts_and_refuses_another_generator)
{
    char *first = one_case_manifest("2", "delta_rule-fp32-y", "aa");
    char *second = one_case_manifest("2", "delta_rule-fp32-x", "bb");
    char *replaced = one_case_manifest("2", "delta_rule-fp32-y", "cc");
    char *newer = one_case_manifest("3", "delta_rule-fp32-z", "aa");
    char message[512];
    char *merged = lacs_manifest_merge(first, second, message, sizeof message);
    cr_assert_not_null(merged, "%s", message);
    cJSON *root = cJSON_Parse(merged);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases");
    cr_assert_eq(cJSON_GetArraySize(cases), 2);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, 0), "id")->valuestring, "delta_rule-fp32-x");
    cJSON_Delete(root);
    char *again = lacs_manifest_merge(merged, replaced, message, sizeof message);
    cr_assert_not_null(again);
    root = cJSON_Parse(again);
    cases = cJSON_GetObjectItem(root, "cases");
    cr_expect_eq(cJSON_GetArraySize(cases), 2);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(cases, 1), "sha256")->valuestring, "cc");
    cJSON_Delete(root);
    cr_expect_null(lacs_manifest_merge(merged, newer, message, sizeof message));
    cr_expect(strstr(message, "generator_version is 2, this one's 3") != NULL, "%s", message);
    cr_expect_null(lacs_manifest_merge("{not json", second, message, sizeof message));
    free(first);
    free(second);
    free(replaced);
    free(newer);
    free(merged);
    free(again);
}

/* ---- the estimate ---- */

Test(estimate, the_bytes_are_those_written)
{
    char dir[] = "/tmp/lacs-test-estimate-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    static const char *const names[][2] = {{"gated_delta_rule", "k60-v100"}, {"mesa_net", "carry37"},
                                           {"path_attn", "t129"}, {"rmsnorm_vjp", "basic"}};
    lacs_vector_job jobs[4];
    for (int k = 0; k < 4; k++)
        lacs_vector_job_init(&jobs[k], catalog_case(names[k][0], names[k][1]), LACS_TIER_FP32, "");
    lacs_vector_estimate e;
    cr_assert_eq(lacs_vector_estimate_run(jobs, 4, 2, 1, &e), LACS_OK, "%s", lacs_last_error());
    cr_expect_eq(e.measured, 4);
    cr_expect_gt(e.seconds, 0);
    cr_expect_gt(e.memory_bytes, e.bytes / 4);
    lacs_vector_run_options options = {"test", dir, NULL, 0, 2, 0, 0};
    cr_assert_eq(lacs_vector_run(jobs, 4, &options), 0, "%s", jobs[0].message);
    long long written = 0;
    for (int k = 0; k < 4; k++) {
        cr_expect(jobs[k].ok, "%s", jobs[k].message);
        written += jobs[k].bytes;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, jobs[k].path);
        remove(path);
        *strrchr(path, '/') = 0;
        rmdir(path);
        lacs_vector_job_free(&jobs[k]);
    }
    rmdir(dir);
    cr_expect(e.bytes >= written && e.bytes <= written * 1.01 + 4 * 4096, "estimated %lld, written %lld", e.bytes,
              written);
}
