/*
 * names_kill.c -- kill -9 rounds while a child creates, looks up and
 * removes named objects (names_kill_common.h), in LOG mode and in GC mode;
 * many more under make torture (names_kill_torture.c).
 */
#include "names_kill_common.h"

TEST(names_survive_kill_nine)
{
    nk_test("names_kill", (nk_params){.rounds = 48, .slots = 6000, .max_threads = 2,
                                      .max_sleep_ms = 40, .consistency = PHEAP_CONSISTENCY_LOG});
}

TEST(gc_names_survive_kill_nine)
{
    nk_test("names_kill", (nk_params){.rounds = 48, .slots = 6000, .max_threads = 2,
                                      .max_sleep_ms = 40, .consistency = PHEAP_CONSISTENCY_GC});
}
