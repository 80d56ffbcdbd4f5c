/* bridge.c: the service thread's event queue (bridge.h) over the bounded FIFO of common/fifo.h,
 * unbounded here: what the batchers produce is bounded by their batches, and a request's events
 * must not be dropped. */
#include "bridge.h"

#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Under the queue's lock (fifo.h): the context cannot be detached meanwhile. */
static void wake_service(void *ud)
{
    bridge *b = ud;
    if (b->ctx)
        lws_cancel_service(b->ctx);
}

void bridge_init(bridge *b)
{
    memset(b, 0, sizeof *b);
    ifl_fifo_init(&b->q, 0);
}

void bridge_destroy(bridge *b)
{
    ifl_fifo_destroy(&b->q);
}

void bridge_attach(bridge *b, struct lws_context *ctx)
{
    pthread_mutex_lock(&b->q.lock);
    b->ctx = ctx;
    pthread_mutex_unlock(&b->q.lock);
    ifl_fifo_set_wake(&b->q, wake_service, b);
}

void bridge_detach(bridge *b)
{
    ifl_fifo_set_wake(&b->q, NULL, NULL);
    pthread_mutex_lock(&b->q.lock);
    b->ctx = NULL;
    pthread_mutex_unlock(&b->q.lock);
}

void bridge_push(bridge *b, bridge_item *it)
{
    it->stamp = ifl_now_us();
    ifl_fifo_push(&b->q, &it->node, 1);
}

bridge_item *bridge_item_new(bridge_kind kind, size_t extra)
{
    bridge_item *it = calloc(1, sizeof *it + extra);
    if (!it)
        return NULL;
    it->kind = kind;
    it->data = (char *)(it + 1);
    return it;
}

bridge_item *bridge_take_all(bridge *b)
{
    int64_t n = 0;
    ifl_fifo_node *all = ifl_fifo_take_all(&b->q, &n);
    ifl_fifo_done(&b->q, n);
    return (bridge_item *)(void *)all;
}
