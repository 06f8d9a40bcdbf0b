/*
 * pheap.h -- the pheap manual.
 *
 * pheap is a persistent memory heap: programs keep pointer-rich data
 * structures in a memory-mapped file and find them again, intact, after a
 * restart, a kill -9 or a power failure.  This header is the whole public
 * interface; every call says what it does, what holds after a crash and how
 * it fails.
 *
 * Conventions
 *   - Calls returning int return 0 on success or a negative PHEAP_E* code.
 *   - Calls returning an offset or a pointer return 0 / NULL on failure.
 *   - Every failing call records its code and a readable message for the
 *     calling thread: pheap_errno() and pheap_errmsg().
 *   - "Durable" means: survives a process crash, a kill -9 and a power
 *     failure of the machine (x86 persistency model, DESIGN section 2).
 *   - A handle may be used by many threads at once unless a call says
 *     otherwise.
 *   - A handle belongs to the process that opened it.  After fork() the
 *     child's copy of an open handle is unusable: every call on it fails
 *     with PHEAP_EFORKED (pheap_direct and pheap_offset return NULL / 0
 *     with that code), except pheap_close, which releases the copy.  The
 *     parent's handle is unaffected.  A child that wants the heap opens it
 *     itself once the parent has closed it (see pheap_close).
 */
#ifndef PHEAP_H
#define PHEAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ===================================================================== */
/*  Versions                                                             */
/* ===================================================================== */

#define PHEAP_VERSION_MAJOR 0
#define PHEAP_VERSION_MINOR 1
#define PHEAP_VERSION_PATCH 0

/* Heap file format written by this build.  A heap with the same major
 * version and any minor version opens; a newer major is refused. */
#define PHEAP_FORMAT_MAJOR 1
#define PHEAP_FORMAT_MINOR 8

/* Library version as "major.minor.patch". */
const char *pheap_version(void);

/* ===================================================================== */
/*  Types                                                                */
/* ===================================================================== */

typedef struct pheap pheap;   /* opaque handle of an open heap */

/* Persistent pointer: byte offset from the start of the heap file.  0 is
 * the null offset.  Offsets stay valid when the file is mapped at another
 * address, copied to another machine or opened by another process. */
typedef uint64_t pheap_off;

/* ===================================================================== */
/*  Errors                                                               */
/* ===================================================================== */

enum {
    PHEAP_OK = 0,
    PHEAP_EINVAL = -1,      /* bad argument or option value */
    PHEAP_ENOMEM = -2,      /* out of memory (process or heap) */
    PHEAP_ENOENT = -3,      /* not found: the heap file, or a root */
    PHEAP_EEXIST = -4,      /* exists already: the file (PHEAP_EXCL), or a name */
    PHEAP_EACCES = -5,      /* no permission to open the file as asked */
    PHEAP_EBUSY = -6,       /* heap open read-write elsewhere (file lock), or a name
                               held by another thread's open transaction */
    PHEAP_EIO = -7,         /* the operating system refused (see message) */
    PHEAP_ENOTHEAP = -8,    /* the file is not a pheap heap (bad magic) */
    PHEAP_ETRUNCATED = -9,  /* the file is shorter than its header says */
    PHEAP_ECHECKSUM = -10,  /* checksum mismatch: the header, the access mode
                               word, a root entry (see the message) */
    PHEAP_EVERSION = -11,   /* format version this build cannot open */
    PHEAP_ELAYOUT = -12,    /* inconsistent header fields or region table */
    PHEAP_EEMPTY = -13,     /* zero-length file (not created by pheap) */
    PHEAP_EISDIR = -14,     /* the path is a directory */
    PHEAP_ERDONLY = -15,    /* write through a read-only handle */
    PHEAP_ENOSPC = -16,     /* file system full, or a fixed table (roots) */
    PHEAP_ENAME = -17,      /* name empty or longer than the limit */
    PHEAP_ENOTSUP = -18,    /* not supported here (CPU, file system) */
    PHEAP_ECORRUPT = -19,   /* metadata inconsistent (see pheap_check) */
    PHEAP_ERANGE = -20,     /* offset outside the heap's data region */
    PHEAP_EDOUBLEFREE = -21,/* the block is already free */
    PHEAP_EINTERIOR = -22,  /* offset inside a block, not at its start */
    PHEAP_ENOTALLOC = -23,  /* offset in space that was never allocated */
    PHEAP_EFORKED = -24,    /* handle inherited through fork(): see pheap_close */
    PHEAP_ECANCELED = -25,  /* an initialiser returned nonzero: allocation canceled */
    PHEAP_ENOTLIVE = -26,   /* offset or word in no live block (free or never allocated) */
    PHEAP_ENOTX = -27,      /* the call needs a transaction and the thread has none */
    PHEAP_EABORTED = -28,   /* the thread's transaction was aborted: only commit or
                               abort may follow, to close its levels */
    PHEAP_ERECOVER = -29,   /* a GC-mode heap after an unclean shutdown: call
                               pheap_recover before allocating or freeing */
    PHEAP_EPERM = -30,      /* not the heap's owner (nor root): pheap_set_mode */
    PHEAP_EROMODE = -31,    /* heap is in read-only mode (pheap_set_mode) */
};

/* Static description of an error code ("bad checksum", ...). Never NULL. */
const char *pheap_strerror(int err);

/* Code of the last failure in the calling thread (0 if none yet). */
int pheap_errno(void);

/* Detail of the last failure in the calling thread, e.g. the path and the
 * field that was wrong.  Valid until the thread's next failing call. */
const char *pheap_errmsg(void);

/* ===================================================================== */
/*  Opening and closing                                                  */
/* ===================================================================== */

/* pheap_options.flags */
#define PHEAP_CREATE   0x1u  /* create the file if it does not exist */
#define PHEAP_EXCL     0x2u  /* with PHEAP_CREATE: fail if it exists */
#define PHEAP_RDONLY   0x4u  /* map read-only; every write call fails */
#define PHEAP_SIMULATE 0x8u  /* crash simulator: see the section below */
#define PHEAP_SNAPSHOT 0x10u /* a private view that never writes the file: see
                                pheap_open (tools: pheap check, info, stats, ls) */
#define PHEAP_SHARED   0x20u /* read-write, shared with other processes that open
                                the heap with it: see "Sharing a heap" below */

/* pheap_options.flush: how stores are made durable.  AUTO picks cache-line
 * flushes when the file is on DAX (MAP_SYNC works) and msync otherwise; the
 * environment variable PHEAP_FLUSH=clwb|clflushopt|clflush|msync|none
 * overrides AUTO.  A value set here wins over the environment. */
enum pheap_flush_kind {
    PHEAP_FLUSH_AUTO = 0,
    PHEAP_FLUSH_CLWB,       /* clwb + sfence (best where available) */
    PHEAP_FLUSH_CLFLUSHOPT, /* clflushopt + sfence */
    PHEAP_FLUSH_CLFLUSH,    /* clflush (serialising, no fence needed) */
    PHEAP_FLUSH_MSYNC,      /* msync(MS_SYNC) of the pages (non-DAX) */
    PHEAP_FLUSH_NONE,       /* nothing: survives a process crash only */
    PHEAP_FLUSH_SIM,        /* crash simulator (set by PHEAP_SIMULATE) */
    PHEAP_FLUSH_CHECKPOINT, /* a working copy in memory, copied into the file by
                               checkpoints (set by PHEAP_DURABILITY_CHECKPOINT) */
};

/* Name of a flush kind ("clwb", "msync", ...). */
const char *pheap_flush_name(unsigned kind);

/* pheap_stats.flush_source: why the flush kind in use was chosen. */
enum pheap_flush_source {
    PHEAP_FLUSH_FROM_DAX = 1,  /* AUTO, and the file maps with MAP_SYNC (DAX): the
                                  best cache-line flush of the CPU */
    PHEAP_FLUSH_FROM_NOT_DAX,  /* AUTO, and the file is not on DAX: msync */
    PHEAP_FLUSH_FROM_OPTION,   /* pheap_options.flush */
    PHEAP_FLUSH_FROM_ENV,      /* the PHEAP_FLUSH environment variable */
    PHEAP_FLUSH_FROM_SIMULATE, /* PHEAP_SIMULATE */
    PHEAP_FLUSH_FROM_DURABILITY, /* the checkpoint durability level */
};

/* pheap_options.durability (environment: PHEAP_DURABILITY=sync|checkpoint):
 * what a power loss or a kernel crash may take, for a heap file not on DAX.
 * A process crash (kill -9, a segfault) takes nothing at any level: every
 * call that returned is in the heap.
 *
 *   SYNC (AUTO)  every call is durable when it returns: the file is synced
 *                at every fence (flush kind msync, with group commit: threads
 *                that fence at once share one fdatasync), or cache lines are
 *                flushed (DAX).
 *   CHECKPOINT   the heap runs in a working copy in memory (a file in
 *                PHEAP_WORKDIR, default /dev/shm/pheap-UID), which outlives
 *                the process but not the machine; pheap_checkpoint copies what
 *                changed into the heap file, durable on return.  A power loss
 *                rolls the heap back to its last completed checkpoint, never
 *                to a mix of two.  Checkpoints are taken by pheap_checkpoint,
 *                every options.checkpoint_ms milliseconds when that is set
 *                (environment PHEAP_CHECKPOINT_MS), and by pheap_close.  The
 *                next open after a process crash resumes from the working copy
 *                (pheap_stats.from_working_copy), after a reboot from the file.
 *                Not for heaps on DAX, GC heaps, PHEAP_SIMULATE or an explicit
 *                options.flush (PHEAP_EINVAL); a read-only open or a snapshot
 *                reads the file, that is the last checkpoint.
 *                docs/PERSISTENCE.md, "Checkpoints". */
enum pheap_durability {
    PHEAP_DURABILITY_AUTO = 0, /* SYNC */
    PHEAP_DURABILITY_SYNC,
    PHEAP_DURABILITY_CHECKPOINT,
};

/* Reason a flush kind was chosen, as a phrase ("automatic: file not on
 * DAX", ...); "unknown" for a value outside the enum. */
const char *pheap_flush_source_name(unsigned source);

/* pheap_options.protect (environment: PHEAP_PROTECT=auto|alias|keys|off).
 * DESIGN 2.6: a user bug may damage a neighbouring block, never the
 * allocator.  Every page of the header, roots, lanes and transaction logs,
 * slab descriptors and bitmaps, extent log and names directory -- and the
 * blocks of the data region that hold pheap's own metadata (name-directory
 * segments, transaction-log segments) -- is read-only in the mapping the
 * program uses (pheap_direct, pheap_offset, initialisers and filters get
 * addresses in it); a stray store there is a SIGSEGV, not damage.
 *   ALIAS  (AUTO's choice) pheap writes its metadata through a second shared
 *          mapping of the same file at an address it never hands out.  No
 *          system call per operation; twice the address space (reserved,
 *          not memory).
 *   KEYS   memory protection keys: one mapping, the metadata pages tagged
 *          with a key whose writes each thread denies except inside pheap's
 *          own calls (two WRPKRU per call, no system call; shut again while
 *          initialisers and filters run).  Only when asked for (AUTO stays
 *          ALIAS, which costs nothing per call), and only where the CPU and
 *          the kernel have keys (pkey_alloc succeeds): else PHEAP_ENOTSUP.
 *          Uses one of the process's keys (kept until exit).  A thread
 *          whose PKRU denies the key -- on Linux, one that existed before
 *          the key was allocated -- cannot read the metadata either.
 *   OFF    no protection: a debugging aid.  Also what a PHEAP_SNAPSHOT view
 *          (a private copy-on-write mapping, which nothing can alias) and a
 *          simulated heap (PHEAP_SIMULATE: its working copy is such a
 *          mapping) use unless ALIAS is asked for; asked for, a simulated
 *          heap's working copy is a copy of the file in memory that both
 *          mappings share (slower opens).
 * pheap_stats.protection tells what an open uses; a PHEAP_RDONLY open maps
 * everything read-only (PHEAP_PROTECT_READONLY).  The program's stores
 * through its own blocks are never checked: an overflow past a block
 * damages the neighbouring block only (no block has an in-band header).
 * Whatever the kind, the program's calls never free a block that holds
 * pheap's metadata nor write through one (PHEAP_EINVAL), and a block the
 * program freed behind a call's back (a use after free) that became one is
 * left alone when the call goes on (docs/PROTECTION.md).
 * Errors of pheap_open: PHEAP_EINVAL (an unknown kind, or READONLY asked
 * for), PHEAP_ENOTSUP (KEYS where there are no keys: the message says why). */
