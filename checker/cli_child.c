/* lacs CLI: one run of an implementation, in a child process.
 *
 * An implementation under test may crash, hang or scribble over memory; the
 * checker must survive all three and go on with the next case. So the parent
 * loads the case, maps room for the outputs in shared anonymous memory (F32,
 * the goldens' names and shapes) and forks; the child runs the case with
 * lacs_check_implementation (which hands the implementation zero-filled
 * outputs, as the plugin ABI promises, and knows the state-carry protocol),
 * copies the outputs and the return value into the shared mapping and
 * _exit()s. The parent polls so that several children can run at once
 * (--jobs), kills one that runs past its timeout, and compares the outputs
 * itself. What the parent reads back is only the shared mapping: nothing the
 * child did to its own copy of the address space matters.
 *
 * Each child leads a process group of its own. When it ends, or runs past
 * its timeout, the whole group is killed: a process the implementation forked
 * cannot outlive its case (nor keep the checker's output pipes open). The
 * parent's SIGTERM, SIGINT and SIGHUP kill every running group first, then
 * end the parent by the same signal. In the child, a fault on a guard page or
 * a read-only input (lacs_check_implementation's buffers) is named before the
 * child dies of it.
 */
/* MAP_ANONYMOUS is POSIX only since 2024, sigaltstack's stack_t an XSI extension;
 * glibc declares both under _DEFAULT_SOURCE. */
#define _DEFAULT_SOURCE 1

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "lacs/ops.h"

/* The start of the shared mapping: what the child tells the parent. */
typedef struct {
    int finished_call; /* 1 once the implementation has returned */
    int rc;            /* its return value */
    char message[640]; /* why the run failed, if it did */
} child_status;

enum { SHARED_ALIGNMENT = 64 };

/* SIGCHLD is blocked from the first child on, so that cli_child_pause can
 * wait for it with sigtimedwait: a child that ends between two polls leaves
 * the signal pending instead of being missed. Children get the mask back. */
static sigset_t child_signal;
static sigset_t mask_before_children;
static int child_signal_blocked;

static void block_child_signal(void)
{
    if (child_signal_blocked)
        return;
    sigemptyset(&child_signal);
    sigaddset(&child_signal, SIGCHLD);
    if (sigprocmask(SIG_BLOCK, &child_signal, &mask_before_children) == 0)
        child_signal_blocked = 1;
}

/* The process groups of the running children, for the signal handlers. */
enum { MAX_RUNNING = 512 };
static volatile sig_atomic_t running_groups[MAX_RUNNING];
static int terminate_handlers_installed;

static void track_group(pid_t pid, int on)
{
    for (int i = 0; i < MAX_RUNNING; i++)
        if (on ? running_groups[i] == 0 : running_groups[i] == pid) {
            running_groups[i] = on ? pid : 0;
            return;
        }
}

/* SIGTERM, SIGINT, SIGHUP: end every case's process group, then this process by the same signal. */
static void on_terminate(int sig)
{
    for (int i = 0; i < MAX_RUNNING; i++)
        if (running_groups[i] > 0)
            kill(-(pid_t)running_groups[i], SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_terminate_handlers(void)
{
    if (terminate_handlers_installed)
        return;
    terminate_handlers_installed = 1;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_terminate;
    sigemptyset(&action.sa_mask);
    const int signals[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction before;
        /* a signal ignored when lacs started (nohup) stays ignored */
        if (sigaction(signals[i], NULL, &before) == 0 && before.sa_handler == SIG_IGN)
            continue;
        sigaction(signals[i], &action, NULL);
    }
}

void cli_child_unblock(void)
{
    if (child_signal_blocked)
        sigprocmask(SIG_SETMASK, &mask_before_children, NULL);
    child_signal_blocked = 0;
}

void cli_child_pause(double seconds)
{
    struct timespec pause = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    if (child_signal_blocked)
        sigtimedwait(&child_signal, NULL, &pause); /* returns early when a child ends */
    else
        nanosleep(&pause, NULL);
}

static size_t round_up(size_t n) { return (n + SHARED_ALIGNMENT - 1) / SHARED_ALIGNMENT * SHARED_ALIGNMENT; }

static void broke(cli_child *c, const char *fmt, const char *detail)
{
    c->finished = 1;
    c->outcome = CLI_BROKE;
    snprintf(c->message, sizeof c->message, fmt, detail);
}

/* "SIGSEGV": the names POSIX defines, for the signals a kernel can die of. */
static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGPIPE: return "SIGPIPE";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    default: return "signal";
    }
}

