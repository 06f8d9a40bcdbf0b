/*
 * tx_threads.c -- crash images of three threads running transactions at
 * once, so that several lanes' logs are in flight at the crash and their
 * fences interleave.  Each thread owns a partition: accounts whose sum is
 * constant (transfers by undo or by redo) and slots that hold a block or 0
 * (each allocation or free of a block is one transaction with the slot's
 * change; some transactions abort).  The schedule differs from run to run,
 * so fences are sampled across the run, with eviction, and each image is
 * judged as the harness does (recovery, use, reopen, recovery crashed)
 * against what holds whatever the schedule: every partition's sum is
 * intact, every slot is 0 or a live block holding its own fill, no blocks
 * overlap, and the live blocks are exactly the reachable ones.
 * Partitions share cache lines (a part is 160 bytes), so one thread's
 * flush may snapshot another's uncommitted bytes and fence them after that
 * thread's commit; the second test takes that schedule on purpose.
 */
#include <pthread.h>
#include <semaphore.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "heap/heap.h"
#include "persist/sim.h"

enum { THREADS = 3, ACCOUNTS = 8, SLOTS = 12, OPS = 40 };
#define TOTAL 1000u

typedef struct part {
    uint64_t account[ACCOUNTS];
    pheap_off slot[SLOTS];
} part;

typedef struct worker {
    pheap *h;
    part *p;
    unsigned seed;
} worker;

static size_t size_of(unsigned r)
{
    return r % 5 ? 8 + r % 500 : 20000 + (r % 3) * 10000;
}

static int transfer(pheap *h, part *p, unsigned r)
{
    unsigned a = r % ACCOUNTS, b = (r / ACCOUNTS) % ACCOUNTS, amount = r % 7;
    if (a == b || p->account[a] < amount)
        return 0;
    if (r & 1) { /* undo */
        int rc = pheap_tx_add(h, &p->account[a], sizeof(uint64_t));
        if (!rc)
            rc = pheap_tx_add(h, &p->account[b], sizeof(uint64_t));
        if (!rc) {
            p->account[a] -= amount;
            p->account[b] += amount;
        }
        return rc;
    }
    uint64_t va = p->account[a] - amount, vb = p->account[b] + amount; /* redo */
    int rc = pheap_tx_write(h, &p->account[a], &va, sizeof(va));
    return rc ? rc : pheap_tx_write(h, &p->account[b], &vb, sizeof(vb));
}

static int change_slot(pheap *h, part *p, unsigned r)
{
    pheap_off *s = &p->slot[r % SLOTS], zero = 0;
    if (*s) {
        int rc = pheap_tx_free(h, *s);
        return rc ? rc : pheap_tx_write(h, s, &zero, sizeof(zero));
    }
    size_t size = size_of(r >> 4);
    pheap_off b = pheap_tx_alloc(h, size);
    if (!b)
        return pheap_errno();
    ph_test_fill(pheap_direct(h, b), size < 64 ? size : 64, b); /* new: written in place */
    return pheap_tx_write(h, s, &b, sizeof(b));
}

static void *work(void *arg)
{
    worker *w = arg;
    unsigned r = w->seed;
    for (unsigned i = 0; i < OPS; i++) {
        r = r * 1103515245u + 12345u;
        int rc = pheap_tx_begin(w->h);
        if (!rc)
            rc = transfer(w->h, w->p, r >> 8);
        if (!rc && (r >> 4) % 3)
            rc = change_slot(w->h, w->p, r >> 12);
        if (!rc && (r >> 6) % 9 == 0) {
            pheap_tx_abort(w->h);
            continue;
        }
        if (!rc)
            rc = pheap_tx_commit(w->h);
        if (rc)
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", i, pheap_errmsg());
    }
    return NULL;
}

