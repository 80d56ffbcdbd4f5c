/* lib_blis.c: BLIS (Debian's libblis-dev, the pthreads build) in the GEMM benchmark: the typed API
 * bli_sgemm with row and column strides (so the (N, K) lm_head is only a stride change, and no
 * cblas_sgemm symbol is needed); bli_thread_set_num_threads. Its kernels ("subconfiguration") are
 * chosen at bli_init from cpuid (0.9 takes CPUs it does not know for haswell), or from
 * $BLIS_ARCH_TYPE, the arch_t number; --isa avx2 / avx512 set it to BLIS_ARCH_HASWELL / BLIS_ARCH_SKX
 * when unset, and lib_setup checks what BLIS picked. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include <blis.h>

#include "bench_gemm_libs.h"

const char LIB_NAME[] = "blis";

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
    char v[16];
    int want = o->isa == IFL_ISA_AVX2     ? (int)BLIS_ARCH_HASWELL
               : o->isa == IFL_ISA_AVX512 ? (int)BLIS_ARCH_SKX
                                          : -1;
    if (want >= 0 && !getenv("BLIS_ARCH_TYPE")) {
        snprintf(v, sizeof v, "%d", want);
        setenv("BLIS_ARCH_TYPE", v, 1);
    }
    bli_init();
    arch_t id = bli_arch_query_id();
    const char *env = getenv("BLIS_ARCH_TYPE");
    printf("# blis: %s; kernels %s; threading %s; BLIS_ARCH_TYPE=%s\n", bli_info_get_version_str(),
           bli_arch_string(id),
           bli_info_get_enable_pthreads()  ? "pthreads"
           : bli_info_get_enable_openmp() ? "OpenMP"
                                          : "none",
           env ? env : "(unset)");
    if (want >= 0 && (int)id != want) {
        fprintf(stderr,
                "bench_gemm_libs: --isa %s: BLIS runs its %s kernels; BLIS_ARCH_TYPE must be %d "
                "(%s) in this BLIS\n",
                o->isa_name, bli_arch_string(id), want, bli_arch_string((arch_t)want));
        exit(1);
    }
    if (o->isa == IFL_ISA_SCALAR)
        printf("# --isa scalar: BLIS runs its %s kernels\n", bli_arch_string(id));
}

void lib_threads(int nth)
{
    bli_thread_set_num_threads(nth);
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
    float *w = ((float *const *)c->w->priv)[copy];
    float one = 1.0f, zero = 0.0f;
    /* B (k, n) is w[k * N + n], or w[n * K + k] for the (N, K) lm_head */
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, c->M, s->N, s->K, &one, (float *)c->x, s->K, 1,
              w, s->nk ? 1 : s->N, s->nk ? s->K : 1, &zero, c->y, s->N, 1);
}

void lib_release(bench_call *c)
{
    (void)c;
}
