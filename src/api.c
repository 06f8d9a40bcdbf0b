/*
 * api.c -- the small public calls that only translate between the handle
 * and the layers below: pointers, user-data persistence, statistics and
 * the version.
 */
#include <string.h>

#include "format/layout.h"
#include "heap/heap.h"
#include "heap/names.h"
#include "heap/share.h"
#include "os/os.h"
#include "util/error.h"

#define PH_STR2(x) #x
#define PH_STR(x) PH_STR2(x)

ph_export const char *pheap_version(void)
{
    return PH_STR(PHEAP_VERSION_MAJOR) "." PH_STR(PHEAP_VERSION_MINOR) "." PH_STR(PHEAP_VERSION_PATCH);
}

/* Offsets below data_off are the header and the allocator's metadata:
 * never handed out, so that no user store can land there through them. */
ph_export void *pheap_direct(const pheap *h, pheap_off off)
{
    if (ph_unlikely(!h || off < h->sp.data_off || off >= ph_space_size(&h->sp))) {
        if (!h)
            ph_err(PHEAP_EINVAL, "pheap_direct: heap is NULL");
        else if (off)
            ph_err(PHEAP_ERANGE, "pheap_direct: offset %llu is outside the data region [%llu, %llu)",
                   (unsigned long long)off, (unsigned long long)h->sp.data_off,
                   (unsigned long long)ph_space_size(&h->sp));
        return NULL;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked("pheap_direct");
        return NULL;
    }
    return ph_space_user(&h->sp, off);
}

ph_export pheap_off pheap_offset(const pheap *h, const void *addr)
{
    uintptr_t a = (uintptr_t)addr, b = h ? (uintptr_t)h->sp.view : 0;
    if (ph_unlikely(!h || a < b + h->sp.data_off || a >= b + ph_space_size(&h->sp))) {
        if (!h)
            ph_err(PHEAP_EINVAL, "pheap_offset: heap is NULL");
        else if (addr)
            ph_err(PHEAP_ERANGE, "pheap_offset: %p is outside the heap's data region", addr);
        return 0;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked("pheap_offset");
        return 0;
    }
    return a - b;
}

/* Clamps [addr, addr+len), an address range of the program's view (or of
 * pheap's own, which white-box tests hold), to the mapping; 0 if nothing
 * is left.  *addr becomes pheap's own address of the same bytes. */
static size_t clamp(const pheap *h, const void **addr, size_t len)
{
    uintptr_t a = (uintptr_t)*addr, b = (uintptr_t)h->sp.view, e = b + ph_space_size(&h->sp);
    if (a - (uintptr_t)h->sp.base < ph_space_size(&h->sp)) {
        b = (uintptr_t)h->sp.base;
        e = b + ph_space_size(&h->sp);
    }
    if (h->readonly || a >= e || a + len <= b || a + len < a)
        return 0;
    if (a < b) {
        len -= b - a;
        a = b;
    }
    *addr = ph_space_at(&h->sp, a - b);
    return PH_MIN(len, e - a);
}

ph_export const char *pheap_protect_name(unsigned kind)
{
    static const char *const names[] = {"auto", "alias", "keys", "off", "read-only"};
    return kind < PH_ARRAY_LEN(names) ? names[kind] : "unknown";
}

ph_export void pheap_flush(pheap *h, const void *addr, size_t len)
{
    if (h && ph_heap_inherited(h))
        ph_heap_forked("pheap_flush");
    else if (h && (len = clamp(h, &addr, len)) != 0)
        ph_persist_flush(&h->sp.persist, ph_heap_pctx(h), addr, len);
}

ph_export void pheap_drain(pheap *h)
{
    if (h && ph_heap_inherited(h))
        ph_heap_forked("pheap_drain");
    else if (h && !h->readonly)
        ph_persist_fence(&h->sp.persist, ph_heap_pctx(h));
}

ph_export void pheap_persist(pheap *h, const void *addr, size_t len)
{
    pheap_flush(h, addr, len);
    pheap_drain(h);
}

