/*
 * names_kill_common.h -- the kill -9 test of named objects, shared by
 * names_kill.c (a few dozen rounds, make test) and names_kill_torture.c
 * (many rounds, make torture), in LOG mode and in GC mode.
 *
 * The heap holds up to `slots` names, one per slot: slot i always has the
 * same name, short ("s123") or, for one slot in four, 100 to 239 bytes
 * long (an entry of three to five directory lines).  A named object holds
 * its generation in its first word and, after it, a pattern seeded by its
 * name and generation.  The parent fills one slot in eight; then, each
 * round, a child process with one to `max_threads` threads (each owning
 * the slots i % nthreads == id) looks names up and creates and removes
 * them, aiming at a population that changes every few rounds (full, then
 * nearly empty): segments grow, split and are compacted (removed entries
 * leave FREE lines that only a rebuild reclaims), so rebuilds run all the
 * time.  A create fills the object in its initialiser
 * (pheap_alloc_named_init) or, one time in four, after pheap_alloc_named
 * returns (then persists it; in GC mode the block is zeroed first, see
 * nk_fill).  The child reports on a pipe each create and remove before it
 * starts and after it returns, and each lookup's result, which the parent
 * checks against its model as they come.  The parent kills the child at a
 * random moment and reopens the heap.  Then:
 *   - every slot whose create returned (and whose remove did not start)
 *     is found, at the same block, with its contents; every slot whose
 *     remove returned (or that was never made) is absent; the operation
 *     in flight left its name whole or absent (an object made by an
 *     initialiser whole with its contents, a removed one's contents
 *     untouched while its name stays);
 *   - GC mode: these lookups run before pheap_recover; creating and
 *     removing are refused until it (PHEAP_ERECOVER);
 *   - iterating with pheap_name_next visits each name found exactly once
 *     and nothing else, with the block and size of its creation;
 *   - stats.names equals that count, pheap_check agrees, and
 *     live_blocks == names + name_segments (the test keeps no other block);
 *   - pheap_check is clean.
 * The in-flight operation's outcome is then taken into the model (an
 * object created without an initialiser is filled by the parent), and the
 * next round's child goes on from there.
 */
#ifndef PH_TEST_NAMES_KILL_COMMON_H
#define PH_TEST_NAMES_KILL_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "pipe_records.h"

enum { NK_MAX_SLOTS = 16384, NK_MAX_THREADS = 4, NK_NAME_BUF = 256 };

typedef struct nk_params {
    unsigned rounds;
    unsigned slots;        /* names in play, at most NK_MAX_SLOTS */
    unsigned max_threads;  /* round r runs 1 + r % max_threads child threads */
    unsigned max_sleep_ms; /* the kill comes 1..max_sleep_ms after the fork */
    unsigned consistency;  /* PHEAP_CONSISTENCY_LOG or _GC */
} nk_params;

/* A record on the pipe; one write(2) each, so records never interleave. */
enum { NREC_READY = 1, NREC_BEGIN, NREC_END, NREC_ERROR };
enum { NOP_CREATE = 1, NOP_CREATE_RAW, NOP_REMOVE, NOP_LOOKUP };
typedef struct nrec {
    uint32_t kind;  /* NREC_* */
    uint32_t slot;
    uint32_t op;    /* NOP_*; for NREC_ERROR the library's code (-1: contents lost) */
    uint32_t line;  /* NREC_ERROR: source line */
    uint64_t gen;   /* the object's generation (lookup: the one found, 0: absent) */
    uint64_t size;  /* bytes asked for */
    uint64_t off;   /* END of a create or a lookup: the block (0: absent) */
} nrec;

/* What the parent knows of a slot. */
typedef struct nslot {
    pheap_off off;  /* 0: no name */
    uint64_t gen, size;
    nrec pending;   /* begun, not ended (kind == NREC_BEGIN) */
} nslot;

static nslot nmodel[NK_MAX_SLOTS];
static pheap_off nfound[NK_MAX_SLOTS]; /* what the lookups after a kill found */
static unsigned char nvisited[NK_MAX_SLOTS];
static const char *nk_path;
static unsigned nk_slots;

