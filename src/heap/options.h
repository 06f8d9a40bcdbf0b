/*
 * options.h -- the resolved configuration of one open: pheap_options
 * merged with the environment through the option table in options.c.
 */
#ifndef PH_HEAP_OPTIONS_H
#define PH_HEAP_OPTIONS_H

#include <stdint.h>

#include "pheap.h"

#define PH_DEFAULT_SIZE (64ull << 20)

typedef struct ph_config {
    uint64_t size;          /* data bytes when creating, chunk-rounded */
    uint64_t max_size;      /* file growth limit when creating, chunk-rounded; 0: what size needs */
    unsigned flags;         /* PHEAP_* */
    unsigned mode;          /* permission bits when creating */
    unsigned flush;         /* enum pheap_flush_kind; AUTO until mapped */
    unsigned flush_source;  /* enum pheap_flush_source; 0 while flush is AUTO */
    unsigned consistency;   /* PHEAP_CONSISTENCY_*: of a new heap; GC asked of an old one */
    unsigned protect;       /* enum pheap_protect_kind; AUTO until mapped */
    unsigned no_morph;      /* PHEAP_MORPH=0: slabs never morph (alloc/morph.h) */
    unsigned nt_stores;     /* PHEAP_NT_STORES: PH_NT_AUTO, PH_NT_ON or PH_NT_OFF */
    unsigned durability;    /* enum pheap_durability, AUTO resolved to SYNC */
    unsigned durability_env;/* CHECKPOINT came from PHEAP_DURABILITY: it gives way to
                               what the program chose (tier.c) */
    unsigned checkpoint_ms; /* CHECKPOINT: automatic checkpoints (0: none) */
} ph_config;

/* Validates `opts` (NULL = defaults) and merges the PHEAP_* environment
 * variables of the option table.  PHEAP_EINVAL with a message naming the
 * field or variable on a bad value. */
int ph_options_resolve(const pheap_options *opts, ph_config *cfg);

/* Prints the option table (name, default, description) as Markdown rows;
 * used to keep docs/OPTIONS.md honest. */
void ph_options_describe(void (*emit)(const char *name, const char *def, const char *desc, void *arg),
                         void *arg);

#endif
