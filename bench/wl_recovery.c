/*
 * wl_recovery.c -- time to reopen a heap holding `ops` live blocks, after a
 * crash and after a clean close (Ralloc and PMA measure recovery this way).
 * A child process creates the heap and allocates the blocks, then either
 * dies by SIGKILL with the heap open or closes it cleanly; the parent times
 * the reopen (with recovery) and the first allocation after it, which is
 * where allocators that rebuild their state lazily pay for it.
 * Persistent allocators only.
 */
#include "bench.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void child(const bench_run *run, int crash, int fd)
{
    const bench_allocator *a = run->alloc;
    const bench_params *p = run->p;
    char msg[256];

    if (a->init(&run->heap) != 0)
        goto fail;
    if (a->thread_attach)
        a->thread_attach(0);
    for (uint64_t i = 0; i < p->ops; i++) {
        if (!a->alloc(p->size_min)) {
            bench_fail_alloc(p->size_min, i);
            goto fail;
        }
    }
    if (crash)
        raise(SIGKILL);
    if (a->close() != 0)
        goto fail;
    _exit(0);
fail:
    snprintf(msg, sizeof msg, "%s", bench_error());
    if (write(fd, msg, strlen(msg)) < 0)
        _exit(3);
    _exit(2);
}

static int make_heap(const bench_run *run, int crash)
{
    int fds[2];
    char msg[256] = "";
    int status = 0;

    unlink(run->heap.path);
    if (pipe(fds) != 0) {
        bench_fail("pipe failed");
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        bench_fail("fork failed");
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        child(run, crash, fds[1]);
    }
    close(fds[1]);
    ssize_t got = read(fds[0], msg, sizeof msg - 1);
    msg[got > 0 ? got : 0] = 0;
    close(fds[0]);
    waitpid(pid, &status, 0);
    int expected = crash ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                         : WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!expected) {
        bench_fail("heap-making child failed: %s", msg[0] ? msg : "no message");
        return -1;
    }
    return 0;
}

static int reopen_timed(const bench_run *run, int crash, bench_metrics *out)
{
    const bench_allocator *a = run->alloc;
    static const char *const names[2][2] = {
        { "clean_open_ns", "clean_first_alloc_ns" },
        { "crash_open_ns", "crash_first_alloc_ns" },
    };

    if (make_heap(run, crash) != 0)
        return -1;
    uint64_t t0 = bench_now_ns();
    if (a->reopen(&run->heap) != 0)
        return -1;
    uint64_t t1 = bench_now_ns();
    if (a->thread_attach)
        a->thread_attach(0);
    bench_handle h = a->alloc(run->p->size_min);
    uint64_t t2 = bench_now_ns();
    if (h)
        a->free(h);
    if (a->thread_detach)
        a->thread_detach();
    int rc = a->close();
    unlink(run->heap.path);
    if (!h) {
        bench_fail("first alloc after reopen failed");
        return -1;
    }
    if (rc != 0)
        return -1;
    bench_metric(out, names[crash][0], (double)(t1 - t0));
    bench_metric(out, names[crash][1], (double)(t2 - t1));
    return 0;
}

int wl_recovery(const bench_run *run, bench_metrics *out)
{
    if (reopen_timed(run, 1, out) != 0 || reopen_timed(run, 0, out) != 0)
        return -1;
    bench_metric(out, "live_blocks", (double)run->p->ops);
    return 0;
}
