/*
 * checkpoint.c -- crash points of a checkpoint (persist/ckpt.h) under the
 * page cache's rules: a power loss before any file operation of the
 * checkpoint -- each write, sync, length change, reservation or punch of
 * the heap file and its journal -- leaves each file as of its last sync
 * plus any subset of the pages written since (eviction 0, 0.5 and 1,
 * several seeds), at its old or new length.  The heap file must then hold
 * exactly the previous checkpoint or this one: it opens, pheap_check
 * passes, no block leaks, the workload's state (slots, contents, names,
 * written by alloc_to, free_from, transactions and names) is one of the
 * two, and the heap goes on working.  A power loss during open's replay of
 * the journal (every file operation of it, again with subsets) must end in
 * the same checkpoint as the replay it interrupted.  The same for the
 * checkpoint of an open that takes in a working copy a process crash left
 * (every page compared with the file).  (make test samples
 * the replay's crash points; make torture takes them all.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_model.h"
#include "harness.h"
#include "persist/ckpt.h"

static char workdir[4096];
static uint64_t digest_of[2];  /* the previous checkpoint, this one */
static unsigned images, nested, violations, ends[2], take_ends[2];

/* A path of the test directory that stays valid (ph_test_path's buffers
 * are reused). */
static const char *tpath(char *buf, const char *name)
{
    snprintf(buf, 512, "%s", ph_test_path(name));
    return buf;
}

static void copy_pair(const char *from, const char *to)
{
    char a[4200], b[4200];
    unlink(to);
    if (ph_test_copy_file(from, to) != 0)
        ph_test_fail(__FILE__, __LINE__, "copy %s", from);
    snprintf(a, sizeof(a), "%s.ckpt", from);
    snprintf(b, sizeof(b), "%s.ckpt", to);
    unlink(b);
    if (access(a, F_OK) == 0 && ph_test_copy_file(a, b) != 0)
        ph_test_fail(__FILE__, __LINE__, "copy %s", a);
}

static pheap *open_level(const char *path, unsigned level, unsigned flags)
{
    pheap_options o = {.flags = flags, .size = 4u << 20, .max_size = 32u << 20,
                       .durability = level};
    pheap *h = NULL;
    return pheap_open(path, &o, &h) == 0 ? h : NULL;
}

/* The workload up to the checkpoint that is crashed: a heap at the
 * checkpoint level at `path`, a first checkpoint, more operations; the
 * digests of both states.  Returns the open heap. */
static pheap *workload(const char *path)
{
    char j[4200];
    snprintf(j, sizeof(j), "%s.ckpt", path);
    unlink(path);
    unlink(j);
    pheap *h = open_level(path, PHEAP_DURABILITY_CHECKPOINT, PHEAP_CREATE);
    if (h && ckm_setup(h)) {
        pheap_close(h);
        return NULL;
    }
    uint64_t rng = 11;
    for (unsigned i = 0; i < 120; i++)
        (void)ckm_op(h, &rng);
    if (pheap_checkpoint(h) != 0)
        return NULL;
    digest_of[0] = ckm_digest(h, NULL);
    for (unsigned i = 0; i < 120; i++)
        (void)ckm_op(h, &rng);
    digest_of[1] = ckm_digest(h, NULL);
    return h;
}

/* Which checkpoint the heap file `image` holds after a power loss (0 or
 * 1), checked and used; -1 on a violation. */
static int judge(const char *image, const char *where)
{
    char pbuf[512];
    const char *path = tpath(pbuf, "ckpt-judge.heap");
    copy_pair(image, path);
    pheap *h = open_level(path, PHEAP_DURABILITY_SYNC, 0);
    if (!h) {
        ph_test_fail(__FILE__, __LINE__, "%s: open: %s", where, pheap_errmsg());
        return -1;
    }
    pheap_check_report rep;
    struct pheap_stats st;
    uint64_t blocks = 0, d = ckm_digest(h, &blocks);
    int which = d == digest_of[0] ? 0 : d == digest_of[1] ? 1 : -1;
    pheap_stats(h, &st);
    if (pheap_check(h, &rep) != 0 || rep.errors)
        ph_test_fail(__FILE__, __LINE__, "%s: check: %s", where, rep.first_error), which = -1;
    else if (rep.live_blocks != blocks + st.name_segments)
        ph_test_fail(__FILE__, __LINE__, "%s: %llu live blocks, the state holds %llu", where,
                     (unsigned long long)rep.live_blocks,
                     (unsigned long long)(blocks + st.name_segments)), which = -1;
    if (which < 0 && d != digest_of[0] && d != digest_of[1])
        ph_test_fail(__FILE__, __LINE__, "%s: the state is neither checkpoint", where);
    /* It goes on working, and what it does is durable. */
    uint64_t rng = 77;
    for (unsigned i = 0; i < 40; i++)
        (void)ckm_op(h, &rng);
    uint64_t after = ckm_digest(h, NULL);
    pheap_close(h);
    h = open_level(path, PHEAP_DURABILITY_SYNC, 0);
    if (!h || ckm_digest(h, NULL) != after || pheap_check(h, &rep) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: after use and reopen", where);
        which = -1;
    }
    pheap_close(h);
    return which;
}

