/* The checker's integrity in the library (issue 17; SPEC.md 10.2, 11.5, 11.7),
 * each guard paired with the wrong input or implementation it must stop:
 *
 *   lacs_printable            terminal escapes, C1 controls, invalid UTF-8 escaped; UTF-8 kept
 *   lacs_output_file_write    links, FIFOs, existing files, golden vectors refused; a whole file or none
 *   lacs_check_implementation an implementation writing past or before an output fails with the reason;
 *                             one updating h0 in place passes a state carry; the fault table names inputs
 *   lacs_vector_load_verified a wrong hash, a bad tolerance, cu_seqlens past T refused with their kinds
 *   lacs_cases_find           missing and unlisted files found
 *   lacs_verdict              conforms, partial (declared or not), not claimed, fails, strict, no verdict
 *
 * The CLI and the Python harness are driven end to end by tests/hostile/.
 */
#define _DEFAULT_SOURCE 1

#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lacs/cases.h"
#include "lacs/check.h"
#include "lacs/ops.h"
#include "lacs/output.h"
#include "lacs/verdict.h"

#define VECTOR(op, id) "vectors/core/" op "/" id ".safetensors"

/* ---- a scratch directory ---- */

static char scratch[64];

static void make_scratch(void)
{
    strcpy(scratch, "/tmp/lacs-integrity-XXXXXX");
    cr_assert_not_null(mkdtemp(scratch));
}

static void remove_tree(const char *path)
{
    DIR *dir = opendir(path);
    if (dir) {
        struct dirent *e;
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char child[1024];
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            struct stat st;
            if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(child);
            else
                unlink(child);
        }
        closedir(dir);
    }
    rmdir(path);
}

static void remove_scratch(void) { remove_tree(scratch); }

static const char *in_scratch(const char *name)
{
    static char paths[4][512];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, sizeof paths[0], "%s/%s", scratch, name);
    return path;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    static char text[4096];
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    const size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static int entries_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

/* ---- printable text ---- */

Test(printable, escapes_what_could_drive_a_terminal_and_keeps_utf8)
{
    char out[256];
    lacs_printable("ok \x1b[2J\x07 caf\xc3\xa9 \xc2\x9b" "31m \xff\xfe end", out, sizeof out);
    cr_expect_str_eq(out, "ok \\x1B[2J\\x07 caf\xc3\xa9 \\xC2\\x9B31m \\xFF\\xFE end");
    lacs_printable("line\nbreak\ttab", out, sizeof out);
    cr_expect_str_eq(out, "line\\x0Abreak\\x09tab");
    /* overlong and surrogate encodings are not UTF-8 */
    lacs_printable("\xc0\xaf \xed\xa0\x80", out, sizeof out);
    cr_expect_str_eq(out, "\\xC0\\xAF \\xED\\xA0\\x80");
}

