/* cuda_backend.h: the GPT-2 forward pass on an NVIDIA GPU (CUDA + cuBLAS) behind the backend
 * interface (backend.h), and the probe that says whether a usable GPU is present.
 *
 * Weights live on the GPU in bf16 (f16 when the model's matrices are f16), uploaded once; the KV
 * pool is paged like the CPU's, in the weights' dtype; the residual stream, LayerNorm statistics,
 * softmax and GEMM accumulation are f32. All work goes to one stream with one cuBLAS handle and
 * workspace. Decode-only steps replay a CUDA graph captured per batch-size bucket. */
#ifndef IFL_CUDA_BACKEND_H
#define IFL_CUDA_BACKEND_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 0 when device 0 is usable, with its description ("NVIDIA H200, sm_90, 139.8 GiB") in desc;
 * -1 with the reason in err (no driver, no device, compute capability too old). */
int ifl_cuda_probe(char *desc, int cap, ifl_err *err);

ifl_backend *ifl_cuda_backend_new(const ifl_model *m, const ifl_backend_params *p, ifl_err *err);

#ifdef __cplusplus
}
#endif

#endif
