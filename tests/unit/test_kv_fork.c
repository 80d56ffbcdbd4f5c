/* test_kv_fork.c: fork, copy on write and truncate in the KV pool's accounting (engine/kv.c), no
 * backend: shared blocks counted once by reference, the spare blocks that make the copy of a
 * shared partial block certain (the last holder writes in place and gives its spare back), a
 * published block always copied before it is written, fork all or nothing, truncation shrinking
 * and growing and never letting a cut block be found under its old entry, publication from a
 * forked child, and after every case each block's count equal to the tables and spares that hold
 * it and the pool back to its total. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "testutil.h"

#define BS 4
#define MAX_SEQS 16

static void fill(int32_t *t, int n, int32_t base)
{
    for (int i = 0; i < n; i++)
        t[i] = base + i;
}

static void pool_init(ifl_kv_pool *p, int32_t n_blocks)
{
    ifl_err err;
    CHECK(ifl_kv_pool_init(p, n_blocks, BS, &err) == 0);
    ifl_kv_pool_set_prefix_cache(p, 1, 3);
}

/* Admits s with prompt (n tokens) and room for n + extra; returns the cached tokens. */
static int32_t admit(ifl_kv_seq *s, ifl_kv_pool *p, const int32_t *prompt, int32_t n, int32_t extra)
{
    int32_t cached = -1;
    CHECKF(ifl_kv_seq_admit(s, p, prompt, n, n + extra, &cached) == 0, "admit of %d tokens", n);
    return cached;
}

/* Every block's count equals the table entries and spares of the live sequences that hold it; a
 * block nobody holds is on the free stack (unpublished) or the LRU list (published), once; free +
 * LRU + held is the pool's total. */
static void check_pool(const ifl_kv_pool *p, ifl_kv_seq *const *seqs, int n_seqs, const char *what)
{
    int32_t nb = p->n_blocks, held = 0, bad = 0;
    int32_t *count = calloc((size_t)nb, sizeof *count), *seen = calloc((size_t)nb, sizeof *seen);
    CHECK(count && seen);
    for (int k = 0; k < n_seqs; k++) {
        for (int32_t i = 0; i < seqs[k]->n_blocks; i++)
            count[seqs[k]->blocks[i]]++;
        if (seqs[k]->n_spare)
            count[seqs[k]->spare]++;
    }
    for (int32_t b = 0; b < nb; b++) {
        held += count[b] > 0;
        if (p->ref[b] != count[b] && bad++ < 4)
            fprintf(stderr, "%s: block %d: ref %d, held %d times\n", what, b, p->ref[b], count[b]);
    }
    for (int32_t i = 0; i < p->n_free; i++) {
        int32_t b = p->free_ids[i];
        bad += seen[b]++ > 0 || count[b] > 0 || p->published[b];
    }
    int32_t n_lru = 0;
    for (int32_t b = p->lru_head; b >= 0 && n_lru <= nb; b = p->lru_next[b], n_lru++)
        bad += seen[b]++ > 0 || count[b] > 0 || !p->published[b];
    CHECKF(bad == 0 && n_lru == p->n_lru && p->n_free + p->n_lru + held == nb &&
               ifl_kv_pool_used(p) == held,
           "%s: %d inconsistencies; %d free + %d LRU (%d listed) + %d held of %d", what, bad,
           p->n_free, p->n_lru, n_lru, held, nb);
    free(count);
    free(seen);
}

/* Releases the sequences in the order given and checks the pool after each and at its total. */
static void release_all(ifl_kv_pool *p, ifl_kv_seq **seqs, int n, const int *order,
                        const char *what)
{
    ifl_kv_seq *live[MAX_SEQS];
    int n_live = n;
    memcpy(live, seqs, (size_t)n * sizeof *live);
    for (int k = 0; k < n; k++) {
        ifl_kv_seq *s = seqs[order[k]];
        ifl_kv_seq_release(s, p);
        CHECK(s->n_blocks == 0 && s->n_spare == 0);
        for (int j = 0; j < n_live; j++)
            if (live[j] == s)
                live[j] = live[--n_live];
        check_pool(p, live, n_live, what);
    }
    CHECKF(ifl_kv_pool_used(p) == 0 && ifl_kv_pool_available(p) == p->n_blocks,
           "%s: %d used after release", what, ifl_kv_pool_used(p));
}

