/* kv.c: free-block stack, per-sequence block tables (fork, copy on write, truncation) and the
 * prefix cache (see kv.h). */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

int ifl_kv_pool_init(ifl_kv_pool *p, int32_t n_blocks, int32_t block_size, ifl_err *err)
{
    memset(p, 0, sizeof *p);
    if (n_blocks < 1 || block_size < 1)
        return ifl_err_set(err, "KV pool: %d blocks of %d tokens is not a pool", n_blocks,
                           block_size);
    uint32_t nb = 1;
    while (nb < (uint32_t)n_blocks * 2u)
        nb <<= 1;
    size_t n = (size_t)n_blocks;
    p->free_ids = malloc(n * sizeof *p->free_ids);
    p->ref = calloc(n, sizeof *p->ref);
    p->gen = calloc(n, sizeof *p->gen);
    p->published = calloc(n, sizeof *p->published);
    p->parent = malloc(n * sizeof *p->parent);
    p->parent_gen = malloc(n * sizeof *p->parent_gen);
    p->hash = malloc(n * sizeof *p->hash);
    p->tokens = malloc(n * (size_t)block_size * sizeof *p->tokens);
    p->chain = malloc(n * sizeof *p->chain);
    p->bucket = malloc((size_t)nb * sizeof *p->bucket);
    p->lru_prev = malloc(n * sizeof *p->lru_prev);
    p->lru_next = malloc(n * sizeof *p->lru_next);
    if (!p->free_ids || !p->ref || !p->gen || !p->published || !p->parent || !p->parent_gen ||
        !p->hash || !p->tokens || !p->chain || !p->bucket || !p->lru_prev || !p->lru_next) {
        ifl_kv_pool_free(p);
        return ifl_err_set(err, "KV pool: out of memory for %d blocks", n_blocks);
    }
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    /* Lowest ids on top of the stack, handed out first. */
    for (int32_t i = 0; i < n_blocks; i++)
        p->free_ids[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    memset(p->bucket, 0xff, (size_t)nb * sizeof *p->bucket);
    p->bucket_mask = nb - 1;
    p->lru_head = p->lru_tail = -1;
    return 0;
}

void ifl_kv_pool_free(ifl_kv_pool *p)
{
    free(p->free_ids);
    free(p->ref);
    free(p->gen);
    free(p->published);
    free(p->parent);
    free(p->parent_gen);
    free(p->hash);
    free(p->tokens);
    free(p->chain);
    free(p->bucket);
    free(p->lru_prev);
    free(p->lru_next);
    memset(p, 0, sizeof *p);
}

void ifl_kv_pool_set_prefix_cache(ifl_kv_pool *p, int on, uint64_t salt)
{
    if (p->n_published)
        return; /* entries made under another salt would never match: keep what is */
    p->cache_on = on != 0;
    p->salt = salt;
}

/* ---- the table --------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 29);
}

static uint64_t block_hash(const ifl_kv_pool *p, int32_t parent, uint32_t pgen, const int32_t *toks)
{
    uint64_t h = mix64(p->salt, ((uint64_t)(uint32_t)parent << 32) | pgen);
    for (int32_t i = 0; i < p->block_size; i++)
        h = mix64(h, (uint32_t)toks[i]);
    return h;
}

/* The published block with this parent and these tokens, or -1. */
static int32_t find_block(const ifl_kv_pool *p, int32_t parent, uint32_t pgen, const int32_t *toks,
                          uint64_t h)
{
    size_t bs = (size_t)p->block_size;
    for (int32_t b = p->bucket[h & p->bucket_mask]; b >= 0; b = p->chain[b])
        if (p->hash[b] == h && p->parent[b] == parent && p->parent_gen[b] == pgen &&
            !memcmp(p->tokens + (size_t)b * bs, toks, bs * sizeof *toks))
            return b;
    return -1;
}

static void unpublish(ifl_kv_pool *p, int32_t b)
{
    int32_t *link = &p->bucket[p->hash[b] & p->bucket_mask];
    while (*link != b)
        link = &p->chain[*link];
    *link = p->chain[b];
    p->published[b] = 0;
    p->gen[b]++;
    p->n_published--;
}

static void lru_remove(ifl_kv_pool *p, int32_t b)
{
    int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0)
        p->lru_next[pr] = nx;
    else
        p->lru_head = nx;
    if (nx >= 0)
        p->lru_prev[nx] = pr;
    else
        p->lru_tail = pr;
    p->n_lru--;
}

