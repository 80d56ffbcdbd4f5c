/* cmd_client.c: `inflight client`: a client of a running `inflight serve`, over /ws (default) or,
 * with --api openai|triton, the HTTP APIs (client_ws.c, client_http.c).
 * Demo (default): the seed's terminal demo: "Programming in C++ is like" and "Programming in
 * Assembly is like" sent 50 ms apart to one policy, streamed side by side in two columns
 * (client_demo.c), again and again until Ctrl+C (--rounds N to stop after N).
 * --bench: the seed's profiler against the server: closed loop (rounds of N requests sent
 * --interval-ms apart, each round waiting for its requests) or open loop (--rate: Poisson
 * arrivals); prints throughput, time to first token, inter-token latency percentiles and mean
 * time to last response, with a progress bar on stderr. This file holds the options, the send
 * schedule (lws_sul timers on the one lws service thread) and the figures.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_report.h"
#include "cli.h"
#include "client.h"
#include "util.h"

static const char *const HELP =
    "usage: inflight client [options]           (the two-column demo)\n"
    "       inflight client --bench [options]   (the profiler)\n"
    "\n"
    "  --api A             ws | openai | triton (default ws): our /ws protocol, OpenAI's\n"
    "                      /v1/completions or Triton's generate_stream, both streamed as SSE\n"
    "  --url URL           the server: ws://HOST:PORT/ws for ws (default ws://127.0.0.1:8080/ws),\n"
    "                      http://HOST:PORT[/PREFIX] for openai and triton (default\n"
    "                      http://127.0.0.1:8080)\n"
    "  --api-key KEY       when the server wants one (serve --api-key): Authorization: Bearer\n"
    "                      over HTTP, ?api_key= on /ws\n"
    "  --model M           iterative | static (default iterative); --bench: also both (default)\n"
    "  --max-tokens N      per request (default: demo 48, bench 32)\n"
    "  --temperature X     (default: demo 0.8, bench 0 = greedy)\n"
    "  --seed N            demo: seed of the first round (then +1 per round); bench: of request 0\n"
    "demo:\n"
    "  --rounds N          stop after N rounds (default: until Ctrl+C)\n"
    "  --prompt1 TEXT, --prompt2 TEXT   (default the seed's C++ and Assembly prompts)\n"
    "bench:\n"
    "  --concurrency N     requests per round (default 10)\n"
    "  --rounds N          rounds (default 1)\n"
    "  --interval-ms X     between sends in a round (default 50)\n"
    "  --rate R            open loop: R requests per second, Poisson arrivals\n"
    "  --requests N        open loop: how many (default 50)\n"
    "  --connections N     ws: sockets to spread requests over (default: one per concurrent "
    "request,\n"
    "                      at most 64)\n"
    "  --prompt TEXT       (default \"Hello, how are you?\")\n"
    "  --no-ignore-eos     stop at <|endoftext|> (default: ignore it, as the seed's profile "
    "does)\n";

static volatile sig_atomic_t g_interrupted;
static client *g_cl;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_cl && g_cl->ctx)
        lws_cancel_service(g_cl->ctx);
}

/* ---- scheduling (lws timers) ---------------------------------------------------------------- */

static void schedule(client *cl, uint64_t at_us);

static void send_request(client *cl, creq *r, const char *prompt, uint64_t seed)
{
    if (cl->api == CLIENT_API_WS)
        client_ws_send(cl, r, prompt, seed);
    else
        client_http_send(cl, r, prompt, seed);
}

static int32_t total_requests(const client *cl)
{
    if (!cl->bench)
        return cl->rounds > 0 ? 2 * cl->rounds : 2 * 1000000;
    return cl->rate > 0 ? cl->n_open : cl->concurrency * cl->rounds;
}

static int ensure_reqs(client *cl, int32_t n)
{
    if (n <= cl->n_reqs)
        return 0;
    creq *p = realloc(cl->reqs, (size_t)n * sizeof *p);
    if (!p)
        return -1;
    memset(p + cl->n_reqs, 0, (size_t)(n - cl->n_reqs) * sizeof *p);
    cl->reqs = p;
    cl->n_reqs = n;
    return 0;
}

