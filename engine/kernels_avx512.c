/* kernels_avx512.c: the avx512 kernel family (AVX-512 F/BW/VL with FMA and F16C: Skylake-X, Zen 4
 * and later). Compiled with those target flags (CMakeLists.txt) and run only where
 * ifl_isa_supported(IFL_ISA_AVX512) said the CPU has them.
 *
 * The panel kernels stream every weight once per call at any number of rows (they beat OpenBLAS at
 * every size measured, decode through 512-token prefill: docs/perf.md), so this family has no
 * separate register-blocked product. bf16 is widened without shuffles: shifting a 64-byte row
 * left by 16 gives the even elements, masking the high halves the odd ones, so partial sums hold
 * each 32 columns as [16 even | 16 odd] (bf16_group 32); f16 uses vcvtph2ps on each 32-byte half. */
#include "cpu_kernels_isa.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

/* Software prefetch of weights a few rows ahead: measured to raise the streaming kernels from
 * ~30 to ~50 GB/s (docs/perf.md); the hardware prefetchers alone ramp up too slowly. */
#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
enum { PF_BYTES = 2048 };

IFL_ALWAYS_INLINE __m512 exp16(__m512 x)
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

static void exp_avx512(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, exp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

IFL_ALWAYS_INLINE __m512 gelu16(__m512 x)
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

static void gelu_tanh_avx512(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

/* One 64-byte panel row as f32: v0 = elements 0..15 (f32: all 16), v1 = 16..31 for f16, and for
 * bf16 v0 = the even elements, v1 = the odd ones. */
IFL_ALWAYS_INLINE void load_panel_row(const char *p, const ifl_dtype dt, __m512 *v0, __m512 *v1)
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

/* Each 512-byte block (8 rows x 64 bytes) is read once, in address order. Every sum is one chain
 * of fused multiply-adds in k order, so a row's result does not depend on how many rows share the
 * call (the independent chains are the columns and the rows). */
IFL_ALWAYS_INLINE void kn8_panels(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                                  int32_t kb0, int32_t kb1, const void *W, int32_t NB, int32_t jb0,
                                  int32_t jb1, const int M, const ifl_dtype dt)
{
    const int cw = dt == IFL_DTYPE_F32 ? 16 : 32, halves = dt == IFL_DTYPE_F32 ? 1 : 2;
    const size_t blk_bytes = 512;
    for (int32_t kb = kb0; kb < kb1; kb++) {
        float xs[8][8];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 8; r++) {
                int32_t k = kb * 8 + r;
                xs[m][r] = k < K ? x[(size_t)m * ldx + k] : 0.0f;
            }
        const char *panel = (const char *)W + (size_t)kb * NB * blk_bytes;
        /* one row of 16-bit weights: the avx2 family's one-row pattern (see its PF_BYTES note),
         * the row's first lines as it starts, then the next block's each block (docs/perf.md,
         * 2026-12-06: the (K, N) phases lower in 8 of 10 rounds) */
        const int row1 = M == 1 && halves == 2;
        if (row1)
            for (int l = 0; l < 8; l++)
                PREFETCH(panel + (size_t)jb0 * blk_bytes + PF_BYTES + 64 * l);
        /* f32: two panels at once (16-bit: the two halves of one), so that every row of x keeps
         * two independent chains going; each sum is still its own chain in k order */
        for (int32_t jb = jb0; jb < jb1; jb += halves == 1 ? 2 : 1) {
            const char *blk = panel + (size_t)jb * blk_bytes;
            const int two = halves == 2 || jb + 1 < jb1;
            for (int l = 0; l < (halves == 1 && two ? 16 : 8); l++)
                PREFETCH(blk + (row1 ? blk_bytes : 0) + PF_BYTES + 64 * l);
            __m512 a[8][2];
            for (int m = 0; m < M; m++) {
                a[m][0] = _mm512_load_ps(acc + (size_t)m * lda + (size_t)jb * cw);
                a[m][1] = two ? _mm512_load_ps(acc + (size_t)m * lda + (size_t)jb * cw + 16)
                              : _mm512_setzero_ps();
            }
            for (int r = 0; r < 8; r++) {
                __m512 v0, v1 = _mm512_setzero_ps();
                if (halves == 1) {
                    v0 = _mm512_load_ps((const float *)(blk + 64 * r));
                    if (two)
                        v1 = _mm512_load_ps((const float *)(blk + blk_bytes + 64 * r));
                } else {
                    load_panel_row(blk + 64 * r, dt, &v0, &v1);
                }
                for (int m = 0; m < M; m++) {
                    __m512 xb = _mm512_set1_ps(xs[m][r]);
                    a[m][0] = _mm512_fmadd_ps(xb, v0, a[m][0]);
                    if (two)
                        a[m][1] = _mm512_fmadd_ps(xb, v1, a[m][1]);
                }
            }
            for (int m = 0; m < M; m++) {
                _mm512_store_ps(acc + (size_t)m * lda + (size_t)jb * cw, a[m][0]);
                if (two)
                    _mm512_store_ps(acc + (size_t)m * lda + (size_t)jb * cw + 16, a[m][1]);
            }
        }
    }
}

/* y[m][n - g0 * 4] = x[m] . W[n] over 4-row panels g0..g1, up to four rows of x. For one row the
 * prefetch is the avx2 family's (see its nk4_panels): a panel's first lines as it starts, which
 * made the one-row lm_head faster here too (docs/perf.md, 2026-12-06), then the next block's. */
IFL_ALWAYS_INLINE void nk4_panels(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W,
                                  int32_t g0, int32_t g1, int32_t N, const int M,
                                  const ifl_dtype dt)
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
        if (M == 1)
            for (int l = 0; l < 4; l++)
                PREFETCH(prow + PF_BYTES + 64 * l);
        for (int32_t kb = 0; kb < KB; kb++) {
            const char *blk = prow + (size_t)kb * blk_bytes;
            for (int l = 0; l < 4; l++)
                PREFETCH(blk + (M == 1 ? blk_bytes : 0) + PF_BYTES + 64 * l);
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

/* The calls with M as a constant (and BY_DTYPE, the dtype), each combination its own loop nest:
 * BY_M for M in 1..4 (the NK kernel), BY_M8 for 1..8 (the KN kernel). */
#define M_CASES_1_3(CALL)                                                                          \
    case 1: BY_DTYPE(CALL, 1); break;                                                              \
    case 2: BY_DTYPE(CALL, 2); break;                                                              \
    case 3: BY_DTYPE(CALL, 3); break
#define BY_M(CALL)                                                                                 \
    do {                                                                                           \
        switch (M) {                                                                               \
            M_CASES_1_3(CALL);                                                                     \
        default: BY_DTYPE(CALL, 4); break;                                                         \
        }                                                                                          \
    } while (0)

/* Up to 8 rows of x per pass over W (16 accumulators, the weights' two rows and a broadcast fit the
 * 32 registers) for products of at most 8 rows: batch 8 then streams W once instead of twice (from
 * memory, then from L2 for rows 4-7), 322-328 -> 383-391 tok/s f32 on a Zen 4. Larger products
 * keep groups of 4: there 8 rows made the 512-token prefill slower (0.53-0.55 -> 0.62-0.64 s f32),
 * the accumulators of 8 rows (M x N floats loaded and stored per 8 k) no longer near L1. */
#define BY_M8(CALL)                                                                                \
    do {                                                                                           \
        switch (M) {                                                                               \
            M_CASES_1_3(CALL);                                                                     \
        case 4: BY_DTYPE(CALL, 4); break;                                                          \
        case 5: BY_DTYPE(CALL, 5); break;                                                          \
        case 6: BY_DTYPE(CALL, 6); break;                                                          \
        case 7: BY_DTYPE(CALL, 7); break;                                                          \
        default: BY_DTYPE(CALL, 8); break;                                                         \
        }                                                                                          \
    } while (0)

static void kn_panels_avx512(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                             int32_t kb0, int32_t kb1, const void *W, int32_t NB, int32_t jb0,
                             int32_t jb1, int M, ifl_dtype dt)
{
#define KN(MM, DT) kn8_panels(acc, lda, x, ldx, K, kb0, kb1, W, NB, jb0, jb1, MM, DT)
    BY_M8(KN);
#undef KN
}

static void nk_panels_avx512(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W,
                             int32_t g0, int32_t g1, int32_t N, int M, ifl_dtype dt)
{
#define NK(MM, DT) nk4_panels(y, ldy, xp, KB, W, g0, g1, N, MM, DT)
    BY_M(NK);
#undef NK
}

/* Puts the [even | odd] halves of each 32-column block of p[0..n) back in column order. */
static void unpermute32(float *p, int32_t n)
{
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    for (int32_t j = 0; j < n; j += 32) {
        __m512 e = _mm512_loadu_ps(p + j), o = _mm512_loadu_ps(p + j + 16);
        _mm512_storeu_ps(p + j, _mm512_permutex2var_ps(e, lo, o));
        _mm512_storeu_ps(p + j + 16, _mm512_permutex2var_ps(e, hi, o));
    }
}

static void layernorm_avx512(float *out, const float *x, const float *w, const float *b, int32_t C,
                             float eps)
{
    ifl_layernorm_c(out, x, w, b, C, eps);
}

/* ---- attention ------------------------------------------------------------------------------ *
 *
 * As in kernels_avx2.c: up to six queries of one head share each K (or V) vector loaded, their
 * sums in named accumulators, each sum one fused multiply-add chain from zero (scores: in d order;
 * values: in slot order, onto out) whatever nq is. Slots and d past a multiple of 16 are masked
 * lanes, not a scalar tail. */
#define ATT_ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5)

IFL_ALWAYS_INLINE __mmask16 lanes(int32_t n)
{
    return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* o[i][sl0 .. sl0 + 16) (masked to BS) = q_i . kt[:, ...] for NQ queries. */
IFL_ALWAYS_INLINE void scores_tile(float *o, int32_t ldo, const float *q, int32_t ldq,
                                   const float *kt, int32_t D, int32_t BS, int32_t sl0, const int NQ)
{
    const __mmask16 m = lanes(BS - sl0);
    const __m512 z = _mm512_setzero_ps();
    __m512 c0 = z, c1 = z, c2 = z, c3 = z, c4 = z, c5 = z;
    const float *kp = kt + sl0;
    for (int32_t d = 0; d < D; d++, kp += BS) {
        __m512 k = _mm512_maskz_loadu_ps(m, kp);
#define FMA_Q(i)                                                                                   \
    if (NQ > i)                                                                                    \
        c##i = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)i * ldq + d]), k, c##i);
        ATT_ROWS(FMA_Q)
#undef FMA_Q
    }
#define STORE_O(i)                                                                                 \
    if (NQ > i)                                                                                    \
        _mm512_mask_storeu_ps(o + (size_t)i * ldo + sl0, m, c##i);
    ATT_ROWS(STORE_O)
#undef STORE_O
}

/* out[i][d0 .. d0 + 64) (masked to D) += sum over cnt slots of p_i[sl] * vb[sl][...]. */
IFL_ALWAYS_INLINE void values_tile(float *out, int32_t ldo, const float *p, int32_t ldp,
                                   const float *vb, int32_t cnt, int32_t D, int32_t d0, const int NQ)
{
    const __mmask16 m0 = lanes(D - d0), m1 = lanes(D - d0 - 16), m2 = lanes(D - d0 - 32),
                    m3 = lanes(D - d0 - 48);
    const __m512 z = _mm512_setzero_ps();
    __m512 c00 = z, c01 = z, c02 = z, c03 = z, c10 = z, c11 = z, c12 = z, c13 = z, c20 = z,
           c21 = z, c22 = z, c23 = z, c30 = z, c31 = z, c32 = z, c33 = z, c40 = z, c41 = z,
           c42 = z, c43 = z, c50 = z, c51 = z, c52 = z, c53 = z;
#define LOAD_O(i)                                                                                  \
    if (NQ > i) {                                                                                  \
        const float *r = out + (size_t)i * ldo + d0;                                               \
        c##i##0 = _mm512_maskz_loadu_ps(m0, r);                                                    \
        c##i##1 = _mm512_maskz_loadu_ps(m1, r + 16);                                               \
        c##i##2 = _mm512_maskz_loadu_ps(m2, r + 32);                                               \
        c##i##3 = _mm512_maskz_loadu_ps(m3, r + 48);                                               \
    }
    ATT_ROWS(LOAD_O)
#undef LOAD_O
    const float *vr = vb + d0;
    for (int32_t sl = 0; sl < cnt; sl++, vr += D) {
        __m512 v0 = _mm512_maskz_loadu_ps(m0, vr), v1 = _mm512_maskz_loadu_ps(m1, vr + 16),
               v2 = _mm512_maskz_loadu_ps(m2, vr + 32), v3 = _mm512_maskz_loadu_ps(m3, vr + 48);
#define FMA_P(i)                                                                                   \
    if (NQ > i) {                                                                                  \
        __m512 a = _mm512_set1_ps(p[(size_t)i * ldp + sl]);                                        \
        c##i##0 = _mm512_fmadd_ps(a, v0, c##i##0);                                                 \
        c##i##1 = _mm512_fmadd_ps(a, v1, c##i##1);                                                 \
        c##i##2 = _mm512_fmadd_ps(a, v2, c##i##2);                                                 \
        c##i##3 = _mm512_fmadd_ps(a, v3, c##i##3);                                                 \
    }
        ATT_ROWS(FMA_P)
#undef FMA_P
    }
#define STORE_O(i)                                                                                 \
    if (NQ > i) {                                                                                  \
        float *r = out + (size_t)i * ldo + d0;                                                     \
        _mm512_mask_storeu_ps(r, m0, c##i##0);                                                     \
        _mm512_mask_storeu_ps(r + 16, m1, c##i##1);                                                \
        _mm512_mask_storeu_ps(r + 32, m2, c##i##2);                                                \
        _mm512_mask_storeu_ps(r + 48, m3, c##i##3);                                                \
    }
    ATT_ROWS(STORE_O)
#undef STORE_O
}
#undef ATT_ROWS

#define BY_NQ(CALL)                                                                                \
    switch (nq) {                                                                                  \
    case 1: CALL(1); break;                                                                        \
    case 2: CALL(2); break;                                                                        \
    case 3: CALL(3); break;                                                                        \
    case 4: CALL(4); break;                                                                        \
    case 5: CALL(5); break;                                                                        \
    default: CALL(6); break;                                                                       \
    }

static void attn_scores_avx512(float *o, int32_t ldo, const float *q, int32_t ldq, int nq,
                               const float *kt, int32_t D, int32_t BS)
{
#define SC(NQ) scores_tile(o, ldo, q, ldq, kt, D, BS, sl, NQ)
    for (int32_t sl = 0; sl < BS; sl += 16)
        BY_NQ(SC)
#undef SC
}

/* One query over NB blocks of 16 slots: NB chains in flight where one block has one, each the
 * chain scores_tile(NQ = 1) makes. */
IFL_ALWAYS_INLINE void scores_q1_blocks(float *o, const float *q, const float *const *kt,
                                        int32_t D, const int NB)
{
    __m512 c[IFL_ATTN_Q1_BLOCKS];
    for (int b = 0; b < NB; b++)
        c[b] = _mm512_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        __m512 a = _mm512_set1_ps(q[d]);
        for (int b = 0; b < NB; b++)
            c[b] = _mm512_fmadd_ps(a, _mm512_loadu_ps(kt[b] + (size_t)d * 16), c[b]);
    }
    for (int b = 0; b < NB; b++)
        _mm512_storeu_ps(o + 16 * b, c[b]);
}

static void attn_scores_q1_avx512(float *o, const float *q, const float *const *kt, int nblk,
                                  int32_t D)
{
#define Q1(NB) scores_q1_blocks(o, q, kt, D, NB)
    BY_Q1_BLOCKS(nblk, Q1);
#undef Q1
}

static void attn_values_avx512(float *out, int32_t ldo, const float *p, int32_t ldp, int nq,
                               const float *vb, int32_t cnt, int32_t D)
{
#define VA(NQ) values_tile(out, ldo, p, ldp, vb, cnt, D, d, NQ)
    for (int32_t d = 0; d < D; d += 64)
        BY_NQ(VA)
#undef VA
}
#undef BY_NQ

/* maxps(v, m) keeps m where v is NaN: the same NaN rule as ifl_max_c. */
static float max_avx512(const float *x, size_t n)
{
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        m0 = _mm512_max_ps(_mm512_loadu_ps(x + i), m0);
        m1 = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), m1);
    }
    float m = _mm512_reduce_max_ps(_mm512_max_ps(m0, m1));
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static void scale_avx512(float *x, float s, size_t n)
{
    ifl_scale_c(x, s, n);
}

static float stream_read_avx512(const float *p, size_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 64) {
        if (i + 1024 < n)
            for (int j = 0; j < 64; j += 16)
                PREFETCH(p + i + 1024 + j);
        a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* Twelve independent FMA chains of 16 lanes: enough to cover the latency on two FMA units. */
static double fma_loop_avx512(int64_t iters, float *sink)
{
    __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a[12];
    for (int j = 0; j < 12; j++)
        a[j] = _mm512_set1_ps((float)j);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++)
            a[j] = _mm512_fmadd_ps(a[j], m, c);
    __m512 s = a[0];
    for (int j = 1; j < 12; j++)
        s = _mm512_add_ps(s, a[j]);
    *sink = _mm512_reduce_add_ps(s);
    return (double)iters * 12 * 16 * 2;
}

static const ifl_cpu_kernels k_avx512 = {
    .isa = IFL_ISA_AVX512,
    .desc = "AVX-512 kernels at every size",
    .kn_panels = kn_panels_avx512,
    .kn_max_m = 4,
    .kn_one_pass_m = 8,
    .nk_panels = nk_panels_avx512,
    .nk_max_m = 4,
    .bf16_group = 32,
    .unpermute_bf16 = unpermute32,
    .gemm = NULL,
    .q8_tiles = ifl_q8_tiles_avx512,
    .q8_max_m = IFL_Q8_AVX512_MAX_M,
    .gemm_above = {1 << 30, 1 << 30, 1 << 30, 1 << 30},
    .exp = exp_avx512,
    .gelu_tanh = gelu_tanh_avx512,
    .layernorm = layernorm_avx512,
    .attn_scores = attn_scores_avx512,
    .attn_values = attn_values_avx512,
    .attn_scores_q1 = attn_scores_q1_avx512,
    .max = max_avx512,
    .scale = scale_avx512,
    .stream_read = stream_read_avx512,
    .fma_loop = fma_loop_avx512,
};

const ifl_cpu_kernels *ifl_kernels_avx512(void)
{
    return &k_avx512;
}
#else
const ifl_cpu_kernels *ifl_kernels_avx512(void)
{
    return NULL; /* not an x86-64 build, or the compiler lacks the flags */
}
#endif
