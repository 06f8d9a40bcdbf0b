/*
 * txlog.c -- transaction log records: the CRC that makes a record count,
 * and the walk over a log's segments.
 *
 * A record's CRC-32C covers its kind and length (the head's low 32 bits),
 * seq, off, aux and the payload, so a record whose words come from two
 * writings (a torn append over a stale record), or whose payload is not
 * all durable, does not count.
 */
#include "log/txlog.h"

#include <string.h>

#include "util/util.h"

static uint32_t rec_crc(uint64_t head, uint64_t seq, uint64_t off, uint64_t aux,
                        const void *payload, uint32_t len)
{
    uint64_t w[4] = {head & 0xffffffffull, seq, off, aux};
    return ph_crc32c(ph_crc32c(0, w, sizeof(w)), payload, len);
}

uint32_t ph_txrec_put(void *p, uint32_t kind, uint64_t seq, uint64_t off, uint64_t aux,
                      const void *payload, uint32_t len)
{
    ph_txrec *r = p;
    uint64_t head = (uint64_t)kind | (uint64_t)len << 8;
    if (len)
        memcpy(r + 1, payload, len);
    uint32_t crc = rec_crc(head, seq, off, aux, r + 1, len);
    r->seq = seq;
    r->off = off;
    r->aux = aux;
    ph_store(&r->head, head | (uint64_t)crc << 32);
    return crc;
}

size_t ph_txrec_get(const void *p, size_t avail, uint64_t seq, ph_txrec_view *out)
{
    const ph_txrec *r = p;
    if (avail < sizeof(*r))
        return 0;
    uint64_t head = ph_load_relaxed(&r->head), rseq = ph_load_relaxed(&r->seq);
    uint32_t kind = head & 0xff, len = (uint32_t)(head >> 8) & PH_TXREC_LEN_MAX;
    if (rseq != seq || kind < PH_TXREC_UNDO || kind > PH_TXREC_NEXT || ph_txrec_size(len) > avail)
        return 0;
    uint64_t off = ph_load_relaxed(&r->off), aux = ph_load_relaxed(&r->aux);
    uint32_t crc = rec_crc(head, seq, off, aux, r + 1, len);
    if (crc != (uint32_t)(head >> 32))
        return 0;
    *out = (ph_txrec_view){kind, len, off, aux, r + 1, crc};
    return ph_txrec_size(len);
}

void ph_txlog_walk(ph_txlog_anchor *a, uint64_t seq, ph_txseg_fn seg, void *seg_arg,
                   void (*fn)(void *arg, const ph_txrec_view *r), void *arg, ph_txlog_end *end)
{
    ph_txseg s = {(uint8_t *)(a + 1), PH_TXLOG_RECORDS, &a->xnext};
    size_t pos = 0, n;
    ph_txrec_view r;
    *end = (ph_txlog_end){0, 0, 0, 0, 0};
    while ((n = ph_txrec_get(s.records + pos, s.bytes - pos, seq, &r)) != 0) {
        pos += n;
        if (r.kind == PH_TXREC_NEXT) {
            /* Bounded: a chain longer than the heap could hold is damage. */
            if (end->segments++ > (1u << 20) || seg(seg_arg, ph_load_relaxed(s.next), &s))
                return;
            pos = 0;
            continue;
        }
        if (r.kind == PH_TXREC_COMMIT) {
            end->committed = r.off == end->records && (uint32_t)r.aux == end->chain;
            end->contents = (uint32_t)(r.aux >> 32);
            return;
        }
        end->chain = ph_txlog_chain(end->chain, r.crc);
        end->records++;
        if (fn)
            fn(arg, &r);
    }
}
