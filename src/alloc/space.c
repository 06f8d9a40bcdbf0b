/*
 * space.c -- heap growth and hole punching.
 */
#include "alloc/space.h"

#include <string.h>

#include "os/os.h"
#include "persist/ckpt.h"
#include "pheap.h"
#include "util/error.h"

/* Reserves what growing the file from `cur` to `want` bytes brings into
 * use: the slab descriptors of the new chunks (their pages hold nothing
 * yet: ph_space_desc_end rounds up to whole pages), the extent-log entries
 * the larger heap may use (whole pages past every slot in use); then the
 * file is made `want` long.  The new data pages are left as holes: the
 * extent index counts them as punched, and each is reserved when it is
 * first handed out (ph_extent_backing_refill), so that the file's storage
 * follows what the heap uses, not what it grew by (it doubles). */
static int reserve(ph_space *s, uint64_t cur, uint64_t want)
{
    uint64_t d0 = ph_space_desc_end(s->slab_region, s->data_off, cur);
    uint64_t d1 = ph_space_desc_end(s->slab_region, s->data_off, want);
    int rc = ph_os_allocate(s->fd, s->path, d0, d1 - d0);
    if (!rc && (s->features & PH_FEAT_INCOMPAT_EXTLOG_HIGH)) {
        uint64_t half = ph_space_extlog_half_entries(s->extlog_size);
        uint64_t b0 = ph_space_extlog_bytes(half, ph_space_extlog_cap(half, s->data_off, cur));
        uint64_t b1 = ph_space_extlog_bytes(half, ph_space_extlog_cap(half, s->data_off, want));
        for (unsigned h = 0; !rc && h < 2 && b1 > b0; h++) {
            uint64_t at = s->extlog_region + PH_PAGE_SIZE + h * half * sizeof(ph_extlog_entry);
            rc = ph_os_allocate(s->fd, s->path, at + b0, b1 - b0);
            if (!rc)
                ph_os_populate(s->base + at + b0, b1 - b0);
        }
    }
    uint64_t len;
    if (!rc)
        rc = ph_os_file_size(s->fd, s->path, &len);
    return rc || len >= want ? rc : ph_os_resize(s->fd, s->path, want);
}

/* Extends the file from `cur` to *want bytes -- or to `need` when the file
 * system cannot hold *want -- with its space reserved, and maps the new
 * part: the program's view.  Under the simulator the file is not touched
 * before close: new space is zeroed private memory, and the simulated file
 * grows with it. */
static int extend(ph_space *s, uint64_t cur, uint64_t need, uint64_t *want)
{
    if (s->sim) {
        int rc = ph_space_extend_map(s, cur, *want);
        if (!rc)
            ph_sim_file_resize(s->sim, *want);
        return rc;
    }
    int rc = reserve(s, cur, *want);
    if (rc == PHEAP_ENOSPC && *want > need) {
        *want = need; /* no room to double: what is needed */
        rc = reserve(s, cur, *want);
    }
    return rc ? rc : ph_space_extend_map(s, cur, *want);
}

/* Makes the file's length durable (a new length is file-system metadata:
 * neither cache-line flushes nor msync of the data promise it).  Not
 * needed when nothing is made durable (PHEAP_FLUSH_NONE). */
static int sync_length(ph_space *s)
{
    if (s->sim) {
        ph_sim_file_sync(s->sim);
        return 0;
    }
    /* (nor at the checkpoint level, where the file is the working copy in
     * memory: a checkpoint sets the heap file's length) */
    return s->persist.kind == PHEAP_FLUSH_NONE || s->persist.kind == PHEAP_FLUSH_CHECKPOINT
               ? 0
               : ph_os_sync_file(s->fd, s->path);
}

/* Crash protocol: the file is extended and its new length made durable
 * first; then state->xsize, the commit, is persisted.  A crash before the
 * commit leaves a file longer than xsize, which open accepts; never an
 * xsize beyond the durable end of the file. */
int ph_space_grow(ph_space *s, ph_pctx *c, uint64_t min_size)
{
    int rc = 0;
    pthread_mutex_lock(&s->grow_lock);
    uint64_t cur = s->xsize;
    if (min_size <= cur)
        goto out;
    if (min_size > s->max_size) {
        rc = ph_err(PHEAP_ENOMEM, "heap full: %llu bytes needed, maximum size %llu",
                    (unsigned long long)min_size, (unsigned long long)s->max_size);
        goto out;
    }
    /* The data region doubles: not the file, whose metadata is laid out for
     * max_size and may be far larger than the data. */
    uint64_t want = PH_MIN(PH_MAX(PH_ALIGN_UP(min_size, PH_CHUNK_SIZE), cur + (cur - s->data_off)),
                           s->max_size);
    rc = extend(s, cur, PH_ALIGN_UP(min_size, PH_CHUNK_SIZE), &want);
    if (!rc && !ph_plant("grow-no-sync")) /* planted: the new length not made durable */
        rc = sync_length(s);
    if (rc)
        goto out;
    ph_persist_store64(&s->persist, c, &s->state->xsize, want);
    ph_store(&s->xsize, want);
out:
    pthread_mutex_unlock(&s->grow_lock);
    return rc;
}

int ph_space_follow(ph_space *s)
{
    int rc = 0;
    pthread_mutex_lock(&s->grow_lock);
    uint64_t cur = s->xsize, now = ph_load(&s->state->xsize);
    if (now > cur && now <= s->max_size && (rc = ph_space_extend_map(s, cur, now)) == 0)
        ph_store(&s->xsize, now);
    pthread_mutex_unlock(&s->grow_lock);
    return rc;
}

int ph_space_refill(ph_space *s, uint64_t off, uint64_t len)
{
    if (s->inherited || s->snapshot || s->sim)
        return 0;
    int rc = ph_os_allocate(s->fd, s->path, off, len);
    if (!rc && s->persist.ckpt) /* the heap file keeps the space of every page in use */
        rc = ph_ckpt_refill(s->persist.ckpt, off, len);
    return rc;
}

void ph_space_punch(ph_space *s, uint64_t off, uint64_t len)
{
    uint64_t first = PH_ALIGN_UP(off, PH_PAGE_SIZE), end = PH_ALIGN_DOWN(off + len, PH_PAGE_SIZE);
    if (s->inherited || s->snapshot || end <= first)
        return;
    if (s->sim) { /* the working copy (both views see its hole), then the durable image */
        if (s->wfd >= 0 ? ph_os_punch_hole(s->wfd, first, end - first) != 0
                        : ph_os_map_anon(s->base + first, end - first) != 0)
            memset(s->base + first, 0, end - first);
        ph_sim_punch(s->sim, first, end - first);
    } else {
        (void)ph_os_punch_hole(s->fd, first, end - first);
        if (s->persist.ckpt) /* zeros now: the next checkpoint punches the heap file too */
            ph_ckpt_mark_punched(s->persist.ckpt, first, end - first);
    }
}
