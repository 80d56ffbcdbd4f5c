/* dblog.c: the request log's writer thread (dblog.h).
 *
 * State and its guards:
 *   {lock}   the queue (a FIFO of records), `held` (records queued or carried), `stopping`,
 *            the stats.
 *   writer   the connection, its prepared statements, the carried batch (records taken from the
 *   thread   queue whose transaction failed: written first at the next attempt).
 * One round: wait up to flush_ms for records; take all of them; (re)open the database if needed;
 * BEGIN IMMEDIATE; insert each record; COMMIT. A record the database refuses (a constraint) is
 * counted and skipped; any other error rolls the batch back and keeps it for the next round. */
#include "dblog.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "db.h"

typedef enum { REC_SESSION_OPEN = 0, REC_SESSION_CLOSE, REC_REQUEST, REC_STEP } rec_kind;

typedef struct rec {
    struct rec *next;
    rec_kind kind;
    /* strings point into the same allocation (after the struct) */
    const char *session, *s1, *s2, *s3, *s4, *s5, *s6, *s7;
    size_t s4_len, s7_len;
    double d[10];
    int64_t i[8];
    const uint32_t *offsets;
    int32_t n_offsets;
} rec;

enum { ST_SESSION_OPEN, ST_SESSION_CLOSE, ST_REQUEST, ST_TOKENS, ST_STEP, N_ST };
static const char *const SQL[N_ST] = {
    "INSERT OR IGNORE INTO sessions (session, user_key, remote_addr, user_agent, connected_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5)",
    "UPDATE sessions SET closed_at = ?2, close_reason = ?3 WHERE session = ?1",
    "INSERT INTO requests (session_id, client_id, policy, prompt, params, prompt_tokens, "
    "completion_tokens, completion, finish_reason, error_code, queued_at, admitted_at, "
    "first_token_at, finished_at, queue_ms, ttft_ms, total_ms, tokens_per_s) VALUES ("
    "(SELECT id FROM sessions WHERE session = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
    "?13, ?14, ?15, ?16, ?17, ?18)",
    "INSERT INTO request_tokens (request_id, n_tokens, offsets_us) VALUES (?1, ?2, ?3)",
    "INSERT INTO steps (at, policy, step, batch_size, prefill_tokens, decode_tokens, step_ms, "
    "running, waiting, kv_used) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
};

struct ifl_dblog {
    ifl_dblog_opts o;
    char *path;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    rec *head, *tail;         /* {lock} */
    int32_t held;             /* {lock} queued + carried */
    int stopping;             /* {lock} */
    int64_t stop_deadline_us; /* {lock} */
    ifl_dblog_stats stats;    /* {lock} */
    /* writer thread */
    sqlite3 *db;
    sqlite3_stmt *st[N_ST];
    rec *carry;
    double next_open_ms, next_retention_ms;
    int closed_stale;      /* the previous run's open sessions have been closed */
    double last_report_ms; /* failures are reported at most every 30 s */
    int64_t failures_unreported;
    int failing;
};

static uint64_t mono_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* ---- records -------------------------------------------------------------------------------- */

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

static void free_list(rec *r)
{
    while (r) {
        rec *n = r->next;
        free(r);
        r = n;
    }
}

static int enqueue(ifl_dblog *d, rec *r, int may_drop)
{
    pthread_mutex_lock(&d->lock);
    if ((may_drop && d->held >= d->o.queue_cap) || d->stopping) {
        d->stats.dropped_full++;
        pthread_mutex_unlock(&d->lock);
        free(r);
        return -1;
    }
    r->next = NULL;
    if (d->tail)
        d->tail->next = r;
    else
        d->head = r;
    d->tail = r;
    d->held++;
    pthread_mutex_unlock(&d->lock);
    return 0;
}

static void count_drop(ifl_dblog *d)
{
    pthread_mutex_lock(&d->lock);
    d->stats.dropped_full++;
    pthread_mutex_unlock(&d->lock);
}

/* A record of `kind` with `extra` bytes after it for its strings; NULL (counted as dropped) when
 * memory ran out. */
static rec *rec_new(ifl_dblog *d, rec_kind kind, size_t extra)
{
    rec *r = calloc(1, sizeof *r + extra);
    if (!r) {
        count_drop(d);
        return NULL;
    }
    r->kind = kind;
    return r;
}