static unsigned nk_flush(void)
{
    /* A kill -9 loses no stores that reached the page cache, so "none" is
     * enough; PHEAP_FLUSH in the environment picks another back end. */
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

/* The name of slot i: short, or for one slot in four 100 to 239 bytes. */
static size_t nk_name(char *buf, unsigned i)
{
    int n = snprintf(buf, NK_NAME_BUF, i % 4 == 0 ? "long-name-%u-" : "s%u", i);
    size_t len = (size_t)n;
    if (i % 4 == 0) {
        size_t want = 100 + (i * 37u) % 140;
        uint64_t x = i * 0x9e3779b97f4a7c15ull;
        for (; len < want; len++, x = x * 6364136223846793005ull + 1)
            buf[len] = (char)('a' + (x >> 59) % 26);
        buf[len] = '\0';
    }
    return len;
}

/* The pattern of slot i's object of generation gen. */
static uint64_t nk_seed(unsigned i, uint64_t gen)
{
    char name[NK_NAME_BUF];
    size_t len = nk_name(name, i);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < len; k++)
        h = (h ^ (unsigned char)name[k]) * 0x100000001b3ull;
    return h ^ gen * 0x9e3779b97f4a7c15ull;
}

/* The object: its generation, the pattern, and 0xa5 bytes up to the
 * block's end.  GC mode traces every word of a named block up to its
 * usable size conservatively (docs/GC.md): a word that equals the offset
 * of a block keeps that block.  Stale bytes past the size asked for, or
 * zeros after the pattern's last bytes (a small number), could equal the
 * offset of a garbage block and keep it; 0xa5 bytes make the last word
 * far larger than any offset. */
static void nk_fill(void *b, uint64_t size, size_t usable, unsigned i, uint64_t gen)
{
    memcpy(b, &gen, 8);
    ph_test_fill((char *)b + 8, size - 8, nk_seed(i, gen));
    memset((char *)b + size, 0xa5, usable - size);
}

/* A GC heap before pheap_recover: blocks are not known live or free yet
 * (pheap_usable_size cannot tell), but their contents can be read. */
static int nk_unrecovered;

/* 1 when off holds slot i's object of generation gen and size bytes. */
static int nk_intact(pheap *h, pheap_off off, unsigned i, uint64_t gen, uint64_t size)
{
    const char *b = pheap_direct(h, off);
    uint64_t g;
    if (!b || (!nk_unrecovered && pheap_usable_size(h, off) < size))
        return 0;
    memcpy(&g, b, 8);
    return g == gen && ph_test_intact(b + 8, size - 8, nk_seed(i, gen));
}

static uint64_t nk_size(uint64_t *rng)
{
    uint64_t r = ph_test_rand(rng) % 100;
    if (r < 75)
        return 16 + ph_test_rand(rng) % 497;
    if (r < 95)
        return 513 + ph_test_rand(rng) % 3584;
    if (r < 99)
        return 4097 + ph_test_rand(rng) % 61440;
    return 65537 + ph_test_rand(rng) % 200000;
}

/* ---- the child ---------------------------------------------------------- */

typedef struct nchild {
    pheap *h;
    int fd;              /* pipe, write end */
    unsigned id, nthreads, fill_pct;
    int gc;              /* GC mode */
    uint64_t rng, gen;
} nchild;

static void nsend(int fd, nrec r)
{
    while (write(fd, &r, sizeof(r)) < 0 && errno == EINTR)
        ;
}

static void nchild_error(int fd, unsigned slot, int rc, int line)
{
    nsend(fd, (nrec){.kind = NREC_ERROR, .slot = slot, .op = (uint32_t)rc, .line = (uint32_t)line});
    _exit(3);
}

typedef struct nk_init_arg {
    unsigned slot;
    uint64_t gen, size;
} nk_init_arg;

static int nk_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    const nk_init_arg *a = arg;
    nk_fill(block, a->size, usable, a->slot, a->gen);
    return 0;
}

