/*
 * heapmap.c -- a heap of known shape for the heap-map tests: slabs of
 * several size classes at different occupancies, a slab morphed to another
 * class with old blocks left (LOG mode), large blocks, a freed large block
 * that the close punches, a small freed extent between live ones that it
 * does not, a named object (a names segment: metadata in the data region),
 * and a data region grown past its first size; and the
 * check that a heap map agrees with the statistics.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"

/* Blocks of class size `size` to allocate, and every how-many-th of them
 * to free again (0: none). */
static const struct {
    size_t size;
    unsigned count, free_every;
} smalls[] = {
    {64, 2048, 0},   /* two full slabs of 64-byte blocks */
    {256, 256, 2},   /* one slab half used */
    {4096, 4, 0},    /* a quarter of a slab */
    {16384, 12, 3},  /* three slabs, two thirds used */
};

pheap *ph_test_map_shape(const char *path, unsigned consistency, ph_map_shape *out)
{
    memset(out, 0, sizeof(*out));
    unlink(path);
    pheap_options o = {.size = 2u << 20, .max_size = 64u << 20,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .consistency = consistency};
    pheap *h = ph_test_open(path, &o);
    if (!h)
        return NULL;
    static pheap_off blocks[2048];
    for (size_t c = 0; c < PH_ARRAY_N(smalls); c++) {
        for (unsigned i = 0; i < smalls[c].count; i++)
            if (!(blocks[i] = pheap_alloc(h, smalls[c].size)))
                goto fail;
        for (unsigned i = 0; smalls[c].free_every && i < smalls[c].count; i += smalls[c].free_every)
            if (pheap_free(h, blocks[i]))
                goto fail;
    }
    /* LOG mode: a slab morphed from 1024- to 512-byte blocks, eight old
     * blocks left in it.  Of two slabs of 1024-byte blocks, the first is
     * thinned to 8 blocks, then the second to 32 (the thread's cache keeps
     * only blocks of the second), then the first class of 512-byte blocks
     * takes the emptier one. */
    if (consistency == PHEAP_CONSISTENCY_LOG) {
        for (unsigned i = 0; i < 128; i++)
            if (!(blocks[i] = pheap_alloc(h, 1024)))
                goto fail;
        for (unsigned i = 0; i < 128; i++)
            if ((i < 64 ? i % 8 : i % 2) && pheap_free(h, blocks[i]))
                goto fail;
        for (unsigned i = 0; i < 30; i++)
            if (!pheap_alloc(h, 512))
                goto fail;
        struct pheap_stats st;
        if (pheap_stats(h, &st) || st.slab_morphs != 1) {
            ph_test_fail(__FILE__, __LINE__, "the shape's slab did not morph");
            goto fail;
        }
    }
    if (!pheap_alloc_named(h, "shape", 100))
        goto fail;
    /* A freed 64 KiB extent between two live ones: below the punch size,
     * it keeps its storage. */
    pheap_off x1 = pheap_alloc(h, 64u << 10);
    out->kept_free = pheap_alloc(h, 64u << 10);
    pheap_off x2 = pheap_alloc(h, 64u << 10);
    if (!x1 || !out->kept_free || !x2)
        goto fail;
    for (pheap_off b = x1; b <= x2; b += 64u << 10)
        memset(pheap_direct(h, b), 0x5a, 64u << 10);
    if (x1 + (64u << 10) != out->kept_free || out->kept_free + (64u << 10) != x2 ||
        pheap_free(h, out->kept_free))
        goto fail;
    /* A freed 2 MiB block, written first so that its pages take storage
     * until the close punches them; the heap grows past 2 MiB. */
    out->punched = pheap_alloc(h, 2u << 20);
    if (!out->punched)
        goto fail;
    memset(pheap_direct(h, out->punched), 0xa5, 2u << 20);
    out->large[0] = pheap_alloc(h, 100u << 10);
    out->large[1] = pheap_alloc(h, 1u << 20);
    out->large[2] = pheap_alloc(h, 3u << 20);
    if (!out->large[0] || !out->large[1] || !out->large[2] || pheap_free(h, out->punched))
        goto fail;
    out->punched_bytes = 2u << 20;
    return h;
fail:
    ph_test_fail(__FILE__, __LINE__, "map shape: %s", pheap_errmsg());
    pheap_close(h);
    return NULL;
}

