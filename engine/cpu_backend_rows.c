/* cpu_backend_rows.c: what the CPU backend does besides the forward pass (backend.h): drawing
 * tokens from rows of host logits and scoring them (logprobs.h), both spread over the pool's
 * threads, and copying KV blocks (copy on write of a forked sequence's shared block). The state
 * is cpu_backend_impl.h's. */
#include <string.h>

#include "cpu_backend_impl.h"

static void task_sample(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    size_t V = (size_t)be->base.model->cfg.n_vocab;
    for (int32_t i = ith; i < be->s_n; i += nth) {
        const ifl_sample_req *r = &be->s_req[i];
        if (!r->active) { /* its row may not exist (row_of -1) */
            be->s_tokens[i] = -1;
            continue;
        }
        float *row = be->s_logits + (size_t)(be->s_row_of ? be->s_row_of[i] : i) * V;
        be->s_tokens[i] = ifl_backend_draw(&be->samplers[ith], row, r);
    }
}

/* Every request's draw on the pool's threads (ifl_backend_ops.sample). With 64 runs a greedy draw
 * over logits just written to memory took ~1% of a step on one thread, and a top-k/top-p draw
 * takes 85-250 us (bench --engine's sampler line), several ms a step. */
void ifl_cpu_sample(ifl_backend *base, float *logits, int32_t n_req, const int32_t *row_of,
                    const ifl_sample_req *req, int32_t *tokens)
{
    cpu_backend *be = (cpu_backend *)base;
    be->s_logits = logits;
    be->s_row_of = row_of;
    be->s_req = req;
    be->s_tokens = tokens;
    be->s_n = n_req;
    if (n_req <= 1)
        task_sample(be, 0, 1);
    else
        ifl_threadpool_run(be->tp, task_sample, be);
}

static void task_score(void *ctx, int ith, int nth)
{
    cpu_backend *be = ctx;
    int32_t V = be->base.model->cfg.n_vocab;
    for (int32_t i = ith; i < be->s_n; i += nth) {
        const float *row = be->s_logits + (size_t)(be->s_row_of ? be->s_row_of[i] : i) * (size_t)V;
        ifl_logprob_score(row, V, be->s_score_tok[i], be->s_n_top, &be->s_out[i]);
    }
}

/* Every row's score on the pool's threads (ifl_backend_ops.score): a prompt's rows are scored
 * together, hundreds of rows of n_vocab at ~40 us each on one core. */
void ifl_cpu_score(ifl_backend *base, const float *logits, int32_t n, const int32_t *row_of,
                   const int32_t *token, int32_t n_top, ifl_logprob *out)
{
    cpu_backend *be = (cpu_backend *)base;
    be->s_logits = (float *)logits; /* read only: task_score does not write rows */
    be->s_row_of = row_of;
    be->s_score_tok = token;
    be->s_n_top = n_top;
    be->s_out = out;
    be->s_n = n;
    if (n <= 1)
        task_score(be, 0, 1);
    else
        ifl_threadpool_run(be->tp, task_score, be);
}

/* Block b of the pool holds every layer's keys and values of its positions, in one run of
 * block_floats floats (cpu_backend.c: the KV pool layout): one copy per block. */
int ifl_cpu_copy_blocks(ifl_backend *base, const int32_t *src, const int32_t *dst, int32_t n,
                        ifl_err *err)
{
    cpu_backend *be = (cpu_backend *)base;
    int32_t nb = base->params.kv_blocks;
    for (int32_t i = 0; i < n; i++)
        if (src[i] < 0 || src[i] >= nb || dst[i] < 0 || dst[i] >= nb)
            return ifl_err_set(err, "copy_blocks: copy %d is block %d -> %d, outside the pool [0, %d)",
                               i, src[i], dst[i], nb);
    for (int32_t i = 0; i < n; i++)
        if (src[i] != dst[i])
            memcpy(be->kv + (size_t)dst[i] * be->block_floats,
                   be->kv + (size_t)src[i] * be->block_floats, be->block_floats * sizeof(float));
    return 0;
}
