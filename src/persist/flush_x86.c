/*
 * flush_x86.c -- cache-line write-back back ends for x86-64: clwb and
 * clflushopt (weakly ordered, need sfence) and clflush (ordered, so its
 * fence is empty).  On other architectures these back ends report
 * PHEAP_ENOTSUP through the CPU feature check and are never selected.
 */
#include "persist/persist.h"

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

/* clflush back end: the stores, then the ordered flush of their line. */
static void clflush_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
    clflush_flush(p, c, (uintptr_t)dst & ~(uintptr_t)(PH_CACHE_LINE - 1), 1);
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
const ph_persist_ops ph_flush_clflush_ops = {"clflush", clflush_flush, compiler_fence, clflush_store};
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
const ph_persist_ops ph_flush_clflush_ops = {"clflush", no_flush, no_fence, plain_store};
#endif
