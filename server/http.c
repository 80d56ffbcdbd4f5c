/* http.c: the HTTP side of the one port (service.h), one route table (ROUTES: path pattern,
 * methods, API key, error shape, handler): files of web/ only through plain path segments (then
 * realpath must stay inside web/), /healthz, /readyz, /metrics, the history API (http_history.c:
 * answered by the history thread through the bridge), Triton's probes and metadata under /v2
 * (http_v2.c), OpenAI's GET /v1/models; POST .../generate[_stream], /v1/completions and
 * /v1/chat/completions go to http_gen.c; vLLM's tokenizer endpoints (/tokenize, /detokenize,
 * /tokenizer_info) to http_tokenize.c, with /v1's rules. Before its route: the Host (and a POST's
 * Origin) checked, 431 for a header longer than its buffer (never read as absent); then 405 with
 * Allow for another method (404 under /v1 and /v2 for a path there is not), and 401 without the API
 * key where the route shows or changes data. Errors in the API's shape: OpenAI's under /v1,
 * Triton's {"error"} under /v2, {"error"} elsewhere. CORS on /v1, /v2 and the tokenizer's routes: a
 * preflight from an allowed origin is 204, and every answer to one carries
 * Access-Control-Allow-Origin. Every response carries nosniff, no-referrer and a strict CSP; /ws
 * without an upgrade is 426. Service thread. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "http_api.h"
#include "http_history.h"
#include "origin.h"
#include "service.h"
#include "sha256.h"
#include "util.h"

#define HTTP_MAX_FILE (8u << 20)
#define HTTP_CHUNK 16384

int srv_refusal(const server *s, struct lws *wsi, int origin, char *why, size_t cap)
{
    char host[256], org[256];
    if (lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) < 0) { /* never read as absent */
        snprintf(why, cap, "the Host header is over %zu bytes", sizeof host - 1);
        return 2;
    }
    if (!host_allowed(s->o->host, s->o->allowed_hosts, host)) {
        snprintf(why, cap, "Host %.60s is not a name of this server (--allowed-hosts)", host);
        return 1;
    }
    if (!origin)
        return 0;
    int on = lws_hdr_copy(wsi, org, sizeof org, WSI_TOKEN_ORIGIN);
    if (on < 0) {
        snprintf(why, cap, "the Origin header is over %zu bytes", sizeof org - 1);
        return 2;
    }
    if (on == 0)
        return 0; /* no Origin: not a browser page */
    if (!origin_allowed(s->o->allowed_origins, org, host)) {
        snprintf(why, cap, "origin %.60s is not allowed (--allowed-origins)", org);
        return 1;
    }
    return 0;
}

/* The request carries the server's API key (or there is none): 1; 0 it does not; -1 its
 * Authorization header is longer than the buffer (431, never a silent "no key"). The key comes as
 * "Authorization: Bearer KEY", or with url_arg also as ?api_key=KEY (a browser's WebSocket and the
 * page's fetches cannot set headers). Compared in time independent of where the bytes differ. */
static int api_key_check(const server *s, struct lws *wsi, int url_arg)
{
    const char *key = s->o->api_key;
    if (!key)
        return 1;
    char got[512];
    const char *k = NULL;
    int n = lws_hdr_copy(wsi, got, sizeof got, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n < 0)
        return -1;
    if (n > 7 && !strncasecmp(got, "Bearer ", 7))
        k = got + 7;
    else if (url_arg)
        k = lws_get_urlarg_by_name(wsi, "api_key=", got, sizeof got);
    if (!k)
        return 0;
    size_t len = strlen(key), m = strlen(k);
    unsigned diff = (unsigned)(len != m);
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)(i < m ? k[i] : 0);
    return !diff;
}

int srv_api_key_ok(const server *s, struct lws *wsi, int url_arg)
{
    return api_key_check(s, wsi, url_arg) == 1;
}

/* A user key is 16..64 of A-Z a-z 0-9 _ -; stored only as its SHA-256. */
int srv_user_key_hash(const char *key, char hex[65])
{
    size_t n = strlen(key);
    if (n < 16 || n > 64)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char ch = key[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return -1;
    }
    ifl_sha256 h;
    unsigned char d[32];
    ifl_sha256_init(&h);
    ifl_sha256_update(&h, key, n);
    ifl_sha256_final(&h, d);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", d[i]);
    return 0;
}

