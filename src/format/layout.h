/*
 * layout.h -- the heap file format.  Every on-media structure of pheap is in
 * this header, with fixed-width little-endian fields and static size checks.
 * Any change here is a format change: bump PH_FORMAT_MINOR (compatible) or
 * PH_FORMAT_MAJOR (incompatible) and edit tests/layout on purpose.
 *
 * Glossary
 *   heap      one file, mapped whole: header page | metadata regions | data.
 *   region    a page-aligned range of the file with one purpose, listed in
 *             the header's region table.
 *   page      PH_PAGE_SIZE (4 KiB), the unit of regions; "OS page" is the
 *             kernel's page, which may differ.
 *   line      PH_LINE_SIZE (64 B), the unit of flushing and of atomicity
 *             planning: a field that must be torn-free is 8 bytes, aligned.
 *   chunk     PH_CHUNK_SIZE (64 KiB), the unit in which the data region is
 *             carved into slabs and extents.
 *   slab      a chunk holding blocks of one size class; its descriptor and
 *             allocation bitmap live in the slab region, never inline.
 *   extent    a run of pages of the data region handed out as one large block.
 *   lane      a per-thread write-ahead log slot in the lane region.
 *   root      a named persistent offset in the root region.
 *   lease     a process's slot in the process table while it holds the
 *             heap read-write (1.6).
 *
 * File layout (offsets are bytes from the start of the file):
 *   0                 header page: ph_header (checksummed, written once at
 *                     creation) and ph_state (mutable, one line)
 *   regions[1..]      metadata regions in the order of enum ph_region_kind,
 *                     but the process table (1.6), the last before the data
 *   regions[last]     data region, chunk-aligned, up to max_size; only
 *                     [data.offset, state.size) is backed by the file.
 */
#ifndef PH_FORMAT_LAYOUT_H
#define PH_FORMAT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define PH_FORMAT_MAJOR 1
#define PH_FORMAT_MINOR 8

#define PH_PAGE_SIZE  4096u
#define PH_LINE_SIZE  64u
#define PH_CHUNK_SIZE (64u * 1024u)

/* "\x89PHEAP\r\n": the high byte catches 7-bit transfers, CR LF catches
 * line-ending conversion. */
#define PH_MAGIC_BYTES "\x89PHEAP\r\n"
#define PH_MAGIC_LEN 8

#define PH_REGIONS_MAX 16

/* Region kinds, in file order but for the process table (added in 1.6,
 * after the data region's number): it lies between the names and the data
 * region.  The data region is always the last. */
enum ph_region_kind {
    PH_REGION_HEADER = 1, /* this page */
    PH_REGION_ROOTS = 2,  /* ph_root_entry[PH_ROOTS_MAX] */
    PH_REGION_LANES = 3,  /* per-thread write-ahead logs */
    PH_REGION_SLABS = 4,  /* one slab descriptor + bitmap per data chunk */
    PH_REGION_EXTLOG = 5, /* log-structured large-extent bookkeeping */
    PH_REGION_NAMES = 6,  /* named-object directory */
    PH_REGION_DATA = 7,   /* user blocks */
    PH_REGION_PROCS = 8,  /* process table (PH_FEAT_INCOMPAT_PROCS) */
    PH_REGION_KIND_END
};

/* One row of the region table.
 * Invariant: offset % PH_PAGE_SIZE == 0, size % PH_PAGE_SIZE == 0,
 * rows sorted by offset and non-overlapping, row 0 is the header. */
typedef struct ph_region {
    uint32_t kind;   /* enum ph_region_kind */
    uint32_t flags;  /* reserved, 0 */
    uint64_t offset; /* bytes from the start of the file */
    uint64_t size;   /* bytes */
} ph_region;
_Static_assert(sizeof(ph_region) == 24, "ph_region size");

/* Feature bits.  A build refuses a heap with an incompat bit it does not
 * know, opens read-only one with an unknown ro_compat bit, and ignores
 * unknown compat bits. */
#define PH_FEAT_INCOMPAT_TAGGED_LOGS 0x1u /* 1.1: lane entries carry tags in every
                                              word; builds before it would misread them */
#define PH_FEAT_INCOMPAT_EXTLOG_HIGH 0x2u /* 1.2: each extent-log half has a durable
                                              high-water mark (ph_extlog_header.xhigh);
                                              slots past it may hold stale entries, which
                                              builds before it would replay or append over */
#define PH_FEAT_INCOMPAT_TX 0x4u            /* 1.3: the lane region ends with one transaction
                                              log per lane (ph_txlog_anchor); builds before
                                              it would not recover interrupted transactions */
#define PH_FEAT_INCOMPAT_NAMES 0x8u         /* 1.4: the names region holds a directory
                                              (ph_names_header) and lanes may hold BIND
                                              and UNBIND entries, which builds before it
                                              would not recover */
#define PH_FEAT_INCOMPAT_PROCS 0x10u        /* 1.6: a process table region lies before the
                                              data region (ph_procs_header); builds
                                              before it expect no such region */
#define PH_FEAT_INCOMPAT_MORPH 0x20u        /* 1.7: a slab descriptor may describe a slab
                                              morphed from another class (ph_slab_desc.morph,
                                              old blocks' bits in words 6 and 7 of each
                                              line), which builds before it would refuse
                                              or misread */
#define PH_FEAT_INCOMPAT_SHARED 0x40u       /* 1.8: the heap may be opened for sharing
                                              between processes (PHEAP_SHARED), whose
                                              extent log entries may be of kind 4
                                              (PH_EXT_RESERVED), which builds before it
                                              would refuse as damage */
#define PH_FEAT_INCOMPAT_KNOWN \
    (PH_FEAT_INCOMPAT_TAGGED_LOGS | PH_FEAT_INCOMPAT_EXTLOG_HIGH | PH_FEAT_INCOMPAT_TX | \
     PH_FEAT_INCOMPAT_NAMES | PH_FEAT_INCOMPAT_PROCS | PH_FEAT_INCOMPAT_MORPH | \
     PH_FEAT_INCOMPAT_SHARED)
