/* fuzz_http_framing.h: fuzz_http_seq.c's two readers of HTTP/1.1 framing, kept apart from the
 * client and the server it drives: which requests a fuzzed payload plainly holds (so that at most
 * one answer per request can be checked), and whether what came back is a sequence of HTTP/1.x
 * responses (status line, headers, a body by Content-Length or chunked, nothing after a 101).
 * Pure: no I/O. Included once, by fuzz_http_seq.c. */
#ifndef IFL_FUZZ_HTTP_FRAMING_H
#define IFL_FUZZ_HTTP_FRAMING_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_REQS 4096 /* requests of one payload counted */

/* ---- the requests the payload plainly holds ------------------------------------------------- */

typedef struct {
    int sure;     /* plainly framed: `bound` is checked */
    size_t bound; /* responses it may get at most */
    size_t n;     /* whole requests */
    uint8_t is_head[MAX_REQS];
    int maybe_head; /* not sure, and "HEAD" appears somewhere */
} req_scan;

static int lower_eq(const uint8_t *p, size_t n, const char *lit)
{
    return strlen(lit) == n && !strncasecmp((const char *)p, lit, n);
}

static const uint8_t *find(const uint8_t *p, size_t n, const char *lit)
{
    return memmem(p, n, lit, strlen(lit));
}

/* One request head [p, p+n) (its final CRLF CRLF included): 0 plainly framed (method and
 * Content-Length set), -1 not. */
static int plain_head(const uint8_t *p, size_t n, int *is_head, int *is_post, int64_t *cl)
{
    *cl = -1;
    for (size_t i = 0; i < n; i++) {
        if (!p[i] || (p[i] == '\r' && (i + 1 == n || p[i + 1] != '\n')) ||
            (p[i] == '\n' && (!i || p[i - 1] != '\r')))
            return -1; /* NUL, a bare CR or LF */
    }
    const uint8_t *eol = find(p, n, "\r\n");
    size_t ll = (size_t)(eol - p);
    const uint8_t *sp1 = memchr(p, ' ', ll);
    if (!sp1)
        return -1;
    size_t ml = (size_t)(sp1 - p);
    *is_head = ml == 4 && !memcmp(p, "HEAD", 4);
    *is_post = ml == 4 && !memcmp(p, "POST", 4);
    if (!*is_head && !*is_post && !(ml == 3 && !memcmp(p, "GET", 3)))
        return -1;
    const uint8_t *t = sp1 + 1, *sp2 = memchr(t, ' ', (size_t)(eol - t));
    if (!sp2 || sp2 == t || t[0] != '/' || (size_t)(eol - sp2) != 9 || memcmp(sp2, " HTTP/1.1", 9))
        return -1;
    for (const uint8_t *q = t; q < sp2; q++)
        if (*q <= 0x20 || *q >= 0x7f)
            return -1;
    /* the header lines */
    const uint8_t *line = eol + 2, *end = p + n - 2;
    while (line < end) {
        const uint8_t *le = find(line, (size_t)(end - line) + 2, "\r\n");
        const uint8_t *colon = memchr(line, ':', (size_t)(le - line));
        if (!colon || colon == line)
            return -1;
        for (const uint8_t *q = line; q < colon; q++)
            if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') ||
                  (*q >= '0' && *q <= '9') || *q == '-'))
                return -1; /* (obs-fold, spaces before the colon, odd names) */
        size_t nl = (size_t)(colon - line);
        const uint8_t *v = colon + 1, *ve = le;
        while (v < ve && (*v == ' ' || *v == '\t'))
            v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
        if (lower_eq(line, nl, "content-length")) {
            if (*cl >= 0 || v == ve || ve - v > 9)
                return -1;
            int64_t x = 0;
            for (const uint8_t *q = v; q < ve; q++) {
                if (*q < '0' || *q > '9')
                    return -1;
                x = x * 10 + (*q - '0');
            }
            *cl = x;
        } else if (lower_eq(line, nl, "transfer-encoding") || lower_eq(line, nl, "upgrade") ||
                   lower_eq(line, nl, "connection") || lower_eq(line, nl, "expect")) {
            return -1;
        }
        line = le + 2;
    }
    if (*cl < 0 && *is_post)
        return -1; /* (411 and a close, or lws reading it as empty: not plain) */
    if (*cl > 0 && !*is_post)
        return -1;
    if (*cl < 0)
        *cl = 0;
    return 0;
}

