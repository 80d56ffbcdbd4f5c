/* request.c: the request layer (request.h): submission (the prompt's tokens and trims:
 * request_prompt.c), the batchers' events back to their owner, metrics and the log.
 *
 * Out of memory on the hot path. The allocations per event are small and of fixed shape (a bridge
 * item per token, a frame per message); when one fails the request it belongs to ends with an
 * error (out_of_memory) instead of skipping the piece, so no stream ever has a gap: a token event
 * that did not make it shows as a gap in the indices (or a count short at done), the request is
 * cancelled in its batcher, no further token is passed on, and its done reports finish `error`.
 * The done event itself never allocates (its item lives in the request). */
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "chat_template.h"
#include "request_prompt.h"
#include "runtime.h"
#include "reqlog.h"
#include "util.h"

static double ms_between(uint64_t a, uint64_t b)
{
    return b > a ? (double)(b - a) / 1e3 : 0;
}

uint64_t req_random_u64(req_layer *L)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) == (ssize_t)sizeof v)
        return v;
    /* splitmix64 over a clock-seeded state */
    uint64_t z = (L->rng_state += 0x9E3779B97F4A7C15ull) ^ ifl_now_us();
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ---- owners --------------------------------------------------------------------------------- */

void req_owner_init(req_owner *o, const req_sink *sink, void *fe, uint64_t session,
                    int32_t max_inflight)
{
    memset(o, 0, sizeof *o);
    o->sink = sink;
    o->fe = fe;
    o->session = session;
    o->max_inflight = max_inflight;
    req_session_hex(session, o->session_hex);
}

void req_session_hex(uint64_t session, char hex[REQ_SESSION_HEX])
{
    snprintf(hex, REQ_SESSION_HEX, "%016llx", (unsigned long long)session);
}

srv_req *req_find(const req_owner *o, const char *id)
{
    for (srv_req *r = o->reqs; r; r = r->next)
        if (!strcmp(r->id, id))
            return r;
    return NULL;
}

static void owner_add(req_owner *o, srv_req *r)
{
    r->owner = o;
    r->next = o->reqs;
    o->reqs = r;
    o->n_reqs++;
}

static void owner_remove(req_owner *o, srv_req *r)
{
    for (srv_req **pp = &o->reqs; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            o->n_reqs--;
            break;
        }
    r->owner = NULL;
}

/* Each of the owner's requests by its batcher id: never the whole session, which other owners
 * may share (OpenAI's "user" puts every connection naming it in one). */
void req_owner_cancel_all(req_layer *L, req_owner *o)
{
    for (srv_req *r = o->reqs; r; r = r->next)
        if (L->b[r->policy])
            ifl_batcher_cancel(L->b[r->policy], r->rid);
}

void req_owner_gone(req_layer *L, req_owner *o)
{
    req_owner_cancel_all(L, o);
    for (srv_req *r = o->reqs; r; r = r->next)
        r->owner = NULL; /* freed when their done events arrive */
    o->reqs = NULL;
    o->n_reqs = 0;
}

/* ---- submission (service thread) ------------------------------------------------------------ */

static void req_free(srv_req *r)
{
    free(r->prompt);
    free(r->messages);
    free(r->params);
    sb_free(&r->completion);
    free(r->offsets);
    free(r->prompt_ids);
    free(r->done);
    free(r->done_msg);
    free(r);
}

static ifl_code submit_code(ifl_submit_status st)
{
    switch (st) {
    case IFL_SUBMIT_QUEUE_FULL: return IFL_CODE_QUEUE_FULL;
    case IFL_SUBMIT_TOO_LONG: return IFL_CODE_PROMPT_TOO_LONG;
    case IFL_SUBMIT_SHUTTING_DOWN: return IFL_CODE_SHUTTING_DOWN;
    case IFL_SUBMIT_NO_MEMORY: return IFL_CODE_OUT_OF_MEMORY;
    case IFL_SUBMIT_INVALID:
    case IFL_SUBMIT_OK: break;
    }
    return IFL_CODE_INVALID_REQUEST;
}

