/*
 * cpp_list.cpp -- the README's linked list, in C++: each run appends a node
 * whose value is the square of the list's length, and prints the list.
 * Links are pheap::ptr<node>, valid wherever the heap is mapped; the new
 * node is made and linked in one transaction, so a kill at any instant
 * leaves whole nodes only and leaks none.
 *
 * Usage: cpp_list [HEAP]   (default /tmp/cpp-list.heap)
 */
#include <pheap.hpp>

#include <cstdio>

namespace {

struct node {
    pheap::ptr<node> next;
    unsigned long value;
    explicit node(unsigned long v) : value(v) {}
};

struct list {
    pheap::ptr<node> head;
};

} // namespace

int main(int argc, char **argv)
{
    try {
        pheap::heap h = pheap::heap::create(argc > 1 ? argv[1] : "/tmp/cpp-list.heap", 16 << 20);
        list &l = h.root<list>("list"); /* made (empty) by the first run */

        pheap::ptr<node> *link = &l.head;
        unsigned long count = 0;
        while (*link) {
            link = &(*link)->next;
            count++;
        }
        pheap::run(h, [&](pheap::transaction &tx) {
            tx.add(*link);                  /* the word we change */
            *link = h.make<node>(count * count); /* exists only if we commit */
        });

        std::printf("list:");
        for (node *n = l.head.get(); n; n = n->next.get())
            std::printf(" %lu", n->value);
        std::printf("\n");
        h.close();
    } catch (const pheap::error &e) {
        std::fprintf(stderr, "cpp_list: %s\n", e.what());
        return 1;
    }
    return 0;
}
