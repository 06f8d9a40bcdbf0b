/*
 * space_map.c -- the heap's mappings and the protection of its metadata
 * (DESIGN 2.6, 4.5): pheap's own view, through which it reads and writes
 * everything, and the program's view, in which every metadata page is
 * read-only (see ph_space_map).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/space.h"
#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

/* The guarded blocks: offsets and lengths, sorted by offset, in a table
 * that never moves (reserved whole, touched as it fills), so that readers
 * need no lock: a seqlock tells them to look again when a writer (under
 * the lock, rarely: a segment made or freed) moved entries meanwhile. */
#define PH_GUARDED_MAX (1u << 20)
struct ph_protected {
    pthread_mutex_t lock; /* writers */
    uint64_t xseq;        /* odd while a writer moves entries */
    uint64_t xcount;      /* entries */
    uint64_t (*v)[2];     /* PH_GUARDED_MAX entries reserved */
};

static int protects(const ph_space *s)
{
    return s->protect == PHEAP_PROTECT_ALIAS || s->protect == PHEAP_PROTECT_KEYS;
}

/* Read-only in the program's view: the whole OS pages of [off, off+len). */
static int view_readonly(ph_space *s, uint64_t off, uint64_t len, int readonly)
{
    if (s->protect == PHEAP_PROTECT_KEYS)
        return ph_keys_tag(s, off, len, readonly);
    uint64_t pg = ph_os_page(), a = PH_ALIGN_UP(off, pg), e = PH_ALIGN_DOWN(off + len, pg);
    if (e <= a)
        return 0;
    return ph_os_protect(s->view + a, e - a, !readonly);
}

/* Maps [off, off+len) of the file -- or of the working copy -- into both
 * views.  With `dax` (the first mapping) MAP_SYNC is tried and *dax tells
 * whether it took; later mappings use it when the first did. */
static int map_range(ph_space *s, uint64_t off, uint64_t len, int kind, int *dax)
{
    int fd = s->wfd >= 0 ? s->wfd : s->fd;
    if (s->wfd >= 0)
        kind = PH_MAP_SHARED;
    int try_sync = s->wfd < 0 && kind != PH_MAP_PRIVATE && (dax ? 1 : (int)s->dax), sync = 0;
    int rc = ph_os_map_file(fd, s->base + off, len, off, kind, try_sync, &sync);
    if (!rc && dax)
        *dax = sync;
    if (!rc && s->view != s->base)
        rc = ph_os_map_file(fd, s->view + off, len, off, PH_MAP_SHARED, sync, NULL);
    return rc;
}

static unsigned resolve(unsigned protect, int kind, int simulated)
{
    if (kind == PH_MAP_READONLY)
        return PHEAP_PROTECT_READONLY;
    if (kind == PH_MAP_PRIVATE)
        return PHEAP_PROTECT_OFF; /* a copy-on-write view cannot be aliased */
    if (protect == PHEAP_PROTECT_AUTO && simulated)
        return PHEAP_PROTECT_OFF; /* see ph_space_map */
    if (protect == PHEAP_PROTECT_KEYS)
        return PHEAP_PROTECT_KEYS;
    return protect == PHEAP_PROTECT_OFF ? PHEAP_PROTECT_OFF : PHEAP_PROTECT_ALIAS;
}

int ph_space_map(ph_space *s, int kind, int simulated, unsigned protect, int *dax)
{
    s->wfd = -1;
    int rc;
    if (protect == PHEAP_PROTECT_KEYS && (rc = ph_keys_setup()) != 0)
        return rc; /* whatever the kind of open: the choice is refused */
    s->protect = resolve(protect, kind, simulated);
    s->protect_rw = resolve(protect, PH_MAP_SHARED, simulated);
    s->guarded = calloc(1, sizeof(*s->guarded));
    if (s->guarded && !(s->guarded->v = ph_os_alloc_pages(PH_GUARDED_MAX * sizeof(*s->guarded->v)))) {
        free(s->guarded);
        s->guarded = NULL;
    }
    if (!s->guarded)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    pthread_mutex_init(&s->guarded->lock, NULL);
    void *base, *view = NULL;
    rc = ph_os_reserve(s->reserve, &base);
    if (rc)
        return rc;
    s->base = s->view = base;
    if (s->protect == PHEAP_PROTECT_ALIAS) {
        if ((rc = ph_os_reserve(s->reserve, &view)) != 0)
            return rc;
        s->view = view;
    }
    /* Simulated: the working copy is a private copy-on-write mapping of
     * the file -- or, protected, a copy in memory that both views share
     * (a private mapping cannot be). */
    int shared_copy = simulated && s->view != s->base;
    if (simulated && !shared_copy)
        kind = PH_MAP_PRIVATE;
    if (shared_copy && (rc = ph_os_memfd(s->xsize, &s->wfd)) != 0)
        return rc;
    rc = map_range(s, 0, s->xsize, kind, dax);
    if (!rc && shared_copy)
        rc = ph_os_copy_file(s->fd, s->xsize, s->base);
    if (!rc && s->protect == PHEAP_PROTECT_ALIAS)
        rc = view_readonly(s, 0, s->data_off, 1);
    if (!rc && s->protect == PHEAP_PROTECT_KEYS && (rc = ph_keys_attach(s)) != 0)
        s->protect = PHEAP_PROTECT_OFF; /* not attached: nothing to detach */
    return rc;
}

