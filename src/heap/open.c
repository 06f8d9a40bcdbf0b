/*
 * open.c -- pheap_open and pheap_close: creating a heap file atomically,
 * validating it, mapping it, choosing the flush back end, and the clean-
 * shutdown protocol.
 *
 * Clean-shutdown protocol (ph_state.xclean, one aligned word):
 *   open read-write:  xclean = OPEN, persisted before the handle is
 *                     returned, so any later change to the heap is
 *                     preceded on media by OPEN.
 *   close:            everything durable first, then xclean = CLEAN,
 *                     persisted.
 *   A crash anywhere in between leaves OPEN: the next open runs recovery.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/header.h"
#include "heap/heap.h"
#include "heap/names.h"
#include "heap/namespace.h"
#include "heap/options.h"
#include "heap/procs.h"
#include "heap/share.h"
#include "os/os.h"
#include "util/error.h"

/* The sizes of a new heap: `size` bytes of data region, and a file that
 * may grow to max_size, metadata included -- by default just what `size`
 * needs (the heap cannot grow).  PHEAP_EINVAL when max_size cannot hold
 * that much data after its metadata. */
static int plan_sizes(const ph_config *cfg, uint64_t *max_size, uint64_t *file_size)
{
    uint64_t need = ph_header_max_for_data(cfg->size);
    uint64_t max = cfg->max_size ? cfg->max_size : need;
    uint64_t data_off = ph_header_data_offset(max);
    if (max < need || max - data_off < cfg->size)
        return ph_err(PHEAP_EINVAL, "options.max_size %llu cannot hold options.size %llu bytes of "
                      "data after the metadata it needs (%llu bytes); max_size must be at least %llu",
                      (unsigned long long)max, (unsigned long long)cfg->size,
                      (unsigned long long)data_off, (unsigned long long)need);
    *max_size = max;
    *file_size = data_off + cfg->size;
    return 0;
}

/* Reserves in the file system what a new heap of `size` bytes uses (see
 * pheap_open: a full file system fails here, never as a SIGBUS later): the
 * header page, roots, lanes and the slab descriptors of its chunks; the
 * extent log's header and the entries the heap may use
 * (ph_space_extlog_cap); the names; the process table's header and
 * leases; the data.  The rest of the metadata
 * regions, sized for max_size, stays sparse until growth reserves it. */
static int reserve_new(int fd, const char *path, const ph_header *hdr, uint64_t size)
{
    const ph_region *slabs = ph_header_region(hdr, PH_REGION_SLABS);
    const ph_region *extlog = ph_header_region(hdr, PH_REGION_EXTLOG);
    const ph_region *names = ph_header_region(hdr, PH_REGION_NAMES);
    uint64_t data_off = ph_header_region(hdr, PH_REGION_DATA)->offset;
    uint64_t half = ph_space_extlog_half_entries(extlog->size);
    uint64_t bytes = ph_space_extlog_bytes(half, ph_space_extlog_cap(half, data_off, size));
    int rc = ph_os_allocate(fd, path, 0, ph_space_desc_end(slabs->offset, data_off, size));
    if (!rc)
        rc = ph_os_allocate(fd, path, extlog->offset, PH_PAGE_SIZE);
    for (unsigned h = 0; !rc && h < 2; h++)
        rc = ph_os_allocate(fd, path, extlog->offset + PH_PAGE_SIZE + h * half * sizeof(ph_extlog_entry),
                            bytes);
    if (!rc)
        rc = ph_os_allocate(fd, path, names->offset, names->size);
    const ph_region *procs = ph_header_region(hdr, PH_REGION_PROCS);
    if (!rc && procs)
        rc = ph_os_allocate(fd, path, procs->offset, 2u * PH_PAGE_SIZE);
    return rc ? rc : ph_os_allocate(fd, path, data_off, size - data_off);
}

/* Formats a new heap in a temporary file next to `path` and renames it
 * into place: `path` never holds a half-made heap.  `replace` renames over
 * an existing (empty) file; otherwise an existing file gives PHEAP_EEXIST. */
