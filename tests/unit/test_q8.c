/* test_q8.c: 8-bit weights (tensor.h: q8 tiles) from the quantizer to the matrix product:
 *   a. ifl_mat_repack into q8, KN8 and NK4, every byte against an independent recomputation of
 *      the documented layout and rounding (scale = f16(max |w| / 127), q = round(w / scale)),
 *      padding zero, every value within half a step, small blocks (f16's subnormal scales) too; ifl_mat_get / ifl_mat_row_f32 read the values back; NaN, infinity and a
 *      scale past f16 are refused with the value's row and column
 *   b. every family's q8_tiles against the plain-C specification (ifl_q8_tiles_c), bit for bit,
 *      over block counts, tile ranges and row counts, writing nothing past its outputs; where the
 *      CPU has VNNI, once with it and once without ($INFLIGHT_NO_VNNI)
 *   c. the driver (ifl_matmul_*) in both orientations, with bias, accumulate and GELU: bit for bit
 *      the specification on the quantized rows, within 1e-4 (relative L2) of float64 on the
 *      dequantized weights, every row of an M-row product identical to the row alone, and the
 *      same bits on 1 and 3 threads; a NaN in a row of x makes that row's outputs NaN only. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_kernels_isa.h"
#include "rng.h"
#include "tensor.h"
#include "threadpool.h"
#include "testutil.h"

/* ---- a. the quantizer and the layout ----------------------------------------------------------- */

/* The byte offset of input k of output n in a q8 matrix with KB blocks along K, and of n's scale
 * in the tile, recomputed from tensor.h's description. */
static size_t ref_value_at(int32_t KB, int32_t k, int32_t n)
{
    size_t tile = ((size_t)(n / 32) * (size_t)KB + (size_t)(k / 32)) * 1088;
    return tile + (size_t)((k % 32) / 2) * 64 + (size_t)(n % 32) * 2 + (size_t)(k % 2);
}
static size_t ref_scale_at(int32_t KB, int32_t k, int32_t n)
{
    return ((size_t)(n / 32) * (size_t)KB + (size_t)(k / 32)) * 1088 + 1024 + (size_t)(n % 32) * 2;
}

