/*
 * pointers.c -- offsets stay valid when the heap is mapped elsewhere: the
 * old address range is occupied before reopening, so the heap must land at
 * another address and still find its linked data through offsets.
 */
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
