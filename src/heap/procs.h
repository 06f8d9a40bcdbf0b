/*
 * procs.h -- the process table (format/layout.h, PH_REGION_PROCS): each
 * read-write open holds a lease, a slot naming its process, kept alive by
 * a lock the kernel drops when the process dies.  `pheap info` lists the
 * leases; an attach clears those whose process is gone.
 */
#ifndef PH_HEAP_PROCS_H
#define PH_HEAP_PROCS_H

#include "heap/heap.h"

/* Takes a lease for read-write open h (once its session started: a
 * refused open writes nothing); nothing for read-only and simulated opens
 * and heaps without a process table.  Never fails the open: a lease only
 * describes its holder, so when none can be had (every slot locked, the
 * gate held for long by some reader of the file, a lock call failing) the
 * open goes on without one (h->lease -1) and is not listed.  A stale slot
 * it takes is cleared first. */
void ph_procs_attach(pheap *h);

/* Gives h's lease back (at close; not for a fork child's copy). */
void ph_procs_detach(pheap *h);

/* The identity of h's lease for locks between processes (util/plock.h):
 * the slot and the generation of the attach that took it, never the same
 * for two attaches; 0 without a lease. */
uint64_t ph_procs_identity(const pheap *h);

/* 1 when the process whose identity is `who` holds the heap no more: its
 * slot was taken by a later attach, or its liveness lock is gone (it
 * died), or only a fork child that kept its open file holds the lock (it
 * died; the child may not use the heap).  0 while it lives, and when the
 * lock test fails (a live holder is never taken over from). */
int ph_procs_dead(pheap *h, uint64_t who);

#endif
