/*
 * names.h -- the named-object directory (format: format/layout.h, "named-
 * object directory").  names_dir.c owns the structure: hashing, segments,
 * searching, placing entries, rebuilding segments and finishing a rebuild
 * after a crash; names.c holds the public calls, iteration, the check and
 * the roots the tracer follows.
 *
 * Locking: one read-write lock per open heap.  Lookups and iteration read;
 * creating, removing and rebuilding write.  Every durable step runs under
 * the write lock.  The initialiser of a pheap_alloc_named_init outside a
 * transaction runs under it too: the thread that holds it reads without
 * taking it again (ph_names_rdlock), and may not create or remove names
 * (name_writer, names.c).
 */
#ifndef PH_HEAP_NAMES_H
#define PH_HEAP_NAMES_H

#include <pthread.h>
#include <stdint.h>

#include "format/layout.h"
#include "heap/heap.h"
#include "util/plock.h"

/* Locking: writers hold `lock` for writing (ph_names_wrlock) and make the
 * sequence (*seqp) odd meanwhile; pheap_lookup reads without the lock
 * while the sequence is even and unchanged around its read, and takes the
 * lock for reading otherwise (a seqlock: a lookup issues no locked
 * instruction, so the cache miss of one lookup overlaps the next).  Every
 * other reader takes the lock for reading.
 *
 * In a heap shared between processes (ph_names_share) the sequence is the
 * process table's, and readers and writers alike take the table's lock of
 * the directory (util/plock.h) after `lock`: one thread of one process at
 * a time.  A lock taken over from a dead process is repaired first
 * (`repair`: the dead process taken over, a rebuild it cut short finished
 * or undone). */
typedef struct ph_names {
    pthread_rwlock_t lock;
    uint64_t xseq;              /* odd while a writer holds `lock` (atomic) */
    uint64_t *seqp;             /* the sequence readers watch: &xseq, or the process table's */
    uint64_t *plock;            /* a shared heap's lock between processes, else NULL */
    const ph_plock_owner *powner;
    void (*repair)(pheap *h);   /* after a dead process's lock was taken over */
    pheap *heap;
    int wheld;                  /* a writer holds `lock`: written by that writer only */
    uint64_t xwriter;           /* that writer's pthread_self(), 0 when none (atomic) */
    ph_names_header *hdr;       /* in the mapping */
    uint64_t *dirs[2];          /* the two directory arrays, in the mapping */
    uint64_t seed;              /* hash seed, from the heap's uuid */
    uint64_t stamp;             /* this open's identity, for the segments' count hints */
    uint64_t lazy[PH_LANES_MAX / 64]; /* lanes that bound a name since their entries were
                                     last retired durably (names_dir.c, flush_lazy) */
    unsigned changes;           /* creates and removes since then */
    struct ph_name_hold **held; /* names held by open transactions (names_tx.c): */
    size_t nheld, cap;          /*   chained hash table by hash; under `lock` */
    ph_procs_hold *pholds;      /* a shared heap: the holds of every process's transactions
                                   (PH_PROCS_HOLDS_AT), under `plock`; else NULL */
    size_t pall;                /*   this process's holds that slot 0 (every name) covers */
} ph_names;

/* 1 when the calling thread holds the write lock: it runs the initialiser
 * of a pheap_alloc_named_init.  (Another thread's id is never read as this
 * one's, and this one's store of 0 comes before its unlock.) */
static inline int ph_names_mine(ph_names *n)
{
    return __atomic_load_n(&n->xwriter, __ATOMIC_RELAXED) == (uint64_t)pthread_self();
}

/* The sequence made odd (a new value) before a change, and even after. */
static inline void ph_names_seq_begin(ph_names *n)
{
    __atomic_store_n(n->seqp, (__atomic_load_n(n->seqp, __ATOMIC_RELAXED) + 1) | 1,
                     __ATOMIC_RELAXED);
    ph_seq_write(); /* odd before any change */
}

