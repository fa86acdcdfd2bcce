/* lacs CLI: the implementation named by --impl.
 *
 *   builtin:reference             the double reference (lacs_vector_run_reference, lacs_reference_run)
 *   builtin:cpu                   the optimized CPU implementation (lacs_cpu_run, optimized/cpu/)
 *   builtin:cuda                  the CUDA implementation (lacs_cuda_run in liblacs_cuda.so, optimized/cuda/)
 *   python:FILE_OR_MODULE:FUNC    run by the Python harness, not by this program
 *   anything else                 a path to a shared library exporting lacs_plugin_run (ABI v1.1, lacs/plugin.h)
 *
 * A plugin is never loaded in this process: its constructors run whatever
 * they like (an exit(0) would end a run that then looks like a success). It
 * is loaded first in a probe process of its own, which also reads its
 * declaration (lacs_plugin_describe, ABI v1.1), and then in each case's
 * process (cli_child.c).
 *
 * builtin:cuda is a library of its own, build/liblacs_cuda.so (make cuda), so
 * that this program needs no CUDA runtime: it is loaded like a plugin, from
 * LACS_CUDA_LIBRARY if set, else from beside this program. The parent never
 * calls into it: a CUDA context does not survive fork(), so even the question
 * "is there a device?" is asked in a child of its own (cuda_probe).
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static const char plugin_symbol[] = "lacs_plugin_run";

/* ---- builtin:cuda ---- */

typedef int (*cuda_status_fn)(char *text, size_t text_size);

/* The library's path: LACS_CUDA_LIBRARY, else liblacs_cuda.so in this program's directory. */
static void cuda_library_path(char *path, size_t size)
{
    const char *forced = getenv("LACS_CUDA_LIBRARY");
    if (forced && *forced) {
        snprintf(path, size, "%s%s", strchr(forced, '/') ? "" : "./", forced);
        return;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        snprintf(path, size, "./build/liblacs_cuda.so");
        return;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        slash[1] = '\0';
    snprintf(path, size, "%sliblacs_cuda.so", self);
}

/* dlopens the library and finds its three entry points; 0, or -1 with why[]. */
static int cuda_load(void **library, cli_plugin_fn *run, const char *(**last_error)(void), cuda_status_fn *status,
                     char *why, size_t why_size)
{
    char path[4200];
    cuda_library_path(path, sizeof path);
    if (access(path, F_OK) != 0) {
        snprintf(why, why_size, "not built: %s does not exist (make cuda builds it with nvcc)", path);
        return -1;
    }
    *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*library) {
        snprintf(why, why_size, "cannot load %s: %s", path, dlerror());
        return -1;
    }
    void *r = dlsym(*library, "lacs_cuda_run"), *e = dlsym(*library, "lacs_cuda_last_error"),
         *s = dlsym(*library, "lacs_cuda_status");
    if (!r || !e || !s) {
        snprintf(why, why_size, "%s lacks lacs_cuda_run, lacs_cuda_last_error or lacs_cuda_status", path);
        dlclose(*library);
        *library = NULL;
        return -1;
    }
    /* POSIX guarantees that a function's dlsym address converts to a function pointer. */
    *run = (cli_plugin_fn)r;
    *last_error = (const char *(*)(void))e;
    *status = (cuda_status_fn)s;
    return 0;
}

/* Asks the library, in a child, for its status line; returns 1 when a device can run it. */
static int cuda_probe(cuda_status_fn status, char *text, size_t text_size)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(text, text_size, "cannot ask for the device: pipe: %s", strerror(errno));
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        snprintf(text, text_size, "cannot ask for the device: fork: %s", strerror(errno));
        return 0;
    }
    if (pid == 0) {
        close(fds[0]);
        char line[1024];
        const char ready = status(line, sizeof line) ? '1' : '0';
        if (write(fds[1], &ready, 1) == 1 && write(fds[1], line, strlen(line)) < 0)
            _exit(1);
        _exit(0);
    }
    close(fds[1]);
    char buffer[1100];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buffer - 1 && (n = read(fds[0], buffer + got, sizeof buffer - 1 - got)) > 0)
        got += (size_t)n;
    close(fds[0]);
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    buffer[got] = '\0';
    if (got == 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        snprintf(text, text_size, "the device query failed (%s)",
                 WIFSIGNALED(wstatus) ? strsignal(WTERMSIG(wstatus)) : "no answer");
        return 0;
    }
    snprintf(text, text_size, "%s", buffer + 1);
    return buffer[0] == '1';
}

