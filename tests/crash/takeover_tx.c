/*
 * takeover_tx.c -- the takeover of a dead process's transaction logs,
 * crashed at every fence and store.  Process A (a shared engine of the
 * simulated heap) dies with two transactions in flight, each in a lane of
 * its own:
 *   lane 1  a redo transaction whose log is committed (F1) and nothing of
 *           it applied: it allocates a small and a large block (reserved
 *           by A) into words 0 and 1, and frees A's block of word 2 and B's
 *           block of word 3 (a free of another process's block);
 *   lane 2  an undo transaction, active: it changed word 4, whose old
 *           value its UNDO record holds.
 * Process B takes A over: lane 1 rolled forward, lane 2 rolled back, the
 * logs retired, the freed blocks given back; then B allocates from what A
 * left.  After every crash the open (every process gone) passes
 * pheap_check, and once the first log is durable words 0..3 hold what the
 * transaction commits, word 4 always its old value, and no block lives
 * that no word names.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "format/header.h"
#include "harness.h"
#include "heap/heap.h"
#include "log/txlog.h"
#include "share_test.h"

static uint64_t ext_lock;
static pheap_off words; /* eight words, made before the workload */
static uint64_t old4;   /* word 4's value: a block */

static int a_dead(void *ctx, uint64_t who)
{
    (void)ctx;
    return who == 1;
}

/* A log being written by hand, as heap/tx.c writes one. */
typedef struct logw {
    pheap *h;
    uint8_t *start, *p;
    uint64_t seq, records;
    uint32_t chain, undo, alloc;
} logw;

static logw log_of(pheap *h, unsigned lane, uint64_t seq)
{
    uint8_t *r = ph_txlog_records_of(ph_space_at(&h->sp, h->sp.lane_region), lane);
    return (logw){h, r, r, seq, 0, 0, 0, 0};
}

static void put(logw *w, uint32_t kind, uint64_t off, uint64_t aux, const void *payload,
                uint32_t len)
{
    uint32_t crc = ph_txrec_put(w->p, kind, w->seq, off, aux, payload, len);
    w->p += ph_txrec_size(len);
    w->chain = ph_txlog_chain(w->chain, crc);
    w->records++;
    if (kind == PH_TXREC_ALLOC)
        w->alloc = ph_crc32c(w->alloc, ph_space_at(&w->h->sp, off), aux);
}

/* The anchor's ceiling above the log's seq, durable before any record or
 * state carries it (heap/tx.c takes sequences that way). */
static void ceiling(pheap *h, unsigned lane, uint64_t seq, ph_pctx *pc)
{
    ph_txlog_anchor *a = ph_txlog_anchor_of(ph_space_at(&h->sp, h->sp.lane_region), lane);
    ph_persist_store64(&h->sp.persist, pc, &a->xceiling, seq + 64);
}

/* The log's records flushed, then its state stored, both durable. */
static void seal(logw *w, unsigned lane, uint64_t state, ph_pctx *pc)
{
    ph_persist *p = &w->h->sp.persist;
    ph_txlog_anchor *a = ph_txlog_anchor_of(ph_space_at(&w->h->sp, w->h->sp.lane_region), lane);
    ph_persist_flush(p, pc, w->start, (size_t)(w->p - w->start));
    ph_persist_fence(p, pc);
    if (ph_load(&a->xstate) != state)
        ph_persist_store64(p, pc, &a->xstate, state);
}

