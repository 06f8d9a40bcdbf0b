/*
 * extent_share.c -- indexes of one heap's extents shared between
 * processes (ph_extents_share): every operation holds the lock between
 * processes and syncs first.
 *
 * - Two indexes (two processes' worth) used by four threads at once,
 *   reserving, committing, cancelling, allocating slab chunks, freeing
 *   each other's blocks with holds and releasing them: at the end both
 *   tile the heap alike and agree with a replay of the log, and the blocks
 *   live are exactly those the threads hold.
 * - Processes (fork) on one mapping, killed with SIGKILL at random,
 *   inside the lock too, and replaced: a survivor takes the lock over from
 *   a dead holder (repairing what it appended), a supervisor drops the
 *   dead one's reservations; a process that grows the heap is followed by
 *   the others; at the end the log holds exactly the committed blocks.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/engine_int.h"
#include "alloc/extent.h"
#include "extent_common.h"
#include "harness.h"
#include "heap/heap.h"

/* The kind of the extent starting at data offset `off` in x, or -1. */
static int kind_at(ph_extents *x, uint64_t off, uint64_t *npages)
{
    ph_extnode n;
    uint64_t page = (off - x->sp->data_off) / PH_PAGE_SIZE;
    if (ph_extents_copy(x, page, &n, 1) != 1 || n.page != page)
        return -1;
    if (npages)
        *npages = n.npages;
    return (int)n.kind;
}

static int never_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    (void)who;
    return 0;
}

/* ---- threads on two indexes ------------------------------------------------------- */

enum { SLOTS = 96 };

typedef struct tblock {
    pthread_mutex_t m;
    uint64_t off;
    int state;   /* 0 none, 1 reserved, 2 live, 3 freed and held, 4 slab chunk */
    unsigned who; /* index that reserved or holds it */
} tblock;

typedef struct tshared {
    pheap *h;
    ph_extents *x[2];
    tblock b[SLOTS];
    unsigned steps;
} tshared;

typedef struct targ {
    tshared *s;
    unsigned me; /* its index */
    uint64_t seed;
    unsigned cross_frees;
} targ;

static void *worker(void *p)
{
    targ *a = p;
    tshared *s = a->s;
    ph_extents *x = s->x[a->me];
    ph_pctx c = {0};
    for (unsigned step = 0; step < s->steps && !ph_test_failed; step++) {
        tblock *b = &s->b[ph_test_rand(&a->seed) % SLOTS];
        if (pthread_mutex_trylock(&b->m))
            continue;
        size_t bytes = (size_t)(4096 + ph_test_rand(&a->seed) % 300000);
        unsigned r = (unsigned)(ph_test_rand(&a->seed) % 4);
        int rc = 0;
        switch (b->state) {
        case 0:
            if (r == 0) {
                rc = ph_extent_alloc(x, &c, PH_CHUNK_SIZE, PH_EXT_SLAB, 3, NULL, &b->off);
                b->state = 4;
            } else if (r == 1) {
                rc = ph_extent_alloc(x, &c, bytes, PH_EXT_LARGE, 0, NULL, &b->off);
                b->state = 2;
            } else {
                rc = ph_extent_reserve(x, &c, bytes, PH_EXT_LARGE, &b->off);
                b->state = 1;
            }
            b->who = a->me;
            if (rc)
                b->state = 0;
            break;
        case 1:
            if (b->who != a->me)
                break; /* a reservation is its index's */
            if (r < 2) {
                ph_extent_commit(x, &c, b->off, PH_EXT_LARGE, 0, NULL, 0);
                b->state = 2;
            } else {
                ph_extent_cancel(x, &c, b->off);
                b->state = 0;
            }
            break;
        case 2: /* whichever index: the free of another process's block */
        case 4:
            a->cross_frees += b->who != a->me;
            rc = ph_extent_free(x, &c, b->off, b->state == 2 ? PH_EXT_LARGE : PH_EXT_SLAB, NULL,
                                0, r < 2);
            if (!rc) {
                b->state = r < 2 ? 3 : 0;
                b->who = a->me;
            }
            break;
        default:
            if (b->who != a->me)
                break;
            ph_extent_release(x, &c, b->off);
            b->state = 0;
            break;
        }
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "index %u, state %d: %s", a->me, b->state,
                         pheap_errmsg());
        pthread_mutex_unlock(&b->m);
    }
    ph_persist_ctx_release(&c);
    return NULL;
}

