/* cpu_kernels.c: matrix products, LayerNorm, GELU, softmax (see cpu_kernels.h).
 *
 * The AVX-512 paths need AVX512F+BW+VL (Skylake-X, Zen 4 and later); elsewhere the portable C
 * loops below compute the same thing more slowly. */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>
#include <sys/mman.h>

#include "threadpool.h"
#include "util.h"

#ifdef INFLIGHT_HAVE_BLAS
#include <cblas.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define IFL_AVX512 1
#include <immintrin.h>
/* Software prefetch of weights a few rows ahead: measured here to raise the streaming kernels from
 * ~30 to ~50 GB/s (docs/perf.md); the hardware prefetchers alone ramp up too slowly. */
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

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

/* gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); tanh(u) = 1 - 2 / (1 + e^2u).
 */
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
    __m512 t =
        _mm512_sub_ps(_mm512_set1_ps(2.0f),
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

/* ---- matrix products ------------------------------------------------------------------------- *
 *
 * Three ways, chosen per call by ifl_matmul_plan:
 *   MM_BLAS     (M > gemv_max_rows): each thread runs single-threaded sgemm on a slice of the N
 *               columns; 16-bit weights are widened to f32 one cache-sized block at a time.
 *   MM_ROWS     (few rows, W is (K, N)): each thread streams a contiguous band of W's K rows, every
 *               row read once, into its own (M, N) partial sums; ifl_matmul_finish adds the
 * partials, the bias and the activation. Long sequential streams keep DRAM busy. MM_NK       (few
 * rows, W is (N, K)): each thread takes a slice of W's rows (dot products). Scratch per thread:
 * [partials: max_m x ldp(max_n)] [x permuted: 4 x max_k] [widened block]. */

enum {
    MM_BLAS = 0,
    MM_ROWS = 1,
    MM_NK = 2,
    CONV_FLOATS = 256 * 1024, /* 1 MiB of f32: a widened weight block for sgemm */
};

static inline int32_t pad32(int32_t n)
{
    return (n + 31) & ~31;
}

static size_t partial_floats(const ifl_matmul_args *a)
{
    size_t p = (size_t)a->max_m * (size_t)pad32(a->max_n);
    return p > 4096 ? p : 4096; /* also the NK path's accumulate chunk (4 x 1024) */
}

size_t ifl_matmul_scratch_floats(int32_t max_k, int32_t max_n, int32_t max_m)
{
    ifl_matmul_args a = {.max_m = max_m, .max_n = max_n};
    size_t conv = CONV_FLOATS > (size_t)max_k * 16 ? CONV_FLOATS : (size_t)max_k * 16;
    size_t n = partial_floats(&a) + 4 * (size_t)pad32(max_k) + conv;
    return (n + 15) & ~(size_t)15;
}

int32_t ifl_matmul_default_gemv_rows(ifl_dtype dt)
{
#if defined(INFLIGHT_HAVE_BLAS)
    return dt == IFL_DTYPE_F32 ? 2 : 4;
#else
    (void)dt;
    return 1 << 30; /* no BLAS: the streaming kernels do everything */
#endif
}

static inline float *thread_scratch(const ifl_matmul_args *a, int ith)
{
    return a->scratch + a->scratch_floats * (size_t)ith;
}
static inline float *thread_xperm(const ifl_matmul_args *a, int ith)
{
    return thread_scratch(a, ith) + partial_floats(a);
}
static inline float *thread_conv(const ifl_matmul_args *a, int ith)
{
    return thread_xperm(a, ith) + 4 * (size_t)pad32(a->max_k);
}

/* Bias and activation over rows 0..M-1, columns [n0, n1) of y. */
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

/* [c0, c1) of n columns for thread ith, in multiples of `align`. */
static void split(int32_t n, int ith, int nth, int32_t align, int32_t *c0, int32_t *c1)
{
    int32_t per = (n + nth - 1) / nth;
    per = (per + align - 1) / align * align;
    *c0 = per * ith < n ? per * ith : n;
    *c1 = *c0 + per < n ? *c0 + per : n;
}

#ifdef IFL_AVX512
static inline __mmask16 mask16(int32_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}
static inline __mmask32 mask32(int32_t left)
{
    return left >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << left) - 1);
}