static uint64_t run(const char *base, const pheap_options *o, unsigned seed)
{
    pheap *h = ph_test_open(base, o);
    if (!h)
        return 0;
    part *parts = pheap_direct(h, pheap_root_get(h, "parts"));
    pthread_t t[THREADS];
    worker w[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker){h, &parts[i], seed + i};
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (unsigned i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    return fences;
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)done;
    (void)c;
    part *parts = pheap_direct(h, pheap_root_get(h, "parts"));
    uint64_t blocks[THREADS * SLOTS][2];
    unsigned n = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        uint64_t sum = 0;
        for (unsigned a = 0; a < ACCOUNTS; a++)
            sum += parts[i].account[a];
        if (sum != TOTAL)
            ph_test_fail(__FILE__, __LINE__, "partition %u: accounts sum to %llu, not %u", i,
                         (unsigned long long)sum, TOTAL);
        for (unsigned k = 0; k < SLOTS; k++) {
            pheap_off b = parts[i].slot[k];
            if (!b)
                continue;
            size_t usable = pheap_usable_size(h, b);
            if (usable < 8 || !ph_test_intact(pheap_direct(h, b), 8, b)) { /* its first word */
                ph_test_fail(__FILE__, __LINE__, "partition %u slot %u = %llu: %s", i, k,
                             (unsigned long long)b, usable ? "not its fill" : "not live");
                continue;
            }
            blocks[n][0] = b;
            blocks[n][1] = b + usable;
            n++;
        }
    }
    ph_test_disjoint(blocks, n);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != n + 1)
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks, %u reachable",
                     (unsigned long long)st.live_blocks, n + 1);
}

static const char *make_base(void)
{
    const char *base = ph_test_path("tx-threads.heap");
    pheap *h = ph_test_create(base, 8u << 20);
    if (!h)
        return NULL;
    pheap_off s = pheap_alloc(h, THREADS * sizeof(part));
    part *p = pheap_direct(h, s);
    memset(p, 0, THREADS * sizeof(part));
    for (unsigned i = 0; i < THREADS; i++)
        p[i].account[0] = TOTAL;
    pheap_persist(h, p, THREADS * sizeof(part));
    pheap_root_set(h, "parts", s);
    pheap_close(h);
    return base;
}

TEST(three_threads_in_transactions_sampled_fences)
{
#ifdef __SANITIZE_THREAD__
    /* The crash image is a snapshot of memory other threads are writing:
     * a race by design (see crash/threads.c). */
    fprintf(stderr, "  not run under ThreadSanitizer (the crash snapshot races by design)\n");
    return;
#endif
    const char *base = make_base();
    REQUIRE(base);
    pheap_options dry = {.flags = PHEAP_SIMULATE};
    uint64_t fences = run(base, &dry, 11);
    REQUIRE(fences > 100);
    char image[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("tx-threads.image"));
    ph_crash_stats st = {0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    unsigned step = ph_crash_level() == PH_CRASH_FULL ? 1 : ph_crash_level() ? 3 : 9;
    int limit = ph_crash_level() == PH_CRASH_QUICK ? 1 : 10;
    unsigned points = 0;
    for (uint64_t f = 2; f < fences && ph_test_failed < limit; f += step) {
        pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = f,
                           .sim_crash_image = image, .sim_evict_probability = f % 3 ? 0.5 : 0.0,
                           .sim_seed = f, .sim_mode = f % 2 ? PHEAP_SIM_WORDS : 0};
        unlink(image);
        run(base, &o, (unsigned)f * 31);
        if (access(image, F_OK) != 0)
            continue; /* this schedule issued fewer fences */
        char where[96];
        snprintf(where, sizeof(where), "fence %llu, run %llu", (unsigned long long)f,
                 (unsigned long long)f);
        ph_crash_judge("tx/three_threads", image, where, 0, verify, c, &st);
        points++;
    }
    free(c);
    ph_crash_report("tx/three_threads", &st);
    CHECK(st.images > points / 2);
    CHECK(points > 10);
}

