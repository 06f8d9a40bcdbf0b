/*
 * tx_kill_torture.c -- the kill -9 test of transactions of
 * tx_kill_common.h for many rounds, with one child thread and with
 * four; runs under `make torture` only.
 */
#include "tx_kill_common.h"

TEST(transactions_survive_kill_nine_many_times)
{
    txk_test("tx_kill_torture", (txk_params){.rounds = 1000, .threads = 1, .max_sleep_ms = 80,
                                             .want_forward = 1});
}

TEST(transactions_of_four_threads_survive_kill_nine_many_times)
{
    txk_test("tx_kill_torture", (txk_params){.rounds = 500, .threads = 4, .max_sleep_ms = 80,
                                             .want_forward = 1});
}
