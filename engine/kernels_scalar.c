/* kernels_scalar.c: the scalar kernel family: portable C over the panel layouts, for any CPU and
 * every architecture, and the reference the vector families are tested against. Built with the
 * baseline flags only (whatever the compiler vectorises for the baseline is all it gets). */
#include "cpu_kernels_isa.h"

static void kn_panels_scalar(float *acc, int32_t lda, const float *x, int32_t ldx, int32_t K,
                             int32_t kb0, int32_t kb1, const void *W, int32_t NB, int32_t jb0,
                             int32_t jb1, int M, ifl_dtype dt)
{
    int32_t cw = ifl_panel_width(dt);
    size_t es = ifl_dtype_size(dt);
    for (int32_t kb = kb0; kb < kb1; kb++)
        for (int32_t jb = jb0; jb < jb1; jb++) {
            size_t blk = ((size_t)kb * NB + (size_t)jb) * 8 * (size_t)cw;
            for (int r = 0; r < 8 && kb * 8 + r < K; r++) {
                float w[32];
                ifl_convert_to_f32(w, dt, (const char *)W + (blk + (size_t)r * cw) * es,
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

static void nk_panels_scalar(float *y, int32_t ldy, const float *xp, int32_t KB, const void *W,
                             int32_t g0, int32_t g1, int32_t N, int M, ifl_dtype dt)
{
    int32_t cw = ifl_panel_width(dt);
    size_t es = ifl_dtype_size(dt);
    for (int32_t g = g0; g < g1; g++)
        for (int r = 0; r < 4 && g * 4 + r < N; r++)
            for (int m = 0; m < M; m++) {
                float s = 0;
                for (int32_t kb = 0; kb < KB; kb++) {
                    float w[32];
                    size_t off = (((size_t)g * KB + (size_t)kb) * 4 + (size_t)r) * (size_t)cw;
                    ifl_convert_to_f32(w, dt, (const char *)W + off * es, (size_t)cw);
                    const float *xv = xp + (size_t)m * KB * cw + (size_t)kb * cw;
                    for (int32_t c = 0; c < cw; c++)
                        s += xv[c] * w[c];
                }
                y[(size_t)m * ldy + (size_t)(g - g0) * 4 + r] = s;
            }
}

static void q8_tiles_scalar(float *y, int32_t ldy, const int16_t *xq, const float *xs, int32_t KB,
                            const void *W, int32_t j0, int32_t j1, int M)
{
    ifl_q8_tiles_c(y, ldy, xq, xs, KB, W, j0, j1, M);
}

static void exp_scalar(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = ifl_exp_scalar(x[i]);
}

static void gelu_tanh_scalar(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = ifl_gelu_tanh_scalar(x[i]);
}

static void layernorm_scalar(float *out, const float *x, const float *w, const float *b, int32_t C,
                             float eps)
{
    ifl_layernorm_c(out, x, w, b, C, eps);
}

static void attn_scores_scalar(float *o, int32_t ldo, const float *q, int32_t ldq, int nq,
                             const float *kt, int32_t D, int32_t BS)
{
    ifl_attn_scores_tile_c(o, ldo, q, ldq, nq, kt, D, BS);
}

static void attn_values_scalar(float *out, int32_t ldo, const float *p, int32_t ldp, int nq,
                             const float *vb, int32_t cnt, int32_t D)
{
    ifl_attn_values_tile_c(out, ldo, p, ldp, nq, vb, cnt, D);
}

static float max_scalar(const float *x, size_t n)
{
    return ifl_max_c(x, n);
}

static void scale_scalar(float *x, float s, size_t n)
{
    ifl_scale_c(x, s, n);
}

static float stream_read_scalar(const float *p, size_t n)
{
    float s = 0;
    for (size_t i = 0; i < n; i += 16) /* one load per cache line suffices to stream it */
        s += p[i];
    return s;
}

/* Eight independent multiply-add chains (mul + add: the baseline has no fused form). */
static double fma_loop_scalar(int64_t iters, float *sink)
{
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, m = 0.999999f, c = 1e-7f;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < 8; j++)
            a[j] = a[j] * m + c;
    float s = 0;
    for (int j = 0; j < 8; j++)
        s += a[j];
    *sink = s;
    return (double)iters * 8 * 2;
}

static const ifl_cpu_kernels k_scalar = {
    .isa = IFL_ISA_SCALAR,
    .desc = "portable C kernels",
    .kn_panels = kn_panels_scalar,
    .kn_max_m = 4,
    .nk_panels = nk_panels_scalar,
    .nk_max_m = 4,
    .bf16_group = 0,
    .unpermute_bf16 = NULL,
    .gemm = NULL,
    .gemm_above = {1 << 30, 1 << 30, 1 << 30, 1 << 30},
    .q8_tiles = q8_tiles_scalar,
    .q8_max_m = 4,
    .exp = exp_scalar,
    .gelu_tanh = gelu_tanh_scalar,
    .layernorm = layernorm_scalar,
    .attn_scores = attn_scores_scalar,
    .attn_values = attn_values_scalar,
    .max = max_scalar,
    .scale = scale_scalar,
    .stream_read = stream_read_scalar,
    .fma_loop = fma_loop_scalar,
};

const ifl_cpu_kernels *ifl_kernels_scalar(void)
{
    return &k_scalar;
}
