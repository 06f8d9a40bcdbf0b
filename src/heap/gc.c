/*
 * gc.c -- tracing from the roots: pheap_recover (GC mode after a crash),
 * pheap_gc (leak collection, either mode), the filters of precise tracing,
 * and the marking threads.
 *
 * Marking.  Each thread pops blocks from a stack of its own and pushes the
 * blocks they reach that it marked first (ph_gc_mark sets a mark bit
 * atomically, so each block is visited once).  A thread whose stack is
 * deep while the shared pool is empty moves half of its stack there; a
 * thread whose stack is empty takes from the pool, or waits; when every
 * thread waits and the pool is empty, marking is over.  The caller is
 * thread 0 and reports progress.  Nothing is written during marking: the
 * engine's sweep (alloc/engine_gc.c) turns the marks into frees.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "alloc/engine.h"
#include "heap/heap.h"
#include "heap/names.h"
#include "os/os.h"
#include "util/error.h"

#define PH_GC_THREADS_MAX 64u
#define SHARE_DEPTH 8u   /* a stack this deep gives half to an empty pool (a binary
                            tree's depth-first stack stays shallow) */
#define TAKE_MAX 256u    /* entries taken from the pool at once */
#define PROGRESS_NS (50u * 1000u * 1000u)

typedef struct filter_entry {
    char name[PHEAP_ROOT_NAME_MAX + 1];
    pheap_filter_fn fn;
} filter_entry;

/* Per handle: the registered filters and the last trace's figures. */
typedef struct ph_gc_state {
    pthread_mutex_t lock;
    unsigned nfilters;
    filter_entry filters[PHEAP_ROOTS_MAX];
    uint64_t runs, marked, freed_blocks, freed_bytes, elapsed_ns, time;
} ph_gc_state;

typedef struct work {
    uint64_t off, bytes;
    pheap_filter_fn fn;  /* NULL: conservative */
} work;

typedef struct marker {
    pheap *h;
    ph_gc_marks *m;
    const pheap_gc_options *o;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    work *pool;          /* shared entries, under lock */
    size_t npool, cap;
    unsigned nthreads, idle;
    int done, oom;
    uint64_t xmarked;    /* blocks visited, for progress (relaxed) */
    uint64_t next_report;
} marker;

struct pheap_tracer {
    marker *mk;
    work *stack;
    size_t n, cap;
    uint64_t visited, bad, reported;
    int oom;
    unsigned index;
};

/* ---- the handle's state ------------------------------------------------------------- */

static ph_gc_state *gc_state(pheap *h)
{
    ph_gc_state *g = ph_load(&h->gcs);
    if (g)
        return g;
    pthread_mutex_lock(&h->root_lock);
    if (!(g = h->gcs) && (g = calloc(1, sizeof(*g))) != NULL) {
        pthread_mutex_init(&g->lock, NULL);
        ph_store(&h->gcs, g);
    }
    pthread_mutex_unlock(&h->root_lock);
    return g;
}

void ph_gc_state_free(pheap *h)
{
    if (!h->gcs)
        return;
    pthread_mutex_destroy(&h->gcs->lock);
    free(h->gcs);
    h->gcs = NULL;
}

void ph_gc_stats(pheap *h, struct pheap_stats *out)
{
    ph_gc_state *g = ph_load(&h->gcs);
    if (!g)
        return;
    pthread_mutex_lock(&g->lock);
    out->gc_runs = g->runs;
    out->gc_marked_blocks = g->marked;
    out->gc_freed_blocks = g->freed_blocks;
    out->gc_freed_bytes = g->freed_bytes;
    out->gc_elapsed_ns = g->elapsed_ns;
    out->gc_time = g->time;
    pthread_mutex_unlock(&g->lock);
}

ph_export int pheap_root_set_filter(pheap *h, const char *name, pheap_filter_fn fn)
{
    PH_WINDOW();
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_root_set_filter: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_root_set_filter");
    int rc = ph_root_name_check(name);
    if (rc)
        return rc;
    ph_gc_state *g = gc_state(h);
    if (!g)
        return ph_err(PHEAP_ENOMEM, "pheap_root_set_filter: out of memory");
    pthread_mutex_lock(&g->lock);
    unsigned i = 0;
    while (i < g->nfilters && strcmp(g->filters[i].name, name) != 0)
        i++;
    if (i < g->nfilters && !fn) {
        g->filters[i] = g->filters[--g->nfilters];
    } else if (i < g->nfilters) {
        g->filters[i].fn = fn;
    } else if (fn && g->nfilters == PHEAP_ROOTS_MAX) {
        rc = ph_err(PHEAP_ENOSPC, "pheap_root_set_filter: %u filters registered already",
                    PHEAP_ROOTS_MAX);
    } else if (fn) {
        snprintf(g->filters[i].name, sizeof(g->filters[i].name), "%s", name);
        g->filters[i].fn = fn;
        g->nfilters++;
    }
    pthread_mutex_unlock(&g->lock);
    return rc;
}

