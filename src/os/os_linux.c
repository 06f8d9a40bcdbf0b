/*
 * os_linux.c -- the Linux implementation of os.h.  The only file in the
 * library that calls the kernel directly.
 */
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <linux/fiemap.h>
#include <linux/fs.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "pheap.h"
#include "util/error.h"
#include "util/util.h"

#ifndef MAP_SHARED_VALIDATE
#define MAP_SHARED_VALIDATE 0x03
#endif
#ifndef MAP_SYNC
#define MAP_SYNC 0x80000
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1
#endif

int ph_os_open(const char *path, int readonly, int *fd)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer. */
    int f = open(path, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
    if (f < 0)
        return ph_err_sys("cannot open", path);
    struct stat st;
    if (fstat(f, &st) != 0) {
        int rc = ph_err_sys("cannot stat", path);
        close(f);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        close(f);
        return ph_err(PHEAP_EISDIR, "%s is a directory, not a heap file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return ph_err(PHEAP_ENOTHEAP, "%s is not a regular file (device, FIFO or socket)", path);
    }
    *fd = f;
    return 0;
}

/* A name next to `path` no one uses: "path.tmpXXXXXXXX". */
static int temp_name(const char *path, char *tmp_path)
{
    uint32_t r;
    if (ph_os_random(&r, sizeof(r)) != 0)
        return PHEAP_EIO;
    sprintf(tmp_path, "%s.tmp%08x", path, r);
    return 0;
}

int ph_os_create_temp(const char *path, unsigned mode, int *fd, char *tmp_path)
{
    /* An unnamed file in the directory first: a creator killed before it
     * publishes the heap leaves nothing behind. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    int f = open(slash ? dir : ".", O_TMPFILE | O_RDWR | O_CLOEXEC, mode);
    if (f >= 0) {
        *fd = f;
        tmp_path[0] = '\0';
        return 0;
    }
    for (int tries = 0; tries < 100; tries++) {
        if (temp_name(path, tmp_path) != 0)
            return PHEAP_EIO;
        f = open(tmp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode);
        if (f >= 0) {
            *fd = f;
            return 0;
        }
        if (errno != EEXIST)
            return ph_err_sys("cannot create", path); /* the user knows no temporary name */
    }
    return ph_err(PHEAP_EIO, "cannot create a temporary file next to %s", path);
}

int ph_os_rename_noreplace(const char *from, const char *to)
{
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return ph_err_sys("cannot rename into", to);
    /* File systems without RENAME_NOREPLACE: link() fails if `to` exists. */
    if (link(from, to) != 0)
        return ph_err_sys("cannot link into", to);
    unlink(from);
    return 0;
}

/* Gives the unnamed file of `fd` the name `to`; fails if `to` exists. */
static int link_unnamed(int fd, const char *to)
{
    char proc[64];
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    if (linkat(AT_FDCWD, proc, AT_FDCWD, to, AT_SYMLINK_FOLLOW) == 0)
        return 0;
    if (errno == ENOENT && linkat(fd, "", AT_FDCWD, to, AT_EMPTY_PATH) == 0) /* no /proc */
        return 0;
    return ph_err_sys("cannot link into", to);
}

int ph_os_publish(int fd, const char *tmp_path, const char *path, int replace)
{
    if (tmp_path[0])
        return replace ? (rename(tmp_path, path) == 0 ? 0 : ph_err_sys("cannot rename into", path))
                       : ph_os_rename_noreplace(tmp_path, path);
    if (!replace)
        return link_unnamed(fd, path);
    /* Replacing a file: a name of its own for an instant, then a rename. */
    char tmp[4096 + 16];
    if (strlen(path) >= 4096 || temp_name(path, tmp) != 0)
        return ph_err(PHEAP_EIO, "cannot name a new file next to %s", path);
    int rc = link_unnamed(fd, tmp);
    if (!rc && rename(tmp, path) != 0) {
        rc = ph_err_sys("cannot rename into", path);
        unlink(tmp);
    }
    return rc;
}

int ph_os_is_dir(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0)
        return S_ISDIR(st.st_mode) ? 1 : -1;
    return errno == ENOENT ? 0 : -1;
}

