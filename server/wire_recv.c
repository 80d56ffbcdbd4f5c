/* wire_recv.c: where the wire guard (wire_guard.h) gets the bytes. libwebsockets 4.1.6 reads every
 * plain socket with recv() (lws_ssl_capable_read_no_ssl), and this program defines recv: the
 * dynamic linker binds the library's calls to an executable's definition first, and the real one
 * is the next definition after it (dlsym RTLD_NEXT: libc's, or a sanitizer's interceptor).
 *
 * Only the thread that serves (wire_recv_bind) and only the descriptors its accepted sockets were
 * given (sockets_instantiated) are looked at; every other call passes straight through. On a
 * verdict the guard answers for lws, which never sees the offending bytes:
 *   HTTP (431, 414, 400)  the status and what was wrong, "connection: close", our side shut for
 *                         writing; then whatever the client still sends is read and dropped
 *                         until it closes (so our answer is not lost to a reset), at most
 *                         WIRE_DRAIN_MAX bytes, and lws's header timeout ends a client that
 *                         does neither;
 *   an unmasked frame     a close frame with 1002 and the reason, then the end of the
 *                         connection (RFC 6455 5.1: the server must fail it).
 * What lws had read of the same buffer before the offending bytes is dropped with them. An answer
 * lws was still writing on the connection (a pipelined request's) would be cut by ours. */
#include "wire_recv.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

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

static const char *reason_phrase(int status)
{
    switch (status) {
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    default: return "Bad Request";
    }
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

static void answer_http(int fd, int status, const char *why)
{
    char body[160], msg[400];
    int nb = snprintf(body, sizeof body, "%s\n", why);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                     "content-length: %d\r\nconnection: close\r\n\r\n%s",
                     status, reason_phrase(status), nb, body);
    if (n > 0 && (size_t)n < sizeof msg)
        (void)send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
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
    if (!status) {
        close_1002(fd, wc->scan.why);
        return 0;
    }
    answer_http(fd, status, wc->scan.why);
    return drain(wc, fd, buf, len, flags);
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
    ssize_t n = real_recv(fd, buf, len, flags);
    if (n <= 0)
        return n;
    wire_verdict v = wire_scan(&wc->scan, buf, (size_t)n);
    return v ? act(s, wc, fd, v, buf, len, flags) : n;
}