int ifl_dblog_session_open(ifl_dblog *d, const ifl_dblog_session *s)
{
    size_t n =
        slen(s->session) + slen(s->user_key_sha256) + slen(s->remote_addr) + slen(s->user_agent);
    rec *r = rec_new(d, REC_SESSION_OPEN, n);
    if (!r)
        return -1;
    char *p = (char *)(r + 1);
    r->session = put(&p, s->session, strlen(s->session));
    r->s1 = put(&p, s->user_key_sha256, s->user_key_sha256 ? strlen(s->user_key_sha256) : 0);
    r->s2 = put(&p, s->remote_addr, s->remote_addr ? strlen(s->remote_addr) : 0);
    r->s3 = put(&p, s->user_agent, s->user_agent ? strlen(s->user_agent) : 0);
    r->d[0] = s->at_ms;
    return enqueue(d, r, 0);
}

int ifl_dblog_session_close(ifl_dblog *d, const char *session, double at_ms, const char *reason)
{
    rec *r = rec_new(d, REC_SESSION_CLOSE, slen(session) + slen(reason));
    if (!r)
        return -1;
    char *p = (char *)(r + 1);
    r->session = put(&p, session, strlen(session));
    r->s1 = put(&p, reason, reason ? strlen(reason) : 0);
    r->d[0] = at_ms;
    return enqueue(d, r, 0);
}

int ifl_dblog_request_done(ifl_dblog *d, const ifl_dblog_request *q)
{
    size_t off_bytes = (size_t)(q->n_offsets > 0 ? q->n_offsets : 0) * sizeof(uint32_t);
    size_t n = off_bytes + slen(q->session) + slen(q->client_id) + slen(q->policy) +
               (q->prompt ? q->prompt_len + 1 : 0) + slen(q->params_json) +
               (q->completion ? q->completion_len + 1 : 0) + slen(q->finish_reason) +
               slen(q->error_code);
    rec *r = rec_new(d, REC_REQUEST, n + sizeof(uint32_t));
    if (!r)
        return -1;
    /* the offsets first, aligned right after the struct */
    uint32_t *off = (uint32_t *)(void *)(r + 1);
    if (off_bytes)
        memcpy(off, q->offsets_us, off_bytes);
    char *p = (char *)off + off_bytes;
    r->offsets = off;
    r->n_offsets = q->n_offsets > 0 ? q->n_offsets : 0;
    r->session = put(&p, q->session, strlen(q->session));
    r->s1 = put(&p, q->client_id, strlen(q->client_id));
    r->s2 = put(&p, q->policy, strlen(q->policy));
    r->s3 = put(&p, q->params_json, q->params_json ? strlen(q->params_json) : 0);
    r->s4 = put(&p, q->prompt, q->prompt_len);
    r->s4_len = q->prompt_len;
    r->s5 = put(&p, q->finish_reason, q->finish_reason ? strlen(q->finish_reason) : 0);
    r->s6 = put(&p, q->error_code, q->error_code ? strlen(q->error_code) : 0);
    r->s7 = put(&p, q->completion, q->completion_len);
    r->s7_len = q->completion_len;
    r->i[0] = q->prompt_tokens;
    r->i[1] = q->completion_tokens;
    r->d[0] = q->queued_at;
    r->d[1] = q->admitted_at;
    r->d[2] = q->first_token_at;
    r->d[3] = q->finished_at;
    r->d[4] = q->queue_ms;
    r->d[5] = q->ttft_ms;
    r->d[6] = q->total_ms;
    r->d[7] = q->tokens_per_s;
    return enqueue(d, r, 1);
}

int ifl_dblog_step_sample(ifl_dblog *d, const ifl_dblog_step *s)
{
    rec *r = rec_new(d, REC_STEP, slen(s->policy));
    if (!r)
        return -1;
    char *p = (char *)(r + 1);
    r->s1 = put(&p, s->policy, strlen(s->policy));
    r->d[0] = s->at_ms;
    r->d[1] = s->step_ms;
    r->i[0] = (int64_t)s->step;
    r->i[1] = s->batch_size;
    r->i[2] = s->prefill_tokens;
    r->i[3] = s->decode_tokens;
    r->i[4] = s->running;
    r->i[5] = s->waiting;
    r->i[6] = s->kv_used;
    return enqueue(d, r, 1);
}

