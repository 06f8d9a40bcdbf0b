/*
 * share_kill_torture.c -- the kill -9 test of a shared heap
 * (share_kill_common.h) for 1,200 kills, with one thread per process and
 * with four; runs under `make torture` only.
 */
#include "share_kill_common.h"

TEST(shared_heap_survives_many_kills)
{
    share_kill_test("share_kill_torture.heap", 1200, 1);
}

TEST(shared_heap_of_threaded_processes_survives_many_kills)
{
    share_kill_test("share_kill_torture_threads.heap", 1200, 4);
}
