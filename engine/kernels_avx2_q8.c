/* kernels_avx2_q8.c: the avx2 family's q8 product (cpu_kernels_isa.h: q8_tiles). Compiled with the
 * family's target flags (CMakeLists.txt); the AVX-VNNI variant adds avxvnni to them for its
 * functions and runs only where ifl_cpu_has_avxvnni() says the CPU has it. No CPU here has
 * AVX-VNNI (nor does qemu 7.2's emulator), so that variant is only compiled: the same macro body
 * as the tested one with vpdpwssd in place of vpmaddwd + vpaddd (Q8_DEFINE).
 *
 * Per tile (32 inputs x 32 outputs, tensor.h) and row m of x, the steps of ifl_q8_tiles_c: for
 * each of the 16 pairs of inputs p, 16 of the 64 bytes at 64p are widened to 16-bit (one ymm: 8
 * outputs, each output's two values side by side), and one multiply-add of 16-bit pairs
 * (vpmaddwd + vpaddd, or vpdpwssd with AVX-VNNI) against row m's two inputs, broadcast as one
 * int32, adds xq[2p] * q(c, 2p) + xq[2p+1] * q(c, 2p+1) to output c's int32 sum. The sums are
 * exact (|xq| <= 32767, |q| <= 127: at most 32 * 32767 * 127 < 2^27 per tile), so their order is
 * free. After the 16 pairs each sum becomes a float and is fused-multiply-added, in kb order, with
 * d * sx (the column's f16 scale widened, times the row's block scale, rounded to f32 first):
 * exactly the reference's float steps, so the bits are the same (NaN payloads aside: with two
 * NaN operands which one an operation passes on is the compiler's choice of operand order, in
 * the reference too; the quantizer's NaN and f16 NaN/infinity scales come out the same).
 *
 * Loop order: per column of tiles (32 outputs), per tile, every block of up to Q8_RB rows; the
 * tile comes from memory once and from L1 for the other blocks, and the rows' float sums (at most
 * IFL_Q8_MAX_M x 32) stay in an L1 array across the column. A block widens each pair once for all
 * its rows: one or two rows take the tile's 32 outputs at once (4 widened registers, 4 or 8 int32
 * sums), three or four its two halves of 16 outputs one after the other (2 widened registers, 2
 * sums per row). The int32 sums must stay in registers through the pair loop, which GCC 12 does
 * only with an empty asm naming each sum at the end of every pair; without it, it rotated the
 * sums through copies and spilled some each pair (one thread, weights in L2, K = 768: 44-56 ->
 * 61-69 G multiply-adds/s for 2-16 rows). Eight sums is the most that stays clean: six rows (12
 * sums, a product and a broadcast: all 16 registers) spilled (55-58 against 66-67 at 8 rows),
 * five gained nothing clear over four. Unrolling the 16 pairs fully made GCC load everything
 * first and spill (27-38). From two rows on the vector integer units bound it (per 16
 * multiply-adds a vpmaddwd, a vpaddd and part of a widening and a broadcast): the 61-69 G above,
 * against the FMA probe's 51 G f32 multiply-adds per thread that bound the 16-bit kernels, which
 * is what makes q8 faster than bf16 at batch 64 and in prefill.
 *
 * Prefetch (for decode: one row takes ~45 GB/s per thread from L2, more than the host's memory
 * gives, so the weight stream is what counts): one line per pair of each tile, Q8_PF_BYTES ahead,
 * by the first block of rows, and the first Q8_PF_BYTES of the call's columns as it starts; never
 * past the call's last column (the driver hands a one-row product out a column of tiles at a time,
 * claimed by the threads in turn, so the lines after a call's end are likely another thread's). One
 * row on 2 threads, 107 MB of tiles at K = 768, against the memory probe's plain read of the same
 * bytes alternated: no software prefetch 66-71% of its rate; each tile's 17 lines at once as it
 * starts, 4 tiles ahead, 84-89%; the same 1 tile ahead and kept to the call's columns, 89-95%;
 * a line per pair 2 tiles ahead, kept to the call's columns, 96-104%. */
#include "cpu_kernels_isa.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

/* The VNNI variant's target, on top of the file's flags. */
#define Q8_VNNI_TARGET __attribute__((target("avxvnni")))

#define PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T0)

enum {
    /* Rows per block: 2 x Q8_RB int32 sums in registers (see above). */
    Q8_RB = 4,
    Q8_PAIRS = IFL_Q8_BLOCK / 2,
    /* Software prefetch of the weight stream this far ahead (see above); a whole number of tiles,
     * so a tile's lines this far ahead are all in the call's columns or none is. */
    Q8_PF_BYTES = 2 * IFL_Q8_TILE_BYTES,
};

