/*
 * morph_frees.c -- old blocks of a morphed slab freed by every
 * kind of free through crashes: pheap_free_from (a lane entry), a
 * transaction's pheap_tx_free (a transaction log, with a free of a new
 * block in the same commit), pheap_free_named (an UNBIND entry), then the
 * last old block by pheap_free, the slab thinned and morphed a second
 * time.  At every crash point: pheap_check passes, every block that must
 * be live is, with its contents; a completed free of an old block is
 * freed.  Operations as morph_common.h runs them.
 */
#include <unistd.h>

#include "morph_common.h"

#define OLD 4096u  /* the old class's block size, the new one's, and a third */
#define NEW 1024u
#define LATE 2048u
#define NOLD 32u   /* old blocks: two slabs */
#define NNEW 60u   /* new blocks: the morphed slab's 48 and a second slab's 12 */
#define NOPS 5

static const unsigned keep_at[4] = {1, 6, 10, 15}; /* 6 is named "old6" */
static pheap_off old_blk[NOLD], new_blk[NNEW], slots, late[4];

static int kept(unsigned i)
{
    for (unsigned k = 0; k < 4; k++)
        if (keep_at[k] == i)
            return 1;
    return i >= 16 && i % 3 == 0; /* the second slab: fuller, it does not morph */
}

static int morph_step(pheap *h, unsigned op)
{
    int rc = 0;
    switch (op) {
    case 0:
        if (!(slots = pheap_alloc(h, 8192)) || pheap_root_set(h, "slots", slots)) {
            rc = -1;
            break;
        }
        for (unsigned i = 0; i < NOLD && !rc; i++) {
            if (i != 6) {
                rc = morph_alloc_filled(h, OLD, &old_blk[i]);
            } else if (!(old_blk[i] = pheap_alloc_named(h, "old6", OLD))) {
                rc = -1;
            } else {
                void *p = pheap_direct(h, old_blk[i]);
                ph_test_fill(p, OLD, old_blk[i]);
                pheap_persist(h, p, OLD);
            }
        }
        for (unsigned i = 0; i < NOLD && !rc; i++)
            if (!kept(i))
                rc = pheap_free(h, old_blk[i]);
        if (!rc) {
            pheap_off *w = pheap_direct(h, slots);
            w[0] = old_blk[10];
            pheap_persist(h, w, 8);
        }
        break;
    case 1: /* the first slab morphs to the new class; a second slab of it */
        for (unsigned i = 0; i < NNEW && !rc; i++) {
            rc = morph_alloc_filled(h, NEW, &new_blk[i]);
        }
        break;
    case 2: /* three old blocks freed, three ways */
        rc = pheap_free_from(h, (pheap_off *)pheap_direct(h, slots));
        if (!rc && !(rc = pheap_tx_begin(h))) {
            rc = pheap_tx_free(h, old_blk[1]);
            if (!rc)
                rc = pheap_tx_free(h, new_blk[1]);
            int rc2 = pheap_tx_commit(h);
            rc = rc ? rc : rc2;
        }
        if (!rc)
            rc = pheap_free_named(h, "old6");
        break;
    case 3: /* the last old block, and all but two new blocks of each slab */
        rc = pheap_free(h, old_blk[15]);
        for (unsigned i = 2; i < NNEW && !rc; i++)
            if (i != NNEW - 1)
                rc = pheap_free(h, new_blk[i]);
        break;
    default: /* a third class: a thinned slab of the new one may morph a second time */
        for (unsigned i = 0; i < 4 && !rc; i++) {
            rc = morph_alloc_filled(h, LATE, &late[i]);
        }
        break;
    }
    return rc;
}

static void workload(ph_crash_ctx *c)
{
    morph_workload(c, NOPS);
}

static void expect_freed(pheap *h, pheap_off off, const char *what)
{
    if (pheap_usable_size(h, off) == OLD)
        ph_test_fail(__FILE__, __LINE__, "%s %llu: still live after its free returned", what,
                     (unsigned long long)off);
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    for (unsigned i = 16; done >= 1 && i < NOLD; i++)
        if (kept(i))
            morph_expect_block(h, old_blk[i], OLD, "second-slab block");
    if (done >= 1 && done < 2) /* op 2 in flight at most: nothing of it checked */
        for (unsigned k = 0; k < 4; k++)
            morph_expect_block(h, old_blk[keep_at[k]], OLD, "old block");
    if (done >= 2 && done < 3) /* op 3 in flight: frees only */
        morph_expect_block(h, old_blk[15], OLD, "old block 15");
    if (done >= 3) { /* op 2 returned: its three frees are done */
        expect_freed(h, old_blk[10], "old block 10 (free_from)");
        expect_freed(h, old_blk[1], "old block 1 (tx_free)");
        expect_freed(h, old_blk[6], "old block 6 (free_named)");
    }
    for (unsigned i = 0; done >= 2 && i < NNEW; i++) {
        int freed = i == 1 || (done >= 4 && i >= 2 && i != NNEW - 1);
        int maybe = done == 3 && i >= 2 && i != NNEW - 1;
        if (!freed && !maybe)
            morph_expect_block(h, new_blk[i], NEW, "new block");
    }
    for (unsigned i = 0; done >= 5 && i < 4; i++)
        morph_expect_block(h, late[i], LATE, "late block");
    ph_test_map_check(h);
}

TEST(old_blocks_freed_every_way_at_every_fence)
{
    const char *base = morph_base("morph-frees.heap");
    REQUIRE(base);
    ph_crash_stats st = ph_crash_enumerate("morph_frees", base, workload, verify, NULL);
    CHECK_EQ(st.violations, 0);
}

TEST(the_workload_morphs_twice)
{
    const char *path = ph_test_path("morph-frees-plain.heap");
    pheap *h = morph_plain_heap("morph-frees-plain.heap");
    REQUIRE(h);
    ph_crash_ctx c = {.heap = h};
    workload(&c);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    fprintf(stderr, "  %llu morphs, %llu live\n", (unsigned long long)st.slab_morphs,
            (unsigned long long)st.live_blocks);
    CHECK_EQ(st.slab_morphs, 2); /* the first slab, then a thinned one of the new class */
    verify(h, NOPS, NULL);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}
