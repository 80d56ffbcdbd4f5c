/* batcher_choices.c: several choices of one prompt (OpenAI's n) in the batcher (batcher.h).
 *
 * A request of n choices is n `req`s from submission: choice 0 queues, and owns the others on its
 * children list. Admission takes KV for choice 0 and forks it for each other choice (kv.h: the
 * prompt's blocks shared by reference, the rest their own), and holds their batch slots
 * (n_pending_choices). Only choice 0 runs the prompt. The step that ends it draws choice 0's first
 * token from its row and every other choice's from a copy of that row, each with its own stream
 * (ifl_choice_seed); the choices then join the running list and go on as requests of their own
 * (same id, their own `choice`), so the prompt is computed once. A choice 0 that ends before its
 * prompt is done (cancelled, failed) takes its pending choices with it. Batcher thread only,
 * except where {lock} says. */
#include <stdlib.h>
#include <string.h>

#include "batcher_impl.h"
#include "kv.h"

req *batcher_req_group(const ifl_batcher *b, const ifl_request_params *p)
{
    req *r = batcher_req_copy(b, p);
    if (!r)
        return NULL;
    req **tail = &r->children;
    for (int32_t i = 1; i < r->n_choices; i++) {
        ifl_request_params pi = *p;
        pi.seed = ifl_choice_seed(p->seed, i);
        pi.prompt_logprobs = 0; /* the prompt is scored once, by choice 0 */
        req *c = batcher_req_copy(b, &pi);
        if (!c) {
            batcher_req_free_group(r);
            return NULL;
        }
        c->choice = i;
        *tail = c;
        tail = &c->next_choice;
    }
    return r;
}

void batcher_req_free_group(req *r)
{
    if (!r)
        return;
    req *c = r->children;
    while (c) {
        req *next = c->next_choice;
        batcher_req_free(c);
        c = next;
    }
    batcher_req_free(r);
}

void batcher_emit_done_group(ifl_batcher *b, req *r, ifl_finish f, const char *message)
{
    batcher_emit_done(b, r, f, message);
    for (req *c = r->children; c; c = c->next_choice) {
        c->t_admitted = r->t_admitted;
        c->n_cached = r->n_cached;
        batcher_emit_done(b, c, f, message);
    }
}

int batcher_admit_kv(ifl_batcher *b, req *r)
{
    int32_t n_tokens = r->n_prompt + r->max_tokens;
    /* a scored prompt is computed whole: its rows are wanted, cached or not */
    int32_t lookup = r->prompt_logprobs ? 0 : r->n_prompt;
    if (ifl_kv_seq_admit(&r->kv, &b->pool, r->prompt, lookup, n_tokens, &r->n_cached))
        return -1;
    for (req *c = r->children; c; c = c->next_choice) {
        if (ifl_kv_seq_fork(&c->kv, &r->kv, &b->pool, r->n_prompt, n_tokens) == 0) {
            c->n_cached = r->n_cached;
            continue;
        }
        for (req *d = r->children; d != c; d = d->next_choice)
            ifl_kv_seq_release(&d->kv, &b->pool);
        ifl_kv_seq_release(&r->kv, &b->pool);
        return -1;
    }
    return 0;
}

int batcher_logits_room(ifl_batcher *b, int32_t rows)
{
    if (rows <= b->logits_rows)
        return 0;
    size_t V = (size_t)b->cfg->n_vocab;
    float *l = realloc(b->logits, (size_t)rows * V * sizeof *l);
    if (!l)
        return -1;
    b->logits = l;
    b->logits_rows = rows;
    return 0;
}

int32_t batcher_add_choice_draws(ifl_batcher *b, req *r, int32_t row, int32_t n_draw,
                                 int32_t *free_row)
{
    size_t V = (size_t)b->cfg->n_vocab;
    for (req *c = r->children; c; c = c->next_choice) {
        int32_t own = (*free_row)++;
        memcpy(b->logits + (size_t)own * V, b->logits + (size_t)row * V, V * sizeof *b->logits);
        c->adj.n_ban = c->min_tokens > 0 ? c->n_ban : 0; /* its first token */
        b->sreq[n_draw] = (ifl_sample_req){
            .sampling = c->sampling,
            .seed = c->seed,
            .draw = 0,
            .active = 1,
            .adj = ifl_logit_adj_on(&c->adj) ? &c->adj : NULL,
            .lp = c->logprobs ? &b->tok_lp[n_draw] : NULL,
            .n_top = c->top_logprobs,
        };
        b->draw_row[n_draw++] = own;
    }
    return n_draw;
}

int32_t batcher_count_choices(const req *r)
{
    int32_t n = 0;
    for (const req *c = r->children; c; c = c->next_choice)
        n++;
    return n;
}

req *batcher_take_choices(ifl_batcher *b, req *r)
{
    req *first = r->children;
    r->children = NULL;
    pthread_mutex_lock(&b->lock);
    for (req *c = first; c; c = c->next_choice) {
        c->t_admitted = r->t_admitted;
        c->n_done = c->n_prompt;
        b->running[b->n_running++] = c;
        b->n_pending_choices--;
    }
    b->stats.running = b->n_running;
    pthread_mutex_unlock(&b->lock);
    return first;
}

void batcher_end_pending_choices(ifl_batcher *b, req *r, ifl_finish f, const char *message)
{
    req *c = r->children;
    r->children = NULL;
    int32_t n = 0;
    while (c) {
        req *next = c->next_choice;
        ifl_kv_seq_free(&c->kv, &b->pool);
        c->t_admitted = r->t_admitted;
        batcher_emit_done(b, c, f, message);
        batcher_req_free(c);
        n++;
        c = next;
    }
    if (n) {
        pthread_mutex_lock(&b->lock);
        b->n_pending_choices -= n;
        pthread_mutex_unlock(&b->lock);
    }
}
