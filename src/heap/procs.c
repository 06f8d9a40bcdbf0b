/*
 * procs.c -- leases in the process table (format/layout.h).
 *
 * A read-write open takes the gate, clears the leases whose process is
 * gone, write-locks the liveness byte of a free slot with its own open
 * file, fills the slot, and drops the gate.  Close does the reverse.  The
 * lock is the truth; the slot's words only describe its holder.  So a
 * process killed at any instant leaves either no lease (it died before
 * locking, or after unlocking) or a lease whose lock the kernel dropped:
 * stale, cleared by the next attach and never listed.
 *
 * Nothing here is flushed: after a power loss no process holds the heap,
 * whatever the table says.
 *
 * At the checkpoint level the heap runs in a working copy, but pheap_procs
 * reads the heap file: the locks are taken on the heap file's bytes
 * (ph_tier_file), and the table's two pages are written into the heap file
 * as well as into the working copy each time they change (the table is no
 * part of any checkpoint's state: recovery never reads it).
 */
#include "heap/procs.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/header.h"
#include "heap/namespace.h"
#include "os/os.h"
#include "util/error.h"
#include "util/util.h"

enum { LEASE_FREE, LEASE_LIVE, LEASE_STALE, LEASE_ORPHANED };

/* What slot i holds.  Live: its byte is locked and its process runs.  A
 * locked byte whose process is gone (another start time behind the pid)
 * is held by a fork child that kept the open file: orphaned, not usable
 * until the child exits.  Negative: the lock test failed. */
static int lease_state(int fd, uint64_t region, unsigned i, const ph_lease *l)
{
    int held = ph_os_ofd_held(fd, PH_PROCS_LOCK_BYTE(region, i), PH_OFD_WRITE);
    if (held < 0)
        return held;
    if (!held)
        return l->xpid ? LEASE_STALE : LEASE_FREE;
    /* A pid of another pid namespace (a container's, its host's) names no
     * process here: the lock decides. */
    uint32_t ns = (uint32_t)(l->xflags >> PH_LEASE_NS_SHIFT);
    if (l->xpid && ns && ns != ph_os_pidns())
        return LEASE_LIVE;
    if (!l->xpid || !ph_os_proc_exists((long)l->xpid))
        return LEASE_ORPHANED;
    /* Start time 0: /proc hides the process, so the lock decides. */
    uint64_t start = ph_os_proc_start((long)l->xpid);
    return start && start != l->xstart ? LEASE_ORPHANED : LEASE_LIVE;
}

static uint64_t region_of(const pheap *h)
{
    const ph_region *r = ph_header_region(&h->hdr, PH_REGION_PROCS);
    return r ? r->offset : 0;
}

/* The gate, write-locked without waiting for ever: any process that can
 * read the file can hold a lock on its bytes, so a gate that stays taken
 * (for 100 ms) is given up on rather than waited for. */
static int take_gate(int fd, uint64_t r)
{
    for (int i = 0; i < 100; i++) {
        if (ph_os_ofd_lock(fd, PH_PROCS_GATE_BYTE(r), PH_OFD_WRITE, 0) == 0)
            return 1;
        usleep(1000);
    }
    return 0;
}

/* At the checkpoint level: the table as the working copy holds it, into
 * the heap file, where pheap_procs reads it. */
static void publish(pheap *h, int fd, uint64_t r)
{
    if (fd != h->sp.fd)
        (void)ph_os_pwrite(fd, ph_space_at(&h->sp, r), 2 * PH_PAGE_SIZE, r);
}

/* Takes a slot for h, gate held: the first free one, clearing stale ones
 * on the way -- but the slot of a dead sharer not taken over yet, which a
 * survivor must take over first (share.c), when `keep_dead`. */
