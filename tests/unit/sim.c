/*
 * sim.c -- the crash simulator itself: what reaches the durable image and
 * what does not, eviction per cache line and by seed, crash images taken
 * at a given fence, and the close of a simulated heap.
 */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "heap/heap.h"
#include "persist/sim.h"

#define HEAP_SIZE (4u << 20)

static const char *base_heap(void)
{
    const char *path = ph_test_path("sim-base.heap");
    if (access(path, F_OK) != 0)
        pheap_close(ph_test_create(path, HEAP_SIZE));
    return path;
}

static pheap *open_sim(const pheap_options *extra)
{
    pheap_options o = extra ? *extra : (pheap_options){0};
    o.flags |= PHEAP_SIMULATE;
    pheap *h = NULL;
    if (pheap_open(base_heap(), &o, &h) != 0)
        ph_test_fail(__FILE__, __LINE__, "open sim: %s", pheap_errmsg());
    return h;
}

/* Reads `len` bytes at heap offset `off` of an image file. */
static void read_image(const char *path, uint64_t off, void *buf, size_t len)
{
    int fd = open(path, O_RDONLY);
    memset(buf, 0xEE, len);
    if (fd < 0 || pread(fd, buf, len, (off_t)off) != (ssize_t)len)
        ph_test_fail(__FILE__, __LINE__, "read %s", path);
    if (fd >= 0)
        close(fd);
}

static uint64_t file_len(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

static uint64_t data_off(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.data_offset;
}

TEST(fenced_present_unfenced_absent)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *fenced = pheap_direct(h, d), *flushed = pheap_direct(h, d + 64),
             *dirty = pheap_direct(h, d + 128);
    *fenced = 0x1111;
    pheap_persist(h, fenced, 8);
    *flushed = 0x2222;
    pheap_flush(h, flushed, 8);
    *dirty = 0x3333;
    const char *img = ph_test_path("img1");
    REQUIRE_OK(pheap_sim_crash(h, img, 42, 0.0));
    uint64_t v[3];
    read_image(img, d, &v[0], 8);
    read_image(img, d + 64, &v[1], 8);
    read_image(img, d + 128, &v[2], 8);
    CHECK_EQ(v[0], 0x1111);
    CHECK_EQ(v[1], 0);
    CHECK_EQ(v[2], 0);
}

TEST(evict_all_takes_current_contents)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *flushed = pheap_direct(h, d + 64), *dirty = pheap_direct(h, d + 128);
    *flushed = 0x2222;
    pheap_flush(h, flushed, 8);
    *flushed = 0x2223; /* stored after the flush: eviction sees the newest */
    *dirty = 0x3333;
    const char *img = ph_test_path("img2");
    REQUIRE_OK(pheap_sim_crash(h, img, 42, 1.0));
    uint64_t v[2];
    read_image(img, d + 64, &v[0], 8);
    read_image(img, d + 128, &v[1], 8);
    CHECK_EQ(v[0], 0x2223);
    CHECK_EQ(v[1], 0x3333);
}

TEST(flush_snapshots_contents)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    *w = 1;
    pheap_flush(h, w, 8);
    *w = 2; /* after the flush, before the fence: not covered by it */
    pheap_drain(h);
    const char *img = ph_test_path("img3");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    uint64_t v;
    read_image(img, d, &v, 8);
    CHECK_EQ(v, 1);
}

/* A non-temporal store is durable at the fence by itself: the rest of its
 * line, dirty in the cache, is not carried along (a flush would carry it). */
