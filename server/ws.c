/* ws.c: the /ws front end (service.h): a connection is a session of the request layer. Incoming:
 * fragments reassembled up to --max-message (else close 1009), UTF-8 checked (else 1007), parsed
 * (protocol.h) and dispatched; outgoing: every frame is written by protocol.c's writers into the
 * connection's outbox, one lws_write per SERVER_WRITEABLE. A reader that falls --max-outbox bytes
 * behind has its requests cancelled and is closed with 1008; step frames for subscribers are
 * dropped (and counted) already at half that, since they are a view, not data. A frame that
 * cannot be queued for want of memory closes the connection with 1011 (the stream would have a
 * gap otherwise). Service thread only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "db.h"
#include "service.h"
#include "util.h"

#define SOCKET_SNDBUF 65536

/* ---- the outbox ----------------------------------------------------------------------------- */

static void free_outbox(srv_conn *c)
{
    for (srv_frame *f = c->out_head, *n; f; f = n) {
        n = f->next;
        free(f->buf);
        free(f);
    }
    c->out_head = c->out_tail = NULL;
    c->out_bytes = 0;
}

/* Marks a connection to be closed with `code` at its next writeable (outbox dropped, requests
 * cancelled). */
static void close_now(server *s, srv_conn *c, int code, const char *reason)
{
    if (c->close_now)
        return;
    req_owner_cancel_all(&s->rl, &c->owner);
    free_outbox(c);
    c->close_now = 1;
    c->close_code = code;
    snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
    snprintf(c->close_why, sizeof c->close_why, "server %d: %s", code, reason);
    if (c->wsi) {
        lws_callback_on_writable(c->wsi);
        /* a peer that reads nothing never lets the close frame out: drop it after 2 s */
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 2);
    }
}

/* Queues the text of sb (built with LWS_PRE in front) as one frame. Takes the buffer. */
static void send_frame(server *s, srv_conn *c, strbuf *sb)
{
    if (c->close_now) {
        sb_free(sb);
        return;
    }
    size_t len = sb->len;
    if (c->out_bytes + len > (size_t)s->o->max_outbox) {
        char why[120];
        snprintf(why, sizeof why, "too slow: %zu bytes waiting to be sent, limit %d",
                 c->out_bytes + len, s->o->max_outbox);
        sb_free(sb);
        s->m.closed_slow++;
        if (!s->o->quiet)
            fprintf(stderr, "inflight: closing session %s (%s): %s\n", c->owner.session_hex,
                    c->peer, why);
        close_now(s, c, LWS_CLOSE_STATUS_POLICY_VIOLATION, why);
        return;
    }
    srv_frame *f = sb_ok(sb) ? malloc(sizeof *f) : NULL;
    if (!f) {
        sb_free(sb);
        close_now(s, c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION,
                  "out of memory: a frame could not be queued");
        return;
    }
    f->next = NULL;
    f->len = len;
    f->buf = sb_steal(sb);
    int was_empty = !c->out_head;
    if (c->out_tail)
        c->out_tail->next = f;
    else
        c->out_head = f;
    c->out_tail = f;
    c->out_bytes += len;
    if (was_empty && c->wsi)
        lws_callback_on_writable(c->wsi);
}

/* ---- the request layer's sink: its results as frames ---------------------------------------- */

static void sink_queued(void *fe, const srv_req *r, int32_t position)
{
    srv_conn *c = fe;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    proto_write_queued(&sb, r->id, r->policy, r->rid, position);
    send_frame(c->srv, c, &sb);
}

static void sink_started(void *fe, const srv_req *r)
{
    srv_conn *c = fe;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    proto_write_started(&sb, r->id, r->policy, r->rid, r->prompt_tokens, r->cached_tokens,
                        r->trimmed_messages, r->trimmed_tokens, r->seed);
    send_frame(c->srv, c, &sb);
}

static void sink_token(void *fe, const srv_req *r, const req_token *t)
{
    srv_conn *c = fe;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    proto_write_token(&sb, r->id, t, r->n_choices);
    send_frame(c->srv, c, &sb);
}

/* A choice's end (n > 1) and the request's: the same frame, with "choice" for the first. */
static void sink_done(void *fe, const srv_req *r, const req_result *res)
{
    srv_conn *c = fe;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    proto_write_done(&sb, r->id, res);
    send_frame(c->srv, c, &sb);
}

static void sink_error(void *fe, const char *id, ifl_code code, const char *message,
                       int32_t retry_after_ms)
{
    srv_conn *c = fe;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    proto_write_error(&sb, id, code, message, retry_after_ms);
    send_frame(c->srv, c, &sb);
}

