/*
 * morph_common.h -- what the crash tests of slab morphing share (morph.c,
 * morph_frees.c): blocks filled with a pattern of their offset and made
 * durable, the check that a block is live with it, and operations run one
 * at a time, each in a thread of its own on CPU 0 -- its exit returns its
 * cached blocks, so that a slab may morph, and one CPU means one arena (a
 * simulated heap's threads share one anyway).
 */
#ifndef PH_TEST_MORPH_COMMON_H
#define PH_TEST_MORPH_COMMON_H

#include <pthread.h>
#include <unistd.h>

#include "harness.h"

/* Allocates `size` bytes filled with their offset's pattern, durable. */
static int morph_alloc_filled(pheap *h, size_t size, pheap_off *out)
{
    if (!(*out = pheap_alloc(h, size)))
        return -1;
    void *p = pheap_direct(h, *out);
    ph_test_fill(p, size, *out);
    pheap_persist(h, p, size);
    return 0;
}

/* Fails the test unless the block at `off` is live, `size` bytes, with its
 * pattern. */
static void morph_expect_block(pheap *h, pheap_off off, size_t size, const char *what)
{
    if (pheap_usable_size(h, off) != size)
        ph_test_fail(__FILE__, __LINE__, "%s %llu: not live (%s)", what, (unsigned long long)off,
                     pheap_errmsg());
    else if (!ph_test_intact(pheap_direct(h, off), size, off))
        ph_test_fail(__FILE__, __LINE__, "%s %llu: its contents changed", what,
                     (unsigned long long)off);
}

/* A fresh heap at the test path `name`, outside the simulator (1 MiB, no
 * flushing), with this thread on CPU 0 like the operations. */
static pheap *morph_plain_heap(const char *name)
{
    const char *path = ph_test_path(name);
    unlink(path);
    pheap_options o = {.size = 1u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h = ph_test_open(path, &o);
    (void)ph_test_pin_cpu(0);
    return h;
}

/* A fresh closed heap at the test path `name` for an enumeration to start
 * from (1 MiB of data that may grow to 8 MiB): its path, or NULL. */
static const char *morph_base(const char *name)
{
    const char *base = ph_test_path(name);
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    return h && pheap_close(h) == 0 ? base : NULL;
}

/* The test's operations: morph_step(h, op) returns 0 or an error. */
static int morph_step(pheap *h, unsigned op);

typedef struct morph_op {
    pheap *h;
    unsigned op;
    int rc;
} morph_op;

static void *morph_op_thread(void *arg)
{
    morph_op *o = arg;
    (void)ph_test_pin_cpu(0);
    o->rc = morph_step(o->h, o->op);
    return NULL;
}

/* Operation `op` in a thread of its own: its result. */
static int morph_run_op(pheap *h, unsigned op)
{
    morph_op o = {h, op, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, morph_op_thread, &o) != 0)
        return -1;
    pthread_join(t, NULL);
    return o.rc;
}

/* The crash workload: operations 0 .. nops - 1, each marked when it
 * returns. */
static void morph_workload(ph_crash_ctx *c, unsigned nops)
{
    for (unsigned op = 0; op < nops; op++) {
        if (morph_run_op(c->heap, op))
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", op, pheap_errmsg());
        ph_crash_mark(c);
    }
}

#endif
