/* kernels_avx2.c: the avx2 kernel family (AVX2 + FMA + F16C: Haswell, Zen 1 and later). Compiled
 * with those target flags (CMakeLists.txt) and run only where ifl_isa_supported(IFL_ISA_AVX2) said
 * the CPU has them.
 *
 * Few rows (decode): the panel kernels stream each weight once, 16 columns (two registers) at a
 * time: a 64-byte panel row is one such unit for f32 and two for 16-bit weights. bf16 is widened
 * without shuffles (shift left by 16: the even elements; mask the high halves: the odd ones), so
 * partial sums hold each 16 columns as [8 even | 8 odd] (bf16_group 16); f16 uses vcvtph2ps.
 * More rows (batches, prefill): the register-blocked product of kernels_avx2_gemm.c. */
#include "cpu_kernels_isa.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)
/* How far ahead the streaming kernels prefetch W, by the weights' size: 16-bit weights carry twice
 * the weights per byte, and with 2048 bytes they fell behind when the host's memory ran at ~60 GB/s
 * (bf16 batch 1: 5.2-5.5 -> 4.8-5.3 ms with 4096, alternated; f32 no better with 4096). With two to
 * four rows of x, dropping the prefetch was slower (batch 4 bf16 10.1 -> 12.0 ms).
 * One row of x (decode) is different. There each block's own lines PF_BYTES ahead cost bandwidth
 * where memory reads ~60 GB/s (one-row kn8 products of GPT-2's shapes, bf16: 50-55 GB/s with them,
 * 59-64 without; batch 1 bf16 4.89 -> 4.73 ms, f32 8.98 -> 8.32 ms, alternated), so one row
 * prefetched nothing. Another pattern made one row faster (docs/perf.md, 2026-12-06): the first
 * lines PF_BYTES ahead as each panel (nk4) or each row of blocks (kn8) starts, then at each block
 * the next block's. nk4 does that for every weight format, kn8 for 16-bit weights (f32 was slower
 * with it in 5 of 5 rounds). */
#define PF_BYTES(dt) ((dt) == IFL_DTYPE_F32 ? 2048 : 4096)
#define PF_ROWS(M) ((M) > 1)
/* Rows of x per pass of the KN panel kernel: 12 accumulators, 2 registers of W and 1 broadcast of
 * x, 15 of the 16 registers. */
#define KN_MAX_M 6
_Static_assert(KN_MAX_M == 6, "kn_panels_avx2 has a case for each M up to KN_MAX_M");

/* ---- exp, GELU ------------------------------------------------------------------------------- */

IFL_ALWAYS_INLINE __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f)); /* 2^n stays a normal float */
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n as a float: n + 127 in the exponent field (n in [-126, 128): p * 2^n in two steps
     * keeps n = 128 from overflowing the field) */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(ni, 1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, h), _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

static void exp_avx2(float *y, const float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_set1_ps(-87.0f), _CMP_NGE_UQ))) {
            for (size_t j = i; j < i + 8; j++) /* subnormal results, zero or NaN: as the scalar */
                y[j] = ifl_exp_scalar(x[j]);
            continue;
        }
        _mm256_storeu_ps(y + i, exp8(v));
    }
    for (; i < n; i++)
        y[i] = ifl_exp_scalar(x[i]);
}

IFL_ALWAYS_INLINE __m256 gelu8(__m256 x)
{
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f),
                             _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
    __m256 e = exp8(u);
    __m256 t =
        _mm256_sub_ps(_mm256_set1_ps(2.0f),
                      _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), t);
}

static void gelu_tanh_avx2(float *x, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, gelu8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        x[i] = ifl_gelu_tanh_scalar(x[i]);
}

/* ---- panel kernels (few rows) ---------------------------------------------------------------- */

/* One unit of 16 columns as two registers: f32 the whole 64-byte row at p, 16-bit the 32-byte
 * half at p (f16: elements 0..7, 8..15; bf16: the even elements, the odd ones). */