/* The filter registered for root `name`, or NULL (g locked). */
static pheap_filter_fn filter_of(const ph_gc_state *g, const char *name)
{
    for (unsigned i = 0; g && i < g->nfilters; i++)
        if (strcmp(g->filters[i].name, name) == 0)
            return g->filters[i].fn;
    return NULL;
}

/* ---- marking ------------------------------------------------------------------------ */

static void push(pheap_tracer *tr, uint64_t off, uint64_t bytes, pheap_filter_fn fn)
{
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? 2 * tr->cap : 1024;
        work *v = realloc(tr->stack, cap * sizeof(*v));
        if (!v) {
            tr->oom = 1; /* the block stays marked but unvisited: reported as ENOMEM */
            return;
        }
        tr->stack = v;
        tr->cap = cap;
    }
    tr->stack[tr->n++] = (work){off, bytes, fn};
    __builtin_prefetch(pheap_direct(tr->mk->h, off)); /* read when popped */
}

ph_export void pheap_trace(pheap_tracer *tr, pheap_off child, pheap_filter_fn filter)
{
    PH_WINDOW();
    uint64_t bytes;
    if (!tr || !child)
        return;
    int r = ph_gc_mark(tr->mk->m, child, filter != NULL, &bytes);
    if (r < 0)
        tr->bad++;
    else if (r > 0)
        push(tr, child, bytes, filter);
}

ph_export pheap *pheap_tracer_heap(pheap_tracer *tr)
{
    return tr ? tr->mk->h : NULL;
}

/* Every aligned word of the block that is the offset of a block's start,
 * and with PHEAP_GC_SELF_RELATIVE a self-relative pointer to one
 * (pheap::ptr of pheap.hpp: the word holds target - its own address + 1,
 * so the target's offset is the word's offset + v - 1).  Block starts are
 * 8-byte aligned, which leaves 1 in 8 small integers to look up as a
 * self-relative candidate. */
