/*
 * ckpt.c -- the checkpoint durability level (ckpt.h): the back end that
 * marks changed pages, the checkpoint's journal and its replay at open.
 */
#include "persist/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "os/os.h"
#include "persist/ckpt_io.h"
#include "pheap.h"
#include "util/crc32c.h"
#include "util/error.h"
#include "util/gate.h"

#define PAGE PH_PAGE_SIZE

/* ---- the dirty map ---- */

static void mark_pages(ph_ckpt *k, uint64_t first, uint64_t last)
{
    for (uint64_t pg = first; pg <= last; pg++) {
        uint64_t *w = &k->xdirty[pg / 64], bit = 1ull << (pg % 64);
        if (!(ph_load_relaxed(w) & bit))
            __atomic_fetch_or(w, bit, __ATOMIC_RELAXED);
    }
}

void ph_ckpt_mark_off(ph_ckpt *k, uint64_t off, uint64_t len)
{
    if (len == 0 || off >= k->reserve)
        return;
    uint64_t end = PH_MIN(off + len, k->reserve);
    mark_pages(k, off / PAGE, (end - 1) / PAGE);
}

static int punched(ph_ckpt *k, uint64_t pg)
{
    return pg / 64 < k->nwords && (__atomic_load_n(&k->xpunched[pg / 64], __ATOMIC_SEQ_CST) >>
                                   (pg % 64) & 1);
}

void ph_ckpt_mark_punched(ph_ckpt *k, uint64_t off, uint64_t len)
{
    if (len == 0 || off >= k->reserve)
        return;
    uint64_t end = PH_MIN(off + len, k->reserve);
    for (uint64_t pg = off / PAGE; pg <= (end - 1) / PAGE; pg++)
        __atomic_fetch_or(&k->xpunched[pg / 64], 1ull << (pg % 64), __ATOMIC_SEQ_CST);
    ph_ckpt_mark_off(k, off, len);
}

/* The bits first, then the reservation: a checkpoint punching one of these
 * pages meanwhile tests its bit again after the punch (apply_run) and then
 * reserves it itself. */
int ph_ckpt_refill(ph_ckpt *k, uint64_t off, uint64_t len)
{
    if (len == 0 || off >= k->reserve)
        return 0;
    uint64_t end = PH_MIN(off + len, k->reserve);
    for (uint64_t pg = off / PAGE; pg <= (end - 1) / PAGE; pg++)
        if (ph_load_relaxed(&k->xpunched[pg / 64]) >> (pg % 64) & 1)
            __atomic_fetch_and(&k->xpunched[pg / 64], ~(1ull << (pg % 64)), __ATOMIC_SEQ_CST);
    return ph_os_allocate(k->dfd, k->dpath, off, end - off);
}

void ph_ckpt_mark(ph_ckpt *k, const void *addr, uint64_t len)
{
    uintptr_t a = (uintptr_t)addr;
    if (a - (uintptr_t)k->base < k->reserve)
        ph_ckpt_mark_off(k, a - (uintptr_t)k->base, len);
    else if (a - (uintptr_t)k->view < k->reserve)
        ph_ckpt_mark_off(k, a - (uintptr_t)k->view, len);
}

/* The back end: stores are plain stores of the shared working copy, which
 * a process crash leaves as it is; nothing is written back before a
 * checkpoint.  The stores a fence orders are ordered for other threads by
 * the CPU already (x86 is TSO); the compiler barrier keeps the compiler
 * from moving them across it. */
static void ckpt_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)c;
    ph_ckpt_mark(p->ckpt, (const void *)line, n * PH_CACHE_LINE);
}

static void ckpt_fence(ph_persist *p, ph_pctx *c)
{
    (void)p;
    (void)c;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

static void ckpt_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    (void)c;
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
    ph_ckpt_mark(p->ckpt, dst, n * sizeof(*dst));
}

const ph_persist_ops ph_ckpt_ops = {"checkpoint", ckpt_flush, ckpt_fence, ckpt_store};

/* ---- creation ---- */

char *ph_ckpt_journal_path(const char *dpath)
{
    size_t n = strlen(dpath);
    char *p = malloc(n + 6);
    if (p) {
        memcpy(p, dpath, n);
        memcpy(p + n, ".ckpt", 6);
    }
    return p;
}

