/*
 * tx.c -- crash points of transactions: redo writes, undo snapshots,
 * transactional allocation and free (small and large), nesting, aborts at
 * the outer and an inner level, and logs that overflow into segments,
 * crashed at every fence and store in every variant.  After reopening, the
 * heap's whole state (a rooted record of slots and counters, a big block,
 * and the contents of every block a slot names) is exactly the state after
 * the transactions that had returned, or after the one in flight too:
 * never a mix; live blocks are exactly the reachable ones.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { NSLOTS = 8, NVALS = 16, BIG = 8192 };
#define KiB 1024u

typedef struct state {
    pheap_off slot[NSLOTS];
    uint64_t val[NVALS];
    pheap_off big;         /* a BIG-byte block */
} state;

enum { NOPS = 12 };

typedef struct run {
    uint32_t hash[NOPS + 1];   /* state hash before op 0, after op i - 1 */
    uint64_t live[NOPS + 1];   /* live blocks then */
    unsigned failed_hash;      /* a slot named no live block */
} run;

static state *state_of(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "state"));
}

/* FNV-1a over bytes, continued from h. */
static uint32_t fnv(uint32_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* The hash of everything the transactions change; 0 with *bad set when a
 * slot names no live block. */
static uint32_t state_hash(pheap *h, int *bad)
{
    state *s = state_of(h);
    uint32_t x = fnv(2166136261u, s, sizeof(*s));
    x = fnv(x, pheap_direct(h, s->big), BIG);
    for (unsigned k = 0; k < NSLOTS; k++) {
        if (!s->slot[k])
            continue;
        size_t n = pheap_usable_size(h, s->slot[k]);
        if (!n) {
            *bad = 1;
            return 0;
        }
        x = fnv(x, pheap_direct(h, s->slot[k]), n);
    }
    return x;
}

static uint64_t live_blocks(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.live_blocks;
}

#define OK(call)                                                                             \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_)                                                                             \
            ph_test_fail(__FILE__, __LINE__, "%s -> %d (%s)", #call, rc_, pheap_errmsg()); \
    } while (0)

/* A transactional allocation, filled in place (no pheap_tx_add needed). */
static pheap_off fresh(pheap *h, size_t size, uint64_t seed)
{
    pheap_off b = pheap_tx_alloc(h, size);
    if (!b) {
        ph_test_fail(__FILE__, __LINE__, "pheap_tx_alloc(%zu): %s", size, pheap_errmsg());
        return 0;
    }
    ph_test_fill(pheap_direct(h, b), pheap_usable_size(h, b) ? pheap_usable_size(h, b) : size,
                 seed);
    return b;
}

static void set_slot(pheap *h, state *s, unsigned k, pheap_off v)
{
    OK(pheap_tx_write(h, &s->slot[k], &v, sizeof(v)));
}

static void run_op(pheap *h, state *s, unsigned i)
{
    uint64_t v, zero = 0;
    pheap_off b;
    char buf[6144];
    OK(pheap_tx_begin(h));
    switch (i) {
    case 0: /* redo: an allocation and four writes */
        set_slot(h, s, 0, fresh(h, 64, 0x100));
        for (unsigned k = 0; k < 4; k++) {
            v = 100 + k;
            OK(pheap_tx_write(h, &s->val[k], &v, sizeof(v)));
        }
        break;
    case 1: /* undo: snapshots, stores in place, an allocation */
        OK(pheap_tx_add(h, &s->val[4], 4 * sizeof(uint64_t)));
        for (unsigned k = 4; k < 8; k++)
            s->val[k] = 200 + k;
        OK(pheap_tx_add(h, &s->slot[1], sizeof(pheap_off)));
        s->slot[1] = fresh(h, 200, 0x200);
        break;
    case 2: /* mixed: a large allocation, a free, redo and undo */
        set_slot(h, s, 2, fresh(h, 100 * KiB, 0x300));
        OK(pheap_tx_free(h, s->slot[0]));
        OK(pheap_tx_write(h, &s->slot[0], &zero, sizeof(zero)));
        OK(pheap_tx_add(h, &s->val[0], sizeof(uint64_t)));
        s->val[0]++;
        break;
    case 3: /* nested: the inner commit only closes its level */
        OK(pheap_tx_begin(h));
        set_slot(h, s, 3, fresh(h, 1000, 0x400));
        OK(pheap_tx_commit(h));
        OK(pheap_tx_add(h, &s->val[8], 2 * sizeof(uint64_t)));
        s->val[8] = 7;
        s->val[9] = 8;
        break;
    case 4: /* aborted: nothing of it stays */
        OK(pheap_tx_add(h, s->val, sizeof(s->val)));
        for (unsigned k = 0; k < NVALS; k++)
            s->val[k] = 0xdead;
        pheap_persist(h, s->val, sizeof(s->val)); /* the abort must undo them on media too */
        OK(pheap_tx_add(h, &s->slot[4], sizeof(pheap_off)));
        s->slot[4] = fresh(h, 64, 0x500);
        OK(pheap_tx_free(h, s->slot[1]));
        OK(pheap_tx_abort(h));
        return;
    case 5: /* aborted at an inner level: the outer commit reports it */
        OK(pheap_tx_begin(h));
        OK(pheap_tx_add(h, &s->val[1], sizeof(uint64_t)));
        s->val[1] = 999;
        OK(pheap_tx_free(h, s->slot[2]));
        OK(pheap_tx_abort(h));
        if (pheap_tx_commit(h) != PHEAP_EABORTED)
            ph_test_fail(__FILE__, __LINE__, "outer commit after an inner abort");
        return;
    case 6: /* a snapshot bigger than the lane's log: overflow segments */
        OK(pheap_tx_add(h, pheap_direct(h, s->big), BIG));
        ph_test_fill(pheap_direct(h, s->big), BIG, 0x600);
        set_slot(h, s, 5, fresh(h, 64, 0x601));
        break;
    case 7: /* a big redo write; a block allocated and freed in one go */
        b = fresh(h, 64, 0x700);
        OK(pheap_tx_free(h, b));
        ph_test_fill(buf, sizeof(buf), 0x701);
        OK(pheap_tx_write(h, (char *)pheap_direct(h, s->big) + 1024, buf, sizeof(buf)));
        OK(pheap_tx_free(h, s->slot[2]));
        set_slot(h, s, 2, 0);
        break;
    case 8: /* frees under undo, a block of the largest small class */
        OK(pheap_tx_add(h, &s->slot[1], 3 * sizeof(pheap_off)));
        OK(pheap_tx_free(h, s->slot[3]));
        s->slot[3] = 0;
        OK(pheap_tx_free(h, s->slot[1]));
        s->slot[1] = fresh(h, 16384, 0x800);
        break;
    case 9: /* many small records: the lane's log fills up at a record boundary */
        for (unsigned k = 0; k < 60; k++) {
            v = 1000 + k;
            OK(pheap_tx_write(h, &s->val[k % NVALS], &v, sizeof(v)));
        }
        set_slot(h, s, 6, fresh(h, 32, 0x900));
        break;
    case 10: { /* records without payload across the lane log's end */
        pheap_off many[70];
        for (unsigned k = 0; k < 70; k++)
            many[k] = fresh(h, 16, 0xa00 + k);
        for (unsigned k = 0; k < 70; k++)
            if (k != 33)
                OK(pheap_tx_free(h, many[k]));
        set_slot(h, s, 7, many[33]);
        break;
    }
    case 11: /* undo only: two fences, the ranges' new bytes written back first */
        OK(pheap_tx_add(h, &s->val[10], 3 * sizeof(uint64_t)));
        s->val[10] = 41;
        s->val[11] = 42;
        s->val[12] = 43;
        break;
    }
    OK(pheap_tx_commit(h));
}

static void workload(ph_crash_ctx *c)
{
    run *r = c->arg;
    pheap *h = c->heap;
    state *s = state_of(h);
    int bad = 0;
    r->hash[0] = state_hash(h, &bad);
    r->live[0] = live_blocks(h);
    for (unsigned i = 0; i < NOPS; i++) {
        run_op(h, s, i);
        r->hash[i + 1] = state_hash(h, &bad);
        r->live[i + 1] = live_blocks(h);
        if (pheap_tx_depth(h) != 0)
            ph_test_fail(__FILE__, __LINE__, "op %u left depth %d", i, pheap_tx_depth(h));
        ph_crash_mark(c);
    }
    if (bad)
        ph_test_fail(__FILE__, __LINE__, "a slot names no live block in the run itself");
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    run *r = c->arg;
    REQUIRE(state_of(h));
    int bad = 0;
    uint32_t x = state_hash(h, &bad);
    uint64_t live = live_blocks(h);
    if (bad) {
        ph_test_fail(__FILE__, __LINE__, "%u transactions returned: a slot names no live block",
                     done);
        return;
    }
    int before = x == r->hash[done] && live == r->live[done];
    int after = done < NOPS && x == r->hash[done + 1] && live == r->live[done + 1];
    if (!before && !after)
        ph_test_fail(__FILE__, __LINE__, "%u transactions returned: the state is neither after "
                     "them nor after the one in flight (hash %08x: %s; live %llu: want %llu%s)",
                     done, x, x == r->hash[done] ? "before" : done < NOPS && x == r->hash[done + 1]
                     ? "after" : "a mix", (unsigned long long)live,
                     (unsigned long long)r->live[done], done < NOPS ? " or the next" : "");
}

static const char *make_base(void)
{
    const char *path = ph_test_path("crash-tx.heap");
    pheap *h = ph_test_create(path, 8u << 20);
    if (!h)
        return NULL;
    pheap_off s = pheap_alloc(h, sizeof(state));
    state *st = pheap_direct(h, s);
    memset(st, 0, sizeof(*st));
    st->big = pheap_alloc(h, BIG);
    memset(pheap_direct(h, st->big), 0x5a, BIG);
    pheap_persist(h, pheap_direct(h, st->big), BIG);
    pheap_persist(h, st, sizeof(*st));
    pheap_root_set(h, "state", s);
    pheap_close(h);
    return path;
}

TEST(transactions_at_every_fence)
{
    static run r;
    memset(&r, 0, sizeof(r));
    const char *base = make_base();
    REQUIRE(base);
    ph_crash_stats st = ph_crash_enumerate("tx", base, workload, verify, &r);
    CHECK(st.fences > 3 * NOPS);
    CHECK(st.images > 5 * st.fences);
    for (unsigned i = 0; i < NOPS; i++) /* aborted ones change nothing, the others do */
        CHECK((r.hash[i + 1] == r.hash[i]) == (i == 4 || i == 5));
}

/* ---- a COMMIT record on media before the blocks it commits ---------------
 * The fence that commits a transaction also makes its new blocks durable;
 * a cache eviction before it can put the COMMIT record on media while
 * some of a block's lines are not.  Crashed just before that fence, with
 * half of the lines evicted, over many seeds: the block is published only
 * with all of its contents. */

static pheap_off commit_one(const char *base, const pheap_options *o, uint64_t *fence_before)
{
    pheap *h = ph_test_open(base, o);
    if (!h)
        return 0;
    state *s = state_of(h);
    pheap_off b = 0;
    if (pheap_tx_begin(h) == 0 && (b = pheap_tx_alloc(h, 1000)) != 0) {
        ph_test_fill(pheap_direct(h, b), 1000, 0x4242);
        OK(pheap_tx_write(h, &s->slot[0], &b, sizeof(b)));
        *fence_before = pheap_sim_fence_count(h);
        OK(pheap_tx_commit(h));
    }
    pheap_sim_crash(h, NULL, 0, 0.0);
    return b;
}

TEST(commit_record_before_the_contents_it_commits)
{
    const char *base = make_base();
    REQUIRE(base);
    char image[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("tx-contents.image"));
    pheap_options dry = {.flags = PHEAP_SIMULATE};
    uint64_t before = 0;
    pheap_off b = commit_one(base, &dry, &before);
    REQUIRE(b && before);
    unsigned published = 0, rolled_back = 0;
    for (uint64_t seed = 1; seed <= 128 && !ph_test_failed; seed++) {
        /* Seeds 1..64 crash just before the commit's first fence (either
         * outcome, never a partial block), 65..128 just before its second
         * (committed: published whole). */
        uint64_t at = before + 1 + (seed > 64);
        pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = at,
                           .sim_crash_image = image, .sim_evict_probability = 0.5,
                           .sim_seed = seed};
        unlink(image);
        commit_one(base, &o, &before);
        pheap *h;
        pheap_options ro = {.flags = PHEAP_SIMULATE};
        REQUIRE_OK(pheap_open(image, &ro, &h));
        pheap_off v = state_of(h)->slot[0];
        if (v == b && pheap_usable_size(h, b) && ph_test_intact(pheap_direct(h, b), 1000, 0x4242))
            published++;
        else if (v == 0 && pheap_usable_size(h, b) == 0 && seed <= 64)
            rolled_back++;
        else
            ph_test_fail(__FILE__, __LINE__, "seed %llu, fence %llu: slot %llu, block %s%s",
                         (unsigned long long)seed, (unsigned long long)at, (unsigned long long)v,
                         pheap_usable_size(h, b) ? "allocated" : "free",
                         v == b ? ", not all its contents" : "");
        CHECK(pheap_check(h, NULL) == 0);
        pheap_sim_crash(h, NULL, 0, 0.0);
    }
    CHECK(published >= 64);
    CHECK(rolled_back > 0);
}

