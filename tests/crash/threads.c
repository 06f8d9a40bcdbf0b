/*
 * threads.c -- crash images of two threads doing logged large and small
 * operations at once, so that their fences interleave and extent-log
 * entries become durable out of log order.  The schedule differs from run
 * to run, so instead of enumerating every fence this samples fences across
 * the run, with eviction, and checks what must hold whatever the schedule:
 * pheap_check passes, every slot is 0 or a live block, no blocks overlap,
 * and nothing leaks beyond the window of a plain alloc or free in flight
 * (one per thread): live blocks = non-zero slots + the slot array, plus at
 * most one per thread.  Half the operations are logged (alloc_to /
 * free_from), half plain (alloc, then publish and persist the offset;
 * unpublish, persist, then free).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { THREADS = 2, SLOTS = 32, OPS = 60 };

typedef struct worker {
    pheap *h;
    pheap_off *slots;  /* this thread's SLOTS slots */
    unsigned seed;
    unsigned ops;      /* operations to run */
    unsigned nslots;   /* slots it uses, at most SLOTS */
} worker;

static size_t size_of(unsigned r)
{
    return r % 3 ? 20000 + (r % 7) * 30000 : 64 + r % 2000; /* mostly large */
}

static void *work(void *arg)
{
    worker *w = arg;
    unsigned r = w->seed;
    for (unsigned i = 0; i < w->ops; i++) {
        r = r * 1103515245u + 12345u;
        pheap_off *s = &w->slots[(r >> 8) % w->nslots];
        int rc = 0, plain = (r >> 20) & 1;
        if (*s && !plain) {
            rc = pheap_free_from(w->h, s);
        } else if (*s) {
            pheap_off off = *s;
            *s = 0;
            pheap_persist(w->h, s, sizeof(*s));
            rc = pheap_free(w->h, off);
        } else if (!plain) {
            rc = pheap_alloc_to(w->h, size_of(r >> 12), s);
        } else {
            pheap_off off = pheap_alloc(w->h, size_of(r >> 12));
            rc = off ? 0 : pheap_errno();
            *s = off;
            pheap_persist(w->h, s, sizeof(*s));
        }
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", i, pheap_errmsg());
    }
    return NULL;
}

/* Runs the two workers on a simulated heap; returns the fences issued. */
static uint64_t run(const char *base, uint64_t fence, const char *image)
{
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = fence,
                       .sim_crash_image = fence ? image : NULL, .sim_evict_probability = 0.5,
                       .sim_seed = fence};
    pheap *h;
    if (pheap_open(base, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "open: %s", pheap_errmsg());
        return 0;
    }
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "slots"));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker){h, slots + i * SLOTS, 7 + i, OPS, SLOTS};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    return fences;
}

static int cmp_pair(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void verify(const char *image, uint64_t fence)
{
    pheap *h;
    if (pheap_open(image, NULL, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "fence %llu: reopen: %s", (unsigned long long)fence,
                     pheap_errmsg());
        return;
    }
    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "fence %llu: check: %s", (unsigned long long)fence,
                     r.first_error);
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "slots"));
    uint64_t blocks[THREADS * SLOTS][2];
    unsigned n = 0;
    for (unsigned k = 0; k < THREADS * SLOTS; k++) {
        if (!slots[k])
            continue;
        size_t usable = pheap_usable_size(h, slots[k]);
        if (usable < 64)
            ph_test_fail(__FILE__, __LINE__, "fence %llu: slot %u = %llu is not a live block (%s)",
                         (unsigned long long)fence, k, (unsigned long long)slots[k], pheap_errmsg());
        blocks[n][0] = slots[k];
        blocks[n][1] = slots[k] + usable;
        n++;
    }
    qsort(blocks, n, sizeof(blocks[0]), cmp_pair);
    for (unsigned i = 1; i < n; i++)
        if (blocks[i - 1][1] > blocks[i][0])
            ph_test_fail(__FILE__, __LINE__, "fence %llu: blocks at %llu and %llu overlap",
                         (unsigned long long)fence, (unsigned long long)blocks[i - 1][0],
                         (unsigned long long)blocks[i][0]);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks < n + 1 || st.live_blocks > n + 1 + THREADS)
        ph_test_fail(__FILE__, __LINE__, "fence %llu: %llu live blocks, %u reachable",
                     (unsigned long long)fence, (unsigned long long)st.live_blocks, n + 1);
    pheap_close(h);
}

TEST(two_threads_sampled_fences)
{
#ifdef __SANITIZE_THREAD__
    /* A crash image is a snapshot of memory that other threads are writing
     * at that instant: a data race by design, which ThreadSanitizer would
     * rightly report.  The other builds run this test. */
    fprintf(stderr, "  not run under ThreadSanitizer (the crash snapshot races by design)\n");
    return;
#endif
    const char *base = ph_test_path("threads-crash.heap");
    pheap *h = ph_test_create(base, 8u << 20);
    REQUIRE(h);
    pheap_off s = pheap_alloc(h, THREADS * SLOTS * sizeof(pheap_off));
    memset(pheap_direct(h, s), 0, THREADS * SLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, s), THREADS * SLOTS * sizeof(pheap_off));
    REQUIRE_OK(pheap_root_set(h, "slots", s));
    pheap_close(h);
    uint64_t fences = run(base, 0, NULL);
    REQUIRE(fences > 100);
    const char *image = ph_test_path("threads-crash.image");
    unsigned images = 0;
    for (uint64_t k = 2; k < fences && ph_test_failed < 10; k += 3) {
        unlink(image);
        run(base, k, image);
        if (access(image, F_OK) != 0)
            continue; /* this schedule issued fewer fences */
        verify(image, k);
        images++;
    }
    fprintf(stderr, "  %u crash images of two threads checked (%llu fences per run)\n", images,
            (unsigned long long)fences);
    CHECK(images > 30);
}

