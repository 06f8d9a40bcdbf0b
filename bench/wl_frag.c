/*
 * wl_frag.c -- fragbench (NVAlloc's memory-usage workload): phases of one
 * object size each; a phase allocates objects of its size, writing each one
 * as a program would (so its pages count), until the thread's live bytes
 * reach their share of live_bytes, then frees free_pct percent of all live
 * objects at random, and the next phase asks for a different size.
 * After the last allocation phase the heap holds about live_bytes, and the
 * report sets against them what the allocator uses: its own account
 * (heap_bytes), the storage of the heap file (file_bytes, st_blocks) for
 * persistent heaps, and the growth of resident memory for transient ones.
 * The threads meet at the end of every allocation phase, where the worst
 * ratios over the phases are taken (heap_per_live_max, file_per_live_max).
 * An allocator that can move blocks (relocate: pheap_defrag,
 * pmemobj_defrag) gets every live handle after the frees -- the handles
 * are the only words that name the blocks -- from one thread, once every
 * thread has given back its cached blocks (collect), as a program that
 * compacts its data at a quiet point would.
 */
#include "bench.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Where each phase's size falls between size_min and size_max. */
static const double phase_at[] = { 0.0, 1.0, 0.2, 0.7, 0.05, 0.45, 0.9, 0.35 };
#define PHASE_KINDS (sizeof phase_at / sizeof phase_at[0])

typedef struct frag_lane {       /* one thread's live objects */
    bench_handle *h;
    uint32_t *size;
    uint64_t n, cap;
    uint64_t live;               /* bytes requested by live objects */
} frag_lane;

typedef struct frag_state {
    frag_lane *lane;
    bench_handle **slots;        /* the addresses of every thread's handles */
    uint64_t target;             /* live bytes per thread at a phase's end */
    pthread_barrier_t phase_end; /* the threads, at the end of each allocation phase */
    double heap_max, file_max;   /* worst ratios to live bytes at those points */
} frag_state;

static size_t phase_size(const bench_params *p, uint64_t phase)
{
    double at = phase_at[phase % PHASE_KINDS];
    return p->size_min + (size_t)(at * (double)(p->size_max - p->size_min));
}

static void free_most(bench_thread *t, frag_lane *l)
{
    unsigned pct = t->run->p->free_pct;
    uint64_t kept = 0;
    for (uint64_t i = 0; i < l->n; i++) {
        if (bench_rand(&t->rng) % 100 < pct) {
            t->run->alloc->free(l->h[i]);
            l->live -= l->size[i];
            t->ops++;
        } else {
            l->h[kept] = l->h[i];
            l->size[kept++] = l->size[i];
        }
    }
    l->n = kept;
}

/* At a phase's end, every thread waiting: the ratios of heap and file to
 * live bytes, the worst kept. */
static void phase_usage(const bench_run *run, frag_state *st)
{
    const bench_allocator *a = run->alloc;
    uint64_t live = 0, heap = 0;
    for (unsigned i = 0; i < run->p->threads; i++)
        live += st->lane[i].live;
    if (!live)
        return;
    if (a->heap_bytes && a->heap_bytes(&heap) == 0 && (double)heap / (double)live > st->heap_max)
        st->heap_max = (double)heap / (double)live;
    if (a->persistent) {
        double r = (double)bench_file_bytes(run->heap.path) / (double)live;
        if (r > st->file_max)
            st->file_max = r;
    }
}

/* Every thread: its cached blocks back, then thread 0 moves everyone's. */
static void relocate_all(bench_thread *t, frag_state *st)
{
    const bench_allocator *a = t->run->alloc;
    if (a->collect)
        a->collect();
    pthread_barrier_wait(&st->phase_end);
    if (t->tid == 0) {
        size_t n = 0;
        for (unsigned i = 0; i < t->run->p->threads; i++)
            for (uint64_t k = 0; k < st->lane[i].n; k++)
                st->slots[n++] = &st->lane[i].h[k];
        if (a->relocate(st->slots, n) != 0)
            t->failed = 1;
    }
    pthread_barrier_wait(&st->phase_end);
}

