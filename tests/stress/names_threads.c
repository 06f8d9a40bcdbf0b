/*
 * names_threads.c -- named objects under concurrency: eight threads on two
 * cores.  Two threads each create, look up and remove names of their own
 * (a model each, checked at every lookup); two others race on a shared
 * set, creating and removing the same names (PHEAP_EEXIST and PHEAP_ENOENT
 * expected, the net count kept); all four race to create a set of
 * permanent names, which exactly one of them must make each; two threads
 * only look up and iterate (the permanent names' contents intact, the
 * iteration in order and, once every permanent name exists, seeing each
 * of them); two more allocate and free ordinary blocks.  At the end the
 * counts agree (stats.names, iteration, pheap_check, live blocks), every
 * name is where it should be with its contents, and again after a reopen.
 * Run under TSan and ASan by make test-tsan/-asan.
 *
 * The heap is opened with PHEAP_FLUSH_NONE unless PHEAP_FLUSH is set:
 * durability is the crash and kill tests' subject, and with msync (the
 * automatic choice off DAX) each fence would be a system call that
 * serialises the threads more than the library does.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum {
    OWNERS = 2,       /* threads with names of their own */
    CHURNERS = 2,     /* threads sharing the churn set */
    WRITERS = OWNERS + CHURNERS,
    READERS = 2,      /* lookups and iteration only */
    ALLOCATORS = 2,   /* pheap_alloc / pheap_free */
    OWN = 3000,       /* names per owner */
    PERM = 3000,      /* permanent names, made once by whichever writer is first */
    CHURN = 600,      /* shared names created and removed by the churners */
    OPS = 30000,      /* operations per writer */
    KEEP = 64,        /* blocks an allocator holds at most */
};

typedef struct own_slot {
    pheap_off off;
    uint64_t gen, size;
} own_slot;

typedef struct shared {
    pheap *h;
    atomic_uint perm_made;         /* permanent names created (successes) */
    atomic_uint writers_done;
    atomic_long churn_net;         /* churn creates minus churn removes */
    atomic_uint failures;          /* reported by threads (ph_test_fail is not thread-safe) */
    own_slot own[OWNERS][OWN];
    pheap_off kept[ALLOCATORS][KEEP];
    uint64_t kept_seed[ALLOCATORS][KEEP];
} shared;

typedef struct targ {
    shared *sh;
    unsigned id;
    uint64_t rng;
} targ;

static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

#define TFAIL(sh, ...)                                                           \
    do {                                                                         \
        pthread_mutex_lock(&report_lock);                                        \
        if (atomic_fetch_add(&(sh)->failures, 1) < 10)                           \
            ph_test_fail(__FILE__, __LINE__, __VA_ARGS__);                       \
        pthread_mutex_unlock(&report_lock);                                      \
    } while (0)

static void own_name(char *buf, unsigned t, unsigned i)
{
    /* one name in five past one directory line */
    if (i % 5 == 0)
        snprintf(buf, 128, "owner-%u-object-%u-with-a-name-longer-than-one-directory-line", t,
                 i);
    else
        snprintf(buf, 128, "o%u.%u", t, i);
}

static void perm_name(char *buf, unsigned i)
{
    snprintf(buf, 128, "perm-%u", i);
}

static void churn_name(char *buf, unsigned i)
{
    snprintf(buf, 128, "churn-%u", i);
}

static uint64_t name_seed(const char *name, uint64_t gen)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *name; name++)
        h = (h ^ (unsigned char)*name) * 0x100000001b3ull;
    return h ^ gen * 0x9e3779b97f4a7c15ull;
}

typedef struct fill_arg {
    uint64_t seed;
} fill_arg;

/* Fills the whole usable size, so that the check can read any object. */
static int fill_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h;
    ph_test_fill(block, usable, ((const fill_arg *)arg)->seed);
    return 0;
}

static uint64_t pick_size(uint64_t *rng)
{
    uint64_t r = ph_test_rand(rng) % 64;
    return r == 0 ? 16384 + r % 20000 : 16 + ph_test_rand(rng) % 500;
}

static unsigned flush_kind(void)
{
    return getenv("PHEAP_FLUSH") ? PHEAP_FLUSH_AUTO : PHEAP_FLUSH_NONE;
}