int cli_cuda_status(char *text, size_t text_size)
{
    void *library;
    cli_plugin_fn run;
    const char *(*last_error)(void);
    cuda_status_fn status;
    if (cuda_load(&library, &run, &last_error, &status, text, text_size) != 0)
        return 0;
    const int ready = cuda_probe(status, text, text_size);
    dlclose(library);
    return ready;
}

static int open_cuda(cli_impl *impl)
{
    char why[1200];
    cuda_status_fn status;
    if (cuda_load(&impl->library, &impl->run, &impl->last_error, &status, why, sizeof why) != 0)
        return cli_error("builtin:cuda is unavailable: %s", why);
    if (!cuda_probe(status, why, sizeof why)) {
        cli_impl_close(impl);
        return cli_error("builtin:cuda cannot run here: %s", why);
    }
    impl->kind = CLI_IMPL_BUILTIN;
    return 0;
}

const char *cli_impl_last_error(const cli_impl *impl)
{
    const char *own = impl->last_error ? impl->last_error() : NULL;
    if (impl->kind == CLI_IMPL_PLUGIN)
        return own && *own ? own : NULL; /* a plugin's reason, never this process's stale lacs_last_error */
    return own && *own ? own : lacs_last_error();
}

/* ---- what an implementation declares ---- */

void cli_impl_declare(const cli_impl *impl, lacs_verdict *verdict)
{
    if (impl->declared)
        lacs_verdict_declare(verdict, impl->name[0] ? impl->name : NULL, impl->ops[0] ? impl->ops : NULL,
                             impl->tiers[0] ? impl->tiers : NULL, impl->unsupported[0] ? impl->unsupported : NULL);
}

/* ---- plugins: loaded in a process of their own ---- */

/* One line of the probe's answer: text with its line breaks made spaces. */
static void put_line(int fd, const char *text)
{
    char line[1100];
    snprintf(line, sizeof line - 1, "%s", text ? text : "");
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    strcat(line, "\n");
    const size_t n = strlen(line);
    if (write(fd, line, n) != (ssize_t)n)
        _exit(3);
}

/* In the probe process: load the plugin, find lacs_plugin_run, ask for its
 * declaration; write "ok" and five lines (whether it declares, name, ops,
 * tiers, unsupported), or "error" and why. */
static void probe_child(const char *path, int fd)
{
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        put_line(fd, "error");
        const char *why = dlerror();
        put_line(fd, why ? why : "dlopen failed");
        _exit(0);
    }
    dlerror();
    if (!dlsym(library, plugin_symbol)) {
        const char *why = dlerror();
        char text[1024];
        snprintf(text, sizeof text, "does not export %s (include/lacs/plugin.h): %s", plugin_symbol,
                 why ? why : "the symbol is NULL");
        put_line(fd, "error");
        put_line(fd, text);
        _exit(0);
    }
    const void *describe_symbol = dlsym(library, "lacs_plugin_describe");
    const lacs_plugin_description *d = NULL;
    if (describe_symbol) {
        const lacs_plugin_description *(*describe)(void);
        *(void **)&describe = (void *)describe_symbol;
        d = describe();
    }
    if (d && d->abi_major != LACS_PLUGIN_ABI_MAJOR) {
        char text[256];
        snprintf(text, sizeof text, "declares plugin ABI %d.%d; this checker reads ABI %d.x", d->abi_major,
                 d->abi_minor, LACS_PLUGIN_ABI_MAJOR);
        put_line(fd, "error");
        put_line(fd, text);
        _exit(0);
    }
    put_line(fd, "ok");
    put_line(fd, d ? "declared" : "-");
    put_line(fd, d ? d->name : "");
    put_line(fd, d ? d->ops : "");
    put_line(fd, d ? d->tiers : "");
    put_line(fd, d ? d->unsupported : "");
    _exit(0);
}

/* Loads the plugin in a child first: its constructors may exit, crash or hang,
 * and none of that may end or fool this process. */