/* A request refused after it parsed: the error to its owner, and a row in the log with its code. */
static void refuse_after(req_layer *L, req_owner *o, srv_req *r, ifl_code code, const char *msg,
                         int32_t retry_after_ms)
{
    metrics_count_error(L->m, code);
    o->sink->error(o->fe, r->id, code, msg, retry_after_ms);
    if (!L->log->db)
        ;
    else if (reqlog_refusal_admit(L->log, o->peer, ifl_now_us())) {
        reqlog_session_row(L->log, o); /* the row its request row needs */
        reqlog_refused(L->log, r, code);
    } else {
        L->m->refusals_not_logged++;
    }
    req_free(r);
}

static void refuse(req_layer *L, req_owner *o, srv_req *r, ifl_code code, const char *msg)
{
    refuse_after(L, o, r, code, msg, 0);
}

/* The checks that need the server's and the owner's state; 0 when the request may go on. */
static int admissible(req_layer *L, req_owner *o, srv_req *r)
{
    char msg[IFL_ERR_MAX + 64];
    if (L->stopping || !L->b[r->policy]) {
        refuse(L, o, r, IFL_CODE_SHUTTING_DOWN, "the server is shutting down");
        return -1;
    }
    if (req_find(o, r->id)) {
        snprintf(msg, sizeof msg,
                 "a request with id \"%s\" is already in flight on this connection", r->id);
        refuse(L, o, r, IFL_CODE_DUPLICATE_ID, msg);
        return -1;
    }
    if (o->n_reqs >= o->max_inflight) {
        snprintf(msg, sizeof msg, "this connection already has %d requests in flight (limit %d)",
                 o->n_reqs, o->max_inflight);
        refuse(L, o, r, IFL_CODE_TOO_MANY_REQUESTS, msg);
        return -1;
    }
    return 0;
}

static srv_req *req_new(req_layer *L, req_owner *o, req_params *p, uint64_t t_arrival)
{
    srv_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    memcpy(r->id, p->id, sizeof r->id);
    r->policy = p->policy;
    r->api = p->api < REQ_N_APIS ? p->api : REQ_API_WS;
    r->session = o->session;
    r->seed = p->has_seed ? p->seed : req_random_u64(L) & ((1ull << 53) - 1);
    r->prompt_tokens = -1;
    r->is_chat = p->chat != NULL;
    memcpy(r->conversation, p->conversation, sizeof r->conversation);
    r->max_tokens = p->max_tokens;
    r->n_choices = p->n > 1 ? p->n : 1;
    r->logprobs = req_logprobs(p);
    r->echo = p->echo;
    r->score_prompt = p->echo && (r->logprobs >= 0 || p->max_tokens == 0);
    r->prompt_next = 1;
    r->prompt_index = p->prompt_index;
    r->t_arrival = t_arrival;
    r->done = calloc((size_t)r->n_choices, sizeof *r->done);
    r->done_msg = calloc((size_t)r->n_choices, sizeof *r->done_msg);
    if (!r->done || !r->done_msg) {
        req_free(r);
        return NULL;
    }
    sb_init(&r->completion, 0);
    r->params = reqlog_params_json(p, r->seed); /* NULL (out of memory): logged as {} */
    return r;
}