static void *nchild_run(void *p)
{
    nchild *c = p;
    pheap *h = c->h;
    char name[NK_NAME_BUF];
    for (;;) {
        unsigned i = (unsigned)(ph_test_rand(&c->rng) % (nk_slots / c->nthreads)) * c->nthreads +
                     c->id;
        uint64_t r = ph_test_rand(&c->rng);
        nk_name(name, i);
        pheap_off off = pheap_lookup(h, name);
        uint64_t gen = 0, size = 0;
        if (off) {
            memcpy(&gen, pheap_direct(h, off), 8);
        } else if (pheap_errno() != PHEAP_ENOENT) {
            nchild_error(c->fd, i, pheap_errno(), __LINE__);
        }
        nsend(c->fd, (nrec){.kind = NREC_END, .slot = i, .op = NOP_LOOKUP, .gen = gen, .off = off});
        if (off) {
            if (r % 16 == 0) { /* a second create of the name: refused, nothing changes */
                if (pheap_alloc_named(h, name, 64) != 0 || pheap_errno() != PHEAP_EEXIST)
                    nchild_error(c->fd, i, pheap_errno(), __LINE__);
                continue;
            }
            if (r / 16 % c->fill_pct >= 100 - c->fill_pct) /* kept: (100-f)/f of the time removed */
                continue;
            nsend(c->fd, (nrec){.kind = NREC_BEGIN, .slot = i, .op = NOP_REMOVE, .gen = gen});
            int rc = pheap_free_named(h, name);
            if (rc)
                nchild_error(c->fd, i, rc, __LINE__);
            nsend(c->fd, (nrec){.kind = NREC_END, .slot = i, .op = NOP_REMOVE, .gen = gen});
        } else {
            if (r % 16 == 0) { /* removing a missing name: refused */
                if (pheap_free_named(h, name) != PHEAP_ENOENT)
                    nchild_error(c->fd, i, pheap_errno(), __LINE__);
                continue;
            }
            if (r / 16 % (100 - c->fill_pct) >= c->fill_pct) /* made f/(100-f) of the time */
                continue;
            int raw = r / 1600 % 4 == 0;
            gen = ++c->gen;
            size = nk_size(&c->rng);
            uint32_t op = raw ? NOP_CREATE_RAW : NOP_CREATE;
            nsend(c->fd, (nrec){.kind = NREC_BEGIN, .slot = i, .op = op, .gen = gen, .size = size});
            nk_init_arg a = {i, gen, size};
            if (raw && c->gc) /* zeroed: a kill before the fill leaves no stale word */
                off = pheap_alloc_named_init(h, name, size, PHEAP_ALLOC_ZERO, NULL, NULL);
            else if (raw)
                off = pheap_alloc_named(h, name, size);
            else
                off = pheap_alloc_named_init(h, name, size, 0, nk_init, &a);
            if (!off)
                nchild_error(c->fd, i, pheap_errno(), __LINE__);
            if (raw) {
                void *b = pheap_direct(h, off);
                size_t usable = pheap_usable_size(h, off);
                nk_fill(b, size, usable, i, gen);
                pheap_persist(h, b, usable);
            }
            nsend(c->fd, (nrec){.kind = NREC_END, .slot = i, .op = op, .gen = gen, .size = size,
                                .off = off});
        }
    }
    return NULL;
}

static void nchild_main(int fd, unsigned nthreads, unsigned fill_pct, uint64_t seed,
                        uint64_t gen_base)
{
    pheap *h;
    pheap_options o = {.flush = nk_flush()};
    int rc = pheap_open(nk_path, &o, &h);
    if (rc)
        nchild_error(fd, 0, rc, __LINE__);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.needs_recovery) /* the parent recovered and closed the heap cleanly */
        nchild_error(fd, 0, PHEAP_ERECOVER, __LINE__);
    nsend(fd, (nrec){.kind = NREC_READY});
    static nchild c[NK_MAX_THREADS];
    pthread_t t[NK_MAX_THREADS];
    for (unsigned i = 0; i < nthreads; i++) {
        c[i] = (nchild){h, fd, i, nthreads, fill_pct, st.consistency == PHEAP_CONSISTENCY_GC,
                        seed * 131 + i, gen_base + ((uint64_t)i << 28)};
        if (i && pthread_create(&t[i], NULL, nchild_run, &c[i]))
            nchild_error(fd, 0, PHEAP_ENOMEM, __LINE__);
    }
    nchild_run(&c[0]);
    _exit(0);
}

