/*
 * extlog_shared.c -- a shared heap's reservations in the extent log
 * through crashes.  The heap's own index logs its reservations as a
 * process of a shared heap would (owner 1): reservations, commits and
 * cancels, a free held and then released, a chunk set aside as damaged
 * (the screen refuses it: a logged reservation), a reservation kept across
 * a compaction (under make torture; the rest in make test).  At every crash
 * point, in every mode, the open that follows
 * (an exclusive one: the process is gone) passes pheap_check, every block
 * whose commit returned is live, every reservation that no commit made
 * live is free space, and the heap keeps working.  And a takeover: a
 * process dies inside the log's lock between processes, halfway through
 * an append; another takes the lock over, drops the dead one's
 * reservations and allocates, crashed at every point as well.
 */
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "harness.h"
#include "heap/heap.h"

/* Sizes of the four blocks: all different, and none the size of a block
 * the harness allocates when it uses the heap, so that the size at an
 * offset says which block is there. */
#define A_SIZE (64u << 10)
#define B_SIZE (96u << 10)
#define C_SIZE (160u << 10)
#define E_SIZE (128u << 10)
#define D_SIZE (48u << 10)
#define NOPS 11

static uint64_t a, b, cc, e; /* set by the workload, the same in every run */
static uint64_t aside;       /* the chunk the screen below refused */

/* A screen that finds the first chunk asked about damaged. */
static int refuse_first(void *arg, uint64_t off, uint64_t bytes, uint64_t *bad)
{
    (void)arg, (void)bytes;
    *bad = aside = off - off % PH_CHUNK_SIZE;
    return ph_err(PHEAP_ECORRUPT, "chunk at %llu refused", (unsigned long long)off);
}

static int step(pheap *h, unsigned op)
{
    ph_extents *x = h->engine->ext;
    ph_pctx *c = ph_heap_pctx(h);
    int rc = 0;
    switch (op) {
    case 0:
        rc = ph_extent_reserve(x, c, A_SIZE, PH_EXT_LARGE, &a);
        break;
    case 1:
        ph_extent_commit(x, c, a, PH_EXT_LARGE, 0, NULL, 0);
        break;
    case 2:
        rc = ph_extent_reserve(x, c, B_SIZE, PH_EXT_LARGE, &b);
        if (!rc)
            rc = ph_extent_reserve(x, c, C_SIZE, PH_EXT_LARGE, &cc);
        break;
    case 3:
        ph_extent_cancel(x, c, b);
        break;
    case 4: /* freed, held: a reservation of the live extent */
        rc = ph_extent_free(x, c, a, PH_EXT_LARGE, NULL, 0, 1);
        break;
    case 5:
        ph_extent_release(x, c, a);
        break;
    case 6:
        ph_extent_commit(x, c, cc, PH_EXT_LARGE, 0, NULL, 0);
        break;
    case 7:
        rc = ph_extent_reserve(x, c, E_SIZE, PH_EXT_LARGE, &e);
        break;
    case 8: { /* the chunk set aside: the reservation fails, the chunk is reserved */
        ph_extent_screen_fn screen = x->screen;
        uint64_t d = 0;
        x->screen = refuse_first;
        rc = ph_extent_reserve(x, c, D_SIZE, PH_EXT_LARGE, &d);
        x->screen = screen;
        uint32_t kind;
        uint64_t start;
        if (rc == PHEAP_ECORRUPT && ph_extents_hold(x, c, aside, &kind, &start) == 0 &&
            kind == PH_EXT_RESERVED && start == aside)
            rc = 0;
        else
            ph_test_fail(__FILE__, __LINE__, "set aside: %d (%s)", rc, pheap_errmsg());
        ph_extents_unhold(x, c);
        break;
    }
    case 9: { /* appends enough for a compaction, which keeps e reserved (a few hundred
               * fences: make torture's run, crash_extlog_shared_full, only) */
        if (!ph_crash_full())
            break;
        uint64_t epoch = x->epoch;
        for (unsigned k = 0; k < 400 && !rc && x->epoch == epoch; k++) {
            uint64_t d;
            rc = ph_extent_reserve(x, c, 20u << 10, PH_EXT_LARGE, &d);
            if (!rc)
                ph_extent_cancel(x, c, d);
        }
        if (!rc && x->epoch == epoch)
            ph_test_fail(__FILE__, __LINE__, "no compaction");
        break;
    }
    default:
        ph_extent_commit(x, c, e, PH_EXT_LARGE, 0, NULL, 0);
        break;
    }
    return rc;
}

static void workload(ph_crash_ctx *c)
{
    c->heap->engine->ext->owner = 1; /* a process of a shared heap */
    for (unsigned op = 0; op < NOPS; op++) {
        if (step(c->heap, op))
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", op, pheap_errmsg());
        ph_crash_mark(c);
    }
}

/* Live after `live_from` ops returned, free again after `free_from` (0:
 * never); the op in flight at either edge may or may not be seen. */
