/* lib_ours.c: inflight's own matrix-product kernels in the GEMM benchmark, through the public API
 * of engine/cpu_kernels.h, as tests/unit/test_matmul.c drives it: weights repacked into the panel
 * layouts (IFL_LAYOUT_KN8 for (K, N), IFL_LAYOUT_NK4 for the (N, K) lm_head) in f32, bf16 or f16,
 * ifl_matmul_plan, then ifl_matmul_thread (and ifl_matmul_finish_thread) on the engine's thread
 * pool, in the kernel family ifl_isa_select picks from --isa. Rows: the streaming kernels up to
 * gemv_max_rows, --gemv-rows or else the engine's default. With the per-family kernels
 * (BENCH_IFL_FAMILIES, which the script defines when cpu_kernels.h has ifl_cpu_kernels_get) the
 * default is ifl_matmul_default_gemv_rows, and larger products take the family's own path (blas
 * stays 0: never OpenBLAS). Before them, larger products went to OpenBLAS, which has its own
 * column, so the default is then the streaming kernels at every M. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gemm_libs.h"
#include "cpu_kernels.h"

const char LIB_NAME[] = "ours";

static int32_t gemv_rows_opt; /* --gemv-rows; 0: the default */

static int32_t gemv_rows(ifl_dtype dt)
{
    if (gemv_rows_opt > 0)
        return gemv_rows_opt;
#ifdef BENCH_IFL_FAMILIES
    return ifl_matmul_default_gemv_rows(ifl_cpu_kernels_get(ifl_isa_current()), dt);
#else
    (void)dt;
    return INT32_MAX;
#endif
}

typedef struct {
    ifl_matmul_args a;
    float *scratch;
} ours_state;

/* The packed copies of one dtype: mats[i].data points into store. */
typedef struct {
    ifl_mat *mats;
    char *store;
} ours_weights;

unsigned lib_dtypes(void)
{
    return 1u << IFL_DTYPE_F32 | 1u << IFL_DTYPE_BF16 | 1u << IFL_DTYPE_F16;
}

int lib_uses_pool(void)
{
    return 1;
}

void lib_setup(const bench_opts *o)
{
    ifl_err err;
    if (ifl_isa_select(o->isa, &err)) {
        fprintf(stderr, "bench_gemm_libs: --isa %s: %s\n", o->isa_name, err.msg);
        exit(2);
    }
    gemv_rows_opt = o->gemv_rows;
#ifdef BENCH_IFL_FAMILIES
    const char *desc = ifl_cpu_kernels_desc(ifl_cpu_kernels_get(ifl_isa_current()));
#else
    const char *desc = "one kernel set (before the per-family kernels)";
#endif
    char r32[16], r16[16];
    snprintf(r32, sizeof r32, "%d", (int)gemv_rows(IFL_DTYPE_F32));
    snprintf(r16, sizeof r16, "%d", (int)gemv_rows(IFL_DTYPE_BF16));
    printf("# ours: inflight's kernels (cpu_kernels.h), family %s: %s; streaming kernels up to "
           "%s (f32) / %s (16-bit) rows; weights f32, bf16, f16 (the libraries take f32 only)\n",
           ifl_isa_name(ifl_isa_current()), desc,
           gemv_rows(IFL_DTYPE_F32) >= 1 << 30 ? "all" : r32,
           gemv_rows(IFL_DTYPE_BF16) >= 1 << 30 ? "all" : r16);
}

void lib_threads(int nth)
{
    (void)nth;
}

void lib_weights(bench_weights *w, const bench_shape *s, const float *src, ifl_dtype dt,
                 double rotate_mb)
{
    int32_t rows = s->nk ? s->N : s->K, cols = s->nk ? s->K : s->N;
    size_t n = (size_t)rows * (size_t)cols;
    ifl_layout lay = s->nk ? IFL_LAYOUT_NK4 : IFL_LAYOUT_KN8;
    ifl_mat rm = {.dtype = IFL_DTYPE_F32, .layout = IFL_LAYOUT_ROWS, .rows = rows, .cols = cols,
                  .data = src};
    ours_weights *ow = calloc(1, sizeof *ow);
    if (!ow)
        bench_die("out of memory");
    w->priv = ow;
    w->bytes = (ifl_layout_elems(lay, dt, rows, cols) * ifl_dtype_size(dt) + 63) & ~(size_t)63;
    w->n = bench_copies(w->bytes, rotate_mb);
    ow->store = bench_alloc(w->bytes * (size_t)w->n);
    ow->mats = calloc((size_t)w->n, sizeof *ow->mats);
    if (!ow->mats)
        bench_die("out of memory");
    ifl_mat_repack(ow->store, lay, dt, &rm, NULL, NULL);
    for (int i = 0; i < w->n; i++) {
        if (i > 0)
            memcpy(ow->store + (size_t)i * w->bytes, ow->store, w->bytes);
        ow->mats[i] = (ifl_mat){.dtype = dt, .layout = lay, .rows = rows, .cols = cols,
                                .data = ow->store + (size_t)i * w->bytes};
    }
    /* the reference sees the weights as the dtype rounds them */
    w->wref = bench_alloc(n * sizeof(float));
    void *t = bench_alloc(n * ifl_dtype_size(dt));
    ifl_convert_from_f32(t, dt, src, n);
    ifl_convert_to_f32(w->wref, dt, t, n);
    free(t);
}

void lib_weights_free(bench_weights *w)
{
    ours_weights *ow = w->priv;
    free(ow->mats);
    free(ow->store);
    free(ow);
    free(w->wref);
    w->priv = w->wref = NULL;
}

const char *lib_prepare(bench_call *c)
{
    const bench_shape *s = c->s;
    ours_state *st = calloc(1, sizeof *st); /* zero: fields added later (a kernel table) default */
    if (!st)
        bench_die("out of memory");
    c->st = st;
    size_t sf = ifl_matmul_scratch_floats(s->K, s->N, c->M);
    st->scratch = bench_alloc(sf * (size_t)c->nth * sizeof(float));
    memset(st->scratch, 0, sf * (size_t)c->nth * sizeof(float));
    st->a.y = c->y;
    st->a.x = c->x;
    st->a.M = c->M;
    st->a.w_is_nk = s->nk;
    st->a.scratch = st->scratch;
    st->a.scratch_floats = sf;
    st->a.max_k = s->K;
    st->a.max_n = s->N;
    st->a.max_m = c->M;
    st->a.gemv_max_rows = gemv_rows(c->dt);
    st->a.n_threads = c->nth;
    st->a.W = &((const ours_weights *)c->w->priv)->mats[0];
    if (ifl_matmul_plan(&st->a))
        return "ifl_matmul_plan refused the case";
    return NULL;
}

static void ours_task(void *st, int ith, int nth)
{
    ifl_matmul_thread(&((ours_state *)st)->a, ith, nth);
}

static void ours_finish(void *st, int ith, int nth)
{
    ifl_matmul_finish_thread(&((ours_state *)st)->a, ith, nth);
}

void lib_gemm(bench_call *c, int copy)
{
    ours_state *st = c->st;
    st->a.W = &((const ours_weights *)c->w->priv)->mats[copy];
    if (ifl_matmul_plan(&st->a))
        bench_die("ifl_matmul_plan refused a packed weight");
    ifl_threadpool_run(c->tp, ours_task, st);
    if (ifl_matmul_needs_finish(&st->a))
        ifl_threadpool_run(c->tp, ours_finish, st);
}

void lib_release(bench_call *c)
{
    ours_state *st = c->st;
    if (st)
        free(st->scratch);
    free(st);
    c->st = NULL;
}
