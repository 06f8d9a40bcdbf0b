/*
 * morph.c -- slab morphing: phases of one block size each, most blocks
 * freed between phases (fragbench), must reuse the slabs the earlier
 * phases left nearly empty instead of growing the heap; every block keeps
 * its contents through morphs, reopens and frees of every kind, and bad
 * frees of old blocks and of the space they pin are refused.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

typedef struct obj {
    pheap_off off;
    uint32_t size, id;
} obj;

static void fill(pheap *h, const obj *o)
{
    uint8_t *p = pheap_direct(h, o->off);
    for (uint32_t k = 0; k < o->size; k++)
        p[k] = (uint8_t)(o->id * 31 + k);
}

static void verify(pheap *h, const obj *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *p = pheap_direct(h, v[i].off);
        for (uint32_t k = 0; k < v[i].size; k++)
            if (p[k] != (uint8_t)(v[i].id * 31 + k))
                ph_test_fail(__FILE__, __LINE__, "block %u at %llu: byte %u changed", v[i].id,
                             (unsigned long long)v[i].off, k);
    }
}

static void expect_live(pheap *h, size_t n)
{
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.live_blocks, n);
    pheap_check_report rep;
    if (pheap_check(h, &rep) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check: %s", rep.first_error);
    CHECK_EQ(rep.live_blocks, n);
}

/* Frees about pct % of v[0..*n) at random, keeping the order of the rest. */
static void free_most(pheap *h, obj *v, size_t *n, unsigned pct, uint64_t *rng)
{
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
        if ((*rng >> 33) % 100 < pct)
            REQUIRE_OK(pheap_free(h, v[i].off));
        else
            v[kept++] = v[i];
    }
    *n = kept;
}

static const uint32_t phase_size[] = {100, 2000, 480, 1430, 195, 955, 1810, 765};
#define SIZES (sizeof(phase_size) / sizeof(phase_size[0]))
#define PHASES (2 * SIZES) /* the sizes twice: the second pass finds the heap in use */
#define LIVE (8u << 20)

/* fragbench in small: every block's contents and the live-block count
 * checked at the end of every phase and after a reopen; once the live
 * bytes stop growing, the heap does too -- the second pass over the sizes
 * never grows the data region and holds about as many slabs as the first. */
TEST(phases_reuse_stranded_slabs)
{
    const char *path = ph_test_path("morph.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    size_t cap = 2 * LIVE / 100 + 16, n = 0;
    obj *v = calloc(cap, sizeof(*v));
    REQUIRE(v);
    uint64_t rng = 7, live = 0, heap_at[PHASES] = {0}, data_at[PHASES] = {0};
    uint32_t id = 0;
    for (unsigned ph = 0; ph < PHASES; ph++) {
        while (live < LIVE) {
            REQUIRE(n < cap);
            obj *x = &v[n];
            x->size = phase_size[ph % SIZES];
            x->id = id++;
            x->off = pheap_alloc(h, x->size);
            REQUIRE(x->off);
            fill(h, x);
            live += x->size;
            n++;
        }
        verify(h, v, n);
        expect_live(h, n);
        struct pheap_stats st;
        REQUIRE_OK(pheap_stats(h, &st));
        heap_at[ph] = st.slab_bytes + st.large_bytes;
        data_at[ph] = st.data_size;
        if (ph + 1 < PHASES) {
            free_most(h, v, &n, 90, &rng);
            live = 0;
            for (size_t i = 0; i < n; i++)
                live += v[i].size;
        }
    }
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.slab_morphs > 0);
    uint64_t first = 0, second = 0;
    fprintf(stderr, "  heap after each phase (KiB):");
    for (unsigned ph = 0; ph < PHASES; ph++) {
        fprintf(stderr, " %llu", (unsigned long long)(heap_at[ph] >> 10));
        if (ph < SIZES)
            first = heap_at[ph] > first ? heap_at[ph] : first;
        else
            second = heap_at[ph] > second ? heap_at[ph] : second;
    }
    fprintf(stderr, "; %llu morphs\n", (unsigned long long)st.slab_morphs);
    CHECK_EQ(data_at[PHASES - 1], data_at[SIZES - 1]);
    CHECK(second <= first + first / 4);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    verify(h, v, n);
    expect_live(h, n);
    for (size_t i = 0; i < n; i++)
        REQUIRE_OK(pheap_free(h, v[i].off));
    expect_live(h, 0);
    REQUIRE_OK(pheap_close(h));
    free(v);
    unlink(path);
}

