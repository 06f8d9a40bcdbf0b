/*
 * alloc_init.c -- crash points of allocations with an initialiser:
 * pheap_alloc_to_init (small and large, zeroed, filled, both, canceled)
 * and pheap_alloc_init, on a heap whose free blocks hold old bytes, crashed
 * at every fence and store in every variant.  After reopening: a slot
 * holds its old value or the offset of a block whose every usable byte is
 * what its initialiser made (never old bytes, never a partial fill);
 * pheap_alloc_init's block, once the call returned, is allocated and
 * filled; a canceled allocation changes nothing; no block leaks.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { NSLOTS = 16, OLD = 0xab };
enum { FILL_ALL, FILL_ZERO, FILL_ZERO_HEAD, FILL_CANCEL }; /* what the block gets */
enum { KIND_TO, KIND_PLAIN, KIND_FREE_FROM };

typedef struct op {
    int kind;
    unsigned slot;
    size_t size;
    int fill;
} op;

#define KiB 1024u
#define HEAD 40 /* bytes FILL_ZERO_HEAD patterns */

static const op ops[] = {
    {KIND_TO, 0, 16, FILL_ALL},           {KIND_TO, 1, 64, FILL_ZERO},
    {KIND_TO, 2, 1000, FILL_ZERO_HEAD},   {KIND_TO, 3, 100 * KiB, FILL_ALL},
    {KIND_TO, 4, 64, FILL_CANCEL},        {KIND_FREE_FROM, 1, 0, 0},
    {KIND_TO, 1, 64, FILL_ALL},           {KIND_PLAIN, 5, 48, FILL_ZERO_HEAD},
    {KIND_PLAIN, 6, 200 * KiB, FILL_ALL}, {KIND_TO, 7, 16384, FILL_ZERO},
    {KIND_TO, 8, 150 * KiB, FILL_CANCEL}, {KIND_TO, 9, 64, FILL_ALL},
};
#define NOPS (sizeof(ops) / sizeof(ops[0]))

typedef struct run {
    pheap_off after[NOPS];     /* slot value after op i */
    uint64_t got_fence[NOPS];  /* plain: fences and stores when pheap_alloc_init returned */
    uint64_t got_store[NOPS];
    unsigned met_old;          /* initialisers that found old bytes in their block */
    uint64_t kept;             /* live blocks of the base heap besides the slot array */
} run;

static uint64_t seed_of(unsigned i)
{
    return 0x1000 + i;
}

typedef struct init_arg {
    unsigned op;
    run *r;
} init_arg;

static int initialiser(pheap *h, void *block, size_t usable, void *arg)
{
    init_arg *a = arg;
    const op *o = &ops[a->op];
    (void)h;
    if (o->fill == FILL_ALL && ((unsigned char *)block)[usable - 1] == OLD)
        a->r->met_old++;
    if (o->fill == FILL_CANCEL) {
        memset(block, 0x77, usable); /* scribbles, then refuses */
        return 42;
    }
    ph_test_fill(block, o->fill == FILL_ZERO_HEAD ? HEAD : usable, seed_of(a->op));
    return 0;
}

/* Whether the block at `off` holds exactly what op i's initialiser made. */
static int filled(pheap *h, unsigned i, pheap_off off)
{
    const unsigned char *p = pheap_direct(h, off);
    size_t usable = pheap_usable_size(h, off), from = 0;
    if (!p || usable < ops[i].size)
        return 0;
    if (ops[i].fill == FILL_ALL)
        return ph_test_intact(p, usable, seed_of(i));
    if (ops[i].fill == FILL_ZERO_HEAD) {
        if (!ph_test_intact(p, HEAD, seed_of(i)))
            return 0;
        from = HEAD;
    }
    for (size_t k = from; k < usable; k++)
        if (p[k])
            return 0;
    return 1;
}

static pheap_off *slots_of(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "slots"));
}