static void on_timer(lws_sorted_usec_list_t *sul)
{
    client *cl = lws_container_of(sul, client, sul);
    if (cl->phase != 1)
        return;
    uint64_t now = ifl_now_us();
    if (!cl->bench) {
        /* demo: a round is two requests, 50 ms apart */
        int k = cl->n_sent - cl->round_base;
        if (k >= 2)
            return;
        if (ensure_reqs(cl, cl->n_sent + 1))
            return;
        creq *r = &cl->reqs[cl->n_sent];
        snprintf(r->id, sizeof r->id, "demo%d", cl->n_sent);
        sb_init(&r->text, 0);
        r->conn = 0;
        send_request(cl, r, k ? cl->prompt2 : cl->prompt1,
                     cl->seed + (uint64_t)cl->round * 2 + (uint64_t)k);
        cl->n_sent++;
        if (k == 0)
            schedule(cl, now + 50000);
        return;
    }
    int32_t total = total_requests(cl);
    int32_t round_end = cl->rate > 0 ? total : cl->round_base + cl->concurrency;
    while (cl->n_sent < round_end && now >= cl->next_send_us) {
        creq *r = &cl->reqs[cl->n_sent];
        snprintf(r->id, sizeof r->id, "b%s%d", cl->policy, cl->n_sent);
        r->conn = cl->n_sent % cl->n_conns;
        send_request(cl, r, cl->prompt, cl->seed + (uint64_t)cl->n_sent);
        cl->n_sent++;
        if (cl->rate > 0)
            cl->next_send_us +=
                (uint64_t)(-log(1.0 - ifl_rng_uniform(&cl->arrivals)) / cl->rate * 1e6);
        else
            cl->next_send_us += (uint64_t)(cl->interval_ms * 1e3);
    }
    if (cl->n_sent < round_end)
        schedule(cl, cl->next_send_us);
}

static void schedule(client *cl, uint64_t at_us)
{
    uint64_t now = ifl_now_us();
    lws_sul_schedule(cl->ctx, 0, &cl->sul, on_timer, (lws_usec_t)(at_us > now ? at_us - now : 1));
}

static void start_round(client *cl)
{
    cl->round_base = cl->n_sent;
    cl->next_send_us = ifl_now_us();
    schedule(cl, cl->next_send_us);
}

