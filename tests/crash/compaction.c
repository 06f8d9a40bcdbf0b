/*
 * compaction.c -- extent-log compaction while other threads' entries are
 * stored but not fenced, in a schedule the test holds still: two threads
 * append an entry each and are held before their fences; the main thread's
 * allocation fills the log's active half and compacts it, and the crash
 * comes at each of the compaction's fences.  The held entries are lost in
 * the crash while the compaction wrote their extents, so the recovered log
 * has two live extents fewer than the interrupted compaction: the next
 * compaction into that half must not let the interrupted one's entries
 * count (they did while compaction reused its epoch and wrote only the
 * slots it needed).  Each image is recovered, two large blocks are freed
 * (so that the next compaction's live set is smaller still), and it is
 * judged the usual way: recovery (crashed at each of its fences too), use
 * up to and past the next compaction, close, reopen, check.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "heap/heap.h"

enum { HELD = 2 };

static __thread int hold_me;     /* this thread is held at its next fence */
static sem_t held, release;

static void before_fence(void *arg)
{
    (void)arg;
    if (!hold_me)
        return;
    hold_me = 0;
    sem_post(&held);
    sem_wait(&release);
}

static void *append_one(void *arg)
{
    hold_me = 1;
    pheap_alloc(arg, 20000); /* one extent-log entry, held before its fence */
    return NULL;
}

static uint64_t base_live;

/* After the two frees of free_two(). */
static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)done;
    (void)c;
    struct pheap_stats st;
    pheap_stats(h, &st);
    /* The three allocations were in flight: each may or may not be there. */
    uint64_t lo = base_live - 2, hi = lo + HELD + 1;
    if (st.live_blocks < lo || st.live_blocks > hi)
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks, %llu to %llu expected",
                     (unsigned long long)st.live_blocks, (unsigned long long)lo,
                     (unsigned long long)hi);
}

/* Recovers the image and frees two of its large blocks: the recovered log
 * half fills up with the two entries, so the very next append compacts a
 * live set four extents smaller than the interrupted compaction's. */
static void free_two(const char *image)
{
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    if (pheap_open(image, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "recovery: %s", pheap_errmsg());
        return;
    }
    pheap_off *blocks = pheap_direct(h, pheap_root_get(h, "blocks"));
    for (unsigned i = 0; i < 2; i++)
        if (pheap_free_from(h, &blocks[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "free_from after recovery: %s", pheap_errmsg());
    pheap_close(h);
}

/* Runs the schedule with a crash at compaction fence k; 1 if the image
 * was taken. */
static int run(const char *base, const char *image, uint64_t k, unsigned words)
{
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = k, .sim_crash_image = image,
                       .sim_crash_site = "compact", .sim_evict_probability = words ? 0.5 : 0.0,
                       .sim_seed = k, .sim_mode = words ? PHEAP_SIM_WORDS : 0};
    pheap *h;
    if (pheap_open(base, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "open: %s", pheap_errmsg());
        return 0;
    }
    ph_extents *x = h->engine->ext;
    if (x->tail != x->half_entries - HELD)
        ph_test_fail(__FILE__, __LINE__, "log tail %llu, %llu expected",
                     (unsigned long long)x->tail, (unsigned long long)x->half_entries - HELD);
    h->sp.sim->before_fence = before_fence;
    pthread_t t[HELD];
    for (unsigned i = 0; i < HELD; i++) {
        pthread_create(&t[i], NULL, append_one, h);
        /* A thread that never reaches a fence (a fence left out) would
         * hang the test: give up after a while. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 20;
        if (sem_timedwait(&held, &ts) != 0) {
            ph_test_fail(__FILE__, __LINE__, "thread %u never reached its fence", i);
            h->sp.sim->before_fence = NULL;
            for (unsigned m = 0; m <= i; m++)
                sem_post(&release);
            for (unsigned m = 0; m <= i; m++)
                pthread_join(t[m], NULL);
            pheap_sim_crash(h, NULL, 0, 0.0);
            return 0;
        }
    }
    if (!pheap_alloc(h, 20000)) /* fills the half: compaction, and the crash */
        ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg());
    for (unsigned i = 0; i < HELD; i++)
        sem_post(&release);
    for (unsigned i = 0; i < HELD; i++)
        pthread_join(t[i], NULL);
    pheap_sim_crash(h, NULL, 0, 0.0);
    return access(image, F_OK) == 0;
}

TEST(compaction_with_entries_of_held_threads)
{
    sem_init(&held, 0, 0);
    sem_init(&release, 0, 0);
    const char *base = ph_test_path("held.heap");
    pheap *h = ph_test_create(base, 4u << 20);
    REQUIRE(h);
    ph_extents *x = h->engine->ext;
    pheap_off r = pheap_alloc(h, 4 * sizeof(pheap_off));
    pheap_off *blocks = pheap_direct(h, r);
    memset(blocks, 0, 4 * sizeof(pheap_off));
    pheap_persist(h, blocks, 4 * sizeof(pheap_off));
    REQUIRE_OK(pheap_root_set(h, "blocks", r));
    for (unsigned i = 0; i < 4; i++)
        REQUIRE_OK(pheap_alloc_to(h, 30000, &blocks[i]));
    /* Fill the active half up to HELD entries short of full. */
    while (x->tail + 2 <= x->half_entries - HELD) {
        pheap_off a = pheap_alloc(h, 20000);
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
    }
    if (x->tail < x->half_entries - HELD) {
        REQUIRE(pheap_alloc(h, 20000)); /* one more, kept */
    }
    REQUIRE_EQ(x->tail, x->half_entries - HELD);
    struct pheap_stats st;
    pheap_stats(h, &st);
    base_live = st.live_blocks;
    pheap_close(h);
    char image[512]; /* ph_test_path's buffers rotate */
    snprintf(image, sizeof(image), "%s", ph_test_path("held.image"));
    ph_crash_stats cs = {0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    unsigned taken = 0;
    for (uint64_t k = 1; k <= 4; k++) {
        for (unsigned words = 0; words < 2; words++) {
            unlink(image);
            if (!run(base, image, k, words))
                continue;
            taken++;
            free_two(image);
            char where[64];
            snprintf(where, sizeof(where), "compaction fence %llu%s", (unsigned long long)k,
                     words ? ", words" : "");
            ph_crash_judge("compaction/held_threads", image, where, 0, verify, c, &cs);
        }
    }
    free(c);
    ph_crash_report("compaction/held_threads", &cs);
    CHECK(taken >= 4); /* every fence of the compaction, both variants */
}
