/* kernels_avx2_gemm.c: the avx2 family's register-blocked product (more rows of x: batches,
 * prefill), 6 rows x 16 columns of y in twelve accumulators over a block of IFL_GEMM_KC rows of W
 * packed to f32 (8 KiB: it stays in L1 while every group of 6 rows of x passes over it). The next
 * strip of W is packed into a second buffer a slice at a time between the current strip's groups
 * of rows, so its loads from memory overlap the multiply-adds. Compiled with the avx2 family's
 * flags (CMakeLists.txt); its sums come out exactly as the panel kernels' of kernels_avx2.c
 * (ifl_gemm_args). */
#include "cpu_kernels_isa.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* ---- register-blocked product (more rows) ---------------------------------------------------- */

/* 16 elements of dtype dt at p as f32 into d (unaligned). */
IFL_ALWAYS_INLINE void widen16(float *d, const char *p, ifl_dtype dt)
{
    if (dt == IFL_DTYPE_F32) {
        _mm256_storeu_ps(d, _mm256_loadu_ps((const float *)p));
        _mm256_storeu_ps(d + 8, _mm256_loadu_ps((const float *)p + 8));
    } else if (dt == IFL_DTYPE_F16) {
        _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
        _mm256_storeu_ps(d + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))));
    } else {
        __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
        __m256i hi = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 16)));
        _mm256_storeu_ps(d, _mm256_castsi256_ps(_mm256_slli_epi32(lo, 16)));
        _mm256_storeu_ps(d + 8, _mm256_castsi256_ps(_mm256_slli_epi32(hi, 16)));
    }
}

/* Rows [r0, r1) of bp (kc, 16) = W (K, N) rows [k0, k0 + kc), columns [n0, n0 + 16) as f32, zero
 * past N. In both layouts (row-major, KN8) the 16 columns of a row are contiguous (n0 is a multiple
 * of 16). */
IFL_ALWAYS_INLINE void pack_kn(float *bp, const ifl_mat *W, int32_t k0, int32_t r0, int32_t r1,
                               int32_t n0, const ifl_dtype dt)
{
    const size_t es = dt == IFL_DTYPE_F32 ? 4 : 2;
    const int32_t cw = dt == IFL_DTYPE_F32 ? 16 : 32;
    const int32_t cols = W->cols - n0 < 16 ? W->cols - n0 : 16;
    const char *base = W->data;
    const size_t nb = (size_t)(W->cols + cw - 1) / (size_t)cw;
    /* KN8: a panel's 8 rows are cw elements apart, so the address is worked out once per panel */
    const size_t step = W->layout == IFL_LAYOUT_KN8 ? (size_t)cw * es : (size_t)W->cols * es;
    const int pf = n0 + 16 < W->cols && W->layout == IFL_LAYOUT_KN8 && n0 % cw + 16 == cw;
    for (int32_t k = r0; k < r1;) {
        int32_t r = k0 + k;
        int32_t end = r1;
        const char *src;
        if (W->layout == IFL_LAYOUT_KN8) {
            src = base + ((((size_t)(r / 8) * nb + (size_t)(n0 / cw)) * 8 + (size_t)(r % 8)) *
                              (size_t)cw +
                          (size_t)(n0 % cw)) *
                             es;
            end = k + (8 - r % 8) < r1 ? k + (8 - r % 8) : r1;
        } else
            src = base + ((size_t)r * (size_t)W->cols + (size_t)n0) * es;
        for (; k < end; k++, src += step) {
            if (pf) /* the next panel's row, toward L2: packed while this strip is in use */
                _mm_prefetch(src + 512 - (size_t)(cw - 16) * es, _MM_HINT_T1);
            if (cols == 16) {
                widen16(bp + (size_t)k * 16, src, dt);
                continue;
            }
            for (int32_t j = 0; j < 16; j++)
                bp[(size_t)k * 16 + j] = j < cols ? ifl_load_f32(dt, src, (size_t)j) : 0.0f;
        }
    }
}