/* In the child: a fault (SIGSEGV, SIGBUS) is named when it hits a buffer
 * lacs_check_implementation handed out, then the child dies of it as it
 * would have. */
static child_status *fault_status;

static void on_fault(int sig, siginfo_t *info, void *context)
{
    (void)context;
    if (fault_status && info)
        lacs_check_describe_fault(info->si_addr, fault_status->message, sizeof fault_status->message);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_fault_handler(child_status *status)
{
    static char alternate_stack[1 << 16]; /* a stack overflow faults too */
    stack_t stack = {.ss_sp = alternate_stack, .ss_size = sizeof alternate_stack, .ss_flags = 0};
    sigaltstack(&stack, NULL);
    fault_status = status;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, NULL);
    sigaction(SIGBUS, &action, NULL);
}

/* In the child, the plugin as an lacs_impl_fn; its raw return value and
 * reason are kept so that a FAIL can say "plugin returned N: why". */
static int plugin_return_value;
static char plugin_reason[400];

static int call_plugin(void *context, const char *op, const lacs_tensor *inputs, int n_inputs,
                       const lacs_param *params, int n_params, lacs_tensor *outputs, int n_outputs)
{
    const cli_impl *impl = context;
    plugin_return_value = impl->run(op, inputs, n_inputs, params, n_params, outputs, n_outputs);
    plugin_reason[0] = '\0';
    if (plugin_return_value != 0) {
        const char *why = cli_impl_last_error(impl);
        if (why)
            snprintf(plugin_reason, sizeof plugin_reason, "%s", why);
    }
    return plugin_return_value;
}

/* In the child, a golden vector's case: lacs_check_implementation, the one
 * way to run an implementation on a case (guards, read-only inputs, the
 * state-carry protocol). Its outputs are copied into the shared ones; its
 * comparison is not kept: the parent compares again with its own copy of the
 * goldens, which nothing the implementation did can have touched. */
static int run_case_in_child(const cli_task *task, lacs_tensor *outputs, int n_outputs, child_status *status)
{
    const lacs_vector *v = task->vector;
    lacs_check_result unused;
    lacs_tensor computed[LACS_CHECK_MAX_OUTPUTS];
    lacs_impl_fn fn = task->impl->kind == CLI_IMPL_REFERENCE ? lacs_impl_reference : call_plugin;
    int rc = lacs_check_implementation(v, fn, (void *)task->impl, &unused, computed);
    const char *why = lacs_last_error();
    if (rc == LACS_UNSUPPORTED) {
        if (plugin_reason[0]) /* the implementation says why */
            snprintf(status->message, sizeof status->message, "%s", plugin_reason);
        return rc;
    }
    if (rc != LACS_OK && strstr(why, "the implementation wrote"))
        snprintf(status->message, sizeof status->message, "%s", why);
    else if (rc != LACS_OK && task->impl->kind == CLI_IMPL_PLUGIN && plugin_return_value != 0)
        snprintf(status->message, sizeof status->message, "plugin returned %d%s%s", plugin_return_value,
                 plugin_reason[0] ? ": " : "", plugin_reason);
    else if (rc != LACS_OK && plugin_reason[0])
        snprintf(status->message, sizeof status->message, "%s", plugin_reason);
    else if (rc != LACS_OK)
        snprintf(status->message, sizeof status->message, "%s", why);
    for (int i = 0; i < v->n_outputs; i++) {
        for (int j = 0; j < n_outputs; j++)
            if (strcmp(outputs[j].name, computed[i].name) == 0 && computed[i].dtype == LACS_F32 && computed[i].data)
                memcpy(outputs[j].data, computed[i].data, (size_t)lacs_tensor_count(&outputs[j]) * sizeof(float));
    }
    lacs_outputs_free(v, computed);
    return rc;
}

