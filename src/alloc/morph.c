/*
 * morph.c -- slab morphing: the crash protocol, the free of old blocks, and
 * what an open makes of a morph word (layout in format/layout.h).
 *
 * Crash protocol of a morph of slab s from class `old` to class `new`:
 *   M1  a morph word other than SETTLED or 0 becomes SETTLED (fence);
 *   M2  the old blocks' A bits are written to words 6 and 7 of each line,
 *       which no slab of a class that may morph uses (fence);
 *   M3  the morph word MORPHING(old, new) (fence): the morph has happened;
 *   M4  the class words of the descriptor and words 0..5 of each line are
 *       rewritten for class `new` -- the blocks the old ones overlap
 *       pinned, the rest free -- all derived from words 6 and 7 (fence);
 *   M5  the morph word MORPHED (fence).
 * A crash before M3 leaves the slab as it was (with old bits in words 6
 * and 7 that nothing explains: the next open clears them); after it, the
 * next open redoes M4 and M5 from the same words.
 *
 * Free of an old block: its bit cleared and fenced under its word's lock
 * (the commit, like any small free); then every new block it overlapped
 * that no other live old block overlaps is unpinned, each fenced under its
 * own word's lock.  A crash between leaves pins that no old block
 * explains: the next open unpins them.  A pin is never cleared while an
 * old block it overlaps is live, so no block is handed out over live data.
 */
#include "alloc/morph.h"

#include <stdio.h>
#include <string.h>

#include "os/os.h"

#define WORDS_PER_LINE (PH_LINE_SIZE / 8u)
#define PAIRS 0x5555555555555555ull

void ph_morph_wait(const ph_slab *s)
{
    (void)s;
    ph_os_yield();
}

static void set_old_class(ph_slab *s, unsigned cls)
{
    ph_store_relaxed(&s->old_cls, cls);
    ph_store_relaxed(&s->old_size, ph_class_size[cls]);
    ph_store_relaxed(&s->old_nblocks, ph_class_blocks(cls));
    ph_store_relaxed(&s->old_magic,
                     (uint32_t)((((uint64_t)1 << 32) + ph_class_size[cls] - 1) / ph_class_size[cls]));
}

static int is_old_word(uint32_t w)
{
    return w % WORDS_PER_LINE >= PH_MORPH_OLD_WORD;
}

/* 1 when a live old block (the copy's old bits) overlaps [a, b), offsets
 * from the slab's start. */
static int old_overlaps(const ph_slab *s, uint32_t a, uint32_t b)
{
    uint32_t w, sh;
    for (uint32_t j = a / s->old_size; j <= (b - 1) / s->old_size && j < s->old_nblocks; j++) {
        ph_morph_bitpos(j, &w, &sh);
        if ((ph_load(&s->bits[w]) >> sh) & 1)
            return 1;
    }
    return 0;
}

static uint32_t count_old(const ph_slab *s)
{
    uint32_t n = 0;
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        if (is_old_word(w))
            n += (uint32_t)__builtin_popcountll(ph_load(&s->bits[w]));
    return n;
}

/* Writes every line of the copy's bitmap to the descriptor. */
static void write_lines(ph_space *sp, ph_pctx *c, ph_slab *s)
{
    for (uint32_t l = 0; l < PH_SLAB_LINES; l++)
        ph_persist_store_nt_words(&sp->persist, c, &s->desc->xbits[l * WORDS_PER_LINE],
                                  &s->bits[l * WORDS_PER_LINE], WORDS_PER_LINE);
}

static void store_word(ph_space *sp, ph_pctx *c, ph_slab *s, uint64_t m)
{
    ph_store_relaxed(&s->morph, m); /* read without a lock by the heap map */
    ph_persist_store_nt(&sp->persist, c, &s->desc->morph, m);
}

/* M4 and M5 (see above) from the copy's words 6 and 7 and morph word m
 * (MORPHING); with `write`, to the descriptor too, fenced. */
