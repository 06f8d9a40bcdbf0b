/*
 * model.c -- a long random sequence of alloc, free, alloc_to and free_from
 * on an array of slots that lives in the heap, checked against a model in
 * process memory: no overlap, contents kept, live counts equal, pheap_check
 * clean, all of it again after each of several reopens.  Seeded: the seed
 * is printed and PHEAP_TEST_SEED=N replays a run.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { OPS = 600000 };
#else
enum { OPS = 1000000 };
#endif
enum { NSLOTS = 4096, CHECK_EVERY = 20000, REOPEN_EVERY = 100000 };

typedef struct mslot {
    pheap_off off;  /* 0 = empty */
    size_t size;    /* bytes asked for */
    size_t usable;  /* pheap_usable_size at allocation */
    uint64_t gen;   /* pattern generation */
} mslot;

static mslot model[NSLOTS];
static uint64_t rng;
static pheap *h;
static pheap_off *slots; /* in the heap, rooted as "model.slots" */
static pheap_off slots_off;
static const char *path;
static uint64_t nlive, gen;
static uint64_t counts[4]; /* alloc, alloc_to, free, free_from done */

static uint64_t next(void)
{
    return ph_test_rand(&rng);
}

/* Mostly small, a tail up to 200 KiB. */
static size_t random_size(void)
{
    uint64_t r = next() % 100;
    if (r < 60)
        return 1 + next() % 256;
    if (r < 92)
        return 1 + next() % 2000;
    if (r < 98)
        return 2001 + next() % 30000;
    return 32769 + next() % (200 * 1024 - 32768);
}

#define FAILED(...) (ph_test_fail(__FILE__, __LINE__, __VA_ARGS__), -1)

static int do_alloc(unsigned i, uint64_t op)
{
    size_t size = random_size();
    pheap_off off;
    int to = next() & 1;
    counts[to]++;
    if (to) {
        if (pheap_alloc_to(h, size, &slots[i]))
            return FAILED("op %llu: alloc_to(%zu): %s", (unsigned long long)op, size, pheap_errmsg());
        off = slots[i];
    } else {
        if (!(off = pheap_alloc(h, size)))
            return FAILED("op %llu: alloc(%zu): %s", (unsigned long long)op, size, pheap_errmsg());
        slots[i] = off;
        pheap_persist(h, &slots[i], 8);
    }
    size_t usable = pheap_usable_size(h, off);
    if (usable < size || off % (usable >= 16 ? 16 : 8) ||
        (size > PHEAP_SMALL_MAX && off % 4096))
        return FAILED("op %llu: size %zu at %llu: usable %zu or alignment wrong",
                      (unsigned long long)op, size, (unsigned long long)off, usable);
    model[i] = (mslot){off, size, usable, ++gen};
    ph_test_fill(pheap_direct(h, off), size, gen);
    nlive++;
    return 0;
}

static int do_free(unsigned i, uint64_t op)
{
    mslot *m = &model[i];
    if (slots[i] != m->off)
        return FAILED("op %llu: slot %u holds %llu, model %llu", (unsigned long long)op, i,
                      (unsigned long long)slots[i], (unsigned long long)m->off);
    if (!ph_test_intact(pheap_direct(h, m->off), m->size, m->gen))
        return FAILED("op %llu: slot %u: block %llu (%zu bytes) overwritten", (unsigned long long)op,
                      i, (unsigned long long)m->off, m->size);
    int from = next() & 1;
    counts[2 + from]++;
    if (from) {
        if (pheap_free_from(h, &slots[i]) || slots[i] != 0)
            return FAILED("op %llu: free_from(slot %u): %s", (unsigned long long)op, i, pheap_errmsg());
    } else {
        if (pheap_free(h, m->off))
            return FAILED("op %llu: free(%llu): %s", (unsigned long long)op,
                          (unsigned long long)m->off, pheap_errmsg());
        slots[i] = 0;
        pheap_persist(h, &slots[i], 8);
    }
    *m = (mslot){0};
    nlive--;
    return 0;
}

