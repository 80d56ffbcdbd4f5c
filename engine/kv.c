/* kv.c: free-block stack and per-sequence block tables (see kv.h). */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

int ifl_kv_pool_init(ifl_kv_pool *p, int32_t n_blocks, int32_t block_size, ifl_err *err)
{
    memset(p, 0, sizeof *p);
    if (n_blocks < 1 || block_size < 1)
        return ifl_err_set(err, "KV pool: %d blocks of %d tokens is not a pool", n_blocks,
                           block_size);
    p->free_ids = malloc((size_t)n_blocks * sizeof *p->free_ids);
    if (!p->free_ids)
        return ifl_err_set(err, "KV pool: out of memory");
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* Lowest ids on top of the stack, handed out first. */
    for (int32_t i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    return 0;
}

void ifl_kv_pool_free(ifl_kv_pool *p)
{
    free(p->free_ids);
    memset(p, 0, sizeof *p);
}

int ifl_kv_seq_reserve(ifl_kv_seq *s, ifl_kv_pool *p, int32_t n_tokens)
{
    int32_t need = ifl_kv_blocks_for(p, n_tokens);
    if (need <= s->n_blocks)
        return 0;
    int32_t add = need - s->n_blocks;
    if (add > p->n_free)
        return -1;
    if (need > s->cap) {
        int32_t cap = s->cap ? s->cap : 4;
        while (cap < need)
            cap *= 2;
        int32_t *b = realloc(s->blocks, (size_t)cap * sizeof *b);
        if (!b)
            return -1;
        s->blocks = b;
        s->cap = cap;
    }
    for (int32_t i = 0; i < add; i++)
        s->blocks[s->n_blocks++] = p->free_ids[--p->n_free];
    return 0;
}

void ifl_kv_seq_release(ifl_kv_seq *s, ifl_kv_pool *p)
{
    for (int32_t i = s->n_blocks - 1; i >= 0; i--)
        p->free_ids[p->n_free++] = s->blocks[i];
    s->n_blocks = 0;
}

void ifl_kv_seq_free(ifl_kv_seq *s, ifl_kv_pool *p)
{
    ifl_kv_seq_release(s, p);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
