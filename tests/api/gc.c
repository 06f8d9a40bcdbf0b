/*
 * gc.c -- the GC consistency mode and tracing: the mode at creation and at
 * open, clean close and reopen, calls refused until pheap_recover after a
 * crash, recovery of exactly the reachable blocks (conservative and with
 * filters), pheap_gc on LOG and GC heaps with and without a dry run, and
 * the checks GC mode keeps on frees.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

typedef struct node {
    pheap_off next;
    uint64_t value;
    pheap_off extra; /* a second block hanging off the node, or 0 */
    uint64_t pad;
} node;

static pheap *create_gc(const char *path, unsigned flags)
{
    return ph_test_create_mode(path, 8u << 20, PHEAP_CONSISTENCY_GC, flags);
}

static uint64_t live(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.live_blocks;
}

static void check_ok(pheap *h)
{
    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "pheap_check: %s", r.first_error);
}

/* A list of n nodes (root "list"), each persisted, with every third node
 * holding a large block; `garbage` unlinked blocks besides.  Returns the
 * number of reachable blocks. */
static uint64_t build(pheap *h, unsigned n, unsigned garbage, uint64_t tag)
{
    pheap_off head = 0;
    uint64_t blocks = 0;
    for (unsigned i = 0; i < n; i++) {
        pheap_off o = pheap_alloc(h, sizeof(node));
        if (!o) {
            ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg());
            return 0;
        }
        node *p = pheap_direct(h, o);
        p->next = head ? head | tag : 0;
        p->value = i;
        p->extra = i % 3 == 0 ? pheap_alloc(h, 20000 + i) : 0;
        blocks += 1 + (p->extra != 0);
        pheap_persist(h, p, sizeof(*p));
        head = o;
    }
    for (unsigned i = 0; i < garbage; i++)
        if (!pheap_alloc(h, 16 + (i % 5) * 100))
            ph_test_fail(__FILE__, __LINE__, "alloc garbage: %s", pheap_errmsg());
    if (pheap_root_set(h, "list", head) != 0)
        ph_test_fail(__FILE__, __LINE__, "root_set: %s", pheap_errmsg());
    return blocks;
}

/* Walks the list (links tagged with `tag`); returns its length, checking values. */
static unsigned walk(pheap *h, uint64_t tag)
{
    unsigned n = 0;
    for (pheap_off o = pheap_root_get(h, "list"); o; n++) {
        node *p = pheap_direct(h, o);
        if (!p || n > 100000)
            return ~0u;
        o = p->next & ~tag;
    }
    return n;
}

/* Crashes h (simulated) into `image`: only what was persisted survives. */
static void crash(pheap *h, const char *image)
{
    unlink(image);
    if (pheap_sim_crash(h, image, 1, 0.0) != 0)
        ph_test_fail(__FILE__, __LINE__, "sim_crash: %s", pheap_errmsg());
}

/* A GC heap `name` holding build(h, n, garbage, tag), crashed (simulated)
 * into `image`; returns the reachable blocks, 0 with the test failed. */
static uint64_t crashed_heap(const char *name, unsigned n, unsigned garbage, uint64_t tag,
                             const char *image)
{
    pheap *h = create_gc(ph_test_path(name), PHEAP_SIMULATE);
    if (!h)
        return 0;
    uint64_t reach = build(h, n, garbage, tag);
    crash(h, image);
    return reach;
}

