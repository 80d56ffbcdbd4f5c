/* history.h: the history API's queries (GET /api/history, GET /api/requests/ID, docs/protocol.md)
 * on a thread of their own with a read-only connection, so the service thread never waits for the
 * disk. A job goes in; its HTTP status and JSON body come back through the `done` callback (called
 * on the history thread). What it is not: the writer (dblog.h). */
#ifndef IFL_HISTORY_H
#define IFL_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "fifo.h"

typedef enum { HISTORY_LIST = 0, HISTORY_ONE = 1 } history_kind;

typedef struct history_job {
    ifl_fifo_node node; /* the job queue's link (history.c) */
    history_kind kind;
    char user_hash[65]; /* SHA-256 hex of the caller's key, "" for none */
    int32_t limit;      /* LIST */
    int64_t before;     /* LIST: 0 = newest */
    int64_t id;         /* ONE */
    void *tag;          /* the caller's (the connection waiting for the answer) */
    /* result */
    int status;
    char *body; /* heap, JSON */
    size_t len;
} history_job;

typedef struct ifl_history ifl_history;

/* scope_all: every request is visible (--history all); else only the caller key's. */
ifl_history *ifl_history_start(const char *db_path, int scope_all,
                               void (*done)(void *ud, history_job *job), void *ud);
void ifl_history_stop(ifl_history *h); /* jobs still queued are answered 503 first */
/* Queues the job. Once ifl_history_stop has begun, the job is answered 503 at once, on the
 * caller's thread. */
void ifl_history_submit(ifl_history *h, history_job *job);

#endif