/* Tries to create permanent name `i`: made here, or by another writer. */
static void try_perm(shared *sh, unsigned i)
{
    char name[128];
    perm_name(name, i);
    fill_arg a = {name_seed(name, 0)};
    if (pheap_alloc_named_init(sh->h, name, 48 + i % 100, 0, fill_init, &a))
        atomic_fetch_add(&sh->perm_made, 1);
    else if (pheap_errno() != PHEAP_EEXIST)
        TFAIL(sh, "create %s: %s", name, pheap_errmsg());
}

static void own_step(targ *a, uint64_t r)
{
    shared *sh = a->sh;
    pheap *h = sh->h;
    char name[128];
    unsigned i = (unsigned)(r % OWN);
    own_slot *s = &sh->own[a->id][i];
    own_name(name, a->id, i);
    pheap_off off = pheap_lookup(h, name);
    if (off != s->off) {
        TFAIL(sh, "owner %u: lookup %s found %llu, made %llu", a->id, name,
              (unsigned long long)off, (unsigned long long)s->off);
        return;
    }
    if (off && !ph_test_intact(pheap_direct(h, off), s->size, name_seed(name, s->gen)))
        TFAIL(sh, "owner %u: %s lost its contents", a->id, name);
    if (off && r / OWN % 3 != 0) {
        int rc = pheap_free_named(h, name);
        if (rc)
            TFAIL(sh, "owner %u: remove %s: %s", a->id, name, pheap_errmsg());
        else
            *s = (own_slot){0};
    } else if (!off) {
        fill_arg fa = {name_seed(name, s->gen + 1)};
        uint64_t size = pick_size(&a->rng);
        off = pheap_alloc_named_init(h, name, size, 0, fill_init, &fa);
        if (!off)
            TFAIL(sh, "owner %u: create %s: %s", a->id, name, pheap_errmsg());
        else
            *s = (own_slot){off, s->gen + 1, size};
    }
}

static void churn_step(targ *a, uint64_t r)
{
    shared *sh = a->sh;
    char name[128];
    churn_name(name, (unsigned)(r % CHURN));
    if (r / CHURN % 2) {
        fill_arg fa = {name_seed(name, 0)};
        if (pheap_alloc_named_init(sh->h, name, 24 + r % 200, 0, fill_init, &fa))
            atomic_fetch_add(&sh->churn_net, 1);
        else if (pheap_errno() != PHEAP_EEXIST)
            TFAIL(sh, "churner %u: create %s: %s", a->id, name, pheap_errmsg());
    } else {
        int rc = pheap_free_named(sh->h, name);
        if (rc == 0)
            atomic_fetch_sub(&sh->churn_net, 1);
        else if (rc != PHEAP_ENOENT)
            TFAIL(sh, "churner %u: remove %s: %s", a->id, name, pheap_errmsg());
    }
}

static void *writer(void *p)
{
    targ *a = p;
    shared *sh = a->sh;
    unsigned perm_next = 0;
    for (unsigned k = 0; k < OPS; k++) {
        uint64_t r = ph_test_rand(&a->rng);
        if (k % 4 == 0 && perm_next < PERM) /* each writer in its own order */
            try_perm(sh, (perm_next++ * 7 + a->id * (PERM / WRITERS)) % PERM);
        else if (a->id < OWNERS)
            own_step(a, r);
        else
            churn_step(a, r);
    }
    while (perm_next < PERM)
        try_perm(sh, (perm_next++ * 7 + a->id * (PERM / WRITERS)) % PERM);
    atomic_fetch_add(&sh->writers_done, 1);
    return NULL;
}

/* Order of pheap_name_next: hash, then length, then bytes. */
static int after(const pheap_name_info *a, const pheap_name_info *b)
{
    if (a->hash != b->hash)
        return a->hash > b->hash;
    if (a->len != b->len)
        return a->len > b->len;
    return memcmp(a->name, b->name, a->len) > 0;
}

