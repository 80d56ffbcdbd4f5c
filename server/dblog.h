/* dblog.h: the request log's writer: one thread with its own SQLite connection, fed through a
 * bounded queue by the service thread. Records are written in batched transactions (BEGIN
 * IMMEDIATE, prepared statements) every flush interval. Nothing that enqueues ever waits for the
 * disk: a full queue drops the record (counted); a failing database (unwritable, full, locked,
 * read-only) keeps the records it could not write and retries, and reopens the file when it
 * cannot open it, while serving goes on. Retention (days and/or requests) runs on this thread.
 * What it is not: the migrations (db.h, applied by the opener) or the history queries. */
#ifndef IFL_DBLOG_H
#define IFL_DBLOG_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

typedef struct {
    const char *path;
    int32_t flush_ms;          /* write interval (default 200) */
    int32_t queue_cap;         /* records waiting, at most (default 100000) */
    int32_t busy_timeout_ms;   /* SQLite busy timeout of the writer (default 1000) */
    int32_t retry_ms;          /* after a failure (default 1000) */
    double retain_days;        /* 0: keep */
    int64_t retain_requests;   /* 0: keep */
    int32_t retention_every_s; /* default 60 */
} ifl_dblog_opts;

typedef struct ifl_dblog ifl_dblog;

/* Starts the writer. The database is opened and migrated here first (synchronously, so a
 * database newer than the binary refuses start-up with *fatal set); if it cannot be opened
 * (a missing directory, no permission) the writer starts anyway, degraded, and keeps trying.
 * NULL only on a fatal error (message in err). */
ifl_dblog *ifl_dblog_start(const ifl_dblog_opts *o, int *fatal, ifl_err *err);

/* Writes everything queued (trying for at most `deadline_ms`), stops the thread, closes. */
void ifl_dblog_stop(ifl_dblog *d, int32_t deadline_ms);

typedef struct {
    const char *session;         /* 16 hex digits */
    const char *user_key_sha256; /* hex or NULL */
    const char *remote_addr, *user_agent;
    double at_ms;
} ifl_dblog_session;

typedef struct {
    const char *session;
    const char *client_id;
    const char *policy;
    const char *api; /* "ws", "openai", "triton" (NULL: ws) */
    const char *prompt;
    size_t prompt_len;    /* of prompt, which may be only the start of it (refused requests) */
    int64_t prompt_bytes; /* the whole prompt's length in bytes */
    const char *params_json;
    int32_t prompt_tokens; /* -1: unknown (refused before tokenizing) */
    int32_t completion_tokens;
    const char *completion;
    size_t completion_len;
    const char *finish_reason;                                  /* NULL when refused */
    const char *error_code;                                     /* NULL unless refused or failed */
    double queued_at, admitted_at, first_token_at, finished_at; /* Unix ms; 0: never reached */
    double queue_ms, ttft_ms, total_ms, tokens_per_s;           /* <0: NULL */
    const uint32_t *offsets_us; /* (n_offsets) token arrival, us after queued_at */
    int32_t n_offsets;
    const char *conversation; /* the client's conversation id; NULL or "": none */
    int32_t cached_tokens;    /* of the prompt, from the prefix cache; -1: unknown (refused) */
    const char *weights;      /* the format the weights were held in ("q8"); NULL: unknown */
    const char *messages;     /* a chat's messages (JSON); NULL: a plain prompt */
    int32_t trimmed_messages, trimmed_tokens; /* left out of the prompt */
} ifl_dblog_request;

typedef struct {
    double at_ms;
    const char *policy;
    uint64_t step;
    int32_t batch_size, prefill_tokens, decode_tokens, running, waiting, kv_used;
    double step_ms;
} ifl_dblog_step;

/* Enqueue (copying everything). 0 queued, -1 dropped (queue full or out of memory). Sessions are
 * never dropped for a full queue (the requests that follow need their row). */
int ifl_dblog_session_open(ifl_dblog *d, const ifl_dblog_session *s);
int ifl_dblog_session_close(ifl_dblog *d, const char *session, double at_ms, const char *reason);
int ifl_dblog_request_done(ifl_dblog *d, const ifl_dblog_request *r);
int ifl_dblog_step_sample(ifl_dblog *d, const ifl_dblog_step *s);

typedef struct {
    uint64_t written[4]; /* by kind: session open, session close, request, step */
    uint64_t dropped_full, dropped_rejected; /* queue full; refused by the database (constraint) */
    uint64_t write_errors;                   /* failed batches / opens */
    uint64_t batches, retention_deleted;
    int32_t queued;       /* waiting now */
    int up;               /* 1: open, and the last write succeeded */
    double last_batch_ms; /* time of the last committed transaction */
    char last_error[IFL_ERR_MAX];
} ifl_dblog_stats;
void ifl_dblog_get_stats(ifl_dblog *d, ifl_dblog_stats *out);

#endif
