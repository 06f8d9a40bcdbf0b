/*
 * slab_share.c -- the bitmap commits of a slab of a heap shared between
 * processes (alloc/slab_share.h) through crashes: the owner's allocations
 * by compare-and-swap, remote frees, the owner taking them back and
 * allocating them again, a local free, and a survivor adopting the slab
 * and allocating.  At every crash point, in every mode, the open that
 * follows (every process gone) passes pheap_check and has live exactly
 * the blocks whose allocation returned and whose free did not.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "alloc/slab_share.h"
#include "format/header.h"
#include "harness.h"
#include "heap/heap.h"

#define CLS 4u
#define NB 5

static uint64_t chunk; /* the same in every run */

/* Block k is live while done is in [from, to) of one of its spans. */
typedef struct span {
    unsigned from, to;
} span;
static const span live[NB][2] = {
    {{2, 8}, {0, 0}},   /* b0: allocated (op 1), freed by its owner (op 7) */
    {{3, 6}, {9, 99}},  /* b1: allocated (2), freed remotely (5), allocated again (8) */
    {{4, 7}, {0, 0}},   /* b2: allocated (3), freed remotely (6) */
    {{5, 99}, {0, 0}},  /* b3: allocated (4) */
    {{10, 99}, {0, 0}}, /* b4: allocated by the adopter (9) */
};

static uint64_t block(const pheap *h, unsigned k)
{
    (void)h;
    return chunk + (uint64_t)k * ph_class_size[CLS];
}

static void workload(ph_crash_ctx *c)
{
    pheap *h = c->heap;
    ph_space *sp = &h->sp;
    ph_pctx *pc = ph_heap_pctx(h);
    const ph_region *r = ph_header_region(&h->hdr, PH_REGION_PROCS);
    /* made as the engine makes a slab: its descriptor durable before its entry */
    int rc = ph_extent_reserve(h->engine->ext, pc, PH_CHUNK_SIZE, PH_EXT_SLAB, &chunk);
    if (rc || !r) {
        ph_test_fail(__FILE__, __LINE__, "setup: %s", pheap_errmsg());
        return;
    }
    ph_slab *s = ph_slab_new(sp, chunk), *adopted = ph_slab_new(sp, chunk);
    ph_slab_format(sp, pc, s, CLS);
    ph_persist_fence(&sp->persist, pc);
    ph_extent_commit_slabs(h->engine->ext, pc, &chunk, 1, CLS);
    ph_procs_chunk *cw = (ph_procs_chunk *)ph_space_at(sp, PH_PROCS_CHUNKS_AT(r->offset)) +
                         (chunk - sp->data_off) / PH_CHUNK_SIZE;
    ph_slab_own(cw, 1);
    ph_crash_mark(c); /* 1 */
    uint64_t got[NB];
    if (ph_slab_take(s, got, 4) != 4)
        ph_test_fail(__FILE__, __LINE__, "take");
    for (unsigned k = 0; k < 4; k++) { /* ops 1..4 */
        rc |= ph_slab_shared_set(sp, pc, s, k);
        ph_persist_fence(&sp->persist, pc);
        ph_crash_mark(c);
    }
    rc |= ph_slab_remote_free(sp, pc, s->desc, cw, chunk, block(h, 1)); /* op 5 */
    ph_crash_mark(c);
    rc |= ph_slab_remote_free(sp, pc, s->desc, cw, chunk, block(h, 2)); /* op 6 */
    ph_crash_mark(c);
    int bad;
    if (ph_slab_collect(sp, s, cw, &bad) != 2 || bad)
        ph_test_fail(__FILE__, __LINE__, "collect");
    rc |= ph_slab_shared_clear(sp, pc, s->desc, chunk, block(h, 0)); /* op 7 */
    ph_persist_fence(&sp->persist, pc);
    ph_slab_give(s, block(h, 0));
    ph_crash_mark(c);
    rc |= ph_slab_shared_set(sp, pc, s, 1); /* op 8 */
    ph_persist_fence(&sp->persist, pc);
    ph_crash_mark(c);
    rc |= ph_slab_adopt(adopted, cw, 2); /* the owner died: a survivor's view */
    if (ph_slab_available(adopted, 1) || !ph_slab_available(adopted, 0) ||
        !ph_slab_available(adopted, 4))
        ph_test_fail(__FILE__, __LINE__, "adopted available set");
    rc |= ph_slab_shared_set(sp, pc, adopted, 4); /* op 9 */
    ph_persist_fence(&sp->persist, pc);
    ph_crash_mark(c);
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "an operation failed: %s", pheap_errmsg());
    ph_slab_own(cw, 0);
    free(s);
    free(adopted);
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    if (!chunk || done < 1)
        return;
    for (unsigned k = 0; k < NB; k++) {
        int is_live = pheap_usable_size(h, block(h, k)) == ph_class_size[CLS];
        int must = 0, edge = 0;
        for (unsigned j = 0; j < 2; j++) {
            const span *sp = &live[k][j];
            if (!sp->from)
                continue;
            must |= done >= sp->from && done < sp->to;
            edge |= done + 1 == sp->from || done + 1 == sp->to; /* that op in flight */
        }
        if (!edge && must != is_live)
            ph_test_fail(__FILE__, __LINE__, "block %u after %u ops: %s", k, done,
                         is_live ? "live" : "free");
    }
    ph_test_map_check(h);
}

TEST(shared_slab_at_every_fence)
{
    const char *base = ph_test_path("slab-share.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("slab-share", base, workload, verify, NULL);
    CHECK(st.fences > 9);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}
