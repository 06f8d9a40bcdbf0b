/*
 * vec_pmemobj.h -- libpmemobj's side of pheap_cppbench's vector rows.
 */
#ifndef PHEAP_BENCH_VEC_PMEMOBJ_H
#define PHEAP_BENCH_VEC_PMEMOBJ_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* push_backs per second of a vector of int in a libpmemobj pool at path
 * (made, then removed): `pushes` in one transaction (*one), then
 * `tx_pushes` with a transaction each (*each).  0, or -1 with *why saying
 * why (no libpmemobj included: the caller skips the rows). */
int vec_pmemobj_run(const char *path, size_t pushes, size_t tx_pushes, double *one, double *each,
                    const char **why);

#ifdef __cplusplus
}
#endif
#endif