TEST(threads_on_two_shared_indexes)
{
    pheap *h = fresh_heap(512u << 20, "extshare.heap");
    REQUIRE(h);
    tshared *s = calloc(1, sizeof(*s));
    s->h = h;
    s->steps = 6000;
    uint64_t lock = 0;
    ph_plock_owner o[2] = {{1, never_dead, NULL}, {2, never_dead, NULL}};
    for (unsigned i = 0; i < 2; i++) {
        REQUIRE_OK(ph_extents_open_owned(&h->sp, i + 1, &s->x[i]));
        ph_extents_share(s->x[i], &lock, &o[i]);
    }
    for (unsigned i = 0; i < SLOTS; i++)
        pthread_mutex_init(&s->b[i].m, NULL);
    enum { T = 4 };
    pthread_t th[T];
    targ a[T];
    for (unsigned t = 0; t < T; t++) {
        a[t] = (targ){s, t % 2, 11 + t, 0};
        pthread_create(&th[t], NULL, worker, &a[t]);
    }
    unsigned cross = 0;
    for (unsigned t = 0; t < T; t++) {
        pthread_join(th[t], NULL);
        cross += a[t].cross_frees;
    }
    expect_same(s->x[0], s->x[1], __LINE__);
    /* the blocks the threads hold, and nothing else, are live or reserved */
    uint64_t held_pages = 0;
    for (unsigned i = 0; i < SLOTS; i++) {
        tblock *b = &s->b[i];
        static const int kind[] = {-1, PH_EXT_RESERVED, PH_EXT_LARGE, PH_EXT_RESERVED,
                                   PH_EXT_SLAB};
        uint64_t np = 0;
        if (b->state) {
            CHECK_EQ(kind_at(s->x[0], b->off, &np), kind[b->state]);
            held_pages += np;
        }
    }
    ph_engine_stats st;
    ph_extents *third = NULL;
    REQUIRE_OK(ph_extents_open_owned(&h->sp, 3, &third));
    expect_same(s->x[0], third, __LINE__);
    uint64_t tail, free_pages = 0;
    (void)ph_extents_largest_free(third, &tail);
    free_pages = third->free_pages;
    /* the heap's own index (an exclusive open's, idle meanwhile) holds the
     * metadata blocks of its open, which the shared ones see too */
    ph_engine_stats_get(h->engine, &st);
    CHECK_EQ(held_pages + free_pages + (st.large_bytes + st.slab_bytes) / PH_PAGE_SIZE,
             third->pages);
    fprintf(stderr, "  %u frees of the other index's blocks, %llu pages held at the end\n", cross,
            (unsigned long long)held_pages);
    CHECK(cross > 0);
    ph_extents_close(third);
    /* the threads' blocks go; the heap's own index learns it all before the close */
    ph_pctx c = {0};
    for (unsigned i = 0; i < SLOTS; i++) {
        tblock *b = &s->b[i];
        if (b->state == 1)
            ph_extent_cancel(s->x[b->who], &c, b->off);
        else if (b->state == 2 || b->state == 4)
            REQUIRE_OK(ph_extent_free(s->x[0], &c, b->off, b->state == 2 ? PH_EXT_LARGE : PH_EXT_SLAB,
                                      NULL, 0, 0));
        else if (b->state == 3)
            ph_extent_release(s->x[b->who], &c, b->off);
    }
    ph_persist_ctx_release(&c);
    for (unsigned i = 0; i < 2; i++)
        ph_extents_close(s->x[i]);
    REQUIRE_OK(ph_extents_sync(h->engine->ext, NULL));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    free(s);
    unlink(ph_test_path("extshare.heap"));
}

/* ---- processes killed at random ---------------------------------------------------- */

enum { PROCS = 3, RECS = 40, GENS = 4096 };

typedef struct prec {
    uint64_t off;
    int state;   /* 0 none, 1 reserved, 2 live, 3 freed and held */
    int next;    /* the state the operation in flight leads to, or -1 */
} prec;

typedef struct pshared {
    uint64_t lock;
    uint64_t dead[GENS];           /* generation -> its process is gone */
    uint64_t takeovers[GENS];      /* each generation's index's count */
    uint64_t ops[GENS];
    uint64_t enomem[GENS];
    prec rec[PROCS + 1][RECS];     /* by lease slot (1..PROCS) */
} pshared;

static int gen_dead(void *ctx, uint64_t who)
{
    return (int)__atomic_load_n(&((pshared *)ctx)->dead[who >> 8], __ATOMIC_ACQUIRE);
}

/* One process: its lease slot, its generation; random operations on its
 * own records, each record written after its operation returns. */