static const char *mime_type(const char *path)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".mjs", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
        {".webmanifest", "application/manifest+json"},
        {".woff2", "font/woff2"},
    };
    const char *dot = strrchr(path, '.');
    if (dot)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (!strcasecmp(dot, types[i].ext))
                return types[i].type;
    return "application/octet-stream";
}

/* A request path maps to a file under web/ only if it is made of plain segments: letters,
 * digits, '-', '_', '.', none starting with '.', no empty segment. Then realpath must stay
 * inside the web directory (no symlink escape). */
static int web_path_ok(const char *p)
{
    if (p[0] != '/')
        return 0;
    const char *seg = p + 1;
    for (const char *q = p + 1;; q++) {
        if (*q == '/' || *q == 0) {
            if (q == seg || seg[0] == '.')
                return 0;
            if (!*q)
                return 1;
            seg = q + 1;
            continue;
        }
        unsigned char ch = (unsigned char)*q;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return 0;
    }
}

static int put_header(struct lws *wsi, const char *name, const char *value, unsigned char **p,
                      unsigned char *end)
{
    return lws_add_http_header_by_name(wsi, (const unsigned char *)name,
                                       (const unsigned char *)value, (int)strlen(value), p, end);
}

int http_headers(struct lws *wsi, int status, const char *ctype, size_t len, int chunked,
                 const char *extra_name, const char *extra_value)
{
    uint8_t hbuf[LWS_PRE + 2048], *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf;
    if (chunked) {
        if (lws_add_http_header_status(wsi, (unsigned)status, &p, end) ||
            lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE,
                                         (const unsigned char *)ctype, (int)strlen(ctype), &p,
                                         end) ||
            lws_add_http_header_by_name(wsi, (const unsigned char *)"transfer-encoding:",
                                        (const unsigned char *)"chunked", 7, &p, end))
            return -1;
    } else if (lws_add_http_common_headers(wsi, (unsigned)status, ctype, len, &p, end)) {
        return -1;
    }
    static const char *const hdrs[][2] = {
        {"x-content-type-options:", "nosniff"},
        {"referrer-policy:", "no-referrer"},
        {"cache-control:", "no-cache"},
        {"content-security-policy:",
         "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "
         "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"},
    };
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++)
        if (put_header(wsi, hdrs[i][0], hdrs[i][1], &p, end))
            return -1;
    if (http_cors_headers(wsi, &p, end) ||
        (extra_name && put_header(wsi, extra_name, extra_value, &p, end)))
        return -1;
    return lws_finalize_write_http_header(wsi, start, &p, end) ? -1 : 0;
}

