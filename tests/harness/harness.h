/*
 * harness.h -- a small test framework: TEST(name) registers a test, CHECK*
 * record failures without stopping the test, REQUIRE* stop it.  main() runs
 * every test (or those whose names contain argv[1]) and ends with the line
 * "N passed, N failed".
 */
#ifndef PH_TEST_HARNESS_H
#define PH_TEST_HARNESS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "pheap.h"

typedef void (*ph_test_fn)(void);
void ph_test_register(const char *name, ph_test_fn fn);
void ph_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
extern int ph_test_failed; /* failures in the running test */

#define TEST(name)                                                             \
    static void test_##name(void);                                             \
    __attribute__((constructor)) static void register_##name(void)             \
    {                                                                          \
        ph_test_register(#name, test_##name);                                  \
    }                                                                          \
    static void test_##name(void)

#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c))                                                              \
            ph_test_fail(__FILE__, __LINE__, "CHECK(%s)", #c);                 \
    } while (0)
#define REQUIRE(c)                                                             \
    do {                                                                       \
        if (!(c)) {                                                            \
            ph_test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #c);               \
            return;                                                            \
        }                                                                      \
    } while (0)
#define CHECK_EQ(a, b)                                                         \
    do {                                                                       \
        long long va_ = (long long)(a), vb_ = (long long)(b);                  \
        if (va_ != vb_)                                                        \
            ph_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, \
                         va_, vb_);                                            \
    } while (0)
#define REQUIRE_EQ(a, b)                                                       \
    do {                                                                       \
        long long va_ = (long long)(a), vb_ = (long long)(b);                  \
        if (va_ != vb_) {                                                      \
            ph_test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, \
                         va_, vb_);                                            \
            return;                                                            \
        }                                                                      \
    } while (0)
/* Calls returning a PHEAP_E* code: on failure also prints pheap_errmsg(). */
#define REQUIRE_OK(call)                                                       \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != 0) {                                                        \
            ph_test_fail(__FILE__, __LINE__, "%s -> %d (%s)", #call, rc_,      \
                         pheap_errmsg());                                      \
            return;                                                            \
        }                                                                      \
    } while (0)

/* A fresh path in a per-process temporary directory, removed at exit. */
const char *ph_test_path(const char *name);
/* Directory holding ph_test_path files. */
const char *ph_test_dir(void);

/* Opens the heap at `path` with `opts`; NULL, with the test failed (at
 * file:line), when it cannot. */
pheap *ph_test_open_at(const char *path, const pheap_options *opts, const char *file, int line);
#define ph_test_open(path, opts) ph_test_open_at(path, opts, __FILE__, __LINE__)

/* Creates a heap of `size` bytes at `path` (removing an old file first);
 * _mode: in consistency mode `consistency`, with open `flags` added. */
pheap *ph_test_create(const char *path, uint64_t size);
pheap *ph_test_create_mode(const char *path, uint64_t size, unsigned consistency, unsigned flags);
/* Names prefix0 .. prefix<n-1>, each a new block of `size` bytes: 0, or -1
 * (a failure recorded). */
int ph_test_make_names(pheap *h, const char *prefix, unsigned n, size_t size);

/* Fills [p, p+n) with a pattern derived from `seed`: 8-byte words of a
 * sequence whose first word is `seed` itself (so a block of 8 bytes or more
 * names its seed); ph_test_intact says whether it is still there. */
void ph_test_fill(void *p, size_t n, uint64_t seed);
int ph_test_intact(const void *p, size_t n, uint64_t seed);

/* A seed for ph_test_fill drawn from a name (FNV-1a of its bytes). */
uint64_t ph_test_name_seed(const char *name);

/* Fails the test for every overlap among the n blocks [b[i][0], b[i][1])
 * (sorts them); returns how many. */
unsigned ph_test_disjoint(uint64_t (*b)[2], unsigned n);

/* SplitMix64: the next value of the sequence whose state is *state, so a
 * test's seed replays its run. */
uint64_t ph_test_rand(uint64_t *state);

/* Pins the calling thread to `cpu` (threads it starts inherit it), so that
 * threads share pheap's arena of that CPU: 0, or -1. */
int ph_test_pin_cpu(int cpu);

/* Byte-copies a file. */
int ph_test_copy_file(const char *from, const char *to);

/* Offset of the region of `kind` (enum ph_region_kind) in the heap file at
 * `path`, read from its header; 0 when the file or the region is missing. */
uint64_t ph_test_region_offset(const char *path, unsigned kind);

/* Turns `hdr` into the header of a 1.5 heap: no morphing, no process table (its pages
 * stay, unused, between the names and the data region); the caller
 * recomputes the checksum.  Nothing when it has none. */
