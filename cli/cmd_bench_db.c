/* cmd_bench_db.c: `inflight bench --db-writer`: how fast the request log's writer thread
 * (server/dblog.c) commits, on a scratch database: N requests with T token timings each (one row in
 * requests + one offsets blob in request_tokens per request), their sessions, and a step sample per
 * request, enqueued as fast as the caller can, the way the service thread does. Prints records/s
 * and token timings/s, and the time to enqueue one record (what serving pays). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "db.h"
#include "dblog.h"
#include "util.h"

static const char *const HELP =
    "usage: inflight bench --db-writer [--requests N] [--tokens T] [--db PATH] [--flush-ms N]\n"
    "\n"
    "Measures the request log's writer on a scratch SQLite file (default: a temporary file,\n"
    "removed after): N requests (default 20000) with T token timings each (default 32), one\n"
    "session per 4 requests and one step sample per request.\n";

int cmd_bench_db(int argc, char **argv)
{
    static const struct option opts[] = {
        {"db-writer", no_argument, 0, 'W'},
        {"requests", required_argument, 0, 'n'},
        {"tokens", required_argument, 0, 't'},
        {"db", required_argument, 0, 'd'},
        {"flush-ms", required_argument, 0, 'f'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "bench", *path = NULL;
    int32_t n = 20000, t = 32, flush_ms = 200;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'W': break;
        case 'n':
            if (cli_i32(cmd, "--requests", optarg, 1, 10000000, &n))
                return 2;
            break;
        case 't':
            if (cli_i32(cmd, "--tokens", optarg, 0, 100000, &t))
                return 2;
            break;
        case 'd': path = optarg; break;
        case 'f':
            if (cli_i32(cmd, "--flush-ms", optarg, 1, 60000, &flush_ms))
                return 2;
            break;
        case 'h': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
    }
    char tmp[] = "/tmp/inflight-bench-db-XXXXXX";
    char file[64];
    int own = !path;
    if (own) {
        if (!mkdtemp(tmp)) {
            perror("inflight bench: mkdtemp");
            return 1;
        }
        snprintf(file, sizeof file, "%s/log.db", tmp);
        path = file;
    }
    ifl_dblog_opts o = {.path = path, .flush_ms = flush_ms, .queue_cap = n * 3 + 16};
    int fatal = 0, rc = 1;
    ifl_err err;
    ifl_dblog *d = ifl_dblog_start(&o, &fatal, &err);
    if (!d) {
        fprintf(stderr, "inflight bench: %s\n", err.msg);
        return 1;
    }
    uint32_t *off = malloc((size_t)(t > 0 ? t : 1) * sizeof *off);
    char prompt[] = "Hello, how are you? This is a benchmark prompt of a typical length.";
    char completion[256];
    memset(completion, 'x', sizeof completion - 1);
    completion[sizeof completion - 1] = 0;
    if (!off)
        goto out;
    for (int32_t i = 0; i < t; i++)
        off[i] = 20000u + (uint32_t)i * 15000u;
    printf("inflight bench --db-writer: %s, %d requests x %d token timings, flush every %d ms\n",
           path, n, t, flush_ms);
    fflush(stdout);
    double t0 = ifl_now_s(), enqueue_s = 0;
    double now_ms = ifl_db_now_ms();
    int32_t dropped = 0;
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
        dropped += ifl_dblog_request_done(d, &q) != 0;
        ifl_dblog_step st = {.at_ms = now_ms + i,
                             .policy = "iterative",
                             .step = (uint64_t)i,
                             .batch_size = 8,
                             .decode_tokens = 8,
                             .step_ms = 12};
        dropped += ifl_dblog_step_sample(d, &st) != 0;
        enqueue_s += ifl_now_s() - e0;
    }
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
    if (own) {
        char p2[96];
        static const char *const sfx[] = {"", "-wal", "-shm"};
        for (int i = 0; i < 3; i++) {
            snprintf(p2, sizeof p2, "%s%s", file, sfx[i]);
            unlink(p2);
        }
        rmdir(tmp);
    }
    return rc;
}
