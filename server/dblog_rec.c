/* dblog_rec.c: the request log's records (dblog_rec.h): made with copies of everything in one
 * allocation (the producer's thread), and each kind's named fields bound to its statement (the
 * writer thread). */
#include "dblog_rec.h"

#include <stdlib.h>
#include <string.h>

const char *const DBLOG_SQL[N_ST] = {
    "INSERT OR IGNORE INTO sessions (session, user_key, remote_addr, user_agent, connected_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5)",
    "UPDATE sessions SET closed_at = ?2, close_reason = ?3 WHERE session = ?1",
    "INSERT INTO requests (session_id, client_id, policy, prompt, params, prompt_tokens, "
    "completion_tokens, completion, finish_reason, error_code, queued_at, admitted_at, "
    "first_token_at, finished_at, queue_ms, ttft_ms, total_ms, tokens_per_s, api, prompt_bytes, "
    "conversation, cached_tokens, weights, messages, trimmed_messages, trimmed_tokens) "
    "VALUES ((SELECT id FROM sessions WHERE session = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, "
    "?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)",
    "INSERT INTO request_tokens (request_id, n_tokens, offsets_us) VALUES (?1, ?2, ?3)",
    "INSERT INTO steps (at, policy, step, batch_size, prefill_tokens, decode_tokens, step_ms, "
    "running, waiting, kv_used) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
};

/* ---- records (the producer's thread: the service thread) ------------------------------------ */

