/* http_gen.c: generation over plain HTTP, on the request layer (request.h) like /ws, for the APIs
 * of http_api.h, each read from its row of HTTP_APIS: Triton's generate extension (POST
 * /v2/models/{iterative-gpt2,simple-gpt2}/generate and .../generate_stream) and OpenAI's POST
 * /v1/completions and /v1/chat/completions (with "stream": true). This file does what they share:
 * the route, the body, the submission, the request layer's sink, and the answer: one JSON object,
 * or Server-Sent Events sent chunked and flushed as each token comes.
 *
 * One request at a time per connection. The connection is the session (in the batchers' fairness
 * and in the request log; kept with the socket's record (sockets.h), since lws gives every HTTP
 * transaction fresh per-session data), unless OpenAI's "user" names one. Each request is an owner
 * of its own, so a client that goes away cancels it (req_owner_gone: its KV blocks are free within
 * one step). After the answer the connection stays
 * open for the next request (keep-alive).
 *
 * The body: with a Content-Length, or Transfer-Encoding: chunked (decoded here, http_chunked.c:
 * lws 4.1 hands such a body over raw; the connection closes after its answer, since lws still
 * counts it as a body of unknown end), neither is 411, both 400; at most --max-message bytes
 * (413), Content-Type application/json (Triton: also none or curl -d's
 * application/x-www-form-urlencoded, as Triton's own curl examples send; else 415).
 * Service thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "db.h"
#include "http_api.h"
#include "http_chunked.h"
#include "service.h"
#include "util.h"

#define SSE_CHUNK 16384

struct http_gen {
    struct lws *wsi;
    http_req_info ri;
    /* the body */
    char *body;
    size_t body_len, body_cap;
    int chunked;    /* Transfer-Encoding: chunked, decoded by dec */
    int body_whole; /* chunked: the last chunk came; later bytes are not this request's */
    http_chunked dec;
    http_body_fn on_body; /* a body answered by a handler of its own (the tokenizer's), or NULL */
    /* the answer */
    uint64_t t_arrival; /* monotonic us: the request's headers arrived */
    int submitted;      /* the request layer has it: sink calls will come */
    int headers_sent;   /* stream: the 200 and its headers are out */
    int ended;          /* stream: the last event is queued */
    int plain;          /* stream: HTTP/1.0, sent without chunked coding, closed at its end */
    int overflow;       /* stream: past --max-outbox, closing */
    strbuf text;        /* JSON answer: the completion so far */
    strbuf out;         /* stream: bytes to send */
    size_t out_sent;    /* of out */
};

static void gen_free(srv_conn *c)
{
    http_gen *g = c->gen;
    if (!g)
        return;
    free(g->body);
    sb_free(&g->text);
    sb_free(&g->out);
    free(g);
    c->gen = NULL;
}

/* An error answer in the API's shape, with `status` (close: the connection closes after it), and a
 * Retry-After header in whole seconds, rounded up, when retry_after_ms > 0 (queue_full). */
static int gen_error_answer_after(srv_conn *c, struct lws *wsi, const http_req_info *ri, int status,
                                  ifl_code code, const char *param, const char *msg, int close,
                                  int32_t retry_after_ms)
{
    strbuf sb;
    sb_init(&sb, 0);
    HTTP_APIS[ri->api].write_error(&sb, ri, status, code, param, msg, 0);
    gen_free(c);                  /* ri may be c->gen's: written above */
    c->http_close_after |= close; /* a chunked request's connection closes anyway */
    close = c->http_close_after;
    if (retry_after_ms <= 0 && status == 429)
        retry_after_ms = 1000; /* too many requests on this connection: a second */
    char secs[16];
    snprintf(secs, sizeof secs, "%d", (retry_after_ms + 999) / 1000);
    return http_respond_json(c, wsi, status, &sb, 0,
                             close                ? "connection:"
                             : retry_after_ms > 0 ? "retry-after:"
                                                  : NULL,
                             close ? "close" : secs);
}

