/*
 * gate.h -- the call gate: a checkpoint (persist/ckpt.h) copies a heap's
 * changed pages while no thread of the process is inside a call of
 * pheap's, so that what it copies is a state a process crash could have
 * left -- every call before it whole, none after it begun -- and never a
 * call half seen.
 *
 * Every public call that reaches a heap passes the gate on entry
 * (PH_WINDOW, alloc/keys.h) and leaves it on return; a nested call (an
 * initialiser calling pheap) passes it once.  A thread inside a call is
 * `active`.  ph_gate_stop() waits until no other thread is active and
 * holds new entries at the gate until ph_gate_start(): the stopping
 * thread's own call goes on.
 *
 * Cost: until the first heap that needs it opens (ph_gate_use), one load
 * and a branch per call; after, a sequentially consistent store and a load
 * on entry and a release store on return, all on the thread's own line.
 * Entry and stop follow Dekker's argument: a thread publishes `active`,
 * then reads `stopped`; the stopper publishes `stopped`, then reads every
 * `active`: one of them sees the other.
 */
#ifndef PH_UTIL_GATE_H
#define PH_UTIL_GATE_H

#include "util/util.h"

extern unsigned ph_gate_in_use; /* set by ph_gate_use, never reset */

int ph_gate_enter_slow(void);
void ph_gate_leave_slow(void);

/* From now on every call passes the gate (idempotent). */
void ph_gate_use(void);

/* Entry; returns the token ph_gate_end needs (0: nothing to leave). */
static inline int ph_gate_begin(void)
{
    return ph_load_relaxed(&ph_gate_in_use) ? ph_gate_enter_slow() : 0;
}

static inline void ph_gate_end(int *token)
{
    if (*token)
        ph_gate_leave_slow();
}

/* A thread of pheap's own that works for a call in progress in another
 * thread (pheap_gc's markers): between ph_gate_helper_begin and its end it
 * counts as inside that call.  Its own calls (a filter's pheap_trace) nest
 * in it and never wait at the gate, and a stop does not wait for it: the
 * stop waits for the call, which waits for this thread -- were the thread
 * gated, neither would ever go on. */
int ph_gate_helper_begin(void);
void ph_gate_helper_end(int *token);

/* The calling thread's nesting depth inside calls (0: outside any). */
unsigned ph_gate_depth(void);

/* A thread inside a call that must wait for something a stopper may hold
 * (a checkpoint's lock): counts as outside until ph_gate_resume(the
 * result), which waits at the gate if a stop is in progress. */
int ph_gate_suspend(void);
void ph_gate_resume(int suspended);

/* Waits until no thread but the caller is inside a call, holding new
 * entries until ph_gate_start.  Stops are serialised; the caller does not
 * count as inside while it waits for another's. */
void ph_gate_stop(void);
void ph_gate_start(void);

#endif
