/* batcher_loop.c: the batcher thread (batcher.h, batcher_impl.h): one loop iteration per step,
 * phase by phase: take cancels (they free KV), admit under the lock, emit the started events
 * outside it, build the step (every running sequence's decode token first, then prefill chunks
 * within the token budget), run it and sample, emit token/done events (text, stop strings),
 * record the step. Everything here runs on the batcher thread; what it touches under {lock} is
 * marked. The step buffers were sized at start (batcher.c); only a request's held-back text
 * grows (doubling, held_append). */
#include "batcher_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "util.h"

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

/* The earliest stop string in held: its offset, or -1. held is NULL until some text is kept
 * (an end-of-text or a token inside a character first), and memmem's buffers must not be. */
static long find_stop(const req *r)
{
    long best = -1;
    if (!r->held_len)
        return -1; /* stop strings are never empty (batcher.c) */
    for (int i = 0; i < r->n_stop; i++) {
        const char *hit = memmem(r->held, r->held_len, r->stop[i], r->stop_len[i]);
        if (hit && (best < 0 || hit - r->held < best))
            best = hit - r->held;
    }
    return best;
}

#define TAKE_NO_MEMORY (-2) /* take_token: the token's text could not be kept */

/* 1 when tok is one of r's stop ids. */
static int is_stop_id(const req *r, int32_t tok)
{
    for (int32_t i = 0; i < r->n_stop_ids; i++)
        if (r->ban[i] == tok)
            return 1;
    return 0;
}

/* Handles one sampled token: text, stop conditions, the token event. Returns the finish reason,
 * -1 while the request goes on, or TAKE_NO_MEMORY: then no event was emitted and the request must
 * end with an error (a token whose text is lost would leave a hole in the completion). EOS and a
 * stop id release no text of their own. Before min_tokens tokens stop strings are not looked for
 * and the text goes out as it comes, so one counts only in text of tokens from min_tokens on. */
static int take_token(ifl_batcher *b, req *r, int32_t tok, const ifl_logprob *lp)
{
    r->prompt[r->n_prompt + r->n_generated] = tok; /* (room for max_tokens: batcher.c) */
    r->n_generated++;
    r->last_token = tok;
    if (r->adj.seen)
        ifl_seen_add(&r->seen, tok, 1);
    if (!r->t_first)
        r->t_first = ifl_now_us();
    int finish = -1;
    if (!r->ignore_eos && tok == b->p.eos_token)
        finish = IFL_FINISH_EOS;
    else if (is_stop_id(r, tok))
        finish = IFL_FINISH_STOP;
    else if (r->n_generated >= r->max_tokens)
        finish = IFL_FINISH_LENGTH;
    size_t len = 0;
    int silent = finish == IFL_FINISH_EOS || finish == IFL_FINISH_STOP; /* no text of its own */
    const char *bytes = silent ? NULL : ifl_tokenizer_token_bytes(b->p.tok, tok, &len);
    /* b->text holds the longest token's text (sized at start): no allocation per token */
    size_t k = bytes ? ifl_utf8_stream_push(&r->utf8, bytes, len, b->text) : 0;
    if (finish >= 0)
        k += ifl_utf8_stream_flush(&r->utf8, b->text + k);
    if (held_append(r, b->text, k))
        return TAKE_NO_MEMORY;
    size_t release;
    int look = r->n_stop && r->n_generated > r->min_tokens;
    long at = look ? find_stop(r) : -1;
    if (at >= 0) {
        release = (size_t)at;
        finish = IFL_FINISH_STOP;
    } else if (finish >= 0 || !look) {
        release = r->held_len;
    } else {
        release = r->held_len - stop_prefix_suffix(r);
    }
    ifl_event ev = {.type = IFL_EV_TOKEN,
                    .request_id = r->id,
                    .session = r->session,
                    .user = r->user,
                    .index = r->n_generated - 1,
                    .choice = r->choice,
                    .token = tok,
                    .lp = r->logprobs ? lp : NULL,
                    .text = r->held ? r->held : "",
                    .text_len = release};
    batcher_emit(b, &ev);
    if (r->held_len > release) /* (held is NULL until the first non-empty text) */
        memmove(r->held, r->held + release, r->held_len - release);
    r->held_len -= release;
    return finish;
}

