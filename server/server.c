/* server.c: `inflight serve` (server.h): libwebsockets service loop, HTTP routes, the /ws
 * protocol, and the hand-off between the batcher threads and the service thread.
 *
 * State and its guards:
 *   {evq_lock}  the event queue: batcher events and step records, in the order they happened.
 *               Pushed by the batcher threads (and by the service thread itself, since `queued`
 *               is emitted inside ifl_batcher_submit), drained by the service thread.
 *   service     connections, their outboxes and request tables, metrics, every JSON byte.
 *   thread
 *   atomics     ready / load_failed (set once by the loader thread).
 * A request (srv_req) is created by the service thread at submission and freed by it when its
 * done event is drained; if its connection closes first, req->conn becomes NULL and its events are
 * dropped on arrival. The done event's queue item lives inside the srv_req, so the one event that
 * must never be lost needs no allocation on the batcher thread. */
#include "server.h"

#include <errno.h>
#include <libwebsockets.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend.h"
#include "batcher.h"
#include "db.h"
#include "dblog.h"
#include "history.h"
#include "metrics.h"
#include "protocol.h"
#include "sha256.h"
#include "strbuf.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "util.h"

#define HTTP_MAX_FILE (8u << 20)
#define HTTP_CHUNK 16384
#define CLOSE_TRY_AGAIN_LATER 1013
#define SOCKET_SNDBUF 65536

void ifl_server_opts_default(ifl_server_opts *o)
{
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->web_dir = NULL;
    o->device = "auto";
    o->model_opts.cpu_layout = 1;
    o->max_batch = 64;
    o->max_queue = 256;
    o->step_tokens = 256;
    o->max_connections = 256;
    o->max_inflight = 64;
    o->max_message = 65536;
    o->max_outbox = 1 << 20;
    o->default_max_tokens = 64;
    o->default_temperature = 0.8;
    o->default_top_p = 0.95;
    o->default_top_k = 40;
    o->log_requests = 1;
    o->db_flush_ms = 200;
    o->db_queue = 100000;
    o->history = "own";
    o->grace_s = 10;
}

/* ---- types ---------------------------------------------------------------------------------- */

typedef struct srv_conn srv_conn;

/* One entry of the event queue. */
typedef struct evq_item {
    struct evq_item *next;
    int is_step;
    history_job *job;     /* a history answer (is_step 0, job set) */
    int embedded;         /* lives inside its srv_req or http_job: not freed on its own */
    uint64_t stamp;       /* monotonic us when the batcher emitted it */
    ifl_event ev;         /* text / message point into `data` */
    ifl_step_record step; /* request_ids / is_prefill point into `data` */
    char *data; /* copies, in the same allocation right after the item (8-byte aligned: the
                   item holds 64-bit fields, so its size is a multiple of 8) */
} evq_item;

/* A history query and the queue item its answer travels in: answering never allocates, so an
 * answer cannot be lost on the way back to its connection. `job` first: freeing the job frees
 * both. */
typedef struct {
    history_job job;
    evq_item answer;
} http_job;

typedef struct srv_req {
    srv_conn *conn;       /* NULL once the connection closed */
    struct srv_req *next; /* in conn->reqs */
    char id[PROTO_MAX_ID + 1];
    ifl_policy policy;
    uint64_t rid; /* the batcher's request id */
    uint64_t seed;
    uint64_t session;
    int32_t prompt_tokens, max_tokens;
    uint64_t t_arrival, t_first, t_last; /* monotonic us */
    int32_t n_tokens;
    uint64_t t_admitted;
    /* for the request log (service thread) */
    char *prompt; /* copy */
    size_t prompt_len;
    char params[512];  /* JSON */
    strbuf completion; /* the token texts */
    uint32_t *offsets; /* (n_tokens) us after t_arrival */
    int32_t cap_offsets;
    evq_item done;              /* the done event's queue item */
    char done_msg[IFL_ERR_MAX]; /* its message (finish error) */
} srv_req;

typedef struct srv_frame {
    struct srv_frame *next;
    char *buf; /* LWS_PRE + len */
    size_t len;
} srv_frame;

/* Per-connection state (lws per-session data, zeroed by lws; also used by plain HTTP). */
struct srv_conn {
    struct lws *wsi;
    srv_conn *next; /* in server.conns */
    int is_ws;
    uint64_t session;
    char session_hex[17];
    char peer[64];
    srv_req *reqs;
    int32_t n_reqs;
    srv_frame *out_head, *out_tail;
    size_t out_bytes;
    int subscribed;
    uint64_t steps_dropped;
    char *rx;
    size_t rx_len, rx_cap;
    int rx_binary;
    int closing;   /* close once the outbox is written */
    int close_now; /* close at the next writeable, dropping the outbox */
    int close_code;
    char close_reason[120];
    /* HTTP response being written */
    char *http_body;
    size_t http_len, http_sent;
    /* an answer computed elsewhere (history), written at the next HTTP_WRITEABLE */
    history_job *job; /* waiting for it; job->tag is this connection */
    history_job *answer;
    /* what the upgrade request said (copied in FILTER_PROTOCOL_CONNECTION) */
    char user_hash[65];
    char user_agent[160];
    char close_why[160]; /* for the log: why it closed */
};

typedef struct {
    const ifl_server_opts *o;
    struct lws_context *ctx;
    int port;
    uint64_t t0_us;
    /* written by the loader thread before `ready` is set */
    ifl_model model;
    ifl_tokenizer *tok;
    ifl_threadpool *pool;
    ifl_backend *be[2];
    ifl_batcher *b[2];
    char device_desc[256];
    ifl_device device;    /* resolved before the loader starts */
    char device_why[320]; /* why that device (--device auto says what it found) */
    atomic_int ready, load_failed, load_done;
    char load_error[IFL_ERR_MAX];
    pthread_t loader;
    int loader_started;
    /* {evq_lock} */
    pthread_mutex_t evq_lock;
    evq_item *evq_head, *evq_tail;
    int evq_wake_pending;
    /* service thread */
    srv_conn *conns;
    int32_t n_conns;
    metrics m;
    proto_limits lim;
    int stopping;
    uint64_t stop_deadline_us; /* grace period end */
    int closing_sockets;       /* stop: batchers stopped, sockets told 1001 */
    uint64_t rng_state;
    /* request log */
    ifl_dblog *dblog;
    ifl_history *history;
    double epoch_ms_at_t0; /* wall clock (Unix ms) when t0_us was read */
    uint64_t last_step_logged[2];
    lws_sorted_usec_list_t stop_timer;
} server;

static server *g_srv; /* for the signal handler */
static volatile sig_atomic_t g_signals;

/* ---- small helpers -------------------------------------------------------------------------- */

static uint64_t random_u64(server *s)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    /* splitmix64 over a clock-seeded state */
    uint64_t z = (s->rng_state += 0x9E3779B97F4A7C15ull) ^ ifl_now_us();
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double ms_between(uint64_t a, uint64_t b)
{
    return b > a ? (double)(b - a) / 1e3 : 0;
}

/* A monotonic stamp as Unix milliseconds (0 stays 0: never reached). */
static double unix_ms(const server *s, uint64_t mono_us)
{
    if (!mono_us)
        return 0;
    return s->epoch_ms_at_t0 + ((double)mono_us - (double)s->t0_us) / 1e3;
}

/* A user key is 16..64 of A-Z a-z 0-9 _ -; stored only as its SHA-256. */
static int user_key_hash(const char *key, char hex[65])
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

static void req_free(srv_req *r)
{
    free(r->prompt);
    sb_free(&r->completion);
    free(r->offsets);
    free(r);
}

