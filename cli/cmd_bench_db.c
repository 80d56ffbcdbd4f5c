/* cmd_bench_db.c: `inflight bench --db-writer`: how fast the request log's writer thread
 * (server/dblog.c) commits, on a scratch database: N requests with T token timings each (one row in
 * requests + one offsets blob in request_tokens per request), their sessions, and a step sample per
 * request, enqueued as fast as the caller can, the way the service thread does. Prints records/s
 * and token timings/s, and the time to enqueue one record (what serving pays). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "db.h"
#include "dblog.h"
#include "util.h"

static const char *const USAGE =
    "usage: inflight bench --db-writer [--requests N] [--tokens T] [--db PATH] [--flush-ms N]\n"
    "\n"
    "Measures the request log's writer on a scratch SQLite file: N requests with T token timings\n"
    "each, one session per 4 requests and one step sample per request.\n"
    "\n";

typedef struct {
    const char *path;
    int32_t n, t, flush_ms;
} db_bench_opts;

#define ROW(NAME, ARG, LO, HI, F, DEF, HELP)                                                       \
    {                                                                                              \
        .name = NAME, .type = CLI_I32, .arg = ARG, .lo = LO, .hi = HI, .def = DEF,                 \
        .off = offsetof(db_bench_opts, F), .help = HELP                                            \
    }
static const cli_opt OPTS[] = {
    {.name = "db-writer", .type = CLI_MODE, .help = "run this benchmark"},
    ROW("requests", "N", 1, 10000000, n, "20000", "requests to log"),
    ROW("tokens", "T", 0, 100000, t, "32", "token timings per request"),
    {.name = "db",
     .type = CLI_STR,
     .arg = "PATH",
     .off = offsetof(db_bench_opts, path),
     .def_text = "a temporary file, removed after",
     .help = "the scratch SQLite file"},
    ROW("flush-ms", "N", 1, 60000, flush_ms, "200", "the writer commits every N ms"),
};
#undef ROW

/* Enqueues n requests of t token timings (offsets off), their sessions and a step sample each,
 * as fast as it can; the seconds spent enqueueing. Counts the records refused in *dropped. */
static double enqueue_all(ifl_dblog *d, int32_t n, int32_t t, const uint32_t *off, int32_t *dropped)
{
    char prompt[] = "Hello, how are you? This is a benchmark prompt of a typical length.";
    char completion[256];
    memset(completion, 'x', sizeof completion - 1);
    completion[sizeof completion - 1] = 0;
    double enqueue_s = 0;
    double now_ms = ifl_db_now_ms();
    char session[17];
    for (int32_t i = 0; i < n; i++) {
        double e0 = ifl_now_s();
        snprintf(session, sizeof session, "%016x", (unsigned)(i / 4));
        if (i % 4 == 0) {
            ifl_dblog_session s = {.session = session,
                                   .remote_addr = "127.0.0.1",
                                   .user_agent = "bench",
                                   .at_ms = now_ms};
            ifl_dblog_session_open(d, &s);
        }
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        ifl_dblog_request q = {.session = session,
                               .client_id = id,
                               .policy = i % 2 ? "static" : "iterative",
                               .prompt = prompt,
                               .prompt_len = strlen(prompt),
                               .params_json = "{\"max_tokens\":32}",
                               .prompt_tokens = 16,
                               .completion_tokens = t,
                               .completion = completion,
                               .completion_len = (size_t)(t * 4 < 255 ? t * 4 : 255),
                               .finish_reason = "length",
                               .queued_at = now_ms + i,
                               .admitted_at = now_ms + i + 1,
                               .first_token_at = now_ms + i + 20,
                               .finished_at = now_ms + i + 500,
                               .queue_ms = 1,
                               .ttft_ms = 20,
                               .total_ms = 500,
                               .tokens_per_s = 66,
                               .offsets_us = off,
                               .n_offsets = t};
        *dropped += ifl_dblog_request_done(d, &q) != 0;
        ifl_dblog_step st = {.at_ms = now_ms + i,
                             .policy = "iterative",
                             .step = (uint64_t)i,
                             .batch_size = 8,
                             .decode_tokens = 8,
                             .step_ms = 12};
        *dropped += ifl_dblog_step_sample(d, &st) != 0;
        enqueue_s += ifl_now_s() - e0;
    }
    return enqueue_s;
}

/* The scratch database's file, its -wal and -shm, and its directory. */
static void remove_scratch(const char *dir, const char *file)
{
    char p2[96];
    static const char *const sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(p2, sizeof p2, "%s%s", file, sfx[i]);
        unlink(p2);
    }
    rmdir(dir);
}

/* Logs o->n requests through a writer on path and prints how fast it committed; 0 or 1. */
static int bench_writer(const char *path, const db_bench_opts *opts)
{
    int32_t n = opts->n, t = opts->t;
    ifl_dblog_opts o = {.path = path, .flush_ms = opts->flush_ms, .queue_cap = n * 3 + 16};
    int fatal = 0, rc = 1;
    ifl_err err;
    ifl_dblog *d = ifl_dblog_start(&o, &fatal, &err);
    if (!d) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        return 1;
    }
    uint32_t *off = malloc((size_t)(t > 0 ? t : 1) * sizeof *off);
    if (!off)
        goto out;
    for (int32_t i = 0; i < t; i++)
        off[i] = 20000u + (uint32_t)i * 15000u;
    printf("inflight bench --db-writer: %s, %d requests x %d token timings, flush every %d ms\n",
           path, n, t, opts->flush_ms);
    fflush(stdout);
    double t0 = ifl_now_s();
    int32_t dropped = 0;
    double enqueue_s = enqueue_all(d, n, t, off, &dropped);
    ifl_dblog_stats s;
    for (;;) {
        ifl_dblog_get_stats(d, &s);
        if (s.queued == 0 || !s.up)
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    double dt = ifl_now_s() - t0;
    if (!s.up || s.written[2] != (uint64_t)n) {
        fprintf(stderr, "inflight bench: the writer failed: %s (%llu of %d requests written)\n",
                s.last_error, (unsigned long long)s.written[2], n);
        goto out;
    }
    printf("  %d requests (+ %llu sessions, %llu steps) in %.3f s, %llu transactions\n", n,
           (unsigned long long)s.written[0], (unsigned long long)s.written[3], dt,
           (unsigned long long)s.batches);
    printf("  requests        : %10.0f rows/s\n", n / dt);
    printf("  token timings   : %10.0f /s (stored as one uint32 blob per request)\n",
           (double)n * t / dt);
    printf("  enqueue (caller): %10.2f us per request record, %d dropped\n", enqueue_s / n * 1e6,
           dropped);
    rc = 0;
out:
    ifl_dblog_stop(d, 10000);
    free(off);
    return rc;
}

int cmd_bench_db(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("bench", USAGE, OPTS, NULL, NULL);
    db_bench_opts opts = {0};
    int st = cli_parse(&spec, argc, argv, 1, &opts, sizeof opts);
    if (st >= 0)
        return st;
    if (opts.path)
        return bench_writer(opts.path, &opts);
    char tmp[] = "/tmp/inflight-bench-db-XXXXXX";
    char file[64];
    if (!mkdtemp(tmp)) {
        perror("inflight bench: mkdtemp");
        return 1;
    }
    snprintf(file, sizeof file, "%s/log.db", tmp);
    int rc = bench_writer(file, &opts);
    remove_scratch(tmp, file);
    return rc;
}
