/* lib_openblas.c: OpenBLAS (Debian's libopenblas-dev) in the GEMM benchmark: cblas_sgemm,
 * row-major, B transposed for the (N, K) lm_head; openblas_set_num_threads. Its kernels are chosen
 * when the library loads, from $OPENBLAS_CORETYPE if set (Debian builds DYNAMIC_ARCH), else from
 * cpuid, which 0.3.21 only knows up to Cooper Lake: on newer CPUs it falls back to Prescott (SSE3)
 * kernels. So --isa avx2 needs OPENBLAS_CORETYPE=Haswell and --isa avx512 OPENBLAS_CORETYPE=SkylakeX
 * in the environment before the program starts (bench-gemm-libs.sh sets them); lib_setup checks
 * the kernels it got. */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include <cblas.h>

#include "bench_gemm_libs.h"

const char LIB_NAME[] = "openblas";

unsigned lib_dtypes(void)
{
    return 1u << IFL_DTYPE_F32;
}

int lib_uses_pool(void)
{
    return 0;
}

void lib_setup(const bench_opts *o)
{
    const char *core = openblas_get_corename(), *env = getenv("OPENBLAS_CORETYPE");
    int par = openblas_get_parallel();
    printf("# openblas: %s; kernels %s; threading %s; OPENBLAS_CORETYPE=%s\n",
           openblas_get_config(), core, par == 2 ? "OpenMP" : par == 1 ? "pthreads" : "none",
           env ? env : "(unset)");
    int avx512 = !strcasecmp(core, "skylakex") || !strcasecmp(core, "cooperlake") ||
                 !strcasecmp(core, "sapphirerapids");
    if ((o->isa == IFL_ISA_AVX2 && strcasecmp(core, "haswell") != 0) ||
        (o->isa == IFL_ISA_AVX512 && !avx512)) {
        fprintf(stderr,
                "bench_gemm_libs: --isa %s: OpenBLAS runs its %s kernels; start the program with "
                "OPENBLAS_CORETYPE=%s (read at load; bench-gemm-libs.sh sets it)\n",
                o->isa_name, core, o->isa == IFL_ISA_AVX2 ? "Haswell" : "SkylakeX");
        exit(1);
    }
    if (o->isa == IFL_ISA_SCALAR)
        printf("# --isa scalar: OpenBLAS has no scalar mode; it runs its %s kernels\n", core);
}

void lib_threads(int nth)
{
    openblas_set_num_threads(nth);
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
    (void)c;
    return NULL;
}

void lib_gemm(bench_call *c, int copy)
{
    const bench_shape *s = c->s;
    const float *w = ((float *const *)c->w->priv)[copy];
    cblas_sgemm(CblasRowMajor, CblasNoTrans, s->nk ? CblasTrans : CblasNoTrans, c->M, s->N, s->K,
                1.0f, c->x, s->K, w, s->nk ? s->K : s->N, 0.0f, c->y, s->N);
}

void lib_release(bench_call *c)
{
    (void)c;
}