/* mkdir of one level: 0 when it is made or is a directory already. */
static int make_dir(const char *dir, unsigned mode)
{
    if (mkdir(dir, (mode_t)mode) == 0)
        return 0;
    int e = errno;
    if (e == EEXIST || e == ENOTDIR) {
        if (ph_os_is_dir(dir) == 1)
            return 0;
        return ph_err(PHEAP_EEXIST, "cannot create directory %s: %s exists and is not a directory",
                      dir, e == EEXIST ? "it" : "a parent");
    }
    errno = e;
    return ph_err_sys("cannot create directory", dir);
}

int ph_os_make_dirs(const char *dir, unsigned mode)
{
    if (ph_os_is_dir(dir) == 1)
        return 0;
    char *p = strdup(dir);
    if (!p)
        return ph_err(PHEAP_ENOMEM, "out of memory");
    int rc = 0;
    for (char *s = strchr(p + 1, '/'); !rc && s; s = strchr(s + 1, '/')) {
        if (s[-1] == '/')
            continue; /* "a//b" */
        *s = 0;
        rc = make_dir(p, mode);
        *s = '/';
    }
    if (!rc)
        rc = make_dir(p, mode);
    free(p);
    return rc;
}

int ph_os_sync_file(int fd, const char *path)
{
    if (fsync(fd) != 0)
        return ph_err_sys("fsync", path);
    return 0;
}

void ph_os_yield(void)
{
    sched_yield();
}

int ph_os_datasync(int fd)
{
    while (fdatasync(fd) != 0) {
        if (errno != EINTR)
            return ph_err_sys("fdatasync", "heap file");
    }
    return 0;
}

int ph_os_sync_dir(const char *path)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int f = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f < 0)
        return ph_err_sys("cannot open directory", dir);
    int rc = fsync(f) == 0 || errno == EINVAL ? 0 : ph_err_sys("fsync", dir);
    close(f);
    return rc;
}

int ph_os_file_size(int fd, const char *path, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ph_err_sys("cannot stat", path);
    if (S_ISDIR(st.st_mode))
        return ph_err(PHEAP_EISDIR, "%s is a directory", path);
    *size = (uint64_t)st.st_size;
    return 0;
}

int ph_os_file_bytes(int fd, uint64_t *bytes)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return ph_err_sys("cannot stat", "heap file");
    *bytes = (uint64_t)st.st_blocks * 512u;
    return 0;
}

int ph_os_resize(int fd, const char *path, uint64_t size)
{
    if (ftruncate(fd, (off_t)size) != 0)
        return ph_err_sys("cannot resize", path);
    return 0;
}

/* The EOPNOTSUPP fallback of ph_os_allocate: zeros, 64 KiB at a time;
 * returns 0 or an errno value. */
static int write_zeros(int fd, uint64_t off, uint64_t len)
{
    static const char zeros[1u << 16];
    while (len > 0) {
        size_t n = (size_t)PH_MIN(len, (uint64_t)sizeof(zeros));
        ssize_t w = pwrite(fd, zeros, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? errno : EIO;
        off += (uint64_t)w;
        len -= (uint64_t)w;
    }
    return 0;
}

int ph_os_allocate(int fd, const char *path, uint64_t off, uint64_t len)
{
    struct stat st;
    if (len == 0)
        return 0;
    if (fstat(fd, &st) != 0)
        return ph_err_sys("cannot stat", path);
    int e = 0;
    while (fallocate(fd, 0, (off_t)off, (off_t)len) != 0 && (e = errno) == EINTR)
        e = 0;
    if (e == EOPNOTSUPP)
        e = write_zeros(fd, off, len);
    if (e == 0)
        return 0;
    /* Give back what a partial reservation took: nothing past the old end
     * of the file is in use. */
    if (off + len > (uint64_t)st.st_size)
        (void)!ftruncate(fd, st.st_size); /* failing, the file stays longer: open accepts that */
    if (e == ENOSPC || e == EDQUOT)
        return ph_err(PHEAP_ENOSPC, "%s: the file system is full: cannot reserve %llu bytes at "
                      "offset %llu (%s)", path, (unsigned long long)len, (unsigned long long)off,
                      strerror(e));
    errno = e;
    return ph_err_sys("cannot reserve space in", path);
}

int ph_os_punch_hole(int fd, uint64_t off, uint64_t len)
{
    if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len) != 0)
        return ph_err_sys("cannot punch a hole in", "heap file");
    return 0;
}

