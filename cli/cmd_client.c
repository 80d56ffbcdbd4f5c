/* cmd_client.c: `inflight client`: a libwebsockets client of a running `inflight serve`.
 *
 * Demo (default): the seed's terminal demo over the real WebSocket: "Programming in C++ is like"
 * and "Programming in Assembly is like" sent 50 ms apart to one policy, streamed side by side in
 * two columns, again and again until Ctrl+C (--rounds N to stop after N).
 * --bench: the seed's profiler against the server: closed loop (rounds of N requests sent
 * --interval-ms apart, each round waiting for its requests) or open loop (--rate: Poisson
 * arrivals), over --connections sockets; prints throughput, time to first token, inter-token
 * latency percentiles and mean time to last response, with a progress bar on stderr.
 * Everything runs on one thread: the lws service loop, with lws_sul timers for the send schedule.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <libwebsockets.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "bench_report.h"
#include "cli.h"
#include "rng.h"
#include "strbuf.h"
#include "util.h"

static const char *const HELP =
    "usage: inflight client [options]           (the two-column demo)\n"
    "       inflight client --bench [options]   (the profiler)\n"
    "\n"
    "  --url URL           the server's WebSocket (default ws://127.0.0.1:8080/ws)\n"
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
    "  --connections N     sockets to spread requests over (default: one per concurrent request,\n"
    "                      at most 64)\n"
    "  --prompt TEXT       (default \"Hello, how are you?\")\n"
    "  --no-ignore-eos     stop at <|endoftext|> (default: ignore it, as the seed's profile "
    "does)\n";

typedef struct {
    char id[24];
    int conn;
    uint64_t t_send, t_first, t_last, t_done;
    int32_t tokens;
    int done, failed;
    char finish[16];
    strbuf text; /* demo */
    double ttft_ms_server, tps_server;
} creq;

typedef struct {
    struct lws *wsi;
    int ready;
    int closed;
    strbuf *outq; /* frames to send (ring of pending JSON) */
    int n_out, cap_out, head_out;
} cconn;

typedef struct {
    struct lws_context *ctx;
    char *url_buf;
    const char *address, *path;
    int port;
    int bench;
    /* parameters */
    const char *policy;
    int32_t max_tokens;
    double temperature;
    uint64_t seed;
    int ignore_eos;
    int32_t concurrency, rounds, n_open, n_conns;
    double interval_ms, rate;
    const char *prompt, *prompt1, *prompt2;
    /* state */
    cconn *conns;
    int n_ready, n_closed;
    creq *reqs;
    int32_t n_reqs, n_sent, n_done, round_base, round;
    uint64_t next_send_us;
    ifl_rng arrivals;
    double *itl;
    size_t n_itl, cap_itl;
    lws_sorted_usec_list_t sul;
    int phase; /* 0 connecting, 1 running, 2 finished */
    int failed;
    char error[256];
    int tty;
} client;

static volatile sig_atomic_t g_interrupted;
static client *g_cl;

static void on_sigint(int sig)
{
    (void)sig;
    g_interrupted = 1;
    if (g_cl && g_cl->ctx)
        lws_cancel_service(g_cl->ctx);
}

/* ---- sending ----------------------------------------------------------------------------- */

static void conn_queue(client *cl, int ci, strbuf *sb)
{
    cconn *c = &cl->conns[ci];
    if (c->n_out == c->cap_out) {
        int cap = c->cap_out ? 2 * c->cap_out : 16;
        strbuf *q = malloc((size_t)cap * sizeof *q);
        if (!q) {
            sb_free(sb);
            return;
        }
        for (int i = 0; i < c->n_out; i++)
            q[i] = c->outq[(c->head_out + i) % c->cap_out];
        free(c->outq);
        c->outq = q;
        c->cap_out = cap;
        c->head_out = 0;
    }
    c->outq[(c->head_out + c->n_out) % c->cap_out] = *sb;
    c->n_out++;
    lws_callback_on_writable(c->wsi);
}

