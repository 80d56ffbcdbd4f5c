/* cmd_client.c: `inflight client`: a client of a running `inflight serve`, over /ws (default) or,
 * with --api openai|triton, the HTTP APIs (the table in client_api.c; client_ws.c, client_http.c).
 * Demo (default): the seed's terminal demo: "Programming in C++ is like" and "Programming in
 * Assembly is like" sent 50 ms apart to one policy, streamed side by side in two columns
 * (client_demo.c), again and again until Ctrl+C (--rounds N to stop after N).
 * --bench: the seed's profiler against the server: closed loop (rounds of N requests sent
 * --interval-ms apart, each round waiting for its requests) or open loop (--rate: Poisson
 * arrivals); prints throughput, time to first token, inter-token latency percentiles and mean
 * time to last response, with a progress bar on stderr. This file holds the option table, the
 * send schedule (lws_sul timers on the one lws service thread) and the figures.
 */
#include <stddef.h>
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

static const char *const USAGE =
    "usage: inflight client [options]           (the two-column demo)\n"
    "       inflight client --bench [options]   (the profiler)\n"
    "\n";

/* The demo's and the profiler's defaults where they differ (-1 / NULL in the options: unset). */
#define DEMO_MAX_TOKENS 48
#define BENCH_MAX_TOKENS 32
#define DEMO_TEMPERATURE 0.8
#define BENCH_TEMPERATURE 0
#define BENCH_MAX_CONNECTIONS 64

typedef struct {
    client cl;
    const char *url, *model, *api;
    int32_t max_tokens, rounds, conns;
    double temperature;
} client_opts;

#define ROW(NAME, TYPE, ARG, LO, HI, F, HELP)                                                      \
    CLI_ROW(NAME, 0, TYPE, ARG, LO, HI, client_opts, F, HELP)
#define DEF(NAME, TYPE, ARG, LO, HI, F, DEF_, DEF_TEXT, HELP)                                      \
    {                                                                                              \
        .name = NAME, .type = TYPE, .arg = ARG, .lo = LO, .hi = HI, .def = DEF_,                   \
        .def_text = DEF_TEXT, .off = offsetof(client_opts, F), .help = HELP                        \
    }
