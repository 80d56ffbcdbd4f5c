/* test_wire_guard.c: the wire guard's scanner (server/wire_guard.c). Each case is fed whole, one
 * byte at a time and at every two-way split, and must give the same verdict each way: streams that
 * are valid (kept-alive requests with bodies holding blank lines, leading empty lines, a
 * WebSocket upgrade followed by masked frames of 7-, 16- and 64-bit lengths, a chunked body) pass;
 * each limit passes at its value and fails one past it; malformed heads and unmasked frames get
 * their verdict and a message naming what and where; a spent state keeps its verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "wire_guard.h"

typedef struct {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p)
            abort();
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}

static void puts_(buf *b, const char *s)
{
    put(b, s, strlen(s));
}

static void put_rep(buf *b, char c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(b, &c, 1);
}

/* A client frame: masked unless told otherwise, with the length's shortest encoding. */
static void frame(buf *b, int opcode, size_t len, int masked)
{
    uint8_t h[14];
    size_t k = 0;
    h[k++] = (uint8_t)(0x80 | opcode);
    uint8_t m = masked ? 0x80 : 0;
    if (len < 126) {
        h[k++] = (uint8_t)(m | len);
    } else if (len < 65536) {
        h[k++] = m | 126;
        h[k++] = (uint8_t)(len >> 8);
        h[k++] = (uint8_t)len;
    } else {
        h[k++] = m | 127;
        for (int i = 7; i >= 0; i--)
            h[k++] = (uint8_t)((uint64_t)len >> (8 * i));
    }
    if (masked)
        for (int i = 0; i < 4; i++)
            h[k++] = (uint8_t)(0x11 * (i + 1));
    put(b, h, k);
    put_rep(b, '\r', len); /* payload bytes that would mean something in a head */
}

static wire_verdict scan_split(const buf *b, size_t at, size_t step, char *why)
{
    wire_state w;
    wire_init(&w);
    wire_verdict v = WIRE_OK;
    if (step) {
        for (size_t i = 0; i < b->n && !v; i += step)
            v = wire_scan(&w, (const uint8_t *)b->p + i, i + step <= b->n ? step : b->n - i);
    } else {
        v = wire_scan(&w, (const uint8_t *)b->p, at);
        if (!v)
            v = wire_scan(&w, (const uint8_t *)b->p + at, b->n - at);
    }
    if (v) /* spent: the same verdict for anything after */
        CHECK(wire_scan(&w, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18) == v);
    snprintf(why, 112, "%s", v ? w.why : "");
    return v;
}

/* The verdict for b whole, byte by byte and at every split; why (may be NULL) must be in its
 * message. Splits are tried at every offset for inputs up to 4 KiB, at 97 offsets beyond. */
