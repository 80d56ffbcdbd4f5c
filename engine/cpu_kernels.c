/* cpu_kernels.c: matrix products, LayerNorm, GELU, softmax (see cpu_kernels.h).
 *
 * The AVX-512 paths need AVX512F+BW+VL (Skylake-X, Zen 4 and later); elsewhere the portable C
 * loops below compute the same thing more slowly. */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

#ifdef INFLIGHT_HAVE_BLAS
#include <cblas.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define IFL_AVX512 1
#include <immintrin.h>
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

enum {
    KN_CHUNK = 2048,              /* columns per accumulator chunk of the streaming KN kernel */
    CONV_FLOATS = 256 * 1024,     /* 1 MiB of f32: a converted weight block for sgemm */
};

size_t ifl_matmul_scratch_floats(int32_t max_k)
{
    size_t gemv = 4 * (size_t)KN_CHUNK;
    size_t conv = CONV_FLOATS > (size_t)max_k * 16 ? CONV_FLOATS : (size_t)max_k * 16;
    return gemv > conv ? gemv : conv;
}

int32_t ifl_matmul_default_gemv_rows(ifl_dtype dt)
{
#if defined(INFLIGHT_HAVE_BLAS)
    return dt == IFL_DTYPE_F32 ? 2 : 4;
#else
    (void)dt;
    return 1 << 30; /* no BLAS: the streaming kernel does everything */
#endif
}

/* ---- exp / GELU / softmax -------------------------------------------------------------------- */

/* Cody-Waite range reduction + degree-6 Taylor polynomial on [-ln2/2, ln2/2]. */
static inline float exp_scalar(float x)
{
    if (x > 88.3762626647949f)
        x = 88.3762626647949f;
    if (x < -87.0f)
        return x < -103.0f ? 0.0f : expf(x); /* subnormal range: rare, exact is fine */
    float n = nearbyintf(x * 1.44269504088896341f);
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187045e-06f, r);
    float p = 1.0f / 720;
    p = fmaf(p, r, 1.0f / 120);
    p = fmaf(p, r, 1.0f / 24);
    p = fmaf(p, r, 1.0f / 6);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return ldexpf(p, (int)n);
}

#ifdef IFL_AVX512
ALWAYS_INLINE __m512 exp16(__m512 x)
{
    x = _mm512_min_ps(x, _mm512_set1_ps(88.3762626647949f));
    x = _mm512_max_ps(x, _mm512_set1_ps(-103.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n); /* p * 2^n, handles under/overflow */
}
#endif

void ifl_exp(float *y, const float *x, size_t n)
{
    size_t i = 0;
#ifdef IFL_AVX512
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
        return;
    }
#endif
    for (; i < n; i++)
        y[i] = exp_scalar(x[i]);
}

/* gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); tanh(u) = 1 - 2 / (1 + e^2u). */
static inline float gelu_tanh_scalar(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    float e = exp_scalar(2.0f * u);
    return 0.5f * x * (2.0f - 2.0f / (1.0f + e));
}

#ifdef IFL_AVX512
ALWAYS_INLINE __m512 gelu16(__m512 x)
{
    __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    __m512 u = _mm512_mul_ps(_mm512_set1_ps(2.0f * 0.7978845608028654f),
                             _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
    __m512 e = exp16(u);
    __m512 t = _mm512_sub_ps(_mm512_set1_ps(2.0f),
                             _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), t);
}
#endif

void ifl_gelu_tanh(float *x, size_t n)
{
    size_t i = 0;
#ifdef IFL_AVX512
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
        return;
    }
#endif
    for (; i < n; i++)
        x[i] = gelu_tanh_scalar(x[i]);
}