static int create_file(const char *path, const ph_config *cfg, int replace)
{
    uint64_t max_size = 0, size = 0;
    int rc = plan_sizes(cfg, &max_size, &size);
    ph_header hdr;
    if (!rc)
        rc = ph_header_init(&hdr, max_size, cfg->consistency);
    if (rc)
        return rc;
    char *page = calloc(1, PH_PAGE_SIZE);
    char *tmp = malloc(strlen(path) + 16);
    int fd = -1;
    if (!page || !tmp) {
        rc = ph_err(PHEAP_ENOMEM, "out of memory");
        goto out;
    }
    memcpy(page, &hdr, sizeof(hdr));
    ph_state st = {.xclean = PH_STATE_CLEAN, .xsize = size, .xmode = ph_mode_word(PH_MODE_WRITABLE)};
    memcpy(page + PH_STATE_OFFSET, &st, sizeof(st));
    /* The extent log starts empty in half 0 (epoch 1), its mark at what
     * the heap's size allows: the slots below it are zero, as the whole new
     * file is. */
    const ph_region *extlog = ph_header_region(&hdr, PH_REGION_EXTLOG);
    uint64_t half = ph_space_extlog_half_entries(extlog->size);
    uint64_t cap = ph_space_extlog_cap(half, hdr.regions[hdr.nregions - 1].offset, size);
    ph_extlog_header xh = {.xhigh = {PH_MIN(cap, (uint64_t)PH_EXTLOG_RAISE), 0}};
    rc = ph_os_create_temp(path, cfg->mode, &fd, tmp);
    if (rc)
        goto out;
    /* Metadata regions start zeroed: all roots free, all lanes and slab
     * descriptors empty. */
    rc = ph_os_resize(fd, path, size);
    if (!rc)
        rc = reserve_new(fd, path, &hdr, size);
    if (!rc)
        rc = ph_os_pwrite(fd, &xh, sizeof(xh), extlog->offset);
    if (!rc)
        rc = ph_os_pwrite(fd, page, PH_PAGE_SIZE, 0);
    if (!rc)
        rc = ph_os_sync_file(fd, path);
    if (!rc)
        rc = ph_os_publish(fd, tmp, path, replace);
    if (!rc)
        rc = ph_os_sync_dir(path);
    if (rc && fd >= 0 && tmp[0])
        unlink(tmp); /* after a successful rename there is nothing to remove */
out:
    if (fd >= 0)
        close(fd);
    free(page);
    free(tmp);
    return rc;
}

/* Opens, creating when asked.  Two processes creating the same path at
 * once both end up opening the one heap that won the rename. */
static int open_or_create(const char *path, const ph_config *cfg, int *fd)
{
    int readonly = (cfg->flags & (PHEAP_RDONLY | PHEAP_SNAPSHOT)) != 0;
    if (!(cfg->flags & PHEAP_CREATE))
        return ph_os_open(path, readonly, fd);
    int created = 0, lost_race = 0;
    for (int tries = 0; tries < 8; tries++) {
        int rc = ph_os_open(path, 0, fd);
        if (rc == PHEAP_ENOENT && lost_race)
            return ph_err(PHEAP_EEXIST, "%s exists but cannot be opened (a dangling symbolic link?)",
                          path);
        if (rc == 0) {
            uint64_t size;
            if (created)
                return 0;
            rc = ph_os_file_size(*fd, path, &size);
            if (rc == 0 && (cfg->flags & PHEAP_EXCL))
                rc = ph_err(PHEAP_EEXIST, "%s exists (PHEAP_EXCL)", path);
            if (rc == 0 && size > 0)
                return 0;
            close(*fd);
            if (rc)
                return rc;
            rc = create_file(path, cfg, 1); /* empty file: make it a heap */
        } else if (rc == PHEAP_ENOENT) {
            rc = create_file(path, cfg, 0);
        }
        if (rc == PHEAP_EEXIST && (cfg->flags & PHEAP_EXCL))
            return ph_err(PHEAP_EEXIST, "%s exists (PHEAP_EXCL)", path);
        if (rc && rc != PHEAP_EEXIST)
            return rc;
        created = rc == 0;
        lost_race = rc == PHEAP_EEXIST;
    }
    return ph_err(PHEAP_EBUSY, "%s: keeps changing while being created", path);
}