int cli_child_start(cli_child *c, const cli_task *task, double timeout_seconds)
{
    memset(c, 0, sizeof *c);
    c->pid = -1;
    c->timeout = timeout_seconds;
    c->started = cli_now();
    c->is_reference = task->impl->kind == CLI_IMPL_REFERENCE;
    if (task->n_outputs > LACS_CHECK_MAX_OUTPUTS) {
        broke(c, "%s", "too many outputs");
        return -1;
    }

    /* The layout of the mapping: the status block, then each output, each 64-byte aligned. */
    size_t offsets[LACS_CHECK_MAX_OUTPUTS];
    size_t size = round_up(sizeof(child_status));
    for (int i = 0; i < task->n_outputs; i++) {
        const lacs_tensor *spec = &task->outputs[i];
        if (spec->ndim < 0 || spec->ndim > LACS_SAFETENSORS_MAX_DIMS) {
            broke(c, "output '%s' has an unsupported number of dimensions", spec->name);
            return -1;
        }
        offsets[i] = size;
        size += round_up((size_t)lacs_tensor_count(spec) * sizeof(float));
    }
    void *shared = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        broke(c, "cannot map the outputs: %s", strerror(errno));
        return -1;
    }
    c->shared = shared;
    c->shared_size = size;
    c->n_outputs = task->n_outputs;
    for (int i = 0; i < task->n_outputs; i++) {
        const lacs_tensor *spec = &task->outputs[i];
        for (int d = 0; d < spec->ndim; d++)
            c->shapes[i][d] = spec->shape[d];
        c->outputs[i] = (lacs_tensor){.name = spec->name, .dtype = LACS_F32, .ndim = spec->ndim,
                                      .shape = c->shapes[i], .data = c->shared + offsets[i]};
    }

    block_child_signal();
    install_terminate_handlers();
    /* Nothing buffered may be written twice, once by each process. */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        munmap(c->shared, c->shared_size);
        c->shared = NULL;
        broke(c, "cannot fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* The child, leading a process group of its own. Whatever the
         * implementation prints goes to stderr: stdout is the checker's
         * report, one line per case. */
        setpgid(0, 0);
        dup2(STDERR_FILENO, STDOUT_FILENO);
        const int terminate[] = {SIGTERM, SIGINT, SIGHUP};
        for (size_t i = 0; i < sizeof terminate / sizeof terminate[0]; i++)
            signal(terminate[i], SIG_DFL);
        sigprocmask(SIG_SETMASK, &mask_before_children, NULL);
        child_status *status = (child_status *)c->shared;
        install_fault_handler(status);
        int rc;
        char why[512];
        if (cli_impl_load_in_child(task->impl, why, sizeof why) != 0) {
            snprintf(status->message, sizeof status->message, "%s", why);
            rc = -1;
        } else if (task->vector) {
            rc = run_case_in_child(task, c->outputs, c->n_outputs, status);
        } else if (task->impl->kind != CLI_IMPL_REFERENCE) {
            rc = call_plugin(task->impl, task->op, task->inputs, task->n_inputs, task->params, task->n_params,
                             c->outputs, c->n_outputs);
            if (rc == LACS_UNSUPPORTED && plugin_reason[0])
                snprintf(status->message, sizeof status->message, "%s", plugin_reason);
            else if (rc != 0 && rc != LACS_UNSUPPORTED && task->impl->kind == CLI_IMPL_PLUGIN)
                snprintf(status->message, sizeof status->message, "plugin returned %d%s%s", rc,
                         plugin_reason[0] ? ": " : "", plugin_reason);
            else if (rc != 0 && rc != LACS_UNSUPPORTED)
                snprintf(status->message, sizeof status->message, "%s",
                         plugin_reason[0] ? plugin_reason : lacs_last_error());
        } else {
            rc = lacs_impl_reference(NULL, task->op, task->inputs, task->n_inputs, task->params, task->n_params,
                                     c->outputs, c->n_outputs);
            if (rc != 0)
                snprintf(status->message, sizeof status->message, "%s", lacs_last_error());
        }
        status->rc = rc;
        status->finished_call = 1;
        _exit(0);
    }
    setpgid(pid, pid); /* as the child does: whichever runs first */
    track_group(pid, 1);
    c->pid = pid;
    return 0;
}

