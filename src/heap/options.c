/*
 * options.c -- the option table.  Each option has a name, a default, a
 * description, a PHEAP_<NAME> environment variable and a field in
 * pheap_options; a value set in pheap_options wins over the environment.
 */
#include "heap/options.h"

#include <stdlib.h>
#include <string.h>

#include "format/layout.h"
#include "persist/persist.h"
#include "util/error.h"
#include "util/util.h"

typedef struct option_def {
    const char *name;      /* environment variable */
    const char *def;       /* default, as text */
    const char *desc;
    int (*apply_env)(const char *value, ph_config *cfg); /* NULL: read elsewhere */
} option_def;

static int env_flush(const char *value, ph_config *cfg)
{
    unsigned kind;
    if (ph_persist_parse_kind(value, &kind) != 0)
        return ph_err(PHEAP_EINVAL, "PHEAP_FLUSH=%s: unknown value (auto, clwb, clflushopt, "
                      "clflush, msync, none)", value);
    if (cfg->flush == PHEAP_FLUSH_AUTO && kind != PHEAP_FLUSH_AUTO) {
        cfg->flush = kind;
        cfg->flush_source = PHEAP_FLUSH_FROM_ENV;
    }
    return 0;
}

static int env_protect(const char *value, ph_config *cfg)
{
    static const char *const names[] = {"auto", "alias", "keys", "off"};
    for (unsigned k = 0; k < PH_ARRAY_LEN(names); k++)
        if (strcmp(value, names[k]) == 0) {
            if (cfg->protect == PHEAP_PROTECT_AUTO)
                cfg->protect = k;
            return 0;
        }
    return ph_err(PHEAP_EINVAL, "PHEAP_PROTECT=%s: unknown value (auto, alias, keys, off)", value);
}

static int env_morph(const char *value, ph_config *cfg)
{
    if (strcmp(value, "0") && strcmp(value, "1"))
        return ph_err(PHEAP_EINVAL, "PHEAP_MORPH=%s: unknown value (1 or 0)", value);
    cfg->no_morph = *value == '0';
    return 0;
}

static int env_nt_stores(const char *value, ph_config *cfg)
{
    static const char *const names[] = {"auto", "1", "0"}; /* PH_NT_AUTO, _ON, _OFF */
    for (unsigned k = 0; k < PH_ARRAY_LEN(names); k++)
        if (strcmp(value, names[k]) == 0) {
            cfg->nt_stores = k;
            return 0;
        }
    return ph_err(PHEAP_EINVAL, "PHEAP_NT_STORES=%s: unknown value (auto, 1 or 0)", value);
}

static int env_durability(const char *value, ph_config *cfg)
{
    unsigned level;
    if (strcmp(value, "sync") == 0 || strcmp(value, "auto") == 0)
        level = PHEAP_DURABILITY_SYNC;
    else if (strcmp(value, "checkpoint") == 0)
        level = PHEAP_DURABILITY_CHECKPOINT;
    else
        return ph_err(PHEAP_EINVAL, "PHEAP_DURABILITY=%s: unknown value (sync, checkpoint)", value);
    if (cfg->durability == PHEAP_DURABILITY_AUTO)
        cfg->durability = level;
    return 0;
}

static int env_checkpoint_ms(const char *value, ph_config *cfg)
{
    char *end;
    unsigned long ms = strtoul(value, &end, 10);
    if (*end || end == value || ms > 86400000ul)
        return ph_err(PHEAP_EINVAL, "PHEAP_CHECKPOINT_MS=%s: not a number of milliseconds "
                      "(0 to 86400000)", value);
    if (!cfg->checkpoint_ms)
        cfg->checkpoint_ms = (unsigned)ms;
    return 0;
}

