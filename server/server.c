/* server.c: `inflight serve` (server.h): the run, the signals and the stop phases, the loader
 * thread, and the one libwebsockets callback, which hands each reason to ws.c or http.c and
 * drains the bridge when another thread woke the loop. The files and the state they share are
 * described in service.h; one request's path through them in docs/architecture.md.
 *
 * Stopping. SIGTERM/SIGINT: no new connections or requests; those running may finish for --grace;
 * then the batchers stop (what still runs ends cancelled), every socket gets 1001, and the
 * teardown runs in the order that keeps every other thread from reaching a freed libwebsockets
 * context: batchers and history thread stopped and their last items drained, the bridge detached
 * from the context, the context destroyed (closing the sockets left), the request log flushed. */
#include "server.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "defaults.h"
#include "service.h"
#include "util.h"
#include "wire_recv.h"

void ifl_server_opts_default(ifl_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->web_dir = NULL;
    o->device = "auto";
    o->isa = IFL_ISA_AUTO;
    o->model_opts.cpu_layout = 1;
    o->max_batch = IFL_DEFAULT_MAX_BATCH;
    o->max_queue = IFL_DEFAULT_MAX_QUEUE;
    o->step_tokens = IFL_DEFAULT_STEP_TOKENS;
    o->max_connections = 256;
    o->max_inflight = 64;
    o->max_message = 65536;
    o->max_outbox = 1 << 20;
    o->request_timeout_s = 30;
    o->min_body_rate = 1024;
    o->default_max_tokens = IFL_DEFAULT_MAX_NEW_TOKENS;
    o->default_temperature = IFL_DEFAULT_TEMPERATURE;
    o->default_top_p = IFL_DEFAULT_TOP_P;
    o->default_top_k = IFL_DEFAULT_TOP_K;
    o->log_requests = 1;
    o->db_flush_ms = 200;
    o->db_queue = 100000;
    o->history = "own";
    o->grace_s = 10;
    o->event_loop = "uv";
}

/* The server the signal handler wakes; NULL before the context exists and once it is going. */
static server *volatile g_srv;
static volatile sig_atomic_t g_signals;

/* ---- the bridge, drained (service thread) --------------------------------------------------- */

void srv_drain_bridge(server *s)
{
    for (bridge_item *it = bridge_take_all(&s->bridge), *next; it; it = next) {
        next = bridge_next(it);
        int embedded = it->embedded;
        switch (it->kind) {
        case BRIDGE_EVENT: req_handle_event(&s->rl, it); break; /* may free an embedded item */
        case BRIDGE_STEP:
            req_handle_step(&s->rl, &it->step);
            ws_broadcast_step(s, &it->step);
            break;
        case BRIDGE_HISTORY: http_history_answer(s, it->job); break;
        }
        if (!embedded)
            free(it);
    }
}

/* ---- the lws callback (service thread) ------------------------------------------------------ */

static int srv_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len)
{
    server *s = lws_context_user(lws_get_context(wsi));
    srv_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (s)
            srv_drain_bridge(s);
        return 0;
    case LWS_CALLBACK_WSI_CREATE: sockets_created(s, wsi); return 0;
    case LWS_CALLBACK_WSI_DESTROY: sockets_destroyed(s, wsi); return 0;
    case LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: sockets_instantiated(s, wsi); return 0;
    case LWS_CALLBACK_HTTP:
        sockets_http_delivered(s, wsi);
        return http_callback(s, wsi, reason, c, in, len);
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL: {
        int rc = http_callback(s, wsi, reason, c, in, len);
        sockets_http_dropped(s, wsi); /* after: the transaction's state is gone */
        return rc;
    }
    case LWS_CALLBACK_HTTP_BODY:
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
    case LWS_CALLBACK_HTTP_WRITEABLE:
    case LWS_CALLBACK_CLOSED_HTTP: return http_callback(s, wsi, reason, c, in, len);
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION:
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
    case LWS_CALLBACK_ESTABLISHED:
    case LWS_CALLBACK_RECEIVE:
    case LWS_CALLBACK_SERVER_WRITEABLE:
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
    case LWS_CALLBACK_CLOSED: return ws_callback(s, wsi, reason, c, in, len);
    default: return lws_callback_http_dummy(wsi, reason, user, in, len);
    }
}

