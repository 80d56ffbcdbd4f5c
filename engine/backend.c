/* backend.c: what every backend shares: default parameters, the constructors' common part, batch
 * validation, the wrappers over the optional entries (describe, step + sampling for backends that
 * do not sample on the device or batches they cannot sample, host sampling and scoring), the
 * draw of one request with its logprobs. See backend.h. Not the choice of a backend: runtime/device.c. */
#include "backend.h"
#include "defaults.h"
#include "philox.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ifl_backend_params_fill(ifl_backend_params *p, const ifl_model *m, int64_t kv_mem_mb)
{
    const ifl_config *c = &m->cfg;
    if (p->kv_block_size <= 0)
        p->kv_block_size = IFL_DEFAULT_KV_BLOCK_SIZE;
    if (p->max_seqs <= 0)
        p->max_seqs = IFL_DEFAULT_MAX_BATCH;
    if (p->max_tokens <= 0)
        p->max_tokens = IFL_DEFAULT_BACKEND_MAX_TOKENS;
    if (p->max_tokens < p->max_seqs)
        p->max_tokens = p->max_seqs; /* a decode step needs one token per sequence */
    if (p->kv_blocks <= 0) {
        int64_t per_seq = (c->n_ctx + p->kv_block_size - 1) / p->kv_block_size;
        int64_t want = per_seq * p->max_seqs;
        int64_t elem = p->kv_elem_bytes > 0 ? p->kv_elem_bytes : 4;
        int64_t block_bytes = (int64_t)c->n_layer * 2 * c->n_embd * p->kv_block_size * elem;
        int64_t cap = kv_mem_mb > 0 ? kv_mem_mb * 1024 * 1024 / block_bytes : want;
        if (cap < per_seq)
            cap = per_seq; /* always room for one full context */
        p->kv_blocks = (int32_t)(want < cap ? want : cap);
    }
}

void *ifl_backend_alloc(size_t size, const ifl_backend_ops *ops, const ifl_model *m,
                        const ifl_backend_params *p, int32_t kv_elem_bytes,
                        int64_t default_kv_mem_mb, ifl_err *err)
{
    ifl_backend *be = calloc(1, size);
    if (!be) {
        ifl_err_set(err, "out of memory");
        return NULL;
    }
    be->ops = ops;
    be->model = m;
    be->params = *p;
    be->params.kv_elem_bytes = kv_elem_bytes; /* the backend's fact, whatever the caller said */
    ifl_backend_params_fill(&be->params, m, p->kv_mem_mb > 0 ? p->kv_mem_mb : default_kv_mem_mb);
    return be;
}

int ifl_batch_validate(const ifl_backend *be, const ifl_batch *b, ifl_err *err)
{
    const ifl_config *c = &be->model->cfg;
    const ifl_backend_params *p = &be->params;
    if (b->n_seqs < 1 || b->n_seqs > p->max_seqs)
        return ifl_err_set(err, "batch: n_seqs %d outside [1, %d]", b->n_seqs, p->max_seqs);
    if (b->n_tokens < 1 || b->n_tokens > p->max_tokens)
        return ifl_err_set(err, "batch: n_tokens %d outside [1, %d]", b->n_tokens, p->max_tokens);
    if (b->run_start[0] != 0 || b->run_start[b->n_seqs] != b->n_tokens)
        return ifl_err_set(err, "batch: runs cover [%d, %d), expected [0, %d)", b->run_start[0],
                           b->run_start[b->n_seqs], b->n_tokens);
    for (int32_t s = 0; s < b->n_seqs; s++) {
        int32_t len = b->run_start[s + 1] - b->run_start[s];
        if (len < 1)
            return ifl_err_set(err, "batch: sequence %d has an empty run", s);
        if (b->pos0[s] < 0 || b->pos0[s] + len > c->n_ctx)
            return ifl_err_set(
                err, "batch: sequence %d covers positions [%d, %d), outside the %d-token context",
                s, b->pos0[s], b->pos0[s] + len, c->n_ctx);
        int32_t need = (b->pos0[s] + len + p->kv_block_size - 1) / p->kv_block_size;
        if (b->n_blocks[s] < need)
            return ifl_err_set(err, "batch: sequence %d has %d KV blocks, needs %d for position %d",
                               s, b->n_blocks[s], need, b->pos0[s] + len - 1);
        for (int32_t j = 0; j < need; j++)
            if (b->block_tables[s][j] < 0 || b->block_tables[s][j] >= p->kv_blocks)
                return ifl_err_set(err,
                                   "batch: sequence %d block %d is %d, outside the pool [0, %d)", s,
                                   j, b->block_tables[s][j], p->kv_blocks);
        if (b->n_rows && (b->n_rows[s] < 0 || b->n_rows[s] > len))
            return ifl_err_set(err, "batch: sequence %d asks for %d rows of its %d tokens", s,
                               b->n_rows[s], len);
        for (int32_t i = b->run_start[s]; i < b->run_start[s + 1]; i++)
            if (b->tokens[i] < 0 || b->tokens[i] >= c->n_vocab)
                return ifl_err_set(
                    err, "batch: token %d (sequence %d) is %d, outside the vocabulary [0, %d)", i,
                    s, b->tokens[i], c->n_vocab);
    }
    return 0;
}

