/*
 * alloc_threads.c -- sixteen threads pinned to two CPUs allocate and free
 * blocks of mixed sizes, and pass about half of their blocks to another
 * thread that frees them (cross-thread frees).  Every block is patterned
 * and checked before its free, so overlapping blocks show.  At the end
 * nothing is live, pheap_check passes, and again after a reopen.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { ITERS = 20000 };
#else
enum { ITERS = 100000 };
#endif
enum { THREADS = 16, HELD = 128, TSLOTS = 32 };

typedef struct block {
    pheap_off off;
    size_t size;
    uint64_t seed;
} block;

/* A thread's inbox: blocks other threads handed over, under its lock. */
typedef struct inbox {
    pthread_mutex_t lock;
    block *items;
    size_t n, cap;
} inbox;

typedef struct worker {
    unsigned id;
    uint64_t rng;
    pheap_off *slots;      /* TSLOTS words in the heap, this thread's */
    block held[HELD];      /* held[k] for k < TSLOTS is also in slots[k] */
    unsigned nheld;
    unsigned long allocs, frees, handed, received;
    int failed;
} worker;

static pheap *h;
static inbox boxes[THREADS];
static worker workers[THREADS];
static pthread_barrier_t done_barrier;
static unsigned running;            /* threads still in their main loop */
static uint64_t peak_live;         /* largest live_bytes seen, sampled */

static uint64_t next(worker *w)
{
    return ph_test_rand(&w->rng);
}

static size_t random_size(worker *w)
{
    uint64_t r = next(w) % 1000;
    if (r < 700)
        return 1 + next(w) % 512;
    if (r < 970)
        return 513 + next(w) % 8000;
    if (r < 997)
        return 8513 + next(w) % 60000;
    return 70000 + next(w) % 250000;
}

#define WFAIL(w, ...) ((w)->failed++ ? (void)0 : ph_test_fail(__FILE__, __LINE__, __VA_ARGS__))

/* Checks the block's pattern and frees it (by slot when k < TSLOTS). */
static void release(worker *w, block *b, int k)
{
    if (!ph_test_intact(pheap_direct(h, b->off), b->size, b->seed))
        WFAIL(w, "thread %u: block %llu (%zu bytes) overwritten", w->id,
              (unsigned long long)b->off, b->size);
    int rc = k >= 0 && k < TSLOTS ? pheap_free_from(h, &w->slots[k]) : pheap_free(h, b->off);
    if (rc)
        WFAIL(w, "thread %u: free %llu: %s", w->id, (unsigned long long)b->off, pheap_errmsg());
    w->frees++;
}

static void drain_inbox(worker *w)
{
    inbox *in = &boxes[w->id];
    pthread_mutex_lock(&in->lock);
    block *items = in->items;
    size_t n = in->n;
    in->items = NULL;
    in->n = in->cap = 0;
    pthread_mutex_unlock(&in->lock);
    for (size_t i = 0; i < n; i++)
        release(w, &items[i], -1);
    w->received += n;
    free(items);
}

static void hand_over(worker *w, unsigned to, block b)
{
    inbox *in = &boxes[to];
    pthread_mutex_lock(&in->lock);
    if (in->n == in->cap) {
        in->cap = in->cap ? 2 * in->cap : 64;
        in->items = realloc(in->items, in->cap * sizeof(block));
    }
    if (in->items)
        in->items[in->n++] = b;
    pthread_mutex_unlock(&in->lock);
    w->handed++;
}

static void allocate(worker *w)
{
    unsigned k = w->nheld;
    block b = {0, random_size(w), (uint64_t)w->id << 48 | w->allocs};
    if (k < TSLOTS && (next(w) & 1)) {
        if (pheap_alloc_to(h, b.size, &w->slots[k])) {
            WFAIL(w, "thread %u: alloc_to %zu: %s", w->id, b.size, pheap_errmsg());
            return;
        }
        b.off = w->slots[k];
    } else if (!(b.off = pheap_alloc(h, b.size))) {
        WFAIL(w, "thread %u: alloc %zu: %s", w->id, b.size, pheap_errmsg());
        return;
    } else if (k < TSLOTS) {
        w->slots[k] = b.off; /* freed through the slot later; no crash here */
    }
    if (pheap_usable_size(h, b.off) < b.size)
        WFAIL(w, "thread %u: usable size of %llu below %zu", w->id, (unsigned long long)b.off,
              b.size);
    ph_test_fill(pheap_direct(h, b.off), b.size, b.seed);
    w->held[w->nheld++] = b;
    w->allocs++;
}

/* Frees or hands over held[k]; the last held block fills the hole. */
static void let_go(worker *w, unsigned k)
{
    block b = w->held[k];
    if (next(w) & 1) {
        if (k < TSLOTS)
            w->slots[k] = 0;
        hand_over(w, (unsigned)(w->id + 1 + next(w) % (THREADS - 1)) % THREADS, b);
    } else {
        release(w, &b, (int)k);
    }
    unsigned last = --w->nheld;
    if (k != last) {
        w->held[k] = w->held[last];
        if (last < TSLOTS)
            w->slots[last] = 0;
        if (k < TSLOTS)
            w->slots[k] = w->held[k].off;
    }
}

