/*
 * arenas.c -- per-CPU arenas must not strand memory: a heap filled from one
 * CPU, emptied, then filled from another CPU holds as many blocks, because
 * an arena that cannot make a slab takes blocks from the other arenas and
 * then reclaims empty slabs.  Threads that start on one CPU still get
 * arenas of their own.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

static size_t fill(pheap *h, size_t size, pheap_off *v, size_t cap)
{
    size_t n = 0;
    while (n < cap && (v[n] = pheap_alloc(h, size)) != 0)
        n++;
    return n;
}

typedef struct round {
    pheap *h;
    int cpu;
    size_t size, n;
    pheap_off *v;
    size_t cap;
} round;

/* One round in its own thread, pinned: fill, check, free everything. */
static void *run_round(void *arg)
{
    round *r = arg;
    if (ph_test_pin_cpu(r->cpu) != 0)
        return NULL;
    r->n = fill(r->h, r->size, r->v, r->cap);
    if (pheap_errno() != PHEAP_ENOMEM)
        ph_test_fail(__FILE__, __LINE__, "fill stopped with %d: %s", pheap_errno(), pheap_errmsg());
    for (size_t i = 0; i < r->n; i++)
        if (pheap_free(r->h, r->v[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "free: %s", pheap_errmsg());
    return NULL;
}

TEST(fill_from_one_cpu_then_another)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || ph_test_pin_cpu(0) != 0) {
        fprintf(stderr, "  needs two CPUs; nothing to check here\n");
        return;
    }
    const char *path = ph_test_path("arenas.heap");
    unlink(path);
    /* Placement is what is checked here, not durability: no flushing. */
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    size_t cap = 2 * (4u << 20) / 64; /* more than 4 MiB of data can hold */
    pheap_off *v = calloc(cap, sizeof(*v));
    REQUIRE(v);
    static const size_t sizes[] = {64, 1000, 64};
    static const int cpus[] = {0, 1, 1};
    size_t first = 0;
    for (int k = 0; k < 3; k++) {
        round r = {h, cpus[k], sizes[k], 0, v, cap};
        pthread_t t;
        pthread_create(&t, NULL, run_round, &r);
        pthread_join(t, NULL);
        REQUIRE(r.n > 0);
        if (k == 0)
            first = r.n;
        if (k == 2)
            CHECK(r.n >= first); /* the same size class, from the other CPU's arena */
        REQUIRE_OK(pheap_check(h, NULL));
    }
    free(v);
    pheap_close(h);
}

/* Two threads that start on the same CPU get different home arenas, so
 * they do not share slabs (or bitmap words) for life. */
typedef struct first_block {
    pheap *h;
    pheap_off off;
    int done;
    pthread_barrier_t *both_allocated;
} first_block;

static void *alloc_on_cpu0(void *arg)
{
    first_block *f = arg;
    f->off = ph_test_pin_cpu(0) == 0 ? pheap_alloc(f->h, 64) : 0;
    __atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
    pthread_barrier_wait(f->both_allocated); /* stay alive: a thread leaving frees its arena */
    return NULL;
}

TEST(threads_starting_on_one_cpu_get_their_own_arenas)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        fprintf(stderr, "  needs two CPUs; nothing to check here\n");
        return;
    }
    const char *path = ph_test_path("arenas2.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    pthread_barrier_t b;
    pthread_barrier_init(&b, NULL, 2);
    first_block f[2] = {{h, 0, 0, &b}, {h, 0, 0, &b}};
    pthread_t t[2];
    /* One after the other, so that the second sees the first's choice. */
    pthread_create(&t[0], NULL, alloc_on_cpu0, &f[0]);
    while (!__atomic_load_n(&f[0].done, __ATOMIC_ACQUIRE))
        sched_yield();
    pthread_create(&t[1], NULL, alloc_on_cpu0, &f[1]);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&b);
    REQUIRE(f[0].off && f[1].off);
    uint64_t chunk0 = (f[0].off - st.data_offset) >> 16, chunk1 = (f[1].off - st.data_offset) >> 16;
    CHECK(chunk0 != chunk1);
    pheap_close(h);
}