/* The request log's record of a finished (ev) or refused (ev NULL, code set) request. */
static void log_request_db(server *s, const char *session_hex, const srv_req *r,
                           const ifl_event *ev, const char *code, double queue_ms, double ttft_ms,
                           double total_ms, double tps)
{
    if (!s->dblog)
        return;
    char session[17];
    snprintf(session, sizeof session, "%s", session_hex);
    ifl_dblog_request q = {
        .session = session,
        .client_id = r->id,
        .policy = ifl_policy_name(r->policy),
        .prompt = r->prompt ? r->prompt : "",
        .prompt_len = r->prompt ? r->prompt_len : 0,
        .params_json = r->params,
        .prompt_tokens = r->prompt_tokens,
        .completion_tokens = ev ? ev->completion_tokens : 0,
        .completion = sb_text(&r->completion) ? sb_text(&r->completion) : "",
        .completion_len = r->completion.len,
        .finish_reason = ev ? ifl_finish_name(ev->finish) : NULL,
        .error_code = code,
        .queued_at = unix_ms(s, r->t_arrival),
        .admitted_at = ev ? unix_ms(s, ev->t_admitted) : 0,
        .first_token_at = ev ? unix_ms(s, ev->t_first_token) : 0,
        .finished_at = ev ? unix_ms(s, ev->t_finished ? ev->t_finished : r->t_last) : 0,
        .queue_ms = ev ? queue_ms : -1,
        .ttft_ms = ev && ev->t_first_token ? ttft_ms : -1,
        .total_ms = ev ? total_ms : -1,
        .tokens_per_s = ev ? tps : -1,
        .offsets_us = r->offsets,
        .n_offsets = r->offsets ? r->n_tokens : 0,
    };
    ifl_dblog_request_done(s->dblog, &q);
}

/* ---- the event queue (any thread -> service thread) ----------------------------------------- */

static void evq_push(server *s, evq_item *it)
{
    it->next = NULL;
    pthread_mutex_lock(&s->evq_lock);
    if (s->evq_tail)
        s->evq_tail->next = it;
    else
        s->evq_head = it;
    s->evq_tail = it;
    int wake = !s->evq_wake_pending;
    s->evq_wake_pending = 1;
    pthread_mutex_unlock(&s->evq_lock);
    if (wake && s->ctx)
        lws_cancel_service(s->ctx);
}

/* Batcher thread (or the service thread inside submit). Copies what it needs: nothing in `ev`
 * outlives the call. */
static void on_batcher_event(void *ud, const ifl_event *ev)
{
    server *s = ud;
    srv_req *r = ev->user;
    evq_item *it;
    if (ev->type == IFL_EV_DONE) {
        it = &r->done;
        memset(it, 0, sizeof *it);
        it->embedded = 1;
        it->ev = *ev;
        it->ev.text = NULL;
        it->ev.message = NULL;
        if (ev->message) {
            snprintf(r->done_msg, sizeof r->done_msg, "%s", ev->message);
            it->ev.message = r->done_msg;
        }
    } else {
        size_t tl = ev->type == IFL_EV_TOKEN ? ev->text_len : 0;
        it = malloc(sizeof *it + tl + 1);
        if (!it)
            return; /* out of memory: the frame is lost (the done event is not) */
        memset(it, 0, sizeof *it);
        it->data = (char *)(it + 1);
        it->ev = *ev;
        it->ev.message = NULL;
        if (tl)
            memcpy(it->data, ev->text, tl);
        it->data[tl] = 0;
        it->ev.text = it->data;
        it->ev.text_len = tl;
    }
    it->stamp = ifl_now_us();
    evq_push(s, it);
}

static void on_batcher_step(void *ud, const ifl_step_record *rec)
{
    server *s = ud;
    size_t n = rec->n_seqs > 0 ? (size_t)rec->n_seqs : 0;
    evq_item *it = malloc(sizeof *it + n * (sizeof(uint64_t) + 1));
    if (!it)
        return;
    memset(it, 0, sizeof *it);
    it->data = (char *)(it + 1);
    it->is_step = 1;
    it->step = *rec;
    uint64_t *ids = (uint64_t *)(void *)it->data;
    uint8_t *pre = (uint8_t *)(ids + n);
    if (n) {
        memcpy(ids, rec->request_ids, n * sizeof *ids);
        memcpy(pre, rec->is_prefill, n);
    }
    it->step.request_ids = ids;
    it->step.is_prefill = pre;
    it->stamp = ifl_now_us();
    evq_push(s, it);
}

/* ---- outboxes (service thread) -------------------------------------------------------------- */

static void conn_free_outbox(srv_conn *c)
{
    for (srv_frame *f = c->out_head, *n; f; f = n) {
        n = f->next;
        free(f->buf);
        free(f);
    }
    c->out_head = c->out_tail = NULL;
    c->out_bytes = 0;
}

static void cancel_conn_requests(server *s, srv_conn *c)
{
    if (!c->n_reqs)
        return;
    for (int p = 0; p < 2; p++)
        if (s->b[p])
            ifl_batcher_cancel_session(s->b[p], c->session);
}