srv_req *req_submit(req_layer *L, req_owner *o, req_params *p, uint64_t t_arrival)
{
    srv_req *r = req_new(L, o, p, t_arrival);
    if (!r) {
        metrics_count_error(L->m, IFL_CODE_OUT_OF_MEMORY);
        o->sink->error(o->fe, p->id, IFL_CODE_OUT_OF_MEMORY, "no memory for the request", 0);
        return NULL;
    }
    char *text = p->prompt;
    size_t text_len = p->prompt_len;
    if (L->log->db && p->prompt) { /* the prompt is only kept for the log */
        r->prompt = p->prompt;
        r->prompt_len = p->prompt_len;
        p->prompt = NULL;
    } else if (L->log->db && p->prompt_ids && L->rt->tok) { /* token ids: the log keeps them */
        ifl_err e;
        if (ifl_tokenizer_decode(L->rt->tok, p->prompt_ids, (size_t)p->n_prompt_ids, &r->prompt,
                                 &r->prompt_len, &e))
            r->prompt = NULL, r->prompt_len = 0;
    }
    if (L->log->db && p->chat) { /* the messages too */
        r->messages = p->chat->messages_json;
        p->chat->messages_json = NULL;
    }
    if (admissible(L, o, r))
        return NULL;
    ifl_tokens ids = {0};
    req_refusal why;
    if (req_prompt_tokens(L->rt, r, p, text, text_len, &ids, &why)) {
        refuse(L, o, r, why.code, why.msg);
        return NULL;
    }
    ifl_request_params rp = {.session = o->session,
                             .prompt = ids.ids,
                             .n_prompt = (int32_t)ids.n,
                             .max_tokens = p->max_tokens,
                             .sampling = {.temperature = (float)p->temperature,
                                          .top_k = p->top_k,
                                          .top_p = (float)p->top_p,
                                          .min_p = (float)p->min_p},
                             .penalties = {.repetition = (float)p->repetition_penalty,
                                           .presence = (float)p->presence_penalty,
                                           .frequency = (float)p->frequency_penalty},
                             .min_tokens = p->min_tokens,
                             .n_stop_ids = p->n_stop_ids,
                             .stop_ids = p->stop_ids,
                             .n_logit_bias = p->n_logit_bias,
                             .logit_bias = p->logit_bias,
                             .seed = r->seed,
                             .ignore_eos = p->ignore_eos,
                             .n_stop = p->n_stop,
                             .n_choices = r->n_choices,
                             .logprobs = r->logprobs >= 0,
                             .prompt_logprobs = r->score_prompt,
                             .top_logprobs = r->logprobs > 0 ? r->logprobs : 0,
                             .user = r};
    for (int i = 0; i < p->n_stop; i++)
        rp.stop[i] = p->stop[i];
    /* listed before submitting: the queued event is already in the bridge when submit returns,
     * and a cancel may follow in the same read */
    owner_add(o, r);
    ifl_err err;
    int32_t retry_ms = 0;
    ifl_submit_status st = ifl_batcher_submit(L->b[r->policy], &rp, &r->rid, &retry_ms, &err);
    ifl_tokens_free(&ids);
    if (st != IFL_SUBMIT_OK) {
        owner_remove(o, r);
        refuse_after(L, o, r, submit_code(st), err.msg, retry_ms);
        return NULL;
    }
    /* an accepted request is always logged, in its session: the row goes before the request's
     * (written at its done event, which the service thread drains after this returns) */
    reqlog_session_row(L->log, o);
    return r;
}

void req_cancel(req_layer *L, req_owner *o, const char *id)
{
    srv_req *r = req_find(o, id);
    if (!r) {
        char msg[160];
        snprintf(msg, sizeof msg, "no request with id \"%s\" is in flight on this connection", id);
        metrics_count_error(L->m, IFL_CODE_UNKNOWN_ID);
        o->sink->error(o->fe, id, IFL_CODE_UNKNOWN_ID, msg, 0);
        return;
    }
    ifl_batcher_cancel(L->b[r->policy], r->rid);
}

/* ---- events back (service thread) ----------------------------------------------------------- */

/* A token event that cannot be passed on in order: the request is stopped (see the top). */
static void lose(req_layer *L, srv_req *r)
{
    if (r->lost)
        return;
    r->lost = 1;
    if (L->b[r->policy])
        ifl_batcher_cancel(L->b[r->policy], r->rid);
}

/* Keeps the token's arrival and text for the log; out of memory loses the offsets, not tokens. */
static void record_token(req_layer *L, srv_req *r, const bridge_item *it)
{
    if (!L->log->db || it->ev.choice != 0)
        return; /* the log keeps choice 0's text (docs/http-api.md) */
    if (r->n_logged == r->cap_offsets) {
        int32_t cap = r->cap_offsets ? 2 * r->cap_offsets : 64;
        uint32_t *o = realloc(r->offsets, (size_t)cap * sizeof *o);
        if (o) {
            r->offsets = o;
            r->cap_offsets = cap;
        }
    }
    if (r->n_logged < r->cap_offsets) {
        uint64_t d = it->stamp > r->t_arrival ? it->stamp - r->t_arrival : 0;
        r->offsets[r->n_logged] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
    } else {
        free(r->offsets); /* out of memory: log no offsets rather than wrong ones */
        r->offsets = NULL;
        r->cap_offsets = -1;
    }
    sb_append(&r->completion, it->ev.text, it->ev.text_len);
    r->n_logged++;
}