/* Positions of r whose KV the backend has written: the prompt so far, then every token fed back
 * (the last one drawn is not yet). Valid between steps, after the step's take_token. */
static int32_t kv_written(const req *r)
{
    if (r->n_done < r->n_prompt)
        return r->n_done;
    return r->n_prompt + (r->n_generated > 0 ? r->n_generated - 1 : 0);
}

/* {lock} The KV pool's figures in the stats. */
static void kv_stats(ifl_batcher *b)
{
    const ifl_kv_pool *p = &b->pool;
    b->stats.kv_used = ifl_kv_pool_used(p);
    b->stats.kv_cached = p->n_published;
    b->stats.kv_cached_unused = p->n_lru;
    b->stats.prefix_lookups = p->lookups;
    b->stats.prefix_hits = p->hit_lookups;
    b->stats.prefix_hit_tokens = p->hit_tokens;
    b->stats.prefix_evictions = p->evictions;
}

/* Ends a running request (batcher thread): off the running list first (so a cancel arriving now
 * finds nothing), then its KV blocks back to the pool (its full blocks published first, unless
 * the backend failed), then its done event. wait_idle counts it as busy until the event is out. */
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
    batcher_end_pending_choices(b, r, f, message); /* its prompt never ended: they never ran */
    /* the KV blocks go back before the done event, so whoever sees the done and then the stats
     * (a client reading /metrics) finds them free */
    if (f != IFL_FINISH_ERROR)
        ifl_kv_seq_publish(&r->kv, &b->pool, r->prompt, kv_written(r));
    ifl_kv_seq_free(&r->kv, &b->pool);
    pthread_mutex_lock(&b->lock);
    b->stats.running = b->n_running;
    kv_stats(b);
    pthread_mutex_unlock(&b->lock);
    batcher_emit_done(b, r, f, message);
    batcher_req_free(r);
    pthread_mutex_lock(&b->lock);
    b->n_finishing--;
    if (b->n_running == 0 && b->n_waiting == 0 && b->n_finishing == 0)
        pthread_cond_broadcast(&b->idle);
    pthread_mutex_unlock(&b->lock);
}

/* Admits waiting requests ({lock} held). Iterative: while there is room in the batch, KV for the
 * request, and token budget left this step. Static: only into an empty batch, up to max_batch.
 * Which request comes next is batcher_choose_next's: round-robin over sessions, a session at its
 * share of the batch yielding its turn to one below it.
 * Returns how many were admitted (they are the last entries of `running`). */
static int32_t admit(ifl_batcher *b, int32_t budget_left)
{
    if (b->p.policy == IFL_POLICY_STATIC && b->n_running > 0)
        return 0;
    int32_t n = 0;
    if (b->n_waiting > 0)
        batcher_shares_begin(b);
    while (b->n_running + b->n_pending_choices < b->p.max_batch && b->n_waiting > 0) {
        if (b->p.policy == IFL_POLICY_ITERATIVE && budget_left <= 0)
            break;
        req *r = batcher_choose_next(b);
        if (b->n_running + b->n_pending_choices + r->n_choices > b->p.max_batch)
            break; /* its choices need more slots than are free: it stays first in line */
        if (batcher_admit_kv(b, r))
            break; /* no KV now: it stays first in line */
        r->n_done = r->n_cached;
        b->sq[b->rr].running += r->n_choices;
        b->n_pending_choices += r->n_choices - 1;
        batcher_pop_next(b);
        r->t_admitted = ifl_now_us();
        batcher_note_admission(b, r->t_admitted);
        b->running[b->n_running++] = r;
        budget_left -= r->n_prompt - r->n_cached;
        n++;
    }
    /* unconditional: with nothing admitted these are the values they already hold */
    b->stats.running = b->n_running;
    b->stats.waiting = b->n_waiting;
    kv_stats(b);
    return n;
}

