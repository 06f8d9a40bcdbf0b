/*
 * share_test.h -- what the tests of a heap shared between processes build
 * the same way (engines of one heap, as processes sharing it have): the
 * engine's view of the sharing, and a thread cache of the test's own.
 */
#ifndef PH_TEST_SHARE_TEST_H
#define PH_TEST_SHARE_TEST_H

#include <string.h>

#include "alloc/engine.h"
#include "format/header.h"
#include "heap/heap.h"

/* The sharing of heap h for the process of lease slot owner - 1 whose
 * attach is generation `gen` (identity gen << 8 | owner), the extent
 * log's lock at *lock, and a death test. */
static inline ph_engine_share ph_test_share(pheap *h, unsigned owner, unsigned gen, uint64_t *lock,
                                            int (*dead)(void *, uint64_t), void *ctx)
{
    const ph_region *r = ph_header_region(&h->hdr, PH_REGION_PROCS);
    uint64_t me = (uint64_t)gen << 8 | owner;
    return (ph_engine_share){me, owner, ph_space_at(&h->sp, PH_PROCS_CHUNKS_AT(r->offset)), lock,
                             ph_space_at(&h->sp, PH_PROCS_LANES_AT(r->offset)),
                             {me, dead, ctx}};
}

/* A thread cache as a thread's record starts it: empty, no arena, no lane. */
static inline void ph_test_tcache(ph_tcache *t)
{
    memset(t, 0, sizeof(*t));
    t->arena = -1;
    t->lane.index = -1;
}

#endif