static void on_token(req_layer *L, srv_req *r, const bridge_item *it)
{
    const ifl_event *ev = &it->ev;
    int pol = (int)r->policy;
    int32_t c = ev->choice;
    if (c < 0 || c >= r->n_choices || ev->index != r->choice_tokens[c] ||
        (r->score_prompt && r->prompt_next != r->prompt_tokens))
        lose(L, r); /* an earlier event's item could not be allocated */
    if (r->lost)
        return;
    if (r->n_tokens == 0) {
        r->t_first = it->stamp;
        metrics_hist_observe(&L->m->ttft[pol], ms_between(r->t_arrival, it->stamp) / 1e3);
        metrics_hist_observe(&L->m->api_ttft[r->api], ms_between(r->t_arrival, it->stamp) / 1e3);
    } else {
        metrics_hist_observe(&L->m->itl[pol], ms_between(r->t_last, it->stamp) / 1e3);
    }
    r->t_last = it->stamp;
    record_token(L, r, it);
    r->n_tokens++;
    r->choice_tokens[c]++;
    L->m->tokens[pol]++;
    L->m->api_tokens[r->api]++;
    req_token t = {.choice = c,
                   .index = ev->index,
                   .token = ev->token,
                   .text = ev->text,
                   .len = ev->text_len,
                   .lp = r->logprobs >= 0 ? ev->lp : NULL};
    if (r->owner)
        r->owner->sink->token(r->owner->fe, r, &t);
}

/* Prompt scores: passed on in order, a gap (a lost item) stops the request. */
static void on_prompt(req_layer *L, srv_req *r, const bridge_item *it)
{
    const ifl_event *ev = &it->ev;
    if (ev->index != r->prompt_next || ev->n_lp < 0 || ev->n_lp > r->prompt_tokens - ev->index)
        lose(L, r);
    if (r->lost)
        return;
    r->prompt_next += ev->n_lp;
    if (r->owner && r->owner->sink->prompt && r->echo && r->logprobs >= 0)
        r->owner->sink->prompt(r->owner->fe, r, ev->index, ev->lp, ev->n_lp);
}

/* One choice's end: its own counts and times. */
static void result_of(const srv_req *r, const bridge_item *it, req_result *res)
{
    const ifl_event *ev = &it->ev;
    uint64_t t_end = ev->t_finished ? ev->t_finished : it->stamp;
    int32_t c = ev->choice >= 0 && ev->choice < r->n_choices ? ev->choice : 0;
    memset(res, 0, sizeof *res);
    res->choice = c;
    res->finish = ev->finish;
    res->prompt_tokens = ev->prompt_tokens;
    res->completion_tokens = ev->completion_tokens;
    res->cached_tokens = ev->cached_tokens;
    res->trimmed_messages = r->trimmed_messages;
    res->trimmed_tokens = r->trimmed_tokens;
    res->total_ms = ms_between(r->t_arrival, t_end);
    res->queue_ms = ms_between(r->t_arrival, ev->t_admitted ? ev->t_admitted : t_end);
    res->ttft_ms = ev->t_first_token ? ms_between(r->t_arrival, ev->t_first_token) : -1;
    res->tokens_per_s = r->n_tokens >= 2 && r->t_last > r->t_first
                            ? (double)(r->n_tokens - 1) / ((double)(r->t_last - r->t_first) / 1e6)
                            : 0;
    res->message = ev->message;
    res->code = IFL_CODE_ENGINE_ERROR;
    int ended = ev->finish != IFL_FINISH_ERROR && ev->finish != IFL_FINISH_CANCELLED;
    if (r->lost || r->choice_tokens[c] != ev->completion_tokens ||
        (ended && r->score_prompt && r->prompt_next != r->prompt_tokens)) {
        res->finish = IFL_FINISH_ERROR;
        res->code = IFL_CODE_OUT_OF_MEMORY;
        res->message = "out of memory: a token could not be passed on, so the request was stopped";
    }
}

