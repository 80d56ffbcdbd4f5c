/* layernorm.cu: LayerNorm, fused with the residual add that precedes it where the forward pass
 * has one: x += add + bias (the attention or MLP projection's GEMM output and its bias), then
 * out = LayerNorm(x) * w + b in the dtype the next GEMM reads. Also the final LayerNorm of the
 * last token of each run (a gather through rows[]).
 *
 * Grid: one block per row, 256 threads striding over C: the row is read (and, with add, written
 * back) once coalesced, then re-read from L1/L2 for the variance and the output; mean and
 * variance are two block reductions (two-pass, as the CPU engine computes them). */
#include "common.cuh"
#include "kernels.h"

__global__ void add_layernorm_kernel(void *out, ifl_dtype out_dt, float *x, const float *add,
                                     const float *add_bias, const float *w, const float *b,
                                     const int32_t *rows, int32_t C, float eps)
{
    __shared__ float red[32];
    int32_t r = blockIdx.x;
    size_t src = rows ? (size_t)rows[r] : (size_t)r;
    float *xr = x + src * C;
    float sum = 0.0f;
    if (add) {
        const float *ar = add + (size_t)r * C;
        for (int32_t i = threadIdx.x; i < C; i += blockDim.x) {
            float v = xr[i] + ar[i] + (add_bias ? add_bias[i] : 0.0f);
            xr[i] = v;
            sum += v;
        }
    } else {
        for (int32_t i = threadIdx.x; i < C; i += blockDim.x)
            sum += xr[i];
    }
    if (!out)
        return; /* residual only */
    float mean = ifl_block_sum(sum, red) / (float)C;
    float sq = 0.0f;
    for (int32_t i = threadIdx.x; i < C; i += blockDim.x) {
        float d = xr[i] - mean;
        sq += d * d;
    }
    float var = ifl_block_sum(sq, red) / (float)C;
    float rstd = rsqrtf(var + eps);
    for (int32_t i = threadIdx.x; i < C; i += blockDim.x)
        ifl_st(out, out_dt, (size_t)r * C + i, (xr[i] - mean) * rstd * w[i] + b[i]);
}

extern "C" int ifl_cuda_add_layernorm(void *out, ifl_dtype out_dt, float *x, const float *add,
                                      const float *add_bias, const float *w, const float *b,
                                      const int32_t *rows, int32_t n_rows, int32_t C, float eps,
                                      cudaStream_t stream)
{
    if (n_rows <= 0)
        return 0;
    add_layernorm_kernel<<<n_rows, 256, 0, stream>>>(out, out_dt, x, add, add_bias, w, b, rows, C,
                                                     eps);
    return ifl_launch_status();
}
