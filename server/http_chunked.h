/* http_chunked.h: a decoder of HTTP/1.1 chunked request bodies (RFC 9112 section 7.1), fed the
 * raw bytes lws hands a POST without a Content-Length (lws 4.1 does not decode them itself).
 * Chunk extensions and trailer fields are read and dropped; sizes are hex, at most 15 digits;
 * the decoded body is capped. Pure: no lws, no allocation. */
#ifndef IFL_HTTP_CHUNKED_H
#define IFL_HTTP_CHUNKED_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int state;
    int digits;      /* of the chunk size read so far */
    uint64_t remain; /* bytes of the current chunk still to come */
} http_chunked;

enum { HTTP_CHUNKED_MORE = 0, HTTP_CHUNKED_END = 1, HTTP_CHUNKED_BAD = -1, HTTP_CHUNKED_BIG = -2 };

void http_chunked_init(http_chunked *d);
/* Decodes in[0..n): the body's bytes go to out (*out_len of out_cap used). Returns
 * HTTP_CHUNKED_END once the last chunk and trailer are read (*used: the bytes of in that were
 * the body's, the rest belongs to whatever follows), HTTP_CHUNKED_MORE when all n bytes were
 * taken and more are due, HTTP_CHUNKED_BAD with *err naming the fault, or HTTP_CHUNKED_BIG when
 * the body would pass out_cap. */
int http_chunked_feed(http_chunked *d, const char *in, size_t n, char *out, size_t *out_len,
                      size_t out_cap, size_t *used, const char **err);

#endif
