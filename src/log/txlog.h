/*
 * txlog.h -- the records of transaction logs (format/layout.h, "transaction
 * logs"): encoding, validation, and the walk over a log's segments that
 * recovery and the check share.  What the records mean and when they are
 * written is the transaction code's (heap/tx.c, alloc/engine_tx.c).
 */
#ifndef PH_LOG_TXLOG_H
#define PH_LOG_TXLOG_H

#include <stddef.h>
#include <stdint.h>

#include "format/layout.h"
#include "util/crc32c.h"

/* Bytes of a record with `len` payload bytes. */
static inline size_t ph_txrec_size(uint32_t len)
{
    return sizeof(ph_txrec) + (((size_t)len + 7) & ~(size_t)7);
}

/* A decoded record. */
typedef struct ph_txrec_view {
    uint32_t kind, len;
    uint64_t off, aux;
    const void *payload;   /* len bytes, in the log */
    uint32_t crc;          /* the record's CRC-32C */
} ph_txrec_view;

/* The anchor of lane `lane`'s log in a lane region at `lanes` (the region
 * of a heap with PH_FEAT_INCOMPAT_TX), and the records area after it. */
static inline ph_txlog_anchor *ph_txlog_anchor_of(void *lanes, unsigned lane)
{
    return (ph_txlog_anchor *)((char *)lanes + (uint64_t)PH_LANES_MAX * PH_LANE_SIZE +
                               (uint64_t)lane * PH_TXLOG_SIZE);
}
#define PH_TXLOG_RECORDS (PH_TXLOG_SIZE - PH_LINE_SIZE)

/* Writes a record at p with plain stores (the caller flushes it) and
 * returns its CRC. */
uint32_t ph_txrec_put(void *p, uint32_t kind, uint64_t seq, uint64_t off, uint64_t aux,
                      const void *payload, uint32_t len);

/* Decodes the record at p when it is whole within `avail` bytes, carries
 * `seq` and its CRC holds; returns its size, or 0 when it does not count. */
size_t ph_txrec_get(const void *p, size_t avail, uint64_t seq, ph_txrec_view *out);

/* The commit record's chained CRC: folds each record's CRC in order.  Its
 * contents CRC is ph_txlog_chain(U, A): U the CRC-32C of the UNDO records'
 * ranges, A of the ALLOC records' blocks, each in log order. */
static inline uint32_t ph_txlog_chain(uint32_t chain, uint32_t crc)
{
    return ph_crc32c(chain, &crc, sizeof(crc));
}

/* A segment of a log: where its records are, how many bytes, and the word
 * that names the next segment. */
typedef struct ph_txseg {
    uint8_t *records;
    size_t bytes;
    uint64_t *next;
} ph_txseg;

/* Resolves the overflow segment at data offset `off` (named by a NEXT
 * record's segment): 0 and *out, or nonzero when `off` is no segment
 * (damage: the walk ends there). */
typedef int (*ph_txseg_fn)(void *arg, uint64_t off, ph_txseg *out);

/* How a walk ended. */
typedef struct ph_txlog_end {
    uint64_t records;      /* records that counted, the COMMIT excluded */
    uint32_t chain;        /* their chained CRC */
    int committed;         /* a COMMIT record counted and matched records and chain */
    uint32_t contents;     /* its contents CRC */
    uint64_t segments;     /* overflow segments visited */
} ph_txlog_end;

/* Calls fn for every record of transaction `seq` in lane log `a`, in order,
 * NEXT and COMMIT records excluded, until a record does not count or the
 * COMMIT; fills *end. */
void ph_txlog_walk(ph_txlog_anchor *a, uint64_t seq, ph_txseg_fn seg, void *seg_arg,
                   void (*fn)(void *arg, const ph_txrec_view *r), void *arg, ph_txlog_end *end);

#endif
