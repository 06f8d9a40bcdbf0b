/*
 * fuzz.h -- the heap-file fuzz target: seed heap images built in memory,
 * the input's patches applied to one of them, and the contract checked on
 * what pheap makes of it (docs/FUZZING.md).  Linked by the libFuzzer build
 * (build-fuzz) and by the replay driver that `make test` runs.
 */
#ifndef PH_FUZZ_H
#define PH_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* A heap image: the file's length and its 4 KiB pages that are not all
 * zero (the rest of the file is a hole). */
typedef struct ph_fuzz_image {
    const char *what;   /* how it was made, for messages */
    uint64_t len;       /* bytes of the file */
    uint64_t npages;    /* pages kept */
    uint64_t *page_no;  /* their numbers, ascending */
    uint8_t *pages;     /* their bytes, npages * 4096 */
} ph_fuzz_image;

/* The seed images, made once per process (deterministic: same bytes in
 * every run, uuid and times included).  Returns their count; 0 with a
 * message on stderr when they cannot be made. */
unsigned ph_fuzz_seeds(const ph_fuzz_image **out);

/* Directory for the files the target writes (/dev/shm when it exists). */
const char *ph_fuzz_dir(void);

/* The target itself (libFuzzer's entry point). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
