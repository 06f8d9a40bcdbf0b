/*
 * slab_share.c -- a slab of a heap shared between processes
 * (alloc/slab_share.h): its owner allocates by compare-and-swap while
 * other processes free its blocks into the remote-free list, and takes the
 * list back; a dead owner's slab is adopted; a freer that dies between
 * its two steps costs at most its one block.
 *
 * - threads: an owner thread allocates and frees its own blocks while
 *   two "remote" threads free the blocks it hands them: no block is ever
 *   handed out twice, no free is lost, and at the end the bitmap holds
 *   exactly the blocks allocated.
 * - processes: remote freers are killed with SIGKILL at random (at most
 *   one block each is left off the list), then the owner is killed and a
 *   survivor adopts the slab: its available set is exactly the free
 *   blocks of the bitmap.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "alloc/slab_share.h"
#include "format/header.h"
#include "harness.h"
#include "heap/heap.h"

#define CLS 2u /* 48-byte blocks: 1365 of them, 43 words of 32 */

typedef struct fixture {
    pheap *h;
    uint64_t chunk;
    ph_slab *s;         /* the owner's view */
    ph_procs_chunk *pc; /* the chunk's words in the process table */
} fixture;

static int setup(fixture *f, const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 2u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    if (pheap_open(path, &o, &f->h))
        return -1;
    ph_pctx *c = ph_heap_pctx(f->h);
    if (ph_extent_reserve(f->h->engine->ext, c, PH_CHUNK_SIZE, PH_EXT_SLAB, &f->chunk))
        return -1;
    f->s = ph_slab_new(&f->h->sp, f->chunk);
    ph_slab_format(&f->h->sp, c, f->s, CLS);
    ph_persist_fence(&f->h->sp.persist, c);
    ph_extent_commit_slabs(f->h->engine->ext, c, &f->chunk, 1, CLS);
    const ph_region *r = ph_header_region(&f->h->hdr, PH_REGION_PROCS);
    if (!r)
        return -1;
    ph_procs_chunk *all = ph_space_at(&f->h->sp, PH_PROCS_CHUNKS_AT(r->offset));
    f->pc = &all[(f->chunk - f->h->sp.data_off) / PH_CHUNK_SIZE];
    ph_slab_own(f->pc, 1);
    return 0;
}

/* Every block freed, the chunk back to free space, the heap checked. */
static void teardown(fixture *f, const char *name)
{
    ph_pctx *c = ph_heap_pctx(f->h);
    for (uint32_t i = 0; i < f->s->nblocks; i++) {
        uint32_t w, sh;
        ph_slab_bitpos(i, &w, &sh);
        if ((ph_load(&f->s->desc->xbits[w]) >> sh) & 1)
            (void)ph_slab_shared_clear(&f->h->sp, c, f->s->desc, f->chunk,
                                       f->chunk + (uint64_t)i * f->s->block_size);
    }
    ph_persist_fence(&f->h->sp.persist, c);
    ph_slab_own(f->pc, 0);
    CHECK_EQ(ph_extent_free(f->h->engine->ext, c, f->chunk, PH_EXT_SLAB, NULL, 0, 0), 0);
    free(f->s);
    CHECK_EQ(pheap_check(f->h, NULL), 0);
    CHECK_EQ(pheap_close(f->h), 0);
    unlink(ph_test_path(name));
}

/* A in the descriptor of block i. */
static int durable_a(const fixture *f, uint32_t i)
{
    uint32_t w, sh;
    ph_slab_bitpos(i, &w, &sh);
    return (int)((ph_load(&f->s->desc->xbits[w]) >> sh) & 1);
}

/* ---- threads ---------------------------------------------------------------------- */

enum { RING = 256 };

typedef struct tstate {
    fixture f;
    pthread_mutex_t arena;   /* the owner's arena lock: take, give, collect */
    pthread_mutex_t extlock; /* stands for the lock remote frees hold */
    uint64_t ring[RING];     /* blocks handed to the remote freers (0: empty slot) */
    uint8_t *held;           /* per block: 1 while allocated (the test's truth) */
    unsigned done;
    uint64_t remote_frees, local_frees, allocs, collected;
} tstate;

