/* test_matmul.c: every matrix-product path of the CPU backend (streaming K-split, streaming dot
 * products, the family's register-blocked product, sgemm with widened 16-bit weights) against a
 * float64 reference, for f32/f16/bf16 weights, both weight layouts, 1..9 rows, shapes that are not
 * multiples of the vector width, bias, GELU and accumulation into y, with the kernel family of
 * $INFLIGHT_ISA (CTest runs it once per family the CPU has). Inputs are random; outputs are
 * poisoned with NaN first. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "cpu_kernels.h"
#include "rng.h"
#include "testutil.h"
#include "threadpool.h"

/* valgrind's client requests (Debian's valgrind package brings the header; a build without it, or
 * for another CPU, poisons with NaN alone) */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define HAVE_MEMCHECK_H 1
#endif
#endif

typedef struct {
    ifl_matmul_args *a;
} ctx_t;

static void run_thread(void *c, int ith, int nth)
{
    ifl_matmul_thread(((ctx_t *)c)->a, ith, nth);
}
static void run_finish(void *c, int ith, int nth)
{
    ifl_matmul_finish_thread(((ctx_t *)c)->a, ith, nth);
}

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double worst = 0;

/* A random value of mean 0 and variance 1, uniform: the test's inputs need no normal
 * distribution, and Box-Muller's log and cos per value made generating them ~90 of test_matmul's
 * 420 s under valgrind (uniform: 13 s, 2026-12-07). */
static float rnd(ifl_rng *rng)
{
    return (float)((ifl_rng_uniform(rng) - 0.5) * 3.4641016151377544); /* sqrt(12) */
}

/* One_case's scratch, kept from case to case (grown when a case needs more): a fresh 64 MiB per
 * case was faulted in again every time, which under the sanitizers' allocators on a VM whose page
 * faults are slow took most of the test's time (TSan: past CTest's 900 s, 2026-12-05). Poisoned
 * with NaN before every case all the same. */
static float *case_scratch;
static size_t case_scratch_floats;

/* Scratch a case must write before it reads: every float 0xffffffff, a NaN that reaches y if a
 * kernel reads what an earlier case left, set with memset (the float-by-float loop over the 4 x
 * >= 1M floats of every case was ~40% of test_matmul's 420 s under valgrind, 2026-12-07). Under
 * valgrind the bytes are marked undefined instead, which memcheck reports wherever they would
 * decide a branch, the output check's included: no NaN is needed, and no 16 MiB are written. */
static void poison(float *p, size_t floats)
{
#ifdef HAVE_MEMCHECK_H
    if (RUNNING_ON_VALGRIND) {
        VALGRIND_MAKE_MEM_UNDEFINED(p, floats * sizeof *p);
        return;
    }
#endif
    memset(p, 0xff, floats * sizeof *p);
}

static float *scratch_for(size_t floats)
{
    if (floats > case_scratch_floats) {
        free(case_scratch);
        case_scratch = aligned_alloc(64, (floats * sizeof(float) + 63) & ~(size_t)63);
        case_scratch_floats = case_scratch ? floats : 0;
    }
    return case_scratch;
}