IFL_ALWAYS_INLINE void load_unit(const char *p, const ifl_dtype dt, __m256 *v0, __m256 *v1)
{
    if (dt == IFL_DTYPE_F32) {
        *v0 = _mm256_load_ps((const float *)p);
        *v1 = _mm256_load_ps((const float *)p + 8);
    } else if (dt == IFL_DTYPE_F16) {
        /* one 32-byte load, then vcvtph2ps from registers: the one-row (K, N) products took 23%
         * less time than with two vcvtph2ps from memory, 16 bytes each (medians 2.83 against 3.66
         * ms a step, lower in 10 of 10 alternated rounds; docs/perf.md, 2026-12-06) */
        __m256i v = _mm256_load_si256((const __m256i *)p);
        *v0 = _mm256_cvtph_ps(_mm256_castsi256_si128(v));
        *v1 = _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1));
    } else {
        __m256i v = _mm256_load_si256((const __m256i *)p);
        *v0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        *v1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
    }
}

/* One pass over 8 rows of W for 32 * g columns of acc (M rows; g = 2 only for one row): group h's
 * first 16 columns from the units at row[2h] + 64 r, its next 16 from row[2h + 1] + 64 r. Each
 * 8 columns of a row is one chain of fused multiply-adds in k order. */
IFL_ALWAYS_INLINE void kn_pass(float *ap, int32_t lda, float xs[][8], const char *const row[4],
                               const int M, const int g, const ifl_dtype dt)
{
    __m256 a[8]; /* row m, group h, 8 columns q: a[4 * (m + h) + q] (m or h is 0) */
    for (int m = 0; m < M; m++)
        for (int h = 0; h < g; h++)
            for (int q = 0; q < 4; q++)
                a[4 * (m + h) + q] = _mm256_load_ps(ap + (size_t)m * lda + 32 * h + 8 * q);
    for (int r = 0; r < 8; r++)
        for (int h = 0; h < g; h++) {
            __m256 v[4];
            load_unit(row[2 * h] + 64 * r, dt, &v[0], &v[1]);
            load_unit(row[2 * h + 1] + 64 * r, dt, &v[2], &v[3]);
            for (int m = 0; m < M; m++) {
                __m256 xb = _mm256_set1_ps(xs[m][r]);
                for (int q = 0; q < 4; q++)
                    a[4 * (m + h) + q] = _mm256_fmadd_ps(xb, v[q], a[4 * (m + h) + q]);
            }
        }
    for (int m = 0; m < M; m++)
        for (int h = 0; h < g; h++)
            for (int q = 0; q < 4; q++)
                _mm256_store_ps(ap + (size_t)m * lda + 32 * h + 8 * q, a[4 * (m + h) + q]);
}

/* acc (M, lda) += x @ W over 8-row panels kb0..kb1, panel columns jb0..jb1; each 512-byte block is
 * read once (the second unit of a 16-bit block from L1). Every sum is one chain of fused
 * multiply-adds in k order, the order the register-blocked product keeps too, so a row's result
 * does not depend on how many rows share the call (the independent chains are the columns and the
 * rows).
 * More chains at once for few rows: up to two rows take a 16-bit block's two units together (four
 * chains a row); one row takes two f32 blocks together (four chains; their columns lie side by
 * side in acc) and two 16-bit blocks (eight). One row of f32 weights ran at 85% of the floor one
 * block at a time against 88% two at a time (medians of 11 alternated runs: higher in 8, level in
 * 2), bf16 at 80.5% against 88% (8 runs, higher in all 8). f16 two at a time was lower while two
 * bands' piece counters shared a cache line (80.5% against 84%, 12 runs); since, its products took
 * less time in 33 of 48 alternated rounds where the host's memory was fast (steps of 4-6 ms) but
 * more, by about 5%, in 13 of 14 where it was slow (steps near 8 ms), and with load_unit's single
 * 32-byte load less in 8 of 10 (medians 3.10 against 3.34 ms a step). docs/perf.md, 2026-12-06. */
