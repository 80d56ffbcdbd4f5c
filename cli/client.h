/* client.h: the state `inflight client` shares between its parts. cmd_client.c holds the options,
 * the send schedule and the figures; the transports carry the requests: client_ws.c our /ws
 * protocol, client_http.c OpenAI's /v1/completions and Triton's generate_stream (Server-Sent
 * Events, one HTTP connection per request); client_demo.c draws the demo's two columns.
 * Everything runs on one thread, the lws service loop. */
#ifndef IFL_CLIENT_H
#define IFL_CLIENT_H

#include <libwebsockets.h>
#include <stdint.h>

#include "rng.h"
#include "strbuf.h"

typedef enum { CLIENT_API_WS, CLIENT_API_OPENAI, CLIENT_API_TRITON } client_api;

typedef struct {
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
} creq;

typedef struct {
    struct lws *wsi;
    int ready;
    int closed;
    strbuf *outq; /* frames to send (ring of pending JSON) */
    int n_out, cap_out, head_out;
} cconn;

typedef struct {
    struct lws_context *ctx;
    char *url_buf;
    const char *address, *path; /* path: /ws (ws) or a prefix before /v1 and /v2 (HTTP) */
    int port;
    client_api api;
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
} client;

/* ---- what the transports report (cmd_client.c) ---- */
void client_start(client *cl); /* every connection is ready */
void client_on_token(client *cl, creq *r, const char *text, uint64_t now);
void client_on_done(client *cl, creq *r, const char *finish, uint64_t now);
void client_on_refused(client *cl, creq *r, const char *code, const char *message, uint64_t now);
void client_fail(client *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Opens a connection to the server's path (method NULL: a WebSocket upgrade), tagged with the
 * opaque user data `tag`; NULL and client_fail when lws cannot start it. */
struct lws *client_connect(client *cl, const char *path, const char *method, intptr_t tag,
                           struct lws **pwsi);
/* The request of an id "<prefix><index>", or NULL. */
creq *client_find_req(client *cl, const char *id);

/* ---- client_ws.c ---- */
int client_ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len);
int client_ws_connect(client *cl); /* opens cl->n_conns sockets; client_start on their hellos */
void client_ws_send(client *cl, creq *r, const char *prompt, uint64_t seed);
void client_ws_free(client *cl);

/* ---- client_http.c ---- */
int client_http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len);
/* The model name the API knows the policy by (iterative-gpt2 / simple-gpt2 for Triton). */
const char *client_http_model(const client *cl);
void client_http_send(client *cl, creq *r, const char *prompt, uint64_t seed);

/* ---- client_demo.c ---- */
void client_demo_draw(client *cl, int final);

#endif
