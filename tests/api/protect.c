/*
 * protect.c -- metadata out of the program's reach (DESIGN 2.6, 4.5):
 * stray stores into every metadata region and into the blocks of the data
 * region that hold pheap's own metadata trap; Poseidon's overflow attack
 * (writing past either end of a block, then freeing it, then allocating
 * more) leaves the allocator intact; the program's calls refuse to free or
 * write through a metadata block; PHEAP_PROTECT=off turns it all off.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"
#include "heap/heap.h"
#include "traps.h"

#define MiB (1024u * 1024u)
#define STRAYS 1000 /* stray stores per region */

/* A heap with something in every metadata structure: slabs, large blocks,
 * roots, names (several directory segments), a transaction. */
static pheap *busy_heap(const char *path, pheap_off *seg)
{
    pheap *h = ph_test_create(path, 16 * MiB);
    if (!h)
        return NULL;
    for (unsigned i = 0; i < 200; i++)
        if (!pheap_alloc(h, 16 + i * 8) || !pheap_alloc(h, 20000 + i))
            return NULL;
    if (pheap_root_set(h, "list", pheap_alloc(h, 64)) != 0)
        return NULL;
    char name[32];
    for (unsigned i = 0; i < 3000; i++) {
        snprintf(name, sizeof(name), "object-%u", i);
        if (!pheap_alloc_named(h, name, 32))
            return NULL;
    }
    pheap_off b = pheap_alloc(h, 4096);
    if (!b || pheap_tx_begin(h) != 0 || pheap_tx_add(h, pheap_direct(h, b), 4096) != 0 ||
        pheap_tx_commit(h) != 0)
        return NULL;
    *seg = first_segment(h, path);
    return h;
}

TEST(stray_stores_into_metadata_trap)
{
    const char *path = ph_test_path("stray.heap");
    pheap_off seg = 0;
    pheap *h = busy_heap(path, &seg);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_ALIAS);
    CHECK(strcmp(pheap_protect_name(st.protection), "alias") == 0);
    CHECK(st.guarded_blocks >= 1); /* a directory segment */
    REQUIRE(seg >= st.data_offset);
    char *view = view_of(h);
    REQUIRE(view);
    uint64_t seed = 42;
    region_strays(path, view, st.data_offset, STRAYS, &seed);
    /* A directory segment in the data region: its whole pages. */
    unsigned missed = strays(view, seg, 4 * PH_PAGE_SIZE, STRAYS, &seed);
    CHECK_EQ(missed, 0);
    /* The program's own blocks stay writable, of course. */
    pheap_off mine = pheap_alloc(h, 100);
    CHECK_EQ(store_traps(view + mine, 1), 0);
    REQUIRE_OK(pheap_check(h, NULL));
    struct pheap_stats before;
    REQUIRE_OK(pheap_stats(h, &before));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.live_blocks, before.live_blocks);
    CHECK_EQ(st.names, 3000);
    CHECK_EQ(st.guarded_blocks, before.guarded_blocks); /* guarded again at open */
    CHECK(pheap_lookup(h, "object-1234") != 0);
    pheap_close(h);
}

/* The test above can fail: without protection the same stores land. */
TEST(without_protection_stray_stores_land)
{
    const char *path = ph_test_path("unprotected.heap");
    pheap *h = ph_test_create(path, 4 * MiB);
    REQUIRE(h);
    pheap_close(h);
    pheap_options o = {.protect = PHEAP_PROTECT_OFF};
    h = ph_test_open(path, &o);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_OFF);
    char *view = view_of(h);
    uint64_t roots = ph_test_region_offset(path, PH_REGION_ROOTS);
    CHECK_EQ(store_traps(view + roots + 5 * 128 + 64, 'x'), 0); /* a free root's name: harmless */
    pheap_close(h);
    setenv("PHEAP_PROTECT", "off", 1);
    h = ph_test_open(path, NULL);
    unsetenv("PHEAP_PROTECT");
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_OFF);
    pheap_close(h);
    /* The option wins over the environment. */
    setenv("PHEAP_PROTECT", "off", 1);
    o.protect = PHEAP_PROTECT_ALIAS;
    h = ph_test_open(path, &o);
    unsetenv("PHEAP_PROTECT");
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_ALIAS);
    pheap_close(h);
}

