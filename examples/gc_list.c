/*
 * gc_list.c -- a persistent list in a GC-mode heap.
 *
 *   gc_list PATH [COUNT] [--kill]
 *
 * Each run pushes COUNT nodes (default 3) onto the list and prints it.
 * With --kill the program leaves without pheap_close, as a crash would,
 * with one node allocated but not linked yet; the next run finds the heap
 * needing recovery and calls pheap_recover, which keeps every node the
 * list reaches and frees the rest.
 *
 * In GC mode pheap_alloc and pheap_free make nothing durable: the program
 * keeps its blocks reachable from a root and persists its own links.
 */
#include <pheap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct head {     /* the block the root "list" names */
    pheap_off first;
    uint64_t count;
} head;

typedef struct node {
    pheap_off next;
    uint64_t value;       /* any number: the filter knows it is no offset */
} node;

/* Filters: which words of a block are offsets.  They only read. */
static void node_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off, (void)usable;
    pheap_trace(tr, ((const node *)block)->next, node_filter);
}

static void head_filter(pheap_tracer *tr, pheap_off off, const void *block, size_t usable)
{
    (void)off, (void)usable;
    pheap_trace(tr, ((const head *)block)->first, node_filter);
}

static int fail(const char *what)
{
    fprintf(stderr, "gc_list: %s: %s\n", what, pheap_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gc_list PATH [COUNT] [--kill]\n");
        return 2;
    }
    const char *path = argv[1];
    int kill = argc > 2 && !strcmp(argv[argc - 1], "--kill");
    unsigned count = argc > 2 && argv[2][0] != '-' ? (unsigned)atoi(argv[2]) : 3;

    pheap_options o = {.size = 16 << 20, .flags = PHEAP_CREATE,
                       .consistency = PHEAP_CONSISTENCY_GC};
    pheap *h;
    if (pheap_open(path, &o, &h))
        return fail(path);

    /* Filters live in the process: register them after every open. */
    if (pheap_root_set_filter(h, "list", head_filter))
        return fail("filter");
    struct pheap_stats st;
    pheap_stats(h, &st);
    if (st.needs_recovery) {
        pheap_gc_report rep;
        if (pheap_recover_ex(h, NULL, &rep))
            return fail("recover");
        printf("recovered: %llu reachable blocks kept, the rest is free\n",
               (unsigned long long)rep.marked_blocks);
    }

    pheap_off hoff = pheap_root_get(h, "list");
    if (!hoff) {
        hoff = pheap_alloc(h, sizeof(head));
        if (!hoff)
            return fail("alloc");
        memset(pheap_direct(h, hoff), 0, sizeof(head));
        pheap_persist(h, pheap_direct(h, hoff), sizeof(head));
        if (pheap_root_set(h, "list", hoff)) /* durable on return */
            return fail("root");
    }
    head *hd = pheap_direct(h, hoff);

    for (unsigned i = 0; i < count; i++) {
        pheap_off n = pheap_alloc(h, sizeof(node));
        if (!n)
            return fail("alloc");
        node *p = pheap_direct(h, n);
        p->next = hd->first;
        p->value = hd->count * 1000003u;
        pheap_persist(h, p, sizeof(*p));   /* the node first, */
        hd->first = n;
        hd->count++;
        pheap_persist(h, hd, sizeof(*hd)); /* then the link to it */
    }

    printf("list:");
    for (pheap_off n = hd->first; n; n = ((node *)pheap_direct(h, n))->next)
        printf(" %llu", (unsigned long long)((node *)pheap_direct(h, n))->value / 1000003u);
    printf("\n");

    if (kill) {
        pheap_alloc(h, sizeof(node)); /* a node being made when the "crash" came */
        fflush(stdout);
        _exit(0);                     /* no pheap_close */
    }
    return pheap_close(h) ? fail("close") : 0;
}