int ph_os_next_data(int fd, uint64_t off, uint64_t end, uint64_t *data, uint64_t *data_end)
{
    if (off >= end)
        return 0;
    off_t d = lseek(fd, (off_t)off, SEEK_DATA);
    if (d < 0 && errno == ENXIO)
        return 0; /* a hole up to the end of the file */
    if (d < 0) { /* SEEK_DATA unknown here: all of it is stored */
        *data = off;
        *data_end = end;
        return 1;
    }
    if ((uint64_t)d >= end)
        return 0;
    off_t e = lseek(fd, d, SEEK_HOLE);
    *data = (uint64_t)d;
    *data_end = e < 0 ? end : PH_MIN((uint64_t)e, end);
    return 1;
}

int ph_os_next_allocated(int fd, uint64_t off, uint64_t end, uint64_t *a0, uint64_t *a1)
{
    if (off >= end)
        return 0;
    struct {
        struct fiemap map;
        struct fiemap_extent ext[64];
    } q;
    memset(&q, 0, sizeof(q));
    q.map.fm_start = off;
    q.map.fm_length = end - off;
    q.map.fm_extent_count = PH_ARRAY_LEN(q.ext);
    if (ioctl(fd, FS_IOC_FIEMAP, &q) != 0)
        return -1; /* tmpfs: SEEK_DATA calls reserved pages holes */
    if (q.map.fm_mapped_extents == 0)
        return 0;
    uint64_t s0 = PH_MAX((uint64_t)q.ext[0].fe_logical, off);
    uint64_t s1 = q.ext[0].fe_logical + q.ext[0].fe_length;
    for (unsigned i = 1; i < q.map.fm_mapped_extents && q.ext[i].fe_logical <= s1; i++)
        s1 = PH_MAX(s1, (uint64_t)(q.ext[i].fe_logical + q.ext[i].fe_length));
    if (s0 >= end)
        return 0;
    *a0 = s0;
    *a1 = PH_MIN(s1, end);
    return 1;
}

ssize_t ph_os_pread(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ph_err_sys("cannot read", "heap file");
        if (n == 0)
            break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

int ph_os_pwrite(int fd, const void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return ph_err_sys("cannot write", "heap file");
        done += (size_t)n;
    }
    return 0;
}

/* Describes who holds a flock on the file of `fd`, from /proc/locks
 * ("FLOCK ADVISORY WRITE pid maj:min:inode ..."): "read-write by process
 * 1234 (prog)" or "read-only by process 1234 (prog) and 2 others"; a
 * generic phrase when /proc says nothing. */
static void lock_holders(int fd, char *buf, size_t len)
{
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 ? fopen("/proc/locks", "re") : NULL;
    int found = 0, writer = 0;
    long first = 0;
    char line[256];
    while (f && fgets(line, sizeof(line), f)) {
        char cls[16], kind[16], mode[16];
        long pid;
        unsigned maj, min;
        unsigned long long ino;
        const char *rec = strchr(line, ':');
        if (!rec || sscanf(rec + 1, "%15s %15s %15s %ld %x:%x:%llu", cls, kind, mode, &pid, &maj, &min,
                           &ino) != 7)
            continue;
        if (strcmp(cls, "FLOCK") != 0 || ino != (unsigned long long)st.st_ino ||
            maj != major(st.st_dev) || min != minor(st.st_dev) || pid == (long)getpid())
            continue;
        if (!found++ || (!writer && strcmp(mode, "WRITE") == 0))
            first = pid;
        writer |= strcmp(mode, "WRITE") == 0;
    }
    if (f)
        fclose(f);
    if (!found) {
        snprintf(buf, len, "elsewhere");
        return;
    }
    char comm[64] = "", path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", first);
    FILE *c = fopen(path, "re");
    if (c) {
        if (fgets(comm, sizeof(comm), c))
            comm[strcspn(comm, "\n")] = 0;
        fclose(c);
    }
    int n = snprintf(buf, len, "%s by process %ld%s%s%s", writer ? "read-write" : "read-only", first,
                     *comm ? " (" : "", comm, *comm ? ")" : "");
    if (found > 1 && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " and %d other%s", found - 1, found > 2 ? "s" : "");
}

