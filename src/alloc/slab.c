/*
 * slab.c -- slab descriptors, their durable A/E bitmaps and the volatile
 * available sets.
 *
 * Crash protocol of a small allocation: A|E set in one bitmap word, whose
 * new value is stored to the descriptor (non-temporal) and fenced under the
 * word's lock.  A crash before the fence may or may not keep the bit: the
 * call had not returned, so either is allowed (see pheap_alloc).  A free
 * clears A the same way.  No other word changes, so there is nothing to
 * recover.
 *
 * Index by multiply: for rel < 2^16 and block_size <= 2^16,
 * floor(rel * ceil(2^32 / size) / 2^32) == floor(rel / size), because the
 * error term rel * (magic * size - 2^32) / (size * 2^32) stays below
 * 1 / size, and any non-multiple rel has a fractional part <= 1 - 1/size.
 */
#include "alloc/slab.h"

#include "alloc/morph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pheap.h"
#include "util/error.h"

/* Sets or clears block i's bit of held (lock held; see ph_slab_held). */
static void held_put(ph_slab *s, uint32_t i, int on)
{
    if (s->block_size < 16)
        return; /* two blocks a granule: never taken by the fast free */
    uint32_t g = i * (s->block_size / 16);
    uint64_t v = s->held[g / 64], bit = 1ull << (g % 64);
    ph_store_relaxed(&s->held[g / 64], on ? v | bit : v & ~bit);
}

int64_t ph_slab_held_mismatch(const ph_slab *s)
{
    uint32_t size = s->block_size, want = 0, set = 0;
    for (uint32_t i = 0; size >= 16 && i < s->nblocks; i++) {
        int held = !ph_slab_available(s, i);
        if (ph_slab_held(s, i * size) != held)
            return (int64_t)(i * size / 16);
        want += (uint32_t)held;
    }
    for (uint32_t w = 0; w < PH_CHUNK_SIZE / 16 / 64; w++)
        set += (uint32_t)__builtin_popcountll(ph_load_relaxed(&s->held[w]));
    if (set == want)
        return -1;
    for (uint32_t g = 0; g < PH_CHUNK_SIZE / 16; g++) /* a bit at no block's start */
        if (ph_slab_held(s, g * 16) && (size < 16 || g * 16 % size || g * 16 / size >= s->nblocks))
            return g;
    return 0; /* (cannot happen: the counts differ) */
}

ph_slab *ph_slab_new(ph_space *sp, uint64_t off)
{
    /* Aligned to 64: GC mode's map tags the pointer with the class
     * (ph_engine.gc_slabs). */
    ph_slab *s = aligned_alloc(64, PH_ALIGN_UP(sizeof(*s), 64));
    if (!s)
        return NULL;
    memset(s, 0, sizeof(*s));
    s->off = off;
    uint64_t chunk = (off - sp->data_off) / PH_CHUNK_SIZE;
    s->desc = (ph_slab_desc *)ph_space_at(sp, sp->slab_region + chunk * PH_SLAB_DESC_SIZE);
    return s;
}

void ph_slab_set_class(ph_slab *s, unsigned cls)
{
    ph_store(&s->xcls, cls);
    ph_store_relaxed(&s->block_size, ph_class_size[cls]);
    ph_store_relaxed(&s->nblocks, ph_class_blocks(cls));
    ph_store_relaxed(&s->magic,
                     (uint32_t)((((uint64_t)1 << 32) + ph_class_size[cls] - 1) / ph_class_size[cls]));
}

void ph_slab_format(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned cls)
{
    ph_slab_desc *d = s->desc;
    ph_slab_set_class(s, cls);
    ph_store_relaxed(&s->morph, 0); /* the head below clears the descriptor's */
    /* Every line goes out with non-temporal stores, and none is read: a
     * descriptor line left in the cache would make the first commit to it
     * twice as slow (a non-temporal store to a cached line evicts it). */
    const uint64_t head[PH_LINE_SIZE / 8] = {cls, s->block_size, s->nblocks};
    static const uint64_t zero[PH_LINE_SIZE / 8];
    ph_persist_store_nt_words(&sp->persist, c, (uint64_t *)d, head, PH_LINE_SIZE / 8);
    /* A reused chunk keeps E bits of its past life: clear the lines the
     * copy says are not zero -- all of them when the copy was never
     * loaded (the chunk's last life as a slab may be older than the open). */
    for (uint32_t l = 0; l < PH_SLAB_LINES; l++) {
        const uint32_t w0 = l * (PH_LINE_SIZE / 8);
        int dirty = !s->bits_known;
        for (uint32_t k = 0; k < PH_LINE_SIZE / 8; k++)
            dirty |= s->bits[w0 + k] != 0;
        if (dirty)
            ph_persist_store_nt_words(&sp->persist, c, &d->xbits[w0], zero, PH_LINE_SIZE / 8);
    }
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) /* read anywhere: pheap_walk_chunks */
        ph_store_relaxed(&s->bits[w], 0);
    s->bits_known = 1;
    for (uint32_t w = 0; w < PH_SLAB_MAX_BLOCKS / 64; w++) /* read anywhere */
        ph_store_relaxed(&s->avail[w], w < s->nblocks / 64 ? ~0ull
                                       : w == s->nblocks / 64 ? (1ull << (s->nblocks % 64)) - 1
                                                             : 0);
    s->navail = s->nblocks;
    for (uint32_t w = 0; w < PH_CHUNK_SIZE / 16 / 64; w++)
        ph_store_relaxed(&s->held[w], 0);
}

