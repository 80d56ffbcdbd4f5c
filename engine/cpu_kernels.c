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
 *   MM_BLAS (M > gemv_max_rows): each thread runs single-threaded sgemm on a slice of the N
 *           outputs; weights that are not row-major f32 are unpacked to f32 one cache-sized block
 *           at a time.
 *   MM_KN   (few rows, W (K, N) in IFL_LAYOUT_KN8): each thread streams a contiguous band of W's
 *           8-row panels, every weight read once and in address order, into private (M, N)
 *           partial sums; ifl_matmul_finish_thread adds the partials, the bias and the activation.
 *   MM_NK   (few rows, W (N, K) in IFL_LAYOUT_NK4, the tied lm_head): dot products, each thread
 *           a contiguous range of 4-row panels.
 * 16-bit weights: a 64-byte panel row holds 32 of them. bf16 is widened without shuffles: shifting
 * left by 16 gives the even elements, masking the high halves the odd ones, so the KN accumulators
 * hold each 32-column block as [16 even | 16 odd] (unpermute32 restores the order at the end) and
 * the NK kernel takes x permuted the same way. f16 uses vcvtph2ps on each 32-byte half.
 * Scratch per thread: [partials: max_m x pad32(max_n)] [x padded: max_m x pad32(max_k)]
 * [f32 block]. */

enum {
    MM_BLAS = 0,
    MM_KN = 1,
    MM_NK = 2,
    CONV_FLOATS = 1024 * 1024,   /* 4 MiB of f32: an unpacked weight block for sgemm (OpenBLAS packs
                                    it again; large blocks keep its calls efficient) */
    PF_BYTES = 2048,             /* software prefetch distance of the streaming kernels */
    L2_CHUNK_BYTES = 256 * 1024, /* weights swept by every 4-row group of x while in L2 */
};

static inline int32_t pad32(int32_t n)
{
    return (n + 31) & ~31;
}

static size_t partial_floats(const ifl_matmul_args *a)
{
    size_t p = (size_t)a->max_m * (size_t)pad32(a->max_n);
    return (p + 15) & ~(size_t)15;
}

size_t ifl_matmul_scratch_floats(int32_t max_k, int32_t max_n, int32_t max_m)
{
    ifl_matmul_args a = {.max_m = max_m, .max_n = max_n};
    size_t conv = CONV_FLOATS > (size_t)pad32(max_k) * 32 ? CONV_FLOATS : (size_t)pad32(max_k) * 32;
    size_t n = partial_floats(&a) + (size_t)(max_m > 4 ? max_m : 4) * (size_t)pad32(max_k) + conv;
    return (n + 15) & ~(size_t)15;
}

int32_t ifl_matmul_default_gemv_rows(ifl_dtype dt)
{
#if defined(IFL_AVX512) || !defined(INFLIGHT_HAVE_BLAS)
    /* With AVX-512 the panel kernels beat OpenBLAS 0.3.21 at every size measured, decode through
     * 512-token prefill (docs/perf.md); without BLAS they are all there is. */
    (void)dt;
    return 1 << 30;
#else
    /* Portable kernels: sgemm above a couple of rows. */
    return dt == IFL_DTYPE_F32 ? 2 : 4;
#endif
}

