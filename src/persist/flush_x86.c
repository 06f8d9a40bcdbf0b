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

const ph_persist_ops ph_flush_clwb_ops = {"clwb", clwb_flush, sfence};
const ph_persist_ops ph_flush_clflushopt_ops = {"clflushopt", clflushopt_flush, sfence};
const ph_persist_ops ph_flush_clflush_ops = {"clflush", clflush_flush, compiler_fence};
#else
static void no_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p; (void)c; (void)line; (void)n;
}
static void no_fence(ph_persist *p, ph_pctx *c)
{
    (void)p; (void)c;
}
const ph_persist_ops ph_flush_clwb_ops = {"clwb", no_flush, no_fence};
const ph_persist_ops ph_flush_clflushopt_ops = {"clflushopt", no_flush, no_fence};
const ph_persist_ops ph_flush_clflush_ops = {"clflush", no_flush, no_fence};
#endif