/* A choice's end into the request's sum (request.h: req_result.is_choice). */
static void sum_choice(srv_req *r, const req_result *res, const ifl_event *ev)
{
    req_result *s = &r->sum;
    int32_t tokens = s->completion_tokens + res->completion_tokens;
    int keep = r->n_done > 0 &&
               (s->finish == IFL_FINISH_ERROR ||
                (s->finish == IFL_FINISH_CANCELLED && res->finish != IFL_FINISH_ERROR) ||
                (res->finish != IFL_FINISH_ERROR && res->finish != IFL_FINISH_CANCELLED));
    if (!keep) { /* choice 0's, or the first error or cancel: its finish and message */
        ifl_finish f = res->finish;
        ifl_code code = res->code;
        const char *msg = res->message;
        *s = *res;
        s->finish = f, s->code = code, s->message = msg;
    }
    s->completion_tokens = tokens;
    s->total_ms = res->total_ms; /* the last choice's end is the request's */
    s->tokens_per_s = res->tokens_per_s;
    if (ev->t_first_token && (!r->t_first_token || ev->t_first_token < r->t_first_token))
        r->t_first_token = ev->t_first_token;
    s->ttft_ms = r->t_first_token ? ms_between(r->t_arrival, r->t_first_token) : -1;
    s->is_choice = 0;
    s->choice = 0;
}

static void on_done(req_layer *L, srv_req *r, const bridge_item *it)
{
    int pol = (int)r->policy;
    req_result res;
    result_of(r, it, &res);
    sum_choice(r, &res, &it->ev);
    r->n_done++;
    if (r->n_choices > 1 && r->owner && r->owner->sink->choice_done) {
        res.is_choice = 1;
        r->owner->sink->choice_done(r->owner->fe, r, &res);
    }
    if (r->n_done < r->n_choices)
        return; /* the other choices' ends are still to come */
    res = r->sum;
    ifl_event last = it->ev; /* the log's stamps: the first token of any choice */
    last.t_first_token = r->t_first_token;
    L->m->requests[pol][(int)res.finish < METRICS_N_FINISH ? (int)res.finish : 0]++;
    L->m->api_requests[r->api][(int)res.finish < METRICS_N_FINISH ? (int)res.finish : 0]++;
    metrics_hist_observe(&L->m->e2e[pol], res.total_ms / 1e3);
    metrics_hist_observe(&L->m->api_e2e[r->api], res.total_ms / 1e3);
    if (res.finish == IFL_FINISH_ERROR)
        metrics_count_error(L->m, res.code);
    reqlog_finished(L->log, r, &last, &res, !r->owner);
    req_owner *o = r->owner;
    if (o) {
        owner_remove(o, r);
        o->sink->done(o->fe, r, &res);
    }
    req_free(r);
}

void req_handle_event(req_layer *L, const bridge_item *it)
{
    const ifl_event *ev = &it->ev;
    srv_req *r = ev->user;
    int pol = (int)r->policy;
    switch (ev->type) {
    case IFL_EV_QUEUED:
        if (r->owner)
            r->owner->sink->queued(r->owner->fe, r, ev->position);
        break;
    case IFL_EV_STARTED:
        metrics_hist_observe(&L->m->queue[pol], ms_between(r->t_arrival, it->stamp) / 1e3);
        L->m->prompt_tokens[pol] += (uint64_t)r->prompt_tokens;
        L->m->trimmed_requests[pol] += r->trimmed_tokens > 0;
        L->m->trimmed_tokens[pol] += (uint64_t)r->trimmed_tokens;
        r->cached_tokens = ev->cached_tokens;
        if (r->owner)
            r->owner->sink->started(r->owner->fe, r);
        break;
    case IFL_EV_PROMPT: on_prompt(L, r, it); break;
    case IFL_EV_TOKEN: on_token(L, r, it); break;
    case IFL_EV_DONE: on_done(L, r, it); break; /* the last frees r, and the items with it */
    }
}