static const struct lws_protocols protocols[] = {
    {"inflight", srv_callback, sizeof(srv_conn), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- loading (loader thread) ---------------------------------------------------------------- */

/* Model, tokenizer, thread pool and one backend per policy (runtime.h). */
static int load_engine(server *s, int32_t step_tokens, ifl_err *err)
{
    const ifl_server_opts *o = s->o;
    ifl_runtime_opts ro = {.model_dir = o->model_dir,
                           .vocab_dir = o->vocab_dir,
                           .model_opts = o->model_opts,
                           .threads = o->threads,
                           .n_backends = IFL_N_POLICIES,
                           .max_seqs = o->max_batch,
                           .max_tokens = step_tokens,
                           .kv_mem_mb = o->kv_mem_mb};
    return ifl_runtime_load(&s->rt, &ro, err);
}

/* The prefix cache's salt: what made the KV (the model's directory, its weights format, the
 * device and kernels). A pool is one backend's, so this only labels its keys (engine/kv.h). */
static uint64_t cache_salt(const server *s)
{
    const char *parts[3] = {s->o->model_dir, ifl_model_dtype_name(&s->rt.model), s->rt.desc};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < 3; i++)
        for (const char *c = parts[i]; c && *c; c++)
            h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return h;
}

static int start_batchers(server *s, int32_t step_tokens, ifl_err *err)
{
    const ifl_server_opts *o = s->o;
    for (int p = 0; p < IFL_N_POLICIES; p++) {
        ifl_batcher_params bpp = {.policy = (ifl_policy)p,
                                  .max_batch = o->max_batch,
                                  .max_queue = o->max_queue,
                                  .step_tokens = step_tokens,
                                  .eos_token = s->rt.model.cfg.eos_token_id,
                                  .tok = s->rt.tok,
                                  .no_prefix_cache = o->no_prefix_cache,
                                  .cache_salt = cache_salt(s),
                                  .on_event = req_batcher_event,
                                  .on_step = req_batcher_step,
                                  .ud = &s->rl};
        s->rl.b[p] = ifl_batcher_start(s->rt.be[p], &bpp, err);
        if (!s->rl.b[p])
            return -1;
    }
    return 0;
}

static void print_ready(const server *s, int32_t step_tokens, double seconds)
{
    const ifl_server_opts *o = s->o;
    const ifl_backend_params *gp = &s->rt.be[0]->params;
    const ifl_config *c = &s->rt.model.cfg;
    printf("inflight serve: model %s: %d layers, %d heads, %d wide, context %d, weights %s\n",
           o->model_dir, c->n_layer, c->n_head, c->n_embd, c->n_ctx,
           ifl_model_dtype_name(&s->rt.model));
    printf("inflight serve: device %s (%s)\n", s->rt.desc, s->rt.why);
    printf("inflight serve: isa %s (%s)\n", ifl_isa_name(s->rt.isa), s->rt.isa_why);
    printf("inflight serve: batchers iterative + static: max_batch %d, max_queue %d, step "
           "budget %d tokens, KV %d blocks x %d tokens each, prefix cache %s\n",
           o->max_batch, o->max_queue, step_tokens, gp->kv_blocks, gp->kv_block_size,
           o->no_prefix_cache ? "off" : "on");
    printf("inflight serve: ready in %.2f s\n", seconds);
    fflush(stdout);
}

static void *loader_main(void *arg)
{
    server *s = arg;
    const ifl_server_opts *o = s->o;
    ifl_err err;
    double t0 = ifl_now_s();
    int32_t step_tokens = ifl_batcher_step_budget(o->max_batch, o->step_tokens);
    if (load_engine(s, step_tokens, &err) || start_batchers(s, step_tokens, &err)) {
        snprintf(s->load_error, sizeof s->load_error, "%s", err.msg);
        atomic_store(&s->load_failed, 1);
    } else {
        s->lim.max_tokens = s->rt.model.cfg.n_ctx - 1;
        s->lim.n_vocab = s->rt.model.cfg.n_vocab;
        if (s->lim.def_max_tokens > s->lim.max_tokens)
            s->lim.def_max_tokens = s->lim.max_tokens;
        if (s->lim.def_top_k > s->lim.n_vocab) { /* hello must not advertise what is refused */
            fprintf(stderr,
                    "inflight: --top-k %d is past the vocabulary (%d tokens): the default "
                    "top_k is %d\n",
                    s->lim.def_top_k, s->lim.n_vocab, s->lim.n_vocab);
            s->lim.def_top_k = s->lim.n_vocab;
        }
        if (!o->quiet)
            print_ready(s, step_tokens, ifl_now_s() - t0);
        atomic_store(&s->ready, 1);
    }
    atomic_store(&s->load_done, 1);
    lws_cancel_service(s->ctx); /* the loop looks at the outcome (the context outlives us) */
    return NULL;
}

/* ---- stopping (service thread; on_signal: the signal handler) ------------------------------- */

static void on_signal(int sig)
{
    (void)sig;
    g_signals++;
    if (g_signals >= 2) {
        static const char msg[] = "inflight: second signal: exiting now\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        _exit(130);
    }
    server *s = g_srv;
    if (s)
        lws_cancel_service(s->ctx);
}

static void stop_tick(lws_sorted_usec_list_t *sul)
{
    server *s = lws_container_of(sul, server, stop_timer);
    /* only wakes the service loop, which checks the stop's progress */
    lws_sul_schedule(s->ctx, 0, &s->stop_timer, stop_tick, 100000);
}

static void sweep_tick(lws_sorted_usec_list_t *sul)
{
    server *s = lws_container_of(sul, server, sweep_timer);
    sockets_sweep(s);
    lws_sul_schedule(s->ctx, 0, &s->sweep_timer, sweep_tick, SOCKETS_SWEEP_MS * 1000);
}

static int32_t requests_in_flight(server *s)
{
    int32_t n = 0;
    for (int p = 0; p < IFL_N_POLICIES; p++)
        if (s->rl.b[p]) {
            ifl_batcher_stats st;
            ifl_batcher_get_stats(s->rl.b[p], &st);
            n += st.running + st.waiting;
        }
    return n;
}

/* A stop begins: no new connections or requests; those running may finish for --grace. */
static void begin_stop(server *s)
{
    s->rl.stopping = 1;
    s->stop_deadline_us = ifl_now_us() + (uint64_t)(s->o->grace_s * 1e6);
    if (!s->o->quiet) {
        printf("inflight serve: stopping: no new requests; %d in flight may finish within %.1f s\n",
               requests_in_flight(s), s->o->grace_s);
        fflush(stdout);
    }
    lws_sul_schedule(s->ctx, 0, &s->stop_timer, stop_tick, 100000);
}

static void stop_batchers(server *s)
{
    for (int p = 0; p < IFL_N_POLICIES; p++) {
        ifl_batcher_stop(s->rl.b[p]); /* what still runs or waits ends with done(cancelled) */
        s->rl.b[p] = NULL;
    }
    srv_drain_bridge(s); /* frees the requests of the last done events */
}

/* The grace period is over (or nothing runs): stop the batchers, send what is queued, and close
 * every socket with 1001. */
static void close_phase(server *s)
{
    s->closing_sockets = 1;
    if (s->loader_started) {
        pthread_join(s->loader, NULL);
        s->loader_started = 0;
    }
    int cancelled = requests_in_flight(s) > 0;
    stop_batchers(s);
    if (!s->o->quiet) {
        printf("inflight serve: %s; closing %d connection(s), %d HTTP answer(s) to finish\n",
               cancelled ? "grace period over: cancelled what still ran" : "all requests finished",
               s->n_conns, sockets_http_busy(s));
        fflush(stdout);
    }
    ws_close_all(s);
    s->stop_deadline_us = ifl_now_us() + 3500000;
}

/* ---- run ------------------------------------------------------------------------------------ */

/* libwebsockets' warnings and errors, with a line repeated within a second counted instead of
 * printed (out of descriptors, lws logs "accept: errno 24" for every try: ~70,000 lines in 40 s).
 * The count is printed with the next line that differs or comes later. */
static void lws_log_emit(int level, const char *line)
{
    (void)level;
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static char last[256];
    static double last_at;
    static unsigned long repeated;
    pthread_mutex_lock(&mu);
    double now = ifl_now_s();
    if (!strncmp(line, last, sizeof last - 1) && now - last_at < 1.0) {
        repeated++;
    } else {
        if (repeated)
            fprintf(stderr, "inflight: lws: (the line above %lu more times in %.1f s)\n", repeated,
                    now - last_at);
        fprintf(stderr, "inflight: lws: %s", line);
        snprintf(last, sizeof last, "%s", line);
        last_at = now;
        repeated = 0;
    }
    pthread_mutex_unlock(&mu);
}

/* Every connection is a descriptor: a soft limit below what --max-connections needs is raised,
 * up to the hard limit (only as far as needed: lws sizes its tables by it), and a
 * --max-connections the process still cannot hold is lowered to what it can, loudly (running
 * out of descriptors stalls every client, not only the newest). */
static void fit_fd_limit(ifl_server_opts *o)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
    /* room for the band past the limit too (sockets.h), where the hard limit allows */
    rlim_t want = (rlim_t)o->max_connections * (1 + SOCKETS_BAND_PER) + SOCKETS_FD_RESERVE;
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
        struct rlimit up = {.rlim_cur = rl.rlim_max == RLIM_INFINITY || want < rl.rlim_max
                                            ? want
                                            : rl.rlim_max,
                            .rlim_max = rl.rlim_max};
        if (!setrlimit(RLIMIT_NOFILE, &up))
            rl.rlim_cur = up.rlim_cur;
    }
    rlim_t need = (rlim_t)o->max_connections + SOCKETS_FD_RESERVE;
    if (rl.rlim_cur == RLIM_INFINITY || need <= rl.rlim_cur)
        return;
    struct rlimit up = {.rlim_cur =
                            rl.rlim_max == RLIM_INFINITY || need < rl.rlim_max ? need : rl.rlim_max,
                        .rlim_max = rl.rlim_max};
    if (!setrlimit(RLIMIT_NOFILE, &up))
        rl.rlim_cur = up.rlim_cur;
    if (need <= rl.rlim_cur)
        return;
    int32_t fit = rl.rlim_cur > SOCKETS_FD_RESERVE + 1 ? (int32_t)(rl.rlim_cur - SOCKETS_FD_RESERVE) : 1;
    fprintf(stderr,
            "inflight serve: --max-connections %d needs %d file descriptors and this process may "
            "open %llu (ulimit -n, hard limit %llu): serving at most %d connections\n",
            o->max_connections, o->max_connections + SOCKETS_FD_RESERVE, (unsigned long long)rl.rlim_cur,
            (unsigned long long)rl.rlim_max, fit);
    o->max_connections = fit;
}