static void scan(pheap_tracer *tr, const work *w)
{
    const uint64_t *p = pheap_direct(tr->mk->h, w->off);
    const ph_gc_marks *m = tr->mk->m;
    int self_relative = (tr->mk->o->flags & PHEAP_GC_SELF_RELATIVE) != 0;
    for (uint64_t i = 0; i < w->bytes / 8; i++) {
        uint64_t v = ph_load_relaxed(&p[i]), bytes;
        if (ph_unlikely(ph_gc_in_range(m, v)) && ph_gc_mark(tr->mk->m, v, 0, &bytes) > 0)
            push(tr, v, bytes, NULL);
        if (!self_relative)
            continue;
        uint64_t rel = w->off + 8 * i + v - 1;
        if ((rel & 7) || v == 1 || !ph_gc_in_range(m, rel))
            continue;
        if (ph_gc_mark(tr->mk->m, rel, 0, &bytes) > 0)
            push(tr, rel, bytes, NULL);
    }
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void report(pheap_tracer *tr)
{
    marker *mk = tr->mk;
    __atomic_fetch_add(&mk->xmarked, tr->visited - tr->reported, __ATOMIC_RELAXED);
    tr->reported = tr->visited;
    if (tr->index != 0 || !mk->o->progress)
        return;
    uint64_t t = now_ns();
    if (t >= mk->next_report) {
        mk->next_report = t + PROGRESS_NS;
        int sealed = ph_window_seal(); /* the program's code */
        mk->o->progress(mk->o->progress_arg, "mark", ph_load_relaxed(&mk->xmarked), 0);
        ph_window_unseal(sealed);
    }
}

/* Moves half of the stack to the pool. */
static void share(pheap_tracer *tr)
{
    marker *mk = tr->mk;
    size_t give = tr->n / 2;
    pthread_mutex_lock(&mk->lock);
    if (mk->npool + give > mk->cap) {
        size_t cap = (mk->npool + give) * 2;
        work *v = realloc(mk->pool, cap * sizeof(*v));
        if (!v) {
            pthread_mutex_unlock(&mk->lock);
            return; /* keep them: this thread visits them itself */
        }
        mk->pool = v;
        mk->cap = cap;
    }
    memcpy(mk->pool + mk->npool, tr->stack, give * sizeof(work));
    memmove(tr->stack, tr->stack + give, (tr->n - give) * sizeof(work));
    ph_store_relaxed(&mk->npool, mk->npool + give); /* read unlocked in mark_loop */
    tr->n -= give;
    pthread_cond_broadcast(&mk->cond);
    pthread_mutex_unlock(&mk->lock);
}

/* Takes work from the pool, waiting for it; 0 when marking is over. */
static int refill(pheap_tracer *tr)
{
    marker *mk = tr->mk;
    pthread_mutex_lock(&mk->lock);
    while (!mk->npool && !mk->done) {
        if (++mk->idle == mk->nthreads) {
            mk->done = 1;
            pthread_cond_broadcast(&mk->cond);
            break;
        }
        pthread_cond_wait(&mk->cond, &mk->lock);
        mk->idle--;
    }
    size_t take = mk->done ? 0 : PH_MIN(mk->npool, (size_t)TAKE_MAX);
    if (take > tr->cap - tr->n) {
        size_t cap = tr->n + take + 1024;
        work *v = realloc(tr->stack, cap * sizeof(*v));
        if (!v) {
            take = tr->cap - tr->n;
            tr->oom = take == 0;
        } else {
            tr->stack = v;
            tr->cap = cap;
        }
    }
    if (take) {
        ph_store_relaxed(&mk->npool, mk->npool - take); /* read unlocked in mark_loop */
        memcpy(tr->stack + tr->n, mk->pool + mk->npool, take * sizeof(work));
        tr->n += take;
    }
    if (tr->oom && !mk->done) { /* cannot go on: end marking for everyone */
        mk->oom = mk->done = 1;
        pthread_cond_broadcast(&mk->cond);
    }
    int more = !mk->done || take > 0;
    pthread_mutex_unlock(&mk->lock);
    return more;
}

static void mark_loop(pheap_tracer *tr)
{
    marker *mk = tr->mk;
    do {
        while (tr->n) {
            work w = tr->stack[--tr->n];
            if (w.fn) { /* the program's filter: outside pheap's window */
                int sealed = ph_window_seal();
                w.fn(tr, w.off, pheap_direct(mk->h, w.off), (size_t)w.bytes);
                ph_window_unseal(sealed);
            } else
                scan(tr, &w);
            if ((++tr->visited & 1023) == 0)
                report(tr);
            if (tr->n >= SHARE_DEPTH && mk->nthreads > 1 && ph_load_relaxed(&mk->npool) == 0)
                share(tr);
        }
        report(tr);
    } while (refill(tr));
}

static void *mark_thread(void *arg)
{
    PH_HELPER_WINDOW(); /* a thread of pheap's own, working for pheap_gc's caller */
    mark_loop(arg);
    return NULL;
}

/* Marks every block the roots reach; counts into *rep. */
/* A block with no references: marked, not scanned. */
static void leaf(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)tr, (void)off, (void)block, (void)usable;
}

typedef struct names_roots {
    pheap_tracer *tr;
    const ph_gc_state *g;
} names_roots;

static void name_root(void *arg, uint64_t off, const char *name)
{
    names_roots *nr = arg;
    pheap_trace(nr->tr, off, name ? filter_of(nr->g, name) : leaf);
}