static inline float *thread_scratch(const ifl_matmul_args *a, int ith)
{
    return a->scratch + a->scratch_floats * (size_t)ith;
}
static inline float *thread_xpad(const ifl_matmul_args *a, int ith)
{
    return thread_scratch(a, ith) + partial_floats(a);
}
static inline float *thread_conv(const ifl_matmul_args *a, int ith)
{
    return thread_xpad(a, ith) + (size_t)(a->max_m > 4 ? a->max_m : 4) * (size_t)pad32(a->max_k);
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

/* [c0, c1) of n items for thread ith, in multiples of `align`. */
static void split(int32_t n, int ith, int nth, int32_t align, int32_t *c0, int32_t *c1)
{
    int32_t per = (n + nth - 1) / nth;
    per = (per + align - 1) / align * align;
    *c0 = per * ith < n ? per * ith : n;
    *c1 = *c0 + per < n ? *c0 + per : n;
}

/* x rows (M, ldx), K values each, copied into xp (M, KB * CW) zero padded; bf16 also permuted into
 * [16 even | 16 odd] order per 32 elements (what the bf16 NK kernel multiplies against). */
static void pad_x(float *xp, const float *x, int M, int32_t ldx, int32_t K, int32_t KBCW, int bf16)
{
    for (int m = 0; m < M; m++) {
        float *d = xp + (size_t)m * KBCW;
        const float *s = x + (size_t)m * ldx;
        if (!bf16) {
            memcpy(d, s, (size_t)K * sizeof *d);
            memset(d + K, 0, (size_t)(KBCW - K) * sizeof *d);
            continue;
        }
        for (int32_t k = 0; k < KBCW; k += 32)
            for (int i = 0; i < 16; i++) {
                d[k + i] = k + 2 * i < K ? s[k + 2 * i] : 0.0f;
                d[k + 16 + i] = k + 2 * i + 1 < K ? s[k + 2 * i + 1] : 0.0f;
            }
    }
}

#ifdef IFL_AVX512
/* One 64-byte panel row as f32: v0 = elements 0..15 (f32: all 16), v1 = 16..31 for f16, and for
 * bf16 v0 = the even elements, v1 = the odd ones. */
ALWAYS_INLINE void load_panel_row(const char *p, const ifl_dtype dt, __m512 *v0, __m512 *v1)
{
    if (dt == IFL_DTYPE_F32) {
        *v0 = _mm512_load_ps((const float *)p);
    } else if (dt == IFL_DTYPE_F16) {
        *v0 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)p));
        *v1 = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(p + 32)));
    } else {
        __m512i v = _mm512_load_si512(p);
        *v0 = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        *v1 = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
    }
}

/* acc (M, lda) += x (M, ldx) @ W for the 8-row panels kb0..kb1 of a KN8 matrix with K rows and
 * NB panel columns. Each 512-byte block (8 rows x 64 bytes) is read once, in address order. */
ALWAYS_INLINE void kn8_panels(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                              int32_t kb0, int32_t kb1, const void *W, int32_t NB, const int M,
                              const ifl_dtype dt)
{
    const int cw = dt == IFL_DTYPE_F32 ? 16 : 32, halves = dt == IFL_DTYPE_F32 ? 1 : 2;
    const size_t blk_bytes = 512;
    for (int32_t kb = kb0; kb < kb1; kb++) {
        float xs[4][8];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 8; r++) {
                int32_t k = kb * 8 + r;
                xs[m][r] = k < K ? x[(size_t)m * ldx + k] : 0.0f;
            }
        const char *panel = (const char *)W + (size_t)kb * NB * blk_bytes;
        for (int32_t jb = 0; jb < NB; jb++) {
            const char *blk = panel + (size_t)jb * blk_bytes;
            for (int l = 0; l < 8; l++)
                PREFETCH(blk + PF_BYTES + 64 * l);
            __m512 a[4][2], b[4][2]; /* two chains per accumulator: even and odd rows */
            for (int m = 0; m < M; m++)
                for (int h = 0; h < halves; h++) {
                    a[m][h] = _mm512_load_ps(acc + (size_t)m * lda + (size_t)jb * cw + 16 * h);
                    b[m][h] = _mm512_setzero_ps();
                }
            for (int r = 0; r < 8; r++) {
                __m512 v0, v1 = _mm512_setzero_ps();
                load_panel_row(blk + 64 * r, dt, &v0, &v1);
                for (int m = 0; m < M; m++) {
                    __m512 xb = _mm512_set1_ps(xs[m][r]);
                    if (r & 1) {
                        b[m][0] = _mm512_fmadd_ps(xb, v0, b[m][0]);
                        if (halves == 2)
                            b[m][1] = _mm512_fmadd_ps(xb, v1, b[m][1]);
                    } else {
                        a[m][0] = _mm512_fmadd_ps(xb, v0, a[m][0]);
                        if (halves == 2)
                            a[m][1] = _mm512_fmadd_ps(xb, v1, a[m][1]);
                    }
                }
            }
            for (int m = 0; m < M; m++)
                for (int h = 0; h < halves; h++)
                    _mm512_store_ps(acc + (size_t)m * lda + (size_t)jb * cw + 16 * h,
                                    _mm512_add_ps(a[m][h], b[m][h]));
        }
    }
}

/* y[m][n - g0 * 4] = x[m] . W[n] for the 4-row panels g0..g1 of an NK4 matrix (N rows, KB panel
 * columns); xp is x padded (and for bf16 permuted) by pad_x, KB * CW floats per row. */
