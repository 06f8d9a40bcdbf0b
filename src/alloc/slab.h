/*
 * slab.h -- slabs: 64 KiB chunks of blocks of one size class.  The durable
 * part is the descriptor in the slab region (format/layout.h): class and
 * the interleaved A/E bitmap, the truth about which blocks are allocated.
 * The volatile part (ph_slab) keeps a copy of that bitmap (bits[], what the
 * code reads), says which free blocks are available to hand out -- free
 * blocks sitting in a thread cache are neither allocated nor available --
 * and links the slab into its arena's partial list.
 *
 * Writing a bitmap word: lock the word, change the copy, write the new
 * value to the descriptor with a non-temporal store, fence, unlock.  The
 * lock keeps non-temporal stores of one word in the order of their changes
 * (they are weakly ordered); the copy spares a read of a line the store
 * left uncached.  Locks are per word, so threads meet only on the same 32
 * blocks.
 */
#ifndef PH_ALLOC_SLAB_H
#define PH_ALLOC_SLAB_H

#include <stdint.h>

#include "alloc/sizeclass.h"
#include "alloc/space.h"
#include "format/layout.h"
#include "pheap.h"
#include "persist/persist.h"
#include "util/spin.h"

typedef struct ph_slab {
    uint64_t held[PH_CHUNK_SIZE / 16 / 64]; /* one bit per 16 bytes of the chunk: set at
                                   the start of each block of the class that is not
                                   available (allocated, or in a thread cache); never
                                   for 8-byte blocks.  GC mode's free tests this one
                                   bit where it would find the block's index and test
                                   avail (ph_slab_held).  Follows avail, under the same
                                   lock; read anywhere.  First: its address
                                   is the slab's, which GC mode's map holds */
    uint64_t off;              /* data offset of the chunk (immutable) */
    ph_slab_desc *desc;        /* descriptor in the mapping (immutable) */
    uint32_t xcls;             /* size class while a slab */
    uint32_t block_size;       /* ph_class_size[cls] */
    uint32_t nblocks;          /* ph_class_blocks(cls) */
    uint32_t magic;            /* ceil(2^32 / block_size): index by multiply */
    /* Morphing (alloc/morph.h): the four fields above change only under
     * every word lock, with xgen odd meanwhile (a seqlock for the readers
     * that hold no lock), and the old class's fields are set with them. */
    uint32_t xgen;             /* even; +2 per morph */
    uint32_t xold_live;        /* old blocks still allocated: 0 but in a morphed slab */
    uint32_t old_cls, old_size, old_nblocks, old_magic;
    int shared;                /* a slab of a heap shared between processes: its
                                  bitmap words change by compare-and-swap on the
                                  descriptor, which other processes' frees change
                                  too (alloc/slab_share.h); the copy follows it.
                                  (In the first line, with what every commit reads.) */
    uint64_t morph;            /* the descriptor's morph word */
    int copy_ahead;            /* the copy holds a repair the descriptor does not
                                  (a read-only open of a heap left by a crash) */
    /* under the owning arena's lock: */
    uint32_t arena;            /* owning arena */
    uint32_t navail;           /* blocks free and in no thread cache */
    int in_partial;            /* on the arena's partial list */
    int evac;                  /* its blocks are moving out (pheap_defrag): kept off
                                  the partial list, so no refill hands its space out */
    int bits_known;            /* bits[] equals the descriptor's bitmap */
    struct ph_slab *next, *prev;
    uint64_t avail[PH_SLAB_MAX_BLOCKS / 64]; /* one bit per available block (written
                                   under the lock, read anywhere: ph_slab_available) */
    /* under the word's lock (read anywhere with ph_load): */
    uint64_t bits[PH_SLAB_WORDS];  /* copy of desc->xbits */
    uint8_t wlock[PH_SLAB_WORDS];  /* word locks */
} ph_slab;

/* Word and shift of block i's A bit (E is the next bit): interleaved so
 * that consecutive blocks fall in different cache lines. */
static inline void ph_slab_bitpos(uint32_t i, uint32_t *word, uint32_t *shift)
{
    uint32_t line = i % PH_SLAB_LINES, k = i / PH_SLAB_LINES;
    *word = line * (PH_LINE_SIZE / 8) + k / 32;
    *shift = 2 * (k % 32);
}

