/*
 * names_dir.c -- the named-object directory's structure: the hash, the
 * directory of segments, searching and placing entries in a segment, and
 * rebuilding a segment that fills up (grown, compacted, or split in two),
 * crash-safe at every step.  Format and crash protocols: format/layout.h.
 *
 * A rebuild copies one segment (at most PH_NAMES_HOME_MAX lines), so the
 * pause it adds to one create is bounded whatever the number of names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "heap/names.h"
#include "heap/share.h"
#include "util/crc32c.h"
#include "util/error.h"

#define OFF_MASK 0x0000fffffffffff8ull /* a HEAD's block offset */
#define CONT_HEAD(x) ((uint32_t)((x) >> 3 & 0x1fff))

/* ---- hashing ---------------------------------------------------------------------- */

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

/* Part of the format: the directory is laid out by it. */
void ph_names_plock(ph_names *n)
{
    if (ph_plock_lock(n->plock, n->powner) != PH_PLOCK_TAKEN)
        return;
    /* its holder died: whatever it left half done, put right before use */
    ph_names_seq_begin(n);
    n->repair(n->heap);
    ph_names_seq_end(n);
}

void ph_names_share(pheap *h, uint64_t *seq, uint64_t *lock, ph_procs_hold *holds,
                    const ph_plock_owner *o,
                    void (*repair)(pheap *h))
{
    ph_names *n = h->names;
    if (!n)
        return;
    n->seqp = seq;
    n->powner = o;
    n->repair = repair;
    n->pholds = holds;
    n->plock = lock;
}

/* The n bytes at p (n <= 8) as a little-endian word: the hash's value is
 * on media, so it must not depend on the host's byte order. */
static inline uint64_t le_bytes(const unsigned char *p, size_t n)
{
    uint64_t w = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n == 8) {
        memcpy(&w, p, 8);
        return w;
    }
    unsigned shift = 0; /* 4, 2 and 1 bytes: never a byte past the name */
    if (n & 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        w = v, p += 4, shift = 32;
    }
    if (n & 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        w |= (uint64_t)v << shift, p += 2, shift += 16;
    }
    if (n & 1)
        w |= (uint64_t)*p << shift;
#else
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
#endif
    return w;
}

uint64_t ph_names_hash(uint64_t seed, const char *name, size_t len)
{
    const unsigned char *p = (const unsigned char *)name;
    uint64_t h = mix(seed ^ (len * 0x9e3779b97f4a7c15ull));
    for (; len >= 8; p += 8, len -= 8)
        h = mix(h ^ le_bytes(p, 8)) + 0x9e3779b97f4a7c15ull;
    return mix(h ^ le_bytes(p, len) ^ 0xa0761d6478bd642full);
}

/* ---- the directory ------------------------------------------------------------------ */

unsigned ph_names_depth(const ph_names *n)
{
    return (unsigned)(ph_load(&n->hdr->xdir) >> 1);
}

uint64_t *ph_names_dir(const ph_names *n)
{
    return n->dirs[ph_load(&n->hdr->xdir) & 1];
}

static uint64_t dir_index(uint64_t hash, unsigned depth)
{
    return depth ? hash >> (64 - depth) : 0;
}

static uint64_t entry_of(pheap *h, uint64_t hash)
{
    ph_names *n = h->names;
    return ph_load(&ph_names_dir(n)[dir_index(hash, ph_names_depth(n))]);
}

ph_names_seg *ph_names_seg_of(pheap *h, uint64_t hash, uint64_t *seg_off)
{
    uint64_t e = entry_of(h, hash);
    if (!e)
        return NULL;
    *seg_off = PH_NAMES_ENTRY_OFF(e);
    return ph_space_at(&h->sp, *seg_off);
}

static uint32_t home_of(uint64_t hash, unsigned depth, unsigned bits)
{
    return (uint32_t)((depth ? hash << depth : hash) >> (64 - bits));
}

uint32_t ph_names_home(const ph_names_seg *s, uint64_t hash)
{
    return home_of(hash, (unsigned)s->depth, (unsigned)s->home_bits);
}

static uint64_t seg_bytes(unsigned home_bits)
{
    return sizeof(ph_names_seg) + ((1ull << home_bits) + PH_NAMES_SPILL) * PH_LINE_SIZE;
}

/* The whole pages of a segment's block: what ph_space_guard protects. */
static uint64_t seg_span(unsigned home_bits)
{
    return PH_ALIGN_UP(seg_bytes(home_bits), PH_PAGE_SIZE);
}

static int guard_segment(void *arg, ph_names_seg *s, uint64_t off)
{
    ph_space_guard(arg, off, seg_span((unsigned)s->home_bits));
    return 0;
}

void ph_names_guard(pheap *h)
{
    if (h->names)
        (void)ph_names_each_segment(h, guard_segment, &h->sp);
}

