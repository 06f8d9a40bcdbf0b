/*
 * thread_churn.c -- workers that come and go, as in a server that runs each
 * request in a short-lived thread (Larson's benchmark): four lanes, each a
 * chain of generations; a generation frees the blocks its predecessor left
 * (checking their patterns), allocates its own and exits while the other
 * lanes' threads start, run and exit.  A thread's exit folds its record
 * outside the registry's lock (and in GC mode hands its cache on as
 * batches), so exits overlap starts, calls and pheap_stats, whose
 * counters must never go back while a record is folded.  The last
 * generation of each lane is detached and the heap is closed while they
 * may still be exiting.  Afterwards the heap reopens with nothing live
 * and pheap_check passes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { GENERATIONS = 12 };
#else
enum { GENERATIONS = 40 };
#endif
enum { LANES = 4, SLOTS = 256, STEPS = 2000 };

typedef struct lane {
    unsigned id;
    uint64_t rng;
    pheap_off *slots;        /* SLOTS words in the heap (root "slots") */
    size_t size[SLOTS];
    unsigned long allocs, frees;
    int failed;
    char error[160];
    pthread_mutex_t lock;    /* the last generation's end, for the closer */
    pthread_cond_t cv;
    int last_done;
} lane;

static pheap *h;
static int log_mode;
static lane lanes[LANES];
static int stop_stats;
static unsigned long stats_back; /* pheap_stats counters seen to fall */

static void fail(lane *l, const char *what)
{
    if (!l->failed++)
        snprintf(l->error, sizeof(l->error), "lane %u: %s: %s", l->id, what, pheap_errmsg());
}

static unsigned char pattern(pheap_off off)
{
    return (unsigned char)(off * 2654435761u >> 24);
}

static int check_block(lane *l, unsigned k)
{
    const unsigned char *p = pheap_direct(h, l->slots[k]);
    unsigned char want = pattern(l->slots[k]);
    for (size_t i = 0; i < l->size[k]; i += 61)
        if (p[i] != want) {
            fail(l, "a block's pattern changed (blocks overlap)");
            return -1;
        }
    return 0;
}

static void free_slot(lane *l, unsigned k)
{
    if (!l->slots[k])
        return;
    if (check_block(l, k) == 0 && pheap_free(h, l->slots[k]) != 0)
        fail(l, "pheap_free");
    l->slots[k] = 0;
    l->frees++;
}

static void alloc_slot(lane *l, unsigned k)
{
    size_t size = 16 + ph_test_rand(&l->rng) % (ph_test_rand(&l->rng) % 8 ? 256 : 4096);
    pheap_off off = pheap_alloc(h, size);
    if (!off) {
        fail(l, "pheap_alloc");
        return;
    }
    memset(pheap_direct(h, off), pattern(off), size);
    pheap_persist(h, pheap_direct(h, off), size);
    l->slots[k] = off;
    l->size[k] = size;
    l->allocs++;
}

/* One generation: frees what the last one left (cross-thread frees of
 * blocks another thread's cache handed out), then frees and refills
 * random slots. */
static void *generation(void *arg)
{
    lane *l = arg;
    for (unsigned k = 0; k < SLOTS; k++) {
        free_slot(l, k);
        alloc_slot(l, k);
    }
    for (unsigned s = 0; s < STEPS && !l->failed; s++) {
        unsigned k = (unsigned)(ph_test_rand(&l->rng) % SLOTS);
        free_slot(l, k);
        alloc_slot(l, k);
        if (log_mode && s % 500 == 0 && (pheap_tx_begin(h) != 0 || pheap_tx_commit(h) != 0))
            fail(l, "an empty transaction");
    }
    return NULL;
}

/* The last generation frees everything and tells the closer, then exits
 * (detached): its record is folded after the closer may have begun. */
static void *last_generation(void *arg)
{
    lane *l = arg;
    generation(l);
    for (unsigned k = 0; k < SLOTS; k++)
        free_slot(l, k);
    pthread_mutex_lock(&l->lock);
    l->last_done = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->lock);
    return NULL;
}

