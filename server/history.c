/* history.c: the history queries (history.h) and the thread that runs them. What it is not: the
 * writer (dblog.c) or the HTTP side (the server parses the URL and writes the answer).
 *
 * Every column an answer shows comes from one table, HISTORY_COLUMNS: its SQL expression, its
 * JSON field and how it is rendered. The SELECT lists, the result-column indices (COL_*) and the
 * JSON names are all derived from it, so adding a column cannot shift an index. The list query
 * selects LIST_COLUMNS; the one-request query selects those and then DETAIL_COLUMNS.
 *
 * A list page is made a chunk at a time (history.h): each chunk is one statement, prepared, stepped
 * and finalized, so no read transaction (no snapshot that would hold back a WAL checkpoint) lasts
 * longer than one chunk. The first chunk starts at `before` (or the newest); each later one after
 * the (queued_at, id) of the last row written, which stays valid if retention deletes that row.
 *
 * Threads: ifl_history_submit runs on the caller's thread (the service thread); the queries, the
 * connection and the `done` calls on the history thread. The job queue is a common/fifo.h FIFO
 * (its own lock), closed by ifl_history_stop. */
#include "history.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "strbuf.h"

typedef enum {
    AS_VALUE,   /* by its SQLite type: null, integer, number (3 decimals) or string */
    AS_JSON,    /* stored JSON text, written as it is ("{}" when empty) */
    AS_JSON_OR_NULL, /* stored JSON text, written as it is (null when NULL) */
    AS_OFFSETS, /* a blob of little-endian uint32, written as an array of integers */
    AS_HIDDEN,  /* selected for the query's own use, not in the answer */
} col_render;

/* X(id, SQL expression, JSON field, rendering): what GET /api/history shows for each request */
#define LIST_COLUMNS(X)                                                                            \
    X(ID, "r.id", "id", AS_VALUE)                                                                  \
    X(CLIENT_ID, "r.client_id", "client_id", AS_VALUE)                                             \
    X(SESSION, "s.session", "session", AS_VALUE)                                                   \
    X(POLICY, "r.policy", "policy", AS_VALUE)                                                      \
    X(PROMPT, "r.prompt", "prompt", AS_VALUE)                                                      \
    X(COMPLETION, "r.completion", "completion", AS_VALUE)                                          \
    X(PROMPT_TOKENS, "r.prompt_tokens", "prompt_tokens", AS_VALUE)                                 \
    X(COMPLETION_TOKENS, "r.completion_tokens", "completion_tokens", AS_VALUE)                     \
    X(FINISH_REASON, "r.finish_reason", "finish_reason", AS_VALUE)                                 \
    X(ERROR_CODE, "r.error_code", "error_code", AS_VALUE)                                          \
    X(QUEUED_AT, "r.queued_at", "queued_at_ms", AS_VALUE)                                          \
    X(QUEUE_MS, "r.queue_ms", "queue_ms", AS_VALUE)                                                \
    X(TTFT_MS, "r.ttft_ms", "ttft_ms", AS_VALUE)                                                   \
    X(TOTAL_MS, "r.total_ms", "total_ms", AS_VALUE)                                                \
    X(TOKENS_PER_S, "r.tokens_per_s", "tokens_per_s", AS_VALUE)                                    \
    X(CONVERSATION, "r.conversation", "conversation", AS_VALUE)                                    \
    X(CACHED_TOKENS, "r.cached_tokens", "cached_tokens", AS_VALUE)                                \
    X(MESSAGES, "r.messages", "messages", AS_JSON_OR_NULL)                                         \
    X(TRIMMED_MESSAGES, "r.trimmed_messages", "trimmed_messages", AS_VALUE)                        \
    X(TRIMMED_TOKENS, "r.trimmed_tokens", "trimmed_tokens", AS_VALUE)