/* ---- a recovery that rolls back, crashed at each of its fences --------------
 * A process dies inside an undo transaction whose snapshots and in-place
 * stores are durable.  Its recovery restores the old bytes, then retires
 * the log; crashed just before each of its fences, with half of the
 * 8-byte words that differ on media, over many seeds, the next recovery
 * must still end with the old bytes: the log may be retired on media only
 * once the old bytes are. */
TEST(a_rollback_crashed_at_each_fence_of_its_recovery)
{
    const char *base = make_base();
    REQUIRE(base);
    char image[512], image2[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("tx-rollback.image"));
    snprintf(image2, sizeof(image2), "%s", ph_test_path("tx-rollback2.image"));
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    pheap *h;
    REQUIRE_OK(pheap_open(base, &sim, &h));
    state *s = state_of(h);
    uint64_t *big = pheap_direct(h, s->big);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, big, BIG));
    memset(big, 0x77, BIG);
    pheap_persist(h, big, BIG); /* the new bytes on media: recovery must undo them */
    unlink(image);
    REQUIRE_OK(pheap_sim_crash(h, image, 0, 0.0));
    REQUIRE_OK(pheap_open(image, &sim, &h)); /* how many fences its recovery takes */
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    REQUIRE(fences >= 2);
    unsigned images = 0;
    for (uint64_t f = 1; f <= fences && !ph_test_failed; f++) {
        for (uint64_t seed = 1; seed <= 24 && !ph_test_failed; seed++) {
            pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = f,
                               .sim_crash_image = image2, .sim_evict_probability = 0.5,
                               .sim_seed = seed * 131 + f, .sim_mode = PHEAP_SIM_WORDS};
            unlink(image2);
            REQUIRE_OK(pheap_open(image, &o, &h));
            pheap_sim_crash(h, NULL, 0, 0.0);
            REQUIRE_OK(pheap_open(image2, &sim, &h));
            const unsigned char *b = pheap_direct(h, state_of(h)->big);
            for (unsigned k = 0; k < BIG; k++)
                if (b[k] != 0x5a) {
                    ph_test_fail(__FILE__, __LINE__, "recovery crashed before its fence %llu "
                                 "(seed %llu): byte %u is %#x, not the old 0x5a",
                                 (unsigned long long)f, (unsigned long long)seed, k, b[k]);
                    break;
                }
            CHECK(pheap_check(h, NULL) == 0);
            pheap_sim_crash(h, NULL, 0, 0.0);
            images++;
        }
    }
    CHECK(images >= 2 * 24);
}

