/*
 * sim.c -- the crash simulator back end.  A flush snapshots the line into
 * the thread's pending list; the thread's next fence copies its pending
 * snapshots into the durable image under the simulator lock.  Snapshots
 * are taken at flush time: a store made after the flush but before the
 * fence is not covered by that flush (it is only a dirty line, which
 * eviction may or may not write back).  A non-temporal store is a pending
 * snapshot of its own words only.
 */
#include "persist/sim.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

typedef struct ph_sim_line {
    uint64_t index;                 /* line number from the heap start */
    uint32_t from, len;             /* bytes of the line covered: all for a
                                       flush, its words for a non-temporal
                                       store */
    uint8_t data[PH_CACHE_LINE];    /* contents at flush time */
} ph_sim_line;

struct ph_sim_pending {
    ph_sim *owner;
    size_t n, cap;
    ph_sim_line *lines;
};

int ph_sim_create(ph_sim **out, char *working, uint64_t size, uint64_t capacity, int fd)
{
    ph_sim *s = calloc(1, sizeof(*s));
    if (!s)
        return ph_err(PHEAP_ENOMEM, "simulator: out of memory");
    s->durable = ph_os_alloc_pages(capacity);
    if (!s->durable) {
        free(s);
        return ph_err(PHEAP_ENOMEM, "simulator: cannot allocate a durable image of %llu bytes",
                      (unsigned long long)capacity);
    }
    ssize_t n = ph_os_pread(fd, s->durable, size, 0);
    if (n < 0 || (uint64_t)n != size) {
        ph_os_free_pages(s->durable, capacity);
        free(s);
        return n < 0 ? (int)n : ph_err(PHEAP_ETRUNCATED, "simulator: short read of the heap file");
    }
    pthread_mutex_init(&s->lock, NULL);
    s->working = working;
    s->size = size;
    s->capacity = capacity;
    *out = s;
    return 0;
}

void ph_sim_destroy(ph_sim *s)
{
    if (!s)
        return;
    ph_os_free_pages(s->durable, s->capacity);
    free(s->crash_image);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ph_sim_set_crash_fence(ph_sim *s, uint64_t fence, const char *path, double evict,
                           uint64_t seed)
{
    if (fence && !path)
        return ph_err(PHEAP_EINVAL, "sim_crash_fence needs sim_crash_image");
    if (!(evict >= 0.0 && evict <= 1.0))
        return ph_err(PHEAP_EINVAL, "sim_evict_probability %g is outside [0, 1]", evict);
    s->crash_fence = fence;
    s->crash_image = path ? strdup(path) : NULL;
    s->crash_evict = evict;
    s->crash_seed = seed;
    if (path && !s->crash_image)
        return ph_err(PHEAP_ENOMEM, "simulator: out of memory");
    return 0;
}

int ph_sim_evicts(uint64_t seed, uint64_t index, double evict)
{
    if (evict <= 0.0)
        return 0;
    if (evict >= 1.0)
        return 1;
    return ph_unit_double(ph_mix64(seed ^ ph_mix64(index))) < evict;
}

/* Called with s->lock held (or with no other thread running). */
static int write_image_locked(ph_sim *s, const char *path, double evict, uint64_t seed)
{
    enum { STAGE = 1u << 20 };
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return ph_err_sys("simulator: cannot create crash image", path);
    char *stage = malloc(STAGE);
    int rc = stage ? 0 : ph_err(PHEAP_ENOMEM, "simulator: out of memory");
    for (uint64_t off = 0; rc == 0 && off < s->size; off += STAGE) {
        uint64_t len = PH_MIN((uint64_t)STAGE, s->size - off);
        memcpy(stage, s->durable + off, len);
        for (uint64_t l = 0; evict > 0.0 && l < len; l += PH_CACHE_LINE) {
            const char *w = s->working + off + l;
            if (memcmp(stage + l, w, PH_CACHE_LINE) != 0 &&
                ph_sim_evicts(seed, (off + l) / PH_CACHE_LINE, evict))
                memcpy(stage + l, w, PH_CACHE_LINE);
        }
        rc = ph_os_pwrite(fd, stage, len, off);
    }
    free(stage);
    if (close(fd) != 0 && rc == 0)
        rc = ph_err_sys("simulator: cannot write crash image", path);
    return rc;
}

int ph_sim_write_image(ph_sim *s, const char *path, double evict, uint64_t seed)
{
    if (!(evict >= 0.0 && evict <= 1.0))
        return ph_err(PHEAP_EINVAL, "evict probability %g is outside [0, 1]", evict);
    pthread_mutex_lock(&s->lock);
    int rc = write_image_locked(s, path, evict, seed);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int ph_sim_write_durable(ph_sim *s, int fd)
{
    pthread_mutex_lock(&s->lock);
    int rc = ph_os_pwrite(fd, s->durable, s->size, 0);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static ph_sim_line *pending_add(ph_sim *s, ph_pctx *c)
{
    struct ph_sim_pending *q = c->pending;
    if (!q) {
        q = calloc(1, sizeof(*q));
        if (!q)
            abort(); /* test-only back end: no way to report from a flush */
        q->owner = s;
        c->pending = q;
    }
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->lines = realloc(q->lines, q->cap * sizeof(*q->lines));
        if (!q->lines)
            abort();
    }
    return &q->lines[q->n++];
}

static int in_working(const ph_sim *s, uintptr_t addr)
{
    return addr >= (uintptr_t)s->working && addr < (uintptr_t)s->working + s->size;
}

static void sim_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    ph_sim *s = p->sim;
    for (uint64_t i = 0; i < n; i++, line += PH_CACHE_LINE) {
        if (!in_working(s, line))
            continue;
        ph_sim_line *sl = pending_add(s, c);
        sl->index = (line - (uintptr_t)s->working) / PH_CACHE_LINE;
        sl->from = 0;
        sl->len = PH_CACHE_LINE;
        memcpy(sl->data, (const void *)line, PH_CACHE_LINE);
    }
}

/* Non-temporal stores reach memory by themselves: only their own words
 * become durable at the fence, not the rest of the line. */
static void sim_store_nt(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    ph_sim *s = p->sim;
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
    if (!in_working(s, (uintptr_t)dst))
        return;
    uint64_t at = (uint64_t)((uintptr_t)dst - (uintptr_t)s->working);
    ph_sim_line *sl = pending_add(s, c);
    sl->index = at / PH_CACHE_LINE;
    sl->from = (uint32_t)(at % PH_CACHE_LINE);
    sl->len = n * (uint32_t)sizeof(*src);
    memcpy(sl->data + sl->from, src, sl->len);
}

static void sim_fence(ph_persist *p, ph_pctx *c)
{
    ph_sim *s = p->sim;
    struct ph_sim_pending *q = c->pending;
    pthread_mutex_lock(&s->lock);
    uint64_t no = ++s->xfences;
    if (no == s->crash_fence) {
        int rc = write_image_locked(s, s->crash_image, s->crash_evict, s->crash_seed);
        if (rc && !s->crash_error)
            s->crash_error = rc;
    }
    for (size_t i = 0; q && i < q->n; i++) {
        const ph_sim_line *sl = &q->lines[i];
        memcpy(s->durable + sl->index * PH_CACHE_LINE + sl->from, sl->data + sl->from, sl->len);
    }
    if (q)
        q->n = 0;
    pthread_mutex_unlock(&s->lock);
}

void ph_sim_pending_free(struct ph_sim_pending *q)
{
    if (!q)
        return;
    free(q->lines);
    free(q);
}

const ph_persist_ops ph_sim_ops = {"sim", sim_flush, sim_fence, sim_store_nt};