static void *remote(void *p)
{
    tstate *t = p;
    ph_pctx c = {0};
    uint64_t rng = (uint64_t)(uintptr_t)&c;
    while (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) {
        uint64_t *slot = &t->ring[ph_test_rand(&rng) % RING];
        uint64_t off = __atomic_exchange_n(slot, 0, __ATOMIC_ACQ_REL);
        if (!off)
            continue;
        uint32_t i = (uint32_t)((off - t->f.chunk) / t->f.s->block_size);
        if (!__atomic_exchange_n(&t->held[i], 0, __ATOMIC_ACQ_REL))
            ph_test_fail(__FILE__, __LINE__, "block %u handed out free", i);
        pthread_mutex_lock(&t->extlock);
        int rc = ph_slab_remote_free(&t->f.h->sp, &c, t->f.s->desc, t->f.pc, t->f.chunk, off);
        pthread_mutex_unlock(&t->extlock);
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "remote free of %u: %s", i, pheap_errmsg());
        __atomic_fetch_add(&t->remote_frees, 1, __ATOMIC_RELAXED);
        /* a second free of it finds it free (the arena lock keeps it on the list) */
        if (ph_test_rand(&rng) % 64 == 0) {
            pthread_mutex_lock(&t->arena);
            pthread_mutex_lock(&t->extlock);
            rc = ph_slab_remote_free(&t->f.h->sp, &c, t->f.s->desc, t->f.pc, t->f.chunk, off);
            pthread_mutex_unlock(&t->extlock);
            pthread_mutex_unlock(&t->arena);
            if (rc == 0)
                ph_test_fail(__FILE__, __LINE__, "a double free of %u was taken", i);
        }
    }
    ph_persist_ctx_release(&c);
    return NULL;
}

TEST(owner_and_remote_freers)
{
    tstate *t = calloc(1, sizeof(*t));
    REQUIRE(setup(&t->f, "slabshare.heap") == 0);
    pthread_mutex_init(&t->arena, NULL);
    pthread_mutex_init(&t->extlock, NULL);
    t->held = calloc(t->f.s->nblocks, 1);
    pthread_t th[2];
    for (int k = 0; k < 2; k++)
        pthread_create(&th[k], NULL, remote, t);
    ph_pctx *c = ph_heap_pctx(t->f.h);
    ph_space *sp = &t->f.h->sp;
    uint64_t rng = 3;
    uint64_t mine[64];
    unsigned nmine = 0;
    for (unsigned step = 0; step < 20000000 && !ph_test_failed &&
                            __atomic_load_n(&t->remote_frees, __ATOMIC_RELAXED) < 20000;
         step++) {
        uint64_t off;
        pthread_mutex_lock(&t->arena);
        uint32_t got = ph_slab_take(t->f.s, &off, 1);
        if (!got) {
            int bad;
            t->collected += ph_slab_collect(sp, t->f.s, t->f.pc, &bad);
            CHECK(!bad);
            got = ph_slab_take(t->f.s, &off, 1);
        }
        pthread_mutex_unlock(&t->arena);
        if (!got) { /* all out with the freers */
            sched_yield();
            continue;
        }
        uint32_t i = (uint32_t)((off - t->f.chunk) / t->f.s->block_size);
        if (ph_slab_shared_set(sp, c, t->f.s, i))
            ph_test_fail(__FILE__, __LINE__, "block %u taken while allocated", i);
        ph_persist_fence(&sp->persist, c);
        if (__atomic_exchange_n(&t->held[i], 1, __ATOMIC_ACQ_REL))
            ph_test_fail(__FILE__, __LINE__, "block %u allocated twice", i);
        t->allocs++;
        if (ph_test_rand(&rng) % 4 == 0 && nmine < 64) {
            mine[nmine++] = off; /* the owner frees some itself */
        } else {
            uint64_t *slot = &t->ring[ph_test_rand(&rng) % RING], zero = 0;
            if (!__atomic_compare_exchange_n(slot, &zero, off, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_RELAXED)) {
                mine[nmine++] = off; /* nmine < 64 here: full lists are freed below */
                sched_yield();
            }
        }
        if (nmine == 64) {
            for (unsigned k = 0; k < nmine; k++) {
                uint32_t j = (uint32_t)((mine[k] - t->f.chunk) / t->f.s->block_size);
                __atomic_store_n(&t->held[j], 0, __ATOMIC_RELEASE);
                CHECK_EQ(ph_slab_shared_clear(sp, c, t->f.s->desc, t->f.chunk, mine[k]), 0);
                ph_persist_fence(&sp->persist, c);
                pthread_mutex_lock(&t->arena);
                ph_slab_give(t->f.s, mine[k]);
                pthread_mutex_unlock(&t->arena);
                t->local_frees++;
            }
            nmine = 0;
        }
    }
    __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
    for (int k = 0; k < 2; k++)
        pthread_join(th[k], NULL);
    int bad;
    t->collected += ph_slab_collect(sp, t->f.s, t->f.pc, &bad);
    CHECK(!bad);
    /* the bitmap holds exactly what is allocated; the rest is available */
    uint32_t allocated = 0, avail = 0;
    for (uint32_t i = 0; i < t->f.s->nblocks; i++) {
        CHECK_EQ(durable_a(&t->f, i), t->held[i]);
        CHECK_EQ(ph_slab_available(t->f.s, i), !t->held[i]);
        allocated += t->held[i];
        avail += (uint32_t)ph_slab_available(t->f.s, i);
    }
    CHECK_EQ(avail, t->f.s->navail);
    fprintf(stderr, "  %llu allocations, %llu remote frees (%llu taken back), %llu local, %u "
            "allocated at the end\n", (unsigned long long)t->allocs,
            (unsigned long long)t->remote_frees, (unsigned long long)t->collected,
            (unsigned long long)t->local_frees, allocated);
    CHECK(t->remote_frees >= 20000);
    CHECK_EQ(t->collected, t->remote_frees);
    teardown(&t->f, "slabshare.heap");
    free(t->held);
    free(t);
}

