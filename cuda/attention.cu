/* attention.cu: causal multi-head attention over the paged KV pool for a ragged batch: prefill
 * chunks (many query tokens of one sequence) and decode tokens (one query each, long contexts)
 * in one launch. Keys and values of the step's own tokens are already in the pool (kv.cu runs
 * first), so a query at position p reads positions 0..p of its sequence through its block table.
 *
 * Grid: one block per (head, query token) = (H, T); 128 threads. The block keeps the query (D
 * floats) and the row of scores (n_keys floats, dynamic shared memory sized by max_keys) in shared
 * memory. Scores: thread j takes keys j, j + 128, ...; each reads its key's D contiguous elements
 * (16-byte vector loads for 16-bit pools) from the key's block. Softmax: block max and sum. Values
 * (D even, up to 128): warp w sums p_j v_j over keys j = w mod 4, a lane two neighbouring elements
 * of each row (a warp reads a row coalesced), four rows loaded before they are added (a loop of one
 * dependent load per key left the 512-token prefill's attention at 263 us a layer on an H200);
 * the warps' partial sums are added through shared memory. Rows with n_keys == 0 (batch padding)
 * write zeros. */
#include "common.cuh"
#include "kernels.h"

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define ATT_PAIRS 64 /* value rows of up to 128 elements take the fast path (GPT-2's are 64) */
#define ATT_UNROLL 4 /* value rows in flight per warp */

/* Elements i and i + 1 (i even) of a buffer of dtype t, in one 4-byte (16-bit types) or 8-byte
 * (f32) load: the caller's offsets are multiples of the even head size D. */
__device__ __forceinline__ float2 ld_pair(const void *p, ifl_dtype t, size_t i)
{
    if (t == IFL_DTYPE_BF16)
        return __bfloat1622float2(((const __nv_bfloat162 *)p)[i / 2]);
    if (t == IFL_DTYPE_F16)
        return __half22float2(((const __half2 *)p)[i / 2]);
    return ((const float2 *)p)[i / 2];
}

/* q . k over D elements, k in the pool's dtype. */
__device__ __forceinline__ float dot_key(const float *q, const void *kv, ifl_dtype dt, size_t off,
                                         int32_t D)
{
    float acc = 0.0f;
    if (dt != IFL_DTYPE_F32 && (D & 7) == 0) {
        const uint4 *k4 = (const uint4 *)((const uint16_t *)kv + off); /* off % 8 == 0: D | off */
        for (int32_t c = 0; c < D / 8; c++) {
            uint4 u = k4[c];
            const uint32_t w[4] = {u.x, u.y, u.z, u.w};
            for (int e = 0; e < 4; e++) {
                float lo, hi;
                if (dt == IFL_DTYPE_BF16) {
                    __nv_bfloat162 b2;
                    memcpy(&b2, &w[e], sizeof b2);
                    float2 f = __bfloat1622float2(b2);
                    lo = f.x;
                    hi = f.y;
                } else {
                    __half2 h2;
                    memcpy(&h2, &w[e], sizeof h2);
                    float2 f = __half22float2(h2);
                    lo = f.x;
                    hi = f.y;
                }
                acc += q[c * 8 + 2 * e] * lo + q[c * 8 + 2 * e + 1] * hi;
            }
        }
        return acc;
    }
    for (int32_t d = 0; d < D; d++)
        acc += q[d] * ifl_ld(kv, dt, off + d);
    return acc;
}