static void one_case(ifl_threadpool *tp, ifl_rng *rng, ifl_dtype dt, int nk, int32_t M, int32_t K,
                     int32_t N, int use_bias, int accumulate, ifl_act act, int32_t gemv_rows,
                     int packed, int blas)
{
    size_t nw = (size_t)K * N;
    float *wf = malloc(nw * sizeof *wf);
    void *w = malloc(nw * 4);
    float *x = malloc((size_t)M * K * sizeof *x);
    float *y = malloc((size_t)M * N * sizeof *y);
    float *y0 = malloc((size_t)M * N * sizeof *y0);
    float *bias = malloc((size_t)N * sizeof *bias);
    for (size_t i = 0; i < nw; i++)
        wf[i] = rnd(rng) * 0.1f;
    ifl_convert_from_f32(w, dt, wf, nw);
    ifl_convert_to_f32(wf, dt, w, nw); /* reference sees the rounded weights */
    for (int32_t i = 0; i < M * K; i++)
        x[i] = rnd(rng);
    for (int32_t i = 0; i < N; i++)
        bias[i] = rnd(rng) * 0.1f;
    for (int32_t i = 0; i < M * N; i++)
        y0[i] = accumulate ? rnd(rng) : NAN;
    memcpy(y, y0, (size_t)M * N * sizeof *y);

    ifl_mat W = {.dtype = dt, .rows = nk ? N : K, .cols = nk ? K : N, .data = w};
    void *wp = NULL;
    if (packed) { /* the panel layouts the streaming kernels read */
        ifl_layout lay = nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
        wp = aligned_alloc(64, (ifl_layout_elems(lay, dt, W.rows, W.cols) * 4 + 63) & ~(size_t)63);
        ifl_mat_repack(wp, lay, dt, &W, NULL, NULL);
        W.layout = lay;
        W.data = wp;
        for (int32_t r = 0; r < W.rows; r++) /* the packed matrix reads back the same */
            for (int32_t c = 0; c < W.cols; c += 7) {
                ifl_mat rm = {.dtype = dt, .rows = W.rows, .cols = W.cols, .data = w};
                CHECK(ifl_load_f32(dt, wp, ifl_mat_offset(&W, r, c)) ==
                      ifl_load_f32(dt, w, ifl_mat_offset(&rm, r, c)));
            }
    }
    int32_t max_k = K > N ? K : N;
    size_t sf = ifl_matmul_scratch_floats(max_k, max_k, 16);
    float *scratch = scratch_for(sf * 4);
    CHECKF(scratch != NULL, "out of memory for %zu floats of scratch", sf * 4);
    if (!scratch)
        goto out;
    /* (the product's threads use sf floats each, the rest is never touched) */
    poison(scratch, sf * (size_t)ifl_threadpool_size(tp));
    ifl_matmul_args a = {.y = y,
                         .x = x,
                         .M = M,
                         .W = &W,
                         .w_is_nk = nk,
                         .bias = use_bias ? bias : NULL,
                         .accumulate = accumulate,
                         .act = act,
                         .scratch = scratch,
                         .scratch_floats = sf,
                         .max_k = max_k,
                         .max_n = max_k,
                         .max_m = 16,
                         .gemv_max_rows = gemv_rows,
                         .blas = blas,
                         .n_threads = ifl_threadpool_size(tp)};
    /* above gemv_rows: sgemm when asked for (where built), else the family's own product, else
     * the streaming kernels still (always for dot products: the lm_head) */
    int streaming = M <= gemv_rows;
#ifndef INFLIGHT_HAVE_BLAS
    blas = 0;
#endif
    if (!streaming && !blas && (nk || ifl_matmul_default_gemv_rows(NULL, dt) >= (1 << 30)))
        streaming = 1;
    int refuse = streaming && (!packed || (nk && accumulate)); /* NK dots never accumulate */
    if (ifl_matmul_plan(&a)) {
        CHECKF(refuse, "plan refused a %s call", packed ? "packed" : "row-major");
        goto out;
    }
    CHECKF(!refuse, "plan accepted a streaming call it cannot run");
    ctx_t c = {&a};
    ifl_threadpool_run(tp, run_thread, &c);
    if (ifl_matmul_needs_finish(&a))
        ifl_threadpool_run(tp, run_finish, &c);

    double err2 = 0, ref2 = 0;
    int bad = 0;
    for (int32_t m = 0; m < M; m++)
        for (int32_t n = 0; n < N; n++) {
            double s = 0;
            for (int32_t k = 0; k < K; k++)
                s += (double)x[m * K + k] * (nk ? wf[(size_t)n * K + k] : wf[(size_t)k * N + n]);
            if (use_bias)
                s += bias[n];
            if (act == IFL_ACT_GELU_TANH)
                s = gelu_ref(s);
            if (accumulate)
                s += y0[m * N + n];
            double got = y[m * N + n];
            if (!isfinite(got))
                bad++;
            err2 += (got - s) * (got - s);
            ref2 += s * s;
        }
    double rel = sqrt(err2 / (ref2 > 0 ? ref2 : 1));
    if (rel > worst)
        worst = rel;
    CHECKF(bad == 0 && rel < 2e-6,
           "dtype %s %s M=%d K=%d N=%d bias=%d acc=%d act=%d gemv<=%d blas=%d: "
           "rel err %.3g, %d non-finite",
           ifl_dtype_name(dt), nk ? "NK" : "KN", M, K, N, use_bias, accumulate, act, gemv_rows,
           blas, rel, bad);
out:
    free(wp);
    free(wf);
    free(w);
    free(x);
    free(y);
    free(y0);
    free(bias);
}