/* Block index of offset `off` in slab s; sets *exact when off is a block's
 * start.  Exact for every offset inside the chunk (see slab.c). */
static inline uint32_t ph_slab_index(const ph_slab *s, uint64_t off, int *exact)
{
    uint32_t rel = (uint32_t)(off - s->off), size = ph_load_relaxed(&s->block_size);
    uint32_t i = (uint32_t)(((uint64_t)rel * ph_load_relaxed(&s->magic)) >> 32);
    *exact = i * size == rel && i < ph_load_relaxed(&s->nblocks);
    return i;
}

/* Locks the bitmap word of block i; returns the word, and A's shift in it
 * in *shift. */
static inline uint32_t ph_slab_lock(ph_slab *s, uint32_t i, uint32_t *shift)
{
    uint32_t w;
    ph_slab_bitpos(i, &w, shift);
    ph_spin_lock(&s->wlock[w]);
    return w;
}

/* Unlocks word w; the caller has fenced since its last change to it. */
static inline void ph_slab_unlock(ph_slab *s, uint32_t w)
{
    ph_spin_unlock(&s->wlock[w]);
}

/* With word w locked: sets A and E at `shift` and writes the word back,
 * durable at the caller's next fence (before it unlocks). */
/* The error of freeing a block whose bits are `ae` (A bit 0, E bit 1), or
 * 0 when it is allocated (A and E; A alone is a pinned block of a morphed
 * slab, which is space of an older block, not a block). */
static inline int ph_slab_pair_error(unsigned ae)
{
    return ae == 3 ? 0 : ae == 2 ? PHEAP_EDOUBLEFREE : ae == 1 ? PHEAP_EINTERIOR : PHEAP_ENOTALLOC;
}

/* A shared slab's word w changed by compare-and-swap: `set` bits set and
 * A at `shift` cleared when `clear` (only while the pair there is A|E:
 * else its ph_slab_pair_error, nothing changed); the copy refreshed, the
 * line flushed (durable at the caller's next fence). */
static inline int ph_slab_cas_locked(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t w,
                                     uint64_t set, uint32_t shift, int clear)
{
    uint64_t *word = &s->desc->xbits[w], v = ph_load(word), nv;
    do {
        if (clear && ((v >> shift) & 3) != 3)
            return ph_slab_pair_error((unsigned)(v >> shift) & 3);
        nv = (v | set) & ~(clear ? 1ull << shift : 0);
    } while (!ph_persist_cas(&sp->persist, c, word, &v, nv));
    ph_store(&s->bits[w], nv);
    ph_persist_flush(&sp->persist, c, word, sizeof(*word));
    return 0;
}

/* Sets A and E at `shift` in the copy of word w (locked); its new value. */
static inline uint64_t ph_slab_copy_set(ph_slab *s, uint32_t w, uint32_t shift)
{
    uint64_t v = s->bits[w] | 3ull << shift;
    ph_store(&s->bits[w], v);
    return v;
}

static inline void ph_slab_set_locked(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t w,
                                      uint32_t shift)
{
    if (ph_unlikely(s->shared)) {
        (void)ph_slab_cas_locked(sp, c, s, w, 3ull << shift, shift, 0);
        return;
    }
    ph_persist_store_nt(&sp->persist, c, &s->desc->xbits[w], ph_slab_copy_set(s, w, shift));
}

/* As ph_slab_set_locked in a slab of this process only, with a plain store
 * and a flush of the word (durable at the caller's next fence, which may
 * come after the unlock: a plain store is ordered with the stores of the
 * word's later holders, a non-temporal one is not). */
static inline void ph_slab_set_locked_plain(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t w,
                                            uint32_t shift)
{
    ph_persist_write(&sp->persist, c, &s->desc->xbits[w], ph_slab_copy_set(s, w, shift));
    ph_persist_flush(&sp->persist, c, &s->desc->xbits[w], sizeof(uint64_t));
}

