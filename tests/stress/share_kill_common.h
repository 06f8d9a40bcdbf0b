/*
 * share_kill_common.h -- the kill -9 test of a shared heap, shared by
 * share_kill.c (make test) and share_kill_torture.c (make torture).
 *
 * Four worker processes open one heap with PHEAP_SHARED and run, in one
 * or several threads each (more threads than cores: several threads of one
 * process may find a dead process at once),
 * pheap_alloc_to_init / pheap_free_from on the slots of a rooted array of
 * their own (small blocks mostly, a large one now and then), each block
 * filled by its initialiser with a pattern naming its slot, and now and
 * then a transaction that replaces the blocks of two slots (undo-logged
 * slot words, pheap_tx_alloc, pheap_tx_free), or creates or removes one
 * of 64 names of its own, alone or in a transaction.  A slot's block may be of a
 * slab another process owns now (an earlier worker of the place made it,
 * and died), so frees of every kind are often remote.  A supervisor
 * kills one worker at random every few milliseconds with SIGKILL and
 * starts another in its place; after every kill each survivor must make
 * progress, and the new worker must open the heap and run, within a
 * bounded time.  At the end all are killed (an unclean stop of every
 * process), and the heap opened alone must pass pheap_check with exactly
 * the blocks the slots and names name live (nothing leaked, nothing
 * lost), no two of them naming one block, and every slot's block's
 * pattern intact (no block handed out twice).
 */
#ifndef PH_TEST_SHARE_KILL_COMMON_H
#define PH_TEST_SHARE_KILL_COMMON_H

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

enum { SK_WORKERS = 4, SK_SLOTS = 1024 };

/* What workers tell the supervisor, in memory they share. */
typedef struct sk_board {
    uint64_t ops[SK_WORKERS];  /* operations done by the worker of each place */
    int code[SK_WORKERS];      /* the error that stopped it, 0 none */
    char msg[SK_WORKERS][240];
} sk_board;

static sk_board *sk;

static uint64_t sk_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A block's pattern: its first word the offset of the slot naming it, the
 * rest of its first 256 bytes that offset's low byte. */
static int sk_fill(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    uint64_t slot = *(const uint64_t *)arg;
    size_t n = usable < 256 ? usable : 256;
    memset(block, (int)(slot & 0xff), n);
    memcpy(block, &slot, sizeof(slot));
    return 0;
}

static int sk_intact(const void *block, size_t usable, uint64_t slot)
{
    const unsigned char *p = block;
    size_t n = usable < 256 ? usable : 256;
    if (memcmp(p, &slot, sizeof(slot)) != 0)
        return 0;
    for (size_t i = sizeof(slot); i < n; i++)
        if (p[i] != (slot & 0xff))
            return 0;
    return 1;
}

static size_t sk_size(uint64_t *rng)
{
    uint64_t r = ph_test_rand(rng);
    return r % 16 == 0 ? 16384 + r / 16 % 65536 : 16 + r / 16 % 1500;
}

static void sk_fail(unsigned k, int code, const char *what)
{
    sk->code[k] = code ? code : -1;
    snprintf(sk->msg[k], sizeof(sk->msg[k]), "%s: %s", what, pheap_errmsg());
    _exit(1);
}

/* A transaction: the blocks of slots i and j (0 or not) replaced by new
 * ones, filled. */
static int sk_tx(pheap *h, pheap_off arr, pheap_off *slots, unsigned i, unsigned j, uint64_t *rng)
{
    int rc = pheap_tx_begin(h);
    unsigned s[2] = {i, j};
    for (unsigned n = 0; n < 2 && !rc; n++) {
        pheap_off *w = &slots[s[n]], old = *w;
        uint64_t slot = arr + s[n] * sizeof(pheap_off);
        size_t size = sk_size(rng);
        if ((rc = pheap_tx_add(h, w, sizeof(*w))) != 0)
            break;
        pheap_off nb = pheap_tx_alloc(h, size);
        if (!nb) {
            rc = pheap_errno();
            break;
        }
        sk_fill(h, pheap_direct(h, nb), pheap_usable_size(h, nb), &slot);
        *w = nb;
        if (old && (rc = pheap_tx_free(h, old)) != 0)
            break;
    }
    if (rc) {
        pheap_tx_abort(h);
        return rc;
    }
    return pheap_tx_commit(h);
}

/* One thread of a worker: the slots part, part + parts, ... of its array. */
typedef struct sk_thread {
    pheap *h;
    unsigned k, part, parts;
    pheap_off arr;
} sk_thread;

