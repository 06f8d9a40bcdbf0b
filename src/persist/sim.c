/*
 * sim.c -- the crash simulator back end.  A flush snapshots the line into
 * the thread's pending list; the thread's next fence copies its pending
 * snapshots into the durable image under the simulator lock.  Snapshots
 * are taken at flush time: a store made after the flush but before the
 * fence is not covered by that flush (it is only a dirty line, which
 * eviction may or may not write back).  A non-temporal store is a pending
 * snapshot of its own words only.
 *
 * Writes to one location reach media in the order they were made: a line
 * never goes back to older contents once newer ones are durable.  Each
 * snapshot (and each write-back at a store) takes a stamp from a clock
 * under the lock, and each word of the durable image keeps the stamp of
 * what it holds; a fence copies a word of a snapshot only over an older
 * one.  Without that, a snapshot fenced late -- a thread that flushed a
 * line and fenced after another thread flushed and fenced newer contents
 * of the same line, or after the line was written back at a store --
 * would take those newer contents back out of the durable image.
 *
 * Durable stores (ph_persist_write, the words of non-temporal stores) are
 * counted: a crash can be taken just after any of them, and at each one
 * the stored line may be written back on its own (eviction at a store), so
 * the durable image can hold a state between two stores to one line that
 * no later store overwrote there.  Every store, flush and fence also feeds
 * an order-sensitive hash: equal calls give equal hashes.
 *
 * The page-cache model (s->pages) is what the msync back end gets from the
 * kernel: the program stores into shared page-cache pages, which the
 * kernel writes back whole, at any time and in any order; fdatasync is the
 * only point after which pages are known to be on media.  So a flush takes
 * no snapshot, it only notes that the thread has something to sync (as
 * msync_flush does), and that thread's fence is a sync of the file: every
 * page that differs from the durable image is copied into it, whoever
 * stored it and whether or not it was flushed, and the length becomes
 * durable.  Between syncs, any page may have been written back with what
 * it held at any moment: at a store (eviction at a store, the whole page)
 * and at a crash (each differing page whole, or not).
 */
#include "persist/sim.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

typedef struct ph_sim_line {
    uint64_t index;                 /* line number from the heap start */
    uint32_t from, len;             /* bytes of the line covered: all for a
                                       flush, its words for a non-temporal
                                       store */
    uint32_t nt;                    /* a non-temporal store */
    uint64_t stamp;                 /* when it was taken (s->stamp) */
    uint8_t data[PH_CACHE_LINE];    /* contents at flush time */
} ph_sim_line;

struct ph_sim_pending {
    ph_sim *owner;
    size_t n, cap;
    ph_sim_line *lines;             /* snapshots to apply at the fence */
    unsigned dirty;                 /* page-cache model: flushed since the last
                                       fence, so the fence syncs (no snapshots) */
};

enum { EV_STORE = 1, EV_FLUSH, EV_FENCE };