/* A prompt of whole blocks: the children share them, need no spare, and get fresh blocks of their
 * own for what follows (the parent's reserved block is not shared). */
static void test_fork_full(void)
{
    ifl_kv_pool p;
    pool_init(&p, 32);
    int32_t t[16];
    fill(t, 16, 100);
    ifl_kv_seq a = {0}, c = {0};
    admit(&a, &p, t, 8, 4); /* 3 blocks: 2 of prompt, 1 to generate into */
    CHECK(ifl_kv_seq_fork(&c, &a, &p, 8, 12) == 0);
    CHECK(c.n_blocks == 3 && c.blocks[0] == a.blocks[0] && c.blocks[1] == a.blocks[1] &&
          c.blocks[2] != a.blocks[2]);
    CHECK(p.ref[a.blocks[0]] == 2 && p.ref[a.blocks[1]] == 2 && p.ref[a.blocks[2]] == 1 &&
          p.ref[c.blocks[2]] == 1);
    CHECK(a.n_spare == 0 && c.n_spare == 0 && ifl_kv_pool_used(&p) == 4);
    ifl_kv_seq *all[] = {&a, &c};
    check_pool(&p, all, 2, "fork full");
    /* writes past the shared blocks copy nothing */
    int32_t src[4], dst[4], n_copy = 0;
    CHECK(ifl_kv_seq_cow(&c, &p, 8, 4, src, dst, 4, &n_copy) == 0 && n_copy == 0);
    CHECK(ifl_kv_seq_cow(&a, &p, 8, 4, src, dst, 4, &n_copy) == 0 && n_copy == 0);
    release_all(&p, all, 2, (const int[]){0, 1}, "fork full");
    ifl_kv_seq_free(&a, &p);
    ifl_kv_seq_free(&c, &p);
    ifl_kv_pool_free(&p);
}

/* A prompt ending inside a block: that block is shared too, and each holder has a spare. */
static void test_fork_partial(void)
{
    ifl_kv_pool p;
    pool_init(&p, 32);
    int32_t t[16];
    fill(t, 16, 200);
    ifl_kv_seq a = {0}, c = {0}, d = {0};
    admit(&a, &p, t, 10, 4); /* 4 blocks; block 2 holds tokens 8, 9 */
    CHECK(a.n_spare == 0);
    CHECK(ifl_kv_seq_fork(&c, &a, &p, 10, 14) == 0);
    CHECK(c.n_blocks == 4 && c.blocks[2] == a.blocks[2] && c.blocks[3] != a.blocks[3]);
    CHECK(p.ref[a.blocks[0]] == 2 && p.ref[a.blocks[2]] == 2 && p.ref[a.blocks[3]] == 1);
    CHECK(a.n_spare == 1 && c.n_spare == 1 && a.spare != c.spare && p.ref[a.spare] == 1);
    CHECKF(ifl_kv_pool_used(&p) == 4 + 1 + 2, "%d used", ifl_kv_pool_used(&p));
    /* a second child: the parent keeps its spare */
    int32_t a_spare = a.spare;
    CHECK(ifl_kv_seq_fork(&d, &a, &p, 10, 11) == 0);
    CHECK(a.n_spare == 1 && a.spare == a_spare && d.n_spare == 1 && d.n_blocks == 3);
    CHECK(p.ref[a.blocks[2]] == 3 && ifl_kv_pool_used(&p) == 4 + 1 + 3);
    ifl_kv_seq *all[] = {&a, &c, &d};
    check_pool(&p, all, 3, "fork partial");
    /* not empty, or more written than held: refused */
    CHECK(ifl_kv_seq_fork(&c, &a, &p, 10, 14) == -1);
    ifl_kv_seq e = {0};
    CHECK(ifl_kv_seq_fork(&e, &a, &p, 17, 20) == -1 && e.n_blocks == 0);
    CHECK(ifl_kv_seq_fork(&e, &a, &p, 10, 9) == -1 && e.n_blocks == 0);
    check_pool(&p, all, 3, "fork partial refused");
    release_all(&p, all, 3, (const int[]){0, 2, 1}, "fork partial");
    ifl_kv_seq_free(&a, &p);
    ifl_kv_seq_free(&c, &p);
    ifl_kv_seq_free(&d, &p);
    ifl_kv_seq_free(&e, &p);
    ifl_kv_pool_free(&p);
}

