/*
 * full_fs.c -- a heap on a file system that fills up: creation larger than
 * the file system and growth past its end fail with PHEAP_ENOSPC (never a
 * SIGBUS), and the heap stays consistent and usable afterwards.  Runs on an
 * 8 MiB tmpfs mounted in a private mount namespace of a child process, so
 * that the mount disappears with the child whatever happens; skipped with
 * a message where mounting is not allowed.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

#define FS_SIZE  "12m"
#define SKIPPED  77
#define MAX_BLOCKS 100000

static char fs_dir[512];

/* Child: a private mount namespace with a small tmpfs at fs_dir. */
static int mount_small_fs(void)
{
    if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("tmpfs", fs_dir, "tmpfs", 0, "size=" FS_SIZE) != 0) {
        printf("  skipped: cannot mount a %s tmpfs (%s); run as root to test a full file system\n",
               FS_SIZE, strerror(errno));
        return -1;
    }
    return 0;
}

/* Entries of fs_dir other than "." and "..". */
static unsigned dir_entries(void)
{
    unsigned n = 0;
    DIR *d = opendir(fs_dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static size_t block_size(unsigned i)
{
    static const size_t sizes[] = {96, 3000, 100 << 10, 512, 40 << 10};
    return sizes[i % 5];
}

static void creation_larger_than_the_fs(void)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/big.heap", fs_dir);
    pheap_options o = {.size = 24u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = NULL;
    int rc = pheap_open(path, &o, &h);
    CHECK_EQ(rc, PHEAP_ENOSPC);
    if (rc == 0)
        pheap_close(h);
    CHECK(strstr(pheap_errmsg(), "file system is full") != NULL);
    unlink(path);
    /* No heap and no temporary file left behind. */
    CHECK_EQ(dir_entries(), 0);
}

static void fill_until_full(void)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/fill.heap", fs_dir);
    pheap_options o = {.size = 5u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off *offs = calloc(MAX_BLOCKS, sizeof(*offs));
    REQUIRE(offs);
    unsigned n = 0;
    for (; n < MAX_BLOCKS; n++) {
        offs[n] = pheap_alloc(h, block_size(n));
        if (!offs[n])
            break;
        ph_test_fill(pheap_direct(h, offs[n]), block_size(n), n + 1);
    }
    REQUIRE(n > 0 && n < MAX_BLOCKS);
    CHECK_EQ(pheap_errno(), PHEAP_ENOSPC);
    CHECK(strstr(pheap_errmsg(), "file system is full") != NULL);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.size < st.max_size);
    printf("  %u blocks, heap %llu of %llu bytes when the file system filled: %s\n", n,
           (unsigned long long)st.size, (unsigned long long)st.max_size, pheap_errmsg());

    /* Still usable: free every fourth block, allocate them again. */
    for (unsigned i = 0; i < n; i += 4)
        REQUIRE_OK(pheap_free(h, offs[i]));
    for (unsigned i = 0; i < n; i += 4) {
        offs[i] = pheap_alloc(h, block_size(i));
        if (!offs[i]) {
            ph_test_fail(__FILE__, __LINE__, "block %u (%zu bytes) again: %s", i, block_size(i),
                         pheap_errmsg());
            return;
        }
        ph_test_fill(pheap_direct(h, offs[i]), block_size(i), i + 1);
    }
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, n);
    REQUIRE_OK(pheap_root_set(h, "first", offs[0]));
    REQUIRE_OK(pheap_close(h));

    REQUIRE_OK(pheap_open(path, NULL, &h));
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, n);
    CHECK_EQ(pheap_root_get(h, "first"), offs[0]);
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++)
        bad += !ph_test_intact(pheap_direct(h, offs[i]), block_size(i), i + 1);
    CHECK_EQ(bad, 0);
    REQUIRE_OK(pheap_close(h));
    free(offs);

    ph_tool_result *r = ph_test_run_tool(PHEAP_TOOL, "check", path, NULL);
    CHECK_TOOL(r->code == 0, r);

    /* A file shorter than the size its header records is refused. */
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0);
    REQUIRE(truncate(path, sb.st_size / 2) == 0);
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_ETRUNCATED);
    r = ph_test_run_tool(PHEAP_TOOL, "check", path, NULL);
    CHECK_TOOL(r->code == 1 && strstr(r->err, "truncated"), r);
    unlink(path);
}

/* Fills what is left of the file system with another file. */
static void fill_fs(const char *filler)
{
    FILE *f = fopen(filler, "w");
    static char buf[64 << 10];
    while (f && fwrite(buf, 1, sizeof(buf), f) == sizeof(buf) && fflush(f) == 0)
        ;
    if (f)
        fclose(f);
}

static long long file_blocks(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_blocks : -1;
}

/* A new heap of `size` bytes named `name` in the small file system (path
 * and filler get its path and that of a file to fill the rest), or NULL. */