/* 1.5: the header records the heap's owner (owner_uid), the state line an
 * access mode with check bits (ph_state.xmode), and each used root entry a
 * CRC-32C of its name (ph_root_entry.name_crc).  Builds before it would
 * ignore the mode and write roots without the CRC: they may only read. */
#define PH_FEAT_RO_COMPAT_OWNER 0x1u
#define PH_FEAT_RO_COMPAT_KNOWN PH_FEAT_RO_COMPAT_OWNER

/* Consistency modes (DESIGN 4.4), fixed at creation. */
#define PH_CONSISTENCY_LOG 0u
#define PH_CONSISTENCY_GC 1u

/* The header: written once at creation, then read-only.  The checksum is
 * CRC-32C over bytes [0, offsetof(checksum)), stored zero-extended.
 * Invariant: header_size == sizeof(ph_header);
 *            max_size >= data.offset + PH_CHUNK_SIZE. */
typedef struct ph_header {
    uint8_t magic[PH_MAGIC_LEN];   /* PH_MAGIC_BYTES */
    uint16_t major;                /* PH_FORMAT_MAJOR of the creating build */
    uint16_t minor;                /* PH_FORMAT_MINOR of the creating build */
    uint32_t header_size;          /* sizeof(ph_header) at creation */
    uint8_t uuid[16];              /* random identity (RFC 4122 v4) */
    uint64_t create_time_ns;       /* CLOCK_REALTIME at creation */
    uint32_t page_size;            /* PH_PAGE_SIZE */
    uint32_t line_size;            /* PH_LINE_SIZE */
    uint32_t chunk_size;           /* PH_CHUNK_SIZE */
    uint32_t consistency;          /* PH_CONSISTENCY_* */
    uint64_t max_size;             /* bytes the file may grow to */
    uint32_t feat_compat;          /* feature bits, see above */
    uint32_t feat_incompat;
    uint32_t feat_ro_compat;
    uint32_t nregions;             /* rows used in regions[] */
    ph_region regions[PH_REGIONS_MAX];
    uint32_t owner_uid;            /* user id of the creator (PH_FEAT_RO_COMPAT_OWNER;
                                      0 and meaningless without it) */
    uint32_t reserved0;            /* zero */
    uint8_t reserved[544];         /* zero; room for later fields */
    uint64_t checksum;             /* CRC-32C, see above */
} ph_header;
_Static_assert(sizeof(ph_header) == 1024, "ph_header size");
_Static_assert(offsetof(ph_header, regions) == 80, "ph_header.regions");
_Static_assert(offsetof(ph_header, owner_uid) == 464, "ph_header.owner_uid");
_Static_assert(offsetof(ph_header, checksum) == 1016, "ph_header.checksum");

/* State values (ph_state.xclean). */
#define PH_STATE_CLEAN 0x4e41454c43485000ull /* closed cleanly */
#define PH_STATE_OPEN 0x4e45504f48485000ull  /* open read-write, or crashed */

/* Mutable state, one line of the header page at PH_STATE_OFFSET.  Every
 * field is an aligned 8-byte word stored atomically and persisted on its
 * own; no field depends on another being written in the same step. */
typedef struct ph_state {
    uint64_t xclean;        /* PH_STATE_CLEAN or PH_STATE_OPEN */
    uint64_t xsize;         /* current file size, bytes, chunk multiple */
    uint64_t xopen_count;   /* read-write opens over the heap's life */
    uint64_t xunclean_count;/* opens that found PH_STATE_OPEN */
    uint64_t xlast_open;    /* seconds since the epoch (wall clock) of the last
                               read-write open, informational; 0: not known (a
                               reserved word, zero, until a 1.3 build that
                               records it opened the heap) */
    uint64_t xmode;         /* access mode with check bits, PH_MODE_WORD (heaps with
                               PH_FEAT_RO_COMPAT_OWNER; zero and unused before) */
    uint64_t reserved[2];   /* zero */
} ph_state;
_Static_assert(sizeof(ph_state) == PH_LINE_SIZE, "ph_state size");

_Static_assert(offsetof(ph_state, xmode) == 40, "ph_state.xmode");

/* The access mode word (1.5): the mode (PH_MODE_WRITABLE or _READONLY,
 * the values of PHEAP_MODE_*) in bits 0..7, PH_MODE_TAG in bits 8..31,
 * and in bits 32..63 the CRC-32C of the four little-endian bytes of bits
 * 0..31.  One aligned store changes it, so it is never torn; a flipped
 * bit fails the CRC (or the tag, or the mode's range) and open refuses
 * the heap rather than guess the mode. */
#define PH_MODE_WRITABLE 0u
#define PH_MODE_READONLY 1u
#define PH_MODE_TAG 0x444f4du /* "MOD" */

#define PH_STATE_OFFSET 2048u
_Static_assert(PH_STATE_OFFSET >= sizeof(ph_header), "state after header");
_Static_assert(PH_STATE_OFFSET % PH_LINE_SIZE == 0, "state line-aligned");

/* Root directory: a fixed table of named offsets.
 * Invariant: xused == 0 -> the entry is free and its other fields are
 * meaningless; xused == 1 -> name is NUL-terminated, 1..63 bytes, unique
 * among used entries, and xoff is 0 or inside the data region.
 * Commit protocol: see src/heap/root.c. */
#define PH_ROOTS_MAX 256u
#define PH_ROOT_NAME_MAX 63u
typedef struct ph_root_entry {
    uint64_t xused;         /* 0 free, 1 used: the commit word */
    uint64_t xoff;          /* the root's value, stored atomically */
    uint64_t name_crc;      /* 1.5 (PH_FEAT_RO_COMPAT_OWNER): PH_ROOT_CHECK of the
                               CRC-32C of the 64 name bytes while used (or 0 for
                               a while, see src/heap/root.c), 0 while free; 0
                               and unchecked before 1.5 */
    uint64_t reserved[5];
    char name[PH_ROOT_NAME_MAX + 1]; /* NUL-terminated */
} ph_root_entry;
_Static_assert(sizeof(ph_root_entry) == 2 * PH_LINE_SIZE, "ph_root_entry size");
#define PH_ROOT_CHECK(crc) (1ull << 32 | (uint32_t)(crc)) /* never 0 */