TEST(nt_store_covers_only_its_word)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *line = pheap_direct(h, d);
    line[1] = 0x5555; /* dirty, never flushed */
    ph_persist_store_nt(&h->sp.persist, ph_heap_pctx(h), &line[0], 0x4444);
    ph_persist_fence(&h->sp.persist, ph_heap_pctx(h));
    ph_persist_store_nt_words(&h->sp.persist, ph_heap_pctx(h), &line[4],
                              (const uint64_t[2]){0x7777, 0x8888}, 2);
    line[6] = 0x9999; /* dirty, never flushed */
    ph_persist_fence(&h->sp.persist, ph_heap_pctx(h));
    ph_persist_store_nt(&h->sp.persist, ph_heap_pctx(h), &line[2], 0x6666); /* not fenced */
    const char *img = ph_test_path("img-nt");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    uint64_t v[7];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 0x4444);
    CHECK_EQ(v[1], 0);
    CHECK_EQ(v[2], 0);
    CHECK_EQ(v[4], 0x7777);
    CHECK_EQ(v[5], 0x8888);
    CHECK_EQ(v[6], 0);
}

/* Dirties `n` lines with a pattern and crashes with eviction p. */
static void dirty_lines_crash(const char *img, unsigned n, uint64_t seed, double p)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    unsigned char *a = pheap_direct(h, data_off(h));
    for (unsigned i = 0; i < n * 64; i++)
        a[i] = (unsigned char)(i % 251 + 1);
    REQUIRE_OK(pheap_sim_crash(h, img, seed, p));
}

TEST(eviction_per_line_and_by_seed)
{
    enum { N = 2000 };
    static unsigned char x[N * 64], y[N * 64], z[N * 64];
    const char *ia = ph_test_path("ev-a"), *ib = ph_test_path("ev-b"), *ic = ph_test_path("ev-c");
    dirty_lines_crash(ia, N, 7, 0.5);
    dirty_lines_crash(ib, N, 7, 0.5);
    dirty_lines_crash(ic, N, 8, 0.5);
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    pheap_sim_crash(h, NULL, 0, 0);
    read_image(ia, d, x, sizeof(x));
    read_image(ib, d, y, sizeof(y));
    read_image(ic, d, z, sizeof(z));
    CHECK(memcmp(x, y, sizeof(x)) == 0); /* same seed, same image */
    unsigned evicted = 0, differ = 0;
    for (unsigned l = 0; l < N; l++) {
        unsigned news = 0;
        for (unsigned b = 0; b < 64; b++)
            news += x[l * 64 + b] == (unsigned char)((l * 64 + b) % 251 + 1);
        CHECK(news == 0 || news == 64); /* whole lines only */
        evicted += news == 64;
        differ += memcmp(x + l * 64, z + l * 64, 64) != 0;
        CHECK_EQ(news == 64, ph_sim_evicts(7, (d + l * 64) / 64, 0.5));
    }
    CHECK(evicted > N * 4 / 10 && evicted < N * 6 / 10);
    CHECK(differ > N / 4); /* another seed, another subset */
}

TEST(crash_image_at_fence)
{
    const char *img = ph_test_path("at-fence");
    unlink(img);
    /* fence 1 is the open; 2 persists a, 3 persists b */
    pheap_options o = {.sim_crash_fence = 3, .sim_crash_image = img};
    pheap *h = open_sim(&o);
    REQUIRE(h);
    CHECK_EQ(pheap_sim_fence_count(h), 1);
    uint64_t d = data_off(h);
    uint64_t *a = pheap_direct(h, d), *b = pheap_direct(h, d + 64);
    *a = 0xA;
    pheap_persist(h, a, 8);
    CHECK_EQ(pheap_sim_fence_count(h), 2);
    CHECK(access(img, F_OK) != 0);
    *b = 0xB;
    pheap_persist(h, b, 8);
    CHECK_EQ(pheap_sim_fence_count(h), 3);
    REQUIRE(access(img, F_OK) == 0);
    uint64_t v[2];
    read_image(img, d, &v[0], 8);
    read_image(img, d + 64, &v[1], 8);
    CHECK_EQ(v[0], 0xA);
    CHECK_EQ(v[1], 0);
    pheap_sim_crash(h, NULL, 0, 0);
    /* The image is a heap that was not closed cleanly. */
    pheap *r;
    REQUIRE_OK(pheap_open(img, NULL, &r));
    struct pheap_stats st;
    pheap_stats(r, &st);
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(*(uint64_t *)pheap_direct(r, d), 0xA);
    REQUIRE_OK(pheap_check(r, NULL));
    pheap_close(r);
}