static const req_sink WS_SINK = {.queued = sink_queued,
                                 .started = sink_started,
                                 .token = sink_token,
                                 .choice_done = sink_done,
                                 .done = sink_done,
                                 .error = sink_error};

/* A message-level error (not a request's): counted and sent. */
static void send_error(server *s, srv_conn *c, const char *id, ifl_code code, const char *message)
{
    metrics_count_error(&s->m, code);
    sink_error(c, id, code, message, 0);
}

/* On or off the subscribers' list (the step frames go to it alone: a step does not visit every
 * connection, idle ones included). */
static void set_subscribed(server *s, srv_conn *c, int on)
{
    if (on == c->subscribed)
        return;
    c->subscribed = on;
    if (on) {
        c->sub_prev = NULL;
        c->sub_next = s->subscribers;
        if (s->subscribers)
            s->subscribers->sub_prev = c;
        s->subscribers = c;
        return;
    }
    if (c->sub_prev)
        c->sub_prev->sub_next = c->sub_next;
    else
        s->subscribers = c->sub_next;
    if (c->sub_next)
        c->sub_next->sub_prev = c->sub_prev;
    c->sub_next = c->sub_prev = NULL;
}

/* ---- client messages ------------------------------------------------------------------------ */

static void handle_message(server *s, srv_conn *c, const char *text, size_t len)
{
    uint64_t t_arrival = ifl_now_us();
    proto_msg m;
    proto_error pe;
    if (proto_parse(text, len, &s->lim, &m, &pe)) {
        send_error(s, c, pe.has_id ? pe.id : NULL, pe.code, pe.message);
        proto_msg_free(&m);
        return;
    }
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    switch (m.kind) {
    case PROTO_GENERATE: req_submit(&s->rl, &c->owner, &m.gen, t_arrival); break;
    case PROTO_CANCEL: req_cancel(&s->rl, &c->owner, m.id); break;
    case PROTO_SUBSCRIBE:
    case PROTO_UNSUBSCRIBE:
        set_subscribed(s, c, m.kind == PROTO_SUBSCRIBE);
        proto_write_subscription(&sb, c->subscribed);
        send_frame(s, c, &sb);
        break;
    case PROTO_PING: {
        /* the events the engine queued before this ping go out before its pong, so a pong orders
         * after everything generated before the server read the ping (a client's fence: tokens
         * after the pong of a ping sent right behind a cancel were generated after the cancel) */
        srv_drain_bridge(s);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        proto_write_pong(&sb, m.has_id ? m.id : NULL,
                         (int64_t)ts.tv_sec * 1000 + (int64_t)(ts.tv_nsec / 1000000));
        send_frame(s, c, &sb);
        break;
    }
    }
    sb_free(&sb);
    proto_msg_free(&m);
}

/* Closes with `code` from inside the RECEIVE callback (the caller returns -1). */
static int close_from_receive(server *s, srv_conn *c, struct lws *wsi, int code, const char *why)
{
    req_owner_cancel_all(&s->rl, &c->owner);
    snprintf(c->close_why, sizeof c->close_why, "server %d: %s", code, why);
    lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)why, strlen(why));
    return -1;
}

/* The receive buffer's first size, kept between messages; larger ones are freed after use. */
#define RX_KEEP_BYTES 4096

/* Appends a fragment; 1 when a whole message is in c->rx, 0 for more to come, -1 to close. */
static int reassemble(server *s, srv_conn *c, struct lws *wsi, const char *in, size_t len)
{
    if (lws_is_first_fragment(wsi)) {
        c->rx_len = 0;
        c->rx_binary = lws_frame_is_binary(wsi);
    }
    if (c->rx_len + len > (size_t)s->o->max_message) {
        char why[120];
        snprintf(why, sizeof why, "message too big: over %d bytes", s->o->max_message);
        s->m.closed_too_big++;
        return close_from_receive(s, c, wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, why);
    }
    if (c->rx_len + len + 1 > c->rx_cap) {
        size_t cap = c->rx_cap ? c->rx_cap : RX_KEEP_BYTES;
        while (cap < c->rx_len + len + 1)
            cap *= 2;
        char *p = realloc(c->rx, cap);
        if (!p)
            return -1;
        s->m.rx_buffer_bytes += cap - c->rx_cap;
        c->rx = p;
        c->rx_cap = cap;
    }
    memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;
    c->rx[c->rx_len] = 0;
    return lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi);
}

/* After a whole message: a receive buffer grown past the first size is given back, so that one
 * large message does not cost its connection that much memory for the rest of its life. */
