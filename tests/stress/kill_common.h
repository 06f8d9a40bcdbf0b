/*
 * kill_common.h -- the kill -9 test, shared by kill.c (a few rounds, make
 * test) and kill_torture.c (many rounds, make torture).  A child process
 * runs alloc_to/free_from on the slots of a rooted array and reports each
 * operation's start and end on a pipe; the parent kills it at a random
 * moment, reopens the heap (recovery), and checks it against what the
 * child reported: pheap_check clean, every slot a live block or 0, no two
 * slots overlapping, no leak, and every completed block intact.
 */
#ifndef PH_TEST_KILL_COMMON_H
#define PH_TEST_KILL_COMMON_H

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

enum { KILL_SLOTS = 512, KILL_MAX_THREADS = 8 };

typedef struct kill_params {
    unsigned rounds;
    unsigned max_threads;  /* round r runs 1 + r % max_threads child threads */
    unsigned max_sleep_ms; /* the kill comes 1..max_sleep_ms after the fork */
} kill_params;

/* A record on the pipe; one write(2) each, so records never interleave. */
enum { KREC_READY = 1, KREC_BEGIN, KREC_END, KREC_ERROR };
enum { KOP_ALLOC = 1, KOP_FREE };
typedef struct krec {
    uint32_t kind;  /* KREC_* */
    uint32_t slot;
    uint32_t op;    /* KOP_*; for KREC_ERROR the library's code */
    uint32_t line;  /* KREC_ERROR: source line */
    uint64_t gen;   /* pattern generation of the block */
    uint64_t size;  /* bytes asked for */
    uint64_t off;   /* KREC_END of an allocation: the block */
} krec;

/* What the parent knows of a slot. */
typedef struct kslot {
    pheap_off off;  /* 0 = empty */
    uint64_t gen, size;
    krec pending;   /* begun, not ended (kind == KREC_BEGIN) */
} kslot;

static kslot kmodel[KILL_SLOTS];
static const char *kill_path;

