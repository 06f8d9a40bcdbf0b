/*
 * kill.c -- a few rounds of the kill -9 test (kill_common.h): a child
 * allocating and freeing into rooted slots is killed at a random moment
 * and the recovered heap must match what the child had completed.
 */
#include "kill_common.h"

TEST(kill_nine_a_few_times)
{
    kill_test("kill", (kill_params){.rounds = 10, .max_threads = 3, .max_sleep_ms = 50});
}