/* Marks a connection to be closed with `code` at its next writeable (outbox dropped). */
static void conn_close_now(server *s, srv_conn *c, int code, const char *reason)
{
    if (c->close_now)
        return;
    cancel_conn_requests(s, c);
    conn_free_outbox(c);
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
static void conn_send(server *s, srv_conn *c, strbuf *sb)
{
    if (!sb_ok(sb) || c->close_now) {
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
            fprintf(stderr, "inflight: closing session %s (%s): %s\n", c->session_hex, c->peer,
                    why);
        conn_close_now(s, c, LWS_CLOSE_STATUS_POLICY_VIOLATION, why);
        return;
    }
    srv_frame *f = malloc(sizeof *f);
    if (!f) {
        sb_free(sb);
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

static void send_error(server *s, srv_conn *c, const char *id, const char *code,
                       const char *message)
{
    metrics_count_error(&s->m, code);
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    sb_puts(&sb, "{\"type\":\"error\",\"id\":");
    if (id)
        sb_json_str(&sb, id, strlen(id));
    else
        sb_puts(&sb, "null");
    sb_puts(&sb, ",\"code\":");
    sb_json_str(&sb, code, strlen(code));
    sb_puts(&sb, ",\"message\":");
    sb_json_str(&sb, message, strlen(message));
    sb_puts(&sb, "}");
    conn_send(s, c, &sb);
}

/* ---- events -> frames (service thread) ------------------------------------------------------ */

static void conn_remove_req(srv_conn *c, srv_req *r)
{
    for (srv_req **pp = &c->reqs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            c->n_reqs--;
            return;
        }
}

static void log_request(server *s, const srv_req *r, const ifl_event *ev, double queue_ms,
                        double ttft_ms, double total_ms, double tps)
{
    if (!s->o->log_requests || s->o->quiet)
        return;
    fprintf(stderr,
            "inflight: request %016llx/%s policy=%s prompt_tokens=%d tokens=%d finish=%s "
            "queue_ms=%.1f ttft_ms=%.1f total_ms=%.1f tokens_per_s=%.1f%s%s%s\n",
            (unsigned long long)r->session, r->id, ifl_policy_name(r->policy), ev->prompt_tokens,
            ev->completion_tokens, ifl_finish_name(ev->finish), queue_ms, ttft_ms, total_ms, tps,
            r->conn ? "" : " (connection closed)", ev->message ? " error=" : "",
            ev->message ? ev->message : "");
}

static void handle_event(server *s, evq_item *it)
{
    const ifl_event *ev = &it->ev;
    srv_req *r = ev->user;
    srv_conn *c = r->conn;
    int pol = (int)r->policy;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    switch (ev->type) {
    case IFL_EV_QUEUED:
        if (!c)
            break;
        sb_puts(&sb, "{\"type\":\"queued\",\"id\":");
        sb_json_str(&sb, r->id, strlen(r->id));
        sb_printf(&sb, ",\"model\":\"%s\",\"rid\":%llu,\"position\":%d}",
                  ifl_policy_name(r->policy), (unsigned long long)ev->request_id, ev->position);
        conn_send(s, c, &sb);
        break;
    case IFL_EV_STARTED:
        r->t_admitted = it->stamp;
        metrics_hist_observe(&s->m.queue[pol], ms_between(r->t_arrival, it->stamp) / 1e3);
        s->m.prompt_tokens[pol] += (uint64_t)r->prompt_tokens;
        if (!c)
            break;
        sb_puts(&sb, "{\"type\":\"started\",\"id\":");
        sb_json_str(&sb, r->id, strlen(r->id));
        sb_printf(&sb, ",\"model\":\"%s\",\"rid\":%llu,\"prompt_tokens\":%d,\"seed\":%llu}",
                  ifl_policy_name(r->policy), (unsigned long long)ev->request_id, r->prompt_tokens,
                  (unsigned long long)r->seed);
        conn_send(s, c, &sb);
        break;
    case IFL_EV_TOKEN:
        if (r->n_tokens == 0) {
            r->t_first = it->stamp;
            metrics_hist_observe(&s->m.ttft[pol], ms_between(r->t_arrival, it->stamp) / 1e3);
        } else {
            metrics_hist_observe(&s->m.itl[pol], ms_between(r->t_last, it->stamp) / 1e3);
        }
        r->t_last = it->stamp;
        if (s->dblog) {
            if (r->n_tokens == r->cap_offsets) {
                int32_t cap = r->cap_offsets ? 2 * r->cap_offsets : 64;
                uint32_t *o = realloc(r->offsets, (size_t)cap * sizeof *o);
                if (o) {
                    r->offsets = o;
                    r->cap_offsets = cap;
                }
            }
            if (r->n_tokens < r->cap_offsets) {
                uint64_t d = it->stamp > r->t_arrival ? it->stamp - r->t_arrival : 0;
                r->offsets[r->n_tokens] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
            } else {
                free(r->offsets); /* out of memory: log no offsets rather than wrong ones */
                r->offsets = NULL;
                r->cap_offsets = -1;
            }
            sb_append(&r->completion, ev->text, ev->text_len);
        }
        r->n_tokens++;
        s->m.tokens[pol]++;
        if (!c)
            break;
        sb_puts(&sb, "{\"type\":\"token\",\"id\":");
        sb_json_str(&sb, r->id, strlen(r->id));
        sb_printf(&sb, ",\"index\":%d,\"token\":%d,\"text\":", ev->index, ev->token);
        sb_json_str(&sb, ev->text, ev->text_len);
        sb_puts(&sb, "}");
        conn_send(s, c, &sb);
        break;
    case IFL_EV_DONE: {
        uint64_t t_end = ev->t_finished ? ev->t_finished : it->stamp;
        double total_ms = ms_between(r->t_arrival, t_end);
        double queue_ms = ms_between(r->t_arrival, ev->t_admitted ? ev->t_admitted : t_end);
        double ttft_ms = ev->t_first_token ? ms_between(r->t_arrival, ev->t_first_token) : 0;
        double tps = r->n_tokens >= 2 && r->t_last > r->t_first
                         ? (double)(r->n_tokens - 1) / ((double)(r->t_last - r->t_first) / 1e6)
                         : 0;
        s->m.requests[pol][(int)ev->finish < METRICS_N_FINISH ? (int)ev->finish : 0]++;
        metrics_hist_observe(&s->m.e2e[pol], total_ms / 1e3);
        log_request(s, r, ev, queue_ms, ttft_ms, total_ms, tps);
        {
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)r->session);
            log_request_db(s, hex, r, ev, ev->finish == IFL_FINISH_ERROR ? "engine_error" : NULL,
                           queue_ms, ttft_ms, total_ms, tps);
        }
        if (c) {
            sb_puts(&sb, "{\"type\":\"done\",\"id\":");
            sb_json_str(&sb, r->id, strlen(r->id));
            sb_printf(&sb,
                      ",\"finish_reason\":\"%s\",\"usage\":{\"prompt_tokens\":%d,"
                      "\"completion_tokens\":%d},\"timing\":{\"queue_ms\":",
                      ifl_finish_name(ev->finish), ev->prompt_tokens, ev->completion_tokens);
            sb_json_num(&sb, queue_ms, 3);
            sb_puts(&sb, ",\"ttft_ms\":");
            if (ev->t_first_token)
                sb_json_num(&sb, ttft_ms, 3);
            else
                sb_puts(&sb, "null");
            sb_puts(&sb, ",\"total_ms\":");
            sb_json_num(&sb, total_ms, 3);
            sb_puts(&sb, ",\"tokens_per_s\":");
            sb_json_num(&sb, tps, 2);
            sb_puts(&sb, "}");
            if (ev->message) {
                sb_puts(&sb, ",\"message\":");
                sb_json_str(&sb, ev->message, strlen(ev->message));
            }
            sb_puts(&sb, "}");
            conn_send(s, c, &sb);
            conn_remove_req(c, r);
        }
        req_free(r);
        break;
    }
    }
    sb_free(&sb);
}

static void handle_step(server *s, const evq_item *it)
{
    const ifl_step_record *st = &it->step;
    int pol = (int)st->policy;
    s->m.steps[pol]++;
    metrics_hist_observe(&s->m.batch[pol], st->n_seqs);
    metrics_hist_observe(&s->m.step_s[pol], st->ms / 1e3);
    /* the log keeps a sample: at most one step per policy every 100 ms */
    if (s->dblog && st->t_start >= s->last_step_logged[pol] + 100000) {
        s->last_step_logged[pol] = st->t_start;
        ifl_dblog_step rec = {.at_ms = unix_ms(s, st->t_start),
                              .policy = ifl_policy_name(st->policy),
                              .step = st->step,
                              .batch_size = st->n_seqs,
                              .prefill_tokens = st->prefill_tokens,
                              .decode_tokens = st->decode_tokens,
                              .running = st->running,
                              .waiting = st->waiting,
                              .kv_used = st->kv_used,
                              .step_ms = st->ms};
        ifl_dblog_step_sample(s->dblog, &rec);
    }
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    for (srv_conn *c = s->conns; c; c = c->next) {
        if (!c->subscribed || c->close_now)
            continue;
        if (c->out_bytes > (size_t)s->o->max_outbox / 2) {
            c->steps_dropped++;
            s->m.step_frames_dropped++;
            continue;
        }
        if (!sb.len) {
            sb_printf(&sb,
                      "{\"type\":\"step\",\"model\":\"%s\",\"step\":%llu,\"t_ms\":%.3f,"
                      "\"ms\":%.3f,\"prefill_tokens\":%d,\"decode_tokens\":%d,\"running\":%d,"
                      "\"waiting\":%d,\"kv_used\":%d,\"kv_total\":%d,\"seqs\":[",
                      ifl_policy_name(st->policy), (unsigned long long)st->step,
                      ms_between(s->t0_us, st->t_start), st->ms, st->prefill_tokens,
                      st->decode_tokens, st->running, st->waiting, st->kv_used, st->kv_total);
            for (int32_t i = 0; i < st->n_seqs; i++)
                sb_printf(&sb, "%s[%llu,%d]", i ? "," : "", (unsigned long long)st->request_ids[i],
                          st->is_prefill[i] ? 1 : 0);
            sb_puts(&sb, "],\"dropped\":");
        }
        strbuf one;
        sb_init(&one, LWS_PRE);
        sb_append(&one, sb_text(&sb), sb.len);
        sb_printf(&one, "%llu}", (unsigned long long)c->steps_dropped);
        c->steps_dropped = 0;
        conn_send(s, c, &one);
    }
    sb_free(&sb);
}

/* A history answer is back: hand it to its connection (written at its next HTTP_WRITEABLE), or
 * drop it if the connection went away. */
static void handle_history_answer(server *s, history_job *j)
{
    (void)s;
    srv_conn *c = j->tag;
    if (!c || c->job != j || !c->wsi) {
        free(j->body);
        free(j);
        return;
    }
    c->job = NULL;
    c->answer = j;
    lws_callback_on_writable(c->wsi);
}

/* History thread: the answer goes through the event queue like everything else. */
static void on_history_done(void *ud, history_job *job)
{
    server *s = ud;
    http_job *hj = (http_job *)job;
    memset(&hj->answer, 0, sizeof hj->answer);
    hj->answer.job = job;
    hj->answer.embedded = 1;
    evq_push(s, &hj->answer);
}

static void drain_events(server *s)
{
    pthread_mutex_lock(&s->evq_lock);
    evq_item *it = s->evq_head;
    s->evq_head = s->evq_tail = NULL;
    s->evq_wake_pending = 0;
    pthread_mutex_unlock(&s->evq_lock);
    while (it) {
        evq_item *next = it->next;
        int embedded = it->embedded;
        if (it->job)
            handle_history_answer(s, it->job);
        else if (it->is_step)
            handle_step(s, it);
        else
            handle_event(s, it); /* may free the srv_req holding an embedded item */
        if (!embedded)
            free(it);
        it = next;
    }
}

/* ---- client messages (service thread) ------------------------------------------------------- */

static srv_req *conn_find_req(srv_conn *c, const char *id)
{
    for (srv_req *r = c->reqs; r; r = r->next)
        if (!strcmp(r->id, id))
            return r;
    return NULL;
}

/* The parameters of a request as the log keeps them (JSON). */
static void params_json(const proto_msg *m, uint64_t seed, char *out, size_t cap)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_printf(&sb,
              "{\"max_tokens\":%d,\"temperature\":%.9g,\"top_k\":%d,\"top_p\":%.9g,"
              "\"seed\":%llu,\"stop\":[",
              m->max_tokens, m->temperature, m->top_k, m->top_p, (unsigned long long)seed);
    for (int i = 0; i < m->n_stop; i++) {
        if (i)
            sb_puts(&sb, ",");
        sb_json_str(&sb, m->stop[i], strlen(m->stop[i]));
    }
    sb_printf(&sb, "],\"ignore_eos\":%s}", m->ignore_eos ? "true" : "false");
    snprintf(out, cap, "%s", sb_ok(&sb) && sb.len < cap ? sb_text(&sb) : "{}");
    sb_free(&sb);
}

