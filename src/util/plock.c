/*
 * plock.c -- the waiting side of the lock between processes (plock.h):
 * spin, then yield, then sleep 50 microseconds at a time, looking at the
 * clock (and, after PH_PLOCK_CHECK_NS, at the holder's life) as it goes.
 */
#include "util/plock.h"

#include <sched.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ph_plock_wait(uint64_t *w, const ph_plock_owner *o)
{
    uint64_t seen = 0, since = 0;
    for (unsigned spins = 0;; spins++) {
        uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED), zero = 0;
        if (!v && __atomic_compare_exchange_n(w, &zero, o->me, 0, __ATOMIC_ACQUIRE,
                                              __ATOMIC_RELAXED))
            return 0;
        if (v != seen) { /* another holder: its time starts now */
            seen = v;
            since = 0;
        }
        if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            continue;
        }
        if (spins < 128) {
            sched_yield();
        } else { /* a holder that is not running: sleep, or waiters that spin and yield
                    keep it from the processor (a convoy when processes outnumber cores) */
            struct timespec nap = {0, 50 * 1000};
            nanosleep(&nap, NULL);
        }
        if (!v || (spins < 128 && (spins & 63)))
            continue;
        uint64_t t = now_ns();
        if (!since) {
            since = t;
        } else if (t - since >= PH_PLOCK_CHECK_NS) {
            since = t;
            if (v != o->me && o->dead(o->ctx, v) &&
                __atomic_compare_exchange_n(w, &v, o->me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
                return PH_PLOCK_TAKEN;
        }
    }
}
