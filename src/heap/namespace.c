/*
 * namespace.c -- where a user's heaps live.  The heap directory is
 * $PHEAP_DIR, else $XDG_DATA_HOME/pheap, else ~/.local/share/pheap; a bare
 * name given to pheap_open ("mydata": no '/') is the file mydata.heap in
 * it.  Anything with a '/' is a path and is left alone.
 */
#include "heap/namespace.h"

#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "os/os.h"
#include "util/error.h"
#include "util/util.h"

#define SUFFIX ".heap"
#define SUFFIX_LEN (sizeof(SUFFIX) - 1)

/* Joins a and b into buf[len]; PHEAP_ENAME when they do not fit. */
static int join(char *buf, size_t len, const char *a, const char *b, const char *c)
{
    int n = snprintf(buf, len, "%s%s%s", a, b, c);
    if (n < 0 || (size_t)n >= len)
        return ph_err(PHEAP_ENAME, "heap directory %s%s: longer than the %zu bytes given", a, b, len);
    return 0;
}

/* The user's home: $HOME, else the password database. */
static int home_dir(char *buf, size_t len)
{
    const char *home = getenv("HOME");
    if (home && *home)
        return join(buf, len, home, "", "");
    struct passwd pw, *found = NULL;
    char db[4096];
    if (getpwuid_r(getuid(), &pw, db, sizeof(db), &found) != 0 || !found || !pw.pw_dir ||
        !*pw.pw_dir)
        return ph_err(PHEAP_ENOENT, "no heap directory: PHEAP_DIR, XDG_DATA_HOME and HOME are "
                      "unset and user %u has no home directory; set PHEAP_DIR",
                      (unsigned)getuid());
    return join(buf, len, pw.pw_dir, "", "");
}

/* Which variable chose the directory, for messages. */
static const char *dir_source(void)
{
    const char *v = getenv("PHEAP_DIR");
    if (v && *v)
        return "PHEAP_DIR";
    v = getenv("XDG_DATA_HOME");
    return v && *v == '/' ? "XDG_DATA_HOME" : "the home directory";
}

ph_export int pheap_dir(char *buf, size_t len)
{
    if (!buf || !len)
        return ph_err(PHEAP_EINVAL, "pheap_dir: no buffer");
    const char *v = getenv("PHEAP_DIR");
    int rc;
    if (v && *v) {
        rc = join(buf, len, v, "", "");
    } else if ((v = getenv("XDG_DATA_HOME")) && *v == '/') {
        rc = join(buf, len, v, "/pheap", ""); /* a relative one is ignored, as XDG says */
    } else {
        char home[PATH_MAX];
        rc = home_dir(home, sizeof(home));
        if (!rc) /* a home of "/" gives /.local/share/pheap */
            rc = join(buf, len, home[1] ? home : "", "/.local/share/pheap", "");
    }
    if (rc)
        return rc;
    for (size_t n = strlen(buf); n > 1 && buf[n - 1] == '/'; n--)
        buf[n - 1] = 0; /* "/data/heaps/" names the same directory */
    return 0;
}

int ph_namespace_is_name(const char *path)
{
    return path && !strchr(path, '/');
}

/* Checks `name` (no '/') and returns its file name's length. */
static int check_name(const char *name, size_t *file_len)
{
    size_t n = strlen(name);
    if (!n)
        return ph_err(PHEAP_EINVAL, "pheap_open: empty path");
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return ph_err(PHEAP_ENAME, "'%s' is not a heap name (a name has no '/' and is neither "
                      "'.' nor '..'); write ./%s for a path", name, name);
    int suffixed = n > SUFFIX_LEN && !strcmp(name + n - SUFFIX_LEN, SUFFIX);
    *file_len = n + (suffixed ? 0 : SUFFIX_LEN);
    if (*file_len > PHEAP_HEAP_NAME_MAX)
        return ph_err(PHEAP_ENAME, "heap name of %zu bytes: the file name %.16s...%s may have at "
                      "most %d bytes", n, name, suffixed ? "" : SUFFIX, PHEAP_HEAP_NAME_MAX);
    return 0;
}

/* The file of `name` in the heap directory, into buf[len]. */
static int name_file(const char *name, int create, char *buf, size_t len)
{
    size_t file_len = 0;
    int rc = check_name(name, &file_len);
    if (!rc)
        rc = pheap_dir(buf, len);
    if (rc)
        return rc;
    int is_dir = ph_os_is_dir(buf);
    if (is_dir < 0)
        return ph_err(PHEAP_EINVAL, "heap directory %s (from %s) is not a directory", buf, dir_source());
    if (!is_dir && create) {
        rc = ph_os_make_dirs(buf, 0700);
        if (rc == PHEAP_EEXIST)
            return ph_err(PHEAP_EINVAL, "heap directory %s (from %s): %s", buf, dir_source(),
                          pheap_errmsg());
        if (rc)
            return rc;
    }
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", buf);
    int m = snprintf(buf, len, "%s/%s%s", dir, name, file_len == strlen(name) ? "" : SUFFIX);
    if (m < 0 || (size_t)m >= len)
        return ph_err(PHEAP_ENAME, "%s/%s: longer than the %zu bytes given", dir, name, len);
    return 0;
}

/* The file `path` names, into buf[len]: a name's file in the heap
 * directory (made when `create`), or the path itself. */
static int resolve(const char *path, int create, char *buf, size_t len)
{
    if (ph_namespace_is_name(path))
        return name_file(path, create, buf, len);
    if (strlen(path) >= len)
        return ph_err(PHEAP_ENAME, "%s: longer than the %zu bytes given", path, len);
    memcpy(buf, path, strlen(path) + 1);
    return 0;
}

int ph_namespace_resolve(const char *path, int create, char **out)
{
    *out = NULL;
    if (!path || !*path)
        return ph_err(PHEAP_EINVAL, "pheap_open: empty path");
    char buf[PATH_MAX];
    int rc = resolve(path, create, buf, sizeof(buf));
    if (rc)
        return rc;
    *out = strdup(buf);
    return *out ? 0 : ph_err(PHEAP_ENOMEM, "out of memory");
}

ph_export int pheap_path(const char *path, char *buf, size_t len)
{
    if (!path || !*path || !buf || !len)
        return ph_err(PHEAP_EINVAL, "pheap_path: empty path or no buffer");
    return resolve(path, 0, buf, len);
}
