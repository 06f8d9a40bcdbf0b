/*
 * engine_share.c -- two engines of one heap, as two processes sharing it
 * would have (ph_engine_open_shared), used by threads at once: each
 * allocates small and large blocks from its own slabs and frees blocks of
 * both (the other's small ones through the remote-free lists), plain and
 * logged (alloc_to and free_from, whose lanes the two take from one
 * table), each seeing the other's blocks live; one detaches and the other adopts the slabs it left.  No
 * block is ever handed out twice; at the end the heap, opened alone,
 * passes pheap_check and holds exactly the blocks still allocated.
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "format/header.h"
#include "harness.h"
#include "share_test.h"
#include "heap/heap.h"

enum { RING = 512, THREADS = 4 };

static int never_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    (void)who;
    return 0;
}

typedef struct shared {
    pheap *h;
    ph_engine *e[2];
    uint64_t ring[RING];     /* allocated blocks any thread may free (0: empty) */
    uint8_t *owned;          /* per 16-byte granule of the data region: a live block starts
                                there (byte 0), allocated by engine (byte 1) */
    unsigned steps;
    uint64_t cross, large, logged;
    pheap_off words;         /* a block of the heap: one line of words per thread */
} shared;

typedef struct targ {
    shared *s;
    unsigned eng;
    uint64_t seed;
    unsigned k;  /* its line of words */
} targ;

static uint8_t *granule(shared *s, uint64_t off)
{
    return &s->owned[(off - s->h->sp.data_off) / 16 * 2];
}

