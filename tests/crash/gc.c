/*
 * gc.c -- crash points of a GC-mode heap.  Three structures -- a linked
 * list, a binary search tree and a chained hash table, each node with a
 * large payload every fifth key -- are built and shrunk by a program that
 * persists its own nodes and links (GC mode flushes nothing for it); the
 * run is crashed before each of its fences, with nothing more, with half
 * the dirty lines evicted, and with 8-byte words.  Each image is opened
 * (recovery needed), recovered conservatively or with filters, and judged:
 * the structure holds the keys of the operations done (the one in flight
 * either way), every block it reaches is live and intact and they do not
 * overlap, and exactly those blocks are allocated (conservative tracing
 * keeps more only where a stale word equals a block start, which these
 * structures never store).  Then the heap is used, closed cleanly,
 * reopened (no recovery) and judged again; and recovery itself is crashed
 * at each of its fences and the result recovered and judged the same way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

enum { LIST, TREE, HASH, NAMES }; /* NAMES: each node a named object "key-K" */
enum { NOPS = 24, BUCKETS = 16, PAYLOAD = 20000 };

typedef struct node {
    uint64_t key;
    pheap_off a, b;     /* list/hash: a = next; tree: a = left, b = right */
    pheap_off payload;  /* a large block every fifth key, else 0 */
} node;

typedef struct shape {
    int kind;
    int filters;        /* recover with filters (precise) */
    uint64_t tag;       /* set in every link: only filters see through it */
    int closing;        /* the run ends with churn and a clean close, crashed too */
} shape;

/* Operation i inserts key i + 1, except every fourth, which deletes the
 * key the operation before inserted (a leaf, a list or bucket head). */
static int deletes(unsigned i)
{
    return i % 4 == 3;
}

/* Whether `key` is present after the first n operations. */
static int present(uint64_t key, unsigned n)
{
    unsigned ins = (unsigned)key - 1;
    if (ins >= n || deletes(ins))
        return 0;
    return !(ins + 1 < n && deletes(ins + 1));
}

static pheap_off *root_words(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "top"));
}

static node *at(pheap *h, pheap_off o, const shape *s)
{
    return pheap_direct(h, o & ~s->tag);
}

/* The link word a new `key` goes into (tree: the empty child of its leaf
 * parent; list: the head; hash: its bucket's head). */
static pheap_off *slot_for(pheap *h, const shape *s, uint64_t key)
{
    pheap_off *top = root_words(h);
    if (s->kind == LIST)
        return &top[0];
    if (s->kind == HASH)
        return &top[key % BUCKETS];
    pheap_off *w = &top[0];
    for (unsigned depth = 0; *w; depth++) {
        node *n = at(h, *w, s);
        if (depth > NOPS + 64) { /* a cycle: blocks handed out twice */
            ph_test_fail(__FILE__, __LINE__, "the tree has a cycle");
            return &top[BUCKETS - 1];
        }
        w = key < n->key ? &n->a : &n->b;
    }
    return w;
}

static void key_name(char *buf, size_t n, uint64_t key)
{
    snprintf(buf, n, "key-%llu", (unsigned long long)key);
}

static int node_init(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)usable;
    memcpy(block, arg, sizeof(node));
    return 0;
}

/* A named node: its payload first, then the node, filled by the
 * initialiser, appears with its name. */
static void insert_named(pheap *h, uint64_t key)
{
    char name[32];
    node n = {key, 0, 0, 0};
    key_name(name, sizeof(name), key);
    if (key % 5 == 0 && (n.payload = pheap_alloc(h, PAYLOAD)) != 0) {
        ph_test_fill(pheap_direct(h, n.payload), PAYLOAD, key);
        pheap_persist(h, pheap_direct(h, n.payload), PAYLOAD);
    }
    if (!pheap_alloc_named_init(h, name, sizeof(node), 0, node_init, &n))
        ph_test_fail(__FILE__, __LINE__, "alloc_named %s: %s", name, pheap_errmsg());
}