static size_t slen(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

/* Copies s (n bytes, NUL added) into *p; returns the copy or NULL for a NULL s. */
static const char *put(char **p, const char *s, size_t n)
{
    if (!s)
        return NULL;
    char *d = *p;
    memcpy(d, s, n);
    d[n] = 0;
    *p += n + 1;
    return d;
}

/* Repoints the NUL-terminated string *s (or NULL) at its copy in *p. */
static void own(char **p, const char **s)
{
    *s = put(p, *s, *s ? strlen(*s) : 0);
}

/* A record of `kind` with `extra` bytes after it for its strings; NULL when memory ran out. */
static rec *rec_new(rec_kind kind, size_t extra)
{
    rec *r = calloc(1, sizeof *r + extra);
    if (r)
        r->kind = kind;
    return r;
}

rec *dblog_rec_session_open(const ifl_dblog_session *s)
{
    size_t n =
        slen(s->session) + slen(s->user_key_sha256) + slen(s->remote_addr) + slen(s->user_agent);
    rec *r = rec_new(REC_SESSION_OPEN, n);
    if (!r)
        return NULL;
    char *p = (char *)(r + 1);
    ifl_dblog_session *o = &r->u.open;
    *o = *s;
    own(&p, &o->session);
    own(&p, &o->user_key_sha256);
    own(&p, &o->remote_addr);
    own(&p, &o->user_agent);
    return r;
}

rec *dblog_rec_session_close(const char *session, double at_ms, const char *reason)
{
    rec *r = rec_new(REC_SESSION_CLOSE, slen(session) + slen(reason));
    if (!r)
        return NULL;
    char *p = (char *)(r + 1);
    rec_session_close *c = &r->u.close;
    c->session = put(&p, session, strlen(session));
    c->reason = put(&p, reason, reason ? strlen(reason) : 0);
    c->at_ms = at_ms;
    return r;
}

rec *dblog_rec_request(const ifl_dblog_request *q)
{
    int32_t n_off = q->n_offsets > 0 ? q->n_offsets : 0;
    size_t off_bytes = (size_t)n_off * sizeof(uint32_t);
    size_t n = off_bytes + slen(q->session) + slen(q->client_id) + slen(q->policy) + slen(q->api) +
               (q->prompt ? q->prompt_len + 1 : 0) + slen(q->params_json) +
               (q->completion ? q->completion_len + 1 : 0) + slen(q->finish_reason) +
               slen(q->error_code) + slen(q->conversation) + slen(q->weights) +
               slen(q->messages);
    rec *r = rec_new(REC_REQUEST, n + sizeof(uint32_t));
    if (!r)
        return NULL;
    ifl_dblog_request *c = &r->u.req;
    *c = *q;
    /* the offsets first, aligned right after the struct */
    uint32_t *off = (uint32_t *)(void *)(r + 1);
    if (off_bytes)
        memcpy(off, q->offsets_us, off_bytes);
    c->offsets_us = off;
    c->n_offsets = n_off;
    char *p = (char *)off + off_bytes;
    own(&p, &c->session);
    own(&p, &c->client_id);
    own(&p, &c->policy);
    own(&p, &c->api);
    own(&p, &c->params_json);
    c->prompt = put(&p, q->prompt, q->prompt_len);
    own(&p, &c->finish_reason);
    own(&p, &c->error_code);
    own(&p, &c->conversation);
    own(&p, &c->weights);
    own(&p, &c->messages);
    c->completion = put(&p, q->completion, q->completion_len);
    return r;
}

rec *dblog_rec_step(const ifl_dblog_step *s)
{
    rec *r = rec_new(REC_STEP, slen(s->policy));
    if (!r)
        return NULL;
    char *p = (char *)(r + 1);
    r->u.step = *s;
    own(&p, &r->u.step.policy);
    return r;
}

/* ---- binding (writer thread) ---------------------------------------------------------------- */

static void bind_text(sqlite3_stmt *st, int i, const char *s, size_t n)
{
    if (s)
        sqlite3_bind_text(st, i, s, (int)n, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

/* A NUL-terminated string, or NULL. */
static void bind_str(sqlite3_stmt *st, int i, const char *s)
{
    bind_text(st, i, s, s ? strlen(s) : 0);
}

static void bind_time(sqlite3_stmt *st, int i, double v)
{
    if (v > 0)
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

static void bind_ms(sqlite3_stmt *st, int i, double v)
{
    if (v >= 0)
        sqlite3_bind_double(st, i, v);
    else
        sqlite3_bind_null(st, i);
}

/* ---- binding each kind's named fields to its statement (writer thread) ---------------------- */

static sqlite3_stmt *bind_session_open(sqlite3_stmt *const st_all[], const ifl_dblog_session *o)
{
    sqlite3_stmt *st = st_all[ST_SESSION_OPEN];
    bind_str(st, 1, o->session);
    bind_str(st, 2, o->user_key_sha256);
    bind_str(st, 3, o->remote_addr);
    bind_str(st, 4, o->user_agent);
    sqlite3_bind_double(st, 5, o->at_ms);
    return st;
}

static sqlite3_stmt *bind_session_close(sqlite3_stmt *const st_all[], const rec_session_close *c)
{
    sqlite3_stmt *st = st_all[ST_SESSION_CLOSE];
    bind_str(st, 1, c->session);
    sqlite3_bind_double(st, 2, c->at_ms);
    bind_str(st, 3, c->reason);
    return st;
}

static sqlite3_stmt *bind_request(sqlite3_stmt *const st_all[], const ifl_dblog_request *q)
{
    sqlite3_stmt *st = st_all[ST_REQUEST];
    bind_str(st, 1, q->session);
    bind_str(st, 2, q->client_id);
    bind_str(st, 3, q->policy);
    bind_text(st, 4, q->prompt ? q->prompt : "", q->prompt ? q->prompt_len : 0);
    bind_text(st, 5, q->params_json ? q->params_json : "{}",
              q->params_json ? strlen(q->params_json) : 2);
    if (q->prompt_tokens >= 0)
        sqlite3_bind_int64(st, 6, q->prompt_tokens);
    else
        sqlite3_bind_null(st, 6);
    sqlite3_bind_int64(st, 7, q->completion_tokens);
    bind_text(st, 8, q->completion, q->completion_len);
    bind_str(st, 9, q->finish_reason);
    bind_str(st, 10, q->error_code);
    sqlite3_bind_double(st, 11, q->queued_at);
    bind_time(st, 12, q->admitted_at);
    bind_time(st, 13, q->first_token_at);
    bind_time(st, 14, q->finished_at);
    bind_ms(st, 15, q->queue_ms);
    bind_ms(st, 16, q->ttft_ms);
    bind_ms(st, 17, q->total_ms);
    bind_ms(st, 18, q->tokens_per_s);
    bind_str(st, 19, q->api ? q->api : "ws");
    sqlite3_bind_int64(st, 20, q->prompt_bytes);
    if (q->conversation && q->conversation[0])
        bind_str(st, 21, q->conversation);
    else
        sqlite3_bind_null(st, 21);
    if (q->cached_tokens >= 0)
        sqlite3_bind_int64(st, 22, q->cached_tokens);
    else
        sqlite3_bind_null(st, 22);
    bind_str(st, 23, q->weights);
    bind_str(st, 24, q->messages);
    sqlite3_bind_int64(st, 25, q->trimmed_messages);
    sqlite3_bind_int64(st, 26, q->trimmed_tokens);
    return st;
}

static sqlite3_stmt *bind_step(sqlite3_stmt *const st_all[], const ifl_dblog_step *s)
{
    sqlite3_stmt *st = st_all[ST_STEP];
    sqlite3_bind_double(st, 1, s->at_ms);
    bind_str(st, 2, s->policy);
    sqlite3_bind_int64(st, 3, (int64_t)s->step);
    sqlite3_bind_int64(st, 4, s->batch_size);
    sqlite3_bind_int64(st, 5, s->prefill_tokens);
    sqlite3_bind_int64(st, 6, s->decode_tokens);
    sqlite3_bind_double(st, 7, s->step_ms);
    sqlite3_bind_int64(st, 8, s->running);
    sqlite3_bind_int64(st, 9, s->waiting);
    sqlite3_bind_int64(st, 10, s->kv_used);
    return st;
}

/* Runs a bound statement and clears it: its sqlite3_step result. */
static int run_stmt(sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc;
}

/* Writes one record. 0 written; 1 refused by the database (skip it); -1 the database failed. */
int dblog_rec_write(sqlite3 *db, sqlite3_stmt *const st_all[N_ST], const rec *r)
{
    sqlite3_stmt *st = NULL;
    switch (r->kind) {
    case REC_SESSION_OPEN: st = bind_session_open(st_all, &r->u.open); break;
    case REC_SESSION_CLOSE: st = bind_session_close(st_all, &r->u.close); break;
    case REC_REQUEST: st = bind_request(st_all, &r->u.req); break;
    case REC_STEP: st = bind_step(st_all, &r->u.step); break;
    case N_REC: return 1;
    }
    int rc = run_stmt(st);
    if (rc != SQLITE_DONE)
        return (rc & 0xff) == SQLITE_CONSTRAINT || (rc & 0xff) == SQLITE_MISMATCH ||
                       (rc & 0xff) == SQLITE_TOOBIG
                   ? 1
                   : -1;
    const ifl_dblog_request *q = &r->u.req;
    if (r->kind == REC_REQUEST && q->n_offsets > 0) {
        /* little-endian uint32 (this machine's order, checked at start) */
        sqlite3_stmt *t = st_all[ST_TOKENS];
        sqlite3_bind_int64(t, 1, sqlite3_last_insert_rowid(db));
        sqlite3_bind_int(t, 2, q->n_offsets);
        sqlite3_bind_blob(t, 3, q->offsets_us, q->n_offsets * (int)sizeof(uint32_t), SQLITE_STATIC);
        rc = run_stmt(t);
        if (rc != SQLITE_DONE)
            return (rc & 0xff) == SQLITE_CONSTRAINT ? 1 : -1;
    }
    return 0;
}