/* W (rows, cols) f32 row-major quantized as `lay` and checked byte by byte; returns the tiles. */
static uint8_t *check_quantized(const float *w, int32_t rows, int32_t cols, ifl_layout lay)
{
    int kn = lay == IFL_LAYOUT_KN8;
    int32_t K = kn ? rows : cols, N = kn ? cols : rows, KB = (K + 31) / 32, NJ = (N + 31) / 32;
    size_t bytes = ifl_layout_bytes(lay, IFL_DTYPE_Q8, rows, cols);
    CHECKF(bytes == (size_t)KB * NJ * 1088, "%zu bytes for %d x %d", bytes, rows, cols);
    uint8_t *q = test_xmalloc(bytes), *want = test_xmalloc(bytes);
    memset(q, 0xa5, bytes);
    memset(want, 0, bytes);
    ifl_mat src = {.dtype = IFL_DTYPE_F32, .rows = rows, .cols = cols, .data = w};
    CHECK(ifl_mat_repack(q, lay, IFL_DTYPE_Q8, &src, NULL, NULL) == 0);
    for (int32_t n = 0; n < N; n++)
        for (int32_t kb = 0; kb < KB; kb++) {
            float amax = 0;
            for (int32_t k = kb * 32; k < K && k < kb * 32 + 32; k++) {
                float v = kn ? w[(size_t)k * cols + n] : w[(size_t)n * cols + k];
                amax = fabsf(v) > amax ? fabsf(v) : amax;
            }
            uint16_t h = ifl_f32_to_f16(amax / 127.0f);
            if (amax > 127.5f * ifl_f16_to_f32(h)) /* subnormal scales: one step up */
                h++;
            float d = ifl_f16_to_f32(h);
            memcpy(want + ref_scale_at(KB, kb * 32, n), &h, 2);
            for (int32_t k = kb * 32; k < K && k < kb * 32 + 32; k++) {
                float v = kn ? w[(size_t)k * cols + n] : w[(size_t)n * cols + k];
                long qi = d > 0 ? lrintf(v / d) : 0;
                qi = qi > 127 ? 127 : qi < -127 ? -127 : qi;
                want[ref_value_at(KB, k, n)] = (uint8_t)(int8_t)qi;
            }
        }
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += q[i] != want[i];
    CHECKF(bad == 0, "%s %d x %d: %zu of %zu bytes differ from the documented layout",
           kn ? "KN8" : "NK4", rows, cols, bad, bytes);
    /* read back: every element within half a step (+ the scale's f16 rounding) of the original */
    ifl_mat m = {.dtype = IFL_DTYPE_Q8, .layout = lay, .rows = rows, .cols = cols, .data = q};
    float *row = test_xmalloc((size_t)cols * sizeof *row);
    int far = 0, row_bad = 0;
    for (int32_t r = 0; r < rows; r++) {
        ifl_mat_row_f32(&m, r, row);
        for (int32_t c = 0; c < cols; c++) {
            float v = ifl_mat_get(&m, r, c), orig = w[(size_t)r * cols + c];
            int32_t k = kn ? r : c, n = kn ? c : r;
            uint16_t h;
            memcpy(&h, q + ref_scale_at(KB, k, n), 2);
            float d = ifl_f16_to_f32(h);
            if (fabsf(v - orig) > 0.5f * d * (1 + 1e-6f) + 1e-30f && far++ < 3)
                fprintf(stderr, "  %s %d x %d [%d, %d]: %g read back as %g (step %g)\n",
                        kn ? "KN8" : "NK4", rows, cols, r, c, (double)orig, (double)v, (double)d);
            row_bad += row[c] != v;
        }
    }
    CHECKF(far == 0 && row_bad == 0, "%d values beyond half a step, %d row reads differ", far,
           row_bad);
    free(row);
    free(want);
    return q;
}

static void test_quantizer(ifl_rng *rng)
{
    static const int32_t shapes[][2] = {{64, 96}, {37, 53}, {5, 7}, {100, 33}, {32, 32}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int32_t R = shapes[s][0], C = shapes[s][1];
        float *w = test_xmalloc((size_t)R * C * sizeof *w);
        for (int32_t i = 0; i < R * C; i++)
            w[i] = (float)ifl_rng_normal(rng) * 0.05f;
        for (int32_t c = 0; c < C && R > 3; c++) /* a zero block edge, an outlier, tiny values */
            w[c] = 0;
        w[(size_t)(R / 2) * C + C / 2] = 3.0f;
        w[(size_t)(R - 1) * C] = 1e-7f;
        if (R * C > 64) /* a block of small values: its scale is one of f16's subnormals */
            for (int32_t i = 0; i < 40; i++)
                w[(size_t)R * C - 1 - (size_t)i] *= 0.01f;
        free(check_quantized(w, R, C, IFL_LAYOUT_KN8));
        free(check_quantized(w, R, C, IFL_LAYOUT_NK4));
        free(w);
    }
    /* values q8 cannot hold: the first one found is named */
    const float bad_vals[3] = {NAN, INFINITY, 1e10f};
    for (int i = 0; i < 3; i++)
        for (int lay = 0; lay < 2; lay++) {
            float w[40 * 50];
            for (int j = 0; j < 40 * 50; j++)
                w[j] = 0.01f;
            w[17 * 50 + 33] = bad_vals[i];
            uint8_t *q = test_xmalloc(ifl_layout_bytes(IFL_LAYOUT_NK4, IFL_DTYPE_Q8, 40, 50) +
                                      ifl_layout_bytes(IFL_LAYOUT_KN8, IFL_DTYPE_Q8, 40, 50));
            ifl_mat src = {.dtype = IFL_DTYPE_F32, .rows = 40, .cols = 50, .data = w};
            int32_t br = -1, bc = -1;
            int rc = ifl_mat_repack(q, lay ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8, IFL_DTYPE_Q8, &src,
                                    &br, &bc);
            CHECKF(rc == -1 && br == 17 && bc == 33, "value %g: rc %d at [%d, %d]",
                   (double)bad_vals[i], rc, br, bc);
            free(q);
        }
    CHECK(ifl_layout_bytes(IFL_LAYOUT_ROWS, IFL_DTYPE_Q8, 8, 8) == 0);
    char fl[64];
    CHECK(!strcmp(ifl_format_list(0, fl, sizeof fl), "f32, f16, bf16, q8"));
    CHECK(!strcmp(ifl_format_list(IFL_BACKEND_CUDA, fl, sizeof fl), "f32, f16, bf16"));
    ifl_dtype t;
    CHECK(ifl_dtype_parse("q8", &t) == 0 && t == IFL_DTYPE_Q8 && ifl_dtype_parse("q4", &t) == -1);
    CHECK(ifl_format_get(IFL_DTYPE_COUNT) == NULL && !ifl_format_get(IFL_DTYPE_Q8)->stored);
}

