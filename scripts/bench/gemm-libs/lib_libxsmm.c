/* lib_libxsmm.c: libxsmm 1.17 (Debian's libxsmm-dev) in the GEMM benchmark. libxsmm is a library
 * of JIT small-matrix kernels; for matrices this size its own path is the GEMM handle
 * (libxsmm_gemm_handle_init: tiles of JIT kernels, the path libxsmm_xgemm_omp takes), run here by
 * libxsmm_gemm_thread on every thread of the engine's pool (its API for external threads), so no
 * OpenMP is needed. Linked with libxsmmnoblas: a case libxsmm would hand to a BLAS fails loudly
 * instead of timing OpenBLAS. libxsmm is column-major: y^T (N, M) = op(w) (N, K) x^T (K, M), op a
 * transpose for the (N, K) lm_head. --isa avx2 sets its JIT target to hsw (as LIBXSMM_TARGET=hsw
 * does); --isa avx512 leaves it its best, and lib_setup checks that it is AVX-512. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxsmm.h>

#include "bench_gemm_libs.h"

const char LIB_NAME[] = "libxsmm";

typedef struct {
    libxsmm_gemm_blob blob; /* the handle lives here */
    libxsmm_gemm_handle *h;
    void *scratch;
    const float *w, *x;
    float *y;
} xsmm_state;

unsigned lib_dtypes(void)
{
    return 1u << IFL_DTYPE_F32;
}

int lib_uses_pool(void)
{
    return 1;
}

void lib_setup(const bench_opts *o)
{
    libxsmm_init();
    if (o->isa == IFL_ISA_AVX2)
        libxsmm_set_target_arch("hsw");
    const char *arch = libxsmm_get_target_arch(), *env = getenv("LIBXSMM_TARGET");
    /* Debian's build leaves the version macros at INT_MAX: the script prints the package's */
    printf("# libxsmm: libxsmm_gemm_handle_init + libxsmm_gemm_thread on the engine's thread "
           "pool; JIT target %s; LIBXSMM_TARGET=%s\n",
           arch, env ? env : "(unset)");
    int id = libxsmm_get_target_archid();
    if ((o->isa == IFL_ISA_AVX2 && strcmp(arch, "hsw") != 0) ||
        (o->isa == IFL_ISA_AVX512 && id < LIBXSMM_X86_AVX512_CORE)) {
        fprintf(stderr, "bench_gemm_libs: --isa %s: libxsmm targets %s\n", o->isa_name, arch);
        exit(1);
    }
    if (o->isa == IFL_ISA_SCALAR)
        printf("# --isa scalar: libxsmm JITs for %s\n", arch);
}

void lib_threads(int nth)
{
    (void)nth;
}

void lib_weights(bench_weights *w, const bench_shape *s, const float *src, ifl_dtype dt,
                 double rotate_mb)
{
    (void)dt;
    bench_f32_weights(w, s, src, rotate_mb);
}

void lib_weights_free(bench_weights *w)
{
    bench_f32_weights_free(w);
}

const char *lib_prepare(bench_call *c)
{
    const bench_shape *s = c->s;
    xsmm_state *st = calloc(1, sizeof *st);
    if (!st)
        bench_die("out of memory");
    c->st = st;
    libxsmm_blasint m = s->N, n = c->M, k = s->K, lda = s->nk ? s->K : s->N, ldb = s->K;
    libxsmm_blasint ldc = s->N;
    float alpha = 1.0f, beta = 0.0f;
    char ta = s->nk ? 'T' : 'N', tb = 'N';
    st->h = libxsmm_gemm_handle_init(&st->blob, LIBXSMM_GEMM_PRECISION_F32,
                                     LIBXSMM_GEMM_PRECISION_F32, &ta, &tb, &m, &n, &k, &lda, &ldb,
                                     &ldc, &alpha, &beta, LIBXSMM_GEMM_HANDLE_FLAG_AUTO, c->nth);
    if (!st->h)
        return "libxsmm_gemm_handle_init gave no handle";
    size_t sb = libxsmm_gemm_handle_get_scratch_size(st->h);
    st->scratch = sb ? bench_alloc(sb) : NULL;
    return NULL;
}

static void xsmm_task(void *ctx, int ith, int nth)
{
    xsmm_state *st = ctx;
    libxsmm_gemm_thread(st->h, st->scratch, st->w, st->x, st->y, ith, nth);
}

void lib_gemm(bench_call *c, int copy)
{
    xsmm_state *st = c->st;
    st->w = ((float *const *)c->w->priv)[copy];
    st->x = c->x;
    st->y = c->y;
    ifl_threadpool_run(c->tp, xsmm_task, st);
}

void lib_release(bench_call *c)
{
    xsmm_state *st = c->st;
    if (st)
        free(st->scratch);
    free(st);
    c->st = NULL;
}
