/*
 * pmemobj_calls.c -- loads libpmemobj's calls for the benchmarks (see
 * pmemobj_calls.h).
 */
#include "pmemobj_calls.h"
#include "bench.h"

#include <stdlib.h>

#if BENCH_HAVE_PMEMOBJ

#define BENCH_PMEMOBJ_DEFINE(name) __typeof__(*bench_##name) *bench_##name;
BENCH_PMEMOBJ_CALLS(BENCH_PMEMOBJ_DEFINE)
#undef BENCH_PMEMOBJ_DEFINE

int bench_pmemobj_load(void)
{
    static const char *const names[] = { "libpmemobj.so.1", "libpmemobj.so", NULL };
    static int loaded; /* 1 loaded, -1 failed */
    if (loaded)
        return loaded > 0 ? 0 : -1;
    /* libpmem reads this when it is loaded: set it before dlopen. */
    setenv("PMEM_IS_PMEM_FORCE", "1", 0);
    void *lib = bench_dlopen(names);
    loaded = -1;
    if (!lib)
        return -1;
#define BENCH_PMEMOBJ_LOAD(name)                                                                   \
    if (bench_dlsym(lib, #name, &bench_##name))                                                   \
        return -1;
    BENCH_PMEMOBJ_CALLS(BENCH_PMEMOBJ_LOAD)
#undef BENCH_PMEMOBJ_LOAD
    loaded = 1;
    return 0;
}

int bench_pmemobj_tx(PMEMobjpool *pool, void (*body)(void *arg), void *arg)
{
    volatile int committed = 0;
    TX_BEGIN(pool) {
        body(arg);
    } TX_ONCOMMIT {
        committed = 1;
    } TX_ONABORT {
        bench_fail("pmemobj transaction aborted: %s", pmemobj_errormsg());
    } TX_END
    return committed ? 0 : -1;
}

#else

int bench_pmemobj_load(void)
{
    bench_fail("built without libpmemobj headers (install libpmemobj-dev and rebuild)");
    return -1;
}

#endif