static int read_header(pheap *h)
{
    uint64_t file_size;
    int rc = ph_os_file_size(h->sp.fd, h->path, &file_size);
    if (rc)
        return rc;
    char *page = calloc(1, PH_PAGE_SIZE);
    if (!page)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    ssize_t n = ph_os_pread(h->sp.fd, page, PH_MIN(file_size, (uint64_t)PH_PAGE_SIZE), 0);
    ph_state st;
    rc = n < 0 ? (int)n
               : ph_header_validate(page, (uint64_t)n, file_size, h->readonly, h->path, &h->hdr, &st);
    free(page);
    if (rc == 0)
        h->sp.xsize = st.xsize;
    return rc;
}

/* The extent log is written all over what it uses (interleaved entries):
 * fault that in now rather than inside allocations -- the entries the
 * heap's size allows (growth faults in more), or the whole region for a
 * log without high-water marks (1.0, 1.1: about 0.2% of max_size). */
static void populate_extlog(pheap *h)
{
    ph_space *sp = &h->sp;
    if (h->readonly)
        return;
    if (!(sp->features & PH_FEAT_INCOMPAT_EXTLOG_HIGH)) {
        ph_os_populate(sp->base + sp->extlog_region, sp->extlog_size);
        return;
    }
    uint64_t half = ph_space_extlog_half_entries(sp->extlog_size);
    uint64_t bytes = ph_space_extlog_bytes(half, ph_space_extlog_cap(half, sp->data_off,
                                                                      ph_space_size(sp)));
    ph_os_populate(sp->base + sp->extlog_region, PH_PAGE_SIZE);
    for (unsigned k = 0; k < 2; k++)
        ph_os_populate(sp->base + sp->extlog_region + PH_PAGE_SIZE + k * half * sizeof(ph_extlog_entry),
                       bytes);
}

