/* embed.cu: the first layer of the forward pass: x[t] = wte[token[t]] + wpe[pos[t]] in f32.
 *
 * Grid: one block per token (T blocks), 256 threads striding over the C columns, so each block
 * reads two contiguous rows of the tables (coalesced) and writes one contiguous f32 row. */
#include "common.cuh"
#include "kernels.h"

__global__ void embed_kernel(float *x, const void *wte, const void *wpe, ifl_dtype wdt,
                             const int32_t *tokens, const int32_t *pos, int32_t C)
{
    int32_t t = blockIdx.x;
    size_t tok = (size_t)tokens[t], p = (size_t)pos[t];
    float *xr = x + (size_t)t * C;
    for (int32_t i = threadIdx.x; i < C; i += blockDim.x)
        xr[i] = ifl_ld(wte, wdt, tok * C + i) + ifl_ld(wpe, wdt, p * C + i);
}

extern "C" int ifl_cuda_embed(float *x, const void *wte, const void *wpe, ifl_dtype wdt,
                              const int32_t *tokens, const int32_t *pos, int32_t T, int32_t C,
                              cudaStream_t stream)
{
    if (T <= 0)
        return 0;
    embed_kernel<<<T, 256, 0, stream>>>(x, wte, wpe, wdt, tokens, pos, C);
    return ifl_launch_status();
}

extern "C" int ifl_cuda_kernels_loadable(void)
{
    cudaFuncAttributes a;
    return (int)cudaFuncGetAttributes(&a, embed_kernel);
}
