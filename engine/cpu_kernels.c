/* cpu_kernels.c: the driver of the CPU kernels (see cpu_kernels.h): the choice of path per
 * matrix product, the split of work across threads, the partial sums and the epilogue (bias,
 * activation), the OpenBLAS path, the probes, and the process-wide entry points. What runs inside
 * each thread's share is a family's (kernels_scalar.c, kernels_avx2.c, kernels_avx512.c). */
#include "cpu_kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "cpu_kernels_isa.h"
#include "threadpool.h"
#include "util.h"

#ifdef INFLIGHT_HAVE_BLAS
#include <cblas.h>
#endif

/* ---- the families ---------------------------------------------------------------------------- */

const ifl_cpu_kernels *ifl_cpu_kernels_get(ifl_isa isa)
{
    if (isa == IFL_ISA_AUTO)
        isa = ifl_isa_current();
    switch (isa) {
    case IFL_ISA_SCALAR: return ifl_kernels_scalar();
    case IFL_ISA_AVX2: return ifl_kernels_avx2();
    case IFL_ISA_AVX512: return ifl_kernels_avx512();
    default: return NULL;
    }
}

static const ifl_cpu_kernels *cur(void)
{
    const ifl_cpu_kernels *k = ifl_cpu_kernels_get(ifl_isa_current());
    return k ? k : ifl_kernels_scalar();
}

const char *ifl_cpu_kernels_desc(const ifl_cpu_kernels *k)
{
    return k ? k->desc : "?";
}

void ifl_exp(float *y, const float *x, size_t n)
{
    cur()->exp(y, x, n);
}

void ifl_gelu_erf(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

float ifl_max(const float *x, size_t n)
{
    return cur()->max(x, n);
}

void ifl_softmax_k(const ifl_cpu_kernels *k, float *x, int32_t n)
{
    float mx = k->max(x, (size_t)n);
    for (int32_t i = 0; i < n; i++)
        x[i] -= mx;
    k->exp(x, x, (size_t)n);
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += x[i];
    k->scale(x, (float)(1.0 / sum), (size_t)n);
}

/* ---- matrix products ------------------------------------------------------------------------- *
 *
 * Four ways, chosen per call by ifl_matmul_plan:
 *   MM_KN   (few rows, W (K, N) in IFL_LAYOUT_KN8): each thread streams a contiguous band of W's
 *           8-row panels, every weight read once and in address order, into private (M, N)
 *           partial sums; ifl_matmul_finish_thread adds the partials, the bias and the activation.
 *   MM_NK   (few rows, W (N, K) in IFL_LAYOUT_NK4, the tied lm_head): dot products, each thread
 *           a contiguous range of 4-row panels.
 *   MM_GEMM (more rows, a family with a register-blocked product): each thread a range of
 *           16-column strips of y, W packed to f32 a block at a time.
 *   MM_BLAS (more rows, blas set): each thread runs single-threaded sgemm on a slice of the N
 *           outputs; weights that are not row-major f32 are unpacked to f32 one cache-sized block
 *           at a time.
 * bf16 partial sums are in the family's bf16_group order (unpermuted in the finish); the NK
 * kernels take x permuted the same way.
 * Scratch per thread: [partials: max_m x pad32(max_n)] [x padded: max_m x pad32(max_k)]
 * [f32 block: the sgemm or gemm block]. */

enum {
    MM_BLAS = 0,
    MM_KN = 1,
    MM_NK = 2,
    MM_GEMM = 3,
    CONV_FLOATS = 1024 * 1024,   /* 4 MiB of f32: an unpacked weight block for sgemm (OpenBLAS packs
                                    it again; large blocks keep its calls efficient) */
    L2_CHUNK_BYTES = 256 * 1024, /* weights swept by every group of rows of x while in L2 */
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
    if (conv < IFL_GEMM_SCRATCH_FLOATS(max_n))
        conv = IFL_GEMM_SCRATCH_FLOATS(max_n);
    size_t n = partial_floats(&a) + (size_t)(max_m > 4 ? max_m : 4) * (size_t)pad32(max_k) + conv;
    return (n + 15) & ~(size_t)15;
}

int32_t ifl_matmul_default_gemv_rows(const ifl_cpu_kernels *k, ifl_dtype dt)
{
    if (!k)
        k = cur();
    return k->gemm ? k->gemm_above[dt] : 1 << 30;
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
            a->k->gelu_tanh(y + n0, (size_t)(n1 - n0));
        else if (a->act == IFL_ACT_GELU_ERF)
            ifl_gelu_erf(y + n0, (size_t)(n1 - n0));
    }
}

static void split(int32_t n, int ith, int nth, int32_t align, int32_t *c0, int32_t *c1)
{
    ifl_kernel_split(n, ith, nth, align, c0, c1);
}