static void *reader(void *p)
{
    targ *a = p;
    shared *sh = a->sh;
    pheap *h = sh->h;
    char name[128];
    unsigned rounds = 0, complete = 0;
    while (atomic_load(&sh->writers_done) < WRITERS || rounds < 2) {
        /* lookups: a permanent name, once found, stays with its contents */
        for (unsigned k = 0; k < 2000; k++) {
            uint64_t r = ph_test_rand(&a->rng);
            unsigned i = (unsigned)(r % PERM);
            switch (r / PERM % 3) {
            case 0: {
                perm_name(name, i);
                pheap_off off = pheap_lookup(h, name);
                if (off && !ph_test_intact(pheap_direct(h, off), 48 + i % 100, name_seed(name, 0)))
                    TFAIL(sh, "reader: %s lost its contents", name);
                if (!off && pheap_errno() != PHEAP_ENOENT)
                    TFAIL(sh, "reader: lookup %s: %s", name, pheap_errmsg());
                break;
            }
            case 1:
                churn_name(name, i % CHURN);
                if (!pheap_lookup(h, name) && pheap_errno() != PHEAP_ENOENT)
                    TFAIL(sh, "reader: lookup %s: %s", name, pheap_errmsg());
                break;
            default:
                own_name(name, i % OWNERS, i % OWN);
                if (!pheap_lookup(h, name) && pheap_errno() != PHEAP_ENOENT)
                    TFAIL(sh, "reader: lookup %s: %s", name, pheap_errmsg());
            }
        }
        /* a whole iteration: in order, only names of the three sets, and
         * every permanent name when all existed before it began */
        int all_perm = atomic_load(&sh->perm_made) == PERM;
        pheap_name_info info, prev;
        unsigned perms = 0, n = 0;
        int rc;
        for (rc = pheap_name_next(h, NULL, &info); rc == 0;
             rc = pheap_name_next(h, prev.name, &info)) {
            if (n++ && !after(&info, &prev)) {
                TFAIL(sh, "reader: iteration goes back: %s after %s", info.name, prev.name);
                break;
            }
            if (strncmp(info.name, "perm-", 5) == 0)
                perms++;
            else if (strncmp(info.name, "churn-", 6) != 0 && info.name[0] != 'o')
                TFAIL(sh, "reader: iteration reports '%s'", info.name);
            prev = info;
            if (n > OWNERS * OWN + PERM + CHURN) {
                TFAIL(sh, "reader: iteration does not end");
                break;
            }
        }
        if (rc != 0 && rc != PHEAP_ENOENT)
            TFAIL(sh, "reader: pheap_name_next: %s", pheap_errmsg());
        if (all_perm && perms != PERM)
            TFAIL(sh, "reader: an iteration begun with all %u permanent names saw %u", PERM, perms);
        complete += all_perm;
        rounds++;
    }
    if (!complete)
        TFAIL(sh, "reader: no iteration began after every permanent name was made");
    return NULL;
}

static void *allocator(void *p)
{
    targ *a = p;
    shared *sh = a->sh;
    pheap *h = sh->h;
    unsigned me = a->id - WRITERS - READERS;
    pheap_off *kept = sh->kept[me];
    uint64_t *seed = sh->kept_seed[me];
    while (atomic_load(&sh->writers_done) < WRITERS) {
        uint64_t r = ph_test_rand(&a->rng);
        unsigned k = (unsigned)(r % KEEP);
        if (kept[k]) {
            size_t usable = pheap_usable_size(h, kept[k]);
            if (!usable || !ph_test_intact(pheap_direct(h, kept[k]), usable, seed[k]))
                TFAIL(sh, "allocator %u: block %llu lost", me, (unsigned long long)kept[k]);
            if (pheap_free(h, kept[k]) != 0)
                TFAIL(sh, "allocator %u: free: %s", me, pheap_errmsg());
            kept[k] = 0;
        } else {
            fill_arg fa = {r | 1};
            kept[k] = pheap_alloc_init(h, r % 16 == 0 ? 70000 : 8 + r % 2000, 0, fill_init, &fa);
            seed[k] = fa.seed;
            if (!kept[k])
                TFAIL(sh, "allocator %u: alloc: %s", me, pheap_errmsg());
        }
    }
    return NULL;
}

