/* kv.h: accounting for the paged KV pool: which fixed-size blocks are free, the block table of
 * each sequence, and the prefix cache (automatic prefix caching, as vLLM calls it).
 *
 * The storage itself belongs to the backend (CPU memory or GPU memory); this module only hands out
 * block ids, so admitting or freeing a sequence is O(blocks) with no copying. Not thread-safe: the
 * one thread that owns a backend (the batcher) owns its pool.
 *
 * The prefix cache. A full block whose KV has been computed can be published: it is entered under
 * its tokens and its parent, the canonical block holding the prefix before it (none for the first
 * block of a sequence), so two entries are equal only when their whole prefixes are. Lookups
 * compare the tokens and the parent exactly; the 64-bit hash only picks the bucket. Blocks are
 * reference-counted; a published block nobody holds is kept on an LRU list rather than freed, and
 * counts as available: admission takes free blocks first and evicts the least recently released
 * cached block only when none is free. An evicted block's generation changes, so the entries
 * below it (their parent is gone) can never match again and age out of the list in turn.
 * A partial block is never published, and admission always leaves the last prompt token to be
 * computed (its logits are the first prediction). Everything in one pool was computed by one
 * backend with one model and weights format, so the key needs nothing else; the pool's salt
 * (ifl_kv_pool_set_prefix_cache) is folded into the hash all the same.
 *
 * Sequences share blocks by reference: a prefix hit, or a fork (several continuations of one
 * prompt). A block is written only by a sequence that alone holds it and that nobody published;
 * any other is copied first (ifl_kv_seq_cow), so a published block always holds what its entry
 * says. */
#ifndef IFL_KV_H
#define IFL_KV_H

#include <stdint.h>

#include "error.h"

typedef struct {
    int32_t n_blocks;   /* total */
    int32_t block_size; /* tokens per block */
    int32_t *free_ids;  /* (n_blocks) stack of free ids */
    int32_t n_free;
    /* the prefix cache */
    int cache_on;
    uint64_t salt;
    int32_t *ref;         /* (n_blocks) sequences holding the block */
    uint32_t *gen;        /* (n_blocks) bumped when a cached block is evicted */
    uint8_t *published;   /* (n_blocks) 1: in the table */
    int32_t *parent;      /* (n_blocks) published: the canonical block before it, or -1 */
    uint32_t *parent_gen; /* (n_blocks) published: the parent's generation then */
    uint64_t *hash;       /* (n_blocks) published: its bucket hash */
    int32_t *tokens;      /* (n_blocks * block_size) published: its tokens */
    int32_t *chain;       /* (n_blocks) next block in the same bucket, -1 */
    int32_t *bucket;      /* (n_buckets) first block of each bucket, -1 */
    uint32_t bucket_mask;
    int32_t *lru_prev, *lru_next; /* (n_blocks) the unused published blocks, oldest first */
    int32_t lru_head, lru_tail, n_lru;
    int32_t n_published;
    /* counters (monotonic) */
    uint64_t lookups;     /* admissions that looked for a prefix */
    uint64_t hit_tokens;  /* prompt tokens found cached */
    uint64_t hit_lookups; /* admissions that found at least one block */
    uint64_t evictions;   /* cached blocks evicted for room */
} ifl_kv_pool;

int ifl_kv_pool_init(ifl_kv_pool *p, int32_t n_blocks, int32_t block_size, ifl_err *err);
void ifl_kv_pool_free(ifl_kv_pool *p);
/* Turns the prefix cache on or off (off by default; a pool may switch only while nothing is
 * cached). salt is folded into every block's hash. */
void ifl_kv_pool_set_prefix_cache(ifl_kv_pool *p, int on, uint64_t salt);
/* Blocks held by sequences. */
static inline int32_t ifl_kv_pool_used(const ifl_kv_pool *p)
{
    return p->n_blocks - p->n_free - p->n_lru;
}
/* Blocks admission may take: the free ones and the cached ones nobody holds. */
static inline int32_t ifl_kv_pool_available(const ifl_kv_pool *p)
{
    return p->n_free + p->n_lru;
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
    int32_t n_published; /* leading blocks whose entry is known (taken from or put in the cache) */
    int32_t canon;       /* the canonical block of the prefix through n_published, -1 */
    uint32_t canon_gen;  /* its generation then */
    int32_t n_spare;     /* 1: `spare` is a block held for the copy on write of a shared block
                            (fork); 0: none (a zeroed sequence is empty and holds none) */
    int32_t spare;
} ifl_kv_seq;

