/*
 * lane.c -- the lane entries of pheap_alloc_to / pheap_free_from.
 *
 * Crash protocol of a logged operation (three fences):
 *   F0  (pheap_alloc_to_init only, no fence of its own) the block is filled
 *       and its lines flushed; the entry's `contents` word gets its CRC.
 *   F1  entry words (each carrying its writing's tag), checksum last,
 *       state ACTIVE; flush the entry's line; fence.
 *                                            -> committed: recovery redoes it
 *       (eviction can make the entry durable before this fence, and before
 *       the block's lines: recovery then finds the CRC wrong and retires
 *       the entry without redoing it -- the allocation did not happen)
 *   F2  the operation's in-place stores (bitmap word or extent-log entry,
 *       destination word); flush; fence.     -> applied
 *   F3  state := IDLE (one 8-byte store); flush; fence.  -> retired
 * Before F1 completes, any subset of the entry's words may be durable
 * (8-byte words land independently); the entry counts only if all seven
 * words after xstate carry the tag of the xstate's sequence and the
 * checksum holds, so no mix of this writing and the line's previous one
 * passes.  The previous writing of a line is either zeros (ph_lane_acquire
 * zeroes the lane durably before a new holder writes it: a new thread or a
 * new process never meets the retired entries of an earlier holder) or
 * the same holder's entry PH_LANE_ENTRIES sequences earlier, whose tag
 * differs (tags count sequences in steps of PH_LANE_ENTRIES and never
 * equal zero).
 * Between F1 and F3 recovery rolls the operation forward; its redo is
 * idempotent, and nothing else can have touched the block or the
 * destination because the call had not returned.  The retire must be
 * durable before the call returns: otherwise another thread could free the
 * block or reuse the destination, and a later recovery would redo the old
 * operation over their changes.
 * A deferred entry (PH_LOG_BIND without contents, ph_lane_end_deferred)
 * stops after F2's stores and their flushes: no F2 fence, no F3 yet.  The
 * holder's next fence is F2's; the holder's next ph_lane_begin, after its
 * own F1 fence, writes the IDLE (not flushed: made durable by whatever
 * needs it, see retire_lazy), or another thread settles it: flush the
 * stores again, fence, IDLE.  The stores are
 * plain (a non-temporal bitmap word would have to be fenced before its
 * lock is dropped).  A replay of the entry meanwhile is harmless for a
 * versioned word: the operation is redone, or finds its new value or a
 * later one.
 * Consecutive operations of a lane use consecutive lines, so F3 never
 * flushes the line F1 flushed in the batch just before it... except within
 * one operation, where F2 lies between them.
 */
#include "log/lane.h"

#include <sched.h>
#include <stddef.h>
#include <stdlib.h>

#include "pheap.h"
#include "util/crc32c.h"
#include "util/error.h"

#define TAG_SHIFT 48
#define PAYLOAD ((1ull << TAG_SHIFT) - 1)

static ph_lane_entry *lane_of(ph_lanes *L, unsigned lane)
{
    return L->base + (uint64_t)lane * PH_LANE_ENTRIES;
}

/* The tag of the writing with sequence `seq`: differs from the tag of
 * seq - PH_LANE_ENTRIES (the line's previous writing) and from zero. */
static uint64_t tag_of(uint64_t seq)
{
    return (0x8000ull | ((seq / PH_LANE_ENTRIES) & 0x7fff)) << TAG_SHIFT;
}

static uint32_t entry_crc(const uint64_t w[7])
{
    return ph_crc32c(0, w, 7 * sizeof(uint64_t));
}

int ph_lanes_init(ph_lanes *L, void *base, ph_persist *persist, unsigned legacy, unsigned names)
{
    *L = (ph_lanes){base, persist, legacy, names, NULL};
    if (names && !(L->deferred = calloc(PH_LANES_MAX, sizeof(*L->deferred))))
        return ph_err(PHEAP_ENOMEM, "out of memory for the lanes");
    return 0;
}

void ph_lanes_fini(ph_lanes *L)
{
    free(L->deferred);
    L->deferred = NULL;
}

