/*
 * engine_share_races.c -- interleavings of two processes' engines of one
 * shared heap that once lost a block or handed one out twice, driven step
 * by step through the calls the engine makes (the steps of free_logged's
 * path for another process's block, engine.c), so that each is exact:
 * a takeover replaying a dead process's free of a block of the survivor's
 * own slab; an adoption of the slab in the middle of another process's
 * logged free of one of its blocks (the block cached or handed out by the
 * adopter); the owner's taking back of remote frees racing its own
 * allocations in the same bitmap word.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "alloc/engine_int.h"
#include "alloc/engine_share.h"
#include "alloc/slab_share.h"
#include "format/header.h"
#include "harness.h"
#include "share_test.h"
#include "heap/heap.h"
#include "log/lane.h"

static int never_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    (void)who;
    return 0;
}

typedef struct fx {
    pheap *h;
    ph_engine *e[2];
    uint64_t lock;
    ph_engine_share sh[2];
    const ph_region *r;
    pheap_off words;
    ph_tcache t[4];
    ph_pctx c;
} fx;

static int fx_open(fx *f, const char *name)
{
    memset(f, 0, sizeof(*f));
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 4u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    if (pheap_open(path, &o, &f->h))
        return -1;
    if (!(f->r = ph_header_region(&f->h->hdr, PH_REGION_PROCS)))
        return -1;
    if (!(f->words = pheap_alloc_init(f->h, 64, PHEAP_ALLOC_ZERO, NULL, NULL)))
        return -1;
    for (unsigned i = 0; i < 2; i++) {
        f->sh[i] = ph_test_share(f->h, i + 1, 0, &f->lock, never_dead, NULL);
        if (ph_engine_open_shared(&f->h->sp, &f->sh[i], &f->e[i]))
            return -1;
    }
    for (unsigned i = 0; i < 4; i++)
        ph_test_tcache(&f->t[i]);
    return 0;
}

/* What fx_open made, released (no engine of it is used after). */
static void fx_close(fx *f)
{
    for (unsigned i = 0; i < 4; i++)
        free(f->t[i].store);
    for (unsigned i = 0; i < 2; i++)
        ph_engine_close(f->e[i]);
    pheap_close(f->h);
}

static ph_procs_chunk *chunk_words(fx *f, uint64_t off)
{
    ph_procs_chunk *all = ph_space_at(&f->h->sp, PH_PROCS_CHUNKS_AT(f->r->offset));
    return &all[(off - f->h->sp.data_off) / PH_CHUNK_SIZE];
}

static int a_bit(fx *f, uint64_t off)
{
    uint64_t chunk = off - (off - f->h->sp.data_off) % PH_CHUNK_SIZE;
    ph_slab_desc *d = ph_space_at(&f->h->sp, f->h->sp.slab_region +
                                                 (chunk - f->h->sp.data_off) / PH_CHUNK_SIZE *
                                                     PH_SLAB_DESC_SIZE);
    uint32_t w, sh;
    ph_slab_bitpos((uint32_t)((off - chunk) / ph_load(&d->block_size)), &w, &sh);
    return (int)((ph_load(&d->xbits[w]) >> sh) & 1);
}

/* A dead process's logged free of a block of the SURVIVOR's own
 * slab.  The dead one cleared A (engine.c, free_logged foreign path) and
 * died before retiring its entry.  The survivor's replay finds the block in
 * its own chunk map; the bit is clear already (or cleared now): the replay
 * must push the block onto the slab's list, or nothing gives it back. */
