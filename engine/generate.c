/* generate.c: single-sequence generation over the step interface (see generate.h). */
#include "generate.h"
#include "philox.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

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
    memset(st, 0, sizeof *st);
    st->n_prompt = n_prompt;
    st->finish_reason = "length";

    if (n_prompt < 1)
        return ifl_err_set(err, "the prompt is empty (it needs at least one token)");
    if (o->max_new < 0)
        return ifl_err_set(err, "max_new %d is negative", o->max_new);
    if ((int64_t)n_prompt + o->max_new > c->n_ctx)
        return ifl_err_set(err,
                           "prompt (%d tokens) + max new tokens (%d) = %lld exceeds the model's "
                           "context of %d tokens",
                           n_prompt, o->max_new, (long long)n_prompt + o->max_new, c->n_ctx);
    if (ifl_sampling_validate(&o->sampling, err))
        return -1;
    if (ifl_kv_pool_init(&pool, bp->kv_blocks, bp->kv_block_size, err) ||
        ifl_sampler_init(&sampler, c->n_vocab, err))
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
    int32_t run_start[2];
    const int32_t *tables[1] = {seq.blocks};
    ifl_batch b = {
        .n_seqs = 1, .run_start = run_start, .block_tables = tables, .n_blocks = &seq.n_blocks};
    int32_t pos = 0, tok = -1;
    /* The step that ends the prompt and every decode step draw the next token through
     * ifl_backend_step_sample (on the device when the backend can); only when the caller wants
     * the prompt's logits does the first draw happen here from host logits. */
    ifl_sample_req sreq = {.sampling = o->sampling, .seed = o->seed, .draw = 0, .active = 1};
    double t0 = ifl_now_s();
    while (pos < n_prompt) {
        int32_t len = n_prompt - pos < bp->max_tokens ? n_prompt - pos : bp->max_tokens;
        run_start[0] = 0;
        run_start[1] = len;
        b.n_tokens = len;
        b.tokens = prompt + pos;
        b.pos0 = &pos;
        int sample_here = pos + len == n_prompt && !o->logits_out && o->max_new > 0;
        if (sample_here ? ifl_backend_step_sample(be, &b, &sreq, &tok, logits, &sampler, err)
                        : ifl_backend_step(be, &b, logits, err))
            goto out;
        pos += len;
    }
    st->prefill_s = ifl_now_s() - t0;
    if (o->logits_out)
        memcpy(o->logits_out, logits, (size_t)c->n_vocab * sizeof *logits);
    if (o->max_new > 0 && tok < 0)
        tok = ifl_sample_u(&sampler, logits, &o->sampling, ifl_philox_uniform(o->seed, 0));
    double t1 = ifl_now_s();
    for (int32_t i = 0; i < o->max_new; i++) {
        st->n_generated++;
        if (o->on_token && o->on_token(o->ud, tok)) {
            st->finish_reason = "stopped";
            break;
        }
        if (!o->ignore_eos && tok == o->eos) {
            st->finish_reason = "eos";
            break;
        }
        if (i + 1 == o->max_new)
            break;
        run_start[0] = 0;
        run_start[1] = 1;
        b.n_tokens = 1;
        int32_t in = tok;
        b.tokens = &in;
        b.pos0 = &pos;
        sreq.draw = (uint64_t)i + 1;
        if (ifl_backend_step_sample(be, &b, &sreq, &tok, logits, &sampler, err))
            goto out;
        pos++;
    }
    st->decode_s = ifl_now_s() - t1;
    rc = 0;
out:
    ifl_kv_seq_free(&seq, &pool);
    ifl_kv_pool_free(&pool);
    ifl_sampler_free(&sampler);
    free(logits);
    return rc;
}