/* Copy on write of the shared partial block by one of 8 holders; checks the pair it records. */
static void cow_one(ifl_kv_pool *p, ifl_kv_seq *s, int32_t shared, int copies)
{
    int32_t src[2] = {-1, -1}, dst[2] = {-1, -1}, n_copy = 0;
    int32_t spare = s->spare, n_free = p->n_free, ref = p->ref[shared];
    CHECK(s->n_spare == 1 && s->blocks[2] == shared);
    CHECK(ifl_kv_seq_cow(s, p, 10, 1, src, dst, 2, &n_copy) == 0);
    CHECK(s->n_spare == 0);
    if (copies) { /* into its spare: the pool's free blocks do not change */
        CHECKF(n_copy == 1 && src[0] == shared && dst[0] == spare && s->blocks[2] == spare,
               "copy: %d pairs (%d -> %d), spare %d", n_copy, src[0], dst[0], spare);
        CHECK(p->ref[shared] == ref - 1 && p->ref[spare] == 1 && p->n_free == n_free);
    } else { /* the last holder: in place, and its spare goes back */
        CHECK(n_copy == 0 && s->blocks[2] == shared && p->ref[shared] == 1);
        CHECK(p->n_free == n_free + 1 && p->ref[spare] == 0 && p->free_ids[n_free] == spare);
    }
    /* the next write is in place */
    CHECK(ifl_kv_seq_cow(s, p, 11, 1, src, dst, 2, &n_copy) == 0 && n_copy == (copies ? 1 : 0));
}

/* Seven children of one parent: the prompt's blocks counted once; the first seven writers of the
 * shared partial block copy it, the last writes in place. */
static void test_fork_eight(void)
{
    ifl_kv_pool p;
    pool_init(&p, 40);
    int32_t t[16];
    fill(t, 16, 300);
    ifl_kv_seq seq[8];
    memset(seq, 0, sizeof seq);
    ifl_kv_seq *all[8];
    for (int k = 0; k < 8; k++)
        all[k] = &seq[k];
    admit(&seq[0], &p, t, 10, 4); /* 3 prompt blocks (the third partial) + 1 */
    for (int k = 1; k < 8; k++)
        CHECK(ifl_kv_seq_fork(&seq[k], &seq[0], &p, 10, 14) == 0);
    int32_t shared = seq[0].blocks[2];
    CHECK(p.ref[seq[0].blocks[0]] == 8 && p.ref[shared] == 8);
    /* the 3 prompt blocks once, each one's own fourth block, each one's spare */
    CHECKF(ifl_kv_pool_used(&p) == 3 + 8 + 8, "%d used", ifl_kv_pool_used(&p));
    check_pool(&p, all, 8, "fork 8");
    /* no room in the copy list: refused, nothing changed */
    int32_t src[1], dst[1], n_copy = 0;
    CHECK(ifl_kv_seq_cow(&seq[3], &p, 10, 1, src, dst, 0, &n_copy) == -1 && n_copy == 0);
    CHECK(seq[3].blocks[2] == shared && seq[3].n_spare == 1 && p.ref[shared] == 8);
    check_pool(&p, all, 8, "fork 8, cap 0");
    const int order[8] = {3, 0, 6, 1, 7, 2, 4, 5};
    for (int k = 0; k < 8; k++) {
        cow_one(&p, &seq[order[k]], shared, k < 7);
        check_pool(&p, all, 8, "fork 8, cow");
    }
    CHECK(p.ref[seq[0].blocks[0]] == 8 && ifl_kv_pool_used(&p) == 2 + 8 + 8);
    release_all(&p, all, 8, (const int[]){5, 0, 7, 2, 1, 6, 3, 4}, "fork 8");
    for (int k = 0; k < 8; k++)
        ifl_kv_seq_free(&seq[k], &p);
    ifl_kv_pool_free(&p);
}

