/*
 * tx_threads.c -- transactions of more threads than cores on one heap.
 *
 * Each thread owns a partition (a block of words: values and slots naming
 * blocks, and a 64 KiB block of its own) and changes it only through
 * transactions: redo-only, undo-only, mixed, nested, aborted at the outer
 * or at an inner level, with small and large (> 16 KiB) blocks, and now
 * and then a snapshot or a write far bigger than the lane's 2 KiB log.
 * Blocks travel between threads: a thread takes a block out of a slot in a
 * transaction and, once it has committed, posts it to another thread's
 * mailbox (in DRAM); the receiver checks its contents and frees it with
 * pheap_tx_free in its own transaction, or adopts it into a slot and frees
 * or posts it on later -- so most frees are of blocks another thread
 * allocated.  Each thread keeps in DRAM what its committed transactions
 * should have made of its partition, and after an abort checks at once
 * that the partition is back to it.
 *
 * Threads also exit with a transaction still open (some of them aborted
 * at an inner level, some with an overflowing log): every 200
 * transactions a worker has a helper thread run one on its partition and
 * exit inside it, and at the end of each round half the workers do so
 * themselves.  The thread record's destructor rolls the transaction back:
 * the partition must be as before it, and whatever it allocated not live.
 * The helpers' lanes are taken again by later threads, whose sequences
 * must stay above those of the lane's earlier holders.  After each round: every
 * partition equals its model, every block is intact, the blocks are
 * disjoint, live blocks equal reachable blocks, pheap_check passes, and
 * tx_commits / tx_aborts equal what the threads counted; then close and
 * reopen (clean: nothing to recover) and the same again.
 *
 * Each thread draws its choices from a stream of its own seeded from
 * PHEAP_TEST_SEED=n; what its mailbox holds depends on the schedule, so a
 * run replays exactly only up to a thread's first receipt that differs.
 * PHEAP_TX_THREADS_TXS=n sets the transactions per thread and round.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

enum {
    NT = 8,             /* threads, on any number of cores */
    ROUNDS = 4,         /* of threads; the heap is closed and reopened after each */
    NVALS = 40,         /* value words of a partition */
    NSLOTS = 24,        /* slot words of a partition: 0 or a block */
    NWORDS = NVALS + NSLOTS,
    BIG = 64 * 1024,    /* each partition's big block */
    MAXLIST = 256,      /* per-transaction lists */
    SCRATCH = 256 * 1024,
};

/* Transactions per thread and round: fewer under ThreadSanitizer. */
#define TXS (PHEAP_SANITIZE[0] == 't' ? 1000u : 3000u)

typedef struct part {
    uint64_t w[NWORDS]; /* w[i < NVALS]: values; w[NVALS + k]: slot k */
    pheap_off big;
} part;

typedef struct blk {
    pheap_off off;
    uint64_t seed, size; /* contents: ph_test_fill(size, seed) */
} blk;

typedef struct model {
    uint64_t vals[NVALS];
    blk slot[NSLOTS];
} model;

static uint64_t model_word(const model *m, unsigned i)
{
    return i < NVALS ? m->vals[i] : m->slot[i - NVALS].off;
}

/* ---- mailboxes: blocks in transit between threads ---------------------------- */

typedef struct mailbox {
    pthread_mutex_t mu;
    blk *v;
    size_t n, cap;
} mailbox;

static mailbox mail[NT];

static void mail_push(unsigned to, blk b)
{
    mailbox *m = &mail[to];
    pthread_mutex_lock(&m->mu);
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        m->v = realloc(m->v, m->cap * sizeof(blk));
        if (!m->v)
            abort();
    }
    m->v[m->n++] = b;
    pthread_mutex_unlock(&m->mu);
}

static int mail_pop(unsigned to, blk *b)
{
    mailbox *m = &mail[to];
    pthread_mutex_lock(&m->mu);
    int got = m->n > 0;
    if (got)
        *b = m->v[--m->n];
    pthread_mutex_unlock(&m->mu);
    return got;
}

/* ---- workers ---------------------------------------------------------------- */

enum { REDO, UNDO, MIXED };

typedef struct counts {
    uint64_t commits, aborts;           /* outermost commits; rollbacks (any cause) */
    uint64_t redo_only, undo_only, mixed, nested, inner_aborts, outer_aborts, open_exits;
    uint64_t allocs, large_allocs, frees, cross_frees, sends, adopts, big_adds, big_writes;
    uint64_t refused;                   /* bad-argument calls checked to leave the tx as it was */
} counts;