static void apply(ph_space *sp, ph_pctx *c, ph_slab *s, uint64_t m, int write)
{
    unsigned cls = PH_MORPH_CLS(m);
    set_old_class(s, PH_MORPH_OLD(m));
    ph_slab_set_class(s, cls);
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        if (!is_old_word(w))
            ph_store(&s->bits[w], 0);
    for (uint32_t i = 0; i < s->nblocks; i++) {
        if (old_overlaps(s, i * s->block_size, (i + 1) * s->block_size)) {
            uint32_t w, sh;
            ph_slab_bitpos(i, &w, &sh);
            ph_store(&s->bits[w], s->bits[w] | 1ull << sh); /* A without E: pinned */
        }
    }
    ph_store_relaxed(&s->xold_live, count_old(s));
    uint64_t done = PH_MORPH_WORD(PH_MORPH_MORPHED, PH_MORPH_BASE(m), PH_MORPH_OLD(m), cls);
    if (!write) {
        ph_store_relaxed(&s->morph, done);
        return;
    }
    const uint64_t head[3] = {cls, s->block_size, s->nblocks};
    ph_persist_store_nt_words(&sp->persist, c, (uint64_t *)s->desc, head, 3);
    write_lines(sp, c, s);
    ph_persist_fence(&sp->persist, c);
    store_word(sp, c, s, done);
    ph_persist_fence(&sp->persist, c);
}

uint32_t ph_morph_yield(const ph_slab *s, unsigned cls)
{
    uint32_t size = ph_class_size[cls], n = ph_class_blocks(cls), got = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = i * size, b = a + size, live = 0;
        for (uint32_t j = a / s->block_size; j <= (b - 1) / s->block_size && j < s->nblocks; j++)
            live |= ph_slab_bits(s, j) == 3;
        got += !live;
    }
    return got;
}

int ph_morph(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned cls)
{
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        ph_spin_lock(&s->wlock[w]);
    /* Counted again with every word locked: a free that cleared its
     * block's A bit after the caller counted and has not cached the block
     * yet leaves it neither allocated nor available, and a morph would
     * hand it out a second time.  No morph then. */
    if (ph_slab_live(s) != s->nblocks - s->navail) {
        for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
            ph_slab_unlock(s, w);
        return 0;
    }
    ph_store(&s->xgen, s->xgen + 1); /* odd: readers without a lock wait */
    ph_seq_write();
    unsigned base = ph_slab_base_cls(s), from = s->xcls;
    if (s->morph && PH_MORPH_STATE(s->morph) != PH_MORPH_SETTLED) { /* M1 */
        store_word(sp, c, s, PH_MORPH_WORD(PH_MORPH_SETTLED, base, 0, from));
        ph_persist_fence(&sp->persist, c);
    }
    uint64_t old[PH_SLAB_WORDS] = {0}; /* M2 */
    for (uint32_t i = 0; i < s->nblocks; i++) {
        if (ph_slab_bits(s, i) == 3) {
            uint32_t w, sh;
            ph_morph_bitpos(i, &w, &sh);
            old[w] |= 1ull << sh;
        }
    }
    for (uint32_t l = 0; l < PH_SLAB_LINES; l++) {
        uint32_t w = l * WORDS_PER_LINE + PH_MORPH_OLD_WORD;
        ph_store(&s->bits[w], old[w]);
        ph_store(&s->bits[w + 1], old[w + 1]);
        ph_persist_store_nt_words(&sp->persist, c, &s->desc->xbits[w], &old[w], 2);
    }
    ph_persist_fence(&sp->persist, c);
    uint64_t m = PH_MORPH_WORD(PH_MORPH_MORPHING, base, from, cls); /* M3 */
    store_word(sp, c, s, m);
    ph_persist_fence(&sp->persist, c);
    apply(sp, c, s, m, 1); /* M4, M5 */
    ph_slab_find_avail(s);
    ph_store(&s->xgen, s->xgen + 1);
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++)
        ph_slab_unlock(s, w);
    return 1;
}

int ph_morph_old_ref(const ph_slab *s, uint64_t off, ph_blockref *r)
{
    if (PH_MORPH_STATE(s->morph) != PH_MORPH_MORPHED || !s->old_size)
        return 0;
    uint32_t rel = (uint32_t)(off - s->off), j = rel / s->old_size;
    if (rel % s->old_size || j >= s->old_nblocks)
        return 0;
    ph_morph_bitpos(j, &r->word, &r->shift);
    r->gen = s->xgen;
    r->index = j;
    r->size = s->old_size;
    r->exact = r->old = 1;
    return 1;
}

