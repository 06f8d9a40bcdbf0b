/*
 * checkpoint.c -- the checkpoint durability level (pheap_durability,
 * docs/PERSISTENCE.md "Checkpoints"): a process crash takes nothing, a
 * power loss takes the heap back to its last checkpoint; which copy an
 * open starts from; automatic checkpoints and threads; what is refused.
 *
 * A power loss is played by copying the heap file: between checkpoints
 * pheap does not write it, so its contents are the last checkpoint, and
 * the copy (another inode) has no working copy, as after a reboot.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_model.h"
#include "format/layout.h"
#include "harness.h"
#include "heap/heap.h"
#include "persist/ckpt.h"
#include "util/crc32c.h"
#include "util/util.h"

static const char *workdir(void)
{
    static char dir[4096];
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s/work", ph_test_dir());
        mkdir(dir, 0700);
        setenv("PHEAP_WORKDIR", dir, 1);
    }
    return dir;
}

/* 1 if the heap file at `path` has a working copy. */
static int has_working_copy(const char *path)
{
    struct stat st;
    char w[4200];
    if (stat(path, &st) != 0)
        return 0;
    snprintf(w, sizeof(w), "%s/%llx-%llx.work", workdir(), (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    return access(w, F_OK) == 0;
}

static pheap *open_level(const char *path, unsigned level, unsigned flags)
{
    workdir();
    pheap_options o = {.flags = flags, .size = 8u << 20, .max_size = 64u << 20,
                       .durability = level};
    pheap *h = NULL;
    return pheap_open(path, &o, &h) == 0 ? h : NULL;
}

static void run_ops(pheap *h, uint64_t *rng, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        int rc = ckm_op(h, rng);
        if (rc && rc != PHEAP_ENOMEM) {
            ph_test_fail(__FILE__, __LINE__, "op %u: %d (%s)", i, rc, pheap_errmsg());
            return;
        }
    }
}

/* Opens a copy of `path` and its journal (the file after a power loss),
 * checks it and returns the open heap (NULL: failed). */
static pheap *open_after_power_loss(const char *path, const char *copy, pheap_check_report *rep)
{
    if (ph_test_copy_file(path, copy) != 0)
        return NULL;
    char jsrc[4200], jdst[4200];
    snprintf(jsrc, sizeof(jsrc), "%s.ckpt", path);
    snprintf(jdst, sizeof(jdst), "%s.ckpt", copy);
    unlink(jdst);
    if (access(jsrc, F_OK) == 0 && ph_test_copy_file(jsrc, jdst) != 0)
        return NULL;
    pheap *h = open_level(copy, PHEAP_DURABILITY_SYNC, 0);
    if (!h)
        return NULL;
    CHECK_EQ(pheap_check(h, rep), 0);
    CHECK_EQ(rep->errors, 0);
    return h;
}

/* The digest of the model's state in the heap file after a power loss,
 * whose blocks must be all the heap holds. */
static uint64_t digest_after_power_loss(const char *path, const char *copy)
{
    pheap_check_report rep;
    pheap *h = open_after_power_loss(path, copy, &rep);
    if (!h)
        return 0;
    uint64_t blocks = 0, d = ckm_digest(h, &blocks);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(rep.live_blocks, blocks + st.name_segments); /* nothing leaked */
    pheap_close(h);
    return d;
}

TEST(kill_keeps_every_call_and_a_power_loss_keeps_the_last_checkpoint)
{
    const char *path = ph_test_path("ckpt-kill.heap");
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
        uint64_t rng = 7, d[2] = {0, 0};
        if (!h || ckm_setup(h))
            _exit(1);
        run_ops(h, &rng, 400);
        if (pheap_checkpoint(h) != 0)
            _exit(2);
        d[0] = ckm_digest(h, NULL);
        run_ops(h, &rng, 400);
        d[1] = ckm_digest(h, NULL);
        if (write(fds[1], d, sizeof(d)) != (ssize_t)sizeof(d))
            _exit(3);
        raise(SIGKILL);
    }
    close(fds[1]);
    uint64_t d[2] = {0, 0};
    CHECK_EQ(read(fds[0], d, sizeof(d)), sizeof(d));
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    REQUIRE(WIFSIGNALED(st));
    REQUIRE(d[0] != d[1]);
    CHECK_EQ(has_working_copy(path), 1);

    /* pheap info tells which copy the next open starts from. */
    ph_tool_result *r = ph_test_run_tool(PHEAP_TOOL, "info", path, "--json", (char *)NULL);
    CHECK_TOOL(r->code == 0 && ph_test_json_object(r->out), r);
    CHECK_TOOL(strstr(r->out, "\"working_copy\": \"") != NULL, r);
    CHECK_TOOL(strstr(r->out, "\"journal\": \"applied\"") != NULL, r);
    CHECK_TOOL(ph_test_json_num(r->out, "checkpoints") >= 1, r);
    r = ph_test_run_tool(PHEAP_TOOL, "info", path, (char *)NULL);
    CHECK_TOOL(r->code == 0 && strstr(r->out, "working copy: ") != NULL, r);

    /* Power loss: the file is the checkpoint. */
    CHECK(digest_after_power_loss(path, ph_test_path("ckpt-kill-copy.heap")) == d[0]);

    /* Process crash: the working copy has every call. */
    pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
    REQUIRE(h);
    struct pheap_stats s;
    pheap_stats(h, &s);
    CHECK_EQ(s.durability, PHEAP_DURABILITY_CHECKPOINT);
    CHECK_EQ(s.from_working_copy, 1);
    CHECK_EQ(s.was_unclean, 1);
    CHECK_EQ(s.flush, PHEAP_FLUSH_CHECKPOINT);
    CHECK(ckm_digest(h, NULL) == d[1]);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    /* The first checkpoint after resuming compares every page: the file
     * then holds everything. */
    REQUIRE_OK(pheap_checkpoint(h));
    CHECK(digest_after_power_loss(path, ph_test_path("ckpt-kill-copy2.heap")) == d[1]);
    uint64_t rng = 99;
    run_ops(h, &rng, 200);
    uint64_t end = ckm_digest(h, NULL);
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(has_working_copy(path), 0); /* a clean close leaves only the file */
    r = ph_test_run_tool(PHEAP_TOOL, "info", path, "--json", (char *)NULL);
    CHECK_TOOL(strstr(r->out, "\"working_copy\": null") != NULL, r);
    CHECK(digest_after_power_loss(path, ph_test_path("ckpt-kill-copy3.heap")) == end);

    h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
    REQUIRE(h);
    pheap_stats(h, &s);
    CHECK_EQ(s.from_working_copy, 0);
    CHECK_EQ(s.was_unclean, 0);
    CHECK(ckm_digest(h, NULL) == end);
    REQUIRE_OK(pheap_close(h));
}