enum pheap_protect_kind {
    PHEAP_PROTECT_AUTO = 0,
    PHEAP_PROTECT_ALIAS,    /* metadata read-only in the program's view, written via an alias */
    PHEAP_PROTECT_KEYS,     /* metadata tagged with a protection key pheap's calls enable */
    PHEAP_PROTECT_OFF,      /* nothing protected */
    PHEAP_PROTECT_READONLY, /* read-only open: the whole mapping is read-only */
};

/* "alias", "keys", "off", "read-only", "auto"; "unknown" otherwise. */
const char *pheap_protect_name(unsigned kind);

/* What to expect of each kind (`make bench`, bench/README.md has numbers):
 *   cache-line flushes on DAX   durable against power loss at every fence;
 *                               about 10 M small allocations/s per thread.
 *   cache-line flushes elsewhere (forced on a file that is not on DAX)
 *                               the lines reach the page cache, not the
 *                               disk: a process crash loses nothing, a power
 *                               loss can lose anything since the kernel last
 *                               wrote the file back (pheap_stats.power_safe 0).
 *   msync                       durable against power loss at every fence;
 *                               each fence is an msync of the dirty pages:
 *                               hundreds to a few thousand allocations/s
 *                               on an SSD (the device decides).
 *   none                        a process crash (kill -9) loses nothing; a
 *                               power loss can lose anything written since
 *                               the kernel last wrote the file back; as fast
 *                               as cache-line flushes or faster.
 * On tmpfs the file itself is memory: nothing survives a power loss. */

typedef struct pheap_options {  /* zero (or NULL) = open existing, read-write */
    uint64_t size;              /* bytes of data region when creating (0 = 64 MiB):
                                   what blocks can use at once, before any
                                   growth; rounded up to 64 KiB.  The file is
                                   larger by its metadata (see max_size) */
    unsigned flags;             /* PHEAP_CREATE | PHEAP_EXCL | PHEAP_RDONLY | PHEAP_SIMULATE
                                   | PHEAP_SNAPSHOT */
    unsigned mode;              /* permission bits when creating (0 = 0600) */
    uint64_t sim_crash_fence;   /* with PHEAP_SIMULATE: just before this fence (1-based) */
    const char *sim_crash_image;/*   takes effect, write the durable image here (0 = never) */
    double sim_evict_probability; /* with that image: each dirty or flushed-unfenced line */
    uint64_t sim_seed;          /*   joins it with this probability, drawn from this seed */
    uint64_t max_size;          /* when creating: the most bytes the file may grow
                                   to, metadata included (0 = just enough for size:
                                   no growth); fixed for life.  The metadata regions
                                   are laid out for it (about 1.9% of max_size +
                                   1.3 MiB, sparse: only what covers the data in
                                   use takes space); PHEAP_EINVAL when max_size
                                   cannot hold size after them */
    unsigned flush;             /* enum pheap_flush_kind; 0 = AUTO (see above) */
    unsigned consistency;       /* PHEAP_CONSISTENCY_LOG (0) or _GC when creating; when
                                   opening, 0 accepts the heap's mode and _GC asks for
                                   a GC heap (PHEAP_EINVAL for a LOG one): the mode is
                                   fixed at creation (see "Consistency modes") */
    /* More of the crash simulator (with PHEAP_SIMULATE; see its section): */
    uint64_t sim_crash_store;   /* or just after this durable store (1-based), same image */
    unsigned sim_mode;          /* PHEAP_SIM_WORDS | PHEAP_SIM_CONTENDED | PHEAP_SIM_NT_LAG
                                   | PHEAP_SIM_PAGES */
    unsigned protect;           /* enum pheap_protect_kind: how metadata is kept out of
                                   the program's reach (0 = AUTO; see pheap_protect_kind) */
    double sim_store_evict_probability; /* at each durable store, its line is written
                                   back on its own with this probability */
    uint64_t sim_store_seed;    /*   drawn from this seed */
    uint64_t sim_schedule_seed; /* nonzero: seeded pauses before fences, so that
                                   threads meet in more states */
    const char *sim_crash_site; /* sim_crash_fence counts only fences of this flush
                                   site of pheap's source: a function name
                                   ("compact") or file:line ("lane.c:80") */
    unsigned durability;        /* enum pheap_durability (0 = AUTO: sync) */
    unsigned checkpoint_ms;     /* CHECKPOINT level: a checkpoint every this many
                                   milliseconds, from a thread of pheap's (0 = only
                                   pheap_checkpoint and pheap_close) */
} pheap_options;

