/*
 * threads.c -- many more threads than cores persisting user data and
 * reading roots and statistics at once; thread records come and go while
 * the heap stays open.  Run under TSan and ASan by make test-tsan/-asan.
 */
#include <pthread.h>
#include <string.h>

#include "harness.h"

enum { THREADS = 16, ROUNDS = 2000 };

enum { TARGETS = 8 };

typedef struct arg {
    pheap *h;
    unsigned id;
    uint64_t data;               /* this thread's block */
    const uint64_t *targets;     /* blocks the root "shared" names in turn */
} arg;

static void *worker(void *p)
{
    arg *a = p;
    uint64_t *mine = pheap_direct(a->h, a->data);
    for (unsigned i = 0; i < ROUNDS; i++) {
        mine[i % 64] = i;
        pheap_persist(a->h, &mine[i % 64], 8);
        if (i % 100 == 0) {
            struct pheap_stats st;
            pheap_stats(a->h, &st);
            (void)pheap_root_get(a->h, "shared");
        }
        if (a->id == 0 && i % 50 == 0)
            pheap_root_set(a->h, "shared", a->targets[(i / 50) % TARGETS]);
    }
    return NULL;
}

TEST(sixteen_threads_persist_and_count)
{
    pheap *h = ph_test_create(ph_test_path("threads.heap"), 4u << 20);
    REQUIRE(h);
    uint64_t data[THREADS], targets[TARGETS];
    for (unsigned i = 0; i < THREADS; i++)
        REQUIRE((data[i] = pheap_alloc(h, 64 * 8)) != 0);
    for (unsigned i = 0; i < TARGETS; i++)
        REQUIRE((targets[i] = pheap_alloc(h, 64)) != 0);
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t base_flushes = st.flushes, base_fences = st.fences;
    for (int round = 0; round < 3; round++) { /* records of exited threads fold */
        pthread_t t[THREADS];
        arg a[THREADS];
        for (unsigned i = 0; i < THREADS; i++) {
            a[i] = (arg){h, i, data[i], targets};
            pthread_create(&t[i], NULL, worker, &a[i]);
        }
        for (unsigned i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    }
    struct pheap_stats end;
    pheap_stats(h, &end);
    uint64_t root_fences = 3 * ((ROUNDS + 49) / 50) + 2; /* first set inserts: 3 fences (1.5) */
    CHECK_EQ(end.flushes - base_flushes, 3ull * THREADS * ROUNDS + root_fences + 1);
    CHECK_EQ(end.fences - base_fences, 3ull * THREADS * ROUNDS + root_fences);
    /* The root held offsets into unallocated space (the workers write the
     * data region raw); pheap_check reports roots that name no live block. */
    REQUIRE_OK(pheap_root_set(h, "shared", 0));
    REQUIRE_OK(pheap_check(h, NULL));
    pheap_close(h);
}