/* The request log's writer and the history thread, when --db is given. */
static int open_log(server *s)
{
    const ifl_server_opts *o = s->o;
    if (!o->db_path)
        return 0;
    ifl_dblog_opts dopts = {.path = o->db_path,
                            .flush_ms = o->db_flush_ms,
                            .queue_cap = o->db_queue,
                            .retain_days = o->retain_days,
                            .retain_requests = o->retain_requests};
    int fatal = 0;
    ifl_err err;
    s->log.db = ifl_dblog_start(&dopts, &fatal, &err);
    if (!s->log.db) {
        fprintf(stderr, "inflight serve: --db %s: %s\n", o->db_path, err.msg);
        return -1;
    }
    if (strcmp(o->history, "off")) {
        s->history =
            ifl_history_start(o->db_path, !strcmp(o->history, "all"), http_on_history_done, s);
        if (!s->history) {
            fprintf(stderr, "inflight serve: cannot start the history thread\n");
            return -1;
        }
    }
    if (!o->quiet) {
        printf("inflight serve: request log %s (flush every %d ms; history: %s%s)\n", o->db_path,
               o->db_flush_ms, o->history,
               o->retain_days > 0 || o->retain_requests > 0 ? "; retention on" : "");
        fflush(stdout);
    }
    return 0;
}

