/* lacs: what the checker writes for people and into the user's files
 * (SPEC.md 11.5): text made printable, and files written so that nothing the
 * user owns is damaged.
 *
 * Names, reasons and messages come from files and plugins nobody vetted: a
 * terminal escape in a vector's reason or a non-UTF-8 byte in a file name
 * must neither drive the terminal nor make a JSON or JUnit report invalid.
 * lacs_printable is the one escaping every output of the CLI and the Python
 * harness goes through.
 *
 * Every file lacs writes on request (a --json or --junit report, `lacs run
 * --out`, a plot, a vector) goes through lacs_output_file_write: a temporary file
 * created with mkstemp beside the target, then renamed onto it, so that a
 * report is whole or absent, concurrent runs never share a temporary file, and
 * a symbolic link planted anywhere is never followed. The target must be a new
 * path or a regular file (never a symbolic link, FIFO, device or directory).
 */
#ifndef LACS_OUTPUT_H
#define LACS_OUTPUT_H

#include <stddef.h>

#include "lacs/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Copies `text` to out (at most size - 1 bytes and a NUL), valid UTF-8 kept
 * except the control characters (C0, DEL and the C1 range U+0080-U+009F),
 * which become \xHH (\u0085-style code points as \xC2\x85), as does every
 * byte that is not valid UTF-8; a text cut short ends with "...". The result
 * is valid UTF-8 holding no control character. Returns out. */
char *lacs_printable(const char *text, char *out, size_t size);

/* Flags of lacs_output_file_check and lacs_output_file_write. */
#define LACS_OUTPUT_REPLACE 1u    /* an existing regular file may be replaced (a report; --force) */
#define LACS_OUTPUT_NOT_GOLDEN 2u /* refuse a path under `vectors_dir` or under a directory holding a
                                     lacs MANIFEST.json: lacs never writes over golden vectors */

/* Whether `path` may be written, checked before any work is done: the rules
 * above, and a file can be created in its directory. LACS_OK, or LACS_ERR_IO
 * with lacs_last_error() = "<path>: <why>". `vectors_dir` may be NULL. */
int lacs_output_file_check(const char *path, const char *vectors_dir, unsigned flags);

/* Writes `size` bytes to `path` under the same rules, through a temporary
 * file in the same directory renamed onto it (without LACS_OUTPUT_REPLACE,
 * linked: an existing file is never replaced, even one created meanwhile).
 * The file gets the mode 0666 less the umask. LACS_OK or LACS_ERR_IO. */
int lacs_output_file_write(const char *path, const void *bytes, size_t size, const char *vectors_dir, unsigned flags);

#ifdef __cplusplus
}
#endif

#endif