/* ---- b. the families' kernels ------------------------------------------------------------------ */

static void random_tiles(ifl_rng *rng, uint8_t *W, int32_t KB, int32_t NJ)
{
    for (size_t t = 0; t < (size_t)KB * NJ; t++) {
        uint8_t *p = W + t * 1088;
        for (int i = 0; i < 1024; i++) /* the extremes, sometimes */
            p[i] = (uint8_t)(int8_t)((uint32_t)ifl_rng_next(rng) % 8 == 0 ? ((uint32_t)ifl_rng_next(rng) & 1 ? 127 : -127)
                                                                 : (int)((uint32_t)ifl_rng_next(rng) % 255) - 127);
        for (int c = 0; c < 32; c++) {
            float d = (uint32_t)ifl_rng_next(rng) % 16 == 0 ? 0.0f : (float)(ifl_rng_uniform(rng) * 0.01);
            uint16_t h = ifl_f32_to_f16(d);
            memcpy(p + 1024 + 2 * c, &h, 2);
        }
    }
}

static void random_x(ifl_rng *rng, int16_t *xq, float *xs, int M, int32_t KB)
{
    for (size_t i = 0; i < (size_t)M * KB * 32; i++)
        xq[i] = (int16_t)((uint32_t)ifl_rng_next(rng) % 8 == 0 ? ((uint32_t)ifl_rng_next(rng) & 1 ? 32767 : -32767)
                                                    : (int)((uint32_t)ifl_rng_next(rng) % 65535) - 32767);
    for (size_t i = 0; i < (size_t)M * KB; i++)
        xs[i] = (uint32_t)ifl_rng_next(rng) % 16 == 0 ? 0.0f : (float)(ifl_rng_uniform(rng) * 1e-4);
}

static void test_family(ifl_rng *rng, ifl_isa isa)
{
    const ifl_cpu_kernels *k = ifl_cpu_kernels_get(isa);
    if (!k || !ifl_isa_supported(isa)) {
        printf("q8 kernels: family %s not on this CPU\n", ifl_isa_name(isa));
        return;
    }
    CHECK(k->q8_tiles && k->q8_max_m >= 1 && k->q8_max_m <= IFL_Q8_MAX_M);
    static const int32_t kbs[] = {1, 3, 24, 2, 97}; /* quick (valgrind, sanitizers): the first 3 */
    int cases = 0;
    for (size_t b = 0; b < (test_quick() ? 3 : sizeof kbs / sizeof kbs[0]); b++) {
        int32_t KB = kbs[b], NJ = 5;
        uint8_t *W = aligned_alloc(64, (size_t)KB * NJ * 1088 + 64);
        int16_t *xq = test_xmalloc((size_t)IFL_Q8_MAX_M * KB * 32 * sizeof *xq);
        float *xs = test_xmalloc((size_t)IFL_Q8_MAX_M * KB * sizeof *xs);
        random_tiles(rng, W, KB, NJ);
        for (int M = 1; M <= k->q8_max_m;
             M = M < 3 ? M + 1 : M < k->q8_max_m && test_quick() ? k->q8_max_m : M + 3) {
            random_x(rng, xq, xs, M, KB);
            for (int32_t j0 = 0; j0 < NJ; j0 += 2)
                for (int32_t j1 = j0 + 1; j1 <= NJ; j1 += 2) {
                    int32_t ldy = 32 * (j1 - j0) + 5;
                    size_t n = (size_t)M * ldy;
                    float *y = test_xmalloc(n * sizeof *y), *ref = test_xmalloc(n * sizeof *ref);
                    for (size_t i = 0; i < n; i++)
                        y[i] = ref[i] = -12345.0f;
                    k->q8_tiles(y, ldy, xq, xs, KB, W, j0, j1, M);
                    ifl_q8_tiles_c(ref, ldy, xq, xs, KB, W, j0, j1, M);
                    CHECKF(!memcmp(y, ref, n * sizeof *y),
                           "%s: KB %d tiles %d..%d M %d differ from the specification",
                           ifl_isa_name(isa), KB, j0, j1, M);
                    free(y);
                    free(ref);
                    cases++;
                }
        }
        free(W);
        free(xq);
        free(xs);
    }
    printf("q8 kernels: family %s (%d rows at once): %d cases bit-identical to the specification\n",
           ifl_isa_name(isa), k->q8_max_m, cases);
}

