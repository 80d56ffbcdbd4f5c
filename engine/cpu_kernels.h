/* cpu_kernels.h: the CPU backend's compute kernels: matrix products over f32/f16/bf16 weights,
 * LayerNorm, GELU, softmax and paged attention.
 *
 * Every kernel that takes (ith, nth) computes only its own share, so the backend can hand it to the
 * thread pool; the others are small enough to run on one thread. Matrix products: for a few rows
 * (decode) a streaming kernel reads each weight once (memory-bound, AVX-512 where available); for
 * more rows OpenBLAS sgemm runs on each thread's column slice, after converting 16-bit weights to
 * f32 in cache-sized blocks. Not thread-safe beyond that: scratch is per thread. */
#ifndef IFL_CPU_KERNELS_H
#define IFL_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

typedef enum {
    IFL_ACT_NONE = 0,
    IFL_ACT_GELU_TANH = 1,
    IFL_ACT_GELU_ERF = 2,
} ifl_act;

/* y (M, N) = [y +] x (M, K) @ op(W) + bias, then act. W is (K, N) when !w_is_nk (Conv1D weights)
 * or (N, K) when w_is_nk (the embedding used as lm_head: y = x @ W^T). */
typedef struct {
    float *y;
    const float *x;
    int32_t M;
    const ifl_mat *W;
    int w_is_nk;
    const float *bias;          /* (N) or NULL */
    int accumulate;             /* 1: add into y (residual) */
    ifl_act act;
    float *scratch;             /* per-thread scratch, scratch_floats each */
    size_t scratch_floats;
    int32_t gemv_max_rows;      /* use the streaming kernel up to this many rows */
} ifl_matmul_args;

/* Floats of per-thread scratch ifl_matmul needs for any K up to max_k. */
size_t ifl_matmul_scratch_floats(int32_t max_k);
/* Computes thread ith's share (a slice of the N columns). */
void ifl_matmul_thread(const ifl_matmul_args *a, int ith, int nth);
/* Rows at or below which the streaming kernel beats sgemm for this dtype. */
int32_t ifl_matmul_default_gemv_rows(ifl_dtype dt);

/* out (C) = LayerNorm(x (C)) * w + b. */
void ifl_layernorm(float *out, const float *x, const float *w, const float *b, int32_t C, float eps);

/* In place on n values. */
void ifl_gelu_tanh(float *x, size_t n);
void ifl_gelu_erf(float *x, size_t n);

/* x (n) = softmax(x); returns nothing. */
void ifl_softmax(float *x, int32_t n);

/* e^x for n values (max relative error ~2e-7). */
void ifl_exp(float *y, const float *x, size_t n);

#endif