/* The lws context on the listening socket: on our libuv loop (lws's event-lib plugin, as a
 * "foreign" loop, so the service loop below still runs one turn at a time and our own signal
 * handler stays) when use_uv, else on lws's poll(). NULL when lws refuses. */
static struct lws_context *make_context(server *s, int use_uv)
{
    const ifl_server_opts *o = s->o;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = o->port;
    info.iface = o->host;
    info.protocols = protocols;
    info.user = s;
    info.options = strchr(o->host, ':') ? 0 : LWS_SERVER_OPTION_DISABLE_IPV6;
    info.timeout_secs = 30;
    /* an HTTP request's line and headers: the wire guard answers 431 past WIRE_HEAD_MAX bytes,
     * and lws's buffer holds any head it lets through; a body is capped by --max-message */
    info.max_http_header_data = WIRE_LWS_HEADER_DATA;
    info.pcontext = &s->ctx_live; /* lws clears it once the context is wholly freed */
#ifdef INFLIGHT_HAVE_LIBUV
    void *loops[1] = {&s->uv_loop};
    if (use_uv) {
        if (uv_loop_init(&s->uv_loop))
            return NULL;
        info.options |= LWS_SERVER_OPTION_LIBUV;
        info.foreign_loops = loops;
    }
    struct lws_context *ctx = lws_create_context(&info);
    s->ctx_live = ctx;
    if (use_uv && !ctx) {
        uv_run(&s->uv_loop, UV_RUN_NOWAIT); /* what lws opened on it closes */
        uv_loop_close(&s->uv_loop);
    }
    s->uv = use_uv && ctx;
    return ctx;
#else
    (void)use_uv;
    return s->ctx_live = lws_create_context(&info);
#endif
}