/* ---- the writer thread ---------------------------------------------------------------------- */

static void set_error(ifl_dblog *d, const char *msg)
{
    pthread_mutex_lock(&d->lock);
    snprintf(d->stats.last_error, sizeof d->stats.last_error, "%s", msg);
    d->stats.up = 0;
    d->stats.write_errors++;
    pthread_mutex_unlock(&d->lock);
}

static void close_db(ifl_dblog *d)
{
    for (int i = 0; i < N_ST; i++) {
        sqlite3_finalize(d->st[i]);
        d->st[i] = NULL;
    }
    sqlite3_close(d->db);
    d->db = NULL;
}

static int open_db(ifl_dblog *d, ifl_err *err, int *fatal)
{
    *fatal = 0;
    int rc = ifl_db_open(&d->db, d->path, 0, d->o.busy_timeout_ms, err);
    if (rc) {
        *fatal = rc == IFL_DB_NOT_A_DATABASE;
        return -1;
    }
    int applied = 0;
    if (ifl_db_migrate(d->db, d->path, 0, &applied, err)) {
        int v = 0;
        ifl_err e2;
        if (!ifl_db_version(d->db, &v, &e2) && v > ifl_n_migrations)
            *fatal = 1;
        close_db(d);
        return -1;
    }
    for (int i = 0; i < N_ST; i++)
        if (sqlite3_prepare_v3(d->db, SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &d->st[i], NULL) !=
            SQLITE_OK) {
            ifl_err_set(err, "%s: preparing a statement: %s", d->path, sqlite3_errmsg(d->db));
            close_db(d);
            return -1;
        }
    if (applied)
        fprintf(stderr, "inflight: %s: applied %d migration(s), schema version %d\n", d->path,
                applied, ifl_n_migrations);
    if (!d->closed_stale) {
        /* Sessions a previous run left open (it was killed) are closed now, at their last
         * request's end, so that retention can remove them like any other. Only at the first open
         * of this run: this run's own sessions are not in the file yet. */
        char *msg = NULL;
        if (sqlite3_exec(d->db,
                         "UPDATE sessions SET close_reason = 'the server stopped without closing "
                         "it', closed_at = max(connected_at, coalesce((SELECT max(coalesce("
                         "finished_at, queued_at)) FROM requests WHERE session_id = sessions.id), "
                         "connected_at)) WHERE closed_at IS NULL",
                         NULL, NULL, &msg) != SQLITE_OK) {
            ifl_err_set(err, "%s: closing the previous run's sessions: %s", d->path,
                        msg ? msg : sqlite3_errmsg(d->db));
            sqlite3_free(msg);
            close_db(d);
            return -1;
        }
        if (sqlite3_changes(d->db))
            fprintf(stderr, "inflight: %s: closed %d session(s) a previous run left open\n",
                    d->path, sqlite3_changes(d->db));
        d->closed_stale = 1;
    }
    return 0;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s, size_t n)
{
    if (s)
        sqlite3_bind_text(st, i, s, (int)n, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
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

/* One line when the log starts failing, then at most one every 30 s while it goes on. */
static void report_failure(ifl_dblog *d, const char *msg, int32_t kept)
{
    double now = ifl_db_now_ms();
    d->failures_unreported++;
    if (d->failing && now - d->last_report_ms < 30000)
        return;
    fprintf(
        stderr,
        "inflight: request log: %s (%lld failure(s); %d record(s) kept, retrying every %d ms)\n",
        msg, (long long)d->failures_unreported, kept, d->o.retry_ms);
    d->failing = 1;
    d->last_report_ms = now;
    d->failures_unreported = 0;
}

/* Writes one record. 0 written; 1 refused by the database (skip it); -1 the database failed. */
static int write_rec(ifl_dblog *d, const rec *r)
{
    sqlite3_stmt *st = NULL;
    switch (r->kind) {
    case REC_SESSION_OPEN:
        st = d->st[ST_SESSION_OPEN];
        bind_text(st, 1, r->session, strlen(r->session));
        bind_text(st, 2, r->s1, r->s1 ? strlen(r->s1) : 0);
        bind_text(st, 3, r->s2, r->s2 ? strlen(r->s2) : 0);
        bind_text(st, 4, r->s3, r->s3 ? strlen(r->s3) : 0);
        sqlite3_bind_double(st, 5, r->d[0]);
        break;
    case REC_SESSION_CLOSE:
        st = d->st[ST_SESSION_CLOSE];
        bind_text(st, 1, r->session, strlen(r->session));
        sqlite3_bind_double(st, 2, r->d[0]);
        bind_text(st, 3, r->s1, r->s1 ? strlen(r->s1) : 0);
        break;
    case REC_REQUEST:
        st = d->st[ST_REQUEST];
        bind_text(st, 1, r->session, strlen(r->session));
        bind_text(st, 2, r->s1, strlen(r->s1));
        bind_text(st, 3, r->s2, strlen(r->s2));
        bind_text(st, 4, r->s4 ? r->s4 : "", r->s4 ? r->s4_len : 0);
        bind_text(st, 5, r->s3 ? r->s3 : "{}", r->s3 ? strlen(r->s3) : 2);
        if (r->i[0] >= 0)
            sqlite3_bind_int64(st, 6, r->i[0]);
        else
            sqlite3_bind_null(st, 6);
        sqlite3_bind_int64(st, 7, r->i[1]);
        bind_text(st, 8, r->s7, r->s7_len);
        bind_text(st, 9, r->s5, r->s5 ? strlen(r->s5) : 0);
        bind_text(st, 10, r->s6, r->s6 ? strlen(r->s6) : 0);
        sqlite3_bind_double(st, 11, r->d[0]);
        bind_time(st, 12, r->d[1]);
        bind_time(st, 13, r->d[2]);
        bind_time(st, 14, r->d[3]);
        for (int k = 0; k < 4; k++)
            bind_ms(st, 15 + k, r->d[4 + k]);
        break;
    case REC_STEP:
        st = d->st[ST_STEP];
        sqlite3_bind_double(st, 1, r->d[0]);
        bind_text(st, 2, r->s1, strlen(r->s1));
        for (int k = 0; k < 4; k++)
            sqlite3_bind_int64(st, 3 + k, r->i[k]);
        sqlite3_bind_double(st, 7, r->d[1]);
        for (int k = 0; k < 3; k++)
            sqlite3_bind_int64(st, 8 + k, r->i[4 + k]);
        break;
    }
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE)
        return (rc & 0xff) == SQLITE_CONSTRAINT || (rc & 0xff) == SQLITE_MISMATCH ||
                       (rc & 0xff) == SQLITE_TOOBIG
                   ? 1
                   : -1;
    if (r->kind == REC_REQUEST && r->n_offsets > 0) {
        /* little-endian uint32 (this machine's order, checked at start) */
        sqlite3_stmt *t = d->st[ST_TOKENS];
        sqlite3_bind_int64(t, 1, sqlite3_last_insert_rowid(d->db));
        sqlite3_bind_int(t, 2, r->n_offsets);
        sqlite3_bind_blob(t, 3, r->offsets, r->n_offsets * (int)sizeof(uint32_t), SQLITE_STATIC);
        rc = sqlite3_step(t);
        sqlite3_reset(t);
        sqlite3_clear_bindings(t);
        if (rc != SQLITE_DONE)
            return (rc & 0xff) == SQLITE_CONSTRAINT ? 1 : -1;
    }
    return 0;
}

/* One transaction for the batch. 0: committed (the batch is freed); -1: kept for a retry. */
static int write_batch(ifl_dblog *d, rec *batch, int32_t n)
{
    char msg[256];
    if (sqlite3_exec(d->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(msg, sizeof msg, "%s: BEGIN: %s", d->path, sqlite3_errmsg(d->db));
        goto fail;
    }
    uint64_t written[4] = {0}, rejected = 0;
    for (rec *r = batch; r; r = r->next) {
        int w = write_rec(d, r);
        if (w < 0) {
            snprintf(msg, sizeof msg, "%s: writing: %s", d->path, sqlite3_errmsg(d->db));
            sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
            goto fail;
        }
        if (w == 0)
            written[r->kind]++;
        else
            rejected++;
    }
    if (sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(msg, sizeof msg, "%s: COMMIT: %s", d->path, sqlite3_errmsg(d->db));
        sqlite3_exec(d->db, "ROLLBACK", NULL, NULL, NULL);
        goto fail;
    }
    pthread_mutex_lock(&d->lock);
    for (int k = 0; k < 4; k++)
        d->stats.written[k] += written[k];
    d->stats.dropped_rejected += rejected;
    d->stats.batches++;
    d->stats.up = 1;
    d->stats.last_batch_ms = ifl_db_now_ms();
    d->held -= n;
    pthread_mutex_unlock(&d->lock);
    free_list(batch);
    return 0;
fail:
    set_error(d, msg);
    report_failure(d, msg, n);
    return -1;
}

static void retention(ifl_dblog *d)
{
    if (d->o.retain_days <= 0 && d->o.retain_requests <= 0)
        return;
    int64_t deleted = 0;
    char sql[512];
    if (d->o.retain_days > 0) {
        double horizon = ifl_db_now_ms() - d->o.retain_days * 86400e3;
        snprintf(sql, sizeof sql, "DELETE FROM requests WHERE queued_at < %.3f", horizon);
        if (sqlite3_exec(d->db, sql, NULL, NULL, NULL) == SQLITE_OK)
            deleted += sqlite3_changes(d->db);
    }
    if (d->o.retain_requests > 0) {
        snprintf(sql, sizeof sql,
                 "DELETE FROM requests WHERE id <= (SELECT id FROM requests ORDER BY id DESC "
                 "LIMIT 1 OFFSET %lld)",
                 (long long)d->o.retain_requests);
        if (sqlite3_exec(d->db, sql, NULL, NULL, NULL) == SQLITE_OK)
            deleted += sqlite3_changes(d->db);
    }
    /* what only the deleted requests referred to: closed sessions left with no request, steps
     * older than the oldest request kept */
    sqlite3_exec(d->db,
                 "DELETE FROM sessions WHERE closed_at IS NOT NULL AND NOT EXISTS (SELECT 1 "
                 "FROM requests WHERE requests.session_id = sessions.id) AND closed_at < "
                 "coalesce((SELECT min(queued_at) FROM requests), 9e18);"
                 "DELETE FROM steps WHERE at < coalesce((SELECT min(queued_at) FROM requests), "
                 "(SELECT max(at) FROM steps));",
                 NULL, NULL, NULL);
    pthread_mutex_lock(&d->lock);
    d->stats.retention_deleted += (uint64_t)deleted;
    pthread_mutex_unlock(&d->lock);
}

static void *writer_main(void *arg)
{
    ifl_dblog *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->lock);
        if (!d->head && !d->stopping) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = ts.tv_nsec + (int64_t)d->o.flush_ms * 1000000;
            ts.tv_sec += ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&d->wake, &d->lock, &ts);
        }
        rec *batch = d->head;
        d->head = d->tail = NULL;
        int stopping = d->stopping;
        int64_t deadline = d->stop_deadline_us;
        pthread_mutex_unlock(&d->lock);
        /* the carried records go first */
        if (d->carry) {
            rec *last = d->carry;
            while (last->next)
                last = last->next;
            last->next = batch;
            batch = d->carry;
            d->carry = NULL;
        }
        int32_t n = 0;
        for (rec *r = batch; r; r = r->next)
            n++;
        double now = ifl_db_now_ms();
        if (!d->db && now >= d->next_open_ms) {
            ifl_err err;
            int fatal;
            if (open_db(d, &err, &fatal)) {
                set_error(d, err.msg);
                report_failure(d, err.msg, n);
                d->next_open_ms = now + d->o.retry_ms;
            } else {
                pthread_mutex_lock(&d->lock);
                d->stats.up = 1;
                pthread_mutex_unlock(&d->lock);
            }
        }
        int ok = 0;
        if (d->db && n)
            ok = write_batch(d, batch, n) == 0;
        if (ok && d->failing) {
            fprintf(stderr,
                    "inflight: request log: writing to %s again (%d record(s) kept while "
                    "it failed are written)\n",
                    d->path, n);
            d->failing = 0;
            d->failures_unreported = 0;
        }
        if (n && !ok) {
            d->carry = batch;
            /* a database that fails at every write may be broken beyond a retry: reopen it */
            if (d->db) {
                close_db(d);
                d->next_open_ms = ifl_db_now_ms() + d->o.retry_ms;
            }
        }
        if (d->db && now >= d->next_retention_ms) {
            retention(d);
            d->next_retention_ms = now + d->o.retention_every_s * 1e3;
        }
        if (stopping) {
            pthread_mutex_lock(&d->lock);
            int empty = !d->head && !d->carry;
            pthread_mutex_unlock(&d->lock);
            if (empty || (int64_t)mono_us() >= deadline)
                break;
            if (!ok && n) {
                struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
                nanosleep(&ts, NULL);
                d->next_open_ms = 0;
            }
        } else if (n && !ok) {
            /* wait out the retry interval unless stopping */
            pthread_mutex_lock(&d->lock);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            int64_t ns = ts.tv_nsec + (int64_t)d->o.retry_ms * 1000000;
            ts.tv_sec += ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            if (!d->stopping)
                pthread_cond_timedwait(&d->wake, &d->lock, &ts);
            pthread_mutex_unlock(&d->lock);
        }
    }
    return NULL;
}