static void scan_requests(const uint8_t *p, size_t n, req_scan *rq)
{
    memset(rq, 0, sizeof *rq);
    rq->sure = 1;
    rq->maybe_head = find(p, n, "HEAD") != NULL;
    size_t pos = 0;
    while (pos < n) {
        const uint8_t *e = find(p + pos, n - pos, "\r\n\r\n");
        if (!e) {
            /* a part of a request, or junk: an error answer at most; but lws also ends lines
             * with a bare LF, so the rest may hold more requests than CRLF CRLF shows */
            for (size_t i = pos; i < n; i++)
                if (p[i] == '\n' && (i == pos || p[i - 1] != '\r'))
                    rq->sure = 0;
            rq->bound = rq->n + 1;
            break;
        }
        size_t hl = (size_t)(e + 4 - (p + pos));
        int is_head, is_post;
        int64_t cl;
        if (plain_head(p + pos, hl, &is_head, &is_post, &cl) || rq->n == MAX_REQS) {
            rq->sure = 0;
            break;
        }
        rq->is_head[rq->n++] = (uint8_t)is_head;
        pos += hl;
        if ((uint64_t)cl > n - pos) { /* its body is cut: the request still may get an answer */
            rq->bound = rq->n;
            pos = n;
            break;
        }
        pos += (size_t)cl;
        rq->bound = rq->n;
    }
    if (pos >= n && !rq->bound)
        rq->bound = rq->n;
    if (rq->sure)
        rq->maybe_head = 0;
}

/* ---- the answers ---------------------------------------------------------------------------- */

typedef struct {
    size_t n;      /* whole responses (1xx but 101 not counted) */
    int truncated; /* the last one is cut short at the end */
    int upgraded;  /* a 101: what follows is WebSocket */
    int bad;       /* not HTTP/1.x responses: why says where */
    int status;    /* the first response's status, 0 if none */
    char why[200];
} resp_scan;