/* A random (rows, cols) matrix of dt in panel layout lay (64-byte aligned; free() it). */
static void *random_panels(ifl_rng *rng, ifl_dtype dt, ifl_layout lay, int32_t rows, int32_t cols)
{
    ifl_mat W0 = {.dtype = dt, .rows = rows, .cols = cols};
    size_t nw = (size_t)rows * cols;
    float *wf = malloc(nw * sizeof *wf);
    void *w = malloc(nw * 4);
    for (size_t i = 0; i < nw; i++)
        wf[i] = rnd(rng) * 0.1f;
    ifl_convert_from_f32(w, dt, wf, nw);
    W0.data = w;
    void *wp = aligned_alloc(64, (ifl_layout_elems(lay, dt, rows, cols) * 4 + 63) & ~(size_t)63);
    ifl_mat_repack(wp, lay, dt, &W0, NULL, NULL);
    free(wf);
    free(w);
    return wp;
}

/* Every row of an M-row product, on the family's default paths, bit-identical to that row alone:
 * the batcher's promise that a seeded request gives the same tokens whatever shares its steps.
 * M is 1, 2, ... up to dense, then every 37th row count up to max_m. */
static int batch_invariance(ifl_threadpool *tp, ifl_rng *rng, ifl_dtype dt, int nk, int32_t K,
                            int32_t N, int accumulate, int32_t max_m, int32_t dense)
{
    ifl_layout lay = nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
    ifl_mat W = {.dtype = dt, .rows = nk ? N : K, .cols = nk ? K : N, .layout = lay};
    void *wp = random_panels(rng, dt, lay, W.rows, W.cols);
    W.data = wp;
    float *x = malloc((size_t)max_m * K * sizeof *x);
    float *y = malloc((size_t)max_m * N * sizeof *y), *y1 = malloc((size_t)N * sizeof *y1);
    float *y0 = malloc((size_t)max_m * N * sizeof *y0);
    for (size_t i = 0; i < (size_t)max_m * K; i++)
        x[i] = rnd(rng);
    for (size_t i = 0; i < (size_t)max_m * N; i++)
        y0[i] = rnd(rng);
    int32_t max_k = K > N ? K : N;
    int nth = ifl_threadpool_size(tp);
    size_t sf = ifl_matmul_scratch_floats(max_k, max_k, max_m);
    float *scratch = aligned_alloc(64, sf * (size_t)nth * sizeof(float));
    int bad = 0;
    for (int32_t M = 1; M <= max_m && !bad; M += M < dense ? 1 : 37) {
        ifl_matmul_args a = {.x = x, .W = &W, .w_is_nk = nk, .accumulate = accumulate && !nk,
                             .scratch = scratch, .scratch_floats = sf, .max_k = max_k,
                             .max_n = max_k, .max_m = max_m,
                             .gemv_max_rows = ifl_matmul_default_gemv_rows(NULL, dt),
                             .n_threads = nth};
        a.y = y;
        a.M = M;
        memcpy(y, y0, (size_t)M * N * sizeof *y);
        CHECK(ifl_matmul_plan(&a) == 0);
        ctx_t c = {&a};
        ifl_threadpool_run(tp, run_thread, &c);
        if (ifl_matmul_needs_finish(&a))
            ifl_threadpool_run(tp, run_finish, &c);
        for (int32_t m = 0; m < M && !bad; m += M > 9 ? 7 : 1) { /* row m alone */
            ifl_matmul_args s1 = a;
            s1.x = x + (size_t)m * K;
            s1.y = y1;
            s1.M = 1;
            memcpy(y1, y0 + (size_t)m * N, (size_t)N * sizeof *y1);
            CHECK(ifl_matmul_plan(&s1) == 0);
            ctx_t c1 = {&s1};
            ifl_threadpool_run(tp, run_thread, &c1);
            if (ifl_matmul_needs_finish(&s1))
                ifl_threadpool_run(tp, run_finish, &c1);
            if (memcmp(y1, y + (size_t)m * N, (size_t)N * sizeof *y1)) {
                bad = 1;
                CHECKF(0, "dtype %s %s K=%d N=%d acc=%d, %d threads: row %d of %d differs from "
                          "the row alone",
                       ifl_dtype_name(dt), nk ? "NK" : "KN", K, N, accumulate, nth, m, M);
            }
        }
    }
    free(wp);
    free(x);
    free(y);
    free(y1);
    free(y0);
    free(scratch);
    return bad ? 0 : 1;
}

