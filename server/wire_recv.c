/* wire_recv.c: where the wire guard (wire_guard.h) gets the bytes. libwebsockets 4.1.6 reads every
 * plain socket with recv() (lws_ssl_capable_read_no_ssl), and this program defines recv: the
 * dynamic linker binds the library's calls to an executable's definition first, and the real one
 * is the next definition after it (dlsym RTLD_NEXT: libc's, or a sanitizer's interceptor).
 *
 * Only the thread that serves (wire_recv_bind) and only the descriptors its accepted sockets were
 * given (sockets_instantiated) are looked at; every other call passes straight through.
 *
 * One HTTP request at a time: a request head is peeked and read only through the end of its
 * request (head and Content-Length body), so lws never holds a byte of the next one; until the
 * answer is complete nothing more is handed to lws (held(): a request pipelined behind it closes
 * the connection after the answer). Empty lines between requests are dropped. Each read also
 * feeds the request's deadlines and the connection limit's accounting (sockets_read).
 *
 * On a verdict the guard answers for lws, which never sees the offending bytes:
 *   HTTP (431, 414, 400)  a JSON error in the API's shape naming what was wrong (wire_answer),
 *                         "connection: close", our side shut for writing; then whatever the
 *                         client still sends is read and dropped until it closes (so our answer
 *                         is not lost to a reset), at most WIRE_DRAIN_MAX bytes, and lws's header
 *                         timeout ends a client that does neither;
 *   an unmasked frame     a close frame with 1002 and the reason, then the end of the
 *                         connection (RFC 6455 5.1: the server must fail it). */
#include "wire_recv.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <sys/uio.h>

#include "http_api.h"
#include "service.h"
#include "sockets.h"

#define WIRE_DRAIN_MAX (1u << 20)

typedef ssize_t (*recv_fn)(int, void *, size_t, int);

static recv_fn real_recv;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;
static _Thread_local server *tl_server;

static void find_real_recv(void)
{
    real_recv = (recv_fn)dlsym(RTLD_NEXT, "recv");
}

void wire_recv_bind(server *s)
{
    tl_server = s;
}

/* Everything the client still sends, read and dropped: -1 with errno EAGAIN while it may send
 * more (lws waits), 0 once it closed or sent too much (lws closes). */
static ssize_t drain(wire_conn *wc, int fd, void *buf, size_t len, int flags)
{
    for (;;) {
        ssize_t n = real_recv(fd, buf, len, flags);
        if (n <= 0)
            return n;
        wc->drained += (uint64_t)n;
        if (wc->drained > WIRE_DRAIN_MAX)
            return 0;
    }
}

static const char *reason_phrase(int status)
{
    switch (status) {
    case 408: return "Request Timeout";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Bad Request";
    }
}