/* ---- the parent ----------------------------------------------------------- */

typedef struct nk_totals {
    uint64_t ops;          /* creates and removes the children completed */
    uint64_t lookups;      /* lookups they reported */
    uint64_t in_flight;    /* operations cut by the kill */
    uint64_t in_flight_done; /* ... of which the reopened heap showed done */
    uint64_t ready;        /* rounds in which the child had opened the heap */
    uint64_t min_names, max_names, min_segments, max_segments;
} nk_totals;

#define NFAIL(...) (ph_test_fail(__FILE__, __LINE__, __VA_ARGS__), -1)

/* Applies one record to the model; -1 on a failure. */
static int nk_apply(const nrec *r, nk_totals *tot, int *ready)
{
    if (r->kind == NREC_READY)
        return *ready = 1, 0;
    if (r->kind == NREC_ERROR)
        return NFAIL("child: slot %u: error %d (%s) at names_kill_common.h:%u", r->slot,
                     (int)r->op, pheap_strerror((int)r->op), r->line);
    if (r->slot >= nk_slots)
        return NFAIL("bad record (slot %u)", r->slot);
    nslot *s = &nmodel[r->slot];
    if (r->op == NOP_LOOKUP) {
        tot->lookups++;
        if (r->kind != NREC_END || s->pending.kind || r->off != s->off ||
            (s->off && r->gen != s->gen))
            return NFAIL("slot %u: the child's lookup found %llu (generation %llu); the model "
                         "holds %llu (generation %llu)", r->slot, (unsigned long long)r->off,
                         (unsigned long long)r->gen, (unsigned long long)s->off,
                         (unsigned long long)s->gen);
        return 0;
    }
    if (r->kind == NREC_BEGIN) {
        if (s->pending.kind || (r->op == NOP_REMOVE) != (s->off != 0) ||
            (r->op == NOP_REMOVE && r->gen != s->gen))
            return NFAIL("slot %u: op %u begins on a slot the model holds as %llu (gen %llu, "
                         "record gen %llu)", r->slot, r->op, (unsigned long long)s->off,
                         (unsigned long long)s->gen, (unsigned long long)r->gen);
        s->pending = *r;
        return 0;
    }
    if (s->pending.kind != NREC_BEGIN || s->pending.op != r->op)
        return NFAIL("slot %u: end without begin", r->slot);
    s->pending.kind = 0;
    int made = r->op != NOP_REMOVE;
    s->off = made ? r->off : 0;
    s->gen = made ? r->gen : 0;
    s->size = made ? r->size : 0;
    tot->ops++;
    return 0;
}

typedef struct nk_read_ctx {
    nk_totals *tot;
    int *ready;
} nk_read_ctx;

static int nk_read_one(void *arg, const void *rec)
{
    nk_read_ctx *x = arg;
    nrec r;
    memcpy(&r, rec, sizeof(r));
    return nk_apply(&r, x->tot, x->ready);
}

/* Reads records until `deadline` (then returns 1) or end of file (0). */
static int nk_read(int fd, double deadline, nk_totals *tot, int *ready)
{
    nk_read_ctx x = {tot, ready};
    return pipe_read_records(fd, deadline, sizeof(nrec), nk_read_one, &x);
}

