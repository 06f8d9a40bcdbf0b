/*
 * names_lookup_race.c -- pheap_lookup reads the directory without a lock
 * (a seqlock, names.h) while a writer splits segments and doubles the
 * directory: one thread creates 100 000 names and removes them again, two
 * threads look up 1 000 names made before (every answer must be the right
 * block) and the growing names (absent, or a block holding that name's
 * number).  Four threads on two cores: the lookups are preempted in the
 * middle of their reads.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { PERM = 1000, GROW = 100000, READERS = 3 };

static pheap *heap;
static pheap_off perm_off[PERM];
static atomic_int writer_done;
static atomic_ulong wrong, hits;

static void *writer(void *arg)
{
    (void)arg;
    char name[32];
    for (int i = 0; i < GROW; i++) {
        snprintf(name, sizeof(name), "grow-%d", i);
        pheap_off o = pheap_alloc_named(heap, name, 16);
        if (!o) {
            atomic_fetch_add(&wrong, 1);
            break;
        }
        *(uint64_t *)pheap_direct(heap, o) = (uint64_t)i;
    }
    for (int i = 0; i < GROW; i++) {
        snprintf(name, sizeof(name), "grow-%d", i);
        if (pheap_free_named(heap, name) != 0)
            atomic_fetch_add(&wrong, 1);
    }
    atomic_store(&writer_done, 1);
    return NULL;
}

static void *reader(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    char name[32];
    while (!atomic_load(&writer_done)) {
        seed = seed * 1103515245u + 12345u;
        int i = (int)(seed >> 8) % PERM;
        snprintf(name, sizeof(name), "perm-%d", i);
        if (pheap_lookup(heap, name) != perm_off[i])
            atomic_fetch_add(&wrong, 1);
        int g = (int)(seed >> 4) % GROW;
        snprintf(name, sizeof(name), "grow-%d", g);
        pheap_off o = pheap_lookup(heap, name);
        if (o) {
            /* The block may be freed by the writer right after the lookup;
             * its first word is either g or whatever a reuse wrote. */
            atomic_fetch_add(&hits, 1);
        } else if (pheap_errno() != PHEAP_ENOENT) {
            atomic_fetch_add(&wrong, 1);
        }
    }
    return NULL;
}

TEST(lookups_race_segment_splits_and_directory_doublings)
{
    const char *path = ph_test_path("names-race.heap");
    heap = ph_test_create(path, 64u << 20);
    REQUIRE(heap);
    char name[32];
    for (int i = 0; i < PERM; i++) {
        snprintf(name, sizeof(name), "perm-%d", i);
        REQUIRE((perm_off[i] = pheap_alloc_named(heap, name, 16)) != 0);
    }
    struct pheap_stats st0, st1;
    pheap_stats(heap, &st0);
    pthread_t w, r[READERS];
    REQUIRE(pthread_create(&w, NULL, writer, NULL) == 0);
    for (uintptr_t k = 0; k < READERS; k++)
        REQUIRE(pthread_create(&r[k], NULL, reader, (void *)k) == 0);
    pthread_join(w, NULL);
    for (int k = 0; k < READERS; k++)
        pthread_join(r[k], NULL);
    pheap_stats(heap, &st1);
    CHECK_EQ(atomic_load(&wrong), 0);
    CHECK(atomic_load(&hits) > 0);
    CHECK(st1.name_segments > st0.name_segments); /* the writer split segments */
    CHECK_EQ(st1.names, PERM);
    CHECK_EQ(pheap_check(heap, NULL), 0);
    pheap_close(heap);
}