/* Grows the sequence's table to cover n_tokens positions. All or nothing: returns -1 (pool
 * unchanged) when the pool has too few available blocks or memory runs out. */
int ifl_kv_seq_reserve(ifl_kv_seq *s, ifl_kv_pool *p, int32_t n_tokens);
/* Admission of an empty sequence: takes the longest cached prefix of prompt (whole blocks, at
 * most n_prompt - 1 tokens) and fresh blocks for the rest of n_tokens positions. All or nothing:
 * -1 (pool unchanged) when there is not room. *cached: the prompt tokens whose KV it already has.
 */
int ifl_kv_seq_admit(ifl_kv_seq *s, ifl_kv_pool *p, const int32_t *prompt, int32_t n_prompt,
                     int32_t n_tokens, int32_t *cached);
/* Publishes the sequence's full blocks among its first n_written positions (their KV computed;
 * tokens holds the sequence's tokens): a block whose prefix is already cached is left private.
 * After a fork, copy on write or truncation forgot the published prefix it walks again from the
 * first block with lookups, finding the blocks the sequence holds under their entries (a block
 * whose entry's parent has gone since is entered afresh). */
void ifl_kv_seq_publish(ifl_kv_seq *s, ifl_kv_pool *p, const int32_t *tokens, int32_t n_written);
/* Fork: dst (empty) shares src's blocks holding positions [0, n_written) by reference (a partly
 * filled last one included), and gets fresh blocks of its own for the rest of n_tokens positions
 * (n_tokens >= n_written). When the last shared block is partly filled, dst and src are each
 * given a spare block (src keeps one it already has) so that the copy on write of it can never
 * fail for want of a block. dst takes src's published prefix (n_published, canon) when it lies
 * within the whole blocks shared, else none. All or nothing: -1 (pool and both sequences
 * unchanged) when there is not room, or when dst is not empty, n_tokens < n_written or src's
 * table holds fewer than n_written positions. */
int ifl_kv_seq_fork(ifl_kv_seq *dst, ifl_kv_seq *src, ifl_kv_pool *p, int32_t n_written,
                    int32_t n_tokens);
/* Copy on write, before a step writes positions [pos, pos + n) of s: each block among them that
 * another sequence holds too, or that is published (its entry would no longer say what it holds),
 * is replaced in s's table by a private block (the spare, else a free one; the old one is counted
 * down, onto the LRU list when published and nobody holds it) and the pair is added at
 * src[*n_copy]/dst[*n_copy] (cap entries in all; *n_copy counts them, so one list can gather the
 * copies of a whole batch) for the backend to copy before the step (copy_blocks), in list order:
 * when no block is free, a block an earlier pair copies from (published, now held by nobody) can
 * be evicted and handed out as a later pair's destination. A block s alone holds and nobody
 * published is written in place. Once no block s may still write (from the one holding pos on)
 * is shared, its spare goes back to the pool. Replacing a block of the published prefix forgets
 * the prefix (ifl_kv_seq_publish walks it again). Returns 0, or -1 when a block is needed and
 * none is available, cap is reached (s unchanged from that block on) or the positions lie beyond
 * s's table. */
int ifl_kv_seq_cow(ifl_kv_seq *s, ifl_kv_pool *p, int32_t pos, int32_t n, int32_t *src,
                   int32_t *dst, int32_t cap, int32_t *n_copy);
/* Truncate: s keeps positions [0, n_tokens) of what it has written, and blocks to hold n_keep
 * positions in all (n_keep >= n_tokens; blocks past that go back to the pool, published ones to
 * the LRU list). When its published prefix reaches past the whole blocks below n_tokens it is
 * forgotten (ifl_kv_seq_publish walks it again), so a block cut into is never published again
 * under its old hash: written again later, it is copied first (ifl_kv_seq_cow) when it is
 * published or shared. Its spare goes back once no block from the one holding n_tokens on is
 * shared. Returns 0, or -1 when growing to n_keep fails (s then keeps the blocks it had, cut as
 * above) or when n_keep < n_tokens or n_tokens lies beyond s's table (nothing changed). */
int ifl_kv_seq_truncate(ifl_kv_seq *s, ifl_kv_pool *p, int32_t n_tokens, int32_t n_keep);
/* Returns every block of the sequence and its spare (published ones nobody else holds go on the
 * LRU list) and empties its table (keeps the allocation). */
void ifl_kv_seq_release(ifl_kv_seq *s, ifl_kv_pool *p);
void ifl_kv_seq_free(ifl_kv_seq *s, ifl_kv_pool *p);

#endif