typedef struct worker {
    pheap *h;
    unsigned id, round, txs;
    uint64_t rng, seeds;
    part *p;
    uint8_t *bigp;
    model m, t;                         /* committed state; the transaction's */
    uint8_t mbig[BIG], tbig[BIG];
    int big_touched, mode, aborted;
    uint8_t redo_w[NWORDS];             /* words with a pending pheap_tx_write in this tx */
    uint8_t added_w[NWORDS];            /* words given to pheap_tx_add in this tx */
    pheap_off redo_blocks[MAXLIST];     /* blocks whose bytes were given to it */
    unsigned nredo_blocks;
    uint64_t big_redo[MAXLIST][2];      /* ranges of the big block given to it */
    unsigned nbig_redo;
    blk in[MAXLIST];                    /* taken from the mailbox by this tx */
    unsigned nin;
    blk out[MAXLIST];                   /* to post when it commits */
    unsigned out_to[MAXLIST], nout;
    blk stash[MAXLIST];                 /* taken by a tx left open at exit */
    unsigned nstash;
    uint8_t *scratch;
    counts c;
    unsigned failures;
} worker;

static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

/* A failure inside a worker: printed now, counted by the main thread. */
__attribute__((format(printf, 3, 4))) static int wfail(worker *w, int line, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&print_mu);
    fprintf(stderr, "  %s:%d: thread %u round %u: ", __FILE__, line, w->id, w->round);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    pthread_mutex_unlock(&print_mu);
    w->failures++;
    return -1;
}

#define WFAIL(w, ...) wfail((w), __LINE__, __VA_ARGS__)
#define WOK(w, call)                                                                          \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_)                                                                              \
            return WFAIL((w), "%s -> %d (%s)", #call, rc_, pheap_errmsg());                   \
    } while (0)

static uint64_t rnd(worker *w, uint64_t n)
{
    return ph_test_rand(&w->rng) % n;
}

static uint64_t block_size(worker *w)
{
    uint64_t r = rnd(w, 100);
    if (r < 75)
        return 8 + rnd(w, 1500);
    if (r < 93)
        return 1500 + rnd(w, PHEAP_SMALL_MAX - 1500 + 1);
    return PHEAP_SMALL_MAX + 1 + rnd(w, 150000); /* a large extent */
}

static uint8_t *at(worker *w, pheap_off off)
{
    return pheap_direct(w->h, off);
}

static int listed(const pheap_off *v, unsigned n, pheap_off off)
{
    for (unsigned i = 0; i < n; i++)
        if (v[i] == off)
            return 1;
    return 0;
}

/* Stores n words at partition word idx, by snapshot and store (undo) or by
 * pheap_tx_write (redo).  Words already given to pheap_tx_write cannot be
 * added: then the call is tried now and then, to see it refused with the
 * transaction intact, and the words are written instead. */
static int set_words(worker *w, unsigned idx, unsigned n, const uint64_t *v, int undo)
{
    int written = 0;
    for (unsigned k = 0; k < n; k++)
        written |= w->redo_w[idx + k];
    if (undo && written) {
        if (rnd(w, 4) == 0) {
            int rc = pheap_tx_add(w->h, &w->p->w[idx], n * 8);
            if (rc != PHEAP_EINVAL || pheap_tx_depth(w->h) <= 0)
                return WFAIL(w, "pheap_tx_add over written words -> %d, depth %d", rc,
                             pheap_tx_depth(w->h));
            w->c.refused++;
        }
        undo = 0;
    }
    if (undo) {
        WOK(w, pheap_tx_add(w->h, &w->p->w[idx], n * 8));
        memcpy(&w->p->w[idx], v, n * 8);
        memset(&w->added_w[idx], 1, n);
    } else { /* stored in place where added, pending elsewhere */
        WOK(w, pheap_tx_write(w->h, &w->p->w[idx], v, n * 8));
        for (unsigned k = 0; k < n; k++)
            w->redo_w[idx + k] |= !w->added_w[idx + k];
    }
    return 0;
}

static int set_slot(worker *w, unsigned k, blk b, int undo)
{
    w->t.slot[k] = b;
    return set_words(w, NVALS + k, 1, &b.off, undo);
}

static int pick_undo(worker *w)
{
    return w->mode == MIXED ? (int)rnd(w, 2) : w->mode == UNDO;
}

static int find_slot(worker *w, int full)
{
    unsigned k0 = (unsigned)rnd(w, NSLOTS);
    for (unsigned i = 0; i < NSLOTS; i++) {
        unsigned k = (k0 + i) % NSLOTS;
        if ((w->t.slot[k].off != 0) == full)
            return (int)k;
    }
    return -1;
}