static void pack(float *bp, const ifl_mat *W, int32_t k0, int32_t r0, int32_t r1, int32_t n0)
{
    if (W->dtype == IFL_DTYPE_F32)
        pack_kn(bp, W, k0, r0, r1, n0, IFL_DTYPE_F32);
    else if (W->dtype == IFL_DTYPE_F16)
        pack_kn(bp, W, k0, r0, r1, n0, IFL_DTYPE_F16);
    else
        pack_kn(bp, W, k0, r0, r1, n0, IFL_DTYPE_BF16);
}

/* Where a tile's sums go: the tile buffer (the band goes on), or y: set (the first band, no
 * accumulate) or added (later bands, or accumulate). */
enum { OUT_TILE, OUT_SET, OUT_ADD };

typedef struct {
    float *y;
    int32_t N, n0, cols; /* the strip: columns [n0, n0 + cols) of y (N wide) */
    int32_t kc;          /* rows of the packed blocks */
    const float *ap;     /* the row block's x, packed: per 6 rows, kc x 6 (pack_x) */
    const float *bp;     /* the strip's W, packed: kc x 16 */
    float *tile;         /* the strip's running sums: (IFL_GEMM_MC, 16), by row - mb */
    int32_t mb;
    int from_tile; /* 0: the band starts here, from zero */
    int out;
} micro_job;

/* Rows [m0, m0 + MR) of the strip: c = (tile or 0) + x @ bp, one fused multiply-add chain per sum
 * in k order, then c into the tile or onto y. The twelve accumulators are named variables (an
 * array indexed in loops was kept in memory by the compiler: measured 36% of the FMA peak). */
#define MICRO_ROWS(OP) OP(0) OP(1) OP(2) OP(3) OP(4) OP(5)
IFL_ALWAYS_INLINE void micro(const micro_job *j, int32_t m0, const int MR)
{
    const int32_t kc = j->kc;
    const float *bp = j->bp;
    const float *xr = j->ap + (size_t)(m0 - j->mb) * (size_t)kc; /* this 6-row group's panel */
    float *tile = j->tile + (size_t)(m0 - j->mb) * 16;
    const __m256 z = _mm256_setzero_ps();
    __m256 c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z, c40 = z,
           c41 = z, c50 = z, c51 = z;
#define LOAD_T(i)                                                                                  \
    if (MR > i) {                                                                                  \
        c##i##0 = _mm256_load_ps(tile + 16 * i);                                                   \
        c##i##1 = _mm256_load_ps(tile + 16 * i + 8);                                               \
    }
    if (j->from_tile) {
        MICRO_ROWS(LOAD_T)
    }
#undef LOAD_T
#define FMA_ROW(i)                                                                                 \
    if (MR > i) {                                                                                  \
        __m256 a = _mm256_broadcast_ss(xr + (size_t)k * 6 + i);                                    \
        c##i##0 = _mm256_fmadd_ps(a, b0, c##i##0);                                                 \
        c##i##1 = _mm256_fmadd_ps(a, b1, c##i##1);                                                 \
    }
    for (int32_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp + (size_t)k * 16);
        __m256 b1 = _mm256_load_ps(bp + (size_t)k * 16 + 8);
        MICRO_ROWS(FMA_ROW)
    }
