/* http_gen_body.c: how an HTTP generation request (http_gen.c) is read: its route (each API's row
 * of HTTP_APIS, http_api.h) and its body, which is then handed to http_gen_body_done.
 *
 * The body: with a Content-Length, or Transfer-Encoding: chunked (decoded here, http_chunked.c:
 * lws 4.1 hands such a body over raw; the connection closes after its answer, since lws still
 * counts it as a body of unknown end), neither is 411, both 400; at most --max-message bytes
 * (413), Content-Type application/json (Triton: also none or curl -d's
 * application/x-www-form-urlencoded, as Triton's own curl examples send; else 415).
 * Service thread. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_gen_impl.h"
#include "util.h"

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
