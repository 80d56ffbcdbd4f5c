/* http_choices.c: the choices of one OpenAI answer and their logprobs (http_choices.h). */
#include "http_choices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol.h" /* proto_put_logprob: /ws's digits */
#include "utf8.h"

#define ECHO_PIECE 64 /* bytes of a token decoded at once */

static void choice_init(http_choice *c)
{
    memset(c, 0, sizeof *c);
    sb_init(&c->text, 0);
    sb_init(&c->tokens, 0);
    sb_init(&c->lps, 0);
    sb_init(&c->tops, 0);
    sb_init(&c->offsets, 0);
}

static void choice_free(http_choice *c)
{
    sb_free(&c->text);
    sb_free(&c->tokens);
    sb_free(&c->lps);
    sb_free(&c->tops);
    sb_free(&c->offsets);
}

int http_choices_init(http_choices *h, int chat, int32_t n_prompts, int32_t n, int32_t logprobs,
                      int echo)
{
    memset(h, 0, sizeof *h);
    h->chat = chat;
    h->n_prompts = n_prompts > 0 ? n_prompts : 1;
    h->n = n > 0 ? n : 1;
    h->logprobs = logprobs;
    h->echo = echo;
    size_t n_c = (size_t)h->n_prompts * (size_t)h->n;
    h->c = calloc(n_c, sizeof *h->c);
    h->echo_part = echo ? calloc((size_t)h->n_prompts, sizeof *h->echo_part) : NULL;
    if (!h->c || (echo && !h->echo_part)) {
        free(h->c);
        free(h->echo_part);
        memset(h, 0, sizeof *h);
        return -1;
    }
    for (size_t k = 0; k < n_c; k++)
        choice_init(&h->c[k]);
    for (int32_t p = 0; echo && p < h->n_prompts; p++)
        choice_init(&h->echo_part[p]);
    return 0;
}

void http_choices_free(http_choices *h)
{
    for (int32_t k = 0; h->c && k < h->n_prompts * h->n; k++)
        choice_free(&h->c[k]);
    for (int32_t p = 0; h->echo_part && p < h->n_prompts; p++)
        choice_free(&h->echo_part[p]);
    free(h->c);
    free(h->echo_part);
    memset(h, 0, sizeof *h);
}

/* ---- tokens as strings ---------------------------------------------------------------------- */

static size_t count_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* A token's string: its bytes when they are UTF-8 on their own, else "bytes:\xNN..." (OpenAI's
 * form: lowercase hex, a literal backslash). */
static void put_token_str(strbuf *sb, const ifl_tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *b = ifl_tokenizer_token_bytes(tok, id, &len);
    if (!b) {
        sb_puts(sb, "\"\"");
        return;
    }
    if (ifl_utf8_valid(b, len)) {
        sb_json_str(sb, b, len);
        return;
    }
    char buf[6 + 4 * 64 + 1];
    size_t o = (size_t)snprintf(buf, sizeof buf, "bytes:");
    for (size_t i = 0; i < len && o + 5 < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "\\x%02x", (unsigned char)b[i]);
    sb_json_str(sb, buf, o);
}

/* Chat's "bytes": the token's raw bytes as numbers. */
static void put_token_bytes(strbuf *sb, const ifl_tokenizer *tok, int32_t id)
{
    size_t len = 0;
    const char *b = ifl_tokenizer_token_bytes(tok, id, &len);
    sb_puts(sb, "[");
    for (size_t i = 0; b && i < len; i++)
        sb_printf(sb, "%s%d", i ? "," : "", (unsigned char)b[i]);
    sb_puts(sb, "]");
}

/* ---- entries -------------------------------------------------------------------------------- */

/* Completions' top_logprobs item: {"string": logprob, ...} best first. */
static void put_top_dict(strbuf *sb, const ifl_tokenizer *tok, const ifl_logprob *lp)
{
    sb_puts(sb, "{");
    for (int32_t k = 0; k < lp->n_top; k++) {
        if (k)
            sb_puts(sb, ",");
        put_token_str(sb, tok, lp->top[k].token);
        sb_puts(sb, ":");
        proto_put_logprob(sb, lp->top[k].logprob);
    }
    sb_puts(sb, "}");
}

