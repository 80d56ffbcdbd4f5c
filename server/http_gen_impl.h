/* http_gen_impl.h: the state of one HTTP generation request (struct http_gen), shared by the two
 * halves of generation over HTTP: http_gen.c (the submission, the request layer's sink, the
 * answer) and http_gen_body.c (the route and the body). Private to those two files. */
#ifndef IFL_HTTP_GEN_IMPL_H
#define IFL_HTTP_GEN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "http_api.h"
#include "http_chunked.h"
#include "service.h"
#include "strbuf.h"

struct http_gen {
    struct lws *wsi;
    http_req_info ri;
    /* the body */
    char *body;
    size_t body_len, body_cap;
    int chunked;    /* Transfer-Encoding: chunked, decoded by dec */
    int body_whole; /* chunked: the last chunk came; later bytes are not this request's */
    http_chunked dec;
    http_body_fn on_body; /* a body answered by a handler of its own (the tokenizer's), or NULL */
    /* the answer */
    uint64_t t_arrival; /* monotonic us: the request's headers arrived */
    int submitted;      /* the request layer has it: sink calls will come */
    int headers_sent;   /* stream: the 200 and its headers are out */
    int ended;          /* stream: the last event is queued */
    int plain;          /* stream: HTTP/1.0, sent without chunked coding, closed at its end */
    int overflow;       /* stream: past --max-outbox, closing */
    int failed;         /* a request of the batch failed: the others are cancelled */
    req_layer *rl;      /* set at submission, with the tokenizer (token strings of logprobs) */
    const ifl_tokenizer *tok;
    http_choices ch;    /* the choices so far (http_choices.h) */
    strbuf out;         /* stream: bytes to send */
    size_t out_sent;    /* of out */
};

/* Frees c->gen (if any) and clears it. */
void gen_free(srv_conn *c);

/* An error answer in the API's shape, with `status` (close: the connection closes after it); c->gen
 * is freed (ri may be its). */
int gen_error_answer(srv_conn *c, struct lws *wsi, const http_req_info *ri, int status,
                     ifl_code code, const char *param, const char *msg, int close);

#endif