/* 16 weights at element index i as f32. */
ALWAYS_INLINE __m512 load_w16(const void *base, size_t i, ifl_dtype dt, __mmask16 m)
{
    if (dt == IFL_DTYPE_F32)
        return _mm512_maskz_loadu_ps(m, (const float *)base + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)base + i);
    if (dt == IFL_DTYPE_F16)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* acc (M, lda) += x (M, ldx)[:, 0:K] @ W (K rows of N elements); f32 or f16 weights. Rows of W are
 * consumed 4 at a time, each read exactly once, front to back. */
ALWAYS_INLINE void kn_rows(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                           const void *W, int32_t N, const int M, const ifl_dtype dt)
{
    size_t es = ifl_dtype_size(dt);
    int32_t k = 0;
    for (; k + 4 <= K; k += 4) {
        __m512 xb[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                xb[m][r] = _mm512_set1_ps(x[(size_t)m * ldx + k + r]);
        size_t row = (size_t)k * N;
        int pf = k + 8 <= K;
        for (int32_t j = 0; j < N; j += 16) {
            __mmask16 mk = mask16(N - j);
            if (pf && ((size_t)j * es) % 64 == 0) {
                const char *b = (const char *)W + (row + (size_t)j) * es;
                size_t rb = (size_t)N * es;
                PREFETCH(b + 4 * rb);
                PREFETCH(b + 5 * rb);
                PREFETCH(b + 6 * rb);
                PREFETCH(b + 7 * rb);
            }
            __m512 w0 = load_w16(W, row + (size_t)j, dt, mk);
            __m512 w1 = load_w16(W, row + (size_t)N + (size_t)j, dt, mk);
            __m512 w2 = load_w16(W, row + 2 * (size_t)N + (size_t)j, dt, mk);
            __m512 w3 = load_w16(W, row + 3 * (size_t)N + (size_t)j, dt, mk);
            for (int m = 0; m < M; m++) {
                float *ap = acc + (size_t)m * lda + j;
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
        size_t row = (size_t)k * N;
        for (int32_t j = 0; j < N; j += 16) {
            __m512 w0 = load_w16(W, row + (size_t)j, dt, mask16(N - j));
            for (int m = 0; m < M; m++) {
                float *ap = acc + (size_t)m * lda + j;
                _mm512_store_ps(ap, _mm512_fmadd_ps(_mm512_set1_ps(x[(size_t)m * ldx + k]), w0,
                                                    _mm512_load_ps(ap)));
            }
        }
    }
}

/* kn_rows for a single row of x (f32 or f16 weights), 8 rows of W per pass: more streams in
 * flight and half the accumulator traffic. */
ALWAYS_INLINE void kn_rows_m1(float *acc, const float *x, int32_t K, const void *W, int32_t N,
                              const ifl_dtype dt)
{
    size_t es = ifl_dtype_size(dt);
    int32_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m512 xb[8];
        for (int r = 0; r < 8; r++)
            xb[r] = _mm512_set1_ps(x[k + r]);
        size_t row = (size_t)k * N;
        int pf = k + 16 <= K;
        for (int32_t j = 0; j < N; j += 16) {
            __mmask16 mk = mask16(N - j);
            __m512 v = _mm512_load_ps(acc + j), v2 = _mm512_setzero_ps();
            int pf_here = pf && ((size_t)j * es) % 64 == 0;
            for (int r = 0; r < 8; r += 2) {
                if (pf_here) {
                    PREFETCH((const char *)W + (row + (size_t)(r + 8) * N + (size_t)j) * es);
                    PREFETCH((const char *)W + (row + (size_t)(r + 9) * N + (size_t)j) * es);
                }
                v = _mm512_fmadd_ps(xb[r], load_w16(W, row + (size_t)r * N + (size_t)j, dt, mk), v);
                v2 = _mm512_fmadd_ps(
                    xb[r + 1], load_w16(W, row + (size_t)(r + 1) * N + (size_t)j, dt, mk), v2);
            }
            _mm512_store_ps(acc + j, _mm512_add_ps(v, v2));
        }
    }
    if (k < K)
        kn_rows(acc, 0, x + k, 0, K - k, (const char *)W + (size_t)k * N * es, N, 1, dt);
}

/* The bf16 version: 32 weights per 64-byte load, widened without cross-lane shuffles: even columns
 * are the low halves shifted up, odd ones the high halves masked. Each 32-column block of acc holds
 * [16 even | 16 odd] columns; unpermute32 restores the order. */
ALWAYS_INLINE void kn_rows_bf16(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                                const void *W, int32_t N, const int M)
{
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    const uint16_t *Wb = W;
    int32_t k = 0;
    for (; k + 4 <= K; k += 4) {
        __m512 xb[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                xb[m][r] = _mm512_set1_ps(x[(size_t)m * ldx + k + r]);
        const uint16_t *row = Wb + (size_t)k * N;
        int pf = k + 8 <= K;
        for (int32_t j = 0; j < N; j += 32) {
            __mmask32 mk = mask32(N - j);
            if (pf) { /* the next 4 rows at this column: hardware prefetch alone falls short */
                PREFETCH(row + 4 * (size_t)N + j);
                PREFETCH(row + 5 * (size_t)N + j);
                PREFETCH(row + 6 * (size_t)N + j);
                PREFETCH(row + 7 * (size_t)N + j);
            }
            __m512i v0 = _mm512_maskz_loadu_epi16(mk, row + j);
            __m512i v1 = _mm512_maskz_loadu_epi16(mk, row + (size_t)N + j);
            __m512i v2 = _mm512_maskz_loadu_epi16(mk, row + 2 * (size_t)N + j);
            __m512i v3 = _mm512_maskz_loadu_epi16(mk, row + 3 * (size_t)N + j);
            __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
            __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
            __m512 e2 = _mm512_castsi512_ps(_mm512_slli_epi32(v2, 16));
            __m512 e3 = _mm512_castsi512_ps(_mm512_slli_epi32(v3, 16));
            __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi_mask));
            __m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(v1, hi_mask));
            __m512 o2 = _mm512_castsi512_ps(_mm512_and_si512(v2, hi_mask));
            __m512 o3 = _mm512_castsi512_ps(_mm512_and_si512(v3, hi_mask));
            for (int m = 0; m < M; m++) {
                float *ap = acc + (size_t)m * lda + j;
                __m512 ve = _mm512_load_ps(ap), vo = _mm512_load_ps(ap + 16);
                ve = _mm512_fmadd_ps(xb[m][0], e0, ve);
                vo = _mm512_fmadd_ps(xb[m][0], o0, vo);
                ve = _mm512_fmadd_ps(xb[m][1], e1, ve);
                vo = _mm512_fmadd_ps(xb[m][1], o1, vo);
                ve = _mm512_fmadd_ps(xb[m][2], e2, ve);
                vo = _mm512_fmadd_ps(xb[m][2], o2, vo);
                ve = _mm512_fmadd_ps(xb[m][3], e3, ve);
                vo = _mm512_fmadd_ps(xb[m][3], o3, vo);
                _mm512_store_ps(ap, ve);
                _mm512_store_ps(ap + 16, vo);
            }
        }
    }
    for (; k < K; k++) {
        const uint16_t *row = Wb + (size_t)k * N;
        for (int32_t j = 0; j < N; j += 32) {
            __m512i v0 = _mm512_maskz_loadu_epi16(mask32(N - j), row + j);
            __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
            __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(v0, hi_mask));
            for (int m = 0; m < M; m++) {
                float *ap = acc + (size_t)m * lda + j;
                __m512 xv = _mm512_set1_ps(x[(size_t)m * ldx + k]);
                _mm512_store_ps(ap, _mm512_fmadd_ps(xv, e0, _mm512_load_ps(ap)));
                _mm512_store_ps(ap + 16, _mm512_fmadd_ps(xv, o0, _mm512_load_ps(ap + 16)));
            }
        }
    }
}

