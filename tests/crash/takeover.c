/*
 * takeover.c -- the takeover of a dead process of a shared heap, crashed
 * at every fence and store.  Process A (a shared engine of the simulated
 * heap) allocates into words of the heap, frees one, reserves a large
 * block, and dies in the middle of two logged operations: an allocation
 * into word 2 (its lane entry committed, nothing else done) and a free
 * from word 1 (committed too).  Process B takes it over: the entries
 * rolled forward, the reservation dropped, A's slabs left to no one; then
 * B allocates from what A left.  After every crash the open (every
 * process gone) passes pheap_check, word 0 names a live block, word 1 is
 * empty, word 2 names a live block once the takeover's redo reached it
 * (the entry is committed: recovery redoes it as well), and no block
 * lives that no word names.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "format/header.h"
#include "harness.h"
#include "share_test.h"
#include "heap/heap.h"
#include "log/lane.h"

static uint64_t ext_lock;
static pheap_off words; /* four words, zeroed, made before the workload */

static int a_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    return who == 1;
}

static void workload(ph_crash_ctx *c)
{
    pheap *h = c->heap;
    ph_pctx *pc = ph_heap_pctx(h);
    uint64_t *w = pheap_direct(h, words);
    ph_engine_share sa = ph_test_share(h, 1, 0, &ext_lock, a_dead, NULL),
                    sb = ph_test_share(h, 2, 0, &ext_lock, a_dead, NULL);
    ph_engine *a = NULL, *b = NULL;
    ph_tcache ta, tb;
    ph_test_tcache(&ta);
    ph_test_tcache(&tb);
    ext_lock = 0;
    if (ph_engine_open_shared(&h->sp, &sa, &a) || ph_engine_open_shared(&h->sp, &sb, &b)) {
        ph_test_fail(__FILE__, __LINE__, "open: %s", pheap_errmsg());
        return;
    }
    int rc = ph_engine_alloc_to(a, &ta, pc, 48, &w[0], NULL);
    if (!rc)
        rc = ph_engine_alloc_to(a, &ta, pc, 48, &w[1], NULL);
    uint64_t res = 0;
    if (!rc)
        rc = ph_extent_reserve(a->ext, pc, 100u << 10, PH_EXT_LARGE, &res);
    if (!rc)
        rc = ph_engine_free_from(a, &ta, pc, &w[1]);
    ph_crash_mark(c); /* 1 */
    /* A dies inside a logged allocation: its entry committed, nothing more */
    uint64_t blk = ph_tcache_pop(&ta, ph_sizeclass(48));
    if (!rc && blk)
        ph_lane_begin(&a->lanes, pc, &ta.lane, PH_LOG_ALLOC_TO, blk, 48,
                      (uint64_t)((char *)&w[2] - h->sp.base), 0, 0);
    ext_lock = 1; /* and inside the extent log's lock */
    ph_crash_mark(c); /* 2 */
    ph_takeover_info ti = {0, 0, 0, 0};
    if (!rc && blk)
        rc = ph_engine_takeover(b, pc, 1, 1, &ti);
    ph_crash_mark(c); /* 3 */
    if (!rc && (ti.entries != 1 || ti.reservations != 1 || ti.slabs == 0))
        ph_test_fail(__FILE__, __LINE__, "takeover: %u entries, %llu reservations, %llu slabs",
                     ti.entries, (unsigned long long)ti.reservations,
                     (unsigned long long)ti.slabs);
    if (!rc && ph_load(&w[2]) != blk) /* rolled forward while the heap runs */
        ph_test_fail(__FILE__, __LINE__, "word 2 holds %llu after the takeover, not %llu",
                     (unsigned long long)w[2], (unsigned long long)blk);
    if (!rc) /* B allocates from the slab A left: adopted */
        rc = ph_engine_alloc_to(b, &tb, pc, 48, &w[3], NULL);
    ph_crash_mark(c); /* 4 */
    if (rc || !blk)
        ph_test_fail(__FILE__, __LINE__, "workload: %s", pheap_errmsg());
    ph_engine_thread_exit(b, &tb, pc);
    free(ta.store);
    free(tb.store);
    ph_engine_detach(b);
    ph_engine_close(a);
    ph_engine_close(b);
    if (ph_extents_sync(h->engine->ext, NULL)) /* the heap's own index learns it all */
        ph_test_fail(__FILE__, __LINE__, "sync: %s", pheap_errmsg());
    ext_lock = 0;
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    if (done < 1)
        return;
    const uint64_t *w = pheap_direct(h, words);
    if (!w[0] || pheap_usable_size(h, w[0]) == 0)
        ph_test_fail(__FILE__, __LINE__, "word 0 names no live block after %u ops", done);
    if (done >= 2 && w[1])
        ph_test_fail(__FILE__, __LINE__, "word 1 still names %llu after %u ops",
                     (unsigned long long)w[1], done);
    if (done >= 2 && (!w[2] || pheap_usable_size(h, w[2]) == 0))
        ph_test_fail(__FILE__, __LINE__, "word 2 names no live block after %u ops", done);
    if (done >= 4 && !w[3])
        ph_test_fail(__FILE__, __LINE__, "word 3 is empty after %u ops", done);
    struct pheap_stats st;
    if (pheap_stats(h, &st) == 0) {
        uint64_t named = 1; /* the words' block */
        for (unsigned i = 0; i < 4; i++)
            named += w[i] != 0;
        if (st.live_blocks != named)
            ph_test_fail(__FILE__, __LINE__, "%llu blocks live, %llu named, after %u ops",
                         (unsigned long long)st.live_blocks, (unsigned long long)named, done);
    }
}

TEST(takeover_at_every_fence)
{
    const char *base = ph_test_path("takeover.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE(words = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL));
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("takeover", base, workload, verify, NULL);
    CHECK(st.fences > 8);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}
