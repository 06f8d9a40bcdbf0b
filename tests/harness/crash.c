/*
 * crash.c -- crash-point enumeration over the crash simulator.  The heap
 * file `base` is never modified: a simulated heap writes its file only at
 * pheap_close, and every workload run ends with pheap_sim_crash instead.
 *
 * For each crash point (every fence; every durable store or a sample of
 * them; PHEAP_CRASH=full or quick says how many, see harness.h) and each variant of what reaches media (lines or 8-byte words,
 * eviction at stores), the image is judged: opened under the simulator
 * (recovery), checked, verified, then used -- allocations of every kind,
 * frees, enough large operations to compact the extent log -- closed, and
 * opened again from what that use made durable.  Recovery itself is
 * crashed at each of its fences (depth 2) and those images are judged the
 * same way.
 *
 * PHEAP_CRASH_MODEL=pages takes the crash points under the page-cache
 * model instead (PHEAP_SIM_PAGES, the msync back end): its own variants at
 * every fence, a sample of the stores, and recovery crashed in it too.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "util/util.h"

void ph_crash_mark(ph_crash_ctx *c)
{
    if (c->nmarks < sizeof(c->marks) / sizeof(c->marks[0])) {
        c->marks[c->nmarks] = pheap_sim_fence_count(c->heap);
        c->store_marks[c->nmarks] = pheap_sim_store_count(c->heap);
        c->nmarks++;
    }
}

/* What reaches media besides what was flushed and fenced. */
typedef struct variant {
    double evict;        /* probability per differing line (or word) at the crash */
    unsigned words;      /* 8-byte words on their own instead of whole lines */
    double store_evict;  /* write-back of the stored line at each durable store */
    uint64_t seed;       /* 0: the same draw everywhere; else drawn afresh per point */
    unsigned nt_lag;     /* unfenced non-temporal stores stay out, the rest joins */
    unsigned pages;      /* the page-cache model: whole 4 KiB pages, a fence syncs */
} variant;

static const variant sampled_variants[] = {
    {0.0, 0, 0.0, 0},  /* the durable image alone */
    {0.5, 0, 0.0, 1},  /* whole lines, half of them */
    {1.0, 0, 0.0, 0},  /* everything that differs */
    {0.5, 1, 0.0, 2},  /* 8-byte words, each on its own */
    {0.3, 1, 0.3, 3},  /* words, and lines written back early at stores */
    {1.0, 1, 0.0, 0, 1}, /* every word but those of unfenced non-temporal stores */
};
static const variant full_variants[] = {
    {0.0, 0, 0.0, 0}, {0.5, 0, 0.0, 1}, {0.5, 0, 0.0, 2}, {0.5, 0, 0.0, 3}, {1.0, 0, 0.0, 0},
    {0.5, 1, 0.0, 4}, {0.5, 1, 0.0, 5}, {0.2, 1, 0.0, 6}, {0.8, 1, 0.0, 7}, {0.3, 1, 0.3, 8},
    {0.0, 0, 0.5, 9}, {0.5, 1, 0.5, 10}, {1.0, 1, 0.0, 0, 1}, {0.5, 1, 0.0, 11, 1},
};

static const variant quick_variants[] = {
    {0.0, 0, 0.0, 0}, {0.5, 1, 0.0, 2}, {0.3, 1, 0.3, 3}, {1.0, 1, 0.0, 0, 1},
};

/* The page-cache model: what the last sync left alone, whole pages joined
 * in several draws, everything, and pages written back at stores. */
#define PAGES(evict, store_evict, seed) {evict, 0, store_evict, seed, 0, 1}
static const variant page_sampled_variants[] = {
    PAGES(0.0, 0.0, 0), PAGES(0.5, 0.0, 1), PAGES(0.5, 0.0, 2), PAGES(0.5, 0.3, 3),
    PAGES(1.0, 0.0, 0),
};
static const variant page_full_variants[] = {
    PAGES(0.0, 0.0, 0), PAGES(0.5, 0.0, 1), PAGES(0.5, 0.0, 2), PAGES(0.5, 0.0, 3),
    PAGES(0.5, 0.0, 4), PAGES(0.2, 0.0, 5), PAGES(0.8, 0.0, 6), PAGES(1.0, 0.0, 0),
    PAGES(0.0, 0.5, 7), PAGES(0.5, 0.3, 8),
};
static const variant page_quick_variants[] = {
    PAGES(0.0, 0.0, 0), PAGES(0.5, 0.0, 2), PAGES(1.0, 0.0, 0),
};

