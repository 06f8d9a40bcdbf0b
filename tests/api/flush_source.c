/*
 * flush_source.c -- pheap_stats says which flush back end is in use, why it
 * was chosen, and whether what it makes durable survives a power loss.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "harness.h"

#define SIZE (4u << 20)

static struct pheap_stats stats_of(const char *path, const pheap_options *o)
{
    struct pheap_stats st;
    memset(&st, 0xff, sizeof(st));
    pheap *h = NULL;
    if (pheap_open(path, o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "open %s: %s", path, pheap_errmsg());
        return st;
    }
    pheap_stats(h, &st);
    pheap_close(h);
    return st;
}

static int on_tmpfs(const char *dir)
{
    struct statfs fs;
    return statfs(dir, &fs) == 0 && fs.f_type == 0x01021994;
}

TEST(option_wins)
{
    const char *path = ph_test_path("option.heap");
    pheap_close(ph_test_create(path, SIZE));
    setenv("PHEAP_FLUSH", "msync", 1);
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    struct pheap_stats st = stats_of(path, &o);
    unsetenv("PHEAP_FLUSH");
    CHECK_EQ(st.flush, PHEAP_FLUSH_NONE);
    CHECK_EQ(st.flush_source, PHEAP_FLUSH_FROM_OPTION);
    CHECK_EQ(st.power_safe, 0);
    CHECK(strstr(pheap_flush_source_name(st.flush_source), "pheap_options.flush") != NULL);
}

TEST(environment)
{
    const char *path = ph_test_path("env.heap");
    pheap_close(ph_test_create(path, SIZE));
    setenv("PHEAP_FLUSH", "none", 1);
    struct pheap_stats st = stats_of(path, NULL);
    unsetenv("PHEAP_FLUSH");
    CHECK_EQ(st.flush, PHEAP_FLUSH_NONE);
    CHECK_EQ(st.flush_source, PHEAP_FLUSH_FROM_ENV);
    CHECK_EQ(st.power_safe, 0);
    /* "auto" in the environment leaves the choice to the mapping */
    setenv("PHEAP_FLUSH", "auto", 1);
    st = stats_of(path, NULL);
    unsetenv("PHEAP_FLUSH");
    CHECK(st.flush_source == PHEAP_FLUSH_FROM_DAX || st.flush_source == PHEAP_FLUSH_FROM_NOT_DAX);
}

TEST(automatic)
{
    unsetenv("PHEAP_FLUSH");
    const char *path = ph_test_path("auto.heap");
    pheap_close(ph_test_create(path, SIZE));
    struct pheap_stats st = stats_of(path, NULL);
    if (st.dax) {
        CHECK_EQ(st.flush_source, PHEAP_FLUSH_FROM_DAX);
        CHECK(st.flush == PHEAP_FLUSH_CLWB || st.flush == PHEAP_FLUSH_CLFLUSHOPT ||
              st.flush == PHEAP_FLUSH_CLFLUSH);
    } else {
        CHECK_EQ(st.flush_source, PHEAP_FLUSH_FROM_NOT_DAX);
        CHECK_EQ(st.flush, PHEAP_FLUSH_MSYNC);
    }
    CHECK_EQ(st.in_memory, on_tmpfs(ph_test_dir()));
    CHECK_EQ(st.power_safe, !st.in_memory);
    /* a read-only open reports what the mapping would choose, too */
    pheap_options ro = {.flags = PHEAP_RDONLY};
    struct pheap_stats rst = stats_of(path, &ro);
    CHECK_EQ(rst.flush, st.flush);
    CHECK_EQ(rst.flush_source, st.flush_source);
    CHECK_EQ(rst.dax, st.dax);
    /* and so does a snapshot, which writes nothing */
    pheap_options snap = {.flags = PHEAP_SNAPSHOT};
    struct pheap_stats sst = stats_of(path, &snap);
    CHECK_EQ(sst.snapshot, 1);
    CHECK_EQ(sst.flush, st.flush);
    CHECK_EQ(sst.flush_source, st.flush_source);
    CHECK_EQ(sst.dax, st.dax);
    CHECK_EQ(sst.power_safe, st.power_safe);
}

TEST(cache_lines_on_a_plain_file_are_not_power_safe)
{
    const char *path = ph_test_path("clflush.heap");
    pheap_close(ph_test_create(path, SIZE));
    pheap_options o = {.flush = PHEAP_FLUSH_CLFLUSH};
    struct pheap_stats st = stats_of(path, &o);
    CHECK_EQ(st.flush, PHEAP_FLUSH_CLFLUSH);
    CHECK_EQ(st.power_safe, st.dax && !st.in_memory);
}

TEST(tmpfs_is_memory)
{
    if (access("/dev/shm", W_OK) != 0 || !on_tmpfs("/dev/shm")) {
        printf("  skipped: no writable tmpfs at /dev/shm\n");
        return;
    }
    char path[64];
    snprintf(path, sizeof(path), "/dev/shm/pheap-flush-%d.heap", (int)getpid());
    pheap_close(ph_test_create(path, SIZE));
    struct pheap_stats st = stats_of(path, NULL);
    unlink(path);
    CHECK_EQ(st.in_memory, 1);
    CHECK_EQ(st.power_safe, 0);
}

TEST(simulator)
{
    const char *path = ph_test_path("sim.heap");
    pheap_close(ph_test_create(path, SIZE));
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.flush, PHEAP_FLUSH_SIM);
    CHECK_EQ(st.flush_source, PHEAP_FLUSH_FROM_SIMULATE);
    CHECK_EQ(st.power_safe, 0);
    pheap_close(h);
    CHECK(strcmp(pheap_flush_source_name(0), "unknown") == 0);
    CHECK(strcmp(pheap_flush_source_name(99), "unknown") == 0);
}

/* The commit words of the cache-line back ends: movnti or a store and a
 * write-back, as PHEAP_NT_STORES says (auto: the cheaper here); either
 * way the heap works and keeps its blocks. */
TEST(commit_stores)
{
    const char *path = ph_test_path("nt.heap");
    pheap_close(ph_test_create(path, SIZE));
    pheap_options o = {.flush = PHEAP_FLUSH_CLFLUSHOPT};
    static const char *const values[] = {"1", "0", "auto"};
    for (unsigned k = 0; k < 3; k++) {
        setenv("PHEAP_NT_STORES", values[k], 1);
        pheap *h;
        REQUIRE_OK(pheap_open(path, &o, &h));
        struct pheap_stats st;
        REQUIRE_OK(pheap_stats(h, &st));
        if (k < 2)
            CHECK_EQ(st.nt_stores, k == 0);
        else
            CHECK(st.nt_stores <= 1);
        pheap_off v[300];
        for (unsigned i = 0; i < 300; i++)
            REQUIRE((v[i] = pheap_alloc(h, 16 + i)) != 0);
        for (unsigned i = 0; i < 300; i += 2)
            REQUIRE_OK(pheap_free(h, v[i]));
        pheap_check_report r;
        CHECK_EQ(pheap_check(h, &r), 0);
        REQUIRE_OK(pheap_stats(h, &st));
        CHECK_EQ(st.live_blocks, 150 * (k + 1));
        pheap_close(h);
    }
    setenv("PHEAP_NT_STORES", "2", 1);
    pheap *h = NULL;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "PHEAP_NT_STORES") != NULL);
    unsetenv("PHEAP_NT_STORES");
}
