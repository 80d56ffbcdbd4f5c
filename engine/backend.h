/* backend.h: the step interface every compute backend implements (CPU here, CUDA in cuda/).
 *
 * One call runs one ragged batch: S sequences, each contributing a run of tokens (a prefill chunk
 * or a single decode token) at its own positions, with its own KV blocks from the backend's paged
 * pool. The step appends the runs' keys and values to the pool and returns the logits of the last
 * token of every run. Which blocks a sequence owns is decided outside (kv.h, the batcher): the
 * backend only stores and reads them. Modelled on ggml's backend struct: a table of function
 * pointers; entries marked optional may be NULL. */
#ifndef IFL_BACKEND_H
#define IFL_BACKEND_H

#include <stdint.h>

#include "error.h"
#include "model.h"
#include "sampler.h"

typedef struct {
    int32_t n_seqs;           /* S */
    int32_t n_tokens;         /* T = sum of run lengths */
    const int32_t *tokens;    /* (T) the runs back to back */
    const int32_t *run_start; /* (S + 1) run s is tokens[run_start[s] .. run_start[s+1]) */
    const int32_t *pos0;      /* (S) position of the first token of run s */
    const int32_t *const *block_tables; /* (S) KV block ids of sequence s, in position order */
    const int32_t *n_blocks;            /* (S) length of each block table */
} ifl_batch;

typedef struct {
    int32_t n_threads;           /* CPU threads; 0 = one per core */
    int32_t kv_blocks;           /* blocks in the KV pool */
    int32_t kv_block_size;       /* tokens per block */
    int32_t max_tokens;          /* most tokens in one step (T) */
    int32_t max_seqs;            /* most sequences in one step (S) */
    int32_t kv_elem_bytes;       /* bytes of one KV element as the backend stores it (CPU f32: 4,
                                    CUDA 16-bit: 2), for sizing the pool by memory; 0: 4 */
    int32_t sgemm_above;         /* CPU: matrix products of more rows use OpenBLAS sgemm; 0: the
                                    measured default (never with AVX-512); for comparisons */
    struct ifl_threadpool *pool; /* CPU: a pool to share with other backends (their steps then
                                    take turns region by region); NULL: a pool of its own */
} ifl_backend_params;

typedef struct ifl_backend ifl_backend;

/* What one run's next token is drawn with, for backends that sample on the device. Draw `draw` of
 * a request with seed `seed` uses the Philox stream value ifl_philox_bits53(seed, draw) (philox.h),
 * on every backend, so a seeded request reproduces however it is batched. */
typedef struct {
    ifl_sampling sampling;
    uint64_t seed;
    uint64_t draw;  /* tokens the request has generated so far */
    int32_t active; /* 0: no token wanted (a prefill chunk that does not end the prompt) */
} ifl_sample_req;

typedef struct {
    const char *name;
    void (*free)(ifl_backend *be);
    /* Runs one step and writes logits (S, V): row s is the last token of run s. */
    int (*step)(ifl_backend *be, const ifl_batch *batch, float *logits, ifl_err *err);
    /* Optional: runs one step and draws the next token of every active run on the device, so that
     * only S token ids cross back instead of S x V logits. tokens[s] is -1 for inactive runs. */
    int (*step_sample)(ifl_backend *be, const ifl_batch *batch, const ifl_sample_req *req,
                       int32_t *tokens, ifl_err *err);
    /* Optional: a one-line description of the device and its settings. NULL: name only. */
    void (*describe)(const ifl_backend *be, char *buf, int cap);
} ifl_backend_ops;

struct ifl_backend {
    const ifl_backend_ops *ops;
    const ifl_model *model;
    ifl_backend_params params; /* as granted (defaults filled in) */
};

/* Fills zero fields with defaults that fit the model: 16-token blocks, enough blocks for
 * max_seqs full contexts capped by kv_mem_mb of memory, max_tokens 512, max_seqs 64. */
void ifl_backend_params_fill(ifl_backend_params *p, const ifl_model *m, int64_t kv_mem_mb);

/* For backend constructors: allocates a backend struct of `size` bytes (zeroed) whose first member
 * is an ifl_backend, fills that in (ops, model, the params with defaults: KV elements of
 * kv_elem_bytes unless the caller set them, the pool capped by kv_mem_mb). NULL when out of memory.
 */
void *ifl_backend_alloc(size_t size, const ifl_backend_ops *ops, const ifl_model *m,
                        const ifl_backend_params *p, int32_t kv_elem_bytes, int64_t kv_mem_mb,
                        ifl_err *err);

/* Checks a batch against the model and the backend's limits; the error names the field. */
int ifl_batch_validate(const ifl_backend *be, const ifl_batch *b, ifl_err *err);

/* The CPU backend (OpenBLAS + own kernels). */
ifl_backend *ifl_cpu_backend_new(const ifl_model *m, const ifl_backend_params *p, ifl_err *err);

/* Which device a backend runs on, as asked for by --device. */
typedef enum {
    IFL_DEVICE_AUTO =
        0, /* the GPU when this build has the CUDA backend and a GPU works, else CPU */
    IFL_DEVICE_CPU = 1,
    IFL_DEVICE_CUDA = 2,
} ifl_device;

/* "auto" | "cpu" | "cuda"; -1 for anything else. */
int ifl_device_parse(const char *s, ifl_device *out);

/* Resolves AUTO: writes the chosen device and, into why, one line saying why (e.g. "auto: NVIDIA
 * H200 found" or "auto: this build has no CUDA backend"). CUDA asked for without a usable GPU is an
 * error naming the reason. */
int ifl_device_resolve(ifl_device want, ifl_device *got, char *why, int why_cap, ifl_err *err);

/* How the model must be loaded for a device's backend (the CPU wants its panel layouts). */
int ifl_device_wants_cpu_layout(ifl_device d);

/* A backend on a resolved device (CPU or CUDA). The CUDA backend holds weights in bf16, or f16
 * when the model's matrices are f16 (--weights f16). */
ifl_backend *ifl_backend_new(ifl_device d, const ifl_model *m, const ifl_backend_params *p,
                             ifl_err *err);

/* Runs the step and draws every active run's next token: on the device when the backend can,
 * else from host logits with the CPU sampler (logits: S x V scratch; sampler: V candidates). */
int ifl_backend_step_sample(ifl_backend *be, const ifl_batch *b, const ifl_sample_req *req,
                            int32_t *tokens, float *logits, ifl_sampler *sampler, ifl_err *err);

static inline int ifl_backend_step(ifl_backend *be, const ifl_batch *b, float *logits, ifl_err *err)
{
    return be->ops->step(be, b, logits, err);
}
static inline void ifl_backend_free(ifl_backend *be)
{
    if (be)
        be->ops->free(be);
}

#endif