/* The end state, single-threaded: every name where it should be. */
static void verify(shared *sh, const char *when)
{
    pheap *h = sh->h;
    char name[128];
    uint64_t own_live = 0, churn_live = 0, kept = 0;
    for (unsigned t = 0; t < OWNERS; t++)
        for (unsigned i = 0; i < OWN; i++) {
            own_slot *s = &sh->own[t][i];
            own_name(name, t, i);
            pheap_off off = pheap_lookup(h, name);
            if (off != s->off)
                ph_test_fail(__FILE__, __LINE__, "%s: %s at %llu, made at %llu", when, name,
                             (unsigned long long)off, (unsigned long long)s->off);
            else if (off && !ph_test_intact(pheap_direct(h, off), s->size, name_seed(name, s->gen)))
                ph_test_fail(__FILE__, __LINE__, "%s: %s lost its contents", when, name);
            own_live += off != 0;
        }
    unsigned perm_missing = 0;
    for (unsigned i = 0; i < PERM; i++) {
        perm_name(name, i);
        pheap_off off = pheap_lookup(h, name);
        if (!off || !ph_test_intact(pheap_direct(h, off), 48 + i % 100, name_seed(name, 0)))
            perm_missing++;
    }
    CHECK_EQ(perm_missing, 0);
    for (unsigned i = 0; i < CHURN; i++) {
        churn_name(name, i);
        pheap_off off = pheap_lookup(h, name);
        if (off && !ph_test_intact(pheap_direct(h, off), 24, name_seed(name, 0)))
            ph_test_fail(__FILE__, __LINE__, "%s: %s lost its contents", when, name);
        churn_live += off != 0;
    }
    CHECK_EQ(churn_live, atomic_load(&sh->churn_net));
    for (unsigned t = 0; t < ALLOCATORS; t++)
        for (unsigned k = 0; k < KEEP; k++)
            kept += sh->kept[t][k] != 0;
    uint64_t names = own_live + PERM + churn_live, visits = 0;
    pheap_name_info info;
    for (int rc = pheap_name_next(h, NULL, &info); rc == 0;
         rc = pheap_name_next(h, info.name, &info))
        if (++visits > names + 10)
            break;
    CHECK_EQ(visits, names);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.names, names);
    CHECK_EQ(st.live_blocks, names + st.name_segments + kept);
    pheap_check_report rep;
    if (pheap_check(h, &rep) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check: %s", when, rep.first_error);
    CHECK_EQ(rep.names, names);
    CHECK_EQ(rep.live_blocks, st.live_blocks);
    printf("names_threads: %s: %llu names (%llu own, %u permanent, %llu shared), %llu segments, "
           "%llu ordinary blocks\n", when, (unsigned long long)names, (unsigned long long)own_live,
           PERM, (unsigned long long)churn_live, (unsigned long long)st.name_segments,
           (unsigned long long)kept);
}

TEST(names_from_eight_threads)
{
    const char *path = ph_test_path("names-threads.heap");
    unlink(path);
    pheap_options o = {.size = 32u << 20, .max_size = 256u << 20,
                       .flags = PHEAP_CREATE | PHEAP_EXCL, .flush = flush_kind()};
    static shared sh;
    memset(&sh, 0, sizeof(sh));
    sh.h = ph_test_open(path, &o);
    REQUIRE(sh.h);
    enum { N = WRITERS + READERS + ALLOCATORS };
    pthread_t t[N];
    targ a[N];
    for (unsigned i = 0; i < N; i++) {
        a[i] = (targ){&sh, i, 0x5eed0000u + i};
        void *(*fn)(void *) = i < WRITERS ? writer : i < WRITERS + READERS ? reader : allocator;
        REQUIRE(pthread_create(&t[i], NULL, fn, &a[i]) == 0);
    }
    for (unsigned i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&sh.failures), 0);
    CHECK_EQ(atomic_load(&sh.perm_made), PERM); /* each made once, by one writer */
    verify(&sh, "after the threads");
    REQUIRE_OK(pheap_close(sh.h));
    o.flags = 0;
    sh.h = ph_test_open(path, &o);
    REQUIRE(sh.h);
    verify(&sh, "after a reopen");
    REQUIRE_OK(pheap_close(sh.h));
}