void ifl_gelu_erf(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

void ifl_softmax(float *x, int32_t n)
{
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    for (int32_t i = 0; i < n; i++)
        x[i] -= mx;
    ifl_exp(x, x, (size_t)n);
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += x[i];
    float inv = (float)(1.0 / sum);
    for (int32_t i = 0; i < n; i++)
        x[i] *= inv;
}

void ifl_layernorm(float *out, const float *x, const float *w, const float *b, int32_t C, float eps)
{
    float mean = 0, var = 0;
    for (int32_t i = 0; i < C; i++)
        mean += x[i];
    mean /= (float)C;
    for (int32_t i = 0; i < C; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    var /= (float)C;
    float rstd = 1.0f / sqrtf(var + eps);
    for (int32_t i = 0; i < C; i++)
        out[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

/* ---- matrix products ------------------------------------------------------------------------- */

/* After the product of rows 0..M-1, columns [n0, n1): bias and activation. */
static void epilogue(const ifl_matmul_args *a, int32_t N, int32_t n0, int32_t n1)
{
    for (int32_t m = 0; m < a->M; m++) {
        float *y = a->y + (size_t)m * N;
        if (a->bias)
            for (int32_t n = n0; n < n1; n++)
                y[n] += a->bias[n];
        if (a->act == IFL_ACT_GELU_TANH)
            ifl_gelu_tanh(y + n0, (size_t)(n1 - n0));
        else if (a->act == IFL_ACT_GELU_ERF)
            ifl_gelu_erf(y + n0, (size_t)(n1 - n0));
    }
}

#ifdef IFL_AVX512
/* 16 weights at element index i as f32 (mask selects valid lanes). */
ALWAYS_INLINE __m512 load_w16(const void *base, size_t i, ifl_dtype dt, __mmask16 m)
{
    if (dt == IFL_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)base + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)base + i);
    if (dt == IFL_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Streaming KN kernel: acc (M, w) += x (M, K) @ W[:, c0 : c0 + w]; rows of W read once each. */
ALWAYS_INLINE void gemv_kn_chunk(float *acc, const float *x, int32_t K, const void *W, int32_t N,
                                 int32_t c0, int32_t w, const int M, const ifl_dtype dt)
{
    int32_t k = 0;
    for (; k + 4 <= K; k += 4) {
        __m512 xb[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                xb[m][r] = _mm512_set1_ps(x[(size_t)m * K + k + r]);
        size_t row = (size_t)k * N + (size_t)c0;
        for (int32_t j = 0; j < w; j += 16) {
            __mmask16 mk = w - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (w - j)) - 1);
            __m512 w0 = load_w16(W, row + (size_t)j, dt, mk);
            __m512 w1 = load_w16(W, row + (size_t)N + (size_t)j, dt, mk);
            __m512 w2 = load_w16(W, row + 2 * (size_t)N + (size_t)j, dt, mk);
            __m512 w3 = load_w16(W, row + 3 * (size_t)N + (size_t)j, dt, mk);
            for (int m = 0; m < M; m++) {
                float *ap = acc + (size_t)m * KN_CHUNK + j;
                __m512 v = _mm512_load_ps(ap);
                v = _mm512_fmadd_ps(xb[m][0], w0, v);
                v = _mm512_fmadd_ps(xb[m][1], w1, v);
                v = _mm512_fmadd_ps(xb[m][2], w2, v);
                v = _mm512_fmadd_ps(xb[m][3], w3, v);
                _mm512_store_ps(ap, v);
            }
        }
    }
    for (; k < K; k++) {
        size_t row = (size_t)k * N + (size_t)c0;
        for (int32_t j = 0; j < w; j += 16) {
            __mmask16 mk = w - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (w - j)) - 1);
            __m512 w0 = load_w16(W, row + (size_t)j, dt, mk);
            for (int m = 0; m < M; m++) {
                float *ap = acc + (size_t)m * KN_CHUNK + j;
                _mm512_store_ps(ap, _mm512_fmadd_ps(_mm512_set1_ps(x[(size_t)m * K + k]), w0,
                                                    _mm512_load_ps(ap)));
            }
        }
    }
}

/* Streaming NK kernel: y[m][n - n0] = x[m] . W[n] for rows n in [n0, n1), 4 rows at a time. */
ALWAYS_INLINE void gemv_nk(float *y, int32_t ldy, const float *x, int32_t K, const void *W,
                           int32_t n0, int32_t n1, const int M, const ifl_dtype dt)
{
    int32_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        __m512 acc[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_setzero_ps();
        for (int32_t k = 0; k < K; k += 16) {
            __mmask16 mk = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
            __m512 wr[4];
            for (int r = 0; r < 4; r++)
                wr[r] = load_w16(W, (size_t)(n + r) * K + (size_t)k, dt, mk);
            for (int m = 0; m < M; m++) {
                __m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)m * K + k);
                for (int r = 0; r < 4; r++)
                    acc[m][r] = _mm512_fmadd_ps(xv, wr[r], acc[m][r]);
            }
        }
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                y[(size_t)m * ldy + (n - n0) + r] = _mm512_reduce_add_ps(acc[m][r]);
    }
    for (; n < n1; n++) {
        __m512 acc[4];
        for (int m = 0; m < M; m++)
            acc[m] = _mm512_setzero_ps();
        for (int32_t k = 0; k < K; k += 16) {
            __mmask16 mk = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
            __m512 wv = load_w16(W, (size_t)n * K + (size_t)k, dt, mk);
            for (int m = 0; m < M; m++)
                acc[m] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + (size_t)m * K + k), wv, acc[m]);
        }
        for (int m = 0; m < M; m++)
            y[(size_t)m * ldy + (n - n0)] = _mm512_reduce_add_ps(acc[m]);
    }
}

