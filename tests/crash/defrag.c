/*
 * defrag.c -- pheap_defrag through crashes: three slabs of 4 KiB blocks
 * left with three, three and ten live blocks, whose offsets sit in an
 * anchor block named by a root; pheap_defrag, given the anchor's words as
 * the slots, moves the six blocks of the two sparse slabs into the free
 * blocks of the third and gives the two back; then the heap is used.  At every crash point, in every mode, the
 * recovered heap passes pheap_check and each anchor word names a live
 * 4 KiB block with its contents -- the old one or the moved one, never
 * freed space -- and the heap keeps working.
 */
#include "defrag_common.h"

#define BLK 4096u  /* 16 blocks a slab */
#define NALL 48u   /* three slabs */
#define NKEEP 16u  /* three, three and ten */
#define NMOVE 6u
#define NOPS 4

typedef struct anchor {
    pheap_off blk[NKEEP];
} anchor;

static int kept(unsigned i)
{
    return i == 2 || i == 9 || i == 13 || i == 17 || i == 22 || i == 30 || (i >= 34 && i < 44);
}

static int defrag_step(pheap *h, unsigned op)
{
    static pheap_off all[NALL];
    anchor *a = defrag_anchor_block(h);
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
    case 1: /* all but sixteen freed */
        for (unsigned i = 0; i < NALL && !rc; i++)
            if (!kept(i))
                rc = pheap_free(h, all[i]);
        break;
    case 2: { /* six move */
        pheap_off *slots[NKEEP];
        for (unsigned k = 0; k < NKEEP; k++)
            slots[k] = &a->blk[k];
        rc = defrag_expect(h, slots, NKEEP, NMOVE, 2, 0);
        break;
    }
    default: /* the space they left is used */
        rc = defrag_churn(h, BLK, BLK, NALL);
        break;
    }
    return rc;
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    anchor *a = defrag_anchor_block(h);
    if (!a)
        return;
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
    if (done >= 3 && pheap_stats(h, &st) == 0) { /* moved: all in the full slab */
        for (unsigned k = 1; k < NKEEP; k++)
            if ((a->blk[k] - st.data_offset) >> 16 != (a->blk[0] - st.data_offset) >> 16)
                ph_test_fail(__FILE__, __LINE__, "block %u is not in block 0's slab", k);
    }
    ph_test_map_check(h);
}

TEST(defrag_at_every_fence)
{
    defrag_enumerate("defrag", "defrag-crash.heap", sizeof(anchor), NOPS, verify);
}