/* Every slot's name against the model, by lookup; fills nfound. */
static int nk_verify_lookups(pheap *h, unsigned round, const char *when)
{
    char name[NK_NAME_BUF];
    for (unsigned i = 0; i < nk_slots; i++) {
        nslot *s = &nmodel[i];
        nk_name(name, i);
        pheap_off v = pheap_lookup(h, name);
        if (!v && pheap_errno() != PHEAP_ENOENT)
            return NFAIL("round %u, %s: lookup of slot %u: %s", round, when, i, pheap_errmsg());
        nfound[i] = v;
        const nrec *p = &s->pending;
        if (p->kind == NREC_BEGIN && p->op == NOP_REMOVE) {
            if (v && (v != s->off || !nk_intact(h, v, i, s->gen, s->size)))
                return NFAIL("round %u, %s: slot %u: remove in flight left %llu, the model "
                             "holds %llu (generation %llu)", round, when, i,
                             (unsigned long long)v, (unsigned long long)s->off,
                             (unsigned long long)s->gen);
        } else if (p->kind == NREC_BEGIN) {
            if (v && !nk_unrecovered && pheap_usable_size(h, v) < p->size)
                return NFAIL("round %u, %s: slot %u: the object of the create in flight (%llu "
                             "bytes) has %zu", round, when, i, (unsigned long long)p->size,
                             pheap_usable_size(h, v));
            if (v && p->op == NOP_CREATE && !nk_intact(h, v, i, p->gen, p->size))
                return NFAIL("round %u, %s: slot %u: named by the create in flight, but its "
                             "initialiser's contents are not there", round, when, i);
        } else if (v != s->off) {
            return NFAIL("round %u, %s: slot %u: lookup finds %llu, the child's last completed "
                         "operation left %llu (generation %llu)", round, when, i,
                         (unsigned long long)v, (unsigned long long)s->off,
                         (unsigned long long)s->gen);
        } else if (v && !nk_intact(h, v, i, s->gen, s->size)) {
            return NFAIL("round %u, %s: slot %u: object %llu (generation %llu, %llu bytes) "
                         "lost its contents", round, when, i, (unsigned long long)v,
                         (unsigned long long)s->gen, (unsigned long long)s->size);
        }
    }
    return 0;
}

/* The slot whose name is `name`, or -1. */
static long nk_slot_of(const char *name)
{
    char *end, buf[NK_NAME_BUF];
    unsigned long i;
    if (name[0] == 's')
        i = strtoul(name + 1, &end, 10);
    else if (strncmp(name, "long-name-", 10) == 0)
        i = strtoul(name + 10, &end, 10);
    else
        return -1;
    if (i >= nk_slots)
        return -1;
    nk_name(buf, (unsigned)i);
    return strcmp(buf, name) == 0 ? (long)i : -1;
}

/* Iteration, statistics and pheap_check against what the lookups found. */
static int nk_verify_all(pheap *h, unsigned round, const char *when, nk_totals *tot)
{
    if (nk_verify_lookups(h, round, when))
        return -1;
    uint64_t expect = 0;
    for (unsigned i = 0; i < nk_slots; i++)
        expect += nfound[i] != 0;
    memset(nvisited, 0, nk_slots);
    pheap_name_info info;
    uint64_t visits = 0;
    int rc;
    for (rc = pheap_name_next(h, NULL, &info); rc == 0; rc = pheap_name_next(h, info.name, &info)) {
        long i = nk_slot_of(info.name);
        if (i < 0)
            return NFAIL("round %u, %s: iteration reports '%.40s', no slot's name", round, when,
                         info.name);
        if (nvisited[i]++)
            return NFAIL("round %u, %s: iteration reports slot %ld twice", round, when, i);
        if (info.off != nfound[i] || info.len != strlen(info.name))
            return NFAIL("round %u, %s: iteration reports slot %ld at %llu, lookup finds %llu",
                         round, when, i, (unsigned long long)info.off,
                         (unsigned long long)nfound[i]);
        const nslot *s = &nmodel[i];
        uint64_t size = s->pending.kind == NREC_BEGIN && s->pending.op != NOP_REMOVE
                            ? s->pending.size : s->size;
        if (info.size != size)
            return NFAIL("round %u, %s: slot %ld: iteration reports %llu bytes, created with "
                         "%llu", round, when, i, (unsigned long long)info.size,
                         (unsigned long long)size);
        visits++;
    }
    if (rc != PHEAP_ENOENT || visits != expect)
        return NFAIL("round %u, %s: iteration ends with %d after %llu names; lookups find %llu",
                     round, when, rc, (unsigned long long)visits, (unsigned long long)expect);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.names != expect)
        return NFAIL("round %u, %s: stats.names %llu, iteration %llu", round, when,
                     (unsigned long long)st.names, (unsigned long long)expect);
    if (st.live_blocks != expect + st.name_segments)
        return NFAIL("round %u, %s: %llu live blocks; %llu names + %llu segments: leak", round,
                     when, (unsigned long long)st.live_blocks, (unsigned long long)expect,
                     (unsigned long long)st.name_segments);
    pheap_check_report rep;
    if (pheap_check(h, &rep))
        return NFAIL("round %u, %s: pheap_check: %s", round, when, rep.first_error);
    if (rep.names != expect || rep.live_blocks != st.live_blocks)
        return NFAIL("round %u, %s: pheap_check counts %llu names and %llu blocks; %llu and "
                     "%llu expected", round, when, (unsigned long long)rep.names,
                     (unsigned long long)rep.live_blocks, (unsigned long long)expect,
                     (unsigned long long)st.live_blocks);
    if (!tot->min_names || expect < tot->min_names)
        tot->min_names = expect;
    if (expect > tot->max_names)
        tot->max_names = expect;
    if (st.name_segments > tot->max_segments)
        tot->max_segments = st.name_segments;
    if (!tot->min_segments || st.name_segments < tot->min_segments)
        tot->min_segments = st.name_segments;
    return 0;
}

