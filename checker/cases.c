/* The cases of a vectors directory and their manifest (lacs/cases.h, SPEC.md
 * 10.1, 11.5).
 *
 * Read top to bottom: reading a manifest, finding the one that covers a
 * directory, then listing the cases (the files, the manifest's entries that
 * have no file, each file loaded once), and the hash of one file.
 */
#define _DEFAULT_SOURCE 1 /* realpath's PATH_MAX */

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/error.h"
#include "lacs/cases.h"
#include "lacs/check.h"
#include "lacs/ops.h"

static const char vector_suffix[] = ".safetensors";

/* ---- a manifest ---- */

typedef struct {
    const char *id, *op, *tier, *path, *sha256; /* into the cJSON tree; path relative to the covered dir */
    const cJSON *flags;                          /* its array of flags, or NULL */
    int matched;                                 /* a file of the directory is this entry */
} manifest_entry;

typedef struct {
    char path[PATH_MAX];
    cJSON *root;
    manifest_entry *entries; /* those under the covered directory */
    int n;
} manifest;

static void manifest_free(manifest *m)
{
    cJSON_Delete(m->root);
    free(m->entries);
    memset(m, 0, sizeof *m);
}

/* The whole of a regular file (NUL-terminated), or NULL with errno set. */
static char *read_text(const char *path)
{
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 1 << 30) {
        close(fd);
        errno = EINVAL;
        return NULL;
    }
    char *text = malloc((size_t)st.st_size + 1);
    size_t used = 0;
    while (text && used < (size_t)st.st_size) {
        const ssize_t got = read(fd, text + used, (size_t)st.st_size - used);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        used += (size_t)got;
    }
    close(fd);
    if (text)
        text[used] = '\0';
    return text;
}

static int is_hex64(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* Reads `path` and keeps the entries whose path starts with `prefix` (the
 * part of their path that names the covered directory), the prefix removed.
 * Returns 1 (read), 0 (no such file) or -1 (malformed: error set). */
static int manifest_read(const char *path, const char *prefix, manifest *m)
{
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", path);
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    char *text = read_text(path);
    if (!text) {
        lacs_internal_error(LACS_ERR_IO, path, "cannot read the manifest: %s", strerror(errno));
        return -1;
    }
    m->root = cJSON_Parse(text);
    free(text);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(m->root, "format");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(m->root, "cases");
    if (!cJSON_IsObject(m->root) || !cJSON_IsString(format) || strncmp(format->valuestring, "lacs-manifest/", 14) != 0 ||
        !cJSON_IsArray(cases)) {
        lacs_internal_error(LACS_ERR_FORMAT, path, "manifest: not a lacs manifest (format \"lacs-manifest/1\", cases)");
        manifest_free(m);
        return -1;
    }
    const int total = cJSON_GetArraySize(cases);
    m->entries = calloc((size_t)(total > 0 ? total : 1), sizeof *m->entries);
    if (!m->entries) {
        lacs_internal_error(LACS_ERR_MEMORY, path, "out of memory");
        manifest_free(m);
        return -1;
    }
    const size_t prefix_length = strlen(prefix);
    int index = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id"), *op = cJSON_GetObjectItemCaseSensitive(c, "op");
        const cJSON *tier = cJSON_GetObjectItemCaseSensitive(c, "tier");
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(c, "path");
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(c, "sha256");
        if (!cJSON_IsString(id) || !cJSON_IsString(op) || !cJSON_IsString(tier) || !cJSON_IsString(file) ||
            !cJSON_IsString(sha) || !is_hex64(sha->valuestring)) {
            lacs_internal_error(LACS_ERR_FORMAT, path,
                                "manifest: case %d lacks a string id, op, tier, path or a sha256 of 64 hex digits",
                                index);
            manifest_free(m);
            return -1;
        }
        index++;
        if (strncmp(file->valuestring, prefix, prefix_length) != 0)
            continue; /* another set's */
        const char *relative = file->valuestring + prefix_length;
        const char *slash = strchr(relative, '/');
        if (slash && strchr(slash + 1, '/'))
            continue; /* a set in a folder below this one's */
        /* <op>/<id>.safetensors, exactly */
        char expected[512];
        snprintf(expected, sizeof expected, "%s/%s%s", op->valuestring, id->valuestring, vector_suffix);
        if (strcmp(relative, expected) != 0) {
            lacs_internal_error(LACS_ERR_FORMAT, path, "manifest: case '%.100s' has the path '%.200s', not '%s%.200s'",
                                id->valuestring, file->valuestring, prefix, expected);
            manifest_free(m);
            return -1;
        }
        const cJSON *flags = cJSON_GetObjectItemCaseSensitive(c, "flags");
        m->entries[m->n++] = (manifest_entry){id->valuestring, op->valuestring, tier->valuestring, relative,
                                              sha->valuestring, cJSON_IsArray(flags) ? flags : NULL, 0};
    }
    return 1;
}