ifl_dblog *ifl_dblog_start(const ifl_dblog_opts *o, int *fatal, ifl_err *err)
{
    *fatal = 0;
    uint32_t probe = 1;
    if (*(const uint8_t *)&probe != 1) {
        ifl_err_set(err, "the request log stores token offsets little-endian: this machine is not");
        *fatal = 1;
        return NULL;
    }
    ifl_dblog *d = calloc(1, sizeof *d);
    if (!d) {
        ifl_err_set(err, "out of memory");
        *fatal = 1;
        return NULL;
    }
    d->o = *o;
    if (d->o.flush_ms <= 0)
        d->o.flush_ms = 200;
    if (d->o.queue_cap <= 0)
        d->o.queue_cap = 100000;
    if (d->o.busy_timeout_ms <= 0)
        d->o.busy_timeout_ms = 1000;
    if (d->o.retry_ms <= 0)
        d->o.retry_ms = 1000;
    if (d->o.retention_every_s <= 0)
        d->o.retention_every_s = 60;
    d->path = strdup(o->path);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->wake, NULL);
    int f = 0;
    if (!d->path) {
        ifl_err_set(err, "out of memory");
        f = 1;
    } else if (open_db(d, err, &f)) {
        if (!f) {
            /* not fatal: serve without the log for now, and keep trying */
            set_error(d, err->msg);
            report_failure(d, err->msg, 0);
            d->next_open_ms = ifl_db_now_ms() + d->o.retry_ms;
        }
    } else {
        d->stats.up = 1;
    }
    if (!f && pthread_create(&d->thread, NULL, writer_main, d)) {
        ifl_err_set(err, "cannot start the request log's writer thread");
        f = 1;
    }
    if (f) {
        *fatal = 1;
        close_db(d);
        pthread_mutex_destroy(&d->lock);
        pthread_cond_destroy(&d->wake);
        free(d->path);
        free(d);
        return NULL;
    }
    return d;
}

void ifl_dblog_stop(ifl_dblog *d, int32_t deadline_ms)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stopping = 1;
    d->stop_deadline_us = (int64_t)mono_us() + (int64_t)deadline_ms * 1000;
    pthread_cond_broadcast(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    int32_t lost = 0;
    for (rec *r = d->carry; r; r = r->next)
        lost++;
    for (rec *r = d->head; r; r = r->next)
        lost++;
    if (lost)
        fprintf(stderr, "inflight: request log: %d record(s) could not be written before exit\n",
                lost);
    free_list(d->carry);
    free_list(d->head);
    close_db(d);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->wake);
    free(d->path);
    free(d);
}

void ifl_dblog_get_stats(ifl_dblog *d, ifl_dblog_stats *out)
{
    pthread_mutex_lock(&d->lock);
    *out = d->stats;
    out->queued = d->held;
    pthread_mutex_unlock(&d->lock);
}