/* The variants of `level` in the model PHEAP_CRASH_MODEL names. */
static const variant *variants_of(int level, unsigned *n)
{
    static const struct {
        const variant *v;
        unsigned n;
    } t[2][3] = {
        {{quick_variants, PH_ARRAY_N(quick_variants)},
         {sampled_variants, PH_ARRAY_N(sampled_variants)},
         {full_variants, PH_ARRAY_N(full_variants)}},
        {{page_quick_variants, PH_ARRAY_N(page_quick_variants)},
         {page_sampled_variants, PH_ARRAY_N(page_sampled_variants)},
         {page_full_variants, PH_ARRAY_N(page_full_variants)}},
    };
    int pages = ph_crash_model() == PH_CRASH_PAGES;
    *n = t[pages][level].n;
    return t[pages][level].v;
}

int ph_crash_level(void)
{
    const char *v = getenv("PHEAP_CRASH");
    if (v && strcmp(v, "full") == 0)
        return PH_CRASH_FULL;
    if (v && strcmp(v, "quick") == 0)
        return PH_CRASH_QUICK;
    return PH_CRASH_SAMPLED;
}

int ph_crash_full(void)
{
    return ph_crash_level() == PH_CRASH_FULL;
}

int ph_crash_model(void)
{
    const char *v = getenv("PHEAP_CRASH_MODEL");
    return v && strcmp(v, "pages") == 0 ? PH_CRASH_PAGES : PH_CRASH_LINES;
}

typedef struct run_ctx {
    const char *name;
    const char *image, *image2;
    ph_crash_verify_fn verify;
    ph_crash_ctx *c;
    ph_crash_stats *st;
    const char *where;   /* the crash point, for messages */
} run_ctx;

static pheap_options sim_options(uint64_t fence, uint64_t store, const char *image, const variant *v,
                                 uint64_t seed)
{
    return (pheap_options){.flags = PHEAP_SIMULATE, .sim_crash_fence = fence,
                           .sim_crash_store = store,
                           .sim_crash_image = fence || store ? image : NULL,
                           .sim_evict_probability = v->evict, .sim_seed = seed,
                           .sim_mode = (v->words ? PHEAP_SIM_WORDS : 0) |
                                       (v->nt_lag ? PHEAP_SIM_NT_LAG : 0) |
                                       (v->pages ? PHEAP_SIM_PAGES : 0),
                           .sim_store_evict_probability = v->store_evict,
                           .sim_store_seed = seed ^ 0x5354ull};
}

static int run(const char *base, const pheap_options *o, ph_crash_workload_fn workload,
               ph_crash_ctx *c)
{
    int rc = pheap_open(base, o, &c->heap);
    if (rc) {
        ph_test_fail(__FILE__, __LINE__, "open %s: %s", base, pheap_errmsg());
        return rc;
    }
    c->nmarks = 0;
    workload(c);
    c->fences = pheap_sim_fence_count(c->heap);
    c->stores = pheap_sim_store_count(c->heap);
    return pheap_sim_crash(c->heap, NULL, 0, 0.0);
}

/* Sizes the continuation allocates: every kind of block, a large one
 * first (one extent-log append, then a close: what a crash left in the
 * log's slots past its end meets the first append). */
static const size_t use_sizes[] = {20000, 8, 64, 100, 2000, 16384, 100000, 300000};
#define NUSE (sizeof(use_sizes) / sizeof(use_sizes[0]))

