/*
 * arenas.c -- per-CPU arenas must not strand memory: a heap filled from one
 * CPU, emptied, then filled from another CPU holds as many blocks, because
 * an arena that cannot make a slab takes blocks from the other arenas and
 * then reclaims empty slabs.
 */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "harness.h"

static int pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

static size_t fill(pheap *h, size_t size, pheap_off *v, size_t cap)
{
    size_t n = 0;
    while (n < cap && (v[n] = pheap_alloc(h, size)) != 0)
        n++;
    return n;
}

TEST(fill_from_one_cpu_then_another)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || pin(0) != 0) {
        fprintf(stderr, "  needs two CPUs; nothing to check here\n");
        return;
    }
    const char *path = ph_test_path("arenas.heap");
    unlink(path);
    /* Placement is what is checked here, not durability: no flushing. */
    pheap_options o = {.size = 4u << 20, .flags = PHEAP_CREATE, .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    size_t cap = (4u << 20) / 64;
    pheap_off *v = calloc(cap, sizeof(*v));
    REQUIRE(v);
    static const size_t sizes[] = {64, 1000, 64};
    static const int cpus[] = {0, 1, 1};
    size_t first = 0;
    for (int round = 0; round < 3; round++) {
        REQUIRE(pin(cpus[round]) == 0);
        size_t n = fill(h, sizes[round], v, cap);
        CHECK_EQ(pheap_errno(), PHEAP_ENOMEM);
        if (round == 0)
            first = n;
        if (round == 2)
            CHECK(n >= first); /* the same size class, from the other CPU's side */
        for (size_t i = 0; i < n; i++)
            REQUIRE_OK(pheap_free(h, v[i]));
        REQUIRE_OK(pheap_check(h, NULL));
    }
    free(v);
    pheap_close(h);
}
