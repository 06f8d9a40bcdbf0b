/*
 * bad_free.c -- bad frees are refused with their own code and change
 * nothing: double frees, interior offsets, offsets outside the data region
 * or in space never allocated, and bad destination/source words.  After
 * every refusal the heap passes pheap_check, keeps its live count and every
 * other block keeps its contents.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1ull << 20)

enum { NKEEP = 6 };

/* A heap with live blocks of known contents and two freed blocks. */
typedef struct scene {
    pheap *h;
    const char *path;
    pheap_off keep[NKEEP];  /* live: 3 small, 2 large, 1 holding the slot word */
    size_t len[NKEEP];
    pheap_off freed_small;  /* freed once */
    pheap_off freed_large;
    pheap_off *slot;        /* an 8-byte word inside the heap (keep[5]) */
    struct pheap_stats st;  /* after setup */
} scene;

static const size_t keep_sizes[NKEEP] = {64, 64, 1000, 100000, 300000, 64};

static unsigned char pat(unsigned k, size_t i)
{
    return (unsigned char)(k * 131 + i * 7 + (i >> 8));
}

static unsigned test_flush(void)
{
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

static int setup(scene *s, const char *name)
{
    memset(s, 0, sizeof(*s));
    s->path = ph_test_path(name);
    unlink(s->path);
    pheap_options o = {.size = 16 * MiB, .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = test_flush()};
    if (pheap_open(s->path, &o, &s->h))
        return ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg()), -1;
    s->freed_small = pheap_alloc(s->h, 64);
    s->freed_large = pheap_alloc(s->h, 100000);
    for (unsigned k = 0; k < NKEEP; k++) {
        s->keep[k] = pheap_alloc(s->h, keep_sizes[k]);
        if (!s->keep[k])
            return ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg()), -1;
        s->len[k] = keep_sizes[k];
        unsigned char *p = pheap_direct(s->h, s->keep[k]);
        for (size_t i = 0; i < s->len[k]; i++)
            p[i] = pat(k, i);
    }
    if (!s->freed_small || !s->freed_large || pheap_free(s->h, s->freed_small) ||
        pheap_free(s->h, s->freed_large))
        return ph_test_fail(__FILE__, __LINE__, "setup: %s", pheap_errmsg()), -1;
    s->slot = pheap_direct(s->h, s->keep[5]);
    s->len[5] = 0; /* the slot word is not patterned: tests write it */
    *s->slot = 0;
    pheap_stats(s->h, &s->st);
    return 0;
}

/* Nothing changed since setup: check passes, same live count and bytes,
 * every kept block intact. */
static void unchanged(scene *s, const char *after, int line)
{
    ph_test_unchanged(s->h, &s->st, after, __FILE__, line);
    for (unsigned k = 0; k < NKEEP; k++) {
        const unsigned char *p = pheap_direct(s->h, s->keep[k]);
        for (size_t i = 0; i < s->len[k]; i++)
            if (p[i] != pat(k, i)) {
                ph_test_fail(__FILE__, line, "after %s: block %u byte %zu changed", after, k, i);
                break;
            }
        if (pheap_usable_size(s->h, s->keep[k]) < keep_sizes[k])
            ph_test_fail(__FILE__, line, "after %s: block %u no longer live", after, k);
    }
}

/* pheap_free(off) must fail with `want`, set errno and a message, and
 * change nothing. */
static void refuse(scene *s, pheap_off off, int want, const char *what, int line)
{
    int rc = pheap_free(s->h, off);
    if (rc != want)
        ph_test_fail(__FILE__, line, "free(%s = %llu) -> %d (%s), want %d (%s)", what,
                     (unsigned long long)off, rc, rc ? pheap_errmsg() : "ok", want,
                     pheap_strerror(want));
    else if (pheap_errno() != want || !pheap_errmsg()[0])
        ph_test_fail(__FILE__, line, "free(%s): errno %d, message '%s'", what, pheap_errno(),
                     pheap_errmsg());
    if (pheap_usable_size(s->h, off) != 0)
        ph_test_fail(__FILE__, line, "usable_size(%s) is not 0", what);
    unchanged(s, what, line);
}
#define REFUSE(s, off, want) refuse(s, off, want, #off, __LINE__)

TEST(double_free_small)
{
    scene s;
    REQUIRE(setup(&s, "double_small.heap") == 0);
    REFUSE(&s, s.freed_small, PHEAP_EDOUBLEFREE);
    REFUSE(&s, s.freed_small, PHEAP_EDOUBLEFREE); /* and again */
    /* A small block freed in an earlier life of the heap: the slab bitmap
     * remembers it was allocated. */
    pheap_close(s.h);
    pheap_options o = {.flush = test_flush()};
    REQUIRE_OK(pheap_open(s.path, &o, &s.h));
    s.slot = pheap_direct(s.h, s.keep[5]);
    REFUSE(&s, s.freed_small, PHEAP_EDOUBLEFREE);
    pheap_close(s.h);
}

