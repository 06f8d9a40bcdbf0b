/*
 * relocate.c -- the smallest complete pheap program: create a heap, store a
 * record and name it with a root, close; then reopen the heap while its old
 * address range is taken, so it maps elsewhere, and find the record again
 * through the root's offset.
 *
 * usage: relocate [HEAP_PATH]     (default /tmp/pheap-demo.heap)
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pheap.h>

typedef struct greeting {
    char text[56];
    uint64_t times_opened;
} greeting;

static int fail(const char *what)
{
    fprintf(stderr, "relocate: %s: %s\n", what, pheap_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/pheap-demo.heap";
    unlink(path);

    pheap_options o = {.size = 16u << 20, .flags = PHEAP_CREATE | PHEAP_EXCL};
    pheap *h;
    if (pheap_open(path, &o, &h))
        return fail("create");
    struct pheap_stats st;
    pheap_stats(h, &st);

    /* Allocate the record, fill it, persist it, then publish it with a root. */
    pheap_off off = pheap_alloc(h, sizeof(greeting));
    if (!off)
        return fail("alloc");
    greeting *g = pheap_direct(h, off);
    snprintf(g->text, sizeof(g->text), "hello from a persistent heap");
    g->times_opened = 1;
    pheap_persist(h, g, sizeof(*g));
    if (pheap_root_set(h, "greeting", off))
        return fail("root_set");
    void *first = g;
    printf("created %s, record at offset %llu, address %p\n", path, (unsigned long long)off, first);
    if (pheap_close(h))
        return fail("close");

    /* Take the old address range so the next mapping must land elsewhere. */
    char *old_base = (char *)first - off;
    void *blocker = mmap(old_base, st.size, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

    if (pheap_open(path, NULL, &h))
        return fail("reopen");
    g = pheap_direct(h, pheap_root_get(h, "greeting"));
    if (!g)
        return fail("root_get");
    g->times_opened++;
    pheap_persist(h, &g->times_opened, sizeof(g->times_opened));
    printf("reopened, record found through root 'greeting' at address %p%s\n", (void *)g,
           (void *)g != first ? " (a different mapping address)" : "");
    printf("  text: \"%s\", opened %llu times\n", g->text, (unsigned long long)g->times_opened);
    pheap_close(h);
    if (blocker != MAP_FAILED)
        munmap(blocker, st.size);
    return 0;
}
