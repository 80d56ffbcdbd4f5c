/* cpu_kernels_isa.h: the table of one kernel family (scalar, avx2, avx512: cpu_isa.h) and the
 * plain-C loops every family shares. Internal to the CPU engine: cpu_kernels.c drives the tables,
 * kernels_<isa>.c fill them.
 *
 * Each kernels_<isa>.c is compiled with its own target flags (CMakeLists.txt), so the shared loops
 * below, being static inline, are compiled (and auto-vectorised) once per family, and nothing of a
 * family runs unless ifl_isa_supported said the CPU has it. The weight layouts are the same for
 * every family (tensor.h: 64-byte panel rows); what differs is the order in which a family keeps
 * bf16 columns in its partial sums (bf16_group). */
#ifndef IFL_CPU_KERNELS_ISA_H
#define IFL_CPU_KERNELS_ISA_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cpu_isa.h"
#include "cpu_kernels.h"
#include "tensor.h"

#define IFL_ALWAYS_INLINE static inline __attribute__((always_inline))

/* CALL(MM, DT) with the weights' float format dt (a variable in scope) as a constant, so that a
 * panel kernel is compiled once per format. q8 has kernels of its own (q8_tiles): the driver never
 * hands it to a float kernel, and a format not named here stops the process rather than running
 * as another. */
#define BY_DTYPE(CALL, MM)                                                                         \
    do {                                                                                           \
        if (dt == IFL_DTYPE_F32)                                                                   \
            CALL(MM, IFL_DTYPE_F32);                                                               \
        else if (dt == IFL_DTYPE_F16)                                                              \
            CALL(MM, IFL_DTYPE_F16);                                                               \
        else if (dt == IFL_DTYPE_BF16)                                                             \
            CALL(MM, IFL_DTYPE_BF16);                                                              \
        else                                                                                       \
            __builtin_trap();                                                                      \
    } while (0)
_Static_assert(IFL_DTYPE_COUNT == 4, "BY_DTYPE names every float format; q8 is the fourth");

/* [c0, c1) of n items for thread ith of nth, in multiples of `align`: how the driver shares work
 * out, here because the register-blocked product must know the streaming kernels' K bands. */
static inline void ifl_kernel_split(int32_t n, int ith, int nth, int32_t align, int32_t *c0,
                                    int32_t *c1)
{
    int32_t per = (n + nth - 1) / nth;
    per = (per + align - 1) / align * align;
    *c0 = per * ith < n ? per * ith : n;
    *c1 = *c0 + per < n ? *c0 + per : n;
}

/* Rows [start, end) of W (K rows) that streaming thread t of nth sums on its own: 8-row panels
 * shared out by ifl_kernel_split. */
static inline void ifl_kernel_band(int32_t K, int t, int nth, int32_t *start, int32_t *end)
{
    int32_t kb0, kb1;
    ifl_kernel_split((K + 7) / 8, t, nth, 1, &kb0, &kb1);
    *start = kb0 * 8 < K ? kb0 * 8 : K;
    *end = kb1 * 8 < K ? kb1 * 8 : K;
}

/* A compute-bound product for one thread: columns [n0, n1) of y (M, N) = [y +] x (M, K) @ W for
 * a (K, N) W in any layout, for all M rows; bias and activation are the driver's. n0 and n1 are
 * multiples of 16 except at N. Each sum must come out exactly as the streaming kernels' (their
 * finish): per K band of the n_bands streaming threads (ifl_kernel_band) one fused multiply-add
 * chain in k order from zero, the bands then added left to right onto y (accumulate) or onto the
 * first band. scratch holds IFL_GEMM_SCRATCH_FLOATS(N) floats. */
typedef struct {
    float *y;
    const float *x;
    int32_t M, K, N;
    const ifl_mat *W;
    int accumulate;
    int32_t n0, n1;
    int n_bands;
    float *scratch;
} ifl_gemm_args;

/* The product's blocking: 128 rows of W per pass, up to 96 rows of x per block. Scratch: x's block
 * packed, two strips of W packed (the current one and the next), and the running sums of every
 * strip of a thread's columns (up to max_n of them), IFL_GEMM_SCRATCH_FLOATS(max_n) floats. */
#define IFL_GEMM_KC 128
#define IFL_GEMM_MC 96
/* Queries of one sequence and head that share a pass over each KV block (prefill). */
#define IFL_ATTN_TILE 6
#define IFL_ATTN_Q1_BLOCKS 4
/* The block size (slots) attn_scores_q1 is written for: one 16-float row per dimension. */
#define IFL_ATTN_Q1_BS 16
/* CALL(NB) with NB the block count n (1..IFL_ATTN_Q1_BLOCKS) as a constant: a family's
 * attn_scores_q1 compiles its kernel once per block count. */
