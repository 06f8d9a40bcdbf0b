/*
 * names.c -- named objects: pheap_alloc_named, pheap_lookup,
 * pheap_free_named, iteration in hash order (pheap_name_next), and the
 * directory's part of pheap_check, pheap_stats and tracing.  The
 * directory itself is names_dir.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heap/names.h"
#include "heap/tx_int.h"
#include "util/error.h"

#define OFF_MASK 0x0000fffffffffff8ull

static int name_check(const char *name, const char *call, size_t *len)
{
    if (!name || !*name)
        return ph_err(PHEAP_ENAME, "%s: the name is empty", call);
    *len = strnlen(name, PH_NAME_MAX + 1);
    if (*len > PH_NAME_MAX)
        return ph_err(PHEAP_ENAME, "%s: the name '%.20s...' is longer than %u bytes", call, name,
                      PH_NAME_MAX);
    return 0;
}

static int no_names(const char *call)
{
    return ph_err(PHEAP_ENOTSUP, "%s: the heap was made by a build older than format 1.4, "
                  "whose heaps have no name directory", call);
}

/* The caller's record for a call that changes names; NULL with the error
 * set when it cannot.  *tx: the thread's open transaction, which the
 * change joins, or NULL. */
static ph_thread *name_writer(pheap *h, const char *name, const char *call, size_t *len,
                              int *tx)
{
    ph_thread *t = ph_heap_writer_in_tx(h, call);
    *tx = t && t->tx && t->tx->depth;
    if (t && *tx) /* refuses an aborted transaction */
        t = ph_tx_current(h, &t, call) ? t : NULL;
    else if (t)
        t = ph_heap_writer(h, call); /* the access mode */
    if (!t || name_check(name, call, len))
        return NULL;
    if (!h->names) {
        no_names(call);
        return NULL;
    }
    if (ph_names_mine(h->names)) { /* the lock is this thread's already: see names.h */
        ph_err(PHEAP_EBUSY, "%s: called from the initialiser of a pheap_alloc_named_init, which "
               "runs while the name directory is being changed: it may look names up, not "
               "create or remove them", call);
        return NULL;
    }
    return t;
}

ph_export pheap_off pheap_alloc_named_init(pheap *h, const char *name, size_t size,
                                           unsigned flags, pheap_init_fn init, void *arg)
{
    PH_WINDOW();
    const char *call = "pheap_alloc_named";
    size_t len;
    int in_tx;
    ph_thread *t = name_writer(h, name, call, &len, &in_tx);
    ph_user_init u;
    ph_block_init bi;
    if (!t || ph_heap_block_init(h, flags, init, arg, &u, &bi, call))
        return 0;
    if (size == 0 || (in_tx && size > h->hdr.max_size)) { /* as pheap_tx_alloc */
        ph_err(PHEAP_EINVAL, "%s: size %zu%s", call, size,
               size ? " is more than the heap can ever hold" : "");
        return 0;
    }
    if (in_tx)
        return ph_names_tx_create(h, t, name, len, size, &bi);
    uint64_t hash = ph_names_hash(h->names->seed, name, len), off = 0, held_off;
    ph_name_ref ref;
    int mine;
    ph_names_wrlock(h->names);
    int rc = ph_names_find(h, hash, name, len, &ref)
                 ? ph_err(PHEAP_EEXIST, "%s: the name '%s' exists already", call, name)
             : ph_names_tx_held(h, hash, name, len, &mine, &held_off) ||
                       ph_names_held_elsewhere(h->names, hash)
                 ? ph_err(PHEAP_EBUSY, "%s: the name '%s' is being created by another thread's "
                          "(or process's) open transaction", call, name)
                 : ph_names_insert(h, t, hash, name, len, size, &bi, &off);
    ph_names_unlock(h->names);
    return rc ? 0 : off;
}

ph_export pheap_off pheap_alloc_named(pheap *h, const char *name, size_t size)
{
    PH_WINDOW();
    return pheap_alloc_named_init(h, name, size, 0, NULL, NULL);
}

/* pheap_lookup without the lock (names.h): 0 and *off (0 when the name
 * does not exist), or -1 when the locked path must decide: a writer was
 * at work, or transactions hold names (their holds live in a table that a
 * writer may reallocate, so it is read under the lock only).  A read that
 * raced a writer may have seen a segment being rebuilt or freed: its
 * lines stay mapped and every index into them is bounded, and the
 * sequence check throws the result away. */