static int mark_all(pheap *h, ph_gc_marks *m, const pheap_gc_options *o, pheap_gc_report *rep)
{
    marker mk = {.h = h, .m = m, .o = o};
    unsigned n = o->threads ? o->threads : ph_os_cpu_count();
    mk.nthreads = PH_MAX(1u, PH_MIN(n, PH_GC_THREADS_MAX));
    pheap_tracer *tr = calloc(mk.nthreads, sizeof(*tr));
    pthread_t *tid = calloc(mk.nthreads, sizeof(*tid));
    if (!tr || !tid) {
        free(tr);
        free(tid);
        return ph_err(PHEAP_ENOMEM, "out of memory for the marking threads");
    }
    pthread_mutex_init(&mk.lock, NULL);
    pthread_cond_init(&mk.cond, NULL);
    for (unsigned i = 0; i < mk.nthreads; i++)
        tr[i] = (pheap_tracer){.mk = &mk, .index = i};
    /* The roots, with their filters, on thread 0's stack. */
    ph_gc_state *g = ph_load(&h->gcs);
    if (g)
        pthread_mutex_lock(&g->lock);
    for (unsigned i = 0; i < PHEAP_ROOTS_MAX; i++) {
        char name[PHEAP_ROOT_NAME_MAX + 1];
        pheap_off off;
        if (pheap_root_at(h, i, name, &off) != 0)
            break;
        pheap_trace(&tr[0], off, filter_of(g, name));
    }
    /* The name directory: its segments (no references in them) and the
     * named blocks, with the filter registered under the same name. */
    names_roots nr = {&tr[0], g};
    ph_names_roots(h, name_root, &nr);
    if (g)
        pthread_mutex_unlock(&g->lock);
    unsigned started = 1;
    for (unsigned i = 1; i < mk.nthreads; i++) {
        if (pthread_create(&tid[i], NULL, mark_thread, &tr[i]) != 0)
            break;
        started++;
    }
    if (started < mk.nthreads) { /* fewer threads than asked: the rest never wait */
        pthread_mutex_lock(&mk.lock);
        mk.nthreads = started;
        pthread_mutex_unlock(&mk.lock);
    }
    mark_loop(&tr[0]);
    int oom = tr[0].oom;
    for (unsigned i = 1; i < started; i++)
        pthread_join(tid[i], NULL);
    for (unsigned i = 0; i < mk.nthreads; i++) {
        rep->bad_refs += tr[i].bad;
        oom |= tr[i].oom;
        free(tr[i].stack);
    }
    rep->threads = started;
    oom |= mk.oom;
    free(mk.pool);
    pthread_cond_destroy(&mk.cond);
    pthread_mutex_destroy(&mk.lock);
    free(tr);
    free(tid);
    return oom ? ph_err(PHEAP_ENOMEM, "out of memory while marking: nothing was freed") : 0;
}

/* ---- recovery and collection ----------------------------------------------------------- */

typedef struct sweep_progress {
    const pheap_gc_options *o;
    uint64_t next;
} sweep_progress;

static void on_sweep(void *arg, uint64_t done, uint64_t total)
{
    sweep_progress *s = arg;
    uint64_t t = now_ns();
    if (t >= s->next || done == total) {
        s->next = t + PROGRESS_NS;
        int sealed = ph_window_seal(); /* the program's code */
        s->o->progress(s->o->progress_arg, "sweep", done, total);
        ph_window_unseal(sealed);
    }
}

/* Traces and sweeps: a recovery (all blocks candidates, bitmaps rebuilt)
 * or a collection (allocated blocks candidates, garbage freed). */
static int trace(pheap *h, ph_thread *t, int recover, const pheap_gc_options *o,
                 pheap_gc_report *rep)
{
    uint64_t t0 = now_ns();
    int dry = !recover && (o->flags & PHEAP_GC_DRY_RUN);
    ph_gc_marks *m;
    int rc = ph_gc_marks_new(h->engine, recover ? PH_GC_ALL_BLOCKS : 0, &m);
    if (rc)
        return rc;
    if ((rc = mark_all(h, m, o, rep)) == 0) {
        ph_gc_sweep sw;
        sweep_progress sp = {o, 0};
        rc = ph_engine_gc_sweep(h->engine, &t->tc, &t->pctx, m, dry, &sw,
                                o->progress ? on_sweep : NULL, &sp);
        rep->marked_blocks = sw.marked_blocks;
        rep->marked_bytes = sw.marked_bytes;
        rep->freed_blocks = sw.freed_blocks;
        rep->freed_bytes = sw.freed_bytes;
    }
    ph_gc_marks_free(m);
    rep->dry_run = (unsigned)dry;
    rep->elapsed_ns = now_ns() - t0;
    ph_gc_state *g = gc_state(h);
    if (!rc && g) {
        pthread_mutex_lock(&g->lock);
        g->runs++;
        g->marked = rep->marked_blocks;
        g->freed_blocks = rep->freed_blocks;
        g->freed_bytes = rep->freed_bytes;
        g->elapsed_ns = rep->elapsed_ns;
        g->time = (uint64_t)time(NULL);
        pthread_mutex_unlock(&g->lock);
    }
    return rc;
}

/* The caller's record, for a trace: NULL with the error set when the
 * handle cannot trace now. */
