/*
 * tx_kill_common.h -- the kill -9 test of transactions, shared by
 * tx_kill.c (a few dozen rounds, make test) and tx_kill_torture.c (many
 * rounds, make torture).
 *
 * A structure changed only through transactions: NACC accounts in one
 * 32 KiB block whose total never changes (transfers between random
 * accounts, and now and then a rotation of up to all of them: a snapshot
 * or a write far bigger than the lane's log), a linked list whose nodes
 * are allocated and freed in the same transactions (pushed at the head,
 * removed anywhere), and in a rooted state block the list's length, the
 * sum of its node ids, the next id and a sequence number that every
 * committed transaction raises by one.  Each word is changed by snapshot
 * and store (pheap_tx_add) or by pheap_tx_write, at random; some
 * transactions nest, some abort (at the outer or at an inner level).
 *
 * A child process opens the heap and runs transactions on it, keeping in
 * DRAM the state its committed transactions made.  Before each outermost
 * commit it sends the parent, through a pipe, the sequence and a hash of
 * the state the transaction makes; after pheap_tx_commit returns, the
 * same as committed.  The parent kills the child at a random moment with
 * SIGKILL, reopens the heap (recovery) and reads the whole state: it must
 * be exactly the last committed one, or exactly the one the transaction
 * in flight was committing (its sequence one more) -- never a mix; the
 * total is the same, the list as long as its counter says, every node
 * live and intact, live blocks = the nodes + 2, pheap_check clean, and
 * recovery handled at most one transaction (a roll-forward only when the
 * state is the in-flight one's).  The next round's child continues on
 * the same heap.  With several child threads, each runs its own structure
 * (its own lane), and recovery may handle one transaction per thread.
 */
#ifndef PH_TEST_TX_KILL_COMMON_H
#define PH_TEST_TX_KILL_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "pipe_records.h"

enum {
    NACC = 4096,        /* accounts: a 32 KiB block */
    START = 1000,       /* each account's first balance */
    MAXN = 160,         /* list nodes at most */
    NODE_HDR = 32,      /* next, id, size, seed of a node; its payload follows */
    MAXT = 4,           /* child threads, each with a structure of its own */
};

typedef struct kstate {  /* the root "tx_kill.N": structure N */
    uint64_t seq, count, next_id, idsum;
    pheap_off head, accounts;
} kstate;

enum { W_SEQ, W_COUNT, W_NEXT_ID, W_IDSUM, W_HEAD, W_WORDS };

typedef struct knode {
    pheap_off next;
    uint64_t id, size, seed;
} knode;

typedef struct mnode {
    pheap_off off;
    uint64_t id, size;
} mnode;

/* The whole state, as a transaction should leave it. */
typedef struct kmodel {
    uint64_t seq, count, next_id, idsum;
    mnode list[MAXN];
    uint64_t acc[NACC];
} kmodel;

static const char *txk_path;

static uint64_t node_seed(uint64_t id)
{
    return id * 0x9e3779b97f4a7c15ull ^ 0x7478;
}