static int is_hex(uint8_t c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A chunked body at p: its length, 0 if cut short at the end, -1 if malformed. */
static int64_t chunked_len(const uint8_t *p, size_t n, char *why, size_t cap)
{
    size_t pos = 0;
    for (;;) {
        uint64_t sz = 0;
        size_t digits = 0;
        while (pos < n && is_hex(p[pos])) {
            if (++digits > 12) {
                snprintf(why, cap, "a chunk size of more than 12 hex digits");
                return -1;
            }
            uint8_t c = p[pos++];
            sz = sz * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
        }
        const uint8_t *le = find(p + pos, n - pos, "\r\n");
        if (!le)
            return 0;
        if (!digits || (p[pos] != '\r' && p[pos] != ';')) {
            snprintf(why, cap, "a chunk size line that is not hex digits");
            return -1;
        }
        pos = (size_t)(le - p) + 2;
        if (!sz)
            break;
        if (sz > n - pos || n - pos - sz < 2)
            return 0;
        pos += sz;
        if (p[pos] != '\r' || p[pos + 1] != '\n') {
            snprintf(why, cap, "a chunk's data not followed by CRLF");
            return -1;
        }
        pos += 2;
    }
    for (;;) { /* trailers, then the empty line */
        const uint8_t *le = find(p + pos, n - pos, "\r\n");
        if (!le)
            return 0;
        size_t ll = (size_t)(le - (p + pos));
        pos += ll + 2;
        if (!ll)
            return (int64_t)pos;
    }
}

static void scan_responses(const uint8_t *p, size_t n, const req_scan *rq, resp_scan *rs)
{
    memset(rs, 0, sizeof *rs);
    size_t pos = 0, counted = 0; /* counted: responses matched to requests (1xx excluded) */
    while (pos < n) {
        const uint8_t *r = p + pos;
        size_t left = n - pos;
        static const char v11[] = "HTTP/1.1 ", v10[] = "HTTP/1.0 ";
        size_t cmp = left < 9 ? left : 9;
        if (memcmp(r, v11, cmp) && memcmp(r, v10, cmp)) {
            snprintf(rs->why, sizeof rs->why, "response %zu does not begin with HTTP/1.x",
                     rs->n + 1);
            rs->bad = 1;
            return;
        }
        if (left < 13) {
            rs->truncated = 1;
            return;
        }
        if (!(r[9] >= '1' && r[9] <= '5' && r[10] >= '0' && r[10] <= '9' && r[11] >= '0' &&
              r[11] <= '9' && (r[12] == ' ' || r[12] == '\r'))) {
            snprintf(rs->why, sizeof rs->why, "response %zu: no status code", rs->n + 1);
            rs->bad = 1;
            return;
        }
        int status = (r[9] - '0') * 100 + (r[10] - '0') * 10 + (r[11] - '0');
        if (!rs->status)
            rs->status = status;
        const uint8_t *he = find(r, left, "\r\n\r\n");
        if (!he) {
            rs->truncated = 1;
            return;
        }
        size_t hl = (size_t)(he + 4 - r);
        int64_t cl = -1;
        int chunked = 0;
        const uint8_t *line = find(r, hl, "\r\n") + 2;
        while (line < he + 2) {
            const uint8_t *le = find(line, (size_t)(he + 4 - line), "\r\n");
            const uint8_t *colon = memchr(line, ':', (size_t)(le - line));
            if (!colon || colon == line) {
                snprintf(rs->why, sizeof rs->why, "response %zu: a header line without a name",
                         rs->n + 1);
                rs->bad = 1;
                return;
            }
            const uint8_t *v = colon + 1;
            while (v < le && *v == ' ')
                v++;
            size_t nl = (size_t)(colon - line), vl = (size_t)(le - v);
            if (lower_eq(line, nl, "content-length")) {
                char num[24];
                char *endp;
                snprintf(num, sizeof num, "%.*s", (int)(vl < 23 ? vl : 23), (const char *)v);
                long long x = strtoll(num, &endp, 10);
                if (!vl || *endp || x < 0 || cl >= 0) {
                    snprintf(rs->why, sizeof rs->why, "response %zu: a bad Content-Length",
                             rs->n + 1);
                    rs->bad = 1;
                    return;
                }
                cl = x;
            } else if (lower_eq(line, nl, "transfer-encoding")) {
                chunked = vl == 7 && !strncasecmp((const char *)v, "chunked", 7);
            }
            line = le + 2;
        }
        pos += hl;
        if (status == 101) {
            rs->n++;
            rs->upgraded = 1;
            return;
        }
        if (status < 200)
            continue; /* 100 Continue and the like: the answer follows */
        int bodiless =
            status == 204 || status == 304 || (rq->sure && counted < rq->n && rq->is_head[counted]);
        if (!bodiless && rq->maybe_head && cl > 0 && n - pos >= 9 &&
            (!memcmp(p + pos, v11, 9) || !memcmp(p + pos, v10, 9)))
            bodiless = 1; /* (an answer to a HEAD, most likely) */
        counted++;
        if (bodiless) {
            rs->n++;
            continue;
        }
        if (chunked) {
            int64_t bl = chunked_len(p + pos, n - pos, rs->why, sizeof rs->why);
            if (bl < 0) {
                rs->bad = 1;
                return;
            }
            if (!bl) {
                rs->truncated = 1;
                return;
            }
            pos += (size_t)bl;
        } else if (cl >= 0) {
            if ((uint64_t)cl > n - pos) {
                rs->truncated = 1;
                return;
            }
            pos += (size_t)cl;
        } else {
            rs->n++; /* a body to the close */
            return;
        }
        rs->n++;
    }
}

#endif
