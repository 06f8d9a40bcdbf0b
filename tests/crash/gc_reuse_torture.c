/*
 * gc_reuse_torture.c -- crash points of a GC heap whose run releases slabs
 * that held allocated blocks at the last clean close, reuses their chunks
 * for large blocks and slabs of other classes, and grows the heap (make
 * torture: about two minutes).  Each image
 * is recovered and judged: the blocks the program linked (and persisted)
 * are live and intact, nothing else is allocated, pheap_check passes, and
 * later allocations do not hand out a kept block.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { KEEP = 24, GARBAGE = 9000, PER_THREAD = 900, NEW = 40 };

typedef struct top {
    pheap_off kept[KEEP];      /* 64-byte blocks kept from the base heap */
    pheap_off fresh[NEW];      /* linked by the run: small of several classes and large */
    uint64_t nfresh;
} top;

static uint64_t fresh_size(unsigned i)
{
    static const uint64_t sizes[] = {64, 256, 100000, 1000, 64, 40000, 16};
    return sizes[i % 7];
}

typedef struct frees {
    pheap *h;
    pheap_off *v;
    unsigned n;
} frees;

static void *free_thread(void *arg)
{
    frees *f = arg;
    for (unsigned i = 0; i < f->n; i++)
        if (pheap_free(f->h, f->v[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "free: %s", pheap_errmsg());
    return NULL; /* the thread's cache goes back to the slabs: empty ones are released */
}

static pheap_off garbage[GARBAGE];

static void workload(pheap *h, uint64_t *marks, unsigned *nmarks)
{
    /* garbage of the last clean close freed by threads that exit */
    for (unsigned t = 0; t < GARBAGE / PER_THREAD; t++) {
        frees f = {h, garbage + t * PER_THREAD, PER_THREAD};
        pthread_t tid;
        if (pthread_create(&tid, NULL, free_thread, &f) != 0) {
            ph_test_fail(__FILE__, __LINE__, "pthread_create");
            return;
        }
        pthread_join(tid, NULL);
    }
    marks[(*nmarks)++] = pheap_sim_fence_count(h);
    top *tp = pheap_direct(h, pheap_root_get(h, "top"));
    for (unsigned i = 0; i < NEW; i++) {
        uint64_t sz = fresh_size(i);
        pheap_off o = pheap_alloc(h, sz);
        if (!o) {
            ph_test_fail(__FILE__, __LINE__, "alloc %llu: %s", (unsigned long long)sz, pheap_errmsg());
            return;
        }
        ph_test_fill(pheap_direct(h, o), sz, 1000 + i);
        pheap_persist(h, pheap_direct(h, o), sz);
        tp->fresh[i] = o;
        pheap_persist(h, &tp->fresh[i], 8);
        tp->nfresh = i + 1;
        pheap_persist(h, &tp->nfresh, 8);
        /* garbage of this run too */
        pheap_alloc(h, 64);
        if (i % 5 == 0)
            pheap_alloc(h, 30000);
        marks[(*nmarks)++] = pheap_sim_fence_count(h);
    }
}

static unsigned failures, nested;

static void judge(const char *image, const char *where, int crash_recovery_at)
{
    int before = ph_test_failed;
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    if (pheap_open(image, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: open: %s", where, pheap_errmsg());
        goto out;
    }
    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check before recovery: %s", where, r.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (!st.needs_recovery) { /* before the open's first fence: still clean */
        pheap_sim_crash(h, NULL, 0, 0.0);
        goto out;
    }
    if (crash_recovery_at) { /* the image of a recovery crashed at that fence */
        pheap_sim_crash(h, NULL, 0, 0.0);
        static char image2[512];
        snprintf(image2, sizeof(image2), "%s", ph_test_path("gc-reuse2.image"));
        for (int j = 1;; j++) {
            unlink(image2);
            pheap_options o2 = {.flags = PHEAP_SIMULATE, .sim_crash_image = image2,
                                .sim_evict_probability = 0.5, .sim_seed = (uint64_t)j,
                                .sim_mode = j % 2 ? PHEAP_SIM_WORDS : 0};
            if (pheap_open(image, &o, &h) != 0)
                break;
            o2.sim_crash_fence = pheap_sim_fence_count(h) + (uint64_t)j;
            pheap_sim_crash(h, NULL, 0, 0.0);
            if (pheap_open(image, &o2, &h) != 0)
                break;
            pheap_recover(h);
            pheap_sim_crash(h, NULL, 0, 0.0);
            if (access(image2, F_OK) != 0)
                break;
            char w2[200];
            snprintf(w2, sizeof(w2), "%s, recovery crashed at its fence %d", where, j);
            nested++;
            judge(image2, w2, 0);
        }
        if (pheap_open(image, &o, &h) != 0)
            goto out;
    }
    if (pheap_recover(h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: recover: %s", where, pheap_errmsg());
        pheap_sim_crash(h, NULL, 0, 0.0);
        goto out;
    }
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check: %s", where, r.first_error);
    pheap_off topo = pheap_root_get(h, "top");
    top *tp = pheap_direct(h, topo);
    uint64_t expect = 1;
    uint64_t blocks[KEEP + NEW + 1][2];
    unsigned nb = 0;
    blocks[nb][0] = topo;
    blocks[nb++][1] = topo + sizeof(top);
    for (unsigned i = 0; i < KEEP; i++) {
        if (pheap_usable_size(h, tp->kept[i]) != 64 ||
            !ph_test_intact(pheap_direct(h, tp->kept[i]), 64, 10 + i))
            ph_test_fail(__FILE__, __LINE__, "%s: kept block %u lost", where, i);
        blocks[nb][0] = tp->kept[i];
        blocks[nb++][1] = tp->kept[i] + 64;
        expect++;
    }
    for (unsigned i = 0; i < NEW; i++) {
        if (!tp->fresh[i])
            continue;
        uint64_t sz = fresh_size(i);
        if (pheap_usable_size(h, tp->fresh[i]) < sz ||
            !ph_test_intact(pheap_direct(h, tp->fresh[i]), sz, 1000 + i))
            ph_test_fail(__FILE__, __LINE__, "%s: fresh block %u lost", where, i);
        blocks[nb][0] = tp->fresh[i];
        blocks[nb++][1] = tp->fresh[i] + sz;
        expect++;
    }
    ph_test_disjoint(blocks, nb);
    pheap_stats(h, &st);
    if (st.live_blocks != expect)
        ph_test_fail(__FILE__, __LINE__, "%s: %llu live blocks, %llu reachable", where,
                     (unsigned long long)st.live_blocks, (unsigned long long)expect);
    /* allocations now must not hand out a kept block */
    for (unsigned i = 0; i < 3000; i++) {
        uint64_t sz = fresh_size(i) % 2000 + 16;
        pheap_off x = pheap_alloc(h, i % 50 == 0 ? 70000 : sz);
        if (!x)
            break;
        memset(pheap_direct(h, x), 0xa5, pheap_usable_size(h, x));
    }
    for (unsigned i = 0; i < KEEP; i++)
        if (!ph_test_intact(pheap_direct(h, tp->kept[i]), 64, 10 + i))
            ph_test_fail(__FILE__, __LINE__, "%s: kept block %u overwritten", where, i);
    for (unsigned i = 0; i < NEW; i++)
        if (tp->fresh[i] && !ph_test_intact(pheap_direct(h, tp->fresh[i]), fresh_size(i), 1000 + i))
            ph_test_fail(__FILE__, __LINE__, "%s: fresh block %u overwritten", where, i);
    if (pheap_close(h) != 0 || pheap_open(image, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: close/reopen: %s", where, pheap_errmsg());
        goto out;
    }
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check after reopen: %s", where, r.first_error);
    pheap_sim_crash(h, NULL, 0, 0.0);
out:
    if (ph_test_failed != before) {
        failures++;
        fprintf(stderr, "  ... %s\n", where);
    }
}

static const char *make_base(uint64_t size, uint64_t max)
{
    static char base[512];
    snprintf(base, sizeof(base), "%s", ph_test_path("gc-reuse.heap"));
    unlink(base);
    pheap_options co = {.size = size, .max_size = max, .flags = PHEAP_CREATE,
                        .consistency = PHEAP_CONSISTENCY_GC};
    pheap *h = ph_test_open(base, &co);
    if (!h)
        return NULL;
    pheap_off topo = pheap_alloc_init(h, sizeof(top), PHEAP_ALLOC_ZERO, NULL, NULL);
    top *tp = pheap_direct(h, topo);
    for (unsigned i = 0, k = 0; i < GARBAGE + KEEP; i++) {
        pheap_off o = pheap_alloc(h, 64);
        if (!o) {
            ph_test_fail(__FILE__, __LINE__, "base alloc: %s", pheap_errmsg());
            return NULL;
        }
        if (k < KEEP) { /* the first slab's first blocks: the others empty out */
            ph_test_fill(pheap_direct(h, o), 64, 10 + k);
            tp->kept[k++] = o;
        } else {
            garbage[i - k] = o;
        }
    }
    pheap_alloc(h, 50000); /* garbage large block */
    if (pheap_root_set(h, "top", topo) != 0 || pheap_close(h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "base: %s", pheap_errmsg());
        return NULL;
    }
    return base;
}

static void enumerate(const char *name, uint64_t size, uint64_t max)
{
    const char *base = make_base(size, max);
    if (!base)
        return;
    static char image[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("gc-reuse.image"));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    REQUIRE_OK(pheap_open(base, &o, &h));
    static uint64_t marks[NEW + 2];
    unsigned nmarks = 0;
    workload(h, marks, &nmarks);
    uint64_t fences = pheap_sim_fence_count(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    fprintf(stderr, "%s: %llu fences, size %llu, %llu slabs\n", name, (unsigned long long)fences,
            (unsigned long long)st.size, (unsigned long long)st.slabs);
    pheap_sim_crash(h, NULL, 0, 0.0);
    static const struct { double evict; unsigned mode; } variants[] = {
        {0.0, 0}, {0.5, 0}, {0.5, PHEAP_SIM_WORDS}};
    unsigned images = 0;
    for (uint64_t f = 1; f <= fences + 1; f++) {
        for (unsigned v = 0; v < 3; v++) {
            unlink(image);
            o = (pheap_options){.flags = PHEAP_SIMULATE, .sim_crash_fence = f,
                                .sim_crash_image = image, .sim_evict_probability = variants[v].evict,
                                .sim_seed = f * 3 + v, .sim_mode = variants[v].mode};
            if (pheap_open(base, &o, &h) != 0)
                continue;
            unsigned n2 = 0;
            static uint64_t m2[NEW + 2];
            workload(h, m2, &n2);
            if (f == fences + 1) /* after the run: every fence done */
                pheap_sim_crash(h, image, f, variants[v].evict);
            else
                pheap_sim_crash(h, NULL, 0, 0.0);
            if (access(image, F_OK) != 0)
                continue;
            char where[120];
            snprintf(where, sizeof(where), "%s: fence %llu variant %u", name,
                     (unsigned long long)f, v);
            images++;
            judge(image, where, v == 1);
        }
    }
    fprintf(stderr, "%s: %u images (%u of crashed recoveries), %u with failures\n", name, images,
            nested, failures);
    CHECK_EQ(failures, 0);
    failures = 0;
}

TEST(release_reuse)
{
    enumerate("gc-reuse", 4u << 20, 0);
}

TEST(release_reuse_growth)
{
    enumerate("gc-reuse+growth", 1u << 20, 16u << 20);
}