static void delete_named(pheap *h, uint64_t key)
{
    char name[32];
    key_name(name, sizeof(name), key);
    pheap_off o = pheap_lookup(h, name);
    if (!o) {
        ph_test_fail(__FILE__, __LINE__, "delete %s: not found", name);
        return;
    }
    pheap_off payload = ((node *)pheap_direct(h, o))->payload;
    if (pheap_free_named(h, name) != 0 || (payload && pheap_free(h, payload) != 0))
        ph_test_fail(__FILE__, __LINE__, "delete %s: %s", name, pheap_errmsg());
}

static void insert(pheap *h, const shape *s, uint64_t key)
{
    if (s->kind == NAMES) {
        insert_named(h, key);
        return;
    }
    pheap_off o = pheap_alloc(h, sizeof(node));
    if (!o) {
        ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg());
        return;
    }
    pheap_off *slot = slot_for(h, s, key);
    node *n = pheap_direct(h, o);
    *n = (node){key, s->kind == TREE ? 0 : *slot, 0, 0};
    if (key % 5 == 0 && (n->payload = pheap_alloc(h, PAYLOAD)) != 0) {
        ph_test_fill(pheap_direct(h, n->payload), PAYLOAD, key);
        pheap_persist(h, pheap_direct(h, n->payload), PAYLOAD);
    }
    pheap_persist(h, n, sizeof(*n));
    *slot = o | s->tag;
    pheap_persist(h, slot, sizeof(*slot));
}

/* Deletes `key`, which the previous operation inserted. */
static void delete(pheap *h, const shape *s, uint64_t key)
{
    if (s->kind == NAMES) {
        delete_named(h, key);
        return;
    }
    pheap_off *slot = &root_words(h)[s->kind == HASH ? key % BUCKETS : 0];
    for (unsigned depth = 0; s->kind == TREE && *slot && at(h, *slot, s)->key != key &&
                             depth < NOPS; depth++) /* the key's own link */
        slot = key < at(h, *slot, s)->key ? &at(h, *slot, s)->a : &at(h, *slot, s)->b;
    pheap_off o = *slot & ~s->tag;
    node *n = pheap_direct(h, o);
    if (!o || n->key != key) {
        ph_test_fail(__FILE__, __LINE__, "delete %llu: not where it was put",
                     (unsigned long long)key);
        return;
    }
    *slot = s->kind == TREE ? 0 : n->a;
    pheap_persist(h, slot, sizeof(*slot));
    if (n->payload && pheap_free(h, n->payload) != 0)
        ph_test_fail(__FILE__, __LINE__, "free payload: %s", pheap_errmsg());
    if (pheap_free(h, o) != 0)
        ph_test_fail(__FILE__, __LINE__, "free node: %s", pheap_errmsg());
}

static const shape *current;

static void workload(ph_crash_ctx *c)
{
    const shape *s = c->arg;
    for (unsigned i = 0; i < NOPS; i++) {
        if (deletes(i))
            delete(c->heap, s, i);
        else
            insert(c->heap, s, i + 1);
        ph_crash_mark(c);
    }
    /* Before a close: blocks allocated and all freed again, so that the
     * close returns them from caches and batches and releases the slabs
     * they emptied (each descriptor zeroed durably first). */
    static pheap_off churn[3000];
    for (unsigned i = 0; s->closing && i < PH_ARRAY_N(churn); i++)
        churn[i] = pheap_alloc(c->heap, 64);
    for (unsigned i = 0; s->closing && i < PH_ARRAY_N(churn); i++)
        if (pheap_free(c->heap, churn[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "churn free: %s", pheap_errmsg());
}

/* ---- filters ---------------------------------------------------------------------- */

static void node_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off;
    (void)usable;
    const node *n = block;
    pheap_trace(tr, n->a & ~current->tag, node_filter);
    pheap_trace(tr, n->b & ~current->tag, node_filter);
    pheap_trace(tr, n->payload, NULL);
}

static void top_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off;
    const pheap_off *w = block;
    for (size_t i = 0; i < usable / 8; i++)
        pheap_trace(tr, w[i] & ~current->tag, node_filter);
}

/* ---- judging -------------------------------------------------------------------------- */

typedef struct seen {
    uint64_t b[4 * NOPS + 8][2];
    unsigned n;
    uint64_t keys; /* bit k: key k present */
} seen;