ALWAYS_INLINE void nk4_panels(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W,
                              int32_t g0, int32_t g1, int32_t N, const int M, const ifl_dtype dt)
{
    const int cw = dt == IFL_DTYPE_F32 ? 16 : 32, halves = dt == IFL_DTYPE_F32 ? 1 : 2;
    const size_t blk_bytes = 256;
    const size_t ldx = (size_t)KB * cw;
    for (int32_t g = g0; g < g1; g++) {
        const char *prow = (const char *)W + (size_t)g * KB * blk_bytes;
        __m512 acc[4][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm512_setzero_ps();
        for (int32_t kb = 0; kb < KB; kb++) {
            const char *blk = prow + (size_t)kb * blk_bytes;
            for (int l = 0; l < 4; l++)
                PREFETCH(blk + PF_BYTES + 64 * l);
            __m512 w0[4], w1[4];
            for (int r = 0; r < 4; r++) {
                w1[r] = _mm512_setzero_ps();
                load_panel_row(blk + 64 * r, dt, &w0[r], &w1[r]);
            }
            for (int m = 0; m < M; m++) {
                const float *xv = xp + (size_t)m * ldx + (size_t)kb * cw;
                __m512 x0 = _mm512_loadu_ps(xv);
                __m512 x1 = halves == 2 ? _mm512_loadu_ps(xv + 16) : _mm512_setzero_ps();
                for (int r = 0; r < 4; r++) {
                    acc[m][r] = _mm512_fmadd_ps(x0, w0[r], acc[m][r]);
                    if (halves == 2)
                        acc[m][r] = _mm512_fmadd_ps(x1, w1[r], acc[m][r]);
                }
            }
        }
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4 && g * 4 + r < N; r++)
                y[(size_t)m * ldy + (size_t)(g - g0) * 4 + r] = _mm512_reduce_add_ps(acc[m][r]);
    }
}

/* Puts the [even | odd] halves of each 32-column block of p[0..n) back in column order. */
static void unpermute32(float *p, int32_t n)
{
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (int32_t j = 0; j < n; j += 32) {
        __m512 e = _mm512_load_ps(p + j), o = _mm512_load_ps(p + j + 16);
        _mm512_store_ps(p + j, _mm512_permutex2var_ps(e, lo, o));
        _mm512_store_ps(p + j + 16, _mm512_permutex2var_ps(e, hi, o));
    }
}

#define DISPATCH_M(M, CALL)                                                                        \
    do {                                                                                           \
        switch (M) {                                                                               \
        case 1: CALL(1); break;                                                                    \
        case 2: CALL(2); break;                                                                    \
        case 3: CALL(3); break;                                                                    \
        default: CALL(4); break;                                                                   \
        }                                                                                          \
    } while (0)
#else
/* Portable versions over the same layouts (natural element order for every dtype). */
static void kn8_panels_c(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                         int32_t kb0, int32_t kb1, const ifl_mat *W, int M)
{
    int32_t cw = ifl_panel_width(W->dtype), NB = (W->cols + cw - 1) / cw;
    for (int32_t kb = kb0; kb < kb1; kb++)
        for (int32_t jb = 0; jb < NB; jb++) {
            size_t blk = ((size_t)kb * NB + (size_t)jb) * 8 * (size_t)cw;
            for (int r = 0; r < 8 && kb * 8 + r < K; r++) {
                float w[32];
                ifl_convert_to_f32(w, W->dtype,
                                   (const char *)W->data +
                                       (blk + (size_t)r * cw) * ifl_dtype_size(W->dtype),
                                   (size_t)cw);
                for (int m = 0; m < M; m++) {
                    float xv = x[(size_t)m * ldx + kb * 8 + r];
                    float *ap = acc + (size_t)m * lda + (size_t)jb * cw;
                    for (int32_t c = 0; c < cw; c++)
                        ap[c] += xv * w[c];
                }
            }
        }
}