int ph_sim_create(ph_sim **out, char *working, char *view, uint64_t size, uint64_t capacity, int fd)
{
    ph_sim *s = calloc(1, sizeof(*s));
    if (!s)
        return ph_err(PHEAP_ENOMEM, "simulator: out of memory");
    s->durable = ph_os_alloc_pages(capacity);
    s->changed = calloc((capacity / PH_SIM_PAGE + 63) / 64, sizeof(uint64_t));
    s->xnt = ph_os_alloc_pages(PH_ALIGN_UP(capacity / 64, 4096));
    s->stamps = ph_os_alloc_pages(PH_ALIGN_UP(capacity, 4096));
    if (!s->durable || !s->changed || !s->xnt || !s->stamps) {
        ph_os_free_pages(s->stamps, PH_ALIGN_UP(capacity, 4096));
        ph_os_free_pages(s->xnt, PH_ALIGN_UP(capacity / 64, 4096));
        free(s->changed);
        free(s);
        return ph_err(PHEAP_ENOMEM, "simulator: cannot allocate a durable image of %llu bytes",
                      (unsigned long long)capacity);
    }
    /* A private mapping of the file: pages are copied only when the image
     * changes them.  Beyond `size` it is zeroed memory, as growth wants. */
    int rc = size ? ph_os_map_file(fd, s->durable, size, 0, PH_MAP_PRIVATE, 0, NULL) : 0;
    if (rc) {
        ph_os_free_pages(s->durable, capacity);
        ph_os_free_pages(s->xnt, PH_ALIGN_UP(capacity / 64, 4096));
        ph_os_free_pages(s->stamps, PH_ALIGN_UP(capacity, 4096));
        free(s->changed);
        free(s);
        return rc;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->working = working;
    s->view = view != working ? view : NULL;
    s->size = s->durable_size = size;
    s->capacity = capacity;
    *out = s;
    return 0;
}

void ph_sim_destroy(ph_sim *s)
{
    if (!s)
        return;
    ph_os_free_pages(s->durable, s->capacity);
    ph_os_free_pages(s->xnt, PH_ALIGN_UP(s->capacity / 64, 4096));
    ph_os_free_pages(s->stamps, PH_ALIGN_UP(s->capacity, 4096));
    free(s->changed);
    free(s->crash_image);
    free(s->crash_site);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static int bad_probability(const char *what, double p)
{
    return ph_err(PHEAP_EINVAL, "%s %g is outside [0, 1]", what, p);
}

int ph_sim_configure(ph_sim *s, const ph_sim_crash_spec *crash, const char *path,
                     double store_evict, uint64_t store_seed, uint64_t schedule_seed)
{
    if ((crash->fence || crash->store) && !path)
        return ph_err(PHEAP_EINVAL, "sim_crash_fence and sim_crash_store need sim_crash_image");
    if (!(crash->evict >= 0.0 && crash->evict <= 1.0))
        return bad_probability("sim_evict_probability", crash->evict);
    if (!(store_evict >= 0.0 && store_evict <= 1.0))
        return bad_probability("sim_store_evict_probability", store_evict);
    if (crash->pages && (crash->words || crash->nt_lag))
        return ph_err(PHEAP_EINVAL, "simulator: the page-cache model writes whole pages back; "
                      "it takes neither words nor non-temporal lag");
    s->crash = *crash;
    s->pages = crash->pages;
    s->crash_image = path ? strdup(path) : NULL;
    s->crash_site = crash->site ? strdup(crash->site) : NULL;
    s->crash.site = s->crash_site;
    if ((path && !s->crash_image) || (crash->site && !s->crash_site))
        return ph_err(PHEAP_ENOMEM, "simulator: out of memory");
    s->store_evict = store_evict;
    s->store_seed = store_seed;
    s->schedule_seed = schedule_seed;
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

/* Marks the durable image's pages of [off, off+len) as changed since the
 * file was read (lock held): a clean close writes only those. */
static void changed(ph_sim *s, uint64_t off, uint64_t len)
{
    for (uint64_t p = off / PH_SIM_PAGE; p <= (off + len - 1) / PH_SIM_PAGE; p++)
        s->changed[p / 64] |= 1ull << (p % 64);
}

/* Copies [off, off+len) of the working copy into the durable image as it
 * is now (lock held): a write-back with a fresh stamp, newer than every
 * snapshot taken so far. */
static void write_back(ph_sim *s, uint64_t off, uint64_t len)
{
    uint64_t stamp = ++s->stamp;
    memcpy(s->durable + off, s->working + off, len);
    for (uint64_t w = off / 8; w < (off + len) / 8; w++)
        s->stamps[w] = stamp;
    changed(s, off, len);
}

static int bit(const uint64_t *v, uint64_t i)
{
    return (v[i / 64] >> (i % 64)) & 1;
}

enum { SYNC_CHUNK = 4096 }; /* pages whose mapping is asked about at once */

/* Page-cache model: an fdatasync (lock held).  Every page of the file that
 * differs from the durable image is written back, and the length is
 * durable: a sync leaves the durable image equal to the working copy.
 * Comparing every page at every fence would cost most of a crash
 * enumeration; but a page of the private working copy that still maps the
 * file as it is reads as the file does, and so does the durable image's
 * unless the simulator wrote it (s->changed): those are skipped.  (The
 * shared working copy of a protected heap is not the file's: every page
 * is compared.) */
static void sync_pages_locked(ph_sim *s)
{
    uint64_t pages = (s->size + PH_SIM_PAGE - 1) / PH_SIM_PAGE;
    for (uint64_t p0 = 0; p0 < pages; p0 += SYNC_CHUNK) {
        uint64_t n = PH_MIN((uint64_t)SYNC_CHUNK, pages - p0), file[SYNC_CHUNK / 64];
        if (s->view || ph_os_file_pages(s->working + p0 * PH_SIM_PAGE, n, file) != 0)
            memset(file, 0, sizeof(file));
        for (uint64_t i = 0; i < n; i++) {
            uint64_t off = (p0 + i) * PH_SIM_PAGE, len = PH_MIN((uint64_t)PH_SIM_PAGE, s->size - off);
            if (bit(file, i) && !bit(s->changed, p0 + i))
                continue;
            if (memcmp(s->durable + off, s->working + off, len) != 0)
                write_back(s, off, len);
        }
    }
    s->durable_size = s->size;
}

/* Writes [0, len) of buf to fd, leaving holes where whole pages are zero
 * (they read as zeros; most of a small heap is). */
static int write_sparse(int fd, const char *buf, uint64_t len)
{
    static const char zero[PH_SIM_PAGE];
    if (ftruncate(fd, (off_t)len) != 0)
        return ph_err_sys("simulator: cannot size crash image", "");
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < len; off += PH_SIM_PAGE) {
        uint64_t n = PH_MIN((uint64_t)PH_SIM_PAGE, len - off);
        if (memcmp(buf + off, zero, n) != 0)
            rc = ph_os_pwrite(fd, buf + off, n, off);
    }
    return rc;
}

/* Adds one event to the trace: its position in the run and its content. */
static void trace(ph_sim *s, uint64_t kind, uint64_t a, uint64_t b)
{
    uint64_t i = __atomic_fetch_add(&s->xevents, 1, __ATOMIC_RELAXED);
    uint64_t h = ph_mix64(i ^ ph_mix64(kind << 56 ^ a ^ ph_mix64(b)));
    __atomic_fetch_add(&s->xtrace, h, __ATOMIC_RELAXED);
}

/* Whether `word` holds a non-temporal store not yet fenced. */
static int nt_unfenced(const ph_sim *s, uint64_t word)
{
    return (ph_load_relaxed(&s->xnt[word / 64]) >> (word % 64)) & 1;
}

/* Salts of the draws, so that a page, a line and a word of the same
 * number, and the length, are drawn apart. */
#define SALT_WORD 0x574f524453ull
#define SALT_PAGE 0x5041474553ull
#define SALT_LENGTH 0x4c454e475448ull

/* The parts of one part of the image (`img`, at `off` in the file, `len`
 * bytes: a line, or a page in the page-cache model) that take the working
 * copy's contents `w`: the whole part, or each 8-byte word on its own,
 * drawn from the seed. */
static void join_part(const ph_sim *s, const ph_sim_crash_spec *spec, char *img, const char *w,
                      uint64_t off, uint64_t len)
{
    if (memcmp(img, w, len) == 0)
        return;
    if (spec->pages || !spec->words) {
        uint64_t index = spec->pages ? off / PH_SIM_PAGE : off / PH_CACHE_LINE;
        if (ph_sim_evicts(spec->pages ? spec->seed ^ SALT_PAGE : spec->seed, index, spec->evict))
            memcpy(img, w, len);
        return;
    }
    for (uint64_t k = 0; k < len; k += 8)
        if (memcmp(img + k, w + k, 8) != 0 && !(spec->nt_lag && nt_unfenced(s, (off + k) / 8)) &&
            ph_sim_evicts(spec->seed ^ SALT_WORD, (off + k) / 8, spec->evict))
            memcpy(img + k, w + k, 8);
}

/* The file length of a crash image: the durable one; in the page-cache
 * model a length not yet synced may be on media too (the file system may
 * have written the inode back), drawn like a page. */
static uint64_t image_length(const ph_sim *s, const ph_sim_crash_spec *spec)
{
    if (spec->pages && s->size != s->durable_size &&
        ph_sim_evicts(spec->seed ^ SALT_LENGTH, 0, spec->evict))
        return s->size;
    return s->durable_size;
}

/* Called with s->lock held (or with no other thread running).  The image
 * is as long as image_length says: the durable image, written as it is,
 * then each part (line or page) that gains some of the working copy
 * written again. */
static int write_image_locked(ph_sim *s, const char *path, const ph_sim_crash_spec *spec)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return ph_err_sys("simulator: cannot create crash image", path);
    uint64_t length = image_length(s, spec);
    int rc = write_sparse(fd, s->durable, length);
    uint64_t end = PH_MIN(length, s->size), step = spec->pages ? PH_SIM_PAGE : PH_CACHE_LINE;
    for (uint64_t off = 0; rc == 0 && spec->evict > 0.0 && off < end; off += step) {
        uint64_t len = PH_MIN(step, end - off);
        char part[PH_SIM_PAGE];
        if (memcmp(s->durable + off, s->working + off, len) == 0)
            continue;
        memcpy(part, s->durable + off, len);
        join_part(s, spec, part, s->working + off, off, len);
        if (memcmp(part, s->durable + off, len) != 0)
            rc = ph_os_pwrite(fd, part, len, off);
    }
    if (close(fd) != 0 && rc == 0)
        rc = ph_err_sys("simulator: cannot write crash image", path);
    return rc;
}

/* The automatic dump (lock held). */
static void dump_locked(ph_sim *s)
{
    int rc = write_image_locked(s, s->crash_image, &s->crash);
    if (rc && !s->crash_error)
        s->crash_error = rc;
}

int ph_sim_write_image(ph_sim *s, const char *path, const ph_sim_crash_spec *spec)
{
    if (!(spec->evict >= 0.0 && spec->evict <= 1.0))
        return bad_probability("evict probability", spec->evict);
    pthread_mutex_lock(&s->lock);
    int rc = write_image_locked(s, path, spec);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int ph_sim_write_durable(ph_sim *s, int fd)
{
    pthread_mutex_lock(&s->lock);
    int rc = ftruncate(fd, (off_t)s->durable_size) == 0
                 ? 0 : ph_err_sys("simulator: cannot size", "heap file");
    for (uint64_t p = 0; rc == 0 && p * PH_SIM_PAGE < s->durable_size; p++)
        if ((s->changed[p / 64] >> (p % 64)) & 1)
            rc = ph_os_pwrite(fd, s->durable + p * PH_SIM_PAGE,
                              PH_MIN((uint64_t)PH_SIM_PAGE, s->durable_size - p * PH_SIM_PAGE),
                              p * PH_SIM_PAGE);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void ph_sim_file_resize(ph_sim *s, uint64_t size)
{
    pthread_mutex_lock(&s->lock);
    s->size = size;
    pthread_mutex_unlock(&s->lock);
}

/* An fsync: the length is durable; in the page-cache model every page is
 * too (fsync writes back the file's dirty pages before its inode). */
void ph_sim_file_sync(ph_sim *s)
{
    pthread_mutex_lock(&s->lock);
    if (s->pages)
        sync_pages_locked(s);
    s->durable_size = s->size;
    pthread_mutex_unlock(&s->lock);
}

void ph_sim_punch(ph_sim *s, uint64_t off, uint64_t len)
{
    if (s->pages)
        return; /* the working copy's zeros are pages like any other: durable at
                   the next sync, each drawn at a crash before it */
    pthread_mutex_lock(&s->lock);
    if (off < s->size) {
        len = PH_MIN(len, s->size - off);
        /* Fresh zero pages (no copy, no fault until written) where the
         * range is whole OS pages, as a punch always is.  The working
         * copy is the caller's to clear. */
        if (ph_os_map_anon(s->durable + off, len) != 0)
            memset(s->durable + off, 0, len);
        changed(s, off, len);
    }
    pthread_mutex_unlock(&s->lock);
}

uint64_t ph_sim_clock_ns(const ph_sim *s)
{
    return ph_load_relaxed(&s->xfences) * 10000u;
}

/* The thread's pending list, made at its first use. */
static struct ph_sim_pending *pending_of(ph_sim *s, ph_pctx *c)
{
    if (!c->pending) {
        c->pending = calloc(1, sizeof(*c->pending));
        if (!c->pending)
            abort(); /* test-only back end: no way to report from a flush */
        c->pending->owner = s;
    }
    return c->pending;
}

/* Whether the thread has flushed or stored something it has not fenced
 * yet (such threads are counted in s->xpending). */
static int pending_any(const struct ph_sim_pending *q)
{
    return q && (q->n > 0 || q->dirty);
}

static ph_sim_line *pending_add(ph_sim *s, ph_pctx *c)
{
    struct ph_sim_pending *q = pending_of(s, c);
    if (q->n == q->cap) {
        q->cap = q->cap ? q->cap * 2 : 64;
        q->lines = realloc(q->lines, q->cap * sizeof(*q->lines));
        if (!q->lines)
            abort();
    }
    if (!pending_any(q))
        __atomic_fetch_add(&s->xpending, 1, __ATOMIC_RELAXED);
    return &q->lines[q->n++];
}

/* Page-cache model: the thread has something to sync at its next fence
 * (what msync_flush notes), and no snapshot to take. */
static void mark_dirty(ph_sim *s, ph_pctx *c)
{
    struct ph_sim_pending *q = pending_of(s, c);
    if (!pending_any(q))
        __atomic_fetch_add(&s->xpending, 1, __ATOMIC_RELAXED);
    q->dirty = 1;
}

/* Whether `*addr` is in the working copy, through either view; a view
 * address is turned into the working copy's. */
static int in_working(const ph_sim *s, uintptr_t *addr)
{
    uint64_t size = ph_load_relaxed(&s->size);
    if (*addr - (uintptr_t)s->working < size)
        return 1;
    if (s->view && *addr - (uintptr_t)s->view < size) {
        *addr = *addr - (uintptr_t)s->view + (uintptr_t)s->working;
        return 1;
    }
    return 0;
}

/* One durable 8-byte store at working offset `at`, already made: counts
 * it, may write its line (or, non-temporal, its word) back, and takes the
 * crash that follows it. */
static void stored(ph_sim *s, uint64_t at, uint64_t v, int nt)
{
    uint64_t n = __atomic_add_fetch(&s->xstores, 1, __ATOMIC_RELAXED);
    trace(s, EV_STORE, at, v);
    int evict = s->store_evict > 0.0 && ph_sim_evicts(s->store_seed, n, s->store_evict);
    if (!evict && n != s->crash.store)
        return;
    pthread_mutex_lock(&s->lock);
    if (evict && s->pages) { /* the kernel writes back whole pages */
        uint64_t from = at & ~(uint64_t)(PH_SIM_PAGE - 1);
        write_back(s, from, PH_MIN((uint64_t)PH_SIM_PAGE, s->size - from));
    } else if (evict) {
        write_back(s, nt ? at : at & ~(uint64_t)(PH_CACHE_LINE - 1), nt ? 8 : PH_CACHE_LINE);
    }
    if (n == s->crash.store)
        dump_locked(s);
    pthread_mutex_unlock(&s->lock);
}

void ph_sim_store(struct ph_sim *s, ph_pctx *c, uint64_t *dst, uint64_t v)
{
    (void)c;
    ph_store(dst, v);
    uintptr_t a = (uintptr_t)dst;
    if (!in_working(s, &a))
        return;
    uint64_t at = (uint64_t)(a - (uintptr_t)s->working), word = at / 8;
    /* The word is now an ordinary dirty word, whatever a non-temporal
     * store left pending in it. */
    __atomic_fetch_and(&s->xnt[word / 64], ~(1ull << (word % 64)), __ATOMIC_RELAXED);
    stored(s, at, v, 0);
}

/* Page-cache model: the lines are in the page cache already; the flush
 * only notes that the thread's next fence must sync the file. */
static void page_flush(ph_sim *s, ph_pctx *c, uintptr_t line, uint64_t n)
{
    mark_dirty(s, c);
    for (uint64_t i = 0; i < n; i++, line += PH_CACHE_LINE) {
        uintptr_t a = line;
        if (in_working(s, &a))
            trace(s, EV_FLUSH, (a - (uintptr_t)s->working) / PH_CACHE_LINE, 0);
    }
}

static void sim_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    ph_sim *s = p->sim;
    if (s->pages) {
        page_flush(s, c, line, n);
        return;
    }
    /* Stamps and contents taken together: a later snapshot of a line has
     * the higher stamp and contents at least as new. */
    pthread_mutex_lock(&s->lock);
    for (uint64_t i = 0; i < n; i++, line += PH_CACHE_LINE) {
        uintptr_t a = line;
        if (!in_working(s, &a))
            continue;
        ph_sim_line *sl = pending_add(s, c);
        sl->index = (a - (uintptr_t)s->working) / PH_CACHE_LINE;
        sl->from = 0;
        sl->len = PH_CACHE_LINE;
        sl->nt = 0;
        sl->stamp = ++s->stamp;
        memcpy(sl->data, (const void *)line, PH_CACHE_LINE);
        trace(s, EV_FLUSH, sl->index, 0);
    }
    pthread_mutex_unlock(&s->lock);
}

/* Non-temporal stores reach memory by themselves: only their own words
 * become durable at the fence, not the rest of the line; until then each
 * word is on its own (a crash may keep any subset).  In the page-cache
 * model they are plain stores to the page, to sync at the fence (as
 * msync_store). */
static void sim_store_nt(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    ph_sim *s = p->sim;
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
    uintptr_t a = (uintptr_t)dst;
    if (s->pages)
        mark_dirty(s, c);
    if (!in_working(s, &a))
        return;
    uint64_t at = (uint64_t)(a - (uintptr_t)s->working);
    if (s->pages) {
        for (unsigned i = 0; i < n; i++)
            stored(s, at + 8 * i, src[i], 0);
        return;
    }
    ph_sim_line *sl = pending_add(s, c);
    sl->index = at / PH_CACHE_LINE;
    sl->from = (uint32_t)(at % PH_CACHE_LINE);
    sl->len = n * (uint32_t)sizeof(*src);
    sl->nt = 1;
    memcpy(sl->data + sl->from, src, sl->len);
    pthread_mutex_lock(&s->lock); /* after the stores: newer than any snapshot without them */
    sl->stamp = ++s->stamp;
    pthread_mutex_unlock(&s->lock);
    for (unsigned i = 0; i < n; i++) {
        uint64_t word = at / 8 + i;
        __atomic_fetch_or(&s->xnt[word / 64], 1ull << (word % 64), __ATOMIC_RELAXED);
        stored(s, at + 8 * i, src[i], 1);
    }
}

/* A seeded pause before some fences, so that threads of a simulated heap
 * meet in states a free run reaches rarely (another thread's stores
 * unfenced while this one goes on). */
static void schedule_pause(const ph_sim *s, const ph_pctx *c)
{
    uint64_t r = ph_mix64(s->schedule_seed ^ ph_mix64(c->xfences ^ (uintptr_t)c));
    if (r & 3)
        return;
    struct timespec ts = {0, (long)(1000 + (r >> 32) % 100000)};
    nanosleep(&ts, NULL);
}

/* Whether fence site `site` is the one `want` names: a function name, or
 * file:line with the file's name alone or its path. */
static int site_is(const ph_site *site, const char *want)
{
    if (!site)
        return 0;
    const char *colon = strrchr(want, ':');
    if (!colon)
        return strcmp(site->func, want) == 0;
    size_t n = (size_t)(colon - want), len = strlen(site->file);
    return (unsigned long)site->line == strtoul(colon + 1, NULL, 10) && len >= n &&
           strncmp(site->file + len - n, want, n) == 0 && (len == n || site->file[len - n - 1] == '/');
}

/* Applies the thread's snapshots to the durable image (lock held). */
static void apply_snapshots_locked(ph_sim *s, const struct ph_sim_pending *q)
{
    for (size_t i = 0; i < q->n; i++) {
        const ph_sim_line *sl = &q->lines[i];
        for (uint32_t k = sl->from; k < sl->from + sl->len; k += 8) {
            uint64_t w = sl->index * (PH_CACHE_LINE / 8) + k / 8;
            if (s->stamps[w] < sl->stamp) { /* never over newer contents */
                memcpy(s->durable + 8 * w, sl->data + k, 8);
                s->stamps[w] = sl->stamp;
            }
        }
        changed(s, sl->index * PH_CACHE_LINE + sl->from, sl->len);
        for (uint64_t w = (sl->index * PH_CACHE_LINE + sl->from) / 8; sl->nt && w <
             (sl->index * PH_CACHE_LINE + sl->from + sl->len) / 8; w++)
            __atomic_fetch_and(&s->xnt[w / 64], ~(1ull << (w % 64)), __ATOMIC_RELAXED);
    }
}

/* A fence: the crash it is the point of, then the thread's snapshots made
 * durable -- or, in the page-cache model, the file synced when the thread
 * flushed since its last fence (a fence with nothing flushed returns at
 * once in the msync back end: it syncs nothing here either). */
static void sim_fence(ph_persist *p, ph_pctx *c)
{
    ph_sim *s = p->sim;
    struct ph_sim_pending *q = c->pending;
    if (s->schedule_seed)
        schedule_pause(s, c);
    if (s->before_fence)
        s->before_fence(s->before_fence_arg);
    pthread_mutex_lock(&s->lock);
    uint64_t no = ++s->xfences;
    int mine = pending_any(q);
    if (s->crash.contended || s->crash.site) {
        /* Another thread's stores are unfenced; this fence is at the site. */
        int contended = ph_load_relaxed(&s->xpending) > (uint32_t)mine;
        if ((!s->crash.contended || contended) && (!s->crash.site || site_is(c->site, s->crash.site)))
            no = ++s->xcontended;
        else
            no = 0;
    }
    if (no && no == s->crash.fence)
        dump_locked(s);
    if (mine) {
        apply_snapshots_locked(s, q);
        if (q->dirty)
            sync_pages_locked(s);
        q->n = 0;
        q->dirty = 0;
        __atomic_fetch_sub(&s->xpending, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&s->lock);
    trace(s, EV_FENCE, (uint64_t)mine, 0);
}

void ph_sim_pending_free(struct ph_sim_pending *q)
{
    if (!q)
        return;
    if (pending_any(q))
        __atomic_fetch_sub(&q->owner->xpending, 1, __ATOMIC_RELAXED);
    free(q->lines);
    free(q);
}

const ph_persist_ops ph_sim_ops = {"sim", sim_flush, sim_fence, sim_store_nt};