static void lru_append(ifl_kv_pool *p, int32_t b)
{
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->n_lru++;
}

/* A block for a sequence (ref 1): a free one, else the oldest cached one nobody holds. The caller
 * has checked that one is available. */
static int32_t take_block(ifl_kv_pool *p)
{
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_ids[--p->n_free];
    } else {
        b = p->lru_head;
        lru_remove(p, b);
        unpublish(p, b);
        p->evictions++;
    }
    p->ref[b] = 1;
    return b;
}

/* One holder fewer for block b: nobody left, it goes on the LRU list when published (its entry
 * still says what it holds), else back on the free stack. */
static void drop_ref(ifl_kv_pool *p, int32_t b)
{
    if (--p->ref[b] > 0)
        return;
    if (p->published[b])
        lru_append(p, b);
    else
        p->free_ids[p->n_free++] = b;
}

/* ---- sequences --------------------------------------------------------------------------- */

/* The sequence's spare block, if it has one, back to the pool (a spare is never published). */
static void drop_spare(ifl_kv_seq *s, ifl_kv_pool *p)
{
    if (!s->n_spare)
        return;
    drop_ref(p, s->spare);
    s->n_spare = 0;
    s->spare = 0;
}

/* The published prefix is no longer known: ifl_kv_seq_publish walks it again from the first block
 * with lookups (finding the blocks the sequence still holds under their entries). */
static void forget_published(ifl_kv_seq *s)
{
    s->n_published = 0;
    s->canon = -1;
    s->canon_gen = 0;
}

/* Whether a block of s from index `from` on is held by another sequence too. */
static int shared_from(const ifl_kv_seq *s, const ifl_kv_pool *p, int32_t from)
{
    for (int32_t i = from < 0 ? 0 : from; i < s->n_blocks; i++)
        if (p->ref[s->blocks[i]] > 1)
            return 1;
    return 0;
}

static int seq_grow(ifl_kv_seq *s, int32_t need)
{
    if (need <= s->cap)
        return 0;
    int32_t cap = s->cap ? s->cap : 4;
    while (cap < need)
        cap *= 2;
    int32_t *b = realloc(s->blocks, (size_t)cap * sizeof *b);
    if (!b)
        return -1;
    s->blocks = b;
    s->cap = cap;
    return 0;
}

int ifl_kv_seq_reserve(ifl_kv_seq *s, ifl_kv_pool *p, int32_t n_tokens)
{
    int32_t need = ifl_kv_blocks_for(p, n_tokens);
    if (need <= s->n_blocks)
        return 0;
    if (s->n_blocks == 0)
        forget_published(s);
    int32_t add = need - s->n_blocks;
    if (add > ifl_kv_pool_available(p) || seq_grow(s, need))
        return -1;
    for (int32_t i = 0; i < add; i++)
        s->blocks[s->n_blocks++] = take_block(p);
    return 0;
}