struct ph_header;
void ph_test_drop_procs(struct ph_header *hdr);

/* Rewrites the closed heap at `path`, never shared, as a format 1.7 heap
 * would have it (header checksum recomputed).  0, or -1. */
int ph_test_as_format_1_7(const char *path);

/* Rewrites the closed heap at `path`, none of whose slabs has morphed, as
 * a format 1.6 heap would have it: no morphing (header checksum
 * recomputed).  0, or -1. */
int ph_test_as_format_1_6(const char *path);

/* Rewrites the closed heap at `path` as a format 1.5 heap would have it:
 * no process table (header checksum recomputed).  0, or -1. */
int ph_test_as_format_1_5(const char *path);

/* Rewrites the closed heap at `path` as a format 1.4 heap would have it:
 * no process table, no owner, no mode word (header checksum recomputed).
 * 0, or -1. */
int ph_test_as_format_1_4(const char *path);

/* Forks a child that opens `path` read-write (flags 0) or with `flags` and
 * holds it until ph_test_release; returns the child's pid, or -1 when it
 * could not open the heap. */
int ph_test_hold(const char *path, unsigned flags);
/* Makes the holder close the heap and exit; 0 when it closed cleanly. */
int ph_test_release(int pid);

/* Kills child `pid` with SIGKILL and reaps it; fails the test (at
 * file:line) when it had exited on its own before (its exit status says
 * why: a check of the child's). */
void ph_test_kill(int pid, const char *file, int line);
#define PH_TEST_KILL(pid) ph_test_kill((pid), __FILE__, __LINE__)

/* Writes to `image` a heap left by a crash inside a pheap_alloc_to: its
 * lane entry durable, its changes not (made with the crash simulator), so
 * that recovery has one operation to roll forward: a 64-byte block into
 * slot 1 of the two-word array at *slots_off (also the root "slots").
 * 0 on success. */
int ph_test_interrupted_alloc_to(const char *image, pheap_off *slots_off);


/* ---- heap maps: a heap of known shape, the map checked (heapmap.c) ---- */
typedef struct ph_map_shape {
    pheap_off punched;        /* a freed large block the close punches */
    uint64_t punched_bytes;   /* its bytes */
    pheap_off kept_free;      /* a freed 64 KiB extent between live ones (stored) */
    pheap_off large[3];       /* live large blocks */
} ph_map_shape;

/* Creates at `path` (removing an old file) a heap of 2 MiB of data that
 * may grow to 64 MiB, in `consistency` mode, and gives it its shape: full,
 * half and partly used slabs of four size classes, in LOG mode a slab
 * morphed from 1024- to 512-byte blocks with eight of the former left,
 * three large blocks, a named object, a freed 2 MiB block (punched at
 * close) and a freed 64 KiB one (kept).  Returns the open heap, or NULL with the test failed. */
pheap *ph_test_map_shape(const char *path, unsigned consistency, ph_map_shape *out);
/* The same heap, closed: 0, or -1 with the test failed. */
int ph_test_map_shape_file(const char *path, unsigned consistency);

/* Fails the test unless the n runs pheap_walk_chunks gave for h tile the
 * file in order and add up to pheap_stats and pheap_stats_class: slabs
 * and their live blocks per class, large, free and metadata bytes. */
void ph_test_map_consistent(pheap *h, const pheap_chunk_run *runs, unsigned n);
/* Walks h and checks its runs so. */
void ph_test_map_check(pheap *h);

/* ---- running programs (tool.c) ---- */
typedef struct ph_tool_result {
    int code;        /* exit status; -1 if it did not exit normally */
    char out[32768]; /* stdout, NUL-terminated (truncated if longer) */
    size_t out_len;  /* bytes of it: binary output may hold NULs */
    char err[8192];  /* stderr */
} ph_tool_result;

/* Runs `prog` with the NULL-terminated arguments (PHEAP_FLUSH unset) and
 * returns its exit status and output, valid until the next call. */
ph_tool_result *ph_test_run_tool(const char *prog, const char *arg, ...);

