/*
 * os.h -- the operating-system contract.  Each primitive pheap needs, with
 * its preconditions and errors; os_linux.c is the only file that makes
 * Linux-specific calls.  Every function returning int returns 0 or a
 * negative PHEAP_E* code with the thread-local message set (util/error.h).
 */
#ifndef PH_OS_H
#define PH_OS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Opens `path` read-write (or read-only) and stores the descriptor.
 * Errors: PHEAP_ENOENT, PHEAP_EACCES, PHEAP_EISDIR, PHEAP_EIO. */
int ph_os_open(const char *path, int readonly, int *fd);

/* Creates a new file in the directory of `path` with `mode` and stores its
 * descriptor: unnamed (O_TMPFILE; tmp_path gets "") where the file system
 * allows, so that a creator that dies leaves nothing, else named next to
 * `path` (tmp_path gets the name: it must hold strlen(path) + 16). */
int ph_os_create_temp(const char *path, unsigned mode, int *fd, char *tmp_path);

/* Publishes the file ph_os_create_temp made under `path`: replacing what is
 * there when `replace`, else failing with PHEAP_EEXIST if `path` exists. */
int ph_os_publish(int fd, const char *tmp_path, const char *path, int replace);

/* Renames `from` to `to` unless `to` exists.  PHEAP_EEXIST if it does. */
int ph_os_rename_noreplace(const char *from, const char *to);

/* Creates the directory `dir` with `mode`, and each missing parent with
 * the same mode (umask applies); 0 when it is a directory already.
 * Errors: PHEAP_EEXIST (it, or a parent, exists and is not a directory),
 * PHEAP_EACCES, PHEAP_ENOSPC, PHEAP_EIO. */
int ph_os_make_dirs(const char *dir, unsigned mode);

/* 1 if `path` is a directory, 0 if nothing is there, -1 if something else
 * is (a file) or it cannot be told (no permission on a parent). */
int ph_os_is_dir(const char *path);

/* fsync of a file and of the directory holding `path`. */
int ph_os_sync_file(int fd, const char *path);
int ph_os_sync_dir(const char *path);

/* Size of the file; PHEAP_EISDIR for a directory. */
int ph_os_file_size(int fd, const char *path, uint64_t *size);

/* Storage the file takes: its allocated blocks, in bytes. */
int ph_os_file_bytes(int fd, uint64_t *bytes);

/* Sets the size of the file; new bytes read as zero and take no space
 * until written (sparse). */
int ph_os_resize(int fd, const char *path, uint64_t size);

/* Reserves file-system space for [off, off+len), extending the file when
 * the range ends past it, so that stores through a mapping of the range can
 * never fault for want of space (a sparse page the file system cannot back
 * is a SIGBUS at the store).  Existing data in the range is kept.
 * Precondition: no one needs the bytes of the range.  On a file system
 * without fallocate (EOPNOTSUPP) the range is written with zeros instead,
 * which allocates it just as well; that is the one way to reserve space
 * there.  (On copy-on-write file systems no reservation holds for later
 * overwrites; pheap cannot do better than the file system.)
 * On failure the file's size is what it was.
 * Errors: PHEAP_ENOSPC (file system full, or quota exceeded), PHEAP_EIO. */
int ph_os_allocate(int fd, const char *path, uint64_t off, uint64_t len);

/* Gives the pages of [off, off+len) back to the file system (hole punch);
 * they read as zero afterwards.  PHEAP_ENOTSUP where unsupported. */
int ph_os_punch_hole(int fd, uint64_t off, uint64_t len);

/* The first range of [off, end) the file stores (SEEK_DATA / SEEK_HOLE):
 * 1 with [*data, *data_end), or 0 when the rest of [off, end) is a hole.
 * A file system that cannot tell reports everything as stored.  Reads
 * nothing and changes nothing. */
int ph_os_next_data(int fd, uint64_t off, uint64_t end, uint64_t *data, uint64_t *data_end);

/* The first range of [off, end) the file has space for, written or only
 * reserved (fallocate): 1 with [*a0, *a1), 0 when none is left, -1 when
 * the file system cannot say (no FIEMAP: tmpfs, whose SEEK_DATA calls
 * reserved pages holes). */
