/* safetensors.h: read (mmap) and write Hugging Face .safetensors files.
 *
 * Format: 8-byte little-endian header length N, N bytes of JSON {"name": {"dtype", "shape",
 * "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data section, offsets relative
 * to its start. The reader validates everything the header claims (offsets in range, sizes equal to
 * shape x dtype size, no overlaps) before any tensor is touched, so a lying or truncated file is an
 * error naming the file and tensor, never a crash. What it is not: a tensor library. */
#ifndef IFL_SAFETENSORS_H
#define IFL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "tensor.h"

#define IFL_ST_MAX_DIMS 8

typedef struct {
    char *name;
    char dtype_name[16]; /* as written in the header, e.g. "BF16" */
    int known_dtype;     /* 1 when dtype is F32/F16/BF16 (the ones the engine computes with) */
    ifl_dtype dtype;     /* valid when known_dtype */
    int n_dims;
    int64_t shape[IFL_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte offsets into the data section */
    const void *data;    /* points into the mapping */
} ifl_st_tensor;

typedef struct {
    char *path;
    void *map;
    size_t map_size;
    size_t data_offset; /* 8 + header length */
    int n_tensors;
    ifl_st_tensor *tensors;
} ifl_safetensors;

/* Maps and validates `path`. On failure *st is left empty (safe to close). */
int ifl_st_open(ifl_safetensors *st, const char *path, ifl_err *err);
void ifl_st_close(ifl_safetensors *st);
const ifl_st_tensor *ifl_st_find(const ifl_safetensors *st, const char *name);
/* Writes "[a, b, c]" into buf. */
void ifl_st_format_shape(char *buf, size_t cap, int n_dims, const int64_t *shape);

/* One tensor to write. */
typedef struct {
    const char *name;
    ifl_dtype dtype;
    int n_dims;
    int64_t shape[IFL_ST_MAX_DIMS];
    const void *data; /* numel x dtype size bytes */
} ifl_st_entry;

/* Writes the entries (sorted by name in the header, data in the same order) to `path` atomically
 * (a temporary file renamed into place), with __metadata__ {"format": "pt"}. */
int ifl_st_write(const char *path, int n, const ifl_st_entry *entries, ifl_err *err);

#endif