int ph_ckpt_create(ph_ckpt **out, int dfd, const char *dpath, const uint8_t uuid[16], char *base,
                   char *view, uint64_t reserve, uint64_t data_off, const uint64_t *xsize)
{
    ph_ckpt *k = calloc(1, sizeof(*k));
    if (!k)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    k->nwords = (reserve / PAGE + 63) / 64;
    k->xdirty = calloc(k->nwords, sizeof(uint64_t));
    k->xpunched = calloc(k->nwords ? k->nwords : 1, sizeof(uint64_t));
    k->dpath = strdup(dpath);
    k->jpath = ph_ckpt_journal_path(dpath);
    if (!k->xdirty || !k->xpunched || !k->dpath || !k->jpath) {
        ph_ckpt_destroy(k);
        return ph_err(PHEAP_ENOMEM, "out of memory");
    }
    k->base = base;
    k->view = view;
    k->reserve = reserve;
    k->data_off = data_off;
    k->xsize = xsize;
    k->dfd = dfd;
    k->jfd = -1;
    k->wfd = -1;
    memcpy(k->uuid, uuid, 16);
    pthread_mutex_init(&k->lock, NULL);
    *out = k;
    return 0;
}

void ph_ckpt_destroy(ph_ckpt *k)
{
    if (!k)
        return;
    if (k->jfd >= 0)
        close(k->jfd);
    free(k->xdirty);
    free(k->xpunched);
    free(k->dpath);
    free(k->jpath);
    free(k);
}

/* ---- the journal ---- */

static uint32_t header_crc(const ph_ckpt_header *h)
{
    return ph_crc32c(0, h, offsetof(ph_ckpt_header, crc));
}

/* The header of the journal open as jfd, if it is one of heap `uuid`
 * (magic, version, CRC); else 0. */
static int read_header(int jfd, const uint8_t uuid[16], ph_ckpt_header *h)
{
    if (ph_os_pread(jfd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h))
        return 0;
    return h->magic == PH_CKPT_MAGIC && h->version == 1 && h->crc == header_crc(h) &&
           memcmp(h->uuid, uuid, 16) == 0;
}

static int write_header(int jfd, uint32_t state, const ph_ckpt_header *base)
{
    ph_ckpt_header h = *base;
    h.state = state;
    h.crc = header_crc(&h);
    return ph_ckpt_io_write(PH_CKPT_F_JOURNAL, jfd, &h, sizeof(h), 0);
}

/* The journal of the heap file `dfd` at `dpath`, opened with `flags`
 * (its path in *jpath, malloc'd), and in *h its header when it is one of
 * this heap's (*valid).  The descriptor, or -1 when there is none. */
static int journal_of(int dfd, const char *dpath, int flags, char **jpath, ph_ckpt_header *h,
                      int *valid)
{
    uint8_t uuid[16];
    *valid = 0;
    *jpath = ph_ckpt_journal_path(dpath);
    int jfd = *jpath ? open(*jpath, flags | O_CLOEXEC) : -1;
    if (jfd >= 0 && ph_os_pread(dfd, uuid, 16, offsetof(ph_header, uuid)) == 16)
        *valid = read_header(jfd, uuid, h);
    return jfd;
}

/* What a checkpoint copies: `n` pages, their index entries and, for those
 * that are not zero pages, their contents in index order. */
typedef struct ckpt_set {
    uint64_t n, cap;
    uint64_t *index;        /* PH_CKPT_ENTRY, room to pad it with zeros to a page */
    char *pages;            /* contents of the non-zero pages */
    uint64_t nfull;         /* how many those are */
    uint64_t file_size;
} ckpt_set;

static void set_free(ckpt_set *s)
{
    free(s->index);
    free(s->pages);
    *s = (ckpt_set){0};
}

