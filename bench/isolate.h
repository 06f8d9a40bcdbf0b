/*
 * isolate.h -- one repetition in a fresh process.  Allocators keep memory
 * and warm caches from one run to the next inside a process; running each
 * repetition in a new process (the harness executing itself) makes every
 * repetition start from the same state and keeps memory readings honest.
 */
#ifndef BENCH_ISOLATE_H
#define BENCH_ISOLATE_H

#include "bench.h"

/* Runs /proc/self/exe with argv (NULL-terminated; the harness appends
 * "--child-fd N") and collects the metrics the child reports.  0, or -1 with
 * bench_error() set to the child's error. */
int isolate_run(char *const argv[], bench_metrics *out);

/* Child side: reports the repetition's outcome on fd and returns the exit
 * status for main. */
int isolate_report(int fd, int rc, const bench_metrics *m);

#endif /* BENCH_ISOLATE_H */
