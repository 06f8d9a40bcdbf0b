/*
 * pmemobj_calls.h -- libpmemobj's calls, loaded with dlopen, for the
 * benchmarks that run a libpmemobj side (pheap_kvbench, pheap_cppbench).
 *
 * The benchmarks are built without linking libpmemobj, so a machine without
 * it only skips those variants.  Where its headers are installed,
 * BENCH_HAVE_PMEMOBJ is 1 and the calls below, and the TX_* macros that call
 * them by name, go to the loaded library once bench_pmemobj_load() returned
 * 0.
 */
#ifndef PHEAP_BENCH_PMEMOBJ_CALLS_H
#define PHEAP_BENCH_PMEMOBJ_CALLS_H

#ifdef __cplusplus
extern "C" {
#endif

#if __has_include(<libpmemobj.h>)
#include <libpmemobj.h>
#define BENCH_HAVE_PMEMOBJ 1

#define BENCH_PMEMOBJ_CALLS(X)                                                                     \
    X(pmemobj_create) X(pmemobj_close) X(pmemobj_alloc) X(pmemobj_persist) X(pmemobj_errormsg)    \
    X(pmemobj_root) X(pmemobj_tx_begin) X(pmemobj_tx_stage) X(pmemobj_tx_process)                 \
    X(pmemobj_tx_end) X(pmemobj_tx_errno) X(pmemobj_tx_alloc) X(pmemobj_tx_add_range)             \
    X(pmemobj_tx_add_range_direct) X(pmemobj_tx_xadd_range_direct) X(pmemobj_tx_free)

#define BENCH_PMEMOBJ_DECLARE(name) extern __typeof__(name) *bench_##name;
BENCH_PMEMOBJ_CALLS(BENCH_PMEMOBJ_DECLARE)
#undef BENCH_PMEMOBJ_DECLARE

#define pmemobj_create bench_pmemobj_create
#define pmemobj_close bench_pmemobj_close
#define pmemobj_alloc bench_pmemobj_alloc
#define pmemobj_persist bench_pmemobj_persist
#define pmemobj_errormsg bench_pmemobj_errormsg
#define pmemobj_root bench_pmemobj_root
#define pmemobj_tx_begin bench_pmemobj_tx_begin
#define pmemobj_tx_stage bench_pmemobj_tx_stage
#define pmemobj_tx_process bench_pmemobj_tx_process
#define pmemobj_tx_end bench_pmemobj_tx_end
#define pmemobj_tx_errno bench_pmemobj_tx_errno
#define pmemobj_tx_alloc bench_pmemobj_tx_alloc
#define pmemobj_tx_add_range bench_pmemobj_tx_add_range
#define pmemobj_tx_add_range_direct bench_pmemobj_tx_add_range_direct
#define pmemobj_tx_xadd_range_direct bench_pmemobj_tx_xadd_range_direct
#define pmemobj_tx_free bench_pmemobj_tx_free
#else
#define BENCH_HAVE_PMEMOBJ 0
#endif

/* Loads the library (once; PMEM_IS_PMEM_FORCE defaults to 1 first, so that
 * a pool on tmpfs writes back cache lines instead of calling msync): 0, or
 * -1 after bench_fail says why. */
int bench_pmemobj_load(void);

#if BENCH_HAVE_PMEMOBJ
/* Runs body(arg) as one transaction of pool (TX_BEGIN ... TX_END): 0 when
 * it committed, -1 after bench_fail says why it aborted. */
int bench_pmemobj_tx(PMEMobjpool *pool, void (*body)(void *arg), void *arg);
#endif

#ifdef __cplusplus
}
#endif
#endif