/* The fragbench phases, smaller: returns the slab bytes at the end. */
static uint64_t run_phases(pheap *h, unsigned phases)
{
    size_t cap = 2 * (LIVE / 2) / 100 + 16, n = 0;
    obj *v = calloc(cap, sizeof(*v));
    uint64_t rng = 3, live = 0;
    for (unsigned ph = 0; v && ph < phases; ph++) {
        while (live < LIVE / 2 && n < cap) {
            v[n] = (obj){pheap_alloc(h, phase_size[ph % SIZES]), phase_size[ph % SIZES], (uint32_t)n};
            if (!v[n].off)
                break;
            live += v[n++].size;
        }
        if (ph + 1 < phases) {
            free_most(h, v, &n, 90, &rng);
            live = 0;
            for (size_t i = 0; i < n; i++)
                live += v[i].size;
        }
    }
    free(v);
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.slab_bytes;
}

/* Heaps of format 1.6 open, and never morph: a 1.6 build could not read
 * a morphed slab.  PHEAP_MORPH=0 turns morphing off for one open. */
TEST(older_heaps_and_the_switch_never_morph)
{
    const char *path = ph_test_path("morph-old.heap");
    unlink(path);
    pheap_options o = {.size = 16u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(ph_test_as_format_1_6(path));
    o.flags = 0;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.format_minor, 6);
    CHECK_EQ(st.morphing, 0);
    uint64_t without = run_phases(h, 4);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.slab_morphs, 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);

    setenv("PHEAP_MORPH", "0", 1);
    o.flags = PHEAP_CREATE;
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.morphing, 0);
    CHECK_EQ(run_phases(h, 4), without); /* the same placement as the 1.6 heap's */
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.slab_morphs, 0);
    REQUIRE_OK(pheap_close(h));
    setenv("PHEAP_MORPH", "2", 1);
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EINVAL);
    unsetenv("PHEAP_MORPH");
    unlink(path);
    REQUIRE_OK(pheap_open(path, &o, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.morphing, 1);
    CHECK(run_phases(h, 4) < without);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.slab_morphs > 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}

/* Two slabs of 1024-byte blocks, the first thinned to 8 blocks (kept in
 * old[]), the second to 32, in a thread whose exit returns its cache. */
typedef struct thinning {
    pheap *h;
    pheap_off *old;
    int rc;
} thinning;

static void *thin(void *arg)
{
    thinning *t = arg;
    static pheap_off v[128];
    (void)ph_test_pin_cpu(0);
    for (unsigned i = 0; i < 128 && !t->rc; i++)
        t->rc = (v[i] = pheap_alloc(t->h, 1024)) ? 0 : -1;
    for (unsigned i = 0, k = 0; i < 128 && !t->rc; i++) {
        if (i < 64 && i % 8 == 0)
            t->old[k++] = v[i];
        else if (i < 64 || i % 2)
            t->rc = pheap_free(t->h, v[i]);
    }
    return NULL;
}

/* The first slab then morphs to 512-byte blocks in this thread (on the
 * same CPU: the same arena); its 8 old blocks in old[]. */
static void morph_one(pheap *h, pheap_off old[8])
{
    thinning t = {h, old, 0};
    pthread_t th;
    (void)ph_test_pin_cpu(0);
    REQUIRE(pthread_create(&th, NULL, thin, &t) == 0);
    pthread_join(th, NULL);
    REQUIRE_OK(t.rc);
    for (unsigned i = 0; i < 16; i++)
        REQUIRE(pheap_alloc(h, 512) != 0);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    REQUIRE(st.slab_morphs == 1 && st.old_blocks == 8);
}

/* pheap_gc on a LOG heap traces through old blocks, all of their bytes
 * (a link past the new class's block size), and collects old blocks that
 * no root reaches. */
TEST(gc_traces_and_collects_old_blocks)
{
    const char *path = ph_test_path("morph-gc.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off old[8];
    morph_one(h, old);
    pheap_off a = old[2], b = pheap_alloc(h, 100);
    REQUIRE(b);
    *(pheap_off *)((char *)pheap_direct(h, a) + 1000) = b; /* root -> a (old) -> b */
    REQUIRE_OK(pheap_root_set(h, "r", a));
    pheap_gc_report rep;
    REQUIRE_OK(pheap_gc_ex(h, NULL, &rep));
    CHECK_EQ(pheap_usable_size(h, a), 1024);
    CHECK_EQ(pheap_usable_size(h, b), 112);
    CHECK_EQ(pheap_usable_size(h, old[3]), 0); /* garbage: collected */
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.old_blocks, 1);
    CHECK_EQ(st.live_blocks, 2);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}
