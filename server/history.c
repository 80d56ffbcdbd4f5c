/* history.c: the history queries (history.h). */
#include "history.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "strbuf.h"

struct ifl_history {
    char *path;
    int scope_all;
    void (*done)(void *ud, history_job *job);
    void *ud;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    history_job *head, *tail; /* {lock} */
    int stopping;             /* {lock} */
    sqlite3 *db;              /* history thread */
};

static const char COLS[] =
    "r.id, r.client_id, s.session, r.policy, r.prompt, r.completion, r.prompt_tokens, "
    "r.completion_tokens, r.finish_reason, r.error_code, r.queued_at, r.queue_ms, r.ttft_ms, "
    "r.total_ms, r.tokens_per_s";

static void answer(history_job *j, int status, strbuf *sb)
{
    j->status = status;
    j->len = sb->len;
    j->body = sb_ok(sb) ? sb_steal(sb) : NULL;
    if (!j->body) {
        j->status = 500;
        j->len = 0;
    }
    sb_free(sb);
}

static void answer_error(history_job *j, int status, const char *msg)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"error\":");
    sb_json_str(&sb, msg, strlen(msg));
    sb_puts(&sb, "}");
    answer(j, status, &sb);
}

static void json_col(strbuf *sb, sqlite3_stmt *st, int i)
{
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL: sb_puts(sb, "null"); break;
    case SQLITE_INTEGER: sb_printf(sb, "%lld", (long long)sqlite3_column_int64(st, i)); break;
    case SQLITE_FLOAT: sb_json_num(sb, sqlite3_column_double(st, i), 3); break;
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        sb_json_str(sb, t ? t : "", (size_t)sqlite3_column_bytes(st, i));
    }
    }
}

static void row_fields(strbuf *sb, sqlite3_stmt *st)
{
    static const char *const names[] = {
        "id",           "client_id",     "session",           "policy",        "prompt",
        "completion",   "prompt_tokens", "completion_tokens", "finish_reason", "error_code",
        "queued_at_ms", "queue_ms",      "ttft_ms",           "total_ms",      "tokens_per_s"};
    for (int i = 0; i < 15; i++) {
        sb_printf(sb, "%s\"%s\":", i ? "," : "", names[i]);
        json_col(sb, st, i);
    }
}

static int ensure_db(ifl_history *h, history_job *j)
{
    if (h->db)
        return 0;
    ifl_err err;
    if (ifl_db_open(&h->db, h->path, 1, 2000, &err)) {
        answer_error(j, 503, err.msg);
        return -1;
    }
    int v;
    if (ifl_db_version(h->db, &v, &err) || v < 2) {
        answer_error(j, 503, "the request log has no history yet (schema not created)");
        sqlite3_close(h->db);
        h->db = NULL;
        return -1;
    }
    return 0;
}

static void db_failed(ifl_history *h, history_job *j)
{
    char msg[300];
    snprintf(msg, sizeof msg, "%s: %s", h->path, sqlite3_errmsg(h->db));
    answer_error(j, 503, msg);
    sqlite3_close(h->db); /* reopened at the next job */
    h->db = NULL;
}

static void run_list(ifl_history *h, history_job *j)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT %s FROM requests r JOIN sessions s ON s.id = r.session_id WHERE "
             "(?1 OR s.user_key = ?2) AND (?3 = 0 OR r.queued_at < (SELECT queued_at FROM "
             "requests WHERE id = ?3) OR (r.queued_at = (SELECT queued_at FROM requests WHERE "
             "id = ?3) AND r.id < ?3)) ORDER BY r.queued_at DESC, r.id DESC LIMIT ?4",
             COLS);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h->db, sql, -1, &st, NULL) != SQLITE_OK) {
        db_failed(h, j);
        return;
    }
    sqlite3_bind_int(st, 1, h->scope_all);
    sqlite3_bind_text(st, 2, j->user_hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, j->before > 0 ? j->before : 0);
    sqlite3_bind_int(st, 4, j->limit + 1); /* one more: is there a next page? */
    strbuf sb;
    sb_init(&sb, 0);
    sb_printf(&sb, "{\"scope\":\"%s\",\"requests\":[", h->scope_all ? "all" : "own");
    int n = 0, rc;
    int64_t last_id = 0, more = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == j->limit) {
            more = 1;
            break;
        }
        sb_puts(&sb, n ? ",{" : "{");
        row_fields(&sb, st);
        sb_puts(&sb, "}");
        last_id = sqlite3_column_int64(st, 0);
        n++;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        sqlite3_finalize(st);
        sb_free(&sb);
        db_failed(h, j);
        return;
    }
    sqlite3_finalize(st);
    if (more)
        sb_printf(&sb, "],\"next_before\":%lld}", (long long)last_id);
    else
        sb_puts(&sb, "],\"next_before\":null}");
    answer(j, 200, &sb);
}