static unsigned kill_flush(void)
{
    /* A kill -9 loses no stores that reached the page cache, so "none" is
     * enough; PHEAP_FLUSH in the environment picks another back end. */
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

/* ---- the child ---------------------------------------------------------- */

typedef struct kchild {
    pheap *h;
    pheap_off *slots;
    int fd;              /* pipe, write end */
    unsigned id, nthreads;
    uint64_t rng, gen;
} kchild;

static void ksend(int fd, krec r)
{
    while (write(fd, &r, sizeof(r)) < 0 && errno == EINTR)
        ;
}

static void kchild_error(kchild *c, unsigned slot, int rc, int line)
{
    ksend(c->fd, (krec){.kind = KREC_ERROR, .slot = slot, .op = (uint32_t)rc, .line = (uint32_t)line});
    _exit(3);
}

static uint64_t kill_size(uint64_t *rng)
{
    uint64_t r = ph_test_rand(rng) % 100;
    if (r < 70)
        return 8 + ph_test_rand(rng) % 505;
    if (r < 95)
        return 513 + ph_test_rand(rng) % 16000;
    if (r < 99)
        return 16385 + ph_test_rand(rng) % 120000;
    return 131072 + ph_test_rand(rng) % (1u << 20);
}

static void *kchild_run(void *p)
{
    kchild *c = p;
    for (uint64_t n = 0; n < 10000000; n++) {
        unsigned i = (unsigned)(ph_test_rand(&c->rng) % (KILL_SLOTS / c->nthreads)) * c->nthreads + c->id;
        pheap_off off = c->slots[i];
        if (off) {
            const unsigned char *b = pheap_direct(c->h, off);
            uint64_t gen = 0; /* the first word of a block is its generation */
            memcpy(&gen, b, 8);
            ksend(c->fd, (krec){.kind = KREC_BEGIN, .slot = i, .op = KOP_FREE, .gen = gen});
            int rc = pheap_free_from(c->h, &c->slots[i]);
            if (rc || c->slots[i])
                kchild_error(c, i, rc, __LINE__);
            ksend(c->fd, (krec){.kind = KREC_END, .slot = i, .op = KOP_FREE, .gen = gen});
        } else {
            uint64_t size = kill_size(&c->rng), gen = ++c->gen;
            ksend(c->fd, (krec){.kind = KREC_BEGIN, .slot = i, .op = KOP_ALLOC, .gen = gen, .size = size});
            int rc = pheap_alloc_to(c->h, size, &c->slots[i]);
            if (rc)
                kchild_error(c, i, rc, __LINE__);
            off = c->slots[i];
            unsigned char *b = pheap_direct(c->h, off);
            if (!b || pheap_usable_size(c->h, off) < size)
                kchild_error(c, i, pheap_errno(), __LINE__);
            ph_test_fill(b, size, gen);
            pheap_persist(c->h, b, size);
            ksend(c->fd, (krec){.kind = KREC_END, .slot = i, .op = KOP_ALLOC, .gen = gen,
                                .size = size, .off = off});
        }
    }
    pause();
    return NULL;
}

static void kchild_main(int fd, unsigned nthreads, uint64_t seed, uint64_t gen_base)
{
    pheap *h;
    pheap_options o = {.flush = kill_flush()};
    int rc = pheap_open(kill_path, &o, &h);
    kchild c0 = {.fd = fd};
    if (rc)
        kchild_error(&c0, 0, rc, __LINE__);
    pheap_off *slots = pheap_direct(h, pheap_root_get(h, "kill.slots"));
    if (!slots)
        kchild_error(&c0, 0, pheap_errno(), __LINE__);
    ksend(fd, (krec){.kind = KREC_READY});
    static kchild c[KILL_MAX_THREADS];
    pthread_t t[KILL_MAX_THREADS];
    for (unsigned i = 0; i < nthreads; i++) {
        c[i] = (kchild){h, slots, fd, i, nthreads, seed * 131 + i, gen_base + ((uint64_t)i << 28)};
        if (i && pthread_create(&t[i], NULL, kchild_run, &c[i]))
            kchild_error(&c0, 0, PHEAP_ENOMEM, __LINE__);
    }
    kchild_run(&c[0]);
    _exit(0);
}

/* ---- the parent ----------------------------------------------------------- */

typedef struct kill_totals {
    uint64_t ops;          /* operations the children completed */
    uint64_t in_flight;    /* operations cut by the kill */
    uint64_t ready;        /* rounds in which the child had opened the heap */
    double recovery_max, recovery_sum; /* seconds in pheap_open after a kill */
} kill_totals;

/* Applies one record to the model; returns -1 on a protocol error. */
static int kill_apply(const krec *r, kill_totals *tot, int *ready)
{
    if (r->kind == KREC_READY)
        return *ready = 1, 0;
    if (r->kind == KREC_ERROR)
        return ph_test_fail(__FILE__, __LINE__, "child: slot %u: error %d (%s) at kill_common.h:%u",
                            r->slot, (int)r->op, pheap_strerror((int)r->op), r->line), -1;
    if (r->slot >= KILL_SLOTS)
        return ph_test_fail(__FILE__, __LINE__, "bad record (slot %u)", r->slot), -1;
    kslot *s = &kmodel[r->slot];
    if (r->kind == KREC_BEGIN) {
        if (s->pending.kind || (r->op == KOP_FREE) != (s->off != 0) ||
            (r->op == KOP_FREE && r->gen != s->gen))
            return ph_test_fail(__FILE__, __LINE__, "slot %u: op %u begins on a slot the model "
                                "holds as %llu (gen %llu, record gen %llu)", r->slot, r->op,
                                (unsigned long long)s->off, (unsigned long long)s->gen,
                                (unsigned long long)r->gen), -1;
        s->pending = *r;
        return 0;
    }
    if (s->pending.kind != KREC_BEGIN || s->pending.op != r->op)
        return ph_test_fail(__FILE__, __LINE__, "slot %u: end without begin", r->slot), -1;
    s->pending.kind = 0;
    s->off = r->op == KOP_ALLOC ? r->off : 0;
    s->gen = r->op == KOP_ALLOC ? r->gen : 0;
    s->size = r->op == KOP_ALLOC ? r->size : 0;
    tot->ops++;
    return 0;
}

typedef struct kill_read_ctx {
    kill_totals *tot;
    int *ready;
} kill_read_ctx;

static int kill_read_one(void *arg, const void *rec)
{
    kill_read_ctx *x = arg;
    krec r;
    memcpy(&r, rec, sizeof(r));
    return kill_apply(&r, x->tot, x->ready);
}

/* Reads records until `deadline` (then returns 1) or end of file (0). */
static int kill_read(int fd, double deadline, kill_totals *tot, int *ready)
{
    kill_read_ctx x = {tot, ready};
    return pipe_read_records(fd, deadline, sizeof(krec), kill_read_one, &x);
}

static int by_off(const void *a, const void *b)
{
    const pheap_off *x = a, *y = b;
    return *x < *y ? -1 : *x > *y;
}

/* "alloc_to of N bytes in flight", "free_from in flight" or "nothing in flight". */
static const char *kill_pending_text(const krec *p)
{
    static char buf[64];
    if (p->kind != KREC_BEGIN)
        return "nothing in flight";
    if (p->op == KOP_FREE)
        return "free_from in flight";
    snprintf(buf, sizeof(buf), "alloc_to of %llu bytes in flight", (unsigned long long)p->size);
    return buf;
}

#define KFAIL(...) (ph_test_fail(__FILE__, __LINE__, __VA_ARGS__), -1)

/* The recovered heap against the model. */
static int kill_verify(pheap *h, pheap_off slots_off, unsigned round, const char *when)
{
    pheap_check_report rep;
    if (pheap_check(h, &rep))
        return KFAIL("round %u, %s: pheap_check: %s", round, when, rep.first_error);
    pheap_off *slots = pheap_direct(h, slots_off);
    static pheap_off ends[KILL_SLOTS + 1][2];
    unsigned n = 0;
    ends[n][0] = slots_off;
    ends[n++][1] = slots_off + pheap_usable_size(h, slots_off);
    for (unsigned i = 0; i < KILL_SLOTS; i++) {
        kslot *s = &kmodel[i];
        pheap_off v = slots[i];
        size_t usable = v ? pheap_usable_size(h, v) : 0;
        if (v && usable == 0)
            return KFAIL("round %u: slot %u: %llu is not a live block (%s); %s; the child "
                         "completed %llu (%llu bytes)", round, i, (unsigned long long)v,
                         pheap_errmsg(), kill_pending_text(&s->pending),
                         (unsigned long long)s->off, (unsigned long long)s->size);
        if (s->pending.kind == KREC_BEGIN && s->pending.op == KOP_ALLOC) {
            if (v && usable < s->pending.size)
                return KFAIL("round %u: slot %u: in-flight block of %llu bytes has %zu", round, i,
                             (unsigned long long)s->pending.size, usable);
        } else if (s->pending.kind == KREC_BEGIN) { /* free in flight: done or not */
            if (v && (v != s->off || !ph_test_intact(pheap_direct(h, v), s->size, s->gen)))
                return KFAIL("round %u: slot %u: in-flight free left %llu, model %llu", round, i,
                             (unsigned long long)v, (unsigned long long)s->off);
        } else if (v != s->off) {
            return KFAIL("round %u: slot %u holds %llu, the child completed %llu", round, i,
                         (unsigned long long)v, (unsigned long long)s->off);
        } else if (v && (usable < s->size || !ph_test_intact(pheap_direct(h, v), s->size, s->gen))) {
            return KFAIL("round %u: slot %u: block %llu (gen %llu) lost its contents", round, i,
                         (unsigned long long)v, (unsigned long long)s->gen);
        }
        if (v) {
            ends[n][0] = v;
            ends[n++][1] = v + usable;
        }
    }
    qsort(ends, n, sizeof(ends[0]), by_off);
    for (unsigned k = 1; k < n; k++)
        if (ends[k - 1][1] > ends[k][0])
            return KFAIL("round %u: blocks %llu and %llu overlap", round,
                         (unsigned long long)ends[k - 1][0], (unsigned long long)ends[k][0]);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != n || rep.live_blocks != n)
        return KFAIL("round %u: %llu live blocks (check %llu), slots hold %u + the array: leak",
                     round, (unsigned long long)st.live_blocks,
                     (unsigned long long)rep.live_blocks, n - 1);
    return 0;
}

