/*
 * error.h -- the thread-local error slot behind pheap_errno() and
 * pheap_errmsg().  Every failing internal path records its code and a
 * message here once, at the place that knows the detail.
 */
#ifndef PH_ERROR_H
#define PH_ERROR_H

/* Records `err` (a negative PHEAP_E* code) with a printf-style message and
 * returns `err`, so that callers can write `return ph_err(...)`. */
int ph_err(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Maps an errno value from a failed system call to a PHEAP_E* code. */
int ph_err_from_errno(int e);

/* Records a failed system call: ph_err(ph_err_from_errno(errno), "what: strerror"). */
int ph_err_sys(const char *what, const char *path);

#endif
