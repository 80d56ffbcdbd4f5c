/* gelu.cu: the MLP's activation, fused with the fc layer's bias: out = gelu(in + bias), f32 in,
 * out in the GEMM input dtype of the next layer (bf16/f16) or f32.
 *
 * Grid: a flat grid-stride loop over T x F elements, 256 threads per block; consecutive threads
 * read consecutive elements of in and bias (coalesced), one read and one write per element. */
#include "common.cuh"
#include "kernels.h"

__global__ void bias_gelu_kernel(void *out, ifl_dtype out_dt, const float *in, const float *bias,
                                 size_t n, int32_t F, int erf_gelu)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = in[i] + bias[i % (size_t)F];
        float g;
        if (erf_gelu) {
            g = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
        } else {
            float u = 0.79788456080286536f * (v + 0.044715f * v * v * v); /* sqrt(2/pi) */
            g = 0.5f * v * (1.0f + tanhf(u));
        }
        ifl_st(out, out_dt, i, g);
    }
}

extern "C" int ifl_cuda_bias_gelu(void *out, ifl_dtype out_dt, const float *in, const float *bias,
                                  int32_t T, int32_t F, int erf, cudaStream_t stream)
{
    size_t n = (size_t)T * (size_t)F;
    if (n == 0)
        return 0;
    size_t blocks = (n + 255) / 256;
    if (blocks > 65536)
        blocks = 65536;
    bias_gelu_kernel<<<(unsigned)blocks, 256, 0, stream>>>(out, out_dt, in, bias, n, F, erf);
    return ifl_launch_status();
}
