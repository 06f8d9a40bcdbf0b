/*
 * alloc_init.c -- pheap_alloc_init and pheap_alloc_to_init: blocks come
 * zeroed and/or filled by the initialiser, with the usable size it was
 * told; a nonzero initialiser cancels (PHEAP_ECANCELED) and changes
 * nothing; bad flags are refused; and the calls take exactly the fences of
 * pheap_alloc / pheap_alloc_to (flushes: one per line of the block more).
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

static pheap *fresh(const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
    return h;
}

/* Dirties blocks of `size`: allocated, filled with 0xab, freed. */
static void dirty(pheap *h, size_t size, unsigned n)
{
    pheap_off b[64];
    for (unsigned i = 0; i < n && i < 64; i++) {
        b[i] = pheap_alloc(h, size);
        memset(pheap_direct(h, b[i]), 0xab, pheap_usable_size(h, b[i]));
    }
    for (unsigned i = 0; i < n && i < 64; i++)
        pheap_free(h, b[i]);
}

typedef struct seen {
    pheap *h;
    size_t usable;
    unsigned calls;
    int ret;
    int all_zero;
} seen;

static int record(pheap *h, void *block, size_t usable, void *arg)
{
    seen *s = arg;
    const unsigned char *p = block;
    s->calls++;
    s->usable = usable;
    s->all_zero = 1;
    for (size_t i = 0; i < usable; i++)
        s->all_zero &= p[i] == 0;
    if (h != s->h)
        return -1000;
    if (!s->ret)
        memset(block, 0x5c, usable);
    return s->ret;
}

static int all(const void *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != v)
            return 0;
    return 1;
}

static const size_t sizes[] = {8, 64, 1000, 16384, 100000};