/* A published block is copied before it is written even when nobody else holds it; a private
 * unpublished one is written in place; no block and no spare: refused. */
static void test_cow_published(void)
{
    ifl_kv_pool p;
    pool_init(&p, 4);
    int32_t t[16];
    fill(t, 16, 400);
    ifl_kv_seq s = {0}, h = {0};
    admit(&s, &p, t, 9, 3); /* 3 blocks */
    ifl_kv_seq_publish(&s, &p, t, 8);
    int32_t b1 = s.blocks[1];
    CHECK(p.published[s.blocks[0]] && p.published[b1] && p.ref[b1] == 1 && s.n_published == 2);
    int32_t src[4], dst[4], n_copy = 0;
    CHECK(ifl_kv_seq_cow(&s, &p, 8, 2, src, dst, 4, &n_copy) == 0 && n_copy == 0);
    CHECK(ifl_kv_seq_cow(&s, &p, 6, 1, src, dst, 4, &n_copy) == 0);
    CHECKF(n_copy == 1 && src[0] == b1 && dst[0] == s.blocks[1] && dst[0] != b1, "%d pairs",
           n_copy);
    CHECK(p.ref[b1] == 0 && p.n_lru == 1 && p.lru_head == b1 && p.published[b1]);
    CHECK(!p.published[s.blocks[1]] && s.n_published <= 1);
    ifl_kv_seq *all[] = {&s, &h};
    check_pool(&p, all, 2, "cow published");
    /* the pool full (b1 taken back from the LRU list by h): block 0 is published, no room */
    CHECK(ifl_kv_seq_reserve(&h, &p, BS) == 0 && ifl_kv_pool_available(&p) == 0);
    int32_t b0 = s.blocks[0];
    n_copy = 0;
    CHECK(ifl_kv_seq_cow(&s, &p, 0, 1, src, dst, 4, &n_copy) == -1 && n_copy == 0);
    CHECK(s.blocks[0] == b0 && p.ref[b0] == 1);
    check_pool(&p, all, 2, "cow published, no room");
    release_all(&p, all, 2, (const int[]){1, 0}, "cow published");
    ifl_kv_seq_free(&s, &p);
    ifl_kv_seq_free(&h, &p);
    ifl_kv_pool_free(&p);
}

/* Fork with one block too few: refused, the pool and both sequences as they were; cached blocks
 * nobody holds count as available. */
static void test_fork_short(void)
{
    ifl_kv_pool p;
    pool_init(&p, 12);
    int32_t t[16], u[16];
    fill(t, 16, 500);
    fill(u, 16, 900);
    ifl_kv_seq a = {0}, c = {0}, h = {0}, g = {0};
    admit(&a, &p, t, 10, 2); /* 3 blocks, the third partial */
    /* one cached block nobody holds */
    admit(&g, &p, u, 5, 0);
    ifl_kv_seq_publish(&g, &p, u, 4);
    ifl_kv_seq_release(&g, &p);
    CHECK(p.n_lru == 1);
    /* the fork needs 1 fresh block (16 tokens: 4 blocks, 3 shared) + 2 spares */
    CHECK(ifl_kv_seq_reserve(&h, &p, (p.n_free - 2) * BS) == 0 && ifl_kv_pool_available(&p) == 3);
    CHECK(ifl_kv_seq_reserve(&h, &p, (h.n_blocks + 1) * BS) == 0);
    int32_t *ref0 = malloc((size_t)p.n_blocks * sizeof *ref0);
    CHECK(ref0 != NULL);
    memcpy(ref0, p.ref, (size_t)p.n_blocks * sizeof *ref0);
    int32_t n_free = p.n_free, n_lru = p.n_lru;
    CHECK(ifl_kv_seq_fork(&c, &a, &p, 10, 16) == -1);
    CHECK(c.n_blocks == 0 && c.n_spare == 0 && a.n_spare == 0 && a.n_blocks == 3);
    CHECK(p.n_free == n_free && p.n_lru == n_lru && p.evictions == 0 &&
          !memcmp(ref0, p.ref, (size_t)p.n_blocks * sizeof *ref0));
    ifl_kv_seq *all[] = {&a, &c, &h};
    check_pool(&p, all, 3, "fork short");
    /* one block more: it fits, evicting the cached block */
    ifl_kv_seq_release(&h, &p);
    CHECK(ifl_kv_seq_reserve(&h, &p, (p.n_free - 2) * BS) == 0);
    CHECK(ifl_kv_seq_fork(&c, &a, &p, 10, 16) == 0 && p.evictions == 1);
    CHECK(c.n_blocks == 4 && c.n_spare == 1 && a.n_spare == 1 && ifl_kv_pool_available(&p) == 0);
    check_pool(&p, all, 3, "fork fits");
    release_all(&p, all, 3, (const int[]){0, 2, 1}, "fork short");
    free(ref0);
    ifl_kv_seq_free(&a, &p);
    ifl_kv_seq_free(&c, &p);
    ifl_kv_seq_free(&h, &p);
    ifl_kv_seq_free(&g, &p);
    ifl_kv_pool_free(&p);
}

