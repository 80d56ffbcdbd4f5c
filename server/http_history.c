/* http_history.c: the HTTP side of the history API (GET/HEAD /api/history and /api/requests/ID,
 * docs/protocol.md): the request checked and handed to the history thread (history.h), its answer
 * brought back through the bridge and written. A list page comes in chunks; each is written, in
 * pieces of HISTORY_PIECE bytes, before the next is asked for, so a connection holds at most one
 * (counted in inflight_history_buffered_bytes). What it is not: the queries (history.c) or the
 * other routes (http.c). Service thread, except http_on_history_done (history thread). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_history.h"

#define HISTORY_PIECE 16384 /* bytes of body per lws_write, as http.c writes */

/* A history query and the bridge item its answer travels in: answering never allocates, so an
 * answer cannot be lost on the way back to its connection. `job` first: freeing the job frees
 * both. One job serves the whole answer: a list page comes in chunks (history.h), each written
 * out before the job goes back to the history thread for the next, so a connection holds at
 * most one chunk (inflight_history_buffered_bytes counts what is held). Service thread: the
 * fields after `answer`. */
typedef struct {
    history_job job;
    bridge_item answer;
    size_t sent;    /* bytes of job.body written */
    size_t counted; /* bytes of job.body in inflight_history_buffered_bytes */
    enum {
        HJ_NEW,     /* no headers yet */
        HJ_WHOLE,   /* headers with Content-Length: the one body follows */
        HJ_CHUNKED, /* headers with Transfer-Encoding: chunked: chunk after chunk */
    } phase;
} http_job;

static int http_json_error(srv_conn *c, struct lws *wsi, int status, const char *msg, int head_only)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"error\":");
    sb_json_str(&sb, msg, strlen(msg));
    sb_puts(&sb, "}");
    return http_respond_json(c, wsi, status, &sb, head_only, NULL, NULL);
}

/* Parses a decimal argument in [lo, hi]; -1 if present and bad, 0 absent, 1 read. */
static int url_int(struct lws *wsi, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[64];
    const char *v = lws_get_urlarg_by_name(wsi, name, buf, sizeof buf);
    if (!v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 1;
}

/* GET /api/history and /api/requests/ID (docs/protocol.md): checked here, answered by the
 * history thread. */
int http_history_begin(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    if (!strcmp(s->o->history, "off"))
        return http_json_error(c, wsi, HTTP_STATUS_FORBIDDEN, "history is off on this server",
                               head_only);
    if (!s->history)
        return http_json_error(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE,
                               "this server keeps no request log: start it with --db PATH",
                               head_only);
    http_job *hj = calloc(1, sizeof *hj);
    if (!hj)
        return -1;
    history_job *j = &hj->job;
    char key[128];
    const char *v = lws_get_urlarg_by_name(wsi, "user=", key, sizeof key);
    if (v && srv_user_key_hash(v, j->user_hash)) {
        free(j);
        return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                               "user must be 16 to 64 characters of A-Z a-z 0-9 _ -", head_only);
    }
    if (!v && strcmp(s->o->history, "all")) {
        free(j);
        return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                               "user=KEY is required: history shows a key's own requests",
                               head_only);
    }
    if (!strcmp(path, "/api/history")) {
        int64_t limit = 50, before = 0;
        if (url_int(wsi, "limit=", 1, 500, &limit) < 0) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                                   "limit must be an integer from 1 to 500", head_only);
        }
        if (url_int(wsi, "before=", 1, INT64_MAX, &before) < 0) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                                   "before must be a request id (a positive integer)", head_only);
        }
        char conv[REQ_MAX_CONV + 8];
        const char *cv = lws_get_urlarg_by_name(wsi, "conversation=", conv, sizeof conv);
        if (cv && !proto_conversation_valid(cv)) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                                   "conversation must be 1 to 64 characters of A-Z a-z 0-9 _ -",
                                   head_only);
        }
        if (cv)
            snprintf(j->conversation, sizeof j->conversation, "%s", cv);
        j->kind = HISTORY_LIST;
        j->limit = (int32_t)limit;
        j->before = before;
    } else {
        const char *idp = path + strlen("/api/requests/");
        char *end;
        long long id = strtoll(idp, &end, 10);
        if (!*idp || *end || id < 1) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_NOT_FOUND,
                                   "no such request: the id must be a positive integer", head_only);
        }
        j->kind = HISTORY_ONE;
        j->id = id;
    }
    j->head_only = head_only;
    j->tag = c;
    c->job = j;
    c->wsi = wsi;
    ifl_history_submit(s->history, j);
    return 0;
}

/* The history answer the connection holds, freed (its bytes leave the gauge). */
static void history_drop(server *s, srv_conn *c)
{
    http_job *hj = (http_job *)c->answer;
    c->answer = NULL;
    s->m.history_buffered_bytes -= hj->counted;
    free(hj->job.body);
    free(hj);
}

