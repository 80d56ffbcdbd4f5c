/* fifo.h: one bounded first-in-first-out queue of intrusive nodes between threads: the server's
 * event queue (batcher and history threads -> service thread), the history thread's jobs and the
 * request log's records all use it.
 *
 * A node is an ifl_fifo_node embedded in the producer's struct (first member, or found with
 * offsetof); the queue never allocates, so a push cannot fail for memory. The bound counts nodes
 * *held*: queued, plus taken by the consumer and not yet given back with ifl_fifo_done (a consumer
 * that keeps a batch for a retry keeps it counted). Pushes may ignore the bound (`force`), for the
 * records that must not be dropped. Once closed, pushes are refused and waits return.
 *
 * Threads: every function may be called from any thread; all state is guarded by the queue's own
 * lock. on_nonempty runs under that lock (it must be quick and must not touch the queue): the
 * server uses it to wake its service loop, and clearing it under the lock (ifl_fifo_set_wake) is
 * how the loop's owner makes sure nobody wakes a loop that is gone. */
#ifndef IFL_FIFO_H
#define IFL_FIFO_H

#include <pthread.h>
#include <stdint.h>

typedef struct ifl_fifo_node {
    struct ifl_fifo_node *next;
} ifl_fifo_node;

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;           /* {lock} signalled on push and close */
    ifl_fifo_node *head, *tail;    /* {lock} */
    int64_t queued;                /* {lock} nodes in the list */
    int64_t held;                  /* {lock} queued + taken and not yet done */
    int64_t cap;                   /* most nodes held (0: no bound); fixed at init */
    int closed;                    /* {lock} */
    void (*on_nonempty)(void *ud); /* {lock} called when a push finds the list empty */
    void *wake_ud;                 /* {lock} */
} ifl_fifo;

typedef enum { IFL_FIFO_OK = 0, IFL_FIFO_FULL = 1, IFL_FIFO_CLOSED = 2 } ifl_fifo_status;

void ifl_fifo_init(ifl_fifo *q, int64_t cap);
void ifl_fifo_destroy(ifl_fifo *q); /* the nodes still queued are the caller's (take them first) */

/* Sets (or with NULL clears) the wake-up call, under the queue's lock. */
void ifl_fifo_set_wake(ifl_fifo *q, void (*on_nonempty)(void *ud), void *ud);

/* Appends n. FULL when the bound is reached (unless force), CLOSED after ifl_fifo_close: the node
 * stays the caller's. */
ifl_fifo_status ifl_fifo_push(ifl_fifo *q, ifl_fifo_node *n, int force);

/* Takes every queued node, oldest first (NULL when empty); *count (optional) gets how many. They
 * stay held until ifl_fifo_done. */
ifl_fifo_node *ifl_fifo_take_all(ifl_fifo *q, int64_t *count);

/* Takes the oldest node, waiting for one up to timeout_ms (< 0: no limit, 0: no wait). NULL on
 * timeout, or when the queue is closed and empty. It stays held until ifl_fifo_done. */
ifl_fifo_node *ifl_fifo_pop_wait(ifl_fifo *q, int32_t timeout_ms);

/* Waits up to timeout_ms (< 0: no limit) until something is queued or the queue is closed. */
void ifl_fifo_wait(ifl_fifo *q, int32_t timeout_ms);

/* Waits up to timeout_ms (< 0: no limit) until the queue is closed: pushes do not end the wait. A
 * consumer's sleep between batches that only a stop cuts short. */
void ifl_fifo_wait_closed(ifl_fifo *q, int32_t timeout_ms);

/* The consumer is finished with k taken nodes: they no longer count towards the bound. */
void ifl_fifo_done(ifl_fifo *q, int64_t k);

/* Refuses further pushes and wakes every waiter. What is queued stays to be taken. */
void ifl_fifo_close(ifl_fifo *q);
int ifl_fifo_is_closed(ifl_fifo *q);

/* Nodes held now (queued + taken, not done). */
int64_t ifl_fifo_held(ifl_fifo *q);

#endif
