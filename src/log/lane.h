/*
 * lane.h -- per-thread write-ahead logs for operations that change two
 * places at once (pheap_alloc_to, pheap_free_from).  A lane entry is
 * written and fenced first (the commit), the in-place changes follow and
 * are fenced, then the entry is retired and fenced.  Recovery rolls every
 * committed, unretired entry forward.  Entry layout: format/layout.h.
 */
#ifndef PH_LOG_LANE_H
#define PH_LOG_LANE_H

#include <stdint.h>

#include "format/layout.h"
#include "persist/persist.h"

/* A lane's deferred entry (volatile, one per lane): an operation whose
 * in-place stores were flushed but not fenced (ph_lane_end_deferred).
 * `xentry` is the entry, PH_LANE_SETTLING while a thread other than the
 * holder settles it, or NULL; `lines` are the stores' words. */
typedef struct ph_lane_deferred {
    ph_lane_entry *xentry;
    const void *lines[2];
    ph_lane_entry *settling; /* the entry, for the thread settling it */
} ph_lane_deferred;

/* The lane region of one open heap (volatile view). */
typedef struct ph_lanes {
    ph_lane_entry *base;  /* PH_LANES_MAX lanes of PH_LANE_ENTRIES lines, in the mapping */
    ph_persist *persist;  /* the heap's flush back end */
    unsigned legacy;      /* heap made before tagged entries: accept untagged ones too */
    unsigned names;       /* PH_FEAT_INCOMPAT_NAMES: BIND and UNBIND entries exist */
    ph_lane_deferred *deferred; /* PH_LANES_MAX slots (ph_lanes_init), or NULL: none deferred */
} ph_lanes;

/* A thread's hold on one lane (volatile). */
typedef struct ph_lane {
    int index;            /* lane number, or -1 while the thread has none */
    uint32_t next;        /* entry line the next operation uses */
    uint64_t seq;         /* sequence of the last entry written */
    ph_lane_entry *cur;   /* entry of the operation in flight, or NULL */
    ph_lane_entry *deferred; /* this holder's deferred entry, maybe settled by another */
} ph_lane;

/* Sets up the lane region's volatile view; 0, or PHEAP_ENOMEM. */
int ph_lanes_init(ph_lanes *L, void *base, ph_persist *persist, unsigned legacy, unsigned names);
void ph_lanes_fini(ph_lanes *L);

/* Takes lane `index` (free: no entry of it is ACTIVE) for a new holder:
 * every line that is not zero is zeroed and the zeros fenced, so that no
 * entry of an earlier holder is left to mix with this holder's. */
void ph_lane_acquire(ph_lanes *L, ph_pctx *c, ph_lane *l, unsigned index);

/* Writes an ACTIVE entry for the operation and persists it: after this
 * returns, recovery will complete the operation.  `contents` is 0, or
 * PH_LOG_CONTENTS | the CRC-32C of the block's `size` bytes, whose lines
 * the caller flushed: this fence makes them durable with the entry, and
 * recovery redoes the operation only if they are. */
void ph_lane_begin(ph_lanes *L, ph_pctx *c, ph_lane *l, uint64_t op, uint64_t block,
                   uint64_t size, uint64_t dest, uint64_t old, uint64_t contents);

/* Retires the entry of the operation in flight and persists that: the
 * operation's in-place changes must be durable already. */
void ph_lane_end(ph_lanes *L, ph_pctx *c, ph_lane *l);

/* Retires like ph_lane_end without a fence: the entry is durably retired
 * at the caller's next fence (PH_LOG_BIND, whose replay is harmless until
 * then: format/layout.h). */
void ph_lane_end_lazy(ph_lanes *L, ph_pctx *c, ph_lane *l);

/* Leaves the entry of the operation in flight ACTIVE, its in-place stores
 * (the words at `a` and `b`, flushed by the caller) not yet fenced: only
 * for PH_LOG_BIND, whose replay is harmless while the entry lasts.  The
 * operation is durable on return (the entry is); the stores become
 * durable at the holder's next fence, and the entry is retired after it:
 * by the holder's next ph_lane_begin, or by ph_lanes_settle or
 * ph_lane_settle_own first.  Until then the entry keeps its line: the
 * holder's next entry takes the next line, and waits for a settling
 * under way (format/layout.h, PH_LOG_BIND). */
void ph_lane_end_deferred(ph_lanes *L, ph_lane *l, const void *a, const void *b);

/* Settles the deferred entries of the lanes whose bits are set in
 * mask[0..words): their stores flushed again from here and fenced, then
 * the entries retired, durable once the caller has flushed those lanes'
 * commit words (ph_lane_flush_states) and fenced.  For the
 * names' rebuilds and version count, which run under the names' lock
 * (the only writer of deferred entries). */
void ph_lanes_settle(ph_lanes *L, ph_pctx *c, const uint64_t *mask, unsigned words);

/* Every entry of the holder's lane retired durably (thread exit, close):
 * a deferred one's stores flushed and fenced, then it and the lazily
 * retired entries flushed and fenced. */
void ph_lane_settle_own(ph_lanes *L, ph_pctx *c, ph_lane *l);

/* Flushes the commit words of lane `index`'s entries, whoever holds it:
 * its lazily retired entries are retired durably at the caller's next
 * fence. */
void ph_lane_flush_states(ph_lanes *L, ph_pctx *c, unsigned index);

/* A committed entry, decoded.  `op` is the op word's payload: the kind in
 * bits 0..7 (PH_LOG_BIND and PH_LOG_UNBIND carry versions above them). */
typedef struct ph_lane_op {
    uint64_t op, block, size, dest;
    uint64_t old;       /* low 48 bits of the destination before */
    uint64_t contents;  /* 0, or PH_LOG_CONTENTS | CRC-32C the block must have */
} ph_lane_op;

/* Calls fn for every committed entry of every lane and returns how many
 * there were.  fn must make the operation's effects durable;
 * ph_lanes_retire_all then retires the entries: flushed, durable at the
 * caller's next fence (the open's, which marks the heap OPEN before any
 * new operation can reuse a block or a destination). */
typedef void (*ph_lane_replay_fn)(void *arg, const ph_lane_op *op);
unsigned ph_lanes_scan(ph_lanes *L, ph_lane_replay_fn fn, void *arg);
void ph_lanes_retire_all(ph_lanes *L, ph_pctx *c);
/* The same for lane `lane` alone (the takeover of a dead process of a
 * shared heap replays its lanes while the others run). */
unsigned ph_lanes_scan_one(ph_lanes *L, unsigned lane, ph_lane_replay_fn fn, void *arg);
void ph_lanes_retire_one(ph_lanes *L, ph_pctx *c, unsigned lane);

/* Counts ACTIVE entries that are not deferred (consistent only while no
 * operation is in flight). */
unsigned ph_lanes_active(ph_lanes *L);

#endif
