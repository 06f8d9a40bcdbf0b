/*
 * check.c -- pheap_check: re-validates, from the mapping itself, everything
 * open validated from the file, then each metadata structure in turn.
 * Reads only; safe on a read-only handle.
 */
#include <stdio.h>
#include <string.h>

#include "format/header.h"
#include "heap/heap.h"
#include "heap/names.h"
#include "util/error.h"

ph_export int pheap_check(pheap *h, pheap_check_report *out)
{
    PH_WINDOW();
    if (ph_heap_unshared(h, "pheap_check"))
        return PHEAP_ENOTSUP;
    PH_OUT(out);
    pheap_check_report r;
    memset(&r, 0, sizeof(r));
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_check: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_check");
    ph_header hdr;
    ph_state st;
    /* The live state word is OPEN while we hold the heap read-write. */
    int rc = ph_header_validate(h->sp.base, PH_PAGE_SIZE, ph_space_size(&h->sp), h->readonly, h->path, &hdr, &st);
    if (rc) {
        r.errors++;
        snprintf(r.first_error, sizeof(r.first_error), "header: %s", pheap_errmsg());
    } else if (memcmp(&hdr, &h->hdr, sizeof(hdr)) != 0) {
        r.errors++;
        snprintf(r.first_error, sizeof(r.first_error), "header: changed since open");
    } else if (st.xsize != ph_space_size(&h->sp)) {
        r.errors++;
        snprintf(r.first_error, sizeof(r.first_error), "state: size %llu, mapped %llu",
                 (unsigned long long)st.xsize, (unsigned long long)ph_space_size(&h->sp));
    }
    char err[256] = "";
    int root_errors = ph_root_check(h, &r.roots, err, sizeof(err));
    if (root_errors && r.errors == 0)
        snprintf(r.first_error, sizeof(r.first_error), "%s", err);
    r.errors += (unsigned)root_errors;
    uint64_t nnames = 0;
    unsigned name_errors = ph_names_check(h, &nnames, err, sizeof(err));
    if (name_errors && r.errors == 0)
        snprintf(r.first_error, sizeof(r.first_error), "%s", err);
    r.errors += name_errors;
    r.names = nnames;
    /* Lane entries may be active in a read-only view of a crashed heap
     * (no recovery ran) and in a snapshot of a heap in use elsewhere. */
    int lanes_idle = !h->held_elsewhere && (!h->readonly || !h->was_unclean || h->snapshot);
    unsigned orphans = 0;
    unsigned engine_errors = ph_engine_check(h->engine, lanes_idle, !h->needs_recovery, err,
                                              sizeof(err), &orphans);
    r.damaged_chunks = orphans;
    if (engine_errors && r.errors == 0)
        snprintf(r.first_error, sizeof(r.first_error), "%s", err);
    r.errors += engine_errors;
    ph_engine_stats es;
    uint64_t unused[4];
    ph_heap_engine_stats(h, &es, &unused[0], &unused[1], &unused[2], &unused[3]);
    r.live_blocks = es.live_blocks;
    r.live_bytes = es.live_bytes;
    r.slabs = es.slabs;
    r.large_extents = es.large_extents;
    r.free_bytes = es.free_bytes;
    if (out)
        *out = r;
    if (r.errors)
        return ph_err(PHEAP_ECORRUPT, "pheap_check: %u problem(s); first: %s", r.errors, r.first_error);
    return 0;
}
