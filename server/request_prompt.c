/* request_prompt.c: a request's prompt as the model is given it (request_prompt.h). */
#include "request_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template.h"

static void refused(req_refusal *why, ifl_code code, const char *msg)
{
    why->code = code;
    snprintf(why->msg, sizeof why->msg, "%s", msg);
}

/* Token ids as given, each checked against the vocabulary; 0 with *ids filled. */
static int take_ids(const ifl_runtime *rt, const req_params *p, ifl_tokens *ids,
                    req_refusal *why)
{
    char msg[160];
    int32_t nv = ifl_tokenizer_n_vocab(rt->tok);
    for (int32_t i = 0; i < p->n_prompt_ids; i++) {
        if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= nv) {
            snprintf(msg, sizeof msg, "prompt[%d] is %d: a token id must be from 0 to %d", i,
                     p->prompt_ids[i], nv - 1);
            ifl_tokens_free(ids);
            refused(why, IFL_CODE_OUT_OF_RANGE, msg);
            return -1;
        }
        if (ifl_tokens_push(ids, p->prompt_ids[i])) {
            ifl_tokens_free(ids);
            refused(why, IFL_CODE_OUT_OF_MEMORY, "no memory for the prompt");
            return -1;
        }
    }
    return 0;
}

/* The log's copy of a trimmed chat's prompt: its kept lines and the suffix (unchanged when out of
 * memory: the log then has the whole conversation's). */
static void keep_logged_lines(srv_req *r, const req_chat *c, const chat_turn *turns,
                              int32_t first)
{
    strbuf sb;
    sb_init(&sb, 0);
    for (int32_t i = 0; i < c->n; i++)
        if (turns[i].role == CHAT_ROLE_SYSTEM || i >= first)
            sb_append(&sb, r->prompt + c->lines[i].off, c->lines[i].len);
    sb_puts(&sb, r->prompt + c->suffix_off);
    if (!sb_ok(&sb)) {
        sb_free(&sb);
        return;
    }
    free(r->prompt);
    r->prompt_len = sb.len;
    r->prompt = sb_steal(&sb);
}

/* A chat's prompt: each message's line encoded on its own (a line begins a pre-token, so the
 * lines' tokens are the whole prompt's), the oldest turns left out as chat_trim decides (with
 * p->truncate), the rest into *ids. 0, or -1 refused. */
static int tokenize_chat(const ifl_runtime *rt, srv_req *r, const req_params *p,
                         const char *text, ifl_tokens *ids, req_refusal *why)
{
    const req_chat *c = p->chat;
    char msg[IFL_ERR_MAX + 160];
    ifl_err err;
    size_t *at = malloc(((size_t)c->n + 2) * sizeof *at); /* line i's ids: [at[i], at[i + 1]) */
    chat_turn *turns = malloc((size_t)c->n * sizeof *turns);
    int rc = !at || !turns ? -2 : chat_encode(rt->tok, text, c, ids, at, &err);
    for (int32_t i = 0; i < c->n && !rc; i++)
        turns[i] = (chat_turn){.tokens = (int32_t)(at[i + 1] - at[i]), .role = c->lines[i].role};
    size_t suffix_at = rc ? 0 : at[c->n];
    chat_trim_plan plan = {0};
    int fits = !rc && chat_trim(turns, c->n, (int32_t)(ids->n - suffix_at),
                                rt->model.cfg.n_ctx - r->max_tokens, p->truncate,
                                CHAT_TRIM_KEEP, &plan) == 0;
    if (!rc && fits && plan.first > 0) { /* the kept lines to the front, in order */
        size_t w = at[0];
        for (int32_t i = 0; i < c->n; i++)
            if (turns[i].role == CHAT_ROLE_SYSTEM || i >= plan.first) {
                memmove(ids->ids + w, ids->ids + at[i], (at[i + 1] - at[i]) * sizeof *ids->ids);
                w += at[i + 1] - at[i];
            }
        memmove(ids->ids + w, ids->ids + suffix_at, (ids->n - suffix_at) * sizeof *ids->ids);
        ids->n = w + (ids->n - suffix_at);
        r->trimmed_messages = plan.trimmed_messages;
        r->trimmed_tokens = plan.trimmed_tokens;
        if (r->prompt == text) /* the log keeps what the model is given */
            keep_logged_lines(r, c, turns, plan.first);
    }
    free(at);
    free(turns);
    if (rc) {
        ifl_tokens_free(ids);
        /* the arrays, or the tokenizer, which fails only for want of memory (tokenizer.h) */
        refused(why, IFL_CODE_OUT_OF_MEMORY, "no memory for the prompt");
        return -1;
    }
    if (fits)
        return 0;
    int32_t n_ctx = rt->model.cfg.n_ctx;
    if (p->truncate)
        snprintf(msg, sizeof msg,
                 "the newest turn does not fit even alone: the system messages and messages[%d] "
                 "on are %d tokens; with max_tokens %d that is %lld, over the model's context of "
                 "%d",
                 plan.newest, plan.prompt_tokens, r->max_tokens,
                 (long long)plan.prompt_tokens + r->max_tokens, n_ctx);
    else
        snprintf(msg, sizeof msg,
                 "the conversation is %d tokens; with max_tokens %d that is %lld, over the "
                 "model's context of %d (truncate true leaves the oldest turns out)",
                 plan.prompt_tokens, r->max_tokens, (long long)plan.prompt_tokens + r->max_tokens,
                 n_ctx);
    r->prompt_tokens = plan.prompt_tokens;
    ifl_tokens_free(ids);
    refused(why, IFL_CODE_PROMPT_TOO_LONG, msg);
    return -1;
}

