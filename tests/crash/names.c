/*
 * names.c -- crash points of named objects (LOG mode): creates, removes
 * and creates again, including the rebuilds of the directory -- a segment
 * that grows, one split in two with the directory doubled -- crashed at
 * every fence and store with the simulator's variants, and recovery
 * crashed too (harness/crash.c).  After each crash: every name of a
 * returned create is there with its contents, every removed one is gone,
 * the one in flight is whole or absent, pheap_check passes, and the live
 * blocks are exactly the named blocks and the directory's segments.
 */
#include <stdio.h>
#include <string.h>

#include "harness.h"

/* CREATE fills the block in its initialiser; PLAIN creates it bare (the
 * deferred bind: one fence) and the program fills and persists it after
 * the call returns, as most programs do. */
enum { CREATE, REMOVE, PLAIN };

typedef struct op {
    int kind;
    const char *name;
    size_t size;
} op;

/* A name longer than a line takes several (and needs a run of free lines). */
#define LONG "a-name-long-enough-to-take-three-lines-of-the-directory-segment-0123456789-abcdefghijklmnopqrstuvwxyz"

static const op grow_ops[] = {
    {CREATE, "alpha", 40},  {PLAIN, LONG, 100},    {REMOVE, "base-3", 0},
    {CREATE, "beta", 20000},{REMOVE, "alpha", 0},  {PLAIN, "alpha", 8},
    {PLAIN, "base-3", 64},  {REMOVE, LONG, 0},     {REMOVE, "beta", 0},
    {CREATE, LONG, 16},     {PLAIN, "gamma", 24},  {REMOVE, "alpha", 0},
};

static const op split_ops[] = {
    {PLAIN, "alpha", 40},   {PLAIN, "beta", 24},   {REMOVE, "base-7", 0},
    {REMOVE, "alpha", 0},   {CREATE, "alpha", 300},{PLAIN, LONG, 50},
    {PLAIN, "gamma", 16},
};

typedef struct workload_def {
    const op *ops;
    unsigned nops;
    unsigned base;      /* names "base-0".. made before the crash points */
} workload_def;

static int fill(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)usable;
    const op *o = arg;
    ph_test_fill(block, o->size, ph_test_name_seed(o->name));
    return 0;
}

static int apply(pheap *h, const op *o)
{
    if (o->kind == REMOVE)
        return pheap_free_named(h, o->name);
    if (o->kind == CREATE)
        return pheap_alloc_named_init(h, o->name, o->size, 0, fill, (void *)o) ? 0 : pheap_errno();
    pheap_off off = pheap_alloc_named(h, o->name, o->size);
    if (!off)
        return pheap_errno();
    void *p = pheap_direct(h, off);
    ph_test_fill(p, o->size, ph_test_name_seed(o->name));
    pheap_persist(h, p, o->size);
    return 0;
}

static void workload(ph_crash_ctx *c)
{
    const workload_def *w = c->arg;
    for (unsigned i = 0; i < w->nops; i++) {
        if (apply(c->heap, &w->ops[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "op %u (%s): %s", i, w->ops[i].name, pheap_errmsg());
        ph_crash_mark(c);
    }
}

/* Whether `name` exists after the first n operations, and its size. */
static int present(const workload_def *w, const char *name, unsigned n, size_t *size)
{
    int here = strncmp(name, "base-", 5) == 0;
    *size = 32;
    for (unsigned i = 0; i < n && i < w->nops; i++)
        if (strcmp(w->ops[i].name, name) == 0) {
            here = w->ops[i].kind != REMOVE;
            *size = w->ops[i].size;
        }
    return here;
}

static void check_name(pheap *h, const workload_def *w, const char *name, unsigned done,
                       uint64_t *count)
{
    size_t before_size, after_size;
    int before = present(w, name, done, &before_size);
    int after = present(w, name, done + 1, &after_size);
    pheap_off off = pheap_lookup(h, name);
    if (off && !before && !after)
        ph_test_fail(__FILE__, __LINE__, "'%s' exists after %u ops", name, done);
    if (!off && before && after)
        ph_test_fail(__FILE__, __LINE__, "'%s' lost after %u ops", name, done);
    if (!off)
        return;
    (*count)++;
    /* made by a PLAIN create in flight: its contents may not be written yet */
    if (!before && done < w->nops && w->ops[done].kind == PLAIN)
        return;
    size_t size = before ? before_size : after_size;
    if (before && after && before_size != after_size) /* re-created by the op in flight */
        size = pheap_usable_size(h, off) >= after_size ? after_size : before_size;
    if (pheap_usable_size(h, off) < size ||
        !ph_test_intact(pheap_direct(h, off), size, ph_test_name_seed(name)))
        ph_test_fail(__FILE__, __LINE__, "'%s' at %llu: contents lost", name,
                     (unsigned long long)off);
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    const workload_def *w = c->arg;
    uint64_t count = 0;
    char name[32];
    for (unsigned i = 0; i < w->base; i++) {
        snprintf(name, sizeof(name), "base-%u", i);
        check_name(h, w, name, done, &count);
    }
    for (unsigned i = 0; i < w->nops; i++) {
        unsigned first = 1;
        for (unsigned j = 0; j < i; j++)
            first &= strcmp(w->ops[j].name, w->ops[i].name) != 0;
        if (first && strncmp(w->ops[i].name, "base-", 5) != 0)
            check_name(h, w, w->ops[i].name, done, &count);
    }
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.names != count)
        ph_test_fail(__FILE__, __LINE__, "%llu names, %llu found", (unsigned long long)st.names,
                     (unsigned long long)count);
    /* no leak: the named blocks and the segments, nothing else */
    if (st.live_blocks != st.names + st.name_segments)
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks: %llu names + %llu segments expected",
                     (unsigned long long)st.live_blocks, (unsigned long long)st.names,
                     (unsigned long long)st.name_segments);
}

static const char *make_base(const char *file, unsigned base)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path(file));
    pheap *h = ph_test_create(path, 6u << 20);
    if (!h)
        return NULL;
    char name[32];
    for (unsigned i = 0; i < base; i++) {
        snprintf(name, sizeof(name), "base-%u", i);
        op o = {CREATE, name, 32};
        if (apply(h, &o) != 0) {
            ph_test_fail(__FILE__, __LINE__, "base %s: %s", name, pheap_errmsg());
            return NULL;
        }
    }
    pheap_close(h);
    return path;
}

static void enumerate(const char *name, const char *file, workload_def *w)
{
    const char *base = make_base(file, w->base);
    REQUIRE(base);
    ph_crash_stats st = ph_crash_enumerate(name, base, workload, verify, w);
    CHECK_EQ(st.violations, 0);
    CHECK(st.images > 3 * st.fences);
}

/* One segment of 256 home lines, nearly full: the second create grows it. */
TEST(create_remove_grow)
{
    static workload_def w = {grow_ops, PH_ARRAY_N(grow_ops), 190};
    enumerate("names/grow", "names-grow.heap", &w);
}

/* One segment of 4096 home lines, three quarters full: the second create
 * splits it in two and doubles the directory. */
TEST(create_remove_split)
{
    static workload_def w = {split_ops, PH_ARRAY_N(split_ops), 3071};
    enumerate("names/split", "names-split.heap", &w);
}
