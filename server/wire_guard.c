/* wire_guard.c: the scanner of wire_guard.h. One byte at a time through request heads (so any
 * split of the input gives the same verdict), lengths skipped at once through bodies and frame
 * payloads. */
#include "wire_guard.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api_table.h"

typedef enum { PH_HEAD, PH_BODY, PH_FRAMES, PH_PASS, PH_FAILED } wire_phase;

void wire_init(wire_state *w)
{
    memset(w, 0, sizeof *w);
}

/* Ready for the next request head; the phase is kept. */
static void reset_head(wire_state *w)
{
    uint8_t phase = w->phase;
    uint64_t left = w->left;
    uint32_t requests = w->requests, heads = w->heads;
    uint8_t api = w->api, http10 = w->http10, head_req = w->head_req;
    wire_init(w);
    w->phase = phase;
    w->left = left;
    w->requests = requests;
    w->heads = heads;
    w->api = api;
    w->http10 = http10;
    w->head_req = head_req;
}

static void reset_line(wire_state *w)
{
    w->line_len = 0;
    w->in_value = 0;
    w->name_len = w->value_len = w->name_long = 0;
    w->value_lead = w->value_padded = 0;
}

__attribute__((format(printf, 3, 4))) static wire_verdict fail(wire_state *w, wire_verdict v,
                                                               const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->why, sizeof w->why, fmt, ap);
    va_end(ap);
    w->phase = PH_FAILED;
    w->verdict = (uint8_t)v;
    return v;
}