TEST(bad_frees_change_nothing)
{
    fixture f;
    REQUIRE(setup(&f, "slabshare-bad.heap") == 0);
    ph_pctx *c = ph_heap_pctx(f.h);
    ph_space *sp = &f.h->sp;
    uint64_t off;
    REQUIRE(ph_slab_take(f.s, &off, 1) == 1);
    REQUIRE_OK(ph_slab_shared_set(sp, c, f.s, 0));
    CHECK_EQ(ph_slab_shared_set(sp, c, f.s, 0), PHEAP_EBUSY);
    uint64_t before[PH_SLAB_WORDS];
    memcpy(before, f.s->desc->xbits, sizeof(before));
    CHECK_EQ(ph_slab_remote_free(sp, c, f.s->desc, f.pc, f.chunk, off + 8), PHEAP_EINTERIOR);
    CHECK_EQ(ph_slab_remote_free(sp, c, f.s->desc, f.pc, f.chunk, off + f.s->block_size),
             PHEAP_ENOTALLOC);
    CHECK_EQ(ph_slab_remote_free(sp, c, f.s->desc, f.pc, f.chunk,
                                 f.chunk + (uint64_t)f.s->nblocks * f.s->block_size),
             PHEAP_EINTERIOR);
    CHECK(memcmp(before, f.s->desc->xbits, sizeof(before)) == 0);
    CHECK_EQ(ph_load(&f.pc->xremote), 0);
    REQUIRE_OK(ph_slab_remote_free(sp, c, f.s->desc, f.pc, f.chunk, off));
    CHECK_EQ(ph_slab_remote_free(sp, c, f.s->desc, f.pc, f.chunk, off), PHEAP_EDOUBLEFREE);
    CHECK(strstr(pheap_errmsg(), "double free") != NULL);
    CHECK_EQ(ph_load(&f.pc->xremote), off); /* on the list once */
    CHECK_EQ(ph_load((uint64_t *)ph_space_at(sp, off)), 0);
    int bad;
    CHECK_EQ(ph_slab_collect(sp, f.s, f.pc, &bad), 1);
    CHECK(!bad);
    CHECK(ph_slab_available(f.s, 0));
    /* a damaged list: a link to an allocated block ends the walk */
    REQUIRE(ph_slab_take(f.s, &off, 1) == 1);
    REQUIRE_OK(ph_slab_shared_set(sp, c, f.s, 0));
    ph_store(&f.pc->xremote, off);
    CHECK_EQ(ph_slab_collect(sp, f.s, f.pc, &bad), 0);
    CHECK(bad);
    CHECK(!ph_slab_available(f.s, 0));
    teardown(&f, "slabshare-bad.heap");
}

/* ---- processes --------------------------------------------------------------------- */

enum { PRING = 128, FREERS = 2 };

typedef struct pshared {
    uint64_t ring[PRING];      /* blocks handed out for remote frees */
    uint64_t taken[FREERS + 1]; /* each freer's block in hand (0: none) */
    uint64_t taken_gen[FREERS + 1]; /* ... and its allocation's number */
    uint64_t gen[PH_SLAB_MAX_BLOCKS]; /* per block: allocations by the owner */
    uint64_t frees;
    uint64_t owner_allocs;
} pshared;

/* A freer: takes a block from the ring, notes it, frees it remotely. */
static void freer(fixture *f, pshared *s, unsigned me)
{
    ph_pctx c = {0};
    uint64_t rng = 99 + me * 7 + (uint64_t)getpid();
    for (;;) {
        uint64_t off = __atomic_exchange_n(&s->ring[ph_test_rand(&rng) % PRING], 0,
                                           __ATOMIC_ACQ_REL);
        if (!off)
            continue;
        uint32_t i = (uint32_t)((off - f->chunk) / f->s->block_size);
        __atomic_store_n(&s->taken_gen[me], __atomic_load_n(&s->gen[i], __ATOMIC_ACQUIRE),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&s->taken[me], off, __ATOMIC_RELEASE);
        if (ph_slab_remote_free(&f->h->sp, &c, f->s->desc, f->pc, f->chunk, off))
            _exit(5);
        __atomic_store_n(&s->taken[me], 0, __ATOMIC_RELEASE);
        __atomic_fetch_add(&s->frees, 1, __ATOMIC_RELAXED);
    }
}

