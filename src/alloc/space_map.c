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

/* The guarded blocks: offsets and lengths, sorted by offset. */
struct ph_protected {
    pthread_mutex_t lock;
    uint64_t n, cap;
    uint64_t (*v)[2];
    uint64_t xcount;   /* n, read without the lock */
};

static uint64_t os_page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uint64_t)p : PH_PAGE_SIZE;
}

static int protects(const ph_space *s)
{
    return s->protect == PHEAP_PROTECT_ALIAS;
}

/* Read-only in the program's view: the whole OS pages of [off, off+len). */
static int view_readonly(ph_space *s, uint64_t off, uint64_t len, int readonly)
{
    uint64_t pg = os_page(), a = PH_ALIGN_UP(off, pg), e = PH_ALIGN_DOWN(off + len, pg);
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
    if (protect == PHEAP_PROTECT_KEYS)
        return (unsigned)-1;
    if (protect == PHEAP_PROTECT_AUTO && simulated)
        return PHEAP_PROTECT_OFF; /* see ph_space_map */
    return protect == PHEAP_PROTECT_OFF ? PHEAP_PROTECT_OFF : PHEAP_PROTECT_ALIAS;
}

int ph_space_map(ph_space *s, int kind, int simulated, unsigned protect, int *dax)
{
    s->wfd = -1;
    s->protect = resolve(protect, kind, simulated);
    s->protect_rw = resolve(protect, PH_MAP_SHARED, simulated);
    if (s->protect == (unsigned)-1)
        return ph_err(PHEAP_ENOTSUP, "protection keys (PHEAP_PROTECT=keys) are not available in "
                      "this build: use alias");
    s->guarded = calloc(1, sizeof(*s->guarded));
    if (!s->guarded)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    pthread_mutex_init(&s->guarded->lock, NULL);
    void *base, *view = NULL;
    int rc = ph_os_reserve(s->reserve, &base);
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
    if (!rc && protects(s))
        rc = view_readonly(s, 0, s->data_off, 1);
    return rc;
}

void ph_space_unmap(ph_space *s)
{
    if (s->view != s->base)
        ph_os_unreserve(s->view, s->reserve);
    ph_os_unreserve(s->base, s->reserve);
    s->view = s->base = NULL;
    if (s->wfd >= 0)
        close(s->wfd);
    s->wfd = -1;
    if (s->guarded) {
        pthread_mutex_destroy(&s->guarded->lock);
        free(s->guarded->v);
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

/* First index whose offset is >= off. */
static uint64_t find(const ph_protected *p, uint64_t off)
{
    uint64_t lo = 0, hi = p->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (p->v[mid][0] < off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void ph_space_guard(ph_space *s, uint64_t off, uint64_t len)
{
    ph_protected *p = s->guarded;
    pthread_mutex_lock(&p->lock);
    uint64_t i = find(p, off);
    if (i < p->n && p->v[i][0] == off)
        goto out;
    if (p->n == p->cap) {
        uint64_t cap = p->cap ? p->cap * 2 : 64;
        void *v = realloc(p->v, cap * sizeof(*p->v));
        if (!v)
            goto out; /* stays writable: best effort */
        p->v = v;
        p->cap = cap;
    }
    if (protects(s) && view_readonly(s, off, len, 1) != 0)
        goto out;
    memmove(&p->v[i + 1], &p->v[i], (p->n - i) * sizeof(*p->v));
    p->v[i][0] = off;
    p->v[i][1] = len;
    p->n++;
    ph_store(&p->xcount, p->n);
out:
    pthread_mutex_unlock(&p->lock);
}

void ph_space_unguard(ph_space *s, uint64_t off)
{
    ph_protected *p = s->guarded;
    if (!p || !ph_load_relaxed(&p->xcount))
        return;
    pthread_mutex_lock(&p->lock);
    uint64_t i = find(p, off);
    if (i < p->n && p->v[i][0] == off) {
        if (protects(s))
            (void)view_readonly(s, off, p->v[i][1], 0);
        memmove(&p->v[i], &p->v[i + 1], (p->n - i - 1) * sizeof(*p->v));
        p->n--;
        ph_store(&p->xcount, p->n);
    }
    pthread_mutex_unlock(&p->lock);
}

int ph_space_guarded_at(ph_space *s, uint64_t off)
{
    ph_protected *p = s->guarded;
    if (!p || !ph_load_relaxed(&p->xcount))
        return 0;
    pthread_mutex_lock(&p->lock);
    uint64_t i = find(p, off + 1); /* the first block starting after off */
    int in = i > 0 && off - p->v[i - 1][0] < p->v[i - 1][1];
    pthread_mutex_unlock(&p->lock);
    return in;
}

uint64_t ph_space_guarded_count(const ph_space *s)
{
    return s->guarded ? ph_load_relaxed(&s->guarded->xcount) : 0;
}