/* 1 when the batch can be sampled on the device (backend.h: step_sample): no logprobs wanted, and
 * n_rows NULL or one row of every active run and none of an inactive one. */
static int device_can_sample(const ifl_batch *b, const ifl_sample_req *req)
{
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (req[s].active && req[s].lp)
            return 0;
        if (b->n_rows && b->n_rows[s] != (req[s].active ? 1 : 0))
            return 0;
    }
    return 1;
}

/* row_of[s]: the row of run s's last token in a step's logits of b; -1 for a run with no row. */
static void last_rows(const ifl_batch *b, int32_t *row_of)
{
    int32_t end = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        end += b->n_rows ? b->n_rows[s] : 1;
        row_of[s] = (b->n_rows ? b->n_rows[s] : 1) > 0 ? end - 1 : -1;
    }
}

int ifl_backend_step_sample(ifl_backend *be, const ifl_batch *b, const ifl_sample_req *req,
                            int32_t *tokens, float *logits, ifl_sampler *sampler, ifl_err *err)
{
    if (be->ops->step_sample && device_can_sample(b, req))
        return be->ops->step_sample(be, b, req, tokens, err);
    int32_t stack_rows[256];
    int32_t *row_of = b->n_seqs <= 256 ? stack_rows : malloc((size_t)b->n_seqs * sizeof *row_of);
    if (!row_of)
        return ifl_err_set(err, "out of memory for the rows of %d runs", b->n_seqs);
    last_rows(b, row_of);
    int rc = 0;
    for (int32_t s = 0; s < b->n_seqs && !rc; s++)
        if (req[s].active && row_of[s] < 0)
            rc = ifl_err_set(err, "batch: sequence %d wants a token but asks for no row", s);
    if (!rc && !(rc = ifl_backend_step(be, b, logits, err)))
        ifl_backend_sample(be, logits, b->n_seqs, row_of, req, tokens, sampler);
    if (row_of != stack_rows)
        free(row_of);
    return rc;
}

void ifl_backend_sample(ifl_backend *be, float *logits, int32_t n_req, const int32_t *row_of,
                        const ifl_sample_req *req, int32_t *tokens, ifl_sampler *sampler)
{
    if (be->ops->sample) {
        be->ops->sample(be, logits, n_req, row_of, req, tokens);
        return;
    }
    size_t V = (size_t)be->model->cfg.n_vocab;
    for (int32_t i = 0; i < n_req; i++)
        tokens[i] = req[i].active ? ifl_backend_draw(
                                        sampler, logits + (size_t)(row_of ? row_of[i] : i) * V,
                                        &req[i])
                                  : -1;
}

void ifl_backend_score(ifl_backend *be, const float *logits, int32_t n, const int32_t *row_of,
                       const int32_t *token, int32_t n_top, ifl_logprob *out)
{
    if (be->ops->score) {
        be->ops->score(be, logits, n, row_of, token, n_top, out);
        return;
    }
    int32_t V = be->model->cfg.n_vocab;
    for (int32_t i = 0; i < n; i++)
        ifl_logprob_score(logits + (size_t)(row_of ? row_of[i] : i) * (size_t)V, V, token[i],
                          n_top, &out[i]);
}

int32_t ifl_backend_draw(ifl_sampler *sampler, float *row, const ifl_sample_req *r)
{
    if (!r->active)
        return -1;
    float lse = 0;
    const float *raw = row;
    if (r->lp)
        ifl_logprob_row(row, sampler->n_vocab, r->n_top, r->lp, &lse);
    if (r->adj) {
        if (r->lp) {
            memcpy(sampler->raw, row, (size_t)sampler->n_vocab * sizeof *row);
            raw = sampler->raw;
        }
        ifl_logit_adj_apply(row, r->adj);
    }
    int32_t tok = ifl_sample_u(sampler, row, &r->sampling, ifl_philox_uniform(r->seed, r->draw));
    if (r->lp)
        ifl_logprob_set_token(r->lp, tok, raw[tok], lse);
    return tok;
}

void ifl_backend_describe(const ifl_backend *be, char *buf, int cap)
{
    if (cap <= 0)
        return;
    buf[0] = 0;
    if (be->ops->describe)
        be->ops->describe(be, buf, cap);
    if (!buf[0])
        snprintf(buf, (size_t)cap, "%s", be->ops->name);
}