TEST(mode_recorded_and_fixed)
{
    const char *path = ph_test_path("gc-mode.heap");
    pheap *h = create_gc(path, 0);
    REQUIRE(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.consistency, PHEAP_CONSISTENCY_GC);
    CHECK_EQ(st.needs_recovery, 0);
    pheap_off a = pheap_alloc(h, 64), b = pheap_alloc(h, 100000);
    REQUIRE(a && b);
    pheap_close(h);
    /* the mode is the heap's: opening with 0 keeps it, asking GC of a LOG heap fails */
    pheap_options o = {0};
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.consistency, PHEAP_CONSISTENCY_GC);
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(st.live_blocks, 2);
    CHECK_EQ(pheap_usable_size(h, a), 64);
    pheap_close(h);
    const char *log = ph_test_path("gc-log.heap");
    h = ph_test_create(log, 4u << 20);
    REQUIRE(h);
    pheap_close(h);
    o.consistency = PHEAP_CONSISTENCY_GC;
    CHECK_EQ(pheap_open(log, &o, &h), PHEAP_EINVAL);
    o.consistency = 2;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
}

TEST(fast_path_makes_nothing_durable)
{
    pheap *h = create_gc(ph_test_path("gc-fast.heap"), 0);
    REQUIRE(h);
    pheap_off warm = pheap_alloc(h, 64); /* the slab: made durably once */
    REQUIRE(warm);
    struct pheap_stats a, b;
    pheap_stats(h, &a);
    pheap_off v[2000];
    for (unsigned i = 0; i < 2000; i++)
        REQUIRE((v[i] = pheap_alloc(h, 64)) != 0);
    for (unsigned i = 0; i < 2000; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    pheap_stats(h, &b);
    /* about 2000 * 64 bytes: a few slabs more, each two fences; no fence per call */
    CHECK(b.fences - a.fences <= 12);
    CHECK_EQ(b.live_blocks, 1);
    check_ok(h);
    pheap_close(h);
}

/* The calls that touch only the thread cache follow the handle's state:
 * read-only mode refuses them at once, and so does a fork child. */
TEST(fast_path_follows_the_mode)
{
    pheap *h = create_gc(ph_test_path("gc-fast-mode.heap"), 0);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), b = pheap_alloc(h, 64); /* this thread's cache is warm */
    REQUIRE(a && b);
    REQUIRE_OK(pheap_free(h, b));
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_READONLY));
    CHECK_EQ(pheap_alloc(h, 64), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EROMODE);
    CHECK_EQ(pheap_free(h, a), PHEAP_EROMODE);
    REQUIRE_OK(pheap_set_mode(h, PHEAP_MODE_WRITABLE));
    pheap_off c = pheap_alloc(h, 64);
    CHECK(c != 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) /* the child's copy of the handle: refused, never the parent's blocks */
        _exit(pheap_alloc(h, 64) == 0 && pheap_errno() == PHEAP_EFORKED &&
                      pheap_free(h, a) == PHEAP_EFORKED
                  ? 0
                  : 1);
    int st = -1;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    REQUIRE_OK(pheap_free(h, a));
    REQUIRE_OK(pheap_free(h, c));
    CHECK_EQ(pheap_free(h, 0), 0);
    CHECK_EQ(pheap_free(h, 8), PHEAP_ERANGE);
    CHECK_EQ(pheap_alloc(h, 0), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_alloc(NULL, 64), 0);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(pheap_free(NULL, a), PHEAP_EINVAL);
    CHECK_EQ(live(h), 0);
    check_ok(h);
    pheap_close(h);
}

/* One thread switches the mode while another allocates and frees: the
 * fast path reads only what a mode switch writes atomically (a data race
 * here is ThreadSanitizer's to find). */
static pheap *race_heap;
static int race_stop;

static void *race_worker(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&race_stop, __ATOMIC_RELAXED)) {
        pheap_off o = pheap_alloc(race_heap, 64);
        while (o && pheap_free(race_heap, o) == PHEAP_EROMODE)
            ; /* read-only mode for a while: the main thread makes it writable again */
    }
    return NULL;
}