static int lookup_unlocked(pheap *h, ph_names *n, uint64_t hash, const char *name, size_t len,
                           uint64_t *off)
{
#if defined(__SANITIZE_THREAD__)
    (void)h, (void)n, (void)hash, (void)name, (void)len, (void)off;
    return -1; /* the racy read is by design; the sanitizer checks the locked path */
#else
    uint64_t s1 = __atomic_load_n(n->seqp, __ATOMIC_ACQUIRE);
    if ((s1 & 1) || ph_load_relaxed(&n->nheld))
        return -1;
    ph_name_ref ref;
    uint64_t o = ph_names_find(h, hash, name, len, &ref) ? ph_load(&ref.head->xref) & OFF_MASK : 0;
    ph_seq_read();
    if (__atomic_load_n(n->seqp, __ATOMIC_RELAXED) != s1)
        return -1;
    *off = o;
    return 0;
#endif
}

ph_export pheap_off pheap_lookup(pheap *h, const char *name)
{
    PH_WINDOW();
    size_t len;
    if (!h) {
        ph_err(PHEAP_EINVAL, "pheap_lookup: heap is NULL");
        return 0;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked("pheap_lookup");
        return 0;
    }
    if (name_check(name, "pheap_lookup", &len))
        return 0;
    uint64_t off = 0;
    ph_names *n = h->names;
    if (n) {
        uint64_t hash = ph_names_hash(n->seed, name, len);
        if (lookup_unlocked(h, n, hash, name, len, &off) != 0) {
            ph_name_ref ref;
            uint64_t held_off;
            int mine = 0;
            int held = ph_names_rdlock(n);
            if (ph_names_tx_held(h, hash, name, len, &mine, &held_off) && mine)
                off = held_off; /* the calling thread's transaction creates or removes it */
            else if (ph_names_find(h, hash, name, len, &ref))
                off = ph_load(&ref.head->xref) & OFF_MASK;
            ph_names_rdunlock(n, held);
        }
    }
    if (off && !ph_names_off_ok(h, off)) {
        ph_err(PHEAP_ECORRUPT, "pheap_lookup: the directory entry of '%s' names %llu, outside "
               "the data region: the directory is damaged (see pheap_check)", name,
               (unsigned long long)off);
        return 0;
    }
    if (!off)
        ph_err(PHEAP_ENOENT, "no object named '%s'", name);
    return off;
}

ph_export int pheap_free_named(pheap *h, const char *name)
{
    PH_WINDOW();
    size_t len;
    int in_tx, mine;
    ph_thread *t = name_writer(h, name, "pheap_free_named", &len, &in_tx);
    if (!t)
        return pheap_errno();
    if (in_tx)
        return ph_names_tx_remove(h, t, name, len);
    uint64_t hash = ph_names_hash(h->names->seed, name, len), held_off;
    ph_name_ref ref;
    ph_names_wrlock(h->names);
    int rc = ph_names_tx_held(h, hash, name, len, &mine, &held_off) ||
                     ph_names_held_elsewhere(h->names, hash)
                 ? ph_err(PHEAP_EBUSY, "pheap_free_named: the name '%s' is created or removed "
                          "by another thread's (or process's) open transaction", name)
             : ph_names_find(h, hash, name, len, &ref)
                 ? ph_names_remove(h, t, &ref)
                 : ph_err(PHEAP_ENOENT, "pheap_free_named: no object named '%s'", name);
    ph_names_unlock(h->names);
    return rc;
}

/* ---- iteration ------------------------------------------------------------------------ */

/* Order of names: hash, then length, then bytes. */
static int key_cmp(uint64_t ha, const char *a, size_t la, uint64_t hb, const char *b, size_t lb)
{
    if (ha != hb)
        return ha < hb ? -1 : 1;
    if (la != lb)
        return la < lb ? -1 : 1;
    return memcmp(a, b, la);
}

/* The least entry of s above the cursor (none: every entry qualifies),
 * searched from line `from`: clusters are in hash order, so the search
 * ends with the cluster where the first candidate is. */
