/*
 * misuse.c -- calls that used to obey a bad offset silently are refused with
 * their own code, and change nothing: a root naming what is not a live
 * block's start, an alloc_to destination (or free_from source) in free
 * space, pheap_direct / pheap_offset of the header and metadata.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* A heap with live and freed blocks, small and large. */
typedef struct scene {
    pheap *h;
    pheap_off small, large, holder;  /* live: 64 B, 100000 B, 64 B whose word 0 is a slot */
    pheap_off freed_small, freed_large;
    pheap_off never;                 /* data space never allocated */
    pheap_off never_block;           /* a block of small's slab never handed out */
    struct pheap_stats st;
} scene;

static int setup(scene *s, const char *name)
{
    memset(s, 0, sizeof(*s));
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 16u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    if (pheap_open(path, &o, &s->h))
        return ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg()), -1;
    s->freed_small = pheap_alloc(s->h, 64);
    s->freed_large = pheap_alloc(s->h, 100000);
    s->small = pheap_alloc(s->h, 64);
    s->large = pheap_alloc(s->h, 100000);
    s->holder = pheap_alloc(s->h, 64);
    if (!s->freed_small || !s->freed_large || !s->small || !s->large || !s->holder ||
        pheap_free(s->h, s->freed_small) || pheap_free(s->h, s->freed_large))
        return ph_test_fail(__FILE__, __LINE__, "setup: %s", pheap_errmsg()), -1;
    memset(pheap_direct(s->h, s->holder), 0, 64);
    pheap_stats(s->h, &s->st);
    s->never = s->st.data_offset + (s->st.data_size / 2 & ~(uint64_t)65535);
    pheap_off slab = s->small - (s->small - s->st.data_offset) % 65536;
    s->never_block = slab + 65536 - 2 * 64; /* near the slab's end: never handed out */
    if (s->never < s->large + 200000)
        return ph_test_fail(__FILE__, __LINE__, "setup: the middle of the heap is in use"), -1;
    return 0;
}

/* Nothing changed since setup: check passes, same live blocks and bytes. */
static void unchanged(scene *s, const char *after, int line)
{
    ph_test_unchanged(s->h, &s->st, after, __FILE__, line);
}

/* rc must be `want`, with errno and a message. */
static void expect(int rc, int want, const char *what, int line)
{
    if (rc != want)
        ph_test_fail(__FILE__, line, "%s -> %d (%s), want %d (%s)", what, rc,
                     rc ? pheap_errmsg() : "ok", want, pheap_strerror(want));
    else if (want && (pheap_errno() != want || !pheap_errmsg()[0] ||
                      !strcmp(pheap_errmsg(), "no error")))
        ph_test_fail(__FILE__, line, "%s: errno %d, message '%s'", what, pheap_errno(),
                     pheap_errmsg());
}

static void refuse_root(scene *s, pheap_off off, int want, const char *what, int line)
{
    expect(pheap_root_set(s->h, "r", off), want, what, line);
    if (pheap_root_get(s->h, "r") != s->small)
        ph_test_fail(__FILE__, line, "root_set(%s) changed the root", what);
    expect(pheap_root_set(s->h, "fresh", off), want, what, line);
    if (pheap_root_count(s->h) != 1)
        ph_test_fail(__FILE__, line, "root_set(%s) added a root", what);
    unchanged(s, what, line);
}
#define REFUSE_ROOT(s, off, want) refuse_root(s, off, want, "root_set(" #off ")", __LINE__)

TEST(root_set_refuses_what_is_not_a_live_block_start)
{
    scene s;
    REQUIRE(setup(&s, "roots.heap") == 0);
    REQUIRE_OK(pheap_root_set(s.h, "r", s.small));
    REFUSE_ROOT(&s, s.small + 8, PHEAP_EINTERIOR);
    REFUSE_ROOT(&s, s.small + 1, PHEAP_EINTERIOR);
    REFUSE_ROOT(&s, s.large + 8, PHEAP_EINTERIOR);
    REFUSE_ROOT(&s, s.large + 4096, PHEAP_EINTERIOR);
    REFUSE_ROOT(&s, s.freed_small, PHEAP_ENOTLIVE);
    REFUSE_ROOT(&s, s.freed_large, PHEAP_ENOTLIVE);
    REFUSE_ROOT(&s, s.never, PHEAP_ENOTLIVE);
    REFUSE_ROOT(&s, s.never + 4096, PHEAP_ENOTLIVE);
    REFUSE_ROOT(&s, s.never_block, PHEAP_ENOTLIVE);
    REFUSE_ROOT(&s, 64, PHEAP_ERANGE); /* the header */
    REFUSE_ROOT(&s, s.st.size, PHEAP_ERANGE);
    /* Live starts are fine, small and large; 0 still removes. */
    REQUIRE_OK(pheap_root_set(s.h, "r", s.large));
    CHECK_EQ(pheap_root_get(s.h, "r"), s.large);
    REQUIRE_OK(pheap_root_set(s.h, "r", 0));
    CHECK_EQ(pheap_root_count(s.h), 0);
    REQUIRE_OK(pheap_root_set(s.h, "absent", 0));
    unchanged(&s, "root_set of live blocks", __LINE__);
    pheap_close(s.h);
}

