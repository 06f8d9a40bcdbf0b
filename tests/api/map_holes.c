/*
 * map_holes.c -- an open never leaves its reserved address range unmapped,
 * not even for an instant.  pheap reserves the range of each view and maps
 * the file into it with MAP_FIXED.  A MAP_FIXED mmap that the file refuses
 * (MAP_SYNC off DAX: EOPNOTSUPP) unmaps the range before it fails, and in a
 * program with threads another thread's mmap may take the hole: two heaps
 * in one range (seen as a SIGSEGV, or one heap written into another's
 * file, by threads opening and closing heaps at once).  Here mmap is
 * wrapped: after every MAP_FIXED mmap that fails, the range must still be
 * mapped.  tmpfs refuses MAP_SYNC before it unmaps anything; ext4 and xfs
 * take the flag and refuse it in their mmap, after: the heap lives in the
 * working directory (ctest's: the build tree), and the test says when that
 * file system cannot show the case.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

static int holes;

/* ThreadSanitizer's runtime maps its own memory through mmap before it can
 * run anything of ours: the wrapper is left out of that build. */
#if !defined(__SANITIZE_THREAD__)
/* Every mmap of this program, pheap's included (static linking): the
 * system call, then a look at what a failed MAP_FIXED left. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    if (r == -1 && (flags & MAP_FIXED)) {
        int e = errno;
        unsigned char vec;
        if (mincore(addr, (size_t)sysconf(_SC_PAGESIZE), &vec) != 0 && errno == ENOMEM)
            __atomic_add_fetch(&holes, 1, __ATOMIC_RELAXED); /* nothing mapped there now */
        errno = e;
        return MAP_FAILED;
    }
    return (void *)r;
}
#endif

TEST(opens_leave_no_hole)
{
#if defined(__SANITIZE_THREAD__)
    printf("  skipped under ThreadSanitizer (it cannot have mmap wrapped)\n");
    return;
#endif
    char path[4200], cwd[4096];
    REQUIRE(getcwd(cwd, sizeof(cwd)) != NULL);
    snprintf(path, sizeof(path), "%s/map-holes-%d.heap", cwd, (int)getpid());
    for (unsigned protect = 0; protect < 2; protect++) {
        pheap_options o = {.size = 4u << 20, .max_size = 64u << 20, .flags = PHEAP_CREATE,
                           .protect = protect ? PHEAP_PROTECT_OFF : PHEAP_PROTECT_AUTO};
        pheap *h = NULL;
        REQUIRE_OK(pheap_open(path, &o, &h));
        /* growth maps more of the file into the reserved range */
        for (unsigned i = 0; i < 64; i++)
            CHECK(pheap_alloc(h, 256u << 10) != 0);
        REQUIRE_OK(pheap_close(h));
        REQUIRE_OK(pheap_open(path, NULL, &h));
        REQUIRE_OK(pheap_close(h));
    }
    unlink(path);
    CHECK_EQ(holes, 0);
}
