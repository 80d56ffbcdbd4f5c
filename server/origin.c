/* origin.c: which pages may drive the server and which names it answers to. A browser sends the
 * page's Origin with every WebSocket upgrade and cross-origin POST: without a check any page a
 * user visits could generate through their browser. A DNS-rebinding page reaches a loopback server
 * under its own name in Host: bound to loopback, only loopback names are answered. */
#include "origin.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The entry of a comma-separated list at *p (its length in *n), *p moved past it; 0 at the end. */
static int next_entry(const char **p, const char **e, size_t *n)
{
    while (**p == ',' || **p == ' ')
        (*p)++;
    if (!**p)
        return 0;
    *e = *p;
    while (**p && **p != ',' && **p != ' ')
        (*p)++;
    *n = (size_t)(*p - *e);
    return 1;
}

/* The authority of an http(s) origin with the scheme's default port dropped, into out; -1 if the
 * origin is not "http://host[:port]" or "https://host[:port]" (no path, no user). */
static int origin_authority(const char *o, size_t n, char *out, size_t cap)
{
    size_t skip;
    const char *defport;
    if (n > 7 && !strncasecmp(o, "http://", 7))
        skip = 7, defport = ":80";
    else if (n > 8 && !strncasecmp(o, "https://", 8))
        skip = 8, defport = ":443";
    else
        return -1;
    const char *a = o + skip;
    size_t an = n - skip;
    if (!an || an >= cap || memchr(a, '/', an) || memchr(a, '@', an))
        return -1;
    size_t dl = strlen(defport);
    if (an > dl && !strncmp(a + an - dl, defport, dl))
        an -= dl;
    memcpy(out, a, an);
    out[an] = 0;
    return 0;
}

/* Host header value with the default port dropped (as origin_authority), into out. */
static void host_authority(const char *host, int https, char *out, size_t cap)
{
    snprintf(out, cap, "%s", host);
    const char *defport = https ? ":443" : ":80";
    size_t n = strlen(out), dl = strlen(defport);
    if (n > dl && !strcmp(out + n - dl, defport))
        out[n - dl] = 0;
}

int origin_list_check(const char *list, char *why, size_t cap)
{
    const char *p = list, *e;
    size_t n;
    int any = 0;
    while (next_entry(&p, &e, &n)) {
        char a[256];
        any = 1;
        if ((n == 1 && *e == '*') || origin_authority(e, n, a, sizeof a) == 0)
            continue;
        snprintf(why, cap,
                 "'%.*s' is not an origin: give scheme://host[:port] (http or https, no path), "
                 "or * for any",
                 (int)(n > 80 ? 80 : n), e);
        return -1;
    }
    if (!any) {
        snprintf(why, cap, "the list is empty");
        return -1;
    }
    return 0;
}

int origin_allowed(const char *list, const char *origin, const char *host)
{
    if (!origin || !*origin)
        return 1; /* not a browser page: curl, the SDKs, our client */
    size_t on = strlen(origin);
    char oa[256];
    int have_oa = origin_authority(origin, on, oa, sizeof oa) == 0;
    if (have_oa && host && *host) { /* the page this server served: same origin */
        char ha[256];
        host_authority(host, !strncasecmp(origin, "https://", 8), ha, sizeof ha);
        if (!strcasecmp(oa, ha))
            return 1;
    }
    const char *p = list ? list : "", *e;
    size_t n;
    while (next_entry(&p, &e, &n)) {
        if (n == 1 && *e == '*')
            return 1;
        char la[256];
        if (have_oa && origin_authority(e, n, la, sizeof la) == 0 &&
            !strncasecmp(e, origin, 5) && /* same scheme (http: / https) */
            !strcasecmp(la, oa))
            return 1;
    }
    return 0;
}

/* "127.a.b.c" with four decimal octets: an address of the loopback net, not a name that starts
 * like one (127.0.0.1.attacker.example). */
static int ipv4_loopback(const char *s)
{
    int parts = 0;
    if (strncmp(s, "127.", 4))
        return 0;
    for (const char *p = s; *p; parts++) {
        int v = 0, d = 0;
        while (*p >= '0' && *p <= '9' && d < 4)
            v = v * 10 + (*p++ - '0'), d++;
        if (!d || v > 255 || (*p && *p != '.') || (*p == '.' && !p[1]))
            return 0;
        if (*p)
            p++;
    }
    return parts == 4;
}

int host_is_loopback(const char *bind)
{
    return bind && (!strcasecmp(bind, "localhost") || !strcmp(bind, "::1") ||
                    !strcmp(bind, "[::1]") || ipv4_loopback(bind));
}

/* The name of a Host value (port and IPv6 brackets dropped), into out. */
static void host_name(const char *host, char *out, size_t cap)
{
    if (host[0] == '[') {
        const char *r = strchr(host, ']');
        size_t n = r ? (size_t)(r - host - 1) : strlen(host + 1);
        snprintf(out, cap, "%.*s", (int)n, host + 1);
        return;
    }
    const char *c = strchr(host, ':');
    size_t n = c && !strchr(c + 1, ':') ? (size_t)(c - host) : strlen(host);
    snprintf(out, cap, "%.*s", (int)n, host);
}

int host_allowed(const char *bind, const char *allowed_hosts, const char *host)
{
    if (!allowed_hosts && !host_is_loopback(bind))
        return 1; /* bound to a public address: whatever name reaches it (a proxy's, a pod's) */
    if (!host || !*host)
        return 1; /* HTTP/1.0 without Host: not a browser */
    char name[256];
    host_name(host, name, sizeof name);
    size_t nl = strlen(name);
    if (nl && name[nl - 1] == '.')
        name[nl - 1] = 0; /* "localhost." is localhost */
    /* the loopback names, whatever the address bound (a rebinding page's Host is its own name) */
    if (!strcasecmp(name, "localhost") || !strcmp(name, "::1") || ipv4_loopback(name))
        return 1;
    char b[256];
    if (bind) {
        host_name(bind, b, sizeof b);
        if (!strcasecmp(name, b))
            return 1;
    }
    const char *p = allowed_hosts ? allowed_hosts : "", *e;
    size_t n;
    while (next_entry(&p, &e, &n))
        if ((n == 1 && *e == '*') || (n == strlen(name) && !strncasecmp(e, name, n)))
            return 1;
    return 0;
}