static int intact(worker *w, blk b)
{
    size_t usable = pheap_usable_size(w->h, b.off);
    return usable >= b.size && ph_test_intact(at(w, b.off), b.size, b.seed);
}

/* ---- operations inside a transaction ---------------------------------------- */

static int op_vals(worker *w)
{
    uint64_t v[6];
    unsigned i = (unsigned)rnd(w, NVALS), n = 1 + (unsigned)rnd(w, PH_ARRAY_N(v));
    if (i + n > NVALS)
        n = NVALS - i;
    for (unsigned k = 0; k < n; k++)
        v[k] = w->t.vals[i + k] = ph_test_rand(&w->rng);
    return set_words(w, i, n, v, pick_undo(w));
}

static int op_free(worker *w);

/* A block allocated into an empty slot, filled in place; now and then a
 * second one allocated and freed in the same transaction (neither
 * happens), and a second free of it refused. */
static int op_alloc(worker *w)
{
    int k = find_slot(w, 0);
    if (k < 0)
        return op_free(w);
    blk b = {0, (uint64_t)w->id << 56 | ++w->seeds, block_size(w)};
    if (!(b.off = pheap_tx_alloc(w->h, b.size)))
        return WFAIL(w, "pheap_tx_alloc(%llu): %s", (unsigned long long)b.size, pheap_errmsg());
    ph_test_fill(at(w, b.off), b.size, b.seed);
    w->c.allocs++;
    w->c.large_allocs += b.size > PHEAP_SMALL_MAX;
    if (rnd(w, 10) == 0) {
        uint64_t size = 8 + rnd(w, 3000);
        pheap_off x = pheap_tx_alloc(w->h, size);
        if (!x)
            return WFAIL(w, "pheap_tx_alloc(%llu): %s", (unsigned long long)size, pheap_errmsg());
        ph_test_fill(at(w, x), size, 77);
        WOK(w, pheap_tx_free(w->h, x));
        int rc = pheap_tx_free(w->h, x);
        if (rc != PHEAP_EDOUBLEFREE || pheap_tx_depth(w->h) <= 0)
            return WFAIL(w, "second pheap_tx_free of a block -> %d, depth %d", rc,
                         pheap_tx_depth(w->h));
        w->c.refused++;
    }
    return set_slot(w, (unsigned)k, b, pick_undo(w));
}

static int op_free(worker *w)
{
    int k = find_slot(w, 1);
    if (k < 0)
        return 0;
    blk b = w->t.slot[k];
    WOK(w, pheap_tx_free(w->h, b.off));
    w->c.frees++;
    return set_slot(w, (unsigned)k, (blk){0, 0, 0}, pick_undo(w));
}

/* A slot's block leaves the partition; posted to another thread when the
 * transaction commits. */
static int op_send(worker *w)
{
    int k = find_slot(w, 1);
    if (k < 0 || w->nout == MAXLIST)
        return 0;
    w->out[w->nout] = w->t.slot[k];
    w->out_to[w->nout++] = (w->id + 1 + (unsigned)rnd(w, NT - 1)) % NT;
    return set_slot(w, (unsigned)k, (blk){0, 0, 0}, pick_undo(w));
}

/* Blocks from the mailbox: checked, then freed or adopted into a slot
 * (undo-only transactions only adopt). */
static int op_recv(worker *w)
{
    for (unsigned n = 1 + (unsigned)rnd(w, 4); n > 0 && w->nin < MAXLIST; n--) {
        int k = find_slot(w, 0);
        if (w->mode == UNDO && k < 0)
            return 0;
        blk b;
        if (!mail_pop(w->id, &b))
            return 0;
        w->in[w->nin++] = b;
        if (!intact(w, b))
            return WFAIL(w, "received block %llu (seed %llx, %llu bytes) is not intact",
                         (unsigned long long)b.off, (unsigned long long)b.seed,
                         (unsigned long long)b.size);
        if (w->mode != UNDO && (k < 0 || rnd(w, 2))) {
            WOK(w, pheap_tx_free(w->h, b.off));
            w->c.cross_frees++;
        } else {
            if (set_slot(w, (unsigned)k, b, pick_undo(w)))
                return -1;
            w->c.adopts++;
        }
    }
    return 0;
}

/* New contents for a slot's block: snapshot and fill in place, or the
 * whole block through pheap_tx_write. */
