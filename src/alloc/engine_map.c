/*
 * engine_map.c -- the data region as pheap_walk_chunks reports it: the
 * extent index copied a few dozen nodes at a time (the lock is never held
 * while the caller's function runs), each slab with its class and
 * occupancy, free space split by what the file stores.  Reads only.
 */
#include "alloc/engine_int.h"

#include "os/os.h"
#include "pheap.h"

#define MAP_BATCH 64u

typedef struct map_walk {
    ph_engine *e;
    const ph_engine_map_req *req;
} map_walk;

static int emit(map_walk *w, uint64_t off, uint64_t bytes, unsigned kind)
{
    pheap_chunk_run r = {.off = off, .bytes = bytes, .kind = kind};
    if (kind == PHEAP_CHUNK_META)
        r.what = "metadata block";
    return bytes ? w->req->fn(w->req->arg, &r) : 0;
}

/* Free space [off, end): FREE where the file stores whole pages of it,
 * PUNCHED elsewhere (a page partly stored counts as stored). */
static int emit_free(map_walk *w, uint64_t off, uint64_t end)
{
    int rc = 0;
    uint64_t d, de;
    while (!rc && off < end) {
        if (!ph_os_next_data(w->req->fd, off, end, &d, &de))
            return emit(w, off, end - off, PHEAP_CHUNK_PUNCHED);
        d = PH_ALIGN_DOWN(d, PH_PAGE_SIZE);
        de = PH_MIN(PH_ALIGN_UP(de, PH_PAGE_SIZE), end);
        if (d > off)
            rc = emit(w, off, d - off, PHEAP_CHUNK_PUNCHED);
        if (!rc)
            rc = emit(w, PH_MAX(d, off), de - PH_MAX(d, off), PHEAP_CHUNK_FREE);
        off = PH_MAX(de, off + PH_PAGE_SIZE);
    }
    return rc;
}

static int emit_slab(map_walk *w, uint64_t off, unsigned cls)
{
    const ph_slab *s = ph_engine_chunk_slab(w->e, off);
    pheap_chunk_run r = {.off = off, .bytes = PH_CHUNK_SIZE, .kind = PHEAP_CHUNK_SLAB, .cls = cls,
                         .blocks_total = ph_class_blocks(cls)};
    /* No slab in the chunk map: committed a moment ago, not yet handed
     * to its arena, so nothing is allocated in it. */
    if (s) { /* as of one moment between morphs; by the class it has now -- which
              * the walk's copy of the index may not know: the chunk may have been
              * released and made a slab of another class since the copy */
        ph_slab_view v;
        ph_slab_view_of(s, &v);
        r.blocks_used = v.live;
        r.cls = v.cls;
        r.blocks_total = v.nblocks;
        if (v.morph && (r.old_used = v.old_live) != 0)
            r.old_cls = v.old_cls;
    }
    return w->req->fn(w->req->arg, &r);
}

static int emit_node(map_walk *w, const ph_extnode *n)
{
    uint64_t off = w->e->data_off + n->page * PH_PAGE_SIZE, bytes = n->npages * PH_PAGE_SIZE;
    switch (n->kind) {
    case PH_EXT_SLAB:
        return emit_slab(w, off, n->cls);
    case PH_EXT_LARGE:
        return emit(w, off, bytes,
                    w->req->is_meta(w->req->arg, off, bytes) ? PHEAP_CHUNK_META
                                                             : PHEAP_CHUNK_LARGE);
    case PH_EXT_FREE:
        return emit_free(w, off, off + bytes);
    default:
        return emit(w, off, bytes, PHEAP_CHUNK_RESERVED);
    }
}

int ph_engine_map(ph_engine *e, const ph_engine_map_req *req)
{
    map_walk w = {e, req};
    ph_extnode batch[MAP_BATCH];
    uint64_t page = 0;
    for (;;) {
        size_t n = ph_extents_copy(e->ext, page, batch, MAP_BATCH);
        if (n == 0)
            return 0;
        for (size_t i = 0; i < n; i++) {
            /* The first node starts before `page` when the index changed
             * since the last batch: the part reported already is cut off
             * (a slab is reported whole: a slab is one chunk). */
            ph_extnode node = batch[i];
            if (node.page < page && node.kind != PH_EXT_SLAB) {
                node.npages -= page - node.page;
                node.page = page;
            }
            int rc = emit_node(&w, &node);
            if (rc)
                return rc;
            page = PH_MAX(page, node.page + node.npages);
        }
    }
}
