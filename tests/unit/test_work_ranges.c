/* test_work_ranges.c: the per-share item ranges attention claims from (engine/work_ranges.c):
 * one share alone walks its own range front to back, then takes from the back of the fullest
 * other range; with every share of a thread pool claiming at once (more shares than cores, items
 * from none to thousands, a share that sleeps first so that the others take its items), every
 * item comes out exactly once per reset; bad sizes are refused, a negative count hands out none. */
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "rng.h"
#include "testutil.h"
#include "threadpool.h"
#include "work_ranges.h"

#define MAX_ITEMS 5000

typedef struct {
    ifl_work_ranges *w;
    atomic_int seen[MAX_ITEMS];
    atomic_int bad; /* items out of range */
    int sleeper;    /* this share sleeps 1 ms before it claims; -1: none */
} claim_run;

static void claim_all(void *ctx, int ith, int nth)
{
    (void)nth;
    claim_run *c = ctx;
    if (ith == c->sleeper)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    for (int32_t it; (it = ifl_work_ranges_claim(c->w, ith)) >= 0;) {
        if (it >= MAX_ITEMS)
            atomic_fetch_add(&c->bad, 1);
        else
            atomic_fetch_add(&c->seen[it], 1);
    }
}

/* One share at a time, so the order is fixed: 3 shares over 10 items ([0,3) [3,6) [6,10)). */
static void check_order(void)
{
    ifl_work_ranges w;
    CHECK(ifl_work_ranges_init(&w, 3) == 0);
    ifl_work_ranges_reset(&w, 10);
    int32_t got[12];
    int n = 0;
    for (int32_t it; n < 12 && (it = ifl_work_ranges_claim(&w, 1)) >= 0;)
        got[n++] = it;
    /* its own 3, 4, 5; then the back of the fullest: share 2's (4 left) 9, then 8 (3 left against
     * share 0's 3: the first found, share 0, wins ties) ... */
    int32_t want[10] = {3, 4, 5, 9, 2, 8, 1, 7, 0, 6};
    CHECKF(n == 10, "share 1 alone claimed %d items, not 10", n);
    for (int i = 0; i < n && i < 10; i++)
        CHECKF(got[i] == want[i], "claim %d: item %d, want %d", i, got[i], want[i]);
    CHECK(ifl_work_ranges_claim(&w, 0) == -1);
    ifl_work_ranges_reset(&w, 0);
    CHECK(ifl_work_ranges_claim(&w, 2) == -1);
    ifl_work_ranges_reset(&w, -7); /* a negative count hands out nothing */
    for (int s = 0; s < 3; s++)
        CHECKF(ifl_work_ranges_claim(&w, s) == -1, "share %d claimed an item of a -7 reset", s);
    ifl_work_ranges_reset(&w, 2); /* fewer items than shares: [0,0) [0,1) [1,2) */
    CHECK(ifl_work_ranges_claim(&w, 0) == 0);
    CHECK(ifl_work_ranges_claim(&w, 0) == 1);
    CHECK(ifl_work_ranges_claim(&w, 1) == -1);
    ifl_work_ranges_free(&w);
    ifl_work_ranges_free(&w); /* twice is harmless */
}

int main(void)
{
    ifl_work_ranges w;
    CHECK(ifl_work_ranges_init(&w, 0) == -1);
    CHECK(ifl_work_ranges_init(&w, -3) == -1);
    check_order();

    int shares = 5; /* more than the machine's 2 cores: shares wait on each other */
    ifl_threadpool *tp = ifl_threadpool_new(shares);
    CHECK(tp != NULL);
    if (!tp)
        return 1;
    CHECK(ifl_work_ranges_init(&w, shares) == 0);
    static claim_run c;
    ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    int rounds = test_quick() ? 40 : 400, wrong = 0;
    for (int r = 0; r < rounds; r++) {
        int32_t n = r % 4 == 0 ? (int32_t)(r % 7) : (int32_t)(ifl_rng_next(&rng) % MAX_ITEMS);
        for (int i = 0; i < MAX_ITEMS; i++)
            atomic_store(&c.seen[i], 0);
        atomic_store(&c.bad, 0);
        c.w = &w;
        c.sleeper = r % 3 == 0 ? r % shares : -1;
        ifl_work_ranges_reset(&w, n);
        ifl_threadpool_run(tp, claim_all, &c);
        int ok = atomic_load(&c.bad) == 0;
        for (int i = 0; i < MAX_ITEMS; i++)
            ok &= atomic_load(&c.seen[i]) == (i < n);
        if (!ok && wrong++ < 3)
            fprintf(stderr, "round %d: %d items not each claimed exactly once\n", r, n);
    }
    CHECKF(wrong == 0, "%d of %d rounds lost or repeated items", wrong, rounds);
    printf("  %d rounds, %d shares on one pool: every item claimed exactly once in %d\n", rounds,
           shares, rounds - wrong);
    ifl_work_ranges_free(&w);
    ifl_threadpool_free(tp);
    if (test_failures)
        return 1;
    printf("test_work_ranges: ok\n");
    return 0;
}