static int set_add(ckpt_set *s, ph_ckpt *k, uint64_t pg, const char *src)
{
    if (s->n == s->cap) {
        uint64_t cap = s->cap ? s->cap * 2 : 256;
        uint64_t *ix = realloc(s->index, PH_ALIGN_UP(cap * 8, PAGE)); /* padded to a page */
        char *pages = ix ? realloc(s->pages, cap * PAGE) : NULL;
        if (ix)
            s->index = ix;
        if (!pages)
            return PHEAP_ENOMEM;
        s->pages = pages;
        s->cap = cap;
    }
    /* a page the heap punched (free space, zeros) is punched in the file,
     * and not read: a hole of the working copy takes memory when read, and
     * a full memory file system has none (SIGBUS); any other is written
     * (its space stays the file's: a page in use is never a hole) */
    int zero = pg * PAGE >= k->data_off && k->xpunched && punched(k, pg);
    s->index[s->n++] = PH_CKPT_ENTRY(pg, zero);
    if (!zero)
        memcpy(s->pages + s->nfull++ * PAGE, src, PAGE);
    return 0;
}

/* Adds to sel[] the pages below `pages` where the working copy differs
 * from the heap file: every page the working copy stores (its holes were
 * punched, and marked then), compared a run at a time. */
static int select_differing(ph_ckpt *k, uint64_t *sel, uint64_t pages)
{
    enum { RUN = 64 };
    char *buf = malloc((size_t)RUN * PAGE);
    if (!buf)
        return PHEAP_ENOMEM;
    uint64_t size = pages * PAGE, d0 = 0, d1 = size;
    for (uint64_t off = 0; off < size; off = d1) {
        if (k->wfd >= 0 && ph_os_next_data(k->wfd, off, size, &d0, &d1) != 1)
            break;
        d0 = PH_ALIGN_DOWN(d0, PAGE);
        d1 = PH_MIN(PH_ALIGN_UP(d1, PAGE), size);
        for (uint64_t at = d0; at < d1; at += (uint64_t)RUN * PAGE) {
            size_t n = (size_t)PH_MIN((uint64_t)RUN * PAGE, d1 - at);
            ssize_t got = ph_os_pread(k->dfd, buf, n, at);
            size_t have = got > 0 ? (size_t)got : 0;
            memset(buf + have, 0, n - have); /* past the file's end: zeros */
            for (size_t i = 0; i < n / PAGE; i++)
                if (memcmp(buf + i * PAGE, k->base + at + i * PAGE, PAGE) != 0) {
                    uint64_t pg = at / PAGE + i;
                    sel[pg / 64] |= 1ull << (pg % 64);
                }
        }
    }
    /* The pages the heap punched in the working copy before a crash took
     * the dirty map: holes there over pages of the file that are not zeros
     * (a working copy is made with holes only where the file has zeros). */
    for (uint64_t off = 0; k->wfd >= 0 && k->xpunched && off < size; off = d1) {
        if (ph_os_next_data(k->dfd, off, size, &d0, &d1) != 1)
            break;
        d0 = PH_ALIGN_DOWN(d0, PAGE);
        d1 = PH_MIN(PH_ALIGN_UP(d1, PAGE), size);
        for (uint64_t at = d0, w0, w1; at < d1; at = PH_MIN(PH_ALIGN_UP(w1, PAGE), d1)) {
            if (ph_os_next_data(k->wfd, at, d1, &w0, &w1) != 1)
                w0 = w1 = d1; /* a hole to the end of the run */
            /* the hole [at, w0) of the working copy, a run at a time */
            for (uint64_t h = at, hend = PH_ALIGN_DOWN(w0, PAGE); h < hend; h += (uint64_t)RUN * PAGE) {
                size_t n = (size_t)PH_MIN((uint64_t)RUN * PAGE, hend - h);
                ssize_t got = ph_os_pread(k->dfd, buf, n, h);
                for (size_t i = 0; got > 0 && (i + 1) * PAGE <= (size_t)got; i++) {
                    if (ph_all_zero(buf + i * PAGE, PAGE))
                        continue;
                    uint64_t pg = h / PAGE + i;
                    sel[pg / 64] |= 1ull << (pg % 64);
                    __atomic_fetch_or(&k->xpunched[pg / 64], 1ull << (pg % 64), __ATOMIC_SEQ_CST);
                }
            }
        }
    }
    free(buf);
    return 0;
}