static void visit(pheap *h, const shape *s, pheap_off o, seen *v, int depth)
{
    for (; o && depth < 64; depth++) {
        node *n = at(h, o, s);
        if (v->n + 2 > PH_ARRAY_N(v->b) || !n || n->key == 0 || n->key > NOPS) {
            ph_test_fail(__FILE__, __LINE__, "a link leads to garbage (offset %llu)",
                         (unsigned long long)o);
            return;
        }
        v->keys |= 1ull << n->key;
        v->b[v->n][0] = o & ~s->tag;
        v->b[v->n++][1] = (o & ~s->tag) + pheap_usable_size(h, o & ~s->tag);
        if (!pheap_usable_size(h, o & ~s->tag))
            ph_test_fail(__FILE__, __LINE__, "node %llu is not live", (unsigned long long)n->key);
        if (n->payload) {
            if (pheap_usable_size(h, n->payload) < PAYLOAD ||
                !ph_test_intact(pheap_direct(h, n->payload), PAYLOAD, n->key))
                ph_test_fail(__FILE__, __LINE__, "payload of %llu lost", (unsigned long long)n->key);
            v->b[v->n][0] = n->payload;
            v->b[v->n++][1] = n->payload + PAYLOAD;
        }
        if (s->kind == TREE)
            visit(h, s, n->b, v, depth + 1);
        o = n->a;
    }
}

/* The structure holds the keys of `done` or `done + 1` operations, its
 * blocks are live, intact and disjoint, and nothing else is allocated
 * but the top block. */
static void judge_heap(pheap *h, const shape *s, unsigned done, const char *when)
{
    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check: %s", when, r.first_error);
    pheap_off *top = root_words(h);
    if (!top) {
        ph_test_fail(__FILE__, __LINE__, "%s: root lost", when);
        return;
    }
    seen v = {.n = 0};
    for (unsigned i = 0; s->kind != NAMES && i < (s->kind == HASH ? BUCKETS : 1u); i++)
        visit(h, s, top[i], &v, 0);
    pheap_name_info info;
    for (const char *after = NULL; s->kind == NAMES && pheap_name_next(h, after, &info) == 0;
         after = info.name) {
        node *n = pheap_direct(h, info.off);
        char want[32];
        key_name(want, sizeof(want), n->key);
        if (strcmp(want, info.name) != 0)
            ph_test_fail(__FILE__, __LINE__, "%s: %s holds key %llu", when, info.name,
                         (unsigned long long)n->key);
        visit(h, s, info.off, &v, 0);
    }
    uint64_t want[2] = {0, 0};
    for (unsigned k = 1; k <= NOPS; k++) {
        want[0] |= (uint64_t)present(k, done) << k;
        want[1] |= (uint64_t)present(k, done + 1 <= NOPS ? done + 1 : done) << k;
    }
    if (v.keys != want[0] && v.keys != want[1])
        ph_test_fail(__FILE__, __LINE__, "%s: keys %#llx after %u ops, expected %#llx or %#llx",
                     when, (unsigned long long)v.keys, done, (unsigned long long)want[0],
                     (unsigned long long)want[1]);
    ph_test_disjoint(v.b, v.n);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.live_blocks != v.n + 1 + st.name_segments)
        ph_test_fail(__FILE__, __LINE__, "%s: %llu live blocks, the structure has %u (+1 top, "
                     "+%llu name segments)", when, (unsigned long long)st.live_blocks, v.n,
                     (unsigned long long)st.name_segments);
}

static int recover(pheap *h, const shape *s)
{
    if (s->filters && pheap_root_set_filter(h, "top", top_filter) != 0)
        return -1;
    for (uint64_t k = 1; s->filters && s->kind == NAMES && k < 64; k++) {
        char name[32];
        key_name(name, sizeof(name), k);
        if (pheap_root_set_filter(h, name, node_filter) != 0)
            return -1;
    }
    return pheap_recover(h);
}

static pheap_options sim(uint64_t fence, const char *image, double evict, unsigned mode,
                         uint64_t seed)
{
    return (pheap_options){.flags = PHEAP_SIMULATE, .sim_crash_fence = fence,
                           .sim_crash_image = image, .sim_evict_probability = evict,
                           .sim_seed = seed, .sim_mode = mode};
}

/* Recovers `image`, judges it, uses it (the operations left, which must
 * work), closes, reopens and judges again. */
