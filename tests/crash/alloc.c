/*
 * alloc.c -- crash points of the allocator: alloc_to / free_from of small
 * and large blocks, slab creation and release, coalescing of freed
 * extents, heap growth, plain alloc / free, and extent-log compaction, each
 * crashed at every fence with and without eviction.  After reopening:
 * pheap_check passes; every operation that returned is durable; the one in
 * flight shows its old or new state; every slot names a live block of at
 * least the size asked for; no two blocks overlap; and no block leaks
 * (live blocks = reachable blocks, plus at most the block of an
 * interrupted plain pheap_alloc, the window pheap_alloc_to closes).
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "heap/heap.h"

enum { NSLOTS = 64, MAXOPS = 512 };
enum { OP_ALLOC_TO, OP_FREE_FROM, OP_ALLOC, OP_FREE };

typedef struct op {
    int kind;
    unsigned slot;
    size_t size;
} op;

typedef struct workload {
    const op *ops;
    unsigned nops;
    size_t sizes[NSLOTS];          /* size asked for the block now in a slot */
    pheap_off after[MAXOPS];        /* slot value after op i (recorded by the run) */
    uint64_t got_fence[MAXOPS];     /* plain alloc: fences and durable stores issued when */
    uint64_t got_store[MAXOPS];     /*   pheap_alloc returned, before the offset was published */
} workload;

static pheap_off *slots_of(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "slots"));
}

/* The workload of every crash run: the ops in order, recording the slot
 * values they produce (the same in every run: the heap starts the same and
 * the program is deterministic). */
static void run_ops(ph_crash_ctx *c)
{
    workload *w = c->arg;
    pheap *h = c->heap;
    pheap_off *slots = slots_of(h);
    for (unsigned i = 0; i < w->nops; i++) {
        const op *o = &w->ops[i];
        pheap_off *s = &slots[o->slot];
        int rc = 0;
        switch (o->kind) {
        case OP_ALLOC_TO:
            rc = pheap_alloc_to(h, o->size, s);
            break;
        case OP_FREE_FROM:
            rc = pheap_free_from(h, s);
            break;
        case OP_ALLOC: { /* the plain way: allocate, then publish */
            pheap_off off = pheap_alloc(h, o->size);
            rc = off ? 0 : pheap_errno();
            w->got_fence[i] = pheap_sim_fence_count(h);
            w->got_store[i] = pheap_sim_store_count(h);
            *s = off;
            pheap_persist(h, s, sizeof(*s));
            break;
        }
        case OP_FREE: { /* unpublish, then free */
            pheap_off off = *s;
            *s = 0;
            pheap_persist(h, s, sizeof(*s));
            rc = pheap_free(h, off);
            break;
        }
        }
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "op %u (kind %d, slot %u): %s", i, o->kind, o->slot,
                         pheap_errmsg());
        w->after[i] = *s;
        ph_crash_mark(c);
    }
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    workload *w = c->arg;
    pheap_off *slots = slots_of(h);
    REQUIRE(slots);
    /* Expected slot values after `done` operations; the one in flight may
     * show either side. */
    pheap_off expect[NSLOTS] = {0}, alt[NSLOTS];
    size_t asked[NSLOTS] = {0};
    for (unsigned i = 0; i < done; i++) {
        expect[w->ops[i].slot] = w->after[i];
        asked[w->ops[i].slot] = w->ops[i].size;
    }
    memcpy(alt, expect, sizeof(alt));
    int in_flight = done < w->nops;
    if (in_flight)
        alt[w->ops[done].slot] = w->after[done];
    /* A plain alloc in flight whose pheap_alloc had returned: its block is
     * allocated, published or not (DESIGN 2.1). */
    if (in_flight && w->ops[done].kind == OP_ALLOC &&
        ((c->crash_fence && c->crash_fence > w->got_fence[done]) ||
         (c->crash_store && c->crash_store > w->got_store[done])) &&
        pheap_usable_size(h, w->after[done]) < w->ops[done].size)
        ph_test_fail(__FILE__, __LINE__, "op %u: pheap_alloc had returned %llu, not allocated now",
                     done, (unsigned long long)w->after[done]);
    uint64_t blocks[NSLOTS][2];
    unsigned n = 0;
    for (unsigned k = 0; k < NSLOTS; k++) {
        pheap_off v = slots[k];
        if (v != expect[k] && v != alt[k]) {
            ph_test_fail(__FILE__, __LINE__, "slot %u = %llu, expected %llu or %llu", k,
                         (unsigned long long)v, (unsigned long long)expect[k],
                         (unsigned long long)alt[k]);
            continue;
        }
        if (!v)
            continue;
        size_t want = v == expect[k] ? asked[k] : w->ops[done].size;
        size_t usable = pheap_usable_size(h, v);
        if (usable < want)
            ph_test_fail(__FILE__, __LINE__, "slot %u: block %llu has %zu usable bytes, %zu asked (%s)",
                         k, (unsigned long long)v, usable, want, pheap_errmsg());
        blocks[n][0] = v;
        blocks[n][1] = v + usable;
        n++;
    }
    ph_test_disjoint(blocks, n);
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t reachable = n + 1; /* + the slot array */
    int plain = in_flight && (w->ops[done].kind == OP_ALLOC || w->ops[done].kind == OP_FREE);
    if (st.live_blocks != reachable && !(plain && st.live_blocks == reachable + 1))
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks, %llu reachable (op in flight: %s)",
                     (unsigned long long)st.live_blocks, (unsigned long long)reachable,
                     in_flight ? (plain ? "plain" : "logged") : "none");
}

