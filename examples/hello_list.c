#include <pheap.h>
#include <stdio.h>

typedef struct node {
    pheap_off next;   /* offsets, not pointers, live in the heap */
    uint64_t value;
} node;

/* Fills a new node before anyone can reach it: pheap runs this inside the
 * allocation, then links the node in the same failure-atomic step. */
static int init_node(pheap *h, void *block, size_t usable, void *arg)
{
    node *n = block;
    (void)h, (void)usable;
    n->next = 0;
    n->value = *(const uint64_t *)arg;
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/hello.heap";
    pheap_options o = {.size = 16 << 20, .flags = PHEAP_CREATE};
    pheap *h;
    if (pheap_open(path, &o, &h)) {
        fprintf(stderr, "%s\n", pheap_errmsg());
        return 1;
    }
    /* The list's head lives in a small block found through a named root.
     * The first run allocates it zeroed, then names it: a kill between the
     * two leaves that one small block allocated and unnamed (pheap has no
     * call yet that allocates and names in one step); the next run makes
     * another. */
    pheap_off head = pheap_root_get(h, "list");
    if (!head) {
        head = pheap_alloc_init(h, sizeof(pheap_off), PHEAP_ALLOC_ZERO, NULL, NULL);
        if (!head || pheap_root_set(h, "list", head)) {
            fprintf(stderr, "%s\n", pheap_errmsg());
            return 1;
        }
    }
    /* Append a node: find the last `next` word, then allocate straight
     * into it.  The node is filled before it is linked, so after a kill at
     * any instant the list holds whole nodes only, and none is leaked. */
    pheap_off *link = pheap_direct(h, head);
    uint64_t count = 0;
    while (*link) {
        link = &((node *)pheap_direct(h, *link))->next;
        count++;
    }
    uint64_t value = count * count;
    if (pheap_alloc_to_init(h, sizeof(node), link, 0, init_node, &value)) {
        fprintf(stderr, "%s\n", pheap_errmsg());
        return 1;
    }

    printf("list:");
    for (pheap_off off = *(pheap_off *)pheap_direct(h, head); off;
         off = ((node *)pheap_direct(h, off))->next)
        printf(" %llu", (unsigned long long)((node *)pheap_direct(h, off))->value);
    printf("\n");
    return pheap_close(h);
}