static int map_heap(pheap *h, const pheap_options *opts, const ph_config *cfg)
{
    long os_page = sysconf(_SC_PAGESIZE);
    h->sp.reserve = PH_ALIGN_UP(h->hdr.max_size, (uint64_t)os_page);
    h->sp.max_size = h->hdr.max_size;
    h->sp.data_off = ph_header_region(&h->hdr, PH_REGION_DATA)->offset;
    int kind = h->snapshot   ? PH_MAP_PRIVATE
               : h->readonly ? PH_MAP_READONLY
                             : PH_MAP_SHARED;
    int dax = 0, sim = (h->flags & PHEAP_SIMULATE) != 0;
    int rc = ph_space_map(&h->sp, kind, sim, cfg->protect, &dax);
    if (rc)
        return rc;
    h->sp.dax = (unsigned)dax;
    h->sp.in_memory = (unsigned)ph_os_file_in_memory(ph_tier_file(h));
    if (sim) {
        rc = ph_sim_create(&h->sp.sim, h->sp.base, h->sp.view, ph_space_size(&h->sp),
                           h->sp.reserve, h->sp.fd);
        if (!rc && opts) {
            ph_sim_crash_spec spec = {
                .fence = opts->sim_crash_fence, .store = opts->sim_crash_store,
                .evict = opts->sim_evict_probability, .seed = opts->sim_seed,
                .words = (opts->sim_mode & PHEAP_SIM_WORDS) != 0,
                .nt_lag = (opts->sim_mode & PHEAP_SIM_NT_LAG) != 0,
                .contended = (opts->sim_mode & PHEAP_SIM_CONTENDED) != 0,
                .pages = (opts->sim_mode & PHEAP_SIM_PAGES) != 0,
                .site = opts->sim_crash_site};
            rc = ph_sim_configure(h->sp.sim, &spec, opts->sim_crash_image,
                                  opts->sim_store_evict_probability, opts->sim_store_seed,
                                  opts->sim_schedule_seed);
        }
        if (rc)
            return rc;
    }
    /* h->flush is what a read-write open with these options would use;
     * a snapshot (a private view) makes nothing durable. */
    h->dax_file = h->snapshot ? (unsigned)ph_os_file_on_dax(h->sp.fd) : h->sp.dax;
    h->flush = cfg->flush;
    h->flush_source = cfg->flush_source;
    if (h->tier) {
        h->flush = PHEAP_FLUSH_CHECKPOINT;
        h->flush_source = PHEAP_FLUSH_FROM_DURABILITY;
    } else if (h->flush == PHEAP_FLUSH_AUTO) {
        h->flush = ph_persist_auto_kind((int)h->dax_file);
        h->flush_source = h->dax_file ? PHEAP_FLUSH_FROM_DAX : PHEAP_FLUSH_FROM_NOT_DAX;
    }
    rc = ph_persist_init(&h->sp.persist, h->snapshot ? PHEAP_FLUSH_NONE : h->flush, h->sp.sim,
                         h->sp.fd, cfg->nt_stores);
    if (!rc && h->tier)
        rc = ph_tier_attach(h);
    if (rc)
        return rc;
    h->sp.state = (ph_state *)(h->sp.base + PH_STATE_OFFSET);
    h->sp.slab_region = ph_header_region(&h->hdr, PH_REGION_SLABS)->offset;
    h->sp.lane_region = ph_header_region(&h->hdr, PH_REGION_LANES)->offset;
    if (h->hdr.feat_incompat & PH_FEAT_INCOMPAT_NAMES)
        h->sp.names_region = ph_header_region(&h->hdr, PH_REGION_NAMES)->offset;
    h->sp.features = h->hdr.feat_incompat;
    h->sp.extlog_region = ph_header_region(&h->hdr, PH_REGION_EXTLOG)->offset;
    h->sp.extlog_size = ph_header_region(&h->hdr, PH_REGION_EXTLOG)->size;
    populate_extlog(h);
    h->roots = (ph_root_entry *)(h->sp.base + ph_header_region(&h->hdr, PH_REGION_ROOTS)->offset);
    return 0;
}

/* Releases everything of a handle without touching the heap's state:
 * thread caches are dropped with the rest of the volatile state. */
static void release(pheap *h, int failed_open)
{
    if (h->in_addresses)
        ph_addresses_remove(h);
    if (h->id)
        ph_thread_unregister_heap(h, 0);
    if (!h->sp.inherited)
        ph_procs_detach(h);
    ph_engine_close(h->engine); /* (its purge punches the working copy: before the tier goes) */
    ph_tier_release(h, h->sp.inherited || ph_heap_inherited(h), failed_open);
    ph_persist_fini(&h->sp.persist, h->sp.inherited || ph_heap_inherited(h));
    ph_sim_destroy(h->sp.sim);
    ph_space_unmap(&h->sp);
    if (h->sp.fd >= 0)
        close(h->sp.fd);
    pthread_mutex_destroy(&h->sp.grow_lock);
    pthread_mutex_destroy(&h->root_lock);
    pthread_mutex_destroy(&h->threads_lock);
    if (!ph_heap_inherited(h)) /* (may count waiters of the parent's threads) */
        pthread_cond_destroy(&h->exited_cv);
    pthread_mutex_destroy(&h->share_lock);
    if (h->gate_fd >= 0)
        close(h->gate_fd);
    ph_gc_state_free(h);
    ph_names_close(h);
    free(h->path);
    free(h);
}

/* A name-segment rebuild cut short by the crash: finished or undone. */
static int recover_names(pheap *h)
{
    ph_thread *t = ph_thread_get(h);
    if (!t)
        return ph_err(PHEAP_ENOMEM, "out of memory for a thread record");
    return ph_names_recover(h, t);
}

/* Builds the allocator and marks the heap open (see the protocol above).
 * After an unclean shutdown, recovery runs first: the allocator rolls the
 * committed per-thread log entries forward and rebuilds its volatile state
 * from the extent log and the slab bitmaps (which it does at every open);
 * blocks that were only in thread caches are free in the bitmaps already. */
