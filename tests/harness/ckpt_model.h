/*
 * ckpt_model.h -- a workload for the checkpoint durability level and the
 * digest of the state it leaves, so that a test can tell which checkpoint
 * a heap file holds: 64 slots of a named block "slots", each empty or the
 * offset of a block whose contents carry a version (ph_test_fill), written
 * by pheap_alloc_to / pheap_free_from, transactions and pheap_persist, and
 * 12 names "n0".."n11" made and removed by pheap_alloc_named /
 * pheap_free_named.
 */
#ifndef PH_TEST_CKPT_MODEL_H
#define PH_TEST_CKPT_MODEL_H

#include <stdio.h>
#include <string.h>

#include "harness.h"

enum { CKM_SLOTS = 64, CKM_NAMES = 12 };

static inline pheap_off *ckm_slots(pheap *h)
{
    pheap_off off = pheap_lookup(h, "slots");
    return off ? (pheap_off *)pheap_direct(h, off) : NULL;
}

/* Makes the slots block (zeroed) in a new heap: 0, or an error. */
static inline int ckm_setup(pheap *h)
{
    pheap_off off = pheap_alloc_named(h, "slots", CKM_SLOTS * sizeof(pheap_off));
    if (!off)
        return pheap_errno();
    memset(pheap_direct(h, off), 0, CKM_SLOTS * sizeof(pheap_off));
    pheap_persist(h, pheap_direct(h, off), CKM_SLOTS * sizeof(pheap_off));
    return 0;
}

static inline size_t ckm_size(uint64_t r)
{
    static const size_t sizes[] = {24, 64, 200, 1000, 5000, 70000};
    return sizes[r % 6];
}

/* One operation of the workload, drawn from *rng: 0, or the failing
 * call's error. */
static inline int ckm_op(pheap *h, uint64_t *rng)
{
    pheap_off *slots = ckm_slots(h);
    if (!slots)
        return PHEAP_ENOENT;
    uint64_t r = ph_test_rand(rng);
    unsigned j = (unsigned)(r % CKM_SLOTS);
    uint64_t seed = ph_test_rand(rng) | 1;
    switch ((r >> 8) % 8) {
    case 0: case 1: case 2: /* (re)allocate the slot's block */
        if (slots[j] && pheap_free_from(h, &slots[j]) != 0)
            return pheap_errno();
        if (pheap_alloc_to(h, ckm_size(r >> 16), &slots[j]) != 0)
            return pheap_errno();
        ph_test_fill(pheap_direct(h, slots[j]), 24, seed);
        pheap_persist(h, pheap_direct(h, slots[j]), 24);
        return 0;
    case 3: /* free it */
        return slots[j] ? pheap_free_from(h, &slots[j]) : 0;
    case 4: case 5: { /* new contents in a transaction, with the neighbour slot */
        unsigned k = (j + 1) % CKM_SLOTS;
        if (!slots[j] || !slots[k])
            return 0;
        int rc = pheap_tx_begin(h);
        for (unsigned x = 0; !rc && x < 2; x++) {
            void *p = pheap_direct(h, slots[x ? k : j]);
            rc = pheap_tx_add(h, p, 24);
            if (!rc)
                ph_test_fill(p, 24, seed + x);
        }
        return rc ? (pheap_tx_abort(h), rc) : pheap_tx_commit(h);
    }
    default: { /* a name made or removed */
        char name[16];
        snprintf(name, sizeof(name), "n%u", (unsigned)(r >> 24) % CKM_NAMES);
        if (pheap_lookup(h, name))
            return pheap_free_named(h, name);
        pheap_off off = pheap_alloc_named(h, name, 32);
        if (!off)
            return pheap_errno();
        ph_test_fill(pheap_direct(h, off), 32, seed);
        pheap_persist(h, pheap_direct(h, off), 32);
        return 0;
    }
    }
}

/* The state's digest: which slots and names hold a block and the version
 * each carries (a block whose contents are torn counts as a different
 * state); *blocks: how many blocks that is, the slots block included. */
static inline uint64_t ckm_digest(pheap *h, uint64_t *blocks)
{
    uint64_t d = 0xcbf29ce484222325ull, n = 0;
    pheap_off *slots = ckm_slots(h);
    if (!slots)
        return 0;
    n++;
    for (unsigned j = 0; j < CKM_SLOTS; j++) {
        uint64_t v = 0;
        if (slots[j]) {
            const uint64_t *p = pheap_direct(h, slots[j]);
            v = ph_test_intact(p, 24, p[0]) ? p[0] : 1;
            n++;
        }
        d = (d ^ (v + j)) * 0x100000001b3ull;
    }
    for (unsigned k = 0; k < CKM_NAMES; k++) {
        char name[16];
        snprintf(name, sizeof(name), "n%u", k);
        pheap_off off = pheap_lookup(h, name);
        uint64_t v = 0;
        if (off) {
            const uint64_t *p = pheap_direct(h, off);
            v = ph_test_intact(p, 32, p[0]) ? p[0] : 1;
            n++;
        }
        d = (d ^ (v + 1000 + k)) * 0x100000001b3ull;
    }
    if (blocks)
        *blocks = n;
    return d;
}

#endif
