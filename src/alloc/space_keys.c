/*
 * space_keys.c -- protection keys (PHEAP_PROTECT_KEYS, see keys.h): the
 * process's key, the keyed pages of each heap, and the write window of
 * each thread, real (PKRU) or emulated (mprotect).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc/keys.h"
#include "alloc/space.h"
#include "os/os.h"
#include "pheap.h"
#include "util/error.h"

#ifndef PKEY_DISABLE_WRITE
#define PKEY_DISABLE_WRITE 0x2
#endif

unsigned ph_keys_in_use;

static pthread_mutex_t keys_lock = PTHREAD_MUTEX_INITIALIZER;
static int hw_key = -1;

/* Emulation: the keyed heaps, and the windows open in all threads (under
 * keys_lock); each thread's own nesting depth. */
static ph_space **emu_spaces;
static size_t emu_n, emu_cap;
static unsigned emu_open;
static __thread unsigned emu_depth;

#define TOKEN_EMU_OPEN 0x100
#define TOKEN_EMU_SEAL 0x10000 /* | the depth sealed */

/* fork() under emulation: the child has one thread, the one that forked,
 * so the windows open in it are that thread's own. */
static void emu_fork_prepare(void)
{
    pthread_mutex_lock(&keys_lock);
}

static void emu_fork_parent(void)
{
    pthread_mutex_unlock(&keys_lock);
}

static void emu_protect_all(int writable);

static void emu_fork_child(void)
{
    emu_open = emu_depth ? 1 : 0;
    if (!emu_open)
        emu_protect_all(0);
    pthread_mutex_unlock(&keys_lock);
}

int ph_keys_setup(void)
{
    int rc = 0;
    pthread_mutex_lock(&keys_lock);
    if (!ph_keys_in_use) {
        /* PHEAP_KEYS_EMULATE: 1 emulates always; fallback, where the
         * hardware has no keys (test aids, keys.h). */
        const char *emu = getenv("PHEAP_KEYS_EMULATE");
        int always = emu && strcmp(emu, "1") == 0;
        int fallback = emu && strcmp(emu, "fallback") == 0;
        if (!always && (rc = ph_os_pkey_alloc(&hw_key)) == 0)
            ph_store_relaxed(&ph_keys_in_use, PH_KEYS_HW);
        else if (always || fallback) {
            rc = 0;
            pthread_atfork(emu_fork_prepare, emu_fork_parent, emu_fork_child);
            ph_store_relaxed(&ph_keys_in_use, PH_KEYS_EMULATED);
        }
    }
    pthread_mutex_unlock(&keys_lock);
    return rc;
}

static void emu_protect_range(ph_space *s, uint64_t off, uint64_t len, int writable)
{
    uint64_t pg = ph_os_page(), a = PH_ALIGN_UP(off, pg), e = PH_ALIGN_DOWN(off + len, pg);
    if (e > a)
        (void)ph_os_protect(s->view + a, e - a, writable);
}

/* The metadata below data_off of every keyed heap, writable or not
 * (keys_lock held).  Guarded blocks are not toggled: a call that writes
 * one writes below data_off as well, so a path outside every window shows
 * there, and toggling each block on every call would make a heap with many
 * names unusably slow. */
static void emu_protect_all(int writable)
{
    for (size_t i = 0; i < emu_n; i++)
        emu_protect_range(emu_spaces[i], 0, emu_spaces[i]->data_off, writable);
}

static void emu_acquire(void)
{
    pthread_mutex_lock(&keys_lock);
    if (emu_open++ == 0)
        emu_protect_all(1);
    pthread_mutex_unlock(&keys_lock);
}

static void emu_release(void)
{
    pthread_mutex_lock(&keys_lock);
    if (--emu_open == 0)
        emu_protect_all(0);
    pthread_mutex_unlock(&keys_lock);
}

int ph_window_open_slow(void)
{
    if (ph_keys_in_use == PH_KEYS_HW) {
        unsigned r = ph_os_pkey_get(hw_key);
        if (r == 0)
            return 0; /* open already */
        ph_os_pkey_set(hw_key, 0);
        return (int)r + 1;
    }
    if (emu_depth++ == 0)
        emu_acquire();
    return TOKEN_EMU_OPEN;
}

int ph_window_seal_slow(void)
{
    if (ph_keys_in_use == PH_KEYS_HW) {
        unsigned r = ph_os_pkey_get(hw_key);
        if (r & PKEY_DISABLE_WRITE)
            return 0; /* shut already */
        ph_os_pkey_set(hw_key, r | PKEY_DISABLE_WRITE);
        return (int)r + 1;
    }
    unsigned d = emu_depth;
    if (d == 0)
        return 0;
    emu_depth = 0;
    emu_release();
    return TOKEN_EMU_SEAL | (int)d;
}

void ph_window_restore(int token)
{
    if (token < TOKEN_EMU_OPEN) {
        ph_os_pkey_set(hw_key, (unsigned)token - 1);
    } else if (token == TOKEN_EMU_OPEN) {
        if (--emu_depth == 0)
            emu_release();
    } else {
        emu_acquire();
        emu_depth = (unsigned)token & (TOKEN_EMU_SEAL - 1);
    }
}

int ph_keys_attach(ph_space *s)
{
    int rc = 0;
    if (ph_keys_in_use == PH_KEYS_HW)
        return ph_keys_tag(s, 0, s->data_off, 1);
    pthread_mutex_lock(&keys_lock);
    if (emu_n == emu_cap) {
        size_t cap = emu_cap ? emu_cap * 2 : 8;
        ph_space **v = realloc(emu_spaces, cap * sizeof(*v));
        if (!v)
            rc = ph_err(PHEAP_ENOMEM, "out of memory");
        else
            emu_spaces = v, emu_cap = cap;
    }
    if (!rc) {
        emu_spaces[emu_n++] = s;
        if (!emu_open) /* opened outside every window: keyed at once */
            emu_protect_range(s, 0, s->data_off, 0);
    }
    pthread_mutex_unlock(&keys_lock);
    return rc;
}

void ph_keys_detach(ph_space *s)
{
    if (ph_keys_in_use != PH_KEYS_EMULATED)
        return;
    pthread_mutex_lock(&keys_lock);
    for (size_t i = 0; i < emu_n; i++)
        if (emu_spaces[i] == s) {
            emu_spaces[i] = emu_spaces[--emu_n];
            break;
        }
    pthread_mutex_unlock(&keys_lock);
}

int ph_keys_tag(ph_space *s, uint64_t off, uint64_t len, int keyed)
{
    uint64_t pg = ph_os_page(), a = PH_ALIGN_UP(off, pg), e = PH_ALIGN_DOWN(off + len, pg);
    if (e <= a)
        return 0;
    if (ph_keys_in_use == PH_KEYS_HW)
        return ph_os_pkey_tag(s->view + a, e - a, keyed ? hw_key : 0);
    return 0; /* emulated: guarded blocks stay writable (emu_protect_all) */
}