/* pheap_options.sim_mode */
#define PHEAP_SIM_WORDS 0x1u     /* crash images take each 8-byte word that differs on
                                    its own (x86's guarantee), not whole lines */
#define PHEAP_SIM_CONTENDED 0x2u /* sim_crash_fence counts only fences taken while
                                    another thread has unfenced stores or flushes */
#define PHEAP_SIM_NT_LAG 0x4u    /* with PHEAP_SIM_WORDS: non-temporal stores not yet
                                    fenced stay out of the image while other words
                                    join (write-combining buffers drain last) */
#define PHEAP_SIM_PAGES 0x8u     /* the page cache of an ordinary file (the msync back
                                    end): a flush only marks, a fence after a flush
                                    syncs the file (every page that differs becomes
                                    durable, flushed or not, and the file's length);
                                    crash images and eviction at stores take whole
                                    4 KiB pages, and a length not yet synced with
                                    the same probability.  Not with PHEAP_SIM_WORDS
                                    or PHEAP_SIM_NT_LAG (PHEAP_EINVAL) */

/* Opens the heap file at `path`, creating it first when PHEAP_CREATE is set
 * and the file does not exist (or is empty), and stores the handle in *out.
 *
 * `path` is a path when it holds a '/' ("./data.heap", "/srv/x.heap") and
 * a heap name otherwise: "mydata" opens the file mydata.heap in the heap
 * directory (pheap_dir); a name that already ends in ".heap" is not given
 * the suffix twice ("mydata.heap" is the same heap).  With PHEAP_CREATE a
 * missing heap directory is created first (mode 0700, parents as needed).
 * A name is not ".", ".." or empty, and its file name (with ".heap") has
 * at most PHEAP_HEAP_NAME_MAX bytes.  A file in the current directory is
 * opened with "./name".  pheap_path tells which file a name is.
 *
 * Creation is atomic: the heap is formatted in an unnamed file in the
 * directory of `path` (O_TMPFILE; a named temporary file next to it where
 * the file system lacks that) and linked into place when complete, so
 * `path` is never seen half-made and a creator killed midway leaves nothing.
 * Opening validates the header (magic, version, checksum, region table,
 * file size) and refuses anything wrong with a distinct error before
 * mapping.  A heap that was not closed cleanly is recovered before the
 * handle is returned, and pheap_stats() reports it (was_unclean).
 * A read-write open takes an exclusive lock on the file: a second
 * read-write or read-only open elsewhere fails with PHEAP_EBUSY until
 * pheap_close (or the death of the process); a PHEAP_SNAPSHOT open does
 * not (see below).  Read-only opens share.  A PHEAP_SHARED open shares
 * with other PHEAP_SHARED opens only: see "Sharing a heap" below.
 *
 * PHEAP_SNAPSHOT opens a private view that never writes the file: the file
 * is opened for reading only (a heap the caller may only read opens) and
 * mapped copy-on-write; every write call fails with PHEAP_ERDONLY, as on a
 * read-only handle, and nothing reaches the file, ever.
 *   - When no other process holds the heap read-write, the view takes the
 *     shared lock (like PHEAP_RDONLY), and a heap that was not closed
 *     cleanly is recovered inside the private view: the handle shows the
 *     heap as the next read-write open will leave it (pheap_stats:
 *     was_unclean, recovered_ops), and pheap_check checks that.
 *   - When another process holds it read-write (where PHEAP_RDONLY fails
 *     with PHEAP_EBUSY), the view takes no lock and runs no recovery: it
 *     is a snapshot of a heap in use (pheap_stats: held_elsewhere), read
 *     while its owner may change it -- good for figures, not a
 *     consistent state (pheap_check may report what an operation in
 *     flight looks like; the open itself may fail with PHEAP_ECORRUPT when
 *     it reads the extent log mid-change: try again).
 * PHEAP_SNAPSHOT excludes PHEAP_CREATE and PHEAP_SIMULATE; with
 * PHEAP_RDONLY it means the same.  The flush back end is "none".
 *
 * Metadata that recovery cannot trust, or that no crash leaves, is
 * refused, not obeyed: a damaged extent log (a slot of its active half
 * that is neither zero, nor an entry, nor a torn append; impossible
 * epochs; entries that contradict each other), a live slab whose
 * descriptor is not its class's, a damaged root entry, lane or transaction
 * log (an operation in flight in a heap closed cleanly), a damaged name
 * entry or rebuild word gives PHEAP_ECORRUPT, with the finding in the
 * message (docs/RECOVERY.md lists what open refuses and what only
 * pheap_check reports: a root or name of a block the program freed
 * opens).  Open reads what is live, not the whole heap: the descriptor of
 * a chunk that is no slab is read when free space in that chunk is first
 * to be handed out (allocated blocks there: see pheap_alloc's
 * PHEAP_ECORRUPT), so that an open costs the same at any heap size.
 *
 * Errors: PHEAP_EINVAL (bad options, empty path, a heap directory that is
 * not a directory), PHEAP_ENAME (a bad heap name: ".", "..", too long),
 * PHEAP_ENOENT (also: no heap directory can be found, see pheap_dir),
 * PHEAP_EEXIST, PHEAP_EACCES, PHEAP_EISDIR, PHEAP_EBUSY, PHEAP_EEMPTY, PHEAP_ENOTHEAP,
 * PHEAP_ETRUNCATED, PHEAP_ECHECKSUM, PHEAP_EVERSION, PHEAP_ELAYOUT,
 * PHEAP_ECORRUPT,
 * PHEAP_ENOTSUP (forced flush kind not on this CPU), PHEAP_ENOSPC (the file
 * system cannot hold the new heap), PHEAP_ENOMEM, PHEAP_EIO.
 * On failure nothing in the file has changed.
 *
 * Space: creating reserves the file's space in the file system (fallocate,
 * or zeros written where it is missing), and so does every growth, so that
 * a full file system is an error (PHEAP_ENOSPC), never a SIGBUS at a store.
 * Only the metadata that covers the data region now backed is reserved and
 * touched (about 2.5% of the data, plus 1.8 MiB); the rest of the metadata
 * laid out for max_size stays sparse, so the file's apparent size exceeds
 * what it takes on disk.  Opening costs time and memory that follow the
 * heap's current size and use, not max_size. */
int pheap_open(const char *path, const pheap_options *opts, pheap **out);

/* Where a user's heaps live, the directory of heap names (see pheap_open):
 * $PHEAP_DIR if set and not empty; else $XDG_DATA_HOME/pheap if
 * XDG_DATA_HOME is an absolute path; else $HOME/.local/share/pheap (the
 * home from the password database when HOME is unset or empty).  Writes it
 * into buf[len] without a trailing '/'; the directory need not exist (a
 * PHEAP_CREATE open of a name creates it).  Reads only the environment.
 * Errors: PHEAP_EINVAL (buf NULL or len 0), PHEAP_ENAME (it does not fit
 * in len bytes; PATH_MAX always does), PHEAP_ENOENT (none of the
 * variables is set and the user has no home directory). */
int pheap_dir(char *buf, size_t len);

/* Most bytes of the file name of a heap name, ".heap" included. */
#define PHEAP_HEAP_NAME_MAX 255

/* The file pheap_open would open for `path` (a path or a heap name) into
 * buf[len]: `path` itself when it holds a '/', else <pheap_dir>/NAME.heap.
 * Creates nothing; the file need not exist.  Errors: PHEAP_EINVAL (empty
 * path, no buffer, a heap directory that exists and is not a directory),
 * PHEAP_ENAME (".", "..", a name too long, or no room in buf), those of
 * pheap_dir. */
int pheap_path(const char *path, char *buf, size_t len);

/* Clean shutdown: makes everything durable, marks the heap clean, unmaps it
 * and releases the lock.  NULL is accepted.  Under PHEAP_SIMULATE the file
 * receives the simulator's durable image (only what was flushed and fenced).
 * The handle is freed even when an error is returned (PHEAP_EIO).
 * At the checkpoint durability level: a last checkpoint, of every page that
 * differs from the file (stores never flushed too), then the working copy
 * is removed; when that checkpoint fails (PHEAP_ENOSPC, PHEAP_EIO) the
 * working copy stays, and the next open resumes from it.
 *
 * In a child of fork(), on a handle the parent opened: releases only the
 * child's copy (its memory, mapping and file descriptor) and returns 0.  The
 * heap is not marked clean, nothing is flushed, no page goes back to the
 * file system, and the parent keeps its lock and its heap as they were.
 * The lock belongs to the open file, which the child's descriptor shares:
 * until the child closes the copy (or exits, or execs: the descriptor is
 * close-on-exec), a reopen of the heap by the parent after its own close
 * fails with PHEAP_EBUSY. */
int pheap_close(pheap *h);

/* Makes the heap's state at this moment durable.  At the CHECKPOINT level
 * (pheap_durability): holds every pheap call of the process at its entry
 * for as long as it takes to copy the pages that changed since the last
 * checkpoint into memory (the calls already running end first), then
 * writes them to the heap file through its journal; durable on return.
 * Crash guarantee: a power loss before the return leaves the file at the
 * previous checkpoint or at this one, never a mix; a process crash leaves
 * the working copy, from which the next open resumes.  At the other levels
 * there is nothing to do: 0 (sync: every call was durable on return; flush
 * none: nothing ever is).  Errors: PHEAP_EINVAL (NULL), PHEAP_EFORKED,
 * PHEAP_EBUSY (called from an initialiser or a filter, inside a call of
 * pheap's), PHEAP_ENOSPC or PHEAP_EIO (the file system refused a write or
 * a sync: the file stays at the last checkpoint and the heap goes on; the
 * next checkpoint copies what this one did not), PHEAP_ENOMEM. */
int pheap_checkpoint(pheap *h);

/* What the checkpoint level left of the heap file at `path` (a path or a
 * heap name), read without opening the heap (pheap info): */
typedef struct pheap_checkpoint_info {
    unsigned working_copy;   /* 1 if a working copy of this heap exists: a process
                                holds the heap at the checkpoint level, or one that
                                did crashed, and the next read-write open resumes
                                from it (at any level) */
    unsigned journal;        /* PHEAP_JOURNAL_*: the state of "<file>.ckpt" */
    uint64_t checkpoints;    /* checkpoints committed through that journal */
    char working_copy_path[4096]; /* where it is (or would be) */
} pheap_checkpoint_info;
#define PHEAP_JOURNAL_NONE 0      /* no journal of this heap */
#define PHEAP_JOURNAL_APPLIED 1   /* its last checkpoint is in the file */
#define PHEAP_JOURNAL_COMMITTED 2 /* a checkpoint a power loss cut short: committed,
                                     not yet all in the file; the next read-write open
                                     copies it in, read-only opens refuse the file */
/* Errors: PHEAP_EINVAL (NULL), those of pheap_path, PHEAP_ENOENT, PHEAP_EACCES
 * (the file), PHEAP_EPERM (a working-copy directory that is not private). */
int pheap_checkpoint_info_get(const char *path, pheap_checkpoint_info *out);

/* A process that holds a heap read-write (pheap_procs). */
#define PHEAP_PROC_EXCLUSIVE 0x1u /* an exclusive read-write open */
#define PHEAP_PROC_SHARED 0x2u    /* an open for sharing (PHEAP_SHARED) */
typedef struct pheap_proc {
    int64_t pid;          /* process id */
    uint64_t start_ticks; /* its start time in clock ticks after boot (/proc/PID/stat
                             field 22): with the pid, names the process for good */
    int64_t since;        /* when it opened the heap, seconds since the epoch */
    uint32_t uid;         /* its effective user id */
    uint32_t flags;       /* PHEAP_PROC_* */
    uint32_t slot;        /* its lease's slot in the heap's process table */
    char comm[16];        /* its name, NUL-terminated (truncated by the kernel) */
} pheap_proc;

/* Lists the processes that hold the heap at `path` (a path or a heap name,
 * as for pheap_open) read-write now, up to `max` into out[]; returns how
 * many there are (more than max when out[] was too small), or a negative
 * code.  Reads the file only (its header and process table); needs no write
 * permission, opens no heap and runs no recovery.
 *
 * Every read-write open of a heap of format 1.6 or later holds a lease in
 * the heap's process table: a slot naming its process, kept alive by a
 * lock on one byte of the file that the kernel drops when the process
 * dies, however it dies.  The lock is what counts: a slot left by a process
 * killed with SIGKILL is not listed, whatever pid it names, and the next
 * read-write open clears it.  A fork child that keeps its copy of the
 * handle keeps the lock held after its parent died; such a slot is not
 * listed either (its pid now names another process or none).  Read-only
 * opens and snapshots hold no lease, nor does a read-write open that finds
 * no slot it can lock (any reader of the file can lock its bytes): a lease
 * never refuses an open, so such an open runs unlisted.
 *
 * Errors: PHEAP_EINVAL (path NULL, out NULL with max > 0), those of opening
 * a file read-only and validating its header (pheap_open), PHEAP_ENOTSUP
 * (a heap made before format 1.6: it has no process table), PHEAP_EIO. */
int pheap_procs(const char *path, pheap_proc *out, size_t max);

/* ===================================================================== */
/*  Sharing a heap between processes                                     */
/* ===================================================================== */

/* pheap_options.flags |= PHEAP_SHARED opens a heap read-write together
 * with the other processes that open it so (up to 64 at once, the slots of
 * its process table): each allocates and frees, small and large blocks,
 * frees blocks the others allocated, reads and sets roots and names; every
 * operation keeps the guarantees it has in an exclusive open (LOG mode:
 * durable on return, failure-atomic after a crash of the process or of the
 * machine), transactions included.  Thread caches and the slabs they draw
 * from belong to one process (the heap records which); a block of another
 * process's slab is freed into that slab's list of remote frees, which its
 * owner takes back.
 *
 * Opens: a PHEAP_SHARED open excludes exclusive read-write opens and
 * read-only opens (PHEAP_EBUSY with the reason, both ways); a
 * PHEAP_SNAPSHOT view reads a shared heap as it reads one held elsewhere
 * (pheap_stats: held_elsewhere).  The first process to open the heap when
 * no other holds it recovers it as an exclusive open does, if it was not
 * closed cleanly; the last to close it marks it clean.
 *
 * Death: a process killed at any instruction (SIGKILL, a crash) stops no
 * other.  Its lease (pheap_procs) is kept alive by a lock the kernel drops
 * at its death; the first survivor to notice -- a later open, a close, or
 * any process's write calls, which look every 10 ms or so while they run
 * -- takes it over: rolls its operations in flight forward and its
 * transactions back or forward as recovery would, drops the space it had
 * reserved, and leaves its slabs to whoever needs them next (pheap_stats:
 * takeovers, takeover_max_ns).  Blocks it freed in another process's slab
 * and had not handed back yet may stay unavailable (never handed out
 * twice) until that slab changes hands or the heap is next opened by a
 * first process.  A lock between processes held by a dead process is taken
 * over by its first waiter after a millisecond; no wait lasts for ever.
 * When every process died, the next open, shared or not, recovers the
 * heap.
 *
 * Named objects are shared: a name one process makes, every process finds
 * (the directory's lock is between processes, and a BIND is retired with
 * a fence of its own).  Inside transactions too: a name a transaction
 * creates or removes is held against every other process's creates and
 * removes (PHEAP_EBUSY) until it ends, as against other threads'; a
 * process whose open transactions hold more than 127 names holds the
 * whole directory against the other processes' creates and removes (never
 * their lookups) until they end.  A dead process's holds hold until it is
 * taken over, which a create or remove that meets one does first.
 * Not available in a shared heap yet (PHEAP_ENOTSUP, nothing changed):
 * pheap_check, pheap_gc, pheap_defrag, pheap_set_mode, pheap_walk_chunks;
 * open the heap exclusively for those.  pheap_stats reports this process's view of the
 * slabs (those it owns) and every process's large blocks.  The blocks of
 * the data region that hold pheap's own metadata (name-directory and
 * transaction-log segments) are not guarded in a shared heap: another
 * process may free them and hand their memory out, which one process's
 * protection could not follow, so they are neither read-only in the
 * program's view nor refused to pheap_free.  A block that an exclusive
 * open left in a slab that changed size class (pheap_stats.morphed_slabs:
 * its old blocks) cannot be freed through a shared handle (PHEAP_ENOTSUP):
 * open the heap exclusively to free it; shared opens never morph slabs.
 *
 * PHEAP_SHARED excludes PHEAP_RDONLY, PHEAP_SNAPSHOT and PHEAP_SIMULATE
 * (PHEAP_EINVAL), the checkpoint durability level (PHEAP_EINVAL when asked
 * for; PHEAP_DURABILITY from the environment gives way to sync), and GC
 * mode, whose allocations write nothing a survivor could take over
 * (PHEAP_EINVAL at creation, PHEAP_ENOTSUP for a GC heap).  Heaps of
 * format 1.7 and before give PHEAP_ENOTSUP: sharing writes log entries
 * their builds would refuse.  A fork child may not use its parent's shared
 * handle (as for every handle); it opens the heap itself. */

/* ===================================================================== */
/*  Persistent pointers                                                  */
/* ===================================================================== */

/* Address of offset `off` in this mapping.  NULL for 0 (no error recorded)
 * and, with PHEAP_ERANGE, for an offset outside the data region: the
 * header and the allocator's metadata, below pheap_stats().data_offset,
 * are not handed out, and neither is anything past the heap's end.  The
 * offset is not otherwise checked (any byte of the data region maps; see
 * pheap_usable_size to ask whether a block is live). */
void *pheap_direct(const pheap *h, pheap_off off);

/* Offset of address `addr`; 0 if it is not inside the data region of the
 * mapped heap (the header and metadata give 0, as pheap_direct refuses
 * them), with PHEAP_ERANGE recorded unless addr is NULL. */
pheap_off pheap_offset(const pheap *h, const void *addr);

/* The open heap of this process whose data region holds `addr` (the
 * program's view, up to the size the heap may grow to), or NULL -- for
 * code that holds an address and not the handle (pheap.hpp's allocator).
 * Takes no lock.  A handle is found from late in pheap_open until
 * pheap_close releases it (after the heap is written back); a fork child
 * finds its parent's handles, which refuse its calls (PHEAP_EFORKED), until
 * it closes them.  Records no error. */
pheap *pheap_of(const void *addr);

/* ===================================================================== */
/*  Persistence of user data                                             */
/* ===================================================================== */

/* Starts writing back the cache lines of [addr, addr+len).  Durable only
 * after a following pheap_drain.  Ranges outside the heap are ignored. */
void pheap_flush(pheap *h, const void *addr, size_t len);

/* Fence: every flush issued before by this thread is durable on return. */
void pheap_drain(pheap *h);

/* pheap_flush + pheap_drain: [addr, addr+len) is durable on return. */
void pheap_persist(pheap *h, const void *addr, size_t len);

/* ===================================================================== */
/*  Roots                                                                */
/* ===================================================================== */

#define PHEAP_ROOT_NAME_MAX 63   /* bytes, without the terminating NUL */
#define PHEAP_ROOTS_MAX     256  /* named roots one heap can hold */

/* Sets the root `name` to `off` (0 removes the name).  The root is durable
 * when the call returns, and a crash during the call leaves the old or the
 * new value, never a torn one.  `off` must be 0 or the start of a live
 * block (as pheap_alloc returned it): anything else is refused and the
 * root keeps its value.  A root is not a reference count: freeing the block
 * later leaves the root naming free space (set it to 0 first).
 * Errors: PHEAP_ENAME (empty or longer than PHEAP_ROOT_NAME_MAX),
 * PHEAP_ERANGE (outside the data region), PHEAP_EINTERIOR (inside a block,
 * not at its start), PHEAP_ENOTLIVE (in free space: a freed block or space
 * never allocated), PHEAP_ENOSPC (PHEAP_ROOTS_MAX names in use),
 * PHEAP_ERDONLY, PHEAP_EROMODE, PHEAP_ECHECKSUM (the root's entry is
 * damaged: its name or commit word fails its check word; format 1.5).
 * Heaps of format 1.5 keep a check word per entry: an insert takes three
 * fences, a removal two, an update one. */
int pheap_root_set(pheap *h, const char *name, pheap_off off);

/* Value of root `name`; 0 with pheap_errno() == PHEAP_ENOENT if unset, or
 * PHEAP_ECHECKSUM if its entry is damaged (the message names the entry). */
pheap_off pheap_root_get(pheap *h, const char *name);

/* Number of roots set. */
unsigned pheap_root_count(pheap *h);

/* The i-th root set (0 <= i < pheap_root_count), in table order: copies its
 * name into name[PHEAP_ROOT_NAME_MAX + 1] and its value into *off.
 * Errors: PHEAP_ENOENT when i is past the last root. */
int pheap_root_at(pheap *h, unsigned i, char *name, pheap_off *off);

/* ===================================================================== */
/*  Owner and access mode                                                */
/* ===================================================================== */
/*
 * A heap (format 1.5 and later) records its owner -- the effective user id
 * that created it, fixed in the checksummed header -- and an access mode,
 * PHEAP_MODE_WRITABLE (at creation) or PHEAP_MODE_READONLY, kept in the
 * header page with check bits.  In read-only mode every call that changes
 * the heap fails with PHEAP_EROMODE and changes nothing: pheap_alloc*,
 * pheap_free*, pheap_root_set, pheap_tx_begin (so no transaction starts;
 * one the thread began before the switch runs to its commit or abort, its
 * calls allowed; without one the transactional calls fail with
 * PHEAP_EROMODE too),
 * pheap_alloc_named*, pheap_free_named, pheap_gc and pheap_recover.
 * Reading works: pheap_direct, pheap_root_get, pheap_lookup, the names
 * listing, pheap_stats, pheap_check.  The mode governs these calls, not
 * the memory: stores through pheap_direct pointers are the program's own.
 * A read-write open of a read-only-mode heap succeeds (recovery after a
 * crash runs, and the owner can switch the mode back); file permissions
 * apply as always.  Heaps of format 1.4 and earlier have no owner
 * (pheap_stats: owner_known 0) and are always writable.
 */
#define PHEAP_MODE_WRITABLE 0u
#define PHEAP_MODE_READONLY 1u

/* Sets the heap's access mode to `mode`.  Only the owner or root (effective
 * user id 0) may, through a read-write handle; setting the mode the heap
 * has is a successful no-op.  One durable 8-byte store: after a crash the
 * heap has the old or the new mode, never another.
 * Errors: PHEAP_EINVAL (unknown mode), PHEAP_ERDONLY, PHEAP_EPERM (the
 * caller is neither the owner nor root), PHEAP_ENOTSUP (a heap of format
 * 1.4 or earlier: its header has no owner and cannot take one crash-safely;
 * docs/FORMAT.md), PHEAP_EFORKED. */
int pheap_set_mode(pheap *h, unsigned mode);

/* The heap's access mode (PHEAP_MODE_*), or a negative error: PHEAP_EINVAL,
 * PHEAP_EFORKED. */
int pheap_get_mode(pheap *h);

/* ===================================================================== */
/*  Allocation                                                           */
/* ===================================================================== */
/*
 * Blocks live in the data region and carry no header: the allocator's
 * metadata is kept apart (slab bitmaps, extent log), so a bad free is
 * detected from metadata and a user overflow cannot damage the allocator.
 * Sizes up to PHEAP_SMALL_MAX come from size classes (docs/ALLOCATOR.md has
 * the table); larger ones are page-granular extents.  Blocks of 16 bytes or
 * more are 16-byte aligned, extents 4096-byte aligned.  All calls are
 * thread-safe; a block may be freed by any thread.
 */

#define PHEAP_SMALL_MAX 16384  /* largest size served by a size class */

/* Allocates `size` bytes and returns the block's offset (0 on failure).
 * Durable on return: the block stays allocated across any crash.  A crash
 * during the call may leave that one block allocated with no one knowing
 * its offset; pheap_alloc_to closes that window.  Contents are not zeroed:
 * a block freed before holds the bytes it held (a fresh heap reads as
 * zero); pheap_alloc_init zeroes or fills it.  Grows the file when needed,
 * up to max_size.
 * Errors: PHEAP_EINVAL (size 0), PHEAP_ENOMEM (heap full at max_size),
 * PHEAP_ENOSPC (the file system is full: the heap could not grow; it is
 * unchanged, and frees make room again), PHEAP_ERDONLY, PHEAP_ECORRUPT
 * (free space about to be handed out lies in a chunk whose descriptor
 * records allocated blocks: a slab the extent log lost, which open does
 * not look for, see pheap_open.  The chunk is set aside until the close,
 * its bytes and descriptor as they are (no purge punches it either), and
 * later calls use other space: one call fails for each such chunk met; a
 * call that found its block elsewhere first succeeds all the same.
 * pheap_check reports such chunks.)  Every allocating call, transactional
 * or not, may give that. */
pheap_off pheap_alloc(pheap *h, size_t size);

/* Initialiser of a block being allocated (pheap_alloc_init,
 * pheap_alloc_to_init): fills `block`, `usable` bytes (>= the size asked
 * for, all writable), and returns 0 -- or nonzero to cancel the allocation.
 * It runs in the calling thread before the allocation commits, with no
 * lock of pheap held.  pheap then writes the block's cache lines back
 * itself (no pheap_persist needed in it): the fence that commits the
 * allocation makes the contents durable with it, so the block is never
 * returned, nor reachable through a destination word, with other
 * contents, even after a crash.
 * The block is not allocated while the initialiser runs: it may call
 * pheap (allocate, read the heap), but a word inside the block is no
 * pheap_alloc_to destination yet (PHEAP_ENOTLIVE), and a block it
 * allocated and stored in the new block leaks if a crash comes before the
 * commit, or if it then cancels. */
typedef int (*pheap_init_fn)(pheap *h, void *block, size_t usable, void *arg);

/* pheap_alloc_init / pheap_alloc_to_init flags */
#define PHEAP_ALLOC_ZERO 0x1u  /* zero the block's usable bytes before the initialiser */

/* pheap_alloc, with the block zeroed (flags PHEAP_ALLOC_ZERO) and/or filled
 * by init(h, block, usable, arg) (NULL: no initialiser) before the
 * allocation commits: when the call returns, the block is allocated and
 * its contents durable, with no pheap_persist and no fence more than
 * pheap_alloc.  A crash during the call may leave the block allocated
 * with no one knowing its offset, as with pheap_alloc (pheap_alloc_to_init
 * closes that window).  Costs a flush per cache line of the usable size
 * (and the zeroing).
 * Errors: as pheap_alloc, plus PHEAP_EINVAL (unknown flag) and
 * PHEAP_ECANCELED (init returned nonzero: nothing was allocated; the
 * message has its value). */
pheap_off pheap_alloc_init(pheap *h, size_t size, unsigned flags, pheap_init_fn init, void *arg);

/* Frees the block at `off`.  Durable on return: it stays free across any
 * crash.  Nothing changes on error.
 * Errors: PHEAP_ERANGE (outside the data region), PHEAP_EINTERIOR (inside a
 * block), PHEAP_EDOUBLEFREE (already free), PHEAP_ENOTALLOC (never
 * allocated), PHEAP_ERDONLY, PHEAP_EINVAL (a block pheap owns: a segment
 * of the name directory, which a stale offset of a block freed before may
 * name).  Freeing 0 is a no-op: it returns 0, or the error a free would
 * give for the handle or the heap alone (PHEAP_ERDONLY, PHEAP_EROMODE).  A block of
 * more than PHEAP_SMALL_MAX bytes freed twice across a reopen of the heap
 * reports PHEAP_ENOTALLOC (its past is not kept on media); small blocks
 * report PHEAP_EDOUBLEFREE, but for a block whose slab changed size class
 * since it was allocated (slab morphing: pheap_stats.morphing), which
 * reports PHEAP_ENOTALLOC when freed twice, and PHEAP_EINTERIOR for an
 * offset inside it that is a block start of the slab's class now.  Free
 * space of 256 KiB or more goes back
 * to the file system (hole punch) in batches: within about 100 ms of the
 * free, once freed bytes reach size / 16 (at least 32 MiB), or at
 * pheap_close -- not at the free itself, so that a block freed and soon
 * allocated again keeps its pages. */
int pheap_free(pheap *h, pheap_off off);

/* Allocates and stores the block's offset into *dest as one failure-atomic
 * step: after a crash, either the block is allocated and *dest holds its
 * offset, or nothing happened and *dest holds its old value.  `dest` must be
 * an 8-byte aligned word of a live block (typically a field of another
 * block, or of the block a root names).
 * The block is reachable through *dest from the moment the store is made,
 * before the call returns, with contents that are not zeroed (a block
 * freed before holds its old bytes): a crash before the caller has filled
 * and persisted it leaves a linked block of old bytes.  To publish only a
 * block that is filled, use pheap_alloc_to_init.
 * Errors: as pheap_alloc, plus PHEAP_ERANGE (dest not an aligned word of
 * the data region), PHEAP_ENOTLIVE (dest in a freed block or in space
 * never allocated); *dest is unchanged. */
int pheap_alloc_to(pheap *h, size_t size, pheap_off *dest);

/* pheap_alloc_to with an initialiser (see pheap_init_fn): the block is
 * zeroed (PHEAP_ALLOC_ZERO) and/or filled by init(h, block, usable, arg)
 * before its offset is stored into *dest, and pheap makes the contents
 * durable with the same fence that commits the allocation.  After a crash,
 * either *dest holds its old value and the block is free, or *dest holds
 * the offset of a block whose contents are all that the initialiser wrote:
 * no state in between is ever reachable.  (The allocation's log entry
 * carries a CRC-32C of the contents: should the entry reach media before
 * all of the block's lines -- a cache eviction before the fence -- recovery
 * finds the CRC wrong and the allocation did not happen.)  Takes the
 * fences of pheap_alloc_to, plus a flush per cache line of the usable size
 * and the CRC of the block.
 * A nonzero return of init cancels: the block goes back to the heap,
 * *dest is unchanged, the call returns PHEAP_ECANCELED (the message has
 * init's value).
 * Errors: as pheap_alloc_to, plus PHEAP_EINVAL (unknown flag),
 * PHEAP_ECANCELED. */
int pheap_alloc_to_init(pheap *h, size_t size, pheap_off *dest, unsigned flags,
                        pheap_init_fn init, void *arg);

/* Frees the block whose offset is in *src and stores 0 into *src, as one
 * failure-atomic step.  `src` must be an aligned word of a live block;
 * *src == 0 is a no-op.
 * Errors: as pheap_free, plus PHEAP_ERANGE (src not an aligned word of the
 * data region), PHEAP_ENOTLIVE (src in a freed block or in space never
 * allocated). */
int pheap_free_from(pheap *h, pheap_off *src);

/* Usable bytes of the live block at `off` (>= the size asked for); 0 with
 * pheap_errno() set when `off` is not the start of a live block. */
size_t pheap_usable_size(pheap *h, pheap_off off);

/* ===================================================================== */
/*  Named objects                                                        */
/* ===================================================================== */
/*
 * A named object is a block bound to a name in the heap's name directory:
 * allocated and named in one failure-atomic step, found again by name
 * after any restart, freed and unnamed in one step.  Names are
 * NUL-terminated strings of 1 to PHEAP_NAME_MAX bytes.  The directory
 * scales to millions of names (extendible hashing; a lookup reads one or
 * two cache lines and writes nothing; a directory segment that fills up is
 * rebuilt during one create, at most 4096 lines of work).
 *
 * Roots and names.  The 256 roots stay a small fixed table of references
 * (a root may name any live block, or none, and is changed in place);
 * a name owns its block (pheap_free_named frees both).  Both are roots of
 * tracing (pheap_recover, pheap_gc): a named block and what it references
 * stay live; a filter registered with pheap_root_set_filter under the
 * same name applies to it.  pheap_check verifies that every name and root
 * names a live block and that no block has two names (a root may name a
 * named block).  Freeing a named block with pheap_free is a bug the heap
 * cannot see at the call: the name then dangles (pheap_check reports it)
 * and pheap_free_named removes it.
 *
 * Inside a transaction (pheap_tx_begin ... pheap_tx_commit, at any level)
 * pheap_alloc_named* and pheap_free_named are part of it: the name and
 * its block appear, or go, at the commit together -- an abort, or a crash
 * before the commit is durable, leaves the directory as it was; after the
 * commit both changes are durable.  Until the commit the transaction holds
 * the name: the calling thread's lookups see the transaction's names
 * (pheap_lookup finds a name it made and not one it removed), while other
 * threads see the directory as committed (the name it makes is not there,
 * the one it removes still is) and their pheap_alloc_named* and
 * pheap_free_named of a held name fail with PHEAP_EBUSY, changing nothing.
 * pheap_name_next, pheap_stats and pheap_check report the committed
 * directory.  A name made and removed in one transaction leaves nothing; a
 * name removed and made again is replaced at the commit.  The commit
 * places the new entries (rebuilding a full directory segment if needed)
 * and writes them with the transaction's other changes: a transaction with
 * names commits with the three fences of any transaction with allocations.
 * A named block made in a transaction may be written in place before the
 * commit, like a block of pheap_tx_alloc.
 *
 * Heaps made by builds before format 1.4 have no directory: creating or
 * removing a name fails with PHEAP_ENOTSUP and lookups find nothing.
 */
#define PHEAP_NAME_MAX 255 /* bytes, without the terminating NUL */

/* Allocates a block of `size` bytes and names it `name`.  Crash
 * guarantee: after a crash, the name exists with its block, or neither
 * exists; durable on return (LOG mode: one fence, and one more now and
 * then for the directory's growth; GC mode: two, and nothing is logged).
 * Inside a transaction: made at its commit (see above), no fence before
 * it.  The block's contents are not initialised
 * (see pheap_alloc_named_init).  Returns the block, or 0 with
 * pheap_errno(): PHEAP_EEXIST (the name exists, or the transaction made
 * it already; nothing changes, a transaction goes on), PHEAP_EBUSY
 * (another thread's or process's open transaction holds the name),
 * PHEAP_ENAME (empty
 * or longer than PHEAP_NAME_MAX), PHEAP_EINVAL (size 0, NULL heap; in a
 * transaction also a size beyond the heap's maximum), PHEAP_ENOMEM (heap
 * full; in a transaction this aborts it), PHEAP_ENOSPC (file system full,
 * or the directory full: over about twenty million names), PHEAP_EABORTED
 * (the thread's transaction was aborted), PHEAP_ENOTSUP (heap older than
 * format 1.4), PHEAP_ERDONLY, PHEAP_ERECOVER, PHEAP_ECORRUPT (a damaged
 * chunk met, as for pheap_alloc; in a transaction this aborts it). */
pheap_off pheap_alloc_named(pheap *h, const char *name, size_t size);

/* pheap_alloc_named, with the block zeroed (PHEAP_ALLOC_ZERO) and/or filled
 * by `init` before it is named: the name never appears with a block that
 * `init` did not finish (a C++ constructor runs here).  LOG mode: two
 * fences, one to make the contents durable with the name's log entry,
 * one to publish the name before the program can change them (flags 0
 * and no `init`: the one fence of pheap_alloc_named).  `init` returning
 * nonzero cancels: PHEAP_ECANCELED, nothing named, nothing allocated (a
 * transaction goes on).  `init` may call pheap, but not end the thread's
 * transaction (then PHEAP_EABORTED).  Inside a transaction it runs without
 * pheap's locks; outside one it runs while the name directory is being
 * changed: it may look names up and list them, but pheap_alloc_named* and
 * pheap_free_named fail there with PHEAP_EBUSY, changing nothing. */
pheap_off pheap_alloc_named_init(pheap *h, const char *name, size_t size, unsigned flags,
                                 pheap_init_fn init, void *arg);

/* The block named `name`, or 0 with pheap_errno() == PHEAP_ENOENT.  Writes
 * nothing (works on read-only handles and snapshots, and on a GC heap
 * before pheap_recover).  In a transaction the thread sees the names it
 * made and not those it removed; other threads see them at the commit.
 * Errors also: PHEAP_ENAME, PHEAP_EINVAL. */
pheap_off pheap_lookup(pheap *h, const char *name);

/* Frees the block named `name` and removes the name, failure-atomically:
 * after a crash both are gone or both remain.  Durable on return (LOG
 * mode: three fences).  Inside a transaction: both go at its commit (see
 * above); an abort, or a crash before the commit, leaves both; a name the
 * transaction made goes with its block and leaves nothing.  Errors:
 * PHEAP_ENOENT (no such name: freed already, or never made, or removed by
 * the thread's transaction), PHEAP_ENOTLIVE (the block had been freed by
 * pheap_free: the name alone was removed -- inside a transaction nothing
 * changes), PHEAP_EBUSY (another thread's or process's open transaction
 * holds the name), PHEAP_EABORTED, PHEAP_ENAME, PHEAP_ENOTSUP,
 * PHEAP_ERDONLY, PHEAP_ERECOVER. */
int pheap_free_named(pheap *h, const char *name);

/* One name of the directory, as pheap_name_next reports it. */
typedef struct pheap_name_info {
    char name[PHEAP_NAME_MAX + 1];
    size_t len;               /* bytes of name */
    pheap_off off;            /* the named block */
    uint64_t size;            /* bytes asked at its creation (pheap_usable_size
                                 gives what it holds) */
    uint64_t hash;            /* the name's place in the order: a hash of the
                                 name seeded by the heap's uuid */
} pheap_name_info;

/* Iteration: the name that follows `after` (NULL: the first name) in the
 * directory's order -- by hash, then length, then bytes: arbitrary but
 * stable, the same in every open of the heap.  Pass the previous
 * out->name as `after` to go on (the same buffer as out->name is fine).  Names created or removed between calls
 * (by this thread or another) are seen or skipped according to their
 * place in the order; no name is reported twice and none that stays is
 * missed.  Returns 0, or PHEAP_ENOENT after the last name.  Errors also:
 * PHEAP_ENAME (a bad `after`), PHEAP_EINVAL. */
int pheap_name_next(pheap *h, const char *after, pheap_name_info *out);

/* ===================================================================== */
/*  Transactions                                                         */
/* ===================================================================== */
/*
 * A transaction groups allocations, frees and writes to the heap into one
 * failure-atomic step: after a crash, all of them happened or none did.
 * Each thread has at most one transaction per heap; transactions of
 * different threads run in parallel (no global lock).  Isolation is the
 * application's job: pheap does not stop two threads' transactions from
 * changing the same bytes, and a thread sees the in-place changes of
 * another thread's transaction before it commits.
 *
 * Two ways to change existing data, which may be mixed in one transaction:
 *   undo (pheap_tx_add): snapshot a range, then change it in place with
 *       ordinary stores; on abort or after a crash the snapshot comes back.
 *       One fence per pheap_tx_add call that snapshots new bytes.
 *   redo (pheap_tx_write): hand pheap the new bytes; they reach the heap at
 *       commit.  No fence before the commit; pheap_tx_read reads a range as
 *       the transaction sees it.
 * A range given to pheap_tx_write and then to pheap_tx_add is refused
 * (PHEAP_EINVAL): snapshot ranges before writing them.  Writing with
 * pheap_tx_write into a range already added, or into a block allocated by
 * the transaction, stores in place at once.
 *
 * Fences: a transaction with redo writes, allocations or frees commits with
 * three fences (the log, the changes, the log's retirement); one that only
 * added ranges commits with two; each pheap_tx_add that snapshots adds one.
 * An empty transaction costs none.  An abort costs two fences when a range
 * was added (the old bytes back, then the log's retirement), else none.
 * A thread's first transaction on a handle takes one fence more, and
 * pheap_tx_alloc may take the fences of making a slab.  A transaction
 * whose log outgrows its lane's 2 KiB takes six more per overflow segment
 * (docs/TRANSACTIONS.md).
 *
 * Nesting: pheap_tx_begin inside a transaction opens an inner level that
 * flattens into the outermost one.  pheap_tx_commit of an inner level only
 * closes it; the outermost commit commits everything.  pheap_tx_abort at
 * any level rolls back the whole transaction at once; the levels still
 * open stay open in an aborted state until each is closed:
 *   pheap_tx_commit  returns PHEAP_EABORTED and closes its level
 *   pheap_tx_abort   returns 0 and closes its level
 *   pheap_tx_begin   returns PHEAP_EABORTED and opens no level
 *   pheap_tx_add, _write, _read, _free return PHEAP_EABORTED; pheap_tx_alloc
 *                    returns 0 with pheap_errno() == PHEAP_EABORTED
 * A transactional call that fails for lack of memory, heap space or log
 * space aborts the transaction the same way (its own error says why).
 * Calls with a bad argument (a range outside the heap, a double free)
 * fail with nothing changed and leave the transaction as it was.
 *
 * pheap_alloc_named, pheap_alloc_named_init and pheap_free_named are part
 * of the transaction (see "Named objects").
 * Other calls inside a transaction (pheap_alloc, pheap_free, pheap_alloc_to,
 * pheap_root_set ...) are not part of it: they take effect at once and stay
 * done if the transaction aborts.  In particular a root cannot name a block
 * of pheap_tx_alloc before the commit (the block is not live yet: root it
 * after the commit, or link it from a block that is rooted already).
 * Reads see the heap, not the transaction: after pheap_tx_write, a plain
 * load still returns the old bytes until the commit (read through
 * pheap_tx_read, or use pheap_tx_add and store in place).
 * A block the transaction allocated has its usable size from
 * pheap_usable_size in the allocating thread at once; a block it frees may
 * no longer be added or written (PHEAP_ENOTLIVE).
 * A transaction still open when its thread exits, or when its heap is
 * closed, is rolled back (pheap_close returns 0); one open when the
 * process dies is rolled back by the next open's recovery.
 *
 * Transactions need a heap created by pheap 1.3 or later (format 1.3):
 * on an older heap pheap_tx_begin fails with PHEAP_ENOTSUP.
 */

/* Starts a transaction, or an inner level of the thread's transaction.
 * Errors: PHEAP_EINVAL (NULL), PHEAP_ERDONLY, PHEAP_EFORKED, PHEAP_ENOTSUP
 * (heap format before transactions, or a GC-mode heap), PHEAP_EABORTED,
 * PHEAP_ENOMEM (no lane free: more than 1024 threads in transactions). */
int pheap_tx_begin(pheap *h);

/* Closes the innermost level; at the outermost, commits: on return every
 * change of the transaction is durable.  After a crash before the commit
 * point, recovery rolls the transaction back entirely; after it, forward
 * entirely.
 * A commit does not fail for lack of log space: the log keeps room for its
 * COMMIT record and the records of its names.
 * Errors: PHEAP_ENOTX (no transaction), PHEAP_EABORTED (the transaction
 * was aborted: nothing of it happened; the level is closed), PHEAP_ENOMEM /
 * PHEAP_ENOSPC (the transaction makes names and their directory segment
 * could not be rebuilt for lack of heap or file space, or process memory
 * ran out: the transaction was rolled back, its level closed),
 * PHEAP_ECORRUPT (the same, the rebuild's new segment having met a damaged
 * chunk, as for pheap_alloc). */
int pheap_tx_commit(pheap *h);

/* Rolls back the whole transaction (every added range gets its old bytes,
 * no allocation or free of it takes effect) and closes the innermost
 * level.  Errors: PHEAP_ENOTX. */
int pheap_tx_abort(pheap *h);

/* Depth of the calling thread's transaction: 0 outside one, 1 in the
 * outermost level, ...  Negative (-depth) when it was aborted. */
int pheap_tx_depth(pheap *h);

/* Snapshots [addr, addr + len) before the caller changes it in place.  The
 * range must lie in one live block, or in a block this transaction
 * allocated (which needs no snapshot: the call returns 0 at no cost).
 * Bytes already added cost nothing; the snapshot is durable on return.
 * Errors: PHEAP_ENOTX, PHEAP_EABORTED, PHEAP_EINVAL (len 0, or the range
 * overlaps a pending pheap_tx_write), PHEAP_ERANGE (outside the data
 * region), PHEAP_ENOTLIVE (not inside one live block), PHEAP_ENOMEM /
 * PHEAP_ENOSPC (the log could not grow: the transaction is aborted). */
int pheap_tx_add(pheap *h, const void *addr, size_t len);

/* Records that [dst, dst + len) takes the bytes now at src at commit
 * (src is copied at once, so it may change afterwards).  Nothing is
 * stored at dst before the commit, except where dst was added or lies in
 * a block allocated by this transaction: those bytes are stored at once.
 * Errors: as pheap_tx_add. */
int pheap_tx_write(pheap *h, void *dst, const void *src, size_t len);

/* Copies [src, src + len) into buf as this transaction sees it: the heap's
 * bytes with this transaction's pending pheap_tx_write changes applied in
 * order.  Errors: PHEAP_ENOTX, PHEAP_EABORTED, PHEAP_EINVAL, PHEAP_ERANGE. */
int pheap_tx_read(pheap *h, void *buf, const void *src, size_t len);

/* Allocates a block that exists only if the transaction commits.  Its
 * contents are not initialised; write them in place (no pheap_tx_add
 * needed): they are durable at commit.  0 on failure, with pheap_errno():
 * PHEAP_ENOTX, PHEAP_EABORTED, PHEAP_EINVAL (size 0), PHEAP_ENOMEM /
 * PHEAP_ENOSPC (heap full: the transaction is aborted), PHEAP_ECORRUPT
 * (a damaged chunk met, as for pheap_alloc: the transaction is aborted). */
pheap_off pheap_tx_alloc(pheap *h, size_t size);

/* Frees the block at `off` when the transaction commits (an abort keeps
 * it).  Checked at once: the block must be live and not freed by this
 * transaction already.  A block allocated by this transaction may be
 * freed too: at commit neither happens.
 * Errors: PHEAP_ENOTX, PHEAP_EABORTED, PHEAP_ERANGE, PHEAP_EDOUBLEFREE,
 * PHEAP_EINTERIOR, PHEAP_ENOTALLOC, PHEAP_EINVAL (a name-directory segment:
 * see pheap_free), PHEAP_ENOMEM (the transaction is
 * aborted). */
int pheap_tx_free(pheap *h, pheap_off off);

/* ===================================================================== */
/*  Moving blocks: defragmentation the program takes part in            */
/* ===================================================================== */
/*
 * A block's offset is its identity, so pheap never moves a block by itself.
 * After most blocks of a size were freed, the few left can pin a slab each
 * (a 64 KiB chunk of blocks of one size class), and that space serves no
 * other size until they go.  A program that knows every word pointing at
 * some blocks can let pheap move them: pheap_defrag takes the addresses of
 * those words ("slots"), moves blocks out of slabs that it can then give
 * back, and rewrites the slots to the new offsets.
 *
 * Each slot is an aligned 8-byte word holding a block's offset (or 0,
 * skipped): inside a live block of the heap (its program address, as
 * pheap_direct gives) or in the program's own memory.  Several slots may
 * name one block.  The program must pass EVERY word that names a block it
 * passes (a word left out would name freed space afterwards; a copy of an
 * offset is not a word that names the block: pass the words the program
 * will read the offsets from), and no other thread may use those blocks or
 * slots during the call.  Slots are addresses of words (pheap_off *), never
 * offsets.  After the call, words that lay inside moved blocks are at the
 * blocks' new places: collect the slots again before another call.  The
 * words hold plain offsets (pheap_off); self-relative pointers (the C++
 * layer's pheap::ptr) are no slots: blocks they point at must not move.
 *
 * What moves: small blocks (up to 16 KiB) of slabs all of whose live
 * blocks the slots name, where moving them frees whole slabs -- the
 * sparsest slabs of a size class first, into the free blocks of the
 * class's slabs that stay (a full heap is compacted in place; the calling
 * thread allocates the new blocks from those slabs first, in any arena),
 * as many as free the most slabs net of the new slabs they need.  A
 * morphed slab (one that changed size class while blocks of the old class
 * stayed in it) moves only as a whole, when that gains a slab.  Large
 * blocks, blocks named by a root or a name (pheap_alloc_named), and blocks
 * of slabs that hold blocks the slots do not name stay where they are.  A moved block gets a
 * block of the same size with the same bytes, the old one is freed, and the
 * emptied slabs go back to free space at once (their pages to the file
 * system at the next purge).
 *
 * Crash guarantee: blocks move in batches, each one transaction (a LOG-mode
 * heap's transaction, see above): after a crash every block of a batch is
 * at its old place with every slot in the heap naming it there, or at its
 * new place with every slot in the heap naming it there.  Slots in the
 * program's memory are rewritten after their batch commits.
 *
 * Cost: per moved block, the copy of its bytes and the records of its
 * batch's transaction (batches of up to 256 blocks: about five fences
 * each; a batch that finds no room for its log or its blocks is rolled
 * back and tried again at half the size, down to one block).
 */
typedef struct pheap_defrag_result {
    size_t total;          /* distinct blocks the slots name */
    size_t relocated;      /* of which moved */
    size_t slabs_freed;    /* slabs emptied and given back to free space (the moved
                              blocks may have needed a new slab: pheap_stats counts) */
    uint64_t bytes_moved;  /* bytes of the moved blocks */
} pheap_defrag_result;

/* Moves blocks named by the n words at slots[0..n-1] out of sparse slabs,
 * as above; `out` (may be NULL) gets the figures, also on error (what was
 * done before it).  Every slot and every block is checked before anything
 * moves: a bad one fails the call with nothing changed.
 * Errors: PHEAP_EINVAL (NULL heap, NULL slots with n > 0, a NULL slot, a
 * slot not 8-byte aligned, the calling thread inside a transaction, a slot
 * or block that is pheap's own metadata), PHEAP_ERANGE (a slot in the heap
 * outside its data region, a block offset outside it), PHEAP_ENOTLIVE (a
 * slot in the heap in no live block), PHEAP_EDOUBLEFREE /
 * PHEAP_EINTERIOR / PHEAP_ENOTALLOC (a slot naming no live block's start),
 * PHEAP_ERDONLY, PHEAP_EROMODE, PHEAP_EFORKED, PHEAP_ENOTSUP (a GC-mode
 * heap, or a format before transactions), PHEAP_ENOMEM / PHEAP_ENOSPC (no
 * room for a batch's new blocks or its log: that batch is rolled back, the
 * ones before it stay moved, and `out` says how many), PHEAP_ECORRUPT (a
 * damaged chunk met, as for pheap_alloc: the same). */
int pheap_defrag(pheap *h, pheap_off *const *slots, size_t n, pheap_defrag_result *out);

/* Returns the calling thread's cached free blocks of h to their slabs
 * (and, on a GC-mode heap, every batch of freed blocks that threads pass
 * each other).  Each thread keeps a few free blocks of every size class it
 * used, ready for its next allocations; they keep their slabs in use, so a
 * slab whose other blocks were all freed can neither go back to free space
 * nor serve another size until the thread allocates that size again or
 * exits (in GC mode an exiting thread's blocks become batches, which this
 * call, from any thread, returns: it waits for exits in progress).  Call it in a thread that stops using a size for long, and in
 * every thread before one thread runs pheap_defrag over blocks they all
 * freed into.  pheap_defrag does it for its own thread.  It may be called
 * inside a transaction (the transaction's blocks are no cached ones).  A
 * slab it leaves empty may go back to free space, durably, as after any
 * free (one extent-log entry and one fence each); no block changes.
 * Errors: PHEAP_EINVAL (NULL), PHEAP_ERDONLY, PHEAP_EROMODE, PHEAP_EFORKED,
 * PHEAP_ERECOVER (a GC-mode heap before pheap_recover). */
int pheap_thread_collect(pheap *h);

/* ===================================================================== */
/*  Consistency modes, recovery by tracing, garbage collection           */
/* ===================================================================== */
/*
 * A heap's consistency mode is chosen at creation (pheap_options.consistency)
 * and never changes:
 *
 * PHEAP_CONSISTENCY_LOG (the default) makes every pheap_alloc and pheap_free
 * durable on return (one fence each) and recovers at pheap_open by itself.
 *
 * PHEAP_CONSISTENCY_GC flushes nothing when it allocates or frees a small
 * block: the calls touch only the calling thread's cache.  What is written
 * durably is only what recovery needs to know the heap's shape: a slab's
 * size class when the slab is made, a large block's extent when it is
 * allocated or freed (one fence each), and the roots.  After a clean close
 * everything is on media and the next open is as fast as in LOG mode.
 * After a crash, pheap_open succeeds but the heap does not know which
 * blocks are allocated: every call that allocates or frees (and
 * pheap_usable_size, pheap_root_set) fails with PHEAP_ERECOVER until the
 * program calls pheap_recover, which finds every block reachable from the
 * roots, keeps exactly those (and what they reach), and frees the rest.
 * The program must therefore keep every block it wants to survive a crash
 * reachable from a root through offsets stored in the heap, and make those
 * offsets (and the data it needs) durable itself, with pheap_persist:
 * that is the price of the unflushed fast path, and Ralloc's and Makalu's
 * model.  pheap_alloc_to stores the offset without flushing it;
 * pheap_free_from clears it without flushing it for a small block, and
 * durably for a large one (whose free is durable: a word still naming it
 * after a crash would name free space).  For the same reason, unlink a
 * large block durably before pheap_free.  A block held by a thread cache
 * still counts as live for pheap_usable_size, pheap_root_set and the
 * destination checks of pheap_alloc_to until the cache gives it back.
 * Transactions need a LOG heap (pheap_tx_begin: PHEAP_ENOTSUP).
 *
 * What GC mode checks: a free of an offset that is not the start of a
 * block, or of a block that is free in its slab, is refused as in LOG
 * mode; a free of a block still held by a thread cache -- a double free,
 * or one of a block no allocation handed out yet (a full cache hands half
 * of its blocks to other threads' caches as a batch) -- is not seen at the
 * call: it is caught and ignored when the block goes back to its slab --
 * pheap_thread_collect, pheap_gc, a clean close, or when the caches
 * overflow past what the batches take (an exiting thread's cache becomes
 * such batches) -- and counted (pheap_stats.gc_double_frees);
 * meanwhile the block can be handed out twice, as malloc would.  A block
 * that has been through a cache is refused as PHEAP_EDOUBLEFREE, handed
 * out or not.
 *
 * Tracing.  Conservative by default: every aligned 8-byte word of a
 * reachable block whose value is the offset of the start of a block makes
 * that block reachable (an integer that happens to equal one keeps a block
 * alive: a superset, never a loss); with PHEAP_GC_SELF_RELATIVE, so does a
 * word holding a self-relative pointer to the start of a block (pheap::ptr
 * of pheap.hpp: the word's own offset plus its value, minus 1, modulo
 * 2^64).  Offsets to the inside of a block and pointers stored as
 * addresses are not followed.  Precise: a filter,
 * registered per root with pheap_root_set_filter, reports the offsets a
 * block holds with pheap_trace, and names the filter of each child (for
 * links stored as tagged words or indices, which the conservative tracer
 * cannot see).  A block that several paths reach is visited by the first
 * filter that reaches it (the others' filters are not called for it; give
 * a block the same filter on every path); a conservative path that gets
 * there before any filter scans it too (more kept, never less).  Filters
 * are process memory: register them after each open, before
 * pheap_recover.
 */

/* pheap_options.consistency */
#define PHEAP_CONSISTENCY_LOG 0u
#define PHEAP_CONSISTENCY_GC  1u

typedef struct pheap_tracer pheap_tracer;

/* A filter: called once for each reachable block of the type it was
 * registered for, with the block's offset, address and usable size; it
 * calls pheap_trace for each offset the block holds.  It may run on any of
 * the tracing threads, in parallel with other calls of itself: it must
 * only read the block (and its own constant data). */
typedef void (*pheap_filter_fn)(pheap_tracer *tr, pheap_off off, const void *block,
                                size_t usable);

/* From a filter: `child` is reachable, and its own offsets are found by
 * `filter` (NULL: conservatively).  0 (nothing) is ignored; an offset that
 * is not the start of a block is ignored and counted
 * (pheap_gc_report.bad_refs). */
void pheap_trace(pheap_tracer *tr, pheap_off child, pheap_filter_fn filter);

/* The heap being traced, for a filter that needs pheap_direct. */
pheap *pheap_tracer_heap(pheap_tracer *tr);

/* Registers `fn` as the filter of the block root `name` holds (NULL
 * removes it: conservative again).  Kept in this handle only.  The root
 * need not be set yet.  Errors: PHEAP_EINVAL (NULL heap), PHEAP_ENAME,
 * PHEAP_ENOSPC (PHEAP_ROOTS_MAX filters). */
int pheap_root_set_filter(pheap *h, const char *name, pheap_filter_fn fn);

/* What one recovery or collection found and did. */
typedef struct pheap_gc_report {
    uint64_t marked_blocks;   /* reachable blocks */
    uint64_t marked_bytes;    /* their usable bytes */
    uint64_t freed_blocks;    /* blocks freed (a dry run: that would be freed); for
                                 a recovery, the large blocks no root reaches and
                                 the small ones allocated at the last clean close
                                 that no root reaches (those allocated since are
                                 not known as such: they are free all the same) */
    uint64_t freed_bytes;
    uint64_t bad_refs;        /* offsets a filter or a root reported that start no
                                 block (ignored) */
    uint64_t elapsed_ns;      /* wall time of the call */
    unsigned threads;         /* marking threads used */
    unsigned dry_run;         /* 1 if nothing was freed */
} pheap_gc_report;

/* Progress of a long recovery or collection: `done` of `total` units of
 * `phase` ("mark": blocks marked, total unknown (0); "sweep": chunks of
 * the heap swept, total known).  Called from the calling thread, at most
 * about 20 times a second; must not call into the heap. */
typedef void (*pheap_progress_fn)(void *arg, const char *phase, uint64_t done, uint64_t total);

typedef struct pheap_gc_options {
    unsigned flags;           /* PHEAP_GC_DRY_RUN */
    unsigned threads;         /* marking threads (0: one per online CPU, at most 64) */
    pheap_progress_fn progress; /* NULL: none */
    void *progress_arg;
} pheap_gc_options;

#define PHEAP_GC_DRY_RUN 0x1u /* pheap_gc: report what would be freed, free nothing */
#define PHEAP_GC_SELF_RELATIVE 0x2u /* conservative tracing also follows self-relative
                                       words (pheap::ptr of pheap.hpp): for heaps that
                                       hold them; more integers look like links, so
                                       more garbage may stay */

/* GC mode, after an unclean shutdown: traces the blocks reachable from the
 * roots (through the registered filters) and rebuilds every slab bitmap
 * and the large-block index from them: every block not reached is free
 * afterwards.  Writes no byte of any block.  Then allocation works again.
 * Crash guarantee: recovery is idempotent; a crash during it leaves the
 * heap needing recovery again, and the next pheap_recover gives the same
 * result.  Call it before other threads use the heap.  Returns 0 at once
 * (nothing to do) on a heap that needs no recovery, LOG heaps included.
 * Errors: PHEAP_EINVAL (NULL heap), PHEAP_ERDONLY (a read-only handle
 * cannot recover; it can read), PHEAP_ENOMEM (marking memory: nothing
 * changed), PHEAP_EFORKED, PHEAP_ECORRUPT (damaged metadata recovery
 * cannot trust, such as a name directory's rebuild word naming no block:
 * the message says what; the heap still needs recovery and nothing it
 * holds was given out). */
int pheap_recover(pheap *h);
/* pheap_recover with options (NULL: defaults) and a report (may be NULL). */
int pheap_recover_ex(pheap *h, const pheap_gc_options *opts, pheap_gc_report *out);

/* Offline leak collection, either mode: frees every allocated block that
 * no root reaches (a block allocated by a program that crashed before
 * linking it, a list cut off by a bug).  Each free is an ordinary durable
 * free: a crash during the collection leaves some of the garbage freed
 * and the rest allocated, never a reachable block freed.  No other thread
 * may use the heap during the call (it would lose blocks it has not
 * linked yet); in GC mode the thread caches are emptied first.
 * Errors: as pheap_recover, and PHEAP_ERECOVER (a GC heap needing
 * recovery: pheap_recover does the collection), PHEAP_EBUSY (a thread's
 * transaction is open). */
int pheap_gc(pheap *h);
int pheap_gc_ex(pheap *h, const pheap_gc_options *opts, pheap_gc_report *out);

/* ===================================================================== */
/*  Statistics and checks                                                */
/* ===================================================================== */

/* A struct tag, not a typedef: the name pheap_stats is also the function. */
struct pheap_stats {
    uint64_t size;            /* current file size, bytes */
    uint64_t max_size;        /* growth limit, bytes */
    uint64_t data_offset;     /* first byte of the data region */
    uint64_t data_size;       /* bytes of data region now backed by the file */
    uint8_t  uuid[16];        /* identity of the heap, set at creation */
    unsigned format_major;    /* format version of the file */
    unsigned format_minor;
    unsigned flush;           /* enum pheap_flush_kind in use (a PHEAP_SNAPSHOT
                                 writes nothing: the kind a read-write open with
                                 the same options and environment would use) */
    unsigned dax;             /* 1 if the file maps with MAP_SYNC (DAX) */
    unsigned readonly;        /* 1 if opened with PHEAP_RDONLY */
    unsigned was_unclean;     /* 1 if the last shutdown was not clean */
    uint64_t open_count;      /* read-write opens over the heap's life */
    uint64_t unclean_count;   /* recoveries after unclean shutdowns */
    unsigned roots;           /* roots set */
    uint64_t flushes;         /* cache lines flushed through this handle */
    uint64_t fences;          /* fences issued through this handle */
    uint64_t reflushes;       /* lines flushed again within the current or
                                 the previous fence batch of their thread */
    uint64_t live_blocks;     /* allocated blocks, small and large */
    uint64_t live_bytes;      /* their usable bytes */
    uint64_t slabs;           /* slabs (64 KiB chunks of one size class) */
    uint64_t slab_bytes;      /* data region bytes held by slabs */
    uint64_t large_extents;   /* allocated large extents */
    uint64_t large_bytes;     /* their bytes */
    uint64_t free_bytes;      /* backed data bytes in no slab and no extent */
    uint64_t largest_free;    /* largest free extent now backed, bytes */
    uint64_t cached_blocks;   /* free blocks held in thread caches */
    double   fragmentation;   /* 1 - live_bytes / (slab_bytes + large_bytes) */
    unsigned flush_source;    /* enum pheap_flush_source: why `flush` was chosen */
    unsigned in_memory;       /* 1 if the file is on tmpfs or ramfs */
    unsigned power_safe;      /* 1 if `flush` writes to the file's storage (msync,
                                 or cache-line flushes on DAX), so that what is
                                 durable survives a power loss; 0 for none, the
                                 simulator, cache-line flushes on a file not on
                                 DAX, and files in memory (durable against
                                 process crashes only) */
    unsigned snapshot;        /* 1 if opened with PHEAP_SNAPSHOT (readonly is 1 too) */
    unsigned held_elsewhere;  /* 1 if, at that snapshot open, another process held
                                 the heap read-write: no lock, no recovery, and
                                 was_unclean is 0 (the heap is in use, not crashed) */
    uint64_t recovered_ops;   /* logged operations (alloc_to / free_from) rolled
                                 forward at this open: in the file after a
                                 read-write open, in the private view after a
                                 snapshot open */
    uint64_t tx_commits;      /* transactions committed through this handle */
    uint64_t tx_aborts;       /* transactions rolled back through this handle
                                 (pheap_tx_abort, or a failure that aborted) */
    uint64_t tx_fences;       /* fences issued by transactional calls */
    uint64_t tx_rolled_back;  /* interrupted transactions the recovery at this open
                                 rolled back: those whose log it found in flight
                                 (a transaction that had made nothing durable
                                 yet -- no pheap_tx_add, no commit begun --
                                 leaves nothing to undo and is not counted) */
    uint64_t tx_rolled_forward; /* ... and rolled forward: committed, not yet
                                 fully applied when the process stopped */
    unsigned consistency;     /* PHEAP_CONSISTENCY_LOG or _GC */
    unsigned needs_recovery;  /* 1: a GC heap after an unclean shutdown, until
                                 pheap_recover (allocation refused: PHEAP_ERECOVER) */
    uint64_t gc_runs;         /* recoveries and collections through this handle */
    uint64_t gc_marked_blocks;/* the last one's reachable blocks, */
    uint64_t gc_freed_blocks; /*   blocks it freed */
    uint64_t gc_freed_bytes;  /*   and their bytes */
    uint64_t gc_elapsed_ns;   /*   and its duration */
    uint64_t gc_time;         /*   and when it ended (seconds since the epoch; 0: none) */
    uint64_t gc_double_frees; /* GC mode: double frees found when thread caches
                                 returned blocks to their slabs (ignored) */
    uint64_t last_open;       /* when the heap was last opened read-write
                                 (seconds since the epoch, the wall clock; this
                                 open if it is one); 0: not known (a heap not
                                 opened read-write since builds recorded it;
                                 simulated opens record nothing) */
    uint64_t names;           /* named objects (pheap_alloc_named) */
    uint64_t name_segments;   /* blocks the name directory uses (counted in
                                 live_blocks, like the named blocks) */
    unsigned protection;      /* enum pheap_protect_kind in use (never AUTO; a
                                 PHEAP_SNAPSHOT, whose private view is not
                                 protected, reports what a read-write open with
                                 the same options and environment would use) */
    uint64_t guarded_blocks;  /* blocks of the data region holding pheap's own
                                 metadata now (name-directory and transaction-log
                                 segments): refused by the program's calls, and
                                 read-only in its view when protection is on */
    uint64_t largest_alloc;   /* the largest block pheap_alloc can give now: the
                                 largest free extent, or the free space at the end
                                 of the data region grown up to max_size */
    uint64_t file_bytes;      /* storage the file takes (its allocated blocks, which
                                 sparse metadata and punched holes keep below its
                                 length, `size`); 0 when the file system cannot say */
    unsigned mode;            /* PHEAP_MODE_WRITABLE or PHEAP_MODE_READONLY */
    unsigned owner_known;     /* 1 if the heap records its owner (format 1.5) */
    uint64_t owner_uid;       /* the owner's user id (when owner_known) */
    uint64_t file_syncs;      /* flush msync: file syncs (fdatasync) run by this
                                 handle's fences; fences of threads that wait at the
                                 same time share one (group commit), so this is at
                                 most `fences` and below it under concurrency; 0 for
                                 the other flush kinds */
    unsigned morphing;        /* 1 if slabs may morph: a slab whose class is no
                                 longer in demand and that is at most a quarter
                                 full becomes a slab of a class in demand while
                                 its blocks stay where they are (LOG heaps of
                                 format 1.7; off with PHEAP_MORPH=0) */
    uint64_t slab_morphs;     /* slabs morphed through this handle */
    uint64_t morphed_slabs;   /* slabs now holding blocks of the class they had
                                 before a morph (counted in live_blocks, and in
                                 that class's live_blocks) ... */
    uint64_t old_blocks;      /*   and those blocks */
    unsigned durability;      /* enum pheap_durability in use: SYNC, or CHECKPOINT */
    unsigned from_working_copy; /* CHECKPOINT: 1 if this open resumed from the working
                                 copy a process crash left (what the heap held at the
                                 crash), 0 if it started from the heap file (its last
                                 checkpoint) */
    uint64_t checkpoints;     /* CHECKPOINT: checkpoints taken by this handle */
    uint64_t checkpoint_bytes;/*   bytes they copied into the heap file */
    uint64_t checkpoint_last_pages; /* pages the last one copied */
    uint64_t checkpoint_last_pause_ns; /* how long it held the calls at their entry */
    uint64_t checkpoint_last_ns; /* how long it took in all */
    uint64_t checkpoint_errors; /* automatic checkpoints that failed */
    unsigned shared;          /* 1 if opened with PHEAP_SHARED; then the usage
                                 figures above (live_blocks, slabs, free_bytes,
                                 ...) are this process's view: the slabs it owns,
                                 the large blocks of all */
    unsigned processes;       /* PHEAP_SHARED: processes holding the heap now, this
                                 one included */
    uint64_t takeovers;       /* PHEAP_SHARED: dead processes this handle took over */
    uint64_t heap_takeovers;  /* dead processes taken over by any process of the
                                 sharing since its first process opened the heap
                                 (any handle: a snapshot of a shared heap too) */
    uint64_t takeover_max_ns; /*   the longest takeover of this handle */
    unsigned nt_stores;       /* flush clwb or clflushopt: 1 if the words that commit
                                 small allocations and frees are written with
                                 non-temporal stores (movnti), 0 if stored and their
                                 line written back -- the cheaper on this CPU, or
                                 what PHEAP_NT_STORES asks for */
};

/* Per size class (0 <= cls < pheap_class_count()). */
typedef struct pheap_class_info {
    uint32_t block_size;      /* bytes */
    uint32_t blocks_per_slab;
    uint64_t slabs;           /* slabs of this class */
    uint64_t live_blocks;     /* allocated blocks of this class */
} pheap_class_info;

unsigned pheap_class_count(void);

/* Fills *out for size class `cls`.  Errors: PHEAP_EINVAL. */
int pheap_stats_class(pheap *h, unsigned cls, pheap_class_info *out);

/* Fills *out.  Counters cover every thread since the open.  (In C++, g++'s
 * -Wshadow says this function hides the struct's implicit constructor; the
 * struct is always named `struct pheap_stats`, so the warning is silenced
 * for this one declaration.) */
#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif
int pheap_stats(pheap *h, struct pheap_stats *out);
#if defined(__cplusplus) && defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/* The heap map: what each part of the file holds, run by run. */
enum pheap_chunk_kind {
    PHEAP_CHUNK_META = 1,     /* pheap's own metadata: a region before the data
                                 region (header, roots, lanes, slab descriptors,
                                 extent log, names directory), or a block of the
                                 data region holding some (a names-directory or
                                 transaction-log segment) */
    PHEAP_CHUNK_SLAB = 2,     /* one 64 KiB chunk of blocks of one size class */
    PHEAP_CHUNK_LARGE = 3,    /* one allocated large block (an extent of pages) */
    PHEAP_CHUNK_FREE = 4,     /* free pages the file stores */
    PHEAP_CHUNK_PUNCHED = 5,  /* free pages the file holds no storage for: given
                                 back to the file system (hole punching), or
                                 never written since the heap grew over them */
    PHEAP_CHUNK_RESERVED = 6  /* pages chosen for an allocation that has not
                                 committed yet (a transaction's large block, a
                                 slab being made), or set aside as damaged
                                 (see pheap_alloc's PHEAP_ECORRUPT) */
};

typedef struct pheap_chunk_run {
    pheap_off off;            /* first byte, from the start of the file */
    uint64_t bytes;           /* length, whole pages (4 KiB) */
    unsigned kind;            /* enum pheap_chunk_kind */
    unsigned cls;             /* SLAB: its size class (see pheap_stats_class); else 0 */
    uint32_t blocks_used;     /* SLAB: blocks allocated now (GC mode: blocks in
                                 thread caches count too); else 0 */
    uint32_t blocks_total;    /* SLAB: blocks it holds; else 0 */
    const char *what;         /* META: "header", "roots", "lanes", "slab descriptors",
                                 "extent log", "names", "padding" (between
                                 regions) or "metadata block" (in the data
                                 region); NULL for the other kinds */
    unsigned old_cls;         /* SLAB morphed from another size class (its
                                 blocks of that class still allocated stay
                                 where they are): that class; else 0 */
    uint32_t old_used;        /* ... and those blocks, allocated now; else 0 */
} pheap_chunk_run;

/* Called once per run; a nonzero return stops the walk. */
typedef int (*pheap_chunk_fn)(void *arg, const pheap_chunk_run *run);

/* Walks the file from its first byte to its current size (pheap_stats
 * .size) and calls fn for each run, in offset order, with no gap: each
 * metadata region, then the data region extent by extent -- a slab per
 * chunk with its class and occupancy, a large block per extent, free
 * space split where the file's storage starts or stops (SEEK_HOLE; a file
 * system that cannot tell reports all of it stored).  For a heap no other
 * thread changes, the slabs of class c are pheap_stats_class's `slabs`,
 * their blocks_used and the old_used of slabs morphed from c add up to its
 * live_blocks (GC mode: once no thread caches blocks), the LARGE and data-region META runs add up to
 * pheap_stats .large_bytes, and FREE and PUNCHED to .free_bytes.
 * Reads only, writes nothing (not even a pending hole punch), so a crash
 * during a walk leaves the heap as it was; works on read-only handles and
 * snapshots, and on a GC heap before pheap_recover
 * (whose slabs then show the bitmaps of its last clean close).  fn runs
 * with no lock held and may call pheap; what changes meanwhile shows in
 * the runs not yet reported.  A simulated heap (PHEAP_SIMULATE) reports
 * the holes of the file as it was opened.
 * Returns 0 after the last run, or fn's nonzero return as it is.
 * Errors: PHEAP_EINVAL (NULL heap or fn), PHEAP_EFORKED, PHEAP_ENOMEM. */
int pheap_walk_chunks(pheap *h, pheap_chunk_fn fn, void *arg);

typedef struct pheap_check_report {
    unsigned errors;          /* problems found; 0 = consistent */
    unsigned roots;           /* roots found */
    uint64_t live_blocks;     /* allocated blocks found, small and large */
    uint64_t live_bytes;      /* their usable bytes */
    uint64_t slabs;           /* slabs found */
    uint64_t large_extents;   /* allocated extents found */
    uint64_t free_bytes;      /* backed data bytes in no slab and no extent */
    char     first_error[256];/* the first problem, readable */
    uint64_t names;           /* named objects found */
    uint64_t damaged_chunks;  /* of the errors: chunks that are no slab whose
                                 descriptor records allocated blocks (a slab
                                 the extent log lost), which open does not
                                 read and allocations never hand out (see
                                 pheap_open, pheap_alloc) */
} pheap_check_report;

/* Deep consistency check of all metadata: header, region table, state,
 * roots (each names 0 or the start of a live block), the extent log (its
 * header's epochs, every slot of its active half an entry, zeros or a torn
 * append) against the extent index (no overlap, everything accounted for),
 * every slab descriptor and bitmap against its size class, the descriptors
 * of chunks that are no slab (no allocated block may be recorded there: a
 * slab the log lost), the per-thread logs.  Returns 0 when consistent,
 * PHEAP_ECORRUPT when a problem was found (details in *out, which may be
 * NULL).  Changes nothing; run it while no other thread allocates. */
int pheap_check(pheap *h, pheap_check_report *out);

/* ===================================================================== */
/*  Crash simulator (tests)                                              */
/* ===================================================================== */
/*
 * With PHEAP_SIMULATE the heap's working memory is private and a separate
 * durable image receives a cache line only when that line was flushed and
 * a fence of the flushing thread followed -- the x86 persistency rules.
 * With PHEAP_SIM_PAGES it models the page cache of an ordinary file
 * instead, as the msync back end meets it: a fence of a thread that
 * flushed syncs every page, and the kernel may write any page back whole
 * at any time.  The file on disk is not touched until pheap_close.
 */

/* Writes the durable image to `image_path` as if the power failed now:
 * every line that differs from it (flushed but not fenced, or dirty and
 * never flushed) joins the image with its current contents with
 * probability `evict_probability`, drawn per line from `seed` -- per
 * aligned 8-byte word when the heap was opened with PHEAP_SIM_WORDS, per
 * 4 KiB page with PHEAP_SIM_PAGES.  The image is as long as the file's
 * durable length (a growth is durable once pheap synced the file; with
 * PHEAP_SIM_PAGES a length not yet synced is drawn as a page is).  With
 * `image_path` NULL no image is written:
 * the handle is only released, as by a crash.  Then
 * releases the handle without a clean shutdown (the heap file itself is
 * unchanged).  The handle is freed even when writing the image fails.
 * Errors: PHEAP_EINVAL (not simulating: the handle stays open), PHEAP_EIO. */
int pheap_sim_crash(pheap *h, const char *image_path, uint64_t seed,
                    double evict_probability);

/* Number of fences issued so far through a simulated heap (0 otherwise). */
uint64_t pheap_sim_fence_count(const pheap *h);

/* Number of durable stores (8-byte words of metadata and of the words
 * pheap's own protocols write) so far through a simulated heap. */
uint64_t pheap_sim_store_count(const pheap *h);

/* An order-sensitive hash of every durable store, flush and fence so far:
 * the same calls on the same simulated heap give the same hash (0 when not
 * simulating). */
uint64_t pheap_sim_trace_hash(const pheap *h);

#ifdef __cplusplus
}
#endif

#endif /* PHEAP_H */