/* x rows (M, ldx), K values each, copied into xp (M, KBCW) zero padded; with group g > 0 each g
 * elements are permuted into [g/2 even | g/2 odd] order (what a family's bf16 NK kernel multiplies
 * against). */
static void pad_x(float *xp, const float *x, int M, int32_t ldx, int32_t K, int32_t KBCW, int g)
{
    for (int m = 0; m < M; m++) {
        float *d = xp + (size_t)m * KBCW;
        const float *s = x + (size_t)m * ldx;
        if (!g) {
            memcpy(d, s, (size_t)K * sizeof *d);
            memset(d + K, 0, (size_t)(KBCW - K) * sizeof *d);
            continue;
        }
        int h = g / 2;
        for (int32_t k = 0; k < KBCW; k += g)
            for (int i = 0; i < h; i++) {
                d[k + i] = k + 2 * i < K ? s[k + 2 * i] : 0.0f;
                d[k + h + i] = k + 2 * i + 1 < K ? s[k + 2 * i + 1] : 0.0f;
            }
    }
}

/* MM_KN, thread ith: partial sums over its band of 8-row panels, all N columns, every row of x. */
static void matmul_kn(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    const ifl_cpu_kernels *k = a->k;
    int32_t K = W->rows, N = W->cols, ldp = pad32(N);
    int32_t cw = ifl_panel_width(W->dtype), NB = (N + cw - 1) / cw;
    int32_t kb0, kb1;
    split((K + 7) / 8, ith, nth, 1, &kb0, &kb1);
    float *part = thread_scratch(a, ith);
    memset(part, 0, (size_t)a->M * (size_t)ldp * sizeof *part);
    /* Panel rows in L2-sized chunks; every group of rows of x sweeps a chunk while it is in L2,
     * so the weights come from memory once whatever M is. */
    size_t row_bytes = (size_t)ldp * 8 * ifl_dtype_size(W->dtype);
    int32_t chunk = (int32_t)(L2_CHUNK_BYTES / row_bytes);
    chunk = chunk < 1 ? 1 : chunk;
    int group = a->M <= k->kn_one_pass_m ? (int)a->M : k->kn_max_m; /* rows of x per call */
    for (int32_t c0 = kb0; c0 < kb1; c0 += chunk) {
        int32_t c1 = c0 + chunk < kb1 ? c0 + chunk : kb1;
        for (int32_t m0 = 0; m0 < a->M; m0 += group) {
            int M = a->M - m0 < group ? (int)(a->M - m0) : group;
            k->kn_panels(part + (size_t)m0 * ldp, ldp, a->x + (size_t)m0 * K, K, K, c0, c1, W->data,
                         NB, M, W->dtype);
        }
    }
}

/* MM_KN, after every thread's matmul_kn: y = y + p0 + p1 + ... (accumulate) or p0 + p1 + ...,
 * added left to right in thread order (what the register-blocked product reproduces), then the
 * bias and act; columns split across threads in blocks of 32 (a multiple of every bf16_group). */
static void matmul_kn_finish(const ifl_matmul_args *a, int ith, int nth)
{
    int32_t N = a->W->cols, ldp = pad32(N);
    int32_t c0, c1;
    split(N, ith, nth, 32, &c0, &c1);
    if (c0 >= c1)
        return;
    int32_t w = c1 - c0, wp = pad32(w);
    int unperm = a->W->dtype == IFL_DTYPE_BF16 && a->k->unpermute_bf16;
    for (int32_t m = 0; m < a->M; m++) {
        float *y = a->y + (size_t)m * N + c0;
        for (int t = 0; t < nth; t++) {
            float *p = thread_scratch(a, t) + (size_t)m * ldp + c0;
            if (unperm) /* this thread's columns of every partial: no other thread reads them */
                a->k->unpermute_bf16(p, wp);
            if (t == 0 && !a->accumulate)
                memcpy(y, p, (size_t)w * sizeof *y);
            else
                for (int32_t j = 0; j < w; j++)
                    y[j] += p[j];
        }
    }
    epilogue(a, N, c0, c1);
}

/* The next chunk of MM_NK's work for whichever share asks (the args' one field the threads
 * write; ifl_matmul_plan resets it). */
static int32_t nk_claim(const ifl_matmul_args *a)
{
    return atomic_fetch_add_explicit((atomic_int *)&a->nk_next, 1, memory_order_relaxed);
}

/* MM_NK, share ith: L2-sized chunks of 4-row panels of W (N, K), each claimed from a counter by
 * whichever share is free, so a thread the host slows takes fewer of them instead of holding up
 * the product (a static split left one thread idle a fifth of a batch-1 step on a busy host,
 * docs/perf.md); a chunk's rows of y are the same whoever computes them. Like MM_KN, every
 * group of rows of x sweeps a chunk while it is in L2, so W comes from memory once. */
