/* batcher_log.h: the log of batcher events and step records that test_batcher.c reads: the
 * on_event/on_step callbacks it gives its batchers, waiting for events, where an event came in the
 * order of arrival, a finished request's events checked for shape, which steps held which requests,
 * the median decode-only step time. Static functions for that one test, not a library. */
#ifndef IFL_BATCHER_LOG_H
#define IFL_BATCHER_LOG_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher.h"
#include "testutil.h"

typedef struct {
    ifl_event ev;
    char *text;   /* copy of ev.text */
    ifl_logprob *lp; /* copy of ev.lp (one entry for a token, n_lp for a prompt event) */
    uint64_t seq; /* global order of arrival */
} logged;

/* helpers not every test that includes this uses */
#define LOG_MAYBE_UNUSED __attribute__((unused))

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_cond = PTHREAD_COND_INITIALIZER;
static logged *evlog;
static size_t n_log, cap_log;
static ifl_step_record *steps;
static uint64_t **step_ids;
static uint8_t **step_pre;
static size_t n_steps, cap_steps;

static void on_event(void *ud, const ifl_event *ev)
{
    (void)ud;
    pthread_mutex_lock(&log_lock);
    if (n_log == cap_log) {
        cap_log = cap_log ? 2 * cap_log : 4096;
        evlog = realloc(evlog, cap_log * sizeof *evlog);
    }
    logged *l = &evlog[n_log];
    l->ev = *ev;
    l->text = NULL;
    if (ev->type == IFL_EV_TOKEN) {
        l->text = malloc(ev->text_len + 1);
        memcpy(l->text, ev->text, ev->text_len);
        l->text[ev->text_len] = 0;
    }
    l->ev.text = l->text;
    l->ev.message = NULL;
    l->lp = NULL;
    size_t n_lp = ev->type == IFL_EV_PROMPT ? (size_t)ev->n_lp : 1;
    if (ev->lp) {
        l->lp = malloc(n_lp * sizeof *l->lp);
        memcpy(l->lp, ev->lp, n_lp * sizeof *l->lp);
    }
    l->ev.lp = l->lp;
    l->seq = n_log++;
    pthread_cond_broadcast(&log_cond);
    pthread_mutex_unlock(&log_lock);
}

static void on_step(void *ud, const ifl_step_record *r)
{
    (void)ud;
    pthread_mutex_lock(&log_lock);
    if (n_steps == cap_steps) {
        cap_steps = cap_steps ? 2 * cap_steps : 1024;
        steps = realloc(steps, cap_steps * sizeof *steps);
        step_ids = realloc(step_ids, cap_steps * sizeof *step_ids);
        step_pre = realloc(step_pre, cap_steps * sizeof *step_pre);
    }
    steps[n_steps] = *r;
    step_ids[n_steps] = malloc((size_t)r->n_seqs * sizeof(uint64_t));
    step_pre[n_steps] = malloc((size_t)r->n_seqs);
    memcpy(step_ids[n_steps], r->request_ids, (size_t)r->n_seqs * sizeof(uint64_t));
    memcpy(step_pre[n_steps], r->is_prefill, (size_t)r->n_seqs);
    n_steps++;
    pthread_mutex_unlock(&log_lock);
}

static void log_clear(void)
{
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        free(evlog[i].text);
        free(evlog[i].lp);
    }
    n_log = 0;
    for (size_t i = 0; i < n_steps; i++) {
        free(step_ids[i]);
        free(step_pre[i]);
    }
    n_steps = 0;
    pthread_mutex_unlock(&log_lock);
}

static LOG_MAYBE_UNUSED int count_events(uint64_t id, ifl_event_type t)
{
    int n = 0;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++)
        n += evlog[i].ev.request_id == id && evlog[i].ev.type == t;
    pthread_mutex_unlock(&log_lock);
    return n;
}

