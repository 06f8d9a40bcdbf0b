/*
 * gc_paths.c -- tracing and GC-mode frees where two paths meet: a block
 * that a filter and a conservative scan both reach keeps the children only
 * its filter sees (LOG pheap_gc and GC recovery), and pheap_free_from of a
 * large block on a GC heap never leaves a durable word naming the freed
 * extent.
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

typedef struct node {
    pheap_off next;  /* tagged with bit 0: only a filter sees it */
    uint64_t value;
} node;

static pheap *create_gc(const char *path, unsigned flags)
{
    return ph_test_create_mode(path, 8u << 20, PHEAP_CONSISTENCY_GC, flags);
}

static void node_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off;
    (void)usable;
    pheap_trace(tr, ((const node *)block)->next & ~1ull, node_filter);
}

/* Root "typed" -> A (filter) -> B (tagged link, filter) -> C (tagged link).
 * Root "plain" -> P, a block scanned conservatively that holds B's offset
 * (an integer that happens to equal it, or an untyped reference).  The
 * conservative visit of B comes first (one marking thread, a stack); the
 * filter must still visit B and keep C. */
static void build_typed(pheap *h, pheap_off *pa, pheap_off *pb, pheap_off *pc)
{
    pheap_off a = pheap_alloc(h, sizeof(node)), b = pheap_alloc(h, sizeof(node));
    pheap_off c = pheap_alloc(h, sizeof(node)), p = pheap_alloc(h, 64);
    REQUIRE(a && b && c && p);
    node *na = pheap_direct(h, a), *nb = pheap_direct(h, b), *nc = pheap_direct(h, c);
    na->next = b | 1;
    na->value = 1;
    nb->next = c | 1;
    nb->value = 2;
    nc->next = 0;
    nc->value = 3;
    uint64_t *pp = pheap_direct(h, p);
    memset(pp, 0, 64);
    pp[0] = b;
    pheap_persist(h, na, sizeof(*na));
    pheap_persist(h, nb, sizeof(*nb));
    pheap_persist(h, nc, sizeof(*nc));
    pheap_persist(h, pp, 64);
    /* "typed" first in the table: its block is pushed first and so (one
     * marking thread, a stack) visited last */
    REQUIRE_OK(pheap_root_set(h, "typed", a));
    REQUIRE_OK(pheap_root_set(h, "plain", p));
    *pa = a;
    *pb = b;
    *pc = c;
}

TEST(filter_after_conservative_visit_log_gc)
{
    pheap *h = ph_test_create(ph_test_path("def-filter-log.heap"), 8u << 20);
    REQUIRE(h);
    pheap_off a, b, c;
    build_typed(h, &a, &b, &c);
    REQUIRE_OK(pheap_root_set_filter(h, "typed", node_filter));
    pheap_gc_options go = {.threads = 1};
    pheap_gc_report rep;
    REQUIRE_OK(pheap_gc_ex(h, &go, &rep));
    /* A, B, C and P are reachable: nothing to free */
    CHECK_EQ(rep.freed_blocks, 0);
    CHECK_EQ(pheap_usable_size(h, c), sizeof(node)); /* C kept */
    pheap_close(h);
}

TEST(filter_after_conservative_visit_gc_recover)
{
    const char *path = ph_test_path("def-filter-gc.heap"), *image = ph_test_path("def-filter-gc.image");
    pheap *h = create_gc(path, PHEAP_SIMULATE);
    REQUIRE(h);
    pheap_off a, b, c;
    build_typed(h, &a, &b, &c);
    unlink(image);
    REQUIRE_OK(pheap_sim_crash(h, image, 1, 0.0));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    REQUIRE_OK(pheap_root_set_filter(h, "typed", node_filter));
    pheap_gc_options go = {.threads = 1};
    pheap_gc_report rep;
    REQUIRE_OK(pheap_recover_ex(h, &go, &rep));
    CHECK_EQ(rep.marked_blocks, 4);
    CHECK_EQ(pheap_usable_size(h, c), sizeof(node));
    /* C, linked from B, is not handed out again */
    int reused = 0;
    for (unsigned i = 0; i < 64 && !reused; i++)
        reused = pheap_alloc(h, sizeof(node)) == c;
    CHECK(!reused);
    pheap_close(h);
}

/* GC mode's pheap_free_from of a large block: the extent's free is
 * durable when the call returns, so the cleared word must be too -- else a
 * crash leaves a reachable, durable word naming free space, which the
 * next allocation hands out again. */
TEST(free_from_large_clears_its_word_durably)
{
    const char *path = ph_test_path("def-ff.heap"), *image = ph_test_path("def-ff.image");
    pheap *h = create_gc(path, PHEAP_SIMULATE);
    REQUIRE(h);
    pheap_off parent = pheap_alloc(h, 64), big = pheap_alloc(h, 100000);
    REQUIRE(parent && big);
    pheap_off *w = pheap_direct(h, parent);
    memset(w, 0, 64);
    w[0] = big;
    pheap_persist(h, w, 64);
    REQUIRE_OK(pheap_root_set(h, "parent", parent));
    REQUIRE_OK(pheap_free_from(h, &w[0]));
    unlink(image);
    REQUIRE_OK(pheap_sim_crash(h, image, 1, 0.0)); /* only what was flushed and fenced */
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    REQUIRE_OK(pheap_recover(h));
    w = pheap_direct(h, pheap_root_get(h, "parent"));
    REQUIRE(w);
    /* either the free is undone (the block kept) or the link is gone */
    if (w[0] != 0)
        CHECK_EQ(pheap_usable_size(h, w[0]), 102400);
    pheap_off again = pheap_alloc(h, 100000);
    CHECK(w[0] == 0 || again != w[0]);
    pheap_close(h);
}
