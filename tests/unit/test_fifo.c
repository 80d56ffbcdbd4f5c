/* test_fifo.c: the bounded FIFO of intrusive nodes (common/fifo.c): first in first out; the bound
 * counts nodes held (queued, and taken but not yet done); forced pushes pass the bound; a closed
 * queue refuses pushes, wakes its waiters and still hands out what it holds; take_all's count; a
 * timed pop that finds nothing returns NULL, not early; the on_nonempty hook once per
 * empty->non-empty transition, and never once cleared; and four producer threads against one
 * consumer (every node exactly once, each producer's in its order, the bound never passed), which
 * under ThreadSanitizer also checks that a push publishes the node's payload to the consumer.
 * What it is not: a test of the queues' users (the server's event queue, the request log). */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fifo.h"
#include "testutil.h"

typedef struct {
    ifl_fifo_node node; /* first: a node is its item */
    int producer;
    int seq;
} item;

static double mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void test_order(void)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 0);
    item it[10];
    for (int i = 0; i < 10; i++) {
        it[i].seq = i;
        CHECK(ifl_fifo_push(&q, &it[i].node, 0) == IFL_FIFO_OK);
    }
    int order_ok = 1;
    for (int i = 0; i < 5; i++) {
        item *x = (item *)ifl_fifo_pop_wait(&q, 0);
        order_ok &= x && x->seq == i;
    }
    int64_t count = -1;
    ifl_fifo_node *rest = ifl_fifo_take_all(&q, &count);
    int k = 5;
    for (ifl_fifo_node *n = rest; n; n = n->next)
        order_ok &= ((item *)n)->seq == k++;
    CHECKF(order_ok && k == 10, "5 popped then 5 taken, in push order (last seq %d)", k - 1);
    CHECKF(count == 5, "take_all count %lld, expected 5", (long long)count);
    CHECK(ifl_fifo_pop_wait(&q, 0) == NULL);
    ifl_fifo_done(&q, 10);
    CHECK(ifl_fifo_held(&q) == 0);
    printf("order: 10 nodes out in push order (5 popped, 5 taken at once)\n");
    ifl_fifo_destroy(&q);
}

static void test_bound_and_force(void)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 3);
    item it[6];
    for (int i = 0; i < 3; i++)
        CHECK(ifl_fifo_push(&q, &it[i].node, 0) == IFL_FIFO_OK);
    CHECK(ifl_fifo_push(&q, &it[3].node, 0) == IFL_FIFO_FULL);
    /* taken but not done: still held, still full */
    CHECK(ifl_fifo_pop_wait(&q, 0) == &it[0].node);
    CHECK(ifl_fifo_held(&q) == 3);
    CHECK(ifl_fifo_push(&q, &it[3].node, 0) == IFL_FIFO_FULL);
    int64_t n = 0;
    CHECK(ifl_fifo_take_all(&q, &n) == &it[1].node && n == 2);
    CHECKF(ifl_fifo_held(&q) == 3, "held %lld after taking everything, none done: expected 3",
           (long long)ifl_fifo_held(&q));
    CHECK(ifl_fifo_push(&q, &it[3].node, 0) == IFL_FIFO_FULL);
    ifl_fifo_done(&q, 1);
    CHECK(ifl_fifo_held(&q) == 2);
    CHECK(ifl_fifo_push(&q, &it[3].node, 0) == IFL_FIFO_OK);
    CHECK(ifl_fifo_push(&q, &it[4].node, 0) == IFL_FIFO_FULL);
    /* force passes the bound */
    CHECK(ifl_fifo_push(&q, &it[4].node, 1) == IFL_FIFO_OK);
    CHECK(ifl_fifo_push(&q, &it[5].node, 1) == IFL_FIFO_OK);
    int64_t held = ifl_fifo_held(&q);
    CHECKF(held == 5, "held %lld after 2 done-less + 3 queued (2 forced): expected 5",
           (long long)held);
    CHECK(ifl_fifo_push(&q, &it[0].node, 0) == IFL_FIFO_FULL);
    CHECK(ifl_fifo_take_all(&q, &n) == &it[3].node && n == 3);
    ifl_fifo_done(&q, 5);
    CHECK(ifl_fifo_held(&q) == 0);
    printf("bound 3: full with 3 queued, with 1 taken + 2 queued and with 3 taken not done; "
           "room after one done; forced pushes to held %lld\n",
           (long long)held);
    ifl_fifo_destroy(&q);
}

