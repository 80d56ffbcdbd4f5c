/* kv.cu: the qkv projection's bias, fused with the KV append: qkv += bias in place (the query
 * then goes to attention in f32) and each token's biased key and value are stored into its slot
 * of the paged pool, in the pool's dtype. Layout of the pool: kernels.h.
 *
 * Grid: one block per token, 256 threads striding over the 3C values of its qkv row: the row and
 * the bias are read coalesced; the key and value writes are contiguous runs of D elements per
 * head (a head's slot row is D contiguous elements). */
#include "common.cuh"
#include "kernels.h"

__global__ void qkv_bias_kv_append_kernel(float *qkv, const float *bias, void *kv, ifl_dtype kv_dt,
                                          const int32_t *kv_slot, int32_t C, int32_t H,
                                          int32_t layer, int32_t L, int32_t BS)
{
    int32_t t = blockIdx.x;
    int32_t slot = kv_slot[t];
    int32_t D = C / H;
    float *row = qkv + (size_t)t * 3 * C;
    for (int32_t i = threadIdx.x; i < 3 * C; i += blockDim.x) {
        float v = row[i] + bias[i];
        row[i] = v;
        if (i < C || slot < 0)
            continue;
        int32_t which = i < 2 * C ? 0 : 1; /* k | v */
        int32_t rem = i - C - which * C;
        int32_t h = rem / D, d = rem % D;
        size_t block = (size_t)(slot / BS), s = (size_t)(slot % BS);
        size_t idx = ((((block * L + layer) * 2 + which) * H + h) * BS + s) * D + d;
        ifl_st(kv, kv_dt, idx, v);
    }
}

extern "C" int ifl_cuda_qkv_bias_kv_append(float *qkv, const float *bias, void *kv, ifl_dtype kv_dt,
                                           const int32_t *kv_slot, int32_t T, int32_t C, int32_t H,
                                           int32_t layer, int32_t L, int32_t BS,
                                           cudaStream_t stream)
{
    if (T <= 0)
        return 0;
    qkv_bias_kv_append_kernel<<<T, 256, 0, stream>>>(qkv, bias, kv, kv_dt, kv_slot, C, H, layer, L,
                                                     BS);
    return ifl_launch_status();
}