static void take_slot(pheap *h, int fd, uint64_t r, uint64_t flags, int keep_dead)
{
    ph_procs_header *ph = ph_procs_table(h);
    ph_lease *leases = ph_procs_leases(h);
    for (unsigned i = 0; i < PH_PROCS_SLOTS; i++) {
        int st = lease_state(fd, r, i, &leases[i]);
        if (st == LEASE_STALE && keep_dead &&
            (leases[i].xflags & (PH_LEASE_SHARED | PH_LEASE_TAKEN)) == PH_LEASE_SHARED)
            continue;
        if (st == LEASE_STALE) {
            memset(&leases[i], 0, sizeof(leases[i]));
            ph->xstale++;
        }
        /* A slot another open holds any lock on (a reader's, say) stays
         * as it is: the next one is tried. */
        if (h->lease >= 0 || (st != LEASE_STALE && st != LEASE_FREE) ||
            ph_os_ofd_lock(fd, PH_PROCS_LOCK_BYTE(r, i), PH_OFD_WRITE, 0) != 0)
            continue;
        ph_lease *l = &leases[i];
        long pid = (long)getpid();
        ph->magic = PH_PROCS_MAGIC;
        l->xgen = ++ph->xattaches;
        l->xstart = ph_os_proc_start(pid);
        l->xsince = ph_os_time_ns() / 1000000000u;
        l->xuid = ph_os_euid();
        l->xflags = flags | (uint64_t)ph_os_pidns() << PH_LEASE_NS_SHIFT;
        ph_os_proc_comm(pid, l->comm, sizeof(l->comm));
        ph_store(&l->xpid, (uint64_t)pid); /* last: a lister skips a slot without a pid */
        h->lease = (int)i;
    }
}

void ph_procs_attach(pheap *h)
{
    h->lease = -1;
    uint64_t r = region_of(h);
    if (!r || h->readonly || h->sp.sim)
        return;
    int fd = ph_tier_file(h);
    if (!take_gate(fd, r))
        return;
    take_slot(h, fd, r, PH_LEASE_EXCLUSIVE, 0);
    publish(h, fd, r);
    ph_os_ofd_lock(fd, PH_PROCS_GATE_BYTE(r), PH_OFD_UNLOCK, 0);
}

/* The open file a shared handle's gate lock is taken with: one of its own,
 * which fork children close (thread.c), so that a child never keeps the
 * gate held after its parent died holding it. */
static int gate_file(const pheap *h)
{
    return h->gate_fd >= 0 ? h->gate_fd : ph_tier_file(h);
}

int ph_procs_gate(pheap *h)
{
    return ph_os_ofd_lock(gate_file(h), PH_PROCS_GATE_BYTE(region_of(h)), PH_OFD_WRITE, 1);
}

int ph_procs_gate_try(pheap *h)
{
    return ph_os_ofd_lock(gate_file(h), PH_PROCS_GATE_BYTE(region_of(h)), PH_OFD_WRITE, 0);
}

void ph_procs_ungate(pheap *h)
{
    ph_os_ofd_lock(gate_file(h), PH_PROCS_GATE_BYTE(region_of(h)), PH_OFD_UNLOCK, 0);
}

int ph_procs_attach_shared(pheap *h)
{
    h->lease = -1;
    take_slot(h, ph_tier_file(h), region_of(h), PH_LEASE_SHARED, 1);
    return h->lease >= 0 ? 0 : ph_err(PHEAP_EBUSY, "%s: all %u slots of the process table are "
                                      "held: no more processes can share the heap",
                                      h->path, PH_PROCS_SLOTS);
}

int ph_procs_slot(pheap *h, unsigned i, ph_lease *copy)
{
    memcpy(copy, ph_procs_leases(h) + i, sizeof(*copy));
    int st = lease_state(ph_tier_file(h), region_of(h), i, copy);
    return st < 0 ? st
           : st == LEASE_LIVE ? PH_SLOT_LIVE
           : st == LEASE_STALE ? PH_SLOT_DEAD
           : st == LEASE_ORPHANED ? PH_SLOT_ORPHANED
                                  : PH_SLOT_FREE;
}