static void *worker(void *p)
{
    targ *a = p;
    shared *s = a->s;
    ph_engine *e = s->e[a->eng];
    ph_tcache t;
    ph_test_tcache(&t);
    ph_pctx c = {0};
    for (unsigned step = 0; step < s->steps && !ph_test_failed; step++) {
        uint64_t *slot = &s->ring[ph_test_rand(&a->seed) % RING];
        uint64_t off = __atomic_exchange_n(slot, 0, __ATOMIC_ACQ_REL);
        if (off) { /* free it, whoever allocated it */
            uint8_t *g = granule(s, off);
            if (!__atomic_exchange_n(g, 0, __ATOMIC_ACQ_REL))
                ph_test_fail(__FILE__, __LINE__, "block %llu was not live", (unsigned long long)off);
            uint8_t who = g[1]; /* engine | 2 for a large block */
            if ((who & 1) != a->eng)
                __atomic_fetch_add(&s->cross, 1, __ATOMIC_RELAXED);
            uint64_t *word = (uint64_t *)ph_space_at(&s->h->sp, s->words) + a->k * 8;
            uint64_t bytes = 0;
            /* a block of either engine is live to both */
            if (ph_engine_usable(e, off, &bytes) || bytes == 0 ||
                ph_engine_word_live(e, off + bytes - 8, "test"))
                ph_test_fail(__FILE__, __LINE__, "block %llu not live: %s", (unsigned long long)off,
                             pheap_errmsg());
            int rc;
            if (ph_test_rand(&a->seed) % 4 == 0) { /* a logged free, from a word of the heap */
                ph_store(word, off);
                rc = ph_engine_free_from(e, &t, &c, word);
                if (!rc && ph_load(word) != 0)
                    ph_test_fail(__FILE__, __LINE__, "free_from left the word set");
                __atomic_fetch_add(&s->logged, 1, __ATOMIC_RELAXED);
            } else {
                rc = ph_engine_free(e, &t, &c, off);
            }
            if (rc)
                ph_test_fail(__FILE__, __LINE__, "free of %llu: %s", (unsigned long long)off,
                             pheap_errmsg());
            /* a second free is refused, and changes nothing (checked for blocks of this
             * engine's own slabs, which only this thread can hand out again now) */
            if (who == a->eng && ph_test_rand(&a->seed) % 64 == 0 &&
                ph_engine_free(e, &t, &c, off) == 0)
                ph_test_fail(__FILE__, __LINE__, "a double free of %llu was taken",
                             (unsigned long long)off);
            continue;
        }
        size_t size = ph_test_rand(&a->seed) % 32 ? 16 + ph_test_rand(&a->seed) % 700
                                                  : 20000 + ph_test_rand(&a->seed) % 100000;
        uint64_t *word = (uint64_t *)ph_space_at(&s->h->sp, s->words) + a->k * 8 + 1;
        if (ph_test_rand(&a->seed) % 4 == 0) { /* a logged allocation into a word of the heap */
            off = ph_engine_alloc_to(e, &t, &c, size, word, NULL) == 0 ? ph_load(word) : 0;
            ph_store(word, 0);
        } else {
            off = ph_engine_alloc(e, &t, &c, size, NULL);
        }
        if (!off) {
            ph_test_fail(__FILE__, __LINE__, "alloc %zu: %s", size, pheap_errmsg());
            break;
        }
        if (size > PH_SMALL_MAX)
            __atomic_fetch_add(&s->large, 1, __ATOMIC_RELAXED);
        uint8_t *g = granule(s, off);
        if (__atomic_exchange_n(g, 1, __ATOMIC_ACQ_REL))
            ph_test_fail(__FILE__, __LINE__, "block %llu handed out twice", (unsigned long long)off);
        g[1] = (uint8_t)(a->eng | (size > PH_SMALL_MAX ? 2 : 0));
        uint64_t zero = 0;
        if (!__atomic_compare_exchange_n(slot, &zero, off, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(g, 0, __ATOMIC_RELEASE); /* the slot filled meanwhile: freed now */
            if (ph_engine_free(e, &t, &c, off))
                ph_test_fail(__FILE__, __LINE__, "free: %s", pheap_errmsg());
        }
    }
    ph_engine_thread_exit(e, &t, &c);
    free(t.store);
    ph_persist_ctx_release(&c);
    return NULL;
}

static void run(shared *s, unsigned steps, unsigned engines)
{
    pthread_t th[THREADS];
    targ a[THREADS];
    s->steps = steps;
    for (unsigned k = 0; k < THREADS; k++) {
        a[k] = (targ){s, engines == 2 ? k % 2 : 1, 100 + k + steps, k};
        pthread_create(&th[k], NULL, worker, &a[k]);
    }
    for (unsigned k = 0; k < THREADS; k++)
        pthread_join(th[k], NULL);
}

TEST(two_engines_share_a_heap)
{
    const char *path = ph_test_path("engshare.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    shared *s = calloc(1, sizeof(*s));
    REQUIRE_OK(pheap_open(path, &o, &s->h));
    pheap *h = s->h;
    s->owned = calloc((h->sp.max_size - h->sp.data_off) / 16 + 1, 2);
    const ph_region *r = ph_header_region(&h->hdr, PH_REGION_PROCS);
    REQUIRE(r);
    REQUIRE(s->words = pheap_alloc(h, THREADS * 64)); /* the threads' words for logged calls */
    uint64_t lock = 0;
    ph_engine_share sh[2];
    for (unsigned i = 0; i < 2; i++) {
        sh[i] = ph_test_share(h, i + 1, 0, &lock, never_dead, NULL);
        REQUIRE_OK(ph_engine_open_shared(&h->sp, &sh[i], &s->e[i]));
    }
    run(s, 40000, 2);
    fprintf(stderr, "  %llu frees of the other engine's blocks, %llu logged frees, %llu large "
            "allocations\n", (unsigned long long)s->cross, (unsigned long long)s->logged,
            (unsigned long long)s->large);
    /* every lane the threads took is free again, in the process table too */
    const uint8_t *holders = ph_space_at(&h->sp, PH_PROCS_LANES_AT(r->offset));
    unsigned held = 0;
    for (unsigned i = 0; i < PH_LANES_MAX; i++)
        held += holders[i] != 0;
    CHECK_EQ(held, 0);
    CHECK(s->cross > 0);
    /* engine 0's process leaves; engine 1 adopts its slabs and frees the rest */
    uint64_t nch = (h->sp.max_size - h->sp.data_off) / PH_CHUNK_SIZE;
    uint8_t *was0 = calloc(nch, 1);
    for (uint64_t ch = 0; ch < nch; ch++)
        was0[ch] = s->e[0]->chunks[ch] != NULL;
    ph_engine_detach(s->e[0]);
    ph_engine_close(s->e[0]);
    uint64_t owned0 = 0;
    ph_procs_chunk *pcw = ph_space_at(&h->sp, PH_PROCS_CHUNKS_AT(r->offset));
    for (uint64_t ch = 0; ch < (ph_space_size(&h->sp) - h->sp.data_off) / PH_CHUNK_SIZE; ch++)
        owned0 += pcw[ch].xowner == 1;
    CHECK_EQ(owned0, 0);
    run(s, 20000, 1);
    /* more 48-byte blocks than engine 1's own slabs hold: it adopts the other's */
    enum { MANY = 30000 };
    uint64_t *many = malloc(MANY * sizeof(*many));
    ph_tcache t;
    ph_test_tcache(&t);
    ph_pctx c = {0};
    for (unsigned i = 0; i < MANY; i++) {
        many[i] = ph_engine_alloc(s->e[1], &t, &c, 48, NULL);
        if (!many[i] || __atomic_exchange_n(granule(s, many[i]), 1, __ATOMIC_ACQ_REL))
            ph_test_fail(__FILE__, __LINE__, "block %u: %llu", i, (unsigned long long)many[i]);
    }
    uint64_t adopted = 0, owns = 0;
    for (uint64_t ch = 0; ch < (ph_space_size(&h->sp) - h->sp.data_off) / PH_CHUNK_SIZE; ch++) {
        owns += s->e[1]->chunks[ch] != NULL;
        adopted += s->e[1]->chunks[ch] != NULL && was0[ch];
    }
    free(was0);
    fprintf(stderr, "  engine 1 owns %llu slabs after the other left, %llu of them the other's\n",
            (unsigned long long)owns, (unsigned long long)adopted);
    CHECK(adopted > 0);
    for (unsigned i = 0; i < MANY; i++) {
        __atomic_store_n(granule(s, many[i]), 0, __ATOMIC_RELEASE);
        REQUIRE_OK(ph_engine_free(s->e[1], &t, &c, many[i]));
    }
    ph_engine_thread_exit(s->e[1], &t, &c);
    free(t.store);
    ph_persist_ctx_release(&c);
    free(many);
    uint64_t live = 0;
    for (unsigned i = 0; i < RING; i++)
        live += s->ring[i] != 0;
    ph_engine_detach(s->e[1]);
    ph_engine_close(s->e[1]);
    /* the heap's own index learns it all; then the heap opened alone */
    REQUIRE_OK(ph_extents_sync(h->engine->ext, NULL));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t live_then = st.live_blocks;
    for (unsigned i = 0; i < RING; i++)
        if (s->ring[i]) {
            CHECK(pheap_usable_size(h, s->ring[i]) > 0);
            REQUIRE_OK(pheap_free(h, s->ring[i]));
        }
    REQUIRE_OK(pheap_stats(h, &st));
    fprintf(stderr, "  %llu blocks left allocated; %llu live after the reopen, %llu of them "
            "the heap's own\n", (unsigned long long)live, (unsigned long long)live_then,
            (unsigned long long)st.live_blocks);
    CHECK_EQ(live_then, live + st.live_blocks); /* nothing leaked, nothing lost */
    REQUIRE_OK(pheap_free(h, s->words));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    free(s->owned);
    free(s);
    unlink(path);
}