static void matmul_nk(const ifl_matmul_args *a, int ith, int nth)
{
    (void)nth;
    const ifl_mat *W = a->W;
    const ifl_cpu_kernels *k = a->k;
    int32_t K = W->cols, N = W->rows;
    int32_t cw = ifl_panel_width(W->dtype), KB = (K + cw - 1) / cw, G = (N + 3) / 4;
    /* L2-sized chunks of panels, widened once to f32 where the family does that for this dtype
     * (the copy is the L2-sized chunk): each group of rows of x (in L1) sweeps the chunk in L2,
     * so W comes from memory once and every row's sums keep one order. L1-sized chunks, each
     * group of rows streaming the whole of x past them from L2, were slower at every row count
     * from 5 to 64 (docs/perf.md, 2026-12-05). A chunk is a whole number of 64-byte lines of y
     * (4 panels), so no two threads write one line. */
    int widen = W->dtype != IFL_DTYPE_F32 && k->nk_widen && a->M > k->nk_widen_above[W->dtype];
    const size_t panel_bytes = (size_t)KB * 256;
    int32_t chunk = (int32_t)(L2_CHUNK_BYTES / (panel_bytes * (widen ? 2 : 1))) & ~3;
    chunk = chunk < 4 ? 4 : chunk;
    int32_t n_chunks = (G + chunk - 1) / chunk;
    int32_t cur = nk_claim(a);
    if (cur >= n_chunks)
        return;
    float *xp = thread_xpad(a, ith);
    pad_x(xp, a->x, (int)a->M, K, K, KB * cw, W->dtype == IFL_DTYPE_BF16 ? k->bf16_group : 0);
    float *wide = thread_conv(a, ith); /* >= CONV_FLOATS (4 MiB): the widened chunk */
    /* the next chunk is claimed while this one is in use: its panels are prefetched */
    for (int32_t nxt = nk_claim(a); cur < n_chunks; cur = nxt, nxt = nk_claim(a)) {
        int32_t c0 = cur * chunk, c1 = c0 + chunk < G ? c0 + chunk : G;
        if (widen)
            k->nk_widen(wide, W->data, KB, c0, c1, W->dtype);
        /* widened: the next chunk's 16-bit panels toward L2, a slice before each group of rows,
         * so that widening it reads them from L2 rather than memory (bench-gemm-libs, lm_head, 64
         * rows, bf16: 187 -> 195 GFLOP/s; not widened, the kernels' own prefetches do better
         * alone: f16 and f32 were 3-12% slower with it, docs/perf.md) */
        int32_t c2 = nxt * chunk, c3 = nxt < n_chunks ? (c2 + chunk < G ? c2 + chunk : G) : c2;
        const char *next = (const char *)W->data + (size_t)c2 * panel_bytes;
        size_t next_bytes = (size_t)(c3 - c2) * panel_bytes, groups = 0, pf = 0;
        if (widen)
            groups = ((size_t)a->M + (size_t)k->nk_max_m - 1) / (size_t)k->nk_max_m;
        for (int32_t m0 = 0; m0 < a->M; m0 += k->nk_max_m) {
            int M = a->M - m0 < k->nk_max_m ? (int)(a->M - m0) : k->nk_max_m;
            if (groups) {
                size_t end = next_bytes * (size_t)(m0 / k->nk_max_m + 1) / groups;
                for (; pf < end; pf += 64)
                    __builtin_prefetch(next + pf, 0, 2);
            }
            float *y = a->y + (size_t)m0 * N + (size_t)c0 * 4;
            const float *xm = xp + (size_t)m0 * KB * cw;
            if (widen)
                k->nk_panels(y, N, xm, 2 * KB, wide, 0, c1 - c0, N - c0 * 4, M, IFL_DTYPE_F32);
            else
                k->nk_panels(y, N, xm, KB, W->data, c0, c1, N, M, W->dtype);
        }
        epilogue(a, N, c0 * 4, c1 * 4 < N ? c1 * 4 : N);
    }
}

/* MM_GEMM, thread ith: its 16-column strips of y through the family's register-blocked product,
 * with the K bands of the streaming kernels' threads (so the sums come out the same). */
