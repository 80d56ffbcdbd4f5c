/* service.h: what the files of `inflight serve` share inside server/ (not a public header: the
 * public one is server.h). The server's state, the per-connection state, and the entry points each
 * file gives the others:
 *   server.c   run, signals, the stop phases, the loader thread, the lws callback's dispatch and
 *              the draining of the bridge;
 *   ws.c       /ws connections: outbox, receive and reassembly, message dispatch, the request
 *              layer's sink that writes frames (protocol.h), step frames to subscribers;
 *   http.c     HTTP routes: the page's files, /healthz, /readyz, /metrics, the history API;
 *   http_v2.c  Triton's probes and metadata under /v2;
 *   http_gen.c generation over HTTP (http_triton.c: Triton's generate; http_openai.c: OpenAI's
 *              completions and chat completions).
 *
 * State and its guards:
 *   service thread   connections, their outboxes, the request layer, metrics, every JSON byte.
 *   {bridge.q.lock}  the bridge (bridge.h).
 *   atomics          ready / load_failed / load_done (set once by the loader thread, which writes
 *                    the engine fields before setting them). */
#ifndef IFL_SERVICE_H
#define IFL_SERVICE_H

#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#ifdef INFLIGHT_HAVE_LIBUV
#include <uv.h>
#endif

#include "bridge.h"
#include "dblog.h"
#include "runtime.h"
#include "history.h"
#include "metrics.h"
#include "protocol.h"
#include "reqlog.h"
#include "sockets.h"
#include "request.h"
#include "server.h"

#define CLOSE_TRY_AGAIN_LATER 1013

typedef struct srv_frame {
    struct srv_frame *next;
    char *buf; /* LWS_PRE + len */
    size_t len;
} srv_frame;

/* Per-connection state: lws per-session data, zeroed by lws, used by plain HTTP (the http_* and
 * job fields) and by /ws connections (the rest). */
typedef struct http_gen http_gen; /* http_gen.c: one HTTP generation request */

typedef struct srv_conn {
    struct server *srv; /* set when the connection is established */
    struct lws *wsi;
    struct srv_conn *next, *prev;         /* in server.conns (WebSocket connections only) */
    struct srv_conn *sub_next, *sub_prev; /* in server.subscribers while subscribed */
    int is_ws;
    char peer[64];
    req_owner owner; /* this connection's session and requests (/ws, or HTTP generation) */
    srv_frame *out_head, *out_tail;
    size_t out_bytes;
    int subscribed;
    uint64_t steps_dropped;
    char *rx; /* the message being reassembled */
    size_t rx_len, rx_cap;
    int rx_binary;
    int closing;   /* close once the outbox is written */
    int close_now; /* close at the next writeable, dropping the outbox */
    int close_code;
    char close_reason[120];
    char close_why[160]; /* for the log: why it closed */
    /* what the upgrade request said (copied in FILTER_PROTOCOL_CONNECTION) */
    char user_hash[65];
    char user_agent[160];
    int api_key_missing; /* --api-key is set and the upgrade did not present it */
    char refused[120];   /* the upgrade's Origin or Host is not allowed: the close reason */
    int session_logged;  /* its session row was written (not for a connection refused at once) */
    /* HTTP: the response being written */
    char *http_body;
    size_t http_len, http_sent;
    int http_close_after;  /* close the connection once this response is out */
    char cors_origin[256]; /* CORS: the Origin its answer allows (http.c), or "" for none */
    http_gen *gen;         /* an HTTP generation request: its body, then its answer */
    /* HTTP: an answer computed elsewhere (history), written at the next HTTP_WRITEABLE */
    history_job *job; /* waiting for it; job->tag is this connection */
    history_job *answer;
} srv_conn;

typedef struct server {
    const ifl_server_opts *o;
    struct lws_context *ctx;
    struct lws_context *ctx_live; /* lws's pcontext: NULL once lws freed the context wholly */
#ifdef INFLIGHT_HAVE_LIBUV
    uv_loop_t uv_loop; /* --event-loop uv: the loop lws runs on (ours, "foreign" to lws) */
#endif
    int uv; /* uv_loop is initialised and lws uses it */
    int port;
    uint64_t t0_us;
    long long t0_unix; /* the start, in unix seconds (OpenAI's model "created") */
    /* written by the loader thread before `ready` is set */
    ifl_runtime rt; /* the device (resolved before the loader starts), model, tokenizer,
                       thread pool and the batchers' backends (one per policy); the batchers
                       themselves are the request layer's (rl.b) */
    atomic_int ready, load_failed, load_done;
    char load_error[IFL_ERR_MAX];
    pthread_t loader;
    int loader_started;
    bridge bridge;
    /* service thread */
    req_layer rl;
    reqlog log;
    metrics m;
    proto_limits lim;
    srv_conn *conns;
    int32_t n_conns;
    srv_conn *subscribers; /* the connections subscribed to step frames */
    /* every accepted socket (sockets.c) */
    struct srv_sock **sock_buckets; /* by wsi */
    size_t n_sock_buckets;
    int32_t n_sockets, n_evicting;
    int32_t sock_band; /* sockets accepted past --max-connections to be answered 503 / 1013 */
    struct srv_sock *silent_head, *silent_tail; /* no request yet, oldest first */
    struct srv_sock **sock_by_fd;               /* the same, by descriptor (wire_recv.c) */
    int n_sock_by_fd;
    /* the stop has begun: rl.stopping (the request layer refuses new requests by it) */
    uint64_t stop_deadline_us; /* grace period end */
    int closing_sockets;       /* stop: batchers stopped, sockets told 1001 */
    ifl_history *history;      /* NULL once stopped */
    lws_sorted_usec_list_t stop_timer;
    lws_sorted_usec_list_t sweep_timer; /* request deadlines (sockets_sweep) */
} server;

