/* cuda_backend_impl.h: what the two halves of the CUDA backend's host side share: the backend's
 * state (cuda_backend), the checked-call macros and their error messages, and the set-up entry.
 * cuda_backend.c runs steps (the forward pass, decode graphs, sampling) and frees; cuda_setup.c
 * makes the backend (weights uploaded, KV pool and activations allocated). Internal to cuda/. */
#ifndef IFL_CUDA_BACKEND_IMPL_H
#define IFL_CUDA_BACKEND_IMPL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda_backend.h"
#include "kernels.h"

#define N_BUCKETS 16

typedef struct {
    void *qkv_w, *proj_w, *fc_w, *mproj_w;
    float *ln1_w, *ln1_b, *qkv_b, *proj_b, *ln2_w, *ln2_b, *fc_b, *mproj_b;
} dev_layer;

/* Step metadata: one pinned host buffer mirrored by one device buffer, sections at fixed
 * offsets (int32 elements) so that captured graphs can keep reading the same addresses. */
typedef struct {
    size_t tokens, pos, kv_slot, n_keys, table_row; /* (max_T) each */
    size_t rows; /* (max_T) the token of each row the final LayerNorm and the lm_head compute */
    size_t tables;                                  /* (max_S, max_blocks) */
    size_t n_ints;
} meta_layout;

typedef struct {
    ifl_backend base;
    char dev_desc[160];
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws;
    size_t blas_ws_bytes;
    ifl_dtype wdt;        /* weights, GEMM inputs and the KV pool */
    cudaDataType_t wtype; /* the same, for cuBLAS */
    int32_t L, H, D, C, F, V, P, BS;
    int32_t max_T, max_S, max_blocks;
    float attn_scale;
    int erf_gelu;
    float eps;
    /* weights: one allocation */
    void *wmem;
    size_t wbytes;
    dev_layer *layers; /* (L) host array of device pointers */
    void *wte, *wpe, *lm_head;
    float *lnf_w, *lnf_b;
    /* the KV pool */
    void *kv;
    size_t kv_bytes;
    /* activations: one allocation */
    void *amem;
    size_t abytes;
    float *x, *qkv, *tmp, *logits;
    /* V rounded up to 16: the rows of wte and lm_head on the device (the rows past V zero) and
     * the logits' row stride. With V odd (50257) as the product's M and leading dimension,
     * cuBLAS picked an old kernel for the lm_head product (sm75's cutlass 64x64: 155 us at batch
     * 64 on an H200, against 5-7 us for each layer's products). Logits past V are 0, never read */
    int32_t ldv;
    void *xn, *att, *ff, *xf;
    /* metadata and sampling I/O */
    meta_layout ml;
    int32_t *h_meta, *d_meta;
    int32_t n_dev_rows; /* rows of logits the step computes on the device */
    int32_t *row_run;   /* (max_T) host: the run whose asked-for row device row j is; -1: a row
                           nobody asked for (a graph's padding, or a run with n_rows 0 in one) */
    ifl_cuda_sample_req *h_sreq, *d_sreq;
    int32_t *h_tok, *d_tok;
    void *sample_scratch;
    /* the rows' logit adjustments (logit_adj.h), uploaded only on steps where some row has any:
     * pinned host and device buffers allocated by the first such step (cuda_backend.c) */
    ifl_logit_op *h_adj_ops, *d_adj_ops; /* (adj_cap) */
    int32_t adj_cap;
    int32_t *h_adj_rows, *d_adj_rows; /* (max_S + 1) row s's ops: [rows[s], rows[s + 1]) */
    /* decode graphs */
    int use_graphs;
    int graph_failed; /* a capture failed: decode steps run eagerly */
    int32_t bucket_size[N_BUCKETS];
    int n_buckets;
    int bucket_seen[N_BUCKETS];
    cudaGraphExec_t graph[N_BUCKETS];
    int64_t steps, graph_steps;
} cuda_backend;

/* An error naming the failed call, the file and the line (out of memory: what the device has
 * free); -1. */
int ifl_cuda_fail(ifl_err *err, cudaError_t e, const char *call, const char *file, int line);
int ifl_cublas_fail(ifl_err *err, cublasStatus_t s, const char *call, const char *file, int line);

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return ifl_cuda_fail(err, e_, #call, __FILE__, __LINE__);                              \
    } while (0)

#define BLAS(call)                                                                                 \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                           \
            return ifl_cublas_fail(err, s_, #call, __FILE__, __LINE__);                            \
    } while (0)

/* A kernel launcher's status (kernels.h returns cudaError_t as int). */
#define KERNEL(call)                                                                               \
    do {                                                                                           \
        int k_ = (call);                                                                           \
        if (k_ != 0)                                                                               \
            return ifl_cuda_fail(err, (cudaError_t)k_, #call, __FILE__, __LINE__);                 \
    } while (0)

/* Sets up be (allocated by ifl_backend_alloc) for model m: the device, stream and cuBLAS handle,
 * the weights on the device, the KV pool, the activations and step buffers, the graph buckets.
 * On failure err says what and the caller frees be with the backend's free. */
int ifl_cuda_backend_init(cuda_backend *be, const ifl_model *m, ifl_err *err);

#endif
