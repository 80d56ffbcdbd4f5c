/* kernels_avx512_q8.c: the avx512 family's q8 product (cpu_kernels_isa.h: q8_tiles). Compiled with
 * the family's target flags (CMakeLists.txt); the VNNI variant adds avx512vnni to them for one
 * function and runs only where ifl_cpu_has_avx512vnni() says the CPU has it.
 *
 * Per tile (32 inputs x 32 outputs, tensor.h) and row m of x, the same steps as ifl_q8_tiles_c:
 * for each of the 16 pairs of inputs p, the tile's 64 bytes at 64p are widened to 16-bit (two zmm:
 * outputs 0-15 and 16-31, output c's two values side by side), and one multiply-add of 16-bit
 * pairs (vpmaddwd + vpaddd, or vpdpwssd with VNNI) against row m's two inputs broadcast as one
 * int32 adds xq[2p] * q(c, 2p) + xq[2p+1] * q(c, 2p+1) to output c's int32 sum. The sums are exact
 * (|xq| <= 32767, |q| <= 128: at most 32 * 32767 * 128 < 2^27 per tile), so the pairs may go into
 * several partial sums in any order. After the 16 pairs each output's sum becomes a float and is
 * fused-multiply-added, in kb order, with d * sx (the column's f16 scale widened, times the row's
 * block scale, rounded to f32 first): exactly the reference's float steps, so the bits are the
 * same. Each widening of a tile's weights serves up to Q8_MR rows of x. */
#include "cpu_kernels_isa.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

/* The VNNI variant's target, on top of the file's flags. */
#define Q8_VNNI_TARGET __attribute__((target("avx512vnni")))

#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

enum {
    /* Rows of x per pass over a column of tiles: 2 int32 sums per row (32 outputs) in zmm
     * registers, 16 of the 32 for 8 rows, the rest for the two widened halves of a pair and the
     * broadcast inputs. More rows (up to IFL_Q8_AVX512_MAX_M) take further passes over the same
     * column, which is then in L1 or L2. */
    Q8_MR = 8,
    Q8_PAIRS = IFL_Q8_BLOCK / 2,
    /* Software prefetch of the weight stream, this far ahead (four tiles). Not measured on an
     * AVX-512 machine (none here); the family's float kernels measured 2048 bytes worth it
     * (kernels_avx512.c). */
    Q8_PF_BYTES = 4 * IFL_Q8_TILE_BYTES,
};

/* acc + for each int32 lane, the sum of the products of its two 16-bit halves in w and x, exact
 * in both forms: vpmaddwd's one overflowing case needs all four 16-bit values -32768 (the weights
 * are >= -128), and vpdpwssd (not vpdpwssds, which saturates) adds without saturating. */
#define Q8_DOT_MADD(acc, w, x) _mm512_add_epi32((acc), _mm512_madd_epi16((w), (x)))
#define Q8_DOT_VNNI(acc, w, x) _mm512_dpwssd_epi32((acc), (w), (x))

