/*
 * fault.h -- deliberate defects for testing the tests.  In a build with
 * PHEAP_FAULTS=ON (never a release build), PHEAP_DROP_SITE=file:line makes
 * the flush site at that line do nothing, and PHEAP_PLANT=name switches on
 * one planted bug (the list is in docs/CRASH_SIMULATOR.md); every crash
 * test must then fail.  In every other build both are constant 0 and
 * compile away.
 */
#ifndef PH_UTIL_FAULT_H
#define PH_UTIL_FAULT_H

#ifndef PH_FAULTS
#define PH_FAULTS 0
#endif

#if PH_FAULTS
struct ph_site;
/* 1 when `site` is the one PHEAP_DROP_SITE names (file name and line). */
int ph_fault_dropped(const struct ph_site *site);
/* 1 when PHEAP_PLANT names planted bug `name`. */
int ph_plant(const char *name);
#else
#define ph_fault_dropped(site) ((void)(site), 0)
#define ph_plant(name) 0
#endif

#endif