TEST(close_writes_durable_image_only)
{
    const char *path = ph_test_path("sim-close.heap");
    pheap_close(ph_test_create(path, HEAP_SIZE));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    uint64_t d = data_off(h);
    uint64_t *a = pheap_direct(h, d), *b = pheap_direct(h, d + 64);
    *a = 0xA;
    pheap_persist(h, a, 8);
    *b = 0xB; /* never flushed: lost at close, as at a power failure */
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(*(uint64_t *)pheap_direct(h, d), 0xA);
    CHECK_EQ(*(uint64_t *)pheap_direct(h, d + 64), 0);
    pheap_close(h);
}

TEST(sim_errors)
{
    pheap *h = ph_test_create(ph_test_path("plain.heap"), HEAP_SIZE);
    REQUIRE(h);
    CHECK_EQ(pheap_sim_crash(h, ph_test_path("x"), 0, 0), PHEAP_EINVAL);
    CHECK_EQ(pheap_sim_fence_count(h), 0);
    pheap_close(h); /* still open after the refused call */
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = 3};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL); /* no image path */
    o = (pheap_options){.sim_crash_fence = 3, .sim_crash_image = "x"};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL); /* not simulating */
    h = open_sim(NULL);
    REQUIRE(h);
    CHECK_EQ(pheap_sim_crash(h, ph_test_path("y"), 0, 2.0), PHEAP_EINVAL);
}

/* PHEAP_SIM_WORDS: each 8-byte word of a dirty line joins on its own, so
 * a line can hold a mix of old and new words; whole lines still can. */
TEST(words_join_on_their_own)
{
    enum { N = 1000 };
    pheap_options o = {.sim_mode = PHEAP_SIM_WORDS};
    pheap *h = open_sim(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *a = pheap_direct(h, d);
    for (unsigned i = 0; i < N * 8; i++)
        a[i] = i + 1;
    const char *img = ph_test_path("words");
    REQUIRE_OK(pheap_sim_crash(h, img, 11, 0.5));
    static uint64_t v[N * 8];
    read_image(img, d, v, sizeof(v));
    unsigned mixed = 0, news = 0;
    for (unsigned l = 0; l < N; l++) {
        unsigned n = 0;
        for (unsigned k = 0; k < 8; k++) {
            uint64_t x = v[l * 8 + k];
            CHECK(x == 0 || x == l * 8 + k + 1);
            n += x != 0;
        }
        mixed += n > 0 && n < 8;
        news += n;
    }
    CHECK(mixed > N / 2);
    CHECK(news > N * 8 * 4 / 10 && news < N * 8 * 6 / 10);
}

/* A crash just after the k-th durable store: the stores before it are in
 * the working copy (and with full eviction in the image), the later ones
 * are not. */
TEST(crash_after_a_store)
{
    const char *img = ph_test_path("at-store");
    unlink(img);
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t base_stores = pheap_sim_store_count(h);
    pheap_sim_crash(h, NULL, 0, 0);
    pheap_options o = {.sim_crash_store = base_stores + 2, .sim_crash_image = img,
                       .sim_evict_probability = 1.0};
    h = open_sim(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    ph_pctx *c = ph_heap_pctx(h);
    ph_persist_write(&h->sp.persist, c, &w[0], 0xA1);
    CHECK(access(img, F_OK) != 0);
    ph_persist_write(&h->sp.persist, c, &w[1], 0xA2); /* the crash follows this one */
    REQUIRE(access(img, F_OK) == 0);
    ph_persist_write(&h->sp.persist, c, &w[2], 0xA3);
    CHECK_EQ(pheap_sim_store_count(h), base_stores + 3);
    uint64_t v[3];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 0xA1);
    CHECK_EQ(v[1], 0xA2);
    CHECK_EQ(v[2], 0);
    pheap_sim_crash(h, NULL, 0, 0);
}

/* Eviction at a store: the line is written back as it is just after the
 * store, so the durable image can hold a state that later stores to the
 * same line (never flushed) have left behind. */
TEST(line_written_back_between_stores)
{
    pheap_options o = {.sim_store_evict_probability = 1.0, .sim_store_seed = 5};
    pheap *h = open_sim(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    ph_pctx *c = ph_heap_pctx(h);
    ph_persist_write(&h->sp.persist, c, &w[0], 1);      /* written back with w[0] = 1 */
    w[1] = 7;                                           /* a plain store: no write-back */
    ph_persist_write(&h->sp.persist, c, &w[0], 2);      /* written back: w[0] = 2, w[1] = 7 */
    w[1] = 8;
    const char *img = ph_test_path("between");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    uint64_t v[2];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 2);
    CHECK_EQ(v[1], 7); /* the state between the two stores to w[1] */
}

/* The file's length is simulated: a growth that was never synced is gone
 * after a crash, and a synced one stays. */
TEST(file_length_durable_only_when_synced)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    ph_sim *s = h->sp.sim;
    uint64_t size = s->size;
    ph_sim_file_resize(s, size + 65536);
    const char *img = ph_test_path("len1");
    REQUIRE_OK(ph_sim_write_image(s, img, &(ph_sim_crash_spec){0}));
    uint64_t got;
    got = file_len(img);
    CHECK_EQ(got, size);
    ph_sim_file_sync(s);
    REQUIRE_OK(ph_sim_write_image(s, img, &(ph_sim_crash_spec){0}));
    got = file_len(img);
    CHECK_EQ(got, size + 65536);
    s->size = size; /* the mapping did not really grow */
    s->durable_size = size;
    pheap_sim_crash(h, NULL, 0, 0);
}