static int by_off(const void *a, const void *b)
{
    const mslot *x = *(const mslot *const *)a, *y = *(const mslot *const *)b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Everything the model knows, against the heap. */
static int verify_all(const char *when)
{
    static const mslot *sorted[NSLOTS + 1];
    static mslot slots_block;
    unsigned n = 0;
    pheap_check_report r;
    if (pheap_check(h, &r))
        return FAILED("%s: pheap_check: %s", when, r.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != nlive + 1 || r.live_blocks != nlive + 1)
        return FAILED("%s: live blocks %llu (check %llu), model %llu + 1", when,
                      (unsigned long long)st.live_blocks, (unsigned long long)r.live_blocks,
                      (unsigned long long)nlive);
    uint64_t bytes = pheap_usable_size(h, slots_off);
    slots_block = (mslot){slots_off, NSLOTS * 8, bytes, 0};
    sorted[n++] = &slots_block;
    for (unsigned i = 0; i < NSLOTS; i++) {
        const mslot *m = &model[i];
        if (slots[i] != m->off)
            return FAILED("%s: slot %u holds %llu, model %llu", when, i,
                          (unsigned long long)slots[i], (unsigned long long)m->off);
        if (!m->off)
            continue;
        if (pheap_usable_size(h, m->off) != m->usable)
            return FAILED("%s: slot %u: usable %zu, was %zu", when, i,
                          pheap_usable_size(h, m->off), m->usable);
        if (!ph_test_intact(pheap_direct(h, m->off), m->size, m->gen))
            return FAILED("%s: slot %u: block %llu overwritten", when, i, (unsigned long long)m->off);
        bytes += m->usable;
        sorted[n++] = m;
    }
    if (st.live_bytes != bytes)
        return FAILED("%s: live bytes %llu, model %llu", when, (unsigned long long)st.live_bytes,
                      (unsigned long long)bytes);
    qsort(sorted, n, sizeof(sorted[0]), by_off);
    for (unsigned k = 1; k < n; k++)
        if (sorted[k - 1]->off + sorted[k - 1]->usable > sorted[k]->off)
            return FAILED("%s: blocks %llu (+%zu) and %llu overlap", when,
                          (unsigned long long)sorted[k - 1]->off, sorted[k - 1]->usable,
                          (unsigned long long)sorted[k]->off);
    return 0;
}

static int open_heap(unsigned flags)
{
    pheap_options o = {.size = 16u << 20, .max_size = 256u << 20, .flags = flags,
                       .flush = getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE};
    if (pheap_open(path, &o, &h))
        return FAILED("open: %s", pheap_errmsg());
    return 0;
}

TEST(random_operations_against_a_model)
{
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    printf("model: seed %llu (PHEAP_TEST_SEED=%llu replays), %d ops on %d slots\n",
           (unsigned long long)seed, (unsigned long long)seed, OPS, NSLOTS);
    fflush(stdout);
    rng = seed;
    path = ph_test_path("model.heap");
    unlink(path);
    REQUIRE(open_heap(PHEAP_CREATE | PHEAP_EXCL) == 0);
    REQUIRE((slots_off = pheap_alloc(h, NSLOTS * 8)) != 0);
    slots = pheap_direct(h, slots_off);
    memset(slots, 0, NSLOTS * 8);
    pheap_persist(h, slots, NSLOTS * 8);
    REQUIRE_OK(pheap_root_set(h, "model.slots", slots_off));

    double p_alloc = 0.5; /* share of live slots it tends to, changed per phase */
    for (uint64_t op = 1; op <= OPS; op++) {
        if (op % 50000 == 1)
            p_alloc = (double[]){0.5, 0.9, 0.2, 0.7}[(op / 50000) % 4];
        int rc = -1;
        while (rc < 0) { /* a random slot; skipped when the coin says otherwise */
            unsigned i = (unsigned)(next() % NSLOTS);
            double coin = (double)(next() >> 11) / (double)(1ull << 53);
            if (!model[i].off && coin < p_alloc)
                REQUIRE((rc = do_alloc(i, op)) == 0);
            else if (model[i].off && coin >= p_alloc)
                REQUIRE((rc = do_free(i, op)) == 0);
        }
        if (op % CHECK_EVERY == 0) {
            char when[64];
            snprintf(when, sizeof(when), "after op %llu", (unsigned long long)op);
            REQUIRE(verify_all(when) == 0);
        }
        if (op % REOPEN_EVERY == 0) {
            REQUIRE_OK(pheap_close(h));
            REQUIRE(open_heap(0) == 0);
            REQUIRE_EQ(pheap_root_get(h, "model.slots"), slots_off);
            slots = pheap_direct(h, slots_off);
            char when[64];
            snprintf(when, sizeof(when), "reopen after op %llu", (unsigned long long)op);
            REQUIRE(verify_all(when) == 0);
        }
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    printf("model: %llu alloc, %llu alloc_to, %llu free, %llu free_from; end with %llu live "
           "blocks, %llu live bytes, heap %llu bytes, fragmentation %.2f\n",
           (unsigned long long)counts[0], (unsigned long long)counts[1],
           (unsigned long long)counts[2], (unsigned long long)counts[3],
           (unsigned long long)st.live_blocks, (unsigned long long)st.live_bytes,
           (unsigned long long)st.size, st.fragmentation);
    for (unsigned i = 0; i < NSLOTS; i++)
        if (model[i].off)
            REQUIRE(do_free(i, OPS + 1) == 0);
    REQUIRE(verify_all("after freeing everything") == 0);
    REQUIRE_OK(pheap_root_set(h, "model.slots", 0));
    REQUIRE_OK(pheap_free(h, slots_off));
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(st.live_bytes, 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
}