/* ---- the loop's phases (batcher thread) ------------------------------------------------------ */

/* The step being built and run: its size (the arrays are the batcher's step buffers). */
typedef struct {
    int32_t n_seqs, n_tokens;
    int32_t prefill_tokens, decode_tokens;
    int32_t n_rows;     /* logits rows the runs ask for */
    int32_t new_draws;  /* first draws of choices whose prompt ends in this step */
    int host;           /* 1: drawn (and scored) from host logits here, whatever the backend */
    int32_t n_copy;     /* copy-on-write pairs in cow_src/cow_dst */
    uint64_t t_start;
} step_plan;

/* Phase 1: running requests that were cancelled (all of them when stopping) end now, before
 * admission, so their KV blocks are free for it. Returns how many ended, or -1 when stopping with
 * nothing left running: the loop ends. */
static int32_t take_cancels(ifl_batcher *b)
{
    pthread_mutex_lock(&b->lock);
    int32_t n = 0;
    for (int32_t i = 0; i < b->n_running; i++)
        if (b->running[i]->cancel || b->stopping)
            b->cancelled[n++] = b->running[i];
    int done = b->stopping && n == 0;
    pthread_mutex_unlock(&b->lock);
    if (done)
        return -1;
    for (int32_t i = 0; i < n; i++)
        finish_running(b, b->cancelled[i], IFL_FINISH_CANCELLED, NULL);
    return n;
}

/* Phase 2: admission within what this step's budget leaves after the running sequences (their
 * decode tokens and the rest of their prompts), and the snapshot of the running list in in_step.
 * Returns how many are running (0: none; it waited for work), with the admitted ones at
 * in_step[*first_new ..] (*n_new of them). */
static int32_t admit_phase(ifl_batcher *b, int32_t *first_new, int32_t *n_new)
{
    pthread_mutex_lock(&b->lock);
    int32_t decoding = 0, pending_prefill = 0;
    for (int32_t i = 0; i < b->n_running; i++) {
        const req *r = b->running[i];
        if (r->n_done >= r->n_prompt)
            decoding++;
        else
            pending_prefill += r->n_prompt - r->n_done;
    }
    *first_new = b->n_running;
    *n_new = admit(b, b->p.step_tokens - decoding - pending_prefill);
    batcher_publish_positions(b);
    int32_t n = b->n_running;
    if (n == 0 && !b->stopping)
        pthread_cond_wait(&b->wake, &b->lock);
    else
        memcpy(b->in_step, b->running, (size_t)n * sizeof *b->in_step);
    pthread_mutex_unlock(&b->lock);
    return n;
}

static void emit_started(ifl_batcher *b, req *const *admitted, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        ifl_event ev = {.type = IFL_EV_STARTED,
                        .request_id = admitted[i]->id,
                        .session = admitted[i]->session,
                        .user = admitted[i]->user,
                        .cached_tokens = admitted[i]->n_cached};
        batcher_emit(b, &ev);
    }
}

