/*
 * wl_larson.c -- Larson & Krishnan's server simulation (ISMM 1998; run by
 * Ralloc, Poseidon and NVAlloc).  Each lane owns `batch` slots, filled
 * before timing by the main thread.  A lane runs `rounds` thread generations
 * in turn: a generation repeatedly frees a random slot and refills it with a
 * block of random size, then exits and hands every block still in its slots
 * to the next generation, a new thread, which frees them ("bleeding"): the
 * cross-thread free pattern of long-running servers.
 */
#include "bench.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct larson_state {
    bench_handle *slots;         /* batch slots per lane */
    uint64_t steps;              /* free+alloc pairs per generation */
} larson_state;

typedef struct generation {
    bench_thread *lane;
    uint64_t ops;
    int failed;
    char error[256];
} generation;

static void *generation_main(void *arg)
{
    generation *g = arg;
    bench_thread *t = g->lane;
    const bench_params *p = t->run->p;
    const bench_allocator *a = t->run->alloc;
    larson_state *st = t->arg;
    bench_handle *slot = st->slots + (size_t)t->tid * p->batch;

    if (a->thread_attach)
        a->thread_attach(t->tid);
    for (uint64_t s = 0; s < st->steps; s++) {
        uint64_t i = bench_rand(&t->rng) % p->batch;
        size_t size = bench_rand_range(&t->rng, p->size_min, p->size_max);
        a->free(slot[i]);
        slot[i] = a->alloc(size);
        if (!slot[i]) {
            g->failed = 1;
            bench_fail_alloc(size, s);
            snprintf(g->error, sizeof g->error, "%.*s", (int)sizeof g->error - 1, bench_error());
            g->ops += 1;
            break;
        }
        g->ops += 2;
    }
    if (a->thread_detach)
        a->thread_detach();
    return NULL;
}

static void lane_worker(bench_thread *t)
{
    for (uint64_t r = 0; r < t->run->p->rounds && !t->failed; r++) {
        generation g = { .lane = t };
        pthread_t tid;
        if (pthread_create(&tid, NULL, generation_main, &g) != 0) {
            bench_fail("cannot start generation %llu", (unsigned long long)r);
            t->failed = 1;
            return;
        }
        pthread_join(tid, NULL);
        t->ops += g.ops;
        if (g.failed) {
            bench_fail("%s", g.error);
            t->failed = 1;
        }
    }
}

int wl_larson(const bench_run *run, bench_metrics *out)
{
    const bench_params *p = run->p;
    const bench_allocator *a = run->alloc;
    size_t nslots = (size_t)p->threads * p->batch;
    uint64_t rng = p->seed ^ 0x1a750full;
    larson_state st;
    bench_timing tm;
    int rc = 0;

    st.steps = p->ops / 2 / p->threads / p->rounds;
    if (st.steps == 0)
        st.steps = 1;
    st.slots = bench_xcalloc(nslots, sizeof *st.slots);
    if (!st.slots)
        return -1;
    if (a->thread_attach)
        a->thread_attach(p->threads);
    for (size_t i = 0; i < nslots && rc == 0; i++) {
        size_t size = bench_rand_range(&rng, p->size_min, p->size_max);
        st.slots[i] = a->alloc(size);
        if (!st.slots[i]) {
            bench_fail("prefill alloc(%zu) failed at slot %zu", size, i);
            rc = -1;
        }
    }
    if (rc == 0)
        rc = bench_run_threads(run, p->threads, lane_worker, &st, &tm);
    for (size_t i = 0; i < nslots; i++) {
        if (st.slots[i])
            a->free(st.slots[i]);
    }
    if (a->thread_detach)
        a->thread_detach();
    free(st.slots);
    if (rc == 0)
        bench_timing_metrics(&tm, out);
    return rc;
}
