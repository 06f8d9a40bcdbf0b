/*
 * morph.h -- slab morphing (NVAlloc): a slab of low occupancy becomes a
 * slab of another size class while its remaining blocks, the "old" blocks,
 * stay live where they are.  The layout and the morph word are in
 * format/layout.h (PH_FEAT_INCOMPAT_MORPH); the crash protocol in morph.c.
 *
 * Allocation and free of the new class cost nothing extra: the new class's
 * blocks are an ordinary bitmap, and the blocks the old ones overlap are
 * pinned in it (A without E) so that they are never handed out.  A free
 * first resolves its offset (ph_slab_resolve): a live old block of a
 * morphed slab is freed through ph_morph_free_old, anything else as usual.
 *
 * Concurrency.  A slab morphs under its arena's lock and every one of its
 * word locks, with xgen odd while its class fields change; only a slab
 * whose free blocks are all available (none in a thread cache, none in an
 * operation in flight) and that has no old block left may morph.  A thread
 * that resolved a block without a lock checks, once it holds the block's
 * word lock, that xgen has not moved (ph_slab_gen_ok); a reader that takes
 * no lock at all retries the resolution while xgen moves.
 */
#ifndef PH_ALLOC_MORPH_H
#define PH_ALLOC_MORPH_H

#include "alloc/slab.h"

/* Where the bits of the block at an offset lie. */
typedef struct ph_blockref {
    uint32_t gen;    /* the slab's xgen this holds for */
    uint32_t index;  /* block index in its class */
    uint32_t word;   /* bitmap word of its A bit */
    uint32_t shift;  /*   and the bit (E is the next one, for a block of the class) */
    uint32_t size;   /* block size */
    int exact;       /* the offset starts a block (of the class, or a live old one) */
    int old;         /* a live old block of a morphed slab */
} ph_blockref;

/* Word and bit of old block j's A bit. */
static inline void ph_morph_bitpos(uint32_t j, uint32_t *word, uint32_t *shift)
{
    uint32_t line = j % PH_SLAB_LINES, k = j / PH_SLAB_LINES;
    *word = line * (PH_LINE_SIZE / 8) + PH_MORPH_OLD_WORD + k / 64;
    *shift = k % 64;
}

/* Fills *r for `off` as the slab's fields are now (no retry). */
static inline void ph_slab_resolve_once(const ph_slab *s, uint64_t off, ph_blockref *r)
{
    r->old = 0;
    if (ph_unlikely(ph_load_relaxed(&s->xold_live))) {
        uint32_t rel = (uint32_t)(off - s->off), size = ph_load_relaxed(&s->old_size);
        uint32_t j = (uint32_t)(((uint64_t)rel * ph_load_relaxed(&s->old_magic)) >> 32);
        if (j * size == rel && j < ph_load_relaxed(&s->old_nblocks)) {
            ph_morph_bitpos(j, &r->word, &r->shift);
            if ((ph_load(&s->bits[r->word]) >> r->shift) & 1) {
                *r = (ph_blockref){r->gen, j, r->word, r->shift, size, 1, 1};
                return;
            }
        }
    }
    r->index = ph_slab_index(s, off, &r->exact);
    r->size = ph_load_relaxed(&s->block_size);
    r->word = r->shift = 0;
    if (r->exact)
        ph_slab_bitpos(r->index, &r->word, &r->shift);
}

/* Waits a little for a morph of s to end. */
void ph_morph_wait(const ph_slab *s);

/* Resolves `off` in slab s, retrying while a morph changes the slab. */
static inline void ph_slab_resolve(const ph_slab *s, uint64_t off, ph_blockref *r)
{
    for (;;) {
        uint32_t gen = ph_load(&s->xgen);
        if (ph_likely(!(gen & 1))) {
            r->gen = gen;
            ph_slab_resolve_once(s, off, r);
            ph_seq_read();
            if (ph_likely(ph_load_relaxed(&s->xgen) == gen))
                return;
        }
        ph_morph_wait(s);
    }
}

/* A slab's classes and counts as of one moment between morphs (what the
 * statistics and the heap map read without a lock). */
typedef struct ph_slab_view {
    unsigned cls, old_cls;   /* class now; the class it had (old_live > 0) */
    uint32_t nblocks;        /* blocks of its class */
    uint32_t live, old_live; /* allocated blocks of its class; old blocks */
    uint64_t morph;          /* its morph word */
} ph_slab_view;

