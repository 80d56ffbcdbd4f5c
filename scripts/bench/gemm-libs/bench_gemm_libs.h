/* bench_gemm_libs.h: what the GEMM benchmark's driver (bench_gemm_libs.c) and each library's file
 * (lib_ours.c, lib_openblas.c, lib_blis.c, lib_onednn.c, lib_libxsmm.c) share. A binary is the
 * driver plus one library file, so libraries that export the same symbols (BLIS and OpenBLAS both
 * export cblas_sgemm and sgemm_) never share a process. */
#ifndef BENCH_GEMM_LIBS_H
#define BENCH_GEMM_LIBS_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_isa.h"
#include "tensor.h"
#include "threadpool.h"

enum { BENCH_MAX_LIST = 16, BENCH_N_SHAPES = 5 };

typedef struct {
    const char *name;
    int32_t K, N;
    int nk; /* B given as (N, K): the tied lm_head, y = x @ W^T */
} bench_shape;

typedef struct {
    const char *isa_name;
    ifl_isa isa; /* resolved: the CPU has it */
    int threads[BENCH_MAX_LIST], n_threads;
    int32_t ms[BENCH_MAX_LIST];
    int n_ms;
    int shape_on[BENCH_N_SHAPES];
    int dtype_on[3]; /* indexed by ifl_dtype */
    int reps, warmup;
    double rotate_mb;
    int32_t gemv_rows; /* ours: streaming kernels up to this many rows; 0: the engine's default */
} bench_opts;

/* The weights of one shape in one dtype, as the library wants them: n copies of `bytes` each
 * (rotated between calls so they come from memory), and wref, the row-major f32 weights ((K, N),
 * or (N, K) for nk) as the dtype rounds them, for the check. priv is the library's. */
typedef struct {
    int n;
    size_t bytes;
    float *wref;
    void *priv;
} bench_weights;

/* One timed case. */
typedef struct {
    const bench_shape *s;
    ifl_dtype dt;
    int32_t M;
    int nth;
    ifl_threadpool *tp; /* the engine's pool of nth threads, when lib_uses_pool() */
    const float *x;     /* (M, K) */
    float *y;           /* (M, N) */
    const bench_weights *w;
    void *st; /* the library's per-case state */
} bench_call;

/* ---- each library file defines these ---- */
extern const char LIB_NAME[];
/* Bit (1 << dtype) for each weight dtype the library takes (the libraries: f32 only). */
unsigned lib_dtypes(void);
/* 1 if the library's threads are the engine's pool (ours; libxsmm's per-thread API). */
int lib_uses_pool(void);
/* Selects the library's code for o->isa where it can (exits when it cannot) and prints a "# "
 * line saying what runs: version, kernels, threading, the environment that steers them. */
void lib_setup(const bench_opts *o);
/* The library's own thread count, before the cases with nth threads. */
void lib_threads(int nth);
/* Fills w from the row-major f32 weights src for shape s (copies for rotate_mb). */
void lib_weights(bench_weights *w, const bench_shape *s, const float *src, ifl_dtype dt,
                 double rotate_mb);
void lib_weights_free(bench_weights *w);
/* Per case: NULL, or why the library cannot run it. lib_release follows either way. */
const char *lib_prepare(bench_call *c);
/* y = x @ B for weight copy `copy`, on c->nth threads. */
void lib_gemm(bench_call *c, int copy);
void lib_release(bench_call *c);

/* ---- the driver provides these ---- */
void bench_die(const char *what) __attribute__((noreturn));
/* 64-byte aligned; exits when out of memory. */
void *bench_alloc(size_t bytes);
/* Copies of `bytes` each that exceed rotate_mb MiB in total (1..256). */
int bench_copies(size_t bytes, double rotate_mb);
/* For the f32-only libraries: w->priv is an array of w->n row-major f32 copies of src. */
void bench_f32_weights(bench_weights *w, const bench_shape *s, const float *src, double rotate_mb);
void bench_f32_weights_free(bench_weights *w);

#endif
