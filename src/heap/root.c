/*
 * root.c -- named roots: a fixed table of (name, offset) entries in the
 * root region.  Calls serialise on heap->root_lock, and in a heap shared
 * between processes on the process table's root lock too (share.c).
 *
 * Crash protocol.  Entry = line 0 {xused, xoff} + line 1 {name}.
 *   update:  store xoff; persist.              one 8-byte commit
 *   insert:  write name and xoff into a free entry (xused == 0); persist
 *            both lines; then store xused = 1; persist.
 *            Before the second fence's store is durable recovery sees a
 *            free entry (root absent); after it, the complete entry.
 *   remove:  store xused = 0; persist.          one 8-byte commit
 * No step needs recovery: the commit word is always one aligned store.
 *
 * Heaps of format 1.5 (PH_FEAT_RO_COMPAT_OWNER) also keep name_crc, the
 * check word of the name (PH_ROOT_CHECK: CRC-32C of the 64 name bytes,
 * bit 32 set so that it is never 0), which makes single-bit flips of the
 * entry's commit word or name detectable:
 *   insert:  as above, then name_crc = check; persist (three fences).
 *   update:  an entry without its check word gets it with the new xoff
 *            (same line, same fence).
 *   remove:  name_crc = 0; persist; then xused = 0; persist (two fences).
 * A free entry never has its check word on media (the check is written
 * only after xused = 1 is durable, and cleared before xused = 0 is
 * stored).  A used entry has it, or 0 when an insert or a removal was cut
 * short between its fences (the entry is used, unchecked: the old value of
 * a removal, the new one of an insert -- both allowed).  So a used entry
 * whose check word is neither 0 nor its name's, a free one whose check
 * word matches its name, or a commit word other than 0 and 1, is
 * damaged.  A lookup that meets a damaged entry of its name fails with
 * PHEAP_ECHECKSUM instead of answering for another root; pheap_check
 * reports every damaged entry.  Open does not read roots: no recovery
 * step trusts them (GC tracing reads only entries in use).
 */
#include <stdio.h>
#include <string.h>

#include "heap/heap.h"
#include "heap/share.h"
#include "util/crc32c.h"
#include "util/error.h"

static int bad_name(const char *name);

static int name_ok(const char *name)
{
    return name && *name && strnlen(name, PH_ROOT_NAME_MAX + 1) <= PH_ROOT_NAME_MAX;
}

int ph_root_name_check(const char *name)
{
    return name_ok(name) ? 0 : bad_name(name);
}

static int bad_name(const char *name)
{
    if (!name || !*name)
        return ph_err(PHEAP_ENAME, "root name is empty");
    return ph_err(PHEAP_ENAME, "root name '%.20s...' is longer than %u bytes", name,
                  PH_ROOT_NAME_MAX);
}

enum { ROOT_FREE, ROOT_USED, ROOT_DAMAGED };

static uint64_t name_check(const ph_root_entry *e)
{
    return PH_ROOT_CHECK(ph_crc32c(0, e->name, sizeof(e->name)));
}

/* ROOT_FREE, ROOT_USED or ROOT_DAMAGED (see the top of the file). */
static int entry_state(const pheap *h, const ph_root_entry *e)
{
    uint64_t used = ph_load(&e->xused);
    if (used > 1)
        return ROOT_DAMAGED;
    if (!(h->hdr.feat_ro_compat & PH_FEAT_RO_COMPAT_OWNER))
        return used ? ROOT_USED : ROOT_FREE;
    uint64_t crc = ph_load(&e->name_crc);
    if (!used)
        return crc && crc == name_check(e) ? ROOT_DAMAGED : ROOT_FREE;
    return !crc || crc == name_check(e) ? ROOT_USED : ROOT_DAMAGED;
}

static int damaged(pheap *h, const ph_root_entry *e, const char *call)
{
    return ph_err(PHEAP_ECHECKSUM, "%s: root entry %u ('%.*s') is damaged: its commit word or "
                  "name fails its check word (run pheap_check)", call, (unsigned)(e - h->roots),
                  (int)PH_ROOT_NAME_MAX, e->name);
}

/* The used entry named `name`, or a damaged entry of that name (*bad set),
 * or NULL. */
static ph_root_entry *find_entry(pheap *h, const char *name, int *bad)
{
    *bad = 0;
    for (unsigned i = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        int st = entry_state(h, e);
        if (st != ROOT_FREE && strncmp(e->name, name, PH_ROOT_NAME_MAX + 1) == 0) {
            *bad = st == ROOT_DAMAGED;
            return e;
        }
    }
    return NULL;
}

/* 0 when `off` (in the data region) starts a live block; else
 * PHEAP_EINTERIOR or PHEAP_ENOTLIVE with pheap_root_set's message. */