static void *run(void *p)
{
    worker *w = p;
    for (unsigned i = 0; i < ITERS && !w->failed; i++) {
        if (i % 64 == 0)
            drain_inbox(w);
        if (i % 997 == 0) { /* statistics read while others allocate */
            struct pheap_stats st;
            pheap_stats(h, &st);
            uint64_t peak = __atomic_load_n(&peak_live, __ATOMIC_RELAXED);
            while (st.live_bytes > peak &&
                   !__atomic_compare_exchange_n(&peak_live, &peak, st.live_bytes, 0,
                                                __ATOMIC_RELAXED, __ATOMIC_RELAXED))
                ;
        }
        if (w->nheld == 0 || (w->nheld < HELD && next(w) % 100 < 52))
            allocate(w);
        else
            let_go(w, (unsigned)(next(w) % w->nheld));
    }
    /* Keep freeing what others hand over until every thread is done, so
     * that inboxes of finished threads do not pile up. */
    __atomic_sub_fetch(&running, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) > 0) {
        drain_inbox(w);
        nanosleep(&(struct timespec){0, 200000}, NULL);
    }
    drain_inbox(w);
    while (w->nheld)
        let_go(w, w->nheld - 1);
    pthread_barrier_wait(&done_barrier); /* nobody hands over after this */
    drain_inbox(w);
    return NULL;
}

/* Two CPUs for all sixteen threads, whatever the machine has. */
static void pin_to_two_cpus(pthread_t t, unsigned i)
{
    cpu_set_t allowed, set;
    if (sched_getaffinity(0, sizeof(allowed), &allowed))
        return;
    CPU_ZERO(&set);
    for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && seen < 2; cpu++)
        if (CPU_ISSET(cpu, &allowed) && seen++ == (int)(i % 2))
            CPU_SET(cpu, &set);
    pthread_setaffinity_np(t, sizeof(set), &set);
}

static void check_empty(const char *when, pheap_off slots_off)
{
    pheap_check_report r;
    if (pheap_check(h, &r))
        ph_test_fail(__FILE__, __LINE__, "%s: check: %s", when, r.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != 1 || r.live_blocks != 1)
        ph_test_fail(__FILE__, __LINE__, "%s: %llu live blocks (check %llu), want 1 (the slots)",
                     when, (unsigned long long)st.live_blocks, (unsigned long long)r.live_blocks);
    CHECK_EQ(st.live_bytes, pheap_usable_size(h, slots_off));
}

static void cross_thread_frees(unsigned consistency)
{
    const char *path = ph_test_path("alloc_threads.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .max_size = 512u << 20, /* grows while threads run */
                       .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE,
                       .consistency = consistency};
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off slots_off = pheap_alloc(h, THREADS * TSLOTS * 8);
    REQUIRE(slots_off);
    pheap_off *slots = pheap_direct(h, slots_off);
    memset(slots, 0, THREADS * TSLOTS * 8);
    REQUIRE_OK(pheap_root_set(h, "slots", slots_off));
    pthread_barrier_init(&done_barrier, NULL, THREADS);
    running = THREADS; /* each test starts afresh */
    peak_live = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pthread_t t[THREADS];
    const char *env = getenv("PHEAP_TEST_SEED"); /* sizes and choices; timing is not replayed */
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    for (unsigned i = 0; i < THREADS; i++)
        pthread_mutex_init(&boxes[i].lock, NULL);
    for (unsigned i = 0; i < THREADS; i++) {
        workers[i] = (worker){.id = i, .rng = seed * 31 + i, .slots = slots + i * TSLOTS};
        REQUIRE(pthread_create(&t[i], NULL, run, &workers[i]) == 0);
        pin_to_two_cpus(t[i], i);
    }
    unsigned long allocs = 0, frees = 0, handed = 0, received = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        allocs += workers[i].allocs;
        frees += workers[i].frees;
        handed += workers[i].handed;
        received += workers[i].received;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    struct pheap_stats st;
    pheap_stats(h, &st);
    printf("alloc_threads: seed %llu, %lu blocks, %lu freed by another thread, heap grew from "
           "4 to %llu MiB (sampled peak of live data %llu MiB), %.2f s\n",
           (unsigned long long)seed, allocs, received, (unsigned long long)(st.size >> 20),
           (unsigned long long)(peak_live >> 20),
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    CHECK(st.size > (4u << 20));
    CHECK_EQ(handed, received);
    CHECK_EQ(allocs, frees);
    for (unsigned i = 0; i < THREADS * TSLOTS; i++)
        CHECK_EQ(slots[i], 0);
    check_empty("after the threads", slots_off);
    REQUIRE_OK(pheap_close(h));
    o.flags = 0;
    REQUIRE_OK(pheap_open(path, &o, &h));
    check_empty("after reopen", slots_off);
    REQUIRE_OK(pheap_root_set(h, "slots", 0));
    REQUIRE_OK(pheap_free(h, slots_off));
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    pthread_barrier_destroy(&done_barrier);
}

TEST(sixteen_threads_cross_thread_frees)
{
    cross_thread_frees(PHEAP_CONSISTENCY_LOG);
}

/* GC mode: the same traffic through thread caches that write nothing. */
TEST(sixteen_threads_cross_thread_frees_gc)
{
    cross_thread_frees(PHEAP_CONSISTENCY_GC);
}