TEST(fast_path_and_mode_switches_in_two_threads)
{
    race_heap = create_gc(ph_test_path("gc-fast-race.heap"), 0);
    REQUIRE(race_heap);
    pthread_t th;
    REQUIRE_EQ(pthread_create(&th, NULL, race_worker, NULL), 0);
    for (int i = 0; i < 2000; i++) {
        REQUIRE_OK(pheap_set_mode(race_heap, PHEAP_MODE_READONLY));
        REQUIRE_OK(pheap_set_mode(race_heap, PHEAP_MODE_WRITABLE));
    }
    __atomic_store_n(&race_stop, 1, __ATOMIC_RELAXED);
    pthread_join(th, NULL);
    CHECK_EQ(live(race_heap), 0);
    check_ok(race_heap);
    pheap_close(race_heap);
}

TEST(refused_until_recovered)
{
    static char image[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("gc-crash.image"));
    uint64_t reach = crashed_heap("gc-crash.heap", 50, 30, 0, image);
    REQUIRE(reach);
    pheap *h;
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(st.needs_recovery, 1);
    pheap_off list = pheap_root_get(h, "list");
    CHECK(list != 0); /* reading works */
    CHECK_EQ(walk(h, 0), 50);
    CHECK_EQ(pheap_alloc(h, 64), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERECOVER);
    CHECK_EQ(pheap_free(h, list), PHEAP_ERECOVER);
    CHECK_EQ(pheap_root_set(h, "x", list), PHEAP_ERECOVER);
    CHECK_EQ(pheap_usable_size(h, list), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ERECOVER);
    pheap_off d = 0;
    CHECK_EQ(pheap_alloc_to(h, 64, &d), PHEAP_ERECOVER);
    CHECK_EQ(pheap_tx_begin(h), PHEAP_ERECOVER);
    CHECK_EQ(pheap_gc(h), PHEAP_ERECOVER);
    CHECK(strstr(pheap_strerror(PHEAP_ERECOVER), "recover") != NULL);
    pheap_gc_options go = {.flags = PHEAP_GC_DRY_RUN};
    CHECK_EQ(pheap_recover_ex(h, &go, NULL), PHEAP_EINVAL);
    pheap_gc_report rep;
    REQUIRE_OK(pheap_recover_ex(h, NULL, &rep));
    CHECK_EQ(rep.marked_blocks, reach);
    CHECK_EQ(rep.bad_refs, 0);
    CHECK(rep.threads >= 1);
    pheap_stats(h, &st);
    CHECK_EQ(st.needs_recovery, 0);
    CHECK_EQ(st.live_blocks, reach);
    CHECK_EQ(st.gc_runs, 1);
    CHECK_EQ(st.gc_marked_blocks, reach);
    CHECK(st.gc_time > 0);
    CHECK_EQ(walk(h, 0), 50);
    check_ok(h);
    REQUIRE_OK(pheap_recover(h)); /* nothing left to do */
    /* the heap works again, and hands out none of the reachable blocks */
    for (unsigned i = 0; i < 400; i++) {
        pheap_off x = pheap_alloc(h, 16 + (i % 5) * 100);
        REQUIRE(x);
        memset(pheap_direct(h, x), 0xee, pheap_usable_size(h, x));
    }
    CHECK_EQ(walk(h, 0), 50);
    for (pheap_off x = pheap_root_get(h, "list"); x; x = ((node *)pheap_direct(h, x))->next)
        CHECK(((node *)pheap_direct(h, x))->pad == 0);
    check_ok(h);
    REQUIRE_OK(pheap_close(h));
    /* a clean close after recovery: the next open trusts the bitmaps */
    REQUIRE_OK(pheap_open(image, &o, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.needs_recovery, 0);
    CHECK_EQ(st.live_blocks, reach + 400);
    check_ok(h);
    pheap_close(h);
}

TEST(close_without_recovery_stays_unclean)
{
    static char image[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("gc-norec.image"));
    uint64_t reach = crashed_heap("gc-norec.heap", 10, 5, 0, image);
    REQUIRE(reach);
    pheap *h;
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(image, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.needs_recovery, 1);
    REQUIRE_OK(pheap_recover(h));
    CHECK_EQ(live(h), reach);
    pheap_close(h);
    /* read-only: reads work, recovery is refused */
    REQUIRE_OK(pheap_open(image, &o, &h));
    pheap_sim_crash(h, NULL, 0, 0.0);
}

/* Links tagged with bit 0: invisible to the conservative tracer. */
static void list_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off;
    (void)usable;
    const node *n = block;
    pheap_trace(tr, n->next & ~1ull, list_filter);
    pheap_trace(tr, n->extra, NULL);
}

