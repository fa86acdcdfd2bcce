/* lacs CLI: the implementation named by --impl.
 *
 *   builtin:reference             the double reference (lacs_vector_run_reference, lacs_reference_run)
 *   builtin:cpu                   the optimized CPU implementation (lacs_cpu_run, optimized/cpu/)
 *   builtin:cuda                  not available yet (issue 7)
 *   python:FILE_OR_MODULE:FUNC    run by the Python harness, not by this program
 *   anything else                 a path to a shared library exporting lacs_plugin_run (ABI v1, lacs/plugin.h)
 *
 * A plugin is dlopen'd once, in the parent, before any child is forked, so
 * that every child inherits it already loaded and relocated.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char plugin_symbol[] = "lacs_plugin_run";

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
        return 0;
    }
    if (strcmp(spec, "builtin:cuda") == 0)
        return cli_error("builtin:cuda is not available yet (issue 7: the CUDA implementation); "
                         "use builtin:reference, builtin:cpu or a plugin .so");
    if (strncmp(spec, "builtin:", 8) == 0)
        return cli_error("unknown implementation '%s' (builtins: builtin:reference, builtin:cpu; builtin:cuda "
                         "is not available yet)", spec);
    if (strncmp(spec, "python:", 7) == 0)
        return cli_error("'%s' is a Python implementation: run it with "
                         "PYTHONPATH=python /usr/bin/python3 -m lacs check --impl %s", spec, spec);

    /* A plugin. dlopen searches the library path for a bare name: say "./" so
     * that the file the user named is the one loaded. */
    char path[4096];
    snprintf(path, sizeof path, "%s%s", strchr(spec, '/') ? "" : "./", spec);
    if (access(path, F_OK) != 0)
        return cli_error("implementation '%s' is not builtin:reference, builtin:cpu, python:... or an existing plugin "
                         "file", spec);
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
}