/* A request refused after it parsed: the error frame, and a row in the log with its code. */
static void refuse(server *s, srv_conn *c, srv_req *r, const char *code, const char *msg)
{
    send_error(s, c, r->id, code, msg);
    log_request_db(s, c->session_hex, r, NULL, code, -1, -1, -1, -1);
    req_free(r);
}

static void handle_generate(server *s, srv_conn *c, proto_msg *m, uint64_t t_arrival)
{
    char msg[IFL_ERR_MAX + 64];
    srv_req *r = calloc(1, sizeof *r);
    if (!r) {
        send_error(s, c, m->id, "out_of_memory", "no memory for the request");
        return;
    }
    memcpy(r->id, m->id, sizeof r->id);
    r->policy = m->policy;
    r->seed = m->has_seed ? m->seed : random_u64(s) & ((1ull << 53) - 1);
    r->session = c->session;
    r->prompt_tokens = -1;
    r->max_tokens = m->max_tokens;
    r->t_arrival = t_arrival;
    sb_init(&r->completion, 0);
    params_json(m, r->seed, r->params, sizeof r->params);
    if (s->dblog) { /* the prompt is only needed for the log */
        r->prompt = m->prompt;
        r->prompt_len = m->prompt_len;
        m->prompt = NULL;
    }
    if (s->stopping) {
        refuse(s, c, r, "shutting_down", "the server is shutting down");
        return;
    }
    if (conn_find_req(c, m->id)) {
        snprintf(msg, sizeof msg,
                 "a request with id \"%s\" is already in flight on this connection", m->id);
        refuse(s, c, r, "duplicate_id", msg);
        return;
    }
    if (c->n_reqs >= s->o->max_inflight) {
        snprintf(msg, sizeof msg, "this connection already has %d requests in flight (limit %d)",
                 c->n_reqs, s->o->max_inflight);
        refuse(s, c, r, "too_many_requests", msg);
        return;
    }
    ifl_tokens ids = {0};
    ifl_err err;
    const char *text = r->prompt ? r->prompt : m->prompt;
    size_t text_len = r->prompt ? r->prompt_len : m->prompt_len;
    if (ifl_tokenizer_encode(s->tok, text, text_len, 0, &ids, &err)) {
        snprintf(msg, sizeof msg, "cannot tokenize the prompt: %s", err.msg);
        refuse(s, c, r, "invalid_request", msg);
        return;
    }
    r->prompt_tokens = (int32_t)ids.n;
    int32_t n_ctx = s->model.cfg.n_ctx;
    if ((int64_t)ids.n + m->max_tokens > n_ctx) {
        snprintf(msg, sizeof msg,
                 "the prompt is %zu tokens; with max_tokens %d that is %lld, over the model's "
                 "context of %d",
                 ids.n, m->max_tokens, (long long)ids.n + m->max_tokens, n_ctx);
        ifl_tokens_free(&ids);
        refuse(s, c, r, "prompt_too_long", msg);
        return;
    }
    ifl_request_params rp = {.session = c->session,
                             .prompt = ids.ids,
                             .n_prompt = (int32_t)ids.n,
                             .max_tokens = m->max_tokens,
                             .sampling = {.temperature = (float)m->temperature,
                                          .top_k = m->top_k,
                                          .top_p = (float)m->top_p},
                             .seed = r->seed,
                             .ignore_eos = m->ignore_eos,
                             .n_stop = m->n_stop,
                             .user = r};
    for (int i = 0; i < m->n_stop; i++)
        rp.stop[i] = m->stop[i];
    /* listed before submitting: the queued event is already in the event queue when submit
     * returns, and a cancel may follow in the same read */
    r->conn = c;
    r->next = c->reqs;
    c->reqs = r;
    c->n_reqs++;
    uint64_t rid = 0;
    ifl_submit_status st = ifl_batcher_submit(s->b[m->policy], &rp, &rid, &err);
    ifl_tokens_free(&ids);
    if (st != IFL_SUBMIT_OK) {
        conn_remove_req(c, r);
        r->conn = NULL;
        refuse(s, c, r, ifl_submit_code(st), err.msg);
        return;
    }
    r->rid = rid;
}

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
    case PROTO_GENERATE: handle_generate(s, c, &m, t_arrival); break;
    case PROTO_CANCEL: {
        srv_req *r = conn_find_req(c, m.id);
        if (!r) {
            char msg[160];
            snprintf(msg, sizeof msg, "no request with id \"%s\" is in flight on this connection",
                     m.id);
            send_error(s, c, m.id, "unknown_id", msg);
            break;
        }
        ifl_batcher_cancel(s->b[r->policy], r->rid);
        break;
    }
    case PROTO_SUBSCRIBE:
    case PROTO_UNSUBSCRIBE:
        c->subscribed = m.kind == PROTO_SUBSCRIBE;
        sb_printf(&sb, "{\"type\":\"%s\",\"topic\":\"steps\"}",
                  c->subscribed ? "subscribed" : "unsubscribed");
        conn_send(s, c, &sb);
        break;
    case PROTO_PING: {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sb_puts(&sb, "{\"type\":\"pong\"");
        if (m.has_id) {
            sb_puts(&sb, ",\"id\":");
            sb_json_str(&sb, m.id, strlen(m.id));
        }
        sb_printf(&sb, ",\"time_ms\":%lld}",
                  (long long)ts.tv_sec * 1000 + (long long)(ts.tv_nsec / 1000000));
        conn_send(s, c, &sb);
        break;
    }
    }
    sb_free(&sb);
    proto_msg_free(&m);
}