void ph_slab_store_desc(ph_space *sp, ph_pctx *c, ph_slab *s)
{
    for (uint32_t l = 0; l < PH_SLAB_LINES; l++) {
        const uint32_t w0 = l * (PH_LINE_SIZE / 8);
        int differs = 0;
        for (uint32_t k = 0; k < PH_LINE_SIZE / 8; k++)
            differs |= ph_load(&s->desc->xbits[w0 + k]) != s->bits[w0 + k];
        if (differs)
            ph_persist_store_nt_words(&sp->persist, c, &s->desc->xbits[w0], &s->bits[w0],
                                      PH_LINE_SIZE / 8);
    }
}

void ph_slab_zero_desc(ph_space *sp, ph_pctx *c, ph_slab *s)
{
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        ph_store(&s->bits[w], 0);
    ph_slab_store_desc(sp, c, s);
}

void ph_slab_load(ph_slab *s)
{
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        s->bits[w] = ph_load(&s->desc->xbits[w]);
    s->bits_known = 1;
}

void ph_slab_find_avail(ph_slab *s)
{
    /* Built aside, then stored word by word: both sets are read without
     * the lock (ph_slab_available, ph_slab_held). */
    uint64_t avail[PH_SLAB_MAX_BLOCKS / 64] = {0}, held[PH_CHUNK_SIZE / 16 / 64] = {0};
    uint32_t size = s->block_size;
    s->navail = 0;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        if (!(ph_slab_bits(s, i) & 1)) {
            avail[i / 64] |= 1ull << (i % 64);
            s->navail++;
        } else if (size >= 16) { /* as held_put */
            uint32_t g = i * (size / 16);
            held[g / 64] |= 1ull << (g % 64);
        }
    }
    for (uint32_t w = 0; w < PH_SLAB_MAX_BLOCKS / 64; w++)
        ph_store_relaxed(&s->avail[w], avail[w]);
    for (uint32_t w = 0; w < PH_CHUNK_SIZE / 16 / 64; w++)
        ph_store_relaxed(&s->held[w], held[w]);
}

uint32_t ph_slab_take(ph_slab *s, uint64_t *out, uint32_t n)
{
    uint32_t got = 0;
    for (uint32_t w = 0; got < n && w < (s->nblocks + 63) / 64; w++) {
        uint64_t v = s->avail[w];
        if (!v)
            continue;
        while (got < n && v) {
            uint32_t b = (uint32_t)__builtin_ctzll(v);
            v &= v - 1;
            held_put(s, w * 64 + b, 1);
            out[got++] = s->off + (uint64_t)(w * 64 + b) * s->block_size;
        }
        ph_store_relaxed(&s->avail[w], v); /* read without the lock: ph_slab_available */
    }
    s->navail -= got;
    return got;
}

void ph_slab_withhold(ph_slab *s, uint64_t off)
{
    uint32_t i = (uint32_t)((off - s->off) / s->block_size);
    if (ph_slab_available(s, i)) {
        ph_store_relaxed(&s->avail[i / 64], s->avail[i / 64] & ~(1ull << (i % 64)));
        held_put(s, i, 1);
        s->navail--;
    }
}

int ph_slab_free_error(int rc, uint64_t off)
{
    return rc == PHEAP_EDOUBLEFREE
               ? ph_err(rc, "double free of the block at %llu", (unsigned long long)off)
           : rc == PHEAP_EINTERIOR
               ? ph_err(rc, "offset %llu is inside a block the slab held before it changed "
                        "size class", (unsigned long long)off)
               : ph_err(rc, "offset %llu was never allocated", (unsigned long long)off);
}

