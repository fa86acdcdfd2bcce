/* The hostile suite's plugin (tests/hostile/): linear attention computed
 * correctly (tests/plugins/linear_attn_fp32.h), then spoiled in the ways a
 * careless or hostile kernel is, chosen by the environment (the checker's
 * case processes inherit it):
 *
 *   LACS_HOSTILE_MODE   comma-separated, any of
 *     add1000         o += 1000 everywhere
 *     scale1pct       o *= 1.01
 *     zeros           leave every output as handed over (zero-filled)
 *     huge            o = +-1e30
 *     wrong_ht        ht += 1
 *     overflow1       write 1 float past the end of every output
 *     overflow2       write 2 floats past the end of every output
 *     underflow       write 1 float before the start of every output
 *     write_input     write into the first element of q
 *     inplace_h0      update the initial state in place: after the run h0 holds the final state (as
 *                     inference kernels do); a correct kernel
 *     skip_varlen_h0  LACS_UNSUPPORTED when cu_seqlens or h0 is given (a kernel broken on them that hides it)
 *     bf16_only       LACS_UNSUPPORTED on binary32 inputs
 *     reason_skip     LACS_UNSUPPORTED with the reason "needs K <= 8" (ABI 1.1 lacs_plugin_last_error)
 *     reason_error    return 5 with the reason "workspace allocation failed"
 *     fork_grandchild fork a process that sleeps 60 s holding the checker's stdout and stderr, then compute
 *     hang            write this process's id to $LACS_HOSTILE_PIDS/case-<pid>, then wait forever
 *     print           print a fake result line on stdout, then compute
 *   LACS_HOSTILE_ONLY_T    spoil (add1000, scale1pct, zeros, huge, wrong_ht) only the cases with this T
 *   LACS_HOSTILE_DESCRIBE  "OPS;TIERS;UNSUPPORTED" (ABI 1.1 lacs_plugin_describe; an empty field is NULL);
 *                          unset: lacs_plugin_describe returns NULL (nothing declared)
 *
 * delta_rule is answered with zero outputs (wrong), every other op but linear_attn is LACS_UNSUPPORTED.
 */
#define _DEFAULT_SOURCE 1
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

static _Thread_local const char *last_reason;

static int mode(const char *name)
{
    const char *modes = getenv("LACS_HOSTILE_MODE");
    if (!modes)
        return 0;
    size_t n = strlen(name);
    for (const char *p = modes; (p = strstr(p, name)) != NULL; p += n)
        if ((p == modes || p[-1] == ',') && (p[n] == '\0' || p[n] == ','))
            return 1;
    return 0;
}

static lacs_tensor *find_output(lacs_tensor *outputs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(outputs[i].name, name) == 0)
            return &outputs[i];
    return NULL;
}

static int64_t count(const lacs_tensor *t)
{
    int64_t c = 1;
    for (int d = 0; d < t->ndim; d++)
        c *= t->shape[d];
    return c;
}

static void write_pid(const char *what)
{
    const char *dir = getenv("LACS_HOSTILE_PIDS");
    if (!dir)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s-%ld", dir, what, (long)getpid());
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    last_reason = NULL;
    if (strcmp(op, "delta_rule") == 0)
        return 0;
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    const lacs_tensor *q = find_tensor(inputs, n_inputs, "q");
    if (mode("skip_varlen_h0") && (find_tensor(inputs, n_inputs, "cu_seqlens") || find_tensor(inputs, n_inputs, "h0")))
        return LACS_UNSUPPORTED;
    if (mode("bf16_only") && q && q->dtype == LACS_F32)
        return LACS_UNSUPPORTED;
    if (mode("reason_skip")) {
        last_reason = "needs K <= 8";
        return LACS_UNSUPPORTED;
    }
    if (mode("reason_error")) {
        last_reason = "workspace allocation failed";
        return 5;
    }
    if (mode("hang")) {
        write_pid("case");
        for (;;)
            pause();
    }
    if (mode("fork_grandchild")) {
        pid_t pid = fork();
        if (pid == 0) {
            write_pid("grandchild");
            sleep(60);
            _exit(0);
        }
    }
    if (mode("print")) {
        printf("PASS  0         linear_attn-fp32-forged\n");
        fflush(stdout);
    }
    if (mode("write_input") && q && count(q) > 0)
        ((unsigned char *)q->data)[0] ^= 1;
    const char *only_t = getenv("LACS_HOSTILE_ONLY_T");
    const int spoil = !only_t || (q && q->ndim == 4 && q->shape[1] == atol(only_t));
    int rc = 0;
    if (!(spoil && mode("zeros")))
        rc = linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 0);
    if (rc != 0)
        return rc;
    lacs_tensor *o = find_output(outputs, n_outputs, "o"), *ht = find_output(outputs, n_outputs, "ht");
    float *ov = o ? o->data : NULL;
    const int64_t no = o ? count(o) : 0;
    for (int64_t i = 0; i < no && spoil; i++) {
        if (mode("add1000"))
            ov[i] += 1000.0f;
        if (mode("scale1pct"))
            ov[i] *= 1.01f;
        if (mode("huge"))
            ov[i] = i % 2 ? 1e30f : -1e30f;
    }
    if (spoil && mode("wrong_ht") && ht)
        for (int64_t i = 0; i < count(ht); i++)
            ((float *)ht->data)[i] += 1.0f;
    const lacs_tensor *h0 = find_tensor(inputs, n_inputs, "h0");
    if (mode("inplace_h0") && h0 && ht && h0->dtype == LACS_F32 && count(h0) == count(ht))
        memcpy(h0->data, ht->data, (size_t)count(ht) * sizeof(float)); /* the state, updated where it lies */
    for (int i = 0; i < n_outputs; i++) {
        float *data = outputs[i].data;
        const int64_t n = count(&outputs[i]);
        if (mode("overflow1") || mode("overflow2"))
            data[n] = 1.0f;
        if (mode("overflow2"))
            data[n + 1] = 1.0f;
        if (mode("underflow"))
            data[-1] = 1.0f;
    }
    return 0;
}

/* ABI 1.1 */

const lacs_plugin_description *lacs_plugin_describe(void)
{
    static char text[1024];
    static lacs_plugin_description description;
    const char *spec = getenv("LACS_HOSTILE_DESCRIBE");
    if (!spec)
        return NULL;
    snprintf(text, sizeof text, "%s", spec);
    char *fields[3] = {text, NULL, NULL};
    for (int i = 1; i < 3; i++) {
        char *semicolon = fields[i - 1] ? strchr(fields[i - 1], ';') : NULL;
        if (semicolon) {
            *semicolon = '\0';
            fields[i] = semicolon + 1;
        }
    }
    description = (lacs_plugin_description){.abi_major = LACS_PLUGIN_ABI_MAJOR, .abi_minor = LACS_PLUGIN_ABI_MINOR,
                                            .name = "tests/hostile/plugins/hostile.c",
                                            .ops = fields[0] && *fields[0] ? fields[0] : NULL,
                                            .tiers = fields[1] && *fields[1] ? fields[1] : NULL,
                                            .unsupported = fields[2] && *fields[2] ? fields[2] : NULL};
    return &description;
}

const char *lacs_plugin_last_error(void) { return last_reason; }