IFL_ALWAYS_INLINE void kn8_panels(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                                  int32_t kb0, int32_t kb1, const void *W, int32_t NB, int32_t jb0,
                                  int32_t jb1, const int M, const ifl_dtype dt)
{
    const int cw = dt == IFL_DTYPE_F32 ? 16 : 32, units = dt == IFL_DTYPE_F32 ? 1 : 2;
    for (int32_t kb = kb0; kb < kb1; kb++) {
        float xs[KN_MAX_M][8];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 8; r++) {
                int32_t k = kb * 8 + r;
                xs[m][r] = k < K ? x[(size_t)m * ldx + k] : 0.0f;
            }
        const char *panel = (const char *)W + (size_t)kb * NB * 512;
        const int row1 = M == 1 && dt != IFL_DTYPE_F32; /* one row's pattern, see PF_BYTES */
        if (row1)
            for (int l = 0; l < 8; l++)
                PREFETCH(panel + (size_t)jb0 * 512 + PF_BYTES(dt) + 64 * l);
        for (int32_t jb = jb0; jb < jb1; jb++) {
            const char *blk = panel + (size_t)jb * 512;
            /* blocks in this pass: two where one row has a second block left */
            const int nb = M == 1 && jb + 1 < jb1 ? 2 : 1;
            if (PF_ROWS(M) || row1)
                for (int l = 0; l < 8; l++)
                    PREFETCH(blk + (row1 ? 512 : 0) + PF_BYTES(dt) + 64 * l);
            float *ap = acc + (size_t)jb * cw;
            if (units == 2 && nb == 1 && M <= 2) {
                const char *row[4] = {blk, blk + 32, NULL, NULL};
                kn_pass(ap, lda, xs, row, M, 1, dt);
                continue;
            }
            if (units == 2 && nb == 2) { /* the next block's rows only where there is one */
                const char *row[4] = {blk, blk + 32, blk + 512, blk + 544};
                kn_pass(ap, lda, xs, row, 1, 2, dt);
                for (int l = 0; l < 8; l++) /* the block after the next one's, after the pass */
                    PREFETCH(blk + 1024 + PF_BYTES(dt) + 64 * l);
                jb++;
                continue;
            }
            if (nb == 2) {
                const char *row[4] = {blk, blk + 512, NULL, NULL};
                kn_pass(ap, lda, xs, row, 1, 1, dt);
                jb++;
                continue;
            }
            for (int u = 0; u < units; u++) {
                float *up = ap + 16 * u;
                __m256 a[KN_MAX_M][2];
                for (int m = 0; m < M; m++) {
                    a[m][0] = _mm256_load_ps(up + (size_t)m * lda);
                    a[m][1] = _mm256_load_ps(up + (size_t)m * lda + 8);
                }
                for (int r = 0; r < 8; r++) {
                    __m256 v0, v1;
                    load_unit(blk + 64 * r + 32 * u, dt, &v0, &v1);
                    for (int m = 0; m < M; m++) {
                        __m256 xb = _mm256_set1_ps(xs[m][r]);
                        a[m][0] = _mm256_fmadd_ps(xb, v0, a[m][0]);
                        a[m][1] = _mm256_fmadd_ps(xb, v1, a[m][1]);
                    }
                }
                for (int m = 0; m < M; m++) {
                    _mm256_store_ps(up + (size_t)m * lda, a[m][0]);
                    _mm256_store_ps(up + (size_t)m * lda + 8, a[m][1]);
                }
            }
        }
    }
}

IFL_ALWAYS_INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* hsum8 of a, b, c and d: the same three adds per register (halves, then lanes 0 + 2 and
 * 1 + 3, then those two), four registers at a time. */