/* kn_rows_bf16 for a single row of x, 8 rows of W per pass (more streams in flight, half the
 * accumulator traffic). */
static void kn_rows_bf16_m1(float *acc, const float *x, int32_t K, const void *W, int32_t N)
{
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    const uint16_t *Wb = W;
    int32_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m512 xb[8];
        for (int r = 0; r < 8; r++)
            xb[r] = _mm512_set1_ps(x[k + r]);
        const uint16_t *row = Wb + (size_t)k * N;
        int pf = k + 16 <= K;
        for (int32_t j = 0; j < N; j += 32) {
            __mmask32 mk = mask32(N - j);
            __m512 ve = _mm512_load_ps(acc + j), vo = _mm512_load_ps(acc + j + 16);
            __m512 ve2 = _mm512_setzero_ps(), vo2 = _mm512_setzero_ps();
            for (int r = 0; r < 8; r += 2) {
                if (pf) {
                    PREFETCH(row + (size_t)(r + 8) * N + j);
                    PREFETCH(row + (size_t)(r + 9) * N + j);
                }
                __m512i v0 = _mm512_maskz_loadu_epi16(mk, row + (size_t)r * N + j);
                __m512i v1 = _mm512_maskz_loadu_epi16(mk, row + (size_t)(r + 1) * N + j);
                ve = _mm512_fmadd_ps(xb[r], _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16)), ve);
                vo = _mm512_fmadd_ps(xb[r], _mm512_castsi512_ps(_mm512_and_si512(v0, hi_mask)), vo);
                ve2 =
                    _mm512_fmadd_ps(xb[r + 1], _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16)), ve2);
                vo2 = _mm512_fmadd_ps(xb[r + 1], _mm512_castsi512_ps(_mm512_and_si512(v1, hi_mask)),
                                      vo2);
            }
            _mm512_store_ps(acc + j, _mm512_add_ps(ve, ve2));
            _mm512_store_ps(acc + j + 16, _mm512_add_ps(vo, vo2));
        }
    }
    if (k < K)
        kn_rows_bf16(acc, 0, x + k, 0, K - k, Wb + (size_t)k * N, N, 1);
}