int ph_morph_free_old(ph_space *sp, ph_pctx *c, ph_slab *s, const ph_blockref *r)
{
    ph_spin_lock(&s->wlock[r->word]);
    if (!ph_slab_gen_ok(s, r)) {
        ph_slab_unlock(s, r->word);
        return 1;
    }
    uint64_t v = s->bits[r->word], bit = 1ull << r->shift;
    if (!(v & bit)) {
        ph_slab_unlock(s, r->word);
        return PHEAP_EDOUBLEFREE;
    }
    ph_store(&s->bits[r->word], v & ~bit);
    ph_persist_store_nt(&sp->persist, c, &s->desc->xbits[r->word], v & ~bit);
    ph_persist_fence(&sp->persist, c);
    ph_slab_unlock(s, r->word);
    return 0;
}

/* Unpins new block i when no live old block overlaps it; 1 if it did. */
static int unpin_one(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t i, int fence)
{
    uint32_t w, sh;
    if (old_overlaps(s, i * s->block_size, (i + 1) * s->block_size))
        return 0;
    ph_slab_bitpos(i, &w, &sh);
    ph_spin_lock(&s->wlock[w]);
    uint64_t v = s->bits[w];
    int pinned = ((v >> sh) & 3) == 1;
    if (pinned) {
        v &= ~(1ull << sh);
        ph_store(&s->bits[w], v);
        if (sp)
            ph_persist_store_nt(&sp->persist, c, &s->desc->xbits[w], v);
        if (sp && fence)
            ph_persist_fence(&sp->persist, c);
    }
    ph_slab_unlock(s, w);
    return pinned;
}

uint32_t ph_morph_unpin(ph_space *sp, ph_pctx *c, ph_slab *s, uint32_t j, uint32_t *out,
                        int *none_left)
{
    uint32_t n = 0, first = j * s->old_size / s->block_size;
    uint32_t last = ((j + 1) * s->old_size - 1) / s->block_size;
    /* First, and sequentially consistent: of two threads freeing old blocks
     * over one pin, the later of the two decrements sees the other's bit
     * cleared (two plain reads after two stores could each miss the other
     * store, and both leave the pin).  A free of the pin's start meanwhile
     * is refused whatever the count says (ph_slab_clear_locked). */
    uint32_t before = __atomic_fetch_sub(&s->xold_live, 1, __ATOMIC_SEQ_CST);
    for (uint32_t i = first; i <= last && i < s->nblocks; i++)
        if (unpin_one(sp, c, s, i, out != NULL) && out)
            out[n++] = i;
    if (none_left)
        *none_left = before == 1;
    return n;
}

/* Words 6 and 7 of a slab that has no old block: zero, or left by a morph
 * cut short before M3; cleared (in the copy, and with `repair` durably). */
static int clear_strays(ph_space *sp, ph_pctx *c, ph_slab *s, int repair)
{
    int found = 0;
    if (s->nblocks > PH_MORPH_MAX_BLOCKS)
        return 0; /* a class that uses words 6 and 7 itself, and never morphs */
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) {
        if (is_old_word(w) && s->bits[w]) {
            ph_store(&s->bits[w], 0);
            if (repair)
                ph_persist_store_nt(&sp->persist, c, &s->desc->xbits[w], 0);
            found = 1;
        }
    }
    return found;
}

int ph_morph_strays_ok(const ph_slab_desc *d)
{
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) {
        if (!is_old_word(w))
            continue;
        uint32_t line = w / WORDS_PER_LINE, k0 = (w % WORDS_PER_LINE - PH_MORPH_OLD_WORD) * 64;
        for (uint64_t v = ph_load(&d->xbits[w]); v; v &= v - 1) {
            uint32_t j = line + PH_SLAB_LINES * (k0 + (uint32_t)__builtin_ctzll(v)), pw, sh;
            if (j >= d->nblocks)
                return 0;
            ph_slab_bitpos(j, &pw, &sh);
            if (((ph_load(&d->xbits[pw]) >> sh) & 3) != 3)
                return 0;
        }
    }
    return 1;
}

/* In bitmap words v of slab s, of new_n blocks of new_size bytes with old
 * blocks of old_size bytes: 1 with a message when a live old block has a
 * block of the new class over it that is not pinned (A and E clear, or
 * both set), else 0.  A pin is set before the old block's bit can matter
 * (M4 before M5) and cleared only after the old bit is durably clear, so
 * no crash leaves one missing. */