/* The replay of `image`'s journal crashed at each of its operations:
 * each image of that ends where the uninterrupted replay does. */
static void judge_replays(const char *image, int want, const char *where, double evict,
                          uint64_t seed)
{
    char pbuf[512], ibuf[512];
    const char *path = tpath(pbuf, "ckpt-replay.heap");
    const char *image2 = tpath(ibuf, "ckpt-replay-image.heap");
    /* Every operation of the replay under PHEAP_CRASH=full; else every
     * seventh, from an offset the outer crash point moves, so that the
     * images of a run between them still reach every one. */
    uint64_t stride = ph_crash_full() ? 1 : 7;
    for (uint64_t op = 1 + seed % stride;; op += stride) {
        copy_pair(image, path);
        unlink(image2);
        ph_ckpt_test_crash(op, seed, evict, image2);
        pheap *h = open_level(path, PHEAP_DURABILITY_SYNC, 0);
        ph_ckpt_test_crash(0, 0, 0, NULL);
        pheap_close(h);
        if (access(image2, F_OK) != 0)
            break; /* the replay has fewer operations: done */
        char w[256];
        snprintf(w, sizeof(w), "%s, replay crashed before operation %llu", where,
                 (unsigned long long)op);
        images++;
        nested++;
        int got = judge(image2, w);
        if (got != want) {
            violations++;
            ph_test_fail(__FILE__, __LINE__, "%s: checkpoint %d, the replay it cut ends in %d",
                         w, got, want);
        }
    }
}

static void enumerate(double evict, uint64_t seed)
{
    /* The operations of the checkpoint, counted without a crash. */
    char ibuf[512], cbuf[512], rbuf[512];
    const char *image = tpath(ibuf, "ckpt-image.heap");
    ph_ckpt_test_crash(UINT64_MAX, seed, evict, image);
    pheap *h = workload(tpath(cbuf, "ckpt-count.heap"));
    uint64_t before = ph_ckpt_test_ops();
    if (!h || pheap_checkpoint(h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "workload: %s", pheap_errmsg());
        return;
    }
    uint64_t total = ph_ckpt_test_ops() - before;
    ph_ckpt_test_crash(0, 0, 0, NULL);
    pheap_close(h);
    if (total < 6)
        ph_test_fail(__FILE__, __LINE__, "a checkpoint of %llu file operations",
                     (unsigned long long)total);
    for (uint64_t k = 1; k <= total + 1; k++) {
        char name[64];
        snprintf(name, sizeof(name), "ckpt-run-%llu.heap", (unsigned long long)k);
        const char *path = tpath(rbuf, name);
        unlink(image);
        h = workload(path);
        if (!h)
            return;
        if (k <= total) { /* before operation k of the checkpoint */
            ph_ckpt_test_crash(k, seed, evict, image);
            REQUIRE_OK(pheap_checkpoint(h));
            ph_ckpt_test_crash(0, 0, 0, NULL);
        } else { /* after it returned: the file alone */
            REQUIRE_OK(pheap_checkpoint(h));
            copy_pair(path, image);
        }
        /* The process dies with the machine: its working copy goes too. */
        struct stat st;
        char w[4200] = "";
        if (stat(path, &st) == 0) {
            snprintf(w, sizeof(w), "%s/%llx-%llx.work", workdir, (unsigned long long)st.st_dev,
                     (unsigned long long)st.st_ino);
        }
        pheap_close(h);
        if (w[0])
            unlink(w);
        if (access(image, F_OK) != 0)
            continue; /* this run's checkpoint had fewer operations (purges follow the clock) */
        char where[128];
        snprintf(where, sizeof(where), "evict %.1f seed %llu, crash before operation %llu of %llu",
                 evict, (unsigned long long)seed, (unsigned long long)k,
                 (unsigned long long)total);
        images++;
        int got = judge(image, where);
        if (got < 0) {
            violations++;
            continue;
        }
        ends[got]++;
        if (k == total + 1 && got != 1) {
            violations++;
            ph_test_fail(__FILE__, __LINE__, "%s: a checkpoint that returned is not in the file",
                         where);
        }
        judge_replays(image, got, where, evict, seed + k);
    }
}

