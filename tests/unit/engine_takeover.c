/*
 * engine_takeover.c -- processes sharing one heap (each with its own
 * engine, ph_engine_open_shared, on one mapping) killed with SIGKILL at
 * random, inside their operations and their locks, and taken over by a
 * survivor (ph_engine_takeover) while the others run: the dead one's
 * lanes rolled forward, its reservations dropped, its slabs left for
 * adoption.  Each process allocates into and frees from its own words of
 * the heap (pheap_alloc_to / pheap_free_from's engine calls, and large
 * blocks); the survivor frees some of a dead one's blocks and a new
 * process carries on with the rest.  At the end, with every process
 * stopped uncleanly and taken over, the heap opened alone passes
 * pheap_check and holds exactly the blocks the words name.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "format/header.h"
#include "harness.h"
#include "share_test.h"
#include "heap/heap.h"

enum { PROCS = 3, WORDS = 48, GENS = 4096 };

typedef struct pshared {
    uint64_t ext_lock;
    uint64_t dead[GENS];
    uint64_t ops[GENS];
} pshared;

static int gen_dead(void *ctx, uint64_t who)
{
    return (int)__atomic_load_n(&((pshared *)ctx)->dead[who >> 8], __ATOMIC_ACQUIRE);
}

typedef struct fixture {
    pheap *h;
    pshared *s;
    const ph_region *procs;
    pheap_off words; /* WORDS words per slot 0..PROCS */
} fixture;

static ph_engine_share share_of(fixture *f, unsigned owner, unsigned gen)
{
    return ph_test_share(f->h, owner, gen, &f->s->ext_lock, gen_dead, f->s);
}

static uint64_t *words_of(fixture *f, unsigned slot)
{
    return (uint64_t *)ph_space_at(&f->h->sp, f->words) + (size_t)slot * WORDS;
}

/* A process: random logged allocations into its empty words and frees of
 * its full ones, for ever. */
static void child(fixture *f, unsigned slot, unsigned gen)
{
    ph_engine_share sh = share_of(f, slot + 1, gen);
    ph_engine *e = NULL;
    if (ph_engine_open_shared(&f->h->sp, &sh, &e))
        _exit(3);
    ph_tcache t;
    ph_test_tcache(&t);
    ph_pctx c = {0};
    uint64_t rng = 1000 + gen, *w = words_of(f, slot);
    for (;;) {
        uint64_t *word = &w[ph_test_rand(&rng) % WORDS];
        int rc;
        if (ph_load(word)) {
            rc = ph_engine_free_from(e, &t, &c, word);
        } else {
            size_t size = ph_test_rand(&rng) % 16 ? 16 + ph_test_rand(&rng) % 2000
                                                  : 20000 + ph_test_rand(&rng) % 200000;
            rc = ph_engine_alloc_to(e, &t, &c, size, word, NULL);
        }
        if (rc && rc != PHEAP_ENOMEM)
            _exit(4);
        __atomic_fetch_add(&f->s->ops[gen], 1, __ATOMIC_RELAXED);
    }
}

