/* client_http.c: `inflight client`'s HTTP transport, for the HTTP APIs (docs/http-api.md) as
 * their own clients call them: each request is one POST of the API row's body to its path, on its
 * own connection (Content-Length body, Authorization: Bearer with --api-key); the answer is
 * Server-Sent Events, split here line by line into events that the row's parser reads: an event
 * per token, then the one carrying the finish reason. A status other than 200 is a refusal, its
 * JSON error body printed. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "util.h"

int client_http_start(client *cl)
{
    client_start(cl); /* a connection per request, opened as it is sent */
    return 0;
}

static creq *req_of(client *cl, struct lws *wsi)
{
    intptr_t i = (intptr_t)lws_get_opaque_user_data(wsi) - 1; /* 0: not a request's */
    return i >= 0 && i < cl->n_reqs ? &cl->reqs[i] : NULL;
}

/* The API's path under --url's prefix, its "{model}" replaced by the model's name. */
static void request_path(const client *cl, char *path, size_t cap)
{
    const char *p = cl->api->path, *m = strstr(p, "{model}");
    if (m)
        snprintf(path, cap, "%s%.*s%s%s", cl->path, (int)(m - p), p, client_model(cl),
                 m + strlen("{model}"));
    else
        snprintf(path, cap, "%s%s", cl->path, p);
}

void client_http_send(client *cl, creq *r, const char *prompt, uint64_t seed)
{
    strbuf *b = &r->body;
    sb_init(b, LWS_PRE);
    cl->api->write_body(b, cl, r, prompt, seed);
    char path[1024];
    request_path(cl, path, sizeof path);
    sb_init(&r->in, 0);
    r->t_send = ifl_now_us();
    if (!sb_ok(b)) {
        client_on_refused(cl, r, "out_of_memory", "no memory for the request", r->t_send);
        return;
    }
    /* no pwsi: the demo's requests may move (realloc) while a connection lives */
    r->wsi = client_connect(cl, path, "POST", (intptr_t)(r - cl->reqs + 1), NULL);
}

static int add_header(struct lws *wsi, enum lws_token_indexes tok, const char *v, void *in,
                      size_t len)
{
    unsigned char **p = in, *end = *p + len;
    return lws_add_http_header_by_token(wsi, tok, (const unsigned char *)v, (int)strlen(v), p, end);
}

static int append_headers(client *cl, creq *r, struct lws *wsi, void *in, size_t len)
{
    char n[24], auth[600];
    snprintf(n, sizeof n, "%zu", r->body.len);
    if (add_header(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE, "application/json", in, len) ||
        add_header(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, n, in, len) ||
        add_header(wsi, WSI_TOKEN_HTTP_ACCEPT, "text/event-stream", in, len))
        return -1;
    if (cl->api_key) {
        snprintf(auth, sizeof auth, "Bearer %s", cl->api_key);
        if (add_header(wsi, WSI_TOKEN_HTTP_AUTHORIZATION, auth, in, len))
            return -1;
    }
    lws_client_http_body_pending(wsi, 1);
    lws_callback_on_writable(wsi);
    return 0;
}

/* One event's data: a token, the end, or an error, as the API's parser reads it. */
static void on_event(client *cl, creq *r, const char *data, size_t len, uint64_t now)
{
    if (r->done || (len == 6 && !memcmp(data, "[DONE]", 6)))
        return;
    cJSON *m = cJSON_ParseWithLength(data, len);
    if (!m) {
        client_on_refused(cl, r, "bad_event", "an event's data is not JSON", now);
        return;
    }
    client_event ev = {.kind = CLIENT_EV_NONE};
    cl->api->parse(m, &ev);
    client_on_event(cl, r, &ev, now);
    cJSON_Delete(m);
}

/* Feeds the stream's new bytes: complete lines are parsed, a blank one ends an event. Our server
 * sends one "data:" line per event; several are joined with newlines, as the SSE spec says. */