static void child(pheap *h, pshared *s, unsigned slot, unsigned gen, uint64_t seed)
{
    ph_extents *x = NULL;
    ph_plock_owner o = {(uint64_t)gen << 8 | slot, gen_dead, s};
    if (ph_extents_open_shared(&h->sp, slot, &s->lock, &o, &x)) {
        fprintf(stderr, "  slot %u: %s\n", slot, pheap_errmsg());
        _exit(3);
    }
    ph_pctx c = {0};
    uint64_t enomem = 0;
    for (;;) {
        prec *r = &s->rec[slot][ph_test_rand(&seed) % RECS];
        size_t bytes = (size_t)(4096 + ph_test_rand(&seed) % (ph_test_rand(&seed) % 50 ? 200000
                                                                                     : 6000000));
        uint64_t off;
        int rc = 0;
        int next = r->state == 0 ? 1 : r->state == 1 ? (ph_test_rand(&seed) % 3 ? 2 : 0)
                                 : r->state == 2 ? 3 : 0;
        __atomic_store_n(&r->next, next, __ATOMIC_RELEASE);
        switch (r->state * 4 + next) {
        case 0 * 4 + 1:
            if ((rc = ph_extent_reserve(x, &c, bytes, PH_EXT_LARGE, &off)) == 0)
                r->off = off;
            break;
        case 1 * 4 + 2:
            ph_extent_commit(x, &c, r->off, PH_EXT_LARGE, 0, NULL, 0);
            break;
        case 1 * 4 + 0:
            ph_extent_cancel(x, &c, r->off);
            break;
        case 2 * 4 + 3:
            rc = ph_extent_free(x, &c, r->off, PH_EXT_LARGE, NULL, 0, 1);
            break;
        default:
            ph_extent_release(x, &c, r->off);
            break;
        }
        if (!rc)
            __atomic_store_n(&r->state, next, __ATOMIC_RELEASE);
        __atomic_store_n(&r->next, -1, __ATOMIC_RELEASE);
        enomem += rc == PHEAP_ENOMEM;
        if (rc && rc != PHEAP_ENOMEM)
            _exit(4);
        __atomic_store_n(&s->takeovers[gen], x->xtakeovers, __ATOMIC_RELAXED);
        __atomic_store_n(&s->enomem[gen], enomem, __ATOMIC_RELAXED);
        /* a pause now and then: three processes taking the lock back to back
         * would starve the supervisor, whose waits sleep */
        if (__atomic_fetch_add(&s->ops[gen], 1, __ATOMIC_RELAXED) % 8 == 7)
            usleep(20);
    }
}

/* Whether the extent at `off` is what a record in `state` of lease slot
 * `slot` has there: its reservation (1, 3) or a live block (2). */
static int holds(ph_extents *x, uint64_t off, int state, unsigned slot)
{
    ph_extnode n;
    uint64_t page = (off - x->sp->data_off) / PH_PAGE_SIZE;
    if (ph_extents_copy(x, page, &n, 1) != 1 || n.page != page)
        return state == 0;
    if (state == 2)
        return n.kind == PH_EXT_LARGE;
    if (state == 1 || state == 3)
        return n.kind == PH_EXT_RESERVED && n.cls == slot;
    return !(n.kind == PH_EXT_RESERVED && n.cls == slot); /* 0: not this process's */
}

/* After slot's process died: its records as the log has them (the
 * operation in flight landed or not), then its reservations dropped. */
static uint64_t take_over(ph_extents *x, ph_pctx *c, pshared *s, unsigned slot)
{
    for (unsigned i = 0; i < RECS; i++) {
        prec *r = &s->rec[slot][i];
        if (r->next >= 0 && (r->state || r->next != 1) && holds(x, r->off, r->next, slot))
            r->state = r->next; /* it landed (a reservation in flight is not recorded) */
        r->next = -1;
        if (!holds(x, r->off, r->state, slot) && r->state)
            ph_test_fail(__FILE__, __LINE__, "slot %u record %u: state %d, not so in the log "
                         "at %llu", slot, i, r->state, (unsigned long long)r->off);
        if (r->state != 2)
            r->state = 0; /* reservations are dropped below */
    }
    return ph_extents_drop_owner(x, c, slot);
}