int http_respond(srv_conn *c, struct lws *wsi, int status, const char *ctype, char *body,
                 size_t len, int head_only, const char *extra_name, const char *extra_value)
{
    if (http_headers(wsi, status, ctype, len, 0, extra_name, extra_value))
        goto fail;
    if (head_only || !len) {
        free(body);
        if (c->http_close_after)
            return -1;
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    free(c->http_body);
    c->http_body = body;
    c->http_len = len;
    c->http_sent = 0;
    lws_callback_on_writable(wsi);
    return 0;
fail:
    free(body);
    return -1;
}

int http_respond_json(srv_conn *c, struct lws *wsi, int status, strbuf *sb, int head_only,
                      const char *extra_name, const char *extra_value)
{
    if (!sb_ok(sb)) {
        sb_free(sb);
        return -1;
    }
    size_t n = sb->len;
    return http_respond(c, wsi, status, "application/json", sb_steal(sb), n, head_only, extra_name,
                        extra_value);
}

static int http_text(srv_conn *c, struct lws *wsi, int status, const char *text, int head_only)
{
    size_t n = strlen(text);
    char *b = malloc(n + 1);
    if (!b)
        return -1;
    memcpy(b, text, n + 1);
    return http_respond(c, wsi, status, "text/plain; charset=utf-8", b, n, head_only, NULL, NULL);
}

static void live_stats(server *s, metrics_live *live)
{
    memset(live, 0, sizeof *live);
    live->isa = ifl_isa_name(s->rt.isa); /* resolved before the service started */
    /* the format: --weights' when it names one, else the model's once it is loaded */
    if (atomic_load(&s->ready))
        live->weights = ifl_model_dtype_name(&s->rt.model);
    else if (s->o->model_opts.convert)
        live->weights = ifl_dtype_name(s->o->model_opts.dtype);
    live->event_loop = s->uv ? "libuv" : "poll";
    live->ready = atomic_load(&s->ready) && !s->rl.stopping;
    if (s->log.db) {
        live->db_enabled = 1;
        ifl_dblog_get_stats(s->log.db, &live->db);
    }
    if (atomic_load(&s->ready)) {
        live->have_stats = 1;
        for (int p = 0; p < IFL_N_POLICIES; p++)
            if (s->rl.b[p])
                ifl_batcher_get_stats(s->rl.b[p], &live->stats[p]);
    }
}

static int http_serve_file(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    if (!strcmp(path, "/"))
        path = "/index.html";
    if (!s->o->web_dir || !web_path_ok(path) || strlen(path) > 512)
        return http_text(c, wsi, HTTP_STATUS_NOT_FOUND, "not found\n", head_only);
    char full[PATH_MAX], real[PATH_MAX], root[PATH_MAX];
    if ((size_t)snprintf(full, sizeof full, "%s%s", s->o->web_dir, path) >= sizeof full ||
        !realpath(s->o->web_dir, root) || !realpath(full, real))
        return http_text(c, wsi, HTTP_STATUS_NOT_FOUND, "not found\n", head_only);
    size_t rl = strlen(root);
    struct stat st;
    if (strncmp(real, root, rl) || real[rl] != '/' || stat(real, &st) || !S_ISREG(st.st_mode))
        return http_text(c, wsi, HTTP_STATUS_NOT_FOUND, "not found\n", head_only);
    char *data = NULL;
    size_t len = 0;
    ifl_err err;
    if (ifl_read_file(real, &data, &len, HTTP_MAX_FILE, &err)) {
        fprintf(stderr, "inflight: %s\n", err.msg);
        return http_text(c, wsi, HTTP_STATUS_INTERNAL_SERVER_ERROR, "cannot read the file\n",
                         head_only);
    }
    return http_respond(c, wsi, HTTP_STATUS_OK, mime_type(real), data, len, head_only, NULL, NULL);
}

static int http_readyz(server *s, srv_conn *c, struct lws *wsi, int head_only)
{
    if (s->rl.stopping)
        return http_text(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "shutting down\n", head_only);
    if (atomic_load(&s->load_failed))
        return http_text(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "the model failed to load\n",
                         head_only);
    if (!atomic_load(&s->ready))
        return http_text(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "not ready: loading the model\n",
                         head_only);
    if (s->log.db) {
        ifl_dblog_stats ds;
        ifl_dblog_get_stats(s->log.db, &ds);
        if (!ds.up) {
            char msg[IFL_ERR_MAX + 100];
            snprintf(msg, sizeof msg,
                     "ready, degraded: the request log is failing (%s); serving goes on\n",
                     ds.last_error);
            return http_text(c, wsi, HTTP_STATUS_OK, msg, head_only);
        }
    }
    return http_text(c, wsi, HTTP_STATUS_OK, "ready\n", head_only);
}

static int http_metrics(server *s, srv_conn *c, struct lws *wsi, int head_only)
{
    metrics_live live;
    live_stats(s, &live);
    strbuf sb;
    sb_init(&sb, 0);
    metrics_render(&s->m, &live, &sb);
    if (!sb_ok(&sb)) {
        sb_free(&sb);
        return -1;
    }
    size_t n = sb.len;
    return http_respond(c, wsi, HTTP_STATUS_OK, "text/plain; version=0.0.4; charset=utf-8",
                        sb_steal(&sb), n, head_only, NULL, NULL);
}

/* The shape of a route's errors: OpenAI's under /v1, Triton's under /v2, {"error"} elsewhere. */
typedef enum { SHAPE_PLAIN, SHAPE_OPENAI, SHAPE_TRITON } route_shape;

/* The shape of a front end's (api_table.h) errors. */
static const route_shape SHAPE_OF[REQ_N_APIS] = {
    [REQ_API_WS] = SHAPE_PLAIN, [REQ_API_OPENAI] = SHAPE_OPENAI, [REQ_API_TRITON] = SHAPE_TRITON};

/* An error answer in the shape: status, code (OpenAI's "code"), msg; extra: one header or NULL. */
static int shaped_error(srv_conn *c, struct lws *wsi, route_shape shape, int status, ifl_code code,
                        const char *msg, int head_only, const char *extra_name,
                        const char *extra_value)
{
    strbuf sb;
    sb_init(&sb, 0);
    if (shape == SHAPE_OPENAI) {
        openai_write_error(&sb, status, code, NULL, msg, 0);
    } else {
        http_req_info none = {.api = HTTP_API_TRITON};
        triton_write_error(&sb, &none, code, msg, 0); /* {"error": msg} */
    }
    return http_respond_json(c, wsi, status, &sb, head_only, extra_name, extra_value);
}

/* 431: a header longer than the buffer it is read into (never read as absent). */
static int too_large(server *s, srv_conn *c, struct lws *wsi, route_shape shape, const char *why,
                     int head_only)
{
    metrics_count_error(&s->m, IFL_CODE_HEADER_TOO_LARGE);
    c->http_close_after = 1;
    return shaped_error(c, wsi, shape, HTTP_STATUS_HEADER_TOO_LARGE, IFL_CODE_HEADER_TOO_LARGE, why,
                        head_only, NULL, NULL);
}

static int unauthorized(server *s, srv_conn *c, struct lws *wsi, route_shape shape, int head_only)
{
    metrics_count_error(&s->m, IFL_CODE_UNAUTHORIZED);
    return shaped_error(c, wsi, shape, HTTP_STATUS_UNAUTHORIZED, IFL_CODE_UNAUTHORIZED,
                        "this server needs an API key: send Authorization: Bearer KEY", head_only,
                        "www-authenticate:", "Bearer");
}

/* 401: the API key is missing or wrong (OpenAI's shape, or Triton's {"error"}). */
int http_unauthorized(server *s, srv_conn *c, struct lws *wsi, req_api front_end)
{
    return unauthorized(s, c, wsi, SHAPE_OF[front_end], 0);
}

/* 503 for a request on a socket accepted past --max-connections (sockets.c: none could be closed
 * to make room), with Retry-After; the connection closes after it. */
static int http_over_limit(server *s, srv_conn *c, struct lws *wsi, const char *path)
{
    char msg[96];
    snprintf(msg, sizeof msg, "too many connections (limit %d): try again later",
             s->o->max_connections);
    s->m.sockets_over_limit++;
    metrics_count_error(&s->m, IFL_CODE_TOO_MANY_CONNECTIONS);
    c->http_close_after = 1;
    route_shape shape = SHAPE_OF[api_front_end_of(path, strlen(path))];
    return shaped_error(c, wsi, shape, HTTP_STATUS_SERVICE_UNAVAILABLE,
                        IFL_CODE_TOO_MANY_CONNECTIONS, msg,
                        lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0, "retry-after:", "1");
}

/* GET /v1/models and /v1/models/ID (OpenAI's shape). */
static int http_v1(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    strbuf sb;
    sb_init(&sb, 0);
    int status = HTTP_STATUS_OK;
    const char *served = http_gen_served_name(s);
    long long created = (long long)(s->t0_unix);
    ifl_policy pol;
    if (!strcmp(path, "/v1/models")) {
        openai_write_models(&sb, served, created);
    } else if (!http_model_policy(path + 11, served, &pol)) {
        openai_write_model(&sb, path + 11, pol, created);
    } else {
        status = HTTP_STATUS_NOT_FOUND;
        char msg[200];
        snprintf(msg, sizeof msg, "the model '%.*s' does not exist (GET /v1/models)",
                 http_clip_len(path + 11, 64), path + 11);
        openai_write_error(&sb, status, IFL_CODE_UNKNOWN_MODEL, "model", msg, 0);
    }
    return http_respond_json(c, wsi, status, &sb, head_only, NULL, NULL);
}

/* ---- the routes ------------------------------------------------------------------------------ */

enum { M_GET = 1, M_HEAD = 2, M_POST = 4, M_OTHER = 8, M_ANY = 15 };
/* The API key a route needs when the server has one: none (it shows no data), the header, or the
 * header or ?api_key= (the page's fetches, as /ws). */
typedef enum { KEY_NO, KEY_YES, KEY_URL } route_key;
typedef int (*route_fn)(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only);

typedef struct {
    const char *pattern; /* '*': one segment; a final '**': the rest, also nothing */
    unsigned methods;    /* another method: 405 with Allow (404 where `known` says no such path) */
    route_key key;
    route_shape shape;
    route_fn fn;
    int (*known)(const char *path, char *msg, size_t cap); /* NULL: every path it matches */
} http_route;

static int r_healthz(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)s, (void)path;
    return http_text(c, wsi, HTTP_STATUS_OK, "ok\n", head_only);
}