/* ---- lanes: per-thread write-ahead logs (src/log/lane.c) ----------------
 * A lane is PH_LANE_ENTRIES lines; each line holds one entry.  A thread's
 * consecutive logged operations use consecutive lines, so that the lines
 * flushed by neighbouring fence batches differ (no reflush).  A new holder
 * of a lane zeroes it first (durably), and numbers its entries from 1.
 * Every word after xstate carries in bits 48..63 the tag of its writing,
 * 0x8000 | (seq / PH_LANE_ENTRIES) mod 2^15: nonzero, and different from
 * the tag of the line's previous writing (seq - PH_LANE_ENTRIES), so an
 * entry whose words come from two writings never validates.
 * Invariant: at most one entry of a lane is ACTIVE, and only while the
 * operation it describes is between its first and its last fence.
 * Recovery rolls an ACTIVE entry forward when all its tags match xstate's
 * sequence and its checksum holds -- and, for an alloc_to whose `contents`
 * word carries PH_LOG_CONTENTS (pheap_alloc_to_init), when the block's
 * `size` bytes have that CRC-32C: the entry may reach media before the
 * block's contents (eviction before its fence), and a block whose
 * contents are not all durable must not be published.  Such an entry is
 * retired without effect: the allocation did not happen.  (Heaps without
 * PH_FEAT_INCOMPAT_TAGGED_LOGS may also hold untagged 1.0 entries: words
 * as they are, checksum zero-extended.) */
#define PH_LANES_MAX 1024u
#define PH_LANE_ENTRIES 16u
#define PH_LANE_SIZE (PH_LANE_ENTRIES * PH_LINE_SIZE)

#define PH_LOG_IDLE 0u        /* entry retired or never used */
#define PH_LOG_ACTIVE 1u      /* entry describes an operation in flight */
#define PH_LOG_ALLOC_TO 1u    /* allocate `block` (`size` bytes), *dest = block */
#define PH_LOG_FREE_FROM 2u   /* free `block`, *dest = 0 */
#define PH_LOG_CONTENTS (1ull << 32) /* in `contents`: the block's CRC-32C follows (bits 0..31) */
/* Heaps with PH_FEAT_INCOMPAT_NAMES (1.4) also log these two, for the
 * named-object directory, whose entry words are versioned: every store to
 * one carries a new 16-bit version in bits 48..63, so a value never comes
 * back (within 2^16 stores).  The op word carries, besides the kind in
 * bits 0..7, the old value's version (bits 8..23), the new value's version
 * (24..39) and low 3 bits (40..42); `old` holds the old value's low 48
 * bits.  BIND allocates `block` and stores new = version | block | low
 * bits at `dest`; UNBIND frees `block` and stores new = version | low
 * bits.  Recovery redoes one when `dest` holds its old or its new value
 * and does nothing when it holds neither (a later operation superseded
 * it), so a BIND's entry needs no fence of its own to retire, and while
 * it lasts its stores need none before the call returns: they are made
 * durable by the holder's next fence, and the entry retired after that
 * (log/lane.h, ph_lane_end_deferred; a BIND with block contents to check
 * fences its stores at once and is retired at the next fence).
 * A BIND also covers a body: the rest of dest's line and the next
 * `lines` - 1 lines (op bits 43..47), written and flushed before the
 * entry's fence; `old` holds the old value's low 16 bits and, in bits
 * 16..47, the body's CRC-32C.  The entry may reach media before its body
 * (eviction before the fence): recovery redoes it from the old value only
 * when the body has that CRC. */
#define PH_LOG_BIND 3u
#define PH_LOG_UNBIND 4u
#define PH_LOG_VERSIONED(kind, old, nv) \
    ((uint64_t)(kind) | ((uint64_t)(old) >> 48) << 8 | ((uint64_t)(nv) >> 48) << 24 | \
     ((uint64_t)(nv) & 7u) << 40)

typedef struct ph_lane_entry {
    uint64_t xstate;    /* seq << 8 | PH_LOG_IDLE or PH_LOG_ACTIVE: the commit word */
    uint64_t op;        /* tag | PH_LOG_ALLOC_TO or PH_LOG_FREE_FROM */
    uint64_t block;     /* tag | offset of the block */
    uint64_t size;      /* tag | block bytes: class size, or extent bytes */
    uint64_t dest;      /* tag | offset of the destination word */
    uint64_t old;       /* tag | low 48 bits of the destination before (diagnostics) */
    uint64_t contents;  /* tag | 0, or PH_LOG_CONTENTS | CRC-32C of the block's `size` bytes */
    uint64_t checksum;  /* tag | CRC-32C of the seven words above, state ACTIVE */
} ph_lane_entry;
_Static_assert(sizeof(ph_lane_entry) == PH_LINE_SIZE, "ph_lane_entry size");