#undef FMA_ROW
    if (j->out == OUT_TILE) {
#define STORE_T(i)                                                                                 \
    if (MR > i) {                                                                                  \
        _mm256_store_ps(tile + 16 * i, c##i##0);                                                   \
        _mm256_store_ps(tile + 16 * i + 8, c##i##1);                                               \
    }
        MICRO_ROWS(STORE_T)
#undef STORE_T
        return;
    }
    __m256i mlo = _mm256_set1_epi32(-1), mhi = mlo;
    if (j->cols < 16) {
        const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        mlo = _mm256_cmpgt_epi32(_mm256_set1_epi32(j->cols), idx);
        mhi = _mm256_cmpgt_epi32(_mm256_set1_epi32(j->cols - 8), idx);
    }
    const int add = j->out == OUT_ADD, full = j->cols == 16;
    float *y = j->y + (size_t)m0 * (size_t)j->N + j->n0;
    /* masked loads and stores only for a strip cut by N: they are microcoded on some CPUs
     * (AMD's: a full strip's stores took ~3% of the product) */
#define STORE_Y(i)                                                                                 \
    if (MR > i) {                                                                                  \
        float *yr = y + (size_t)i * (size_t)j->N;                                                  \
        if (full) {                                                                                \
            if (add) {                                                                             \
                c##i##0 = _mm256_add_ps(_mm256_loadu_ps(yr), c##i##0);                             \
                c##i##1 = _mm256_add_ps(_mm256_loadu_ps(yr + 8), c##i##1);                         \
            }                                                                                      \
            _mm256_storeu_ps(yr, c##i##0);                                                         \
            _mm256_storeu_ps(yr + 8, c##i##1);                                                     \
        } else {                                                                                   \
            if (add) {                                                                             \
                c##i##0 = _mm256_add_ps(_mm256_maskload_ps(yr, mlo), c##i##0);                     \
                c##i##1 = _mm256_add_ps(_mm256_maskload_ps(yr + 8, mhi), c##i##1);                 \
            }                                                                                      \
            _mm256_maskstore_ps(yr, mlo, c##i##0);                                                 \
            _mm256_maskstore_ps(yr + 8, mhi, c##i##1);                                             \
        }                                                                                          \
    }
    MICRO_ROWS(STORE_Y)
#undef STORE_Y
}
#undef MICRO_ROWS

__attribute__((noinline)) static void micro_rows(const micro_job *j, int32_t m0, int MR)
{
    switch (MR) {
    case 1: micro(j, m0, 1); break;
    case 2: micro(j, m0, 2); break;
    case 3: micro(j, m0, 3); break;
    case 4: micro(j, m0, 4); break;
    case 5: micro(j, m0, 5); break;
    default: micro(j, m0, 6); break;
    }
}

/* Zeros onto (OUT_ADD) or into (OUT_SET) y's rows [mb, me), columns [c0, c1): an empty K band,
 * whose streaming thread's partial sums are zeros. */
static void zero_band(const ifl_gemm_args *g, int32_t mb, int32_t me, int32_t c0, int32_t c1,
                      int out)
{
    for (int32_t m = mb; m < me; m++)
        for (int32_t c = c0; c < c1; c++) {
            float *yv = g->y + (size_t)m * g->N + c;
            *yv = out == OUT_SET ? 0.0f : *yv + 0.0f;
        }
}

/* Eight columns of six rows (r[0..5]) as six values per column, stored at p, p + 6, ..., p + 42:
 * an 8 x 8 transpose with two zero rows. Each 8-float store's last two are overwritten by the
 * next one's first; the last column stores only its six. */
IFL_ALWAYS_INLINE void transpose6x8(float *p, const __m256 *r)
{
    const __m256 z = _mm256_setzero_ps();
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, z, 0x44), s5 = _mm256_shuffle_ps(t4, z, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, z, 0x44), s7 = _mm256_shuffle_ps(t5, z, 0xee);
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(p + 6, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(p + 12, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(p + 18, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(p + 24, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(p + 30, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(p + 36, _mm256_permute2f128_ps(s2, s6, 0x31));
    __m256 last = _mm256_permute2f128_ps(s3, s7, 0x31);
    _mm_storeu_ps(p + 42, _mm256_castps256_ps128(last));
    _mm_storel_pi((__m64 *)(p + 46), _mm256_extractf128_ps(last, 1));
}

/* ap = x's rows [mb, me), columns [k0, k0 + kc) as panels of 6 rows, each kc x 6 (k-major:
 * the 6 values one step of the micro kernel broadcasts are adjacent); rows past me are zero.
 * Eight columns at a time through a register transpose, the last kc % 8 one by one. */
static void pack_x(float *ap, const float *x, int32_t K, int32_t mb, int32_t me, int32_t k0,
                   int32_t kc)
{
    const int32_t kc8 = kc & ~7;
    for (int32_t m0 = mb; m0 < me; m0 += 6) {
        float *p = ap + (size_t)(m0 - mb) * (size_t)kc;
        const float *xr[6];
        for (int i = 0; i < 6; i++)
            xr[i] = m0 + i < me ? x + (size_t)(m0 + i) * K + k0 : NULL;
        for (int32_t k = 0; k < kc8; k += 8) {
            __m256 r[6];
            for (int i = 0; i < 6; i++)
                r[i] = xr[i] ? _mm256_loadu_ps(xr[i] + k) : _mm256_setzero_ps();
            transpose6x8(p + (size_t)k * 6, r);
        }
        for (int32_t k = kc8; k < kc; k++)
            for (int i = 0; i < 6; i++)
                p[(size_t)k * 6 + i] = xr[i] ? xr[i][k] : 0.0f;
    }
}

/* One row block [mb, me): per K band, per IFL_GEMM_KC rows of it: x's block packed once, then per
 * 16-column strip of the thread's columns: every 6 rows over the strip's packed W (each weight
 * packed once per row block), the next strip packed into the other buffer a slice before each
 * group of rows. Each strip's running sums stay in the tile buffer between the blocks of a band. */
static void gemm_rows(const ifl_gemm_args *g, float *ap, float *bp2, float *tiles, int32_t mb,
                      int32_t me)
{
    micro_job j = {.y = g->y, .N = g->N, .ap = ap, .mb = mb};
    const int32_t groups = (me - mb + 5) / 6;
    for (int t = 0; t < g->n_bands; t++) {
        int32_t ks, ke;
        ifl_kernel_band(g->K, t, g->n_bands, &ks, &ke);
        int out = t == 0 && !g->accumulate ? OUT_SET : OUT_ADD;
        if (ks == ke) {
            zero_band(g, mb, me, g->n0, g->n1, out);
            continue;
        }
        for (int32_t k0 = ks; k0 < ke; k0 += IFL_GEMM_KC) {
            j.kc = ke - k0 < IFL_GEMM_KC ? ke - k0 : IFL_GEMM_KC;
            j.from_tile = k0 > ks;
            j.out = k0 + j.kc < ke ? OUT_TILE : out;
            pack_x(ap, g->x, g->K, mb, me, k0, j.kc);
            pack(bp2, g->W, k0, 0, j.kc, g->n0);
            /* whole panels of 8 rows per slice */
            const int32_t slice = (j.kc + groups - 1) / groups;
            for (int32_t n0 = g->n0, s = 0; n0 < g->n1; n0 += 16, s++) {
                j.n0 = n0;
                j.cols = g->n1 - n0 < 16 ? g->n1 - n0 : 16;
                j.tile = tiles + (size_t)s * IFL_GEMM_MC * 16;
                j.bp = bp2 + (size_t)(s & 1) * IFL_GEMM_KC * 16;
                float *next = bp2 + (size_t)(~s & 1) * IFL_GEMM_KC * 16;
                /* rows of the next strip packed: groups slices of slice rows cover kc */
                int32_t packed = n0 + 16 < g->n1 ? 0 : j.kc;
                for (int32_t m0 = mb; m0 < me; m0 += 6) {
                    if (packed < j.kc) {
                        int32_t end = packed + slice < j.kc ? packed + slice : j.kc;
                        pack(next, g->W, k0, packed, end, n0 + 16);
                        packed = end;
                    }
                    micro_rows(&j, m0, me - m0 < 6 ? me - m0 : 6);
                }
            }
        }
    }
}

/* Per block of up to IFL_GEMM_MC rows of x: gemm_rows. A strip's packed W (IFL_GEMM_KC x 16
 * floats, 8 KiB) stays in L1 while the row block's packed x (IFL_GEMM_MC x IFL_GEMM_KC, 48 KiB,
 * in L2) passes over it; the next strip's buffer is the 8 KiB after it. */
void ifl_gemm_avx2(const ifl_gemm_args *g)
{
    float *ap = (float *)(((uintptr_t)g->scratch + 63) & ~(uintptr_t)63);
    float *bp2 = ap + IFL_GEMM_MC * IFL_GEMM_KC;
    float *tiles = bp2 + 2 * IFL_GEMM_KC * 16;
    for (int32_t mb = 0; mb < g->M; mb += IFL_GEMM_MC)
        gemm_rows(g, ap, bp2, tiles, mb, g->M - mb < IFL_GEMM_MC ? g->M : mb + IFL_GEMM_MC);
}
#endif