#define DISPATCH_M_DT(M, dt, CALL)                                                                  \
    do {                                                                                            \
        switch ((dt) * 4 + (M)-1) {                                                                 \
        case 0: CALL(1, IFL_DTYPE_F32); break;                                                      \
        case 1: CALL(2, IFL_DTYPE_F32); break;                                                      \
        case 2: CALL(3, IFL_DTYPE_F32); break;                                                      \
        case 3: CALL(4, IFL_DTYPE_F32); break;                                                      \
        case 4: CALL(1, IFL_DTYPE_F16); break;                                                      \
        case 5: CALL(2, IFL_DTYPE_F16); break;                                                      \
        case 6: CALL(3, IFL_DTYPE_F16); break;                                                      \
        case 7: CALL(4, IFL_DTYPE_F16); break;                                                      \
        case 8: CALL(1, IFL_DTYPE_BF16); break;                                                     \
        case 9: CALL(2, IFL_DTYPE_BF16); break;                                                     \
        case 10: CALL(3, IFL_DTYPE_BF16); break;                                                    \
        default: CALL(4, IFL_DTYPE_BF16); break;                                                    \
        }                                                                                           \
    } while (0)
#endif /* IFL_AVX512 */

/* Portable versions of the two streaming kernels. */
__attribute__((unused)) static void gemv_kn_chunk_c(float *acc, const float *x, int32_t K, const ifl_mat *W, int32_t c0,
                            int32_t w, int M)
{
    int32_t N = W->cols;
    for (int32_t k = 0; k < K; k++) {
        size_t row = (size_t)k * N + (size_t)c0;
        for (int m = 0; m < M; m++) {
            float xv = x[(size_t)m * K + k];
            float *ap = acc + (size_t)m * KN_CHUNK;
            if (W->dtype == IFL_DTYPE_F32) {
                const float *wp = (const float *)W->data + row;
                for (int32_t j = 0; j < w; j++)
                    ap[j] += xv * wp[j];
            } else {
                for (int32_t j = 0; j < w; j++)
                    ap[j] += xv * ifl_load_f32(W->dtype, W->data, row + (size_t)j);
            }
        }
    }
}

__attribute__((unused)) static void gemv_nk_c(float *y, int32_t ldy, const float *x, int32_t K, const ifl_mat *W,
                      int32_t n0, int32_t n1, int M)
{
    for (int32_t n = n0; n < n1; n++)
        for (int m = 0; m < M; m++) {
            float s = 0;
            for (int32_t k = 0; k < K; k++)
                s += x[(size_t)m * K + k] * ifl_load_f32(W->dtype, W->data, (size_t)n * K + (size_t)k);
            y[(size_t)m * ldy + (n - n0)] = s;
        }
}

