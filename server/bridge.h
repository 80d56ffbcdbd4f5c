/* bridge.h: the one event queue from the other threads to the service thread. The batcher threads
 * put their request events and step records in it, the history thread its answers; the service
 * thread drains it when libwebsockets reports EVENT_WAIT_CANCELLED. An item says what it holds
 * (bridge_kind); items of one request keep their order because one queue carries them all.
 *
 * Waking. A push that finds the queue empty calls lws_cancel_service() on the attached context,
 * under the queue's lock (the only lws call that is safe from another thread). bridge_detach
 * clears the context under that same lock before the context is destroyed, so a late push (a
 * history answer at shutdown) can never touch a freed context.
 *
 * Threads: bridge_push from any thread; bridge_take_all and attach/detach on the service thread.
 * What it is not: the handling of items (request.h, ws.c, http.c) or a copy of their contents (the
 * producers copy what they push). */
#ifndef IFL_BRIDGE_H
#define IFL_BRIDGE_H

#include <stdint.h>

#include "batcher.h"
#include "fifo.h"
#include "history.h"

struct lws_context;

typedef enum {
    BRIDGE_EVENT = 0, /* a request's event (ev); its text copied into `data` */
    BRIDGE_STEP,      /* a step record (step); its arrays copied into `data` */
    BRIDGE_HISTORY,   /* a history answer (job) */
} bridge_kind;

typedef struct bridge_item {
    ifl_fifo_node node; /* first: the queue's link */
    bridge_kind kind;
    int embedded;   /* lives inside its request or HTTP job: never freed on its own */
    uint64_t stamp; /* monotonic us when it was pushed */
    ifl_event ev;
    ifl_step_record step;
    history_job *job;
    char *data; /* copies, in the same allocation right after the item (8-byte aligned: the
                   item holds 64-bit fields, so its size is a multiple of 8) */
} bridge_item;

typedef struct {
    ifl_fifo q;
    struct lws_context *ctx; /* {q.lock}, through the queue's wake-up hook */
} bridge;

void bridge_init(bridge *b);
void bridge_destroy(bridge *b); /* after the last take_all */
void bridge_attach(bridge *b, struct lws_context *ctx);
void bridge_detach(bridge *b);

/* Stamps the item and appends it (any thread). */
void bridge_push(bridge *b, bridge_item *it);

/* A new item of `kind` with `extra` bytes of data after it (zeroed); NULL when out of memory. */
bridge_item *bridge_item_new(bridge_kind kind, size_t extra);

/* Everything queued, oldest first (service thread). Walk with bridge_next before handling an
 * item: handling may free an embedded one. Free non-embedded items with free(). */
bridge_item *bridge_take_all(bridge *b);
static inline bridge_item *bridge_next(const bridge_item *it)
{
    return (bridge_item *)(void *)it->node.next;
}

#endif