/* Opens `image` under the simulator; checks and verifies it. */
static pheap *reopen(run_ctx *r, const char *image, unsigned done, const char *when, int verify)
{
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    if (pheap_open(image, &o, &h) != 0) {
        ph_test_fail(__FILE__, __LINE__, "%s: open %s: %s", r->where, when, pheap_errmsg());
        return NULL;
    }
    pheap_check_report rep;
    if (pheap_check(h, &rep) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: pheap_check %s: %s", r->where, when, rep.first_error);
    if (verify)
        r->verify(h, done, r->c);
    return h;
}

static uint64_t live_blocks(pheap *h)
{
    struct pheap_stats st;
    pheap_stats(h, &st);
    return st.live_blocks;
}

/* Closes h (the file gets only what was made durable) and reopens it;
 * the live blocks must be `live`. */
static pheap *cycle(run_ctx *r, pheap *h, const char *image, unsigned done, uint64_t live,
                    const char *when, int verify)
{
    if (pheap_close(h) != 0)
        ph_test_fail(__FILE__, __LINE__, "%s: close %s: %s", r->where, when, pheap_errmsg());
    h = reopen(r, image, done, when, verify);
    if (h && live_blocks(h) != live) {
        ph_test_fail(__FILE__, __LINE__, "%s: %llu live blocks %s, %llu expected", r->where,
                     (unsigned long long)live_blocks(h), when, (unsigned long long)live);
        r->st->leaks++;
    }
    return h;
}

/* Transactions after recovery that leave no trace: one commits an
 * allocation freed again and a write of the bytes already there, one
 * snapshots, scribbles and aborts (a heap made before transactions
 * refuses them: nothing to do). */
static void use_transactions(run_ctx *r, pheap *h, const pheap_off *keep)
{
    if (!keep[2] || !keep[3] || pheap_tx_begin(h) == PHEAP_ENOTSUP)
        return;
    uint64_t *w = pheap_direct(h, keep[2]), v = *w;
    pheap_off x = pheap_tx_alloc(h, 100);
    if (!x || pheap_tx_write(h, w, &v, sizeof(v)) || pheap_tx_free(h, x) || pheap_tx_commit(h))
        ph_test_fail(__FILE__, __LINE__, "%s: after recovery, a transaction: %s", r->where,
                     pheap_errmsg());
    unsigned char *p = pheap_direct(h, keep[3]);
    if (pheap_tx_begin(h) || pheap_tx_add(h, p, 64))
        ph_test_fail(__FILE__, __LINE__, "%s: after recovery, pheap_tx_add: %s", r->where,
                     pheap_errmsg());
    memset(p, 0xcd, 64);
    pheap_tx_abort(h);
}

/* Opens `image` under the simulator (recovery), checks and verifies it,
 * then uses it in three rounds, each ended by a close (the file gets only
 * what was made durable) and a reopen that is checked (and at the end
 * verified) again: one large block (one extent-log append), blocks of
 * every kind and transactions that leave no trace, then enough large
 * operations to wrap the extent log (compaction) and the frees of those
 * blocks. */
static void judge(run_ctx *r, const char *image, unsigned done)
{
    int before = ph_test_failed;
    pheap *h = reopen(r, image, done, "after the crash", 1);
    if (!h)
        goto out;
    uint64_t live0 = live_blocks(h);
    pheap_off keep[NUSE];
    for (unsigned i = 0; i < NUSE; i++) {
        if (i == 1 && !(h = cycle(r, h, image, done, live0 + (keep[0] != 0), "after one "
                                  "large allocation", 0)))
            goto out;
        keep[i] = pheap_alloc(h, use_sizes[i]);
        if (!keep[i])
            ph_test_fail(__FILE__, __LINE__, "%s: after recovery, alloc(%zu): %s", r->where,
                         use_sizes[i], pheap_errmsg());
        else {
            ph_test_fill(pheap_direct(h, keep[i]), use_sizes[i], keep[i]);
            pheap_persist(h, pheap_direct(h, keep[i]), use_sizes[i]);
        }
    }
    use_transactions(r, h, keep);
    unsigned kept = 0;
    for (unsigned i = 0; i < NUSE; i++)
        kept += keep[i] != 0;
    if (!(h = cycle(r, h, image, done, live0 + kept, "after allocating", 0)))
        goto out;
    /* One extent-log entry per 16 KiB of max_size and half: this many
     * large operations fill a half at least once. */
    struct pheap_stats st;
    pheap_stats(h, &st);
    uint64_t ops = st.max_size / (16 * 1024) + 80;
    for (uint64_t i = 0; i < ops; i += 2) {
        pheap_off a = pheap_alloc(h, 20000 + (i % 5) * 4096);
        if (!a || pheap_free(h, a) != 0) {
            ph_test_fail(__FILE__, __LINE__, "%s: after recovery, large op %llu: %s", r->where,
                         (unsigned long long)i, pheap_errmsg());
            break;
        }
    }
    for (unsigned i = 0; i < NUSE; i++) {
        if (!keep[i])
            continue;
        if (!ph_test_intact(pheap_direct(h, keep[i]), use_sizes[i], keep[i]))
            ph_test_fail(__FILE__, __LINE__, "%s: block of %zu bytes at %llu overwritten",
                         r->where, use_sizes[i], (unsigned long long)keep[i]);
        if (pheap_free(h, keep[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "%s: free after recovery: %s", r->where,
                         pheap_errmsg());
    }
    if (!(h = cycle(r, h, image, done, live0, "after compacting and freeing", 1)))
        goto out;
    pheap_sim_crash(h, NULL, 0, 0.0);
out:
    r->st->images++;
    if (ph_test_failed != before) {
        r->st->violations++;
        fprintf(stderr, "  ... %s: %s, %u ops done\n", r->name, r->where, done);
    }
}

static void crash_recovery(run_ctx *r, unsigned done, uint64_t seed, int every);

void ph_crash_judge(const char *name, const char *image, const char *where, unsigned done,
                    ph_crash_verify_fn verify, ph_crash_ctx *c, ph_crash_stats *st)
{
    static char image2[512]; /* ph_test_path's buffers rotate */
    if (!image2[0])
        snprintf(image2, sizeof(image2), "%s", ph_test_path("crash2.image"));
    run_ctx r = {name, image, image2, verify, c, st, where};
    judge(&r, image, done);
    crash_recovery(&r, done, ph_mix64((uintptr_t)where ^ st->images), 1);
}

/* Depth 2: recovery of `image` crashed at each of its fences in two
 * variants (durable image alone; words, or half the pages in the page
 * model), or, when sampling, at one fence drawn from `seed` in the first. */
static void crash_recovery(run_ctx *r, unsigned done, uint64_t seed, int every)
{
    static const variant lines[] = {{0.5, 1, 0.0, 1}, {0.0, 0, 0.0, 0}};
    static const variant pages[] = {PAGES(0.5, 0.0, 1), PAGES(0.0, 0.0, 0)};
    const variant *vs = ph_crash_model() == PH_CRASH_PAGES ? pages : lines;
    pheap_options o = {.flags = PHEAP_SIMULATE};
    pheap *h;
    if (pheap_open(r->image, &o, &h) != 0)
        return; /* judge() reports it */
    uint64_t fences = pheap_sim_fence_count(h);
    pheap_sim_crash(h, NULL, 0, 0.0);
    uint64_t first = 1, last = fences;
    if (!every && fences > 0)
        first = last = 1 + ph_mix64(seed) % fences;
    char where[160];
    const char *outer = r->where;
    for (uint64_t j = first; j <= last; j++) {
        for (unsigned v = 0; v < (every ? 2u : 1u); v++) {
            unlink(r->image2);
            pheap_options n = sim_options(j, 0, r->image2, &vs[v], seed + j);
            if (pheap_open(r->image, &n, &h) != 0) {
                ph_test_fail(__FILE__, __LINE__, "%s: recovery under crash %llu: %s", outer,
                             (unsigned long long)j, pheap_errmsg());
                continue;
            }
            pheap_sim_crash(h, NULL, 0, 0.0);
            if (access(r->image2, F_OK) != 0)
                continue;
            snprintf(where, sizeof(where), "%s, recovery crashed at its fence %llu (%s)", outer,
                     (unsigned long long)j, vs[v].evict == 0.0 ? "durable only"
                                            : vs[v].pages      ? "pages" : "words");
            r->where = where;
            judge(r, r->image2, done);
            r->st->nested++;
            r->where = outer;
        }
    }
}

/* Ops that had returned before the crash point: marked before it. */
static unsigned ops_done(const uint64_t *marks, unsigned n, uint64_t point)
{
    unsigned done = 0;
    while (done < n && marks[done] < point)
        done++;
    return done;
}

/* One crash point in one variant: run, take the image, judge it, and now
 * and then crash its recovery. */
static int one_point(run_ctx *r, const char *base, ph_crash_workload_fn workload, uint64_t fence,
                     uint64_t store, const variant *v, unsigned vi)
{
    uint64_t point = fence ? fence : store;
    uint64_t seed = v->seed ? v->seed + 16 * point + (store ? 7 : 0) : 0;
    unlink(r->image);
    pheap_options o = sim_options(fence, store, r->image, v, seed);
    if (run(base, &o, workload, r->c) != 0)
        return -1;
    if (access(r->image, F_OK) != 0)
        return 0; /* the point never came */
    unsigned done = fence ? ops_done(r->c->marks, r->c->nmarks, fence)
                          : ops_done(r->c->store_marks, r->c->nmarks, store);
    r->c->crash_fence = fence;
    r->c->crash_store = store;
    char where[128];
    snprintf(where, sizeof(where), "%s %llu, variant %u (evict %.1f%s%s, store evict %.1f, seed %llu)",
             fence ? "fence" : "store", (unsigned long long)point, vi, v->evict,
             v->pages ? " pages" : v->words ? " words" : " lines", v->nt_lag ? " nt-lag" : "",
             v->store_evict,
             (unsigned long long)seed);
    r->where = where;
    judge(r, r->image, done);
    /* Depth 2: every image when full; else one in four, by variant. */
    if (ph_crash_full() || (point + vi) % 4 == 0)
        crash_recovery(r, done, seed ^ point, ph_crash_full());
    /* quick (the fault tables): the first violation is the answer */
    int limit = ph_crash_level() == PH_CRASH_QUICK ? 0 : 20;
    return ph_test_failed > limit ? -1 : 0;
}

void ph_crash_report(const char *name, const ph_crash_stats *st)
{
    char row[256];
    snprintf(row, sizeof(row), "crash: %-36s %6llu fences %6llu stores %7u images %6u nested "
             "(depth 2) %3u violations %3u leaks\n", name, (unsigned long long)st->fences,
             (unsigned long long)st->stores, st->images, st->nested, st->violations, st->leaks);
    fputs(row, stderr);
    const char *table = getenv("PHEAP_CRASH_TABLE");
    FILE *f = table ? fopen(table, "a") : NULL;
    if (f) {
        fputs(row, f);
        fclose(f);
    }
}

/* Between fences, line model: after every durable store, with everything
 * stored so far on media (each prefix of the stores, in program order),
 * and the same but for non-temporal stores not yet fenced; and after a
 * sample of them (all when full) in the word-granular variants. */
static int line_stores(run_ctx *r, const char *base, ph_crash_workload_fn workload,
                       const variant *vs, unsigned nv, unsigned step)
{
    static const variant prefix[] = {{1.0, 1, 0.0, 0}, {1.0, 1, 0.0, 0, 1}};
    for (uint64_t s = 1; s <= r->st->stores; s++) {
        for (unsigned v = 0; v < PH_ARRAY_N(prefix); v++)
            if (one_point(r, base, workload, 0, s, &prefix[v], nv + v) != 0)
                return -1;
        for (unsigned v = 0; v < nv && s % step == 0; v++)
            if (vs[v].words && one_point(r, base, workload, 0, s, &vs[v], v) != 0)
                return -1;
    }
    return 0;
}

/* Between fences, page model: after a sample of the stores (all when
 * full), pages drawn at random -- a page may have been written back with
 * what it held at any store.  (Everything stored so far is the line
 * model's prefix image: not taken again.)  Sampled, each store of the
 * sample takes the next of the random variants in turn. */
static int page_stores(run_ctx *r, const char *base, ph_crash_workload_fn workload,
                       const variant *vs, unsigned nv, unsigned step, int full)
{
    unsigned turn = 0;
    for (uint64_t s = step; s <= r->st->stores; s += step) {
        for (unsigned k = 0; k < nv; k++) {
            unsigned v = (turn + k) % nv;
            if (vs[v].evict <= 0.0 || vs[v].evict >= 1.0)
                continue;
            if (one_point(r, base, workload, 0, s, &vs[v], v) != 0)
                return -1;
            if (!full) {
                turn = v + 1;
                break;
            }
        }
    }
    return 0;
}

ph_crash_stats ph_crash_enumerate(const char *name, const char *base, ph_crash_workload_fn workload,
                                  ph_crash_verify_fn verify, void *arg)
{
    ph_crash_stats st = {0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    c->arg = arg;
    static char image[512], image2[512]; /* ph_test_path's buffers rotate */
    snprintf(image, sizeof(image), "%s", ph_test_path("crash.image"));
    snprintf(image2, sizeof(image2), "%s", ph_test_path("crash2.image"));
    int pages = ph_crash_model() == PH_CRASH_PAGES;
    char row[160];
    snprintf(row, sizeof(row), "%s%s", name, pages ? ":pages" : "");
    run_ctx r = {row, image, image2, verify, c, &st, ""};
    int level = ph_crash_level(), full = level == PH_CRASH_FULL;
    unsigned nv;
    const variant *vs = variants_of(level, &nv);
    unsigned store_step = full ? 1 : level ? (pages ? 4 : 3) : 7;
    pheap_options dry = {.flags = PHEAP_SIMULATE, .sim_mode = pages ? PHEAP_SIM_PAGES : 0};
    if (run(base, &dry, workload, c) != 0)
        goto out;
    st.fences = c->fences;
    st.stores = c->stores;
    for (uint64_t k = 1; k <= st.fences; k++)
        for (unsigned v = 0; v < nv; v++)
            if (one_point(&r, base, workload, k, 0, &vs[v], v) != 0)
                goto out;
    if (pages)
        page_stores(&r, base, workload, vs, nv, store_step, full);
    else
        line_stores(&r, base, workload, vs, nv, store_step);
out:
    unlink(r.image);
    unlink(r.image2);
    free(c);
    ph_crash_report(row, &st);
    return st;
}