int ph_test_map_shape_file(const char *path, unsigned consistency)
{
    ph_map_shape shape;
    pheap *h = ph_test_map_shape(path, consistency, &shape);
    return h && pheap_close(h) == 0 ? 0 : -1;
}

void ph_test_map_consistent(pheap *h, const pheap_chunk_run *runs, unsigned n)
{
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(h, &st));
    uint64_t at = 0, bytes[7] = {0}, data_meta = 0;
    uint64_t slabs[64] = {0}, used[64] = {0};
    for (unsigned i = 0; i < n; i++) {
        const pheap_chunk_run *r = &runs[i];
        CHECK_EQ(r->off, at);
        CHECK(r->bytes > 0 && r->bytes % PH_PAGE_SIZE == 0);
        REQUIRE(r->kind >= PHEAP_CHUNK_META && r->kind <= PHEAP_CHUNK_RESERVED);
        CHECK((r->kind == PHEAP_CHUNK_META) == (r->what != NULL));
        CHECK(r->off >= st.data_offset || r->kind == PHEAP_CHUNK_META);
        bytes[r->kind] += r->bytes;
        if (r->kind == PHEAP_CHUNK_META && r->off >= st.data_offset) {
            CHECK(!strcmp(r->what, "metadata block"));
            data_meta += r->bytes;
        }
        if (r->kind == PHEAP_CHUNK_SLAB) {
            REQUIRE(r->cls < pheap_class_count());
            CHECK_EQ(r->bytes, PH_CHUNK_SIZE);
            CHECK_EQ(r->off % PH_CHUNK_SIZE, st.data_offset % PH_CHUNK_SIZE);
            CHECK(r->blocks_used <= r->blocks_total);
            slabs[r->cls]++;
            used[r->cls] += r->blocks_used;
            REQUIRE(r->old_cls < pheap_class_count());
            used[r->old_cls] += r->old_used;
        } else {
            CHECK(r->cls == 0 && r->blocks_used == 0 && r->blocks_total == 0);
            CHECK(r->old_cls == 0 && r->old_used == 0);
        }
        at = r->off + r->bytes;
    }
    CHECK_EQ(at, st.size);
    CHECK_EQ(bytes[PHEAP_CHUNK_SLAB], st.slab_bytes);
    CHECK_EQ(bytes[PHEAP_CHUNK_LARGE] + data_meta, st.large_bytes);
    CHECK_EQ(bytes[PHEAP_CHUNK_FREE] + bytes[PHEAP_CHUNK_PUNCHED], st.free_bytes);
    CHECK_EQ(bytes[PHEAP_CHUNK_RESERVED], 0);
    CHECK_EQ(bytes[PHEAP_CHUNK_META] - data_meta, st.data_offset);
    for (unsigned c = 0; c < pheap_class_count(); c++) {
        pheap_class_info ci;
        REQUIRE_OK(pheap_stats_class(h, c, &ci));
        CHECK_EQ(slabs[c], ci.slabs);
        CHECK_EQ(used[c], ci.live_blocks);
        for (unsigned i = 0; i < n; i++)
            if (runs[i].kind == PHEAP_CHUNK_SLAB && runs[i].cls == c)
                CHECK_EQ(runs[i].blocks_total, ci.blocks_per_slab);
    }
}


typedef struct run_list {
    pheap_chunk_run *v;
    unsigned n, cap;
} run_list;

static int add_run(void *arg, const pheap_chunk_run *r)
{
    run_list *l = arg;
    if (l->n == l->cap) {
        unsigned cap = l->cap ? 2 * l->cap : 256;
        pheap_chunk_run *grown = realloc(l->v, cap * sizeof(*grown));
        if (!grown)
            return 1;
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = *r;
    return 0;
}

void ph_test_map_check(pheap *h)
{
    run_list l = {0};
    int rc = pheap_walk_chunks(h, add_run, &l);
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "walk: %d (%s)", rc, pheap_errmsg());
    else
        ph_test_map_consistent(h, l.v, l.n);
    free(l.v);
}