void ph_lane_acquire(ph_lanes *L, ph_pctx *c, ph_lane *l, unsigned index)
{
    static const uint64_t zero[PH_LINE_SIZE / 8];
    ph_lane_entry *e = lane_of(L, index);
    int wrote = 0;
    for (unsigned i = 0; i < PH_LANE_ENTRIES && !ph_plant("lane-no-zero"); i++) {
        const uint64_t *w = (const uint64_t *)&e[i];
        uint64_t any = 0;
        for (unsigned k = 0; k < PH_LINE_SIZE / 8; k++)
            any |= ph_load_relaxed(&w[k]);
        if (any) {
            ph_persist_store_nt_words(L->persist, c, (uint64_t *)&e[i], zero, PH_LINE_SIZE / 8);
            wrote = 1;
        }
    }
    if (wrote)
        ph_persist_fence(L->persist, c);
    *l = (ph_lane){(int)index, 0, 0, NULL, NULL};
}

/* Flushes a deferred entry's stores from this thread (the holder flushed
 * them, maybe on another CPU, whose flushes this thread's fence does not
 * order). */
static void flush_deferred_stores(ph_lanes *L, ph_pctx *c, const ph_lane_deferred *d)
{
    for (unsigned k = 0; k < 2; k++)
        ph_persist_flush(L->persist, c, d->lines[k], 8);
}

/* A settling thread's mark in a deferred slot: no entry lies there. */
#define PH_LANE_SETTLING ((ph_lane_entry *)1)

/* Retires entry e (whose stores are durable), not flushed: whatever needs
 * the retirement durable flushes the lane's commit words first -- the
 * names' settle before a segment is freed or a version could wrap
 * (ph_lanes_settle, then ph_lane_flush_states), a thread's exit
 * (ph_lane_settle_own) -- and until then a replay of the entry is
 * harmless. */
static void retire_lazy(ph_lanes *L, ph_pctx *c, ph_lane_entry *e)
{
    uint64_t s = ph_load_relaxed(&e->xstate);
    ph_persist_write(L->persist, c, &e->xstate, (s & ~0xffull) | PH_LOG_IDLE);
}

/* After a fence of the holder, which made its deferred entry's stores
 * durable: the entry retired lazily, unless another thread took it (then
 * the holder waits until that thread is done with the entry's line).  The
 * IDLE is stored before the slot is emptied: a settler that finds the
 * slot empty flushes the lane's commit words next, and must find it there
 * (were it stored after, a rebuild could free the segment of the entry's
 * word with the entry still ACTIVE on media).  A settler that takes the
 * entry between the two stores the same IDLE again. */