/* Appends request r's run of len tokens (a prefill chunk, or its one decode token) to the step. */
static void add_run(ifl_batcher *b, step_plan *sp, req *r, int prefilling, int32_t len)
{
    int32_t s = sp->n_seqs, t = sp->n_tokens;
    b->run_start[s] = t;
    if (prefilling)
        memcpy(b->tokens + t, r->prompt + r->n_done, (size_t)len * sizeof *b->tokens);
    else
        b->tokens[t] = r->last_token;
    b->pos0[s] = prefilling ? r->n_done : r->n_prompt + r->n_generated - 1;
    b->tables[s] = r->kv.blocks;
    b->nblk[s] = r->kv.n_blocks;
    b->step_ids[s] = r->id;
    b->step_prefill[s] = (uint8_t)prefilling;
    b->step_cached[s] = prefilling && r->n_cached > 0 && r->n_done == r->n_cached ? r->n_cached : 0;
    /* a token is drawn only after the run that ends the prompt, or a decode run */
    int ends_prompt = prefilling && r->n_done + len >= r->n_prompt;
    int active = (!prefilling || ends_prompt) && r->max_tokens > 0;
    /* rows: every position of a scored prompt, else the one drawn from */
    int scored = prefilling && r->prompt_logprobs;
    b->n_rows[s] = scored ? len : active;
    b->first_row[s] = sp->n_rows;
    sp->n_rows += b->n_rows[s];
    if (scored)
        sp->host = 1;
    if (ends_prompt && active && r->children) {
        sp->host = 1;
        sp->new_draws += batcher_count_choices(r);
    }
    r->adj.n_ban = r->n_generated < r->min_tokens ? r->n_ban : 0;
    b->sreq[s] = (ifl_sample_req){.sampling = r->sampling,
                                  .seed = r->seed,
                                  .draw = (uint64_t)r->n_generated,
                                  .active = active,
                                  .adj = active && ifl_logit_adj_on(&r->adj) ? &r->adj : NULL,
                                  .lp = active && r->logprobs ? &b->tok_lp[s] : NULL,
                                  .n_top = r->top_logprobs};
    b->step_reqs[s] = r;
    sp->n_seqs++;
    sp->n_tokens += len;
    if (prefilling)
        sp->prefill_tokens += len;
    else
        sp->decode_tokens++;
}

/* Phase 3a: copy on write. A decode token about to be written into a block its request shares
 * (a choice's copy of the prompt's last, partly filled block) gets a private block first; the
 * pairs go to the backend before the step (run_step). A request that cannot get one ends with an
 * error (it cannot happen: a fork holds a spare for it). Returns how many remain in in_step. */
static int32_t cow_phase(ifl_batcher *b, int32_t n, step_plan *sp)
{
    sp->n_copy = 0;
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++) {
        req *r = b->in_step[i];
        if (r->n_done >= r->n_prompt &&
            ifl_kv_seq_cow(&r->kv, &b->pool, r->n_prompt + r->n_generated - 1, 1, b->cow_src,
                           b->cow_dst, b->p.max_batch, &sp->n_copy)) {
            finish_running(b, r, IFL_FINISH_ERROR, "no KV block for a copy on write");
            continue;
        }
        b->in_step[kept++] = r;
    }
    return kept;
}

/* Phase 3: the step over the n running requests of in_step: decode tokens first (step_tokens >=
 * max_batch, so every running sequence decodes), then prefill chunks in admission order while
 * the token budget lasts. */
static void build_step(ifl_batcher *b, int32_t n, step_plan *sp)
{
    int32_t n_copy = sp->n_copy;
    *sp = (step_plan){.t_start = ifl_now_us(), .n_copy = n_copy};
    int32_t budget = b->p.step_tokens;
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < n; i++) {
            req *r = b->in_step[i];
            int prefilling = r->n_done < r->n_prompt;
            if (prefilling != pass || budget <= 0)
                continue;
            int32_t len = prefilling ? r->n_prompt - r->n_done : 1;
            if (len > budget)
                len = budget;
            add_run(b, sp, r, prefilling, len);
            budget -= len;
        }
    b->run_start[sp->n_seqs] = sp->n_tokens;
}

/* The prompt positions run s scores (a prefill chunk of a request with prompt_logprobs): row k of
 * the run predicts the token at pos0 + k + 1 while that is still the prompt. */
static int32_t run_scored(const ifl_batcher *b, int32_t s)
{
    int32_t len = b->run_start[s + 1] - b->run_start[s];
    int32_t n = b->step_reqs[s]->n_prompt - 1 - b->pos0[s];
    return n < len ? n : len;
}

/* Scores run s's prompt positions into prompt_lp at the run's rows. */
static void score_run(ifl_batcher *b, int32_t s)
{
    const req *r = b->step_reqs[s];
    size_t V = (size_t)b->cfg->n_vocab;
    int32_t first = b->first_row[s];
    ifl_backend_score(b->be, b->logits + (size_t)first * V, run_scored(b, s), NULL,
                      r->prompt + b->pos0[s] + 1, r->top_logprobs, b->prompt_lp + first);
}