/* Chat's content entry of one token. */
static void put_chat_entry(strbuf *sb, const ifl_tokenizer *tok, const ifl_logprob *lp)
{
    sb_puts(sb, "{\"token\":");
    put_token_str(sb, tok, lp->token);
    sb_puts(sb, ",\"logprob\":");
    proto_put_logprob(sb, lp->logprob);
    sb_puts(sb, ",\"bytes\":");
    put_token_bytes(sb, tok, lp->token);
    sb_puts(sb, ",\"top_logprobs\":[");
    for (int32_t k = 0; k < lp->n_top; k++) {
        sb_puts(sb, k ? ",{\"token\":" : "{\"token\":");
        put_token_str(sb, tok, lp->top[k].token);
        sb_puts(sb, ",\"logprob\":");
        proto_put_logprob(sb, lp->top[k].logprob);
        sb_puts(sb, ",\"bytes\":");
        put_token_bytes(sb, tok, lp->top[k].token);
        sb_puts(sb, "}");
    }
    sb_puts(sb, "]}");
}

/* Appends one item to a comma-separated list. */
static strbuf *item(strbuf *list, int32_t n_before)
{
    if (n_before)
        sb_puts(list, ",");
    return list;
}

/* A completions entry of token id at text offset `offset`; lp NULL: null logprob and top (the
 * prompt's first position). */
static void add_cmpl_entry(http_choice *c, const ifl_tokenizer *tok, int32_t id,
                           const ifl_logprob *lp, size_t offset)
{
    put_token_str(item(&c->tokens, c->n_entries), tok, id);
    sb_printf(item(&c->offsets, c->n_entries), "%zu", offset);
    if (lp) {
        proto_put_logprob(item(&c->lps, c->n_entries), lp->logprob);
        put_top_dict(item(&c->tops, c->n_entries), tok, lp);
    } else {
        sb_puts(item(&c->lps, c->n_entries), "null");
        sb_puts(item(&c->tops, c->n_entries), "null");
    }
    c->n_entries++;
}

/* ---- events --------------------------------------------------------------------------------- */

void http_choices_started(http_choices *h, const ifl_tokenizer *tok, const srv_req *r)
{
    if (!h->echo || !r->prompt_ids || r->prompt_index >= h->n_prompts)
        return;
    http_choice *e = &h->echo_part[r->prompt_index];
    ifl_utf8_stream us;
    ifl_utf8_stream_init(&us, IFL_UTF8_REPLACE);
    for (int32_t i = 0; i < r->prompt_tokens; i++) {
        size_t len = 0;
        const char *b = ifl_tokenizer_token_bytes(tok, r->prompt_ids[i], &len);
        if (h->logprobs >= 0) { /* the tokens and offsets now; scores as prompt events come */
            put_token_str(item(&e->tokens, i), tok, r->prompt_ids[i]);
            sb_printf(item(&e->offsets, i), "%zu", e->chars);
        }
        for (size_t at = 0; b && at < len; at += ECHO_PIECE) { /* (a token is rarely longer) */
            char piece[4 * (ECHO_PIECE + 4)];
            size_t m = len - at < ECHO_PIECE ? len - at : ECHO_PIECE;
            size_t n = ifl_utf8_stream_push(&us, b + at, m, piece);
            sb_append(&e->text, piece, n);
            e->chars += count_chars(piece, n);
        }
    }
    char tail[12];
    size_t n = ifl_utf8_stream_flush(&us, tail);
    sb_append(&e->text, tail, n);
    e->chars += count_chars(tail, n);
    if (h->logprobs >= 0 && r->prompt_tokens > 0) { /* position 0: no token predicts it */
        sb_puts(&e->lps, "null");
        sb_puts(&e->tops, "null");
        e->n_entries = 1;
    }
}

void http_choices_prompt(http_choices *h, const ifl_tokenizer *tok, const srv_req *r,
                         int32_t index, const ifl_logprob *lp, int32_t n)
{
    (void)index; /* in order from 1 (request.c checks) */
    if (!h->echo || h->logprobs < 0 || r->prompt_index >= h->n_prompts)
        return;
    http_choice *e = &h->echo_part[r->prompt_index];
    for (int32_t i = 0; i < n; i++) {
        proto_put_logprob(item(&e->lps, e->n_entries), lp[i].logprob);
        put_top_dict(item(&e->tops, e->n_entries), tok, &lp[i]);
        e->n_entries++;
    }
}