TEST(tagged_links_need_a_filter)
{
    static char image[512], image2[512]; /* ph_test_path's buffers rotate */
    snprintf(image, sizeof(image), "%s", ph_test_path("gc-tag.image"));
    snprintf(image2, sizeof(image2), "%s", ph_test_path("gc-tag2.image"));
    uint64_t reach = crashed_heap("gc-tag.heap", 40, 10, 1, image);
    REQUIRE(reach);
    pheap *h;
    REQUIRE_OK(ph_test_copy_file(image, image2));
    /* without a filter: only the head node and its extra block survive */
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    pheap_gc_report rep;
    REQUIRE_OK(pheap_recover_ex(h, NULL, &rep));
    node *head = pheap_direct(h, pheap_root_get(h, "list"));
    CHECK_EQ(rep.marked_blocks, 1 + (head->extra != 0));
    CHECK_EQ(pheap_usable_size(h, head->next & ~1ull), 0); /* the second node: free now */
    CHECK_EQ(live(h), rep.marked_blocks);
    CHECK(rep.freed_blocks >= 13); /* the large blocks of nodes not reached, at least */
    check_ok(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    /* with it: all of them */
    REQUIRE_OK(pheap_open(image2, &o, &h));
    REQUIRE_OK(pheap_root_set_filter(h, "list", list_filter));
    pheap_gc_options go = {.threads = 2};
    REQUIRE_OK(pheap_recover_ex(h, &go, &rep));
    CHECK_EQ(rep.marked_blocks, reach);
    CHECK_EQ(live(h), reach);
    CHECK_EQ(walk(h, 1), 40);
    check_ok(h);
    CHECK_EQ(pheap_root_set_filter(h, "", list_filter), PHEAP_ENAME);
    CHECK_EQ(pheap_root_set_filter(NULL, "list", list_filter), PHEAP_EINVAL);
    REQUIRE_OK(pheap_root_set_filter(h, "list", NULL));
    pheap_close(h);
}

static void bad_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)block;
    (void)usable;
    pheap_trace(tr, off + 8, NULL);   /* inside a block */
    pheap_trace(tr, 12345, NULL);     /* in the metadata */
    pheap_trace(tr, ~0ull, NULL);     /* nowhere */
    CHECK(pheap_tracer_heap(tr) != NULL);
}

