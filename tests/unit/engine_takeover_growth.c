/*
 * engine_takeover_growth.c -- the takeover of a process that
 * grew the heap.  Two processes (fork) on one mapping, each with its own
 * ph_space copy, as processes sharing a heap have.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "alloc/engine.h"
#include "alloc/engine_int.h"
#include "format/header.h"
#include "harness.h"
#include "share_test.h"
#include "heap/heap.h"
#include "log/lane.h"

typedef struct pshared {
    uint64_t ext_lock;
    uint64_t dead[4];
} pshared;

static int gen_dead(void *ctx, uint64_t who)
{
    return (int)__atomic_load_n(&((pshared *)ctx)->dead[who >> 8], __ATOMIC_ACQUIRE);
}

/* Process D: pheap_alloc_to of 16 MiB (the heap is 4 MiB: it grows), killed
 * after its lane entry is written (engine.c, alloc_logged: reserve, begin). */
static void child(pheap *h, pshared *s, pheap_off word)
{
    ph_engine_share sh = ph_test_share(h, 2, 1, &s->ext_lock, gen_dead, s);
    ph_engine *e = NULL;
    if (ph_engine_open_shared(&h->sp, &sh, &e))
        _exit(3);
    ph_tcache t;
    ph_test_tcache(&t);
    ph_pctx c = {0};
    uint64_t off, bytes = 16u << 20;
    if (ph_engine_lane(e, &t, &c) || ph_engine_reserve_large(e, &t, &c, bytes, &off))
        _exit(4);
    ph_lane_begin(&e->lanes, &c, &t.lane, PH_LOG_ALLOC_TO, off, bytes, word, 0, 0);
    raise(SIGKILL);
    _exit(5);
}

TEST(takeover_of_a_process_that_grew_the_heap)
{
    const char *path = ph_test_path("takeover-growth.heap");
    unlink(path);
    pheap_options o = {.size = 4u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE,
                       .flush = PHEAP_FLUSH_NONE};
    pheap *h;
    REQUIRE_OK(pheap_open(path, &o, &h));
    const ph_region *r = ph_header_region(&h->hdr, PH_REGION_PROCS);
    REQUIRE(r);
    pheap_off word = pheap_alloc_init(h, 64, PHEAP_ALLOC_ZERO, NULL, NULL);
    REQUIRE(word);
    pshared *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(s != MAP_FAILED);
    memset(s, 0, sizeof(*s));
    ph_engine_share me = ph_test_share(h, 1, 0, &s->ext_lock, gen_dead, s);
    ph_engine *e = NULL;
    REQUIRE_OK(ph_engine_open_shared(&h->sp, &me, &e));
    uint64_t before = ph_space_size(&h->sp);
    pid_t q = fork();
    if (q == 0)
        child(h, s, word);
    REQUIRE(q > 0);
    int st;
    REQUIRE(waitpid(q, &st, 0) == q);
    REQUIRE(WIFSIGNALED(st));
    __atomic_store_n(&s->dead[1], 1, __ATOMIC_RELEASE);
    ph_pctx c = {0};
    ph_takeover_info ti = {0, 0, 0, 0};
    int rc = ph_engine_takeover(e, &c, 2, 1u << 8 | 2, &ti);
    fprintf(stderr, "  heap %llu bytes here, %llu in the state; takeover: %d %s (%u lanes, "
            "%u entries)\n", (unsigned long long)before,
            (unsigned long long)ph_load(&h->sp.state->xsize), rc, rc ? pheap_errmsg() : "",
            ti.lanes, ti.entries);
    CHECK_EQ(rc, 0); /* the entry's block lies past this process's size until it follows */
    if (rc) { /* the same takeover once this process has followed the growth */
        REQUIRE_OK(ph_extents_sync(e->ext, NULL));
        rc = ph_engine_takeover(e, &c, 2, 1u << 8 | 2, &ti);
        fprintf(stderr, "  after a sync: takeover %d (%u lanes, %u entries, %llu reservations)\n",
                rc, ti.lanes, ti.entries, (unsigned long long)ti.reservations);
    }
    ph_persist_ctx_release(&c);
    ph_engine_detach(e);
    ph_engine_close(e);
    pheap_close(h);
    munmap(s, sizeof(*s));
    unlink(path);
}