static int live_start(pheap *h, pheap_off off)
{
    uint64_t bytes;
    int rc = ph_engine_usable(h->engine, off, &bytes);
    if (rc == PHEAP_EINTERIOR)
        return ph_err(rc, "pheap_root_set: offset %llu is inside a block, not at its start",
                      (unsigned long long)off);
    if (rc == PHEAP_EDOUBLEFREE)
        return ph_err(PHEAP_ENOTLIVE, "pheap_root_set: offset %llu is a freed block",
                      (unsigned long long)off);
    if (rc)
        return ph_err(PHEAP_ENOTLIVE, "pheap_root_set: offset %llu is in no live block (free "
                      "space, or never allocated)", (unsigned long long)off);
    return 0;
}

ph_export int pheap_root_set(pheap *h, const char *name, pheap_off off)
{
    PH_WINDOW();
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_root_set: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_root_set");
    if (!name_ok(name))
        return bad_name(name);
    if (h->readonly)
        return ph_err(PHEAP_ERDONLY, "pheap_root_set: heap opened read-only");
    if (ph_load_relaxed(&h->xromode))
        return ph_mode_refuse("pheap_root_set");
    if (h->needs_recovery)
        return ph_err(PHEAP_ERECOVER, "pheap_root_set: the heap (GC mode) was not closed cleanly: "
                      "call pheap_recover first");
    if (off && (off < h->sp.data_off || off >= ph_space_size(&h->sp)))
        return ph_err(PHEAP_ERANGE, "pheap_root_set: offset %llu is outside the data region [%llu, %llu)",
                      (unsigned long long)off, (unsigned long long)h->sp.data_off,
                      (unsigned long long)ph_space_size(&h->sp));
    int rc = off ? live_start(h, off) : 0;
    if (rc)
        return rc;
    ph_pctx *c = ph_heap_pctx(h);
    ph_share_root_lock(h);
    int bad, owner = (h->hdr.feat_ro_compat & PH_FEAT_RO_COMPAT_OWNER) != 0;
    ph_root_entry *e = find_entry(h, name, &bad);
    if (bad) {
        rc = damaged(h, e, "pheap_root_set");
    } else if (e && off && owner && !ph_load(&e->name_crc)) {
        ph_persist_write(&h->sp.persist, c, &e->xoff, off);
        ph_persist_write(&h->sp.persist, c, &e->name_crc, name_check(e));
        ph_persist_range(&h->sp.persist, c, e, 3 * sizeof(uint64_t));
    } else if (e && off) {
        ph_persist_store64(&h->sp.persist, c, &e->xoff, off);
    } else if (e) {
        if (owner) /* the check word goes first: see the top of the file */
            ph_persist_store64(&h->sp.persist, c, &e->name_crc, 0);
        ph_persist_store64(&h->sp.persist, c, &e->xused, 0);
    } else if (off) {
        for (unsigned i = 0; i < PH_ROOTS_MAX && !e; i++)
            if (entry_state(h, &h->roots[i]) == ROOT_FREE)
                e = &h->roots[i];
        if (!e) {
            rc = ph_err(PHEAP_ENOSPC, "pheap_root_set: all %u roots are in use", PH_ROOTS_MAX);
        } else {
            uint64_t w[sizeof(e->name) / 8] = {0};
            memcpy(w, name, strlen(name)); /* NUL-padded, fits: checked above */
            for (unsigned k = 0; k < PH_ARRAY_LEN(w); k++)
                ph_persist_write(&h->sp.persist, c, (uint64_t *)e->name + k, w[k]);
            ph_persist_write(&h->sp.persist, c, &e->xoff, off);
            ph_persist_range(&h->sp.persist, c, e, sizeof(*e));
            ph_persist_store64(&h->sp.persist, c, &e->xused, 1);
            if (owner) /* after the commit: see the top of the file */
                ph_persist_store64(&h->sp.persist, c, &e->name_crc, name_check(e));
        }
    }
    ph_share_root_unlock(h);
    return rc;
}

ph_export pheap_off pheap_root_get(pheap *h, const char *name)
{
    PH_WINDOW();
    if (!h) {
        ph_err(PHEAP_EINVAL, "pheap_root_get: heap is NULL");
        return 0;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked("pheap_root_get");
        return 0;
    }
    if (!name_ok(name)) {
        bad_name(name);
        return 0;
    }
    ph_share_root_lock(h);
    int bad;
    ph_root_entry *e = find_entry(h, name, &bad);
    pheap_off off = e && !bad ? ph_load(&e->xoff) : 0;
    if (bad)
        damaged(h, e, "pheap_root_get");
    ph_share_root_unlock(h);
    if (!e)
        ph_err(PHEAP_ENOENT, "no root named '%s'", name);
    return off;
}

ph_export unsigned pheap_root_count(pheap *h)
{
    PH_WINDOW();
    unsigned n = 0;
    if (!h) {
        ph_err(PHEAP_EINVAL, "pheap_root_count: heap is NULL");
        return 0;
    }
    if (ph_heap_inherited(h)) {
        ph_heap_forked("pheap_root_count");
        return 0;
    }
    for (unsigned i = 0; h && i < PH_ROOTS_MAX; i++)
        n += entry_state(h, &h->roots[i]) == ROOT_USED;
    return n;
}