static uint64_t hmix(uint64_t h, uint64_t w)
{
    h = (h ^ w) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t model_hash(const kmodel *m)
{
    uint64_t h = hmix(hmix(hmix(hmix(0xcbf29ce484222325ull, m->seq), m->count), m->next_id),
                      m->idsum);
    for (uint64_t i = 0; i < m->count && i < MAXN; i++)
        h = hmix(hmix(hmix(h, m->list[i].off), m->list[i].id), m->list[i].size);
    for (unsigned i = 0; i < NACC; i++)
        h = hmix(h, m->acc[i]);
    return h;
}

static kstate *state_of(pheap *h, unsigned i)
{
    char name[32];
    snprintf(name, sizeof(name), "tx_kill.%u", i);
    return pheap_direct(h, pheap_root_get(h, name));
}

/* Reads structure `which` of the heap into *m, checking its shape: the list as
 * long as the counter (no cycle), every node live, as big as it says and
 * intact, ids summing up, the total unchanged.  0, or -1 with the reason
 * in err. */
static int heap_read(pheap *h, unsigned which, kmodel *m, char *err, size_t errlen)
{
    const kstate *s = state_of(h, which);
    if (!s)
        return snprintf(err, errlen, "structure %u: no state root", which), -1;
    const uint64_t *acc = pheap_direct(h, s->accounts);
    if (!acc || pheap_usable_size(h, s->accounts) < NACC * 8)
        return snprintf(err, errlen, "the accounts block %llu is not live",
                        (unsigned long long)s->accounts), -1;
    m->seq = s->seq;
    m->count = s->count;
    m->next_id = s->next_id;
    m->idsum = s->idsum;
    memcpy(m->acc, acc, sizeof(m->acc));
    uint64_t total = 0;
    for (unsigned i = 0; i < NACC; i++)
        total += acc[i];
    if (total != (uint64_t)NACC * START)
        return snprintf(err, errlen, "the accounts total %llu, not %llu",
                        (unsigned long long)total, (unsigned long long)NACC * START), -1;
    if (m->count > MAXN)
        return snprintf(err, errlen, "the list counter says %llu nodes",
                        (unsigned long long)m->count), -1;
    uint64_t n = 0, idsum = 0;
    for (pheap_off off = s->head; off; n++) {
        if (n == m->count)
            return snprintf(err, errlen, "the list is longer than its counter (%llu)",
                            (unsigned long long)m->count), -1;
        const knode *k = pheap_direct(h, off);
        size_t usable = pheap_usable_size(h, off);
        if (!k || usable == 0)
            return snprintf(err, errlen, "list node %llu (%llu): %llu is not live: %s",
                            (unsigned long long)n, (unsigned long long)m->count,
                            (unsigned long long)off, pheap_errmsg()), -1;
        if (k->size < NODE_HDR || usable < k->size || k->seed != node_seed(k->id) ||
            !ph_test_intact(k + 1, k->size - NODE_HDR, k->seed))
            return snprintf(err, errlen, "list node %llu at %llu (id %llu, %llu bytes) is not "
                            "intact", (unsigned long long)n, (unsigned long long)off,
                            (unsigned long long)k->id, (unsigned long long)k->size), -1;
        m->list[n] = (mnode){off, k->id, k->size};
        idsum += k->id;
        off = k->next;
    }
    if (n != m->count)
        return snprintf(err, errlen, "the list has %llu nodes, its counter says %llu",
                        (unsigned long long)n, (unsigned long long)m->count), -1;
    if (idsum != m->idsum)
        return snprintf(err, errlen, "the node ids sum to %llu, the state says %llu",
                        (unsigned long long)idsum, (unsigned long long)m->idsum), -1;
    return 0;
}

static unsigned txk_flush(void)
{
    /* A kill -9 loses no store that reached the page cache: "none" is
     * enough; PHEAP_FLUSH in the environment picks another back end. */
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

/* ---- the child ---------------------------------------------------------------- */

/* A record on the pipe; one write(2) each. */
enum { TREC_READY = 1, TREC_PREPARE, TREC_DONE, TREC_ERROR };
typedef struct trec {
    uint32_t kind;
    uint32_t tid;    /* the child thread, and its structure */
    uint32_t line;   /* TREC_ERROR: source line */
    uint32_t pad;
    int64_t code;    /* TREC_ERROR: the library's code */
    uint64_t seq, hash;
} trec;

typedef struct tchild {
    pheap *h;
    int fd;
    unsigned tid;
    uint64_t rng;
    kstate *s;
    uint64_t *acc;
    kmodel c, w;                 /* committed; the transaction's */
    kmodel read;                 /* the heap as read back */
    uint64_t tmp[NACC];
    int mode;                    /* 0 redo only, 1 undo only, 2 mixed */
    uint8_t acc_w[NACC];         /* accounts given to pheap_tx_write in this tx */
    uint8_t st_w[W_WORDS];       /* state words given to it */
    pheap_off next_w[2 * MAXN];  /* nodes whose next word was given to it */
    unsigned nnext_w;
    uint64_t txs;
} tchild;

static void tsend(int fd, trec r)
{
    while (write(fd, &r, sizeof(r)) < 0 && errno == EINTR)
        ;
}

static void tchild_error(tchild *c, int code, int line)
{
    tsend(c->fd, (trec){.kind = TREC_ERROR, .tid = c->tid, .line = (uint32_t)line, .code = code});
    _exit(3);
}

#define TC_OK(c, call)                                                                       \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_)                                                                             \
            tchild_error((c), rc_, __LINE__);                                                \
    } while (0)

static uint64_t trnd(tchild *c, uint64_t n)
{
    return ph_test_rand(&c->rng) % n;
}

static int tundo(tchild *c)
{
    return c->mode == 2 ? (int)trnd(c, 2) : c->mode == 1;
}

/* Stores v at the heap word dst by snapshot and store, or by
 * pheap_tx_write (always when the word was written so before: a snapshot
 * would be refused). */
static void tput(tchild *c, uint64_t *dst, uint64_t v, uint8_t *written)
{
    if (tundo(c) && !*written) {
        TC_OK(c, pheap_tx_add(c->h, dst, 8));
        *dst = v;
    } else {
        TC_OK(c, pheap_tx_write(c->h, dst, &v, 8));
        *written = 1;
    }
}

static void op_transfer(tchild *c)
{
    unsigned a = (unsigned)trnd(c, NACC), b = (unsigned)trnd(c, NACC);
    uint64_t amount = trnd(c, c->w.acc[a] + 1), v;
    c->w.acc[a] -= amount;
    c->w.acc[b] += amount;
    tput(c, &c->acc[a], c->w.acc[a], &c->acc_w[a]);
    tput(c, &c->acc[b], c->w.acc[b], &c->acc_w[b]);
    if (trnd(c, 4) == 0) { /* the transaction's view, pending writes included */
        TC_OK(c, pheap_tx_read(c->h, &v, &c->acc[a], 8));
        if (v != c->w.acc[a])
            tchild_error(c, PHEAP_ECORRUPT, __LINE__);
    }
}

/* Rotates up to all the accounts: 8-32 KiB snapshotted or written. */
static void op_rotate(tchild *c)
{
    unsigned len = 1024 + (unsigned)trnd(c, NACC - 1024 + 1);
    unsigned start = (unsigned)trnd(c, NACC - len + 1), by = 1 + (unsigned)trnd(c, len - 1);
    uint64_t *tmp = c->tmp;
    for (unsigned i = 0; i < len; i++)
        tmp[i] = c->w.acc[start + (i + by) % len];
    memcpy(&c->w.acc[start], tmp, len * 8);
    int written = 0;
    for (unsigned i = 0; i < len; i++)
        written |= c->acc_w[start + i];
    if (tundo(c) && !written) {
        TC_OK(c, pheap_tx_add(c->h, &c->acc[start], len * 8));
        memcpy(&c->acc[start], tmp, len * 8);
    } else {
        TC_OK(c, pheap_tx_write(c->h, &c->acc[start], tmp, len * 8));
        memset(&c->acc_w[start], 1, len);
    }
}

static uint64_t node_size(tchild *c)
{
    if (trnd(c, 25) == 0)
        return PHEAP_SMALL_MAX + 1 + trnd(c, 60000); /* a large extent */
    return NODE_HDR + trnd(c, 2000);
}

static void op_push(tchild *c)
{
    kmodel *w = &c->w;
    if (w->count == MAXN)
        return;
    uint64_t size = node_size(c);
    pheap_off off = pheap_tx_alloc(c->h, size);
    if (!off)
        tchild_error(c, pheap_errno(), __LINE__);
    knode *k = pheap_direct(c->h, off); /* a block of this transaction: filled in place */
    uint64_t id = w->next_id++;
    *k = (knode){w->count ? w->list[0].off : 0, id, size, node_seed(id)};
    ph_test_fill(k + 1, size - NODE_HDR, k->seed);
    memmove(&w->list[1], &w->list[0], w->count * sizeof(mnode));
    w->list[0] = (mnode){off, id, size};
    w->count++;
    w->idsum += id;
}

/* Removes node i: its block freed, its predecessor (or the head) relinked. */
static void op_remove(tchild *c, uint64_t i)
{
    kmodel *w = &c->w;
    mnode n = w->list[i];
    pheap_off next = i + 1 < w->count ? w->list[i + 1].off : 0;
    TC_OK(c, pheap_tx_free(c->h, n.off));
    if (i > 0) {
        knode *prev = pheap_direct(c->h, w->list[i - 1].off);
        uint8_t written = 0;
        for (unsigned k = 0; k < c->nnext_w; k++)
            written |= c->next_w[k] == w->list[i - 1].off;
        tput(c, &prev->next, next, &written);
        if (written && c->nnext_w < PH_ARRAY_N(c->next_w))
            c->next_w[c->nnext_w++] = w->list[i - 1].off;
    }
    memmove(&w->list[i], &w->list[i + 1], (w->count - i - 1) * sizeof(mnode));
    w->count--;
    w->idsum -= n.id;
}

static void run_ops(tchild *c, unsigned n)
{
    for (unsigned k = 0; k < n; k++) {
        uint64_t r = trnd(c, 100);
        if (r < 55)
            op_transfer(c);
        else if (r < 58)
            op_rotate(c);
        else if (trnd(c, MAXN) >= c->w.count) /* the list hovers around MAXN / 2 */
            op_push(c);
        else
            op_remove(c, trnd(c, 3) ? 0 : trnd(c, c->w.count));
    }
}

/* The state words of the transaction's model (the head last changed by a
 * push or a removal at the front). */
static void put_state(tchild *c)
{
    kmodel *w = &c->w, *old = &c->c;
    uint64_t head = w->count ? w->list[0].off : 0, old_head = old->count ? old->list[0].off : 0;
    tput(c, &c->s->seq, w->seq, &c->st_w[W_SEQ]);
    if (w->count != old->count)
        tput(c, &c->s->count, w->count, &c->st_w[W_COUNT]);
    if (w->next_id != old->next_id)
        tput(c, &c->s->next_id, w->next_id, &c->st_w[W_NEXT_ID]);
    if (w->idsum != old->idsum)
        tput(c, &c->s->idsum, w->idsum, &c->st_w[W_IDSUM]);
    if (head != old_head)
        tput(c, &c->s->head, head, &c->st_w[W_HEAD]);
}

/* The heap as the child's model says (after an abort, now and then). */
static void tchild_check(tchild *c, int line)
{
    char err[256];
    if (heap_read(c->h, c->tid, &c->read, err, sizeof(err)) ||
        model_hash(&c->read) != model_hash(&c->c))
        tchild_error(c, PHEAP_ECORRUPT, line);
}

static void tchild_tx(tchild *c)
{
    uint64_t r = trnd(c, 100);
    c->mode = r < 30 ? 0 : r < 50 ? 1 : 2;
    int nested = trnd(c, 6) == 0, inner_abort = nested && trnd(c, 4) == 0;
    int outer_abort = !inner_abort && trnd(c, 12) == 0;
    c->w = c->c;
    c->w.seq++;
    memset(c->acc_w, 0, sizeof(c->acc_w));
    memset(c->st_w, 0, sizeof(c->st_w));
    c->nnext_w = 0;
    TC_OK(c, pheap_tx_begin(c->h));
    run_ops(c, 1 + (unsigned)trnd(c, 6));
    if (nested) {
        TC_OK(c, pheap_tx_begin(c->h));
        run_ops(c, 1 + (unsigned)trnd(c, 4));
        if (inner_abort) {
            TC_OK(c, pheap_tx_abort(c->h)); /* the whole transaction */
            if (pheap_tx_commit(c->h) != PHEAP_EABORTED || pheap_tx_depth(c->h) != 0)
                tchild_error(c, PHEAP_ECORRUPT, __LINE__);
            tchild_check(c, __LINE__);
            return;
        }
        TC_OK(c, pheap_tx_commit(c->h));
        run_ops(c, (unsigned)trnd(c, 3));
    }
    put_state(c);
    if (outer_abort) {
        TC_OK(c, pheap_tx_abort(c->h));
        tchild_check(c, __LINE__);
        return;
    }
    uint64_t hash = model_hash(&c->w);
    tsend(c->fd, (trec){.kind = TREC_PREPARE, .tid = c->tid, .seq = c->w.seq, .hash = hash});
    TC_OK(c, pheap_tx_commit(c->h));
    tsend(c->fd, (trec){.kind = TREC_DONE, .tid = c->tid, .seq = c->w.seq, .hash = hash});
    c->c = c->w;
    if (++c->txs % 256 == 0)
        tchild_check(c, __LINE__);
}

static void *tchild_run(void *arg)
{
    for (;;)
        tchild_tx(arg);
    return NULL;
}

static void tchild_main(int fd, uint64_t seed, unsigned nthreads)
{
    static tchild c[MAXT];
    pheap *h;
    c[0] = (tchild){.fd = fd};
    pheap_options o = {.flush = txk_flush()};
    TC_OK(&c[0], pheap_open(txk_path, &o, &h));
    for (unsigned i = 0; i < nthreads; i++) {
        c[i] = (tchild){.h = h, .fd = fd, .tid = i, .rng = seed + i * 0x51ed27};
        c[i].s = state_of(h, i);
        if (!c[i].s || !(c[i].acc = pheap_direct(h, c[i].s->accounts)))
            tchild_error(&c[i], pheap_errno(), __LINE__);
        char err[256];
        if (heap_read(h, i, &c[i].c, err, sizeof(err)))
            tchild_error(&c[i], PHEAP_ECORRUPT, __LINE__);
        tsend(fd, (trec){.kind = TREC_READY, .tid = i, .seq = c[i].c.seq,
                         .hash = model_hash(&c[i].c)});
    }
    for (unsigned i = 1; i < nthreads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, tchild_run, &c[i]))
            tchild_error(&c[i], PHEAP_ENOMEM, __LINE__);
    }
    tchild_run(&c[0]);
}