int ph_heap_start_session(pheap *h)
{
    ph_state *s = h->sp.state;
    /* A heap held read-write elsewhere is OPEN because it is in use. */
    h->was_unclean = s->xclean == PH_STATE_OPEN && !h->held_elsewhere;
    /* A snapshot recovers into its private view, unless the heap has
     * features this build may only read. */
    int recover = h->was_unclean && (!h->readonly || h->snapshot) &&
                  !(h->hdr.feat_ro_compat & ~PH_FEAT_RO_COMPAT_KNOWN);
    ph_mode_load(h);
    /* No read-write open before this one: nothing purged or grew, and the
     * data region is as creation reserved it -- no refill is needed before
     * first use (the CHECKPOINT level's working copy is another file). */
    h->sp.fresh = !h->readonly && s->xopen_count == 0 && !h->sp.persist.ckpt;
    int rc = ph_engine_open(&h->sp, ph_heap_pctx(h), !h->readonly || h->snapshot, recover,
                            &h->engine);
    if (rc == PHEAP_ECORRUPT) /* what recovery cannot trust */
        return ph_err(rc, "%s: damaged metadata, refused: %s", h->path, pheap_errmsg());
    if (rc)
        return rc;
    if ((rc = ph_names_open(h)) != 0)
        return ph_err(rc, "%s: %s", h->path, pheap_errmsg());
    if ((rc = ph_root_open_check(h)) != 0)
        return ph_err(rc, "%s: damaged metadata, refused: %s", h->path, pheap_errmsg());
    if (h->hdr.consistency == PH_CONSISTENCY_GC) {
        /* Unclean: the bitmaps are those of the last clean close, not the
         * truth, until pheap_recover traces the roots. */
        h->gc = 1;
        h->needs_recovery = h->was_unclean;
        ph_engine_set_gc(h->engine);
    }
    if (h->readonly) /* a snapshot's view also finishes a cut-short name rebuild */
        return recover && h->snapshot && !h->needs_recovery ? recover_names(h) : 0;
    ph_persist *p = &h->sp.persist;
    ph_pctx *c = ph_heap_pctx(h);
    if (h->was_unclean)
        ph_persist_write(p, c, &s->xunclean_count, s->xunclean_count + 1);
    /* The four words are independent; the counters and the time are
     * informational and may land in any combination.  Only xclean matters, and it is durable
     * after this fence, before the caller can change anything. */
    ph_persist_write(p, c, &s->xopen_count, s->xopen_count + 1);
    /* Not under the simulator: the same calls must give the same trace. */
    if (!h->sp.sim)
        ph_persist_write(p, c, &s->xlast_open, ph_os_time_ns() / 1000000000u);
    if (ph_plant("state-split-store")) /* planted: the commit word in two halves */
        ph_persist_write(p, c, &s->xclean, (s->xclean & ~0xffffffffull) | (PH_STATE_OPEN & 0xffffffffull));
    ph_persist_write(p, c, &s->xclean, PH_STATE_OPEN);
    ph_persist_range(p, c, s, sizeof(*s));
    /* A name-segment rebuild cut short: finished or undone (GC mode: by
     * pheap_recover, once the tracing made the allocator's state true). */
    if (h->was_unclean && !h->needs_recovery && (rc = recover_names(h)) != 0)
        return rc;
    if (!h->needs_recovery)
        ph_names_guard(h);
    return 0;
}

int ph_heap_join_session(pheap *h)
{
    ph_mode_load(h);
    int rc = ph_names_open(h);
    if (rc)
        return ph_err(rc, "%s: %s", h->path, pheap_errmsg());
    if ((rc = ph_root_open_check(h)) != 0)
        return ph_err(rc, "%s: damaged metadata, refused: %s", h->path, pheap_errmsg());
    ph_pctx *c = ph_heap_pctx(h);
    ph_persist_store64(&h->sp.persist, c, &h->sp.state->xopen_count, h->sp.state->xopen_count + 1);
    ph_names_guard(h);
    return 0;
}

