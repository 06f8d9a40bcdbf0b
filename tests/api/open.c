/*
 * open.c -- the life of a heap file: create, exclusive create, reopen,
 * read-only, the file lock between processes, clean and unclean shutdown.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define SIZE (4u << 20)

TEST(create_and_reopen)
{
    const char *path = ph_test_path("life.heap");
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    /* size is the data region; the file holds the metadata too, and may
     * grow to just that by default. */
    CHECK_EQ(st.data_size, SIZE);
    CHECK_EQ(st.size, st.data_offset + SIZE);
    CHECK_EQ(st.max_size, st.size);
    CHECK_EQ(st.format_major, PHEAP_FORMAT_MAJOR);
    CHECK_EQ(st.format_minor, PHEAP_FORMAT_MINOR);
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(st.open_count, 1);
    CHECK(st.data_offset > 0 && st.data_offset % 65536 == 0);
    uint8_t uuid[16];
    memcpy(uuid, st.uuid, 16);
    CHECK_EQ(uuid[6] >> 4, 4);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_stats(h, &st);
    CHECK(memcmp(uuid, st.uuid, 16) == 0);
    CHECK_EQ(st.open_count, 2);
    CHECK_EQ(st.unclean_count, 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0);
    CHECK_EQ(sb.st_mode & 0777, 0600);
    CHECK(pheap_close(NULL) == 0);
}

TEST(create_flags)
{
    const char *path = ph_test_path("flags.heap");
    unlink(path);
    pheap *h;
    pheap_options o = {.size = SIZE, .flags = PHEAP_CREATE | PHEAP_EXCL, .mode = 0640};
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_close(h);
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EEXIST);
    CHECK(h == NULL);
    o.flags = PHEAP_CREATE; /* no EXCL: opens the existing heap */
    o.size = 8u << 20;
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.data_size, SIZE); /* size only matters when creating */
    pheap_close(h);
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0);
    CHECK_EQ(sb.st_mode & 0777, 0640 & ~(unsigned)umask(umask(0)));
    /* No temporary files are left next to the heap. */
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "ls %s | grep -q tmp", ph_test_dir());
    CHECK(system(cmd) != 0);
}

TEST(create_into_empty_file_and_growth_limit)
{
    const char *path = ph_test_path("empty.heap");
    FILE *f = fopen(path, "w");
    fclose(f);
    pheap *h;
    pheap_options o = {.size = SIZE, .max_size = 4 * SIZE, .flags = PHEAP_CREATE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.data_size, SIZE);
    CHECK_EQ(st.size, st.data_offset + SIZE);
    CHECK_EQ(st.max_size, 4 * SIZE);
    pheap_close(h);
    o.max_size = SIZE / 2;
    unlink(path);
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL); /* max below size */
    CHECK(access(path, F_OK) != 0);
    /* max_size counts the metadata: equal to size, it cannot hold size
     * bytes of data.  Refused with the least max_size that can. */
    o.max_size = SIZE;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    CHECK(strstr(pheap_errmsg(), "max_size must be at least") != NULL);
    CHECK(access(path, F_OK) != 0);
    o = (pheap_options){.size = 1u << 20, .flags = PHEAP_CREATE};
    REQUIRE_OK(pheap_open(path, &o, &h)); /* max_size: what 1 MiB of data needs */
    pheap_stats(h, &st);
    CHECK_EQ(st.data_size, 1u << 20);
    CHECK(st.size > (1u << 20) && st.size == st.max_size);
    pheap_close(h);
    o = (pheap_options){.size = 1, .flags = PHEAP_CREATE};
    unlink(path);
    REQUIRE_OK(pheap_open(path, &o, &h)); /* rounded up to one chunk */
    pheap_stats(h, &st);
    CHECK_EQ(st.data_size, 65536);
    pheap_close(h);
}

TEST(readonly)
{
    const char *path = ph_test_path("ro.heap");
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    pheap_off r = pheap_alloc(h, 64);
    REQUIRE(r);
    REQUIRE_OK(pheap_root_set(h, "r", r));
    pheap_close(h);
    pheap_options o = {.flags = PHEAP_RDONLY};
    pheap *a, *b;
    REQUIRE_OK(pheap_open(path, &o, &a));
    REQUIRE_OK(pheap_open(path, &o, &b)); /* readers share */
    CHECK_EQ(pheap_root_get(a, "r"), r);
    CHECK_EQ(pheap_root_set(a, "r", 0), PHEAP_ERDONLY);
    pheap_stats(a, &st);
    CHECK_EQ(st.readonly, 1);
    CHECK_EQ(st.open_count, 1); /* read-only opens write nothing */
    pheap *w;
    CHECK_EQ(pheap_open(path, NULL, &w), PHEAP_EBUSY);
    pheap_close(a);
    pheap_close(b);
    REQUIRE_OK(pheap_open(path, NULL, &w));
    pheap_close(w);
}

