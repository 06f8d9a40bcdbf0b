/*
 * names_tx.c -- names inside transactions: pheap_alloc_named* and
 * pheap_free_named between pheap_tx_begin and the commit become part of
 * the transaction.  Until the commit the directory is not written: the
 * transaction holds the name in a volatile table (so that no other thread
 * creates or removes it meanwhile) and logs the block's change like
 * pheap_tx_alloc and pheap_tx_free do.  The commit places the new entries
 * and logs every directory line it changes as REDO records.
 *
 * Crash protocol (with tx.c's, which it rides on):
 *   call    create: a block reserved and initialised, its ALLOC record;
 *           remove: the named block's FREE record.  Log room is kept for
 *           the commit's records.  Nothing of the directory is written.
 *   commit  the directory's write lock; segments without room for the new
 *           entries rebuilt (each rebuild is durable on its own and
 *           changes no name); EMPTY lines before each new entry turned
 *           into FREE fillers (free space either way); one REDO record per
 *           new entry (its lines, the head's xref naming the block, each
 *           xref its next version) and per removed entry (its xref :=
 *           FREE); then tx.c's F1 (COMMIT record: committed), F2 (the
 *           lines and the bitmaps), F3 (retired); the lock released.
 *   Recovery rolls the log back (the directory was not changed) or forward
 *   (the REDO records write the lines, the ALLOC and FREE records the
 *   bitmaps), as for any transaction: the name and its block appear, or
 *   go, together.  No other thread changes those lines or frees their
 *   segment between the placement and the retirement (the lock), so a
 *   roll-forward never writes over what a later change owns.  The records
 *   are kinds that format 1.3 defined: a build that knows transactions
 *   recovers these logs, and the format is unchanged.
 *
 * What other threads see: the directory as committed.  A name that an open
 * transaction creates or removes is held: another thread's lookup finds it
 * as it was before the transaction, and its create or remove is refused
 * with PHEAP_EBUSY until the transaction ends.  In a heap shared between
 * processes the hold is also entered in the process table's hold slots
 * (format/layout.h, ph_procs_hold), where the other processes' creates and
 * removes look.  A dead process's holds hold until its takeover has rolled
 * its transaction back (its undo images may cover the named block): a
 * create or remove that meets one takes the dead over first, and the
 * takeover lets the holds go after the rollback.  (Its transaction cannot
 * be committed: a commit holds the directory's lock through its
 * retirement, and a lock taken over from a dead holder is repaired first.)
 */
#include <stdlib.h>
#include <string.h>

#include "heap/names.h"
#include "heap/share.h"
#include "heap/tx_int.h"
#include "util/error.h"

#define OFF_MASK 0x0000fffffffffff8ull

/* A name an open transaction creates or removes (or both: replaced). */
typedef struct ph_name_hold {
    struct ph_name_hold *next;  /* in its bucket of the held table */
    const ph_tx *owner;
    uint64_t hash;
    uint64_t removes;           /* block of the committed entry it removes, or 0 */
    uint64_t block;             /* block of the entry it creates, or 0 */
    uint64_t size;              /* bytes asked for that block */
    int creating;               /* the block is being made (its initialiser runs) */
    ph_name_ref at;             /* commit: where the new entry goes */
    ph_names_seg *removed_seg;  /* commit: the segment of the removed entry, or NULL */
    int pslot;                  /* a shared heap: its slot of the process table's holds, or -1 */
    unsigned newly;             /* commit: EMPTY lines the new entry and its fillers take */
    size_t len;
    char name[];
} ph_name_hold;

/* ---- the holds of a shared heap's processes (the lock between processes held) ------ */

/* 1 when slot s is held by another process, dead or alive (*dead). */
static int held_by_any_other(ph_names *n, const ph_procs_hold *s, int *dead)
{
    const ph_plock_owner *o = n->powner;
    uint64_t who = ph_load_relaxed(&s->xowner);
    if (!who || who == o->me)
        return 0;
    if (o->dead(o->ctx, who))
        *dead = 1;
    return 1;
}

