/*
 * protect_keys.c -- protection keys (PHEAP_PROTECT_KEYS): offered only
 * where the CPU and the kernel have them (or the emulation is asked for);
 * with them, stray stores into every metadata region trap; pheap's own
 * code writes only inside its window, which it shuts around the program's
 * initialisers and filters; threads that never ran pheap's code, thread
 * exits and the marking threads use the heap; simulated, grown, read-only
 * and snapshot opens work.
 *
 * Run three ways (tests/CMakeLists.txt): as it is (keys where the machine
 * has them; each test but the first says "skipped" elsewhere), with
 * PHEAP_KEYS_EMULATE=1 (the emulation, on any machine), and with
 * PHEAP_KEYS_EMULATE=fallback.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/keys.h"
#include "format/layout.h"
#include "harness.h"
#include "heap/heap.h"
#include "traps.h"

#define MiB (1024u * 1024u)
#define STRAYS 1000 /* stray stores per region */

static pheap *open_keyed(const char *path, uint64_t size, unsigned flags)
{
    pheap_options o = {.size = size, .max_size = 256 * MiB, .flags = flags,
                       .protect = PHEAP_PROTECT_KEYS};
    pheap *h = NULL;
    int rc = pheap_open(path, &o, &h);
    if (rc)
        fprintf(stderr, "  open %s: %s\n", path, pheap_errmsg());
    return h;
}

static int skipped(void)
{
    if (keys_available())
        return 0;
    fprintf(stderr, "  skipped: no protection keys here (the emulated run covers it)\n");
    return 1;
}

/* Emulated keys leave guarded blocks writable (alloc/keys.h). */
static int guarded_blocks_trap(void)
{
    return ph_keys_in_use == PH_KEYS_HW;
}

TEST(keys_offered_only_where_they_work)
{
    const char *path = ph_test_path("offer.heap");
    pheap *h = ph_test_create(path, 4 * MiB);
    REQUIRE(h);
    pheap_close(h);
    static const unsigned flags[] = {0, PHEAP_RDONLY, PHEAP_SNAPSHOT};
    static const unsigned expect[] = {PHEAP_PROTECT_KEYS, PHEAP_PROTECT_READONLY,
                                      PHEAP_PROTECT_KEYS /* what read-write opens use */};
    for (unsigned i = 0; i < 3; i++) {
        pheap_options o = {.flags = flags[i], .protect = PHEAP_PROTECT_KEYS};
        h = NULL;
        int rc = pheap_open(path, &o, &h);
        if (!keys_available()) { /* refused, for every kind of open */
            CHECK_EQ(rc, PHEAP_ENOTSUP);
            CHECK(strstr(pheap_errmsg(), "protection keys") != NULL);
            CHECK(h == NULL);
            continue;
        }
        REQUIRE_OK(rc);
        struct pheap_stats st;
        REQUIRE_OK(pheap_stats(h, &st));
        CHECK_EQ(st.protection, expect[i]);
        CHECK(strcmp(pheap_protect_name(PHEAP_PROTECT_KEYS), "keys") == 0);
        REQUIRE_OK(pheap_check(h, NULL));
        pheap_close(h);
    }
    setenv("PHEAP_PROTECT", "keys", 1); /* the environment asks the same */
    int rc = pheap_open(path, NULL, &h);
    unsetenv("PHEAP_PROTECT");
    CHECK_EQ(rc, keys_available() ? 0 : PHEAP_ENOTSUP);
    if (!rc)
        pheap_close(h);
    h = ph_test_open(path, NULL); /* a refusal changed nothing: alias opens it */
    REQUIRE(h);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* A heap with something in every metadata structure, keyed. */
static pheap *busy_keyed(const char *path, pheap_off *seg)
{
    pheap *h = open_keyed(path, 16 * MiB, PHEAP_CREATE | PHEAP_EXCL);
    if (!h)
        return NULL;
    for (unsigned i = 0; i < 100; i++)
        if (!pheap_alloc(h, 16 + i * 8) || !pheap_alloc(h, 20000 + i))
            return NULL;
    char name[32];
    for (unsigned i = 0; i < 300; i++) {
        snprintf(name, sizeof(name), "object-%u", i);
        if (!pheap_alloc_named(h, name, 32))
            return NULL;
    }
    if (pheap_root_set(h, "list", pheap_alloc(h, 64)) != 0 || pheap_tx_begin(h) != 0 ||
        !pheap_tx_alloc(h, 100) || pheap_tx_commit(h) != 0)
        return NULL;
    *seg = first_segment(h, path);
    return h;
}

TEST(stray_stores_trap_with_keys)
{
    if (skipped())
        return;
    const char *path = ph_test_path("stray.heap");
    pheap_off seg = 0;
    pheap *h = busy_keyed(path, &seg);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.protection, PHEAP_PROTECT_KEYS);
    CHECK(st.guarded_blocks >= 1);
    char *view = view_of(h);
    CHECK(view == h->sp.base); /* one mapping */
    uint64_t seed = 7;
    region_strays(path, view, st.data_offset, STRAYS, &seed);
    if (guarded_blocks_trap())
        CHECK_EQ(strays(view, seg, 4 * PH_PAGE_SIZE, STRAYS, &seed), 0);
    pheap_off mine = pheap_alloc(h, 100);
    CHECK_EQ(store_traps(view + mine, 1), 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    h = open_keyed(path, 0, 0);
    REQUIRE(h);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 300);
    CHECK(pheap_lookup(h, "object-123") != 0);
    pheap_close(h);
}

