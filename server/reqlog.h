/* reqlog.h: what is logged of a finished or refused request, and of a sampled step: the one
 * stderr line per request (unless --no-request-log or --quiet) and the SQLite records handed to
 * the request log's writer (dblog.h). Service thread only.
 * What it is not: the writer (dblog.c) or the requests' bookkeeping (request.c). */
#ifndef IFL_REQLOG_H
#define IFL_REQLOG_H

#include <stddef.h>
#include <stdint.h>

#include "batcher.h"
#include "codes.h"
#include "dblog.h"
#include "request.h"

struct reqlog {
    ifl_dblog *db;         /* NULL: no SQLite log */
    int lines;             /* one stderr line per finished request */
    uint64_t t0_us;        /* monotonic us at start */
    double epoch_ms_at_t0; /* wall clock (Unix ms) when t0_us was read */
    uint64_t last_step_logged[2];
};

/* A monotonic stamp as Unix milliseconds (0 stays 0: never reached). */
double reqlog_unix_ms(const reqlog *lg, uint64_t mono_us);

/* The parameters of a request as the log keeps them (JSON), into out (cap bytes). */
void reqlog_params_json(const req_params *p, uint64_t seed, char *out, size_t cap);

/* A finished request; `owner_gone` when its connection closed first. */
void reqlog_finished(reqlog *lg, const srv_req *r, const ifl_event *done, const req_result *res,
                     int owner_gone);

/* A request refused after its message was understood, with its code. */
/* The most of a refused request's prompt the log keeps (its whole length goes in prompt_bytes). */
#define REQLOG_REFUSED_PROMPT_BYTES 256
void reqlog_refused(reqlog *lg, const srv_req *r, ifl_code code);

/* How many of one client's refused requests the log keeps: a token bucket of REQLOG_REFUSALS_BURST
 * rows, refilled at REQLOG_REFUSALS_PER_S (a client that retries a refused request in a tight loop
 * would otherwise write thousands of rows a second). Zeroed: full. */
#define REQLOG_REFUSALS_BURST 32
#define REQLOG_REFUSALS_PER_S 4
typedef struct reqlog_budget {
    double used; /* rows taken beyond the refill, 0 .. BURST */
    uint64_t t_us;
} reqlog_budget;
/* 1 when a refusal at now_us may be logged (and takes it); NULL: always. */
int reqlog_budget_take(reqlog_budget *b, uint64_t now_us);

/* A step: kept at most once per policy every 100 ms. */
void reqlog_step(reqlog *lg, const ifl_step_record *st);

#endif
