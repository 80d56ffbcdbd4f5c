/* test_http_chunked.c: the chunked request body decoder (server/http_chunked.c): bodies with
 * extensions, upper- and lower-case sizes and trailer fields decode to their data; the bytes after
 * the body are left alone; every split of a body into two feeds, and one byte per feed, decode the
 * same; each malformation is refused with its own message; a body past the cap is refused before
 * its data is copied. */
#include <stdio.h>
#include <string.h>

#include "http_chunked.h"
#include "testutil.h"

typedef struct {
    int rc;
    size_t used, len;
    char out[256];
    const char *err;
} result;

/* Feeds s in pieces of `step` bytes (0: all at once), stopping at the first non-MORE. */
static result decode(const char *s, size_t n, size_t step, size_t cap)
{
    result r;
    memset(&r, 0, sizeof r);
    http_chunked d;
    http_chunked_init(&d);
    size_t at = 0;
    if (cap > sizeof r.out)
        cap = sizeof r.out;
    r.rc = HTTP_CHUNKED_MORE;
    while (at < n && r.rc == HTTP_CHUNKED_MORE) {
        size_t k = step && n - at > step ? step : n - at, used = 0;
        r.rc = http_chunked_feed(&d, s + at, k, r.out, &r.len, cap, &used, &r.err);
        CHECKF(used <= k, "used %zu of %zu", used, k);
        at += used;
        if (r.rc == HTTP_CHUNKED_MORE)
            CHECKF(used == k, "MORE but used %zu of %zu", used, k);
    }
    r.used = at;
    return r;
}

static void ok(const char *body, const char *want, size_t rest)
{
    size_t n = strlen(body);
    result all = decode(body, n, 0, 256);
    CHECKF(all.rc == HTTP_CHUNKED_END, "'%s': rc %d (%s)", body, all.rc, all.err ? all.err : "");
    CHECKF(all.len == strlen(want) && !memcmp(all.out, want, all.len), "'%s' gave '%.*s'", body,
           (int)all.len, all.out);
    CHECKF(all.used == n - rest, "'%s': used %zu, want %zu", body, all.used, n - rest);
    result one = decode(body, n, 1, 256);
    CHECK(one.rc == HTTP_CHUNKED_END && one.len == all.len && !memcmp(one.out, all.out, all.len));
    CHECK(one.used == all.used);
    /* every split into two feeds */
    for (size_t cut = 1; cut < n; cut++) {
        http_chunked d;
        http_chunked_init(&d);
        char out[256];
        size_t len = 0, u1 = 0, u2 = 0;
        const char *err;
        int rc = http_chunked_feed(&d, body, cut, out, &len, sizeof out, &u1, &err);
        if (rc == HTTP_CHUNKED_MORE)
            rc = http_chunked_feed(&d, body + cut, n - cut, out, &len, sizeof out, &u2, &err);
        CHECKF(rc == HTTP_CHUNKED_END && len == all.len && !memcmp(out, all.out, len) &&
                   u1 + u2 == all.used,
               "'%s' cut at %zu: rc %d, len %zu, used %zu", body, cut, rc, len, u1 + u2);
    }
}

static void bad(const char *body, const char *want_err)
{
    result r = decode(body, strlen(body), 0, 256);
    CHECKF(r.rc == HTTP_CHUNKED_BAD, "'%s': rc %d, want BAD", body, r.rc);
    CHECKF(r.err && strstr(r.err, want_err), "'%s': error '%s', want '%s'", body,
           r.err ? r.err : "(none)", want_err);
    result one = decode(body, strlen(body), 1, 256);
    CHECKF(one.rc == HTTP_CHUNKED_BAD && one.err && !strcmp(one.err, r.err),
           "'%s' byte by byte: rc %d", body, one.rc);
}

int main(void)
{
    ok("5\r\nhello\r\n0\r\n\r\n", "hello", 0);
    ok("3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n", "{\"a\":1}", 0);
    ok("A\r\n0123456789\r\na\r\nabcdefghij\r\n0\r\n\r\n", "0123456789abcdefghij", 0);
    ok("3;name=value;x\r\nabc\r\n0;last\r\n\r\n", "abc", 0);
    ok("00003\r\nabc\r\n000\r\n\r\n", "abc", 0);
    ok("2\r\nhi\r\n0\r\nX-Trailer: 1\r\nOther: two\r\n\r\n", "hi", 0);
    ok("0\r\n\r\n", "", 0);
    /* what follows the body (a pipelined request) is not taken */
    ok("2\r\nhi\r\n0\r\n\r\nPOST / HTTP/1.1\r\n", "hi", strlen("POST / HTTP/1.1\r\n"));

    bad("\r\n", "does not start with its size");
    bad("x\r\n", "does not start with its size");
    bad("5x\r\nhello\r\n0\r\n\r\n", "followed by something other than CRLF");
    bad("5\nhello\r\n0\r\n\r\n", "followed by something other than CRLF");
    bad("5;ext\nhello", "bare LF");
    bad("5\rhello", "CR is not followed by LF");
    bad("3\r\nhello\r\n0\r\n\r\n", "longer than its size");
    bad("3\r\nabc\rX", "CR without LF");
    bad("1234567890abcdef\r\n", "more than 15 hex digits");
    bad("0\r\nX: 1\rY", "trailer field's CR");
    bad("0\r\n\rX", "blank line has CR without LF");

    /* the cap: a chunk that would pass it is refused at its size line, nothing copied */
    result big = decode("5\r\nhello\r\n0\r\n\r\n", 15, 0, 4);
    CHECKF(big.rc == HTTP_CHUNKED_BIG && big.len == 0, "cap 4: rc %d len %zu", big.rc, big.len);
    result two = decode("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", 21, 1, 4);
    CHECKF(two.rc == HTTP_CHUNKED_BIG && two.len == 3, "cap 4, 3+2: rc %d len %zu", two.rc,
           two.len);
    result fits = decode("3\r\nabc\r\n1\r\nd\r\n0\r\n\r\n", 20, 0, 4);
    CHECKF(fits.rc == HTTP_CHUNKED_END && fits.len == 4, "cap 4, 3+1: rc %d len %zu", fits.rc,
           fits.len);
    /* 15 digits of a huge size: refused as too big, not overflowed */
    result huge = decode("fffffffffffffff\r\n", 17, 0, 256);
    CHECK(huge.rc == HTTP_CHUNKED_BIG);

    if (test_failures) {
        fprintf(stderr, "test_http_chunked: %d failures\n", test_failures);
        return 1;
    }
    printf("test_http_chunked: ok\n");
    return 0;
}
