/* cpu_kernels_q8.c: the driver's q8 path (MM_Q8, cpu_matmul_impl.h): x's rows quantized to
 * int16 blocks, chunks of output tiles claimed by the threads, each through the family's q8_tiles
 * (cpu_kernels_isa.h), then bias and activation. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_kernels_isa.h"
#include "cpu_matmul_impl.h"

void ifl_q8_quantize_rows(int16_t *xq, float *xs, const float *x, int M, int32_t ldx, int32_t K)
{
    int32_t KB = (K + IFL_Q8_BLOCK - 1) / IFL_Q8_BLOCK;
    for (int m = 0; m < M; m++) {
        const float *r = x + (size_t)m * ldx;
        int16_t *q = xq + (size_t)m * KB * IFL_Q8_BLOCK;
        for (int32_t kb = 0; kb < KB; kb++) {
            int32_t k0 = kb * IFL_Q8_BLOCK, n = K - k0 < IFL_Q8_BLOCK ? K - k0 : IFL_Q8_BLOCK;
            float v[IFL_Q8_BLOCK] = {0}, amax = 0;
            memcpy(v, r + k0, (size_t)n * sizeof *v);
            int finite = 1;
            for (int i = 0; i < IFL_Q8_BLOCK; i++) { /* vectorised: no branch, no division */
                float a = fabsf(v[i]);
                finite &= a <= 3.4028235e38f; /* false for NaN and infinity */
                amax = a > amax ? a : amax;
            }
            if (!finite || amax == 0) {
                xs[(size_t)m * KB + kb] = finite ? 0.0f : NAN;
                memset(q + k0, 0, IFL_Q8_BLOCK * sizeof *q);
                continue;
            }
            xs[(size_t)m * KB + kb] = amax / 32767.0f;
            float inv = 32767.0f / amax;
            for (int i = 0; i < IFL_Q8_BLOCK; i++) {
                /* round to nearest even by adding and taking away 1.5 * 2^23 (|v * inv| is at
                 * most 32767 and a little), then an exact conversion: what cvtps2dq does, in
                 * plain C the compiler vectorises */
                float t = v[i] * inv;
                t = (t + 12582912.0f) - 12582912.0f;
                t = t > 32767.0f ? 32767.0f : t < -32767.0f ? -32767.0f : t;
                q[k0 + i] = (int16_t)t;
            }
        }
    }
}

/* Output tiles per chunk: about the bytes of MM_KN's chunks (a share of one pass's weights small
 * enough that a busy thread holds up little; L2-sized where the rows go in several groups). */
static int32_t q8_chunk_tiles(const ifl_matmul_args *a, int32_t KB, int one_pass)
{
    size_t col = (size_t)KB * IFL_Q8_TILE_BYTES;
    int32_t t = (int32_t)((one_pass ? KN_PASS_CHUNK_BYTES : L2_CHUNK_BYTES) / col);
    int32_t most = pad32(a->max_n) / IFL_Q8_TILE_N; /* the outputs' scratch holds this many */
    t = t < most ? t : most;
    return t < 1 ? 1 : t;
}

/* MM_Q8, share ith: chunks of output tiles claimed from nk_next; for each group of up to q8_max_m
 * rows the family's q8_tiles writes the chunk's outputs into scratch, then they go to y (added
 * where accumulate) with the bias and activation. x is quantized once, as the first chunk is
 * claimed, where all its rows fit (q8_rows), else a group at a time for each chunk (a prefill's
 * rows quantized again for every chunk cost a fifth of its time). */
void ifl_matmul_q8_thread(const ifl_matmul_args *a, int ith, int nth)
{
    (void)nth;
    const ifl_mat *W = a->W;
    const ifl_cpu_kernels *k = a->k;
    int32_t K = a->w_is_nk ? W->cols : W->rows, N = a->w_is_nk ? W->rows : W->cols;
    int32_t KB = (K + IFL_Q8_BLOCK - 1) / IFL_Q8_BLOCK;
    int32_t NJ = (N + IFL_Q8_TILE_N - 1) / IFL_Q8_TILE_N;
    int G = k->q8_max_m < IFL_Q8_MAX_M ? k->q8_max_m : IFL_Q8_MAX_M;
    int all = a->M <= q8_rows(a);
    int32_t chunk = q8_chunk_tiles(a, KB, a->M <= G), n_chunks = (NJ + chunk - 1) / chunk;
    int16_t *xq = thread_q8_x(a, ith);
    float *xs = thread_q8_scales(a, ith), *yt = thread_q8_y(a, ith);
    int32_t ldt = chunk * IFL_Q8_TILE_N; /* yt's rows: at most pad32(max_n) floats */
    size_t xq_row = (size_t)KB * IFL_Q8_BLOCK;
    int quantized = 0;
    for (int32_t cur = ifl_mm_claim(a); cur < n_chunks; cur = ifl_mm_claim(a)) {
        int32_t j0 = cur * chunk, j1 = j0 + chunk < NJ ? j0 + chunk : NJ;
        int32_t n0 = j0 * IFL_Q8_TILE_N, n1 = j1 * IFL_Q8_TILE_N < N ? j1 * IFL_Q8_TILE_N : N;
        if (all && !quantized)
            ifl_q8_quantize_rows(xq, xs, a->x, (int)a->M, K, K);
        quantized = 1;
        for (int32_t m0 = 0; m0 < a->M; m0 += G) {
            int M = a->M - m0 < G ? (int)(a->M - m0) : G;
            const int16_t *gq = xq + (all ? (size_t)m0 * xq_row : 0);
            const float *gs = xs + (all ? (size_t)m0 * KB : 0);
            if (!all)
                ifl_q8_quantize_rows(xq, xs, a->x + (size_t)m0 * K, M, K, K);
            k->q8_tiles(yt, ldt, gq, gs, KB, W->data, j0, j1, M);
            for (int m = 0; m < M; m++) {
                float *y = a->y + (size_t)(m0 + m) * N + n0;
                const float *t = yt + (size_t)m * ldt;
                if (a->accumulate)
                    for (int32_t n = 0; n < n1 - n0; n++)
                        y[n] += t[n];
                else
                    memcpy(y, t, (size_t)(n1 - n0) * sizeof *y);
            }
        }
        ifl_mm_epilogue(a, N, n0, n1);
    }
}