static void run_one(ifl_history *h, history_job *j)
{
    char sql[1024];
    snprintf(sql, sizeof sql,
             "SELECT %s, r.params, r.admitted_at, r.first_token_at, r.finished_at, s.user_key, "
             "t.offsets_us FROM requests r JOIN sessions s ON s.id = r.session_id LEFT JOIN "
             "request_tokens t ON t.request_id = r.id WHERE r.id = ?1",
             COLS);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h->db, sql, -1, &st, NULL) != SQLITE_OK) {
        db_failed(h, j);
        return;
    }
    sqlite3_bind_int64(st, 1, j->id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        sqlite3_finalize(st);
        answer_error(j, 404, "no such request");
        return;
    }
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(st);
        db_failed(h, j);
        return;
    }
    const char *owner = (const char *)sqlite3_column_text(st, 19);
    if (!h->scope_all && (!owner || !j->user_hash[0] || strcmp(owner, j->user_hash))) {
        sqlite3_finalize(st);
        answer_error(j, 403, "this request is not yours (history shows a key's own requests)");
        return;
    }
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"request\":{");
    row_fields(&sb, st);
    const char *params = (const char *)sqlite3_column_text(st, 15);
    sb_printf(&sb, ",\"params\":%s", params && params[0] ? params : "{}");
    static const char *const times[] = {"admitted_at_ms", "first_token_at_ms", "finished_at_ms"};
    for (int i = 0; i < 3; i++) {
        sb_printf(&sb, ",\"%s\":", times[i]);
        json_col(&sb, st, 16 + i);
    }
    sb_puts(&sb, ",\"token_offsets_us\":[");
    const uint32_t *off = sqlite3_column_blob(st, 20);
    int nb = sqlite3_column_bytes(st, 20) / (int)sizeof(uint32_t);
    for (int i = 0; off && i < nb; i++) {
        uint32_t v;
        memcpy(&v, (const char *)off + (size_t)i * 4, 4);
        sb_printf(&sb, i ? ",%u" : "%u", v);
    }
    sb_puts(&sb, "]}}");
    sqlite3_finalize(st);
    answer(j, 200, &sb);
}

static void *history_main(void *arg)
{
    ifl_history *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->lock);
        while (!h->head && !h->stopping)
            pthread_cond_wait(&h->wake, &h->lock);
        history_job *j = h->head;
        if (j) {
            h->head = j->next;
            if (!h->head)
                h->tail = NULL;
        }
        int stopping = h->stopping;
        pthread_mutex_unlock(&h->lock);
        if (!j) {
            if (stopping)
                break;
            continue;
        }
        if (stopping)
            answer_error(j, 503, "the server is shutting down");
        else if (!ensure_db(h, j)) {
            if (j->kind == HISTORY_LIST)
                run_list(h, j);
            else
                run_one(h, j);
        }
        h->done(h->ud, j);
    }
    return NULL;
}

ifl_history *ifl_history_start(const char *db_path, int scope_all,
                               void (*done)(void *ud, history_job *job), void *ud)
{
    ifl_history *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->path = strdup(db_path);
    h->scope_all = scope_all;
    h->done = done;
    h->ud = ud;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->wake, NULL);
    if (!h->path || pthread_create(&h->thread, NULL, history_main, h)) {
        free(h->path);
        free(h);
        return NULL;
    }
    return h;
}

void ifl_history_submit(ifl_history *h, history_job *job)
{
    job->next = NULL;
    pthread_mutex_lock(&h->lock);
    if (h->tail)
        h->tail->next = job;
    else
        h->head = job;
    h->tail = job;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
}

void ifl_history_stop(ifl_history *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->lock);
    h->stopping = 1;
    pthread_cond_signal(&h->wake);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    sqlite3_close(h->db);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->wake);
    free(h->path);
    free(h);
}
