/*
 * spin.h -- a byte lock for short critical sections: one atomic exchange
 * to take it when free, a plain store to release.  A waiter spins a little
 * and then yields, because with more threads than CPUs the holder may be
 * preempted inside.  Not fair and not for sections that sleep often.
 */
#ifndef PH_UTIL_SPIN_H
#define PH_UTIL_SPIN_H

#include <stdint.h>

#include "util/util.h"

void ph_spin_wait(uint8_t *lock);

static inline void ph_spin_lock(uint8_t *lock)
{
    if (ph_unlikely(__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE)))
        ph_spin_wait(lock);
}

static inline void ph_spin_unlock(uint8_t *lock)
{
    __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

#endif
