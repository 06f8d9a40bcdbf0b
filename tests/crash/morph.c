/*
 * morph.c -- slab morphing through crashes: a slab of 2048-byte blocks
 * left with four live ones morphs into a slab of 512-byte blocks when a
 * thread asks for that class, blocks of the new class fill the space
 * around the old ones, and old and new blocks are freed (the old ones'
 * frees unpin the blocks they overlapped, which are then handed out).  At
 * every crash point, in every mode, the recovered heap passes pheap_check,
 * every block that was allocated and not freed is live with its contents,
 * and the heap keeps working.  Each operation runs in a thread of its own,
 * whose exit returns its cached blocks, so that the slab may morph; all on
 * CPU 0, so that they share an arena (a simulated heap's threads do).
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define NOLD 64u     /* 2048-byte blocks: two slabs */
#define NKEEP 4u     /* of which stay live in the first (the second keeps six) */
#define NNEW 40u     /* 512-byte blocks asked for after */
#define NOPS 4

static const unsigned keep_at[NKEEP] = {3, 10, 20, 31};
static pheap_off old_blk[NOLD], new_blk[2 * NNEW];

typedef struct step {
    pheap *h;
    unsigned op;
    int rc;
} step;

static uint8_t pattern(pheap_off off, uint32_t k)
{
    return (uint8_t)(off / 16 + k * 7);
}

static int alloc_filled(pheap *h, size_t size, pheap_off *out)
{
    if (!(*out = pheap_alloc(h, size)))
        return -1;
    uint8_t *p = pheap_direct(h, *out);
    for (uint32_t k = 0; k < size; k++)
        p[k] = pattern(*out, k);
    pheap_persist(h, p, size);
    return 0;
}

static int kept(unsigned i)
{
    for (unsigned k = 0; k < NKEEP; k++)
        if (keep_at[k] == i)
            return 1;
    return i >= 32 && i % 5 == 0; /* the second slab: fuller, it does not morph */
}

static void *run_step(void *arg)
{
    step *s = arg;
    pheap *h = s->h;
    int rc = 0;
    (void)ph_test_pin_cpu(0);
    switch (s->op) {
    case 0: /* two slabs of 2048-byte blocks, all but four and seven freed */
        for (unsigned i = 0; i < NOLD && !rc; i++)
            rc = alloc_filled(h, 2048, &old_blk[i]);
        for (unsigned i = 0; i < NOLD && !rc; i++)
            if (!kept(i))
                rc = pheap_free(h, old_blk[i]);
        break;
    case 1: /* the slab morphs: 512-byte blocks around the four */
        for (unsigned i = 0; i < NNEW && !rc; i++)
            rc = alloc_filled(h, 512, &new_blk[i]);
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
            rc = alloc_filled(h, 512, &new_blk[i]);
        break;
    }
    s->rc = rc;
    return NULL;
}

/* Operation `op` in a thread of its own: its result. */
static int run_op(pheap *h, unsigned op)
{
    step s = {h, op, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, run_step, &s) != 0)
        return -1;
    pthread_join(t, NULL);
    return s.rc;
}

static void workload(ph_crash_ctx *c)
{
    for (unsigned op = 0; op < NOPS; op++) {
        if (run_op(c->heap, op))
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", op, pheap_errmsg());
        ph_crash_mark(c);
    }
}

static void expect_block(pheap *h, pheap_off off, size_t size)
{
    if (pheap_usable_size(h, off) != size) {
        ph_test_fail(__FILE__, __LINE__, "block %llu: not live (%s)", (unsigned long long)off,
                     pheap_errmsg());
        return;
    }
    const uint8_t *p = pheap_direct(h, off);
    for (uint32_t k = 0; k < size; k++)
        if (p[k] != pattern(off, k)) {
            ph_test_fail(__FILE__, __LINE__, "block %llu: byte %u changed",
                         (unsigned long long)off, k);
            return;
        }
}

/* What returned before the crash is there; the operation in flight may
 * have happened or not, in part (its blocks are not checked). */
static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    for (unsigned i = 32; done >= 1 && i < NOLD; i++)
        if (kept(i))
            expect_block(h, old_blk[i], 2048);
    for (unsigned k = 0; done >= 1 && k < NKEEP; k++) { /* op 2 frees two, op 3 two */
        int maybe_freed = (done >= 2 && (k == 0 || k == 2)) || (done >= 3 && (k == 1 || k == 3));
        if (!maybe_freed)
            expect_block(h, old_blk[keep_at[k]], 2048);
    }
    for (unsigned i = 0; done >= 2 && i < NNEW; i++) /* op 2 frees the even ones */
        if (!(done >= 2 && i % 2 == 0))
            expect_block(h, new_blk[i], 512);
    for (unsigned i = NNEW; done >= 4 && i < 2 * NNEW; i++)
        expect_block(h, new_blk[i], 512);
    ph_test_map_check(h);
}

TEST(morph_at_every_fence)
{
    const char *base = ph_test_path("morph-crash.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("morph", base, workload, verify, NULL);
    CHECK(st.fences > NOPS);
    CHECK(st.images > st.fences);
    CHECK_EQ(st.violations, 0);
}

TEST(the_slab_morphs)
{
    const char *path = ph_test_path("morph-plain.heap");
    unlink(path);
    pheap_options o = {.size = 1u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h = ph_test_open(path, &o);
    REQUIRE(h);
    (void)ph_test_pin_cpu(0);
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
    unlink(path);
    pheap_options o = {.size = 1u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h = ph_test_open(path, &o);
    REQUIRE(h);
    (void)ph_test_pin_cpu(0); /* this thread's allocations below too */
    for (unsigned op = 0; op < 2; op++)
        REQUIRE_OK(run_op(h, op));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    REQUIRE(st.slab_morphs == 1);
    pheap_off old = old_blk[keep_at[1]]; /* 2048 bytes: four 512-byte blocks pinned */
    CHECK_EQ(pheap_free(h, old + 512), PHEAP_EINTERIOR);  /* a pinned block's start */
    CHECK_EQ(pheap_free(h, old + 8), PHEAP_EINTERIOR);    /* inside the old block */
    CHECK_EQ(pheap_usable_size(h, old + 512), 0);
    CHECK_EQ(pheap_usable_size(h, old), 2048);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_free(h, old));
    /* Freed twice: no E bit says an old block was ever allocated, so the
     * error is the new class's for its space (never allocated there). */
    CHECK_EQ(pheap_free(h, old), PHEAP_ENOTALLOC);
    REQUIRE_OK(pheap_check(h, NULL));
    /* The four blocks it pinned are free again: of the slab's 128 blocks,
     * 40 taken and 12 pinned by the three old blocks left, 76 are handed
     * out before any other slab is made -- the first 72 of them certainly
     * (refills take 8 at a time), 4 of those where the old block was. */
    pheap_off chunk = old - (old - st.data_offset) % (64u << 10);
    unsigned inside_old = 0;
    for (unsigned i = 0; i < 72; i++) {
        pheap_off b = pheap_alloc(h, 512);
        CHECK(b >= chunk && b < chunk + (64u << 10));
        inside_old += b >= old && b < old + 2048;
    }
    CHECK_EQ(inside_old, 4);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.slabs, 2);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}