static int listen_on(server *s)
{
    const ifl_server_opts *o = s->o;
    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
    int want_uv = !strcmp(o->event_loop, "uv");
#ifndef INFLIGHT_HAVE_LIBUV
    if (want_uv) {
        fprintf(stderr, "inflight serve: --event-loop uv: this build has no libuv (install "
                        "libuv1-dev and rebuild); serving with poll\n");
        want_uv = 0;
    }
#endif
    s->ctx = make_context(s, want_uv);
    if (!s->ctx && want_uv && (s->ctx = make_context(s, 0)))
        fprintf(stderr,
                "inflight serve: lws could not run on libuv (is Debian's libwebsockets-evlib-uv "
                "installed?): serving with poll, whose cost grows with every open socket\n");
    if (!s->ctx) {
        fprintf(stderr,
                "inflight serve: cannot listen on %s:%d (is the port in use, or the address not "
                "local?)\n",
                o->host, o->port);
        return -1;
    }
    bridge_attach(&s->bridge, s->ctx);
    sockets_start(s);  /* from now on every wsi lws makes is an accepted socket */
    wire_recv_bind(s); /* and what this thread reads of one goes through the wire guard */
    lws_sul_schedule(s->ctx, 0, &s->sweep_timer, sweep_tick, SOCKETS_SWEEP_MS * 1000);
    struct lws_vhost *vh = lws_get_vhost_by_name(s->ctx, "default");
    s->port = vh ? lws_get_vhost_listen_port(vh) : o->port;
    if (!o->quiet) {
        printf("inflight serve: listening on http://%s:%d (page /, WebSocket /ws, /healthz, "
               "/readyz, /metrics; event loop %s)\n",
               o->host, s->port, s->uv ? "libuv" : "poll");
        fflush(stdout);
    }
    return 0;
}

/* One turn of the event loop: until something happened (a socket, a timer, a wake-up). */
static int service_once(server *s)
{
#ifdef INFLIGHT_HAVE_LIBUV
    if (s->uv) {
        uv_run(&s->uv_loop, UV_RUN_ONCE);
        return 0;
    }
#endif
    return lws_service(s->ctx, 0);
}

/* After lws_context_destroy: on libuv, lws closes its handles in the loop's callbacks and frees
 * the context in steps, each finished by a further lws_context_destroy once the loop has run
 * (lws.h, "the context destruction is in three separate parts"); ctx_live says when it is gone. */
static void close_loop(server *s)
{
#ifdef INFLIGHT_HAVE_LIBUV
    if (!s->uv)
        return;
    for (int i = 0; i < 4; i++) {
        uv_run(&s->uv_loop, UV_RUN_DEFAULT);
        if (!s->ctx_live)
            break;
        lws_context_destroy(s->ctx_live);
    }
    uv_run(&s->uv_loop, UV_RUN_DEFAULT);
    if (s->ctx_live || uv_loop_close(&s->uv_loop))
        fprintf(stderr, "inflight serve: the libuv loop still had lws's handles open at exit\n");
    s->uv = 0;
#else
    (void)s;
#endif
}

