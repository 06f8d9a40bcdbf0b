/*
 * alloc.c -- the public allocation calls: argument checks that need the
 * handle, the calling thread's record, then the engine.
 */
#include "heap/heap.h"
#include "heap/share.h"
#include "util/error.h"

static inline __attribute__((always_inline)) int writable(pheap *h, const char *call, int mode)
{
    if (ph_unlikely(!h))
        return ph_err(PHEAP_EINVAL, "%s: heap is NULL", call);
    if (ph_heap_inherited(h))
        return ph_heap_forked(call);
    if (ph_unlikely(h->readonly | (mode & ph_load_relaxed(&h->xromode))))
        return h->readonly ? ph_err(PHEAP_ERDONLY, "%s: heap opened read-only", call)
                           : ph_mode_refuse(call);
    if (ph_unlikely(h->needs_recovery))
        return ph_err(PHEAP_ERECOVER, "%s: the heap (GC mode) was not closed cleanly: call "
                      "pheap_recover first", call);
    return 0;
}

/* The calling thread's record, for a call that writes: NULL with the
 * error set when the handle is NULL or read-only, or memory ran out.
 * Inlined into the allocation calls: their whole cost in GC mode is a few
 * loads and a pop or a push. */
static inline __attribute__((always_inline)) ph_thread *writer(pheap *h, const char *call,
                                                               int mode)
{
    if (ph_unlikely(writable(h, call, mode)))
        return NULL;
    ph_thread *t = ph_thread_get(h);
    if (ph_unlikely(!t))
        ph_err(PHEAP_ENOMEM, "%s: out of memory for a thread record", call);
    else if (ph_unlikely(h->shared))
        ph_share_tick(h, t);
    return t;
}

ph_thread *ph_heap_writer(pheap *h, const char *call)
{
    return writer(h, call, 1);
}

ph_thread *ph_heap_writer_in_tx(pheap *h, const char *call)
{
    return writer(h, call, 0);
}

int ph_heap_guarded(pheap *h, uint64_t off, uint64_t len, const char *call)
{
    if (ph_likely(!ph_space_guarded_overlap(&h->sp, off, len)))
        return 0;
    return ph_err(PHEAP_EINVAL, "%s: %llu is in a block that holds pheap's own metadata (a "
                  "segment of the name directory or of a transaction log), never one of the "
                  "program's",
                  call, (unsigned long long)off);
}

/* 0 if the 8-byte word the caller passed by address (in its view) is an
 * aligned word of a live block of the program's, and *w then pheap's own
 * address of it: PHEAP_ERANGE outside the data region, PHEAP_ENOTLIVE in
 * free space (where the word could be handed out, even as the very block
 * being allocated), PHEAP_EINVAL in a guarded block. */
static int word_in_heap(pheap *h, uint64_t **w, const char *call)
{
    uintptr_t a = (uintptr_t)*w, b = (uintptr_t)h->sp.view;
    if (a < b + h->sp.data_off || a + 8 > b + ph_space_size(&h->sp) || a % 8)
        return ph_err(PHEAP_ERANGE, "%s: the word at %p is not an aligned word of the heap's data "
                      "region", call, (const void *)*w);
    *w = ph_space_at(&h->sp, a - b); /* pheap's own address of it */
    int rc = ph_heap_guarded(h, a - b, 8, call);
    return rc ? rc : ph_engine_word_live(h->engine, a - b, call);
}

static int offset_in_heap(pheap *h, pheap_off off)
{
    if (ph_unlikely(off < h->sp.data_off || off >= ph_space_size(&h->sp)))
        return ph_err(PHEAP_ERANGE, "offset %llu is outside the heap's data region",
                      (unsigned long long)off);
    return 0;
}

/* GC mode's fast path (docs/GC.md): 1 when h may take it -- a GC heap
 * open read-write, recovered, not in read-only mode (xgc_key is then h's
 * id), whose record this thread has cached in ph_tls (so not a handle
 * inherited through fork: a fork child's cache is cleared) -- else 0.
 * The id alone names the handle: ids are unique among the opens of the
 * process.  A pop or a push on the thread cache writes nothing of the
 * heap's mapping, so it needs neither the call gate of the checkpoint
 * level nor the protection window: a few loads and no stack frame. */
