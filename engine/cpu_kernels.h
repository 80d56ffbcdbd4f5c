/* cpu_kernels.h: the CPU backend's compute kernels: matrix products over f32/f16/bf16 weights,
 * LayerNorm, GELU, softmax, attention over KV blocks, and the memory-bandwidth and FMA probes.
 *
 * Each comes in one family per instruction set (cpu_isa.h: scalar, avx2, avx512), all in one
 * binary; a call uses the family it is given (ifl_cpu_kernels_get) or, where it takes none, the
 * process's (ifl_isa_current). Every kernel that takes (ith, nth) computes only its own share, so
 * the backend can hand it to the thread pool; the others are small enough to run on one thread.
 * Matrix products of few rows stream weights stored in 64-byte panels (tensor.h) once per call;
 * larger ones use a family's register-blocked product where it has one (avx2), the panel kernels
 * otherwise (avx512: they win at every size), or OpenBLAS sgemm when asked (--sgemm-above). Not
 * thread-safe beyond that: scratch is per thread. */
#ifndef IFL_CPU_KERNELS_H
#define IFL_CPU_KERNELS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_isa.h"
#include "tensor.h"

/* One family's kernels (cpu_kernels_isa.h); NULL where this binary lacks the family. */
struct ifl_cpu_kernels;
const struct ifl_cpu_kernels *ifl_cpu_kernels_get(ifl_isa isa);
/* What the family runs, e.g. "AVX2+FMA+F16C kernels, register-blocked above 4 rows". */
const char *ifl_cpu_kernels_desc(const struct ifl_cpu_kernels *k);

typedef enum {
    IFL_ACT_NONE = 0,
    IFL_ACT_GELU_TANH = 1,
    IFL_ACT_GELU_ERF = 2,
} ifl_act;

/* A product over (K, N) weights gives each of the pool's threads a band of W's rows (its share);
 * a band's columns come in IFL_KN_PIECES pieces, and a thread done with its own band takes over
 * the rest of a piece of a band whose thread still holds two or more (engine/cpu_kernels.c). Up to
 * IFL_KN_MAX_SHARES shares; with more, each thread keeps its band. */
#define IFL_KN_PIECES 4
#define IFL_KN_MAX_SHARES 64
typedef struct {
    atomic_int claim; /* holder's share << 16 | the next chunk of the band's rows not yet begun */
    atomic_int done;  /* chunks of this piece finished */
} ifl_kn_piece;
/* One share's pieces behind a cache line of padding, so that no two shares' pieces (each written
 * at every chunk by its own thread) and nothing else in ifl_matmul_args share a 64-byte line,
 * whatever the struct's alignment: two bands' pieces on one line made the one-row bf16 products
 * 2-11% slower (docs/perf.md, 2026-12-06). */
typedef struct {
    char pad[64];
    ifl_kn_piece piece[IFL_KN_PIECES];
} ifl_kn_share;

/* y (M, N) = [y +] x (M, K) @ op(W) + bias, then act. W is (K, N) when !w_is_nk (Conv1D weights)
 * or (N, K) when w_is_nk (the embedding used as lm_head: y = x @ W^T). Streaming calls (M up to
 * gemv_max_rows) need W in IFL_LAYOUT_KN8 (or NK4 when w_is_nk); larger ones (the family's
 * register-blocked product, or sgemm when blas is set) take any layout.
 * Use: fill the fields, ifl_matmul_plan(), run ifl_matmul_thread on every thread, then, if
 * ifl_matmul_needs_finish(), ifl_matmul_finish_thread on every thread. accumulate and act are not
 * combined (the forward pass never needs both). */
