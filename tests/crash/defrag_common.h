/*
 * defrag_common.h -- what the crash tests of pheap_defrag share (defrag.c,
 * defrag_chain.c, defrag_morph.c): a base heap whose root "anchor" names
 * a zeroed block (where the test keeps the offsets it checks), operations
 * run one after another in the workload thread on CPU 0 (one arena: the
 * slabs counted are the ones the test made), the call with the figures it
 * must give, and the enumeration with its checks.
 */
#ifndef PH_TEST_DEFRAG_COMMON_H
#define PH_TEST_DEFRAG_COMMON_H

#include <string.h>
#include <unistd.h>

#include "harness.h"

/* The test's operations: defrag_step(h, op) returns 0 or an error. */
static int defrag_step(pheap *h, unsigned op);

static pheap_off defrag_anchor(pheap *h)
{
    return pheap_root_get(h, "anchor");
}

/* The anchor block in a crash image: NULL, the test failed, when the root
 * is lost. */
static void *defrag_anchor_block(pheap *h)
{
    pheap_off a = defrag_anchor(h);
    if (!a)
        ph_test_fail(__FILE__, __LINE__, "root \"anchor\" lost");
    return a ? pheap_direct(h, a) : NULL;
}

/* The heap keeps working: n blocks of sizes a and b in turn, then freed. */
static int defrag_churn(pheap *h, size_t a, size_t b, unsigned n)
{
    pheap_off x[64];
    int rc = 0;
    n = n < 64 ? n : 64;
    for (unsigned i = 0; i < n && !rc; i++)
        if (!(x[i] = pheap_alloc(h, i % 2 ? b : a)))
            rc = -1;
    for (unsigned i = 0; i < n && !rc; i++)
        rc = pheap_free(h, x[i]);
    return rc;
}

/* pheap_defrag over the n slots, which must move `moved` blocks and free
 * `freed` slabs (at least, when `at_least`). */
static int defrag_expect(pheap *h, pheap_off **slots, size_t n, size_t moved, size_t freed,
                         int at_least)
{
    pheap_defrag_result r;
    int rc = pheap_defrag(h, slots, n, &r);
    int off = at_least ? r.relocated < moved || r.slabs_freed < freed
                       : r.relocated != moved || r.slabs_freed != freed;
    if (!rc && off)
        ph_test_fail(__FILE__, __LINE__, "defrag: %zu moved, %zu slabs freed (want %s%zu, %zu)",
                     r.relocated, r.slabs_freed, at_least ? "at least " : "", moved, freed);
    return rc;
}

static unsigned defrag_nops;

static void defrag_workload(ph_crash_ctx *c)
{
    (void)ph_test_pin_cpu(0);
    for (unsigned op = 0; op < defrag_nops; op++) {
        if (defrag_step(c->heap, op))
            ph_test_fail(__FILE__, __LINE__, "op %u: %s", op, pheap_errmsg());
        ph_crash_mark(c);
    }
}

/* Every crash point of the nops operations on a fresh heap at the test
 * path `file` whose anchor block has anchor_size bytes: no violation. */
static void defrag_enumerate(const char *name, const char *file, size_t anchor_size, unsigned nops,
                             ph_crash_verify_fn verify)
{
    const char *base = ph_test_path(file);
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    pheap_off a = pheap_alloc(h, anchor_size);
    REQUIRE(a);
    memset(pheap_direct(h, a), 0, anchor_size);
    pheap_persist(h, pheap_direct(h, a), anchor_size);
    REQUIRE_OK(pheap_root_set(h, "anchor", a));
    REQUIRE_OK(pheap_close(h));
    defrag_nops = nops;
    ph_crash_stats st = ph_crash_enumerate(name, base, defrag_workload, verify, NULL);
    CHECK(st.fences > nops);
    CHECK(st.images > st.fences);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}

#endif