static pheap *create_in_fs(const char *name, uint64_t size, char path[600], char filler[600])
{
    snprintf(path, 600, "%s/%s", fs_dir, name);
    snprintf(filler, 600, "%s/other", fs_dir);
    pheap_options o = {.size = size, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h) != 0)
        ph_test_fail(__FILE__, __LINE__, "create %s: %s", path, pheap_errmsg());
    return h;
}

/* A heap's first open reserves nothing more before a block is used
 * (src/alloc/extent_index.c): its creation reserved every page of the
 * data region.  So with the rest of the file system taken at once, the
 * whole data region can still be allocated and written, first in small
 * blocks, then (freed) in large ones, with no PHEAP_ENOSPC and no SIGBUS. */
static void fresh_heap_on_a_full_fs(void)
{
    char path[600], filler[600];
    pheap *h = create_in_fs("fresh.heap", 4u << 20, path, filler);
    REQUIRE(h);
    fill_fs(filler);
    static pheap_off small[32768];
    unsigned n = 0;
    while (n < 32768 && (small[n] = pheap_alloc(h, 512)) != 0) {
        memset(pheap_direct(h, small[n]), 0x5a, 512); /* SIGBUS here if not reserved */
        n++;
    }
    CHECK_EQ(pheap_errno(), PHEAP_ENOMEM); /* the heap is full, not the file system */
    CHECK(n > 3u * 1024 * 1024 / 512);
    for (unsigned i = 0; i < n; i++)
        REQUIRE_OK(pheap_free(h, small[i]));
    unsigned big = 0;
    pheap_off b;
    while ((b = pheap_alloc(h, 256 << 10)) != 0) {
        memset(pheap_direct(h, b), 0xa5, 256 << 10);
        big++;
    }
    CHECK(big >= 8u);
    printf("  fresh heap, file system full: %u blocks of 512 bytes, then %u of 256 KiB: %s\n", n, big,
           pheap_errmsg());
    unlink(filler);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}

/* Space a purge gave back to the file system, then taken by another file:
 * allocating it again is PHEAP_ENOSPC, never a SIGBUS at the first store.
 * Once inside one open (the purge after frees), once across a reopen
 * (free space whose past open does not know). */