static inline void ph_names_seq_end(ph_names *n)
{
    __atomic_store_n(n->seqp, __atomic_load_n(n->seqp, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
}

/* A shared heap's lock between processes (names_dir.c), taken after
 * `lock` and before the sequence changes. */
void ph_names_plock(ph_names *n);

static inline void ph_names_wrlock(ph_names *n)
{
    pthread_rwlock_wrlock(&n->lock);
    if (ph_unlikely(n->plock != NULL))
        ph_names_plock(n);
    n->wheld = 1;
    __atomic_store_n(&n->xwriter, (uint64_t)pthread_self(), __ATOMIC_RELAXED);
    ph_names_seq_begin(n);
}

/* Releases `lock`, held for reading or for writing. */
static inline void ph_names_unlock(ph_names *n)
{
    if (n->wheld) {
        n->wheld = 0;
        __atomic_store_n(&n->xwriter, 0, __ATOMIC_RELAXED);
        ph_names_seq_end(n); /* even after every change */
    }
    if (ph_unlikely(n->plock != NULL))
        ph_plock_unlock(n->plock);
    pthread_rwlock_unlock(&n->lock);
}

/* Takes `lock` for reading: 0, to give to ph_names_rdunlock -- or 1, when
 * the calling thread holds it for writing already (an initialiser of
 * pheap_alloc_named_init reading names), and nothing is taken. */
static inline int ph_names_rdlock(ph_names *n)
{
    if (ph_names_mine(n))
        return 1;
    if (ph_unlikely(n->plock != NULL)) /* the repair of a dead holder's lock needs it: taken
                                          after `lock`, its first lookup would wait for the
                                          registry's lock while holding the directory */
        (void)ph_thread_get(n->heap);
    pthread_rwlock_rdlock(&n->lock);
    if (ph_unlikely(n->plock != NULL))
        ph_names_plock(n);
    return 0;
}

static inline void ph_names_rdunlock(ph_names *n, int mine)
{
    if (mine)
        return;
    if (ph_unlikely(n->plock != NULL))
        ph_plock_unlock(n->plock);
    pthread_rwlock_unlock(&n->lock);
}

/* A found entry: its segment and head line. */
typedef struct ph_name_ref {
    ph_names_seg *seg;
    uint64_t seg_off;
    uint32_t line;              /* index of the head among the segment's lines */
    ph_name_line *head;
} ph_name_ref;

/* An entry placed in a segment but not written yet (names_tx.c): its
 * lines are not free for another entry. */
typedef struct ph_names_taken {
    const ph_names_seg *seg;
    uint32_t pos, lines;
} ph_names_taken;

/* ---- names_dir.c ---- */
/* Sets up h->names for a heap with PH_FEAT_INCOMPAT_NAMES (else leaves it
 * NULL) and checks every segment the directory names: PHEAP_ECORRUPT with
 * the place when one is damaged.  In a shared heap (h->shared, the engine
 * built), the directory is shared first (ph_names_share) and checked under
 * its lock. */
int ph_names_open(pheap *h);

/* The directory of a heap shared between processes: its sequence and
 * lock are the process table's words *seq and *lock (owner o), `holds`
 * its table of names held by transactions; `repair` runs when the lock
 * was taken over from a dead process. */
void ph_names_share(pheap *h, uint64_t *seq, uint64_t *lock, ph_procs_hold *holds,
                    const ph_plock_owner *o, void (*repair)(pheap *h));
void ph_names_close(pheap *h);

/* Guards (ph_space_guard) every segment of the directory: at open, once
 * recovery is done (segments made later are guarded as they are made). */
void ph_names_guard(pheap *h);

/* Finishes or undoes a rebuild a crash interrupted (read-write opens: LOG
 * mode at open, GC mode after pheap_recover). */
int ph_names_recover(pheap *h, ph_thread *t);

uint64_t ph_names_hash(uint64_t seed, const char *name, size_t len);

/* 1 when a head's block offset can be a block of the data region. */
int ph_names_off_ok(const pheap *h, uint64_t off);

/* Current depth and array. */
unsigned ph_names_depth(const ph_names *n);
uint64_t *ph_names_dir(const ph_names *n);

/* The segment holding hashes with `hash`'s prefix, or NULL (no name yet). */
ph_names_seg *ph_names_seg_of(pheap *h, uint64_t hash, uint64_t *seg_off);

static inline ph_name_line *ph_names_lines(ph_names_seg *s)
{
    return (ph_name_line *)(s + 1);
}
static inline uint32_t ph_names_total(const ph_names_seg *s)
{
    return (1u << s->home_bits) + PH_NAMES_SPILL;
}
uint32_t ph_names_home(const ph_names_seg *s, uint64_t hash);

/* Lines an entry of `len` name bytes takes. */
static inline unsigned ph_names_entry_lines(size_t len)
{
    return len <= PH_NAME_HEAD_BYTES
               ? 1u
               : 1u + (unsigned)((len - PH_NAME_HEAD_BYTES + PH_NAME_CONT_BYTES - 1) /
                                 PH_NAME_CONT_BYTES);
}

static inline unsigned ph_name_kind(uint64_t xref)
{
    return (unsigned)(xref & 7);
}
static inline uint64_t ph_name_next_version(uint64_t xref)
{
    return ((xref >> 48) + 1) << 48;
}

/* 1 when line i is a head of a live entry. */
int ph_names_is_head(ph_names_seg *s, uint32_t i);
/* Name length of a head line, its line count. */
static inline unsigned ph_name_len(const ph_name_line *l)
{
    return (unsigned)(l->meta & 0xffff);
}
static inline unsigned ph_name_nlines(const ph_name_line *l)
{
    return (unsigned)(l->meta >> 16 & 0xff);
}
/* Copies the name of the head at line i into buf (PH_NAME_MAX + 1 bytes). */
void ph_names_copy_name(ph_names_seg *s, uint32_t i, char *buf);
/* CRC-32C of a head's entry as written at line i (meta's high half). */
uint32_t ph_names_entry_crc(ph_names_seg *s, uint32_t i);

/* Searches for `name`: 1 and *ref when found. */
int ph_names_find(pheap *h, uint64_t hash, const char *name, size_t len, ph_name_ref *ref);

/* Creates the entry (write lock held; the name is known absent): makes
 * room (rebuilding the segment when needed), writes it, and binds a new
 * block of `size` bytes with `init`.  0 and *block, or an error with
 * nothing changed that a reader can see. */
int ph_names_insert(pheap *h, ph_thread *t, uint64_t hash, const char *name, size_t len,
                    size_t size, const ph_block_init *init, uint64_t *block);

/* A place for an entry of k lines with `hash` (write lock held), away
 * from the lines of `taken`: *at.  A segment too loaded (its lines, those
 * of `taken` in it and k more over three quarters of its home lines) or
 * with no room where the name goes is rebuilt first, and *rebuilt set:
 * the entries of `taken` in it are no longer where they were placed.  0,
 * or the error of a rebuild (nothing a reader can see changed). */
int ph_names_room(pheap *h, ph_thread *t, uint64_t hash, unsigned k, const ph_names_taken *taken,
                  size_t ntaken, ph_name_ref *at, int *rebuilt);

/* The lines of an entry placed at `pos` of s as a create writes them
 * (img[0..k)): each xref the next version of the line's, the head's
 * naming `block`. */
void ph_names_image(ph_names_seg *s, uint32_t pos, uint64_t hash, const char *name, size_t len,
                    uint64_t size, uint64_t block, ph_name_line *img);
/* Turns the EMPTY lines in [home, pos) into FREE fillers, durable on
 * return (a fence when there were any): an entry at pos is then reached
 * from its home, and no log entry or commit record that publishes it
 * covers them, so they must be on media before it can be.  Returns how
 * many. */
unsigned ph_names_fill(pheap *h, ph_pctx *c, ph_names_seg *s, uint32_t home, uint32_t pos);
/* EMPTY lines in [pos, pos + k). */
unsigned ph_names_empties(ph_names_seg *s, uint32_t pos, unsigned k);
/* Recounts a segment's hints when another open wrote them. */
void ph_names_count(ph_names *n, ph_names_seg *s);
/* Counts one change of a name's entry word (a create or a remove): every
 * PH_NAMES_RETIRE_EVERY of them the lazily retired BIND entries are
 * retired durably (one fence). */
void ph_names_changed(pheap *h, ph_pctx *c);

/* Removes the entry at `ref` and frees its block (write lock held).  When
 * the block is no longer live (freed by pheap_free), only the name goes:
 * PHEAP_ENOTLIVE. */
int ph_names_remove(pheap *h, ph_thread *t, const ph_name_ref *ref);

/* Calls fn for every distinct segment of the directory, in hash order. */
typedef int (*ph_names_seg_fn)(void *arg, ph_names_seg *s, uint64_t seg_off);
int ph_names_each_segment(pheap *h, ph_names_seg_fn fn, void *arg);

/* ---- names_tx.c: names inside transactions ---- */
/* In the caller's open transaction: creates `name` with a block of `size`
 * bytes (`init` run on it now), or removes it with its block -- both at
 * the commit (pheap_alloc_named_init, pheap_free_named). */
pheap_off ph_names_tx_create(pheap *h, ph_thread *t, const char *name, size_t len, size_t size,
                             const ph_block_init *init);
int ph_names_tx_remove(pheap *h, ph_thread *t, const char *name, size_t len);
/* Read lock held: 1 when an open transaction holds the name -- *mine 1
 * when it is the calling thread's, and *off then the block it names for
 * that transaction (0: removed by it). */
int ph_names_tx_held(pheap *h, uint64_t hash, const char *name, size_t len, int *mine,
                     uint64_t *off);
/* A shared heap, the lock held: 1 when a transaction of another live
 * process holds a name of this hash (names are told apart by their 64-bit
 * hashes there: two names of one hash, about one pair in 2^64, hold each
 * other). */
int ph_names_held_elsewhere(ph_names *n, uint64_t hash);
/* The takeover of the dead process `who`: its holds let go. */
void ph_names_holds_drop(ph_names *n, uint64_t who);

/* ---- names.c ---- */
/* pheap_check's part: 0 or the number of problems, the first in err. */
unsigned ph_names_check(pheap *h, uint64_t *nnames, char *err, size_t errlen);
/* Open's part of it (damage only, not a name of a freed block):
 * PHEAP_ECORRUPT or 0. */
int ph_names_open_check(pheap *h);

/* The tracer's roots: every directory segment (fn with name NULL: a block
 * whose words are no references) and every named block (with its name). */
typedef void (*ph_names_root_fn)(void *arg, uint64_t off, const char *name);
void ph_names_roots(pheap *h, ph_names_root_fn fn, void *arg);

/* Named objects and directory segments, for pheap_stats. */
void ph_names_stats(pheap *h, uint64_t *names, uint64_t *segments);

#endif /* PH_HEAP_NAMES_H */
