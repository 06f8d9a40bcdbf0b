/*
 * pipe_records.h -- the reading side of the kill -9 tests: a child writes
 * fixed-size records to a pipe as it goes (what it is about to do, what it
 * did); the parent reads them until a deadline or until the child is gone.
 */
#ifndef PH_TEST_PIPE_RECORDS_H
#define PH_TEST_PIPE_RECORDS_H

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double pipe_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reads records of `size` bytes (at most 64 KiB) from fd and hands each to
 * fn until `deadline` (pipe_now() time; 0: none) passes (returns 1), the
 * pipe ends (0) or fn fails (-1).  A record cut at a read stays buffered
 * for the next call; the buffer is emptied when the pipe ends or fn fails. */
static int pipe_read_records(int fd, double deadline, size_t size,
                             int (*fn)(void *arg, const void *rec), void *arg)
{
    static unsigned char buf[256 * 256];
    static size_t have;
    size_t cap = sizeof(buf) / size * size;
    for (;;) {
        double left = deadline - pipe_now();
        if (deadline > 0 && left <= 0)
            return 1;
        struct pollfd pfd = {fd, POLLIN, 0};
        int n = poll(&pfd, 1, deadline > 0 ? (int)(left * 1000) + 1 : -1);
        if (n <= 0)
            continue;
        ssize_t got = read(fd, buf + have, cap - have);
        if (got < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (got <= 0) {
            have = 0;
            return 0;
        }
        have += (size_t)got;
        size_t whole = have / size * size;
        for (size_t i = 0; i < whole; i += size)
            if (fn(arg, buf + i))
                return have = 0, -1;
        memmove(buf, buf + whole, have - whole);
        have -= whole;
    }
}

#endif