IFL_ALWAYS_INLINE __m128 hsum8x4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    __m256 ab =
        _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    __m256 cd =
        _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    /* per 128-bit lane: [s0 + s2, s1 + s3] of a (b), then of c (d) */
    __m256 w = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    /* low lane [a, c, a, c], high lane [b, d, b, d] */
    __m256 f = _mm256_add_ps(_mm256_shuffle_ps(w, w, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(w, w, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm_unpacklo_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1));
}

/* y[m][n - g0 * 4] = x[m] . W[n] over 4-row panels g0..g1; up to three rows of x. Per 8 columns
 * of a block: x's 8 for every row, then each of the panel's 4 rows of W once for all of them (3 x
 * 4 accumulators, 3 of x, 1 of W: the sixteen registers; twelve multiply-adds per seven loads). A
 * sum's chain runs over the 8-column halves in k order, whatever M is.
 * Prefetch: each block, its lines PF_BYTES ahead. One row (decode's lm_head) asks at each panel's
 * start for its first lines PF_BYTES ahead, then each block for the next block's. That start
 * repeats the lines the panel before asked for last, yet without it the one-row lm_head ran as
 * slowly as with no prefetch at all (docs/perf.md, 2026-12-06: f16 lm_head medians 1.49-1.95 ms a
 * step in four builds with it, 2.36-2.65 in three without; the same in the avx512 family), and
 * nothing on this host (no PMU) says why. More rows keep the prefetch as it was: their figures did
 * not move clearly either way. */
IFL_ALWAYS_INLINE void nk4_panels(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W,
                                  int32_t g0, int32_t g1, int32_t N, const int M,
                                  const ifl_dtype dt)
{
    const int cw = dt == IFL_DTYPE_F32 ? 16 : 32, units = dt == IFL_DTYPE_F32 ? 1 : 2;
    const size_t ldx = (size_t)KB * cw;
    for (int32_t g = g0; g < g1; g++) {
        const char *prow = (const char *)W + (size_t)g * KB * 256;
        __m256 acc[3][4];
        for (int m = 0; m < M; m++)
            for (int r = 0; r < 4; r++)
                acc[m][r] = _mm256_setzero_ps();
        if (M == 1)
            for (int l = 0; l < 4; l++)
                PREFETCH(prow + PF_BYTES(dt) + 64 * l);
        for (int32_t kb = 0; kb < KB; kb++) {
            const char *blk = prow + (size_t)kb * 256;
            for (int l = 0; l < 4; l++)
                PREFETCH(blk + (M == 1 ? 256 : 0) + PF_BYTES(dt) + 64 * l);
            for (int u = 0; u < units; u++) {
                for (int hf = 0; hf < 2; hf++) {
                    __m256 xv[3];
                    for (int m = 0; m < M; m++)
                        xv[m] = _mm256_loadu_ps(xp + (size_t)m * ldx + (size_t)kb * cw + 16 * u +
                                                8 * hf);
                    for (int r = 0; r < 4; r++) {
                        const char *wp = blk + 64 * r + 32 * u;
                        __m256 w;
                        if (dt == IFL_DTYPE_F32)
                            w = _mm256_load_ps((const float *)wp + 8 * hf);
                        else if (dt == IFL_DTYPE_F16)
                            w = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(wp + 16 * hf)));
                        else {
                            __m256i v = _mm256_load_si256((const __m256i *)wp);
                            w = _mm256_castsi256_ps(
                                hf ? _mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u))
                                   : _mm256_slli_epi32(v, 16));
                        }
                        for (int m = 0; m < M; m++)
                            acc[m][r] = _mm256_fmadd_ps(xv[m], w, acc[m][r]);
                    }
                }
            }
        }
        for (int m = 0; m < M; m++) {
            float *yr = y + (size_t)m * ldy + (size_t)(g - g0) * 4;
            if (g * 4 + 4 <= N)
                _mm_storeu_ps(yr, hsum8x4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]));
            else
                for (int r = 0; r < 4 && g * 4 + r < N; r++)
                    yr[r] = hsum8(acc[m][r]);
        }
    }
}

