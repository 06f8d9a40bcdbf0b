/*
 * addresses.c -- the open heaps by address (pheap_of): which handle's data
 * region, in the program's view, holds an address.  The C++ allocator asks
 * at every allocation, so a lookup takes no lock; opens and closes write
 * under one.
 *
 * A slot is guarded by a sequence word (odd while it is written), so that a
 * lookup never pairs one heap's range with another's handle when a slot is
 * reused.  The table grows by doubling into a new array; the old arrays are
 * kept until the process ends (a lookup may still be reading one), which
 * costs at most as much again as the largest table.
 */
#include <pthread.h>
#include <stdlib.h>

#include "heap/heap.h"
#include "util/error.h"

typedef struct span {
    uint64_t seq;            /* odd while the slot is written */
    uintptr_t lo, hi;        /* the data region, up to max_size */
    pheap *h;                /* NULL: free */
} span;

typedef struct span_table {
    size_t cap;
    struct span_table *older; /* kept: lookups may be reading it */
    span v[];
} span_table;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static span_table *table;    /* the current one (acquire/release) */
static size_t used;          /* slots ever used, <= table->cap (acquire/release) */

/* A sequence lock without fences: each field is stored with release, so a
 * lookup that loads a new value (with acquire) sees the odd sequence word
 * stored before it, and its second load of that word differs from its
 * first. */
static void write_slot(span *s, uintptr_t lo, uintptr_t hi, pheap *h)
{
    uint64_t q = ph_load_relaxed(&s->seq);
    __atomic_store_n(&s->seq, q + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&s->lo, lo, __ATOMIC_RELEASE);
    __atomic_store_n(&s->hi, hi, __ATOMIC_RELEASE);
    __atomic_store_n(&s->h, h, __ATOMIC_RELEASE);
    __atomic_store_n(&s->seq, q + 2, __ATOMIC_RELEASE);
}

/* A table of twice the slots, holding the current one's: 0 or ENOMEM. */
static int grow(void)
{
    size_t cap = table ? table->cap * 2 : 16;
    span_table *t = calloc(1, sizeof(*t) + cap * sizeof(span));
    if (!t)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    t->cap = cap;
    t->older = table;
    for (size_t i = 0; table && i < used; i++)
        t->v[i] = (span){0, table->v[i].lo, table->v[i].hi, table->v[i].h};
    __atomic_store_n(&table, t, __ATOMIC_RELEASE);
    return 0;
}

/* fork() while another thread writes the table: the child's copy of the
 * lock would stay held (and a slot half written) in it.  The lock is taken
 * across fork, so the child's table is whole and its lock free. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&lock);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&lock);
}

static void atfork_init(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

int ph_addresses_add(pheap *h)
{
    pthread_once(&atfork_once, atfork_init);
    uintptr_t lo = (uintptr_t)h->sp.view + h->sp.data_off;
    uintptr_t hi = (uintptr_t)h->sp.view + h->sp.reserve;
    int rc = 0;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < used && table->v[i].h)
        i++;
    if (i == used && (!table || used == table->cap))
        rc = grow();
    if (!rc) {
        write_slot(&table->v[i], lo, hi, h);
        if (i == used) /* after the slot: a lookup that sees it sees it whole */
            __atomic_store_n(&used, used + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Cleared in the older tables too: a lookup that loaded one before it
 * grew must not find a closed heap there. */
void ph_addresses_remove(pheap *h)
{
    pthread_mutex_lock(&lock);
    for (span_table *t = table; t; t = t->older)
        for (size_t i = 0; i < t->cap && i < used; i++)
            if (t->v[i].h == h)
                write_slot(&t->v[i], 0, 0, NULL);
    pthread_mutex_unlock(&lock);
}

ph_export pheap *pheap_of(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    size_t n = __atomic_load_n(&used, __ATOMIC_ACQUIRE); /* then the table that holds them */
    span_table *t = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!t || !addr)
        return NULL;
    if (n > t->cap)
        n = t->cap;
    for (size_t i = 0; i < n; i++) {
        span *s = &t->v[i];
        for (;;) {
            uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
            if (q & 1)
                continue; /* being written: a few stores */
            pheap *h = __atomic_load_n(&s->h, __ATOMIC_ACQUIRE);
            uintptr_t lo = __atomic_load_n(&s->lo, __ATOMIC_ACQUIRE);
            uintptr_t hi = __atomic_load_n(&s->hi, __ATOMIC_ACQUIRE);
            if (__atomic_load_n(&s->seq, __ATOMIC_RELAXED) != q)
                continue;
            if (h && a >= lo && a < hi)
                return h;
            break;
        }
    }
    return NULL;
}