typedef struct {
    float *y;
    const float *x;
    int32_t M;
    const ifl_mat *W;
    int w_is_nk;
    const float *bias; /* (N) or NULL */
    int accumulate;    /* 1: add into y (residual) */
    ifl_act act;
    float *scratch;                  /* per-thread scratch, scratch_floats each (64-byte aligned) */
    size_t scratch_floats;           /* from ifl_matmul_scratch_floats(max_k, max_n, max_m) */
    int32_t max_k, max_n, max_m;     /* the limits the scratch was sized for */
    int32_t gemv_max_rows;           /* streaming kernels up to this many rows; above: the family's
                                        register-blocked product, else OpenBLAS (blas), else still
                                        the streaming kernels */
    int blas;                        /* 1: above gemv_max_rows use OpenBLAS sgemm (where built) */
    const struct ifl_cpu_kernels *k; /* the family; NULL: ifl_isa_current()'s */
    int mode;                        /* set by ifl_matmul_plan */
    int n_threads; /* the threads ifl_matmul_thread will run on (the pool's size): plan readies
                      the pieces below for them; 0: each thread keeps its own band */
    /* written while the threads run, each behind a cache line of padding (see ifl_kn_share) */
    char pad_nk[64];
    atomic_int nk_next; /* dot products (MM_NK): the next chunk to claim; reset by
                           ifl_matmul_plan, so plan before every run */
    ifl_kn_share kn_share[IFL_KN_MAX_SHARES]; /* MM_KN, reset by plan */
    char pad_taken[64];
    atomic_int kn_taken; /* MM_KN: pieces taken over from another share in the last run */
} ifl_matmul_args;

/* Floats of per-thread scratch (64-byte aligned) for K <= max_k, N <= max_n (of (K, N) weights)
 * and streaming calls of up to max_m rows. */
size_t ifl_matmul_scratch_floats(int32_t max_k, int32_t max_n, int32_t max_m);
/* Chooses the path; -1 if W's layout does not suit it (a streaming call on a row-major W). */
int ifl_matmul_plan(ifl_matmul_args *a);
void ifl_matmul_thread(const ifl_matmul_args *a, int ith, int nth);
int ifl_matmul_needs_finish(const ifl_matmul_args *a);
void ifl_matmul_finish_thread(const ifl_matmul_args *a, int ith, int nth);
/* Rows at or below which family k's streaming kernels beat its larger-product path for this
 * dtype (1 << 30: the streaming kernels at every size). */
int32_t ifl_matmul_default_gemv_rows(const struct ifl_cpu_kernels *k, ifl_dtype dt);

/* Streaming read bandwidth of this machine right now, in GB/s: the best of `reps` passes over a
 * fresh `bytes`-sized buffer split across the pool's threads (the access pattern of the decode
 * kernels: sequential reads). For judging decode figures against the memory floor; returns 0 if
 * the buffer cannot be allocated. */
struct ifl_threadpool;
double ifl_memory_read_gbs(struct ifl_threadpool *tp, size_t bytes, int reps);
/* The same probe's buffer kept (bench --engine reads it between slices of a decode round's
 * steps): init maps and fills `bytes` (-1 if it cannot), gbs reads it `reps` times across the
 * pool's threads and returns the fastest pass's GB/s (0 for a buffer that failed to map), free
 * unmaps. */
typedef struct {
    float *p;
    size_t n; /* floats */
} ifl_read_probe;
int ifl_read_probe_init(ifl_read_probe *pr, size_t bytes);
double ifl_read_probe_gbs(struct ifl_threadpool *tp, const ifl_read_probe *pr, int reps);
void ifl_read_probe_free(ifl_read_probe *pr);
/* Peak multiply-add rate of family k on the pool's threads, in GFLOP/s (2 per lane per FMA): the
 * best of `reps` runs of independent FMA chains on registers, for judging compute-bound figures. */
double ifl_fma_peak_gflops(struct ifl_threadpool *tp, const struct ifl_cpu_kernels *k, int reps);

/* The functions below without a family argument use ifl_isa_current()'s. */

/* In place on n values (the epilogue's erf GELU; the tanh one is a family's). */
void ifl_gelu_erf(float *x, size_t n);

/* x (n) = softmax(x) with family k's exp and max. */
void ifl_softmax_k(const struct ifl_cpu_kernels *k, float *x, int32_t n);

/* e^x for n values (max relative error ~2e-7). */
void ifl_exp(float *y, const float *x, size_t n);

/* Largest of n values (-inf for none). */
float ifl_max(const float *x, size_t n);

#endif