static int r_readyz(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)path;
    return http_readyz(s, c, wsi, head_only);
}

static int r_metrics(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)path;
    return http_metrics(s, c, wsi, head_only);
}

static int r_generate(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)head_only;
    return http_gen_begin(s, c, wsi, path);
}

static int r_ws(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)s, (void)path;
    return http_text(c, wsi, 426, "this is the WebSocket endpoint: connect with a WebSocket\n",
                     head_only);
}

/* Any other path under /v1 or /api: 404 naming what there is. */
static int r_not_found(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only)
{
    (void)s;
    int v1 = !strncmp(path, "/v1/", 4);
    return shaped_error(c, wsi, v1 ? SHAPE_OPENAI : SHAPE_PLAIN, HTTP_STATUS_NOT_FOUND,
                        IFL_CODE_INVALID_REQUEST,
                        v1 ? "no such endpoint: /v1 has GET /v1/models, GET /v1/models/{id}, POST "
                             "/v1/completions and POST /v1/chat/completions"
                           : "no such endpoint: /api has GET /api/history and /api/requests/{id}",
                        head_only, NULL, NULL);
}

/* Every path, first match wins. tests/integration/http_edges.test.js reads this table and asks each
 * route with and without the key: a route with KEY_NO must be one it lists as showing no data. */
