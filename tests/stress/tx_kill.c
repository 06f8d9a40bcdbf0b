/*
 * tx_kill.c -- a few dozen rounds of the kill -9 test of transactions
 * (tx_kill_common.h): a structure updated only through transactions
 * survives SIGKILL with every committed update present and no partial one;
 * then three structures, each updated by a thread of its own.
 */
#include "tx_kill_common.h"

TEST(transactions_survive_kill_nine)
{
    txk_test("tx_kill", (txk_params){.rounds = 80, .threads = 1, .max_sleep_ms = 60});
}

TEST(transactions_of_three_threads_survive_kill_nine)
{
    txk_test("tx_kill", (txk_params){.rounds = 30, .threads = 3, .max_sleep_ms = 60});
}
