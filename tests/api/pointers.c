/*
 * pointers.c -- offsets stay valid when the heap is mapped elsewhere: the
 * old address range is occupied before reopening, so the heap must land at
 * another address and still find its linked data through offsets.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "harness.h"

typedef struct node {
    uint64_t value;
    pheap_off next;
} node;

TEST(reopen_at_another_address)
{
    const char *path = ph_test_path("ptr.heap");
    pheap *h = ph_test_create(path, 4u << 20);
    REQUIRE(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    /* A chain of 100 nodes, the last allocated first. */
    pheap_off head = 0;
    for (unsigned i = 0; i < 100; i++) {
        pheap_off off = pheap_alloc(h, sizeof(node));
        node *n = pheap_direct(h, off);
        REQUIRE(n);
        n->value = 99 - i;
        n->next = head;
        pheap_persist(h, n, sizeof(*n));
        head = off;
    }
    REQUIRE_OK(pheap_root_set(h, "list", head));
    void *old_base = pheap_direct(h, st.data_offset);
    CHECK_EQ(pheap_offset(h, old_base), st.data_offset);
    CHECK(pheap_direct(h, 0) == NULL);
    CHECK(pheap_direct(h, st.size) == NULL);
    CHECK_EQ(pheap_offset(h, &head), 0);
    pheap_close(h);

    /* Occupy the old range. */
    char *base = (char *)old_base - st.data_offset;
    void *blocker = mmap(base, st.size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    REQUIRE(blocker == base);
    REQUIRE_OK(pheap_open(path, NULL, &h));
    char *new_base = (char *)pheap_direct(h, st.data_offset) - st.data_offset;
    CHECK(new_base != base);
    unsigned count = 0;
    for (pheap_off off = pheap_root_get(h, "list"); off; count++) {
        node *n = pheap_direct(h, off);
        REQUIRE(n);
        CHECK_EQ(n->value, count);
        CHECK_EQ(pheap_offset(h, n), off);
        off = n->next;
    }
    CHECK_EQ(count, 100);
    pheap_close(h);
    munmap(blocker, st.size);
}
/* pheap_of: which open heap holds an address, with heaps opening and
 * closing in other threads meanwhile. */
typedef struct churn_arg {
    int stop;
    unsigned rounds;
} churn_arg;

static void *churn(void *arg)
{
    churn_arg *c = arg;
    char name[64];
    while (!__atomic_load_n(&c->stop, __ATOMIC_RELAXED)) {
        snprintf(name, sizeof(name), "of-churn-%u.heap", c->rounds % 4);
        pheap *h = ph_test_create(ph_test_path(name), 1u << 20);
        if (!h)
            break;
        pheap_off off = pheap_alloc(h, 64);
        if (pheap_of(pheap_direct(h, off)) != h)
            __atomic_store_n(&c->stop, 2, __ATOMIC_RELAXED); /* wrong: tell the test */
        pheap_close(h);
        __atomic_store_n(&c->rounds, c->rounds + 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

TEST(the_heap_of_an_address)
{
    enum { N = 40 };
    pheap *hs[N];
    pheap_off offs[N];
    char name[64];
    for (unsigned i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "of-%u.heap", i);
        hs[i] = ph_test_create(ph_test_path(name), 1u << 20);
        REQUIRE(hs[i]);
        offs[i] = pheap_alloc(hs[i], 100);
        REQUIRE(offs[i]);
    }
    CHECK(pheap_of(NULL) == NULL);
    int local;
    CHECK(pheap_of(&local) == NULL);
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(hs[3], &st));
    char *data = pheap_direct(hs[3], st.data_offset);
    CHECK(pheap_of(data) == hs[3]);
    CHECK(pheap_of(data - 1) == NULL); /* metadata: not the data region */
    churn_arg c = {0, 0};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, churn, &c) == 0);
    /* lookups all along, until the other thread opened and closed 20 heaps */
    for (unsigned round = 0; __atomic_load_n(&c.rounds, __ATOMIC_RELAXED) < 20 &&
                             !__atomic_load_n(&c.stop, __ATOMIC_RELAXED) && round < 10000000;
         round++) {
        unsigned i = round % N;
        char *p = pheap_direct(hs[i], offs[i]);
        CHECK(pheap_of(p) == hs[i]);
        CHECK(pheap_of(p + 99) == hs[i]);
    }
    __atomic_store_n(&c.stop, c.stop ? c.stop : 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    CHECK(c.stop != 2);
    CHECK(c.rounds >= 20);
    char *gone = pheap_direct(hs[5], offs[5]);
    pheap_close(hs[5]);
    CHECK(pheap_of(gone) == NULL);
    for (unsigned i = 0; i < N; i++)
        if (i != 5)
            pheap_close(hs[i]);
}

