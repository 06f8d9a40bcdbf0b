/*
 * gc_kill_torture.c -- the GC kill -9 rounds of gc_kill.c, 400 of them
 * (make torture).
 */
#include "gc_kill_common.h"

TEST(kill_rounds)
{
    gc_kill_rounds(400);
}
