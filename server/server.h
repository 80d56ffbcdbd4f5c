/* server.h: `inflight serve`: one libwebsockets service thread serving the page (web/), /healthz,
 * /readyz, /metrics and the WebSocket API at /ws (docs/protocol.md) on one port, in front of two
 * batchers (iterative and static) that share one backend thread pool.
 *
 * Threads:
 *   service   (the caller of ifl_server_run) every socket, all JSON, the metrics, the request and
 *             connection tables. Nothing else touches them.
 *   loader    loads the model and starts the batchers, then exits; /readyz says 503 until then.
 *   batchers  (two) run steps; their events go into one event queue (mutex) and wake the service
 *             thread with lws_cancel_service(), the only lws call that is safe from another thread.
 * What it is not: the engine (engine/) or the scheduler (engine/batcher.c). */
#ifndef IFL_SERVER_H
#define IFL_SERVER_H

#include <stdint.h>

#include "cpu_isa.h"
#include "model.h"

typedef struct {
    const char *model_dir;
    const char *vocab_dir; /* NULL: the model dir, $INFLIGHT_VOCAB_DIR, the npm package */
    const char *host;      /* default "127.0.0.1" */
    int port;              /* 0: a free port, printed */
    const char *web_dir;   /* the page's files */
    const char *device;    /* "auto", "cpu", "cuda" */
    ifl_isa isa;           /* the CPU kernels (IFL_ISA_AUTO: $INFLIGHT_ISA, else the best) */
    ifl_model_opts model_opts;
    int32_t threads;     /* CPU threads (0: one per core) */
    int32_t max_batch;   /* per batcher */
    int32_t max_queue;   /* per batcher */
    int32_t step_tokens; /* token budget per step */
    int32_t kv_mem_mb;   /* KV pool memory per batcher (0: default) */
    int no_prefix_cache; /* --prefix-cache off: every prompt computed whole (engine/kv.h) */
    int no_trim; /* --trim off: a chat that does not fit is refused unless it asks for truncate */
    int32_t max_connections;
    int32_t max_inflight; /* requests in flight per connection */
    int32_t max_message;  /* bytes of one client message */
    int32_t max_outbox;   /* bytes queued for one connection before it is closed */
    double request_timeout_s; /* an HTTP request's head and body, from its first byte (408) */
    int32_t min_body_rate;    /* bytes a second a body must average after its first 5 s (408) */
    int32_t default_max_tokens;
    double default_temperature, default_top_p;
    int32_t default_top_k;
    int log_requests; /* one line per request on stderr */
    int quiet;        /* only errors */
    /* the request log (SQLite) */
    const char *db_path;         /* NULL: no log */
    int32_t db_flush_ms;         /* writer interval (default 200) */
    int32_t db_queue;            /* records waiting at most (default 100000) */
    double retain_days;          /* 0: keep */
    int64_t retain_requests;     /* 0: keep */
    const char *history;         /* "own" (default), "all", "off" */
    double grace_s;              /* on SIGTERM/SIGINT: how long running requests may finish */
    const char *api_key;         /* NULL: open; else /v1, /v2 generation and /ws need it (Bearer) */
    const char *allowed_origins; /* more page origins than the same one (origin.h); "*": any */
    const char *allowed_hosts;   /* Host names answered besides loopback's (origin.h); "*": any */
    const char *event_loop;      /* "uv" (default: libuv through lws's event-lib plugin) or "poll"
                                    (lws's own poll(): its cost grows with every open socket) */
} ifl_server_opts;

void ifl_server_opts_default(ifl_server_opts *o);

/* Runs until SIGINT or SIGTERM. Returns the process exit status (0 after a clean stop). */
int ifl_server_run(const ifl_server_opts *o);

#endif
