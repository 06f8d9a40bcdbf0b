/*
 * alloc.c -- the allocation calls one at a time: sizes across the classes
 * and the large path, alignment, usable sizes, contents across reopen, bad
 * sizes, a full heap, growth, statistics, the class table, read-only
 * handles and the flush budget of the common alloc/free path.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1ull << 20)

/* These tests need process-crash durability only; a flush back end given
 * in PHEAP_FLUSH still wins (AUTO defers to the environment). */
static unsigned test_flush(void)
{
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

static pheap *create_with(const char *name, uint64_t size, uint64_t max_size, unsigned flush,
                          unsigned flags)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = size, .max_size = max_size,
                       .flags = PHEAP_CREATE | PHEAP_EXCL | flags, .flush = flush};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create %s: %s", path, pheap_errmsg());
    return h;
}

static pheap *create(const char *name, uint64_t size, uint64_t max_size, unsigned flush)
{
    return create_with(name, size, max_size, flush, 0);
}

static pheap *reopen(pheap *h, const char *name, unsigned flags)
{
    pheap_close(h);
    pheap_options o = {.flags = flags, .flush = flags & PHEAP_RDONLY ? 0 : test_flush()};
    h = NULL;
    if (pheap_open(ph_test_path(name), &o, &h))
        ph_test_fail(__FILE__, __LINE__, "reopen %s: %s", name, pheap_errmsg());
    return h;
}

static struct pheap_stats stats(pheap *h)
{
    struct pheap_stats st;
    memset(&st, 0, sizeof(st));
    if (pheap_stats(h, &st))
        ph_test_fail(__FILE__, __LINE__, "pheap_stats: %s", pheap_errmsg());
    return st;
}

/* Byte i of the pattern of `seed`; differs between blocks and positions. */
static unsigned char pat(uint64_t seed, size_t i)
{
    uint64_t x = (seed ^ (i >> 3)) * 0x9e3779b97f4a7c15ull;
    return (unsigned char)((x ^ (x >> 29)) >> (8 * (i & 7)));
}

static void fill(pheap *h, pheap_off off, size_t n, uint64_t seed)
{
    unsigned char *p = pheap_direct(h, off);
    for (size_t i = 0; i < n; i++)
        p[i] = pat(seed, i);
}

/* Index of the first wrong byte, or n when all are right. */
static size_t verify(pheap *h, pheap_off off, size_t n, uint64_t seed)
{
    const unsigned char *p = pheap_direct(h, off);
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(seed, i))
            return i;
    return n;
}

static const size_t sizes[] = {1,     8,     9,     16,     17,         64,         100,
                               1000,  4096,  16384, 16385,  100000,     1u << 20};
enum { NSIZES = sizeof(sizes) / sizeof(sizes[0]) };

