/* threadpool.c: spin-then-sleep worker pool (see threadpool.h).
 *
 * The caller publishes (fn, ctx) and bumps `generation`; workers that see a new generation run
 * their share and increment `done`. Workers spin for about SPIN_NS after their last task before
 * blocking on `wake`, so back-to-back regions of a forward pass cost no system calls. */
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
        tp->fn(tp->ctx, w->ith, tp->n_threads);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel);
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
        if (!tp->workers) {
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
    atomic_fetch_add(&tp->generation, 1); /* seq_cst: pairs with n_sleeping (Dekker) */
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->lock);
        pthread_cond_broadcast(&tp->wake);
        pthread_mutex_unlock(&tp->lock);
    }
    fn(ctx, 0, tp->n_threads);
    while (atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n_threads - 1)
        CPU_RELAX();
    pthread_mutex_unlock(&tp->run_lock);
}
