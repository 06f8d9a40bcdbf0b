/*
 * tx_write_overlap.c -- pheap_tx_write takes "the bytes now at src" (src is
 * copied at once).  When dst is partly added (stored in place at once) and
 * src overlaps dst -- shifting the tail of an array in a node by one slot
 * to insert, the commonest overlapping write -- the pieces written in
 * place must not change what the later, logged pieces copy from src.
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

static pheap *fresh_heap(const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 16u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h = NULL;
    if (pheap_open(path, &o, &h))
        ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg());
    return h;
}

TEST(an_overlapping_write_into_partly_added_bytes_moves_like_memmove)
{
    pheap *h = fresh_heap("adv-txw.heap");
    REQUIRE(h);
    pheap_off n = pheap_alloc(h, 16 * sizeof(uint64_t));
    uint64_t *a = pheap_direct(h, n), want[16];
    for (unsigned k = 0; k < 16; k++)
        a[k] = 100 + k;
    pheap_persist(h, a, 16 * sizeof(uint64_t));
    memcpy(want, a, sizeof(want));
    memmove(&want[3], &want[2], 10 * sizeof(uint64_t)); /* a[3..12] := old a[2..11] */

    REQUIRE_OK(pheap_tx_begin(h));
    REQUIRE_OK(pheap_tx_add(h, &a[0], 8 * sizeof(uint64_t))); /* a[0..7] added */
    /* Shift a[2..11] right by one slot: a[3..7] are added (in place at
     * once), a[8..12] are not (logged). */
    REQUIRE_OK(pheap_tx_write(h, &a[3], &a[2], 10 * sizeof(uint64_t)));
    uint64_t seen[16];
    REQUIRE_OK(pheap_tx_read(h, seen, a, sizeof(seen)));
    for (unsigned k = 0; k < 16; k++)
        if (seen[k] != want[k])
            ph_test_fail(__FILE__, __LINE__, "in the transaction: a[%u] = %llu, want %llu", k,
                         (unsigned long long)seen[k], (unsigned long long)want[k]);
    REQUIRE_OK(pheap_tx_commit(h));
    for (unsigned k = 0; k < 16; k++)
        if (a[k] != want[k])
            ph_test_fail(__FILE__, __LINE__, "after the commit: a[%u] = %llu, want %llu", k,
                         (unsigned long long)a[k], (unsigned long long)want[k]);
    REQUIRE_OK(pheap_close(h));
}