TEST(protection_options_and_kinds)
{
    const char *path = ph_test_path("kinds.heap");
    pheap *h = ph_test_create(path, 4 * MiB);
    REQUIRE(h);
    pheap_close(h);
    pheap_options o = {.protect = PHEAP_PROTECT_READONLY};
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    /* PHEAP_PROTECT_KEYS: api_protect_keys. */
    setenv("PHEAP_PROTECT", "sometimes", 1);
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "PHEAP_PROTECT") != NULL);
    unsetenv("PHEAP_PROTECT");
    o = (pheap_options){.flags = PHEAP_RDONLY};
    h = ph_test_open(path, &o);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_READONLY);
    pheap_close(h);
    o = (pheap_options){.flags = PHEAP_SNAPSHOT}; /* reports what read-write opens use */
    h = ph_test_open(path, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_ALIAS);
    pheap_close(h);
    o.protect = PHEAP_PROTECT_OFF;
    h = ph_test_open(path, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_OFF);
    pheap_close(h);
    CHECK(strcmp(pheap_protect_name(99), "unknown") == 0);
}

/* Poseidon's attack: overflow and underflow of a block, then free it, then
 * allocate more.  No block carries a header, so only the neighbours the
 * stores reach change; the allocator's state does not. */
static void overflow_attack(size_t size, unsigned n)
{
    const char *path = ph_test_path("overflow.heap");
    pheap *h = ph_test_create(path, 32 * MiB);
    REQUIRE(h);
    pheap_off *b = calloc(n, sizeof(*b));
    REQUIRE(b);
    for (unsigned i = 0; i < n; i++) {
        REQUIRE((b[i] = pheap_alloc(h, size)) != 0);
        memset(pheap_direct(h, b[i]), (int)(i & 0x7f) + 1, pheap_usable_size(h, b[i]));
    }
    /* Victims in the middle, a neighbour on each side. */
    for (unsigned v = 2; v + 2 < n; v += 4) {
        size_t usable = pheap_usable_size(h, b[v]);
        char *p = pheap_direct(h, b[v]);
        memset(p + usable, 0xee, 256 < usable ? 256 : usable); /* past the end */
        memset(p - 64, 0xdd, 64);                             /* before the start */
        REQUIRE_OK(pheap_free(h, b[v]));
        b[v] = 0;
    }
    for (unsigned i = 0; i < 2 * n; i++)
        REQUIRE(pheap_alloc(h, size) != 0);
    REQUIRE_OK(pheap_check(h, NULL));
    /* Blocks no store reached keep their bytes. */
    for (unsigned i = 0; i < n; i++) {
        if (!b[i] || i % 4 == 1 || i % 4 == 3)
            continue;
        const unsigned char *p = pheap_direct(h, b[i]);
        for (size_t k = 0; k < pheap_usable_size(h, b[i]); k++)
            if (p[k] != (i & 0x7f) + 1) {
                ph_test_fail(__FILE__, __LINE__, "block %u byte %zu changed", i, k);
                break;
            }
    }
    /* Every block is still freeable once, and only once. */
    for (unsigned i = 0; i < n; i++)
        if (b[i]) {
            REQUIRE_OK(pheap_free(h, b[i]));
            CHECK_EQ(pheap_free(h, b[i]), PHEAP_EDOUBLEFREE);
        }
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
    free(b);
}

TEST(overflow_attack_small_blocks)
{
    overflow_attack(64, 400);
    overflow_attack(1000, 200);
}

TEST(overflow_attack_large_blocks)
{
    overflow_attack(100000, 40);
}

/* Underflow of the first block of the data region reaches metadata: it
 * traps. */