/* Runs fn in a child process; returns its exit status. */
static int in_child(int (*fn)(const char *), const char *path)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(path));
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

static int child_open_rw(const char *path)
{
    pheap *h;
    int rc = pheap_open(path, NULL, &h);
    return rc == PHEAP_EBUSY ? 1 : rc == 0 ? 0 : 2;
}

static int child_open_ro(const char *path)
{
    pheap *h;
    pheap_options o = {.flags = PHEAP_RDONLY};
    int rc = pheap_open(path, &o, &h);
    return rc == PHEAP_EBUSY ? 1 : rc == 0 ? 0 : 2;
}

static int child_crash(const char *path)
{
    pheap *h;
    if (pheap_open(path, NULL, &h) != 0)
        return 3;
    _exit(0); /* no pheap_close: as after kill -9 */
}

TEST(lock_between_processes)
{
    const char *path = ph_test_path("lock.heap");
    pheap *h = ph_test_create(path, SIZE);
    REQUIRE(h);
    CHECK_EQ(in_child(child_open_rw, path), 1);
    CHECK_EQ(in_child(child_open_ro, path), 1);
    pheap_close(h);
    CHECK_EQ(in_child(child_open_rw, path), 0);
    pheap_options o = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &o, &h));
    CHECK_EQ(in_child(child_open_ro, path), 0);
    CHECK_EQ(in_child(child_open_rw, path), 1);
    pheap_close(h);
}

TEST(unclean_shutdown_detected)
{
    const char *path = ph_test_path("crash.heap");
    pheap_close(ph_test_create(path, SIZE));
    REQUIRE_EQ(in_child(child_crash, path), 0);
    pheap *h;
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(path, &ro, &h));
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.was_unclean, 1); /* reported, nothing written */
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(st.unclean_count, 1);
    CHECK_EQ(st.open_count, 3);
    pheap_close(h);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_stats(h, &st);
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(st.unclean_count, 1);
    pheap_close(h);
}

TEST(errors_are_thread_local_and_described)
{
    pheap *h;
    CHECK_EQ(pheap_open(ph_test_path("missing.heap"), NULL, &h), PHEAP_ENOENT);
    CHECK_EQ(pheap_errno(), PHEAP_ENOENT);
    CHECK(strstr(pheap_errmsg(), "missing.heap") != NULL);
    CHECK_EQ(pheap_open(NULL, NULL, &h), PHEAP_EINVAL);
    CHECK_EQ(pheap_open("x", NULL, NULL), PHEAP_EINVAL);
    for (int e = 0; e >= PHEAP_ENOTALLOC; e--)
        CHECK(strcmp(pheap_strerror(e), "unknown error") != 0);
    CHECK(strcmp(pheap_strerror(-999), "unknown error") == 0);
    CHECK(strlen(pheap_version()) >= 5);
}

static void *fail_in_thread(void *arg)
{
    pheap *h;
    *(int *)arg = pheap_open(ph_test_path("nothing-here.heap"), NULL, &h);
    *((int *)arg + 1) = pheap_errno();
    return NULL;
}

TEST(error_slot_per_thread)
{
    pheap *h;
    CHECK_EQ(pheap_open("", NULL, &h), PHEAP_EINVAL);
    int res[2];
    pthread_t t;
    pthread_create(&t, NULL, fail_in_thread, res);
    pthread_join(t, NULL);
    CHECK_EQ(res[0], PHEAP_ENOENT);
    CHECK_EQ(res[1], PHEAP_ENOENT);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL); /* untouched by the other thread */
}

/* A creator killed at any instant leaves no temporary file behind: the heap
 * is made in an unnamed file and linked into place when complete. */
TEST(killed_creator_leaves_nothing)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/killed", ph_test_dir());
    REQUIRE(mkdir(dir, 0755) == 0);
    char path[600];
    snprintf(path, sizeof(path), "%s/k.heap", dir);
    uint64_t seed = 7;
    unsigned made = 0;
    for (int i = 0; i < 30; i++) {
        unlink(path);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE};
            pheap *h;
            _exit(pheap_open(path, &o, &h) == 0 ? 0 : 1);
        }
        usleep((useconds_t)(ph_test_rand(&seed) % 8000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        made += access(path, F_OK) == 0;
        DIR *d = opendir(dir);
        REQUIRE(d);
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, "k.heap"))
                ph_test_fail(__FILE__, __LINE__, "left behind: %s", e->d_name);
        closedir(d);
        if (access(path, F_OK) == 0) { /* what a kill leaves is a whole heap */
            pheap *h;
            REQUIRE_OK(pheap_open(path, NULL, &h));
            REQUIRE_OK(pheap_check(h, NULL));
            pheap_close(h);
        }
    }
    printf("  30 creators killed, %u had published their heap\n", made);
    unlink(path);
    rmdir(dir);
}
