/* threadpool.c: spin-then-sleep worker pool (see threadpool.h).
 *
 * The caller publishes (fn, ctx), clears the claims and bumps `generation`; a worker that sees a
 * new generation claims its share (ith) and runs it, then increments `done`. Workers spin for
 * about SPIN_NS after their last task before blocking on `wake`, so back-to-back regions of a
 * forward pass cost no system calls.
 * Shares can be stolen: when the caller has finished its own share it claims every share no worker
 * has claimed yet and runs it itself. A worker that the OS has not scheduled (the cores are shared
 * with another process, a browser, the server's own threads) then costs the region nothing instead
 * of a scheduler time slice; without this, one preempted worker stalled every one of a step's
 * hundreds of regions and a 0.6 ms step took 25-100 ms. fn(ctx, ith, nth) never depends on which
 * thread runs share ith, and each share runs exactly once. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_NS 2000000 /* 2 ms */

typedef struct {
    ifl_threadpool *tp;
    int ith;
    pthread_t thread;
} worker;

struct ifl_threadpool {
    int n_threads;
    worker *workers;
    ifl_task_fn fn; /* {generation} published before the bump */
    void *ctx;
    atomic_uint generation;
    atomic_int done;
    atomic_int n_sleeping;
    atomic_int stop;
    atomic_int *claimed;      /* (n_threads) 1 once share ith of the current region is taken */
    pthread_mutex_t lock;     /* guards sleeping on `wake` */
    pthread_mutex_t run_lock; /* one ifl_threadpool_run at a time (a pool shared by backends) */
    pthread_cond_t wake;
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Runs on each worker thread. */
static void *worker_main(void *arg)
{
    worker *w = arg;
    ifl_threadpool *tp = w->tp;
    unsigned seen = 0; /* the generation at creation: no task can have been published before */
    for (;;) {
        unsigned g;
        uint64_t spin_start = now_ns();
        int polls = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&tp->stop, memory_order_acquire))
                return NULL;
            CPU_RELAX();
            if (++polls % 256 == 0 && now_ns() - spin_start > SPIN_NS) {
                pthread_mutex_lock(&tp->lock);
                atomic_fetch_add(&tp->n_sleeping, 1);
                while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                    pthread_cond_wait(&tp->wake, &tp->lock);
                atomic_fetch_sub(&tp->n_sleeping, 1);
                pthread_mutex_unlock(&tp->lock);
                spin_start = now_ns();
            }
        }
        seen = g;
        if (atomic_load_explicit(&tp->stop, memory_order_acquire))
            return NULL;
        /* The claim's acquire pairs with the caller's release when it cleared the claims, after
         * publishing fn and ctx. If the caller already ran this share (and maybe started the next
         * region), the claim fails, or it succeeds for the next region's share, which is then
         * the one run: either way each share runs once. */
        if (atomic_exchange_explicit(&tp->claimed[w->ith], 1, memory_order_acq_rel) == 0) {
            tp->fn(tp->ctx, w->ith, tp->n_threads);
            atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel);
        }
    }
}

ifl_threadpool *ifl_threadpool_new(int n_threads)
{
    if (n_threads < 1)
        n_threads = 1;
    ifl_threadpool *tp = calloc(1, sizeof *tp);
    if (!tp)
        return NULL;
    tp->n_threads = n_threads;
    pthread_mutex_init(&tp->lock, NULL);
    pthread_mutex_init(&tp->run_lock, NULL);
    pthread_cond_init(&tp->wake, NULL);
    if (n_threads > 1) {
        tp->workers = calloc((size_t)n_threads, sizeof *tp->workers);
        tp->claimed = calloc((size_t)n_threads, sizeof *tp->claimed);
        for (int i = 0; tp->claimed && i < n_threads; i++)
            atomic_init(&tp->claimed[i], 1); /* nothing to claim before the first region */
        if (!tp->workers || !tp->claimed) {
            ifl_threadpool_free(tp);
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            tp->workers[i].tp = tp;
            tp->workers[i].ith = i;
            if (pthread_create(&tp->workers[i].thread, NULL, worker_main, &tp->workers[i])) {
                tp->n_threads = i; /* join those started */
                ifl_threadpool_free(tp);
                return NULL;
            }
        }
    }
    return tp;
}

void ifl_threadpool_free(ifl_threadpool *tp)
{
    if (!tp)
        return;
    atomic_store(&tp->stop, 1);
    pthread_mutex_lock(&tp->lock);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->lock);
    if (tp->workers)
        for (int i = 1; i < tp->n_threads; i++)
            pthread_join(tp->workers[i].thread, NULL);
    pthread_mutex_destroy(&tp->lock);
    pthread_mutex_destroy(&tp->run_lock);
    pthread_cond_destroy(&tp->wake);
    free(tp->workers);
    free(tp->claimed);
    free(tp);
}

int ifl_threadpool_size(const ifl_threadpool *tp)
{
    return tp->n_threads;
}

void ifl_threadpool_run(ifl_threadpool *tp, ifl_task_fn fn, void *ctx)
{
    if (tp->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&tp->run_lock);
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    for (int i = 1; i < tp->n_threads; i++)
        atomic_store_explicit(&tp->claimed[i], 0, memory_order_release);
    atomic_fetch_add(&tp->generation, 1); /* seq_cst: pairs with n_sleeping (Dekker) */
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->lock);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->lock);
    }
    fn(ctx, 0, tp->n_threads);
    /* steal the shares no worker has started */
    for (int i = 1; i < tp->n_threads; i++)
        if (atomic_exchange_explicit(&tp->claimed[i], 1, memory_order_acq_rel) == 0) {
            fn(ctx, i, tp->n_threads);
            atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel);
        }
    while (atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n_threads - 1)
        CPU_RELAX();
    pthread_mutex_unlock(&tp->run_lock);
}
