/*
 * tx_kill_torture.c -- the kill -9 test of transactions of
 * tx_kill_common.h for many rounds; runs under `make torture` only.
 */
#include "tx_kill_common.h"

TEST(transactions_survive_kill_nine_many_times)
{
    txk_test("tx_kill_torture", (txk_params){.rounds = 1000, .max_sleep_ms = 80, .want_forward = 1});
}