/* ---- transaction logs (src/log/txlog.c, src/alloc/engine_tx.c) ---------
 * Heaps with PH_FEAT_INCOMPAT_TX: after the PH_LANES_MAX lanes, the lane
 * region holds one transaction log per lane, used by the lane's holder: an
 * anchor line (PH_LANES_MAX of them together, at PH_TXLOG_ANCHORS, so
 * that recovery reads every lane's state in a few pages), and a records
 * area of PH_TXLOG_SIZE bytes (at PH_TXLOG_RECORDS + lane * size).  When
 * a transaction's records do not fit, they continue in overflow segments:
 * large blocks of the data region allocated with a logged pheap_alloc_to
 * whose destination is the `xnext` word of the anchor or of the previous
 * segment's header (written with the segment's magic and lane before the
 * allocation commits), and freed (logged pheap_free_from) once the
 * transaction is retired.
 * Records: a ph_txrec header, then `len` payload bytes padded to 8.  A
 * record belongs to the transaction of its `seq`; it counts only if its
 * CRC-32C (over the header's other bits and the payload) holds.  Records
 * are read in order from the first; the first that does not count ends the
 * log.  A NEXT record says the log continues in the segment that the
 * current one's `xnext` names.  Logs are reused without zeroing: a stale
 * record has another seq (sequences never repeat in a lane: a holder takes
 * them below a durable ceiling it raised first, see xceiling) or fails its
 * CRC.
 * Crash protocol (src/heap/tx.c): xstate := seq | ACTIVE is made durable
 * with the first fenced records (a pheap_tx_add, or the commit); recovery
 * rolls an ACTIVE transaction back -- every UNDO record's old bytes
 * restored -- unless its records end in a COMMIT record whose record
 * count and chained record CRCs match and whose contents CRC matches the
 * added ranges and allocated blocks as they are (their new bytes were
 * flushed before the same fence as the COMMIT record, and an eviction may
 * have made the record durable before them); then it rolls forward: REDO
 * writes, ALLOC and FREE applied in log order.  xstate := seq | IDLE
 * retires the log once the rollback or the roll-forward is durable. */
#define PH_TXLOG_SIZE 2048u
#define PH_TXLOG_ANCHORS ((uint64_t)PH_LANES_MAX * PH_LANE_SIZE)      /* in the lane region */
#define PH_TXLOG_RECORDS (PH_TXLOG_ANCHORS + (uint64_t)PH_LANES_MAX * PH_LINE_SIZE)
#define PH_TX_IDLE 0u
#define PH_TX_ACTIVE 1u
#define PH_TX_FORWARD 2u /* recovery decided to roll forward (it is rolling forward) */
#define PH_TX_SEQ_BLOCK (1ull << 20) /* sequences a holder takes per ceiling raise */

#define PH_TXREC_UNDO 1u   /* payload: the old bytes at `off` */
#define PH_TXREC_REDO 2u   /* payload: the new bytes for `off` */
#define PH_TXREC_ALLOC 3u  /* allocate the block at `off`, `aux` usable bytes */
#define PH_TXREC_FREE 4u   /* free the block at `off`, `aux` usable bytes */
#define PH_TXREC_COMMIT 5u /* off: records before it; aux: chained CRC | contents CRC << 32 */
#define PH_TXREC_NEXT 6u   /* the log continues in the segment xnext names */
#define PH_TXREC_LEN_MAX ((1u << 24) - 1)

typedef struct ph_txlog_anchor {
    uint64_t xstate;    /* seq << 8 | PH_TX_IDLE, _ACTIVE or _FORWARD: the commit word */
    uint64_t xceiling;  /* every seq a record may carry is below it */
    uint64_t xnext;     /* data offset of the first overflow segment, or 0 */
    uint64_t reserved[5];
} ph_txlog_anchor;
_Static_assert(sizeof(ph_txlog_anchor) == PH_LINE_SIZE, "ph_txlog_anchor size");

#define PH_TXSEG_MAGIC 0x4745535854485000ull /* "\0PHTXSEG" */
typedef struct ph_txseg_header {
    uint64_t xnext;     /* data offset of the next overflow segment, or 0 */
    uint64_t magic;     /* PH_TXSEG_MAGIC: recovery frees no block without it */
    uint64_t lane;      /* the lane whose log it continues */
    uint64_t reserved[5];
} ph_txseg_header;
_Static_assert(sizeof(ph_txseg_header) == PH_LINE_SIZE, "ph_txseg_header size");

typedef struct ph_txrec {
    uint64_t head;      /* bits 0..7 kind, 8..31 payload bytes, 32..63 CRC-32C */
    uint64_t seq;       /* the transaction's sequence */
    uint64_t off;       /* data offset the record is about (COMMIT: record count) */
    uint64_t aux;       /* see the kinds */
} ph_txrec;
_Static_assert(sizeof(ph_txrec) == 32, "ph_txrec size");

/* ---- slab descriptors (src/alloc/slab.c) ---------------------------------
 * One per data chunk, in the slab region: descriptor i describes chunk i
 * (data offset + i * PH_CHUNK_SIZE) while the extent log says that chunk is
 * a slab.  Line 0 is the header, written before the slab's extent-log
 * commit; lines 1..16 are the allocation bitmap, the durable truth for the
 * slab's blocks.
 * Bitmap: two bits per block, A (allocated) at bit 2k and E (allocated at
 * least once since the slab was made) at bit 2k+1.  Interleaved mapping:
 * block i lives in line i % 16 at position k = i / 16 of that line (word
 * k / 32, bits 2 * (k % 32)), so consecutive blocks never share a line.
 * At most 4096 blocks per slab (the 8-byte class uses half its chunk).
 * Invariants: A implies E; no bits beyond nblocks; class and sizes agree
 * with the size-class table of the format version. */
#define PH_SLAB_LINES 16u
#define PH_SLAB_WORDS (PH_SLAB_LINES * PH_LINE_SIZE / 8u)  /* 128 */
#define PH_SLAB_MAX_BLOCKS (PH_SLAB_WORDS * 32u)             /* 4096 */

/* Slab morphing (PH_FEAT_INCOMPAT_MORPH, 1.7; src/alloc/morph.c): a slab of
 * low occupancy becomes a slab of another class while its remaining blocks
 * ("old" blocks, of the class it had) stay where they are.  Both classes
 * have at most PH_MORPH_MAX_BLOCKS blocks, so the new class's A/E pairs
 * take words 0..3 of each bitmap line and the old blocks' A bits (one bit
 * each, no E) words 6 and 7: old block j at line j % 16, position
 * k = j / 16, word 6 + k / 64, bit k % 64.  A block of the new class that
 * overlaps a live old block is pinned: A set and E clear, a pair no
 * allocation makes (A implies E otherwise), never handed out and never
 * freed by the program; it is unpinned (A cleared) once no live old block
 * overlaps it.
 * The morph word is 0 while the slab has the class of its extent-log entry
 * (the class it was made with); else tag | new << 24 | old << 16 |
 * base << 8 | state, base the extent-log class:
 *   SETTLED   no old block: cls is the slab's class, words 6 and 7 zero;
 *   MORPHING  the old bits are in words 6 and 7, the rest is being
 *             rewritten for class `new`: recovery redoes it from them;
 *   MORPHED   cls is `new`, old blocks of class `old` live where words 6
 *             and 7 say (possibly none).
 * A crash before the MORPHING word is durable leaves the word as it was
 * and, perhaps, old bits in words 6 and 7 that it does not explain: the
 * next read-write open clears them. */