static const option_def option_table[] = {
    {"PHEAP_FLUSH", "auto",
     "How stores are made durable: clwb, clflushopt, clflush (cache-line flushes), msync "
     "(page write-back, for files not on DAX), none (process-crash durability only) or auto "
     "(cache-line flushes on DAX, msync otherwise). pheap_options.flush wins over it.",
     env_flush},
    {"PHEAP_PROTECT", "auto",
     "How the allocator's metadata is kept out of the program's reach: alias (read-only in the "
     "program's mapping, written through a second mapping), off (a debugging aid) or auto "
     "(alias); keys (memory protection keys: one mapping, metadata writable only inside pheap's "
     "calls; refused where the CPU or kernel has none). pheap_options.protect wins over it.",
     env_protect},
    {"PHEAP_MORPH", "1",
     "Slab morphing (LOG heaps of format 1.7): 1 lets a slab whose size class is no longer in "
     "demand and that is at most a quarter full become a slab of a class in demand, its blocks "
     "staying where they are, so that space stranded in it is used before the heap grows; 0 "
     "turns it off for this open (to measure what it saves).",
     env_morph},
    {"PHEAP_NT_STORES", "auto",
     "How the cache-line back ends (clwb, clflushopt) write the word that commits a small "
     "allocation or free: 1 with a non-temporal store (movnti), 0 with a store and a write-back "
     "of its line, auto (the cheaper with the fence after it, timed on this CPU once per "
     "process: pheap_stats.nt_stores says which). Both are durable at the same fence.",
     env_nt_stores},
    {"PHEAP_DURABILITY", "sync",
     "What a power loss may take from a heap file not on DAX: sync (nothing that returned: "
     "the file is synced at every fence, fences of many threads sharing one sync) or checkpoint "
     "(the heap runs in a working copy in memory that outlives the process; pheap_checkpoint, "
     "PHEAP_CHECKPOINT_MS and pheap_close copy what changed into the file, and a power loss "
     "rolls the heap back to the last checkpoint). pheap_options.durability wins over it.",
     env_durability},
    {"PHEAP_CHECKPOINT_MS", "0",
     "At the checkpoint level: a checkpoint every this many milliseconds, taken by a thread of "
     "pheap's (0: only pheap_checkpoint and pheap_close). pheap_options.checkpoint_ms wins "
     "over it.",
     env_checkpoint_ms},
    {"PHEAP_WORKDIR", "/dev/shm/pheap-UID",
     "At the checkpoint level: the directory of the working copies (a file system in memory, "
     "mode 0700, owned by the user; created when missing). Read at open, not merged into the "
     "options.",
     NULL},
    {"PHEAP_DIR", "$XDG_DATA_HOME/pheap, else ~/.local/share/pheap",
     "The heap directory: where pheap_open looks up a heap name (no '/': \"mydata\" is "
     "mydata.heap there) and what pheap ls lists; see pheap_dir. Read by pheap_dir, not merged "
     "into the options of an open.",
     NULL},
};

