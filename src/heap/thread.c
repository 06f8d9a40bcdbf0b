/*
 * thread.c -- per-thread records of open heaps.  The fast path is one
 * comparison against the thread's last used heap; the slow path searches
 * the thread's list and registers a new record.  A record outlives neither
 * its thread (a TLS destructor folds it into the heap) nor its heap
 * (pheap_close frees all records); a process-wide registry of open heaps,
 * under one lock, decides which of the two goes first.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "heap/heap.h"
#include "util/error.h"

__thread ph_tls_last ph_tls __attribute__((tls_model("initial-exec")));

typedef struct tls_entry {
    pheap *heap;
    uint64_t id;
    ph_thread *thread;
} tls_entry;

typedef struct tls_list {
    size_t n, cap;
    tls_entry *v;
} tls_list;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static pheap **registry;          /* open heaps, under registry_lock */
static size_t registry_n, registry_cap;
static uint64_t next_id = 1;      /* under registry_lock */
static pthread_key_t tls_key;
static pthread_once_t tls_once = PTHREAD_ONCE_INIT;
static __thread tls_list tls_records;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
uint64_t ph_fork_generation; /* changes only in a child, while it has one thread */

static int registered(const pheap *h, uint64_t id)
{
    for (size_t i = 0; i < registry_n; i++)
        if (registry[i] == h && h->id == id)
            return 1;
    return 0;
}

/* Record lists of a heap (h->threads, h->folding), under h->threads_lock. */
static void list_remove(ph_thread **head, ph_thread *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        *head = t->next;
    if (t->next)
        t->next->prev = t->prev;
}

static void list_push(ph_thread **head, ph_thread *t)
{
    t->prev = NULL;
    t->next = *head;
    if (*head)
        (*head)->prev = t;
    *head = t;
}

/* What a record leaves behind: its cached blocks go back (to their slabs,
 * or a GC heap's transfer batches) when `keep`, else are dropped with the
 * rest of the volatile state (a simulated crash, a failed open). */
static void fold_out(pheap *h, ph_thread *t, int keep)
{
    ph_tx_thread_exit(h, t, keep);
    if (h->engine && keep)
        ph_engine_thread_exit(h->engine, &t->tc, &t->pctx);
    free(t->tc.store);
    t->tc.store = NULL;
}

/* Adds a folded record's counters to the heap's totals (h->threads_lock
 * held) and frees it. */
static void retire(pheap *h, ph_thread *t)
{
    h->retired_tx[0] += ph_load_relaxed(&t->xtx_commits);
    h->retired_tx[1] += ph_load_relaxed(&t->xtx_aborts);
    h->retired_tx[2] += ph_load_relaxed(&t->xtx_fences);
    h->retired.xflushes += ph_load_relaxed(&t->pctx.xflushes);
    h->retired.xfences += ph_load_relaxed(&t->pctx.xfences);
    h->retired.xreflushes += ph_load_relaxed(&t->pctx.xreflushes);
    ph_persist_ctx_release(&t->pctx);
    free(t);
}

void ph_thread_wait_exits(pheap *h)
{
    while (h->folding)
        pthread_cond_wait(&h->exited_cv, &h->threads_lock);
}

/* Thread exit: this thread's records of heaps still open move to their
 * heaps' folding lists under the registry's lock, and are folded after it
 * is let go: returning a cache's blocks takes arena locks and may release
 * slabs, and threads starting meanwhile (a server's short-lived workers)
 * need the registry.  pheap_stats keeps counting a record until it is
 * retired; pheap_close waits for the folds in progress (h->folding). */