static void matmul_gemm(const ifl_matmul_args *a, int ith, int nth)
{
    const ifl_mat *W = a->W;
    int32_t K = W->rows, N = W->cols;
    int32_t n0, n1;
    split(N, ith, nth, 16, &n0, &n1);
    if (n0 >= n1)
        return;
    ifl_gemm_args g = {.y = a->y,
                       .x = a->x,
                       .M = a->M,
                       .K = K,
                       .N = N,
                       .W = W,
                       .accumulate = a->accumulate,
                       .n0 = n0,
                       .n1 = n1,
                       .n_bands = nth,
                       .scratch = thread_conv(a, ith)};
    a->k->gemm(&g);
    epilogue(a, N, n0, n1);
}

#ifdef INFLIGHT_HAVE_BLAS
/* One 64-byte panel row (CW elements) as f32 in natural order. */
static inline void panel_row_f32(float *dst, const char *src, ifl_dtype dt)
{
    ifl_convert_to_f32(dst, dt, src, (size_t)ifl_panel_width(dt));
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
    if (!a->k)
        a->k = cur();
    if (a->M > a->gemv_max_rows) {
#ifdef INFLIGHT_HAVE_BLAS
        if (a->blas) {
            a->mode = MM_BLAS;
            return 0;
        }
#endif
        if (a->k->gemm && !a->w_is_nk) {
            a->mode = MM_GEMM;
            return 0;
        }
    }
    ifl_layout want = a->w_is_nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
    if (a->W->layout != want)
        return -1; /* the streaming kernels read only the panel layouts */
    if (a->w_is_nk && a->accumulate)
        return -1; /* dot products write y; nothing in GPT-2 adds them to it */
    if (a->M > a->max_m)
        return -1; /* more rows than the partial sums were sized for */
    a->mode = a->w_is_nk ? MM_NK : MM_KN;
    atomic_store_explicit(&a->nk_next, 0, memory_order_relaxed);
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
    case MM_GEMM: matmul_gemm(a, ith, nth); break;
    default: matmul_nk(a, ith, nth); break;
    }
}

void ifl_matmul_finish_thread(const ifl_matmul_args *a, int ith, int nth)
{
    if (a->mode == MM_KN)
        matmul_kn_finish(a, ith, nth);
}

/* ---- probes ---------------------------------------------------------------------------------- */

typedef struct {
    const ifl_cpu_kernels *k;
    const float *p;
    size_t n;
    int64_t iters;
    float sums[64];
    double flops[64];
} probe_ctx;

static void probe_task(void *c_, int ith, int nth)
{
    probe_ctx *c = c_;
    size_t per = c->n / (size_t)nth / 64 * 64;
    c->sums[ith % 64] = c->k->stream_read(c->p + per * (size_t)ith, per);
}

int ifl_read_probe_init(ifl_read_probe *pr, size_t bytes)
{
    *pr = (ifl_read_probe){0};
    float *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    size_t n = bytes / sizeof(float);
    for (size_t i = 0; i < n; i++)
        p[i] = 1.0f;
    pr->p = p;
    pr->n = n;
    return 0;
}

double ifl_read_probe_gbs(ifl_threadpool *tp, const ifl_read_probe *pr)
{
    if (!pr->p)
        return 0;
    probe_ctx c = {.k = cur(), .p = pr->p, .n = pr->n};
    double t = ifl_now_s();
    ifl_threadpool_run(tp, probe_task, &c);
    t = ifl_now_s() - t;
    int nth = ifl_threadpool_size(tp);
    return (double)(pr->n / (size_t)nth / 64 * 64 * (size_t)nth) * sizeof(float) / t / 1e9;
}

void ifl_read_probe_free(ifl_read_probe *pr)
{
    if (pr->p)
        munmap(pr->p, pr->n * sizeof(float));
    *pr = (ifl_read_probe){0};
}

double ifl_memory_read_gbs(ifl_threadpool *tp, size_t bytes, int reps)
{
    ifl_read_probe pr;
    if (ifl_read_probe_init(&pr, bytes))
        return 0;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double gbs = ifl_read_probe_gbs(tp, &pr);
        best = gbs > best ? gbs : best;
    }
    ifl_read_probe_free(&pr);
    return best;
}

static void fma_task(void *c_, int ith, int nth)
{
    (void)nth;
    probe_ctx *c = c_;
    c->flops[ith % 64] = c->k->fma_loop(c->iters, &c->sums[ith % 64]);
}

double ifl_fma_peak_gflops(ifl_threadpool *tp, const ifl_cpu_kernels *k, int reps)
{
    probe_ctx c = {.k = k ? k : cur(), .iters = 1 << 22};
    int nth = ifl_threadpool_size(tp);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = ifl_now_s();
        ifl_threadpool_run(tp, fma_task, &c);
        t = ifl_now_s() - t;
        double flops = 0;
        for (int i = 0; i < nth && i < 64; i++)
            flops += c.flops[i];
        best = flops / t / 1e9 > best ? flops / t / 1e9 : best;
    }
    return best;
}