static char lower(uint8_t c)
{
    return (char)(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
}

static int name_is(const wire_state *w, const char *name)
{
    size_t n = strlen(name);
    return !w->name_long && w->name_len == n && !memcmp(w->name, name, n);
}

static int value_has(const wire_state *w, const char *word)
{
    size_t n = strlen(word);
    for (size_t i = 0; i + n <= w->value_len; i++)
        if (!memcmp(w->value + i, word, n))
            return 1;
    return 0;
}

/* What the client sent, printable ASCII only (for a message), in out's cap bytes. */
static void show(const char *v, size_t n, char *out, size_t cap)
{
    if (n > cap - 1)
        n = cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = v[i] >= 0x20 && v[i] < 0x7f ? v[i] : '?';
    out[n] = 0;
}

static wire_verdict content_length(wire_state *w)
{
    uint64_t v = 0;
    int ok = w->value_len > 0 && w->value_len <= 15; /* up to 10^15 - 1: a body we could read */
    for (size_t i = 0; ok && i < w->value_len; i++) {
        ok = w->value[i] >= '0' && w->value[i] <= '9';
        v = v * 10 + (uint64_t)(w->value[i] - '0');
    }
    if (!ok) {
        char shown[sizeof w->value + 1];
        show(w->value, w->value_len, shown, sizeof shown);
        return fail(w, WIRE_BAD_HEAD, "Content-Length \"%s\" is not a length", shown);
    }
    if (w->has_length && v != w->content_length)
        return fail(w, WIRE_BAD_HEAD, "two different Content-Length values");
    w->has_length = 1;
    w->content_length = v;
    return WIRE_OK;
}

/* A header line is complete: note the headers that say what follows the head. */
static wire_verdict end_header(wire_state *w)
{
    while (w->value_len &&
           (w->value[w->value_len - 1] == ' ' || w->value[w->value_len - 1] == '\t')) {
        w->value_len--;
        w->value_padded = 1;
    }
    if (name_is(w, "content-length"))
        return content_length(w);
    if (name_is(w, "transfer-encoding")) {
        /* only "chunked", as http_gen.c reads it: lws 4.1.6 would take another value (or none)
         * as a body of unknown end and read the next request into it */
        if (w->value_len != 7 || memcmp(w->value, "chunked", 7)) {
            char shown[sizeof w->value + 1];
            show(w->value, w->value_len, shown, sizeof shown);
            return fail(w, WIRE_BAD_HEAD, "Transfer-Encoding \"%s\": only chunked is accepted",
                        shown);
        }
        w->chunked = 1;
    }
    else if (name_is(w, "upgrade")) {
        /* lws 4.1.6 answers another protocol 403, ends the transaction (freeing the head's
         * table) and then reads the value again (fuzz_http_seq: a use after free). The value is
         * compared as lws keeps it: it swallows one leading space, not a tab or a second space,
         * and keeps trailing white space ("websocket\t" was another protocol to it) */
        int ws = w->value_len == 9 && !memcmp(w->value, "websocket", 9);
        if (w->value_padded || (!ws && !(w->value_len == 3 && !memcmp(w->value, "h2c", 3)))) {
            char shown[sizeof w->value + 1];
            show(w->value, w->value_len, shown, sizeof shown);
            return fail(w, WIRE_BAD_HEAD, "Upgrade \"%s\"%s: only websocket is served", shown,
                        w->value_padded ? " with white space around it" : "");
        }
        w->upgrade_ws |= ws;
    }
    else if (name_is(w, "connection") && value_has(w, "upgrade"))
        w->connection_upgrade = 1;
    return WIRE_OK;
}

/* The empty line: what comes next is a body, frames, or the next request. */
static wire_verdict end_head(wire_state *w)
{
    w->heads++;
    if (w->chunked && w->has_length)
        return fail(w, WIRE_BAD_HEAD, "a request has both Content-Length and Transfer-Encoding");
    if (w->chunked) {
        w->phase = PH_PASS; /* lws reads the chunks; nothing after them is checked */
        return WIRE_OK;
    }
    if (w->upgrade_ws && w->connection_upgrade && w->is_get) {
        w->phase = PH_FRAMES; /* refused upgrades are closed, so frames are all that can come */
        w->left = 0;
    } else if (w->has_length && w->content_length) {
        w->phase = PH_BODY;
        w->left = w->content_length;
    } else {
        w->requests++; /* no body: the head is the whole request */
    }
    reset_head(w);
    return WIRE_OK;
}

static wire_verdict end_line(wire_state *w)
{
    if (!w->lines) {
        if (!w->line_len)
            return WIRE_OK; /* an empty line before the request line is ignored (RFC 9112 2.2) */
        w->lines = 1;
        w->is_get = name_is(w, "GET");
        w->head_req = name_is(w, "HEAD");
        int http1 = w->version_seen == 8 && !memcmp(w->version, "HTTP/1.", 7) &&
                    (w->version[7] == '0' || w->version[7] == '1');
        if (w->part != 2 || !w->name_len || w->method_bad || !w->target_seen || !http1)
            return fail(w, WIRE_BAD_HEAD,
                        "the request line is not METHOD TARGET HTTP/1.1 (or HTTP/1.0)");
        w->http10 = w->version[7] == '0';
        reset_line(w);
        return WIRE_OK;
    }
    if (!w->line_len)
        return end_head(w);
    wire_verdict v = end_header(w);
    if (v)
        return v;
    if (w->lines++ > WIRE_HEADER_LINES_MAX)
        return fail(w, WIRE_TOO_MANY_HEADERS, "more than %d header lines", WIRE_HEADER_LINES_MAX);
    reset_line(w);
    return WIRE_OK;
}

static wire_verdict target_byte(wire_state *w, uint8_t c)
{
    if (++w->target_len > WIRE_TARGET_MAX)
        return fail(w, WIRE_TARGET_TOO_LONG, "request target over %d bytes", WIRE_TARGET_MAX);
    if (c == '?' && !w->params)
        w->params = 1;
    else if (c == '&' && w->params && ++w->params > WIRE_QUERY_PARAMS_MAX)
        return fail(w, WIRE_BAD_HEAD, "more than %d query parameters", WIRE_QUERY_PARAMS_MAX);
    /* percent-encoding: two hex digits after each '%' (lws 4.1.6 answers another with its own
     * HTML 403, a body even to a HEAD), and never %00 */
    if (w->pct) {
        int hex = (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
        if (!hex)
            return fail(w, WIRE_BAD_HEAD,
                        "a '%%' not followed by two hex digits in the request target at byte %u",
                        w->head_len - (w->pct == 1 ? 2 : 3));
        if (w->pct == 2 && c == '0')
            return fail(w, WIRE_BAD_HEAD, "%%00 (a NUL) in the request target at byte %u",
                        w->head_len - 3);
        w->pct = w->pct == 1 ? (c == '0' ? 2 : 3) : 0;
        return WIRE_OK;
    }
    w->pct = c == '%';
    return WIRE_OK;
}

/* The front end a target is under, from its first bytes (so far; the prefixes are no longer). */
static void classify_target(wire_state *w)
{
    unsigned n = w->target_seen < 4 ? w->target_seen : 4;
    w->api = (uint8_t)api_front_end_of((const char *)w->target4, n);
}

static wire_verdict request_line_byte(wire_state *w, uint8_t c)
{
    if (c == ' ') {
        if (w->part == 1 && w->pct)
            return fail(w, WIRE_BAD_HEAD,
                        "a '%%' not followed by two hex digits in the request target at byte %u",
                        w->head_len - (w->pct == 1 ? 2 : 3));
        if (w->part == 0) /* the method is whole: a refusal of a HEAD has no body */
            w->head_req = name_is(w, "HEAD");
        if (w->part < 2)
            w->part++;
        return WIRE_OK;
    }
    if (w->part == 1) {
        if (w->target_seen < 4)
            w->target4[w->target_seen] = c;
        w->target_seen += w->target_seen < 255;
        if (w->target_seen <= 4)
            classify_target(w);
        return target_byte(w, c);
    }
    if (w->part == 2) {
        if (w->version_seen < sizeof w->version)
            w->version[w->version_seen] = c;
        w->version_seen += w->version_seen < 255;
        return WIRE_OK;
    }
    if (w->part == 0 && !w->name_len && !w->name_long)
        w->api = w->http10 = w->head_req = 0; /* a new request: until its line is whole, none */
    if (w->part == 0) { /* the method (case-sensitive): only whether it is GET matters */
        if (c < 'A' || c > 'Z')
            w->method_bad = 1;
        if (w->name_len < sizeof w->name)
            w->name[w->name_len++] = (char)c;
        else
            w->name_long = 1;
    }
    return WIRE_OK;
}

static wire_verdict header_byte(wire_state *w, uint8_t c)
{
    if (!w->in_value) {
        if (c == ':')
            w->in_value = 1;
        else if (w->name_len < sizeof w->name)
            w->name[w->name_len++] = lower(c);
        else
            w->name_long = 1;
        return WIRE_OK;
    }
    if (!w->value_len && (c == ' ' || c == '\t')) {
        if (c == '\t' || w->value_lead++) /* lws swallows one space */
            w->value_padded = 1;
        return WIRE_OK; /* leading white space */
    }
    if (w->value_len < sizeof w->value)
        w->value[w->value_len++] = lower(c);
    return WIRE_OK;
}

static wire_verdict head_byte(wire_state *w, uint8_t c)
{
    if (++w->head_len > WIRE_HEAD_MAX)
        return fail(w, WIRE_HEAD_TOO_LARGE, "request head over %d bytes", WIRE_HEAD_MAX);
    if (w->cr) {
        w->cr = 0;
        if (c != '\n')
            return fail(w, WIRE_BAD_HEAD, "a CR not followed by LF at byte %u of the request head",
                        w->head_len - 2);
        return end_line(w);
    }
    if (c == '\r') {
        w->cr = 1;
        return WIRE_OK;
    }
    if (c == '\n')
        return end_line(w);
    if ((c < 0x20 && (c != '\t' || !w->lines)) || c == 0x7f)
        return fail(w, WIRE_BAD_HEAD, "control character 0x%02X in the request %s at byte %u", c,
                    w->lines ? "headers" : "line", w->head_len - 1);
    w->line_len++;
    return w->lines ? header_byte(w, c) : request_line_byte(w, c);
}

/* One byte of a frame header (the payload is skipped by the caller). */
static wire_verdict frame_byte(wire_state *w, uint8_t c)
{
    w->frame[w->frame_len++] = c;
    if (w->frame_len < 2)
        return WIRE_OK;
    if (!(w->frame[1] & 0x80))
        return fail(w, WIRE_UNMASKED_FRAME, "an unmasked frame (opcode %u): a client must mask",
                    w->frame[0] & 0x0f);
    unsigned len7 = w->frame[1] & 0x7f, ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
    if (w->frame_len < 2 + ext + 4)
        return WIRE_OK;
    uint64_t len = len7;
    if (ext) {
        len = 0;
        for (unsigned i = 0; i < ext; i++)
            len = len << 8 | w->frame[2 + i];
    }
    w->left = len;
    w->frame_len = 0;
    return WIRE_OK;
}

wire_verdict wire_scan_upto(wire_state *w, const uint8_t *p, size_t n, size_t *used)
{
    size_t i = 0;
    uint32_t requests = w->requests, heads = w->heads;
    while (i < n && w->requests == requests && w->heads == heads) {
        wire_verdict v = WIRE_OK;
        if (w->phase == PH_FAILED)
            break;
        if (w->phase == PH_PASS) {
            i = n;
            break;
        }
        if ((w->phase == PH_BODY || w->phase == PH_FRAMES) && w->left) {
            uint64_t k = w->left < n - i ? w->left : n - i;
            i += (size_t)k;
            w->left -= k;
            if (!w->left && w->phase == PH_BODY) {
                w->phase = PH_HEAD;
                w->requests++;
            }
            continue;
        }
        v = w->phase == PH_FRAMES ? frame_byte(w, p[i]) : head_byte(w, p[i]);
        i++;
        if (v) {
            *used = i;
            return v;
        }
    }
    *used = i;
    return w->phase == PH_FAILED ? (wire_verdict)w->verdict : WIRE_OK;
}

wire_verdict wire_scan(wire_state *w, const uint8_t *p, size_t n)
{
    size_t at = 0;
    while (at < n) {
        size_t used;
        wire_verdict v = wire_scan_upto(w, p + at, n - at, &used);
        if (v)
            return v;
        at += used;
    }
    return w->phase == PH_FAILED ? (wire_verdict)w->verdict : WIRE_OK;
}

int wire_read_mode(const wire_state *w)
{
    if (w->phase == PH_HEAD)
        return WIRE_READ_HEAD;
    if (w->phase == PH_BODY)
        return WIRE_READ_BODY;
    return w->phase == PH_FRAMES ? WIRE_READ_FRAMES : WIRE_READ_ANY;
}

uint64_t wire_body_left(const wire_state *w)
{
    return w->phase == PH_BODY ? w->left : 0;
}

int wire_between_requests(const wire_state *w)
{
    return w->phase == PH_HEAD && !w->lines && !w->line_len && !w->cr && !w->head_len;
}

int wire_http_status(wire_verdict v)
{
    switch (v) {
    case WIRE_HEAD_TOO_LARGE:
    case WIRE_TOO_MANY_HEADERS: return 431;
    case WIRE_TARGET_TOO_LONG: return 414;
    case WIRE_BAD_HEAD: return 400;
    default: return 0;
    }
}

const char *wire_verdict_name(wire_verdict v)
{
    switch (v) {
    case WIRE_HEAD_TOO_LARGE: return "head_too_large";
    case WIRE_TOO_MANY_HEADERS: return "too_many_headers";
    case WIRE_TARGET_TOO_LONG: return "target_too_long";
    case WIRE_BAD_HEAD: return "bad_head";
    case WIRE_UNMASKED_FRAME: return "unmasked_frame";
    default: return "ok";
    }
}