static void expect(const char *what, buf *b, wire_verdict want, const char *why)
{
    char msg[112], msg1[112];
    wire_verdict v = scan_split(b, b->n, 0, msg);
    CHECKF(v == want, "%s: verdict %s, want %s (%s)", what, wire_verdict_name(v),
           wire_verdict_name(want), msg);
    CHECKF(!why || strstr(msg, why), "%s: message \"%s\" lacks \"%s\"", what, msg, why);
    CHECKF(scan_split(b, 0, 1, msg1) == v && !strcmp(msg, msg1), "%s: byte by byte: %s", what,
           msg1);
    size_t stride = b->n <= 4096 ? 1 : b->n / 97;
    for (size_t at = 0; at <= b->n; at += stride)
        CHECKF(scan_split(b, at, 0, msg1) == v && !strcmp(msg, msg1), "%s: split at %zu: %s", what,
               at, msg1);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static const char *GET = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";

/* A head of exactly `total` bytes: GET, `lines` more header lines, then X-Pad to the size. */
static void head_to(buf *b, size_t total, const char *target, int lines, const char *line)
{
    char start[9000];
    snprintf(start, sizeof start, "GET %s HTTP/1.1\r\nHost: h\r\n", target);
    size_t at = b->n;
    puts_(b, start);
    for (int i = 0; i < lines; i++)
        puts_(b, line);
    puts_(b, "X-Pad: ");
    put_rep(b, 'a', total - (b->n - at) - 4);
    puts_(b, "\r\n\r\n");
}

static void valid_streams(void)
{
    buf b = {0};
    const char *body = "{\"a\":\r\n\r\n\"GET /%00 HTTP/1.1\"}";
    char post[256];
    snprintf(post, sizeof post, "POST /v1/completions HTTP/1.1\r\nContent-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    puts_(&b, "\r\n");
    puts_(&b, GET);
    puts_(&b, "\r\n");
    puts_(&b, post);
    puts_(&b, GET);
    puts_(&b, "Content-Length: 0\r\n\r\n");
    puts_(&b, "GET / HTTP/1.0\n\n"); /* LF alone ends lines too */
    expect("kept-alive requests with bodies", &b, WIRE_OK, NULL);

    puts_(&b, "GET /ws HTTP/1.1\r\nUpgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n\r\n");
    size_t lens[] = {0, 5, 125, 126, 300, 65535, 65536, 70000};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        frame(&b, i ? 1 : 9, lens[i], 1);
    expect("an upgrade, then masked frames", &b, WIRE_OK, NULL);

    puts_(&b, "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    put(&b, "\0\x01 anything", 11);
    expect("a chunked body: not followed", &b, WIRE_OK, NULL);

    /* an upgrade that lws will not make (no Connection: upgrade, or not GET): still HTTP after */
    puts_(&b, "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n");
    puts_(&b, "GET /ws HTTP/1.1\r\nUpgrade:websocket\r\n\r\n"); /* no space: the same to lws */
    puts_(&b, GET);
    puts_(&b, "\r\n");
    expect("Upgrade without Connection: upgrade", &b, WIRE_OK, NULL);
}

static void limits(void)
{
    buf b = {0};
    head_to(&b, WIRE_HEAD_MAX, "/", 0, NULL);
    expect("a head of WIRE_HEAD_MAX bytes", &b, WIRE_OK, NULL);
    head_to(&b, WIRE_HEAD_MAX + 1, "/", 0, NULL);
    expect("a head one byte over", &b, WIRE_HEAD_TOO_LARGE, "request head over 16384 bytes");
    puts_(&b, GET);
    for (int i = 0; i < 10000; i++)
        puts_(&b, "\r\n"); /* empty lines before the next request line count */
    expect("empty lines without end", &b, WIRE_HEAD_TOO_LARGE, NULL);

    puts_(&b, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < WIRE_HEADER_LINES_MAX; i++)
        puts_(&b, "Accept: v\r\n");
    puts_(&b, "\r\n");
    expect("WIRE_HEADER_LINES_MAX header lines", &b, WIRE_OK, NULL);
    puts_(&b, "GET / HTTP/1.1\r\n");
    for (int i = 0; i <= WIRE_HEADER_LINES_MAX; i++)
        puts_(&b, "Accept: v\r\n");
    puts_(&b, "\r\n");
    expect("one header line more", &b, WIRE_TOO_MANY_HEADERS, "more than 60 header lines");

    puts_(&b, "GET /");
    put_rep(&b, 'a', WIRE_TARGET_MAX - 1);
    puts_(&b, " HTTP/1.1\r\n\r\n");
    expect("a target of WIRE_TARGET_MAX bytes", &b, WIRE_OK, NULL);
    puts_(&b, "GET /");
    put_rep(&b, 'a', WIRE_TARGET_MAX);
    puts_(&b, " HTTP/1.1\r\n\r\n");
    expect("a target one byte over", &b, WIRE_TARGET_TOO_LONG, "request target over 8192 bytes");

    puts_(&b, "GET /?a");
    for (int i = 1; i < WIRE_QUERY_PARAMS_MAX; i++)
        puts_(&b, "&a");
    puts_(&b, " HTTP/1.1\r\n\r\n");
    expect("WIRE_QUERY_PARAMS_MAX parameters", &b, WIRE_OK, NULL);
    puts_(&b, "GET /?a");
    for (int i = 0; i < WIRE_QUERY_PARAMS_MAX; i++)
        puts_(&b, "&a");
    puts_(&b, " HTTP/1.1\r\n\r\n");
    expect("one parameter more", &b, WIRE_BAD_HEAD, "more than 24 query parameters");
}

static void malformed(void)
{
    static const struct {
        const char *what, *bytes;
        size_t n;
        const char *why;
    } cases[] = {
        {"%00 in the path", "GET /ws%00 HTTP/1.1\r\n\r\n", 0,
         "%00 (a NUL) in the request target at byte 7"},
        {"%00 in the query", "GET /?u=%00 HTTP/1.1\r\n\r\n", 0, "at byte 8"},
        {"%00 after %%", "GET /%%00 HTTP/1.1\r\n\r\n", 0,
         "a '%' not followed by two hex digits in the request target at byte 5"},
        {"% and one hex digit", "HEAD /hea%lthz HTTP/1.1\r\n\r\n", 0,
         "a '%' not followed by two hex digits in the request target at byte 9"},
        {"%4 then a space", "GET /a%4 HTTP/1.1\r\n\r\n", 0, "not followed by two hex digits"},
        {"a raw NUL in the path", "GET /a\0b HTTP/1.1\r\n\r\n", 21,
         "control character 0x00 in the request line at byte 6"},
        {"a tab in the request line", "GET\t/ HTTP/1.1\r\n\r\n", 0,
         "control character 0x09 in the request line"},
        {"DEL in a header", "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", 0,
         "control character 0x7F in the request headers at byte 20"},
        {"a bare CR", "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", 0, "a CR not followed by LF at byte 20"},
        {"Content-Length not a number", "POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 0,
         "Content-Length \"1e3\" is not a length"},
        {"Content-Length empty", "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 0,
         "Content-Length \"\" is not a length"},
        {"Content-Length too long", "POST / HTTP/1.1\r\nContent-Length: 1234567890123456\r\n\r\n",
         0, "is not a length"},
        {"Content-Length not ASCII", "POST / HTTP/1.1\r\nContent-Length: 1\xc3\xa9\r\n\r\n", 0,
         "Content-Length \"1??\" is not a length"},
        {"two Content-Lengths", "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-length: 2\r\n\r\n",
         0, "two different Content-Length values"},
        /* lws 4.1.6 read a head without a method as headers and freed its header table under
         * its own feet (fuzz_http_seq): a request line must be METHOD TARGET HTTP/1.x */
        {"a head without a request line", "GET / HTTP/1.1\r\n\r\nUpgrade:w\r\n\r\n", 0,
         "the request line is not METHOD TARGET HTTP/1.1"},
        {"no target", "GET HTTP/1.1\r\n\r\n", 0, "the request line is not"},
        {"two spaces", "GET  / HTTP/1.1\r\n\r\n", 0, "the request line is not"},
        {"HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", 0, "the request line is not"},
        {"a lower-case method", "get / HTTP/1.1\r\n\r\n", 0, "the request line is not"},
        {"a version with more after it", "GET / HTTP/1.1 x\r\n\r\n", 0, "the request line is not"},
        /* lws 4.1.6 answered another upgrade 403, freed the head's table and read it again */
        {"an unknown Upgrade", "GET / HTTP/1.1\r\nUpgrade: webso\xff\r\n\r\n", 0,
         "Upgrade \"webso?\": only websocket is served"},
        {"Upgrade: websocket, foo", "GET /ws HTTP/1.1\r\nUpgrade: websocket, foo\r\n\r\n", 0,
         "only websocket is served"},
        /* lws keeps a tab, a second leading space and trailing white space in the value, so
         * "websocket\t" was another protocol to it: the same use after free (fuzz_http_seq) */
        {"Upgrade: websocket and a tab", "GET /ws HTTP/1.1\r\nUpgrade: websocket\t\nConnection: Upgrade\r\n\r\n",
         0, "Upgrade \"websocket\" with white space around it: only websocket is served"},
        {"Upgrade: two spaces", "GET /ws HTTP/1.1\r\nUpgrade:  websocket\r\n\r\n", 0,
         "with white space around it"},
        {"Upgrade: a tab before", "GET /ws HTTP/1.1\r\nUpgrade:\twebsocket\r\n\r\n", 0,
         "with white space around it"},
        {"Upgrade: a space after", "GET /ws HTTP/1.1\r\nUpgrade: h2c \r\n\r\n", 0,
         "Upgrade \"h2c\" with white space around it"},
        /* lws 4.1.6 took any other coding (or none) as a body of unknown end and read the next
         * request into it (fuzz_http_seq: its loop spun) */
        {"Transfer-Encoding empty", "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding:\r\n\r\n",
         0, "Transfer-Encoding \"\": only chunked is accepted"},
        {"Transfer-Encoding gzip", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0,
         "only chunked is accepted"},
        {"Transfer-Encoding and Content-Length",
         "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 0,
         "both Content-Length and Transfer-Encoding"},
    };
    buf b = {0};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        put(&b, cases[i].bytes, cases[i].n ? cases[i].n : strlen(cases[i].bytes));
        expect(cases[i].what, &b, WIRE_BAD_HEAD, cases[i].why);
    }
    /* the same Content-Length twice is one length */
    puts_(&b, "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}");
    puts_(&b, GET);
    puts_(&b, "\r\n");
    expect("the same Content-Length twice", &b, WIRE_OK, NULL);
    /* a tab in a header value is allowed */
    puts_(&b, "GET / HTTP/1.1\r\nX: a\tb\r\n\r\n");
    expect("a tab in a header value", &b, WIRE_OK, NULL);
}

static void unmasked(void)
{
    buf b = {0};
    const char *up = "GET /ws HTTP/1.1\r\nupgrade: websocket\r\nconnection: Upgrade\r\n\r\n";
    puts_(&b, up);
    frame(&b, 1, 10, 0);
    expect("an unmasked text frame", &b, WIRE_UNMASKED_FRAME, "an unmasked frame (opcode 1)");
    puts_(&b, up);
    frame(&b, 1, 300, 1);
    frame(&b, 9, 0, 1);
    frame(&b, 8, 70000, 0);
    expect("an unmasked frame after masked ones", &b, WIRE_UNMASKED_FRAME,
           "an unmasked frame (opcode 8)");
    /* before the upgrade the same bytes are a (malformed) head, not frames */
    frame(&b, 1, 10, 0);
    expect("frame bytes without an upgrade", &b, WIRE_BAD_HEAD, NULL);
}

/* wire_scan_upto stops right after each head and each whole request: lws answers one (an
 * upgrade's 101, a GET) before the bytes after it are read. */
static void stops(void)
{
    static const char in[] = "GET /a HTTP/1.1\r\n\r\n"
                             "POST /b HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
                             "\r\n"
                             "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                             "\x81\x80\x01\x02\x03\x04";
    const size_t n = sizeof in - 1;
    const size_t want[] = {19, 19 + 39, 19 + 41, n - 6 /* the upgrade's head */, n};
    const uint32_t reqs[] = {1, 1, 2, 2, 2}, heads[] = {1, 2, 2, 3, 3};
    wire_state w;
    wire_init(&w);
    size_t at = 0;
    for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
        size_t used;
        CHECK(wire_scan_upto(&w, (const uint8_t *)in + at, n - at, &used) == WIRE_OK);
        at += used;
        CHECKF(at == want[k] && w.requests == reqs[k] && w.heads == heads[k],
               "stop %zu at %zu (want %zu), requests %u heads %u", k, at, want[k], w.requests,
               w.heads);
        if (k == 2) /* (the CRLF after the body is read with the next head, and ignored) */
            CHECK(wire_between_requests(&w));
    }
    CHECK(wire_read_mode(&w) == WIRE_READ_FRAMES);
}

int main(void)
{
    stops();
    valid_streams();
    limits();
    malformed();
    unmasked();
    if (test_failures)
        fprintf(stderr, "test_wire_guard: %d failure(s)\n", test_failures);
    else
        printf("test_wire_guard: ok\n");
    return test_failures ? 1 : 0;
}
