/*
 * persist.c -- back-end selection, reflush accounting, and the back ends
 * that need no special instructions (msync, none).  The cache-line back
 * ends are in flush_x86.c, the simulator in sim.c.
 */
#include "persist/persist.h"

#include <stdlib.h>
#include <string.h>

#include "os/os.h"
#include "persist/ckpt.h"
#include "persist/sim.h"
#include "pheap.h"
#include "util/error.h"

extern const ph_persist_ops ph_flush_clwb_ops, ph_flush_clflushopt_ops, ph_flush_clflush_ops,
    ph_flush_clwb_cached_ops, ph_flush_clflushopt_cached_ops;

static int line_in(const uintptr_t *v, uint32_t n, uintptr_t line)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i] == line)
            return 1;
    return 0;
}

void ph_persist_track(ph_pctx *c, uintptr_t first, uint64_t n)
{
    uint64_t re = 0;
    for (uint64_t i = 0; i < n; i++) {
        uintptr_t line = first + i * PH_CACHE_LINE;
        if (line_in(c->cur, c->ncur, line)) {
            re++;
            continue;
        }
        if (line_in(c->prev, c->nprev, line))
            re++;
        if (c->ncur < PH_BATCH_TRACK)
            c->cur[c->ncur++] = line;
    }
    ph_store_relaxed(&c->xflushes, c->xflushes + n);
    if (re)
        ph_store_relaxed(&c->xreflushes, c->xreflushes + re);
}

/* The msync back end (persist.h, ph_group_sync).  The lines a thread
 * flushes are in the page cache already (the mapping is shared), so the
 * flush has nothing to send; what makes them durable is a sync of the file
 * that starts after they were written, which the fence waits for.  A sync
 * writes other threads' pages too, flushed or not: allowed, as an eviction
 * may write any line back early. */
static void msync_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p;
    (void)line;
    (void)n;
    c->msync_dirty = 1;
}

static void msync_fence(ph_persist *p, ph_pctx *c)
{
    if (!c->msync_dirty)
        return; /* nothing flushed since the last fence: nothing to wait for */
    c->msync_dirty = 0;
    ph_group_sync *g = p->group;
    pthread_mutex_lock(&g->lock);
    uint64_t ticket = ++g->requested;
    while (g->done < ticket) {
        if (g->running) {
            pthread_cond_wait(&g->done_cv, &g->lock);
            continue;
        }
        /* Lead the next sync: it covers every ticket taken until it
         * starts, whose stores all precede it. */
        g->running = 1;
        for (unsigned k = 0, idle = 0; k < 16 && g->last_batch > 1; k++) {
            uint64_t before = g->requested;
            pthread_mutex_unlock(&g->lock);
            ph_os_yield();
            pthread_mutex_lock(&g->lock);
            idle = g->requested == before ? idle + 1 : 0;
            if (idle >= 2 && g->requested - g->done >= g->last_batch)
                break; /* as many as last time, and nobody came in two yields */
        }
        uint64_t upto = g->requested;
        g->last_batch = upto - g->done;
        pthread_mutex_unlock(&g->lock);
        /* A failed sync (EIO from the file system) cannot be reported
         * through a void fence: it is kept, and pheap_close reports it
         * (the kernel may drop the pages it failed to write). */
        int rc = ph_os_datasync(p->fd);
        ph_store_relaxed(&g->xsyncs, g->xsyncs + 1);
        pthread_mutex_lock(&g->lock);
        if (rc && !g->error)
            g->error = rc;
        g->running = 0;
        if (upto > g->done)
            g->done = upto;
        pthread_cond_broadcast(&g->done_cv);
    }
    pthread_mutex_unlock(&g->lock);
}

static void nop_fence(ph_persist *p, ph_pctx *c)
{
    (void)p;
    (void)c;
}

static void nop_flush(ph_persist *p, ph_pctx *c, uintptr_t line, uint64_t n)
{
    (void)p;
    (void)c;
    (void)line;
    (void)n;
}

static void plain_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    (void)p;
    (void)c;
    for (unsigned i = 0; i < n; i++)
        ph_store(&dst[i], src[i]);
}

static void msync_store(ph_persist *p, ph_pctx *c, uint64_t *dst, const uint64_t *src, unsigned n)
{
    plain_store(p, c, dst, src, n);
    msync_flush(p, c, (uintptr_t)dst & ~(uintptr_t)(PH_CACHE_LINE - 1), 1);
}

static const ph_persist_ops msync_ops = {"msync", msync_flush, msync_fence, msync_store};
static const ph_persist_ops none_ops = {"none", nop_flush, nop_fence, plain_store};

static const struct {
    const char *name;
    unsigned kind;
} kind_names[] = {
    {"auto", PHEAP_FLUSH_AUTO},   {"clwb", PHEAP_FLUSH_CLWB},
    {"clflushopt", PHEAP_FLUSH_CLFLUSHOPT}, {"clflush", PHEAP_FLUSH_CLFLUSH},
    {"msync", PHEAP_FLUSH_MSYNC}, {"none", PHEAP_FLUSH_NONE},
    {"sim", PHEAP_FLUSH_SIM},     {"checkpoint", PHEAP_FLUSH_CHECKPOINT},
};

ph_export const char *pheap_flush_name(unsigned kind)
{
    for (size_t i = 0; i < PH_ARRAY_LEN(kind_names); i++)
        if (kind_names[i].kind == kind)
            return kind_names[i].name;
    return "unknown";
}