/* Truncation into a published block, then new tokens: the cut blocks are copied before they are
 * written, the copies are published under the new tokens, and the old prompt never finds them. */
static void test_truncate_published(void)
{
    ifl_kv_pool p;
    pool_init(&p, 16);
    int32_t a[16], b[16];
    fill(a, 16, 600);
    memcpy(b, a, sizeof b);
    for (int i = 6; i < 16; i++)
        b[i] = 7000 + i; /* b: a's first 6 tokens, then others */
    ifl_kv_seq s = {0}, u = {0};
    admit(&s, &p, a, 13, 3); /* 4 blocks */
    ifl_kv_seq_publish(&s, &p, a, 13);
    int32_t old[4];
    memcpy(old, s.blocks, sizeof old);
    CHECK(p.n_published == 3 && s.n_published == 3);
    CHECK(ifl_kv_seq_truncate(&s, &p, 6, 16) == 0);
    CHECK(s.n_blocks == 4 && !memcmp(old, s.blocks, sizeof old) && s.n_published <= 1);
    /* a publish now (nothing new written) publishes nothing new and keeps the entries */
    ifl_kv_seq_publish(&s, &p, a, 6);
    CHECK(p.n_published == 3 && s.n_published == 1);
    /* positions 6 .. 12 written with b: blocks 1 and 2 are published, so copied; 3 in place */
    int32_t src[4], dst[4], n_copy = 0;
    CHECK(ifl_kv_seq_cow(&s, &p, 6, 7, src, dst, 4, &n_copy) == 0);
    CHECKF(n_copy == 2 && src[0] == old[1] && src[1] == old[2] && dst[0] == s.blocks[1] &&
               dst[1] == s.blocks[2] && s.blocks[3] == old[3] && s.blocks[0] == old[0],
           "%d pairs", n_copy);
    CHECK(p.n_lru == 2 && p.published[old[1]] && p.published[old[2]]);
    ifl_kv_seq_publish(&s, &p, b, 13);
    CHECK(s.n_published == 3 && p.n_published == 5 && p.published[s.blocks[1]]);
    ifl_kv_seq *all[] = {&s, &u};
    check_pool(&p, all, 2, "truncate published");
    /* the old prompt: the blocks before the cut, and the old blocks (still what their entries
     * say), never the rewritten ones */
    CHECK(admit(&u, &p, a, 13, 0) == 12);
    CHECK(u.blocks[0] == old[0] && u.blocks[1] == old[1] && u.blocks[2] == old[2]);
    CHECK(u.blocks[1] != s.blocks[1] && u.blocks[2] != s.blocks[2]);
    ifl_kv_seq_release(&u, &p);
    /* the new tokens find the rewritten blocks */
    CHECK(admit(&u, &p, b, 13, 0) == 12);
    CHECK(u.blocks[0] == s.blocks[0] && u.blocks[1] == s.blocks[1] && u.blocks[2] == s.blocks[2]);
    check_pool(&p, all, 2, "truncate published, admitted");
    release_all(&p, all, 2, (const int[]){0, 1}, "truncate published");
    ifl_kv_seq_free(&s, &p);
    ifl_kv_seq_free(&u, &p);
    ifl_kv_pool_free(&p);
}

