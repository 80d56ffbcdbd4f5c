/* http_gen.c: generation over plain HTTP, on the request layer (request.h) like /ws: Triton's
 * generate extension, POST /v2/models/{iterative-gpt2,simple-gpt2}/generate (one JSON answer) and
 * .../generate_stream (Server-Sent Events, one `data:` object per token, flushed as produced).
 *
 * One request at a time per connection, and each request is an owner of its own (a session in the
 * batchers' fairness and in the request log: lws gives every HTTP transaction fresh per-session
 * data), so a client that goes away cancels it (req_owner_gone: its KV blocks are free within one
 * step). After the answer the connection stays open for the next request (keep-alive): a JSON
 * answer has a Content-Length, a stream is sent chunked.
 *
 * The body: Content-Length required (411 without one; lws 4.1 does not decode chunked request
 * bodies), at most --max-message bytes (413), Content-Type application/json (or none, or curl -d's
 * application/x-www-form-urlencoded, as Triton's own curl examples send; else 415). Then
 * {"text_input": "...", "max_tokens": N, ...}: the sampling fields of /ws's generate, at the top
 * level or under "parameters" (not both), checked by protocol.c's proto_parse_params; "id" is
 * echoed. Errors are {"error": "..."} with the status of codes.h. Service thread. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "db.h"
#include "service.h"
#include "util.h"

#define GEN_ID_MAX 64
#define SSE_CHUNK 16384

struct http_gen {
    server *s;
    struct lws *wsi;
    int stream;
    ifl_policy policy;
    const char *model; /* the route's name: "iterative-gpt2" or "simple-gpt2" */
    char id[GEN_ID_MAX + 1];
    int has_id;
    /* the body */
    char *body;
    size_t body_len, body_cap;
    /* the answer */
    uint64_t t_arrival; /* monotonic us: the request's headers arrived */
    int submitted;      /* the request layer has it: sink calls will come */
    int headers_sent;   /* stream: the 200 and its headers are out */
    int ended;          /* stream: the last event is queued */
    strbuf text;        /* JSON answer: the completion so far */
    strbuf out;         /* stream: bytes to send */
    size_t out_sent;    /* of out */
};

static const struct {
    const char *name;
    ifl_policy policy;
} gen_models[] = {
    {"iterative-gpt2", IFL_POLICY_ITERATIVE},
    {"simple-gpt2", IFL_POLICY_STATIC},
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

/* An error answer: {"error": msg} (and the id when the request had one). */
static int gen_error_answer(srv_conn *c, struct lws *wsi, int status, const char *msg, int close)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"error\":");
    sb_json_str(&sb, msg, strlen(msg));
    if (c->gen && c->gen->has_id) {
        sb_puts(&sb, ",\"id\":");
        sb_json_str(&sb, c->gen->id, strlen(c->gen->id));
    }
    sb_puts(&sb, "}");
    gen_free(c);
    if (!sb_ok(&sb)) {
        sb_free(&sb);
        return -1;
    }
    c->http_close_after = close;
    size_t n = sb.len;
    return http_respond(c, wsi, status, "application/json", sb_steal(&sb), n, 0,
                        close ? "connection:" : NULL, close ? "close" : NULL);
}

/* ---- the stream ------------------------------------------------------------------------------ */

static int sse_headers(struct lws *wsi)
{
    uint8_t hbuf[LWS_PRE + 1024], *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf;
    static const char *const hdrs[][2] = {
        {"content-type:", "text/event-stream; charset=utf-8"},
        {"cache-control:", "no-cache"},
        {"x-content-type-options:", "nosniff"},
        {"transfer-encoding:", "chunked"},
    };
    if (lws_add_http_header_status(wsi, HTTP_STATUS_OK, &p, end))
        return -1;
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)hdrs[i][0],
                                        (const unsigned char *)hdrs[i][1], (int)strlen(hdrs[i][1]),
                                        &p, end))
            return -1;
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    return 0;
}