/* With word w locked: clears A at `shift` and writes the word back as
 * above.  Returns 0, or with nothing changed the error of
 * ph_slab_pair_error: PHEAP_EDOUBLEFREE (A clear, E set), PHEAP_ENOTALLOC
 * (never allocated), PHEAP_EINTERIOR (pinned). */
static inline int ph_slab_clear_locked(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t w,
                                       uint32_t shift)
{
    if (ph_unlikely(s->shared)) /* another process may have freed it first */
        return ph_slab_cas_locked(sp, c, s, w, 0, shift, 1);
    uint64_t v = s->bits[w];
    if (ph_unlikely(((v >> shift) & 3) != 3))
        return ph_slab_pair_error((unsigned)(v >> shift) & 3);
    v &= ~(1ull << shift);
    ph_store(&s->bits[w], v);
    ph_persist_store_nt(&sp->persist, c, &s->desc->xbits[w], v);
    return 0;
}

/* The commit of a small allocation: block i's A and E set and persisted
 * (one non-temporal store, one fence).  Where the back end's fence is a
 * file sync (persist.h: plain_stores), the word is unlocked before it:
 * every later state of the word holds this change, so no order between
 * the threads' syncs matters, and a thread waiting out a device flush
 * does not hold the 31 other blocks of its word. */
static inline void ph_slab_mark(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t i)
{
    uint32_t sh, w = ph_slab_lock(s, i, &sh);
    ph_slab_set_locked(sp, c, s, w, sh);
    if (ph_unlikely(sp->persist.plain_stores)) {
        ph_slab_unlock(s, w);
        ph_persist_fence(&sp->persist, c);
        return;
    }
    ph_persist_fence(&sp->persist, c);
    ph_slab_unlock(s, w);
}

/* The commit of a small free: the A bit at (w, sh) cleared and persisted;
 * errors as ph_slab_clear_locked, with nothing written; 1 when the slab's
 * xgen is no longer `gen` under the word's lock (a morph came between the
 * caller's resolution and the lock, alloc/morph.h: resolve again). */
static inline int ph_slab_unmark(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t w, uint32_t sh,
                                 uint32_t gen)
{
    ph_spin_lock(&s->wlock[w]);
    if (ph_unlikely(ph_load_relaxed(&s->xgen) != gen)) {
        ph_slab_unlock(s, w);
        return 1;
    }
    int rc = ph_slab_clear_locked(sp, c, s, w, sh);
    if (ph_unlikely(sp->persist.plain_stores)) { /* as in ph_slab_mark */
        ph_slab_unlock(s, w);
        if (rc == 0)
            ph_persist_fence(&sp->persist, c);
        return rc;
    }
    if (rc == 0)
        ph_persist_fence(&sp->persist, c);
    ph_slab_unlock(s, w);
    return rc;
}

/* Sets the message of an error of ph_slab_pair_error for a free of `off`
 * and returns the error. */
int ph_slab_free_error(int rc, uint64_t off);

/* A and E of block i, read atomically (bit 0 = A, bit 1 = E). */
static inline unsigned ph_slab_bits(const ph_slab *s, uint32_t i)
{
    uint32_t w, sh;
    ph_slab_bitpos(i, &w, &sh);
    return (unsigned)(ph_load(&s->bits[w]) >> sh) & 3u;
}

/* GC mode, arena lock held: block `off` goes into a thread cache (A|E set
 * in the copy only). */
static inline void ph_slab_gc_hold(ph_slab *s, uint64_t off)
{
    uint32_t w, sh, i = (uint32_t)((off - s->off) / s->block_size);
    ph_slab_bitpos(i, &w, &sh);
    ph_store(&s->bits[w], s->bits[w] | 3ull << sh);
}

/* GC mode, arena lock held: block `off` comes back from a thread cache (A
 * cleared in the copy).  0 when A was clear already: a double free that
 * reached a cache twice. */
static inline int ph_slab_gc_return(ph_slab *s, uint64_t off)
{
    uint32_t w, sh, i = (uint32_t)((off - s->off) / s->block_size);
    ph_slab_bitpos(i, &w, &sh);
    if (!((s->bits[w] >> sh) & 1))
        return 0;
    ph_store(&s->bits[w], s->bits[w] & ~(1ull << sh));
    return 1;
}