int ifl_kv_seq_admit(ifl_kv_seq *s, ifl_kv_pool *p, const int32_t *prompt, int32_t n_prompt,
                     int32_t n_tokens, int32_t *cached)
{
    *cached = 0;
    if (s->n_blocks)
        return -1; /* admission is of an empty sequence */
    int32_t need = ifl_kv_blocks_for(p, n_tokens);
    if (seq_grow(s, need))
        return -1;
    /* the longest cached prefix, in whole blocks, leaving the last prompt token to compute */
    int32_t hits = 0, hits_unused = 0, parent = -1;
    uint32_t pgen = 0;
    int32_t max_hits = p->cache_on && n_prompt > 0 ? (n_prompt - 1) / p->block_size : 0;
    if (max_hits > need)
        max_hits = need;
    while (hits < max_hits) {
        const int32_t *toks = prompt + (size_t)hits * p->block_size;
        int32_t b = find_block(p, parent, pgen, toks, block_hash(p, parent, pgen, toks));
        if (b < 0)
            break;
        s->blocks[hits++] = b;
        hits_unused += p->ref[b] == 0;
        parent = b;
        pgen = p->gen[b];
    }
    /* the hits nobody held leave the LRU list, so they are not available for the rest */
    if (need - hits > ifl_kv_pool_available(p) - hits_unused)
        return -1;
    for (int32_t i = 0; i < hits; i++) {
        int32_t b = s->blocks[i];
        if (p->ref[b]++ == 0)
            lru_remove(p, b);
    }
    for (int32_t i = hits; i < need; i++)
        s->blocks[i] = take_block(p);
    s->n_blocks = need;
    s->n_published = hits;
    s->canon = parent;
    s->canon_gen = pgen;
    if (p->cache_on) {
        p->lookups++;
        p->hit_tokens += (uint64_t)hits * (uint64_t)p->block_size;
        p->hit_lookups += hits > 0;
    }
    *cached = hits * p->block_size;
    return 0;
}

/* Enters block b in the table under its parent and tokens. */
static void publish_block(ifl_kv_pool *p, int32_t b, int32_t parent, uint32_t pgen,
                          const int32_t *toks, uint64_t h)
{
    size_t bs = (size_t)p->block_size;
    p->published[b] = 1;
    p->parent[b] = parent;
    p->parent_gen[b] = pgen;
    p->hash[b] = h;
    memcpy(p->tokens + (size_t)b * bs, toks, bs * sizeof *toks);
    p->chain[b] = p->bucket[h & p->bucket_mask];
    p->bucket[h & p->bucket_mask] = b;
    p->n_published++;
}

void ifl_kv_seq_publish(ifl_kv_seq *s, ifl_kv_pool *p, const int32_t *tokens, int32_t n_written)
{
    if (!p->cache_on)
        return;
    size_t bs = (size_t)p->block_size;
    while (s->n_published < s->n_blocks &&
           (int64_t)(s->n_published + 1) * p->block_size <= n_written) {
        const int32_t *toks = tokens + (size_t)s->n_published * bs;
        uint64_t h = block_hash(p, s->canon, s->canon_gen, toks);
        int32_t b = find_block(p, s->canon, s->canon_gen, toks, h);
        if (b < 0) { /* new: this sequence's block becomes the canonical one */
            b = s->blocks[s->n_published];
            /* Published already (a walk again after ifl_kv_seq_cow or _truncate shrank the
             * prefix): its entry says what it holds, so it describes these tokens and this
             * prefix; the lookup missed it, so its parent is gone (evicted or re-entered) and it
             * can never match again. It is entered afresh under the live parent. */
            if (p->published[b])
                unpublish(p, b);
            publish_block(p, b, s->canon, s->canon_gen, toks, h);
        }
        /* else an equal block was computed first (by another sequence, or this one: its own
         * block when the walk comes again after the prefix shrank); ours stays as it is */
        s->canon = b;
        s->canon_gen = p->gen[b];
        s->n_published++;
    }
}

/* ---- fork, copy on write, truncate ---------------------------------------------------------- */

int ifl_kv_seq_fork(ifl_kv_seq *dst, ifl_kv_seq *src, ifl_kv_pool *p, int32_t n_written,
                    int32_t n_tokens)
{
    if (dst == src || dst->n_blocks || dst->n_spare || n_written < 0 || n_tokens < n_written ||
        n_written > (int64_t)src->n_blocks * p->block_size)
        return -1;
    int32_t n_shared = ifl_kv_blocks_for(p, n_written);
    int32_t n_full = n_written / p->block_size; /* shared blocks nobody writes into */
    int32_t need = ifl_kv_blocks_for(p, n_tokens);
    int partial = n_shared > n_full;
    int32_t spares = partial ? 1 + !src->n_spare : 0;
    if (need - n_shared + spares > ifl_kv_pool_available(p) || seq_grow(dst, need))
        return -1;
    for (int32_t i = 0; i < n_shared; i++) {
        int32_t b = src->blocks[i];
        dst->blocks[i] = b;
        if (p->ref[b]++ == 0) /* cannot be: src holds it; kept consistent all the same */
            lru_remove(p, b);
    }
    for (int32_t i = n_shared; i < need; i++)
        dst->blocks[i] = take_block(p);
    dst->n_blocks = need;
    if (partial) {
        dst->spare = take_block(p);
        dst->n_spare = 1;
        if (!src->n_spare) {
            src->spare = take_block(p);
            src->n_spare = 1;
        }
    }
    if (src->n_published <= n_full) {
        dst->n_published = src->n_published;
        dst->canon = src->canon;
        dst->canon_gen = src->canon_gen;
    } else {
        forget_published(dst);
    }
    return 0;
}

