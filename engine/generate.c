/* generate.c: single-sequence generation over the step interface (see generate.h). */
#include "generate.h"
#include "philox.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The logit controls of one sequence: the row's adjustments, the tokens it has seen, the bans. */
typedef struct {
    ifl_logit_adj adj;
    ifl_seen seen;
    int32_t ban[IFL_MAX_STOP_IDS + 1]; /* the stop ids, then EOS */
    int32_t n_ban;
} controls;

static int check_opts(const ifl_config *c, int32_t n_prompt, const ifl_generate_opts *o,
                      ifl_err *err)
{
    if (n_prompt < 1)
        return ifl_err_set(err, "the prompt is empty (it needs at least one token)");
    if (o->max_new < 0)
        return ifl_err_set(err, "max_new %d is negative", o->max_new);
    if ((int64_t)n_prompt + o->max_new > c->n_ctx)
        return ifl_err_set(err,
                           "prompt (%d tokens) + max new tokens (%d) = %lld exceeds the model's "
                           "context of %d tokens",
                           n_prompt, o->max_new, (long long)n_prompt + o->max_new, c->n_ctx);
    if (ifl_sampling_validate(&o->sampling, err) || ifl_penalties_validate(&o->penalties, err) ||
        ifl_min_tokens_validate(o->min_tokens, o->max_new, err) ||
        ifl_stop_ids_validate(o->stop_ids, o->n_stop_ids, c->n_vocab, err) ||
        ifl_logit_bias_validate(o->logit_bias, o->n_logit_bias, c->n_vocab, err))
        return -1;
    return 0;
}

/* k's adjustments from checked options; the seen tokens only with a penalty on. */
static int controls_init(controls *k, const ifl_config *c, const int32_t *prompt, int32_t n_prompt,
                         const ifl_generate_opts *o, ifl_err *err)
{
    memset(k, 0, sizeof *k);
    if (o->n_stop_ids > 0)
        memcpy(k->ban, o->stop_ids, (size_t)o->n_stop_ids * sizeof *k->ban);
    k->n_ban = o->n_stop_ids;
    if (!o->ignore_eos && o->eos >= 0)
        k->ban[k->n_ban++] = o->eos;
    k->adj.ban = k->ban;
    k->adj.bias = o->logit_bias;
    k->adj.n_bias = o->n_logit_bias;
    if (!ifl_penalties_on(&o->penalties))
        return 0;
    int rep = ifl_repetition_on(&o->penalties);
    int64_t distinct = (int64_t)o->max_new + (rep ? n_prompt : 0);
    if (ifl_seen_init(&k->seen, (int32_t)(distinct < c->n_vocab ? distinct : c->n_vocab), err))
        return -1;
    for (int32_t i = 0; rep && i < n_prompt; i++)
        ifl_seen_add(&k->seen, prompt[i], 0);
    k->adj.pen = o->penalties;
    k->adj.seen = &k->seen;
    return 0;
}

/* The adjustments of the draw after `generated` tokens (NULL: none). */
static const ifl_logit_adj *controls_step(controls *k, const ifl_generate_opts *o,
                                          int32_t generated)
{
    k->adj.n_ban = generated < o->min_tokens ? k->n_ban : 0;
    return ifl_logit_adj_on(&k->adj) ? &k->adj : NULL;
}

static int is_stop_id(const ifl_generate_opts *o, int32_t tok)
{
    for (int32_t i = 0; i < o->n_stop_ids; i++)
        if (o->stop_ids[i] == tok)
            return 1;
    return 0;
}

/* Chunked prefill (b's runs are run_start); the step that ends the prompt draws the first token
 * into *tok (on the device when the backend can), unless the caller wants the prompt's logits:
 * then the draw is left to the caller (*tok stays -1) and logits hold them. */
static int prefill(ifl_backend *be, ifl_batch *b, int32_t *run_start, const int32_t *prompt,
                   int32_t n_prompt, const ifl_generate_opts *o, ifl_sample_req *sreq,
                   float *logits, ifl_sampler *sampler, int32_t *tok, ifl_err *err)
{
    int32_t pos = 0;
    while (pos < n_prompt) {
        int32_t left = n_prompt - pos;
        int32_t len = left < be->params.max_tokens ? left : be->params.max_tokens;
        run_start[0] = 0;
        run_start[1] = len;
        b->n_tokens = len;
        b->tokens = prompt + pos;
        b->pos0 = &pos;
        int sample_here = pos + len == n_prompt && !o->logits_out && o->max_new > 0;
        if (sample_here ? ifl_backend_step_sample(be, b, sreq, tok, logits, sampler, err)
                        : ifl_backend_step(be, b, logits, err))
            return -1;
        pos += len;
    }
    return 0;
}

