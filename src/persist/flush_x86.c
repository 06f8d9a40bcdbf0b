/*
 * flush_x86.c -- cache-line write-back back ends for x86-64: clwb and
 * clflushopt (weakly ordered, need sfence) and clflush (ordered, so its
 * fence is empty).  On other architectures these back ends report
 * PHEAP_ENOTSUP through the CPU feature check and are never selected.
 *
 * A commit word (ph_persist_store_nt) is written either with movnti or
 * with a plain store and a write-back of its line: which one is cheaper
 * with the fence after it depends on the CPU (about 90 against 150 ns on
 * an AMD EPYC, 325 against 210 ns on an Intel Xeon), so the clwb and
 * clflushopt back ends time both once per process and take the cheaper
 * (PHEAP_NT_STORES forces one).  Either is durable at the next fence.
 */
#include "persist/persist.h"

#include "os/os.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__)
static void clwb_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p;
    (void)c;
    for (uint64_t i = 0; i < n; i++, line += PH_CACHE_LINE)
        __asm__ volatile("clwb %0" : "+m"(*(volatile char *)line));
}

static void clflushopt_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p;
    (void)c;
    for (uint64_t i = 0; i < n; i++, line += PH_CACHE_LINE)
        __asm__ volatile("clflushopt %0" : "+m"(*(volatile char *)line));
}

static void clflush_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p;
    (void)c;
    for (uint64_t i = 0; i < n; i++, line += PH_CACHE_LINE)
        __asm__ volatile("clflush %0" : "+m"(*(volatile char *)line));
}

static void movnti_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    (void)p;
    (void)c;
    for (unsigned i = 0; i < n; i++)
        __asm__ volatile("movnti %1, %0" : "=m"(dst[i]) : "r"(src[i]) : "memory");
}

/* The cached forms: the stores, then the write-back of their line;
 * returns the line. */
static uintptr_t store_words(uint64_t *dst, const uint64_t *src, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
    return (uintptr_t)dst & ~(uintptr_t)(PH_CACHE_LINE - 1);
}

static void clwb_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    clwb_flush(p, c, store_words(dst, src, n), 1);
}

static void clflushopt_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src,
                             unsigned n)
{
    clflushopt_flush(p, c, store_words(dst, src, n), 1);
}

/* clflush back end: the stores, then the ordered flush of their line. */
static void clflush_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    clflush_flush(p, c, store_words(dst, src, n), 1);
}

static void sfence(ph_persist *p, ph_pctx *c)
{
    (void)p;
    (void)c;
    __asm__ volatile("sfence" ::: "memory");
}

/* clflush is ordered with respect to other stores and clflushes, so the
 * fence only has to stop the compiler from moving stores across it. */
static void compiler_fence(ph_persist *p, ph_pctx *c)
{
    (void)p;
    (void)c;
    __asm__ volatile("" ::: "memory");
}

const ph_persist_ops ph_flush_clwb_ops = {"clwb", clwb_flush, sfence, movnti_store};
const ph_persist_ops ph_flush_clflushopt_ops = {"clflushopt", clflushopt_flush, sfence, movnti_store};
const ph_persist_ops ph_flush_clwb_cached_ops = {"clwb", clwb_flush, sfence, clwb_store};
const ph_persist_ops ph_flush_clflushopt_cached_ops = {"clflushopt", clflushopt_flush, sfence,
                                                       clflushopt_store};
const ph_persist_ops ph_flush_clflush_ops = {"clflush", clflush_flush, compiler_fence, clflush_store};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Nanoseconds of `rounds` commits of one word of `line` with `store` and
 * a fence, the fastest of three tries (the machine's other work only ever
 * adds time). */
static uint64_t time_commits(const ph_persist_ops *ops, uint64_t *line, unsigned rounds)
{
    uint64_t best = UINT64_MAX;
    for (unsigned t = 0; t < 3; t++) {
        uint64_t t0 = now_ns();
        for (unsigned i = 0; i < rounds; i++) {
            uint64_t v = i;
            ops->store_nt(NULL, NULL, &line[(i % 8) * 8], &v, 1);
            ops->fence(NULL, NULL);
        }
        uint64_t ns = now_ns() - t0;
        best = ns < best ? ns : best;
    }
    return best;
}

static int nt_faster[2] = {1, 1}; /* against store + clwb, against store + clflushopt */
static pthread_once_t nt_once = PTHREAD_ONCE_INIT;

static void measure_nt(void)
{
    /* eight lines of memory of its own: the commits of a heap land in
     * lines no other thread writes meanwhile */
    uint64_t *mem = aligned_alloc(PH_CACHE_LINE, 8 * PH_CACHE_LINE);
    if (!mem)
        return;
    for (unsigned i = 0; i < 8 * PH_CACHE_LINE / 8; i++)
        mem[i] = 0;
    ph_cpu_features f;
    ph_os_cpu_features(&f);
    const ph_persist_ops *cached[2] = {f.clwb ? &ph_flush_clwb_cached_ops : NULL,
                                       f.clflushopt ? &ph_flush_clflushopt_cached_ops : NULL};
    (void)time_commits(&ph_flush_clwb_ops, mem, 16); /* every path warmed up */
    for (unsigned k = 0; k < 2; k++)
        if (cached[k])
            (void)time_commits(cached[k], mem, 16);
    uint64_t nt = time_commits(&ph_flush_clwb_ops, mem, 128);
    for (unsigned k = 0; k < 2; k++)
        if (cached[k])
            nt_faster[k] = nt <= time_commits(cached[k], mem, 128);
    free(mem);
}

int ph_flush_nt_faster(int clflushopt)
{
    pthread_once(&nt_once, measure_nt);
    return nt_faster[clflushopt != 0];
}
#else
static void no_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p; (void)c; (void)line; (void)n;
}
static void no_fence(ph_persist *p, ph_pctx *c)
{
    (void)p; (void)c;
}
static void plain_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    (void)p; (void)c;
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
}
const ph_persist_ops ph_flush_clwb_ops = {"clwb", no_flush, no_fence, plain_store};
const ph_persist_ops ph_flush_clflushopt_ops = {"clflushopt", no_flush, no_fence, plain_store};
const ph_persist_ops ph_flush_clwb_cached_ops = {"clwb", no_flush, no_fence, plain_store};
const ph_persist_ops ph_flush_clflushopt_cached_ops = {"clflushopt", no_flush, no_fence, plain_store};
const ph_persist_ops ph_flush_clflush_ops = {"clflush", no_flush, no_fence, plain_store};
int ph_flush_nt_faster(int clflushopt)
{
    (void)clflushopt;
    return 1;
}
#endif
