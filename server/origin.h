/* origin.h: the Origin and Host checks (origin.c): --allowed-origins and --allowed-hosts. */
#ifndef IFL_ORIGIN_H
#define IFL_ORIGIN_H

#include <stddef.h>

/* 0 if list is comma-separated origins (scheme://host[:port], http or https) or *; else -1 with
 * why filled (the entry named). */
int origin_list_check(const char *list, char *why, size_t cap);

/* 1 if a request with this Origin header (NULL: none) may go on: no Origin (not a browser page),
 * the same origin as the Host it was sent to (the page this server served), or one in list (NULL:
 * none; "*": any). Default ports are dropped before comparing; "null" is allowed only by "*". */
int origin_allowed(const char *list, const char *origin, const char *host);

/* 1 if the address the server binds is loopback (127.0.0.0/8, ::1, localhost). */
int host_is_loopback(const char *bind);

/* 1 if a request with this Host header (NULL: none) may be answered: always when bound to a
 * public address and allowed_hosts is NULL; otherwise its name must be a loopback name (whatever
 * the bind: a DNS-rebinding page sends its own name), the bound address, or one of allowed_hosts
 * (comma-separated names, or *). */
int host_allowed(const char *bind, const char *allowed_hosts, const char *host);

#endif