static void workload(ph_crash_ctx *c)
{
    run *r = c->arg;
    pheap *h = c->heap;
    pheap_off *slots = slots_of(h);
    for (unsigned i = 0; i < NOPS; i++) {
        const op *o = &ops[i];
        pheap_off *s = &slots[o->slot];
        unsigned flags = o->fill == FILL_ZERO || o->fill == FILL_ZERO_HEAD ? PHEAP_ALLOC_ZERO : 0;
        pheap_init_fn fn = o->fill == FILL_ZERO ? NULL : initialiser;
        init_arg a = {i, r};
        int rc = 0;
        if (o->kind == KIND_TO) {
            rc = pheap_alloc_to_init(h, o->size, s, flags, fn, &a);
        } else if (o->kind == KIND_FREE_FROM) {
            rc = pheap_free_from(h, s);
        } else {
            pheap_off off = pheap_alloc_init(h, o->size, flags, fn, &a);
            rc = off ? 0 : pheap_errno();
            r->got_fence[i] = pheap_sim_fence_count(h);
            r->got_store[i] = pheap_sim_store_count(h);
            if (off && !filled(h, i, off))
                ph_test_fail(__FILE__, __LINE__, "op %u: block not filled on return", i);
            *s = off;
            pheap_persist(h, s, sizeof(*s));
        }
        if (rc != (o->fill == FILL_CANCEL ? PHEAP_ECANCELED : 0))
            ph_test_fail(__FILE__, __LINE__, "op %u: %d (%s)", i, rc, pheap_errmsg());
        r->after[i] = *s;
        ph_crash_mark(c);
    }
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    run *r = c->arg;
    pheap_off *slots = slots_of(h);
    REQUIRE(slots);
    pheap_off expect[NSLOTS] = {0};
    int by[NSLOTS]; /* the op whose block the slot holds */
    for (unsigned k = 0; k < NSLOTS; k++)
        by[k] = -1;
    for (unsigned i = 0; i < done; i++) {
        expect[ops[i].slot] = r->after[i];
        by[ops[i].slot] = ops[i].kind == KIND_FREE_FROM || ops[i].fill == FILL_CANCEL
                              ? by[ops[i].slot] : (int)i;
    }
    int in_flight = done < NOPS;
    const op *f = in_flight ? &ops[done] : NULL;
    /* pheap_alloc_init had returned: its block is allocated and filled,
     * published or not. */
    if (f && f->kind == KIND_PLAIN &&
        ((c->crash_fence && c->crash_fence > r->got_fence[done]) ||
         (c->crash_store && c->crash_store > r->got_store[done])) &&
        !filled(h, done, r->after[done]))
        ph_test_fail(__FILE__, __LINE__, "op %u: pheap_alloc_init had returned %llu: not an "
                     "allocated, filled block now", done, (unsigned long long)r->after[done]);
    uint64_t blocks[NSLOTS][2];
    unsigned n = 0;
    for (unsigned k = 0; k < NSLOTS; k++) {
        pheap_off v = slots[k];
        int new_value = f && f->slot == k && v == r->after[done] && v != expect[k];
        if (v != expect[k] && !new_value) {
            ph_test_fail(__FILE__, __LINE__, "slot %u = %llu, expected %llu%s", k,
                         (unsigned long long)v, (unsigned long long)expect[k],
                         f && f->slot == k ? " or the op in flight's" : "");
            continue;
        }
        if (!v)
            continue;
        unsigned i = new_value ? done : (unsigned)by[k];
        if (!filled(h, i, v))
            ph_test_fail(__FILE__, __LINE__, "slot %u: block %llu of op %u is not (all) what its "
                         "initialiser made (%s)", k, (unsigned long long)v, i,
                         new_value ? "op in flight" : "op returned");
        blocks[n][0] = v;
        blocks[n][1] = v + pheap_usable_size(h, v);
        n++;
    }
    ph_test_disjoint(blocks, n);
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t reachable = n + 1 + r->kept;
    int plain = f && f->kind == KIND_PLAIN;
    if (st.live_blocks != reachable && !(plain && st.live_blocks == reachable + 1))
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks, %llu reachable (op in flight: %d)",
                     (unsigned long long)st.live_blocks, (unsigned long long)reachable,
                     in_flight ? (int)done : -1);
}

/* A heap with a rooted slot array whose free blocks of the classes and
 * extents the ops use hold OLD bytes: several slabs of each class (one
 * per simulated arena and more), each keeping one live block so that it
 * stays a slab; a freed 100 KiB extent between two live ones. */
static const char *make_base(run *r)
{
    const char *path = ph_test_path("crash-init.heap");
    pheap_options o = {.size = 8u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    if (pheap_open(path, &o, &h) != 0)
        return ph_test_fail(__FILE__, __LINE__, "create: %s", pheap_errmsg()), NULL;
    pheap_off s = pheap_alloc(h, NSLOTS * sizeof(pheap_off));
    memset(pheap_direct(h, s), 0, NSLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, s), NSLOTS * sizeof(pheap_off));
    pheap_root_set(h, "slots", s);
    struct pheap_stats st;
    pheap_stats(h, &st);
    static const size_t sizes[] = {16, 48, 64, 1000, 16384};
    for (unsigned z = 0; z < PH_ARRAY_N(sizes); z++) {
        pheap_class_info ci = {0};
        for (unsigned k = 0; k < pheap_class_count() && ci.block_size < sizes[z]; k++)
            pheap_stats_class(h, k, &ci);
        unsigned n = 6 * ci.blocks_per_slab;
        pheap_off *b = malloc(n * sizeof(pheap_off));
        for (unsigned i = 0; i < n; i++) {
            b[i] = pheap_alloc(h, sizes[z]);
            memset(pheap_direct(h, b[i]), OLD, ci.block_size);
        }
        for (unsigned i = 0; i < n; i++) {
            pheap_off first = b[i] - (b[i] - st.data_offset) % 65536; /* its slab's start */
            if (b[i] != first + (pheap_off)(ci.blocks_per_slab - 1) * ci.block_size)
                pheap_free(h, b[i]);
            else
                r->kept++; /* each slab's last block stays */
        }
        free(b);
    }
    pheap_off l[3] = {pheap_alloc(h, 100 * KiB), pheap_alloc(h, 100 * KiB), pheap_alloc(h, 100 * KiB)};
    for (unsigned i = 0; i < 3; i++)
        memset(pheap_direct(h, l[i]), OLD, 100 * KiB);
    pheap_free(h, l[1]);
    r->kept += 2;
    pheap_stats(h, &st);
    if (st.live_blocks != r->kept + 1)
        ph_test_fail(__FILE__, __LINE__, "base: %llu live blocks, want %llu",
                     (unsigned long long)st.live_blocks, (unsigned long long)r->kept + 1);
    pheap_close(h);
    return path;
}

TEST(alloc_to_init_and_alloc_init_at_every_fence)
{
    static run r;
    memset(&r, 0, sizeof(r));
    const char *base = make_base(&r);
    REQUIRE(base);
    ph_crash_stats st = ph_crash_enumerate("alloc/init", base, workload, verify, &r);
    CHECK(st.fences > NOPS);
    CHECK(st.images > 5 * st.fences);
    CHECK(r.met_old > 0); /* initialisers met blocks that held old bytes */
}