/* The 16-bit NK4 panels g0..g1 as f32 NK4 panels (ifl_cpu_kernels.nk_widen): unit u (16 values)
 * of a row of block kb becomes that row of f32 block 2 * kb + u, as the two registers nk4_panels
 * makes of it (bf16: the even elements, then the odd ones; f16: in order). */
static void nk_widen_avx2(float *dst, const void *W, int32_t KB, int32_t g0, int32_t g1,
                          ifl_dtype dt)
{
    const char *src = (const char *)W + (size_t)g0 * (size_t)KB * 256;
    size_t units =
        (size_t)(g1 - g0) * (size_t)KB * 4 * 2; /* (panel, kb, row, u), in memory order */
    for (size_t i = 0; i < units; i++) {
        const char *p = src + i * 32;
        size_t blk = i / 8, r = i / 2 % 4, u = i % 2; /* 8 units (4 rows x 2) per 256-byte block */
        float *d = dst + ((blk * 2 + u) * 4 + r) * 16;
        __m256 v0, v1;
        if (dt == IFL_DTYPE_F16) {
            v0 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)p));
            v1 = _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p + 16)));
        } else {
            __m256i v = _mm256_load_si256((const __m256i *)p);
            v0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
            v1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)));
        }
        _mm256_store_ps(d, v0);
        _mm256_store_ps(d + 8, v1);
    }
}

static void kn_panels_avx2(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                           int32_t kb0, int32_t kb1, const void *W, int32_t NB, int32_t jb0,
                           int32_t jb1, int M, ifl_dtype dt)
{
#define KN(MM, DT) kn8_panels(acc, lda, x, ldx, K, kb0, kb1, W, NB, jb0, jb1, MM, DT)
    switch (M) {
    case 1: BY_DTYPE(KN, 1); break;
    case 2: BY_DTYPE(KN, 2); break;
    case 3: BY_DTYPE(KN, 3); break;
    case 4: BY_DTYPE(KN, 4); break;
    case 5: BY_DTYPE(KN, 5); break;
    default: BY_DTYPE(KN, 6); break;
    }
#undef KN
}

static void nk_panels_avx2(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W,
                           int32_t g0, int32_t g1, int32_t N, int M, ifl_dtype dt)
{
#define NK(MM, DT) nk4_panels(y, ldy, xp, KB, W, g0, g1, N, MM, DT)
    if (M == 1)
        BY_DTYPE(NK, 1);
    else if (M == 2)
        BY_DTYPE(NK, 2);
    else
        BY_DTYPE(NK, 3);
#undef NK
}