/* ---- c. the driver --------------------------------------------------------------------------- */

typedef struct {
    ifl_matmul_args *a;
} ctx_t;

static void run_thread(void *c, int ith, int nth)
{
    ifl_matmul_thread(((ctx_t *)c)->a, ith, nth);
}

static int matmul(ifl_threadpool *tp, float *y, const float *x, int32_t M, const ifl_mat *W,
                  int nk, const float *bias, int acc, ifl_act act)
{
    int32_t K = nk ? W->cols : W->rows, N = nk ? W->rows : W->cols;
    int32_t mk = K > N ? K : N;
    size_t sf = ifl_matmul_scratch_floats(mk, mk, 8);
    int nth = ifl_threadpool_size(tp);
    /* kept from call to call (a fresh one each time was most of the test's time under TSan:
     * page faults), poisoned with NaN in the part MM_Q8 uses each time all the same */
    static float *scratch;
    static size_t have;
    if (sf * (size_t)nth > have) {
        free(scratch);
        have = sf * (size_t)nth;
        scratch = aligned_alloc(64, (have * sizeof(float) + 63) & ~(size_t)63);
        for (size_t i = 0; i < have; i++)
            scratch[i] = NAN;
    }
    ifl_matmul_args a = {.y = y,
                         .x = x,
                         .M = M,
                         .W = W,
                         .w_is_nk = nk,
                         .bias = bias,
                         .accumulate = acc,
                         .act = act,
                         .scratch = scratch,
                         .scratch_floats = sf,
                         .max_k = mk,
                         .max_n = mk,
                         .max_m = 8,
                         .gemv_max_rows = 4,
                         .n_threads = nth};
    int rc = ifl_matmul_plan(&a);
    if (!rc) {
        ctx_t c = {&a};
        ifl_threadpool_run(tp, run_thread, &c);
        CHECK(!ifl_matmul_needs_finish(&a));
    }
    return rc;
}

