/*
 * gc_kill.c -- kill -9 rounds on a GC-mode heap (see gc_kill_common.h);
 * many more under make torture (gc_kill_torture.c).
 */
#include "gc_kill_common.h"

TEST(kill_rounds)
{
    gc_kill_rounds(16);
}