TEST(filter_reports_of_no_block_are_counted)
{
    static char image[512];
    snprintf(image, sizeof(image), "%s", ph_test_path("gc-bad.image"));
    REQUIRE(crashed_heap("gc-bad.heap", 3, 0, 0, image));
    pheap *h;
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    REQUIRE_OK(pheap_root_set_filter(h, "list", bad_filter));
    pheap_gc_report rep;
    REQUIRE_OK(pheap_recover_ex(h, NULL, &rep));
    CHECK_EQ(rep.marked_blocks, 1);
    CHECK_EQ(rep.bad_refs, 3);
    check_ok(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
}

static void collect(pheap *h, uint64_t reach, uint64_t garbage)
{
    uint64_t before = live(h);
    CHECK_EQ(before, reach + garbage);
    pheap_gc_options dry = {.flags = PHEAP_GC_DRY_RUN};
    pheap_gc_report rep;
    REQUIRE_OK(pheap_gc_ex(h, &dry, &rep));
    CHECK_EQ(rep.dry_run, 1);
    CHECK_EQ(rep.marked_blocks, reach);
    CHECK_EQ(rep.freed_blocks, garbage);
    CHECK_EQ(live(h), before);
    REQUIRE_OK(pheap_gc_ex(h, NULL, &rep));
    CHECK_EQ(rep.freed_blocks, garbage);
    CHECK_EQ(live(h), reach);
    CHECK_EQ(walk(h, 0), 60);
    check_ok(h);
    REQUIRE_OK(pheap_gc(h)); /* nothing more */
    CHECK_EQ(live(h), reach);
}

TEST(collection_in_both_modes)
{
    pheap *h = ph_test_create(ph_test_path("gc-leak-log.heap"), 8u << 20);
    REQUIRE(h);
    uint64_t reach = build(h, 60, 70, 0);
    collect(h, reach, 70);
    REQUIRE_OK(pheap_tx_begin(h));
    CHECK_EQ(pheap_gc(h), PHEAP_EBUSY);
    pheap_tx_abort(h);
    pheap_close(h);
    h = create_gc(ph_test_path("gc-leak-gc.heap"), 0);
    REQUIRE(h);
    reach = build(h, 60, 70, 0);
    collect(h, reach, 70);
    pheap_close(h);
}

TEST(frees_gc_mode_still_checks)
{
    pheap *h = create_gc(ph_test_path("gc-free.heap"), 0);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), big = pheap_alloc(h, 50000);
    REQUIRE(a && big);
    CHECK_EQ(pheap_free(h, a + 8), PHEAP_EINTERIOR);
    CHECK_EQ(pheap_free(h, big + 4096), PHEAP_EINTERIOR);
    /* a block its slab still has available was never handed out */
    pheap_off far = a + 64 * 500; /* same slab: a is among its first blocks */
    CHECK_EQ(pheap_free(h, far), PHEAP_ENOTALLOC);
    REQUIRE_OK(pheap_free(h, big));
    CHECK_EQ(pheap_free(h, big), PHEAP_EDOUBLEFREE);
    /* a double free the thread cache still holds is caught when it returns */
    pheap_off v[600];
    for (unsigned i = 0; i < 600; i++)
        REQUIRE((v[i] = pheap_alloc(h, 64)) != 0);
    REQUIRE_OK(pheap_free(h, a));
    CHECK_EQ(pheap_free(h, a), 0);
    for (unsigned i = 0; i < 600; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    REQUIRE_OK(pheap_gc(h)); /* empties every cache and batch into the slabs */
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.gc_double_frees, 1);
    CHECK_EQ(st.live_blocks, 0);
    check_ok(h);
    pheap_close(h);
}

/* The fast free takes an offset only where its slab's held bit is set: at
 * the start of a block that is allocated or cached.  Every other offset
 * reaches the full call and its error, whatever its alignment; 8-byte
 * blocks (two to a held bit's 16 bytes) are freed by the full call. */