int ph_os_next_allocated(int fd, uint64_t off, uint64_t end, uint64_t *a0, uint64_t *a1);

/* Reads exactly `len` bytes at `off`; returns the number read (short at
 * end of file) or a negative code. */
ssize_t ph_os_pread(int fd, void *buf, size_t len, uint64_t off);

/* Writes exactly `len` bytes at `off`. */
int ph_os_pwrite(int fd, const void *buf, size_t len, uint64_t off);

/* Non-blocking advisory lock of the whole file: exclusive or shared.
 * PHEAP_EBUSY when another open file description holds a conflicting one. */
int ph_os_lock(int fd, int exclusive);

/* Gives the CPU to another runnable thread, if any (sched_yield). */
void ph_os_yield(void);

/* fdatasync(fd): every page of the file written so far, through write()
 * or a shared mapping, is durable on return (with the metadata needed to
 * read it back).  EINTR is retried. */
int ph_os_datasync(int fd);

/* Open-file-description record locks (fcntl F_OFD_*) on the single byte at
 * `off` (any offset, inside the file or not).  They belong to the open
 * file, not to a thread or a process: every descriptor of it shares them,
 * a fork child's too, and the kernel drops them when the last one closes,
 * including when the process dies.  Another open of the same file, in the
 * same process or not, conflicts.  `type`: PH_OFD_READ, PH_OFD_WRITE (the
 * descriptor must be open for writing) or PH_OFD_UNLOCK.  Without `wait`,
 * PHEAP_EBUSY when a conflicting lock is held; with it, blocks until the
 * lock is free (EINTR retried). */
enum { PH_OFD_UNLOCK, PH_OFD_READ, PH_OFD_WRITE };
int ph_os_ofd_lock(int fd, uint64_t off, int type, int wait);

/* 1 when an open file other than fd's holds a lock on the byte at `off`
 * that conflicts with a lock of `type` (PH_OFD_READ: a write lock;
 * PH_OFD_WRITE: any lock), 0 when none does; a negative code on error.
 * Works on a descriptor open for reading only. */
int ph_os_ofd_held(int fd, uint64_t off, int type);

/* The start time of process `pid` in clock ticks after boot (field 22 of
 * /proc/PID/stat), 0 when it does not exist or /proc is not readable. */
uint64_t ph_os_proc_start(long pid);
/* An identity of the calling process's pid namespace (the inode of
 * /proc/self/ns/pid, below 2^32 on Linux), 0 when it cannot be read: pids
 * and start times of two processes compare only within one namespace. */
uint32_t ph_os_pidns(void);

/* 0 when no process `pid` exists (kill(pid, 0) fails with ESRCH), 1
 * otherwise: one that runs, a zombie, or one this user may not signal. */
int ph_os_proc_exists(long pid);

/* The name of process `pid` (/proc/PID/comm) into buf, "" when unknown. */
void ph_os_proc_comm(long pid, char *buf, size_t len);

/* Reserves `len` bytes of address space (no access, no memory). */
int ph_os_reserve(size_t len, void **addr);
void ph_os_unreserve(void *addr, size_t len);

/* Maps [off, off+len) of the file at the fixed address `addr` (inside a
 * reservation).  kind: PH_MAP_SHARED (writes go to the file),
 * PH_MAP_PRIVATE (copy-on-write working copy) or PH_MAP_READONLY.  For the
 * shared kinds MAP_SYNC is tried first when try_sync, and *is_sync tells
 * whether it worked (the file is on DAX). */
enum { PH_MAP_SHARED, PH_MAP_PRIVATE, PH_MAP_READONLY };
int ph_os_map_file(int fd, void *addr, size_t len, uint64_t off, int kind, int try_sync, int *is_sync);

/* 1 when the file maps with MAP_SYNC (DAX), probed with a one-page
 * read-only mapping that is dropped at once; 0 otherwise. */
int ph_os_file_on_dax(int fd);

