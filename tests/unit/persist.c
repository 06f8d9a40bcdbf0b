/*
 * persist.c -- the persistence layer's counters, checked exactly for small
 * known sequences on every back end this machine offers, and its
 * non-temporal word store on each.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "heap/heap.h"

typedef struct counts {
    uint64_t flushes, fences, reflushes;
} counts;

static counts now(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return (counts){st.flushes, st.fences, st.reflushes};
}

#define CHECK_DELTA(h, before, f, n, r)                                                \
    do {                                                                               \
        counts after_ = now(h);                                                        \
        CHECK_EQ(after_.flushes - (before).flushes, (f));                              \
        CHECK_EQ(after_.fences - (before).fences, (n));                                \
        CHECK_EQ(after_.reflushes - (before).reflushes, (r));                          \
    } while (0)

static pheap *open_kind(unsigned kind, int *skipped)
{
    const char *path = ph_test_path("persist.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE, .flush = kind};
    if (kind == PHEAP_FLUSH_SIM) {
        o.flags |= PHEAP_SIMULATE;
        o.flush = 0;
    }
    pheap *h = NULL;
    int rc = pheap_open(path, &o, &h);
    *skipped = rc == PHEAP_ENOTSUP;
    if (rc && !*skipped)
        ph_test_fail(__FILE__, __LINE__, "open kind %u: %s", kind, pheap_errmsg());
    return h;
}

static void *thread_flush(void *arg)
{
    pheap *h = arg;
    struct pheap_stats st;
    pheap_stats(h, &st);
    char *p = pheap_direct(h, st.data_offset + 4096);
    p[0] = 1;
    pheap_flush(h, p, 1);
    pheap_flush(h, p, 1);
    pheap_drain(h);
    return NULL;
}

static void sequences(unsigned kind)
{
    int skipped;
    pheap *h = open_kind(kind, &skipped);
    if (skipped) {
        fprintf(stderr, "  flush kind %s not available here\n", pheap_flush_name(kind));
        return;
    }
    REQUIRE(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.flush, kind);
    /* Opening read-write persisted the state line once. */
    CHECK_EQ(st.flushes, 1);
    CHECK_EQ(st.fences, 1);
    CHECK_EQ(st.reflushes, 0);

    char *a = pheap_direct(h, st.data_offset);
    REQUIRE(a);
    counts c = now(h);
    a[0] = 1;
    pheap_persist(h, a, 8);
    CHECK_DELTA(h, c, 1, 1, 0);

    c = now(h); /* same line twice in one batch (after two empty batches) */
    pheap_drain(h);
    pheap_drain(h);
    pheap_flush(h, a, 8);
    pheap_flush(h, a + 8, 8);
    pheap_drain(h);
    CHECK_DELTA(h, c, 2, 3, 1);

    c = now(h); /* again in the batch right after: still a reflush */
    pheap_persist(h, a, 8);
    CHECK_DELTA(h, c, 1, 1, 1);

    c = now(h); /* two fences in between: no longer a reflush */
    pheap_drain(h);
    pheap_drain(h);
    pheap_persist(h, a, 8);
    CHECK_DELTA(h, c, 1, 3, 0);

    c = now(h); /* unaligned range over three lines */
    pheap_flush(h, a + 200, 130);
    pheap_drain(h);
    CHECK_DELTA(h, c, 3, 1, 0);

    c = now(h); /* different lines never count as reflushes */
    for (int i = 0; i < 8; i++)
        pheap_flush(h, a + 4096 + 64 * i, 64);
    pheap_drain(h);
    CHECK_DELTA(h, c, 8, 1, 0);

    c = now(h); /* ranges outside the heap are ignored */
    char local[64];
    pheap_flush(h, local, sizeof(local));
    CHECK_DELTA(h, c, 0, 0, 0);

    c = now(h); /* a non-temporal store writes its word and counts as a flush */
    ph_persist *ps = &h->sp.persist;
    ph_pctx *pc = ph_heap_pctx(h);
    uint64_t *w = pheap_direct(h, st.data_offset + 8192);
    ph_persist_store_nt(ps, pc, w, 0x1234567887654321ull);
    CHECK_EQ(*w, 0x1234567887654321ull);
    ph_persist_store_nt(ps, pc, w + 1, 7); /* same line, same batch */
    ph_persist_fence(ps, pc);
    CHECK_EQ(w[1], 7);
    CHECK_DELTA(h, c, 2, 1, 1);

    c = now(h); /* two words of one line in one store: one flush */
    ph_persist_store_nt_words(ps, pc, w + 64, (const uint64_t[2]){11, 12}, 2);
    ph_persist_fence(ps, pc);
    CHECK(w[64] == 11 && w[65] == 12);
    CHECK_DELTA(h, c, 1, 1, 0);

    c = now(h); /* batches are per thread; an exited thread's counts remain */
    pthread_t t;
    pthread_create(&t, NULL, thread_flush, h);
    pthread_join(t, NULL);
    CHECK_DELTA(h, c, 2, 1, 1);

    REQUIRE_OK(pheap_close(h));
}

TEST(counts_none) { sequences(PHEAP_FLUSH_NONE); }
TEST(counts_msync) { sequences(PHEAP_FLUSH_MSYNC); }
TEST(counts_clwb) { sequences(PHEAP_FLUSH_CLWB); }
TEST(counts_clflushopt) { sequences(PHEAP_FLUSH_CLFLUSHOPT); }
TEST(counts_clflush) { sequences(PHEAP_FLUSH_CLFLUSH); }
TEST(counts_sim) { sequences(PHEAP_FLUSH_SIM); }

TEST(env_override)
{
    const char *path = ph_test_path("env.heap");
    unlink(path);
    setenv("PHEAP_FLUSH", "none", 1);
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.flush, PHEAP_FLUSH_NONE);
    pheap_close(h);
    o.flush = PHEAP_FLUSH_MSYNC; /* the option wins over the environment */
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.flush, PHEAP_FLUSH_MSYNC);
    pheap_close(h);
    setenv("PHEAP_FLUSH", "bogus", 1);
    o.flush = 0;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "PHEAP_FLUSH") != NULL);
    unsetenv("PHEAP_FLUSH");
    /* auto on a file that is not on DAX means msync */
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.flush, st.dax ? st.flush : PHEAP_FLUSH_MSYNC);
    CHECK(strcmp(pheap_flush_name(PHEAP_FLUSH_CLWB), "clwb") == 0);
    pheap_close(h);
}
