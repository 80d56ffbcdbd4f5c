/* sockets.c: every accepted socket against one limit, --max-connections (sockets.h). lws tells
 * the first protocol about each wsi it creates and destroys (WSI_CREATE / WSI_DESTROY); from the
 * moment the server listens, each one gets a record here, found by its wsi in a hash table (lws
 * overwrites a wsi's opaque user data right after WSI_CREATE), and on a list in accept order
 * while it has not yet sent a complete request.
 *
 * At each accept (FILTER_NETWORK_CONNECTION, before lws makes a wsi of it):
 *   below the limit      accepted;
 *   at the limit         the oldest socket that has sent no request yet (an idle TCP connection,
 *                        a slow client's unfinished headers) is closed to make room, and this one
 *                        accepted: silent sockets cannot keep a client that speaks out;
 *   none of them silent  accepted into a small band past the limit, where an HTTP request gets
 *                        503 and a WebSocket upgrade 1013 (a status where the protocol has one);
 *   past the band        closed at once; so is a new socket while 32 closed to make room have
 *                        not released their descriptors yet (libuv closes them at its next
 *                        turn, and a burst of accepts comes within one turn).
 * So the process never holds more than the limit and the band, and fit_fd_limit (server.c) keeps
 * room for those under the descriptor limit: accept() never fails with EMFILE, which lws would
 * retry at every turn of its loop (a core at 100%, a log line each time).
 * Service thread. */
#include "sockets.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/resource.h>

#include "service.h"
#include "util.h"
#include "wire_recv.h"

struct srv_sock {
    struct srv_sock *prev, *next; /* in server.silent while it has sent no request */
    struct srv_sock *hnext;       /* in its hash bucket */
    struct lws *wsi;
    int silent;   /* no request yet: on the list */
    int evicting; /* closed to make room: counted until lws destroys it */
    void *http;   /* http_gen.c's state of the connection (its session), or NULL */
    int fd;       /* its descriptor once lws gave it one (-1 before) */
    uint64_t t_accept_us;
    wire_conn wire;
};

static void unlink_silent(server *s, srv_sock *k)
{
    if (!k->silent)
        return;
    if (k->prev)
        k->prev->next = k->next;
    else
        s->silent_head = k->next;
    if (k->next)
        k->next->prev = k->prev;
    else
        s->silent_tail = k->prev;
    k->prev = k->next = NULL;
    k->silent = 0;
}

/* Back on the list, newest: it began a request it has not finished. */
static void link_silent(server *s, srv_sock *k)
{
    if (k->silent || k->evicting)
        return;
    k->prev = s->silent_tail;
    k->next = NULL;
    if (s->silent_tail)
        s->silent_tail->next = k;
    else
        s->silent_head = k;
    s->silent_tail = k;
    k->silent = 1;
}

static size_t bucket_of(const server *s, const struct lws *wsi)
{
    uint64_t h = (uint64_t)(uintptr_t)wsi * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (s->n_sock_buckets - 1);
}

static srv_sock *find(const server *s, const struct lws *wsi)
{
    if (!s || !s->sock_buckets)
        return NULL;
    for (srv_sock *k = s->sock_buckets[bucket_of(s, wsi)]; k; k = k->hnext)
        if (k->wsi == wsi)
            return k;
    return NULL;
}

/* The band past the limit: SOCKETS_BAND_PER times it where the descriptor limit has room. */
static int32_t band_size(const server *s)
{
    int64_t max = s->o->max_connections, band = max * SOCKETS_BAND_PER;
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
        int64_t room = (int64_t)rl.rlim_cur - max - SOCKETS_FD_RESERVE;
        if (room < band)
            band = room;
    }
    return band < SOCKETS_BAND_MIN ? SOCKETS_BAND_MIN : (int32_t)band;
}

void sockets_start(server *s)
{
    s->sock_band = band_size(s);
    size_t n = 1024;
    while (n < 2 * (size_t)(s->o->max_connections + s->sock_band))
        n *= 2;
    s->sock_buckets = calloc(n, sizeof *s->sock_buckets);
    s->n_sock_buckets = s->sock_buckets ? n : 0; /* none: nothing counted, like before */
}

void sockets_stop(server *s)
{
    free(s->sock_buckets); /* every record went with its wsi in lws_context_destroy */
    s->sock_buckets = NULL;
    s->n_sock_buckets = 0;
    wire_recv_bind(NULL);
    free(s->sock_by_fd);
    s->sock_by_fd = NULL;
    s->n_sock_by_fd = 0;
}

void sockets_instantiated(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    int fd = lws_get_socket_fd(wsi);
    if (!k || fd < 0)
        return;
    if (fd >= s->n_sock_by_fd) {
        int n = s->n_sock_by_fd ? s->n_sock_by_fd : 256;
        while (n <= fd)
            n *= 2;
        srv_sock **t = realloc(s->sock_by_fd, (size_t)n * sizeof *t);
        if (!t)
            return; /* unguarded: lws's own checks only */
        for (int i = s->n_sock_by_fd; i < n; i++)
            t[i] = NULL;
        s->sock_by_fd = t;
        s->n_sock_by_fd = n;
    }
    k->fd = fd;
    wire_init(&k->wire.scan);
    k->wire.wsi = wsi;
    s->sock_by_fd[fd] = k;
}