/* A fresh heap with a rooted, zeroed slot array. */
static const char *make_base(const char *name, uint64_t size, uint64_t max_size)
{
    const char *path = ph_test_path(name);
    pheap_options o = {.size = size, .max_size = max_size, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    if (pheap_open(path, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
        return NULL;
    }
    pheap_off s = pheap_alloc(h, NSLOTS * sizeof(pheap_off));
    memset(pheap_direct(h, s), 0, NSLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, s), NSLOTS * sizeof(pheap_off));
    pheap_root_set(h, "slots", s);
    pheap_close(h);
    return path;
}

static void enumerate(const char *name, const char *base, const op *ops, unsigned nops)
{
    static workload w;
    memset(&w, 0, sizeof(w));
    w.ops = ops;
    w.nops = nops;
    ph_crash_stats st = ph_crash_enumerate(name, base, run_ops, verify, &w);
    CHECK(st.fences > nops);
    CHECK(st.images > 5 * st.fences); /* every fence in every variant, and more */
}

#define KiB 1024u

TEST(logged_small_and_slab_creation)
{
    static const op ops[] = {
        {OP_ALLOC_TO, 0, 64},  {OP_ALLOC_TO, 1, 64},  {OP_ALLOC_TO, 2, 100}, {OP_FREE_FROM, 1, 0},
        {OP_ALLOC_TO, 1, 48},  {OP_ALLOC_TO, 3, 16384}, {OP_FREE_FROM, 0, 0}, {OP_FREE_FROM, 2, 0},
        {OP_ALLOC_TO, 4, 8},   {OP_FREE_FROM, 3, 0},
    };
    const char *base = make_base("crash-small.heap", 4u << 20, 0);
    REQUIRE(base);
    enumerate("alloc/logged_small_and_slab_creation", base, ops, sizeof(ops) / sizeof(ops[0]));
}

TEST(logged_large_coalescing_and_growth)
{
    static const op ops[] = {
        {OP_ALLOC_TO, 0, 100 * KiB}, {OP_ALLOC_TO, 1, 100 * KiB}, {OP_ALLOC_TO, 2, 300 * KiB},
        {OP_FREE_FROM, 1, 0},        {OP_FREE_FROM, 0, 0},          /* coalesces with slot 1's */
        {OP_ALLOC_TO, 3, 180 * KiB}, {OP_FREE_FROM, 2, 0},          /* large: holes punched */
        {OP_ALLOC_TO, 4, 3u << 20},                                 /* beyond the size: growth */
        {OP_ALLOC_TO, 5, 64},        {OP_FREE_FROM, 4, 0},
    };
    const char *base = make_base("crash-large.heap", 2u << 20, 16u << 20);
    REQUIRE(base);
    enumerate("alloc/logged_large_coalescing_and_growth", base, ops, sizeof(ops) / sizeof(ops[0]));
}

TEST(plain_alloc_and_free)
{
    static const op ops[] = {
        {OP_ALLOC, 0, 64},        {OP_ALLOC, 1, 64},   {OP_FREE, 0, 0},    {OP_ALLOC, 2, 64},
        {OP_ALLOC, 3, 50 * KiB},  {OP_FREE, 3, 0},     {OP_ALLOC, 4, 2000}, {OP_FREE, 1, 0},
        {OP_FREE, 2, 0},          {OP_FREE, 4, 0},     /* slab empty: may be released */
    };
    const char *base = make_base("crash-plain.heap", 4u << 20, 0);
    REQUIRE(base);
    enumerate("alloc/plain_alloc_and_free", base, ops, sizeof(ops) / sizeof(ops[0]));
}

TEST(extent_log_compaction)
{
    /* Fill the extent log's active half to a few entries short of full, so
     * that the workload's large operations compact it. */
    const char *base = make_base("crash-compact.heap", 4u << 20, 0);
    REQUIRE(base);
    pheap *h;
    REQUIRE_OK(pheap_open(base, NULL, &h));
    const ph_extents *x = h->engine->ext;
    REQUIRE_EQ(x->high, x->half_entries); /* a small heap: its mark covers the half */
    while (x->tail + 5 < x->high) {
        pheap_off a = pheap_alloc(h, 20 * KiB);
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
    }
    uint64_t epoch = x->epoch;
    pheap_close(h);
    static const op ops[] = {
        {OP_ALLOC_TO, 0, 20 * KiB}, {OP_ALLOC_TO, 1, 40 * KiB}, {OP_FREE_FROM, 0, 0},
        {OP_ALLOC_TO, 2, 20 * KiB}, {OP_FREE_FROM, 1, 0},       {OP_ALLOC_TO, 3, 60 * KiB},
        {OP_FREE_FROM, 2, 0},       {OP_ALLOC_TO, 4, 64},
    };
    enumerate("alloc/extent_log_compaction", base, ops, sizeof(ops) / sizeof(ops[0]));
    /* The workload does compact: a run of it on a simulated copy. */
    pheap_options so = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(base, &so, &h));
    pheap_off *slots = slots_of(h);
    for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        REQUIRE_OK(ops[i].kind == OP_ALLOC_TO ? pheap_alloc_to(h, ops[i].size, &slots[ops[i].slot])
                                              : pheap_free_from(h, &slots[ops[i].slot]));
    CHECK(h->engine->ext->epoch > epoch);
    pheap_sim_crash(h, NULL, 0, 0.0);
}

