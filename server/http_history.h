/* http_history.h: what http.c and http_history.c (the history API's HTTP side) give each other.
 * Service thread. The history thread's `done` callback and the bridge's hand-over
 * (http_on_history_done, http_history_answer) are declared in service.h. */
#ifndef IFL_HTTP_HISTORY_H
#define IFL_HTTP_HISTORY_H

#include <stddef.h>

#include "service.h"

/* http_history.c: GET or HEAD of /api/history or /api/requests/ID: checked, then queued for the
 * history thread (or answered at once: 400, 403, 404, 503). */
int http_history_begin(server *s, srv_conn *c, struct lws *wsi, const char *path, int head_only);
/* HTTP_WRITEABLE while the connection holds a history answer (c->answer). -1: close. */
int http_history_writeable(server *s, srv_conn *c, struct lws *wsi);
/* CLOSED_HTTP: the answer held, or still to come, is dropped. */
void http_history_closed(server *s, srv_conn *c);

/* http.c: the status line and headers: Content-Length len, or with `chunked` Transfer-Encoding:
 * chunked (the body then goes out as chunks); the security headers; one extra header when
 * extra_name is set. -1: they could not be written. */
int http_headers(struct lws *wsi, int status, const char *ctype, size_t len, int chunked,
                 const char *extra_name, const char *extra_value);

#endif