static int op_rewrite(worker *w)
{
    int k = find_slot(w, 1);
    if (k < 0)
        return 0;
    blk *b = &w->t.slot[k];
    b->seed = (uint64_t)w->id << 56 | ++w->seeds;
    uint8_t *p = at(w, b->off);
    if (pick_undo(w) && !listed(w->redo_blocks, w->nredo_blocks, b->off)) {
        WOK(w, pheap_tx_add(w->h, p, b->size));
        ph_test_fill(p, b->size, b->seed);
    } else {
        if (w->nredo_blocks == MAXLIST)
            return 0;
        ph_test_fill(w->scratch, b->size, b->seed);
        WOK(w, pheap_tx_write(w->h, p, w->scratch, b->size));
        w->redo_blocks[w->nredo_blocks++] = b->off;
    }
    return 0;
}

static int op_swap(worker *w)
{
    unsigned a = (unsigned)rnd(w, NSLOTS), b = (unsigned)rnd(w, NSLOTS);
    if (a == b)
        return 0;
    blk x = w->t.slot[a], y = w->t.slot[b];
    if (set_slot(w, a, y, pick_undo(w)) || set_slot(w, b, x, pick_undo(w)))
        return -1;
    return 0;
}

static void touch_big(worker *w)
{
    if (!w->big_touched) {
        memcpy(w->tbig, w->mbig, BIG);
        w->big_touched = 1;
    }
}

static int big_written(worker *w, uint64_t off, uint64_t len)
{
    for (unsigned i = 0; i < w->nbig_redo; i++)
        if (off < w->big_redo[i][0] + w->big_redo[i][1] && w->big_redo[i][0] < off + len)
            return 1;
    return 0;
}

/* A range of the big block changed: `len` bytes (up to all 64 KiB, far
 * more than the lane's log holds) snapshotted and filled in place, or
 * handed to pheap_tx_write. */
static int op_big(worker *w, uint64_t len)
{
    uint64_t off = rnd(w, BIG - len + 1), seed = (uint64_t)w->id << 56 | ++w->seeds;
    touch_big(w);
    ph_test_fill(w->tbig + off, len, seed);
    if (pick_undo(w) && !big_written(w, off, len)) {
        WOK(w, pheap_tx_add(w->h, w->bigp + off, len));
        ph_test_fill(w->bigp + off, len, seed);
        w->c.big_adds += len >= 8192;
    } else {
        if (w->nbig_redo == MAXLIST)
            return 0;
        ph_test_fill(w->scratch, len, seed);
        WOK(w, pheap_tx_write(w->h, w->bigp + off, w->scratch, len));
        w->big_redo[w->nbig_redo][0] = off;
        w->big_redo[w->nbig_redo++][1] = len;
        w->c.big_writes += len >= 8192;
    }
    return 0;
}

/* pheap_tx_read sees the transaction's state: pending writes applied. */
static int op_read(worker *w)
{
    uint64_t v[NWORDS];
    WOK(w, pheap_tx_read(w->h, v, w->p->w, sizeof(v)));
    for (unsigned i = 0; i < NWORDS; i++)
        if (v[i] != model_word(&w->t, i))
            return WFAIL(w, "pheap_tx_read: word %u is %llx, the transaction wrote %llx", i,
                         (unsigned long long)v[i], (unsigned long long)model_word(&w->t, i));
    uint64_t len = 1 + rnd(w, 4096), off = rnd(w, BIG - len + 1);
    WOK(w, pheap_tx_read(w->h, w->scratch, w->bigp + off, len));
    if (memcmp(w->scratch, (w->big_touched ? w->tbig : w->mbig) + off, len))
        return WFAIL(w, "pheap_tx_read of the big block [%llu, +%llu) differs from the "
                     "transaction's view", (unsigned long long)off, (unsigned long long)len);
    return 0;
}

static int run_op(worker *w)
{
    uint64_t r = rnd(w, 100);
    int undo = w->mode == UNDO;
    if (r < 25)
        return op_vals(w);
    if (r < 37)
        return undo ? op_vals(w) : op_alloc(w);
    if (r < 45)
        return undo ? op_swap(w) : op_free(w);
    if (r < 53)
        return op_send(w);
    if (r < 63)
        return op_recv(w);
    if (r < 71)
        return op_rewrite(w);
    if (r < 77)
        return op_swap(w);
    if (r < 87)
        return op_big(w, 1 + rnd(w, 512));
    if (r < 89)
        return op_big(w, 8192 + rnd(w, BIG - 8192 + 1)); /* overflows the lane's log */
    return op_read(w);
}

/* ---- transactions ------------------------------------------------------------ */