/* ---- the program's code runs outside the window ---------------------- */

static uint64_t lanes_off;
static unsigned init_trapped, filter_trapped, filter_calls;

static int init_tries_metadata(pheap *h, void *block, size_t usable, void *arg)
{
    (void)arg;
    memset(block, 0x11, usable); /* its own block: fine */
    init_trapped += store_traps(view_of(h) + lanes_off + 64, 1) == 1;
    return 0;
}

static unsigned progress_trapped, progress_calls;
static pheap *progress_heap;

static void progress_tries_metadata(void *arg, const char *phase, uint64_t done, uint64_t total)
{
    (void)arg, (void)phase, (void)done, (void)total;
    progress_calls++;
    progress_trapped += store_traps(view_of(progress_heap) + lanes_off + 64, 1) == 1;
}

static void filter_tries_metadata(pheap_tracer *tr, pheap_off off, const void *block,
                                  size_t usable)
{
    (void)off, (void)block, (void)usable;
    filter_calls++;
    filter_trapped += store_traps(view_of(pheap_tracer_heap(tr)) + lanes_off + 64, 1) == 1;
}

TEST(initialisers_and_filters_run_outside_the_window)
{
    if (skipped())
        return;
    const char *path = ph_test_path("calls.heap");
    pheap *h = open_keyed(path, 8 * MiB, PHEAP_CREATE | PHEAP_EXCL);
    REQUIRE(h);
    lanes_off = ph_test_region_offset(path, PH_REGION_LANES);
    pheap_off b = pheap_alloc_init(h, 200, 0, init_tries_metadata, NULL);
    REQUIRE(b);
    CHECK_EQ(init_trapped, 1);
    CHECK(((unsigned char *)pheap_direct(h, b))[199] == 0x11);
    pheap_off slot = pheap_alloc(h, 8);
    REQUIRE(slot);
    REQUIRE_OK(pheap_alloc_to_init(h, 300, pheap_direct(h, slot), 0, init_tries_metadata, NULL));
    CHECK_EQ(init_trapped, 2);
    REQUIRE(pheap_alloc_named_init(h, "named", 64, 0, init_tries_metadata, NULL) != 0);
    CHECK_EQ(init_trapped, 3);
    REQUIRE_OK(pheap_root_set(h, "b", b));
    REQUIRE_OK(pheap_root_set_filter(h, "b", filter_tries_metadata));
    /* Keys are per thread: the filter runs on a marking thread while the
     * caller's window is open.  Emulated windows are for every thread at
     * once, so there the filter runs on the calling thread. */
    pheap_gc_options go = {.threads = ph_keys_in_use == PH_KEYS_HW ? 2 : 1,
                           .progress = progress_tries_metadata};
    progress_heap = h;
    REQUIRE_OK(pheap_gc_ex(h, &go, NULL));
    CHECK_EQ(filter_calls, 1);
    CHECK_EQ(filter_trapped, 1);
    CHECK(progress_calls >= 1); /* the sweep's last report at least */
    CHECK_EQ(progress_trapped, progress_calls);
    pheap_off after = pheap_alloc(h, 64); /* the window works again after each */
    CHECK(after != 0);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* ---- threads --------------------------------------------------------- */

/* A thread that denies itself every key but the default one -- what a
 * thread that never ran pheap's code has on Linux -- then uses the heap
 * and exits with blocks in its cache (the exit returns them). */
static void *stranger(void *arg)
{
    pheap *h = arg;
    if (ph_keys_in_use == PH_KEYS_HW)
        for (int k = 1; k < 16; k++)
            (void)pkey_set(k, PKEY_DISABLE_ACCESS);
    char name[32];
    snprintf(name, sizeof(name), "t-%lx", (unsigned long)pthread_self());
    for (unsigned i = 0; i < 2000; i++) {
        pheap_off b = pheap_alloc(h, 24 + i % 200);
        if (!b || (i % 3 == 0 && pheap_free(h, b) != 0))
            return (void *)1;
    }
    struct pheap_stats st;
    int gc = pheap_stats(h, &st) != 0 || st.consistency == PHEAP_CONSISTENCY_GC;
    if (!pheap_alloc_named(h, name, 48) ||
        (!gc && (pheap_tx_begin(h) != 0 || !pheap_tx_alloc(h, 80) || pheap_tx_commit(h) != 0))) {
        fprintf(stderr, "  thread: %s\n", pheap_errmsg());
        return (void *)1;
    }
    return NULL;
}

static void threads_use(unsigned consistency);

TEST(threads_without_rights_and_thread_exits)
{
    if (skipped())
        return;
    for (unsigned gc = 0; gc < 2; gc++)
        threads_use(gc ? PHEAP_CONSISTENCY_GC : PHEAP_CONSISTENCY_LOG);
}

static void threads_use(unsigned consistency)
{
    const char *path = ph_test_path("threads.heap");
    unlink(path);
    pheap *h = ph_test_create_mode(path, 16 * MiB, consistency, 0);
    REQUIRE(h);
    pheap_close(h);
    h = open_keyed(path, 0, 0);
    REQUIRE(h);
    pthread_t t[6];
    for (unsigned i = 0; i < 6; i++)
        REQUIRE(pthread_create(&t[i], NULL, stranger, h) == 0);
    for (unsigned i = 0; i < 6; i++) {
        void *r = NULL;
        pthread_join(t[i], &r);
        CHECK(r == NULL);
    }
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, 6);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_off live = st.live_blocks;
    REQUIRE_OK(pheap_close(h));
    h = open_keyed(path, 0, 0);
    REQUIRE(h);
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.live_blocks, live);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* GC mode: pheap_recover's marking threads, after a crash image. */
TEST(gc_recovery_marks_with_keys)
{
    if (skipped())
        return;
    const char *path = ph_test_path("gc.heap");
    pheap *h = ph_test_create_mode(path, 16 * MiB, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(h);
    pheap_close(h);
    pheap_options o = {.flags = PHEAP_SIMULATE, .protect = PHEAP_PROTECT_KEYS};
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off head = 0;
    for (unsigned i = 0; i < 5000; i++) { /* a list, and garbage */
        pheap_off n = pheap_alloc(h, 32);
        REQUIRE(n);
        if (i % 2 == 0) {
            pheap_off *w = pheap_direct(h, n);
            *w = head;
            pheap_persist(h, w, sizeof(*w));
            head = n;
        }
    }
    REQUIRE_OK(pheap_root_set(h, "list", head));
    const char *img = ph_test_path("gc.image");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    REQUIRE_OK(pheap_open(img, &(pheap_options){.protect = PHEAP_PROTECT_KEYS}, &h));
    pheap_gc_options go = {.threads = 2};
    pheap_gc_report rep;
    REQUIRE_OK(pheap_recover_ex(h, &go, &rep));
    CHECK(rep.threads >= 1);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.live_blocks, 2500); /* the list; the garbage went */
    CHECK_EQ(st.protection, PHEAP_PROTECT_KEYS);
    REQUIRE_OK(pheap_check(h, NULL));
    CHECK(pheap_alloc(h, 64) != 0);
    pheap_close(h);
}