ph_procs_header *ph_procs_table(pheap *h)
{
    return (ph_procs_header *)ph_space_at(&h->sp, region_of(h));
}

ph_lease *ph_procs_leases(pheap *h)
{
    return (ph_lease *)ph_space_at(&h->sp, region_of(h) + PH_PAGE_SIZE);
}

int ph_procs_exclude(pheap *h, int readonly)
{
    uint64_t r = region_of(h);
    if (!r)
        return 0;
    int fd = h->sp.fd;
    uint64_t mine = readonly ? PH_PROCS_READER_BYTE(r) : PH_PROCS_SHARER_BYTE(r);
    uint64_t theirs = readonly ? PH_PROCS_SHARER_BYTE(r) : PH_PROCS_READER_BYTE(r);
    /* Each kind locks its byte, then looks at the other's: of two opens
     * racing, the later to look sees the other.  (No open write-locks
     * these bytes, so the read lock is had at once.) */
    int rc = ph_os_ofd_lock(fd, mine, PH_OFD_READ, 0);
    int held = rc ? 0 : ph_os_ofd_held(fd, theirs, PH_OFD_WRITE);
    if (rc || !held)
        return rc;
    ph_os_ofd_lock(fd, mine, PH_OFD_UNLOCK, 0);
    if (held < 0)
        return held;
    return ph_err(PHEAP_EBUSY, "%s: the heap is open %s elsewhere", h->path,
                  readonly ? "for sharing (PHEAP_SHARED): a read-only open would see other "
                             "processes change it (PHEAP_SNAPSHOT reads it)"
                           : "read-only: sharing it (PHEAP_SHARED) would change it under the "
                             "reader");
}

int ph_procs_sharers(pheap *h)
{
    uint64_t r = region_of(h);
    return r ? ph_os_ofd_held(h->sp.fd, PH_PROCS_SHARER_BYTE(r), PH_OFD_WRITE) : 0;
}

void ph_procs_detach(pheap *h)
{
    ph_procs_detach_gated(h, 0);
}

void ph_procs_detach_gated(pheap *h, int held)
{
    uint64_t r = region_of(h);
    if (h->lease < 0 || !r)
        return;
    int fd = ph_tier_file(h);
    ph_lease *l = ph_procs_leases(h) + h->lease;
    /* Without the gate an attach could see the slot locked with no pid
     * (fine: it is skipped) or unlocked with a pid (stale: cleared, the
     * same words this clears). */
    int gated = !held && take_gate(gate_file(h), r);
    memset(l, 0, sizeof(*l));
    publish(h, fd, r);
    ph_os_ofd_lock(fd, PH_PROCS_LOCK_BYTE(r, h->lease), PH_OFD_UNLOCK, 0);
    if (gated)
        ph_os_ofd_lock(gate_file(h), PH_PROCS_GATE_BYTE(r), PH_OFD_UNLOCK, 0);
    h->lease = -1;
}

uint64_t ph_procs_identity(const pheap *h)
{
    uint64_t r = region_of(h);
    if (h->lease < 0 || !r)
        return 0;
    const ph_lease *l = (const ph_lease *)ph_space_at(&h->sp, r + PH_PAGE_SIZE) + h->lease;
    return ph_load(&l->xgen) << 8 | (uint64_t)(h->lease + 1);
}

int ph_procs_dead(pheap *h, uint64_t who)
{
    uint64_t r = region_of(h);
    unsigned slot = (unsigned)(who & 0xff);
    if (!r || slot == 0 || slot > PH_PROCS_SLOTS || who == ph_procs_identity(h))
        return 0; /* (this process's own lock never conflicts with its own test) */
    ph_lease l;
    memcpy(&l, (const ph_lease *)ph_space_at(&h->sp, r + PH_PAGE_SIZE) + (slot - 1), sizeof(l));
    if (l.xgen != who >> 8)
        return 1; /* the slot was cleared, or taken again: its holder left */
    int st = lease_state(ph_tier_file(h), r, slot - 1, &l);
    return st == LEASE_STALE || st == LEASE_FREE || st == LEASE_ORPHANED;
}