static void nk4_panels_c(float *y, int32_t ldy, const float *xp, int32_t KB, const ifl_mat *W,
                         int32_t g0, int32_t g1, int32_t N, int M)
{
    int32_t cw = ifl_panel_width(W->dtype);
    for (int32_t g = g0; g < g1; g++)
        for (int r = 0; r < 4 && g * 4 + r < N; r++)
            for (int m = 0; m < M; m++) {
                float s = 0;
                for (int32_t kb = 0; kb < KB; kb++) {
                    float w[32];
                    size_t off = (((size_t)g * KB + (size_t)kb) * 4 + (size_t)r) * (size_t)cw;
                    ifl_convert_to_f32(w, W->dtype,
                                       (const char *)W->data + off * ifl_dtype_size(W->dtype),
                                       (size_t)cw);
                    const float *xv = xp + (size_t)m * KB * cw + (size_t)kb * cw;
                    for (int32_t c = 0; c < cw; c++)
                        s += xv[c] * w[c];
                }
                y[(size_t)m * ldy + (size_t)(g - g0) * 4 + r] = s;
            }
}
#endif /* IFL_AVX512 */

/* MM_KN, thread ith: partial sums over its band of 8-row panels, all N columns, every row of x. */
static void matmul_kn(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t K = W->rows, N = W->cols, ldp = pad32(N);
    int32_t kb0, kb1;
    split((K + 7) / 8, ith, nth, 1, &kb0, &kb1);
    float *part = thread_scratch(a, ith);
    memset(part, 0, (size_t)a->M * (size_t)ldp * sizeof *part);
    /* Panel rows in L2-sized chunks; every group of 4 rows of x sweeps a chunk while it is in L2,
     * so the weights come from memory once whatever M is. */
    size_t row_bytes = (size_t)ldp * 8 * ifl_dtype_size(W->dtype);
    int32_t chunk = (int32_t)(L2_CHUNK_BYTES / row_bytes);
    chunk = chunk < 1 ? 1 : chunk;
    for (int32_t c0 = kb0; c0 < kb1; c0 += chunk) {
        int32_t c1 = c0 + chunk < kb1 ? c0 + chunk : kb1;
        for (int32_t m0 = 0; m0 < a->M; m0 += 4) {
            int M = a->M - m0 < 4 ? (int)(a->M - m0) : 4;
            float *acc = part + (size_t)m0 * ldp;
            const float *x = a->x + (size_t)m0 * K;
#ifdef IFL_AVX512
            int32_t cw = ifl_panel_width(W->dtype), NB = (N + cw - 1) / cw;
#define KN_CALL_DT(MM, DT) kn8_panels(acc, ldp, x, K, K, c0, c1, W->data, NB, MM, DT)
#define KN_CALL(MM)                                                                                \
    do {                                                                                           \
        if (W->dtype == IFL_DTYPE_F32)                                                             \
            KN_CALL_DT(MM, IFL_DTYPE_F32);                                                         \
        else if (W->dtype == IFL_DTYPE_F16)                                                        \
            KN_CALL_DT(MM, IFL_DTYPE_F16);                                                         \
        else                                                                                       \
            KN_CALL_DT(MM, IFL_DTYPE_BF16);                                                        \
    } while (0)
            DISPATCH_M(M, KN_CALL);
#undef KN_CALL
#undef KN_CALL_DT
#else
            kn8_panels_c(acc, ldp, x, K, K, c0, c1, W, M);
#endif
        }
    }
}

/* MM_KN, after every thread's matmul_kn: y = [y +] sum of partials + bias, act; columns split
 * across threads in blocks of 32 (the bf16 permutation unit). */