TEST(sizes_alignment_and_contents_across_reopen)
{
    pheap *h = create("sizes.heap", 16 * MiB, 0, test_flush());
    REQUIRE(h);
    struct pheap_stats st = stats(h);
    pheap_off off[NSIZES];
    size_t usable[NSIZES];
    for (int i = 0; i < NSIZES; i++) {
        off[i] = pheap_alloc(h, sizes[i]);
        REQUIRE(off[i] != 0);
        usable[i] = pheap_usable_size(h, off[i]);
        if (usable[i] < sizes[i])
            ph_test_fail(__FILE__, __LINE__, "size %zu: usable %zu", sizes[i], usable[i]);
        CHECK(off[i] >= st.data_offset && off[i] + usable[i] <= st.size);
        CHECK(off[i] % 8 == 0);
        if (usable[i] >= 16 && off[i] % 16)
            ph_test_fail(__FILE__, __LINE__, "size %zu: offset %llu not 16-aligned", sizes[i],
                         (unsigned long long)off[i]);
        if (sizes[i] > PHEAP_SMALL_MAX && (off[i] % 4096 || usable[i] % 4096))
            ph_test_fail(__FILE__, __LINE__, "size %zu: extent at %llu, %zu bytes", sizes[i],
                         (unsigned long long)off[i], usable[i]);
        if (sizes[i] <= PHEAP_SMALL_MAX)
            CHECK(usable[i] <= PHEAP_SMALL_MAX);
        fill(h, off[i], usable[i], i + 1);
        pheap_persist(h, pheap_direct(h, off[i]), usable[i]);
    }
    for (int i = 0; i < NSIZES; i++) /* no overlap: every pattern is still whole */
        CHECK_EQ(verify(h, off[i], usable[i], i + 1), usable[i]);
    /* Same request, same class, same usable size. */
    for (int i = 0; i < NSIZES; i++) {
        pheap_off again = pheap_alloc(h, sizes[i]);
        REQUIRE(again != 0 && again != off[i]);
        CHECK_EQ(pheap_usable_size(h, again), usable[i]);
        REQUIRE_OK(pheap_free(h, again));
    }
    REQUIRE_OK(pheap_check(h, NULL));
    h = reopen(h, "sizes.heap", 0);
    REQUIRE(h);
    for (int i = 0; i < NSIZES; i++) {
        CHECK_EQ(pheap_usable_size(h, off[i]), usable[i]);
        CHECK_EQ(verify(h, off[i], usable[i], i + 1), usable[i]);
    }
    REQUIRE_OK(pheap_check(h, NULL));
    for (int i = 0; i < NSIZES; i++)
        REQUIRE_OK(pheap_free(h, off[i]));
    CHECK_EQ(stats(h).live_blocks, 0);
    pheap_close(h);
}

TEST(usable_size_follows_the_class_table)
{
    pheap *h = create("classes.heap", 8 * MiB, 0, test_flush());
    REQUIRE(h);
    unsigned n = pheap_class_count();
    CHECK(n >= 30);
    uint32_t prev = 0;
    for (unsigned c = 0; c < n; c++) {
        pheap_class_info ci;
        REQUIRE_OK(pheap_stats_class(h, c, &ci));
        if (c == 0)
            CHECK_EQ(ci.block_size, 8);
        if (ci.block_size <= prev)
            ph_test_fail(__FILE__, __LINE__, "class %u: %u after %u", c, ci.block_size, prev);
        CHECK(ci.blocks_per_slab >= 1);
        CHECK((uint64_t)ci.blocks_per_slab * ci.block_size <= 65536);
        /* DESIGN 4.3: internal fragmentation at most 20% past the tiny classes. */
        if (prev >= 128 && (ci.block_size - prev) * 5 > ci.block_size)
            ph_test_fail(__FILE__, __LINE__, "class %u: %u after %u wastes > 20%%", c,
                         ci.block_size, prev);
        /* A request of exactly the class size, or one byte past the previous
         * class, gets this class. */
        pheap_off a = pheap_alloc(h, ci.block_size), b = pheap_alloc(h, prev + 1);
        REQUIRE(a && b);
        CHECK_EQ(pheap_usable_size(h, a), ci.block_size);
        CHECK_EQ(pheap_usable_size(h, b), ci.block_size);
        pheap_class_info after;
        REQUIRE_OK(pheap_stats_class(h, c, &after));
        CHECK_EQ(after.live_blocks, ci.live_blocks + 2);
        CHECK(after.slabs >= 1);
        REQUIRE_OK(pheap_free(h, a));
        REQUIRE_OK(pheap_free(h, b));
        prev = ci.block_size;
    }
    CHECK(prev >= PHEAP_SMALL_MAX);
    pheap_class_info ci;
    CHECK_EQ(pheap_stats_class(h, n, &ci), PHEAP_EINVAL);
    CHECK_EQ(pheap_stats_class(h, 0, NULL), PHEAP_EINVAL);
    pheap_close(h);
}

