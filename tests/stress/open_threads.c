/*
 * open_threads.c -- threads that open and close heaps of their own at the
 * same time.  Each round a thread opens its heap (made anew every few
 * rounds), checks the blocks it left there, frees them, allocates and
 * fills new ones, and closes it; meanwhile pheap_of finds each open heap by
 * an address of its own.  Before its fix, an open's trial of MAP_SYNC
 * (refused off DAX) left its reserved range unmapped for an instant and
 * another thread's open reserved it: two heaps in one range, the state
 * page of one written through the other's read-only view (SIGSEGV) or into
 * the other's file.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
enum { ROUNDS = 60 };
#else
enum { ROUNDS = 300 };
#endif
enum { THREADS = 4, BLOCKS = 32 };

typedef struct worker {
    unsigned id;
    char path[512];          /* made by the main thread: ph_test_path is not thread-safe */
    int failed;
    char error[200];
} worker;

static void *run(void *arg)
{
    worker *w = arg;
    const char *path = w->path;
    for (unsigned round = 0; round < ROUNDS && !w->failed; round++) {
        pheap *h = NULL;
        pheap_options o = {.size = 1u << 20, .flags = PHEAP_CREATE};
        if (round % 8 == 0)
            unlink(path);
        if (pheap_open(path, &o, &h) != 0) {
            snprintf(w->error, sizeof(w->error), "round %u: open: %s", round, pheap_errmsg());
            w->failed = 1;
            break;
        }
        pheap_off *slots = NULL;
        pheap_off root = pheap_root_get(h, "blocks");
        if (!root && (root = pheap_alloc(h, BLOCKS * sizeof(pheap_off))) != 0) {
            memset(pheap_direct(h, root), 0, BLOCKS * sizeof(pheap_off));
            pheap_persist(h, pheap_direct(h, root), BLOCKS * sizeof(pheap_off));
            pheap_root_set(h, "blocks", root);
        }
        slots = pheap_direct(h, root);
        for (unsigned i = 0; slots && i < BLOCKS && !w->failed; i++) {
            unsigned char *b = slots[i] ? pheap_direct(h, slots[i]) : NULL;
            if (b && (b[0] != (unsigned char)(w->id + 1) || b[99] != (unsigned char)i)) {
                snprintf(w->error, sizeof(w->error), "round %u: block %u holds %u/%u", round, i,
                         b[0], b[99]);
                w->failed = 1;
            }
            if (b && pheap_of(b) != h) {
                snprintf(w->error, sizeof(w->error), "round %u: pheap_of found another heap", round);
                w->failed = 1;
            }
            if (slots[i])
                pheap_free(h, slots[i]);
            pheap_off off = pheap_alloc(h, 100);
            if (off) {
                b = pheap_direct(h, off);
                memset(b, (int)(w->id + 1), 100);
                b[99] = (unsigned char)i;
                pheap_persist(h, b, 100);
            }
            slots[i] = off;
            pheap_persist(h, &slots[i], sizeof(slots[i]));
        }
        pheap_check_report rep;
        if (!w->failed && pheap_check(h, &rep) != 0) {
            snprintf(w->error, sizeof(w->error), "round %u: check: %s", round, pheap_errmsg());
            w->failed = 1;
        }
        if (pheap_close(h) != 0 && !w->failed) {
            snprintf(w->error, sizeof(w->error), "round %u: close: %s", round, pheap_errmsg());
            w->failed = 1;
        }
    }
    return NULL;
}

TEST(threads_open_and_close_their_heaps)
{
    worker w[THREADS];
    pthread_t t[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        char name[64];
        snprintf(name, sizeof(name), "open-threads-%u.heap", i);
        w[i] = (worker){.id = i};
        snprintf(w[i].path, sizeof(w[i].path), "%s", ph_test_path(name));
    }
    for (unsigned i = 0; i < THREADS; i++)
        REQUIRE(pthread_create(&t[i], NULL, run, &w[i]) == 0);
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        if (w[i].failed)
            ph_test_fail(__FILE__, __LINE__, "thread %u: %s", i, w[i].error);
    }
}