int ph_names_each_segment(pheap *h, ph_names_seg_fn fn, void *arg)
{
    ph_names *n = h->names;
    unsigned d = ph_names_depth(n);
    const uint64_t *dir = ph_names_dir(n);
    uint64_t prev = 0;
    for (uint64_t i = 0; i < (1ull << d); i++) {
        uint64_t e = ph_load(&dir[i]), off = PH_NAMES_ENTRY_OFF(e);
        if (!e || e == prev)
            continue;
        prev = e;
        int rc = fn(arg, ph_space_at(&h->sp, off), off);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- lines ------------------------------------------------------------------------- */

static int cont_owned(ph_names_seg *s, uint32_t i)
{
    ph_name_line *L = ph_names_lines(s);
    uint32_t hd = CONT_HEAD(ph_load(&L[i].xref));
    return hd < i && ph_name_kind(ph_load(&L[hd].xref)) == PH_NAME_HEAD &&
           hd + ph_name_nlines(&L[hd]) > i;
}

/* Line i of a segment of `total` lines is the head of an entry.  A head
 * whose length and line count disagree, or whose lines run past the
 * segment, is damage: never followed (pheap_check reports it). */
static inline int head_at(const ph_name_line *L, uint32_t i, uint32_t total)
{
    const ph_name_line *l = &L[i];
    unsigned len = ph_name_len(l);
    return ph_name_kind(ph_load(&l->xref)) == PH_NAME_HEAD && len >= 1 && len <= PH_NAME_MAX &&
           ph_name_nlines(l) == ph_names_entry_lines(len) && i + ph_name_nlines(l) <= total;
}

int ph_names_is_head(ph_names_seg *s, uint32_t i)
{
    return head_at(ph_names_lines(s), i, ph_names_total(s));
}

static int line_free(ph_names_seg *s, uint32_t i)
{
    uint64_t r = ph_load(&ph_names_lines(s)[i].xref);
    switch (ph_name_kind(r)) {
    case PH_NAME_HEAD: return 0;
    case PH_NAME_CONT: return !cont_owned(s, i);
    default: return 1;
    }
}

/* The name bytes of the entry whose head is line i, in order: the head's
 * 32, then 56 per line after it. */
static const uint8_t *name_part(ph_names_seg *s, uint32_t i, size_t at, size_t *n)
{
    ph_name_line *L = ph_names_lines(s);
    if (at < PH_NAME_HEAD_BYTES) {
        *n = PH_NAME_HEAD_BYTES - at;
        return L[i].name + at;
    }
    size_t j = (at - PH_NAME_HEAD_BYTES) / PH_NAME_CONT_BYTES;
    size_t k = (at - PH_NAME_HEAD_BYTES) % PH_NAME_CONT_BYTES;
    *n = PH_NAME_CONT_BYTES - k;
    return (const uint8_t *)&L[i + 1 + j] + 8 + k;
}

void ph_names_copy_name(ph_names_seg *s, uint32_t i, char *buf)
{
    size_t len = ph_name_len(&ph_names_lines(s)[i]), at = 0, n;
    len = PH_MIN(len, (size_t)PH_NAME_MAX);
    while (at < len) {
        const uint8_t *p = name_part(s, i, at, &n);
        n = PH_MIN(n, len - at);
        memcpy(buf + at, p, n);
        at += n;
    }
    buf[len] = '\0';
}

static uint32_t entry_crc(uint64_t hash, uint64_t size, uint64_t len_lines, const char *name,
                          size_t len)
{
    uint64_t w[3] = {hash, size, len_lines};
    return ph_crc32c(ph_crc32c(0, w, sizeof(w)), name, len);
}

uint32_t ph_names_entry_crc(ph_names_seg *s, uint32_t i)
{
    char name[PH_NAME_MAX + 1];
    ph_name_line *l = &ph_names_lines(s)[i];
    ph_names_copy_name(s, i, name);
    return entry_crc(l->hash, l->size, l->meta & 0xffffffu, name, strlen(name));
}

/* The head at line i (of a segment of `total` lines) names `name`. */
static int same_name(ph_names_seg *s, uint32_t total, uint32_t i, const char *name, size_t len)
{
    ph_name_line *l = &ph_names_lines(s)[i];
    if (ph_name_len(l) != len || i + ph_names_entry_lines(len) > total)
        return 0;
    size_t at = 0, n;
    while (at < len) {
        const uint8_t *p = name_part(s, i, at, &n);
        n = PH_MIN(n, len - at);
        if (memcmp(p, name + at, n) != 0)
            return 0;
        at += n;
    }
    return 1;
}

int ph_names_find(pheap *h, uint64_t hash, const char *name, size_t len, ph_name_ref *ref)
{
    uint64_t e = entry_of(h, hash), so = PH_NAMES_ENTRY_OFF(e);
    if (!e)
        return 0;
    ph_names_seg *s = ph_space_at(&h->sp, so);
    ph_name_line *L = ph_names_lines(s);
    /* The segment's header is never read (its size is the entry's): the
     * lookup's one miss is the name's home line. */
    unsigned bits = PH_NAMES_ENTRY_BITS(e);
    uint32_t home = home_of(hash, PH_NAMES_ENTRY_DEPTH(e), bits);
    if (len > PH_NAME_HEAD_BYTES) /* the name goes on in the next line: both misses at once */
        __builtin_prefetch(&L[home + 1]);
    for (uint32_t i = home, total = (1u << bits) + PH_NAMES_SPILL; i < total; i++) {
        uint64_t r = ph_load(&L[i].xref);
        if (r == 0)
            return 0; /* EMPTY: the end of the name's cluster */
        if (L[i].hash == hash && head_at(L, i, total) && same_name(s, total, i, name, len)) {
            *ref = (ph_name_ref){s, so, i, &L[i]};
            return 1;
        }
    }
    return 0;
}

/* 1 when line i of s is free and no entry of `taken` holds it. */
static int line_open(ph_names_seg *s, uint32_t i, const ph_names_taken *taken, size_t ntaken)
{
    for (size_t t = 0; t < ntaken; t++)
        if (taken[t].seg == s && i >= taken[t].pos && i < taken[t].pos + taken[t].lines)
            return 0;
    return line_free(s, i);
}

/* The first line at or after `home` where k free lines start, none of
 * them in `taken`: the entry's place (EMPTY lines skipped before it become
 * FREE fillers). */
static int place(ph_names_seg *s, uint32_t home, unsigned k, const ph_names_taken *taken,
                 size_t ntaken, uint32_t *pos)
{
    uint32_t total = ph_names_total(s);
    for (uint32_t i = home; i + k <= total; i++) {
        unsigned j = 0;
        while (j < k && line_open(s, i + j, taken, ntaken))
            j++;
        if (j == k) {
            *pos = i;
            return 1;
        }
        i += j; /* line i + j is taken: go on after it */
    }
    return 0;
}

/* The count hints of a segment, recounted when another open wrote them. */
void ph_names_count(ph_names *n, ph_names_seg *s)
{
    if (s->hint_stamp == n->stamp)
        return;
    uint64_t used = 0, live = 0;
    ph_name_line *L = ph_names_lines(s);
    for (uint32_t i = 0, total = ph_names_total(s); i < total; i++) {
        uint64_t r = ph_load(&L[i].xref);
        used += r != 0;
        if (ph_names_is_head(s, i))
            live += ph_name_nlines(&L[i]);
    }
    s->hint_used = used;
    s->hint_live = live;
    s->hint_stamp = n->stamp;
}

/* Stores the next version of `kind_payload` in a line's xref (flushed
 * with its line by the caller). */
static void set_ref(pheap *h, ph_pctx *c, ph_name_line *l, uint64_t kind_payload)
{
    ph_persist_write(&h->sp.persist, c, &l->xref,
                     ph_name_next_version(ph_load(&l->xref)) | kind_payload);
}

static void write_words(pheap *h, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        ph_persist_write(&h->sp.persist, c, &dst[i], src[i]);
}

unsigned ph_names_fill(pheap *h, ph_pctx *c, ph_names_seg *s, uint32_t home, uint32_t pos)
{
    ph_name_line *L = ph_names_lines(s);
    unsigned newly = 0;
    for (uint32_t i = home; i < pos; i++)
        if (ph_load(&L[i].xref) == 0) {
            set_ref(h, c, &L[i], PH_NAME_FREE);
            ph_persist_flush(&h->sp.persist, c, &L[i].xref, 8);
            newly++;
        }
    if (newly)
        ph_persist_fence(&h->sp.persist, c);
    return newly;
}

unsigned ph_names_empties(ph_names_seg *s, uint32_t pos, unsigned k)
{
    unsigned n = 0;
    for (unsigned j = 0; j < k; j++)
        n += ph_load(&ph_names_lines(s)[pos + j].xref) == 0;
    return n;
}

void ph_names_image(ph_names_seg *s, uint32_t pos, uint64_t hash, const char *name, size_t len,
                    uint64_t size, uint64_t block, ph_name_line *img)
{
    ph_name_line *L = ph_names_lines(s);
    unsigned k = ph_names_entry_lines(len);
    memset(img, 0, k * sizeof(*img));
    size_t at = PH_MIN(len, (size_t)PH_NAME_HEAD_BYTES);
    for (unsigned j = 1; j < k; j++) {
        size_t n = PH_MIN(len - at, (size_t)PH_NAME_CONT_BYTES);
        memcpy((uint8_t *)&img[j] + 8, name + at, n);
        at += n;
        img[j].xref = ph_name_next_version(ph_load(&L[pos + j].xref)) | (uint64_t)pos << 3 |
                      PH_NAME_CONT;
    }
    uint64_t lk = len | (uint64_t)k << 16;
    img[0].xref = ph_name_next_version(ph_load(&L[pos].xref)) | block | PH_NAME_HEAD;
    img[0].hash = hash;
    img[0].size = size;
    img[0].meta = lk | (uint64_t)entry_crc(hash, size, lk, name, len) << 32;
    memcpy(img[0].name, name, PH_MIN(len, (size_t)PH_NAME_HEAD_BYTES));
}

/* Writes everything of an entry at `pos` but the head's xref: fillers,
 * the lines after the head, the head's words; flushes them.  Returns the
 * lines that were EMPTY. */
static unsigned write_body(pheap *h, ph_pctx *c, ph_names_seg *s, uint32_t pos, uint64_t hash,
                           const char *name, size_t len, uint64_t size)
{
    ph_persist *p = &h->sp.persist;
    ph_name_line *L = ph_names_lines(s), img[5];
    unsigned k = ph_names_entry_lines(len);
    unsigned newly = ph_names_fill(h, c, s, ph_names_home(s, hash), pos) +
                     ph_names_empties(s, pos, k);
    ph_names_image(s, pos, hash, name, len, size, 0, img);
    for (unsigned j = 1; j < k; j++) {
        ph_name_line *l = &L[pos + j];
        write_words(h, c, (uint64_t *)l + 1, (const uint64_t *)&img[j] + 1, 7);
        ph_persist_write(p, c, &l->xref, img[j].xref);
        ph_persist_flush(p, c, l, sizeof(*l));
    }
    write_words(h, c, &L[pos].hash, &img[0].hash, 7);
    ph_persist_flush(p, c, &L[pos], sizeof(L[pos]));
    return newly;
}

/* ---- rebuilding a segment ----------------------------------------------------------- */

static unsigned bits_for(uint64_t lines)
{
    unsigned b = PH_NAMES_HOME_MIN_BITS;
    while (b < PH_NAMES_HOME_MAX_BITS && (1ull << b) < 2 * lines)
        b++;
    return b;
}

/* Copies the live entries of `from` whose side (the hash bit after the
 * new segments' common prefix) is `side` (-1: all) into the zeroed
 * segment `to`: 0, or PHEAP_ENOSPC when one finds no place. */
static int copy_entries(ph_names_seg *from, ph_names_seg *to, int side)
{
    ph_name_line *F = ph_names_lines(from), *T = ph_names_lines(to);
    uint64_t used = 0, live = 0;
    for (uint32_t i = 0, total = ph_names_total(from); i < total; i++) {
        uint64_t r = ph_load(&F[i].xref);
        if (!ph_names_is_head(from, i))
            continue; /* a damaged head is not carried over */
        uint64_t hash = F[i].hash;
        unsigned k = ph_name_nlines(&F[i]);
        if (side >= 0 && (int)((hash << from->depth) >> 63) != side)
            continue;
        uint32_t home = ph_names_home(to, hash), pos;
        if (!place(to, home, k, NULL, 0, &pos))
            return PHEAP_ENOSPC;
        for (uint32_t j = home; j < pos; j++)
            if (T[j].xref == 0) {
                T[j].xref = 1ull << 48 | PH_NAME_FREE;
                used++;
            }
        for (unsigned j = 0; j < k; j++) {
            memcpy(&T[pos + j], &F[i + j], sizeof(T[0]));
            T[pos + j].xref = 1ull << 48 | (j ? (uint64_t)pos << 3 | PH_NAME_CONT
                                              : (r & OFF_MASK) | PH_NAME_HEAD);
        }
        used += k;
        live += k;
    }
    to->hint_used = used;
    to->hint_live = live;
    return 0; /* the caller flushes the whole segment */
}

/* The smallest home bits, from `bits` up, with which a segment of depth
 * `depth` takes the live entries of s on `side` (-1: all) -- placed in
 * the order copy_entries places them -- at most three quarters full
 * with k more lines; PH_NAMES_HOME_MAX_BITS + 1 when none does. */
static unsigned fitting_bits(ph_names_seg *s, int side, unsigned depth, unsigned bits, unsigned k)
{
    static __thread uint8_t taken[(1u << PH_NAMES_HOME_MAX_BITS) + PH_NAMES_SPILL];
    for (; s && bits <= PH_NAMES_HOME_MAX_BITS; bits++) {
        uint32_t total = (1u << bits) + PH_NAMES_SPILL, lines = k;
        ph_names_seg probe = {.depth = depth, .home_bits = bits};
        ph_name_line *L = ph_names_lines(s);
        int fits = 1;
        memset(taken, 0, total);
        for (uint32_t i = 0, n = ph_names_total(s); i < n && fits; i++) {
            if (!ph_names_is_head(s, i) ||
                (side >= 0 && (int)((L[i].hash << s->depth) >> 63) != side))
                continue;
            unsigned m = ph_name_nlines(&L[i]), j = 0;
            uint32_t pos = ph_names_home(&probe, L[i].hash);
            while (pos + m <= total && j < m)
                j = taken[pos + j] ? (pos += j + 1, 0) : j + 1;
            fits = j == m;
            if (fits)
                memset(&taken[pos], 1, m);
            lines += m;
        }
        if (fits && 4 * lines <= 3 * (1ull << bits))
            return bits;
    }
    return s ? bits : PH_MAX(bits, PH_NAMES_HOME_MIN_BITS);
}

/* Doubles the directory: the other array gets each entry twice, then
 * xdir switches to it (one durable store). */
static void double_dir(pheap *h, ph_pctx *c)
{
    ph_names *n = h->names;
    ph_persist *p = &h->sp.persist;
    uint64_t x = ph_load(&n->hdr->xdir);
    unsigned d = (unsigned)(x >> 1), cur = (unsigned)(x & 1);
    uint64_t *a = n->dirs[cur], *b = n->dirs[!cur];
    for (uint64_t i = 0; i < (2ull << d); i++)
        ph_persist_write(p, c, &b[i], ph_load(&a[i >> 1]));
    ph_persist_range(p, c, b, (2ull << d) * 8);
    ph_persist_store64(p, c, &n->hdr->xdir, (uint64_t)(d + 1) << 1 | !cur);
}

/* Points the directory at the committed rebuild's new segments, then
 * clears xnew[0], then xnew[1] (idempotent: recovery repeats it). */
static void apply(pheap *h, ph_pctx *c)
{
    ph_names *n = h->names;
    ph_names_header *hd = n->hdr;
    ph_persist *p = &h->sp.persist;
    uint64_t n0 = ph_load(&hd->xnew[0]), n1 = ph_load(&hd->xnew[1]);
    if (!n0) { /* applied, and xnew[0] cleared, before the crash */
        if (n1)
            ph_persist_store64(p, c, &hd->xnew[1], 0);
        return;
    }
    const ph_names_seg *s0 = ph_space_at(&h->sp, n0), *s1 = n1 ? ph_space_at(&h->sp, n1) : s0;
    uint64_t e0 = PH_NAMES_ENTRY(n0, s0->depth, s0->home_bits);
    uint64_t e1 = PH_NAMES_ENTRY(n1, s1->depth, s1->home_bits);
    unsigned nd = (unsigned)s0->depth, split = n1 != 0, od = nd - split;
    uint64_t op = s0->prefix >> split;
    if (nd > ph_names_depth(n))
        double_dir(h, c);
    unsigned d = ph_names_depth(n);
    uint64_t *dir = ph_names_dir(n);
    uint64_t lo = op << (d - od), hi = (op + 1) << (d - od);
    for (uint64_t i = lo; i < hi; i++)
        ph_persist_write(p, c, &dir[i], split && (i >> (d - nd) & 1) ? e1 : e0);
    ph_persist_range(p, c, &dir[lo], (hi - lo) * 8);
    /* xnew[0] first: with xold set, xnew[0] == 0 means "applied" (it is
     * never 0 while xnew[1] is set before the commit). */
    ph_persist_store64(p, c, &hd->xnew[0], 0);
    if (n1)
        ph_persist_store64(p, c, &hd->xnew[1], 0);
}

/* Retires the entries of the lanes that bound names since the last call,
 * durably at the caller's next fence: the deferred ones (whose stores are
 * made durable first, with a fence of their own when there are any) and
 * the lazily retired ones (their commit words flushed). */
static void flush_lazy(pheap *h, ph_pctx *c)
{
    ph_names *n = h->names;
    ph_lanes_settle(&h->engine->lanes, c, n->lazy, PH_ARRAY_LEN(n->lazy));
    for (unsigned w = 0; w < PH_ARRAY_LEN(n->lazy); w++) {
        for (uint64_t m = n->lazy[w]; m; m &= m - 1)
            ph_lane_flush_states(&h->engine->lanes, c, w * 64 + (unsigned)__builtin_ctzll(m));
        n->lazy[w] = 0;
    }
    n->changes = 0;
}

/* Every PH_NAMES_RETIRE_EVERY changes of names, the lazily retired BIND
 * entries are retired durably: a stale entry must never outlive 2^16
 * stores to its word, after which the word's version could come back. */
#define PH_NAMES_RETIRE_EVERY 4096u
_Static_assert(PH_NAMES_RETIRE_EVERY < (1u << 16), "retired before a version wraps");

void ph_names_changed(pheap *h, ph_pctx *c)
{
    ph_names *n = h->names;
    if (!h->gc && ++n->changes >= PH_NAMES_RETIRE_EVERY) {
        flush_lazy(h, c);
        ph_persist_fence(&h->sp.persist, c);
    }
}

/* Frees the replaced segment, after the lanes that bound names since the
 * last such free retired their entries durably: a stale BIND entry must
 * never be replayed over a freed segment's memory. */
static int finish(pheap *h, ph_thread *t)
{
    ph_names *n = h->names;
    ph_pctx *c = &t->pctx;
    flush_lazy(h, c); /* durable at the free's first fence */
    uint64_t old = ph_load(&n->hdr->xold);
    if (old == 1) {
        ph_persist_store64(&h->sp.persist, c, &n->hdr->xold, 0);
        return 0;
    }
    return old ? ph_engine_free_from(h->engine, &t->tc, c, &n->hdr->xold) : 0;
}

/* Replaces segment s (NULL: there is none yet) with one or two new ones
 * that leave room for an entry of k more lines, with at least 2^min_bits
 * home lines (more than s has when its load was low but the entry found
 * no place: a cluster ran into the segment's end). */
static int rebuild(pheap *h, ph_thread *t, ph_names_seg *s, uint64_t so, unsigned k,
                   unsigned min_bits)
{
    ph_names *n = h->names;
    ph_names_header *hd = n->hdr;
    ph_pctx *c = &t->pctx;
    unsigned depth = s ? (unsigned)s->depth : 0;
    uint64_t prefix = s ? s->prefix : 0, side[2] = {0, 0}, all = 0;
    if (s) {
        ph_name_line *L = ph_names_lines(s);
        for (uint32_t i = 0, total = ph_names_total(s); i < total; i++)
            if (ph_names_is_head(s, i)) {
                unsigned m = ph_name_nlines(&L[i]);
                all += m;
                side[(L[i].hash << depth) >> 63] += m;
            }
    }
    /* One segment when the entries fit in at most PH_NAMES_HOME_MAX home
     * lines at half load, else two; each sized for where its entries
     * really go (after removals in hash order they may crowd one end). */
    unsigned nseg = 1, bits[2];
    const uint64_t max_lines = 1ull << PH_NAMES_HOME_MAX_BITS;
    bits[0] = 2 * (all + k) <= max_lines ? PH_MAX(bits_for(all + k), min_bits)
                                         : PH_NAMES_HOME_MAX_BITS + 1;
    bits[0] = fitting_bits(s, -1, depth, bits[0], k);
    if (bits[0] > PH_NAMES_HOME_MAX_BITS && depth < PH_NAMES_DEPTH_MAX) {
        nseg = 2;
        bits[0] = fitting_bits(s, 0, depth + 1, bits_for(side[0] + k), k);
        bits[1] = fitting_bits(s, 1, depth + 1, bits_for(side[1] + k), k);
    }
    if (bits[0] > PH_NAMES_HOME_MAX_BITS || (nseg == 2 && bits[1] > PH_NAMES_HOME_MAX_BITS))
        return ph_err(PHEAP_ENOSPC, "the name directory is full: %llu entry lines share one "
                      "hash prefix of the deepest directory", (unsigned long long)all);
    int rc = 0;
    unsigned made = 0;
    for (; made < nseg && !rc; made++) {
        rc = ph_engine_alloc_to(h->engine, &t->tc, c, seg_bytes(bits[made]), &hd->xnew[made],
                                NULL);
        if (!rc) {
            ph_persist_flush(&h->sp.persist, c, &hd->xnew[made], 8); /* GC mode stores only */
            ph_space_guard(&h->sp, ph_load(&hd->xnew[made]), seg_span(bits[made]));
        }
    }
    for (unsigned i = 0; i < nseg && !rc; i++) {
        ph_names_seg *ns = ph_space_at(&h->sp, ph_load(&hd->xnew[i]));
        memset(ns, 0, seg_bytes(bits[i]));
        *ns = (ph_names_seg){PH_NAMES_SEG_MAGIC, depth + (nseg - 1),
                             nseg == 2 ? prefix << 1 | i : prefix, bits[i], n->stamp, 0, 0, 0};
        if (s && (rc = copy_entries(s, ns, nseg == 2 ? (int)i : -1)) != 0)
            rc = ph_err(rc, "no room to rebuild a name segment (%llu entry lines)",
                        (unsigned long long)all);
        else
            ph_persist_flush(&h->sp.persist, c, ns, seg_bytes(bits[i]));
    }
    if (rc) { /* nothing committed: the new segments go back */
        for (unsigned i = 0; i < 2; i++)
            if (ph_load(&hd->xnew[i]))
                (void)ph_engine_free_from(h->engine, &t->tc, c, &hd->xnew[i]);
        return rc;
    }
    ph_persist_fence(&h->sp.persist, c);
    ph_persist_store64(&h->sp.persist, c, &hd->xold, s ? so : 1); /* the commit */
    apply(h, c);
    return finish(h, t);
}

/* Lines of the entries of `taken` that lie in s. */
static uint64_t taken_lines(const ph_names_seg *s, const ph_names_taken *taken, size_t ntaken)
{
    uint64_t n = 0;
    for (size_t i = 0; i < ntaken; i++)
        n += taken[i].seg == s ? taken[i].lines : 0;
    return n;
}

int ph_names_room(pheap *h, ph_thread *t, uint64_t hash, unsigned k, const ph_names_taken *taken,
                  size_t ntaken, ph_name_ref *at, int *rebuilt)
{
    ph_names *n = h->names;
    unsigned rebuilds = 0, min_bits = PH_NAMES_HOME_MIN_BITS;
    for (;;) {
        uint64_t so = 0, more = k;
        uint32_t pos;
        ph_names_seg *s = ph_names_seg_of(h, hash, &so);
        if (s) {
            ph_names_count(n, s);
            more += taken_lines(s, taken, ntaken);
            int loaded = 4 * (s->hint_used + more) > 3 * (1ull << s->home_bits);
            if (!loaded && place(s, ph_names_home(s, hash), k, taken, ntaken, &pos)) {
                *at = (ph_name_ref){s, so, pos, &ph_names_lines(s)[pos]};
                return 0;
            }
            if (!loaded) /* room, but not where this name goes: more lines */
                min_bits = (unsigned)s->home_bits + 1;
        }
        if (rebuilds++ == 8)
            return ph_err(PHEAP_ENOSPC, "no room for the name in its directory segment");
        int rc = rebuild(h, t, s, so, (unsigned)PH_MIN(more, (uint64_t)1 << 16), min_bits);
        if (rc)
            return rc;
        *rebuilt = 1;
    }
}

int ph_names_insert(pheap *h, ph_thread *t, uint64_t hash, const char *name, size_t len,
                    size_t size, const ph_block_init *init, uint64_t *block)
{
    ph_names *n = h->names;
    unsigned k = ph_names_entry_lines(len);
    ph_name_ref at = {0};
    int rebuilt = 0, rc = ph_names_room(h, t, hash, k, NULL, 0, &at, &rebuilt);
    if (rc)
        return rc;
    ph_names_seg *s = at.seg;
    uint32_t pos = at.line;
    s->hint_used += write_body(h, &t->pctx, s, pos, hash, name, len, size);
    ph_name_line *hd = &ph_names_lines(s)[pos];
    rc = ph_engine_alloc_bind(h->engine, &t->tc, &t->pctx, size, init, &hd->xref,
                              ph_name_next_version(ph_load(&hd->xref)) | PH_NAME_HEAD, k, block);
    if (rc)
        return rc;
    s->hint_live += k;
    int lane = t->tc.lane.index;
    if (n->plock && lane >= 0) {
        /* Shared: retired now.  Another process's rebuild may free the
         * segment, and another's stores count towards the version's wrap:
         * neither waits for this process's lazy retirement. */
        ph_lane_flush_states(&h->engine->lanes, &t->pctx, (unsigned)lane);
        ph_persist_fence(&h->sp.persist, &t->pctx);
    } else if (!h->gc && lane >= 0) {
        n->lazy[lane / 64] |= 1ull << (lane % 64);
    }
    ph_names_changed(h, &t->pctx);
    return 0;
}

int ph_names_remove(pheap *h, ph_thread *t, const ph_name_ref *ref)
{
    ph_name_line *hd = ref->head;
    uint64_t r = ph_load(&hd->xref), off = r & OFF_MASK;
    uint64_t nv = ph_name_next_version(r) | PH_NAME_FREE;
    if (!ph_names_off_ok(h, off))
        return ph_err(PHEAP_ECORRUPT, "pheap_free_named: the directory entry names %llu, outside "
                      "the data region: the directory is damaged (see pheap_check)",
                      (unsigned long long)off);
    ph_names_count(h->names, ref->seg);
    unsigned k = ph_name_nlines(hd);
    /* A block the program freed behind the name may be pheap's own now (a
     * segment): never freed on the name's behalf. */
    int rc = ph_space_guarded_overlap(&h->sp, off, 1)
                 ? PHEAP_ENOTLIVE
                 : ph_engine_free_unbind(h->engine, &t->tc, &t->pctx, off, &hd->xref, nv);
    if (rc == PHEAP_EDOUBLEFREE || rc == PHEAP_ENOTALLOC || rc == PHEAP_EINTERIOR ||
        rc == PHEAP_ENOTLIVE) {
        ph_persist_store64(&h->sp.persist, &t->pctx, &hd->xref, nv);
        ref->seg->hint_live -= k;
        ph_names_changed(h, &t->pctx);
        return ph_err(PHEAP_ENOTLIVE, "pheap_free_named: the block %llu the name named was "
                      "already freed (by pheap_free?): the name alone was removed",
                      (unsigned long long)off);
    }
    if (!rc)
        ref->seg->hint_live -= k;
    ph_names_changed(h, &t->pctx);
    return rc;
}

/* ---- open and recovery -------------------------------------------------------------- */

/* 0 when the directory entry i (depth d) names a sound segment. */
static int check_segment(pheap *h, uint64_t i, unsigned d, uint64_t off, char *why, size_t n)
{
    uint64_t end = ph_space_size(&h->sp);
    if (off < h->sp.data_off || off % PH_PAGE_SIZE || off > end - sizeof(ph_names_seg)) {
        snprintf(why, n, "names offset %llu, outside the data region or unaligned",
                 (unsigned long long)off);
        return -1;
    }
    const ph_names_seg *s = ph_space_at(&h->sp, off);
    if (s->magic != PH_NAMES_SEG_MAGIC || s->depth > d || s->home_bits < PH_NAMES_HOME_MIN_BITS ||
        s->home_bits > PH_NAMES_HOME_MAX_BITS || off + seg_bytes((unsigned)s->home_bits) > end ||
        (s->depth && s->prefix != i >> (d - s->depth)) || s->prefix >> s->depth) {
        snprintf(why, n, "names offset %llu, which holds no segment for it (bad magic, depth, "
                 "prefix or size)", (unsigned long long)off);
        return -1;
    }
    return 0;
}

/* The rebuild words of a committed rebuild (xold set, xnew[0] not yet
 * cleared): sound segments that recovery installs and frees.  (Before the
 * commit, xnew[] are blocks being filled, which recovery frees.) */
static void check_rebuild(pheap *h, char *why, size_t n)
{
    ph_names_header *hd = h->names->hdr;
    uint64_t v[3] = {ph_load(&hd->xnew[0]), ph_load(&hd->xnew[1]), ph_load(&hd->xold)};
    const ph_names_seg *seg[3] = {NULL, NULL, NULL};
    char w[120];
    for (unsigned i = 0; i < 2; i++) /* in any state: 0 or a large block's start */
        if (v[i] && (v[i] % PH_PAGE_SIZE || v[i] < h->sp.data_off || v[i] >= ph_space_size(&h->sp))) {
            snprintf(why, n, "the rebuild word %u names %llu, outside the data region or unaligned",
                     i, (unsigned long long)v[i]);
            return;
        }
    for (unsigned i = 0; i < 3; i++) {
        /* xold alone: applied, the replaced segment not yet freed */
        if (v[i] == 0 || (i == 2 && v[i] == 1) || (i < 2 && (!v[0] || !v[2])))
            continue;
        /* as a directory entry of a depth-13 directory whose index has the
         * segment's own prefix */
        int inside = v[i] >= h->sp.data_off && v[i] < ph_space_size(&h->sp);
        seg[i] = inside ? ph_space_at(&h->sp, v[i]) : NULL; /* check_segment refuses outside */
        uint64_t idx = inside && seg[i]->depth <= PH_NAMES_DEPTH_MAX
                           ? seg[i]->prefix << (PH_NAMES_DEPTH_MAX - seg[i]->depth)
                           : 0;
        if (check_segment(h, idx, PH_NAMES_DEPTH_MAX, v[i], w, sizeof(w))) {
            snprintf(why, n, "the rebuild word %u %s", i, w);
            return;
        }
    }
    unsigned d = ph_names_depth(h->names);
    if (v[2] && v[0] && /* committed: what apply() will install */
        ((v[1] && (seg[1]->depth != seg[0]->depth || seg[0]->prefix != (seg[1]->prefix & ~1ull) ||
                   (seg[0]->prefix & 1) || seg[0]->depth == 0 || seg[0]->depth > d + 1)) ||
         (!v[1] && seg[0]->depth > d) ||
         (v[2] > 1 && (seg[2]->depth != seg[0]->depth - (v[1] != 0) ||
                       seg[2]->prefix != seg[0]->prefix >> (v[1] != 0)))))
        snprintf(why, n, "the rebuild words name segments that do not replace one another");
}

int ph_names_off_ok(const pheap *h, uint64_t off)
{
    return off >= h->sp.data_off && off < ph_space_size(&h->sp) && off % 8 == 0;
}

/* The checks of ph_names_open: 0, or PHEAP_ECORRUPT with the place. */
static int open_checks(pheap *h)
{
    ph_names *n = h->names;
    ph_names_header *hd = n->hdr;
    uint64_t x = ph_load(&hd->xdir);
    char why[160] = "";
    if ((x >> 1) > PH_NAMES_DEPTH_MAX)
        snprintf(why, sizeof(why), "depth %llu is beyond %u", (unsigned long long)(x >> 1),
                 PH_NAMES_DEPTH_MAX);
    /* Array 0 at depth 0, and each doubling moves to the other array
     * (double_dir): the array is the depth's parity.  A flipped low bit
     * would otherwise read the other array -- at depth 0 an empty one, and
     * every name would be gone. */
    else if ((x & 1) != (x >> 1 & 1))
        snprintf(why, sizeof(why), "header word 0 (xdir %#llx): array %u at depth %llu",
                 (unsigned long long)x, (unsigned)(x & 1), (unsigned long long)(x >> 1));
    unsigned d = (unsigned)(x >> 1);
    const uint64_t *dir = ph_names_dir(n);
    for (uint64_t i = 0; !why[0] && i < (1ull << d); i++) { /* each entry: its own prefix */
        uint64_t e = ph_load(&dir[i]), off = PH_NAMES_ENTRY_OFF(e);
        if (!e && d == 0)
            break; /* no name yet */
        char w[120];
        const ph_names_seg *s = ph_space_at(&h->sp, off);
        if (!e)
            snprintf(why, sizeof(why), "entry %llu is empty", (unsigned long long)i);
        else if (check_segment(h, i, d, off, w, sizeof(w)))
            snprintf(why, sizeof(why), "entry %llu %s", (unsigned long long)i, w);
        else if (PH_NAMES_ENTRY_DEPTH(e) != s->depth || PH_NAMES_ENTRY_BITS(e) != s->home_bits)
            snprintf(why, sizeof(why), "entry %llu gives another depth or size than the "
                     "segment it names", (unsigned long long)i);
    }
    if (!why[0])
        check_rebuild(h, why, sizeof(why));
    /* A rebuild is finished or undone before a clean close (and by the
     * recovery of the next open): one left on a clean heap is damage. */
    if (!why[0] && ph_load(&h->sp.state->xclean) == PH_STATE_CLEAN &&
        (ph_load(&hd->xold) || ph_load(&hd->xnew[0]) || ph_load(&hd->xnew[1])))
        snprintf(why, sizeof(why), "a segment rebuild is unfinished in a heap closed cleanly");
    if (why[0])
        return ph_err(PHEAP_ECORRUPT, "the name directory is damaged: %s", why);
    return ph_names_open_check(h);
}

int ph_names_open(pheap *h)
{
    if (!(h->sp.features & PH_FEAT_INCOMPAT_NAMES))
        return 0;
    ph_names *n = calloc(1, sizeof(*n));
    if (!n)
        return ph_err(PHEAP_ENOMEM, "out of memory for the name directory");
    pthread_rwlock_init(&n->lock, NULL);
    n->seqp = &n->xseq;
    n->heap = h;
    char *region = ph_space_at(&h->sp, h->sp.names_region);
    n->hdr = (ph_names_header *)region;
    n->dirs[0] = (uint64_t *)(region + PH_NAMES_DIR0);
    n->dirs[1] = (uint64_t *)(region + PH_NAMES_DIR1);
    uint64_t seed[2];
    memcpy(seed, h->hdr.uuid, sizeof(seed));
    n->seed = seed[0] ^ seed[1];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    n->stamp = mix((uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uintptr_t)n ^ h->id) | 1;
    h->names = n;
    int held = 0, rc;
    if (h->shared) { /* checked under its lock: other processes change it */
        ph_share_names(h);
        held = ph_names_rdlock(n);
    }
    rc = open_checks(h);
    if (h->shared)
        ph_names_rdunlock(n, held);
    if (rc)
        ph_names_close(h);
    return rc;
}

void ph_names_close(pheap *h)
{
    if (!h->names)
        return;
    pthread_rwlock_destroy(&h->names->lock);
    free(h->names->held);
    free(h->names);
    h->names = NULL;
}

int ph_names_recover(pheap *h, ph_thread *t)
{
    ph_names *n = h->names;
    if (!n)
        return 0;
    ph_names_header *hd = n->hdr;
    if (ph_load(&hd->xold)) { /* committed: finish it */
        uint64_t old = ph_load(&hd->xold);
        apply(h, &t->pctx);
        int rc = finish(h, t);
        if (rc)
            rc = ph_err(PHEAP_ECORRUPT, "the name directory's replaced segment %llu is no "
                        "block: %s", (unsigned long long)old, pheap_errmsg());
        return rc;
    }
    int rc = 0;
    for (unsigned i = 0; i < 2 && !rc; i++) /* not committed: undo it */
        if (ph_load(&hd->xnew[i]) &&
            (rc = ph_engine_free_from(h->engine, &t->tc, &t->pctx, &hd->xnew[i])) != 0)
            rc = ph_err(PHEAP_ECORRUPT, "the name directory's rebuild word %u names %llu, "
                        "which is no block: %s", i, (unsigned long long)ph_load(&hd->xnew[i]),
                        pheap_errmsg());
    return rc;
}