/* Puts the [8 even | 8 odd] halves of each 16 partial sums back in column order. */
static void unpermute16(float *p, int32_t n)
{
    for (int32_t j = 0; j < n; j += 16) {
        __m256 e = _mm256_loadu_ps(p + j), o = _mm256_loadu_ps(p + j + 8);
        __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
        _mm256_storeu_ps(p + j, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(p + j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}

/* ---- the rest -------------------------------------------------------------------------------- */

static void layernorm_avx2(float *out, const float *x, const float *w, const float *b, int32_t C,
                           float eps)
{
    ifl_layernorm_c(out, x, w, b, C, eps);
}

/* ---- attention ------------------------------------------------------------------------------ *
 *
 * Up to six queries of one head pass over a KV block together: each K (or V) vector loaded feeds
 * six queries' sums, held in twelve named accumulators as in micro(). Each sum is one fused
 * multiply-add chain from zero (scores: in d order; values: in slot order, onto out), the same for
 * every nq, and the scalar tails (fmaf) are the same operation on one lane. */
#define ATT_ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5)

/* o[i][sl0 .. sl0 + 8 NV) = q_i . kt[:, ...] for NQ queries (NV: 1 or 2 vectors of slots). */
IFL_ALWAYS_INLINE void scores_tile(float *o, int32_t ldo, const float *q, int32_t ldq,
                                   const float *kt, int32_t D, int32_t BS, int32_t sl0, const int NQ,
                                   const int NV)
{
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z,
           c41 = z, c50 = z, c51 = z;
    const float *kp = kt + sl0;
    for (int32_t d = 0; d < D; d++, kp += BS) {
        __m256 k0 = _mm256_loadu_ps(kp), k1 = NV > 1 ? _mm256_loadu_ps(kp + 8) : z;
#define FMA_Q(i)                                                                                   \
    if (NQ > i) {                                                                                  \
        __m256 a = _mm256_broadcast_ss(q + (size_t)i * ldq + d);                                   \
        c##i##0 = _mm256_fmadd_ps(a, k0, c##i##0);                                                 \
        if (NV > 1)                                                                                \
            c##i##1 = _mm256_fmadd_ps(a, k1, c##i##1);                                             \
    }
        ATT_ROWS(FMA_Q)
#undef FMA_Q
    }
#define STORE_O(i)                                                                                 \
    if (NQ > i) {                                                                                  \
        _mm256_storeu_ps(o + (size_t)i * ldo + sl0, c##i##0);                                      \
        if (NV > 1)                                                                                \
            _mm256_storeu_ps(o + (size_t)i * ldo + sl0 + 8, c##i##1);                              \
    }
    ATT_ROWS(STORE_O)
#undef STORE_O
}

/* out[i][d0 .. d0 + 8 NV) += sum over cnt slots of p_i[sl] * vb[sl][...]. */
IFL_ALWAYS_INLINE void values_tile(float *out, int32_t ldo, const float *p, int32_t ldp,
                                   const float *vb, int32_t cnt, int32_t D, int32_t d0, const int NQ,
                                   const int NV)
{
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z,
           c41 = z, c50 = z, c51 = z;
#define LOAD_O(i)                                                                                  \
    if (NQ > i) {                                                                                  \
        c##i##0 = _mm256_loadu_ps(out + (size_t)i * ldo + d0);                                     \
        if (NV > 1)                                                                                \
            c##i##1 = _mm256_loadu_ps(out + (size_t)i * ldo + d0 + 8);                             \
    }
    ATT_ROWS(LOAD_O)
#undef LOAD_O
    const float *vr = vb + d0;
    for (int32_t sl = 0; sl < cnt; sl++, vr += D) {
        __m256 v0 = _mm256_loadu_ps(vr), v1 = NV > 1 ? _mm256_loadu_ps(vr + 8) : z;
#define FMA_P(i)                                                                                   \
    if (NQ > i) {                                                                                  \
        __m256 a = _mm256_broadcast_ss(p + (size_t)i * ldp + sl);                                  \
        c##i##0 = _mm256_fmadd_ps(a, v0, c##i##0);                                                 \
        if (NV > 1)                                                                                \
            c##i##1 = _mm256_fmadd_ps(a, v1, c##i##1);                                             \
    }
        ATT_ROWS(FMA_P)
#undef FMA_P
    }
#define STORE_O(i)                                                                                 \
    if (NQ > i) {                                                                                  \
        _mm256_storeu_ps(out + (size_t)i * ldo + d0, c##i##0);                                     \
        if (NV > 1)                                                                                \
            _mm256_storeu_ps(out + (size_t)i * ldo + d0 + 8, c##i##1);                             \
    }
    ATT_ROWS(STORE_O)
#undef STORE_O
}
#undef ATT_ROWS

/* One query's values over 64 of d at once: eight chains instead of two (decode has nq = 1). */
IFL_ALWAYS_INLINE void values_wide(float *out, const float *p, const float *vb, int32_t cnt,
                                   int32_t D, int32_t d0)
{
    __m256 c[8];
    for (int v = 0; v < 8; v++)
        c[v] = _mm256_loadu_ps(out + d0 + 8 * v);
    const float *vr = vb + d0;
    for (int32_t sl = 0; sl < cnt; sl++, vr += D) {
        __m256 a = _mm256_broadcast_ss(p + sl);
        c[0] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr), c[0]);
        c[1] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 8), c[1]);
        c[2] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 16), c[2]);
        c[3] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 24), c[3]);
        c[4] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 32), c[4]);
        c[5] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 40), c[5]);
        c[6] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 48), c[6]);
        c[7] = _mm256_fmadd_ps(a, _mm256_loadu_ps(vr + 56), c[7]);
    }
    for (int v = 0; v < 8; v++)
        _mm256_storeu_ps(out + d0 + 8 * v, c[v]);
}

