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

/* What a path that is not a regular file is ("a directory", "a FIFO", "a
 * character device", "a block device", "a socket", else "something else"), in
 * the words of an error message: the safetensors reader's refusals and the
 * output files' (core/safetensors.c, core/output.c). mode is a struct stat's
 * st_mode. */
const char *lacs_internal_file_kind(unsigned int mode);

#endif