/* Streaming path for up to 4 rows at a time (rows m0..m0+M-1). */
static void matmul_stream(const ifl_matmul_args *a, int32_t m0, int M, int32_t n0, int32_t n1,
                          float *scratch)
{
    const ifl_mat *W = a->W;
    const float *x = a->x + (size_t)m0 * (a->w_is_nk ? W->cols : W->rows);
    if (a->w_is_nk) {
        int32_t K = W->cols, N = W->rows;
        float *y = a->y + (size_t)m0 * N;
        if (a->accumulate) { /* compute into scratch rows, then add */
            for (int32_t c = n0; c < n1; c += KN_CHUNK) {
                int32_t c1 = c + KN_CHUNK < n1 ? c + KN_CHUNK : n1;
#ifdef IFL_AVX512
#define NK_CALL(MM, DT) gemv_nk(scratch, KN_CHUNK, x, K, W->data, c, c1, MM, DT)
                DISPATCH_M_DT(M, W->dtype, NK_CALL);
#undef NK_CALL
#else
                gemv_nk_c(scratch, KN_CHUNK, x, K, W, c, c1, M);
#endif
                for (int m = 0; m < M; m++)
                    for (int32_t n = c; n < c1; n++)
                        y[(size_t)m * N + n] += scratch[(size_t)m * KN_CHUNK + (n - c)];
            }
        } else {
#ifdef IFL_AVX512
#define NK_CALL(MM, DT) gemv_nk(y + n0, N, x, K, W->data, n0, n1, MM, DT)
            DISPATCH_M_DT(M, W->dtype, NK_CALL);
#undef NK_CALL
#else
            gemv_nk_c(y + n0, N, x, K, W, n0, n1, M);
#endif
        }
        return;
    }
    int32_t K = W->rows, N = W->cols;
    float *y = a->y + (size_t)m0 * N;
    for (int32_t c = n0; c < n1; c += KN_CHUNK) {
        int32_t w = n1 - c < KN_CHUNK ? n1 - c : KN_CHUNK;
        for (int m = 0; m < M; m++)
            memset(scratch + (size_t)m * KN_CHUNK, 0, ((size_t)w + 15) / 16 * 16 * sizeof(float));
#ifdef IFL_AVX512
#define KN_CALL(MM, DT) gemv_kn_chunk(scratch, x, K, W->data, N, c, w, MM, DT)
        DISPATCH_M_DT(M, W->dtype, KN_CALL);
#undef KN_CALL
#else
        gemv_kn_chunk_c(scratch, x, K, W, c, w, M);
#endif
        for (int m = 0; m < M; m++) {
            float *yr = y + (size_t)m * N + c;
            const float *ar = scratch + (size_t)m * KN_CHUNK;
            if (a->accumulate)
                for (int32_t j = 0; j < w; j++)
                    yr[j] += ar[j];
            else
                memcpy(yr, ar, (size_t)w * sizeof *yr);
        }
    }
}

#ifdef INFLIGHT_HAVE_BLAS
/* sgemm path for thread's columns [n0, n1). 16-bit weights are widened block by block. */
static void matmul_blas(const ifl_matmul_args *a, int32_t n0, int32_t n1, float *scratch)
{
    const ifl_mat *W = a->W;
    int32_t M = a->M;
    float beta = a->accumulate ? 1.0f : 0.0f;
    if (a->w_is_nk) {
        int32_t K = W->cols, N = W->rows;
        if (W->dtype == IFL_DTYPE_F32) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, a->x, K,
                        (const float *)W->data + (size_t)n0 * K, K, beta, a->y + n0, N);
            return;
        }
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)K);
        nb = nb < 16 ? 16 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            ifl_convert_to_f32(scratch, W->dtype,
                               (const char *)W->data + (size_t)c * K * ifl_dtype_size(W->dtype),
                               (size_t)w * K);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, w, K, 1.0f, a->x, K, scratch,
                        K, beta, a->y + c, N);
        }
        return;
    }
    int32_t K = W->rows, N = W->cols;
    if (W->dtype == IFL_DTYPE_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, n1 - n0, K, 1.0f, a->x, K,
                    (const float *)W->data + n0, N, beta, a->y + n0, N);
        return;
    }
    int32_t nb = (int32_t)(CONV_FLOATS / (size_t)K) & ~15;
    nb = nb < 16 ? 16 : nb;
    size_t es = ifl_dtype_size(W->dtype);
    for (int32_t c = n0; c < n1; c += nb) {
        int32_t w = n1 - c < nb ? n1 - c : nb;
        for (int32_t k = 0; k < K; k++)
            ifl_convert_to_f32(scratch + (size_t)k * w, W->dtype,
                               (const char *)W->data + ((size_t)k * N + (size_t)c) * es, (size_t)w);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, w, K, 1.0f, a->x, K, scratch, w,
                    beta, a->y + c, N);
    }
}
#endif

void ifl_matmul_thread(const ifl_matmul_args *a, int ith, int nth)
{
    int32_t N = a->w_is_nk ? a->W->rows : a->W->cols;
    /* Column slices aligned to 32 so no two threads share a cache line of y or W. */
    int32_t per = (N + nth - 1) / nth;
    per = (per + 31) & ~31;
    int32_t n0 = per * ith, n1 = n0 + per < N ? n0 + per : N;
    if (n0 >= n1)
        return;
    float *scratch = a->scratch + a->scratch_floats * (size_t)ith;
#ifdef INFLIGHT_HAVE_BLAS
    if (a->M > a->gemv_max_rows) {
        matmul_blas(a, n0, n1, scratch);
        epilogue(a, N, n0, n1);
        return;
    }
#endif
    for (int32_t m0 = 0; m0 < a->M; m0 += 4) {
        int M = a->M - m0 < 4 ? (int)(a->M - m0) : 4;
        matmul_stream(a, m0, M, n0, n1, scratch);
    }
    epilogue(a, N, n0, n1);
}
