/* backend.h: the step interface every compute backend implements (CPU here, CUDA in cuda/).
 *
 * One call runs one ragged batch: S sequences, each contributing a run of tokens (a prefill chunk
 * or a single decode token) at its own positions, with its own KV blocks from the backend's paged
 * pool. The step appends the runs' keys and values to the pool and returns rows of logits: by
 * default one per run (its last token); a run may ask for the rows of its last k tokens (all of a
 * prompt for scoring, the last k+1 for speculative checks) or for none (a prefill chunk that does
 * not end its prompt). The lm_head runs only for rows asked for. Which blocks a sequence owns is
 * decided outside (kv.h, the batcher): the backend only stores, reads and copies them (a forked
 * sequence's partly filled block is copied before it is written: copy_blocks). Modelled on ggml's backend struct: a table of function
 * pointers; entries marked optional may be NULL, and callers go through the wrappers below (none
 * reaches into `ops`). The engine knows no backend but its CPU one: which backend serves a
 * --device is decided where the backends are registered (runtime/device.h). */
#ifndef IFL_BACKEND_H
#define IFL_BACKEND_H

#include <stdint.h>

#include "error.h"
#include "logit_adj.h"
#include "logprobs.h"
#include "model.h"
#include "sampler.h"

typedef struct {
    int32_t n_seqs;           /* S */
    int32_t n_tokens;         /* T = sum of run lengths */
    const int32_t *tokens;    /* (T) the runs back to back */
    const int32_t *run_start; /* (S + 1) run s is tokens[run_start[s] .. run_start[s+1]) */
    const int32_t *pos0;      /* (S) position of the first token of run s */
    const int32_t *const *block_tables; /* (S) KV block ids of sequence s, in position order */
    const int32_t *n_blocks;            /* (S) length of each block table */
    const int32_t *n_rows; /* (S) NULL: one row per run, its last token's. Else run s wants the
                              rows of its last n_rows[s] tokens (0 .. its length): the step writes
                              them run by run, in position order, ifl_batch_rows(b) in all */
} ifl_batch;

/* Rows of logits a step of b writes. */
static inline int32_t ifl_batch_rows(const ifl_batch *b)
{
    if (!b->n_rows)
        return b->n_seqs;
    int32_t r = 0;
    for (int32_t s = 0; s < b->n_seqs; s++)
        r += b->n_rows[s];
    return r;
}

typedef struct {
    int32_t n_threads;           /* CPU threads; 0 = one per core */
    int32_t kv_blocks;           /* blocks in the KV pool; 0: sized from kv_mem_mb */
    int32_t kv_block_size;       /* tokens per block */
    int32_t max_tokens;          /* most tokens in one step (T) */
    int32_t max_seqs;            /* most sequences in one step (S) */
    int32_t kv_mem_mb;           /* when kv_blocks is 0: the most memory of the pool, in MiB; 0: the
                                    backend's default (defaults.h: IFL_DEFAULT_KV_MEM_MB_CPU/_CUDA) */
    int32_t kv_elem_bytes;       /* granted, set by the backend: bytes of one KV element as it
                                    stores it (CPU f32: 4, CUDA 16-bit: 2); a caller leaves it 0 */
    int32_t sgemm_above;         /* CPU: matrix products of more rows use OpenBLAS sgemm (where
                                    built); 0: never (the kernel family's own); for comparisons */
    struct ifl_threadpool *pool; /* CPU: a pool to share with other backends (their steps then
                                    take turns region by region); NULL: a pool of its own */
    int prefault;                /* CPU: 1: every page of the KV pool and the activations written
                                    when the backend is made (benchmarks that compare runs on one
                                    backend: the first would pay the page faults the later ones
                                    do not); 0: faulted in by the steps that first reach them
                                    (the server: memory taken as it is used) */
} ifl_backend_params;

typedef struct ifl_backend ifl_backend;