TEST(slab_batches_and_release)
{
    /* 16 KiB blocks, four to a slab: the class quickly counts as hot, so
     * slabs are made two at a time; freeing everything releases them. */
    enum { N = 16 };
    static op ops[2 * N];
    for (unsigned i = 0; i < N; i++) {
        ops[i] = (op){OP_ALLOC_TO, i, 16384};
        ops[N + i] = (op){OP_FREE_FROM, i, 0};
    }
    const char *base = make_base("crash-slabs.heap", 4u << 20, 0);
    REQUIRE(base);
    enumerate("alloc/slab_batches_and_release", base, ops, 2 * N);
}

TEST(new_lane_holder_over_retired_entries)
{
    /* A first session fills lines of lane 0 with retired entries: slot 10
     * gets a block, slot 11 too, then both are freed.  The workload is a
     * new holder of that lane (a new open), whose first entries land on
     * the same lines: no mix of a new entry's words with a retired one's
     * may pass for a committed operation (which would redo the old
     * alloc_to and bring a freed block back). */
    const char *base = make_base("crash-lane-reuse.heap", 4u << 20, 0);
    REQUIRE(base);
    pheap *h;
    REQUIRE_OK(pheap_open(base, NULL, &h));
    pheap_off *slots = slots_of(h);
    REQUIRE_OK(pheap_alloc_to(h, 64, &slots[10]));
    REQUIRE_OK(pheap_alloc_to(h, 100 * KiB, &slots[11]));
    REQUIRE_OK(pheap_free_from(h, &slots[10]));
    REQUIRE_OK(pheap_free_from(h, &slots[11]));
    pheap_close(h);
    /* A large block first: its entry follows the lane's zeroing with no
     * other fence between (a small one would make a slab first). */
    static const op ops[] = {
        {OP_ALLOC_TO, 1, 100 * KiB}, {OP_ALLOC_TO, 0, 64},        {OP_FREE_FROM, 0, 0},
        {OP_FREE_FROM, 1, 0},        {OP_ALLOC_TO, 2, 64},
    };
    enumerate("alloc/new_lane_holder", base, ops, sizeof(ops) / sizeof(ops[0]));
}

/* ---- extent logs with high-water marks ------------------------------------
 * A heap with 256 KiB of data growable to 8 MiB: its extent log uses the
 * first 64 entries of each half's 768 (its cap), below the marks.  The
 * bases carry stale entries of an older epoch past the active half's mark
 * and all over the other half -- whole ones, and single words of them next
 * to zeros -- as a half keeps them when a compaction left its mark below an
 * earlier use: a rise of the mark and a compaction must cover them, and
 * replay must never take them, whatever a crash leaves. */