ph_export int pheap_open(const char *path, const pheap_options *opts, pheap **out)
{
    if (!out)
        return ph_err(PHEAP_EINVAL, "pheap_open: out is NULL");
    *out = NULL;
    if (!path || !*path)
        return ph_err(PHEAP_EINVAL, "pheap_open: empty path");
    ph_config cfg;
    int rc = ph_options_resolve(opts, &cfg);
    char *file = NULL;
    if (!rc && cfg.protect == PHEAP_PROTECT_KEYS)
        (void)ph_keys_setup(); /* before the window opens; a failure is ph_space_map's to report */
    PH_WINDOW();
    PH_OUT(out);
    if (!rc)
        rc = ph_namespace_resolve(path, (cfg.flags & PHEAP_CREATE) != 0, &file);
    if (rc)
        return rc;
    pheap *h = calloc(1, sizeof(*h));
    if (!h) {
        free(file);
        return ph_err(PHEAP_ENOMEM, "out of memory");
    }
    h->path = file;
    path = file; /* a name is its file in the heap directory from here on */
    h->xgc_key = PH_GC_KEY_NONE; /* (0 would be an empty ph_tls's id) */
    h->sp.fd = -1;
    h->lease = -1;
    h->gate_fd = -1;
    h->sp.wfd = -1;
    h->sp.path = h->path;
    h->flags = cfg.flags;
    h->snapshot = (cfg.flags & PHEAP_SNAPSHOT) != 0;
    h->readonly = (cfg.flags & PHEAP_RDONLY) != 0 || h->snapshot;
    h->sp.snapshot = h->snapshot;
    pthread_mutex_init(&h->sp.grow_lock, NULL);
    pthread_mutex_init(&h->root_lock, NULL);
    pthread_mutex_init(&h->threads_lock, NULL);
    pthread_cond_init(&h->exited_cv, NULL);
    pthread_mutex_init(&h->share_lock, NULL);
    int shared = (cfg.flags & PHEAP_SHARED) != 0;
    rc = open_or_create(path, &cfg, &h->sp.fd);
    if (!rc) /* exclusive for an exclusive read-write open; shared for the others */
        rc = ph_os_lock(h->sp.fd, !h->readonly && !shared);
    if (rc == PHEAP_EBUSY && h->snapshot) { /* held read-write elsewhere: a snapshot of it */
        h->held_elsewhere = 1;
        rc = 0;
    }
    if (!rc && !h->held_elsewhere)
        rc = ph_tier_open(h, &cfg); /* may make a working copy the heap's file from here on */
    if (!rc)
        rc = read_header(h);
    if (!rc && cfg.consistency == PHEAP_CONSISTENCY_GC && h->hdr.consistency != PH_CONSISTENCY_GC)
        rc = ph_err(PHEAP_EINVAL, "%s: options.consistency asks for GC mode, but the heap was "
                    "created in LOG mode (the mode is fixed at creation)", path);
    if (!rc && shared)
        rc = ph_share_check(h);
    /* Read-only opens and opens for sharing exclude each other; a snapshot
     * of a heap that processes share is one of a heap in use. */
    if (!rc && (shared || (h->readonly && !h->snapshot)))
        rc = ph_procs_exclude(h, h->readonly);
    if (!rc && h->snapshot && !h->held_elsewhere && ph_procs_sharers(h) > 0)
        h->held_elsewhere = 1;
    if (!rc)
        rc = map_heap(h, opts, &cfg);
    if (!rc) {
        ph_thread_register_heap(h);
        rc = shared ? ph_share_open(h) : ph_heap_start_session(h);
    }
    if (!rc && (rc = ph_addresses_add(h)) == 0)
        h->in_addresses = 1;
    if (!rc && cfg.no_morph)
        h->engine->morph = 0;
    /* Last: a refused open writes nothing, the table included; a lease
     * that cannot be had never refuses the open (procs.h). */
    if (!rc && !shared)
        ph_procs_attach(h);
    if (!rc)
        rc = ph_tier_start(h);
    if (rc) {
        release(h, 1);
        return rc;
    }
    if (h->engine)
        h->gc_map = ph_engine_gc_freemap(h->engine);
    ph_heap_gc_fast_update(h);
    *out = h;
    return 0;
}