/* The owner: allocates blocks into the ring, collecting when out. */
static void owner(fixture *f, pshared *s)
{
    ph_pctx c = {0};
    uint64_t rng = 5;
    for (;;) {
        uint64_t off;
        if (!ph_slab_take(f->s, &off, 1)) {
            int bad;
            (void)ph_slab_collect(&f->h->sp, f->s, f->pc, &bad);
            if (bad)
                _exit(6);
            continue;
        }
        uint32_t i = (uint32_t)((off - f->chunk) / f->s->block_size);
        if (ph_slab_shared_set(&f->h->sp, &c, f->s, i))
            _exit(7);
        __atomic_fetch_add(&s->gen[i], 1, __ATOMIC_RELEASE);
        uint64_t *slot = &s->ring[ph_test_rand(&rng) % PRING], zero = 0;
        while (!__atomic_compare_exchange_n(slot, &zero, off, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
            zero = 0;
            slot = &s->ring[ph_test_rand(&rng) % PRING];
        }
        __atomic_fetch_add(&s->owner_allocs, 1, __ATOMIC_RELAXED);
    }
}

static pid_t spawn(fixture *f, pshared *s, int who)
{
    pid_t p = fork();
    if (p == 0) {
        if (who < 0)
            owner(f, s);
        freer(f, s, (unsigned)who);
    }
    return p;
}

TEST(freers_and_owner_killed)
{
    fixture f;
    REQUIRE(setup(&f, "slabshare-kill.heap") == 0);
    pshared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(s != MAP_FAILED);
    memset(s, 0, sizeof(*s));
    pid_t own = spawn(&f, s, -1), fr[FREERS + 1] = {0};
    for (unsigned k = 1; k <= FREERS; k++)
        fr[k] = spawn(&f, s, (int)k);
    uint64_t rng = 17, lost = 0;
    unsigned kills = 0;
    for (unsigned round = 0; round < 150; round++) {
        usleep((useconds_t)(300 + ph_test_rand(&rng) % 2000));
        unsigned k = 1 + (unsigned)(ph_test_rand(&rng) % FREERS);
        PH_TEST_KILL(fr[k]);
        kills++;
        /* its block in hand: freed or not; if freed, maybe on no list */
        uint64_t off = s->taken[k];
        if (off) {
            uint32_t i = (uint32_t)((off - f.chunk) / f.s->block_size);
            /* allocated still, by the same allocation: the free did not happen */
            if (durable_a(&f, i) && s->gen[i] == s->taken_gen[k])
                s->ring[ph_test_rand(&rng) % PRING] = off; /* (a slot may be lost: allocated) */
            else
                lost++; /* freed: on the list, or on none until adoption */
            s->taken[k] = 0;
        }
        fr[k] = spawn(&f, s, (int)k);
        if (ph_test_failed)
            break;
    }
    /* the owner dies; the freers stop; the test process adopts the slab */
    PH_TEST_KILL(own);
    for (unsigned k = 1; k <= FREERS; k++) {
        kill(fr[k], SIGKILL);
        waitpid(fr[k], NULL, 0);
    }
    REQUIRE_OK(ph_slab_adopt(f.s, f.pc, 2));
    CHECK_EQ(ph_slab_owner(f.pc), 2);
    CHECK_EQ(ph_load(&f.pc->xremote), 0);
    uint32_t avail = 0, allocated = 0;
    for (uint32_t i = 0; i < f.s->nblocks; i++) {
        CHECK_EQ(ph_slab_available(f.s, i), !durable_a(&f, i));
        avail += (uint32_t)ph_slab_available(f.s, i);
        allocated += (uint32_t)durable_a(&f, i);
    }
    CHECK_EQ(avail, f.s->navail);
    fprintf(stderr, "  %u freers killed (%llu with a block freed in hand), %llu remote frees, "
            "%llu owner allocations, %u blocks allocated at the adoption\n", kills,
            (unsigned long long)lost, (unsigned long long)s->frees,
            (unsigned long long)s->owner_allocs, allocated);
    CHECK(s->frees > 1000);
    munmap(s, sizeof(*s));
    teardown(&f, "slabshare-kill.heap");
}