/* Truncation shrinking (blocks back: published ones to the LRU list, shared ones only counted
 * down) and growing, all or nothing. */
static void test_truncate_sizes(void)
{
    ifl_kv_pool p;
    pool_init(&p, 12);
    int32_t t[32];
    fill(t, 32, 800);
    ifl_kv_seq s = {0}, c = {0}, h = {0};
    admit(&s, &p, t, 13, 3); /* 4 blocks */
    ifl_kv_seq_publish(&s, &p, t, 13);
    int32_t old[4];
    memcpy(old, s.blocks, sizeof old);
    CHECK(ifl_kv_seq_fork(&c, &s, &p, 13, 16) == 0 && c.n_spare == 1 && s.n_spare == 1);
    ifl_kv_seq *all[] = {&s, &c, &h};
    check_pool(&p, all, 3, "truncate sizes, fork");
    /* c back to its first 5 tokens (2 blocks): its shared blocks 2, 3 counted down; block 1,
     * which it may write again, is still shared, so it keeps its spare */
    CHECK(ifl_kv_seq_truncate(&c, &p, 5, 5) == 0);
    CHECK(c.n_blocks == 2 && p.ref[old[2]] == 1 && p.ref[old[3]] == 1 && c.n_published <= 1);
    CHECK(c.n_spare == 1);
    check_pool(&p, all, 3, "truncate shared");
    /* to 4 tokens, one block: nothing c may write is shared any more; the spare goes back */
    CHECK(ifl_kv_seq_truncate(&c, &p, 4, 4) == 0 && c.n_blocks == 1 && c.n_spare == 0);
    CHECK(c.n_published <= 1 && p.ref[old[1]] == 1);
    /* s to 6 tokens in 2 blocks: block 2 (published) to the LRU list, block 3 freed, and its
     * spare (what s may still write, block 1 on, is its alone now) */
    int32_t n_free = p.n_free;
    CHECK(s.n_spare == 1 && p.ref[old[0]] == 2);
    CHECK(ifl_kv_seq_truncate(&s, &p, 6, 8) == 0 && s.n_blocks == 2 && s.n_published <= 1);
    CHECK(p.n_lru == 1 && p.lru_head == old[2] && p.ref[old[3]] == 0 && s.n_spare == 0);
    CHECK(p.n_free == n_free + 2);
    check_pool(&p, all, 3, "truncate shrink");
    /* grow again to 20 positions: 5 blocks */
    CHECK(ifl_kv_seq_truncate(&s, &p, 6, 20) == 0 && s.n_blocks == 5);
    CHECK(s.blocks[0] == old[0] && s.blocks[1] == old[1]);
    /* no room to grow: -1, s as it was */
    CHECK(ifl_kv_seq_reserve(&h, &p, ifl_kv_pool_available(&p) * BS) == 0);
    CHECK(ifl_kv_seq_truncate(&s, &p, 6, 24) == -1 && s.n_blocks == 5);
    /* cut shorter than held but more than the table has written: refused */
    CHECK(ifl_kv_seq_truncate(&s, &p, 21, 21) == -1 && ifl_kv_seq_truncate(&s, &p, 6, 5) == -1);
    check_pool(&p, all, 3, "truncate grow");
    /* to nothing */
    CHECK(ifl_kv_seq_truncate(&s, &p, 0, 0) == 0 && s.n_blocks == 0 && s.n_spare == 0);
    check_pool(&p, all, 3, "truncate to nothing");
    release_all(&p, all, 3, (const int[]){2, 1, 0}, "truncate sizes");
    ifl_kv_seq_free(&s, &p);
    ifl_kv_seq_free(&c, &p);
    ifl_kv_seq_free(&h, &p);
    ifl_kv_pool_free(&p);
}

/* A block published under a parent that has since been evicted, walked again after a truncation:
 * it is entered afresh under the live parent (not twice in the table), and found. */