/* The step on host logits: the rows the runs asked for, the scored prompt positions, then every
 * draw (the runs', and the first of each choice whose prompt ends here, from a copy of its row). */
static int run_on_host(ifl_batcher *b, const step_plan *sp, const ifl_batch *batch, ifl_err *err)
{
    if (batcher_logits_room(b, sp->n_rows + sp->new_draws))
        return ifl_err_set(err, "out of memory for %d rows of logits", sp->n_rows + sp->new_draws);
    if (ifl_backend_step(b->be, batch, b->logits, err))
        return -1;
    int32_t n_draw = sp->n_seqs, free_row = sp->n_rows;
    for (int32_t s = 0; s < sp->n_seqs; s++) {
        req *r = b->step_reqs[s];
        if (b->step_prefill[s] && r->prompt_logprobs)
            score_run(b, s);
        b->draw_row[s] = b->n_rows[s] ? b->first_row[s] + b->n_rows[s] - 1 : 0;
    }
    for (int32_t s = 0; s < sp->n_seqs; s++) {
        req *r = b->step_reqs[s];
        if (b->sreq[s].active && r->children)
            n_draw = batcher_add_choice_draws(b, r, b->draw_row[s], n_draw, &free_row);
    }
    ifl_backend_sample(b->be, b->logits, n_draw, b->draw_row, b->sreq, b->next_tok, &b->sampler);
    return 0;
}

/* Phase 4: runs the step and draws the tokens into next_tok. On failure every request of the step
 * ends with the backend's message, and -1. */
static int run_step(ifl_batcher *b, const step_plan *sp)
{
    ifl_batch batch = {.n_seqs = sp->n_seqs,
                       .n_tokens = sp->n_tokens,
                       .tokens = b->tokens,
                       .run_start = b->run_start,
                       .pos0 = b->pos0,
                       .block_tables = b->tables,
                       .n_blocks = b->nblk,
                       .n_rows = b->n_rows};
    ifl_err err;
    int rc = ifl_backend_copy_blocks(b->be, b->cow_src, b->cow_dst, sp->n_copy, &err);
    if (rc == 0)
        rc = sp->host ? run_on_host(b, sp, &batch, &err)
                      : ifl_backend_step_sample(b->be, &batch, b->sreq, b->next_tok, b->logits,
                                                &b->sampler, &err);
    if (rc == 0)
        return 0;
    for (int32_t i = 0; i < sp->n_seqs; i++)
        finish_running(b, b->step_reqs[i], IFL_FINISH_ERROR, err.msg);
    return -1;
}

/* The prompt entries of run i (scored in run_on_host) as one event. */
static void emit_prompt(ifl_batcher *b, req *r, int32_t i)
{
    int32_t n = run_scored(b, i);
    if (n <= 0)
        return;
    ifl_event ev = {.type = IFL_EV_PROMPT,
                    .request_id = r->id,
                    .session = r->session,
                    .user = r->user,
                    .index = b->pos0[i] + 1,
                    .lp = b->prompt_lp + b->first_row[i],
                    .n_lp = n};
    batcher_emit(b, &ev);
}

/* What follows a taken token: its blocks published while the request goes on, else its end. */
static void after_token(ifl_batcher *b, req *r, int f)
{
    if (f == -1)
        ifl_kv_seq_publish(&r->kv, &b->pool, r->prompt, kv_written(r));
    else if (f == TAKE_NO_MEMORY)
        finish_running(b, r, IFL_FINISH_ERROR, "out of memory holding a token's text");
    else
        finish_running(b, r, (ifl_finish)f, NULL);
}

/* r's prompt ended in this step: its choices take their first tokens (draws k ..) and run on
 * their own from now. Returns the next draw index. */
static int32_t start_choices(ifl_batcher *b, req *r, int32_t k)
{
    req *c = batcher_take_choices(b, r);
    while (c) {
        req *next = c->next_choice;
        c->next_choice = NULL;
        after_token(b, c, take_token(b, c, b->next_tok[k], &b->tok_lp[k]));
        k++;
        c = next;
    }
    return k;
}