/* pheap.h promises PHEAP_EDOUBLEFREE for a block that is already free, so a
 * freed extent is required to report it while the process that freed it
 * still has the heap open, even after its neighbours were freed too.  In a
 * later open the extent may have merged into free space that cannot tell
 * "freed" from "never allocated": there either code is accepted. */
TEST(double_free_large)
{
    scene s;
    REQUIRE(setup(&s, "double_large.heap") == 0);
    REFUSE(&s, s.freed_large, PHEAP_EDOUBLEFREE);
    REFUSE(&s, s.freed_large, PHEAP_EDOUBLEFREE);
    pheap_close(s.h);
    pheap_options o = {.flush = test_flush()};
    REQUIRE_OK(pheap_open(s.path, &o, &s.h));
    s.slot = pheap_direct(s.h, s.keep[5]);
    int rc = pheap_free(s.h, s.freed_large);
    printf("double free of a large block freed before a reopen: %d (%s)\n", rc, pheap_strerror(rc));
    if (rc != PHEAP_EDOUBLEFREE && rc != PHEAP_ENOTALLOC)
        ph_test_fail(__FILE__, __LINE__, "reopened: free(freed large) -> %d (%s)", rc,
                     pheap_errmsg());
    unchanged(&s, "double free of a large block after reopen", __LINE__);
    pheap_close(s.h);
}

TEST(double_free_large_after_neighbours_merge)
{
    scene s;
    REQUIRE(setup(&s, "double_merge.heap") == 0);
    pheap_off a = pheap_alloc(s.h, 200000), b = pheap_alloc(s.h, 200000),
              c = pheap_alloc(s.h, 200000);
    REQUIRE(a && b && c);
    REQUIRE_OK(pheap_free(s.h, b));
    REQUIRE_OK(pheap_free(s.h, a));
    REQUIRE_OK(pheap_free(s.h, c));
    REFUSE(&s, a, PHEAP_EDOUBLEFREE);
    REFUSE(&s, b, PHEAP_EDOUBLEFREE);
    REFUSE(&s, c, PHEAP_EDOUBLEFREE);
    pheap_close(s.h);
}

TEST(interior_offsets)
{
    scene s;
    REQUIRE(setup(&s, "interior.heap") == 0);
    REFUSE(&s, s.keep[0] + 8, PHEAP_EINTERIOR);
    REFUSE(&s, s.keep[0] + 1, PHEAP_EINTERIOR);
    REFUSE(&s, s.keep[2] + 512, PHEAP_EINTERIOR);
    REFUSE(&s, s.keep[3] + 4096, PHEAP_EINTERIOR);
    REFUSE(&s, s.keep[3] + 8, PHEAP_EINTERIOR);
    REFUSE(&s, s.keep[4] + 65536, PHEAP_EINTERIOR);
    REFUSE(&s, s.keep[4] + pheap_usable_size(s.h, s.keep[4]) - 8, PHEAP_EINTERIOR);
    pheap_close(s.h);
}

TEST(offsets_outside_the_data_region)
{
    scene s;
    REQUIRE(setup(&s, "range.heap") == 0);
    REFUSE(&s, 0xffffffffffull, PHEAP_ERANGE);
    REFUSE(&s, UINT64_MAX, PHEAP_ERANGE);
    REFUSE(&s, s.st.data_offset - 8, PHEAP_ERANGE);
    REFUSE(&s, 64, PHEAP_ERANGE); /* the header page */
    REFUSE(&s, s.st.size, PHEAP_ERANGE);
    REFUSE(&s, s.st.size + 4096, PHEAP_ERANGE);
    pheap_close(s.h);
}

TEST(space_never_allocated)
{
    scene s;
    REQUIRE(setup(&s, "notalloc.heap") == 0);
    /* The middle and the end of a 16 MiB heap that holds a few hundred KiB. */
    pheap_off mid = s.st.data_offset + (s.st.data_size / 2 & ~(uint64_t)65535);
    for (unsigned k = 0; k < NKEEP; k++) {
        REQUIRE(mid >= s.keep[k] + 400000 || mid + 65536 <= s.keep[k]);
        REQUIRE(s.st.size - 65536 >= s.keep[k] + 400000);
    }
    REFUSE(&s, mid, PHEAP_ENOTALLOC);
    REFUSE(&s, mid + 4096, PHEAP_ENOTALLOC);
    REFUSE(&s, mid + 64, PHEAP_ENOTALLOC);
    REFUSE(&s, s.st.size - 4096, PHEAP_ENOTALLOC);
    pheap_close(s.h);
}

/* The last block of the slab that holds keep[0]: slabs are 64 KiB chunks
 * of the data region (pheap.h), and only a few of its blocks were handed
 * out, from its start. */
