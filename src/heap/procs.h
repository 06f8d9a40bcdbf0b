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

/* Gives h's lease back (at close; not for a fork child's copy);
 * _gated when the caller holds the gate. */
void ph_procs_detach(pheap *h);
void ph_procs_detach_gated(pheap *h, int held);

/* ---- for a heap shared between processes (share.c) ---- */

/* The gate, write-locked: waiting as long as it takes (attaches and
 * takeovers hold it for their length), or not at all (_try: 0 or
 * PHEAP_EBUSY); ph_procs_ungate lets it go. */
int ph_procs_gate(pheap *h);
int ph_procs_gate_try(pheap *h);
void ph_procs_ungate(pheap *h);

/* Takes a lease for sharing (gate held): the slot of a dead sharer not
 * taken over yet is left alone.  0, or PHEAP_EBUSY when every slot is
 * held. */
int ph_procs_attach_shared(pheap *h);

/* What slot i holds now (*copy: its words), or a negative code. */
#define PH_SLOT_FREE 0
#define PH_SLOT_LIVE 1
#define PH_SLOT_DEAD 2     /* its process is gone and no open file holds its lock */
#define PH_SLOT_ORPHANED 3 /* its process is gone; a fork child's open file holds its lock */
int ph_procs_slot(pheap *h, unsigned i, ph_lease *copy);

ph_procs_header *ph_procs_table(pheap *h);
ph_lease *ph_procs_leases(pheap *h);

/* Read-only opens and opens for sharing exclude each other (the reader
 * and sharer bytes, format/layout.h), for as long as the open file lasts:
 * 0, or PHEAP_EBUSY when the other kind holds the heap.  Nothing for a
 * heap without a process table. */
int ph_procs_exclude(pheap *h, int readonly);

/* 1 when some open for sharing holds the heap (a snapshot's question). */
int ph_procs_sharers(pheap *h);

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
