/*
 * fork.c -- fork() with an open heap: in the child every call on the
 * inherited handle fails with PHEAP_EFORKED (so parent and child never hand
 * out the same blocks), pheap_close of the copy touches neither the heap
 * nor the parent's file lock, and the parent goes on as if nothing happened.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

#define MiB (1024u * 1024u)
#define PARENT_BLOCKS 2000

/* The state word as the file holds it now (the mapping is shared). */
static uint64_t clean_word(const char *path)
{
    ph_state st;
    int fd = open(path, O_RDONLY);
    ssize_t n = fd >= 0 ? pread(fd, &st, sizeof(st), PH_STATE_OFFSET) : -1;
    if (fd >= 0)
        close(fd);
    return n == (ssize_t)sizeof(st) ? st.xclean : ~0ull;
}

#define CHECK_FORKED(expr)                                                              \
    do {                                                                                \
        set_other_error();                                                                 \
        (void)(expr);                                                                   \
        if (pheap_errno() != PHEAP_EFORKED)                                             \
            ph_test_fail(__FILE__, __LINE__, "%s in the child: error %d (%s), expected " \
                         "PHEAP_EFORKED", #expr, pheap_errno(), pheap_errmsg());        \
    } while (0)

/* Sets the calling thread's last error to something other than EFORKED. */
static void set_other_error(void)
{
    (void)pheap_alloc(NULL, 1);
}

/* The child: everything on the inherited handle fails; its close is
 * harmless; a heap it opens itself works. */
static void child(pheap *h, const char *path, pheap_off live, pheap_off *word, int go)
{
    CHECK(pheap_alloc(h, 64) == 0);
    CHECK_EQ(pheap_errno(), PHEAP_EFORKED);
    CHECK(strstr(pheap_errmsg(), "fork") != NULL);
    CHECK(strcmp(pheap_strerror(PHEAP_EFORKED), "unknown error") != 0);
    CHECK(pheap_alloc(h, 100000) == 0);
    CHECK_EQ(pheap_errno(), PHEAP_EFORKED);
    CHECK_EQ(pheap_free(h, live), PHEAP_EFORKED);
    CHECK_EQ(pheap_free(h, 0), PHEAP_EFORKED);
    CHECK_EQ(pheap_alloc_to(h, 64, word), PHEAP_EFORKED);
    CHECK_EQ(pheap_free_from(h, word), PHEAP_EFORKED);
    CHECK_EQ(pheap_root_set(h, "child", live), PHEAP_EFORKED);
    CHECK_FORKED(pheap_root_get(h, "list"));
    CHECK_FORKED(pheap_root_count(h));
    char name[PHEAP_ROOT_NAME_MAX + 1];
    pheap_off off;
    CHECK_EQ(pheap_root_at(h, 0, name, &off), PHEAP_EFORKED);
    CHECK_FORKED(pheap_usable_size(h, live));
    CHECK(pheap_direct(h, live) == NULL);
    CHECK_FORKED(pheap_direct(h, live));
    CHECK_FORKED(pheap_offset(h, word));
    CHECK_FORKED(pheap_flush(h, word, 8));
    CHECK_FORKED(pheap_drain(h));
    CHECK_FORKED(pheap_persist(h, word, 8));
    struct pheap_stats st;
    CHECK_EQ(pheap_stats(h, &st), PHEAP_EFORKED);
    pheap_class_info ci;
    CHECK_EQ(pheap_stats_class(h, 0, &ci), PHEAP_EFORKED);
    CHECK_EQ(pheap_check(h, NULL), PHEAP_EFORKED);
    CHECK_EQ(pheap_sim_crash(h, "x", 1, 0), PHEAP_EFORKED);

    /* Wait until the parent has reused the freed large block, then close:
     * no clean mark, no purge of what the copy thinks is free. */
    char c;
    CHECK(read(go, &c, 1) == 1);
    CHECK_EQ(pheap_close(h), 0);
    /* The parent still holds the lock. */
    pheap *again = NULL;
    CHECK_EQ(pheap_open(path, NULL, &again), PHEAP_EBUSY);

    /* A heap opened in the child is an ordinary heap. */
    const char *own_path = ph_test_path("child.heap");
    pheap *own = ph_test_create(own_path, 4 * MiB);
    REQUIRE(own);
    pheap_off a = pheap_alloc(own, 64);
    CHECK(a != 0);
    CHECK_EQ(pheap_free(own, a), 0);
    CHECK_EQ(pheap_check(own, NULL), 0);
    CHECK_EQ(pheap_close(own), 0);
}

TEST(inherited_handle_fails_and_parent_goes_on)
{
    const char *path = ph_test_path("fork.heap");
    pheap *h = ph_test_create(path, 16 * MiB);
    REQUIRE(h);
    /* Warm the thread cache, keep a live block and a word for alloc_to,
     * and free a written large block so that the copy has a purge due. */
    pheap_off live = pheap_alloc(h, 64);
    pheap_off holder = pheap_alloc(h, 64);
    REQUIRE(live && holder);
    pheap_off *word = pheap_direct(h, holder);
    *word = 0;
    REQUIRE_OK(pheap_root_set(h, "list", live));
    pheap_off big = pheap_alloc(h, 2 * MiB);
    REQUIRE(big);
    memset(pheap_direct(h, big), 0x11, 2 * MiB);
    REQUIRE_OK(pheap_free(h, big));

    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        close(pipefd[1]);
        child(h, path, live, word, pipefd[0]);
        fflush(NULL);
        _exit(ph_test_failed ? 1 : 0);
    }
    close(pipefd[0]);

    /* The parent: its allocations go on, the freed large block comes back
     * and is written while the child still holds its copy. */
    pheap_off again = pheap_alloc(h, 2 * MiB);
    CHECK_EQ(again, big);
    ph_test_fill(pheap_direct(h, again), 2 * MiB, 42);
    pheap_persist(h, pheap_direct(h, again), 2 * MiB);
    pheap_off *offs = calloc(PARENT_BLOCKS, sizeof(*offs));
    REQUIRE(offs);
    for (unsigned i = 0; i < PARENT_BLOCKS; i++) {
        offs[i] = pheap_alloc(h, 64);
        REQUIRE(offs[i]);
        ph_test_fill(pheap_direct(h, offs[i]), 64, i + 1);
    }
    REQUIRE(write(pipefd[1], "g", 1) == 1);
    close(pipefd[1]);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The child's close left the heap as the parent has it. */
    CHECK_EQ(clean_word(path), PH_STATE_OPEN);
    CHECK(ph_test_intact(pheap_direct(h, again), 2 * MiB, 42));
    for (unsigned i = 0; i < PARENT_BLOCKS; i++)
        CHECK(ph_test_intact(pheap_direct(h, offs[i]), 64, i + 1));
    CHECK_EQ(pheap_root_get(h, "list"), live);
    CHECK_EQ(pheap_root_get(h, "child"), 0);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, PARENT_BLOCKS + 3);
    pheap_off more = pheap_alloc(h, 64);
    CHECK(more != 0);
    REQUIRE_OK(pheap_close(h));

    REQUIRE_OK(pheap_open(path, NULL, &h));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.was_unclean, 0);
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, PARENT_BLOCKS + 4);
    CHECK(ph_test_intact(pheap_direct(h, again), 2 * MiB, 42));
    pheap_close(h);
    free(offs);
}