/* A punched range reads as zeros, in the program's view and in the image. */
TEST(punched_range_reads_as_zeros)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    w[0] = 0xAB;
    w[512] = 0xCD; /* the next page */
    pheap_persist(h, w, 8);
    pheap_persist(h, &w[512], 8);
    ph_space_punch(&h->sp, d, 4096);
    CHECK_EQ(w[0], 0);
    CHECK_EQ(w[512], 0xCD);
    const char *img = ph_test_path("punch");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 1.0));
    uint64_t v;
    read_image(img, d, &v, 8);
    CHECK_EQ(v, 0);
    read_image(img, d + 4096, &v, 8);
    CHECK_EQ(v, 0xCD);
}

/* The same calls give the same events, in the same order. */
TEST(trace_hash_repeats_and_tells_runs_apart)
{
    uint64_t hashes[3];
    for (unsigned run = 0; run < 3; run++) {
        pheap *h = open_sim(NULL);
        REQUIRE(h);
        pheap_off a = pheap_alloc(h, run == 2 ? 200 : 100);
        pheap_off b = pheap_alloc(h, 100000);
        pheap_free(h, a);
        pheap_free(h, b);
        hashes[run] = pheap_sim_trace_hash(h);
        CHECK(hashes[run] != 0);
        pheap_sim_crash(h, NULL, 0, 0);
    }
    CHECK(hashes[0] == hashes[1]);
    CHECK(hashes[0] != hashes[2]);
}

TEST(new_sim_options_refused_without_simulate)
{
    pheap *h;
    pheap_options o = {.sim_mode = PHEAP_SIM_WORDS};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL);
    o = (pheap_options){.flags = PHEAP_SIMULATE, .sim_mode = 0x80};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL);
    o = (pheap_options){.flags = PHEAP_SIMULATE, .sim_store_evict_probability = 1.5};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL);
    o = (pheap_options){.flags = PHEAP_SIMULATE, .sim_crash_store = 4};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL); /* no image path */
}

/* Runs one single-threaded workload on a simulated heap from CPU `cpu`
 * (if it exists) and returns its trace hash and fence count. */