static void tls_destructor(void *arg)
{
    (void)arg;
    PH_WINDOW(); /* returns cached blocks: metadata writes */
    size_t n = 0;
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < tls_records.n; i++) {
        tls_entry *e = &tls_records.v[i];
        if (!registered(e->heap, e->id))
            continue;
        pthread_mutex_lock(&e->heap->threads_lock);
        list_remove(&e->heap->threads, e->thread);
        list_push(&e->heap->folding, e->thread);
        pthread_mutex_unlock(&e->heap->threads_lock);
        tls_records.v[n++] = *e;
    }
    pthread_mutex_unlock(&registry_lock);
    for (size_t i = 0; i < n; i++) {
        pheap *h = tls_records.v[i].heap;
        fold_out(h, tls_records.v[i].thread, 1);
        pthread_mutex_lock(&h->threads_lock);
        list_remove(&h->folding, tls_records.v[i].thread);
        retire(h, tls_records.v[i].thread);
        if (!h->folding)
            pthread_cond_broadcast(&h->exited_cv);
        pthread_mutex_unlock(&h->threads_lock);
    }
    free(tls_records.v);
    memset(&tls_records, 0, sizeof(tls_records));
    memset(&ph_tls, 0, sizeof(ph_tls));
}

static void tls_init(void)
{
    pthread_key_create(&tls_key, tls_destructor);
}

ph_noinline ph_thread *ph_thread_get_slow(pheap *h)
{
    for (size_t i = 0; i < tls_records.n; i++) {
        tls_entry *e = &tls_records.v[i];
        if (e->heap == h && e->id == h->id) {
            ph_tls = (ph_tls_last){h, h->id, e->thread, e->thread->tc.bins};
            return e->thread;
        }
    }
    pthread_once(&tls_once, tls_init);
    /* Drop entries of heaps closed since (their records are gone). */
    pthread_mutex_lock(&registry_lock);
    size_t keep = 0;
    for (size_t i = 0; i < tls_records.n; i++)
        if (registered(tls_records.v[i].heap, tls_records.v[i].id))
            tls_records.v[keep++] = tls_records.v[i];
    tls_records.n = keep;
    pthread_mutex_unlock(&registry_lock);
    if (tls_records.n == tls_records.cap) {
        size_t cap = tls_records.cap ? tls_records.cap * 2 : 4;
        tls_entry *v = realloc(tls_records.v, cap * sizeof(*v));
        if (!v)
            return NULL;
        tls_records.v = v;
        tls_records.cap = cap;
    }
    ph_thread *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->heap = h;
    t->tc.lane.index = -1;
    t->tc.arena = -1;
    pthread_mutex_lock(&h->threads_lock);
    t->next = h->threads;
    if (h->threads)
        h->threads->prev = t;
    h->threads = t;
    pthread_mutex_unlock(&h->threads_lock);
    tls_records.v[tls_records.n++] = (tls_entry){h, h->id, t};
    pthread_setspecific(tls_key, &tls_records);
    ph_tls = (ph_tls_last){h, h->id, t, t->tc.bins};
    return t;
}

/* fork(): the registry and every open heap's thread list are locked
 * across it (registry first, as everywhere), so that the child finds them
 * consistent.  In the child, every open heap is a copy (ph_heap_inherited):
 * the registry forgets them all, so that neither a thread exit nor a
 * thread record lookup of the child touches their state. */
static void atfork_prepare(void)
{
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_n; i++)
        pthread_mutex_lock(&registry[i]->threads_lock);
}

static void atfork_parent(void)
{
    for (size_t i = 0; i < registry_n; i++)
        pthread_mutex_unlock(&registry[i]->threads_lock);
    pthread_mutex_unlock(&registry_lock);
}

static void atfork_child(void)
{
    for (size_t i = 0; i < registry_n; i++) {
        pthread_mutex_unlock(&registry[i]->threads_lock);
        /* a shared heap's gate: never held by this copy of the open file
         * after the parent's death (procs.c) */
        if (registry[i]->gate_fd >= 0) {
            close(registry[i]->gate_fd);
            registry[i]->gate_fd = -1;
        }
    }
    registry_n = 0;
    ph_fork_generation++;
    memset(&ph_tls, 0, sizeof(ph_tls));
    pthread_mutex_unlock(&registry_lock);
}