TEST(underflow_below_the_data_region_traps)
{
    const char *path = ph_test_path("underflow.heap");
    pheap *h = ph_test_create(path, 4 * MiB);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    char *first = pheap_direct(h, st.data_offset);
    CHECK_EQ(store_traps(first - 1, 1), 1);
    CHECK_EQ(store_traps(first - PH_PAGE_SIZE, 1), 1);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* The program's calls never free a metadata block nor write through one. */
TEST(calls_refuse_metadata_blocks)
{
    const char *path = ph_test_path("refuse.heap");
    pheap_off seg = 0;
    pheap *h = busy_heap(path, &seg);
    REQUIRE(h);
    struct pheap_stats before, after;
    REQUIRE_OK(pheap_stats(h, &before));
    CHECK_EQ(pheap_free(h, seg), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "metadata") != NULL);
    pheap_off *w = pheap_direct(h, seg + 64);
    CHECK_EQ(pheap_alloc_to(h, 64, w), PHEAP_EINVAL);
    CHECK_EQ(pheap_free_from(h, w), PHEAP_EINVAL);
    /* A word of the program's that names a metadata block. */
    pheap_off *mine = pheap_direct(h, pheap_alloc(h, 8));
    REQUIRE(mine);
    *mine = seg;
    CHECK_EQ(pheap_free_from(h, mine), PHEAP_EINVAL);
    CHECK_EQ(*mine, seg);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_tx_add(h, pheap_direct(h, seg), 64), PHEAP_EINVAL);
    REQUIRE_OK(pheap_tx_abort(h));
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_tx_free(h, seg), PHEAP_EINVAL);
    REQUIRE_OK(pheap_tx_abort(h));
    REQUIRE_OK(pheap_stats(h, &after));
    CHECK_EQ(after.live_blocks, before.live_blocks + 1);
    CHECK_EQ(after.names, before.names);
    REQUIRE_OK(pheap_check(h, NULL));
    CHECK(pheap_lookup(h, "object-7") != 0);
    pheap_close(h);
}

/* A freed segment's pages are the program's again: a rebuild frees the
 * old segment, and a block later allocated there is writable. */