/* Reads how the child ended. */
static void interpret_exit(cli_child *c, int wait_status, int is_reference)
{
    const child_status *status = (const child_status *)c->shared;
    char text[64];
    c->finished = 1;
    c->pid = -1;
    if (WIFSIGNALED(wait_status)) {
        int sig = WTERMSIG(wait_status);
        const char *description = strsignal(sig);
        c->outcome = CLI_BROKE;
        snprintf(c->message, sizeof c->message, "crashed: %s (%s)%s%.600s", signal_name(sig),
                 description ? description : "unknown signal", status->message[0] ? ": " : "", status->message);
        return;
    }
    int code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : -1;
    if (code != 0 || !status->finished_call) {
        snprintf(text, sizeof text, "%d", code);
        broke(c, "exited with status %s before the implementation returned (it called exit?)", text);
        return;
    }
    if (status->rc == 0) {
        c->outcome = CLI_RAN;
    } else if (status->rc == LACS_UNSUPPORTED && !is_reference) {
        c->outcome = CLI_UNSUPPORTED;
        /* as the Python harness words it: "unsupported by the implementation (why)" */
        snprintf(c->message, sizeof c->message, "unsupported by the implementation%s%.600s%s",
                 status->message[0] ? " (" : "", status->message, status->message[0] ? ")" : "");
    } else {
        broke(c, is_reference ? "the reference failed: %s" : "%s", status->message);
    }
}

/* Kills what is left of the child's process group and reaps the child. */
static void end_group(cli_child *c, int *wait_status)
{
    kill(-c->pid, SIGKILL);
    while (waitpid(c->pid, wait_status, 0) < 0 && errno == EINTR)
        ;
    track_group(c->pid, 0);
    c->pid = -1;
}

int cli_child_poll(cli_child *c)
{
    if (c->finished)
        return 1;
    int wait_status;
    /* Has it ended? Asked without reaping it, so that its process group
     * (and its id) stays ours until the group is killed. */
    siginfo_t info;
    memset(&info, 0, sizeof info);
    const int got = waitid(P_PID, (id_t)c->pid, &info, WEXITED | WNOHANG | WNOWAIT);
    if (got == 0 && info.si_pid == c->pid) {
        c->seconds = cli_now() - c->started;
        end_group(c, &wait_status);
        interpret_exit(c, wait_status, c->is_reference);
        return 1;
    }
    if (got < 0 && errno != EINTR) {
        c->seconds = cli_now() - c->started;
        track_group(c->pid, 0);
        c->pid = -1;
        broke(c, "lost the child process: %s", strerror(errno));
        return 1;
    }
    double elapsed = cli_now() - c->started;
    if (c->timeout > 0 && elapsed > c->timeout) {
        end_group(c, &wait_status);
        c->seconds = elapsed;
        char text[32];
        snprintf(text, sizeof text, "%g", c->timeout);
        broke(c, "timed out after %ss", text);
        return 1;
    }
    return 0;
}

void cli_child_wait(cli_child *c)
{
    while (!cli_child_poll(c))
        cli_child_pause(0.05); /* woken early by SIGCHLD; 50 ms bounds how late a timeout is seen */
}

void cli_child_free(cli_child *c)
{
    if (c->pid > 0) {
        int wait_status;
        end_group(c, &wait_status);
    }
    if (c->shared)
        munmap(c->shared, c->shared_size);
    c->shared = NULL;
}
