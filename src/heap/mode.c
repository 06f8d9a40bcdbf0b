/*
 * mode.c -- the heap's owner and access mode (FP-Heap style): who may
 * switch a heap between writable and read-only, and the switch itself.
 *
 * Crash protocol.  The mode is one word of the state line, ph_state.xmode
 * (format/layout.h: the mode, a tag and a CRC-32C of both).  A switch is
 * one ph_persist_store64 of the new word: before that store is durable the
 * heap has the old mode, after it the new one; no other word changes, so
 * nothing needs recovery.  Open checks the word and refuses a heap whose
 * check bits do not match (header.c), so a damaged word is never taken
 * for a mode.
 */

#include "format/header.h"
#include "heap/heap.h"
#include "os/os.h"
#include "util/error.h"

static int has_owner(const pheap *h)
{
    return (h->hdr.feat_ro_compat & PH_FEAT_RO_COMPAT_OWNER) != 0;
}

int ph_mode_refuse(const char *call)
{
    return ph_err(PHEAP_EROMODE, "%s: the heap is in read-only mode (its owner can make it "
                  "writable with pheap_set_mode or `pheap mode PATH writable`)", call);
}

void ph_mode_load(pheap *h)
{
    unsigned mode = PH_MODE_WRITABLE;
    if (has_owner(h) && ph_mode_decode(ph_load(&h->sp.state->xmode), &mode))
        mode = PH_MODE_READONLY; /* defensive: open validated the word */
    h->xromode = mode == PH_MODE_READONLY;
}

ph_export int pheap_get_mode(pheap *h)
{
    PH_WINDOW();
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_get_mode: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_get_mode");
    return ph_load_relaxed(&h->xromode) ? (int)PHEAP_MODE_READONLY : (int)PHEAP_MODE_WRITABLE;
}

ph_export int pheap_set_mode(pheap *h, unsigned mode)
{
    PH_WINDOW();
    if (ph_heap_unshared(h, "pheap_set_mode"))
        return PHEAP_ENOTSUP;
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_set_mode: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_set_mode");
    if (mode != PHEAP_MODE_WRITABLE && mode != PHEAP_MODE_READONLY)
        return ph_err(PHEAP_EINVAL, "pheap_set_mode: unknown mode %u (PHEAP_MODE_WRITABLE or "
                      "PHEAP_MODE_READONLY)", mode);
    if (h->readonly)
        return ph_err(PHEAP_ERDONLY, "pheap_set_mode: heap opened read-only");
    if (!has_owner(h))
        return ph_err(PHEAP_ENOTSUP, "pheap_set_mode: %s is a heap of format %u.%u, which "
                      "records no owner and no mode (format 1.5 does)", h->path, h->hdr.major,
                      h->hdr.minor);
    uint32_t uid = ph_os_euid();
    if (uid != 0 && uid != h->hdr.owner_uid)
        return ph_err(PHEAP_EPERM, "pheap_set_mode: user %u is not the owner of %s (user %u) "
                      "nor root", uid, h->path, h->hdr.owner_uid);
    _Static_assert(PHEAP_MODE_WRITABLE == PH_MODE_WRITABLE && PHEAP_MODE_READONLY == PH_MODE_READONLY,
                   "mode values are the format's");
    pthread_mutex_lock(&h->root_lock);
    if (ph_load(&h->sp.state->xmode) != ph_mode_word(mode)) {
        /* The commit: one durable aligned store (see the top of the file). */
        ph_persist_store64(&h->sp.persist, ph_heap_pctx(h), &h->sp.state->xmode, ph_mode_word(mode));
        ph_store(&h->xromode, mode == PHEAP_MODE_READONLY);
        ph_heap_gc_fast_update(h);
    }
    pthread_mutex_unlock(&h->root_lock);
    return 0;
}