static inline void ph_slab_view_of(const ph_slab *s, ph_slab_view *v)
{
    for (;;) {
        uint32_t gen = ph_load(&s->xgen);
        if (ph_likely(!(gen & 1))) {
            v->cls = ph_load_relaxed(&s->xcls);
            v->old_cls = ph_load_relaxed(&s->old_cls);
            v->nblocks = ph_load_relaxed(&s->nblocks);
            v->live = ph_slab_live(s);
            v->old_live = ph_load_relaxed(&s->xold_live);
            v->morph = ph_load_relaxed(&s->morph);
            ph_seq_read();
            if (ph_likely(ph_load_relaxed(&s->xgen) == gen))
                return;
        }
        ph_morph_wait(s);
    }
}

/* With the word of r locked: 1 when no morph came between the resolution
 * and the lock. */
static inline int ph_slab_gen_ok(const ph_slab *s, const ph_blockref *r)
{
    return ph_load_relaxed(&s->xgen) == r->gen;
}

/* Recovery: when `off` starts a block of the class morphed slab s had
 * before its last morph, live or not, fills *r as that old block and
 * returns 1.  A log written before the morph may name a block freed
 * since: its redo must find the block, and find it done. */
int ph_morph_old_ref(const ph_slab *s, uint64_t off, ph_blockref *r);

/* The class whose extent-log entry made the slab (its class but after a
 * morph). */
static inline unsigned ph_slab_base_cls(const ph_slab *s)
{
    uint64_t m = ph_load_relaxed(&s->morph);
    return m ? PH_MORPH_BASE(m) : ph_load_relaxed(&s->xcls);
}

/* 1 when a slab of class `from` may morph to class `to`. */
static inline int ph_morph_classes_ok(unsigned from, unsigned to)
{
    return from != to && ph_class_blocks(from) <= PH_MORPH_MAX_BLOCKS &&
           ph_class_blocks(to) <= PH_MORPH_MAX_BLOCKS;
}

/* Blocks of class cls that a morph of s (arena lock held, no old block)
 * would make available: those no allocated block of s overlaps. */
uint32_t ph_morph_yield(const ph_slab *s, unsigned cls);

/* Morphs slab s to class cls (the caller holds the arena's lock, s is on
 * no partial list and has no old block): durable on return, 1.  Its blocks
 * that were allocated become old blocks; the new class's blocks they do
 * not overlap become available.  0, with nothing done, when a free block
 * of s is not available (in a thread cache, or in a free not finished). */
int ph_morph(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned cls);

/* Frees old block r (resolved, r->old): its A bit cleared and fenced under
 * its word's lock.  Returns 0; PHEAP_EDOUBLEFREE when another thread
 * freed it first; 1 when a morph moved the slab since the resolution
 * (resolve again).  Then call ph_morph_unpin. */
int ph_morph_free_old(ph_space *sp, ph_pctx *c, ph_slab *s, const ph_blockref *r);

/* After old block j was freed: the count of live old blocks goes down
 * (*none_left, if not NULL, says whether it reached 0), and the new
 * class's blocks that no live old block overlaps any more are unpinned (A
 * cleared, each fenced when `out`), their indexes written to out[] (room
 * for PH_MORPH_MAX_BLOCKS; NULL at recovery).  Returns how many. */
uint32_t ph_morph_unpin(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t j, uint32_t *out,
                        int *none_left);

/* At open, after ph_slab_load: reads the morph word of s, whose extent-log
 * class is log_cls, and sets the slab's class and old class from it.  With
 * `repair` (a writable open) a morph cut short is finished, and old bits
 * or pins that a crash left unexplained are cleared, durably at the
 * caller's next fence (*repaired set when there is one to take); without
 * it the same is done in the copy only.  0, or 1 with a message (damage no
 * crash leaves). */
int ph_morph_open(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned log_cls, int repair,
                  int *repaired, char *err, size_t errlen);

/* The durable descriptor of a slab with a morph word, whose extent-log
 * class is log_cls: what any crash image may hold (ph_slab_check_desc
 * calls it).  0, or 1 with a message. */
int ph_morph_check_desc(const ph_slab *s, unsigned log_cls, char *err, size_t errlen);

/* Old bits in words 6 and 7 of the descriptor of a slab that has no old
 * block (a class of at most PH_MORPH_MAX_BLOCKS blocks): 1 when a morph
 * cut short before its commit could have left them -- each the bit of a
 * block of the slab's class that is allocated. */
int ph_morph_strays_ok(const ph_slab_desc *d);

/* The copy, strictly (no operation in flight): pins only where live old
 * blocks are, old bits only in a morphed slab, and counted right.  0, or 1
 * with a message. */
int ph_morph_check(const ph_slab *s, char *err, size_t errlen);

#endif