/* Until the stop is complete; the exit status. */
static int service_loop(server *s)
{
    int rc = 1;
    for (;;) {
        if (service_once(s) < 0)
            break;
        if (atomic_load(&s->load_failed) && !s->rl.stopping) {
            fprintf(stderr, "inflight serve: %s\n", s->load_error);
            s->rl.stopping = 1;
            close_phase(s);
            rc = 1;
            break;
        }
        if (g_signals && !s->rl.stopping) {
            begin_stop(s);
            rc = 0;
        }
        if (s->rl.stopping && !s->closing_sockets &&
            (!requests_in_flight(s) || ifl_now_us() > s->stop_deadline_us))
            close_phase(s);
        if (s->closing_sockets &&
            ((!s->conns && !sockets_http_busy(s)) || ifl_now_us() > s->stop_deadline_us))
            break;
    }
    return rc;
}

/* Resolves --device (for the --weights format) and --isa before anything starts, so that a
 * missing GPU, weights the device cannot run or a missing instruction set fail at once. */
static int resolve_device(server *s)
{
    ifl_device want;
    ifl_err err;
    if (ifl_device_parse(s->o->device, &want)) {
        fprintf(stderr, "inflight serve: --device must be auto, cpu or cuda, not '%s'\n",
                s->o->device);
        return -1;
    }
    if (ifl_runtime_resolve(&s->rt, want, s->o->isa, &s->o->model_opts, &err)) {
        fprintf(stderr, "inflight serve: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static server *server_new(const ifl_server_opts *o)
{
    server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->o = o;
    s->t0_us = ifl_now_us();
    s->t0_unix = (long long)time(NULL);
    bridge_init(&s->bridge);
    metrics_init(&s->m);
    s->log = (reqlog){.lines = o->log_requests && !o->quiet,
                      .model = &s->rt.model,
                      .t0_us = s->t0_us,
                      .epoch_ms_at_t0 = ifl_db_now_ms()};
    s->rl = (req_layer){.rt = &s->rt,
                        .m = &s->m, .log = &s->log, .bridge = &s->bridge, .rng_state = s->t0_us};
    s->lim = (proto_limits){.max_tokens = 1,
                            .n_vocab = 1,
                            .def_max_tokens = o->default_max_tokens,
                            .def_temperature = o->default_temperature,
                            .def_top_p = o->default_top_p,
                            .def_truncate = !o->no_trim,
                            .def_top_k = o->default_top_k};
    return s;
}

/* The one teardown, for a failed start as for a stop: every thread that can push into the bridge
 * or wake the context is stopped before the context goes. */
static void server_free(server *s)
{
    if (s->loader_started)
        pthread_join(s->loader, NULL);
    stop_batchers(s);
    ifl_history_stop(s->history); /* answers what is queued (503): drained below */
    s->history = NULL;
    srv_drain_bridge(s);
    g_srv = NULL;
    if (s->ctx) {
        lws_sul_cancel(&s->stop_timer);
        lws_sul_cancel(&s->sweep_timer);
        bridge_detach(&s->bridge);
        lws_context_destroy(s->ctx); /* closes the sockets still open (CLOSED callbacks) */
        close_loop(s);
        sockets_stop(s);
        s->ctx = NULL;
    }
    srv_drain_bridge(s);
    if (s->log.db)
        ifl_dblog_stop(s->log.db, 5000); /* writes what is queued: the session closes too */
    ifl_runtime_close(&s->rt);
    bridge_destroy(&s->bridge);
    free(s);
}

/* SIGINT and SIGTERM go to the service thread only: they are blocked while the other threads are
 * made (they inherit the mask), so the handler never runs on a thread that races the teardown. */
static void block_stop_signals(int block)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

int ifl_server_run(const ifl_server_opts *opts)
{
    int rc = 1;
    ifl_server_opts fitted = *opts, *o = &fitted; /* outlives the server */
    fit_fd_limit(o);
    server *s = server_new(o);
    if (!s) {
        fprintf(stderr, "inflight serve: out of memory\n");
        return 1;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    block_stop_signals(1);
    if (resolve_device(s) || open_log(s) || listen_on(s))
        goto out;
    g_srv = s;
    if (pthread_create(&s->loader, NULL, loader_main, s)) {
        fprintf(stderr, "inflight serve: cannot start the loader thread\n");
        goto out;
    }
    s->loader_started = 1;
    block_stop_signals(0);
    rc = service_loop(s);
out:
    block_stop_signals(0);
    server_free(s);
    if (rc == 0 && !o->quiet)
        printf("inflight serve: stopped\n");
    return rc;
}