static void run_on_cpu(const char *base, int cpu, uint64_t *hash, uint64_t *fences)
{
    cpu_set_t set, old;
    sched_getaffinity(0, sizeof(old), &old);
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int pinned = sched_setaffinity(0, sizeof(set), &set) == 0;
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h = NULL;
    if (pheap_open(base, &o, &h) != 0)
        ph_test_fail(__FILE__, __LINE__, "open sim: %s", pheap_errmsg());
    *hash = *fences = 0;
    if (h) {
        pheap_off keep[64];
        pheap_off *slot = pheap_direct(h, pheap_alloc(h, 64 * sizeof(pheap_off)));
        for (unsigned i = 0; i < 64; i++) {
            slot[i] = 0;
            keep[i] = pheap_alloc(h, 16 + (i * 37) % 3000);
        }
        for (unsigned i = 0; i < 64; i += 2)
            pheap_free(h, keep[i]);
        for (unsigned i = 0; i < 16; i++)
            pheap_alloc_to(h, i % 3 ? 200 : 70000, &slot[i]);
        for (unsigned i = 0; i < 16; i += 3)
            pheap_free_from(h, &slot[i]);
        *hash = pheap_sim_trace_hash(h);
        *fences = pheap_sim_fence_count(h);
        pheap_sim_crash(h, NULL, 0, 0);
    }
    if (pinned)
        sched_setaffinity(0, sizeof(old), &old);
}

/* The same calls give the same fences whichever CPU the thread runs on:
 * a failing crash point can be replayed.  The heap starts with partly used
 * slabs of several classes (spread over the arenas at open). */
TEST(same_calls_same_fences_on_any_cpu)
{
    const char *base = ph_test_path("determinism.heap");
    pheap *b = ph_test_create(base, 16u << 20);
    REQUIRE(b);
    for (unsigned i = 0; i < 3000; i++) {
        pheap_off o = pheap_alloc(b, 16 + (i * 37) % 3000);
        if (i % 3)
            pheap_free(b, o);
    }
    pheap_close(b);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t h0, f0;
    run_on_cpu(base, 0, &h0, &f0);
    REQUIRE(f0 > 0);
    for (int cpu = 1; cpu < ncpu && cpu < 4; cpu++) {
        uint64_t h1, f1;
        run_on_cpu(base, cpu, &h1, &f1);
        CHECK_EQ(f1, f0);
        CHECK(h1 == h0);
    }
    if (ncpu < 2)
        fprintf(stderr, "  one CPU: the runs compared ran on the same CPU\n");
}

/* PHEAP_SIM_NT_LAG: words of non-temporal stores not yet fenced stay out of
 * the image while ordinary stores join; a later ordinary store to such a
 * word makes it an ordinary dirty word again. */
TEST(unfenced_nt_words_lag_behind)
{
    pheap_options o = {.sim_mode = PHEAP_SIM_WORDS | PHEAP_SIM_NT_LAG};
    pheap *h = open_sim(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *line = pheap_direct(h, d);
    ph_pctx *c = ph_heap_pctx(h);
    static const uint64_t v[4] = {0x11, 0x22, 0x33, 0x44};
    ph_persist_store_nt_words(&h->sp.persist, c, line, v, 4); /* not fenced */
    ph_persist_write(&h->sp.persist, c, &line[1], 0x55);     /* over an NT word */
    line[5] = 0x66;                                           /* ordinary, dirty */
    const char *img = ph_test_path("nt-lag");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 1.0));
    uint64_t got[6];
    read_image(img, d, got, sizeof(got));
    CHECK_EQ(got[0], 0);
    CHECK_EQ(got[1], 0x55);
    CHECK_EQ(got[2], 0);
    CHECK_EQ(got[3], 0);
    CHECK_EQ(got[5], 0x66);
}

/* Writes to one line reach media in the order they were made: a flush's
 * snapshot, fenced late, never takes back what a later flush of the line
 * made durable first.  Thread A flushes the line and waits before its
 * fence; the main thread stores another word of the line and persists it;
 * then A fences. */