wire_conn *sockets_wire(server *s, int fd)
{
    if (fd < 0 || fd >= s->n_sock_by_fd || !s->sock_by_fd[fd])
        return NULL;
    return &s->sock_by_fd[fd]->wire;
}

void sockets_created(server *s, struct lws *wsi)
{
    if (!s || !s->sock_buckets)
        return;
    srv_sock *k = calloc(1, sizeof *k);
    if (!k)
        return; /* uncounted: it is closed like any other, only not evicted */
    k->wsi = wsi;
    k->fd = -1;
    k->t_accept_us = ifl_now_us();
    k->silent = 1;
    k->prev = s->silent_tail;
    if (s->silent_tail)
        s->silent_tail->next = k;
    else
        s->silent_head = k;
    s->silent_tail = k;
    size_t b = bucket_of(s, wsi);
    k->hnext = s->sock_buckets[b];
    s->sock_buckets[b] = k;
    s->n_sockets++;
    s->m.sockets_open = (uint64_t)s->n_sockets;
}

void sockets_destroyed(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    if (!k)
        return;
    if (k->http) /* (normally taken at CLOSED_HTTP already) */
        http_gen_conn_closed(s, wsi);
    unlink_silent(s, k);
    /* (lws may have closed the descriptor already and a new socket got the same number: then
     * the entry is the new socket's) */
    if (k->fd >= 0 && k->fd < s->n_sock_by_fd && s->sock_by_fd[k->fd] == k)
        s->sock_by_fd[k->fd] = NULL;
    srv_sock **pp = &s->sock_buckets[bucket_of(s, wsi)];
    while (*pp != k)
        pp = &(*pp)->hnext;
    *pp = k->hnext;
    if (k->evicting)
        s->n_evicting--;
    s->n_sockets--;
    s->m.sockets_open = (uint64_t)s->n_sockets;
    free(k);
}

void sockets_http_delivered(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    if (k)
        k->wire.delivered = 1;
}

void sockets_http_dropped(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    if (!k || !k->wire.delivered)
        return; /* (the bind before a transaction's callback: its request is not answered yet) */
    k->wire.delivered = 0;
    k->wire.held = 0;
    k->wire.drained = 0;
    if (k->wire.pipelined) {
        /* (our answers close such a connection themselves; this is for one lws ended itself:
         * lws sets its keep-alive timeout after this callback, so the close is the sweep's) */
        s->m.sockets_pipelined++;
        k->wire.close_soon = 1;
    }
}

void sockets_requested(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    if (!k)
        return;
    /* (an HTTP request whose body is still coming stays closable: wire_recv.c says when it is
     * whole) */
    if (k->fd >= 0 && wire_read_mode(&k->wire.scan) == WIRE_READ_BODY && !k->wire.failed)
        return;
    unlink_silent(s, k);
}

void sockets_read(server *s, wire_conn *wc, int was_between, uint32_t requests_before)
{
    srv_sock *k = (srv_sock *)((char *)wc - offsetof(srv_sock, wire));
    uint64_t now = ifl_now_us();
    if (wc->scan.requests != requests_before) { /* whole: it waits for its answer */
        wc->held = 1;
        wc->deadline_us = 0;
        wc->body_timed = 0;
        unlink_silent(s, k);
        return;
    }
    int mode = wire_read_mode(&wc->scan);
    if (was_between && (mode != WIRE_READ_HEAD || !wire_between_requests(&wc->scan))) {
        wc->deadline_us = now + (uint64_t)(s->o->request_timeout_s * 1e6);
        link_silent(s, k); /* (a keep-alive connection's next request) */
    }
    if (mode == WIRE_READ_BODY && !wc->body_timed && wc->deadline_us) {
        uint64_t t = now + (uint64_t)SOCKETS_BODY_GRACE_S * 1000000u +
                     wire_body_left(&wc->scan) * 1000000u / (uint64_t)s->o->min_body_rate;
        if (t < wc->deadline_us)
            wc->deadline_us = t;
        wc->body_timed = 1;
    }
    if (mode == WIRE_READ_FRAMES) /* (an upgrade: /ws's own limits) */
        wc->deadline_us = 0;
}

int sockets_http10(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    return k && k->wire.scan.http10;
}

void sockets_http_whole(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    if (k) {
        k->wire.deadline_us = 0;
        unlink_silent(s, k);
    }
}

/* A closable socket that is not about to speak: not accepted within SOCKETS_YOUNG_MS, and its
 * client's bytes are not waiting unread in the kernel's buffer (a burst of clients whose requests
 * lws has not read yet are not silent). */
