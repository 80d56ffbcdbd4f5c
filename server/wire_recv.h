/* wire_recv.h: the recv() that libwebsockets' reads go through, so that wire_guard.c sees the raw
 * bytes of every accepted socket before lws parses them (wire_recv.c). */
#ifndef IFL_WIRE_RECV_H
#define IFL_WIRE_RECV_H

#include "codes.h"
#include "wire_guard.h"

struct server;

/* The calling thread serves s (its event loop runs here): the sockets s registered are checked
 * when this thread reads them. NULL ends it. */
void wire_recv_bind(struct server *s);

/* Answers on the raw socket, for lws (which is not told): `code`'s HTTP status, a JSON error in the
 * shape of the API the request in w is under (no body for a HEAD), "connection: close" (and Retry-After when
 * retry_after_s > 0); then our side is shut for writing. For a request lws has not answered
 * anything of: the wire guard's refusals, a request past its deadline, a socket closed to make
 * room in the middle of its request. */
void wire_answer(int fd, const wire_state *w, ifl_code code, const char *why, int retry_after_s);

#endif
