/*
 * recover.c -- recovery after an unclean shutdown.  Runs inside pheap_open,
 * read-write only, before the handle is returned and before the heap is
 * marked open again.
 *
 * The header and the roots need no recovery: every change to them commits
 * with one atomic, persisted 8-byte store (see root.c).  The allocation
 * engine adds its steps here: replay or discard the per-thread logs, then
 * rebuild the volatile indexes from the durable bitmaps and extent log.
 */
#include "heap/heap.h"

int ph_heap_recover(pheap *h)
{
    (void)h;
    return 0;
}