static void send_generate(client *cl, creq *r, const char *prompt, uint64_t seed)
{
    strbuf sb;
    sb_init(&sb, LWS_PRE);
    sb_puts(&sb, "{\"type\":\"generate\",\"id\":");
    sb_json_str(&sb, r->id, strlen(r->id));
    sb_puts(&sb, ",\"prompt\":");
    sb_json_str(&sb, prompt, strlen(prompt));
    sb_printf(&sb, ",\"model\":\"%s\",\"max_tokens\":%d,\"temperature\":%g,\"seed\":%llu%s}",
              cl->policy, cl->max_tokens, cl->temperature, (unsigned long long)seed,
              cl->ignore_eos ? ",\"ignore_eos\":true" : "");
    r->t_send = ifl_now_us();
    conn_queue(cl, r->conn, &sb);
}

/* ---- the demo's two columns ----------------------------------------------------------------- */

static int term_width(void)
{
    struct winsize w;
    if (ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40)
        return w.ws_col;
    return 100;
}

/* Splits text into lines of at most `width` characters (UTF-8 aware, breaks at newlines). */
static int wrap_lines(const char *s, size_t n, int width, const char **starts, size_t *lens,
                      int max_lines)
{
    int lines = 0;
    size_t i = 0;
    while (i < n && lines < max_lines) {
        size_t start = i;
        int cols = 0;
        size_t last_space = 0;
        while (i < n && s[i] != '\n' && cols < width) {
            if (s[i] == ' ')
                last_space = i;
            i++;
            while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
                i++;
            cols++;
        }
        if (i < n && s[i] != '\n' && last_space > start && cols >= width)
            i = last_space + 1;
        starts[lines] = s + start;
        lens[lines] = i - start;
        while (lens[lines] > 0 && (s[start + lens[lines] - 1] == '\n'))
            lens[lines]--;
        lines++;
        if (i < n && s[i] == '\n')
            i++;
    }
    return lines;
}