TEST(takeover_replays_a_free_of_the_survivors_block)
{
    fx f;
    REQUIRE_OK(fx_open(&f, "shrace1.heap"));
    ph_engine *S = f.e[0], *D = f.e[1];
    uint64_t X = ph_engine_alloc(S, &f.t[0], &f.c, 48, NULL);
    REQUIRE(X);
    uint64_t *src = ph_space_at(&f.h->sp, f.words);
    ph_store(src, X);
    /* D: pheap_free_from(src) up to ph_engine_share_clear (engine.c:972-976) */
    REQUIRE_EQ(ph_engine_chunk_slab(D, X) == NULL, 1);
    REQUIRE_EQ(ph_engine_share_live(D, &f.c, X), 0);
    REQUIRE_OK(ph_engine_lane(D, &f.t[1], &f.c));
    ph_lane_begin(&D->lanes, &f.c, &f.t[1].lane, PH_LOG_FREE_FROM, X, 0, f.words, X, 0);
    REQUIRE_OK(ph_engine_share_clear(D, &f.c, X));
    /* ... D is killed here; S takes it over */
    ph_takeover_info ti;
    REQUIRE_OK(ph_engine_takeover(S, &f.c, 2, 2, &ti));
    fprintf(stderr, "  takeover: %u lanes, %u entries\n", ti.lanes, ti.entries);
    CHECK_EQ(ti.entries, 1);
    CHECK_EQ(a_bit(&f, X), 0);
    CHECK_EQ(ph_load(src), 0);
    ph_slab *s = ph_engine_chunk_slab(S, X);
    int exact;
    uint32_t i = ph_slab_index(s, X, &exact);
    int listed = 0;
    for (uint64_t o = ph_load(&chunk_words(&f, X)->xremote); o && !listed;
         o = *(uint64_t *)ph_space_at(&f.h->sp, o))
        listed = o == X;
    fprintf(stderr, "  block %llu: A clear, available %d, on the remote list %d\n",
            (unsigned long long)X, ph_slab_available(s, i), listed);
    /* the block must come back to S somehow: allocate 3 slabs' worth */
    int back = 0;
    for (uint32_t k = 0; k < 3 * s->nblocks && !back; k++)
        back = ph_engine_alloc(S, &f.t[0], &f.c, 48, NULL) == X;
    CHECK(back); /* the free was not lost */
    fx_close(&f);
}

/* The window of a logged free of another process's block, between its
 * clear and its retirement with the push (free_logged): the owner of the
 * slab detaches in the window and a thread adopts the slab.  The block is
 * free in the bitmap, but a committed entry names it, so the adoption
 * withholds it; the push then gives it to the adopter, once -- whether the
 * adopter's cache holds the blocks below it or above it. */