TEST(fast_free_takes_only_held_block_starts)
{
    pheap *h = create_gc(ph_test_path("gc-held.heap"), 0);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64), t = pheap_alloc(h, 48);
    REQUIRE(a && t);
    for (unsigned k = 16; k < 64; k += 16) /* inside a: 16-byte aligned, no block start */
        CHECK_EQ(pheap_free(h, a + k), PHEAP_EINTERIOR);
    CHECK_EQ(pheap_free(h, t + 16), PHEAP_EINTERIOR);
    CHECK_EQ(pheap_free(h, t + 48 * 100), PHEAP_ENOTALLOC); /* a start never handed out */
    pheap_off e[40];
    for (unsigned i = 0; i < 40; i++)
        REQUIRE((e[i] = pheap_alloc(h, 8)) != 0);
    CHECK_EQ(pheap_usable_size(h, e[0]), 8);
    for (unsigned i = 0; i < 40; i++)
        REQUIRE_OK(pheap_free(h, e[i]));
    /* a block back in its slab (the caches emptied) is free there: refused */
    REQUIRE_OK(pheap_free(h, t));
    REQUIRE_OK(pheap_gc(h));
    CHECK_EQ(pheap_free(h, t), PHEAP_EDOUBLEFREE);
    CHECK_EQ(pheap_free(h, e[7]), PHEAP_EDOUBLEFREE);
    /* handed out again from the slab: the fast free takes it once more */
    pheap_off v[3000];
    unsigned n = 0, again = 0;
    for (; n < 3000; n++) {
        REQUIRE((v[n] = pheap_alloc(h, 48)) != 0);
        again |= v[n] == t;
    }
    CHECK(again);
    for (unsigned i = 0; i < n; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    REQUIRE_OK(pheap_free(h, a));
    CHECK_EQ(live(h), 0);
    check_ok(h); /* includes the held bits against the available sets */
    REQUIRE_OK(pheap_gc(h));
    check_ok(h);
    pheap_close(h);
}

/* What one held bit cannot tell (GC.md, the double-free row): a block in
 * the thread's cache that no allocation handed out is accepted by a free,
 * handed out twice, and counted when the caches go back to their slabs;
 * once back, it is refused as a double free. */
TEST(free_of_a_cached_block_is_caught_when_it_returns)
{
    pheap *h = create_gc(ph_test_path("gc-cached.heap"), 0);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, 64); /* the refill's highest block: the one below is cached */
    REQUIRE(a);
    CHECK_EQ(pheap_free(h, a - 64), 0); /* the cache holds it twice now */
    REQUIRE_OK(pheap_thread_collect(h)); /* the cache goes back: the second copy is counted */
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.gc_double_frees, 1);
    CHECK_EQ(st.live_blocks, 1);
    CHECK_EQ(pheap_free(h, a - 64), PHEAP_EDOUBLEFREE); /* back in its slab: refused */
    REQUIRE_OK(pheap_free(h, a));
    check_ok(h);
    pheap_close(h);
    /* meanwhile, the block may be handed out twice */
    h = create_gc(ph_test_path("gc-cached2.heap"), 0);
    REQUIRE(h);
    pheap_off b = pheap_alloc(h, 64);
    REQUIRE(b);
    CHECK_EQ(pheap_free(h, b - 64), 0);
    pheap_off v[2000];
    unsigned twice = 0;
    for (unsigned i = 0; i < 2000; i++) {
        REQUIRE((v[i] = pheap_alloc(h, 64)) != 0);
        twice += v[i] == b - 64;
    }
    CHECK_EQ(twice, 2);
    int freed = 0;
    for (unsigned i = 0; i < 2000; i++)
        if (v[i] != b - 64 || !freed++)
            REQUIRE_OK(pheap_free(h, v[i]));
    REQUIRE_OK(pheap_free(h, b));
    REQUIRE_OK(pheap_thread_collect(h));
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(st.gc_double_frees, 0); /* both copies were handed out and freed once each */
    check_ok(h);
    pheap_close(h);
}

/* A thread that exits hands its cache on as batches: its blocks stay out
 * of their slabs (counted as cached, not live) and the next thread's
 * refill takes them whole. */
typedef struct churn_arg {
    pheap *h;
    pheap_off v[300];
    uint64_t cached;        /* cached_blocks just before the exit */
    int fail;
} churn_arg;

static void *alloc_free_exit(void *arg)
{
    churn_arg *a = arg;
    for (unsigned i = 0; i < 300; i++)
        a->fail |= !(a->v[i] = pheap_alloc(a->h, 64));
    for (unsigned i = 0; i < 300; i++)
        a->fail |= pheap_free(a->h, a->v[i]) != 0;
    struct pheap_stats st;
    pheap_stats(a->h, &st);
    a->cached = st.cached_blocks;
    return NULL;
}