static void plant_stale(ph_extents *x, unsigned half, uint64_t from, uint64_t to)
{
    uint64_t lines = x->half_entries / 4;
    for (uint64_t j = from; j < to; j++) {
        ph_extlog_entry *e = &x->half[half][(j % lines) * 4 + j / lines];
        /* An extent of an older epoch (epoch 0 is never used), whole or torn. */
        uint64_t w0 = (j * 16) | (uint64_t)PH_EXT_LARGE << 36, w1 = 16;
        e->w0 = j % 3 == 2 ? 0 : w0;
        e->w1 = j % 3 == 1 ? 0 : w1 | (uint64_t)(j * 2654435761u & 0xffff) << 48;
    }
}

/* Makes `base` a bounded base: its append position `short_of` entries
 * below the mark, or one more (appends come in pairs). */
static void prepare_bounded(const char *base, uint64_t short_of)
{
    pheap *h;
    REQUIRE_OK(pheap_open(base, NULL, &h));
    ph_extents *x = h->engine->ext;
    REQUIRE(x->bounded);
    REQUIRE_EQ(x->high, 64);
    REQUIRE(x->half_entries / 4 > 64);
    while (x->tail + short_of + 1 < x->high) {
        pheap_off a = pheap_alloc(h, 20 * KiB);
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
    }
    plant_stale(x, x->active, x->high, 4 * x->high);
    plant_stale(x, !x->active, 0, 4 * x->high);
    pheap_persist(h, x->half[0], 2 * x->half_entries * sizeof(ph_extlog_entry));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(bounded_log_mark_rises_after_growth)
{
    /* The first op grows the data region past 256 KiB: the cap rises, and
     * its entry finds the mark at the old cap -- the mark rises over the
     * stale slots (R1) before the entry is written. */
    const char *base = make_base("crash-marks-rise.heap", 256 * KiB, 8u << 20);
    REQUIRE(base);
    int failed = ph_test_failed;
    prepare_bounded(base, 1);
    REQUIRE(ph_test_failed == failed);
    static const op ops[] = {
        {OP_ALLOC_TO, 0, 600 * KiB}, {OP_ALLOC_TO, 1, 20 * KiB}, {OP_FREE_FROM, 0, 0},
        {OP_ALLOC_TO, 2, 40 * KiB},  {OP_FREE_FROM, 1, 0},       {OP_ALLOC_TO, 3, 64},
    };
    enumerate("alloc/bounded_log_mark_rises_after_growth", base, ops, sizeof(ops) / sizeof(ops[0]));
    pheap *h;
    pheap_options so = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(base, &so, &h));
    uint64_t high = h->engine->ext->high;
    REQUIRE_OK(pheap_alloc_to(h, ops[0].size, &slots_of(h)[0]));
    CHECK(h->engine->ext->high > high); /* the workload does raise the mark */
    pheap_sim_crash(h, NULL, 0, 0.0);
}

TEST(bounded_log_compaction)
{
    /* The half is full at its cap: the workload compacts into the other
     * half, whose stale slots below the new mark must be zeroed (C2), and
     * whose mark is set with the new epoch (C1). */
    const char *base = make_base("crash-marks-compact.heap", 256 * KiB, 8u << 20);
    REQUIRE(base);
    int failed = ph_test_failed;
    prepare_bounded(base, 4);
    REQUIRE(ph_test_failed == failed);
    static const op ops[] = {
        {OP_ALLOC_TO, 0, 20 * KiB}, {OP_ALLOC_TO, 1, 40 * KiB}, {OP_FREE_FROM, 0, 0},
        {OP_ALLOC_TO, 2, 20 * KiB}, {OP_FREE_FROM, 1, 0},       {OP_ALLOC_TO, 3, 60 * KiB},
        {OP_FREE_FROM, 2, 0},       {OP_ALLOC_TO, 4, 64},
    };
    enumerate("alloc/bounded_log_compaction", base, ops, sizeof(ops) / sizeof(ops[0]));
    pheap *h;
    pheap_options so = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(base, &so, &h));
    uint64_t epoch = h->engine->ext->epoch;
    pheap_off *slots = slots_of(h);
    for (unsigned i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
        REQUIRE_OK(ops[i].kind == OP_ALLOC_TO ? pheap_alloc_to(h, ops[i].size, &slots[ops[i].slot])
                                              : pheap_free_from(h, &slots[ops[i].slot]));
    CHECK(h->engine->ext->epoch > epoch); /* the workload does compact */
    CHECK(h->engine->ext->high < h->engine->ext->half_entries);
    pheap_sim_crash(h, NULL, 0, 0.0);
}