/* Simulated heaps, growth, every flush back end, read-only opens and
 * snapshots, keyed. */
TEST(simulated_grown_readonly_and_snapshot_opens)
{
    if (skipped())
        return;
    static const unsigned flush[] = {PHEAP_FLUSH_MSYNC, PHEAP_FLUSH_NONE, PHEAP_FLUSH_AUTO};
    for (unsigned k = 0; k < 3; k++) {
        const char *path = ph_test_path("grow.heap");
        unlink(path);
        pheap_options c = {.size = 4 * MiB, .max_size = 128 * MiB, .flush = flush[k],
                           .flags = PHEAP_CREATE | PHEAP_EXCL, .protect = PHEAP_PROTECT_KEYS};
        pheap *h = NULL;
        REQUIRE_OK(pheap_open(path, &c, &h));
        pheap_close(h);
        pheap_options o = {.flush = flush[k], .flags = k == 0 ? PHEAP_SIMULATE : 0,
                           .protect = PHEAP_PROTECT_KEYS};
        REQUIRE_OK(pheap_open(path, &o, &h));
        pheap_off big = pheap_alloc(h, 40 * MiB); /* growth */
        REQUIRE(big);
        char *p = pheap_direct(h, big);
        memset(p, 0x3c, 40 * MiB);
        pheap_persist(h, p, 40 * MiB);
        REQUIRE_OK(pheap_root_set(h, "big", big));
        char name[32];
        for (unsigned i = 0; i < 1500; i++) { /* segments, some in the grown space */
            snprintf(name, sizeof(name), "g%u", i);
            REQUIRE(pheap_alloc_named(h, name, 16) != 0);
        }
        char *view = view_of(h);
        CHECK_EQ(store_traps(view + ph_test_region_offset(path, PH_REGION_SLABS) + 64, 1), 1);
        CHECK_EQ(store_traps(p + 40 * MiB - 1, 0x3c), 0);
        REQUIRE_OK(pheap_check(h, NULL));
        if (k == 0) { /* the crash image holds what was persisted */
            const char *img = ph_test_path("grow.image");
            REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
            path = img;
        } else {
            REQUIRE_OK(pheap_close(h));
        }
        static const unsigned kinds[] = {0, PHEAP_RDONLY, PHEAP_SNAPSHOT};
        for (unsigned r = 0; r < 3; r++) {
            o = (pheap_options){.flags = kinds[r], .protect = PHEAP_PROTECT_KEYS};
            REQUIRE_OK(pheap_open(path, &o, &h));
            REQUIRE_EQ(pheap_root_get(h, "big"), big);
            const unsigned char *q = pheap_direct(h, big);
            CHECK(q[0] == 0x3c && q[40 * MiB - 1] == 0x3c);
            CHECK(pheap_lookup(h, "g1499") != 0);
            REQUIRE_OK(pheap_check(h, NULL));
            pheap_close(h);
        }
    }
}