static int least_above(ph_names_seg *s, uint32_t from, const char *cur, size_t clen, uint64_t ch,
                       int any, pheap_name_info *out)
{
    ph_name_line *L = ph_names_lines(s);
    char name[PH_NAME_MAX + 1];
    int found = 0;
    for (uint32_t i = from, total = ph_names_total(s); i < total; i++) {
        uint64_t r = ph_load(&L[i].xref);
        if (r == 0 && found)
            break;
        if (!ph_names_is_head(s, i))
            continue;
        ph_names_copy_name(s, i, name);
        size_t len = strlen(name);
        uint64_t hash = L[i].hash;
        if (!any && key_cmp(hash, name, len, ch, cur, clen) <= 0)
            continue;
        if (found && key_cmp(hash, name, len, out->hash, out->name, out->len) >= 0)
            continue;
        memcpy(out->name, name, len + 1);
        out->len = len;
        out->hash = hash;
        out->off = r & OFF_MASK;
        out->size = L[i].size;
        found = 1;
    }
    return found;
}

ph_export int pheap_name_next(pheap *h, const char *after, pheap_name_info *out)
{
    PH_WINDOW();
    PH_OUT(out);
    size_t clen = 0;
    if (!h || !out)
        return ph_err(PHEAP_EINVAL, "pheap_name_next: NULL argument");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_name_next");
    if (after && name_check(after, "pheap_name_next", &clen))
        return pheap_errno();
    char cur[PH_NAME_MAX + 1]; /* `after` may be out->name, which the search overwrites */
    if (after)
        after = memcpy(cur, after, clen + 1);
    ph_names *n = h->names;
    if (!n)
        return ph_err(PHEAP_ENOENT, "pheap_name_next: no more names");
    uint64_t ch = after ? ph_names_hash(n->seed, after, clen) : 0, so;
    int found = 0;
    int held = ph_names_rdlock(n);
    unsigned d = ph_names_depth(n);
    ph_names_seg *s = ph_names_seg_of(h, ch, &so);
    if (s) {
        found = least_above(s, after ? ph_names_home(s, ch) : 0, after, clen, ch, !after, out);
        while (!found) { /* the segments after it hold greater hashes only */
            uint64_t next = (s->prefix + 1) << (d - s->depth);
            if (next >= (1ull << d))
                break;
            s = ph_space_at(&h->sp, PH_NAMES_ENTRY_OFF(ph_load(&ph_names_dir(n)[next])));
            found = least_above(s, 0, NULL, 0, 0, 1, out);
        }
    }
    ph_names_rdunlock(n, held);
    return found ? 0 : ph_err(PHEAP_ENOENT, "pheap_name_next: no more names");
}

/* ---- check, roots, figures -------------------------------------------------------------- */

typedef struct check_ctx {
    pheap *h;
    unsigned errors;
    uint64_t names, *offs, noffs, cap;
    char *err;
    size_t errlen;
    int damage_only;  /* open's check: skip what a program can cause (a name of a freed block) */
} check_ctx;

static void problem(check_ctx *k, const char *fmt, const char *name, uint64_t a)
{
    char msg[400];
    snprintf(msg, sizeof(msg), fmt, name, (unsigned long long)a);
    if (k->errors++ == 0)
        snprintf(k->err, k->errlen, "names: %s", msg);
}