/* ---- compaction while another thread appends --------------------------- */

/* The contract whatever the schedule (see verify above), for the harness:
 * `done` is meaningless with threads. */
static void verify_slots(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)done;
    (void)c;
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "slots"));
    uint64_t blocks[THREADS * SLOTS][2];
    unsigned n = 0;
    for (unsigned k = 0; k < THREADS * SLOTS; k++) {
        if (!slots[k])
            continue;
        size_t usable = pheap_usable_size(h, slots[k]);
        if (usable < 64)
            ph_test_fail(__FILE__, __LINE__, "slot %u = %llu is not a live block (%s)", k,
                         (unsigned long long)slots[k], pheap_errmsg());
        blocks[n][0] = slots[k];
        blocks[n][1] = slots[k] + usable;
        n++;
    }
    qsort(blocks, n, sizeof(blocks[0]), cmp_pair);
    for (unsigned i = 1; i < n; i++)
        if (blocks[i - 1][1] > blocks[i][0])
            ph_test_fail(__FILE__, __LINE__, "blocks at %llu and %llu overlap",
                         (unsigned long long)blocks[i - 1][0], (unsigned long long)blocks[i][0]);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks < n + 1 || st.live_blocks > n + 1 + THREADS)
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks, %u reachable",
                     (unsigned long long)st.live_blocks, n + 1);
}

/* The function of the extent log that compacts it (a flush site name). */
#define COMPACT_SITE "compact"

/* Two threads of mostly large operations on a heap whose extent log holds
 * 576 entries a half, so that it is compacted a few times a run.  Crash
 * points are the fences of compactions taken while the other thread has
 * unfenced stores, under
 * a schedule drawn from a seed that pauses threads before some fences:
 * states such as one thread compacting while the other's entry is stored
 * but not fenced are reached.  The interleaving is not reproducible
 * (threads), the crash point and schedule seed are. */
static uint64_t run_contended(const char *base, uint64_t fence, const char *image, uint64_t seed,
                              unsigned words, unsigned ops)
{
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = fence,
                       .sim_crash_image = fence ? image : NULL,
                       .sim_evict_probability = words ? 0.5 : 0.0, .sim_seed = seed,
                       .sim_mode = PHEAP_SIM_CONTENDED | (words ? PHEAP_SIM_WORDS : 0),
                       .sim_schedule_seed = seed, .sim_crash_site = COMPACT_SITE};
    pheap *h;
    if (pheap_open(base, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "open: %s", pheap_errmsg());
        return 0;
    }
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "slots"));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker){h, slots + i * SLOTS, (unsigned)seed * 31 + i, ops, 6};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    return fences;
}

TEST(compaction_while_another_thread_appends)
{
#ifdef __SANITIZE_THREAD__
    fprintf(stderr, "  not run under ThreadSanitizer (the crash snapshot races by design)\n");
    return;
#endif
    const char *base = ph_test_path("contended.heap");
    pheap_options co = {.size = 4u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    unlink(base);
    REQUIRE_OK(pheap_open(base, &co, &h));
    pheap_off s = pheap_alloc(h, THREADS * SLOTS * sizeof(pheap_off));
    memset(pheap_direct(h, s), 0, THREADS * SLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, s), THREADS * SLOTS * sizeof(pheap_off));
    REQUIRE_OK(pheap_root_set(h, "slots", s));
    pheap_close(h);
    static const unsigned points_of[] = {[PH_CRASH_QUICK] = 40, [PH_CRASH_SAMPLED] = 200,
                                         [PH_CRASH_FULL] = 3000};
    unsigned ops = 1000, points = points_of[ph_crash_level()];
    char image[512]; /* ph_test_path's buffers rotate */
    snprintf(image, sizeof(image), "%s", ph_test_path("contended.image"));
    ph_crash_stats st = {0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    int limit = ph_crash_level() == PH_CRASH_QUICK ? 1 : 10;
    for (unsigned i = 0; i < points && ph_test_failed < limit; i++) {
        uint64_t seed = 1000 + i;
        /* One of the first fences of a compaction taken while the other
         * thread has unfenced stores. */
        uint64_t fence = 1 + ph_mix_seed(seed) % 4;
        unlink(image);
        run_contended(base, fence, image, seed, i % 2, ops);
        if (access(image, F_OK) != 0)
            continue;
        char where[96];
        snprintf(where, sizeof(where), "contended fence %llu, seed %llu%s", (unsigned long long)fence,
                 (unsigned long long)seed, i % 2 ? ", words" : "");
        ph_crash_judge("threads/compaction_contended", image, where, 0, verify_slots, c, &st);
    }
    free(c);
    ph_crash_report("threads/compaction_contended", &st);
    CHECK(st.images > points / 4);
}