/* 1 when another process (*dead: one of them dead) holds slot 0 or the
 * slot of `hash`. */
static int held_scan(ph_names *n, uint64_t hash, int *dead)
{
    if (held_by_any_other(n, &n->pholds[0], dead)) /* every name */
        return 1;
    for (unsigned i = 1; i < PH_PROCS_HOLDS; i++)
        if (ph_load_relaxed(&n->pholds[i].xhash) == hash &&
            held_by_any_other(n, &n->pholds[i], dead))
            return 1;
    return 0;
}

int ph_names_held_elsewhere(ph_names *n, uint64_t hash)
{
    int dead = 0;
    if (!n->pholds || !held_scan(n, hash, &dead))
        return 0;
    if (!dead)
        return 1;
    ph_share_take_over_dead_held(n->heap); /* rolled back, then its holds let go */
    return held_scan(n, hash, &dead);
}

/* Slot i made this process's: a free one (1..127), or slot 0 when it is
 * free or this process's already. */
static int take_slot(ph_names *n, unsigned i)
{
    ph_procs_hold *s = &n->pholds[i];
    uint64_t who = ph_load_relaxed(&s->xowner);
    if (who == n->powner->me)
        return i == 0;
    return !who &&
           __atomic_compare_exchange_n(&s->xowner, &who, n->powner->me, 0, __ATOMIC_ACQ_REL,
                                       __ATOMIC_RELAXED); /* (a takeover may let it go first) */
}

/* A free slot of 1..127 for x's hold, -1 when none is free. */
static int free_slot(ph_names *n, const ph_name_hold *x)
{
    for (unsigned i = 1; i < PH_PROCS_HOLDS; i++)
        if (!ph_load_relaxed(&n->pholds[i].xowner) && take_slot(n, i)) {
            ph_store(&n->pholds[i].xhash, x->hash);
            return (int)i;
        }
    return -1;
}

/* Enters x's hold in a free slot of its own -- after taking over the dead
 * processes, whose slots their takeovers let go, when none is free -- or
 * else under slot 0, which holds every name (PHEAP_EBUSY when another live
 * process has that).  While this process holds slot 0, a further hold
 * joins it: no scan and no takeover at each name of a large transaction. */
static int claim(ph_names *n, ph_name_hold *x, const char *call)
{
    x->pslot = -1;
    if (!n->pholds)
        return 0;
    if (!n->pall && (x->pslot = free_slot(n, x)) < 0) {
        ph_share_take_over_dead_held(n->heap);
        x->pslot = free_slot(n, x);
    }
    if (x->pslot > 0)
        return 0;
    if (!take_slot(n, 0))
        return ph_err(PHEAP_EBUSY, "%s: the name '%s' cannot be held: the open transactions of "
                      "the processes sharing the heap hold more names than the process table "
                      "has room for (%u), and another process's hold all names until they end",
                      call, x->name, PH_PROCS_HOLDS - 1);
    n->pall++;
    x->pslot = 0;
    return 0;
}

static void release(ph_names *n, ph_name_hold *x)
{
    uint64_t me = n->powner ? n->powner->me : 0;
    if (n->pholds && (x->pslot > 0 || (x->pslot == 0 && --n->pall == 0)))
        __atomic_compare_exchange_n(&n->pholds[x->pslot].xowner, &me, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED); /* (fails where a takeover took this
                                                          process for dead) */
    x->pslot = -1;
}