#define PH_MORPH_TAG 0x4d4f5250u /* "MORP" */
#define PH_MORPH_SETTLED 1u
#define PH_MORPH_MORPHING 2u
#define PH_MORPH_MORPHED 3u
#define PH_MORPH_WORD(state, base, old, cls) \
    ((uint64_t)PH_MORPH_TAG << 32 | (uint64_t)(cls) << 24 | (uint64_t)(old) << 16 | \
     (uint64_t)(base) << 8 | (uint64_t)(state))
#define PH_MORPH_STATE(w) ((unsigned)((w) & 0xff))
#define PH_MORPH_BASE(w) ((unsigned)((w) >> 8 & 0xff))
#define PH_MORPH_OLD(w) ((unsigned)((w) >> 16 & 0xff))
#define PH_MORPH_CLS(w) ((unsigned)((w) >> 24 & 0xff))
#define PH_MORPH_MAX_BLOCKS 2048u
#define PH_MORPH_OLD_WORD 6u     /* first word of a line holding old bits */

typedef struct ph_slab_desc {
    uint64_t cls;          /* size class index */
    uint64_t block_size;   /* bytes, from the class table */
    uint64_t nblocks;      /* blocks in the chunk */
    uint64_t morph;        /* morph word (1.7), 0 in a slab never morphed */
    uint64_t reserved[4];
    uint64_t xbits[PH_SLAB_WORDS]; /* A/E bit pairs, interleaved */
} ph_slab_desc;
_Static_assert(sizeof(ph_slab_desc) == 17 * PH_LINE_SIZE, "ph_slab_desc size");
#define PH_SLAB_DESC_SIZE ((uint64_t)sizeof(ph_slab_desc))

/* ---- extent log (src/alloc/extent_log.c) ---------------------------------
 * Log-structured bookkeeping of the data region (NVAlloc): every change of
 * an extent (allocated large block, slab chunk, or freed) is one 16-byte
 * entry appended to the active half of the region; the allocator's index
 * is rebuilt in DRAM by replaying it.  When the active half is full, the
 * other half is rewritten -- the live extents with a new epoch (above
 * xlast_epoch, which is persisted first), zeros in the slots after them --
 * and one 8-byte store to xactive switches halves.
 * Entry words (little-endian):
 *   w0: bits 0..35 first page (from the data region start, 4 KiB pages),
 *       bits 36..39 kind, bits 40..47 size class (slabs),
 *       bits 48..63 epoch bits 16..31
 *   w1: bits 0..31 pages, bits 32..47 epoch bits 0..15,
 *       bits 48..63 check: 16 bits of a hash of w0 and w1's low 48 bits
 * An entry counts only if its 32-bit epoch matches the half's, its check
 * holds, its kind is known and its pages are not 0.
 * Invariants (tagged heaps; open refuses a heap that breaks one): every
 * slot of the active half that replay reads (below the mark in 1.2) is
 * zero, an entry of the active epoch, or has one zero word; 1 <= active
 * epoch <= max(1, xlast_epoch); no epoch exceeds PH_EXTLOG_EPOCH_MAX.
 * Order: entry j of a half (j-th appended) is slot (j mod L) * 4 + j / L of
 * the half's L lines of four slots, so consecutive entries lie in
 * different lines.
 * High-water mark (PH_FEAT_INCOMPAT_EXTLOG_HIGH, 1.2): entries j of half h
 * exist only below xhigh[h]; replay reads those slots and no others.
 * Every slot below the mark that no append has filled since the mark
 * covered it is durably zero, so that a torn append (one word on media)
 * leaves a zero word and never decodes.  The mark rises -- the slots it
 * newly covers zeroed, then the mark stored, one fence -- before an append
 * reaches it, in steps of many entries; a compaction writes the other
 * half's slots below its new mark and that mark before switching halves.
 * Slots at or past the mark may hold anything (entries of older epochs).
 * Without the feature (1.0, 1.1) the mark is the whole half: xhigh[] is 0
 * and unused, replay reads every slot, a compaction rewrites every slot
 * (1.0 heaps may keep stale slots of older epochs until their first
 * compaction by a 1.1 or later build). */
#define PH_EXT_FREE 1u      /* pages returned to free space */
#define PH_EXT_LARGE 2u     /* pages allocated as one large block */
#define PH_EXT_SLAB 3u      /* one chunk allocated as a slab */
/* Kind 4 (RESERVED, size class bits = the lease slot + 1 of its process):
 * a reservation of a heap shared between processes (docs/SHARING.md) --
 * of free space (a block chosen, not yet committed: a later LARGE or SLAB
 * entry of the same pages commits it, a FREE entry cancels it), or of a
 * live extent whose free waits for its lane to retire (a later FREE
 * releases it).  Replay keeps it for indexes of the shared heap; every
 * other open (no process of the sharing is left) takes its pages for free
 * space.  Only a shared open writes it, and only in a heap with
 * PH_FEAT_INCOMPAT_SHARED (1.8), which builds that read kind 4 as damage
 * refuse. */
#define PH_EXT_RESERVED 4u

/* No heap reaches this many compactions (one per filled half); an epoch
 * above it in the header is damage, not history. */
#define PH_EXTLOG_EPOCH_MAX (1ull << 40)