static void window(int lower)
{
    fx f;
    REQUIRE_OK(fx_open(&f, lower ? "shrace2a.heap" : "shrace2b.heap"));
    ph_engine *A = f.e[0], *B = f.e[1];
    uint64_t X0 = ph_engine_alloc(B, &f.t[1], &f.c, 48, NULL);
    uint64_t X = ph_engine_alloc(B, &f.t[1], &f.c, 48, NULL);
    REQUIRE(X0 && X);
    if ((X0 > X) != !lower) { /* X: the lower of the two, or the higher */
        uint64_t t = X0;
        X0 = X;
        X = t;
    }
    REQUIRE_OK(ph_engine_free(B, &f.t[1], &f.c, X0)); /* B keeps X alone */
    uint64_t *src = ph_space_at(&f.h->sp, f.words);
    ph_store(src, X);
    /* A, thread 0: pheap_free_from(src), the foreign path, up to the push */
    REQUIRE_EQ(ph_engine_share_live(A, &f.c, X), 0);
    REQUIRE_OK(ph_engine_lane(A, &f.t[0], &f.c));
    ph_lane_begin(&A->lanes, &f.c, &f.t[0].lane, PH_LOG_FREE_FROM, X, 0, f.words, X, 0);
    REQUIRE_OK(ph_engine_share_clear(A, &f.c, X));
    ph_store(src, 0);
    /* B's process leaves (the retirement and the push are one step under the
     * extent index's locks: an adoption comes before both or after both) */
    ph_engine_thread_exit(B, &f.t[1], &f.c);
    ph_engine_detach(B);
    /* A, thread 2: allocates 48-byte blocks, adopting B's slab */
    uint64_t first = ph_engine_alloc(A, &f.t[2], &f.c, 48, NULL);
    REQUIRE(first);
    REQUIRE(ph_engine_chunk_slab(A, X) != NULL); /* adopted */
    int cached = 0;
    for (uint32_t k = 0; k < ph_tbin_count(&f.t[2].bins[ph_sizeclass(48)]); k++)
        cached |= f.t[2].bins[ph_sizeclass(48)].v[k] == X;
    fprintf(stderr, "  after the adoption: X handed out %d, in thread 2's cache %d\n",
            first == X, cached);
    if (first == X)
        memset(ph_space_at(&f.h->sp, X), 0xab, 48); /* the program's data */
    /* A, thread 0: the rest of free_logged */
    ph_engine_share_retire_push(A, &f.c, &f.t[0].lane, X);
    if (first == X)
        CHECK_EQ(*(uint64_t *)ph_space_at(&f.h->sp, X), 0xababababababababull);
    /* thread 3 allocates, keeping every block, until it has taken the whole
     * slab and its refill collects the list; then thread 2 empties its cache */
    ph_slab *s = ph_engine_chunk_slab(A, X);
    uint32_t n = 3 * s->nblocks, xs = first == X;
    f.t[3].arena = f.t[2].arena; /* a thread of the same arena (more threads than arenas) */
    __atomic_fetch_add(&A->arenas[f.t[2].arena].xthreads, 1, __ATOMIC_RELAXED);
    for (uint32_t k = 0; k < n; k++) {
        uint64_t o = ph_engine_alloc(A, &f.t[3], &f.c, 48, NULL);
        REQUIRE(o);
        xs += o == X;
    }
    for (uint32_t k = ph_tbin_count(&f.t[2].bins[ph_sizeclass(48)]); k > 0; k--)
        xs += ph_engine_alloc(A, &f.t[2], &f.c, 48, NULL) == X;
    fprintf(stderr, "  X handed out %u times\n", xs);
    CHECK(xs <= 1); /* never handed out twice */
    fx_close(&f);
}

/* X in the adopter's cache when the push comes: handed out twice */
TEST(logged_foreign_free_pushes_after_adoption_cached)
{
    window(0);
}

/* X handed out by the adopter when the push comes: its first word overwritten */
TEST(logged_foreign_free_pushes_after_adoption_live)
{
    window(1);
}

/* ph_slab_collect refreshes the owner's bitmap copy from the
 * descriptor without the word's lock (slab_share.c:174-179), while an
 * owner's allocation in the same word (ph_slab_cas_locked: CAS, then the
 * copy) runs under that lock only.  A collect that loaded the word before
 * the CAS and stores it after loses the allocation's bits in the copy: a
 * live block reads as free (free_from says double free, usable_size
 * fails). */
#define CLS3 2u
typedef struct race {
    pheap *h;
    ph_slab *s;
    ph_procs_chunk *pc;
    uint64_t chunk;
    uint32_t mine, others[31];
    unsigned done;
    uint64_t lost, iters, collects;
} race;

static void *owner_alloc(void *p)
{
    race *r = p;
    ph_pctx c = {0};
    for (uint64_t it = 0; it < 3000000 && !r->lost; it++) {
        uint32_t sh, w = ph_slab_lock(r->s, r->mine, &sh);
        ph_slab_shared_set(&r->h->sp, &c, r->s, r->mine);
        ph_slab_unlock(r->s, w);
        unsigned bits = ph_slab_bits(r->s, r->mine);
        if (bits != 3 && ((ph_load(&r->s->desc->xbits[w]) >> sh) & 3) == 3)
            __atomic_store_n(&r->lost, it + 1, __ATOMIC_RELEASE);
        w = ph_slab_lock(r->s, r->mine, &sh);
        ph_slab_clear_locked(&r->h->sp, &c, r->s, w, sh);
        ph_slab_unlock(r->s, w);
        r->iters = it;
    }
    __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
    ph_persist_ctx_release(&c);
    return NULL;
}

