/*
 * names_fillers.c -- a long name placed past EMPTY lines of its cluster
 * turns them into FREE fillers, which its log entry (or its transaction's
 * commit record) does not cover.  Crashed at the fence that commits the
 * create, with eviction: every image opens, the name is found wherever it
 * is listed, and pheap_check passes.  Without the fence that makes the
 * fillers durable first, a head recovered past an EMPTY line is cut off
 * its home and the open refuses the directory (a few images in a hundred).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define LONG_FMT "a-long-name-of-three-directory-lines-0123456789-abcdefghijklmnopqrstuvwxyz-%05u"

/* Creates one long name per run on a heap with 110 short names (clusters
 * with EMPTY gaps), crashed at the commit's fence; `in_tx`: inside a
 * transaction, else as a plain create after another one. */
static void run(int in_tx)
{
    const char *path = ph_test_path(in_tx ? "fillers-tx.heap" : "fillers.heap");
    const char *image = ph_test_path("fillers.image");
    pheap *h = ph_test_create(path, 8u << 20);
    REQUIRE(h);
    REQUIRE_OK(ph_test_make_names(h, "b-", 110, 48));
    REQUIRE_OK(pheap_close(h));
    char name[128];
    unsigned runs = ph_crash_level() == PH_CRASH_FULL ? 3000 : 600, with_name = 0;
    for (unsigned i = 0; i < runs; i++) {
        pheap_options o = {.flags = PHEAP_SIMULATE,
                           .sim_crash_site = in_tx ? "commit_redo" : "ph_lane_begin",
                           .sim_crash_fence = in_tx ? 1 : 2, .sim_crash_image = image,
                           .sim_evict_probability = 0.5, .sim_seed = i * 13 + 5};
        REQUIRE_OK(pheap_open(path, &o, &h));
        snprintf(name, sizeof(name), LONG_FMT, i);
        if (in_tx) {
            REQUIRE_OK(pheap_tx_begin(h));
            REQUIRE(pheap_alloc_named(h, name, 48));
            REQUIRE_OK(pheap_tx_commit(h));
        } else {
            REQUIRE(pheap_alloc_named(h, "short", 48)); /* the lane's first fence */
            REQUIRE(pheap_alloc_named(h, name, 48));    /* its second: the crash */
        }
        pheap_sim_crash(h, NULL, 0, 0.0);
        pheap *r;
        if (pheap_open(image, NULL, &r) != 0) {
            ph_test_fail(__FILE__, __LINE__, "run %u: %s", i, pheap_errmsg());
            continue;
        }
        pheap_name_info info;
        char after[PHEAP_NAME_MAX + 1];
        int listed = 0, more = pheap_name_next(r, NULL, &info) == 0;
        while (more) {
            listed |= strcmp(info.name, name) == 0;
            snprintf(after, sizeof(after), "%s", info.name);
            more = pheap_name_next(r, after, &info) == 0;
        }
        with_name += listed;
        if (listed && !pheap_lookup(r, name))
            ph_test_fail(__FILE__, __LINE__, "run %u: listed, not found: cut off its home", i);
        pheap_check_report rep;
        if (pheap_check(r, &rep) != 0)
            ph_test_fail(__FILE__, __LINE__, "run %u: pheap_check: %s", i, rep.first_error);
        pheap_close(r);
    }
    printf("  %s: %u crashes, %u with the name\n", in_tx ? "transaction" : "plain", runs, with_name);
}

TEST(fillers_of_a_plain_create)
{
    run(0);
}

TEST(fillers_of_a_create_in_a_transaction)
{
    run(1);
}