int ph_os_lock(int fd, int exclusive)
{
    while (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
        if (errno == EINTR)
            continue;
        if (errno == EWOULDBLOCK) {
            char who[128];
            lock_holders(fd, who, sizeof(who));
            return ph_err(PHEAP_EBUSY, "heap file is locked: it is open %s", who);
        }
        return ph_err_sys("cannot lock", "heap file");
    }
    return 0;
}

int ph_os_ofd_lock(int fd, uint64_t off, int type, int wait)
{
    struct flock l = {.l_type = type == PH_OFD_WRITE  ? F_WRLCK
                                : type == PH_OFD_READ ? F_RDLCK
                                                      : F_UNLCK,
                      .l_whence = SEEK_SET,
                      .l_start = (off_t)off,
                      .l_len = 1};
    while (fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) != 0) {
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EACCES)
            return ph_err(PHEAP_EBUSY, "heap file byte %llu is locked by another open",
                          (unsigned long long)off);
        return ph_err_sys("cannot lock a byte of", "heap file");
    }
    return 0;
}

int ph_os_ofd_held(int fd, uint64_t off, int type)
{
    struct flock l = {.l_type = type == PH_OFD_WRITE ? F_WRLCK : F_RDLCK,
                      .l_whence = SEEK_SET,
                      .l_start = (off_t)off,
                      .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &l) != 0)
        return ph_err_sys("cannot test a lock of", "heap file");
    return l.l_type != F_UNLCK;
}

uint32_t ph_os_pidns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : 0;
}

uint64_t ph_os_proc_start(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
     * count fields after its last ')'; the start time is field 22. */
    const char *p = strrchr(buf, ')');
    unsigned field = 2;
    while (p && *p && field < 22) {
        p++;
        if (*p == ' ')
            field++;
    }
    return p && field == 22 ? strtoull(p + 1, NULL, 10) : 0;
}

int ph_os_proc_exists(long pid)
{
    return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH);
}

void ph_os_proc_comm(long pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%ld/comm", pid);
    FILE *c = len ? fopen(path, "re") : NULL;
    if (len)
        buf[0] = 0;
    if (!c)
        return;
    if (fgets(buf, (int)len, c))
        buf[strcspn(buf, "\n")] = 0;
    fclose(c);
}

int ph_os_reserve(size_t len, void **addr)
{
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return ph_err_sys("cannot reserve address space for", "heap");
    *addr = p;
    return 0;
}

void ph_os_unreserve(void *addr, size_t len)
{
    if (addr)
        munmap(addr, len);
}

int ph_os_map_file(int fd, void *addr, size_t len, uint64_t off, int kind, int try_sync, int *is_sync)
{
    void *p = MAP_FAILED;
    if (is_sync)
        *is_sync = 0;
    if (kind != PH_MAP_PRIVATE && try_sync) {
        int prot = kind == PH_MAP_READONLY ? PROT_READ : PROT_READ | PROT_WRITE;
        /* MAP_SYNC is asked of one page mapped anywhere first: a MAP_FIXED
         * mmap that the file refuses (EOPNOTSUPP, not on DAX) has unmapped
         * the range already, and another thread's mmap could take it before
         * the plain mapping below goes there -- two heaps in one range. */
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        void *probe = mmap(NULL, page, prot, MAP_SHARED_VALIDATE | MAP_SYNC, fd, (off_t)off);
        if (probe != MAP_FAILED) {
            munmap(probe, page);
            p = mmap(addr, len, prot, MAP_SHARED_VALIDATE | MAP_SYNC | MAP_FIXED, fd, (off_t)off);
        }
        if (p != MAP_FAILED && is_sync)
            *is_sync = 1;
    }
    if (p == MAP_FAILED) {
        int prot = kind == PH_MAP_READONLY ? PROT_READ : PROT_READ | PROT_WRITE;
        int flags = (kind == PH_MAP_PRIVATE ? MAP_PRIVATE : MAP_SHARED) | MAP_FIXED;
        p = mmap(addr, len, prot, flags, fd, (off_t)off);
    }
    if (p == MAP_FAILED)
        return ph_err_sys("cannot map", "heap file");
    return 0;
}