static inline __attribute__((always_inline)) int gc_fast(pheap *h)
{
    return ph_likely(h != NULL) && ph_likely(ph_tls.id == ph_load_relaxed(&h->xgc_key));
}

static ph_noinline pheap_off alloc_call(pheap *h, size_t size)
{
    PH_WINDOW();
    ph_thread *t = writer(h, "pheap_alloc", 1);
    if (ph_unlikely(!t))
        return 0;
    if (ph_unlikely(size == 0)) {
        ph_err(PHEAP_EINVAL, "pheap_alloc: size 0");
        return 0;
    }
    if (h->gc && size <= PH_SMALL_MAX) {
        uint64_t off = ph_tcache_pop(&t->tc, ph_sizeclass(size));
        if (ph_likely(off))
            return off;
    }
    return ph_engine_alloc(h->engine, &t->tc, &t->pctx, size, NULL);
}

ph_export pheap_off pheap_alloc(pheap *h, size_t size)
{
    if (ph_likely(gc_fast(h)) && ph_likely(size - 1 < PH_SMALL_MAX)) {
        ph_tbin *b = &ph_tls.bins[ph_sizeclass(size)]; /* (never NULL here) */
        __asm__("" : "+r"(b)); /* one address for the load and the atomic store below */
        uint64_t *top = b->top;
        if (ph_likely(top != b->v)) {
            ph_store_relaxed(&b->top, top - 1); /* relaxed: pheap_stats reads it */
            return top[-1];
        }
    }
    return alloc_call(h, size);
}

static int call_user_init(void *arg, void *block, size_t usable)
{
    ph_user_init *u = arg;
    uint64_t off = (uint64_t)((char *)block - u->h->sp.base);
    int sealed = ph_window_seal(); /* the program's code: no metadata writes */
    int r = u->fn(u->h, ph_space_user(&u->h->sp, off), usable, u->arg);
    ph_window_unseal(sealed);
    return r;
}

int ph_heap_block_init(pheap *h, unsigned flags, pheap_init_fn fn, void *arg, ph_user_init *u,
                       ph_block_init *out, const char *call)
{
    if (flags & ~PHEAP_ALLOC_ZERO)
        return ph_err(PHEAP_EINVAL, "%s: unknown flags %#x", call, flags & ~PHEAP_ALLOC_ZERO);
    *u = (ph_user_init){h, fn, arg};
    *out = (ph_block_init){(flags & PHEAP_ALLOC_ZERO) != 0, fn ? call_user_init : NULL, u};
    return 0;
}

ph_export pheap_off pheap_alloc_init(pheap *h, size_t size, unsigned flags, pheap_init_fn init,
                                     void *arg)
{
    PH_WINDOW();
    ph_thread *t = ph_heap_writer(h, "pheap_alloc_init");
    ph_user_init u;
    ph_block_init bi;
    if (ph_unlikely(!t) || ph_heap_block_init(h, flags, init, arg, &u, &bi, "pheap_alloc_init"))
        return 0;
    if (ph_unlikely(size == 0)) {
        ph_err(PHEAP_EINVAL, "pheap_alloc_init: size 0");
        return 0;
    }
    return ph_engine_alloc(h->engine, &t->tc, &t->pctx, size, &bi);
}

/* PHEAP_EINVAL when the program frees a block pheap owns: a segment of
 * the name directory (a stale offset of a block freed before, whose space
 * the directory took since).  Else 0. */
static ph_noinline int free_call(pheap *h, pheap_off off)
{
    PH_WINDOW();
    if (off == 0)
        return writable(h, "pheap_free", 1);
    ph_thread *t = writer(h, "pheap_free", 1);
    if (ph_unlikely(!t))
        return pheap_errno();
    int rc = offset_in_heap(h, off);
    if (ph_unlikely(rc))
        return rc;
    if (h->gc && ph_likely(ph_engine_gc_free_fast(&h->gc_map, t->tc.bins, off)))
        return 0;
    if (off % PH_PAGE_SIZE == 0 && (rc = ph_heap_guarded(h, off, 1, "pheap_free")) != 0)
        return rc; /* guarded blocks are large: page-aligned */
    return ph_engine_free(h->engine, &t->tc, &t->pctx, off);
}

/* What the fast free leaves: an 8-byte block of a GC heap, else the call. */
static ph_noinline int free_slow(pheap *h, pheap_off off)
{
    if (gc_fast(h) && ph_engine_gc_free_tiny(&h->gc_map, ph_tls.bins, off))
        return 0;
    return free_call(h, off);
}