static int check_partition(worker *w, const char *when, int contents)
{
    for (unsigned i = 0; i < NWORDS; i++)
        if (w->p->w[i] != model_word(&w->m, i))
            return WFAIL(w, "%s: word %u is %llx, want %llx", when, i,
                         (unsigned long long)w->p->w[i],
                         (unsigned long long)model_word(&w->m, i));
    if (contents) {
        if (memcmp(w->bigp, w->mbig, BIG))
            return WFAIL(w, "%s: the big block differs", when);
        for (unsigned k = 0; k < NSLOTS; k++)
            if (w->m.slot[k].off && !intact(w, w->m.slot[k]))
                return WFAIL(w, "%s: slot %u: block %llu is not intact", when, k,
                             (unsigned long long)w->m.slot[k].off);
    }
    return 0;
}

static void tx_start(worker *w)
{
    w->t = w->m;
    w->big_touched = w->aborted = 0;
    memset(w->redo_w, 0, sizeof(w->redo_w));
    memset(w->added_w, 0, sizeof(w->added_w));
    w->nredo_blocks = w->nbig_redo = w->nin = w->nout = 0;
}

/* After a rollback: the partition is the committed model again, and what
 * the transaction took from the mailbox goes back (or, at a thread's exit,
 * to the stash the main thread posts back). */
static int tx_rolled_back(worker *w, int stash)
{
    for (unsigned i = 0; i < w->nin; i++) {
        if (stash)
            w->stash[w->nstash++] = w->in[i];
        else
            mail_push(w->id, w->in[i]);
    }
    w->nin = 0;
    return stash ? 0 : check_partition(w, "after an abort", 1);
}

/* Every call on an aborted transaction refuses; depth stays -depth. */
static int check_aborted(worker *w, int depth)
{
    uint64_t v = 1;
    if (pheap_tx_depth(w->h) != -depth)
        return WFAIL(w, "aborted at depth %d: pheap_tx_depth %d", depth, pheap_tx_depth(w->h));
    if (pheap_tx_add(w->h, w->p->w, 8) != PHEAP_EABORTED ||
        pheap_tx_write(w->h, w->p->w, &v, 8) != PHEAP_EABORTED ||
        pheap_tx_read(w->h, &v, w->p->w, 8) != PHEAP_EABORTED ||
        pheap_tx_begin(w->h) != PHEAP_EABORTED || pheap_tx_alloc(w->h, 64) != 0 ||
        pheap_errno() != PHEAP_EABORTED || pheap_tx_depth(w->h) != -depth)
        return WFAIL(w, "a call on an aborted transaction did not refuse with PHEAP_EABORTED");
    return 0;
}

/* One transaction; with `leave_open`, the thread's last: left open. */
static int run_tx(worker *w, int leave_open)
{
    uint64_t r = rnd(w, 100);
    w->mode = r < 25 ? REDO : r < 45 ? UNDO : MIXED;
    int nested = rnd(w, 4) == 0, inner_abort = nested && rnd(w, 5) == 0;
    int outer_abort = !leave_open && rnd(w, 10) == 0;
    unsigned nops = rnd(w, 40) ? 1 + (unsigned)rnd(w, 6) : 20 + (unsigned)rnd(w, 60);
    if (w->mode == REDO)
        w->c.redo_only++;
    else if (w->mode == UNDO)
        w->c.undo_only++;
    else
        w->c.mixed++;
    w->c.nested += nested;
    tx_start(w);
    WOK(w, pheap_tx_begin(w->h));
    int depth = 1;
    for (unsigned i = 0; i < nops && !w->aborted; i++) {
        if (nested && depth < 4 && rnd(w, 3) == 0) {
            WOK(w, pheap_tx_begin(w->h));
            depth++;
        }
        if (pheap_tx_depth(w->h) != depth)
            return WFAIL(w, "pheap_tx_depth %d, want %d", pheap_tx_depth(w->h), depth);
        if (run_op(w))
            return -1;
        if (depth > 1 && rnd(w, 3) == 0) {
            if (inner_abort) {
                WOK(w, pheap_tx_abort(w->h)); /* rolls everything back */
                depth--;
                w->aborted = 1;
                w->c.aborts++;
                w->c.inner_aborts++;
                if (check_aborted(w, depth))
                    return -1;
            } else {
                WOK(w, pheap_tx_commit(w->h)); /* only closes the level */
                depth--;
            }
        }
    }
    if (leave_open) {
        if (!w->aborted)
            w->c.aborts++; /* the thread record's destructor rolls it back */
        w->c.open_exits++;
        return tx_rolled_back(w, 1);
    }
    if (w->aborted) { /* close the levels left: commit says so, abort closes */
        while (depth > 0) {
            int rc = rnd(w, 2) ? pheap_tx_commit(w->h) : pheap_tx_abort(w->h);
            if (rc != PHEAP_EABORTED && rc != 0)
                return WFAIL(w, "closing a level of an aborted transaction -> %d", rc);
            depth--;
        }
        if (pheap_tx_depth(w->h) != 0)
            return WFAIL(w, "aborted transaction closed: depth %d", pheap_tx_depth(w->h));
        return tx_rolled_back(w, 0);
    }
    while (depth > 1) {
        WOK(w, pheap_tx_commit(w->h));
        depth--;
    }
    if (outer_abort) {
        WOK(w, pheap_tx_abort(w->h));
        w->c.aborts++;
        w->c.outer_aborts++;
        if (pheap_tx_depth(w->h) != 0)
            return WFAIL(w, "after the outer abort: depth %d", pheap_tx_depth(w->h));
        return tx_rolled_back(w, 0);
    }
    WOK(w, pheap_tx_commit(w->h));
    if (pheap_tx_depth(w->h) != 0)
        return WFAIL(w, "after the commit: depth %d", pheap_tx_depth(w->h));
    w->c.commits++;
    w->m = w->t;
    if (w->big_touched)
        memcpy(w->mbig, w->tbig, BIG);
    for (unsigned i = 0; i < w->nout; i++)
        mail_push(w->out_to[i], w->out[i]);
    w->c.sends += w->nout;
    return 0;
}