/* Step 1, every call held at the gate: the dirty map, taken (each word
 * swapped for zero, so that a mark made meanwhile by pheap_flush, which
 * does not pass the gate, is in this set or the next), with -- when
 * `compare` -- every page that differs from the heap file (stores never
 * flushed; the dirty map a crash took); then the pages' contents. */
static int collect(ph_ckpt *k, ckpt_set *s, int compare)
{
    uint64_t size = ph_load(k->xsize), pages = size / PAGE, nw = (pages + 63) / 64;
    s->file_size = size;
    uint64_t *sel = calloc(nw ? nw : 1, sizeof(uint64_t));
    if (!sel)
        return PHEAP_ENOMEM;
    for (uint64_t w = 0; w < nw && w < k->nwords; w++)
        if (ph_load_relaxed(&k->xdirty[w]))
            sel[w] = __atomic_exchange_n(&k->xdirty[w], 0, __ATOMIC_ACQ_REL);
    if (pages % 64 && nw)
        sel[nw - 1] &= (1ull << (pages % 64)) - 1; /* beyond the end: nothing to copy */
    int rc = compare ? select_differing(k, sel, pages) : 0;
    for (uint64_t w = 0; !rc && w < nw; w++)
        for (uint64_t bits = sel[w]; bits && !rc; bits &= bits - 1) {
            uint64_t pg = w * 64 + (uint64_t)__builtin_ctzll(bits);
            rc = set_add(s, k, pg, k->base + pg * PAGE);
        }
    if (rc) /* out of memory: the whole selection is the next checkpoint's */
        for (uint64_t w = 0; w < nw; w++)
            for (uint64_t bits = sel[w]; bits; bits &= bits - 1)
                ph_ckpt_mark_off(k, (w * 64 + (uint64_t)__builtin_ctzll(bits)) * PAGE, PAGE);
    free(sel);
    return rc;
}

/* A checkpoint that failed before its commit: its pages are copied by the
 * next one. */
static void set_remark(ph_ckpt *k, const ckpt_set *s)
{
    for (uint64_t i = 0; i < s->n; i++)
        ph_ckpt_mark_off(k, (s->index[i] >> 1) * PAGE, PAGE);
}

/* Runs of consecutive non-zero pages: fn(k, first entry, count). */
static int for_runs(ph_ckpt *k, const ckpt_set *s, int (*fn)(ph_ckpt *, const ckpt_set *, uint64_t,
                                                             uint64_t, uint64_t))
{
    uint64_t full = 0;
    for (uint64_t i = 0; i < s->n;) {
        uint64_t j = i + 1;
        int zero = s->index[i] & PH_CKPT_ZERO;
        while (j < s->n && (s->index[j] & PH_CKPT_ZERO) == (uint64_t)zero &&
               s->index[j] >> 1 == (s->index[j - 1] >> 1) + 1)
            j++;
        int rc = fn(k, s, i, j - i, zero ? ~0ull : full);
        if (rc)
            return rc;
        if (!zero)
            full += j - i;
        i = j;
    }
    return 0;
}

static int reserve_run(ph_ckpt *k, const ckpt_set *s, uint64_t i, uint64_t n, uint64_t full)
{
    if (full == ~0ull)
        return 0;
    return ph_ckpt_io_allocate(k->dfd, k->dpath, (s->index[i] >> 1) * PAGE, n * PAGE);
}

static int apply_run(ph_ckpt *k, const ckpt_set *s, uint64_t i, uint64_t n, uint64_t full)
{
    uint64_t off = (s->index[i] >> 1) * PAGE;
    if (full == ~0ull) {
        if (ph_ckpt_io_punch(k->dfd, off, n * PAGE))
            return ph_err(PHEAP_EIO, "%s: punching a hole: %s", k->dpath, pheap_errmsg());
        /* a page handed out again since it was collected keeps its space */
        for (uint64_t pg = off / PAGE; k->xpunched && pg < off / PAGE + n; pg++)
            if (!punched(k, pg) && ph_os_allocate(k->dfd, k->dpath, pg * PAGE, PAGE))
                return ph_err(PHEAP_ENOSPC, "%s: reserving a page handed out: %s", k->dpath,
                              pheap_errmsg());
        return 0;
    }
    return ph_ckpt_io_write(PH_CKPT_F_HEAP, k->dfd, s->pages + full * PAGE, n * PAGE, off);
}