static srv_sock *pick_victim(server *s)
{
    int looked = 0;
    uint64_t young = ifl_now_us() - (uint64_t)SOCKETS_YOUNG_MS * 1000u;
    for (srv_sock *k = s->silent_head; k && looked < 32; k = k->next, looked++) {
        int pending = 0;
        if (k->t_accept_us > young)
            continue;
        if (k->fd >= 0 && !k->wire.failed && ioctl(k->fd, FIONREAD, &pending) == 0 && pending > 0)
            continue;
        return k;
    }
    return NULL;
}

/* Closed to make room: a client in the middle of a request is told so (503). */
static void evict(server *s, srv_sock *k)
{
    unlink_silent(s, k);
    k->evicting = 1;
    s->n_evicting++;
    s->m.sockets_evicted++;
    if (k->fd >= 0 && k->wire.deadline_us && !k->wire.failed) {
        /* what the client still sends is read and dropped (wire_recv.c) until it closes, so the
         * answer is not lost to a reset; at the latest in a second we close */
        k->wire.failed = 1;
        k->wire.deadline_us = 0;
        metrics_count_error(&s->m, IFL_CODE_TOO_MANY_CONNECTIONS);
        wire_answer(k->fd, &k->wire.scan, IFL_CODE_TOO_MANY_CONNECTIONS,
                    "this connection was closed to make room for another: its request was not "
                    "whole (--max-connections); try again",
                    1);
        lws_set_timeout(k->wsi, PENDING_TIMEOUT_CLOSE_SEND, 1);
        return;
    }
    lws_set_timeout(k->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

int sockets_admit(server *s)
{
    int32_t max = s->o->max_connections, held = s->n_sockets - s->n_evicting;
    /* room within the limit, made by closing as many closable sockets as it takes (those that
     * were accepted in the band while none was closable are among them) */
    srv_sock *victim;
    while (held >= max && s->n_evicting < SOCKETS_CLOSING_MAX && (victim = pick_victim(s))) {
        evict(s, victim);
        held--;
    }
    if (held < max + s->sock_band)
        return 0;
    s->m.sockets_refused++;
    return 1;
}

/* The stop: a request still arriving will not be served (503 shutting_down), so its socket does
 * not hold the stop up until --grace. */
static void refuse_arriving(server *s, srv_sock *k)
{
    wire_conn *wc = &k->wire;
    wc->failed = 1;
    wc->deadline_us = 0;
    const srv_conn *c = lws_wsi_user(k->wsi);
    if (!c || !c->http_close_after) {
        metrics_count_error(&s->m, IFL_CODE_SHUTTING_DOWN);
        wire_answer(k->fd, &wc->scan, IFL_CODE_SHUTTING_DOWN,
                    "the server is shutting down: this request was not whole", 0);
    }
    lws_set_timeout(k->wsi, PENDING_TIMEOUT_CLOSE_SEND, 1);
}

void sockets_sweep(server *s)
{
    uint64_t now = ifl_now_us();
    for (size_t b = 0; b < s->n_sock_buckets; b++)
        for (srv_sock *k = s->sock_buckets[b]; k; k = k->hnext) {
            wire_conn *wc = &k->wire;
            if (wc->close_soon && !k->evicting) {
                wc->close_soon = 0;
                lws_set_timeout(k->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
                continue;
            }
            if (s->rl.stopping && wc->deadline_us && !wc->failed && !k->evicting && k->fd >= 0) {
                refuse_arriving(s, k);
                continue;
            }
            if (!wc->deadline_us || now < wc->deadline_us || wc->failed || k->evicting ||
                k->fd < 0)
                continue;
            wc->failed = 1;
            wc->deadline_us = 0;
            s->m.sockets_deadline++;
            const srv_conn *c = lws_wsi_user(k->wsi);
            if (!c || !c->http_close_after) { /* (else lws is writing an answer already) */
                char why[200];
                snprintf(why, sizeof why,
                         "the request was not whole in time: its head and body must arrive within "
                         "--request-timeout (%.0f s), a body at --min-body-rate (%d bytes a "
                         "second) after its first %d s",
                         s->o->request_timeout_s, s->o->min_body_rate, SOCKETS_BODY_GRACE_S);
                metrics_count_error(&s->m, IFL_CODE_REQUEST_TIMEOUT);
                wire_answer(k->fd, &wc->scan, IFL_CODE_REQUEST_TIMEOUT, why, 0);
            }
            /* the client may read the answer and close; at the latest in 2 s we do */
            lws_set_timeout(k->wsi, PENDING_TIMEOUT_CLOSE_SEND, 2);
        }
}

int sockets_over_limit(const server *s)
{
    return s->n_sockets - s->n_evicting > s->o->max_connections;
}

int32_t sockets_http_busy(server *s)
{
    int32_t n = 0;
    for (size_t b = 0; b < s->n_sock_buckets; b++)
        for (srv_sock *k = s->sock_buckets[b]; k; k = k->hnext) {
            const srv_conn *c = lws_wsi_user(k->wsi);
            if (c && !c->is_ws && (c->http_body || c->gen || c->job || c->answer))
                n++;
        }
    return n;
}

void **sockets_http_slot(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    return k ? &k->http : NULL;
}