ph_export int pheap_root_at(pheap *h, unsigned idx, char *name, pheap_off *off)
{
    PH_WINDOW();
    if (!h || !name || !off)
        return ph_err(PHEAP_EINVAL, "pheap_root_at: NULL argument");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_root_at");
    ph_share_root_lock(h);
    int rc = PHEAP_ENOENT;
    for (unsigned i = 0, seen = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        if (entry_state(h, e) != ROOT_USED || seen++ != idx)
            continue;
        char copy[PH_ROOT_NAME_MAX + 1];
        memcpy(copy, e->name, PH_ROOT_NAME_MAX);
        copy[PH_ROOT_NAME_MAX] = '\0';
        pheap_off o = ph_load(&e->xoff);
        ph_window_copy_out(name, copy, sizeof(copy));
        ph_window_copy_out(off, &o, sizeof(o));
        rc = 0;
        break;
    }
    ph_share_root_unlock(h);
    return rc ? ph_err(rc, "pheap_root_at: no root number %u", idx) : 0;
}

int ph_root_check(pheap *h, unsigned *nroots, char *err, size_t errlen)
{
    unsigned errors = 0, n = 0;
    char dangling[200];
    int rc;
    uint64_t bytes;
    for (unsigned i = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        uint64_t used = ph_load(&e->xused), off = ph_load(&e->xoff);
        int st = entry_state(h, e);
        const char *why = NULL;
        if (used > 1)
            why = "commit word is neither 0 nor 1";
        else if (st == ROOT_DAMAGED && !used)
            why = "free, but its check word matches its name: the commit word was damaged";
        else if (st == ROOT_DAMAGED)
            why = "its name fails its check word";
        else if (st == ROOT_FREE)
            continue;
        else if (!e->name[0] || memchr(e->name, 0, sizeof(e->name)) == NULL)
            why = "name is empty or not terminated";
        else if (off && (off < h->sp.data_off || off >= ph_space_size(&h->sp)))
            why = "offset outside the data region";
        else if (off && !h->needs_recovery && /* GC heap: bitmaps of the last clean close */
                 (rc = ph_engine_usable(h->engine, off, &bytes)) != 0) {
            /* Dangling: the program freed the block it named and kept the
             * root, or the root never named a block's start. */
            snprintf(dangling, sizeof(dangling), "root '%.*s' = %llu dangles: %s",
                     (int)PH_ROOT_NAME_MAX, e->name, (unsigned long long)off,
                     rc == PHEAP_EDOUBLEFREE ? "the block it names was freed (set the root "
                                               "again or to 0)"
                     : rc == PHEAP_EINTERIOR ? "it points inside a block, not at its start"
                                             : "it points into space never allocated");
            why = dangling;
        } else {
            n++;
            for (unsigned j = i + 1; j < PH_ROOTS_MAX && !why; j++)
                if (entry_state(h, &h->roots[j]) == ROOT_USED &&
                    strncmp(h->roots[j].name, e->name, sizeof(e->name)) == 0)
                    why = "name used twice";
        }
        if (why && errors++ == 0)
            snprintf(err, errlen, "root entry %u: %s", i, why);
        if (why == dangling)
            n++;
    }
    *nroots = n;
    return (int)errors;
}

/* At open: the entries as the root calls rely on them -- a commit word of
 * 0 or 1 that agrees with the check word (format 1.5), and for a used entry
 * a terminated name not used twice and an offset of 0 or within the file's
 * data region.  (A root naming a freed
 * block is the program's doing, not damage: pheap_check reports it.)
 * PHEAP_ECORRUPT naming the entry, or 0. */
int ph_root_open_check(pheap *h)
{
    for (unsigned i = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        uint64_t used = ph_load(&e->xused), off = ph_load(&e->xoff);
        const char *why = NULL;
        int st = entry_state(h, e);
        if (used > 1)
            why = "its commit word is neither 0 nor 1";
        else if (!used && st == ROOT_DAMAGED)
            why = "it is free, but its check word matches its name: its commit word was damaged";
        else if (!used)
            continue;
        else if (!e->name[0] || memchr(e->name, 0, sizeof(e->name)) == NULL)
            why = "its name is empty or not terminated";
        else if (off && (off < h->sp.data_off || off >= ph_space_size(&h->sp)))
            why = "its offset is outside the data region";
        else if (st == ROOT_DAMAGED)
            why = "its name fails its check word";
        for (unsigned j = i + 1; j < PH_ROOTS_MAX && !why; j++)
            if (ph_load(&h->roots[j].xused) == 1 &&
                strncmp(h->roots[j].name, e->name, sizeof(e->name)) == 0)
                why = "its name is used twice";
        if (why)
            return ph_err(PHEAP_ECORRUPT, "root entry %u is damaged: %s", i, why);
    }
    return 0;
}
