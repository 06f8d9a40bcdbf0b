/*
 * tx_forward_decision.c -- recovery rolls a committed transaction forward, and a
 * crash inside that recovery must not change the decision.  The decision
 * rests on the contents CRC of the added ranges; the roll-forward frees
 * blocks, and a large freed extent may be handed back to the file system
 * (hole punch) by the recovery itself, as soon as the freed bytes pass the
 * purge budget.  When an added range lies in a block the transaction
 * frees, the punch zeroes it on media: a next recovery that decided again
 * from the contents would find them changed, decide "back" and restore
 * the snapshots while the frees of the first recovery stay done -- an
 * image neither before nor after the transaction (a root naming a freed
 * block).  Crashed at every fence of the first recovery.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define MiB (1024u * 1024u)
#define BIGP (33u * MiB)       /* above the purge budget (32 MiB) */
#define SMALLQ (300u * 1024u)

typedef struct state {
    uint64_t k;      /* added and changed in place */
    pheap_off p;     /* a large block the transaction frees (one of its words added) */
    pheap_off q;     /* another large block it frees */
} state;

static state *state_of(pheap *h)
{
    return pheap_direct(h, pheap_root_get(h, "state"));
}

static const char *make_base(void)
{
    const char *path = ph_test_path("adv-punch.heap");
    pheap *h = ph_test_create(path, 48u * MiB);
    if (!h)
        return NULL;
    pheap_off s = pheap_alloc(h, sizeof(state));
    state *st = pheap_direct(h, s);
    st->k = 1;
    st->p = pheap_alloc(h, BIGP);
    st->q = pheap_alloc(h, SMALLQ);
    if (!st->p || !st->q)
        ph_test_fail(__FILE__, __LINE__, "alloc: %s", pheap_errmsg());
    *(uint64_t *)pheap_direct(h, st->p) = 7;
    pheap_persist(h, pheap_direct(h, st->p), 8);
    pheap_persist(h, st, sizeof(*st));
    pheap_root_set(h, "state", s);
    pheap_close(h);
    return path;
}

/* The transaction; *before is the fence count just before its commit. */
static void run_tx(const char *base, const pheap_options *o, uint64_t *before)
{
    pheap *h = ph_test_open(base, o);
    if (!h)
        return;
    state *s = state_of(h);
    uint64_t zero = 0;
    uint64_t *p0 = pheap_direct(h, s->p);
    int ok = pheap_tx_begin(h) == 0 && pheap_tx_add(h, &s->k, 8) == 0;
    s->k = 2;
    ok = ok && pheap_tx_add(h, p0, 8) == 0;
    *p0 = 8;
    ok = ok && pheap_tx_free(h, s->p) == 0 && pheap_tx_free(h, s->q) == 0 &&
         pheap_tx_write(h, &s->p, &zero, 8) == 0 && pheap_tx_write(h, &s->q, &zero, 8) == 0;
    if (!ok)
        ph_test_fail(__FILE__, __LINE__, "tx: %s", pheap_errmsg());
    *before = pheap_sim_fence_count(h);
    if (pheap_tx_commit(h))
        ph_test_fail(__FILE__, __LINE__, "commit: %s", pheap_errmsg());
    pheap_sim_crash(h, NULL, 0, 0.0);
}

TEST(a_crash_inside_recovery_keeps_its_decision_when_a_freed_block_is_punched)
{
    const char *base = make_base();
    REQUIRE(base);
    char img1[512], img2[512];
    snprintf(img1, sizeof(img1), "%s", ph_test_path("adv-punch-1.image"));
    snprintf(img2, sizeof(img2), "%s", ph_test_path("adv-punch-2.image"));
    pheap_options dry = {.flags = PHEAP_SIMULATE};
    uint64_t before = 0;
    run_tx(base, &dry, &before);
    REQUIRE(before);
    /* Crash just before the commit's second fence (F2): committed, nothing
     * applied; only what is durable.  Recovery does the frees. */
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = before + 2,
                       .sim_crash_image = img1, .sim_evict_probability = 0.0};
    unlink(img1);
    run_tx(base, &o, &before);

    /* The recovery's fences. */
    pheap *h;
    pheap_options sim = {.flags = PHEAP_SIMULATE};
    REQUIRE_OK(pheap_open(img1, &sim, &h));
    uint64_t rfences = pheap_sim_fence_count(h);
    struct pheap_stats st;
    pheap_stats(h, &st);
    CHECK_EQ(st.tx_rolled_forward, 1);
    state *s = state_of(h);
    CHECK_EQ(s->k, 2); /* rolled forward */
    CHECK_EQ(s->p, 0);
    pheap_sim_crash(h, NULL, 0, 0.0);

    unsigned bad = 0;
    for (uint64_t f = 1; f <= rfences; f++) {
        pheap_options r = {.flags = PHEAP_SIMULATE, .sim_crash_fence = f,
                           .sim_crash_image = img2, .sim_evict_probability = 0.0};
        unlink(img2);
        REQUIRE_OK(pheap_open(img1, &r, &h));
        pheap_sim_crash(h, NULL, 0, 0.0);
        if (access(img2, F_OK) != 0)
            continue;
        REQUIRE_OK(pheap_open(img2, &sim, &h));
        s = state_of(h);
        pheap_off p = s->p, q = s->q;
        int p_live = p && pheap_usable_size(h, p) > 0, q_live = q && pheap_usable_size(h, q) > 0;
        int after = s->k == 2 && p == 0 && q == 0;
        int beforeok = s->k == 1 && p_live && q_live && *(uint64_t *)pheap_direct(h, p) == 7;
        if (!after && !beforeok) {
            bad++;
            ph_test_fail(__FILE__, __LINE__, "recovery crashed before its fence %llu of %llu: "
                         "k %llu, p %llu (%s), q %llu (%s): neither before nor after",
                         (unsigned long long)f, (unsigned long long)rfences,
                         (unsigned long long)s->k, (unsigned long long)p,
                         p_live ? "live" : "not live", (unsigned long long)q,
                         q_live ? "live" : "not live");
        }
        CHECK(pheap_check(h, NULL) == 0);
        pheap_sim_crash(h, NULL, 0, 0.0);
    }
    CHECK_EQ(bad, 0);
}