static void workload(ph_crash_ctx *c)
{
    pheap *h = c->heap;
    ph_pctx *pc = ph_heap_pctx(h);
    uint64_t *w = pheap_direct(h, words);
    ph_engine_share sa = ph_test_share(h, 1, 0, &ext_lock, a_dead, NULL),
                    sb = ph_test_share(h, 2, 0, &ext_lock, a_dead, NULL);
    ph_engine *a = NULL, *b = NULL;
    ph_tcache ta, ta2, tb;
    ph_test_tcache(&ta);
    ph_test_tcache(&ta2);
    ph_test_tcache(&tb);
    ext_lock = 0;
    if (ph_engine_open_shared(&h->sp, &sa, &a) || ph_engine_open_shared(&h->sp, &sb, &b)) {
        ph_test_fail(__FILE__, __LINE__, "open: %s", pheap_errmsg());
        return;
    }
    uint64_t r1 = 0, r2 = 0, b1 = 0, b2 = 0;
    int rc = ph_engine_alloc_to(a, &ta, pc, 48, &w[2], NULL);
    if (!rc)
        rc = ph_engine_alloc_to(b, &tb, pc, 48, &w[3], NULL);
    if (!rc)
        rc = ph_engine_lane(a, &ta, pc);
    if (!rc)
        rc = ph_engine_tx_reserve(a, &ta, pc, 64, &r1, &b1);
    if (!rc)
        rc = ph_engine_tx_reserve(a, &ta, pc, 20000, &r2, &b2);
    if (rc) {
        ph_test_fail(__FILE__, __LINE__, "workload: %s", pheap_errmsg());
        return;
    }
    /* lane 1: a redo transaction, committed, nothing applied */
    memset(ph_space_at(&h->sp, r1), 0x11, b1);
    memset(ph_space_at(&h->sp, r2), 0x22, b2);
    ph_persist_flush(&h->sp.persist, pc, ph_space_at(&h->sp, r1), b1);
    ph_persist_flush(&h->sp.persist, pc, ph_space_at(&h->sp, r2), b2);
    unsigned l1 = (unsigned)ta.lane.index;
    ceiling(h, l1, 1, pc);
    logw lw = log_of(h, l1, 1);
    uint64_t redo[4] = {r1, r2, 0, 0};
    put(&lw, PH_TXREC_ALLOC, r1, b1, NULL, 0);
    put(&lw, PH_TXREC_ALLOC, r2, b2, NULL, 0);
    put(&lw, PH_TXREC_FREE, w[2], 48, NULL, 0);
    put(&lw, PH_TXREC_FREE, w[3], 48, NULL, 0);
    put(&lw, PH_TXREC_REDO, words, 0, redo, sizeof(redo));
    uint32_t contents = ph_txlog_chain(0, lw.alloc);
    ph_txrec_put(lw.p, PH_TXREC_COMMIT, lw.seq, lw.records,
                 lw.chain | (uint64_t)contents << 32, NULL, 0);
    lw.p += ph_txrec_size(0);
    seal(&lw, l1, 0 << 8 | PH_TX_IDLE, pc); /* a redo log is IDLE: its records count */
    ph_crash_mark(c); /* 1 */
    /* lane 2: an undo transaction, active, word 4 changed */
    if ((rc = ph_engine_lane(a, &ta2, pc)) != 0) {
        ph_test_fail(__FILE__, __LINE__, "lane: %s", pheap_errmsg());
        return;
    }
    unsigned l2 = (unsigned)ta2.lane.index;
    ceiling(h, l2, 1, pc);
    logw uw = log_of(h, l2, 1);
    put(&uw, PH_TXREC_UNDO, words + 4 * 8, 0, &w[4], 8);
    seal(&uw, l2, 1 << 8 | PH_TX_ACTIVE, pc);
    ph_persist_store64(&h->sp.persist, pc, &w[4], 0xdeadbeef00ull);
    ext_lock = 1; /* A dies inside the extent log's lock too */
    ph_crash_mark(c); /* 2 */
    ph_takeover_info ti = {0, 0, 0, 0};
    rc = ph_engine_takeover(b, pc, 1, 1, &ti);
    ph_crash_mark(c); /* 3 */
    if (!rc && (ph_load(&w[0]) != r1 || ph_load(&w[1]) != r2 || ph_load(&w[2]) ||
                ph_load(&w[3]) || ph_load(&w[4]) != old4))
        ph_test_fail(__FILE__, __LINE__, "after the takeover: words %llx %llx %llx %llx %llx",
                     (unsigned long long)w[0], (unsigned long long)w[1],
                     (unsigned long long)w[2], (unsigned long long)w[3],
                     (unsigned long long)w[4]);
    if (!rc) /* B allocates from what A left */
        rc = ph_engine_alloc_to(b, &tb, pc, 48, &w[5], NULL);
    ph_crash_mark(c); /* 4 */
    if (rc)
        ph_test_fail(__FILE__, __LINE__, "workload: %s", pheap_errmsg());
    ph_engine_thread_exit(b, &tb, pc);
    free(ta.store);
    free(ta2.store);
    free(tb.store);
    ph_engine_detach(b);
    ph_engine_close(a);
    ph_engine_close(b);
    if (ph_extents_sync(h->engine->ext, NULL)) /* the heap's own index learns it all */
        ph_test_fail(__FILE__, __LINE__, "sync: %s", pheap_errmsg());
    ext_lock = 0;
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    const uint64_t *w = pheap_direct(h, words);
    if (w[4] != old4)
        ph_test_fail(__FILE__, __LINE__, "word 4 holds %llx after %u ops, not its old value",
                     (unsigned long long)w[4], done);
    if (done >= 1 && (!w[0] || !w[1] || w[2] || w[3]))
        ph_test_fail(__FILE__, __LINE__, "the committed transaction is not whole after %u ops: "
                     "words %llx %llx %llx %llx", done, (unsigned long long)w[0],
                     (unsigned long long)w[1], (unsigned long long)w[2], (unsigned long long)w[3]);
    for (unsigned i = 0; i < 6; i++)
        if (w[i] && pheap_usable_size(h, w[i]) == 0)
            ph_test_fail(__FILE__, __LINE__, "word %u names no live block after %u ops", i, done);
    if (done >= 1 && w[0] && ((const uint8_t *)pheap_direct(h, w[0]))[5] != 0x11)
        ph_test_fail(__FILE__, __LINE__, "the block of word 0 lost its contents");
    if (done >= 4 && !w[5])
        ph_test_fail(__FILE__, __LINE__, "word 5 is empty after %u ops", done);
    struct pheap_stats st;
    if (pheap_stats(h, &st) == 0) {
        uint64_t named = 1; /* the words' block */
        for (unsigned i = 0; i < 6; i++)
            named += w[i] != 0;
        if (st.live_blocks != named)
            ph_test_fail(__FILE__, __LINE__, "%llu blocks live, %llu named, after %u ops",
                         (unsigned long long)st.live_blocks, (unsigned long long)named, done);
    }
}

TEST(takeover_of_transaction_logs_at_every_fence)
{
    const char *base = ph_test_path("takeover_tx.heap");
    unlink(base);
    pheap_options o = {.size = 1u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h = ph_test_open(base, &o);
    REQUIRE(h);
    REQUIRE(words = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL));
    uint64_t *w = pheap_direct(h, words);
    REQUIRE(w[4] = old4 = pheap_alloc(h, 100));
    pheap_persist(h, &w[4], 8);
    REQUIRE_OK(pheap_close(h));
    ph_crash_stats st = ph_crash_enumerate("takeover_tx", base, workload, verify, NULL);
    CHECK(st.fences > 8);
    CHECK_EQ(st.violations, 0);
    unlink(base);
}