static sem_t flushed, go_on;

static void *flush_then_wait(void *arg)
{
    pheap *h = arg;
    uint64_t *w = pheap_direct(h, data_off(h));
    w[0] = 0x1111;
    pheap_flush(h, w, 8); /* the line with w[1] still 0 */
    sem_post(&flushed);
    sem_wait(&go_on);
    pheap_drain(h);
    return NULL;
}

TEST(late_fence_of_an_older_flush_keeps_newer_line)
{
    pheap *h = open_sim(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    sem_init(&flushed, 0, 0);
    sem_init(&go_on, 0, 0);
    pthread_t t;
    pthread_create(&t, NULL, flush_then_wait, h);
    sem_wait(&flushed);
    w[1] = 0x2222;
    pheap_persist(h, &w[1], 8); /* the line with both words, durable */
    sem_post(&go_on);
    pthread_join(t, NULL);
    const char *img = ph_test_path("late-fence");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    uint64_t v[2];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 0x1111);
    CHECK_EQ(v[1], 0x2222); /* not the older snapshot's 0 */
    sem_destroy(&flushed);
    sem_destroy(&go_on);
}

/* The same within one thread: a line written back at a durable store
 * (eviction) after a flush of it holds newer contents than that flush's
 * snapshot, which its fence must not bring back; nor may it undo a
 * non-temporal store made after the flush. */
TEST(fence_keeps_line_written_back_after_its_flush)
{
    pheap_options o = {.sim_store_evict_probability = 1.0, .sim_store_seed = 9};
    pheap *h = open_sim(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    ph_pctx *c = ph_heap_pctx(h);
    w[0] = 0x1111;
    pheap_flush(h, w, 8);                             /* snapshot: w[1] = w[2] = 0 */
    ph_persist_write(&h->sp.persist, c, &w[1], 0x22); /* the line written back */
    ph_persist_store_nt(&h->sp.persist, c, &w[2], 0x33);
    pheap_drain(h);
    const char *img = ph_test_path("evicted-after-flush");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    uint64_t v[3];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 0x1111);
    CHECK_EQ(v[1], 0x22);
    CHECK_EQ(v[2], 0x33);
}

/* ---- the page-cache model (PHEAP_SIM_PAGES) ------------------------------ */

static pheap *open_pages(const pheap_options *extra)
{
    pheap_options o = extra ? *extra : (pheap_options){0};
    o.sim_mode |= PHEAP_SIM_PAGES;
    return open_sim(&o);
}

/* An image of the simulated heap now, as a crash would take it. */
static void page_image(pheap *h, const char *img, uint64_t seed, double evict)
{
    ph_sim_crash_spec spec = {.pages = 1, .seed = seed, .evict = evict};
    if (ph_sim_write_image(h->sp.sim, img, &spec) != 0)
        ph_test_fail(__FILE__, __LINE__, "image: %s", pheap_errmsg());
}

/* A flush only marks; the flushing thread's fence syncs the file: every
 * page that differs, flushed or not.  A fence with nothing flushed syncs
 * nothing (as the msync back end's).  The private working copy (whose
 * pages still mapping the file are not compared) and the shared one of a
 * protected heap (every page compared) alike. */
