/*
 * defrag.c -- pheap_defrag through crashes: two slabs of 4 KiB blocks
 * left with three live blocks each, whose offsets sit in an anchor block
 * named by a root; pheap_defrag, given the anchor's words as the slots,
 * moves the six blocks into one slab (made for them) and gives the two
 * back; then the heap is used.  At every crash point, in every mode, the
 * recovered heap passes pheap_check and each anchor word names a live
 * 4 KiB block with its contents -- the old one or the moved one, never
 * freed space -- and the heap keeps working.
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define BLK 4096u  /* 16 blocks a slab */
#define NALL 32u   /* two slabs */
#define NKEEP 6u   /* three in each */
#define NOPS 4

typedef struct anchor {
    pheap_off blk[NKEEP];
} anchor;

static anchor *anchor_of(pheap *h)
{
    pheap_off a = pheap_root_get(h, "anchor");
    return a ? pheap_direct(h, a) : NULL;
}

static int kept(unsigned i)
{
    return i == 2 || i == 9 || i == 13 || i == 17 || i == 22 || i == 30;
}

static int step(pheap *h, unsigned op)
{
    static pheap_off all[NALL];
    anchor *a = anchor_of(h);
    int rc = 0;
    switch (op) {
    case 0: /* the blocks, each kept one filled with the pattern of its number */
        for (unsigned i = 0, k = 0; i < NALL && !rc; i++) {
            if (!(all[i] = pheap_alloc(h, BLK)))
                return -1;
            if (kept(i)) {
                void *p = pheap_direct(h, all[i]);
                ph_test_fill(p, BLK, k);
                pheap_persist(h, p, BLK);
                a->blk[k] = all[i];
                pheap_persist(h, &a->blk[k], sizeof(a->blk[k]));
                k++;
            }
        }
        break;
    case 1: /* all but six freed */
        for (unsigned i = 0; i < NALL && !rc; i++)
            if (!kept(i))
                rc = pheap_free(h, all[i]);
        break;
    case 2: { /* the six move */
        pheap_off *slots[NKEEP];
        for (unsigned k = 0; k < NKEEP; k++)
            slots[k] = &a->blk[k];
        pheap_defrag_result r;
        rc = pheap_defrag(h, slots, NKEEP, &r);
        if (!rc && (r.relocated != NKEEP || r.slabs_freed != 2))
            ph_test_fail(__FILE__, __LINE__, "defrag: %zu moved, %zu slabs freed", r.relocated,
                         r.slabs_freed);
        break;
    }
    default: /* the space they left is used */
        for (unsigned i = 0; i < NALL && !rc; i++)
            if (!(all[i] = pheap_alloc(h, BLK)))
                rc = -1;
        for (unsigned i = 0; i < NALL && !rc; i++)
            rc = pheap_free(h, all[i]);
        break;
    }
    return rc;
}

static void workload(ph_crash_ctx *c)
{
    for (unsigned op = 0; op < NOPS; op++) {
        if (step(c->heap, op))
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", op, pheap_errmsg());
        ph_crash_mark(c);
    }
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    anchor *a = anchor_of(h);
    if (!a) {
        ph_test_fail(__FILE__, __LINE__, "root \"anchor\" lost");
        return;
    }
    for (unsigned k = 0; done >= 1 && k < NKEEP; k++) {
        pheap_off o = a->blk[k];
        if (pheap_usable_size(h, o) != BLK)
            ph_test_fail(__FILE__, __LINE__, "block %u at %llu: not live (%s)", k,
                         (unsigned long long)o, pheap_errmsg());
        else if (!ph_test_intact(pheap_direct(h, o), BLK, k))
            ph_test_fail(__FILE__, __LINE__, "block %u at %llu: contents changed", k,
                         (unsigned long long)o);
    }
    struct pheap_stats st;
    if (done >= 3 && pheap_stats(h, &st) == 0) { /* moved: all in one slab */
        for (unsigned k = 1; k < NKEEP; k++)
            if ((a->blk[k] - st.data_offset) >> 16 != (a->blk[0] - st.data_offset) >> 16)
                ph_test_fail(__FILE__, __LINE__, "block %u is not in block 0's slab", k);
    }
    ph_test_map_check(h);
}

TEST(defrag_at_every_fence)
{
    const char *base = ph_test_path("defrag-crash.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, sizeof(anchor));
    REQUIRE(a);
    memset(pheap_direct(h, a), 0, sizeof(anchor));
    pheap_persist(h, pheap_direct(h, a), sizeof(anchor));
    REQUIRE_OK(pheap_root_set(h, "anchor", a));
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("defrag", base, workload, verify, NULL);
    CHECK(st.fences > NOPS);
    CHECK(st.images > st.fences);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}