__global__ void attention_kernel(void *out, ifl_dtype out_dt, const float *qkv, const void *kv,
                                 ifl_dtype kv_dt, const int32_t *n_keys_arr,
                                 const int32_t *table_row, const int32_t *block_tables,
                                 int32_t bt_stride, int32_t C, int32_t H, int32_t layer, int32_t L,
                                 int32_t BS, float scale)
{
    extern __shared__ float scores[]; /* (max_keys) */
    __shared__ float q[256];
    __shared__ float part[ATT_WARPS * 2 * ATT_PAIRS];
    __shared__ float red[32];
    int32_t h = blockIdx.x, t = blockIdx.y;
    int32_t D = C / H;
    int32_t n = n_keys_arr[t];
    size_t out_off = (size_t)t * C + (size_t)h * D;
    if (n <= 0) {
        for (int32_t d = threadIdx.x; d < D; d += blockDim.x)
            ifl_st(out, out_dt, out_off + d, 0.0f);
        return;
    }
    const float *qr = qkv + (size_t)t * 3 * C + (size_t)h * D;
    for (int32_t d = threadIdx.x; d < D; d += blockDim.x)
        q[d] = qr[d];
    __syncthreads();
    const int32_t *table = block_tables + (size_t)table_row[t] * bt_stride;
    /* element offset of (block, layer, k|v, head, slot 0, d 0) */
    size_t per_block = (size_t)L * 2 * H * BS * D;
    size_t k_base = ((size_t)layer * 2 * H + h) * BS * D;
    size_t v_base = (((size_t)layer * 2 + 1) * H + h) * BS * D;

    float mx = -INFINITY;
    for (int32_t j = threadIdx.x; j < n; j += blockDim.x) {
        size_t blk = (size_t)table[j / BS];
        size_t off = blk * per_block + k_base + (size_t)(j % BS) * D;
        float s = dot_key(q, kv, kv_dt, off, D) * scale;
        scores[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = ifl_block_max(mx, red);
    float sum = 0.0f;
    for (int32_t j = threadIdx.x; j < n; j += blockDim.x) {
        float e = expf(scores[j] - mx);
        scores[j] = e;
        sum += e;
    }
    sum = ifl_block_sum(sum, red); /* synchronises: every score is written */
    float inv = 1.0f / sum;

    if ((D & 1) == 0 && D <= 2 * ATT_PAIRS) {
        /* Warp w takes keys w, w + ATT_WARPS, ...; lane l the dimension pairs l and l + 32 of
         * each (two neighbouring elements in one load), and a warp's ATT_UNROLL keys are loaded
         * before any is added, so several rows are in flight per warp. The sums of each dimension
         * are over the same keys in an order fixed by n alone. */
        const int32_t w = threadIdx.x >> 5, lane = threadIdx.x & 31, pairs = D / 2;
        float2 acc[ATT_PAIRS / 32];
#pragma unroll
        for (int i = 0; i < ATT_PAIRS / 32; i++)
            acc[i] = make_float2(0.0f, 0.0f);
        for (int32_t j0 = w; j0 < n; j0 += ATT_UNROLL * ATT_WARPS) {
            float p[ATT_UNROLL];
            float2 v[ATT_UNROLL][ATT_PAIRS / 32];
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++) {
                int32_t j = j0 + u * ATT_WARPS;
                p[u] = 0.0f;
                size_t off = 0;
                if (j < n) {
                    p[u] = scores[j];
                    off = (size_t)table[j / BS] * per_block + v_base + (size_t)(j % BS) * D;
                }
#pragma unroll
                for (int i = 0; i < ATT_PAIRS / 32; i++) {
                    int32_t pr = lane + 32 * i;
                    v[u][i] = j < n && pr < pairs ? ld_pair(kv, kv_dt, off + 2 * (size_t)pr)
                                                  : make_float2(0.0f, 0.0f);
                }
            }
#pragma unroll
            for (int u = 0; u < ATT_UNROLL; u++)
#pragma unroll
                for (int i = 0; i < ATT_PAIRS / 32; i++) {
                    acc[i].x += p[u] * v[u][i].x;
                    acc[i].y += p[u] * v[u][i].y;
                }
        }
#pragma unroll
        for (int i = 0; i < ATT_PAIRS / 32; i++) {
            int32_t pr = lane + 32 * i;
            if (pr < pairs) {
                part[w * 2 * ATT_PAIRS + 2 * pr] = acc[i].x;
                part[w * 2 * ATT_PAIRS + 2 * pr + 1] = acc[i].y;
            }
        }
        __syncthreads();
        for (int32_t d = threadIdx.x; d < D; d += blockDim.x) {
            float tot = 0.0f;
            for (int32_t ww = 0; ww < ATT_WARPS; ww++)
                tot += part[ww * 2 * ATT_PAIRS + d];
            ifl_st(out, out_dt, out_off + d, tot * inv);
        }
    } else {
        for (int32_t d = threadIdx.x; d < D; d += blockDim.x) {
            float acc = 0.0f;
            for (int32_t j = 0; j < n; j++) {
                size_t blk = (size_t)table[j / BS];
                size_t off = blk * per_block + v_base + (size_t)(j % BS) * D + d;
                acc += scores[j] * ifl_ld(kv, kv_dt, off);
            }
            ifl_st(out, out_dt, out_off + d, acc * inv);
        }
    }
}

extern "C" int ifl_cuda_attention(void *out, ifl_dtype out_dt, const float *qkv, const void *kv,
                                  ifl_dtype kv_dt, const int32_t *n_keys, const int32_t *table_row,
                                  const int32_t *block_tables, int32_t bt_stride, int32_t T,
                                  int32_t C, int32_t H, int32_t layer, int32_t L, int32_t BS,
                                  int32_t max_keys, float scale, cudaStream_t stream)
{
    if (T <= 0)
        return 0;
    if (C / H > 256)
        return (int)cudaErrorInvalidValue; /* the query buffer holds 256 floats */
    size_t smem = (size_t)max_keys * sizeof(float);
    dim3 grid((unsigned)H, (unsigned)T);
    attention_kernel<<<grid, ATT_THREADS, smem, stream>>>(out, out_dt, qkv, kv, kv_dt, n_keys,
                                                          table_row, block_tables, bt_stride, C, H,
                                                          layer, L, BS, scale);
    return ifl_launch_status();
}

extern "C" int ifl_cuda_attention_setup(int32_t max_keys, size_t *need, size_t *limit)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, attention_kernel);
    if (e != cudaSuccess)
        return (int)e;
    int dev = 0, optin = 0;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) !=
            cudaSuccess)
        return (int)e;
    size_t dyn = (size_t)max_keys * sizeof(float);
    *need = dyn + a.sharedSizeBytes;
    *limit = (size_t)optin;
    if (*need > *limit)
        return (int)cudaErrorInvalidValue;
    if (*need > 48 * 1024) /* past the default: opt in, once, outside any capture */
        return (int)cudaFuncSetAttribute(attention_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn);
    return 0;
}