static void rx_shrink(server *s, srv_conn *c)
{
    if (c->rx_cap <= RX_KEEP_BYTES)
        return;
    s->m.rx_buffer_bytes -= c->rx_cap;
    free(c->rx);
    c->rx = NULL;
    c->rx_cap = 0;
}

static int on_receive(server *s, srv_conn *c, struct lws *wsi, const char *in, size_t len)
{
    if (c->close_now)
        return 0; /* closing: ignore what is still arriving */
    int whole = reassemble(s, c, wsi, in, len);
    if (whole <= 0)
        return whole;
    size_t n = c->rx_len;
    c->rx_len = 0;
    if (c->rx_binary) {
        char msg[120];
        snprintf(msg, sizeof msg,
                 "binary frames are not understood (got %zu bytes): send JSON text frames", n);
        send_error(s, c, NULL, IFL_CODE_BINARY_FRAME, msg);
        rx_shrink(s, c);
        return 0;
    }
    if (!ifl_utf8_valid(c->rx, n)) {
        s->m.closed_bad_utf8++;
        return close_from_receive(s, c, wsi, LWS_CLOSE_STATUS_INVALID_PAYLOAD,
                                  "text frame is not valid UTF-8");
    }
    handle_message(s, c, c->rx, n);
    rx_shrink(s, c);
    return 0;
}

/* ---- connections ---------------------------------------------------------------------------- */

static void send_hello(server *s, srv_conn *c)
{
    const ifl_config *cfg = &s->rt.model.cfg;
    proto_hello h = {.session = c->owner.session_hex,
                     .server = "inflight " INFLIGHT_VERSION,
                     .model_name = http_gen_served_name(s), /* not the path */
                     .weights = ifl_model_dtype_name(&s->rt.model),
                     .device = s->rt.desc,
                     .isa = ifl_isa_name(s->rt.isa),
                     .n_layer = cfg->n_layer,
                     .n_head = cfg->n_head,
                     .n_embd = cfg->n_embd,
                     .n_ctx = cfg->n_ctx,
                     .n_vocab = cfg->n_vocab,
                     .max_tokens = s->lim.max_tokens,
                     .max_message = s->o->max_message,
                     .max_inflight = s->o->max_inflight,
                     .max_batch = s->o->max_batch,
                     .max_queue = s->o->max_queue,
                     .max_outbox = s->o->max_outbox,
                     .def_max_tokens = s->lim.def_max_tokens,
                     .def_top_k = s->lim.def_top_k,
                     .def_temperature = s->lim.def_temperature,
                     .def_top_p = s->lim.def_top_p,
                     .def_truncate = s->lim.def_truncate,
                     .user_key = c->user_hash[0] != 0,
                     .history = s->history ? s->o->history : "off"};
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    proto_write_hello(&sb, &h);
    send_frame(s, c, &sb);
}

/* The upgrade request: only at /ws; keeps what it says for ESTABLISHED. Non-zero refuses it. */
static int on_filter(srv_conn *c, struct lws *wsi)
{
    char uri[64];
    int n = lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI);
    if (n < 0 || strcmp(uri, "/ws") || (size_t)n != strlen(uri)) { /* upgrades only at /ws */
        lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND,
                               "no WebSocket endpoint at this path: connect to /ws");
        return 1;
    }
    if (!c)
        return 1;
    free(c->http_body);
    memset(c, 0, sizeof *c);
    char key[128];
    const char *v = lws_get_urlarg_by_name(wsi, "user=", key, sizeof key);
    if (v && srv_user_key_hash(v, c->user_hash))
        snprintf(c->user_hash, sizeof c->user_hash, "!"); /* refused at ESTABLISHED */
    if (lws_hdr_copy(wsi, c->user_agent, sizeof c->user_agent, WSI_TOKEN_HTTP_USER_AGENT) < 0)
        c->user_agent[0] = 0;
    const server *s = lws_context_user(lws_get_context(wsi));
    c->api_key_missing = !srv_api_key_ok(s, wsi, 1);
    if (!srv_refusal(s, wsi, 1, c->refused, sizeof c->refused))
        c->refused[0] = 0;
    return 0;
}

