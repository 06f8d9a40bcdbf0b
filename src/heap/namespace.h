/*
 * namespace.h -- the heap directory and the bare heap names pheap_open
 * resolves in it (namespace.c; the public calls are pheap_dir and
 * pheap_path).
 */
#ifndef PH_HEAP_NAMESPACE_H
#define PH_HEAP_NAMESPACE_H

#include "pheap.h"

/* 1 if `path` is a bare heap name (no '/'), which pheap_open looks up in
 * the heap directory. */
int ph_namespace_is_name(const char *path);

/* The file pheap_open opens for `path`: a copy of `path` when it holds a
 * '/', else <heap directory>/<name>.heap (".heap" not doubled), the
 * directory created first (0700, parents too) when `create`.  *out is
 * malloc'd.  Errors: PHEAP_EINVAL (empty path; the heap directory is not
 * a directory), PHEAP_ENAME (".", "..", a name too long), PHEAP_ENOENT (no
 * home directory), those of creating the directory, PHEAP_ENOMEM. */
int ph_namespace_resolve(const char *path, int create, char **out);

#endif