typedef struct ph_extlog_header {
    uint64_t xactive;     /* epoch << 1 | active half; epoch starts at 1 */
    uint64_t xlast_epoch; /* highest epoch a compaction ever used (1.1; 0 before) */
    uint64_t xhigh[2];    /* per half: entries that replay reads (1.2, see above) */
    uint64_t reserved[4];
} ph_extlog_header;
_Static_assert(sizeof(ph_extlog_header) == PH_LINE_SIZE, "ph_extlog_header size");
_Static_assert(offsetof(ph_extlog_header, xhigh) == 16, "ph_extlog_header.xhigh");

typedef struct ph_extlog_entry {
    uint64_t w0;
    uint64_t w1;
} ph_extlog_entry;
_Static_assert(sizeof(ph_extlog_entry) == 16, "ph_extlog_entry size");

/* Entries of one half hold at least one entry per 16 KiB of data: enough
 * for a compacted log of any heap, since every live extent but slabs is
 * larger than PHEAP_SMALL_MAX. */
#define PH_EXTLOG_BYTES_PER_ENTRY_SPAN (16u * 1024u)

/* ---- named-object directory (src/heap/names_dir.c, names.c) -------------
 * Heaps with PH_FEAT_INCOMPAT_NAMES.  Extendible hashing over a 64-bit
 * hash of the name (ph_names_hash, seeded with the heap's uuid).  The names
 * region (PH_NAMES_SIZE bytes, zero at creation) holds a ph_names_header
 * at offset 0 and two directory arrays of PH_NAMES_DIR_MAX entries (a
 * segment's offset, depth and home_bits: PH_NAMES_ENTRY) at PH_NAMES_DIR0
 * and PH_NAMES_DIR1.  xdir = depth << 1 | array names the
 * current array and its depth d: its entry i is the segment that holds
 * every name whose hash has i as its top d bits.
 * Segment: a large block of the data region (allocated with a logged
 * pheap_alloc_to into xnew[]): a ph_names_seg line, then home + PH_NAMES_SPILL
 * entry lines.  It holds the names whose hashes have `prefix` as their top
 * `depth` bits; the next home_bits bits of the hash are the name's home
 * line.  Linear probing: an entry starts at or after its home line with no
 * EMPTY line between, so a search stops at the first EMPTY line.  The
 * entries of a segment are therefore in hash order cluster by cluster,
 * which is the order of pheap_name_next.
 * Entry lines.  Word 0 of every line, xref, is versioned: bits 48..63 are a
 * version that every store to the word increments (mod 2^16), bits 0..2
 * its kind:
 *   EMPTY (the word is 0)   never used since the segment was made
 *   HEAD  (1)  bits 3..47: the named block's offset (a multiple of 8)
 *   FREE  (2)  a removed entry's line, or a filler: searches go on past it
 *   CONT  (3)  bits 3..15: the line of the head it continues; it belongs
 *              to that head while the head is a HEAD whose `lines` cover it
 *              (else it is free, like FREE)
 * A head line: xref, hash, size (bytes asked at creation), meta = length
 * (bits 0..15) | lines (16..23) | CRC-32C of the entry (32..63: over hash,
 * size, the length and line count, the block offset and the name bytes),
 * then the name's first 32 bytes; each CONT line after it holds the next
 * 56 bytes.  Names are 1..PH_NAME_MAX bytes with no NUL.
 * Crash protocols:
 *   create: the lines after the head (CONT) and the head's words but xref
 *           are written and flushed first; xref goes from its old value to
 *           HEAD | block with a logged BIND (PH_LOG_BIND): the block and the
 *           name appear together.  GC mode: the body is fenced, then one
 *           durable store of xref (the block is garbage until it lands).
 *   remove: xref goes from HEAD to FREE with a logged UNBIND that frees the
 *           block (GC mode: the FREE store is durable, then the block is
 *           garbage).
 *   rebuild (a segment S grows, is compacted or split in two): the new
 *           segments are allocated into xnew[0..1] and filled and fenced;
 *           xold := S (the commit; 1 when the first segment is installed);
 *           the directory entries that named S name the new ones (first the
 *           array doubled when a split needs a deeper directory: the other
 *           array written, then xdir switched); xnew[0] := 0, then
 *           xnew[1] := 0 (xnew[0] == 0 with xold set: applied); S freed by a
 *           logged pheap_free_from of xold.  Recovery at open finishes a
 *           committed rebuild (xold != 0) and frees the segments of one that
 *           did not commit.  Until S is freed both S and its replacement hold
 *           every name, so lookups are right at every step. */
#define PH_NAMES_SIZE (256u * 1024u)
#define PH_NAME_MAX 255u
#define PH_NAMES_DIR_MAX 8192u               /* entries of one array: depth <= 13 */
#define PH_NAMES_DEPTH_MAX 13u
#define PH_NAMES_DIR0 4096u                  /* offsets in the names region */
#define PH_NAMES_DIR1 (PH_NAMES_DIR0 + PH_NAMES_DIR_MAX * 8u)
_Static_assert(PH_NAMES_DIR1 + PH_NAMES_DIR_MAX * 8u <= PH_NAMES_SIZE, "names directory fits");
#define PH_NAMES_HOME_MIN_BITS 8u            /* 256 home lines: a segment is a large block */
#define PH_NAMES_HOME_MAX_BITS 12u           /* 4096 */
#define PH_NAMES_SPILL 32u                   /* lines after the last home line */
#define PH_NAMES_SEG_MAGIC 0x474553454d414e50ull /* "PNAMESEG" */

/* A directory entry: the segment's offset (page-aligned) | its depth << 4
 * | its home_bits, so that a lookup finds the home line without reading
 * the segment's header.  The header holds the same two values. */
#define PH_NAMES_ENTRY(off, depth, bits) ((uint64_t)(off) | (uint64_t)(depth) << 4 | (bits))
#define PH_NAMES_ENTRY_OFF(e) ((e) & ~0xfffull)
#define PH_NAMES_ENTRY_DEPTH(e) ((unsigned)((e) >> 4 & 15))
#define PH_NAMES_ENTRY_BITS(e) ((unsigned)((e) & 15))

