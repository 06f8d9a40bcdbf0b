/*
 * wl_recovery.c -- time to reopen a heap holding `ops` live blocks, after a
 * crash and after a clean close (Ralloc and PMA measure recovery this way).
 * A child process creates the heap and allocates the blocks, then either
 * dies by SIGKILL with the heap open or closes it cleanly; the parent times
 * the reopen (with recovery) and the first allocation after it, which is
 * where allocators that rebuild their state lazily pay for it.
 * Persistent allocators only.
 *
 * recovery-gc is the same for allocators that recover by tracing (pheap's
 * GC mode): the child builds a graph of `ops` reachable blocks with some
 * garbage among them and dies by SIGKILL; the parent times the open and
 * the trace (with `threads` marking threads) apart, checks that the trace
 * found every reachable block, then closes cleanly and times a clean open
 * of the same heap.
 */
#include "bench.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef int (*build_fn)(const bench_run *run);

/* recovery: `ops` blocks, none reachable. */
static int build_blocks(const bench_run *run)
{
    const bench_allocator *a = run->alloc;
    const bench_params *p = run->p;

    for (uint64_t i = 0; i < p->ops; i++) {
        if (!a->alloc(p->size_min)) {
            bench_fail_alloc(p->size_min, i);
            return -1;
        }
    }
    return 0;
}

static void child(const bench_run *run, build_fn build, int crash, int fd)
{
    const bench_allocator *a = run->alloc;
    char msg[256];

    if (a->init(&run->heap) != 0)
        goto fail;
    if (a->thread_attach)
        a->thread_attach(0);
    if (build(run) != 0)
        goto fail;
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

static int make_heap(const bench_run *run, build_fn build, int crash)
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
        child(run, build, crash, fds[1]);
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

    if (make_heap(run, build_blocks, crash) != 0)
        return -1;
    uint64_t t0 = bench_now_ns();
    if (a->reopen(&run->heap) != 0)
        return -1;
    if (a->recover && a->recover(0, NULL) != 0) { /* a tracing allocator: part of the reopen */
        a->close();
        return -1;
    }
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

/* ---- recovery-gc ---------------------------------------------------------------- */

#define GARBAGE_EVERY 8      /* one unreachable block after every 8 reachable */

static uint64_t garbage_blocks(uint64_t reachable)
{
    return reachable / GARBAGE_EVERY;
}

/* Fills a block with odd words: data that is no block's offset. */
static void fill(uint64_t *w, size_t words, uint64_t seed)
{
    for (size_t i = 0; i < words; i++)
        w[i] = (seed + i) * 0x9e3779b97f4a7c15ull | 1;
}

/* The graph of recovery-gc: `ops` reachable blocks of size_min bytes.  The
 * root block holds the head of a list (half of the others, linked in a
 * random order, so that the trace jumps around the heap) in its first word
 * and the root of a binary tree (the other half, in allocation order:
 * node j's children are 2j+1 and 2j+2) in its second.  Links are the
 * handles (pheap: offsets), other words data.  Nothing is flushed: the
 * child dies by SIGKILL, which loses no store on tmpfs or DAX. */
static int build_graph(const bench_run *run)
{
    const bench_allocator *a = run->alloc;
    const bench_params *p = run->p;
    uint64_t n = p->ops, done = 0;
    size_t words = p->size_min / 8;
    bench_handle *h = bench_xcalloc(n, sizeof *h);
    uint32_t *perm = NULL;
    int rc = -1;

    if (!h)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        if (!(h[i] = a->alloc(p->size_min)))
            goto oom;
        fill(a->addr(h[i]), words, i);
        done++;
        if (i % GARBAGE_EVERY == GARBAGE_EVERY - 1) {
            bench_handle g = a->alloc(p->size_min);
            if (!g)
                goto oom;
            fill(a->addr(g), words, i);
            done++;
        }
    }
    uint64_t nl = (n - 1) / 2, nt = n - 1 - nl;
    const bench_handle *list = h + 1, *tree = h + 1 + nl;
    if (!(perm = bench_xcalloc(nl ? nl : 1, sizeof *perm)))
        goto out;
    for (uint64_t k = 0; k < nl; k++)
        perm[k] = (uint32_t)k;
    uint64_t rng = p->seed;
    bench_shuffle(perm, nl, &rng);
    uint64_t *root = a->addr(h[0]);
    root[0] = nl ? list[perm[0]] : 0;
    root[1] = nt ? tree[0] : 0;
    for (uint64_t k = 0; k < nl; k++)
        ((uint64_t *)a->addr(list[perm[k]]))[0] = k + 1 < nl ? list[perm[k + 1]] : 0;
    for (uint64_t j = 0; j < nt; j++) {
        uint64_t *w = a->addr(tree[j]);
        w[0] = 2 * j + 1 < nt ? tree[2 * j + 1] : 0;
        w[1] = 2 * j + 2 < nt ? tree[2 * j + 2] : 0;
    }
    rc = a->root_set(h[0]);
    goto out;
oom:
    bench_fail_alloc(p->size_min, done);
out:
    free(perm);
    free(h);
    return rc;
}

int wl_recovery_gc(const bench_run *run, bench_metrics *out)
{
    const bench_allocator *a = run->alloc;
    const bench_params *p = run->p;
    uint64_t marked = 0;

    if (p->size_min < 16 || p->ops > UINT32_MAX) {
        bench_fail("recovery-gc needs blocks of at least 16 bytes and at most 2^32 of them");
        return -1;
    }
    if (make_heap(run, build_graph, 1) != 0)
        return -1;
    uint64_t t0 = bench_now_ns();
    if (a->reopen(&run->heap) != 0)
        return -1;
    uint64_t t1 = bench_now_ns();
    int rc = a->recover(p->threads, &marked);
    uint64_t t2 = bench_now_ns();
    if (rc == 0 && marked != p->ops) {
        bench_fail("recovery found %llu reachable blocks, the graph has %llu",
                   (unsigned long long)marked, (unsigned long long)p->ops);
        rc = -1;
    }
    if (a->close() != 0 || rc != 0)
        return -1;

    /* The same heap, closed cleanly: its open needs no trace. */
    uint64_t t3 = bench_now_ns();
    if (a->reopen(&run->heap) != 0)
        return -1;
    uint64_t t4 = bench_now_ns();
    if (a->thread_attach)
        a->thread_attach(0);
    bench_handle h = a->alloc(p->size_min);
    uint64_t t5 = bench_now_ns();
    if (h)
        a->free(h);
    if (a->thread_detach)
        a->thread_detach();
    if (a->close() != 0)
        return -1;
    if (!h) {
        bench_fail("first alloc after the clean reopen failed");
        return -1;
    }

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned cores = cpus > 0 && (unsigned long)cpus < p->threads ? (unsigned)cpus : p->threads;
    double rate = (double)p->ops / ((double)(t2 - t1) / 1e9);
    bench_metric(out, "reachable_blocks", (double)p->ops);
    bench_metric(out, "garbage_blocks", (double)garbage_blocks(p->ops));
    bench_metric(out, "gc_open_ns", (double)(t1 - t0));
    bench_metric(out, "recover_ns", (double)(t2 - t1));
    bench_metric(out, "blocks_per_s", rate);
    bench_metric(out, "blocks_per_s_core", rate / cores);
    bench_metric(out, "clean_open_ns", (double)(t4 - t3));
    bench_metric(out, "clean_first_alloc_ns", (double)(t5 - t4));
    return 0;
}
