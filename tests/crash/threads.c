/*
 * threads.c -- crash images of two threads doing logged large and small
 * operations at once, so that their fences interleave and extent-log
 * entries become durable out of log order.  The schedule differs from run
 * to run, so instead of enumerating every fence this samples fences across
 * the run, with eviction, and judges each image as the harness does
 * (ph_crash_judge: recovery, use, reopen, recovery crashed) against what
 * must hold whatever the schedule: every slot is 0 or a live block, no
 * blocks overlap, and nothing leaks beyond the window of a plain alloc or
 * free in flight (one per thread).  Half the operations are logged (alloc_to /
 * free_from), half plain (alloc, then publish and persist the offset;
 * unpublish, persist, then free).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "util/util.h"

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

/* Runs THREADS workers of `ops` operations on `nslots` slots each, on a
 * simulated heap opened from `base` with options `o`; returns the fences
 * issued. */
static uint64_t run(const char *base, const pheap_options *o, unsigned seed, unsigned ops,
                    unsigned nslots)
{
    pheap *h = ph_test_open(base, o);
    if (!h)
        return 0;
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "slots"));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker){h, slots + i * SLOTS, seed + i, ops, nslots};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    return fences;
}

/* What must hold whatever the schedule: every slot is 0 or a live block,
 * no blocks overlap, and nothing leaks beyond the window of a plain alloc
 * or free in flight (one per thread).  `done` is meaningless with threads. */
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
    ph_test_disjoint(blocks, n);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks < n + 1 || st.live_blocks > n + 1 + THREADS)
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks, %u reachable",
                     (unsigned long long)st.live_blocks, n + 1);
}

/* A fresh heap with a rooted, zeroed slot array for the workers. */
static const char *make_base(const char *name, uint64_t size, uint64_t max_size)
{
    const char *base = ph_test_path(name);
    pheap_options co = {.size = size, .max_size = max_size, .flags = PHEAP_CREATE};
    pheap *h;
    unlink(base);
    if (pheap_open(base, &co, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
        return NULL;
    }
    pheap_off s = pheap_alloc(h, THREADS * SLOTS * sizeof(pheap_off));
    memset(pheap_direct(h, s), 0, THREADS * SLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, s), THREADS * SLOTS * sizeof(pheap_off));
    pheap_root_set(h, "slots", s);
    pheap_close(h);
    return base;
}

/* Judges the images of one test and prints its row. */
static void judge_all(const char *name, const char *base, unsigned points, uint64_t first_fence,
                      pheap_options (*options)(uint64_t i, const char *image, uint64_t *fence),
                      unsigned ops, unsigned nslots)
{
    char image[512]; /* ph_test_path's buffers rotate */
    snprintf(image, sizeof(image), "%s", ph_test_path("threads.image"));
    ph_crash_stats st = {0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    int limit = ph_crash_level() == PH_CRASH_QUICK ? 1 : 10;
    for (uint64_t i = first_fence; i < first_fence + points && ph_test_failed < limit; i++) {
        uint64_t fence;
        pheap_options o = options(i, image, &fence);
        unlink(image);
        run(base, &o, (unsigned)i * 31, ops, nslots);
        if (access(image, F_OK) != 0)
            continue; /* this schedule issued fewer fences */
        char where[96];
        snprintf(where, sizeof(where), "fence %llu (%s), run %llu", (unsigned long long)fence,
                 o.sim_crash_site ? "of a compaction, contended" : "any",
                 (unsigned long long)i);
        ph_crash_judge(name, image, where, 0, verify_slots, c, &st);
    }
    free(c);
    ph_crash_report(name, &st);
    CHECK(st.images > points / 4);
}

/* Every third fence of the run, half the lines or words evicted. */
static pheap_options sampled(uint64_t i, const char *image, uint64_t *fence)
{
    *fence = 2 + 3 * i;
    return (pheap_options){.flags = PHEAP_SIMULATE, .sim_crash_fence = *fence,
                           .sim_crash_image = image, .sim_evict_probability = 0.5,
                           .sim_seed = *fence, .sim_mode = i % 2 ? PHEAP_SIM_WORDS : 0};
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
    const char *base = make_base("threads-crash.heap", 8u << 20, 0);
    REQUIRE(base);
    pheap_options dry = {.flags = PHEAP_SIMULATE};
    uint64_t fences = run(base, &dry, 7, OPS, SLOTS);
    REQUIRE(fences > 100);
    judge_all("threads/two_threads_sampled", base, (unsigned)(fences / 3), 0, sampled, OPS, SLOTS);
}

/* ---- compaction while another thread appends --------------------------- */

/* One of the first fences of a compaction (the function "compact", a flush
 * site name) taken while the other thread has unfenced stores, under a
 * schedule drawn from a seed that pauses threads before some fences. */
static pheap_options contended(uint64_t i, const char *image, uint64_t *fence)
{
    *fence = 1 + ph_mix64(i) % 4;
    return (pheap_options){.flags = PHEAP_SIMULATE, .sim_crash_fence = *fence,
                           .sim_crash_image = image, .sim_evict_probability = i % 2 ? 0.5 : 0.0,
                           .sim_seed = i, .sim_schedule_seed = i, .sim_crash_site = "compact",
                           .sim_mode = PHEAP_SIM_CONTENDED | (i % 2 ? PHEAP_SIM_WORDS : 0)};
}

/* Two threads of mostly large operations on a heap whose extent log holds
 * 576 entries a half, so that it is compacted a few times a run; crashes
 * at compaction fences while the other thread's entry may be stored but
 * not fenced.  The interleaving is not reproducible (threads), the crash
 * point and schedule seed are. */
TEST(compaction_while_another_thread_appends)
{
#ifdef __SANITIZE_THREAD__
    fprintf(stderr, "  not run under ThreadSanitizer (the crash snapshot races by design)\n");
    return;
#endif
    const char *base = make_base("contended.heap", 4u << 20, 8u << 20);
    REQUIRE(base);
    static const unsigned points_of[] = {[PH_CRASH_QUICK] = 40, [PH_CRASH_SAMPLED] = 200,
                                         [PH_CRASH_FULL] = 3000};
    judge_all("threads/compaction_contended", base, points_of[ph_crash_level()], 1000, contended,
              1000, 6);
}