void ph_slab_give(ph_slab *s, uint64_t off)
{
    uint32_t i = (uint32_t)((off - s->off) / s->block_size);
    held_put(s, i, 0); /* before: a racing fast free sees it held only while not available */
    ph_store_relaxed(&s->avail[i / 64], s->avail[i / 64] | 1ull << (i % 64));
    s->navail++;
}

/* Pairs of the class's words (old bits are no pairs) with `both` set: A
 * and E, or else A alone counts. */
static uint32_t count_pairs(const ph_slab *s, int both)
{
    uint32_t n = 0;
    int old_words = ph_load_relaxed(&s->nblocks) <= PH_MORPH_MAX_BLOCKS;
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) {
        uint64_t v = ph_load(&s->bits[w]);
        if (!(old_words && w % 8 >= PH_MORPH_OLD_WORD))
            n += (uint32_t)__builtin_popcountll((both ? v & (v >> 1) : v) & 0x5555555555555555ull);
    }
    return n;
}

uint32_t ph_slab_live(const ph_slab *s)
{
    return count_pairs(s, 1);
}

uint32_t ph_slab_taken(const ph_slab *s)
{
    return count_pairs(s, 0);
}

int ph_slab_check_desc(const ph_slab *s, unsigned cls, char *err, size_t errlen)
{
    const ph_slab_desc *d = s->desc;
    if (ph_load(&d->morph))
        return ph_morph_check_desc(s, cls, err, errlen);
    if (cls >= PH_CLASSES || d->cls != cls || d->block_size != ph_class_size[cls] ||
        d->nblocks != ph_class_blocks(cls)) {
        snprintf(err, errlen, "slab at %llu: descriptor (class %llu, size %llu, %llu blocks) "
                 "does not match class %u", (unsigned long long)s->off, (unsigned long long)d->cls,
                 (unsigned long long)d->block_size, (unsigned long long)d->nblocks, cls);
        return 1;
    }
    /* Every bit pair beyond nblocks is zero and A implies E.  Word w holds
     * line l = w / 8, positions k in [32 (w % 8), 32 (w % 8) + 32), blocks
     * l + 16 k: those below nblocks are the word's first `count` pairs. */
    uint64_t used[PH_SLAB_WORDS];
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) {
        uint64_t line = w / 8, first = 32 * (w % 8);
        uint64_t nk = d->nblocks > line ? (d->nblocks - line + 15) / 16 : 0;
        uint64_t count = nk > first ? PH_MIN(nk - first, 32u) : 0;
        used[w] = count == 32 ? ~0ull : (1ull << (2 * count)) - 1;
    }
    int strays = d->nblocks <= PH_MORPH_MAX_BLOCKS; /* words 6 and 7: see morph.c */
    if (strays && !ph_morph_strays_ok(d)) {
        snprintf(err, errlen, "slab at %llu: old-block bits in its bitmap that no morph explains",
                 (unsigned long long)s->off);
        return 1;
    }
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) {
        if (strays && w % 8 >= PH_MORPH_OLD_WORD)
            continue; /* old bits of a morph cut short (cleared at open) */
        uint64_t v = ph_load(&d->xbits[w]);
        if ((v & ~used[w]) || ((v & 0x5555555555555555ull) & ~((v >> 1) & 0x5555555555555555ull))) {
            snprintf(err, errlen, "slab at %llu: bitmap word %u is invalid (%#llx)",
                     (unsigned long long)s->off, w, (unsigned long long)v);
            return 1;
        }
    }
    return 0;
}

int ph_slab_check(const ph_slab *s, unsigned cls, char *err, size_t errlen)
{
    if (ph_slab_check_desc(s, cls, err, errlen) || ph_morph_check(s, err, errlen))
        return 1;
    for (uint32_t w = 0; !s->copy_ahead && w < PH_SLAB_WORDS; w++) {
        uint64_t v = ph_load(&s->desc->xbits[w]);
        if (v != ph_load(&s->bits[w])) {
            snprintf(err, errlen, "slab at %llu: bitmap word %u is %#llx, its copy %#llx",
                     (unsigned long long)s->off, w, (unsigned long long)v,
                     (unsigned long long)ph_load(&s->bits[w]));
            return 1;
        }
    }
    return 0;
}

int ph_slab_desc_any_allocated(const ph_slab_desc *d)
{
    uint64_t a = 0;
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        a |= ph_load(&d->xbits[w]);
    return (a & 0x5555555555555555ull) != 0;
}

uint32_t ph_slab_desc_allocated(const ph_slab_desc *d)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        n += (uint32_t)__builtin_popcountll(ph_load(&d->xbits[w]) & 0x5555555555555555ull);
    return n;
}
