/* dblog.c: the request log's writer thread (dblog.h); the records and how each kind is written
 * are dblog_rec.c's. What it is not: the migrations (db.c) or the history queries (history.c).
 *
 * State and its guards:
 *   d->q     the records waiting (common/fifo.h, its own lock): bounded by queue_cap, counting
 *            the carried batch as held until it is written; closed by ifl_dblog_stop, which also
 *            cuts the writer's sleep short (flush interval, retry wait: a new record does not).
 *   {lock}   the stats, stop_deadline_us. Lock order: lock, then q's lock (a committed batch
 *            leaves the bound in the same critical section that counts it written, so a stats
 *            snapshot never counts a record twice or not at all).
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
#include "dblog_rec.h"
#include "fifo.h"

struct ifl_dblog {
    ifl_dblog_opts o;
    char *path;
    pthread_t thread;
    ifl_fifo q; /* rec nodes (own lock) */
    pthread_mutex_t lock;
    int64_t stop_deadline_us; /* {lock} */
    ifl_dblog_stats stats;    /* {lock} (stats.queued is filled from q when read) */
    /* writer thread */
    sqlite3 *db;
    sqlite3_stmt *st[N_ST];
    ifl_fifo_node *carry;
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

/* ---- records (any thread that enqueues: the service thread) ---------------------------------- */

static void free_list(ifl_fifo_node *n)
{
    while (n) {
        ifl_fifo_node *next = n->next;
        free(n); /* the node is the record's first member */
        n = next;
    }
}

static int32_t count_list(const ifl_fifo_node *n)
{
    int32_t k = 0;
    for (; n; n = n->next)
        k++;
    return k;
}

static void count_drop(ifl_dblog *d)
{
    pthread_mutex_lock(&d->lock);
    d->stats.dropped_full++;
    pthread_mutex_unlock(&d->lock);
}

/* Queues r, or drops it (freed, counted as dropped_full) when it could not be made (out of
 * memory), when the log is stopping or, for a record that may be dropped, when queue_cap records
 * are held. */
static int enqueue(ifl_dblog *d, rec *r, int may_drop)
{
    if (r && ifl_fifo_push(&d->q, &r->node, !may_drop) == IFL_FIFO_OK)
        return 0;
    count_drop(d);
    free(r);
    return -1;
}

int ifl_dblog_session_open(ifl_dblog *d, const ifl_dblog_session *s)
{
    return enqueue(d, dblog_rec_session_open(s), 0);
}

int ifl_dblog_session_close(ifl_dblog *d, const char *session, double at_ms, const char *reason)
{
    return enqueue(d, dblog_rec_session_close(session, at_ms, reason), 0);
}

int ifl_dblog_request_done(ifl_dblog *d, const ifl_dblog_request *q)
{
    return enqueue(d, dblog_rec_request(q), 1);
}

