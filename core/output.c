/* Printable text and safely written files (lacs/output.h, SPEC.md 11.5). */
#define _DEFAULT_SOURCE 1 /* realpath's PATH_MAX, fchmod */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lacs/output.h"

#include "../core/error.h"

/* ---- printable text ---- */

/* The length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_length(const unsigned char *s, size_t n)
{
    const unsigned char c = s[0];
    size_t length;
    uint32_t code;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        length = 2;
        code = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        length = 3;
        code = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        length = 4;
        code = c & 0x07;
    } else {
        return 0;
    }
    if (n < length)
        return 0;
    for (size_t i = 1; i < length; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        code = code << 6 | (s[i] & 0x3F);
    }
    /* overlong forms, surrogates and code points past U+10FFFF */
    if ((length == 3 && code < 0x800) || (length == 4 && (code < 0x10000 || code > 0x10FFFF)) ||
        (code >= 0xD800 && code <= 0xDFFF))
        return 0;
    return length;
}

char *lacs_printable(const char *text, char *out, size_t size)
{
    if (!out || size == 0)
        return out;
    if (!text)
        text = "(null)";
    const unsigned char *s = (const unsigned char *)text;
    const size_t n = strlen(text);
    size_t in = 0, used = 0;
    /* room kept for "..." and the NUL */
    const size_t limit = size > 4 ? size - 4 : 0;
    while (in < n) {
        const size_t length = utf8_length(s + in, n - in);
        const int control = length == 0 || (length == 1 && (s[in] < 0x20 || s[in] == 0x7F)) ||
                            (length == 2 && s[in] == 0xC2 && s[in + 1] < 0xA0);
        const size_t needed = control ? 4 * (length ? length : 1) : length;
        if (used + needed > limit)
            break;
        if (control) {
            for (size_t k = 0; k < (length ? length : 1); k++)
                used += (size_t)snprintf(out + used, size - used, "\\x%02X", s[in + k]);
            in += length ? length : 1;
        } else {
            memcpy(out + used, s + in, length);
            used += length;
            in += length;
        }
    }
    if (in < n && size > 4) {
        memcpy(out + used, "...", 3);
        used += 3;
    }
    out[used < size ? used : size - 1] = '\0';
    return out;
}

/* ---- files written safely ---- */

static int output_error(const char *path, const char *fmt, const char *detail)
{
    char shown[512];
    lacs_printable(path, shown, sizeof shown);
    return lacs_internal_error(LACS_ERR_IO, shown, fmt, detail);
}

/* The directory part of path ("." when there is none), in dir[size]. */
static void directory_of(const char *path, char *dir, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == path)
        snprintf(dir, size, "/");
    else
        snprintf(dir, size, "%.*s", (int)(slash - path), path);
}

/* Whether dir holds a MANIFEST.json of lacs (format "lacs-manifest/..."). */
static int holds_lacs_manifest(const char *dir)
{
    char manifest[PATH_MAX + 32];
    snprintf(manifest, sizeof manifest, "%s/MANIFEST.json", strcmp(dir, "/") == 0 ? "" : dir);
    const int fd = open(manifest, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return 0;
    struct stat st;
    char head[4096];
    ssize_t got = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        got = read(fd, head, sizeof head - 1);
    close(fd);
    if (got <= 0)
        return 0;
    head[got] = '\0';
    return strstr(head, "\"lacs-manifest/") != NULL;
}

/* The golden-vector rule: path's directory must not be vectors_dir or under
 * it, nor under a directory holding a lacs MANIFEST.json. */
static int check_not_golden(const char *path, const char *vectors_dir)
{
    char dir[PATH_MAX], real_dir[PATH_MAX], real_vectors[PATH_MAX];
    directory_of(path, dir, sizeof dir);
    if (!realpath(dir, real_dir))
        return output_error(path, "its directory cannot be resolved: %s", strerror(errno));
    if (vectors_dir && realpath(vectors_dir, real_vectors)) {
        const size_t n = strlen(real_vectors);
        if (strncmp(real_dir, real_vectors, n) == 0 && (real_dir[n] == '\0' || real_dir[n] == '/' || n == 1))
            return output_error(path, "is under the vectors directory %s: lacs never writes over golden vectors",
                                vectors_dir);
    }
    for (;;) {
        if (holds_lacs_manifest(real_dir)) {
            char why[PATH_MAX + 160];
            snprintf(why, sizeof why, "%s, which holds a MANIFEST.json", real_dir);
            return output_error(path, "is under %s (golden vectors): lacs never writes there", why);
        }
        if (strcmp(real_dir, "/") == 0)
            break;
        char *slash = strrchr(real_dir, '/');
        if (slash == real_dir)
            real_dir[1] = '\0'; /* "/x" -> "/" */
        else
            *slash = '\0';
    }
    return LACS_OK;
}

/* The rules on the target itself and on golden vectors. */
static int check_target(const char *path, const char *vectors_dir, unsigned flags)
{
    if (!path || !path[0])
        return lacs_internal_error(LACS_ERR_IO, "lacs", "no output path given");
    if (strlen(path) >= PATH_MAX - 32)
        return output_error(path, "%s", "the path is too long");
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISLNK(st.st_mode))
            return output_error(path, "%s",
                                "is a symbolic link: lacs writes only to a new path or a regular file, never "
                                "through a link");
        if (!S_ISREG(st.st_mode))
            return output_error(path, "is %s, not a regular file: lacs writes only to a new path or a regular file",
                                lacs_internal_file_kind(st.st_mode));
        if (!(flags & LACS_OUTPUT_REPLACE))
            return output_error(path, "%s", "exists; it is replaced only when asked (overwrite, --force)");
    } else if (errno != ENOENT) {
        return output_error(path, "cannot be examined: %s", strerror(errno));
    }
    if (flags & LACS_OUTPUT_NOT_GOLDEN)
        return check_not_golden(path, vectors_dir);
    return LACS_OK;
}