TEST(an_open_at_another_level_takes_in_a_working_copy_a_crash_left)
{
    const char *path = ph_test_path("ckpt-absorb.heap");
    pid_t pid = fork();
    if (pid == 0) {
        pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
        uint64_t rng = 3;
        if (!h || ckm_setup(h))
            _exit(1);
        run_ops(h, &rng, 300);
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    REQUIRE(WIFSIGNALED(st));
    REQUIRE_EQ(has_working_copy(path), 1);
    /* What the child did, replayed in this process on a heap of its own. */
    pheap *ref = open_level(ph_test_path("ckpt-absorb-ref.heap"), PHEAP_DURABILITY_SYNC,
                            PHEAP_CREATE);
    REQUIRE(ref);
    uint64_t rng = 3;
    REQUIRE_OK(ckm_setup(ref));
    run_ops(ref, &rng, 300);
    uint64_t want = ckm_digest(ref, NULL);
    pheap_close(ref);

    /* A read-only open reads the file: the heap as created (no checkpoint
     * was taken), not what the working copy holds. */
    pheap *h = open_level(path, 0, PHEAP_RDONLY);
    REQUIRE(h);
    CHECK(ckm_slots(h) == NULL);
    pheap_close(h);
    CHECK_EQ(has_working_copy(path), 1);

    h = open_level(path, PHEAP_DURABILITY_SYNC, 0);
    REQUIRE(h);
    CHECK_EQ(has_working_copy(path), 0);
    struct pheap_stats s;
    pheap_stats(h, &s);
    CHECK_EQ(s.durability, PHEAP_DURABILITY_SYNC);
    CHECK_EQ(s.was_unclean, 1);
    CHECK(ckm_digest(h, NULL) == want);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    REQUIRE_OK(pheap_close(h));
}

static pheap *shared;
static uint64_t stop_threads;

static void *worker(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 7919 + 1;
    pheap_off mine[32] = {0};
    while (!__atomic_load_n(&stop_threads, __ATOMIC_ACQUIRE)) {
        unsigned j = (unsigned)(ph_test_rand(&rng) % 32);
        if (mine[j]) {
            if (!ph_test_intact(pheap_direct(shared, mine[j]), 16, mine[j]))
                ph_test_fail(__FILE__, __LINE__, "a block's contents changed");
            pheap_free(shared, mine[j]);
            mine[j] = 0;
        } else if ((mine[j] = pheap_alloc(shared, 16 + ph_test_rand(&rng) % 3000)) != 0) {
            ph_test_fill(pheap_direct(shared, mine[j]), 16, mine[j]);
        }
    }
    for (unsigned j = 0; j < 32; j++)
        if (mine[j])
            pheap_free(shared, mine[j]);
    return NULL;
}

TEST(automatic_checkpoints_while_threads_allocate_and_free)
{
    const char *path = ph_test_path("ckpt-auto.heap");
    workdir();
    pheap_options o = {.flags = PHEAP_CREATE, .size = 8u << 20, .max_size = 64u << 20,
                       .durability = PHEAP_DURABILITY_CHECKPOINT, .checkpoint_ms = 5};
    REQUIRE_OK(pheap_open(path, &o, &shared));
    enum { N = 6 };
    pthread_t t[N];
    for (unsigned i = 0; i < N; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    struct pheap_stats s;
    for (int i = 0; i < 2000; i++) {
        pheap_stats(shared, &s);
        if (s.checkpoints >= 10)
            break;
        usleep(1000);
    }
    /* Checkpoints from here as well, racing the automatic ones. */
    for (unsigned i = 0; i < 5; i++) {
        REQUIRE_OK(pheap_checkpoint(shared));
        /* every checkpoint is a heap that opens and checks clean -- copied with no
         * automatic checkpoint running: a power loss stops the file and its journal
         * at one instant, two copies one after the other would not */
        pheap_check_report rep;
        pthread_mutex_t *one_at_a_time = &shared->sp.persist.ckpt->lock;
        pthread_mutex_lock(one_at_a_time);
        pheap *c = open_after_power_loss(path, ph_test_path("ckpt-auto-copy.heap"), &rep);
        pthread_mutex_unlock(one_at_a_time);
        CHECK(c != NULL);
        pheap_close(c);
    }
    __atomic_store_n(&stop_threads, 1, __ATOMIC_RELEASE);
    for (unsigned i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    pheap_stats(shared, &s);
    CHECK(s.checkpoints >= 10);
    CHECK_EQ(s.checkpoint_errors, 0);
    CHECK(s.checkpoint_bytes > 0);
    CHECK_EQ(s.live_blocks, 0);
    REQUIRE_OK(pheap_close(shared));
    pheap *h = open_level(path, PHEAP_DURABILITY_SYNC, 0);
    REQUIRE(h);
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    CHECK_EQ(rep.live_blocks, 0);
    pheap_close(h);
}

static int init_checkpoints(pheap *h, void *block, size_t usable, void *arg)
{
    (void)block;
    (void)usable;
    *(int *)arg = pheap_checkpoint(h);
    return 0;
}

TEST(bad_calls_are_refused_and_change_nothing)
{
    const char *path = ph_test_path("ckpt-bad.heap");
    CHECK_EQ(pheap_checkpoint(NULL), PHEAP_EINVAL);
    pheap *h = open_level(path, PHEAP_DURABILITY_SYNC, PHEAP_CREATE);
    REQUIRE(h);
    CHECK_EQ(pheap_checkpoint(h), 0); /* sync: nothing to do */
    pheap_close(h);

    pheap_options o = {.durability = PHEAP_DURABILITY_CHECKPOINT, .flush = PHEAP_FLUSH_MSYNC};
    h = NULL;
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    o = (pheap_options){.durability = PHEAP_DURABILITY_CHECKPOINT, .flags = PHEAP_SIMULATE};
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    o = (pheap_options){.durability = 7};
    CHECK_EQ(pheap_open(path, &o, &h), PHEAP_EINVAL);
    /* PHEAP_FLUSH gives way to a level the program asks for, and
     * contradicts one the environment asks for. */
    setenv("PHEAP_FLUSH", "msync", 1);
    workdir();
    o = (pheap_options){.durability = PHEAP_DURABILITY_CHECKPOINT};
    REQUIRE_OK(pheap_open(path, &o, &h));
    struct pheap_stats fs;
    pheap_stats(h, &fs);
    CHECK_EQ(fs.flush, PHEAP_FLUSH_CHECKPOINT);
    REQUIRE_OK(pheap_close(h));
    setenv("PHEAP_DURABILITY", "checkpoint", 1);
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EINVAL);
    unsetenv("PHEAP_FLUSH");
    setenv("PHEAP_DURABILITY", "often", 1);
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EINVAL);
    setenv("PHEAP_DURABILITY", "checkpoint", 1);
    setenv("PHEAP_CHECKPOINT_MS", "soon", 1);
    CHECK_EQ(pheap_open(path, NULL, &h), PHEAP_EINVAL);
    unsetenv("PHEAP_CHECKPOINT_MS");
    workdir();
    REQUIRE_OK(pheap_open(path, NULL, &h)); /* the environment chooses the level */
    struct pheap_stats s;
    pheap_stats(h, &s);
    CHECK_EQ(s.durability, PHEAP_DURABILITY_CHECKPOINT);
    unsetenv("PHEAP_DURABILITY");
    /* From an initialiser: refused (the checkpoint would wait for the call
     * it runs in). */
    int inner = 0;
    CHECK(pheap_alloc_init(h, 64, 0, init_checkpoints, &inner) != 0);
    CHECK_EQ(inner, PHEAP_EBUSY);
    REQUIRE_OK(pheap_close(h));

    /* A GC heap. */
    const char *gpath = ph_test_path("ckpt-gc.heap");
    pheap *g = ph_test_create_mode(gpath, 4u << 20, PHEAP_CONSISTENCY_GC, 0);
    REQUIRE(g);
    pheap_close(g);
    CHECK(open_level(gpath, PHEAP_DURABILITY_CHECKPOINT, 0) == NULL);
    CHECK_EQ(pheap_errno(), PHEAP_EINVAL);
    CHECK_EQ(has_working_copy(gpath), 0);
    /* The level from the environment is a default: a GC heap, or a program
     * that sets a flush kind or the simulator, opens at the sync level. */
    setenv("PHEAP_DURABILITY", "checkpoint", 1);
    g = open_level(gpath, 0, 0);
    REQUIRE(g);
    pheap_stats(g, &s);
    CHECK_EQ(s.durability, PHEAP_DURABILITY_SYNC);
    pheap_close(g);
    o = (pheap_options){.flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_stats(h, &s);
    CHECK_EQ(s.durability, PHEAP_DURABILITY_SYNC);
    CHECK_EQ(s.flush, PHEAP_FLUSH_NONE);
    pheap_close(h);
    unsetenv("PHEAP_DURABILITY");
    CHECK_EQ(has_working_copy(gpath), 0);
    CHECK_EQ(has_working_copy(path), 0);

    /* A working-copy directory others can read. */
    char open_dir[4200];
    snprintf(open_dir, sizeof(open_dir), "%s/open", ph_test_dir());
    mkdir(open_dir, 0755);
    chmod(open_dir, 0755);
    setenv("PHEAP_WORKDIR", open_dir, 1);
    pheap_options c = {.durability = PHEAP_DURABILITY_CHECKPOINT};
    h = NULL;
    CHECK_EQ(pheap_open(path, &c, &h), PHEAP_EPERM);
    setenv("PHEAP_WORKDIR", workdir(), 1);

    /* A read-only open of a file a committed journal has still to reach:
     * refused; a read-write open completes it. */
    h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
    REQUIRE(h);
    uint64_t rng = 5;
    REQUIRE_OK(ckm_setup(h));
    run_ops(h, &rng, 100);
    uint64_t want = ckm_digest(h, NULL);
    REQUIRE_OK(pheap_checkpoint(h));
    const char *copy = ph_test_path("ckpt-bad-copy.heap");
    REQUIRE_OK(pheap_close(h));
    REQUIRE(ph_test_copy_file(path, copy) == 0);
    char jsrc[4200], jdst[4200];
    snprintf(jsrc, sizeof(jsrc), "%s.ckpt", path);
    snprintf(jdst, sizeof(jdst), "%s.ckpt", copy);
    REQUIRE(ph_test_copy_file(jsrc, jdst) == 0);
    /* mark the copy's journal committed again, as a crash before its
     * APPLIED mark would leave it */
    FILE *f = fopen(jdst, "r+b");
    REQUIRE(f);
    ph_ckpt_header hdr;
    REQUIRE(fread(&hdr, 1, sizeof(hdr), f) == sizeof(hdr));
    CHECK_EQ(hdr.state, PH_CKPT_APPLIED);
    hdr.state = PH_CKPT_COMMITTED;
    hdr.crc = ph_crc32c(0, &hdr, offsetof(ph_ckpt_header, crc));
    fseek(f, 0, SEEK_SET);
    CHECK(fwrite(&hdr, 1, sizeof(hdr), f) == sizeof(hdr));
    fclose(f);
    h = open_level(copy, 0, PHEAP_RDONLY);
    CHECK(h == NULL);
    CHECK_EQ(pheap_errno(), PHEAP_EBUSY);
    h = open_level(copy, PHEAP_DURABILITY_SYNC, 0);
    REQUIRE(h);
    CHECK(ckm_digest(h, NULL) == want);
    pheap_close(h);
    h = open_level(copy, 0, PHEAP_RDONLY);
    CHECK(h != NULL);
    pheap_close(h);
}


/* Rewrites the journal at `jpath` with `fn` applied to its header (the
 * header's CRC recomputed when `recrc`). */
static void patch_journal(const char *jpath, void (*fn)(ph_ckpt_header *, unsigned), unsigned arg,
                          int recrc)
{
    FILE *f = fopen(jpath, "r+b");
    ph_ckpt_header hdr;
    if (!f || fread(&hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
        ph_test_fail(__FILE__, __LINE__, "read %s", jpath);
        if (f)
            fclose(f);
        return;
    }
    fn(&hdr, arg);
    if (recrc)
        hdr.crc = ph_crc32c(0, &hdr, offsetof(ph_ckpt_header, crc));
    fseek(f, 0, SEEK_SET);
    CHECK(fwrite(&hdr, 1, sizeof(hdr), f) == sizeof(hdr));
    fclose(f);
}

static void set_committed(ph_ckpt_header *h, unsigned arg)
{
    (void)arg;
    h->state = PH_CKPT_COMMITTED;
}

static void flip_bit(ph_ckpt_header *h, unsigned bit)
{
    ((unsigned char *)h)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
}

static void other_heap(ph_ckpt_header *h, unsigned arg)
{
    (void)arg;
    h->uuid[3] ^= 0x40;
}

/* The digest of the heap file `file` with the journal `journal` beside
 * it, opened read-write (a replay, if the journal is one to replay). */
static uint64_t digest_with_journal(const char *file, const char *journal)
{
    char pbuf[512], jbuf[600];
    snprintf(pbuf, sizeof(pbuf), "%s", ph_test_path("ckpt-dj.heap"));
    snprintf(jbuf, sizeof(jbuf), "%s.ckpt", pbuf);
    unlink(jbuf);
    if (ph_test_copy_file(file, pbuf) != 0 || ph_test_copy_file(journal, jbuf) != 0)
        return 0;
    pheap *h = open_level(pbuf, PHEAP_DURABILITY_SYNC, 0);
    if (!h)
        return 0;
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    uint64_t d = ckm_digest(h, NULL);
    pheap_close(h);
    return d;
}

TEST(damaged_or_foreign_journals_are_ignored)
{
    char path[512], file1[512], journal2[512], jpath[600], bad[512];
    snprintf(path, sizeof(path), "%s", ph_test_path("ckpt-dj-src.heap"));
    snprintf(file1, sizeof(file1), "%s", ph_test_path("ckpt-dj-file1.heap"));
    snprintf(journal2, sizeof(journal2), "%s", ph_test_path("ckpt-dj-journal2"));
    snprintf(bad, sizeof(bad), "%s", ph_test_path("ckpt-dj-bad"));
    snprintf(jpath, sizeof(jpath), "%s.ckpt", path);
    pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
    REQUIRE(h);
    uint64_t rng = 21;
    REQUIRE_OK(ckm_setup(h));
    run_ops(h, &rng, 150);
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t s1 = ckm_digest(h, NULL);
    REQUIRE(ph_test_copy_file(path, file1) == 0); /* the file at checkpoint 1 */
    run_ops(h, &rng, 150);
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t s2 = ckm_digest(h, NULL);
    REQUIRE(ph_test_copy_file(jpath, journal2) == 0); /* the journal of checkpoint 2 */
    REQUIRE_OK(pheap_close(h));
    REQUIRE(s1 != s2);
    /* A power loss after checkpoint 2's commit, before its pages reached
     * the file: the journal brings them. */
    patch_journal(journal2, set_committed, 0, 1);
    CHECK(digest_with_journal(file1, journal2) == s2);
    /* Any bit of the header flipped: not a journal to replay. */
    unsigned ignored = 0;
    for (unsigned bit = 0; bit < sizeof(ph_ckpt_header) * 8; bit += 5) {
        REQUIRE(ph_test_copy_file(journal2, bad) == 0);
        patch_journal(bad, flip_bit, bit, 0);
        uint64_t d = digest_with_journal(file1, bad);
        CHECK(d == s1);
        ignored += d == s1;
    }
    CHECK(ignored > 100);
    /* A journal of another heap, CRC and all. */
    REQUIRE(ph_test_copy_file(journal2, bad) == 0);
    patch_journal(bad, other_heap, 0, 1);
    CHECK(digest_with_journal(file1, bad) == s1);
    /* A body cut short, or with a byte changed. */
    REQUIRE(ph_test_copy_file(journal2, bad) == 0);
    struct stat st;
    REQUIRE(stat(bad, &st) == 0);
    REQUIRE(truncate(bad, st.st_size - 100) == 0);
    CHECK(digest_with_journal(file1, bad) == s1);
    REQUIRE(ph_test_copy_file(journal2, bad) == 0);
    FILE *f = fopen(bad, "r+b");
    REQUIRE(f);
    fseek(f, 4096 + 8, SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    CHECK(digest_with_journal(file1, bad) == s1);
}

TEST(procs_lists_a_process_that_holds_the_heap_at_the_checkpoint_level)
{
    const char *path = ph_test_path("ckpt-procs.heap");
    pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
    REQUIRE(h);
    pheap_proc p[4];
    CHECK_EQ(pheap_procs(path, p, 4), 1);
    CHECK_EQ(p[0].pid, (int64_t)getpid());
    CHECK(p[0].flags & PHEAP_PROC_EXCLUSIVE);
    REQUIRE_OK(pheap_checkpoint(h));
    CHECK_EQ(pheap_procs(path, p, 4), 1);
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(pheap_procs(path, p, 4), 0);
    /* a process killed at the checkpoint level holds it no more */
    pid_t pid = fork();
    if (pid == 0) {
        pheap *c = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
        if (!c || pheap_procs(path, p, 4) != 1)
            _exit(1);
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st));
    CHECK_EQ(pheap_procs(path, p, 4), 0);
    h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
    REQUIRE(h);
    CHECK_EQ(pheap_procs(path, p, 4), 1);
    REQUIRE_OK(pheap_close(h));
}

/* 1 if [off, off+len) of the file at `path` holds a hole anywhere. */
static int has_hole(const char *path, uint64_t off, uint64_t len)
{
    int fd = open(path, O_RDONLY);
    off_t at = lseek(fd, (off_t)off, SEEK_HOLE);
    close(fd);
    return at >= 0 && (uint64_t)at < off + len;
}

/* 1 if [off, off+len) of the file at `path` stores nothing. */
static int all_hole(const char *path, uint64_t off, uint64_t len)
{
    int fd = open(path, O_RDONLY);
    off_t at = lseek(fd, (off_t)off, SEEK_DATA);
    close(fd);
    return at < 0 || (uint64_t)at >= off + len;
}

/* A page of zeros in a block in use keeps its space in the heap file
 * (only pages the heap punched are punched there), so that the file opened
 * at the sync level on a full file system takes stores into its blocks
 * without a SIGBUS. */
TEST(zero_pages_of_a_block_in_use_keep_their_space_in_the_file)
{
    const char *path = ph_test_path("ckpt-zero.heap");
    pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
    REQUIRE(h);
    size_t n = 1u << 20;
    pheap_off off = pheap_alloc_named(h, "big", n);
    REQUIRE(off);
    uint64_t first = PH_ALIGN_UP(off, 4096), len = PH_ALIGN_DOWN(off + n, 4096) - first;
    memset(pheap_direct(h, off), 0x5a, n);
    pheap_persist(h, pheap_direct(h, off), n);
    REQUIRE_OK(pheap_checkpoint(h));
    CHECK_EQ(has_hole(path, first, len), 0);
    memset(pheap_direct(h, off), 0, n);
    pheap_persist(h, pheap_direct(h, off), n);
    REQUIRE_OK(pheap_checkpoint(h));
    CHECK_EQ(has_hole(path, first, len), 0);
    /* a block handed out from punched pages keeps its space too */
    pheap_off big2 = pheap_alloc(h, 4u << 20);
    REQUIRE(big2);
    pheap_free(h, big2);
    REQUIRE_OK(pheap_close(h));
    CHECK_EQ(has_hole(path, first, len), 0);
    CHECK(all_hole(path, PH_ALIGN_UP(big2, 4096), (4u << 20) - 4096));
    /* (reserved pages of zeros read as holes to SEEK_DATA: the file's
     * blocks tell) */
    struct stat before, after;
    REQUIRE(stat(path, &before) == 0);
    h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
    REQUIRE(h);
    big2 = pheap_alloc(h, 4u << 20);
    REQUIRE(big2);
    REQUIRE_OK(pheap_checkpoint(h));
    REQUIRE(stat(path, &after) == 0);
    CHECK((uint64_t)(after.st_blocks - before.st_blocks) * 512 >= (4u << 20));
    REQUIRE_OK(pheap_close(h));
}

/* Holes the heap punched in the working copy before a crash took the dirty
 * map reach the heap file at the checkpoint that compares every page. */
TEST(a_purge_before_a_crash_reaches_the_file)
{
    const char *path = ph_test_path("ckpt-purge.heap");
    pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
    REQUIRE(h);
    size_t n = 2u << 20;
    pheap_off off = pheap_alloc(h, n);
    REQUIRE(off);
    memset(pheap_direct(h, off), 0x5a, n);
    pheap_persist(h, pheap_direct(h, off), n);
    REQUIRE_OK(pheap_close(h));
    pid_t pid = fork();
    if (pid == 0) {
        h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
        if (!h)
            _exit(1);
        pheap_free(h, off);
        usleep(150000); /* past PH_PURGE_DELAY_NS: the next call purges */
        pheap_free(h, pheap_alloc(h, 100));
        raise(SIGKILL);
    }
    int st;
    waitpid(pid, &st, 0);
    REQUIRE(WIFSIGNALED(st));
    h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, 0);
    REQUIRE(h);
    struct pheap_stats s;
    pheap_stats(h, &s);
    CHECK_EQ(s.from_working_copy, 1);
    REQUIRE_OK(pheap_checkpoint(h));
    uint64_t first = PH_ALIGN_UP(off, 4096) + (1u << 20);
    CHECK(all_hole(path, first, (1u << 20) - 8192));
    pheap_check_report rep;
    CHECK_EQ(pheap_check(h, &rep), 0);
    REQUIRE_OK(pheap_close(h));
    CHECK(all_hole(path, first, (1u << 20) - 8192));
}

/* pheap_gc's marking threads work for the call in progress: a checkpoint
 * that stops the calls waits for that call, so the markers (and the
 * filters they run, which call pheap_trace) must not wait at the gate for
 * the checkpoint -- they did, and neither went on.  Many collections with
 * several markers and a filter, a checkpoint every millisecond; an alarm
 * turns a hang into a failure. */
typedef struct gc_node {
    pheap_off next[2];
} gc_node;

static void gc_node_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off, (void)usable;
    const gc_node *n = block;
    pheap_trace(tr, n->next[0], gc_node_filter);
    pheap_trace(tr, n->next[1], gc_node_filter);
}

TEST(collections_with_marking_threads_meet_checkpoints)
{
    const char *path = ph_test_path("ckpt-gc.heap");
    unlink(path);
    workdir();
    pheap_options po = {.flags = PHEAP_CREATE, .size = 8u << 20, .max_size = 64u << 20,
                        .durability = PHEAP_DURABILITY_CHECKPOINT, .checkpoint_ms = 1};
    pheap *h = NULL;
    REQUIRE_OK(pheap_open(path, &po, &h));
    /* a tree of 4095 nodes, rooted, and some garbage */
    enum { N = 4095 };
    pheap_off *v = calloc(N, sizeof(*v));
    REQUIRE(v);
    for (unsigned i = 0; i < N; i++)
        REQUIRE(v[i] = pheap_alloc(h, sizeof(gc_node)));
    for (unsigned i = 0; i < N; i++) {
        gc_node *n = pheap_direct(h, v[i]);
        n->next[0] = 2 * i + 1 < N ? v[2 * i + 1] : 0;
        n->next[1] = 2 * i + 2 < N ? v[2 * i + 2] : 0;
        pheap_persist(h, n, sizeof(*n));
    }
    REQUIRE_OK(pheap_root_set(h, "tree", v[0]));
    REQUIRE_OK(pheap_root_set_filter(h, "tree", gc_node_filter));
    alarm(120);
    pheap_gc_options o = {.threads = 4};
    for (unsigned round = 0; round < 200; round++) {
        for (unsigned k = 0; k < 16; k++)
            REQUIRE(pheap_alloc(h, 48)); /* garbage */
        pheap_gc_report rep;
        REQUIRE_OK(pheap_gc_ex(h, &o, &rep));
        CHECK_EQ(rep.freed_blocks, 16);
    }
    alarm(0);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK(st.checkpoints > 0);
    REQUIRE_OK(pheap_check(h, NULL));
    REQUIRE_OK(pheap_close(h));
    free(v);
    unlink(path);
}
