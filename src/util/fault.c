/*
 * fault.c -- the switches of a PHEAP_FAULTS build (see fault.h): which
 * flush site is dropped and which planted bug is on, read once from the
 * environment.
 */
#include "util/fault.h"

#if PH_FAULTS
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "persist/persist.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char drop_file[256];
static unsigned drop_line;
static const char *plant;

static void read_env(void)
{
    const char *d = getenv("PHEAP_DROP_SITE");
    const char *colon = d ? strrchr(d, ':') : NULL;
    if (colon && (size_t)(colon - d) < sizeof(drop_file)) {
        memcpy(drop_file, d, (size_t)(colon - d));
        drop_line = (unsigned)strtoul(colon + 1, NULL, 10);
    }
    plant = getenv("PHEAP_PLANT");
}

/* `file` ends with `want` at a path boundary. */
static int same_file(const char *file, const char *want)
{
    size_t a = strlen(file), b = strlen(want);
    return a >= b && strcmp(file + a - b, want) == 0 && (a == b || file[a - b - 1] == '/');
}

int ph_fault_dropped(const struct ph_site *site)
{
    pthread_once(&once, read_env);
    return drop_line && site->line == drop_line && same_file(site->file, drop_file);
}

int ph_plant(const char *name)
{
    pthread_once(&once, read_env);
    return plant && strcmp(plant, name) == 0;
}
#else
typedef int ph_fault_unused; /* ISO C: a translation unit is not empty */
#endif
