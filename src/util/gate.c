/*
 * gate.c -- the call gate (gate.h).
 *
 * Each thread that ever entered a call owns a record on a list that never
 * shrinks while the process runs: a thread's exit puts its record on a
 * free list for the next thread (the records are a few per thread that
 * ever ran at once).  The stopper reads the `active` word of every record
 * on the list.
 */
#include "util/gate.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

typedef struct gate_rec {
    uint64_t active;             /* inside a call (seq_cst store on entry) */
    unsigned depth;              /* nesting, the owning thread's only */
    struct gate_rec *next;       /* on the list of every record */
    struct gate_rec *next_free;  /* on the free list, under list_lock */
} __attribute__((aligned(64))) gate_rec;

unsigned ph_gate_in_use;

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static gate_rec *all_recs;       /* every record; pushed under list_lock, read by stoppers */
static gate_rec *free_recs;

static pthread_mutex_t stop_lock = PTHREAD_MUTEX_INITIALIZER;  /* one stop at a time */
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cv = PTHREAD_COND_INITIALIZER;
static uint64_t stopped;         /* entries wait while set */

static __thread gate_rec *self;
static pthread_key_t rec_key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void rec_release(void *arg)
{
    gate_rec *r = arg;
    if (!r)
        return;
    pthread_mutex_lock(&list_lock);
    ph_store(&r->active, 0);
    r->depth = 0;
    r->next_free = free_recs;
    free_recs = r;
    pthread_mutex_unlock(&list_lock);
    if (self == r)
        self = NULL;
}

static void fork_prepare(void)
{
    pthread_mutex_lock(&list_lock);
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&list_lock);
}

/* The child has one thread: the forking one.  A stop in progress in the
 * parent belongs to a thread the child does not have, and so do the other
 * records' calls. */
static void fork_child(void)
{
    for (gate_rec *r = all_recs; r; r = r->next)
        if (r != self)
            ph_store_relaxed(&r->active, 0);
    pthread_mutex_init(&stop_lock, NULL);
    pthread_mutex_init(&wait_lock, NULL);
    pthread_cond_init(&wait_cv, NULL);
    ph_store_relaxed(&stopped, 0);
    pthread_mutex_unlock(&list_lock);
}

static void init_once(void)
{
    pthread_key_create(&rec_key, rec_release);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void ph_gate_use(void)
{
    pthread_once(&once, init_once);
    ph_store(&ph_gate_in_use, 1);
}

static gate_rec *own_record(void)
{
    pthread_mutex_lock(&list_lock);
    gate_rec *r = free_recs;
    if (r) {
        free_recs = r->next_free;
    } else if ((r = aligned_alloc(64, sizeof(*r))) != NULL) {
        *r = (gate_rec){0};
        r->next = all_recs;
        __atomic_store_n(&all_recs, r, __ATOMIC_SEQ_CST); /* see ph_gate_stop */
    }
    pthread_mutex_unlock(&list_lock);
    if (r)
        pthread_setspecific(rec_key, r); /* may run in another key's destructor: then again */
    return self = r;
}

/* Publishes the record active, once no stop is in progress. */
static void activate(gate_rec *r)
{
    for (;;) {
        __atomic_store_n(&r->active, 1, __ATOMIC_SEQ_CST);
        if (ph_likely(!__atomic_load_n(&stopped, __ATOMIC_SEQ_CST)))
            return;
        ph_store(&r->active, 0);
        pthread_mutex_lock(&wait_lock);
        while (ph_load(&stopped))
            pthread_cond_wait(&wait_cv, &wait_lock);
        pthread_mutex_unlock(&wait_lock);
    }
}

int ph_gate_enter_slow(void)
{
    gate_rec *r = self ? self : own_record();
    if (!r)
        return 0; /* out of memory: the call runs ungated (a checkpoint may see it half) */
    if (r->depth++ == 0)
        activate(r);
    return 1;
}

int ph_gate_suspend(void)
{
    if (!self || !self->depth)
        return 0;
    ph_store(&self->active, 0);
    return 1;
}

void ph_gate_resume(int suspended)
{
    if (suspended)
        activate(self);
}

void ph_gate_leave_slow(void)
{
    gate_rec *r = self;
    if (r && --r->depth == 0)
        ph_store(&r->active, 0);
}

int ph_gate_helper_begin(void)
{
    if (!ph_load_relaxed(&ph_gate_in_use))
        return 0;
    gate_rec *r = self ? self : own_record();
    if (!r)
        return 0;
    r->depth++; /* inside, not active: see gate.h */
    return 1;
}

void ph_gate_helper_end(int *token)
{
    if (*token && self)
        self->depth--;
}

unsigned ph_gate_depth(void)
{
    return self ? self->depth : 0;
}

void ph_gate_stop(void)
{
    /* The caller's own call is at a point a crash may see (it is about to
     * copy the heap): it does not count while it waits for another stop. */
    (void)ph_gate_suspend();
    pthread_mutex_lock(&stop_lock);
    pthread_mutex_lock(&wait_lock);
    __atomic_store_n(&stopped, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&wait_lock);
    /* A record pushed after this load belongs to a thread whose entry
     * follows `stopped` in the single order of sequentially consistent
     * operations: it reads `stopped` set and waits. */
    for (gate_rec *r = __atomic_load_n(&all_recs, __ATOMIC_SEQ_CST); r; r = r->next) {
        if (r == self)
            continue;
        for (unsigned spins = 0; __atomic_load_n(&r->active, __ATOMIC_SEQ_CST); spins++)
            if (spins > 64)
                sched_yield();
    }
}

void ph_gate_start(void)
{
    pthread_mutex_lock(&wait_lock);
    ph_store(&stopped, 0);
    pthread_cond_broadcast(&wait_cv);
    pthread_mutex_unlock(&wait_lock);
    pthread_mutex_unlock(&stop_lock);
    ph_gate_resume(self && self->depth); /* back inside the caller's call */
}