static int gen_error_answer(srv_conn *c, struct lws *wsi, const http_req_info *ri, int status,
                            ifl_code code, const char *param, const char *msg, int close)
{
    return gen_error_answer_after(c, wsi, ri, status, code, param, msg, close, 0);
}

/* ---- the stream ------------------------------------------------------------------------------ */

/* plain: an HTTP/1.0 client, which knows no chunked coding: the events go as they are and the
 * connection's close ends the stream. */
static int sse_headers(struct lws *wsi, int close, int plain)
{
    uint8_t hbuf[LWS_PRE + 1024], *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf;
    static const char *const hdrs[][2] = {
        {"content-type:", "text/event-stream; charset=utf-8"},
        {"cache-control:", "no-cache"},
        {"x-content-type-options:", "nosniff"},
        {"transfer-encoding:", "chunked"},
    };
    if (lws_add_http_header_status(wsi, HTTP_STATUS_OK, &p, end) || http_cors_headers(wsi, &p, end))
        return -1;
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0] - (size_t)plain; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)hdrs[i][0],
                                        (const unsigned char *)hdrs[i][1], (int)strlen(hdrs[i][1]),
                                        &p, end))
            return -1;
    if ((close || plain) && lws_add_http_header_by_name(wsi, (const unsigned char *)"connection:",
                                                        (const unsigned char *)"close", 5, &p, end))
        return -1;
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    return 0;
}

/* Queues stream bytes (whole events) for the next HTTP_WRITEABLE. A client that reads less than
 * it is sent is closed as /ws's are once --max-outbox bytes wait (its request is cancelled). */