/* One head: its block, its hash, checksum and place. */
static void check_head(check_ctx *k, ph_names_seg *s, uint32_t i)
{
    pheap *h = k->h;
    ph_name_line *L = ph_names_lines(s);
    char name[PH_NAME_MAX + 1];
    unsigned len = ph_name_len(&L[i]), lines = ph_name_nlines(&L[i]);
    uint32_t total = ph_names_total(s);
    if (len == 0 || len > PH_NAME_MAX || lines != ph_names_entry_lines(len) || i + lines > total) {
        problem(k, "entry%s at line %llu has a bad length or line count", "", i);
        return;
    }
    ph_names_copy_name(s, i, name);
    uint64_t off = ph_load(&L[i].xref) & OFF_MASK, bytes;
    if (strlen(name) != len)
        problem(k, "name '%s' (line %llu) holds a NUL byte", name, i);
    else if ((uint32_t)(L[i].meta >> 32) != ph_names_entry_crc(s, i))
        problem(k, "name '%s': entry checksum mismatch (line %llu)", name, i);
    else if (L[i].hash != ph_names_hash(h->names->seed, name, len) ||
             (s->depth && (L[i].hash >> (64 - s->depth)) != s->prefix))
        problem(k, "name '%s' is in the wrong segment or has a wrong hash (line %llu)", name, i);
    else if (ph_names_home(s, L[i].hash) > i)
        problem(k, "name '%s' sits before its home line (line %llu)", name, i);
    for (uint32_t j = ph_names_home(s, L[i].hash); j < i; j++)
        if (ph_load(&L[j].xref) == 0) {
            problem(k, "name '%s': an empty line cuts it off its home (line %llu)", name, j);
            break;
        }
    for (unsigned j = 1; j < lines; j++) {
        uint64_t r = ph_load(&L[i + j].xref);
        if (ph_name_kind(r) != PH_NAME_CONT || (r >> 3 & 0x1fff) != i)
            problem(k, "name '%s': continuation line %llu does not belong to it", name, i + j);
    }
    if (off < h->sp.data_off || off >= ph_space_size(&h->sp))
        problem(k, "name '%s' names %llu, outside the data region", name, off);
    else if (!k->damage_only && !h->needs_recovery && ph_engine_usable(h->engine, off, &bytes) != 0)
        problem(k, "name '%s' names %llu, which is not a live block (freed with pheap_free?)",
                name, off);
    /* the same name again, later in its cluster */
    for (uint32_t j = i + 1; j < total && ph_load(&L[j].xref) != 0; j++)
        if (ph_names_is_head(s, j) && L[j].hash == L[i].hash && ph_name_len(&L[j]) == len) {
            char other[PH_NAME_MAX + 1];
            ph_names_copy_name(s, j, other);
            if (strcmp(other, name) == 0)
                problem(k, "name '%s' is in the directory twice (line %llu)", name, j);
        }
    if (k->damage_only) {
        k->names++;
        return;
    }
    if (k->noffs == k->cap) {
        uint64_t cap = k->cap ? 2 * k->cap : 1024, *v = realloc(k->offs, cap * sizeof(*v));
        if (!v)
            return;
        k->offs = v;
        k->cap = cap;
    }
    k->offs[k->noffs++] = off;
    k->names++;
}

/* A line that is no head but whose word no store makes: a kind beyond
 * CONT, an EMPTY kind with other bits, or a CONT word with more than a
 * head's line in its payload (bits 3..15, a line at most four before it):
 * a head whose kind bits flipped, which lookups would pass over.  (A
 * removed head is FREE, two bits away from HEAD, and keeps its contents:
 * not counted.  Nor is a CONT line that still holds an old head's
 * contents: a create cut short by a crash leaves one, its word stored and
 * not its body; it belongs to no head and is free space.) */
static int damaged_line(uint32_t i, uint64_t r)
{
    unsigned kind = (unsigned)(r & 7);
    if (kind > PH_NAME_CONT || (kind == PH_NAME_EMPTY && r != 0))
        return 1;
    if (kind != PH_NAME_CONT)
        return 0;
    uint64_t head = (r & 0xffffffffffffull) >> 3;
    return head >= i || i - head > 4;
}