static void demo_draw(client *cl, int final)
{
    if (!cl->tty && !final)
        return;
    int w = term_width(), colw = (w - 3) / 2;
    enum { MAXL = 64 };
    const char *st[2][MAXL];
    size_t ln[2][MAXL];
    int nl[2];
    const char *prompts[2] = {cl->prompt1, cl->prompt2};
    strbuf out;
    sb_init(&out, 0);
    if (cl->tty)
        sb_puts(&out, "\x1b[H\x1b[2J");
    sb_printf(&out, "inflight client: %s, round %d (Ctrl+C to stop)\n\n", cl->policy,
              cl->round + 1);
    for (int k = 0; k < 2; k++) {
        creq *r = &cl->reqs[cl->round_base + k];
        strbuf t;
        sb_init(&t, 0);
        sb_puts(&t, prompts[k]);
        if (r->text.len)
            sb_append(&t, sb_text(&r->text), r->text.len);
        nl[k] = wrap_lines(sb_text(&t) ? sb_text(&t) : "", t.len, colw, st[k], ln[k], MAXL);
        /* the wrapped lines point into t: copy them out before t goes */
        for (int i = 0; i < nl[k]; i++) {
            char *cp = malloc(ln[k][i] + 1);
            if (cp) {
                memcpy(cp, st[k][i], ln[k][i]);
                cp[ln[k][i]] = 0;
            }
            st[k][i] = cp ? cp : "";
            if (!cp)
                ln[k][i] = 0;
        }
        sb_free(&t);
    }
    int rows = nl[0] > nl[1] ? nl[0] : nl[1];
    for (int i = 0; i < rows; i++) {
        for (int k = 0; k < 2; k++) {
            size_t len = i < nl[k] ? ln[k][i] : 0;
            int cols = 0;
            for (size_t j = 0; j < len; j++)
                cols += ((unsigned char)st[k][i][j] & 0xC0) != 0x80;
            if (len)
                sb_append(&out, st[k][i], len);
            for (; cols < colw; cols++)
                sb_puts(&out, " ");
            if (!k)
                sb_puts(&out, " | ");
        }
        sb_puts(&out, "\n");
    }
    sb_puts(&out, "\n");
    for (int k = 0; k < 2; k++) {
        creq *r = &cl->reqs[cl->round_base + k];
        char info[160];
        if (r->done)
            snprintf(info, sizeof info, "%s: %d tokens, ttft %.0f ms, %.0f tok/s", r->finish,
                     r->tokens, r->ttft_ms_server, r->tps_server);
        else
            snprintf(info, sizeof info, "%s %d tokens", r->tokens ? "streaming" : "waiting",
                     r->tokens);
        sb_printf(&out, "%-*s%s", colw, info, k ? "\n" : " | ");
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nl[k]; i++)
            if (ln[k][i])
                free((void *)st[k][i]);
    if (sb_ok(&out))
        fwrite(sb_text(&out), 1, out.len, stdout);
    fflush(stdout);
    sb_free(&out);
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
        send_generate(cl, r, k ? cl->prompt2 : cl->prompt1,
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
        send_generate(cl, r, cl->prompt, cl->seed + (uint64_t)cl->n_sent);
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
        demo_draw(cl, 1);
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

/* ---- frames from the server --------------------------------------------------------------- */

static creq *find_req(client *cl, const char *id)
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

static void on_frame(client *cl, int ci, const char *text, size_t len)
{
    uint64_t now = ifl_now_us();
    cJSON *m = cJSON_ParseWithLength(text, len);
    if (!m)
        return;
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "type"));
    const char *id = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "id"));
    creq *r = id ? find_req(cl, id) : NULL;
    if (!type)
        goto out;
    if (!strcmp(type, "hello")) {
        if (!cl->conns[ci].ready) {
            cl->conns[ci].ready = 1;
            cl->n_ready++;
        }
        if (cl->n_ready == cl->n_conns && cl->phase == 0) {
            cl->phase = 1;
            start_round(cl);
        }
    } else if (!strcmp(type, "token") && r) {
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "text"));
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
        if (!cl->bench && t) {
            sb_puts(&r->text, t);
            demo_draw(cl, 0);
        }
    } else if (!strcmp(type, "done") && r && !r->done) {
        r->done = 1;
        r->t_done = now;
        const char *f = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "finish_reason"));
        snprintf(r->finish, sizeof r->finish, "%s", f ? f : "?");
        const cJSON *timing = cJSON_GetObjectItemCaseSensitive(m, "timing");
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(timing, "ttft_ms");
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(timing, "tokens_per_s");
        r->ttft_ms_server = cJSON_IsNumber(tt) ? tt->valuedouble : 0;
        r->tps_server = cJSON_IsNumber(tp) ? tp->valuedouble : 0;
        request_finished(cl);
    } else if (!strcmp(type, "error")) {
        const char *msg = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "message"));
        const char *code = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "code"));
        fprintf(stderr, "\ninflight client: request %s refused: %s: %s\n", id ? id : "-",
                code ? code : "?", msg ? msg : "?");
        if (r && !r->done) {
            r->done = 1;
            r->failed = 1;
            r->t_done = now;
            request_finished(cl);
        }
    }
out:
    cJSON_Delete(m);
}

static int client_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len)
{
    client *cl = lws_context_user(lws_get_context(wsi));
    int ci = (int)(intptr_t)lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        snprintf(cl->error, sizeof cl->error, "cannot connect: %s",
                 in ? (const char *)in : "connection refused");
        cl->failed = 1;
        cl->phase = 2;
        cl->conns[ci].closed = 1;
        cl->conns[ci].wsi = NULL;
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        /* reassemble fragments in a per-connection buffer */
        strbuf *b = &((strbuf *)user)[0];
        if (lws_is_first_fragment(wsi))
            sb_reset(b);
        sb_append(b, in, len);
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi) && sb_ok(b))
            on_frame(cl, ci, sb_text(b), b->len);
        break;
    }
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        cconn *c = &cl->conns[ci];
        if (!c->n_out)
            break;
        strbuf *sb = &c->outq[c->head_out];
        int n = lws_write(wsi, (unsigned char *)sb_text(sb), sb->len, LWS_WRITE_TEXT);
        int ok = n >= (int)sb->len;
        sb_free(sb);
        c->head_out = (c->head_out + 1) % c->cap_out;
        c->n_out--;
        if (!ok)
            return -1;
        if (c->n_out)
            lws_callback_on_writable(wsi);
        break;
    }
    case LWS_CALLBACK_CLIENT_CLOSED: {
        cconn *c = &cl->conns[ci];
        c->closed = 1;
        c->wsi = NULL;
        if (cl->phase != 2) {
            if (!cl->error[0])
                snprintf(cl->error, sizeof cl->error, "the server closed the connection");
            cl->failed = 1;
            cl->phase = 2;
        }
        break;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE: {
        if (len >= 2 && cl->phase != 2) {
            const unsigned char *p = in;
            snprintf(cl->error, sizeof cl->error, "the server closed the connection: %d %.*s",
                     (p[0] << 8) | p[1], (int)(len - 2), (const char *)p + 2);
        }
        break;
    }
    case LWS_CALLBACK_CLOSED_CLIENT_HTTP:
    case LWS_CALLBACK_WSI_DESTROY:
        if (user)
            sb_free((strbuf *)user);
        break;
    default: break;
    }
    return 0;
}