/* The working copy of the heap file `path`, as pheap names it. */
static void working_copy_of(const char *path, char *out, size_t len)
{
    struct stat st;
    out[0] = 0;
    if (stat(path, &st) == 0)
        snprintf(out, len, "%s/%llx-%llx.work", workdir, (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
}

/* A process crash at the checkpoint level leaves the heap file at the
 * first checkpoint and the working copy at the second state; an open at
 * the sync level takes the working copy into the file (a checkpoint of
 * every page that differs).  A power loss before each of its file
 * operations leaves one of the two states, and a replay of what it
 * committed, crashed in turn, ends where it would have. */
static void enumerate_takeover(double evict, uint64_t seed)
{
    char path[512], base[512], jpath[600], jbase[600], wpath[4200], wbase[512], image[512];
    tpath(path, "ckpt-take.heap");
    tpath(base, "ckpt-take-base.heap");
    tpath(wbase, "ckpt-take-base.work");
    tpath(image, "ckpt-take-image.heap");
    snprintf(jpath, sizeof(jpath), "%s.ckpt", path);
    snprintf(jbase, sizeof(jbase), "%s.ckpt", base);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* the workload, then a process crash */
        pheap *h = workload(path);
        _exit(h && write(fds[1], digest_of, sizeof(digest_of)) == (ssize_t)sizeof(digest_of) ? 0 : 1);
    }
    close(fds[1]);
    REQUIRE(read(fds[0], digest_of, sizeof(digest_of)) == (ssize_t)sizeof(digest_of));
    close(fds[0]);
    int status;
    REQUIRE(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    working_copy_of(path, wpath, sizeof(wpath));
    REQUIRE(access(wpath, F_OK) == 0);
    REQUIRE(ph_test_copy_file(path, base) == 0 && ph_test_copy_file(jpath, jbase) == 0 &&
            ph_test_copy_file(wpath, wbase) == 0);
    for (uint64_t k = 1;; k++) {
        /* the files as the crash left them, the same inode (the working
         * copy's name) */
        REQUIRE(ph_test_copy_file(base, path) == 0 && ph_test_copy_file(jbase, jpath) == 0 &&
                ph_test_copy_file(wbase, wpath) == 0);
        unlink(image);
        ph_ckpt_test_crash(k, seed, evict, image);
        pheap *h = open_level(path, PHEAP_DURABILITY_SYNC, 0);
        ph_ckpt_test_crash(0, 0, 0, NULL);
        if (!h) {
            ph_test_fail(__FILE__, __LINE__, "the open taking the working copy in: %s",
                         pheap_errmsg());
            return;
        }
        int whole = ckm_digest(h, NULL) == digest_of[1]; /* the open saw every call */
        pheap_close(h);
        CHECK(whole);
        CHECK(access(wpath, F_OK) != 0); /* taken in, then removed */
        if (access(image, F_OK) != 0)
            break; /* fewer operations than k: done */
        char where[128];
        snprintf(where, sizeof(where), "take-over, evict %.1f seed %llu, crash before operation %llu",
                 evict, (unsigned long long)seed, (unsigned long long)k);
        images++;
        int got = judge(image, where);
        if (got < 0) {
            violations++;
            continue;
        }
        take_ends[got]++;
        judge_replays(image, got, where, evict, seed + k);
    }
    unlink(wbase);
}

TEST(every_file_operation_of_a_checkpoint_and_of_its_replay)
{
    snprintf(workdir, sizeof(workdir), "%s/work", ph_test_dir());
    mkdir(workdir, 0700);
    setenv("PHEAP_WORKDIR", workdir, 1);
    static const double evicts[] = {0.0, 0.5, 1.0};
    for (unsigned e = 0; e < 3; e++)
        for (uint64_t seed = 1; seed <= (evicts[e] == 0.5 ? 3u : 1u); seed++)
            enumerate(evicts[e], seed), enumerate_takeover(evicts[e], seed);
    printf("checkpoint: %u images (%u of a crashed replay), %u violations; the previous "
           "checkpoint in %u, this one in %u; taking a working copy in: the file's state in %u, "
           "the working copy's in %u\n",
           images, nested, violations, ends[0], ends[1], take_ends[0], take_ends[1]);
    CHECK_EQ(violations, 0);
    CHECK(ends[0] > 0 && ends[1] > 0); /* both outcomes were reached */
    CHECK(take_ends[0] > 0 && take_ends[1] > 0);
    CHECK(nested > 0);
}