#define PH_NAME_EMPTY 0u
#define PH_NAME_HEAD 1u
#define PH_NAME_FREE 2u
#define PH_NAME_CONT 3u
#define PH_NAME_HEAD_BYTES 32u
#define PH_NAME_CONT_BYTES 56u

typedef struct ph_names_header {
    uint64_t xdir;      /* depth << 1 | current array (0 before the first name) */
    uint64_t xnew[2];   /* segments of a rebuild in preparation, or 0 */
    uint64_t xold;      /* committed rebuild: the segment it replaces (1: none), or 0 */
    uint64_t reserved[4];
} ph_names_header;
_Static_assert(sizeof(ph_names_header) == PH_LINE_SIZE, "ph_names_header size");

typedef struct ph_names_seg {
    uint64_t magic;     /* PH_NAMES_SEG_MAGIC */
    uint64_t depth;     /* bits of the prefix */
    uint64_t prefix;    /* the top `depth` bits of its names' hashes */
    uint64_t home_bits; /* log2 of its home lines */
    uint64_t hint_stamp;/* hints of one open (not flushed, never trusted by another): */
    uint64_t hint_used; /*   its random stamp, lines not EMPTY, lines of live entries */
    uint64_t hint_live;
    uint64_t reserved;
} ph_names_seg;
_Static_assert(sizeof(ph_names_seg) == PH_LINE_SIZE, "ph_names_seg size");

typedef struct ph_name_line {
    uint64_t xref;      /* versioned kind and payload, see above */
    uint64_t hash;      /* head: the name's hash */
    uint64_t size;      /* head: bytes asked at creation */
    uint64_t meta;      /* head: length | lines << 16 | CRC-32C << 32 */
    uint8_t name[PH_NAME_HEAD_BYTES]; /* head: the name's first bytes, zero-padded */
} ph_name_line;
_Static_assert(sizeof(ph_name_line) == PH_LINE_SIZE, "ph_name_line size");
_Static_assert(PH_NAME_HEAD_BYTES + 4 * PH_NAME_CONT_BYTES >= PH_NAME_MAX, "5 lines hold a name");

/* ---- process table (src/heap/procs.c; PH_FEAT_INCOMPAT_PROCS, 1.6) -------
 * Who holds the heap read-write now.  Nothing here is durable state: it is
 * never flushed, recovery never reads it, and a power loss may leave any
 * mix of it on media.  What it says is only believed together with the
 * liveness lock of each slot: an open-file-description write lock (fcntl
 * F_OFD_SETLK) on the one byte at PH_PROCS_LOCK_BYTE(region, i), held by
 * the open file of the process that filled slot i.  The kernel drops that
 * lock when the process dies, however it dies, so a slot whose byte no one
 * has locked is stale, whatever pid it names (pids are reused).
 *
 * Page 0: ph_procs_header.  Page 1: PH_PROCS_SLOTS leases of one line.
 * Then PH_PROCS_CHUNK_BYTES per data chunk at max_size, reserved for the
 * state that processes sharing the heap keep about each chunk: zero, and
 * unbacked by the file system, until it is used.
 * Invariant: a lease whose liveness byte is locked has xpid != 0 and
 * describes the process holding the lock; every other lease is free
 * (all zero) or stale.
 * Attach and detach are serialised by a write lock on the region's first
 * byte (the gate), taken with F_OFD_SETLKW and held for microseconds. */
#define PH_PROCS_MAGIC 0x53434f5250485000ull /* "\0PHPROCS" */
#define PH_PROCS_SLOTS 64u
#define PH_PROCS_CHUNK_BYTES 16u
#define PH_PROCS_SIZE(max_size) \
    (2u * PH_PAGE_SIZE + \
     ((max_size) / PH_CHUNK_SIZE * PH_PROCS_CHUNK_BYTES + PH_PAGE_SIZE - 1) / PH_PAGE_SIZE * PH_PAGE_SIZE)
#define PH_PROCS_GATE_BYTE(region_off) (region_off)
/* Read-locked by every read-only open (the reader byte) and every open for
 * sharing (the sharer byte) while it lasts; each kind probes the other's
 * byte after locking its own, so the two never hold the heap at once. */
#define PH_PROCS_READER_BYTE(region_off) ((region_off) + 1u)
#define PH_PROCS_SHARER_BYTE(region_off) ((region_off) + 2u)
#define PH_PROCS_LOCK_BYTE(region_off, i) ((region_off) + PH_PAGE_SIZE + (uint64_t)(i) * PH_LINE_SIZE)

/* Pages 2 on: one ph_procs_chunk per data chunk (the chunk at data offset
 * i * PH_CHUNK_SIZE has entry i), for a heap shared between processes
 * (docs/SHARING.md): which process owns the slab there, and the blocks
 * that other processes freed in it and its owner has not taken back yet.
 * Zero in a heap no two processes share; volatile like the rest of the
 * region. */
typedef struct ph_procs_chunk {
    uint64_t xowner;   /* identity of the process that owns the slab (ph_procs_identity), 0: none */
    uint64_t xremote;  /* data offset of the first block of the remote-free list, 0: empty;
                          a listed block's first word holds the next one's offset */
} ph_procs_chunk;
_Static_assert(sizeof(ph_procs_chunk) == PH_PROCS_CHUNK_BYTES, "ph_procs_chunk size");
#define PH_PROCS_CHUNKS_AT(region_off) ((region_off) + 2u * PH_PAGE_SIZE)
/* Page 0, after the header's line: one byte per lane, the lease slot + 1 of
 * the process whose thread holds the lane in a heap shared between
 * processes, 0 when no process does (a survivor replays a dead process's
 * lanes: docs/SHARING.md). */
#define PH_PROCS_LANES_AT(region_off) ((region_off) + PH_LINE_SIZE)

