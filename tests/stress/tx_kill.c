/*
 * tx_kill.c -- a few dozen rounds of the kill -9 test of transactions
 * (tx_kill_common.h): a structure updated only through transactions
 * survives SIGKILL with every committed update present and no partial one.
 */
#include "tx_kill_common.h"

TEST(transactions_survive_kill_nine)
{
    txk_test("tx_kill", (txk_params){.rounds = 80, .max_sleep_ms = 60});
}
