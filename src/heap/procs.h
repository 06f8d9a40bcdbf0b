/*
 * procs.h -- the process table (format/layout.h, PH_REGION_PROCS): each
 * read-write open holds a lease, a slot naming its process, kept alive by
 * a lock the kernel drops when the process dies.  `pheap info` lists the
 * leases; an attach clears those whose process is gone.
 */
#ifndef PH_HEAP_PROCS_H
#define PH_HEAP_PROCS_H

#include "heap/heap.h"

/* Takes a lease for read-write open h (after its header was validated and
 * the heap mapped); nothing for read-only and simulated opens and heaps
 * without a process table.  Clears stale leases first.  Errors:
 * PHEAP_EBUSY (every slot is held by a live process), an I/O error of the
 * lock calls; nothing changes on error. */
int ph_procs_attach(pheap *h);

/* Gives h's lease back (at close; not for a fork child's copy). */
void ph_procs_detach(pheap *h);

#endif
