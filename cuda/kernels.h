/* kernels.h: the CUDA kernels of the GPU backend, one .cu file per family, behind C launchers.
 *
 * Every launcher enqueues on `stream` and returns the launch status (cudaGetLastError) as an int,
 * 0 for success; none synchronises. Pointers are device pointers. Shapes use the engine's letters
 * (config.h): T tokens in the step, S sequences, C width, H heads, D = C / H, F MLP width,
 * V vocabulary, L layers, BS tokens per KV block.
 *
 * Element types: the residual stream, LayerNorm parameters, biases, GEMM outputs and logits are
 * f32; matrices, GEMM inputs and the KV pool are `wdt` (IFL_DTYPE_BF16 or IFL_DTYPE_F16).
 *
 * KV pool layout, per block: [L][2 (k, v)][H][BS][D] elements of the KV dtype; the element of
 * (block, layer, k|v, head, slot, d) is at
 *   ((((block * L + layer) * 2 + kv) * H + head) * BS + slot) * D + d.
 * A token's slot index in the pool is block * BS + (pos % BS): kv_slot below. */
#ifndef IFL_CUDA_KERNELS_H
#define IFL_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "logit_adj.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* embed.cu: 0 when this build's kernels can run on the current device (a build for another
 * architecture gives cudaErrorNoKernelImageForDevice). */
int ifl_cuda_kernels_loadable(void);

/* embed.cu: x[t] = wte[tokens[t]] + wpe[pos[t]], (T, C) f32; wte and wpe are row-major `wdt`. */
int ifl_cuda_embed(float *x, const void *wte, const void *wpe, ifl_dtype wdt, const int32_t *tokens,
                   const int32_t *pos, int32_t T, int32_t C, cudaStream_t stream);

/* layernorm.cu: for each of n_rows rows r:
 *   if add != NULL: x[r] += add[r] + add_bias (add_bias may be NULL), written back to x;
 *   if out != NULL: out[r] = LayerNorm(x[src]) * w + b, stored as out_dt (f32, f16 or bf16),
 * where src = rows[r] when rows != NULL (a gather; then add must be NULL), else r. eps is the
 * model's epsilon. Statistics are computed in f32 over the f32 row. */
int ifl_cuda_add_layernorm(void *out, ifl_dtype out_dt, float *x, const float *add,
                           const float *add_bias, const float *w, const float *b,
                           const int32_t *rows, int32_t n_rows, int32_t C, float eps,
                           cudaStream_t stream);

/* gelu.cu: out (T, F) as out_dt = gelu(in + bias), in f32 (T, F); erf != 0: exact erf GELU,
 * else GPT-2's tanh approximation. */
int ifl_cuda_bias_gelu(void *out, ifl_dtype out_dt, const float *in, const float *bias, int32_t T,
                       int32_t F, int erf, cudaStream_t stream);

/* kv.cu: adds the qkv bias (3C) to qkv (T, 3C) f32 in place, and stores the biased k and v of
 * every token t with kv_slot[t] >= 0 into layer `layer` of the pool at that slot. */
int ifl_cuda_qkv_bias_kv_append(float *qkv, const float *bias, void *kv, ifl_dtype kv_dt,
                                const int32_t *kv_slot, int32_t T, int32_t C, int32_t H,
                                int32_t layer, int32_t L, int32_t BS, cudaStream_t stream);

/* attention.cu: causal attention of every token over its sequence's keys, reading the paged
 * pool: token t (query q = qkv[t][h*D ..], already biased) attends positions 0 .. n_keys[t]-1 of
 * the sequence whose block table is block_tables[table_row[t] * bt_stride ..]; out[t][h*D + d] as
 * out_dt. n_keys[t] == 0 marks a padding row: its output is zero. Prefill chunks and decode tokens
 * mix freely in one launch. scale multiplies the scores (1/sqrt(D), and / (layer + 1) when the
 * config asks). max_keys bounds n_keys (the context size): it sizes the shared memory. Keys at or
 * past n_keys[t], and block-table entries past the ones those keys need, are never read. Head size
 * D = C / H up to 256; out_dt may be f32, f16 or bf16. */
/* attention.cu: checks that a max_keys-long score row fits the device's shared memory (need and
 * limit in bytes are written) and opts the kernel in to more than the default 48 KB when it needs
 * it. Call once per device before launching with that max_keys (the backend does at start-up);
 * contexts up to ~11,800 positions need nothing. */
int ifl_cuda_attention_setup(int32_t max_keys, size_t *need, size_t *limit);

int ifl_cuda_attention(void *out, ifl_dtype out_dt, const float *qkv, const void *kv,
                       ifl_dtype kv_dt, const int32_t *n_keys, const int32_t *table_row,
                       const int32_t *block_tables, int32_t bt_stride, int32_t T, int32_t C,
                       int32_t H, int32_t layer, int32_t L, int32_t BS, int32_t max_keys,
                       float scale, cudaStream_t stream);

/* sample.cu: the next token of each of S rows of logits (S, V) f32, rows ld >= V floats apart,
 * on the device.
 * Semantics match the CPU sampler (sampler.h): greedy when temperature <= 0 or top_k == 1 (argmax,
 * lowest id on ties, no draw); otherwise probabilities exp((l - max) / temperature), restricted to
 * the top_k best (ties: lower id first) when top_k > 0 and to those at or above min_p_cut (a token
 * below it weighs 0), then to the nucleus (the shortest
 * best-first prefix whose mass reaches top_p of the kept mass) when top_p < 1, and one draw walks
 * the kept tokens in id order with r = ifl_philox_bits53(seed, draw). Masses are summed as 64-bit
 * fixed point, so the result does not depend on thread scheduling: the same logits and (seed,
 * draw) give the same token on every run. Rows with active == 0 get -1. */
typedef struct {
    float temperature;
    int32_t top_k;
    float top_p;
    int32_t active;
    uint64_t seed;
    uint64_t draw;
    float min_p;     /* 0: off (so a zeroed request has no min_p) */
    float min_p_cut; /* with min_p: ifl_sampling_min_p_cut (sampler.h), computed on the host */
} ifl_cuda_sample_req;

/* Bytes of device scratch ifl_cuda_sample needs for S rows of V. */
size_t ifl_cuda_sample_scratch_bytes(int32_t S, int32_t V);
int ifl_cuda_sample(int32_t *tokens, const float *logits, const ifl_cuda_sample_req *req, int32_t S,
                    int32_t V, int32_t ld, void *scratch, cudaStream_t stream);

/* logit_adj.cu: each row's adjustments (logit_adj.h) in place before sampling: row s of logits
 * (rows ld >= V floats apart) gets ops[row_ops[s] .. row_ops[s + 1]), phase by phase (every bias,
 * then the penalties, then the bans), each through ifl_logit_op_apply, so the row ends bit for bit
 * as the host's ifl_logit_adj_apply leaves it. Rows with no ops are untouched; ops with ids
 * outside [0, V) are skipped. One block per row. */
int ifl_cuda_logit_adjust(float *logits, int32_t ld, int32_t V, const ifl_logit_op *ops,
                          const int32_t *row_ops, int32_t S, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