/* A helper thread that runs one transaction on its worker's partition
 * (while the worker waits for it) and exits with it open. */
static void *exit_open(void *arg)
{
    run_tx(arg, 1);
    return NULL;
}

static void *work(void *arg)
{
    worker *w = arg;
    for (unsigned i = 0; i < w->txs; i++) {
        if (run_tx(w, 0))
            break;
        if (i % 64 == 63 && check_partition(w, "after a commit", 1))
            break;
        if (i % 200 == 100) {
            pthread_t c;
            if (pthread_create(&c, NULL, exit_open, w)) {
                WFAIL(w, "pthread_create failed");
                break;
            }
            pthread_join(c, NULL);
            for (unsigned k = 0; k < w->nstash; k++)
                mail_push(w->id, w->stash[k]);
            w->nstash = 0;
            if (w->failures ||
                check_partition(w, "after a thread exited inside a transaction", 1))
                break;
        }
    }
    /* Half the threads exit inside a transaction. */
    if (!w->failures && (w->id + w->round) % 2 == 0)
        run_tx(w, 1);
    if (pheap_tx_depth(w->h) > 0 && !((w->id + w->round) % 2 == 0))
        WFAIL(w, "a transaction is open at the end");
    return NULL;
}

/* ---- the main thread ---------------------------------------------------------- */