#define BY_NQ(CALL, NV)                                                                            \
    switch (nq) {                                                                                  \
    case 1: CALL(1, NV); break;                                                                    \
    case 2: CALL(2, NV); break;                                                                    \
    case 3: CALL(3, NV); break;                                                                    \
    case 4: CALL(4, NV); break;                                                                    \
    case 5: CALL(5, NV); break;                                                                    \
    default: CALL(6, NV); break;                                                                   \
    }

static void attn_scores_avx2(float *o, int32_t ldo, const float *q, int32_t ldq, int nq,
                             const float *kt, int32_t D, int32_t BS)
{
    int32_t sl = 0;
#define SC(NQ, NV) scores_tile(o, ldo, q, ldq, kt, D, BS, sl, NQ, NV)
    for (; sl + 16 <= BS; sl += 16)
        BY_NQ(SC, 2)
    for (; sl + 8 <= BS; sl += 8)
        BY_NQ(SC, 1)
#undef SC
    for (; sl < BS; sl++)
        for (int i = 0; i < nq; i++) {
            float s = 0;
            for (int32_t d = 0; d < D; d++)
                s = fmaf(q[(size_t)i * ldq + d], kt[(size_t)d * BS + sl], s);
            o[(size_t)i * ldo + sl] = s;
        }
}

/* One query over NB blocks of 16 slots: 2 NB chains in flight where one block has two, each the
 * chain scores_tile(NQ = 1, NV = 2) makes. */
IFL_ALWAYS_INLINE void scores_q1_blocks(float *o, const float *q, const float *const *kt,
                                        int32_t D, const int NB)
{
    __m256 c[IFL_ATTN_Q1_BLOCKS][2];
    for (int b = 0; b < NB; b++)
        c[b][0] = c[b][1] = _mm256_setzero_ps();
    for (int32_t d = 0; d < D; d++) {
        __m256 a = _mm256_broadcast_ss(q + d);
        for (int b = 0; b < NB; b++) {
            c[b][0] = _mm256_fmadd_ps(a, _mm256_loadu_ps(kt[b] + (size_t)d * 16), c[b][0]);
            c[b][1] = _mm256_fmadd_ps(a, _mm256_loadu_ps(kt[b] + (size_t)d * 16 + 8), c[b][1]);
        }
    }
    for (int b = 0; b < NB; b++) {
        _mm256_storeu_ps(o + 16 * b, c[b][0]);
        _mm256_storeu_ps(o + 16 * b + 8, c[b][1]);
    }
}

static void attn_scores_q1_avx2(float *o, const float *q, const float *const *kt, int nblk,
                                int32_t D)
{
#define Q1(NB) scores_q1_blocks(o, q, kt, D, NB)
    BY_Q1_BLOCKS(nblk, Q1);
#undef Q1
}

static void attn_values_avx2(float *out, int32_t ldo, const float *p, int32_t ldp, int nq,
                             const float *vb, int32_t cnt, int32_t D)
{
    int32_t d = 0;
    if (nq == 1)
        for (; d + 64 <= D; d += 64)
            values_wide(out, p, vb, cnt, D, d);
#define VA(NQ, NV) values_tile(out, ldo, p, ldp, vb, cnt, D, d, NQ, NV)
    for (; d + 16 <= D; d += 16)
        BY_NQ(VA, 2)
    for (; d + 8 <= D; d += 8)
        BY_NQ(VA, 1)
#undef VA
    for (; d < D; d++)
        for (int i = 0; i < nq; i++) {
            float s = out[(size_t)i * ldo + d];
            for (int32_t sl = 0; sl < cnt; sl++)
                s = fmaf(p[(size_t)i * ldp + sl], vb[(size_t)sl * D + d], s);
            out[(size_t)i * ldo + d] = s;
        }
}
#undef BY_NQ

