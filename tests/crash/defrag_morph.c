/*
 * defrag_morph.c -- pheap_defrag through crashes over a morphed slab that
 * still holds old blocks: two slabs of 4 KiB blocks keep four and five;
 * 1 KiB blocks morph the sparser one (48 fill it around the four old
 * ones) and ten more start a slab of their own; every live block's offset
 * sits in a rooted anchor, and the anchor's words are the slots.  The
 * morphed slab and the 1 KiB one are emptied: old 4 KiB blocks and new
 * 1 KiB blocks move in one batch.  At every crash point each anchor word
 * names a live block of its size with its contents.
 */
#include "defrag_common.h"

#define NOLD 32u
#define NNEW 58u
#define NKEEP 67u /* 9 old + 58 new */
#define NOPS 4

typedef struct anchor {
    pheap_off blk[NKEEP];
    uint64_t size[NKEEP];
} anchor;

static int kept_old(unsigned i)
{
    return i == 1 || i == 6 || i == 10 || i == 15 || (i >= 16 && i % 3 == 0);
}

static int put(pheap *h, anchor *a, unsigned k, size_t size)
{
    pheap_off o = pheap_alloc(h, size);
    if (!o)
        return -1;
    void *p = pheap_direct(h, o);
    ph_test_fill(p, size, k);
    pheap_persist(h, p, size);
    a->size[k] = size;
    a->blk[k] = o;
    pheap_persist(h, &a->blk[k], 8);
    pheap_persist(h, &a->size[k], 8);
    return 0;
}

static int defrag_step(pheap *h, unsigned op)
{
    static pheap_off old[NOLD];
    anchor *a = defrag_anchor_block(h);
    int rc = 0;
    switch (op) {
    case 0: /* two slabs of 4 KiB blocks; all but 4 + 5 freed; caches given back */
        for (unsigned i = 0; i < NOLD; i++)
            if (!(old[i] = pheap_alloc(h, 4096)))
                return -1;
        for (unsigned i = 0, k = 0; i < NOLD && !rc; i++) {
            if (kept_old(i)) {
                void *p = pheap_direct(h, old[i]);
                ph_test_fill(p, 4096, k);
                pheap_persist(h, p, 4096);
                a->size[k] = 4096;
                a->blk[k] = old[i];
                pheap_persist(h, a, sizeof(*a));
                k++;
            } else {
                rc = pheap_free(h, old[i]);
            }
        }
        if (!rc)
            rc = pheap_thread_collect(h);
        break;
    case 1: /* the sparser slab morphs */
        for (unsigned k = 9; k < NKEEP && !rc; k++)
            rc = put(h, a, k, 1024);
        break;
    case 2: {
        pheap_off *slots[NKEEP];
        for (unsigned k = 0; k < NKEEP; k++)
            slots[k] = &a->blk[k];
        struct pheap_stats st;
        pheap_stats(h, &st);
        if (st.slab_morphs == 0)
            ph_test_fail(__FILE__, __LINE__, "no slab morphed");
        rc = defrag_expect(h, slots, NKEEP, 60, 2, 1);
        break;
    }
    default: /* the heap keeps working */
        rc = defrag_churn(h, 1024, 4096, 40);
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
    unsigned n = done >= 2 ? NKEEP : done >= 1 ? 9 : 0;
    for (unsigned k = 0; k < n; k++) {
        pheap_off o = a->blk[k];
        if (pheap_usable_size(h, o) != a->size[k])
            ph_test_fail(__FILE__, __LINE__, "block %u at %llu: not live with %llu bytes (%s)",
                         k, (unsigned long long)o, (unsigned long long)a->size[k],
                         pheap_errmsg());
        else if (!ph_test_intact(pheap_direct(h, o), a->size[k], k))
            ph_test_fail(__FILE__, __LINE__, "block %u at %llu: contents changed", k,
                         (unsigned long long)o);
    }
    ph_test_map_check(h);
}

TEST(defrag_of_a_morphed_slab_at_every_fence)
{
    defrag_enumerate("defrag-morph", "defrag-morph-crash.heap", sizeof(anchor), NOPS, verify);
}