/* Puts the [even | odd] halves of each 32-column block of p[0..n) back in column order. */
static void unpermute32(float *p, int32_t n)
{
    const __m512i lo_idx = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi_idx =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (int32_t j = 0; j < n; j += 32) {
        __m512 e = _mm512_load_ps(p + j), o = _mm512_load_ps(p + j + 16);
        _mm512_store_ps(p + j, _mm512_permutex2var_ps(e, lo_idx, o));
        _mm512_store_ps(p + j + 16, _mm512_permutex2var_ps(e, hi_idx, o));
    }
}

/* y[m][n - n0] = x[m] . W[n] for rows n in [n0, n1) of W (N, K), 4 rows at a time. */
ALWAYS_INLINE void nk_dots(float *y, int32_t ldy, const float *x, int32_t K, const void *W,
                           int32_t n0, int32_t n1, const int M, const ifl_dtype dt)
{
    for (int32_t n = n0; n < n1; n += 4) {
        int rows = n1 - n < 4 ? n1 - n : 4;
        __m512 acc[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_setzero_ps();
        size_t base[4]; /* tail: repeat the last row, its result unused */
        for (int r = 0; r < 4; r++)
            base[r] = (size_t)(n + (r < rows ? r : rows - 1)) * K;
        size_t es = ifl_dtype_size(dt);
        for (int32_t k = 0; k < K; k += 16) {
            __mmask16 mk = mask16(K - k);
            __m512 wr[4];
            if (((size_t)k * es) % 64 == 0)
                for (int r = 0; r < 4; r++) /* the same place in the next group of 4 rows */
                    PREFETCH((const char *)W + (base[r] + 4 * (size_t)K + (size_t)k) * es);
            for (int r = 0; r < 4; r++)
                wr[r] = load_w16(W, base[r] + (size_t)k, dt, mk);
            for (int m = 0; m < M; m++) {
                __m512 xv = _mm512_maskz_loadu_ps(mk, x + (size_t)m * K + k);
                for (int r = 0; r < 4; r++)
                    acc[m][r] = _mm512_fmadd_ps(xv, wr[r], acc[m][r]);
            }
        }
        for (int m = 0; m < M; m++)
            for (int r = 0; r < rows; r++)
                y[(size_t)m * ldy + (n - n0) + r] = _mm512_reduce_add_ps(acc[m][r]);
    }
}

/* bf16 dot products: 32 weights per load split even/odd; xp holds x permuted the same way per 32
 * elements (permute_even_odd), so no shuffles are needed. K must be a multiple of 32. */
ALWAYS_INLINE void nk_dots_bf16(float *y, int32_t ldy, const float *xp, int32_t K, const void *W,
                                int32_t n0, int32_t n1, const int M)
{
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    const uint16_t *Wb = W;
    for (int32_t n = n0; n < n1; n += 4) {
        int rows = n1 - n < 4 ? n1 - n : 4;
        __m512 acc[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_setzero_ps();
        const uint16_t *rp[4];
        for (int r = 0; r < 4; r++)
            rp[r] = Wb + (size_t)(n + (r < rows ? r : rows - 1)) * K;
        for (int32_t k = 0; k < K; k += 32) {
            __m512 e[4], o[4];
            for (int r = 0; r < 4; r++) {
                const uint16_t *p = rp[r] + k;
                PREFETCH(p + 4 * (size_t)K);
                __m512i v = _mm512_loadu_si512(p);
                e[r] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
                o[r] = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
            }
            for (int m = 0; m < M; m++) {
                __m512 xe = _mm512_loadu_ps(xp + (size_t)m * K + k);
                __m512 xo = _mm512_loadu_ps(xp + (size_t)m * K + k + 16);
                for (int r = 0; r < 4; r++)
                    acc[m][r] = _mm512_fmadd_ps(xo, o[r], _mm512_fmadd_ps(xe, e[r], acc[m][r]));
            }
        }
        for (int m = 0; m < M; m++)
            for (int r = 0; r < rows; r++)
                y[(size_t)m * ldy + (n - n0) + r] = _mm512_reduce_add_ps(acc[m][r]);
    }
}

static void permute_even_odd(float *xp, const float *x, int M, int32_t K)
{
    for (int m = 0; m < M; m++)
        for (int32_t k = 0; k < K; k += 32)
            for (int i = 0; i < 16; i++) {
                xp[(size_t)m * K + k + i] = x[(size_t)m * K + k + 2 * i];
                xp[(size_t)m * K + k + 16 + i] = x[(size_t)m * K + k + 2 * i + 1];
            }
}
#endif /* IFL_AVX512 */

/* Portable versions (any dtype, any M). */
__attribute__((unused)) static void kn_rows_c(float *acc, int32_t lda, const float *x, int32_t ldx,
                                              int32_t K, const ifl_mat *W, int32_t k0, int M)
{
    int32_t N = W->cols;
    for (int32_t k = 0; k < K; k++) {
        size_t row = (size_t)(k0 + k) * N;
        for (int m = 0; m < M; m++) {
            float xv = x[(size_t)m * ldx + k];
            float *ap = acc + (size_t)m * lda;
            if (W->dtype == IFL_DTYPE_F32) {
                const float *wp = (const float *)W->data + row;
                for (int32_t j = 0; j < N; j++)
                    ap[j] += xv * wp[j];
            } else {
                for (int32_t j = 0; j < N; j++)
                    ap[j] += xv * ifl_load_f32(W->dtype, W->data, row + (size_t)j);
            }
        }
    }
}

__attribute__((unused)) static void nk_dots_c(float *y, int32_t ldy, const float *x, int32_t K,
                                              const ifl_mat *W, int32_t n0, int32_t n1, int M)
{
    for (int32_t n = n0; n < n1; n++)
        for (int m = 0; m < M; m++) {
            float s = 0;
            for (int32_t k = 0; k < K; k++)
                s += x[(size_t)m * K + k] *
                     ifl_load_f32(W->dtype, W->data, (size_t)n * K + (size_t)k);
            y[(size_t)m * ldy + (n - n0)] = s;
        }
}

/* MM_ROWS, thread ith: partial sums of its band of K rows, all N columns, every row of x. */
static void matmul_rows(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t K = W->rows, N = W->cols, ldp = pad32(N);
    int32_t k0, k1;
    split(K, ith, nth, 4, &k0, &k1);
    float *part = thread_scratch(a, ith);
    memset(part, 0, (size_t)a->M * (size_t)ldp * sizeof *part);
    if (k0 >= k1)
        return;
#ifdef IFL_AVX512
    const void *Wk = (const char *)W->data + (size_t)k0 * N * ifl_dtype_size(W->dtype);
#endif
    for (int32_t m0 = 0; m0 < a->M; m0 += 4) {
        int M = a->M - m0 < 4 ? (int)(a->M - m0) : 4;
        float *acc = part + (size_t)m0 * ldp;
        const float *x = a->x + (size_t)m0 * K + k0;
#ifdef IFL_AVX512
        if (W->dtype == IFL_DTYPE_BF16) {
            switch (M) {
            case 1: kn_rows_bf16_m1(acc, x, k1 - k0, Wk, N); break;
            case 2: kn_rows_bf16(acc, ldp, x, K, k1 - k0, Wk, N, 2); break;
            case 3: kn_rows_bf16(acc, ldp, x, K, k1 - k0, Wk, N, 3); break;
            default: kn_rows_bf16(acc, ldp, x, K, k1 - k0, Wk, N, 4); break;
            }
        } else if (W->dtype == IFL_DTYPE_F16) {
            switch (M) {
            case 1: kn_rows_m1(acc, x, k1 - k0, Wk, N, IFL_DTYPE_F16); break;
            case 2: kn_rows(acc, ldp, x, K, k1 - k0, Wk, N, 2, IFL_DTYPE_F16); break;
            case 3: kn_rows(acc, ldp, x, K, k1 - k0, Wk, N, 3, IFL_DTYPE_F16); break;
            default: kn_rows(acc, ldp, x, K, k1 - k0, Wk, N, 4, IFL_DTYPE_F16); break;
            }
        } else {
            switch (M) {
            case 1: kn_rows_m1(acc, x, k1 - k0, Wk, N, IFL_DTYPE_F32); break;
            case 2: kn_rows(acc, ldp, x, K, k1 - k0, Wk, N, 2, IFL_DTYPE_F32); break;
            case 3: kn_rows(acc, ldp, x, K, k1 - k0, Wk, N, 3, IFL_DTYPE_F32); break;
            default: kn_rows(acc, ldp, x, K, k1 - k0, Wk, N, 4, IFL_DTYPE_F32); break;
            }
        }
#else
        kn_rows_c(acc, ldp, x, K, k1 - k0, W, k0, M);
#endif
    }
}

/* MM_ROWS, after every thread's matmul_rows: y = [y +] sum of partials + bias, act; columns split
 * across threads in blocks of 32 (the bf16 permutation unit). */
static void matmul_rows_finish(const ifl_matmul_args *a, int ith, int nth)
{
    int32_t N = a->W->cols, ldp = pad32(N);
    int32_t c0, c1;
    split(N, ith, nth, 32, &c0, &c1);
    if (c0 >= c1)
        return;
    int32_t w = c1 - c0;
    for (int32_t m = 0; m < a->M; m++) {
        float *sum = thread_scratch(a, 0) + (size_t)m * ldp + c0;
        for (int t = 1; t < nth; t++) {
            const float *p = thread_scratch(a, t) + (size_t)m * ldp + c0;
            for (int32_t j = 0; j < pad32(w) && c0 + j < ldp; j++)
                sum[j] += p[j];
        }
#ifdef IFL_AVX512
        if (a->W->dtype == IFL_DTYPE_BF16)
            unpermute32(sum, pad32(w) < ldp - c0 ? pad32(w) : ldp - c0);
#endif
        float *y = a->y + (size_t)m * N + c0;
        if (a->accumulate)
            for (int32_t j = 0; j < w; j++)
                y[j] += sum[j];
        else
            memcpy(y, sum, (size_t)w * sizeof *y);
    }
    epilogue(a, N, c0, c1);
}

/* MM_NK, thread ith: its slice of W's rows; x is (M, K) with M <= 4 per pass. */
static void matmul_nk(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t K = W->cols, N = W->rows;
    int32_t n0, n1;
    split(N, ith, nth, 32, &n0, &n1);
    if (n0 >= n1)
        return;
    for (int32_t m0 = 0; m0 < a->M; m0 += 4) {
        int M = a->M - m0 < 4 ? (int)(a->M - m0) : 4;
        const float *x = a->x + (size_t)m0 * K;
        float *y = a->y + (size_t)m0 * N;
        /* Accumulating (never needed by GPT-2, kept correct): dots into scratch, then add. */
        float *out = a->accumulate ? thread_scratch(a, ith) : y + n0;
        int32_t ldo = a->accumulate ? 1024 : N;
        for (int32_t c = n0; c < n1; c += a->accumulate ? 1024 : n1 - n0) {
            int32_t c1 = a->accumulate && c + 1024 < n1 ? c + 1024 : n1;
            float *o = a->accumulate ? out : y + c;
#ifdef IFL_AVX512
            if (W->dtype == IFL_DTYPE_BF16 && K % 32 == 0) {
                float *xp = thread_xperm(a, ith);
                permute_even_odd(xp, x, M, K);
                switch (M) {
                case 1: nk_dots_bf16(o, ldo, xp, K, W->data, c, c1, 1); break;
                case 2: nk_dots_bf16(o, ldo, xp, K, W->data, c, c1, 2); break;
                case 3: nk_dots_bf16(o, ldo, xp, K, W->data, c, c1, 3); break;
                default: nk_dots_bf16(o, ldo, xp, K, W->data, c, c1, 4); break;
                }
            } else {
#define NK_CASE(MM)                                                                                \
    case MM:                                                                                       \
        if (W->dtype == IFL_DTYPE_F32)                                                             \
            nk_dots(o, ldo, x, K, W->data, c, c1, MM, IFL_DTYPE_F32);                              \
        else if (W->dtype == IFL_DTYPE_F16)                                                        \
            nk_dots(o, ldo, x, K, W->data, c, c1, MM, IFL_DTYPE_F16);                              \
        else                                                                                       \
            nk_dots(o, ldo, x, K, W->data, c, c1, MM, IFL_DTYPE_BF16);                             \
        break;
                switch (M) {
                    NK_CASE(1)
                    NK_CASE(2)
                    NK_CASE(3)
                default: NK_CASE(4)
                }
#undef NK_CASE
            }
#else
            nk_dots_c(o, ldo, x, K, W, c, c1, M);
#endif
            if (a->accumulate)
                for (int m = 0; m < M; m++)
                    for (int32_t n = c; n < c1; n++)
                        y[(size_t)m * N + n] += o[(size_t)m * ldo + (n - c)];
        }
    }
    epilogue(a, N, n0, n1);
}

#ifdef INFLIGHT_HAVE_BLAS
/* MM_BLAS, thread ith: sgemm on its slice of the N columns. */
static void matmul_blas(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t M = a->M;
    int nk = a->w_is_nk;
    int32_t K = nk ? W->cols : W->rows, N = nk ? W->rows : W->cols;
    int32_t n0, n1;
    split(N, ith, nth, 32, &n0, &n1);
    if (n0 >= n1)
        return;
    float beta = a->accumulate ? 1.0f : 0.0f;
    size_t es = ifl_dtype_size(W->dtype);
    float *conv = thread_conv(a, ith);
    if (W->dtype == IFL_DTYPE_F32) {
        if (nk)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, a->x, K,
                        (const float *)W->data + (size_t)n0 * K, K, beta, a->y + n0, N);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, n1 - n0, K, 1.0f, a->x, K,
                        (const float *)W->data + n0, N, beta, a->y + n0, N);
    } else if (nk) {
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)K);
        nb = nb < 16 ? 16 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            ifl_convert_to_f32(conv, W->dtype, (const char *)W->data + (size_t)c * K * es,
                               (size_t)w * K);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, w, K, 1.0f, a->x, K, conv, K,
                        beta, a->y + c, N);
        }
    } else {
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)K) & ~15;
        nb = nb < 16 ? 16 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            for (int32_t k = 0; k < K; k++)
                ifl_convert_to_f32(conv + (size_t)k * w, W->dtype,
                                   (const char *)W->data + ((size_t)k * N + (size_t)c) * es,
                                   (size_t)w);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, w, K, 1.0f, a->x, K, conv, w,
                        beta, a->y + c, N);
        }
    }
    epilogue(a, N, n0, n1);
}
#endif

