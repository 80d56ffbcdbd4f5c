/* metrics.c: counters and histograms, and their Prometheus text rendering (metrics.h). Names
 * follow Prometheus conventions: seconds for durations, _total for counters, one HELP and TYPE
 * line per family, label values escaped. */
#include "metrics.h"

#include <string.h>
#include <time.h>

#include "wire_guard.h"

static const double LE_LATENCY[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                    0.25,  0.5,    1,     2.5,  5,     10,   30};
static const double LE_ITL[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                0.05,   0.1,   0.25,   0.5,   1,    2.5};
static const double LE_E2E[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
static const double LE_BATCH[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
static const double LE_STEP[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                 0.05,   0.1,   0.25,   0.5,   1,    2.5};

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

void metrics_hist_init(metrics_hist *h, const double *le, int n)
{
    memset(h, 0, sizeof *h);
    h->n = n < METRICS_MAX_BUCKETS ? n : METRICS_MAX_BUCKETS;
    memcpy(h->le, le, (size_t)h->n * sizeof *le);
}

void metrics_hist_observe(metrics_hist *h, double v)
{
    for (int i = 0; i < h->n; i++)
        if (v <= h->le[i]) {
            h->count[i]++;
            break;
        }
    h->total++;
    h->sum += v;
}

void metrics_init(metrics *m)
{
    memset(m, 0, sizeof *m);
    for (int p = 0; p < IFL_N_POLICIES; p++) {
        metrics_hist_init(&m->ttft[p], LE_LATENCY, N_OF(LE_LATENCY));
        metrics_hist_init(&m->queue[p], LE_LATENCY, N_OF(LE_LATENCY));
        metrics_hist_init(&m->itl[p], LE_ITL, N_OF(LE_ITL));
        metrics_hist_init(&m->e2e[p], LE_E2E, N_OF(LE_E2E));
        metrics_hist_init(&m->batch[p], LE_BATCH, N_OF(LE_BATCH));
        metrics_hist_init(&m->step_s[p], LE_STEP, N_OF(LE_STEP));
    }
    for (int a = 0; a < REQ_N_APIS; a++) {
        metrics_hist_init(&m->api_ttft[a], LE_LATENCY, N_OF(LE_LATENCY));
        metrics_hist_init(&m->api_e2e[a], LE_E2E, N_OF(LE_E2E));
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    m->start_time_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void metrics_count_error(metrics *m, ifl_code code)
{
    if ((unsigned)code < IFL_N_CODES)
        m->errors[code]++;
}

static void family(strbuf *sb, const char *name, const char *type, const char *help)
{
    sb_printf(sb, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series, labelled key="value" (policy or api). */
static void hist_lines(strbuf *sb, const char *name, const char *key, const char *value,
                       const metrics_hist *h)
{
    uint64_t cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->count[i];
        sb_printf(sb, "%s_bucket{%s=\"%s\",le=\"%g\"} %llu\n", name, key, value, h->le[i],
                  (unsigned long long)cum);
    }
    sb_printf(sb, "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n", name, key, value,
              (unsigned long long)h->total);
    sb_printf(sb, "%s_sum{%s=\"%s\"} %.9g\n", name, key, value, h->sum);
    sb_printf(sb, "%s_count{%s=\"%s\"} %llu\n", name, key, value, (unsigned long long)h->total);
}

static void hist_family(strbuf *sb, const char *name, const char *help,
                        const metrics_hist hs[IFL_N_POLICIES])
{
    family(sb, name, "histogram", help);
    for (int p = 0; p < IFL_N_POLICIES; p++)
        hist_lines(sb, name, "policy", ifl_policy_name((ifl_policy)p), &hs[p]);
}

static void api_hist_family(strbuf *sb, const char *name, const char *help,
                            const metrics_hist hs[REQ_N_APIS])
{
    family(sb, name, "histogram", help);
    for (int a = 0; a < REQ_N_APIS; a++)
        hist_lines(sb, name, "api", req_api_name((req_api)a), &hs[a]);
}

static void per_policy_counter(strbuf *sb, const char *name, const char *help,
                               const uint64_t v[IFL_N_POLICIES])
{
    family(sb, name, "counter", help);
    for (int p = 0; p < IFL_N_POLICIES; p++)
        sb_printf(sb, "%s{policy=\"%s\"} %llu\n", name, ifl_policy_name((ifl_policy)p),
                  (unsigned long long)v[p]);
}

static void scalar(strbuf *sb, const char *name, const char *type, const char *help, double v)
{
    family(sb, name, type, help);
    sb_printf(sb, "%s %.17g\n", name, v);
}

/* A counter family's samples, one per reason label (the family line written before). */
static void by_reason(strbuf *sb, const char *name, const char *const *reasons,
                      const uint64_t *values, int n)
{
    for (int i = 0; i < n; i++)
        sb_printf(sb, "%s{reason=\"%s\"} %llu\n", name, reasons[i], (unsigned long long)values[i]);
}

/* Requests, errors, tokens and steps: counters and histograms. */
static void render_requests(const metrics *m, strbuf *sb)
{
    family(sb, "inflight_requests_total", "counter",
           "Requests finished, by policy and finish reason.");
    for (int p = 0; p < IFL_N_POLICIES; p++)
        for (int f = 0; f < METRICS_N_FINISH; f++)
            sb_printf(sb, "inflight_requests_total{policy=\"%s\",finish_reason=\"%s\"} %llu\n",
                      ifl_policy_name((ifl_policy)p), ifl_finish_name((ifl_finish)f),
                      (unsigned long long)m->requests[p][f]);
    family(sb, "inflight_api_requests_total", "counter",
           "Requests finished, by the API they came through (ws, openai, triton) and finish "
           "reason.");
    for (int a = 0; a < REQ_N_APIS; a++)
        for (int f = 0; f < METRICS_N_FINISH; f++)
            sb_printf(sb, "inflight_api_requests_total{api=\"%s\",finish_reason=\"%s\"} %llu\n",
                      req_api_name((req_api)a), ifl_finish_name((ifl_finish)f),
                      (unsigned long long)m->api_requests[a][f]);
    family(sb, "inflight_api_generated_tokens_total", "counter", "Tokens generated, by API.");
    for (int a = 0; a < REQ_N_APIS; a++)
        sb_printf(sb, "inflight_api_generated_tokens_total{api=\"%s\"} %llu\n",
                  req_api_name((req_api)a),
                  (unsigned long long)m->api_tokens[a]);
    api_hist_family(sb, "inflight_api_time_to_first_token_seconds",
                    "Time from a request's arrival to its first token, by API.", m->api_ttft);
    api_hist_family(sb, "inflight_api_request_duration_seconds",
                    "End-to-end time from a request's arrival to its end, by API.", m->api_e2e);
    family(sb, "inflight_errors_total", "counter",
           "Errors answered to clients, by code: refused requests, bad messages, and requests "
           "that failed while running (engine_error, out_of_memory).");
    for (int i = 0; i < IFL_N_CODES; i++)
        sb_printf(sb, "inflight_errors_total{code=\"%s\"} %llu\n", ifl_code_name((ifl_code)i),
                  (unsigned long long)m->errors[i]);
    per_policy_counter(sb, "inflight_generated_tokens_total", "Tokens generated.", m->tokens);
    per_policy_counter(sb, "inflight_prompt_tokens_total", "Prompt tokens of admitted requests.",
                       m->prompt_tokens);
    per_policy_counter(sb, "inflight_trimmed_requests_total",
                       "Admitted requests with part of their prompt left out to fit the context (a "
                       "chat's oldest turns, or truncate_prompt_tokens).",
                       m->trimmed_requests);
    per_policy_counter(sb, "inflight_trimmed_tokens_total",
                       "Prompt tokens left out of admitted requests to fit the context.",
                       m->trimmed_tokens);
    per_policy_counter(sb, "inflight_steps_total", "Scheduler steps run.", m->steps);
    hist_family(sb, "inflight_time_to_first_token_seconds",
                "Time from a request's arrival to its first token.", m->ttft);
    hist_family(sb, "inflight_inter_token_latency_seconds",
                "Time between consecutive tokens of a request.", m->itl);
    hist_family(sb, "inflight_queue_time_seconds",
                "Time from a request's arrival to its admission into the batch.", m->queue);
    hist_family(sb, "inflight_request_duration_seconds",
                "End-to-end time from a request's arrival to its last frame.", m->e2e);
    hist_family(sb, "inflight_batch_size", "Sequences in each scheduler step.", m->batch);
    hist_family(sb, "inflight_step_duration_seconds", "Wall time of each scheduler step.",
                m->step_s);
}

/* The prefix cache of each batcher's KV pool (engine/kv.h): counters since start, and gauges. */
static void render_prefix_cache(const metrics_live *live, strbuf *sb)
{
    static const char *const names[7] = {
        "inflight_prefix_cache_lookups_total",    "inflight_prefix_cache_hits_total",
        "inflight_prefix_cache_hit_tokens_total", "inflight_prefix_cache_evictions_total",
        "inflight_prompt_tokens_computed_total",  "inflight_prefix_cache_blocks",
        "inflight_prefix_cache_blocks_unused"};
    static const char *const help[7] = {
        "Admissions that looked for a cached prefix of their prompt.",
        "Admissions that found at least one cached block.",
        "Prompt tokens whose KV came from the prefix cache (not computed).",
        "Cached blocks evicted to make room for an admission.",
        "Prompt tokens prefilled (computed), the cached ones not counted.",
        "KV blocks in the prefix cache (held by requests or not).",
        "Cached KV blocks no request holds: kept, and free for admission."};
    for (int g = 0; g < 7; g++) {
        family(sb, names[g], g < 5 ? "counter" : "gauge", help[g]);
        for (int p = 0; p < IFL_N_POLICIES; p++) {
            const ifl_batcher_stats *s = &live->stats[p];
            uint64_t v = !live->have_stats ? 0
                         : g == 0          ? s->prefix_lookups
                         : g == 1          ? s->prefix_hits
                         : g == 2          ? s->prefix_hit_tokens
                         : g == 3          ? s->prefix_evictions
                         : g == 4          ? s->prompt_tokens_computed
                         : g == 5          ? (uint64_t)s->kv_cached
                                           : (uint64_t)s->kv_cached_unused;
            sb_printf(sb, "%s{policy=\"%s\"} %llu\n", names[g], ifl_policy_name((ifl_policy)p),
                      (unsigned long long)v);
        }
    }
}

/* What the batchers report now. */
static void render_batchers(const metrics_live *live, strbuf *sb)
{
    static const char *const gauge_names[4] = {"inflight_requests_running",
                                               "inflight_requests_waiting",
                                               "inflight_kv_blocks_used", "inflight_kv_blocks"};
    static const char *const gauge_help[4] = {
        "Requests admitted and generating.", "Requests queued for admission.",
        "KV cache blocks reserved by running requests.", "KV cache blocks in the pool."};
    for (int g = 0; g < 4; g++) {
        family(sb, gauge_names[g], "gauge", gauge_help[g]);
        for (int p = 0; p < IFL_N_POLICIES; p++) {
            const ifl_batcher_stats *s = &live->stats[p];
            int32_t v = !live->have_stats ? 0
                        : g == 0          ? s->running
                        : g == 1          ? s->waiting
                        : g == 2          ? s->kv_used
                                          : s->kv_total;
            sb_printf(sb, "%s{policy=\"%s\"} %d\n", gauge_names[g], ifl_policy_name((ifl_policy)p),
                      v);
        }
    }
    scalar(sb, "inflight_ready", "gauge", "1 once the model is loaded and the batchers run.",
           live->ready);
    render_prefix_cache(live, sb);
}

static void render_connections(const metrics *m, strbuf *sb)
{
    scalar(sb, "inflight_connections_open", "gauge", "WebSocket connections open.",
           (double)m->connections_open);
    scalar(sb, "inflight_connections_total", "counter", "WebSocket connections accepted.",
           (double)m->connections_total);
    family(sb, "inflight_connections_closed_total", "counter",
           "WebSocket connections the server closed, by reason.");
    static const char *const closed[] = {"slow_reader", "message_too_big", "invalid_utf8",
                                         "connection_limit", "invalid_close_frame"};
    const uint64_t closed_n[] = {m->closed_slow, m->closed_too_big, m->closed_bad_utf8,
                                 m->closed_limit, m->closed_bad_close};
    by_reason(sb, "inflight_connections_closed_total", closed, closed_n, 5);
    scalar(sb, "inflight_ws_receive_buffer_bytes", "gauge",
           "Bytes of the WebSocket connections' receive buffers (4 KiB kept per connection that "
           "has received; a larger one is freed after its message).",
           (double)m->rx_buffer_bytes);
    scalar(sb, "inflight_history_buffered_bytes", "gauge",
           "Bytes of history API answers the HTTP connections hold, written or waiting to be: at "
           "most one chunk of a page (about 64 KiB, more only for a longer row) per connection.",
           (double)m->history_buffered_bytes);
    scalar(sb, "inflight_connections_refused_total", "counter",
           "WebSocket connections closed at once, before hello (Origin, Host, API key, user key, "
           "loading, stopping, connection limit); counted here, not logged as sessions.",
           (double)m->connections_refused);
    scalar(sb, "inflight_sockets_open", "gauge",
           "Accepted sockets of every kind (HTTP, WebSocket, idle TCP): --max-connections counts "
           "these.",
           (double)m->sockets_open);
    family(sb, "inflight_sockets_closed_total", "counter",
           "Sockets closed for the connection limit: the oldest that had sent no request, closed "
           "to make room for a new one (silent_evicted), new ones closed at accept past the limit "
           "(refused), requests or upgrades answered 503 / 1013 in the band past it "
           "(over_limit), connections closed after an answer because a request was pipelined "
           "behind it (pipelined), and requests answered 408 for not being whole by their "
           "deadline or arriving below the minimum body rate (deadline).");
    static const char *const sock[] = {"silent_evicted", "refused", "over_limit", "pipelined",
                                       "deadline"};
    const uint64_t sock_n[] = {m->sockets_evicted, m->sockets_refused, m->sockets_over_limit,
                               m->sockets_pipelined, m->sockets_deadline};
    by_reason(sb, "inflight_sockets_closed_total", sock, sock_n, 5);
    family(sb, "inflight_wire_refused_total", "counter",
           "Requests and frames refused by the wire guard before lws parsed them: a request head "
           "over its size (head_too_large, 431) or line count (too_many_headers, 431), a request "
           "target too long (target_too_long, 414) or malformed (bad_head, 400), and unmasked "
           "client frames (unmasked_frame, closed 1002).");
    const char *wire[5];
    for (int i = 0; i < 5; i++)
        wire[i] = wire_verdict_name((wire_verdict)(i + 1));
    by_reason(sb, "inflight_wire_refused_total", wire, m->wire_refused, 5);
    scalar(sb, "inflight_request_log_refusals_skipped_total", "counter",
           "Refused requests not written to the request log: past the budget of their client "
           "address or of all clients (server/reqlog.h), whatever connections they came on; "
           "counted in inflight_errors_total all the same.",
           (double)m->refusals_not_logged);
    scalar(sb, "inflight_ws_frames_sent_total", "counter", "WebSocket frames written.",
           (double)m->frames_sent);
    scalar(sb, "inflight_ws_bytes_sent_total", "counter", "WebSocket payload bytes written.",
           (double)m->bytes_sent);
    scalar(sb, "inflight_step_frames_dropped_total", "counter",
           "Step frames not sent to a subscriber whose outbox was over half full.",
           (double)m->step_frames_dropped);
    scalar(sb, "inflight_http_requests_total", "counter", "HTTP requests answered.",
           (double)m->http_requests);
    scalar(sb, "inflight_start_time_seconds", "gauge", "Unix time the server started.",
           m->start_time_s);
}

/* The request log's writer. */
static void render_db(const metrics_live *live, strbuf *sb)
{
    const ifl_dblog_stats *d = &live->db;
    scalar(sb, "inflight_db_enabled", "gauge", "1 if the server keeps a request log (--db).",
           live->db_enabled);
    scalar(sb, "inflight_db_up", "gauge",
           "1 while the request log is open and its last write succeeded.",
           live->db_enabled && d->up);
    family(sb, "inflight_db_records_written_total", "counter",
           "Records committed to the request log, by kind.");
    static const char *const kinds[4] = {"session_open", "session_close", "request", "step"};
    for (int k = 0; k < 4; k++)
        sb_printf(sb, "inflight_db_records_written_total{kind=\"%s\"} %llu\n", kinds[k],
                  (unsigned long long)d->written[k]);
    family(sb, "inflight_db_records_dropped_total", "counter",
           "Records the request log lost: its queue was full, or the database refused them.");
    sb_printf(sb, "inflight_db_records_dropped_total{reason=\"queue_full\"} %llu\n",
              (unsigned long long)d->dropped_full);
    sb_printf(sb, "inflight_db_records_dropped_total{reason=\"rejected\"} %llu\n",
              (unsigned long long)d->dropped_rejected);
    scalar(sb, "inflight_db_write_errors_total", "counter",
           "Failed transactions and failed opens of the request log (each retried).",
           (double)d->write_errors);
    scalar(sb, "inflight_db_transactions_total", "counter",
           "Transactions the request log committed.", (double)d->batches);
    scalar(sb, "inflight_db_queue_depth", "gauge",
           "Records waiting to be written (queued or kept for a retry).", d->queued);
    scalar(sb, "inflight_db_retention_deleted_total", "counter",
           "Requests deleted by the retention policy.", (double)d->retention_deleted);
}

void metrics_render(const metrics *m, const metrics_live *live, strbuf *sb)
{
    family(sb, "inflight_build_info", "gauge",
           "Always 1: the server's version, the CPU kernel family in use (--isa), the format the "
           "weights are held in (--weights; unknown while a model kept as stored loads) and the "
           "event loop (--event-loop).");
    sb_printf(sb,
              "inflight_build_info{version=\"%s\",isa=\"%s\",weights=\"%s\",event_loop=\"%s\"} "
              "1\n",
              INFLIGHT_VERSION, live->isa ? live->isa : "unknown",
              live->weights ? live->weights : "unknown",
              live->event_loop ? live->event_loop : "unknown");
    render_requests(m, sb);
    render_batchers(live, sb);
    render_connections(m, sb);
    render_db(live, sb);
}
