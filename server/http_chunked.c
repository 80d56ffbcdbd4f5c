/* http_chunked.c: the chunked request body decoder of http_chunked.h: a byte-at-a-time state
 * machine (a body may arrive split anywhere), copying each chunk's data in one memcpy. */
#include "http_chunked.h"

#include <string.h>

enum {
    S_SIZE,     /* hex digits of a chunk size */
    S_EXT,      /* ";name=value" after the size, up to CR */
    S_SIZE_LF,  /* LF ending the size line */
    S_DATA,     /* remain bytes of data */
    S_DATA_CR,  /* CR after the data */
    S_DATA_LF,  /* LF after the data */
    S_TRAILER,  /* start of a trailer line: CR (the end) or a field */
    S_FIELD,    /* a trailer field, up to CR */
    S_FIELD_LF, /* LF ending a trailer field */
    S_END_LF,   /* LF of the blank line: the end */
    S_DONE,
};

void http_chunked_init(http_chunked *d)
{
    memset(d, 0, sizeof *d);
    d->state = S_SIZE;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int http_chunked_feed(http_chunked *d, const char *in, size_t n, char *out, size_t *out_len,
                      size_t out_cap, size_t *used, const char **err)
{
    size_t i = 0;
    *err = NULL;
#define BAD(msg)                                                                                   \
    do {                                                                                           \
        *err = (msg);                                                                              \
        *used = i;                                                                                 \
        return HTTP_CHUNKED_BAD;                                                                   \
    } while (0)
    while (i < n && d->state != S_DONE) {
        char c = in[i];
        switch (d->state) {
        case S_SIZE: {
            int v = hexval(c);
            if (v >= 0) {
                if (++d->digits > 15)
                    BAD("a chunk size has more than 15 hex digits");
                d->remain = d->remain * 16 + (uint64_t)v;
            } else if (!d->digits) {
                BAD("a chunk does not start with its size in hex");
            } else if (c == ';' || c == ' ' || c == '\t') {
                d->state = S_EXT;
            } else if (c == '\r') {
                d->state = S_SIZE_LF;
            } else {
                BAD("a chunk size is followed by something other than CRLF or an extension");
            }
            i++;
            break;
        }
        case S_EXT:
            if (c == '\r')
                d->state = S_SIZE_LF;
            else if (c == '\n')
                BAD("a chunk size line ends in a bare LF");
            i++;
            break;
        case S_SIZE_LF:
            if (c != '\n')
                BAD("a chunk size line's CR is not followed by LF");
            i++;
            if (d->remain > out_cap - *out_len) {
                *used = i;
                return HTTP_CHUNKED_BIG;
            }
            d->state = d->remain ? S_DATA : S_TRAILER;
            break;
        case S_DATA: {
            size_t k = n - i < d->remain ? n - i : (size_t)d->remain;
            memcpy(out + *out_len, in + i, k);
            *out_len += k;
            d->remain -= k;
            i += k;
            if (!d->remain)
                d->state = S_DATA_CR;
            break;
        }
        case S_DATA_CR:
            if (c != '\r')
                BAD("a chunk's data is longer than its size (no CRLF after it)");
            d->state = S_DATA_LF;
            i++;
            break;
        case S_DATA_LF:
            if (c != '\n')
                BAD("a chunk's data is followed by CR without LF");
            d->state = S_SIZE;
            d->digits = 0;
            i++;
            break;
        case S_TRAILER:
            d->state = c == '\r' ? S_END_LF : S_FIELD;
            i++;
            break;
        case S_FIELD:
            if (c == '\r')
                d->state = S_FIELD_LF;
            i++;
            break;
        case S_FIELD_LF:
            if (c != '\n')
                BAD("a trailer field's CR is not followed by LF");
            d->state = S_TRAILER;
            i++;
            break;
        case S_END_LF:
            if (c != '\n')
                BAD("the last chunk's blank line has CR without LF");
            d->state = S_DONE;
            i++;
            break;
        default: BAD("the decoder is in no known state");
        }
    }
#undef BAD
    *used = i;
    return d->state == S_DONE ? HTTP_CHUNKED_END : HTTP_CHUNKED_MORE;
}