static uint64_t index_bytes(uint64_t n)
{
    return PH_ALIGN_UP(n * 8, PAGE);
}

static int open_journal(ph_ckpt *k)
{
    if (k->jfd >= 0)
        return 0;
    int created = 0;
    k->jfd = open(k->jpath, O_RDWR | O_CLOEXEC);
    if (k->jfd < 0 && errno == ENOENT) {
        k->jfd = open(k->jpath, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        created = k->jfd >= 0;
        if (k->jfd < 0 && errno == EEXIST)
            k->jfd = open(k->jpath, O_RDWR | O_CLOEXEC);
    }
    if (k->jfd < 0)
        return ph_err(PHEAP_EIO, "%s: cannot open the checkpoint journal", k->jpath);
    /* A journal just made: its name durable before a commit in it counts
     * (a file system may keep a new entry apart from the file's own sync). */
    if (created && ph_os_sync_dir(k->jpath) != 0) {
        close(k->jfd);
        k->jfd = -1;
        return pheap_errno();
    }
    ph_ckpt_header h;
    if (read_header(k->jfd, k->uuid, &h))
        k->gen = h.gen;
    return 0;
}

/* Steps 2 to 4 (ckpt.h) for a collected set. */
static int write_set(ph_ckpt *k, ckpt_set *s)
{
    /* 2: the file's length and the space of every page it is to hold. */
    int rc = ph_ckpt_io_resize(k->dfd, k->dpath, s->file_size);
    if (!rc)
        rc = for_runs(k, s, reserve_run);
    if (rc || s->n == 0) /* nothing changed: the file is this checkpoint already */
        return rc;
    /* 3: the body, then the commit. */
    uint64_t ib = index_bytes(s->n);
    memset((char *)s->index + s->n * 8, 0, ib - s->n * 8);
    ph_ckpt_header h = {.magic = PH_CKPT_MAGIC, .version = 1, .gen = k->gen + 1,
                        .file_size = s->file_size, .npages = s->n,
                        .body_bytes = ib + s->nfull * PAGE};
    memcpy(h.uuid, k->uuid, 16);
    h.body_crc = ph_crc32c(ph_crc32c((uint32_t)h.gen, s->index, ib), s->pages, s->nfull * PAGE);
    rc = ph_ckpt_io_write(PH_CKPT_F_JOURNAL, k->jfd, s->index, ib, PAGE);
    if (!rc && s->nfull)
        rc = ph_ckpt_io_write(PH_CKPT_F_JOURNAL, k->jfd, s->pages, s->nfull * PAGE, PAGE + ib);
    if (!rc)
        rc = ph_ckpt_io_sync(PH_CKPT_F_JOURNAL, k->jfd);
    if (!rc)
        rc = write_header(k->jfd, PH_CKPT_COMMITTED, &h);
    if (!rc)
        rc = ph_ckpt_io_sync(PH_CKPT_F_JOURNAL, k->jfd);
    if (rc)
        return rc;
    k->gen = h.gen;
    /* 4: committed; from here an error leaves the journal to replay. */
    rc = for_runs(k, s, apply_run);
    if (!rc)
        rc = ph_ckpt_io_sync(PH_CKPT_F_HEAP, k->dfd);
    if (!rc)
        (void)write_header(k->jfd, PH_CKPT_APPLIED, &h); /* lost: the next open replays it again */
    if (rc)
        k->unapplied = 1;
    ph_store_relaxed(&k->xbytes, k->xbytes + s->nfull * PAGE);
    return rc;
}

int ph_ckpt_take(ph_ckpt *k, int compare)
{
    uint64_t t0 = ph_os_time_ns();
    /* Whoever holds the lock may be stopping every call: this one waits
     * as if outside. */
    int suspended = ph_gate_suspend();
    pthread_mutex_lock(&k->lock);
    ph_gate_resume(suspended);
    int rc = open_journal(k);
    if (!rc && k->unapplied) {
        if ((rc = ph_ckpt_replay(k->dfd, k->dpath, 1)) == 0)
            k->unapplied = 0;
    }
    if (rc) {
        pthread_mutex_unlock(&k->lock);
        return rc;
    }
    ckpt_set s = {0};
    ph_gate_stop();
    uint64_t t1 = ph_os_time_ns();
    rc = collect(k, &s, compare || k->compare_all);
    ph_gate_start();
    uint64_t t2 = ph_os_time_ns();
    if (rc) {
        set_free(&s);
        pthread_mutex_unlock(&k->lock);
        return ph_err(PHEAP_ENOMEM, "checkpoint of %s: out of memory for %llu pages", k->dpath,
                      (unsigned long long)s.n);
    }
    ph_ckpt_io_begin(k->dfd, k->jfd);
    rc = write_set(k, &s);
    if (rc && !k->unapplied)
        set_remark(k, &s);
    else
        k->compare_all = 0;
    ph_store_relaxed(&k->xlast_pages, s.n);
    set_free(&s);
    ph_store_relaxed(&k->xlast_pause_ns, t2 - t1);
    ph_store_relaxed(&k->xlast_ns, ph_os_time_ns() - t0);
    if (!rc)
        ph_store_relaxed(&k->xcheckpoints, k->xcheckpoints + 1);
    pthread_mutex_unlock(&k->lock);
    if (rc)
        return ph_err(rc, "checkpoint of %s failed (%s): the file stays at the last checkpoint, "
                      "and the next one copies what this one did not", k->dpath, pheap_errmsg());
    return 0;
}

/* ---- replay at open ---- */

static int replay_body(int dfd, const char *dpath, int jfd, const ph_ckpt_header *h)
{
    uint64_t ib = index_bytes(h->npages);
    if (h->npages > h->body_bytes / 8 || ib > h->body_bytes)
        return 0;
    char *body = malloc(h->body_bytes ? h->body_bytes : 1);
    if (!body)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    int rc = 0;
    if (ph_os_pread(jfd, body, h->body_bytes, PAGE) != (ssize_t)h->body_bytes ||
        ph_crc32c((uint32_t)h->gen, body, h->body_bytes) != h->body_crc)
        goto out; /* the body of a later checkpoint that never committed: this one is in */
    ckpt_set s = {.n = h->npages, .index = (uint64_t *)body, .pages = body + ib,
                  .file_size = h->file_size};
    uint64_t full = 0;
    for (uint64_t i = 0; i < s.n; i++)
        full += !(s.index[i] & PH_CKPT_ZERO);
    if (ib + full * PAGE != h->body_bytes)
        goto out;
    s.nfull = full;
    ph_ckpt k = {.dfd = dfd, .dpath = (char *)dpath};
    rc = ph_ckpt_io_resize(dfd, dpath, h->file_size);
    if (!rc)
        rc = for_runs(&k, &s, apply_run);
    if (!rc)
        rc = ph_ckpt_io_sync(PH_CKPT_F_HEAP, dfd);
out:
    free(body);
    return rc;
}

unsigned ph_ckpt_journal_state(int dfd, const char *dpath, uint64_t *gen)
{
    char *jpath;
    ph_ckpt_header h;
    int valid, jfd = journal_of(dfd, dpath, O_RDONLY, &jpath, &h, &valid);
    *gen = valid ? h.gen : 0;
    if (jfd >= 0)
        close(jfd);
    free(jpath);
    return valid ? h.state : 0;
}

int ph_ckpt_replay(int dfd, const char *dpath, int writable)
{
    char *jpath;
    ph_ckpt_header h;
    int valid, rc = 0;
    int jfd = journal_of(dfd, dpath, writable ? O_RDWR : O_RDONLY, &jpath, &h, &valid);
    if (!jpath)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    if (!valid || h.state != PH_CKPT_COMMITTED)
        goto out;
    if (!writable) {
        rc = ph_err(PHEAP_EBUSY, "%s: a checkpoint was cut short before it reached the file "
                    "(its journal %s is committed): a read-write open completes it", dpath, jpath);
        goto out;
    }
    ph_ckpt_io_begin(dfd, jfd);
    rc = replay_body(dfd, dpath, jfd, &h);
    if (!rc)
        (void)write_header(jfd, PH_CKPT_APPLIED, &h);
out:
    if (jfd >= 0)
        close(jfd);
    free(jpath);
    return rc;
}
