/* cpu_backend_impl.h: the CPU backend's state (cpu_backend), shared by its two files: the forward
 * pass, making and freeing (cpu_backend.c), and what it does with host rows and KV blocks besides
 * (cpu_backend_rows.c: sampling and scoring on the pool's threads, block copies). Internal to
 * the engine. */
#ifndef IFL_CPU_BACKEND_IMPL_H
#define IFL_CPU_BACKEND_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_kernels.h"
#include "cpu_kernels_isa.h"
#include "threadpool.h"
#include "work_ranges.h"

enum { PH_EMBED, PH_LN, PH_QKV, PH_KV, PH_ATTN, PH_PROJ, PH_FC, PH_MPROJ, PH_HEAD, PH_COUNT };

typedef struct {
    ifl_backend base;
    ifl_threadpool *tp;
    int nth;
    const ifl_cpu_kernels *k; /* the kernel family, the process's when this backend was made */
    int32_t L, H, D, C, F, V, P, BS;
    ifl_layer *layers; /* (L) the model's layers, matrices in panel layouts */
    ifl_mat lm_head;   /* (V, C) in IFL_LAYOUT_NK4 */
    void *packed;      /* matrices this backend repacked itself (model loaded without
                          cpu_layout), else NULL */
    size_t packed_bytes;
    float *kv; /* (blocks, L, 2, H, D*BS) */
    size_t kv_bytes;
    size_t block_floats; /* L * 2 * H * D * BS */
    /* run state, one allocation */
    void *arena;
    size_t arena_bytes;
    float *x;          /* (T, C) residual stream */
    float *xn;         /* (T, C) normalised input of a sub-layer */
    float *qkv;        /* (T, 3C) */
    float *att;        /* (T, C) attention output */
    float *ff;         /* (T, F) */
    float *xf;         /* (T, C) final-normalised rows asked for */
    float *scores;     /* (nth, IFL_ATTN_TILE, P + BS) attention scores, per thread */
    float *mm_scratch; /* (nth, mm_floats) */
    size_t mm_floats;
    int32_t mm_max_k, mm_max_n, mm_max_m;
    int32_t *tok_seq;     /* (T) sequence of each token */
    int32_t *tok_pos;     /* (T) position of each token */
    int32_t *row_tok;     /* (T) token of each row of logits asked for (ifl_batch.n_rows) */
    int32_t n_out_rows;   /* rows of row_tok this step */
    int32_t *tile_tok;    /* (T) first token of each attention tile */
    int32_t n_tiles;
    int32_t gemv_rows[IFL_DTYPE_COUNT]; /* per weight format */
    /* the step in flight, read by the pool's tasks */
    const ifl_batch *batch;
    int32_t layer;
    int32_t n_rows; /* rows for the LayerNorm task */
    const float *ln_in;
    float *ln_out;
    const float *ln_w, *ln_b;
    const int32_t *ln_rows; /* row indices into ln_in, or NULL for 0..n_rows-1 */
    ifl_matmul_args mm;
    ifl_work_ranges att_items; /* attention's (tile, head) items, a range per share */
    /* cpu_sample, cpu_score (cpu_backend_rows.c): one sampler (scratch of n_vocab candidates)
     * per share of the pool, and the call in flight */
    ifl_sampler *samplers;
    int n_samplers;
    float *s_logits; /* rows with adjustments are changed in place */
    const int32_t *s_row_of;
    const ifl_sample_req *s_req;
    int32_t *s_tokens;
    int32_t s_n;
    const int32_t *s_score_tok;
    int32_t s_n_top;
    ifl_logprob *s_out;
    /* IFL_PROFILE=1 in the environment: seconds per phase, printed when the backend is freed */
    int profile;
    double prof[PH_COUNT];
    int64_t prof_steps;
} cpu_backend;

/* cpu_backend_rows.c: the backend's sample, score and copy_blocks entries (backend.h). */
void ifl_cpu_sample(ifl_backend *base, float *logits, int32_t n_req, const int32_t *row_of,
                    const ifl_sample_req *req, int32_t *tokens);
void ifl_cpu_score(ifl_backend *base, const float *logits, int32_t n, const int32_t *row_of,
                   const int32_t *token, int32_t n_top, ifl_logprob *out);
int ifl_cpu_copy_blocks(ifl_backend *base, const int32_t *src, const int32_t *dst, int32_t n,
                        ifl_err *err);

#endif
