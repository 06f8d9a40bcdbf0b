/*
 * defrag_chain.c -- pheap_defrag through crashes when the slots lie inside
 * the blocks that move: six 4 KiB blocks (three in each of two slabs) form
 * a chain from a rooted anchor; each node's word 0 names the next node,
 * word 1 names the node itself, word 2 names the anchor (pinned).  The
 * slots are the anchor's head word and words 0 and 1 of every node.  At
 * every crash point the chain from the anchor has six live nodes, in
 * order, each naming itself, with its contents.
 */
#include "defrag_common.h"

#define BLK 4096u
#define NALL 32u
#define NKEEP 6u
#define NOPS 4
#define HDR 24u /* next, self, anchor */

typedef struct anchor {
    pheap_off head;
} anchor;

static int kept(unsigned i)
{
    return i == 2 || i == 9 || i == 13 || i == 17 || i == 22 || i == 30;
}

static int defrag_step(pheap *h, unsigned op)
{
    static pheap_off all[NALL];
    pheap_off ao = defrag_anchor(h);
    anchor *a = pheap_direct(h, ao);
    int rc = 0;
    switch (op) {
    case 0: {
        pheap_off keep[NKEEP];
        for (unsigned i = 0, k = 0; i < NALL; i++) {
            if (!(all[i] = pheap_alloc(h, BLK)))
                return -1;
            if (kept(i))
                keep[k++] = all[i];
        }
        for (unsigned k = 0; k < NKEEP; k++) {
            pheap_off *p = pheap_direct(h, keep[k]);
            p[0] = k + 1 < NKEEP ? keep[k + 1] : 0;
            p[1] = keep[k];
            p[2] = ao;
            ph_test_fill((char *)p + HDR, BLK - HDR, k);
            pheap_persist(h, p, BLK);
        }
        a->head = keep[0];
        pheap_persist(h, &a->head, 8);
        break;
    }
    case 1:
        for (unsigned i = 0; i < NALL && !rc; i++)
            if (!kept(i))
                rc = pheap_free(h, all[i]);
        break;
    case 2: {
        pheap_off *slots[1 + 3 * NKEEP];
        unsigned n = 0;
        slots[n++] = &a->head;
        for (pheap_off o = a->head; o; o = ((pheap_off *)pheap_direct(h, o))[0]) {
            pheap_off *p = pheap_direct(h, o);
            slots[n++] = &p[0];
            slots[n++] = &p[1];
            slots[n++] = &p[2]; /* names the pinned anchor: stays */
        }
        /* the sparser slab's three move into the other's free blocks */
        rc = defrag_expect(h, slots, n, NKEEP / 2, 1, 0);
        break;
    }
    default:
        rc = defrag_churn(h, BLK, BLK, NALL);
        break;
    }
    return rc;
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    anchor *a = defrag_anchor_block(h);
    pheap_off ao = defrag_anchor(h);
    if (!a)
        return;
    if (done < 1)
        return;
    unsigned k = 0;
    for (pheap_off o = a->head; o && k <= NKEEP; k++) {
        if (pheap_usable_size(h, o) != BLK) {
            ph_test_fail(__FILE__, __LINE__, "node %u at %llu: not live (%s)", k,
                         (unsigned long long)o, pheap_errmsg());
            return;
        }
        pheap_off *p = pheap_direct(h, o);
        if (p[1] != o)
            ph_test_fail(__FILE__, __LINE__, "node %u at %llu names itself %llu", k,
                         (unsigned long long)o, (unsigned long long)p[1]);
        if (p[2] != ao)
            ph_test_fail(__FILE__, __LINE__, "node %u: anchor word %llu", k,
                         (unsigned long long)p[2]);
        if (!ph_test_intact((char *)p + HDR, BLK - HDR, k))
            ph_test_fail(__FILE__, __LINE__, "node %u at %llu: contents changed", k,
                         (unsigned long long)o);
        o = p[0];
    }
    if (k != NKEEP)
        ph_test_fail(__FILE__, __LINE__, "chain of %u nodes", k);
    ph_test_map_check(h);
}

TEST(defrag_chain_at_every_fence)
{
    defrag_enumerate("defrag-chain", "defrag-chain-crash.heap", sizeof(anchor), NOPS, verify);
}