void ifl_matmul_plan(ifl_matmul_args *a)
{
    int streaming = a->M <= a->gemv_max_rows;
#ifndef INFLIGHT_HAVE_BLAS
    streaming = 1;
#endif
    if (!streaming)
        a->mode = MM_BLAS;
    else
        a->mode = a->w_is_nk ? MM_NK : MM_ROWS;
}

int ifl_matmul_needs_finish(const ifl_matmul_args *a)
{
    return a->mode == MM_ROWS;
}

void ifl_matmul_thread(const ifl_matmul_args *a, int ith, int nth)
{
    switch (a->mode) {
#ifdef INFLIGHT_HAVE_BLAS
    case MM_BLAS: matmul_blas(a, ith, nth); break;
#endif
    case MM_ROWS: matmul_rows(a, ith, nth); break;
    default: matmul_nk(a, ith, nth); break;
    }
}

void ifl_matmul_finish_thread(const ifl_matmul_args *a, int ith, int nth)
{
    if (a->mode == MM_ROWS)
        matmul_rows_finish(a, ith, nth);
}

/* ---- memory bandwidth probe ------------------------------------------------------------------ */

typedef struct {
    const float *p;
    size_t n;
    float sums[64];
} probe_ctx;

static void probe_task(void *c_, int ith, int nth)
{
    probe_ctx *c = c_;
    size_t per = c->n / (size_t)nth / 64 * 64;
    const float *p = c->p + per * (size_t)ith;
    float s = 0;
#ifdef IFL_AVX512
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < per; i += 64) {
        if (i + 1024 < per)
            for (int j = 0; j < 64; j += 16)
                PREFETCH(p + i + 1024 + j);
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
    for (size_t i = 0; i < per; i += 16) /* one load per cache line suffices to stream it */
        s += p[i];
#endif
    c->sums[ith % 64] = s;
}

double ifl_memory_read_gbs(ifl_threadpool *tp, size_t bytes, int reps)
{
    float *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++)
        p[i] = 1.0f;
    probe_ctx c = {.p = p, .n = n};
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = ifl_now_s();
        ifl_threadpool_run(tp, probe_task, &c);
        t = ifl_now_s() - t;
        best = t < best ? t : best;
    }
    munmap(p, bytes);
    return (double)(n / 64 * 64) * sizeof(float) / best / 1e9;
}