/* ... and what GET /api/requests/ID adds, after them */
#define DETAIL_COLUMNS(X)                                                                          \
    X(PARAMS, "r.params", "params", AS_JSON)                                                       \
    X(ADMITTED_AT, "r.admitted_at", "admitted_at_ms", AS_VALUE)                                    \
    X(FIRST_TOKEN_AT, "r.first_token_at", "first_token_at_ms", AS_VALUE)                           \
    X(FINISHED_AT, "r.finished_at", "finished_at_ms", AS_VALUE)                                    \
    X(OWNER, "s.user_key", NULL, AS_HIDDEN)                                                        \
    X(TOKEN_OFFSETS, "t.offsets_us", "token_offsets_us", AS_OFFSETS)

#define HISTORY_COLUMNS(X) LIST_COLUMNS(X) DETAIL_COLUMNS(X)

#define COL_ENUM(id, sql, json, how) COL_##id,
#define COL_ROW(id, sql, json, how) {sql, json, how},
#define COL_COUNT(id, sql, json, how) +1

/* result-column indices, in both queries */
enum { HISTORY_COLUMNS(COL_ENUM) N_COLS };
enum { N_LIST_COLS = 0 LIST_COLUMNS(COL_COUNT) };

typedef struct {
    const char *sql;  /* the SELECT expression */
    const char *json; /* the answer's field; NULL for AS_HIDDEN */
    col_render how;
} history_col;

static const history_col COLS[N_COLS] = {HISTORY_COLUMNS(COL_ROW)};

struct ifl_history {
    char *path;
    int scope_all;
    void (*done)(void *ud, history_job *job);
    void *ud;
    char *sql_list, *sql_more, *sql_one; /* built at start from COLS (read-only after) */
    pthread_t thread;
    ifl_fifo jobs; /* history_job nodes (own lock) */
    sqlite3 *db;   /* history thread */
};

/* The job's answer (the whole of it: `last`; a list chunk clears that after) from sb, which it
 * takes. The body is cut to its length: a chunk's buffer grew for a row that was then left out. */
static void answer(history_job *j, int status, strbuf *sb)
{
    j->status = status;
    j->len = sb->len;
    j->last = 1;
    j->body = sb_ok(sb) ? sb_steal(sb) : NULL;
    if (j->body) {
        char *fit = realloc(j->body, j->len + 1);
        if (fit)
            j->body = fit;
    } else {
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

static void json_value(strbuf *sb, sqlite3_stmt *st, int i)
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

static void json_offsets(strbuf *sb, sqlite3_stmt *st, int i)
{
    sb_puts(sb, "[");
    const uint32_t *off = sqlite3_column_blob(st, i);
    int nb = sqlite3_column_bytes(st, i) / (int)sizeof(uint32_t);
    for (int k = 0; off && k < nb; k++) {
        uint32_t v;
        memcpy(&v, (const char *)off + (size_t)k * 4, 4);
        sb_printf(sb, k ? ",%u" : "%u", v);
    }
    sb_puts(sb, "]");
}

/* The fields of the first n columns of the row, as COLS says, separated by commas. */
static void row_fields(strbuf *sb, sqlite3_stmt *st, int n)
{
    int first = 1;
    for (int i = 0; i < n; i++) {
        const history_col *c = &COLS[i];
        if (c->how == AS_HIDDEN)
            continue;
        sb_printf(sb, "%s\"%s\":", first ? "" : ",", c->json);
        first = 0;
        switch (c->how) {
        case AS_VALUE: json_value(sb, st, i); break;
        case AS_JSON: {
            const char *t = (const char *)sqlite3_column_text(st, i);
            sb_puts(sb, t && t[0] ? t : "{}");
            break;
        }
        case AS_JSON_OR_NULL: {
            const char *t = (const char *)sqlite3_column_text(st, i);
            sb_puts(sb, t && t[0] ? t : "null");
            break;
        }
        case AS_OFFSETS: json_offsets(sb, st, i); break;
        case AS_HIDDEN: break;
        }
    }
}

/* "SELECT <the first n columns' expressions> <rest>", on the heap; NULL when memory ran out. */
static char *build_select(int n, const char *rest)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "SELECT ");
    for (int i = 0; i < n; i++)
        sb_printf(&sb, "%s%s", i ? ", " : "", COLS[i].sql);
    sb_printf(&sb, " %s", rest);
    char *s = sb_ok(&sb) ? sb_steal(&sb) : NULL;
    sb_free(&sb);
    return s;
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

/* A history page stops at the first row that starts past this many bytes of JSON (at least one
 * row is sent): next_before continues from there. */
#define HISTORY_PAGE_BYTES (1 << 20)

/* History thread: the statement for j's next chunk, bound; NULL when it failed (answered). */
static sqlite3_stmt *list_stmt(ifl_history *h, history_job *j)
{
    int after = j->rows > 0; /* a later chunk: after the last row written */
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h->db, after ? h->sql_more : h->sql_list, -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        db_failed(h, j);
        return NULL;
    }
    sqlite3_bind_int(st, 1, h->scope_all);
    sqlite3_bind_text(st, 2, j->user_hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, after ? j->last_id : j->before > 0 ? j->before : 0);
    sqlite3_bind_int(st, 4, j->limit - j->rows + 1); /* one more: is there a next page? */
    if (after)
        sqlite3_bind_double(st, 5, j->last_queued);
    if (j->conversation[0])
        sqlite3_bind_text(st, 6, j->conversation, -1, SQLITE_STATIC);
    return st;
}