/* clang-format off */
static const cli_opt OPTS[] = {
    {.name = "api", .type = CLI_WORD, .words = "ws|openai|triton", .def = "ws",
     .off = offsetof(client_opts, api),
     .help = "our /ws protocol, OpenAI's /v1/completions or Triton's generate_stream, both "
             "streamed as SSE"},
    DEF("url", CLI_STR, "URL", 0, 0, url, NULL,
        "ws://127.0.0.1:8080/ws for ws, http://127.0.0.1:8080 for openai and triton",
        "the server: ws://HOST:PORT/ws for ws, http://HOST:PORT[/PREFIX] for openai and triton"),
    ROW("api-key", CLI_STR, "KEY", 0, 0, cl.api_key,
        "when the server wants one (serve --api-key): Authorization: Bearer over HTTP, ?api_key= "
        "on /ws"),
    DEF("model", CLI_STR, "M", 0, 0, model, NULL, "iterative; --bench: both",
        "iterative | static; --bench: also both"),
    {.name = "max-tokens", .letter = 'n', .type = CLI_I32, .arg = "N", .lo = 1, .hi = 1 << 20,
     .def_text = "demo " IFL_STR(DEMO_MAX_TOKENS) ", bench " IFL_STR(BENCH_MAX_TOKENS),
     .off = offsetof(client_opts, max_tokens), .flags = CLI_FROM_REQUEST, .help = "per request"},
    {.name = "temperature", .type = CLI_F64, .arg = "X", .lo = 0, .hi = 2,
     .def_text = "demo " IFL_STR(DEMO_TEMPERATURE) ", bench " IFL_STR(
         BENCH_TEMPERATURE) " = greedy",
     .off = offsetof(client_opts, temperature), .flags = CLI_FROM_REQUEST,
     .help = "sampling temperature"},
    {.name = "seed", .type = CLI_U64, .arg = "N", .def = "1", .off = offsetof(client_opts, cl.seed),
     .flags = CLI_FROM_REQUEST,
     .help = "demo: seed of the first round (then +1 per round); bench: of request 0"},
    {.name = "bench", .type = CLI_FLAG, .off = offsetof(client_opts, cl.bench),
     .help = "run the profiler instead of the demo"},
    DEF("rounds", CLI_I32, "N", 1, 1000000, rounds, NULL, "demo: until Ctrl+C; bench: 1",
        "demo: stop after N rounds; bench: rounds"),
    {.name = NULL, .type = CLI_HEADING, .help = "demo:"},
    DEF("prompt1", CLI_STR, "TEXT", 0, 0, cl.prompt1, "Programming in C++ is like", NULL,
        "the left column's prompt"),
    DEF("prompt2", CLI_STR, "TEXT", 0, 0, cl.prompt2, "Programming in Assembly is like", NULL,
        "the right column's prompt"),
    {.name = NULL, .type = CLI_HEADING, .help = "bench:"},
    DEF("concurrency", CLI_I32, "N", 1, 100000, cl.concurrency, "10", NULL, "requests per round"),
    DEF("interval-ms", CLI_F64, "X", 0, 3.6e6, cl.interval_ms, "50", NULL,
        "between sends in a round"),
    DEF("rate", CLI_F64, "R", 1e-3, 1e6, cl.rate, NULL, "off: closed loop",
        "open loop: R requests per second, Poisson arrivals"),
    DEF("requests", CLI_I32, "N", 1, 1000000, cl.n_open, "50", NULL, "open loop: how many"),
    DEF("connections", CLI_I32, "N", 1, 1024, conns, NULL,
        "one per concurrent request, at most " IFL_STR(BENCH_MAX_CONNECTIONS),
        "ws: sockets to spread requests over"),
    DEF("prompt", CLI_STR, "TEXT", 0, 0, cl.prompt, "Hello, how are you?", NULL, "the prompt"),
    DEF("no-ignore-eos", CLI_FLAG_OFF, NULL, 0, 0, cl.ignore_eos, "1",
        "ignore it, as the seed's profile does", "stop at <|endoftext|>"),
};
/* clang-format on */
#undef ROW
#undef DEF

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
        cl->api->send(cl, r, k ? cl->prompt2 : cl->prompt1,
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
        cl->api->send(cl, r, cl->prompt, cl->seed + (uint64_t)cl->n_sent);
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
    if (!cl->api->server_timing) { /* the API carries no timing: ours, from the client */
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

void client_on_event(client *cl, creq *r, const client_event *ev, uint64_t now)
{
    if (!r) {
        if (ev->kind == CLIENT_EV_ERROR)
            fprintf(stderr, "\ninflight client: the server said: %s: %s\n",
                    ev->code ? ev->code : "?", ev->message ? ev->message : "?");
        return;
    }
    switch (ev->kind) {
    case CLIENT_EV_TOKEN: client_on_token(cl, r, ev->text, now); break;
    case CLIENT_EV_DONE:
        if (r->done)
            break;
        if (cl->api->server_timing) {
            r->ttft_ms = ev->ttft_ms;
            r->tps = ev->tps;
        }
        client_on_done(cl, r, ev->finish, now);
        break;
    case CLIENT_EV_ERROR: client_on_refused(cl, r, ev->code, ev->message, now); break;
    default: break;
    }
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
    protocols[0].callback = cl->api->callback;
    protocols[0].per_session_data_size = cl->api->per_session_size;
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
    cl->api->start(cl); /* client_start once ready */
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

/* The options that depend on others (--bench, --api); fills policies. 0, or 2 after saying why. */
static int settle_options(client_opts *o, const char *policies[2], int *n_pol)
{
    const char *cmd = "client";
    client *cl = &o->cl;
    cl->max_tokens = o->max_tokens > 0 ? o->max_tokens
                     : cl->bench       ? BENCH_MAX_TOKENS
                                       : DEMO_MAX_TOKENS;
    cl->temperature = o->temperature >= 0 ? o->temperature
                      : cl->bench         ? BENCH_TEMPERATURE
                                          : DEMO_TEMPERATURE;
    cl->rounds = o->rounds > 0 ? o->rounds : cl->bench ? 1 : 0;
    if (!cl->bench)
        cl->ignore_eos = 0;
    const char *model = o->model ? o->model : cl->bench ? "both" : "iterative";
    *n_pol = 0;
    if (!strcmp(model, "both") && cl->bench) {
        policies[(*n_pol)++] = "iterative";
        policies[(*n_pol)++] = "static";
    } else if (!strcmp(model, "iterative") || !strcmp(model, "static")) {
        policies[(*n_pol)++] = model;
    } else {
        return cli_usage_error(cmd, cl->bench ? "--model must be iterative, static or both"
                                              : "--model must be iterative or static");
    }
    cl->api = client_api_find(o->api); /* one of OPTS's words: each has its row */
    if (!cl->api)
        return cli_usage_error(cmd, "--api: no such API");
    const char *key = cl->api_key;
    if (key && (!*key || strlen(key) > 512 || strpbrk(key, " \t\r\n")))
        return cli_usage_error(cmd, "--api-key must be 1 to 512 characters without whitespace");
    if (cl->api->http && o->conns > 0)
        return cli_usage_error(cmd, "--connections is for --api ws (over HTTP each request has "
                                    "its own connection)");
    if (!o->url)
        o->url = cl->api->default_url;
    int32_t most = cl->rate > 0 ? cl->n_open : cl->concurrency;
    cl->n_conns = !cl->bench                     ? 1
                  : o->conns > 0                 ? o->conns
                  : most < BENCH_MAX_CONNECTIONS ? most
                                                 : BENCH_MAX_CONNECTIONS;
    return 0;
}

/* --url into cl's address, port and path (in pathbuf); 0, or 2 after saying what is wrong. */
static int parse_url(client *cl, const char *url, char *pathbuf, size_t cap)
{
    const char *cmd = "client";
    int http = cl->api->http;
    /* scheme://host:port/path; lws_parse_uri drops the path's leading '/' */
    cl->url_buf = strdup(url);
    const char *prot = NULL, *path = NULL;
    if (!cl->url_buf || lws_parse_uri(cl->url_buf, &prot, &cl->address, &cl->port, &path) ||
        strcmp(prot, http ? "http" : "ws"))
        return cli_usage_error(cmd, http ? "--url must look like http://HOST:PORT for --api "
                                           "openai and triton"
                                         : "--url must look like ws://HOST:PORT/ws");
    size_t pl = strlen(path);
    while (http && pl && path[pl - 1] == '/')
        pl--; /* a prefix: /v1/... and /v2/... follow it */
    if (pl >= cap - 1)
        return cli_usage_error(cmd, "--url: the path is too long");
    if (http)
        snprintf(pathbuf, cap, "%s%.*s", pl ? "/" : "", (int)pl, path);
    else
        snprintf(pathbuf, cap, "/%s", path);
    cl->path = pathbuf;
    return 0;
}

static void print_bench_header(const client *cl, const char *url)
{
    if (cl->api->http)
        printf("inflight client --bench: %s (%s API, a connection per request); prompt "
               "\"%s\", max_tokens %d%s\n",
               url, cl->api->name, cl->prompt, cl->max_tokens,
               cl->ignore_eos ? " (ignore_eos)" : "");
    else
        printf("inflight client --bench: %s; prompt \"%s\", max_tokens %d%s, %d "
               "connection(s)\n",
               url, cl->prompt, cl->max_tokens, cl->ignore_eos ? " (ignore_eos)" : "", cl->n_conns);
    if (cl->rate > 0)
        printf("  open loop: %d requests, Poisson arrivals at %.2f/s\n", cl->n_open, cl->rate);
    else
        printf("  closed loop: %d round(s) of %d requests sent %.0f ms apart\n", cl->rounds,
               cl->concurrency, cl->interval_ms);
    fflush(stdout);
}

/* The demo or the profile of each policy in turn (and, for two, their comparison); the exit
 * status. */
static int run_policies(client *cl, const char *const *policies, int n_pol)
{
    int rc = 0, any_failed = 0;
    bench_result res[2];
    for (int k = 0; k < n_pol && rc == 0; k++) {
        cl->policy = policies[k];
        cl->failed = 0;
        rc = run_once(cl);
        if (cl->bench && rc == 0) {
            summarize(cl, &res[k]);
            res[k].requests = total_requests(cl);
            bench_result_print(cl->policy, &res[k]);
            any_failed |= res[k].failed > 0;
        }
        free_reqs(cl);
    }
    if (cl->bench && rc == 0 && n_pol == 2)
        bench_compare_print(&res[0], &res[1]);
    if (rc == 0 && any_failed) {
        fprintf(stderr, "inflight client: some requests failed (above)\n");
        rc = 1;
    }
    return rc == 130 ? 0 : rc;
}

int cmd_client(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("client", USAGE, OPTS, NULL, NULL);
    client_opts o = {.max_tokens = -1, .temperature = -1, .rounds = -1}; /* -1: unset */
    int st = cli_parse(&spec, argc, argv, 1, &o, sizeof o);
    if (st >= 0)
        return st;
    client *cl = &o.cl;
    const char *policies[2];
    int n_pol;
    char pathbuf[512];
    if (settle_options(&o, policies, &n_pol))
        return 2;
    if (parse_url(cl, o.url, pathbuf, sizeof pathbuf)) {
        free(cl->url_buf);
        return 2;
    }
    cl->tty = isatty(1);
    lws_set_log_level(LLL_ERR, lws_quiet);
    g_cl = cl;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (cl->bench)
        print_bench_header(cl, o.url);
    int rc = run_policies(cl, policies, n_pol);
    free(cl->itl);
    free(cl->url_buf);
    g_cl = NULL;
    return rc;
}