static void fence_syncs_every_differing_page(unsigned protect)
{
    pheap_options o = {.protect = protect};
    pheap *h = open_pages(&o);
    REQUIRE(h);
    CHECK_EQ(h->sp.sim->view != NULL, protect == PHEAP_PROTECT_ALIAS);
    CHECK_EQ(h->sp.persist.plain_stores, 1); /* the slab code treats it as msync */
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    const char *img = ph_test_path("pages-sync");
    w[0] = 1;    /* never flushed */
    w[1024] = 2; /* two pages on, never flushed */
    pheap_drain(h);
    uint64_t v[3];
    page_image(h, img, 0, 0.0);
    read_image(img, d, &v[0], 8);
    read_image(img, d + 8192, &v[1], 8);
    CHECK_EQ(v[0], 0);
    CHECK_EQ(v[1], 0);
    w[512] = 3;
    pheap_flush(h, &w[512], 8);
    CHECK_EQ(pheap_sim_fence_count(h), 2); /* the open's and the drain's: counted alike */
    page_image(h, img, 0, 0.0);
    read_image(img, d + 4096, &v[0], 8);
    CHECK_EQ(v[0], 0); /* flushed, not yet synced */
    pheap_drain(h);
    w[0] = 4; /* after the sync */
    page_image(h, img, 0, 0.0);
    read_image(img, d, &v[0], 8);
    read_image(img, d + 4096, &v[1], 8);
    read_image(img, d + 8192, &v[2], 8);
    CHECK_EQ(v[0], 1);
    CHECK_EQ(v[1], 3);
    CHECK_EQ(v[2], 2);
    pheap_sim_crash(h, NULL, 0, 0);
}

TEST(pages_fence_syncs_every_differing_page)
{
    fence_syncs_every_differing_page(PHEAP_PROTECT_OFF);
    fence_syncs_every_differing_page(PHEAP_PROTECT_ALIAS);
}

/* A crash takes each differing page whole, or not, drawn from the seed:
 * never a part of a page. */
TEST(pages_join_whole)
{
    enum { N = 400 };
    pheap *h = open_pages(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    for (unsigned i = 0; i < N * 512; i++)
        w[i] = i + 1;
    const char *ia = ph_test_path("pages-a"), *ib = ph_test_path("pages-b");
    page_image(h, ia, 21, 0.5);
    page_image(h, ib, 21, 0.5);
    REQUIRE_OK(pheap_sim_crash(h, NULL, 0, 0));
    static uint64_t x[N * 512], y[N * 512];
    read_image(ia, d, x, sizeof(x));
    read_image(ib, d, y, sizeof(y));
    CHECK(memcmp(x, y, sizeof(x)) == 0); /* same seed, same image */
    unsigned joined = 0;
    for (unsigned p = 0; p < N; p++) {
        unsigned news = 0;
        for (unsigned k = 0; k < 512; k++)
            news += x[p * 512 + k] == p * 512 + k + 1;
        CHECK(news == 0 || news == 512);
        joined += news == 512;
    }
    CHECK(joined > N * 4 / 10 && joined < N * 6 / 10);
}

/* Eviction at a store writes back the stored word's whole page as it is
 * then: a plain store next to it goes along, a later one does not. */
TEST(pages_store_eviction_takes_the_page)
{
    pheap_options o = {.sim_store_evict_probability = 1.0, .sim_store_seed = 3};
    pheap *h = open_pages(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    ph_pctx *c = ph_heap_pctx(h);
    w[300] = 7;   /* same page, another line */
    w[600] = 9;   /* the next page */
    ph_persist_write(&h->sp.persist, c, &w[0], 5);
    w[300] = 8;
    const char *img = ph_test_path("pages-store-evict");
    REQUIRE_OK(pheap_sim_crash(h, img, 0, 0.0));
    uint64_t v[601];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 5);
    CHECK_EQ(v[300], 7);
    CHECK_EQ(v[600], 0);
}

/* sim_crash_fence counts fences as ever; the image is taken before that
 * fence's sync. */
TEST(pages_crash_before_the_sync_of_its_fence)
{
    const char *img = ph_test_path("pages-at-fence");
    unlink(img);
    pheap_options o = {.sim_crash_fence = 3, .sim_crash_image = img};
    pheap *h = open_pages(&o);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    w[1000] = 0xC; /* never flushed: the sync of fence 2 takes it */
    w[0] = 0xA;
    pheap_persist(h, w, 8);
    w[8] = 0xB;
    pheap_persist(h, &w[8], 8);
    REQUIRE(access(img, F_OK) == 0);
    uint64_t v[1001];
    read_image(img, d, v, sizeof(v));
    CHECK_EQ(v[0], 0xA);
    CHECK_EQ(v[8], 0);
    CHECK_EQ(v[1000], 0xC);
    pheap_sim_crash(h, NULL, 0, 0);
}

/* A growth not yet synced: a crash keeps the old length or the new one,
 * with the eviction probability; after a sync, the new. */
TEST(pages_length_old_or_new_until_synced)
{
    const char *path = ph_test_path("pages-grow.heap");
    pheap_options co = {.size = 1u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &co, &h));
    pheap_close(h);
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_mode = PHEAP_SIM_PAGES};
    REQUIRE_OK(pheap_open(path, &o, &h));
    ph_sim *s = h->sp.sim;
    uint64_t size = s->size, grown = size + (1u << 20);
    REQUIRE_OK(ph_space_extend_map(&h->sp, size, grown));
    ph_sim_file_resize(s, grown);
    *(uint64_t *)(h->sp.base + size) = 0x77; /* a page past the old end */
    const char *img = ph_test_path("pages-len");
    page_image(h, img, 1, 0.0);
    CHECK_EQ(file_len(img), size);
    page_image(h, img, 1, 1.0);
    CHECK_EQ(file_len(img), grown);
    uint64_t v;
    read_image(img, size, &v, 8);
    CHECK_EQ(v, 0x77);
    unsigned longer = 0;
    for (uint64_t seed = 0; seed < 40; seed++) {
        page_image(h, img, seed, 0.5);
        longer += file_len(img) == grown;
    }
    CHECK(longer > 5 && longer < 35);
    ph_sim_file_sync(s); /* fsync: the length and every page */
    page_image(h, img, 1, 0.0);
    CHECK_EQ(file_len(img), grown);
    read_image(img, size, &v, 8);
    CHECK_EQ(v, 0x77);
    pheap_sim_crash(h, NULL, 0, 0);
}