static int unpinned_old(const ph_slab *s, const uint64_t *v, uint32_t new_size, uint32_t new_n,
                        uint32_t old_size, uint32_t old_n, char *err, size_t errlen)
{
    for (uint32_t j = 0; j < old_n; j++) {
        uint32_t w, sh;
        ph_morph_bitpos(j, &w, &sh);
        if (!((ph_load(&v[w]) >> sh) & 1))
            continue;
        uint32_t a = j * old_size, b = a + old_size;
        for (uint32_t i = a / new_size; i <= (b - 1) / new_size && i < new_n; i++) {
            ph_slab_bitpos(i, &w, &sh);
            if (((ph_load(&v[w]) >> sh) & 3) != 1) {
                snprintf(err, errlen, "slab at %llu: old block %u is live, but a block of the "
                         "slab's class over it is not pinned", (unsigned long long)s->off, j);
                return 1;
            }
        }
    }
    return 0;
}

static int bad_word(const ph_slab *s, uint64_t m, unsigned log_cls, char *err, size_t errlen)
{
    unsigned st = PH_MORPH_STATE(m), from = PH_MORPH_OLD(m), to = PH_MORPH_CLS(m);
    int ok = m >> 32 == PH_MORPH_TAG && PH_MORPH_BASE(m) == log_cls && to < PH_CLASSES &&
             (st == PH_MORPH_SETTLED ? from == 0 && ph_class_blocks(to) <= PH_MORPH_MAX_BLOCKS
              : (st == PH_MORPH_MORPHING || st == PH_MORPH_MORPHED) && from < PH_CLASSES &&
                    ph_morph_classes_ok(from, to));
    if (!ok)
        snprintf(err, errlen, "slab at %llu: morph word %#llx is invalid (extent-log class %u)",
                 (unsigned long long)s->off, (unsigned long long)m, log_cls);
    return !ok;
}

int ph_morph_open(ph_space *sp, ph_pctx *c, ph_slab *s, unsigned log_cls, int repair,
                  int *repaired, char *err, size_t errlen)
{
    uint64_t m = ph_load(&s->desc->morph);
    int found = 0;
    s->morph = m;
    if (!m) {
        ph_slab_set_class(s, log_cls);
        found = clear_strays(sp, c, s, repair);
        goto done;
    }
    if (!(sp->features & PH_FEAT_INCOMPAT_MORPH)) {
        snprintf(err, errlen, "slab at %llu: a morph word in a heap without morphing",
                 (unsigned long long)s->off);
        return 1;
    }
    if (bad_word(s, m, log_cls, err, errlen))
        return 1;
    switch (PH_MORPH_STATE(m)) {
    case PH_MORPH_SETTLED:
        ph_slab_set_class(s, PH_MORPH_CLS(m));
        found = clear_strays(sp, c, s, repair);
        break;
    case PH_MORPH_MORPHING:
        apply(sp, c, s, m, repair);
        found = 1;
        break;
    default:
        ph_slab_set_class(s, PH_MORPH_CLS(m));
        set_old_class(s, PH_MORPH_OLD(m));
        ph_store_relaxed(&s->xold_live, count_old(s));
        for (uint32_t i = 0; i < s->nblocks; i++) /* pins a crash left behind */
            if (ph_slab_bits(s, i) == 1)
                found |= unpin_one(repair ? sp : NULL, c, s, i, 0);
        break;
    }
done:
    if (found && !repair)
        s->copy_ahead = 1;
    *repaired |= found && repair;
    return 0;
}

