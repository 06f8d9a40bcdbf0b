/*
 * consumer.cpp -- a C++ program built against an installed pheap (through
 * pkg-config, or the CMake package): a named vector of the C++ layer,
 * filled in a transaction, read back after reopening; prints "ok".
 * Usage: consumer_cpp HEAP_PATH
 */
#include <pheap.hpp>

#include <cstdio>
#include <vector>

#include <unistd.h>

using vec = std::vector<long, pheap::allocator<long>>;

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: consumer_cpp HEAP_PATH\n");
        return 2;
    }
    unlink(argv[1]);
    try {
        {
            pheap::heap h = pheap::heap::create(argv[1], 4u << 20);
            vec &v = *h.make_named<vec>("numbers", pheap::allocator<long>(h));
            pheap::run(h, [&](pheap::transaction &tx) {
                tx.add(v);
                for (long i = 0; i < 1000; i++)
                    v.push_back(i * i);
            });
            h.close();
        }
        pheap::heap h = pheap::heap::open(argv[1]);
        const vec *v = h.find<vec>("numbers");
        if (!v || v->size() != 1000 || (*v)[999] != 999L * 999L) {
            std::fprintf(stderr, "consumer_cpp: the vector did not come back\n");
            return 1;
        }
        h.close();
    } catch (const pheap::error &e) {
        std::fprintf(stderr, "consumer_cpp: %s\n", e.what());
        return 1;
    }
    std::printf("version %s\nok\n", pheap_version());
    return 0;
}