void ph_heap_engine_stats(pheap *h, ph_engine_stats *st, uint64_t *flushes, uint64_t *fences,
                          uint64_t *reflushes, uint64_t *cached)
{
    uint64_t cached_bytes;
    ph_thread_sum_counters(h, flushes, fences, reflushes, cached, &cached_bytes);
    *cached += ph_load_relaxed(&h->engine->xxfer_blocks); /* batches between caches */
    cached_bytes += ph_load_relaxed(&h->engine->xxfer_bytes);
    ph_engine_stats_get(h->engine, st);
    if (h->gc) { /* bitmaps count cached blocks as allocated (see ph_engine_set_gc) */
        st->live_blocks -= PH_MIN(st->live_blocks, *cached);
        st->live_bytes -= PH_MIN(st->live_bytes, cached_bytes);
    }
}

ph_export int pheap_stats(pheap *h, struct pheap_stats *out)
{
    PH_WINDOW();
    PH_OUT(out);
    if (!h || !out)
        return ph_err(PHEAP_EINVAL, "pheap_stats: NULL argument");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_stats");
    memset(out, 0, sizeof(*out));
    out->size = ph_space_size(&h->sp);
    out->max_size = h->hdr.max_size;
    out->data_offset = h->sp.data_off;
    out->data_size = ph_space_size(&h->sp) - h->sp.data_off;
    memcpy(out->uuid, h->hdr.uuid, sizeof(out->uuid));
    out->format_major = h->hdr.major;
    out->format_minor = h->hdr.minor;
    out->flush = h->flush;
    out->nt_stores = h->sp.persist.nt_stores;
    out->dax = h->dax_file;
    out->flush_source = h->flush_source;
    out->in_memory = h->sp.in_memory;
    out->power_safe = !h->sp.in_memory &&
                      (out->flush == PHEAP_FLUSH_MSYNC ||
                       (h->dax_file && out->flush >= PHEAP_FLUSH_CLWB && out->flush <= PHEAP_FLUSH_CLFLUSH));
    out->readonly = h->readonly;
    out->was_unclean = h->was_unclean;
    out->snapshot = h->snapshot;
    out->held_elsewhere = h->held_elsewhere;
    out->recovered_ops = h->engine->recovered;
    out->open_count = ph_load(&h->sp.state->xopen_count);
    out->unclean_count = ph_load(&h->sp.state->xunclean_count);
    out->last_open = ph_load(&h->sp.state->xlast_open);
    out->roots = pheap_root_count(h);
    ph_names_stats(h, &out->names, &out->name_segments);
    out->protection = h->snapshot ? h->sp.protect_rw : h->sp.protect;
    out->guarded_blocks = ph_space_guarded_count(&h->sp);
    out->mode = (unsigned)pheap_get_mode(h);
    out->owner_known = (h->hdr.feat_ro_compat & PH_FEAT_RO_COMPAT_OWNER) != 0;
    out->owner_uid = out->owner_known ? h->hdr.owner_uid : 0;
    ph_engine_stats st;
    ph_heap_engine_stats(h, &st, &out->flushes, &out->fences, &out->reflushes, &out->cached_blocks);
    out->live_blocks = st.live_blocks;
    out->live_bytes = st.live_bytes;
    out->slabs = st.slabs;
    out->slab_bytes = st.slab_bytes;
    out->large_extents = st.large_extents;
    out->large_bytes = st.large_bytes;
    out->free_bytes = st.free_bytes;
    out->largest_free = st.largest_free;
    out->largest_alloc = st.largest_alloc;
    out->morphing = (unsigned)h->engine->morph;
    out->slab_morphs = ph_load_relaxed(&h->engine->xmorphs);
    out->morphed_slabs = st.morphed_slabs;
    out->old_blocks = st.old_blocks;
    (void)ph_os_file_bytes(ph_tier_file(h), &out->file_bytes);
    uint64_t tx[3];
    ph_thread_sum_tx(h, tx);
    out->tx_commits = tx[0];
    out->tx_aborts = tx[1];
    out->tx_fences = tx[2];
    out->tx_rolled_back = h->engine->tx_rolled_back;
    out->tx_rolled_forward = h->engine->tx_rolled_forward;
    out->consistency = h->gc ? PHEAP_CONSISTENCY_GC : PHEAP_CONSISTENCY_LOG;
    out->needs_recovery = h->needs_recovery;
    out->gc_double_frees = ph_load_relaxed(&h->engine->xgc_double_frees);
    ph_gc_stats(h, out);
    uint64_t held = st.slab_bytes + st.large_bytes;
    out->fragmentation = held ? 1.0 - (double)st.live_bytes / (double)held : 0.0;
    out->file_syncs = ph_persist_syncs(&h->sp.persist);
    ph_tier_stats(h, out);
    ph_share_stats(h, out);
    return 0;
}