static void send_hello(server *s, srv_conn *c)
{
    const ifl_config *cfg = &s->model.cfg;
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    sb_puts(&sb, "{\"type\":\"hello\",\"session\":");
    sb_json_str(&sb, c->session_hex, strlen(c->session_hex));
    sb_puts(&sb, ",\"server\":\"inflight " INFLIGHT_VERSION "\",\"model\":{\"path\":");
    sb_json_str(&sb, s->o->model_dir, strlen(s->o->model_dir));
    sb_printf(&sb,
              ",\"n_layer\":%d,\"n_head\":%d,\"n_embd\":%d,\"n_ctx\":%d,\"vocab_size\":%d,"
              "\"weights\":\"%s\",\"device\":",
              cfg->n_layer, cfg->n_head, cfg->n_embd, cfg->n_ctx, cfg->n_vocab,
              ifl_model_dtype_name(&s->model));
    sb_json_str(&sb, s->device_desc, strlen(s->device_desc));
    sb_printf(&sb,
              "},\"policies\":[\"iterative\",\"static\"],\"limits\":{\"max_context\":%d,"
              "\"max_tokens\":%d,\"max_message_bytes\":%d,\"max_requests_in_flight\":%d,"
              "\"max_stop\":%d,\"max_stop_bytes\":%d,\"max_batch\":%d,\"max_queue\":%d,"
              "\"max_outbox_bytes\":%d},",
              cfg->n_ctx, s->lim.max_tokens, s->o->max_message, s->o->max_inflight, IFL_MAX_STOPS,
              IFL_MAX_STOP_BYTES, s->o->max_batch, s->o->max_queue, s->o->max_outbox);
    sb_printf(&sb,
              "\"defaults\":{\"model\":\"iterative\",\"max_tokens\":%d,\"temperature\":%g,"
              "\"top_k\":%d,\"top_p\":%g},",
              s->lim.def_max_tokens, s->lim.def_temperature, s->lim.def_top_k, s->lim.def_top_p);
    sb_printf(&sb, "\"user_key\":%s,\"history\":\"%s\"}", c->user_hash[0] ? "true" : "false",
              s->history ? s->o->history : "off");
    conn_send(s, c, &sb);
}

/* ---- HTTP (service thread) ------------------------------------------------------------------ */

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

static int http_respond(srv_conn *c, struct lws *wsi, int status, const char *ctype, char *body,
                        size_t len, int head_only, const char *extra_name, const char *extra_value)
{
    uint8_t hbuf[LWS_PRE + 2048], *start = hbuf + LWS_PRE, *p = start, *end = hbuf + sizeof hbuf;
    if (lws_add_http_common_headers(wsi, (unsigned)status, ctype, len, &p, end))
        goto fail;
    static const char *const hdrs[][2] = {
        {"x-content-type-options:", "nosniff"},
        {"referrer-policy:", "no-referrer"},
        {"cache-control:", "no-cache"},
        {"content-security-policy:",
         "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; "
         "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"},
    };
    for (size_t i = 0; i < sizeof hdrs / sizeof hdrs[0]; i++)
        if (lws_add_http_header_by_name(wsi, (const unsigned char *)hdrs[i][0],
                                        (const unsigned char *)hdrs[i][1], (int)strlen(hdrs[i][1]),
                                        &p, end))
            goto fail;
    if (extra_name && lws_add_http_header_by_name(wsi, (const unsigned char *)extra_name,
                                                  (const unsigned char *)extra_value,
                                                  (int)strlen(extra_value), &p, end))
        goto fail;
    if (lws_finalize_write_http_header(wsi, start, &p, end))
        goto fail;
    if (head_only || !len) {
        free(body);
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
    live->ready = atomic_load(&s->ready) && !s->stopping;
    if (s->dblog) {
        live->db_enabled = 1;
        ifl_dblog_get_stats(s->dblog, &live->db);
    }
    if (atomic_load(&s->ready)) {
        live->have_stats = 1;
        for (int p = 0; p < 2; p++)
            if (s->b[p])
                ifl_batcher_get_stats(s->b[p], &live->stats[p]);
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

static int http_json_error(srv_conn *c, struct lws *wsi, int status, const char *msg)
{
    strbuf sb;
    sb_init(&sb, 0);
    sb_puts(&sb, "{\"error\":");
    sb_json_str(&sb, msg, strlen(msg));
    sb_puts(&sb, "}");
    if (!sb_ok(&sb)) {
        sb_free(&sb);
        return -1;
    }
    size_t n = sb.len;
    return http_respond(c, wsi, status, "application/json", sb_steal(&sb), n, 0, NULL, NULL);
}

/* Parses a decimal argument in [lo, hi]; -1 if present and bad, 0 absent, 1 read. */
static int url_int(struct lws *wsi, const char *name, int64_t lo, int64_t hi, int64_t *out)
{
    char buf[64];
    const char *v = lws_get_urlarg_by_name(wsi, name, buf, sizeof buf);
    if (!v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x < lo || x > hi)
        return -1;
    *out = x;
    return 1;
}

/* GET /api/history and /api/requests/ID (docs/protocol.md): checked here, answered by the
 * history thread. */
static int http_api(server *s, srv_conn *c, struct lws *wsi, const char *path)
{
    if (!strcmp(s->o->history, "off"))
        return http_json_error(c, wsi, HTTP_STATUS_FORBIDDEN, "history is off on this server");
    if (!s->history)
        return http_json_error(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE,
                               "this server keeps no request log: start it with --db PATH");
    http_job *hj = calloc(1, sizeof *hj);
    if (!hj)
        return -1;
    history_job *j = &hj->job;
    char key[128];
    const char *v = lws_get_urlarg_by_name(wsi, "user=", key, sizeof key);
    if (v && user_key_hash(v, j->user_hash)) {
        free(j);
        return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                               "user must be 16 to 64 characters of A-Z a-z 0-9 _ -");
    }
    if (!v && strcmp(s->o->history, "all")) {
        free(j);
        return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                               "user=KEY is required: history shows a key's own requests");
    }
    if (!strcmp(path, "/api/history")) {
        int64_t limit = 50, before = 0;
        if (url_int(wsi, "limit=", 1, 500, &limit) < 0) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                                   "limit must be an integer from 1 to 500");
        }
        if (url_int(wsi, "before=", 1, INT64_MAX, &before) < 0) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_BAD_REQUEST,
                                   "before must be a request id (a positive integer)");
        }
        j->kind = HISTORY_LIST;
        j->limit = (int32_t)limit;
        j->before = before;
    } else {
        const char *idp = path + strlen("/api/requests/");
        char *end;
        long long id = strtoll(idp, &end, 10);
        if (!*idp || *end || id < 1) {
            free(j);
            return http_json_error(c, wsi, HTTP_STATUS_NOT_FOUND,
                                   "no such request: the id must be a positive integer");
        }
        j->kind = HISTORY_ONE;
        j->id = id;
    }
    j->tag = c;
    c->job = j;
    c->wsi = wsi;
    ifl_history_submit(s->history, j);
    return 0;
}