TEST(freed_metadata_blocks_are_writable_again)
{
    const char *path = ph_test_path("reuse.heap");
    pheap *h = ph_test_create(path, 16 * MiB);
    REQUIRE(h);
    char name[32];
    for (unsigned i = 0; i < 4000; i++) { /* grows and splits: old segments freed */
        snprintf(name, sizeof(name), "n%u", i);
        REQUIRE(pheap_alloc_named(h, name, 8) != 0);
    }
    for (unsigned i = 0; i < 4000; i++) {
        snprintf(name, sizeof(name), "n%u", i);
        REQUIRE_OK(pheap_free_named(h, name));
    }
    char *view = view_of(h);
    for (unsigned i = 0; i < 200; i++) {
        pheap_off b = pheap_alloc(h, 20000 + 4096 * (i % 8));
        REQUIRE(b);
        if (store_traps(view + b + 8192, 1) != 0) {
            ph_test_fail(__FILE__, __LINE__, "a new block at %llu is not writable",
                         (unsigned long long)b);
            break;
        }
        memset(view + b, 7, 20000);
    }
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* Simulated heaps are protected when asked: the working copy is shared by
 * both views, and what the program stores and flushes through its view is
 * what a crash image holds. */
TEST(simulated_heap_is_protected)
{
    const char *path = ph_test_path("sim.heap");
    pheap_options c = {.size = 4 * MiB, .max_size = 64 * MiB, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(path, &c);
    REQUIRE(h);
    pheap_close(h);
    pheap_options o = {.flags = PHEAP_SIMULATE};
    h = ph_test_open(path, &o); /* by default a simulated heap is not protected */
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_OFF);
    pheap_close(h);
    o.protect = PHEAP_PROTECT_ALIAS;
    h = ph_test_open(path, &o);
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_ALIAS);
    char *view = view_of(h);
    CHECK_EQ(store_traps(view + ph_test_region_offset(path, PH_REGION_LANES) + 100, 1), 1);
    pheap_off b = pheap_alloc(h, 5000000); /* growth: both views */
    REQUIRE(b);
    memset(pheap_direct(h, b), 0x5a, 5000000);
    pheap_persist(h, pheap_direct(h, b), 5000000);
    REQUIRE_OK(pheap_root_set(h, "big", b));
    const char *img = ph_test_path("sim.image");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    h = ph_test_open(img, NULL);
    REQUIRE(h);
    REQUIRE_EQ(pheap_root_get(h, "big"), b);
    const unsigned char *p = pheap_direct(h, b);
    CHECK(p[0] == 0x5a && p[4999999] == 0x5a);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* Growth maps the new space in both views, data writable and metadata
 * still read-only; every flush back end takes the program's addresses. */
TEST(growth_and_flush_back_ends)
{
    static const unsigned kinds[] = {PHEAP_FLUSH_MSYNC, PHEAP_FLUSH_NONE, PHEAP_FLUSH_AUTO};
    for (unsigned k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        const char *path = ph_test_path("grow.heap");
        unlink(path);
        pheap_options c = {.size = 4 * MiB, .max_size = 128 * MiB, .flush = kinds[k],
                           .flags = PHEAP_CREATE | PHEAP_EXCL};
        pheap *h = ph_test_open(path, &c);
        REQUIRE(h);
        pheap_off big = pheap_alloc(h, 40 * MiB); /* beyond the first size: growth */
        REQUIRE(big);
        char *p = pheap_direct(h, big);
        memset(p, 0x3c, 40 * MiB);
        pheap_persist(h, p, 40 * MiB);
        REQUIRE_OK(pheap_root_set(h, "big", big));
        char name[32];
        for (unsigned i = 0; i < 2000; i++) { /* segments, some in the grown space */
            snprintf(name, sizeof(name), "g%u", i);
            REQUIRE(pheap_alloc_named(h, name, 16) != 0);
        }
        struct pheap_stats st;
        REQUIRE_OK(pheap_stats(h, &st));
        CHECK(st.guarded_blocks >= 1);
        char *view = view_of(h);
        CHECK_EQ(store_traps(view + ph_test_region_offset(path, PH_REGION_SLABS) + 64, 1), 1);
        CHECK_EQ(store_traps(p + 40 * MiB - 1, 0x3c), 0); /* shared: the same byte again */
        REQUIRE_OK(pheap_check(h, NULL));
        REQUIRE_OK(pheap_close(h));
        h = ph_test_open(path, NULL);
        REQUIRE(h);
        REQUIRE_EQ(pheap_root_get(h, "big"), big);
        const unsigned char *q = pheap_direct(h, big);
        CHECK(q[0] == 0x3c && q[40 * MiB - 1] == 0x3c);
        CHECK(pheap_lookup(h, "g1999") != 0);
        REQUIRE_OK(pheap_check(h, NULL));
        pheap_close(h);
    }
}

/* ---- a program's use after free never reaches pheap's own blocks --------
 * Each case frees a block of the program's while a call still holds it (an
 * open transaction's range, a FREE record, a name, an initialiser's
 * destination), then the block becomes the first name-directory segment;
 * when the call goes on, it must leave the segment alone. */

#define SEG_BYTES 20480 /* a first segment: 256 home lines */

static void *make_first_name(void *arg)
{
    return (void *)(uintptr_t)(pheap_alloc_named(arg, "first", 16) != 0);
}

/* Makes the first segment from another thread (this one may be in a
 * transaction); 1 if it took the block at `b`. */
static int segment_takes(pheap *h, pheap_off b)
{
    pthread_t t;
    void *ok = NULL;
    if (pthread_create(&t, NULL, make_first_name, h) != 0 || pthread_join(t, &ok) != 0 || !ok)
        return 0;
    return ph_space_guarded_overlap(&h->sp, b, 1);
}

/* A new heap with one block of a first segment's size at *b. */
static pheap *heap_with_block(const char *path, pheap_off *b)
{
    pheap *h = ph_test_create(path, 8 * MiB);
    if (h && !(*b = pheap_alloc(h, SEG_BYTES))) {
        pheap_close(h);
        h = NULL;
    }
    return h;
}

/* The segment intact: names work, check passes, and so does a reopen. */
static void directory_intact(pheap *h, const char *path)
{
    CHECK(pheap_lookup(h, "first") != 0);
    CHECK(pheap_alloc_named(h, "second", 16) != 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    h = ph_test_open(path, NULL);
    REQUIRE(h);
    CHECK(pheap_lookup(h, "second") != 0);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(abort_never_restores_over_a_segment)
{
    const char *path = ph_test_path("uaf-undo.heap");
    pheap_off b;
    pheap *h = heap_with_block(path, &b);
    REQUIRE(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, pheap_direct(h, b), 4096));
    REQUIRE_OK(pheap_free(h, b)); /* the program's bug */
    REQUIRE(segment_takes(h, b));
    REQUIRE_OK(pheap_tx_abort(h));
    directory_intact(h, path);
}

TEST(commit_never_writes_into_a_segment)
{
    const char *path = ph_test_path("uaf-redo.heap");
    pheap_off b;
    pheap *h = heap_with_block(path, &b);
    REQUIRE(h);
    char junk[64];
    memset(junk, 0x6b, sizeof(junk));
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_write(h, pheap_direct(h, b), junk, sizeof(junk)));
    REQUIRE_OK(pheap_free(h, b));
    REQUIRE(segment_takes(h, b));
    REQUIRE_OK(pheap_tx_commit(h));
    directory_intact(h, path);
}

TEST(commit_never_frees_a_segment)
{
    const char *path = ph_test_path("uaf-free.heap");
    pheap_off b;
    pheap *h = heap_with_block(path, &b);
    REQUIRE(h);
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_free(h, b));
    REQUIRE_OK(pheap_free(h, b)); /* freed twice: once now, once at commit */
    REQUIRE(segment_takes(h, b));
    REQUIRE_OK(pheap_tx_commit(h));
    CHECK(ph_space_guarded_overlap(&h->sp, b, 1));
    CHECK(pheap_alloc(h, SEG_BYTES) != b);
    directory_intact(h, path);
}

