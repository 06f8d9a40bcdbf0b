/*
 * slab_share.c -- bitmap commits, remote frees and adoption of the slabs
 * of a heap shared between processes (slab_share.h).
 *
 * Crash protocol: each commit changes one bitmap word by one
 * compare-and-swap, flushed and fenced before the call returns (by the
 * caller for the owner's allocations), exactly as a commit of an
 * exclusive heap changes it by one store; nothing else is durable.  The
 * remote-free lists and owners live in the process table, which no
 * recovery reads: after every process is gone the bitmaps are the truth.
 */
#include "alloc/slab_share.h"

#include <string.h>

#include "pheap.h"
#include "util/error.h"

int ph_slab_shared_set(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t i)
{
    uint32_t w, sh;
    ph_slab_bitpos(i, &w, &sh);
    if ((ph_load(&s->desc->xbits[w]) >> sh) & 1)
        return PHEAP_EBUSY; /* only the owner sets A: this holds until its next set */
    return ph_slab_cas_locked(sp, c, s, w, 3ull << sh, sh, 0);
}

int ph_slab_desc_live(const ph_slab_desc *d, uint64_t chunk_off, uint64_t off, uint32_t *w,
                      uint32_t *sh)
{
    uint64_t size = ph_load(&d->block_size), nblocks = ph_load(&d->nblocks);
    if (ph_load(&d->morph))
        return ph_err(PHEAP_ENOTSUP, "free of %llu: a morphed slab in a shared heap",
                      (unsigned long long)off);
    if (size == 0 || off < chunk_off || (off - chunk_off) % size ||
        (off - chunk_off) / size >= nblocks)
        return ph_err(PHEAP_EINTERIOR, "free of %llu: not the start of a block",
                      (unsigned long long)off);
    ph_slab_bitpos((uint32_t)((off - chunk_off) / size), w, sh);
    int rc = ph_slab_pair_error((unsigned)(ph_load(&d->xbits[*w]) >> *sh) & 3u);
    return rc ? ph_slab_free_error(rc, off) : 0;
}

int ph_slab_shared_clear(ph_space *sp, ph_pctx *c, ph_slab_desc *d, uint64_t chunk_off,
                         uint64_t off)
{
    uint32_t w, sh;
    int rc = ph_slab_desc_live(d, chunk_off, off, &w, &sh);
    if (rc)
        return rc;
    uint64_t *word = &d->xbits[w], v = ph_load(word);
    do { /* the check again on every value the word takes: a free may come between */
        if ((rc = ph_slab_pair_error((unsigned)(v >> sh) & 3u)) != 0)
            return ph_slab_free_error(rc, off);
    } while (!ph_persist_cas(&sp->persist, c, word, &v, v & ~(1ull << sh)));
    ph_persist_flush(&sp->persist, c, word, sizeof(*word));
    return 0;
}

int ph_slab_remote_free(ph_space *sp, ph_pctx *c, ph_slab_desc *d, ph_procs_chunk *pc,
                        uint64_t chunk_off, uint64_t off)
{
    int rc = ph_slab_shared_clear(sp, c, d, chunk_off, off);
    if (rc)
        return rc;
    ph_persist_fence(&sp->persist, c);
    ph_slab_remote_push(sp, pc, off);
    return 0;
}

void ph_slab_remote_push(ph_space *sp, ph_procs_chunk *pc, uint64_t off)
{
    /* The block is free and no one else's: its first word links the list. */
    uint64_t *link = ph_space_at(sp, off), head = __atomic_load_n(&pc->xremote, __ATOMIC_RELAXED);
    do
        __atomic_store_n(link, head, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&pc->xremote, &head, off, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED));
}

uint32_t ph_slab_collect(ph_space *sp, ph_slab *s, ph_procs_chunk *pc, int *bad)
{
    uint64_t off = __atomic_exchange_n(&pc->xremote, 0, __ATOMIC_ACQUIRE);
    uint32_t n = 0;
    *bad = 0;
    while (off) {
        int exact;
        uint32_t i, w, sh;
        if (off < s->off || off >= s->off + PH_CHUNK_SIZE ||
            (i = ph_slab_index(s, off, &exact), !exact) || ph_slab_available(s, i)) {
            *bad = 1;
            break;
        }
        ph_slab_bitpos(i, &w, &sh);
        /* the copy refreshed under the word's lock: the owner's threads set
         * bits of the word under it (ph_slab_cas_locked), copy included */
        ph_spin_lock(&s->wlock[w]);
        uint64_t v = ph_load(&s->desc->xbits[w]);
        if (!((v >> sh) & 1))
            ph_store(&s->bits[w], v);
        ph_slab_unlock(s, w);
        if ((v >> sh) & 1) { /* allocated: no remote free put it here */
            *bad = 1;
            break;
        }
        uint64_t next = __atomic_load_n((const uint64_t *)ph_space_at(sp, off), __ATOMIC_RELAXED);
        ph_slab_give(s, off);
        n++;
        off = next;
    }
    return n;
}

int ph_slab_adopt(ph_slab *s, ph_procs_chunk *pc, uint64_t me)
{
    uint64_t cls = ph_load(&s->desc->cls);
    if (cls >= PH_CLASSES || ph_load(&s->desc->block_size) != ph_class_size[cls] ||
        ph_load(&s->desc->morph))
        return ph_err(PHEAP_ECORRUPT, "slab at %llu: descriptor of class %llu, not a slab of "
                      "a shared heap", (unsigned long long)s->off, (unsigned long long)cls);
    __atomic_store_n(&pc->xremote, 0, __ATOMIC_RELAXED); /* its blocks are free in the bitmap */
    ph_slab_set_class(s, (unsigned)cls);
    ph_slab_load(s);
    ph_slab_find_avail(s);
    __atomic_store_n(&pc->xowner, me, __ATOMIC_RELEASE);
    return 0;
}