/* 1 when the file lives in memory (tmpfs, ramfs): nothing of it survives a
 * power loss, whatever is flushed.  0 otherwise or when unknown. */
int ph_os_file_in_memory(int fd);

/* Maps zero-filled private memory at the fixed address `addr`. */
int ph_os_map_anon(void *addr, size_t len);

/* Creates an anonymous in-memory file (memfd) of `size` zero bytes and
 * stores its descriptor: a working copy that several mappings can share.
 * Errors: PHEAP_ENOMEM, PHEAP_EIO. */
int ph_os_memfd(uint64_t size, int *out);

/* Copies the first `size` bytes of file `fd` (a multiple of 8) to `dst`,
 * which reads as zeros: only the pages that hold something, so that holes
 * and zero pages of the file stay unallocated in `dst`. */
int ph_os_copy_file(int fd, uint64_t size, char *dst);

/* The kernel's page size (4 KiB when it cannot tell). */
uint64_t ph_os_page(void);

/* Makes the whole OS pages of [addr, addr+len), inside a mapping,
 * read-only (writable == 0) or readable and writable. */
int ph_os_protect(void *addr, size_t len, int writable);

/* Memory protection keys (PHEAP_PROTECT_KEYS).  ph_os_pkey_alloc takes a
 * key whose rights, in the calling thread, deny writes (other threads keep
 * what their PKRU says: on Linux, no access) and stores it in *key.
 * Errors: PHEAP_ENOTSUP (the CPU or the kernel has no keys, or none is
 * free), with the reason in pheap_errmsg().  The rest are called only
 * once a key was allocated: ph_os_pkey_tag gives the whole OS pages of
 * [addr, addr+len) the key `key` (0: the default key), readable and
 * writable as far as page protection goes; ph_os_pkey_get/set read and
 * write this thread's rights for `key` (PKEY_DISABLE_WRITE,
 * PKEY_DISABLE_ACCESS): one RDPKRU or WRPKRU, no system call. */
int ph_os_pkey_alloc(int *key);
int ph_os_pkey_tag(void *addr, size_t len, int key);
unsigned ph_os_pkey_get(int key);
void ph_os_pkey_set(int key, unsigned rights);

/* Faults in [addr, addr+len) for writing ahead of use (file pages are
 * allocated), so that later stores take no page fault.  Best effort. */
void ph_os_populate(void *addr, size_t len);

/* For the n 4 KiB pages from page-aligned `addr`: sets bit i of file[]
 * (n bits, cleared first) when page i maps a page of a file's page cache
 * as it is (present, not a private copy made on write), so that it reads
 * as the file does; a private copy, anonymous memory or a page not present
 * gets 0.  PHEAP_ENOTSUP when the kernel does not tell (Linux:
 * /proc/self/pagemap) or OS pages are not 4 KiB. */
int ph_os_file_pages(const void *addr, uint64_t n, uint64_t *file);

/* Anonymous private memory, zero-filled; NULL on failure. */
void *ph_os_alloc_pages(size_t len);
void ph_os_free_pages(void *addr, size_t len);

/* Random bytes from the kernel. */
int ph_os_random(void *buf, size_t len);

/* The effective user id of the calling process. */
uint32_t ph_os_euid(void);

/* CLOCK_REALTIME in nanoseconds. */
uint64_t ph_os_time_ns(void);

/* Monotonic clock at scheduler-tick resolution (cheap: no system call). */
uint64_t ph_os_coarse_ns(void);

/* A mutex for short critical sections: spins briefly before sleeping
 * (a sleeping waiter on a small machine costs microseconds to wake). */
#include <pthread.h>
void ph_os_mutex_init(pthread_mutex_t *m);

/* CPU features for the persistence layer. */
typedef struct ph_cpu_features {
    int clflush;
    int clflushopt;
    int clwb;
    int pku;
} ph_cpu_features;
void ph_os_cpu_features(ph_cpu_features *out);

/* CPU the calling thread runs on now (a hint; may change at any moment). */
unsigned ph_os_current_cpu(void);
unsigned ph_os_cpu_count(void);

#endif /* PH_OS_H */