static void matmul_kn_finish(const ifl_matmul_args *a, int ith, int nth)
{
    int32_t N = a->W->cols, ldp = pad32(N);
    int32_t c0, c1;
    split(N, ith, nth, 32, &c0, &c1);
    if (c0 >= c1)
        return;
    int32_t w = c1 - c0, wp = pad32(w);
    for (int32_t m = 0; m < a->M; m++) {
        float *sum = thread_scratch(a, 0) + (size_t)m * ldp + c0;
        for (int t = 1; t < nth; t++) {
            const float *p = thread_scratch(a, t) + (size_t)m * ldp + c0;
            for (int32_t j = 0; j < wp; j++)
                sum[j] += p[j];
        }
#ifdef IFL_AVX512
        if (a->W->dtype == IFL_DTYPE_BF16)
            unpermute32(sum, wp);
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

/* MM_NK, thread ith: its range of 4-row panels of W (N, K); like MM_KN, every group of 4 rows of
 * x sweeps an L2-sized chunk of panels, so W comes from memory once. */
static void matmul_nk(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t K = W->cols, N = W->rows;
    int32_t cw = ifl_panel_width(W->dtype), KB = (K + cw - 1) / cw;
    int32_t g0, g1;
    split((N + 3) / 4, ith, nth, 8, &g0, &g1);
    if (g0 >= g1)
        return;
    int32_t n0 = g0 * 4, n1 = g1 * 4 < N ? g1 * 4 : N;
    float *xp = thread_xpad(a, ith);
    pad_x(xp, a->x, (int)a->M, K, K, KB * cw,
#ifdef IFL_AVX512
          W->dtype == IFL_DTYPE_BF16
#else
          0
#endif
    );
    int32_t chunk = (int32_t)(L2_CHUNK_BYTES / ((size_t)KB * 256));
    chunk = chunk < 1 ? 1 : chunk;
    for (int32_t c0 = g0; c0 < g1; c0 += chunk) {
        int32_t c1 = c0 + chunk < g1 ? c0 + chunk : g1;
        for (int32_t m0 = 0; m0 < a->M; m0 += 4) {
            int M = a->M - m0 < 4 ? (int)(a->M - m0) : 4;
            float *out = a->y + (size_t)m0 * N + (size_t)c0 * 4;
            const float *xm = xp + (size_t)m0 * KB * cw;
#ifdef IFL_AVX512
#define NK_CALL_DT(MM, DT) nk4_panels(out, N, xm, KB, W->data, c0, c1, N, MM, DT)
#define NK_CALL(MM)                                                                                \
    do {                                                                                           \
        if (W->dtype == IFL_DTYPE_F32)                                                             \
            NK_CALL_DT(MM, IFL_DTYPE_F32);                                                         \
        else if (W->dtype == IFL_DTYPE_F16)                                                        \
            NK_CALL_DT(MM, IFL_DTYPE_F16);                                                         \
        else                                                                                       \
            NK_CALL_DT(MM, IFL_DTYPE_BF16);                                                        \
    } while (0)
            DISPATCH_M(M, NK_CALL);
#undef NK_CALL
#undef NK_CALL_DT
#else
            nk4_panels_c(out, N, xm, KB, W, c0, c1, N, M);
#endif
        }
    }
    epilogue(a, N, n0, n1);
}

#ifdef INFLIGHT_HAVE_BLAS
/* One 64-byte panel row (CW elements) as f32 in natural order. */
static inline void panel_row_f32(float *dst, const char *src, ifl_dtype dt)
{
#ifdef IFL_AVX512
    if (dt == IFL_DTYPE_F32) {
        _mm512_storeu_ps(dst, _mm512_load_ps((const float *)src));
    } else if (dt == IFL_DTYPE_F16) {
        _mm512_storeu_ps(dst, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)src)));
        _mm512_storeu_ps(dst + 16, _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(src + 32))));
    } else {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)src));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_load_si256((const __m256i *)(src + 32)));
        _mm512_storeu_ps(dst, _mm512_castsi512_ps(_mm512_slli_epi32(lo, 16)));
        _mm512_storeu_ps(dst + 16, _mm512_castsi512_ps(_mm512_slli_epi32(hi, 16)));
    }
#else
    ifl_convert_to_f32(dst, dt, src, (size_t)ifl_panel_width(dt));
#endif
}

/* Columns [c0, c0 + w) of a (K, N) matrix as row-major f32 (K, ldd); for KN8, c0 and w are
 * multiples of CW except at the matrix's last column (ldd is then w rounded up to CW). */
static void unpack_kn(float *dst, int32_t ldd, const ifl_mat *W, int32_t c0, int32_t w)
{
    size_t es = ifl_dtype_size(W->dtype);
    int32_t K = W->rows;
    if (W->layout == IFL_LAYOUT_ROWS) {
        for (int32_t k = 0; k < K; k++)
            ifl_convert_to_f32(dst + (size_t)k * ldd, W->dtype,
                               (const char *)W->data + ((size_t)k * W->cols + (size_t)c0) * es,
                               (size_t)w);
        return;
    }
    int32_t cw = ifl_panel_width(W->dtype), NB = (W->cols + cw - 1) / cw;
    size_t row_bytes = 64, blk_bytes = 8 * row_bytes;
    for (int32_t kb = 0; kb < (K + 7) / 8; kb++)
        for (int32_t jb = c0 / cw; jb * cw < c0 + w; jb++) {
            const char *blk = (const char *)W->data + ((size_t)kb * NB + (size_t)jb) * blk_bytes;
            for (int r = 0; r < 8 && kb * 8 + r < K; r++)
                panel_row_f32(dst + (size_t)(kb * 8 + r) * ldd + (jb * cw - c0),
                              blk + r * row_bytes, W->dtype);
        }
}