TEST(zeroed_and_filled_blocks)
{
    pheap *h = fresh("init.heap");
    REQUIRE(h);
    pheap_off holder = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(holder);
    pheap_off *slot = pheap_direct(h, holder);
    for (unsigned k = 0; k < PH_ARRAY_N(sizes); k++) {
        size_t n = sizes[k];
        dirty(h, n, 8);
        /* zero only */
        pheap_off a = pheap_alloc_init(h, n, PHEAP_ALLOC_ZERO, NULL, NULL);
        REQUIRE(a);
        CHECK(all(pheap_direct(h, a), pheap_usable_size(h, a), 0));
        REQUIRE_OK(pheap_alloc_to_init(h, n, slot, PHEAP_ALLOC_ZERO, NULL, NULL));
        CHECK(all(pheap_direct(h, *slot), pheap_usable_size(h, *slot), 0));
        REQUIRE_OK(pheap_free_from(h, slot));
        REQUIRE_OK(pheap_free(h, a));
        /* zero, then the initialiser: it sees zeros and the usable size */
        dirty(h, n, 8);
        seen s = {h, 0, 0, 0, 0};
        REQUIRE_OK(pheap_alloc_to_init(h, n, slot, PHEAP_ALLOC_ZERO, record, &s));
        CHECK_EQ(s.calls, 1);
        CHECK(s.all_zero);
        CHECK_EQ(s.usable, pheap_usable_size(h, *slot));
        CHECK(s.usable >= n);
        CHECK(all(pheap_direct(h, *slot), s.usable, 0x5c));
        REQUIRE_OK(pheap_free_from(h, slot));
        /* the initialiser alone: it sees the old bytes */
        dirty(h, n, 8);
        s = (seen){h, 0, 0, 0, 0};
        a = pheap_alloc_init(h, n, 0, record, &s);
        REQUIRE(a);
        CHECK_EQ(s.calls, 1);
        CHECK_EQ(s.usable, pheap_usable_size(h, a));
        CHECK(all(pheap_direct(h, a), s.usable, 0x5c));
        REQUIRE_OK(pheap_free(h, a));
        /* no flag, no initialiser: pheap_alloc_to */
        REQUIRE_OK(pheap_alloc_to_init(h, n, slot, 0, NULL, NULL));
        CHECK(pheap_usable_size(h, *slot) >= n);
        REQUIRE_OK(pheap_free_from(h, slot));
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 1);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(initialiser_cancels)
{
    pheap *h = fresh("cancel.heap");
    REQUIRE(h);
    pheap_off holder = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(holder);
    pheap_off *slot = pheap_direct(h, holder);
    *slot = 0;
    struct pheap_stats before, after;
    pheap_stats(h, &before);
    for (unsigned round = 0; round < 200; round++) { /* no leak, no growth */
        for (unsigned k = 0; k < PH_ARRAY_N(sizes); k++) {
            seen s = {h, 0, 0, 7, 0};
            CHECK_EQ(pheap_alloc_to_init(h, sizes[k], slot, PHEAP_ALLOC_ZERO, record, &s),
                     PHEAP_ECANCELED);
            CHECK_EQ(pheap_errno(), PHEAP_ECANCELED);
            CHECK(strstr(pheap_errmsg(), "7") != NULL);
            CHECK_EQ(*slot, 0);
            CHECK_EQ(pheap_alloc_init(h, sizes[k], 0, record, &s), 0);
            CHECK_EQ(pheap_errno(), PHEAP_ECANCELED);
            CHECK_EQ(s.calls, 2);
        }
    }
    pheap_stats(h, &after);
    CHECK_EQ(after.live_blocks, before.live_blocks);
    CHECK_EQ(after.live_bytes, before.live_bytes);
    CHECK_EQ(after.size, before.size);
    REQUIRE_OK(pheap_check(h, NULL));
    /* The canceled blocks are handed out again. */
    seen s = {h, 0, 0, 0, 0};
    REQUIRE_OK(pheap_alloc_to_init(h, 64, slot, 0, record, &s));
    CHECK(all(pheap_direct(h, *slot), 64, 0x5c));
    REQUIRE_OK(pheap_free_from(h, slot));
    pheap_close(h);
}

TEST(bad_arguments_change_nothing)
{
    pheap *h = fresh("badinit.heap");
    REQUIRE(h);
    pheap_off holder = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    pheap_off *slot = pheap_direct(h, holder);
    seen s = {h, 0, 0, 0, 0};
    CHECK_EQ(pheap_alloc_to_init(h, 64, slot, 0x10, record, &s), PHEAP_EINVAL);
    CHECK_EQ(pheap_alloc_init(h, 64, ~0u, record, &s), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_alloc_to_init(h, 0, slot, 0, record, &s), PHEAP_EINVAL);
    CHECK_EQ(pheap_alloc_init(h, 0, 0, record, &s), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    pheap_off outside = 0;
    CHECK_EQ(pheap_alloc_to_init(h, 64, &outside, 0, record, &s), PHEAP_ERANGE);
    CHECK_EQ(pheap_alloc_to_init(NULL, 64, slot, 0, record, &s), PHEAP_EINVAL);
    CHECK_EQ(s.calls, 0); /* refused before any initialiser ran */
    CHECK_EQ(*slot, 0);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 1);
    const char *path = ph_test_path("badinit.heap");
    pheap_close(h);
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    CHECK_EQ(pheap_alloc_init(h, 64, 0, record, &s), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERDONLY);
    CHECK_EQ(s.calls, 0);
    pheap_close(h);
}

/* An initialiser may use the heap: it allocates a child and links it
 * into the block under construction (with pheap_alloc: the block is not
 * allocated yet, so it is no alloc_to destination). */
static int with_child(pheap *h, void *block, size_t usable, void *arg)
{
    (void)usable;
    pheap_off *words = block;
    CHECK_EQ(pheap_alloc_to(h, 16, &words[1]), PHEAP_ENOTLIVE);
    words[0] = pheap_alloc_init(h, 32, PHEAP_ALLOC_ZERO, NULL, NULL);
    *(int *)arg += 1;
    return words[0] ? 0 : -1;
}

TEST(initialiser_may_allocate)
{
    pheap *h = fresh("nested.heap");
    REQUIRE(h);
    pheap_off holder = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    pheap_off *slot = pheap_direct(h, holder);
    int calls = 0;
    REQUIRE_OK(pheap_alloc_to_init(h, 64, slot, PHEAP_ALLOC_ZERO, with_child, &calls));
    CHECK_EQ(calls, 1);
    pheap_off child = ((pheap_off *)pheap_direct(h, *slot))[0];
    CHECK(pheap_usable_size(h, child) >= 32);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 3);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* Counters, not timings: the same fences as the calls without an
 * initialiser, and one flush more per cache line of the block. */
TEST(no_fence_more_than_without_initialiser)
{
    pheap *h = fresh("fences.heap");
    REQUIRE(h);
    pheap_off holder = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    pheap_off *slot = pheap_direct(h, holder);
    for (unsigned k = 0; k < PH_ARRAY_N(sizes); k++) {
        size_t n = sizes[k];
        struct pheap_stats a, b, c, d;
        /* warm: slabs made, lane taken */
        REQUIRE_OK(pheap_alloc_to(h, n, slot));
        REQUIRE_OK(pheap_free_from(h, slot));
        pheap_stats(h, &a);
        REQUIRE_OK(pheap_alloc_to(h, n, slot));
        pheap_stats(h, &b);
        REQUIRE_OK(pheap_free_from(h, slot));
        pheap_stats(h, &c);
        REQUIRE_OK(pheap_alloc_to_init(h, n, slot, PHEAP_ALLOC_ZERO, NULL, NULL));
        pheap_stats(h, &d);
        size_t lines = (pheap_usable_size(h, *slot) + 63) / 64;
        REQUIRE_OK(pheap_free_from(h, slot));
        CHECK_EQ(d.fences - c.fences, b.fences - a.fences);
        CHECK_EQ(d.flushes - c.flushes, b.flushes - a.flushes + lines);
        uint64_t to = b.fences - a.fences, to_init = d.fences - c.fences;
        pheap_off x = pheap_alloc(h, n);
        pheap_free(h, x);
        pheap_stats(h, &a);
        x = pheap_alloc(h, n);
        pheap_stats(h, &b);
        pheap_free(h, x);
        pheap_stats(h, &c);
        x = pheap_alloc_init(h, n, PHEAP_ALLOC_ZERO, NULL, NULL);
        pheap_stats(h, &d);
        pheap_free(h, x);
        CHECK_EQ(d.fences - c.fences, b.fences - a.fences);
        CHECK_EQ(d.flushes - c.flushes, b.flushes - a.flushes + lines);
        printf("%6zu B: fences alloc_to %llu, alloc_to_init %llu; alloc %llu, alloc_init %llu; "
               "%zu line flushes more\n", n, (unsigned long long)to, (unsigned long long)to_init,
               (unsigned long long)(b.fences - a.fences), (unsigned long long)(d.fences - c.fences),
               lines);
    }
    pheap_close(h);
}
