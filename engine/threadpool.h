/* threadpool.h: a fixed set of worker threads that run one function on every thread at once.
 *
 * Built for the forward pass: hundreds of short parallel regions per step, so workers spin briefly
 * between regions and only then sleep on a condition variable. The calling thread takes part as
 * thread 0. Several threads may share one pool (two batchers' backends): their calls to
 * ifl_threadpool_run take turns, region by region, so the cores are never oversubscribed. */
#ifndef IFL_THREADPOOL_H
#define IFL_THREADPOOL_H

typedef struct ifl_threadpool ifl_threadpool;

/* fn(ctx, ith, nth) runs once on each of the nth threads, ith = 0..nth-1. */
typedef void (*ifl_task_fn)(void *ctx, int ith, int nth);

/* n_threads counts the caller; 1 means no worker threads. NULL on failure. */
ifl_threadpool *ifl_threadpool_new(int n_threads);
void ifl_threadpool_free(ifl_threadpool *tp);
int ifl_threadpool_size(const ifl_threadpool *tp);

/* Runs fn on all threads and returns when every one has finished. Thread-safe: concurrent callers
 * are serialised. */
void ifl_threadpool_run(ifl_threadpool *tp, ifl_task_fn fn, void *ctx);

#endif