static void test_republish_stale(void)
{
    ifl_kv_pool p;
    pool_init(&p, 8);
    int32_t x[16];
    fill(x, 16, 40);
    ifl_kv_seq a = {0}, f = {0}, h = {0}, u = {0};
    admit(&a, &p, x, 5, 0);            /* 2 blocks */
    admit(&f, &p, x, 13, 3);           /* 4 blocks, admitted before a published */
    ifl_kv_seq_publish(&a, &p, x, 4);  /* X0 = a's block 0 */
    ifl_kv_seq_publish(&f, &p, x, 12); /* f's block 0 private; 1, 2 under X0 */
    int32_t x0 = a.blocks[0], f1 = f.blocks[1];
    CHECK(!p.published[f.blocks[0]] && p.published[f1] && p.parent[f1] == x0);
    ifl_kv_seq_release(&a, &p);
    CHECK(ifl_kv_seq_reserve(&h, &p, ifl_kv_pool_available(&p) * BS) == 0 && p.evictions == 1);
    ifl_kv_seq_release(&h, &p);
    /* f cut inside block 2 and rewritten there (block 2 is published: copied) */
    CHECK(ifl_kv_seq_truncate(&f, &p, 9, 16) == 0 && f.n_published == 0);
    int32_t src[2], dst[2], n_copy = 0;
    CHECK(ifl_kv_seq_cow(&f, &p, 9, 4, src, dst, 2, &n_copy) == 0 && n_copy == 1);
    int32_t published = p.n_published;
    ifl_kv_seq_publish(&f, &p, x, 13);
    CHECK(f.n_published == 3 && p.published[f.blocks[0]] && p.published[f1]);
    CHECK(p.parent[f1] == f.blocks[0] && p.n_published == published + 2);
    CHECK(admit(&u, &p, x, 13, 0) == 12);
    CHECK(u.blocks[0] == f.blocks[0] && u.blocks[1] == f1 && u.blocks[2] == f.blocks[2]);
    ifl_kv_seq *all[] = {&a, &f, &h, &u};
    check_pool(&p, all, 4, "republish");
    release_all(&p, all, 4, (const int[]){0, 1, 2, 3}, "republish");
    /* every entry still reachable through its bucket once: the table is whole */
    int32_t n_in_table = 0;
    for (uint32_t k = 0; k <= p.bucket_mask; k++)
        for (int32_t b = p.bucket[k]; b >= 0 && n_in_table <= p.n_blocks; b = p.chain[b])
            n_in_table++;
    CHECKF(n_in_table == p.n_published, "%d in the table, %d published", n_in_table, p.n_published);
    ifl_kv_seq_free(&a, &p);
    ifl_kv_seq_free(&f, &p);
    ifl_kv_seq_free(&h, &p);
    ifl_kv_seq_free(&u, &p);
    ifl_kv_pool_free(&p);
}

/* Children and grandchildren forked at different points, released in several orders. */
static void test_release_orders(void)
{
    static const int orders[4][5] = {
        {0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}, {1, 4, 0, 3, 2}};
    int32_t t[32];
    fill(t, 32, 1100);
    for (int o = 0; o < 4; o++) {
        ifl_kv_pool p;
        pool_init(&p, 48);
        ifl_kv_seq seq[5];
        memset(seq, 0, sizeof seq);
        ifl_kv_seq *all[5];
        for (int k = 0; k < 5; k++)
            all[k] = &seq[k];
        admit(&seq[0], &p, t, 11, 9); /* 5 blocks */
        ifl_kv_seq_publish(&seq[0], &p, t, 11);
        CHECK(ifl_kv_seq_fork(&seq[1], &seq[0], &p, 11, 20) == 0);
        CHECK(ifl_kv_seq_fork(&seq[2], &seq[0], &p, 8, 12) == 0);
        CHECK(ifl_kv_seq_fork(&seq[3], &seq[1], &p, 6, 30) == 0);
        int32_t src[4], dst[4], n_copy = 0;
        CHECK(ifl_kv_seq_cow(&seq[1], &p, 11, 3, src, dst, 4, &n_copy) == 0 && n_copy == 1);
        CHECK(ifl_kv_seq_fork(&seq[4], &seq[3], &p, 6, 7) == 0);
        CHECK(ifl_kv_seq_cow(&seq[3], &p, 6, 2, src, dst, 4, &n_copy) == 0 && n_copy == 2);
        check_pool(&p, all, 5, "release orders, forked");
        release_all(&p, all, 5, orders[o], "release orders");
        for (int k = 0; k < 5; k++)
            ifl_kv_seq_free(&seq[k], &p);
        ifl_kv_pool_free(&p);
    }
}

