/* client.h: the state `inflight client` shares between its parts. cmd_client.c holds the options,
 * the send schedule and the figures; client_api.c the table of the APIs it speaks (what differs
 * between them: wire format, path, transport); the transports carry the requests: client_ws.c
 * WebSocket frames, client_http.c HTTP POSTs answered with Server-Sent Events (one connection per
 * request); client_demo.c draws the demo's two columns. Everything runs on one thread, the lws
 * service loop. */
#ifndef IFL_CLIENT_H
#define IFL_CLIENT_H

#include <cjson/cJSON.h>
#include <libwebsockets.h>
#include <stdint.h>

#include "rng.h"
#include "strbuf.h"

typedef struct client client;
typedef struct creq creq;

/* What one message from the server (a ws frame, an SSE event's data) says, as an API's parser
 * reads it. The strings point into the parsed JSON. */
typedef enum {
    CLIENT_EV_NONE, /* nothing for us: ignored */
    CLIENT_EV_HELLO,
    CLIENT_EV_TOKEN,
    CLIENT_EV_DONE,
    CLIENT_EV_ERROR /* a refusal (code, message) */
} client_ev_kind;

typedef struct {
    client_ev_kind kind;
    const char *id; /* the request it is for, where the API multiplexes (ws); else NULL */
    const char *text, *finish, *code, *message;
    double ttft_ms, tps; /* done: the server's figures, where the API carries them */
} client_event;

/* One API the client speaks: a row of client_api.c's table. */
typedef struct {
    const char *name;        /* as given to --api */
    int http;                /* HTTP + SSE, a connection per request; else WebSocket */
    const char *default_url; /* --url's default */
    lws_callback_function *callback;
    size_t per_session_size;  /* the lws protocol's per-connection data */
    int (*start)(client *cl); /* opens what must be open before sending; client_start once ready */
    void (*send)(client *cl, creq *r, const char *prompt, uint64_t seed);
    /* HTTP: the request's path after --url's prefix, "{model}" standing for the model's name;
     * NULL for ws, whose path is --url's own */
    const char *path;
    const char *models[2]; /* the model names it knows the iterative and static policies by */
    /* the request's JSON (ws: the generate frame), written into b */
    void (*write_body)(strbuf *b, const client *cl, const creq *r, const char *prompt,
                       uint64_t seed);
    /* what one message (parsed JSON) says */
    void (*parse)(const cJSON *m, client_event *ev);
    int server_timing; /* its done carries the server's ttft and tokens/s; else ours are used */
} client_api;

struct creq {
    char id[24];
    int conn; /* ws: the socket it goes over */
    uint64_t t_send, t_first, t_last, t_done;
    int32_t tokens;
    int done, failed;
    char finish[16];
    strbuf text;         /* demo */
    double ttft_ms, tps; /* demo: the server's figures over ws, ours over HTTP */
    /* HTTP: the request's own connection */
    struct lws *wsi;
    strbuf body; /* the JSON to send, LWS_PRE bytes ahead */
    strbuf in;   /* the answer's bytes not yet parsed (SSE events, or an error's body) */
    int status;  /* HTTP status of the answer */
};

typedef struct {
    struct lws *wsi;
    int ready;
    int closed;
    strbuf *outq; /* frames to send (ring of pending JSON) */
    int n_out, cap_out, head_out;
} cconn;

struct client {
    struct lws_context *ctx;
    char *url_buf;
    const char *address, *path; /* path: /ws (ws) or a prefix before /v1 and /v2 (HTTP) */
    int port;
    const client_api *api;
    const char *api_key;
    int bench;
    /* parameters */
    const char *policy; /* iterative | static */
    int32_t max_tokens;
    double temperature;
    uint64_t seed;
    int ignore_eos;
    int32_t concurrency, rounds, n_open, n_conns;
    double interval_ms, rate;
    const char *prompt, *prompt1, *prompt2;
    /* state */
    cconn *conns;
    int n_ready, n_closed;
    creq *reqs;
    int32_t n_reqs, n_sent, n_done, round_base, round;
    uint64_t next_send_us;
    ifl_rng arrivals;
    double *itl;
    size_t n_itl, cap_itl;
    lws_sorted_usec_list_t sul;
    int phase; /* 0 connecting, 1 running, 2 finished */
    int failed;
    char error[256];
    int tty;
};

/* ---- what the transports report (cmd_client.c) ---- */
void client_start(client *cl); /* every connection is ready */
void client_on_token(client *cl, creq *r, const char *text, uint64_t now);
void client_on_done(client *cl, creq *r, const char *finish, uint64_t now);
void client_on_refused(client *cl, creq *r, const char *code, const char *message, uint64_t now);
/* What a message said, for request r (NULL: none of ours). */
void client_on_event(client *cl, creq *r, const client_event *ev, uint64_t now);
void client_fail(client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Opens a connection to the server's path (method NULL: a WebSocket upgrade), tagged with the
 * opaque user data `tag`; NULL and client_fail when lws cannot start it. */
struct lws *client_connect(client *cl, const char *path, const char *method, intptr_t tag,
                           struct lws **pwsi);
/* The request of an id "<prefix><index>", or NULL. */
creq *client_find_req(client *cl, const char *id);

/* ---- client_api.c ---- */
/* The row of the API named `name` (--api), or NULL. */
const client_api *client_api_find(const char *name);
/* The model name the API knows the client's policy by. */
const char *client_model(const client *cl);
/* The message of an error object: OpenAI's {"error":{"message","code"}} or Triton's
 * {"error":"..."}; code gets OpenAI's code (or type), else "error". NULL: no error. */
const char *client_error_of(const cJSON *m, const char **code);

/* ---- client_ws.c ---- */
int client_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len);
int client_ws_connect(client *cl); /* opens cl->n_conns sockets; client_start on their hellos */
void client_ws_send(client *cl, creq *r, const char *prompt, uint64_t seed);
void client_ws_free(client *cl);

/* ---- client_http.c ---- */
int client_http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len);
int client_http_start(client *cl); /* nothing to open first: client_start */
void client_http_send(client *cl, creq *r, const char *prompt, uint64_t seed);

/* ---- client_demo.c ---- */
void client_demo_draw(client *cl, int final);

#endif
