/*
 * output.h -- how results leave the harness: a readable line per result on
 * stdout and one JSON object per line in the --json file.
 */
#ifndef BENCH_OUTPUT_H
#define BENCH_OUTPUT_H

#include "bench.h"

typedef struct bench_result {
    const bench_workload *w;
    const bench_allocator *a;
    const bench_params *p;
    unsigned threads;          /* threads the workload ran */
    unsigned reps;             /* repetitions that succeeded */
    const bench_metrics *rep;  /* reps entries */
    const char *error;         /* NULL, or why the run failed */
} bench_result;

/* "threadtest: ops=2000000 size=64 batch=1000" on stdout. */
void out_params(const bench_workload *w, const bench_params *p);
void out_text(const bench_result *r);
/* Appends one line; the line is flushed so a crash loses nothing before it. */
void out_json(FILE *f, const bench_result *r);

#endif /* BENCH_OUTPUT_H */