static const http_route ROUTES[] = {
    {"/healthz", M_GET | M_HEAD, KEY_NO, SHAPE_PLAIN, r_healthz, NULL},
    {"/readyz", M_GET | M_HEAD, KEY_NO, SHAPE_PLAIN, r_readyz, NULL},
    {"/metrics", M_GET | M_HEAD, KEY_NO, SHAPE_PLAIN, r_metrics, NULL},
    {"/api/history", M_GET | M_HEAD, KEY_URL, SHAPE_PLAIN, http_history_begin, NULL},
    {"/api/requests/*", M_GET | M_HEAD, KEY_URL, SHAPE_PLAIN, http_history_begin, NULL},
    {"/api/**", M_ANY, KEY_URL, SHAPE_PLAIN, r_not_found, NULL},
    {"/v1/models", M_GET | M_HEAD, KEY_YES, SHAPE_OPENAI, http_v1, NULL},
    {"/v1/models/*", M_GET | M_HEAD, KEY_YES, SHAPE_OPENAI, http_v1, NULL},
    {"/v1/completions", M_POST, KEY_YES, SHAPE_OPENAI, r_generate, NULL},
    {"/v1/chat/completions", M_POST, KEY_YES, SHAPE_OPENAI, r_generate, NULL},
    {"/v1/**", M_ANY, KEY_YES, SHAPE_OPENAI, r_not_found, NULL},
    {"/tokenize", M_POST, KEY_YES, SHAPE_OPENAI, http_tokenize, NULL},
    {"/detokenize", M_POST, KEY_YES, SHAPE_OPENAI, http_detokenize, NULL},
    {"/tokenizer_info", M_GET | M_HEAD, KEY_YES, SHAPE_OPENAI, http_tokenizer_info, NULL},
    {"/v2", M_GET | M_HEAD, KEY_NO, SHAPE_TRITON, http_v2, NULL},
    {"/v2/models/*/generate", M_POST, KEY_YES, SHAPE_TRITON, r_generate, NULL},
    {"/v2/models/*/generate_stream", M_POST, KEY_YES, SHAPE_TRITON, r_generate, NULL},
    {"/v2/models/*/versions/*/generate", M_POST, KEY_YES, SHAPE_TRITON, r_generate, NULL},
    {"/v2/models/*/versions/*/generate_stream", M_POST, KEY_YES, SHAPE_TRITON, r_generate, NULL},
    {"/v2/**", M_GET | M_HEAD, KEY_NO, SHAPE_TRITON, http_v2, http_v2_known},
    {"/ws", M_GET | M_HEAD, KEY_NO, SHAPE_PLAIN, r_ws, NULL},
    {"/**", M_GET | M_HEAD, KEY_NO, SHAPE_PLAIN, http_serve_file, NULL},
};