/* History thread: the next chunk of j's page. The first opens it; a chunk stops before the row
 * that would take it past HISTORY_CHUNK_BYTES (that row starts the next one); the one that reaches
 * the page's end (limit rows, HISTORY_PAGE_BYTES, or no more rows) closes it with next_before. */
static void run_chunk(ifl_history *h, history_job *j)
{
    sqlite3_stmt *st = list_stmt(h, j);
    if (!st)
        return;
    strbuf sb;
    sb_init(&sb, 0);
    if (!j->page_bytes)
        sb_printf(&sb, "{\"scope\":\"%s\",\"requests\":[", h->scope_all ? "all" : "own");
    int rc, in_chunk = 0, end = 0, more = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        /* rows, and bytes: 500 rows of long completions were a 30 MB answer held per client */
        if (j->rows == j->limit || (j->rows > 0 && j->page_bytes + sb.len >= HISTORY_PAGE_BYTES)) {
            more = end = 1;
            break;
        }
        size_t at = sb.len;
        sb_puts(&sb, j->rows ? ",{" : "{");
        row_fields(&sb, st, N_LIST_COLS);
        sb_puts(&sb, "}");
        if (in_chunk && sb.len > HISTORY_CHUNK_BYTES) {
            sb.len = at; /* the next chunk starts with this row */
            break;
        }
        in_chunk++;
        j->rows++;
        j->last_id = sqlite3_column_int64(st, COL_ID);
        j->last_queued = sqlite3_column_double(st, COL_QUEUED_AT);
    }
    sqlite3_finalize(st); /* the read transaction ends here, every chunk */
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        sb_free(&sb);
        db_failed(h, j);
        return;
    }
    if (rc == SQLITE_DONE)
        end = 1;
    if (end && more)
        sb_printf(&sb, "],\"next_before\":%lld}", (long long)j->last_id);
    else if (end)
        sb_puts(&sb, "],\"next_before\":null}");
    j->page_bytes += sb.len;
    answer(j, 200, &sb);
    j->last = end;
}

/* History thread: a GET's next chunk; for a HEAD, every chunk in turn, only their length kept. */
static void run_list(ifl_history *h, history_job *j)
{
    if (!j->head_only) {
        run_chunk(h, j);
        return;
    }
    size_t total = 0;
    do {
        free(j->body);
        j->body = NULL;
        run_chunk(h, j);
        total += j->len;
    } while (!j->last && j->body);
    if (j->status == 200 && j->body) {
        free(j->body);
        j->body = NULL;
        j->len = total;
    }
}