static int on_established(server *s, srv_conn *c, struct lws *wsi)
{
    c->srv = s;
    c->wsi = wsi;
    c->is_ws = 1;
    req_owner_init(&c->owner, &WS_SINK, c, req_random_u64(&s->rl), s->o->max_inflight);
    reqlog_peer_key(lws_get_socket_fd(wsi), c->owner.peer); /* its refusals: its address's budget */
    lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
    c->next = s->conns;
    c->prev = NULL;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    s->m.connections_total++;
    s->m.connections_open = (uint64_t)s->n_conns;
    int bad_key = !strcmp(c->user_hash, "!");
    char why[120];
    const char *refuse = NULL;
    int code = LWS_CLOSE_STATUS_POLICY_VIOLATION;
    if (c->refused[0]) { /* closed before any message of the page is read */
        metrics_count_error(&s->m, IFL_CODE_FORBIDDEN);
        refuse = c->refused;
    } else if (c->api_key_missing) {
        metrics_count_error(&s->m, IFL_CODE_UNAUTHORIZED);
        refuse = "this server needs an API key: Authorization: Bearer KEY or /ws?api_key=KEY";
    } else if (bad_key) {
        refuse = "the user key must be 16 to 64 characters of A-Z a-z 0-9 _ -";
    } else if (s->rl.stopping) {
        code = LWS_CLOSE_STATUS_GOINGAWAY;
        refuse = "server shutting down";
    } else if (!atomic_load(&s->ready)) {
        code = CLOSE_TRY_AGAIN_LATER;
        refuse = "not ready: the model is loading";
    } else if (s->n_conns > s->o->max_connections || sockets_over_limit(s)) {
        if (s->n_conns <= s->o->max_connections)
            s->m.sockets_over_limit++;
        snprintf(why, sizeof why, "too many connections (limit %d): try again later",
                 s->o->max_connections);
        s->m.closed_limit++;
        code = CLOSE_TRY_AGAIN_LATER;
        refuse = why;
    }
    if (refuse) { /* counted, not logged: refusals cost the sender nothing, the log a row each */
        s->m.connections_refused++;
        close_now(s, c, code, refuse);
        /* closed from this callback, the close frame with it (lws sends it when ESTABLISHED
         * fails); a close left to a writeable asked for here reached the peer as 1006 on the
         * libuv loop (on_writeable says why) */
        lws_close_reason(wsi, (enum lws_close_status)code, (unsigned char *)c->close_reason,
                         strlen(c->close_reason));
        return -1;
    }
    if (s->log.db) {
        ifl_dblog_session rec = {.session = c->owner.session_hex,
                                 .user_key_sha256 = c->user_hash[0] ? c->user_hash : NULL,
                                 .remote_addr = c->peer,
                                 .user_agent = c->user_agent[0] ? c->user_agent : NULL,
                                 .at_ms = ifl_db_now_ms()};
        ifl_dblog_session_open(s->log.db, &rec);
        c->session_logged = 1;
    }
    send_hello(s, c);
    return 0;
}

/* One frame out per SERVER_WRITEABLE; -1 closes. */
static int on_writeable(server *s, srv_conn *c, struct lws *wsi)
{
    srv_frame *f = c->out_head;
    if (c->close_now || (!f && c->closing)) {
        /* Closed through lws's timeout, not by returning -1: Debian's lws is built with _DEBUG,
         * which on the libuv loop closes a wsi whose callback returned -1 twice over, and the
         * second close kills the socket before the close frame is out (the peer saw 1006). A
         * keep-alive timeout is the one a close from a timeout does politely. */
        lws_close_reason(wsi, (enum lws_close_status)c->close_code,
                         (unsigned char *)c->close_reason, strlen(c->close_reason));
        lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_KEEPALIVE_IDLE, LWS_TO_KILL_ASYNC);
        return 0;
    }
    if (!f)
        return 0;
    c->out_head = f->next;
    if (!c->out_head)
        c->out_tail = NULL;
    c->out_bytes -= f->len;
    int n = lws_write(wsi, (unsigned char *)f->buf + LWS_PRE, f->len, LWS_WRITE_TEXT);
    int ok = n >= (int)f->len;
    s->m.frames_sent++;
    s->m.bytes_sent += f->len;
    free(f->buf);
    free(f);
    if (!ok)
        return -1;
    if (c->out_head || c->closing)
        lws_callback_on_writable(wsi);
    return 0;
}

/* A close code a peer may send (RFC 6455 7.4, and the IANA registry: 1012-1014 came later):
 * 1005, 1006 and 1015 are only reported locally, never sent. */
static int close_code_valid(int code)
{
    return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
           (code >= 3000 && code <= 4999);
}

/* The peer's close frame: 0 to answer it (the echo), -1 to fail the connection (RFC 6455 7.1.7:
 * no echo) when it is malformed: one byte, a code that may not be sent, or a reason that is not
 * UTF-8. What it said is kept for the log. */
