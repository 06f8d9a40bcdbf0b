/*
 * ckpt_io.h -- the file operations of a checkpoint and of its replay
 * (ckpt_io.c): writes, syncs, length changes, reservations and punches of
 * the heap file and its journal, through which the tests' page-cache crash
 * model (ph_ckpt_test_crash, ckpt.h) sees every one.
 */
#ifndef PH_PERSIST_CKPT_IO_H
#define PH_PERSIST_CKPT_IO_H

#include <stdint.h>

enum { PH_CKPT_F_HEAP, PH_CKPT_F_JOURNAL, PH_CKPT_F_COUNT };

/* The start of a checkpoint or replay of heap file dfd and journal jfd
 * (-1: none yet): what the files hold now is what the last run synced. */
void ph_ckpt_io_begin(int dfd, int jfd);
/* File f (PH_CKPT_F_*) open as fd: the operations, counted. */
int ph_ckpt_io_write(unsigned f, int fd, const void *buf, uint64_t len, uint64_t off);
int ph_ckpt_io_sync(unsigned f, int fd);
/* The heap file: its length up to `size` (never shorter), reservations
 * and punches. */
int ph_ckpt_io_resize(int fd, const char *path, uint64_t size);
int ph_ckpt_io_allocate(int fd, const char *path, uint64_t off, uint64_t len);
int ph_ckpt_io_punch(int fd, uint64_t off, uint64_t len);

#endif