/* The manifest covering dir: dir/MANIFEST.json, else dir/../MANIFEST.json
 * with entries under "<basename of dir>/". 1 found, 0 none (error set
 * saying where it looked), -1 malformed (error set). */
static int manifest_for(const char *dir, manifest *m)
{
    char here[PATH_MAX + 32], real[PATH_MAX], parent[PATH_MAX + 32], prefix[NAME_MAX + 2];
    snprintf(here, sizeof here, "%s/MANIFEST.json", dir);
    int found = manifest_read(here, "", m);
    if (found < 0 || (found > 0 && m->n > 0))
        return found;
    if (found > 0) /* a manifest of the sets in folders below, not of this directory's cases */
        manifest_free(m);
    if (!realpath(dir, real)) {
        lacs_internal_error(LACS_ERR_IO, dir, "cannot resolve the vectors directory: %s", strerror(errno));
        return -1;
    }
    char *slash = strrchr(real, '/');
    if (slash && slash != real && slash[1]) {
        snprintf(prefix, sizeof prefix, "%s/", slash + 1);
        *slash = '\0';
        snprintf(parent, sizeof parent, "%s/MANIFEST.json", real);
        found = manifest_read(parent, prefix, m);
        if (found < 0)
            return -1;
        if (found > 0 && m->n > 0)
            return 1;
        manifest_free(m);
    }
    lacs_internal_error(LACS_ERR_IO, dir,
                        "no MANIFEST.json covers these vectors (looked for %s and ../MANIFEST.json with cases under "
                        "%s): the files cannot be verified; --no-verify checks them as they are",
                        here, slash && slash[1] ? prefix : "it");
    return 0;
}

static manifest_entry *manifest_find(manifest *m, const char *relative)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->entries[i].path, relative) == 0)
            return &m->entries[i];
    return NULL;
}

/* ---- the list of cases ---- */

static int wanted_op(const char *const *ops, int n_ops, const char *op)
{
    if (n_ops == 0)
        return 1;
    for (int i = 0; i < n_ops; i++)
        if (strcmp(ops[i], op) == 0)
            return 1;
    return 0;
}

static int has_suffix(const char *name, const char *suffix)
{
    const size_t n = strlen(name), s = strlen(suffix);
    return n > s && strcmp(name + n - s, suffix) == 0;
}

static void case_free(lacs_case_entry *c)
{
    free(c->path);
    free(c->id);
    free(c->flags);
    free(c->reason);
    memset(c, 0, sizeof *c);
}

void lacs_cases_free(lacs_case_list *list)
{
    for (int i = 0; i < list->n; i++)
        case_free(&list->cases[i]);
    free(list->cases);
    free(list->dir);
    free(list->manifest);
    memset(list, 0, sizeof *list);
}

static lacs_case_entry *append_case(lacs_case_list *list, int *capacity)
{
    if (list->n == *capacity) {
        const int grown = *capacity ? 2 * *capacity : 256;
        lacs_case_entry *bigger = realloc(list->cases, (size_t)grown * sizeof *bigger);
        if (!bigger)
            return NULL;
        list->cases = bigger;
        *capacity = grown;
    }
    lacs_case_entry *c = &list->cases[list->n++];
    memset(c, 0, sizeof *c);
    return c;
}

static char *text_copy(const char *text) { return strdup(text ? text : ""); }

static char *formatted(const char *fmt, const char *a, const char *b)
{
    const int n = snprintf(NULL, 0, fmt, a, b);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (text)
        snprintf(text, (size_t)n + 1, fmt, a, b);
    return text;
}

/* The tier in an id `<op>-<tier>-<name>`, for a file whose metadata cannot be read. */
static void tier_from_id(const char *id, char *tier, size_t size)
{
    snprintf(tier, size, "%s", strstr(id, "-fp32-") ? "fp32" : strstr(id, "-bf16-") ? "bf16" : "?");
}

/* A manifest entry's flags, space-separated (malloc'd). */
static char *entry_flags(const manifest_entry *e)
{
    size_t length = 1;
    const cJSON *flag;
    cJSON_ArrayForEach(flag, e->flags) if (cJSON_IsString(flag)) length += strlen(flag->valuestring) + 1;
    char *text = calloc(1, length);
    cJSON_ArrayForEach(flag, e->flags) if (text && cJSON_IsString(flag))
    {
        if (text[0])
            strcat(text, " ");
        strcat(text, flag->valuestring);
    }
    return text;
}

