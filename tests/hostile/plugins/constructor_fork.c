/* A plugin whose constructor forks a process that sleeps 60 s, holding every descriptor it inherited
 * (tests/hostile/): the checker must neither wait for it nor leave it behind. It writes its id to
 * $LACS_HOSTILE_PIDS/daemon-<pid>. Otherwise a correct linear attention. */
#define _DEFAULT_SOURCE 1
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "lacs/plugin.h"
#include "linear_attn_fp32.h"

__attribute__((constructor)) static void start_a_daemon(void)
{
    if (fork() == 0) {
        const char *dir = getenv("LACS_HOSTILE_PIDS");
        if (dir) {
            char path[4096];
            snprintf(path, sizeof path, "%s/daemon-%ld", dir, (long)getpid());
            FILE *f = fopen(path, "w");
            if (f)
                fclose(f);
        }
        sleep(60);
        _exit(0);
    }
}

int lacs_plugin_run(const char *op, const lacs_tensor *inputs, int n_inputs, const lacs_param *params, int n_params,
                    lacs_tensor *outputs, int n_outputs)
{
    if (strcmp(op, "linear_attn") != 0)
        return LACS_UNSUPPORTED;
    return linear_attn_fp32(inputs, n_inputs, params, n_params, outputs, n_outputs, 1, 0);
}