static int check_seg(void *arg, ph_names_seg *s, uint64_t seg_off)
{
    check_ctx *k = arg;
    ph_names *n = k->h->names;
    unsigned d = ph_names_depth(n);
    if (s->magic != PH_NAMES_SEG_MAGIC || s->depth > d || s->home_bits < PH_NAMES_HOME_MIN_BITS ||
        s->home_bits > PH_NAMES_HOME_MAX_BITS) {
        problem(k, "segment%s at %llu has a bad header", "", seg_off);
        return 0;
    }
    const uint64_t *dir = ph_names_dir(n);
    /* At open, a committed rebuild may have pointed part of the directory
     * at its new segments when the crash came: recovery completes it. */
    int applying = k->damage_only && ph_load(&n->hdr->xold);
    for (uint64_t i = s->prefix << (d - s->depth); !applying && i < (s->prefix + 1) << (d - s->depth); i++)
        if (ph_load(&dir[i]) != PH_NAMES_ENTRY(seg_off, s->depth, s->home_bits)) {
            problem(k, "directory entry%s %llu does not name the segment of its prefix", "", i);
            break;
        }
    for (uint32_t i = 0, total = ph_names_total(s); i < total; i++) {
        uint64_t r = ph_load(&ph_names_lines(s)[i].xref);
        if (ph_name_kind(r) == PH_NAME_HEAD)
            check_head(k, s, i); /* damaged heads too: reported */
        else if (damaged_line(i, r))
            problem(k, "entry%s at line %llu: its kind word is damaged (the name is lost to "
                    "lookups)", "", i);
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

unsigned ph_names_check(pheap *h, uint64_t *nnames, char *err, size_t errlen)
{
    check_ctx k = {.h = h, .err = err, .errlen = errlen};
    *nnames = 0;
    ph_names *n = h->names;
    if (!n)
        return 0;
    int held = ph_names_rdlock(n);
    /* A read-only view of a crashed heap may hold an unfinished rebuild. */
    int settled = !h->held_elsewhere && (!h->readonly || !h->was_unclean || h->snapshot) &&
                  !h->needs_recovery;
    if (settled && (ph_load(&n->hdr->xold) || ph_load(&n->hdr->xnew[0]) ||
                    ph_load(&n->hdr->xnew[1])))
        problem(&k, "a segment rebuild is unfinished%s (old segment %llu)", "",
                ph_load(&n->hdr->xold));
    ph_names_each_segment(h, check_seg, &k);
    ph_names_rdunlock(n, held);
    if (k.noffs > 1) /* k.offs is NULL when no name was found: qsort must not see it */
        qsort(k.offs, k.noffs, sizeof(*k.offs), cmp_u64);
    for (uint64_t i = 1; i < k.noffs; i++)
        if (k.offs[i] == k.offs[i - 1]) {
            problem(&k, "two names%s name the block %llu", "", k.offs[i]);
            break;
        }
    free(k.offs);
    *nnames = k.names;
    return k.errors;
}

/* At open: every segment of the directory and every entry in it sound (the
 * header, the directory entries of its prefix, each head's length, lines,
 * NUL-free name, checksum, hash and place), as lookups, iteration and
 * changes rely on them; a name naming a freed block is left to
 * pheap_check.  Reads every segment: time follows the names held.
 * PHEAP_ECORRUPT with the first finding, or 0. */
int ph_names_open_check(pheap *h)
{
    char err[300] = "";
    check_ctx k = {.h = h, .err = err, .errlen = sizeof(err), .damage_only = 1};
    if (!h->names)
        return 0;
    ph_names_each_segment(h, check_seg, &k);
    return k.errors ? ph_err(PHEAP_ECORRUPT, "the name directory is damaged: %s", err) : 0;
}

typedef struct roots_ctx {
    ph_names_root_fn fn;
    void *arg;
} roots_ctx;

static int seg_roots(void *arg, ph_names_seg *s, uint64_t seg_off)
{
    roots_ctx *r = arg;
    char name[PH_NAME_MAX + 1];
    r->fn(r->arg, seg_off, NULL);
    ph_name_line *L = ph_names_lines(s);
    for (uint32_t i = 0, total = ph_names_total(s); i < total; i++)
        if (ph_names_is_head(s, i)) {
            ph_names_copy_name(s, i, name);
            r->fn(r->arg, ph_load(&L[i].xref) & OFF_MASK, name);
        }
    return 0;
}

void ph_names_roots(pheap *h, ph_names_root_fn fn, void *arg)
{
    ph_names *n = h->names;
    if (!n)
        return;
    roots_ctx r = {fn, arg};
    int held = ph_names_rdlock(n);
    for (unsigned i = 0; i < 2; i++)
        if (ph_load(&n->hdr->xnew[i]))
            fn(arg, ph_load(&n->hdr->xnew[i]), NULL);
    if (ph_load(&n->hdr->xold) > 1)
        fn(arg, ph_load(&n->hdr->xold), NULL);
    ph_names_each_segment(h, seg_roots, &r);
    ph_names_rdunlock(n, held);
}

typedef struct stats_ctx {
    uint64_t names, segments;
} stats_ctx;

static int seg_stats(void *arg, ph_names_seg *s, uint64_t seg_off)
{
    stats_ctx *st = arg;
    (void)seg_off;
    st->segments++;
    for (uint32_t i = 0, total = ph_names_total(s); i < total; i++)
        st->names += (uint64_t)ph_names_is_head(s, i);
    return 0;
}

void ph_names_stats(pheap *h, uint64_t *names, uint64_t *segments)
{
    stats_ctx st = {0, 0};
    if (h->names) {
        int held = ph_names_rdlock(h->names);
        ph_names_each_segment(h, seg_stats, &st);
        ph_names_rdunlock(h->names, held);
    }
    *names = st.names;
    *segments = st.segments;
}
