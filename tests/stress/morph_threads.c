/*
 * morph_threads.c -- slab morphing under contention: eight threads on two
 * CPUs run fragbench's phases together (each allocates its share in the
 * phase's size, writing a pattern; then 90 % of the blocks are freed, a
 * third of them by another thread and a third in transactions), so that
 * slabs morph while other threads free their old blocks, look their
 * blocks up and commit transactions, and a watcher walks the heap map and
 * reads the statistics all along.  Every block's pattern and usable size
 * are checked at each phase's end; at the end nothing is live, pheap_check
 * passes, and again after a reopen.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { SHARE = 96u << 10, ROUNDS = 2 };
#else
enum { SHARE = 512u << 10, ROUNDS = 3 };
#endif
enum { THREADS = 8 };

static const uint32_t phase_size[] = {100, 2000, 480, 1430, 195, 955, 1810, 765};
#define SIZES (sizeof(phase_size) / sizeof(phase_size[0]))

typedef struct block {
    pheap_off off;
    uint32_t size, usable;
} block;

typedef struct worker {
    unsigned id;
    uint64_t rng;
    block *v;              /* this thread's live blocks */
    size_t n, cap;
    block *handed;         /* blocks the previous thread gives this one to free */
    size_t nhanded;
    block *own;            /* blocks this one frees itself */
} worker;

static pheap *h;
static worker workers[THREADS];
static pthread_barrier_t phase_end;
static int stop_watching; /* atomic */

static uint8_t pattern(pheap_off off, uint32_t k)
{
    return (uint8_t)(off >> 4 ^ k * 13);
}

static uint64_t next(uint64_t *rng)
{
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return *rng >> 33;
}

static void check_block(const block *b)
{
    if (pheap_usable_size(h, b->off) != b->usable) {
        ph_test_fail(__FILE__, __LINE__, "block %llu: usable size %zu, was %u",
                     (unsigned long long)b->off, pheap_usable_size(h, b->off), b->usable);
        return;
    }
    const uint8_t *p = pheap_direct(h, b->off);
    for (uint32_t k = 0; k < b->size; k++)
        if (p[k] != pattern(b->off, k)) {
            ph_test_fail(__FILE__, __LINE__, "block %llu: byte %u changed",
                         (unsigned long long)b->off, k);
            return;
        }
}

static void free_one(worker *w, const block *b)
{
    check_block(b);
    int rc;
    if (next(&w->rng) % 2) {
        rc = pheap_free(h, b->off);
    } else { /* in a transaction */
        rc = pheap_tx_begin(h);
        if (!rc && (rc = pheap_tx_free(h, b->off)) == 0)
            rc = pheap_tx_commit(h);
        else if (!rc)
            pheap_tx_abort(h);
    }
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "free of %llu: %s", (unsigned long long)b->off,
                     pheap_errmsg());
}

static void *work(void *arg)
{
    worker *w = arg;
    worker *to = &workers[(w->id + 1) % THREADS];
    for (unsigned ph = 0; ph < ROUNDS * SIZES; ph++) {
        uint32_t size = phase_size[ph % SIZES];
        uint64_t live = 0;
        for (size_t i = 0; i < w->n; i++)
            live += w->v[i].size;
        while (live < SHARE && w->n < w->cap) {
            block *b = &w->v[w->n];
            if (!(b->off = pheap_alloc(h, size))) {
                ph_test_fail(__FILE__, __LINE__, "alloc %u: %s", size, pheap_errmsg());
                break;
            }
            b->size = size;
            b->usable = (uint32_t)pheap_usable_size(h, b->off);
            uint8_t *p = pheap_direct(h, b->off);
            for (uint32_t k = 0; k < size; k++)
                p[k] = pattern(b->off, k);
            live += size;
            w->n++;
        }
        for (size_t i = 0; i < w->n; i++)
            check_block(&w->v[i]);
        pthread_barrier_wait(&phase_end);
        /* 90 % go: a third handed to the next thread, which frees them
         * after the barrier while this one frees its own. */
        size_t kept = 0, own = 0;
        for (size_t i = 0; i < w->n; i++) {
            uint64_t r = next(&w->rng) % 30;
            if (r >= 27)
                w->v[kept++] = w->v[i];
            else if (r < 9)
                to->handed[to->nhanded++] = w->v[i];
            else
                w->own[own++] = w->v[i];
        }
        w->n = kept;
        pthread_barrier_wait(&phase_end);
        for (size_t i = 0; i < own; i++)
            free_one(w, &w->own[i]);
        for (size_t i = 0; i < w->nhanded; i++)
            free_one(w, &w->handed[i]);
        pthread_barrier_wait(&phase_end);
        w->nhanded = 0;
    }
    return NULL;
}

/* Reads the heap map and the statistics while the others work. */
static int count_run(void *arg, const pheap_chunk_run *r)
{
    (*(uint64_t *)arg) += r->kind == PHEAP_CHUNK_SLAB ? r->blocks_used + r->old_used : 0;
    return 0;
}

static void *watch(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop_watching, __ATOMIC_ACQUIRE)) {
        uint64_t used = 0;
        struct pheap_stats st;
        if (pheap_walk_chunks(h, count_run, &used) || pheap_stats(h, &st))
            ph_test_fail(__FILE__, __LINE__, "watcher: %s", pheap_errmsg());
        usleep(1000);
    }
    return NULL;
}

TEST(phases_in_eight_threads)
{
    const char *path = ph_test_path("morph-threads.heap");
    unlink(path);
    pheap_options o = {.size = 8u << 20, .max_size = 512u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    h = ph_test_open(path, &o);
    REQUIRE(h);
    pthread_barrier_init(&phase_end, NULL, THREADS);
    size_t cap = 2 * SHARE / 100 + 16;
    for (unsigned i = 0; i < THREADS; i++) {
        workers[i] = (worker){.id = i, .rng = 1 + i, .cap = cap};
        workers[i].v = calloc(cap, sizeof(block));
        workers[i].handed = calloc(cap, sizeof(block));
        workers[i].own = calloc(cap, sizeof(block));
        REQUIRE(workers[i].v && workers[i].handed && workers[i].own);
    }
    pthread_t t[THREADS], watcher;
    REQUIRE(pthread_create(&watcher, NULL, watch, NULL) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, work, &workers[i]) == 0);
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    __atomic_store_n(&stop_watching, 1, __ATOMIC_RELEASE);
    pthread_join(watcher, NULL);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    fprintf(stderr, "  %llu morphs, %llu slabs hold %llu old blocks\n",
            (unsigned long long)st.slab_morphs, (unsigned long long)st.morphed_slabs,
            (unsigned long long)st.old_blocks);
    CHECK(st.slab_morphs > 0);
    size_t live = 0;
    for (unsigned i = 0; i < THREADS; i++)
        live += workers[i].n;
    pheap_check_report rep;
    REQUIRE_OK(pheap_check(h, &rep));
    CHECK_EQ(rep.live_blocks, live);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    for (unsigned i = 0; i < THREADS; i++)
        for (size_t k = 0; k < workers[i].n; k++) {
            check_block(&workers[i].v[k]);
            REQUIRE_OK(pheap_free(h, workers[i].v[k].off));
        }
    REQUIRE_OK(pheap_check(h, &rep));
    CHECK_EQ(rep.live_blocks, 0);
    REQUIRE_OK(pheap_close(h));
    for (unsigned i = 0; i < THREADS; i++) {
        free(workers[i].v);
        free(workers[i].handed);
        free(workers[i].own);
    }
    pthread_barrier_destroy(&phase_end);
    unlink(path);
}