ph_export int pheap_free(pheap *h, pheap_off off)
{
    if (ph_likely(gc_fast(h)) && ph_likely(ph_engine_gc_free_fast(&h->gc_map, ph_tls.bins, off)))
        return 0; /* (0 and offsets outside the heap: the call) */
    return free_slow(h, off);
}

ph_export int pheap_alloc_to(pheap *h, size_t size, pheap_off *dest)
{
    PH_WINDOW();
    ph_thread *t = ph_heap_writer(h, "pheap_alloc_to");
    if (ph_unlikely(!t))
        return pheap_errno();
    if (size == 0)
        return ph_err(PHEAP_EINVAL, "pheap_alloc_to: size 0");
    int rc = word_in_heap(h, &dest, "pheap_alloc_to");
    return rc ? rc : ph_engine_alloc_to(h->engine, &t->tc, &t->pctx, size, dest, NULL);
}

ph_export int pheap_alloc_to_init(pheap *h, size_t size, pheap_off *dest, unsigned flags,
                                  pheap_init_fn init, void *arg)
{
    PH_WINDOW();
    ph_thread *t = ph_heap_writer(h, "pheap_alloc_to_init");
    if (ph_unlikely(!t))
        return pheap_errno();
    ph_user_init u;
    ph_block_init bi;
    int rc = ph_heap_block_init(h, flags, init, arg, &u, &bi, "pheap_alloc_to_init");
    if (rc)
        return rc;
    if (size == 0)
        return ph_err(PHEAP_EINVAL, "pheap_alloc_to_init: size 0");
    if ((rc = word_in_heap(h, &dest, "pheap_alloc_to_init")) != 0)
        return rc;
    bi.program_dest = 1;
    return ph_engine_alloc_to(h->engine, &t->tc, &t->pctx, size, dest, &bi);
}

ph_export int pheap_free_from(pheap *h, pheap_off *src)
{
    PH_WINDOW();
    ph_thread *t = ph_heap_writer(h, "pheap_free_from");
    if (ph_unlikely(!t))
        return pheap_errno();
    int rc = word_in_heap(h, &src, "pheap_free_from");
    uint64_t off = rc ? 0 : ph_load(src);
    if (!rc && off && off % PH_PAGE_SIZE == 0)
        rc = ph_heap_guarded(h, off, 1, "pheap_free_from");
    return rc ? rc : ph_engine_free_from(h->engine, &t->tc, &t->pctx, src);
}

ph_export size_t pheap_usable_size(pheap *h, pheap_off off)
{
    PH_WINDOW();
    uint64_t bytes = 0;
    if (!h) {
        ph_err(PHEAP_EINVAL, "pheap_usable_size: heap is NULL");
        return 0;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked("pheap_usable_size");
        return 0;
    }
    if (h->needs_recovery) {
        ph_err(PHEAP_ERECOVER, "pheap_usable_size: the heap (GC mode) was not closed cleanly: "
               "call pheap_recover first");
        return 0;
    }
    if (offset_in_heap(h, off))
        return 0;
    int rc = ph_engine_usable(h->engine, off, &bytes);
    if (rc && ph_tx_usable(h, off, &bytes) == 0)
        return (size_t)bytes; /* allocated by the calling thread's transaction */
    if (rc == PHEAP_EDOUBLEFREE)
        ph_err(rc, "pheap_usable_size: the block at %llu is free", (unsigned long long)off);
    if (rc)
        return 0;
    return (size_t)bytes;
}

ph_export unsigned pheap_class_count(void)
{
    return PH_CLASSES;
}

ph_export int pheap_stats_class(pheap *h, unsigned cls, pheap_class_info *out)
{
    PH_WINDOW();
    PH_OUT(out);
    if (!h || !out || cls >= PH_CLASSES)
        return ph_err(PHEAP_EINVAL, "pheap_stats_class: bad argument (class %u of %u)", cls,
                      PH_CLASSES);
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_stats_class");
    ph_engine_stats st;
    ph_engine_stats_get(h->engine, &st);
    out->block_size = ph_class_size[cls];
    out->blocks_per_slab = ph_class_blocks(cls);
    out->slabs = st.class_slabs[cls];
    out->live_blocks = st.class_live[cls];
    return 0;
}
