/*
 * roots.c -- crash points of root updates: inserts, updates, removals and
 * slot reuse, crashed at every fence with and without eviction.  After
 * reopening, every root set by a returned call holds its value, the call
 * in flight shows its old or its new value, and pheap_check passes.
 */
#include <string.h>

#include "harness.h"

typedef struct op {
    const char *name;
    uint64_t slot; /* value = the slot-th block of the base heap; 0 = remove */
} op;

static const op ops[] = {
    {"alpha", 1}, {"beta", 2}, {"alpha", 3}, {"beta", 0}, {"gamma", 4},
    {"beta", 5},  {"gamma", 0}, {"delta", 6}, {"alpha", 0}, {"alpha", 7},
    {"r0", 8},    {"r1", 9},   {"r2", 10},   {"r1", 11},   {"r0", 0},
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))
static const char *names[] = {"alpha", "beta", "gamma", "delta", "r0", "r1", "r2"};

enum { NBLOCKS = 12 };

/* Roots name live blocks: the base heap holds NBLOCKS of them, their
 * offsets in an array block named by the root "blocks". */
static uint64_t value_of(const uint64_t *blocks, uint64_t slot)
{
    return slot ? blocks[slot] : 0;
}

/* Value of `name` after the first n operations. */
static uint64_t model(const uint64_t *data, const char *name, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++)
        if (strcmp(ops[i].name, name) == 0)
            v = value_of(data, ops[i].slot);
    return v;
}

static const uint64_t *data_offset(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "blocks"));
}

static void workload(ph_crash_ctx *c)
{
    const uint64_t *d = data_offset(c->heap);
    for (unsigned i = 0; i < NOPS; i++) {
        if (pheap_root_set(c->heap, ops[i].name, value_of(d, ops[i].slot)) != 0)
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", i, pheap_errmsg());
        ph_crash_mark(c);
    }
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    const uint64_t *d = data_offset(h);
    if (!d) {
        ph_test_fail(__FILE__, __LINE__, "root \"blocks\" lost");
        return;
    }
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        uint64_t got = pheap_root_get(h, names[k]);
        uint64_t before = model(d, names[k], done);
        uint64_t after = done < NOPS ? model(d, names[k], done + 1) : before;
        if (got != before && got != after)
            ph_test_fail(__FILE__, __LINE__, "root %s = %llu, expected %llu or %llu", names[k],
                         (unsigned long long)got, (unsigned long long)before,
                         (unsigned long long)after);
    }
}

TEST(root_updates_at_every_fence)
{
    const char *base = ph_test_path("roots-crash.heap");
    pheap *h = ph_test_create(base, 4u << 20);
    REQUIRE(h);
    pheap_off arr = pheap_alloc(h, NBLOCKS * sizeof(uint64_t));
    REQUIRE(arr);
    uint64_t *blocks = pheap_direct(h, arr);
    for (unsigned i = 0; i < NBLOCKS; i++)
        REQUIRE((blocks[i] = pheap_alloc(h, 64)) != 0);
    pheap_persist(h, blocks, NBLOCKS * sizeof(uint64_t));
    REQUIRE_OK(pheap_root_set(h, "blocks", arr));
    pheap_close(h);
    ph_crash_stats st = ph_crash_enumerate("roots/updates", base, workload, verify, NULL);
    /* open: 1 fence; insert: 3 (the name's check word after the commit,
     * format 1.5); update: 1; remove: 2 (the check word cleared first) */
    CHECK_EQ(st.fences, 1 + 3 * 9 + 2 + 2 * 4);
    CHECK(st.images > 5 * st.fences);
}
