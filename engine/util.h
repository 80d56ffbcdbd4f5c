/* util.h: small helpers shared by the engine and the CLI: whole-file I/O, paths, clocks. */
#ifndef IFL_UTIL_H
#define IFL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Reads a whole file into a NUL-terminated heap buffer. Fails past max_bytes. */
int ifl_read_file(const char *path, char **out, size_t *len, size_t max_bytes, ifl_err *err);
/* Writes a file atomically (temporary + rename). */
int ifl_write_file(const char *path, const void *data, size_t len, ifl_err *err);
/* Copies a file (atomically at the destination). */
int ifl_copy_file(const char *src, const char *dst, ifl_err *err);
/* dir + "/" + name into buf; -1 if it does not fit. */
int ifl_path_join(char *buf, size_t cap, const char *dir, const char *name);
int ifl_file_exists(const char *path);
/* Creates a directory (and its parents); ok if it exists. */
int ifl_mkdir_p(const char *path, ifl_err *err);

/* Monotonic time in seconds / microseconds. */
double ifl_now_s(void);
uint64_t ifl_now_us(void);

/* Number of online CPU cores (>= 1). */
int ifl_n_cores(void);

#endif