int req_prompt_tokens(const ifl_runtime *rt, srv_req *r, const req_params *p, const char *text,
                      size_t len, ifl_tokens *ids, req_refusal *why)
{
    char msg[IFL_ERR_MAX + 64];
    ifl_err err;
    if (p->prompt_ids) {
        if (take_ids(rt, p, ids, why))
            return -1;
    } else if (p->chat) {
        if (tokenize_chat(rt, r, p, text, ids, why))
            return -1;
    } else if (ifl_tokenizer_encode(rt->tok, text, len, 0, ids, &err)) {
        snprintf(msg, sizeof msg, "cannot tokenize the prompt: %s", err.msg);
        refused(why, IFL_CODE_INVALID_REQUEST, msg);
        return -1;
    }
    if (!p->chat && p->has_truncate_prompt_tokens && ids->n > (size_t)p->truncate_prompt_tokens) {
        size_t cut = ids->n - (size_t)p->truncate_prompt_tokens;
        memmove(ids->ids, ids->ids + cut, (size_t)p->truncate_prompt_tokens * sizeof *ids->ids);
        ids->n = (size_t)p->truncate_prompt_tokens;
        r->trimmed_tokens = (int32_t)cut;
    }
    r->prompt_tokens = (int32_t)ids->n;
    if (r->echo && ids->n) { /* the answer's first tokens */
        r->prompt_ids = malloc(ids->n * sizeof *r->prompt_ids);
        if (!r->prompt_ids) {
            ifl_tokens_free(ids);
            refused(why, IFL_CODE_OUT_OF_MEMORY, "no memory for the prompt");
            return -1;
        }
        memcpy(r->prompt_ids, ids->ids, ids->n * sizeof *r->prompt_ids);
    }
    int32_t n_ctx = rt->model.cfg.n_ctx;
    if ((int64_t)ids->n + r->max_tokens > n_ctx) {
        int32_t room = n_ctx - r->max_tokens;
        char hint[96] = "";
        if (!p->chat && room > 0) /* a chat was trimmed already (or said truncate false) */
            snprintf(hint, sizeof hint,
                     " (truncate_prompt_tokens %d keeps the last tokens that fit)", room);
        snprintf(msg, sizeof msg,
                 "the prompt is %zu tokens; with max_tokens %d that is %lld, over the model's "
                 "context of %d%s",
                 ids->n, r->max_tokens, (long long)ids->n + r->max_tokens, n_ctx, hint);
        ifl_tokens_free(ids);
        refused(why, IFL_CODE_PROMPT_TOO_LONG, msg);
        return -1;
    }
    return 0;
}