/* ---- a recovery that rolls forward a log with an overflow segment -------------
 * Crashed after its commit's first fence, a transaction whose REDO bytes
 * fill an overflow segment is rolled forward by recovery, which then
 * retires the log and frees the segment.  Crashed before each fence of
 * that recovery: the segment may be freed on media only once the log is
 * retired there (a log still to roll forward whose records end early is
 * damage the next open refuses). */
TEST(a_roll_forward_with_a_segment_crashed_at_each_fence_of_its_recovery)
{
    const char *base = make_base();
    REQUIRE(base);
    char image[512], image2[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("tx-forward.image"));
    snprintf(image2, sizeof(image2), "%s", ph_test_path("tx-forward2.image"));
    static unsigned char buf[6000];
    memset(buf, 0x66, sizeof(buf));
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    pheap *h;
    uint64_t at = 0;
    for (int pass = 0; pass < 2; pass++) { /* a dry run counts the fences */
        pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = at,
                           .sim_crash_image = at ? image : NULL};
        unlink(image);
        REQUIRE_OK(pheap_open(base, &o, &h));
        state *s = state_of(h);
        REQUIRE_OK(pheap_tx_begin(h));
        REQUIRE_OK(pheap_tx_write(h, pheap_direct(h, s->big), buf, sizeof(buf)));
        uint64_t before = pheap_sim_fence_count(h);
        REQUIRE_OK(pheap_tx_commit(h));
        at = before + 2; /* just before the commit's second fence: committed, not applied */
        pheap_sim_crash(h, NULL, 0, 0.0);
    }
    REQUIRE_OK(pheap_open(image, &sim, &h));
    uint64_t fences = pheap_sim_fence_count(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.tx_rolled_forward, 1);
    pheap_sim_crash(h, NULL, 0, 0.0);
    unsigned images = 0;
    for (uint64_t f = 1; f <= fences && !ph_test_failed; f++) {
        for (uint64_t seed = 1; seed <= 24 && !ph_test_failed; seed++) {
            pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = f,
                               .sim_crash_image = image2, .sim_evict_probability = 0.5,
                               .sim_seed = seed * 977 + f,
                               .sim_mode = PHEAP_SIM_WORDS | (seed % 2 ? PHEAP_SIM_NT_LAG : 0)};
            unlink(image2);
            REQUIRE_OK(pheap_open(image, &o, &h));
            pheap_sim_crash(h, NULL, 0, 0.0);
            if (pheap_open(image2, &sim, &h) != 0) {
                ph_test_fail(__FILE__, __LINE__, "recovery crashed before its fence %llu (seed "
                             "%llu): the next open fails: %s", (unsigned long long)f,
                             (unsigned long long)seed, pheap_errmsg());
                break;
            }
            CHECK(memcmp(pheap_direct(h, state_of(h)->big), buf, sizeof(buf)) == 0);
            CHECK(pheap_check(h, NULL) == 0);
            pheap_sim_crash(h, NULL, 0, 0.0);
            images++;
        }
    }
    CHECK(images >= 3 * 24);
}