static void settle_after_fence(ph_lanes *L, ph_pctx *c, ph_lane *l)
{
    ph_lane_entry *x = l->deferred, *expect = x;
    ph_lane_deferred *d = &L->deferred[l->index];
    l->deferred = NULL;
    if (__atomic_load_n(&d->xentry, __ATOMIC_ACQUIRE) == x) {
        retire_lazy(L, c, x);
        if (__atomic_compare_exchange_n(&d->xentry, &expect, NULL, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return;
    }
    while (__atomic_load_n(&d->xentry, __ATOMIC_ACQUIRE) == PH_LANE_SETTLING)
        sched_yield(); /* a flush, a fence and a store away, unless preempted */
}

void ph_lane_begin(ph_lanes *L, ph_pctx *c, ph_lane *l, uint64_t op, uint64_t block,
                   uint64_t size, uint64_t dest, uint64_t old, uint64_t contents)
{
    ph_lane_entry *e = &lane_of(L, (unsigned)l->index)[l->next];
    l->next = (l->next + 1) % PH_LANE_ENTRIES;
    l->seq++;
    uint64_t tag = tag_of(l->seq);
    uint64_t w[8] = {l->seq << 8 | PH_LOG_ACTIVE, tag | op, tag | block, tag | size,
                     tag | dest, tag | (old & PAYLOAD), tag | (contents & PAYLOAD)};
    w[7] = tag | entry_crc(w);
    uint64_t *dst = (uint64_t *)e;
    for (unsigned k = 0; k < 8; k++)
        ph_persist_write(L->persist, c, &dst[k], w[k]);
    ph_persist_range(L->persist, c, e, sizeof(*e));
    l->cur = e;
    if (l->deferred) /* its stores are durable now: retired */
        settle_after_fence(L, c, l);
}

void ph_lane_end(ph_lanes *L, ph_pctx *c, ph_lane *l)
{
    ph_persist_store64(L->persist, c, &l->cur->xstate, l->seq << 8 | PH_LOG_IDLE);
    l->cur = NULL;
}

void ph_lane_end_lazy(ph_lanes *L, ph_pctx *c, ph_lane *l)
{
    ph_persist_write(L->persist, c, &l->cur->xstate, l->seq << 8 | PH_LOG_IDLE);
    ph_persist_flush(L->persist, c, &l->cur->xstate, sizeof(l->cur->xstate));
    l->cur = NULL;
}

void ph_lane_end_deferred(ph_lanes *L, ph_lane *l, const void *a, const void *b)
{
    ph_lane_deferred *d = &L->deferred[l->index];
    d->lines[0] = a;
    d->lines[1] = b;
    __atomic_store_n(&d->xentry, l->cur, __ATOMIC_RELEASE);
    l->deferred = l->cur;
    l->cur = NULL;
}

/* One step of ph_lanes_settle on slot d: taking its entry (its stores
 * flushed; 1 when there was one to take), or, once they are fenced,
 * retiring the entry taken and emptying the slot. */
static int settle_slot(ph_lanes *L, ph_pctx *c, ph_lane_deferred *d, int retire)
{
    if (retire) {
        if (d->settling) {
            retire_lazy(L, c, d->settling);
            d->settling = NULL;
            __atomic_store_n(&d->xentry, NULL, __ATOMIC_RELEASE);
        }
        return 0;
    }
    ph_lane_entry *x = __atomic_load_n(&d->xentry, __ATOMIC_ACQUIRE);
    if (!x || x == PH_LANE_SETTLING ||
        !__atomic_compare_exchange_n(&d->xentry, &x, PH_LANE_SETTLING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return 0; /* none, or its holder retires it now */
    d->settling = x;
    flush_deferred_stores(L, c, d);
    return 1;
}

void ph_lanes_settle(ph_lanes *L, ph_pctx *c, const uint64_t *mask, unsigned words)
{
    if (!L->deferred)
        return;
    for (int retire = 0, taken = 0; retire < 2; retire++) {
        for (unsigned w = 0; w < words; w++)
            for (uint64_t m = mask[w]; m; m &= m - 1)
                taken |= settle_slot(L, c, &L->deferred[w * 64 + (unsigned)__builtin_ctzll(m)],
                                     retire);
        if (!taken)
            return;
        if (!retire) /* the stores taken, durable before their entries are retired */
            ph_persist_fence(L->persist, c);
    }
}

void ph_lane_settle_own(ph_lanes *L, ph_pctx *c, ph_lane *l)
{
    if (l->deferred) {
        flush_deferred_stores(L, c, &L->deferred[l->index]);
        ph_persist_fence(L->persist, c);
        settle_after_fence(L, c, l);
    }
    /* and the lazily retired entries' commit words, which no fence of the
     * holder may have followed */
    ph_lane_flush_states(L, c, (unsigned)l->index);
    ph_persist_fence(L->persist, c);
}

void ph_lane_flush_states(ph_lanes *L, ph_pctx *c, unsigned index)
{
    ph_lane_entry *e = lane_of(L, index);
    for (unsigned i = 0; i < PH_LANE_ENTRIES; i++)
        ph_persist_flush(L->persist, c, &e[i].xstate, sizeof(e[i].xstate));
}

/* An entry written before entries were tagged (legacy heaps only): the
 * checksum is CRC-32C of the seven words, zero-extended. */
static int legacy_committed(const uint64_t w[8])
{
    return (w[1] == PH_LOG_ALLOC_TO || w[1] == PH_LOG_FREE_FROM) && w[7] == entry_crc(w);
}

/* ALLOC_TO and FREE_FROM are the kind alone; BIND and UNBIND (heaps with
 * names) carry versions above it. */
static int known_op(const ph_lanes *L, uint64_t op)
{
    if (op == PH_LOG_ALLOC_TO || op == PH_LOG_FREE_FROM)
        return 1;
    return L->names && (((op & 0xff) == PH_LOG_BIND && op >> 43 != 0) ||
                        ((op & 0xff) == PH_LOG_UNBIND && op >> 43 == 0));
}

/* Decodes a committed (ACTIVE, whole, checksum-valid) entry. */
static int committed(const ph_lanes *L, const ph_lane_entry *e, ph_lane_op *out)
{
    uint64_t w[8];
    for (unsigned k = 0; k < 8; k++)
        w[k] = ph_load_relaxed(&((const uint64_t *)e)[k]);
    if (ph_plant("lane-replay-retired") && w[0]) /* planted: a stale log reused */
        w[0] = (w[0] & ~0xffull) | PH_LOG_ACTIVE;
    if ((w[0] & 0xff) != PH_LOG_ACTIVE)
        return 0;
    if (L->legacy && legacy_committed(w)) {
        *out = (ph_lane_op){w[1], w[2], w[3], w[4], w[5], 0};
        return 1;
    }
    uint64_t tag = tag_of(w[0] >> 8);
    int unchecked = ph_plant("lane-no-check"); /* planted: tags and checksum skipped */
    for (unsigned k = 1; k < 8 && !unchecked; k++)
        if ((w[k] & ~PAYLOAD) != tag)
            return 0;
    uint64_t op = w[1] & PAYLOAD;
    if ((!unchecked && (w[7] & PAYLOAD) != entry_crc(w)) || !known_op(L, op))
        return 0;
    *out = (ph_lane_op){op, w[2] & PAYLOAD, w[3] & PAYLOAD, w[4] & PAYLOAD, w[5] & PAYLOAD,
                        w[6] & PAYLOAD};
    return 1;
}

unsigned ph_lanes_scan_one(ph_lanes *L, unsigned lane, ph_lane_replay_fn fn, void *arg)
{
    unsigned n = 0;
    ph_lane_op op;
    ph_lane_entry *e = lane_of(L, lane);
    for (unsigned i = 0; i < PH_LANE_ENTRIES; i++) {
        if (committed(L, &e[i], &op)) {
            fn(arg, &op);
            n++;
        }
    }
    return n;
}

unsigned ph_lanes_scan(ph_lanes *L, ph_lane_replay_fn fn, void *arg)
{
    unsigned n = 0;
    for (unsigned lane = 0; lane < PH_LANES_MAX; lane++)
        n += ph_lanes_scan_one(L, lane, fn, arg);
    return n;
}

void ph_lanes_retire_one(ph_lanes *L, ph_pctx *c, unsigned lane)
{
    ph_lane_entry *e = lane_of(L, lane);
    for (unsigned i = 0; i < PH_LANE_ENTRIES; i++) {
        uint64_t s = ph_load_relaxed(&e[i].xstate);
        if ((s & 0xff) != PH_LOG_IDLE) {
            ph_persist_write(L->persist, c, &e[i].xstate, (s & ~0xffull) | PH_LOG_IDLE);
            ph_persist_flush(L->persist, c, &e[i].xstate, 8);
        }
    }
}

void ph_lanes_retire_all(ph_lanes *L, ph_pctx *c)
{
    for (unsigned lane = 0; lane < PH_LANES_MAX; lane++)
        ph_lanes_retire_one(L, c, lane);
}

unsigned ph_lanes_active(ph_lanes *L)
{
    unsigned n = 0;
    for (unsigned lane = 0; lane < PH_LANES_MAX; lane++) {
        ph_lane_entry *e = lane_of(L, lane);
        const ph_lane_entry *deferred =
            L->deferred ? __atomic_load_n(&L->deferred[lane].xentry, __ATOMIC_ACQUIRE) : NULL;
        for (unsigned i = 0; i < PH_LANE_ENTRIES; i++)
            n += (ph_load_relaxed(&e[i].xstate) & 0xff) != PH_LOG_IDLE && &e[i] != deferred;
    }
    return n;
}