static void frag_worker(bench_thread *t)
{
    const bench_params *p = t->run->p;
    frag_state *st = t->arg;
    frag_lane *l = &st->lane[t->tid];
    const bench_allocator *a = t->run->alloc;

    for (uint64_t phase = 0; phase < p->rounds; phase++) {
        size_t size = phase_size(p, phase);
        while (!t->failed && l->live < st->target && l->n < l->cap) {
            bench_handle h = a->alloc(size);
            if (!h) { /* still at every meeting, so that the others go on */
                bench_fail_alloc(size, l->n);
                t->failed = 1;
                break;
            }
            if (a->addr)
                memset(a->addr(h), 0x5a, size);
            l->h[l->n] = h;
            l->size[l->n++] = (uint32_t)size;
            l->live += size;
            t->ops++;
        }
        pthread_barrier_wait(&st->phase_end);
        if (t->tid == 0)
            phase_usage(t->run, st);
        pthread_barrier_wait(&st->phase_end);
        if (phase + 1 < p->rounds && !t->failed) {
            free_most(t, l);
            if (a->relocate)
                relocate_all(t, st);
        }
    }
}

static void usage_metrics(const bench_run *run, const frag_state *st, uint64_t rss_base,
                          bench_metrics *out)
{
    const bench_allocator *a = run->alloc;
    uint64_t live = 0, heap = 0;
    for (unsigned i = 0; i < run->p->threads; i++)
        live += st->lane[i].live;
    bench_metric(out, "live_bytes", (double)live);
    if (a->heap_bytes && a->heap_bytes(&heap) == 0) {
        bench_metric(out, "heap_bytes", (double)heap);
        bench_metric(out, "heap_per_live", (double)heap / (double)live);
        bench_metric(out, "heap_per_live_max", st->heap_max);
    }
    if (a->persistent) {
        uint64_t file = bench_file_bytes(run->heap.path);
        bench_metric(out, "file_bytes", (double)file);
        bench_metric(out, "file_per_live", (double)file / (double)live);
        bench_metric(out, "file_per_live_max", st->file_max);
    } else {
        uint64_t rss = bench_rss_bytes();
        rss = rss > rss_base ? rss - rss_base : 0;
        bench_metric(out, "rss_bytes", (double)rss);
        bench_metric(out, "rss_per_live", (double)rss / (double)live);
    }
}

int wl_frag(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    frag_state st;
    bench_timing tm;
    int rc = 0;

    st.target = p->live_bytes / p->threads;
    st.heap_max = st.file_max = 0;
    st.lane = bench_xcalloc(p->threads, sizeof *st.lane);
    st.slots = NULL;
    if (!st.lane)
        return -1;
    pthread_barrier_init(&st.phase_end, NULL, p->threads);
    for (unsigned i = 0; i < p->threads && rc == 0; i++) {
        frag_lane *l = &st.lane[i];
        l->cap = (st.target + p->size_max) / p->size_min + 2;
        l->h = bench_xcalloc(l->cap, sizeof *l->h);
        l->size = bench_xcalloc(l->cap, sizeof *l->size);
        if (!l->h || !l->size)
            rc = -1;
    }
    if (rc == 0 && run->alloc->relocate) {
        uint64_t all = 0;
        for (unsigned i = 0; i < p->threads; i++)
            all += st.lane[i].cap;
        if (!(st.slots = bench_xcalloc(all, sizeof *st.slots)))
            rc = -1;
    }
    uint64_t rss_base = bench_rss_bytes();
    if (rc == 0)
        rc = bench_run_threads(run, p->threads, frag_worker, &st, &tm);
    if (rc == 0) {
        bench_timing_metrics(&tm, out);
        usage_metrics(run, &st, rss_base, out);
    }
    if (run->alloc->thread_attach)
        run->alloc->thread_attach(p->threads);
    for (unsigned i = 0; i < p->threads; i++) {
        for (uint64_t k = 0; k < st.lane[i].n; k++)
            run->alloc->free(st.lane[i].h[k]);
        free(st.lane[i].h);
        free(st.lane[i].size);
    }
    if (run->alloc->thread_detach)
        run->alloc->thread_detach();
    free(st.lane);
    free(st.slots);
    pthread_barrier_destroy(&st.phase_end);
    return rc;
}
