/*
 * hello_list.c -- the README's five-minute example: a persistent linked
 * list.  Each run appends one node and prints the whole list, so the list
 * grows across runs, kill -9s and reboots.
 *
 * usage: hello_list [HEAP_PATH]     (default /tmp/hello.heap)
 */
#include <pheap.h>
#include <stdio.h>

typedef struct node {
    pheap_off next;   /* offsets, not pointers, live in the heap */
    uint64_t value;
} node;

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/hello.heap";
    pheap_options o = {.size = 16 << 20, .flags = PHEAP_CREATE};
    pheap *h;
    if (pheap_open(path, &o, &h)) {
        fprintf(stderr, "%s\n", pheap_errmsg());
        return 1;
    }
    /* The list's head lives in a small block found through a named root. */
    pheap_off head = pheap_root_get(h, "list");
    if (!head) {
        head = pheap_alloc(h, sizeof(pheap_off));
        *(pheap_off *)pheap_direct(h, head) = 0;
        pheap_persist(h, pheap_direct(h, head), sizeof(pheap_off));
        pheap_root_set(h, "list", head);
    }
    /* Append a node: find the last `next` word, then allocate straight
     * into it -- one failure-atomic step, so a crash never leaks a node. */
    pheap_off *link = pheap_direct(h, head);
    uint64_t count = 0;
    while (*link) {
        link = &((node *)pheap_direct(h, *link))->next;
        count++;
    }
    node fresh = {0, count * count};
    if (pheap_alloc_to(h, sizeof(node), link)) {
        fprintf(stderr, "%s\n", pheap_errmsg());
        return 1;
    }
    node *n = pheap_direct(h, *link);
    *n = fresh;
    pheap_persist(h, n, sizeof(*n));

    printf("list:");
    for (pheap_off off = *(pheap_off *)pheap_direct(h, head); off;
         off = ((node *)pheap_direct(h, off))->next)
        printf(" %llu", (unsigned long long)((node *)pheap_direct(h, off))->value);
    printf("\n");
    return pheap_close(h);
}