/* A failed expectation about a run, reported with the run's output. */
#define CHECK_TOOL(cond, r)                                                            \
    do {                                                                               \
        if (!(cond))                                                                   \
            ph_test_fail(__FILE__, __LINE__, "%s\n    exit %d\n    stdout: %s\n    stderr: %s", \
                         #cond, (r)->code, (r)->out, (r)->err);                        \
    } while (0)

/* 1 if `s` is exactly one JSON object (surrounding white space allowed). */
int ph_test_json_object(const char *s);

/* The unsigned number after "key": in s; 0 with *found = 0 if absent. */
unsigned long long ph_test_json_u64(const char *s, const char *key, int *found);
/* The same, or -1 if absent. */
long long ph_test_json_num(const char *s, const char *key);

/* 1 if `out` is one JSON error object of the tool naming error `name`
 * with `code` and a message. */
int ph_test_json_error(const char *out, const char *name, int code);

/* The text after `label` and its padding on the line that `label` starts
 * in `out`; NULL if there is none.  ph_test_text_num: the number there, or
 * -1. */
const char *ph_test_text_field(const char *out, const char *label);
long long ph_test_text_num(const char *out, const char *label);

/* Fails the test (at file:line) unless h passes pheap_check and holds the
 * live blocks and bytes of `before`: a refused call changed nothing. */
void ph_test_unchanged(pheap *h, const struct pheap_stats *before, const char *after,
                       const char *file, int line);

/* ---- crash-point enumeration (crash.c) ----
 * The workload runs on a simulated heap; it may call ph_crash_mark(c)
 * after each operation returns, so that verify knows which operations had
 * completed before the crash point.  For every fence and every durable
 * store of a dry run (a sample of the stores unless PHEAP_CRASH=full), and
 * every variant of what reaches media (whole lines or 8-byte words, lines
 * written back early at stores), the workload is re-run with an image
 * taken at that point; the image is opened (running recovery), must pass
 * pheap_check, and is handed to verify with the number of operations that
 * had returned before the crash (all later ones had not started, except
 * the one in flight, which may or may not be visible).  Then the heap is
 * used (blocks of every kind, compaction of the extent log), closed and
 * reopened from what that use made durable, checked and verified again;
 * and recovery is itself crashed at its fences (depth 2; sampled unless
 * full).  verify may therefore run several times per image. */
typedef struct ph_crash_ctx {
    pheap *heap;          /* the simulated heap during the workload */
    void *arg;            /* the caller's */
    uint64_t marks[4096]; /* fence count when operation i returned */
    uint64_t store_marks[4096]; /* durable-store count then */
    unsigned nmarks;
    uint64_t fences;      /* fences the last run issued in all */
    uint64_t stores;      /* durable stores the last run made */
    uint64_t crash_fence; /* for verify: the image was taken before this fence, */
    uint64_t crash_store; /*   or after this durable store (the other is 0) */
} ph_crash_ctx;

void ph_crash_mark(ph_crash_ctx *c);

typedef void (*ph_crash_workload_fn)(ph_crash_ctx *c);
/* `done` ops returned before the crash; op `done` (if any) was in flight. */
typedef void (*ph_crash_verify_fn)(pheap *image, unsigned done, ph_crash_ctx *c);

typedef struct ph_crash_stats {
    uint64_t fences;      /* fences of the dry run */
    uint64_t stores;      /* durable stores of the dry run */
    unsigned images;      /* crash images judged, nested ones included */
    unsigned nested;      /* of which images of a crashed recovery */
    unsigned violations;  /* images with any failure */
    unsigned leaks;       /* images whose live-block count changed under use */
} ph_crash_stats;

/* Enumerates the crash points of `workload` on a copy of heap `base` and
 * prints one table row named `name`. */
ph_crash_stats ph_crash_enumerate(const char *name, const char *base, ph_crash_workload_fn workload,
                                  ph_crash_verify_fn verify, void *arg);

/* Judges one crash image as the enumeration does (open, check, verify,
 * use, close, reopen, check, verify), and the images of its recovery
 * crashed at every fence, counting into *st; `where` names the crash point
 * in messages.  For tests that take their images themselves (threads). */
void ph_crash_judge(const char *name, const char *image, const char *where, unsigned done,
                    ph_crash_verify_fn verify, ph_crash_ctx *c, ph_crash_stats *st);

/* Prints a table row of stats (and appends it to the file
 * PHEAP_CRASH_TABLE names, if set: make torture's table). */
void ph_crash_report(const char *name, const ph_crash_stats *st);

/* How hard to enumerate, from PHEAP_CRASH: full (make torture: every
 * store, every variant, every recovery fence), quick (the fault tables:
 * fewer variants and stores, stop at the first violation), or sampled
 * (the default, make test). */
enum { PH_CRASH_QUICK, PH_CRASH_SAMPLED, PH_CRASH_FULL };
int ph_crash_level(void);
int ph_crash_full(void);

/* Which failure model the enumeration takes its crash points in, from
 * PHEAP_CRASH_MODEL: the x86 persistency rules of persistent memory (lines
 * and words, the default) or, with "pages", the page cache of an ordinary
 * file (PHEAP_SIM_PAGES: the msync back end).  Rows of the page model are
 * named with ":pages". */
enum { PH_CRASH_LINES, PH_CRASH_PAGES };
int ph_crash_model(void);

#define PH_ARRAY_N(a) (sizeof(a) / sizeof((a)[0]))

#endif