void wire_answer(int fd, const wire_state *w, ifl_code code, const char *why, int retry_after_s)
{
    int status = ifl_code_get(code)->http_status;
    strbuf body;
    sb_init(&body, 0);
    API_FRONT_ENDS[w->api < REQ_N_APIS ? w->api : REQ_API_WS].write_error(&body, status, code,
                                                                          why);
    sb_puts(&body, "\n");
    char head[320];
    char retry[40] = "";
    if (retry_after_s > 0)
        snprintf(retry, sizeof retry, "retry-after: %d\r\n", retry_after_s);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                     "content-length: %zu\r\n%sx-content-type-options: nosniff\r\n"
                     "connection: close\r\n\r\n",
                     status, reason_phrase(status), body.len, retry);
    if (sb_ok(&body) && n > 0 && (size_t)n < sizeof head) {
        struct iovec iov[2] = {{head, (size_t)n}, {body.buf, body.len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = w->head_req ? 1 : 2}; /* HEAD: none */
        (void)sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    sb_free(&body);
    shutdown(fd, SHUT_WR);
}

static ifl_code verdict_code(wire_verdict v)
{
    switch (v) {
    case WIRE_HEAD_TOO_LARGE:
    case WIRE_TOO_MANY_HEADERS: return IFL_CODE_HEADER_TOO_LARGE;
    case WIRE_TARGET_TOO_LONG: return IFL_CODE_TARGET_TOO_LONG;
    default: return IFL_CODE_BAD_HTTP;
    }
}

static void close_1002(int fd, const char *why)
{
    uint8_t f[4 + 123];
    size_t r = strlen(why);
    if (r > sizeof f - 4)
        r = sizeof f - 4;
    f[0] = 0x88; /* FIN, close */
    f[1] = (uint8_t)(2 + r);
    f[2] = 1002 >> 8;
    f[3] = 1002 & 0xff;
    memcpy(f + 4, why, r);
    (void)send(fd, f, 4 + r, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static ssize_t act(server *s, wire_conn *wc, int fd, wire_verdict v, void *buf, size_t len,
                   int flags)
{
    s->m.wire_refused[v - 1]++;
    wc->failed = 1;
    int status = wire_http_status(v);
    if (status)
        metrics_count_error(&s->m, verdict_code(v));
    if (!status) {
        /* (a close frame only on a WebSocket: an upgrade lws refused is no WebSocket, and what
         * follows its head is not frames; lws closes it) */
        const srv_conn *c = wc->wsi ? lws_wsi_user(wc->wsi) : NULL;
        if (c && c->is_ws)
            close_1002(fd, wc->scan.why);
        return 0;
    }
    wire_answer(fd, &wc->scan, verdict_code(v), wc->scan.why, 0);
    return drain(wc, fd, buf, len, flags);
}

/* A whole request is out to lws and not yet answered: lws must not see more until the answer is
 * complete (it would take the next request's bytes as more of this one's and replay them). lws
 * 4.1.6 cannot be told to stop reading an HTTP/1 socket without also stopping its writes (its
 * POLLIN handler returns before the POLLOUT one while the socket is flow-controlled), so what the
 * client sends meanwhile is read here: empty lines are dropped; anything else is a pipelined
 * request, which is refused by closing the connection once this answer is out (RFC 9112 9.3.2:
 * the client retries what was not answered), and dropped (at most WIRE_DRAIN_MAX bytes, then the
 * connection closes at once). The peer's end of input (EOF) while held is its going away: lws
 * closes, and the request is cancelled. */
static size_t empty_line_bytes(const uint8_t *p, size_t n);

static ssize_t held(wire_conn *wc, int fd, void *buf, size_t len, int flags)
{
    for (;;) {
        ssize_t n = real_recv(fd, buf, len, flags);
        if (n <= 0)
            return n;
        if (empty_line_bytes(buf, (size_t)n) < (size_t)n && !wc->pipelined) {
            wc->pipelined = 1;
            srv_conn *c = wc->wsi ? lws_wsi_user(wc->wsi) : NULL;
            if (c && !c->is_ws)
                c->http_close_after = 1; /* the answer says "connection: close" if not yet out */
        }
        wc->drained += (uint64_t)n;
        if (wc->drained > WIRE_DRAIN_MAX)
            return 0;
    }
}

/* The number of leading bytes of p that are CR or LF. */
static size_t empty_line_bytes(const uint8_t *p, size_t n)
{
    size_t k = 0;
    while (k < n && (p[k] == '\r' || p[k] == '\n'))
        k++;
    return k;
}

/* A request head: peeked and scanned, then read only through the end of the request (a pipelined
 * one behind it stays in the kernel's buffer); the scanner is advanced over what was read. Empty
 * lines between requests are read and dropped (RFC 9112 2.2: a server ignores them; some clients
 * send a CRLF after a POST body). */
static ssize_t read_head(server *s, wire_conn *wc, int fd, void *buf, size_t len, int flags)
{
    ssize_t n;
    for (;;) {
        n = real_recv(fd, buf, len, flags | MSG_PEEK);
        if (n <= 0)
            return n;
        size_t k = wire_between_requests(&wc->scan) ? empty_line_bytes(buf, (size_t)n) : 0;
        if (!k)
            break;
        if (real_recv(fd, buf, k, flags) <= 0)
            return -1;
        if (k == (size_t)n) {
            errno = EAGAIN;
            return -1;
        }
    }
    wire_state ahead = wc->scan;
    size_t used;
    wire_verdict v = wire_scan_upto(&ahead, buf, (size_t)n, &used);
    ssize_t got = real_recv(fd, buf, v ? (size_t)n : used, flags);
    if (got <= 0)
        return got;
    if (v) {
        wc->scan = ahead;
        return act(s, wc, fd, v, buf, len, flags);
    }
    uint32_t before = wc->scan.requests;
    int was_between = wire_between_requests(&wc->scan);
    if ((size_t)got == used)
        wc->scan = ahead;
    else if ((v = wire_scan(&wc->scan, buf, (size_t)got)))
        return act(s, wc, fd, v, buf, len, flags);
    sockets_read(s, wc, was_between, before);
    return got;
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    pthread_once(&real_once, find_real_recv);
    if (!real_recv) {
        errno = ENOSYS;
        return -1;
    }
    server *s = tl_server;
    wire_conn *wc = s && !(flags & MSG_PEEK) ? sockets_wire(s, fd) : NULL;
    if (!wc) /* (a peek is scanned when it is read) */
        return real_recv(fd, buf, len, flags);
    if (wc->failed)
        return drain(wc, fd, buf, len, flags);
    if (wc->held)
        return held(wc, fd, buf, len, flags);
    int mode = wire_read_mode(&wc->scan);
    if (mode == WIRE_READ_HEAD)
        return read_head(s, wc, fd, buf, len, flags);
    if (mode == WIRE_READ_BODY && wire_body_left(&wc->scan) < len)
        len = (size_t)wire_body_left(&wc->scan); /* through the body's end, not past it */
    ssize_t n = real_recv(fd, buf, len, flags);
    if (n <= 0)
        return n;
    uint32_t before = wc->scan.requests;
    wire_verdict v = wire_scan(&wc->scan, buf, (size_t)n);
    if (v)
        return act(s, wc, fd, v, buf, len, flags);
    if (mode == WIRE_READ_BODY)
        sockets_read(s, wc, 0, before);
    return n;
}
