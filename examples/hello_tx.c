#include <pheap.h>
#include <stdio.h>

typedef struct node {
    pheap_off next;
    uint64_t value;
} node;

typedef struct stack {   /* the block the root names */
    pheap_off top;
    uint64_t count;      /* always the number of nodes */
} stack;

/* Pushes a node and counts it: two changes, one transaction.  After a
 * crash at any instant, both happened or neither did. */
static int push(pheap *h, stack *s, uint64_t value)
{
    int rc = pheap_tx_begin(h);
    if (rc)
        return rc;
    pheap_off off = pheap_tx_alloc(h, sizeof(node)); /* exists only if we commit */
    if (!off || pheap_tx_add(h, s, sizeof(*s))) {    /* snapshot what we change */
        rc = pheap_errno();
        pheap_tx_abort(h);                            /* back to where we began */
        return rc;
    }
    node *n = pheap_direct(h, off);
    *n = (node){s->top, value};  /* a block of the transaction: plain stores */
    s->top = off;                /* added by pheap_tx_add: plain stores too */
    s->count++;
    return pheap_tx_commit(h);   /* all of it durable on return */
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/tmp/hello-tx.heap";
    pheap_options o = {.size = 16 << 20, .flags = PHEAP_CREATE};
    pheap *h;
    if (pheap_open(path, &o, &h)) {
        fprintf(stderr, "%s\n", pheap_errmsg());
        return 1;
    }
    pheap_off root = pheap_root_get(h, "stack");
    if (!root) { /* first run: as in the list example */
        root = pheap_alloc_init(h, sizeof(stack), PHEAP_ALLOC_ZERO, NULL, NULL);
        if (!root || pheap_root_set(h, "stack", root)) {
            fprintf(stderr, "%s\n", pheap_errmsg());
            return 1;
        }
    }
    stack *s = pheap_direct(h, root);
    if (push(h, s, s->count * s->count)) {
        fprintf(stderr, "%s\n", pheap_errmsg());
        return 1;
    }
    uint64_t nodes = 0;
    for (pheap_off off = s->top; off; off = ((node *)pheap_direct(h, off))->next)
        nodes++;
    printf("count %llu, nodes %llu\n", (unsigned long long)s->count, (unsigned long long)nodes);
    return pheap_close(h);
}
