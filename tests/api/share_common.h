/*
 * share_common.h -- what the tests of processes sharing a heap have in
 * common: heaps made and opened for sharing, children started with a
 * pipe each way, their exit status.
 */
#ifndef PH_TEST_SHARE_COMMON_H
#define PH_TEST_SHARE_COMMON_H

#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define MB (1u << 20)

static inline const char *make_heap(const char *name, uint64_t size)
{
    const char *path = ph_test_path(name);
    pheap *h = ph_test_create(path, size);
    if (!h)
        return NULL;
    pheap_close(h);
    return path;
}

static inline pheap *open_shared(const char *path)
{
    pheap_options o = {.flags = PHEAP_SHARED};
    pheap *h = NULL;
    int rc = pheap_open(path, &o, &h);
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "shared open of %s: %s", path, pheap_errmsg());
    return h;
}

/* A new heap `name` of `size` bytes (*path), opened for sharing. */
static inline pheap *shared_heap(const char *name, uint64_t size, const char **path)
{
    *path = make_heap(name, size);
    return *path ? open_shared(*path) : NULL;
}

/* A child's open for sharing: exits with status 2 when it fails. */
static inline pheap *child_open(const char *path)
{
    pheap_options o = {.flags = PHEAP_SHARED};
    pheap *h;
    if (pheap_open(path, &o, &h))
        _exit(2);
    return h;
}

/* A child of a test: the pipe ends it uses, and its pid. */
typedef struct {
    int pid;
    int to_child, from_child;
} child;

static inline int send_u64(int fd, uint64_t v)
{
    return write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? 0 : -1;
}

static inline uint64_t recv_u64(int fd)
{
    uint64_t v = 0;
    return read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? v : ~0ull;
}

/* Starts fn(path, in, out) in a child process. */
static inline child start(void (*fn)(const char *, int, int), const char *path)
{
    int a[2], b[2];
    child c = {-1, -1, -1};
    if (pipe(a) || pipe(b))
        return c;
    fflush(NULL);
    c.pid = fork();
    if (c.pid == 0) {
        close(a[1]);
        close(b[0]);
        fn(path, a[0], b[1]);
        _exit(0);
    }
    close(a[0]);
    close(b[1]);
    c.to_child = a[1];
    c.from_child = b[0];
    return c;
}

static inline int finish(child *c)
{
    close(c->to_child);
    close(c->from_child);
    int st = 0;
    waitpid(c->pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
