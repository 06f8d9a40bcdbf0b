/*
 * tx_ranges.c -- the bytes a transaction snapshotted (pheap_tx_add): a
 * sorted array of disjoint spans, so that bytes added twice are logged
 * once and pheap_tx_write knows which bytes it may store in place; and the
 * blocks it allocated.
 */
#include <string.h>

#include "heap/tx_int.h"

/* Index of the first added span that ends after `off`. */
static size_t first_after(const ph_tx *tx, uint64_t off)
{
    size_t lo = 0, hi = tx->added.n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (tx->added.v[mid].off + tx->added.v[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Adds [off, off + len) to the added spans (merged with neighbours). */
int ph_tx_ranges_add(ph_tx *tx, uint64_t off, uint64_t len)
{
    size_t i = first_after(tx, off);
    if (i > 0 && tx->added.v[i - 1].off + tx->added.v[i - 1].len == off)
        i--; /* touches the previous span: merge */
    uint64_t end = off + len;
    size_t j = i;
    while (j < tx->added.n && tx->added.v[j].off <= end) {
        off = PH_MIN(off, tx->added.v[j].off);
        end = PH_MAX(end, tx->added.v[j].off + tx->added.v[j].len);
        j++;
    }
    if (j == i) { /* insert */
        if (VEC_PUSH(tx->added, ((span){0, 0})))
            return PHEAP_ENOMEM;
        memmove(&tx->added.v[i + 1], &tx->added.v[i], (tx->added.n - 1 - i) * sizeof(span));
    } else { /* spans i..j-1 become one */
        memmove(&tx->added.v[i + 1], &tx->added.v[j], (tx->added.n - j) * sizeof(span));
        tx->added.n -= j - i - 1;
    }
    tx->added.v[i] = (span){off, end - off};
    return 0;
}

/* Calls fn for each piece of [off, off + len), saying whether it is added. */
int ph_tx_ranges_each(ph_tx *tx, uint64_t off, uint64_t len,
                      int (*fn)(void *arg, uint64_t off, uint64_t len, int added), void *arg)
{
    uint64_t end = off + len;
    for (size_t i = first_after(tx, off); off < end; i++) {
        uint64_t s = i < tx->added.n ? PH_MAX(tx->added.v[i].off, off) : end;
        int rc;
        if (s > off && (rc = fn(arg, off, PH_MIN(s, end) - off, 0)) != 0)
            return rc;
        if (s >= end)
            break;
        uint64_t e = PH_MIN(tx->added.v[i].off + tx->added.v[i].len, end);
        if ((rc = fn(arg, s, e - s, 1)) != 0)
            return rc;
        off = e;
    }
    return 0;
}

/* 1 when [off, off + len) lies in a block this transaction allocated, -1
 * when it meets a block the transaction freed, 0 otherwise. */
int ph_tx_ranges_block(const ph_tx *tx, uint64_t off, uint64_t len)
{
    int state = 0;
    for (size_t i = 0; i < tx->changes.n; i++) { /* in log order: the last change counts */
        const ph_tx_change *c = &tx->changes.v[i];
        if (ph_tx_overlaps(off, len, c->off, c->bytes))
            state = c->kind == PH_TXREC_FREE                           ? -1
                    : off >= c->off && off + len <= c->off + c->bytes ? 1
                                                                        : 0;
    }
    return state;
}