void req_handle_step(req_layer *L, const ifl_step_record *st)
{
    int pol = (int)st->policy;
    L->m->steps[pol]++;
    metrics_hist_observe(&L->m->batch[pol], st->n_seqs);
    metrics_hist_observe(&L->m->step_s[pol], st->ms / 1e3);
    reqlog_step(L->log, st);
}

/* ---- the batchers' callbacks (batcher threads) ---------------------------------------------- */

/* A done event into its choice's item, which lives in the request (no allocation). */
static bridge_item *done_item(srv_req *r, const ifl_event *ev)
{
    int32_t c = ev->choice >= 0 && ev->choice < r->n_choices ? ev->choice : 0;
    bridge_item *it = &r->done[c];
    memset(it, 0, sizeof *it);
    it->kind = BRIDGE_EVENT;
    it->embedded = 1;
    it->ev = *ev;
    it->ev.text = NULL;
    it->ev.message = NULL;
    it->ev.lp = NULL;
    if (ev->message) {
        snprintf(r->done_msg[c], sizeof r->done_msg[c], "%s", ev->message);
        it->ev.message = r->done_msg[c];
    }
    return it;
}

/* Another event, with copies of what it points to (valid only during the callback): its
 * logprob entries (a token's one, a prompt event's n_lp) first, then its text. */
static bridge_item *event_item(const ifl_event *ev)
{
    size_t n_lp = ev->type == IFL_EV_PROMPT && ev->n_lp > 0 ? (size_t)ev->n_lp
                  : ev->type == IFL_EV_TOKEN && ev->lp    ? 1
                                                          : 0;
    if (!ev->lp)
        n_lp = 0;
    size_t tl = ev->type == IFL_EV_TOKEN ? ev->text_len : 0;
    size_t lp_bytes = n_lp * sizeof(ifl_logprob);
    bridge_item *it = bridge_item_new(BRIDGE_EVENT, lp_bytes + tl + 1);
    if (!it)
        return NULL;
    it->ev = *ev;
    it->ev.message = NULL;
    it->ev.lp = NULL;
    if (n_lp) {
        memcpy(it->data, ev->lp, lp_bytes);
        it->ev.lp = (const ifl_logprob *)(void *)it->data;
    }
    char *text = it->data + lp_bytes;
    if (tl)
        memcpy(text, ev->text, tl);
    text[tl] = 0;
    it->ev.text = text;
    it->ev.text_len = tl;
    return it;
}

void req_batcher_event(void *ud, const ifl_event *ev)
{
    req_layer *L = ud;
    srv_req *r = ev->user;
    bridge_item *it = ev->type == IFL_EV_DONE ? done_item(r, ev) : event_item(ev);
    if (!it)
        return; /* out of memory: the service thread sees the gap (see the top) */
    bridge_push(L->bridge, it);
}

void req_batcher_step(void *ud, const ifl_step_record *rec)
{
    req_layer *L = ud;
    size_t n = rec->n_seqs > 0 ? (size_t)rec->n_seqs : 0;
    bridge_item *it = bridge_item_new(BRIDGE_STEP, n * (sizeof(uint64_t) + sizeof(int32_t) + 1));
    if (!it)
        return; /* a step record is a sample for the view and metrics: lost, not a gap */
    it->step = *rec;
    uint64_t *ids = (uint64_t *)(void *)it->data;
    int32_t *cached = (int32_t *)(void *)(ids + n);
    uint8_t *pre = (uint8_t *)(cached + n);
    if (n) {
        memcpy(ids, rec->request_ids, n * sizeof *ids);
        memcpy(pre, rec->is_prefill, n);
        if (rec->cached)
            memcpy(cached, rec->cached, n * sizeof *cached);
        else
            memset(cached, 0, n * sizeof *cached);
    }
    it->step.request_ids = ids;
    it->step.is_prefill = pre;
    it->step.cached = cached;
    bridge_push(L->bridge, it);
}
