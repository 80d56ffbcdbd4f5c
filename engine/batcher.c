/* batcher.c: the shared batcher thread (see batcher.h).
 *
 * State and its guards:
 *   {lock}   the waiting queue (one FIFO per session, visited round-robin), the running list's
 *            membership, cancel flags, counters for stats, `stopping`.
 *   batcher  everything about a running request's generation (KV table, sampler state, text),
 *   thread   the KV pool accounting, the backend, the step buffers: touched by the batcher thread
 *            only.
 * One loop iteration: take cancels and admissions under the lock, emit their events outside it,
 * build the step (every running sequence's decode token first, then prefill chunks within the
 * token budget), run it, sample, emit token/done events and the step record. */
#include "batcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

const char *ifl_submit_code(ifl_submit_status s)
{
    static const char *const names[] = {"ok", "queue_full", "prompt_too_long", "invalid_request",
                                        "shutting_down"};
    return (unsigned)s < 5 ? names[s] : "?";
}

typedef struct req {
    uint64_t id, session;
    void *user;
    int32_t *prompt;
    int32_t n_prompt;
    int32_t max_tokens;
    ifl_sampling sampling;
    uint64_t seed; /* its Philox stream: draw n is ifl_philox_bits53(seed, n) (philox.h) */
    int ignore_eos;
    int n_stop;
    char stop[IFL_MAX_STOPS][IFL_MAX_STOP_BYTES + 1];
    size_t stop_len[IFL_MAX_STOPS];
    uint64_t t_queued, t_admitted, t_first, t_finished;
    struct req *next; /* {lock} in its session's FIFO while waiting */
    int32_t position; /* {lock} last published queue position */
    int cancel;       /* {lock} set by cancel(), acted on by the batcher thread */
    /* batcher thread only, once admitted */
    ifl_kv_seq kv;
    int32_t n_done; /* prompt tokens already in the KV cache */
    int32_t n_generated;
    int32_t last_token;
    ifl_utf8_stream utf8;
    char *held; /* released text not yet sent: a possible stop-string start */
    size_t held_len, held_cap;
} req;

typedef struct {
    uint64_t session;
    req *head, *tail;
    int32_t count;
} session_q;

struct ifl_batcher {
    ifl_batcher_params p;
    ifl_backend *be;
    const ifl_config *cfg;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* {lock} new work or stop */
    pthread_cond_t idle; /* {lock} nothing waiting or running */
    /* {lock} */
    session_q *sq;            /* sessions with waiting requests, in round-robin order */
    int32_t n_sq, cap_sq, rr; /* rr: the session admitted from next */
    int32_t n_waiting;
    req **running; /* admitted, in admission order (max_batch) */
    int32_t n_running;
    int32_t n_finishing; /* off the running list, done event not yet out */
    int stopping;
    int positions_dirty;
    ifl_batcher_stats stats;
    /* batcher thread only */
    ifl_kv_pool pool;
    ifl_sampler sampler;
    float *logits; /* (max_batch, V), for backends that do not sample on the device */
    ifl_sample_req *sreq;
    int32_t *next_tok;
    int32_t *tokens, *run_start, *pos0, *nblk;
    const int32_t **tables;
    req **in_step;
    uint64_t *step_ids;
    uint8_t *step_prefill;
    char *text; /* token text scratch */
    size_t text_cap;
    uint64_t step_no;
};

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

/* The next request in round-robin order (removed from the queue), or NULL. */
static req *peek_next(ifl_batcher *b)
{
    return b->n_sq ? b->sq[b->rr].head : NULL;
}

static void pop_next(ifl_batcher *b)
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

static void emit(ifl_batcher *b, const ifl_event *ev)
{
    b->p.on_event(b->p.ud, ev);
}

/* Recomputes every waiting request's position (the round-robin admission order) and emits a
 * queued event for each one that changed. */
static void publish_positions(ifl_batcher *b)
{
    if (!b->positions_dirty)
        return;
    b->positions_dirty = 0;
    req *cur[512];
    req **c = b->n_sq <= 512 ? cur : malloc((size_t)b->n_sq * sizeof *c);
    if (!c)
        return;
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
            emit(b, &ev);
        }
    }
    if (c != cur)
        free(c);
}

/* ---- requests -------------------------------------------------------------------------------- */

static void req_free(req *r)
{
    if (!r)
        return;
    free(r->prompt);
    free(r->held);
    free(r);
}

