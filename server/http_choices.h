/* http_choices.h: the choices of one OpenAI answer (completions and chat completions) as its
 * requests' events come: one request per prompt of the body (OpenAI's batch), n choices each,
 * choice k = prompt_index * n + choice (OpenAI's order). Each choice keeps its text and, when asked
 * for, its logprobs as the JSON items of OpenAI's lists (completions: tokens, token_logprobs,
 * top_logprobs, text_offset; chat: logprobs.content); with echo the prompt's part (its text, and
 * with logprobs its tokens, each scored but the first) is kept once per prompt and goes before
 * every choice of it. The whole answer's "choices" and a stream event's logprobs are written from
 * here; the rest of the answer is http_openai.c's.
 *
 * Token strings (docs/http-api.md "Log probabilities"): a token's bytes when they are UTF-8 on
 * their own, else OpenAI's "bytes:\xNN..." (so that no two tokens share a key of top_logprobs);
 * chat's "bytes" is the raw byte list. text_offset counts characters (code points) of the
 * returned text, as OpenAI and vLLM do. Service thread. */
#ifndef IFL_HTTP_CHOICES_H
#define IFL_HTTP_CHOICES_H

#include <stdint.h>

#include "request.h"
#include "strbuf.h"
#include "tokenizer.h"

/* One choice's part (or a prompt's, with echo). */
typedef struct {
    strbuf text;
    strbuf tokens, lps, tops, offsets; /* completions' list items, comma-separated; chat: tokens
                                          holds the content entries */
    int32_t n_entries;
    size_t chars;   /* characters of text: the next text_offset */
    int sent_first; /* stream: its first event is out (chat's role, completions' echo) */
    int ended;
    ifl_finish finish;
} http_choice;

typedef struct {
    int chat;         /* chat's logprobs shape */
    int32_t n_prompts, n;
    int32_t logprobs; /* -1: none, else best tokens per entry */
    int echo;
    http_choice *c;    /* (n_prompts * n) */
    http_choice *echo_part; /* (n_prompts) with echo: the prompt's part; else NULL */
    req_result sum;    /* usage over the requests, the finish of the first that failed */
    int32_t n_ended;   /* requests ended */
    int oom;
} http_choices;

/* 0, or -1 out of memory. */
int http_choices_init(http_choices *h, int chat, int32_t n_prompts, int32_t n, int32_t logprobs,
                      int echo);
void http_choices_free(http_choices *h);
static inline int32_t http_choice_index(const http_choices *h, const srv_req *r, int32_t choice)
{
    return r->prompt_index * h->n + choice;
}

/* The request started: with echo its prompt's part (text, tokens, text_offset; with logprobs
 * position 0's null entries). */
void http_choices_started(http_choices *h, const ifl_tokenizer *tok, const srv_req *r);
/* Prompt scores of positions [index, index + n). */
void http_choices_prompt(http_choices *h, const ifl_tokenizer *tok, const srv_req *r,
                         int32_t index, const ifl_logprob *lp, int32_t n);
/* A token into its choice; ev_lp (not NULL, with logprobs): this token's logprobs alone, as a
 * stream event's "logprobs" value. */
void http_choices_token(http_choices *h, const ifl_tokenizer *tok, const srv_req *r,
                        const req_token *t, strbuf *ev_lp);
/* A choice ended (res->choice of r), or with n 1 the request. */
void http_choices_choice_end(http_choices *h, const srv_req *r, const req_result *res);
/* A request ended: its usage into the sum. Returns 1 when it was the last. */
int http_choices_request_end(http_choices *h, const req_result *res);

/* Choice k's "logprobs" value: null, or its object with echo's part first (echo: include the
 * prompt's; stream events pass 0 and write the prompt's part with http_choices_write_echo_lp). */
void http_choices_write_lp(strbuf *sb, const http_choices *h, int32_t k, int echo);
/* The prompt part's "logprobs" value (stream: the echo event of a choice of prompt p). */
void http_choices_write_echo_lp(strbuf *sb, const http_choices *h, int32_t p);

#endif