TEST(processes_killed_and_taken_over)
{
    fixture f;
    const char *path = ph_test_path("takeover.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    REQUIRE_OK(pheap_open(path, &o, &f.h));
    REQUIRE(f.procs = ph_header_region(&f.h->hdr, PH_REGION_PROCS));
    REQUIRE(f.words = pheap_alloc_init(f.h, (PROCS + 1) * WORDS * 8, PHEAP_ALLOC_ZERO, NULL, NULL));
    f.s = mmap(NULL, sizeof(*f.s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(f.s != MAP_FAILED);
    memset(f.s, 0, sizeof(*f.s));
    /* the survivor: owner 1 (its own words are slot 0), generation 0 */
    ph_engine_share me = share_of(&f, 1, 0);
    ph_engine *e = NULL;
    REQUIRE_OK(ph_engine_open_shared(&f.h->sp, &me, &e));
    ph_tcache t;
    ph_test_tcache(&t);
    ph_pctx c = {0};
    pid_t pid[PROCS + 1] = {0};
    unsigned gen_of[PROCS + 1] = {0}, next_gen = 1, kills = 0;
    uint64_t rng = 5;
    ph_takeover_info sum = {0, 0, 0, 0};
    const char *env = getenv("PHEAP_TAKEOVER_KILLS"); /* the torture runs more */
    unsigned rounds = env ? (unsigned)strtoul(env, NULL, 10) : 150;
    for (unsigned k = 0; k <= rounds && !ph_test_failed; k++) {
        for (unsigned p = 1; p <= PROCS; p++) {
            if (pid[p])
                continue;
            gen_of[p] = next_gen++;
            pid_t q = fork();
            if (q == 0)
                child(&f, p, gen_of[p]);
            REQUIRE(q > 0);
            pid[p] = q;
        }
        if (k == rounds)
            break;
        usleep((useconds_t)(300 + ph_test_rand(&rng) % 3000));
        unsigned p = 1 + (unsigned)(ph_test_rand(&rng) % PROCS);
        PH_TEST_KILL(pid[p]);
        __atomic_store_n(&f.s->dead[gen_of[p]], 1, __ATOMIC_RELEASE);
        pid[p] = 0;
        kills++;
        ph_takeover_info ti;
        if (ph_engine_takeover(e, &c, p + 1, (uint64_t)gen_of[p] << 8 | (p + 1), &ti))
            ph_test_fail(__FILE__, __LINE__, "takeover: %s", pheap_errmsg());
        sum.lanes += ti.lanes;
        sum.entries += ti.entries;
        sum.reservations += ti.reservations;
        sum.slabs += ti.slabs;
        /* every word of the dead one names a live block or nothing; the survivor
         * frees a few (blocks of slabs no one owns now, or of another's) */
        uint64_t *w = words_of(&f, p);
        for (unsigned i = 0; i < WORDS; i++)
            if (ph_load(&w[i]) && ph_test_rand(&rng) % 4 == 0 &&
                ph_engine_free_from(e, &t, &c, &w[i]) != 0)
                ph_test_fail(__FILE__, __LINE__, "free of word %u of slot %u (%llu): %s", i, p,
                             (unsigned long long)w[i], pheap_errmsg());
    }
    for (unsigned p = 1; p <= PROCS; p++) { /* the end: all stop uncleanly */
        if (pid[p] <= 0)
            continue;
        kill(pid[p], SIGKILL);
        waitpid(pid[p], NULL, 0);
        __atomic_store_n(&f.s->dead[gen_of[p]], 1, __ATOMIC_RELEASE);
        ph_takeover_info ti;
        if (ph_engine_takeover(e, &c, p + 1, (uint64_t)gen_of[p] << 8 | (p + 1), &ti))
            ph_test_fail(__FILE__, __LINE__, "takeover: %s", pheap_errmsg());
        sum.entries += ti.entries;
    }
    uint64_t ops = 0, named = 0;
    for (unsigned g = 0; g < GENS; g++)
        ops += f.s->ops[g];
    for (unsigned p = 1; p <= PROCS; p++)
        for (unsigned i = 0; i < WORDS; i++)
            named += ph_load(&words_of(&f, p)[i]) != 0;
    fprintf(stderr, "  %u kills, %llu operations, %u lanes taken over, %u entries rolled "
            "forward, %llu reservations dropped, %llu slabs left to adoption; %llu blocks named\n",
            kills, (unsigned long long)ops, sum.lanes, sum.entries,
            (unsigned long long)sum.reservations, (unsigned long long)sum.slabs,
            (unsigned long long)named);
    CHECK(ops > 1000);
    CHECK(sum.slabs > 0);
    ph_engine_thread_exit(e, &t, &c);
    free(t.store);
    ph_persist_ctx_release(&c);
    ph_engine_detach(e);
    ph_engine_close(e);
    /* the heap alone: sound, and exactly the named blocks live (and the words' block) */
    REQUIRE_OK(ph_extents_sync(f.h->engine->ext, NULL));
    pheap_off words = f.words;
    REQUIRE_OK(pheap_close(f.h));
    uint64_t saved[(PROCS + 1) * WORDS];
    REQUIRE_OK(pheap_open(path, NULL, &f.h));
    memcpy(saved, pheap_direct(f.h, words), sizeof(saved));
    REQUIRE_OK(pheap_check(f.h, NULL));
    struct pheap_stats st;
    REQUIRE_OK(pheap_stats(f.h, &st));
    for (unsigned i = 0; i < (PROCS + 1) * WORDS; i++)
        if (saved[i])
            CHECK(pheap_usable_size(f.h, saved[i]) > 0);
    CHECK_EQ(st.live_blocks, named + 1);
    fprintf(stderr, "  the heap ends with %llu slabs (%llu bytes): those left are adopted\n",
            (unsigned long long)st.slabs, (unsigned long long)st.slab_bytes);
    CHECK(st.slabs < 200); /* not one set per process that ever ran */
    REQUIRE_OK(pheap_close(f.h));
    munmap(f.s, sizeof(*f.s));
    unlink(path);
}
