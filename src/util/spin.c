/*
 * spin.c -- the waiting side of the byte lock.
 */
#include "util/spin.h"

#include <sched.h>

void ph_spin_wait(uint8_t *lock)
{
    for (unsigned spins = 0;; spins++) {
        if (!__atomic_load_n(lock, __ATOMIC_RELAXED) && !__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
            return;
        if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
}