void http_choices_token(http_choices *h, const ifl_tokenizer *tok, const srv_req *r,
                        const req_token *t, strbuf *ev_lp)
{
    int32_t k = http_choice_index(h, r, t->choice);
    if (k >= h->n_prompts * h->n)
        return;
    http_choice *c = &h->c[k];
    if (h->echo && t->index == 0) /* offsets run on from the prompt's text */
        c->chars = h->echo_part[r->prompt_index].chars;
    size_t offset = c->chars;
    sb_append(&c->text, t->text, t->len);
    c->chars += count_chars(t->text, t->len);
    if (!t->lp || h->logprobs < 0)
        return;
    if (h->chat)
        put_chat_entry(item(&c->tokens, c->n_entries++), tok, t->lp);
    else
        add_cmpl_entry(c, tok, t->token, t->lp, offset);
    if (!ev_lp)
        return;
    if (h->chat) {
        sb_puts(ev_lp, "{\"content\":[");
        put_chat_entry(ev_lp, tok, t->lp);
        sb_puts(ev_lp, "]}");
        return;
    }
    sb_puts(ev_lp, "{\"tokens\":[");
    put_token_str(ev_lp, tok, t->token);
    sb_puts(ev_lp, "],\"token_logprobs\":[");
    proto_put_logprob(ev_lp, t->lp->logprob);
    sb_puts(ev_lp, "],\"top_logprobs\":[");
    put_top_dict(ev_lp, tok, t->lp);
    sb_printf(ev_lp, "],\"text_offset\":[%zu]}", offset);
}

void http_choices_choice_end(http_choices *h, const srv_req *r, const req_result *res)
{
    int32_t k = http_choice_index(h, r, res->is_choice ? res->choice : 0);
    if (k < h->n_prompts * h->n) {
        h->c[k].ended = 1;
        h->c[k].finish = res->finish;
    }
}

int http_choices_request_end(http_choices *h, const req_result *res)
{
    req_result *s = &h->sum;
    int first_failure = res->finish == IFL_FINISH_ERROR ||
                        (res->finish == IFL_FINISH_CANCELLED && s->finish != IFL_FINISH_ERROR);
    if (!h->n_ended || (first_failure && s->finish != res->finish)) {
        req_result keep = *s;
        *s = *res;
        if (h->n_ended) { /* the failure's finish and message, the usage summed below */
            s->prompt_tokens = keep.prompt_tokens + res->prompt_tokens;
            s->completion_tokens = keep.completion_tokens + res->completion_tokens;
            s->cached_tokens = keep.cached_tokens + res->cached_tokens;
            s->trimmed_messages = keep.trimmed_messages + res->trimmed_messages;
            s->trimmed_tokens = keep.trimmed_tokens + res->trimmed_tokens;
        }
    } else {
        s->prompt_tokens += res->prompt_tokens;
        s->completion_tokens += res->completion_tokens;
        s->cached_tokens += res->cached_tokens;
        s->trimmed_messages += res->trimmed_messages;
        s->trimmed_tokens += res->trimmed_tokens;
    }
    return ++h->n_ended == h->n_prompts;
}

/* ---- the answer ----------------------------------------------------------------------------- */

/* `"name":[a,b]`: the echo part's items then the choice's (either may be NULL or empty). */
static void put_list(strbuf *sb, const char *name, const strbuf *a, const strbuf *b)
{
    sb_printf(sb, "\"%s\":[", name);
    if (a && a->len)
        sb_append(sb, sb_text(a), a->len);
    if (a && a->len && b && b->len)
        sb_puts(sb, ",");
    if (b && b->len)
        sb_append(sb, sb_text(b), b->len);
    sb_puts(sb, "]");
}

/* The logprobs object of echo part e (may be empty) and choice c (may be empty). */
static void put_lp_object(strbuf *sb, const http_choices *h, const http_choice *e,
                          const http_choice *c)
{
    if (h->chat) {
        sb_puts(sb, "{");
        put_list(sb, "content", NULL, &c->tokens);
        sb_puts(sb, "}");
        return;
    }
    sb_puts(sb, "{");
    put_list(sb, "tokens", &e->tokens, &c->tokens);
    sb_puts(sb, ",");
    put_list(sb, "token_logprobs", &e->lps, &c->lps);
    sb_puts(sb, ",");
    put_list(sb, "top_logprobs", &e->tops, &c->tops);
    sb_puts(sb, ",");
    put_list(sb, "text_offset", &e->offsets, &c->offsets);
    sb_puts(sb, "}");
}

static const http_choice NO_PART; /* an empty part: no items */

void http_choices_write_lp(strbuf *sb, const http_choices *h, int32_t k, int echo)
{
    if (h->logprobs < 0) {
        sb_puts(sb, "null");
        return;
    }
    const http_choice *e = echo && h->echo ? &h->echo_part[k / h->n] : &NO_PART;
    put_lp_object(sb, h, e, &h->c[k]);
}

void http_choices_write_echo_lp(strbuf *sb, const http_choices *h, int32_t p)
{
    if (h->logprobs < 0 || !h->echo) {
        sb_puts(sb, "null");
        return;
    }
    put_lp_object(sb, h, &h->echo_part[p], &NO_PART);
}