/* maxps(v, m) keeps m where v is NaN: the same NaN rule as ifl_max_c. */
static float max_avx2(const float *x, size_t n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    float t[8], m = -INFINITY;
    _mm256_storeu_ps(t, _mm256_max_ps(m0, m1));
    for (int j = 0; j < 8; j++)
        m = t[j] > m ? t[j] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static void scale_avx2(float *x, float s, size_t n)
{
    ifl_scale_c(x, s, n);
}

static float stream_read_avx2(const float *p, size_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
        if (i + 1024 < n) {
            PREFETCH(p + i + 1024);
            PREFETCH(p + i + 1024 + 16);
        }
        a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
        a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* Twelve independent FMA chains of 8 lanes: enough to cover the latency on two FMA units. */
static double fma_loop_avx2(int64_t iters, float *sink)
{
    __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a[12];
    for (int j = 0; j < 12; j++)
        a[j] = _mm256_set1_ps((float)j);
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 12; j++)
            a[j] = _mm256_fmadd_ps(a[j], m, c);
    __m256 s = a[0];
    for (int j = 1; j < 12; j++)
        s = _mm256_add_ps(s, a[j]);
    *sink = hsum8(s);
    return (double)iters * 12 * 8 * 2;
}

static const ifl_cpu_kernels k_avx2 = {
    .isa = IFL_ISA_AVX2,
    .desc = "AVX2+FMA+F16C kernels (register-blocked above 8 rows of f32 weights, 12 of 16-bit)",
    .kn_panels = kn_panels_avx2,
    .kn_max_m = KN_MAX_M,
    .nk_panels = nk_panels_avx2,
    .nk_max_m = 3,
    .nk_widen = nk_widen_avx2,
    /* bf16 above 40 rows (perf.md: lm_head at 64 rows +13%; at 12-32 rows the copy costs more
     * than the shifts it saves); f16 converts in one instruction and is not widened */
    .nk_widen_above = {1 << 30, 1 << 30, 40, 1 << 30},
    .bf16_group = 16,
    .unpermute_bf16 = unpermute16,
    .gemm = ifl_gemm_avx2,
    /* up to these rows (f32, f16, bf16) the panel kernels, six rows a pass, beat packing each
     * strip of W for only one or two groups of six (perf.md, 2026-12-05: bf16 products of 5-8
     * rows 30-60% faster alone, of 12 level to faster; batch 6 decode 16.2 -> 12.3 ms); f32
     * weights, twice the bytes, gain less and only to 8 rows */
    .q8_tiles = ifl_q8_tiles_avx2,
    .q8_max_m = IFL_Q8_AVX2_MAX_M,
    .gemm_above = {8, 12, 12, 1 << 30},
    .exp = exp_avx2,
    .gelu_tanh = gelu_tanh_avx2,
    .layernorm = layernorm_avx2,
    .attn_scores = attn_scores_avx2,
    .attn_values = attn_values_avx2,
    .attn_scores_q1 = attn_scores_q1_avx2,
    .max = max_avx2,
    .scale = scale_avx2,
    .stream_read = stream_read_avx2,
    .fma_loop = fma_loop_avx2,
};

const ifl_cpu_kernels *ifl_kernels_avx2(void)
{
    return &k_avx2;
}
#else
const ifl_cpu_kernels *ifl_kernels_avx2(void)
{
    return NULL; /* not an x86-64 build, or the compiler lacks the flags */
}
#endif