/* What one run's next token is drawn with, for backends that sample on the device. Draw `draw` of
 * a request with seed `seed` uses the Philox stream value ifl_philox_bits53(seed, draw) (philox.h),
 * on every backend, so a seeded request reproduces however it is batched. */
typedef struct {
    ifl_sampling sampling;
    uint64_t seed;
    uint64_t draw;  /* tokens the request has generated so far */
    int32_t active; /* 0: no token wanted (a prefill chunk that does not end the prompt) */
    const ifl_logit_adj *adj; /* the row's adjustments before sampling (logit_adj.h), applied
                                 the same on every backend; NULL: none */
    ifl_logprob *lp; /* NULL: none wanted. Else the drawn token's entry is written here (its
                        log-softmax in the raw row, before adj and temperature) with the row's
                        n_top best (logprobs.h) */
    int32_t n_top;   /* with lp: 0 .. IFL_MAX_TOP_LOGPROBS */
} ifl_sample_req;

typedef struct {
    const char *name;
    void (*free)(ifl_backend *be);
    /* Runs one step and writes logits (ifl_batch_rows(batch), V): the rows the runs asked for,
     * run by run (batch->n_rows; by default row s is the last token of run s). */
    int (*step)(ifl_backend *be, const ifl_batch *batch, float *logits, ifl_err *err);
    /* Optional: runs one step and draws the next token of every active run on the device, so that
     * only S token ids cross back instead of S x V logits. tokens[s] is -1 for inactive runs.
     * Called only for batches whose n_rows is NULL or asks one row of each active run and none of
     * an inactive one, and no request wants logprobs (ifl_backend_step_sample decides). */
    int (*step_sample)(ifl_backend *be, const ifl_batch *batch, const ifl_sample_req *req,
                       int32_t *tokens, ifl_err *err);
    /* Optional: tokens[i] for every active request i drawn from host logits (row row_of[i] of
     * `logits`, V wide; row_of NULL: row i), exactly as ifl_backend_draw draws them one by one,
     * but spread over the backend's threads (each draw depends only on its row, its settings and
     * its uniform). Rows with adjustments are changed in place, so no two requests share a row.
     * NULL: ifl_backend_sample draws them on the calling thread. */
    void (*sample)(ifl_backend *be, float *logits, int32_t n_req, const int32_t *row_of,
                   const ifl_sample_req *req, int32_t *tokens);
    /* Optional: out[i] = ifl_logprob_score of row row_of[i] of host logits at token[i], with the
     * n_top best, for i < n, spread over the backend's threads. NULL: ifl_backend_score computes
     * them on the calling thread. */
    void (*score)(ifl_backend *be, const float *logits, int32_t n, const int32_t *row_of,
                  const int32_t *token, int32_t n_top, ifl_logprob *out);
    /* Copies the KV (every layer, keys and values) of block src[i] into block dst[i], i < n, before
     * the next step reads or writes them (copy on write of a forked sequence's shared block). */
    int (*copy_blocks)(ifl_backend *be, const int32_t *src, const int32_t *dst, int32_t n,
                       ifl_err *err);
    /* Optional: a one-line description of the device and its settings. NULL: name only. */
    void (*describe)(const ifl_backend *be, char *buf, int cap);
} ifl_backend_ops;

struct ifl_backend {
    const ifl_backend_ops *ops;
    const ifl_model *model;
    ifl_backend_params params; /* as granted (defaults filled in) */
};

/* Fills zero fields with defaults that fit the model (defaults.h): IFL_DEFAULT_KV_BLOCK_SIZE-token
 * blocks, max_seqs IFL_DEFAULT_MAX_BATCH, max_tokens IFL_DEFAULT_BACKEND_MAX_TOKENS (at least
 * max_seqs), and kv_blocks for max_seqs full contexts, capped by kv_mem_mb MiB of kv_elem_bytes
 * elements (0: no cap) but never below one full context. */