static void progress(client *cl)
{
    if (!cl->bench)
        return;
    int32_t total = total_requests(cl);
    if (!isatty(2) && cl->n_done < total)
        return; /* not a terminal: only the final state */
    int width = 30, filled = total ? (int)((int64_t)width * cl->n_done / total) : width;
    fprintf(stderr, "\r  %-9s [", cl->policy);
    for (int i = 0; i < width; i++)
        fputc(i < filled ? '#' : '.', stderr);
    fprintf(stderr, "] %d/%d done", cl->n_done, total);
    if (cl->n_done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* A request finished (done frame or refusal): next round, or the end. */
static void request_finished(client *cl)
{
    cl->n_done++;
    progress(cl);
    int32_t total = total_requests(cl);
    if (!cl->bench) {
        if (cl->n_done - cl->round_base < 2)
            return;
        client_demo_draw(cl, 1);
        for (int k = 0; k < 2; k++)
            sb_free(&cl->reqs[cl->round_base + k].text);
        cl->round++;
        if (cl->rounds > 0 && cl->round >= cl->rounds) {
            cl->phase = 2;
            return;
        }
        if (ensure_reqs(cl, cl->n_sent + 2))
            return;
        cl->round_base = cl->n_sent;
        schedule(cl, ifl_now_us() + 1000000); /* a pause to read, then again */
        return;
    }
    if (cl->n_done >= total) {
        cl->phase = 2;
        return;
    }
    if (cl->rate <= 0 && cl->n_done == cl->n_sent && cl->n_sent % cl->concurrency == 0)
        start_round(cl);
}

/* ---- what the transports report ------------------------------------------------------------ */

void client_fail(client *cl, const char *fmt, ...)
{
    if (!cl->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(cl->error, sizeof cl->error, fmt, ap);
        va_end(ap);
    }
    cl->failed = 1;
    cl->phase = 2;
}

void client_start(client *cl)
{
    cl->phase = 1;
    start_round(cl);
}

struct lws *client_connect(client *cl, const char *path, const char *method, intptr_t tag,
                           struct lws **pwsi)
{
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = cl->ctx;
    ci.address = cl->address;
    ci.port = cl->port;
    ci.path = path;
    ci.host = cl->address;
    ci.origin = cl->address;
    ci.method = method;
    ci.local_protocol_name = "inflight-client";
    ci.opaque_user_data = (void *)tag;
    ci.pwsi = pwsi;
    struct lws *wsi = lws_client_connect_via_info(&ci);
    if (!wsi)
        client_fail(cl, "cannot connect to %s:%d", cl->address, cl->port);
    return wsi;
}

creq *client_find_req(client *cl, const char *id)
{
    /* ids are "<prefix><index>": the index is the request's slot */
    const char *p = id + strlen(id);
    while (p > id && p[-1] >= '0' && p[-1] <= '9')
        p--;
    long i = strtol(p, NULL, 10);
    if (*p && i >= 0 && i < cl->n_reqs && !strcmp(cl->reqs[i].id, id))
        return &cl->reqs[i];
    return NULL;
}

void client_on_token(client *cl, creq *r, const char *text, uint64_t now)
{
    if (r->done)
        return;
    if (r->tokens == 0) {
        r->t_first = now;
    } else if (cl->bench) {
        if (cl->n_itl == cl->cap_itl) {
            size_t cap = cl->cap_itl ? 2 * cl->cap_itl : 4096;
            double *p = realloc(cl->itl, cap * sizeof *p);
            if (p) {
                cl->itl = p;
                cl->cap_itl = cap;
            }
        }
        if (cl->n_itl < cl->cap_itl)
            cl->itl[cl->n_itl++] = (double)(now - r->t_last) / 1e3;
    }
    r->t_last = now;
    r->tokens++;
    if (!cl->bench && text) {
        sb_puts(&r->text, text);
        client_demo_draw(cl, 0);
    }
}

void client_on_done(client *cl, creq *r, const char *finish, uint64_t now)
{
    if (r->done)
        return;
    r->done = 1;
    r->t_done = now;
    snprintf(r->finish, sizeof r->finish, "%s", finish ? finish : "?");
    if (cl->api != CLIENT_API_WS) { /* the HTTP APIs carry no timing: ours, from the client */
        r->ttft_ms = r->tokens ? (double)(r->t_first - r->t_send) / 1e3 : 0;
        r->tps = r->tokens > 1 && r->t_last > r->t_first
                     ? (r->tokens - 1) / ((double)(r->t_last - r->t_first) / 1e6)
                     : 0;
    }
    request_finished(cl);
}

void client_on_refused(client *cl, creq *r, const char *code, const char *message, uint64_t now)
{
    if (r->done)
        return;
    fprintf(stderr, "\ninflight client: request %s refused: %s: %s\n", r->id, code ? code : "?",
            message ? message : "?");
    r->done = 1;
    r->failed = 1;
    r->t_done = now;
    request_finished(cl);
}

/* ---- results ------------------------------------------------------------------------------ */

static void summarize(client *cl, bench_result *o)
{
    memset(o, 0, sizeof *o);
    int32_t total = total_requests(cl);
    double *ttft = malloc((size_t)total * sizeof *ttft);
    uint64_t t0 = UINT64_MAX, t1 = 0;
    int32_t ok = 0;
    double last_sum = 0;
    for (int32_t i = 0; i < total && i < cl->n_reqs; i++) {
        creq *r = &cl->reqs[i];
        if (r->failed || !r->done || !r->tokens) {
            o->failed++;
            continue;
        }
        if (ttft)
            ttft[ok] = (double)(r->t_first - r->t_send) / 1e3;
        ok++;
        last_sum += (double)(r->t_done - r->t_send) / 1e6;
        o->tokens += r->tokens;
        t0 = r->t_send < t0 ? r->t_send : t0;
        t1 = r->t_done > t1 ? r->t_done : t1;
    }
    if (ttft)
        bench_ttft(o, ttft, (size_t)ok);
    free(ttft);
    bench_itl(o, cl->itl, cl->n_itl);
    o->last_mean = ok ? last_sum / ok : 0;
    o->wall_s = t1 > t0 ? (double)(t1 - t0) / 1e6 : 0;
    o->throughput = o->wall_s > 0 ? (double)o->tokens / o->wall_s : 0;
}

static void free_reqs(client *cl)
{
    for (int32_t i = 0; i < cl->n_reqs; i++) {
        sb_free(&cl->reqs[i].text);
        sb_free(&cl->reqs[i].body);
        sb_free(&cl->reqs[i].in);
    }
    free(cl->reqs);
    cl->reqs = NULL;
    cl->n_reqs = 0;
}

/* One run: connect, send the schedule, wait for every done, close. */
static int run_once(client *cl)
{
    /* one protocol, the transport's: lws hands a client connection's errors to protocols[0] */
    struct lws_protocols protocols[2];
    memset(protocols, 0, sizeof protocols);
    protocols[0].name = "inflight-client";
    protocols[0].callback = cl->api == CLIENT_API_WS ? client_ws_callback : client_http_callback;
    protocols[0].per_session_data_size = cl->api == CLIENT_API_WS ? sizeof(strbuf) : 0;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = protocols;
    info.user = cl;
    cl->ctx = lws_create_context(&info);
    if (!cl->ctx) {
        fprintf(stderr, "inflight client: cannot create the libwebsockets context\n");
        return 1;
    }
    if (ensure_reqs(cl, cl->bench ? total_requests(cl) : 2)) {
        fprintf(stderr, "inflight client: out of memory\n");
        lws_context_destroy(cl->ctx);
        return 1;
    }
    cl->phase = 0;
    cl->n_ready = cl->n_sent = cl->n_done = cl->round = cl->round_base = 0;
    cl->n_itl = 0;
    ifl_rng_seed(&cl->arrivals, cl->seed);
    if (cl->api == CLIENT_API_WS)
        client_ws_connect(cl); /* client_start once every socket said hello */
    else
        client_start(cl); /* a connection per request */
    progress(cl);
    while (cl->phase != 2 && !g_interrupted)
        if (lws_service(cl->ctx, 0) < 0)
            break;
    lws_sul_cancel(&cl->sul);
    lws_context_destroy(cl->ctx);
    cl->ctx = NULL;
    client_ws_free(cl);
    if (cl->failed) {
        fprintf(stderr, "inflight client: %s\n", cl->error[0] ? cl->error : "failed");
        return 1;
    }
    return g_interrupted ? 130 : 0;
}

static void lws_quiet(int level, const char *line)
{
    (void)level;
    (void)line;
}

int cmd_client(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, 0, 'u'},
        {"api", required_argument, 0, 'a'},
        {"api-key", required_argument, 0, 'k'},
        {"model", required_argument, 0, 'm'},
        {"max-tokens", required_argument, 0, 't'},
        {"temperature", required_argument, 0, 'T'},
        {"seed", required_argument, 0, 'S'},
        {"rounds", required_argument, 0, 'r'},
        {"prompt1", required_argument, 0, '1'},
        {"prompt2", required_argument, 0, '2'},
        {"bench", no_argument, 0, 'B'},
        {"concurrency", required_argument, 0, 'c'},
        {"interval-ms", required_argument, 0, 'i'},
        {"rate", required_argument, 0, 'R'},
        {"requests", required_argument, 0, 'n'},
        {"connections", required_argument, 0, 'C'},
        {"prompt", required_argument, 0, 'p'},
        {"no-ignore-eos", no_argument, 0, 'E'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *cmd = "client", *url = NULL, *model = NULL, *api = "ws";
    client cl;
    memset(&cl, 0, sizeof cl);
    cl.concurrency = 10;
    cl.n_open = 50;
    cl.interval_ms = 50;
    cl.prompt = "Hello, how are you?";
    cl.prompt1 = "Programming in C++ is like";
    cl.prompt2 = "Programming in Assembly is like";
    cl.ignore_eos = 1;
    cl.seed = 1;
    int32_t max_tokens = -1, rounds = -1, conns = 0;
    double temperature = -1;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 'u': url = optarg; break;
        case 'a': api = optarg; break;
        case 'k': cl.api_key = optarg; break;
        case 'm': model = optarg; break;
        case 't':
            if (cli_i32(cmd, "--max-tokens", optarg, 1, 1 << 20, &max_tokens))
                return 2;
            break;
        case 'T':
            if (cli_f64(cmd, "--temperature", optarg, 0, 2, &temperature))
                return 2;
            break;
        case 'S':
            if (cli_u64(cmd, "--seed", optarg, &cl.seed))
                return 2;
            break;
        case 'r':
            if (cli_i32(cmd, "--rounds", optarg, 1, 1000000, &rounds))
                return 2;
            break;
        case '1': cl.prompt1 = optarg; break;
        case '2': cl.prompt2 = optarg; break;
        case 'B': cl.bench = 1; break;
        case 'c':
            if (cli_i32(cmd, "--concurrency", optarg, 1, 100000, &cl.concurrency))
                return 2;
            break;
        case 'i':
            if (cli_f64(cmd, "--interval-ms", optarg, 0, 3.6e6, &cl.interval_ms))
                return 2;
            break;
        case 'R':
            if (cli_f64(cmd, "--rate", optarg, 1e-3, 1e6, &cl.rate))
                return 2;
            break;
        case 'n':
            if (cli_i32(cmd, "--requests", optarg, 1, 1000000, &cl.n_open))
                return 2;
            break;
        case 'C':
            if (cli_i32(cmd, "--connections", optarg, 1, 1024, &conns))
                return 2;
            break;
        case 'p': cl.prompt = optarg; break;
        case 'E': cl.ignore_eos = 0; break;
        case 'h': fputs(HELP, stdout); return 0;
        case ':': return cli_usage_error(cmd, "an option is missing its value");
        default: return cli_usage_error(cmd, "unknown option");
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument");
    cl.max_tokens = max_tokens > 0 ? max_tokens : cl.bench ? 32 : 48;
    cl.temperature = temperature >= 0 ? temperature : cl.bench ? 0 : 0.8;
    cl.rounds = rounds > 0 ? rounds : cl.bench ? 1 : 0;
    if (!cl.bench)
        cl.ignore_eos = 0;
    const char *policies[2];
    int n_pol = 0;
    if (!model)
        model = cl.bench ? "both" : "iterative";
    if (!strcmp(model, "both") && cl.bench) {
        policies[n_pol++] = "iterative";
        policies[n_pol++] = "static";
    } else if (!strcmp(model, "iterative") || !strcmp(model, "static")) {
        policies[n_pol++] = model;
    } else {
        return cli_usage_error(cmd, cl.bench ? "--model must be iterative, static or both"
                                             : "--model must be iterative or static");
    }
    if (!strcmp(api, "ws"))
        cl.api = CLIENT_API_WS;
    else if (!strcmp(api, "openai"))
        cl.api = CLIENT_API_OPENAI;
    else if (!strcmp(api, "triton"))
        cl.api = CLIENT_API_TRITON;
    else
        return cli_usage_error(cmd, "--api must be ws, openai or triton");
    if (cl.api_key && (!*cl.api_key || strlen(cl.api_key) > 512 || strpbrk(cl.api_key, " \t\r\n")))
        return cli_usage_error(cmd, "--api-key must be 1 to 512 characters without whitespace");
    int http = cl.api != CLIENT_API_WS;
    if (http && conns > 0)
        return cli_usage_error(cmd, "--connections is for --api ws (over HTTP each request has "
                                    "its own connection)");
    if (!url)
        url = http ? "http://127.0.0.1:8080" : "ws://127.0.0.1:8080/ws";
    /* scheme://host:port/path; lws_parse_uri drops the path's leading '/' */
    cl.url_buf = strdup(url);
    const char *prot = NULL, *path = NULL;
    if (!cl.url_buf || lws_parse_uri(cl.url_buf, &prot, &cl.address, &cl.port, &path) ||
        strcmp(prot, http ? "http" : "ws")) {
        free(cl.url_buf);
        return cli_usage_error(cmd, http ? "--url must look like http://HOST:PORT for --api "
                                           "openai and triton"
                                         : "--url must look like ws://HOST:PORT/ws");
    }
    char pathbuf[512];
    size_t pl = strlen(path);
    while (http && pl && path[pl - 1] == '/')
        pl--; /* a prefix: /v1/... and /v2/... follow it */
    if (pl >= sizeof pathbuf - 1) {
        free(cl.url_buf);
        return cli_usage_error(cmd, "--url: the path is too long");
    }
    if (http)
        snprintf(pathbuf, sizeof pathbuf, "%s%.*s", pl ? "/" : "", (int)pl, path);
    else
        snprintf(pathbuf, sizeof pathbuf, "/%s", path);
    cl.path = pathbuf;
    if (cl.bench)
        cl.n_conns = conns > 0     ? conns
                     : cl.rate > 0 ? (cl.n_open < 64 ? cl.n_open : 64)
                                   : (cl.concurrency < 64 ? cl.concurrency : 64);
    else
        cl.n_conns = 1;
    cl.tty = isatty(1);
    lws_set_log_level(LLL_ERR, lws_quiet);
    g_cl = &cl;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    int rc = 0, any_failed = 0;
    bench_result res[2];
    if (cl.bench) {
        if (http)
            printf("inflight client --bench: %s (%s API, a connection per request); prompt "
                   "\"%s\", max_tokens %d%s\n",
                   url, api, cl.prompt, cl.max_tokens, cl.ignore_eos ? " (ignore_eos)" : "");
        else
            printf("inflight client --bench: %s; prompt \"%s\", max_tokens %d%s, %d "
                   "connection(s)\n",
                   url, cl.prompt, cl.max_tokens, cl.ignore_eos ? " (ignore_eos)" : "", cl.n_conns);
        if (cl.rate > 0)
            printf("  open loop: %d requests, Poisson arrivals at %.2f/s\n", cl.n_open, cl.rate);
        else
            printf("  closed loop: %d round(s) of %d requests sent %.0f ms apart\n", cl.rounds,
                   cl.concurrency, cl.interval_ms);
        fflush(stdout);
    }
    for (int k = 0; k < n_pol && rc == 0; k++) {
        cl.policy = policies[k];
        cl.failed = 0;
        rc = run_once(&cl);
        if (cl.bench && rc == 0) {
            summarize(&cl, &res[k]);
            res[k].requests = total_requests(&cl);
            bench_result_print(cl.policy, &res[k]);
            any_failed |= res[k].failed > 0;
        }
        free_reqs(&cl);
    }
    if (cl.bench && rc == 0 && n_pol == 2)
        bench_compare_print(&res[0], &res[1]);
    free(cl.itl);
    free(cl.url_buf);
    g_cl = NULL;
    if (rc == 0 && any_failed) {
        fprintf(stderr, "inflight client: some requests failed (above)\n");
        rc = 1;
    }
    return rc == 130 ? 0 : rc;
}
