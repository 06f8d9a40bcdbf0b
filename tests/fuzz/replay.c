/*
 * replay.c -- runs the fuzz target without libFuzzer, for `make test`:
 *   fuzz_replay regress DIR         every input under DIR, in name order
 *   fuzz_replay mutate N SECONDS S  N inputs made from seed S (structured:
 *                                   a seed image, patch records, operation
 *                                   bytes), stopping early after SECONDS
 *   fuzz_replay FILE...             the given inputs (a crash to look at)
 * A broken contract aborts inside the target with its message.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuzz.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        return 1;
    }
    static uint8_t buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    printf("replay %s (%zu bytes)\n", path, n);
    fflush(stdout);
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int regress(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", dir);
        return 1;
    }
    char *names[4096];
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096)
        if (e->d_name[0] != '.' && strcmp(e->d_name, "README.md") != 0)
            names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, n, sizeof(names[0]), by_name);
    int rc = 0;
    for (unsigned i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        rc |= run_file(path);
        free(names[i]);
    }
    printf("%u regression inputs replayed\n", n);
    return rc;
}

/* The mutated input being run, written out when the target aborts. */
static uint8_t current[512];
static size_t current_len;

static void save_current(int sig)
{
    FILE *f = fopen("fuzz-mutate-crash.bin", "wb");
    if (f) {
        fwrite(current, 1, current_len, f);
        fclose(f);
        fprintf(stderr, "fuzz_replay: the input is in fuzz-mutate-crash.bin\n");
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One structured input: seed, flags, 0..6 patch records, end, operations. */
static size_t make_input(uint8_t *buf, uint64_t *s, unsigned nseeds)
{
    size_t n = 0;
    buf[n++] = (uint8_t)(next(s) % nseeds);
    buf[n++] = (uint8_t)(next(s) % 4 == 0 ? next(s) & 7 : 1);
    unsigned patches = (unsigned)(next(s) % 7);
    for (unsigned i = 0; i < patches; i++) {
        unsigned kind;
        do
            kind = (unsigned)(next(s) % 16);
        while (kind == 13); /* the end record comes last */
        unsigned mode = (unsigned)(next(s) % 16);
        buf[n++] = (uint8_t)(mode << 4 | kind);
        unsigned payload = kind == 12 ? 3 : 1 + 3 + (mode < 8 ? mode + 1 : mode < 14 ? 1 : mode == 14 ? 0 : 4);
        for (unsigned j = 0; j < payload; j++)
            buf[n++] = (uint8_t)next(s);
    }
    buf[n++] = 13;
    unsigned ops = (unsigned)(next(s) % 40);
    for (unsigned i = 0; i < ops; i++)
        buf[n++] = (uint8_t)next(s);
    return n;
}

static int mutate(unsigned count, double seconds, uint64_t seed)
{
    const ph_fuzz_image *seeds;
    unsigned nseeds = ph_fuzz_seeds(&seeds);
    if (!nseeds)
        return 1;
    for (unsigned i = 0; i < nseeds; i++)
        printf("seed %u: %s (%llu bytes, %llu pages kept)\n", i, seeds[i].what,
               (unsigned long long)seeds[i].len, (unsigned long long)seeds[i].npages);
    signal(SIGABRT, save_current);
    signal(SIGSEGV, save_current);
    signal(SIGBUS, save_current);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint8_t buf[512];
    unsigned done = 0;
    for (; done < count; done++) {
        uint64_t s = seed + done;
        size_t n = make_input(buf, &s, nseeds);
        memcpy(current, buf, n);
        current_len = n;
        LLVMFuzzerTestOneInput(buf, n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if ((double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 > seconds) {
            done++;
            break;
        }
    }
    printf("%u mutated inputs from seed %llu: contract held\n", done, (unsigned long long)seed);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "regress") == 0)
        return regress(argv[2]);
    if (argc == 5 && strcmp(argv[1], "mutate") == 0)
        return mutate((unsigned)strtoul(argv[2], NULL, 0), strtod(argv[3], NULL),
                      strtoull(argv[4], NULL, 0));
    if (argc >= 2 && strcmp(argv[1], "regress") != 0 && strcmp(argv[1], "mutate") != 0) {
        int rc = 0;
        for (int i = 1; i < argc; i++)
            rc |= run_file(argv[i]);
        return rc;
    }
    fprintf(stderr, "usage: fuzz_replay regress DIR | mutate COUNT SECONDS SEED | FILE...\n");
    return 2;
}