/* Rows [r0, r0 + nr) of an (N, K) matrix as row-major f32 (nr, ldd); r0 a multiple of 4, ldd K
 * rounded up to CW. */
static void unpack_nk(float *dst, int32_t ldd, const ifl_mat *W, int32_t r0, int32_t nr)
{
    if (W->layout == IFL_LAYOUT_ROWS) {
        for (int32_t r = 0; r < nr; r++)
            ifl_mat_row_f32(W, r0 + r, dst + (size_t)r * ldd);
        return;
    }
    int32_t cw = ifl_panel_width(W->dtype), KB = (W->cols + cw - 1) / cw;
    for (int32_t g = r0 / 4; g * 4 < r0 + nr; g++)
        for (int32_t kb = 0; kb < KB; kb++) {
            const char *blk = (const char *)W->data + ((size_t)g * KB + (size_t)kb) * 256;
            for (int r = 0; r < 4; r++) {
                int32_t row = g * 4 + r - r0;
                if (row >= 0 && row < nr)
                    panel_row_f32(dst + (size_t)row * ldd + (size_t)kb * cw, blk + 64 * r,
                                  W->dtype);
            }
        }
}

/* MM_BLAS, thread ith: sgemm on its slice of the N outputs. */
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
    float *conv = thread_conv(a, ith);
    const float *rows = W->dtype != IFL_DTYPE_F32      ? NULL
                        : W->layout == IFL_LAYOUT_ROWS ? W->data
                                                       : W->rows_data;
    if (rows && nk) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, n1 - n0, K, 1.0f, a->x, K,
                    rows + (size_t)n0 * K, K, beta, a->y + n0, N);
    } else if (rows) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, n1 - n0, K, 1.0f, a->x, K,
                    rows + n0, N, beta, a->y + n0, N);
    } else if (nk) {
        int32_t ldd = pad32(K);
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)ldd) & ~3;
        nb = nb < 4 ? 4 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            unpack_nk(conv, ldd, W, c, w);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, w, K, 1.0f, a->x, K, conv, ldd,
                        beta, a->y + c, N);
        }
    } else {
        int32_t nb = (int32_t)(CONV_FLOATS / (size_t)K) & ~31;
        nb = nb < 32 ? 32 : nb;
        for (int32_t c = n0; c < n1; c += nb) {
            int32_t w = n1 - c < nb ? n1 - c : nb;
            unpack_kn(conv, pad32(w), W, c, w);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, w, K, 1.0f, a->x, K, conv,
                        pad32(w), beta, a->y + c, N);
        }
    }
    epilogue(a, N, n0, n1);
}
#endif

int ifl_matmul_plan(ifl_matmul_args *a)
{
    int streaming = a->M <= a->gemv_max_rows;
#ifndef INFLIGHT_HAVE_BLAS
    streaming = 1;
#endif
    if (!streaming) {
        a->mode = MM_BLAS;
        return 0;
    }
    ifl_layout want = a->w_is_nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
    if (a->W->layout != want)
        return -1; /* the streaming kernels read only the panel layouts */
    if (a->w_is_nk && a->accumulate)
        return -1; /* dot products write y; nothing in GPT-2 adds them to it */
    a->mode = a->w_is_nk ? MM_NK : MM_KN;
    return 0;
}

int ifl_matmul_needs_finish(const ifl_matmul_args *a)
{
    return a->mode == MM_KN;
}

void ifl_matmul_thread(const ifl_matmul_args *a, int ith, int nth)
{
    switch (a->mode) {
#ifdef INFLIGHT_HAVE_BLAS
    case MM_BLAS: matmul_blas(a, ith, nth); break;
#endif
    case MM_KN: matmul_kn(a, ith, nth); break;
    default: matmul_nk(a, ith, nth); break;
    }
}

void ifl_matmul_finish_thread(const ifl_matmul_args *a, int ith, int nth)
{
    if (a->mode == MM_KN)
        matmul_kn_finish(a, ith, nth);
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