static int probe_plugin(cli_impl *impl, double timeout)
{
    int fds[2];
    if (pipe(fds) != 0)
        return cli_error("cannot load plugin '%s': pipe: %s", impl->spec, strerror(errno));
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return cli_error("cannot load plugin '%s': fork: %s", impl->spec, strerror(errno));
    }
    if (pid == 0) {
        setpgid(0, 0);
        close(fds[0]);
        dup2(STDERR_FILENO, STDOUT_FILENO); /* what it prints stays off the report */
        probe_child(impl->path, fds[1]);
        _exit(0);
    }
    setpgid(pid, pid);
    close(fds[1]);
    char answer[8192];
    size_t got = 0;
    const double deadline = cli_now() + timeout;
    int timed_out = 0;
    for (;;) {
        const double left = deadline - cli_now();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        const int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            continue;
        const ssize_t n = read(fds[0], answer + got, sizeof answer - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || (got += (size_t)n) >= sizeof answer - 1)
            break;
        /* a whole answer: stop here, even if something the plugin started keeps the pipe open */
        int lines = 0;
        for (size_t i = 0; i < got; i++)
            lines += answer[i] == '\n';
        if ((got >= 3 && strncmp(answer, "ok\n", 3) == 0 && lines >= 6) ||
            (got >= 6 && strncmp(answer, "error\n", 6) == 0 && lines >= 2))
            break;
    }
    close(fds[0]);
    answer[got] = '\0';
    kill(-pid, SIGKILL); /* the probe and anything it started */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return cli_error("cannot load plugin '%s': loading it did not finish within %gs (a constructor that hangs?)",
                         impl->spec, timeout);
    /* the lines of the answer, empty ones kept: "ok", "declared" or "-", name, ops, tiers, unsupported */
    char *lines[6] = {0};
    int n_lines = 0;
    for (char *p = answer; *p && n_lines < 6;) {
        char *end = strchr(p, '\n');
        if (!end)
            break; /* an unfinished line: the probe died while writing */
        *end = '\0';
        lines[n_lines++] = p;
        p = end + 1;
    }
    if (n_lines >= 1 && strcmp(lines[0], "error") == 0)
        return cli_error("cannot load plugin '%s': %s", impl->spec, n_lines > 1 ? lines[1] : "unknown error");
    if (n_lines < 6 || strcmp(lines[0], "ok") != 0) {
        if (WIFSIGNALED(status) && WTERMSIG(status) != SIGKILL)
            return cli_error("cannot load plugin '%s': it crashed while loading: %s (%s)", impl->spec,
                             strsignal(WTERMSIG(status)), "a constructor, or lacs_plugin_describe");
        return cli_error("cannot load plugin '%s': it exited with status %d while loading (a constructor called "
                         "exit?): it cannot be checked",
                         impl->spec, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    impl->declared = strcmp(lines[1], "declared") == 0;
    snprintf(impl->name, sizeof impl->name, "%s", lines[2]);
    snprintf(impl->ops, sizeof impl->ops, "%s", lines[3]);
    snprintf(impl->tiers, sizeof impl->tiers, "%s", lines[4]);
    snprintf(impl->unsupported, sizeof impl->unsupported, "%s", lines[5]);
    return 0;
}

int cli_impl_load_in_child(cli_impl *impl, char *why, size_t size)
{
    if (impl->kind != CLI_IMPL_PLUGIN || impl->run)
        return 0;
    impl->library = dlopen(impl->path, RTLD_NOW | RTLD_LOCAL);
    if (!impl->library) {
        const char *error = dlerror();
        snprintf(why, size, "cannot load the plugin: %s", error ? error : "dlopen failed");
        return -1;
    }
    void *run = dlsym(impl->library, plugin_symbol), *last_error = dlsym(impl->library, "lacs_plugin_last_error");
    if (!run) {
        snprintf(why, size, "the plugin does not export %s", plugin_symbol);
        return -1;
    }
    /* POSIX guarantees that a function's dlsym address converts to a function pointer. */
    *(void **)&impl->run = run;
    if (last_error)
        *(void **)&impl->last_error = last_error;
    return 0;
}

int cli_impl_open(const char *spec, cli_impl *impl, double timeout)
{
    memset(impl, 0, sizeof *impl);
    impl->spec = spec;
    if (strcmp(spec, "builtin:reference") == 0) {
        impl->kind = CLI_IMPL_REFERENCE;
        impl->declared = 1; /* every op, both tiers */
        snprintf(impl->name, sizeof impl->name, "builtin:reference");
        return 0;
    }
    if (strcmp(spec, "builtin:cpu") == 0) {
        if (lacs_cpu_environment_check() != LACS_OK) /* LACS_ISA names a set this CPU lacks, LACS_THREADS=0 ... */
            return cli_error("%s", lacs_last_error());
        impl->kind = CLI_IMPL_BUILTIN;
        impl->run = lacs_cpu_run;
        impl->last_error = lacs_last_error;
        impl->declared = 1;
        snprintf(impl->name, sizeof impl->name, "builtin:cpu");
        snprintf(impl->ops, sizeof impl->ops, "%s", lacs_cpu_declared_ops());
        return 0;
    }
    if (strcmp(spec, "builtin:cuda") == 0) {
        const int rc = open_cuda(impl);
        if (rc == 0) {
            /* its declaration is the library's own lacs_plugin_describe (optimized/cuda/dispatch.c) */
            const lacs_plugin_description *(*describe)(void);
            *(void **)&describe = dlsym(impl->library, "lacs_plugin_describe");
            const lacs_plugin_description *d = describe ? describe() : NULL;
            impl->declared = d != NULL;
            snprintf(impl->name, sizeof impl->name, "builtin:cuda");
            snprintf(impl->ops, sizeof impl->ops, "%s", d && d->ops ? d->ops : "");
            snprintf(impl->tiers, sizeof impl->tiers, "%s", d && d->tiers ? d->tiers : "");
            snprintf(impl->unsupported, sizeof impl->unsupported, "%s", d && d->unsupported ? d->unsupported : "");
        }
        return rc;
    }
    if (strncmp(spec, "builtin:", 8) == 0)
        return cli_error("unknown implementation '%s' (builtins: builtin:reference, builtin:cpu, builtin:cuda)",
                         spec);
    if (strncmp(spec, "python:", 7) == 0)
        return cli_error("'%s' is a Python implementation: run it with "
                         "PYTHONPATH=python /usr/bin/python3 -m lacs check --impl %s", spec, spec);

    /* A plugin. dlopen searches the library path for a bare name: say "./" so
     * that the file the user named is the one loaded. */
    snprintf(impl->path, sizeof impl->path, "%s%s", strchr(spec, '/') ? "" : "./", spec);
    struct stat st;
    if (stat(impl->path, &st) != 0)
        return cli_error("implementation '%s' is not builtin:reference, builtin:cpu, builtin:cuda, python:... or an "
                         "existing plugin file", spec);
    if (!S_ISREG(st.st_mode))
        return cli_error("cannot load plugin '%s': not a regular file", spec);
    impl->kind = CLI_IMPL_PLUGIN;
    return probe_plugin(impl, timeout);
}

void cli_impl_close(cli_impl *impl)
{
    if (impl->library)
        dlclose(impl->library);
    impl->library = NULL;
    impl->run = NULL;
    impl->last_error = NULL;
}

/* This program's own path (for the Python harness to come back to), or NULL. */
static const char *self_path(void)
{
    static char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return NULL;
    self[n] = '\0';
    return self;
}

/* `lacs check|explain --impl python:...`: the command, argv as given (argv[0]
 * the command's name), is handed to the Python harness, `python3 -m lacs`,
 * which runs the function in worker processes and judges it with the same C
 * library (explain comes back to this program with --outputs). The interpreter is $LACS_PYTHON, else /usr/bin/python3 (Debian's,
 * with NumPy); the lacs package beside this program (../python, the source
 * tree) goes first on PYTHONPATH when it is there, and LACS_BUILD points the
 * harness at the liblacs.so beside this program. Returns only on error. */
int cli_exec_python_harness(int argc, char **argv)
{
    const char *python = getenv("LACS_PYTHON");
    if (!python || !*python)
        python = "/usr/bin/python3";
    const char *self = self_path();
    if (self) {
        char dir[4096], package[4200], library[4200];
        snprintf(dir, sizeof dir, "%s", self);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        setenv("LACS_CLI", self, 1);
        snprintf(library, sizeof library, "%s/liblacs.so", dir);
        if (access(library, R_OK) == 0 && !getenv("LACS_BUILD"))
            setenv("LACS_BUILD", dir, 1);
        snprintf(package, sizeof package, "%s/../python/lacs/__init__.py", dir);
        if (access(package, R_OK) == 0) {
            char path[8800];
            const char *old = getenv("PYTHONPATH");
            snprintf(path, sizeof path, "%s/../python%s%s", dir, old && *old ? ":" : "", old && *old ? old : "");
            setenv("PYTHONPATH", path, 1);
        }
    }
    char **args = calloc((size_t)argc + 4, sizeof *args);
    if (!args)
        return cli_error("out of memory");
    int n = 0;
    args[n++] = (char *)python;
    args[n++] = "-m";
    args[n++] = "lacs";
    for (int i = 0; i < argc; i++) /* argv[0] is the command */
        args[n++] = argv[i];
    args[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    execv(python, args);
    int saved = errno;
    free(args);
    return cli_error("%s: a Python implementation runs under the Python harness, but %s cannot be run: %s "
                     "(set LACS_PYTHON to the interpreter that imports your function)", argv[0], python,
                     strerror(saved));
}