static int path_matches(const char *pat, const char *path)
{
    while (*pat) {
        if (pat[0] == '*' && pat[1] == '*')
            return 1;
        if (*pat == '*') {
            size_t n = strcspn(path, "/");
            if (!n)
                return 0;
            path += n;
            pat++;
        } else if (*pat++ != *path++) {
            return 0;
        }
    }
    return !*path;
}

static const http_route *route_of(const char *path)
{
    size_t n = sizeof ROUTES / sizeof ROUTES[0];
    for (size_t i = 0; i < n - 1; i++)
        if (path_matches(ROUTES[i].pattern, path))
            return &ROUTES[i];
    return &ROUTES[n - 1];
}

static unsigned request_method(struct lws *wsi)
{
    if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) > 0)
        return M_GET;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0)
        return M_HEAD;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0)
        return M_POST;
    return M_OTHER;
}

/* A method the route does not take: 405 with Allow, or 404 for a path the route does not know. */
static int wrong_method(srv_conn *c, struct lws *wsi, const http_route *r, const char *path,
                        int head_only)
{
    char msg[320];
    if (r->known && !r->known(path, msg, sizeof msg))
        return shaped_error(c, wsi, r->shape, HTTP_STATUS_NOT_FOUND, IFL_CODE_INVALID_REQUEST, msg,
                            head_only, NULL, NULL);
    int post = r->methods == M_POST;
    snprintf(msg, sizeof msg, "method not allowed: %.200s takes %s", path,
             post ? "POST" : "GET and HEAD");
    return shaped_error(c, wsi, r->shape, HTTP_STATUS_METHOD_NOT_ALLOWED, IFL_CODE_INVALID_REQUEST,
                        msg, head_only, "allow:", post ? "POST" : "GET, HEAD");
}

/* ---- CORS: the routes of /v1, /v2 and the tokenizer (shape not plain) ------------------------ */

int http_cors_headers(struct lws *wsi, unsigned char **p, unsigned char *end)
{
    const srv_conn *c = lws_wsi_user(wsi);
    if (!c || !c->cors_origin[0])
        return 0;
    return put_header(wsi, "access-control-allow-origin:", c->cors_origin, p, end) ||
                   put_header(wsi, "vary:", "Origin", p, end)
               ? -1
               : 0;
}

/* c->cors_origin: the request's Origin when its route takes CORS and the Origin is allowed
 * (origin.h: --allowed-origins, or this server's own), else "". */
static void cors_note(const server *s, srv_conn *c, struct lws *wsi, const http_route *r)
{
    char host[256];
    if (r->shape == SHAPE_PLAIN ||
        lws_hdr_copy(wsi, c->cors_origin, sizeof c->cors_origin, WSI_TOKEN_ORIGIN) <= 0 ||
        lws_hdr_copy(wsi, host, sizeof host, WSI_TOKEN_HOST) < 0 ||
        !origin_allowed(s->o->allowed_origins, c->cors_origin, host))
        c->cors_origin[0] = 0;
}

/* A CORS preflight (OPTIONS on a CORS route, its Origin allowed): 204 with what may be sent. */
static int cors_preflight(srv_conn *c, struct lws *wsi, const http_route *r)
{
    uint8_t hbuf[LWS_PRE + 1024], *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf;
    const char *methods = r->methods == M_POST         ? "POST, OPTIONS"
                          : (r->methods & M_POST) != 0 ? "GET, HEAD, POST, OPTIONS"
                                                       : "GET, HEAD, OPTIONS";
    const char *const hdrs[][2] = {
        {"access-control-allow-methods:", methods},
        {"access-control-allow-headers:", "Authorization, Content-Type"},
        {"access-control-max-age:", "600"},
        {"content-length:", "0"},
    };
    if (lws_add_http_header_status(wsi, HTTP_STATUS_NO_CONTENT, &p, end) ||
        http_cors_headers(wsi, &p, end))
        return -1;
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++)
        if (put_header(wsi, hdrs[i][0], hdrs[i][1], &p, end))
            return -1;
    if (lws_finalize_write_http_header(wsi, start, &p, end) || c->http_close_after)
        return -1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* A request: the Host (and for a POST or a preflight the Origin) checked, then its route's method
 * and API key. A refused request's body is not read: its connection closes after the answer. */