/* After verifying: free what an in-flight operation left, so the model is
 * exact again for the next round. */
static int kill_settle(pheap *h, pheap_off slots_off, kill_totals *tot)
{
    pheap_off *slots = pheap_direct(h, slots_off);
    for (unsigned i = 0; i < KILL_SLOTS; i++) {
        kslot *s = &kmodel[i];
        if (s->pending.kind != KREC_BEGIN)
            continue;
        tot->in_flight++;
        if (slots[i] && pheap_free_from(h, &slots[i]))
            return KFAIL("settle slot %u: %s", i, pheap_errmsg());
        *s = (kslot){0};
    }
    return 0;
}

static void kill_test(const char *name, kill_params p)
{
    const char *env = getenv("PHEAP_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    uint64_t rng = seed;
    printf("%s: seed %llu (PHEAP_TEST_SEED=%llu replays the schedule)\n", name,
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    memset(kmodel, 0, sizeof(kmodel));
    kill_path = ph_test_path("kill.heap");
    unlink(kill_path);
    pheap *h;
    pheap_options o = {.size = 4u << 20, .max_size = 64u << 20,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = kill_flush()};
    REQUIRE_OK(pheap_open(kill_path, &o, &h));
    pheap_off slots_off = pheap_alloc(h, KILL_SLOTS * sizeof(pheap_off));
    REQUIRE(slots_off);
    memset(pheap_direct(h, slots_off), 0, KILL_SLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, slots_off), KILL_SLOTS * sizeof(pheap_off));
    REQUIRE_OK(pheap_root_set(h, "kill.slots", slots_off));
    REQUIRE_OK(pheap_close(h));

    kill_totals tot = {0};
    for (unsigned round = 0; round < p.rounds; round++) {
        unsigned nthreads = 1 + round % p.max_threads;
        unsigned sleep_ms = 1 + (unsigned)(ph_test_rand(&rng) % p.max_sleep_ms);
        int fds[2];
        REQUIRE(pipe(fds) == 0);
        fflush(NULL);
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            kchild_main(fds[1], nthreads, ph_test_rand(&rng), (uint64_t)(round + 1) << 36);
        }
        close(fds[1]);
        fcntl(fds[0], F_SETFL, O_NONBLOCK);
        int ready = 0, status = 0;
        int rc = kill_read(fds[0], pipe_now() + sleep_ms / 1000.0, &tot, &ready);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (rc >= 0)
            rc = kill_read(fds[0], 0, &tot, &ready);
        close(fds[0]);
        REQUIRE(rc == 0);
        REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        tot.ready += ready;

        double t0 = pipe_now();
        o.flags = 0;
        REQUIRE_OK(pheap_open(kill_path, &o, &h));
        double took = pipe_now() - t0;
        tot.recovery_sum += took;
        tot.recovery_max = took > tot.recovery_max ? took : tot.recovery_max;
        struct pheap_stats st;
        pheap_stats(h, &st);
        if (ready && !st.was_unclean)
            ph_test_fail(__FILE__, __LINE__, "round %u: killed child had the heap open, but the "
                         "reopen found it clean", round);
        int bad = kill_verify(h, slots_off, round, "after recovery") ||
                  kill_settle(h, slots_off, &tot) ||
                  kill_verify(h, slots_off, round, "after freeing what was in flight");
        REQUIRE_OK(pheap_close(h));
        REQUIRE(!bad);
    }
    printf("%s: %u rounds, %llu operations completed, %llu cut by the kill, child had opened "
           "the heap in %llu rounds; recovery (open) %.2f ms average, %.2f ms max\n",
           name, p.rounds, (unsigned long long)tot.ops, (unsigned long long)tot.in_flight,
           (unsigned long long)tot.ready, 1000 * tot.recovery_sum / p.rounds,
           1000 * tot.recovery_max);
}

#endif /* PH_TEST_KILL_COMMON_H */