static int by_start(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Everything against the models; the number of reachable blocks. */
static uint64_t verify(pheap *h, pheap_off parts_off, worker **ws, const char *when)
{
    static uint64_t spans[1 + 2 * NT + NT * NSLOTS + 65536][2];
    unsigned n = 0;
    const pheap_off *parts = pheap_direct(h, parts_off);
    spans[n][0] = parts_off;
    spans[n++][1] = parts_off + pheap_usable_size(h, parts_off);
    for (unsigned i = 0; i < NT; i++) {
        worker *w = ws[i];
        w->h = h;
        w->p = pheap_direct(h, parts[i]);
        w->bigp = pheap_direct(h, w->p->big);
        if (check_partition(w, when, 1))
            break;
        spans[n][0] = parts[i];
        spans[n++][1] = parts[i] + pheap_usable_size(h, parts[i]);
        spans[n][0] = w->p->big;
        spans[n++][1] = w->p->big + pheap_usable_size(h, w->p->big);
        for (unsigned k = 0; k < NSLOTS; k++) {
            blk b = w->m.slot[k];
            if (b.off) {
                spans[n][0] = b.off;
                spans[n++][1] = b.off + pheap_usable_size(h, b.off);
            }
        }
    }
    for (unsigned i = 0; i < NT; i++) {
        for (size_t k = 0; k < mail[i].n; k++) {
            blk b = mail[i].v[k];
            if (!ws[i]->failures && !intact(ws[i], b))
                WFAIL(ws[i], "%s: block %llu in the mailbox is not intact", when,
                      (unsigned long long)b.off);
            if (n == PH_ARRAY_N(spans)) {
                ph_test_fail(__FILE__, __LINE__, "too many blocks in transit");
                return 0;
            }
            spans[n][0] = b.off;
            spans[n++][1] = b.off + pheap_usable_size(h, b.off);
        }
    }
    qsort(spans, n, sizeof(spans[0]), by_start);
    for (unsigned k = 1; k < n; k++)
        if (spans[k - 1][1] > spans[k][0])
            ph_test_fail(__FILE__, __LINE__, "%s: blocks %llu and %llu overlap", when,
                         (unsigned long long)spans[k - 1][0], (unsigned long long)spans[k][0]);
    pheap_check_report rep;
    if (pheap_check(h, &rep))
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check: %s", when, rep.first_error);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != n || rep.live_blocks != n)
        ph_test_fail(__FILE__, __LINE__, "%s: %llu live blocks (check: %llu), %u reachable",
                     when, (unsigned long long)st.live_blocks,
                     (unsigned long long)rep.live_blocks, n);
    return n;
}

TEST(transactions_of_eight_threads)
{
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    unsigned txs = getenv("PHEAP_TX_THREADS_TXS") ? (unsigned)atoi(getenv("PHEAP_TX_THREADS_TXS"))
                                                  : TXS;
    printf("tx_threads: seed %llu (PHEAP_TEST_SEED=%llu seeds each thread's choices)\n",
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);

    const char *path = ph_test_path("tx-threads.heap");
    unlink(path);
    pheap *h;
    /* Small at first: the heap grows while transactions run. */
    pheap_options o = {.size = 1u << 20, .max_size = 512u << 20,
                       .flags = PHEAP_CREATE | PHEAP_EXCL};
    REQUIRE_OK(pheap_open(path, &o, &h));
    pheap_off parts_off = pheap_alloc(h, NT * sizeof(pheap_off));
    REQUIRE(parts_off);
    pheap_off *parts = pheap_direct(h, parts_off);
    static worker *ws[NT];
    for (unsigned i = 0; i < NT; i++) {
        pthread_mutex_init(&mail[i].mu, NULL);
        mail[i].n = 0;
        REQUIRE((ws[i] = calloc(1, sizeof(worker))) != NULL);
        REQUIRE((ws[i]->scratch = malloc(SCRATCH)) != NULL);
        ws[i]->id = i;
        REQUIRE((parts[i] = pheap_alloc(h, sizeof(part))) != 0);
        part *p = pheap_direct(h, parts[i]);
        memset(p, 0, sizeof(*p));
        REQUIRE((p->big = pheap_alloc(h, BIG)) != 0);
        memset(pheap_direct(h, p->big), 0, BIG);
        pheap_persist(h, pheap_direct(h, p->big), BIG);
        pheap_persist(h, p, sizeof(*p));
    }
    pheap_persist(h, parts, NT * sizeof(pheap_off));
    REQUIRE_OK(pheap_root_set(h, "tx_threads.parts", parts_off));
    struct pheap_stats st;
    pheap_stats(h, &st);
    REQUIRE_EQ(st.tx_commits + st.tx_aborts, 0);

    counts total = {0};
    for (unsigned round = 0; round < ROUNDS; round++) {
        pthread_t t[NT];
        for (unsigned i = 0; i < NT; i++) {
            worker *w = ws[i];
            w->h = h;
            w->round = round;
            w->txs = txs;
            w->rng = seed * 0x100000001b3ull + round * 1000 + i;
            w->p = pheap_direct(h, parts[i]);
            w->bigp = pheap_direct(h, w->p->big);
            w->c = (counts){0};
            REQUIRE(pthread_create(&t[i], NULL, work, w) == 0);
        }
        uint64_t commits = 0, aborts = 0;
        unsigned failures = 0;
        for (unsigned i = 0; i < NT; i++) {
            pthread_join(t[i], NULL);
            worker *w = ws[i];
            commits += w->c.commits;
            aborts += w->c.aborts;
            failures += w->failures;
            for (unsigned k = 0; k < w->nstash; k++)
                mail_push(i, w->stash[k]);
            w->nstash = 0;
            uint64_t *a = (uint64_t *)&total, *b = (uint64_t *)&w->c;
            for (size_t k = 0; k < sizeof(counts) / 8; k++)
                a[k] += b[k];
        }
        if (failures) {
            ph_test_fail(__FILE__, __LINE__, "round %u: %u failures in the threads (seed %llu)",
                         round, failures, (unsigned long long)seed);
            pheap_close(h);
            return;
        }
        pheap_stats(h, &st);
        CHECK_EQ(st.tx_commits, commits);
        CHECK_EQ(st.tx_aborts, aborts);
        uint64_t reach = verify(h, parts_off, ws, "after the threads");
        REQUIRE(!ph_test_failed);

        REQUIRE_OK(pheap_close(h));
        o.flags = 0;
        REQUIRE_OK(pheap_open(path, &o, &h));
        pheap_stats(h, &st);
        CHECK(!st.was_unclean);
        CHECK_EQ(st.tx_rolled_back + st.tx_rolled_forward, 0);
        CHECK_EQ(st.tx_commits + st.tx_aborts, 0);
        CHECK_EQ(pheap_root_get(h, "tx_threads.parts"), parts_off);
        parts = pheap_direct(h, parts_off);
        CHECK_EQ(verify(h, parts_off, ws, "after reopening"), reach);
        for (unsigned i = 0; i < NT; i++)
            if (ws[i]->failures)
                ph_test_fail(__FILE__, __LINE__, "round %u: thread %u: checks failed after "
                             "reopening", round, i);
        REQUIRE(!ph_test_failed);
        size_t transit = 0;
        for (unsigned i = 0; i < NT; i++)
            transit += mail[i].n;
        printf("tx_threads: round %u: %llu commits, %llu aborts, %llu blocks reachable "
               "(%zu in transit), data region %llu KiB\n", round, (unsigned long long)commits,
               (unsigned long long)aborts, (unsigned long long)reach, transit,
               (unsigned long long)st.data_size >> 10);
    }
    printf("tx_threads: %llu commits, %llu aborts (%llu outer, %llu inner, %llu at a thread's "
           "exit); %llu redo-only, %llu undo-only, %llu mixed, %llu nested; %llu allocations "
           "(%llu large), %llu own frees, %llu frees of another thread's blocks, %llu blocks "
           "posted, %llu adopted; %llu snapshots and %llu writes of 8-64 KiB; %llu bad calls "
           "refused\n",
           (unsigned long long)total.commits, (unsigned long long)total.aborts,
           (unsigned long long)total.outer_aborts, (unsigned long long)total.inner_aborts,
           (unsigned long long)total.open_exits, (unsigned long long)total.redo_only,
           (unsigned long long)total.undo_only, (unsigned long long)total.mixed,
           (unsigned long long)total.nested, (unsigned long long)total.allocs,
           (unsigned long long)total.large_allocs, (unsigned long long)total.frees,
           (unsigned long long)total.cross_frees, (unsigned long long)total.sends,
           (unsigned long long)total.adopts, (unsigned long long)total.big_adds,
           (unsigned long long)total.big_writes, (unsigned long long)total.refused);
    CHECK(total.cross_frees > 0 && total.large_allocs > 0 && total.big_adds > 0 &&
          total.inner_aborts > 0 && total.open_exits > 0);
    REQUIRE_OK(pheap_close(h));
    for (unsigned i = 0; i < NT; i++) {
        free(ws[i]->scratch);
        free(ws[i]);
        free(mail[i].v);
        mail[i].v = NULL;
        mail[i].cap = 0;
    }
}

/* Records without payload (ALLOC, FREE) need log room as much as any: a
 * transaction of thousands of allocations and then of frees runs through
 * the lane's log and two overflow segments, and nothing past their ends
 * (the next lane's anchor, the blocks after a segment) may be written. */
TEST(transactions_of_thousands_of_allocations)
{
    enum { N = 3000 };
    pheap *h = ph_test_create(ph_test_path("tx-many.heap"), 8u << 20);
    REQUIRE(h);
    static pheap_off b[N];
    struct pheap_stats st;
    for (int pass = 0; pass < 3; pass++) { /* allocate and abort; allocate; free */
        REQUIRE_OK(pheap_tx_begin(h));
        for (unsigned i = 0; i < N; i++) {
            if (pass < 2) {
                REQUIRE((b[i] = pheap_tx_alloc(h, 48)) != 0);
                ph_test_fill(pheap_direct(h, b[i]), 48, 1000 * pass + i);
            } else {
                REQUIRE_OK(pheap_tx_free(h, b[i]));
            }
        }
        if (pass == 0)
            REQUIRE_OK(pheap_tx_abort(h));
        else
            REQUIRE_OK(pheap_tx_commit(h));
        pheap_check_report rep;
        if (pheap_check(h, &rep))
            ph_test_fail(__FILE__, __LINE__, "pass %d: pheap_check: %s", pass, rep.first_error);
        pheap_stats(h, &st);
        CHECK_EQ(st.live_blocks, pass == 1 ? N : 0);
        for (unsigned i = 0; pass == 1 && i < N; i++)
            if (!ph_test_intact(pheap_direct(h, b[i]), 48, 1000 + i)) {
                ph_test_fail(__FILE__, __LINE__, "block %u lost its contents", i);
                break;
            }
    }
    CHECK_EQ(st.tx_commits, 2);
    CHECK_EQ(st.tx_aborts, 1);
    REQUIRE_OK(pheap_close(h));
}