/* Page 0, its second half: the names that open transactions of the
 * processes sharing the heap create or remove (docs/SHARING.md, "Names and
 * roots"), so that no other process creates or removes one of them before
 * the transaction ends.  Read and written under the directory's lock
 * between processes (ph_procs_header.xnames_lock); a slot is claimed and
 * let go by compare-and-swap of its owner, so that the takeover of a dead
 * owner and a claim of its slot never both win; a dead owner's slots hold
 * until its takeover lets them go.  Slot 0 holds every name: a process
 * whose transactions hold more names than the other slots have room for
 * holds the whole directory (against the other processes' creates and
 * removes, never their lookups) until they end. */
#define PH_PROCS_HOLDS 128u
typedef struct ph_procs_hold {
    uint64_t xowner;   /* identity of the holding process (ph_procs_identity), 0: a free slot */
    uint64_t xhash;    /* the held name's hash (ph_names_hash) */
} ph_procs_hold;
_Static_assert(sizeof(ph_procs_hold) == 16, "ph_procs_hold size");
#define PH_PROCS_HOLDS_AT(region_off) ((region_off) + PH_PAGE_SIZE / 2u)
_Static_assert(PH_LINE_SIZE + PH_LANES_MAX <= PH_PAGE_SIZE / 2u, "lane holders end before the holds");
_Static_assert(PH_PROCS_HOLDS * sizeof(ph_procs_hold) == PH_PAGE_SIZE / 2u, "holds fill page 0's second half");

typedef struct ph_procs_header {
    uint64_t magic;        /* PH_PROCS_MAGIC once the table was first used */
    uint64_t xattaches;    /* read-write opens that took a lease */
    uint64_t xstale;       /* stale leases found and cleared */
    uint64_t xext_lock;    /* sharing: the extent log's lock between processes (util/plock.h) */
    uint64_t xroot_lock;   /* sharing: the root table's lock between processes */
    uint64_t xtakeovers;   /* sharing: dead processes taken over since the first attach */
    uint64_t xnames_lock;  /* sharing: the name directory's lock between processes */
    uint64_t xnames_seq;   /* sharing: the name directory's sequence (odd while a process
                              changes it: heap/names.h) */
} ph_procs_header;
_Static_assert(sizeof(ph_procs_header) == PH_LINE_SIZE, "ph_procs_header size");

/* Lease flags (ph_lease.xflags). */
#define PH_LEASE_EXCLUSIVE 0x1u /* an exclusive read-write open */
#define PH_LEASE_SHARED 0x2u    /* an open for sharing */
#define PH_LEASE_TAKEN 0x4u     /* sharing: its process died and was taken over (the
                                   slot stays until a fork child that kept the
                                   open file lets its lock go) */
#define PH_LEASE_NS_SHIFT 32    /* bits 32..63 of xflags: the holder's pid namespace
                                   (1.8; 0: not recorded), so that a pid is only
                                   believed within its own namespace */

typedef struct ph_lease {
    uint64_t xpid;        /* process id; 0: a free slot */
    uint64_t xstart;      /* the process's start time, clock ticks after boot
                             (/proc/PID/stat field 22): with the pid, names the
                             process even after its pid is reused */
    uint64_t xsince;      /* attach time, seconds since the epoch */
    uint64_t xuid;        /* effective user id */
    uint64_t xflags;      /* PH_LEASE_* */
    uint64_t xgen;        /* ph_procs_header.xattaches at attach: tells two
                             leases of one slot apart */
    char comm[16];        /* the process's name (/proc/PID/comm), NUL-padded */
} ph_lease;
_Static_assert(sizeof(ph_lease) == PH_LINE_SIZE, "ph_lease size");
_Static_assert(PH_PROCS_SLOTS * sizeof(ph_lease) == PH_PAGE_SIZE, "leases fill page 1");

/* ---- The checkpoint journal (persist/ckpt.c) ----
 * A heap opened at the checkpoint durability level lives in a working
 * copy in memory (tmpfs); a checkpoint copies the pages that changed since
 * the last one into the heap file through this journal, a file of its own
 * next to the heap file: "<heap file>.ckpt".  Page 0 holds the header;
 * from page 1 on, the body: `npages` index entries (PH_CKPT_ENTRY), padded
 * to a whole page, then the contents of the entries that are not zero
 * pages, in index order.  The header is written, with its CRC, only after
 * the body is durable; it is the commit.  A journal whose header or body
 * fails its CRC commits nothing: its checkpoint never reached the heap
 * file. */
#define PH_CKPT_MAGIC 0x313054504b434850ull /* "PHCKPT01" */
#define PH_CKPT_COMMITTED 1u /* the body is to be copied into the heap file */
#define PH_CKPT_APPLIED 2u   /* it was, and the file synced: nothing to do */

typedef struct ph_ckpt_header {
    uint64_t magic;       /* PH_CKPT_MAGIC */
    uint32_t version;     /* 1 */
    uint32_t state;       /* PH_CKPT_COMMITTED or PH_CKPT_APPLIED */
    uint8_t uuid[16];     /* the heap's (ph_header.uuid): a journal of another heap is ignored */
    uint64_t gen;         /* checkpoints committed through this journal */
    uint64_t file_size;   /* the heap file's length after this checkpoint */
    uint64_t npages;      /* index entries */
    uint64_t body_bytes;  /* bytes of the body (index and contents) */
    uint32_t body_crc;    /* CRC-32C of the body, seeded with the low word of gen */
    uint32_t crc;         /* CRC-32C of every field above */
} ph_ckpt_header;
_Static_assert(sizeof(ph_ckpt_header) == 72, "ph_ckpt_header size");

/* An index entry: the page's number in the file (offset / PH_PAGE_SIZE)
 * shifted left by one, bit 0 set for a page of zeros (punched in the heap
 * file, no contents in the body). */
#define PH_CKPT_ENTRY(page, zero) (((uint64_t)(page) << 1) | (uint64_t)((zero) != 0))
#define PH_CKPT_ZERO 1u

#endif /* PH_FORMAT_LAYOUT_H */