/* The in-flight operations' outcome into the model; an object created
 * without an initialiser is filled now.  Returns how many there were. */
static unsigned nk_settle(pheap *h, nk_totals *tot)
{
    unsigned n = 0;
    for (unsigned i = 0; i < nk_slots; i++) {
        nslot *s = &nmodel[i];
        nrec p = s->pending;
        if (p.kind != NREC_BEGIN)
            continue;
        tot->in_flight++;
        n++;
        s->pending.kind = 0;
        int done = p.op == NOP_REMOVE ? !nfound[i] : nfound[i] != 0;
        tot->in_flight_done += (uint64_t)done;
        if (p.op == NOP_REMOVE) {
            if (done)
                *s = (nslot){0};
            continue;
        }
        if (!done)
            continue;
        *s = (nslot){.off = nfound[i], .gen = p.gen, .size = p.size};
        if (p.op == NOP_CREATE_RAW) {
            void *b = pheap_direct(h, s->off);
            size_t usable = pheap_usable_size(h, s->off);
            nk_fill(b, s->size, usable, i, s->gen);
            pheap_persist(h, b, usable);
        }
    }
    return n;
}

/* The parent fills one slot in eight (objects made by an initialiser): the
 * children grow the directory from one segment to several. */
static int nk_populate(pheap *h, uint64_t *rng)
{
    char name[NK_NAME_BUF];
    for (unsigned i = 0; i < nk_slots; i += 8) {
        nk_init_arg a = {i, 1 + i, nk_size(rng)};
        nk_name(name, i);
        pheap_off off = pheap_alloc_named_init(h, name, a.size, 0, nk_init, &a);
        if (!off)
            return NFAIL("populating slot %u: %s", i, pheap_errmsg());
        nmodel[i] = (nslot){.off = off, .gen = a.gen, .size = a.size};
    }
    return 0;
}