void ifl_backend_params_fill(ifl_backend_params *p, const ifl_model *m, int64_t kv_mem_mb);

/* For backend constructors: allocates a backend struct of `size` bytes (zeroed) whose first member
 * is an ifl_backend, fills that in (ops, model, the params with defaults: KV elements of
 * kv_elem_bytes, the pool capped by p->kv_mem_mb, else by default_kv_mem_mb). NULL when out of
 * memory. */
void *ifl_backend_alloc(size_t size, const ifl_backend_ops *ops, const ifl_model *m,
                        const ifl_backend_params *p, int32_t kv_elem_bytes,
                        int64_t default_kv_mem_mb, ifl_err *err);

/* Checks a batch against the model and the backend's limits; the error names the field. */
int ifl_batch_validate(const ifl_backend *be, const ifl_batch *b, ifl_err *err);

/* The CPU backend: its own kernels, one family per instruction set (cpu_isa.h); OpenBLAS only for
 * --sgemm-above comparisons, in builds that have it (INFLIGHT_BLAS). */
ifl_backend *ifl_cpu_backend_new(const ifl_model *m, const ifl_backend_params *p, ifl_err *err);

/* Runs the step and draws every active run's next token (req[s] for run s, from its last row):
 * on the device when the backend can and the batch allows (see step_sample), else from host
 * logits with the CPU sampler (logits: ifl_batch_rows(b) x V scratch; sampler: V candidates). */
int ifl_backend_step_sample(ifl_backend *be, const ifl_batch *b, const ifl_sample_req *req,
                            int32_t *tokens, float *logits, ifl_sampler *sampler, ifl_err *err);
/* Draws tokens[i] for n_req requests from host logits (row row_of[i]; NULL: row i): through the
 * backend's sample entry, else one by one on the calling thread with `sampler`. */
void ifl_backend_sample(ifl_backend *be, float *logits, int32_t n_req, const int32_t *row_of,
                        const ifl_sample_req *req, int32_t *tokens, ifl_sampler *sampler);
/* out[i]: row row_of[i] of host logits scored at token[i] with its n_top best (logprobs.h),
 * through the backend's score entry, else on the calling thread. */
void ifl_backend_score(ifl_backend *be, const float *logits, int32_t n, const int32_t *row_of,
                       const int32_t *token, int32_t n_top, ifl_logprob *out);
/* One request's draw from its row of host logits: -1 when inactive, else the row scored into
 * r->lp (when set, from the raw row), adjusted in place (r->adj, when set), and ifl_sample_u with
 * the request's Philox uniform (what ifl_backend_step_sample and a backend's sample entry both
 * do). With both lp and adj set, the drawn token's raw logit is read from a copy of the row kept
 * in the sampler's scratch (sampler.h: raw). */
int32_t ifl_backend_draw(ifl_sampler *sampler, float *row, const ifl_sample_req *r);
/* The KV copies of copy on write (copy_blocks). */
static inline int ifl_backend_copy_blocks(ifl_backend *be, const int32_t *src, const int32_t *dst,
                                          int32_t n, ifl_err *err)
{
    return n > 0 ? be->ops->copy_blocks(be, src, dst, n, err) : 0;
}

/* The wrappers every caller uses: nothing outside backend.c and the backends touches `ops`. */
static inline int ifl_backend_step(ifl_backend *be, const ifl_batch *b, float *logits, ifl_err *err)
{
    return be->ops->step(be, b, logits, err);
}
static inline void ifl_backend_free(ifl_backend *be)
{
    if (be)
        be->ops->free(be);
}
/* "cpu", "cuda". */
static inline const char *ifl_backend_name(const ifl_backend *be)
{
    return be->ops->name;
}
/* One line on the device and its settings into buf (without a describe entry: the name). */
void ifl_backend_describe(const ifl_backend *be, char *buf, int cap);

#endif
