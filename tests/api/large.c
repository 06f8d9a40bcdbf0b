/*
 * large.c -- large blocks: best fit and coalescing seen through
 * largest_free, pages handed back to the file system by purges (never
 * pages of a live block), growth up to max_size, and many extent-log
 * compactions surviving reopen.
 */
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1024u * 1024u)
#define KiB 1024u

static struct pheap_stats stats(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st;
}

TEST(coalescing_restores_one_free_extent)
{
    pheap *h = ph_test_create(ph_test_path("coalesce.heap"), 8 * MiB);
    REQUIRE(h);
    uint64_t largest = stats(h).largest_free;
    pheap_off a = pheap_alloc(h, 300 * KiB), b = pheap_alloc(h, 300 * KiB),
              c = pheap_alloc(h, 300 * KiB);
    REQUIRE(a && b && c);
    CHECK(a % 4096 == 0 && b % 4096 == 0 && c % 4096 == 0);
    CHECK_EQ(b, a + 300 * KiB); /* best fit carves from the front */
    CHECK_EQ(stats(h).largest_free, largest - 900 * KiB);
    REQUIRE_OK(pheap_free(h, a));
    REQUIRE_OK(pheap_free(h, c));
    CHECK_EQ(stats(h).largest_free, largest - 600 * KiB); /* c merged with the tail */
    /* A hole of exactly 300 KiB is the best fit for 290 KiB. */
    pheap_off d = pheap_alloc(h, 290 * KiB);
    CHECK_EQ(d, a);
    REQUIRE_OK(pheap_free(h, d));
    REQUIRE_OK(pheap_free(h, b)); /* merges a, b and the tail into one */
    CHECK_EQ(stats(h).largest_free, largest);
    CHECK_EQ(stats(h).large_extents, 0);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

static uint64_t file_blocks(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (uint64_t)sb.st_blocks * 512 : 0;
}

/* Allocates a large block and writes all of it (so its pages are backed). */
static pheap_off written_block(pheap *h, uint64_t bytes, int byte)
{
    pheap_off a = pheap_alloc(h, bytes);
    if (a) {
        memset(pheap_direct(h, a), byte, bytes);
        pheap_persist(h, pheap_direct(h, a), bytes);
    }
    return a;
}

/* Freed pages are purged after a delay, not at the free: a free followed
 * by an allocation of the same size reuses backed pages. */
TEST(freed_large_blocks_return_pages_after_the_purge_delay)
{
    const char *path = ph_test_path("punch.heap");
    pheap *h = ph_test_create(path, 16 * MiB);
    REQUIRE(h);
    uint64_t before = file_blocks(path);
    pheap_off a = written_block(h, 4 * MiB, 0x5a);
    REQUIRE(a);
    REQUIRE_OK(pheap_checkpoint(h)); /* (at the checkpoint level the file follows here) */
    uint64_t used = file_blocks(path);
    CHECK(used >= before && used >= 4 * MiB); /* reserved at creation, so no more than before */
    REQUIRE_OK(pheap_free(h, a));
    CHECK(file_blocks(path) >= used); /* not yet */
    usleep(150 * 1000);               /* past the delay; the next large call purges */
    pheap_off b = pheap_alloc(h, 1 * MiB);
    REQUIRE(b);
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t after = file_blocks(path);
    fprintf(stderr, "  file blocks: %llu KiB empty, %llu KiB with 4 MiB written, %llu KiB after the purge\n",
            (unsigned long long)before / 1024, (unsigned long long)used / 1024,
            (unsigned long long)after / 1024);
    CHECK(after + 3 * MiB < used);
    /* The pages read as zero and can be allocated again. */
    CHECK_EQ(b, a);
    CHECK_EQ(((unsigned char *)pheap_direct(h, b))[12345], 0);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* Without a pause, frees purge once their bytes reach the budget (32 MiB
 * here: more than size / 16). */
TEST(freed_large_blocks_return_pages_past_the_purge_budget)
{
    const char *path = ph_test_path("budget.heap");
    pheap *h = ph_test_create(path, 128 * MiB);
    REQUIRE(h);
    pheap_off v[48];
    for (unsigned i = 0; i < 48; i++)
        REQUIRE((v[i] = written_block(h, 1 * MiB, (int)i + 1)) != 0);
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t used = file_blocks(path);
    for (unsigned i = 0; i < 48; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    REQUIRE(pheap_alloc(h, 1 * MiB)); /* takes the index lock once more */
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t after = file_blocks(path);
    fprintf(stderr, "  file blocks: %llu KiB with 48 MiB written, %llu KiB after 48 frees\n",
            (unsigned long long)used / 1024, (unsigned long long)after / 1024);
    CHECK(after + 30 * MiB < used);
    pheap_close(h);
}

/* Frees right before close are purged by the close; a reopen finds the
 * heap intact. */
TEST(close_purges_freed_large_blocks)
{
    const char *path = ph_test_path("close-punch.heap");
    pheap *h = ph_test_create(path, 16 * MiB);
    REQUIRE(h);
    pheap_off keep = written_block(h, 2 * MiB, 0x11), drop = written_block(h, 4 * MiB, 0x22);
    REQUIRE(keep && drop);
    uint64_t used = file_blocks(path);
    REQUIRE_OK(pheap_free(h, drop));
    REQUIRE_OK(pheap_root_set(h, "keep", keep));
    REQUIRE_OK(pheap_close(h));
    CHECK(file_blocks(path) + 3 * MiB < used);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(((unsigned char *)pheap_direct(h, pheap_root_get(h, "keep")))[2 * MiB - 1], 0x11);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* Two threads allocate, fill, check and free large blocks (256 KiB to
 * 1 MiB) in rounds, some with a pause past the purge delay: purges punch
 * free extents while the other thread's blocks are live, and never a byte
 * of them.  The file ends up holding about the live bytes. */
enum { PURGE_SLOTS = 24, PURGE_ROUNDS = 40 };

typedef struct purge_arg {
    pheap *h;
    unsigned id;
    int failed;
} purge_arg;

static void *purge_worker(void *p)
{
    purge_arg *a = p;
    pheap_off off[PURGE_SLOTS] = {0};
    size_t size[PURGE_SLOTS] = {0};
    uint64_t gen[PURGE_SLOTS] = {0}, rng = 0x1234567ull + a->id, g = (uint64_t)a->id << 32;
    for (unsigned round = 0; round < PURGE_ROUNDS && !a->failed; round++) {
        for (unsigned i = 0; i < PURGE_SLOTS && !a->failed; i++) {
            uint64_t r = ph_test_rand(&rng);
            if (off[i] && r % 2) {
                a->failed |= !ph_test_intact(pheap_direct(a->h, off[i]), size[i], gen[i]);
                a->failed |= pheap_free(a->h, off[i]) != 0;
                off[i] = 0;
            } else if (!off[i]) {
                size[i] = 256 * KiB + (size_t)((r >> 1) % (768 * KiB));
                gen[i] = ++g;
                if ((off[i] = pheap_alloc(a->h, size[i])) == 0) {
                    a->failed = 1;
                    break;
                }
                ph_test_fill(pheap_direct(a->h, off[i]), size[i], gen[i]);
            }
        }
        if (round % 8 == 7)
            usleep(120 * 1000);
    }
    for (unsigned i = 0; i < PURGE_SLOTS; i++) {
        if (off[i]) {
            a->failed |= !ph_test_intact(pheap_direct(a->h, off[i]), size[i], gen[i]);
            a->failed |= pheap_free(a->h, off[i]) != 0;
        }
    }
    return NULL;
}

TEST(purges_never_touch_live_blocks)
{
    const char *path = ph_test_path("purge-mt.heap");
    pheap *h = ph_test_create(path, 128 * MiB);
    REQUIRE(h);
    pthread_t t[2];
    purge_arg arg[2] = {{h, 1, 0}, {h, 2, 0}};
    for (unsigned i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, purge_worker, &arg[i]);
    for (unsigned i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK(!arg[0].failed && !arg[1].failed);
    CHECK_EQ(stats(h).large_extents, 0);
    REQUIRE_OK(pheap_check(h, NULL));
    usleep(120 * 1000);
    REQUIRE(pheap_alloc(h, 300 * KiB)); /* the purge after the delay */
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t blocks = file_blocks(path);
    fprintf(stderr, "  file blocks after the last purge: %llu KiB\n", (unsigned long long)blocks / 1024);
    CHECK(blocks < 8 * MiB);
    pheap_close(h);
}

TEST(growth_up_to_max_size)
{
    const char *path = ph_test_path("grow.heap");
    unlink(path);
    pheap_options o = {.size = 4 * MiB, .max_size = 24 * MiB, .flags = PHEAP_CREATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off blocks[64];
    unsigned n = 0;
    while (n < 64 && (blocks[n] = pheap_alloc(h, 1 * MiB)) != 0) {
        memset(pheap_direct(h, blocks[n]), (int)n, 4096);
        n++;
    }
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    struct pheap_stats st = stats(h);
    CHECK_EQ(st.size, 24 * MiB);
    CHECK(n >= 20 && n < 24);
    pheap_off small;
    unsigned nsmall = 0;
    while ((small = pheap_alloc(h, 64)) != 0) /* the rest goes to small blocks */
        nsmall++;
    CHECK(nsmall > 0);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    for (unsigned i = 0; i < n; i++)
        CHECK_EQ(((unsigned char *)pheap_direct(h, blocks[i]))[100], (unsigned char)i);
    CHECK_EQ(stats(h).live_blocks, n + nsmall);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

TEST(many_compactions)
{
    const char *path = ph_test_path("compact.heap");
    pheap *h = ph_test_create(path, 4 * MiB);
    REQUIRE(h);
    pheap_off keep[8];
    for (unsigned i = 0; i < 8; i++)
        REQUIRE((keep[i] = pheap_alloc(h, (20 + i) * KiB)) != 0);
    /* 4 MiB heaps hold 512 log entries per half: this compacts ~10 times. */
    for (unsigned i = 0; i < 2500; i++) {
        pheap_off a = pheap_alloc(h, (17 + i % 50) * KiB);
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
    }
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    for (unsigned i = 0; i < 8; i++)
        CHECK_EQ(pheap_usable_size(h, keep[i]), ((20 + i) * KiB + 4095) / 4096 * 4096);
    CHECK_EQ(stats(h).large_extents, 8);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}

/* pheap_stats.largest_alloc is exact: a block of that size can be had, one
 * page more cannot; file_bytes is the file's storage. */
TEST(largest_alloc_and_file_bytes)
{
    const char *path = ph_test_path("figures.heap");
    unlink(path);
    pheap_options o = {.size = 4 * MiB, .max_size = 40 * MiB, .flags = PHEAP_CREATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st = stats(h);
    CHECK(st.largest_alloc >= st.max_size - st.size); /* growth counts */
    CHECK(st.largest_alloc >= st.largest_free);
    CHECK_EQ(st.file_bytes, file_blocks(path));
    CHECK(st.file_bytes >= st.data_size && st.file_bytes < st.size);
    pheap_off a = pheap_alloc(h, 1 * MiB), b = pheap_alloc(h, 64);
    REQUIRE(a && b);
    st = stats(h);
    pheap_off big = pheap_alloc(h, st.largest_alloc);
    REQUIRE(big);
    st = stats(h);
    CHECK_EQ(st.size, st.max_size);
    CHECK_EQ(pheap_alloc(h, st.largest_alloc + 4096), 0);
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
    if (st.largest_alloc)
        CHECK(pheap_alloc(h, st.largest_alloc) != 0);
    REQUIRE_OK(pheap_free(h, a));
    CHECK(stats(h).largest_alloc >= 1 * MiB);
    CHECK_EQ(stats(h).file_bytes, file_blocks(path));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}