static int http_request(server *s, srv_conn *c, struct lws *wsi, const char *path)
{
    s->m.http_requests++;
    int is_get = lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) > 0;
    int is_head = lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0;
    if (!is_get && !is_head) {
        char *b = strdup("method not allowed: only GET and HEAD\n");
        if (!b)
            return -1;
        return http_respond(c, wsi, HTTP_STATUS_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", b,
                            strlen(b), 0, "allow:", "GET, HEAD");
    }
    if (!strcmp(path, "/healthz"))
        return http_text(c, wsi, HTTP_STATUS_OK, "ok\n", is_head);
    if (!strcmp(path, "/readyz")) {
        if (s->stopping)
            return http_text(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "shutting down\n", is_head);
        if (atomic_load(&s->load_failed))
            return http_text(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE, "the model failed to load\n",
                             is_head);
        if (!atomic_load(&s->ready))
            return http_text(c, wsi, HTTP_STATUS_SERVICE_UNAVAILABLE,
                             "not ready: loading the model\n", is_head);
        if (s->dblog) {
            ifl_dblog_stats ds;
            ifl_dblog_get_stats(s->dblog, &ds);
            if (!ds.up) {
                char msg[IFL_ERR_MAX + 100];
                snprintf(msg, sizeof msg,
                         "ready, degraded: the request log is failing (%s); serving goes on\n",
                         ds.last_error);
                return http_text(c, wsi, HTTP_STATUS_OK, msg, is_head);
            }
        }
        return http_text(c, wsi, HTTP_STATUS_OK, "ready\n", is_head);
    }
    if (!strcmp(path, "/metrics")) {
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
                            sb_steal(&sb), n, is_head, NULL, NULL);
    }
    if (!strcmp(path, "/api/history") || !strncmp(path, "/api/requests/", 14))
        return http_api(s, c, wsi, path);
    if (!strcmp(path, "/ws"))
        return http_text(c, wsi, 426, "this is the WebSocket endpoint: connect with a WebSocket\n",
                         is_head);
    return http_serve_file(s, c, wsi, path, is_head);
}

static int http_writeable(srv_conn *c, struct lws *wsi)
{
    if (c->answer) {
        history_job *j = c->answer;
        c->answer = NULL;
        char *body = j->body;
        size_t len = j->len;
        int status = j->status;
        free(j);
        if (!body)
            return -1;
        return http_respond(c, wsi, status, "application/json", body, len, 0, NULL, NULL);
    }
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
        return lws_http_transaction_completed(wsi) ? -1 : 0;
    }
    lws_callback_on_writable(wsi);
    return 0;
}

/* ---- the lws callback (service thread) ------------------------------------------------------ */

static void conn_closed(server *s, srv_conn *c)
{
    free(c->http_body);
    c->http_body = NULL;
    if (!c->is_ws)
        return;
    if (s->dblog)
        ifl_dblog_session_close(s->dblog, c->session_hex, ifl_db_now_ms(),
                                c->close_why[0] ? c->close_why : "connection lost");
    cancel_conn_requests(s, c);
    for (srv_req *r = c->reqs; r; r = r->next)
        r->conn = NULL; /* freed when their done events arrive */
    c->reqs = NULL;
    c->n_reqs = 0;
    conn_free_outbox(c);
    free(c->rx);
    c->rx = NULL;
    for (srv_conn **pp = &s->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            s->n_conns--;
            break;
        }
    s->m.connections_open = (uint64_t)s->n_conns;
    c->is_ws = 0;
    c->wsi = NULL;
}

static int on_receive(server *s, srv_conn *c, struct lws *wsi, const char *in, size_t len)
{
    if (c->close_now)
        return 0; /* closing: ignore what is still arriving */
    if (lws_is_first_fragment(wsi)) {
        c->rx_len = 0;
        c->rx_binary = lws_frame_is_binary(wsi);
    }
    if (c->rx_len + len > (size_t)s->o->max_message) {
        char why[120];
        snprintf(why, sizeof why, "message too big: over %d bytes", s->o->max_message);
        s->m.closed_too_big++;
        cancel_conn_requests(s, c);
        snprintf(c->close_why, sizeof c->close_why, "server 1009: %s", why);
        lws_close_reason(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, (unsigned char *)why,
                         strlen(why));
        return -1;
    }
    if (c->rx_len + len + 1 > c->rx_cap) {
        size_t cap = c->rx_cap ? c->rx_cap : 4096;
        while (cap < c->rx_len + len + 1)
            cap *= 2;
        char *p = realloc(c->rx, cap);
        if (!p)
            return -1;
        c->rx = p;
        c->rx_cap = cap;
    }
    memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;
    c->rx[c->rx_len] = 0;
    if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi))
        return 0;
    size_t n = c->rx_len;
    c->rx_len = 0;
    if (c->rx_binary) {
        char msg[120];
        snprintf(msg, sizeof msg,
                 "binary frames are not understood (got %zu bytes): send JSON "
                 "text frames",
                 n);
        send_error(s, c, NULL, "binary_frame", msg);
        return 0;
    }
    if (!ifl_utf8_valid(c->rx, n)) {
        static const char why[] = "text frame is not valid UTF-8";
        s->m.closed_bad_utf8++;
        cancel_conn_requests(s, c);
        snprintf(c->close_why, sizeof c->close_why, "server 1007: %s", why);
        lws_close_reason(wsi, LWS_CLOSE_STATUS_INVALID_PAYLOAD, (unsigned char *)why,
                         sizeof why - 1);
        return -1;
    }
    handle_message(s, c, c->rx, n);
    return 0;
}

