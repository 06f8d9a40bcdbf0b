/*
 * crash.c -- crash-point enumeration over the crash simulator.  The heap
 * file `base` is never modified: a simulated heap writes its file only at
 * pheap_close, and every run ends with pheap_sim_crash instead.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

void ph_crash_mark(ph_crash_ctx *c)
{
    if (c->nmarks < sizeof(c->marks) / sizeof(c->marks[0]))
        c->marks[c->nmarks++] = pheap_sim_fence_count(c->heap);
}

static int run(const char *base, uint64_t fence, const char *image, double evict, uint64_t seed,
               ph_crash_workload_fn workload, ph_crash_ctx *c)
{
    pheap_options o = {.flags = PHEAP_SIMULATE, .sim_crash_fence = fence,
                       .sim_crash_image = fence ? image : NULL,
                       .sim_evict_probability = evict, .sim_seed = seed};
    int rc = pheap_open(base, &o, &c->heap);
    if (rc) {
        ph_test_fail(__FILE__, __LINE__, "open %s: %s", base, pheap_errmsg());
        return rc;
    }
    c->nmarks = 0;
    workload(c);
    c->fences = pheap_sim_fence_count(c->heap);
    return pheap_sim_crash(c->heap, "/dev/null", 0, 0.0);
}

ph_crash_stats ph_crash_enumerate(const char *base, ph_crash_workload_fn workload,
                                  ph_crash_verify_fn verify, void *arg)
{
    static const struct {
        double evict;
        uint64_t seed;
    } variants[] = {{0.0, 0}, {0.5, 1}, {0.5, 2}, {0.5, 3}, {1.0, 0}};
    ph_crash_stats st = {0, 0};
    ph_crash_ctx *c = calloc(1, sizeof(*c));
    c->arg = arg;
    const char *image = ph_test_path("crash.image");
    if (run(base, 0, NULL, 0.0, 0, workload, c) != 0) {
        free(c);
        return st;
    }
    st.fences = c->fences;
    uint64_t total = st.fences;
    for (uint64_t k = 1; k <= total; k++) {
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++) {
            unlink(image);
            /* A fresh subset of evicted lines at every fence, reproducible. */
            uint64_t seed = variants[v].seed ? variants[v].seed + 16 * k : 0;
            if (run(base, k, image, variants[v].evict, seed, workload, c) != 0)
                goto out;
            if (access(image, F_OK) != 0)
                continue; /* fence k never came: nothing to check */
            unsigned done = 0;
            while (done < c->nmarks && c->marks[done] < k)
                done++;
            pheap *h;
            if (pheap_open(image, NULL, &h) != 0) {
                ph_test_fail(__FILE__, __LINE__, "fence %llu evict %.1f seed %llu: reopen: %s",
                             (unsigned long long)k, variants[v].evict,
                             (unsigned long long)seed, pheap_errmsg());
                goto out;
            }
            pheap_check_report r;
            if (pheap_check(h, &r) != 0)
                ph_test_fail(__FILE__, __LINE__, "fence %llu evict %.1f: pheap_check: %s",
                             (unsigned long long)k, variants[v].evict, r.first_error);
            int before = ph_test_failed;
            verify(h, done, c);
            if (ph_test_failed != before)
                fprintf(stderr, "  ... at fence %llu of %llu, evict %.1f seed %llu, %u ops done\n",
                        (unsigned long long)k, (unsigned long long)total, variants[v].evict,
                        (unsigned long long)seed, done);
            pheap_close(h);
            st.runs++;
            if (ph_test_failed > 20)
                goto out;
        }
    }
out:
    unlink(image);
    free(c);
    return st;
}
