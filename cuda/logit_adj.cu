/* logit_adj.cu: a request's logit adjustments (bias, penalties, bans: engine/logit_adj.h) applied
 * on the device before the sampler (ifl_cuda_logit_adjust, kernels.h). One block per row; its
 * threads take the row's ops in turn, phase by phase with a barrier between phases, as the host
 * applies them. Within a phase every id is distinct (bans may repeat, and all write -inf), so no
 * two threads race on a logit. The formula is the host's own (ifl_logit_op_apply), rounded step
 * by step, so the device row equals the CPU's bit for bit. */
#include <stdint.h>

#include <cuda_runtime.h>

#include "kernels.h"
#include "logit_adj.h"

namespace
{

constexpr int kBlock = 256;

__global__ void __launch_bounds__(kBlock)
    adjust_kernel(float *__restrict__ logits, int32_t ld, int32_t V,
                  const ifl_logit_op *__restrict__ ops, const int32_t *__restrict__ row_ops)
{
    const int32_t s = (int32_t)blockIdx.x;
    const int32_t lo = row_ops[s], hi = row_ops[s + 1];
    if (lo >= hi)
        return; /* the whole block leaves together: no barrier is left waiting */
    float *x = logits + (size_t)s * (size_t)ld;
    for (int phase = 0; phase < IFL_LOGIT_PHASES; phase++) {
        for (int32_t i = lo + (int32_t)threadIdx.x; i < hi; i += kBlock) {
            const ifl_logit_op op = ops[i];
            if (op.phase == phase && op.id >= 0 && op.id < V)
                x[op.id] = ifl_logit_op_apply(x[op.id], &op);
        }
        __syncthreads();
    }
}

} // namespace

extern "C" int ifl_cuda_logit_adjust(float *logits, int32_t ld, int32_t V, const ifl_logit_op *ops,
                                     const int32_t *row_ops, int32_t S, cudaStream_t stream)
{
    if (S <= 0)
        return 0;
    if (ld < V)
        return (int)cudaErrorInvalidValue;
    adjust_kernel<<<S, kBlock, 0, stream>>>(logits, ld, V, ops, row_ops);
    return (int)cudaGetLastError();
}
