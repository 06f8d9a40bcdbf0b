/*
 * kill_torture.c -- the kill -9 test of kill_common.h for many rounds and
 * up to four child threads; runs under `make torture` only.
 */
#include "kill_common.h"

TEST(kill_nine_many_times)
{
    kill_test("kill_torture", (kill_params){.rounds = 300, .max_threads = 4, .max_sleep_ms = 50});
}