ph_export int pheap_close(pheap *h)
{
    PH_WINDOW();
    if (!h)
        return 0;
    if (ph_heap_inherited(h)) {
        /* The child's copy of a parent's handle: the heap is the parent's.
         * Only this process's memory, mapping and descriptor go; no clean
         * mark, no flush, no hole punch (sp.inherited), and the file lock
         * stays with the parent's descriptor of the same open file. */
        h->sp.inherited = 1;
        if (h->names) { /* the parent's holds and locks are the parent's */
            h->names->plock = NULL;
            h->names->pholds = NULL;
        }
        release(h, 0);
        return 0;
    }
    int rc = 0;
    /* Thread caches go back to their slabs first: that may release empty
     * slabs, which are durable changes of their own. */
    ph_thread_unregister_heap(h, 1);
    h->id = 0;
    if (h->shared) {
        ph_pctx c = {0};
        ph_share_close(h, &c);
        ph_persist_ctx_release(&c);
    } else if (!h->readonly) {
        /* Everything this library wrote was persisted by the operation that
         * wrote it (LOG mode) or is written back now (GC mode); the clean
         * mark is the last durable store.  A GC heap that still needs
         * recovery stays marked open: its bitmaps are not the truth. */
        ph_pctx c = {0}; /* the thread records are gone: a context of its own */
        if (h->gc && !h->needs_recovery) {
            ph_engine_drain_batches(h->engine, &c);
            ph_engine_gc_writeback(h->engine, &c);
        }
        if (!h->needs_recovery)
            ph_persist_store64(&h->sp.persist, &c, &h->sp.state->xclean, PH_STATE_CLEAN);
        ph_persist_ctx_release(&c);
        if (h->tier) { /* what close gives back goes into the last checkpoint */
            ph_engine_purge(h->engine);
            rc = ph_tier_close(h);
        }
        if (h->sp.sim) {
            rc = ph_sim_write_durable(h->sp.sim, h->sp.fd);
            if (!rc)
                rc = ph_os_sync_file(h->sp.fd, h->path);
        }
    }
    if (!rc && h->sp.sim && h->sp.sim->crash_error)
        rc = h->sp.sim->crash_error;
    if (!rc && !h->readonly && ph_persist_sync_error(&h->sp.persist))
        rc = ph_err(PHEAP_EIO, "%s: a file sync failed while the heap was open: what was "
                    "written since may not be durable", h->path);
    release(h, 0);
    return rc;
}

ph_export int pheap_sim_crash(pheap *h, const char *image_path, uint64_t seed, double evict_probability)
{
    PH_WINDOW();
    if (h && ph_heap_inherited(h))
        return ph_heap_forked("pheap_sim_crash");
    if (!h || !h->sp.sim)
        return ph_err(PHEAP_EINVAL, "pheap_sim_crash: the heap was not opened with PHEAP_SIMULATE");
    ph_sim_crash_spec spec = h->sp.sim->crash;
    spec.evict = evict_probability;
    spec.seed = seed;
    int rc = image_path ? ph_sim_write_image(h->sp.sim, image_path, &spec) : 0;
    release(h, 0);
    return rc;
}

ph_export uint64_t pheap_sim_fence_count(const pheap *h)
{
    return h && h->sp.sim && !ph_heap_inherited(h) ? ph_load_relaxed(&h->sp.sim->xfences) : 0;
}

ph_export uint64_t pheap_sim_store_count(const pheap *h)
{
    return h && h->sp.sim ? ph_load_relaxed(&h->sp.sim->xstores) : 0;
}

ph_export uint64_t pheap_sim_trace_hash(const pheap *h)
{
    return h && h->sp.sim ? ph_load_relaxed(&h->sp.sim->xtrace) : 0;
}
