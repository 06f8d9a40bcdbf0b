/*
 * traps.h -- helpers of the protection tests: the program's view of a
 * heap, and stores made in a child process to see whether they trap.
 */
#ifndef PH_TEST_TRAPS_H
#define PH_TEST_TRAPS_H

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/layout.h"
#include "harness.h"
#include "pheap.h"

/* The program's view of offset 0 (its metadata is readable there). */
static inline char *view_of(pheap *h)
{
    struct pheap_stats st;
    if (pheap_stats(h, &st) != 0)
        return NULL;
    return (char *)pheap_direct(h, st.data_offset) - st.data_offset;
}

/* 1 when fn(arg), run in a child process, kills the child with SIGSEGV or
 * SIGBUS; 0 when it returns. */
static inline int child_traps(void (*fn)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        signal(SIGBUS, SIG_DFL);
        fn(arg);
        _exit(0);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS);
}

typedef struct store_arg {
    volatile char *p;
    char value;
} store_arg;

static inline void store_one(void *arg)
{
    store_arg *a = arg;
    *a->p = a->value;
}

/* 1 when one byte stored at `p` in a child process traps; 0 when the
 * store succeeds. */
static inline int store_traps(volatile char *p, char value)
{
    store_arg a = {p, value};
    return child_traps(store_one, &a);
}

/* Stores at `n` random offsets of [off, off+len) of the view, each in a
 * child: the number that did not trap. */
static inline unsigned strays(char *view, uint64_t off, uint64_t len, unsigned n, uint64_t *seed)
{
    unsigned missed = 0;
    for (unsigned i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t at = off + (*seed >> 17) % len;
        if (store_traps(view + at, (char)(*seed >> 8 | 1)) != 1)
            missed++;
    }
    return missed;
}

/* The offset of a name-directory segment of the heap at `path`: entry 0
 * of its current directory array. */
static inline uint64_t first_segment(pheap *h, const char *path)
{
    uint64_t names = ph_test_region_offset(path, PH_REGION_NAMES);
    const char *v = view_of(h);
    uint64_t xdir = ((const ph_names_header *)(v + names))->xdir;
    uint64_t e = *(const uint64_t *)(v + names + ((xdir & 1) ? PH_NAMES_DIR1 : PH_NAMES_DIR0));
    return PH_NAMES_ENTRY_OFF(e);
}

/* `n` stray stores into each metadata region of the heap file at `path`
 * (mapped at `view`), each in a child: a test failure for each region where
 * some did not trap.  Needs harness.h and format/layout.h. */
static inline void region_strays(const char *path, char *view, uint64_t data_off, unsigned n,
                                 uint64_t *seed)
{
    static const unsigned kinds[] = {PH_REGION_HEADER, PH_REGION_ROOTS, PH_REGION_LANES,
                                     PH_REGION_SLABS, PH_REGION_EXTLOG, PH_REGION_NAMES};
    const unsigned nk = sizeof(kinds) / sizeof(kinds[0]);
    for (unsigned k = 0; k < nk; k++) {
        uint64_t off = ph_test_region_offset(path, kinds[k]);
        uint64_t end = k + 1 < nk ? ph_test_region_offset(path, kinds[k + 1]) : data_off;
        unsigned missed = strays(view, off, end - off, n, seed);
        if (missed)
            ph_test_fail(__FILE__, __LINE__, "region %u: %u of %u stray stores did not trap",
                         kinds[k], missed, n);
    }
}

/* 1 when a PHEAP_PROTECT_KEYS open can succeed here: the CPU and the
 * kernel have a free protection key, or PHEAP_KEYS_EMULATE asks for the
 * emulation (always, or as the fallback). */
static inline int keys_available(void)
{
    const char *emu = getenv("PHEAP_KEYS_EMULATE");
    if (emu && (strcmp(emu, "1") == 0 || strcmp(emu, "fallback") == 0))
        return 1;
    int k = pkey_alloc(0, 0);
    if (k < 0)
        return 0;
    pkey_free(k);
    return 1;
}

#endif