/* ---- the parent ------------------------------------------------------------------ */

typedef struct txk_params {
    unsigned rounds;
    unsigned threads;      /* child threads, each on a structure of its own */
    unsigned max_sleep_ms; /* the kill comes 1..max_sleep_ms after the fork */
    int want_forward;      /* fail unless some roll-forward was seen (long runs) */
} txk_params;

typedef struct txk_run {
    uint64_t seq, hash;              /* last committed (DONE, or the state read) */
    uint64_t pseq, phash;            /* PREPARE after it, if pseq == seq + 1 */
    int ready;
} txk_run;

static int txk_apply(const trec *r, txk_run *runs, unsigned nthreads, uint64_t *commits)
{
    if (r->tid >= nthreads)
        return ph_test_fail(__FILE__, __LINE__, "a record of thread %u", r->tid), -1;
    txk_run *run = &runs[r->tid];
    switch (r->kind) {
    case TREC_READY:
        if (r->seq != run->seq || r->hash != run->hash)
            return ph_test_fail(__FILE__, __LINE__, "the child read seq %llu, the parent left "
                                "%llu", (unsigned long long)r->seq,
                                (unsigned long long)run->seq), -1;
        run->ready = 1;
        return 0;
    case TREC_PREPARE:
        if (r->seq != run->seq + 1)
            return ph_test_fail(__FILE__, __LINE__, "prepare of seq %llu after %llu",
                                (unsigned long long)r->seq, (unsigned long long)run->seq), -1;
        run->pseq = r->seq;
        run->phash = r->hash;
        return 0;
    case TREC_DONE:
        if (r->seq != run->pseq || r->hash != run->phash)
            return ph_test_fail(__FILE__, __LINE__, "commit of seq %llu without its prepare",
                                (unsigned long long)r->seq), -1;
        run->seq = r->seq;
        run->hash = r->hash;
        (*commits)++;
        return 0;
    case TREC_ERROR:
        return ph_test_fail(__FILE__, __LINE__, "child thread %u: error %lld (%s) at "
                            "tx_kill_common.h:%u", r->tid, (long long)r->code,
                            pheap_strerror((int)r->code), r->line), -1;
    }
    return ph_test_fail(__FILE__, __LINE__, "bad record kind %u", r->kind), -1;
}