static void *remote_and_collect(void *p)
{
    race *r = p;
    ph_pctx c = {0};
    while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        /* the owner (another thread of it) hands out 31 blocks of the same word ... */
        for (unsigned k = 0; k < 31; k++) {
            uint32_t sh, w = ph_slab_lock(r->s, r->others[k], &sh);
            ph_slab_shared_set(&r->h->sp, &c, r->s, r->others[k]);
            ph_slab_unlock(r->s, w);
        }
        /* ... another process frees them remotely ... */
        for (unsigned k = 0; k < 31; k++)
            if (ph_slab_remote_free(&r->h->sp, &c, r->s->desc, r->pc, r->chunk,
                                    r->chunk + (uint64_t)r->others[k] * r->s->block_size))
                ph_test_fail(__FILE__, __LINE__, "remote free: %s", pheap_errmsg());
        /* ... and the owner's refill takes them back (arena lock: this thread only) */
        int bad;
        uint32_t got = ph_slab_collect(&r->h->sp, r->s, r->pc, &bad);
        if (bad)
            ph_test_fail(__FILE__, __LINE__, "collect: bad list after %u, navail %u", got,
                         r->s->navail);
        uint64_t buf[64];
        ph_slab_take(r->s, buf, 64); /* into a cache again */
        r->collects++;
    }
    ph_persist_ctx_release(&c);
    return NULL;
}

TEST(collect_loses_a_concurrent_allocation_in_the_copy)
{
    race r;
    memset(&r, 0, sizeof(r));
    const char *path = ph_test_path("shrace3.heap");
    unlink(path);
    pheap_options o = {.size = 2u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &r.h));
    ph_pctx *c = ph_heap_pctx(r.h);
    REQUIRE_OK(ph_extent_reserve(r.h->engine->ext, c, PH_CHUNK_SIZE, PH_EXT_SLAB, &r.chunk));
    r.s = ph_slab_new(&r.h->sp, r.chunk);
    ph_slab_format(&r.h->sp, c, r.s, CLS3);
    ph_persist_fence(&r.h->sp.persist, c);
    ph_extent_commit_slabs(r.h->engine->ext, c, &r.chunk, 1, CLS3);
    r.s->shared = 1;
    const ph_region *reg = ph_header_region(&r.h->hdr, PH_REGION_PROCS);
    REQUIRE(reg);
    ph_procs_chunk *all = ph_space_at(&r.h->sp, PH_PROCS_CHUNKS_AT(reg->offset));
    r.pc = &all[(r.chunk - r.h->sp.data_off) / PH_CHUNK_SIZE];
    ph_slab_own(r.pc, 1);
    /* 32 blocks of bitmap word 0; none available (the owner holds them all) */
    unsigned n = 0;
    for (uint32_t i = 0; i < r.s->nblocks && n < 32; i++) {
        uint32_t w, sh;
        ph_slab_bitpos(i, &w, &sh);
        if (w != 0)
            continue;
        if (n == 0)
            r.mine = i;
        else
            r.others[n - 1] = i;
        n++;
    }
    REQUIRE_EQ(n, 32);
    uint64_t buf[64]; /* every block in the owner's caches: none available */
    while (ph_slab_take(r.s, buf, 64))
        ;
    pthread_t a, b;
    pthread_create(&a, NULL, owner_alloc, &r);
    pthread_create(&b, NULL, remote_and_collect, &r);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    fprintf(stderr, "  %llu allocations, %llu collects; copy lost the allocation at %llu\n",
            (unsigned long long)r.iters, (unsigned long long)r.collects,
            (unsigned long long)r.lost);
    CHECK_EQ(r.lost, 0); /* the copy never loses an allocation */
    free(r.s);
    pheap_close(r.h);
    unlink(path);
}
