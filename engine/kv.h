/* kv.h: accounting for the paged KV pool: which fixed-size blocks are free, and the block table
 * of each sequence.
 *
 * The storage itself belongs to the backend (CPU memory or GPU memory); this module only hands out
 * block ids, so admitting or freeing a sequence is O(blocks) with no copying. Not thread-safe: the
 * one thread that owns a backend (the batcher) owns its pool. */
#ifndef IFL_KV_H
#define IFL_KV_H

#include <stdint.h>

#include "error.h"

typedef struct {
    int32_t n_blocks;   /* total */
    int32_t block_size; /* tokens per block */
    int32_t *free_ids;  /* (n_blocks) stack of free ids */
    int32_t n_free;
} ifl_kv_pool;

int ifl_kv_pool_init(ifl_kv_pool *p, int32_t n_blocks, int32_t block_size, ifl_err *err);
void ifl_kv_pool_free(ifl_kv_pool *p);
static inline int32_t ifl_kv_pool_used(const ifl_kv_pool *p)
{
    return p->n_blocks - p->n_free;
}
/* Blocks needed to hold n_tokens positions. */
static inline int32_t ifl_kv_blocks_for(const ifl_kv_pool *p, int32_t n_tokens)
{
    return (n_tokens + p->block_size - 1) / p->block_size;
}

/* A sequence's block table. */
typedef struct {
    int32_t *blocks;
    int32_t n_blocks;
    int32_t cap;
} ifl_kv_seq;

/* Grows the sequence's table to cover n_tokens positions. All or nothing: returns -1 (pool
 * unchanged) when the pool has too few free blocks or memory runs out. */
int ifl_kv_seq_reserve(ifl_kv_seq *s, ifl_kv_pool *p, int32_t n_tokens);
/* Returns every block of the sequence to the pool and empties its table (keeps the allocation). */
void ifl_kv_seq_release(ifl_kv_seq *s, ifl_kv_pool *p);
void ifl_kv_seq_free(ifl_kv_seq *s, ifl_kv_pool *p);

#endif