static void *sk_loop(void *arg)
{
    const sk_thread *a = arg;
    pheap *h = a->h;
    unsigned k = a->k, per = SK_SLOTS / a->parts;
    pheap_off arr = a->arr, *slots = pheap_direct(h, arr);
    uint64_t rng = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull ^ sk_now_ns() ^ a->part;
    for (;;) {
        unsigned i = a->part + a->parts * (unsigned)(ph_test_rand(&rng) % per);
        uint64_t slot = arr + i * sizeof(pheap_off);
        int rc;
        if (i % 8 == 1) {
            char nm[32];
            snprintf(nm, sizeof(nm), "w%u-%u", k, i / 8 % 64);
            int in_tx = ph_test_rand(&rng) % 2;
            if (in_tx && (rc = pheap_tx_begin(h)) != 0)
                sk_fail(k, rc, "pheap_tx_begin");
            /* (a dead worker's operation on the name may complete in between,
             * or another thread's: EEXIST and ENOENT are theirs; a name
             * another thread's transaction holds is EBUSY -- never one a
             * dead process's transaction held) */
            if (pheap_lookup(h, nm))
                rc = pheap_free_named(h, nm);
            else
                rc = pheap_alloc_named(h, nm, sk_size(&rng)) ? 0 : pheap_errno();
            if (rc && rc != PHEAP_EEXIST && rc != PHEAP_ENOENT &&
                !(rc == PHEAP_EBUSY && a->parts > 1))
                sk_fail(k, rc, in_tx ? "a name in a transaction" : "a name");
            if (in_tx && (rc = pheap_tx_commit(h)) != 0)
                sk_fail(k, rc, "pheap_tx_commit of a name");
            rc = 0;
        } else if (i % 8 == 0) {
            unsigned j = a->part + a->parts * (unsigned)(ph_test_rand(&rng) % per);
            if (j != i && (rc = sk_tx(h, arr, slots, i, j, &rng)) != 0)
                sk_fail(k, rc, "transaction");
            rc = 0;
        } else if (slots[i]) {
            rc = pheap_free_from(h, &slots[i]);
        } else {
            rc = pheap_alloc_to_init(h, sk_size(&rng), &slots[i], 0, sk_fill, &slot);
        }
        if (rc)
            sk_fail(k, rc, slots[i] ? "pheap_free_from" : "pheap_alloc_to_init");
        __atomic_fetch_add(&sk->ops[k], 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void sk_worker(const char *path, unsigned k, unsigned threads)
{
    pheap_options o = {.flags = PHEAP_SHARED};
    pheap *h;
    int rc = pheap_open(path, &o, &h);
    if (rc)
        sk_fail(k, rc, "open");
    char name[16];
    snprintf(name, sizeof(name), "w%u", k);
    pheap_off arr = pheap_root_get(h, name);
    if (!arr)
        sk_fail(k, pheap_errno(), "root");
    sk_thread a[8];
    pthread_t tid;
    for (unsigned p = 0; p < threads; p++) {
        a[p] = (sk_thread){h, k, p, threads, arr};
        if (p + 1 < threads && pthread_create(&tid, NULL, sk_loop, &a[p]) != 0)
            sk_fail(k, PHEAP_ENOMEM, "pthread_create");
    }
    sk_loop(&a[threads - 1]);
}

static int sk_start(const char *path, unsigned k, unsigned threads)
{
    fflush(NULL);
    int pid = fork();
    if (pid == 0)
        sk_worker(path, k, threads);
    return pid;
}

static uint64_t sk_ops(unsigned k)
{
    return __atomic_load_n(&sk->ops[k], __ATOMIC_RELAXED);
}

/* Waits until every worker but `skip` has done `more` operations past
 * from[]: 0, or -1 after `limit_ns` (or when one stopped on an error). */
static int sk_progress(const uint64_t *from, uint64_t more, unsigned skip, uint64_t limit_ns)
{
    uint64_t t0 = sk_now_ns();
    for (;;) {
        int all = 1;
        for (unsigned k = 0; k < SK_WORKERS; k++) {
            if (sk->code[k])
                return -1;
            all &= k == skip || sk_ops(k) >= from[k] + more;
        }
        if (all)
            return 0;
        if (sk_now_ns() - t0 > limit_ns)
            return -1;
        usleep(100);
    }
}

static void sk_report_stuck(const char *when, unsigned kill)
{
    for (unsigned k = 0; k < SK_WORKERS; k++)
        if (sk->code[k])
            ph_test_fail(__FILE__, __LINE__, "%s (kill %u): worker %u stopped: %s (%d)", when, kill,
                         k, sk->msg[k], sk->code[k]);
    ph_test_fail(__FILE__, __LINE__, "%s (kill %u): a worker made no progress in 10 s", when, kill);
}

static void share_kill_test(const char *name, unsigned kills, unsigned threads)
{
    const char *path = ph_test_path(name);
    pheap *h = ph_test_create(path, 256u << 20);
    REQUIRE(h);
    for (unsigned k = 0; k < SK_WORKERS; k++) {
        char root[16];
        snprintf(root, sizeof(root), "w%u", k);
        pheap_off arr = pheap_alloc_init(h, SK_SLOTS * sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL,
                                         NULL);
        REQUIRE(arr);
        REQUIRE_OK(pheap_root_set(h, root, arr));
    }
    REQUIRE_OK(pheap_close(h));
    sk = mmap(NULL, sizeof(*sk), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(sk != MAP_FAILED);
    memset(sk, 0, sizeof(*sk));
    int pids[SK_WORKERS];
    for (unsigned k = 0; k < SK_WORKERS; k++)
        REQUIRE((pids[k] = sk_start(path, k, threads)) > 0);
    uint64_t rng = 0x5eed0000u + kills, from[SK_WORKERS], t0 = sk_now_ns();
    memset(from, 0, sizeof(from));
    if (sk_progress(from, 1, SK_WORKERS, 10000000000ull))
        sk_report_stuck("start", 0);
    for (unsigned n = 0; n < kills && !ph_test_failed; n++) {
        usleep((useconds_t)(1000 + ph_test_rand(&rng) % 4000));
        unsigned k = (unsigned)(ph_test_rand(&rng) % SK_WORKERS);
        kill(pids[k], SIGKILL);
        int st = 0;
        waitpid(pids[k], &st, 0);
        if (!WIFSIGNALED(st))
            sk_report_stuck("a worker exited", n);
        for (unsigned j = 0; j < SK_WORKERS; j++)
            from[j] = sk_ops(j);
        /* the survivors go on: a dead process's locks and lanes are taken
         * over, whatever it held */
        if (sk_progress(from, 50, k, 10000000000ull))
            sk_report_stuck("after a kill", n);
        from[k] = sk_ops(k);
        REQUIRE((pids[k] = sk_start(path, k, threads)) > 0);
        if (sk_progress(from, 1, SK_WORKERS, 10000000000ull))
            sk_report_stuck("a new worker", n);
    }
    uint64_t ops = 0;
    for (unsigned k = 0; k < SK_WORKERS; k++) {
        kill(pids[k], SIGKILL);
        waitpid(pids[k], NULL, 0);
        ops += sk_ops(k);
    }
    printf("  %u kills of %u-thread workers, %llu operations in %.1f s\n", kills, threads,
           (unsigned long long)ops, (double)(sk_now_ns() - t0) / 1e9);
    /* every process gone, uncleanly: the heap opened alone */
    REQUIRE_OK(pheap_open(path, NULL, &h));
    pheap_check_report r;
    CHECK_EQ(pheap_check(h, &r), 0);
    uint64_t (*blocks)[2] = calloc(SK_WORKERS * SK_SLOTS + SK_WORKERS * 64, sizeof(*blocks));
    REQUIRE(blocks);
    unsigned used = 0;
    for (unsigned k = 0; k < SK_WORKERS; k++) {
        char root[16];
        snprintf(root, sizeof(root), "w%u", k);
        pheap_off arr = pheap_root_get(h, root);
        REQUIRE(arr);
        const pheap_off *slots = pheap_direct(h, arr);
        for (unsigned i = 0; i < SK_SLOTS; i++) {
            if (!slots[i])
                continue;
            size_t usable = pheap_usable_size(h, slots[i]);
            CHECK(usable > 0);
            CHECK(sk_intact(pheap_direct(h, slots[i]), usable, arr + i * sizeof(pheap_off)));
            blocks[used][0] = slots[i];
            blocks[used][1] = slots[i] + usable;
            used++;
        }
    }
    unsigned names = 0;
    pheap_name_info info;
    for (const char *after = NULL; pheap_name_next(h, after, &info) == 0; after = info.name) {
        size_t usable = pheap_usable_size(h, info.off);
        CHECK(usable >= info.size);
        blocks[used][0] = info.off;
        blocks[used][1] = info.off + usable;
        used++;
        names++;
    }
    CHECK_EQ(ph_test_disjoint(blocks, used), 0);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    CHECK_EQ(st.names, names);
    CHECK_EQ(st.live_blocks, used + SK_WORKERS + st.name_segments);
    CHECK_EQ(st.was_unclean, 1);
    printf("  %llu dead processes taken over by survivors\n", (unsigned long long)st.heap_takeovers);
    free(blocks);
    pheap_close(h);
    munmap(sk, sizeof(*sk));
}

#endif