/* alloc_to (64 B and 100000 B) and alloc_to_init into the word at `at`
 * must be refused with `want`; the word keeps its value. */
static void refuse_dest(scene *s, pheap_off at, int want, const char *what, int line)
{
    pheap_off *dest = pheap_direct(s->h, at);
    if (!dest) {
        ph_test_fail(__FILE__, line, "%s: no address", what);
        return;
    }
    *dest = 0x5151515151515151ull; /* a user writing into free space: nobody stops that */
    expect(pheap_alloc_to(s->h, 64, dest), want, what, line);
    expect(pheap_alloc_to(s->h, 100000, dest), want, what, line);
    expect(pheap_alloc_to_init(s->h, 64, dest, PHEAP_ALLOC_ZERO, NULL, NULL), want, what, line);
    if (*dest != 0x5151515151515151ull)
        ph_test_fail(__FILE__, line, "%s: the word changed to %#llx", what,
                     (unsigned long long)*dest);
    unchanged(s, what, line);
}
#define REFUSE_DEST(s, at, want) refuse_dest(s, at, want, "alloc_to(" #at ")", __LINE__)

TEST(alloc_to_refuses_a_destination_in_free_space)
{
    scene s;
    REQUIRE(setup(&s, "dest.heap") == 0);
    REFUSE_DEST(&s, s.freed_small, PHEAP_ENOTLIVE);
    REFUSE_DEST(&s, s.freed_small + 56, PHEAP_ENOTLIVE);
    REFUSE_DEST(&s, s.freed_large, PHEAP_ENOTLIVE);
    REFUSE_DEST(&s, s.freed_large + 65536, PHEAP_ENOTLIVE);
    REFUSE_DEST(&s, s.never, PHEAP_ENOTLIVE);
    REFUSE_DEST(&s, s.never_block + 8, PHEAP_ENOTLIVE);
    /* A word of a live block, at its start or inside, small or large. */
    pheap_off targets[4] = {s.holder, s.small + 56, s.large, s.large + 99992};
    for (unsigned i = 0; i < 4; i++) {
        pheap_off *dest = pheap_direct(s.h, targets[i]);
        *dest = 0;
        REQUIRE_OK(pheap_alloc_to(s.h, 64, dest));
        CHECK(pheap_usable_size(s.h, *dest) >= 64);
        REQUIRE_OK(pheap_free_from(s.h, dest));
        CHECK_EQ(*dest, 0);
    }
    unchanged(&s, "alloc_to into live blocks", __LINE__);
    pheap_close(s.h);
}

TEST(free_from_refuses_a_source_in_free_space)
{
    scene s;
    REQUIRE(setup(&s, "src.heap") == 0);
    pheap_off at[3] = {s.freed_small, s.freed_large + 8, s.never};
    for (unsigned i = 0; i < 3; i++) {
        pheap_off *src = pheap_direct(s.h, at[i]);
        *src = s.small; /* a live block's offset, left in free space */
        expect(pheap_free_from(s.h, src), PHEAP_ENOTLIVE, "free_from(word in free space)",
               __LINE__);
        CHECK_EQ(*src, s.small);
        CHECK(pheap_usable_size(s.h, s.small) >= 64);
        unchanged(&s, "free_from(word in free space)", __LINE__);
    }
    pheap_close(s.h);
}

TEST(direct_and_offset_refuse_the_header_and_metadata)
{
    scene s;
    REQUIRE(setup(&s, "direct.heap") == 0);
    char *first = pheap_direct(s.h, s.st.data_offset);
    REQUIRE(first);
    char *base = first - s.st.data_offset;
    pheap_off meta[4] = {8, 64, 4096, s.st.data_offset - 8};
    for (unsigned i = 0; i < 4; i++) {
        CHECK(pheap_direct(s.h, meta[i]) == NULL);
        CHECK_EQ(pheap_errno(), PHEAP_ERANGE);
        CHECK_EQ(pheap_offset(s.h, base + meta[i]), 0);
        CHECK_EQ(pheap_errno(), PHEAP_ERANGE);
    }
    CHECK(pheap_direct(s.h, s.st.size) == NULL);
    CHECK_EQ(pheap_errno(), PHEAP_ERANGE);
    CHECK(pheap_direct(s.h, 0) == NULL);
    CHECK_EQ(pheap_offset(s.h, NULL), 0);
    /* The data region maps both ways, to its last byte. */
    CHECK_EQ(pheap_offset(s.h, first), s.st.data_offset);
    CHECK(pheap_direct(s.h, s.st.size - 1) == base + s.st.size - 1);
    CHECK_EQ(pheap_offset(s.h, base + s.st.size - 1), s.st.size - 1);
    CHECK_EQ(pheap_offset(s.h, base + s.st.size), 0);
    CHECK(pheap_direct(s.h, s.small) == base + s.small);
    unchanged(&s, "direct / offset", __LINE__);
    pheap_close(s.h);
}
