/* batcher_share.c: fairness before the queue and at admission (batcher.h, "Shares"). Which
 * session a waiting request may join the queue for, which session the next batch slot goes to,
 * and how long a refused client should wait before trying again. All of it runs under the
 * batcher's lock; the state it reads is batcher_impl.h's. */
#include <stdint.h>
#include <stdio.h>

#include "batcher_impl.h"
#include "util.h"

#define RETRY_MIN_MS 50
#define RETRY_MAX_MS 30000
#define RETRY_UNKNOWN_MS 1000 /* no admission measured yet */

int32_t batcher_queue_reserve(int32_t max_queue)
{
    return (max_queue + 3) / 4;
}

/* The wait until `admissions` more requests have been admitted: that many of the smoothed
 * intervals, and no shorter than the time since the last admission while requests waited (a batch
 * held by long requests admits nothing for a while, whatever the interval was before). */
static int32_t retry_after(const ifl_batcher *b, int64_t admissions)
{
    int64_t ms = b->admit_interval_us
                     ? (int64_t)(b->admit_interval_us / 1000) * (admissions < 1 ? 1 : admissions)
                     : RETRY_UNKNOWN_MS;
    if (b->backlog_since_us) {
        uint64_t now = ifl_now_us();
        int64_t since = now > b->backlog_since_us ? (int64_t)(now - b->backlog_since_us) / 1000 : 0;
        ms = since > ms ? since : ms;
    }
    return (int32_t)(ms < RETRY_MIN_MS ? RETRY_MIN_MS : ms > RETRY_MAX_MS ? RETRY_MAX_MS : ms);
}

ifl_submit_status batcher_queue_room(const ifl_batcher *b, const session_q *q,
                                     int32_t *retry_after_ms, ifl_err *err)
{
    const char *name = ifl_policy_name(b->p.policy);
    int32_t Q = b->p.max_queue, open = Q - batcher_queue_reserve(Q);
    *retry_after_ms = 0;
    if (b->n_waiting >= Q) {
        *retry_after_ms = retry_after(b, b->n_waiting - Q + 1);
        ifl_err_set(err, "the %s queue is full (%d waiting); try again in %d ms", name,
                    b->n_waiting, *retry_after_ms);
        return IFL_SUBMIT_QUEUE_FULL;
    }
    if (!q) /* nothing of this session waits: the kept places are for it */
        return IFL_SUBMIT_OK;
    if (b->n_waiting >= open) {
        *retry_after_ms = retry_after(b, b->n_waiting - open + 1);
        ifl_err_set(err,
                    "the %s queue holds %d requests and keeps its last %d places for sessions with "
                    "nothing waiting; this session has %d waiting: try again in %d ms",
                    name, b->n_waiting, Q - open, q->count, *retry_after_ms);
        return IFL_SUBMIT_QUEUE_FULL;
    }
    int32_t share = open / b->n_sq;
    share = share < 1 ? 1 : share;
    if (q->count >= share) {
        /* its next one leaves the queue after about one round of the sessions waiting */
        *retry_after_ms = retry_after(b, b->n_sq);
        ifl_err_set(err,
                    "this session has %d requests waiting in the %s queue, its share while %d "
                    "sessions wait (%d of %d places each); try again in %d ms",
                    q->count, name, b->n_sq, share, open, *retry_after_ms);
        return IFL_SUBMIT_QUEUE_FULL;
    }
    return IFL_SUBMIT_OK;
}

/* How many distinct sessions have a request running or waiting. */
static int32_t active_sessions(const ifl_batcher *b)
{
    int32_t n = b->n_sq;
    for (int32_t i = 0; i < b->n_running; i++) {
        uint64_t s = b->running[i]->session;
        int seen = 0;
        for (int32_t j = 0; j < i && !seen; j++)
            seen = b->running[j]->session == s;
        for (int32_t j = 0; j < b->n_sq && !seen; j++)
            seen = b->sq[j].session == s;
        n += !seen;
    }
    return n;
}

void batcher_shares_begin(ifl_batcher *b)
{
    int32_t active = active_sessions(b);
    b->batch_share = active ? (b->p.max_batch + active - 1) / active : b->p.max_batch;
    for (int32_t i = 0; i < b->n_sq; i++) {
        session_q *q = &b->sq[i];
        q->running = 0;
        for (int32_t j = 0; j < b->n_running; j++)
            q->running += b->running[j]->session == q->session;
    }
}

req *batcher_choose_next(ifl_batcher *b)
{
    if (!b->n_sq)
        return NULL;
    for (int32_t k = 0; k < b->n_sq; k++) {
        int32_t i = (b->rr + k) % b->n_sq;
        if (b->sq[i].running < b->batch_share) {
            b->rr = i;
            return b->sq[i].head;
        }
    }
    return b->sq[b->rr].head; /* every waiting session holds its share: the slot is not kept idle */
}

void batcher_note_admission(ifl_batcher *b, uint64_t now_us)
{
    if (b->backlog_since_us) {
        uint64_t dt = now_us - b->backlog_since_us;
        b->admit_interval_us = b->admit_interval_us ? (7 * b->admit_interval_us + dt) / 8 : dt;
    }
    b->backlog_since_us = b->n_waiting > 0 ? now_us : 0;
}