typedef struct {
    ifl_fifo *q;
    int use_wait; /* 0: pop_wait, 1: ifl_fifo_wait, 2: ifl_fifo_wait_closed */
    ifl_fifo_node *got;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int returned; /* {lock} */
} waiter;

static void *waiter_main(void *arg)
{
    waiter *w = arg;
    ifl_fifo_node *got = NULL;
    if (w->use_wait == 2)
        ifl_fifo_wait_closed(w->q, -1);
    else if (w->use_wait)
        ifl_fifo_wait(w->q, -1);
    else
        got = ifl_fifo_pop_wait(w->q, -1);
    pthread_mutex_lock(&w->lock);
    w->got = got;
    w->returned = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

/* Waits up to 60 s (a guard against a hang, not a speed test) for the waiter to return. */
static int waiter_returned(waiter *w)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60;
    pthread_mutex_lock(&w->lock);
    while (!w->returned && pthread_cond_timedwait(&w->cond, &w->lock, &dl) == 0)
        ;
    int r = w->returned;
    pthread_mutex_unlock(&w->lock);
    return r;
}

static const char *const WAIT_NAMES[] = {"pop_wait", "wait", "wait_closed"};

/* A thread blocked without a time limit on an empty queue returns once the queue is closed (and
 * wait_closed not before, even when something is pushed). */
static void close_wakes(int use_wait)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 0);
    waiter w = {.q = &q, .use_wait = use_wait};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, waiter_main, &w)) {
        CHECKF(0, "pthread_create for the %s waiter", WAIT_NAMES[use_wait]);
        return;
    }
    sleep_ms(50); /* most likely blocked by now; if not, it finds the queue closed */
    item pushed;
    if (use_wait == 2) {
        CHECK(ifl_fifo_push(&q, &pushed.node, 0) == IFL_FIFO_OK);
        sleep_ms(50);
        pthread_mutex_lock(&w.lock);
        CHECKF(!w.returned, "wait_closed(-1) returned after a push, before any close");
        pthread_mutex_unlock(&w.lock);
    }
    ifl_fifo_close(&q);
    int r = waiter_returned(&w);
    CHECKF(r, "a %s(-1) waiter still blocked 60 s after close", WAIT_NAMES[use_wait]);
    if (!r)
        exit(1); /* cannot join it */
    pthread_join(t, NULL);
    CHECK(w.got == NULL);
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    ifl_fifo_destroy(&q);
}

static void test_close(void)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 0);
    item it[4];
    for (int i = 0; i < 3; i++) {
        it[i].seq = i;
        CHECK(ifl_fifo_push(&q, &it[i].node, 0) == IFL_FIFO_OK);
    }
    CHECK(!ifl_fifo_is_closed(&q));
    ifl_fifo_close(&q);
    CHECK(ifl_fifo_is_closed(&q));
    CHECK(ifl_fifo_push(&q, &it[3].node, 0) == IFL_FIFO_CLOSED);
    CHECK(ifl_fifo_push(&q, &it[3].node, 1) == IFL_FIFO_CLOSED);
    /* what was queued still comes out, then NULL without waiting */
    int got = 0;
    ifl_fifo_node *n;
    while ((n = ifl_fifo_pop_wait(&q, -1)))
        CHECK(((item *)n)->seq == got++);
    CHECKF(got == 3, "%d of the 3 nodes queued before close taken after it", got);
    ifl_fifo_wait(&q, -1); /* returns: closed */
    ifl_fifo_done(&q, 3);
    ifl_fifo_destroy(&q);
    close_wakes(0);
    close_wakes(1);
    close_wakes(2);
    printf("close: pushes (forced too) refused, the 3 queued still taken, then NULL; blocked "
           "pop_wait(-1), wait(-1) and wait_closed(-1) woken (wait_closed not by a push)\n");
}

static void test_take_all_counts(void)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 0);
    int64_t n = -1;
    CHECK(ifl_fifo_take_all(&q, &n) == NULL && n == 0);
    CHECK(ifl_fifo_take_all(&q, NULL) == NULL);
    item it[7];
    for (int i = 0; i < 7; i++)
        ifl_fifo_push(&q, &it[i].node, 0);
    ifl_fifo_node *all = ifl_fifo_take_all(&q, &n);
    int k = 0;
    for (ifl_fifo_node *x = all; x; x = x->next)
        k++;
    CHECKF(n == 7 && k == 7, "take_all count %lld, list length %d: expected 7", (long long)n, k);
    CHECK(ifl_fifo_held(&q) == 7);
    ifl_fifo_push(&q, &it[0].node, 0);
    CHECK(ifl_fifo_take_all(&q, &n) == &it[0].node && n == 1);
    CHECK(it[0].node.next == NULL);
    ifl_fifo_done(&q, 8);
    CHECK(ifl_fifo_held(&q) == 0);
    printf("take_all: empty gives NULL and 0; 7 gives 7 linked, held until done; then 1\n");
    ifl_fifo_destroy(&q);
}