/* The (K, N) products' pieces changing hands, on schedules fixed by the test: the two shares run
 * one after the other on this thread, so the first to run finishes its band and takes over every
 * piece but one of the other's before that one begins; then the other way round. Both must give
 * the bits of the shares run on a pool of two with nothing taken over (n_threads 0: each thread
 * keeps its band), and the taking over must have happened. */
static int pieces_taken_over(ifl_threadpool *tp2, ifl_rng *rng, ifl_dtype dt, int32_t M, int32_t K,
                             int32_t N)
{
    void *wp = random_panels(rng, dt, IFL_LAYOUT_KN8, K, N);
    ifl_mat W = {.dtype = dt, .rows = K, .cols = N, .layout = IFL_LAYOUT_KN8, .data = wp};
    float *x = malloc((size_t)M * K * sizeof *x);
    float *y[3];
    for (int i = 0; i < 3; i++)
        y[i] = malloc((size_t)M * N * sizeof *y[i]);
    for (size_t i = 0; i < (size_t)M * K; i++)
        x[i] = rnd(rng);
    int32_t max_k = K > N ? K : N;
    size_t sf = ifl_matmul_scratch_floats(max_k, max_k, M);
    float *scratch = aligned_alloc(64, sf * 2 * sizeof(float));
    int ok = 1;
    for (int order = 0; order < 3; order++) { /* pool, fixed bands; share 0 first; share 1 first */
        poison(scratch, sf * 2);
        ifl_matmul_args a = {.y = y[order],
                             .x = x,
                             .M = M,
                             .W = &W,
                             .scratch = scratch,
                             .scratch_floats = sf,
                             .max_k = max_k,
                             .max_n = max_k,
                             .max_m = M,
                             .gemv_max_rows = 1 << 20,
                             .act = IFL_ACT_GELU_TANH,
                             .n_threads = order == 0 ? 0 : 2};
        CHECK(ifl_matmul_plan(&a) == 0 && ifl_matmul_needs_finish(&a));
        ctx_t c = {&a};
        if (order == 0) {
            ifl_threadpool_run(tp2, run_thread, &c);
        } else {
            ifl_matmul_thread(&a, order == 1 ? 0 : 1, 2);
            ifl_matmul_thread(&a, order == 1 ? 1 : 0, 2);
            int taken = atomic_load(&a.kn_taken);
            if (taken != IFL_KN_PIECES - 1)
                ok = 0;
            CHECKF(taken == IFL_KN_PIECES - 1,
                   "dtype %s M=%d K=%d N=%d, share %d first: %d pieces taken over, want %d",
                   ifl_dtype_name(dt), M, K, N, order - 1, taken, IFL_KN_PIECES - 1);
        }
        ifl_threadpool_run(tp2, run_finish, &c);
        if (order > 0 && memcmp(y[order], y[0], (size_t)M * N * sizeof(float))) {
            ok = 0;
            CHECKF(0, "dtype %s M=%d K=%d N=%d: share %d first differs from fixed bands",
                   ifl_dtype_name(dt), M, K, N, order - 1);
        }
    }
    free(wp);
    free(x);
    for (int i = 0; i < 3; i++)
        free(y[i]);
    free(scratch);
    return ok;
}