TEST(bad_sizes_fail_cleanly)
{
    pheap *h = create("badsize.heap", 4 * MiB, 8 * MiB, test_flush());
    REQUIRE(h);
    CHECK_EQ(pheap_alloc(h, 0), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    pheap_off slot = pheap_alloc(h, 8);
    REQUIRE(slot);
    *(pheap_off *)pheap_direct(h, slot) = 0;
    CHECK_EQ(pheap_alloc_to(h, 0, pheap_direct(h, slot)), PHEAP_EINVAL);
    const size_t huge[] = {SIZE_MAX, SIZE_MAX - 4095, SIZE_MAX / 2, (size_t)1 << 50,
                           (size_t)1 << 40, 8 * MiB + 1, 64 * MiB};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        CHECK_EQ(pheap_alloc(h, huge[i]), 0);
        if (pheap_errno() != PHEAP_ENOMEM)
            ph_test_fail(__FILE__, __LINE__, "size %zu: errno %d (%s)", huge[i], pheap_errno(),
                         pheap_errmsg());
        CHECK_EQ(pheap_alloc_to(h, huge[i], pheap_direct(h, slot)), PHEAP_ENOMEM);
        CHECK_EQ(*(pheap_off *)pheap_direct(h, slot), 0);
    }
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.live_blocks, 1);
    CHECK(st.size <= 8 * MiB);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* Allocates `size`-byte blocks until the heap is full; returns how many. */
static size_t fill_heap(pheap *h, size_t size, pheap_off *offs, size_t cap)
{
    size_t n = 0;
    while (n < cap && (offs[n] = pheap_alloc(h, size)) != 0)
        n++;
    if (n < cap && pheap_errno() != PHEAP_ENOMEM)
        ph_test_fail(__FILE__, __LINE__, "size %zu: errno %d (%s)", size, pheap_errno(),
                     pheap_errmsg());
    return n;
}

TEST(full_heap_then_free_everything_and_reuse)
{
    pheap *h = create("full.heap", 4 * MiB, 0, test_flush());
    REQUIRE(h);
    size_t cap = 2 * 4 * MiB / 64; /* more than 4 MiB of data can hold */
    pheap_off *offs = calloc(cap, sizeof(*offs));
    REQUIRE(offs);
    static const size_t kinds[] = {64, 1000, 20000};
    for (size_t k = 0; k < 3; k++) {
        size_t n1 = fill_heap(h, kinds[k], offs, cap);
        CHECK(n1 > 0 && n1 < cap);
        struct pheap_stats st = stats(h);
        CHECK_EQ(st.live_blocks, n1);
        CHECK(st.live_bytes >= n1 * kinds[k]);
        CHECK(st.live_bytes <= st.data_size);
        REQUIRE_OK(pheap_check(h, NULL));
        for (size_t i = 0; i < n1; i++)
            REQUIRE_OK(pheap_free(h, offs[i]));
        CHECK_EQ(stats(h).live_blocks, 0);
        size_t n2 = fill_heap(h, kinds[k], offs, cap);
        CHECK(n2 >= n1); /* empty slabs of earlier rounds may be reclaimed too */
        for (size_t i = 0; i < n2; i++)
            REQUIRE_OK(pheap_free(h, offs[i]));
        /* An empty heap serves one block of half its data region, whatever
         * size classes it served before. */
        pheap_off big = pheap_alloc(h, st.data_size / 2);
        if (!big)
            ph_test_fail(__FILE__, __LINE__, "after %zu-byte blocks: %zu bytes: %s", kinds[k],
                         (size_t)(st.data_size / 2), pheap_errmsg());
        REQUIRE_OK(pheap_free(h, big));
    }
    REQUIRE_OK(pheap_check(h, NULL));
    free(offs);
    pheap_close(h);
}

