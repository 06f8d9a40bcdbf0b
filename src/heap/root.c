/*
 * root.c -- named roots: a fixed table of (name, offset) entries in the
 * root region.  Writers serialise on heap->root_lock.
 *
 * Crash protocol.  Entry = line 0 {xused, xoff} + line 1 {name}.
 *   update:  store xoff; persist.              one 8-byte commit
 *   insert:  write name and xoff into a free entry (xused == 0); persist
 *            both lines; then store xused = 1; persist.
 *            Before the second fence's store is durable recovery sees a
 *            free entry (root absent); after it, the complete entry.
 *   remove:  store xused = 0; persist.          one 8-byte commit
 * No step needs recovery: the commit word is always one aligned store.
 */
#include <stdio.h>
#include <string.h>

#include "heap/heap.h"
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

static ph_root_entry *find(pheap *h, const char *name)
{
    for (unsigned i = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        if (ph_load(&e->xused) == 1 && strncmp(e->name, name, PH_ROOT_NAME_MAX + 1) == 0)
            return e;
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
    if (!h)
        return ph_err(PHEAP_EINVAL, "pheap_root_set: heap is NULL");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_root_set");
    if (!name_ok(name))
        return bad_name(name);
    if (h->readonly)
        return ph_err(PHEAP_ERDONLY, "pheap_root_set: heap opened read-only");
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
    pthread_mutex_lock(&h->root_lock);
    ph_root_entry *e = find(h, name);
    if (e && off)
        ph_persist_store64(&h->sp.persist, c, &e->xoff, off);
    else if (e)
        ph_persist_store64(&h->sp.persist, c, &e->xused, 0);
    else if (off) {
        for (unsigned i = 0; i < PH_ROOTS_MAX && !e; i++)
            if (ph_load(&h->roots[i].xused) == 0)
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
        }
    }
    pthread_mutex_unlock(&h->root_lock);
    return rc;
}

ph_export pheap_off pheap_root_get(pheap *h, const char *name)
{
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
    pthread_mutex_lock(&h->root_lock);
    ph_root_entry *e = find(h, name);
    pheap_off off = e ? ph_load(&e->xoff) : 0;
    pthread_mutex_unlock(&h->root_lock);
    if (!e)
        ph_err(PHEAP_ENOENT, "no root named '%s'", name);
    return off;
}

ph_export unsigned pheap_root_count(pheap *h)
{
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
        n += ph_load(&h->roots[i].xused) == 1;
    return n;
}

ph_export int pheap_root_at(pheap *h, unsigned idx, char *name, pheap_off *off)
{
    if (!h || !name || !off)
        return ph_err(PHEAP_EINVAL, "pheap_root_at: NULL argument");
    if (ph_heap_inherited(h))
        return ph_heap_forked("pheap_root_at");
    pthread_mutex_lock(&h->root_lock);
    int rc = PHEAP_ENOENT;
    for (unsigned i = 0, seen = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        if (ph_load(&e->xused) != 1 || seen++ != idx)
            continue;
        memcpy(name, e->name, PH_ROOT_NAME_MAX);
        name[PH_ROOT_NAME_MAX] = '\0';
        *off = ph_load(&e->xoff);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&h->root_lock);
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
        const char *why = NULL;
        if (used > 1)
            why = "commit word is neither 0 nor 1";
        else if (used == 0)
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
                if (ph_load(&h->roots[j].xused) == 1 &&
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
 * 0 or 1, and for a used entry a terminated name not used twice and an
 * offset of 0 or within the file's data region.  (A root naming a freed
 * block is the program's doing, not damage: pheap_check reports it.)
 * PHEAP_ECORRUPT naming the entry, or 0. */
int ph_root_open_check(pheap *h)
{
    for (unsigned i = 0; i < PH_ROOTS_MAX; i++) {
        ph_root_entry *e = &h->roots[i];
        uint64_t used = ph_load(&e->xused), off = ph_load(&e->xoff);
        const char *why = NULL;
        if (used > 1)
            why = "its commit word is neither 0 nor 1";
        else if (!used)
            continue;
        else if (!e->name[0] || memchr(e->name, 0, sizeof(e->name)) == NULL)
            why = "its name is empty or not terminated";
        else if (off && (off < h->sp.data_off || off >= ph_space_size(&h->sp)))
            why = "its offset is outside the data region";
        for (unsigned j = i + 1; j < PH_ROOTS_MAX && !why; j++)
            if (ph_load(&h->roots[j].xused) == 1 &&
                strncmp(h->roots[j].name, e->name, sizeof(e->name)) == 0)
                why = "its name is used twice";
        if (why)
            return ph_err(PHEAP_ECORRUPT, "root entry %u is damaged: %s", i, why);
    }
    return 0;
}