TEST(processes_killed_at_random)
{
    pheap *h = fresh_heap(512u << 20, "extshare-kill.heap");
    REQUIRE(h);
    pshared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(s != MAP_FAILED);
    memset(s, 0, sizeof(*s));
    for (unsigned p = 0; p <= PROCS; p++)
        for (unsigned i = 0; i < RECS; i++)
            s->rec[p][i].next = -1;
    /* the supervisor's own index: lease slot PROCS + 1, generation 0 */
    ph_extents *x = NULL;
    ph_plock_owner o = {PROCS + 1, gen_dead, s};
    REQUIRE_OK(ph_extents_open_shared(&h->sp, PROCS + 1, &s->lock, &o, &x));
    ph_pctx c = {0};
    pid_t pid[PROCS + 1] = {0};
    unsigned gen_of[PROCS + 1] = {0}, next_gen = 1, kills = 0;
    uint64_t rng = 77, dropped = 0, size0 = ph_space_size(&h->sp);
    const char *env = getenv("PHEAP_EXTSHARE_KILLS"); /* the torture runs more */
    uint64_t rounds = env ? strtoull(env, NULL, 10) : 300;
    for (unsigned k = 0; k <= rounds && next_gen < GENS - PROCS; k++) {
        for (unsigned p = 1; p <= PROCS; p++) {
            if (pid[p])
                continue;
            unsigned g = next_gen++;
            pid_t q = fork();
            if (q == 0)
                child(h, s, p, g, 1000 + g);
            REQUIRE(q > 0);
            pid[p] = q;
            gen_of[p] = g;
        }
        if (k == rounds)
            break;
        usleep((useconds_t)(200 + ph_test_rand(&rng) % 3000));
        unsigned p = 1 + (unsigned)(ph_test_rand(&rng) % PROCS);
        PH_TEST_KILL(pid[p]);
        __atomic_store_n(&s->dead[gen_of[p]], 1, __ATOMIC_RELEASE);
        pid[p] = 0;
        kills++;
        dropped += take_over(x, &c, s, p);
        if (ph_test_failed)
            break;
    }
    /* the end: all stop uncleanly */
    for (unsigned p = 1; p <= PROCS; p++) {
        if (pid[p] <= 0)
            continue;
        kill(pid[p], SIGKILL);
        waitpid(pid[p], NULL, 0);
        __atomic_store_n(&s->dead[gen_of[p]], 1, __ATOMIC_RELEASE);
        dropped += take_over(x, &c, s, p);
    }
    uint64_t takeovers = x->xtakeovers, ops = 0, enomem = 0;
    for (unsigned g = 0; g < GENS; g++) {
        takeovers += s->takeovers[g];
        ops += s->ops[g];
        enomem += s->enomem[g];
    }
    /* exactly the committed blocks: in the shared index, and in the log */
    char err[256];
    CHECK_EQ(ph_extents_check(x, err, sizeof(err)), 0);
    ph_extents *excl = NULL;
    REQUIRE_OK(ph_extents_open(&h->sp, &excl, NULL, NULL));
    CHECK_EQ(excl->dropped, 0); /* no reservation was left */
    uint64_t live = 0;
    for (unsigned p = 1; p <= PROCS; p++)
        for (unsigned i = 0; i < RECS; i++)
            if (s->rec[p][i].state == 2) {
                uint64_t bytes;
                CHECK_EQ(ph_extent_lookup(excl, s->rec[p][i].off, &bytes), 0);
                live++;
            }
    uint64_t n = 0;
    for (uint64_t pg = 0; pg < excl->pages; pg += excl->head[pg]->npages)
        n += excl->head[pg]->kind == PH_EXT_LARGE;
    ph_engine_stats st;
    ph_engine_stats_get(h->engine, &st);
    CHECK_EQ(n, live + st.large_extents);
    fprintf(stderr, "  %u kills, %llu operations (%llu refused: heap full), %llu takeovers of "
            "the lock, %llu reservations dropped, %llu blocks live, heap %s\n", kills,
            (unsigned long long)ops, (unsigned long long)enomem,
            (unsigned long long)takeovers, (unsigned long long)dropped, (unsigned long long)live,
            ph_space_size(&h->sp) > size0 ? "grown by the processes" : "not grown");
    CHECK(ops > 1000);
    CHECK(takeovers > 0);
    CHECK(ph_space_size(&h->sp) > size0);
    ph_extents_close(excl);
    for (unsigned p = 1; p <= PROCS; p++)
        for (unsigned i = 0; i < RECS; i++)
            if (s->rec[p][i].state == 2)
                REQUIRE_OK(ph_extent_free(x, &c, s->rec[p][i].off, PH_EXT_LARGE, NULL, 0, 0));
    ph_persist_ctx_release(&c);
    ph_extents_close(x);
    REQUIRE_OK(ph_extents_sync(h->engine->ext, NULL));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    munmap(s, sizeof(*s));
    unlink(ph_test_path("extshare-kill.heap"));
}
