/*
 * morph_race.c -- slab morphing under concurrency: more threads than
 * cores, each in a phase of its own block size (so that while some threads
 * free blocks of a class others refill another class and morph the slabs
 * the first ones are emptying), frees of other threads' blocks by
 * pheap_free, pheap_free_from and pheap_tx_free, lookups (usable size),
 * stats and heap-map walks meanwhile.  Every block carries its own tag in
 * every word: a block handed out over a live one, or an allocated block
 * lost, shows as a changed word, a failed free or a wrong count.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define THREADS 6
#define ROUNDS 60
#define PER_ROUND 300
#define TARGET 2500 /* blocks kept in the pool, about */

static const uint32_t sizes[] = {2000, 480, 100, 1430, 195, 955, 1810, 765, 64, 3000, 300, 40};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

typedef struct ent {
    pheap_off off;
    uint32_t size;
    uint64_t tag;
} ent;

static pheap *H;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static ent *pool;
static size_t pool_n, pool_cap;
static atomic_int stop_watch;
static atomic_ulong failures, serial;

static void failf(const char *what, const ent *x, int rc)
{
    if (atomic_fetch_add(&failures, 1) < 20)
        fprintf(stderr, "  FAIL: %s: block %llu (size %u, tag %#llx) rc %d: %s\n", what,
                (unsigned long long)x->off, x->size, (unsigned long long)x->tag, rc,
                pheap_errmsg());
}

static void fill(const ent *x)
{
    uint64_t *p = pheap_direct(H, x->off);
    for (uint32_t k = 0; k < x->size / 8; k++)
        p[k] = x->tag;
}

static int intact(const ent *x)
{
    const uint64_t *p = pheap_direct(H, x->off);
    for (uint32_t k = 0; k < x->size / 8; k++)
        if (p[k] != x->tag)
            return 0;
    return 1;
}

static uint64_t rnd(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void *worker(void *arg)
{
    unsigned tid = (unsigned)(uintptr_t)arg;
    uint64_t rng = tid * 7919 + 1;
    pheap_off slots = pheap_alloc(H, 8192); /* words for pheap_free_from (a large block) */
    if (!slots) {
        atomic_fetch_add(&failures, 1);
        return NULL;
    }
    pheap_off *slot = pheap_direct(H, slots);
    ent mine[PER_ROUND];
    for (unsigned round = 0; round < ROUNDS && atomic_load(&failures) == 0; round++) {
        uint32_t size = sizes[(round + tid * 5) % NSIZES];
        unsigned n = 0;
        for (; n < PER_ROUND; n++) {
            mine[n].size = size;
            mine[n].tag = (uint64_t)(tid + 1) << 56 | atomic_fetch_add(&serial, 1);
            if (!(mine[n].off = pheap_alloc(H, size))) {
                failf("alloc", &mine[n], pheap_errno());
                break;
            }
            fill(&mine[n]);
        }
        pthread_mutex_lock(&pool_lock);
        for (unsigned k = 0; k < n; k++)
            pool[pool_n++] = mine[k];
        /* a few lookups of other threads' blocks (live while in the pool) */
        for (unsigned k = 0; k < 16 && pool_n; k++) {
            ent *x = &pool[rnd(&rng) % pool_n];
            size_t us = pheap_usable_size(H, x->off);
            if (us < x->size)
                failf("usable size", x, (int)us);
        }
        /* take blocks to free, any thread's */
        size_t take = pool_n > TARGET ? pool_n - TARGET : 0;
        if (take > PER_ROUND)
            take = PER_ROUND;
        ent victims[PER_ROUND];
        for (size_t k = 0; k < take; k++) {
            size_t i = rnd(&rng) % pool_n;
            victims[k] = pool[i];
            pool[i] = pool[--pool_n];
        }
        pthread_mutex_unlock(&pool_lock);
        for (size_t k = 0; k < take; k++) {
            ent *x = &victims[k];
            if (!intact(x))
                failf("contents changed while live (overlap)", x, 0);
            int rc;
            switch (rnd(&rng) % 4) {
            case 0:
                *slot = x->off;
                rc = pheap_free_from(H, slot);
                break;
            case 1:
                if ((rc = pheap_tx_begin(H)) == 0) {
                    rc = pheap_tx_free(H, x->off);
                    int rc2 = pheap_tx_commit(H);
                    rc = rc ? rc : rc2;
                }
                break;
            default:
                rc = pheap_free(H, x->off);
                break;
            }
            if (rc)
                failf("free", x, rc);
        }
    }
    return NULL;
}

static int on_run(void *arg, const pheap_chunk_run *r)
{
    (void)arg;
    if (r->kind == PHEAP_CHUNK_SLAB && r->blocks_used > r->blocks_total) {
        if (atomic_fetch_add(&failures, 1) < 20)
            fprintf(stderr, "  FAIL: map: slab at %llu: %u of %u blocks used\n",
                    (unsigned long long)r->off, r->blocks_used, r->blocks_total);
    }
    return 0;
}

static void *watcher(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_watch)) {
        struct pheap_stats st;
        (void)pheap_stats(H, &st);
        (void)pheap_walk_chunks(H, on_run, NULL);
        usleep(200);
    }
    return NULL;
}

TEST(threads_free_while_others_morph)
{
    const char *path = ph_test_path("morph-race.heap");
    unlink(path);
    pheap_options o = {.size = 512u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &H));
    pool_cap = TARGET + (size_t)THREADS * PER_ROUND * 2;
    pool = calloc(pool_cap, sizeof(*pool));
    REQUIRE(pool);
    pthread_t t[THREADS], w;
    REQUIRE(pthread_create(&w, NULL, watcher, NULL) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&stop_watch, 1);
    pthread_join(w, NULL);
    CHECK_EQ(atomic_load(&failures), 0);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(H, &st));
    fprintf(stderr, "  %llu morphs, %zu blocks live\n", (unsigned long long)st.slab_morphs, pool_n);
    CHECK(st.slab_morphs > 0);
    for (size_t i = 0; i < pool_n; i++)
        if (!intact(&pool[i]))
            failf("contents changed (end)", &pool[i], 0);
    CHECK_EQ(atomic_load(&failures), 0);
    pheap_check_report rep;
    if (pheap_check(H, &rep) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check: %s", rep.first_error);
    /* + THREADS large slot blocks */
    CHECK_EQ(st.live_blocks, pool_n + THREADS);
    CHECK_EQ(rep.live_blocks, pool_n + THREADS);
    REQUIRE_OK(pheap_close(H));
    REQUIRE_OK(pheap_open(path, NULL, &H));
    if (pheap_check(H, &rep) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check after reopen: %s", rep.first_error);
    for (size_t i = 0; i < pool_n; i++) {
        if (!intact(&pool[i]))
            failf("contents changed (reopen)", &pool[i], 0);
        int rc = pheap_free(H, pool[i].off);
        if (rc)
            failf("free after reopen", &pool[i], rc);
    }
    CHECK_EQ(atomic_load(&failures), 0);
    if (pheap_check(H, &rep) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check at the end: %s", rep.first_error);
    REQUIRE_OK(pheap_close(H));
    free(pool);
    unlink(path);
}