ifl_submit_status ifl_batcher_submit(ifl_batcher *b, const ifl_request_params *p, uint64_t *id,
                                     ifl_err *err)
{
    const ifl_config *c = b->cfg;
    const ifl_backend_params *bp = &b->be->params;
    if (p->n_prompt < 1) {
        ifl_err_set(err, "the prompt is empty (it needs at least one token)");
        return IFL_SUBMIT_INVALID;
    }
    if (p->max_tokens < 1) {
        ifl_err_set(err, "max_tokens %d must be at least 1", p->max_tokens);
        return IFL_SUBMIT_INVALID;
    }
    if ((int64_t)p->n_prompt + p->max_tokens > c->n_ctx) {
        ifl_err_set(err,
                    "prompt of %d tokens + max_tokens %d = %lld exceeds the model's context of %d "
                    "tokens",
                    p->n_prompt, p->max_tokens, (long long)p->n_prompt + p->max_tokens, c->n_ctx);
        return IFL_SUBMIT_TOO_LONG;
    }
    int64_t blocks =
        ((int64_t)p->n_prompt + p->max_tokens + bp->kv_block_size - 1) / bp->kv_block_size;
    if (blocks > bp->kv_blocks) {
        ifl_err_set(err,
                    "prompt of %d tokens + max_tokens %d needs %lld KV blocks; the pool has %d",
                    p->n_prompt, p->max_tokens, (long long)blocks, bp->kv_blocks);
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
    req *r = calloc(1, sizeof *r);
    int32_t *prompt = malloc((size_t)p->n_prompt * sizeof *prompt);
    if (!r || !prompt) {
        free(r);
        free(prompt);
        ifl_err_set(err, "out of memory");
        return IFL_SUBMIT_INVALID;
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

    ifl_submit_status st = IFL_SUBMIT_OK;
    pthread_mutex_lock(&b->lock);
    if (b->stopping) {
        st = IFL_SUBMIT_SHUTTING_DOWN;
        ifl_err_set(err, "the %s batcher is shutting down", ifl_batcher_name(b));
    } else if (b->n_waiting >= b->p.max_queue) {
        st = IFL_SUBMIT_QUEUE_FULL;
        ifl_err_set(err, "the %s queue is full (%d waiting)", ifl_batcher_name(b), b->n_waiting);
    } else {
        r->id = atomic_fetch_add(&next_request_id, 1);
        r->t_queued = ifl_now_us();
        if (enqueue(b, r)) {
            st = IFL_SUBMIT_INVALID;
            ifl_err_set(err, "out of memory");
        } else {
            *id = r->id;
            b->stats.waiting = b->n_waiting;
            publish_positions(b); /* this request's queued event, and others' that moved */
            pthread_cond_signal(&b->wake);
        }
    }
    pthread_mutex_unlock(&b->lock);
    if (st != IFL_SUBMIT_OK)
        req_free(r);
    return st;
}

static void emit_done(ifl_batcher *b, req *r, ifl_finish f, const char *message)
{
    r->t_finished = ifl_now_us();
    ifl_event ev = {.type = IFL_EV_DONE,
                    .request_id = r->id,
                    .session = r->session,
                    .user = r->user,
                    .finish = f,
                    .prompt_tokens = r->n_prompt,
                    .completion_tokens = r->n_generated,
                    .t_queued = r->t_queued,
                    .t_admitted = r->t_admitted,
                    .t_first_token = r->t_first,
                    .t_finished = r->t_finished,
                    .message = message};
    emit(b, &ev);
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
        emit_done(b, hit, IFL_FINISH_CANCELLED, NULL); /* never started: no other event races */
        req_free(hit);
        found++;
        if (b->n_sq == before)
            continue; /* the session queue still exists: look at it again */
    }
    if (found) {
        b->stats.waiting = b->n_waiting;
        publish_positions(b);
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

/* ---- generation (batcher thread) ------------------------------------------------------------- */

static int held_append(req *r, const char *s, size_t n)
{
    if (!n)
        return 0; /* an empty text (a token inside a character): nothing to hold */
    if (r->held_len + n > r->held_cap) {
        size_t cap = r->held_cap ? 2 * r->held_cap : 256;
        while (cap < r->held_len + n)
            cap *= 2;
        char *h = realloc(r->held, cap);
        if (!h)
            return -1;
        r->held = h;
        r->held_cap = cap;
    }
    memcpy(r->held + r->held_len, s, n);
    r->held_len += n;
    return 0;
}

/* Length of the longest suffix of held that is a proper prefix of a stop string. */
static size_t stop_prefix_suffix(const req *r)
{
    size_t best = 0;
    for (int i = 0; i < r->n_stop; i++) {
        size_t sl = r->stop_len[i];
        size_t max = sl - 1 < r->held_len ? sl - 1 : r->held_len;
        for (size_t k = max; k > best; k--)
            if (!memcmp(r->held + r->held_len - k, r->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* The earliest stop string in held: its offset, or -1. */
static long find_stop(const req *r)
{
    long best = -1;
    for (int i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(r->held, r->held_len, r->stop[i], r->stop_len[i]);
        if (hit && (best < 0 || hit - r->held < best))
            best = hit - r->held;
    }
    return best;
}

/* Handles one sampled token: text, stop conditions, the token event. Returns the finish reason,
 * or -1 while the request goes on. */
static int take_token(ifl_batcher *b, req *r, int32_t tok)
{
    r->n_generated++;
    r->last_token = tok;
    if (!r->t_first)
        r->t_first = ifl_now_us();
    int eos = !r->ignore_eos && tok == b->p.eos_token;
    int finish = eos ? IFL_FINISH_EOS : r->n_generated >= r->max_tokens ? IFL_FINISH_LENGTH : -1;
    size_t len = 0;
    const char *bytes = eos ? NULL : ifl_tokenizer_token_bytes(b->p.tok, tok, &len);
    /* b->text holds the longest token's text (sized at start): no allocation per token */
    size_t k = bytes ? ifl_utf8_stream_push(&r->utf8, bytes, len, b->text) : 0;
    if (finish >= 0)
        k += ifl_utf8_stream_flush(&r->utf8, b->text + k);
    held_append(r, b->text, k);
    size_t release;
    long at = r->n_stop ? find_stop(r) : -1;
    if (at >= 0) {
        release = (size_t)at;
        finish = IFL_FINISH_STOP;
    } else if (finish >= 0) {
        release = r->held_len;
    } else {
        release = r->held_len - (r->n_stop ? stop_prefix_suffix(r) : 0);
    }
    ifl_event ev = {.type = IFL_EV_TOKEN,
                    .request_id = r->id,
                    .session = r->session,
                    .user = r->user,
                    .index = r->n_generated - 1,
                    .token = tok,
                    .text = r->held ? r->held : "",
                    .text_len = release};
    emit(b, &ev);
    if (r->held_len > release) /* (held is NULL until the first non-empty text) */
        memmove(r->held, r->held + release, r->held_len - release);
    r->held_len -= release;
    return finish;
}

/* Ends a running request (batcher thread): off the running list first (so a cancel arriving now
 * finds nothing), then its KV blocks back to the pool, then its done event. wait_idle counts it
 * as busy until the event is out. */
static void finish_running(ifl_batcher *b, req *r, ifl_finish f, const char *message)
{
    pthread_mutex_lock(&b->lock);
    for (int32_t i = 0; i < b->n_running; i++)
        if (b->running[i] == r) {
            memmove(&b->running[i], &b->running[i + 1],
                    (size_t)(b->n_running - i - 1) * sizeof *b->running);
            b->n_running--;
            break;
        }
    b->n_finishing++;
    pthread_mutex_unlock(&b->lock);
    /* the KV blocks go back before the done event, so whoever sees the done and then the stats
     * (a client reading /metrics) finds them free */
    ifl_kv_seq_free(&r->kv, &b->pool);
    pthread_mutex_lock(&b->lock);
    b->stats.running = b->n_running;
    b->stats.kv_used = ifl_kv_pool_used(&b->pool);
    pthread_mutex_unlock(&b->lock);
    emit_done(b, r, f, message);
    req_free(r);
    pthread_mutex_lock(&b->lock);
    b->n_finishing--;
    if (b->n_running == 0 && b->n_waiting == 0 && b->n_finishing == 0)
        pthread_cond_broadcast(&b->idle);
    pthread_mutex_unlock(&b->lock);
}

/* Admits waiting requests ({lock} held). Iterative: while there is room in the batch, KV for the
 * request, and token budget left this step. Static: only into an empty batch, up to max_batch.
 * Returns how many were admitted (they are the last entries of `running`). */
static int32_t admit(ifl_batcher *b, int32_t budget_left)
{
    if (b->p.policy == IFL_POLICY_STATIC && b->n_running > 0)
        return 0;
    int32_t n = 0;
    while (b->n_running < b->p.max_batch && b->n_waiting > 0) {
        if (b->p.policy == IFL_POLICY_ITERATIVE && budget_left <= 0)
            break;
        req *r = peek_next(b);
        if (ifl_kv_seq_reserve(&r->kv, &b->pool, r->n_prompt + r->max_tokens))
            break; /* no KV now: it stays first in line */
        pop_next(b);
        r->t_admitted = ifl_now_us();
        b->running[b->n_running++] = r;
        budget_left -= r->n_prompt;
        n++;
    }
    if (n) {
        b->stats.running = b->n_running;
        b->stats.waiting = b->n_waiting;
        b->stats.kv_used = ifl_kv_pool_used(&b->pool);
    }
    return n;
}

static void *batcher_main(void *arg)
{
    ifl_batcher *b = arg;
    req *cancelled[1024];
    for (;;) {
        pthread_mutex_lock(&b->lock);
        /* cancels first: they free KV for admission */
        int32_t n_cancel = 0;
        for (int32_t i = 0; i < b->n_running && n_cancel < 1024; i++)
            if (b->running[i]->cancel || b->stopping)
                cancelled[n_cancel++] = b->running[i];
        if (b->stopping && n_cancel == 0) {
            pthread_mutex_unlock(&b->lock);
            break;
        }
        pthread_mutex_unlock(&b->lock);
        for (int32_t i = 0; i < n_cancel; i++)
            finish_running(b, cancelled[i], IFL_FINISH_CANCELLED, NULL);
        if (n_cancel)
            continue; /* the running set changed: look again */

        pthread_mutex_lock(&b->lock);
        int32_t decoding = 0, pending_prefill = 0;
        for (int32_t i = 0; i < b->n_running; i++) {
            req *r = b->running[i];
            if (r->n_done >= r->n_prompt)
                decoding++;
            else
                pending_prefill += r->n_prompt - r->n_done;
        }
        int32_t before = b->n_running;
        int32_t n_new = admit(b, b->p.step_tokens - decoding - pending_prefill);
        publish_positions(b);
        if (b->n_running == 0) {
            if (!b->stopping)
                pthread_cond_wait(&b->wake, &b->lock);
            pthread_mutex_unlock(&b->lock);
            continue;
        }
        int32_t S_all = b->n_running;
        req **run = b->in_step;
        memcpy(run, b->running, (size_t)S_all * sizeof *run);
        pthread_mutex_unlock(&b->lock);
        for (int32_t i = before; i < before + n_new; i++) {
            ifl_event ev = {.type = IFL_EV_STARTED,
                            .request_id = run[i]->id,
                            .session = run[i]->session,
                            .user = run[i]->user};
            emit(b, &ev);
        }

        /* The step: decode tokens first, then prefill chunks in admission order. */
        uint64_t t0 = ifl_now_us();
        int32_t S = 0, T = 0, budget = b->p.step_tokens, n_pre = 0, n_dec = 0;
        req *order[2048];
        for (int pass = 0; pass < 2; pass++)
            for (int32_t i = 0; i < S_all; i++) {
                req *r = run[i];
                int prefilling = r->n_done < r->n_prompt;
                if (prefilling != pass || budget <= 0)
                    continue;
                int32_t len = prefilling ? r->n_prompt - r->n_done : 1;
                if (len > budget)
                    len = budget;
                b->run_start[S] = T;
                if (prefilling)
                    memcpy(b->tokens + T, r->prompt + r->n_done, (size_t)len * sizeof *b->tokens);
                else
                    b->tokens[T] = r->last_token;
                b->pos0[S] = prefilling ? r->n_done : r->n_prompt + r->n_generated - 1;
                b->tables[S] = r->kv.blocks;
                b->nblk[S] = r->kv.n_blocks;
                b->step_ids[S] = r->id;
                b->step_prefill[S] = (uint8_t)prefilling;
                /* a token is drawn only after the run that ends the prompt, or a decode run */
                b->sreq[S] =
                    (ifl_sample_req){.sampling = r->sampling,
                                     .seed = r->seed,
                                     .draw = (uint64_t)r->n_generated,
                                     .active = !prefilling || r->n_done + len >= r->n_prompt};
                order[S++] = r;
                T += len;
                budget -= len;
                if (prefilling)
                    n_pre += len;
                else
                    n_dec++;
            }
        b->run_start[S] = T;
        ifl_batch batch = {.n_seqs = S,
                           .n_tokens = T,
                           .tokens = b->tokens,
                           .run_start = b->run_start,
                           .pos0 = b->pos0,
                           .block_tables = b->tables,
                           .n_blocks = b->nblk};
        ifl_err err;
        if (ifl_backend_step_sample(b->be, &batch, b->sreq, b->next_tok, b->logits, &b->sampler,
                                    &err)) {
            for (int32_t i = 0; i < S; i++)
                finish_running(b, order[i], IFL_FINISH_ERROR, err.msg);
            continue;
        }
        int64_t generated = 0;
        for (int32_t i = 0; i < S; i++) {
            req *r = order[i];
            int32_t len = b->run_start[i + 1] - b->run_start[i];
            if (b->step_prefill[i]) {
                r->n_done += len;
                if (r->n_done < r->n_prompt)
                    continue; /* more prompt to come: these logits are not a prediction */
            }
            int32_t tok = b->next_tok[i];
            generated++;
            int f = take_token(b, r, tok);
            if (f >= 0)
                finish_running(b, r, (ifl_finish)f, NULL);
        }
        b->step_no++;
        uint64_t t1 = ifl_now_us();
        pthread_mutex_lock(&b->lock);
        b->stats.steps = b->step_no;
        b->stats.tokens_generated += (uint64_t)generated;
        ifl_step_record rec = {.step = b->step_no,
                               .policy = b->p.policy,
                               .t_start = t0,
                               .ms = (double)(t1 - t0) / 1e3,
                               .n_seqs = S,
                               .prefill_tokens = n_pre,
                               .decode_tokens = n_dec,
                               .request_ids = b->step_ids,
                               .is_prefill = b->step_prefill,
                               .running = b->n_running,
                               .waiting = b->n_waiting,
                               .kv_used = ifl_kv_pool_used(&b->pool),
                               .kv_total = b->pool.n_blocks};
        pthread_mutex_unlock(&b->lock);
        if (b->p.on_step)
            b->p.on_step(b->p.ud, &rec);
    }
    /* stopping: everything still waiting ends cancelled */
    pthread_mutex_lock(&b->lock);
    while (b->n_waiting > 0) {
        req *r = peek_next(b);
        pop_next(b);
        emit_done(b, r, IFL_FINISH_CANCELLED, NULL);
        req_free(r);
    }
    b->stats.waiting = 0;
    pthread_cond_broadcast(&b->idle);
    pthread_mutex_unlock(&b->lock);
    return NULL;
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
    free(b->tokens);
    free(b->run_start);
    free(b->pos0);
    free(b->nblk);
    free(b->tables);
    free(b->in_step);
    free(b->step_ids);
    free(b->step_prefill);
    free(b->text);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->wake);
    pthread_cond_destroy(&b->idle);
    free(b);
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
        b->p.max_batch = 64;
    if (b->p.max_queue <= 0)
        b->p.max_queue = 256;
    if (b->p.step_tokens <= 0)
        b->p.step_tokens = 256;
    if (!b->p.tok || !b->p.on_event) {
        ifl_err_set(err, "batcher: a tokenizer and an event callback are required");
        goto fail;
    }
    if (b->p.max_batch > 1024 || b->p.max_batch > be->params.max_seqs) {
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
    int32_t S = b->p.max_batch, T = b->p.step_tokens, V = b->cfg->n_vocab;
    if (ifl_kv_pool_init(&b->pool, be->params.kv_blocks, be->params.kv_block_size, err) ||
        ifl_sampler_init(&b->sampler, V, err))
        goto fail;
    b->running = calloc((size_t)S, sizeof *b->running);
    b->in_step = calloc((size_t)S, sizeof *b->in_step);
    b->logits = malloc((size_t)S * V * sizeof *b->logits);
    b->sreq = calloc((size_t)S, sizeof *b->sreq);
    b->next_tok = malloc((size_t)S * sizeof *b->next_tok);
    b->tokens = malloc((size_t)T * sizeof *b->tokens);
    b->run_start = malloc((size_t)(S + 1) * sizeof *b->run_start);
    b->pos0 = malloc((size_t)S * sizeof *b->pos0);
    b->nblk = malloc((size_t)S * sizeof *b->nblk);
    b->tables = malloc((size_t)S * sizeof *b->tables);
    b->step_ids = malloc((size_t)S * sizeof *b->step_ids);
    b->step_prefill = malloc((size_t)S);
    if (!b->running || !b->in_step || !b->logits || !b->sreq || !b->next_tok || !b->tokens ||
        !b->run_start || !b->pos0 || !b->nblk || !b->tables || !b->step_ids || !b->step_prefill) {
        ifl_err_set(err, "batcher: out of memory");
        goto fail;
    }
    size_t longest = 0;
    for (int32_t id = 0; id < ifl_tokenizer_n_vocab(b->p.tok); id++) {
        size_t len;
        ifl_tokenizer_token_bytes(b->p.tok, id, &len);
        longest = len > longest ? len : longest;
    }
    b->text_cap = ifl_utf8_stream_cap(longest) + 16;
    b->text = malloc(b->text_cap);
    if (!b->text) {
        ifl_err_set(err, "batcher: out of memory");
        goto fail;
    }
    b->stats.kv_total = b->pool.n_blocks;
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