/* Waits until request id has at least n events of type t. */
static LOG_MAYBE_UNUSED void wait_events(uint64_t id, ifl_event_type t, int n)
{
    pthread_mutex_lock(&log_lock);
    for (;;) {
        int c = 0;
        for (size_t i = 0; i < n_log; i++)
            c += evlog[i].ev.request_id == id && evlog[i].ev.type == t;
        if (c >= n)
            break;
        pthread_cond_wait(&log_cond, &log_lock);
    }
    pthread_mutex_unlock(&log_lock);
}

/* Global arrival index of the k-th event of type t of request id, or -1. */
static LOG_MAYBE_UNUSED long event_seq(uint64_t id, ifl_event_type t, int k)
{
    long at = -1;
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++)
        if (evlog[i].ev.request_id == id && evlog[i].ev.type == t && k-- == 0) {
            at = (long)evlog[i].seq;
            break;
        }
    pthread_mutex_unlock(&log_lock);
    return at;
}

/* The tokens and text of a finished request, checked for shape: queued first, started once,
 * tokens 0..n-1 in order, one done last. Returns the token count. */
static LOG_MAYBE_UNUSED int collect(uint64_t id, int32_t *ids, int cap, char *text, size_t text_cap, ifl_event *done)
{
    int n_tok = 0, n_done = 0, n_started = 0, bad_order = 0, seen_queued = 0;
    size_t tl = 0;
    if (done) /* a request with no done event (a failure reported below) leaves it zeroed */
        memset(done, 0, sizeof *done);
    pthread_mutex_lock(&log_lock);
    for (size_t i = 0; i < n_log; i++) {
        const ifl_event *e = &evlog[i].ev;
        if (e->request_id != id)
            continue;
        switch (e->type) {
        case IFL_EV_QUEUED:
            seen_queued = 1;
            bad_order |= n_started || n_tok || n_done;
            break;
        case IFL_EV_STARTED:
            n_started++;
            bad_order |= n_tok || n_done || !seen_queued;
            break;
        case IFL_EV_TOKEN:
            bad_order |= e->index != n_tok || n_done || !n_started;
            if (n_tok < cap)
                ids[n_tok] = e->token;
            if (text && tl + e->text_len < text_cap) {
                memcpy(text + tl, e->text, e->text_len);
                tl += e->text_len;
            }
            n_tok++;
            break;
        case IFL_EV_DONE:
            n_done++;
            if (done)
                *done = *e;
            break;
        case IFL_EV_PROMPT:
            bad_order |= n_tok || n_done || !n_started;
            break;
        }
    }
    pthread_mutex_unlock(&log_lock);
    if (text)
        text[tl] = 0;
    CHECKF(n_done == 1 && !bad_order && n_started <= 1,
           "request %llu: %d done events, %d started, events out of order: %d",
           (unsigned long long)id, n_done, n_started, bad_order);
    return n_tok;
}

/* In how many of the recorded steps `late` ran, and in how many of those all of ids[0..n) ran too
 * ({log_lock} held by the caller). */
static LOG_MAYBE_UNUSED void steps_with(uint64_t late, const uint64_t *ids, int n, int *n_late,
                                        int *n_all)
{
    *n_late = *n_all = 0;
    for (size_t s = 0; s < n_steps; s++) {
        int has_late = 0, others = 0;
        for (int32_t k = 0; k < steps[s].n_seqs; k++) {
            has_late |= step_ids[s][k] == late;
            for (int i = 0; i < n; i++)
                others += step_ids[s][k] == ids[i];
        }
        *n_late += has_late;
        *n_all += has_late && others == n;
    }
}

static LOG_MAYBE_UNUSED int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median duration of the decode-only steps recorded so far (information). */
static LOG_MAYBE_UNUSED double median_decode_ms(int *n_out)
{
    static double ms[4096];
    int n = 0;
    pthread_mutex_lock(&log_lock);
    for (size_t s = 0; s < n_steps && n < 4096; s++)
        if (steps[s].prefill_tokens == 0)
            ms[n++] = steps[s].ms;
    pthread_mutex_unlock(&log_lock);
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    *n_out = n;
    return n ? ms[n / 2] : 0;
}

#endif