/* 32 bytes from p (any alignment). */
IFL_ALWAYS_INLINE __m256i q8_load32(const uint8_t *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* Pair p's two inputs of a row (x = its xq + 2p) in every int32 lane: xq[2p] in the low 16 bits,
 * xq[2p+1] in the high (little-endian), the order of a weight pair's two values. */
IFL_ALWAYS_INLINE __m512i q8_pair(const int16_t *x)
{
    int32_t v;
    memcpy(&v, x, sizeof v);
    return _mm512_set1_epi32(v);
}

/* Q8_DEFINE(NAME, TARGET, DOT) defines NAME, q8_tiles for rows of x in blocks of Q8_MR, compiled
 * for TARGET (empty, or Q8_VNNI_TARGET) with DOT as the 16-bit multiply-add (a macro, because an
 * always-inline body cannot hold the VNNI intrinsic unless it carries the VNNI target itself,
 * and then the other variant could not inline it).
 *
 * NAME##_column: one column of tiles (KB tiles at col) for MR rows (row m's int16 values at
 * xq + 32 KB m, its block scales at xs + KB m), y[m * ldy + c] for the column's 32 outputs c. MR
 * and NS are constants where it is inlined (the register arrays then stay in registers): pair p
 * of a tile adds into partial sum set p % NS, so that one row (decode) has 2 NS independent
 * chains of vector adds in flight rather than 2; the sets are added (exactly) after the tile. */
#define Q8_DEFINE(NAME, TARGET, DOT)                                                               \
    static inline __attribute__((always_inline))                                                   \
    TARGET void NAME##_column(float *y, int32_t ldy, const int16_t *xq, const float *xs,           \
                              int32_t KB, const uint8_t *col, const int MR, const int NS)          \
    {                                                                                              \
        const size_t ldx = (size_t)KB * IFL_Q8_BLOCK;                                              \
        float acc[Q8_MR][IFL_Q8_TILE_N];                                                           \
        for (int m = 0; m < MR; m++)                                                               \
            for (int c = 0; c < IFL_Q8_TILE_N; c++)                                                \
                acc[m][c] = 0.0f;                                                                  \
        for (int32_t kb = 0; kb < KB; kb++) {                                                      \
            const uint8_t *t = col + (size_t)kb * IFL_Q8_TILE_BYTES;                               \
            const int16_t *xb = xq + (size_t)kb * IFL_Q8_BLOCK;                                    \
            __m512i isum[4][Q8_MR][2]; /* [set][row][outputs 0-15, 16-31] */                       \
            for (int s = 0; s < NS; s++)                                                           \
                for (int m = 0; m < MR; m++) {                                                     \
                    isum[s][m][0] = _mm512_setzero_si512();                                        \
                    isum[s][m][1] = _mm512_setzero_si512();                                        \
                }                                                                                  \
            for (int p0 = 0; p0 < Q8_PAIRS; p0 += NS)                                              \
                for (int s = 0; s < NS; s++) {                                                     \
                    const int p = p0 + s;                                                          \
                    PREFETCH(t + Q8_PF_BYTES + 64 * p);                                            \
                    __m512i w0 = _mm512_cvtepi8_epi16(q8_load32(t + 64 * p)); /* outputs 0-15 */   \
                    __m512i w1 = _mm512_cvtepi8_epi16(q8_load32(t + 64 * p + 32)); /* 16-31 */     \
                    for (int m = 0; m < MR; m++) {                                                 \
                        __m512i xp = q8_pair(xb + ldx * (size_t)m + 2 * p);                        \
                        isum[s][m][0] = DOT(isum[s][m][0], w0, xp);                                \
                        isum[s][m][1] = DOT(isum[s][m][1], w1, xp);                                \
                    }                                                                              \
                }                                                                                  \
            PREFETCH(t + Q8_PF_BYTES + IFL_Q8_SCALES_AT);                                          \
            __m512 d0 = _mm512_cvtph_ps(q8_load32(t + IFL_Q8_SCALES_AT));      /* outputs 0-15 */  \
            __m512 d1 = _mm512_cvtph_ps(q8_load32(t + IFL_Q8_SCALES_AT + 32)); /* 16-31 */         \
            for (int m = 0; m < MR; m++) {                                                         \
                __m512i i0 = isum[0][m][0], i1 = isum[0][m][1];                                    \
                for (int s = 1; s < NS; s++) {                                                     \
                    i0 = _mm512_add_epi32(i0, isum[s][m][0]);                                      \
                    i1 = _mm512_add_epi32(i1, isum[s][m][1]);                                      \
                }                                                                                  \
                __m512 sx = _mm512_set1_ps(xs[(size_t)m * KB + kb]);                               \
                __m512 a0 = _mm512_loadu_ps(acc[m]), a1 = _mm512_loadu_ps(acc[m] + 16);            \
                a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(d0, sx), a0);           \
                a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(d1, sx), a1);           \
                _mm512_storeu_ps(acc[m], a0);                                                      \
                _mm512_storeu_ps(acc[m] + 16, a1);                                                 \
            }                                                                                      \
        }                                                                                          \
        for (int m = 0; m < MR; m++)                                                               \
            memcpy(y + (size_t)m * ldy, acc[m], sizeof acc[m]);                                    \
    }                                                                                              \
                                                                                                   \
    TARGET static void NAME(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB, \
                            const void *W, int32_t j0, int32_t j1, int M)                          \
    {                                                                                              \
        for (int32_t j = j0; j < j1; j++) {                                                        \
            const uint8_t *col = (const uint8_t *)W + (size_t)j * (size_t)KB * IFL_Q8_TILE_BYTES;  \
            for (int m0 = 0; m0 < M; m0 += Q8_MR) {                                                \
                float *yb = y + (size_t)m0 * ldy + (size_t)(j - j0) * IFL_Q8_TILE_N;               \
                const int16_t *xqb = xq + (size_t)m0 * (size_t)KB * IFL_Q8_BLOCK;                  \
                const float *xsb = xs + (size_t)m0 * (size_t)KB;                                   \
                switch (M - m0 < Q8_MR ? M - m0 : Q8_MR) {                                         \
                case 1: NAME##_column(yb, ldy, xqb, xsb, KB, col, 1, 4); break;                    \
                case 2: NAME##_column(yb, ldy, xqb, xsb, KB, col, 2, 2); break;                    \
                case 3: NAME##_column(yb, ldy, xqb, xsb, KB, col, 3, 2); break;                    \
                case 4: NAME##_column(yb, ldy, xqb, xsb, KB, col, 4, 1); break;                    \
                case 5: NAME##_column(yb, ldy, xqb, xsb, KB, col, 5, 1); break;                    \
                case 6: NAME##_column(yb, ldy, xqb, xsb, KB, col, 6, 1); break;                    \
                case 7: NAME##_column(yb, ldy, xqb, xsb, KB, col, 7, 1); break;                    \
                default: NAME##_column(yb, ldy, xqb, xsb, KB, col, 8, 1); break;                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
_Static_assert(Q8_MR == 8, "Q8_DEFINE's switch has a case for each row count up to Q8_MR");
_Static_assert(Q8_PAIRS % 4 == 0, "every NS used (1, 2, 4) divides the pairs of a tile");

Q8_DEFINE(q8_tiles_madd, , Q8_DOT_MADD)
Q8_DEFINE(q8_tiles_vnni, Q8_VNNI_TARGET, Q8_DOT_VNNI)

/* The variant is chosen on each call: ifl_cpu_has_avx512vnni() reads $INFLIGHT_NO_VNNI each time
 * (so a test can switch paths in one process), about 40 ns with 37 environment variables
 * (measured), against at least one column of tiles per call (24 tiles for GPT-2's K = 768). */
void ifl_q8_tiles_avx512(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                         const void *W, int32_t j0, int32_t j1, int M)
{
    if (ifl_cpu_has_avx512vnni())
        q8_tiles_vnni(y, ldy, xq, xs, KB, W, j0, j1, M);
    else
        q8_tiles_madd(y, ldy, xq, xs, KB, W, j0, j1, M);
}
#else
/* Not an x86-64 build, or the compiler lacks the flags: the family's table is NULL
 * (kernels_avx512.c) and nothing calls this. */
void ifl_q8_tiles_avx512(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                         const void *W, int32_t j0, int32_t j1, int M)
{
    ifl_q8_tiles_c(y, ldy, xq, xs, KB, W, j0, j1, M);
}
#endif