static void atfork_init(void)
{
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

int ph_heap_forked(const char *call)
{
    return ph_err(PHEAP_EFORKED, "%s: the handle was inherited through fork(); this process must "
                  "open the heap itself (after the parent closes it)", call);
}

void ph_thread_register_heap(pheap *h)
{
    pthread_once(&atfork_once, atfork_init);
    pthread_mutex_lock(&registry_lock);
    h->id = next_id++;
    h->fork_gen = ph_fork_generation;
    if (registry_n == registry_cap) {
        size_t cap = registry_cap ? registry_cap * 2 : 8;
        pheap **v = realloc(registry, cap * sizeof(*v));
        if (v) {
            registry = v;
            registry_cap = cap;
        }
    }
    /* If the registry cannot grow, the heap stays unregistered: its thread
     * records are then freed only by pheap_close, which is still correct. */
    if (registry_n < registry_cap)
        registry[registry_n++] = h;
    pthread_mutex_unlock(&registry_lock);
}

void ph_thread_unregister_heap(pheap *h, int keep_caches)
{
    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < registry_n; i++) {
        if (registry[i] == h) {
            registry[i] = registry[--registry_n];
            break;
        }
    }
    pthread_mutex_unlock(&registry_lock);
    pthread_mutex_lock(&h->threads_lock);
    /* A fork child's copy may count exits of the parent's threads, which
     * are not here to finish them. */
    if (!ph_heap_inherited(h))
        ph_thread_wait_exits(h);
    while (h->threads) {
        ph_thread *t = h->threads;
        list_remove(&h->threads, t);
        fold_out(h, t, keep_caches);
        retire(h, t);
    }
    pthread_mutex_unlock(&h->threads_lock);
    if (ph_tls.heap == h)
        memset(&ph_tls, 0, sizeof(ph_tls));
}

/* What pheap_stats sums over a heap's records. */
typedef struct record_sums {
    uint64_t flushes, fences, reflushes, cached, cached_bytes, tx[3];
} record_sums;

static void add_records(const ph_thread *t, record_sums *s)
{
    for (; t; t = t->next) {
        s->flushes += ph_load_relaxed(&t->pctx.xflushes);
        s->fences += ph_load_relaxed(&t->pctx.xfences);
        s->reflushes += ph_load_relaxed(&t->pctx.xreflushes);
        for (unsigned c = 0; c < PH_CLASSES; c++) {
            uint32_t b = ph_tbin_count_racy(&t->tc.bins[c]);
            s->cached += b;
            s->cached_bytes += (uint64_t)b * ph_class_size[c];
        }
        s->tx[0] += ph_load_relaxed(&t->xtx_commits);
        s->tx[1] += ph_load_relaxed(&t->xtx_aborts);
        s->tx[2] += ph_load_relaxed(&t->xtx_fences);
    }
}

/* The retired totals plus every record's: live ones and those being
 * folded (which count until they are retired). */
static record_sums sum_records(pheap *h)
{
    pthread_mutex_lock(&h->threads_lock);
    record_sums s = {h->retired.xflushes, h->retired.xfences, h->retired.xreflushes, 0, 0,
                     {h->retired_tx[0], h->retired_tx[1], h->retired_tx[2]}};
    add_records(h->threads, &s);
    add_records(h->folding, &s);
    pthread_mutex_unlock(&h->threads_lock);
    return s;
}

void ph_thread_sum_counters(pheap *h, uint64_t *flushes, uint64_t *fences, uint64_t *reflushes,
                            uint64_t *cached, uint64_t *cached_bytes)
{
    record_sums s = sum_records(h);
    *flushes = s.flushes;
    *fences = s.fences;
    *reflushes = s.reflushes;
    *cached = s.cached;
    *cached_bytes = s.cached_bytes;
}

void ph_thread_sum_tx(pheap *h, uint64_t out[3])
{
    record_sums s = sum_records(h);
    for (int i = 0; i < 3; i++)
        out[i] = s.tx[i];
}

ph_export int pheap_thread_collect(pheap *h)
{
    PH_WINDOW();
    ph_thread *t = ph_heap_writer(h, "pheap_thread_collect");
    if (!t)
        return pheap_errno();
    ph_engine_drain_cache(h->engine, &t->tc, &t->pctx);
    if (h->gc) { /* the batches of freed blocks the threads pass each other, too, */
        pthread_mutex_lock(&h->threads_lock);
        ph_thread_wait_exits(h); /* with those of exits in progress */
        pthread_mutex_unlock(&h->threads_lock);
        ph_engine_drain_batches(h->engine, &t->pctx);
    }
    return 0;
}