static void nk_test(const char *name, nk_params p)
{
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    uint64_t rng = seed;
    int gc = p.consistency == PHEAP_CONSISTENCY_GC;
    printf("%s (%s mode): seed %llu (PHEAP_TEST_SEED=%llu replays the schedule)\n", name,
           gc ? "GC" : "LOG", (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    REQUIRE(p.slots <= NK_MAX_SLOTS && p.max_threads <= NK_MAX_THREADS);
    nk_slots = p.slots;
    memset(nmodel, 0, sizeof(nmodel));
    nk_path = ph_test_path(gc ? "names-kill-gc.heap" : "names-kill.heap");
    unlink(nk_path);
    pheap *h;
    pheap_options o = {.size = 32u << 20, .max_size = 512u << 20,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = nk_flush(),
                       .consistency = p.consistency};
    REQUIRE_OK(pheap_open(nk_path, &o, &h));
    nk_totals tot = {0};
    int bad = nk_populate(h, &rng) || nk_verify_all(h, 0, "after populating", &tot);
    REQUIRE_OK(pheap_close(h));
    REQUIRE(!bad);

    /* the population aimed at: full, half, nearly empty, ... */
    static const unsigned fill[] = {90, 50, 95, 10, 70, 3, 85};
    for (unsigned round = 0; round < p.rounds; round++) {
        unsigned nthreads = 1 + round % p.max_threads;
        unsigned fill_pct = fill[round / 3 % PH_ARRAY_N(fill)];
        unsigned sleep_ms = 1 + (unsigned)(ph_test_rand(&rng) % p.max_sleep_ms);
        int fds[2];
        REQUIRE(pipe(fds) == 0);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            nchild_main(fds[1], nthreads, fill_pct, ph_test_rand(&rng),
                        (uint64_t)(round + 1) << 36);
        }
        close(fds[1]);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        int ready = 0, status = 0;
        int rc = nk_read(fds[0], pipe_now() + sleep_ms / 1000.0, &tot, &ready);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (rc >= 0)
            rc = nk_read(fds[0], 0, &tot, &ready);
        close(fds[0]);
        REQUIRE(rc == 0);
        REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        tot.ready += (uint64_t)ready;

        o.flags = 0;
        o.consistency = 0;
        REQUIRE_OK(pheap_open(nk_path, &o, &h));
        struct pheap_stats st;
        pheap_stats(h, &st);
        if (ready && !st.was_unclean)
            ph_test_fail(__FILE__, __LINE__, "round %u: the killed child had the heap open, "
                         "but the reopen found it clean", round);
        bad = 0;
        if (gc) {
            if (ready && !st.needs_recovery)
                bad = NFAIL("round %u: a GC heap after a kill does not need recovery", round);
            /* lookups before recovery; changes wait for it */
            nk_unrecovered = st.needs_recovery;
            bad = bad || nk_verify_lookups(h, round, "before pheap_recover");
            nk_unrecovered = 0;
            if (!bad && st.needs_recovery) {
                char nm[NK_NAME_BUF];
                nk_name(nm, 1);
                if (pheap_alloc_named(h, nm, 16) != 0 || pheap_errno() != PHEAP_ERECOVER)
                    bad = NFAIL("round %u: a create before pheap_recover was not refused", round);
                nk_name(nm, 0);
                if (pheap_free_named(h, nm) != PHEAP_ERECOVER)
                    bad = NFAIL("round %u: a remove before pheap_recover was not refused", round);
            }
            pheap_gc_report gr;
            if (!bad && pheap_recover_ex(h, NULL, &gr) != 0)
                bad = NFAIL("round %u: pheap_recover: %s", round, pheap_errmsg());
            else if (!bad && gr.bad_refs)
                bad = NFAIL("round %u: pheap_recover found %llu names of no block", round,
                            (unsigned long long)gr.bad_refs);
        }
        if (!bad && !nk_verify_all(h, round, "after recovery", &tot)) {
            if (nk_settle(h, &tot))
                bad = nk_verify_all(h, round, "after settling the operations in flight", &tot);
        } else {
            bad = 1;
        }
        REQUIRE_OK(pheap_close(h));
        REQUIRE(!bad);
    }
    printf("%s (%s mode): %u rounds, %llu creates and removes completed, %llu lookups checked, "
           "%llu cut by the kill (%llu of them done), child had opened the heap in %llu "
           "rounds; %llu to %llu names, %llu to %llu directory segments\n",
           name, gc ? "GC" : "LOG", p.rounds, (unsigned long long)tot.ops,
           (unsigned long long)tot.lookups, (unsigned long long)tot.in_flight,
           (unsigned long long)tot.in_flight_done, (unsigned long long)tot.ready,
           (unsigned long long)tot.min_names, (unsigned long long)tot.max_names,
           (unsigned long long)tot.min_segments, (unsigned long long)tot.max_segments);
}

#endif /* PH_TEST_NAMES_KILL_COMMON_H */
