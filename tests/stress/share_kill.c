/*
 * share_kill.c -- the kill -9 test of a shared heap (share_kill_common.h)
 * for a short run: four processes, 60 kills, with one thread each and
 * with three.
 */
#include "share_kill_common.h"

TEST(shared_heap_survives_kill_nine)
{
    share_kill_test("share_kill.heap", 60, 1);
}

TEST(shared_heap_of_threaded_processes_survives_kill_nine)
{
    share_kill_test("share_kill_threads.heap", 60, 3);
}