#define BY_Q1_BLOCKS(n, CALL)                                                                      \
    do {                                                                                           \
        switch (n) {                                                                               \
        case 1: CALL(1); break;                                                                    \
        case 2: CALL(2); break;                                                                    \
        case 3: CALL(3); break;                                                                    \
        default: CALL(4); break;                                                                   \
        }                                                                                          \
    } while (0)
_Static_assert(IFL_ATTN_Q1_BLOCKS == 4, "BY_Q1_BLOCKS has a case for each count up to it");
#define IFL_GEMM_SCRATCH_FLOATS(max_n)                                                             \
    ((size_t)IFL_GEMM_MC * IFL_GEMM_KC + 2 * IFL_GEMM_KC * 16 +                                    \
     (size_t)IFL_GEMM_MC * (((size_t)(max_n) + 15) & ~(size_t)15) + 64)

typedef struct ifl_cpu_kernels {
    ifl_isa isa;
    const char *desc; /* e.g. "AVX2+FMA+F16C kernels" */
    /* acc (M, lda) += x (M, ldx) @ W for the 8-row panels kb0..kb1 and panel columns jb0..jb1 of
     * a KN8 matrix with K rows and NB panel columns (jb0 even); M in 1..max(kn_max_m,
     * kn_one_pass_m). bf16 columns of acc are in bf16_group order. */
    void (*kn_panels)(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K, int32_t kb0,
                      int32_t kb1, const void *W, int32_t NB, int32_t jb0, int32_t jb1, int M,
                      ifl_dtype dt);
    int kn_max_m;
    /* A product of at most this many rows runs as one call (its weights come from memory once
     * and are not swept again from L2); larger ones in groups of kn_max_m. 0: kn_max_m. */
    int kn_one_pass_m;
    /* y[m][n - g0 * 4] = x[m] . W[n] for the 4-row panels g0..g1 of an NK4 matrix (N rows, KB
     * panel columns); xp is x padded by pad_x in bf16_group order; M in 1..nk_max_m. */
    void (*nk_panels)(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W, int32_t g0,
                      int32_t g1, int32_t N, int M, ifl_dtype dt);
    int nk_max_m;
    /* Dot products over more than nk_widen_above[dt] rows (NULL nk_widen: never): the 16-bit NK4
     * panels g0..g1 (KB panel columns) widened once per chunk into f32 NK4 panels of 2 * KB
     * columns, dst (4 * (g1 - g0) rows, 2 * KB * 16), holding every value in the lane nk_panels
     * multiplies it in on W; nk_panels then runs on the copy as f32 and every sum comes out bit
     * for bit as on W (the same products in the same order), without converting each weight
     * again for every group of rows. */
    void (*nk_widen)(float *dst, const void *W, int32_t KB, int32_t g0, int32_t g1, ifl_dtype dt);
    int32_t nk_widen_above[IFL_DTYPE_COUNT];
    /* 0: bf16 columns in natural order; g: each g columns held as [g/2 even | g/2 odd]. */
    int bf16_group;
    /* Puts n (a multiple of bf16_group) partial sums back in column order; NULL when bf16_group
     * is 0. */
    void (*unpermute_bf16)(float *p, int32_t n);
    /* The register-blocked product for larger M (NULL: the panel kernels at every size), and the
     * rows above which it is used, per dtype. */
    void (*gemm)(const ifl_gemm_args *g);
    int32_t gemm_above[IFL_DTYPE_COUNT];
    /* q8 weights (tensor.h's tiles), every row count: output tiles j0..j1 of a matrix with KB
     * blocks along K, for M rows of x (1..q8_max_m) quantized by ifl_q8_quantize_rows (row m's
     * int16 values at xq + m * 32 KB, its block scales at xs + m * KB). For each row m and output
     * column c of tile j, y[m * ldy + 32 (j - j0) + c] = acc after
     *     acc = 0; for kb = 0 .. KB-1: acc = fmaf((float)isum, d * xs[m * KB + kb], acc)
     * where isum is the exact int32 sum over the block's 32 inputs of xq * q and d the tile's
     * scale of column c as f32 (d * xs rounded to f32 before the fused multiply-add). Every
     * family computes exactly this (integer sums are exact in any order), so every family, row
     * count and thread count gives the same bits. */
    void (*q8_tiles)(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                     const void *W, int32_t j0, int32_t j1, int M);
    int q8_max_m;
    void (*exp)(float *y, const float *x, size_t n);
    void (*gelu_tanh)(float *x, size_t n);
    void (*layernorm)(float *out, const float *x, const float *w, const float *b, int32_t C,
                      float eps);
    /* Attention over one KV block for nq queries of one head (1..IFL_ATTN_TILE, consecutive
     * tokens of a prefill share the block's loads): o[i * ldo + sl] = q_i . kt[:, sl] for BS slots
     * (kt is (D, BS), q_i at q + i * ldq); and out[i * ldo + d] += sum over cnt slots of
     * p[i * ldp + sl] * vb[sl][d] (vb is (BS, D)). Each sum is one chain in d (scores) or slot
     * (values) order, so a query's result does not depend on nq. */
    void (*attn_scores)(float *o, int32_t ldo, const float *q, int32_t ldq, int nq,
                        const float *kt, int32_t D, int32_t BS);
    void (*attn_values)(float *out, int32_t ldo, const float *p, int32_t ldp, int nq,
                        const float *vb, int32_t cnt, int32_t D);
    /* Optional (NULL: attn_scores per block): one query over nblk (1..IFL_ATTN_Q1_BLOCKS) blocks
     * of IFL_ATTN_Q1_BS slots at once (the caller uses attn_scores for other block sizes),
     * o[j * IFL_ATTN_Q1_BS + sl] = q . kt[j][:, sl], each sum the same chain as attn_scores's; a
     * decode step's single query keeps more chains in flight than one block's. */
    void (*attn_scores_q1)(float *o, const float *q, const float *const *kt, int nblk, int32_t D);
    /* Largest of n values, and x[i] *= s. */
    float (*max)(const float *x, size_t n);
    void (*scale)(float *x, float s, size_t n);
    /* The memory probe's loop: reads n floats (n a multiple of 64, 64-byte aligned), returns a
     * value that depends on all of them. */
    float (*stream_read)(const float *p, size_t n);
    /* The FMA probe's loop: iters rounds of independent multiply-adds on registers; returns the
     * floating-point operations done. */
    double (*fma_loop)(int64_t iters, float *sink);
} ifl_cpu_kernels;