static void on_stream(client *cl, creq *r, const char *in, size_t len, uint64_t now)
{
    sb_append(&r->in, in, len);
    if (!sb_ok(&r->in)) {
        client_on_refused(cl, r, "out_of_memory", "no memory for the stream", now);
        return;
    }
    char *s = sb_text(&r->in);
    size_t at = 0, event_start = 0, n = r->in.len;
    strbuf data;
    sb_init(&data, 0);
    for (;;) {
        char *nl = memchr(s + at, '\n', n - at);
        if (!nl)
            break;
        size_t end = (size_t)(nl - s), line = at;
        at = end + 1;
        if (end > line && s[end - 1] == '\r')
            end--;
        if (end == line) { /* blank: the event is whole */
            if (data.len)
                on_event(cl, r, sb_text(&data), data.len, now);
            sb_reset(&data);
            event_start = at;
        } else if (end - line >= 5 && !memcmp(s + line, "data:", 5)) {
            size_t v = line + 5 + (end - line > 5 && s[line + 5] == ' ');
            if (data.len)
                sb_append(&data, "\n", 1);
            sb_append(&data, s + v, end - v);
        }
    }
    sb_free(&data);
    /* an unfinished event stays, to be parsed again when its blank line comes */
    memmove(s, s + event_start, n - event_start);
    r->in.len = n - event_start;
}

/* The answer is complete: a refusal's body, or a stream that ended without its last event. */
static void on_complete(client *cl, creq *r, uint64_t now)
{
    if (r->done)
        return;
    if (r->status == 200) {
        client_on_refused(cl, r, "incomplete", "the stream ended before its finish reason", now);
        return;
    }
    cJSON *m = r->in.len ? cJSON_ParseWithLength(sb_text(&r->in), r->in.len) : NULL;
    const char *code, *msg = m ? client_error_of(m, &code) : NULL;
    char what[512];
    snprintf(what, sizeof what, "HTTP %d: %s", r->status, msg ? msg : "(no JSON error body)");
    client_on_refused(cl, r, msg ? code : "http", what, now);
    cJSON_Delete(m);
}

int client_http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    (void)user;
    client *cl = lws_context_user(lws_get_context(wsi));
    creq *r = req_of(cl, wsi);
    if (!r)
        return 0;
    uint64_t now = ifl_now_us();
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        r->wsi = NULL;
        client_fail(cl, "cannot connect: %s", in ? (const char *)in : "connection refused");
        break;
    case LWS_CALLBACK_ESTABLISHED_CLIENT_HTTP:
        r->status = (int)lws_http_client_http_response(wsi);
        break;
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: return append_headers(cl, r, wsi, in, len);
    case LWS_CALLBACK_CLIENT_HTTP_WRITEABLE: {
        if (!r->body.len)
            break;
        size_t n = r->body.len;
        lws_client_http_body_pending(wsi, 0);
        int w = lws_write(wsi, (unsigned char *)sb_text(&r->body), n, LWS_WRITE_HTTP_FINAL);
        sb_free(&r->body);
        r->body.len = 0;
        return w < (int)n ? -1 : 0;
    }
    case LWS_CALLBACK_RECEIVE_CLIENT_HTTP: {
        char buf[LWS_PRE + 4096], *p = buf + LWS_PRE;
        int n = (int)sizeof buf - LWS_PRE;
        return lws_http_client_read(wsi, &p, &n) < 0 ? -1 : 0;
    }
    case LWS_CALLBACK_RECEIVE_CLIENT_HTTP_READ:
        if (r->status == 200)
            on_stream(cl, r, in, len, now);
        else if (r->in.len + len <= 65536)
            sb_append(&r->in, in, len);
        break;
    case LWS_CALLBACK_COMPLETED_CLIENT_HTTP:
        on_complete(cl, r, now);
        return -1; /* one request per connection: close it */
    case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
        r->wsi = NULL;
        if (!r->done && cl->phase != 2)
            client_on_refused(cl, r, "closed", "the server closed the connection mid-answer", now);
        break;
    default: break;
    }
    return 0;
}