int ifl_dblog_step_sample(ifl_dblog *d, const ifl_dblog_step *s)
{
    return enqueue(d, dblog_rec_step(s), 1);
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
        if (sqlite3_prepare_v3(d->db, DBLOG_SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &d->st[i],
                               NULL) != SQLITE_OK) {
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

/* One transaction for the batch (n records). 0: committed (the batch is freed and leaves the
 * bound); -1: kept for a retry (still held). */
static int write_batch(ifl_dblog *d, ifl_fifo_node *batch, int32_t n)
{
    char msg[256];
    if (sqlite3_exec(d->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
        snprintf(msg, sizeof msg, "%s: BEGIN: %s", d->path, sqlite3_errmsg(d->db));
        goto fail;
    }
    uint64_t written[N_REC] = {0}, rejected = 0;
    for (ifl_fifo_node *nd = batch; nd; nd = nd->next) {
        const rec *r = (const rec *)nd;
        int w = dblog_rec_write(d->db, d->st, r);
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
    for (int k = 0; k < N_REC; k++)
        d->stats.written[k] += written[k];
    d->stats.dropped_rejected += rejected;
    d->stats.batches++;
    d->stats.up = 1;
    d->stats.last_batch_ms = ifl_db_now_ms();
    ifl_fifo_done(&d->q, n); /* under lock: see the lock order at the top */
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

/* The round's batch: the carried records first, then everything queued (waiting up to flush_ms
 * for some when none is queued, unless stopping). *n gets its length. */
static ifl_fifo_node *next_batch(ifl_dblog *d, int32_t *n)
{
    ifl_fifo_node *fresh = ifl_fifo_take_all(&d->q, NULL);
    if (!fresh && !ifl_fifo_is_closed(&d->q)) {
        ifl_fifo_wait_closed(&d->q, d->o.flush_ms); /* a new record does not end it: a stop does */
        fresh = ifl_fifo_take_all(&d->q, NULL);
    }
    ifl_fifo_node *batch = fresh;
    if (d->carry) {
        ifl_fifo_node *last = d->carry;
        while (last->next)
            last = last->next;
        last->next = fresh;
        batch = d->carry;
        d->carry = NULL;
    }
    *n = count_list(batch);
    return batch;
}

/* Opens the database if it is closed and its retry time has come. */
static void try_open(ifl_dblog *d, double now, int32_t kept)
{
    if (d->db || now < d->next_open_ms)
        return;
    ifl_err err;
    int fatal;
    if (open_db(d, &err, &fatal)) {
        set_error(d, err.msg);
        report_failure(d, err.msg, kept);
        d->next_open_ms = now + d->o.retry_ms;
    } else {
        pthread_mutex_lock(&d->lock);
        d->stats.up = 1;
        pthread_mutex_unlock(&d->lock);
    }
}

/* After the round's write: report a recovery, or keep the batch (still held) for the next round
 * and close a database that failed (reopened after retry_ms). */
static void settle(ifl_dblog *d, ifl_fifo_node *batch, int32_t n, int ok)
{
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
}

/* Writer thread. */
static void *writer_main(void *arg)
{
    ifl_dblog *d = arg;
    for (;;) {
        int32_t n;
        ifl_fifo_node *batch = next_batch(d, &n);
        int stopping = ifl_fifo_is_closed(&d->q);
        double now = ifl_db_now_ms();
        try_open(d, now, n);
        int ok = 0;
        if (d->db && n)
            ok = write_batch(d, batch, n) == 0;
        settle(d, batch, n, ok);
        if (d->db && now >= d->next_retention_ms) {
            retention(d);
            d->next_retention_ms = now + d->o.retention_every_s * 1e3;
        }
        if (stopping) {
            pthread_mutex_lock(&d->lock);
            int64_t deadline = d->stop_deadline_us;
            pthread_mutex_unlock(&d->lock);
            /* held: queued, or carried after a failure */
            if (ifl_fifo_held(&d->q) == 0 || (int64_t)mono_us() >= deadline)
                break;
            if (!ok && n) {
                struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
                nanosleep(&ts, NULL);
                d->next_open_ms = 0;
            }
        } else if (n && !ok) {
            ifl_fifo_wait_closed(&d->q, d->o.retry_ms); /* the retry interval, unless stopping */
        }
    }
    return NULL;
}

static void free_log(ifl_dblog *d)
{
    close_db(d);
    ifl_fifo_destroy(&d->q);
    pthread_mutex_destroy(&d->lock);
    free(d->path);
    free(d);
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
    ifl_fifo_init(&d->q, d->o.queue_cap);
    pthread_mutex_init(&d->lock, NULL);
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
        free_log(d);
        return NULL;
    }
    return d;
}

void ifl_dblog_stop(ifl_dblog *d, int32_t deadline_ms)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->lock);
    d->stop_deadline_us = (int64_t)mono_us() + (int64_t)deadline_ms * 1000;
    pthread_mutex_unlock(&d->lock);
    ifl_fifo_close(&d->q); /* after the deadline is set: the writer reads it once it sees this */
    pthread_join(d->thread, NULL);
    ifl_fifo_node *left = ifl_fifo_take_all(&d->q, NULL);
    int32_t lost = count_list(d->carry) + count_list(left);
    if (lost)
        fprintf(stderr, "inflight: request log: %d record(s) could not be written before exit\n",
                lost);
    free_list(d->carry);
    free_list(left);
    free_log(d);
}

void ifl_dblog_get_stats(ifl_dblog *d, ifl_dblog_stats *out)
{
    pthread_mutex_lock(&d->lock);
    *out = d->stats;
    out->queued = (int32_t)ifl_fifo_held(&d->q); /* under lock: see the lock order at the top */
    pthread_mutex_unlock(&d->lock);
}
