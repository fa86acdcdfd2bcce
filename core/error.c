/* The thread's last error, one line naming the op and the problem.
 * Compiled once (it does not depend on the reference's precision). */
#include <stdarg.h>
#include <sys/stat.h>
#include <stdio.h>

#include "../core/error.h"

static _Thread_local char last_error[2048] = "no error";

const char *lacs_last_error(void) { return last_error; }

int lacs_internal_error(int code, const char *op, const char *fmt, ...)
{
    int used = snprintf(last_error, sizeof last_error, "%s: ", op ? op : "lacs");
    if (used < 0 || (size_t)used >= sizeof last_error)
        used = 0;
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error + used, sizeof last_error - (size_t)used, fmt, args);
    va_end(args);
    return code;
}

const char *lacs_internal_file_kind(unsigned int mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "something else";
}
