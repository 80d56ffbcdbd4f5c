/* cpu_matmul_impl.h: what the matrix-product driver's files share (cpu_kernels.c, and the q8 path
 * in cpu_kernels_q8.c): the paths, chunk sizes, the per-thread scratch's layout, the epilogue and
 * the chunk counter. Internal to the CPU engine. */
#ifndef IFL_CPU_MATMUL_IMPL_H
#define IFL_CPU_MATMUL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_kernels.h"
#include "cpu_kernels_isa.h"

enum {
    MM_BLAS = 0,
    MM_KN = 1,
    MM_NK = 2,
    MM_GEMM = 3,
    MM_Q8 = 4,
    CONV_FLOATS = 1024 * 1024,   /* 4 MiB of f32: an unpacked weight block for sgemm (OpenBLAS packs
                                    it again; large blocks keep its calls efficient) */
    L2_CHUNK_BYTES = 256 * 1024, /* weights swept by every group of rows of x while in L2 */
    KN_PASS_CHUNK_BYTES = 32 * 1024, /* MM_KN's chunks when one call takes every row of x: a
                                        share taking a piece over waits for its holder to
                                        finish one, so shorter is better there */
};

static inline int32_t pad32(int32_t n)
{
    return (n + 31) & ~31;
}

static inline size_t partial_floats(const ifl_matmul_args *a)
{
    size_t p = (size_t)a->max_m * (size_t)pad32(a->max_n);
    return (p + 15) & ~(size_t)15;
}

/* Rows of x MM_Q8 keeps quantized at once: every row of a product of up to this many (each
 * thread quantizes them once), else a group at a time for each chunk. */
static inline int32_t q8_rows(const ifl_matmul_args *a)
{
    return a->max_m > IFL_Q8_MAX_M ? a->max_m : IFL_Q8_MAX_M;
}

static inline size_t conv_floats(const ifl_matmul_args *a)
{
    size_t conv = CONV_FLOATS > (size_t)pad32(a->max_k) * 32 ? CONV_FLOATS
                                                              : (size_t)pad32(a->max_k) * 32;
    return conv < IFL_GEMM_SCRATCH_FLOATS(a->max_n) ? IFL_GEMM_SCRATCH_FLOATS(a->max_n) : conv;
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
/* MM_Q8's: x's rows as int16 (q8_rows x pad32(max_k)), their scales, a group's chunk outputs. */
static inline int16_t *thread_q8_x(const ifl_matmul_args *a, int ith)
{
    return (int16_t *)(thread_conv(a, ith) + conv_floats(a));
}
static inline float *thread_q8_scales(const ifl_matmul_args *a, int ith)
{
    return (float *)(thread_q8_x(a, ith) + (size_t)q8_rows(a) * (size_t)pad32(a->max_k));
}
static inline float *thread_q8_y(const ifl_matmul_args *a, int ith)
{
    return thread_q8_scales(a, ith) + (size_t)q8_rows(a) * ((size_t)pad32(a->max_k) / 32 + 16);
}

/* Bias and activation over rows 0..M-1, columns [n0, n1) of y. */
void ifl_mm_epilogue(const ifl_matmul_args *a, int32_t N, int32_t n0, int32_t n1);
/* The next chunk of MM_NK's or MM_Q8's work for whichever share asks (nk_next, reset by
 * ifl_matmul_plan). */
int32_t ifl_mm_claim(const ifl_matmul_args *a);
/* MM_Q8, share ith (cpu_kernels_q8.c). */
void ifl_matmul_q8_thread(const ifl_matmul_args *a, int ith, int nth);

#endif