/* Zeroes the descriptor's bitmap and the copy (non-temporal stores,
 * durable at the caller's next fence). */
void ph_slab_zero_desc(ph_space *sp, ph_pctx *c, ph_slab *s);

/* Writes the copy to the descriptor's bitmap, the lines that differ
 * (non-temporal stores, durable at the caller's next fence). */
void ph_slab_store_desc(ph_space *sp, ph_pctx *c, ph_slab *s);

/* 1 when block i is available in its slab (free and in no cache); a
 * racy read, exact for a block the caller holds or has just freed. */
static inline int ph_slab_available(const ph_slab *s, uint32_t i)
{
    return (int)((ph_load_relaxed(&s->avail[i / 64]) >> (i % 64)) & 1);
}

/* 1 when the start of a block of s's class that is not available lies
 * at `rel` bytes into the chunk: a block allocated, or in a thread cache
 * (the very test of ph_slab_index and ph_slab_available, in one load).
 * 0 for every other offset, and for each of an 8-byte class's blocks. */
static inline int ph_slab_held(const ph_slab *s, uint32_t rel)
{
    uint32_t g = rel / 16;
    return rel % 16 == 0 && ((ph_load_relaxed(&s->held[g / 64]) >> (g % 64)) & 1);
}

/* The first 16-byte granule whose held bit disagrees with the available
 * blocks (pheap_check), or -1. */
int64_t ph_slab_held_mismatch(const ph_slab *s);

/* Volatile part for chunk `off` (zeroed, aligned to 64); the descriptor is not read. */
ph_slab *ph_slab_new(ph_space *sp, uint64_t off);

/* Sets class-derived fields of the volatile part. */
void ph_slab_set_class(ph_slab *s, unsigned cls);

/* Writes a fresh descriptor for class `cls` (bitmap zero) with
 * non-temporal stores; the caller fences, then commits the slab in the
 * extent log. */
void ph_slab_format(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned cls);

/* Copies the durable bitmap into the volatile copy (at open). */
void ph_slab_load(ph_slab *s);

/* Rebuilds the available set from the bitmap copy (at open, after
 * recovery). */
void ph_slab_find_avail(ph_slab *s);

/* Takes up to n available blocks (offsets into out[]); returns how many. */
uint32_t ph_slab_take(ph_slab *s, uint64_t *out, uint32_t n);

/* Marks block `off` available again (it is free and leaves a cache). */
void ph_slab_give(ph_slab *s, uint64_t off);
/* Makes block `off` unavailable if it is available (a block an operation
 * in flight, or to be replayed, names). */
void ph_slab_withhold(ph_slab *s, uint64_t off);

/* Allocated blocks of the slab's class (A and E), counted from the bitmap
 * copy; a morphed slab's old blocks are xold_live more. */
uint32_t ph_slab_live(const ph_slab *s);

/* Blocks of the slab's class whose A bit is set: allocated, or pinned by
 * a morph's old blocks (from the bitmap copy). */
uint32_t ph_slab_taken(const ph_slab *s);

/* Checks the descriptor against its class and the bitmap copy (no
 * operation may be in flight); returns 0 or writes a message to err and
 * returns 1. */
int ph_slab_check(const ph_slab *s, unsigned cls, char *err, size_t errlen);

/* The durable descriptor alone: its header names class `cls` with that
 * class's sizes, no bit lies beyond the last block, and A implies E --
 * true in every crash image (the descriptor is fenced before the slab's
 * extent-log entry, and each bitmap word changes by one 8-byte store).
 * 0, or 1 with a message. */
int ph_slab_check_desc(const ph_slab *s, unsigned cls, char *err, size_t errlen);

/* A bits set in a descriptor's bitmap (of a chunk that may not be a slab
 * now: a slab is released only once all its A bits are durably clear). */
uint32_t ph_slab_desc_allocated(const ph_slab_desc *d);
/* 1 when the descriptor's bitmap records any allocated block: what the
 * scans of every chunk at open ask, without counting. */
int ph_slab_desc_any_allocated(const ph_slab_desc *d);

#endif
