/*
 * output.c -- result lines for people (stdout) and for the report generator
 * (JSON lines).  Every metric is summarised over the repetitions as median,
 * min and max; the raw values are kept in the JSON.
 */
#include "output.h"

#include <stdlib.h>
#include <string.h>

typedef struct spread {
    double median, min, max;
} spread;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int summarise(const bench_result *r, const char *name, spread *s, double *vals)
{
    unsigned n = 0;
    for (unsigned i = 0; i < r->reps; i++) {
        if (bench_metric_get(&r->rep[i], name, &vals[n]) == 0)
            n++;
    }
    if (n == 0)
        return -1;
    double *sorted = malloc(n * sizeof *sorted);
    if (!sorted)
        return -1;
    memcpy(sorted, vals, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_double);
    s->min = sorted[0];
    s->max = sorted[n - 1];
    s->median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    free(sorted);
    return (int)n;
}

static double median_of(const bench_result *r, const char *name)
{
    double vals[64];
    spread s;
    if (r->reps > 64 || summarise(r, name, &s, vals) < 0)
        return -1;
    return s.median;
}

static void print_si(double v, const char *unit)
{
    if (v >= 1e9)
        printf("%7.2f G%s", v / 1e9, unit);
    else if (v >= 1e6)
        printf("%7.2f M%s", v / 1e6, unit);
    else if (v >= 1e3)
        printf("%7.2f k%s", v / 1e3, unit);
    else
        printf("%7.2f %s", v, unit);
}

void out_params(const bench_workload *w, const bench_params *p)
{
    printf("== %s: %s\n   ", w->name, w->what);
    if (w->uses & BENCH_P_OPS)
        printf(" ops=%llu", (unsigned long long)p->ops);
    if (w->uses & BENCH_P_SIZE) {
        if (p->size_min == p->size_max)
            printf(" size=%zu", p->size_min);
        else
            printf(" size=%zu..%zu", p->size_min, p->size_max);
    }
    if (w->uses & BENCH_P_BATCH)
        printf(" batch=%llu", (unsigned long long)p->batch);
    if (w->uses & BENCH_P_ROUNDS)
        printf(" rounds=%llu", (unsigned long long)p->rounds);
    if (w->uses & BENCH_P_LIVE)
        printf(" live=%llu free_pct=%u", (unsigned long long)p->live_bytes, p->free_pct);
    printf(" heap=%llu seed=%llu\n", (unsigned long long)p->heap_size, (unsigned long long)p->seed);
}

void out_text(const bench_result *r)
{
    double vals[64], v;
    spread s;

    printf("  %-12s %-9s t=%-2u ", r->w->name, r->a->name, r->threads);
    if (r->error) {
        printf("FAILED: %s\n", r->error);
        fflush(stdout);
        return;
    }
    if (r->reps <= 64 && summarise(r, "ops_per_s", &s, vals) > 0) {
        print_si(s.median, "ops/s");
        printf("  [%.3g .. %.3g]", s.min, s.max);
    }
    if ((v = median_of(r, "flushes_per_op")) >= 0)
        printf("  fl/op %.2f fe/op %.2f rfl/op %.2f", v, median_of(r, "fences_per_op"),
               median_of(r, "reflushes_per_op"));
    if ((v = median_of(r, "alloc_p50_ns")) >= 0)
        printf("  alloc p50/p99/p99.9/max %.0f/%.0f/%.0f/%.0f ns  free %.0f/%.0f/%.0f/%.0f ns",
               v, median_of(r, "alloc_p99_ns"), median_of(r, "alloc_p999_ns"),
               median_of(r, "alloc_max_ns"), median_of(r, "free_p50_ns"),
               median_of(r, "free_p99_ns"), median_of(r, "free_p999_ns"),
               median_of(r, "free_max_ns"));
    if ((v = median_of(r, "live_bytes")) >= 0) {
        printf("  live %.1f MiB", v / 1048576);
        if ((v = median_of(r, "heap_bytes")) >= 0)
            printf(" heap %.1f MiB", v / 1048576);
        if ((v = median_of(r, "file_bytes")) >= 0)
            printf(" file %.1f MiB", v / 1048576);
        if ((v = median_of(r, "rss_bytes")) >= 0)
            printf(" rss+ %.1f MiB", v / 1048576);
        if ((v = median_of(r, "heap_per_live_max")) >= 0)
            printf("  worst phase: heap %.2fx", v);
        if ((v = median_of(r, "file_per_live_max")) >= 0)
            printf(" file %.2fx", v);
    }
    if ((v = median_of(r, "crash_open_ns")) >= 0)
        printf("blocks %.0f  after crash: open %.3f ms, first alloc %.3f ms;"
               "  after clean close: open %.3f ms, first alloc %.3f ms",
               median_of(r, "live_blocks"), v / 1e6, median_of(r, "crash_first_alloc_ns") / 1e6,
               median_of(r, "clean_open_ns") / 1e6, median_of(r, "clean_first_alloc_ns") / 1e6);
    if ((v = median_of(r, "recover_ns")) >= 0)
        printf("reachable %.0f garbage %.0f  after crash: open %.3f ms, recover %.3f ms"
               " (%.2f M blocks/s, %.2f M/s per core);  after clean close: open %.3f ms",
               median_of(r, "reachable_blocks"), median_of(r, "garbage_blocks"),
               median_of(r, "gc_open_ns") / 1e6, v / 1e6, median_of(r, "blocks_per_s") / 1e6,
               median_of(r, "blocks_per_s_core") / 1e6, median_of(r, "clean_open_ns") / 1e6);
    printf("\n");
    fflush(stdout);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void json_params(FILE *f, const bench_params *p)
{
    fprintf(f, "\"params\":{\"ops\":%llu,\"size_min\":%zu,\"size_max\":%zu,\"batch\":%llu,"
               "\"rounds\":%llu,\"live_bytes\":%llu,\"free_pct\":%u,\"seed\":%llu,\"heap_size\":%llu}",
            (unsigned long long)p->ops, p->size_min, p->size_max, (unsigned long long)p->batch,
            (unsigned long long)p->rounds, (unsigned long long)p->live_bytes, p->free_pct,
            (unsigned long long)p->seed, (unsigned long long)p->heap_size);
}

void out_json(FILE *f, const bench_result *r)
{
    if (!f)
        return;
    fprintf(f, "{\"workload\":");
    json_string(f, r->w->name);
    fprintf(f, ",\"alloc\":");
    json_string(f, r->a->name);
    fprintf(f, ",\"persistent\":%u,\"threads\":%u,\"reps\":%u,", r->a->persistent, r->threads,
            r->reps);
    json_params(f, r->p);
    if (r->error) {
        fprintf(f, ",\"error\":");
        json_string(f, r->error);
    }
    fprintf(f, ",\"metrics\":{");
    if (r->reps > 0 && r->reps <= 64) {
        const bench_metrics *first = &r->rep[0];
        for (unsigned m = 0; m < first->n; m++) {
            double vals[64];
            spread s;
            int n = summarise(r, first->name[m], &s, vals);
            if (n <= 0)
                continue;
            fprintf(f, "%s\"%s\":{\"median\":%.6g,\"min\":%.6g,\"max\":%.6g,\"values\":[",
                    m ? "," : "", first->name[m], s.median, s.min, s.max);
            for (int i = 0; i < n; i++)
                fprintf(f, "%s%.6g", i ? "," : "", vals[i]);
            fprintf(f, "]}");
        }
    }
    fprintf(f, "}}\n");
    fflush(f);
}
