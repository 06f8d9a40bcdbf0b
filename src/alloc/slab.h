/*
 * slab.h -- slabs: 64 KiB chunks of blocks of one size class.  The durable
 * part is the descriptor in the slab region (format/layout.h): class and
 * the interleaved A/E bitmap, the truth about which blocks are allocated.
 * The volatile part (ph_slab) says which free blocks are available to hand
 * out -- free blocks sitting in a thread cache are neither allocated nor
 * available -- and links the slab into its arena's partial list.
 */
#ifndef PH_ALLOC_SLAB_H
#define PH_ALLOC_SLAB_H

#include <stdint.h>

#include "alloc/sizeclass.h"
#include "alloc/space.h"
#include "format/layout.h"

typedef struct ph_slab {
    uint64_t off;              /* data offset of the chunk (immutable) */
    ph_slab_desc *desc;        /* descriptor in the mapping (immutable) */
    uint32_t xcls;             /* size class while a slab */
    uint32_t block_size;       /* ph_class_size[cls] */
    uint32_t nblocks;          /* ph_class_blocks(cls) */
    uint32_t magic;            /* ceil(2^32 / block_size): index by multiply */
    /* under the owning arena's lock: */
    uint32_t arena;            /* owning arena */
    uint32_t navail;           /* blocks free and in no thread cache */
    int in_partial;            /* on the arena's partial list */
    struct ph_slab *next, *prev;
    uint64_t avail[PH_SLAB_MAX_BLOCKS / 64]; /* one bit per available block */
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
    uint32_t rel = (uint32_t)(off - s->off);
    uint32_t i = (uint32_t)(((uint64_t)rel * s->magic) >> 32);
    *exact = i * s->block_size == rel && i < s->nblocks;
    return i;
}

/* Sets A and E of block i; returns the bitmap word for the caller to
 * persist. */
static inline uint64_t *ph_slab_set(ph_slab *s, uint32_t i)
{
    uint32_t w, sh;
    ph_slab_bitpos(i, &w, &sh);
    __atomic_fetch_or(&s->desc->xbits[w], 3ull << sh, __ATOMIC_ACQ_REL);
    return &s->desc->xbits[w];
}

/* The commit of a small allocation: set the bits, persist the word (one
 * flush, one fence, no other store). */
static inline void ph_slab_mark(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t i)
{
    ph_persist_range(&sp->persist, c, ph_slab_set(s, i), 8);
}

/* Clears A of block i unless it is already clear and stores the word's
 * address in *word for the caller to persist.  Returns 0, or
 * PHEAP_EDOUBLEFREE (A clear, E set) / PHEAP_ENOTALLOC (never allocated)
 * with nothing changed. */
int ph_slab_clear(ph_slab *s, uint32_t i, uint64_t **word);

/* A and E of block i, read atomically (bit 0 = A, bit 1 = E). */
static inline unsigned ph_slab_bits(const ph_slab *s, uint32_t i)
{
    uint32_t w, sh;
    ph_slab_bitpos(i, &w, &sh);
    return (unsigned)(ph_load(&s->desc->xbits[w]) >> sh) & 3u;
}

/* Volatile part for chunk `off` (calloc'ed); the descriptor is not read. */
ph_slab *ph_slab_new(ph_space *sp, uint64_t off);

/* Sets class-derived fields of the volatile part. */
void ph_slab_set_class(ph_slab *s, unsigned cls);

/* Writes a fresh descriptor for class `cls` (bitmap zero) and flushes the
 * lines that changed; the caller fences, then commits the slab in the
 * extent log. */
void ph_slab_format(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned cls);

/* Rebuilds the available set from the durable bitmap (after open). */
void ph_slab_load(ph_slab *s);

/* Takes up to n available blocks (offsets into out[]); returns how many. */
uint32_t ph_slab_take(ph_slab *s, uint64_t *out, uint32_t n);

/* Marks block `off` available again (it is free and leaves a cache). */
void ph_slab_give(ph_slab *s, uint64_t off);

/* Allocated blocks (A bits), counted from the descriptor. */
uint32_t ph_slab_live(const ph_slab *s);

/* Checks the descriptor against its class; returns 0 or writes a message
 * to err and returns 1. */
int ph_slab_check(const ph_slab *s, unsigned cls, char *err, size_t errlen);

#endif