/* Whether the loaded vector is the case the manifest (or the file name) says:
 * LACS_OK, or LACS_ERR_FORMAT naming the field. */
static int same_case(const lacs_case_entry *c, const lacs_vector *v)
{
    if (strcmp(v->id, c->id) != 0)
        return lacs_internal_error(LACS_ERR_FORMAT, c->path, "metadata: its id is '%s', but %s says '%s'", v->id,
                                   c->sha256[0] ? "its manifest" : "its file name", c->id);
    if (c->sha256[0] && (strcmp(v->op, c->op) != 0 || strcmp(v->tier, c->tier) != 0))
        return lacs_internal_error(LACS_ERR_FORMAT, c->path,
                                   "metadata: it is a case of %s in %s, its manifest says %s in %s", v->op, v->tier,
                                   c->op, c->tier);
    return LACS_OK;
}

int lacs_case_entry_load(const lacs_case_entry *c, lacs_vector *v)
{
    int rc = lacs_vector_load_verified(c->path, c->sha256[0] ? c->sha256 : NULL, v);
    if (rc == LACS_OK)
        rc = same_case(c, v);
    return rc;
}

lacs_vector *lacs_case_entry_open(const lacs_case_entry *c)
{
    lacs_vector *v = malloc(sizeof *v);
    if (!v) {
        lacs_internal_error(LACS_ERR_MEMORY, c->path, "out of memory");
        return NULL;
    }
    if (lacs_case_entry_load(c, v) != LACS_OK) {
        lacs_vector_free(v);
        free(v);
        return NULL;
    }
    return v;
}

/* Reads c's file once (LACS_CASES_READ): op, tier, flags, reason and level; its state. */
static int describe_case(lacs_case_entry *c, const char *manifest_path)
{
    static lacs_vector v; /* large; one at a time */
    if (c->state == LACS_CASE_OK && lacs_case_entry_load(c, &v) == LACS_OK) {
        snprintf(c->op, sizeof c->op, "%s", v.op);
        snprintf(c->tier, sizeof c->tier, "%s", v.tier);
        free(c->flags);
        c->flags = text_copy(v.flags);
        c->strict = lacs_vector_is_strict(&v);
        c->reason = text_copy(v.reason);
    } else if (c->state == LACS_CASE_OK) {
        c->state = LACS_CASE_INVALID;
        if (!c->sha256[0])
            tier_from_id(c->id, c->tier, sizeof c->tier);
        if (!c->flags)
            c->flags = text_copy("");
        c->reason = text_copy(lacs_last_error());
    } else if (lacs_vector_load(c->path, &v) == LACS_OK) { /* not listed: read for the filter, never run */
        snprintf(c->tier, sizeof c->tier, "%s", v.tier);
        c->flags = text_copy(v.flags);
        c->reason = formatted("%s: manifest: not listed in %s, so its hash cannot be verified", c->path,
                              manifest_path);
    } else { /* not listed, and not a vector at all */
        c->state = LACS_CASE_INVALID;
        c->flags = text_copy("");
        c->reason = text_copy(lacs_last_error());
    }
    lacs_vector_free(&v);
    return c->flags && c->reason ? LACS_OK : lacs_internal_error(LACS_ERR_MEMORY, c->path, "out of memory");
}

/* Without reading the file (LACS_CASES_VERIFY alone): what the manifest says. */
static int describe_from_manifest(lacs_case_entry *c, const char *manifest_path)
{
    if (!c->flags)
        c->flags = text_copy("");
    struct stat st;
    if (c->state == LACS_CASE_UNLISTED && stat(c->path, &st) == 0 && !S_ISREG(st.st_mode)) {
        tier_from_id(c->id, c->tier, sizeof c->tier);
        c->state = LACS_CASE_INVALID;
        c->reason = formatted("%s: cannot read: %s", c->path, S_ISFIFO(st.st_mode) ? "a FIFO, not a regular file"
                                                              : "not a regular file");
    } else if (c->state == LACS_CASE_UNLISTED) {
        tier_from_id(c->id, c->tier, sizeof c->tier);
        c->reason = formatted("%s: manifest: not listed in %s, so its hash cannot be verified", c->path,
                              manifest_path);
    } else {
        c->reason = text_copy("");
    }
    return c->flags && c->reason ? LACS_OK : lacs_internal_error(LACS_ERR_MEMORY, c->path, "out of memory");
}

