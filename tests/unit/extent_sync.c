/*
 * extent_sync.c -- a second index of a heap's extents, kept up to date
 * with ph_extents_sync while the heap's own index allocates and frees
 * large blocks and slabs, grows the heap and compacts the log: after every
 * round the two tile the data region alike, extent for extent, and the
 * second passes the check against a fresh replay of the log; a reservation
 * of the second survives the rebuild a compaction forces; an entry that
 * contradicts the index is refused.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine_int.h"
#include "alloc/extent.h"
#include "extent_common.h"
#include "harness.h"
#include "heap/heap.h"

TEST(a_second_index_follows_the_first)
{
    pheap *h = fresh_heap(256u << 20, "extsync.heap");
    REQUIRE(h);
    ph_extents *own = h->engine->ext, *other = NULL;
    REQUIRE_OK(ph_extents_open(&h->sp, &other, NULL, NULL));
    enum { LIVE = 64 };
    pheap_off big[LIVE] = {0}, small[LIVE * 8] = {0};
    uint64_t rng = 5, applied = 0;
    unsigned rebuilds = 0, grew = 0;
    uint64_t size0 = ph_space_size(&h->sp);
    for (unsigned round = 0; round < 60; round++) {
        for (unsigned k = 0; k < 24; k++) {
            unsigned i = (unsigned)(ph_test_rand(&rng) % LIVE);
            if (big[i]) {
                REQUIRE_OK(pheap_free(h, big[i]));
                big[i] = 0;
            } else {
                size_t sz = 20000 + ph_test_rand(&rng) % (round % 7 == 6 ? 2000000 : 300000);
                REQUIRE(big[i] = pheap_alloc(h, sz));
            }
            /* small blocks of many classes: slabs made and released */
            unsigned j = (unsigned)(ph_test_rand(&rng) % (LIVE * 8));
            if (small[j]) {
                REQUIRE_OK(pheap_free(h, small[j]));
                small[j] = 0;
            } else {
                REQUIRE(small[j] = pheap_alloc(h, 16u << (j % 10)));
            }
        }
        ph_engine_release_empty_slabs(h->engine, ph_heap_pctx(h));
        for (unsigned k = 0; k < 40; k++) /* appends without growth: the log compacts */
            REQUIRE_OK(pheap_free(h, pheap_alloc(h, 40000)));
        ph_extents_sync_info info;
        REQUIRE_OK(ph_extents_sync(other, &info));
        applied += info.applied;
        rebuilds += (unsigned)info.rebuilt;
        grew |= ph_space_size(&h->sp) > size0;
        expect_same(own, other, __LINE__);
    }
    fprintf(stderr, "  %llu entries replayed, %u rebuilds after compactions, heap %s\n",
            (unsigned long long)applied, rebuilds, grew ? "grew" : "did not grow");
    CHECK(applied > 200);
    CHECK(rebuilds > 0);
    CHECK(grew);
    ph_extents_close(other);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("extsync.heap"));
}

/* The kind of the extent at `off` in x, or -1. */
static int kind_at(ph_extents *x, uint64_t page)
{
    ph_extnode n;
    return ph_extents_copy(x, page, &n, 1) == 1 && n.page == page ? (int)n.kind : -1;
}

TEST(a_reservation_survives_a_rebuild)
{
    pheap *h = fresh_heap(256u << 20, "extsync-res.heap");
    REQUIRE(h);
    ph_extents *own = h->engine->ext, *other = NULL;
    REQUIRE_OK(ph_extents_open(&h->sp, &other, NULL, NULL));
    /* A 64 KiB hole between two blocks; the other index reserves it (best
     * fit), and the heap's own index, which does not know (sharing will
     * tell it), churns blocks too large for it until the log compacts. */
    pheap_off a = pheap_alloc(h, 256u << 10), b = pheap_alloc(h, 64u << 10),
              c = pheap_alloc(h, 256u << 10);
    REQUIRE(a && b && c);
    REQUIRE_OK(pheap_free(h, b));
    REQUIRE_OK(ph_extents_sync(other, NULL));
    uint64_t res;
    REQUIRE_OK(ph_extent_reserve(other, ph_heap_pctx(h), 64u << 10, PH_EXT_LARGE, &res));
    CHECK_EQ(res, b);
    uint64_t page = (res - h->sp.data_off) / 4096;
    unsigned rebuilds = 0;
    for (unsigned k = 0; k < 4000 && !rebuilds; k++) {
        pheap_off x = pheap_alloc(h, 100u << 10);
        REQUIRE(x);
        REQUIRE_OK(pheap_free(h, x));
        if (k % 20 == 19) {
            ph_extents_sync_info info;
            REQUIRE_OK(ph_extents_sync(other, &info));
            rebuilds += (unsigned)info.rebuilt;
        }
    }
    CHECK(rebuilds > 0);
    CHECK_EQ(kind_at(other, page), PH_EXT_RESERVED);
    CHECK_EQ(kind_at(own, page), PH_EXT_FREE);
    ph_extent_cancel(other, ph_heap_pctx(h), res);
    REQUIRE_OK(ph_extents_sync(other, NULL));
    expect_same(own, other, __LINE__);
    ph_extents_close(other);
    REQUIRE_OK(pheap_free(h, a));
    REQUIRE_OK(pheap_free(h, c));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("extsync-res.heap"));
}

/* Until reservations are shared: the heap's own index allocates pages the
 * other holds reserved, and the other refuses the entry that says so. */