/* Decode from the first token tok at position pos until a stop; fills st's counts and reason. */
static int decode(ifl_backend *be, ifl_batch *b, int32_t *run_start, int32_t pos, int32_t tok,
                  const ifl_generate_opts *o, controls *k, ifl_sample_req *sreq, float *logits,
                  ifl_sampler *sampler, ifl_generate_stats *st, ifl_err *err)
{
    run_start[0] = 0;
    run_start[1] = 1;
    b->n_tokens = 1;
    for (int32_t i = 0; i < o->max_new; i++) {
        st->n_generated++;
        if (k->adj.seen)
            ifl_seen_add(&k->seen, tok, 1);
        if (o->on_token && o->on_token(o->ud, tok)) {
            st->finish_reason = "stopped";
            break;
        }
        if (!o->ignore_eos && tok == o->eos) {
            st->finish_reason = "eos";
            break;
        }
        if (is_stop_id(o, tok)) {
            st->finish_reason = "stop";
            break;
        }
        if (i + 1 == o->max_new)
            break;
        int32_t in = tok;
        b->tokens = &in;
        b->pos0 = &pos;
        sreq->draw = (uint64_t)i + 1;
        sreq->adj = controls_step(k, o, i + 1);
        if (ifl_backend_step_sample(be, b, sreq, &tok, logits, sampler, err))
            return -1;
        pos++;
    }
    return 0;
}

int ifl_generate(ifl_backend *be, const int32_t *prompt, int32_t n_prompt,
                 const ifl_generate_opts *o, ifl_generate_stats *st, ifl_err *err)
{
    const ifl_config *c = &be->model->cfg;
    const ifl_backend_params *bp = &be->params;
    int rc = -1;
    float *logits = NULL;
    ifl_kv_pool pool = {0};
    ifl_kv_seq seq = {0};
    ifl_sampler sampler = {0};
    controls k = {0};
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    st->finish_reason = "length";
    if (check_opts(c, n_prompt, o, err))
        return -1;
    if (ifl_kv_pool_init(&pool, bp->kv_blocks, bp->kv_block_size, err) ||
        ifl_sampler_init(&sampler, c->n_vocab, err) ||
        controls_init(&k, c, prompt, n_prompt, o, err))
        goto out;
    if (ifl_kv_seq_reserve(&seq, &pool, n_prompt + o->max_new)) {
        ifl_err_set(err, "the KV pool (%d blocks of %d) cannot hold %d tokens", bp->kv_blocks,
                    bp->kv_block_size, n_prompt + o->max_new);
        goto out;
    }
    logits = malloc((size_t)c->n_vocab * sizeof *logits);
    if (!logits) {
        ifl_err_set(err, "out of memory");
        goto out;
    }
    const int32_t *tables[1] = {seq.blocks};
    int32_t run_start[2];
    ifl_batch b = {
        .n_seqs = 1, .run_start = run_start, .block_tables = tables, .n_blocks = &seq.n_blocks};
    int32_t tok = -1;
    ifl_sample_req sreq = {.sampling = o->sampling,
                           .seed = o->seed,
                           .draw = 0,
                           .active = 1,
                           .adj = controls_step(&k, o, 0)};
    double t0 = ifl_now_s();
    if (prefill(be, &b, run_start, prompt, n_prompt, o, &sreq, logits, &sampler, &tok, err))
        goto out;
    st->prefill_s = ifl_now_s() - t0;
    if (o->logits_out)
        memcpy(o->logits_out, logits, (size_t)c->n_vocab * sizeof *logits);
    if (o->max_new > 0 && tok < 0)
        tok = ifl_backend_draw(&sampler, logits, &sreq);
    double t1 = ifl_now_s();
    if (decode(be, &b, run_start, n_prompt, tok, o, &k, &sreq, logits, &sampler, st, err))
        goto out;
    st->decode_s = ifl_now_s() - t1;
    rc = 0;
out:
    ifl_kv_seq_free(&seq, &pool);
    ifl_kv_pool_free(&pool);
    ifl_sampler_free(&sampler);
    ifl_seen_free(&k.seen);
    free(logits);
    return rc;
}
