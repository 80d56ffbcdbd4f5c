/* reqlog.h: what is logged of a finished or refused request, and of a sampled step: the one
 * stderr line per request (unless --no-request-log or --quiet) and the SQLite records handed to
 * the request log's writer (dblog.h), and the budget that keeps the log from growing by a row for
 * each refused request a client can send at no cost. Service thread only.
 * What it is not: the writer (dblog.c) or the requests' bookkeeping (request.c). */
#ifndef IFL_REQLOG_H
#define IFL_REQLOG_H

#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "codes.h"
#include "dblog.h"
#include "request.h"

/* The budget of refused requests' rows. Refusals cost the sender nothing and a client can open a
 * connection per request, so the log keeps them by the client's address and across all clients,
 * never by connection: a refusal is written only when both token buckets hold a row, and takes one
 * from each; the rest are counted (inflight_request_log_refusals_skipped_total) and summed up on
 * stderr at most once every REQLOG_UNLOGGED_REPORT_S. Zeroed: every bucket full. */
#define REQLOG_REFUSALS_ADDR_BURST 20 /* rows per client address, then */
#define REQLOG_REFUSALS_ADDR_PER_S 1  /* a second */
#define REQLOG_REFUSALS_ALL_BURST 200 /* rows across all clients, then */
#define REQLOG_REFUSALS_ALL_PER_S 20  /* a second */
#define REQLOG_REFUSAL_ADDRS 2048     /* addresses remembered (a power of 2; 32 bytes each) */
#define REQLOG_REFUSAL_PROBE 8        /* slots looked at per address */
#define REQLOG_UNLOGGED_REPORT_S 10

typedef struct reqlog_budget {
    double used; /* rows taken beyond the refill, 0 .. burst */
    uint64_t t_us;
} reqlog_budget;

/* One remembered address. A slot whose bucket has refilled holds nothing worth keeping: it is
 * reused first; else, among the REQLOG_REFUSAL_PROBE slots of its hash, the one used longest ago.
 */
typedef struct {
    uint8_t addr[REQ_PEER_BYTES];
    reqlog_budget b;
} reqlog_addr_budget;

typedef struct {
    reqlog_budget all;
    reqlog_addr_budget by_addr[REQLOG_REFUSAL_ADDRS];
    uint64_t key[2];         /* the hash's secret (drawn at first use) */
    uint64_t unlogged;       /* not logged since the last summary line */
    uint64_t unlogged_since; /* monotonic us of the first of them */
    uint64_t reported_us;    /* the last summary line */
} reqlog_refusals;

struct reqlog {
    ifl_dblog *db;          /* NULL: no SQLite log */
    const ifl_model *model; /* the served model: its weights' format (ifl_model_dtype_name) goes
                               in each request's line and row; read only for requests, which
                               exist once it is loaded; NULL: not logged */
    int lines;              /* one stderr line per finished request */
    uint64_t t0_us;         /* monotonic us at start */
    double epoch_ms_at_t0;  /* wall clock (Unix ms) when t0_us was read */
    uint64_t last_step_logged[IFL_N_POLICIES];
    reqlog_refusals refusals; /* the budget of refused requests' rows */
};

/* A monotonic stamp as Unix milliseconds (0 stays 0: never reached). */
double reqlog_unix_ms(const reqlog *lg, uint64_t mono_us);

/* The parameters of a request as the log keeps them (JSON, params_log_json): heap, NULL when out
 * of memory. */
char *reqlog_params_json(const req_params *p, uint64_t seed);

/* A finished request; `owner_gone` when its connection closed first. */
void reqlog_finished(reqlog *lg, const srv_req *r, const ifl_event *done, const req_result *res,
                     int owner_gone);

/* A request refused after its message was understood, with its code. */
/* The most of a refused request's prompt the log keeps (its whole length goes in prompt_bytes). */
#define REQLOG_REFUSED_PROMPT_BYTES 256
void reqlog_refused(reqlog *lg, const srv_req *r, ifl_code code);

/* The address the budget keys a client by, from its socket: IPv4 as ::ffff:a.b.c.d, IPv6 by its
 * /64 (one host usually holds a whole /64); all zero when unknown (those share one bucket). */
void reqlog_peer_key(int fd, uint8_t key[REQ_PEER_BYTES]);

/* 1 when a refusal from the client at `peer` at now_us may be logged (and takes its row from both
 * budgets); 0 when it may not (counted for the summary line, which it may print). */
int reqlog_refusal_admit(reqlog *lg, const uint8_t peer[REQ_PEER_BYTES], uint64_t now_us);

/* The owner's sessions row, if it is still to be written (req_owner.session_row): before its first
 * logged request, refused or accepted. */
void reqlog_session_row(reqlog *lg, req_owner *o);

/* A step: kept at most once per policy every 100 ms. */
void reqlog_step(reqlog *lg, const ifl_step_record *st);

#endif
