/*
 * list.c -- the persistent linked list of the PMA paper (figure 4): nodes
 * are allocated with pheap_alloc_to_init straight into the `next` field of
 * the node before, filled before they are linked; the list is named by a
 * root, and a later run finds it and walks it.  Run it twice and the
 * second run appends to the first's list.
 *
 * usage: list [HEAP_PATH] [NODES]     (default /tmp/pheap-demo-data.heap, 5)
 */
#include <stdio.h>
#include <stdlib.h>

#include <pheap.h>

typedef struct node {
    pheap_off next;   /* the next node, 0 at the tail */
    uint64_t value;
} node;

/* The list's anchor, itself a block in the heap (the target of the root).
 * `length` counts the nodes a walk follows: a node linked by an append that
 * a crash cut before `length` grew is whole (it was filled before it was
 * linked) and the next append counts it instead of making another. */
typedef struct list {
    pheap_off head;
    uint64_t length;
} list;

static int fail(const char *what)
{
    fprintf(stderr, "list: %s: %s\n", what, pheap_errmsg());
    return 1;
}

/* Fills a new node (value *arg, no next) before it is linked. */
static int init_node(pheap *h, void *block, size_t usable, void *arg)
{
    (void)h, (void)usable;
    *(node *)block = (node){0, *(const uint64_t *)arg};
    return 0;
}

/* Appends `n` nodes with values first, first + 1, ... */
static int append(pheap *h, list *l, uint64_t n)
{
    pheap_off *link = &l->head;
    for (uint64_t i = 0; i < l->length; i++) /* find the tail's next field */
        link = &((node *)pheap_direct(h, *link))->next;
    for (uint64_t i = 0; i < n; i++) {
        /* A node left by a crash after its link is whole, with this value. */
        if (*link == 0 && pheap_alloc_to_init(h, sizeof(node), link, 0, init_node, &l->length))
            return fail("pheap_alloc_to_init");
        node *nd = pheap_direct(h, *link);
        l->length++;                      /* commit: one aligned 8-byte store */
        pheap_persist(h, &l->length, sizeof(l->length));
        link = &nd->next;
    }
    return 0;
}

static void walk(pheap *h, const list *l)
{
    pheap_off off = l->head;
    printf("  head");
    for (uint64_t i = 0; i < l->length; i++) {
        const node *nd = pheap_direct(h, off);
        if (i < 12 || i + 2 > l->length)
            printf(" -> [%llu @%llu]", (unsigned long long)nd->value, (unsigned long long)off);
        else if (i == 12)
            printf(" -> ...");
        off = nd->next;
    }
    printf("\n");
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/pheap-demo-data.heap";
    uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 5;

    pheap_options o = {.size = 16u << 20, .max_size = 256u << 20, .flags = PHEAP_CREATE};
    pheap *h;
    if (pheap_open(path, &o, &h))
        return fail("open");
    pheap_off loff = pheap_root_get(h, "list");
    if (!loff) { /* first run: make the anchor, zeroed, then name it */
        loff = pheap_alloc_init(h, sizeof(list), PHEAP_ALLOC_ZERO, NULL, NULL);
        if (!loff)
            return fail("pheap_alloc_init");
        if (pheap_root_set(h, "list", loff))
            return fail("pheap_root_set");
        printf("new list in %s (root 'list' -> offset %llu)\n", path, (unsigned long long)loff);
    } else {
        printf("found list in %s with %llu nodes\n", path,
               (unsigned long long)((list *)pheap_direct(h, loff))->length);
    }
    if (append(h, pheap_direct(h, loff), n))
        return 1;
    printf("appended %llu nodes; closing the heap\n", (unsigned long long)n);
    if (pheap_close(h))
        return fail("close");

    /* A fresh open, as a later program would do: only the root leads back. */
    if (pheap_open(path, NULL, &h))
        return fail("reopen");
    const list *l = pheap_direct(h, pheap_root_get(h, "list"));
    if (!l)
        return fail("root 'list'");
    printf("reopened: the list has %llu nodes (value @offset):\n", (unsigned long long)l->length);
    walk(h, l);
    pheap_close(h);
    return 0;
}