Test(printable, a_long_text_is_cut_with_an_ellipsis_never_mid_character)
{
    char out[12];
    lacs_printable("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", out, sizeof out);
    cr_expect_str_eq(out, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9...");
    lacs_printable("\x1b\x1b\x1b", out, sizeof out);
    cr_expect_str_eq(out, "\\x1B\\x1B...");
}

/* ---- files written safely ---- */

Test(output_file, writes_whole_files_and_refuses_links_fifos_and_existing_files, .init = make_scratch,
     .fini = remove_scratch)
{
    const char *path = in_scratch("report.json");
    cr_assert_eq(lacs_output_file_write(path, "one", 3, NULL, 0), LACS_OK, "%s", lacs_last_error());
    cr_expect_str_eq(read_text(path), "one");
    cr_expect_eq(lacs_output_file_write(path, "two", 3, NULL, 0), LACS_ERR_IO);
    cr_expect(strstr(lacs_last_error(), "exists") != NULL, "%s", lacs_last_error());
    cr_assert_eq(lacs_output_file_write(path, "two", 3, NULL, LACS_OUTPUT_REPLACE), LACS_OK, "%s", lacs_last_error());
    cr_expect_str_eq(read_text(path), "two");
    cr_expect_eq(entries_in(scratch), 1, "a temporary file was left behind");

    const char *target = in_scratch("precious"), *link = in_scratch("link.json");
    write_text(target, "mine");
    cr_assert_eq(symlink(target, link), 0);
    cr_expect_eq(lacs_output_file_write(link, "x", 1, NULL, LACS_OUTPUT_REPLACE), LACS_ERR_IO);
    cr_expect(strstr(lacs_last_error(), "symbolic link") != NULL, "%s", lacs_last_error());
    cr_expect_str_eq(read_text(target), "mine");

    const char *fifo = in_scratch("fifo.json");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(lacs_output_file_check(fifo, NULL, LACS_OUTPUT_REPLACE), LACS_ERR_IO);
    cr_expect(strstr(lacs_last_error(), "a FIFO, not a regular file") != NULL, "%s", lacs_last_error());
    struct stat st;
    cr_assert_eq(lstat(fifo, &st), 0);
    cr_expect(S_ISFIFO(st.st_mode));
    cr_expect_eq(lacs_output_file_check(in_scratch("no/such/dir/r.json"), NULL, 0), LACS_ERR_IO);
}

Test(output_file, never_under_golden_vectors, .init = make_scratch, .fini = remove_scratch)
{
    const char *set = in_scratch("set");
    cr_assert_eq(mkdir(set, 0700), 0);
    char sub[600], manifest[600], report[700];
    snprintf(sub, sizeof sub, "%s/delta_rule", set);
    cr_assert_eq(mkdir(sub, 0700), 0);
    snprintf(report, sizeof report, "%s/report.json", sub);
    /* the vectors directory given to --vectors */
    cr_expect_eq(lacs_output_file_check(report, set, LACS_OUTPUT_REPLACE | LACS_OUTPUT_NOT_GOLDEN), LACS_ERR_IO);
    cr_expect(strstr(lacs_last_error(), "golden") != NULL, "%s", lacs_last_error());
    cr_expect_eq(lacs_output_file_check(report, NULL, LACS_OUTPUT_REPLACE | LACS_OUTPUT_NOT_GOLDEN), LACS_OK);
    /* any directory above that holds a lacs manifest; another file called MANIFEST.json does not count */
    snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", set);
    write_text(manifest, "{\"something\": \"else\"}");
    cr_expect_eq(lacs_output_file_check(report, NULL, LACS_OUTPUT_NOT_GOLDEN), LACS_OK, "%s", lacs_last_error());
    write_text(manifest, "{\"format\": \"lacs-manifest/1\", \"cases\": []}");
    cr_expect_eq(lacs_output_file_write(report, "x", 1, NULL, LACS_OUTPUT_NOT_GOLDEN), LACS_ERR_IO);
    cr_expect(strstr(lacs_last_error(), "MANIFEST.json") != NULL, "%s", lacs_last_error());
    cr_expect_eq(entries_in(sub), 0);
}

/* ---- running an implementation: guards, read-only inputs, the state carry ---- */

static int stray_writes; /* 1: one float past the end of o; -1: one before its start */
static char fault_past_end[256], fault_on_input[256];

static int reference_then_stray(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                                const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    const int rc = lacs_impl_reference(context, op, inputs, n_inputs, params, n_params, outputs, n_outputs);
    float *o = outputs[0].data;
    const int64_t n = lacs_tensor_count(&outputs[0]);
    /* what a fault handler would say for these addresses */
    lacs_check_describe_fault(o + n, fault_past_end, sizeof fault_past_end);
    lacs_check_describe_fault(inputs[0].data, fault_on_input, sizeof fault_on_input);
    if (stray_writes > 0)
        o[n] = 1.0f;
    if (stray_writes < 0)
        o[-1] = 1.0f;
    return rc;
}

Test(guards, a_write_past_or_before_an_output_fails_with_the_reason)
{
    static lacs_vector v;
    cr_assert_eq(lacs_vector_load(VECTOR("linear_attn", "linear_attn-fp32-t63"), &v), LACS_OK, "%s",
                 lacs_last_error());
    lacs_check_result r;
    stray_writes = 0;
    cr_expect_eq(lacs_check_implementation(&v, reference_then_stray, NULL, &r, NULL), LACS_OK, "%s",
                 lacs_last_error());
    cr_expect(r.ratio <= 1);
    cr_expect(strstr(fault_on_input, "which is read-only") != NULL, "%s", fault_on_input);
    cr_expect(strstr(fault_past_end, "past the end of output 'o'") != NULL, "%s", fault_past_end);
    stray_writes = 1;
    cr_expect_neq(lacs_check_implementation(&v, reference_then_stray, NULL, &r, NULL), LACS_OK);
    cr_expect(strstr(lacs_last_error(), "wrote past the end of output 'o'") != NULL, "%s", lacs_last_error());
    stray_writes = -1;
    cr_expect_neq(lacs_check_implementation(&v, reference_then_stray, NULL, &r, NULL), LACS_OK);
    cr_expect(strstr(lacs_last_error(), "wrote before the start of output 'o'") != NULL, "%s", lacs_last_error());
    lacs_vector_free(&v);
}

/* A correct kernel that keeps its state where h0 lies: after the call h0 holds the final state. */
static int reference_updating_h0(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                                 const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    const int rc = lacs_impl_reference(context, op, inputs, n_inputs, params, n_params, outputs, n_outputs);
    for (int i = 0; i < n_inputs; i++)
        if (strcmp(inputs[i].name, "h0") == 0)
            for (int j = 0; j < n_outputs; j++)
                if (strcmp(outputs[j].name, "ht") == 0 && inputs[i].dtype == LACS_F32)
                    memcpy(inputs[i].data, outputs[j].data, (size_t)lacs_tensor_count(&outputs[j]) * sizeof(float));
    return rc;
}

Test(guards, a_kernel_updating_h0_in_place_passes_the_state_carry)
{
    static lacs_vector v;
    cr_assert_eq(lacs_vector_load(VECTOR("linear_attn", "linear_attn-fp32-carry37"), &v), LACS_OK, "%s",
                 lacs_last_error());
    lacs_check_result r;
    cr_expect_eq(lacs_check_implementation(&v, reference_updating_h0, NULL, &r, NULL), LACS_OK, "%s",
                 lacs_last_error());
    cr_expect(r.ratio <= 1, "ratio %g: h0 and the checked ht_split share a buffer", r.ratio);
    lacs_vector_free(&v);
}

/* ---- vectors refused ---- */

Test(vectors, a_wrong_hash_is_refused_before_parsing)
{
    static lacs_vector v;
    const char *wrong = "0000000000000000000000000000000000000000000000000000000000000000";
    cr_expect_eq(lacs_vector_load_verified(VECTOR("dyt", "dyt-fp32-basic"), wrong, &v), LACS_ERR_FORMAT);
    cr_expect(strstr(lacs_last_error(), "dyt-fp32-basic.safetensors: hash: ") != NULL, "%s", lacs_last_error());
    lacs_vector_free(&v);
    cr_expect_eq(lacs_vector_load(VECTOR("dyt", "dyt-fp32-basic"), &v), LACS_OK);
    char right[65];
    snprintf(right, sizeof right, "%s", lacs_vector_text(&v, "sha256"));
    lacs_vector_free(&v);
    cr_expect_eq(lacs_vector_load_verified(VECTOR("dyt", "dyt-fp32-basic"), right, &v), LACS_OK);
    lacs_vector_free(&v);
}

Test(vectors, a_fifo_is_not_read, .init = make_scratch, .fini = remove_scratch)
{
    static lacs_vector v;
    const char *fifo = in_scratch("x.safetensors");
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    cr_expect_eq(lacs_vector_load(fifo, &v), LACS_ERR_IO); /* returns at once: no writer is waited for */
    cr_expect(strstr(lacs_last_error(), "a FIFO, not a regular file") != NULL, "%s", lacs_last_error());
    lacs_vector_free(&v);
}

/* ---- the cases of a directory ---- */

Test(cases, missing_and_unlisted_files_are_cases, .init = make_scratch, .fini = remove_scratch)
{
    static lacs_vector v;
    cr_assert_eq(lacs_vector_load(VECTOR("dyt", "dyt-fp32-basic"), &v), LACS_OK);
    char manifest[1024];
    snprintf(manifest, sizeof manifest,
             "{\"format\": \"lacs-manifest/1\", \"cases\": ["
             "{\"id\": \"dyt-fp32-basic\", \"op\": \"dyt\", \"tier\": \"fp32\", \"path\": \"dyt/dyt-fp32-basic.safetensors\", "
             "\"sha256\": \"%s\"},"
             "{\"id\": \"dyt-fp32-gone\", \"op\": \"dyt\", \"tier\": \"fp32\", \"path\": \"dyt/dyt-fp32-gone.safetensors\", "
             "\"sha256\": \"%s\"}]}",
             lacs_vector_text(&v, "sha256"), lacs_vector_text(&v, "sha256"));
    lacs_vector_free(&v);
    write_text(in_scratch("MANIFEST.json"), manifest);
    cr_assert_eq(mkdir(in_scratch("dyt"), 0700), 0);
    char command[1200];
    snprintf(command, sizeof command, "cp %s %s/dyt/ && cp %s %s/dyt/dyt-fp32-extra.safetensors",
             VECTOR("dyt", "dyt-fp32-basic"), scratch, VECTOR("dyt", "dyt-fp32-specials"), scratch);
    cr_assert_eq(system(command), 0);
    lacs_case_list list;
    cr_assert_eq(lacs_cases_find(scratch, NULL, 0, NULL, LACS_CASES_VERIFY | LACS_CASES_READ, &list), LACS_OK, "%s", lacs_last_error());
    cr_assert_eq(list.n, 3);
    cr_expect_str_eq(list.cases[0].id, "dyt-fp32-basic");
    cr_expect_eq(list.cases[0].state, LACS_CASE_OK);
    cr_expect_str_eq(list.cases[1].id, "dyt-fp32-extra");
    cr_expect_eq(list.cases[1].state, LACS_CASE_UNLISTED);
    cr_expect_str_eq(list.cases[2].id, "dyt-fp32-gone");
    cr_expect_eq(list.cases[2].state, LACS_CASE_MISSING);
    cr_expect(strstr(list.cases[2].reason, "missing") != NULL, "%s", list.cases[2].reason);
    lacs_cases_free(&list);
    /* unverified: the files as they are, no manifest read */
    cr_assert_eq(lacs_cases_find(scratch, NULL, 0, NULL, 0, &list), LACS_OK);
    cr_expect_eq(list.n, 2);
    lacs_cases_free(&list);
    unlink(in_scratch("MANIFEST.json"));
    cr_expect_eq(lacs_cases_find(scratch, NULL, 0, NULL, LACS_CASES_VERIFY, &list), LACS_ERR_IO);
    cr_expect(strstr(lacs_last_error(), "no MANIFEST.json covers") != NULL, "%s", lacs_last_error());
}

/* ---- the verdict ---- */

static char *citation_of(lacs_verdict *v)
{
    static char text[1024];
    char *c = lacs_verdict_citation(v);
    snprintf(text, sizeof text, "%s", c ? c : "");
    free(c);
    return text;
}

Test(verdict, every_case_passed_conforms)
{
    lacs_verdict *v = lacs_verdict_new(0);
    lacs_verdict_add(v, "delta_rule", "fp32", "a", "Basic", 0, LACS_OUTCOME_PASS);
    lacs_verdict_add(v, "delta_rule", "bf16", "b", "Basic", 0, LACS_OUTCOME_PASS);
    lacs_verdict_add(v, "dyt", "fp32", "c", "Basic", 0, LACS_OUTCOME_PASS);
    cr_expect_str_eq(citation_of(v), "conforms to lacs spec " LACS_SPEC_VERSION " for ops delta_rule in tiers fp32, "
                                     "bf16 and ops dyt in tiers fp32");
    cr_expect_eq(lacs_verdict_exit_status(v), 0);
    lacs_verdict_free(v);
}

Test(verdict, undeclared_skips_are_partial_and_fail_the_run)
{
    lacs_verdict *v = lacs_verdict_new(0);
    lacs_verdict_add(v, "delta_rule", "fp32", "a", "ChunkBoundary", 0, LACS_OUTCOME_PASS);
    lacs_verdict_add(v, "delta_rule", "fp32", "b", "Varlen ChunkBoundary", 0, LACS_OUTCOME_SKIP);
    cr_expect_str_eq(citation_of(v), "does not conform to lacs spec " LACS_SPEC_VERSION ": delta_rule is partial in "
                                     "fp32 (undeclared skips: Varlen)");
    cr_expect_eq(lacs_verdict_exit_status(v), 1);
    lacs_verdict_free(v);
}

Test(verdict, declared_limits_are_named_and_pass)
{
    lacs_verdict *v = lacs_verdict_new(0);
    lacs_verdict_declare(v, "k", "delta_rule", "fp32", "Varlen");
    char why[256];
    cr_expect(lacs_verdict_excludes(v, "delta_rule", "fp32", "Varlen ChunkBoundary", why, sizeof why));
    cr_expect_str_eq(why, "declared unsupported by the implementation: Varlen");
    cr_expect(lacs_verdict_excludes(v, "delta_rule", "bf16", "Basic", why, sizeof why));
    cr_expect(lacs_verdict_excludes(v, "dyt", "fp32", "Basic", why, sizeof why));
    cr_expect(!lacs_verdict_excludes(v, "delta_rule", "fp32", "Basic", why, sizeof why));
    lacs_verdict_add(v, "delta_rule", "fp32", "a", "Basic", 0, LACS_OUTCOME_PASS);
    lacs_verdict_add(v, "delta_rule", "fp32", "b", "Varlen ChunkBoundary", 0, LACS_OUTCOME_EXCLUDED);
    lacs_verdict_add(v, "delta_rule", "bf16", "c", "Basic", 0, LACS_OUTCOME_EXCLUDED);
    cr_expect_str_eq(citation_of(v), "conforms to lacs spec " LACS_SPEC_VERSION " for ops delta_rule in tiers fp32, "
                                     "except the declared Varlen");
    cr_expect_eq(lacs_verdict_exit_status(v), 0);
    char *table = lacs_verdict_table(v);
    cr_expect(strstr(table, "bf16  not claimed") != NULL, "%s", table);
    free(table);
    lacs_verdict_free(v);
}

Test(verdict, failures_strict_cases_and_rejected_vectors)
{
    lacs_verdict *v = lacs_verdict_new(0), *strict = lacs_verdict_new(1);
    for (int level = 0; level < 2; level++) {
        lacs_verdict *w = level ? strict : v;
        lacs_verdict_add(w, "dyt", "fp32", "a", "Basic", 0, LACS_OUTCOME_PASS);
        lacs_verdict_add(w, "dyt", "fp32", "s", "AllBF16", 1, LACS_OUTCOME_FAIL);
    }
    cr_expect_eq(lacs_verdict_exit_status(v), 0); /* a strict failure is listed, not counted */
    char *table = lacs_verdict_table(v);
    cr_expect(strstr(table, "strict failures (not counted at the required level; --strict counts them): s") != NULL,
              "%s", table);
    free(table);
    cr_expect_eq(lacs_verdict_exit_status(strict), 1);
    cr_expect(strstr(citation_of(strict), "does not conform") == citation_of(strict));
    lacs_verdict_add(v, "dyt", "bf16", "m", "", 0, LACS_OUTCOME_INVALID);
    cr_expect_eq(lacs_verdict_exit_status(v), 2);
    cr_expect(strncmp(citation_of(v), "no verdict", 10) == 0, "%s", citation_of(v));
    lacs_verdict_free(v);
    lacs_verdict_free(strict);
}