/* A punched page keeps its old contents on media until the next sync. */
TEST(pages_punch_durable_at_the_next_sync)
{
    pheap *h = open_pages(NULL);
    REQUIRE(h);
    uint64_t d = data_off(h);
    uint64_t *w = pheap_direct(h, d);
    w[0] = 0xAB;
    pheap_persist(h, w, 8);
    ph_space_punch(&h->sp, d, 4096);
    CHECK_EQ(w[0], 0);
    const char *img = ph_test_path("pages-punch");
    uint64_t v;
    page_image(h, img, 0, 0.0);
    read_image(img, d, &v, 8);
    CHECK_EQ(v, 0xAB);
    page_image(h, img, 0, 1.0);
    read_image(img, d, &v, 8);
    CHECK_EQ(v, 0);
    pheap_persist(h, &w[1024], 8); /* any sync */
    page_image(h, img, 0, 0.0);
    read_image(img, d, &v, 8);
    CHECK_EQ(v, 0);
    pheap_sim_crash(h, NULL, 0, 0);
}

TEST(pages_refuse_words_and_nt_lag)
{
    pheap *h;
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_mode = PHEAP_SIM_PAGES | PHEAP_SIM_WORDS};
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "PHEAP_SIM_PAGES") != NULL);
    o.sim_mode = PHEAP_SIM_PAGES | PHEAP_SIM_NT_LAG;
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL);
    o.sim_mode = PHEAP_SIM_PAGES;
    o.flags = 0;
    CHECK_EQ(pheap_open(base_heap(), &o, &h), PHEAP_EINVAL); /* not simulating */
    o = (pheap_options){.flags = PHEAP_SIMULATE, .sim_mode = PHEAP_SIM_PAGES | PHEAP_SIM_CONTENDED};
    REQUIRE_OK(pheap_open(base_heap(), &o, &h));
    CHECK_EQ(h->sp.persist.plain_stores, 1);
    pheap_sim_crash(h, NULL, 0, 0);
    h = open_sim(NULL);
    REQUIRE(h);
    CHECK_EQ(h->sp.persist.plain_stores, 0);
    pheap_sim_crash(h, NULL, 0, 0);
}
