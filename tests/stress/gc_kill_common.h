/*
 * gc_kill_common.h -- kill -9 rounds on a GC-mode heap, shared by
 * gc_kill.c (a few rounds, make test) and gc_kill_torture.c (many, make
 * torture).  A child process runs
 * threads that each grow and shrink a list of their own (nodes with a
 * pattern, a large payload now and then, and blocks allocated and never
 * linked: leaks), persisting nodes before linking them, as a GC-mode
 * program must; the parent kills it at a random moment.  Then: the heap
 * opens needing recovery, every call that allocates or frees is refused
 * with PHEAP_ERECOVER, pheap_recover succeeds, every node the lists reach
 * is live and intact, no two overlap, exactly those blocks are allocated,
 * and pheap_check passes.  The next round's child goes on from there.
 */
#ifndef PH_TEST_GC_KILL_COMMON_H
#define PH_TEST_GC_KILL_COMMON_H

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

enum { THREADS = 4, MAX_NODES = 400, PAYLOAD = 24576 };

typedef struct node {
    uint64_t seed;      /* the pattern of this node's bytes and payload */
    pheap_off next;
    pheap_off payload;  /* 0 or a large block */
    uint64_t fill[5];
} node;

typedef struct worker {
    pheap *h;
    unsigned index;
    uint64_t rng;
} worker;

static pheap_off *heads(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "heads"));
}

static void *child_thread(void *arg)
{
    worker *w = arg;
    pheap *h = w->h;
    pheap_off *head = &heads(h)[w->index];
    unsigned n = 0;
    for (pheap_off o = *head; o; o = ((node *)pheap_direct(h, o))->next)
        n++;
    for (;;) {
        uint64_t r = ph_test_rand(&w->rng);
        if (r % 16 == 0) { /* a leak: allocated, never linked */
            pheap_alloc(h, 16 + r % 700);
        } else if (n < MAX_NODES && (r % 3 != 0 || n == 0)) {
            pheap_off o = pheap_alloc(h, sizeof(node));
            if (!o)
                continue;
            node *p = pheap_direct(h, o);
            p->seed = r | 1;
            p->next = *head;
            p->payload = r % 11 == 0 ? pheap_alloc(h, PAYLOAD) : 0;
            ph_test_fill(p->fill, sizeof(p->fill), p->seed);
            if (p->payload) {
                ph_test_fill(pheap_direct(h, p->payload), PAYLOAD, p->seed);
                pheap_persist(h, pheap_direct(h, p->payload), PAYLOAD);
            }
            pheap_persist(h, p, sizeof(*p));
            *head = o;
            pheap_persist(h, head, sizeof(*head));
            n++;
        } else if (n > 0) {
            pheap_off o = *head;
            node *p = pheap_direct(h, o);
            *head = p->next;
            pheap_persist(h, head, sizeof(*head));
            if (p->payload)
                pheap_free(h, p->payload);
            pheap_free(h, o);
            n--;
        }
    }
    return NULL;
}

static void child(const char *path, uint64_t seed)
{
    /* A kill -9 loses nothing that reached the page cache: no flush needed. */
    pheap_options o = {.flush = PHEAP_FLUSH_NONE};
    pheap *h;
    if (pheap_open(path, &o, &h) != 0 || pheap_recover(h) != 0)
        _exit(3);
    worker w[THREADS];
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        w[i] = (worker){h, i, seed * 31 + i};
        pthread_create(&t[i], NULL, child_thread, &w[i]);
    }
    pthread_join(t[0], NULL); /* never returns: killed */
    _exit(4);
}

/* The checks after a kill. */
static void judge(const char *path, unsigned round)
{
    pheap *h;
    if (pheap_open(path, NULL, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "round %u: open: %s", round, pheap_errmsg());
        return;
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.needs_recovery) { /* else the child died before it opened the heap */
        CHECK_EQ(pheap_alloc(h, 64), 0);
        CHECK_EQ(pheap_errno(), PHEAP_ERECOVER);
        CHECK_EQ(pheap_free(h, pheap_root_get(h, "heads")), PHEAP_ERECOVER);
        CHECK_EQ(pheap_gc(h), PHEAP_ERECOVER);
    }
    pheap_gc_report rep;
    if (pheap_recover_ex(h, NULL, &rep) != 0) {
        ph_test_fail(__FILE__, __LINE__, "round %u: recover: %s", round, pheap_errmsg());
        pheap_close(h);
        return;
    }
    static uint64_t b[THREADS * MAX_NODES * 2 + 1][2];
    unsigned nb = 0;
    pheap_off arr = pheap_root_get(h, "heads");
    b[nb][0] = arr;
    b[nb++][1] = arr + THREADS * sizeof(pheap_off);
    for (unsigned i = 0; i < THREADS; i++) {
        unsigned len = 0;
        for (pheap_off o = heads(h)[i]; o && len <= MAX_NODES; o = ((node *)pheap_direct(h, o))->next) {
            node *p = pheap_direct(h, o);
            len++;
            if (pheap_usable_size(h, o) < sizeof(node) ||
                !ph_test_intact(p->fill, sizeof(p->fill), p->seed)) {
                ph_test_fail(__FILE__, __LINE__, "round %u: list %u: node at %llu lost", round, i,
                             (unsigned long long)o);
                break;
            }
            b[nb][0] = o;
            b[nb++][1] = o + sizeof(node);
            if (p->payload) {
                if (pheap_usable_size(h, p->payload) < PAYLOAD ||
                    !ph_test_intact(pheap_direct(h, p->payload), PAYLOAD, p->seed))
                    ph_test_fail(__FILE__, __LINE__, "round %u: payload at %llu lost", round,
                                 (unsigned long long)p->payload);
                b[nb][0] = p->payload;
                b[nb++][1] = p->payload + PAYLOAD;
            }
        }
        if (len > MAX_NODES)
            ph_test_fail(__FILE__, __LINE__, "round %u: list %u has a cycle", round, i);
    }
    if (st.needs_recovery)
        CHECK_EQ(rep.marked_blocks, nb);
    pheap_stats(h, &st);
    CHECK_EQ(st.live_blocks, nb);
    ph_test_disjoint(b, nb);
    pheap_check_report cr;
    if (pheap_check(h, &cr) != 0)
        ph_test_fail(__FILE__, __LINE__, "round %u: pheap_check: %s", round, cr.first_error);
    if (pheap_close(h) != 0)
        ph_test_fail(__FILE__, __LINE__, "round %u: close: %s", round, pheap_errmsg());
}

static void gc_kill_rounds(unsigned rounds)
{
    const char *path = ph_test_path("gc-kill.heap");
    unlink(path);
    pheap_options o = {.size = 32u << 20, .flags = PHEAP_CREATE,
                       .consistency = PHEAP_CONSISTENCY_GC};
    pheap *h = ph_test_open(path, &o);
    REQUIRE(h);
    pheap_off arr = pheap_alloc_init(h, THREADS * sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(arr);
    REQUIRE_OK(pheap_root_set(h, "heads", arr));
    REQUIRE_OK(pheap_close(h));
    uint64_t rng = 12345;
    for (unsigned r = 0; r < rounds && !ph_test_failed; r++) {
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
            child(path, r + 1);
        struct timespec ts = {0, (long)(1 + ph_test_rand(&rng) % 40) * 1000000L};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        if (!WIFSIGNALED(status)) {
            ph_test_fail(__FILE__, __LINE__, "round %u: child exited with %d", r,
                         WEXITSTATUS(status));
            break;
        }
        judge(path, r);
    }
}

#endif