static void *alloc_only(void *arg)
{
    churn_arg *a = arg;
    for (unsigned i = 0; i < 300; i++)
        a->fail |= !(a->v[i] = pheap_alloc(a->h, 64));
    return NULL;
}

static int cmp_off(const void *a, const void *b)
{
    pheap_off x = *(const pheap_off *)a, y = *(const pheap_off *)b;
    return (x > y) - (x < y);
}

TEST(an_exiting_thread_hands_its_cache_on)
{
    pheap *h = create_gc(ph_test_path("gc-handon.heap"), 0);
    REQUIRE(h);
    churn_arg first = {.h = h}, next = {.h = h};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, alloc_free_exit, &first) == 0);
    pthread_join(t, NULL);
    REQUIRE(!first.fail);
    REQUIRE(first.cached >= 300);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.cached_blocks, first.cached); /* in batches now */
    CHECK_EQ(st.live_blocks, 0);
    uint64_t slabs = st.slabs;
    REQUIRE(pthread_create(&t, NULL, alloc_only, &next) == 0);
    pthread_join(t, NULL);
    REQUIRE(!next.fail);
    /* the second thread's refill took the first one's blocks: no new slab,
     * and its 300 blocks are the first thread's (a cache pops what was
     * pushed last) */
    qsort(first.v, 300, sizeof(pheap_off), cmp_off);
    qsort(next.v, 300, sizeof(pheap_off), cmp_off);
    CHECK(memcmp(first.v, next.v, sizeof(first.v)) == 0);
    pheap_stats(h, &st);
    CHECK_EQ(st.slabs, slabs);
    CHECK_EQ(st.live_blocks, 300);
    CHECK_EQ(st.cached_blocks, first.cached - 300);
    for (unsigned i = 0; i < 300; i++)
        REQUIRE_OK(pheap_free(h, next.v[i]));
    REQUIRE_OK(pheap_thread_collect(h)); /* this thread's cache and the batches */
    pheap_stats(h, &st);
    CHECK_EQ(st.cached_blocks, 0);
    CHECK_EQ(st.live_blocks, 0);
    CHECK_EQ(st.gc_double_frees, 0);
    check_ok(h);
    pheap_close(h);
}

/* Conservative tracing keeps a block that a stale word happens to name:
 * the documented superset.  A filter that reports only the real links
 * frees it. */
static void first_word_only(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off;
    (void)usable;
    pheap_trace(tr, ((const pheap_off *)block)[0], NULL);
}

TEST(stale_word_keeps_a_block_conservatively)
{
    const char *path = ph_test_path("gc-stale.heap"), *image = ph_test_path("gc-stale.image");
    const char *image2 = ph_test_path("gc-stale2.image");
    pheap *h = create_gc(path, PHEAP_SIMULATE);
    REQUIRE(h);
    pheap_off top = pheap_alloc(h, 64), child = pheap_alloc(h, 64), stale = pheap_alloc(h, 200);
    REQUIRE(top && child && stale);
    pheap_off *w = pheap_direct(h, top);
    memset(w, 0, 64);
    w[0] = child;
    w[3] = stale; /* an integer that happens to equal a block's offset */
    pheap_persist(h, w, 64);
    REQUIRE_OK(pheap_root_set(h, "top", top));
    crash(h, image);
    REQUIRE_OK(ph_test_copy_file(image, image2));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(image, &o, &h));
    pheap_gc_report rep;
    REQUIRE_OK(pheap_recover_ex(h, NULL, &rep));
    CHECK_EQ(rep.marked_blocks, 3);
    CHECK(pheap_usable_size(h, stale) >= 200);
    pheap_sim_crash(h, NULL, 0, 0.0);
    REQUIRE_OK(pheap_open(image2, &o, &h));
    REQUIRE_OK(pheap_root_set_filter(h, "top", first_word_only));
    REQUIRE_OK(pheap_recover_ex(h, NULL, &rep));
    CHECK_EQ(rep.marked_blocks, 2);
    CHECK_EQ(pheap_usable_size(h, stale), 0);
    CHECK_EQ(pheap_usable_size(h, child), 64);
    check_ok(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
}

