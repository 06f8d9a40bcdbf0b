/*
 * keys.h -- protection keys (PHEAP_PROTECT_KEYS): pheap's write window.
 *
 * Under KEYS a heap is mapped once, and its metadata pages -- every page
 * below data_off and the guarded blocks -- carry a protection key whose
 * rights deny writes in every thread (and, in threads that never ran
 * pheap's code, reads too).  pheap's code opens the window for its own
 * thread on entry to every public call that reaches the heap (PH_WINDOW)
 * and shuts it again around the program's code it calls (initialisers,
 * filters: ph_window_seal).  Two WRPKRU instructions per call, no system
 * call.
 *
 * Emulated (PHEAP_KEYS_EMULATE=1 always, =fallback where the hardware
 * has no keys: test aids): the same windows, kept with mprotect of the
 * metadata below data_off of every keyed heap while any thread has one
 * open -- system calls on every call, a window one thread opens is open
 * for all, guarded blocks stay writable; enough to show that every path
 * of pheap's that writes metadata runs inside a window, which is what the
 * tests that use it are for.
 *
 * Until a heap opens with KEYS, every window costs one load and a branch.
 */
#ifndef PH_ALLOC_KEYS_H
#define PH_ALLOC_KEYS_H

#include <string.h>

#include "util/gate.h"
#include "util/util.h"

enum { PH_KEYS_NONE = 0, PH_KEYS_HW, PH_KEYS_EMULATED };

extern unsigned ph_keys_in_use; /* PH_KEYS_*: set by the first keyed open, never reset */

int ph_window_open_slow(void);
int ph_window_seal_slow(void);
void ph_window_restore(int token);

/* Lets this thread write the keyed pages; returns what ph_window_restore
 * needs to put things back (0: nothing to put back). */
static inline int ph_window_open(void)
{
    return ph_load_relaxed(&ph_keys_in_use) ? ph_window_open_slow() : 0;
}

/* Shuts this thread's window for a call into the program's code;
 * ph_window_unseal(token) opens it again. */
static inline int ph_window_seal(void)
{
    return ph_load_relaxed(&ph_keys_in_use) ? ph_window_seal_slow() : 0;
}

static inline void ph_window_unseal(int token)
{
    if (token)
        ph_window_restore(token);
}

static inline void ph_window_end(int *token)
{
    if (*token)
        ph_window_restore(*token);
}

/* The first statement of a public call that reaches the heap: the call
 * passes the gate (util/gate.h) and the window stays open until it
 * returns, by whatever path. */
#define PH_WINDOW()                                                                    \
    int ph_gate_token_ __attribute__((cleanup(ph_gate_end), unused)) = ph_gate_begin(); \
    int ph_window_token_ __attribute__((cleanup(ph_window_end), unused)) = ph_window_open()

/* The window of a thread of pheap's own that works for a call in progress
 * in another thread (util/gate.h: ph_gate_helper_begin): open, and counted
 * inside that call rather than passing the gate. */
#define PH_HELPER_WINDOW()                                                                    \
    int ph_gate_token_ __attribute__((cleanup(ph_gate_helper_end), unused)) =                \
        ph_gate_helper_begin();                                                              \
    int ph_window_token_ __attribute__((cleanup(ph_window_end), unused)) = ph_window_open()

/* Copies n bytes into the program's memory with this thread's window
 * shut: what a call hands back lands where the program's own store would,
 * and traps where that would trap (a stale pointer into a block that is
 * metadata now, another heap's metadata). */
static inline void ph_window_copy_out(void *dst, const void *src, size_t n)
{
    int sealed = ph_window_seal();
    memmove(dst, src, n);
    ph_window_unseal(sealed);
}

typedef struct ph_out {
    void *user;        /* the program's object, or NULL */
    const void *local; /* the call's copy of it */
    size_t n;
} ph_out;

static inline void ph_out_end(ph_out *o)
{
    if (o->user)
        ph_window_copy_out(o->user, o->local, o->n);
}

/* After PH_WINDOW, for an out-parameter `p` (a pointer to one object):
 * the call works on a copy of *p (p points at it from here on), handed
 * back with ph_window_copy_out when the call returns, by whatever path. */
#define PH_OUT(p)                                                                     \
    __typeof__(*(p)) ph_out_copy_##p;                                                 \
    ph_out ph_out_##p __attribute__((cleanup(ph_out_end))) = {(p), &ph_out_copy_##p,  \
                                                              sizeof(*(p))};          \
    if (p)                                                                            \
        ph_out_copy_##p = *(p), (p) = &ph_out_copy_##p

#endif