TEST(free_named_never_frees_a_segment)
{
    const char *path = ph_test_path("uaf-named.heap");
    pheap *h = ph_test_create(path, 8 * MiB);
    REQUIRE(h);
    pheap_off a = pheap_alloc_named(h, "a", SEG_BYTES); /* also makes the first segment */
    REQUIRE(a);
    REQUIRE_OK(pheap_free(h, a)); /* the program's bug: the name stays */
    char name[32];
    /* Names until a rebuild puts a segment where a was. */
    for (unsigned i = 0; i < 400 && !ph_space_guarded_overlap(&h->sp, a, 1); i++) {
        snprintf(name, sizeof(name), "n%u", i);
        REQUIRE(pheap_alloc_named(h, name, 16) != 0);
        if (i % 2)
            REQUIRE_OK(pheap_free_named(h, name));
    }
    REQUIRE(ph_space_guarded_overlap(&h->sp, a, 1));
    struct pheap_stats before, after;
    REQUIRE_OK(pheap_stats(h, &before));
    CHECK_EQ(pheap_free_named(h, "a"), PHEAP_ENOTLIVE); /* the name alone goes */
    CHECK_EQ(pheap_lookup(h, "a"), 0);
    REQUIRE_OK(pheap_stats(h, &after));
    CHECK_EQ(after.guarded_blocks, before.guarded_blocks);
    CHECK(ph_space_guarded_overlap(&h->sp, a, 1));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

static pheap_off holder;

static int free_the_holder(pheap *h, void *block, size_t usable, void *arg)
{
    (void)block;
    (void)usable;
    (void)arg;
    pheap_free(h, holder); /* the program's bug: the destination's own block */
    return pheap_alloc_named(h, "first", 16) ? 0 : -1;
}

TEST(initialiser_cannot_make_the_destination_a_segment)
{
    const char *path = ph_test_path("uaf-dest.heap");
    pheap *h = ph_test_create(path, 8 * MiB);
    REQUIRE(h);
    holder = pheap_alloc(h, SEG_BYTES);
    REQUIRE(holder);
    pheap_off *dest = pheap_direct(h, holder);
    int rc = pheap_alloc_to_init(h, 64, dest, 0, free_the_holder, NULL);
    REQUIRE(ph_space_guarded_overlap(&h->sp, holder, 1)); /* the case happened */
    CHECK_EQ(rc, PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "destination") != NULL);
    directory_intact(h, path);
}

/* The same in GC mode, where the allocation stores into the destination
 * word without a log entry: the block goes back, nothing is stored. */
TEST(initialiser_cannot_make_the_destination_a_segment_gc)
{
    const char *path = ph_test_path("uaf-dest-gc.heap");
    pheap *h = ph_test_create_mode(path, 8 * MiB, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(h);
    holder = pheap_alloc(h, SEG_BYTES);
    REQUIRE(holder);
    pheap_off *dest = pheap_direct(h, holder);
    int rc = pheap_alloc_to_init(h, 64, dest, 0, free_the_holder, NULL);
    REQUIRE(ph_space_guarded_overlap(&h->sp, holder, 1)); /* the case happened */
    CHECK_EQ(rc, PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "destination") != NULL);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.live_blocks, 2); /* the segment and the name's block: the new one went back */
    directory_intact(h, path);
}