/* History thread. */
static void run_one(ifl_history *h, history_job *j)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(h->db, h->sql_one, -1, &st, NULL) != SQLITE_OK) {
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
    const char *owner = (const char *)sqlite3_column_text(st, COL_OWNER);
    if (!h->scope_all && (!owner || !j->user_hash[0] || strcmp(owner, j->user_hash))) {
        sqlite3_finalize(st);
        /* the same answer as for no such id: ids cannot be probed for existence */
        answer_error(j, 404, "no such request");
        return;
    }
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"request\":{");
    row_fields(&sb, st, N_COLS);
    sb_puts(&sb, "}}");
    sqlite3_finalize(st);
    answer(j, 200, &sb);
}

/* History thread: one job at a time, oldest first, until stopped and drained. */
static void *history_main(void *arg)
{
    ifl_history *h = arg;
    ifl_fifo_node *n;
    while ((n = ifl_fifo_pop_wait(&h->jobs, -1))) { /* NULL: closed and empty */
        history_job *j = (history_job *)n;          /* the node is the job's first member */
        if (ifl_fifo_is_closed(&h->jobs))
            answer_error(j, 503, "the server is shutting down");
        else if (!ensure_db(h, j)) {
            if (j->kind == HISTORY_LIST)
                run_list(h, j);
            else
                run_one(h, j);
        }
        ifl_fifo_done(&h->jobs, 1);
        h->done(h->ud, j);
    }
    return NULL;
}

static void free_history(ifl_history *h)
{
    ifl_fifo_destroy(&h->jobs);
    free(h->sql_list);
    free(h->sql_more);
    free(h->sql_one);
    free(h->path);
    free(h);
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
    h->sql_list = build_select(
        N_LIST_COLS,
        "FROM requests r JOIN sessions s ON s.id = r.session_id WHERE "
        "(?1 OR s.user_key = ?2) AND (?6 IS NULL OR r.conversation = ?6) AND (?3 = 0 OR "
        "r.queued_at < (SELECT queued_at FROM requests WHERE id = ?3) OR (r.queued_at = "
        "(SELECT queued_at FROM requests WHERE id = ?3) AND r.id < ?3)) ORDER BY r.queued_at "
        "DESC, r.id DESC LIMIT ?4");
    h->sql_more = build_select(
        N_LIST_COLS, "FROM requests r JOIN sessions s ON s.id = r.session_id "
                     "WHERE (?1 OR s.user_key = ?2) AND (?6 IS NULL OR r.conversation = ?6) "
                     "AND (r.queued_at < ?5 OR "
                     "(r.queued_at = ?5 AND r.id < ?3)) ORDER BY "
                     "r.queued_at DESC, r.id DESC LIMIT ?4");
    h->sql_one = build_select(N_COLS, "FROM requests r JOIN sessions s ON s.id = r.session_id "
                                      "LEFT JOIN request_tokens t ON t.request_id = r.id "
                                      "WHERE r.id = ?1");
    ifl_fifo_init(&h->jobs, 0);
    if (!h->path || !h->sql_list || !h->sql_more || !h->sql_one ||
        pthread_create(&h->thread, NULL, history_main, h)) {
        free_history(h);
        return NULL;
    }
    return h;
}

void ifl_history_submit(ifl_history *h, history_job *job)
{
    if (ifl_fifo_push(&h->jobs, &job->node, 0) == IFL_FIFO_OK)
        return;
    answer_error(job, 503, "the server is shutting down"); /* stopping: the queue is closed */
    h->done(h->ud, job);
}

void ifl_history_stop(ifl_history *h)
{
    if (!h)
        return;
    ifl_fifo_close(&h->jobs); /* the thread answers what is still queued 503, then ends */
    pthread_join(h->thread, NULL);
    sqlite3_close(h->db);
    free_history(h);
}
