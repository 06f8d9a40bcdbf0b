/*
 * kv.h -- the transactional key-value benchmark (pheap_kvbench): the
 * persistent hash table both libraries hold, the interface each library's
 * side implements (kv_backend), and the run-phase plumbing shared by them.
 *
 * The store: a bucket array of offsets, chains of nodes, and for each key a
 * separately allocated version block holding its value.  An update replaces
 * the version block in one transaction: allocate the new block, fill it,
 * point the node at it, free the old one.
 */
#ifndef KV_H
#define KV_H

#include "bench.h"

#include <stddef.h>
#include <stdint.h>

/* ---- persistent layout (offsets from the heap's base) ----------------- */

typedef struct kv_node {
    uint64_t next;          /* next node of the bucket's chain, 0 = end */
    uint64_t key;
    uint64_t version;       /* offset of the key's version block */
} kv_node;

typedef struct kv_value {   /* the head of a version block */
    uint64_t key;           /* the key it belongs to */
    uint64_t seq;           /* updates of the key before this version */
    unsigned char bytes[];  /* value_size - 16 bytes of (key + seq) */
} kv_value;

#define KV_VALUE_MIN 24     /* smallest --value-size: the head and a byte */

/* ---- parameters ------------------------------------------------------- */

typedef struct kv_params {
    uint64_t keys;          /* keys loaded before the run */
    uint64_t ops;           /* reads + updates of all threads together */
    unsigned threads;
    unsigned read_pct;      /* percent of operations that are reads */
    size_t value_size;      /* bytes of a version block */
    double theta;           /* Zipfian skew (YCSB: 0.99) */
    uint64_t seed;
    uint64_t heap_size;     /* bytes */
    const char *path;       /* heap file */
} kv_params;

/* Durability work, from the library's own counters (pheap only). */
typedef struct kv_counters {
    uint64_t flushes, fences, reflushes;
    uint64_t tx_fences, tx_commits, tx_aborts;
    uint64_t live_blocks;
} kv_counters;

/* ---- one library under test ------------------------------------------- */

typedef struct kv_backend {
    const char *name;       /* the variant: what --variant selects */
    const char *what;       /* one line for --list */
    /* Loads the library; -1 with bench_error() when it is missing. */
    int (*load)(void);
    /* Creates a fresh heap of p->heap_size at p->path; its base address
     * goes to *base (a block at offset off lives at *base + off). */
    int (*create)(const kv_params *p, char **base);
    /* Load phase, outside any transaction: an offset, 0 on failure. */
    uint64_t (*alloc)(size_t size);
    void (*persist)(const void *addr, size_t len);
    /* One update transaction on `node` (see the top of this file);
     * 0, or -1 with bench_error().  Called by the node's owning thread. */
    int (*update)(kv_node *node, uint64_t seq, size_t value_size);
    /* Counters since create; optional (NULL: the library has none). */
    int (*counters)(kv_counters *out);
    /* Name of the flush in use ("clwb", "none"); optional. */
    const char *(*flush_name)(void);
    int (*close)(void);
} kv_backend;

extern const kv_backend kv_pheap_redo, kv_pheap_undo, kv_pheap_redo_none, kv_pheap_redo_noprot,
    kv_pheap_redo_ckpt,
    kv_pmemobj;

/* Every variant, in table order; ends with NULL. */
extern const kv_backend *const kv_backends[];
const kv_backend *kv_backend_find(const char *name);

/* Fills a version block for (key, seq) and checks one. */
void kv_fill(void *block, uint64_t key, uint64_t seq, size_t value_size);
int kv_value_ok(const void *block, uint64_t key, size_t value_size);

/* ---- one repetition (kv_store.c) -------------------------------------- */

/* Creates the heap, loads the keys, runs the timed phase and checks the
 * store after it; adds the results to *out.  0, or -1 with bench_error(). */
int kv_run(const kv_backend *b, const kv_params *p, bench_metrics *out);

/* The pheap flush kind (enum pheap_flush_kind) of the variants that write
 * back: PHEAP_FLUSH when it names one, else the CPU's best cache-line flush. */
unsigned kv_pheap_flush(void);

/* ---- results (kv_tx.c) ------------------------------------------------ */

typedef struct kv_spread {
    double median, min, max;
} kv_spread;

kv_spread kv_spread_of(const double *v, unsigned n);
/* `"name":{"median":..,"min":..,"max":..,"values":[..]}`, after a comma
 * unless first. */
void kv_json_metric(FILE *f, int first, const char *name, const double *v, unsigned n);
void kv_json_string(FILE *f, const char *s);

/* ---- the recovery measurement (kv_recovery.c) ------------------------- */

/* Times pheap_open after `ntx` threads were killed inside transactions,
 * after a kill with none open and after a clean close, `reps` times each;
 * prints the result and appends a JSON line to json (may be NULL). */
int kv_recovery(const kv_params *p, unsigned ntx, unsigned reps, FILE *json);

#endif /* KV_H */