static int srv_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len)
{
    server *s = lws_context_user(lws_get_context(wsi));
    srv_conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (s)
            drain_events(s);
        return 0;
    case LWS_CALLBACK_HTTP: return http_request(s, c, wsi, (const char *)in);
    case LWS_CALLBACK_HTTP_WRITEABLE: return http_writeable(c, wsi);
    case LWS_CALLBACK_CLOSED_HTTP:
        if (c) {
            free(c->http_body);
            c->http_body = NULL;
            if (c->job)
                c->job->tag = NULL; /* its answer is dropped when it comes */
            c->job = NULL;
            if (c->answer) {
                free(c->answer->body);
                free(c->answer);
                c->answer = NULL;
            }
            c->wsi = NULL;
        }
        return 0;
    case LWS_CALLBACK_FILTER_NETWORK_CONNECTION: {
        /* A small kernel send buffer (Linux doubles it): a reader that stops is noticed after
         * this plus --max-outbox bytes, not after the megabytes autotuning would allow. */
        int fd = (int)(intptr_t)in, sz = SOCKET_SNDBUF;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz))
            fprintf(stderr, "inflight: setsockopt(SO_SNDBUF): %s\n", strerror(errno));
        return 0;
    }
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION: {
        char uri[64];
        if (lws_hdr_copy(wsi, uri, sizeof uri, WSI_TOKEN_GET_URI) < 0 || strcmp(uri, "/ws"))
            return 1; /* upgrades only at /ws */
        if (!c)
            return 1;
        free(c->http_body);
        memset(c, 0, sizeof *c);
        char key[128];
        const char *v = lws_get_urlarg_by_name(wsi, "user=", key, sizeof key);
        if (v && user_key_hash(v, c->user_hash))
            snprintf(c->user_hash, sizeof c->user_hash, "!"); /* refused at ESTABLISHED */
        if (lws_hdr_copy(wsi, c->user_agent, sizeof c->user_agent, WSI_TOKEN_HTTP_USER_AGENT) < 0)
            c->user_agent[0] = 0;
        return 0;
    }
    case LWS_CALLBACK_ESTABLISHED: {
        c->wsi = wsi;
        c->is_ws = 1;
        c->session = random_u64(s);
        snprintf(c->session_hex, sizeof c->session_hex, "%016llx", (unsigned long long)c->session);
        lws_get_peer_simple(wsi, c->peer, sizeof c->peer);
        c->next = s->conns;
        s->conns = c;
        s->n_conns++;
        s->m.connections_total++;
        s->m.connections_open = (uint64_t)s->n_conns;
        int bad_key = !strcmp(c->user_hash, "!");
        if (s->dblog) {
            ifl_dblog_session rec = {.session = c->session_hex,
                                     .user_key_sha256 =
                                         c->user_hash[0] && !bad_key ? c->user_hash : NULL,
                                     .remote_addr = c->peer,
                                     .user_agent = c->user_agent[0] ? c->user_agent : NULL,
                                     .at_ms = ifl_db_now_ms()};
            ifl_dblog_session_open(s->dblog, &rec);
        }
        if (bad_key) {
            conn_close_now(s, c, LWS_CLOSE_STATUS_POLICY_VIOLATION,
                           "the user key must be 16 to 64 characters of A-Z a-z 0-9 _ -");
        } else if (s->stopping) {
            conn_close_now(s, c, LWS_CLOSE_STATUS_GOINGAWAY, "server shutting down");
        } else if (!atomic_load(&s->ready)) {
            conn_close_now(s, c, CLOSE_TRY_AGAIN_LATER, "not ready: the model is loading");
        } else if (s->n_conns > s->o->max_connections) {
            char why[120];
            snprintf(why, sizeof why, "too many connections (limit %d): try again later",
                     s->o->max_connections);
            s->m.closed_limit++;
            conn_close_now(s, c, CLOSE_TRY_AGAIN_LATER, why);
        } else {
            send_hello(s, c);
        }
        return 0;
    }
    case LWS_CALLBACK_RECEIVE: return on_receive(s, c, wsi, in, len);
    case LWS_CALLBACK_SERVER_WRITEABLE: {
        if (c->close_now) {
            lws_close_reason(wsi, (enum lws_close_status)c->close_code,
                             (unsigned char *)c->close_reason, strlen(c->close_reason));
            return -1;
        }
        srv_frame *f = c->out_head;
        if (!f) {
            if (c->closing) {
                lws_close_reason(wsi, (enum lws_close_status)c->close_code,
                                 (unsigned char *)c->close_reason, strlen(c->close_reason));
                return -1;
            }
            return 0;
        }
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
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (c && !c->close_why[0]) {
            const unsigned char *p = in;
            int code = len >= 2 ? (p[0] << 8) | p[1] : 1005;
            int rl = len > 2 ? (int)(len - 2) : 0;
            if (rl > 80)
                rl = 80;
            /* the reason is the peer's bytes: kept only if they are UTF-8 */
            if (rl && !ifl_utf8_valid((const char *)p + 2, (size_t)rl))
                rl = 0;
            snprintf(c->close_why, sizeof c->close_why, "client %d%s%.*s", code, rl ? ": " : "", rl,
                     rl ? (const char *)p + 2 : "");
        }
        return 0;
    case LWS_CALLBACK_CLOSED: conn_closed(s, c); return 0;
    default: break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols protocols[] = {
    {"inflight", srv_callback, sizeof(srv_conn), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ---- loading (loader thread) ---------------------------------------------------------------- */

static void *loader_main(void *arg)
{
    server *s = arg;
    const ifl_server_opts *o = s->o;
    ifl_err err;
    double t0 = ifl_now_s();
    ifl_model_opts mo = o->model_opts;
    mo.cpu_layout = ifl_device_wants_cpu_layout(s->device);
    if (ifl_model_load(&s->model, o->model_dir, &mo, &err))
        goto fail;
    if (ifl_tokenizer_load(&s->tok, o->vocab_dir ? o->vocab_dir : o->model_dir, &err)) {
        if (o->vocab_dir)
            goto fail;
        ifl_err err2;
        if (ifl_tokenizer_load(&s->tok, INFLIGHT_DEFAULT_VOCAB_DIR, &err2))
            goto fail;
    }
    if (s->device == IFL_DEVICE_CPU) {
        s->pool = ifl_threadpool_new(o->threads > 0 ? o->threads : ifl_n_cores());
        if (!s->pool) {
            ifl_err_set(&err, "cannot start the CPU threads");
            goto fail;
        }
    }
    int32_t step_tokens = o->step_tokens < o->max_batch ? o->max_batch : o->step_tokens;
    for (int p = 0; p < 2; p++) {
        ifl_backend_params bp = {.max_seqs = o->max_batch,
                                 .max_tokens = step_tokens,
                                 .n_threads = o->threads,
                                 .kv_elem_bytes = s->device == IFL_DEVICE_CUDA ? 2 : 4,
                                 .pool = s->pool};
        if (o->kv_mem_mb > 0)
            ifl_backend_params_fill(&bp, &s->model, o->kv_mem_mb);
        s->be[p] = ifl_backend_new(s->device, &s->model, &bp, &err);
        if (!s->be[p])
            goto fail;
        ifl_batcher_params bpp = {.policy = (ifl_policy)p,
                                  .max_batch = o->max_batch,
                                  .max_queue = o->max_queue,
                                  .step_tokens = step_tokens,
                                  .eos_token = s->model.cfg.eos_token_id,
                                  .tok = s->tok,
                                  .on_event = on_batcher_event,
                                  .on_step = on_batcher_step,
                                  .ud = s};
        s->b[p] = ifl_batcher_start(s->be[p], &bpp, &err);
        if (!s->b[p])
            goto fail;
    }
    char desc[200] = "";
    if (s->be[0]->ops->describe)
        s->be[0]->ops->describe(s->be[0], desc, sizeof desc);
    snprintf(s->device_desc, sizeof s->device_desc, "%s", desc[0] ? desc : s->be[0]->ops->name);
    s->lim.max_tokens = s->model.cfg.n_ctx - 1;
    s->lim.n_vocab = s->model.cfg.n_vocab;
    if (s->lim.def_max_tokens > s->lim.max_tokens)
        s->lim.def_max_tokens = s->lim.max_tokens;
    const ifl_backend_params *gp = &s->be[0]->params;
    if (!o->quiet) {
        printf("inflight serve: model %s: %d layers, %d heads, %d wide, context %d, weights %s\n",
               o->model_dir, s->model.cfg.n_layer, s->model.cfg.n_head, s->model.cfg.n_embd,
               s->model.cfg.n_ctx, ifl_model_dtype_name(&s->model));
        printf("inflight serve: device %s (%s)\n", s->device_desc, s->device_why);
        printf("inflight serve: batchers iterative + static: max_batch %d, max_queue %d, step "
               "budget %d tokens, KV %d blocks x %d tokens each\n",
               o->max_batch, o->max_queue, step_tokens, gp->kv_blocks, gp->kv_block_size);
        printf("inflight serve: ready in %.2f s\n", ifl_now_s() - t0);
        fflush(stdout);
    }
    atomic_store(&s->ready, 1);
    atomic_store(&s->load_done, 1);
    if (s->ctx)
        lws_cancel_service(s->ctx);
    return NULL;
fail:
    snprintf(s->load_error, sizeof s->load_error, "%s", err.msg);
    atomic_store(&s->load_failed, 1);
    atomic_store(&s->load_done, 1);
    if (s->ctx)
        lws_cancel_service(s->ctx);
    return NULL;
}

/* ---- run ------------------------------------------------------------------------------------ */

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
    if (g_srv && g_srv->ctx)
        lws_cancel_service(g_srv->ctx);
}

static void lws_log_emit(int level, const char *line)
{
    (void)level;
    fprintf(stderr, "inflight: lws: %s", line);
}

static void stop_tick(lws_sorted_usec_list_t *sul)
{
    server *s = lws_container_of(sul, server, stop_timer);
    /* only wakes the service loop, which checks the stop's progress */
    lws_sul_schedule(s->ctx, 0, &s->stop_timer, stop_tick, 100000);
}

/* A stop begins: no new connections or requests; those running may finish for --grace. */
static void begin_stop(server *s)
{
    s->stopping = 1;
    s->stop_deadline_us = ifl_now_us() + (uint64_t)(s->o->grace_s * 1e6);
    int32_t running = 0;
    for (int p = 0; p < 2; p++)
        if (s->b[p]) {
            ifl_batcher_stats st;
            ifl_batcher_get_stats(s->b[p], &st);
            running += st.running + st.waiting;
        }
    if (!s->o->quiet) {
        printf("inflight serve: stopping: no new requests; %d in flight may finish within %.1f s\n",
               running, s->o->grace_s);
        fflush(stdout);
    }
    lws_sul_schedule(s->ctx, 0, &s->stop_timer, stop_tick, 100000);
}

static int batchers_idle(server *s)
{
    for (int p = 0; p < 2; p++)
        if (s->b[p]) {
            ifl_batcher_stats st;
            ifl_batcher_get_stats(s->b[p], &st);
            if (st.running + st.waiting)
                return 0;
        }
    return 1;
}

/* The grace period is over (or nothing runs): stop the batchers (what still runs ends with
 * done(cancelled)), send what is queued, and close every socket with 1001. */
static void close_phase(server *s)
{
    s->closing_sockets = 1;
    if (s->loader_started) {
        pthread_join(s->loader, NULL);
        s->loader_started = 0;
    }
    int cancelled = !batchers_idle(s);
    for (int p = 0; p < 2; p++) {
        ifl_batcher_stop(s->b[p]);
        s->b[p] = NULL;
    }
    drain_events(s);
    if (!s->o->quiet) {
        printf("inflight serve: %s; closing %d connection(s)\n",
               cancelled ? "grace period over: cancelled what still ran" : "all requests finished",
               s->n_conns);
        fflush(stdout);
    }
    for (srv_conn *c = s->conns; c; c = c->next) {
        c->closing = 1;
        c->close_code = LWS_CLOSE_STATUS_GOINGAWAY;
        snprintf(c->close_reason, sizeof c->close_reason, "server shutting down");
        snprintf(c->close_why, sizeof c->close_why, "server 1001: server shutting down");
        lws_callback_on_writable(c->wsi);
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 3);
    }
    s->stop_deadline_us = ifl_now_us() + 3500000;
}

int ifl_server_run(const ifl_server_opts *o)
{
    int rc = 1;
    server *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "inflight serve: out of memory\n");
        return 1;
    }
    s->o = o;
    s->t0_us = ifl_now_us();
    s->epoch_ms_at_t0 = ifl_db_now_ms();
    s->rng_state = s->t0_us;
    pthread_mutex_init(&s->evq_lock, NULL);
    metrics_init(&s->m);
    s->lim = (proto_limits){.max_tokens = 1,
                            .n_vocab = 1,
                            .def_max_tokens = o->default_max_tokens,
                            .def_temperature = o->default_temperature,
                            .def_top_p = o->default_top_p,
                            .def_top_k = o->default_top_k};
    {
        ifl_device want;
        ifl_err derr;
        if (ifl_device_parse(o->device, &want)) {
            fprintf(stderr, "inflight serve: --device must be auto, cpu or cuda, not '%s'\n",
                    o->device);
            goto out;
        }
        if (ifl_device_resolve(want, &s->device, s->device_why, sizeof s->device_why, &derr)) {
            fprintf(stderr, "inflight serve: %s\n", derr.msg);
            goto out;
        }
    }

    if (o->db_path) {
        ifl_dblog_opts dopts = {.path = o->db_path,
                                .flush_ms = o->db_flush_ms,
                                .queue_cap = o->db_queue,
                                .retain_days = o->retain_days,
                                .retain_requests = o->retain_requests};
        int fatal = 0;
        ifl_err err;
        s->dblog = ifl_dblog_start(&dopts, &fatal, &err);
        if (!s->dblog) {
            fprintf(stderr, "inflight serve: --db %s: %s\n", o->db_path, err.msg);
            goto out;
        }
        if (strcmp(o->history, "off")) {
            s->history =
                ifl_history_start(o->db_path, !strcmp(o->history, "all"), on_history_done, s);
            if (!s->history) {
                fprintf(stderr, "inflight serve: cannot start the history thread\n");
                goto out;
            }
        }
        if (!o->quiet) {
            printf("inflight serve: request log %s (flush every %d ms; history: %s%s)\n",
                   o->db_path, o->db_flush_ms, o->history,
                   o->retain_days > 0 || o->retain_requests > 0 ? "; retention on" : "");
            fflush(stdout);
        }
    }

    lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_emit);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = o->port;
    info.iface = o->host;
    info.protocols = protocols;
    info.user = s;
    info.options = LWS_SERVER_OPTION_DISABLE_IPV6;
    if (strchr(o->host, ':'))
        info.options = 0;
    info.timeout_secs = 30;
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        fprintf(stderr,
                "inflight serve: cannot listen on %s:%d (is the port in use, or the "
                "address not local?)\n",
                o->host, o->port);
        goto out;
    }
    struct lws_vhost *vh = lws_get_vhost_by_name(s->ctx, "default");
    s->port = vh ? lws_get_vhost_listen_port(vh) : o->port;
    g_srv = s;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!o->quiet) {
        printf("inflight serve: listening on http://%s:%d (page /, WebSocket /ws, /healthz, "
               "/readyz, /metrics)\n",
               o->host, s->port);
        fflush(stdout);
    }
    if (pthread_create(&s->loader, NULL, loader_main, s)) {
        fprintf(stderr, "inflight serve: cannot start the loader thread\n");
        goto out;
    }
    s->loader_started = 1;

    for (;;) {
        if (lws_service(s->ctx, 0) < 0)
            break;
        if (atomic_load(&s->load_failed) && !s->stopping) {
            fprintf(stderr, "inflight serve: %s\n", s->load_error);
            s->stopping = 1;
            close_phase(s);
            rc = 1;
            break;
        }
        if (g_signals && !s->stopping) {
            begin_stop(s);
            rc = 0;
        }
        if (s->stopping && !s->closing_sockets &&
            (batchers_idle(s) || ifl_now_us() > s->stop_deadline_us))
            close_phase(s);
        if (s->closing_sockets && (!s->conns || ifl_now_us() > s->stop_deadline_us))
            break;
    }
out:
    if (s->loader_started)
        pthread_join(s->loader, NULL);
    for (int p = 0; p < 2; p++)
        ifl_batcher_stop(s->b[p]);
    s->b[0] = s->b[1] = NULL;
    drain_events(s); /* frees the srv_reqs of the last done events */
    if (s->ctx) {
        lws_sul_cancel(&s->stop_timer);
        lws_context_destroy(s->ctx); /* closes the sockets still open (CLOSED callbacks) */
    }
    g_srv = NULL;
    ifl_history_stop(s->history); /* its last answers land in the event queue: drained below */
    drain_events(s);
    if (s->dblog) {
        ifl_dblog_stop(s->dblog, 5000); /* writes what is queued: the session closes too */
        s->dblog = NULL;
    }
    for (int p = 0; p < 2; p++)
        ifl_backend_free(s->be[p]);
    ifl_threadpool_free(s->pool);
    ifl_tokenizer_free(s->tok);
    ifl_model_free(&s->model);
    pthread_mutex_destroy(&s->evq_lock);
    if (rc == 0 && !o->quiet)
        printf("inflight serve: stopped\n");
    free(s);
    return rc;
}