/* Phase 5: each run's token (a prefill chunk that does not end its prompt has none): token
 * events, and done for the requests that finished. Returns the tokens generated. */
static int64_t emit_tokens(ifl_batcher *b, const step_plan *sp)
{
    int64_t generated = 0;
    int32_t k = sp->n_seqs; /* the choices' first draws follow the runs' */
    for (int32_t i = 0; i < sp->n_seqs; i++) {
        req *r = b->step_reqs[i];
        if (b->step_prefill[i]) {
            if (r->prompt_logprobs)
                emit_prompt(b, r, i);
            r->n_done += b->run_start[i + 1] - b->run_start[i];
            if (r->n_done < r->n_prompt) { /* more prompt to come: no prediction yet */
                ifl_kv_seq_publish(&r->kv, &b->pool, r->prompt, kv_written(r));
                continue;
            }
            if (r->max_tokens == 0) { /* the prompt was only scored */
                finish_running(b, r, IFL_FINISH_LENGTH, NULL);
                continue;
            }
        }
        generated++;
        int f = take_token(b, r, b->next_tok[i], &b->tok_lp[i]);
        if (r->children) {
            int32_t k0 = k;
            k = start_choices(b, r, k);
            generated += k - k0;
        }
        after_token(b, r, f);
    }
    return generated;
}

/* Phase 6: the stats and the step record (its time covers building, running, sampling and the
 * events). */
static void record_step(ifl_batcher *b, const step_plan *sp, int64_t generated)
{
    b->step_no++;
    uint64_t t1 = ifl_now_us();
    pthread_mutex_lock(&b->lock);
    b->stats.steps = b->step_no;
    b->stats.tokens_generated += (uint64_t)generated;
    b->stats.prompt_tokens_computed += (uint64_t)sp->prefill_tokens;
    kv_stats(b);
    ifl_step_record rec = {.step = b->step_no,
                           .policy = b->p.policy,
                           .t_start = sp->t_start,
                           .ms = (double)(t1 - sp->t_start) / 1e3,
                           .n_seqs = sp->n_seqs,
                           .prefill_tokens = sp->prefill_tokens,
                           .decode_tokens = sp->decode_tokens,
                           .request_ids = b->step_ids,
                           .is_prefill = b->step_prefill,
                           .cached = b->step_cached,
                           .running = b->n_running,
                           .waiting = b->n_waiting,
                           .kv_used = ifl_kv_pool_used(&b->pool),
                           .kv_total = b->pool.n_blocks};
    pthread_mutex_unlock(&b->lock);
    if (b->p.on_step)
        b->p.on_step(b->p.ud, &rec);
}

/* At stop, after the last running request ended: every waiting one ends cancelled. */
static void cancel_waiting(ifl_batcher *b)
{
    pthread_mutex_lock(&b->lock);
    while (b->n_waiting > 0) {
        req *r = batcher_peek_next(b);
        batcher_pop_next(b);
        batcher_emit_done_group(b, r, IFL_FINISH_CANCELLED, NULL);
        batcher_req_free_group(r);
    }
    b->stats.waiting = 0;
    pthread_cond_broadcast(&b->idle);
    pthread_mutex_unlock(&b->lock);
}

void *batcher_main(void *arg)
{
    ifl_batcher *b = arg;
    for (;;) {
        int32_t n_cancelled = take_cancels(b);
        if (n_cancelled < 0)
            break;
        if (n_cancelled > 0)
            continue; /* the running set changed: look again */
        int32_t first_new, n_new;
        int32_t n_running = admit_phase(b, &first_new, &n_new);
        if (n_running == 0)
            continue;
        emit_started(b, b->in_step + first_new, n_new);
        step_plan sp;
        n_running = cow_phase(b, n_running, &sp);
        if (n_running == 0)
            continue;
        build_step(b, n_running, &sp);
        if (run_step(b, &sp))
            continue;
        record_step(b, &sp, emit_tokens(b, &sp));
    }
    cancel_waiting(b);
    return NULL;
}