int ph_morph_check_desc(const ph_slab *s, unsigned log_cls, char *err, size_t errlen)
{
    const ph_slab_desc *d = s->desc;
    uint64_t m = ph_load(&d->morph);
    unsigned st = PH_MORPH_STATE(m);
    if (bad_word(s, m, log_cls, err, errlen))
        return 1;
    /* The class words: the new class's; in a morph cut short, each word the
     * old class's or the new one's (M4 writes them as it may). */
    unsigned to = PH_MORPH_CLS(m), from = PH_MORPH_OLD(m);
    uint64_t cls = d->cls;
    int cls_ok = cls == to && d->block_size == ph_class_size[to] && d->nblocks == ph_class_blocks(to);
    if (st == PH_MORPH_MORPHING)
        cls_ok = (cls == to || cls == from) &&
                 (d->block_size == ph_class_size[to] || d->block_size == ph_class_size[from]) &&
                 (d->nblocks == ph_class_blocks(to) || d->nblocks == ph_class_blocks(from));
    if (!cls_ok) {
        snprintf(err, errlen, "slab at %llu: descriptor (class %llu, size %llu, %llu blocks) "
                 "does not match its morph word %#llx", (unsigned long long)s->off,
                 (unsigned long long)cls, (unsigned long long)d->block_size,
                 (unsigned long long)d->nblocks, (unsigned long long)m);
        return 1;
    }
    uint32_t old_n = st == PH_MORPH_SETTLED ? 0 : ph_class_blocks(PH_MORPH_OLD(m));
    for (uint32_t w = 0; w < PH_SLAB_WORDS; w++) {
        uint64_t v = ph_load(&d->xbits[w]);
        if (is_old_word(w)) { /* bits of old blocks only */
            uint32_t line = w / WORDS_PER_LINE, k0 = (w % WORDS_PER_LINE - PH_MORPH_OLD_WORD) * 64;
            uint32_t nk = old_n > line ? (old_n - line + 15) / 16 : 0;
            uint32_t count = nk > k0 ? PH_MIN(nk - k0, 64u) : 0;
            uint64_t used = count == 64 ? ~0ull : (1ull << count) - 1;
            if (st == PH_MORPH_SETTLED ? !ph_morph_strays_ok(d) : (v & ~used) != 0) {
                snprintf(err, errlen, "slab at %llu: old-block word %u is invalid (%#llx)",
                         (unsigned long long)s->off, w, (unsigned long long)v);
                return 1;
            }
        } else if (st != PH_MORPH_MORPHING) { /* being rewritten: any value */
            uint32_t line = w / WORDS_PER_LINE, first = 32 * (w % WORDS_PER_LINE);
            uint32_t nk = d->nblocks > line ? (uint32_t)(d->nblocks - line + 15) / 16 : 0;
            uint32_t count = nk > first ? PH_MIN(nk - first, 32u) : 0;
            uint64_t used = count == 32 ? ~0ull : (1ull << (2 * count)) - 1;
            /* A without E: pins, in a morphed slab only */
            uint64_t pins = (v & PAIRS) & ~((v >> 1) & PAIRS);
            if ((v & ~used) || (st == PH_MORPH_SETTLED && pins)) {
                snprintf(err, errlen, "slab at %llu: bitmap word %u is invalid (%#llx)",
                         (unsigned long long)s->off, w, (unsigned long long)v);
                return 1;
            }
        }
    }
    return st == PH_MORPH_MORPHED &&
           unpinned_old(s, d->xbits, (uint32_t)d->block_size, (uint32_t)d->nblocks,
                        ph_class_size[from], ph_class_blocks(from), err, errlen);
}

int ph_morph_check(const ph_slab *s, char *err, size_t errlen)
{
    unsigned st = PH_MORPH_STATE(s->morph);
    int morphed = s->morph && st == PH_MORPH_MORPHED;
    if (morphed && unpinned_old(s, s->bits, s->block_size, s->nblocks, s->old_size,
                                s->old_nblocks, err, errlen))
        return 1;
    for (uint32_t i = 0; i < s->nblocks; i++) {
        if (ph_slab_bits(s, i) != 1)
            continue;
        if (!morphed || !old_overlaps(s, i * s->block_size, (i + 1) * s->block_size)) {
            snprintf(err, errlen, "slab at %llu: block %u is pinned, but no live old block "
                     "overlaps it", (unsigned long long)s->off, i);
            return 1;
        }
    }
    if (s->nblocks > PH_MORPH_MAX_BLOCKS)
        return 0;
    uint32_t live = count_old(s);
    if ((!morphed && live) || live != ph_load(&s->xold_live)) {
        snprintf(err, errlen, "slab at %llu: %u old block(s) in the bitmap, %u counted, morph "
                 "word %#llx", (unsigned long long)s->off, live, ph_load(&s->xold_live),
                 (unsigned long long)s->morph);
        return 1;
    }
    return 0;
}
