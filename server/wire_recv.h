/* wire_recv.h: the recv() that libwebsockets' reads go through, so that wire_guard.c sees the raw
 * bytes of every accepted socket before lws parses them (wire_recv.c). */
#ifndef IFL_WIRE_RECV_H
#define IFL_WIRE_RECV_H

struct server;

/* The calling thread serves s (its event loop runs here): the sockets s registered are checked
 * when this thread reads them. NULL ends it. */
void wire_recv_bind(struct server *s);

#endif
