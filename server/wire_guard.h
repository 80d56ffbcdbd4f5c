/* wire_guard.h: the checks on what a client sends that Debian's libwebsockets 4.1.6 does not make
 * itself, run over the raw bytes of each accepted socket before lws parses them (wire_recv.c feeds
 * them in). lws 4.1.6 accepts unmasked client frames (RFC 6455 5.1 says fail the connection;
 * upstream added the check in v5.0.0), and it closes without any status a request whose head
 * overflows its header buffer or fragment table, or holds %00 or a NUL: here such a request gets
 * 431, 414 or 400 naming what was wrong, and an unmasked frame a close with 1002.
 *
 * The scanner follows the connection as lws will: request heads (their length, line count,
 * request target and the headers that say what comes after: Content-Length, Transfer-Encoding,
 * Upgrade), bodies skipped by their length, and after a WebSocket upgrade the frames' headers.
 * A body in chunked transfer coding ends the checking of that connection (lws reads it itself).
 * Pure: no I/O, any split of the bytes into calls gives the same verdicts. */
#ifndef INFLIGHT_WIRE_GUARD_H
#define INFLIGHT_WIRE_GUARD_H

#include <stddef.h>
#include <stdint.h>

#define WIRE_HEAD_MAX 16384  /* request line and header lines through the empty line, bytes */
#define WIRE_TARGET_MAX 8192 /* the request target, bytes */
#define WIRE_HEADER_LINES_MAX 60
#define WIRE_QUERY_PARAMS_MAX 24
/* lws's max_http_header_data: every head the scanner passes fits lws's buffer (it keeps each
 * value with a terminator and each unknown header's name with 4 bytes of lengths), and the line
 * and parameter limits keep it inside lws's 91 header fragments (one a header, one a parameter) */
#define WIRE_LWS_HEADER_DATA (WIRE_HEAD_MAX + 4 * WIRE_HEADER_LINES_MAX + 1024)

typedef enum {
    WIRE_OK = 0,
    WIRE_HEAD_TOO_LARGE,   /* 431 */
    WIRE_TOO_MANY_HEADERS, /* 431 */
    WIRE_TARGET_TOO_LONG,  /* 414 */
    WIRE_BAD_HEAD,         /* 400 */
    WIRE_UNMASKED_FRAME,   /* close 1002 */
} wire_verdict;

typedef struct {
    uint8_t phase;    /* wire_phase (wire_guard.c) */
    uint8_t verdict;  /* once the state is spent */
    uint8_t cr;       /* the byte before was a CR */
    uint8_t pct;      /* request target: 1 after '%', 2 after "%0", 3 after another "%X" */
    uint8_t part;     /* request line: 0 method, 1 target, 2 version */
    uint8_t in_value; /* header line: past its ':' */
    uint8_t upgrade_ws, connection_upgrade, is_get, chunked, has_length;
    uint8_t name_len, value_len, name_long;
    uint8_t value_lead, value_padded; /* white space bytes before the value; 1: the value has
                                         white space lws keeps (more than one leading space, a tab,
                                         or trailing) */
    char name[20];     /* this header line's name, lower case (the first 20 bytes) */
    char value[40];    /* and its value (the first 40 bytes, lower case, spaces trimmed) */
    uint32_t head_len; /* bytes of this head so far */
    uint32_t line_len; /* bytes of this line so far (without CR LF) */
    uint32_t lines;    /* lines of this head so far, the request line included */
    uint32_t target_len, params;
    uint64_t content_length;
    uint64_t left;     /* body or frame payload bytes still to pass */
    uint32_t requests; /* whole HTTP requests scanned (head and body; not upgrades, not chunked) */
    uint8_t api; /* the last request line's target's front end (req_api, api_front_end_of: the shape
                    of an answer's error), kept through its body */
    uint8_t http10;    /* and its version was HTTP/1.0 */
    uint8_t head_req;  /* and its method HEAD (an answer without a body) */
    uint8_t target4[4];   /* the request target's first 4 bytes */
    uint8_t version[9];   /* the request line's version, its first 9 bytes */
    uint8_t target_seen, version_seen, method_bad;
    uint32_t heads;       /* request heads scanned (whole requests or not: upgrades, bodies) */
    uint8_t frame[14]; /* a frame header so far */
    uint8_t frame_len;
    char why[112]; /* what was wrong, once a verdict is given */
} wire_state;

void wire_init(wire_state *w);

/* Scans the next n bytes; WIRE_OK, or the first violation (w->why says what and where), after
 * which the state is spent: later calls give the same verdict. */
wire_verdict wire_scan(wire_state *w, const uint8_t *p, size_t n);

/* The same, stopping right after the byte that ends a request head or a whole HTTP request (its
 * body's last byte): *used says how many bytes of p were scanned (n when none ended in them). So
 * lws answers a head (an upgrade's 101, say) before the bytes after it are read. */
wire_verdict wire_scan_upto(wire_state *w, const uint8_t *p, size_t n, size_t *used);

/* How the next bytes are read: WIRE_READ_HEAD (a request head, whose end is not known until it is
 * scanned), WIRE_READ_BODY (wire_body_left() bytes of a body with a Content-Length),
 * WIRE_READ_FRAMES (WebSocket frames after an upgrade), WIRE_READ_ANY (a chunked body and what
 * follows it, or a spent state). */
enum { WIRE_READ_HEAD, WIRE_READ_BODY, WIRE_READ_FRAMES, WIRE_READ_ANY };
int wire_read_mode(const wire_state *w);
uint64_t wire_body_left(const wire_state *w);
/* Between two requests: nothing of the next head scanned yet (an empty line there is skipped). */
int wire_between_requests(const wire_state *w);

/* The HTTP status for a verdict (431, 414, 400), or 0 for WIRE_OK and WIRE_UNMASKED_FRAME */
int wire_http_status(wire_verdict v);
const char *wire_verdict_name(wire_verdict v); /* the metric's reason label */

#endif
