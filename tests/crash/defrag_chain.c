/*
 * defrag_chain.c -- pheap_defrag through crashes when the slots lie inside
 * the blocks that move: six 4 KiB blocks (three in each of two slabs) form
 * a chain from a rooted anchor; each node's word 0 names the next node,
 * word 1 names the node itself, word 2 names the anchor (pinned).  The
 * slots are the anchor's head word and words 0 and 1 of every node.  At
 * every crash point the chain from the anchor has six live nodes, in
 * order, each naming itself, with its contents.
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define BLK 4096u
#define NALL 32u
#define NKEEP 6u
#define NOPS 4
#define HDR 24u /* next, self, anchor */

typedef struct anchor {
    pheap_off head;
} anchor;

static pheap_off anchor_off(pheap *h)
{
    return pheap_root_get(h, "anchor");
}

static int kept(unsigned i)
{
    return i == 2 || i == 9 || i == 13 || i == 17 || i == 22 || i == 30;
}

static int step(pheap *h, unsigned op)
{
    static pheap_off all[NALL];
    pheap_off ao = anchor_off(h);
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
        pheap_defrag_result r;
        rc = pheap_defrag(h, slots, n, &r);
        if (!rc && (r.relocated != NKEEP || r.slabs_freed != 2))
            ph_test_fail(__FILE__, __LINE__, "defrag: %zu moved, %zu slabs freed", r.relocated,
                         r.slabs_freed);
        break;
    }
    default:
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
    pheap_off ao = anchor_off(h);
    if (!ao) {
        ph_test_fail(__FILE__, __LINE__, "root \"anchor\" lost");
        return;
    }
    anchor *a = pheap_direct(h, ao);
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
    const char *base = ph_test_path("defrag-chain-crash.heap");
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
    ph_crash_stats st = ph_crash_enumerate("defrag-chain", base, workload, verify, NULL);
    CHECK(st.fences > NOPS);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}
