/*
 * wl_prodcon.c -- producer-consumer (Makalu's test as re-implemented by
 * Ralloc; run by NVAlloc): threads work in pairs; the producer allocates
 * fixed-size objects and pushes them into a queue, the consumer pops and
 * frees them, so every free is a cross-thread free.  The queue is a bounded
 * single-producer single-consumer ring.
 */
#include "bench.h"

#include <sched.h>
#include <stdlib.h>

#define RING 1024u               /* power of two */

typedef struct ring {
    _Alignas(64) uint64_t xhead; /* next slot to pop; consumer writes */
    _Alignas(64) uint64_t xtail; /* next slot to push; producer writes */
    _Alignas(64) uint32_t xstop; /* producer gave up: consumer stops too */
    uint64_t objects;            /* to pass through this ring */
    bench_handle slot[RING];
} ring;

static void producer(bench_thread *t, ring *q)
{
    const bench_allocator *a = t->run->alloc;
    size_t size = t->run->p->size_min;
    uint64_t tail = 0;

    for (uint64_t i = 0; i < q->objects; i++) {
        bench_handle h = a->alloc(size);
        if (!h) {
            bench_fail_alloc(size, i);
            t->failed = 1;
            __atomic_store_n(&q->xstop, 1, __ATOMIC_RELEASE);
            return;
        }
        t->ops++;
        while (tail - __atomic_load_n(&q->xhead, __ATOMIC_ACQUIRE) == RING)
            sched_yield();
        q->slot[tail % RING] = h;
        __atomic_store_n(&q->xtail, ++tail, __ATOMIC_RELEASE);
    }
}

static void consumer(bench_thread *t, ring *q)
{
    const bench_allocator *a = t->run->alloc;
    uint64_t head = 0;

    while (head < q->objects) {
        uint64_t tail = __atomic_load_n(&q->xtail, __ATOMIC_ACQUIRE);
        if (head == tail) {
            if (__atomic_load_n(&q->xstop, __ATOMIC_ACQUIRE) &&
                head == __atomic_load_n(&q->xtail, __ATOMIC_ACQUIRE))
                return;
            sched_yield();
            continue;
        }
        while (head < tail) {
            a->free(q->slot[head % RING]);
            t->ops++;
            __atomic_store_n(&q->xhead, ++head, __ATOMIC_RELEASE);
        }
    }
}

static void pc_worker(bench_thread *t)
{
    ring *q = (ring *)t->arg + t->tid / 2;
    if (t->tid % 2 == 0)
        producer(t, q);
    else
        consumer(t, q);
}

int wl_prodcon(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    unsigned pairs = p->threads / 2;
    bench_timing tm;
    ring *rings = aligned_alloc(64, pairs * sizeof *rings);

    if (!rings) {
        bench_fail("harness out of memory");
        return -1;
    }
    for (unsigned i = 0; i < pairs; i++) {
        rings[i].xhead = rings[i].xtail = 0;
        rings[i].xstop = 0;
        rings[i].objects = p->ops / 2 / pairs;
    }
    int rc = bench_run_threads(run, pairs * 2, pc_worker, rings, &tm);
    free(rings);
    if (rc == 0) {
        bench_timing_metrics(&tm, out);
        bench_metric(out, "pairs", pairs);
    }
    return rc;
}
