/* history.h: the history API's queries (GET /api/history, GET /api/requests/ID, docs/protocol.md)
 * on a thread of their own with a read-only connection, so the service thread never waits for the
 * disk. A job goes in; its HTTP status and JSON body come back through the `done` callback (called
 * on the history thread). A page of GET /api/history comes in chunks of about HISTORY_CHUNK_BYTES:
 * the caller submits the same job again for each next chunk, until one comes back `last`; each
 * chunk is its own query, continuing after the last row written (no read transaction is held
 * between chunks). What it is not: the writer (dblog.h). */
#ifndef IFL_HISTORY_H
#define IFL_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "fifo.h"

typedef enum { HISTORY_LIST = 0, HISTORY_ONE = 1 } history_kind;

/* A LIST chunk stops before the row that would take it past this many bytes (a chunk holds at
 * least one row, so one longer row makes a longer chunk). */
#define HISTORY_CHUNK_BYTES (64 << 10)

typedef struct history_job {
    ifl_fifo_node node; /* the job queue's link (history.c) */
    history_kind kind;
    char user_hash[65];    /* SHA-256 hex of the caller's key, "" for none */
    int32_t limit;         /* LIST */
    int64_t before;        /* LIST: 0 = newest */
    char conversation[65]; /* LIST: only this conversation's requests ("": all; REQ_MAX_CONV) */
    int64_t id;            /* ONE */
    int head_only; /* HEAD: only the answer's length is wanted (len; a LIST's body is NULL) */
    void *tag;     /* the caller's (the connection waiting for the answer) */
    /* LIST: where the page stands, kept by the history thread between chunks (zero at first) */
    int32_t rows;       /* rows written so far */
    size_t page_bytes;  /* bytes of the page so far */
    int64_t last_id;    /* the last row written: the next chunk starts after it */
    double last_queued; /* its queued_at */
    /* result: this chunk (the whole answer for ONE, an error or a HEAD) */
    int status;
    char *body; /* heap, JSON; NULL: out of memory (status 500), or a HEAD's LIST */
    size_t len;
    int last; /* the answer ends with this chunk */
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