/* Rows of x for the q8 kernels: row m (K values at x + m * ldx) as int16 at xq + m * 32 KB (KB =
 * ceil(K / 32); zero past K) with one scale per block of 32 at xs + m * KB: s = the block's largest
 * |x| / 32767, q = x * (32767 / largest |x|) rounded to the nearest integer, ties to even (all 0
 * where the block is 0; s NaN where it holds a NaN or an infinity, so the row's outputs are NaN).
 * Compiled once (cpu_kernels.c): the same bits for every family. */
void ifl_q8_quantize_rows(int16_t *xq, float *xs, const float *x, int M, int32_t ldx, int32_t K);
/* The largest M any family's q8_tiles takes (scratch is sized for it). */
#define IFL_Q8_MAX_M 16

/* The table of family isa, or NULL where this binary lacks it. */
const ifl_cpu_kernels *ifl_kernels_scalar(void);
const ifl_cpu_kernels *ifl_kernels_avx2(void);
const ifl_cpu_kernels *ifl_kernels_avx512(void);

/* The avx2 family's register-blocked product (kernels_avx2_gemm.c). */
void ifl_gemm_avx2(const ifl_gemm_args *g);

/* The q8 kernels of the vector families (kernels_avx2_q8.c, kernels_avx512_q8.c), q8_tiles as
 * specified above, and the most rows each takes at once. */
void ifl_q8_tiles_avx2(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                       const void *W, int32_t j0, int32_t j1, int M);
void ifl_q8_tiles_avx512(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                         const void *W, int32_t j0, int32_t j1, int M);
#define IFL_Q8_AVX2_MAX_M 16
#define IFL_Q8_AVX512_MAX_M 16

/* ---- loops every family shares (compiled per family) ----------------------------------------- */