int ph_os_map_anon(void *addr, size_t len)
{
    void *p = mmap(addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
        return ph_err_sys("cannot map memory for", "heap growth");
    return 0;
}

int ph_os_file_on_dax(int fd)
{
    long page = sysconf(_SC_PAGESIZE);
    void *p = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
    if (p == MAP_FAILED)
        return 0;
    munmap(p, (size_t)page);
    return 1;
}

int ph_os_file_in_memory(int fd)
{
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0)
        return 0;
    /* tmpfs and ramfs (magic numbers of linux/magic.h) */
    return fs.f_type == 0x01021994 || fs.f_type == (__typeof__(fs.f_type))0x858458f6;
}

int ph_os_memfd(uint64_t size, int *out)
{
    int m = memfd_create("pheap-working-copy", MFD_CLOEXEC);
    if (m < 0)
        return ph_err_sys("cannot create the working copy of", "heap file");
    if (ftruncate(m, (off_t)size) != 0) {
        int rc = ph_err_sys("cannot size the working copy of", "heap file");
        close(m);
        return rc;
    }
    *out = m;
    return 0;
}

int ph_os_copy_file(int fd, uint64_t size, char *dst)
{
    if (!size)
        return 0;
    char *src = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (src == MAP_FAILED)
        return ph_err_sys("cannot map for copying", "heap file");
    /* Data ranges only (SEEK_DATA; the whole file where it is not known),
     * and of those only the pages that hold something: a page of zeros
     * is left to read as a hole. */
    for (uint64_t at = 0; at < size;) {
        off_t d = lseek(fd, (off_t)at, SEEK_DATA);
        if (d < 0 && errno == ENXIO)
            break;
        uint64_t from = d < 0 ? at : (uint64_t)d;
        off_t e = d < 0 ? (off_t)size : lseek(fd, d, SEEK_HOLE);
        uint64_t to = PH_MIN(e < 0 ? size : (uint64_t)e, size);
        for (uint64_t p = PH_ALIGN_DOWN(from, 4096); p < to; p += 4096) {
            size_t len = (size_t)PH_MIN((uint64_t)4096, size - p);
            const uint64_t *w = (const uint64_t *)(src + p);
            size_t k = 0;
            while (k < len / 8 && w[k] == 0)
                k++;
            if (k < len / 8)
                memcpy(dst + p, src + p, len);
        }
        at = to > from ? to : size;
    }
    munmap(src, size);
    return 0;
}

uint64_t ph_os_page(void)
{
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? (uint64_t)p : 4096;
}