static int http_request(server *s, srv_conn *c, struct lws *wsi, const char *path)
{
    s->m.http_requests++;
    c->http_close_after = 0;
    sockets_requested(s, wsi);
    if (sockets_over_limit(s))
        return http_over_limit(s, c, wsi, path);
    unsigned method = request_method(wsi);
    int head = method == M_HEAD;
    const http_route *r = route_of(path);
    int preflight = method == M_OTHER && r->shape != SHAPE_PLAIN &&
                    lws_hdr_total_length(wsi, WSI_TOKEN_OPTIONS_URI) > 0;
    char why[124];
    c->cors_origin[0] = 0;
    int refusal = srv_refusal(s, wsi, method == M_POST || preflight, why, sizeof why);
    c->http_close_after = refusal || !(method & (M_GET | M_HEAD));
    if (refusal == 2)
        return too_large(s, c, wsi, r->shape, why, head);
    if (refusal) {
        metrics_count_error(&s->m, IFL_CODE_FORBIDDEN);
        return shaped_error(c, wsi, r->shape, HTTP_STATUS_FORBIDDEN, IFL_CODE_FORBIDDEN, why, head,
                            NULL, NULL);
    }
    cors_note(s, c, wsi, r);
    if (preflight)
        return cors_preflight(c, wsi, r);
    if (!(r->methods & method))
        return wrong_method(c, wsi, r, path, head);
    int key = r->key == KEY_NO ? 1 : api_key_check(s, wsi, r->key == KEY_URL);
    if (key < 0)
        return too_large(s, c, wsi, r->shape, "the Authorization header is over 511 bytes", head);
    if (!key)
        return unauthorized(s, c, wsi, r->shape, head);
    c->http_close_after = 0; /* the handler reads the body, or decides */
    return r->fn(s, c, wsi, path, head);
}

static int http_writeable(server *s, srv_conn *c, struct lws *wsi)
{
    if (http_gen_streaming(c))
        return http_gen_writeable(c, wsi);
    if (c->answer)
        return http_history_writeable(s, c, wsi);
    if (!c->http_body)
        return 0;
    uint8_t buf[LWS_PRE + HTTP_CHUNK];
    size_t n = c->http_len - c->http_sent;
    if (n > HTTP_CHUNK)
        n = HTTP_CHUNK;
    memcpy(buf + LWS_PRE, c->http_body + c->http_sent, n);
    int final = c->http_sent + n == c->http_len;
    if (lws_write(wsi, buf + LWS_PRE, n, final ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP) < (int)n)
        return -1;
    c->http_sent += n;
    if (final) {
        free(c->http_body);
        c->http_body = NULL;
        if (c->http_close_after)
            return -1;
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* The connection is gone: a history answer still to come is dropped when it arrives. */
static void on_closed_http(server *s, srv_conn *c, struct lws *wsi)
{
    http_gen_conn_closed(s, wsi);
    if (!c)
        return;
    http_gen_closed(s, c);
    free(c->http_body);
    c->http_body = NULL;
    http_history_closed(s, c);
    c->wsi = NULL;
}

int http_callback(server *s, struct lws *wsi, enum lws_callback_reasons reason, srv_conn *c,
                  void *in, size_t len)
{
    switch (reason) {
    case LWS_CALLBACK_HTTP: return http_request(s, c, wsi, (const char *)in);
    case LWS_CALLBACK_HTTP_BODY: return http_gen_body(s, c, wsi, in, len);
    case LWS_CALLBACK_HTTP_BODY_COMPLETION: return http_gen_body_done(s, c, wsi);
    case LWS_CALLBACK_HTTP_WRITEABLE: return http_writeable(s, c, wsi);
    case LWS_CALLBACK_CLOSED_HTTP: on_closed_http(s, c, wsi); return 0;
    /* the transaction is over (lws frees this per-session data before the next request on a
     * keep-alive connection, or at the close) */
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c && !c->is_ws)
            http_gen_closed(s, c);
        return 0;
    default: return 0;
    }
}