/* The sum of eight lanes, in one fixed order. */
IFL_ALWAYS_INLINE float ifl_lanes8_sum(const float *s)
{
    return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

/* Mean and variance as eight running sums, lane l over the elements i = l (mod 8), then the
 * lanes in one order and the last C % 8 elements: the compiler keeps the lanes in vector
 * registers, where one serial chain of C adds waited on each add's latency (64 rows of 768 took
 * 1.2-1.9 ms of a batch-64 step). Each lane is the same chain in every family (no fused
 * multiply-adds in strict ISO C), so every family's result is the same. */
IFL_ALWAYS_INLINE void ifl_layernorm_c(float *out, const float *x, const float *w, const float *b,
                                       int32_t C, float eps)
{
    float s[8] = {0}, q[8] = {0};
    int32_t c8 = C & ~7;
    for (int32_t i = 0; i < c8; i += 8)
        for (int l = 0; l < 8; l++)
            s[l] += x[i + l];
    float mean = ifl_lanes8_sum(s);
    for (int32_t i = c8; i < C; i++)
        mean += x[i];
    mean /= (float)C;
    for (int32_t i = 0; i < c8; i += 8)
        for (int l = 0; l < 8; l++) {
            float d = x[i + l] - mean;
            q[l] += d * d;
        }
    float var = ifl_lanes8_sum(q);
    for (int32_t i = c8; i < C; i++) {
        float d = x[i] - mean;
        var += d * d;
    }
    var /= (float)C;
    float rstd = 1.0f / sqrtf(var + eps);
    for (int32_t i = 0; i < C; i++)
        out[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

IFL_ALWAYS_INLINE void ifl_attn_scores_c(float *o, const float *q, const float *kt, int32_t D,
                                         int32_t BS)
{
    for (int32_t sl = 0; sl < BS; sl++)
        o[sl] = 0;
    for (int32_t d = 0; d < D; d++) {
        float qd = q[d];
        const float *kr = kt + (size_t)d * BS;
        for (int32_t sl = 0; sl < BS; sl++)
            o[sl] += qd * kr[sl];
    }
}

IFL_ALWAYS_INLINE void ifl_attn_values_c(float *out, const float *p, const float *vb, int32_t cnt,
                                         int32_t D)
{
    for (int32_t sl = 0; sl < cnt; sl++) {
        float ps = p[sl];
        const float *vr = vb + (size_t)sl * D;
        for (int32_t d = 0; d < D; d++)
            out[d] += ps * vr[d];
    }
}

/* The tiled forms for a family without its own: one query at a time (the same sums). */
IFL_ALWAYS_INLINE void ifl_attn_scores_tile_c(float *o, int32_t ldo, const float *q, int32_t ldq,
                                              int nq, const float *kt, int32_t D, int32_t BS)
{
    for (int i = 0; i < nq; i++)
        ifl_attn_scores_c(o + (size_t)i * ldo, q + (size_t)i * ldq, kt, D, BS);
}

IFL_ALWAYS_INLINE void ifl_attn_values_tile_c(float *out, int32_t ldo, const float *p, int32_t ldp,
                                              int nq, const float *vb, int32_t cnt, int32_t D)
{
    for (int i = 0; i < nq; i++)
        ifl_attn_values_c(out + (size_t)i * ldo, p + (size_t)i * ldp, vb, cnt, D);
}

IFL_ALWAYS_INLINE float ifl_max_c(const float *x, size_t n)
{
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

IFL_ALWAYS_INLINE void ifl_scale_c(float *x, float s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

/* The q8 product in plain C, exactly as q8_tiles is specified (the scalar family's, and the
 * reference the others are tested against). */
IFL_ALWAYS_INLINE void ifl_q8_tiles_c(float *y, int32_t ldy, const int16_t *xq, const float *xs,
                                      int32_t KB, const void *W, int32_t j0, int32_t j1, int M)
{
    for (int32_t j = j0; j < j1; j++) {
        const uint8_t *col = (const uint8_t *)W + (size_t)j * (size_t)KB * IFL_Q8_TILE_BYTES;
        for (int m = 0; m < M; m++) {
            const int16_t *xm = xq + (size_t)m * (size_t)KB * IFL_Q8_BLOCK;
            float acc[IFL_Q8_TILE_N] = {0};
            for (int32_t kb = 0; kb < KB; kb++) {
                const uint8_t *t = col + (size_t)kb * IFL_Q8_TILE_BYTES;
                const int16_t *xb = xm + (size_t)kb * IFL_Q8_BLOCK;
                int32_t isum[IFL_Q8_TILE_N] = {0};
                for (int p = 0; p < IFL_Q8_BLOCK / 2; p++)
                    for (int c = 0; c < IFL_Q8_TILE_N; c++)
                        isum[c] += (int32_t)xb[2 * p] * (int8_t)t[64 * p + 2 * c] +
                                   (int32_t)xb[2 * p + 1] * (int8_t)t[64 * p + 2 * c + 1];
                float sx = xs[(size_t)m * KB + kb];
                for (int c = 0; c < IFL_Q8_TILE_N; c++) {
                    uint16_t h;
                    memcpy(&h, t + IFL_Q8_SCALES_AT + 2 * c, 2);
                    acc[c] = fmaf((float)isum[c], ifl_f16_to_f32(h) * sx, acc[c]);
                }
            }
            memcpy(y + (size_t)m * ldy + (size_t)(j - j0) * IFL_Q8_TILE_N, acc, sizeof acc);
        }
    }
}

/* Cody-Waite range reduction + degree-6 Taylor polynomial on [-ln2/2, ln2/2]: the scalar exp
 * every family's vector exp matches (max relative error ~2e-7). */
IFL_ALWAYS_INLINE float ifl_exp_scalar(float x)
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

/* gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3); tanh(u) = 1 - 2 / (1 + e^2u).
 */
IFL_ALWAYS_INLINE float ifl_gelu_tanh_scalar(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    float e = ifl_exp_scalar(2.0f * u);
    return 0.5f * x * (2.0f - 2.0f / (1.0f + e));
}

#endif
