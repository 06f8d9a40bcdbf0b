/*
 * extlog_shared.c -- a shared heap's reservations in the extent log
 * through crashes.  The heap's own index logs its reservations as a
 * process of a shared heap would (owner 1): reservations, commits and
 * cancels, a free held and then released, a reservation kept across a
 * compaction (under make torture; the rest in make test).  At every crash point, in every mode, the open that follows
 * (an exclusive one: the process is gone) passes pheap_check, every block
 * whose commit returned is live, every reservation that no commit made
 * live is free space, and the heap keeps working.
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
#define NOPS 10

static uint64_t a, b, cc, e; /* set by the workload, the same in every run */

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
    case 8: { /* appends enough for a compaction, which keeps e reserved (a few hundred
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
    expect(h, "reserved across a compaction, then committed", e, E_SIZE, done, 10, 0);
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
