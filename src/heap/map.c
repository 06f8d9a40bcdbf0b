/*
 * map.c -- pheap_walk_chunks: the file run by run, for heap maps (pheap
 * map) and fragmentation studies.  The metadata regions come from the
 * header's region table, the data region from the allocation engine
 * (alloc/engine_map.c), which asks here which large blocks hold pheap's
 * own metadata: the names directory's segments, and the blocks guarded
 * now (transaction-log segments).  Reads only.
 */
#include <stdlib.h>

#include "heap/heap.h"
#include "heap/names.h"
#include "util/error.h"

typedef struct map_ctx {
    ph_space *sp;
    uint64_t *segs;            /* names segments' offsets, sorted */
    size_t nsegs, cap;
    pheap_chunk_fn fn;
    void *arg;
} map_ctx;

static const char *region_name(uint32_t kind)
{
    switch (kind) {
    case PH_REGION_HEADER: return "header";
    case PH_REGION_ROOTS: return "roots";
    case PH_REGION_LANES: return "lanes";
    case PH_REGION_SLABS: return "slab descriptors";
    case PH_REGION_EXTLOG: return "extent log";
    case PH_REGION_NAMES: return "names";
    default: return "metadata";
    }
}

/* The program's function, outside pheap's write window (alloc/keys.h). */
static int report_run(map_ctx *m, const pheap_chunk_run *r)
{
    int sealed = ph_window_seal();
    int rc = m->fn(m->arg, r);
    ph_window_unseal(sealed);
    return rc;
}

static int emit_meta(map_ctx *m, uint64_t off, uint64_t bytes, const char *what)
{
    pheap_chunk_run r = {.off = off, .bytes = bytes, .kind = PHEAP_CHUNK_META, .what = what};
    return bytes ? report_run(m, &r) : 0;
}

static int add_segment(void *arg, ph_names_seg *s, uint64_t off)
{
    map_ctx *m = arg;
    (void)s;
    if (m->nsegs == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 16;
        uint64_t *grown = realloc(m->segs, cap * sizeof(*grown));
        if (!grown)
            return ph_err(PHEAP_ENOMEM, "pheap_walk_chunks: out of memory");
        m->segs = grown;
        m->cap = cap;
    }
    m->segs[m->nsegs++] = off;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int is_meta(void *arg, uint64_t off, uint64_t bytes)
{
    map_ctx *m = arg;
    return (m->nsegs && bsearch(&off, m->segs, m->nsegs, sizeof(*m->segs), by_offset) != NULL) ||
           ph_space_guarded_overlap(m->sp, off, bytes);
}

static int forward(void *arg, const pheap_chunk_run *r)
{
    return report_run(arg, r);
}

/* The metadata regions, from the region table (validated at open: rows
 * sorted and disjoint, the data region last, at data_off). */
static int walk_regions(pheap *h, map_ctx *m)
{
    uint64_t at = 0;
    for (uint32_t i = 0; i < h->hdr.nregions; i++) {
        const ph_region *r = &h->hdr.regions[i];
        if (r->kind == PH_REGION_DATA)
            break;
        int rc = emit_meta(m, at, r->offset - at, "padding");
        if (!rc)
            rc = emit_meta(m, r->offset, r->size, region_name(r->kind));
        if (rc)
            return rc;
        at = r->offset + r->size;
    }
    return emit_meta(m, at, h->sp.data_off - at, "padding");
}

ph_export int pheap_walk_chunks(pheap *h, pheap_chunk_fn fn, void *arg)
{
    PH_WINDOW();
    if (ph_heap_unshared(h, "pheap_walk_chunks"))
        return PHEAP_ENOTSUP;
    if (!h || !fn)
        return ph_err(PHEAP_EINVAL, "pheap_walk_chunks: NULL %s", h ? "function" : "heap");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_walk_chunks");
    map_ctx m = {.sp = &h->sp, .fn = fn, .arg = arg};
    int rc = h->names ? ph_names_each_segment(h, add_segment, &m) : 0;
    if (rc) {
        free(m.segs);
        return rc;
    }
    if (m.nsegs)
        qsort(m.segs, m.nsegs, sizeof(*m.segs), by_offset);
    rc = walk_regions(h, &m);
    /* A simulated heap's working copy is private: the file, untouched
     * until close, tells its holes as they were at open. */
    ph_engine_map_req req = {h->sp.fd, is_meta, forward, &m};
    if (!rc)
        rc = ph_engine_map(h->engine, &req);
    free(m.segs);
    return rc;
}