/* One schedule of the test above, held in place: partition 0's thread
 * applies a redo write to a slot and flushes its line, which also holds
 * accounts of partition 1, in the middle of partition 1's undo transfer
 * (one account changed in place, the other not yet); it waits before its
 * fence while partition 1's transfer commits, then fences.  The line's
 * older snapshot must not take back the committed transfer: the image
 * holds both transactions whole. */
static __thread int hold_me;
static int was_held;
static sem_t held, release;
static pheap_off *held_slot, held_value;

static void hold_after_apply(void *arg)
{
    (void)arg;
    if (!hold_me || ph_load_relaxed(held_slot) != held_value)
        return;
    hold_me = 0;
    was_held = 1;
    sem_post(&held);
    sem_wait(&release);
}

typedef struct slot_writer {
    pheap *h;
    pheap_off *slot;
    int rc;
} slot_writer;

static void *write_slot(void *arg)
{
    slot_writer *w = arg;
    int rc = pheap_tx_begin(w->h);
    pheap_off b = rc ? 0 : pheap_tx_alloc(w->h, 64);
    if (b) {
        ph_test_fill(pheap_direct(w->h, b), 64, b);
        held_value = b;
        hold_me = 1; /* at the commit's fence after the slot is written: F2 */
        rc = pheap_tx_write(w->h, w->slot, &b, sizeof(b));
    }
    if (!rc)
        rc = b ? pheap_tx_commit(w->h) : pheap_errno();
    if (!was_held) /* failed or never held: release the main thread */
        sem_post(&held);
    hold_me = 0;
    w->rc = rc;
    return NULL;
}

TEST(older_snapshot_of_a_shared_line_fenced_after_a_commit)
{
    const char *base = make_base();
    REQUIRE(base);
    pheap_options so = {.flags = PHEAP_SIMULATE};
    pheap *h = ph_test_open(base, &so);
    REQUIRE(h);
    part *p = pheap_direct(h, pheap_root_get(h, "parts"));
    uintptr_t line = (uintptr_t)&p[1].account[0] / 64;
    unsigned k = 0;
    while (k < SLOTS && (uintptr_t)&p[0].slot[k] / 64 != line)
        k++;
    REQUIRE(k < SLOTS && (uintptr_t)&p[1].account[1] / 64 == line);
    sem_init(&held, 0, 0);
    sem_init(&release, 0, 0);
    h->sp.sim->before_fence = hold_after_apply;
    held_slot = &p[0].slot[k];
    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, &p[1].account[0], sizeof(uint64_t)));
    REQUIRE_OK(pheap_tx_add(h, &p[1].account[1], sizeof(uint64_t)));
    p[1].account[0] -= 4;
    slot_writer w = {h, &p[0].slot[k], 0};
    pthread_t t;
    pthread_create(&t, NULL, write_slot, &w);
    sem_wait(&held);
    p[1].account[1] += 4;
    int rc = pheap_tx_commit(h);
    sem_post(&release);
    pthread_join(t, NULL);
    h->sp.sim->before_fence = NULL;
    CHECK_EQ(rc, 0);
    CHECK_EQ(w.rc, 0);
    pheap_off b = held_value;
    const char *image = ph_test_path("tx-threads-held.image");
    REQUIRE_OK(pheap_sim_crash(h, image, 0, 0.0)); /* the durable image alone */
    sem_destroy(&held);
    sem_destroy(&release);
    ph_crash_stats st = {0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    ph_crash_judge("tx/shared_line_held", image, "after both commits", 0, verify, c, &st);
    free(c);
    ph_crash_report("tx/shared_line_held", &st);
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *r = ph_test_open(image, &o);
    REQUIRE(r);
    part *q = pheap_direct(r, pheap_root_get(r, "parts"));
    CHECK_EQ(q[1].account[0], TOTAL - 4);
    CHECK_EQ(q[1].account[1], 4);
    CHECK_EQ(q[0].slot[k], b);
    pheap_sim_crash(r, NULL, 0, 0.0);
}
