/*
 * vec_pmemobj.c -- what pmem::obj::vector<int>::push_back of libpmemobj-cpp
 * does inside pmem::obj::transaction::run, written over libpmemobj's C
 * calls: libpmemobj-cpp is a header-only library that Debian does not
 * package, so pheap_cppbench measures the calls it makes instead.
 *
 * Per push_back, in the transaction (flattened into the caller's):
 *   - when the vector is full: a snapshot of the elements, of the array
 *     pointer and of the capacity, pmemobj_tx_alloc of the next power of
 *     two, the elements copied, pmemobj_tx_free of the old array;
 *   - otherwise the slot the element goes to is added to the transaction
 *     without a snapshot (POBJ_XADD_NO_SNAPSHOT: past the size, it has no
 *     value to restore; it is written back at the commit);
 *   - a snapshot of the size, then the element and the size stored.
 * The vector object is the pool's root object.
 */
#include "vec_pmemobj.h"
#include "bench.h"
#include "pmemobj_calls.h"

#if BENCH_HAVE_PMEMOBJ
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define LAYOUT "pheap-cppbench-vector"

struct vec {
    uint64_t size, capacity;
    PMEMoid data;
};

static PMEMobjpool *pool;

static int *elems(const struct vec *v)
{
    return OID_IS_NULL(v->data) ? NULL : (int *)((char *)pool + v->data.off);
}

static uint64_t next_pow2(uint64_t n)
{
    uint64_t c = 1;
    while (c < n)
        c <<= 1;
    return c;
}

/* One push_back, inside the caller's transaction (aborts it on failure). */
static void push(struct vec *v, int value)
{
    if (v->size == v->capacity) {
        uint64_t cap = next_pow2(v->size + 1);
        if (v->size)
            pmemobj_tx_add_range_direct(elems(v), v->size * sizeof(int));
        pmemobj_tx_add_range_direct(&v->data, sizeof v->data);
        pmemobj_tx_add_range_direct(&v->capacity, sizeof v->capacity);
        PMEMoid fresh = pmemobj_tx_alloc(cap * sizeof(int), 0);
        memcpy((char *)pool + fresh.off, elems(v), v->size * sizeof(int));
        if (!OID_IS_NULL(v->data))
            pmemobj_tx_free(v->data);
        v->data = fresh;
        v->capacity = cap;
    } else {
        pmemobj_tx_xadd_range_direct(elems(v) + v->size, sizeof(int), POBJ_XADD_NO_SNAPSHOT);
    }
    pmemobj_tx_add_range_direct(&v->size, sizeof v->size);
    elems(v)[v->size] = value;
    v->size++;
}

/* Vector 0 or 1 of the two the root object holds (empty when made). */
static struct vec *root_vector(size_t which)
{
    PMEMoid root = pmemobj_root(pool, sizeof(struct vec) * 2);
    return (struct vec *)((char *)pool + root.off) + which;
}

struct pushes {
    struct vec *v;
    size_t from, n;
};

static void push_all(void *arg)
{
    const struct pushes *p = arg;
    for (size_t i = 0; i < p->n; i++)
        push(p->v, (int)(p->from + i));
}

/* n push_backs of from, from + 1, ... in one transaction: 0 or -1. */
static int push_in_tx(struct vec *v, size_t from, size_t n)
{
    struct pushes p = {v, from, n};
    return bench_pmemobj_tx(pool, push_all, &p);
}

int vec_pmemobj_run(const char *path, size_t pushes, size_t tx_pushes, double *one, double *each,
                    const char **why)
{
    *why = NULL;
    if (bench_pmemobj_load() != 0) {
        *why = bench_error();
        return -1;
    }
    unlink(path);
    /* the arrays (twice the elements at a growth) and an undo entry per push */
    size_t pool_size = pushes * 96 + (64u << 20);
    pool = pmemobj_create(path, LAYOUT, pool_size, 0600);
    if (!pool) {
        bench_fail("pmemobj_create %s: %s", path, pmemobj_errormsg());
        *why = bench_error();
        return -1;
    }
    unlink(path); /* the pool keeps it */
    struct vec *v = root_vector(0);
    uint64_t t0 = bench_now_ns();
    int rc = push_in_tx(v, 0, pushes);
    *one = (double)pushes * 1e9 / (double)(bench_now_ns() - t0);
    struct vec *w = root_vector(1);
    t0 = bench_now_ns();
    for (size_t i = 0; i < tx_pushes && rc == 0; i++)
        rc = push_in_tx(w, i, 1);
    *each = (double)tx_pushes * 1e9 / (double)(bench_now_ns() - t0);
    if (rc == 0 && (v->size != pushes || w->size != tx_pushes ||
                    elems(w)[tx_pushes - 1] != (int)(tx_pushes - 1))) {
        bench_fail("the libpmemobj vector holds %llu and %llu elements",
                   (unsigned long long)v->size, (unsigned long long)w->size);
        rc = -1;
    }
    pmemobj_close(pool);
    pool = NULL;
    if (rc != 0)
        *why = bench_error();
    return rc;
}

#else

int vec_pmemobj_run(const char *path, size_t pushes, size_t tx_pushes, double *one, double *each,
                    const char **why)
{
    (void)path, (void)pushes, (void)tx_pushes, (void)one, (void)each;
    bench_pmemobj_load();
    *why = bench_error();
    return -1;
}

#endif
