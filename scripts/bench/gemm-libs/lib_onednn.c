/* lib_onednn.c: oneDNN 2.6 (Debian's libdnnl-dev) in the GEMM benchmark: dnnl_sgemm (row-major,
 * B transposed for the (N, K) lm_head). Debian builds it with the OpenMP runtime
 * (DNNL_CPU_RUNTIME OMP), so the thread count is omp_set_num_threads. --isa avx2 caps its JIT at
 * AVX2 with dnnl_set_max_cpu_isa (the script also sets ONEDNN_MAX_CPU_ISA=AVX2); --isa avx512 leaves
 * it its best. lib_setup checks the ISA it reports. */
#include <stdio.h>
#include <stdlib.h>

#include <dnnl.h>
#include <dnnl_debug.h>
#include <omp.h>

#include "bench_gemm_libs.h"

const char LIB_NAME[] = "onednn";

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
    if (o->isa == IFL_ISA_AVX2 && dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success)
        fprintf(stderr, "bench_gemm_libs: dnnl_set_max_cpu_isa(avx2) refused\n");
    const dnnl_version_t *v = dnnl_version();
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *env = getenv("ONEDNN_MAX_CPU_ISA");
    printf("# onednn: %d.%d.%d, dnnl_sgemm; ISA %s; threading OpenMP (up to %d threads); "
           "ONEDNN_MAX_CPU_ISA=%s\n",
           v->major, v->minor, v->patch, dnnl_cpu_isa2str(isa), omp_get_max_threads(),
           env ? env : "(unset)");
    unsigned u = (unsigned)isa, core = (unsigned)dnnl_cpu_isa_avx512_core;
    if ((o->isa == IFL_ISA_AVX2 && (u & ~(unsigned)dnnl_cpu_isa_avx2) != 0) ||
        (o->isa == IFL_ISA_AVX512 && (u & core) != core)) {
        fprintf(stderr, "bench_gemm_libs: --isa %s: oneDNN's ISA is %s\n", o->isa_name,
                dnnl_cpu_isa2str(isa));
        exit(1);
    }
    if (o->isa == IFL_ISA_SCALAR)
        printf("# --isa scalar: oneDNN runs its %s code\n", dnnl_cpu_isa2str(isa));
}

void lib_threads(int nth)
{
    omp_set_num_threads(nth);
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
    if (dnnl_sgemm('N', s->nk ? 'T' : 'N', c->M, s->N, s->K, 1.0f, c->x, s->K, w,
                   s->nk ? s->K : s->N, 0.0f, c->y, s->N) != dnnl_success)
        bench_die("dnnl_sgemm failed");
}

void lib_release(bench_call *c)
{
    (void)c;
}
