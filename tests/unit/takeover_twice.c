/*
 * takeover_twice.c -- a takeover cut short by its taker's death and done
 * again by another survivor, while a live process allocates in between.
 *
 * D (owner 2) dies inside a pheap_free_from of a large block X: its lane
 * entry committed, nothing more.  T (owner 3) takes D over up to the
 * replay of D's lane, and dies before the retirement.  S (owner 1), alive
 * all along, allocates a block of X's size, then takes D over again (its
 * slot was left as it was), then T.  The replay by T must not have made X
 * free space (S would get X, and S's second replay would free S's block):
 * it holds X until the retirement, and T's own takeover gives X back.  At
 * the end the heap opened alone passes pheap_check with exactly S's blocks
 * and the words live.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "alloc/engine_int.h"
#include "alloc/engine_share.h"
#include "format/header.h"
#include "harness.h"
#include "heap/heap.h"
#include "log/lane.h"
#include "share_test.h"

static int alive(void *ctx, uint64_t who)
{
    (void)ctx;
    (void)who;
    return 0;
}

TEST(a_replay_redone_after_its_taker_died_frees_no_live_block)
{
    const char *path = ph_test_path("takeover_twice.heap");
    pheap_options o = {.size = 4u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off words = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(words);
    uint64_t lock = 0;
    ph_engine *e[3];
    ph_engine_share sh[3];
    ph_tcache t[3];
    ph_pctx c = {0};
    for (unsigned i = 0; i < 3; i++) {
        sh[i] = ph_test_share(h, i + 1, 0, &lock, alive, NULL);
        REQUIRE_OK(ph_engine_open_shared(&h->sp, &sh[i], &e[i]));
        ph_test_tcache(&t[i]);
    }
    ph_engine *S = e[0], *D = e[1], *T = e[2];
    const size_t size = 20000;
    uint64_t *w = ph_space_at(&h->sp, words);
    uint64_t X = ph_engine_alloc(D, &t[1], &c, size, NULL), bytes;
    REQUIRE(X);
    ph_store(&w[0], X);
    /* D dies inside pheap_free_from(&w[0]): its entry committed */
    REQUIRE_OK(ph_engine_lane(D, &t[1], &c));
    REQUIRE_OK(ph_extent_lookup(D->ext, X, &bytes));
    ph_lane_begin(&D->lanes, &c, &t[1].lane, PH_LOG_FREE_FROM, X, bytes, words, X, 0);
    /* T replays D's lane, and dies before the retirement */
    ph_engine_pushes gives = {NULL, 0, 0};
    int rc = 0;
    REQUIRE_OK(ph_extents_sync(T->ext, NULL));
    CHECK_EQ(ph_engine_share_replay(T, &c, (unsigned)t[1].lane.index, &gives, &rc), 1);
    REQUIRE_OK(rc);
    CHECK_EQ(gives.n, 1); /* X, held */
    free(gives.v);
    CHECK_EQ(ph_load(&w[0]), 0);
    /* S allocates a block of X's size: never X, which T holds */
    uint64_t Y = ph_engine_alloc(S, &t[0], &c, size, NULL);
    REQUIRE(Y);
    CHECK(Y != X);
    ph_store(&w[1], Y);
    /* S takes D over again, then T */
    ph_takeover_info ti;
    REQUIRE_OK(ph_engine_takeover(S, &c, 2, 2, &ti));
    CHECK_EQ(ti.entries, 1);
    uint64_t Z = ph_engine_alloc(S, &t[0], &c, size, NULL);
    REQUIRE(Z);
    CHECK(Z != Y);
    ph_store(&w[2], Z);
    REQUIRE_OK(ph_engine_takeover(S, &c, 3, 3, &ti));
    CHECK_EQ(ti.reservations, 1); /* X, held by T: free space now */
    ph_persist_ctx_release(&c);
    for (unsigned i = 0; i < 3; i++)
        ph_engine_close(e[i]);
    pheap_close(h);
    /* every process gone: the heap opened alone */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), 0);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.live_blocks, 3); /* the words, Y and Z */
    CHECK(pheap_usable_size(h, Y) >= size && pheap_usable_size(h, Z) >= size);
    pheap_close(h);
}
