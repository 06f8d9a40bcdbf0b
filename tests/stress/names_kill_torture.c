/*
 * names_kill_torture.c -- the kill -9 test of named objects of
 * names_kill_common.h for many rounds, more names and up to three child
 * threads, in LOG mode and in GC mode; runs under `make torture` only.
 */
#include "names_kill_common.h"

TEST(names_survive_kill_nine_many_times)
{
    nk_test("names_kill_torture", (nk_params){.rounds = 800, .slots = 16384, .max_threads = 3,
                                              .max_sleep_ms = 80,
                                              .consistency = PHEAP_CONSISTENCY_LOG});
}

TEST(gc_names_survive_kill_nine_many_times)
{
    nk_test("names_kill_torture", (nk_params){.rounds = 800, .slots = 16384, .max_threads = 3,
                                              .max_sleep_ms = 80,
                                              .consistency = PHEAP_CONSISTENCY_GC});
}