static void reuse_after_punch(void)
{
    char path[600], filler[600];
    pheap *h = create_in_fs("punch.heap", 7u << 20, path, filler);
    REQUIRE(h);
    pheap_off t = pheap_alloc_init(h, 16 * sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(t);
    REQUIRE_OK(pheap_root_set(h, "blocks", t));
    for (int round = 0; round < 2; round++) {
        pheap_off *w = pheap_direct(h, t);
        for (int i = 0; i < 16; i++)
            REQUIRE_OK(pheap_alloc_to(h, 256 << 10, &w[i]));
        long long full = file_blocks(path);
        for (int i = 0; i < 16; i++)
            REQUIRE_OK(pheap_free_from(h, &w[i]));
        if (round == 0) { /* the purge of this open: a while after the frees */
            usleep(200000);
            pheap_off b = pheap_alloc(h, 64 << 10);
            REQUIRE(b);
            REQUIRE_OK(pheap_free(h, b));
        } else { /* the purge at close, then a reopen */
            REQUIRE_OK(pheap_close(h));
            REQUIRE_OK(pheap_open(path, NULL, &h));
            t = pheap_root_get(h, "blocks");
            w = pheap_direct(h, t);
        }
        CHECK(file_blocks(path) < full); /* the space went back */
        fill_fs(filler);
        unsigned got = 0;
        for (int i = 0; i < 16; i++) {
            int rc = pheap_alloc_to(h, 256 << 10, &w[i]);
            if (rc) {
                CHECK_EQ(rc, PHEAP_ENOSPC);
                break;
            }
            memset(pheap_direct(h, w[i]), 0x5a, 256 << 10); /* SIGBUS here before */
            got++;
        }
        CHECK(got < 16);
        printf("  round %d: %u of 16 blocks of 256 KiB once the space was taken: %s\n", round, got,
               pheap_errmsg());
        unlink(filler);
        for (int i = 0; i < 16; i++)
            REQUIRE_OK(pheap_free_from(h, &w[i]));
        pheap_check_report rep;
        CHECK_EQ(pheap_check(h, &rep), 0);
        CHECK_EQ(rep.live_blocks, 1);
    }
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}

/* Bad input: a heap whose data pages a purge gave back, and whose open
 * count reads 0 as if it had never been opened (nothing checks the
 * count).  Its open must not take its free pages for reserved: with the
 * file system full, an allocation is PHEAP_ENOSPC, never a SIGBUS at the
 * first store.  (Its extent log, written before, tells it apart from a
 * new heap.) */
static void forged_first_open(void)
{
    char path[600], filler[600];
    pheap *h = create_in_fs("forged.heap", 7u << 20, path, filler);
    REQUIRE(h);
    static pheap_off v[16];
    for (int i = 0; i < 16; i++) {
        REQUIRE((v[i] = pheap_alloc(h, 256 << 10)) != 0);
        memset(pheap_direct(h, v[i]), 0x11, 256 << 10);
    }
    long long full = file_blocks(path);
    for (int i = 0; i < 16; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    REQUIRE_OK(pheap_close(h)); /* the purge at close punches the blocks' pages */
    CHECK(file_blocks(path) < full);
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    uint64_t zero = 0;
    REQUIRE(pwrite(fd, &zero, 8, PH_STATE_OFFSET + offsetof(ph_state, xopen_count)) == 8);
    close(fd);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    fill_fs(filler);
    unsigned got = 0;
    int rc = 0;
    for (int i = 0; i < 16; i++) {
        if ((v[i] = pheap_alloc(h, 256 << 10)) == 0) {
            rc = pheap_errno();
            break;
        }
        memset(pheap_direct(h, v[i]), 0x22, 256 << 10); /* SIGBUS here if not reserved */
        got++;
    }
    CHECK(got < 16);
    CHECK_EQ(rc, PHEAP_ENOSPC);
    printf("  open count forged to 0: %u of 16 blocks of 256 KiB once the space was taken: %s\n",
           got, pheap_errmsg());
    unlink(filler);
    for (unsigned i = 0; i < got; i++)
        REQUIRE_OK(pheap_free(h, v[i]));
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    REQUIRE_OK(pheap_close(h));
    unlink(path);
}

/* At the checkpoint level the heap runs in a working copy in a memory
 * file system: here the small one, the heap file beside the test's others.
 * A working copy that does not fit fails the open with PHEAP_ENOSPC and
 * leaves nothing; one that fits holds every page the heap file reserves
 * (its zero pages too), so a heap that fills it gets PHEAP_ENOSPC from its
 * calls, never a SIGBUS at a store into a block it holds. */
static void working_copy_on_a_full_fs(void)
{
    char work[600], path[600];
    snprintf(work, sizeof(work), "%s/work", fs_dir);
    REQUIRE(mkdir(work, 0700) == 0);
    setenv("PHEAP_WORKDIR", work, 1);
    snprintf(path, sizeof(path), "%s", ph_test_path("ckpt-big.heap"));
    pheap_options o = {.size = 24u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .durability = PHEAP_DURABILITY_CHECKPOINT};
    pheap *h = NULL;
    int rc = pheap_open(path, &o, &h);
    CHECK_EQ(rc, PHEAP_ENOSPC);
    if (rc == 0)
        pheap_close(h);
    CHECK_EQ(dir_entries(), 1); /* the working-copy directory, empty */
    unlink(path);

    snprintf(path, sizeof(path), "%s", ph_test_path("ckpt-fill.heap"));
    o = (pheap_options){.size = 4u << 20, .max_size = 64u << 20,
                        .flags = PHEAP_CREATE | PHEAP_EXCL,
                        .durability = PHEAP_DURABILITY_CHECKPOINT};
    REQUIRE_OK(pheap_open(path, &o, &h));
    /* Blocks whose pages are zeros in the heap file: holes in the working
     * copy before it reserved them. */
    unsigned n = 0;
    pheap_off off;
    while (n < MAX_BLOCKS && (off = pheap_alloc(h, block_size(n))) != 0) {
        memset(pheap_direct(h, off), 0x5a, block_size(n)); /* SIGBUS here before */
        n++;
    }
    CHECK(n > 0 && n < MAX_BLOCKS);
    CHECK_EQ(pheap_errno(), PHEAP_ENOSPC);
    printf("  checkpoint level: %u blocks when the working copy's file system filled: %s\n", n,
           pheap_errmsg());
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, n);
    REQUIRE_OK(pheap_close(h));
    REQUIRE_OK(pheap_open(path, NULL, &h)); /* the file has it all */
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, n);
    REQUIRE_OK(pheap_close(h));
    unlink(path);
    unsetenv("PHEAP_WORKDIR");
    rmdir(work);
}

TEST(full_file_system)
{
    snprintf(fs_dir, sizeof(fs_dir), "%s", ph_test_path("smallfs"));
    REQUIRE(mkdir(fs_dir, 0755) == 0);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (mount_small_fs() != 0)
            _exit(SKIPPED);
        creation_larger_than_the_fs();
        fill_until_full();
        fresh_heap_on_a_full_fs();
        reuse_after_punch();
        forged_first_open();
        working_copy_on_a_full_fs();
        if (umount(fs_dir) != 0)
            ph_test_fail(__FILE__, __LINE__, "umount %s: %s", fs_dir, strerror(errno));
        fflush(NULL);
        _exit(ph_test_failed ? 1 : 0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status))
        ph_test_fail(__FILE__, __LINE__, "the process died of signal %d (%s)", WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
    else if (WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != SKIPPED)
        ph_test_fail(__FILE__, __LINE__, "failed on the small file system (see above)");
    rmdir(fs_dir);
}