static void sse_queue(http_gen *g, const strbuf *ev)
{
    if (!sb_ok(ev)) {
        g->out.oom = 1;
        return;
    }
    if (g->overflow)
        return;
    sb_append(&g->out, sb_text(ev), ev->len);
    if (!g->wsi)
        return;
    server *s = lws_context_user(lws_get_context(g->wsi));
    if (g->out.len - g->out_sent > (size_t)s->o->max_outbox) {
        g->overflow = 1;
        s->m.closed_slow++;
        lws_set_timeout(g->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
        return;
    }
    lws_callback_on_writable(g->wsi);
}

int http_gen_writeable(srv_conn *c, struct lws *wsi)
{
    http_gen *g = c->gen;
    if (!g->headers_sent) {
        g->plain = sockets_http10(c->srv ? c->srv : lws_context_user(lws_get_context(wsi)), wsi);
        if (sse_headers(wsi, c->http_close_after, g->plain))
            return -1;
        g->headers_sent = 1;
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (g->out.oom)
        return -1;
    size_t n = g->out.len - g->out_sent;
    if (n > SSE_CHUNK)
        n = SSE_CHUNK;
    if (n) {
        uint8_t buf[LWS_PRE + SSE_CHUNK + 32];
        int h = g->plain ? 0 : snprintf((char *)buf + LWS_PRE, 16, "%zx\r\n", n);
        memcpy(buf + LWS_PRE + h, sb_text(&g->out) + g->out_sent, n);
        size_t t = g->plain ? 0 : 2;
        memcpy(buf + LWS_PRE + h + n, "\r\n", t);
        if (lws_write(wsi, buf + LWS_PRE, (size_t)h + n + t, LWS_WRITE_HTTP) <
            (int)((size_t)h + n + t))
            return -1;
        g->out_sent += n;
        if (g->out_sent == g->out.len) {
            sb_reset(&g->out);
            g->out_sent = 0;
        }
        if (g->out.len || g->ended)
            lws_callback_on_writable(wsi);
        return 0;
    }
    if (!g->ended)
        return 0;
    if (g->plain) { /* HTTP/1.0: the close ends the stream */
        gen_free(c);
        return -1;
    }
    uint8_t fin[LWS_PRE + 8];
    memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
    if (lws_write(wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 5)
        return -1;
    gen_free(c);
    if (c->http_close_after)
        return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* ---- the request layer's sink ---------------------------------------------------------------- */

static void sink_queued(void *fe, const srv_req *r, int32_t position)
{
    (void)fe, (void)r, (void)position;
}

static void sink_started(void *fe, const srv_req *r)
{
    (void)fe, (void)r;
}

static void sink_token(void *fe, const srv_req *r, int32_t index, int32_t token, const char *text,
                       size_t len)
{
    (void)r, (void)index, (void)token;
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g)
        return;
    if (!g->ri.stream) {
        sb_append(&g->text, text, len);
        return;
    }
    strbuf ev;
    sb_init(&ev, 0);
    HTTP_APIS[g->ri.api].write_token(&ev, &g->ri, text, len);
    sse_queue(g, &ev);
    sb_free(&ev);
}

static void sink_done(void *fe, const srv_req *r, const req_result *res)
{
    (void)r;
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g || !g->wsi)
        return;
    if (res->finish == IFL_FINISH_ERROR && !g->ri.stream) {
        gen_error_answer(c, g->wsi, &g->ri, ifl_code_get(res->code)->http_status, res->code, NULL,
                         res->message ? res->message : "the engine failed", 0);
        return;
    }
    if (res->finish == IFL_FINISH_CANCELLED && HTTP_APIS[g->ri.api].openai && !g->ri.stream) {
        /* OpenAI has no finish_reason for it: a request the stopping server cancelled */
        gen_error_answer(c, g->wsi, &g->ri, 503, IFL_CODE_SHUTTING_DOWN, NULL,
                         OPENAI_CANCELLED_MESSAGE, 0);
        return;
    }
    strbuf sb;
    sb_init(&sb, 0);
    const char *text = g->text.buf ? sb_text(&g->text) : "";
    HTTP_APIS[g->ri.api].write_end(&sb, &g->ri, res, text, g->text.len);
    if (g->ri.stream) {
        g->ended = 1;
        sse_queue(g, &sb);
        sb_free(&sb);
        return;
    }
    struct lws *wsi = g->wsi;
    if (!sb_ok(&sb) || g->text.oom) {
        sb_free(&sb);
        gen_error_answer(c, wsi, &g->ri, HTTP_STATUS_INTERNAL_SERVER_ERROR, IFL_CODE_OUT_OF_MEMORY,
                         NULL, "no memory for the answer", 0);
        return;
    }
    gen_free(c);
    if (http_respond_json(c, wsi, HTTP_STATUS_OK, &sb, 0,
                          c->http_close_after ? "connection:" : NULL, "close"))
        lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

/* A refusal (before any token): the answer is the error. */
static void sink_error(void *fe, const char *id, ifl_code code, const char *message,
                       int32_t retry_after_ms)
{
    (void)id;
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g || !g->wsi)
        return;
    if (g->ri.stream && g->headers_sent) {
        strbuf sb;
        sb_init(&sb, 0);
        HTTP_APIS[g->ri.api].write_error(&sb, &g->ri, ifl_code_get(code)->http_status, code, NULL,
                                         message, 1);
        g->ended = 1;
        sse_queue(g, &sb);
        sb_free(&sb);
        return;
    }
    struct lws *wsi = g->wsi;
    if (gen_error_answer_after(c, wsi, &g->ri, ifl_code_get(code)->http_status, code, NULL, message,
                               0, retry_after_ms))
        lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

static const req_sink HTTP_SINK = {.queued = sink_queued,
                                   .started = sink_started,
                                   .token = sink_token,
                                   .done = sink_done,
                                   .error = sink_error};

/* ---- the request ----------------------------------------------------------------------------- */

/* Content-Type application/json; for an API with form_bodies also none or
 * application/x-www-form-urlencoded (curl -d's). 1 yes, 0 no (got holds what was sent), -1 the
 * header does not fit in cap bytes (431: never read as absent). */
static int content_type_ok(struct lws *wsi, const http_api_desc *a, char *got, size_t cap)
{
    got[0] = 0;
    int len = lws_hdr_copy(wsi, got, (int)cap, WSI_TOKEN_HTTP_CONTENT_TYPE);
    if (len < 0)
        return -1;
    if (len == 0)
        return a->form_bodies;
    size_t n = strcspn(got, "; \t");
    return (n == 16 && !strncasecmp(got, "application/json", 16)) ||
           (a->form_bodies && n == 33 &&
            !strncasecmp(got, "application/x-www-form-urlencoded", 33));
}

/* The route of a POST path, by each API's row: 0 with *ri's api (and the row's route's fields)
 * set; -1 if it is not a generation path; -2 for an unknown model or version (ri->api set, msg
 * says so). */
static int route(const char *path, http_req_info *ri, char *msg, size_t cap)
{
    for (int k = 0; k < HTTP_N_APIS; k++) {
        memset(ri, 0, sizeof *ri);
        ri->api = (http_api_kind)k;
        int rc = HTTP_APIS[k].route(&HTTP_APIS[k], path, ri, msg, cap);
        if (rc != -1)
            return rc;
    }
    memset(ri, 0, sizeof *ri); /* (http.c routes only generation paths here) */
    return -1;
}

/* How the body is framed: 0 a Content-Length (copied to cl), 1 chunked; -2 neither (411), -1 a
 * framing we refuse (400: both at once, as request smuggling uses, or another coding), -3 a header
 * longer than its buffer (431); msg says which. */
static int body_framing(struct lws *wsi, char *cl, size_t cl_size, char *msg, size_t msg_size)
{
    char te[64];
    int cl_len = lws_hdr_copy(wsi, cl, (int)cl_size, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    int te_len = lws_hdr_copy(wsi, te, sizeof te, WSI_TOKEN_HTTP_TRANSFER_ENCODING);
    if (cl_len < 0 || te_len < 0) { /* never read as absent */
        snprintf(msg, msg_size, "the %s header is over %zu bytes",
                 cl_len < 0 ? "Content-Length" : "Transfer-Encoding",
                 (cl_len < 0 ? cl_size : sizeof te) - 1);
        return -3;
    }
    int has_cl = cl_len > 0;
    if (te_len <= 0) {
        if (has_cl)
            return 0;
        snprintf(msg, msg_size, "the body needs a Content-Length or Transfer-Encoding: chunked");
        return -2;
    }
    if (strcasecmp(te, "chunked")) {
        snprintf(msg, msg_size, "Transfer-Encoding is '%.40s': only 'chunked' is accepted", te);
        return -1;
    }
    if (has_cl) {
        snprintf(msg, msg_size, "a request has both Content-Length and Transfer-Encoding");
        return -1;
    }
    return 1;
}

/* A chunked body's bytes: decoded into g->body; its end is the request's body completion. */
static int chunked_body(server *s, srv_conn *c, struct lws *wsi, const void *in, size_t len)
{
    http_gen *g = c->gen;
    const char *err;
    char msg[200];
    size_t used;
    int rc = http_chunked_feed(&g->dec, in, len, g->body, &g->body_len, g->body_cap, &used, &err);
    if (rc == HTTP_CHUNKED_MORE)
        return 0;
    if (rc == HTTP_CHUNKED_BAD) {
        snprintf(msg, sizeof msg, "the chunked body is malformed: %s", err);
        return gen_error_answer(c, wsi, &g->ri, HTTP_STATUS_BAD_REQUEST, IFL_CODE_INVALID_REQUEST,
                                NULL, msg, 1);
    }
    if (rc == HTTP_CHUNKED_BIG) {
        snprintf(msg, sizeof msg, "the chunked body passes %zu bytes (--max-message)", g->body_cap);
        return gen_error_answer(c, wsi, &g->ri, HTTP_STATUS_REQ_ENTITY_TOO_LARGE,
                                IFL_CODE_INVALID_REQUEST, NULL, msg, 1);
    }
    g->body_whole = 1;
    sockets_http_whole(s, wsi); /* (the wire guard does not see a chunked body's end) */
    /* lws still waits for the rest of a body it thinks has no end: its timeout must not cut the
     * answer off */
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
    return http_gen_body_done(s, c, wsi);
}

/* The checks before a body is read (the server ready, its Content-Type, its framing and size),
 * then the body is read into a new c->gen for ri's API (on_body: for that handler instead). */
static int begin_body(server *s, srv_conn *c, struct lws *wsi, http_req_info ri,
                      http_body_fn on_body)
{
    char msg[300];
    if (s->rl.stopping || !atomic_load(&s->ready))
        return gen_error_answer(
            c, wsi, &ri, HTTP_STATUS_SERVICE_UNAVAILABLE, IFL_CODE_SHUTTING_DOWN, NULL,
            s->rl.stopping ? "the server is shutting down" : "not ready: loading the model", 1);
    char ct[256], cl[32];
    int ct_ok = content_type_ok(wsi, &HTTP_APIS[ri.api], ct, sizeof ct);
    if (ct_ok < 0) {
        snprintf(msg, sizeof msg, "the Content-Type header is over %zu bytes", sizeof ct - 1);
        return gen_error_answer(c, wsi, &ri, HTTP_STATUS_HEADER_TOO_LARGE,
                                IFL_CODE_HEADER_TOO_LARGE, NULL, msg, 1);
    }
    if (!ct_ok) {
        int shown = http_clip_len(ct, 64);
        snprintf(msg, sizeof msg, "Content-Type is '%.*s%s': the body must be application/json",
                 shown, ct, ct[shown] ? "..." : "");
        return gen_error_answer(c, wsi, &ri, HTTP_STATUS_UNSUPPORTED_MEDIA_TYPE,
                                IFL_CODE_INVALID_REQUEST, NULL, msg, 1);
    }
    int chunked = body_framing(wsi, cl, sizeof cl, msg, sizeof msg);
    if (chunked == -3)
        return gen_error_answer(c, wsi, &ri, HTTP_STATUS_HEADER_TOO_LARGE,
                                IFL_CODE_HEADER_TOO_LARGE, NULL, msg, 1);
    if (chunked < 0)
        return gen_error_answer(
            c, wsi, &ri, chunked == -2 ? HTTP_STATUS_LENGTH_REQUIRED : HTTP_STATUS_BAD_REQUEST,
            IFL_CODE_INVALID_REQUEST, NULL, msg, 1);
    char *end;
    unsigned long long len =
        chunked ? (unsigned long long)s->o->max_message : strtoull(cl, &end, 10);
    if (!chunked && (*end || len > (unsigned long long)s->o->max_message)) {
        snprintf(msg, sizeof msg, "the body is %s bytes: at most %d (--max-message)", cl,
                 (int)s->o->max_message);
        return gen_error_answer(c, wsi, &ri, HTTP_STATUS_REQ_ENTITY_TOO_LARGE,
                                IFL_CODE_INVALID_REQUEST, NULL, msg, 1);
    }
    gen_free(c);
    http_gen *g = calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->wsi = wsi;
    g->ri = ri;
    g->t_arrival = ifl_now_us();
    g->body_cap = (size_t)len;
    g->chunked = chunked;
    g->on_body = on_body;
    if (chunked) {
        http_chunked_init(&g->dec);
        c->http_close_after = 1;
    }
    g->body = malloc(g->body_cap + 1);
    sb_init(&g->text, 0);
    sb_init(&g->out, 0);
    c->gen = g;
    if (!g->body)
        return gen_error_answer(c, wsi, &g->ri, HTTP_STATUS_INTERNAL_SERVER_ERROR,
                                IFL_CODE_OUT_OF_MEMORY, NULL, "no memory for the body", 1);
    if (!len && !chunked) /* lws sends no BODY_COMPLETION for an empty body */
        return http_gen_body_done(s, c, wsi);
    return 0;
}

int http_gen_begin(server *s, srv_conn *c, struct lws *wsi, const char *path)
{
    http_req_info ri;
    char msg[300];
    int rt = route(path, &ri, msg, sizeof msg);
    if (rt == -2) {
        return gen_error_answer(c, wsi, &ri, HTTP_STATUS_NOT_FOUND, IFL_CODE_UNKNOWN_MODEL, "model",
                                msg, 1);
    }
    if (!srv_api_key_ok(s, wsi, 0)) {
        c->http_close_after = 1; /* the body is not read */
        return http_unauthorized(s, c, wsi, HTTP_APIS[ri.api].front_end);
    }
    return begin_body(s, c, wsi, ri, NULL);
}

int http_gen_begin_body(server *s, srv_conn *c, struct lws *wsi, http_body_fn on_body)
{
    http_req_info ri = {.api = HTTP_API_COMPLETIONS}; /* its errors: OpenAI's shape */
    return begin_body(s, c, wsi, ri, on_body);
}

int http_gen_body(server *s, srv_conn *c, struct lws *wsi, const void *in, size_t len)
{
    (void)s;
    http_gen *g = c->gen;
    if (!g || g->body_whole)
        return 0;
    if (g->chunked)
        return chunked_body(s, c, wsi, in, len);
    if (g->body_len + len > g->body_cap)
        return gen_error_answer(c, wsi, &g->ri, HTTP_STATUS_BAD_REQUEST, IFL_CODE_INVALID_REQUEST,
                                NULL, "the body is longer than its Content-Length", 1);
    memcpy(g->body + g->body_len, in, len);
    g->body_len += len;
    return 0;
}

/* What outlives a connection's transactions (lws frees the per-session data after each): its
 * session, kept with the socket's record (sockets_http_slot) until CLOSED_HTTP. */
typedef struct {
    uint64_t session;
    int logged; /* its sessions row is written */
} http_conn;

/* The request's owner, in its session: the connection's (the batchers' fairness, and the request
 * log, whose requests rows need a sessions row), or the one OpenAI's "user" names. The sessions
 * row is left to the request layer (req_owner.session_row): written with the first request the log
 * keeps, so that a connection whose requests were refused past the log's budget leaves none. The
 * budget is the client address's (reqlog.h), whatever the connection. */
static void open_session(server *s, srv_conn *c, struct lws *wsi, const http_req_info *ri)
{
    uint64_t session;
    void **slot = sockets_http_slot(s, wsi);
    http_conn *hc = slot ? *slot : NULL;
    if (!hc && slot && (hc = calloc(1, sizeof *hc))) {
        hc->session = req_random_u64(&s->rl);
        *slot = hc;
    }
    if (ri->has_user) {
        session = 1469598103934665603ull; /* FNV-1a of the name */
        for (const char *q = ri->user; *q; q++)
            session = (session ^ (unsigned char)*q) * 1099511628211ull;
    } else {
        session = hc ? hc->session : req_random_u64(&s->rl);
    }
    req_owner_init(&c->owner, &HTTP_SINK, c, session, 1);
    reqlog_peer_key(lws_get_socket_fd(wsi), c->owner.peer);
    if (!s->log.db || (!ri->has_user && hc && hc->logged))
        return; /* (a user's session row is written with each logged request: the log keeps one) */
    lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
    if (lws_hdr_copy(wsi, c->user_agent, sizeof c->user_agent, WSI_TOKEN_HTTP_USER_AGENT) < 0)
        c->user_agent[0] = 0;
    /* pointers into c, which outlives the submission that writes the row */
    c->owner.session_row =
        (ifl_dblog_session){.session = c->owner.session_hex,
                            .remote_addr = c->peer,
                            .user_agent = c->user_agent[0] ? c->user_agent : NULL,
                            .at_ms = ifl_db_now_ms()};
    c->owner.session_logged = hc && !ri->has_user ? &hc->logged : NULL;
}

static const char *served_name(const server *s)
{
    const char *d = s->o->model_dir ? s->o->model_dir : "gpt2";
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/')
        n--;
    const char *b = d + n;
    while (b > d && b[-1] != '/')
        b--;
    static char name[HTTP_MODEL_MAX + 1];
    snprintf(name, sizeof name, "%.*s",
             (int)(d + n - b > HTTP_MODEL_MAX ? HTTP_MODEL_MAX : d + n - b), b);
    return name;
}

const char *http_gen_served_name(const server *s)
{
    return served_name(s);
}

static int parse_body(server *s, http_gen *g, req_params *p, proto_error *pe)
{
    if (!ifl_utf8_valid(g->body, g->body_len)) {
        proto_error_set(pe, IFL_CODE_INVALID_MESSAGE, "the body is not valid UTF-8");
        return -1;
    }
    cJSON *root = proto_parse_json_object(g->body, g->body_len, pe);
    if (!root)
        return -1;
    int rc = HTTP_APIS[g->ri.api].parse(root, &s->lim, served_name(s), &g->ri, p, pe);
    cJSON_Delete(root);
    return rc;
}

int http_gen_body_done(server *s, srv_conn *c, struct lws *wsi)
{
    http_gen *g = c->gen;
    if (!g)
        return 0;
    if (g->on_body) { /* the handler answers: the body is its own */
        http_body_fn fn = g->on_body;
        char *body = g->body;
        size_t n = g->body_len;
        g->body = NULL;
        gen_free(c);
        int rc = fn(s, c, wsi, body, n);
        free(body);
        return rc;
    }
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    req_params p;
    memset(&p, 0, sizeof p);
    if (parse_body(s, g, &p, &pe)) {
        free(p.prompt);
        free(p.prompt_ids);
        metrics_count_error(&s->m, pe.code);
        return gen_error_answer(c, wsi, &g->ri, ifl_code_get(pe.code)->http_status, pe.code,
                                pe.param[0] ? pe.param : NULL, pe.message, 0);
    }
    free(g->body);
    g->body = NULL;
    const http_api_desc *a = &HTTP_APIS[g->ri.api];
    if (a->resp_id_prefix) {
        g->ri.created = (long long)time(NULL);
        snprintf(g->ri.resp_id, sizeof g->ri.resp_id, "%s-%016llx", a->resp_id_prefix,
                 (unsigned long long)req_random_u64(&s->rl));
    }
    p.policy = g->ri.policy;
    p.api = a->front_end;
    snprintf(p.id, sizeof p.id, "http");
    if (!c->owner.sink)
        open_session(s, c, wsi, &g->ri);
    g->submitted = 1;
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0); /* the answer may take longer than lws's 30 s */
    srv_req *r = req_submit(&s->rl, &c->owner, &p, g->t_arrival);
    free(p.prompt); /* req_submit took it, or left it to us */
    free(p.prompt_ids);
    if (!r)
        return 0; /* refused: sink_error answered */
    if (g->ri.stream)
        lws_callback_on_writable(wsi); /* the headers now: the client sees 200 at once */
    return 0;
}

int http_gen_streaming(const srv_conn *c)
{
    return c->gen && c->gen->ri.stream && c->gen->submitted;
}

void http_gen_closed(server *s, srv_conn *c)
{
    if (c->gen)
        c->gen->wsi = NULL;
    if (c->owner.sink) {
        req_owner_gone(&s->rl, &c->owner);
        c->owner.sink = NULL; /* once: the close and the end of the transaction both come here */
    }
    gen_free(c);
}

void http_gen_conn_closed(server *s, struct lws *wsi)
{
    void **slot = sockets_http_slot(s, wsi);
    http_conn *hc = slot ? *slot : NULL;
    if (!hc)
        return;
    *slot = NULL;
    if (hc->logged && s->log.db) {
        char hex[REQ_SESSION_HEX];
        req_session_hex(hc->session, hex);
        ifl_dblog_session_close(s->log.db, hex, ifl_db_now_ms(), "HTTP connection closed");
    }
    free(hc);
}
