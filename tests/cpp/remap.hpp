/*
 * remap.hpp -- helpers of the C++ tests: where a heap is mapped, and a
 * reservation of that address range, so that the next open of the heap
 * (in this process or in a child) must map it somewhere else.
 */
#ifndef PHEAP_TEST_REMAP_HPP
#define PHEAP_TEST_REMAP_HPP

#include <pheap.hpp>

#include <cstdint>

#include <sys/mman.h>

namespace check {

/* The address range the heap's mapping covers (file start to max size). */
struct range {
    std::uintptr_t lo = 0, len = 0;
};
inline range mapped_range(const pheap::heap &h)
{
    struct pheap_stats st;
    range r;
    if (pheap_stats(h.get(), &st) != 0)
        return r;
    std::uintptr_t data = reinterpret_cast<std::uintptr_t>(h.direct(st.data_offset));
    r.lo = data - st.data_offset;
    r.len = st.max_size > st.size ? st.max_size : st.size;
    return r;
}

/* Holds [lo, lo + len) with an inaccessible mapping until destroyed. */
class occupied {
    void *p_ = MAP_FAILED;
    std::size_t len_ = 0;

public:
    explicit occupied(range r) : len_(r.len)
    {
        p_ = mmap(reinterpret_cast<void *>(r.lo), r.len, PROT_NONE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
        if (p_ != MAP_FAILED && p_ != reinterpret_cast<void *>(r.lo)) {
            munmap(p_, len_); /* an old kernel took the address as a hint */
            p_ = MAP_FAILED;
        }
    }
    occupied(const occupied &) = delete;
    occupied &operator=(const occupied &) = delete;
    ~occupied()
    {
        if (p_ != MAP_FAILED)
            munmap(p_, len_);
    }
    bool ok() const { return p_ != MAP_FAILED; }
};

} // namespace check

#endif
