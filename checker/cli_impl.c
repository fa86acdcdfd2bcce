/* lacs CLI: the implementation named by --impl.
 *
 *   builtin:reference             the double reference (lacs_vector_run_reference, lacs_reference_run)
 *   builtin:cpu                   the optimized CPU implementation (lacs_cpu_run, optimized/cpu/)
 *   builtin:cuda                  the CUDA implementation (lacs_cuda_run in liblacs_cuda.so, optimized/cuda/)
 *   python:FILE_OR_MODULE:FUNC    run by the Python harness, not by this program
 *   anything else                 a path to a shared library exporting lacs_plugin_run (ABI v1, lacs/plugin.h)
 *
 * A plugin is dlopen'd once, in the parent, before any child is forked, so
 * that every child inherits it already loaded and relocated.
 *
 * builtin:cuda is a library of its own, build/liblacs_cuda.so (make cuda), so
 * that this program needs no CUDA runtime: it is loaded like a plugin, from
 * LACS_CUDA_LIBRARY if set, else from beside this program. The parent never
 * calls into it: a CUDA context does not survive fork(), so even the question
 * "is there a device?" is asked in a child of its own (cuda_probe).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    return own && *own ? own : lacs_last_error();
}

int cli_impl_open(const char *spec, cli_impl *impl)
{
    memset(impl, 0, sizeof *impl);
    impl->spec = spec;
    if (strcmp(spec, "builtin:reference") == 0) {
        impl->kind = CLI_IMPL_REFERENCE;
        return 0;
    }
    if (strcmp(spec, "builtin:cpu") == 0) {
        if (lacs_cpu_environment_check() != LACS_OK) /* LACS_ISA names a set this CPU lacks, LACS_THREADS=0 ... */
            return cli_error("%s", lacs_last_error());
        impl->kind = CLI_IMPL_BUILTIN;
        impl->run = lacs_cpu_run;
        impl->last_error = lacs_last_error;
        return 0;
    }
    if (strcmp(spec, "builtin:cuda") == 0)
        return open_cuda(impl);
    if (strncmp(spec, "builtin:", 8) == 0)
        return cli_error("unknown implementation '%s' (builtins: builtin:reference, builtin:cpu, builtin:cuda)",
                         spec);
    if (strncmp(spec, "python:", 7) == 0)
        return cli_error("'%s' is a Python implementation: run it with "
                         "PYTHONPATH=python /usr/bin/python3 -m lacs check --impl %s", spec, spec);

    /* A plugin. dlopen searches the library path for a bare name: say "./" so
     * that the file the user named is the one loaded. */
    char path[4096];
    snprintf(path, sizeof path, "%s%s", strchr(spec, '/') ? "" : "./", spec);
    if (access(path, F_OK) != 0)
        return cli_error("implementation '%s' is not builtin:reference, builtin:cpu, builtin:cuda, python:... or an "
                         "existing plugin file", spec);
    impl->kind = CLI_IMPL_PLUGIN;
    impl->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!impl->library)
        return cli_error("cannot load plugin '%s': %s", spec, dlerror());
    dlerror(); /* clear any earlier error, so that a NULL below is reported with its own text */
    void *symbol = dlsym(impl->library, plugin_symbol);
    if (!symbol) {
        const char *why = dlerror();
        cli_error("plugin '%s' does not export %s (include/lacs/plugin.h): %s", spec, plugin_symbol,
                  why ? why : "the symbol is NULL");
        dlclose(impl->library);
        impl->library = NULL;
        return CLI_EXIT_USAGE;
    }
    /* POSIX guarantees that a function's dlsym address converts to a function pointer. */
    impl->run = (cli_plugin_fn)symbol;
    return 0;
}

void cli_impl_close(cli_impl *impl)
{
    if (impl->library)
        dlclose(impl->library);
    impl->library = NULL;
    impl->run = NULL;
    impl->last_error = NULL;
}