/* A child publishes its own generated tokens (the shared prompt block first, which the parent
 * then finds as its own); a later admission finds the shared prompt blocks and the child's. */
static void test_publish_child(void)
{
    ifl_kv_pool p;
    pool_init(&p, 24);
    int32_t prompt[6], child[16], other[16];
    fill(prompt, 6, 1300);
    memcpy(child, prompt, sizeof prompt);
    memcpy(other, prompt, sizeof prompt);
    for (int i = 6; i < 16; i++)
        child[i] = 2000 + i, other[i] = 3000 + i;
    ifl_kv_seq a = {0}, c = {0}, u = {0};
    admit(&a, &p, prompt, 6, 10); /* 4 blocks: 1 full prompt block, 1 partial */
    CHECK(ifl_kv_seq_fork(&c, &a, &p, 6, 16) == 0);
    int32_t b0 = a.blocks[0], b1 = a.blocks[1];
    /* the child generates 7 tokens (positions 6 .. 12), copying the shared partial block first */
    int32_t src[4], dst[4], n_copy = 0;
    for (int32_t pos = 6; pos < 13; pos++)
        CHECK(ifl_kv_seq_cow(&c, &p, pos, 1, src, dst, 4, &n_copy) == 0);
    CHECK(n_copy == 1 && src[0] == b1 && dst[0] == c.blocks[1] && c.n_spare == 0);
    ifl_kv_seq_publish(&c, &p, child, 13);
    CHECK(c.n_published == 3 && p.n_published == 3 && p.published[b0] && c.blocks[0] == b0);
    CHECK(p.published[c.blocks[1]] && !p.published[b1]);
    /* the parent generates 2 (in place: the last holder) and publishes: block 0 is its own */
    for (int32_t pos = 6; pos < 8; pos++)
        CHECK(ifl_kv_seq_cow(&a, &p, pos, 1, src, dst, 4, &n_copy) == 0);
    CHECK(n_copy == 1 && a.n_spare == 0 && a.blocks[1] == b1);
    ifl_kv_seq_publish(&a, &p, other, 8);
    CHECK(a.n_published == 2 && a.canon == b1 && p.n_published == 4 && p.parent[b1] == b0);
    ifl_kv_seq *all[] = {&a, &c, &u};
    check_pool(&p, all, 3, "publish child");
    /* the child's tokens: the shared prompt block, the child's two */
    CHECK(admit(&u, &p, child, 14, 2) == 12);
    CHECK(u.blocks[0] == b0 && u.blocks[1] == c.blocks[1] && u.blocks[2] == c.blocks[2]);
    ifl_kv_seq_release(&u, &p);
    /* the prompt and other tokens: the shared prompt block and the parent's */
    CHECK(admit(&u, &p, other, 10, 0) == 8 && u.blocks[0] == b0 && u.blocks[1] == b1);
    check_pool(&p, all, 3, "publish child, admitted");
    release_all(&p, all, 3, (const int[]){1, 2, 0}, "publish child");
    ifl_kv_seq_free(&a, &p);
    ifl_kv_seq_free(&c, &p);
    ifl_kv_seq_free(&u, &p);
    ifl_kv_pool_free(&p);
}

int main(void)
{
    test_fork_full();
    test_fork_partial();
    test_fork_eight();
    test_cow_published();
    test_fork_short();
    test_truncate_published();
    test_truncate_sizes();
    test_republish_stale();
    test_release_orders();
    test_publish_child();
    return test_finish("test_kv_fork");
}