void ph_names_holds_drop(ph_names *n, uint64_t who)
{
    for (unsigned i = 0; n && n->pholds && i < PH_PROCS_HOLDS; i++) {
        uint64_t w = who;
        __atomic_compare_exchange_n(&n->pholds[i].xowner, &w, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
    }
}

/* ---- the held table (write lock held to change it, read lock to read) -------------- */

static ph_name_hold *held_find(ph_names *n, uint64_t hash, const char *name, size_t len)
{
    if (!n->cap)
        return NULL;
    for (ph_name_hold *x = n->held[hash & (n->cap - 1)]; x; x = x->next)
        if (x->hash == hash && x->len == len && memcmp(x->name, name, len) == 0)
            return x;
    return NULL;
}

static int held_add(ph_names *n, ph_name_hold *x)
{
    if (n->nheld >= n->cap) { /* at most one per bucket on average */
        size_t cap = n->cap ? 2 * n->cap : 64;
        ph_name_hold **v = calloc(cap, sizeof(*v));
        if (!v)
            return PHEAP_ENOMEM;
        for (size_t i = 0; i < n->cap; i++)
            for (ph_name_hold *y = n->held[i], *next; y; y = next) {
                next = y->next;
                y->next = v[y->hash & (cap - 1)];
                v[y->hash & (cap - 1)] = y;
            }
        free(n->held);
        n->held = v;
        n->cap = cap;
    }
    ph_name_hold **b = &n->held[x->hash & (n->cap - 1)];
    x->next = *b;
    *b = x;
    n->nheld++;
    return 0;
}

static void held_del(ph_names *n, ph_name_hold *x)
{
    release(n, x);
    ph_name_hold **p = &n->held[x->hash & (n->cap - 1)];
    while (*p != x)
        p = &(*p)->next;
    *p = x->next;
    n->nheld--;
}

/* A new hold of the transaction, in the table and in tx->names; NULL with
 * the error set when memory ran out. */
static ph_name_hold *hold(ph_names *n, ph_tx *tx, uint64_t hash, const char *name, size_t len,
                          const char *call)
{
    ph_name_hold *x = calloc(1, sizeof(*x) + len + 1);
    if (!x) {
        ph_err(PHEAP_ENOMEM, "out of memory for a name of the transaction");
        return NULL;
    }
    *x = (ph_name_hold){.owner = tx, .hash = hash, .len = len};
    memcpy(x->name, name, len);
    if (claim(n, x, call)) {
        free(x);
        return NULL;
    }
    if (held_add(n, x) == 0 && VEC_PUSH(tx->names, x) == 0)
        return x;
    if (n->nheld && held_find(n, hash, name, len) == x)
        held_del(n, x);
    else
        release(n, x);
    free(x);
    ph_err(PHEAP_ENOMEM, "out of memory for a name of the transaction");
    return NULL;
}

/* Lets go of a hold that no longer changes anything (write lock held). */
static void unhold(ph_names *n, ph_tx *tx, ph_name_hold *x)
{
    for (size_t i = 0; i < tx->names.n; i++)
        if (tx->names.v[i] == x) {
            memmove(&tx->names.v[i], &tx->names.v[i + 1],
                    (tx->names.n - i - 1) * sizeof(*tx->names.v));
            tx->names.n--;
            break;
        }
    held_del(n, x);
    free(x);
}

static int busy(const char *call, const char *name)
{
    return ph_err(PHEAP_EBUSY, "%s: the name '%s' is created or removed by another thread's "
                  "(or process's) open transaction", call, name);
}

int ph_names_tx_held(pheap *h, uint64_t hash, const char *name, size_t len, int *mine,
                     uint64_t *off)
{
    ph_name_hold *x = h->names->nheld ? held_find(h->names, hash, name, len) : NULL;
    if (!x)
        return 0;
    ph_thread *t = ph_thread_get(h);
    *mine = t && t->tx == x->owner;
    *off = x->block;
    return 1;
}

/* ---- the calls --------------------------------------------------------------------- */

/* Takes the write lock and finds the hold of `name`: NULL when none;
 * *rc PHEAP_EBUSY when another thread's transaction holds it, else 0. */
static ph_name_hold *lock_hold(ph_names *n, const ph_tx *tx, uint64_t hash, const char *name,
                               size_t len, const char *call, int *rc)
{
    ph_names_wrlock(n);
    ph_name_hold *x = held_find(n, hash, name, len);
    *rc = (x && x->owner != tx) || (!x && ph_names_held_elsewhere(n, hash)) ? busy(call, name)
                                                                              : 0;
    return x;
}

pheap_off ph_names_tx_create(pheap *h, ph_thread *t, const char *name, size_t len, size_t size,
                             const ph_block_init *init)
{
    const char *call = "pheap_alloc_named";
    ph_tx *tx = t->tx;
    ph_names *n = h->names;
    uint64_t hash = ph_names_hash(n->seed, name, len), off = 0;
    ph_name_ref ref;
    int rc;
    ph_name_hold *x = lock_hold(n, tx, hash, name, len, call, &rc);
    if (!rc && (x ? x->block || x->creating : ph_names_find(h, hash, name, len, &ref)))
        rc = ph_err(PHEAP_EEXIST, "%s: the name '%s' exists already", call, name);
    else if (!rc && !x && !(x = hold(n, tx, hash, name, len, call)))
        rc = pheap_errno();
    if (!rc)
        x->creating = 1;
    ph_names_unlock(n);
    if (rc)
        return 0;
    /* The initialiser runs without the lock: it may look names up. */
    rc = ph_tx_keep_room(h, t, tx, ph_names_entry_lines(len) * PH_LINE_SIZE);
    if (!rc)
        rc = ph_tx_take(h, t, tx, size, init, &off, call);
    if (rc && (tx->aborted || !tx->depth))
        return 0; /* the rollback let go of every hold */
    ph_names_wrlock(n);
    x->creating = 0;
    x->block = rc ? 0 : off;
    x->size = size;
    if (rc && !x->removes)
        unhold(n, tx, x);
    ph_names_unlock(n);
    return rc ? 0 : off;
}

int ph_names_tx_remove(pheap *h, ph_thread *t, const char *name, size_t len)
{
    const char *call = "pheap_free_named";
    ph_tx *tx = t->tx;
    ph_names *n = h->names;
    uint64_t hash = ph_names_hash(n->seed, name, len), off = 0;
    ph_name_ref ref;
    int rc;
    ph_name_hold *x = lock_hold(n, tx, hash, name, len, call, &rc);
    if (rc)
        x = NULL; /* held by another thread's transaction: refused */
    else if (x ? !x->block : !ph_names_find(h, hash, name, len, &ref))
        rc = ph_err(PHEAP_ENOENT, "%s: no object named '%s'", call, name);
    else if (!x && !ph_names_off_ok(h, off = ph_load(&ref.head->xref) & OFF_MASK))
        rc = ph_err(PHEAP_ECORRUPT, "%s: the directory entry names %llu, outside the data "
                    "region: the directory is damaged (see pheap_check)", call,
                    (unsigned long long)off);
    else if (!x && !(x = hold(n, tx, hash, name, len, call)))
        rc = pheap_errno();
    else if (x->block) /* made by this transaction: its block goes back at the commit */
        off = x->block;
    else
        x->removes = off;
    ph_names_unlock(n);
    if (rc)
        return rc;
    int made_here = x->block == off;
    if (!made_here)
        rc = ph_tx_keep_room(h, t, tx, 8);
    if (!rc && (rc = ph_tx_give(h, t, tx, off, call)) != 0 && !tx->aborted)
        rc = ph_err(PHEAP_ENOTLIVE, "%s: the block %llu named '%s' is no live block (freed by "
                    "pheap_free?): nothing changes in a transaction; outside one, "
                    "pheap_free_named removes the name alone", call, (unsigned long long)off,
                    name);
    if (tx->aborted)
        return rc;
    ph_names_wrlock(n);
    if (rc) {
        if (!made_here)
            x->removes = 0;
    } else if (made_here) {
        x->block = 0;
    }
    if (!x->block && !x->removes)
        unhold(n, tx, x);
    ph_names_unlock(n);
    return rc;
}

/* ---- the commit -------------------------------------------------------------------- */

static uint64_t off_of(const pheap *h, const void *p)
{
    return (uint64_t)((const char *)p - h->sp.base);
}

/* Places every new entry of the transaction (a rebuild moves the entries
 * placed before it: then all are placed again). */
static int place_all(pheap *h, ph_thread *t, ph_tx *tx, ph_names_taken *taken)
{
    for (unsigned pass = 0;; pass++) {
        size_t nt = 0;
        int rebuilt = 0, rc = 0;
        for (size_t i = 0; i < tx->names.n && !rc && !rebuilt; i++) {
            ph_name_hold *x = tx->names.v[i];
            if (!x->block)
                continue;
            unsigned k = ph_names_entry_lines(x->len);
            rc = ph_names_room(h, t, x->hash, k, taken, nt, &x->at, &rebuilt);
            taken[nt++] = (ph_names_taken){x->at.seg, x->at.line, k};
        }
        if (rc || !rebuilt)
            return rc;
        if (pass == 64 + tx->names.n)
            return ph_err(PHEAP_ENOSPC, "no room for the transaction's names in the directory");
    }
}

int ph_names_tx_prepare(pheap *h, ph_thread *t, ph_tx *tx)
{
    ph_names *n = h->names;
    ph_names_taken *taken = malloc(tx->names.n * sizeof(*taken));
    int rc = taken ? ph_tx_redo_slots(tx, tx->names.n * 2)
                   : ph_err(PHEAP_ENOMEM, "pheap_tx_commit: out of memory");
    if (rc) {
        free(taken);
        return rc;
    }
    ph_names_wrlock(n);
    if ((rc = place_all(h, t, tx, taken)) != 0) {
        ph_names_unlock(n);
        free(taken);
        return rc;
    }
    free(taken);
    /* Fillers first, then the images: a filler may be a line that another
     * new entry takes, whose xref version the image follows. */
    for (size_t i = 0; i < tx->names.n; i++) {
        ph_name_hold *x = tx->names.v[i];
        if (x->block)
            x->newly = ph_names_fill(h, &t->pctx, x->at.seg, ph_names_home(x->at.seg, x->hash),
                                     x->at.line);
    }
    for (size_t i = 0; i < tx->names.n; i++) {
        ph_name_hold *x = tx->names.v[i];
        ph_name_ref old;
        if (x->removes && ph_names_find(h, x->hash, x->name, x->len, &old) &&
            (ph_load(&old.head->xref) & OFF_MASK) == x->removes) {
            uint64_t nv = ph_name_next_version(ph_load(&old.head->xref)) | PH_NAME_FREE;
            ph_tx_redo_own(tx, off_of(h, &old.head->xref), &nv, 8);
            x->removed_seg = old.seg;
        }
        if (x->block) {
            unsigned k = ph_names_entry_lines(x->len);
            ph_name_line img[5];
            x->newly += ph_names_empties(x->at.seg, x->at.line, k);
            ph_names_image(x->at.seg, x->at.line, x->hash, x->name, x->len, x->size, x->block,
                           img);
            ph_tx_redo_own(tx, off_of(h, x->at.head), img, k * PH_LINE_SIZE);
        }
    }
    return 0;
}

void ph_names_tx_done(pheap *h, ph_thread *t, ph_tx *tx, int committed)
{
    ph_names *n = h->names;
    if (!tx->names.n)
        return;
    if (n && !committed)
        ph_names_wrlock(n);
    for (size_t i = 0; i < tx->names.n; i++) {
        ph_name_hold *x = tx->names.v[i];
        if (committed && x->removed_seg) {
            x->removed_seg->hint_live -= ph_names_entry_lines(x->len);
            ph_names_changed(h, &t->pctx);
        }
        if (committed && x->block) {
            x->at.seg->hint_used += x->newly;
            x->at.seg->hint_live += ph_names_entry_lines(x->len);
            ph_names_changed(h, &t->pctx);
        }
        if (n)
            held_del(n, x);
        free(x);
    }
    tx->names.n = 0;
    if (n)
        ph_names_unlock(n);
}
