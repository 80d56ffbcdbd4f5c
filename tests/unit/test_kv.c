/* test_kv.c: the KV pool's prefix cache (engine/kv.c) as accounting, no backend: the longest
 * cached prefix in whole blocks and never the last prompt token, a partial block never published,
 * equal blocks under different prefixes kept apart, reference counts and the LRU list (cached
 * blocks count as available, evicted only for room, deeper blocks first), an evicted parent's
 * entries never matching again (its generation), the cache off, and the pool back to its total
 * after every case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "testutil.h"

#define BS 4

static void fill(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

/* Admits s with prompt (n tokens) and room for n + extra; returns the cached tokens. */
static int32_t admit(ifl_kv_seq *s, ifl_kv_pool *p, const int32_t *prompt, int32_t n, int32_t extra)
{
    int32_t cached = -1;
    CHECKF(ifl_kv_seq_admit(s, p, prompt, n, n + extra, &cached) == 0, "admit of %d tokens", n);
    return cached;
}

static void check_total(const ifl_kv_pool *p, const char *what)
{
    CHECKF(ifl_kv_pool_used(p) == 0 && ifl_kv_pool_available(p) == p->n_blocks,
           "%s: %d used, %d available of %d", what, ifl_kv_pool_used(p), ifl_kv_pool_available(p),
           p->n_blocks);
}

static void test_prefix(void)
{
    ifl_kv_pool p;
    ifl_err err;
    CHECK(ifl_kv_pool_init(&p, 16, BS, &err) == 0);
    ifl_kv_pool_set_prefix_cache(&p, 1, 7);
    int32_t a[32], b[32];
    fill(a, 32, 100);
    ifl_kv_seq sa = {0}, sb = {0};
    CHECK(admit(&sa, &p, a, 10, 2) == 0); /* empty cache: nothing */
    ifl_kv_seq_publish(&sa, &p, a, 10);   /* 2 full blocks; the third (2 tokens) is partial */
    CHECKF(p.n_published == 2, "published %d blocks of 10 tokens", p.n_published);
    ifl_kv_seq_publish(&sa, &p, a, 10); /* again: nothing new */
    CHECK(p.n_published == 2);
    /* same 10-token prompt: 8 cached, the 9th and 10th computed (the last is never cached) */
    CHECK(admit(&sb, &p, a, 10, 0) == 8);
    CHECK(sb.blocks[0] == sa.blocks[0] && sb.blocks[1] == sa.blocks[1]);
    CHECK(sb.blocks[2] != sa.blocks[2]);
    ifl_kv_seq_release(&sb, &p);
    /* 8 tokens exactly: only the first block (the 8th token must be computed) */
    CHECK(admit(&sb, &p, a, 8, 0) == 4);
    ifl_kv_seq_release(&sb, &p);
    /* a prompt that differs in its second block: only the first */
    memcpy(b, a, sizeof b);
    b[5] = 9999;
    CHECK(admit(&sb, &p, b, 12, 0) == 4);
    ifl_kv_seq_release(&sb, &p);
    /* the same tokens as block 1 of a, but under a different first block: no hit */
    fill(b, 4, 500);
    memcpy(b + 4, a + 4, 4 * sizeof *b);
    CHECK(admit(&sb, &p, b, 9, 0) == 0);
    ifl_kv_seq_release(&sb, &p);
    ifl_kv_seq_release(&sa, &p);
    check_total(&p, "prefix");
    CHECKF(p.n_lru == 2, "%d cached blocks unused, expected 2", p.n_lru);
    CHECK(p.lookups == 5 && p.hit_lookups == 3 && p.hit_tokens == 16);
    ifl_kv_seq_free(&sa, &p);
    ifl_kv_seq_free(&sb, &p);
    ifl_kv_pool_free(&p);
}

/* Cached blocks are taken only when nothing is free, the least recently released first; a hit on
 * an unused cached block takes it off the list, so it is not counted twice. */