static void test_timeouts(void)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 0);
    double t0 = mono_ms();
    CHECK(ifl_fifo_pop_wait(&q, 0) == NULL);
    double t1 = mono_ms();
    ifl_fifo_node *n = ifl_fifo_pop_wait(&q, 300);
    double t2 = mono_ms();
    ifl_fifo_wait(&q, 300);
    double t3 = mono_ms();
    item queued;
    ifl_fifo_push(&q, &queued.node, 0);
    ifl_fifo_wait_closed(&q, 300); /* a queued node does not end it */
    double t4 = mono_ms();
    CHECKF(t4 - t3 >= 250, "wait_closed(300) with a node queued returned after %.1f ms", t4 - t3);
    /* not early by a large margin; no upper bound (a slow or busy machine may take longer) */
    CHECKF(n == NULL, "pop_wait(300) on an empty queue returned a node");
    CHECKF(t2 - t1 >= 250, "pop_wait(300) returned after %.1f ms", t2 - t1);
    CHECKF(t3 - t2 >= 250, "wait(300) returned after %.1f ms", t3 - t2);
    printf("timeouts: pop_wait(0) %.2f ms, pop_wait(300) NULL after %.1f ms, wait(300) after "
           "%.1f ms, wait_closed(300) with a node queued after %.1f ms (each must be >= 250)\n",
           t1 - t0, t2 - t1, t3 - t2, t4 - t3);
    ifl_fifo_destroy(&q);
}

static void count_wake(void *ud)
{
    (*(int *)ud)++;
}

static void test_on_nonempty(void)
{
    ifl_fifo q;
    ifl_fifo_init(&q, 0);
    int wakes = 0;
    ifl_fifo_set_wake(&q, count_wake, &wakes);
    item it[4];
    ifl_fifo_push(&q, &it[0].node, 0);
    ifl_fifo_push(&q, &it[1].node, 0);
    ifl_fifo_push(&q, &it[2].node, 0);
    CHECKF(wakes == 1, "%d wake-ups for 3 pushes onto an empty queue: expected 1", wakes);
    ifl_fifo_pop_wait(&q, 0);
    ifl_fifo_push(&q, &it[3].node, 0); /* not empty (2 left): no call */
    CHECK(wakes == 1);
    ifl_fifo_take_all(&q, NULL);
    ifl_fifo_push(&q, &it[0].node, 0); /* empty -> non-empty */
    CHECKF(wakes == 2, "%d wake-ups after the queue emptied and got one: expected 2", wakes);
    CHECK(ifl_fifo_pop_wait(&q, 0) == &it[0].node);
    ifl_fifo_push(&q, &it[1].node, 1); /* forced pushes wake too */
    CHECK(wakes == 3);
    ifl_fifo_take_all(&q, NULL);
    /* a refused push is no transition */
    ifl_fifo full;
    int fwakes = 0;
    ifl_fifo_init(&full, 1);
    ifl_fifo_set_wake(&full, count_wake, &fwakes);
    ifl_fifo_push(&full, &it[2].node, 0);
    ifl_fifo_take_all(&full, NULL); /* taken, not done: empty but full */
    CHECK(ifl_fifo_push(&full, &it[3].node, 0) == IFL_FIFO_FULL);
    CHECKF(fwakes == 1, "%d wake-ups with one push accepted and one refused: expected 1", fwakes);
    ifl_fifo_destroy(&full);
    /* cleared: never called again */
    ifl_fifo_set_wake(&q, NULL, NULL);
    ifl_fifo_push(&q, &it[2].node, 0);
    ifl_fifo_take_all(&q, NULL);
    ifl_fifo_push(&q, &it[3].node, 0);
    CHECKF(wakes == 3, "%d wake-ups after the hook was cleared: expected still 3", wakes);
    printf("on_nonempty: called at each empty->non-empty push (3), not for pushes onto a "
           "non-empty queue or refused ones, never once cleared\n");
    ifl_fifo_destroy(&q);
}

/* ---- producers and a consumer ---------------------------------------------------------------- */

