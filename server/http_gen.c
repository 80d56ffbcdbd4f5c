/* http_gen.c: generation over plain HTTP, on the request layer (request.h) like /ws, for the APIs
 * of http_api.h, each read from its row of HTTP_APIS: Triton's generate extension (POST
 * /v2/models/{iterative-gpt2,simple-gpt2}/generate and .../generate_stream) and OpenAI's POST
 * /v1/completions and /v1/chat/completions (with "stream": true). This file does what they share
 * once the body is read: the submission, the request layer's sink, and the answer: one JSON object,
 * or Server-Sent Events sent chunked and flushed as each token comes. The route and the body
 * (framing, size, Content-Type) are read in http_gen_body.c; the state both share is
 * http_gen_impl.h's.
 *
 * One request at a time per connection. The connection is the session (in the batchers' fairness
 * and in the request log; kept with the socket's record (sockets.h), since lws gives every HTTP
 * transaction fresh per-session data), unless OpenAI's "user" names one. Each request is an owner
 * of its own, so a client that goes away cancels it (req_owner_gone: its KV blocks are free within
 * one step). After the answer the connection stays
 * open for the next request (keep-alive).
 * Service thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat_template.h"
#include "db.h"
#include "http_gen_impl.h"
#include "util.h"

#define SSE_CHUNK 16384

void gen_free(srv_conn *c)
{
    http_gen *g = c->gen;
    if (!g)
        return;
    free(g->body);
    http_choices_free(&g->ch);
    openai_free_prompts(&g->ri);
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

int gen_error_answer(srv_conn *c, struct lws *wsi, const http_req_info *ri, int status,
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

static void sink_started_choices(void *fe, const srv_req *r)
{
    srv_conn *c = fe;
    if (c->gen)
        http_choices_started(&c->gen->ch, c->gen->tok, r);
}

static void sink_prompt(void *fe, const srv_req *r, int32_t index, const ifl_logprob *lp,
                        int32_t n)
{
    srv_conn *c = fe;
    if (c->gen)
        http_choices_prompt(&c->gen->ch, c->gen->tok, r, index, lp, n);
}

static void sink_token(void *fe, const srv_req *r, const req_token *t)
{
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g)
        return;
    int stream = g->ri.stream && !g->failed;
    strbuf lp;
    sb_init(&lp, 0);
    http_choices_token(&g->ch, g->tok, r, t, stream && t->lp ? &lp : NULL);
    if (stream) {
        strbuf ev;
        sb_init(&ev, 0);
        HTTP_APIS[g->ri.api].write_token(&ev, &g->ri, &g->ch,
                                         http_choice_index(&g->ch, r, t->choice), t,
                                         lp.len ? &lp : NULL);
        sse_queue(g, &ev);
        sb_free(&ev);
    }
    sb_free(&lp);
}

static void sink_choice_done(void *fe, const srv_req *r, const req_result *res)
{
    srv_conn *c = fe;
    if (c->gen)
        http_choices_choice_end(&c->gen->ch, r, res);
}

/* Every request of the body ended: the answer (res: their sum). */
static void answer(srv_conn *c, http_gen *g, const req_result *res)
{
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
    HTTP_APIS[g->ri.api].write_end(&sb, &g->ri, res, &g->ch);
    if (g->ri.stream) {
        g->ended = 1;
        sse_queue(g, &sb);
        sb_free(&sb);
        return;
    }
    struct lws *wsi = g->wsi;
    if (!sb_ok(&sb)) {
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

/* One request of the body ended: its choices' finishes (a stream's events for them); the first
 * failure cancels the others; the last one's end is the answer. */
static void sink_done(void *fe, const srv_req *r, const req_result *res)
{
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g)
        return;
    if (r->n_choices == 1)
        http_choices_choice_end(&g->ch, r, res);
    if ((res->finish == IFL_FINISH_ERROR || res->finish == IFL_FINISH_CANCELLED) && !g->failed) {
        g->failed = 1;
        req_owner_cancel_all(g->rl, &c->owner);
    }
    const http_api_desc *a = &HTTP_APIS[g->ri.api];
    if (!g->failed && g->ri.stream && a->write_prompt_end) {
        strbuf ev;
        sb_init(&ev, 0);
        a->write_prompt_end(&ev, &g->ri, &g->ch, r->prompt_index);
        sse_queue(g, &ev);
        sb_free(&ev);
    }
    if (!http_choices_request_end(&g->ch, res) || !g->wsi)
        return;
    answer(c, g, &g->ch.sum);
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
                                   .started = sink_started_choices,
                                   .prompt = sink_prompt,
                                   .token = sink_token,
                                   .choice_done = sink_choice_done,
                                   .done = sink_done,
                                   .error = sink_error};

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

/* One prompt of the batch into p (its text or ids taken from the batch), p's own when none. */
static void take_prompt(req_params *p, req_prompt *batch, int32_t i)
{
    p->prompt_index = i;
    if (!batch) {
        snprintf(p->id, sizeof p->id, "http");
        return;
    }
    snprintf(p->id, sizeof p->id, "http-%d", (int)i);
    p->prompt = batch[i].text;
    p->prompt_len = batch[i].len;
    p->prompt_ids = batch[i].ids;
    p->n_prompt_ids = batch[i].n_ids;
    batch[i].text = NULL;
    batch[i].ids = NULL;
}

/* Every prompt of the body to the request layer, one request each (the connection's owner may hold
 * them all); a refusal answers the body (sink_error) and cancels those already in. */
static int submit_all(server *s, srv_conn *c, struct lws *wsi, req_params *p)
{
    http_gen *g = c->gen;
    req_prompt *batch = g->ri.prompts; /* ours now: g may be freed by a refusal's answer */
    int32_t n = batch ? g->ri.n_prompts : 1;
    g->ri.prompts = NULL;
    g->ri.n_prompts = 0;
    g->rl = &s->rl;
    g->tok = s->rl.rt ? s->rl.rt->tok : NULL;
    c->owner.max_inflight = n;
    int chat = g->ri.api == HTTP_API_CHAT;
    if (http_choices_init(&g->ch, chat, n, p->n, req_logprobs(p), p->echo)) {
        free(p->prompt);
        free(p->prompt_ids);
        req_chat_free(p->chat);
        openai_free_prompts(&(http_req_info){.prompts = batch, .n_prompts = batch ? n : 0});
        return gen_error_answer(c, wsi, &g->ri, HTTP_STATUS_SERVICE_UNAVAILABLE,
                                IFL_CODE_OUT_OF_MEMORY, NULL, "no memory for the answer", 0);
    }
    g->submitted = 1;
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0); /* the answer may take longer than lws's 30 s */
    int ok = 1;
    for (int32_t i = 0; i < n && ok; i++) {
        take_prompt(p, batch, i);
        srv_req *r = req_submit(&s->rl, &c->owner, p, g->t_arrival);
        free(p->prompt); /* req_submit took it, or left it to us */
        free(p->prompt_ids);
        p->prompt = NULL;
        p->prompt_ids = NULL;
        ok = r != NULL; /* refused: sink_error answered */
    }
    req_chat_free(p->chat);
    p->chat = NULL;
    openai_free_prompts(&(http_req_info){.prompts = batch, .n_prompts = batch ? n : 0});
    if (!ok) {
        req_owner_cancel_all(&s->rl, &c->owner); /* those already in: their ends are dropped */
        return 0;
    }
    if (c->gen && c->gen->ri.stream)
        lws_callback_on_writable(wsi); /* the headers now: the client sees 200 at once */
    return 0;
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
        req_chat_free(p.chat);
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
    if (!c->owner.sink)
        open_session(s, c, wsi, &g->ri);
    return submit_all(s, c, wsi, &p);
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
