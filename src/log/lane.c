/*
 * lane.c -- the lane entries of pheap_alloc_to / pheap_free_from.
 *
 * Crash protocol of a logged operation (three fences):
 *   F1  entry words, checksum last computed over them, state ACTIVE;
 *       flush the entry's line; fence.      -> committed: recovery redoes it
 *   F2  the operation's in-place stores (bitmap word or extent-log entry,
 *       destination word); flush; fence.     -> applied
 *   F3  state := IDLE (one 8-byte store); flush; fence.  -> retired
 * Before F1 completes a torn entry fails its checksum and is ignored; the
 * in-place stores have not started.  Between F1 and F3 recovery rolls the
 * operation forward; its redo is idempotent, and nothing else can have
 * touched the block or the destination because the call had not returned.
 * The retire must be durable before the call returns: otherwise another
 * thread could free the block or reuse the destination, and a later
 * recovery would redo the old operation over their changes.
 * Consecutive operations of a lane use consecutive lines, so F3 never
 * flushes the line F1 flushed in the batch just before it... except within
 * one operation, where F2 lies between them.
 */
#include "log/lane.h"

#include <stddef.h>

#include "util/crc32c.h"

static ph_lane_entry *lane_entries(ph_space *sp, unsigned lane)
{
    return (ph_lane_entry *)ph_space_at(sp, sp->lane_region + (uint64_t)lane * PH_LANE_SIZE);
}

static uint64_t entry_checksum(const ph_lane_entry *e)
{
    return ph_crc32c(0, e, offsetof(ph_lane_entry, checksum));
}

void ph_lane_begin(ph_space *sp, ph_pctx *c, ph_lane *l, uint64_t op, uint64_t block,
                   uint64_t size, uint64_t dest, uint64_t old)
{
    ph_lane_entry *e = &lane_entries(sp, (unsigned)l->index)[l->next];
    l->next = (l->next + 1) % PH_LANE_ENTRIES;
    l->seq++;
    e->xstate = l->seq << 8 | PH_LOG_ACTIVE;
    e->op = op;
    e->block = block;
    e->size = size;
    e->dest = dest;
    e->old = old;
    e->reserved = 0;
    e->checksum = entry_checksum(e);
    ph_persist_range(&sp->persist, c, e, sizeof(*e));
    l->cur = e;
}

void ph_lane_end(ph_space *sp, ph_pctx *c, ph_lane *l)
{
    ph_persist_store64(&sp->persist, c, &l->cur->xstate, l->seq << 8 | PH_LOG_IDLE);
    l->cur = NULL;
}

static int committed(const ph_lane_entry *e)
{
    return (e->xstate & 0xff) == PH_LOG_ACTIVE && e->checksum == entry_checksum(e) &&
           (e->op == PH_LOG_ALLOC_TO || e->op == PH_LOG_FREE_FROM);
}

unsigned ph_lanes_scan(ph_space *sp, ph_lane_replay_fn fn, void *arg)
{
    unsigned n = 0;
    for (unsigned lane = 0; lane < PH_LANES_MAX; lane++) {
        ph_lane_entry *e = lane_entries(sp, lane);
        for (unsigned i = 0; i < PH_LANE_ENTRIES; i++) {
            if (committed(&e[i])) {
                fn(arg, &e[i]);
                n++;
            }
        }
    }
    return n;
}

void ph_lanes_retire_all(ph_space *sp, ph_pctx *c)
{
    int any = 0;
    for (unsigned lane = 0; lane < PH_LANES_MAX; lane++) {
        ph_lane_entry *e = lane_entries(sp, lane);
        for (unsigned i = 0; i < PH_LANE_ENTRIES; i++) {
            if ((e[i].xstate & 0xff) != PH_LOG_IDLE) {
                ph_store(&e[i].xstate, (e[i].xstate & ~0xffull) | PH_LOG_IDLE);
                ph_persist_flush(&sp->persist, c, &e[i].xstate, 8);
                any = 1;
            }
        }
    }
    if (any)
        ph_persist_fence(&sp->persist, c);
}

unsigned ph_lanes_active(ph_space *sp)
{
    unsigned n = 0;
    for (unsigned lane = 0; lane < PH_LANES_MAX; lane++) {
        ph_lane_entry *e = lane_entries(sp, lane);
        for (unsigned i = 0; i < PH_LANE_ENTRIES; i++)
            n += (e[i].xstate & 0xff) != PH_LOG_IDLE;
    }
    return n;
}