static void judge(const char *image, const shape *s, unsigned done, ph_crash_stats *st,
                  const char *where)
{
    int before = ph_test_failed;
    pheap_options o = sim(0, NULL, 0, 0, 0);
    pheap *h;
    st->images++;
    if (pheap_open(image, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: open: %s", where, pheap_errmsg());
        goto out;
    }
    struct pheap_stats ps;
    pheap_stats(h, &ps);
    /* Before the open's first fence the heap is still marked clean, and
     * after the close's last store (its clean mark may be written back
     * before its fence, the bitmaps are durable by then). */
    if (ps.needs_recovery ? pheap_alloc(h, 8) != 0 || pheap_errno() != PHEAP_ERECOVER
                          : ps.was_unclean || (done > 0 && !(s->closing && done == NOPS)))
        ph_test_fail(__FILE__, __LINE__, "%s: needs_recovery %u after %u operations", where,
                     ps.needs_recovery, done);
    if (recover(h, s) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: recover: %s", where, pheap_errmsg());
        pheap_sim_crash(h, NULL, 0, 0.0);
        goto out;
    }
    judge_heap(h, s, done, where);
    /* Going on: the keys present are whatever the image held; add more. */
    for (uint64_t k = NOPS + 1; k < 64; k += 7)
        insert(h, s, k);
    pheap_stats(h, &ps);
    uint64_t live = ps.live_blocks;
    if (pheap_close(h) != 0 || pheap_open(image, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: close and reopen: %s", where, pheap_errmsg());
        goto out;
    }
    pheap_stats(h, &ps);
    if (ps.needs_recovery || ps.live_blocks != live) {
        ph_test_fail(__FILE__, __LINE__, "%s: after a clean close: needs_recovery %u, %llu live "
                     "blocks, %llu expected", where, ps.needs_recovery,
                     (unsigned long long)ps.live_blocks, (unsigned long long)live);
        st->leaks++;
    }
    pheap_check_report r;
    if (pheap_check(h, &r) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check after reopening: %s", where,
                     r.first_error);
    pheap_sim_crash(h, NULL, 0, 0.0);
out:
    if (ph_test_failed != before) {
        st->violations++;
        fprintf(stderr, "  ... %s\n", where);
    }
}

/* Recovery of `image` crashed before each of its fences; each result is
 * judged as a crash image of its own. */
static void crash_recovery(const char *image, const shape *s, unsigned done, ph_crash_stats *st,
                           const char *where)
{
    static char image2[512];
    snprintf(image2, sizeof(image2), "%s", ph_test_path("gc-crash2.image"));
    pheap_options o = sim(0, NULL, 0, 0, 0);
    pheap *h;
    if (pheap_open(image, &o, &h) != 0)
        return;
    uint64_t f0 = pheap_sim_fence_count(h);
    recover(h, s);
    uint64_t fences = pheap_sim_fence_count(h) - f0;
    pheap_sim_crash(h, NULL, 0, 0.0);
    for (uint64_t j = 1; j <= fences; j++) {
        unlink(image2);
        o = sim(f0 + j, image2, 0.5, j % 2 ? PHEAP_SIM_WORDS : 0, j);
        if (pheap_open(image, &o, &h) != 0)
            continue;
        recover(h, s);
        pheap_sim_crash(h, NULL, 0, 0.0);
        if (access(image2, F_OK) != 0)
            continue;
        char w[200];
        snprintf(w, sizeof(w), "%s, recovery crashed at its fence %llu", where,
                 (unsigned long long)j);
        judge(image2, s, done, st, w);
        st->nested++;
    }
}

static unsigned done_at(const ph_crash_ctx *c, uint64_t fence)
{
    unsigned d = 0;
    while (d < c->nmarks && c->marks[d] < fence)
        d++;
    return d;
}

static void enumerate(const char *name, shape s)
{
    current = &s;
    static char base[512], image[512]; /* ph_test_path's buffers rotate */
    snprintf(base, sizeof(base), "%s", ph_test_path("gc-crash.heap"));
    snprintf(image, sizeof(image), "%s", ph_test_path("gc-crash.image"));
    unlink(base);
    pheap_options co = {.size = 4u << 20, .flags = PHEAP_CREATE,
                        .consistency = PHEAP_CONSISTENCY_GC};
    pheap *h = ph_test_open(base, &co);
    if (!h)
        return;
    pheap_off top = pheap_alloc_init(h, BUCKETS * sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL, NULL);
    if (!top || pheap_root_set(h, "top", top) != 0 || pheap_close(h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "base heap: %s", pheap_errmsg());
        return;
    }
    /* Dry run: the fences and when each operation returned. */
    ph_crash_ctx c = {.arg = &s};
    pheap_options o = sim(0, NULL, 0, 0, 0);
    if (pheap_open(base, &o, &c.heap) != 0) {
        ph_test_fail(__FILE__, __LINE__, "open base: %s", pheap_errmsg());
        return;
    }
    workload(&c);
    uint64_t fences = pheap_sim_fence_count(c.heap);
    pheap_sim_crash(c.heap, NULL, 0, 0.0);
    static const struct { double evict; unsigned mode; } variants[] = {
        {0.0, 0}, {0.5, 0}, {0.5, PHEAP_SIM_WORDS}};
    ph_crash_stats st = {.fences = fences};
    /* A closing run goes on past the dry run's fences, into the close's,
     * until a crash point is never reached; it works on a copy of the base
     * (the close writes the file). */
    static char work[512];
    snprintf(work, sizeof(work), "%s", ph_test_path("gc-crash-work.heap"));
    for (uint64_t f = 1; f <= fences || s.closing; f++) {
        unsigned reached = 0;
        for (unsigned v = 0; v < PH_ARRAY_N(variants); v++) {
            unlink(image);
            ph_crash_ctx run = {.arg = &s};
            o = sim(f, image, variants[v].evict, variants[v].mode, f * 7 + v);
            if ((s.closing && ph_test_copy_file(base, work) != 0) ||
                pheap_open(s.closing ? work : base, &o, &run.heap) != 0) {
                ph_test_fail(__FILE__, __LINE__, "open base: %s", pheap_errmsg());
                continue;
            }
            workload(&run);
            if (s.closing && pheap_close(run.heap) != 0)
                ph_test_fail(__FILE__, __LINE__, "close: %s", pheap_errmsg());
            if (!s.closing)
                pheap_sim_crash(run.heap, NULL, 0, 0.0);
            if (access(image, F_OK) != 0)
                continue;
            reached++;
            st.fences = st.fences > f ? st.fences : f;
            char where[160];
            snprintf(where, sizeof(where), "%s: crash before fence %llu (evict %.1f%s)", name,
                     (unsigned long long)f, variants[v].evict,
                     variants[v].mode ? ", words" : "");
            unsigned done = done_at(&c, f);
            if (v == 1 || ph_crash_full()) /* first: judging closes the image cleanly */
                crash_recovery(image, &s, done, &st, where);
            judge(image, &s, done, &st, where);
        }
        if (!reached && f > fences)
            break;
    }
    ph_crash_report(name, &st);
    CHECK(st.images >= 3 * st.fences);
    if (s.closing)
        CHECK(st.fences > fences + 2); /* the close's fences were crashed too */
    CHECK_EQ(st.violations, 0);
}

TEST(list_conservative)
{
    enumerate("gc/list", (shape){LIST, 0, 0});
}

TEST(tree_conservative)
{
    enumerate("gc/tree", (shape){TREE, 0, 0});
}

TEST(hash_conservative)
{
    enumerate("gc/hash", (shape){HASH, 0, 0});
}

TEST(tree_filters)
{
    enumerate("gc/tree+filters", (shape){TREE, 1, 0});
}

TEST(hash_tagged_links_filters)
{
    enumerate("gc/hash+tags+filters", (shape){HASH, 1, 1});
}

/* The end of a GC run: churn, then pheap_close crashed at each of its
 * fences (cache and batch drains that release slabs, the bitmaps' write-
 * back, the clean mark). */
TEST(names)
{
    enumerate("gc/names", (shape){NAMES, 0, 0});
}

TEST(names_filters)
{
    enumerate("gc/names+filters", (shape){NAMES, 1, 0});
}

TEST(list_churn_and_close)
{
    enumerate("gc/list+close", (shape){LIST, 0, 0, 1});
}
