/* sockets.h: every accepted socket (HTTP, WebSocket, idle TCP) counted against --max-connections,
 * the silent ones closed first to make room; the rules are at the top of sockets.c. Service
 * thread. */
#ifndef IFL_SOCKETS_H
#define IFL_SOCKETS_H

#include <libwebsockets.h>

#include "wire_guard.h"

struct server;
typedef struct srv_sock srv_sock;

/* Sockets past the limit that are still accepted when none can be closed to make room: their
 * HTTP requests get 503, their upgrades 1013. The band is SOCKETS_BAND_PER times the limit where
 * the descriptor limit allows (server.c raises it for that), at least SOCKETS_BAND_MIN (within
 * SOCKETS_FD_RESERVE): a burst of clients is answered, not dropped at accept. */
#define SOCKETS_BAND_MIN 8
/* Descriptors the server needs besides its connections: the listening socket, lws's own, the
 * request log, the model and vocabulary files while loading, the threads' wake-ups. */
#define SOCKETS_FD_RESERVE 64
#define SOCKETS_BAND_PER 4
/* A body's first seconds are not held to --min-body-rate (a client's first write, TCP's slow
 * start). */
#define SOCKETS_BODY_GRACE_S 5
/* A socket accepted less than this long ago is not closed to make room: its client may not have
 * had the time to send its request (a burst of clients connects before any of them writes). */
#define SOCKETS_YOUNG_MS 1000
/* The deadlines are checked this often. */
#define SOCKETS_SWEEP_MS 250
/* Sockets closed to make room whose descriptors the event loop has not released yet (libuv closes
 * them at its next turn; a burst of accepts comes within one): past that many, new sockets are
 * closed at accept instead. Within SOCKETS_FD_RESERVE too. */
#define SOCKETS_CLOSING_MAX 32

/* Counting starts (once the server listens: its own wsis before are not connections); stops after
 * lws_context_destroy. */
void sockets_start(struct server *s);
void sockets_stop(struct server *s);
/* lws made / is destroying a wsi (LWS_CALLBACK_WSI_CREATE / _DESTROY). */
void sockets_created(struct server *s, struct lws *wsi);
void sockets_destroyed(struct server *s, struct lws *wsi);
/* lws gave the new wsi its descriptor (SERVER_NEW_CLIENT_INSTANTIATED): from now on what it reads
 * goes through the wire guard (wire_recv.c). */
void sockets_instantiated(struct server *s, struct lws *wsi);
/* A registered socket's guard: its scanner, what the guard did about it, and where the connection
 * is between HTTP requests. One request at a time: lws is given the bytes of one whole request and
 * no more until its answer is complete (wire_recv.c), so it never holds bytes of a later request,
 * which it would replay into the one still being answered; a request pipelined behind it is
 * refused by closing the connection after the answer. */
typedef struct {
    wire_state scan;
    struct lws *wsi;
    int failed;       /* a verdict was acted on: input is discarded until the peer closes */
    uint64_t drained; /* bytes discarded since */
    int held;         /* a whole request was read and is not yet answered */
    int pipelined;    /* more came while held (dropped): close once the answer is out */
    int close_soon;   /* the answer is out: the next sweep closes the connection */
    int delivered;    /* lws handed that request to us (LWS_CALLBACK_HTTP) */
    uint64_t deadline_us; /* the request being read must be whole by then (0: none being read) */
    int body_timed;       /* its body's rate is in deadline_us */
} wire_conn;
/* After the guard read bytes of a request (wire_recv.c): its deadlines start with its first byte
 * (was_between: the socket was between requests before) and its body's, the socket may be closed
 * to make room while its request is not whole, and once it is whole it waits for its answer. */
void sockets_read(struct server *s, wire_conn *wc, int was_between, uint32_t requests_before);
/* The request being answered came as HTTP/1.0 (no chunked coding in its answer). */
int sockets_http10(struct server *s, struct lws *wsi);
/* A chunked body ended (http_gen.c: the guard cannot see its end): the request is whole. */
void sockets_http_whole(struct server *s, struct lws *wsi);
/* Every SOCKETS_SWEEP_MS: a request past its deadline is answered 408 and its socket closed; once
 * the server is stopping, a request still arriving is answered 503 shutting_down (and closed). */
void sockets_sweep(struct server *s);
/* The guard of the socket on descriptor fd, or NULL if it has none (not an accepted socket). */
wire_conn *sockets_wire(struct server *s, int fd);
/* LWS_CALLBACK_HTTP: lws began a transaction (its request head is parsed). */
void sockets_http_delivered(struct server *s, struct lws *wsi);
/* LWS_CALLBACK_HTTP_DROP_PROTOCOL: lws ended a transaction (or is starting one; told apart by
 * sockets_http_delivered): the socket is read again for its next request, or closed if a request
 * was pipelined behind the one answered. */
void sockets_http_dropped(struct server *s, struct lws *wsi);
/* The socket sent a complete request (HTTP headers, an upgrade): no longer closed to make room. */
void sockets_requested(struct server *s, struct lws *wsi);
/* At accept (FILTER_NETWORK_CONNECTION): 0 to accept (maybe closing a silent socket for it), 1 to
 * close the new socket at once. */
int sockets_admit(struct server *s);
/* More sockets held than --max-connections (the band): answer 503 / 1013. */
int sockets_over_limit(const struct server *s);
/* HTTP connections with an answer not yet written out (a file, a history page, a generation's
 * JSON or stream, or a body still coming): the stop waits for them as for WebSockets. */
int32_t sockets_http_busy(struct server *s);
/* Where http_gen.c keeps its state of the connection (freed with the socket); NULL when the socket
 * has no record. */
void **sockets_http_slot(struct server *s, struct lws *wsi);

#endif
