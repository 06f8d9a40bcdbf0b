/*
 * map.c -- pheap_walk_chunks through crashes: a workload of small and
 * large allocations and frees (slabs made and emptied, a large block
 * freed, the heap grown) walks its heap after every operation, which must
 * write nothing -- no fence, no durable store, the same simulator trace --
 * and agree with the statistics; every crash image, once recovered, used
 * and reopened, maps in agreement with its statistics too.
 */
#include <unistd.h>

#include "harness.h"

#define NOPS 6

/* The walk writes nothing: the simulator sees no store, flush or fence. */
static void walk_writes_nothing(pheap *h)
{
    uint64_t fences = pheap_sim_fence_count(h), stores = pheap_sim_store_count(h);
    uint64_t trace = pheap_sim_trace_hash(h);
    ph_test_map_check(h);
    if (pheap_sim_fence_count(h) != fences || pheap_sim_store_count(h) != stores ||
        pheap_sim_trace_hash(h) != trace)
        ph_test_fail(__FILE__, __LINE__, "the walk wrote to the heap");
}

static void workload(ph_crash_ctx *c)
{
    pheap *h = c->heap;
    pheap_off small[6], large = 0;
    for (unsigned op = 0; op < NOPS; op++) {
        int rc = 0;
        switch (op) {
        case 0: case 1: /* slabs of two classes */
            for (unsigned i = 0; i < 3 && rc == 0; i++)
                rc = (small[op * 3 + i] = pheap_alloc(h, op ? 2048 : 48)) ? 0 : -1;
            break;
        case 2:
            rc = (large = pheap_alloc(h, 300u << 10)) ? 0 : -1;
            break;
        case 3: /* past the first size: the heap grows */
            rc = pheap_alloc(h, 3u << 20) ? 0 : -1;
            break;
        case 4:
            rc = pheap_free(h, large);
            break;
        default: /* the 2048-byte slab emptied */
            for (unsigned i = 3; i < 6 && rc == 0; i++)
                rc = pheap_free(h, small[i]);
            break;
        }
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", op, pheap_errmsg());
        ph_crash_mark(c);
        walk_writes_nothing(h);
    }
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)done;
    (void)c;
    ph_test_map_check(h);
}

TEST(map_at_every_fence)
{
    const char *base = ph_test_path("map-crash.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 16u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("map", base, workload, verify, NULL);
    CHECK(st.fences > NOPS);
    CHECK(st.images > st.fences);
    CHECK_EQ(st.violations, 0);
}
