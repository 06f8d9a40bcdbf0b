/*
 * snapshot.c -- PHEAP_SNAPSHOT: a private view that never writes the file.
 * A heap left by a crash with a logged operation in flight is recovered
 * inside the view (the file is unchanged, and a read-only open still sees
 * it dirty); a heap held read-write by another process opens as a
 * snapshot without lock or recovery; a heap the caller may only read
 * opens; write calls and bad flag combinations are refused.
 */
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define FAIL(...) ph_test_fail(__FILE__, __LINE__, __VA_ARGS__)

static int same_file(const char *a, const char *b)
{
    char cmd[1300];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

TEST(snapshot_recovers_a_crashed_heap_privately)
{
    const char *image = ph_test_path("snap-crashed.heap");
    const char *copy = ph_test_path("snap-crashed.copy");
    pheap_off slots_off;
    REQUIRE(ph_test_interrupted_alloc_to(image, &slots_off) == 0);
    REQUIRE(ph_test_copy_file(image, copy) == 0);

    /* Read-only: no recovery; the operation's block is not allocated yet. */
    pheap *h;
    pheap_options ro = {.flags = PHEAP_RDONLY};
    REQUIRE_OK(pheap_open(image, &ro, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.was_unclean, 1);
    CHECK_EQ(st.recovered_ops, 0);
    CHECK_EQ(st.snapshot, 0);
    uint64_t live_before = st.live_blocks;
    CHECK_EQ(((pheap_off *)pheap_direct(h, slots_off))[1], 0);
    pheap_close(h);

    /* Snapshot: recovered in the view, consistent, the file untouched. */
    for (unsigned flags = PHEAP_SNAPSHOT; flags; flags = flags == PHEAP_SNAPSHOT ? PHEAP_SNAPSHOT | PHEAP_RDONLY : 0) {
        pheap_options so = {.flags = flags};
        REQUIRE_OK(pheap_open(image, &so, &h));
        REQUIRE_OK(pheap_stats(h, &st));
        CHECK_EQ(st.snapshot, 1);
        CHECK_EQ(st.readonly, 1);
        CHECK_EQ(st.held_elsewhere, 0);
        CHECK_EQ(st.was_unclean, 1);
        CHECK_EQ(st.recovered_ops, 1);
        CHECK_EQ(st.live_blocks, live_before + 1);
        /* a snapshot writes nothing; it reports the back end a writer would use */
        CHECK(st.flush != PHEAP_FLUSH_NONE && st.flush != PHEAP_FLUSH_SIM);
        pheap_off *slots = pheap_direct(h, slots_off);
        REQUIRE(slots);
        CHECK(slots[1] != 0 && pheap_usable_size(h, slots[1]) >= 64);
        pheap_check_report r;
        CHECK_EQ(pheap_check(h, &r), 0);
        CHECK_EQ(r.live_blocks, live_before + 1);
        /* Every write call is refused. */
        CHECK_EQ(pheap_alloc(h, 64), 0);
        CHECK_EQ(pheap_errno(), PHEAP_ERDONLY);
        CHECK_EQ(pheap_free(h, slots[0]), PHEAP_ERDONLY);
        CHECK_EQ(pheap_root_set(h, "x", 0), PHEAP_ERDONLY);
        REQUIRE_OK(pheap_close(h));
        CHECK(same_file(image, copy));
    }

    /* The next read-write open does what the snapshot showed. */
    REQUIRE_OK(pheap_open(image, NULL, &h));
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.recovered_ops, 1);
    CHECK_EQ(st.live_blocks, live_before + 1);
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
    CHECK(!same_file(image, copy));
}

TEST(snapshot_of_a_heap_held_elsewhere)
{
    const char *path = ph_test_path("held.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    for (int i = 0; i < 10; i++)
        REQUIRE(pheap_alloc(h, i < 5 ? 100 : 50000));
    REQUIRE_OK(pheap_close(h));
    int pid = ph_test_hold(path, 0);
    REQUIRE(pid > 0);
    pheap_options ro = {.flags = PHEAP_RDONLY};
    CHECK_EQ(pheap_open(path, &ro, &h), PHEAP_EBUSY);
    pheap_options so = {.flags = PHEAP_SNAPSHOT};
    int rc = pheap_open(path, &so, &h);
    CHECK_EQ(rc, 0);
    if (rc == 0) {
        struct pheap_stats st;
        REQUIRE_OK(pheap_stats(h, &st));
        CHECK_EQ(st.snapshot, 1);
        CHECK_EQ(st.held_elsewhere, 1);
        CHECK_EQ(st.was_unclean, 0); /* in use, not crashed */
        CHECK_EQ(st.recovered_ops, 0);
        CHECK_EQ(st.live_blocks, 10);
        CHECK_EQ(st.large_extents, 5);
        CHECK_EQ(pheap_alloc(h, 8), 0);
        CHECK_EQ(pheap_errno(), PHEAP_ERDONLY);
        pheap_close(h);
    }
    CHECK_EQ(ph_test_release(pid), 0); /* the holder never noticed */
    /* Not held: the snapshot takes the shared lock, which keeps writers out. */
    REQUIRE_OK(pheap_open(path, &so, &h));
    pheap *w;
    CHECK_EQ(pheap_open(path, NULL, &w), PHEAP_EBUSY);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.held_elsewhere, 0);
    CHECK_EQ(st.was_unclean, 0);
    pheap_close(h);
}

TEST(snapshot_of_a_heap_the_caller_may_only_read)
{
    const char *path = ph_test_path("readable.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    REQUIRE(pheap_alloc(h, 100));
    REQUIRE_OK(pheap_close(h));
    const char *copy = ph_test_path("readable.copy");
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    if (geteuid() != 0) {
        REQUIRE(chmod(path, 0400) == 0);
    } else {
        REQUIRE(chmod(path, 0400) == 0 && chown(path, 65534, 65534) == 0);
        REQUIRE(chmod(ph_test_dir(), 0755) == 0);
    }
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
            _exit(3);
        if (access(path, R_OK) != 0)
            _exit(4);
        pheap_options rw = {0}, so = {.flags = PHEAP_SNAPSHOT};
        if (pheap_open(path, &rw, &h) != PHEAP_EACCES)
            _exit(5);
        if (pheap_open(path, &so, &h) != 0)
            _exit(6);
        int rc = pheap_check(h, NULL);
        pheap_close(h);
        _exit(rc == 0 ? 0 : 7);
    }
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    if (WEXITSTATUS(status) == 4) {
        fprintf(stderr, "  skipped: %s is not reachable for uid 65534\n", path);
        return;
    }
    CHECK_EQ(WEXITSTATUS(status), 0);
    CHECK(same_file(path, copy));
}

TEST(snapshot_flags)
{
    const char *path = ph_test_path("flags.heap");
    pheap_close(ph_test_create(path, 4u << 20));
    pheap *h = (pheap *)1;
    pheap_options o = {.flags = PHEAP_SNAPSHOT | PHEAP_CREATE};
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    CHECK(h == NULL);
    CHECK(strstr(pheap_errmsg(), "PHEAP_SNAPSHOT") != NULL);
    o.flags = PHEAP_SNAPSHOT | PHEAP_SIMULATE;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    o.flags = PHEAP_SNAPSHOT;
    CHECK_EQ(pheap_open(ph_test_path("absent.heap"), &o, &h), PHEAP_ENOENT);
    CHECK(access(ph_test_path("absent.heap"), F_OK) != 0);
}
