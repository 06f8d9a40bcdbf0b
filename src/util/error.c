/*
 * error.c -- error codes, their descriptions, and the thread-local slot.
 */
#include "util/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pheap.h"
#include "util/util.h"

static __thread int tls_err;
static __thread char tls_msg[512];

int ph_err(int err, const char *fmt, ...)
{
    /* Formatted apart first: an argument may be the current message
     * (pheap_errmsg()), which formatting in place would overwrite. */
    char msg[sizeof(tls_msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tls_err = err;
    memcpy(tls_msg, msg, sizeof(msg));
    return err;
}

int ph_err_from_errno(int e)
{
    switch (e) {
    case ENOENT: return PHEAP_ENOENT;
    case EEXIST: return PHEAP_EEXIST;
    case EACCES:
    case EPERM:
    case EROFS: return PHEAP_EACCES;
    case EISDIR: return PHEAP_EISDIR;
    case ENOMEM: return PHEAP_ENOMEM;
    case EWOULDBLOCK: return PHEAP_EBUSY;
    case EINVAL: return PHEAP_EINVAL;
    case EOPNOTSUPP: return PHEAP_ENOTSUP;
    case ENOSPC:
    case EDQUOT: return PHEAP_ENOSPC;
    default: return PHEAP_EIO;
    }
}

int ph_err_sys(const char *what, const char *path)
{
    int e = errno;
    return ph_err(ph_err_from_errno(e), "%s %s: %s", what, path ? path : "", strerror(e));
}

void ph_debug_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "pheap: internal check failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

ph_export int pheap_errno(void)
{
    return tls_err;
}

ph_export const char *pheap_errmsg(void)
{
    return tls_err ? tls_msg : "no error";
}

ph_export const char *pheap_strerror(int err)
{
    switch (err) {
    case PHEAP_OK: return "success";
    case PHEAP_EINVAL: return "invalid argument";
    case PHEAP_ENOMEM: return "out of memory";
    case PHEAP_ENOENT: return "not found";
    case PHEAP_EEXIST: return "heap file already exists";
    case PHEAP_EACCES: return "permission denied";
    case PHEAP_EBUSY: return "heap is open elsewhere";
    case PHEAP_EIO: return "operating system error";
    case PHEAP_ENOTHEAP: return "not a pheap heap file";
    case PHEAP_ETRUNCATED: return "heap file truncated";
    case PHEAP_ECHECKSUM: return "metadata checksum mismatch";
    case PHEAP_EVERSION: return "unsupported heap format version";
    case PHEAP_ELAYOUT: return "inconsistent heap layout";
    case PHEAP_EEMPTY: return "empty file";
    case PHEAP_EISDIR: return "is a directory";
    case PHEAP_ERDONLY: return "heap opened read-only";
    case PHEAP_ENOSPC: return "no space left (file system or table full)";
    case PHEAP_ENAME: return "invalid name";
    case PHEAP_ENOTSUP: return "not supported";
    case PHEAP_ECORRUPT: return "heap metadata corrupted";
    case PHEAP_ERANGE: return "offset outside the heap";
    case PHEAP_EDOUBLEFREE: return "block already free (double free)";
    case PHEAP_EINTERIOR: return "offset inside a block, not at its start";
    case PHEAP_ENOTALLOC: return "offset was never allocated";
    case PHEAP_EFORKED: return "heap handle inherited through fork()";
    case PHEAP_ECANCELED: return "allocation canceled by its initialiser";
    case PHEAP_ENOTLIVE: return "not in a live block (free or never allocated)";
    case PHEAP_ENOTX: return "no transaction in progress";
    case PHEAP_EABORTED: return "transaction aborted";
    case PHEAP_ERECOVER: return "recovery needed (GC mode): call pheap_recover";
    case PHEAP_EPERM: return "not the heap's owner";
    case PHEAP_EROMODE: return "heap is in read-only mode";
    default: return "unknown error";
    }
}