/* The chunk in hand is written: the answer is done (the transaction ends), or its job goes back
 * to the history thread for the next chunk. */
static int history_chunk_done(server *s, srv_conn *c, struct lws *wsi)
{
    http_job *hj = (http_job *)c->answer;
    history_job *j = &hj->job;
    if (j->last || hj->phase != HJ_CHUNKED) {
        history_drop(s, c);
        if (c->http_close_after)
            return -1;
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    s->m.history_buffered_bytes -= hj->counted;
    hj->counted = hj->sent = 0;
    free(j->body);
    j->body = NULL;
    j->len = 0;
    c->answer = NULL;
    if (!s->history) { /* stopped: the answer cannot be finished */
        free(hj);
        return -1;
    }
    c->job = j; /* j->tag is still c */
    ifl_history_submit(s->history, j);
    return 0;
}

/* Starts a history answer: a HEAD's headers (Content-Length of the whole answer) and its end; a
 * whole answer (one request, an error, a page of one chunk) with its Content-Length; or a page of
 * several chunks with Transfer-Encoding: chunked. */
static int history_start(server *s, srv_conn *c, struct lws *wsi)
{
    http_job *hj = (http_job *)c->answer;
    history_job *j = &hj->job;
    int whole = j->head_only || j->last;
    if (http_headers(wsi, j->status, "application/json", j->len, !whole, NULL, NULL)) {
        history_drop(s, c);
        return -1;
    }
    hj->phase = whole ? HJ_WHOLE : HJ_CHUNKED;
    if (j->head_only || !j->len)
        return history_chunk_done(s, c, wsi);
    lws_callback_on_writable(wsi);
    return 0;
}

/* HTTP_WRITEABLE with a history answer in hand: its headers, then up to HISTORY_PIECE bytes a
 * call (framed as a chunk when streaming; the terminating chunk goes with the last piece). A
 * streamed answer whose later chunk failed is cut short: the connection closes. */
int http_history_writeable(server *s, srv_conn *c, struct lws *wsi)
{
    http_job *hj = (http_job *)c->answer;
    history_job *j = &hj->job;
    int chunked = hj->phase == HJ_CHUNKED;
    if ((!j->body && !j->head_only) || (chunked && j->status != HTTP_STATUS_OK)) {
        history_drop(s, c);
        return -1;
    }
    if (hj->phase == HJ_NEW)
        return history_start(s, c, wsi);
    size_t n = j->len - hj->sent;
    if (n > HISTORY_PIECE)
        n = HISTORY_PIECE;
    int end = hj->sent + n == j->len; /* this piece ends the chunk in hand */
    int final = end && (!chunked || j->last);
    uint8_t buf[LWS_PRE + HISTORY_PIECE + 32], *q = buf + LWS_PRE;
    size_t w = 0;
    if (chunked && n)
        w = (size_t)snprintf((char *)q, 20, "%zx\r\n", n);
    memcpy(q + w, j->body + hj->sent, n);
    w += n;
    if (chunked && n) {
        memcpy(q + w, "\r\n", 2);
        w += 2;
    }
    if (chunked && final) {
        memcpy(q + w, "0\r\n\r\n", 5);
        w += 5;
    }
    if (w && lws_write(wsi, q, w, final ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)w) {
        history_drop(s, c);
        return -1;
    }
    hj->sent += n;
    if (!end) {
        lws_callback_on_writable(wsi);
        return 0;
    }
    return history_chunk_done(s, c, wsi);
}

/* A history answer (or a list page's next chunk) is back: hand it to its connection (written at
 * its next HTTP_WRITEABLE), or drop it if the connection went away. */
void http_history_answer(server *s, history_job *j)
{
    srv_conn *c = j->tag;
    if (!c || c->job != j || !c->wsi) {
        free(j->body);
        free(j);
        return;
    }
    http_job *hj = (http_job *)j;
    hj->counted = j->body ? j->len : 0;
    s->m.history_buffered_bytes += hj->counted;
    c->job = NULL;
    c->answer = j;
    lws_callback_on_writable(c->wsi);
}

/* History thread: the answer goes through the event queue like everything else. */
void http_on_history_done(void *ud, history_job *job)
{
    server *s = ud;
    http_job *hj = (http_job *)job;
    memset(&hj->answer, 0, sizeof hj->answer);
    hj->answer.kind = BRIDGE_HISTORY;
    hj->answer.job = job;
    hj->answer.embedded = 1;
    bridge_push(&s->bridge, &hj->answer);
}

/* The connection is gone: a chunk still to come is dropped when it arrives, one in hand now. */
void http_history_closed(server *s, srv_conn *c)
{
    if (c->job)
        c->job->tag = NULL; /* its answer is dropped when it comes */
    c->job = NULL;
    if (c->answer)
        history_drop(s, c);
}
