/* The thread's last error (core/error.c), for every layer of liblacs above the
 * core: each public function that fails records one line, "op: message", that
 * lacs_last_error() (lacs/types.h) returns. Internal to liblacs: not installed.
 */
#ifndef LACS_CORE_ERROR_H
#define LACS_CORE_ERROR_H

/* Records the thread's last error ("op: message"; op NULL reads "lacs") and
 * returns code, so that a caller writes `return lacs_internal_error(...)`. */
int lacs_internal_error(int code, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
