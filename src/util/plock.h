/*
 * plock.h -- a lock between processes: an 8-byte word of a mapping that
 * several processes share, 0 when free, else the holder's identity
 * (ph_plock_owner.me: every thread of a process locks as that process).
 *
 * A holder may die at any instruction (kill -9) and leave the word set.
 * A waiter spins a little, then yields; each time it has waited
 * PH_PLOCK_CHECK_NS more, it asks the owner's `dead` test about the
 * holder, and takes the lock over from a dead one by compare-and-swap from
 * the dead holder's identity -- one waiter wins, the others go on waiting
 * for the winner.  The winner learns it (PH_PLOCK_TAKEN) and must repair
 * what the lock protects, which the dead holder may have left half
 * changed, before it relies on it.  So no wait lasts for ever, and a wait
 * that costs nothing while holders live checks a holder only when it is
 * slow to let go.  No pthread object lives in the shared mapping.
 *
 * Rules: never held across the program's code (an initialiser, a filter);
 * identities are never reused while a lock may hold one (the process
 * table's generation makes each attach's identity new); not recursive.
 */
#ifndef PH_UTIL_PLOCK_H
#define PH_UTIL_PLOCK_H

#include <stdint.h>

#include "util/util.h"

#define PH_PLOCK_CHECK_NS (1000u * 1000u) /* a holder's liveness is checked after 1 ms */
#define PH_PLOCK_TAKEN 1                   /* the lock was taken over from a dead holder */

typedef struct ph_plock_owner {
    uint64_t me;                          /* this process's identity, nonzero */
    int (*dead)(void *ctx, uint64_t who); /* 1 when `who` is gone for good; 0 when alive
                                             or not known */
    void *ctx;
} ph_plock_owner;

int ph_plock_wait(uint64_t *w, const ph_plock_owner *o);

/* Takes the lock: 0, or PH_PLOCK_TAKEN from a dead holder (repair first). */
static inline int ph_plock_lock(uint64_t *w, const ph_plock_owner *o)
{
    uint64_t free_word = 0;
    if (ph_likely(__atomic_compare_exchange_n(w, &free_word, o->me, 0, __ATOMIC_ACQUIRE,
                                              __ATOMIC_RELAXED)))
        return 0;
    return ph_plock_wait(w, o);
}

static inline void ph_plock_unlock(uint64_t *w)
{
    __atomic_store_n(w, 0, __ATOMIC_RELEASE);
}

#endif