static const struct lws_protocols client_protocols[] = {
    {"inflight-client", client_callback, sizeof(strbuf), 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

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

/* One run: connect, send the schedule, wait for every done, close. */
static int run_once(client *cl)
{
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = client_protocols;
    info.user = cl;
    cl->ctx = lws_create_context(&info);
    if (!cl->ctx) {
        fprintf(stderr, "inflight client: cannot create the libwebsockets context\n");
        return 1;
    }
    cl->conns = calloc((size_t)cl->n_conns, sizeof *cl->conns);
    int32_t total = total_requests(cl);
    if (!cl->conns || ensure_reqs(cl, cl->bench ? total : 2)) {
        fprintf(stderr, "inflight client: out of memory\n");
        lws_context_destroy(cl->ctx);
        return 1;
    }
    cl->phase = 0;
    cl->n_ready = cl->n_sent = cl->n_done = cl->round = cl->round_base = 0;
    cl->n_itl = 0;
    ifl_rng_seed(&cl->arrivals, cl->seed);
    for (int i = 0; i < cl->n_conns; i++) {
        struct lws_client_connect_info ci;
        memset(&ci, 0, sizeof ci);
        ci.context = cl->ctx;
        ci.address = cl->address;
        ci.port = cl->port;
        ci.path = cl->path;
        ci.host = cl->address;
        ci.origin = cl->address;
        ci.local_protocol_name = "inflight-client";
        ci.opaque_user_data = (void *)(intptr_t)i;
        ci.pwsi = &cl->conns[i].wsi;
        if (!lws_client_connect_via_info(&ci)) {
            fprintf(stderr, "inflight client: cannot connect to %s:%d\n", cl->address, cl->port);
            cl->failed = 1;
            cl->phase = 2;
            break;
        }
    }
    progress(cl);
    while (cl->phase != 2 && !g_interrupted)
        if (lws_service(cl->ctx, 0) < 0)
            break;
    lws_sul_cancel(&cl->sul);
    lws_context_destroy(cl->ctx);
    cl->ctx = NULL;
    for (int i = 0; i < cl->n_conns; i++) {
        cconn *c = &cl->conns[i];
        for (int k = 0; k < c->n_out; k++)
            sb_free(&c->outq[(c->head_out + k) % c->cap_out]);
        free(c->outq);
    }
    free(cl->conns);
    cl->conns = NULL;
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
    const char *cmd = "client", *url = "ws://127.0.0.1:8080/ws", *model = NULL;
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
    /* ws://host:port/path */
    cl.url_buf = strdup(url);
    const char *prot = NULL, *path = NULL;
    if (!cl.url_buf || lws_parse_uri(cl.url_buf, &prot, &cl.address, &cl.port, &path) ||
        strcmp(prot, "ws")) {
        free(cl.url_buf);
        return cli_usage_error(cmd, "--url must look like ws://HOST:PORT/ws");
    }
    char pathbuf[512];
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

    int rc = 0;
    bench_result res[2];
    if (cl.bench) {
        printf("inflight client --bench: %s; prompt \"%s\", max_tokens %d%s, %d connection(s)\n",
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
        }
        for (int32_t i = 0; i < cl.n_reqs; i++)
            sb_free(&cl.reqs[i].text);
        free(cl.reqs);
        cl.reqs = NULL;
        cl.n_reqs = 0;
    }
    if (cl.bench && rc == 0 && n_pol == 2)
        bench_compare_print(&res[0], &res[1]);
    free(cl.itl);
    free(cl.url_buf);
    g_cl = NULL;
    return rc == 130 ? 0 : rc;
}