TEST(a_contradicting_entry_is_refused)
{
    pheap *h = fresh_heap(256u << 20, "extsync-bad.heap");
    REQUIRE(h);
    ph_extents *other = NULL;
    REQUIRE_OK(ph_extents_open(&h->sp, &other, NULL, NULL));
    uint64_t res;
    REQUIRE_OK(ph_extent_reserve(other, ph_heap_pctx(h), 64u << 10, PH_EXT_LARGE, &res));
    pheap_off b = pheap_alloc(h, 64u << 10);
    REQUIRE(b == res); /* the same best fit */
    CHECK_EQ(ph_extents_sync(other, NULL), PHEAP_ECORRUPT);
    CHECK(strstr(pheap_errmsg(), "does not hold free") != NULL);
    ph_extents_close(other);
    REQUIRE_OK(pheap_check(h, NULL)); /* the heap's own view is whole */
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("extsync-bad.heap"));
}

/* ---- a shared heap's indexes: every reservation is in the log ---------------- */

typedef struct shared_block {
    uint64_t off;
    int state; /* 0 none, 1 reserved, 2 live, 3 held (freed, not released) */
    unsigned who;
} shared_block;

/* Two indexes of one heap, each for another process (owners 1 and 2),
 * take turns -- each brought up to date before its operation, as the lock
 * between processes will have it -- reserving, committing, cancelling,
 * allocating, freeing with a hold and releasing large blocks; after every
 * step both tile the heap alike, reservations and their owners included;
 * a third index built from the log alone agrees; compactions keep the
 * reservations; an exclusive open's index takes them for free space. */
TEST(shared_reservations_are_seen_by_every_index)
{
    pheap *h = fresh_heap(256u << 20, "extsync-shared.heap");
    REQUIRE(h);
    ph_pctx *c = ph_heap_pctx(h);
    ph_extents *x[2] = {NULL, NULL};
    REQUIRE_OK(ph_extents_open_owned(&h->sp, 1, &x[0]));
    REQUIRE_OK(ph_extents_open_owned(&h->sp, 2, &x[1]));
    enum { NB = 48 };
    shared_block b[NB];
    memset(b, 0, sizeof(b));
    uint64_t rng = 9;
    unsigned rebuilds = 0, steps = 0;
    for (unsigned step = 0; step < 20000; step++) {
        unsigned i = (unsigned)(ph_test_rand(&rng) % NB);
        unsigned w = b[i].state ? b[i].who : (unsigned)(ph_test_rand(&rng) % 2);
        ph_extents *me = x[w];
        ph_extents_sync_info info;
        REQUIRE_OK(ph_extents_sync(me, &info));
        rebuilds += (unsigned)info.rebuilt;
        size_t bytes = (size_t)(20000 + ph_test_rand(&rng) % 200000);
        switch (b[i].state) {
        case 0:
            if (ph_test_rand(&rng) % 2) {
                REQUIRE_OK(ph_extent_reserve(me, c, bytes, PH_EXT_LARGE, &b[i].off));
                b[i].state = 1;
            } else {
                REQUIRE_OK(ph_extent_alloc(me, c, bytes, PH_EXT_LARGE, 0, NULL, &b[i].off));
                b[i].state = 2;
            }
            b[i].who = w;
            break;
        case 1:
            if (ph_test_rand(&rng) % 2) {
                ph_extent_commit(me, c, b[i].off, PH_EXT_LARGE, 0, NULL, 0);
                b[i].state = 2;
            } else {
                ph_extent_cancel(me, c, b[i].off);
                b[i].state = 0;
            }
            break;
        case 2:
            REQUIRE_OK(ph_extent_free(me, c, b[i].off, PH_EXT_LARGE, NULL, 0, 1));
            b[i].state = 3;
            break;
        default:
            ph_extent_release(me, c, b[i].off);
            b[i].state = 0;
            break;
        }
        REQUIRE_OK(ph_extents_sync(x[!w], &info));
        rebuilds += (unsigned)info.rebuilt;
        expect_same(x[w], x[!w], __LINE__);
        steps++;
        if (ph_test_failed)
            break;
    }
    /* the log alone says the same */
    ph_extents *third = NULL;
    REQUIRE_OK(ph_extents_open_owned(&h->sp, 3, &third));
    REQUIRE_OK(ph_extents_sync(x[0], NULL));
    expect_same(x[0], third, __LINE__);
    unsigned reserved = 0;
    for (unsigned i = 0; i < NB; i++)
        reserved += b[i].state == 1 || b[i].state == 3;
    fprintf(stderr, "  %u steps, %u rebuilds after compactions, %u reservations at the end\n",
            steps, rebuilds, reserved);
    CHECK(rebuilds > 0);
    CHECK(reserved > 0);
    /* An exclusive open's index: every reservation is free space. */
    ph_extents *excl = NULL;
    REQUIRE_OK(ph_extents_open(&h->sp, &excl, NULL, NULL));
    char err[256];
    CHECK_EQ(ph_extents_check(excl, err, sizeof(err)), 0);
    for (unsigned i = 0; i < NB; i++) {
        uint64_t bytes;
        int rc = ph_extent_lookup(excl, b[i].off, &bytes);
        if (b[i].state == 2)
            CHECK_EQ(rc, 0);
        else if (b[i].state)
            CHECK(rc != 0);
    }
    ph_extents_close(excl);
    ph_extents_close(third);
    ph_extents_close(x[0]);
    ph_extents_close(x[1]);
    /* The heap's own index learns it all before the close (its purge must
     * not punch what the others hold); reopened, the heap is sound, with
     * the reservations free. */
    REQUIRE_OK(ph_extents_sync(h->engine->ext, NULL));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(ph_test_path("extsync-shared.heap"), NULL, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(ph_test_path("extsync-shared.heap"));
}