static void test_driver_shape(ifl_threadpool *tp1, ifl_threadpool *tp3, ifl_rng *rng, int32_t K,
                              int32_t N, int nk, int32_t M)
{
    int32_t rows = nk ? N : K, cols = nk ? K : N, KB = (K + 31) / 32;
    float *w = test_xmalloc((size_t)rows * cols * sizeof *w);
    for (int32_t i = 0; i < rows * cols; i++)
        w[i] = (float)ifl_rng_normal(rng) * 0.1f;
    ifl_layout lay = nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
    uint8_t *q = aligned_alloc(64, ifl_layout_bytes(lay, IFL_DTYPE_Q8, rows, cols) + 64);
    ifl_mat src = {.dtype = IFL_DTYPE_F32, .rows = rows, .cols = cols, .data = w};
    CHECK(ifl_mat_repack(q, lay, IFL_DTYPE_Q8, &src, NULL, NULL) == 0);
    ifl_mat W = {.dtype = IFL_DTYPE_Q8, .layout = lay, .rows = rows, .cols = cols, .data = q};
    float *x = test_xmalloc((size_t)M * K * sizeof *x), *bias = test_xmalloc((size_t)N * 4);
    for (int32_t i = 0; i < M * K; i++)
        x[i] = (float)ifl_rng_normal(rng);
    for (int32_t i = 0; i < N; i++)
        bias[i] = (float)ifl_rng_normal(rng) * 0.1f;
    size_t ny = (size_t)M * N;
    float *y1 = test_xmalloc(ny * 4), *y3 = test_xmalloc(ny * 4);
    float *y0 = test_xmalloc(ny * 4);
    for (size_t i = 0; i < ny; i++)
        y0[i] = (float)ifl_rng_normal(rng);
    /* the specification: quantized rows through ifl_q8_tiles_c, then + y0 + bias as the driver */
    int16_t *xq = test_xmalloc((size_t)M * KB * 32 * sizeof *xq);
    float *xs = test_xmalloc((size_t)M * KB * sizeof *xs);
    int32_t NJ = (N + 31) / 32;
    float *full = test_xmalloc((size_t)M * NJ * 32 * sizeof *full);
    ifl_q8_quantize_rows(xq, xs, x, M, K, K);
    ifl_q8_tiles_c(full, NJ * 32, xq, xs, KB, q, 0, NJ, M);
    for (int variant = 0; variant < 3; variant++) { /* plain + bias, accumulate, bias + GELU */
        int acc = variant == 1;
        const float *b = variant == 1 ? NULL : bias;
        ifl_act act = variant == 2 ? IFL_ACT_GELU_TANH : IFL_ACT_NONE;
        memcpy(y1, y0, ny * 4);
        memcpy(y3, y0, ny * 4);
        if (matmul(tp1, y1, x, M, &W, nk, b, acc, act) || matmul(tp3, y3, x, M, &W, nk, b, acc, act)) {
            CHECKF(0, "plan refused q8 %s K %d N %d", nk ? "NK4" : "KN8", K, N);
            break;
        }
        CHECKF(!memcmp(y1, y3, ny * 4), "q8 %s K %d N %d M %d variant %d: 1 and 3 threads differ",
               nk ? "NK4" : "KN8", K, N, M, variant);
        double e2 = 0, r2 = 0;
        int spec_bad = 0;
        for (int32_t m = 0; m < M; m++)
            for (int32_t n = 0; n < N; n++) {
                float s = full[(size_t)m * NJ * 32 + n];
                s = acc ? y0[(size_t)m * N + n] + s : s + bias[n];
                if (variant != 2)
                    spec_bad += y1[(size_t)m * N + n] != s;
                double ref = acc ? y0[(size_t)m * N + n] : bias[n];
                double dot = 0;
                for (int32_t kk = 0; kk < K; kk++)
                    dot += (double)x[(size_t)m * K + kk] *
                           (double)ifl_mat_get(&W, nk ? n : kk, nk ? kk : n);
                ref += dot;
                if (act == IFL_ACT_GELU_TANH)
                    ref = 0.5 * ref * (1.0 + tanh(0.7978845608028654 * (ref + 0.044715 * ref * ref * ref)));
                double g = y1[(size_t)m * N + n];
                e2 += (g - ref) * (g - ref);
                r2 += ref * ref;
            }
        CHECKF(spec_bad == 0, "q8 %s K %d N %d M %d variant %d: %d outputs differ from the "
               "specification", nk ? "NK4" : "KN8", K, N, M, variant, spec_bad);
        double rel = sqrt(e2 / (r2 > 0 ? r2 : 1));
        CHECKF(rel < 1e-4, "q8 %s K %d N %d M %d variant %d: rel L2 %.3g vs float64",
               nk ? "NK4" : "KN8", K, N, M, variant, rel);
        /* every row alone gives the same bits */
        for (int32_t m = 0; m < M; m += (M > 8 ? 7 : 1)) {
            float *one = test_xmalloc((size_t)N * 4);
            memcpy(one, y0 + (size_t)m * N, (size_t)N * 4);
            matmul(tp3, one, x + (size_t)m * K, 1, &W, nk, b, acc, act);
            CHECKF(!memcmp(one, y1 + (size_t)m * N, (size_t)N * 4),
                   "q8 %s K %d N %d: row %d of %d differs from the row alone", nk ? "NK4" : "KN8",
                   K, N, m, M);
            free(one);
        }
    }
    free(w);
    free(q);
    free(x);
    free(bias);
    free(y0);
    free(y1);
    free(y3);
    free(xq);
    free(xs);
    free(full);
}