/* The process table of the heap file open as fd, read with pread: its
 * region offset in *region and the leases in out[].  0 or a negative code
 * (PHEAP_ENOTSUP: the heap predates the table). */
static int read_table(int fd, const char *path, uint64_t *region, ph_lease *out)
{
    char page[PH_PAGE_SIZE];
    uint64_t size;
    ph_header hdr;
    ph_state st;
    int rc = ph_os_file_size(fd, path, &size);
    ssize_t n = rc ? 0 : ph_os_pread(fd, page, sizeof(page), 0);
    if (!rc && n < 0)
        rc = (int)n;
    if (!rc)
        rc = ph_header_validate(page, (uint64_t)n, size, 1, path, &hdr, &st);
    const ph_region *reg = rc ? NULL : ph_header_region(&hdr, PH_REGION_PROCS);
    if (!rc && !reg)
        rc = ph_err(PHEAP_ENOTSUP, "%s: format %u.%u has no process table (1.6 and later have one)",
                    path, hdr.major, hdr.minor);
    if (!rc) {
        *region = reg->offset;
        n = ph_os_pread(fd, out, PH_PAGE_SIZE, reg->offset + PH_PAGE_SIZE);
        if (n != PH_PAGE_SIZE)
            rc = n < 0 ? (int)n : ph_err(PHEAP_ETRUNCATED, "%s: truncated in its process table", path);
    }
    return rc;
}

ph_export int pheap_procs(const char *path, pheap_proc *out, size_t max)
{
    if (!path || (!out && max))
        return ph_err(PHEAP_EINVAL, "pheap_procs: %s is NULL", path ? "out" : "path");
    char *file = NULL;
    int fd = -1, rc = ph_namespace_resolve(path, 0, &file);
    if (!rc)
        rc = ph_os_open(file, 1, &fd);
    /* The gate, read-locked: no attach or detach is half done meanwhile. */
    uint64_t region = 0;
    ph_lease leases[PH_PROCS_SLOTS];
    if (!rc)
        rc = read_table(fd, file, &region, leases);
    int gated = !rc && ph_os_ofd_lock(fd, PH_PROCS_GATE_BYTE(region), PH_OFD_READ, 1) == 0;
    if (gated)
        rc = read_table(fd, file, &region, leases);
    size_t n = 0;
    for (unsigned i = 0; !rc && i < PH_PROCS_SLOTS; i++) {
        int st = lease_state(fd, region, i, &leases[i]);
        if (st < 0)
            rc = st;
        if (st != LEASE_LIVE)
            continue;
        if (n < max) {
            const ph_lease *l = &leases[i];
            pheap_proc *p = &out[n];
            memset(p, 0, sizeof(*p));
            p->pid = (int64_t)l->xpid;
            p->start_ticks = l->xstart;
            p->since = (int64_t)l->xsince;
            p->uid = (uint32_t)l->xuid;
            p->flags = (l->xflags & PH_LEASE_EXCLUSIVE ? PHEAP_PROC_EXCLUSIVE : 0) |
                       (l->xflags & PH_LEASE_SHARED ? PHEAP_PROC_SHARED : 0);
            p->slot = i;
            memcpy(p->comm, l->comm, sizeof(p->comm) - 1);
        }
        n++;
    }
    if (gated)
        ph_os_ofd_lock(fd, PH_PROCS_GATE_BYTE(region), PH_OFD_UNLOCK, 0);
    if (fd >= 0)
        close(fd);
    free(file);
    return rc ? rc : (int)PH_MIN(n, (size_t)0x7fffffff);
}