/* ---- what a call hands back lands as the program's own store --------
 * An out-parameter pointing at metadata (a stale pointer into a block
 * that became a directory segment, or another heap's header) traps in the
 * call as the program's store would, under both kinds of protection. */

typedef struct out_case {
    const char *path;
    unsigned kind;
    uint64_t at; /* offset of the metadata the result is aimed at */
    int which;
} out_case;

/* In a child: its own handle (an inherited one refuses every call). */
static void hand_back(void *arg)
{
    out_case *c = arg;
    pheap_options o = {.protect = c->kind};
    pheap *h = NULL;
    if (pheap_open(c->path, &o, &h) != 0)
        _exit(3);
    void *at = view_of(h) + c->at;
    switch (c->which) {
    case 0:
        (void)pheap_stats(h, at);
        break;
    case 1:
        (void)pheap_check(h, at);
        break;
    case 2:
        (void)pheap_name_next(h, NULL, at);
        break;
    case 3:
        (void)pheap_root_at(h, 0, at, &(pheap_off){0});
        break;
    case 4:
        (void)pheap_gc_ex(h, NULL, at);
        break;
    default:
        (void)pheap_stats_class(h, 0, at);
        break;
    }
    _exit(0); /* the heap stays open: no clean close from the child */
}

TEST(results_land_where_the_program_would_store)
{
    static const unsigned kinds[] = {PHEAP_PROTECT_ALIAS, PHEAP_PROTECT_KEYS};
    for (unsigned k = 0; k < 2; k++) {
        if (kinds[k] == PHEAP_PROTECT_KEYS && skipped())
            return;
        const char *path = ph_test_path("out.heap");
        unlink(path);
        pheap_options o = {.size = 8 * MiB, .flags = PHEAP_CREATE | PHEAP_EXCL,
                           .protect = kinds[k]};
        pheap *h = NULL;
        REQUIRE_OK(pheap_open(path, &o, &h));
        REQUIRE(pheap_alloc_named(h, "first", 64) != 0);
        REQUIRE_OK(pheap_root_set(h, "r", pheap_alloc(h, 32)));
        REQUIRE_OK(pheap_close(h));
        uint64_t lanes = ph_test_region_offset(path, PH_REGION_LANES);
        for (int w = 0; w < 6; w++) {
            out_case c = {path, kinds[k], lanes + 256, w};
            if (child_traps(hand_back, &c) != 1)
                ph_test_fail(__FILE__, __LINE__, "%s: call %d wrote its result into metadata",
                             pheap_protect_name(kinds[k]), w);
        }
        h = ph_test_open(path, NULL);
        REQUIRE(h);
        REQUIRE_OK(pheap_check(h, NULL));
        CHECK(pheap_lookup(h, "first") != 0);
        pheap_close(h);
    }
}