TEST(heap_grows_up_to_max_size)
{
    pheap *h = create("grow.heap", 4 * MiB, 64 * MiB, test_flush());
    REQUIRE(h);
    CHECK_EQ(stats(h).data_size, 4 * MiB);
    enum { N = 400 };
    static pheap_off off[N];
    static size_t len[N];
    for (unsigned i = 0; i < N; i++) { /* ~40 MiB, small and large mixed */
        len[i] = i % 4 == 3 ? 33 : 100 * 1024 + 7 * i;
        off[i] = pheap_alloc(h, len[i]);
        REQUIRE(off[i]);
        fill(h, off[i], len[i], 1000 + i);
    }
    struct pheap_stats st = stats(h);
    CHECK(st.size > 4 * MiB && st.size <= 64 * MiB);
    CHECK(st.data_size == st.size - st.data_offset);
    CHECK_EQ(st.live_blocks, N);
    CHECK(st.live_bytes >= 30 * MiB);
    REQUIRE_OK(pheap_check(h, NULL));
    h = reopen(h, "grow.heap", 0);
    REQUIRE(h);
    CHECK_EQ(stats(h).size, st.size);
    for (unsigned i = 0; i < N; i++)
        CHECK_EQ(verify(h, off[i], len[i], 1000 + i), len[i]);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(stats_track_live_blocks_and_bytes)
{
    pheap *h = create("stats.heap", 8 * MiB, 0, test_flush());
    REQUIRE(h);
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(st.live_bytes, 0);
    CHECK_EQ(st.large_extents, 0);
    CHECK(st.free_bytes > 0 && st.free_bytes <= st.data_size);
    pheap_off off[NSIZES];
    uint64_t bytes = 0, large = 0;
    for (int i = 0; i < NSIZES; i++) {
        REQUIRE((off[i] = pheap_alloc(h, sizes[i])) != 0);
        bytes += pheap_usable_size(h, off[i]);
        large += sizes[i] > PHEAP_SMALL_MAX;
        st = stats(h);
        CHECK_EQ(st.live_blocks, (uint64_t)i + 1);
        CHECK_EQ(st.live_bytes, bytes);
    }
    CHECK_EQ(st.large_extents, large);
    CHECK(st.large_bytes >= 100000 + 16385 + MiB);
    CHECK(st.slabs >= 1 && st.slab_bytes == st.slabs * 65536);
    CHECK(st.free_bytes + st.slab_bytes + st.large_bytes <= st.data_size);
    CHECK(st.largest_free <= st.free_bytes);
    CHECK(st.fragmentation >= 0.0 && st.fragmentation < 1.0);
    pheap_check_report r;
    REQUIRE_OK(pheap_check(h, &r));
    CHECK_EQ(r.errors, 0);
    CHECK_EQ(r.live_blocks, NSIZES);
    CHECK_EQ(r.live_bytes, bytes);
    CHECK_EQ(r.large_extents, large);
    CHECK_EQ(r.slabs, st.slabs);
    CHECK_EQ(r.free_bytes, st.free_bytes);
    for (int i = NSIZES - 1; i >= 0; i--) {
        bytes -= pheap_usable_size(h, off[i]);
        REQUIRE_OK(pheap_free(h, off[i]));
        CHECK_EQ(pheap_usable_size(h, off[i]), 0);
        st = stats(h);
        CHECK_EQ(st.live_blocks, (uint64_t)i);
        CHECK_EQ(st.live_bytes, bytes);
    }
    CHECK_EQ(st.large_extents, 0);
    CHECK_EQ(st.large_bytes, 0);
    /* The counts are rebuilt from metadata at open. */
    pheap_off keep = pheap_alloc(h, 300), keep_large = pheap_alloc(h, 50000);
    REQUIRE(keep && keep_large);
    h = reopen(h, "stats.heap", 0);
    REQUIRE(h);
    st = stats(h);
    CHECK_EQ(st.live_blocks, 2);
    CHECK_EQ(st.live_bytes, pheap_usable_size(h, keep) + pheap_usable_size(h, keep_large));
    CHECK_EQ(st.large_extents, 1);
    pheap_close(h);
}

TEST(read_only_handle_refuses_allocation)
{
    pheap *h = create("ro.heap", 4 * MiB, 0, test_flush());
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 100), slot = pheap_alloc(h, 64);
    REQUIRE(a && slot);
    *(pheap_off *)pheap_direct(h, slot) = a;
    pheap_persist(h, pheap_direct(h, slot), 8);
    size_t usable = pheap_usable_size(h, a);
    h = reopen(h, "ro.heap", PHEAP_RDONLY);
    REQUIRE(h);
    CHECK_EQ(pheap_alloc(h, 100), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERDONLY);
    CHECK_EQ(pheap_free(h, a), PHEAP_ERDONLY);
    pheap_off *slot_p = pheap_direct(h, slot);
    CHECK_EQ(pheap_free_from(h, slot_p), PHEAP_ERDONLY);
    CHECK_EQ(*slot_p, a);
    CHECK_EQ(pheap_usable_size(h, a), usable);
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.live_blocks, 2);
    REQUIRE_OK(pheap_check(h, NULL));
    h = reopen(h, "ro.heap", 0);
    REQUIRE(h);
    CHECK_EQ(pheap_usable_size(h, a), usable);
    CHECK_EQ(stats(h).live_blocks, 2);
    pheap_close(h);
}

