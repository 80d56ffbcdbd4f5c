/* bench_lm_head_cublas.c: the lm_head product (logits = x W^T, W the (V, C) vocabulary matrix,
 * bf16, f32 out) through cublasGemmEx in the layouts the CUDA backend could use, timed with CUDA
 * events on an otherwise idle GPU: which one cuBLAS serves well at decode batch sizes.
 *   TN  V    : W as stored (column-major (C, V)), M = V = 50257, ldc = V (the first backend)
 *   TN  V/ldp: the same, ldc padded to a multiple of 16
 *   TN  pad  : W with zero rows up to the padded V, M = ldc = padded V (the backend now)
 *   NN  pad  : a transposed copy of W (column-major (Vp, C)), M = ldc = padded V
 * Build and run on a GPU machine: nvcc -O2 -o /tmp/blm scripts/bench/bench_lm_head_cublas.c -lcublas
 * && /tmp/blm [V C]. Prints one line per layout and batch: microseconds per product (median of
 * 50 after 10 warm-up) and the weight bytes over that time. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define OK(x)                                                                                      \
    do {                                                                                           \
        int e_ = (int)(x);                                                                         \
        if (e_) {                                                                                  \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, e_);                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int V = argc > 2 ? atoi(argv[1]) : 50257, C = argc > 2 ? atoi(argv[2]) : 768;
    int Vp = (V + 15) / 16 * 16, maxS = 256;
    void *W, *x;
    float *y;
    OK(cudaMalloc(&W, (size_t)Vp * C * 2));
    OK(cudaMemset(W, 0, (size_t)Vp * C * 2)); /* zeros: the timing does not depend on values */
    OK(cudaMalloc(&x, (size_t)maxS * C * 2));
    OK(cudaMemset(x, 0, (size_t)maxS * C * 2));
    OK(cudaMalloc((void **)&y, (size_t)maxS * Vp * 4));
    cublasHandle_t h;
    OK(cublasCreate(&h));
    cudaEvent_t e0, e1;
    OK(cudaEventCreate(&e0));
    OK(cudaEventCreate(&e1));
    const char *names[] = {"TN  V    ", "TN  V/ldp", "TN  pad  ", "NN  pad  "};
    const int batches[] = {1, 8, 64, 256};
    const float one = 1.0f, zero = 0.0f;
    for (int l = 0; l < 4; l++)
        for (int bi = 0; bi < 4; bi++) {
            int S = batches[bi], M = l < 2 ? V : Vp, ldc = l == 0 ? V : Vp;
            cublasOperation_t ta = l == 3 ? CUBLAS_OP_N : CUBLAS_OP_T;
            int lda = l == 3 ? Vp : C;
            float t[50];
            for (int it = 0; it < 60; it++) {
                OK(cudaEventRecord(e0, 0));
                OK(cublasGemmEx(h, ta, CUBLAS_OP_N, M, S, C, &one, W, CUDA_R_16BF, lda, x,
                                CUDA_R_16BF, C, &zero, y, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
                OK(cudaEventRecord(e1, 0));
                OK(cudaEventSynchronize(e1));
                if (it >= 10)
                    OK(cudaEventElapsedTime(&t[it - 10], e0, e1));
            }
            qsort(t, 50, sizeof t[0], cmp_f);
            double us = t[25] * 1e3;
            printf("lm_head %s batch %3d: %8.1f us  %6.0f GB/s of weights\n", names[l], S, us,
                   (double)V * C * 2 / (us * 1e-6) / 1e9);
        }
    cublasDestroy(h);
    cudaFree(W);
    cudaFree(x);
    cudaFree(y);
    return 0;
}