/* Replaces block i of s, which s may not write in place, by a private one (the spare first) and
 * records the copy. -1 (nothing changed) when there is no block or no room in the list. */
static int cow_block(ifl_kv_seq *s, ifl_kv_pool *p, int32_t i, int32_t *src, int32_t *dst,
                     int32_t cap, int32_t *n_copy)
{
    if (*n_copy >= cap || (!s->n_spare && ifl_kv_pool_available(p) < 1))
        return -1;
    int32_t old = s->blocks[i], fresh;
    if (s->n_spare) {
        fresh = s->spare;
        s->n_spare = 0;
        s->spare = 0;
    } else {
        fresh = take_block(p);
    }
    s->blocks[i] = fresh;
    drop_ref(p, old); /* a published one nobody else holds goes on the LRU list, still valid */
    src[*n_copy] = old;
    dst[*n_copy] = fresh;
    (*n_copy)++;
    if (i < s->n_published) /* the prefix through block i is no longer what was entered */
        forget_published(s);
    return 0;
}

int ifl_kv_seq_cow(ifl_kv_seq *s, ifl_kv_pool *p, int32_t pos, int32_t n, int32_t *src,
                   int32_t *dst, int32_t cap, int32_t *n_copy)
{
    if (n <= 0)
        return 0;
    int32_t first = pos / p->block_size, last = (pos + n - 1) / p->block_size;
    if (pos < 0 || last >= s->n_blocks)
        return -1;
    for (int32_t i = first; i <= last; i++) {
        int32_t b = s->blocks[i];
        if ((p->ref[b] > 1 || p->published[b]) && cow_block(s, p, i, src, dst, cap, n_copy))
            return -1;
    }
    /* the spare is for blocks s may still write: from this write on, none is shared */
    if (s->n_spare && !shared_from(s, p, first))
        drop_spare(s, p);
    return 0;
}

int ifl_kv_seq_truncate(ifl_kv_seq *s, ifl_kv_pool *p, int32_t n_tokens, int32_t n_keep)
{
    if (n_tokens < 0 || n_keep < n_tokens || n_tokens > (int64_t)s->n_blocks * p->block_size)
        return -1;
    if (s->n_published > n_tokens / p->block_size)
        forget_published(s);
    int32_t keep = ifl_kv_blocks_for(p, n_keep);
    /* last block first, as ifl_kv_seq_release */
    while (s->n_blocks > keep)
        drop_ref(p, s->blocks[--s->n_blocks]);
    if (s->n_spare && !shared_from(s, p, n_tokens / p->block_size))
        drop_spare(s, p);
    return ifl_kv_seq_reserve(s, p, n_keep);
}

void ifl_kv_seq_release(ifl_kv_seq *s, ifl_kv_pool *p)
{
    /* last block first: deeper blocks reach the LRU list before their parents and go first */
    for (int32_t i = s->n_blocks - 1; i >= 0; i--)
        drop_ref(p, s->blocks[i]);
    drop_spare(s, p);
    s->n_blocks = 0;
    forget_published(s);
}

void ifl_kv_seq_free(ifl_kv_seq *s, ifl_kv_pool *p)
{
    ifl_kv_seq_release(s, p);
    free(s->blocks);
    memset(s, 0, sizeof *s);
}