static int on_peer_close(server *s, srv_conn *c, struct lws *wsi, const unsigned char *p,
                         size_t len)
{
    int code = len >= 2 ? (p[0] << 8) | p[1] : 1005;
    int bad = len == 1 || (len >= 2 && !close_code_valid(code)) ||
              (len > 2 && !ifl_utf8_valid((const char *)p + 2, len - 2));
    if (bad) {
        s->m.closed_bad_close++;
        lws_close_reason(wsi, LWS_CLOSE_STATUS_PROTOCOL_ERR, (unsigned char *)"invalid close frame",
                         19);
    }
    if (!c || c->close_why[0])
        return bad ? -1 : 0;
    if (bad) {
        snprintf(c->close_why, sizeof c->close_why, "client sent an invalid close frame (%s)",
                 len == 1                  ? "one byte"
                 : !close_code_valid(code) ? "code"
                                           : "reason not UTF-8");
        return -1;
    }
    int rl = len > 2 ? (int)(len - 2) : 0;
    if (rl > 80)
        rl = 80;
    if (rl && !ifl_utf8_valid((const char *)p + 2, (size_t)rl))
        rl = 0; /* cut inside a character */
    snprintf(c->close_why, sizeof c->close_why, "client %d%s%.*s", code, rl ? ": " : "", rl,
             rl ? (const char *)p + 2 : "");
    return 0;
}

static void on_closed(server *s, srv_conn *c, struct lws *wsi)
{
    http_gen_conn_closed(s, wsi); /* HTTP requests before the upgrade: their session ends */
    free(c->http_body);
    c->http_body = NULL;
    if (!c->is_ws)
        return;
    if (s->log.db && c->session_logged)
        ifl_dblog_session_close(s->log.db, c->owner.session_hex, ifl_db_now_ms(),
                                c->close_why[0] ? c->close_why : "connection lost");
    req_owner_gone(&s->rl, &c->owner);
    free_outbox(c);
    s->m.rx_buffer_bytes -= c->rx_cap;
    free(c->rx);
    c->rx = NULL;
    c->rx_cap = 0;
    set_subscribed(s, c, 0);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->next = c->prev = NULL;
    s->n_conns--;
    s->m.connections_open = (uint64_t)s->n_conns;
    c->is_ws = 0;
    c->wsi = NULL;
}

int ws_callback(server *s, struct lws *wsi, enum lws_callback_reasons reason, srv_conn *c, void *in,
                size_t len)
{
    switch (reason) {
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: {
        if (sockets_admit(s))
            return 1; /* past the limit and its band: closed at once */
        /* A small kernel send buffer (Linux doubles it): a reader that stops is noticed after
         * this plus --max-outbox bytes, not after the megabytes autotuning would allow. */
        int fd = (int)(intptr_t)in, sz = SOCKET_SNDBUF;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz))
            fprintf(stderr, "inflight: setsockopt(SO_SNDBUF): %s\n", strerror(errno));
        return 0;
    }
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        sockets_requested(s, wsi);
        return on_filter(c, wsi);
    case LWS_CALLBACK_ESTABLISHED: return on_established(s, c, wsi);
    case LWS_CALLBACK_RECEIVE: return on_receive(s, c, wsi, in, len);
    case LWS_CALLBACK_SERVER_WRITEABLE: return on_writeable(s, c, wsi);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: return on_peer_close(s, c, wsi, in, len);
    case LWS_CALLBACK_CLOSED: on_closed(s, c, wsi); return 0;
    default: return 0;
    }
}

/* ---- the server's own frames ---------------------------------------------------------------- */

void ws_broadcast_step(server *s, const ifl_step_record *st)
{
    strbuf shared;
    sb_init(&shared, 0);
    for (srv_conn *c = s->subscribers; c; c = c->sub_next) {
        if (c->close_now)
            continue;
        if (c->out_bytes > (size_t)s->o->max_outbox / 2) {
            c->steps_dropped++;
            s->m.step_frames_dropped++;
            continue;
        }
        if (!shared.len)
            proto_write_step(&shared, st,
                             st->t_start > s->t0_us ? (double)(st->t_start - s->t0_us) / 1e3 : 0);
        strbuf one;
        sb_init(&one, LWS_PRE);
        sb_append(&one, sb_text(&shared), shared.len);
        proto_write_step_end(&one, c->steps_dropped);
        c->steps_dropped = 0;
        send_frame(s, c, &one);
    }
    sb_free(&shared);
}

void ws_close_all(server *s)
{
    for (srv_conn *c = s->conns; c; c = c->next) {
        c->closing = 1;
        c->close_code = LWS_CLOSE_STATUS_GOINGAWAY;
        snprintf(c->close_reason, sizeof c->close_reason, "server shutting down");
        snprintf(c->close_why, sizeof c->close_why, "server 1001: server shutting down");
        lws_callback_on_writable(c->wsi);
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 3);
    }
}
