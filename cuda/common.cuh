/* common.cuh: what the kernel files share: element loads and stores for the three float formats
 * (f32, f16, bf16) chosen at run time by an ifl_dtype, warp and block sums, and the launch-status
 * convention of kernels.h (launchers return cudaGetLastError() as an int). */
#ifndef IFL_CUDA_COMMON_CUH
#define IFL_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "tensor.h"

/* Element i of a buffer of dtype t, as f32. */
__device__ __forceinline__ float ifl_ld(const void *p, ifl_dtype t, size_t i)
{
    if (t == IFL_DTYPE_BF16)
        return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    if (t == IFL_DTYPE_F16)
        return __half2float(((const __half *)p)[i]);
    return ((const float *)p)[i];
}

/* Stores v (rounded to nearest even) as element i of a buffer of dtype t. */
__device__ __forceinline__ void ifl_st(void *p, ifl_dtype t, size_t i, float v)
{
    if (t == IFL_DTYPE_BF16)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
    else if (t == IFL_DTYPE_F16)
        ((__half *)p)[i] = __float2half_rn(v);
    else
        ((float *)p)[i] = v;
}

__device__ __forceinline__ float ifl_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float ifl_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
 * `red` is 32 floats of shared memory; the call synchronises the block. */
__device__ __forceinline__ float ifl_block_sum(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ifl_warp_sum(v);
    __syncthreads(); /* red may still be read by a previous call */
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return ifl_warp_sum(v);
}

__device__ __forceinline__ float ifl_block_max(float v, float *red)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = ifl_warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    return ifl_warp_max(v);
}

static inline int ifl_launch_status(void)
{
    return (int)cudaGetLastError();
}

#endif