static void *lane_main(void *arg)
{
    lane *l = arg;
    for (unsigned g = 0; g + 1 < GENERATIONS && !l->failed; g++) {
        pthread_t t;
        if (pthread_create(&t, NULL, generation, l) != 0) {
            fail(l, "pthread_create");
            break;
        }
        pthread_join(t, NULL);
    }
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, last_generation, l) != 0) {
        fail(l, "pthread_create");
        pthread_mutex_lock(&l->lock);
        l->last_done = 1;
        pthread_mutex_unlock(&l->lock);
    }
    pthread_attr_destroy(&a);
    return NULL;
}

/* pheap_stats all along: it reads the thread records that exits fold,
 * and its counters only grow. */
static void *stats_main(void *arg)
{
    (void)arg;
    struct pheap_stats last = {0};
    while (!__atomic_load_n(&stop_stats, __ATOMIC_RELAXED)) {
        struct pheap_stats st;
        pheap_stats(h, &st);
        if (st.fences < last.fences || st.flushes < last.flushes ||
            st.tx_commits < last.tx_commits)
            stats_back++;
        last = st;
        usleep(100);
    }
    return NULL;
}

static void churn(unsigned consistency, const char *name)
{
    const char *path = ph_test_path(name);
    h = ph_test_create_mode(path, 64u << 20, consistency, 0);
    REQUIRE(h);
    log_mode = consistency == PHEAP_CONSISTENCY_LOG;
    stats_back = 0;
    pheap_off slots_off = pheap_alloc_init(h, LANES * SLOTS * 8, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(slots_off);
    REQUIRE_OK(pheap_root_set(h, "slots", slots_off));
    pheap_off *slots = pheap_direct(h, slots_off);
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL);
    stop_stats = 0;
    pthread_t st, lt[LANES];
    REQUIRE(pthread_create(&st, NULL, stats_main, NULL) == 0);
    for (unsigned i = 0; i < LANES; i++) {
        lanes[i] = (lane){.id = i, .rng = seed * 7 + i, .slots = slots + i * SLOTS};
        pthread_mutex_init(&lanes[i].lock, NULL);
        pthread_cond_init(&lanes[i].cv, NULL);
        REQUIRE(pthread_create(&lt[i], NULL, lane_main, &lanes[i]) == 0);
    }
    unsigned long allocs = 0, frees = 0;
    for (unsigned i = 0; i < LANES; i++) {
        pthread_join(lt[i], NULL);
        lane *l = &lanes[i];
        pthread_mutex_lock(&l->lock);
        while (!l->last_done)
            pthread_cond_wait(&l->cv, &l->lock);
        pthread_mutex_unlock(&l->lock);
        if (l->failed)
            ph_test_fail(__FILE__, __LINE__, "%s", l->error);
        allocs += l->allocs;
        frees += l->frees;
    }
    __atomic_store_n(&stop_stats, 1, __ATOMIC_RELAXED);
    pthread_join(st, NULL);
    printf("thread_churn (%s): seed %llu, %u generations of %u lanes, %lu blocks\n",
           consistency == PHEAP_CONSISTENCY_GC ? "GC" : "LOG", (unsigned long long)seed,
           GENERATIONS, LANES, allocs);
    CHECK_EQ(allocs, frees);
    CHECK_EQ(stats_back, 0);
    /* The last generations may still be exiting: the close waits for them. */
    REQUIRE_OK(pheap_close(h));
    pheap_options o = {.size = 64u << 20};
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats s;
    pheap_stats(h, &s);
    CHECK_EQ(s.needs_recovery, 0);
    CHECK_EQ(s.live_blocks, 1); /* the slots */
    CHECK_EQ(s.cached_blocks, 0);
    slots = pheap_direct(h, pheap_root_get(h, "slots"));
    for (unsigned i = 0; i < LANES * SLOTS; i++)
        CHECK_EQ(slots[i], 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    for (unsigned i = 0; i < LANES; i++) {
        pthread_mutex_destroy(&lanes[i].lock);
        pthread_cond_destroy(&lanes[i].cv);
    }
}

TEST(workers_come_and_go_log)
{
    churn(PHEAP_CONSISTENCY_LOG, "churn-log.heap");
}

TEST(workers_come_and_go_gc)
{
    churn(PHEAP_CONSISTENCY_GC, "churn-gc.heap");
}