int main(void)
{
    test_select_isa("test_matmul");
    ifl_rng rng;
    ifl_rng_seed(&rng, 5);
    static const int32_t shapes[][2] = {{64, 192}, {96, 40},  {120, 360},
                                        {37, 53},  {768, 33}, {5, 7}};
    int n_cases = 0;
    for (int nth = test_quick() ? 3 : 1; nth <= 3; nth += 2) {
        ifl_threadpool *tp = ifl_threadpool_new(nth);
        for (int dt = 0; dt < 3; dt++)
            for (int nk = 0; nk < 2; nk++)
                for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                    for (int32_t M = 1; M <= 9; M += (M < 5 && !test_quick() ? 1 : 4)) {
                        int32_t K = shapes[s][0], N = shapes[s][1];
                        /* streaming (panel layouts) for every M; then above 0 rows the
                         * family's own product and sgemm (where built), on row-major and on panel
                         * layouts; a streaming call on row-major weights must be refused */
                        const int32_t all = 1 << 20;
                        one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 1, 0, IFL_ACT_NONE, all, 1, 0);
                        one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 0, 1, IFL_ACT_NONE, all, 1, 0);
                        one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 1, 0, IFL_ACT_GELU_TANH, all,
                                 1, 0);
                        one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 1, 0, IFL_ACT_NONE, all, 0, 0);
                        for (int blas = 0; blas < 2; blas++) {
                            one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 1, 0, IFL_ACT_GELU_TANH,
                                     0, 0, blas);
                            one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 1, 1, IFL_ACT_NONE, 0, 1,
                                     blas);
                            one_case(tp, &rng, (ifl_dtype)dt, nk, M, K, N, 0, 1, IFL_ACT_NONE, 0, 0,
                                     blas);
                        }
                        n_cases += 10;
                    }
        int inv = 0;
        for (int dt = 0; dt < 3; dt++)
            for (int nk = 0; nk < 2; nk++) {
                inv += batch_invariance(tp, &rng, (ifl_dtype)dt, nk, 120, 360, 0, 110, 10);
                inv += batch_invariance(tp, &rng, (ifl_dtype)dt, nk, 37, 53, 1, 12, 10);
                inv += batch_invariance(tp, &rng, (ifl_dtype)dt, nk, 600, 40, 1, 12, 10);
                /* the lm_head's dot products over several L2-sized chunks per thread, up to 47
                 * rows (over 40: avx2's widened bf16 chunks); IFL_TEST_QUICK: 1..5 rows (a
                 * group of the families' 3 or 4 rows and a part) and 42, 78 rows computed
                 * instead of 156 (this shape was 66 of test_matmul's 150 s under valgrind,
                 * 2026-12-07) */
                if (nk)
                    inv += batch_invariance(tp, &rng, (ifl_dtype)dt, nk, 96, 4200, 0, 48,
                                            test_quick() ? 5 : 10);
            }
        printf("batch invariance, %d threads: %d of 21 shapes with every row bit-identical to the "
               "row alone (1..110 rows)\n", nth, inv);
        ifl_threadpool_free(tp);
    }
    ifl_threadpool *tp2 = ifl_threadpool_new(2);
    int taken = 0;
    for (int dt = 0; dt < 3; dt++) {
        /* several chunks per band (768 x 2304: qkv's shape), one chunk, rows in groups */
        taken += pieces_taken_over(tp2, &rng, (ifl_dtype)dt, 1, 768, 2304);
        taken += pieces_taken_over(tp2, &rng, (ifl_dtype)dt, 3, 120, 512);
        taken += pieces_taken_over(tp2, &rng, (ifl_dtype)dt, 7, 600, 200);
    }
    ifl_threadpool_free(tp2);
    printf("pieces taken over: %d of 9 products with the pool's bits on both fixed schedules\n",
           taken);
    printf("%d matmul cases (%s, isa %s), worst relative L2 error vs float64: %.3g\n", n_cases,
           test_quick() ? "3 threads" : "1 and 3 threads", ifl_isa_name(ifl_isa_current()), worst);
    free(case_scratch);
    return test_finish("test_matmul");
}