/* Queues one event: "data: " obj "\n\n" (obj: the JSON text of sb). */
static void sse_event(http_gen *g, const strbuf *obj)
{
    if (!sb_ok(obj)) {
        g->out.oom = 1;
        return;
    }
    sb_puts(&g->out, "data: ");
    sb_append(&g->out, sb_text(obj), obj->len);
    sb_puts(&g->out, "\n\n");
    if (g->wsi)
        lws_callback_on_writable(g->wsi);
}

/* The Triton answer's fixed part: {"model_name":...,"model_version":"1", (open). */
static void put_head(strbuf *sb, const http_gen *g)
{
    sb_puts(sb, "{\"model_name\":");
    sb_json_str(sb, g->model, strlen(g->model));
    sb_puts(sb, ",\"model_version\":\"1\"");
    if (g->has_id) {
        sb_puts(sb, ",\"id\":");
        sb_json_str(sb, g->id, strlen(g->id));
    }
}

/* HTTP_WRITEABLE of a stream: headers first, then what is queued as one chunk, then the last
 * chunk once the request ended; then the connection waits for its next request. */
static int stream_writeable(srv_conn *c, struct lws *wsi)
{
    http_gen *g = c->gen;
    if (!g->headers_sent) {
        if (sse_headers(wsi))
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
        int h = snprintf((char *)buf + LWS_PRE, 16, "%zx\r\n", n);
        memcpy(buf + LWS_PRE + h, sb_text(&g->out) + g->out_sent, n);
        memcpy(buf + LWS_PRE + h + n, "\r\n", 2);
        if (lws_write(wsi, buf + LWS_PRE, (size_t)h + n + 2, LWS_WRITE_HTTP) <
            (int)((size_t)h + n + 2))
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
    uint8_t fin[LWS_PRE + 8];
    memcpy(fin + LWS_PRE, "0\r\n\r\n", 5);
    if (lws_write(wsi, fin + LWS_PRE, 5, LWS_WRITE_HTTP_FINAL) < 5)
        return -1;
    gen_free(c);
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
    if (!g->stream) {
        sb_append(&g->text, text, len);
        return;
    }
    strbuf ev;
    sb_init(&ev, 0);
    put_head(&ev, g);
    sb_puts(&ev, ",\"text_output\":");
    sb_json_str(&ev, text, len);
    sb_puts(&ev, "}");
    sse_event(g, &ev);
    sb_free(&ev);
}

static void sink_done(void *fe, const srv_req *r, const req_result *res)
{
    (void)r;
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g || !g->wsi)
        return;
    if (res->finish == IFL_FINISH_ERROR && !g->stream) {
        gen_error_answer(c, g->wsi, ifl_code_get(res->code)->http_status,
                         res->message ? res->message : "the engine failed", 0);
        return;
    }
    strbuf sb;
    sb_init(&sb, 0);
    put_head(&sb, g);
    sb_puts(&sb, ",\"text_output\":");
    if (g->stream)
        sb_puts(&sb, "\"\"");
    else
        sb_json_str(&sb, g->text.buf ? sb_text(&g->text) : "", g->text.len);
    if (res->finish == IFL_FINISH_ERROR) {
        const char *m = res->message ? res->message : "the engine failed";
        sb_puts(&sb, ",\"error\":");
        sb_json_str(&sb, m, strlen(m));
    }
    sb_printf(&sb, ",\"finish_reason\":\"%s\",\"prompt_tokens\":%d,\"completion_tokens\":%d}",
              ifl_finish_name(res->finish), (int)res->prompt_tokens, (int)res->completion_tokens);
    if (g->stream) {
        g->ended = 1;
        sse_event(g, &sb);
        sb_free(&sb);
        return;
    }
    if (!sb_ok(&sb) || g->text.oom) {
        sb_free(&sb);
        gen_error_answer(c, g->wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "no memory for the answer",
                         0);
        return;
    }
    struct lws *wsi = g->wsi;
    gen_free(c);
    size_t n = sb.len;
    if (http_respond(c, wsi, HTTP_STATUS_OK, "application/json", sb_steal(&sb), n, 0, NULL, NULL))
        lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

/* A refusal (before any token): the answer is the error. */
static void sink_error(void *fe, const char *id, ifl_code code, const char *message)
{
    (void)id;
    srv_conn *c = fe;
    http_gen *g = c->gen;
    if (!g || !g->wsi)
        return;
    if (g->stream && g->headers_sent) {
        strbuf sb;
        sb_init(&sb, 0);
        put_head(&sb, g);
        sb_puts(&sb, ",\"error\":");
        sb_json_str(&sb, message, strlen(message));
        sb_puts(&sb, "}");
        g->ended = 1;
        sse_event(g, &sb);
        sb_free(&sb);
        return;
    }
    struct lws *wsi = g->wsi;
    if (gen_error_answer(c, wsi, ifl_code_get(code)->http_status, message, 0))
        lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

static const req_sink HTTP_SINK = {.queued = sink_queued,
                                   .started = sink_started,
                                   .token = sink_token,
                                   .done = sink_done,
                                   .error = sink_error};

/* ---- the request ----------------------------------------------------------------------------- */

/* Content-Type application/json, none, or application/x-www-form-urlencoded (curl -d). */
static int content_type_ok(struct lws *wsi, char *got, size_t cap)
{
    got[0] = 0;
    if (lws_hdr_copy(wsi, got, (int)cap, WSI_TOKEN_HTTP_CONTENT_TYPE) <= 0)
        return 1;
    size_t n = strcspn(got, "; \t");
    return (n == 16 && !strncasecmp(got, "application/json", 16)) ||
           (n == 33 && !strncasecmp(got, "application/x-www-form-urlencoded", 33));
}

int http_gen_begin(server *s, srv_conn *c, struct lws *wsi, const char *rest)
{
    size_t nlen = strcspn(rest, "/");
    const char *tail = rest + nlen;
    int stream = !strcmp(tail, "/generate_stream");
    size_t m = sizeof gen_models / sizeof gen_models[0];
    for (size_t i = 0; i < sizeof gen_models / sizeof gen_models[0]; i++)
        if (strlen(gen_models[i].name) == nlen && !strncmp(rest, gen_models[i].name, nlen))
            m = i;
    char msg[300];
    if (m == sizeof gen_models / sizeof gen_models[0]) {
        snprintf(msg, sizeof msg,
                 "unknown model '%.*s': this server has iterative-gpt2, simple-gpt2",
                 (int)(nlen > 128 ? 128 : nlen), rest);
        return gen_error_answer(c, wsi, HTTP_STATUS_NOT_FOUND, msg, 1);
    }
    if (s->stopping || !atomic_load(&s->ready))
        return gen_error_answer(
            c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE,
            s->stopping ? "the server is shutting down" : "not ready: loading the model", 1);
    char ct[128], cl[32];
    if (!content_type_ok(wsi, ct, sizeof ct)) {
        snprintf(msg, sizeof msg, "Content-Type is '%.64s': the body must be application/json", ct);
        return gen_error_answer(c, wsi, HTTP_STATUS_UNSUPPORTED_MEDIA_TYPE, msg, 1);
    }
    if (lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0)
        return gen_error_answer(c, wsi, HTTP_STATUS_LENGTH_REQUIRED,
                                "a Content-Length is required (chunked request bodies are not "
                                "accepted)",
                                1);
    char *end;
    unsigned long long len = strtoull(cl, &end, 10);
    if (*end || len > (unsigned long long)s->o->max_message) {
        snprintf(msg, sizeof msg, "the body is %s bytes: at most %d (--max-message)", cl,
                 (int)s->o->max_message);
        return gen_error_answer(c, wsi, HTTP_STATUS_REQ_ENTITY_TOO_LARGE, msg, 1);
    }
    gen_free(c);
    http_gen *g = calloc(1, sizeof *g);
    if (!g)
        return -1;
    g->s = s;
    g->wsi = wsi;
    g->t_arrival = ifl_now_us();
    g->stream = stream;
    g->policy = gen_models[m].policy;
    g->model = gen_models[m].name;
    g->body_cap = (size_t)len;
    g->body = malloc(g->body_cap + 1);
    sb_init(&g->text, 0);
    sb_init(&g->out, 0);
    c->gen = g;
    if (!g->body)
        return gen_error_answer(c, wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "no memory for the body",
                                1);
    if (!len) /* lws sends no BODY_COMPLETION for an empty body */
        return http_gen_body_done(s, c, wsi);
    return 0;
}

int http_gen_body(server *s, srv_conn *c, struct lws *wsi, const void *in, size_t len)
{
    (void)s;
    http_gen *g = c->gen;
    if (!g)
        return 0;
    if (g->body_len + len > g->body_cap)
        return gen_error_answer(c, wsi, HTTP_STATUS_BAD_REQUEST,
                                "the body is longer than its Content-Length", 1);
    memcpy(g->body + g->body_len, in, len);
    g->body_len += len;
    return 0;
}

static const char *const TOP_FIELDS[] = {"text_input",  "parameters", "id",    "max_tokens",
                                         "temperature", "top_k",      "top_p", "seed",
                                         "stop",        "ignore_eos", NULL};

static int in_list(const char *const *list, const char *name)
{
    for (; *list; list++)
        if (!strcmp(*list, name))
            return 1;
    return 0;
}

/* The request as /ws's generate would have it: a copy of the body's object with the fields of
 * "parameters" moved to the top level (a field in both is an error), unknown fields refused, and
 * the id (a string of 1..64 bytes) taken out. NULL with *err. */
static cJSON *flatten(const cJSON *root, http_gen *g, proto_error *err)
{
    const cJSON *f;
    cJSON_ArrayForEach(f, root)
    {
        if (!in_list(TOP_FIELDS, f->string ? f->string : "")) {
            proto_error_set(err, IFL_CODE_UNKNOWN_FIELD,
                            "the request has no field '%.64s' (text_input, parameters, id, "
                            "max_tokens, temperature, top_k, top_p, seed, stop, ignore_eos)",
                            f->string ? f->string : "");
            return NULL;
        }
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (id) {
        size_t n = cJSON_IsString(id) && id->valuestring ? strlen(id->valuestring) : 0;
        if (!n || n > GEN_ID_MAX) {
            proto_error_set(err, IFL_CODE_WRONG_TYPE,
                            "field 'id' must be a string of 1 to %d bytes", GEN_ID_MAX);
            return NULL;
        }
        memcpy(g->id, id->valuestring, n + 1);
        g->has_id = 1;
    }
    cJSON *flat = cJSON_Duplicate(root, 1);
    if (!flat) {
        proto_error_set(err, IFL_CODE_OUT_OF_MEMORY, "no memory for the request");
        return NULL;
    }
    cJSON_DeleteItemFromObjectCaseSensitive(flat, "id");
    cJSON *params = cJSON_DetachItemFromObjectCaseSensitive(flat, "parameters");
    if (!params)
        return flat;
    if (!cJSON_IsObject(params)) {
        proto_error_set(err, IFL_CODE_WRONG_TYPE, "field 'parameters' must be an object, not %s",
                        proto_json_type_name(params));
        goto fail;
    }
    cJSON *p;
    while ((p = params->child)) {
        const char *name = p->string ? p->string : "";
        if (!in_list(TOP_FIELDS + 3, name)) {
            proto_error_set(err, IFL_CODE_UNKNOWN_FIELD,
                            "'parameters' has no field '%.64s' (max_tokens, temperature, top_k, "
                            "top_p, seed, stop, ignore_eos)",
                            name);
            goto fail;
        }
        if (cJSON_GetObjectItemCaseSensitive(flat, name)) {
            proto_error_set(err, IFL_CODE_INVALID_REQUEST,
                            "field '%s' is given both at the top level and under 'parameters'",
                            name);
            goto fail;
        }
        cJSON_AddItemToObject(flat, name, cJSON_DetachItemViaPointer(params, p));
    }
    cJSON_Delete(params);
    return flat;
fail:
    cJSON_Delete(params);
    cJSON_Delete(flat);
    return NULL;
}

/* The connection's first generation request: it becomes an owner (a session of its own in the
 * batchers and in the request log, whose requests rows need it). */
static void open_session(server *s, srv_conn *c, struct lws *wsi)
{
    req_owner_init(&c->owner, &HTTP_SINK, c, req_random_u64(&s->rl), 1);
    if (!s->log.db)
        return;
    lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
    if (lws_hdr_copy(wsi, c->user_agent, sizeof c->user_agent, WSI_TOKEN_HTTP_USER_AGENT) < 0)
        c->user_agent[0] = 0;
    ifl_dblog_session rec = {.session = c->owner.session_hex,
                             .remote_addr = c->peer,
                             .user_agent = c->user_agent[0] ? c->user_agent : NULL,
                             .at_ms = ifl_db_now_ms()};
    ifl_dblog_session_open(s->log.db, &rec);
}

int http_gen_body_done(server *s, srv_conn *c, struct lws *wsi)
{
    http_gen *g = c->gen;
    if (!g)
        return 0;
    proto_error pe;
    memset(&pe, 0, sizeof pe);
    req_params p;
    memset(&p, 0, sizeof p);
    cJSON *root = NULL, *flat = NULL;
    if (!ifl_utf8_valid(g->body, g->body_len)) {
        proto_error_set(&pe, IFL_CODE_INVALID_MESSAGE, "the body is not valid UTF-8");
        goto refuse;
    }
    if (!(root = proto_parse_json_object(g->body, g->body_len, &pe)) ||
        !(flat = flatten(root, g, &pe)) || proto_parse_params(flat, "text_input", &s->lim, &p, &pe))
        goto refuse;
    cJSON_Delete(flat);
    cJSON_Delete(root);
    free(g->body);
    g->body = NULL;
    p.policy = g->policy;
    snprintf(p.id, sizeof p.id, "http");
    if (!c->owner.sink)
        open_session(s, c, wsi);
    g->submitted = 1;
    lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0); /* the answer may take longer than lws's 30 s */
    srv_req *r = req_submit(&s->rl, &c->owner, &p, g->t_arrival);
    free(p.prompt); /* req_submit took it, or left it to us */
    if (!r)
        return 0; /* refused: sink_error answered */
    if (g->stream)
        lws_callback_on_writable(wsi); /* the headers now: the client sees 200 at once */
    return 0;
refuse:
    free(p.prompt);
    cJSON_Delete(flat);
    cJSON_Delete(root);
    metrics_count_error(&s->m, pe.code);
    return gen_error_answer(c, wsi, ifl_code_get(pe.code)->http_status, pe.message, 0);
}

int http_gen_writeable(srv_conn *c, struct lws *wsi)
{
    return stream_writeable(c, wsi);
}

int http_gen_streaming(const srv_conn *c)
{
    return c->gen && c->gen->stream && c->gen->submitted;
}

void http_gen_closed(server *s, srv_conn *c)
{
    if (c->gen)
        c->gen->wsi = NULL;
    if (c->owner.sink) {
        if (s->log.db)
            ifl_dblog_session_close(s->log.db, c->owner.session_hex, ifl_db_now_ms(),
                                    c->owner.n_reqs ? "HTTP connection closed"
                                                    : "HTTP request answered");
        req_owner_gone(&s->rl, &c->owner);
        c->owner.sink = NULL; /* once: the close and the end of the transaction both come here */
    }
    gen_free(c);
}