/* Appends the files of dir/op. */
static int collect_op_folder(const char *dir, const char *op, manifest *m, lacs_case_list *list, int *capacity)
{
    char folder[PATH_MAX];
    snprintf(folder, sizeof folder, "%s/%s", dir, op);
    DIR *d = opendir(folder);
    if (!d) {
        if (errno == ENOENT || errno == ENOTDIR)
            return LACS_OK; /* this set has no case of this op */
        return lacs_internal_error(LACS_ERR_IO, folder, "cannot read the vectors folder: %s", strerror(errno));
    }
    struct dirent *entry;
    int rc = LACS_OK;
    while (rc == LACS_OK && (entry = readdir(d)) != NULL) {
        if (entry->d_name[0] == '.' || !has_suffix(entry->d_name, vector_suffix))
            continue;
        lacs_case_entry *c = append_case(list, capacity);
        if (!c) {
            rc = lacs_internal_error(LACS_ERR_MEMORY, folder, "out of memory");
            break;
        }
        c->path = formatted("%s/%s", folder, entry->d_name);
        c->id = strndup(entry->d_name, strlen(entry->d_name) - strlen(vector_suffix));
        if (!c->path || !c->id) {
            rc = lacs_internal_error(LACS_ERR_MEMORY, folder, "out of memory");
            break;
        }
        snprintf(c->op, sizeof c->op, "%s", op);
        c->state = LACS_CASE_OK;
        if (m) {
            char relative[PATH_MAX];
            snprintf(relative, sizeof relative, "%s/%s", op, entry->d_name);
            manifest_entry *e = manifest_find(m, relative);
            if (e) {
                e->matched = 1;
                snprintf(c->sha256, sizeof c->sha256, "%s", e->sha256);
                snprintf(c->tier, sizeof c->tier, "%s", e->tier);
                c->flags = entry_flags(e);
                if (!c->flags) {
                    rc = lacs_internal_error(LACS_ERR_MEMORY, folder, "out of memory");
                    break;
                }
            } else {
                c->state = LACS_CASE_UNLISTED;
            }
        }
    }
    closedir(d);
    return rc;
}

static int compare_cases(const void *a, const void *b)
{
    return strcmp(((const lacs_case_entry *)a)->id, ((const lacs_case_entry *)b)->id);
}

int lacs_cases_find(const char *dir, const char *const *ops, int n_ops, const char *tier, unsigned mode,
                    lacs_case_list *list)
{
    memset(list, 0, sizeof *list);
    const int verify = (mode & LACS_CASES_VERIFY) != 0, read = !verify || (mode & LACS_CASES_READ);
    manifest m = {0};
    if (verify && manifest_for(dir, &m) <= 0)
        return lacs_last_error()[0] && strstr(lacs_last_error(), "manifest:") ? LACS_ERR_FORMAT : LACS_ERR_IO;
    list->dir = strdup(dir);
    list->manifest = verify ? strdup(m.path) : NULL;
    int capacity = 0, count, rc = LACS_OK;
    const lacs_op_info *table = lacs_ops(&count);
    for (int i = 0; i < count && rc == LACS_OK; i++)
        if (wanted_op(ops, n_ops, table[i].name))
            rc = collect_op_folder(dir, table[i].name, verify ? &m : NULL, list, &capacity);
    /* the manifest's cases that have no file: failures, not silence */
    for (int i = 0; verify && rc == LACS_OK && i < m.n; i++) {
        const manifest_entry *e = &m.entries[i];
        if (e->matched || !wanted_op(ops, n_ops, e->op) || (tier && strcmp(tier, e->tier) != 0))
            continue;
        lacs_case_entry *c = append_case(list, &capacity);
        if (!c) {
            rc = lacs_internal_error(LACS_ERR_MEMORY, dir, "out of memory");
            break;
        }
        c->path = formatted("%s/%s", dir, e->path);
        c->id = text_copy(e->id);
        snprintf(c->op, sizeof c->op, "%s", e->op);
        snprintf(c->tier, sizeof c->tier, "%s", e->tier);
        snprintf(c->sha256, sizeof c->sha256, "%s", e->sha256);
        c->flags = entry_flags(e);
        c->reason = c->path ? formatted("%s: manifest: missing: %s lists it, the directory lacks it", c->path, m.path)
                            : NULL;
        c->state = LACS_CASE_MISSING;
        if (!c->path || !c->id || !c->flags || !c->reason)
            rc = lacs_internal_error(LACS_ERR_MEMORY, dir, "out of memory");
    }
    if (rc == LACS_OK && list->n > 1)
        qsort(list->cases, (size_t)list->n, sizeof *list->cases, compare_cases);
    int kept = 0;
    for (int i = 0; i < list->n; i++) {
        lacs_case_entry *c = &list->cases[i];
        if (rc == LACS_OK && c->state != LACS_CASE_MISSING)
            rc = read ? describe_case(c, m.path) : describe_from_manifest(c, m.path);
        const int keep = rc == LACS_OK && wanted_op(ops, n_ops, c->op) && (!tier || strcmp(tier, c->tier) == 0);
        if (keep)
            list->cases[kept++] = *c;
        else
            case_free(c);
    }
    list->n = kept;
    manifest_free(&m);
    if (rc != LACS_OK || !list->dir || (verify && !list->manifest)) {
        if (rc == LACS_OK)
            rc = lacs_internal_error(LACS_ERR_MEMORY, dir, "out of memory");
        lacs_cases_free(list);
    }
    return rc;
}