enum { N_PROD = 4, CAP = 1024 };

typedef struct {
    ifl_fifo *q;
    item *items; /* this producer's n nodes */
    int id, n;
    long full_retries;
} producer;

static void *producer_main(void *arg)
{
    producer *p = arg;
    for (int i = 0; i < p->n; i++) {
        item *x = &p->items[i];
        x->producer = p->id; /* written before the push: the consumer must see it */
        x->seq = i;
        while (ifl_fifo_push(p->q, &x->node, 0) == IFL_FIFO_FULL) {
            p->full_retries++;
            sched_yield();
        }
    }
    return NULL;
}

typedef struct {
    int next[N_PROD]; /* next seq expected from each producer */
    long bad_order, bad_producer, over_bound;
    int64_t max_held;
} consumed;

static void consume(consumed *c, ifl_fifo_node *n)
{
    item *x = (item *)n;
    if (x->producer < 0 || x->producer >= N_PROD) {
        c->bad_producer++;
        return;
    }
    if (x->seq != c->next[x->producer])
        c->bad_order++;
    c->next[x->producer] = x->seq + 1;
}

/* One consumer, alternating single pops and whole takes, giving each back with done. */
static void consume_all(ifl_fifo *q, consumed *c, long total)
{
    long got = 0;
    for (long round = 0; got < total; round++) {
        int64_t held = ifl_fifo_held(q);
        if (held > c->max_held)
            c->max_held = held;
        if (held > CAP)
            c->over_bound++;
        if (round % 2) {
            ifl_fifo_node *n = ifl_fifo_pop_wait(q, -1);
            if (!n)
                break;
            consume(c, n);
            got++;
            ifl_fifo_done(q, 1);
        } else {
            int64_t k = 0;
            ifl_fifo_node *n = ifl_fifo_take_all(q, &k);
            for (; n; n = n->next)
                consume(c, n);
            got += (long)k;
            ifl_fifo_done(q, k);
        }
    }
}

static void test_threads(void)
{
    int per = test_quick() ? 10000 : 100000;
    ifl_fifo q;
    ifl_fifo_init(&q, CAP);
    producer p[N_PROD];
    pthread_t t[N_PROD];
    int started = 0;
    for (int i = 0; i < N_PROD; i++) {
        p[i] = (producer){.q = &q, .id = i, .n = per};
        p[i].items = test_xmalloc((size_t)per * sizeof(item));
        memset(p[i].items, 0xff, (size_t)per * sizeof(item)); /* producer -1 until written */
    }
    for (int i = 0; i < N_PROD; i++)
        if (!pthread_create(&t[i], NULL, producer_main, &p[i]))
            started++;
    CHECKF(started == N_PROD, "%d of %d producers started", started, N_PROD);
    consumed c;
    memset(&c, 0, sizeof c);
    consume_all(&q, &c, (long)started * per);
    long retries = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        retries += p[i].full_retries;
    }
    int all = 1;
    for (int i = 0; i < started; i++)
        all &= c.next[i] == per;
    CHECKF(all, "each producer's last seq consumed + 1: %d %d %d %d, expected %d", c.next[0],
           c.next[1], c.next[2], c.next[3], per);
    CHECKF(c.bad_order == 0 && c.bad_producer == 0, "%ld out of order, %ld unwritten payloads",
           c.bad_order, c.bad_producer);
    CHECKF(c.over_bound == 0, "held above the bound %d in %ld looks (max %lld)", CAP, c.over_bound,
           (long long)c.max_held);
    CHECK(ifl_fifo_pop_wait(&q, 0) == NULL && ifl_fifo_held(&q) == 0);
    ifl_fifo_close(&q);
    CHECK(ifl_fifo_pop_wait(&q, -1) == NULL);
    printf("threads: %d producers x %d nodes, one consumer: each exactly once in its producer's "
           "order; held at most %lld (bound %d); %ld full retries\n",
           N_PROD, per, (long long)c.max_held, CAP, retries);
    for (int i = 0; i < N_PROD; i++)
        free(p[i].items);
    ifl_fifo_destroy(&q);
}

int main(void)
{
    test_order();
    test_bound_and_force();
    test_close();
    test_take_all_counts();
    test_timeouts();
    test_on_nonempty();
    test_threads();
    if (test_failures) {
        fprintf(stderr, "test_fifo: %d check(s) failed\n", test_failures);
        return 1;
    }
    printf("test_fifo: all passed\n");
    return 0;
}