/* threadtest's shape: allocate a batch, free it in order, repeat.  With a
 * counting back end (none or the simulator) the counts are exact.  The
 * budget (DESIGN 4.3, 4.4) is one fence per small alloc or free; logged
 * alloc_to / free_from take more fences, and no call reflushes a line. */
static void flush_budget(unsigned flush, unsigned flags, int logged)
{
    pheap *h = create_with("budget.heap", 8 * MiB, 0, flush, flags);
    if (!h)
        return;
    enum { BATCH = 100, ROUNDS = 50, SIZE = 64 };
    pheap_off offs[BATCH], slots_off = pheap_alloc(h, BATCH * sizeof(pheap_off));
    pheap_off *slots = pheap_direct(h, slots_off);
    struct pheap_stats before;
    memset(&before, 0, sizeof(before));
    for (int round = -1; round < ROUNDS && slots; round++) { /* round -1 warms up */
        if (round == 0)
            before = stats(h);
        for (int i = 0; i < BATCH; i++)
            if (logged ? pheap_alloc_to(h, SIZE, &slots[i]) != 0 : !(offs[i] = pheap_alloc(h, SIZE)))
                ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg());
        for (int i = 0; i < BATCH; i++)
            if (logged ? pheap_free_from(h, &slots[i]) : pheap_free(h, offs[i]))
                ph_test_fail(__FILE__, __LINE__, "free: %s", pheap_errmsg());
    }
    struct pheap_stats after = stats(h);
    double ops = 2.0 * BATCH * ROUNDS;
    double fl = (after.flushes - before.flushes) / ops, fe = (after.fences - before.fences) / ops;
    uint64_t re = after.reflushes - before.reflushes;
    printf("flush budget (%s, %s of %d-byte blocks): %.3f flushes, %.3f fences per op, "
           "%llu reflushes in %.0f ops\n", pheap_flush_name(after.flush),
           logged ? "alloc_to/free_from" : "alloc/free", SIZE, fl, fe, (unsigned long long)re, ops);
    if (!logged && fe > 1.0)
        ph_test_fail(__FILE__, __LINE__, "%.3f fences per op (budget 1)", fe);
    CHECK_EQ(re, 0);
    if (pheap_check(h, NULL))
        ph_test_fail(__FILE__, __LINE__, "check: %s", pheap_errmsg());
    pheap_close(h);
}

TEST(flush_budget_of_alloc_and_free)
{
    flush_budget(PHEAP_FLUSH_NONE, 0, 0);
    flush_budget(PHEAP_FLUSH_AUTO, PHEAP_SIMULATE, 0);
}

TEST(no_reflush_in_alloc_to_and_free_from)
{
    flush_budget(PHEAP_FLUSH_NONE, 0, 1);
}