static ph_thread *tracer_thread(pheap *h, const char *call)
{
    if (!h) {
        ph_err(PHEAP_EINVAL, "%s: heap is NULL", call);
        return NULL;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked(call);
        return NULL;
    }
    if (h->readonly) {
        ph_err(PHEAP_ERDONLY, "%s: heap opened read-only", call);
        return NULL;
    }
    if (ph_load_relaxed(&h->xromode)) {
        ph_mode_refuse(call);
        return NULL;
    }
    ph_thread *t = ph_thread_get(h);
    if (!t)
        ph_err(PHEAP_ENOMEM, "%s: out of memory for a thread record", call);
    return t;
}

ph_export int pheap_recover_ex(pheap *h, const pheap_gc_options *opts, pheap_gc_report *out)
{
    PH_WINDOW();
    PH_OUT(out);
    static const pheap_gc_options defaults;
    pheap_gc_report rep = {0};
    if (out)
        *out = rep;
    if (h && !ph_heap_inherited(h) && !h->readonly && ph_load_relaxed(&h->xromode))
        return ph_mode_refuse("pheap_recover"); /* even with nothing to recover */
    if (h && !ph_heap_inherited(h) && !h->needs_recovery)
        return 0; /* nothing to recover (LOG heaps recover at open) */
    ph_thread *t = tracer_thread(h, "pheap_recover");
    if (!t)
        return pheap_errno();
    if (opts && (opts->flags & ~(PHEAP_GC_DRY_RUN | PHEAP_GC_SELF_RELATIVE)))
        return ph_err(PHEAP_EINVAL, "pheap_recover: unknown flags %#x", opts->flags);
    if (opts && (opts->flags & PHEAP_GC_DRY_RUN))
        return ph_err(PHEAP_EINVAL, "pheap_recover: PHEAP_GC_DRY_RUN is for pheap_gc (a "
                      "recovery cannot leave the bitmaps unknown)");
    int rc = trace(h, t, 1, opts ? opts : &defaults, &rep);
    if (!rc) {
        h->needs_recovery = 0;
        ph_heap_gc_fast_update(h);
    }
    if (!rc && h->names) {
        /* A name-segment rebuild cut short, now that the allocator is
         * right; lookups may run meanwhile (names.h: the write lock). */
        ph_names_wrlock(h->names);
        rc = ph_names_recover(h, t);
        ph_names_unlock(h->names);
    }
    if (!rc)
        ph_names_guard(h);
    if (out)
        *out = rep;
    return rc;
}

ph_export int pheap_recover(pheap *h)
{
    PH_WINDOW();
    return pheap_recover_ex(h, NULL, NULL);
}

/* GC mode: every thread's cached blocks back to their slabs, so that A
 * bits mean "allocated" (the caller promised no thread runs). */
static void drain_all_caches(pheap *h, ph_thread *self)
{
    pthread_mutex_lock(&h->threads_lock);
    ph_thread_wait_exits(h);
    for (ph_thread *t = h->threads; t; t = t->next)
        ph_engine_drain_cache(h->engine, &t->tc, &self->pctx);
    pthread_mutex_unlock(&h->threads_lock);
    ph_engine_drain_batches(h->engine, &self->pctx);
}

ph_export int pheap_gc_ex(pheap *h, const pheap_gc_options *opts, pheap_gc_report *out)
{
    PH_WINDOW();
    if (ph_heap_unshared(h, "pheap_gc"))
        return PHEAP_ENOTSUP;
    PH_OUT(out);
    static const pheap_gc_options defaults;
    pheap_gc_report rep = {0};
    if (out)
        *out = rep;
    ph_thread *t = tracer_thread(h, "pheap_gc");
    if (!t)
        return pheap_errno();
    if (opts && (opts->flags & ~(PHEAP_GC_DRY_RUN | PHEAP_GC_SELF_RELATIVE)))
        return ph_err(PHEAP_EINVAL, "pheap_gc: unknown flags %#x", opts->flags);
    if (h->needs_recovery)
        return ph_err(PHEAP_ERECOVER, "pheap_gc: the heap (GC mode) was not closed cleanly: "
                      "pheap_recover collects as it recovers");
    if (pheap_tx_depth(h) > 0)
        return ph_err(PHEAP_EBUSY, "pheap_gc: the calling thread has a transaction open");
    if (h->gc)
        drain_all_caches(h, t);
    int rc = trace(h, t, 0, opts ? opts : &defaults, &rep);
    if (out)
        *out = rep;
    return rc;
}

ph_export int pheap_gc(pheap *h)
{
    PH_WINDOW();
    return pheap_gc_ex(h, NULL, NULL);
}