TEST(slab_block_never_handed_out)
{
    scene s;
    REQUIRE(setup(&s, "notalloc_small.heap") == 0);
    pheap_class_info ci = {0};
    for (unsigned c = 0; c < pheap_class_count() && ci.block_size != 64; c++)
        REQUIRE_OK(pheap_stats_class(s.h, c, &ci));
    REQUIRE(ci.block_size == 64 && ci.blocks_per_slab > 100);
    pheap_off base = s.keep[0] - (s.keep[0] - s.st.data_offset) % 65536;
    pheap_off last = base + (pheap_off)(ci.blocks_per_slab - 1) * 64;
    REQUIRE(last != s.keep[0] && last != s.keep[1] && last != s.freed_small);
    REFUSE(&s, last, PHEAP_ENOTALLOC);
    pheap_close(s.h);
}

TEST(free_of_null_is_a_no_op)
{
    scene s;
    REQUIRE(setup(&s, "null.heap") == 0);
    CHECK_EQ(pheap_free(s.h, 0), 0);
    *s.slot = 0;
    CHECK_EQ(pheap_free_from(s.h, s.slot), 0);
    CHECK_EQ(*s.slot, 0);
    unchanged(&s, "free(0)", __LINE__);
    pheap_close(s.h);
}

/* pheap_free_from(src) with a bad *src fails like pheap_free and leaves
 * *src as it was. */
static void refuse_from(scene *s, pheap_off *src, pheap_off v, int want, const char *what, int line)
{
    *src = v;
    int rc = pheap_free_from(s->h, src);
    if (rc != want)
        ph_test_fail(__FILE__, line, "free_from(%s) -> %d (%s), want %d", what, rc,
                     rc ? pheap_errmsg() : "ok", want);
    if (*src != v)
        ph_test_fail(__FILE__, line, "free_from(%s) changed *src to %llu", what,
                     (unsigned long long)*src);
    *src = 0;
    unchanged(s, what, line);
}

/* A word of the header page (pheap_direct refuses offsets below the data
 * region; the header is mapped all the same). */
static pheap_off *header_word_of(scene *s)
{
    return (pheap_off *)((char *)pheap_direct(s->h, s->st.data_offset) - s->st.data_offset + 64);
}

TEST(free_from_bad_source)
{
    scene s;
    REQUIRE(setup(&s, "free_from.heap") == 0);
    refuse_from(&s, s.slot, s.freed_small, PHEAP_EDOUBLEFREE, "freed small", __LINE__);
    refuse_from(&s, s.slot, s.freed_large, PHEAP_EDOUBLEFREE, "freed large", __LINE__);
    refuse_from(&s, s.slot, s.keep[3] + 4096, PHEAP_EINTERIOR, "interior", __LINE__);
    refuse_from(&s, s.slot, s.st.size + 64, PHEAP_ERANGE, "outside", __LINE__);
    /* src itself outside the heap: the live block it names stays live. */
    pheap_off outside = s.keep[0];
    CHECK_EQ(pheap_free_from(s.h, &outside), PHEAP_ERANGE);
    CHECK_EQ(outside, s.keep[0]);
    unchanged(&s, "free_from(&stack word)", __LINE__);
    pheap_off *header_word = header_word_of(&s);
    CHECK_EQ(pheap_free_from(s.h, header_word), PHEAP_ERANGE);
    unchanged(&s, "free_from(header word)", __LINE__);
    /* A misaligned source inside the data region: refused (the header does
     * not name the code), nothing freed. */
    *s.slot = s.keep[1];
    CHECK(pheap_free_from(s.h, (pheap_off *)((char *)s.slot + 4)) < 0);
    *s.slot = 0;
    unchanged(&s, "free_from(misaligned word)", __LINE__);
    pheap_close(s.h);
}

TEST(alloc_to_bad_destination)
{
    scene s;
    REQUIRE(setup(&s, "alloc_to.heap") == 0);
    pheap_off on_stack = 12345;
    CHECK_EQ(pheap_alloc_to(s.h, 64, &on_stack), PHEAP_ERANGE);
    CHECK_EQ(on_stack, 12345);
    unchanged(&s, "alloc_to(&stack word, 64)", __LINE__);
    CHECK_EQ(pheap_alloc_to(s.h, 100000, &on_stack), PHEAP_ERANGE);
    unchanged(&s, "alloc_to(&stack word, 100000)", __LINE__);
    pheap_off *header_word = header_word_of(&s);
    uint64_t before = *header_word;
    CHECK_EQ(pheap_alloc_to(s.h, 64, header_word), PHEAP_ERANGE);
    CHECK_EQ(*header_word, before);
    unchanged(&s, "alloc_to(header word)", __LINE__);
    CHECK(pheap_alloc_to(s.h, 64, NULL) < 0);
    unchanged(&s, "alloc_to(NULL)", __LINE__);
    CHECK(pheap_alloc_to(s.h, 64, (pheap_off *)((char *)s.slot + 4)) < 0);
    CHECK_EQ(*s.slot, 0);
    unchanged(&s, "alloc_to(misaligned word)", __LINE__);
    pheap_close(s.h);
}
