/*
 * names_tx.c -- crash points of named objects made and removed inside
 * transactions: each operation is one transaction that creates, removes,
 * replaces, or creates and removes again names (with other kinds of
 * change, nesting, and one aborted), over a segment so full that a
 * commit grows it -- crashed at every fence and store in every variant of
 * the simulator, and recovery crashed too (harness/crash.c).  After each
 * crash the names are exactly those after the transactions that had
 * returned, or after the one in flight too -- never a mix -- each with its
 * own contents; pheap_check passes; the live blocks are exactly the named
 * blocks and the directory's segments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { CREATE, REMOVE, NEST, ALLOC };

typedef struct act {
    int kind;
    const char *name;
    size_t size;
} act;

typedef struct txdef {
    act acts[8];
    unsigned nacts;
    int abort;
} txdef;

#define LONG "a-name-long-enough-to-take-three-lines-of-the-directory-segment-0123456789-abcdefghijklmnopqrstuvwxyz"

static const txdef txs[] = {
    /* the commit grows the segment to place the new entries */
    {{{CREATE, "alpha", 40}, {CREATE, LONG, 100}, {REMOVE, "base-3", 0}, {ALLOC, "", 64}}, 4, 0},
    /* aborted: nothing of it stays */
    {{{CREATE, "gamma", 16}, {REMOVE, "base-5", 0}, {REMOVE, "alpha", 0}, {CREATE, "delta", 8}},
     4, 1},
    /* nested; a replaced name, a large block, a name made and removed again */
    {{{NEST, "", 0}, {REMOVE, "alpha", 0}, {CREATE, "alpha", 8}, {CREATE, "beta", 20000},
      {CREATE, "gamma", 16}, {REMOVE, "gamma", 0}, {REMOVE, LONG, 0}, {CREATE, "base-3", 64}},
     8, 0},
};
enum { NTX = PH_ARRAY_N(txs), BASE = 190 };

/* Each size of a name gets its own contents: a replaced name shows which. */
static uint64_t seed_of(const char *name, size_t size)
{
    return ph_test_name_seed(name) ^ size;
}

static int fill(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)usable;
    const act *a = arg;
    ph_test_fill(block, a->size, seed_of(a->name, a->size));
    return 0;
}

static int run_tx(pheap *h, const txdef *t)
{
    int rc = pheap_tx_begin(h), nested = 0;
    for (unsigned i = 0; i < t->nacts && !rc; i++) {
        const act *a = &t->acts[i];
        switch (a->kind) {
        case CREATE:
            rc = pheap_alloc_named_init(h, a->name, a->size, 0, fill, (void *)a) ? 0
                                                                                    : pheap_errno();
            break;
        case REMOVE: rc = pheap_free_named(h, a->name); break;
        case NEST: rc = pheap_tx_begin(h), nested = 1; break;
        default: /* a block made and freed in the transaction: no trace after it */
            rc = pheap_tx_free(h, pheap_tx_alloc(h, a->size));
        }
    }
    if (!rc && nested)
        rc = pheap_tx_commit(h);
    return rc ? rc : t->abort ? pheap_tx_abort(h) : pheap_tx_commit(h);
}

static void workload(ph_crash_ctx *c)
{
    for (unsigned i = 0; i < NTX; i++) {
        if (run_tx(c->heap, &txs[i]) != 0)
            ph_test_fail(__FILE__, __LINE__, "transaction %u: %s", i, pheap_errmsg());
        ph_crash_mark(c);
    }
}

/* The base names come in every size class the transactions use, so that
 * their slabs exist before the crash points (a new slab's many stores
 * would only lengthen the enumeration). */
static size_t base_size(unsigned i)
{
    static const size_t sizes[] = {8, 16, 24, 40, 64, 100};
    return sizes[i % PH_ARRAY_N(sizes)];
}

/* Whether `name` exists after the first n transactions, and its size. */
static int present(const char *name, unsigned n, size_t *size)
{
    int here = strncmp(name, "base-", 5) == 0;
    *size = here ? base_size((unsigned)strtoul(name + 5, NULL, 10)) : 0;
    for (unsigned i = 0; i < n && i < NTX; i++)
        for (unsigned j = 0; j < txs[i].nacts && !txs[i].abort; j++) {
            const act *a = &txs[i].acts[j];
            if ((a->kind == CREATE || a->kind == REMOVE) && strcmp(a->name, name) == 0) {
                here = a->kind == CREATE;
                *size = a->size;
            }
        }
    return here;
}

/* 1 when `name` is as it is after n transactions (contents included). */
static int as_after(pheap *h, const char *name, unsigned n, pheap_off off)
{
    size_t size;
    if (!present(name, n, &size))
        return off == 0;
    return off && pheap_usable_size(h, off) >= size &&
           ph_test_intact(pheap_direct(h, off), size, seed_of(name, size));
}

typedef struct judged {
    int before, after;  /* every name so far as before, as after the one in flight */
    uint64_t count;
} judged;

static void judge(pheap *h, const char *name, unsigned done, judged *j)
{
    pheap_off off = pheap_lookup(h, name);
    j->count += off != 0;
    j->before &= as_after(h, name, done, off);
    j->after &= as_after(h, name, done + 1, off);
    if (!as_after(h, name, done, off) && !as_after(h, name, done + 1, off))
        ph_test_fail(__FILE__, __LINE__, "'%.20s' after %u transactions: neither state", name,
                     done);
}

static void verify(pheap *h, unsigned done, ph_crash_ctx *c)
{
    (void)c;
    judged j = {1, 1, 0};
    char name[32];
    for (unsigned i = 0; i < BASE; i++) {
        snprintf(name, sizeof(name), "base-%u", i);
        judge(h, name, done, &j);
    }
    static const char *const others[] = {"alpha", LONG, "beta", "gamma", "delta"};
    for (unsigned i = 0; i < PH_ARRAY_N(others); i++)
        judge(h, others[i], done, &j);
    if (!j.before && !j.after)
        ph_test_fail(__FILE__, __LINE__, "after %u transactions: a mix of the transaction in "
                     "flight", done);
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.names != j.count)
        ph_test_fail(__FILE__, __LINE__, "%llu names, %llu found", (unsigned long long)st.names,
                     (unsigned long long)j.count);
    if (st.live_blocks != st.names + st.name_segments)
        ph_test_fail(__FILE__, __LINE__, "%llu live blocks: %llu names + %llu segments expected",
                     (unsigned long long)st.live_blocks, (unsigned long long)st.names,
                     (unsigned long long)st.name_segments);
}

static const char *make_base(const char *file)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s", ph_test_path(file));
    pheap *h = ph_test_create(path, 6u << 20);
    if (!h)
        return NULL;
    char name[32];
    for (unsigned i = 0; i < BASE; i++) {
        snprintf(name, sizeof(name), "base-%u", i);
        act a = {CREATE, name, base_size(i)};
        if (!pheap_alloc_named_init(h, name, a.size, 0, fill, &a)) {
            ph_test_fail(__FILE__, __LINE__, "base %s: %s", name, pheap_errmsg());
            return NULL;
        }
    }
    pheap_close(h);
    return path;
}

/* One segment of 256 home lines, nearly full: the first commit grows it. */
TEST(transactions_of_names)
{
    const char *base = make_base("names-tx.heap");
    REQUIRE(base);
    ph_crash_stats st = ph_crash_enumerate("names_tx", base, workload, verify, NULL);
    CHECK_EQ(st.violations, 0);
    CHECK(st.images > 3 * st.fences);
}