void ph_space_unmap(ph_space *s)
{
    if (s->protect == PHEAP_PROTECT_KEYS)
        ph_keys_detach(s);
    if (s->view != s->base)
        ph_os_unreserve(s->view, s->reserve);
    ph_os_unreserve(s->base, s->reserve);
    s->view = s->base = NULL;
    if (s->wfd >= 0)
        close(s->wfd);
    s->wfd = -1;
    if (s->guarded) {
        pthread_mutex_destroy(&s->guarded->lock);
        ph_os_free_pages(s->guarded->v, PH_GUARDED_MAX * sizeof(*s->guarded->v));
        free(s->guarded);
        s->guarded = NULL;
    }
}

int ph_space_extend_map(ph_space *s, uint64_t cur, uint64_t want)
{
    if (s->sim && s->wfd < 0) /* the private working copy: zeroed memory */
        return ph_os_map_anon(s->base + cur, want - cur);
    if (s->wfd >= 0) {
        int rc = ph_os_resize(s->wfd, "the working copy", want);
        return rc ? rc : map_range(s, cur, want - cur, PH_MAP_SHARED, NULL);
    }
    return map_range(s, cur, want - cur, PH_MAP_SHARED, NULL);
}

/* First index whose offset is >= off, among the first n (readers: of a
 * copy that may change under them; the seqlock tells). */
static uint64_t find(const ph_protected *p, uint64_t n, uint64_t off)
{
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (__atomic_load_n(&p->v[mid][0], __ATOMIC_ACQUIRE) < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Writers (under the lock): the sequence is odd while entries move.
 * Entries are stored with release and read with acquire, so that a reader
 * that sees a moved entry also sees the odd sequence (no fences: the
 * pattern thread sanitizers follow). */
static void write_begin(ph_protected *p)
{
    ph_store_relaxed(&p->xseq, p->xseq + 1);
}

static void write_end(ph_protected *p)
{
    __atomic_store_n(&p->xseq, p->xseq + 1, __ATOMIC_RELEASE);
}

static void set_entry(ph_protected *p, uint64_t i, uint64_t off, uint64_t len)
{
    __atomic_store_n(&p->v[i][0], off, __ATOMIC_RELEASE);
    __atomic_store_n(&p->v[i][1], len, __ATOMIC_RELEASE);
}

void ph_space_guard(ph_space *s, uint64_t off, uint64_t len)
{
    ph_protected *p = s->guarded;
    if (s->no_guard)
        return;
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->xcount, i = find(p, n, off);
    if ((i < n && p->v[i][0] == off) || n == PH_GUARDED_MAX)
        goto out; /* given already; or, past the table, stays writable (best effort) */
    if (protects(s) && view_readonly(s, off, len, 1) != 0)
        goto out;
    write_begin(p);
    for (uint64_t k = n; k > i; k--)
        set_entry(p, k, p->v[k - 1][0], p->v[k - 1][1]);
    set_entry(p, i, off, len);
    __atomic_store_n(&p->xcount, n + 1, __ATOMIC_RELEASE);
    write_end(p);
out:
    pthread_mutex_unlock(&p->lock);
}

void ph_space_unguard(ph_space *s, uint64_t off)
{
    ph_protected *p = s->guarded;
    if (!p || !ph_space_guarded_overlap(s, off, 1))
        return;
    pthread_mutex_lock(&p->lock);
    uint64_t n = p->xcount, i = find(p, n, off);
    if (i < n && p->v[i][0] == off) {
        if (protects(s))
            (void)view_readonly(s, off, p->v[i][1], 0);
        write_begin(p);
        for (uint64_t k = i; k + 1 < n; k++)
            set_entry(p, k, p->v[k + 1][0], p->v[k + 1][1]);
        __atomic_store_n(&p->xcount, n - 1, __ATOMIC_RELEASE);
        write_end(p);
    }
    pthread_mutex_unlock(&p->lock);
}

int ph_space_guarded_overlap(ph_space *s, uint64_t off, uint64_t len)
{
    ph_protected *p = s->guarded;
    if (!p || !ph_load_relaxed(&p->xcount))
        return 0;
    for (;;) {
        uint64_t seq = __atomic_load_n(&p->xseq, __ATOMIC_ACQUIRE);
        if (seq & 1)
            continue; /* a writer moves entries: a few stores */
        uint64_t n = PH_MIN(__atomic_load_n(&p->xcount, __ATOMIC_ACQUIRE), (uint64_t)PH_GUARDED_MAX);
        /* The last block starting before off + len, if it reaches off. */
        uint64_t i = find(p, n, off + len);
        int in = i > 0 && __atomic_load_n(&p->v[i - 1][0], __ATOMIC_ACQUIRE) +
                                  __atomic_load_n(&p->v[i - 1][1], __ATOMIC_ACQUIRE) > off;
        if (ph_load_relaxed(&p->xseq) == seq)
            return in;
    }
}

void ph_space_guard_off(ph_space *s)
{
    ph_protected *p = s->guarded;
    s->no_guard = 1;
    while (p && ph_load_relaxed(&p->xcount))
        ph_space_unguard(s, p->v[0][0]);
}

uint64_t ph_space_guarded_count(const ph_space *s)
{
    return s->guarded ? ph_load_relaxed(&s->guarded->xcount) : 0;
}
