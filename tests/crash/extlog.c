/*
 * extlog.c -- the extent log's slots, read directly: after a compaction
 * every slot of the active half past the live entries, up to its
 * high-water mark, is zero, so that an
 * append always fills a slot that is durably zero and a torn append (one
 * of its two words on media) never decodes.  Before compactions rewrote
 * whole halves, slots past the end kept entries of older epochs, and a
 * torn pair -- a new second word over the old first word -- passed the
 * 16-bit check about once in 70,000 tries.
 */
#include <string.h>

#include "harness.h"
#include "heap/heap.h"

/* Non-zero slots of the active half at or past the append position and
 * below its mark (where appends go). */
static unsigned stale_slots(ph_extents *x)
{
    unsigned n = 0;
    uint64_t lines = x->half_entries / 4;
    for (uint64_t j = x->tail; j < x->high; j++) {
        const ph_extlog_entry *e = &x->half[x->active][(j % lines) * 4 + j / lines];
        n += e->w0 != 0 || e->w1 != 0;
    }
    return n;
}

TEST(slots_past_the_end_are_zero_after_compaction)
{
    const char *path = ph_test_path("extlog.heap");
    pheap *h = ph_test_create(path, 16u << 20);
    REQUIRE(h);
    ph_extents *x = h->engine->ext;
    enum { MANY = 200 };
    pheap_off keep[MANY];
    unsigned compactions = 0;
    uint64_t epoch = x->epoch;
    /* Many live extents, then few, so that each compaction writes fewer
     * entries than the one before it into the same half. */
    for (unsigned round = 0; round < 6; round++) {
        unsigned live = round % 2 ? 10 : MANY;
        for (unsigned i = 0; i < live; i++)
            REQUIRE((keep[i] = pheap_alloc(h, 20000)) != 0);
        while (x->epoch < epoch + 1) { /* fill the half: it compacts */
            pheap_off a = pheap_alloc(h, 20000);
            REQUIRE(a);
            REQUIRE_OK(pheap_free(h, a));
        }
        epoch = x->epoch;
        compactions++;
        CHECK_EQ(stale_slots(x), 0);
        for (unsigned i = 0; i < live; i++)
            REQUIRE_OK(pheap_free(h, keep[i]));
    }
    CHECK_EQ(compactions, 6);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A torn append over a zero slot: either word alone never decodes, and
 * recovery ignores it. */
TEST(torn_append_over_a_zero_slot_is_ignored)
{
    const char *path = ph_test_path("torn-extlog.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    ph_extents *x = h->engine->ext;
    pheap_off a = pheap_alloc(h, 40000);
    REQUIRE(a);
    uint64_t lines = x->half_entries / 4, j = x->tail - 1;
    ph_extlog_entry *e = &x->half[x->active][(j % lines) * 4 + j / lines];
    ph_extlog_entry full = *e;
    pheap_close(h);
    for (unsigned w = 0; w < 2; w++) {
        pheap_options o = {.flags = PHEAP_SIMULATE};
        REQUIRE_OK(pheap_open(path, &o, &h));
        x = h->engine->ext;
        e = &x->half[x->active][(j % lines) * 4 + j / lines];
        REQUIRE(e->w0 == full.w0 && e->w1 == full.w1);
        /* The state a crash leaves when one word of the append landed. */
        if (w == 0)
            e->w1 = 0;
        else
            e->w0 = 0;
        pheap_persist(h, e, sizeof(*e));
        const char *img = ph_test_path("torn-extlog.image");
        REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
        pheap *r;
        REQUIRE_OK(pheap_open(img, NULL, &r));
        CHECK_EQ(pheap_usable_size(r, a), 0); /* the allocation is not there */
        REQUIRE_OK(pheap_check(r, NULL));
        CHECK(pheap_alloc(r, 40000) != 0);
        pheap_close(r);
    }
}
