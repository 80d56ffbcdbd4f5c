/* fifo.c: the bounded FIFO of fifo.h. Timed waits use CLOCK_MONOTONIC, so a change of the wall
 * clock neither shortens nor stretches them. */
#include "fifo.h"

#include <time.h>

void ifl_fifo_init(ifl_fifo *q, int64_t cap)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cond, &ca);
    pthread_condattr_destroy(&ca);
    q->head = q->tail = NULL;
    q->queued = q->held = 0;
    q->cap = cap > 0 ? cap : 0;
    q->closed = 0;
    q->on_nonempty = NULL;
    q->wake_ud = NULL;
}

void ifl_fifo_destroy(ifl_fifo *q)
{
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->cond);
}

void ifl_fifo_set_wake(ifl_fifo *q, void (*on_nonempty)(void *ud), void *ud)
{
    pthread_mutex_lock(&q->lock);
    q->on_nonempty = on_nonempty;
    q->wake_ud = ud;
    pthread_mutex_unlock(&q->lock);
}

ifl_fifo_status ifl_fifo_push(ifl_fifo *q, ifl_fifo_node *n, int force)
{
    ifl_fifo_status st = IFL_FIFO_OK;
    n->next = NULL;
    pthread_mutex_lock(&q->lock);
    if (q->closed) {
        st = IFL_FIFO_CLOSED;
    } else if (!force && q->cap && q->held >= q->cap) {
        st = IFL_FIFO_FULL;
    } else {
        int was_empty = !q->head;
        if (q->tail)
            q->tail->next = n;
        else
            q->head = n;
        q->tail = n;
        q->queued++;
        q->held++;
        pthread_cond_signal(&q->cond);
        if (was_empty && q->on_nonempty)
            q->on_nonempty(q->wake_ud);
    }
    pthread_mutex_unlock(&q->lock);
    return st;
}

ifl_fifo_node *ifl_fifo_take_all(ifl_fifo *q, int64_t *count)
{
    pthread_mutex_lock(&q->lock);
    ifl_fifo_node *all = q->head;
    if (count)
        *count = q->queued;
    q->head = q->tail = NULL;
    q->queued = 0;
    pthread_mutex_unlock(&q->lock);
    return all;
}

/* Waits on the condition until `deadline` ({lock} held); 0 when the deadline passed. */
static int wait_until(ifl_fifo *q, const struct timespec *deadline)
{
    if (!deadline) {
        pthread_cond_wait(&q->cond, &q->lock);
        return 1;
    }
    return pthread_cond_timedwait(&q->cond, &q->lock, deadline) == 0;
}

static const struct timespec *deadline_in(struct timespec *ts, int32_t timeout_ms)
{
    if (timeout_ms < 0)
        return NULL;
    clock_gettime(CLOCK_MONOTONIC, ts);
    int64_t ns = ts->tv_nsec + (int64_t)timeout_ms * 1000000;
    ts->tv_sec += (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
    return ts;
}

ifl_fifo_node *ifl_fifo_pop_wait(ifl_fifo *q, int32_t timeout_ms)
{
    struct timespec ts;
    const struct timespec *dl = timeout_ms ? deadline_in(&ts, timeout_ms) : NULL;
    pthread_mutex_lock(&q->lock);
    while (!q->head && !q->closed && timeout_ms && wait_until(q, dl))
        ;
    ifl_fifo_node *n = q->head;
    if (n) {
        q->head = n->next;
        if (!q->head)
            q->tail = NULL;
        q->queued--;
        n->next = NULL;
    }
    pthread_mutex_unlock(&q->lock);
    return n;
}

void ifl_fifo_wait(ifl_fifo *q, int32_t timeout_ms)
{
    struct timespec ts;
    const struct timespec *dl = deadline_in(&ts, timeout_ms);
    pthread_mutex_lock(&q->lock);
    while (!q->head && !q->closed && wait_until(q, dl))
        ;
    pthread_mutex_unlock(&q->lock);
}

void ifl_fifo_wait_closed(ifl_fifo *q, int32_t timeout_ms)
{
    struct timespec ts;
    const struct timespec *dl = deadline_in(&ts, timeout_ms);
    pthread_mutex_lock(&q->lock);
    while (!q->closed && wait_until(q, dl))
        ; /* a push's signal lands here too: wait on */
    pthread_mutex_unlock(&q->lock);
}

void ifl_fifo_done(ifl_fifo *q, int64_t k)
{
    pthread_mutex_lock(&q->lock);
    q->held -= k;
    if (q->held < q->queued)
        q->held =
            q->queued; /* more given back than was taken: a caller's bug, not a negative count */
    pthread_mutex_unlock(&q->lock);
}

void ifl_fifo_close(ifl_fifo *q)
{
    pthread_mutex_lock(&q->lock);
    q->closed = 1;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
}

int ifl_fifo_is_closed(ifl_fifo *q)
{
    pthread_mutex_lock(&q->lock);
    int c = q->closed;
    pthread_mutex_unlock(&q->lock);
    return c;
}

int64_t ifl_fifo_held(ifl_fifo *q)
{
    pthread_mutex_lock(&q->lock);
    int64_t h = q->held;
    pthread_mutex_unlock(&q->lock);
    return h;
}