/* server.c (service thread): every item the engine's threads have queued on the bridge, handled
 * in order (events into their connections' outboxes, step records, history answers). */
void srv_drain_bridge(server *s);
/* ws.c (service thread) */
int ws_callback(server *s, struct lws *wsi, enum lws_callback_reasons reason, srv_conn *c, void *in,
                size_t len);
void ws_broadcast_step(server *s, const ifl_step_record *st);
void ws_close_all(server *s); /* the stop: every connection gets 1001 once its outbox is out */

/* http.c (service thread) */
int http_callback(server *s, struct lws *wsi, enum lws_callback_reasons reason, srv_conn *c,
                  void *in, size_t len);
void http_history_answer(server *s, history_job *j);
/* Starts the response: status, headers (Content-Length len; the security headers; one extra
 * header when extra_name is set), then body (heap, taken; written at HTTP_WRITEABLE) unless
 * head_only or empty. -1: close the connection. */
int http_respond(srv_conn *c, struct lws *wsi, int status, const char *ctype, char *body,
                 size_t len, int head_only, const char *extra_name, const char *extra_value);
/* CORS: Access-Control-Allow-Origin (the request's allowed origin) and Vary: Origin, added at *p
 * when the request's route takes CORS and its Origin is allowed (else nothing); -1 no room. */
int http_cors_headers(struct lws *wsi, unsigned char **p, unsigned char *end);
/* The same for a JSON body built in sb (pre 0), which it takes (-1 when sb ran out of memory). */
int http_respond_json(srv_conn *c, struct lws *wsi, int status, strbuf *sb, int head_only,
                      const char *extra_name, const char *extra_value);
void http_on_history_done(void *ud, history_job *job); /* history thread: into the bridge */
/* --api-key: the request presents it (Authorization: Bearer; url_arg: also ?api_key=), or the
 * server has none. */
int srv_api_key_ok(const server *s, struct lws *wsi, int url_arg);
/* The request's Host (and with origin its Origin) against --allowed-hosts / --allowed-origins
 * (origin.h): 0 if it may go on; 1 refused (403, /ws 1008); 2 a Host or Origin header over 255
 * bytes (431, /ws 1008: never read as absent); why filled (for a close reason: under 120 bytes). */
int srv_refusal(const server *s, struct lws *wsi, int origin, char *why, size_t cap);
/* the 401 answer, in the front end's shape (OpenAI's, else Triton's {"error"}) */
int http_unauthorized(server *s, srv_conn *c, struct lws *wsi, req_api front_end);
/* http_v2.c: GET/HEAD of a path under /v2 (service thread) */
int http_v2(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only);
/* http_gen.c (service thread): POST of a generation path (Triton's .../generate[_stream],
 * /v1/completions, /v1/chat/completions), its body's pieces and end, the stream's
 * HTTP_WRITEABLE (http_gen_streaming: the connection has one), and the end of the transaction or
 * the connection (its request, if any, is cancelled). http_gen_served_name: the model directory's
 * name, an OpenAI model id meaning iterative. */
const char *http_gen_served_name(const server *s);
int http_gen_begin(server *s, srv_conn *c, struct lws *wsi, const char *path);
/* A POST whose body a handler of its own answers (the tokenizer endpoints, http_tokenize.c): the
 * same checks and reading as a generation body's (errors in OpenAI's shape), then on_body(body,
 * len: not NUL-terminated, freed after it returns). */
typedef int (*http_body_fn)(server *s, srv_conn *c, struct lws *wsi, const char *body, size_t len);
int http_gen_begin_body(server *s, srv_conn *c, struct lws *wsi, http_body_fn on_body);
int http_gen_body(server *s, srv_conn *c, struct lws *wsi, const void *in, size_t len);
int http_gen_body_done(server *s, srv_conn *c, struct lws *wsi);
int http_gen_streaming(const srv_conn *c);
int http_gen_writeable(srv_conn *c, struct lws *wsi);
void http_gen_closed(server *s, srv_conn *c);
void http_gen_conn_closed(server *s, struct lws *wsi); /* CLOSED_HTTP: the session ends */
/* http_tokenize.c (service thread): the routes POST /tokenize, POST /detokenize and GET/HEAD
 * /tokenizer_info (vLLM's tokenizer endpoints). */
int http_tokenize(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only);
int http_detokenize(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only);
int http_tokenizer_info(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only);
/* A user key is 16..64 of A-Z a-z 0-9 _ -; kept only as its SHA-256 (hex). -1 if it does not fit.
 */
int srv_user_key_hash(const char *key, char hex[65]);

#endif
