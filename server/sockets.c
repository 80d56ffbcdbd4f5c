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
#include <stdlib.h>

#include "service.h"
#include "wire_recv.h"

struct srv_sock {
    struct srv_sock *prev, *next; /* in server.silent while it has sent no request */
    struct srv_sock *hnext;       /* in its hash bucket */
    struct lws *wsi;
    int silent;   /* no request yet: on the list */
    int evicting; /* closed to make room: counted until lws destroys it */
    void *http;   /* http_gen.c's state of the connection (its session), or NULL */
    int fd;       /* its descriptor once lws gave it one (-1 before) */
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

void sockets_start(server *s)
{
    size_t n = 1024;
    while (n < 2 * (size_t)(s->o->max_connections + SOCKETS_BAND))
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

void sockets_requested(server *s, struct lws *wsi)
{
    srv_sock *k = find(s, wsi);
    if (k)
        unlink_silent(s, k);
}

int sockets_admit(server *s)
{
    int32_t max = s->o->max_connections, held = s->n_sockets - s->n_evicting;
    if (held < max)
        return 0;
    srv_sock *victim = s->silent_head;
    if (victim && s->n_evicting < SOCKETS_CLOSING_MAX) {
        unlink_silent(s, victim);
        victim->evicting = 1;
        s->n_evicting++;
        s->m.sockets_evicted++;
        lws_set_timeout(victim->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
        return 0;
    }
    if (!victim && held < max + SOCKETS_BAND)
        return 0;
    s->m.sockets_refused++;
    return 1;
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