/* A NaN in one row of x: that row's outputs are NaN, the others finite. */
static void test_nan_row(ifl_threadpool *tp, ifl_rng *rng)
{
    int32_t K = 70, N = 40, M = 3;
    float w[70 * 40], x[3 * 70], y[3 * 40];
    for (int i = 0; i < K * N; i++)
        w[i] = (float)ifl_rng_normal(rng);
    for (int i = 0; i < M * K; i++)
        x[i] = (float)ifl_rng_normal(rng);
    x[K + 40] = NAN;
    uint8_t *q = aligned_alloc(64, ifl_layout_bytes(IFL_LAYOUT_KN8, IFL_DTYPE_Q8, K, N));
    ifl_mat src = {.dtype = IFL_DTYPE_F32, .rows = K, .cols = N, .data = w};
    ifl_mat_repack(q, IFL_LAYOUT_KN8, IFL_DTYPE_Q8, &src, NULL, NULL);
    ifl_mat W = {.dtype = IFL_DTYPE_Q8, .layout = IFL_LAYOUT_KN8, .rows = K, .cols = N, .data = q};
    CHECK(matmul(tp, y, x, M, &W, 0, NULL, 0, IFL_ACT_NONE) == 0);
    int nan1 = 0, nan_other = 0;
    for (int n = 0; n < N; n++) {
        nan1 += isnan(y[N + n]);
        nan_other += !isfinite(y[n]) + !isfinite(y[2 * N + n]);
    }
    CHECKF(nan1 == N && nan_other == 0, "NaN row: %d of %d NaN, %d others not finite", nan1, N,
           nan_other);
    free(q);
}

int main(void)
{
    test_select_isa("test_q8");
    ifl_rng rng;
    ifl_rng_seed(&rng, 88);
    test_quantizer(&rng);
    for (int isa = 0; isa < IFL_ISA_COUNT; isa++)
        test_family(&rng, (ifl_isa)isa);
    if (ifl_cpu_has_avx512vnni() || ifl_cpu_has_avxvnni()) { /* the kernels' other path too */
        setenv("INFLIGHT_NO_VNNI", "1", 1);
        printf("q8 kernels without VNNI:\n");
        for (int isa = 1; isa < IFL_ISA_COUNT; isa++)
            test_family(&rng, (ifl_isa)isa);
        unsetenv("INFLIGHT_NO_VNNI");
    }
    ifl_threadpool *tp1 = ifl_threadpool_new(1), *tp3 = ifl_threadpool_new(3);
    static const int32_t shapes[][2] = {{64, 192}, {96, 40}, {37, 53}, {768, 33}, {5, 7},
                                        {600, 200}};
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int nk = 0; nk < 2; nk++)
            for (int32_t M = 1; M <= 40; M += (M < 3 ? 1 : test_quick() ? 19 : 6)) {
                test_driver_shape(tp1, tp3, &rng, shapes[s][0], shapes[s][1], nk, M);
                n++;
            }
    test_nan_row(tp3, &rng);
    printf("q8 products (isa %s): %d shapes x rows, both orientations, bias/accumulate/GELU, 1 and "
           "3 threads\n", ifl_isa_name(ifl_isa_current()), n);
    ifl_threadpool_free(tp1);
    ifl_threadpool_free(tp3);
    return test_finish("test_q8");
}
