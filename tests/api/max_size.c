/*
 * max_size.c -- the cost of a large max_size: a heap that may grow to
 * 1 TiB, created with 4 MiB of data, takes file blocks and memory that
 * follow its data, not its limit -- at creation, at every open (clean,
 * read-only, and after a crash), and as it is used and grows.  Asserts on
 * sizes (st_blocks, peak resident memory), never on times.  Runs in a
 * directory under /tmp (a real file system, not tmpfs); skipped with a
 * message where the file system cannot hold a sparse file that large.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1ull << 20)
#define TiB (1ull << 40)
#define DATA (4 * MiB)
#define BUDGET (64 * MiB) /* file blocks and resident memory, whatever max_size is */
#define NSLOTS 64

static char dir[64];

/* Peak resident memory of this process so far, bytes. */
static uint64_t peak_rss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

static uint64_t file_blocks(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : ~0ull;
}

/* 1 when the file system under dir holds a sparse file past 1 TiB. */
static int fs_holds_sparse_tib(void)
{
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer keeps most of the address space for itself: the
     * 1 TiB reservation of the heap's mapping does not fit. */
    printf("  skipped: no room for a 1 TiB mapping under ThreadSanitizer\n");
    return 0;
#endif
    char probe[128];
    snprintf(probe, sizeof(probe), "%s/probe", dir);
    int fd = open(probe, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return 0;
    int ok = ftruncate(fd, (off_t)(TiB + TiB / 16)) == 0;
    if (!ok)
        printf("  skipped: %s cannot hold a sparse file of 1 TiB (%s)\n", dir, strerror(errno));
    close(fd);
    unlink(probe);
    return ok;
}

static pheap_off *slots_of(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "slots"));
}

static uint64_t live_blocks(pheap *h)
{
    struct pheap_stats st;
    return pheap_stats(h, &st) == 0 ? st.live_blocks : ~0ull;
}

/* The child: allocates into slots 32.. through the logged calls and dies
 * without closing (a process crash; with msync durability, what returned
 * is on the file). */
static void crash_child(const char *path)
{
    pheap *h;
    if (pheap_open(path, NULL, &h) != 0)
        _exit(2);
    pheap_off *slots = slots_of(h);
    static const size_t sizes[] = {24, 3000, 70000, 1u << 20};
    for (unsigned i = 0; i < 8; i++)
        if (pheap_alloc_to(h, sizes[i % 4], &slots[32 + i]) != 0)
            _exit(3);
    if (pheap_free_from(h, &slots[33]) != 0)
        _exit(4);
    _exit(0);
}

TEST(one_tib_max_size_costs_what_the_data_costs)
{
    snprintf(dir, sizeof(dir), "/tmp/pheap-maxsize-XXXXXX");
    REQUIRE(mkdtemp(dir));
    if (!fs_holds_sparse_tib()) {
        rmdir(dir);
        return;
    }
    char path[128];
    snprintf(path, sizeof(path), "%s/big.heap", dir);
    uint64_t rss0 = peak_rss();

    /* Creation: DATA bytes of data region, growable to 1 TiB. */
    pheap_options o = {.size = DATA, .max_size = TiB, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.data_size, DATA);
    CHECK_EQ(st.max_size, TiB);
    CHECK_EQ(st.size, st.data_offset + DATA);
    uint64_t blocks = file_blocks(path);
    printf("  created: file %llu bytes, %llu on disk, peak rss +%llu\n",
           (unsigned long long)st.size, (unsigned long long)blocks,
           (unsigned long long)(peak_rss() - rss0));
    CHECK(blocks < BUDGET);
    CHECK(blocks < DATA + 8 * MiB); /* the metadata of 4 MiB of data, not of 1 TiB */
    pheap_off s = pheap_alloc(h, NSLOTS * sizeof(pheap_off));
    REQUIRE(s);
    memset(pheap_direct(h, s), 0, NSLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, s), NSLOTS * sizeof(pheap_off));
    REQUIRE_OK(pheap_root_set(h, "slots", s));
    REQUIRE_OK(pheap_close(h));

    /* A clean open, a read-only one, and use: small and large blocks, frees,
     * and growth past the first size. */
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_off *slots = slots_of(h);
    REQUIRE(slots);
    for (unsigned i = 0; i < 16; i++)
        REQUIRE_OK(pheap_alloc_to(h, 64 + 100 * i, &slots[i]));
    for (unsigned i = 16; i < 24; i++)
        REQUIRE_OK(pheap_alloc_to(h, (i - 15) * 300 * 1024, &slots[i]));
    REQUIRE_OK(pheap_alloc_to(h, 3 * DATA, &slots[24])); /* grows the heap */
    for (unsigned i = 0; i < 24; i += 3)
        REQUIRE_OK(pheap_free_from(h, &slots[i]));
    unsigned live = 1;
    for (unsigned i = 0; i < NSLOTS; i++)
        live += slots[i] != 0;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.data_size > DATA);
    CHECK_EQ(st.live_blocks, live);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));

    /* A crash: a child allocates and dies; the next open recovers. */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0)
        crash_child(path);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.was_unclean, 1);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    slots = slots_of(h);
    live = 1;
    for (unsigned i = 0; i < NSLOTS; i++)
        live += slots[i] != 0;
    CHECK_EQ(live_blocks(h), live);
    CHECK_EQ(slots[33], 0);
    for (unsigned i = 32; i < 40; i++)
        CHECK(i == 33 || pheap_usable_size(h, slots[i]) > 0);
    /* Still usable after recovery: more large churn, then everything freed. */
    for (unsigned r = 0; r < 200; r++) {
        pheap_off a = pheap_alloc(h, 20000 + 4096 * (r % 7));
        REQUIRE(a);
        REQUIRE_OK(pheap_free(h, a));
    }
    for (unsigned i = 0; i < NSLOTS; i++)
        REQUIRE_OK(pheap_free_from(h, &slots[i]));
    CHECK_EQ(live_blocks(h), 1);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_stats(h, &st));
    REQUIRE_OK(pheap_close(h));

    blocks = file_blocks(path);
    uint64_t rss = peak_rss() - rss0;
    printf("  after use: data %llu bytes, %llu on disk; peak rss +%llu over the whole test\n",
           (unsigned long long)st.data_size, (unsigned long long)blocks, (unsigned long long)rss);
    CHECK(blocks < st.data_size + 8 * MiB);
    CHECK(rss < BUDGET);
    unlink(path);
    rmdir(dir);
}