ph_export const char *pheap_flush_source_name(unsigned source)
{
    switch (source) {
    case PHEAP_FLUSH_FROM_DAX:
        return "automatic: file on DAX, MAP_SYNC works";
    case PHEAP_FLUSH_FROM_NOT_DAX:
        return "automatic: file not on DAX, MAP_SYNC refused";
    case PHEAP_FLUSH_FROM_OPTION:
        return "set by pheap_options.flush";
    case PHEAP_FLUSH_FROM_ENV:
        return "set by PHEAP_FLUSH";
    case PHEAP_FLUSH_FROM_SIMULATE:
        return "crash simulator (PHEAP_SIMULATE)";
    case PHEAP_FLUSH_FROM_DURABILITY:
        return "the checkpoint durability level (a working copy in memory)";
    }
    return "unknown";
}

int ph_persist_parse_kind(const char *s, unsigned *kind)
{
    for (size_t i = 0; i < PH_ARRAY_LEN(kind_names); i++) {
        if (strcmp(kind_names[i].name, s) == 0 && kind_names[i].kind != PHEAP_FLUSH_SIM &&
            kind_names[i].kind != PHEAP_FLUSH_CHECKPOINT) {
            *kind = kind_names[i].kind;
            return 0;
        }
    }
    return ph_err(PHEAP_EINVAL,
                  "unknown flush kind '%s' (auto, clwb, clflushopt, clflush, msync, none)", s);
}

unsigned ph_persist_auto_kind(int dax)
{
    if (!dax)
        return PHEAP_FLUSH_MSYNC;
    ph_cpu_features f;
    ph_os_cpu_features(&f);
    if (f.clwb)
        return PHEAP_FLUSH_CLWB;
    if (f.clflushopt)
        return PHEAP_FLUSH_CLFLUSHOPT;
    return PHEAP_FLUSH_CLFLUSH;
}

int ph_persist_init(ph_persist *p, unsigned kind, struct ph_sim *sim, int fd, unsigned nt)
{
    ph_cpu_features f;
    ph_os_cpu_features(&f);
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->fd = fd;
    switch (kind) {
    case PHEAP_FLUSH_CLWB:
        if (!f.clwb)
            return ph_err(PHEAP_ENOTSUP, "flush kind clwb: this CPU has no clwb");
        p->nt_stores = nt == PH_NT_ON || (nt == PH_NT_AUTO && ph_flush_nt_faster(0));
        p->ops = p->nt_stores ? &ph_flush_clwb_ops : &ph_flush_clwb_cached_ops;
        return 0;
    case PHEAP_FLUSH_CLFLUSHOPT:
        if (!f.clflushopt)
            return ph_err(PHEAP_ENOTSUP, "flush kind clflushopt: this CPU has no clflushopt");
        p->nt_stores = nt == PH_NT_ON || (nt == PH_NT_AUTO && ph_flush_nt_faster(1));
        p->ops = p->nt_stores ? &ph_flush_clflushopt_ops : &ph_flush_clflushopt_cached_ops;
        return 0;
    case PHEAP_FLUSH_CLFLUSH:
        if (!f.clflush)
            return ph_err(PHEAP_ENOTSUP, "flush kind clflush: this CPU has no clflush");
        p->ops = &ph_flush_clflush_ops;
        return 0;
    case PHEAP_FLUSH_MSYNC:
        if (!(p->group = calloc(1, sizeof(*p->group))))
            return ph_err(PHEAP_ENOMEM, "out of memory");
        pthread_mutex_init(&p->group->lock, NULL);
        pthread_cond_init(&p->group->done_cv, NULL);
        p->ops = &msync_ops;
        p->plain_stores = 1;
        return 0;
    case PHEAP_FLUSH_NONE:
        p->ops = &none_ops;
        return 0;
    case PHEAP_FLUSH_CHECKPOINT:
        p->ops = &ph_ckpt_ops;
        p->plain_stores = 1; /* nothing is written back before a checkpoint, which holds every call */
        return 0;
    case PHEAP_FLUSH_SIM:
        if (!sim)
            return ph_err(PHEAP_EINVAL, "flush kind sim needs PHEAP_SIMULATE");
        p->ops = &ph_sim_ops;
        p->sim = sim;
        p->plain_stores = sim->pages; /* its fence syncs the file, as msync's */
        return 0;
    default:
        return ph_err(PHEAP_EINVAL, "unknown flush kind %u", kind);
    }
}

int ph_persist_sync_error(const ph_persist *p)
{
    if (!p->group)
        return 0;
    pthread_mutex_lock(&p->group->lock);
    int rc = p->group->error;
    pthread_mutex_unlock(&p->group->lock);
    return rc;
}

void ph_persist_fini(ph_persist *p, int inherited)
{
    if (p->group) {
        if (!inherited) {
            pthread_mutex_destroy(&p->group->lock);
            pthread_cond_destroy(&p->group->done_cv);
        }
        free(p->group);
        p->group = NULL;
    }
}

uint64_t ph_persist_syncs(const ph_persist *p)
{
    return p->group ? ph_load_relaxed(&p->group->xsyncs) : 0;
}

void ph_persist_ctx_release(ph_pctx *c)
{
    ph_sim_pending_free(c->pending);
    c->pending = NULL;
}
