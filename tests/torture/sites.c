/*
 * sites.c -- prints every flush site of the library, one per line, as
 * "file:line function kind", each once (a site in a static inline
 * function has a record in every file that uses it).  Built only with
 * PHEAP_FAULTS, for tests/torture/faults.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "persist/persist.h"

extern const ph_site __start_ph_persist_sites[], __stop_ph_persist_sites[];

static const char *base(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static int cmp(const void *a, const void *b)
{
    const ph_site *x = *(const ph_site *const *)a, *y = *(const ph_site *const *)b;
    int c = strcmp(base(x->file), base(y->file));
    return c ? c : (x->line > y->line) - (x->line < y->line);
}

int main(void)
{
    static const char *kinds[] = {"?", "flush", "fence", "flush+fence", "nt-store"};
    size_t n = (size_t)(__stop_ph_persist_sites - __start_ph_persist_sites);
    const ph_site **v = malloc(n * sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = &__start_ph_persist_sites[i];
    qsort(v, n, sizeof(*v), cmp);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || cmp(&v[i - 1], &v[i]) != 0)
            printf("%s:%u %s %s\n", base(v[i]->file), v[i]->line, v[i]->func,
                   kinds[v[i]->kind < 5 ? v[i]->kind : 0]);
    free(v);
    return 0;
}