/* A root block holding thousands of offsets: the marking thread that scans
 * it shares half its stack with the others again and again, while they
 * take from the pool (run under TSan: the pool's count is read outside
 * its lock).  Every block is marked once, none freed. */
TEST(marking_threads_share_a_wide_root)
{
    enum { N = 20000 };
    pheap *h = ph_test_create(ph_test_path("gc-wide.heap"), 16u << 20);
    REQUIRE(h);
    pheap_off arr = pheap_alloc(h, N * sizeof(pheap_off));
    REQUIRE(arr);
    for (unsigned i = 0; i < N; i++) {
        pheap_off o = pheap_alloc(h, 32);
        REQUIRE(o);
        memset(pheap_direct(h, o), 0, 32);
        ((pheap_off *)pheap_direct(h, arr))[i] = o;
    }
    REQUIRE_OK(pheap_root_set(h, "wide", arr));
    pheap_gc_options o = {.threads = 4};
    for (unsigned round = 0; round < 20; round++) {
        pheap_gc_report rep;
        REQUIRE_OK(pheap_gc_ex(h, &o, &rep));
        CHECK_EQ(rep.marked_blocks, N + 1);
        CHECK_EQ(rep.freed_blocks, 0);
    }
    CHECK_EQ(live(h), N + 1);
    check_ok(h);
    REQUIRE_OK(pheap_close(h));
}

/* With PHEAP_GC_SELF_RELATIVE a self-relative word (pheap::ptr of
 * pheap.hpp: the target's offset minus the word's own offset, plus 1)
 * keeps its block under conservative tracing, backwards and forwards, and
 * pheap_gc frees only the block no word reaches either way; without the
 * flag such words are integers (a dry run would free both blocks). */
TEST(self_relative_words_keep_blocks)
{
    pheap *h = ph_test_create(ph_test_path("gc-selfrel.heap"), 8u << 20);
    REQUIRE(h);
    pheap_off top = pheap_alloc(h, 64), before = pheap_alloc(h, 4096 * 8);
    pheap_off after = pheap_alloc(h, 48), lost = pheap_alloc(h, 48);
    REQUIRE(top && before && after && lost);
    uint64_t *w = pheap_direct(h, top);
    memset(w, 0, 64);
    w[1] = after - (top + 8) + 1;  /* a word at offset top + 8 */
    w[5] = before - (top + 40) + 1; /* modulo 2^64: lower or higher alike */
    w[6] = 1;                       /* a word pointing at itself: nothing to keep */
    pheap_persist(h, w, 64);
    REQUIRE_OK(pheap_root_set(h, "top", top));
    pheap_gc_report rep;
    pheap_gc_options o = {.flags = PHEAP_GC_DRY_RUN};
    REQUIRE_OK(pheap_gc_ex(h, &o, &rep));
    CHECK_EQ(rep.marked_blocks, 1);
    CHECK_EQ(rep.freed_blocks, 3);
    o.flags = PHEAP_GC_SELF_RELATIVE | 0x80;
    CHECK_EQ(pheap_gc_ex(h, &o, &rep), PHEAP_EINVAL);
    o.flags = PHEAP_GC_SELF_RELATIVE;
    REQUIRE_OK(pheap_gc_ex(h, &o, &rep));
    CHECK_EQ(rep.marked_blocks, 3);
    CHECK_EQ(rep.freed_blocks, 1);
    CHECK(pheap_usable_size(h, before) >= 4096 * 8);
    CHECK_EQ(pheap_usable_size(h, after), 48);
    CHECK_EQ(pheap_usable_size(h, lost), 0);
    check_ok(h);
    pheap_close(h);
}
