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
 * HTTP requests get 503, their upgrades 1013. Within server.c's FD_RESERVE. */
#define SOCKETS_BAND 8
/* Sockets closed to make room whose descriptors the event loop has not released yet (libuv closes
 * them at its next turn; a burst of accepts comes within one): past that many, new sockets are
 * closed at accept instead. Within FD_RESERVE too. */
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
/* A registered socket's guard: its scanner and what the guard did about it. */
typedef struct {
    wire_state scan;
    int failed;       /* a verdict was acted on: input is discarded until the peer closes */
    uint64_t drained; /* bytes discarded since */
} wire_conn;
/* The guard of the socket on descriptor fd, or NULL if it has none (not an accepted socket). */
wire_conn *sockets_wire(struct server *s, int fd);
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