/* acc + for each int32 lane, the sum of the products of its two 16-bit halves in w and x. No
 * saturation in either form: vpmaddwd saturates only when both halves of both are -32768, and
 * the weights are >= -127; vpdpwssd (not vpdpwssds) wraps, and the exact sums fit in int32. */
#define Q8_DOT_MADD(acc, w, x) _mm256_add_epi32((acc), _mm256_madd_epi16((w), (x)))
#define Q8_DOT_VNNI(acc, w, x) _mm256_dpwssd_avx_epi32((acc), (w), (x))

/* Outputs 8g .. 8g+7 of pair p of tile t, widened to 16-bit (each output's two values
 * side by side). */
IFL_ALWAYS_INLINE __m256i q8_w8(const uint8_t *t, int p, int g)
{
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(t + 64 * p + 16 * g)));
}

/* Pair p's two inputs of a row (xb = its block's 32) in every int32 lane: xq[2p] in the low 16
 * bits, xq[2p+1] in the high (little-endian), the order of a weight pair's two values. */
IFL_ALWAYS_INLINE __m256i q8_pair(const int16_t *xb, int p)
{
    int32_t v;
    memcpy(&v, xb + 2 * p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* Q8_DEFINE(NAME, TARGET, DOT) defines NAME, q8_tiles compiled for TARGET (empty, or
 * Q8_VNNI_TARGET) with DOT as the 16-bit multiply-add (a macro, because an always-inline body
 * cannot hold the VNNI intrinsic unless it carries the VNNI target itself, and then the other
 * variant could not inline it).
 *
 * NAME##_rows: tile t for R rows (row r's block of 32 int16 at xb + ldx r, its block scale at
 * sx[lds r], its float sums at fa + 32 r), outputs 8 g0 .. 8 (g0 + NG); the first half (g0 0)
 * prefetches the line at pf + 64p with pair p. R and NG are constants where it is inlined (the
 * sums then stay in registers). */
#define Q8_DEFINE(NAME, TARGET, DOT)                                                               \
    static inline __attribute__((always_inline)) TARGET void NAME##_rows(                          \
        float *fa, const uint8_t *t, const uint8_t *pf, const int16_t *xb, size_t ldx,             \
        const float *sx, size_t lds, const int R, const int NG, const int g0)                      \
    {                                                                                              \
        __m256i isum[Q8_RB][4];                                                                    \
        for (int r = 0; r < R; r++)                                                                \
            for (int g = 0; g < NG; g++)                                                           \
                isum[r][g] = _mm256_setzero_si256();                                               \
        for (int p = 0; p < Q8_PAIRS; p++) {                                                       \
            __m256i w[4];                                                                          \
            if (g0 == 0)                                                                           \
                PREFETCH(pf + 64 * p);                                                             \
            for (int g = 0; g < NG; g++)                                                           \
                w[g] = q8_w8(t, p, g0 + g);                                                        \
            for (int r = 0; r < R; r++) {                                                          \
                __m256i xp = q8_pair(xb + ldx * (size_t)r, p);                                     \
                for (int g = 0; g < NG; g++)                                                       \
                    isum[r][g] = DOT(isum[r][g], w[g], xp);                                        \
            }                                                                                      \
            /* each sum in a register here: GCC spills them otherwise (see above) */               \
            for (int r = 0; r < R; r++)                                                            \
                for (int g = 0; g < NG; g++)                                                       \
                    __asm__("" : "+x"(isum[r][g]));                                                \
        }                                                                                          \
        __m256 d[4];                                                                               \
        for (int g = 0; g < NG; g++)                                                               \
            d[g] = _mm256_cvtph_ps(                                                                \
                _mm_loadu_si128((const __m128i *)(t + IFL_Q8_SCALES_AT + 16 * (g0 + g))));         \
        for (int r = 0; r < R; r++) {                                                              \
            __m256 s = _mm256_set1_ps(sx[lds * (size_t)r]);                                        \
            for (int g = 0; g < NG; g++) {                                                         \
                float *f = fa + 32 * r + 8 * (g0 + g);                                             \
                __m256 a = _mm256_load_ps(f);                                                      \
                a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][g]), _mm256_mul_ps(d[g], s), a);    \
                _mm256_store_ps(f, a);                                                             \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    TARGET static void NAME(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB, \
                            const void *W, int32_t j0, int32_t j1, int M)                          \
    {                                                                                              \
        const size_t ldx = (size_t)KB * IFL_Q8_BLOCK;                                              \
        float fa[IFL_Q8_MAX_M][IFL_Q8_TILE_N] __attribute__((aligned(32)));                        \
        const uint8_t *w0 = (const uint8_t *)W + (size_t)j0 * (size_t)KB * IFL_Q8_TILE_BYTES;      \
        const size_t span = (size_t)(j1 - j0) * (size_t)KB * IFL_Q8_TILE_BYTES;                    \
        const uint8_t *wend = w0 + span;                                                           \
        for (size_t o = 0; o < span && o < Q8_PF_BYTES; o += 64)                                   \
            PREFETCH(w0 + o);                                                                      \
        for (int32_t j = j0; j < j1; j++) {                                                        \
            const uint8_t *col = (const uint8_t *)W + (size_t)j * (size_t)KB * IFL_Q8_TILE_BYTES;  \
            memset(fa, 0, (size_t)M * sizeof fa[0]);                                               \
            for (int32_t kb = 0; kb < KB; kb++) {                                                  \
                const uint8_t *t = col + (size_t)kb * IFL_Q8_TILE_BYTES;                           \
                const uint8_t *pf = wend - t > Q8_PF_BYTES ? t + Q8_PF_BYTES : t;                  \
                PREFETCH(pf + IFL_Q8_SCALES_AT);                                                   \
                for (int m0 = 0; m0 < M; m0 += Q8_RB) {                                            \
                    float *fb = fa[m0];                                                            \
                    const uint8_t *pfb = m0 ? t : pf; /* the first block of rows asks */           \
                    const int16_t *xb = xq + (size_t)m0 * ldx + (size_t)kb * IFL_Q8_BLOCK;         \
                    const float *sx = xs + (size_t)m0 * (size_t)KB + kb;                           \
                    const size_t lds = (size_t)KB;                                                 \
                    switch (M - m0 < Q8_RB ? M - m0 : Q8_RB) {                                     \
                    case 1: NAME##_rows(fb, t, pfb, xb, ldx, sx, lds, 1, 4, 0); break;             \
                    case 2: NAME##_rows(fb, t, pfb, xb, ldx, sx, lds, 2, 4, 0); break;             \
                    case 3:                                                                        \
                        NAME##_rows(fb, t, pfb, xb, ldx, sx, lds, 3, 2, 0);                        \
                        NAME##_rows(fb, t, pfb, xb, ldx, sx, lds, 3, 2, 2);                        \
                        break;                                                                     \
                    default:                                                                       \
                        NAME##_rows(fb, t, pfb, xb, ldx, sx, lds, 4, 2, 0);                        \
                        NAME##_rows(fb, t, pfb, xb, ldx, sx, lds, 4, 2, 2);                        \
                        break;                                                                     \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
            for (int m = 0; m < M; m++)                                                            \
                memcpy(y + (size_t)m * ldy + (size_t)(j - j0) * IFL_Q8_TILE_N, fa[m],              \
                       sizeof fa[m]);                                                              \
        }                                                                                          \
    }
_Static_assert(Q8_RB == 4, "Q8_DEFINE's switch has a case for each row count up to Q8_RB");
_Static_assert(IFL_Q8_AVX2_MAX_M <= IFL_Q8_MAX_M, "the float sums' array holds every row");

Q8_DEFINE(q8_tiles_madd, , Q8_DOT_MADD)
Q8_DEFINE(q8_tiles_vnni, Q8_VNNI_TARGET, Q8_DOT_VNNI)

/* The variant is chosen on each call: ifl_cpu_has_avxvnni() reads $INFLIGHT_NO_VNNI each time (so
 * a test can switch paths in one process), against at least one column of tiles per call. */
void ifl_q8_tiles_avx2(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                       const void *W, int32_t j0, int32_t j1, int M)
{
    if (ifl_cpu_has_avxvnni())
        q8_tiles_vnni(y, ldy, xq, xs, KB, W, j0, j1, M);
    else
        q8_tiles_madd(y, ldy, xq, xs, KB, W, j0, j1, M);
}
#else
/* Not an x86-64 build, or the compiler lacks the flags: the family's table is NULL
 * (kernels_avx2.c) and nothing calls this. */
void ifl_q8_tiles_avx2(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                       const void *W, int32_t j0, int32_t j1, int M)
{
    ifl_q8_tiles_c(y, ldy, xq, xs, KB, W, j0, j1, M);
}
#endif