/* ---- for ctypes ---- */

lacs_case_list *lacs_cases_open(const char *dir, const char *ops, const char *tier, unsigned mode)
{
    lacs_case_list *list = calloc(1, sizeof *list);
    char *names = strdup(ops ? ops : "");
    const char *op_list[64];
    int n_ops = 0;
    if (!list || !names) {
        free(list);
        free(names);
        lacs_internal_error(LACS_ERR_MEMORY, dir, "out of memory");
        return NULL;
    }
    for (char *save = NULL, *word = strtok_r(names, ",", &save); word && n_ops < 64; word = strtok_r(NULL, ",", &save))
        op_list[n_ops++] = word;
    const int rc = lacs_cases_find(dir, op_list, n_ops, tier && tier[0] ? tier : NULL, mode, list);
    free(names);
    if (rc != LACS_OK) {
        free(list);
        return NULL;
    }
    return list;
}

void lacs_cases_close(lacs_case_list *list)
{
    if (list) {
        lacs_cases_free(list);
        free(list);
    }
}

int lacs_cases_count(const lacs_case_list *list) { return list->n; }

const lacs_case_entry *lacs_cases_get(const lacs_case_list *list, int i)
{
    return i >= 0 && i < list->n ? &list->cases[i] : NULL;
}

const char *lacs_cases_manifest(const lacs_case_list *list) { return list->manifest; }

/* ---- one file ---- */

int lacs_cases_manifest_hash(const char *file, char sha256[65], char *manifest_path, size_t manifest_size)
{
    /* FILE = DIR/<op>/<name>: DIR is its folder's parent */
    char folder[PATH_MAX], real[PATH_MAX], dir[PATH_MAX], relative[PATH_MAX];
    const char *slash = strrchr(file, '/');
    const char *name = slash ? slash + 1 : file;
    snprintf(folder, sizeof folder, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
    if (slash == file)
        snprintf(folder, sizeof folder, "/");
    if (!realpath(folder, real))
        return lacs_internal_error(LACS_ERR_IO, file, "cannot resolve its folder: %s", strerror(errno));
    char *op_slash = strrchr(real, '/');
    if (!op_slash || !op_slash[1])
        return lacs_internal_error(LACS_ERR_IO, file, "manifest: cannot be verified: not in a folder <op>/ of a "
                                   "vectors directory (--no-verify reads it anyway)");
    if ((size_t)snprintf(relative, sizeof relative, "%s/%s", op_slash + 1, name) >= sizeof relative)
        return lacs_internal_error(LACS_ERR_IO, file, "the path is too long");
    *op_slash = '\0';
    snprintf(dir, sizeof dir, "%s", real[0] ? real : "/");
    manifest m;
    const int found = manifest_for(dir, &m);
    if (found <= 0)
        return lacs_internal_error(found < 0 && strstr(lacs_last_error(), "manifest:") ? LACS_ERR_FORMAT : LACS_ERR_IO,
                                   file, "manifest: cannot be verified: %s --no-verify to read it anyway",
                                   found == 0 ? "no MANIFEST.json covers its directory;" : "its MANIFEST.json is malformed;");
    const manifest_entry *e = manifest_find(&m, relative);
    if (!e) {
        const int rc = lacs_internal_error(LACS_ERR_FORMAT, file, "manifest: not listed in %s, so its hash cannot be "
                                           "verified (--no-verify reads it anyway)", m.path);
        manifest_free(&m);
        return rc;
    }
    snprintf(sha256, 65, "%s", e->sha256);
    snprintf(manifest_path, manifest_size, "%s", m.path);
    manifest_free(&m);
    return LACS_OK;
}
