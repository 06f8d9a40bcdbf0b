/*
 * group_sync.c -- the msync back end's group commit (persist.h): a fence
 * waits for one file sync that started after it; threads fencing at once
 * share syncs.  Counted in pheap_stats.file_syncs: at most one per fence
 * that had something flushed, none for the other back ends; sixteen
 * threads on two cores all get through (no lost wakeup), and the heap is
 * whole after them and after a reopen.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

enum { THREADS = 16, OPS = 150 };

static pheap *heap;
static pheap_off slots[THREADS][OPS];

static void *worker(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < OPS; i++) {
        slots[k][i] = pheap_alloc(heap, 16 + 8 * (i % 50));
        if (slots[k][i] && i % 3 == 0 && pheap_free(heap, slots[k][i]) == 0)
            slots[k][i] = 0;
    }
    return NULL;
}

static pheap *open_with(const char *path, unsigned flush, int create)
{
    pheap_options o = {.flags = create ? PHEAP_CREATE : 0, .size = 16u << 20, .flush = flush};
    pheap *h = NULL;
    return pheap_open(path, &o, &h) == 0 ? h : NULL;
}

TEST(one_thread_syncs_once_per_fence_with_something_flushed)
{
    const char *path = ph_test_path("gsync-one.heap");
    pheap *h = open_with(path, PHEAP_FLUSH_MSYNC, 1);
    REQUIRE(h);
    struct pheap_stats a, b;
    REQUIRE(pheap_alloc(h, 64)); /* makes the slab */
    pheap_stats(h, &a);
    pheap_off x = pheap_alloc(h, 64);
    REQUIRE(x);
    pheap_stats(h, &b);
    CHECK_EQ(b.fences - a.fences, 1);
    CHECK_EQ(b.file_syncs - a.file_syncs, 1); /* one fence, one sync */
    pheap_persist(h, pheap_direct(h, x), 0);  /* nothing flushed: no sync */
    pheap_stats(h, &a);
    CHECK_EQ(a.file_syncs, b.file_syncs);
    CHECK(a.file_syncs <= a.fences);
    pheap_close(h);

    h = open_with(path, PHEAP_FLUSH_NONE, 0);
    REQUIRE(h);
    REQUIRE(pheap_alloc(h, 64));
    pheap_stats(h, &a);
    CHECK(a.fences > 0);
    CHECK_EQ(a.file_syncs, 0);
    pheap_close(h);
}

TEST(sixteen_threads_share_syncs_and_all_get_through)
{
    const char *path = ph_test_path("gsync-many.heap");
    heap = open_with(path, PHEAP_FLUSH_MSYNC, 1);
    REQUIRE(heap);
    pthread_t t[THREADS];
    for (uintptr_t k = 0; k < THREADS; k++)
        REQUIRE(pthread_create(&t[k], NULL, worker, (void *)k) == 0);
    for (unsigned k = 0; k < THREADS; k++)
        pthread_join(t[k], NULL);
    struct pheap_stats st;
    pheap_stats(heap, &st);
    uint64_t live = 0;
    for (unsigned k = 0; k < THREADS; k++)
        for (unsigned i = 0; i < OPS; i++)
            live += slots[k][i] != 0;
    CHECK_EQ(live, (uint64_t)THREADS * (OPS - OPS / 3));
    CHECK_EQ(st.live_blocks, live);
    CHECK(st.file_syncs > 0 && st.file_syncs <= st.fences);
    printf("  %llu fences, %llu file syncs\n", (unsigned long long)st.fences,
           (unsigned long long)st.file_syncs);
    CHECK_EQ(pheap_check(heap, NULL), 0);
    REQUIRE_OK(pheap_close(heap));
    heap = open_with(path, PHEAP_FLUSH_MSYNC, 0);
    REQUIRE(heap);
    pheap_stats(heap, &st);
    CHECK_EQ(st.live_blocks, live);
    CHECK_EQ(pheap_check(heap, NULL), 0);
    pheap_close(heap);
}

static int stop_workers; /* atomic */

static void *churn(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop_workers, __ATOMIC_ACQUIRE)) {
        pheap_off o = pheap_alloc(heap, 64);
        if (o)
            pheap_free(heap, o);
    }
    return NULL;
}

/* A fork while other threads wait in a fence: the child's copy of the
 * group commit counts waiters that do not exist in it, and its
 * pheap_close must not wait for them. */
TEST(a_fork_child_closes_while_the_parent_fences)
{
    const char *path = ph_test_path("gsync-fork.heap");
    heap = open_with(path, PHEAP_FLUSH_MSYNC, 1);
    REQUIRE(heap);
    pthread_t t[6];
    __atomic_store_n(&stop_workers, 0, __ATOMIC_RELEASE);
    for (int k = 0; k < 6; k++)
        REQUIRE(pthread_create(&t[k], NULL, churn, NULL) == 0);
    int hung = 0;
    for (int i = 0; i < 20; i++) {
        usleep(2000);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            alarm(5);
            _exit(pheap_close(heap) == 0 ? 0 : 1);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        hung += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    __atomic_store_n(&stop_workers, 1, __ATOMIC_RELEASE);
    for (int k = 0; k < 6; k++)
        pthread_join(t[k], NULL);
    CHECK_EQ(hung, 0);
    CHECK_EQ(pheap_check(heap, NULL), 0);
    pheap_close(heap);
}