int ph_os_protect(void *addr, size_t len, int writable)
{
    if (len && mprotect(addr, len, writable ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
        return ph_err_sys("cannot change the protection of", "heap pages");
    return 0;
}

int ph_os_pkey_alloc(int *key)
{
    int k = pkey_alloc(0, PKEY_DISABLE_WRITE);
    if (k < 0)
        return ph_err(PHEAP_ENOTSUP, "protection keys are not available here (pkey_alloc: %s): "
                      "the CPU or the kernel has none, or none is free; use PHEAP_PROTECT=alias",
                      strerror(errno));
    *key = k;
    return 0;
}

int ph_os_pkey_tag(void *addr, size_t len, int key)
{
    if (len && pkey_mprotect(addr, len, PROT_READ | PROT_WRITE, key) != 0)
        return ph_err_sys("cannot give a protection key to", "heap pages");
    return 0;
}

#if defined(__x86_64__) || defined(__i386__)
/* RDPKRU and WRPKRU themselves (glibc's pkey_get and pkey_set are calls
 * around them); the "memory" clobbers keep the compiler from moving loads
 * and stores of the heap across a change of rights. */
static inline uint32_t rdpkru(void)
{
    uint32_t eax, edx;
    __asm__ volatile(".byte 0x0f, 0x01, 0xee" : "=a"(eax), "=d"(edx) : "c"(0) : "memory");
    return eax;
}

unsigned ph_os_pkey_get(int key)
{
    return (rdpkru() >> (2 * key)) & 3u;
}

void ph_os_pkey_set(int key, unsigned rights)
{
    uint32_t v = rdpkru(), w = (v & ~(3u << (2 * key))) | (rights & 3u) << (2 * key);
    if (w != v)
        __asm__ volatile(".byte 0x0f, 0x01, 0xef" : : "a"(w), "c"(0), "d"(0) : "memory");
}
#else
unsigned ph_os_pkey_get(int key)
{
    int r = pkey_get(key);
    return r < 0 ? 0 : (unsigned)r;
}

void ph_os_pkey_set(int key, unsigned rights)
{
    (void)pkey_set(key, rights);
}
#endif

void ph_os_populate(void *addr, size_t len)
{
#ifdef MADV_POPULATE_WRITE
    (void)madvise(addr, len, MADV_POPULATE_WRITE); /* older kernels: EINVAL, fine */
#else
    (void)addr;
    (void)len;
#endif
}

/* /proc/self/pagemap: one 64-bit entry per page; bit 63 present, bit 61
 * a file page or shared memory (a private copy on write is anonymous). */
#define PAGEMAP_PRESENT (1ull << 63)
#define PAGEMAP_FILE (1ull << 61)

int ph_os_file_pages(const void *addr, uint64_t n, uint64_t *file)
{
    memset(file, 0, (n + 63) / 64 * sizeof(*file));
    if (sysconf(_SC_PAGESIZE) != 4096)
        return ph_err(PHEAP_ENOTSUP, "page map: OS pages are not 4 KiB");
    int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ph_err(PHEAP_ENOTSUP, "page map: /proc/self/pagemap cannot be read");
    uint64_t e[512], first = (uintptr_t)addr / 4096;
    int rc = 0;
    for (uint64_t i = 0; rc == 0 && i < n; i += PH_ARRAY_LEN(e)) {
        uint64_t k = PH_MIN((uint64_t)PH_ARRAY_LEN(e), n - i);
        if (pread(fd, e, k * sizeof(*e), (off_t)((first + i) * sizeof(*e))) !=
            (ssize_t)(k * sizeof(*e))) {
            rc = ph_err(PHEAP_ENOTSUP, "page map: /proc/self/pagemap cannot be read");
            break;
        }
        for (uint64_t j = 0; j < k; j++)
            if ((e[j] & (PAGEMAP_PRESENT | PAGEMAP_FILE)) == (PAGEMAP_PRESENT | PAGEMAP_FILE))
                file[(i + j) / 64] |= 1ull << ((i + j) % 64);
    }
    close(fd);
    return rc;
}

void *ph_os_alloc_pages(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void ph_os_free_pages(void *addr, size_t len)
{
    if (addr)
        munmap(addr, len);
}

int ph_os_random(void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = getrandom((char *)buf + done, len - done, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return ph_err_sys("getrandom", "");
        done += (size_t)n;
    }
    return 0;
}

uint32_t ph_os_euid(void)
{
    return (uint32_t)geteuid();
}

uint64_t ph_os_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t ph_os_coarse_ns(void)
{
    struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ph_os_mutex_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
#ifdef PTHREAD_MUTEX_ADAPTIVE_NP
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

void ph_os_cpu_features(ph_cpu_features *out)
{
    memset(out, 0, sizeof(*out));
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d))
        out->clflush = (d >> 19) & 1;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        out->clflushopt = (b >> 23) & 1;
        out->clwb = (b >> 24) & 1;
        out->pku = (c >> 3) & 1;
    }
#endif
}

unsigned ph_os_current_cpu(void)
{
    int c = sched_getcpu();
    return c < 0 ? 0 : (unsigned)c;
}

unsigned ph_os_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_CONF);
    return n < 1 ? 1 : (unsigned)n;
}
