/* test_threadpool.c: the worker pool (engine/threadpool.c): every share of every region runs
 * exactly once, whichever thread runs it (workers claim their share; the caller steals the shares
 * of workers the OS has not scheduled), with more threads than cores, with busy threads competing
 * for the cores, and with two callers sharing one pool. Prints how long a region takes under
 * contention as evidence (not asserted: timing depends on the machine). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "threadpool.h"
#include "util.h"

#define MAX_T 16

typedef struct {
    atomic_int runs[MAX_T]; /* times share ith ran in this region */
    atomic_int bad_nth;
    long work; /* spin iterations per share */
} region;

static void task(void *ctx, int ith, int nth)
{
    region *r = ctx;
    if (nth < 1 || nth > MAX_T || ith < 0 || ith >= nth) {
        atomic_fetch_add(&r->bad_nth, 1);
        return;
    }
    volatile long x = 0;
    for (long i = 0; i < r->work; i++)
        x += i;
    atomic_fetch_add(&r->runs[ith], 1);
}

/* Runs n regions on tp; returns the number of regions where some share did not run exactly once. */
static int run_regions(ifl_threadpool *tp, int n, long work, double *us_per_region)
{
    int nth = ifl_threadpool_size(tp), bad = 0;
    region *r = calloc(1, sizeof *r);
    if (!r)
        return n;
    uint64_t t0 = ifl_now_us();
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < MAX_T; i++)
            atomic_store(&r->runs[i], 0);
        r->work = work;
        ifl_threadpool_run(tp, task, r);
        int ok = !atomic_load(&r->bad_nth);
        for (int i = 0; i < nth; i++)
            ok &= atomic_load(&r->runs[i]) == 1;
        bad += !ok;
    }
    *us_per_region = (double)(ifl_now_us() - t0) / n;
    free(r);
    return bad;
}

static atomic_int stop_busy;
static void *busy_main(void *arg)
{
    (void)arg;
    volatile long x = 0;
    while (!atomic_load_explicit(&stop_busy, memory_order_relaxed))
        x++;
    return NULL;
}

typedef struct {
    ifl_threadpool *tp;
    int bad;
    double us;
} caller_arg;

static void *caller_main(void *arg)
{
    caller_arg *a = arg;
    a->bad = run_regions(a->tp, test_quick() ? 500 : 3000, 200, &a->us);
    return NULL;
}

int main(void)
{
    int cores = ifl_n_cores();
    int quick = test_quick();
    int n_regions = quick ? 1000 : 20000;
    double us;
    /* 1. threads = cores, then more threads than cores (workers often not scheduled) */
    int sizes[] = {1, cores, cores * 2 + 1 > MAX_T ? MAX_T : cores * 2 + 1};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        ifl_threadpool *tp = ifl_threadpool_new(sizes[s]);
        CHECK(tp != NULL);
        if (!tp)
            return 1;
        int bad = run_regions(tp, n_regions, 100, &us);
        printf("  %2d threads on %d cores: %d regions, %d wrong, %.1f us per region\n", sizes[s],
               cores, n_regions, bad, us);
        CHECK(bad == 0);
        ifl_threadpool_free(tp);
    }
    /* 2. busy threads compete for every core */
    pthread_t busy[MAX_T];
    int n_busy = cores;
    for (int i = 0; i < n_busy; i++)
        CHECK(pthread_create(&busy[i], NULL, busy_main, NULL) == 0);
    ifl_threadpool *tp = ifl_threadpool_new(cores);
    int bad = run_regions(tp, quick ? 200 : 2000, 2000, &us);
    printf("  %d threads, %d busy threads competing: %d wrong, %.1f us per region\n", cores, n_busy,
           bad, us);
    CHECK(bad == 0);
    atomic_store(&stop_busy, 1);
    for (int i = 0; i < n_busy; i++)
        pthread_join(busy[i], NULL);
    /* 3. two callers share one pool: their regions take turns */
    caller_arg a = {.tp = tp}, b = {.tp = tp};
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, caller_main, &a) == 0);
    CHECK(pthread_create(&tb, NULL, caller_main, &b) == 0);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    printf("  two callers sharing %d threads: %d + %d wrong regions\n", cores, a.bad, b.bad);
    CHECK(a.bad == 0 && b.bad == 0);
    ifl_threadpool_free(tp);
    if (test_failures)
        return 1;
    printf("test_threadpool: ok\n");
    return 0;
}