/* A new temporary file beside path: dir/.<name>.XXXXXX; its descriptor, or -1 (errno set). */
static int create_temporary(const char *path, char *tmp, size_t size)
{
    char dir[PATH_MAX];
    directory_of(path, dir, sizeof dir);
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if ((size_t)snprintf(tmp, size, "%s/.%.64s.XXXXXX", dir, name) >= size) {
        errno = ENAMETOOLONG;
        return -1;
    }
    const int fd = mkstemp(tmp);
    if (fd >= 0)
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

int lacs_output_file_check(const char *path, const char *vectors_dir, unsigned flags)
{
    int rc = check_target(path, vectors_dir, flags);
    if (rc != LACS_OK)
        return rc;
    char tmp[PATH_MAX + 96];
    const int fd = create_temporary(path, tmp, sizeof tmp);
    if (fd < 0) {
        char dir[PATH_MAX];
        directory_of(path, dir, sizeof dir);
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "cannot create a file in %s: %s", dir, strerror(errno));
        return output_error(path, "%s", why);
    }
    close(fd);
    unlink(tmp);
    return LACS_OK;
}

int lacs_output_file_write(const char *path, const void *bytes, size_t size, const char *vectors_dir, unsigned flags)
{
    int rc = check_target(path, vectors_dir, flags);
    if (rc != LACS_OK)
        return rc;
    char tmp[PATH_MAX + 96];
    const int fd = create_temporary(path, tmp, sizeof tmp);
    if (fd < 0) {
        char dir[PATH_MAX];
        directory_of(path, dir, sizeof dir);
        char why[PATH_MAX + 64];
        snprintf(why, sizeof why, "cannot create a file in %s: %s", dir, strerror(errno));
        return output_error(path, "%s", why);
    }
    const mode_t mask = umask(0);
    umask(mask);
    int failed = fchmod(fd, 0666 & ~mask) != 0;
    int saved = failed ? errno : 0;
    const unsigned char *p = bytes;
    for (size_t done = 0; !failed && done < size;) {
        const ssize_t n = write(fd, p + done, size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            failed = 1;
            saved = n < 0 ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    if (close(fd) != 0 && !failed) {
        failed = 1;
        saved = errno;
    }
    if (failed) {
        unlink(tmp);
        return output_error(path, "cannot write it: %s", strerror(saved));
    }
    if (flags & LACS_OUTPUT_REPLACE) {
        if (rename(tmp, path) != 0) {
            saved = errno;
            unlink(tmp);
            return output_error(path, "cannot rename the temporary file onto it: %s", strerror(saved));
        }
        return LACS_OK;
    }
    /* No replacing: link(2) fails if a file appeared meanwhile. */
    if (link(tmp, path) != 0) {
        saved = errno;
        if (saved == EEXIST) {
            unlink(tmp);
            return output_error(path, "%s", "exists; it is replaced only when asked (overwrite, --force)");
        }
        struct stat st;
        if (lstat(path, &st) != 0 && errno == ENOENT && rename(tmp, path) == 0) /* no hard links here */
            return LACS_OK;
        unlink(tmp);
        return output_error(path, "cannot create it: %s", strerror(saved));
    }
    unlink(tmp);
    return LACS_OK;
}
