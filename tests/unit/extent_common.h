/*
 * extent_common.h -- what the tests of extent indexes kept by several
 * processes share (extent_sync.c, extent_share.c): a fresh heap, and the
 * check that two indexes of one heap agree.
 */
#ifndef PH_TEST_EXTENT_COMMON_H
#define PH_TEST_EXTENT_COMMON_H

#include <stdlib.h>
#include <unistd.h>

#include "alloc/extent.h"
#include "harness.h"

/* The two indexes tile the backed pages with the same extents (free ones
 * are always merged, so the tiling is the same whatever the history). */
static inline void expect_same(ph_extents *a, ph_extents *b, int line)
{
    enum { MAX = 512 };
    ph_extnode *va = malloc(MAX * sizeof(*va)), *vb = malloc(MAX * sizeof(*vb));
    uint64_t page = 0;
    for (;;) {
        size_t na = ph_extents_copy(a, page, va, MAX), nb = ph_extents_copy(b, page, vb, MAX);
        if (na != nb) {
            ph_test_fail(__FILE__, line, "from page %llu: %zu extents against %zu",
                         (unsigned long long)page, na, nb);
            break;
        }
        for (size_t i = 0; i < na; i++)
            if (va[i].page != vb[i].page || va[i].npages != vb[i].npages ||
                va[i].kind != vb[i].kind || va[i].cls != vb[i].cls) {
                ph_test_fail(__FILE__, line, "extent at page %llu: %llu pages kind %u against "
                             "page %llu: %llu pages kind %u", (unsigned long long)va[i].page,
                             (unsigned long long)va[i].npages, va[i].kind,
                             (unsigned long long)vb[i].page, (unsigned long long)vb[i].npages,
                             vb[i].kind);
                na = 0;
                break;
            }
        if (na < MAX)
            break;
        page = va[na - 1].page + va[na - 1].npages;
    }
    char err[256];
    if (ph_extents_check(b, err, sizeof(err)))
        ph_test_fail(__FILE__, line, "the synced index: %s", err);
    free(va);
    free(vb);
}

/* A new heap `name` of 2 MiB, growing to max_size, without flushes. */
static inline pheap *fresh_heap(uint64_t max_size, const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 2u << 20, .max_size = max_size, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
    return h;
}

#endif