static void test_eviction(void)
{
    ifl_kv_pool p;
    ifl_err err;
    CHECK(ifl_kv_pool_init(&p, 8, BS, &err) == 0);
    ifl_kv_pool_set_prefix_cache(&p, 1, 0);
    int32_t t[64];
    ifl_kv_seq s = {0}, u = {0};
    /* 4 distinct 8-token prompts of 2 blocks each, published whole, each released before the
     * next: the pool is all cached, nothing free, nothing evicted yet */
    for (int k = 0; k < 4; k++) {
        fill(t, 8, 1000 * (k + 1));
        CHECK(admit(&s, &p, t, 8, 0) == 0);
        ifl_kv_seq_publish(&s, &p, t, 8);
        ifl_kv_seq_release(&s, &p);
    }
    CHECKF(p.n_published == 8 && p.n_lru == 8 && p.n_free == 0 && p.evictions == 0,
           "4 prompts of 2 blocks in 8: %d published, %d unused, %d free, %d evictions",
           p.n_published, p.n_lru, p.n_free, (int)p.evictions);
    /* a fifth takes the two released first: the first prompt's, its second block before its first
     */
    fill(t, 8, 5000);
    CHECK(admit(&s, &p, t, 8, 0) == 0 && p.evictions == 2);
    ifl_kv_seq_publish(&s, &p, t, 8);
    ifl_kv_seq_release(&s, &p);
    fill(t, 8, 1000);
    CHECK(admit(&s, &p, t, 8, 0) == 0 && p.evictions == 4); /* gone; takes the second's two */
    ifl_kv_seq_release(&s, &p);
    fill(t, 8, 3000);
    CHECK(admit(&s, &p, t, 8, 0) == 4); /* still cached (one block: the 8th token is computed) */
    ifl_kv_seq_release(&s, &p);
    /* 8 blocks for the fourth prompt and 24 more tokens: its hit and 7 more, all there is */
    fill(t, 8, 4000);
    CHECK(admit(&s, &p, t, 8, 24) == 4 && s.n_blocks == 8);
    /* nothing left now: admission fails and changes nothing */
    int32_t cached = -1;
    CHECK(ifl_kv_seq_admit(&u, &p, t, 8, 8, &cached) == -1 && u.n_blocks == 0);
    CHECK(ifl_kv_pool_used(&p) == 8 && ifl_kv_pool_available(&p) == 0);
    ifl_kv_seq_release(&s, &p);
    check_total(&p, "eviction");
    ifl_kv_seq_free(&s, &p);
    ifl_kv_seq_free(&u, &p);
    ifl_kv_pool_free(&p);
}

/* Two sequences compute the same first block at once: the second one's copy stays private and
 * its next block is published under the first one's. When that parent is evicted and its id is
 * reused for other tokens, the child must not match under the newcomer. */
static void test_generation(void)
{
    ifl_kv_pool p;
    ifl_err err;
    CHECK(ifl_kv_pool_init(&p, 6, BS, &err) == 0);
    ifl_kv_pool_set_prefix_cache(&p, 1, 0);
    int32_t x[16], y[16];
    fill(x, 16, 10);
    ifl_kv_seq a = {0}, f = {0}, g = {0};
    CHECK(admit(&a, &p, x, 5, 0) == 0); /* 2 blocks */
    CHECK(admit(&f, &p, x, 9, 0) == 0); /* 3 blocks, admitted before a published */
    ifl_kv_seq_publish(&a, &p, x, 4);   /* X0 = a's block 0 */
    ifl_kv_seq_publish(&f, &p, x, 8);   /* f's block 0 equals X0: private; f's block 1 under X0 */
    CHECK(p.n_published == 2 && p.published[a.blocks[0]] && !p.published[f.blocks[0]] &&
          p.published[f.blocks[1]] && p.parent[f.blocks[1]] == a.blocks[0]);
    int32_t x0 = a.blocks[0];
    ifl_kv_seq_release(&a, &p); /* X0 unused; a's partial block 1 free */
    /* h holds the free blocks, so g's one block is X0, evicted; released in this order, X0's id
     * is on top of the free stack */
    ifl_kv_seq h = {0};
    CHECK(ifl_kv_seq_reserve(&h, &p, p.n_free * BS) == 0 && p.n_free == 0);
    CHECK(ifl_kv_seq_reserve(&g, &p, BS) == 0 && g.blocks[0] == x0);
    CHECK(p.evictions == 1 && !p.published[x0]);
    ifl_kv_seq_release(&h, &p);
    ifl_kv_seq_release(&g, &p);
    /* y: a different first block, in X0's old id, then x's second block */
    fill(y, 4, 700);
    memcpy(y + 4, x + 4, 8 * sizeof *y);
    CHECK(admit(&g, &p, y, 5, 0) == 0 && g.blocks[0] == x0);
    ifl_kv_seq_publish(&g, &p, y, 4);
    ifl_kv_seq_release(&g, &p);
    /* 9 tokens of y: its own first block, and not f's second (published under the old X0) */
    CHECKF(admit(&g, &p, y, 9, 0) == 4, "y found more than its own first block");
    ifl_kv_seq_release(&g, &p);
    ifl_kv_seq_free(&h, &p);
    ifl_kv_seq_release(&f, &p);
    check_total(&p, "generation");
    ifl_kv_seq_free(&a, &p);
    ifl_kv_seq_free(&f, &p);
    ifl_kv_seq_free(&g, &p);
    ifl_kv_pool_free(&p);
}

static void test_off(void)
{
    ifl_kv_pool p;
    ifl_err err;
    CHECK(ifl_kv_pool_init(&p, 8, BS, &err) == 0);
    int32_t t[16];
    fill(t, 16, 1);
    ifl_kv_seq s = {0};
    CHECK(admit(&s, &p, t, 9, 0) == 0);
    ifl_kv_seq_publish(&s, &p, t, 9);
    CHECK(p.n_published == 0);
    ifl_kv_seq_release(&s, &p);
    CHECK(admit(&s, &p, t, 9, 0) == 0);
    ifl_kv_seq_release(&s, &p);
    CHECK(p.n_free == 8 && p.n_lru == 0 && p.lookups == 0);
    ifl_kv_seq_free(&s, &p);
    ifl_kv_pool_free(&p);
}

int main(void)
{
    test_prefix();
    test_eviction();
    test_generation();
    test_off();
    return test_finish("test_kv");
}