int ph_options_resolve(const pheap_options *opts, ph_config *cfg)
{
    static const pheap_options zero;
    if (!opts)
        opts = &zero;
    memset(cfg, 0, sizeof(*cfg));
    unsigned known = PHEAP_CREATE | PHEAP_EXCL | PHEAP_RDONLY | PHEAP_SIMULATE | PHEAP_SNAPSHOT |
                     PHEAP_SHARED;
    if (opts->flags & ~known)
        return ph_err(PHEAP_EINVAL, "options.flags: unknown bits %#x", opts->flags & ~known);
    if ((opts->flags & PHEAP_RDONLY) && (opts->flags & (PHEAP_CREATE | PHEAP_SIMULATE)))
        return ph_err(PHEAP_EINVAL, "options.flags: PHEAP_RDONLY excludes PHEAP_CREATE and PHEAP_SIMULATE");
    if ((opts->flags & PHEAP_SNAPSHOT) && (opts->flags & (PHEAP_CREATE | PHEAP_SIMULATE)))
        return ph_err(PHEAP_EINVAL, "options.flags: PHEAP_SNAPSHOT excludes PHEAP_CREATE and PHEAP_SIMULATE");
    if ((opts->flags & PHEAP_SHARED) && (opts->flags & (PHEAP_RDONLY | PHEAP_SNAPSHOT | PHEAP_SIMULATE)))
        return ph_err(PHEAP_EINVAL, "options.flags: PHEAP_SHARED (read-write, with other processes) "
                      "excludes PHEAP_RDONLY, PHEAP_SNAPSHOT and PHEAP_SIMULATE");
    if ((opts->flags & PHEAP_SHARED) && opts->consistency == PHEAP_CONSISTENCY_GC)
        return ph_err(PHEAP_EINVAL, "options: a GC-mode heap cannot be shared between processes "
                      "(PHEAP_SHARED)");
    if ((opts->flags & PHEAP_SHARED) && opts->durability == PHEAP_DURABILITY_CHECKPOINT)
        return ph_err(PHEAP_EINVAL, "options: the checkpoint durability level keeps the heap in a "
                      "working copy of one process's: it cannot be shared (PHEAP_SHARED)");
    if ((opts->flags & PHEAP_EXCL) && !(opts->flags & PHEAP_CREATE))
        return ph_err(PHEAP_EINVAL, "options.flags: PHEAP_EXCL needs PHEAP_CREATE");
    if (opts->flush > PHEAP_FLUSH_NONE)
        return ph_err(PHEAP_EINVAL, "options.flush: unknown kind %u", opts->flush);
    if (opts->mode & ~07777u)
        return ph_err(PHEAP_EINVAL, "options.mode: %#o is not a permission mask", opts->mode);
    if (opts->consistency > PHEAP_CONSISTENCY_GC)
        return ph_err(PHEAP_EINVAL, "options.consistency: unknown mode %u", opts->consistency);
    if (opts->durability > PHEAP_DURABILITY_CHECKPOINT)
        return ph_err(PHEAP_EINVAL, "options.durability: unknown level %u", opts->durability);
    if (opts->protect > PHEAP_PROTECT_OFF)
        return ph_err(PHEAP_EINVAL, "options.protect: unknown kind %u", opts->protect);
    if ((opts->sim_crash_fence || opts->sim_crash_store || opts->sim_crash_image ||
         opts->sim_mode || opts->sim_store_evict_probability > 0.0 || opts->sim_schedule_seed ||
         opts->sim_crash_site) &&
        !(opts->flags & PHEAP_SIMULATE))
        return ph_err(PHEAP_EINVAL, "options.sim_*: only with PHEAP_SIMULATE");
    const unsigned sim_modes = PHEAP_SIM_WORDS | PHEAP_SIM_CONTENDED | PHEAP_SIM_NT_LAG |
                               PHEAP_SIM_PAGES;
    if (opts->sim_mode & ~sim_modes)
        return ph_err(PHEAP_EINVAL, "options.sim_mode: unknown bits %#x", opts->sim_mode & ~sim_modes);
    if ((opts->sim_mode & PHEAP_SIM_PAGES) && (opts->sim_mode & (PHEAP_SIM_WORDS | PHEAP_SIM_NT_LAG)))
        return ph_err(PHEAP_EINVAL, "options.sim_mode: PHEAP_SIM_PAGES (whole pages written back, "
                      "as the kernel does) excludes PHEAP_SIM_WORDS and PHEAP_SIM_NT_LAG");
    if (!(opts->sim_store_evict_probability >= 0.0 && opts->sim_store_evict_probability <= 1.0))
        return ph_err(PHEAP_EINVAL, "options.sim_store_evict_probability %g is outside [0, 1]",
                      opts->sim_store_evict_probability);
    if (!(opts->sim_evict_probability >= 0.0 && opts->sim_evict_probability <= 1.0))
        return ph_err(PHEAP_EINVAL, "options.sim_evict_probability %g is outside [0, 1]",
                      opts->sim_evict_probability);
    if (opts->size > (1ull << 46))
        return ph_err(PHEAP_EINVAL, "options.size: more than 64 TiB");
    if (opts->max_size > (1ull << 46))
        return ph_err(PHEAP_EINVAL, "options.max_size: more than 64 TiB");
    cfg->flags = opts->flags;
    cfg->mode = opts->mode ? opts->mode : 0600;
    cfg->size = PH_ALIGN_UP(opts->size ? opts->size : PH_DEFAULT_SIZE, PH_CHUNK_SIZE);
    cfg->max_size = PH_ALIGN_UP(opts->max_size, PH_CHUNK_SIZE); /* 0: what size needs */
    if (cfg->max_size && cfg->max_size < cfg->size)
        return ph_err(PHEAP_EINVAL, "options.max_size %llu is below options.size %llu",
                      (unsigned long long)opts->max_size, (unsigned long long)opts->size);
    cfg->flush = opts->flush;
    cfg->consistency = opts->consistency;
    cfg->protect = opts->protect;
    cfg->durability = opts->durability;
    cfg->checkpoint_ms = opts->checkpoint_ms;
    if (cfg->flush != PHEAP_FLUSH_AUTO)
        cfg->flush_source = PHEAP_FLUSH_FROM_OPTION;
    for (size_t i = 0; i < PH_ARRAY_LEN(option_table); i++) {
        const char *v = option_table[i].apply_env ? getenv(option_table[i].name) : NULL;
        if (v && *v) {
            int rc = option_table[i].apply_env(v, cfg);
            if (rc)
                return rc;
        }
    }
    if (cfg->durability == PHEAP_DURABILITY_AUTO)
        cfg->durability = PHEAP_DURABILITY_SYNC;
    cfg->durability_env = cfg->durability == PHEAP_DURABILITY_CHECKPOINT &&
                          opts->durability != PHEAP_DURABILITY_CHECKPOINT;
    /* A level from the environment is a default for programs that chose
     * nothing: it gives way to a simulator, sharing or a flush kind the
     * program asked for. */
    if (cfg->durability_env &&
        (opts->flush != PHEAP_FLUSH_AUTO || (opts->flags & (PHEAP_SIMULATE | PHEAP_SHARED))))
        cfg->durability = PHEAP_DURABILITY_SYNC;
    if (cfg->durability == PHEAP_DURABILITY_CHECKPOINT) {
        if (opts->flags & PHEAP_SIMULATE)
            return ph_err(PHEAP_EINVAL, "the checkpoint durability level does not run under "
                          "PHEAP_SIMULATE (its working copy is a file of its own)");
        /* It chooses how stores are made durable: options.flush set with
         * it is a contradiction; PHEAP_FLUSH from the environment gives way
         * to a level the program asked for, and contradicts one the
         * environment asked for. */
        if (opts->flush != PHEAP_FLUSH_AUTO || (cfg->flush != PHEAP_FLUSH_AUTO && cfg->durability_env))
            return ph_err(PHEAP_EINVAL, "the checkpoint durability level chooses how stores are "
                          "made durable: %s (%s) cannot be set with it",
                          opts->flush != PHEAP_FLUSH_AUTO ? "options.flush" : "PHEAP_FLUSH",
                          pheap_flush_name(cfg->flush));
        cfg->flush = PHEAP_FLUSH_AUTO;
        cfg->flush_source = 0;
    }
    if (opts->flags & PHEAP_SIMULATE) {
        cfg->flush = PHEAP_FLUSH_SIM;
        cfg->flush_source = PHEAP_FLUSH_FROM_SIMULATE;
    }
    return 0;
}

void ph_options_describe(void (*emit)(const char *, const char *, const char *, void *), void *arg)
{
    for (size_t i = 0; i < PH_ARRAY_LEN(option_table); i++)
        emit(option_table[i].name, option_table[i].def, option_table[i].desc, arg);
}
