/*
 * morph.c -- slab morphing through crashes: a slab of 4096-byte blocks
 * left with four live ones morphs into a slab of 1024-byte blocks when a
 * thread asks for that class, blocks of the new class fill the space
 * around the old ones, and old and new blocks are freed (the old ones'
 * frees unpin the blocks they overlapped, which are then handed out).  At
 * every crash point, in every mode, the recovered heap passes pheap_check,
 * every block that was allocated and not freed is live with its contents,
 * and the heap keeps working.  Operations as morph_common.h runs them.
 */
#include <unistd.h>

#include "morph_common.h"

#define OLD 4096u    /* the old class's block size ... */
#define NEW 1024u    /* ... and the new one's */
#define NOLD 32u     /* old blocks: two slabs */
#define NKEEP 4u     /* of which stay live in the first (the second keeps five) */
#define NNEW 24u     /* new blocks asked for after (48 are free once it morphs) */
#define NOPS 4

static const unsigned keep_at[NKEEP] = {1, 6, 10, 15};
static pheap_off old_blk[NOLD], new_blk[2 * NNEW];

static int kept(unsigned i)
{
    for (unsigned k = 0; k < NKEEP; k++)
        if (keep_at[k] == i)
            return 1;
    return i >= 16 && i % 3 == 0; /* the second slab: fuller, it does not morph */
}

static int morph_step(pheap *h, unsigned op)
{
    int rc = 0;
    switch (op) {
    case 0: /* two slabs of old blocks, all but four and five freed */
        for (unsigned i = 0; i < NOLD && !rc; i++)
            rc = morph_alloc_filled(h, OLD, &old_blk[i]);
        for (unsigned i = 0; i < NOLD && !rc; i++)
            if (!kept(i))
                rc = pheap_free(h, old_blk[i]);
        break;
    case 1: /* the slab morphs: new blocks around the four */
        for (unsigned i = 0; i < NNEW && !rc; i++)
            rc = morph_alloc_filled(h, NEW, &new_blk[i]);
        break;
    case 2: /* two old blocks and every other new one freed */
        rc = pheap_free(h, old_blk[keep_at[0]]);
        if (!rc)
            rc = pheap_free(h, old_blk[keep_at[2]]);
        for (unsigned i = 0; i < NNEW && !rc; i += 2)
            rc = pheap_free(h, new_blk[i]);
        break;
    default: /* the last old blocks freed; the space they held handed out */
        rc = pheap_free(h, old_blk[keep_at[1]]);
        if (!rc)
            rc = pheap_free(h, old_blk[keep_at[3]]);
        for (unsigned i = NNEW; i < 2 * NNEW && !rc; i++)
            rc = morph_alloc_filled(h, NEW, &new_blk[i]);
        break;
    }
    return rc;
}

static void workload(ph_crash_ctx *c)
{
    morph_workload(c, NOPS);
}

/* What returned before the crash is there; the operation in flight may
 * have happened or not, in part (its blocks are not checked). */
static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    for (unsigned i = 16; done >= 1 && i < NOLD; i++)
        if (kept(i))
            morph_expect_block(h, old_blk[i], OLD, "second-slab block");
    for (unsigned k = 0; done >= 1 && k < NKEEP; k++) { /* op 2 frees two, op 3 two */
        int maybe_freed = (done >= 2 && (k == 0 || k == 2)) || (done >= 3 && (k == 1 || k == 3));
        if (!maybe_freed)
            morph_expect_block(h, old_blk[keep_at[k]], OLD, "old block");
    }
    for (unsigned i = 0; done >= 2 && i < NNEW; i++) /* op 2 frees the even ones */
        if (!(done >= 2 && i % 2 == 0))
            morph_expect_block(h, new_blk[i], NEW, "new block");
    for (unsigned i = NNEW; done >= 4 && i < 2 * NNEW; i++)
        morph_expect_block(h, new_blk[i], NEW, "new block");
    ph_test_map_check(h);
}

/* In make torture (crash_morph_full) only: crash_morph_frees enumerates
 * the same protocol -- the morph's commit, frees of old blocks of every
 * kind, unpinning, a second morph -- in make test, and the full run's
 * time stays within its budget. */
TEST(morph_at_every_fence)
{
    if (!ph_crash_full()) {
        fprintf(stderr, "  every fence of this workload: make torture (crash_morph_full)\n");
        return;
    }
    const char *base = morph_base("morph-crash.heap");
    REQUIRE(base);
    ph_crash_stats st = ph_crash_enumerate("morph", base, workload, verify, NULL);
    CHECK(st.fences > NOPS);
    CHECK(st.images > st.fences);
    CHECK_EQ(st.violations, 0);
}

TEST(the_slab_morphs)
{
    const char *path = ph_test_path("morph-plain.heap");
    pheap *h = morph_plain_heap("morph-plain.heap");
    REQUIRE(h);
    ph_crash_ctx c = {.heap = h};
    workload(&c);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.slab_morphs, 1);
    CHECK_EQ(st.slabs, 2); /* the new blocks took the first slab's space */
    verify(h, NOPS, NULL);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}

TEST(bad_frees_of_both_kinds)
{
    const char *path = ph_test_path("morph-bad.heap");
    pheap *h = morph_plain_heap("morph-bad.heap");
    REQUIRE(h);
    for (unsigned op = 0; op < 2; op++)
        REQUIRE_OK(morph_run_op(h, op));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    REQUIRE(st.slab_morphs == 1);
    pheap_off old = old_blk[keep_at[1]]; /* four new blocks pinned over it */
    CHECK_EQ(pheap_free(h, old + NEW), PHEAP_EINTERIOR);  /* a pinned block's start */
    CHECK_EQ(pheap_free(h, old + 8), PHEAP_EINTERIOR);    /* inside the old block */
    CHECK_EQ(pheap_usable_size(h, old + NEW), 0);
    CHECK_EQ(pheap_usable_size(h, old), OLD);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_free(h, old));
    /* Freed twice: no E bit says an old block was ever allocated, so the
     * error is the new class's for its space (never allocated there). */
    CHECK_EQ(pheap_free(h, old), PHEAP_ENOTALLOC);
    REQUIRE_OK(pheap_check(h, NULL));
    /* The four blocks it pinned are free again: of the slab's 64 blocks,
     * NNEW taken and 12 pinned by the three old blocks left, the other 28
     * are handed out before another slab is made.  64 allocations (refills
     * take 4 at a time: the cache is empty after them) hand out all 28, 4
     * of them where the old block was. */
    pheap_off chunk = old - (old - st.data_offset) % (64u << 10);
    unsigned inside_old = 0, in_chunk = 0;
    for (unsigned i = 0; i < 64; i++) {
        pheap_off b = pheap_alloc(h, NEW);
        in_chunk += b >= chunk && b < chunk + (64u << 10);
        inside_old += b >= old && b < old + OLD;
    }
    CHECK_EQ(in_chunk, 64 - NNEW - 12);
    CHECK_EQ(inside_old, 4);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.slabs, 3); /* and one more for the 36 beyond */
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}
