/* batcher.c: the shared batcher (see batcher.h): its queue (one FIFO per session, visited
 * round-robin, with the positions it publishes), submission, cancellation, stats, and its lifetime
 * (the buffers sized at start, the thread started and stopped). The batcher thread's loop is in
 * batcher_loop.c; the state both share, with its guards, in batcher_impl.h. */
#include "batcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher_impl.h"
#include "defaults.h"
#include "kv.h"
#include "util.h"

const char *ifl_policy_name(ifl_policy p)
{
    return p == IFL_POLICY_STATIC ? "static" : "iterative";
}

int ifl_policy_parse(const char *s, ifl_policy *out)
{
    if (!strcmp(s, "iterative"))
        *out = IFL_POLICY_ITERATIVE;
    else if (!strcmp(s, "static"))
        *out = IFL_POLICY_STATIC;
    else
        return -1;
    return 0;
}

const char *ifl_finish_name(ifl_finish f)
{
    static const char *const names[] = {"length", "eos", "stop", "cancelled", "error"};
    return (unsigned)f < 5 ? names[f] : "?";
}

const char *ifl_submit_status_name(ifl_submit_status s)
{
    static const char *const names[] = {"ok",      "queue full",    "too long",
                                        "invalid", "shutting down", "out of memory"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static atomic_uint_fast64_t next_request_id = 1; /* unique across batchers of a process */

/* ---- queue (all {lock}) ---------------------------------------------------------------------- */

static session_q *find_session(ifl_batcher *b, uint64_t session)
{
    for (int32_t i = 0; i < b->n_sq; i++)
        if (b->sq[i].session == session)
            return &b->sq[i];
    return NULL;
}

static int enqueue(ifl_batcher *b, req *r)
{
    session_q *q = find_session(b, r->session);
    if (!q) {
        if (b->n_sq == b->cap_sq) {
            int32_t cap = b->cap_sq ? 2 * b->cap_sq : 16;
            session_q *n = realloc(b->sq, (size_t)cap * sizeof *n);
            if (!n)
                return -1;
            b->sq = n;
            b->cap_sq = cap;
        }
        /* a new session joins the cycle just before the one served next: it waits one round */
        int32_t at = b->n_sq ? b->rr : 0;
        memmove(&b->sq[at + 1], &b->sq[at], (size_t)(b->n_sq - at) * sizeof *b->sq);
        b->n_sq++;
        if (b->n_sq > 1)
            b->rr++;
        q = &b->sq[at];
        memset(q, 0, sizeof *q);
        q->session = r->session;
    }
    if (b->n_waiting == 0)
        b->backlog_since_us = r->t_queued; /* a backlog starts: admission intervals count */
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->count++;
    b->n_waiting++;
    b->positions_dirty = 1;
    return 0;
}

static void drop_session(ifl_batcher *b, int32_t i)
{
    memmove(&b->sq[i], &b->sq[i + 1], (size_t)(b->n_sq - i - 1) * sizeof *b->sq);
    b->n_sq--;
    if (b->rr > i)
        b->rr--;
    if (b->rr >= b->n_sq)
        b->rr = 0;
}

/* The request admitted next in round-robin order, or NULL when none waits. It stays in the queue:
 * batcher_pop_next removes it (admission looks first, and takes it only if its KV fits). */
req *batcher_peek_next(ifl_batcher *b)
{
    return b->n_sq ? b->sq[b->rr].head : NULL;
}

void batcher_pop_next(ifl_batcher *b)
{
    session_q *q = &b->sq[b->rr];
    req *r = q->head;
    q->head = r->next;
    if (!q->head)
        q->tail = NULL;
    q->count--;
    b->n_waiting--;
    b->positions_dirty = 1;
    if (q->count == 0)
        drop_session(b, b->rr);
    else
        b->rr = (b->rr + 1) % b->n_sq;
}

/* Removes a waiting request; 1 if it was there. */
static int unqueue(ifl_batcher *b, req *r)
{
    for (int32_t i = 0; i < b->n_sq; i++) {
        session_q *q = &b->sq[i];
        req *prev = NULL;
        for (req *x = q->head; x; prev = x, x = x->next) {
            if (x != r)
                continue;
            if (prev)
                prev->next = x->next;
            else
                q->head = x->next;
            if (q->tail == x)
                q->tail = prev;
            q->count--;
            b->n_waiting--;
            b->positions_dirty = 1;
            if (q->count == 0)
                drop_session(b, i);
            return 1;
        }
    }
    return 0;
}

void batcher_emit(ifl_batcher *b, const ifl_event *ev)
{
    b->p.on_event(b->p.ud, ev);
}

/* Recomputes every waiting request's position (the round-robin admission order) and emits a
 * queued event for each one that changed. */
void batcher_publish_positions(ifl_batcher *b)
{
    if (!b->positions_dirty)
        return;
    b->positions_dirty = 0;
    req **c = b->pos_cursor; /* n_sq <= n_waiting <= max_queue: every session has one waiting */
    for (int32_t i = 0; i < b->n_sq; i++)
        c[i] = b->sq[i].head;
    int32_t pos = 0, left = b->n_waiting;
    for (int32_t k = 0; left > 0; k = (k + 1) % b->n_sq) {
        int32_t i = (b->rr + k) % b->n_sq;
        if (!c[i])
            continue;
        req *r = c[i];
        c[i] = r->next;
        pos++;
        left--;
        if (r->position != pos) {
            r->position = pos;
            ifl_event ev = {.type = IFL_EV_QUEUED,
                            .request_id = r->id,
                            .session = r->session,
                            .user = r->user,
                            .position = pos};
            batcher_emit(b, &ev);
        }
    }
}

/* ---- requests -------------------------------------------------------------------------------- */

void batcher_req_free(req *r)
{
    if (!r)
        return;
    free(r->prompt);
    free(r->held);
    free(r->bias);
    ifl_seen_free(&r->seen);
    free(r);
}

/* Checks a request against the model, the pool and the limits; the status and err say why not. */
static ifl_submit_status check_request(const ifl_batcher *b, const ifl_request_params *p,
                                       ifl_err *err)
{
    const ifl_config *c = b->cfg;
    const ifl_backend_params *bp = &b->be->params;
    if (p->n_prompt < 1) {
        ifl_err_set(err, "the prompt is empty (it needs at least one token)");
        return IFL_SUBMIT_INVALID;
    }
    if (p->max_tokens < (p->prompt_logprobs ? 0 : 1)) {
        ifl_err_set(err, "max_tokens %d must be at least %d", p->max_tokens,
                    p->prompt_logprobs ? 0 : 1);
        return IFL_SUBMIT_INVALID;
    }
    if (p->n_choices < 0 || p->n_choices > IFL_MAX_CHOICES || p->n_choices > b->p.max_batch) {
        ifl_err_set(err, "n_choices %d must be 1 to %d (the batch holds %d sequences)",
                    p->n_choices, IFL_MAX_CHOICES < b->p.max_batch ? IFL_MAX_CHOICES :
                    b->p.max_batch, b->p.max_batch);
        return IFL_SUBMIT_INVALID;
    }
    if (p->top_logprobs < 0 || p->top_logprobs > IFL_MAX_TOP_LOGPROBS) {
        ifl_err_set(err, "top_logprobs %d must be 0 to %d", p->top_logprobs,
                    IFL_MAX_TOP_LOGPROBS);
        return IFL_SUBMIT_INVALID;
    }
    if ((int64_t)p->n_prompt + p->max_tokens > c->n_ctx) {
        ifl_err_set(err,
                    "prompt of %d tokens + max_tokens %d = %lld exceeds the model's context of %d "
                    "tokens",
                    p->n_prompt, p->max_tokens, (long long)p->n_prompt + p->max_tokens, c->n_ctx);
        return IFL_SUBMIT_TOO_LONG;
    }
    /* n choices share the prompt's blocks and hold the rest (and a spare each) on their own */
    int64_t bs = bp->kv_block_size, n_ch = p->n_choices > 1 ? p->n_choices : 1;
    int64_t whole = ((int64_t)p->n_prompt + p->max_tokens + bs - 1) / bs;
    int64_t own = whole - p->n_prompt / bs; /* the rest, with the copy of a partial block */
    int64_t blocks = whole + (n_ch - 1) * own + (n_ch > 1 && p->n_prompt % bs ? 1 : 0);
    if (blocks > bp->kv_blocks) {
        ifl_err_set(err,
                    "prompt of %d tokens + max_tokens %d (%lld choices) needs %lld KV blocks; the "
                    "pool has %d",
                    p->n_prompt, p->max_tokens, (long long)n_ch, (long long)blocks, bp->kv_blocks);
        return IFL_SUBMIT_TOO_LONG;
    }
    if (ifl_sampling_validate(&p->sampling, err))
        return IFL_SUBMIT_INVALID;
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= c->n_vocab) {
            ifl_err_set(err, "prompt token %d is %d, outside the vocabulary [0, %d)", i,
                        p->prompt[i], c->n_vocab);
            return IFL_SUBMIT_INVALID;
        }
    if (p->n_stop < 0 || p->n_stop > IFL_MAX_STOPS) {
        ifl_err_set(err, "%d stop strings: at most %d", p->n_stop, IFL_MAX_STOPS);
        return IFL_SUBMIT_INVALID;
    }
    for (int i = 0; i < p->n_stop; i++) {
        size_t n = p->stop[i] ? strlen(p->stop[i]) : 0;
        if (n == 0 || n > IFL_MAX_STOP_BYTES || !ifl_utf8_valid(p->stop[i], n)) {
            ifl_err_set(err, "stop string %d must be 1 to %d bytes of valid UTF-8", i,
                        IFL_MAX_STOP_BYTES);
            return IFL_SUBMIT_INVALID;
        }
    }
    if (ifl_penalties_validate(&p->penalties, err) ||
        ifl_min_tokens_validate(p->min_tokens, p->max_tokens, err) ||
        ifl_stop_ids_validate(p->stop_ids, p->n_stop_ids, c->n_vocab, err) ||
        ifl_logit_bias_validate(p->logit_bias, p->n_logit_bias, c->n_vocab, err))
        return IFL_SUBMIT_INVALID;
    return IFL_SUBMIT_OK;
}

/* r's logit controls from p (checked): the stop ids and the bans, the copy of logit_bias, the
 * seen tokens when a penalty is on (the prompt's too with repetition). -1 when out of memory. */
static int req_copy_controls(const ifl_batcher *b, req *r, const ifl_request_params *p)
{
    r->min_tokens = p->min_tokens;
    r->n_stop_ids = p->n_stop_ids;
    if (p->n_stop_ids > 0)
        memcpy(r->ban, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->ban);
    r->n_ban = r->n_stop_ids;
    if (!p->ignore_eos && b->p.eos_token >= 0)
        r->ban[r->n_ban++] = b->p.eos_token;
    r->adj.ban = r->ban; /* adj.n_ban stays 0 until a step bans them */
    if (p->n_logit_bias > 0) {
        r->bias = malloc((size_t)p->n_logit_bias * sizeof *r->bias);
        if (!r->bias)
            return -1;
        memcpy(r->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *r->bias);
        r->adj.bias = r->bias;
        r->adj.n_bias = p->n_logit_bias;
    }
    if (!ifl_penalties_on(&p->penalties))
        return 0;
    int rep = ifl_repetition_on(&p->penalties);
    int64_t distinct = (int64_t)p->max_tokens + (rep ? p->n_prompt : 0);
    if (distinct > b->cfg->n_vocab)
        distinct = b->cfg->n_vocab;
    if (ifl_seen_init(&r->seen, (int32_t)distinct, NULL))
        return -1;
    for (int32_t i = 0; rep && i < p->n_prompt; i++)
        ifl_seen_add(&r->seen, p->prompt[i], 0);
    r->adj.pen = p->penalties;
    r->adj.seen = &r->seen;
    return 0;
}

/* The batcher's copy of a checked request (one choice of it); NULL when out of memory. */
req *batcher_req_copy(const ifl_batcher *b, const ifl_request_params *p)
{
    req *r = calloc(1, sizeof *r);
    /* room for the generated tokens too: the prefix cache publishes their blocks */
    int32_t *prompt = malloc(((size_t)p->n_prompt + (size_t)p->max_tokens) * sizeof *prompt);
    if (!r || !prompt) {
        free(r);
        free(prompt);
        return NULL;
    }
    memcpy(prompt, p->prompt, (size_t)p->n_prompt * sizeof *prompt);
    r->prompt = prompt;
    r->n_prompt = p->n_prompt;
    r->session = p->session;
    r->user = p->user;
    r->max_tokens = p->max_tokens;
    r->sampling = p->sampling;
    r->seed = p->seed;
    r->ignore_eos = p->ignore_eos;
    r->n_stop = p->n_stop;
    for (int i = 0; i < p->n_stop; i++) {
        r->stop_len[i] = strlen(p->stop[i]);
        memcpy(r->stop[i], p->stop[i], r->stop_len[i] + 1);
    }
    ifl_utf8_stream_init(&r->utf8, IFL_UTF8_REPLACE);
    r->logprobs = p->logprobs != 0;
    r->prompt_logprobs = p->prompt_logprobs != 0;
    r->top_logprobs = p->top_logprobs;
    r->n_choices = p->n_choices > 1 ? p->n_choices : 1;
    if (req_copy_controls(b, r, p)) {
        batcher_req_free(r);
        return NULL;
    }
    return r;
}

ifl_submit_status ifl_batcher_submit(ifl_batcher *b, const ifl_request_params *p, uint64_t *id,
                                     int32_t *retry_after_ms, ifl_err *err)
{
    int32_t retry = 0;
    if (retry_after_ms)
        *retry_after_ms = 0;
    ifl_submit_status st = check_request(b, p, err);
    if (st != IFL_SUBMIT_OK)
        return st;
    req *r = batcher_req_group(b, p);
    if (!r) {
        ifl_err_set(err, "out of memory for a request of %d prompt tokens", p->n_prompt);
        return IFL_SUBMIT_NO_MEMORY;
    }
    pthread_mutex_lock(&b->lock);
    if (b->stopping) {
        st = IFL_SUBMIT_SHUTTING_DOWN;
        ifl_err_set(err, "the %s batcher is shutting down", ifl_batcher_name(b));
    } else if ((st = batcher_queue_room(b, find_session(b, r->session), &retry, err)) !=
               IFL_SUBMIT_OK) {
        /* refused: err says why, retry how long to wait */
    } else {
        r->id = atomic_fetch_add(&next_request_id, 1);
        r->t_queued = ifl_now_us();
        for (req *c = r->children; c; c = c->next_choice) { /* one request, n choices */
            c->id = r->id;
            c->t_queued = r->t_queued;
        }
        if (enqueue(b, r)) {
            st = IFL_SUBMIT_NO_MEMORY;
            ifl_err_set(err, "out of memory for the %s queue", ifl_batcher_name(b));
        } else {
            *id = r->id;
            b->stats.waiting = b->n_waiting;
            batcher_publish_positions(b); /* this request's queued event, and others' that moved */
            pthread_cond_signal(&b->wake);
        }
    }
    pthread_mutex_unlock(&b->lock);
    if (st != IFL_SUBMIT_OK)
        batcher_req_free_group(r);
    if (retry_after_ms)
        *retry_after_ms = retry;
    return st;
}

void batcher_emit_done(ifl_batcher *b, req *r, ifl_finish f, const char *message)
{
    r->t_finished = ifl_now_us();
    ifl_event ev = {.type = IFL_EV_DONE,
                    .request_id = r->id,
                    .session = r->session,
                    .user = r->user,
                    .choice = r->choice,
                    .finish = f,
                    .prompt_tokens = r->n_prompt,
                    .completion_tokens = r->n_generated,
                    .cached_tokens = r->n_cached,
                    .t_queued = r->t_queued,
                    .t_admitted = r->t_admitted,
                    .t_first_token = r->t_first,
                    .t_finished = r->t_finished,
                    .message = message};
    batcher_emit(b, &ev);
}

/* Cancels matching requests ({lock} held): waiting ones end here, running ones are flagged. */
static int cancel_where(ifl_batcher *b, uint64_t id, uint64_t session, int by_session)
{
    int found = 0;
    for (int32_t i = 0; i < b->n_running; i++) {
        req *r = b->running[i];
        if (by_session ? r->session == session : r->id == id) {
            r->cancel = 1;
            found++;
        }
    }
    for (int32_t i = 0; i < b->n_sq;) {
        session_q *q = &b->sq[i];
        req *hit = NULL;
        for (req *x = q->head; x; x = x->next)
            if (by_session ? x->session == session : x->id == id) {
                hit = x;
                break;
            }
        if (!hit) {
            i++;
            continue;
        }
        int32_t before = b->n_sq;
        unqueue(b, hit);
        /* never started: no other event races */
        batcher_emit_done_group(b, hit, IFL_FINISH_CANCELLED, NULL);
        batcher_req_free_group(hit);
        found++;
        if (b->n_sq == before)
            continue; /* the session queue still exists: look at it again */
    }
    if (found) {
        b->stats.waiting = b->n_waiting;
        batcher_publish_positions(b);
        pthread_cond_signal(&b->wake);
        if (b->n_waiting == 0 && b->n_running == 0 && b->n_finishing == 0)
            pthread_cond_broadcast(&b->idle);
    }
    return found;
}

int ifl_batcher_cancel(ifl_batcher *b, uint64_t request_id)
{
    pthread_mutex_lock(&b->lock);
    int n = cancel_where(b, request_id, 0, 0);
    pthread_mutex_unlock(&b->lock);
    return n;
}

int ifl_batcher_cancel_session(ifl_batcher *b, uint64_t session)
{
    pthread_mutex_lock(&b->lock);
    int n = cancel_where(b, 0, session, 1);
    pthread_mutex_unlock(&b->lock);
    return n;
}

void ifl_batcher_get_stats(ifl_batcher *b, ifl_batcher_stats *out)
{
    pthread_mutex_lock(&b->lock);
    *out = b->stats;
    pthread_mutex_unlock(&b->lock);
}

void ifl_batcher_wait_idle(ifl_batcher *b)
{
    pthread_mutex_lock(&b->lock);
    while (b->n_waiting > 0 || b->n_running > 0 || b->n_finishing > 0)
        pthread_cond_wait(&b->idle, &b->lock);
    pthread_mutex_unlock(&b->lock);
}

const char *ifl_batcher_name(const ifl_batcher *b)
{
    return ifl_policy_name(b->p.policy);
}

/* ---- lifetime -------------------------------------------------------------------------------- */

static void batcher_free(ifl_batcher *b)
{
    free(b->sq);
    free(b->running);
    ifl_kv_pool_free(&b->pool);
    ifl_sampler_free(&b->sampler);
    free(b->logits);
    free(b->sreq);
    free(b->next_tok);
    free(b->draw_row);
    free(b->n_rows);
    free(b->first_row);
    free(b->tok_lp);
    free(b->prompt_lp);
    free(b->cow_src);
    free(b->cow_dst);
    free(b->tokens);
    free(b->run_start);
    free(b->pos0);
    free(b->nblk);
    free(b->tables);
    free(b->in_step);
    free(b->step_reqs);
    free(b->cancelled);
    free(b->pos_cursor);
    free(b->step_ids);
    free(b->step_prefill);
    free(b->step_cached);
    free(b->text);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
    pthread_cond_destroy(&b->idle);
    free(b);
}

/* The KV accounting, the sampler and every buffer a step uses, sized from max_batch (S),
 * step_tokens (T), max_queue and the longest token's text. */
static int alloc_buffers(ifl_batcher *b, ifl_err *err)
{
    const ifl_backend_params *bp = &b->be->params;
    int32_t S = b->p.max_batch, T = b->p.step_tokens, V = b->cfg->n_vocab;
    if (ifl_kv_pool_init(&b->pool, bp->kv_blocks, bp->kv_block_size, err) ||
        ifl_sampler_init(&b->sampler, V, err))
        return -1;
    ifl_kv_pool_set_prefix_cache(&b->pool, !b->p.no_prefix_cache, b->p.cache_salt);
    b->running = calloc((size_t)S, sizeof *b->running);
    b->in_step = calloc((size_t)S, sizeof *b->in_step);
    b->step_reqs = calloc((size_t)S, sizeof *b->step_reqs);
    b->cancelled = calloc((size_t)S, sizeof *b->cancelled);
    b->pos_cursor = calloc((size_t)b->p.max_queue, sizeof *b->pos_cursor);
    b->logits = malloc((size_t)S * V * sizeof *b->logits);
    b->logits_rows = S;
    b->sreq = calloc(2 * (size_t)S, sizeof *b->sreq);
    b->next_tok = malloc(2 * (size_t)S * sizeof *b->next_tok);
    b->draw_row = malloc(2 * (size_t)S * sizeof *b->draw_row);
    b->n_rows = malloc((size_t)S * sizeof *b->n_rows);
    b->first_row = malloc((size_t)S * sizeof *b->first_row);
    b->tok_lp = malloc(2 * (size_t)S * sizeof *b->tok_lp);
    b->prompt_lp = malloc((size_t)T * sizeof *b->prompt_lp);
    b->cow_src = malloc((size_t)S * sizeof *b->cow_src);
    b->cow_dst = malloc((size_t)S * sizeof *b->cow_dst);
    b->tokens = malloc((size_t)T * sizeof *b->tokens);
    b->run_start = malloc((size_t)(S + 1) * sizeof *b->run_start);
    b->pos0 = malloc((size_t)S * sizeof *b->pos0);
    b->nblk = malloc((size_t)S * sizeof *b->nblk);
    b->tables = malloc((size_t)S * sizeof *b->tables);
    b->step_ids = malloc((size_t)S * sizeof *b->step_ids);
    b->step_prefill = malloc((size_t)S);
    b->step_cached = malloc((size_t)S * sizeof *b->step_cached);
    size_t longest = 0;
    for (int32_t id = 0; id < ifl_tokenizer_n_vocab(b->p.tok); id++) {
        size_t len;
        ifl_tokenizer_token_bytes(b->p.tok, id, &len);
        longest = len > longest ? len : longest;
    }
    b->text_cap = ifl_utf8_stream_cap(longest) + 16;
    b->text = malloc(b->text_cap);
    if (!b->running || !b->in_step || !b->step_reqs || !b->cancelled || !b->pos_cursor ||
        !b->logits || !b->sreq || !b->next_tok || !b->tokens || !b->run_start || !b->pos0 ||
        !b->nblk || !b->tables || !b->step_ids || !b->step_prefill || !b->step_cached ||
        !b->text || !b->draw_row || !b->n_rows || !b->first_row || !b->tok_lp || !b->prompt_lp ||
        !b->cow_src || !b->cow_dst)
        return ifl_err_set(err, "batcher: out of memory for %d sequences of %d tokens per step", S,
                           T);
    return 0;
}

ifl_batcher *ifl_batcher_start(ifl_backend *be, const ifl_batcher_params *params, ifl_err *err)
{
    ifl_batcher *b = calloc(1, sizeof *b);
    if (!b) {
        ifl_err_set(err, "out of memory");
        return NULL;
    }
    b->p = *params;
    b->be = be;
    b->cfg = &be->model->cfg;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->wake, NULL);
    pthread_cond_init(&b->idle, NULL);
    if (b->p.max_batch <= 0)
        b->p.max_batch = IFL_DEFAULT_MAX_BATCH;
    if (b->p.max_queue <= 0)
        b->p.max_queue = IFL_DEFAULT_MAX_QUEUE;
    if (b->p.step_tokens <= 0)
        b->p.step_tokens = IFL_DEFAULT_STEP_TOKENS;
    if (!b->p.tok || !b->p.on_event) {
        ifl_err_set(err, "batcher: a tokenizer and an event callback are required");
        goto fail;
    }
    if (b->p.max_batch > be->params.max_seqs) {
        ifl_err_set(err, "batcher: max_batch %d exceeds the backend's %d sequences per step",
                    b->p.max_batch, be->params.max_seqs);
        goto fail;
    }
    if (b->p.step_tokens < b->p.max_batch || b->p.step_tokens > be->params.max_tokens) {
        ifl_err_set(err,
                    "batcher: step_tokens %d must be at least max_batch %d and at most the "
                    "backend's %d tokens per step",
                    b->p.step_tokens, b->p.max_batch, be->params.max_tokens);
        goto fail;
    }
    if (alloc_buffers(b, err))
        goto fail;
    b->stats.kv_total = b->pool.n_blocks;
    b->stats.prefix_cache = b->pool.cache_on;
    if (pthread_create(&b->thread, NULL, batcher_main, b)) {
        ifl_err_set(err, "batcher: cannot start its thread");
        goto fail;
    }
    return b;
fail:
    batcher_free(b);
    return NULL;
}

void ifl_batcher_stop(ifl_batcher *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    b->stopping = 1;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->lock);
    pthread_join(b->thread, NULL);
    batcher_free(b);
}