static void expect(pheap *h, const char *what, uint64_t off, size_t size, unsigned done,
                   unsigned live_from, unsigned free_from)
{
    if (!off)
        return;
    int live = pheap_usable_size(h, off) == size;
    int must_live = live_from && done >= live_from && !(free_from && done >= free_from - 1);
    int must_free = !live_from || done + 1 < live_from || (free_from && done >= free_from);
    if ((must_live && !live) || (must_free && live))
        ph_test_fail(__FILE__, __LINE__, "%s at %llu after %u ops: %s", what,
                     (unsigned long long)off, done, live ? "live" : "free");
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    expect(h, "committed, then freed and released", a, A_SIZE, done, 2, 5);
    expect(h, "reserved, then cancelled", b, B_SIZE, done, 0, 0);
    expect(h, "reserved, then committed", cc, C_SIZE, done, 7, 0);
    expect(h, "reserved across a compaction, then committed", e, E_SIZE, done, 11, 0);
    expect(h, "set aside", aside, PH_CHUNK_SIZE, done, 0, 0);
    ph_test_map_check(h);
}

TEST(shared_reservations_at_every_fence)
{
    const char *base = ph_test_path("extlog-shared.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("extlog-shared", base, workload, verify, NULL);
    CHECK(st.fences > NOPS);
    CHECK(st.images > st.fences);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}

/* ---- a takeover: the survivor drops a dead process's reservations ------------------- */

static uint64_t lockw;            /* the lock between the two processes (volatile) */
static uint64_t ta, tb, tf, tg;   /* the dead one's live block, reservation and held free;
                                     the survivor's block */

static int first_is_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    return who == 1;
}

static const ph_plock_owner dead_one = {1, first_is_dead, NULL}, survivor = {2, first_is_dead, NULL};

/* Process 1 (the heap's own index, as a process of a shared heap) commits
 * ta, reserves tb, frees tf with a hold, and dies inside the lock halfway
 * through an append; process 2 takes the lock over, drops what process 1
 * held and allocates tg.  Marks: 1 ta committed, 2 tb reserved, 3 tf
 * committed, 4 tf freed and held, 5 the takeover, 6 tg committed. */
static void takeover_workload(ph_crash_ctx *c)
{
    pheap *h = c->heap;
    ph_extents *x = h->engine->ext, *y = NULL;
    ph_pctx *pc = ph_heap_pctx(h);
    lockw = 0;
    x->owner = 1;
    ph_extents_share(x, &lockw, &dead_one);
    int rc = ph_extent_reserve(x, pc, A_SIZE, PH_EXT_LARGE, &ta);
    if (!rc)
        ph_extent_commit(x, pc, ta, PH_EXT_LARGE, 0, NULL, 0);
    ph_crash_mark(c);
    if (!rc)
        rc = ph_extent_reserve(x, pc, B_SIZE, PH_EXT_LARGE, &tb);
    ph_crash_mark(c);
    if (!rc && (rc = ph_extent_reserve(x, pc, C_SIZE, PH_EXT_LARGE, &tf)) == 0)
        ph_extent_commit(x, pc, tf, PH_EXT_LARGE, 0, NULL, 0);
    ph_crash_mark(c);
    if (!rc)
        rc = ph_extent_free(x, pc, tf, PH_EXT_LARGE, NULL, 0, 1);
    ph_crash_mark(c);
    /* it dies holding the lock, one word of an append written */
    lockw = dead_one.me;
    uint64_t lines = x->half_entries / 4, j = x->tail;
    ph_extlog_entry *torn = &x->half[x->active][(j % lines) * 4 + j / lines];
    ph_persist_store_nt_words(&h->sp.persist, pc, &torn->w0,
                              (const uint64_t[1]){(x->epoch >> 16 & 0xffff) << 48 | 7}, 1);
    if (!rc)
        rc = ph_extents_open_owned(&h->sp, 2, &y);
    if (!rc) {
        ph_extents_share(y, &lockw, &survivor);
        uint64_t dropped = ph_extents_drop_owner(y, pc, 1);
        if (dropped != 2)
            ph_test_fail(__FILE__, __LINE__, "%llu reservations dropped, not 2",
                         (unsigned long long)dropped);
        if (y->xtakeovers != 1)
            ph_test_fail(__FILE__, __LINE__, "the lock was not taken over");
    }
    ph_crash_mark(c);
    if (!rc && (rc = ph_extent_reserve(y, pc, E_SIZE, PH_EXT_LARGE, &tg)) == 0)
        ph_extent_commit(y, pc, tg, PH_EXT_LARGE, 0, NULL, 0);
    ph_crash_mark(c);
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "%s", pheap_errmsg());
    /* the heap's index learns it all, and closes as an exclusive open's */
    ph_extents_close(y);
    ph_extents_share(x, NULL, NULL);
    x->owner = 0;
    if (ph_extents_sync(x, NULL))
        ph_test_fail(__FILE__, __LINE__, "%s", pheap_errmsg());
}

static void takeover_verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    expect(h, "committed by the dead process", ta, A_SIZE, done, 1, 0);
    expect(h, "reserved by the dead process", tb, B_SIZE, done, 0, 0);
    expect(h, "freed with a hold by the dead process", tf, C_SIZE, done, 3, 4);
    expect(h, "committed by the survivor", tg, E_SIZE, done, 6, 0);
    ph_test_map_check(h);
}

TEST(takeover_at_every_fence)
{
    const char *base = ph_test_path("extlog-takeover.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("extlog-takeover", base, takeover_workload,
                                           takeover_verify, NULL);
    CHECK(st.fences > 6);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}