typedef struct txk_read_ctx {
    txk_run *run;
    unsigned nthreads;
    uint64_t *commits;
} txk_read_ctx;

static int txk_read_one(void *arg, const void *rec)
{
    txk_read_ctx *x = arg;
    trec r;
    memcpy(&r, rec, sizeof(r));
    return txk_apply(&r, x->run, x->nthreads, x->commits);
}

/* Reads records until `deadline` (then returns 1) or end of file (0). */
static int txk_read(int fd, double deadline, txk_run *run, unsigned nthreads, uint64_t *commits)
{
    txk_read_ctx x = {run, nthreads, commits};
    return pipe_read_records(fd, deadline, sizeof(trec), txk_read_one, &x);
}

static void txk_test(const char *name, txk_params p)
{
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    uint64_t rng = seed;
    unsigned nt = p.threads ? p.threads : 1;
    REQUIRE(nt <= MAXT);
    printf("%s: seed %llu (PHEAP_TEST_SEED=%llu replays the schedule), %u child thread%s\n",
           name, (unsigned long long)seed, (unsigned long long)seed, nt, nt > 1 ? "s" : "");
    fflush(stdout);
    txk_path = ph_test_path("tx-kill.heap");
    unlink(txk_path);
    pheap *h;
    pheap_options o = {.size = 8u << 20, .max_size = 64u << 20,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = txk_flush()};
    REQUIRE_OK(pheap_open(txk_path, &o, &h));
    static kmodel m;
    static txk_run run[MAXT];
    char err[256];
    for (unsigned t = 0; t < nt; t++) {
        pheap_off s_off = pheap_alloc(h, sizeof(kstate)), a_off = pheap_alloc(h, NACC * 8);
        REQUIRE(s_off && a_off);
        kstate *s = pheap_direct(h, s_off);
        uint64_t *acc = pheap_direct(h, a_off);
        *s = (kstate){.next_id = 1, .accounts = a_off};
        for (unsigned i = 0; i < NACC; i++)
            acc[i] = START;
        pheap_persist(h, acc, NACC * 8);
        pheap_persist(h, s, sizeof(*s));
        snprintf(err, sizeof(err), "tx_kill.%u", t);
        REQUIRE_OK(pheap_root_set(h, err, s_off));
        if (heap_read(h, t, &m, err, sizeof(err)))
            ph_test_fail(__FILE__, __LINE__, "the new heap: %s", err);
        run[t] = (txk_run){.seq = m.seq, .hash = model_hash(&m)};
    }
    REQUIRE_OK(pheap_close(h));

    uint64_t commits = 0, back = 0, forward = 0, in_flight = 0, ready = 0, max_nodes = 0;
    uint64_t min_nodes = MAXN;
    double rec_sum = 0, rec_max = 0;
    for (unsigned round = 0; round < p.rounds; round++) {
        unsigned sleep_ms = 1 + (unsigned)(ph_test_rand(&rng) % p.max_sleep_ms);
        uint64_t child_seed = ph_test_rand(&rng);
        int fds[2];
        REQUIRE(pipe(fds) == 0);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            tchild_main(fds[1], child_seed, nt);
            _exit(0);
        }
        close(fds[1]);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        for (unsigned t = 0; t < nt; t++)
            run[t].ready = 0, run[t].pseq = 0;
        int status = 0, rc = txk_read(fds[0], pipe_now() + sleep_ms / 1000.0, run, nt, &commits);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (rc >= 0)
            rc = txk_read(fds[0], 0, run, nt, &commits);
        close(fds[0]);
        REQUIRE(rc == 0);
        REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        ready += run[0].ready;

        double t0 = pipe_now();
        o.flags = 0;
        REQUIRE_OK(pheap_open(txk_path, &o, &h));
        double took = pipe_now() - t0;
        rec_sum += took;
        rec_max = took > rec_max ? took : rec_max;
        struct pheap_stats st;
        pheap_stats(h, &st);
        back += st.tx_rolled_back;
        forward += st.tx_rolled_forward;
        if (run[0].ready && !st.was_unclean)
            ph_test_fail(__FILE__, __LINE__, "round %u: the killed child had the heap open, but "
                         "the reopen found it clean", round);
        if (st.tx_rolled_back + st.tx_rolled_forward > nt)
            ph_test_fail(__FILE__, __LINE__, "round %u: recovery handled %llu transactions of "
                         "a child with %u thread%s", round,
                         (unsigned long long)(st.tx_rolled_back + st.tx_rolled_forward), nt,
                         nt > 1 ? "s" : "");
        uint64_t nodes = 0, nexts = 0;
        for (unsigned t = 0; t < nt; t++) {
            txk_run *r = &run[t];
            int pending = r->pseq == r->seq + 1;
            in_flight += pending;
            if (heap_read(h, t, &m, err, sizeof(err))) {
                ph_test_fail(__FILE__, __LINE__, "round %u, structure %u (seq %llu committed%s): "
                             "%s", round, t, (unsigned long long)r->seq,
                             pending ? ", the next in flight" : "", err);
                continue;
            }
            uint64_t hash = model_hash(&m);
            int last = m.seq == r->seq && hash == r->hash;
            int next = pending && m.seq == r->pseq && hash == r->phash;
            if (!last && !next)
                ph_test_fail(__FILE__, __LINE__, "round %u, structure %u: the heap holds seq %llu "
                             "(hash %llx), the child committed %llu (hash %llx)%s: a partial "
                             "transaction", round, t, (unsigned long long)m.seq,
                             (unsigned long long)hash, (unsigned long long)r->seq,
                             (unsigned long long)r->hash,
                             pending ? " and was committing the next" : "");
            nexts += next && !last;
            r->seq = m.seq;
            r->hash = hash;
            nodes += m.count;
            max_nodes = m.count > max_nodes ? m.count : max_nodes;
            min_nodes = m.count < min_nodes ? m.count : min_nodes;
        }
        /* A roll-forward completes a transaction in flight: its state is there. */
        if (st.tx_rolled_forward > nexts)
            ph_test_fail(__FILE__, __LINE__, "round %u: recovery rolled %llu transactions "
                         "forward, but %llu structures hold the state in flight", round,
                         (unsigned long long)st.tx_rolled_forward, (unsigned long long)nexts);
        pheap_check_report rep;
        if (pheap_check(h, &rep))
            ph_test_fail(__FILE__, __LINE__, "round %u: pheap_check: %s", round, rep.first_error);
        if (st.live_blocks != 2 * nt + nodes || rep.live_blocks != 2 * nt + nodes)
            ph_test_fail(__FILE__, __LINE__, "round %u: %llu live blocks (check: %llu), %llu "
                         "reachable", round, (unsigned long long)st.live_blocks,
                         (unsigned long long)rep.live_blocks, (unsigned long long)(2 * nt + nodes));
        REQUIRE_OK(pheap_close(h));
        REQUIRE(!ph_test_failed);
    }
    printf("%s: %u rounds, %llu transactions committed, one in flight (not reported committed) "
           "%llu times; recovery rolled back %llu, rolled forward %llu; child had opened the heap "
           "in %llu rounds; %llu to %llu list nodes; recovery (open) %.2f ms average, %.2f ms "
           "max\n", name, p.rounds, (unsigned long long)commits, (unsigned long long)in_flight,
           (unsigned long long)back, (unsigned long long)forward, (unsigned long long)ready,
           (unsigned long long)min_nodes, (unsigned long long)max_nodes, 1000 * rec_sum / p.rounds,
           1000 * rec_max);
    CHECK(back > 0);
    if (p.want_forward)
        CHECK(forward > 0);
}

#endif /* PH_TEST_TX_KILL_COMMON_H */
