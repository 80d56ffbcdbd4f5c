/* metrics.h: the server's Prometheus metrics: counters, gauges and fixed-bucket histograms,
 * rendered in the text exposition format 0.0.4.
 *
 * Thread: everything here is touched by the service thread only (batcher events reach it through
 * the event queue), so there are no locks. Gauges that belong to a batcher (running, waiting, KV
 * blocks) are read from the batchers when /metrics is rendered. */
#ifndef IFL_METRICS_H
#define IFL_METRICS_H

#include <stdint.h>

#include "api_table.h"
#include "batcher.h"
#include "codes.h"
#include "dblog.h"
#include "strbuf.h"

#define METRICS_MAX_BUCKETS 16
#define METRICS_N_FINISH 5

typedef struct {
    int n;                               /* buckets (upper bounds), +Inf implied */
    double le[METRICS_MAX_BUCKETS];      /* (n) ascending */
    uint64_t count[METRICS_MAX_BUCKETS]; /* (n) observations <= le[i] (not cumulative) */
    uint64_t total;
    double sum;
} metrics_hist;

void metrics_hist_init(metrics_hist *h, const double *le, int n);
void metrics_hist_observe(metrics_hist *h, double v);

typedef struct {
    /* per policy */
    uint64_t requests[IFL_N_POLICIES][METRICS_N_FINISH]; /* finished, by finish reason */
    /* by API (the front end, req_api: API_FRONT_ENDS' rows) */
    uint64_t api_requests[REQ_N_APIS][METRICS_N_FINISH]; /* the same by API */
    uint64_t api_tokens[REQ_N_APIS];                     /* generated */
    metrics_hist api_ttft[REQ_N_APIS];                   /* seconds, arrival to first token */
    metrics_hist api_e2e[REQ_N_APIS];                    /* seconds, arrival to done */
    uint64_t tokens[IFL_N_POLICIES];        /* generated */
    uint64_t prompt_tokens[IFL_N_POLICIES];
    uint64_t trimmed_requests[IFL_N_POLICIES]; /* admitted with part of their prompt left out */
    uint64_t trimmed_tokens[IFL_N_POLICIES];   /* the tokens left out */
    uint64_t steps[IFL_N_POLICIES];
    metrics_hist ttft[IFL_N_POLICIES];  /* seconds, arrival to first token */
    metrics_hist itl[IFL_N_POLICIES];   /* seconds between a request's tokens */
    metrics_hist queue[IFL_N_POLICIES]; /* seconds, arrival to admission */
    metrics_hist e2e[IFL_N_POLICIES];   /* seconds, arrival to done */
    metrics_hist batch[IFL_N_POLICIES]; /* sequences per step */
    metrics_hist step_s[IFL_N_POLICIES];
    uint64_t errors[IFL_N_CODES]; /* by code (codes.h): every code is a series from the start */
    /* connections */
    uint64_t connections_total, connections_open;
    uint64_t closed_slow, closed_too_big, closed_bad_utf8, closed_limit, closed_bad_close;
    uint64_t connections_refused; /* closed at once, before hello: not logged as sessions */
    uint64_t refusals_not_logged; /* refused requests past the log's budgets (reqlog.h) */
    uint64_t sockets_open;        /* accepted sockets of every kind (sockets.c) */
    uint64_t sockets_evicted;     /* silent sockets closed to make room for a new one */
    uint64_t sockets_refused;     /* closed at accept: past the limit and its band */
    uint64_t sockets_over_limit;  /* requests answered 503 / upgrades 1013 in the band */
    uint64_t sockets_pipelined;   /* closed after an answer: a request was pipelined behind it */
    uint64_t sockets_deadline;    /* a request not whole by its deadline or below the body rate */
    uint64_t wire_refused[5];     /* by wire_verdict - 1: answered by the wire guard */
    uint64_t rx_buffer_bytes;     /* receive buffers the WebSocket connections hold */
    uint64_t frames_sent, bytes_sent, step_frames_dropped;
    uint64_t http_requests;
    /* history API answers (chunks, http.c) the HTTP connections hold */
    uint64_t history_buffered_bytes;
    double start_time_s; /* unix time */
} metrics;

void metrics_init(metrics *m);
void metrics_count_error(metrics *m, ifl_code code);

typedef struct {
    ifl_batcher_stats stats[IFL_N_POLICIES];
    int have_stats;
    int ready;
    int db_enabled; /* --db given */
    ifl_dblog_stats db;
    const char *isa;        /* the CPU kernel family in use (cpu_isa.h), for inflight_build_info */
    const char *weights;    /* the weights' format (the registry's name, tensor.h), likewise; NULL:
                               not known yet (as stored, while the model loads) */
    const char *event_loop; /* "libuv" or "poll" */
} metrics_live;

/* Renders everything into sb (appending). */
void metrics_render(const metrics *m, const metrics_live *live, strbuf *sb);

#endif
